"""Cost per step of the kinetic splittings (BAOAB, OBABO, ABOBA) against the overdamped Euler–Maruyama step.

The same M particles in R^d (B = 1), the same confinement and interaction (``Quadratic(1)`` and
``QuadraticInteraction(1)``: the O(BMd) mean-field force), float32 on the CPU: the overdamped
``MeanFieldLangevin`` under the native ``euler`` (one fused pass and a draw of B·M·d normals a step) against
``KineticMeanFieldLangevin`` under each splitting (drawn noise: one force, one draw of B·M·d normals per O and
≈ 6 passes over contiguous halves a step) and under ``euler`` on the first-order (x, v) form, and a BAOAB
written by hand in torch (x and v apart, one draw a step: the target, ≤ 1.2×).

Method: each candidate runs ``--steps`` steps (one ``simulate`` call) once per round, in a random order drawn
afresh each round; after one warm-up round the table gives the median CPU time per step over ``--rounds``
rounds and the medians of the per-round ratios to the overdamped step and to the hand-written BAOAB (paired
in the same round).

Usage:
    python benchmarks/kinetic.py                    # prints the table, writes benchmarks/results/<machine>/kinetic.md
    python benchmarks/kinetic.py --smoke --out /tmp/kinetic.md
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from _common import Provenance, result_path, write_result  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from meanfield import MeanFieldLangevin, simulate  # noqa: E402
from meanfield.drift.phase_space import KineticMeanFieldLangevin, pair  # noqa: E402
from meanfield.drift.potentials import Quadratic, QuadraticInteraction  # noqa: E402


def hand_baoab(x0: torch.Tensor, v0: torch.Tensor, steps: int, dt: float, g: torch.Generator) -> torch.Tensor:
    """BAOAB written by hand as one would: x and v apart, the force −(a + k)·x + k·x̄ kept from the last kick,
    one draw of M·d normals per step (a = k = γ = 1, β = ½)."""
    x, v = x0.clone(), v0.clone()
    c = math.exp(-1.0 * dt)
    s = math.sqrt(0.5 * (1 - c * c))
    xi = torch.empty_like(x)  # (1, M, d)
    f = -2.0 * x + x.mean(1, keepdim=True)  # (1, M, d)
    for _ in range(steps):
        v.add_(f, alpha=dt / 2)
        x.add_(v, alpha=dt / 2)
        v.mul_(c).add_(xi.normal_(generator=g), alpha=s)
        x.add_(v, alpha=dt / 2)
        f = -2.0 * x + x.mean(1, keepdim=True)
        v.add_(f, alpha=dt / 2)
    return x


def candidates(M: int, d: int, dt: float, steps: int):
    over = MeanFieldLangevin(Quadratic(1.0), QuadraticInteraction(1.0), beta=0.5)
    kin = KineticMeanFieldLangevin(Quadratic(1.0), QuadraticInteraction(1.0), friction=1.0, beta=0.5)
    x0 = torch.randn(1, M, d, generator=torch.Generator().manual_seed(0))  # (1, M, d) float32
    v0 = torch.randn_like(x0)
    z0 = pair(x0, v0)  # (1, M, 2d)
    g = torch.Generator().manual_seed(1)
    runs = {
        "overdamped euler (MeanFieldLangevin)": lambda: simulate(over, x0, t1=steps * dt, dt=dt, generator=g),
        "hand-written torch BAOAB": lambda: hand_baoab(x0, v0, steps, dt, g),
    }
    for name in ("baoab", "obabo", "aboba", "euler"):
        label = f"kinetic {name}" + (" (first-order form)" if name == "euler" else "")
        runs[label] = lambda name=name: simulate(kin, z0, t1=steps * dt, dt=dt, solver=name, generator=g)
    return runs


def measure(M: int, d: int, steps: int, rounds: int) -> tuple[dict, dict, dict]:
    """Per-step CPU time (``time.process_time``) per candidate; per-round ratios to the overdamped step and
    to the hand-written BAOAB."""
    runs = candidates(M, d, 0.01, steps)
    times: dict[str, list[float]] = {k: [] for k in runs}
    ratios: dict[str, list[float]] = {k: [] for k in runs}
    to_hand: dict[str, list[float]] = {k: [] for k in runs}
    base, hand = "overdamped euler (MeanFieldLangevin)", "hand-written torch BAOAB"
    rng = random.Random(0)
    for r in range(rounds + 1):
        order = list(runs)
        rng.shuffle(order)
        this = {}
        for name in order:
            start = time.process_time()
            runs[name]()
            this[name] = (time.process_time() - start) / steps
        if r == 0:
            continue  # warm-up
        for name, t in this.items():
            times[name].append(t)
            ratios[name].append(t / this[base])
            to_hand[name].append(t / this[hand])
    return times, ratios, to_hand


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["100000x1", "10000x10", "1000x1"], help="M×d cases")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (a run that checks the script)")
    parser.add_argument("--out", default=None, help="default benchmarks/results/<machine>/kinetic.md")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    provenance = Provenance.start(__file__, sys.argv[1:])
    sizes = [tuple(int(float(v)) for v in s.split("x")) for s in args.sizes]
    if args.smoke:
        sizes, args.steps, args.rounds = [(1000, 2)], 4, 2
    lines = [
        "# Kinetic splittings vs the overdamped Euler–Maruyama step and a hand-written BAOAB",
        "",
        f"- B = 1, float32, Quadratic(1) + QuadraticInteraction(1), friction 1, β = ½, {args.threads} torch "
        f"thread(s); {args.steps} steps per call (a `simulate` call's fixed cost included), CPU time "
        f"(`time.process_time`), median over {args.rounds} interleaved rounds; ratios are medians of per-round ratios",
        "",
    ]
    targets = []
    for M, d in sizes:
        times, ratios, to_hand = measure(M, d, args.steps, args.rounds)
        lines += [
            f"### M = {M:g}, d = {d}",
            "",
            "| step | median µs / step | × overdamped euler | × hand-written BAOAB |",
            "|---|---:|---:|---:|",
        ]
        for name in times:
            lines.append(
                f"| {name} | {1e6 * statistics.median(times[name]):.1f} | {statistics.median(ratios[name]):.2f} | "
                f"{statistics.median(to_hand[name]):.2f} |"
            )
        lines.append("")
        r = statistics.median(to_hand["kinetic baoab"])
        targets.append(
            f"- target BAOAB (`simulate(..., solver=\"baoab\")`) ≤ 1.2× hand-written torch BAOAB at M = {M:g}, "
            f"d = {d}: {r:.2f}, {'met' if r <= 1.2 else '**missed**'}"
        )
    text = "\n".join(lines + targets) + "\n"
    print(text)
    write_result(args.out or result_path("kinetic"), text, provenance)


if __name__ == "__main__":
    main()
