"""One background thread for random draws on the CPU.

torch's CPU ``normal_`` runs on one thread and is often the largest cost of a Langevin step. On a machine
with more than one core, a large draw can run in this thread while the caller's thread does the rest of the
step (the drift, the update) with torch's intra-op threads. The numbers drawn do not change: the same
generator is used in the same order; only the time the draw takes is hidden.

The hand-off is two ``queue.SimpleQueue`` operations (about 5 µs here, where a
``concurrent.futures.ThreadPoolExecutor`` round trip took about 80 µs).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any

import torch

OVERLAP_MIN = 1 << 18
"""Draws of at least this many numbers go to the background thread (below it, the hand-off and the
contention for the cores cost about what the overlap saves)."""

MIN_THREADS = 2
"""...and only when torch may use at least this many threads: with ``torch.set_num_threads(1)`` (e.g. one
process per core in a sweep) there is no idle core for the draw, and an extra thread would only compete."""

_tasks: queue.SimpleQueue | None = None
_pid: int | None = None


def pays(n: int) -> bool:
    """Whether a CPU draw of ``n`` numbers should go to the background thread."""
    return n >= OVERLAP_MIN and torch.get_num_threads() >= MIN_THREADS


class Pending:
    """A task running in the background thread; [`result`][meanfield._background.Pending.result] waits for it (and re-raises its error)."""

    __slots__ = ("_done", "_outcome")

    def __init__(self) -> None:
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._outcome: tuple[bool, Any] | None = None

    def result(self) -> Any:
        """Wait until the task has run; return its value or raise its exception."""
        if self._outcome is None:
            self._outcome = self._done.get()
        ok, value = self._outcome
        if not ok:
            raise value
        return value


def _work(tasks: queue.SimpleQueue) -> None:
    while True:
        fn, args, pending, inference, grad = tasks.get()
        try:
            with torch.inference_mode(inference), torch.set_grad_enabled(grad):  # the caller's modes
                outcome = (True, fn(*args))
        except BaseException as error:  # handed to the caller, which re-raises it
            outcome = (False, error)
        pending._done.put(outcome)


def submit(fn: Callable[..., Any], *args: Any) -> Pending:
    """Run ``fn(*args)`` in the background thread (one worker, shared; started on first use and again in a
    forked child process, which inherits no threads), under the caller's inference and grad modes (they
    are thread-local: a buffer made under ``torch.inference_mode()`` may only be written under it)."""
    global _tasks, _pid
    if _tasks is None or _pid != os.getpid():
        _tasks, _pid = queue.SimpleQueue(), os.getpid()
        threading.Thread(target=_work, args=(_tasks,), name="meanfield-draw", daemon=True).start()
    pending = Pending()
    _tasks.put((fn, args, pending, torch.is_inference_mode_enabled(), torch.is_grad_enabled()))
    return pending


def abandon(pending: Pending | None, states: Iterable[tuple[torch.Generator, torch.Tensor]]) -> None:
    """Give up a draw: wait for ``pending`` (its own error is dropped: the caller is already failing with
    another), then put each generator back in the state saved before the draw."""
    try:
        if pending is not None:
            pending.result()
    except Exception:
        pass
    finally:
        for generator, state in states:
            generator.set_state(state)
