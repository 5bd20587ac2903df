r"""The Langevin optimizer itself: its param groups and the order of a step.

One [`Langevin.step`][meanfield.optim.langevin.Langevin.step]: 1. gather gradients and temperatures $\beta_t$ (a bad schedule value raises before
anything changes), 2. check the gradients are finite (one reduction per bucket), 3. start the noise draw
(`noise`, on the CPU in a background thread) while 4. the drift is applied
(`drift`), 5. add the noise, 6. project. The pieces: the groups' options
(`groups`), their flat layout (`buckets`), the statistics
(`stats`), the laws and conventions (`conventions`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn

from meanfield import _background
from meanfield._checks import check_int
from meanfield.drift.projections import Projection
from meanfield.drift.schedules import Schedule
from meanfield.optim import foreach, layers
from meanfield.optim.buckets import Bucket, build_buckets
from meanfield.optim.checkpoints import LangevinCheckpoints
from meanfield.optim.direct import DirectStep
from meanfield.optim.drift import apply_drift, precondition, sgd_drift_
from meanfield.optim.gradients import gradient_norms
from meanfield.optim.groups import (
    CheckedGroups,
    beta_at,
    check_group,
    momentum_with_noise,
    noise_beta,
    normalise,
    not_gibbs,
)
from meanfield.optim.groups import scale as group_scale
from meanfield.optim.noise import (
    NoiseDraw,
    NoisePlan,
    NoiseSource,
    add_noise,
    block_noise,
    fill_normal,
    local_noise,
)
from meanfield.optim.step_stats import LangevinStats, LazyStats, Record
from meanfield.seeds import warn_if_global_seed

__all__ = ["Langevin"]


def _plain_sgd(group: dict[str, Any]) -> bool:
    """Whether ``_sgd_update`` can step this group: an SGD drift, the shared draw (no counter-based
    blocks, no sharded rows)."""
    return group["drift"] == "sgd" and not group.get("noise_block") and group.get("particle_rows") is None


class Langevin(CheckedGroups, NoiseSource, LazyStats, LangevinCheckpoints, DirectStep, torch.optim.Optimizer):
    r"""Mean-field Langevin dynamics as a ``torch.optim.Optimizer`` (SGD or Adam drift, noise, projection).

    One step on a param group with noise, temperature $\beta_t$ and ``M`` particles:

    $$
    \theta \leftarrow \Pi( \theta - \eta_{\mathrm{eff}} \odot g + \sqrt{2 \cdot \beta_t \cdot \eta_{\mathrm{eff}}} \odot \xi ), \qquad \xi \sim N(0, I)
    $$

    - ``drift="sgd"``: $g = M\cdot\nabla_\theta L + \lambda \theta$, $\eta_{\mathrm{eff}} = \operatorname{lr}$. This is Euler–Maruyama with time step ``lr`` for
      $d\theta = -\nabla F dt + \sqrt{2\beta} dW$; the target law is $\propto \exp(-F/\beta)$ ($F = M\cdot L + \lambda/2\|\theta\|^2$) up to the
      O(lr) bias of the discrete chain.
    - ``drift="adam"``: $g = \hat{m}$ (bias-corrected first moment of $M\cdot\nabla_\theta L + \lambda \theta$) and
      $\eta_{\mathrm{eff}} = \operatorname{lr}/(\sqrt{\hat{v}} + \varepsilon)$ per coordinate ($\hat{v}$ bias-corrected with each parameter's own step
      count). With ``noise_preconditioned=True`` (default) the noise is $\sqrt{2\beta_t \eta_{\mathrm{eff}}} \xi$:
      preconditioned Langevin with $P = \operatorname{diag}(\eta_{\mathrm{eff}}/\operatorname{lr})$, whose target is $\propto \exp(-F/\beta)$ only while ``P``
      barely moves (Adam's follows θ: biased, docs/optim.md). Groups with noise default to ``betas = (0, 0.999)`` (no momentum:
      $\hat{m} = g$, the pSGLD drift, whose chain has the EM law; momentum multiplies its O(η) bias by
      $(1 + \beta_1)/(1 - \beta_1)$, see [`momentum_variance_factor`][meanfield.optim.conventions.momentum_variance_factor]) and $\varepsilon = 1$ ($\eta_{\mathrm{eff}} \le \operatorname{lr}$: no
      explosion at step 1, see the module docstring). With ``noise_preconditioned=False`` the noise
      is $\sqrt{2\beta_t \operatorname{lr}} \xi$ and the target is no longer the Gibbs law at temperature $\beta$ (for a constant
      $P = p\cdot I$ it is $\propto \exp(-p\cdot F/\beta)$; for a non-scalar ``P`` not a Gibbs law at all); it warns once.
    - Groups with ``noise=False`` take the plain step $\theta \leftarrow \Pi(\theta - \eta_{\mathrm{eff}} \odot g)$ (SGD or Adam).

    $M\cdot\nabla_\theta L$ is the Wasserstein gradient $\nabla_\theta \delta F/\delta \rho$ of a particle of a layer computing
    $1/M \sum_i \varphi(\theta_i)$ (see the module docstring for the derivation); a group declares its M with
    ``n_particles`` (default 1: no scaling) and ``mean_field_scaling=False`` switches the factor off. At
    $\beta = 0$ the optimizer is ``torch.optim.SGD`` / ``torch.optim.Adam`` on the gradients $M\cdot\nabla_\theta L$ (for
    Adam on a group with noise, with torch's ``betas``/``eps`` given: its defaults differ).

    Every argument after ``params`` except ``generator`` and ``seed`` is a param-group default and can be
    overridden per group. [`param_groups_for`][meanfield.optim.langevin.Langevin.param_groups_for] builds the groups of a model with particle layers:
    particles with noise and the ×M scaling, everything else plain.

    Args:
        params: parameters or param-group dicts.
        lr: learning rate ``lr > 0`` (the time step of the SDE for an SGD drift).
        beta: temperature $\beta \ge 0$, a number or a schedule $\text{ step } -> \beta$ ([`meanfield.drift.schedules`][meanfield.drift.schedules]),
            evaluated at its group's own step count ($\beta(0)$ at the group's first step).
        drift: ``"sgd"`` or ``"adam"`` (`DRIFTS`).
        betas: Adam's $(\beta_1, \beta_2)$, each in ``[0, 1)``; ``None`` (default): ``(0, 0.999)`` for a group with
            noise (no momentum: the right law), ``(0.9, 0.999)`` without. $\beta_1 > 0$ with noise warns once.
        eps: Adam's $\varepsilon > 0$, a floor on $\sqrt{\hat{v}}$ in Wasserstein-gradient units: $\eta_{\mathrm{eff}} \le \operatorname{lr}/\varepsilon$, and a
            coordinate whose gradient stays near 0 gets noise up to $\sqrt{2\beta\cdot\operatorname{lr}/\varepsilon}$. ``None`` (default):
            ``1`` for a group with noise ($\eta_{\mathrm{eff}} \le \operatorname{lr}$), ``1e-8`` without; ``last_stats.eta_eff_max`` shows
            the largest step.
        weight_decay: $\lambda \ge 0$, an L2 term $\lambda/2\|\theta\|^2$ in ``F`` (a Gaussian prior), added to $M\cdot\nabla_\theta L$.
        noise: whether the group gets the Langevin noise.
        n_particles: the number of particles $M \ge 1$ of the group (its gradients are multiplied by M).
        mean_field_scaling: whether to apply the factor ``M``.
        noise_preconditioned: with an Adam drift, scale the noise with $\eta_{\mathrm{eff}}$ (``True``) or ``lr``.
        projection: ``None`` or a [`Projection`][meanfield.drift.projections.Projection] ([`Clip`][meanfield.drift.projections.Clip], [`Sphere`][meanfield.drift.projections.Sphere],
            [`LayerProjection`][meanfield.optim.layers.LayerProjection]), applied to the group's parameters after every step.
        generator: the ``torch.Generator`` of the noise (on the parameters' device).
        seed: seed of the optimizer's own generator (one per device) when ``generator`` is not given; with
            neither, one seed is drawn from torch's global generator at construction. It seeds the generator
            as given: with ``torch.manual_seed(s)`` for the initialisation, pass
            ``seed=`` [`derive_seed`][meanfield.seeds.derive_seed]``(s, "noise")`` (as ``meanfield run`` does), not
            ``s``, or the noise repeats the initialisation's draws (a seed equal to ``torch.initial_seed()``
            warns: [`warn_if_global_seed`][meanfield.seeds.warn_if_global_seed]).
        temperature_convention: what ``beta`` means (`TEMPERATURE_CONVENTIONS`): ``"mean_field"``
            (default: the temperature of $\exp(-M\cdot L/\beta)$) or ``"loss"`` (the seeds' $\beta_s$ of
            $\exp(-L/\beta_s)$; the noise uses $M\cdot \beta_s$, ``M`` the factor applied to the gradients: 1 with
            ``mean_field_scaling=False``). $\beta_s = \beta/M$ gives the same chain.
        noise_block: ``0`` (default): the group's noise comes from the optimizer's generator, one draw per step
            for all groups. ``k > 0``: the noise of particles $[j\cdot k, (j+1)\cdot k)$ (rows of every parameter's
            leading particle axis) at the group's step ``t`` is drawn from a generator seeded by
            ``derive_seed(seed, f"noise/{group index}/{j}/{t}")`` — counter-based: no state, and a particle's
            noise does not depend on which process holds it, so a rank of a sharded system draws only its own
            rows ([`meanfield.nn.sharded`][meanfield.nn.sharded]; ``M`` and each shard a multiple of ``k``). Needs ``seed``
            (not ``generator``).

        check_every: check the gradients (NaN/Inf entries, or a step ``lr·‖g‖`` that overflows; one reduction
            and one synchronisation per bucket) before the steps ``0, k, 2k, …`` (``k = check_every``); ``1``
            (default): every step, so a bad gradient raises before it reaches a parameter (``meanfield run``
            stops a run on that error); ``0``: never (a NaN gradient then reaches the parameters). The
            loss and the parameters are still checked where the caller checks them (``meanfield run`` checks
            the loss every step and the parameters at every checkpoint).

    A β schedule or a projection may also be given as data (its ``to_dict()``, e.g. from a TOML config).

    Attributes:
        last_stats: [`LangevinStats`][meanfield.optim.step_stats.LangevinStats] of the last step over the groups with noise (computed when read).
        last_group_stats: one [`LangevinStats`][meanfield.optim.step_stats.LangevinStats] (or ``None``) per param group.

    Raises:
        ValueError / TypeError: on an invalid argument (naming it, what it got and what is allowed), on a
            schedule value $\beta_t < 0$ or non-finite, and in [`step`][meanfield.optim.langevin.Langevin.step] on a non-finite gradient (before
            any parameter is changed).

    Example:
        >>> import torch
        >>> from meanfield.drift.schedules import Cosine
        >>> theta = torch.nn.Parameter(torch.zeros(1000, 3, dtype=torch.float64))  # (M, d) particles
        >>> opt = Langevin([theta], lr=0.1, beta=Cosine(1.0, 0.01, T=100), n_particles=1000, seed=0)
        >>> for _ in range(100):
        ...     opt.zero_grad()
        ...     loss = 0.5 * (theta**2).sum(1).mean()  # L = 1/M Σ V(θ_i), V = |θ|²/2
        ...     loss.backward()
        ...     opt.step()
        >>> opt.last_stats.step, opt.last_stats.eta_eff_mean
        (100, 0.1)
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float,
        beta: float | Schedule,
        *,
        drift: str = "sgd",
        betas: tuple[float, float] | None = None,
        eps: float | None = None,
        weight_decay: float = 0.0,
        noise: bool = True,
        n_particles: int = 1,
        mean_field_scaling: bool = True,
        noise_preconditioned: bool = True,
        projection: Projection | Mapping[str, Any] | None = None,
        generator: torch.Generator | None = None,
        seed: int | None = None,
        temperature_convention: str = "mean_field",
        noise_block: int = 0,
        check_every: int = 1,
    ) -> None:
        self.check_every = check_int("check_every", check_every, minimum=0)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        if seed is not None:
            seed = check_int("seed", seed, minimum=0)
            if seed >= 2**63:
                raise ValueError(
                    f"seed must be < 2**63 (a torch.Generator seed is a 64-bit integer), got {seed}"
                )
        if generator is not None and seed is not None:
            raise ValueError("pass either generator or seed, not both")
        self._warned_not_gibbs = False
        self._warned_momentum = False
        self._layout_key: list[tuple] | None = None  # what the layout was built for
        self._noise_buffers: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}
        self._layout_version = 0  # counts the layouts built (the noise plan belongs to one)
        self._sgd_program: list[tuple[int, dict[str, Any], list[tuple[Bucket, list[int]]]]] | None = None
        self._plan = NoisePlan([], [], [], 0)
        self._forget()
        self._n_steps = 0
        self._generators: dict[torch.device, torch.Generator] = {}
        if generator is not None:
            self._generators[torch.device(generator.device)] = generator
            self._seed = None
        else:
            self._seed = int(torch.randint(0, 2**62, (1,))) if seed is None else seed
        defaults = {
            "lr": lr,
            "beta": beta,
            "drift": drift,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "noise": noise,
            "n_particles": n_particles,
            "mean_field_scaling": mean_field_scaling,
            "noise_preconditioned": noise_preconditioned,
            "projection": projection,
            "temperature_convention": temperature_convention,
            "noise_block": noise_block,
            "step": 0,
        }
        normalise(defaults, "Langevin")
        check_group(defaults, "Langevin")
        self._constructed = False
        super().__init__(params, defaults)
        self._constructed = True
        if any(not_gibbs(g) for g in self.param_groups):
            self._warn_not_gibbs(stacklevel=2)
        if any(momentum_with_noise(g) for g in self.param_groups):
            self._warn_momentum(stacklevel=2)
        if any(g["noise"] and not g.get("noise_block") for g in self.param_groups):  # draws from the seed's stream
            warn_if_global_seed(seed, type(self).__name__)

    @staticmethod
    def param_groups_for(
        model: nn.Module, *, others: dict[str, Any] | None = None, **particle_options: Any
    ) -> list[dict[str, Any]]:
        """Param groups for a model with particle layers: particles noisy and ×M, everything else plain
        (`meanfield.optim.layers.param_groups_for`, whose docstring has the rules).

        Args:
            model: the model.
            others: options of the group of the non-particle parameters.
            **particle_options: options of every particle group (e.g. ``projection=Sphere()``).

        Returns:
            A list of param-group dicts for [`Langevin`][meanfield.optim.langevin.Langevin] (the last one is omitted when empty).
        """
        return layers.param_groups_for(model, others=others, **particle_options)

    def _forget(self) -> None:
        """Drop what a step or a layout built (at construction, and after ``load_state_dict``)."""
        self._layout: list[list[Bucket]] | None = None
        self._plan_key: tuple | None = None  # what _noise_plan's draws and views were built for
        self._lazy: list[list[Any]] | None = None  # _sgd_update's records, as tuples until read
        self._records: list[Record] | None = []  # noisy groups' records; None: the last step failed half way
        self._group_records: list[list[Record]] = []  # every group's records of the last step
        self._stats: LangevinStats | None = None
        self._group_stats: list[LangevinStats | None] | None = None

    # -- layout ----------------------------------------------------------------------------------------------

    def _build_layout(self, key: list[tuple]) -> list[list[Bucket]]:
        """The groups' buckets, and ``_sgd_update``'s program when every group is ``_plain_sgd``."""
        self._layout = [build_buckets(g, self.param_groups, self.state, self._seed) for g in self.param_groups]
        self._layout_key = key
        self._layout_version += 1
        self._sgd_program = (
            [
                (gi, group, [(b, list(range(len(b.params)))) for b in buckets])
                for gi, (group, buckets) in enumerate(zip(self.param_groups, self._layout))
                if buckets
            ]
            if all(_plain_sgd(g) for g in self.param_groups)
            else None
        )
        return self._layout

    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        """One Langevin step for every param group (see the class docstring for the update).

        Args:
            closure: re-evaluates the model and returns the loss (optional, as in ``torch.optim``).

        Returns:
            The closure's loss, or ``None``.

        Raises:
            ValueError: a gradient has a NaN or Inf entry (checked at the steps ``check_every`` says), or
                a β schedule returned a value that is not a finite number ≥ 0 (nothing is changed then,
                ``last_stats`` included).

        An error while the parameters are being updated (e.g. a ``KeyboardInterrupt``) leaves the groups
        before it updated and the rest not; the noise generator is put back and ``last_stats`` is
        ``None``: reload a checkpoint (``state_dict``) rather than step again.

        torch.optim's step wrapper (a profiler range and the step hooks) runs only when it has something to
        do: a hook registered, or the profiler on.
        """
        return DirectStep.step(self, closure)  # the hooked path only with a hook or the profiler

    step.hooked = True  # type: ignore[attr-defined]  # torch.optim: do not wrap it (it calls the wrapper itself)

    def _update(self) -> None:
        key = []  # what the layout is built for: each group's parameters and drift (user code may change them)
        for g in self.param_groups:  # (a loop: a comprehension is a call of its own in Python 3.11)
            key.append((*map(id, g["params"]), g["drift"]))
        layout = self._layout if self._layout is not None and key == self._layout_key else self._build_layout(key)
        if self._sgd_program is not None and self._sgd_update(self._sgd_program):
            return
        self._lazy = None

        # 1. gather gradients and temperatures (a schedule error raises before anything changes)
        plan = []
        for gi, (group, buckets) in enumerate(zip(self.param_groups, layout)):
            work = []
            for b in buckets:
                index = [i for i, p in enumerate(b.params) if p.grad is not None]
                if not index:
                    continue
                grads = [b.params[i].grad for i in index]
                if any(g.is_sparse for g in grads):
                    raise ValueError(f"param group {gi}: Langevin does not support sparse gradients")
                work.append((b, index, grads))
            if work:
                beta_t = beta_at(group, gi) if group["noise"] else 0.0
                plan.append((gi, group, beta_t, work))
        # 2. check the gradients (one reduction per bucket): a refused step changes nothing, stats included
        check = self.check_every > 0 and self._n_steps % self.check_every == 0
        checked = []
        for gi, group, beta_t, work in plan:
            entries = []
            for b, index, grads in work:
                norms = gradient_norms(self.param_groups, group, b, index, grads) if check else None  # [()]
                entries.append((b, index, grads, norms))
            checked.append((gi, group, beta_t, entries))

        # 3. a large CPU noise draw starts in a background thread while 4. the drift is applied
        self._records = []  # the last step's records point into the noise buffers about to be redrawn
        self._group_records = [[] for _ in self.param_groups]
        self._stats = None
        self._group_stats = None
        noisy = [  # (bucket, index, group index, the group's step): what the noise of each bucket needs
            (b, index, gi, group["step"])
            for gi, group, beta_t, work in plan
            if group["noise"] and beta_t > 0
            for b, index, _ in work
        ]
        jobs, views, shaped, cpu_numbers = self._noise_plan(noisy)
        draw = NoiseDraw(jobs, views) if _background.pays(cpu_numbers) else None
        try:
            records = []  # (record, j): a record of the j-th bucket of the draw (noisy[j])
            j = 0
            for gi, group, beta_t, entries in checked:
                for b, index, grads, norms in entries:
                    bucket_records = apply_drift(group, b, index, grads, norms, beta_t)
                    self._group_records[gi].extend(bucket_records)
                    if group["noise"]:
                        self._records.extend(bucket_records)
                        if beta_t > 0:
                            for record in bucket_records:
                                precondition(record)
                                records.append((record, j))
                            j += 1
            if draw is None:  # drawn now, after the drift: an error before this left the generators as they were
                fill_normal(jobs)
            else:
                draw.wait()
            noises = [  # [(n_j,)] this rank's rows of the shared draw, or the counter-based blocks
                block_noise(b, self._seed, gi, t) if b.block else local_noise(b, view)
                for (b, _, gi, t), view in zip(noisy, views)
            ]
        except BaseException:
            if draw is not None:
                draw.undo()  # no draw left running on the generator, which is back where it was
            self._records = None  # the step is half done: no stats describe it (last_stats is None)
            raise
        # 5. noise, 6. projection
        for record, j in records:
            add_noise(record, noises[j], shaped[j])
        for _, group, _, _ in plan:
            if group["projection"] is not None:
                group["projection"].project_all_(group["params"])
            group["step"] += 1
        self._n_steps += 1

    def _sgd_update(self, program: list[tuple[int, dict[str, Any], list[tuple[Bucket, list[int]]]]]) -> bool:
        """The step of ``_update`` when every group is ``_plain_sgd`` and every parameter has a dense gradient:
        the same operations in the same order (the same numbers) with less bookkeeping. ``program`` (each group
        that has parameters, with its buckets) is built with the layout; a step reads the groups' options
        afresh (``lr``, ``beta``, … may change between steps) and keeps its records as tuples until the
        statistics are read. Returns ``False``, having changed nothing, where ``_update`` must take the step."""
        # (loops rather than comprehensions: each comprehension is a call of its own in Python 3.11)
        plan = []  # (group index, group, β_t, [(bucket, index, gradients)])
        noisy = []  # (bucket,) of the buckets that get noise, in order
        for gi, group, buckets in program:
            entries = []
            for b, index in buckets:
                grads = [p.grad for p in b.params]
                for g in grads:
                    if g is None or g.is_sparse:
                        return False
                entries.append((b, index, grads))
            beta_t = beta_at(group, gi) if group["noise"] else 0.0
            plan.append((gi, group, beta_t, entries))
            if group["noise"] and beta_t > 0:
                for b, _ in buckets:
                    noisy.append((b,))
        norms = None  # one reduction per bucket at the steps check_every says, before anything changes
        if self.check_every and self._n_steps % self.check_every == 0:
            norms = []
            for _, group, _, entries in plan:
                for b, index, grads in entries:
                    norms.append(gradient_norms(self.param_groups, group, b, index, grads))
        self._stats = self._group_stats = None
        self._records = []
        jobs, views, shaped, cpu_numbers = self._noise_plan(noisy)
        draw = NoiseDraw(jobs, views) if _background.pays(cpu_numbers) else None
        # per bucket: [group index, noise, bucket, index, lr, β of the noise, M, β_t, ξ, d_k, factor, ‖d_k‖, versions]
        lazy = []
        noises = []  # (record, amplitude sqrt(2·β·lr)) of the buckets that get noise, in noisy's order
        try:
            for gi, group, beta_t, entries in plan:
                lr, scale, wd = float(group["lr"]), group_scale(group), group["weight_decay"]
                beta_noise = noise_beta(group, beta_t)
                for b, index, grads in entries:
                    terms, factor = sgd_drift_(b.params, grads, lr, scale, wd)
                    bucket_norms = None if wd or norms is None else norms[len(lazy)]
                    versions = () if wd else tuple(t._version for t in terms)
                    lazy.append([gi, group["noise"], b, index, lr, beta_noise, scale, beta_t, None, terms, factor,
                                 bucket_norms, versions])  # fmt: skip
                    if group["noise"] and beta_t > 0:
                        noises.append((lazy[-1], math.sqrt(2 * beta_noise * lr)))
            if draw is None:  # drawn now, after the drift: an error before this left the generators as they were
                fill_normal(jobs)
            else:
                draw.wait()
        except BaseException:
            if draw is not None:
                draw.undo()
            self._records = None
            self._lazy = None
            raise
        for (entry, amplitude), xi, view in zip(noises, shaped, views):
            foreach.add_(entry[2].params, xi, alpha=amplitude)
            entry[8] = view  # ξ, for the statistics
        for _, group, _, _ in plan:
            if group["projection"] is not None:
                group["projection"].project_all_(group["params"])
            group["step"] += 1
        self._lazy = lazy
        self._n_steps += 1
        return True
