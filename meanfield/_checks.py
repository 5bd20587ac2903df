"""Argument checks shared by the package: each raises a ``ValueError``/``TypeError`` that names the argument,
what it got and what is allowed."""

from __future__ import annotations

import math

import torch

__all__ = [
    "check_finite",
    "check_positive",
    "check_nonnegative",
    "check_finite_tensor",
    "check_rank",
    "check_int",
]


def _real(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        and not (torch.is_tensor(value) and value.numel() == 1)
    ):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def check_finite(name: str, value: object) -> float:
    """Return ``float(value)``; raise unless it is a finite real number."""
    return _real(name, value)


def check_positive(name: str, value: object) -> float:
    """Return ``float(value)``; raise unless it is a finite number ``> 0``."""
    value = _real(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


def check_nonnegative(name: str, value: object) -> float:
    r"""Return ``float(value)``; raise unless it is a finite number $\ge 0$."""
    value = _real(name, value)
    if value < 0:
        raise ValueError(f"{name} must be ≥ 0, got {value}")
    return value


def check_int(name: str, value: object, minimum: int = 1) -> int:
    r"""Return ``value``; raise unless it is an integer $\ge \text{ minimum }$."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be ≥ {minimum}, got {value}")
    return value


def check_finite_tensor(name: str, x: torch.Tensor) -> torch.Tensor:
    """Raise unless ``x`` is a floating-point tensor with only finite entries (no NaN, no ±Inf)."""
    if not torch.is_tensor(x):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    finite = torch.isfinite(x)
    if not bool(finite.all()):
        bad = (~finite).nonzero()[0].tolist()
        raise ValueError(
            f"{name} has {int((~finite).sum())} non-finite entries (NaN or Inf), the first at index {tuple(bad)}"
        )
    return x


def check_rank(name: str, x: torch.Tensor, rank: int, layout: str) -> torch.Tensor:
    """Raise unless ``x`` is a tensor with ``rank`` dimensions; ``layout`` names them, e.g. ``"(B, M, d)"``."""
    if not torch.is_tensor(x):
        raise TypeError(f"{name} must be a torch.Tensor of shape {layout}, got {type(x).__name__}")
    if x.dim() != rank:
        raise ValueError(f"{name} must have shape {layout} ({rank} dimensions), got shape {tuple(x.shape)}")
    return x
