"""Schedules for the temperature β_t and the step size η_t.

A schedule is a plain callable of one number, the *clock* ``s``: the step count in
[`meanfield.optim.Langevin`][meanfield.optim.langevin.Langevin], the time ``t`` of a particle system in [`meanfield.simulate`][meanfield.stepping.simulate.simulate].
Every schedule runs from ``start`` at ``s = 0`` to ``end`` at ``s = T`` and stays at ``end`` afterwards
(``s`` is clamped to ``[0, T]``). Any callable ``s -> float`` can be used where a schedule is asked for.

**Schedules are data.** Every schedule class here has ``to_dict()`` (plain numbers, lists and a ``"kind"``
naming it in [`SCHEDULES`][meanfield.drift.schedules.SCHEDULES]) and [`schedule_from_dict`][meanfield.drift.schedules.schedule_from_dict] rebuilds it, so a β schedule can live in a
TOML config and in a checkpoint read by ``torch.load(weights_only=True)``. [`schedule_to_data`][meanfield.drift.schedules.schedule_to_data] turns
a number or a schedule into such data and refuses an arbitrary callable (a lambda has no data form).

**Per-replica levels.** Every level (``value``, ``start``, ``end``, each of ``values``) is a number or one
value per replica, a tensor of shape ``(B,)``; a schedule with per-replica levels returns a float64 ``(B,)``
tensor (replica ``b`` follows the schedule of its own levels, on the shared clock), which
[`meanfield.MeanFieldLangevin`][meanfield.drift.systems.MeanFieldLangevin] takes as a per-replica temperature. Its ``to_dict()`` writes such a
level as a list, which [`schedule_from_dict`][meanfield.drift.schedules.schedule_from_dict] reads back.

Example:
    >>> from meanfield.drift.schedules import Cosine
    >>> beta = Cosine(start=1.0, end=0.01, T=1000)
    >>> beta(0), round(beta(500), 3), beta(1000)
    (1.0, 0.505, 0.01)
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .._checks import check_finite, check_positive
from .._replicas import Param, per_replica

__all__ = [
    "Schedule",
    "Constant",
    "Cosine",
    "Linear",
    "Exponential",
    "Step",
    "SCHEDULES",
    "as_schedule",
    "schedule_from_dict",
    "schedule_to_data",
]

Schedule = Callable[[float], float]


def _level(name: str, value: object, minimum: float | None = None, strict: bool = False) -> Param:
    """A level: a number (``float``) or per-replica values (a float64 ``(B,)`` tensor)."""
    return per_replica(name, value, minimum=minimum, strict=strict)


def _data(value: Param) -> float | list[float]:
    """A level as plain data: a number, or the list of its per-replica values."""
    return value.tolist() if torch.is_tensor(value) else value


def _same(a: object, b: object) -> bool:
    """Equality of two schedules' data (per-replica levels compared as lists)."""
    return type(a) is type(b) and a.to_dict() == b.to_dict()


def _check_horizon(T: float) -> float:
    return check_positive("T (the length of the schedule)", T)


@dataclass(frozen=True)
class Constant:
    r"""$\lambda_s = \text{ value }$ for every ``s`` (a number, or per-replica values ``(B,)``)."""

    value: float | torch.Tensor

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", _level("value", self.value))

    def __call__(self, s: float) -> Param:
        return self.value

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "constant", "value": value}`` (see [`schedule_from_dict`][meanfield.drift.schedules.schedule_from_dict])."""
        return {"kind": "constant", "value": _data(self.value)}

    def __eq__(self, other: object) -> bool:
        return _same(self, other)

    def __hash__(self) -> int:
        return hash(repr(self.to_dict()))


@dataclass(frozen=True)
class _Anneal:
    """A schedule from ``start`` at ``s = 0`` to ``end`` at ``s = T``, constant outside ``[0, T]``."""

    start: float | torch.Tensor
    end: float | torch.Tensor
    T: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", _level("start", self.start))
        object.__setattr__(self, "end", _level("end", self.end))
        object.__setattr__(self, "T", _check_horizon(self.T))
        sizes = {v.shape[0] for v in (self.start, self.end) if torch.is_tensor(v)}
        if len(sizes) > 1:
            raise ValueError(f"start and end hold different numbers of per-replica values: {sorted(sizes)}")

    def __eq__(self, other: object) -> bool:
        return _same(self, other)

    def __hash__(self) -> int:
        return hash(repr(self.to_dict()))

    def _progress(self, s: float) -> float:
        """``u = clamp(s, 0, T)/T`` in ``[0, 1]``."""
        return min(max(float(s), 0.0), self.T) / self.T

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": <name>, "start": …, "end": …, "T": …}`` (see [`schedule_from_dict`][meanfield.drift.schedules.schedule_from_dict])."""
        return {"kind": _kind_of(type(self)), "start": _data(self.start), "end": _data(self.end), "T": self.T}


class Cosine(_Anneal):
    r"""Cosine annealing $\lambda_s = \lambda_{\mathrm{end}} + \tfrac12(\lambda_{\mathrm{start}} - \lambda_{\mathrm{end}})(1 + \cos(\pi s/T))$ for $0 \le s \le T$.

    With $\text{ start } = \lambda_{\max}$ and $\text{ end } = \lambda_{\min}$ this is the usual $\lambda_{\max} \to \lambda_{\min}$ anneal.
    """

    def __call__(self, s: float) -> float:
        return self.end + 0.5 * (self.start - self.end) * (1.0 + math.cos(math.pi * self._progress(s)))


class Linear(_Anneal):
    r"""Linear interpolation ``λ_s = λ_start + (λ_end − λ_start)·s/T`` for $0 \le s \le T$."""

    def __call__(self, s: float) -> float:
        u = self._progress(s)
        return (1.0 - u) * self.start + u * self.end  # exactly start at u = 0 and end at u = 1


class Exponential(_Anneal):
    r"""Geometric interpolation ``λ_s = λ_start·(λ_end/λ_start)^(s/T)`` for $0 \le s \le T$.

    Both ends must be > 0 (the schedule decays or grows by a constant factor per unit of ``s``).
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("start", "end"):
            value = getattr(self, name)
            if torch.is_tensor(value) and bool((value <= 0).any()):
                i = int((value <= 0).nonzero()[0])
                raise ValueError(
                    f"Exponential schedule needs {name} > 0, got {name}[{i}] = {float(value[i])}"
                )
            if not torch.is_tensor(value) and value <= 0:
                raise ValueError(f"Exponential schedule needs {name} > 0, got {value}")

    def __call__(self, s: float) -> float:
        u = self._progress(s)
        return self.end if u >= 1.0 else self.start * (self.end / self.start) ** u  # exactly end at s ≥ T


@dataclass(frozen=True)
class Step:
    r"""Piecewise constant: $\lambda_s = \mathrm{values}[k]$ where ``k`` is the number of ``boundaries`` ≤ ``s``.

    Args:
        values: ``len(boundaries) + 1`` levels.
        boundaries: increasing clock values where the level changes.
    """

    values: Sequence[float]
    boundaries: Sequence[float]

    def __post_init__(self) -> None:
        values = tuple(_level(f"values[{i}]", v) for i, v in enumerate(self.values))
        sizes = {v.shape[0] for v in values if torch.is_tensor(v)}
        if len(sizes) > 1:
            raise ValueError(f"Step's values hold different numbers of per-replica values: {sorted(sizes)}")
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

    def __call__(self, s: float) -> Param:
        return self.values[bisect.bisect_right(self.boundaries, float(s))]

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "step", "values": [...], "boundaries": [...]}`` (see [`schedule_from_dict`][meanfield.drift.schedules.schedule_from_dict])."""
        return {
            "kind": "step",
            "values": [_data(v) for v in self.values],
            "boundaries": list(self.boundaries),
        }

    def __eq__(self, other: object) -> bool:
        return _same(self, other)

    def __hash__(self) -> int:
        return hash(repr(self.to_dict()))


SCHEDULES: dict[str, type] = {
    "constant": Constant,
    "cosine": Cosine,
    "linear": Linear,
    "exponential": Exponential,
    "step": Step,
}
"""The schedule classes by the ``"kind"`` of their ``to_dict()``."""


def _kind_of(cls: type) -> str:
    return next(kind for kind, c in SCHEDULES.items() if c is cls)


def _fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def schedule_from_dict(data: Mapping[str, Any]) -> Schedule:
    """Rebuild a schedule from its ``to_dict()``: ``{"kind": <a key of SCHEDULES>, <its fields>}``.

    Example: ``schedule_from_dict({"kind": "cosine", "start": 1.0, "end": 0.001, "T": 1000.0})`` is
    ``Cosine(1.0, 0.001, 1000.0)``.

    Raises:
        TypeError: ``data`` is not a mapping.
        ValueError: no ``"kind"``, an unknown kind (the message lists [`SCHEDULES`][meanfield.drift.schedules.SCHEDULES]), a missing or
            extra field (the message lists the kind's fields), or a field value the schedule refuses.
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"a schedule's data must be a dict with a 'kind', got {type(data).__name__}")
    kind = data.get("kind")
    if kind not in SCHEDULES:
        raise ValueError(
            f"schedule data needs 'kind' in {sorted(SCHEDULES)}, got {kind!r} (in {dict(data)!r})"
        )
    cls = SCHEDULES[kind]
    fields = _fields(cls)
    given = set(data) - {"kind"}
    missing, extra = [f for f in fields if f not in given], sorted(given - set(fields))
    if missing or extra:
        raise ValueError(
            f"schedule data of kind {kind!r} needs exactly the fields {list(fields)}; "
            f"missing {missing}, unexpected {extra} (in {dict(data)!r})"
        )
    try:
        return cls(**{f: data[f] for f in fields})
    except (TypeError, ValueError) as error:
        raise ValueError(f"schedule data {dict(data)!r}: {error}") from None


def schedule_to_data(value: float | Schedule, name: str = "schedule") -> float | dict[str, Any]:
    """A number or a schedule as plain data: a number stays a ``float``, a schedule gives its ``to_dict()``.

    Args:
        value: a real number or a schedule of this module (anything with ``to_dict()``).
        name: the argument's name for the error message (e.g. ``"param group 0: beta"``).

    Raises:
        TypeError: ``value`` is another callable (a lambda, a function): it has no data form, so it can be
            neither written to a config nor read back by ``torch.load(weights_only=True)``.
    """
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a number or a schedule, got bool")
    if isinstance(value, (int, float)):
        return float(value)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    raise TypeError(
        f"{name} is {value!r}, which cannot be saved: only numbers and meanfield.drift.schedules objects "
        f"({', '.join(c.__name__ for c in SCHEDULES.values())}) can be saved as data, because a checkpoint "
        "is read back with torch.load(weights_only=True) and a config is TOML, neither of which can hold "
        "code. Use one of those schedules (or a Step schedule tabulating your function)."
    )


def as_schedule(value: float | Schedule | Mapping[str, Any], name: str) -> Schedule:
    """Return ``value`` as a schedule: a number becomes [`Constant`][meanfield.drift.schedules.Constant], a callable is kept, a dict (a
    schedule's ``to_dict()``) is rebuilt by [`schedule_from_dict`][meanfield.drift.schedules.schedule_from_dict].

    Raises:
        TypeError: if ``value`` is neither a real number, a callable nor a dict.
        ValueError: a dict that [`schedule_from_dict`][meanfield.drift.schedules.schedule_from_dict] refuses.
    """
    if callable(value):
        return value
    if isinstance(value, Mapping):
        try:
            return schedule_from_dict(value)
        except ValueError as error:
            raise ValueError(f"{name}: {error}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"{name} must be a number or a schedule (a callable of the step), got {type(value).__name__}"
        )
    return Constant(check_finite(name, value))
