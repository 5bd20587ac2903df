r"""The kinetic Langevin optimizer: SGHMC-type steps that are the BAOAB splitting of kinetic Langevin dynamics.

For every parameter $\theta$ of a param group (step ``h = lr``, friction $\gamma$, temperature $\beta_t$, ``M``
particles) with its velocity ``v`` (the optimizer's state, zero at the start), one [`KineticLangevin.step`][meanfield.optim.kinetic.KineticLangevin.step]
after the gradient $g = M\cdot\partial L/\partial \theta + \lambda \theta$ was computed at $\theta$ is

    v ← v − h·g                                     (B(h/2) of the last step and B(h/2) of this one)
    θ ← θ + (h/2)·v                                 (A(h/2))
    v ← c·v + sqrt(β_t·(1 − c²))·ξ,   c = e^{−γh}   (O(h), exact: the noise the friction requires)
    θ ← Π(θ + (h/2)·v)                              (A(h/2), then the projection)

so the parameters follow the positions of the BAOAB chain ([`meanfield.stepping.solvers.splittings`][meanfield.stepping.solvers.splittings]) for
$d\theta = v dt, dv = -\nabla F(\theta) dt - \gamma v dt + \sqrt{2\gamma \beta} dW$ (unit mass, $F = M\cdot L + \lambda/2\|\theta\|^2$), started at
$(\theta_0, v_0 = -(h/2)\nabla F(\theta_0))$; the stored ``v`` is BAOAB's velocity before its last half kick. The target law
is $\propto \exp(-(F(\theta) + \|v\|^2/2)/\beta)$, the θ-marginal the same Gibbs law $\propto \exp(-F/\beta)$ as
[`Langevin`][meanfield.optim.langevin.Langevin]'s, with a bias O(h²) instead of O(h); on $F = a/2\|\theta\|^2$ the θ-law is
exact at every stable step ($\operatorname{Var} \theta = \beta/a$ for $h^2a < 4$) and the stored velocity has $\operatorname{Var} v = \beta$
exactly (``theory/kinetic_optimizer.py`` checks both through this optimizer).

**Momentum SGD.** At $\beta = 0$ the step is heavy-ball momentum SGD, exactly: with $b = -v'/h$, $v' = v - h\cdot g$ the
velocity after the step's kick (the stored ``v`` is the one before it), it is
$b \leftarrow \mu\cdot b + g, \theta \leftarrow \theta - \eta\cdot b$ with $\mu = e^{-\gamma h}$ and $\eta = h^2(1 + \mu)/2$, i.e. ``torch.optim.SGD(lr=η,
momentum=μ)`` (tested). Conversely SGD with momentum μ and learning rate η is this optimizer with
$h = \sqrt{2\eta/(1 + \mu)}$ and $\gamma = -\ln(\mu)/h$; $\beta > 0$ adds the noise $\sqrt{\beta(1 - \mu^2)}\cdot \xi$ to the velocity
that this friction requires (fluctuation–dissipation), where [`Langevin`][meanfield.optim.langevin.Langevin] with Adam's
$\beta_1 > 0$ adds $\sqrt{2\beta \eta}\xi$ to θ while an exponential average of gradients drives it: that chain is not a
discretised kinetic Langevin dynamics and its stationary variance is biased by the factor of
[`momentum_variance_factor`][meanfield.optim.conventions.momentum_variance_factor] (×19 the Euler–Maruyama bias at β1 = 0.9).

**Mean-field scaling, temperature conventions, projections** are those of [`Langevin`][meanfield.optim.langevin.Langevin]:
a group with ``n_particles = M`` multiplies its gradients by M (the Wasserstein gradient), ``"loss"``
temperatures are multiplied by the same factor (M, or 1 with ``mean_field_scaling=False``), and $\Pi$ is applied to θ after every step (the velocity is left as it
is: on a sphere it is not projected onto the tangent space).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from meanfield._checks import check_int, check_nonnegative, check_positive
from meanfield.drift.projections import Projection
from meanfield.drift.schedules import Schedule, as_schedule
from meanfield.optim import foreach
from meanfield.optim.checkpoints import as_data, own_copy
from meanfield.optim.conventions import TEMPERATURE_CONVENTIONS
from meanfield.optim.direct import DirectStep
from meanfield.optim.gradients import norms_and_sum
from meanfield.optim.groups import beta_value, check_floating, noise_beta, normalise, scale
from meanfield.seeds import warn_if_global_seed

__all__ = ["KineticLangevin"]


def _check_group(group: dict[str, Any], where: str) -> None:
    group["lr"] = check_positive(f"{where}: lr (the step h)", group["lr"])
    group["friction"] = check_nonnegative(f"{where}: friction (γ)", group["friction"])
    beta = group["beta"]
    as_schedule(beta, f"{where}: beta")
    if not callable(beta):
        check_nonnegative(f"{where}: beta (the temperature)", beta)
    group["weight_decay"] = check_nonnegative(f"{where}: weight_decay", group["weight_decay"])
    check_int(f"{where}: n_particles", group["n_particles"])
    if not isinstance(group["mean_field_scaling"], bool):
        raise TypeError(
            f"{where}: mean_field_scaling must be a bool, got {type(group['mean_field_scaling']).__name__}"
        )
    if group["temperature_convention"] not in TEMPERATURE_CONVENTIONS:
        raise ValueError(
            f"{where}: temperature_convention must be one of {TEMPERATURE_CONVENTIONS}, "
            f"got {group['temperature_convention']!r}"
        )
    if group["projection"] is not None and not isinstance(group["projection"], Projection):
        raise TypeError(
            f"{where}: projection must be None or a Projection (Clip, Sphere), got {type(group['projection']).__name__}"
        )


def _beta_at(group: dict[str, Any], gi: int) -> float:
    r"""$\beta_t$ of group ``gi`` at its step count, in the mean-field convention (for ``"loss"``, × the factor
    its gradients are multiplied by: ``M``, or 1 with ``mean_field_scaling=False``, as in ``Langevin``)."""
    return noise_beta(group, beta_value(group, gi))


class KineticLangevin(DirectStep, torch.optim.Optimizer):
    r"""Kinetic (underdamped) mean-field Langevin dynamics as a ``torch.optim.Optimizer`` (BAOAB steps).

    One step per group (see the module docstring): $v \leftarrow v - h\cdot g$, $\theta \leftarrow \theta + (h/2)v$,
    $v \leftarrow e^{-\gamma h}v + \sqrt{\beta_t(1 - e^{-2\gamma h})}\cdot \xi$, $\theta \leftarrow \Pi(\theta + (h/2)v)$, with $g = M\cdot\partial L/\partial \theta + \lambda \theta$.

    Args:
        params: parameters or param-group dicts.
        lr: the time step ``h > 0``.
        friction: $\gamma \ge 0$ ($\mu = e^{-\gamma h}$ is the momentum of the equivalent heavy-ball SGD).
        beta: temperature $\beta \ge 0$, a number or a schedule $\text{ step } -> \beta$ (evaluated at the group's step count).
        weight_decay: $\lambda \ge 0$ (an L2 term $\lambda/2\|\theta\|^2$ in ``F``).
        n_particles: $M \ge 1$: the gradients are multiplied by M (the mean-field scaling).
        mean_field_scaling: whether to apply the factor M.
        temperature_convention: ``"mean_field"`` (β of $\exp(-M\cdot L/\beta)$) or ``"loss"`` ($\beta_s$ of
            $\exp(-L/\beta_s)$: the noise uses $M\cdot \beta_s$).
        projection: ``None`` or a [`Projection`][meanfield.drift.projections.Projection] applied to θ after every step.
        generator: the ``torch.Generator`` of the noise (on the parameters' device).
        seed: seed of the optimizer's own generator when ``generator`` is not given (as for ``Langevin``: a seed
            equal to ``torch.initial_seed()`` warns, [`warn_if_global_seed`][meanfield.seeds.warn_if_global_seed]).
        check_every: check the gradients for NaN/Inf entries (one reduction and one synchronisation per group)
            at a group's steps ``0, k, 2k, …`` (``k = check_every``); ``1`` (default): every step, before any
            parameter changes; ``0``: never.

    Raises:
        ValueError, TypeError: a bad option (negative friction or temperature, $\operatorname{lr} \le 0$, an unknown
            convention), and in [`step`][meanfield.optim.kinetic.KineticLangevin.step] a non-finite gradient (nothing is changed then).

    Example:
        >>> theta = torch.nn.Parameter(torch.zeros(1000, dtype=torch.float64))
        >>> opt = KineticLangevin([theta], lr=0.5, friction=1.0, beta=0.1, seed=0)
        >>> for _ in range(200):
        ...     theta.grad = 2.0 * theta.detach()  # F = θ², a = 2
        ...     opt.step()
        >>> round(float(theta.detach().var()), 2)  # β/a = 0.05, exact for BAOAB
        0.05
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float,
        friction: float = 1.0,
        beta: float | Schedule = 0.0,
        *,
        weight_decay: float = 0.0,
        n_particles: int = 1,
        mean_field_scaling: bool = True,
        temperature_convention: str = "mean_field",
        projection: Projection | Mapping[str, Any] | None = None,
        generator: torch.Generator | None = None,
        seed: int | None = None,
        check_every: int = 1,
    ) -> None:
        self.check_every = check_int("check_every", check_every, minimum=0)
        self._noise_buffers: dict[torch.Tensor, torch.Tensor] = {}
        self._kept: dict[int, tuple] = {}  # per group: (stepping parameters' ids, velocities, noise, generators)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        if generator is not None and seed is not None:
            raise ValueError("pass either generator or seed, not both")
        if seed is not None:
            seed = check_int("seed", seed, minimum=0)
        warn_if_global_seed(seed, type(self).__name__)
        self._generator_given = generator
        self._seed = int(torch.randint(0, 2**62, (1,))) if seed is None and generator is None else seed
        self._generators: dict[torch.device, torch.Generator] = {}
        if generator is not None:
            self._generators[torch.device(generator.device)] = generator
        defaults = dict(
            lr=lr, friction=friction, beta=beta, weight_decay=weight_decay, n_particles=n_particles,
            mean_field_scaling=mean_field_scaling, temperature_convention=temperature_convention,
            projection=projection, step=0,
        )  # fmt: skip
        normalise(defaults, "KineticLangevin")
        _check_group(defaults, "KineticLangevin")
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a param group, checking its options (``torch.optim.Optimizer.add_param_group``)."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        where = f"param group {len(self.param_groups) - 1}"
        try:
            normalise(group, where)
            _check_group(group, where)
            check_floating(group, where)
        except (TypeError, ValueError):
            self.param_groups.pop()
            raise

    def _generator(self, device: torch.device) -> torch.Generator:
        g = self._generators.get(device)
        if g is None:
            if self._seed is None:
                raise ValueError(
                    f"the generator passed to KineticLangevin is not on the parameters' device {device}; "
                    "pass one there, or seed= for one generator per device"
                )
            g = self._generators[device] = torch.Generator(device=device).manual_seed(self._seed)
        return g

    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        """One BAOAB step of every param group (see the class docstring).

        Raises:
            ValueError: a gradient with a NaN/Inf entry (at the steps ``check_every`` says), or a β
                schedule value that is not finite and ≥ 0 (checked for every group before any parameter
                changes).

        torch.optim's step wrapper (a profiler range and the step hooks) runs only when it has something to
        do: a hook registered, or the profiler on.
        """
        return DirectStep.step(self, closure)  # the hooked path only with a hook or the profiler

    step.hooked = True  # type: ignore[attr-defined]  # torch.optim: do not wrap it (it calls the wrapper itself)

    def _update(self) -> None:
        plan = []
        for gi, group in enumerate(self.param_groups):
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            for g in grads:  # (a loop, not any(…): a generator is a call of its own in Python 3.11)
                if g.is_sparse:
                    raise ValueError(f"param group {gi}: KineticLangevin does not support sparse gradients")
            if self.check_every and group["step"] % self.check_every == 0:
                # one synchronisation: the sum of the norms is finite iff every entry is (or a norm overflowed)
                if not math.isfinite(norms_and_sum(grads)[1]):
                    if any(not bool(torch.isfinite(g).all()) for g in grads):
                        raise ValueError(
                            f"param group {gi}: a gradient has NaN or Inf entries; nothing was changed"
                        )
            plan.append((gi, group, params, grads, _beta_at(group, gi)))
        for gi, group, params, grads, beta in plan:
            h, gamma = group["lr"], group["friction"]
            factor = scale(group)  # M, or 1 without the mean-field scaling
            c = math.exp(-gamma * h)
            sigma = math.sqrt(beta * (1.0 - c * c))  # the noise the friction requires: Var v → β
            velocities, noise, generators = self._buffers(gi, params)
            foreach.add_(velocities, grads, alpha=-h * factor)  # B: v ← v − h·M·∂L/∂θ
            if group["weight_decay"]:
                foreach.add_(velocities, params, alpha=-h * group["weight_decay"])  # … − h·λθ
            foreach.add_(params, velocities, alpha=0.5 * h)  # A(h/2)
            foreach.mul_(velocities, c)  # O(h): friction …
            if sigma > 0:  # … and noise, one draw per parameter in order, into buffers kept between steps
                for xi, generator in zip(noise, generators):
                    xi.normal_(generator=generator)  # (…) ξ ~ N(0, I), shape of θ
                foreach.add_(velocities, noise, alpha=sigma)
            foreach.add_(params, velocities, alpha=0.5 * h)  # A(h/2)
            if group["projection"] is not None:
                group["projection"].project_all_(params)
            group["step"] += 1

    def _buffers(
        self, gi: int, params: list[torch.Tensor]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Generator]]:
        """The velocities (the optimizer's state), noise buffers and generators of group ``gi``'s stepping
        ``params``, kept while the same parameters step (again after ``load_state_dict``)."""
        key = tuple(map(id, params))
        kept = self._kept.get(gi)
        if kept is None or kept[0] != key:
            velocities = []
            for p in params:
                state = self.state[p]
                if "velocity" not in state:
                    state["velocity"] = torch.zeros_like(p)  # v_0 = 0, shape of θ
                velocities.append(state["velocity"])
            kept = self._kept[gi] = (
                key,
                velocities,
                self._noise(params),
                [self._generator(p.device) for p in params],
            )
        return kept[1], kept[2], kept[3]

    def _noise(self, params: list[torch.Tensor]) -> list[torch.Tensor]:
        """Buffers shaped like ``params`` for the draws, made once (not saved: their values are not state)."""
        out = []
        for p in params:
            xi = self._noise_buffers.get(p)
            if xi is None or xi.shape != p.shape or xi.dtype != p.dtype or xi.device != p.device:
                xi = self._noise_buffers[p] = torch.empty_like(p, memory_format=torch.contiguous_format)
            out.append(xi)
        return out

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim`` state (the velocities) plus the generators' states, as plain data (``weights_only``)."""
        return as_data(super().state_dict(), self._generators, self._seed)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a [`state_dict`][meanfield.optim.kinetic.KineticLangevin.state_dict]: velocities, step counts and generators (a bit-identical continuation);
        this optimizer's β schedules and projections are kept."""
        state_dict = own_copy(state_dict)  # velocities not shared with a live state dict's optimizer
        generators = state_dict.pop("generators", {})
        self._seed = state_dict.pop("seed", self._seed)
        self._kept = {}  # the velocities and generators are replaced
        kept = [(g["beta"], g["projection"]) for g in self.param_groups]
        defaults = dict(self.defaults)  # torch's __setstate__ adds its own keys (differentiable): not ours
        super().load_state_dict(state_dict)
        self.defaults = defaults
        for group, (beta, projection) in zip(self.param_groups, kept):
            group["beta"], group["projection"] = beta, projection
        if self._seed is not None:  # the saver's generators; those it had not made start from the seed again
            self._generators = {}
        for name, rng_state in generators.items():
            self._generator(torch.device(name)).set_state(rng_state)
