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


def device_description(device: torch.device | str) -> str:
    """The device a benchmark ran on, e.g. ``NVIDIA H200, 139 GiB, 132 SMs, capability 9.0, CUDA 13.0``
    (``"cpu"`` on the CPU: see :func:`machine`). Records the TF32 setting of float32 matmuls too."""
    device = torch.device(device)
    if device.type != "cuda":
        return str(device)
    p = torch.cuda.get_device_properties(device)
    tf32 = "on" if torch.backends.cuda.matmul.allow_tf32 else "off"
    return (
        f"{p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs, capability "
        f"{p.major}.{p.minor}, torch {torch.__version__} (CUDA {torch.version.cuda}), TF32 matmuls {tf32}"
    )


def device_slug(device: torch.device | str) -> str:
    """A file-name form of the device: ``"cpu"``, or the GPU's name, e.g. ``"nvidia-h200"``."""
    device = torch.device(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return "-".join("".join(c if c.isalnum() else " " for c in name.lower()).split())
