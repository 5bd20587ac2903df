"""Atomic writes: a file is either its old version or its new one, never half written.

Each writer writes a temporary file in the target's folder, flushes it to disk, then renames it over the
target (``os.replace`` is atomic on POSIX and Windows when both are on one file system).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["write_atomic", "write_text_atomic", "write_json_atomic", "json_clean"]


def write_atomic(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> Path:
    """Call ``write(f)`` on a temporary binary file beside ``path``, then rename it to ``path``.

    The temporary file is removed if ``write`` raises (or the process is interrupted in Python code).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        error.filename = str(path)
        raise
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(error, OSError) and error.filename in (None, tmp):
            error.filename = str(path)  # name the file asked for, not its temporary
        raise
    return path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return write_atomic(path, lambda f: f.write(text.encode("utf-8")))


def json_clean(value: Any) -> Any:
    """``value`` with non-finite floats replaced by ``None`` (strict JSON has no NaN/Inf), recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_clean(v) for v in value]
    return value


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    """Write ``data`` as indented strict JSON (non-finite floats as ``null``) to ``path`` atomically."""
    return write_text_atomic(path, json.dumps(json_clean(data), indent=1, allow_nan=False) + "\n")
