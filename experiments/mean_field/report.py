"""The mean_field quick runs against the discretised chain's exact stationary variance, 1 process and 2 ranks.

Reads the committed run folders ``results/quick`` (one process) and ``results/quick-2ranks`` (``torchrun
--nproc_per_node=2 … --set parallel=particles``) and prints, per run, the per-coordinate variance of ``x_i − x̄`` at
each evaluation after the burn-in (every 250 steps: the deviations decorrelate by ``(1 − η(a + k))^{250} ≈ 4e-12``,
so the evaluations are independent draws of the stationary law), their mean with a 95 % t interval, and the exact
value ``(1 − 1/M)·β/((a + k)(1 − η(a + k)/2))``; then the largest difference between the two runs' metrics.

Regenerate the folders, then this table::

    meanfield run experiments/mean_field/config.toml --preset quick --set threads=1 \\
        --out experiments/mean_field/results/quick
    torchrun --nproc_per_node=2 -m meanfield run experiments/mean_field/config.toml --preset quick \\
        --set threads=1 --set parallel=particles --out experiments/mean_field/results/quick-2ranks
    python experiments/mean_field/report.py          # prints and writes results/tables.md
"""

from __future__ import annotations

import json
from pathlib import Path

from meanfield._io import write_text_atomic
from meanfield.config import load_toml
from meanfield.studies.stats import interval_cell, t_interval
from meanfield.tasks.mean_field import stationary_variance

HERE = Path(__file__).resolve().parent
RUNS = {"1 process": "quick", "2 ranks, parallel=particles": "quick-2ranks"}
BURN_IN = 250  # steps: the initial N(0, 9) law has contracted by (1 − 0.1)^250 ≈ 4e-12


def evaluations(folder: Path) -> list[dict]:
    return [
        r for r in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines()) if "variance" in r
    ]


def main() -> str:
    lines = [
        "| run | M | evaluations | variance (mean, 95 % CI) | exact (1 − 1/M)σ²_η | ratio | wall time of the steps |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    finals = {}
    for name, sub in RUNS.items():
        folder = HERE / "results" / sub
        if not (folder / "summary.json").exists():
            lines.append(
                f"| {name} | — | — | missing: run the commands in this script's docstring | — | — | — |"
            )
            continue
        summary = json.loads((folder / "summary.json").read_text())
        model = load_toml(folder / "config.toml")["model"]
        M = model["n_particles"]
        exact = (1 - 1 / M) * stationary_variance(model["a"], model["k"], model["beta"], model["eta"])
        values = [r["variance"] for r in evaluations(folder) if r["step"] >= BURN_IN]
        ci = t_interval(values)
        lines.append(
            f"| {name} | {M} | {ci.n} | {interval_cell(ci.mean, ci.lo, ci.hi, 6)} | {exact:.6f} | "
            f"{ci.mean / exact:.5f} | {summary['wall_time_s']:.1f} s |"
        )
        finals[name] = evaluations(folder)
    if len(finals) == 2:
        a, b = finals.values()
        worst = max(abs(x[k] - y[k]) for x, y in zip(a, b) for k in ("variance", "energy", "centre"))
        lines.append("")
        lines.append(
            f"Largest difference between the two runs' evaluations (variance, energy, centre): {worst:.3g}."
        )
    text = "\n".join(lines) + "\n"
    print(text, end="")
    write_text_atomic(HERE / "results" / "tables.md", text)
    return text


if __name__ == "__main__":
    main()
