"""meanfield.metrics.wasserstein vs POT, side by side, with the floor of the same work: time and value.

Rows (float64, ``x ~ N(0, I)``, ``y ~ U[0, 1]^d + 0.2``, equal sizes n, uniform weights; every value is W2²):

- ``1-D exact``: ``w2_squared(x, y, method="1d")`` (NumPy sort) vs ``ot.wasserstein_1d(x, y, p=2)``.
  Floor: the two sorts alone (``np.sort`` of each cloud's contiguous values).
- ``sliced``: ``w2_squared(x, y, method="sliced", n_projections=L)`` vs
  ``ot.sliced_wasserstein_distance(x, y, projections=θ)**2`` with the *same* L directions θ (so the values
  agree to round-off; with independent directions they would agree to Monte-Carlo error). Floor: the
  projections' matrix products and the in-place sorts alone, in the same passes of directions as ours.
- ``exact``: ``w2_squared(x, y, method="exact")`` vs ``ot.emd2(a, b, ot.dist(x, y))`` (the same network
  simplex underneath: this row checks the wrapper's overhead). Floor: ``ot.emd2`` on a cost matrix built
  beforehand (the solver alone).

``ours/floor`` says how close to the limit of this machine ours is (1.0 is the floor itself), so a ratio
against POT can be read on any machine. The sort primitives are timed too (``np.sort`` with a copy,
``ndarray.sort`` in place, ``torch.sort``) on the same values, with a check that they sort to identical
arrays: ``meanfield.metrics.wasserstein`` uses the fastest (NumPy's).

Times are medians of interleaved repeats (ours, POT, floor in turn, the order alternating) in one run.
Targets from the issue: 1-D exact ≤ 3 ms at n = 1e5 and < 0.5 s at n = 1e6; sliced ≥ 10× faster than POT's
at equal projections. Run: ``python benchmarks/wasserstein.py`` (``--smoke`` for a seconds-long check that it
runs); the results go to ``benchmarks/results/<machine>/wasserstein.md``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting threads ruin shared CPUs

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import ot  # noqa: E402
import torch  # noqa: E402
from _common import Provenance, result_path, write_result  # noqa: E402

from meanfield.metrics.wasserstein import _SLICE_BUDGET, _projections, w2_squared  # noqa: E402

SLICED_D, SLICED_L, EXACT_D = 3, 50, 3


def clouds(n: int, d: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)  # (n, d)
    y = torch.rand(n, d, generator=g, dtype=torch.float64) + 0.2  # (n, d)
    return x, y


def interleaved(fns: dict, repeats: int) -> tuple[dict, dict]:
    """Median time and the value of each function, run in turn ``repeats`` times (order alternating)."""
    times = {name: [] for name in fns}
    values = {}
    names = list(fns)
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            values[name] = float(fns[name]())
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}, values


def repeats_for(seconds: float, budget: float, cap: int) -> int:
    """Enough repeats for a stable median within about ``budget`` seconds (at least 3)."""
    return int(max(3, min(cap, budget / max(seconds, 1e-6))))


Case = tuple[dict[str, float], dict[str, float]]
"""Median seconds and value of each function of a case, by name (``ours``, ``pot``, ``floor``)."""


def _timed_case(fns: dict, budget: float, cap: int) -> Case:
    probe, _ = interleaved(fns, 1)
    return interleaved(fns, repeats_for(sum(probe.values()), budget, cap))


def two_sorts(xn: np.ndarray, yn: np.ndarray) -> float:
    """The floor of a 1-D W2 between equal-size uniform clouds: sort both (returns NaN: no value)."""
    np.sort(xn)
    np.sort(yn)
    return float("nan")


def case_1d(n: int, budget: float, cap: int) -> Case:
    x, y = clouds(n, 1)
    xn, yn = x[:, 0].numpy().copy(), y[:, 0].numpy().copy()  # (n,), contiguous
    fns = {
        "ours": lambda: w2_squared(x, y, method="1d"),
        "pot": lambda: ot.wasserstein_1d(xn, yn, p=2),
        "floor": lambda: two_sorts(xn, yn),
    }
    return _timed_case(fns, budget, cap)


def projected_sorts(theta: torch.Tensor, xt: torch.Tensor, yt: torch.Tensor) -> float:
    """The floor of a sliced W2: the projections' matrix products and the in-place sorts, in the passes of
    directions ``meanfield`` makes (``_SLICE_BUDGET`` values at a time); returns NaN (no value)."""
    L, n = theta.shape[0], xt.shape[1]
    per_pass = max(1, min(L, _SLICE_BUDGET // (2 * n)))
    for start in range(0, L, per_pass):
        t = theta[start : start + per_pass]  # (L', d)
        torch.matmul(t, xt).numpy().sort(axis=-1)  # (L', n)
        torch.matmul(t, yt).numpy().sort(axis=-1)  # (L', n)
    return float("nan")


def case_sliced(n: int, budget: float, cap: int, with_pot: bool) -> Case:
    x, y = clouds(n, SLICED_D)
    theta = _projections(SLICED_D, SLICED_L, seed=0)  # (L, d): the directions ours uses with seed 0
    xn, yn, thetan = x.numpy(), y.numpy(), theta.numpy()
    xt, yt = x.T.contiguous(), y.T.contiguous()  # (d, n)
    fns = {
        "ours": lambda: w2_squared(x, y, method="sliced", n_projections=SLICED_L, seed=0),
        "floor": lambda: projected_sorts(theta, xt, yt),
    }
    if with_pot:
        fns["pot"] = lambda: ot.sliced_wasserstein_distance(xn, yn, projections=thetan.T) ** 2
    return _timed_case(fns, budget, cap)


def case_exact(n: int, budget: float, cap: int) -> Case:
    x, y = clouds(n, EXACT_D)
    xn, yn = x.numpy(), y.numpy()
    uniform = np.full(n, 1.0 / n)
    cost = ot.dist(xn, yn)  # (n, n)
    fns = {
        "ours": lambda: w2_squared(x, y, method="exact"),
        "pot": lambda: ot.emd2(uniform, uniform, ot.dist(xn, yn), numItermax=10**8),
        "floor": lambda: ot.emd2(uniform, uniform, cost, numItermax=10**8),
    }
    return _timed_case(fns, budget, cap)


def sort_primitives(n: int, budget: float, cap: int) -> tuple[dict[str, float], bool]:
    """Median seconds of each way to sort ``n`` float64 values of a CPU tensor, and whether all agree."""
    x = clouds(n, 1)[0][:, 0].contiguous()  # (n,)
    xn = x.numpy()
    fns = {
        "np.sort": lambda: float(np.sort(xn)[0]),
        "ndarray.sort": lambda: float(_sort_in_place(xn.copy())[0]),
        "torch.sort": lambda: float(torch.sort(x).values[0]),
    }
    times, _ = _timed_case(fns, budget, cap)
    reference = np.sort(xn)
    same = np.array_equal(reference, torch.sort(x).values.numpy()) and np.array_equal(
        reference, _sort_in_place(xn.copy())
    )
    return times, same


def _sort_in_place(a: np.ndarray) -> np.ndarray:
    a.sort()
    return a


def fmt_time(t: float | None) -> str:
    if t is None:
        return "—"
    return f"{t * 1e6:.3g} µs" if t < 1e-3 else f"{t * 1e3:.3g} ms" if t < 1 else f"{t:.3g} s"


HEADER = "| case | n | ours | POT | floor | POT/ours | ours/floor | ours W2² | POT W2² | rel. diff |"


def row(case: str, n: int, times: dict, values: dict) -> str:
    t_pot, v_pot = times.get("pot"), values.get("pot")
    ratio = f"{t_pot / times['ours']:.1f}×" if t_pot is not None else "—"
    diff = f"{abs(values['ours'] - v_pot) / abs(v_pot):.1e}" if v_pot is not None else "—"
    return (
        f"| {case} | {n:.0e} | {fmt_time(times['ours'])} | {fmt_time(t_pot)} | {fmt_time(times['floor'])} | "
        f"{ratio} | {times['ours'] / times['floor']:.2f} | {values['ours']:.6g} | "
        f"{'—' if v_pot is None else f'{v_pot:.6g}'} | {diff} |"
    )


def verdict(met: bool) -> str:
    return "met" if met else "**missed**"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, few repeats: checks that it runs")
    parser.add_argument("--budget", type=float, default=2.0, help="seconds per case for the repeats")
    parser.add_argument("--out", default=None, help="results file (default results/<machine>/wasserstein.md)")
    args = parser.parse_args(argv)
    provenance = Provenance.start(__file__, argv)
    budget, cap = (0.05, 3) if args.smoke else (args.budget, 51)
    sizes_1d = (500, 2_000) if args.smoke else (500, 10_000, 100_000, 1_000_000)
    sizes_sliced = (500, 2_000) if args.smoke else (500, 10_000, 100_000, 1_000_000)
    pot_sliced_max = 2_000 if args.smoke else 100_000  # POT's sliced at 1e6 takes minutes per call here
    sizes_exact = (100, 200) if args.smoke else (500, 1_000, 2_000)

    lines = [HEADER, "|---|---|---|---|---|---|---|---|---|---|"]
    print(HEADER, flush=True)
    checks = []
    for n in sizes_1d:
        times, values = case_1d(n, budget, cap)
        lines.append(row("1-D exact", n, times, values))
        print(lines[-1], flush=True)
        floor = (
            f"floor (two sorts) {fmt_time(times['floor'])}, ours/floor {times['ours'] / times['floor']:.2f}"
        )
        if n == 100_000:
            checks.append(f"target 1-D exact at n = 1e5 ≤ 3 ms: {fmt_time(times['ours'])}, "
                          f"{verdict(times['ours'] <= 3e-3)}; {floor}")  # fmt: skip
        if n == 1_000_000:
            checks.append(f"target 1-D exact at n = 1e6 < 0.5 s: {fmt_time(times['ours'])}, "
                          f"{verdict(times['ours'] < 0.5)}; {floor}")  # fmt: skip
    for n in sizes_sliced:
        times, values = case_sliced(n, budget, cap, with_pot=n <= pot_sliced_max)
        lines.append(row(f"sliced (d={SLICED_D}, L={SLICED_L})", n, times, values))
        print(lines[-1], flush=True)
        if "pot" in times:
            speed = times["pot"] / times["ours"]
            checks.append(
                f"target sliced ≥ 10× POT at n = {n:.0e}: {speed:.1f}×, {verdict(speed >= 10)}; floor (matmuls + "
                f"sorts) {fmt_time(times['floor'])}, ours/floor {times['ours'] / times['floor']:.2f}, "
                f"POT/floor {times['pot'] / times['floor']:.1f}"
            )
    for n in sizes_exact:
        times, values = case_exact(n, budget, cap)
        lines.append(row(f"exact (d={EXACT_D})", n, times, values))
        print(lines[-1], flush=True)

    sorts = ["| n | np.sort (a copy) | ndarray.sort (in place, after a copy) | torch.sort | torch.sort / np.sort | "
             "identical arrays |", "|---|---|---|---|---|---|"]  # fmt: skip
    for n in sizes_1d:
        times, same = sort_primitives(n, budget, cap)
        sorts.append(
            f"| {n:.0e} | {fmt_time(times['np.sort'])} | {fmt_time(times['ndarray.sort'])} | "
            f"{fmt_time(times['torch.sort'])} | {times['torch.sort'] / times['np.sort']:.1f} | "
            f"{'yes' if same else 'NO'} |"
        )
        print(sorts[-1], flush=True)

    text = "\n".join(
        [
            "# W2² of two clouds of n points each (float64): meanfield vs POT, with the floor",
            "",
            "Medians of interleaved repeats in one run. POT's sliced row uses the same directions as ours; POT's "
            "sliced is not run at n = 1e6 (minutes). Floors: 1-D, the two sorts (`np.sort`); sliced, the "
            "projections' matrix products and the in-place sorts in ours' passes; exact, `ot.emd2` on a cost "
            "matrix built beforehand. ours/floor: 1.00 is the floor itself.",
            "",
            *lines,
            "",
            "**Sort primitives** (float64, one CPU tensor's values; the same repeats):",
            "",
            *sorts,
            "",
            *[f"- {c}" for c in checks],
            "",
        ]
    )
    for c in checks:
        print(c)
    out = write_result(args.out or result_path("wasserstein"), text, provenance)
    print(f"written: {out}")
    return text


if __name__ == "__main__":
    main()
