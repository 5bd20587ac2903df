r"""Kinetic (underdamped) mean-field Langevin dynamics on a paired phase-space state.

Each particle has a position $x_i$ and a velocity $v_i$ (unit mass):

$$
\begin{aligned}
dx_i = v_i dt, \\
dv_i = -\nabla(\delta F/\delta \rho)(x_i) dt - \gamma v_i dt + \sqrt{2\gamma \beta_t} dW_i, \\
\nabla(\delta F/\delta \rho)(x_i) = \nabla V(x_i) + 1/M \sum_j \nabla W(x_i - x_j),
\end{aligned}
$$

with friction $\gamma \ge 0$ and temperature $\beta \ge 0$. For constant β the M-particle system has the stationary law
$\propto \exp(-(M\cdot F(\rho_M) + \sum_i |v_i|^2/2)/\beta)$: positions as in the overdamped [`MeanFieldLangevin`][meanfield.drift.systems.MeanFieldLangevin],
velocities Maxwellian $N(0, \beta I)$.

**The state is one tensor** ``z`` of shape ``(B, M, 2d)``: ``z[..., :d]`` the positions, ``z[..., d:]`` the
velocities ([`pair`][meanfield.drift.phase_space.pair], [`positions`][meanfield.drift.phase_space.positions], [`velocities`][meanfield.drift.phase_space.velocities]). So [`meanfield.simulate`][meanfield.stepping.simulate.simulate], its
[`Trajectory`][meanfield.stepping.simulate.Trajectory] ``(S, B, M, 2d)``, its seeds, checkpoints and NaN checks work unchanged, and the
system *is* the first-order SDE $dz = b(z) dt + \Sigma dW$ with $b = (v, -\nabla \delta F/\delta \rho - \gamma v)$ and the additive
$\Sigma = \operatorname{diag}(0, \sqrt{2\gamma \beta})$ on $W = (W_x, W_v) \in \mathbb{R}^{2d}$: every solver of [`meanfield.stepping.solvers.SOLVERS`][meanfield.stepping.solvers.SOLVERS]
(native Euler–Maruyama, torchsde's ``srk``, ``heun``, …) integrates it, and the splitting schemes of
[`meanfield.stepping.solvers.splittings`][meanfield.stepping.solvers.splittings] (BAOAB, OBABO, ABOBA) read the same noise: the $W_v$ slot is the
increment of the Brownian motion that drives the velocities, the $W_x$ slot (which $\Sigma$ ignores) gives
the splitting schemes the Brownian-bridge midpoint of $W_v$ over the step (see that module).
"""

from __future__ import annotations

import math

import torch

from .._checks import check_nonnegative
from .potentials import Confinement, Interaction
from .schedules import Constant, Schedule, as_schedule
from .systems import MeanFieldLangevin, ParticleSystem

__all__ = ["KineticMeanFieldLangevin", "pair", "positions", "velocities"]


def _check_paired(z: torch.Tensor) -> int:
    """``d`` of a paired state ``(B, M, 2d)``; raises on an odd or empty last axis."""
    if not torch.is_tensor(z):
        raise TypeError(f"a kinetic state must be a tensor (B, M, 2d), got {type(z).__name__}")
    if z.dim() < 1 or z.shape[-1] == 0 or z.shape[-1] % 2:
        raise ValueError(
            f"a kinetic state has shape (B, M, 2d): positions then velocities on the last axis, "
            f"got shape {tuple(z.shape)} (make one with meanfield.drift.phase_space.pair(x, v))"
        )
    return z.shape[-1] // 2


def pair(x: torch.Tensor, v: torch.Tensor | None = None) -> torch.Tensor:
    """The paired state ``z = (x, v)``: ``(B, M, d), (B, M, d) -> (B, M, 2d)``; ``v = None``: zero velocities."""
    if not torch.is_tensor(x):
        raise TypeError(f"x must be a tensor (B, M, d), got {type(x).__name__}")
    if v is None:
        v = torch.zeros_like(x)  # (B, M, d)
    if not torch.is_tensor(v) or v.shape != x.shape:
        got = tuple(v.shape) if torch.is_tensor(v) else type(v).__name__
        raise ValueError(f"velocities must have the positions' shape {tuple(x.shape)}, got {got}")
    return torch.cat([x, v], dim=-1)  # (B, M, 2d)


def positions(z: torch.Tensor) -> torch.Tensor:
    """The positions ``x = z[..., :d]`` of a paired state ``(…, 2d)`` (a view)."""
    return z[..., : _check_paired(z)]


def velocities(z: torch.Tensor) -> torch.Tensor:
    """The velocities ``v = z[..., d:]`` of a paired state ``(…, 2d)`` (a view)."""
    return z[..., _check_paired(z) :]


class KineticMeanFieldLangevin(ParticleSystem):
    r"""Kinetic mean-field Langevin dynamics on the paired state ``z = (x, v)`` of shape ``(B, M, 2d)``:

    $$
    dx_i = v_i dt, \qquad dv_i = -[\nabla V(x_i) + 1/M \sum_j \nabla W(x_i - x_j)] dt - \gamma v_i dt + \sqrt{2\gamma \beta_t} dW_i.
    $$

    Stationary law (constant β): $\propto \exp(-(\sum_i V(x_i) + 1/(2M) \sum_{ij} W(x_i - x_j) + \sum_i |v_i|^2/2)/\beta)$. As an
    SDE on ``z`` it has additive noise $\Sigma = \operatorname{diag}(0, \sqrt{2\gamma \beta_t})$ on a Brownian motion of dimension 2d (the
    first d components unused by $\Sigma$), so every solver of [`meanfield.stepping.solvers.SOLVERS`][meanfield.stepping.solvers.SOLVERS] integrates it;
    the splitting schemes ``"baoab"``, ``"obabo"``, ``"aboba"`` ([`meanfield.stepping.solvers.splittings`][meanfield.stepping.solvers.splittings]) are the
    ones made for it.

    Args:
        confinement: ``V`` (see [`meanfield.drift.potentials`][meanfield.drift.potentials]).
        interaction: ``W``, or ``None`` for independent particles.
        friction: $\gamma \ge 0$ ($\gamma = 0$: Hamiltonian dynamics, no noise).
        beta: the temperature $\beta \ge 0$, a number or a schedule $t -> \beta_t$.

    Raises:
        TypeError, ValueError: a confinement/interaction of the wrong type, a negative or non-finite
            friction or temperature.
    """

    noise = "additive"

    def __init__(
        self,
        confinement: Confinement,
        interaction: Interaction | None = None,
        friction: float = 1.0,
        beta: float | Schedule = 1.0,
    ) -> None:
        self.friction = check_nonnegative("friction (γ)", friction)
        if torch.is_tensor(beta) or isinstance(beta, (list, tuple)):
            raise TypeError(
                "KineticMeanFieldLangevin takes one temperature for every replica: beta must be a number or a "
                f"schedule, got {type(beta).__name__}"
            )
        self.force_field = MeanFieldLangevin(confinement, interaction, beta=beta)  # checks V, W and β
        self.confinement, self.interaction = confinement, interaction
        self.beta = as_schedule(beta, "beta")
        self._constant_beta = self.beta.value if isinstance(self.beta, Constant) else None

    def temperature(self, t: float) -> float:
        r"""$\beta_t$, checked to be a finite number ≥ 0 (one for every replica)."""
        if self._constant_beta is not None:
            return self._constant_beta
        value = self.force_field.temperature(t)
        if torch.is_tensor(value):
            raise TypeError(
                f"beta(t={t:g}) returned a tensor: KineticMeanFieldLangevin takes one temperature"
            )
        return value

    def check_state(self, z: torch.Tensor) -> None:
        """Raise ``ValueError`` unless ``z`` is a paired state ``(B, M, 2d)`` the force can act on."""
        d = _check_paired(z)
        check = getattr(self.force_field, "check_state", None)
        if check is not None:
            check(z[..., :d])

    def force(self, t: float, x: torch.Tensor) -> torch.Tensor:
        r"""$-\nabla V(x_i) - 1/M \sum_j \nabla W(x_i - x_j)$: positions ``(B, M, d) -> (B, M, d)``."""
        return self.force_field.drift(t, x)  # (B, M, d)

    def force_into(self, t: float, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``force`` at ``x`` (``(B, M, d)``, contiguous), written into ``out`` when that saves passes: for
        ``V = a/2·|x|²`` and ``W = k/2·|z|²`` with numbers ``a``, ``k`` the force is ``−(a + k)·x + k·x̄``, one
        pass after the mean (``force`` takes four); otherwise, or when a subclass defines its own ``force``,
        ``force``'s own tensor. Returns the force.
        """
        field = self.force_field
        if not field._affine or type(self).force is not KineticMeanFieldLangevin.force:
            return self.force(t, x)  # (B, M, d)
        a = field.confinement.a
        k = field.interaction.k if field.interaction is not None else 0.0
        if torch.is_tensor(a) or torch.is_tensor(k):  # per-replica values
            return self.force(t, x)  # (B, M, d)
        if not k:
            return torch.mul(x, -a, out=out)  # (B, M, d)
        centre = x.mean(1, keepdim=True).mul_(k)  # (B, 1, d) k·x̄
        return torch.add(centre, x, alpha=-(a + k), out=out)  # (B, M, d)

    def drift(self, t: float, z: torch.Tensor) -> torch.Tensor:
        r"""$b(z) = (v, \mathrm{force}(x) - \gamma v)$: ``(B, M, 2d) -> (B, M, 2d)``."""
        d = _check_paired(z)
        x, v = z[..., :d], z[..., d:]  # (B, M, d) each
        return torch.cat([v, torch.add(self.force(t, x), v, alpha=-self.friction)], dim=-1)  # (B, M, 2d)

    def diffusion(self, t: float, z: torch.Tensor) -> torch.Tensor:
        r"""$\Sigma = (0, \dots, 0, s, \dots, s)$ with $s = \sqrt{2\gamma \beta_t}$: shape ``(2d,)``, broadcast over ``(B, M)``."""
        d = _check_paired(z)
        s = math.sqrt(2.0 * self.friction * self.temperature(t))
        sigma = torch.zeros(2 * d, dtype=z.dtype, device=z.device)  # (2d,)
        sigma[d:] = s
        return sigma

    def noise_shape(self, shape: torch.Size) -> tuple[int, ...]:
        _check_paired(torch.empty(tuple(shape), device="meta"))
        return tuple(shape)

    def energy(self, z: torch.Tensor) -> torch.Tensor:
        r"""Energy per particle and replica $1/M \sum_i [V(x_i) + \tfrac12\cdot 1/M \sum_j W(x_i - x_j) + |v_i|^2/2]$:
        ``(B, M, 2d) -> (B,)``."""
        d = _check_paired(z)
        x, v = z[..., :d], z[..., d:]
        return self.force_field.energy(x) + 0.5 * v.square().sum(-1).mean(1)  # (B,)

    def __repr__(self) -> str:
        return (
            f"KineticMeanFieldLangevin({self.confinement!r}, {self.interaction!r}, friction={self.friction}, "
            f"beta={self.beta!r})"
        )
