"""The training loop: [`run`][meanfield.runs.loop.run] builds the task, the optimizer and the folder, steps, logs, evaluates,
checkpoints, and stops cleanly on Ctrl-C or a non-finite loss.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from meanfield import config as _config
from meanfield._checks import asked_bytes, format_bytes, memory_available
from meanfield._display import seconds
from meanfield._io import write_text_atomic
from meanfield.config import ConfigError
from meanfield.data import CorruptDataError
from meanfield.nn.gibbs import free_energy
from meanfield.nn.sharded import (
    full_optimizer_state,
    full_state_dict,
    load_full_optimizer_state,
    load_full_state_dict,
    shard_particles,
    sharded_layers,
)
from meanfield.optim import Langevin
from meanfield.optim.groups import beta_value, mean_field_beta
from meanfield.progress import progress_default
from meanfield.runs import parallel
from meanfield.runs.environment import environment, provenance, read_environment, record_environment
from meanfield.runs.folder import (
    Checkpoints,
    CorruptCheckpointError,
    DiskFullError,
    MetricsLog,
    RunFolderError,
    RunResult,
    RunSummary,
    check_folder,
    config_hash,
    remove_temporaries,
    write_error,
    write_marker,
)
from meanfield.runs.lock import FolderLock
from meanfield.runs.schema import RunConfig, build_optimizer, check_config, model_options
from meanfield.runs.sinks import TensorBoard, draw_figures, summary_table
from meanfield.seeds import derive_seed
from meanfield.tasks import Experiment, get_task, task_source

__all__ = [
    "run",
    "preflight",
    "build_experiment",
    "RunInterrupted",
    "NonFiniteLossError",
    "STOP_SIGNALS",
    "StopFlag",
]


class RunInterrupted(Exception):
    """The run was stopped by Ctrl-C (SIGINT) or SIGTERM after writing a checkpoint; ``--resume`` continues it.

    Attributes:
        signum: the signal that stopped it (``signal.SIGINT`` or ``signal.SIGTERM``); a command exits with
            ``128 + signum`` (130, 143), as a shell reports a process killed by it.
    """

    def __init__(self, message: str, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signum = int(signum)

    def __reduce__(self) -> tuple:  # across processes (a sweep's workers) with its signal
        return (type(self), (str(self), self.signum))


class NonFiniteLossError(ArithmeticError):
    """A loss, gradient or evaluation metric became NaN/Inf; the message names the step, the last finite
    checkpoint is kept."""

    def __init__(self, message: str, step: int) -> None:
        super().__init__(message)
        self.step = step


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals a run stops on cleanly (SIGTERM is what SLURM, Kubernetes and ``timeout`` send)."""


class StopFlag:
    """``with StopFlag() as stop:``: SIGINT or SIGTERM sets ``stop.signum``, which a loop reads between steps; a
    second one raises ``KeyboardInterrupt`` at once. The handlers found are put back on exit (main thread only:
    elsewhere Python allows no handler). Subclasses change what a signal does in [`_handle`][meanfield.runs.loop.StopFlag._handle]."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def set(self) -> bool:
        """Whether a stop signal arrived."""
        return self.signum is not None

    def __enter__(self) -> StopFlag:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.set:
            raise KeyboardInterrupt
        self.signum = signum

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


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


def _finite_checker(model: torch.nn.Module) -> Callable[[Path, Mapping[str, Any]], None]:
    """``verify(path, state)`` for [`load_good`][meanfield.runs.loop.Checkpoints.load_good]: refuse a checkpoint whose parameters of
    ``model`` are not all finite. A run checks them before it writes one, so such a file was changed afterwards
    (and re-signed), and resuming from it would diverge at once."""
    names = {name for name, _ in model.named_parameters()}

    def verify(path: Path, state: Mapping[str, Any]) -> None:
        bad = [
            name
            for name, value in state.get("model", {}).items()
            if name in names
            and torch.is_tensor(value)
            and value.is_floating_point()
            and not bool(torch.isfinite(value).all())
        ]
        if bad:
            raise CorruptCheckpointError(
                path,
                f"its parameters {', '.join(bad[:3])} hold NaN or Inf; a run checks them finite before it "
                "writes a checkpoint, so the file was changed afterwards",
            )

    return verify


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

    Where that is not the temperature of the mean-field chain the group's noise realises, ``beta_mean_field``
    says it (see docs/optim.md): ``M·β`` for the seeds' ``temperature_convention = "loss"``, and for a group
    without the mean-field scaling (its law is that of the scaled chain at ``M·β``, ``M·λ``).
    """
    for gi, group in enumerate(optimizer.param_groups):
        if group["noise"]:
            value = beta_value(group, gi)
            mean_field = mean_field_beta(group, value)
            return {"beta": value} if mean_field == value else {"beta": value, "beta_mean_field": mean_field}
    return {"beta": 0.0}


def _free_energy(model: torch.nn.Module, loss: float, optimizer: Langevin) -> dict[str, float]:
    """``train.free_energy``: ``F = loss + penalty − Σ β·H`` of the particle layers (``meanfield.nn.free_energy``
    with the optimizer's β_t and weight decay), ``loss`` the window's mean training loss."""
    F = free_energy(model, loss, optimizer)
    return {"free_energy": F.value, "free_energy_se": F.se, "entropy_term": F.entropy_term}


def _checkpoint_state(
    experiment: Experiment,
    optimizer: Langevin,
    step: int,
    window: dict[str, float],
    elapsed: float,
    wall: float,
) -> dict[str, Any]:
    state = {
        "step": step,
        "model": experiment.model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "batches": experiment.batches.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "window": dict(window),
        "elapsed": elapsed,
        "wall": wall,
    }
    window_metrics = experiment.window_state() if experiment.window_state is not None else {}
    if window_metrics:  # a checkpoint between two metrics lines (Ctrl-C): the task's window so far
        state["window_metrics"] = window_metrics
    return state


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


def build_experiment(cfg: RunConfig, device: torch.device) -> Experiment:
    """The task's [`Experiment`][meanfield.tasks.Experiment] (model, data, loss) for a checked configuration.

    Raises:
        ConfigError: a value the schemas allow but the model or data refuse (``n_particles = -1``, …).
        CorruptDataError: a data file that does not match its checksum.
    """
    dtype = {"float32": torch.float32, "float64": torch.float64}[cfg.dtype]
    task = get_task(cfg.task)
    try:
        return task.build(
            _config.from_dict(task.Data, cfg.data, "data"),
            _config.from_dict(task.Model, model_options(task, cfg), "model"),
            batch_size=cfg.train.batch_size,
            seed=cfg.seed,
            device=device,
            dtype=dtype,
        )
    except (ConfigError, CorruptDataError):
        raise
    except (TypeError, ValueError) as error:  # a value the schemas allow but the model or data refuse
        raise ConfigError(
            f"task {cfg.task!r} cannot be built from this configuration ([data], [model], "
            f"train.batch_size): {error}"
        ) from None
    except (RuntimeError, MemoryError) as error:  # an allocation refused: sizes that cannot fit here
        asked = asked_bytes(error)
        if asked is None and not isinstance(error, (MemoryError, torch.OutOfMemoryError)):
            raise
        memory = memory_available(device)
        there = (
            f"{device} has {format_bytes(memory[0])} of memory available ({format_bytes(memory[1])} in all)"
            if memory is not None
            else f"{device} has not that much memory"
        )
        raise ConfigError(
            f"task {cfg.task!r} cannot be built from this configuration: one of its tensors needs "
            f"{format_bytes(asked) if asked is not None else 'more memory than there is'}, and {there}; reduce "
            "the sizes of [model] and [data] (n_particles, widths, n_train, …)"
        ) from None


def preflight(resolved: Mapping[str, Any]) -> None:
    """Check that a resolved configuration can start a run, writing nothing: the schemas, the task's model and
    data built, the optimizer built (what [`meanfield.runs.sweeps.sweep_runs`][meanfield.runs.sweeps.sweep_runs] does for every point up front).

    Raises:
        ConfigError: naming what is wrong.
    """
    cfg = check_config(resolved)
    build_optimizer(build_experiment(cfg, _device(cfg.device)).model, cfg)


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
        [`RunResult`][meanfield.runs.folder.RunResult] of the finished run.

    Raises:
        ConfigError: a bad configuration, a folder that already holds another run, or a resume whose
            configuration differs from the folder's.
        RunInterrupted: Ctrl-C or SIGTERM; a checkpoint of the last finished step was written.
        NonFiniteLossError: a NaN/Inf loss, gradient or evaluation metric; the last checkpoint with finite
            parameters is kept.
        FolderLocked: another live process writes the folder.
        RunFolderError: the folder holds another run's files, or a damaged file that cannot be skipped.
        DiskFullError: no space left on the device; the earlier checkpoints are intact.
        FolderAccessError: a read-only file system or no permission to write the folder (the file named).
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
    threads = torch.get_num_threads()  # a run's `threads` is its own: put the caller's back afterwards
    try:
        r = _Run(
            resolved, folder, resume=resume, quiet=quiet, on_step=on_step
        )  # checks the configuration once
        try:
            result = r.train()
        finally:
            r.release()
    except OSError as error:  # a full disk, a read-only folder: one error naming the file and what to do
        converted = write_error(error)
        if converted is error:
            raise
        raise converted from None
    finally:
        torch.set_num_threads(threads)
    if r.owns_group:  # every rank passed train()'s last barrier: tear down the group this run created, before
        import torch.distributed as dist  # the interpreter's exit does (gloo's threads may abort the process then)

        dist.destroy_process_group()
    return result


class _Run(RunSummary):
    """One run: the folder, the experiment, the optimizer and the loop (use [`run`][meanfield.runs.loop.run])."""

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
        check_folder(folder, self.config_text, resolved, resume)
        self.task_source = task_source(self.cfg.task)  # a "module:attribute" task is code the config imports
        if self.task_source is not None and not quiet:
            print(f"{folder}: task {self.cfg.task!r} runs code imported from {self.task_source}")
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        try:
            self.device = parallel.rank_device(_device(self.cfg.device))  # torchrun: cuda → cuda:LOCAL_RANK
        except ValueError as error:
            raise ConfigError(f"device: {error}") from None
        self.rank, self.world, self.owns_group = parallel.process_group(self.device)
        self.lead = self.rank == 0  # the rank that writes the folder
        self.sharded = self.world > 1 and self.cfg.parallel == "particles"
        self.data_parallel = self.world > 1 and not self.sharded
        if self.data_parallel and self.cfg.train.batch_size % self.world:
            raise ConfigError(
                f"train.batch_size = {self.cfg.train.batch_size} must be a multiple of the number of processes "
                f"({self.world}): each takes an equal share of the rows"
            )
        self.experiment = build_experiment(self.cfg, self.device)
        if self.sharded:
            try:
                shard_particles(self.experiment.model)
            except ValueError as error:
                raise ConfigError(f"parallel = 'particles' on {self.world} processes: {error}") from None
        self.optimizer = build_optimizer(self.experiment.model, self.cfg)
        if self.cfg.train.free_energy:  # refused up front, not at the first metrics line
            if self.sharded:
                raise ConfigError(
                    "train.free_energy needs every particle on one process (not parallel = 'particles')"
                )
            try:
                _free_energy(self.experiment.model, 0.0, self.optimizer)
            except (TypeError, ValueError) as error:
                raise ConfigError(f"train.free_energy = true: {error}") from None
        self.checkpoints = Checkpoints(folder / "checkpoints", self.cfg.train.keep_checkpoints)
        self.log = MetricsLog(folder / "metrics.jsonl")
        self.step, self.elapsed = 0, 0.0
        self._wall_origin = time.perf_counter()  # wall clock of this run, resumptions summed (see _wall)
        self.window = {"loss_sum": 0.0, "n": 0, "time": 0.0}
        self.best: dict[str, dict[str, float]] = {}
        self.provenance: dict[
            str, Any
        ] = {}  # what produced the steps (environment.provenance): in checkpoints
        _check_checkpointable(self._state())
        self.config_sha256 = config_hash(self.config_text)
        self.lock = FolderLock(folder, "run")
        self._barrier()  # every rank has checked the folder before the first rank writes to it
        try:
            if self.lead:  # once everything could be built: the lock, then the folder's files
                self.lock.acquire()
                check_folder(folder, self.config_text, resolved, resume)  # again, under the lock
                if self.lock.stale is not None and not quiet:
                    print(
                        f"{folder}: the lock of a run that is gone was taken over ({self.lock.stale.get('pid')})"
                    )
                remove_temporaries(folder)
                # config.toml first: a kill between the two leaves a folder that resumes (a run.json alone
                # would be refused for ever as another run's remains)
                write_text_atomic(self.folder / "config.toml", self.config_text)
                write_marker(folder, self.config_sha256)
            if resume:
                self._restore()
            else:
                torch.manual_seed(derive_seed(self.cfg.seed, "torch"))  # the global generator (dropout, …)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Release the folder's lock (every exit path of [`run`][meanfield.runs.loop.run] calls it)."""
        self.lock.release()

    # -- folder -----------------------------------------------------------------------------------------------

    def _barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

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
        """Load the newest checkpoint that verifies (the lead sets damaged ones aside first, saying so)."""
        if self.lead:
            step, state, skipped = self.checkpoints.load_good(
                map_location="cpu", verify=_finite_checker(self.experiment.model)
            )
            for line in skipped:
                warnings.warn(f"{line}; resuming from an earlier checkpoint", stacklevel=3)
            if skipped and step is None:
                warnings.warn(
                    f"{self.folder}: no checkpoint verifies; the run starts again from step 0", stacklevel=3
                )
        self._barrier()  # the damaged checkpoints are aside before the other ranks look
        if not self.lead:
            step = self.checkpoints.latest()
            state = None if step is None else self.checkpoints.load(step, map_location="cpu")
        recorded = read_environment(self.folder / "environment.json") if step is not None else None
        if recorded is not None:
            before = recorded.get("world_size", 1)
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
        meta = self.checkpoints.record(step) or {}
        if meta.get("config_sha256", self.config_sha256) != self.config_sha256:
            raise RunFolderError(
                f"{self.checkpoints.path(step)} was written by a run of another configuration (config hash "
                f"{meta['config_sha256'][:12]}…, this run's {self.config_sha256[:12]}…): refusing to mix two runs; "
                "use another --out"
            )
        # generator states must stay CPU ByteTensors; parameters and moments are copied onto the device by the
        # modules' and the optimizer's load_state_dict
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
        if self.experiment.load_window_state is not None:
            self.experiment.load_window_state(state.get("window_metrics", {}))
        self._wall_origin = time.perf_counter() - state.get("wall", state["elapsed"])
        if self.lead:
            self.log.truncate(self.step)
        self._barrier()
        for record in self.log.read():
            self._track_best(record)

    # -- loop ---------------------------------------------------------------------------------------------------

    def _evaluate(self) -> dict[str, float]:
        model = self.experiment.model
        model.eval()
        try:
            with torch.no_grad():
                metrics = {k: float(v) for k, v in self.experiment.evaluate().items()}
        finally:
            model.train()
        allowed = set(self.experiment.nonfinite_metrics)
        bad = {k: v for k, v in metrics.items() if not math.isfinite(v) and k not in allowed}
        if bad:
            listed = ", ".join(f"{k} = {v}" for k, v in bad.items())
            raise NonFiniteLossError(f"the evaluation at step {self.step} gave {listed}", self.step)
        return metrics

    def _one_step(self) -> float:
        """One optimizer step; returns the loss. Raises NonFiniteLossError on a NaN/Inf loss or gradient."""
        exp, opt = self.experiment, self.optimizer
        batch = exp.next_batch()
        if self.data_parallel:  # every rank drew the same global batch; each takes its share of the rows
            batch = parallel.batch_share(batch, self.rank, self.world, self.cfg.train.batch_size)
        opt.zero_grad(set_to_none=True)
        loss = exp.loss(batch)  # sharded particles: the whole batch's loss, the same on every rank
        value = float(loss.detach())
        if self.data_parallel:  # the whole batch's loss, the same on every rank (so all raise, or none)
            value = parallel.all_reduce_scalar(value, self.device) / self.world
        if not math.isfinite(value):
            raise NonFiniteLossError(f"the training loss is {value} at step {self.step + 1}", self.step + 1)
        loss.backward()
        if self.data_parallel:  # (sharded particles: the replicated parameters' gradients are already equal)
            parallel.average_gradients(exp.model, self.world)
        if self.sharded:
            # each rank checks its own particles' gradients, then all stop together: none waits for a lost one
            layers = sharded_layers(exp.model)
            grads = [p.grad for layer in layers for p in layer.parameters() if p.grad is not None]
            finite = float(torch.stack(torch._foreach_norm(grads)).isfinite().all()) if grads else 1.0
            if not parallel.all_reduce_scalar(finite, self.device, "min"):
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
        if self.cfg.train.free_energy and "train_loss" in record:
            record.update(_free_energy(self.experiment.model, record["train_loss"], self.optimizer))
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
        if self.task_source is not None:
            env["task_source"] = self.task_source
        self.provenance = provenance(env)
        if self.step:
            env["resumed_from_step"] = self.step
        if self.lead:
            changes = record_environment(self.folder / "environment.json", env)
            if changes and self.step:
                warnings.warn(
                    f"{self.folder} resumes at step {self.step} under other code than its earlier steps: "
                    f"{'; '.join(changes)} (the earlier records are kept in environment.json's 'earlier')",
                    stacklevel=3,
                )
        self._write_summary("running", {})
        board = TensorBoard(self.folder / "tensorboard", cfg.tensorboard and self.lead, self.step)
        bar = tqdm(
            total=cfg.steps,
            initial=self.step,
            disable=self.quiet or not self.lead or not progress_default(),  # meanfield.progress's policy
            unit="step",
            dynamic_ncols=True,
            desc=self.folder.name,
        )
        try:
            with StopFlag() as stop:
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
                    if self._stopping(stop):
                        self._checkpoint()
                        self._write_summary("interrupted", self._final())
                        signum = stop.signum or signal.SIGTERM  # a rank stopped by another rank's signal
                        raise RunInterrupted(
                            f"interrupted by {signal.Signals(signum).name} at step {self.step}; checkpoint "
                            "written, continue with --resume",
                            signum,
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
        except DiskFullError as error:
            with contextlib.suppress(OSError):  # the summary may not fit either: the error is what matters
                self._write_summary("failed", self._final(), error=str(error))
            raise
        except BaseException as error:
            with contextlib.suppress(OSError):
                self._write_summary("failed", self._final(), error=f"{type(error).__name__}: {error}")
            raise
        finally:
            bar.close()
            board.close()
        return self._finish()

    def _stopping(self, stop: StopFlag) -> bool:
        """Whether to stop after this step: a signal on any rank stops every rank after the same step (a
        signal reaches the ranks of torchrun at different steps; one rank stopping alone would leave the
        others in a collective it never joins)."""
        if self.world == 1:
            return stop.set
        return bool(parallel.all_reduce_scalar(float(stop.set), self.device, "max"))

    def _describe_latest(self) -> str:
        step = self.checkpoints.latest()
        return "none (the run must start again)" if step is None else str(self.checkpoints.path(step))

    def _checkpoint(self) -> None:
        if not (self.lead or self.sharded):  # sharded: every rank takes part in gathering the shards
            return
        saved = self.lead and self.checkpoints.latest() == self.step
        finite = _finite_parameters(self.experiment.model)
        if self.sharded:  # the lead's answer, and every rank's own particles
            saved = bool(parallel.all_reduce_scalar(float(saved), self.device, "max"))
            finite = bool(parallel.all_reduce_scalar(float(finite), self.device, "min"))
        if saved:
            return
        if not finite:
            raise NonFiniteLossError(f"the parameters are not finite after step {self.step}", self.step)
        state = self._state()
        if self.lead:
            self.checkpoints.save(
                state, self.step, meta={"config_sha256": self.config_sha256, **self.provenance}
            )

    def _finish(self) -> RunResult:
        self._barrier()  # every rank has finished its steps
        final = self._final()
        self._write_summary("finished", final)
        if self.cfg.train.figures and self.lead:
            draw_figures(self.folder, self.log.read(), self.experiment.unit)
        self._barrier()  # the summary is written before any rank reads it
        if not self.quiet and self.lead:
            print(
                f"{self.folder}: finished {self.step} steps in {seconds(self.elapsed)}\n{summary_table(final)}"
            )
        return RunResult.load(self.folder)
