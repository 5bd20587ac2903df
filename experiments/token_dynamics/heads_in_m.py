"""The coupled view: token laws pushed through depth by M heads drawn from ρ approach the M → ∞ law as M^{-1/2}.

    python experiments/token_dynamics/heads_in_m.py [--preset quick|smoke]   # writes results/heads_in_m/

Heads θ = (W_Q, W_K, W_V, W_O) of width h are drawn i.i.d. from ρ: a fixed head θ̄ plus Gaussian perturbations of
relative size σ (so that the mean-field velocity V_ρ = E_ρ v_θ is not zero). The layer ``1/M Σ_m v_{θ_m}`` with
shared weights moves n tokens through depth (T, L residual steps: the network's depth view, ``depth_flow``) from
one fixed initial cloud. For each M and each of ``reps`` independent draws of the M heads,
``W2(μ_T^M, μ_T^ref)`` is the exact W2 (POT ``emd2``) between the n tokens pushed by the M heads and by
``M_ref`` heads (the large-M reference). ``V_M − V_ρ`` is an average of M i.i.d. zero-mean fields, so the
token displacement and W2 are O(M^{-1/2}): the slope of log E W2 on log M is −1/2 (while W2 at M is well above
its value at M_ref, whose own error is O(M_ref^{-1/2})). Reported: mean W2 and its 95 % t interval per M, the
least-squares slope and its bootstrap 95 % interval (resampling the draws within each M), as ``m (lo – hi)``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from meanfield._io import write_json_atomic, write_text_atomic
from meanfield.metrics.wasserstein import w2
from meanfield.nn import ParticleAttention
from meanfield.nn.tokens import depth_flow
from meanfield.studies.plotting import figure, save
from meanfield.studies.stats import interval_cell, loglog_slope, t_interval

HERE = Path(__file__).resolve().parent
PRESETS = {
    "smoke": dict(d=8, h=4, n=16, T=1.0, L=8, sigma=0.5, Ms=(2, 4, 8), M_ref=64, reps=4, boot=200, seed=0),
    "quick": dict(
        d=16,
        h=8,
        n=64,
        T=2.0,
        L=32,
        sigma=0.5,
        Ms=(4, 8, 16, 32, 64, 128),
        M_ref=4096,
        reps=16,
        boot=2000,
        seed=0,
    ),
}


def draw_heads(
    M: int, p: dict, mean_head: ParticleAttention, generator: torch.Generator
) -> ParticleAttention:
    """M heads θ_m = θ̄ + σ·(Gaussian head at the layer's own initial scale), frozen."""
    layer = ParticleAttention(p["d"], M, p["h"], generator=generator, dtype=torch.float64)
    with torch.no_grad():
        layer.W_QKV.mul_(p["sigma"]).add_(mean_head.W_QKV)  # (M, 3, h, d)
        layer.W_O.mul_(p["sigma"]).add_(mean_head.W_O)  # (M, h, d)
    return layer.requires_grad_(False)


def study(p: dict) -> dict:
    g = torch.Generator().manual_seed(p["seed"])
    mean_head = ParticleAttention(p["d"], 1, p["h"], generator=g, dtype=torch.float64)  # θ̄ (1, …)
    x0 = torch.randn(1, p["n"], p["d"], generator=g, dtype=torch.float64)  # (1, n, d) one fixed cloud

    def push(M: int) -> torch.Tensor:
        return depth_flow(draw_heads(M, p, mean_head, g), x0, depth=p["L"], T=p["T"])[0]  # (n, d)

    reference = push(p["M_ref"])  # (n, d)
    moved = (reference - x0[0]).square().sum(-1).mean().sqrt().item()  # RMS displacement under V_ρ
    rows, per_m = [], {}
    for M in p["Ms"]:
        values = np.array([w2(push(M), reference, method="exact").item() for _ in range(p["reps"])])
        ci = t_interval(values)
        per_m[M] = values
        rows.append(dict(M=M, mean=ci.mean, low=ci.lo, high=ci.hi, values=values.tolist()))
    Ms = np.array(p["Ms"], dtype=float)
    fit = loglog_slope(Ms, [r["mean"] for r in rows])
    rng = np.random.default_rng(p["seed"])
    boot = [
        loglog_slope(Ms, [rng.choice(per_m[M], size=p["reps"]).mean() for M in p["Ms"]]).value
        for _ in range(p["boot"])
    ]
    return dict(
        rows=rows,
        slope=fit.value,
        slope_low=float(np.percentile(boot, 2.5)),
        slope_high=float(np.percentile(boot, 97.5)),
        displacement=moved,
        reference_error_scale=rows[-1]["mean"] * math.sqrt(p["Ms"][-1] / p["M_ref"]),
    )


def table(p: dict, out: dict) -> str:
    lines = [
        f"Heads of width h = {p['h']} in d = {p['d']}, θ = θ̄ + {p['sigma']}·noise; n = {p['n']} tokens, depth L = "
        f"{p['L']} to T = {p['T']}; reference M_ref = {p['M_ref']}; {p['reps']} draws per M.",
        "",
        "| M | E W2(μ_T^M, μ_T^ref) (95 % CI) |",
        "|---:|---|",
    ]
    lines += [
        f"| {r['M']} | {interval_cell(r['mean'], r['low'], r['high'], significant=4)} |" for r in out["rows"]
    ]
    lines += [
        "",
        f"Slope of log E W2 on log M (bootstrap 95 % interval): "
        f"**{interval_cell(out['slope'], out['slope_low'], out['slope_high'], 3)}**; mean-field prediction −0.5. "
        f"RMS token displacement under the reference "
        f"field: {out['displacement']:.3g}; the reference's own error, extrapolated as M^(−1/2): "
        f"≈ {out['reference_error_scale']:.2g}.",
    ]
    return "\n".join(lines) + "\n"


def plot(p: dict, out: dict, path: Path) -> None:
    fig, ax = figure()
    Ms = np.array([r["M"] for r in out["rows"]], dtype=float)
    mean = np.array([r["mean"] for r in out["rows"]])
    err = np.array(
        [[r["mean"] - r["low"] for r in out["rows"]], [r["high"] - r["mean"] for r in out["rows"]]]
    )
    ax.errorbar(Ms, mean, yerr=err, fmt="o", label="E W2 ± 95 % CI")
    ax.loglog(Ms, mean[0] * (Ms / Ms[0]) ** -0.5, "k:", label="∝ M^(−1/2)")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="heads M",
        ylabel="W2(μ_T^M, μ_T^ref)",
        title=f"tokens through depth by M heads (slope {out['slope']:.2f})",
    )
    ax.legend(fontsize=8)
    save(fig, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="quick", choices=sorted(PRESETS))
    parser.add_argument("--out", default=None, help="results folder (default results/heads_in_m[_smoke])")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    p = PRESETS[args.preset]
    folder = (
        Path(args.out)
        if args.out
        else HERE / "results" / ("heads_in_m" + ("" if args.preset == "quick" else "_" + args.preset))
    )
    folder.mkdir(parents=True, exist_ok=True)
    start = time.process_time()
    out = study(p)
    cpu = time.process_time() - start
    write_json_atomic(folder / "config.json", dict(preset=args.preset, **p))
    write_json_atomic(folder / "summary.json", dict(out, cpu_seconds=cpu))
    write_text_atomic(folder / "tables.md", table(p, out) + f"\nCPU time: {cpu:.0f} s (one thread).\n")
    if args.preset == "quick":
        plot(p, out, HERE.parents[1] / "docs" / "assets" / "token_dynamics_heads_in_m.png")
    print(table(p, out))
    print(json.dumps(dict(cpu_seconds=round(cpu, 1))))


if __name__ == "__main__":
    main()
