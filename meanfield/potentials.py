"""Confinements ``V`` and interactions ``W`` of a particle system, each with its gradient.

A state is ``x`` of shape ``(B, M, d)``: B replicas of M particles in R^d. Interactions act within
a replica only. The mean-field drift of particle ``i`` is

    b(x_i) = −∇V(x_i) − 1/M Σ_j ∇W(x_i − x_j)

Confinements implement ``energy(x) -> (B, M)`` and ``grad(x) -> (B, M, d)``; interactions implement
``energy(x) -> (B, M)`` (the per-particle interaction ``1/M Σ_j W(x_i − x_j)``) and
``mean_field_grad(x) -> (B, M, d)`` (``1/M Σ_j ∇W(x_i − x_j)``). The free energy of the empirical law is
``Σ_i [V(x_i) + ½ · 1/M Σ_j W(x_i − x_j)] / M`` plus the entropy term.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable

import torch

from ._checks import check_finite, check_int, check_nonnegative

__all__ = [
    "Confinement",
    "Interaction",
    "Quadratic",
    "DoubleWell",
    "QuadraticInteraction",
    "Alignment",
    "RadialInteraction",
    "GaussianInteraction",
]


class Confinement(ABC):
    """A one-particle potential ``V: R^d → R``."""

    @abstractmethod
    def energy(self, x: torch.Tensor) -> torch.Tensor:
        """``V(x_i)`` for each particle: ``(B, M, d) -> (B, M)``."""

    @abstractmethod
    def grad(self, x: torch.Tensor) -> torch.Tensor:
        """``∇V(x_i)`` for each particle: ``(B, M, d) -> (B, M, d)``."""


class Interaction(ABC):
    """A symmetric pair potential, averaged over the particles of a replica: usually ``W(x_i − x_j)`` with
    ``W(z) = W(−z)``, but any ``W(x_i, x_j) = W(x_j, x_i)`` works (e.g. :class:`Alignment`), since the
    drift only uses ``mean_field_grad``."""

    @abstractmethod
    def energy(self, x: torch.Tensor) -> torch.Tensor:
        """``1/M Σ_j W(x_i − x_j)`` for each particle: ``(B, M, d) -> (B, M)``."""

    @abstractmethod
    def mean_field_grad(self, x: torch.Tensor) -> torch.Tensor:
        """``1/M Σ_j ∇W(x_i − x_j)`` for each particle: ``(B, M, d) -> (B, M, d)``."""


class Quadratic(Confinement):
    """``V(x) = a/2 · |x|²``, ``∇V(x) = a·x`` (the Ornstein–Uhlenbeck confinement).

    Args:
        a: curvature, ``a ≥ 0``.
    """

    def __init__(self, a: float = 1.0) -> None:
        self.a = check_nonnegative("a", a)

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * self.a * x.square().sum(-1)  # (B, M)

    def grad(self, x: torch.Tensor) -> torch.Tensor:
        return self.a * x  # (B, M, d)

    def __repr__(self) -> str:
        return f"Quadratic(a={self.a})"


class DoubleWell(Confinement):
    """``V(x) = Σ_k (x_k⁴/4 − x_k²/2)``, ``∇V(x) = x³ − x`` per coordinate: wells at ``x_k = ±1``."""

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.square()  # (B, M, d)
        return (0.25 * x2.square() - 0.5 * x2).sum(-1)  # (B, M)

    def grad(self, x: torch.Tensor) -> torch.Tensor:
        return x * (x.square() - 1.0)  # (B, M, d)

    def __repr__(self) -> str:
        return "DoubleWell()"


class QuadraticInteraction(Interaction):
    """``W(z) = k/2 · |z|²``: the Curie–Weiss / Desai–Zwanzig attraction to the centre of mass.

    ``1/M Σ_j ∇W(x_i − x_j) = k·(x_i − x̄)`` with ``x̄ = 1/M Σ_j x_j``: O(M) per replica, no pairs.

    Args:
        k: strength; ``k > 0`` attracts, ``k < 0`` repels.
    """

    def __init__(self, k: float = 1.0) -> None:
        self.k = check_finite("k", k)

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        # 1/M Σ_j k/2 |x_i − x_j|² = k/2 (|x_i − x̄|² + Var), Var = 1/M Σ_j |x_j − x̄|²
        centred = x - x.mean(1, keepdim=True)  # (B, M, d)
        sq = centred.square().sum(-1)  # (B, M)
        return 0.5 * self.k * (sq + sq.mean(1, keepdim=True))  # (B, M)

    def mean_field_grad(self, x: torch.Tensor) -> torch.Tensor:
        return self.k * (x - x.mean(1, keepdim=True))  # (B, M, d)

    def __repr__(self) -> str:
        return f"QuadraticInteraction(k={self.k})"


class Alignment(Interaction):
    """``W(x, y) = −κ·x·y``: alignment (Kuramoto / von Mises–Fisher on the sphere), through the mean.

    ``1/M Σ_j W(x_i, x_j) = −κ·x_i·x̄`` and ``1/M Σ_j ∇_{x_i} W = −κ·x̄``: O(M) per replica. On the sphere
    ``−κ x·y = κ/2·|x − y|² − κ``, so it gives the law of ``QuadraticInteraction(κ)``, whose extra radial
    term the projection removes.

    Args:
        kappa: strength; ``κ > 0`` aligns, ``κ < 0`` anti-aligns.
    """

    def __init__(self, kappa: float = 1.0) -> None:
        self.kappa = check_finite("kappa", kappa)

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        return -self.kappa * (x * x.mean(1, keepdim=True)).sum(-1)  # (B, M)

    def mean_field_grad(self, x: torch.Tensor) -> torch.Tensor:
        return (-self.kappa * x.mean(1, keepdim=True)).expand_as(x)  # (B, M, d)

    def __repr__(self) -> str:
        return f"Alignment(kappa={self.kappa})"


class RadialInteraction(Interaction):
    """A radial pair potential ``W(z) = ψ(|z|²)``, so ``∇W(z) = 2ψ'(|z|²)·z``.

    Computed in chunks of rows: ``1/M Σ_j 2ψ'(r²_ij)(x_i − x_j) = 1/M [x_i Σ_j g_ij − Σ_j g_ij x_j]`` with
    ``g_ij = 2ψ'(r²_ij)``, so memory is ``B × chunk × M`` (never an ``M × M × d`` tensor) and the work is
    one matrix product per chunk. Writing ``ψ`` in ``|z|²`` keeps the gradient smooth at ``z = 0``.

    Args:
        psi: ``ψ``, applied elementwise to a tensor of squared distances.
        dpsi: ``ψ'``, applied elementwise likewise.
        max_elements: the largest ``B × chunk × M`` block built at once.
    """

    def __init__(
        self,
        psi: Callable[[torch.Tensor], torch.Tensor],
        dpsi: Callable[[torch.Tensor], torch.Tensor],
        max_elements: int = 1 << 22,
    ) -> None:
        if not callable(psi) or not callable(dpsi):
            raise TypeError("psi and dpsi must be callables of a tensor of squared distances")
        self.psi, self.dpsi = psi, dpsi
        self.max_elements = check_int("max_elements", max_elements)

    def _chunks(self, x: torch.Tensor):
        B, M, _ = x.shape
        size = max(1, self.max_elements // max(1, B * M))
        sq_norm = x.square().sum(-1)  # (B, M)
        for start in range(0, M, size):
            xi = x[:, start : start + size]  # (B, c, d)
            r2 = sq_norm[:, start : start + size, None] + sq_norm[:, None, :] - 2.0 * xi @ x.transpose(1, 2)
            yield start, xi, r2.clamp_(min=0.0)  # (B, c, M)

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(x.shape[:2], dtype=x.dtype, device=x.device)  # (B, M)
        for start, xi, r2 in self._chunks(x):
            out[:, start : start + xi.shape[1]] = self.psi(r2).mean(-1)  # (B, c)
        return out

    def mean_field_grad(self, x: torch.Tensor) -> torch.Tensor:
        M = x.shape[1]
        out = torch.empty_like(x)  # (B, M, d)
        for start, xi, r2 in self._chunks(x):
            g = 2.0 * self.dpsi(r2)  # (B, c, M)
            out[:, start : start + xi.shape[1]] = (xi * g.sum(-1, keepdim=True) - g @ x) / M  # (B, c, d)
        return out

    def __repr__(self) -> str:
        return f"RadialInteraction(psi={self.psi!r}, dpsi={self.dpsi!r})"


class GaussianInteraction(RadialInteraction):
    """``W(z) = c · exp(−|z|²/(2ℓ²))``: ``c > 0`` repels nearby particles, ``c < 0`` attracts them.

    Args:
        c: strength.
        length: the width ``ℓ > 0``.
    """

    def __init__(self, c: float = 1.0, length: float = 1.0, max_elements: int = 1 << 22) -> None:
        c, length = check_finite("c", c), check_finite("length", length)
        s = 1.0 / (2.0 * length**2) if length > 0 else math.inf
        if not math.isfinite(s):
            raise ValueError(
                f"GaussianInteraction needs length > 0 with 1/(2·length²) finite, got length={length}"
            )
        self.c, self.length = c, length
        super().__init__(
            lambda r2: c * torch.exp(-s * r2), lambda r2: -s * c * torch.exp(-s * r2), max_elements
        )

    def __repr__(self) -> str:
        return f"GaussianInteraction(c={self.c}, length={self.length})"
