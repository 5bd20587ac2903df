"""Speed of one :class:`meanfield.optim.Langevin` step against ``torch.optim.Adam(fused=True)``.

The model: a 20M-parameter particle transformer without its forward pass (an embedding 8192×512, 15 blocks
of :class:`meanfield.nn.ParticleAttention` with M = 8 heads of width 64 and two LayerNorms each). Every
parameter holds a fixed random gradient, so only the optimizer step is timed. The target is a Langevin
step (Adam drift, preconditioned noise on all parameters) within 1.3× of the reference "fused Adam + one
flat normal draw of the same size" (the noise must be drawn somehow; the draw is what dominates on CPU).
torch's CPU ``normal_`` runs on one thread, so Langevin draws in a background thread while the other
core(s) apply the drift and compute the preconditioner; the row "draw not overlapped" is the same step
with the draw in the caller's thread (what the overlap buys).

Method: every candidate is timed once per round, in a random order drawn afresh each round (interleaved,
so a change of machine load hits all alike, and no candidate always follows the same one); after ``--warmup`` rounds, the table gives the median over ``--rounds``
rounds and, for the ratios, the median of the per-round ratios (paired in the same round).

Usage:
    python benchmarks/optim.py                 # prints the table, writes benchmarks/results/<machine>/optim.md
    python benchmarks/optim.py --rounds 5 --params 2 --no-write   # a quick smoke run
    python benchmarks/optim.py --device cuda   # on a GPU: writes benchmarks/results/<the GPU>/optim.md

On a GPU every draw is asynchronous anyway (no background thread); each timed call synchronises the device
before and after, so the times are those of the kernels a step launches.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from _common import Provenance, result_path, write_result  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from meanfield import _background  # noqa: E402
from meanfield.nn import ParticleAttention  # noqa: E402
from meanfield.optim import Langevin  # noqa: E402

LR, BETA = 1e-3, 1e-6


class Model(nn.Module):
    """Embedding + ``n_blocks`` × (LayerNorm, ParticleAttention, LayerNorm); parameters only."""

    def __init__(self, n_blocks: int, d: int = 512, heads: int = 8, vocab: int = 8192) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(
            nn.ModuleList(
                [nn.LayerNorm(d), ParticleAttention(d, heads, d // heads, generator=g), nn.LayerNorm(d)]
            )
            for _ in range(n_blocks)
        )


def build(params_millions: float, device: torch.device | str = "cpu") -> tuple[Model, int]:
    n_blocks = max(1, round((params_millions * 1e6 - 8192 * 512) / (4 * 512 * 512 + 4 * 512)))
    model = Model(n_blocks).to(device)
    g = torch.Generator().manual_seed(1)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g).to(device)  # fixed gradients: only the step is timed
    return model, sum(p.numel() for p in model.parameters())


def candidates(model: Model, n: int) -> dict[str, Callable[[], None]]:
    warnings.simplefilter("ignore", UserWarning)  # the scalar-noise row warns that it is not Gibbs
    params = list(model.parameters())
    device = params[0].device
    adam = torch.optim.Adam(params, lr=LR, fused=True)
    g = torch.Generator(device).manual_seed(2)
    draw = torch.empty(n, device=device)  # (n,)

    def flat_draw() -> None:
        draw.normal_(generator=g)  # (n,)

    def adam_and_draw() -> None:
        adam.step()
        flat_draw()

    naive = torch.optim.Adam(params, lr=LR, fused=True)
    g_naive = torch.Generator(device).manual_seed(3)

    @torch.no_grad()
    def naive_noise() -> None:
        naive.step()  # then per tensor: η_eff from v, its own draw
        for p in params:
            state = naive.state[p]
            bias2 = 1 - 0.999 ** float(state["step"])
            eta = LR / (state["exp_avg_sq"].sqrt() / math.sqrt(bias2) + 1e-8)  # (…)
            p.add_(torch.randn(p.shape, generator=g_naive, device=device) * (2 * BETA * eta).sqrt())

    langevin = {
        "Langevin adam, β=0 (drift only)": Langevin(params, LR, 0.0, drift="adam", seed=0),
        "Langevin adam + preconditioned noise": Langevin(params, LR, BETA, drift="adam", seed=0),
        "Langevin adam + scalar noise": Langevin(
            params, LR, BETA, drift="adam", noise_preconditioned=False, seed=0
        ),
        "Langevin sgd + noise": Langevin(params, LR, BETA, drift="sgd", seed=0),
        "Langevin param_groups_for(model)": Langevin(
            Langevin.param_groups_for(model), LR, BETA, drift="adam", seed=0
        ),
    }
    stats_opt = Langevin(params, LR, BETA, drift="adam", seed=0)

    def with_stats() -> None:
        stats_opt.step()
        stats_opt.last_stats  # noqa: B018 (computed on read)

    table: dict[str, Callable[[], None]] = {
        "torch.optim.Adam(fused=True)": adam.step,
        "flat normal draw (n)": flat_draw,
        "reference: fused Adam + flat draw": adam_and_draw,
    }
    table.update({name: opt.step for name, opt in langevin.items()})
    serial_opt = Langevin(params, LR, BETA, drift="adam", seed=0)

    def serial() -> None:
        saved = _background.OVERLAP_MIN
        _background.OVERLAP_MIN = math.inf  # the draw in the caller's thread, before the noise pass
        try:
            serial_opt.step()
        finally:
            _background.OVERLAP_MIN = saved

    table["Langevin adam + preconditioned noise, draw not overlapped"] = serial
    table["Langevin adam + noise, last_stats read"] = with_stats
    table["naive: fused Adam + per-tensor noise"] = naive_noise
    return table


def measure(
    table: dict[str, Callable[[], None]], rounds: int, warmup: int, device: torch.device | str = "cpu"
) -> dict[str, list[float]]:
    names = list(table)
    times: dict[str, list[float]] = {name: [] for name in names}
    shuffle = torch.Generator().manual_seed(0)
    cuda = torch.device(device).type == "cuda"
    for r in range(warmup + rounds):
        for name in [names[i] for i in torch.randperm(len(names), generator=shuffle)]:  # no fixed neighbours
            if cuda:
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            table[name]()
            if cuda:
                torch.cuda.synchronize(device)
            elapsed = time.perf_counter() - t0
            if r >= warmup:
                times[name].append(elapsed)
    return times


def report(times: dict[str, list[float]], n: int, rounds: int) -> tuple[str, float]:
    adam = times["torch.optim.Adam(fused=True)"]
    reference = times["reference: fused Adam + flat draw"]
    rows = [
        "| step | median ms | × fused Adam | × (fused Adam + flat draw) |",
        "|---|---:|---:|---:|",
    ]
    for name, ts in times.items():
        vs_adam = statistics.median(t / a for t, a in zip(ts, adam))
        vs_ref = statistics.median(t / a for t, a in zip(ts, reference))
        rows.append(f"| {name} | {1e3 * statistics.median(ts):.1f} | {vs_adam:.2f} | {vs_ref:.2f} |")
    target = statistics.median(
        t / a for t, a in zip(times["Langevin adam + preconditioned noise"], reference)
    )
    verdict = "meets" if target <= 1.3 else "MISSES"
    header = [
        "# Langevin optimizer step vs fused Adam",
        "",
        f"- {n / 1e6:.2f}M float32 parameters, fixed gradients, lr = {LR}, β = {BETA}; "
        f"median over {rounds} interleaved rounds, ratios are medians of per-round ratios",
        "- floor: fused Adam + one flat draw of the same size (the least a noisy Adam step can cost)",
        "",
    ]
    footer = [
        "",
        f"- target Langevin adam + preconditioned noise ≤ 1.3 × (fused Adam + flat draw), the floor: "
        f"{target:.2f} ({verdict} it)",
    ]
    return "\n".join(header + rows + footer) + "\n", target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=float, default=20.0, help="model size in millions (default 20)")
    parser.add_argument("--rounds", type=int, default=25, help="timed rounds (default 25)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds first (default 3)")
    parser.add_argument("--no-write", action="store_true", help="print the table, write no results file")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument(
        "--out", type=Path, default=None, help="results file (default results/<machine>/optim.md)"
    )
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: CUDA is not available here")
    provenance = Provenance.start(__file__, argv, device=device)
    results = args.out or result_path("optim", device)
    torch.manual_seed(0)
    model, n = build(args.params, device)
    times = measure(candidates(model, n), args.rounds, args.warmup, device)
    text, _ = report(times, n, args.rounds)
    print(text)
    if not args.no_write:
        print(f"written to {write_result(results, text, provenance)}")


if __name__ == "__main__":
    main()
