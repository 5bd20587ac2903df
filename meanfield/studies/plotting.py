"""One look for every figure: a style, a figure factory and an atomic PNG writer.

Every figure of the package (theory checks, studies, experiments, benchmarks) is made with
[`figure`][meanfield.studies.plotting.figure] and written with [`save`][meanfield.studies.plotting.save], so that the docs look like one piece.

Importing it leaves matplotlib's backend as it is (``%matplotlib inline`` in a notebook stays inline); the
command line, which only writes files, asks for the non-interactive ``Agg`` (``meanfield.cli.main``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from meanfield._io import write_atomic

__all__ = ["STYLE", "figure", "page_layout", "returned", "save"]

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


_PAGE: dict[str, float] = {}  # the geometry set by page_layout(), empty outside it


@contextmanager
def page_layout(columns: int = 2, width: float = 8.4, font_size: float = 11.0) -> Iterator[None]:
    r"""Make the figures of a documentation page readable at the page's width, inside the ``with`` block.

    A docs page shows a figure at most at the content width, about 690 CSS px (Material's layout at a
    1280-px window); a PNG ``w`` inches wide at ``STYLE["savefig.dpi"]`` (130) is shrunk to 690 px, so text of
    ``s`` pt shows at about $s \cdot 690 / (96 w)$ pt. Three panels in a row (12.6 in) showed 10-pt text at
    5.5 pt. Inside the block [`figure`][meanfield.studies.plotting.figure] puts at most ``columns`` panels in a row
    (a lone last panel centred), makes the figure at most ``width`` inches wide (the panels scaled
    together) and writes text at ``font_size`` pt: $11 \cdot 690 / (96 \cdot 8.4) = 9.4$ pt as shown.
    ``meanfield figures`` (the docs build) draws every figure inside it; outside it nothing changes.
    """
    saved = dict(_PAGE)
    _PAGE.update(columns=columns, width=width, font_size=font_size)
    try:
        with plt.rc_context({"font.size": font_size}):  # labels and legends made after figure() returns
            yield
    finally:
        _PAGE.clear()
        _PAGE.update(saved)


def _page_figure(ncols: int, width: float, height: float, style: dict):
    """``ncols`` panels in rows of at most ``_PAGE["columns"]``, the figure at most ``_PAGE["width"]`` wide."""
    cols = min(ncols, int(_PAGE["columns"]))
    rows = math.ceil(ncols / cols)
    scale = min(1.0, _PAGE["width"] / (width * cols))
    with plt.rc_context(style):
        fig = plt.figure(figsize=(width * cols * scale, height * rows * scale))
        grid = fig.add_gridspec(rows, 2 * cols)
        axes = []
        for k in range(ncols):
            row, col = divmod(k, cols)
            lone = row == rows - 1 and ncols % cols == 1 and cols > 1
            start = cols - 1 if lone else 2 * col  # a lone last panel sits in the middle of its row
            axes.append(fig.add_subplot(grid[row, start : start + 2]))
    return fig, axes


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
    style = {**STYLE, "font.size": _PAGE["font_size"]} if _PAGE else STYLE
    if _PAGE and nrows == 1 and ncols > _PAGE["columns"] and not kwargs:
        fig, panels = _page_figure(ncols, width, height, style)
        axes = np.array(panels, dtype=object).reshape(1, ncols)
    else:
        if _PAGE:  # a grid given by the caller: only the width cap
            scale = min(1.0, _PAGE["width"] / (width * ncols))
            width, height = width * scale, height * scale
        with plt.rc_context(style):
            fig, axes = plt.subplots(
                nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kwargs
            )
    for ax in axes.flat:
        ax.grid(True, alpha=STYLE["grid.alpha"])
        ax.spines[["top", "right"]].set_visible(False)
    return fig, (axes[0, 0] if ncols == nrows == 1 else axes.squeeze())


def returned(fig, made_here: bool):
    """``fig``, to be returned by a ``plot()`` that drew it: shown **once** in a notebook.

    Under the notebook's inline backend (matplotlib-inline), a figure that ``plot()`` made itself
    (``made_here``) is taken out of pyplot's figures (``plt.close``), so that it is shown once, as the value of
    the cell (``study.plot()``), instead of twice: by the backend at the cell's end and again as the returned
    Figure. The Figure stays whole (``fig.savefig`` works); assigned (``fig = study.plot()``) it shows where
    ``fig`` is written, like any result object. A figure of the caller's (``plot(ax=ax)``) and every other
    backend are left as they are.
    """
    if made_here and "inline" in plt.get_backend().lower():
        plt.close(fig)
    return fig


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
