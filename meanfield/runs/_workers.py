"""Worker processes that cannot outlive their parent and whose death is reported, not fatal (``sweep --jobs N``).

``WorkerPool`` runs calls of one function in at most ``jobs`` spawned processes. Unlike
``concurrent.futures.ProcessPoolExecutor``, whose whole pool breaks (``BrokenProcessPool``) when one worker is
killed, a worker that dies here (SIGKILL, the out-of-memory killer, ``os._exit``) costs only the call it was
running: ``results`` reports that call as ``WorkerDied`` with the cause (the signal's name
or the exit status), and the next ``submit`` starts a new process in its place.

Each worker

- starts with SIGINT and SIGTERM ignored and blocked (the parent blocks them and sets them to ``SIG_IGN``
  while it starts the process; both survive ``exec``), so a signal that arrives while it is still importing (a
  terminal's Ctrl-C reaches its whole process group) cannot kill it; once its own handlers are in place it
  unblocks them, says it is ready, and only then gets a call — none once the pool is stopping, so a signal
  during start-up starts nothing;
- leaves the terminal's process group (a Ctrl-C reaches the parent only, which forwards it to ready workers);
- dies with its parent (``die_with_parent``): it gets SIGTERM once when its parent has ended — on Linux
  told by the kernel (``PR_SET_PDEATHSIG``), which fires at the end of the parent *thread* that forked it and
  again at each reparenting, so the signal is checked against ``getppid()`` and turned into one SIGTERM; a
  watchdog thread polls ``getppid()`` too. SIGTERM, not SIGKILL: a worker in the middle of a run finishes its
  step and writes a checkpoint. A worker between calls also sees the parent's end as the end of its pipe.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["WorkerPool", "WorkerDied", "NotStarted", "death_cause", "die_with_parent"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals a worker ignores until its handlers are installed."""
_READY = "ready"
_PR_SET_PDEATHSIG = 1


class NotStarted(Exception):
    """The call was not started: the pool was stopping when its worker became ready."""


class WorkerDied(Exception):
    """The worker process running a call ended without answering; the message says how (signal, status).

    Attributes:
        pid: the worker's process id.
        exitcode: ``multiprocessing``'s exit code (``-N``: killed by signal N).
    """

    def __init__(self, message: str, pid: int | None = None, exitcode: int | None = None) -> None:
        super().__init__(message)
        self.pid, self.exitcode = pid, exitcode


def death_cause(exitcode: int | None) -> str:
    """How a process ended, in words: ``killed by SIGKILL (…)``, ``exited with status 3``."""
    if exitcode is None:
        return "ended without an exit status"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = (
            " (what the kernel's out-of-memory killer sends: see `dmesg`)"
            if -exitcode == signal.SIGKILL
            else ""
        )
        return f"was killed by {name}{hint}"
    return f"exited with status {exitcode}"


def die_with_parent(parent: int, signum: int = signal.SIGTERM) -> None:
    """Send this process ``signum``, once, when its parent ``parent`` has ended (at once if it already has).

    On Linux the kernel tells it: ``prctl(PR_SET_PDEATHSIG, SIGHUP)``, and a SIGHUP handler that checks
    ``getppid()``. The check matters: the kernel sends the parent-death signal when the *thread* that forked
    this process ends, and again at each reparenting, so a parent killed with several threads sends it several
    times (the second would read as "stop at once" to a run) and a parent thread ending in a live parent sends
    it too. Everywhere, a watchdog thread polls ``getppid()`` every second as well. Must be called from the main
    thread (it installs a signal handler).
    """
    fired = threading.Lock()

    def fire() -> None:
        if os.getppid() != parent and fired.acquire(blocking=False):
            os.kill(os.getpid(), signum)

    signal.signal(signal.SIGHUP, lambda s, f: fire())
    libc_name = ctypes.util.find_library("c")
    if libc_name is not None:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(libc_name, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGHUP), 0, 0, 0)

    def watch() -> None:
        while not fired.locked():
            fire()
            threading.Event().wait(1.0)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def _worker_main(conn: Any, parent: int, function: Callable[..., Any], init: Callable[[], None]) -> None:
    """A worker's life: ``init`` (its signal handlers, replacing the ignored dispositions it started with), say
    it is ready, then answer calls until the pipe ends or says ``None``. Every answer is ``(key, ok, value)``; an
    exception (a second Ctrl-C's ``KeyboardInterrupt`` too) is sent back, not printed."""
    os.setpgrp()
    die_with_parent(parent)
    init()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # held by the parent while it started us
    try:
        conn.send(_READY)
    except OSError:
        return
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if task is None:
            return
        key, args = task
        try:
            answer = (key, True, function(*args))
        except BaseException as error:  # noqa: BLE001 — the parent decides what a failed call means
            answer = (key, False, error)
        try:
            conn.send(answer)
        except (OSError, KeyboardInterrupt):  # the parent is gone: nothing to report to
            return
        except Exception as error:  # noqa: BLE001 — an answer that does not pickle
            with contextlib.suppress(OSError):
                conn.send((key, False, RuntimeError(f"the answer could not be sent back: {error!r}")))


class _Worker:
    def __init__(self, process: multiprocessing.process.BaseProcess, conn: Any) -> None:
        self.process, self.conn = process, conn
        self.ready = False  # its handlers are in place: it may get a call and forwarded signals
        self.key: Any = None  # the call given to it (sent once it is ready)
        self.args: tuple | None = None  # that call's arguments while not yet sent
        self.busy = False


class WorkerPool:
    """``with WorkerPool(jobs, function, init) as pool``: run ``function(*args)`` in up to ``jobs`` spawned
    worker processes (module docstring).

    Args:
        jobs: the most processes at once.
        function: a module-level function (sent to the workers by reference).
        init: run first in each worker (a module-level function): its signal handlers, for instance.
    """

    def __init__(self, jobs: int, function: Callable[..., Any], init: Callable[[], None]) -> None:
        self.jobs, self.function, self.init = jobs, function, init
        self.stopping = False  # set by the caller: calls not yet sent to a worker are not started
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(wait=exc[0] is None)

    @property
    def pids(self) -> list[int]:
        """The process ids of the workers that are ready (the ones a signal may be forwarded to)."""
        return [w.process.pid for w in self._workers if w.ready and w.process.pid is not None]

    @property
    def running(self) -> int:
        """How many calls are given out (running, or waiting for their worker to be ready)."""
        return sum(w.busy for w in self._workers)

    @property
    def free(self) -> bool:
        """Whether ``submit`` can give out a call now."""
        return self.running < self.jobs

    def _start(self) -> _Worker:
        here, there = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=_worker_main, args=(there, os.getpid(), self.function, self.init), daemon=True
        )
        main = threading.current_thread() is threading.main_thread()
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # a signal now waits for our handlers
        try:
            previous = {s: signal.signal(s, signal.SIG_IGN) for s in STOP_SIGNALS} if main else {}
            try:
                process.start()  # the child inherits the ignored dispositions through exec
            finally:
                for signum, handler in previous.items():
                    signal.signal(signum, handler)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        there.close()
        worker = _Worker(process, here)
        self._workers.append(worker)
        return worker

    def submit(self, key: Any, args: tuple) -> None:
        """Give ``function(*args)`` to an idle worker, or to a new one (sent once it is ready); ``key`` names it in
        ``results``."""
        if not self.free:
            raise RuntimeError("every worker is busy")
        worker = (
            next((w for w in self._workers if not w.busy and w.process.is_alive()), None) or self._start()
        )
        worker.key, worker.busy = key, True
        if worker.ready:
            worker.conn.send((key, args))
        else:
            worker.args = args

    def results(self, timeout: float | None = None) -> Iterator[tuple[Any, bool, Any]]:
        """The calls that ended within ``timeout`` seconds: ``(key, ok, value)``, ``value`` the return value or
        the exception raised; a call whose worker died is ``(key, False, WorkerDied(…))`` (the worker is
        dropped), one that was not sent because the pool is ``stopping`` ``(key, False, NotStarted())``."""
        busy = [w for w in self._workers if w.busy]
        waitables = [w.conn for w in busy] + [w.process.sentinel for w in busy]
        ready = set(multiprocessing.connection.wait(waitables, timeout)) if busy else set()
        for worker in busy:
            while worker.busy and (worker.conn in ready or worker.conn.poll()):
                try:
                    message = worker.conn.recv()
                except (EOFError, OSError):
                    break  # it died while answering: below
                ready.discard(worker.conn)
                if message == _READY:
                    worker.ready = True
                    if self.stopping:
                        key, worker.key, worker.args, worker.busy = worker.key, None, None, False
                        yield key, False, NotStarted("the pool was stopping when its worker became ready")
                    else:
                        worker.conn.send((worker.key, worker.args))
                        worker.args = None
                    continue
                key, ok, value = message
                worker.busy, worker.key = False, None
                yield key, ok, value
            if worker.busy and (worker.process.sentinel in ready or not worker.process.is_alive()):
                worker.process.join()
                code = worker.process.exitcode
                self._workers.remove(worker)
                worker.conn.close()
                yield (
                    worker.key,
                    False,
                    WorkerDied(
                        f"its worker process (pid {worker.process.pid}) {death_cause(code)}",
                        worker.process.pid,
                        code,
                    ),
                )

    def close(self, wait: bool = True, timeout: float = 10.0) -> None:
        """Tell the idle workers to end and join every worker (``wait=False``: give running ones ``timeout``
        seconds, then leave them to their parent-death signal)."""
        for worker in self._workers:
            with contextlib.suppress(OSError):
                if not worker.busy:
                    worker.conn.send(None)
            worker.conn.close()
        for worker in self._workers:
            worker.process.join(None if wait else timeout)
        self._workers = []
