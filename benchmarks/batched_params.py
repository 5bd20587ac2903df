"""A parameter grid × seeds as one batched ``simulate`` call against the loop of one call per point and seed.

Issue 26, item 1: a coupling sweep of G = 16 values × S = 4 seeds at M = 2,000 particles in d = 2 (and, as a
second row, M = 200, where the per-call overhead weighs more) runs as one
state of B = G·S = 64 replicas, replica b with κ[b] (per-replica parameters), instead of 64 calls with one
number each. Two systems, float32 on the CPU:

- ``kuramoto``: noisy Kuramoto on the circle, ``MeanFieldLangevin(Quadratic(0), Alignment(κ), β, Sphere())``:
  an O(BMd) drift (through the mean), so a step is the noise draw plus a few passes over the state; the
  grid is κ ∈ linspace(0.5, 4, 16) at β = 0.5.
- ``gaussian``: ``MeanFieldLangevin(Quadratic(1), GaussianInteraction(1, ℓ), β = 0.3)`` with the width
  ℓ ∈ linspace(0.2, 1.0, 16) per replica: an O(BM²d) drift (blocked pair sums), where the per-call overhead
  matters less.

Columns: the median wall time of the batched call and of the loop (64 calls, the same steps and values, each
with its own int seed), over interleaved repeats in a random order drawn afresh each repeat, their ratio
(loop / batched: higher means the batched call is faster), computed in the same run, and the median and
range of the per-repeat ratios (each repeat times both back to back). The first repeat of each is a warm-up
and is not counted.

Run: ``python benchmarks/batched_params.py`` (``--smoke`` for a seconds-long check that it runs); the results
go to ``benchmarks/results/<machine>/batched_params.md`` (``--out`` to choose).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting threads ruin shared CPUs

import argparse  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from _common import Provenance, result_path, write_result  # noqa: E402

from meanfield import MeanFieldLangevin, simulate  # noqa: E402
from meanfield.drift.potentials import Alignment, GaussianInteraction, Quadratic  # noqa: E402
from meanfield.drift.projections import Sphere  # noqa: E402

G, S = 16, 4  # grid values × seeds


def systems(grid: int) -> dict[str, tuple[torch.Tensor, callable, float, float]]:
    """name -> (the grid of values, value(s) -> system, dt, t1 of the full run)."""
    return {
        "kuramoto": (
            torch.linspace(0.5, 4.0, grid, dtype=torch.float64),
            lambda v: MeanFieldLangevin(Quadratic(0.0), Alignment(v), beta=0.5, projection=Sphere()),
            0.01,
            2.0,
        ),
        "gaussian": (
            torch.linspace(0.2, 1.0, grid, dtype=torch.float64),
            lambda v: MeanFieldLangevin(Quadratic(1.0), GaussianInteraction(1.0, v), beta=0.3),
            0.01,
            0.1,
        ),
    }


def initial(B: int, M: int, d: int) -> torch.Tensor:
    x = torch.randn(B, M, d, generator=torch.Generator().manual_seed(0), dtype=torch.float32)  # (B, M, d)
    return x / x.norm(dim=-1, keepdim=True)  # on the circle (the Kuramoto start; harmless for the other)


def batched(make, values: torch.Tensor, x0: torch.Tensor, dt: float, t1: float) -> float:
    per_replica = values.repeat_interleave(S)  # (B,) replica b = point b // S, seed b % S
    start = time.perf_counter()
    simulate(make(per_replica), x0, t1=t1, dt=dt, generator=0, save_every=round(t1 / dt))
    return time.perf_counter() - start


def looped(make, values: torch.Tensor, x0: torch.Tensor, dt: float, t1: float) -> float:
    start = time.perf_counter()
    for b in range(x0.shape[0]):
        point, seed = divmod(b, S)
        simulate(
            make(float(values[point])), x0[b : b + 1], t1=t1, dt=dt, generator=seed, save_every=round(t1 / dt)
        )
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--M", type=int, nargs="+", default=[2000, 200], help="particles per replica (rows)")
    parser.add_argument("--d", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats after one warm-up")
    parser.add_argument("--systems", nargs="+", default=["kuramoto", "gaussian"])
    parser.add_argument("--smoke", action="store_true", help="M = 100, 2 repeats, short runs")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    provenance = Provenance.start(__file__, sys.argv[1:] if argv is None else argv)
    Ms, repeats, scale = ([100], 2, 0.2) if args.smoke else (args.M, args.repeats, 1.0)
    table = systems(G)
    rows = []
    for M in Ms:
        x0 = initial(G * S, M, args.d)
        for name in args.systems:
            values, make, dt, t1 = table[name]
            t1 = max(dt, round(t1 * scale / dt) * dt)
            times: dict[str, list[float]] = {"batched": [], "loop": []}
            ratios: list[float] = []
            for repeat in range(repeats + 1):
                order = ["batched", "loop"]
                random.shuffle(order)
                got = {
                    which: (batched if which == "batched" else looped)(make, values, x0, dt, t1)
                    for which in order
                }
                if repeat == 0:
                    continue  # warm-up
                for which, value in got.items():
                    times[which].append(value)
                ratios.append(got["loop"] / got["batched"])
            med_b, med_l = statistics.median(times["batched"]), statistics.median(times["loop"])
            rows.append(
                f"| {name} | {G} × {S} = {G * S} | {M} | {args.d} | {round(t1 / dt)} | {med_b:.3f} | {med_l:.3f} | "
                f"{med_l / med_b:.2f} | {statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) |"
            )
            print(rows[-1], flush=True)
    header = (
        "| system | grid × seeds = B | M | d | steps | batched call (s) | loop of B calls (s) | "
        "loop / batched (of medians) | per-repeat ratio: median (range) |\n|---|---|---|---|---|---|---|---|---|"
    )
    text = (
        "# Per-replica parameters: one batched simulate call vs a loop of calls\n\n"
        f"float32 on the CPU, medians of {repeats} interleaved repeats after one warm-up (random order in each "
        "repeat); the ratio loop / batched is computed in the same run. Systems: see the docstring of "
        "`benchmarks/batched_params.py`.\n\n" + header + "\n" + "\n".join(rows) + "\n"
    )
    print(header)
    print("\n".join(rows))
    out = args.out or result_path("batched_params")
    path = write_result(out, text, provenance)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
