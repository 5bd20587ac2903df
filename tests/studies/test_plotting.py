"""Importing meanfield leaves matplotlib's backend as the user chose it (``meanfield/studies/plotting.py`` switched it to
Agg at import, after ``%matplotlib inline`` too); the command line, which only writes files, picks Agg;
and the docs' figure geometry (``page_layout``): text readable at the page's width. A page shows a figure at
most at the content width, about 690 CSS px; a PNG ``w`` inches wide at 130 dpi is shrunk to it, so text of
``s`` pt shows at ``s · 690 / (96 w)`` pt. The issue (52) measured 5.5–7 pt on the three- and four-panel
theory figures; the target is ≥ 9 pt."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest

from meanfield.studies import plotting
from meanfield.studies.plotting import STYLE, figure, page_layout

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import matplotlib
matplotlib.use("svg")  # the user's choice, made before meanfield is imported (as %matplotlib inline is)
import meanfield, meanfield.studies.plotting, meanfield.studies.in_memory, meanfield.studies.validation, meanfield.studies.figures
import meanfield.runs, meanfield.runs.sweeps, meanfield.cli
print(matplotlib.get_backend())
meanfield.studies.plotting.save(meanfield.studies.plotting.figure()[0], "probe.png")  # drawing a file needs no backend switch
print(matplotlib.get_backend())
meanfield.cli.main(["solvers"])
print(matplotlib.get_backend())
"""


def test_import_keeps_the_users_backend_and_the_command_line_picks_agg(tmp_path):
    """With the backend set to ``svg`` before the import, every drawing module imported and a figure written,
    ``get_backend()`` is still ``svg``; after ``meanfield.cli.main`` it is ``agg``, which shows that the probe
    sees a switch (the negative control: the old ``matplotlib.use("Agg")`` at import printed ``agg`` first)."""
    # not MUTANT_UNDER_TEST either: under mutmut's statistics run ("stats") a trampoline in the child looks for
    # mutmut's configuration in its working directory, and tmp_path has none (the child's code runs unmutated)
    env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "MUTANT_UNDER_TEST")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    backends = [line.lower() for line in out.stdout.splitlines() if line.lower() in ("svg", "agg")]
    assert backends == ["svg", "svg", "agg"], out.stdout
    assert (tmp_path / "probe.png").stat().st_size > 0

CONTENT_PX = 690  # Material's content column at a 1280-px window (docs/testing.md)


def shown_pt(fig, font_size):
    """The size at which ``font_size``-pt text of ``fig`` shows on a page (pt), the PNG at 130 dpi."""
    width_px = fig.get_size_inches()[0] * STYLE["savefig.dpi"]
    return font_size * min(1.0, CONTENT_PX / width_px) * STYLE["savefig.dpi"] / 96


@pytest.mark.parametrize("ncols", [2, 3, 4, 5])
def test_page_layout_wraps_panels_and_keeps_text_readable(ncols):
    with page_layout():
        fig, axes = figure(ncols=ncols)
        label = axes[0].set_xlabel("x")
        assert label.get_fontsize() == 11
    try:
        assert axes.shape == (ncols,)
        assert fig.get_size_inches()[0] <= 8.4 + 1e-9
        assert shown_pt(fig, 11) >= 9.0
        rows = sorted({round(ax.get_position().y0, 3) for ax in axes})
        assert len(rows) == -(-ncols // 2)  # two panels a row
        if ncols % 2:  # the lone last panel is centred
            last = axes[-1].get_position()
            assert abs((last.x0 + last.x1) / 2 - 0.5) < 0.05
    finally:
        plt.close(fig)


def test_outside_page_layout_figures_are_unchanged_and_would_be_unreadable():
    fig, axes = figure(ncols=3)
    try:
        assert axes.shape == (3,) and tuple(fig.get_size_inches()) == pytest.approx((12.6, 3.2))
        # negative control: the same readability check fails on the one-row figure (5.5 pt)
        assert shown_pt(fig, STYLE["font.size"]) < 9.0
    finally:
        plt.close(fig)
    with page_layout():
        pass
    fig, _ = figure(ncols=4)  # the layout is gone after the block
    try:
        assert fig.get_size_inches()[0] == pytest.approx(16.8)
    finally:
        plt.close(fig)


def test_page_layout_caps_the_width_of_a_grid_the_caller_gives():
    with page_layout():
        fig, axes = figure(ncols=2, nrows=2, width=5.4, height=4.1)
    try:
        assert axes.shape == (2, 2)
        assert fig.get_size_inches()[0] == pytest.approx(8.4)
        assert fig.get_size_inches()[1] == pytest.approx(2 * 4.1 * 8.4 / 10.8)
    finally:
        plt.close(fig)


matplotlib.use("Agg")


def _check_style(ax) -> None:
    for axis in (ax.xaxis, ax.yaxis):
        lines = axis.get_gridlines()
        assert lines and all(line.get_visible() is True and line.get_alpha() == 0.3 for line in lines)
    assert ax.spines["top"].get_visible() is False and ax.spines["right"].get_visible() is False
    assert ax.spines["left"].get_visible() is True and ax.spines["bottom"].get_visible() is True


@pytest.mark.parametrize("ncols, nrows, shape", [(1, 1, None), (2, 2, (2, 2)), (1, 3, (3,)), (3, 1, (3,))])
def test_figure_styles_every_axes_also_for_ticks_made_later(ncols, nrows, shape):
    """Every Axes of ``figure(ncols, nrows)`` has its x and y grid lines visible at alpha 0.3, also for ticks
    created after the call (``Axis.reset_ticks`` outside the style's rc context: a fresh tick takes its alpha
    from what ``ax.grid`` set on the Axis, else from the global rcParams), top and right spines hidden (``False``, not merely falsy), left and bottom
    shown; no warning; the figure is ``4.2·ncols × 3.2·nrows`` inches at 110 dpi; a single Axes for 1 × 1, else the
    squeezed array of the shape given; the global rcParams are unchanged afterwards. Negative control: a plain
    ``plt.subplots`` Axes made next to it has gridlines at alpha ``None`` and a visible top spine."""
    before = {k: plt.rcParams[k] for k in ("figure.dpi", "grid.alpha", "axes.grid", "axes.spines.top")}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. grid(False, alpha=…) warns that the grid is turned on anyway
        fig, axes = plotting.figure(ncols, nrows)
    try:
        assert {k: plt.rcParams[k] for k in before} == before
        assert tuple(fig.get_size_inches()) == pytest.approx((4.2 * ncols, 3.2 * nrows), abs=1e-12)
        assert fig.dpi == 110
        if shape is None:
            assert isinstance(axes, matplotlib.axes.Axes) and fig.axes == [axes]
            flat = [axes]
        else:
            assert axes.shape == shape and all(isinstance(a, matplotlib.axes.Axes) for a in axes.flat)
            flat = list(axes.flat)
            assert flat == fig.axes
        for ax in flat:
            _check_style(ax)
            ax.xaxis.reset_ticks()  # fresh ticks, made now from what the Axis keeps, not copied from old ones
            ax.yaxis.reset_ticks()
            ax.set_xticks(np.linspace(0.0, 1.0, 11))
            ax.set_yticks(np.linspace(0.0, 1.0, 7))
            assert len(ax.xaxis.get_gridlines()) == 11 and len(ax.yaxis.get_gridlines()) == 7
            _check_style(ax)
    finally:
        plt.close(fig)
    other, ax = plt.subplots()
    try:
        ax.xaxis.reset_ticks()
        ax.set_xticks([0.0, 0.5])
        assert ax.xaxis.get_gridlines()[0].get_alpha() == 1.0 and ax.spines["top"].get_visible()
    finally:
        plt.close(other)


def test_figure_passes_keyword_arguments_and_the_sizes_of_one_cell():
    """``width`` and ``height`` are per column and per row (``figure(3, 2, width=1.5, height=2)`` is 4.5 × 4
    inches) and other keywords reach ``plt.subplots`` (``sharey=True`` shares the y axes). Negative control:
    without ``sharey`` the y axes are not shared."""
    fig, axes = plotting.figure(3, 2, width=1.5, height=2.0, sharey=True)
    try:
        assert tuple(fig.get_size_inches()) == pytest.approx((4.5, 4.0), abs=1e-12) and axes.shape == (2, 3)
        assert axes[0, 0].get_shared_y_axes().joined(axes[0, 0], axes[1, 2])
    finally:
        plt.close(fig)
    fig, axes = plotting.figure(3, 2)
    try:
        assert not axes[0, 0].get_shared_y_axes().joined(axes[0, 0], axes[1, 2])
    finally:
        plt.close(fig)


def test_save_lays_out_tightly_closes_only_its_figure_and_returns_a_path(tmp_path):
    """:func:`save` applies ``tight_layout`` (the saved figure's axes sit where ``tight_layout`` puts those of
    an identical figure, not at the default subplot position), closes the figure it was given even when another
    one is the current figure (which stays open), returns ``Path(path)`` for a ``str``, writes a PDF for
    ``.pdf`` and a PNG for ``.PNG`` (the suffix's case does not matter). Negative control: the untouched
    figure's axes are at another position."""

    def make():
        fig, ax = plotting.figure()
        ax.plot([0, 1], [0, 10_000])
        ax.set_ylabel("a long label\nover two lines")
        ax.set_title("title")
        return fig, ax

    fig, ax = make()
    twin, twin_ax = make()
    twin.tight_layout()
    plain, plain_ax = make()
    current, _ = plotting.figure()  # the current figure now
    try:
        path = plotting.save(fig, str(tmp_path / "a.pdf"))
        assert path == tmp_path / "a.pdf" and isinstance(path, Path)
        assert path.read_bytes()[:5] == b"%PDF-"
        assert not plt.fignum_exists(fig.number) and plt.fignum_exists(current.number)
        assert plt.gcf() is current
        got = ax.get_position().bounds
        assert got == pytest.approx(twin_ax.get_position().bounds, abs=1e-9)
        assert max(abs(g - d) for g, d in zip(got, plain_ax.get_position().bounds)) > 0.01
        upper = plotting.save(twin, tmp_path / "b.PNG")
        assert upper.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not plt.fignum_exists(twin.number)
    finally:
        for f in (plain, current):
            plt.close(f)


def test_save_closes_the_figure_and_leaves_no_file_when_writing_fails(tmp_path):
    """An unknown format (``.nope``) raises matplotlib's ``ValueError`` naming it; the figure is closed all the
    same and neither the file nor a temporary file is left. Negative control: the same figure type saved as
    ``.png`` writes the file."""
    fig, _ = plotting.figure()
    with pytest.raises(ValueError, match="nope"):
        plotting.save(fig, tmp_path / "x.nope")
    assert not plt.fignum_exists(fig.number)
    assert list(tmp_path.iterdir()) == []
    fig, _ = plotting.figure()
    assert plotting.save(fig, tmp_path / "x.png").exists() and not plt.fignum_exists(fig.number)
    assert [p.name for p in tmp_path.iterdir()] == ["x.png"]


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_figure_single_axes_in_the_style():
    """``figure()``: one Axes (not an array), 4.2 × 3.2 inches at the style's 110 dpi, grid on at alpha 0.3,
    top and right spines hidden, and no warning."""
    import matplotlib.pyplot as plt
    from matplotlib.axes import Axes

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig, ax = plotting.figure()
    try:
        assert isinstance(ax, Axes) and len(fig.axes) == 1
        assert tuple(fig.get_size_inches()) == pytest.approx((4.2, 3.2)) and fig.dpi == 110
        line = ax.xaxis.get_gridlines()[0]
        assert line.get_visible() and line.get_alpha() == 0.3
        assert not ax.spines["top"].get_visible() and not ax.spines["right"].get_visible()
        assert ax.spines["left"].get_visible()
    finally:
        plt.close(fig)


def test_figure_grid_of_axes_scales_by_columns_and_rows():
    """``figure(2, 3, width=2, height=1.5)`` is 4 × 4.5 inches with a (3, 2) array of axes;
    ``figure(3)`` a (3,) array; keyword arguments reach ``subplots``."""
    import matplotlib.pyplot as plt

    fig, axes = plotting.figure(ncols=2, nrows=3, width=2.0, height=1.5, sharex=True)
    assert tuple(fig.get_size_inches()) == pytest.approx((4.0, 4.5)) and axes.shape == (3, 2)
    assert axes[0, 0].get_shared_x_axes().joined(axes[0, 0], axes[2, 1])
    plt.close(fig)
    fig, axes = plotting.figure(3)
    assert axes.shape == (3,) and tuple(fig.get_size_inches()) == pytest.approx((12.6, 3.2))
    plt.close(fig)


def test_save_writes_the_format_of_the_suffix_at_the_style_dpi_and_closes(tmp_path):
    """A ``.png`` is 4.2·130 × 3.2·130 pixels (the style's savefig dpi, not the figure's 110); no suffix
    gives a PNG too; ``.svg`` an SVG document; the figure is closed and the path returned."""
    import matplotlib.pyplot as plt

    for name in ("a.png", "b"):
        fig, ax = plotting.figure()
        ax.plot([0, 1], [1, 0])
        path = plotting.save(fig, tmp_path / name)
        assert path == tmp_path / name and not plt.fignum_exists(fig.number)
        assert _png_size(path) == (546, 416)
    fig, _ = plotting.figure()
    text = plotting.save(fig, str(tmp_path / "c.svg")).read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "b", "c.svg"]  # no temporary left


def test_figure_width_is_per_column():
    """``figure(ncols=2, width=4.8)`` is 9.6 inches wide: ``width`` is per column (docstring says so)."""
    fig, axes = figure(ncols=2, nrows=3, width=4.8, height=2.0)
    assert tuple(fig.get_size_inches()) == pytest.approx((9.6, 6.0)) and axes.shape == (3, 2)
    assert "one column" in figure.__doc__ and "one row" in figure.__doc__




def test_figure_fonts_come_from_the_style_and_save_writes_at_130_dpi(tmp_path):
    """Tick labels made with the figure are 10 pt (the style's ``font.size``) and the title 12 pt ("large");
    ``save`` writes a PNG of ``4.2·130 × 3.2·130`` pixels (read from the IHDR header), also for a path with no
    suffix (PNG by default). Negative control: the style's dpi is not the figure's 110."""
    fig, ax = plotting.figure()
    assert ax.xaxis.get_major_ticks()[0].label1.get_fontsize() == 10.0
    assert ax.title.get_fontsize() == 12.0
    path = plotting.save(fig, tmp_path / "plain")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (round(4.2 * 130), round(3.2 * 130)) and width != round(4.2 * 110)
    assert plotting.STYLE["savefig.dpi"] == 130 and plotting.STYLE["legend.frameon"] is False


def test_a_callers_grid_in_a_page_layout_shrinks_to_the_page_and_never_grows():
    """In ``page_layout(width=8.4)`` a grid the caller shapes (2 × 2, or sharex) keeps its aspect and is scaled
    down to the page's width when wider (4.8 × 2 = 9.6 in → 8.4), never up when narrower (2 × 2 = 4 in stays)."""
    with page_layout(columns=2, width=8.4):
        wide, _ = figure(nrows=2, ncols=2, width=4.8, height=3.0)
        narrow, _ = figure(nrows=2, ncols=2, width=2.0, height=1.5)
    try:
        np.testing.assert_allclose(wide.get_size_inches(), (8.4, 3.0 * 2 * 8.4 / 9.6))
        np.testing.assert_allclose(narrow.get_size_inches(), (4.0, 3.0))
    finally:
        plt.close(wide), plt.close(narrow)


@pytest.mark.parametrize("backend", ["module://matplotlib_inline.backend_inline", "agg"])
def test_returned_closes_a_figure_of_its_own_only_under_the_inline_backend(monkeypatch, backend):
    """``returned``: under matplotlib-inline (a backend named in lower case) a figure ``plot()`` made itself is
    taken out of pyplot's figures, so a notebook shows it once; a caller's figure, and any figure under another
    backend, stays open."""
    monkeypatch.setattr(plt, "get_backend", lambda: backend)
    own, callers = plt.figure(), plt.figure()
    try:
        assert plotting.returned(own, made_here=True) is own
        assert plotting.returned(callers, made_here=False) is callers
        assert plt.fignum_exists(own.number) == (backend == "agg")
        assert plt.fignum_exists(callers.number)
    finally:
        plt.close(own), plt.close(callers)
