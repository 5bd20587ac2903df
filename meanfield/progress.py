"""One progress-bar policy for every long call.

``simulate``, ``sweep``, ``convergence_in_m``, ``validate`` and ``figures.generate`` take
``progress: bool | None = None``; the run loop and ``sweep_runs`` (``meanfield run``, ``meanfield sweep``) follow
the same rule unless ``quiet``:

* ``progress=True`` shows the bar at once, ``progress=False`` never shows it;
* ``progress=None`` (the default) shows it when the call has lasted [`DELAY`][meanfield.progress.DELAY] seconds, if stderr is a
  terminal or the call runs in a Jupyter kernel — never into a log file or a pipe — and not inside another
  meanfield call that has a bar (a ``simulate`` within the function a ``sweep`` runs: the sweep's bar only).

[`set_progress`][meanfield.progress.set_progress] (or the environment variable ``MEANFIELD_PROGRESS=0``/``1``, read at each call) turns the
default off or on for the whole process: ``meanfield.set_progress(False)`` silences every ``progress=None`` call.
"""

from __future__ import annotations

import os
import sys

from tqdm.auto import tqdm

__all__ = ["DELAY", "progress_bar", "progress_default", "set_progress"]

DELAY = 1.0
"""Seconds a call with ``progress=None`` runs before its bar appears (a quick call shows none)."""

_DEFAULT: bool | None = None  # set_progress's choice; None: MEANFIELD_PROGRESS, else the terminal test
_WITH_BARS: set = set()  # the code objects of the calls that made a bar: a call inside one of them shows none


def set_progress(enabled: bool | None) -> None:
    """Show (``True``) or hide (``False``) the progress bars of every call with ``progress=None``; ``None``
    goes back to the automatic default (``MEANFIELD_PROGRESS``, else: in a terminal or a notebook)."""
    global _DEFAULT
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"set_progress takes True, False or None, got {enabled!r}")
    _DEFAULT = enabled


def _interactive() -> bool:
    """Whether someone watches: stderr is a terminal, or the process is a Jupyter kernel (what tqdm.auto
    tests to draw a widget)."""
    if sys.stderr is not None and hasattr(sys.stderr, "isatty") and sys.stderr.isatty():
        return True
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def progress_default() -> bool:
    """Whether a call with ``progress=None`` shows its bar (outside another call's bar): [`set_progress`][meanfield.progress.set_progress]'s
    choice, else ``MEANFIELD_PROGRESS``, else whether stderr is a terminal or the process a Jupyter kernel."""
    if _DEFAULT is not None:
        return _DEFAULT
    env = os.environ.get("MEANFIELD_PROGRESS", "").strip()
    if env:
        if env not in ("0", "1"):
            raise ValueError(f"MEANFIELD_PROGRESS must be 0 (no progress bars) or 1 (bars), got {env!r}")
        return env == "1"
    return _interactive()


def _inside_a_bar(frame) -> bool:
    """Whether a call that made a bar is running below ``frame`` on this thread's stack (a call interrupted by
    an error is no longer on it, even while its traceback keeps its bar open)."""
    while frame is not None:
        if frame.f_code in _WITH_BARS:
            return True
        frame = frame.f_back
    return False


# not mutated: its caller is the frame above it, and mutmut would put its trampoline there (one code object shared by
# every mutated function, which would then count as "inside a bar" everywhere; docs/testing.md)
def progress_bar(progress: bool | None, **kwargs) -> tqdm | _Hidden:  # pragma: no mutate block
    """The ``tqdm`` bar of the calling function under the policy above (``kwargs`` go to ``tqdm``).

    Args:
        progress: ``True`` (show at once), ``False`` (hide) or ``None`` (the default: see the module).
    """
    caller = sys._getframe(1)
    if progress is None:
        show = not _inside_a_bar(caller.f_back) and progress_default()
    else:
        show = bool(progress)
    _WITH_BARS.add(caller.f_code)
    if not show:
        return _Hidden(kwargs.get("iterable"))
    return tqdm(delay=DELAY if progress is None else 0.0, **kwargs)


class _Hidden:
    """The bar when none is shown: the calls the package makes on a ``tqdm``, doing nothing (a
    ``tqdm(disable=True)`` costs about 0.1 ms to make, a measurable share of a short ``simulate``)."""

    def __init__(self, iterable=None) -> None:
        self._iterable = iterable

    def __iter__(self):
        return iter(self._iterable)

    def __enter__(self) -> _Hidden:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: int = 1) -> None:
        return None

    def close(self) -> None:
        return None

    def set_postfix(self, *args: object, **kwargs: object) -> None:
        return None

    def set_postfix_str(self, *args: object, **kwargs: object) -> None:
        return None
