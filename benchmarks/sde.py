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
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting threads ruin shared CPUs

import argparse  # noqa: E402
import datetime  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torchsde  # noqa: E402
from _common import machine, write_result  # noqa: E402
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


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat: checks that it runs")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", default=str(Path(__file__).with_name("results") / "sde.md"))
    args = parser.parse_args(argv)
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
