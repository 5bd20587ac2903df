"""Runs: train a task from a TOML configuration into a run folder that survives interruption.

``meanfield run CONFIG.toml [--preset NAME] [--set key=value …] [--out DIR] [--resume]`` (or [`run`][meanfield.runs.loop.run])
builds the task's model and data, a [`Langevin`][meanfield.optim.langevin.Langevin] optimizer from ``[optim]``, and trains
``train.steps`` steps. A run is a folder::

    config.toml         the fully resolved configuration (preset and overrides applied)
    environment.json    package versions, git commit, seed, threads, device, command line
    metrics.jsonl       one JSON object per logged step: step, wall time, throughput, losses, β, the
                        optimizer's statistics (and the evaluation metrics at evaluation steps)
    summary.json        status (running, finished, interrupted, diverged, failed), final and best metrics
    figures/            training curves (PNG)
    checkpoints/        step-NNNNNNNN.pt, the last ``train.keep_checkpoints`` kept
    tensorboard/        event files, when the ``tensorboard`` package is installed

Every file is written atomically (`meanfield._io`). A checkpoint holds the model, the optimizer (with
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
[`RunInterrupted`][meanfield.runs.loop.RunInterrupted] (a second Ctrl-C stops at once); a non-finite loss or gradient raises
[`NonFiniteLossError`][meanfield.runs.loop.NonFiniteLossError] naming the step, keeping the last checkpoint, whose parameters are finite.

**Layout.** `config` (the schemas, [`load_config`][meanfield.runs.schema.load_config], [`check_config`][meanfield.runs.schema.check_config], the
optimizer of ``[optim]``), `folder` (checkpoints, the metrics log, [`RunResult`][meanfield.runs.folder.RunResult]),
`environment` (``environment.json``), `loop` ([`run`][meanfield.runs.loop.run] and the
training loop), `parallel` (process groups, all-reduces), `sinks`
(TensorBoard, figures, the summary table), `lock` (one writer per folder),
`trained` (a checkpoint's model back, [`load_model`][meanfield.runs.trained.load_model]; a sweep's runs by configuration,
[`find_runs`][meanfield.runs.trained.find_runs]).
"""

from meanfield.runs.environment import environment
from meanfield.runs.folder import (
    STATUSES,
    TIMING_KEYS,
    Checkpoints,
    CorruptCheckpointError,
    DiskFullError,
    FolderAccessError,
    MetricsLog,
    RunFolderError,
    RunResult,
)
from meanfield.runs.lock import FolderLock, FolderLocked
from meanfield.runs.loop import STOP_SIGNALS, NonFiniteLossError, RunInterrupted, preflight, run
from meanfield.runs.schema import (
    OPTIM_OPTIONS,
    RunConfig,
    TrainConfig,
    build_optimizer,
    check_config,
    load_config,
)
from meanfield.runs.trained import TrainedModel, find_runs, load_model
from meanfield.seeds import derive_seed

__all__ = [
    "TrainConfig",
    "RunConfig",
    "RunResult",
    "RunInterrupted",
    "NonFiniteLossError",
    "Checkpoints",
    "MetricsLog",
    "RunFolderError",
    "CorruptCheckpointError",
    "DiskFullError",
    "FolderAccessError",
    "FolderLock",
    "FolderLocked",
    "load_config",
    "check_config",
    "build_optimizer",
    "environment",
    "derive_seed",
    "run",
    "preflight",
    "load_model",
    "find_runs",
    "TrainedModel",
    "STOP_SIGNALS",
    "OPTIM_OPTIONS",
    "STATUSES",
    "TIMING_KEYS",
]
