"""Particle systems: the drift ``b(t, x)`` and diffusion ``σ(t, x)`` of ``dx = b dt + σ dW``.

A state ``x`` has shape ``(B, M, d)``: B independent replicas of M interacting particles in R^d.
Every system declares its noise type, which decides what a solver may do with it:

- ``"additive"``: ``σ(t)`` does not depend on ``x``; ``diffusion`` returns a number (or a tensor that
  broadcasts against ``x``). Euler–Maruyama has strong order 1 here; Itô = Stratonovich.
- ``"diagonal"``: ``σ(t, x)`` has the shape of ``x`` and acts coordinate-wise, ``σ_k`` depending on ``x_k`` only.
- ``"general"``: ``σ(t, x)`` has shape ``(B, M, d, m)``: particle ``i`` is driven by its own
  m-dimensional Brownian motion through a ``d × m`` matrix.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable

import torch

from ._checks import check_int, check_nonnegative
from .potentials import Confinement, Interaction, Quadratic, QuadraticInteraction
from .projections import Projection
from .schedules import Constant, Schedule, as_schedule

__all__ = ["ParticleSystem", "MeanFieldLangevin", "SDE", "NOISE_TYPES"]

NOISE_TYPES = ("additive", "diagonal", "general")

Diffusion = float | torch.Tensor


def _check_projection(projection: Projection | None) -> Projection | None:
    if projection is not None and not isinstance(projection, Projection):
        raise TypeError(
            f"projection must be a meanfield.projections.Projection (Clip(A), Sphere()) or None, "
            f"got {type(projection).__name__}"
        )
    return projection


class ParticleSystem(ABC):
    """An Itô SDE ``dx = b(t, x) dt + σ(t, x) dW`` on states of shape ``(B, M, d)``.

    Attributes:
        noise: ``"additive"``, ``"diagonal"`` or ``"general"`` (see the module docstring).
        brownian_dim: for ``"general"`` noise, the number ``m`` of Brownian motions per particle.
        projection: ``Π`` applied after every step (e.g. :class:`~meanfield.projections.Sphere`), or ``None``.
    """

    noise: str = "additive"
    brownian_dim: int | None = None
    projection: Projection | None = None

    @abstractmethod
    def drift(self, t: float, x: torch.Tensor) -> torch.Tensor:
        """``b(t, x)``: ``(B, M, d) -> (B, M, d)``."""

    @abstractmethod
    def diffusion(self, t: float, x: torch.Tensor) -> Diffusion:
        """``σ(t, x)``: a number or broadcastable tensor (additive), ``(B, M, d)`` (diagonal) or
        ``(B, M, d, m)`` (general)."""

    def euler_update_(self, t: float, x: torch.Tensor, dt: float, noise: torch.Tensor) -> torch.Tensor:
        """One Euler–Maruyama move ``x + dt·b(t, x) + noise`` (``noise = σ·dW``, already drawn).

        May update ``x`` in place and must not modify ``noise``; returns the new state. Systems with an
        affine drift override it to make the whole move one pass over the state.
        """
        b = self.drift(t, x)  # (B, M, d)
        if not torch.is_tensor(b) or b.shape != x.shape:
            raise ValueError(
                f"drift(t, x) must return a tensor of the state's shape {tuple(x.shape)}, "
                f"got {tuple(b.shape) if torch.is_tensor(b) else type(b).__name__}"
            )
        return torch.add(x, b, alpha=dt).add_(noise)  # (B, M, d)

    def noise_shape(self, shape: torch.Size) -> tuple[int, ...]:
        """Shape of one Brownian increment for a state of shape ``shape = (B, M, d)``."""
        if self.noise == "general":
            return (*shape[:2], self.brownian_dim)
        return tuple(shape)


class MeanFieldLangevin(ParticleSystem):
    """Mean-field Langevin dynamics ``dx_i = b(x_i) dt + sqrt(2β_t) dW_i`` with

        b(x_i) = −∇V(x_i) − 1/M Σ_j ∇W(x_i − x_j)

    (interactions within a replica only). For constant β its mean-field limit has the stationary
    law ``ρ ∝ exp(−(V + W * ρ)/β)``; the Euler–Maruyama chain's differs by O(dt).

    Args:
        confinement: ``V`` (see :mod:`meanfield.potentials`).
        interaction: ``W``, or ``None`` for independent particles.
        beta: the temperature β ≥ 0, a number or a schedule ``t -> β_t`` of the time ``t``.
        projection: ``Π`` applied after every step (``Sphere()`` for particles on ``S^{d−1}``), or ``None``.
    """

    noise = "additive"

    def __init__(
        self,
        confinement: Confinement,
        interaction: Interaction | None = None,
        beta: float | Schedule = 1.0,
        projection: Projection | None = None,
    ) -> None:
        if not isinstance(confinement, Confinement):
            raise TypeError(
                f"confinement must be a meanfield.potentials.Confinement (e.g. Quadratic(a)), "
                f"got {type(confinement).__name__}"
            )
        if interaction is not None and not isinstance(interaction, Interaction):
            raise TypeError(
                f"interaction must be a meanfield.potentials.Interaction or None, got {type(interaction).__name__}"
            )
        if not callable(beta):
            check_nonnegative("beta", beta)
        self.confinement, self.interaction = confinement, interaction
        self.beta = as_schedule(beta, "beta")
        self._sigma = math.sqrt(2.0 * self.beta.value) if isinstance(self.beta, Constant) else None
        self.projection = _check_projection(projection)
        # b(x) = −(a + k)·x + k·x̄ when V = a/2|x|² and W = k/2|z|² (or no W): one fused pass per step
        self._affine = type(confinement) is Quadratic and (
            interaction is None or type(interaction) is QuadraticInteraction
        )

    def drift(self, t: float, x: torch.Tensor) -> torch.Tensor:
        b = self.confinement.grad(x)  # (B, M, d)
        if self.interaction is not None:
            b = b + self.interaction.mean_field_grad(x)  # (B, M, d)
        return b.neg_()

    def euler_update_(self, t: float, x: torch.Tensor, dt: float, noise: torch.Tensor) -> torch.Tensor:
        if not self._affine:
            return super().euler_update_(t, x, dt, noise)
        a, k = self.confinement.a, (self.interaction.k if self.interaction is not None else 0.0)
        centre = x.mean(1, keepdim=True) if k else None  # (B, 1, d)
        x = torch.add(noise, x, alpha=1.0 - (a + k) * dt, out=x)  # x ← (1 − (a+k)dt)·x + noise
        return x.add_(centre, alpha=k * dt) if k else x

    def temperature(self, t: float) -> float:
        """``β_t``, checked to be a finite number ≥ 0."""
        value = self.beta(t)
        try:
            beta = float(value)
        except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of several numbers
            raise TypeError(
                f"beta(t={t:g}) must return a number (the temperature), got {type(value).__name__}"
            ) from None
        if not (beta >= 0 and math.isfinite(beta)):
            raise ValueError(f"beta(t={t:g}) = {beta}: the temperature must be a finite number ≥ 0")
        return beta

    def diffusion(self, t: float, x: torch.Tensor) -> float:
        if self._sigma is not None:  # constant β: computed once
            return self._sigma
        return math.sqrt(2.0 * self.temperature(t))

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        """Energy per replica ``1/M Σ_i [V(x_i) + ½ · 1/M Σ_j W(x_i − x_j)]``: ``(B, M, d) -> (B,)``."""
        e = self.confinement.energy(x)  # (B, M)
        if self.interaction is not None:
            e = e + 0.5 * self.interaction.energy(x)  # (B, M)
        return e.mean(1)

    def __repr__(self) -> str:
        return f"MeanFieldLangevin({self.confinement!r}, {self.interaction!r}, beta={self.beta!r})"


class SDE(ParticleSystem):
    """A particle system from user callables ``drift(t, x)`` and ``diffusion(t, x)``.

    Example (geometric Brownian motion, ``dx = μx dt + s·x dW``)::

        SDE(lambda t, x: mu * x, lambda t, x: s * x, noise="diagonal")

    Args:
        drift: ``(t, x) -> (B, M, d)``.
        diffusion: ``(t, x) ->`` σ, shaped as the noise type says (see the module docstring).
        noise: ``"additive"``, ``"diagonal"`` or ``"general"``.
        brownian_dim: ``m`` for ``"general"`` noise.
        projection: ``Π`` applied after every step, or ``None``.
    """

    def __init__(
        self,
        drift: Callable[[float, torch.Tensor], torch.Tensor],
        diffusion: Callable[[float, torch.Tensor], Diffusion],
        noise: str = "diagonal",
        brownian_dim: int | None = None,
        projection: Projection | None = None,
    ) -> None:
        if not callable(drift) or not callable(diffusion):
            raise TypeError("drift and diffusion must be callables (t, x) -> tensor")
        if noise not in NOISE_TYPES:
            raise ValueError(f"noise must be one of {NOISE_TYPES}, got {noise!r}")
        if noise == "general":
            if brownian_dim is None:
                raise TypeError(
                    "noise='general' needs brownian_dim = m, the number of driving Brownian motions "
                    "(the diffusion returns σ of shape (B, M, d, m))"
                )
            brownian_dim = check_int("brownian_dim", brownian_dim)
        elif brownian_dim is not None:
            raise ValueError(f"brownian_dim is only used with noise='general', got noise={noise!r}")
        self._drift, self._diffusion = drift, diffusion
        self.noise, self.brownian_dim = noise, brownian_dim
        self.projection = _check_projection(projection)

    def drift(self, t: float, x: torch.Tensor) -> torch.Tensor:
        return self._drift(t, x)

    def diffusion(self, t: float, x: torch.Tensor) -> Diffusion:
        return self._diffusion(t, x)

    def __repr__(self) -> str:
        return f"SDE(noise={self.noise!r})"
