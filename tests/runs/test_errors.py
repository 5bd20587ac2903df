"""Tests of :mod:`meanfield.runs.errors`: the run folder's errors, below every module that raises them."""

import errno
import pickle

import pytest

from meanfield.runs.errors import DiskFullError, FolderAccessError, RunFolderError


def test_an_access_error_is_an_os_error_and_a_run_folder_error_that_reads_as_its_message():
    """The command line maps a FolderAccessError to exit 1 (the machine refused) and any other RunFolderError to
    exit 2 (the input): both catches must see it, and its text is the one line that names the file (a plain
    OSError would print ``[Errno 28] …`` before it: the negative control)."""
    error = DiskFullError(
        errno.ENOSPC, "no space left on device writing run/config.toml; the earlier files are intact"
    )
    assert (
        isinstance(error, FolderAccessError)
        and isinstance(error, RunFolderError)
        and isinstance(error, OSError)
    )
    assert error.errno == errno.ENOSPC
    assert str(error) == "no space left on device writing run/config.toml; the earlier files are intact"
    plain = OSError(errno.ENOSPC, "no space left on device writing run/config.toml")
    assert str(plain).startswith("[Errno 28]")


@pytest.mark.parametrize("error", [
    RunFolderError("run/environment.json is unreadable (not a JSON object): restore it from a copy"),
    FolderAccessError(errno.EROFS, "cannot write run/.lock: the file system is read-only"),
    DiskFullError(errno.ENOSPC, "no space left on device writing run/metrics.jsonl"),
])  # fmt: skip
def test_the_errors_cross_processes_with_their_class_errno_and_message(error):
    """A sweep's worker sends its point's error to the parent by pickling it."""
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error)
    assert getattr(back, "errno", None) == getattr(error, "errno", None)
