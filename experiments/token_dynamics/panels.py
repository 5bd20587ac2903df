"""Clustering panels: tokens on the circle and on S² under self-attention (Q = K = V = I, SA), over time.

    python experiments/token_dynamics/panels.py [--preset quick|smoke]   # results/panels/, docs/assets/*.png
    python experiments/token_dynamics/panels.py --redraw   # the figure alone, from results/panels/curves.json

Top row and middle left: n tokens on the circle from i.i.d. uniform angles at β ∈ {9, 25}, at times
t·λ_k* = 0, 5, 10, 40 (λ_k* the fastest linear growth rate), and the mean number of clusters over replicas against
the fastest-growing mode k*; middle right: the linear growth rates λ_k / λ_k*. Bottom row: n tokens on S² at β ∈ {1, 4, 16}: the mean inner product |x̄|² of the unit tokens (1 at one cluster) and
the number of clusters over time — at large β the tokens stay in several clusters for a long time (metastability)
before they merge into one.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from meanfield import simulate
from meanfield._io import write_json_atomic
from meanfield.nn.tokens import (
    SelfAttentionDynamics,
    count_clusters,
    fastest_mode,
    growth_rate,
    mean_inner_product,
)
from meanfield.studies.plotting import STYLE, page_layout, save

HERE = Path(__file__).resolve().parent
PRESETS = {
    "smoke": dict(circle_betas=(9.0,), circle_n=200, circle_B=2, sphere_betas=(1.0,), sphere_n=16, sphere_B=2,
                  sphere_T=5.0, seed=0),
    "quick": dict(circle_betas=(9.0, 25.0), circle_n=2000, circle_B=8, sphere_betas=(1.0, 4.0, 16.0),
                  sphere_n=64, sphere_B=8, sphere_T=200.0, seed=0),
}  # fmt: skip
SNAPSHOTS = (0.0, 5.0, 10.0, 40.0)  # t·λ_k*


def circle(beta: float, p: dict, g: torch.Generator) -> dict:
    lam = float(growth_rate(fastest_mode(beta), beta))
    eta = 0.1 / lam  # 10 steps per e-fold of the fastest mode
    theta = 2 * math.pi * torch.rand(p["circle_B"], p["circle_n"], dtype=torch.float64, generator=g)
    x0 = torch.stack((theta.cos(), theta.sin()), -1)  # (B, n, 2)
    system = SelfAttentionDynamics.identity(2, inverse_temperature=beta, sphere=True)
    traj = simulate(system, x0, t1=400 * eta, dt=eta, save_every=10)
    scaled = np.asarray(traj.times) * lam
    counts = [count_clusters(x[:, :1000], radius=0.05).double().mean().item() for x in traj.states]
    snaps = {
        s: torch.atan2(*traj.states[int(np.argmin(np.abs(scaled - s)))][0].flip(-1).unbind(-1)).tolist()
        for s in SNAPSHOTS
    }
    return dict(
        beta=beta, k_star=fastest_mode(beta), lam=lam, t=scaled.tolist(), clusters=counts, snapshots=snaps
    )


def sphere(beta: float, p: dict, g: torch.Generator) -> dict:
    x0 = torch.randn(p["sphere_B"], p["sphere_n"], 3, dtype=torch.float64, generator=g)
    x0 = x0 / x0.norm(dim=-1, keepdim=True)
    eta = 0.05 / max(1.0, beta / 4)
    system = SelfAttentionDynamics.identity(3, inverse_temperature=beta, sphere=True)
    steps = round(p["sphere_T"] / eta)
    traj = simulate(system, x0, t1=steps * eta, dt=eta, save_every=max(1, steps // 200))
    inner = [mean_inner_product(x).mean().item() for x in traj.states]
    counts = [count_clusters(x, radius=0.05).double().mean().item() for x in traj.states]
    return dict(beta=beta, t=np.asarray(traj.times).tolist(), inner=inner, clusters=counts)


def plot(out: dict, path: Path) -> None:
    """The snapshots four in a row, then the four curves two a row, at the page's width (8.4 in, 11-pt text:
    readable at ≥ 9 pt on the docs page; ``plotting.page_layout``)."""
    import matplotlib.pyplot as plt

    circles, spheres = out["circle"], out["sphere"]
    with page_layout(), plt.rc_context({**STYLE, "font.size": 11}):
        fig = plt.figure(figsize=(8.4, 7.8))
        grid = fig.add_gridspec(3, 4, height_ratios=(1.6, 3.0, 3.0))
        snaps = [fig.add_subplot(grid[0, i]) for i in range(len(SNAPSHOTS))]
        curves = [fig.add_subplot(grid[r, c : c + 2]) for r in (1, 2) for c in (0, 2)]
    for ax in curves:
        ax.grid(True, alpha=STYLE["grid.alpha"])
        ax.spines[["top", "right"]].set_visible(False)
    for s, ax in zip(SNAPSHOTS, snaps):
        for i, c in enumerate(circles):
            r = 1.0 - 0.12 * i
            a = np.asarray(c["snapshots"][s])
            ax.plot(r * np.cos(a), r * np.sin(a), ".", ms=2, color=f"C{i}", label=f"β = {c['beta']:g}")
        ax.set(aspect="equal", xticks=[], yticks=[], title=f"t·λ_k* = {s:g}")
        ax.spines[:].set_visible(False)
    ax = curves[0]
    for i, c in enumerate(circles):
        ax.plot(c["t"], c["clusters"], color=f"C{i}", label=f"β = {c['beta']:g}")
        ax.axhline(c["k_star"], color=f"C{i}", ls=":", lw=1)
    ax.set(xlabel="t·λ_k*", ylabel="clusters (mean)", title="circle: clusters, k* dotted", yscale="log")
    ax.legend(fontsize=9)
    ax = curves[1]
    ks = np.arange(1, 16)
    for i, beta in enumerate((1.0, 4.0, 9.0, 25.0, 64.0)):
        rates = growth_rate(ks, beta)
        ax.plot(
            ks,
            rates / rates.max(),
            "o-",
            ms=3,
            color=f"C{i}",
            label=f"β = {beta:g} (k* = {fastest_mode(beta)})",
        )
    ax.set(xlabel="mode k", ylabel="λ_k / λ_k*", title="circle: λ_k = k²I_k(β)/(βI_0(β))")
    ax.legend(fontsize=9)
    ax = curves[2]
    for i, s in enumerate(spheres):
        ax.plot(s["t"], s["inner"], color=f"C{i}", label=f"β = {s['beta']:g}")
    ax.set(xlabel="t", ylabel="|x̄|² (mean)", title="S²: mean inner product", xscale="symlog")
    ax.legend(fontsize=9)
    ax = curves[3]
    for i, s in enumerate(spheres):
        ax.plot(s["t"], s["clusters"], color=f"C{i}", label=f"β = {s['beta']:g}")
    ax.set(
        xlabel="t", ylabel="clusters (mean)", title="S²: clusters over time", xscale="symlog", yscale="log"
    )
    save(fig, path)


def redraw(folder: Path, path: Path) -> None:
    """The figure again from a results folder's ``curves.json`` (what ``main`` wrote), without simulating."""
    out = json.loads((folder / "curves.json").read_text())
    for c in out["circle"]:  # JSON keys are strings: the snapshot times back to the floats of SNAPSHOTS
        c["snapshots"] = {float(t): a for t, a in c["snapshots"].items()}
    plot(out, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="quick", choices=sorted(PRESETS))
    parser.add_argument("--out", default=None, help="results folder (default results/panels[_smoke])")
    parser.add_argument(
        "--redraw",
        action="store_true",
        help="redraw the figure from the results folder's curves.json, simulate nothing",
    )
    parser.add_argument(
        "--figure", default=None, help="figure path (default docs/assets/token_dynamics_panels.png)"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    p = PRESETS[args.preset]
    default = HERE / "results" / ("panels" if args.preset == "quick" else f"panels_{args.preset}")
    folder = Path(args.out) if args.out else default
    figure_path = (
        Path(args.figure)
        if args.figure
        else HERE.parents[1] / "docs" / "assets" / "token_dynamics_panels.png"
    )
    if args.redraw:
        if not (folder / "curves.json").is_file():
            parser.error(f"--redraw: {folder / 'curves.json'} does not exist (run the preset first, or give --out)")
        redraw(folder, figure_path)
        return
    g = torch.Generator().manual_seed(p["seed"])
    start = time.process_time()
    out = dict(
        circle=[circle(b, p, g) for b in p["circle_betas"]],
        sphere=[sphere(b, p, g) for b in p["sphere_betas"]],
    )
    cpu = time.process_time() - start
    write_json_atomic(folder / "config.json", dict(preset=args.preset, **p))
    summary = dict(
        cpu_seconds=cpu,
        circle=[dict(beta=c["beta"], k_star=c["k_star"], clusters_at={s: c["clusters"][int(np.argmin(np.abs(np.asarray(c["t"]) - s)))] for s in SNAPSHOTS}) for c in out["circle"]],
        sphere=[dict(beta=s["beta"], final_inner=s["inner"][-1], final_clusters=s["clusters"][-1]) for s in out["sphere"]],
    )  # fmt: skip
    write_json_atomic(folder / "summary.json", summary)
    write_json_atomic(folder / "curves.json", out)
    if args.preset == "quick":
        plot(out, figure_path)
    print(summary)


if __name__ == "__main__":
    main()
