"""``meanfield.runs._workers``: a pool whose dead worker costs one call, not the pool (issue 50)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import select
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from meanfield.runs import _workers
from meanfield.runs._workers import (
    STOP_SIGNALS,
    NotStarted,
    WorkerDied,
    WorkerPool,
    death_cause,
    die_with_parent,
)


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


# -- the pool in this process, with forked workers ---------------------------------------------------------------
# A spawned worker imports meanfield (torch) before its first answer: ~5 s on a loaded 2-core machine, which is
# why the test above is slow. The tests below give the pool a "fork" context instead: the pool's own code (start,
# submit, results, close, the signal dance around the start) is the same and runs here, in the test process;
# the worker runs ``_worker_main`` without importing anything. Guards (`_within`, `GUARD`) only bound a hang.

GUARD = 10.0  # seconds: only a broken pool waits this long
_AT_INIT: dict = {}  # in a worker: what its signals were when ``init`` ran


def _record_start() -> None:
    """``init``: record the worker's stop signals' dispositions and mask as it found them, then default them (so
    that multiprocessing's own SIGTERM at exit would end a forgotten worker)."""
    _AT_INIT.update(
        {s: signal.getsignal(s) for s in STOP_SIGNALS}, blocked=signal.pthread_sigmask(signal.SIG_BLOCK, [])
    )
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_DFL)


def _call(kind: str, arg=None):
    """The function the test pools run: ``kind`` says what to do with ``arg``."""
    if kind == "square":
        return arg * arg
    if kind == "raise":
        raise ValueError(arg)
    if kind == "exit":
        os._exit(arg)
    if kind == "state":
        return {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "pgrp": os.getpgrp(),
            "at_init": dict(_AT_INIT),
            "blocked": signal.pthread_sigmask(signal.SIG_BLOCK, []),
        }
    if kind == "lambda":
        return lambda: None  # an answer that does not pickle
    if kind == "read":
        return os.read(arg, 1)  # blocks until the test writes a byte
    if kind == "interrupt":
        raise KeyboardInterrupt
    if kind == "touch":
        Path(arg).touch()
        return None
    raise AssertionError(kind)


class _ForkWorker(multiprocessing.context.ForkProcess):
    """A forked worker that first closes its copies of the parent's pipe ends, which a spawned one never has
    (else a worker would keep its own pipe open after the parent closed it)."""

    def __init__(self, parent_ends: list, **kwargs) -> None:
        super().__init__(**kwargs)
        self.parent_ends = parent_ends

    def run(self) -> None:
        for conn in self.parent_ends:
            conn.close()
        super().run()


class _ForkContext:
    """``WorkerPool._context`` with forked workers: ``Pipe`` and ``Process``, the two things the pool uses."""

    def __init__(self) -> None:
        self.parent_ends: list = []

    def Pipe(self, duplex: bool = True):  # noqa: N802 — multiprocessing's name
        here, there = multiprocessing.get_context("fork").Pipe(duplex=duplex)
        self.parent_ends.append(here)
        return here, there

    def Process(self, **kwargs):  # noqa: N802
        return _ForkWorker(self.parent_ends, **kwargs)


def _forked(jobs: int) -> WorkerPool:
    pool = WorkerPool(jobs, _call, _record_start)
    pool._context = _ForkContext()
    return pool


@contextlib.contextmanager
def _forked_pool(jobs: int) -> Iterator[WorkerPool]:
    """``with _forked_pool(jobs) as pool``: closed at the end within ``GUARD`` seconds (a worker that does not
    end fails the test instead of hanging it)."""
    pool = _forked(jobs)
    try:
        yield pool
    finally:
        _within(GUARD, pool.close)


def _settle(pool: WorkerPool) -> dict:
    """Every answer until no call is given out: ``{key: (ok, value)}`` (each key once)."""
    found: dict = {}
    deadline = time.monotonic() + GUARD
    while pool.running:
        assert time.monotonic() < deadline, "the pool did not answer"
        for key, ok, value in pool.results(timeout=1.0):
            assert key not in found, key
            found[key] = (ok, value)
    return found


def _within(seconds: float, function):
    """``function()`` in a thread, which must end within ``seconds`` (a guard against a hang, not a timing);
    its return value, or its exception raised here."""
    out: list = []

    def run() -> None:
        try:
            out.append((True, function()))
        except BaseException as error:  # noqa: BLE001 — raised again below, in the test's thread
            out.append((False, error))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{function} did not return within {seconds} s"
    [(ok, value)] = out
    if not ok and not isinstance(value, Exception):  # a KeyboardInterrupt would stop the whole session
        raise AssertionError(f"{function} raised {value!r}") from value
    if not ok:
        raise value
    return value


def test_a_new_pool_spawns_its_workers_and_starts_none_yet():
    """``WorkerPool(jobs, function, init)`` keeps its arguments, uses the "spawn" start method (a fresh
    interpreter, not a copy of a parent with threads), is not stopping, and has no worker until a call:
    no pid, nothing running, free; ``with`` gives the pool itself."""
    before = set(multiprocessing.active_children())
    pool = WorkerPool(3, _call, _record_start)
    assert (pool.jobs, pool.function, pool.init, pool.stopping) == (3, _call, _record_start, False)
    assert pool._context.get_start_method() == "spawn"
    assert (pool.pids, pool.running, pool.free) == ([], 0, True)
    with pool as entered:
        assert entered is pool
    assert set(multiprocessing.active_children()) == before


def test_each_call_answers_under_its_key_and_an_exception_costs_that_call_only():
    """Two workers: a call's return value comes back as ``(key, True, value)``, another call's exception as
    ``(key, False, exception)`` (its type and message kept) and costs neither worker; up to ``jobs`` calls at
    once (then ``free`` is False and a third ``submit`` is refused with one line); idle ready workers take the
    next calls (no new process)."""
    with _forked_pool(2) as pool:
        pool.submit("a", ("square", 3))
        assert (pool.running, pool.free) == (1, True)
        pool.submit("b", ("raise", "b went wrong"))
        assert (pool.running, pool.free) == (2, False)
        with pytest.raises(RuntimeError, match="^every worker is busy$"):
            pool.submit("c", ("square", 4))
        found = _settle(pool)
        assert found["a"] == (True, 9)
        ok, error = found["b"]
        assert not ok and type(error) is ValueError and error.args == ("b went wrong",)
        assert set(found) == {"a", "b"} and (pool.running, pool.free) == (0, True)
        pids = pool.pids
        assert len(set(pids)) == 2
        pool.submit("c", ("square", 4))
        pool.submit("d", ("state",))
        found = _settle(pool)
        assert found["c"] == (True, 16) and found["d"][1]["pid"] in pids and sorted(pool.pids) == sorted(pids)


def test_a_worker_is_ready_only_once_it_said_so_and_then_its_pid_is_listed():
    """A new worker's pid is not listed (no signal is forwarded to it) until ``results`` has read its "ready";
    its call is sent then, and ``pids`` lists the process that answered."""
    with _forked_pool(1) as pool:
        pool.submit("a", ("state",))
        assert pool.pids == [] and pool.running == 1
        state = _settle(pool)["a"][1]
        assert pool.pids == [state["pid"]]


def test_a_worker_starts_with_the_stop_signals_ignored_and_blocked_and_unblocks_them_after_init():
    """The worker's ``init`` finds SIGINT and SIGTERM ignored and blocked (set by the parent around the start),
    with the parent's other blocked signals (SIGUSR1 here); by its first call they are unblocked; it is in a
    process group of its own and its parent is this process. The parent's handlers (a SIGTERM handler of its
    own here) and its signal mask are exactly as they were before."""

    def on_term(signum, frame):
        raise AssertionError("no SIGTERM here")

    handlers = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    mask = signal.pthread_sigmask(signal.SIG_SETMASK, {signal.SIGUSR1})
    try:
        signal.signal(signal.SIGTERM, on_term)
        with _forked_pool(1) as pool:
            pool.submit("a", ("state",))
            assert signal.getsignal(signal.SIGTERM) is on_term
            assert signal.getsignal(signal.SIGINT) is handlers[signal.SIGINT]
            assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == {signal.SIGUSR1}
            state = _settle(pool)["a"][1]
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGTERM, handlers[signal.SIGTERM])
    assert all(state["at_init"][s] == signal.SIG_IGN for s in STOP_SIGNALS), state
    assert state["at_init"]["blocked"] == {*STOP_SIGNALS, signal.SIGUSR1}
    assert state["blocked"] == {signal.SIGUSR1}
    assert state["pgrp"] == state["pid"] != os.getpgrp() and state["ppid"] == os.getpid()


def test_a_pool_used_from_another_thread_blocks_the_stop_signals_without_setting_handlers():
    """From a thread other than the main one (where ``signal.signal`` is refused) the pool still starts workers:
    the stop signals are blocked while it does (a per-thread mask), their handlers are left alone. The handlers
    are set to known ones first (Python's defaults): in the whole suite an earlier test may leave others."""
    known = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    handlers = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    try:
        for s in STOP_SIGNALS:
            signal.signal(s, known[s])
        with _forked_pool(1) as pool:
            _within(GUARD, lambda: pool.submit("a", ("state",)))
            state = _settle(pool)["a"][1]
    finally:
        for s in STOP_SIGNALS:
            signal.signal(s, handlers[s])
    assert set(STOP_SIGNALS) <= state["at_init"]["blocked"]
    assert all(state["at_init"][s] == known[s] != signal.SIG_IGN for s in STOP_SIGNALS), state["at_init"]


def test_a_worker_that_exits_costs_its_call_only_and_the_next_call_gets_a_new_worker():
    """A call whose worker ends (``os._exit(3)``) is ``(key, False, WorkerDied)`` with the pid, the exit status
    and a message naming both; the other worker's call is answered; the dead worker is dropped and the next call
    starts a new process."""
    with _forked_pool(2) as pool:
        pool.submit("a", ("state",))
        first = _settle(pool)["a"][1]["pid"]
        pool.submit("b", ("exit", 3))
        pool.submit("c", ("square", 5))
        found = _settle(pool)
        ok, died = found["b"]
        assert not ok and isinstance(died, WorkerDied) and (died.pid, died.exitcode) == (first, 3)
        assert str(died) == f"its worker process (pid {first}) exited with status 3"
        assert found["c"] == (True, 25) and first not in pool.pids and len(pool.pids) == 1
        pool.submit("d", ("state",))
        pool.submit("e", ("state",))
        found = _settle(pool)
        assert first not in {found["d"][1]["pid"], found["e"][1]["pid"]} and len(pool.pids) == 2


def test_an_answer_that_does_not_pickle_is_that_calls_error_and_the_worker_stays():
    """A return value that cannot be sent back is reported as a ``RuntimeError`` for that call; the worker
    answers the next call."""
    with _forked_pool(1) as pool:
        pool.submit("a", ("lambda",))
        ok, error = _settle(pool)["a"]
        assert not ok and type(error) is RuntimeError
        assert str(error).startswith("the answer could not be sent back: ")
        pids = pool.pids
        pool.submit("b", ("square", 2))
        assert _settle(pool)["b"] == (True, 4) and pool.pids == pids


def test_a_call_whose_worker_becomes_ready_after_the_pool_stops_is_not_started(tmp_path):
    """``stopping`` set before the new worker said "ready": its call is ``(key, False, NotStarted)`` and never
    runs (its file is not made); the worker is free again."""
    marker = tmp_path / "ran"
    with _forked_pool(1) as pool:
        pool.submit("a", ("touch", str(marker)))
        pool.stopping = True
        [(key, (ok, error))] = _settle(pool).items()
        assert key == "a" and not ok and type(error) is NotStarted
        assert str(error) == "the pool was stopping when its worker became ready"
        assert (pool.running, pool.free, len(pool.pids)) == (0, True, 1)
    assert not marker.exists()


def test_results_waits_at_most_its_timeout_and_at_once_without_calls():
    """``results(timeout)`` yields nothing while the only call is still running (it returns after ``timeout``,
    not when the call ends); with no call given out it returns at once, even without a timeout."""
    r, w = os.pipe()
    try:
        with _forked_pool(1) as pool:
            assert _within(GUARD, lambda: list(pool.results())) == []
            pool.submit("a", ("read", r))
            for _ in range(3):  # the first one reads "ready" and sends the call
                assert _within(GUARD, lambda: list(pool.results(timeout=0.05))) == []
            assert pool.running == 1
            os.write(w, b"x")
            assert _settle(pool) == {"a": (True, b"x")}
    finally:
        os.close(r), os.close(w)


def test_close_ends_every_worker_and_leaves_no_child_process():
    """``close()`` ends the idle workers (exit status 0: told to, not killed) and joins them: none is alive or
    among ``multiprocessing.active_children()``; the pool is empty; a second ``close`` does nothing."""
    pool = _forked(2)
    pool.submit("a", ("square", 1))
    pool.submit("b", ("square", 2))
    _settle(pool)
    processes = [w.process for w in pool._workers]
    assert len(processes) == 2 and all(p.is_alive() for p in processes)
    _within(GUARD, pool.close)
    assert [p.exitcode for p in processes] == [0, 0]
    assert not set(processes) & set(multiprocessing.active_children())
    assert (pool.pids, pool.running, pool._workers) == ([], 0, [])
    _within(GUARD, pool.close)


def test_close_without_waiting_leaves_a_running_call_to_end_on_its_own():
    """``close(wait=False, timeout)`` gives a running call ``timeout`` seconds and returns (the call here cannot
    end before the test lets it); the worker, its pipe closed, ends after its call without an answer to
    send, with status 0."""
    r, w = os.pipe()
    try:
        pool = _forked(1)
        pool.submit("a", ("read", r))
        deadline = time.monotonic() + GUARD
        while not pool.pids:  # until its "ready" is read and the call sent
            assert time.monotonic() < deadline
            assert list(pool.results(timeout=0.1)) == []
        [process] = [w.process for w in pool._workers]
        _within(GUARD, lambda: pool.close(wait=False, timeout=0.05))
        assert process.is_alive() and pool._workers == []
        os.write(w, b"x")
        process.join(GUARD)
        assert process.exitcode == 0
    finally:
        os.close(r), os.close(w)


def test_leaving_the_with_block_closes_and_waits_only_when_no_exception_left_it(monkeypatch):
    """``with pool:`` ends with ``close(wait=True)``; left by an exception, with ``close(wait=False)`` (a
    Ctrl-C does not wait for the running calls)."""
    pool = WorkerPool(1, _call, _record_start)
    calls = []
    monkeypatch.setattr(pool, "close", lambda wait=True, timeout=10.0: calls.append(wait))
    with pool:
        pass
    with pytest.raises(KeyError), pool:
        raise KeyError("x")
    assert calls == [True, False]


class _Conn:
    """A worker's end of the pipe, scripted: ``recv`` gives ``incoming`` in turn (an exception is raised);
    ``send`` pickles as a pipe does, then records, unless ``refuse`` (a message type) says it fails with OSError."""

    def __init__(self, incoming: list, refuse: type | None = None) -> None:
        self.incoming, self.refuse, self.sent = list(incoming), refuse, []

    def recv(self):
        item = self.incoming.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    def send(self, message) -> None:
        if self.refuse is not None and isinstance(message, self.refuse):
            raise BrokenPipeError("the parent is gone")
        pickle.dumps(message)
        self.sent.append(message)


def _worker_main_here(monkeypatch, conn: _Conn) -> list:
    """``_worker_main`` run in this process, its process-wide steps recorded instead of done: returns them in
    order (``setpgrp``, ``die_with_parent``, ``init``, the mask change)."""
    steps: list = []
    monkeypatch.setattr(_workers, "os", SimpleNamespace(setpgrp=lambda: steps.append("setpgrp")))
    monkeypatch.setattr(_workers, "die_with_parent", lambda parent: steps.append(("die_with_parent", parent)))
    monkeypatch.setattr(signal, "pthread_sigmask", lambda how, signals: steps.append((how, tuple(signals))))
    _within(GUARD, lambda: _workers._worker_main(conn, 123, _call, lambda: steps.append("init")))
    return steps


def test_a_worker_gets_ready_then_answers_each_call_with_its_key_until_told_to_stop(monkeypatch):
    """``_worker_main``: leaves the process group, dies with its parent (the pid it was given), runs ``init``,
    unblocks the stop signals, in that order, then says "ready"; each call ``(key, args)`` is answered
    ``(key, True, value)``, an exception (a ``KeyboardInterrupt`` too) ``(key, False, exception)``, an answer
    that does not pickle ``(key, False, RuntimeError)``; ``None`` ends it (what follows is not read)."""
    conn = _Conn(
        [
            ("a", ("square", 3)),
            ("b", ("raise", "no")),
            ("c", ("interrupt",)),
            ("d", ("lambda",)),
            None,
            ("never", ("square", 1)),
        ]
    )
    steps = _worker_main_here(monkeypatch, conn)
    assert steps == [
        "setpgrp",
        ("die_with_parent", 123),
        "init",
        (signal.SIG_UNBLOCK, STOP_SIGNALS),
    ]
    ready, a, b, c, d = conn.sent
    assert ready == "ready" and a == ("a", True, 9)
    assert b[:2] == ("b", False) and type(b[2]) is ValueError and b[2].args == ("no",)
    assert c[:2] == ("c", False) and type(c[2]) is KeyboardInterrupt
    assert d[:2] == ("d", False) and type(d[2]) is RuntimeError
    assert str(d[2]).startswith("the answer could not be sent back: ")
    assert conn.incoming == [("never", ("square", 1))]


@pytest.mark.parametrize(
    "end",
    [EOFError(), OSError("closed"), KeyboardInterrupt()],
    ids=["EOFError", "OSError", "KeyboardInterrupt"],
)
def test_a_worker_ends_quietly_when_its_pipe_ends_or_a_ctrl_c_interrupts_the_wait(monkeypatch, end):
    """Waiting for a call: the pipe's end (EOFError, OSError) or a Ctrl-C ends the worker without an error."""
    conn = _Conn([("a", ("square", 2)), end, ("never", ("square", 1))])
    _worker_main_here(monkeypatch, conn)
    assert conn.sent == ["ready", ("a", True, 4)] and conn.incoming == [("never", ("square", 1))]


def test_a_worker_whose_parent_is_gone_ends_without_reading_more(monkeypatch):
    """ "ready" or an answer that cannot be sent (the parent is gone): the worker ends, reading nothing more."""
    conn = _Conn([("never", ("square", 1))], refuse=str)
    _worker_main_here(monkeypatch, conn)
    assert conn.sent == [] and conn.incoming == [("never", ("square", 1))]
    conn = _Conn([("a", ("square", 2)), ("never", ("square", 1))], refuse=tuple)
    _worker_main_here(monkeypatch, conn)
    assert conn.sent == ["ready"] and conn.incoming == [("never", ("square", 1))]


# -- die_with_parent ------------------------------------------------------------------------------------------


class _Fakes:
    """``die_with_parent``'s outside world, recorded: libc's prctl, the SIGHUP handler, the watchdog thread (not
    started: its target is run by the test), its waits, ``getppid`` and ``kill``."""

    def __init__(self, monkeypatch, libc: str | None = "libc.so.fake", prctl_error: type | None = None):
        self.ppid, self.kills, self.waits, self.prctl, self.handlers, self.threads = 100, [], [], [], [], []
        fakes = self

        class CDLL:
            def __init__(self, name, use_errno=False):
                fakes.libc = (name, use_errno)
                if prctl_error is OSError:
                    raise OSError("no such library")

            def prctl(self, *args):
                if prctl_error is AttributeError:
                    raise AttributeError("prctl")
                fakes.prctl.append(args)

        class Thread:
            def __init__(self, target, name, daemon):
                self.target, self.name, self.daemon, self.started = target, name, daemon, False
                fakes.threads.append(self)

            def start(self):
                self.started = True

        class Event:
            def wait(self, timeout):
                fakes.waits.append(timeout)
                if len(fakes.waits) == 2:
                    fakes.ppid = 1  # the parent ends during the second wait

        monkeypatch.setattr(
            _workers,
            "ctypes",
            SimpleNamespace(CDLL=CDLL, util=SimpleNamespace(find_library=lambda name: libc)),
        )
        monkeypatch.setattr(
            _workers, "threading", SimpleNamespace(Lock=threading.Lock, Thread=Thread, Event=Event)
        )
        monkeypatch.setattr(
            _workers,
            "os",
            SimpleNamespace(
                getppid=lambda: self.ppid, getpid=lambda: 4242, kill=lambda *a: self.kills.append(a)
            ),
        )
        monkeypatch.setattr(signal, "signal", lambda signum, handler: self.handlers.append((signum, handler)))

    def sighup(self):
        [(signum, handler)] = self.handlers
        assert signum == signal.SIGHUP
        _within(GUARD, lambda: handler(signal.SIGHUP, None))


def test_die_with_parent_asks_the_kernel_for_a_sighup_and_sends_sigterm_once_the_parent_is_gone(monkeypatch):
    """``prctl(PR_SET_PDEATHSIG = 1, SIGHUP, 0, 0, 0)`` through libc (errno kept); a SIGHUP while the parent is
    still this process's parent (a parent *thread* ended) does nothing; the first one after sends ``signum``
    (SIGTERM by default) to this process, a later one nothing (once); a daemon watchdog thread is started."""
    fakes = _Fakes(monkeypatch)
    die_with_parent(100)
    assert fakes.libc == ("libc.so.fake", True) and fakes.prctl == [(1, int(signal.SIGHUP), 0, 0, 0)]
    [thread] = fakes.threads
    assert thread.started and thread.daemon is True and thread.name == "parent-watchdog"
    fakes.sighup()
    assert fakes.kills == []
    fakes.ppid = 1
    fakes.sighup()
    assert fakes.kills == [(4242, signal.SIGTERM)]
    fakes.sighup()
    thread.target()  # the watchdog, having seen it fired, ends at once
    assert fakes.kills == [(4242, signal.SIGTERM)] and fakes.waits == []


def test_die_with_parent_s_watchdog_polls_the_parent_every_second_and_fires_once(monkeypatch):
    """The watchdog checks ``getppid()`` now and after each 1 s wait; when the parent is gone it sends
    ``signum`` (SIGUSR1 here) once and ends; a SIGHUP after that sends nothing."""
    fakes = _Fakes(monkeypatch)
    die_with_parent(100, signal.SIGUSR1)
    _within(GUARD, fakes.threads[0].target)
    assert fakes.waits == [1.0, 1.0, 1.0] and fakes.kills == [(4242, signal.SIGUSR1)]
    fakes.sighup()
    assert fakes.kills == [(4242, signal.SIGUSR1)]


def test_die_with_parent_fires_at_once_when_the_parent_has_already_ended(monkeypatch):
    """Called with a pid that is no longer the parent: the watchdog's first check sends the signal."""
    fakes = _Fakes(monkeypatch)
    fakes.ppid = 1
    die_with_parent(100)
    _within(GUARD, fakes.threads[0].target)
    assert fakes.kills == [(4242, signal.SIGTERM)] and fakes.waits == [1.0]


@pytest.mark.parametrize(
    ("libc", "error"),
    [(None, None), ("libc.so.fake", OSError), ("libc.so.fake", AttributeError)],
    ids=["no-libc", "libc-fails", "no-prctl"],
)
def test_die_with_parent_without_prctl_still_has_its_handler_and_watchdog(monkeypatch, libc, error):
    """No libc found, libc that does not load, no ``prctl`` in it (not Linux): no error; the SIGHUP handler and
    the watchdog are set up all the same."""
    fakes = _Fakes(monkeypatch, libc=libc, prctl_error=error)
    die_with_parent(100)
    assert fakes.prctl == [] and len(fakes.handlers) == 1 and fakes.threads[0].started


def _orphan(configure, *, from_thread: bool) -> bytes:
    """Fork A, which forks B (from a thread of A that then ends, if ``from_thread``); B runs ``configure(w)``
    then ``die_with_parent(A)`` and writes ``R``; the test kills A (SIGKILL) once B has written ``R`` (and
    ``H``, its first SIGHUP, if ``from_thread``). Returns what B wrote on ``w`` until it ended."""
    r, w = os.pipe()
    handshake_r, handshake_w = os.pipe()
    a = os.fork()
    if a == 0:  # A
        try:
            os.close(r)

            def fork_b():
                if os.fork() == 0:  # B
                    try:
                        configure(w)
                        die_with_parent(os.getppid())
                        os.write(w, b"R"), os.write(handshake_w, b"r")
                        for _ in range(int(GUARD / 0.05)):
                            time.sleep(0.05)
                    finally:
                        os._exit(1)
                os.read(handshake_r, 1)  # B has asked for its parent-death signal: this thread may end

            if from_thread:
                thread = threading.Thread(target=fork_b)
                thread.start()
                thread.join()
            else:
                fork_b()
            os.close(w)
            time.sleep(GUARD)
        finally:
            os._exit(1)
    os.close(w), os.close(handshake_r), os.close(handshake_w)
    got = b""
    try:
        while True:
            if got == (b"RH" if from_thread else b"R"):
                os.kill(a, signal.SIGKILL)
            assert select.select([r], [], [], GUARD)[0], f"B wrote {got!r}, then nothing for {GUARD} s"
            part = os.read(r, 64)
            if not part:
                return got
            got += part
    finally:
        os.kill(a, signal.SIGKILL)  # again, or first if B failed (A is ours until waited for: no other pid)
        os.waitpid(a, 0)
        os.close(r)


def _write_on_sigterm(w: int) -> None:
    signal.signal(signal.SIGTERM, lambda s, f: (os.write(w, b"T"), os._exit(0)))


def _kernel_only(w: int) -> None:
    """In B: no watchdog thread, SIGHUP noted as ``H`` after the handler of die_with_parent, ``kill`` noted as
    ``K`` (and B ends)."""
    _workers.threading = SimpleNamespace(
        Lock=threading.Lock, Thread=lambda **k: SimpleNamespace(start=lambda: 0)
    )
    _workers.os = SimpleNamespace(
        getppid=os.getppid, getpid=os.getpid, kill=lambda *a: (os.write(w, b"K"), os._exit(0))
    )
    real_signal = signal.signal

    def set_handler(signum, handler):
        real_signal(signum, lambda s, f: (handler(s, f), os.write(w, b"H")))

    _workers.signal = SimpleNamespace(signal=set_handler, SIGHUP=signal.SIGHUP)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_die_with_parent_on_linux_the_kernel_tells_and_a_parent_thread_ending_is_not_the_parent_ending():
    """Real processes, the kernel's path alone (no watchdog): B, forked by a thread of A, gets a SIGHUP when that
    thread ends and does nothing (``H`` without ``K``); A killed, B's next SIGHUP sends the signal (``K``).
    Control: B forked by A's main thread gets ``K`` when A is killed, without a SIGHUP before."""
    assert _orphan(_kernel_only, from_thread=True) == b"RHK"
    assert _orphan(_kernel_only, from_thread=False) == b"RK"


def test_die_with_parent_a_process_gets_sigterm_when_its_parent_is_killed():
    """Real processes, the whole mechanism: A killed, B (its SIGTERM handler writes ``T``) gets SIGTERM.
    Without prctl (no libc found), the watchdog alone sends it (within its 1 s poll)."""
    assert _orphan(_write_on_sigterm, from_thread=False) == b"RT"

    def no_libc(w: int) -> None:
        _write_on_sigterm(w)
        _workers.ctypes = SimpleNamespace(util=SimpleNamespace(find_library=lambda name: None))

    assert _orphan(no_libc, from_thread=False) == b"RT"
