"""Where the loaders look for data: [`default_root`][meanfield.data._paths.default_root] and the folder search shared by every loader."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from ._errors import not_found

__all__ = ["DEBIAN_DATASETS", "default_root", "locate"]

DEBIAN_DATASETS = Path("/usr/share/datasets")
"""Where Debian's ``dataset-*`` packages install (``dataset-fashion-mnist`` → ``fashion-mnist/``)."""


def _checkout_data() -> Path | None:
    """``<repo>/../shared/data`` when the package runs from a source checkout (``<repo>/pyproject.toml``)."""
    repo = Path(__file__).resolve().parents[2]
    if (repo / "pyproject.toml").is_file() and (repo / "meanfield").is_dir():
        return repo.parent / "shared" / "data"
    return None


def default_root() -> Path:
    """The data folder used when the caller names none.

    In order: ``$MEANFIELD_DATA`` if set (whether or not it exists), else the first existing folder of
    ``./data`` and ``<repo>/../shared/data`` (only when the package runs from a source checkout), else
    ``./data``. The path is returned absolute.
    """
    env = os.environ.get("MEANFIELD_DATA")
    if env:
        return Path(env).expanduser().absolute()
    for candidate in (Path("data"), _checkout_data()):
        if candidate is not None and candidate.is_dir():
            return candidate.absolute()
    return Path("data").absolute()


def candidates(
    root: str | os.PathLike | None, names: Sequence[str], extra_default: Sequence[Path] = ()
) -> list[Path]:
    """The folders to try, in order: each base itself, then ``base/name`` for each conventional name.

    The bases are ``[root]`` when a root is given, else ``[default_root(), *extra_default]``.
    """
    bases = [Path(root).expanduser()] if root is not None else [default_root(), *extra_default]
    out: list[Path] = []
    for base in bases:
        out.append(base)
        out.extend(base / name for name in names)
    return list(dict.fromkeys(out))


def locate(
    dataset: str,
    root: str | os.PathLike | None,
    names: Sequence[str],
    looks_like: Callable[[Path], bool],
    expected: str,
    extra_default: Sequence[Path] = (),
) -> Path:
    """The first candidate folder (see [`candidates`][meanfield.data._paths.candidates]) for which ``looks_like(path)`` is true.

    Raises:
        DataNotFoundError: no candidate holds the dataset; the message lists the candidates.
    """
    tried = candidates(root, names, extra_default)
    for path in tried:
        if looks_like(path):
            return path
    raise not_found(dataset, expected, tried)


def find_file(folder: Path, names: Sequence[str]) -> Path | None:
    """The first of ``folder/name`` that is a file, or ``None``."""
    for name in names:
        if (folder / name).is_file():
            return folder / name
    return None
