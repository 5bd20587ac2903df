"""Quickstart: 2000 particles in the double well V(x) = x⁴/4 − x²/2 at temperature β, against their Gibbs law."""

import sys

import numpy as np
import torch

import meanfield as mf
from meanfield.studies.plotting import figure, save

beta = 0.25
system = mf.MeanFieldLangevin(mf.potentials.DoubleWell(), beta=beta)  # dx = −V'(x) dt + sqrt(2β) dW
x0 = torch.zeros(1, 2000, 1)  # (B replicas, M particles, d dimensions)
traj = mf.simulate(system, x0, t1=20.0, dt=0.01, save_every=100, generator=0, progress=True)

x = np.linspace(-2.2, 2.2, 400)
gibbs = np.exp(-(x**4 / 4 - x**2 / 2) / beta)  # ∝ exp(−V/β)
fig, ax = figure()
ax.hist(
    traj.final.flatten().numpy(),
    bins=60,
    density=True,
    alpha=0.6,
    label=f"M = 2000, t = {traj.times[-1]:.0f}",
)
ax.plot(x, gibbs / np.trapezoid(gibbs, x), "k", label="Gibbs ∝ exp(−V/β)")
ax.set(xlabel="x", ylabel="density", title=f"double well, β = {beta}")
ax.legend()
print(save(fig, sys.argv[1] if len(sys.argv) > 1 else "quickstart.png").resolve())
