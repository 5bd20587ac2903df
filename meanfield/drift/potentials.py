r"""Confinements ``V`` and interactions ``W`` of a particle system, each with its gradient.

A state is ``x`` of shape ``(B, M, d)``: B replicas of M particles in R^d. Interactions act within
a replica only. The mean-field drift of particle ``i`` is

$$
b(x_i) = -\nabla V(x_i) - 1/M \sum_j \nabla W(x_i - x_j)
$$

Confinements implement ``energy(x) -> (B, M)`` and ``grad(x) -> (B, M, d)``; interactions implement
``energy(x) -> (B, M)`` (the per-particle interaction $1/M \sum_j W(x_i - x_j)$) and
``mean_field_grad(x) -> (B, M, d)`` ($1/M \sum_j \nabla W(x_i - x_j)$). The energy of the empirical law is
$\sum_i [V(x_i) + \tfrac12 \cdot 1/M \sum_j W(x_i - x_j)] / M$
([`MeanFieldLangevin.energy`][meanfield.drift.systems.MeanFieldLangevin.energy]); the free energy of the particles' law
([`meanfield.metrics.free_energy`][meanfield.metrics.free_energy]) estimates $\tfrac12 \mathbb{E}_{\rho\otimes\rho} W$ by the sum over
$j \ne i$ with $1/(M - 1)$ instead, and adds $-\beta H$.

**Per-replica parameters.** Every numeric parameter (``Quadratic(a)``, ``DoubleWell``'s coefficients,
``QuadraticInteraction(k)``, ``Alignment(kappa)``, the strength and width of the radial interactions) is a
number or one value per replica: a tensor of shape ``(B,)`` (or ``(B, 1, 1)``), so that one state
``(B, M, d)`` runs B parameter values at once, replica ``b`` with value ``[b]``. A number gives the same
numbers as before, bit for bit; per-replica values are kept as a float64 ``(B,)`` tensor (the attribute
reads it back) and must match the state's ``B``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable

import torch

from .._checks import check_int
from .._replicas import Param, at, per_replica
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
    "LogInteraction",
    "RieszInteraction",
]


class Confinement(ABC):
    r"""A one-particle potential $V: \mathbb{R}^d \to \mathbb{R}$."""

    def parameters(self) -> dict[str, Param]:
        """The numeric parameters by name (numbers or per-replica ``(B,)`` tensors), for the replica check."""
        return {}

    @abstractmethod
    def energy(self, x: torch.Tensor) -> torch.Tensor:
        """$V(x_i)$ for each particle: ``(B, M, d) -> (B, M)``."""

    @abstractmethod
    def grad(self, x: torch.Tensor) -> torch.Tensor:
        r"""$\nabla V(x_i)$ for each particle: ``(B, M, d) -> (B, M, d)``."""


class Interaction(ABC):
    """A symmetric pair potential, averaged over the particles of a replica: usually $W(x_i - x_j)$ with
    $W(z) = W(-z)$, but any $W(x_i, x_j) = W(x_j, x_i)$ works (e.g. [`Alignment`][meanfield.drift.potentials.Alignment]), since the
    drift only uses ``mean_field_grad``."""

    def parameters(self) -> dict[str, Param]:
        """The numeric parameters by name (numbers or per-replica ``(B,)`` tensors), for the replica check."""
        return {}

    @abstractmethod
    def energy(self, x: torch.Tensor) -> torch.Tensor:
        r"""$1/M \sum_j W(x_i - x_j)$ for each particle: ``(B, M, d) -> (B, M)``."""

    @abstractmethod
    def mean_field_grad(self, x: torch.Tensor) -> torch.Tensor:
        r"""$1/M \sum_j \nabla W(x_i - x_j)$ for each particle: ``(B, M, d) -> (B, M, d)``."""


class Quadratic(Confinement):
    r"""$V(x) = a/2 \cdot |x|^2$, $\nabla V(x) = a\cdot x$ (the Ornstein–Uhlenbeck confinement).

    Args:
        a: curvature, $a \ge 0$: a number, or one per replica (shape ``(B,)``).
    """

    def __init__(self, a: float | torch.Tensor = 1.0) -> None:
        self.a = per_replica("a", a, minimum=0.0)

    def parameters(self) -> dict[str, Param]:
        return {"a": self.a}

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * at(self.a, x, "a", 2) * x.square().sum(-1)  # (B, M)

    def grad(self, x: torch.Tensor) -> torch.Tensor:
        return at(self.a, x, "a") * x  # (B, M, d)

    def __repr__(self) -> str:
        return f"Quadratic(a={self.a})"


class DoubleWell(Confinement):
    r"""$V(x) = \sum_k (c_4\cdot x_k^4/4 - c_2\cdot x_k^2/2)$, $\nabla V(x) = c_4x^3 - c_2x$ per coordinate: wells at
    $x_k = \pm\sqrt{c_2/c_4}$, barrier $c_2^2/(4c_4)$ per coordinate. The default $c_4 = c_2 = 1$ is
    $x^4/4 - x^2/2$ with wells at $\pm 1$.

    Args:
        quartic: $c_4 > 0$, a number or one per replica (shape ``(B,)``).
        quadratic: $c_2$ (any sign; $c_2 \le 0$ has a single well at 0), a number or one per replica.
    """

    def __init__(self, quartic: float | torch.Tensor = 1.0, quadratic: float | torch.Tensor = 1.0) -> None:
        self.quartic = per_replica("quartic", quartic, minimum=0.0, strict=True)
        self.quadratic = per_replica("quadratic", quadratic)
        self._plain = not torch.is_tensor(self.quartic) and self.quartic == 1.0  # x⁴/4 as before: no factor

    def parameters(self) -> dict[str, Param]:
        return {"quartic": self.quartic, "quadratic": self.quadratic}

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.square()  # (B, M, d)
        c4, c2 = at(self.quartic, x, "quartic"), at(self.quadratic, x, "quadratic")  # numbers or (B, 1, 1)
        quartic = 0.25 * x2.square() if self._plain else (0.25 * c4) * x2.square()  # (B, M, d)
        return (quartic - (0.5 * c2) * x2).sum(-1)  # (B, M)

    def grad(self, x: torch.Tensor) -> torch.Tensor:
        c4, c2 = at(self.quartic, x, "quartic"), at(self.quadratic, x, "quadratic")  # numbers or (B, 1, 1)
        if self._plain:
            return x * (x.square() - c2)  # (B, M, d)
        return x * (c4 * x.square() - c2)  # (B, M, d)

    def __repr__(self) -> str:
        if not torch.is_tensor(self.quadratic) and self._plain and self.quadratic == 1.0:
            return "DoubleWell()"
        return f"DoubleWell(quartic={self.quartic}, quadratic={self.quadratic})"


class QuadraticInteraction(Interaction):
    r"""$W(z) = k/2 \cdot |z|^2$: the Curie–Weiss / Desai–Zwanzig attraction to the centre of mass.

    $1/M \sum_j \nabla W(x_i - x_j) = k\cdot(x_i - \bar{x})$ with $\bar{x} = 1/M \sum_j x_j$: O(M) per replica, no pairs.

    Args:
        k: strength; ``k > 0`` attracts, ``k < 0`` repels: a number, or one per replica (shape ``(B,)``).
    """

    def __init__(self, k: float | torch.Tensor = 1.0) -> None:
        self.k = per_replica("k", k)

    def parameters(self) -> dict[str, Param]:
        return {"k": self.k}

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        # 1/M Σ_j k/2 |x_i − x_j|² = k/2 (|x_i − x̄|² + Var), Var = 1/M Σ_j |x_j − x̄|²
        centred = x - x.mean(1, keepdim=True)  # (B, M, d)
        sq = centred.square().sum(-1)  # (B, M)
        return 0.5 * at(self.k, x, "k", 2) * (sq + sq.mean(1, keepdim=True))  # (B, M)

    def mean_field_grad(self, x: torch.Tensor) -> torch.Tensor:
        return at(self.k, x, "k") * (x - x.mean(1, keepdim=True))  # (B, M, d)

    def __repr__(self) -> str:
        return f"QuadraticInteraction(k={self.k})"


class Alignment(Interaction):
    r"""$W(x, y) = -\kappa\cdot x\cdot y$: alignment (Kuramoto / von Mises–Fisher on the sphere), through the mean.

    $1/M \sum_j W(x_i, x_j) = -\kappa\cdot x_i\cdot\bar{x}$ and $1/M \sum_j \nabla_{x_i} W = -\kappa\cdot\bar{x}$: O(M) per replica. On the sphere
    $-\kappa x\cdot y = \kappa/2\cdot|x - y|^2 - \kappa$, so it gives the law of ``QuadraticInteraction(κ)``, whose extra radial
    term the projection removes.

    Args:
        kappa: strength; $\kappa > 0$ aligns, $\kappa < 0$ anti-aligns: a number, or one per replica (shape
            ``(B,)``), e.g. ``Alignment(torch.linspace(0.5, 4.0, 16))`` for a coupling sweep in one call.
    """

    def __init__(self, kappa: float | torch.Tensor = 1.0) -> None:
        self.kappa = per_replica("kappa", kappa)

    def parameters(self) -> dict[str, Param]:
        return {"kappa": self.kappa}

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        return -at(self.kappa, x, "kappa", 2) * (x * x.mean(1, keepdim=True)).sum(-1)  # (B, M)

    def mean_field_grad(self, x: torch.Tensor) -> torch.Tensor:
        return (-at(self.kappa, x, "kappa") * x.mean(1, keepdim=True)).expand_as(x)  # (B, M, d)

    def __repr__(self) -> str:
        return f"Alignment(kappa={self.kappa})"


class RadialInteraction(Interaction):
    r"""A radial pair potential $W(z) = \psi(|z|^2)$, so $\nabla W(z) = 2\psi'(|z|^2)\cdot z$.

    $1/M \sum_j 2\psi'(r^2_{ij})(x_i - x_j) = 1/M [x_i \sum_j g_{ij} - \sum_j g_{ij} x_j]$ with $g_{ij} = 2\psi'(r^2_{ij})$: one
    pairwise reduction $\sum_j g_{ij} (1, x_j)$ ([`meanfield.drift.pairwise.radial_sum`][meanfield.drift.pairwise.radial_sum]), never an
    $M \times M \times d$ tensor. The ``"torch"`` backend works in blocks of ``B × rows × M ≤ max_elements``
    numbers, one matrix product each; ``"keops"`` (when ``pykeops`` is installed) keeps memory ``O(BMd)``
    and is what ``"auto"`` picks for tensors on a GPU, whatever the dimension ([`meanfield.drift.pairwise.resolve_backend`][meanfield.drift.pairwise.resolve_backend]).
    KeOps needs $\psi$ and $\psi'$ written with operators and tensor methods (``(-r2).exp()``, ``1 / (1 + r2)``),
    which apply to its symbolic tensors too; where they do not (``torch.exp(r2)``) the torch backend is used.
    `backend_used` says which backend the last call used. Writing $\psi$ in $|z|^2$ keeps the gradient
    smooth at ``z = 0``.

    **The self-pair.** The sums run over all ``j``, ``i`` included, where ``z = 0``: for a smooth kernel that
    term adds $\psi(0)/M$ to the energy and nothing to the drift ($\nabla W(0) = 0$). A kernel singular at 0
    ($-\log|z|$, Coulomb, Riesz) has no value there, and including it would make the drift NaN at the first
    step. So ``self_pair=None`` (the default) leaves the ``j = i`` term out exactly when $\psi(0)$ or $\psi'(0)$
    is not finite (probed once, on a float64 zero), and keeps it otherwise; ``True``/``False`` decide
    explicitly. Left out, the sums are $1/M \sum_{j\ne i}$ (the mean-field ``1/M``, not $1/(M - 1)$). Two
    *different* particles at the same point still meet the singularity: that is the model's, not the code's.

    **Per-replica parameters.** $\psi$ and $\psi'$ are applied (on the torch backend) to blocks of squared
    distances of shape ``(B, rows, M)``, so a ``(B, 1, 1)`` tensor inside them broadcasts per replica; the
    built-in subclasses take their strength and width as per-replica values directly.

    Args:
        psi: $\psi$, applied elementwise to a tensor of squared distances.
        dpsi: $\psi'$, applied elementwise likewise.
        max_elements: the largest $B \times \text{ rows } \times M$ block the torch backend builds at once.
        backend: ``"auto"``, ``"torch"`` or ``"keops"``.
        self_pair: include the ``j = i`` term (``True``), leave it out (``False``), or decide from the
            kernel's value at 0 (``None``).
    """

    def __init__(
        self,
        psi: Callable[[torch.Tensor], torch.Tensor],
        dpsi: Callable[[torch.Tensor], torch.Tensor],
        max_elements: int = 1 << 22,
        backend: str = "auto",
        self_pair: bool | None = None,
    ) -> None:
        if not callable(psi) or not callable(dpsi):
            raise TypeError("psi and dpsi must be callables of a tensor of squared distances")
        if self_pair is not None and not isinstance(self_pair, bool):
            raise TypeError(f"self_pair must be True, False or None (decide from ψ(0)), got {self_pair!r}")
        self.psi, self.dpsi = psi, dpsi
        self.max_elements = check_int("max_elements", max_elements)
        resolve_backend(backend, 1)  # refuses an unknown name, or "keops" without pykeops, now
        self.backend = backend
        self.backend_used: str | None = None
        self._keops_fails = False  # ψ or ψ' could not be applied to a KeOps LazyTensor
        self.self_pair = self._singular_at_zero() is False if self_pair is None else self_pair

    def _singular_at_zero(self) -> bool:
        r"""Whether $\psi(0)$ or $\psi'(0)$ is not finite (or cannot be evaluated), on a float64 zero."""
        zero = torch.zeros(1, 1, 1, dtype=torch.float64)  # (1, 1, 1)
        try:
            with torch.no_grad():
                values = [torch.as_tensor(f(zero.clone())) for f in (self.psi, self.dpsi)]
        except (ArithmeticError, RuntimeError, ValueError):
            return True
        return not all(bool(torch.isfinite(v).all()) for v in values)

    def _kernels(self) -> tuple[Callable, Callable, Param, Param, Param]:
        """``(φ_energy, φ_grad, s, c_energy, c_grad)`` with ``ψ(r²) = c_energy·φ_energy(s r²)`` and
        ``2ψ'(r²) = c_grad·φ_grad(s r²)`` (constants outside the reduction: one KeOps formula for all; each
        of ``s``, ``c_energy``, ``c_grad`` a number or per-replica ``(B,)`` values)."""
        return self.psi, (lambda r2: 2.0 * self.dpsi(r2)), 1.0, 1.0, 1.0

    def _pair_sums(self, x: torch.Tensor, phi: Callable, values: torch.Tensor, scale: Param) -> torch.Tensor:
        r"""$\sum_j \varphi(s\cdot|x_i - x_j|^2) v_j$ ($j \ne i$ unless `self_pair`), shape ``(B, M, k)``."""
        backend = resolve_backend(self.backend, x.shape[-1], x.device)
        if backend == "keops" and (self._keops_fails or not self.self_pair) and self.backend == "auto":
            backend = "torch"
        exclude = not self.self_pair
        if backend == "keops":
            try:
                out, self.backend_used = radial_sum(
                    x, x, phi, values, scale=scale, backend="keops", exclude_self=exclude
                )
                return out
            except TypeError:  # ψ' uses a torch function that a LazyTensor does not support
                if self.backend == "keops":
                    raise
                self._keops_fails = True
        out, self.backend_used = radial_sum(
            x,
            x,
            phi,
            values,
            scale=scale,
            backend="torch",
            max_elements=self.max_elements,
            exclude_self=exclude,
        )
        return out

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        phi, _, scale, c, _ = self._kernels()
        ones = torch.ones_like(x[..., :1])  # (B, M, 1)
        sums = self._pair_sums(x, phi, ones, scale)[..., 0]  # (B, M)
        if torch.is_tensor(c):
            return sums * (at(c, x, "c", 2) / x.shape[1])  # (B, M)
        return sums * (c / x.shape[1])  # (B, M)

    def mean_field_grad(self, x: torch.Tensor) -> torch.Tensor:
        _, phi, scale, _, c = self._kernels()
        x = x - x.mean(1, keepdim=True)  # (B, M, d) centred: x_i Σ g − Σ g x_j loses less to round-off
        values = torch.cat((torch.ones_like(x[..., :1]), x), -1)  # (B, M, 1 + d)
        sums = self._pair_sums(x, phi, values, scale)  # (B, M, 1 + d): Σ_j g_ij, Σ_j g_ij x_j
        if torch.is_tensor(c):
            return (x * sums[..., :1] - sums[..., 1:]) * (at(c, x, "c") / x.shape[1])  # (B, M, d)
        return (x * sums[..., :1] - sums[..., 1:]) * (c / x.shape[1])  # (B, M, d)

    def __repr__(self) -> str:
        return f"RadialInteraction(psi={self.psi!r}, dpsi={self.dpsi!r})"


class GaussianInteraction(RadialInteraction):
    r"""$W(z) = c \cdot \exp(-|z|^2/(2\ell^2))$: ``c > 0`` repels nearby particles, ``c < 0`` attracts them.

    With $s = 1/(2\ell^2)$: $\psi(r^2) = c\cdot e^{-s r^2}$ and $2\psi'(r^2) = -2sc\cdot e^{-s r^2}$; the reduction is
    $\sum_j e^{-|\sqrt{s} x_i - \sqrt{s} x_j|^2}(1, x_j)$ whatever ``c`` and $\ell$ (one compiled KeOps formula). Per
    replica, ``c`` multiplies the sums and $\sqrt{s}$ scales the replica's particles before them.

    Args:
        c: strength, a number or one per replica (shape ``(B,)``).
        length: the width $\ell > 0$, a number or one per replica.
        max_elements: the largest block of the torch backend.
        backend: ``"auto"``, ``"torch"`` or ``"keops"``.
    """

    def __init__(
        self,
        c: float | torch.Tensor = 1.0,
        length: float | torch.Tensor = 1.0,
        max_elements: int = 1 << 22,
        backend: str = "auto",
    ) -> None:
        c, length = per_replica("c", c), per_replica("length", length)
        if torch.is_tensor(length):
            s = 1.0 / (2.0 * length.square())  # (B,)
            bad = ~(torch.isfinite(s) & (length > 0))  # (B,)
            if bool(bad.any()):
                i = int(bad.nonzero()[0])
                raise ValueError(
                    f"GaussianInteraction needs length > 0 with 1/(2·length²) finite, got length[{i}]="
                    f"{float(length[i])}"
                )
        else:
            s = 1.0 / (2.0 * length**2) if length > 0 and length**2 > 0 else math.inf  # 1e-200² is 0.0
            if not math.isfinite(s):
                raise ValueError(
                    f"GaussianInteraction needs length > 0 with 1/(2·length²) finite, got length={length}"
                )
        self.c, self.length, self._s = c, length, s

        def psi(r2: torch.Tensor) -> torch.Tensor:  # ψ(r²) = c·e^{−s r²} on blocks (B, rows, M)
            return at(c, r2, "c") * torch.exp(-at(s, r2, "length") * r2)

        def dpsi(r2: torch.Tensor) -> torch.Tensor:  # ψ'(r²) = −s·c·e^{−s r²}
            return -at(s, r2, "length") * at(c, r2, "c") * torch.exp(-at(s, r2, "length") * r2)

        super().__init__(psi, dpsi, max_elements, backend, self_pair=True)  # smooth at 0: keep j = i

    def parameters(self) -> dict[str, Param]:
        return {"c": self.c, "length": self.length}

    def _kernels(self):
        s = self._s
        return _gaussian_kernel, _gaussian_kernel, s, self.c, -2.0 * s * self.c

    def __repr__(self) -> str:
        return f"GaussianInteraction(c={self.c}, length={self.length})"


def _gaussian_kernel(u):
    """$e^{-u}$ for a tensor or a KeOps LazyTensor; in place on a tensor that needs no gradient (the
    torch backend hands over a fresh block: one pass over it instead of three allocations)."""
    if isinstance(u, torch.Tensor) and not (u.requires_grad and torch.is_grad_enabled()):
        return u.neg_().exp_()
    return (-u).exp()


class LogInteraction(RadialInteraction):
    r"""$W(z) = -c\cdot\log|z| = -c/2\cdot\log(|z|^2)$: logarithmic repulsion (``c > 0``) or attraction
    (``c < 0``), singular at ``z = 0``.

    $\psi(r^2) = -c/2\cdot\log r^2$ and $2\psi'(r^2) = -c/r^2$, so the drift's pair term is
    $-1/M \sum_{j\ne i} \nabla W(x_i - x_j) = c/M \sum_{j\ne i} (x_i - x_j)/|x_i - x_j|^2$. In d = 1 this is the interaction
    of Dyson Brownian motion: with $V = a x^2/2$ the mean-field law at low temperature is the semicircle
    of radius $R = \sqrt{2c/a}$ (variance $R^2/4 = c/(2a)$); in d = 2 it is the Coulomb (log-gas)
    interaction. The self-pair ``j = i`` is always left out (see [`RadialInteraction`][meanfield.drift.potentials.RadialInteraction]).

    **The sign: c > 0 repels, c < 0 attracts.** ``LogInteraction(−χ)`` in d = 2 is the Keller–Segel
    (chemotaxis) particle system ``dX_i = −χ/M Σ_{j≠i}(X_i − X_j)/|X_i − X_j|² dt + sqrt(2β) dW_i``. Its virial
    identity (``V = 0``; pair the terms ``i``, ``j``): with ``m2 = 1/M Σ_i |X_i|²``,

    $$ \frac{d}{dt}\,\mathbb E\, m_2 = 4\beta - \chi\,\frac{M-1}{M}, $$

    so the **critical value** is ``χ_c = 4β·M/(M − 1)`` (``4β`` as M → ∞; the critical mass ``8π`` of the
    classical normalisation ``∂ρ = Δρ − ∇·(ρ∇c)``, ``−Δc = ρ``, whose mass ``m`` is ``χ = βm/(2π)`` here).
    Above it ``E m2`` reaches 0 at ``t* = E m2(0)/(χ(M−1)/M − 4β)``: the particles collapse, and
    [`meanfield.simulate`][meanfield.stepping.simulate.simulate] says so ([`meanfield.drift.resolution`][meanfield.drift.resolution]); the check ``theory/keller_segel.py``
    measures the slope on both sides.

    Args:
        c: strength, a number or one per replica (shape ``(B,)``); ``c > 0`` repels, ``c < 0`` attracts.
        max_elements: the largest block of the torch backend.
        backend: ``"auto"``, ``"torch"`` or ``"keops"``.
    """

    def __init__(
        self, c: float | torch.Tensor = 1.0, max_elements: int = 1 << 22, backend: str = "auto"
    ) -> None:
        self.c = c = per_replica("c", c)
        super().__init__(  # ψ(r²) = −c/2·log r², ψ'(r²) = −c/(2r²); the sums use _kernels
            lambda r2: -0.5 * at(c, r2, "c") * r2.log(),
            lambda r2: -0.5 * at(c, r2, "c") / r2,
            max_elements,
            backend,
            self_pair=False,
        )

    def parameters(self) -> dict[str, Param]:
        return {"c": self.c}

    def _kernels(self):
        return _log_kernel, _inverse_kernel, 1.0, self.c, -self.c

    def __repr__(self) -> str:
        return f"LogInteraction(c={self.c})"


class RieszInteraction(RadialInteraction):
    r"""$W(z) = c\cdot|z|^{-s}/s$ for ``s > 0``: Riesz repulsion (``c > 0``) or attraction (``c < 0``, watched
    for a collapse by [`simulate`][meanfield.stepping.simulate.simulate]), singular at ``z = 0``; $s = d - 2$ is Coulomb's in
    $d \ge 3$ ($s \to 0$ gives [`LogInteraction`][meanfield.drift.potentials.LogInteraction]).

    $\psi(r^2) = c/s\cdot(r^2)^{-s/2}$ and $2\psi'(r^2) = -c\cdot(r^2)^{-s/2-1}$, so $\nabla W(z) = -c\cdot z/|z|^{s+2}$. The
    self-pair ``j = i`` is always left out (see [`RadialInteraction`][meanfield.drift.potentials.RadialInteraction]).

    Args:
        s: the exponent ``s > 0`` (a number: it sets the kernel's formula).
        c: strength, a number or one per replica (shape ``(B,)``); ``c > 0`` repels, ``c < 0`` attracts.
        max_elements: the largest block of the torch backend.
        backend: ``"auto"``, ``"torch"`` or ``"keops"``.
    """

    def __init__(
        self,
        s: float = 1.0,
        c: float | torch.Tensor = 1.0,
        max_elements: int = 1 << 22,
        backend: str = "auto",
    ) -> None:
        self.s = per_replica("s", s, minimum=0.0, strict=True)
        if torch.is_tensor(self.s):
            raise TypeError(
                "RieszInteraction's exponent s must be a number (it sets the kernel), not per replica"
            )
        self.c = c = per_replica("c", c)
        half = 0.5 * self.s
        self._energy_kernel = lambda r2: r2 ** (-half)
        self._grad_kernel = lambda r2: r2 ** (-half - 1.0)
        super().__init__(  # ψ(r²) = c/s·(r²)^{−s/2}, ψ'(r²) = −c/2·(r²)^{−s/2−1}; the sums use _kernels
            lambda r2: at(c, r2, "c") * r2 ** (-half) / self.s,
            lambda r2: -half * at(c, r2, "c") * r2 ** (-half - 1.0) / self.s,
            max_elements,
            backend,
            self_pair=False,
        )

    def parameters(self) -> dict[str, Param]:
        return {"c": self.c}

    def _kernels(self):
        c = self.c
        return self._energy_kernel, self._grad_kernel, 1.0, c / self.s, -c

    def __repr__(self) -> str:
        return f"RieszInteraction(s={self.s}, c={self.c})"


def _log_kernel(r2):
    r"""$-\tfrac12 \log r^2$ ($\psi$ of [`LogInteraction`][meanfield.drift.potentials.LogInteraction] with ``c = 1``)."""
    return -0.5 * r2.log()


def _inverse_kernel(r2):
    r"""$1/r^2$ ($2\psi'$ of [`LogInteraction`][meanfield.drift.potentials.LogInteraction] is $-c/r^2$)."""
    return 1.0 / r2
