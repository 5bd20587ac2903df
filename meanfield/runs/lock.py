"""An exclusive lock on a run or sweep folder, held for the life of the process that writes it.

The lock is ``FOLDER/.lock``: an advisory ``flock`` on that file (released by the kernel when the holder exits,
however it exits: a SIGKILL leaves no live lock behind) plus a JSON record of the holder in the file (pid, host,
command, time), so that a refusal can name who holds the folder. A record left by a holder that is gone is
stale: on the same host, its pid no longer runs, or runs another process (the ``flock`` is free, and the
record's boot and start time, ``boot_id`` and ``started``, are not those of the process now under that pid);
the new holder takes the folder and says so. A record that names *another* host is not taken over while that host may still be writing (a
network file system may not carry ``flock`` between hosts): the refusal names the host and the file to remove
once its run is known to be gone.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from meanfield.runs.folder import RunFolderError

__all__ = ["FolderLock", "FolderLocked", "LOCK_NAME", "SWEEP_PID", "orphan_holder", "wait_until_free"]

LOCK_NAME = ".lock"
"""The lock file's name inside the folder."""
SWEEP_PID: int | None = None
"""In a sweep's worker process: the sweep's pid, written into the records of the locks it takes (``sweep_pid``),
so that a later sweep can tell a point held by a worker whose sweep is gone ([`orphan_holder`][meanfield.runs.lock.orphan_holder])."""


class FolderLocked(RunFolderError):
    """Another live process holds the folder's lock (the message names it)."""


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _describe(holder: dict[str, Any]) -> str:
    command = " ".join(holder.get("command", []))[:120]
    return f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('since')}" + (
        f" ({command})" if command else ""
    )


class FolderLock:
    """``with FolderLock(folder, "run"):`` holds ``folder/.lock`` exclusively (`meanfield.runs.lock`, module docstring).

    Args:
        folder: the run or sweep folder (created if missing).
        what: ``"run"`` or ``"sweep"``, for the messages.

    Raises:
        FolderLocked: on [`acquire`][meanfield.runs.lock.FolderLock.acquire], when a live process (on this host, or a record naming another host)
            holds the folder.
    """

    def __init__(self, folder: str | os.PathLike, what: str = "run") -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.what = what
        self._fd: int | None = None
        self.stale: dict[str, Any] | None = None  # the record of a dead holder this lock took over

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def _read(self, fd: int) -> dict[str, Any] | None:
        text = os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", "replace").strip()
        if not text:
            return None
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            return None
        return record if isinstance(record, dict) else None

    @staticmethod
    def _write(fd: int, record: dict[str, Any]) -> None:
        """Replace the lock file's content with ``record`` (one JSON line)."""
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, (json.dumps(record) + "\n").encode())

    def acquire(self) -> FolderLock:
        """Take the lock (see the class docstring); a no-op when already held."""
        import fcntl

        if self._fd is not None:
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            from meanfield.runs.folder import write_error

            raise write_error(error, self.path) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                holder = self._read(fd) or {}
                raise FolderLocked(
                    f"{self.folder} is in use by another {self.what}: {_describe(holder)}; wait for it to end, "
                    f"or use another --out"
                ) from None
            previous = self._read(fd)
            host = socket.gethostname()
            if previous is not None and not previous.get("released"):
                if previous.get("host") != host:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    raise FolderLocked(
                        f"{self.folder} is locked by a {self.what} on another host: {_describe(previous)}; if "
                        f"that process is gone, remove {self.path} and try again"
                    )
                pid = previous.get("pid")
                if (
                    isinstance(pid, int)
                    and pid != os.getpid()
                    and _alive(pid)
                    and _same_process(pid, previous)
                ):
                    # the flock is free but the pid lives: a file system without flock, or a holder that closed it
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    raise FolderLocked(
                        f"{self.folder} is in use by another {self.what}: {_describe(previous)}; wait for it to "
                        f"end, or remove {self.path} if it is not writing this folder"
                    )
                self.stale = previous
            record = {
                "pid": os.getpid(),
                **_identity(os.getpid()),
                "host": host,
                "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "command": list(sys.argv),
                "what": self.what,
            }
            if SWEEP_PID is not None:
                record["sweep_pid"] = SWEEP_PID
            try:
                self._write(fd, record)
                os.fsync(fd)
            except OSError as error:
                from meanfield.runs.folder import write_error

                fcntl.flock(fd, fcntl.LOCK_UN)
                raise write_error(error, self.path) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def release(self) -> None:
        """Mark the record released and drop the lock (idempotent; every exit path of a run calls it)."""
        import fcntl

        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):  # a full disk must not hide the run's own error
            record = self._read(fd) or {}
            record["released"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            self._write(fd, record)
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _start_ticks(pid: int) -> int | None:
    """Process ``pid``'s start time (clock ticks after boot, ``/proc/<pid>/stat`` field 22), or ``None``."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _identity(pid: int) -> dict[str, Any]:
    """What tells process ``pid`` from a later process given the same pid: the boot and its start time (where
    ``/proc`` has them)."""
    found = {"boot_id": _boot_id(), "started": _start_ticks(pid)}
    return {k: v for k, v in found.items() if v is not None}


def _same_process(pid: int, record: dict[str, Any]) -> bool:
    """Whether the live process ``pid`` is the holder ``record`` names: a Python process, started in the same
    boot at the same time when the record says when (a pid reused after a reboot or a power loss, even by
    another Python process, is not the holder)."""
    now = _identity(pid)
    for key in ("boot_id", "started"):
        if key in record and key in now and record[key] != now[key]:
            return False
    return _is_python(pid)


def _is_python(pid: int) -> bool:
    """Whether ``pid`` looks like a Python process (a recycled pid of another program is not a holder)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc: trust the pid
    return b"python" in cmdline or b"meanfield" in cmdline


def _parent(pid: int) -> int | None:
    """The parent pid of ``pid`` (from ``/proc``; ``None`` where there is none)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _held(path: Path) -> bool:
    """Whether a live process holds the ``flock`` of ``path`` (a dead one, zombie or not, holds none)."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops a lock taken here
    return False


def orphan_holder(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The lock record of ``folder`` when it is held by a sweep's worker whose sweep is gone (an orphan): the
    record names a ``sweep_pid``, its holder runs on this host, and that sweep is not its parent any more (or, without
    ``/proc``, no longer runs). ``None`` otherwise: no holder, a live sweep's worker, or a run started by hand."""
    path = Path(folder) / LOCK_NAME
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("released") or record.get("host") != socket.gethostname():
        return None
    pid, sweep = record.get("pid"), record.get("sweep_pid")
    if not (isinstance(pid, int) and isinstance(sweep, int)) or not _held(path):
        return None
    parent = _parent(pid)
    orphaned = parent != sweep if parent is not None else not _alive(sweep)
    return record if orphaned else None


def wait_until_free(folder: str | os.PathLike, timeout: float, poll: float = 0.1) -> bool:
    """Wait up to ``timeout`` seconds for no process to hold ``folder``'s lock; return whether none does."""
    path = Path(folder) / LOCK_NAME
    deadline = time.monotonic() + timeout
    while _held(path):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True
