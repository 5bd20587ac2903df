"""One benchmark case in a fresh process: its time, its peak memory and its value, or why it was skipped.

A case runs as ``python <script> --case '<json>'``; the script's ``run_case(case) -> (seconds, value)``
is called once to warm up (KeOps compiles, caches fill) and ``repeats`` times to time. The peak memory is
the process's high-water resident set (``ru_maxrss``) minus its resident set once the inputs exist, so it
counts what the computation itself allocated (torch, NumPy, KeOps alike).
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable


def resident_mib() -> float:
    """The current resident set of this process in MiB (``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def measure(make: Callable[[], Callable[[], float]], repeats: int) -> dict:
    """Build the case (``make()`` returns the call to time), warm up, time ``repeats`` calls."""
    call = make()
    base = resident_mib()
    start = time.perf_counter()
    value = float(call())
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats if first < 5 else 1 if first < 30 else 0):
        start = time.perf_counter()
        value = float(call())
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base  # ru_maxrss is in KiB on Linux
    return {
        "seconds": statistics.median(times) if times else first,
        "value": value,
        "peak_mib": max(peak, 0.0),
    }


def run_isolated(script: str, case: dict, timeout: float) -> dict:
    """Run ``case`` in a fresh ``python script --case``; on a timeout or an error say so in ``skipped``."""
    try:
        out = subprocess.run(
            [sys.executable, script, "--case", json.dumps(case)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"skipped": f"over the {timeout:.0f} s limit"}
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        return {
            "skipped": f"failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}"
        }
    return json.loads(lines[-1])
