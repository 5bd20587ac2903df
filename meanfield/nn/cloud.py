r"""A particle system as a particle layer: M points in R^d whose loss is the mean-field energy.

[`ParticleCloud`][meanfield.nn.cloud.ParticleCloud] holds ``x`` of shape ``(M, d)`` as one stacked parameter. Its particle outputs are the
features $(V(x_i), |x_i|^2, x_i)$ and its output their average, from which the energy of a confinement ``V``
and the quadratic interaction $W(z) = k/2\cdot|z|^2$ is

$$
E(ρ_M) = \frac1M \sum_i V(x_i) + \frac{1}{2M^2}\sum_{ij} W(x_i − x_j)
= \overline{V} + \frac k2 \big(\overline{|x|^2} − |\bar x|^2\big).
$$

Its gradient is $\partial E/\partial x_i = (1/M)(\nabla V(x_i) + k(x_i - \bar{x}))$, so [`Langevin`][meanfield.optim.langevin.Langevin] with an SGD
drift, ``n_particles = M`` (the ×M scaling) and time step $\operatorname{lr} = \eta$ makes the Euler–Maruyama step of the
McKean–Vlasov particle system ``MeanFieldLangevin(V, QuadraticInteraction(k), β)``:
$x_i \leftarrow x_i - \eta(\nabla V(x_i) + k(x_i - \bar{x})) + \sqrt{2\beta \eta} \xi_i$ — the same chain as [`meanfield.simulate`][meanfield.stepping.simulate.simulate], now a
``meanfield run`` with a run folder, checkpoints, sweeps, and particles sharded over ranks (the energy needs only
averages, which [`meanfield.nn.sharded`][meanfield.nn.sharded] all-reduces).
"""

from __future__ import annotations

import torch
from torch import nn

from meanfield._checks import check_finite, check_int
from meanfield.drift.potentials import Confinement
from meanfield.nn.particles import ParticleLayer, check_float_dtype

__all__ = ["ParticleCloud"]


class ParticleCloud(ParticleLayer):
    r"""M particles $x_i \in \mathbb{R}^d$ in a confinement ``V`` with the quadratic interaction $W(z) = k/2\cdot|z|^2$.

    Args:
        n_particles: ``M``.
        d: the dimension.
        confinement: ``V`` (a [`Confinement`][meanfield.drift.potentials.Confinement]).
        k: interaction strength (``k > 0`` attracts to the centre of mass).
        init_scale: the initial particles are ``N(0, init_scale² I)``.
        generator: random generator of the initial particles (``None``: torch's global one).
        device: device of the particles.
        dtype: dtype of the particles.

    Shapes:
        ``particle_outputs()``: ``(1, M, 2 + d)`` = $(V(x_i), |x_i|^2, x_i)$; ``forward()``: their mean
        ``(1, 2 + d)``; [`energy`][meanfield.nn.cloud.ParticleCloud.energy] of that mean: ``()``.
    """

    particle_parameter_names = ("x",)

    def __init__(
        self,
        n_particles: int,
        d: int,
        confinement: Confinement,
        k: float = 0.0,
        *,
        init_scale: float = 1.0,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_float_dtype(dtype)
        M, d = check_int("n_particles", n_particles), check_int("d", d)
        if not isinstance(confinement, Confinement):
            raise TypeError(f"confinement must be a meanfield.drift.potentials.Confinement, got {confinement!r}")
        self.confinement, self.k, self.d = confinement, check_finite("k", k), d
        scale = check_finite("init_scale", init_scale)
        self.x = nn.Parameter(
            scale * torch.randn(M, d, generator=generator, dtype=dtype).to(device)
        )  # (M, d)

    def particle_outputs(self, X: torch.Tensor | None = None) -> torch.Tensor:
        """$(V(x_i), |x_i|^2, x_i)$ per particle: ``(1, M, 2 + d)`` (``X`` is ignored: a cloud has no input)."""
        x = self.x.unsqueeze(0)  # (1, M, d)
        v = self.confinement.energy(x)  # (1, M)
        return torch.cat([v.unsqueeze(-1), x.square().sum(-1, keepdim=True), x], -1)  # (1, M, 2 + d)

    def forward(self, X: torch.Tensor | None = None) -> torch.Tensor:
        r"""The averages $(\bar{V}, \text{ mean } |x|^2, \bar{x})$: ``(1, 2 + d)``."""
        return self.particle_outputs(X).mean(1)  # (1, 2 + d)

    def energy(self, means: torch.Tensor) -> torch.Tensor:
        r"""$E = \bar{V} + k/2 (\mathrm{mean} |x|^2 - |\bar{x}|^2)$ from [`forward`][meanfield.nn.cloud.ParticleCloud.forward]'s averages: ``()``."""
        centre = means[0, 2:]  # (d,)
        return means[0, 0] + 0.5 * self.k * (means[0, 1] - centre.square().sum())

    def extra_repr(self) -> str:
        return f"n_particles={self.n_particles}, d={self.d}, confinement={self.confinement!r}, k={self.k}"
