"""Schedules for the temperature β_t and the step size η_t.

A schedule is a plain callable of one number, the *clock* ``s``: the step count in
:class:`meanfield.optim.Langevin`, the time ``t`` of a particle system in :func:`meanfield.simulate`.
Every schedule runs from ``start`` at ``s = 0`` to ``end`` at ``s = T`` and stays at ``end`` afterwards
(``s`` is clamped to ``[0, T]``). Any callable ``s -> float`` can be used where a schedule is asked for.

Example:
    >>> from meanfield.schedules import Cosine
    >>> beta = Cosine(start=1.0, end=0.01, T=1000)
    >>> beta(0), round(beta(500), 3), beta(1000)
    (1.0, 0.505, 0.01)
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ._checks import check_finite, check_positive

__all__ = ["Schedule", "Constant", "Cosine", "Linear", "Exponential", "Step", "as_schedule"]

Schedule = Callable[[float], float]


def _check_horizon(T: float) -> float:
    return check_positive("T (the length of the schedule)", T)


@dataclass(frozen=True)
class Constant:
    """``λ_s = value`` for every ``s``."""

    value: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", check_finite("value", self.value))

    def __call__(self, s: float) -> float:
        return self.value


@dataclass(frozen=True)
class _Anneal:
    """A schedule from ``start`` at ``s = 0`` to ``end`` at ``s = T``, constant outside ``[0, T]``."""

    start: float
    end: float
    T: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", check_finite("start", self.start))
        object.__setattr__(self, "end", check_finite("end", self.end))
        object.__setattr__(self, "T", _check_horizon(self.T))

    def _progress(self, s: float) -> float:
        """``u = clamp(s, 0, T)/T`` in ``[0, 1]``."""
        return min(max(float(s), 0.0), self.T) / self.T


class Cosine(_Anneal):
    """Cosine annealing ``λ_s = λ_end + ½(λ_start − λ_end)(1 + cos(π s/T))`` for ``0 ≤ s ≤ T``.

    With ``start = λ_max`` and ``end = λ_min`` this is the usual ``λ_max → λ_min`` anneal.
    """

    def __call__(self, s: float) -> float:
        return self.end + 0.5 * (self.start - self.end) * (1.0 + math.cos(math.pi * self._progress(s)))


class Linear(_Anneal):
    """Linear interpolation ``λ_s = λ_start + (λ_end − λ_start)·s/T`` for ``0 ≤ s ≤ T``."""

    def __call__(self, s: float) -> float:
        return self.start + (self.end - self.start) * self._progress(s)


class Exponential(_Anneal):
    """Geometric interpolation ``λ_s = λ_start·(λ_end/λ_start)^(s/T)`` for ``0 ≤ s ≤ T``.

    Both ends must be > 0 (the schedule decays or grows by a constant factor per unit of ``s``).
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("start", "end"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Exponential schedule needs {name} > 0, got {getattr(self, name)}")

    def __call__(self, s: float) -> float:
        return self.start * (self.end / self.start) ** self._progress(s)


@dataclass(frozen=True)
class Step:
    """Piecewise constant: ``λ_s = values[k]`` where ``k`` is the number of ``boundaries`` ≤ ``s``.

    Args:
        values: ``len(boundaries) + 1`` levels.
        boundaries: increasing clock values where the level changes.
    """

    values: Sequence[float]
    boundaries: Sequence[float]

    def __post_init__(self) -> None:
        values = tuple(check_finite("values[i]", v) for v in self.values)
        boundaries = tuple(check_finite("boundaries[i]", b) for b in self.boundaries)
        if len(values) != len(boundaries) + 1:
            raise ValueError(
                f"Step needs len(values) == len(boundaries) + 1, got {len(values)} values "
                f"and {len(boundaries)} boundaries"
            )
        if any(b1 <= b0 for b0, b1 in zip(boundaries, boundaries[1:])):
            raise ValueError(f"Step boundaries must be strictly increasing, got {boundaries}")
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "boundaries", boundaries)

    def __call__(self, s: float) -> float:
        return self.values[bisect.bisect_right(self.boundaries, float(s))]


def as_schedule(value: float | Schedule, name: str) -> Schedule:
    """Return ``value`` as a schedule: a number becomes :class:`Constant`, a callable is kept.

    Raises:
        TypeError: if ``value`` is neither a real number nor a callable.
    """
    if callable(value):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"{name} must be a number or a schedule (a callable of the step), got {type(value).__name__}"
        )
    return Constant(value)
