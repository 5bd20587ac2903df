"""A cache of tensors decoded from an archive, keyed by the archive's name, size and modification time."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import torch

from .._io import write_atomic

__all__ = ["cache_dir", "cache_file", "load_cached", "save_cached"]


def cache_dir() -> Path:
    """Where decoded archives are cached: ``$MEANFIELD_CACHE``, else ``$XDG_CACHE_HOME/meanfield``, else
    ``~/.cache/meanfield``."""
    if os.environ.get("MEANFIELD_CACHE"):
        return Path(os.environ["MEANFIELD_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "meanfield"


def cache_file(prefix: str, archive: Path, version: int) -> Path:
    """``cache_dir()/<prefix>-<archive name>-<size>-<mtime ns>-v<version>.pt``: a changed archive (or a new
    cache format) gets a new file."""
    stat = archive.stat()
    return cache_dir() / f"{prefix}-{archive.name}-{stat.st_size}-{stat.st_mtime_ns}-v{version}.pt"


def load_cached(path: Path, version: int) -> dict[str, Any] | None:
    """The cached dict, or ``None`` when there is none; an unreadable one is ignored with a warning."""
    if not path.is_file():
        return None
    try:
        cached = torch.load(path, weights_only=True)
        if cached.get("version") != version:
            raise ValueError(f"cache format {cached.get('version')}, expected {version}")
        return cached
    except Exception as error:  # an unreadable cache is rebuilt, never fatal
        warnings.warn(f"ignoring the unreadable cache {path} ({type(error).__name__}: {error})", stacklevel=3)
        return None


def save_cached(path: Path, tensors: dict[str, Any]) -> bool:
    """Write ``tensors`` with ``torch.save``, atomically; on failure warn and return ``False``."""
    try:
        write_atomic(path, lambda f: torch.save(tensors, f))
        return True
    except OSError as error:
        warnings.warn(
            f"could not write the cache {path} ({error}); the next load decodes again", stacklevel=3
        )
        return False
