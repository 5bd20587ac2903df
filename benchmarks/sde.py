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
1.0, the draw alone, is the floor when the update overlaps the draw). Run: ``python benchmarks/sde.py`` (``--smoke`` for a seconds-long check that it runs).

**On a device** (``--device cuda``, or ``--device cpu`` for the same table on the CPU): the Euler–Maruyama
step of ``simulate`` at M·d = 10⁶ … 10⁸ numbers (float32, B = 1, d = 10), as steps/s, numbers/s and as a
fraction of the memory bandwidth, counting the least a step must move: read x and write x, 8 bytes a number.
The bandwidth is measured in the same run (a device copy ``y.copy_(x)`` of the largest state, also 8 bytes a
number) and, where known, the vendor's figure is given too. Columns: ``noise alone`` and ``draw + 1 pass``
as above; ``noise share`` = (time of the draw alone) / (time of a simulate step); and, for a run that saves
every 8 steps, the step rate with the finiteness check of before issue 18 (``isfinite(x).all()``, read at
every stop: one host synchronisation per saved state) and with the present one (one ``aminmax`` pass,
flags read together every ``check_every`` steps off the CPU), and their ratio (same run, interleaved). Written
to ``benchmarks/results/sde-<device>.md``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting threads ruin shared CPUs

import argparse  # noqa: E402
import datetime  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torchsde  # noqa: E402
from _common import device_description, device_slug, machine, write_result  # noqa: E402
from torchsde._brownian import BaseBrownian  # noqa: E402

import meanfield as mf  # noqa: E402
from meanfield import _background  # noqa: E402
from meanfield.potentials import Quadratic, QuadraticInteraction  # noqa: E402

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
    module = sys.modules["meanfield.simulate"]  # (meanfield.simulate is also the function's name)

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


def device_main(args) -> str:
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
    load_before = os.getloadavg()[0]
    rows = {}
    for n in sizes:
        for mean_field in (False, True):
            rows[n, mean_field] = device_case(n, mean_field, device, repeats, seconds)
            print(f"M·d = {n:.0e} {'mean-field' if mean_field else 'OU'}: {rows[n, mean_field]}", flush=True)
    largest = max(sizes)
    measured = statistics.median([rows[largest, mf_]["copy"] for mf_ in (False, True)]) * largest * 8  # B/s
    header = (
        "| drift | M·d | steps/s | numbers/s | GB/s (8 B/number) | of measured copy BW | of nominal BW "
        "| noise alone steps/s | draw + 1 pass steps/s | noise share | save/8 steps: before → now steps/s "
        "| now/before |"
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
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = "python benchmarks/sde.py " + " ".join(args.argv)
    text = "\n".join(
        [
            f"# Euler–Maruyama step on {name} ({device.type})",
            "",
            f"- command: `{command.strip()}` — {stamp}",
            f"- device: {device_description(device)}",
            f"- host: {machine()}; 1-minute load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after "
            "(a shared machine moves the times; the paired ratios less)",
            "- float32, B = 1, d = 10; `simulate(system, x0, generator=…)` with the default check_every = 64; "
            "medians of interleaved repeats (each timing synchronises the device before and after)",
            f"- bandwidth: least traffic of a step = read x + write x = 8 bytes a number; measured copy bandwidth "
            f"(y.copy_(x), 8 bytes a number, M·d = {largest:.0e}) {measured / 1e9:.0f} GB/s"
            + (f"; nominal {nominal / 1e12:.1f} TB/s" if nominal else "; nominal: not known for this device"),
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
    out = args.out or str(Path(__file__).with_name("results") / f"sde-{device_slug(device)}.md")
    print(text)
    print(f"written: {write_result(out, text)}")
    return text


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat: checks that it runs")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument(
        "--out", default=None, help="results file (default benchmarks/results/sde.md, or sde-<device>.md)"
    )
    parser.add_argument("--device", default=None, help="the EM-step table on this device (cuda, cpu) instead")
    parser.add_argument("--sizes", type=float, nargs="+", default=None, help="M·d of the device table")
    parser.add_argument("--seconds", type=float, default=0.2, help="length of one timing in the device table")
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    if args.sizes:
        args.sizes = [int(n) for n in args.sizes]
    if args.device is not None:
        return device_main(args)
    if args.out is None:
        args.out = str(Path(__file__).with_name("results") / "sde.md")
    Ms = (100,) if args.smoke else (1_000, 10_000, 100_000)
    ds = (1, 2) if args.smoke else (1, 10)
    repeats = 1 if args.smoke else args.repeats
    rows = []
    header = (
        "| drift | M | d | native | serial | sdeint+bm | sdeint (default BM) | adapter | noise alone | draw + 1 pass | "
        "native/sdeint | native/sdeint+bm | native step/noise | serial step/noise | (draw + 1 pass)/noise |"
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
                rows.append(r)
                lines.append(row)
                print(row, flush=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join(
        [
            "Steps per second (float32, B = 1), medians of interleaved repeats; ratios from the same run.",
            f"Command: `python benchmarks/sde.py{' --smoke' if args.smoke else ''}` — {stamp} — {machine()}.",
            "",
            *lines,
            "",
        ]
    )
    out = write_result(args.out, text)
    print(f"written: {out}")
    return text


if __name__ == "__main__":
    main()
