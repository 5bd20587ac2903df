"""Runs: train a task from a TOML configuration into a run folder that survives interruption.

``meanfield run CONFIG.toml [--preset NAME] [--set key=value …] [--out DIR] [--resume]`` (or :func:`run`)
builds the task's model and data, a :class:`~meanfield.optim.Langevin` optimizer from ``[optim]``, and trains
``train.steps`` steps. A run is a folder::

    config.toml         the fully resolved configuration (preset and overrides applied)
    environment.json    package versions, git commit, seed, threads, device, command line
    metrics.jsonl       one JSON object per logged step: step, wall time, throughput, losses, β, the
                        optimizer's statistics (and the evaluation metrics at evaluation steps)
    summary.json        status (running, finished, interrupted, diverged, failed), final and best metrics
    figures/            training curves (PNG)
    checkpoints/        step-NNNNNNNN.pt, the last ``train.keep_checkpoints`` kept
    tensorboard/        event files, when the ``tensorboard`` package is installed

Every file is written atomically (:mod:`meanfield._io`). A checkpoint holds the model, the optimizer (with
its noise generators), the batch iterator (with its generator), the global torch generator, the step, and
the logging window, all as tensors and plain data (it loads with ``torch.load(..., weights_only=True)``), so
that ``--resume`` reaches bit for bit the parameters and metrics of the uninterrupted run on the CPU.

Data parallel: under ``torchrun --nproc_per_node=N -m meanfield run …`` (``WORLD_SIZE`` > 1) every rank builds
the same model, optimizer and batch iterator from the same seed, draws the same global batch and computes the
loss on its ``1/N`` share of the rows; the gradients are averaged by one all-reduce (gloo on the CPU, NCCL on
CUDA), so every rank takes the step of the whole batch — the single-process step, to round-off — and the
Langevin noise, drawn from the same generator on every rank, is identical: the replicas stay equal. Rank 0
writes the folder; the others write nothing. ``train.batch_size`` must be a multiple of N, and the task's loss
a mean over the batch's rows (every built-in task's is).

Interruptions: Ctrl-C (SIGINT) finishes the current step, writes a checkpoint and raises
:class:`RunInterrupted` (a second Ctrl-C stops at once); a non-finite loss or gradient raises
:class:`NonFiniteLossError` naming the step, keeping the last checkpoint, whose parameters are finite.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import io
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from tqdm.auto import tqdm

from meanfield import config as _config
from meanfield._io import json_clean, write_atomic, write_json_atomic, write_text_atomic
from meanfield.config import ConfigError
from meanfield.data import CorruptDataError
from meanfield.nn.sharded import (
    full_optimizer_state,
    full_state_dict,
    load_full_optimizer_state,
    load_full_state_dict,
    shard_particles,
    sharded_layers,
)
from meanfield.optim import Langevin
from meanfield.seeds import derive_seed
from meanfield.tasks import Experiment, get_task

__all__ = [
    "TrainConfig",
    "RunConfig",
    "RunResult",
    "RunInterrupted",
    "NonFiniteLossError",
    "Checkpoints",
    "MetricsLog",
    "load_config",
    "check_config",
    "derive_seed",
    "run",
    "OPTIM_OPTIONS",
]

STATUSES = ("running", "finished", "interrupted", "diverged", "failed")
TIMING_KEYS = ("time", "step_time", "samples_per_s", "tokens_per_s", "particles_per_s")
"""Metrics that depend on the machine, not on the computation (left out of resume-equality checks)."""


# ----------------------------------------------------------------------------------------------------------
# configuration
# ----------------------------------------------------------------------------------------------------------


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
    """

    steps: int = 1000
    batch_size: int = 64
    log_every: int = 10
    eval_every: int = 0
    checkpoint_every: int = 200
    keep_checkpoints: int = 2
    tensorboard: bool = True
    figures: bool = True

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "log_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be ≥ 1, got {getattr(self, name)}")
        for name in ("eval_every", "checkpoint_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"train.{name} must be ≥ 0 (0: only at the end), got {getattr(self, name)}")


@dataclass
class RunConfig:
    """The whole configuration of a run (the top level of the TOML file).

    Attributes:
        task: a built-in task (``teacher_student``, ``lm``: :data:`meanfield.tasks.TASKS`) or
            ``"module:attribute"``.
        seed: the run's seed; the data, the initialisation, the batch order and the noise each get their
            own stream derived from it (:func:`derive_seed`).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, … or ``"auto"`` (CUDA when available).
        dtype: ``"float32"`` or ``"float64"``.
        threads: torch's intra-op threads (0: torch's default).
        parallel: how the processes of a ``torchrun`` launch share a step: ``"data"`` (each rank takes an equal
            share of the batch rows, every parameter replicated, gradients averaged) or ``"particles"`` (each
            rank holds ``M/world`` particles of every particle layer and the whole batch: the layers' averages
            are all-reduces, :mod:`meanfield.nn.sharded`). Ignored in a single process.
        description: free text, kept in the run folder.
        data: the task's ``[data]`` table.
        model: the task's ``[model]`` table.
        optim: the :class:`~meanfield.optim.Langevin` options of the particle groups (``lr``, ``beta``, ``drift``,
            …, :data:`OPTIM_OPTIONS`); ``beta`` is a number or a schedule table such as
            ``{kind = "cosine", start = 1.0, end = 1e-3}`` (``T`` defaults to ``train.steps``);
            ``[optim.others]`` holds the options of the group of all other parameters (no noise).
        train: :class:`TrainConfig`.
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
    skip = {"self", "params", "generator", "seed"}
    return tuple(n for n in inspect.signature(Langevin.__init__).parameters if n not in skip)


OPTIM_OPTIONS: tuple[str, ...] = _langevin_options()
"""The keys allowed in ``[optim]`` and ``[optim.others]``: the param-group options of ``Langevin``."""


def load_config(path: str | os.PathLike, preset: str | None = None, overrides: Sequence[str] = ()) -> dict:
    """Read ``path``, apply ``preset`` and ``overrides``, and check the result (:func:`check_config`).

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
    task = get_task(cfg.task)
    _config.from_dict(task.Data, cfg.data, "data")
    _config.from_dict(task.Model, cfg.model, "model")
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
                    "cannot be (use the schedules of meanfield.schedules and projections of meanfield.projections)"
                )
    _check_temperatures(cfg)
    return cfg


def _optimizer_options(options: Mapping[str, Any], steps: int) -> dict[str, Any]:
    """``[optim]`` values as ``Langevin`` arguments: schedule and projection tables become objects."""
    from meanfield.projections import projection_from_dict
    from meanfield.schedules import schedule_from_dict

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
    """``β_t`` must be a finite number ≥ 0 at every step ``0 … steps − 1`` the run will take.

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
# ----------------------------------------------------------------------------------------------------------


class Checkpoints:
    """``checkpoints/step-NNNNNNNN.pt`` files: written atomically, the latest ``keep`` kept.

    Args:
        folder: the checkpoint folder.
        keep: how many to keep (older ones are deleted after a new one is written).
    """

    PATTERN = re.compile(r"step-(\d+)\.pt$")

    def __init__(self, folder: str | os.PathLike, keep: int = 2) -> None:
        self.folder = Path(folder)
        self.keep = keep

    def steps(self) -> list[int]:
        """The steps that have a checkpoint, ascending."""
        if not self.folder.is_dir():
            return []
        found = (self.PATTERN.match(p.name) for p in self.folder.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def path(self, step: int) -> Path:
        """The file of the checkpoint at ``step``."""
        return self.folder / f"step-{step:08d}.pt"

    def save(self, state: Mapping[str, Any], step: int) -> Path:
        """Write ``state`` as the checkpoint of ``step`` (atomically), then drop all but the latest ``keep``."""
        path = write_atomic(self.path(step), lambda f: torch.save(dict(state), f))
        for old in self.steps()[: -self.keep]:
            self.path(old).unlink(missing_ok=True)
        return path

    def latest(self) -> int | None:
        """The step of the latest checkpoint, or ``None``."""
        steps = self.steps()
        return steps[-1] if steps else None

    def load(self, step: int | None = None, map_location: Any = None) -> dict[str, Any]:
        """The checkpoint of ``step`` (default the latest), loaded with ``weights_only=True``."""
        step = self.latest() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.folder}")
        return torch.load(self.path(step), map_location=map_location, weights_only=True)


class MetricsLog:
    """``metrics.jsonl``: one JSON object per line, appended and flushed as the run goes.

    Args:
        path: the file.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def read(self) -> list[dict[str, Any]]:
        """Every record (a torn last line, from a crash while writing it, is skipped)."""
        if not self.path.exists():
            return []
        records = []
        for line in self.path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                records.append(json.loads(line))
        return records

    def truncate(self, step: int) -> None:
        """Keep only the records of steps ``≤ step`` (atomically): what a resumed run continues from."""
        kept = [r for r in self.read() if r.get("step", 0) <= step]
        write_text_atomic(self.path, "".join(json.dumps(json_clean(r)) + "\n" for r in kept))

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one record and flush it."""
        with self.path.open("a") as f:
            f.write(json.dumps(json_clean(dict(record)), allow_nan=False) + "\n")
            f.flush()


# ----------------------------------------------------------------------------------------------------------
# results and errors
# ----------------------------------------------------------------------------------------------------------


class RunInterrupted(Exception):
    """The run was stopped by Ctrl-C (SIGINT) after writing a checkpoint; ``--resume`` continues it."""


class NonFiniteLossError(ArithmeticError):
    """A loss or gradient became NaN/Inf; the message names the step, the last finite checkpoint is kept."""

    def __init__(self, message: str, step: int) -> None:
        super().__init__(message)
        self.step = step


@dataclass(frozen=True)
class RunResult:
    """A run folder and what it reached (read from its ``summary.json``).

    Attributes:
        path: the run folder.
        status: ``finished``, ``interrupted``, ``diverged``, ``failed`` (or ``running`` while it runs).
        step: the steps taken.
        final: the final metrics (training loss over the last logging window, evaluation metrics).
        summary: the whole ``summary.json``.
    """

    path: Path
    status: str
    step: int
    final: dict[str, float]
    summary: dict[str, Any]

    @classmethod
    def load(cls, path: str | os.PathLike) -> RunResult:
        """Read the run folder ``path``."""
        summary = json.loads((Path(path) / "summary.json").read_text())
        return cls(Path(path), summary["status"], summary["step"], summary.get("final", {}), summary)

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """The records of ``metrics.jsonl``."""
        return MetricsLog(self.path / "metrics.jsonl").read()


# ----------------------------------------------------------------------------------------------------------
# environment
# ----------------------------------------------------------------------------------------------------------


def _git_commit() -> dict[str, Any]:
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(dirty)}


def _source_hash() -> str:
    """SHA-256 over the package's own ``.py`` files (path and content): pins the code a run used, dirty tree
    or not (two runs with the same hash ran the same meanfield)."""
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parent
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux), else what ``platform`` knows."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def environment(cfg: RunConfig, device: torch.device) -> dict[str, Any]:
    """Package versions, git commit, seed, threads and device of a run (``environment.json``)."""
    from importlib import metadata

    versions = {}
    for name in ("meanfield-sde", "torch", "numpy", "scipy", "torchsde", "pot", "tensorboard"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    info = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "packages": versions,
        "git": _git_commit(),
        "source_sha256": _source_hash(),
        "seed": cfg.seed,
        "threads": torch.get_num_threads(),
        "device": str(device),
        "command": sys.argv,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
    }
    if device.type == "cuda":
        info["cuda_device"] = torch.cuda.get_device_name(device)
    return info


# ----------------------------------------------------------------------------------------------------------
# the training loop
# ----------------------------------------------------------------------------------------------------------


class _StopFlag:
    """SIGINT sets a flag the loop reads between steps (a second SIGINT raises at once)."""

    def __init__(self) -> None:
        self.set = False
        self._previous: Any = None

    def __enter__(self) -> _StopFlag:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.set:
            raise KeyboardInterrupt
        self.set = True

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def _process_group(device: torch.device) -> tuple[int, int, bool]:
    """``(rank, world, created)``: under torchrun (``WORLD_SIZE`` > 1) the default process group, initialised here
    if it is not yet (NCCL for CUDA, gloo otherwise; ``created`` says so); ``(0, 1, False)`` in a single process."""
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 and not (dist.is_available() and dist.is_initialized()):
        return 0, 1, False
    created = not dist.is_initialized()
    if created:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), dist.get_world_size(), created


def _batch_share(batch: Any, rank: int, world: int, size: int) -> Any:
    """Rank ``rank``'s rows ``[rank·size/world, (rank+1)·size/world)`` of every tensor of ``batch`` whose first
    axis is the batch (``size`` rows); other leaves are kept as they are."""
    if torch.is_tensor(batch):
        if batch.dim() and batch.shape[0] == size:
            share = size // world
            return batch[rank * share : (rank + 1) * share]
        return batch
    if isinstance(batch, (tuple, list)):
        return type(batch)(_batch_share(b, rank, world, size) for b in batch)
    if isinstance(batch, Mapping):
        return {k: _batch_share(v, rank, world, size) for k, v in batch.items()}
    return batch


def _all_reduce_scalar(value: float, device: torch.device, op: str = "sum") -> float:
    """``value`` reduced over the ranks (``"sum"``, ``"min"``, ``"max"``), through a tensor on ``device`` (NCCL
    reduces only CUDA tensors; gloo CPU ones)."""
    import torch.distributed as dist

    where = device if dist.get_backend() == "nccl" else torch.device("cpu")
    t = torch.tensor([value], dtype=torch.float64, device=where)
    dist.all_reduce(t, op={"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[op])
    return float(t.item())


def _average_gradients(model: torch.nn.Module, world: int) -> None:
    """Average every parameter's gradient over the ranks: one all-reduce of one flat buffer."""
    import torch.distributed as dist

    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])  # (P,)
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {name!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} was asked for but CUDA is not available here")
    return device


def _finite_parameters(model: torch.nn.Module) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def _stats_record(optimizer: Langevin) -> dict[str, Any]:
    record: dict[str, Any] = {}
    stats = optimizer.last_stats
    if stats is not None:
        record["optim"] = dataclasses.asdict(stats)
    groups = getattr(optimizer, "last_group_stats", None)
    if groups:
        record["groups"] = [None if s is None else dataclasses.asdict(s) for s in groups]
    return record


def _temperature(optimizer: Langevin) -> dict[str, float]:
    """β of the first noisy group at the step about to be taken (0 without noise), as the config gives it.

    A group in the seeds' ``temperature_convention = "loss"`` also gets ``beta_mean_field = M·β``, the
    temperature of the mean-field chain its noise actually realises (see docs/optim.md).
    """
    for group in optimizer.param_groups:
        if group["noise"]:
            beta = group["beta"]
            value = float(beta(group["step"]) if callable(beta) else beta)
            if group.get("temperature_convention", "mean_field") == "loss":
                return {"beta": value, "beta_mean_field": value * group["n_particles"]}
            return {"beta": value}
    return {"beta": 0.0}


class _TensorBoard:
    """Scalars of each metrics record into TensorBoard event files, when the package is installed."""

    def __init__(self, folder: Path, enabled: bool, start_step: int) -> None:
        self.writer = None
        if not enabled:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # the optional extra is not installed: nothing else depends on it
            return
        self.writer = SummaryWriter(str(folder), purge_step=start_step + 1 if start_step else None)

    def write(self, record: Mapping[str, Any]) -> None:
        if self.writer is None:
            return

        def flat(prefix: str, node: Any) -> Iterator[tuple[str, float]]:
            if isinstance(node, Mapping):
                for k, v in node.items():
                    yield from flat(f"{prefix}/{k}" if prefix else str(k), v)
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    yield from flat(f"{prefix}/{i}", v)
            elif isinstance(node, (int, float)) and not isinstance(node, bool):
                yield prefix, float(node)

        for tag, value in flat("", {k: v for k, v in record.items() if k != "step"}):
            self.writer.add_scalar(tag, value, record["step"])
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _checkpoint_state(
    experiment: Experiment,
    optimizer: Langevin,
    step: int,
    window: dict[str, float],
    elapsed: float,
    wall: float,
) -> dict[str, Any]:
    return {
        "step": step,
        "model": experiment.model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "batches": experiment.batches.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "window": dict(window),
        "elapsed": elapsed,
        "wall": wall,
    }


def _check_checkpointable(state: Mapping[str, Any]) -> None:
    """Write and read the state once through ``torch.save``/``torch.load(weights_only=True)`` in memory."""
    buffer = io.BytesIO()
    try:
        torch.save(dict(state), buffer)
        buffer.seek(0)
        torch.load(buffer, weights_only=True)
    except Exception as error:  # noqa: BLE001 — any failure here means the run could not be resumed
        raise ConfigError(
            f"this run's state cannot be checkpointed (torch.save + torch.load(weights_only=True)): {error}"
        ) from None


def _summary_table(final: Mapping[str, Any]) -> str:
    rows = [(k, f"{v:.6g}" if isinstance(v, float) else str(v)) for k, v in final.items()]
    width = max((len(k) for k, _ in rows), default=6)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def _draw_figures(folder: Path, records: list[dict[str, Any]], unit: str) -> None:
    from meanfield.plotting import figure, save

    if not records:
        return
    fig, (ax_loss, ax_beta) = figure(ncols=2, width=4.6)
    steps = [r["step"] for r in records if "train_loss" in r]
    ax_loss.plot(steps, [r["train_loss"] for r in records if "train_loss" in r], label="train loss")
    for key in sorted({k for r in records for k in r if k.startswith(("val_", "test_")) and "ppl" not in k}):
        pts = [(r["step"], r[key]) for r in records if r.get(key) is not None]
        ax_loss.plot(*zip(*pts), "o-", ms=3, label=key)
    ax_loss.set(xlabel="step", ylabel="loss", yscale="log", title="losses")
    ax_loss.legend()
    betas = [(r["step"], r["beta"]) for r in records if r.get("beta") is not None]
    if betas:
        ax_beta.plot(*zip(*betas), label="β_t")
    ratio = [(r["step"], r["optim"]["drift_to_noise"]) for r in records if r.get("optim")]
    ratio = [(s, v) for s, v in ratio if v is not None and math.isfinite(v) and v > 0]
    if ratio:
        ax_beta.plot(*zip(*ratio), label="drift/noise RMS")
    ax_beta.set(xlabel="step", yscale="log", title="temperature")
    ax_beta.legend()
    save(fig, folder / "figures" / "training.png")


def run(
    config: str | os.PathLike | Mapping[str, Any],
    out: str | os.PathLike | None = None,
    *,
    preset: str | None = None,
    overrides: Sequence[str] = (),
    resume: bool = False,
    quiet: bool = False,
    on_step: Callable[[int], None] | None = None,
) -> RunResult:
    """Train the configured task into the run folder ``out`` (see the module docstring for its files).

    Args:
        config: a TOML file or an already resolved configuration dict.
        out: the run folder (default ``runs/<config file stem>[-<preset>]``).
        preset: a preset of the file (``smoke``, ``quick``, ``full``, …); only with a file.
        overrides: ``"key.sub=value"`` strings, applied after the preset; only with a file.
        resume: continue from the folder's latest checkpoint (from step 0 if it has none). The resolved
            configuration must equal the folder's ``config.toml``.
        quiet: no progress bar and no summary printed.
        on_step: called with the step number after every step (after its logging and checkpoint).

    Returns:
        :class:`RunResult` of the finished run.

    Raises:
        ConfigError: a bad configuration, a folder that already holds another run, or a resume whose
            configuration differs from the folder's.
        RunInterrupted: Ctrl-C; a checkpoint of the last finished step was written.
        NonFiniteLossError: a NaN/Inf loss or gradient; the last checkpoint with finite parameters is kept.
    """
    if isinstance(config, Mapping):
        if preset is not None or overrides:
            raise ConfigError("preset and overrides apply to a configuration file, not to a resolved dict")
        resolved = dict(config)
        stem = "run"
    else:
        resolved = _config.resolve(_config.load_toml(config), preset, overrides)
        stem = Path(config).stem + (f"-{preset}" if preset else "")
    folder = Path(out) if out is not None else Path("runs") / stem
    r = _Run(resolved, folder, resume=resume, quiet=quiet, on_step=on_step)  # checks the configuration once
    result = r.train()
    if r.owns_group:  # every rank passed train()'s last barrier: tear down the group this run created, before
        import torch.distributed as dist  # the interpreter's exit does (gloo's threads may abort the process then)

        dist.destroy_process_group()
    return result


class _Run:
    """One run: the folder, the experiment, the optimizer and the loop (use :func:`run`)."""

    def __init__(
        self,
        resolved: dict[str, Any],
        folder: Path,
        *,
        resume: bool,
        quiet: bool,
        on_step: Callable[[int], None] | None,
    ) -> None:
        self.resolved, self.folder, self.quiet, self.on_step = resolved, folder, quiet, on_step
        self.cfg = check_config(resolved)
        self.config_text = _config.to_toml(
            resolved, header="resolved configuration of this run (meanfield run)"
        )
        self._check_folder(resume)
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        self.device = _device(self.cfg.device)
        self.rank, self.world, self.owns_group = _process_group(self.device)
        self.lead = self.rank == 0  # the rank that writes the folder
        self.sharded = self.world > 1 and self.cfg.parallel == "particles"
        self.data_parallel = self.world > 1 and not self.sharded
        if self.data_parallel and self.cfg.train.batch_size % self.world:
            raise ConfigError(
                f"train.batch_size = {self.cfg.train.batch_size} must be a multiple of the number of processes "
                f"({self.world}): each takes an equal share of the rows"
            )
        dtype = {"float32": torch.float32, "float64": torch.float64}[self.cfg.dtype]
        task = get_task(self.cfg.task)
        try:
            self.experiment = task.build(
                _config.from_dict(task.Data, self.cfg.data, "data"),
                _config.from_dict(task.Model, self.cfg.model, "model"),
                batch_size=self.cfg.train.batch_size,
                seed=self.cfg.seed,
                device=self.device,
                dtype=dtype,
            )
        except (ConfigError, CorruptDataError):
            raise
        except (TypeError, ValueError) as error:  # a value the schemas allow but the model or data refuse
            raise ConfigError(
                f"task {self.cfg.task!r} cannot be built from this configuration ([data], [model], "
                f"train.batch_size): {error}"
            ) from None
        if self.sharded:
            try:
                shard_particles(self.experiment.model)
            except ValueError as error:
                raise ConfigError(f"parallel = 'particles' on {self.world} processes: {error}") from None
        self.optimizer = build_optimizer(self.experiment.model, self.cfg)
        self.checkpoints = Checkpoints(folder / "checkpoints", self.cfg.train.keep_checkpoints)
        self.log = MetricsLog(folder / "metrics.jsonl")
        self.step, self.elapsed = 0, 0.0
        self._wall_origin = time.perf_counter()  # wall clock of this run, resumptions summed (see _wall)
        self.window = {"loss_sum": 0.0, "n": 0, "time": 0.0}
        self.best: dict[str, dict[str, float]] = {}
        _check_checkpointable(self._state())
        self._barrier()  # every rank has checked the folder before the first rank writes to it
        if self.lead:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.folder / "config.toml", self.config_text)  # once everything could be built
        if resume:
            self._restore()
        else:
            torch.manual_seed(derive_seed(self.cfg.seed, "torch"))  # the global generator (dropout, …)

    # -- folder -----------------------------------------------------------------------------------------------

    def _barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def _check_folder(self, resume: bool) -> None:
        config_path = self.folder / "config.toml"
        if config_path.exists():
            if not resume:
                raise ConfigError(
                    f"{self.folder} already holds a run: pass --resume to continue it, or another --out"
                )
            stored = _config.load_toml(config_path)
            if stored != _config.load_toml_text(self.config_text):
                changed = sorted(_differences(stored, self.resolved))
                raise ConfigError(
                    f"cannot resume {self.folder}: its configuration differs in {', '.join(changed)} "
                    "(resume with the same config, preset and overrides, or start a new --out)"
                )

    def _state(self) -> dict[str, Any]:
        """The checkpoint's contents; with sharded particles the full tensors, gathered (a collective)."""
        state = _checkpoint_state(
            self.experiment, self.optimizer, self.step, self.window, self.elapsed, self._wall()
        )
        if self.sharded:
            state["model"] = full_state_dict(self.experiment.model)
            state["optimizer"] = full_optimizer_state(self.optimizer)
        if self.device.type == "cuda":  # the device's global generator (dropout, … on the GPU)
            state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        return state

    def _wall(self) -> float:
        """Seconds of wall clock spent on this run so far: steps, logging, evaluation and checkpoints, summed
        over its resumptions (``summary.json``'s ``wall_clock_s``; ``wall_time_s`` counts the steps only)."""
        return time.perf_counter() - self._wall_origin

    def _restore(self) -> None:
        step = self.checkpoints.latest()
        env_path = self.folder / "environment.json"
        if step is not None and env_path.exists():
            before = json.loads(env_path.read_text()).get("world_size", 1)
            if before != self.world:
                how = "the particles are" if self.cfg.parallel == "particles" else "the batch is"
                warnings.warn(
                    f"{self.folder} ran on {before} process(es) and resumes on {self.world}: {how} split "
                    "differently, so the continuation equals the original run to round-off, not bit for bit",
                    stacklevel=3,
                )
        if step is None:
            if self.lead:
                self.log.truncate(0)
            torch.manual_seed(derive_seed(self.cfg.seed, "torch"))
            return
        # generator states must stay CPU ByteTensors; parameters and moments are copied onto the device by the
        # modules' and the optimizer's load_state_dict
        state = self.checkpoints.load(step, map_location="cpu")
        if self.sharded:  # the checkpoint holds the full tensors: each rank takes its rows
            load_full_state_dict(self.experiment.model, state["model"])
            load_full_optimizer_state(self.optimizer, state["optimizer"])
        else:
            self.experiment.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        self.experiment.batches.load_state_dict(state["batches"])
        torch.set_rng_state(state["torch_rng"])
        if "cuda_rng" in state and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["cuda_rng"], self.device)
        self.step, self.window, self.elapsed = state["step"], dict(state["window"]), state["elapsed"]
        self._wall_origin = time.perf_counter() - state.get("wall", state["elapsed"])
        if self.lead:
            self.log.truncate(self.step)
        self._barrier()
        for record in self.log.read():
            self._track_best(record)

    def _write_summary(self, status: str, final: Mapping[str, Any], error: str | None = None) -> None:
        if not self.lead:
            return
        summary = {
            "status": status,
            "step": self.step,
            "steps": self.cfg.train.steps,
            "task": self.cfg.task,
            "seed": self.cfg.seed,
            "wall_time_s": self.elapsed,
            "wall_clock_s": self._wall(),
            "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "unit": self.experiment.unit,
            f"{self.experiment.unit}_per_s": (
                self.step * self.experiment.units_per_step / self.elapsed if self.elapsed > 0 else None
            ),
            "final": dict(final),
            "best": self.best,
            "description": self.experiment.description,
        }
        if error is not None:
            summary["error"] = error
        write_json_atomic(self.folder / "summary.json", summary)

    def _track_best(self, record: Mapping[str, Any]) -> None:
        """The best value of each evaluation metric so far: the largest for the task's ``higher_is_better``
        metrics, the smallest for every other ``val_*``/``test_*`` metric (losses, errors, perplexities)."""
        higher = set(self.experiment.higher_is_better)
        for key, value in record.items():
            if not (key.startswith(("val_", "test_")) or key in higher):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            sign = -1.0 if key in higher else 1.0
            if key not in self.best or sign * value < sign * self.best[key]["value"]:
                self.best[key] = {"value": float(value), "step": record["step"]}

    # -- loop ---------------------------------------------------------------------------------------------------

    def _evaluate(self) -> dict[str, float]:
        model = self.experiment.model
        model.eval()
        try:
            with torch.no_grad():
                return {k: float(v) for k, v in self.experiment.evaluate().items()}
        finally:
            model.train()

    def _one_step(self) -> float:
        """One optimizer step; returns the loss. Raises NonFiniteLossError on a NaN/Inf loss or gradient."""
        exp, opt = self.experiment, self.optimizer
        batch = exp.next_batch()
        if self.data_parallel:  # every rank drew the same global batch; each takes its share of the rows
            batch = _batch_share(batch, self.rank, self.world, self.cfg.train.batch_size)
        opt.zero_grad(set_to_none=True)
        loss = exp.loss(batch)  # sharded particles: the whole batch's loss, the same on every rank
        value = float(loss.detach())
        if self.data_parallel:  # the whole batch's loss, the same on every rank (so all raise, or none)
            value = _all_reduce_scalar(value, self.device) / self.world
        if not math.isfinite(value):
            raise NonFiniteLossError(f"the training loss is {value} at step {self.step + 1}", self.step + 1)
        loss.backward()
        if self.data_parallel:  # (sharded particles: the replicated parameters' gradients are already equal)
            _average_gradients(exp.model, self.world)
        if self.sharded:
            # each rank checks its own particles' gradients, then all stop together: none waits for a lost one
            layers = sharded_layers(exp.model)
            grads = [p.grad for layer in layers for p in layer.parameters() if p.grad is not None]
            finite = float(torch.stack(torch._foreach_norm(grads)).isfinite().all()) if grads else 1.0
            if not _all_reduce_scalar(finite, self.device, "min"):
                raise NonFiniteLossError(
                    f"step {self.step + 1}: a particle gradient on some rank is not finite (NaN or Inf); no rank "
                    "stepped",
                    self.step + 1,
                )
        if exp.on_backward is not None:
            exp.on_backward()
        try:
            opt.step()
        except ValueError as error:
            if "non-finite" in str(error):
                raise NonFiniteLossError(f"step {self.step + 1}: {error}", self.step + 1) from None
            raise
        return value

    def _record(self, final: bool) -> dict[str, Any] | None:
        cfg, window = self.cfg.train, self.window
        due_eval = (cfg.eval_every and self.step % cfg.eval_every == 0) or final
        if not (self.step % cfg.log_every == 0 or due_eval):
            return None
        record: dict[str, Any] = {"step": self.step, "time": self.elapsed}
        if window["n"]:
            record["train_loss"] = window["loss_sum"] / window["n"]
            rate = (
                window["n"] * self.experiment.units_per_step / window["time"] if window["time"] > 0 else None
            )
            record[f"{self.experiment.unit}_per_s"] = rate
        record.update(_temperature(self.optimizer))
        record.update(_stats_record(self.optimizer))
        if self.experiment.window_metrics is not None:
            record.update(self.experiment.window_metrics())
        if due_eval:
            record.update(self._evaluate())
        self.window = {"loss_sum": 0.0, "n": 0, "time": 0.0}
        return record

    def train(self) -> RunResult:
        cfg = self.cfg.train
        if self.step >= cfg.steps:
            return self._finish()
        env = environment(self.cfg, self.device)
        env["world_size"] = self.world
        if self.step:
            env["resumed_from_step"] = self.step
        if self.lead:
            write_json_atomic(self.folder / "environment.json", env)
        self._write_summary("running", {})
        board = _TensorBoard(self.folder / "tensorboard", cfg.tensorboard and self.lead, self.step)
        bar = tqdm(
            total=cfg.steps,
            initial=self.step,
            disable=self.quiet or not self.lead,
            unit="step",
            dynamic_ncols=True,
            desc=self.folder.name,
        )
        try:
            with _StopFlag() as stop:
                while self.step < cfg.steps:
                    start = time.perf_counter()
                    loss = self._one_step()
                    spent = time.perf_counter() - start
                    self.step += 1
                    self.elapsed += spent
                    self.window["loss_sum"] += loss
                    self.window["n"] += 1
                    self.window["time"] += spent
                    record = self._record(final=self.step == cfg.steps)
                    if record is not None:
                        if self.lead:
                            self.log.append(record)
                        board.write(record)
                        self._track_best(record)
                        rate = record.get(f"{self.experiment.unit}_per_s")
                        bar.set_postfix(
                            loss=f"{record.get('train_loss', math.nan):.4g}",
                            **({f"{self.experiment.unit}/s": f"{rate:.3g}"} if rate else {}),
                        )
                    bar.update(1)
                    if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0:
                        self._checkpoint()
                    if self.on_step is not None:
                        self.on_step(self.step)
                    if stop.set:
                        self._checkpoint()
                        self._write_summary("interrupted", self._final())
                        raise RunInterrupted(
                            f"interrupted at step {self.step}; checkpoint written, continue with --resume"
                        )
                self._checkpoint()  # the end is always saved
        except NonFiniteLossError as error:
            self._write_summary("diverged", self._final(), error=str(error))
            raise NonFiniteLossError(
                f"{error}; the run stopped, the last checkpoint with finite parameters is "
                f"{self._describe_latest()}",
                error.step,
            ) from None
        except (RunInterrupted, KeyboardInterrupt):
            if self.lead and (not (self.folder / "summary.json").exists() or self._status() == "running"):
                self._write_summary("interrupted", self._final())
            raise
        except BaseException as error:
            self._write_summary("failed", self._final(), error=f"{type(error).__name__}: {error}")
            raise
        finally:
            bar.close()
            board.close()
        return self._finish()

    def _status(self) -> str:
        return json.loads((self.folder / "summary.json").read_text())["status"]

    def _describe_latest(self) -> str:
        step = self.checkpoints.latest()
        return "none (the run must start again)" if step is None else str(self.checkpoints.path(step))

    def _checkpoint(self) -> None:
        if not (self.lead or self.sharded):  # sharded: every rank takes part in gathering the shards
            return
        saved = self.lead and self.checkpoints.latest() == self.step
        finite = _finite_parameters(self.experiment.model)
        if self.sharded:  # the lead's answer, and every rank's own particles
            saved = bool(_all_reduce_scalar(float(saved), self.device, "max"))
            finite = bool(_all_reduce_scalar(float(finite), self.device, "min"))
        if saved:
            return
        if not finite:
            raise NonFiniteLossError(f"the parameters are not finite after step {self.step}", self.step)
        state = self._state()
        if self.lead:
            self.checkpoints.save(state, self.step)

    def _final(self) -> dict[str, Any]:
        records = self.log.read()
        final: dict[str, Any] = {}
        for record in records:  # the latest value of each metric
            final.update({k: v for k, v in record.items() if k not in ("optim", "groups", *TIMING_KEYS)})
        final.pop("step", None)
        return final

    def _finish(self) -> RunResult:
        self._barrier()  # every rank has finished its steps
        final = self._final()
        self._write_summary("finished", final)
        if self.cfg.train.figures and self.lead:
            _draw_figures(self.folder, self.log.read(), self.experiment.unit)
        self._barrier()  # the summary is written before any rank reads it
        if not self.quiet and self.lead:
            print(
                f"{self.folder}: finished {self.step} steps in {self.elapsed:.1f} s\n{_summary_table(final)}"
            )
        return RunResult.load(self.folder)


def _differences(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    for key in set(a) | set(b):
        va, vb = a.get(key), b.get(key)
        name = f"{prefix}{key}"
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            yield from _differences(va, vb, name + ".")
        elif va != vb:
            yield name
