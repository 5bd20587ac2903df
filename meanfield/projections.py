"""Projections ``Π`` applied after every step: ``θ_i ← Π(θ_i − η·∇_i + sqrt(2β_t η)·ξ_i)``.

One projection serves both steppers: :func:`meanfield.simulate` applies it to the state ``(B, M, d)``
after every step, :class:`meanfield.optim.Langevin` to every parameter of a group after every step.
``project_(x)`` projects one tensor in place and returns it; ``project_all_(tensors)`` does a list.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._checks import check_positive

__all__ = ["Projection", "Clip", "Sphere"]


class Projection:
    """Base class: a map onto a constraint set, applied in place."""

    def project_(self, x: torch.Tensor) -> torch.Tensor:
        """Replace ``x`` by its projection, in place; return it."""
        raise NotImplementedError

    def project_all_(self, tensors: Sequence[torch.Tensor]) -> None:
        """Project every tensor of ``tensors`` in place."""
        for x in tensors:
            self.project_(x)

    def check(self, x: torch.Tensor) -> None:
        """Raise ``ValueError`` if the projection cannot apply to a tensor like ``x``."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.project_(x)


class Clip(Projection):
    """``Π(θ) = clip(θ, −A, A)`` coordinate-wise: the Euclidean projection onto the box ``[−A, A]^d``.

    Args:
        A: the bound, ``A > 0``.
    """

    def __init__(self, A: float) -> None:
        self.A = check_positive("Clip bound A", A)

    def project_(self, x: torch.Tensor) -> torch.Tensor:
        return x.clamp_(-self.A, self.A)

    def __repr__(self) -> str:
        return f"Clip(A={self.A})"


class Sphere(Projection):
    """``Π(θ_i) = r·θ_i/|θ_i|``: each particle renormalised onto the sphere of radius ``r``.

    A particle's coordinates are the axes ``dim`` (default the last one): for a state ``(B, M, d)`` each
    of the B·M particles lands on ``S^{d−1}``; for a stacked parameter ``(M, d)`` each row; pass
    ``dim=(1, 2)`` for a parameter ``(M, d, h)`` whose particle is a whole ``d × h`` block, ``dim=0`` for
    a single vector. A zero particle stays zero.

    With this projection after an Euler–Maruyama step, ``x + b·dt + sqrt(2β·dt)·ξ`` then ``x/|x|`` is the
    standard projected scheme for Langevin dynamics on ``S^{d−1}``: its invariant law converges to
    ``∝ exp(−V/β)`` with respect to the uniform measure on the sphere as ``dt → 0`` (the normalisation
    supplies the Itô drift ``−β(d−1)θ``).

    Args:
        radius: ``r > 0``.
        dim: the axis or axes of one particle's coordinates.
    """

    def __init__(self, radius: float = 1.0, dim: int | tuple[int, ...] = -1) -> None:
        self.radius = check_positive("Sphere radius", radius)
        dims = (dim,) if isinstance(dim, int) and not isinstance(dim, bool) else dim
        if (
            not isinstance(dims, tuple)
            or not dims
            or not all(isinstance(k, int) and not isinstance(k, bool) for k in dims)
        ):
            raise TypeError(f"Sphere dim must be an int or a non-empty tuple of ints, got {dim!r}")
        self.dim = dims

    def check(self, x: torch.Tensor) -> None:
        if any(not -x.dim() <= k < x.dim() for k in self.dim):
            raise ValueError(
                f"Sphere dim={self.dim} is out of range for a tensor of shape {tuple(x.shape)}: "
                f"dim names the axes of one particle's coordinates"
            )

    def project_(self, x: torch.Tensor) -> torch.Tensor:
        norm = torch.linalg.vector_norm(x, dim=self.dim, keepdim=True)  # (…, 1, …)
        return x.mul_(self.radius / norm.clamp_min_(torch.finfo(x.dtype).tiny))

    def __repr__(self) -> str:
        return f"Sphere(radius={self.radius}, dim={self.dim if len(self.dim) > 1 else self.dim[0]})"
