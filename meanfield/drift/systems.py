r"""Particle systems: the drift ``b(t, x)`` and diffusion $\sigma(t, x)$ of $dx = b dt + \sigma dW$.

A state ``x`` has shape ``(B, M, d)``: B independent replicas of M interacting particles in R^d.
Every system declares its noise type, which decides what a solver may do with it:

- ``"additive"``: $\sigma(t)$ does not depend on ``x``; ``diffusion`` returns a number (or a tensor that
  broadcasts against ``x``). Euler–Maruyama has strong order 1 here; Itô = Stratonovich.
- ``"diagonal"``: $\sigma(t, x)$ has the shape of ``x`` and acts coordinate-wise, $\sigma_k$ depending on $x_k$ only.
- ``"general"``: $\sigma(t, x)$ has shape ``(B, M, d, m)``: particle ``i`` is driven by its own
  m-dimensional Brownian motion through a $d \times m$ matrix.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable

import torch

from .._checks import check_int, check_nonnegative
from .._replicas import Param, at, check_replicas, per_replica
from .potentials import Confinement, Interaction, Quadratic, QuadraticInteraction
from .projections import Projection
from .schedules import Constant, Schedule, as_schedule

__all__ = ["ParticleSystem", "MeanFieldLangevin", "SDE", "NOISE_TYPES"]

NOISE_TYPES = ("additive", "diagonal", "general")

Diffusion = float | torch.Tensor


def _check_projection(projection: Projection | None) -> Projection | None:
    if projection is not None and not isinstance(projection, Projection):
        raise TypeError(
            f"projection must be a meanfield.drift.projections.Projection (Clip(A), Sphere()) or None, "
            f"got {type(projection).__name__}"
        )
    return projection


class ParticleSystem(ABC):
    r"""An Itô SDE $dx = b(t, x) dt + \sigma(t, x) dW$ on states of shape ``(B, M, d)``.

    Attributes:
        noise: ``"additive"``, ``"diagonal"`` or ``"general"`` (see the module docstring).
        brownian_dim: for ``"general"`` noise, the number ``m`` of Brownian motions per particle.
        projection: $\Pi$ applied after every step (e.g. [`Sphere`][meanfield.drift.projections.Sphere]), or ``None``.
    """

    noise: str = "additive"
    brownian_dim: int | None = None
    projection: Projection | None = None

    @abstractmethod
    def drift(self, t: float, x: torch.Tensor) -> torch.Tensor:
        """``b(t, x)``: ``(B, M, d) -> (B, M, d)``."""

    @abstractmethod
    def diffusion(self, t: float, x: torch.Tensor) -> Diffusion:
        r"""$\sigma(t, x)$: a number or broadcastable tensor (additive), ``(B, M, d)`` (diagonal) or
        ``(B, M, d, m)`` (general)."""

    def euler_update_(self, t: float, x: torch.Tensor, dt: float, noise: torch.Tensor) -> torch.Tensor:
        r"""One Euler–Maruyama move $x + dt\cdot b(t, x) + \text{ noise }$ ($\text{ noise } = \sigma\cdot dW$, already drawn).

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

    def check_state(self, x: torch.Tensor) -> None:
        """Raise ``ValueError`` if this system cannot move the state ``x`` (``(B, M, d)``), e.g. per-replica
        parameters for another number of replicas. [`meanfield.simulate`][meanfield.stepping.simulate.simulate] calls it before the first step."""
        return None

    def noise_shape(self, shape: torch.Size) -> tuple[int, ...]:
        """Shape of one Brownian increment for a state of shape ``shape = (B, M, d)``."""
        if self.noise == "general":
            return (*shape[:2], self.brownian_dim)
        return tuple(shape)


def _is_values(value: object) -> bool:
    """Whether ``value`` is per-replica data (a tensor, an array, a list or tuple), not a number or schedule."""
    return torch.is_tensor(value) or hasattr(value, "__array__") or isinstance(value, (list, tuple))


def _temperature(beta: object) -> Schedule:
    """``beta`` as a schedule: a number or per-replica values checked to be ≥ 0 now (as numbers always were);
    a schedule's values are checked at each step ([`MeanFieldLangevin.temperature`][meanfield.drift.systems.MeanFieldLangevin.temperature]), so one that goes
    negative mid-run stops there, naming the time and the replica."""
    if _is_values(beta) and not callable(beta):
        return Constant(per_replica("beta", beta, minimum=0.0))
    if not callable(beta) and not isinstance(beta, dict):
        check_nonnegative("beta", beta)
    return as_schedule(beta, "beta")


class MeanFieldLangevin(ParticleSystem):
    r"""Mean-field Langevin dynamics $dx_i = b(x_i) dt + \sqrt{2\beta_t} dW_i$ with

    $$
    b(x_i) = -\nabla V(x_i) - 1/M \sum_j \nabla W(x_i - x_j)
    $$

    (interactions within a replica only). For constant β its mean-field limit has the stationary
    law $\rho \propto \exp(-(V + W * \rho)/\beta)$; the Euler–Maruyama chain's differs by O(dt).

    **Per replica.** β, and every parameter of ``V`` and ``W``, is a number or one value per replica (a
    tensor of shape ``(B,)``): replica ``b`` then runs with $\beta[b]$ (and ``a[b]``, $\kappa[b]$, …), so a grid
    of parameter values × seeds is one state ``(B, M, d)`` and one [`simulate`][meanfield.stepping.simulate.simulate] call. A
    scheduled per-replica temperature is a schedule whose levels are ``(B,)`` tensors (``Cosine(start=…,
    end=…, T)``) or any callable returning a ``(B,)`` tensor.

    Args:
        confinement: ``V`` (see [`meanfield.drift.potentials`][meanfield.drift.potentials]).
        interaction: ``W``, or ``None`` for independent particles.
        beta: the temperature β ≥ 0: a number, one per replica (shape ``(B,)``), or a schedule $t -> \beta_t$
            returning a number or a ``(B,)`` tensor (checked at every step: a value < 0 or NaN stops the run
            with the time and the replica).
        projection: $\Pi$ applied after every step (``Sphere()`` for particles on $S^{d-1}$), or ``None``.
    """

    noise = "additive"

    def __init__(
        self,
        confinement: Confinement,
        interaction: Interaction | None = None,
        beta: float | torch.Tensor | Schedule = 1.0,
        projection: Projection | None = None,
    ) -> None:
        if not isinstance(confinement, Confinement):
            raise TypeError(
                f"confinement must be a meanfield.drift.potentials.Confinement (e.g. Quadratic(a)), "
                f"got {type(confinement).__name__}"
            )
        if interaction is not None and not isinstance(interaction, Interaction):
            raise TypeError(
                f"interaction must be a meanfield.drift.potentials.Interaction or None, got {type(interaction).__name__}"
            )
        self.confinement, self.interaction = confinement, interaction
        self.beta = _temperature(beta)
        self._sigma: Param | None = None  # sqrt(2β) once, for a constant β: a number or (B,)
        if isinstance(self.beta, Constant):
            value = self.beta.value
            self._sigma = (2.0 * value).sqrt() if torch.is_tensor(value) else math.sqrt(2.0 * value)
        self.projection = _check_projection(projection)
        # b(x) = −(a + k)·x + k·x̄ when V = a/2|x|² and W = k/2|z|² (or no W): one fused pass per step
        self._affine = type(confinement) is Quadratic and (
            interaction is None or type(interaction) is QuadraticInteraction
        )

    def parameters(self) -> dict[str, Param]:
        """Every numeric parameter of the system by name (numbers or per-replica ``(B,)`` tensors)."""
        out = {f"confinement {k}": v for k, v in self.confinement.parameters().items()}
        if self.interaction is not None:
            out.update({f"interaction {k}": v for k, v in self.interaction.parameters().items()})
        if isinstance(self.beta, Constant):
            out["beta"] = self.beta.value
        return out

    def check_state(self, x: torch.Tensor) -> None:
        for name, value in self.parameters().items():
            check_replicas(name, value, x.shape[0])

    def drift(self, t: float, x: torch.Tensor) -> torch.Tensor:
        b = self.confinement.grad(x)  # (B, M, d)
        if self.interaction is not None:
            b = b + self.interaction.mean_field_grad(x)  # (B, M, d)
        return b.neg_()

    def euler_update_(self, t: float, x: torch.Tensor, dt: float, noise: torch.Tensor) -> torch.Tensor:
        if not self._affine:
            return super().euler_update_(t, x, dt, noise)
        a, k = self.confinement.a, (self.interaction.k if self.interaction is not None else 0.0)
        if torch.is_tensor(a) or torch.is_tensor(k):  # per replica: (1 − (a+k)dt) and k·dt are (B, 1, 1)
            a, k = at(a, x, "confinement a"), at(k, x, "interaction k")  # numbers or (B, 1, 1)
            no_k = not torch.is_tensor(k) and k == 0
            centre = None if no_k else x.mean(1, keepdim=True)  # (B, 1, d), before x is overwritten
            x = torch.addcmul(noise, x, 1.0 - (a + k) * dt, out=x)  # x ← (1 − (a+k)dt)·x + noise
            if no_k:
                return x
            return x.addcmul_(centre, k * dt) if torch.is_tensor(k) else x.add_(centre, alpha=k * dt)
        centre = x.mean(1, keepdim=True) if k else None  # (B, 1, d)
        x = torch.add(noise, x, alpha=1.0 - (a + k) * dt, out=x)  # x ← (1 − (a+k)dt)·x + noise
        return x.add_(centre, alpha=k * dt) if k else x

    def temperature(self, t: float) -> Param:
        r"""$\beta_t$: a finite number ≥ 0, or per-replica values (a float64 ``(B,)`` tensor), each checked."""
        value = self.beta(t)
        if torch.is_tensor(value) and value.numel() > 1 or _is_values(value) and not torch.is_tensor(value):
            try:
                return per_replica(f"beta(t={t:g})", value, minimum=0.0)
            except ValueError as error:
                raise ValueError(
                    f"{error}: the temperature must be a finite number ≥ 0 in every replica"
                ) from None
        try:
            beta = float(value)
        except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of several numbers
            raise TypeError(
                f"beta(t={t:g}) must return a number or one per replica (a tensor of shape (B,)) — "
                f"the temperature — got {type(value).__name__}"
            ) from None
        if not (beta >= 0 and math.isfinite(beta)):
            raise ValueError(f"beta(t={t:g}) = {beta}: the temperature must be a finite number ≥ 0")
        return beta

    def diffusion(self, t: float, x: torch.Tensor) -> Param:
        if self._sigma is not None:  # constant β: computed once
            return at(self._sigma, x, "beta")  # a number, or (B, 1, 1) in x's dtype
        beta = self.temperature(t)
        if torch.is_tensor(beta):
            return at((2.0 * beta).sqrt(), x, "beta")  # (B, 1, 1)
        return math.sqrt(2.0 * beta)

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        r"""Energy per replica $1/M \sum_i [V(x_i) + \tfrac12 \cdot 1/M \sum_j W(x_i - x_j)]$: ``(B, M, d) -> (B,)``."""
        e = self.confinement.energy(x)  # (B, M)
        if self.interaction is not None:
            e = e + 0.5 * self.interaction.energy(x)  # (B, M)
        return e.mean(1)

    def __repr__(self) -> str:
        return f"MeanFieldLangevin({self.confinement!r}, {self.interaction!r}, beta={self.beta!r})"


class SDE(ParticleSystem):
    r"""A particle system from user callables ``drift(t, x)`` and ``diffusion(t, x)``.

    Example (geometric Brownian motion, $dx = \mu x dt + s\cdot x dW$)::

        SDE(lambda t, x: mu * x, lambda t, x: s * x, noise="diagonal")

    Args:
        drift: ``(t, x) -> (B, M, d)``.
        diffusion: ``(t, x) ->`` σ, shaped as the noise type says (see the module docstring).
        noise: ``"additive"``, ``"diagonal"`` or ``"general"``.
        brownian_dim: ``m`` for ``"general"`` noise.
        projection: $\Pi$ applied after every step, or ``None``.
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
