"""What produced a run: package versions, the git commit and a hash of the package's source, the machine,
threads and device (``environment.json``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from meanfield._io import write_json_atomic
from meanfield.runs.errors import RunFolderError
from meanfield.runs.schema import RunConfig

__all__ = [
    "environment",
    "provenance",
    "provenance_changes",
    "read_environment",
    "record_environment",
    "PROVENANCE_KEYS",
]

_PACKAGE = Path(__file__).resolve().parents[1]  # meanfield/


def _git_commit(exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """``{"commit": HEAD, "dirty": whether a tracked file differs from it}`` for the checkout holding
    meanfield, ``None`` for both outside a git checkout (or without git).

    Args:
        exclude: paths relative to the checkout's top (``"benchmarks/results"``) whose changes do not make it
            dirty: the outputs of the run that asks, which would otherwise mark every run after the first.
    """
    here = _PACKAGE
    pathspec = [":(top)", *(f":(top,exclude){path}" for path in exclude)] if exclude else []
    try:
        commit = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            errors="replace",  # a path git prints undecoded (core.quotePath=false) must not stop a run
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no", "--", *pathspec],
            capture_output=True,
            text=True,
            errors="replace",  # a path git prints undecoded (core.quotePath=false) must not stop a run
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
    for path in sorted(_PACKAGE.rglob("*.py")):
        digest.update(str(path.relative_to(_PACKAGE)).encode())
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


PROVENANCE_KEYS = ("commit", "dirty", "source_sha256", "meanfield", "torch")
"""What a resume compares with the run's record: the code and the two versions that decide its numbers."""


def provenance(env: Mapping[str, Any]) -> dict[str, Any]:
    """The [`PROVENANCE_KEYS`][meanfield.runs.environment.PROVENANCE_KEYS] of an [`environment`][meanfield.runs.environment.environment] record (carried by every checkpoint)."""
    git = env.get("git") or {}
    packages = env.get("packages") or {}
    return {
        "commit": git.get("commit"),
        "dirty": git.get("dirty"),
        "source_sha256": env.get("source_sha256"),
        "meanfield": packages.get("meanfield-sde"),
        "torch": packages.get("torch"),
    }


def provenance_changes(before: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """``"key: before → now"`` for each [`PROVENANCE_KEYS`][meanfield.runs.environment.PROVENANCE_KEYS] entry that differs between two environments."""
    a, b = provenance(before), provenance(now)
    return [f"{key}: {a[key]} → {b[key]}" for key in PROVENANCE_KEYS if a[key] != b[key]]


def read_environment(path: Path) -> dict[str, Any] | None:
    """The run's ``environment.json`` (``None`` when there is none).

    Raises:
        RunFolderError: the file is unreadable or not a JSON object, naming it and what to do.
    """
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        reason = f"{type(error).__name__}: {error}"
    else:
        if isinstance(record, dict):
            return record
        reason = "not a JSON object"
    raise RunFolderError(
        f"{path} is unreadable ({reason}): restore it from a copy, or delete it to go on without the record of "
        "the earlier sessions (each checkpoint keeps its own provenance)"
    )


def record_environment(path: Path, env: dict[str, Any]) -> list[str]:
    """Write ``env`` to ``environment.json``, keeping every earlier record of the run in its ``earlier`` list
    (oldest first), and return the provenance changes from the latest earlier record ([`provenance_changes`][meanfield.runs.environment.provenance_changes]).

    A damaged file is replaced ([`meanfield.runs.folder.check_folder`][meanfield.runs.folder.check_folder] refuses one on resume, before).
    """
    earlier: list[dict[str, Any]] = []
    try:
        previous = read_environment(path)
    except RunFolderError:
        previous = None  # a damaged record is replaced (a resume refuses one before it gets here)
    if previous is not None:
        earlier = [*previous.pop("earlier", []), previous]
    changes = provenance_changes(earlier[-1], env) if earlier else []
    write_json_atomic(path, {**env, "earlier": earlier})
    return changes
