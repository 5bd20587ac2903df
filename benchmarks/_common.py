"""What every benchmark script shares: the machine description and the atomic write of its results table."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import torch

from meanfield._io import write_text_atomic


def machine() -> str:
    """CPU model, core count, torch version and its thread count, e.g. for the header of a results table."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next(
            line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")
        )
    except (OSError, subprocess.CalledProcessError, StopIteration):
        model = platform.processor() or platform.machine()
    return f"{model}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)"


def write_result(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (a temporary file, then a rename) and return the path."""
    return write_text_atomic(path, text)
