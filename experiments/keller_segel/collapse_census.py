"""Why ``simulate`` declares a collapse on the number of unresolved pairs, not on the closest pair alone.

2-D Keller–Segel (``MeanFieldLangevin(Quadratic(0), LogInteraction(−χ), beta=1)``, x_i ~ N(0, I₂)), B = 8
replicas, dt = 1e-3, t ≤ 2, the state looked at every 16 steps (simulate's ``collapse_every``). Per χ and M:
when the closest pair first fell below r⋆ = sqrt(2χ·dt/M) (the distance below which one step moves a pair by
more than its separation, :mod:`meanfield.drift.resolution`), the most pairs below r⋆ at one look, and when that
count first reached M/4 (the rule ``simulate`` uses), each as the range over the replicas. Then the cost of one
look (:func:`meanfield.drift.resolution.close_pairs`) against one evaluation of the interaction's drift
(``LogInteraction.mean_field_grad``), float64, d = 2, one thread, the median of 21 calls each.

    python experiments/keller_segel/collapse_census.py   # writes results/census.md (a few CPU-minutes)
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

import meanfield as mf
from meanfield.drift.potentials import LogInteraction, Quadratic
from meanfield.drift.resolution import close_pairs

CASES = ((2.0, 100), (3.5, 100), (6.0, 100), (3.5, 400), (6.0, 400))  # χ_c = 4β·M/(M − 1) ≈ 4.04, 4.01
B, DT, T1, EVERY = 8, 1e-3, 2.0, 16


def census(chi: float, M: int) -> dict:
    system = mf.MeanFieldLangevin(Quadratic(0.0), LogInteraction(-chi), beta=1.0)
    x0 = torch.randn(B, M, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    run = mf.simulate(system, x0, t1=T1, dt=DT, save_every=EVERY, generator=2, collapse="ignore")
    radius = torch.tensor([math.sqrt(2 * chi * DT / M)], dtype=torch.float64)
    below, most, quarter = [math.inf] * B, [0] * B, [math.inf] * B
    for t, x in zip(run.times.tolist(), run.states):
        closest, count = close_pairs(x, radius)
        for b in range(B):
            if closest[b] < radius[0]:
                below[b] = min(below[b], t)
            most[b] = max(most[b], int(count[b]))
            if count[b] >= M / 4:
                quarter[b] = min(quarter[b], t)
    return dict(below=below, most=most, quarter=quarter, radius=float(radius[0]))


def cost(B: int, M: int) -> tuple[float, float]:
    """Median seconds of one look and of one interaction drift at ``(B, M, 2)``."""
    x = torch.randn(B, M, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    W, radius = LogInteraction(-6.0), torch.tensor([1e-3], dtype=torch.float64)

    def median(f) -> float:
        times = []
        for _ in range(21):
            start = time.perf_counter()
            f()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    return median(lambda: close_pairs(x, radius)), median(lambda: W.mean_field_grad(x))


def cpu() -> str:
    """The CPU model (``/proc/cpuinfo``), else the architecture."""
    try:
        info = Path("/proc/cpuinfo").read_text()
        return next(
            line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")
        )
    except (OSError, StopIteration):
        return platform.machine()


def span(values: list[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "never"
    out = f"{min(finite):.3g}–{max(finite):.3g}"
    return out if len(finite) == len(values) else f"{out} ({len(finite)} of {len(values)})"


def main() -> None:
    load = os.getloadavg()
    lines = [
        "| χ | M | r⋆ | closest pair < r⋆ first at t | most pairs < r⋆ at one look | ≥ M/4 pairs first at t |",
        "|---|---|---|---|---|---|",
    ]
    for chi, M in CASES:
        c = census(chi, M)
        lines.append(
            f"| {chi:g} | {M} | {c['radius']:.3g} | {span(c['below'])} | {min(c['most'])}–{max(c['most'])} | "
            f"{span(c['quarter'])} |"
        )
        print(lines[-1], flush=True)
    lines += [
        "",
        "| B | M | one look | one drift of LogInteraction | look / drift |",
        "|---|---|---|---|---|",
    ]
    torch.set_num_threads(1)
    for replicas, M in ((32, 100), (1, 1_000), (1, 10_000)):
        look, drift = cost(replicas, M)
        lines.append(
            f"| {replicas} | {M} | {look * 1e3:.3g} ms | {drift * 1e3:.3g} ms | {look / drift:.2f} |"
        )
        print(lines[-1], flush=True)
    head = (
        f"# Keller–Segel collapse census\n\n`python experiments/keller_segel/collapse_census.py` "
        f"(B = {B}, dt = {DT:g}, t ≤ {T1:g}, a look every {EVERY} steps; {cpu()}, "
        f"Python {sys.version.split()[0]}, torch {torch.__version__}; load average {load[0]:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end). Ranges over the replicas.\n\n"
    )
    out = Path(__file__).parent / "results" / "census.md"
    out.write_text(head + "\n".join(lines) + "\n")
    print(out)


if __name__ == "__main__":
    main()
