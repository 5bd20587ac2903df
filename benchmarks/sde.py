"""Native Euler–Maruyama vs torchsde's Euler, side by side, for OU and a mean-field drift.

Columns (steps per second, float32, B = 1 replica of M particles in d dimensions, medians of interleaved
repeats in one run, in a random order drawn afresh every repeat):

- ``native``: ``meanfield.simulate(system, x0, solver="euler")`` — the default solver. From 262,144 numbers
  a step, the draw of step n + 1 runs in a background thread during the update of step n (same numbers).
- ``serial``: the same with that overlap switched off (every draw in the caller's thread).
- ``sdeint+bm``: ``torchsde.sdeint(sde, y0, ts, method="euler", dt=dt, bm=...)`` with a supplied Brownian
  motion that draws one Gaussian increment per step from a generator (the cheapest one can give it).
- ``sdeint``: ``torchsde.sdeint(...)`` with its default Brownian motion (``BrownianInterval``).
- ``adapter``: ``meanfield.simulate(system, x0, solver="torchsde_euler")`` (torchsde's Euler step on
  meanfield's grid and noise).
- ``noise``: drawing the Gaussian increments alone (``Tensor.normal_`` into a buffer).
- ``draw + 1 pass``: the draw followed by one fused pass over the state
  (``torch.add(noise, x, alpha=1 − a·dt, out=x)``): the least an Euler–Maruyama step can cost when the
  draw and the update run one after the other.

Ratios: ``native`` over each alternative (higher is faster), and ``native step / noise`` (lower is better;
1.0, the draw alone, is the floor when the update overlaps the draw; ``draw + 1 pass`` is the floor when they
run one after the other). Run: ``python benchmarks/sde.py`` (``--smoke`` for a seconds-long check that it
runs); the results go to ``benchmarks/results/<machine>/sde.md``.

**On a device** (``--device cuda``, or ``--device cpu`` for the same table on the CPU): the Euler–Maruyama
step of ``simulate`` at M·d = 10⁶ … 10⁸ numbers on CUDA (10⁵, 10⁶ on a CPU) (float32, B = 1, d = 10), as steps/s, numbers/s and as a
fraction of the memory bandwidth, counting the least a step must move: read x and write x, 8 bytes a number.
The bandwidth is measured in the same run (a device copy ``y.copy_(x)`` of the largest state, also 8 bytes a
number) and, where known, the vendor's figure is given too. Columns: ``noise alone`` and ``draw + 1 pass``
as above; ``noise share`` = (time of the draw alone) / (time of a simulate step); and, for a run that saves
every 8 steps, the step rate with the finiteness check of before issue 18 (``isfinite(x).all()``, read at
every stop: one host synchronisation per saved state) and with the present one (one ``aminmax`` pass,
flags read together every ``check_every`` steps off the CPU), and their ratio (same run, interleaved). Written
to ``benchmarks/results/<machine>/sde-device.md`` (``<machine>`` the GPU on CUDA).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting threads ruin shared CPUs

import argparse  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torchsde  # noqa: E402
from _common import Provenance, result_path, write_result  # noqa: E402
from torchsde._brownian import BaseBrownian  # noqa: E402

import meanfield as mf  # noqa: E402
from meanfield import _background  # noqa: E402
from meanfield.drift.potentials import Quadratic, QuadraticInteraction  # noqa: E402

A, K, BETA, DT = 1.0, 1.0, 0.5, 0.01
SIGMA = math.sqrt(2 * BETA)


class TorchsdeSystem:
    """The same system written for torchsde: flat states (B, M·d), diagonal noise through g_prod."""

    noise_type, sde_type = "diagonal", "ito"

    def __init__(self, shape, mean_field: bool):
        self.shape, self.mean_field = shape, mean_field

    def f(self, t, y):
        if not self.mean_field:
            return -A * y
        x = y.view(self.shape)  # (B, M, d)
        return (-A * x - K * (x - x.mean(1, keepdim=True))).reshape(y.shape)

    def g(self, t, y):  # needed by sdeint to size its default Brownian motion
        return torch.full_like(y, SIGMA)

    def g_prod(self, t, y, v):
        return SIGMA * v


class DrawnBrownian(BaseBrownian):
    """The cheapest Brownian motion to hand sdeint: a fresh N(0, (tb − ta)·I) draw per call, from a generator."""

    def __init__(self, shape, generator):
        self._shape, self.generator = shape, generator
        self.buffer = torch.empty(shape)

    def __call__(self, ta, tb=None, return_U=False, return_A=False):
        return self.buffer.normal_(0.0, math.sqrt(float(tb) - float(ta)), generator=self.generator)

    def __repr__(self):
        return "DrawnBrownian()"

    dtype = property(lambda self: self.buffer.dtype)
    device = property(lambda self: self.buffer.device)
    shape = property(lambda self: self._shape)
    levy_area_approximation = property(lambda self: "none")


def _timed(fn, steps: int) -> float:
    start = time.perf_counter()
    fn()
    return steps / (time.perf_counter() - start)


def bench_case(M: int, d: int, mean_field: bool, steps: int, default_steps: int, repeats: int) -> dict:
    shape = (1, M, d)
    x0 = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    y0 = x0.reshape(1, -1)
    system = mf.MeanFieldLangevin(Quadratic(A), QuadraticInteraction(K) if mean_field else None, beta=BETA)
    sde = TorchsdeSystem(shape, mean_field)
    ts = torch.tensor([0.0, steps * DT], dtype=torch.float64)  # float64 times: no float32 drift off the grid
    ts_default = torch.tensor([0.0, default_steps * DT], dtype=torch.float64)
    buffer = torch.empty(shape)
    gen = torch.Generator().manual_seed(1)

    def native():
        mf.simulate(system, x0, t1=steps * DT, dt=DT, generator=gen)

    def serial():
        saved, _background.OVERLAP_MIN = _background.OVERLAP_MIN, math.inf
        try:
            native()
        finally:
            _background.OVERLAP_MIN = saved

    def adapter():
        mf.simulate(system, x0, t1=steps * DT, dt=DT, generator=gen, solver="torchsde_euler")

    def sdeint_bm():
        bm = DrawnBrownian((1, M * d), gen)
        torchsde.sdeint(sde, y0, ts, bm=bm, method="euler", dt=DT)

    def sdeint_default():
        torchsde.sdeint(sde, y0, ts_default, method="euler", dt=DT)

    def noise():
        for _ in range(steps):
            buffer.normal_(0.0, 0.1, generator=gen)

    state = x0.clone()

    def floor():  # the draw plus one pass over the state: the least any Euler–Maruyama step can do
        for _ in range(steps):
            torch.add(buffer.normal_(0.0, 0.1, generator=gen), state, alpha=0.99, out=state)

    cases = {
        "native": (native, steps),
        "serial": (serial, steps),
        "sdeint+bm": (sdeint_bm, steps),
        "sdeint": (sdeint_default, default_steps),
        "adapter": (adapter, steps),
        "noise": (noise, steps),
        "floor": (floor, steps),
    }
    rates = {name: [] for name in cases}
    for fn, n in cases.values():  # warm-up
        fn() if n == steps else None
    names = list(cases)
    order = torch.Generator().manual_seed(M * d)
    for _ in range(repeats):  # interleaved, in a fresh random order every repeat (no fixed neighbours)
        for i in torch.randperm(len(names), generator=order).tolist():
            fn, n = cases[names[i]]
            rates[names[i]].append(_timed(fn, n))
    return {name: statistics.median(r) for name, r in rates.items()}


# ------------------------------------------------------------------------------------------------ on a device

NOMINAL_BANDWIDTH = {"H200": 4.8e12, "H100 80GB HBM3": 3.35e12}
"""Vendor datasheet memory bandwidths (bytes/s) by a fragment of the device name; measured in-run besides."""


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _rate(fn, steps: int, device: torch.device) -> float:
    """Steps per second of ``fn`` (which runs ``steps`` steps), the device synchronised around it."""
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return steps / (time.perf_counter() - start)


def _calibrate(fn_of_steps, device: torch.device, seconds: float) -> int:
    """How many steps make one timing last about ``seconds`` (16 … 4000)."""
    fn_of_steps(8)  # warm-up (allocations, kernels)
    rate = _rate(lambda: fn_of_steps(16), 16, device)
    return int(min(4000, max(16, rate * seconds)))


def _old_check(x: torch.Tensor) -> torch.Tensor:
    """The finiteness check of simulate before issue 18: a bool per entry, then a reduction."""
    return torch.isfinite(x).all()


def device_case(n: int, mean_field: bool, device: torch.device, repeats: int, seconds: float) -> dict:
    """Rates (steps/s) of the EM step and its parts for a float32 state of ``n`` numbers (B = 1, d = 10)."""
    d = 10
    shape = (1, n // d, d)
    x0 = torch.randn(shape, device=device, generator=torch.Generator(device).manual_seed(0))  # (1, M, d)
    system = mf.MeanFieldLangevin(Quadratic(A), QuadraticInteraction(K) if mean_field else None, beta=BETA)
    gen = torch.Generator(device).manual_seed(1)
    buffer, state, copy = torch.empty_like(x0), x0.clone(), torch.empty_like(x0)  # (1, M, d)
    module = sys.modules["meanfield.stepping.simulate"]  # (meanfield.simulate is the function)

    def native(steps):
        mf.simulate(system, x0, t1=steps * DT, dt=DT, generator=gen)

    def saving(steps, old=False):
        saved = module._all_finite, module._EAGER_CHECKS
        if old:  # the code before issue 18: isfinite().all(), read (synchronised) at every stop
            module._all_finite, module._EAGER_CHECKS = _old_check, frozenset({"cpu", device.type})
        try:
            mf.simulate(system, x0, t1=steps * DT, dt=DT, generator=gen, save_every=8)
        finally:
            module._all_finite, module._EAGER_CHECKS = saved

    def noise(steps):
        for _ in range(steps):
            buffer.normal_(0.0, 0.1, generator=gen)

    def floor(steps):
        for _ in range(steps):
            torch.add(buffer.normal_(0.0, 0.1, generator=gen), state, alpha=0.99, out=state)

    def copies(steps):
        for _ in range(steps):
            copy.copy_(state)

    steps = _calibrate(native, device, seconds)
    saving_steps = max(16, min(steps, 64))  # 9 saved states at most: memory stays small at 10⁸
    cases = {
        "native": (lambda: native(steps), steps),
        "noise": (lambda: noise(steps), steps),
        "floor": (lambda: floor(steps), steps),
        "copy": (lambda: copies(steps), steps),
        "save8 new": (lambda: saving(saving_steps), saving_steps),
        "save8 old": (lambda: saving(saving_steps, old=True), saving_steps),
    }
    for fn, _ in cases.values():  # warm-up
        fn()
    rates = {name: [] for name in cases}
    names = list(cases)
    order = torch.Generator().manual_seed(n)
    for _ in range(repeats):  # interleaved, in a fresh random order every repeat
        for i in torch.randperm(len(names), generator=order).tolist():
            fn, k = cases[names[i]]
            rates[names[i]].append(_rate(fn, k, device))
    out = {name: statistics.median(r) for name, r in rates.items()}
    out["save ratio"] = statistics.median(
        new / old for new, old in zip(rates["save8 new"], rates["save8 old"])
    )
    out["steps"] = steps
    return out


def device_main(args, provenance: Provenance) -> str:
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: CUDA is not available here")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    sizes = args.sizes or ([10**6, 10**7, 10**8] if device.type == "cuda" else [10**5, 10**6])
    if args.smoke:
        sizes = [10**4]
    repeats = 1 if args.smoke else args.repeats
    seconds = 0.02 if args.smoke else args.seconds
    nominal = next((bw for key, bw in NOMINAL_BANDWIDTH.items() if key in name), None)
    rows = {}
    for n in sizes:
        for mean_field in (False, True):
            rows[n, mean_field] = device_case(n, mean_field, device, repeats, seconds)
            print(f"M·d = {n:.0e} {'mean-field' if mean_field else 'OU'}: {rows[n, mean_field]}", flush=True)
    largest = max(sizes)
    measured = statistics.median([rows[largest, mf_]["copy"] for mf_ in (False, True)]) * largest * 8  # B/s
    header = (
        "| drift | M·d | steps/s | numbers/s | GB/s (8 B/number) | of measured copy BW | of nominal BW "
        "| floor: noise alone steps/s | floor: draw + 1 pass steps/s | noise share | save/8 steps: before → now "
        "steps/s | now/before |"
    )
    lines = [header, "|" + "---|" * 12]
    for (n, mean_field), r in rows.items():
        bw = r["native"] * n * 8  # bytes/s of the least traffic: read x, write x
        lines.append(
            f"| {'mean-field' if mean_field else 'OU'} | {n:.0e} | {r['native']:.0f} | {r['native'] * n:.3g} "
            f"| {bw / 1e9:.3g} | {bw / measured:.0%} | {f'{bw / nominal:.0%}' if nominal else '—'} "
            f"| {r['noise']:.0f} | {r['floor']:.0f} | {r['native'] / r['noise']:.2f} "
            f"| {r['save8 old']:.0f} → {r['save8 new']:.0f} | {r['save ratio']:.2f}× |"
        )
    text = "\n".join(
        [
            f"# Euler–Maruyama step on {name} ({device.type})",
            "",
            "- float32, B = 1, d = 10; `simulate(system, x0, generator=…)` with the default check_every = 64; "
            "medians of interleaved repeats (each timing synchronises the device before and after)",
            f"- bandwidth: least traffic of a step = read x + write x = 8 bytes a number; measured copy bandwidth "
            f"(y.copy_(x), 8 bytes a number, M·d = {largest:.0e}) {measured / 1e9:.0f} GB/s"
            + (f"; nominal {nominal / 1e12:.1f} TB/s" if nominal else "; nominal: not known for this device"),
            "- floors: the noise draw alone (the least a step costs when the update overlaps it) and the draw "
            "followed by one fused pass over the state (when they run one after the other)",
            "- noise share: time of the draw alone / time of one simulate step (the draw writes 4 bytes a "
            "number, the fused update reads x and the draw and writes x: 16 bytes a number in all, so a step "
            "that runs at the bandwidth reaches at most half of it in this 8-byte count)",
            "- save/8 steps: a run that saves every 8 steps, with the finiteness check before issue 18 "
            "(isfinite(x).all(), synchronised at every stop) and now (one aminmax pass; off the CPU the flags "
            "are read every check_every steps); ratio = median of the paired per-repeat ratios",
            "",
            *lines,
            "",
        ]
    )
    out = args.out or result_path("sde-device", device)
    print(text)
    print(f"written: {write_result(out, text, provenance)}")
    return text


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat: checks that it runs")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument(
        "--out", default=None, help="results file (default benchmarks/results/<machine>/sde.md, or sde-device.md with --device)"
    )
    parser.add_argument("--device", default=None, help="the EM-step table on this device (cuda, cpu) instead")
    parser.add_argument("--sizes", type=float, nargs="+", default=None, help="M·d of the device table")
    parser.add_argument("--seconds", type=float, default=0.2, help="length of one timing in the device table")
    parser.add_argument("--M", type=float, nargs="+", default=None, help="particles M of the torchsde table")
    parser.add_argument("--d", type=int, nargs="+", default=None, help="dimensions d of the torchsde table")
    args = parser.parse_args(argv)
    provenance = Provenance.start(__file__, argv, device=args.device or "cpu")
    if args.sizes:
        args.sizes = [int(n) for n in args.sizes]
    if args.device is not None:
        return device_main(args, provenance)
    if args.out is None:
        args.out = result_path("sde")
    Ms = (100,) if args.smoke else tuple(int(m) for m in args.M or (1_000, 10_000, 100_000))
    ds = (1, 2) if args.smoke else tuple(args.d or (1, 10))
    if min(Ms) < 1 or min(ds) < 1:
        raise SystemExit(f"--M and --d must be positive, got M = {Ms}, d = {ds}")
    repeats = 1 if args.smoke else args.repeats
    rows = []
    header = (
        "| drift | M | d | native | serial | sdeint+bm | sdeint (default BM) | adapter | floor: noise alone | "
        "floor: draw + 1 pass | native/sdeint | native/sdeint+bm | native step/noise | serial step/noise | "
        "(draw + 1 pass)/noise |"
    )
    lines = [header, "|" + "---|" * 15]
    print(header)
    for mean_field in (False, True):
        for M in Ms:
            for d in ds:
                n = M * d
                steps = 20 if args.smoke else max(200, min(2000, int(2e8 / (n * 200))))
                default_steps = (
                    5 if args.smoke else (steps if n <= 10_000 else 50)
                )  # BrownianInterval is slow
                r = bench_case(M, d, mean_field, steps, default_steps, repeats)
                row = (
                    f"| {'mean-field' if mean_field else 'OU'} | {M:.0e} | {d} | {r['native']:.0f} | {r['serial']:.0f} | "
                    f"{r['sdeint+bm']:.0f} | {r['sdeint']:.0f} | {r['adapter']:.0f} | {r['noise']:.0f} | "
                    f"{r['floor']:.0f} | {r['native'] / r['sdeint']:.0f}× | {r['native'] / r['sdeint+bm']:.2f}× | "
                    f"{r['noise'] / r['native']:.2f} | {r['noise'] / r['serial']:.2f} | {r['noise'] / r['floor']:.2f} |"
                )
                rows.append(((mean_field, M, d), r))
                lines.append(row)
                print(row, flush=True)
    text = "\n".join(
        [
            "# Euler–Maruyama: native vs torchsde, with the floor",
            "",
            "Steps per second (float32, B = 1), medians of interleaved repeats; ratios from the same run. "
            "Floors: the noise draw alone, and the draw followed by one fused pass over the state.",
            "",
            *lines,
            "",
            *[f"- {c}" for c in targets(dict(rows))],
            *disturbed_note(dict(rows)),
            "",
        ]
    )
    out = write_result(args.out, text, provenance)
    print(f"written: {out}")
    return text


def targets(rows: dict[tuple[bool, int, int], dict]) -> list[str]:
    """The issue's targets, each with what this run measured (for the cases it ran)."""
    drift = lambda mean_field: "mean-field" if mean_field else "OU"  # noqa: E731
    lines = []
    small = [(k, r) for k, r in rows.items() if k[1:] == (1_000, 1)]
    if small:
        got = ", ".join(f"{drift(k[0])} {r['native'] / r['sdeint']:.0f}×" for k, r in small)
        met = all(r["native"] / r["sdeint"] >= 100 for _, r in small)
        lines.append(f"target native ≥ 100× sdeint (default BM) at M = 1e3, d = 1: {got}, "
                     f"{'met' if met else '**missed**'}")  # fmt: skip
    if rows:
        worst_key, worst = min(rows.items(), key=lambda kr: kr[1]["native"] / kr[1]["sdeint+bm"])
        ratio = worst["native"] / worst["sdeint+bm"]
        lines.append(
            f"target native ≥ 1.0× sdeint+bm everywhere: lowest {ratio:.2f}× ({drift(worst_key[0])}, "
            f"M = {worst_key[1]:.0e}, d = {worst_key[2]}), {'met' if ratio >= 1 else '**missed**'}"
        )
    large = [(k, r) for k, r in rows.items() if k[1:] == (100_000, 10)]
    if large:
        got = "; ".join(
            f"{drift(k[0])} {r['noise'] / r['native']:.2f} (floor draw + 1 pass {r['noise'] / r['floor']:.2f})"
            for k, r in large
        )
        disturbed = [drift(k[0]) for k, r in large if disturbed_floor(r)]
        met = all(r["noise"] / r["native"] <= 1.2 for _, r in large)
        verdict = (
            f"not judged: in the {', '.join(disturbed)} row the draw alone ran slower than the draw plus a pass "
            "(the machine's load disturbed the floor; rerun)"
            if disturbed
            else ("met" if met else "**missed**")
        )
        lines.append(f"target native step ≤ 1.2× the noise draw at M = 1e5, d = 10: {got}, {verdict}")
    return lines


def disturbed_note(rows: dict[tuple[bool, int, int], dict]) -> list[str]:
    """A line naming the rows whose floor the load disturbed (:func:`disturbed_floor`), if any."""
    bad = [
        f"{'mean-field' if k[0] else 'OU'} M = {k[1]:.0e}, d = {k[2]}"
        for k, r in rows.items()
        if disturbed_floor(r)
    ]
    if not bad:
        return []
    return [
        f"- disturbed by the load (the draw alone measured slower than the draw plus a pass): {'; '.join(bad)}"
    ]


def disturbed_floor(rates: dict[str, float]) -> bool:
    """Whether a row's floor cannot be right: the draw alone measured more than 5 % slower than the draw
    followed by a pass over the state (which contains it), i.e. the load disturbed the measurement."""
    return rates["floor"] > 1.05 * rates["noise"]


if __name__ == "__main__":
    main()
