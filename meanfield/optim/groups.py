r"""The options of a param group: data forms become objects, defaults resolve, bad values are refused.

A group of [`Langevin`][meanfield.optim.langevin.Langevin] is a ``torch.optim`` param-group dict with the keys of
``Langevin.__init__`` (``lr``, ``beta``, ``drift``, ``betas``, ``eps``, ``weight_decay``, ``noise``,
``n_particles``, ``mean_field_scaling``, ``noise_preconditioned``, ``projection``, ``temperature_convention``,
``noise_block``) plus its step count ``step`` and, for a sharded layer, ``particle_rows``. A group multiplies
its gradients by ``M`` ([`scale`][meanfield.optim.groups.scale]: the Wasserstein gradient $M\cdot\partial L/\partial \theta_i = \nabla(\delta F/\delta \rho)(\theta_i)$).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

import torch

from meanfield._checks import check_int, check_nonnegative, check_positive
from meanfield.drift.projections import Projection, projection_from_dict
from meanfield.drift.schedules import as_schedule, schedule_from_dict
from meanfield.optim.conventions import (
    DRIFTS,
    NOISY_BETAS,
    NOISY_EPS,
    PLAIN_BETAS,
    PLAIN_EPS,
    TEMPERATURE_CONVENTIONS,
)

__all__ = [
    "CheckedGroups",
    "CONFIG_KEYS",
    "scale",
    "noise_beta",
    "mean_field_beta",
    "not_gibbs",
    "momentum_with_noise",
    "normalise",
    "resolve_defaults",
    "check_group",
    "position",
    "beta_at",
    "beta_value",
    "check_floating",
]

CONFIG_KEYS = ("beta", "projection", "particle_rows")
"""Kept from the optimizer on ``load_state_dict`` (callables; a rank's own rows of a sharded layer, which
differ from those of the rank that saved the state)."""


def position(groups: list[dict[str, Any]], group: dict[str, Any], p: torch.Tensor) -> tuple[int, int]:
    """``(group index, parameter index in the group)`` of ``p``, for error messages."""
    gi = next(i for i, g in enumerate(groups) if g is group)
    return gi, next(k for k, q in enumerate(group["params"]) if q is p)


def scale(group: dict[str, Any]) -> float:
    """The factor ``M`` a group multiplies its gradients by (1 without the mean-field scaling)."""
    return float(group["n_particles"]) if group["mean_field_scaling"] else 1.0


def noise_beta(group: dict[str, Any], beta_t: float) -> float:
    r"""The temperature of the group's noise $\sqrt{2\beta\eta}\,\xi$ for its given $\beta_t$: $\beta_t$ itself, or for
    ``temperature_convention="loss"`` (the seeds' $\beta_s$ of $\exp(-L/\beta_s) = \exp(-sL/(s\beta_s))$) $s\cdot\beta_t$, $s$ the
    factor its gradients are multiplied by ([`scale`][meanfield.optim.groups.scale]: M, or 1 without the mean-field scaling)."""
    return beta_t * scale(group) if group.get("temperature_convention") == "loss" else beta_t


def mean_field_beta(group: dict[str, Any], beta_t: float, n_particles: int | None = None) -> float:
    r"""The temperature $\beta$ of the mean-field chain the group's noise realises for its given $\beta_t$.

    The group's step $\theta_i \leftarrow \theta_i - \mathrm{lr}(s\,\nabla_{\theta_i} L + \dots) + \sqrt{2\beta_g\,\mathrm{lr}}\,\xi_i$,
    $s$ its gradient factor ([`scale`][meanfield.optim.groups.scale]) and $\beta_g$ its noise's temperature
    ([`noise_beta`][meanfield.optim.groups.noise_beta]), has the law $\propto\exp(-sL/\beta_g)
    = \exp(-M L/\beta)$ with $\beta = \beta_g M / s$: $\beta_t$ itself with the mean-field scaling and the
    ``"gradient"`` convention, $M\beta_t$ for the ``"loss"`` convention or without the scaling. ``n_particles``
    is the $M$ of the law (default: the group's; a layer's own $M$ where its particles sit in a group built
    by hand)."""
    M = group["n_particles"] if n_particles is None else n_particles
    return noise_beta(group, beta_t) * float(M) / scale(group)


def not_gibbs(group: dict[str, Any]) -> bool:
    r"""Whether ``group`` has noise that does not follow its Adam preconditioner (not Gibbs at $\beta$)."""
    return group["noise"] and group["drift"] == "adam" and not group["noise_preconditioned"]


def momentum_with_noise(group: dict[str, Any]) -> bool:
    """Whether ``group`` has noise and an Adam drift with momentum (a biased stationary law)."""
    return group["noise"] and group["drift"] == "adam" and group["betas"][0] > 0


def normalise(group: dict[str, Any], where: str) -> None:
    """A β schedule or a projection given as data (a dict: a config or a checkpoint) becomes the object."""
    if isinstance(group.get("beta"), Mapping):
        try:
            group["beta"] = schedule_from_dict(group["beta"])
        except ValueError as error:
            raise ValueError(f"{where}: beta: {error}") from None
    if isinstance(group.get("projection"), Mapping):
        try:
            group["projection"] = projection_from_dict(group["projection"])
        except ValueError as error:
            raise ValueError(f"{where}: projection: {error}") from None


def resolve_defaults(group: dict[str, Any]) -> None:
    """``betas``/``eps`` left unset (``None``) take the defaults of a group with or without noise."""
    if group["betas"] is None:
        group["betas"] = NOISY_BETAS if group["noise"] else PLAIN_BETAS
    if group["eps"] is None:
        group["eps"] = NOISY_EPS if group["noise"] else PLAIN_EPS


def check_group(group: dict[str, Any], where: str) -> None:
    """Raise a ``ValueError``/``TypeError`` naming the option of ``group`` that is not allowed."""
    group["lr"] = check_positive(f"{where}: lr", group["lr"])
    beta = group["beta"]
    as_schedule(beta, f"{where}: beta")  # TypeError unless a number or a callable
    if not callable(beta):
        check_nonnegative(f"{where}: beta (the temperature)", beta)
    if not isinstance(group["drift"], str):
        raise TypeError(
            f"{where}: drift must be a string, one of {DRIFTS}, got {type(group['drift']).__name__}"
        )
    if group["drift"] not in DRIFTS:
        raise ValueError(f"{where}: drift must be one of {DRIFTS}, got {group['drift']!r}")
    betas = group["betas"]
    if betas is not None:
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"{where}: betas must be None or a pair (β1, β2), got {betas!r}")
        for name, value in zip(("β1", "β2"), betas):
            value = check_nonnegative(f"{where}: betas {name}", value)
            if value >= 1:
                raise ValueError(f"{where}: betas {name} must be in [0, 1), got {value}")
    if group["eps"] is not None:
        check_positive(f"{where}: eps", group["eps"])
    convention = group["temperature_convention"]
    if convention not in TEMPERATURE_CONVENTIONS:
        raise ValueError(
            f"{where}: temperature_convention must be one of {TEMPERATURE_CONVENTIONS}, got {convention!r}"
        )
    group["weight_decay"] = check_nonnegative(f"{where}: weight_decay", group["weight_decay"])
    for name in ("noise", "mean_field_scaling", "noise_preconditioned"):
        if not isinstance(group[name], bool):
            raise TypeError(f"{where}: {name} must be a bool, got {type(group[name]).__name__}")
    check_int(f"{where}: n_particles", group["n_particles"])
    check_int(f"{where}: noise_block", group["noise_block"], minimum=0)
    projection = group["projection"]
    if projection is not None and not isinstance(projection, Projection):
        raise TypeError(
            f"{where}: projection must be None or a Projection (Clip, Sphere, LayerProjection), "
            f"got {type(projection).__name__}"
        )
    step = group["step"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"{where}: step (the group's step count) must be an int ≥ 0, got {step!r}")


def check_floating(group: dict[str, Any], where: str) -> None:
    """Raise a ``TypeError`` unless every parameter of ``group`` is a floating-point tensor."""
    for p in group["params"]:
        if not p.is_floating_point():
            raise TypeError(f"{where}: parameters must be floating-point tensors, got dtype {p.dtype}")


def beta_value(group: dict[str, Any], gi: int) -> float:
    r"""The temperature $\beta_t$ of group ``gi`` at its step ``t``: its schedule's value, or the constant.

    Raises:
        TypeError: the schedule returned something that is not a number.
        ValueError: $\beta_t$ is negative or not finite.
    """
    k = group["step"]
    beta = group["beta"]
    value = beta(k) if callable(beta) else beta
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"param group {gi}: the β schedule returned {value!r} at step {k}; it must return a number"
        ) from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(
            f"param group {gi}: the temperature β_t must be a finite number ≥ 0, but the β schedule "
            f"returned {value} at step {k}"
        )
    return value


def beta_at(group: dict[str, Any], gi: int) -> float:
    r"""[`beta_value`][meanfield.optim.groups.beta_value], for a Langevin step whose noise variance is $2\cdot \beta_t\cdot\operatorname{lr}$.

    Raises:
        TypeError, ValueError: as [`beta_value`][meanfield.optim.groups.beta_value]; also ValueError when $2\cdot \beta_t\cdot\operatorname{lr}$ overflows.
    """
    value = beta_value(group, gi)
    if not math.isfinite(2.0 * noise_beta(group, value) * group["lr"]):
        loss = group.get("temperature_convention") == "loss"
        what = f"2·M·beta·lr = 2·{scale(group):g}·{value:g}" if loss else f"2·beta·lr = 2·{value:g}"
        raise ValueError(
            f"param group {gi}: the noise variance {what}·{group['lr']:g} overflows at step "
            f"{group['step']}; lower beta or lr"
        )
    return value


class CheckedGroups:
    """Param groups whose options are checked as they are added, with the two warnings a group's options may
    call for, each said once per optimizer (a mixin of [`Langevin`][meanfield.optim.langevin.Langevin], before
    ``torch.optim.Optimizer``). The optimizer sets ``_constructed`` once its constructor's groups are added (it
    warns for those itself, at the caller's line) and the two ``_warned_*`` flags; ``_layout = None`` makes it
    rebuild its buckets."""

    param_groups: list[dict[str, Any]]
    _constructed: bool
    _warned_not_gibbs: bool
    _warned_momentum: bool
    _layout: Any

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a param group (``torch.optim.Optimizer.add_param_group``), checking its options."""
        super().add_param_group(param_group)  # type: ignore[misc]
        group = self.param_groups[-1]
        where = f"param group {len(self.param_groups) - 1}"
        try:
            normalise(group, where)
            check_group(group, where)
            resolve_defaults(group)
            check_floating(group, where)
            if group["projection"] is not None:
                for p in group["params"]:
                    group["projection"].check(p)
        except (TypeError, ValueError):
            self.param_groups.pop()
            raise
        if self._constructed and not_gibbs(group):
            self._warn_not_gibbs(stacklevel=2)
        if self._constructed and momentum_with_noise(group):
            self._warn_momentum(stacklevel=2)
        self._layout = None

    def _warn_not_gibbs(self, stacklevel: int) -> None:
        if not self._warned_not_gibbs:
            self._warned_not_gibbs = True
            warnings.warn(
                "Langevin: an Adam drift with noise_preconditioned=False gets the noise sqrt(2·β·lr)·ξ while its "
                "drift is preconditioned by P = diag(η_eff/lr): the chain no longer targets the Gibbs law "
                "exp(−F/β) (for a scalar P = p·I it targets exp(−p·F/β); otherwise no Gibbs law). Use "
                "noise_preconditioned=True for the temperature contract.",
                UserWarning,
                stacklevel=stacklevel + 1,
            )

    def _warn_momentum(self, stacklevel: int) -> None:
        if not self._warned_momentum:
            self._warned_momentum = True
            warnings.warn(
                "Langevin: a group with noise has an Adam drift with momentum β1 > 0: the chain's stationary law "
                "is biased beyond the Euler–Maruyama O(η) bias (on F = a/2·θ², Var θ = β/a·(1 + "
                "(η_eff·a/2)(1 + β1)/(1 − β1) + …), see momentum_variance_factor). Leave betas unset (β1 = 0 "
                "for groups with noise: the pSGLD drift) for the Gibbs law.",
                UserWarning,
                stacklevel=stacklevel + 1,
            )
