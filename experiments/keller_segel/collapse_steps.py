"""The collapse said at the issue's steps: 2-D Keller–Segel (``LogInteraction(−χ)``, β = 1, M = 100, x_i ~ N(0, I₂),
2 replicas, t ≤ 1.5) at dt = 1e-3, 2.5e-4 and 6.25e-5, supercritical (χ = 6) and subcritical (χ = 2): the
``CollapseWarning`` ``simulate`` gives (time, replicas, pairs below r⋆, closest pair), or none.

    python experiments/keller_segel/collapse_steps.py   # writes results/steps.md (about 20 CPU-seconds)
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import torch

import meanfield as mf
from meanfield.drift.potentials import LogInteraction, Quadratic
from meanfield.drift.resolution import CollapseWarning


def main() -> None:
    load = os.getloadavg()
    torch.set_num_threads(1)
    lines = [
        "| χ | dt | said at t | replicas | pairs < r⋆ | closest pair | r⋆ |",
        "|---|---|---|---|---|---|---|",
    ]
    for chi in (6.0, 2.0):
        for dt in (1e-3, 2.5e-4, 6.25e-5):
            system = mf.MeanFieldLangevin(Quadratic(0.0), LogInteraction(-chi), beta=1.0)
            x0 = torch.randn(2, 100, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", CollapseWarning)
                mf.simulate(system, x0, t1=1.5, dt=dt, generator=2)
            said = [w.message for w in caught if issubclass(w.category, CollapseWarning)]
            if said:
                w = said[0]
                cells = f"{w.time:.4g} | {w.replicas} | {w.pairs} | {w.distance:.3g} | {w.radius:.3g}"
            else:
                cells = "nothing said | | | |"
            lines.append(f"| {chi:g} | {dt:g} | {cells} |")
            print(lines[-1], flush=True)
    head = (
        "# Keller–Segel: the collapse said at the issue's steps\n\n"
        f"`python experiments/keller_segel/collapse_steps.py` (one thread; load average {load[0]:.1f} at the "
        f"start, {os.getloadavg()[0]:.1f} at the end; torch {torch.__version__}).\n\n"
    )
    out = Path(__file__).parent / "results" / "steps.md"
    out.write_text(head + "\n".join(lines) + "\n")
    print(out)


if __name__ == "__main__":
    main()
