"""Large M: a pairwise interaction per Euler–Maruyama step (dense torch kernel vs meanfield's blocked torch
path vs KeOps), the two backends of the Sinkhorn soft-minimum (the crossover behind
``pairwise.resolve_backend``), and the Rademacher noise draw.

- ``interaction``: ``GaussianInteraction(c=1, length=1).mean_field_grad(x)``, ``x (1, M, d)`` float32 — the
  O(M²) part of a step of ``MeanFieldLangevin(..., GaussianInteraction)`` — against the dense kernel
  ``exp(−|x_i − x_j|²/2) @ (1, x)`` built as one ``M × M`` matrix (``torch.cdist``). Each case runs in a fresh
  process (time, peak memory over the input, and ``value = Σ|drift|``, which must agree across rows). The
  floor is the pair work alone (:func:`pair_work`: per block of rows the distances' matrix product, one
  ``exp`` a pair, the product with ``(1, x)``), so ``blocked/floor`` says what the rest of the path costs.
  Rows predicted to take more than ``--cap`` seconds (from the previous M, times M²) or whose ``M × M``
  matrix exceeds 8 GiB are skipped and say why.
- ``softmin``: ``pairwise.softmin`` (``n × n``, float32, ε = 0.1) on each backend, interleaved in one process.
- ``rademacher``: one Euler–Maruyama step of ``MeanFieldLangevin(Quadratic(1))`` at M = 1e5, d = 10
  (float32) with Gaussian and with Rademacher noise; the Rademacher draw alone, before (bytes unpacked with
  masks, a bool tensor, a multiply) and now (a 256 × 8 table of signs indexed by the bytes); the Gaussian
  draw alone.

Run: ``python benchmarks/kernels.py`` (``--smoke`` for a seconds-long check); the results go to
``benchmarks/results/<machine>/kernels.md``, with the command as given (``--cap`` included).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting threads ruin shared CPUs

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from _common import Provenance, result_path, write_result  # noqa: E402
from _isolated import measure, run_isolated  # noqa: E402

import meanfield as mf  # noqa: E402
from meanfield.drift.pairwise import MAX_ELEMENTS, keops_available, softmin  # noqa: E402
from meanfield.drift.potentials import GaussianInteraction, Quadratic  # noqa: E402


def state(M: int, d: int) -> torch.Tensor:
    return torch.randn(1, M, d, generator=torch.Generator().manual_seed(0))  # (1, M, d)


def make_interaction(kind: str, M: int, d: int):
    x = state(M, d)
    if kind == "dense":

        def dense():
            g = torch.cdist(x, x).square_().mul_(-0.5).exp_()  # (1, M, M)
            values = torch.cat([torch.ones_like(x[..., :1]), x], -1)  # (1, M, 1 + d)
            sums = g @ values  # (1, M, 1 + d)
            return float(((x * sums[..., :1] - sums[..., 1:]) * (-1.0 / M)).abs().sum())

        return dense
    if kind == "floor":
        return pair_work(x)
    interaction = GaussianInteraction(1.0, 1.0, backend=kind)
    return lambda: float(interaction.mean_field_grad(x).abs().sum())


def pair_work(x: torch.Tensor):
    """The floor of the drift: the pair work alone, in blocks of ``pairwise.MAX_ELEMENTS`` pairs (one reused
    buffer): the distances' matrix product, one ``exp`` per pair and the product with ``(1, x)`` — no
    norms, no bookkeeping, no result. Returns NaN (no value)."""
    M = x.shape[1]
    rows = max(1, MAX_ELEMENTS // M)
    flat = x[0]  # (M, d)
    values = torch.cat([torch.ones_like(flat[:, :1]), flat], -1)  # (M, 1 + d)
    work = torch.empty(rows, M)  # (rows, M)

    def floor() -> float:
        for start in range(0, M, rows):
            block = flat[start : start + rows]  # (c, d)
            g = torch.mm(block, flat.T, out=work[: block.shape[0]]).exp_()  # (c, M)
            torch.mm(g, values)  # (c, 1 + d)
        return float("nan")

    return floor


def interleaved(fns: dict, repeats: int) -> dict:
    times = {name: [] for name in fns}
    names = list(fns)
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def fmt_time(t: float) -> str:
    return f"{t * 1e6:.3g} µs" if t < 1e-3 else f"{t * 1e3:.3g} ms" if t < 1 else f"{t:.3g} s"


def interaction_table(sizes, dims, cap: float, script: str) -> tuple[list[str], list[str]]:
    kinds = {
        "dense torch (M × M)": "dense",
        "ours, blocked torch": "torch",
        "floor: the pair work alone": "floor",
    }
    if keops_available():
        kinds["ours, KeOps"] = "keops"
    lines = ["| d | M | method | time per step | peak memory | Σ abs(drift) |", "|---|---|---|---|---|---|"]
    notes = []
    print(lines[0], flush=True)
    for d in dims:
        last: dict[str, tuple[int, float]] = {}
        for M in sizes:
            for name, kind in kinds.items():
                prev = last.get(kind)
                predicted = None if prev is None else prev[1] * (M / prev[0]) ** 2
                if kind == "dense" and 4 * M * M > 8 * 2**30:
                    result = {"skipped": f"the M × M matrix needs {4 * M * M / 2**30:.0f} GiB"}
                elif predicted is not None and predicted > cap:
                    result = {"skipped": f"predicted {predicted:.0f} s > {cap:.0f} s"}
                else:
                    case = {"table": "interaction", "kind": kind, "M": M, "d": d}
                    result = run_isolated(script, case, timeout=max(4 * cap, 60))
                if "skipped" in result:
                    line = f"| {d} | {M:.0e} | {name} | — | — | skipped: {result['skipped']} |"
                else:
                    last[kind] = (M, result["seconds"])
                    value = "—" if kind == "floor" else f"{result['value']:.6g}"
                    line = (
                        f"| {d} | {M:.0e} | {name} | {fmt_time(result['seconds'])} | "
                        f"{result['peak_mib']:.0f} MiB | {value} |"
                    )
                lines.append(line)
                print(line, flush=True)
            notes += ratio_notes(last, d, M)
    return lines, notes


def ratio_notes(last: dict[str, tuple[int, float]], d: int, M: int) -> list[str]:
    """The blocked path against the dense kernel (the peer) and against the floor, where both ran at ``M``."""
    here = {kind: seconds for kind, (m, seconds) in last.items() if m == M}
    if "torch" not in here:
        return []
    parts = []
    if "dense" in here:
        parts.append(f"blocked/dense time {here['torch'] / here['dense']:.2f}")
    if "floor" in here:
        parts.append(f"blocked/floor {here['torch'] / here['floor']:.2f}")
    return [f"d = {d}, M = {M:.0e}: " + ", ".join(parts)] if parts else []


def softmin_table(sizes, dims, budget: float) -> list[str]:
    backends = ["torch", "keops"] if keops_available() else ["torch"]
    lines = [
        "| d | n | " + " | ".join(backends) + " | torch/keops |",
        "|---|---|" + "---|" * (len(backends) + 1),
    ]
    print(lines[0], flush=True)
    for d in dims:
        for n in sizes:
            g = torch.Generator().manual_seed(1)
            x, y = torch.randn(1, n, d, generator=g), torch.randn(1, n, d, generator=g)
            h = torch.zeros(1, n)
            fns = {b: (lambda b=b, x=x, y=y, h=h: softmin(x, y, h, 0.1, backend=b)) for b in backends}
            for fn in fns.values():
                fn()  # warm-up (KeOps compiles)
            probe = interleaved(fns, 1)
            times = interleaved(fns, int(max(3, min(21, budget / max(sum(probe.values()), 1e-6)))))
            ratio = f"{times['torch'] / times['keops']:.2f}" if "keops" in times else "—"
            line = f"| {d} | {n:.0e} | " + " | ".join(fmt_time(times[b]) for b in backends) + f" | {ratio} |"
            lines.append(line)
            print(line, flush=True)
    return lines


def rademacher_table(M: int, d: int, steps: int, repeats: int) -> tuple[list[str], dict]:
    shape = (1, M, d)
    x0 = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    system = mf.MeanFieldLangevin(Quadratic(1.0), None, beta=0.5)
    gen = torch.Generator().manual_seed(1)
    n = M * d
    out = torch.empty(n)
    raw = torch.empty((n + 7) // 8, dtype=torch.uint8)
    mask = 1 << torch.arange(8, dtype=torch.uint8)
    signs = (((torch.arange(256)[:, None] >> torch.arange(8)) & 1) * 2 - 1).float() * 0.1  # (256, 8)

    def draw_before():  # the draw before issue 16
        for _ in range(steps):
            raw.random_(0, 256, generator=gen)
            bits = raw.unsqueeze(-1).bitwise_and(mask).view(-1)[:n]  # (n,)
            torch.mul(bits.bool(), torch.tensor(0.2), out=out).sub_(0.1)

    def draw_now():
        for _ in range(steps):
            raw.random_(0, 256, generator=gen)
            torch.index_select(signs, 0, raw.long(), out=out.view(-1, 8))

    def draw_gaussian():
        for _ in range(steps):
            out.normal_(0.0, 0.1, generator=gen)

    def step(noise):
        return lambda: mf.simulate(system, x0, t1=steps * 0.01, dt=0.01, generator=gen, noise=noise)

    fns = {
        "EM step, Gaussian noise": step("gaussian"),
        "EM step, Rademacher noise": step("rademacher"),
        "Rademacher draw alone, before": draw_before,
        "Rademacher draw alone, now": draw_now,
        "Gaussian draw alone": draw_gaussian,
    }
    for fn in fns.values():
        fn()
    times = {k: v / steps for k, v in interleaved(fns, repeats).items()}
    lines = ["| M | d | what | time per step |", "|---|---|---|---|"]
    for name, t in times.items():
        lines.append(f"| {M:.0e} | {d} | {name} | {fmt_time(t)} |")
        print(lines[-1], flush=True)
    return lines, times


def run_case(case: dict) -> dict:
    return measure(lambda: make_interaction(case["kind"], case["M"], case["d"]), repeats=3)


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks that it runs")
    parser.add_argument("--cap", type=float, default=30.0, help="skip interaction rows predicted longer (s)")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help="results file (default results/<machine>/kernels.md)")
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(json.loads(args.case))), flush=True)
        return ""
    provenance = Provenance.start(__file__, argv)
    script = str(Path(__file__).resolve())
    if args.smoke:
        inter, notes = interaction_table((100, 200), (2,), args.cap, script)
        soft = softmin_table((100,), (2,), 0.05)
        rade, times = rademacher_table(1000, 10, 5, 3)
    else:
        inter, notes = interaction_table((1_000, 10_000, 100_000, 1_000_000), (2, 10), args.cap, script)
        soft = softmin_table((1_000, 10_000), (2, 10, 100), 3.0)
        rade, times = rademacher_table(100_000, 10, 20, 15)
    ratio = times["EM step, Rademacher noise"] / times["EM step, Gaussian noise"]
    if not keops_available():
        notes.append(
            "KeOps (`pykeops`) is not installed here: its rows and column are left out "
            '(`pip install -e ".[keops]"` and rerun to compare the backends)'
        )
    notes.append(
        f"Rademacher: the draw {times['Rademacher draw alone, before'] / times['Rademacher draw alone, now']:.1f}× "
        f"faster than before; an EM step with it is {ratio:.2f}× the Gaussian one "
        f"({fmt_time(times['EM step, Rademacher noise'])} against {fmt_time(times['EM step, Gaussian noise'])})"
    )
    notes.append(
        "target Rademacher EM step near 1 ms at M = 1e5, d = 10: "
        + (f"{fmt_time(times['EM step, Rademacher noise'])}; floor (the Rademacher draw alone) "
           f"{fmt_time(times['Rademacher draw alone, now'])}" if not args.smoke else "not run (--smoke)")
    )  # fmt: skip
    text = "\n".join(
        [
            "# Large M: interactions, the soft-minimum's backends, the noise of a step",
            "",
            "**Interaction drift per step** (each case in a fresh process):",
            "",
            *inter,
            "",
            "**Soft-minimum backends** (one process, interleaved):",
            "",
            *soft,
            "",
            "**Noise per Euler–Maruyama step** (one process, interleaved):",
            "",
            *rade,
            "",
            *[f"- {note}" for note in notes],
            "",
        ]
    )
    out = write_result(args.out or result_path("kernels"), text, provenance)
    print(f"written: {out}")
    return text


if __name__ == "__main__":
    main()
