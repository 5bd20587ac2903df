"""Argument checks shared by the package: each raises a ``ValueError``/``TypeError`` that names the argument,
what it got and what is allowed."""

from __future__ import annotations

import math
import re

import torch

__all__ = [
    "check_finite",
    "check_positive",
    "check_nonnegative",
    "check_finite_tensor",
    "check_rank",
    "check_int",
    "check_memory",
    "format_bytes",
    "memory_available",
    "asked_bytes",
    "check_saved_states",
]


def _real(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        and not (torch.is_tensor(value) and value.numel() == 1)
    ):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def check_finite(name: str, value: object) -> float:
    """Return ``float(value)``; raise unless it is a finite real number."""
    return _real(name, value)


def check_positive(name: str, value: object) -> float:
    """Return ``float(value)``; raise unless it is a finite number ``> 0``."""
    value = _real(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


def check_nonnegative(name: str, value: object) -> float:
    r"""Return ``float(value)``; raise unless it is a finite number $\ge 0$."""
    value = _real(name, value)
    if value < 0:
        raise ValueError(f"{name} must be ≥ 0, got {value}")
    return value


def check_int(name: str, value: object, minimum: int = 1) -> int:
    r"""Return ``value``; raise unless it is an integer $\ge \text{ minimum }$."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be ≥ {minimum}, got {value}")
    return value


def check_finite_tensor(name: str, x: torch.Tensor) -> torch.Tensor:
    """Raise unless ``x`` is a floating-point tensor with only finite entries (no NaN, no ±Inf)."""
    if not torch.is_tensor(x):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    finite = torch.isfinite(x)
    if not bool(finite.all()):
        bad = (~finite).nonzero()[0].tolist()
        raise ValueError(
            f"{name} has {int((~finite).sum())} non-finite entries (NaN or Inf), the first at index {tuple(bad)}"
        )
    return x


def check_rank(name: str, x: torch.Tensor, rank: int, layout: str) -> torch.Tensor:
    """Raise unless ``x`` is a tensor with ``rank`` dimensions; ``layout`` names them, e.g. ``"(B, M, d)"``."""
    if not torch.is_tensor(x):
        raise TypeError(f"{name} must be a torch.Tensor of shape {layout}, got {type(x).__name__}")
    if x.dim() != rank:
        raise ValueError(f"{name} must have shape {layout} ({rank} dimensions), got shape {tuple(x.shape)}")
    return x


def format_bytes(n: float) -> str:
    """``n`` bytes in binary units: ``1.5 GiB``, ``745 TiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def memory_available(device: torch.device | str = "cpu") -> tuple[int, int] | None:
    """``(available, total)`` bytes of memory on ``device``: the CPU's ``MemAvailable`` and ``MemTotal`` (Linux
    ``/proc/meminfo``), a CUDA device's free and total memory; ``None`` where it is not known."""
    device = torch.device(device)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return int(free), int(total)
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            text = f.read()
    except OSError:
        return None
    found = dict(re.findall(r"^(MemAvailable|MemTotal):\s+(\d+) kB", text, flags=re.M))
    if len(found) < 2:
        return None
    return int(found["MemAvailable"]) * 1024, int(found["MemTotal"]) * 1024


UNCHECKED_BYTES = 1 << 26
"""Requests under 64 MiB are not checked: reading the free memory costs about 30 µs (``/proc/meminfo``), a tenth of
a small ``simulate`` call, and an allocation that small fails only where the machine is out of memory already."""


def check_memory(what: str, nbytes: int, device: torch.device | str, advice: str) -> None:
    """Raise a ``ValueError`` before allocating ``nbytes`` for ``what`` on ``device`` when they exceed the memory
    available there, saying the size asked, the memory there is and ``advice`` (what to change); requests under
    ``UNCHECKED_BYTES`` pass unread."""
    if nbytes < UNCHECKED_BYTES:
        return
    memory = memory_available(device)
    if memory is None or nbytes <= memory[0]:
        return
    raise ValueError(
        f"{what} need {format_bytes(nbytes)}, and {torch.device(device)} has {format_bytes(memory[0])} of memory "
        f"available ({format_bytes(memory[1])} in all): {advice}"
    )


def asked_bytes(error: BaseException) -> int | None:
    """The bytes an allocation that failed asked for, read from torch's message (``None`` if it says none)."""
    text = str(error)
    found = re.search(r"allocate (\d+) bytes", text)
    if found:
        return int(found.group(1))
    found = re.search(r"[Tt]ried to allocate ([\d.]+) (B|KiB|MiB|GiB|TiB|PiB)", text)
    if found:
        units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
        return int(float(found.group(1)) * 1024 ** units.index(found.group(2)))
    return None


def check_saved_states(n_steps: int, save_every: int, x0: torch.Tensor, first_save: int = 0) -> None:
    """Refuse (before allocating) a [`meanfield.stepping.simulate.simulate`][meanfield.stepping.simulate.simulate] whose saved states, the one at step
    ``first_save`` (the initial one, or ``save_from``'s) and one every ``save_every`` steps from there and the last,
    each of ``x0``'s size, need more memory than its device has available."""
    n_saved = len(range(first_save, n_steps, save_every)) + 1
    check_memory(
        f"simulate's {n_saved} saved states of shape {tuple(x0.shape)} ({x0.dtype})",
        n_saved * x0.numel() * x0.element_size(),
        x0.device,
        "save fewer states (a larger save_every), or fewer replicas or particles",
    )
