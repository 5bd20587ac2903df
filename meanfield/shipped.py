"""What ships with the package besides its code: the theory checks and the experiment configurations.

Their readable home is the source tree: ``theory/*.py`` (the checks ``meanfield validate`` runs) and
``experiments/*/*.toml`` (the configurations ``meanfield run`` trains), beside ``meanfield/``. A wheel
carries copies of exactly those files, made from the same folders when the wheel is built (``setup.py``,
with the patterns of [`SHIPPED`][meanfield.shipped.SHIPPED]), at ``meanfield/theory/`` and ``meanfield/experiments/``. So:

- installed from a wheel (``pip install meanfield-sde``, or ``pip install .``): the copies inside the
  installed package;
- a source checkout, or an editable install of one (``pip install -e .``): the checkout's own folders, so
  an edit to ``theory/`` or ``experiments/`` is seen at once and there is no second copy to drift.

The folders used never depend on the working directory: ``meanfield validate`` runs the checks that came
with the code it imports, wherever it is started.

A configuration's *name* is its path under ``experiments/`` without the suffix, with ``config.toml`` read as
its folder: ``experiments/char_lm/config.toml`` is ``char_lm``, ``experiments/particle_attention/toy.toml``
is ``particle_attention/toy``. [`configs`][meanfield.shipped.configs] lists them, [`config_path`][meanfield.shipped.config_path] finds one.
"""

from __future__ import annotations

import os
from pathlib import Path

from meanfield.config import ConfigError, load_toml

__all__ = [
    "SHIPPED",
    "NotShipped",
    "UnknownConfig",
    "config_name",
    "config_path",
    "configs",
    "describe",
    "experiments_dir",
    "find_config",
    "source_root",
    "theory_dir",
]

SHIPPED = {"theory": ("*.py",), "experiments": ("*/*.toml",)}
"""The folders a wheel carries into ``meanfield/`` and the files of each (glob patterns relative to the
folder); ``setup.py`` copies the same (a test checks the two agree)."""

PACKAGE = Path(__file__).resolve().parent


class NotShipped(FileNotFoundError):
    """Neither the installed package nor a source checkout holds the folder."""


class UnknownConfig(ConfigError):
    """A configuration name that is neither a file nor a shipped configuration."""


def source_root() -> Path | None:
    """The source checkout ``meanfield`` is imported from (the folder holding ``pyproject.toml`` beside
    ``meanfield/``), or ``None`` for an installed wheel."""
    root = PACKAGE.parent
    return root if (root / "pyproject.toml").is_file() else None


def _folder(name: str) -> Path:
    installed = PACKAGE / name  # a wheel's copy
    if installed.is_dir():
        return installed
    root = source_root()
    if root is not None and (root / name).is_dir():
        return root / name
    raise NotShipped(
        f"no {name}/ folder: neither in the installed package ({installed}) nor in a source checkout beside "
        f"it; reinstall meanfield-sde from a wheel or an sdist"
    )


def theory_dir() -> Path:
    """The folder of the theory checks: the installed package's copy, else the source checkout's ``theory/``."""
    return _folder("theory")


def experiments_dir() -> Path:
    """The folder of the experiment configurations (as [`theory_dir`][meanfield.shipped.theory_dir], for ``experiments/``)."""
    return _folder("experiments")


def config_name(path: Path, root: Path | None = None) -> str:
    """The name of the configuration file ``path`` under ``root`` (default [`experiments_dir`][meanfield.shipped.experiments_dir])."""
    rel = Path(path).relative_to(root if root is not None else experiments_dir())
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "config" and len(parts) > 1:
        parts = parts[:-1]
    return "/".join(parts)


def configs() -> dict[str, Path]:
    """The shipped configurations, ``{name: path}``, sorted by name."""
    try:
        root = experiments_dir()
    except NotShipped:
        return {}
    paths = sorted({p for pattern in SHIPPED["experiments"] for p in root.glob(pattern) if p.is_file()})
    return dict(sorted((config_name(p, root), p) for p in paths))


def config_path(name: str) -> Path:
    """The file of the shipped configuration ``name`` (see [`configs`][meanfield.shipped.configs]).

    Raises:
        UnknownConfig: ``name`` is not one of them; the message lists those there are.
    """
    found = configs()
    if name in found:
        return found[name]
    listed = ", ".join(found) or "none"
    raise UnknownConfig(
        f"no configuration file or shipped configuration named {name!r}; shipped: {listed} "
        "(meanfield run --list), or pass the path of a TOML file"
    )


def find_config(arg: str | os.PathLike) -> tuple[Path, str | None]:
    """The configuration a command line names: ``(path, None)`` for a file that exists (a user's own TOML
    wins over a shipped name), else ``(path, name)`` for a shipped configuration.

    Raises:
        ConfigError: a ``.toml`` path that does not exist, or [`UnknownConfig`][meanfield.shipped.UnknownConfig] for an unknown name.
    """
    path = Path(arg)
    if path.is_file():
        return path, None
    text = os.fspath(arg)
    if text.endswith(".toml"):
        raise ConfigError(
            f"configuration file {path} does not exist; the shipped configurations are run by name "
            "(meanfield run --list)"
        )
    return config_path(text), text


def describe(path: Path) -> tuple[str, list[str]]:
    """A configuration's ``description`` and the names of its presets."""
    raw = load_toml(path)
    presets = raw.get("presets", {})
    return str(raw.get("description", "")), list(presets) if isinstance(presets, dict) else []
