r"""
# Particle attention: heads as particles

`meanfield.nn.ParticleAttention` is self-attention whose $M$ heads are particles
$\theta_i = (W_Q^i, W_K^i, W_V^i, W_O^i)$, averaged: $Y = \frac1M \sum_i v_{\theta_i}(X)$ with
$v_\theta(X) = \mathrm{softmax}(X W_Q (X W_K)^\top/\sqrt h)\, X W_V W_O$. With the head width $h$ fixed and
$M$ growing, the layer tends to the mean-field limit $Y = \int v_\theta(X)\, d\rho(\theta)$: at
initialisation (independent heads of mean-zero output) the output's size falls like $M^{-1/2}$.
"""

import torch

from meanfield.nn import ParticleAttention
from meanfield.studies.plotting import figure

d, h, T = 32, 8, 12
X = torch.randn(4, T, d, generator=torch.Generator().manual_seed(0))  # (B, T, d): 4 sequences of 12 tokens
Ms = [1, 4, 16, 64, 256]
rms = []
for M in Ms:
    layer = ParticleAttention(d_model=d, n_particles=M, d_head=h, generator=torch.Generator().manual_seed(M))
    with torch.no_grad():
        Y = layer(X)  # (B, T, d)
        assert torch.allclose(Y, layer.particle_outputs(X).mean(1), atol=1e-5)  # the average of the heads
    rms.append(Y.pow(2).mean().sqrt().item())
    print(f"M = {M:>3}: RMS of the output {rms[-1]:.4f}  (M^(-1/2) · RMS at M = 1: {rms[0] / M**0.5:.4f})")

# %%
# The attention maps of four heads of the last layer (one sequence), and the output size against $M$.

with torch.no_grad():
    maps = layer.attention_maps(X)[0, :4]  # (4, T, T)
fig, axes = figure(ncols=3, width=2.6, height=2.6)
for i, ax in enumerate(axes[:2]):
    ax.imshow(maps[i].numpy(), cmap="viridis")
    ax.set_title(f"head {i}")
    ax.grid(False)
axes[2].loglog(Ms, rms, "o-", label="RMS of Y")
axes[2].loglog(Ms, [rms[0] / M**0.5 for M in Ms], "k--", lw=1, label=r"$\propto M^{-1/2}$")
axes[2].set_xlabel("heads M")
axes[2].legend()
fig.tight_layout()
