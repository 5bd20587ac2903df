r"""
# A phase transition: the Desai–Zwanzig model

Particles in the double well $V(x) = x^4/4 - x^2/2$ attracted to their mean,
$dx_i = -V'(x_i)\,dt - \theta(x_i - \bar x)\,dt + \sqrt{2\beta}\,dW_i$, order below a critical temperature:
the magnetisation $m = \bar x$ stays away from 0 (two symmetric stationary laws), and above it the only
stationary law has $m = 0$. For $\theta = 1$ the mean-field critical temperature is
$\beta_c \approx 0.457$ (the theory check [Desai–Zwanzig](../../theory/desai_zwanzig.md) computes it from the
self-consistency equation). Here every temperature is one replica of one batched call, started ordered.
"""

import torch

import meanfield as mf
from meanfield.drift.potentials import DoubleWell, QuadraticInteraction
from meanfield.studies.plotting import figure

betas = torch.linspace(0.2, 0.7, 11, dtype=torch.float64)
system = mf.MeanFieldLangevin(DoubleWell(), QuadraticInteraction(1.0), beta=betas)  # one β per replica
x0 = torch.ones(len(betas), 1000, 1, dtype=torch.float64)  # (B, M, 1): ordered start, m = 1
traj = mf.simulate(system, x0, t1=30.0, dt=0.02, save_every=50, generator=0)
m = traj.states.mean(dim=(2, 3))  # (S, B): the magnetisation of each replica over time
late = m[traj.times >= 20.0].abs().mean(0)  # (B,): |m| averaged over t ∈ [20, 30]
for b, value in zip(betas.tolist(), late.tolist()):
    print(f"β = {b:.2f}: |m| = {value:.3f}")

# %%
fig, (left, right) = figure(ncols=2, width=3.75, height=3.0)
left.plot(betas.numpy(), late.numpy(), "o-")
left.set_xlabel(r"temperature $\beta$")
left.set_ylabel(r"$|m|$, $t \in [20, 30]$")
for b in range(0, len(betas), 2):
    right.plot(traj.times.numpy(), m[:, b].numpy(), label=f"β = {betas[b]:.2f}")
right.set_xlabel("t")
right.set_ylabel("m(t)")
right.legend(fontsize=8)
fig.tight_layout()
