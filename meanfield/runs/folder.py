"""The run folder's files: checkpoints, the metrics log, the summary (:class:`RunResult`), and the check that a
folder may take this run.

Every file is written atomically (:mod:`meanfield._io`): a reader sees the old file or the new one, never half.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from meanfield import config as _config
from meanfield._io import json_clean, write_atomic, write_text_atomic
from meanfield.config import ConfigError

__all__ = ["STATUSES", "TIMING_KEYS", "Checkpoints", "MetricsLog", "RunResult", "check_folder"]

STATUSES = ("running", "finished", "interrupted", "diverged", "failed")
"""The values of ``summary.json``'s ``status``."""
TIMING_KEYS = ("time", "step_time", "samples_per_s", "tokens_per_s", "particles_per_s")
"""Metrics that depend on the machine, not on the computation (left out of resume-equality checks)."""


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


def check_folder(folder: Path, config_text: str, resolved: Mapping[str, Any], resume: bool) -> None:
    """Refuse a folder that holds another run: one with a ``config.toml`` unless ``resume``, and on resume one
    whose configuration differs from ``config_text`` (the differing keys are named).

    Raises:
        ConfigError: naming the folder and what to do.
    """
    config_path = folder / "config.toml"
    if config_path.exists():
        if not resume:
            raise ConfigError(f"{folder} already holds a run: pass --resume to continue it, or another --out")
        stored = _config.load_toml(config_path)
        if stored != _config.load_toml_text(config_text):
            changed = sorted(_differences(stored, resolved))
            raise ConfigError(
                f"cannot resume {folder}: its configuration differs in {', '.join(changed)} "
                "(resume with the same config, preset and overrides, or start a new --out)"
            )


def _differences(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    for key in set(a) | set(b):
        va, vb = a.get(key), b.get(key)
        name = f"{prefix}{key}"
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            yield from _differences(va, vb, name + ".")
        elif va != vb:
            yield name
