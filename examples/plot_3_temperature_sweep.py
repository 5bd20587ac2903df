r"""
# A temperature sweep

`meanfield.sweep` runs a function over a grid × seeds and collects observables per replica into a tidy
`Table`. Here the grid is the temperature $\beta$ of the Ornstein–Uhlenbeck particles
$dx_i = -a x_i\,dt + \sqrt{2\beta}\,dW_i$, run batched (every $\beta$ one replica of one call); the stationary
variance is $\beta/a$, and the Euler–Maruyama chain's is $\beta / (a(1 - a\,dt/2))$.
"""

import torch

import meanfield as mf
from meanfield.drift.potentials import Quadratic
from meanfield.studies.in_memory import batch_seed
from meanfield.studies.plotting import figure

a, dt = 1.0, 0.05


def relax(beta, seed, M=2000):  # batched: beta is a (B,) tensor, seed a list of B seeds
    x0 = torch.zeros(len(seed), M, 1, dtype=torch.float64)  # (B, M, 1)
    system = mf.MeanFieldLangevin(Quadratic(a), beta=beta)
    return mf.simulate(system, x0, t1=6.0, dt=dt, save_every=10, generator=batch_seed(seed))


betas = [0.1, 0.2, 0.4, 0.8, 1.6]
result = mf.sweep(
    relax, {"beta": betas}, seeds=3, batch=True, progress=False, observables={"var": lambda x: x.var((1, 2))}
)
rows = result.curves.summary("t", "var", hue="beta", where={"t": 6.0})
for row in rows:
    chain = row["hue"] / (a * (1 - a * dt / 2))
    print(
        f"β = {row['hue']:<4}: Var x = {row['mean']:.4f} ± {row['hi'] - row['mean']:.4f}  (chain {chain:.4f})"
    )

# %%
fig, ax = figure(width=6.0, height=3.6)
ax.plot(betas, [r["mean"] for r in rows], "o", label="measured, t = 6")
ax.plot(
    betas, [b / (a * (1 - a * dt / 2)) for b in betas], "k-", lw=1, label=r"chain: $\beta/(a(1-a\,dt/2))$"
)
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel(r"temperature $\beta$")
ax.set_ylabel("Var x")
ax.legend()
fig.tight_layout()
