"""``meanfield.runs._workers``: a pool whose dead worker costs one call, not the pool (issue 50)."""

from __future__ import annotations

import os
import signal

import pytest

from meanfield.runs._workers import WorkerDied, WorkerPool, death_cause


def test_death_cause_names_the_signal_or_the_status():
    assert death_cause(-signal.SIGKILL).startswith("was killed by SIGKILL (what the kernel's out-of-memory")
    assert death_cause(-signal.SIGTERM) == "was killed by SIGTERM"
    assert death_cause(3) == "exited with status 3"
    assert death_cause(None) == "ended without an exit status"


def _drain(pool: WorkerPool) -> list:
    found = []
    while pool.running:
        found += list(pool.results(timeout=1.0))
    return found


@pytest.mark.slow
def test_a_worker_killed_mid_call_costs_that_call_only_and_is_replaced():
    """Real processes: ``signal.raise_signal`` as the call. SIGCHLD (ignored) returns None; SIGKILL kills the
    worker running it, which is reported as WorkerDied with the signal; the next call gets a new worker.
    Control: the first call's answer is an ordinary one."""
    with WorkerPool(1, signal.raise_signal, os.getpid) as pool:
        pool.submit("a", (signal.SIGCHLD,))
        [(key, ok, value)] = _drain(pool)
        assert (key, ok, value) == ("a", True, None)
        first = pool.pids
        pool.submit("b", (signal.SIGKILL,))
        [(key, ok, value)] = _drain(pool)
        assert key == "b" and not ok and isinstance(value, WorkerDied)
        assert value.exitcode == -signal.SIGKILL and f"(pid {first[0]}) was killed by SIGKILL" in str(value)
        pool.submit("c", (signal.SIGCHLD,))
        assert _drain(pool) == [("c", True, None)] and pool.pids != first
