r"""
# Tokens through depth: clustering on the sphere

A deep Transformer moves its tokens like interacting particles (Geshkovski, Letrouit, Polyanskiy & Rigollet):
with identity weights on the sphere, $\dot x_i = P_{x_i} \sum_j A_{ij} x_j$,
$A_{ij} = e^{\beta\langle x_i, x_j\rangle} / \sum_k e^{\beta\langle x_i, x_k\rangle}$, where
$P_x = I - x x^\top$ projects on the tangent space. Tokens from a generic start end in one cluster.
`meanfield.nn.tokens.SelfAttentionDynamics` is that particle system, so `meanfield.simulate` runs it; the mean
inner product $\frac{1}{n^2}\sum_{ij} \langle x_i, x_j\rangle$ goes to 1 as they cluster.
"""

import torch

import meanfield as mf
from meanfield.nn.tokens import SelfAttentionDynamics, count_clusters, mean_inner_product
from meanfield.studies.plotting import figure

system = SelfAttentionDynamics.identity(3, inverse_temperature=1.0, sphere=True)
g = torch.Generator().manual_seed(0)
x0 = torch.nn.functional.normalize(
    torch.randn(8, 32, 3, generator=g, dtype=torch.float64), dim=-1
)  # (B, n, d)
traj = mf.simulate(system, x0, t1=15.0, dt=0.05, save_every=5, generator=0)
inner = torch.stack([mean_inner_product(x) for x in traj.states])  # (S, B)
print("clusters at t = 15, per replica:", count_clusters(traj.final).tolist())

# %%
fig, (left, right) = figure(ncols=2, width=3.75, height=3.0)
left.plot(traj.times.numpy(), inner.numpy(), lw=1)
left.set_xlabel("time (depth)")
left.set_ylabel(r"mean $\langle x_i, x_j\rangle$")
for t, marker in ((0, "o"), (len(traj) // 4, "s"), (-1, "^")):
    x = traj.states[t, 0]  # (n, 3): one replica's tokens
    right.scatter(x[:, 0].numpy(), x[:, 1].numpy(), s=12, marker=marker, label=f"t = {traj.times[t]:.1f}")
right.set_aspect("equal")
right.set_title("one replica, projected on the first two axes")
right.legend(fontsize=8)
fig.tight_layout()
