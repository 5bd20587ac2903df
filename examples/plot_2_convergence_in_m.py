r"""
# Convergence in the number of particles M

For the linear McKean–Vlasov system $dx_i = -a x_i\,dt - k(x_i - \bar x)\,dt + \sqrt{2\beta}\,dW_i$ the
mean-field stationary law is $N(0, \beta/(a+k))$. `meanfield.convergence_in_m` simulates `reps` independent
systems at each $M$, measures $\mathbb{E}\, W_2^2(\rho_M, \rho_\infty)$ exactly against that law, and fits
the rate: $\mathbb{E}\, W_2^2 \sim M^{-1}$ in one dimension (up to a logarithm), with a 95 % interval on the
slope.
"""

import torch

import meanfield as mf
from meanfield.drift.potentials import Quadratic, QuadraticInteraction
from meanfield.metrics import Normal
from meanfield.studies.plotting import figure

a, k, beta = 1.0, 2.0, 0.5
system = mf.MeanFieldLangevin(Quadratic(a), QuadraticInteraction(k), beta=beta)
limit = Normal(0.0, (beta / (a + k)) ** 0.5)


def sample(M, reps):  # (reps, M, 1): reps replicas of M particles, simulated in one call
    x0 = torch.zeros(reps, M, 1, dtype=torch.float64)
    return mf.simulate(system, x0, t1=3.0, dt=0.02, generator=M).final


study = mf.convergence_in_m(
    sample,
    [8, 32, 128, 512],
    reps=60,
    reference=limit,
    generator=torch.Generator().manual_seed(0),
    progress=False,
)

print(f"E W2² ~ M^{study.slope:.2f}, 95% CI {study.slope_ci}")

# %%
fig, ax = figure(width=6.0, height=3.6)
study.plot(ax=ax)
fig.tight_layout()
