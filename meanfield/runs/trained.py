"""Back from a run folder: the trained model of a checkpoint, and the runs of a sweep that have a configuration.

Analysis happens after training: the drop-half draws, attention's share of the loss, token dynamics through
a trained model. [`load_model`][meanfield.runs.trained.load_model] rebuilds the task's model from the folder's resolved ``config.toml``
(the same [`build_experiment`][meanfield.runs.loop.build_experiment] as the run) and loads a checkpoint's weights through
[`load`][meanfield.runs.folder.Checkpoints.load], which verifies them against their record
(size and SHA-256); [`find_runs`][meanfield.runs.trained.find_runs] selects a sweep's runs by the values of their resolved configuration,
never by folder names (which a sweep may shorten or hash).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from meanfield import config as _config
from meanfield.runs.folder import Checkpoints
from meanfield.runs.loop import build_experiment
from meanfield.runs.schema import RunConfig, check_config
from meanfield.tasks import Experiment, get_task

__all__ = ["TrainedModel", "load_model", "find_runs"]


@dataclass(frozen=True)
class TrainedModel:
    """A run's model at one of its checkpoints.

    Attributes:
        model: the task's network with the checkpoint's weights, in eval mode.
        experiment: what the task built around it (its ``evaluate`` computes the run's held-out metrics).
        config: the run's checked configuration.
        data: the task's data settings (its ``Data`` dataclass, from ``[data]``).
        step: the checkpoint's step.
        folder: the run folder.
    """

    model: nn.Module
    experiment: Experiment
    config: RunConfig
    data: Any
    step: int
    folder: Path


def load_model(
    folder: str | os.PathLike, step: int | None = None, device: str | torch.device = "cpu"
) -> TrainedModel:
    """The model of the run folder ``folder`` with the weights of its checkpoint at ``step``.

    Args:
        folder: a run folder (``config.toml`` and ``checkpoints/``).
        step: the checkpoint's step; ``None`` for the latest (a finished run's latest is its last step).
        device: where the model is built and the weights are loaded.

    Returns:
        The [`TrainedModel`][meanfield.runs.trained.TrainedModel] (model in eval mode).

    Raises:
        FileNotFoundError: no ``config.toml``, or no checkpoint (at ``step``, or at all).
        ConfigError: a configuration this version cannot build.
        CorruptCheckpointError: the checkpoint does not match its record, or holds another step.
    """
    folder = Path(folder)
    if not (folder / "config.toml").is_file():
        raise FileNotFoundError(f"{folder} is not a run folder: it has no config.toml")
    checkpoints = Checkpoints(folder / "checkpoints")
    steps = checkpoints.steps()
    if not steps:
        raise FileNotFoundError(
            f"{folder} has no checkpoint (checkpoints/ is not committed: rerun the run to recreate it)"
        )
    if step is not None and step not in steps:
        raise FileNotFoundError(f"{folder} has no checkpoint at step {step}; it has steps {steps}")
    cfg = check_config(_config.load_toml(folder / "config.toml"))
    device = torch.device(device)
    experiment = build_experiment(cfg, device)
    step = steps[-1] if step is None else step  # Checkpoints.load verifies the state holds this step
    state = checkpoints.load(step, map_location=device)
    experiment.model.load_state_dict(state["model"])
    experiment.model.eval()
    data = _config.from_dict(get_task(cfg.task).Data, cfg.data, "data")
    return TrainedModel(experiment.model, experiment, cfg, data, step, folder)


def find_runs(folder: str | os.PathLike, where: Mapping[str, Any] | None = None) -> list[Path]:
    """The run folders directly in ``folder`` whose resolved ``config.toml`` has every value of ``where``.

    Args:
        folder: a sweep folder (or any folder of run folders).
        where: ``{"key.sub": value}``; a string value is read as in ``--set`` (``"1e-3"`` is the number
            0.001, ``"[8, 16]"`` a list, ``"mha"`` the string), any other value is compared as it is. A key
            the configuration lacks never matches. ``None`` or ``{}`` selects every run.

    Returns:
        The matching run folders, ordered by seed, then name.

    Raises:
        FileNotFoundError: ``folder`` is not a folder.
        ConfigError: an empty key.

    Example:
        ``find_runs("results/scale/primary", {"model.n_heads": 8, "optim.beta": "1e-3"})``
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder")
    wanted = [
        _config.parse_override(f"{key}={value}") if isinstance(value, str) else (_key_path(key), value)
        for key, value in (where or {}).items()
    ]
    found = []
    for run in folder.iterdir():
        if not (run / "config.toml").is_file():
            continue
        config = _config.load_toml(run / "config.toml")
        if all(_lookup(config, path) == value for path, value in wanted):
            found.append((config.get("seed", 0), run.name, run))
    return [run for _, _, run in sorted(found)]


def _key_path(key: str) -> list[str]:
    return _config.parse_override(f"{key}=0")[0]


_MISSING = object()


def _lookup(config: dict[str, Any], path: list[str]) -> Any:
    node: Any = config
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node
