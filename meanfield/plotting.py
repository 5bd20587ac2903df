"""One look for every figure: a style, a figure factory and an atomic PNG writer.

Every figure of the package (theory checks, studies, experiments, benchmarks) is made with
:func:`figure` and written with :func:`save`, so that the docs look like one piece.

Importing it leaves matplotlib's backend as it is (``%matplotlib inline`` in a notebook stays inline); the
command line, which only writes files, asks for the non-interactive ``Agg`` (``meanfield.cli.main``).
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt

from meanfield._io import write_atomic

__all__ = ["STYLE", "figure", "save"]

STYLE = {
    "figure.dpi": 110,
    "savefig.dpi": 130,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 10,
    "legend.frameon": False,
}


def figure(ncols: int = 1, nrows: int = 1, *, width: float = 4.2, height: float = 3.2, **kwargs: object):
    """Return ``(fig, axes)`` in the package style; ``axes`` is a single Axes when ``ncols == nrows == 1``.

    Args:
        ncols: columns of axes.
        nrows: rows of axes.
        width: the width of **one column** in inches: the figure is ``width · ncols`` wide
            (``figure(ncols=2, width=4.8)`` is 9.6 inches wide).
        height: the height of **one row** in inches: the figure is ``height · nrows`` high.
        **kwargs: passed to ``matplotlib.pyplot.subplots`` (e.g. ``sharex=True``).
    """
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(
            nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kwargs
        )
    for ax in axes.flat:
        ax.grid(True, alpha=STYLE["grid.alpha"])
        ax.spines[["top", "right"]].set_visible(False)
    return fig, (axes[0, 0] if ncols == nrows == 1 else axes.squeeze())


def save(fig, path: str | os.PathLike) -> Path:
    """Write ``fig`` to ``path`` (PNG unless the suffix says otherwise) atomically and close it."""
    path = Path(path)
    try:
        fig.tight_layout()
        write_atomic(  # the style's dpi: rc_context only covered creation
            path, lambda f: fig.savefig(f, format=path.suffix[1:] or "png", dpi=STYLE["savefig.dpi"])
        )
    finally:
        plt.close(fig)
    return path
