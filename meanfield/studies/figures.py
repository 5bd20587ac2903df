"""``meanfield figures``: regenerate every documentation figure by the code users run.

Each theory check's ``plot()`` (through [`meanfield.studies.validation.validate`][meanfield.studies.validation.validate]) gives ``<check>.png``; the
scripts ``experiments/overview.py`` and ``experiments/quickstart.py`` give ``overview.png`` (the landing page's
picture) and ``quickstart.png``. Nothing here draws a figure of its own.
"""

from __future__ import annotations

import runpy
import shutil
import sys
import tempfile
from pathlib import Path

from ..shipped import source_root
from .plotting import page_layout
from .validation import default_theory_dir, discover, validate

__all__ = ["SCRIPTS", "generate"]

SCRIPTS = ("overview.py", "quickstart.py")
"""The scripts of ``experiments/`` run with the figure's path as their argument: ``overview.png`` (the landing
page's picture) and ``quickstart.png``."""


def generate(
    out: str | Path = "docs/figures",
    *,
    preset: str = "fast",
    keep_existing: bool = False,
    progress: bool | None = None,
) -> list[Path]:
    """Write the documentation figures to ``out`` and return their paths.

    Args:
        out: the folder (created).
        preset: the theory checks' preset (``"fast"`` for CI builds, ``"full"`` for paper figures).
        keep_existing: skip figures already in ``out``.
        progress: show a progress bar over the checks ([`meanfield.progress`][meanfield.progress]).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    theory = default_theory_dir()
    names = [n for n in discover(theory) if not (keep_existing and (out / f"{n}.png").exists())]
    with page_layout():  # readable at the page's width: ≤ 2 panels a row, ≤ 8.4 in, 11-pt text
        _draw(out, names, preset, keep_existing, progress)
    return sorted(out.glob("*.png"))


def _draw(out: Path, names: list[str], preset: str, keep_existing: bool, progress: bool) -> None:
    theory = default_theory_dir()
    if names:
        with tempfile.TemporaryDirectory() as tmp:
            report = validate(names, preset=preset, out=tmp, theory_dir=theory, progress=progress, echo=None)
            for r in report.results:
                png = Path(tmp) / f"{r.name}.png"
                if png.exists():
                    shutil.copyfile(png, out / png.name)
                else:
                    print(f"meanfield figures: {r.name} made no figure ({'error' if r.error else 'no plot'})")
    root = source_root()  # the scripts are in a source checkout's experiments/ (a wheel has no scripts)
    for script in SCRIPTS:
        path = None if root is None else root / "experiments" / script
        png = out / f"{Path(script).stem}.png"
        if path is None or not path.exists() or (keep_existing and png.exists()):
            continue
        argv = sys.argv
        try:
            sys.argv = [str(path), str(png)]
            runpy.run_path(str(path), run_name="__main__")
        finally:
            sys.argv = argv
