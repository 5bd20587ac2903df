"""The landing page's picture: what the package does, in the three steps of the docs' summary.

1. define a drift: the double well V(x) = x⁴/4 − x²/2 at temperature β (its Gibbs law ∝ exp(−V/β));
2. step it: M = 2000 particles, all started at x = 0, moved by Euler–Maruyama (``meanfield.simulate``);
3. measure the law: the exact 1-D W₁ between the particles' empirical law and the Gibbs law over time
   (``meanfield.metrics.w1``), against the W₁ of M independent draws from the Gibbs law itself — the
   distance a perfect sampler with M particles would show.

    python experiments/overview.py [OUT.png]      # `meanfield figures` writes docs/figures/overview.png
"""

import sys

import numpy as np
import torch

import meanfield as mf
from meanfield.studies.plotting import figure, save

beta, M, t1, dt = 0.25, 2000, 10.0, 0.01
system = mf.MeanFieldLangevin(mf.potentials.DoubleWell(), beta=beta)  # dx = −V'(x) dt + sqrt(2β) dW
x0 = torch.zeros(1, M, 1, dtype=torch.float64)  # (B replicas, M particles, d dimensions)
traj = mf.simulate(system, x0, t1=t1, dt=dt, save_every=5, generator=0)

# the Gibbs law, through its quantile function on a fine grid (200,000 quantiles: the law to ~1e-5 in W₁)
grid = np.linspace(-3.0, 3.0, 60_001)
density = np.exp(-(grid**4 / 4 - grid**2 / 2) / beta)
cdf = np.concatenate([[0.0], np.cumsum((density[1:] + density[:-1]) / 2 * np.diff(grid))])
cdf /= cdf[-1]
density /= np.trapezoid(density, grid)


def gibbs_quantile(u: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.interp(u, cdf, grid)).unsqueeze(-1)  # (..., 1)


N = 200_000
gibbs = gibbs_quantile((np.arange(N) + 0.5) / N)  # (N, 1)
w1 = mf.metrics.w1(traj.states[:, 0], gibbs)  # (S,): one distance per saved time
rng = np.random.default_rng(0)
floor = mf.metrics.w1(gibbs_quantile(rng.random((64, M))), gibbs)  # (64,): i.i.d. M-samples of the Gibbs law

fig, (ax_v, ax_x, ax_w) = figure(3, width=4.0, height=3.1)
x = np.linspace(-1.9, 1.9, 400)
ax_v.plot(x, x**4 / 4 - x**2 / 2, "k", label="V(x) = x⁴/4 − x²/2")
ax_v.set(xlabel="x", ylabel="V(x)", ylim=(-0.3, 0.5), title="1. define a drift")
ax_p = ax_v.twinx()  # the law the drift and the temperature define
inside = np.abs(grid) < 1.9
ax_p.fill_between(grid[inside], density[inside], color="C0", alpha=0.3, lw=0, label=f"Gibbs law, β = {beta}")
ax_p.set(ylim=(0, density.max() * 1.6), yticks=[])
ax_p.grid(False)
handles = [h for a in (ax_v, ax_p) for h in a.get_legend_handles_labels()[0]]
ax_v.legend(handles=handles, loc="upper center", fontsize=8)

times = traj.times.numpy()
paths = traj.states[:, 0, :30, 0].numpy()  # (S, 30): 30 of the M particles
ax_x.plot(times, paths, color="C0", lw=0.6, alpha=0.45)
ax_x.set(xlabel="t", ylabel="x_i(t)", title=f"2. step it: M = {M} particles, EM")

ax_w.semilogy(times[1:], w1.numpy()[1:], label="W₁(particles, Gibbs)")
ax_w.axhline(float(floor.mean()), color="k", ls="--", lw=1, label=f"W₁ of {M} i.i.d. Gibbs draws")
ax_w.set(xlabel="t", title="3. measure the law")
ax_w.legend(fontsize=8)
fig.tight_layout()
print(save(fig, sys.argv[1] if len(sys.argv) > 1 else "overview.png").resolve())
