"""The configuration of a run: the schemas ([`RunConfig`][meanfield.runs.schema.RunConfig], [`TrainConfig`][meanfield.runs.schema.TrainConfig]), reading a TOML file
with a preset and overrides ([`load_config`][meanfield.runs.schema.load_config]), checking it ([`check_config`][meanfield.runs.schema.check_config]) and the optimizer it
describes ([`build_optimizer`][meanfield.runs.schema.build_optimizer]).
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from meanfield import config as _config
from meanfield.config import ConfigError
from meanfield.optim import Langevin
from meanfield.seeds import derive_seed
from meanfield.tasks import Task, get_task

__all__ = [
    "TrainConfig",
    "RunConfig",
    "OPTIM_OPTIONS",
    "load_config",
    "check_config",
    "model_options",
    "build_optimizer",
]


MAX_STEPS = 2**53
"""The most steps a run may take: beyond, step numbers are not exact in float64 (the schedules' ``t/T``)."""


@dataclass
class TrainConfig:
    """``[train]``: the training loop.

    Attributes:
        steps: optimizer steps in all.
        batch_size: samples (or sequences) per step.
        log_every: write a metrics line every this many steps (the training loss is the mean over them).
        eval_every: evaluate every this many steps (0: at the end only).
        checkpoint_every: write a checkpoint every this many steps (0: at the end and on Ctrl-C only).
        keep_checkpoints: how many of the latest checkpoints to keep (≥ 1).
        tensorboard: also write TensorBoard event files when the ``tensorboard`` package is installed.
        figures: draw the training curves into ``figures/`` at the end.
        free_energy: also log, on every metrics line, the free energy ``F = train_loss + Σ_ℓ (λ_ℓ/2·E|θ|² −
            β_ℓ·H(ρ_ℓ))`` of the model's particle layers (``meanfield.nn.free_energy``): ``free_energy``,
            ``free_energy_se`` and ``entropy_term`` (``Σ β·H``). Needs every particle on one process.
    """

    steps: int = 1000
    batch_size: int = 64
    log_every: int = 10
    eval_every: int = 0
    checkpoint_every: int = 200
    keep_checkpoints: int = 2
    tensorboard: bool = True
    figures: bool = True
    free_energy: bool = False

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "log_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be ≥ 1, got {getattr(self, name)}")
        if self.steps > MAX_STEPS:
            raise ValueError(
                f"train.steps must be in 1 … 2**53 = {MAX_STEPS} (step numbers stay exact in float64, as the "
                f"schedules use them), got {self.steps}"
            )
        for name in ("eval_every", "checkpoint_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"train.{name} must be ≥ 0 (0: only at the end), got {getattr(self, name)}")


@dataclass
class RunConfig:
    """The whole configuration of a run (the top level of the TOML file).

    Attributes:
        task: a built-in task (``teacher_student``, ``lm``: [`meanfield.tasks.TASKS`][meanfield.tasks.TASKS]) or
            ``"module:attribute"``.
        seed: the run's seed; the data, the initialisation, the batch order and the noise each get their
            own stream derived from it ([`derive_seed`][meanfield.seeds.derive_seed]).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, … or ``"auto"`` (CUDA when available).
        dtype: ``"float32"`` or ``"float64"``.
        threads: torch's intra-op threads (0: torch's default).
        parallel: how the processes of a ``torchrun`` launch share a step: ``"data"`` (each rank takes an equal
            share of the batch rows, every parameter replicated, gradients averaged) or ``"particles"`` (each
            rank holds ``M/world`` particles of every particle layer and the whole batch: the layers' averages
            are all-reduces, [`meanfield.nn.sharded`][meanfield.nn.sharded]). Ignored in a single process.
        description: free text, kept in the run folder.
        data: the task's ``[data]`` table.
        model: the task's ``[model]`` table.
        optim: the [`Langevin`][meanfield.optim.langevin.Langevin] options of the particle groups (``lr``, ``beta``, ``drift``,
            …, [`OPTIM_OPTIONS`][meanfield.runs.schema.OPTIM_OPTIONS]); ``beta`` is a number or a schedule table such as
            ``{kind = "cosine", start = 1.0, end = 1e-3}`` (``T`` defaults to ``train.steps``);
            ``[optim.others]`` holds the options of the group of all other parameters (no noise).
        train: [`TrainConfig`][meanfield.runs.schema.TrainConfig].
    """

    task: str
    seed: int = 0
    device: str = "cpu"
    dtype: Literal["float32", "float64"] = "float32"
    threads: int = 0
    parallel: Literal["data", "particles"] = "data"
    description: str = ""
    data: dict = field(default_factory=dict)
    model: dict = field(default_factory=dict)
    optim: dict = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)


def _langevin_options() -> tuple[str, ...]:
    # check_every: a run checks every step's gradients (its divergence stop relies on it, issue 51)
    skip = {"self", "params", "generator", "seed", "check_every"}
    return tuple(n for n in inspect.signature(Langevin.__init__).parameters if n not in skip)


OPTIM_OPTIONS: tuple[str, ...] = _langevin_options()
"""The keys allowed in ``[optim]`` and ``[optim.others]``: the param-group options of ``Langevin``."""


def load_config(path: str | os.PathLike, preset: str | None = None, overrides: Sequence[str] = ()) -> dict:
    """Read ``path``, apply ``preset`` and ``overrides``, and check the result ([`check_config`][meanfield.runs.schema.check_config]).

    Returns:
        The resolved configuration as a plain dict (what ``config.toml`` of the run holds).
    """
    resolved = _config.resolve(_config.load_toml(path), preset, overrides)
    check_config(resolved)
    return resolved


def check_config(config: Mapping[str, Any]) -> RunConfig:
    """Check a resolved configuration against the schemas of the run, its task, and ``Langevin``.

    Raises:
        ConfigError: naming the first unknown key (with the valid keys and the nearest one), missing key or
            value of the wrong type.
    """
    cfg = _config.from_dict(RunConfig, config)
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int) or not 0 <= cfg.seed < 2**63:
        raise ConfigError(f"seed must be an integer in [0, 2**63) (a torch.Generator seed), got {cfg.seed!r}")
    if isinstance(cfg.threads, bool) or not isinstance(cfg.threads, int) or cfg.threads < 0:
        raise ConfigError(f"threads must be an integer ≥ 0 (0: torch's default), got {cfg.threads!r}")
    task = get_task(cfg.task)
    _config.from_dict(task.Data, cfg.data, "data")
    _config.from_dict(task.Model, model_options(task, cfg), "model")
    _config.check_keys(cfg.optim, (*OPTIM_OPTIONS, "others"), "optim")
    others = cfg.optim.get("others", {})
    if not isinstance(others, Mapping):
        raise ConfigError(f"optim.others must be a table of Langevin options, got {others!r}")
    _config.check_keys(others, OPTIM_OPTIONS, "optim.others")
    for key in ("lr", "beta"):
        if key not in cfg.optim:
            raise ConfigError(f"missing key 'optim.{key}' (the Langevin {key}; see docs/running.md)")
    for where, table in (("optim", cfg.optim), ("optim.others", others)):
        for key in ("beta", "projection"):
            value = table.get(key)
            if callable(value) or not (value is None or isinstance(value, (int, float, Mapping))):
                raise ConfigError(
                    f'{where}.{key} must be a number or a table such as {{kind = "cosine", start = 1.0, '
                    f"end = 0.001}}, got {value!r}: a run's state is saved as data, and a Python callable "
                    "cannot be (use the schedules of meanfield.drift.schedules and projections of meanfield.drift.projections)"
                )
    _check_temperatures(cfg)
    return cfg


def model_options(task: Task, cfg: RunConfig) -> dict[str, Any]:
    """``[model]`` with the fields the task reads from ``[optim]`` (its ``FROM_OPTIM``, ``{field: optim key}``: the
    chain's temperature and step, given once, in ``[optim]``, which drives the chain); a field given as a number
    there (not a schedule) is passed, otherwise left at the model's default.

    Raises:
        ConfigError: ``[model]`` gives one of those fields itself (one line naming the one place).
    """
    model = dict(cfg.model)
    for name, key in getattr(task, "FROM_OPTIM", {}).items():
        if name in model:
            raise ConfigError(
                f"model.{name}: task {cfg.task!r} reads it from optim.{key} (the chain's own); give it once, "
                f"there, and remove model.{name}"
            )
        value = cfg.optim.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            model[name] = value
    return model


def _optimizer_options(options: Mapping[str, Any], steps: int) -> dict[str, Any]:
    """``[optim]`` values as ``Langevin`` arguments: schedule and projection tables become objects."""
    from meanfield.drift.projections import projection_from_dict
    from meanfield.drift.schedules import schedule_from_dict

    out = {}
    for key, value in options.items():
        if key == "beta" and isinstance(value, Mapping):
            value = dict(value)
            if value.get("kind") not in ("constant", "step"):
                value.setdefault("T", float(steps))
            value = schedule_from_dict(value)
        elif key == "projection" and isinstance(value, Mapping):
            value = projection_from_dict(dict(value))
        elif key == "betas" and isinstance(value, list):
            value = tuple(value)
        out[key] = value
    return out


def build_optimizer(model: torch.nn.Module, cfg: RunConfig) -> Langevin:
    """The ``Langevin`` optimizer of a run: particle groups with ``[optim]``, the rest with ``[optim.others]``."""
    options = {k: v for k, v in cfg.optim.items() if k != "others"}
    try:
        others = _optimizer_options(cfg.optim.get("others", {}), cfg.train.steps)
        groups = Langevin.param_groups_for(model, others=others)
        return Langevin(
            groups, seed=derive_seed(cfg.seed, "noise"), **_optimizer_options(options, cfg.train.steps)
        )
    except (TypeError, ValueError) as error:
        raise ConfigError(f"[optim]: {error}") from None


def _check_temperatures(cfg: RunConfig) -> None:
    r"""$\beta_t$ must be a finite number ≥ 0 at every step $0 \dots \text{ steps } - 1$ the run will take.

    A schedule is evaluated at every step (at 100,001 evenly spaced steps beyond that many), so a schedule
    that goes negative mid-run is refused before the run starts, not at that step.
    """
    steps = cfg.train.steps
    for where, table in (("optim", cfg.optim), ("optim.others", cfg.optim.get("others", {}))):
        if "beta" not in table:
            continue
        try:
            beta = _optimizer_options({"beta": table["beta"]}, steps)["beta"]
        except (TypeError, ValueError) as error:
            raise ConfigError(f"{where}.beta: {error}") from None
        if callable(beta):
            probe = (
                range(steps)
                if steps <= 100_001
                else (round(k * (steps - 1) / 100_000) for k in range(100_001))
            )
        else:
            probe = (0,)
        for k in probe:
            value = beta(k) if callable(beta) else beta
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
            ):
                raise ConfigError(
                    f"{where}.beta gives β = {value!r} at step {k}: a temperature must be a finite number ≥ 0 "
                    f"at every step of the run (0 … {steps - 1})"
                )


# ----------------------------------------------------------------------------------------------------------
# run-folder pieces: checkpoints and the metrics log
