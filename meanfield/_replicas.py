r"""Per-replica parameters: a number, or one value per replica of a state ``(B, M, d)``.

Every parameter of a potential, an interaction, a system or a temperature is either a plain number (used
as before, the same numbers bit for bit) or one value per replica: a tensor (or array, or sequence) of
shape ``(B,)``, or one that broadcasts to ``(B, 1, 1)`` as given, i.e. ``(B, 1, 1)``. Such values are kept
as a float64 tensor of shape ``(B,)`` (what a user reads back) and handed to the arithmetic as
``(B, 1, 1)`` in the state's dtype and device ([`at`][meanfield._replicas.at]), so that $a \cdot x$ scales replica ``b`` by
``a[b]``. A tensor holding a single number counts as a number.

This module is a foundation: it imports nothing of meanfield.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch

__all__ = ["Param", "per_replica", "at", "check_replicas", "ALLOWED"]

Param = float | torch.Tensor
"""A number, or per-replica values: a float64 tensor of shape ``(B,)``."""

ALLOWED = "a number or one value per replica: a tensor of shape (B,) or (B, 1, 1)"


def _shape_ok(shape: torch.Size) -> bool:
    """``(B,)``, or a shape that broadcasts to ``(B, 1, 1)`` with its replica axis first: ``(B, 1, 1)``."""
    return len(shape) == 1 or (len(shape) == 3 and shape[1] == 1 and shape[2] == 1)


def per_replica(
    name: str,
    value: object,
    *,
    minimum: float | None = None,
    strict: bool = False,
) -> Param:
    r"""Check a parameter: ``float(value)`` for a number, a float64 ``(B,)`` tensor for per-replica values.

    Args:
        name: the argument's name for the error message (e.g. ``"kappa"``).
        value: a real number (``int``, ``float``, a numpy scalar, a one-element tensor), or per-replica
            values: a tensor, numpy array or sequence of numbers of shape ``(B,)`` or ``(B, 1, 1)``.
        minimum: the smallest value allowed (``None``: any finite value).
        strict: require ``value > minimum`` instead of $\ge$.

    Returns:
        ``float`` for a number (bit for bit the number given), or a detached float64 tensor of shape
        ``(B,)`` on the value's device.

    Raises:
        TypeError: a bool, a string, a complex or boolean tensor, anything that is not a number.
        ValueError: a shape other than ``(B,)``/``(B, 1, 1)``, a NaN/±Inf or out-of-range entry (the message
            names the first bad replica).
    """
    if isinstance(value, bool) or isinstance(value, str):
        raise TypeError(f"{name} must be {ALLOWED}, got {type(value).__name__}")
    if isinstance(value, numbers.Real):  # int, float, numpy integers and floats
        return _check_number(name, float(value), minimum, strict)
    if not torch.is_tensor(value):
        if hasattr(value, "__array__") or isinstance(value, Sequence):
            try:  # a list of Python floats is read in float64 (torch's default float32 would round it)
                value = torch.as_tensor(value, dtype=None if hasattr(value, "__array__") else torch.float64)
            except (TypeError, ValueError, RuntimeError):
                raise TypeError(f"{name} must be {ALLOWED}, got {type(value).__name__}") from None
        else:
            raise TypeError(f"{name} must be {ALLOWED}, got {type(value).__name__}")
    if value.dtype == torch.bool or value.is_complex():
        raise TypeError(f"{name} must be {ALLOWED} of real numbers, got a tensor of dtype {value.dtype}")
    if value.numel() == 1:
        return _check_number(name, float(value), minimum, strict)
    if not _shape_ok(value.shape):
        raise ValueError(f"{name} must be {ALLOWED}; got a tensor of shape {tuple(value.shape)}")
    values = value.detach().to(torch.float64).reshape(-1)  # (B,)
    if values.numel() == 0:
        raise ValueError(f"{name} must be {ALLOWED}; got an empty tensor of shape {tuple(value.shape)}")
    bad = ~torch.isfinite(values)  # (B,)
    if minimum is not None:
        bad |= values <= minimum if strict else values < minimum
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        allowed = "finite" if minimum is None else f"finite and {'>' if strict else '≥'} {minimum:g}"
        raise ValueError(
            f"{name}[{i}] = {float(values[i]):.8g} (replica {i} of {values.numel()}): every value must be {allowed}"
        )
    return values


def _check_number(name: str, value: float, minimum: float | None, strict: bool) -> float:
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if minimum is not None and (value <= minimum if strict else value < minimum):
        raise ValueError(f"{name} must be {'>' if strict else '≥'} {minimum:g}, got {value}")
    return value


def check_replicas(name: str, value: Param, B: int) -> None:
    """Raise unless ``value`` is a number or holds exactly ``B`` values (the replicas of the state)."""
    if torch.is_tensor(value) and value.shape[0] != B:
        raise ValueError(
            f"{name} has {value.shape[0]} per-replica values, but the state has B = {B} replicas "
            f"(x has shape (B, M, d)): give one value per replica, or a number for all"
        )


def at(value: Param, x: torch.Tensor, name: str = "a per-replica parameter", ndim: int = 3) -> Param:
    """``value`` ready to multiply a tensor of ``x``'s replicas: a number as it is, per-replica values as a
    ``(B, 1, …, 1)`` tensor with ``ndim`` axes in ``x``'s dtype and device (``ndim = 3`` against ``(B, M, d)``,
    ``2`` against ``(B, M)``).

    Raises:
        ValueError: the value holds a number of replicas other than ``x.shape[0]``.
    """
    if not torch.is_tensor(value):
        return value
    check_replicas(name, value, x.shape[0])
    return value.to(dtype=x.dtype, device=x.device).view(-1, *(1,) * (ndim - 1))  # (B, 1, …, 1)
