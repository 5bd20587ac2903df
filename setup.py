"""Build step: the wheel carries the theory checks and the experiment configurations inside the package.

Everything else about the build is in ``pyproject.toml``. ``theory/*.py`` and ``experiments/*/*.toml`` stay
the readable top-level folders of the source tree; when a wheel is built (from the tree or from the sdist,
which holds them: ``MANIFEST.in``), ``build_py`` copies them to ``meanfield/theory/`` and
``meanfield/experiments/`` in the build, so an installed wheel finds them beside its code
(:mod:`meanfield.shipped`). An editable install copies nothing: it reads the checkout's own folders.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent

SHIPPED = {"theory": ("*.py",), "experiments": ("*/*.toml",)}
"""Folder → files copied into ``meanfield/<folder>/``: the same as ``meanfield.shipped.SHIPPED`` (a test
checks it)."""


def shipped_files() -> list[tuple[Path, str]]:
    """``(source, path inside the package)`` for every file a wheel carries from the top-level folders."""
    out = []
    for folder, patterns in SHIPPED.items():
        for pattern in patterns:
            for source in sorted((HERE / folder).glob(pattern)):
                if source.is_file():
                    out.append((source, f"{folder}/{source.relative_to(HERE / folder).as_posix()}"))
    return out


class BuildWithShipped(build_py):
    """``build_py`` that also copies :data:`SHIPPED` into the built ``meanfield`` package."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout's folders
        for source, inner in shipped_files():
            target = Path(self.build_lib) / "meanfield" / inner
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        extra = [str(Path(self.build_lib) / "meanfield" / inner) for _, inner in shipped_files()]
        return [*super().get_outputs(include_bytecode), *extra]


if __name__ == "__main__":
    setup(cmdclass={"build_py": BuildWithShipped})
