"""Projections ``Π`` applied after every step: ``θ_i ← Π(θ_i − η·∇_i + sqrt(2β_t η)·ξ_i)``.

A projection is a callable that maps a state ``(B, M, d)`` (or any tensor whose last axis is a
particle's coordinates) to its projection, in place, and returns it.
"""

from __future__ import annotations

import torch

from ._checks import check_positive

__all__ = ["Projection", "Box", "Sphere"]


class Projection:
    """Base class: ``project_(x)`` projects ``x`` in place and returns it; calling the object does the same."""

    def project_(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.project_(x)


class Box(Projection):
    """Clip every coordinate to ``[−A, A]`` (the Euclidean projection onto the box)."""

    def __init__(self, A: float) -> None:
        self.A = check_positive("A", A)

    def project_(self, x: torch.Tensor) -> torch.Tensor:
        return x.clamp_(-self.A, self.A)

    def __repr__(self) -> str:
        return f"Box(A={self.A})"


class Sphere(Projection):
    """Renormalise each particle onto the sphere ``|θ_i| = radius`` (norm over the last axis).

    With this projection after an Euler–Maruyama step, ``x + b dt + sqrt(2β dt) ξ`` then ``x/|x|`` is the
    standard projected scheme for Langevin dynamics on the sphere ``S^{d−1}``: its invariant law converges
    to ``∝ exp(−V/β)`` with respect to the uniform measure on the sphere as ``dt → 0`` (the normalisation
    supplies the Itô drift ``−β(d−1)θ``).
    """

    def __init__(self, radius: float = 1.0) -> None:
        self.radius = check_positive("radius", radius)

    def project_(self, x: torch.Tensor) -> torch.Tensor:
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)  # (..., 1)
        return x.mul_(self.radius / norm.clamp_min_(torch.finfo(x.dtype).tiny))

    def __repr__(self) -> str:
        return f"Sphere(radius={self.radius})"
