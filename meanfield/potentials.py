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
from .pairwise import radial_sum, resolve_backend

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

    ``1/M Σ_j 2ψ'(r²_ij)(x_i − x_j) = 1/M [x_i Σ_j g_ij − Σ_j g_ij x_j]`` with ``g_ij = 2ψ'(r²_ij)``: one
    pairwise reduction ``Σ_j g_ij (1, x_j)`` (:func:`meanfield.pairwise.radial_sum`), never an
    ``M × M × d`` tensor. The ``"torch"`` backend works in blocks of ``B × rows × M ≤ max_elements``
    numbers, one matrix product each; ``"keops"`` (when ``pykeops`` is installed) keeps memory ``O(BMd)``
    and is what ``"auto"`` picks on a GPU and in low dimension (:func:`meanfield.pairwise.resolve_backend`).
    KeOps needs ``ψ`` and ``ψ'`` written with operators and tensor methods (``(-r2).exp()``, ``1 / (1 + r2)``),
    which apply to its symbolic tensors too; where they do not (``torch.exp(r2)``) the torch backend is used.
    :attr:`backend_used` says which backend the last call used. Writing ``ψ`` in ``|z|²`` keeps the gradient
    smooth at ``z = 0``.

    Args:
        psi: ``ψ``, applied elementwise to a tensor of squared distances.
        dpsi: ``ψ'``, applied elementwise likewise.
        max_elements: the largest ``B × rows × M`` block the torch backend builds at once.
        backend: ``"auto"``, ``"torch"`` or ``"keops"``.
    """

    def __init__(
        self,
        psi: Callable[[torch.Tensor], torch.Tensor],
        dpsi: Callable[[torch.Tensor], torch.Tensor],
        max_elements: int = 1 << 22,
        backend: str = "auto",
    ) -> None:
        if not callable(psi) or not callable(dpsi):
            raise TypeError("psi and dpsi must be callables of a tensor of squared distances")
        self.psi, self.dpsi = psi, dpsi
        self.max_elements = check_int("max_elements", max_elements)
        resolve_backend(backend, 1)  # refuses an unknown name, or "keops" without pykeops, now
        self.backend = backend
        self.backend_used: str | None = None
        self._keops_fails = False  # ψ or ψ' could not be applied to a KeOps LazyTensor

    def _kernels(self) -> tuple[Callable, Callable, float, float, float]:
        """``(φ_energy, φ_grad, s, c_energy, c_grad)`` with ``ψ(r²) = c_energy·φ_energy(s r²)`` and
        ``2ψ'(r²) = c_grad·φ_grad(s r²)`` (constants outside the reduction: one KeOps formula for all)."""
        return self.psi, (lambda r2: 2.0 * self.dpsi(r2)), 1.0, 1.0, 1.0

    def _pair_sums(self, x: torch.Tensor, phi: Callable, values: torch.Tensor, scale: float) -> torch.Tensor:
        """``Σ_j φ(s·|x_i − x_j|²) v_j``, shape ``(B, M, k)``, on the chosen backend."""
        backend = resolve_backend(self.backend, x.shape[-1], x.device)
        if backend == "keops" and self._keops_fails and self.backend == "auto":
            backend = "torch"
        if backend == "keops":
            try:
                out, self.backend_used = radial_sum(x, x, phi, values, scale=scale, backend="keops")
                return out
            except TypeError:  # ψ' uses a torch function that a LazyTensor does not support
                if self.backend == "keops":
                    raise
                self._keops_fails = True
        out, self.backend_used = radial_sum(
            x, x, phi, values, scale=scale, backend="torch", max_elements=self.max_elements
        )
        return out

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        phi, _, scale, c, _ = self._kernels()
        ones = torch.ones_like(x[..., :1])  # (B, M, 1)
        return self._pair_sums(x, phi, ones, scale)[..., 0] * (c / x.shape[1])  # (B, M)

    def mean_field_grad(self, x: torch.Tensor) -> torch.Tensor:
        _, phi, scale, _, c = self._kernels()
        x = x - x.mean(1, keepdim=True)  # (B, M, d) centred: x_i Σ g − Σ g x_j loses less to round-off
        values = torch.cat((torch.ones_like(x[..., :1]), x), -1)  # (B, M, 1 + d)
        sums = self._pair_sums(x, phi, values, scale)  # (B, M, 1 + d): Σ_j g_ij, Σ_j g_ij x_j
        return (x * sums[..., :1] - sums[..., 1:]) * (c / x.shape[1])  # (B, M, d)

    def __repr__(self) -> str:
        return f"RadialInteraction(psi={self.psi!r}, dpsi={self.dpsi!r})"


class GaussianInteraction(RadialInteraction):
    """``W(z) = c · exp(−|z|²/(2ℓ²))``: ``c > 0`` repels nearby particles, ``c < 0`` attracts them.

    With ``s = 1/(2ℓ²)``: ``ψ(r²) = c·e^{−s r²}`` and ``2ψ'(r²) = −2sc·e^{−s r²}``; the reduction is
    ``Σ_j e^{−|√s x_i − √s x_j|²}(1, x_j)`` whatever ``c`` and ``ℓ`` (one compiled KeOps formula).

    Args:
        c: strength.
        length: the width ``ℓ > 0``.
        max_elements: the largest block of the torch backend.
        backend: ``"auto"``, ``"torch"`` or ``"keops"``.
    """

    def __init__(
        self, c: float = 1.0, length: float = 1.0, max_elements: int = 1 << 22, backend: str = "auto"
    ) -> None:
        c, length = check_finite("c", c), check_finite("length", length)
        s = 1.0 / (2.0 * length**2) if length > 0 else math.inf
        if not math.isfinite(s):
            raise ValueError(
                f"GaussianInteraction needs length > 0 with 1/(2·length²) finite, got length={length}"
            )
        self.c, self.length, self._s = c, length, s
        super().__init__(
            lambda r2: c * torch.exp(-s * r2), lambda r2: -s * c * torch.exp(-s * r2), max_elements, backend
        )

    def _kernels(self):
        s = self._s
        return _gaussian_kernel, _gaussian_kernel, s, self.c, -2.0 * s * self.c

    def __repr__(self) -> str:
        return f"GaussianInteraction(c={self.c}, length={self.length})"


def _gaussian_kernel(u):
    """``e^{−u}`` for a tensor or a KeOps LazyTensor; in place on a tensor that needs no gradient (the
    torch backend hands over a fresh block: one pass over it instead of three allocations)."""
    if isinstance(u, torch.Tensor) and not (u.requires_grad and torch.is_grad_enabled()):
        return u.neg_().exp_()
    return (-u).exp()
