"""The run folder's files: checkpoints, the metrics log, the summary ([`RunResult`][meanfield.runs.folder.RunResult]), and the check that a
folder may take this run.

Every file is written atomically (`meanfield._io`): a reader sees the old file or the new one, never half.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import math
import os
import pickle
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from meanfield import config as _config
from meanfield._io import json_clean, write_atomic, write_json_atomic, write_text_atomic
from meanfield.config import ConfigError
from meanfield.runs.errors import DiskFullError, FolderAccessError, RunFolderError

__all__ = [
    "STATUSES",
    "TIMING_KEYS",
    "Checkpoints",
    "MetricsLog",
    "RunResult",
    "RunSummary",
    "RunFolderError",
    "CorruptCheckpointError",
    "DiskFullError",
    "FolderAccessError",
    "write_error",
    "check_folder",
    "config_hash",
    "config_differences",
    "write_marker",
    "remove_temporaries",
    "MARKER",
]

STATUSES = ("running", "finished", "interrupted", "diverged", "failed")
"""The values of ``summary.json``'s ``status``."""
TIMING_KEYS = ("time", "step_time", "samples_per_s", "tokens_per_s", "particles_per_s")
"""Metrics that depend on the machine, not on the computation (left out of resume-equality checks)."""


def disk_full(path: Path, error: OSError, intact: str) -> DiskFullError:
    """The [`DiskFullError`][meanfield.runs.errors.DiskFullError] of a failed write of ``path`` (``intact``: what is still there)."""
    return DiskFullError(
        errno.ENOSPC, f"no space left on device writing {path} ({error.strerror or error}); {intact}"
    )


ACCESS_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)
"""The ``errno`` values that [`write_error`][meanfield.runs.folder.write_error] turns into a [`FolderAccessError`][meanfield.runs.errors.FolderAccessError]."""


def write_error(error: OSError, path: str | os.PathLike | None = None) -> OSError:
    """A [`FolderAccessError`][meanfield.runs.errors.FolderAccessError] naming the file and what to do for an [`ACCESS_ERRNOS`][meanfield.runs.folder.ACCESS_ERRNOS] error
    (``path``: the file, when the error does not name it); any other error is returned as it is."""
    if isinstance(error, RunFolderError) or error.errno not in ACCESS_ERRNOS:
        return error
    where = error.filename if error.filename is not None else path
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return disk_full(
            Path(str(where)),
            error,
            "the files written before are intact: free some space, then run the same "
            "command again (with --resume for a run)",
        )
    if error.errno == errno.EROFS:
        text = (
            f"cannot write {where}: the file system is read-only; remount it read-write, or copy the folder to a "
            "writable place and run there"
        )
    else:
        text = (
            f"cannot write {where}: permission denied ({error.strerror}); give this user write access to the "
            "folder, or use another --out"
        )
    return FolderAccessError(error.errno, text)


def _is_disk_full(error: OSError) -> bool:
    """ENOSPC or EDQUOT (checkpoints are serialised in memory first, so torch's own writer never meets a full
    disk and its ``unexpected pos`` errors cannot arise)."""
    return error.errno in (errno.ENOSPC, errno.EDQUOT)


class Checkpoints:
    """``checkpoints/step-NNNNNNNN.pt`` files with their records ``step-NNNNNNNN.json``, the latest ``keep`` kept.

    A checkpoint is a ``torch.save`` file that loads with ``torch.load(path, weights_only=True)``. Its record,
    written before it, holds the SHA-256 and size of the file, the step, and what the run passes as ``meta``
    (the config's hash and the provenance), so that [`load`][meanfield.runs.folder.Checkpoints.load] verifies the bytes it reads: a flipped byte, a
    truncated or an emptied file is a [`CorruptCheckpointError`][meanfield.runs.folder.CorruptCheckpointError] naming the file, never a silently
    different run. [`load_good`][meanfield.runs.folder.Checkpoints.load_good] falls back to the newest checkpoint that verifies, moving the bad ones
    into ``checkpoints/corrupt/``.

    Args:
        folder: the checkpoint folder.
        keep: how many to keep (older ones are deleted after a new one is written).
    """

    PATTERN = re.compile(r"step-(\d+)\.pt$")

    def __init__(self, folder: str | os.PathLike, keep: int = 2) -> None:
        self.folder = Path(folder)
        self.keep = keep

    def steps(self) -> list[int]:
        """The steps that have a checkpoint, ascending.

        Raises:
            RunFolderError: the folder's path is a file (or anything but a folder).
        """
        if not self.folder.is_dir():
            if self.folder.exists() or self.folder.is_symlink():
                raise RunFolderError(
                    f"{self.folder} is not a folder (a file stands where the checkpoints go): move it away, "
                    "then run again (with --resume, a run without checkpoints starts from step 0)"
                )
            return []
        found = (self.PATTERN.match(p.name) for p in self.folder.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def path(self, step: int) -> Path:
        """The file of the checkpoint at ``step``."""
        return self.folder / f"step-{step:08d}.pt"

    def record_path(self, step: int) -> Path:
        """The record (checksum, step, meta) of the checkpoint at ``step``."""
        return self.folder / f"step-{step:08d}.json"

    def save(self, state: Mapping[str, Any], step: int, meta: Mapping[str, Any] | None = None) -> Path:
        """Write ``state`` as the checkpoint of ``step`` (its record first, then the file, each atomically), then
        drop all but the latest ``keep``.

        Raises:
            DiskFullError: the device is full; the earlier checkpoints are intact (the partial file is removed).
        """
        buffer = io.BytesIO()
        torch.save(dict(state), buffer)
        data = buffer.getvalue()
        record = {
            "step": step,
            "sha256": hashlib.sha256(data).hexdigest(),
            "bytes": len(data),
            **(meta or {}),
        }
        path = self.path(step)
        try:
            write_json_atomic(self.record_path(step), record)
            write_atomic(path, lambda f: f.write(data))
        except OSError as error:
            if not path.exists():  # no record without its checkpoint
                self.record_path(step).unlink(missing_ok=True)
            if not _is_disk_full(error):
                raise
            latest = [s for s in self.steps() if s != step]
            intact = (
                f"the earlier checkpoints are intact (latest: {self.path(latest[-1])})"
                if latest
                else "no earlier checkpoint exists"
            )
            raise disk_full(path, error, intact) from None
        for old in self.steps()[: -self.keep]:
            self.path(old).unlink(missing_ok=True)
            self.record_path(old).unlink(missing_ok=True)
        return path

    def latest(self) -> int | None:
        """The step of the latest checkpoint, or ``None``."""
        steps = self.steps()
        return steps[-1] if steps else None

    def record(self, step: int) -> dict[str, Any] | None:
        """The record of the checkpoint at ``step`` (``None`` for a checkpoint written without one)."""
        path = self.record_path(step)
        if not path.exists():
            return None
        try:
            record = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise CorruptCheckpointError(
                self.path(step), f"its record {path.name} is unreadable ({error})"
            ) from None
        if not isinstance(record, dict):
            raise CorruptCheckpointError(self.path(step), f"its record {path.name} is not a JSON object")
        return record

    def load(self, step: int | None = None, map_location: Any = None) -> dict[str, Any]:
        """The checkpoint of ``step`` (default the latest), verified against its record, loaded with
        ``weights_only=True``.

        Raises:
            FileNotFoundError: no checkpoint.
            CorruptCheckpointError: its bytes do not match the record (size or SHA-256), or it does not load.
        """
        step = self.latest() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.folder}")
        path = self.path(step)
        record = self.record(step)
        data = path.read_bytes()
        if record is not None:
            if record.get("bytes") is not None and record["bytes"] != len(data):
                raise CorruptCheckpointError(
                    path, f"it has {len(data)} bytes, its record says {record['bytes']}"
                )
            if record.get("sha256") != hashlib.sha256(data).hexdigest():
                raise CorruptCheckpointError(
                    path, "its SHA-256 differs from its record's (the file was changed)"
                )
        try:
            state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as error:  # weights_only refused an object: never retry it unsafely
            found = re.search(r"(GLOBAL [\w.]+)", str(error))  # what it holds; torch's hints are not repeated
            raise CorruptCheckpointError(
                path,
                "torch.load(weights_only=True) refused it: it holds objects other than tensors and plain data"
                + (f" ({found.group(1)})" if found else "")
                + "; a run never writes such a file, so it was replaced: do not load it by other means",
            ) from None
        except Exception as error:  # noqa: BLE001 — any failure: the file is not a loadable checkpoint
            raise CorruptCheckpointError(
                path, f"torch.load failed: {type(error).__name__}: {error}"
            ) from None
        if not isinstance(state, dict) or state.get("step", step) != step:
            raise CorruptCheckpointError(path, f"it does not hold the state of step {step}")
        return state

    def set_aside(self, step: int) -> Path:
        """Move the checkpoint of ``step`` and its record into ``checkpoints/corrupt/``; return the new path."""
        where = self.folder / "corrupt"
        where.mkdir(exist_ok=True)
        target = where / self.path(step).name
        os.replace(self.path(step), target)
        if self.record_path(step).exists():
            os.replace(self.record_path(step), where / self.record_path(step).name)
        return target

    def load_good(
        self, map_location: Any = None, verify: Callable[[Path, dict[str, Any]], None] | None = None
    ) -> tuple[int | None, dict[str, Any] | None, list[str]]:
        """The newest checkpoint that verifies: ``(step, state, skipped)``, ``skipped`` saying what was set aside
        (``set_aside``) and why; ``(None, None, skipped)`` when none verifies. ``verify(path, state)``, when
        given, checks a loaded state further (raising [`CorruptCheckpointError`][meanfield.runs.folder.CorruptCheckpointError])."""
        skipped = []
        for step in reversed(self.steps()):
            try:
                state = self.load(step, map_location=map_location)
                if verify is not None:
                    verify(self.path(step), state)
                return step, state, skipped
            except CorruptCheckpointError as error:
                moved = self.set_aside(step)
                skipped.append(f"{error} (moved to {moved})")
        return None, None, skipped


class CorruptCheckpointError(RunFolderError):
    """A checkpoint that does not verify or load; [`path`][meanfield.runs.folder.Checkpoints.path] is the file."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"checkpoint {path} is damaged: {reason}")
        self.path = path


class MetricsLog:
    """``metrics.jsonl``: one JSON object per line, appended and flushed as the run goes.

    Args:
        path: the file.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def read(self) -> list[dict[str, Any]]:
        """Every record. A last line without its newline that does not parse is the torn end of a write that a
        crash interrupted: it is dropped. Any other line that does not parse is an error.

        Raises:
            RunFolderError: naming the file and the line (repair: delete that line, or truncate the file after
                the last good one; a resumed run rewrites everything after its checkpoint's step anyway).
        """
        if not self.path.exists():
            return []
        text = self.path.read_text(encoding="utf-8", errors="replace")
        lines = text.split("\n")
        torn = lines.pop()  # "" when the file ends with a newline: the normal case
        records = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise RunFolderError(
                    f"{self.path}, line {number}, is not a JSON record ({error.msg}: {line[:60]!r}); repair the "
                    f"file by deleting that line (a resumed run rewrites every line after its checkpoint)"
                ) from None
            if not isinstance(record, dict):
                raise RunFolderError(f"{self.path}, line {number}, is not a JSON object: {line[:60]!r}")
            records.append(record)
        if torn.strip():
            with contextlib.suppress(json.JSONDecodeError):
                record = json.loads(torn)
                if isinstance(record, dict):
                    records.append(record)
        return records

    def truncate(self, step: int) -> None:
        r"""Keep only the records of steps $\le \text{ step }$ (atomically): what a resumed run continues from."""
        kept = [r for r in self.read() if r.get("step", 0) <= step]
        write_text_atomic(self.path, "".join(json.dumps(json_clean(r)) + "\n" for r in kept))

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one record and flush it.

        Raises:
            DiskFullError: the device is full (the line may be torn: [`read`][meanfield.runs.folder.MetricsLog.read] drops a torn last line).
        """
        line = json.dumps(json_clean(dict(record)), allow_nan=False) + "\n"
        try:
            with self.path.open("a") as f:
                f.write(line)
                f.flush()
        except OSError as error:
            if not _is_disk_full(error):
                raise
            raise disk_full(self.path, error, "the checkpoints are intact") from None


# ----------------------------------------------------------------------------------------------------------
# results and errors
# ----------------------------------------------------------------------------------------------------------


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


MARKER = "run.json"
"""The file a run writes into its folder right after ``config.toml``: ``{"format", "created", "config_sha256"}``
(the hash of the configuration the run started with; a resume is refused when ``config.toml`` no longer has it)."""
RUN_FILES = ("metrics.jsonl", "summary.json", "checkpoints")
"""Files that only a run writes: a folder holding one of them without a ``config.toml`` holds another run."""


class RunSummary:
    """``summary.json`` of a run and what it says: the best value of each evaluation metric, the latest value
    of every metric, the status. A mixin of the training loop's run, which holds ``folder``, ``lead`` (only
    the rank that writes the folder writes it), ``cfg``, ``experiment``, ``step``, ``elapsed``, ``best``,
    ``log`` (the [`MetricsLog`][meanfield.runs.folder.MetricsLog]) and ``_wall()``."""

    folder: Path
    lead: bool
    cfg: Any
    experiment: Any
    step: int
    elapsed: float
    best: dict[str, dict[str, float]]
    log: MetricsLog
    _wall: Callable[[], float]  # seconds of wall clock spent on the run so far

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

    def _final(self) -> dict[str, Any]:
        records = self.log.read()
        final: dict[str, Any] = {}
        for record in records:  # the latest value of each metric
            final.update({k: v for k, v in record.items() if k not in ("optim", "groups", *TIMING_KEYS)})
        final.pop("step", None)
        return final

    def _status(self) -> str:
        return json.loads((self.folder / "summary.json").read_text())["status"]


def config_hash(config_text: str) -> str:
    """SHA-256 of a resolved configuration as canonical JSON (keys sorted): equal for equal configurations,
    whatever the TOML text's formatting."""
    parsed = _config.load_toml_text(config_text)
    return hashlib.sha256(json.dumps(parsed, sort_keys=True, default=str).encode()).hexdigest()


def write_marker(folder: Path, config_sha256: str) -> None:
    """Write ``run.json`` (once: an existing marker is kept)."""
    path = folder / MARKER
    if not path.exists():
        write_json_atomic(
            path,
            {"format": 1, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "config_sha256": config_sha256},
        )


def remove_temporaries(folder: Path) -> list[Path]:
    """Delete what killed writes left in ``folder`` (with the folder's lock held, none belongs to a live writer):
    temporary files (``.*.tmp``) there and in ``checkpoints/``, and checkpoint records ``step-N.json`` whose
    ``step-N.pt`` was never written (a kill between the two writes of [`save`][meanfield.runs.folder.Checkpoints.save])."""
    removed = [
        p for where in (folder, folder / "checkpoints") if where.is_dir() for p in where.glob(".*.tmp")
    ]
    checkpoints = folder / "checkpoints"
    if checkpoints.is_dir():
        removed += [
            record
            for record in checkpoints.glob("step-*.json")
            if re.fullmatch(r"step-\d+\.json", record.name) and not record.with_suffix(".pt").exists()
        ]
    for p in removed:
        p.unlink(missing_ok=True)
    return removed


def check_folder(folder: Path, config_text: str, resolved: Mapping[str, Any], resume: bool) -> None:
    """Refuse a folder that holds another run.

    - a ``config.toml``, unless ``resume``; on resume one whose configuration differs from ``config_text``
      (the differing keys are named), or whose ``run.json`` names another configuration's hash;
    - on resume, a ``checkpoints`` that is not a folder, or an unreadable ``environment.json``;
    - no ``config.toml`` but a run's files (``run.json``, ``metrics.jsonl``, ``summary.json``, checkpoints):
      another run's remains, which a new run must not mix with its own.

    Raises:
        ConfigError: the folder holds a run and the request does not match it.
        RunFolderError: the folder holds a run's files without its configuration, or (resume) a damaged one.
    """
    config_path = folder / "config.toml"
    if not config_path.exists():
        found = [name for name in (MARKER, *RUN_FILES) if (folder / name).exists()]
        if found:
            raise RunFolderError(
                f"{folder} holds files of a run ({', '.join(found)}) but no config.toml: they may be another "
                "run's, and a new run would mix with them; move them away or use another --out"
            )
        return
    if not resume:
        raise ConfigError(f"{folder} already holds a run: pass --resume to continue it, or another --out")
    from meanfield.runs.environment import read_environment

    Checkpoints(folder / "checkpoints").steps()  # a file where the checkpoints go
    read_environment(folder / "environment.json")  # an unreadable record
    stored = _config.load_toml(config_path)
    if stored != _config.load_toml_text(config_text):
        changed = sorted(config_differences(stored, resolved))
        raise ConfigError(
            f"cannot resume {folder}: its configuration differs in {', '.join(changed)} "
            "(resume with the same config, preset and overrides, or start a new --out)"
        )
    marker = folder / MARKER
    if marker.exists():
        try:
            recorded = json.loads(marker.read_text()).get("config_sha256")
        except (OSError, ValueError, AttributeError) as error:
            raise RunFolderError(
                f"{marker} is unreadable ({error}); restore it or use another --out"
            ) from None
        if recorded not in (None, config_hash(config_text)):
            raise RunFolderError(
                f"{folder}'s config.toml is not the configuration its run started with ({marker} records another "
                "hash): refusing to mix two runs; use another --out"
            )


def config_differences(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """The dotted names of the keys whose values differ between two nested configurations, including keys
    present on one side only (``{"t": {"x": 1}}`` vs ``{"t": {"x": 2}, "y": 0}`` → ``t.x``, ``y``).

    Args:
        a, b: nested mappings (a resolved ``config.toml`` and another).
        prefix: prepended to every name (the dotted path of ``a`` and ``b`` in a larger configuration).
    """
    for key in set(a) | set(b):
        va, vb = a.get(key), b.get(key)
        name = f"{prefix}{key}"
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            yield from config_differences(va, vb, name + ".")
        elif va != vb:
            yield name
