"""The errors of a run folder, below every module of [`meanfield.runs`][meanfield.runs] that raises them.

[`RunFolderError`][meanfield.runs.errors.RunFolderError] is a folder that cannot be used as it is;
[`FolderAccessError`][meanfield.runs.errors.FolderAccessError] a file operation the machine refused (exit status 1, not 2);
[`DiskFullError`][meanfield.runs.errors.DiskFullError] a full disk. Imports nothing of meanfield.
"""

from __future__ import annotations


class RunFolderError(Exception):
    """A run folder that cannot be used as it is (a damaged file, another run's files, a full disk); the message
    names the file and what to do."""


class FolderAccessError(RunFolderError, OSError):
    """The machine refused a file operation of a run (a full disk, a read-only file system, no permission): an
    error of the environment, not of the input (the command line exits with status 1, not 2); the message names
    the file and what to do."""

    def __str__(self) -> str:
        return str(self.strerror)


class DiskFullError(FolderAccessError):
    """No space left on the device while writing a run's file; the earlier files are intact."""
