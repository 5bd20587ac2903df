"""The quick-size (2 × 64) rows that the page's verdicts quote as nulls, with δ80 (issue 47: every null reads
"no difference as large as δ80 = … (n seeds)").

    python experiments/particle_attention/quick_nulls.py

Paired over the seeds both runs finished (seeds 0–2), against β = 0 at M = 8 (``results/quick_m8_beta`` and
``results/quick_m8_beta_hot``): the random half-drop gap ``half_random_gap`` and the head similarity
``head_sim``: the mean paired difference, its 95 % t interval and the two-sided paired t-test's raw p
(``paired_cell``; the tables' Holm columns are in ``results/tables.md``), δ80 at 80 % power and α = 0.05 at the
observed paired sd.
"""

from __future__ import annotations

import json
from pathlib import Path

from meanfield.config import load_toml
from meanfield.studies.stats import number_text, paired_cell, paired_difference

RESULTS = Path(__file__).resolve().parent / "results"


def by_beta(*folders: Path) -> dict[float, dict[int, dict]]:
    """``{β: {seed: final metrics}}`` of the finished runs in ``folders``."""
    out: dict[float, dict[int, dict]] = {}
    for folder in folders:
        for summary in sorted(folder.glob("*/summary.json")):
            s = json.loads(summary.read_text())
            if s.get("status") != "finished":
                continue
            config = load_toml(summary.parent / "config.toml")
            out.setdefault(float(config["optim"]["beta"]), {})[int(config["seed"])] = s["final"]
    return out


def main() -> None:
    runs = by_beta(RESULTS / "quick_m8_beta", RESULTS / "quick_m8_beta_hot")
    print("| β | metric | pairs | Δ vs β = 0 (paired) | δ80 |\n|---|---|---|---|---|")
    for metric in ("half_random_gap", "head_sim"):
        for beta in sorted(b for b in runs if b > 0):
            seeds = sorted(set(runs[beta]) & set(runs[0.0]))
            d = paired_difference([runs[beta][s][metric] for s in seeds], [runs[0.0][s][metric] for s in seeds])
            print(f"| {beta:g} | {metric} | {d.n} | {paired_cell(d, 3)} | {number_text(d.detectable(), 3)} |")


if __name__ == "__main__":
    main()
