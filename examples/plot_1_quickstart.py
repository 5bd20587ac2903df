r"""
# Quickstart: particles relax to the Gibbs law

$M$ particles in the double well $V(x) = x^4/4 - x^2/2$ at temperature $\beta$ follow
$dx_i = -V'(x_i)\,dt + \sqrt{2\beta}\,dW_i$; their empirical law $\rho_M = \frac1M \sum_i \delta_{x_i}$
relaxes to the Gibbs law $\rho_\infty \propto e^{-V/\beta}$. `meanfield.simulate` moves all the replicas in
one call (states are `(B, M, d)`), and `meanfield.metrics.w1` measures the exact $W_1$ distance between the
particles' law and the Gibbs law.
"""

import numpy as np
import torch

import meanfield as mf
from meanfield.drift.potentials import DoubleWell
from meanfield.metrics import Law1d, wasserstein_to_law
from meanfield.studies.plotting import figure

beta = 0.25
system = mf.MeanFieldLangevin(DoubleWell(), beta=beta)
x0 = torch.zeros(4, 2000, 1, dtype=torch.float64)  # (B, M, d): 4 replicas of 2000 particles at 0
traj = mf.simulate(system, x0, t1=4.0, dt=0.01, save_every=20, generator=0)


# %%
# $W_1$ between each replica's particles and the Gibbs law, exactly (a 1-D law known by its density):

gibbs = Law1d.from_density(lambda x: np.exp(-(x**4 / 4 - x**2 / 2) / beta), -4.0, 4.0, n=1 << 16)
print("W1 at t = 4, per replica:", wasserstein_to_law(traj.final, gibbs, p=1).value)

# %%
# The Gibbs density on a grid, normalised by the trapezoid rule, against the particles' histogram.

x = torch.linspace(-2.2, 2.2, 801, dtype=torch.float64)
density = torch.exp(-(x**4 / 4 - x**2 / 2) / beta)
density /= torch.trapezoid(density, x)

fig, (left, right) = figure(ncols=2, width=3.75, height=3.0)
left.hist(traj.final[0, :, 0].numpy(), bins=60, density=True, alpha=0.5, label="particles, t = 4")
left.plot(x.numpy(), density.numpy(), "k", label=r"$\propto e^{-V/\beta}$")
left.set_xlabel("x")
left.legend()
for path in range(30):
    right.plot(traj.times.numpy(), traj.states[:, 0, path, 0].numpy(), lw=0.5)
right.set_xlabel("t")
right.set_ylabel("x")
right.set_title("30 of the paths")
fig.tight_layout()
