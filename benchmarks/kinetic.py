"""Cost per step of the kinetic splittings (BAOAB, OBABO, ABOBA) against the overdamped Euler–Maruyama step.

The same M particles in R^d (B = 1), the same confinement and interaction (``Quadratic(1)`` and
``QuadraticInteraction(1)``: the O(BMd) mean-field force), float32 on the CPU: the overdamped
``MeanFieldLangevin`` under the native ``euler`` (one fused pass and a draw of B·M·d normals a step) against
``KineticMeanFieldLangevin`` under each splitting (one force, a draw of 2·B·M·d normals and ≈ 7 passes over
the velocity half a step) and under ``euler`` on the first-order (x, v) form.

Method: each candidate runs ``simulate`` for ``--steps`` steps once per round, in a random order drawn afresh
each round; after one warm-up round the table gives the median time per step over ``--rounds`` rounds and
the median of the per-round ratios to the overdamped step (paired in the same round).

Usage:
    python benchmarks/kinetic.py                    # prints the table, writes benchmarks/results/<machine>/kinetic.md
    python benchmarks/kinetic.py --smoke --out /tmp/kinetic.md
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from _common import Provenance, result_path, write_result  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from meanfield import MeanFieldLangevin, simulate  # noqa: E402
from meanfield.kinetic import KineticMeanFieldLangevin, pair  # noqa: E402
from meanfield.potentials import Quadratic, QuadraticInteraction  # noqa: E402


def candidates(M: int, d: int, dt: float, steps: int):
    over = MeanFieldLangevin(Quadratic(1.0), QuadraticInteraction(1.0), beta=0.5)
    kin = KineticMeanFieldLangevin(Quadratic(1.0), QuadraticInteraction(1.0), friction=1.0, beta=0.5)
    x0 = torch.randn(1, M, d, generator=torch.Generator().manual_seed(0))  # (1, M, d) float32
    z0 = pair(x0, torch.randn_like(x0))  # (1, M, 2d)
    g = torch.Generator().manual_seed(1)
    runs = {
        "overdamped euler (MeanFieldLangevin)": lambda: simulate(over, x0, t1=steps * dt, dt=dt, generator=g)
    }
    for name in ("baoab", "obabo", "aboba", "euler"):
        label = f"kinetic {name}" + (" (first-order form)" if name == "euler" else "")
        runs[label] = lambda name=name: simulate(kin, z0, t1=steps * dt, dt=dt, solver=name, generator=g)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--M", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (a run that checks the script)")
    parser.add_argument("--out", default=None, help="default benchmarks/results/<machine>/kinetic.md")
    args = parser.parse_args()
    provenance = Provenance.start(__file__, sys.argv[1:])
    if args.smoke:
        args.M, args.d, args.steps, args.rounds = 1000, 2, 4, 2
    runs = candidates(args.M, args.d, 0.01, args.steps)
    times: dict[str, list[float]] = {k: [] for k in runs}
    ratios: dict[str, list[float]] = {k: [] for k in runs}
    base = next(iter(runs))
    rng = random.Random(0)
    for r in range(args.rounds + 1):
        order = list(runs)
        rng.shuffle(order)
        this = {}
        for name in order:
            start = time.perf_counter()
            runs[name]()
            this[name] = (time.perf_counter() - start) / args.steps
        if r == 0:
            continue  # warm-up
        for name, t in this.items():
            times[name].append(t)
            ratios[name].append(t / this[base])
    lines = [
        "# Kinetic splittings vs the overdamped Euler–Maruyama step",
        "",
        f"- M = {args.M} particles, d = {args.d}, B = 1, float32, Quadratic(1) + QuadraticInteraction(1); "
        f"{args.steps} steps per call, median over {args.rounds} interleaved rounds; ratios are medians of "
        "per-round ratios to the overdamped step",
        "",
        "| step | median ms / step | × overdamped euler |",
        "|---|---:|---:|",
    ]
    for name in runs:
        lines.append(
            f"| {name} | {1e3 * statistics.median(times[name]):.2f} | {statistics.median(ratios[name]):.2f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    write_result(args.out or result_path("kinetic"), text, provenance)


if __name__ == "__main__":
    main()
