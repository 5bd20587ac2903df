"""Whole-function value tests for the validate machinery, the plotting helpers, two Wasserstein functions and
three diversity metrics.

Each function is pinned by every branch and argument, against an answer worked out separately:

- :mod:`meanfield.studies.validation`: :func:`load_check` (the module name, the message for each missing attribute),
  :func:`run_check` (seconds from a fake clock, the preset written onto the result, a wrong return type, a
  check that fails to load), :func:`validate` (the text of ``results.json`` after every check, the text of
  ``report.md`` written out by hand, which figures are drawn, the messages, ``echo`` and the progress bar) and
  :func:`run_as_script` (the defaults of ``--preset`` and ``--out``, a bad choice, what it prints).
- :mod:`meanfield.studies.plotting`: :func:`figure` (the style on every Axes, also on ticks made after the call; the
  global rcParams left alone) and :func:`save` (the tight layout, closing the figure it was given and no other
  one, also when the write fails).
- :mod:`meanfield.metrics.wasserstein`: :func:`wasserstein_to_law` against integrals done by hand (zero
  weights, batches, dtypes, both orders), and the Sinkhorn core ``_sinkhorn_batched`` against a dense NumPy
  version of the algorithm its docstring describes (value, number of updates, convergence flag, balanced and
  unbalanced, cached and blocked costs), against POT, and against the translation identity ``S_ε = |v|²``.
- :mod:`meanfield.metrics.diversity`: :func:`distinct_modes`, :func:`collapse_rate` and
  :func:`minibatch_gradients` on cases built by hand (exact cosines, closed-form gradients), with a brute-force
  loop as a second answer.

Every test has a negative control: an input that must give a different answer.
"""

from __future__ import annotations

import json
import math
import re
import sys
import warnings
from pathlib import Path

import matplotlib
import numpy as np
import ot
import pytest
import torch
from _check_files import write_check  # tests/_check_files.py
from scipy.special import logsumexp, ndtr

import meanfield.metrics.wasserstein as W
from meanfield.metrics.diversity import collapse_rate, distinct_modes, minibatch_gradients
from meanfield.metrics.wasserstein import Discrete, Normal, Uniform, sinkhorn_divergence, wasserstein_to_law
from meanfield.studies import plotting, validation
from meanfield.studies.validation import (
    CheckResult,
    InputError,
    NoTheoryFolder,
    load_check,
    run_as_script,
    run_check,
    validate,
)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DT = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------------------------------------
# meanfield.studies.validation
# ----------------------------------------------------------------------------------------------------------

_check = write_check  # tests/_check_files.py


class _Clock:
    """A fake ``time`` module: ``perf_counter`` returns the given readings in turn."""

    def __init__(self, *readings: float) -> None:
        self.readings = list(readings)

    def perf_counter(self) -> float:
        return self.readings.pop(0)


@pytest.mark.parametrize("missing", ["CLAIM", "run", "plot"])
def test_load_check_names_its_module_and_each_missing_attribute(tmp_path, missing):
    """:func:`load_check` imports ``<stem>.py`` as module ``meanfield_theory_<stem>`` (a ``str`` path works);
    a script without ``CLAIM``, ``run`` or ``plot`` raises ``AttributeError`` with the message written out by
    hand, naming the path and the missing attribute. Negative control: the full script loads and its
    attributes are the script's own (the CLAIM text, ``run`` returning its result)."""
    full = _check(tmp_path, "alpha", claim="the claim of alpha")
    module = load_check(str(full))
    assert module.__name__ == "meanfield_theory_alpha" and module.__spec__.name == "meanfield_theory_alpha"
    assert module.CLAIM == "the claim of alpha"
    assert module.run("full").data == {"preset_seen": "full"}
    assert "meanfield_theory_alpha" not in sys.modules  # loaded, not registered
    text = full.read_text()
    cut = {
        "CLAIM": text.replace('CLAIM = "the claim of alpha"', 'OTHER = "x"').replace(
            'CheckResult("alpha", CLAIM', 'CheckResult("alpha", OTHER'
        ),
        "run": text.replace("def run(", "def walk("),
        "plot": text.replace("def plot(", "def draw("),
    }[missing]
    broken = tmp_path / "beta.py"
    broken.write_text(cut)
    message = f"theory check {broken} has no {missing!r}: a check defines CLAIM, run(preset), plot(result)"
    with pytest.raises(AttributeError, match="^" + re.escape(message) + "$"):
        load_check(broken)


def test_run_check_times_stamps_and_turns_failures_into_results(tmp_path, monkeypatch):
    """:func:`run_check` with a fake clock: ``seconds`` is the second reading minus the first (12.5 − 10 and
    7.25 − 7), for a passing check and for a failing one; the preset given is written onto the result even when
    ``run`` set another, while the result's name stays the one ``run`` chose; a ``run`` returning a dict fails
    with ``TypeError: <name>.run returned dict, not a CheckResult`` and keeps the CLAIM and the module; a script
    that cannot be loaded gives module ``None``, claim ``""``, no rows and the traceback, and one whose ``run``
    deleted its CLAIM before raising gets claim ``""`` too. Negative control: only
    the well-formed check passes."""
    good = _check(tmp_path, "good", extra="r.preset = 'fast'\n    r.name = 'renamed'")
    monkeypatch.setattr(validation, "time", _Clock(10.0, 12.5))
    result, module = run_check("good", good, "full")
    assert isinstance(result, CheckResult) and result.passed
    assert (result.seconds, result.preset, result.name) == (2.5, "full", "renamed")
    assert result.data == {"preset_seen": "full"} and module.CLAIM == "one is one"

    wrong = tmp_path / "wrong.py"
    wrong.write_text(good.read_text().replace("    return r\n", "    return {'r': r}\n"))
    monkeypatch.setattr(validation, "time", _Clock(7.0, 7.25))
    result, module = run_check("wrong", wrong, "fast")
    assert module is not None and module.CLAIM == "one is one"
    assert (result.name, result.claim, result.preset, result.seconds) == ("wrong", "one is one", "fast", 0.25)
    assert result.comparisons == [] and result.data == {} and not result.passed
    assert result.error.startswith("Traceback (most recent call last):")
    assert result.error.rstrip().endswith("TypeError: wrong.run returned dict, not a CheckResult")

    unloadable = tmp_path / "unloadable.py"
    unloadable.write_text('CLAIM = "never seen"\nimport a_module_that_does_not_exist_here\n')
    monkeypatch.setattr(validation, "time", _Clock(1.0, 4.0))
    result, module = run_check("unloadable", unloadable, "full")
    assert module is None
    assert (result.name, result.claim, result.preset, result.seconds) == ("unloadable", "", "full", 3.0)
    assert "ModuleNotFoundError" in result.error and result.comparisons == [] and not result.passed

    vanishing = _check(tmp_path, "vanishing", extra="del globals()['CLAIM']\n    raise RuntimeError('gone')")
    monkeypatch.setattr(validation, "time", _Clock(0.0, 1.0))
    result, module = run_check("vanishing", vanishing, "fast")
    assert module is not None and result.claim == "" and "RuntimeError: gone" in result.error

    noplot = tmp_path / "noplot.py"
    noplot.write_text(good.read_text().replace("def plot(", "def draw("))
    monkeypatch.setattr(validation, "time", _Clock(0.0, 1.0))
    result, module = run_check("noplot", noplot, "fast")
    assert module is None and result.claim == "" and "has no 'plot'" in result.error


def test_validate_writes_the_report_and_results_written_out_by_hand(tmp_path, monkeypatch, capsys):
    """:func:`validate` of a passing and a raising check, with a fake clock (2.5 s and 0.5 s) and the default
    ``echo`` (``print``): ``report.md`` is exactly the text written by hand (summary block, one section a
    check, the table, the traceback block for the raising check, the image link only for the drawn one);
    ``results.json`` is the hand-made list of dicts dumped with ``indent=1`` (a ``numpy.float32`` in the data
    saved as the float it holds); only the passing check has a PNG; stdout is the summary and the absolute
    report path; ``progress=False`` writes nothing to stderr; ``out`` is a ``Path`` even when given as a
    string, and nested folders are created. Negative control: the raising check is FAIL and the report does
    not pass."""
    theory = tmp_path / "theory"
    theory.mkdir()
    _check(theory, "good", extra="import numpy\n    r.data['x'] = numpy.float32(0.5)")
    _check(theory, "boom", claim="it raises", extra="raise RuntimeError('kaboom')")
    (theory / "_private.py").write_text("raise RuntimeError('never imported')")
    out = tmp_path / "deep" / "er" / "out"
    monkeypatch.setattr(validation, "time", _Clock(0.0, 0.5, 10.0, 12.5))
    report = validate(preset="fast", out=str(out), theory_dir=theory, progress=False)
    assert report.out == out and isinstance(report.out, Path) and not report.passed
    assert [r.name for r in report.results] == ["boom", "good"]
    boom, good = report.results
    assert (boom.seconds, good.seconds) == (0.5, 2.5)

    summary = "\n".join(
        [
            "check  verdict  rows     time  claim",
            "boom   ERROR     0/0     0.5s  it raises",
            "good   pass      1/1     2.5s  one is one",
            "1 passed, 1 failed",
        ]
    )
    table = "\n".join(
        [
            "| quantity | measured | reference | tolerance | detects | expect | verdict |",
            "|---|---|---|---|---|---|---|",
            "| one | 1 | 1 | 1e-12 |  | agree | pass |",
        ]
    )
    expected_md = (
        "# meanfield validate\n\n```\n"
        + summary
        + "\n```\n\n## boom: FAIL\n\nit raises\n\n```\n"
        + boom.error
        + "\n```\n\n## good: pass\n\none is one\n\n"
        + table
        + "\n\n![good](good.png)\n"
    )
    assert (out / "report.md").read_text() == expected_md
    assert "RuntimeError: kaboom" in boom.error
    assert sorted(p.name for p in out.iterdir()) == ["good.png", "report.md", "results.json"]
    assert (out / "good.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    row = {"quantity": "one", "value": 1.0, "reference": 1.0, "tolerance": 1e-12, "detectable": None}
    row |= {"expect": "agree", "note": "", "passed": True}
    expected_json = [
        {"name": "boom", "claim": "it raises", "comparisons": [], "data": {}, "preset": "fast"}
        | {"seconds": 0.5, "error": boom.error, "passed": False},
        {
            "name": "good",
            "claim": "one is one",
            "comparisons": [row],
            "data": {"preset_seen": "fast", "x": 0.5},
        }
        | {"preset": "fast", "seconds": 2.5, "error": None, "passed": True},
    ]
    assert (out / "results.json").read_text() == json.dumps(expected_json, indent=1)

    captured = capsys.readouterr()
    assert captured.out == summary + "\n" + f"report: {(out / 'report.md').resolve()}\n"
    assert captured.err == ""


def test_validate_writes_results_after_every_check_and_keeps_the_order_asked_for(tmp_path):
    """``results.json`` is rewritten after each check: a run stopped by a ``BaseException`` in its third check
    leaves the first two results on disk (and no ``report.md``). The checks run in the order of ``names``
    (``["c", "a"]`` gives c then a), ``names=[]`` means all of them, ``echo=None`` prints nothing. Negative
    control: the stopped check itself is not in the file."""
    theory = tmp_path / "theory"
    theory.mkdir()
    _check(theory, "a")
    _check(theory, "b", reference=2.0)
    stop = "class Stop(BaseException):\n        pass\n    raise Stop('stop here')"
    _check(theory, "c", extra=stop)
    out = tmp_path / "out"
    with pytest.raises(BaseException, match="stop here"):
        validate(out=out, theory_dir=theory, progress=False, echo=None)
    saved = json.loads((out / "results.json").read_text())
    assert [(r["name"], r["passed"]) for r in saved] == [("a", True), ("b", False)]
    assert not (out / "report.md").exists()

    report = validate(["b", "a"], out=tmp_path / "o2", theory_dir=theory, progress=False, echo=None)
    assert [r.name for r in report.results] == ["b", "a"]
    assert [r["name"] for r in json.loads((tmp_path / "o2" / "results.json").read_text())] == ["b", "a"]
    (theory / "c.py").unlink()
    report = validate([], out=tmp_path / "o3", theory_dir=theory, progress=False, echo=None)
    assert [r.name for r in report.results] == ["a", "b"]


def test_validate_draws_only_checks_that_ran_and_reports_plot_failures(tmp_path, monkeypatch):
    """``plot`` is called once per check that ran without error, with the result, and its figure is saved to
    ``out/<name>.png``; a check whose ``run`` raised or that did not load is not drawn (even though it has a
    working ``plot``); a ``plot`` that raises turns the result into an error starting ``plot failed:\\n``
    followed by the traceback. Negative control: the plot-failing check's result is not passed, and its claim
    and rows are kept."""
    theory = tmp_path / "theory"
    theory.mkdir()
    _check(theory, "fine")
    _check(theory, "raises", extra="raise ValueError('no run')")
    badplot = _check(theory, "badplot")
    badplot.write_text(badplot.read_text().replace("fig, ax = figure(", "raise KeyError('nope'); figure("))
    unloaded = _check(theory, "unloaded")
    unloaded.write_text(unloaded.read_text().replace("def run(", "def walk("))
    saved = []
    real = plotting.save
    monkeypatch.setattr(plotting, "save", lambda fig, path: (saved.append(Path(path)), real(fig, path))[1])
    out = tmp_path / "out"
    report = validate(out=out, theory_dir=theory, progress=False, echo=None)
    by_name = {r.name: r for r in report.results}
    assert saved == [out / "fine.png"]
    assert sorted(p.name for p in out.glob("*.png")) == ["fine.png"]
    assert by_name["badplot"].error.startswith("plot failed:\nTraceback (most recent call last):")
    assert "KeyError: 'nope'" in by_name["badplot"].error
    assert by_name["badplot"].claim == "one is one" and len(by_name["badplot"].comparisons) == 1
    assert not by_name["badplot"].passed and by_name["fine"].passed and by_name["raises"].error
    assert "plot failed" not in by_name["raises"].error
    assert "has no 'run'" in by_name["unloaded"].error and "plot failed" not in by_name["unloaded"].error


def test_validate_messages_for_bad_presets_names_and_folders(tmp_path):
    """The exact messages: an unknown preset lists ``('fast', 'full')``; unknown names are listed in the order
    given with the sorted available ones; an ``out`` that is a file, and a missing theory folder
    (:class:`NoTheoryFolder`, also a ``FileNotFoundError``). All are :class:`InputError` (a ``ValueError``).
    Negative control: a valid call on the same folder runs."""
    theory = tmp_path / "theory"
    theory.mkdir()
    _check(theory, "b")
    _check(theory, "a")
    with pytest.raises(InputError, match=re.escape("preset must be one of ('fast', 'full'), got 'medium'")):
        validate(preset="medium", out=tmp_path / "o", theory_dir=theory, echo=None)
    message = "unknown check(s) ['zz', 'yy']; available: ['a', 'b']"
    with pytest.raises(InputError, match="^" + re.escape(message) + "$"):
        validate(["a", "zz", "yy"], out=tmp_path / "o", theory_dir=theory, echo=None)
    afile = tmp_path / "afile"
    afile.write_text("")
    message = f"the output folder {afile} exists and is not a folder: choose another --out"
    with pytest.raises(InputError, match="^" + re.escape(message) + "$"):
        validate(out=afile, theory_dir=theory, echo=None)
    missing = tmp_path / "missing"
    with pytest.raises(
        NoTheoryFolder, match="^" + re.escape(f"no theory folder at {missing}: pass --theory")
    ):
        validate(out=tmp_path / "o", theory_dir=missing, echo=None)
    assert issubclass(NoTheoryFolder, FileNotFoundError) and issubclass(InputError, ValueError)
    assert not (tmp_path / "o").exists()  # refused before creating anything
    report = validate(["a"], out=tmp_path / "o", theory_dir=theory, progress=False, echo=None)
    assert [r.name for r in report.results] == ["a"] and report.passed


def test_validate_progress_bar_names_the_check_and_its_unit(tmp_path, capsys):
    """With ``progress=True`` the bar on stderr reads ``validate: 100%`` with ``2/2``, the unit ``check`` and the
    name of the check being run as its postfix. Negative control: with ``progress=False`` stderr stays empty."""
    theory = tmp_path / "theory"
    theory.mkdir()
    _check(theory, "first_one")
    _check(theory, "second_one")
    validate(out=tmp_path / "o", theory_dir=theory, progress=True, echo=None)
    err = capsys.readouterr().err
    assert "validate: 100%" in err and "2/2" in err
    assert re.search(r"(check/s|s/check)", err) and "second_one" in err
    validate(out=tmp_path / "o2", theory_dir=theory, progress=False, echo=None)
    assert capsys.readouterr().err == ""


def test_validate_resume_reuses_only_same_preset_error_free_results_with_figures(tmp_path):
    """``resume=True`` reuses a result of the same preset, without error, whose PNG exists, and reruns the rest:
    after the checks are edited to measure against another reference, a reused result still passes and a rerun
    one fails. ``resume=False`` (the default) reruns everything. A removed PNG forces a rerun. Negative control:
    the rerun results fail, the reused ones do not."""
    theory = tmp_path / "theory"
    theory.mkdir()
    for name in ("p", "q"):
        _check(theory, name)
    out = tmp_path / "out"
    assert validate(out=out, theory_dir=theory, progress=False, echo=None).passed
    for name in ("p", "q"):
        _check(theory, name, reference=5.0)  # now they fail when run
    (out / "q.png").unlink()
    again = validate(out=out, theory_dir=theory, progress=False, echo=None, resume=True)
    assert {r.name: r.passed for r in again.results} == {"p": True, "q": False}
    assert (out / "q.png").exists()  # drawn again
    fresh = validate(out=out, theory_dir=theory, progress=False, echo=None)
    assert {r.name: r.passed for r in fresh.results} == {"p": False, "q": False}


def test_run_as_script_defaults_choices_and_output(tmp_path, monkeypatch, capsys):
    """``python theory/<name>.py`` with no option runs only that check (not its neighbours) with preset
    ``fast`` into ``./validate-out`` of the working directory, prints the summary to stdout, shows no progress
    bar, and exits 0; a relative script path works from its folder; ``--preset medium`` is refused by argparse
    (exit 2) naming the two choices. Negative control: a failing check exits 1."""
    folder = tmp_path / "checks"
    folder.mkdir()
    _check(folder, "solo")
    _check(folder, "neighbour", reference=3.0)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, "argv", ["solo.py"])
    with pytest.raises(SystemExit) as info:
        run_as_script(str(folder / "solo.py"))
    assert info.value.code == 0
    saved = json.loads((work / "validate-out" / "results.json").read_text())
    assert [(r["name"], r["preset"], r["data"]["preset_seen"]) for r in saved] == [("solo", "fast", "fast")]
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.startswith("check  verdict  rows     time  claim\nsolo   pass      1/1  ")
    assert "\n1 passed, 0 failed\n" in captured.out
    assert captured.out.endswith(f"report: {(work / 'validate-out' / 'report.md').resolve()}\n")

    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "argv", ["neighbour.py", "--out", str(tmp_path / "n")])
    with pytest.raises(SystemExit) as info:
        run_as_script("neighbour.py")
    assert info.value.code == 1
    assert [r["name"] for r in json.loads((tmp_path / "n" / "results.json").read_text())] == ["neighbour"]
    capsys.readouterr()

    monkeypatch.setattr(sys, "argv", ["solo.py", "--preset", "medium"])
    with pytest.raises(SystemExit) as info:
        run_as_script(str(folder / "solo.py"))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python theory/solo.py ")
    assert "argument --preset: invalid choice: 'medium' (choose from 'fast', 'full')" in err


# ----------------------------------------------------------------------------------------------------------
# meanfield.studies.plotting
# ----------------------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------------------
# meanfield.metrics.wasserstein.wasserstein_to_law
# ----------------------------------------------------------------------------------------------------------


def _uniform_cell(x: float, lo: float, hi: float, low: float, high: float, p: int) -> float:
    """``∫_lo^hi |x − Q(u)|^p du`` for ``Q(u) = low + s u`` by hand: with ``t(u) = x − low − s u`` (linear),
    ``∫ t² = (t(lo)³ − t(hi)³)/(3s)``; ``∫ |t|`` is two triangles when ``t`` changes sign, else a trapezoid."""
    s = high - low
    t_lo, t_hi = x - low - s * lo, x - low - s * hi
    if p == 2:
        return (t_lo**3 - t_hi**3) / (3 * s)
    if t_lo >= 0 >= t_hi:
        return (t_lo**2 + t_hi**2) / (2 * s)
    return abs(t_lo + t_hi) / 2 * (hi - lo)


def _uniform_cost(x, w, low, high, p):
    """``W_p^p`` of the particles ``x`` with masses ``w`` to ``U(low, high)``, cell by cell (plain Python)."""
    order = sorted(range(len(x)), key=lambda i: x[i])
    total, lo, mass = 0.0, 0.0, sum(w)
    for i in order:
        hi = lo + w[i] / mass
        total += _uniform_cell(x[i], lo, min(hi, 1.0), low, high, p)
        lo = hi
    return total


@pytest.mark.parametrize("p", [1, 2])
def test_wasserstein_to_law_uniform_cells_by_hand_with_zero_weights_batches_and_dtypes(p):
    """Particles against ``U(−0.5, 1.5)``, each cell integrated by hand (:func:`_uniform_cell`): unweighted,
    weighted, with a zero-weight particle first, in the middle and last (a zero-width cell adds nothing, and
    raises no NumPy warning), batched with per-replica ``(B, M)`` and shared ``(M,)`` weights; shape ``()`` for
    ``(M, 1)`` and ``(B,)`` for ``(B, M, 1)``; the result's dtype is the input's (float32 in, float32 out);
    ``p``, ``method="law"``, ``backend=None`` and ``value = cost^{1/p}``. Negative control: moving one particle
    by 0.05 changes the cost by more than 1e-4."""
    low, high = -0.5, 1.5
    xs = [0.3, -0.9, 1.2, 0.31, 2.0]
    x = torch.tensor(xs, dtype=DT)[:, None]  # (5, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for w in (
            [1.0] * 5,
            [0.5, 2.0, 1.0, 0.25, 3.0],
            [1.0, 0.0, 1.0, 2.0, 1.0],
            [0.0, 1.0, 2.0, 1.0, 0.0],
        ):
            got = wasserstein_to_law(x, Uniform(low, high), p=p, weights=torch.tensor(w, dtype=DT))
            expected = _uniform_cost(xs, w, low, high, p)
            assert got.cost.shape == () and got.cost.dtype == DT
            assert abs(float(got.cost) - expected) <= 1e-13 * max(1.0, expected)
            assert (got.p, got.method, got.backend) == (p, "law", None)
            assert abs(float(got.value) - expected ** (1 / p)) <= 1e-12
        unweighted = wasserstein_to_law(x, Uniform(low, high), p=p).cost
        assert abs(float(unweighted) - _uniform_cost(xs, [1.0] * 5, low, high, p)) <= 1e-13
        other = [1.0, 0.0, 1.0, 2.0, 1.0]
        batch = torch.stack([x, x.flip(0) * 0.5]).to(torch.float32)  # (2, 5, 1) float32
        per_replica = torch.tensor([[1.0] * 5, other], dtype=torch.float32)  # (2, 5)
        got = wasserstein_to_law(batch, Uniform(low, high), p=p, weights=per_replica).cost
        assert got.shape == (2,) and got.dtype == torch.float32
        rows = [batch[r, :, 0].double().tolist() for r in range(2)]
        expected = [
            _uniform_cost(rows[0], [1.0] * 5, low, high, p),
            _uniform_cost(rows[1], other, low, high, p),
        ]
        assert np.allclose(got.double().numpy(), expected, rtol=1e-6, atol=0)
        shared = wasserstein_to_law(batch.double(), Uniform(low, high), p=p, weights=torch.tensor(other)).cost
        expected = [_uniform_cost(rows[r], other, low, high, p) for r in range(2)]
        assert np.allclose(shared.numpy(), expected, rtol=1e-12, atol=0)
    moved = x.clone()
    moved[0] += 0.05
    assert abs(float(wasserstein_to_law(moved, Uniform(low, high), p=p).cost) - float(unweighted)) > 1e-4


def test_wasserstein_to_law_normal_single_particles_in_closed_form():
    """One particle ``x`` against ``N(m, σ²)``: ``W2² = (x − m)² + σ²`` and ``W1 = σ E|Z − t| = σ (t (2Φ(t) − 1) +
    2φ(t))`` with ``t = (x − m)/σ``; a batch of single particles gives each its own value. Negative control:
    the value for another ``m`` differs."""
    m, sd = 0.4, 1.7
    xs = np.array([-2.0, 0.4, 0.9, 3.5])
    x = torch.tensor(xs, dtype=DT)[:, None, None]  # (4, 1, 1): four replicas of one particle
    w2sq = wasserstein_to_law(x, Normal(m, sd), p=2).cost.numpy()
    assert np.allclose(w2sq, (xs - m) ** 2 + sd**2, rtol=1e-12, atol=0)
    t = (xs - m) / sd
    w1 = sd * (t * (2 * ndtr(t) - 1) + 2 * np.exp(-0.5 * t**2) / math.sqrt(2 * math.pi))
    got = wasserstein_to_law(x, Normal(m, sd), p=1).cost.numpy()
    assert np.allclose(got, w1, rtol=1e-10, atol=0)
    assert np.abs(wasserstein_to_law(x, Normal(m + 0.1, sd), p=1).cost.numpy() - w1).max() > 1e-3


def test_wasserstein_to_law_discrete_law_by_merged_cells():
    """Particles ``{0.2, 0.4, 0.9}`` (mass 1/3 each) against the two-atom law ``½δ_0 + ½δ_1``: the merged cells
    ``[0, 1/3], [1/3, 1/2], [1/2, 2/3], [2/3, 1]`` pair the particles with atoms 0, 0, 1, 1, so
    ``W2² = ⅓·0.2² + ⅙·0.4² + ⅙·0.6² + ⅓·0.1²`` and ``W1 = ⅓·0.2 + ⅙·0.4 + ⅙·0.6 + ⅓·0.1``; weighted atoms
    ``(¼, ¾)`` move the cells to ``[0, ¼]`` for atom 0. Negative control: uniform and weighted atoms differ."""
    x = torch.tensor([[0.9], [0.2], [0.4]], dtype=DT)
    law = Discrete(np.array([1.0, 0.0]))
    w2 = 0.2**2 / 3 + 0.4**2 / 6 + 0.6**2 / 6 + 0.1**2 / 3
    w1 = 0.2 / 3 + 0.4 / 6 + 0.6 / 6 + 0.1 / 3
    assert abs(float(wasserstein_to_law(x, law).cost) - w2) <= 1e-14
    assert abs(float(wasserstein_to_law(x, law, p=1).cost) - w1) <= 1e-14
    weighted = Discrete(np.array([0.0, 1.0]), np.array([1.0, 3.0]))  # atom 0 on [0, 1/4]
    w2w = 0.2**2 / 4 + 0.8**2 / 12 + 0.6**2 / 3 + 0.1**2 / 3
    assert abs(float(wasserstein_to_law(x, weighted).cost) - w2w) <= 1e-14
    assert abs(w2w - w2) > 0.05


def test_wasserstein_to_law_refuses_bad_input_with_its_messages():
    """The messages of every refusal: ``p`` (3, and ``True``), the law's type, the particles' shape, the
    weights' shape and sign. Negative control: the same call with good arguments returns a value."""
    x = torch.zeros(3, 1, dtype=DT)
    with pytest.raises(ValueError, match=re.escape("p must be 1 or 2, got 3")):
        wasserstein_to_law(x, Normal(), p=3)
    with pytest.raises(ValueError, match=re.escape("p must be 1 or 2, got True")):
        wasserstein_to_law(x, Normal(), p=True)
    with pytest.raises(
        TypeError, match="^" + re.escape("law must be a Law1d (e.g. Normal, Uniform), got str") + "$"
    ):
        wasserstein_to_law(x, "normal")
    message = "x must be 1-D particles, shape (M, 1) or (B, M, 1), got shape (3, 2)"
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        wasserstein_to_law(torch.zeros(3, 2, dtype=DT), Normal())
    with pytest.raises(
        ValueError, match="^" + re.escape("weights must have shape (3,) or (1, 3), got shape (2,)")
    ):
        wasserstein_to_law(x, Normal(), weights=torch.ones(2, dtype=DT))
    with pytest.raises(ValueError, match="^weights must be ≥ 0, got a minimum of -1.0$"):
        wasserstein_to_law(x, Normal(), weights=torch.tensor([1.0, -1.0, 1.0], dtype=DT))
    assert abs(float(wasserstein_to_law(x, Normal()).cost) - 1.0) <= 1e-12


# ----------------------------------------------------------------------------------------------------------
# meanfield.metrics.wasserstein._sinkhorn_batched (through sinkhorn_divergence)
# ----------------------------------------------------------------------------------------------------------


def _dense_sinkhorn(x, y, a, b, p, eps, *, reach, scaling, tol, max_iter):
    """The algorithm of :func:`sinkhorn_divergence`'s docstring, in NumPy on dense cost matrices
    ``|x_i − y_j|^p`` from the differences, for ``x (B, M, d)``, ``y (B, N, d)``, normalised ``a (B, M)``,
    ``b (B, N)``, target ``eps (B,)``.

    ε-scaling: ``ε_0 = max(p D^p, ε)`` (``D`` the diameter of both clouds), then ``ε_0 scaling^{pk}`` for
    ``k = 0, 1, …`` while above the target (the target for a replica with fewer steps), then the target; one
    symmetric (averaged) update of the four potentials per ε, from ``softmin`` of the log-weights at ``ε_0``.
    ``tol=None``: one last full update. Else plain alternating updates of the three problems, each stopped
    once its two L1 marginal errors ``Σ w |e^{(old − new)/ε} − 1|`` are within ``tol`` in every replica, until
    all are or ``max_iter`` updates in all are made. With ``reach`` each soft-minimum is damped by
    ``1/(1 + ε/ρ)`` and the value is the unbalanced formula of the docstring.

    Returns ``(S (B,), iterations, converged)``.
    """

    def cost(u, v):
        return ((u[:, :, None, :] - v[:, None, :, :]) ** 2).sum(-1) ** (p / 2)  # (B, |u|, |v|)

    C = {"xy": cost(x, y), "yx": cost(y, x), "xx": cost(x, x), "yy": cost(y, y)}
    la, lb = np.log(a), np.log(b)

    def soft(key, h, e):
        f = -e[:, None] * logsumexp(h[:, None, :] - C[key] / e[:, None, None], axis=-1)
        return f if reach is None else f / (1 + e[:, None] / reach)

    pooled = np.concatenate([x, y], 1)
    top = np.maximum(p * np.linalg.norm(pooled.max(1) - pooled.min(1), axis=-1) ** p, eps)  # (B,)
    steps = np.maximum(np.ceil(np.log(top / eps) / (p * math.log(1 / scaling))), 0)  # (B,)
    schedule = [top] + [np.where(k < steps, top * scaling ** (p * k), eps) for k in range(int(steps.max()))]
    schedule.append(eps)
    e = schedule[0]
    f_ba, g_ab, f_aa, g_bb = soft("xy", lb, e), soft("yx", la, e), soft("xx", la, e), soft("yy", lb, e)
    for e in schedule:
        E = e[:, None]
        new = (
            soft("xy", lb + g_ab / E, e),
            soft("yx", la + f_ba / E, e),
            soft("xx", la + f_aa / E, e),
            soft("yy", lb + g_bb / E, e),
        )
        f_ba, g_ab, f_aa, g_bb = ((old + n) / 2 for old, n in zip((f_ba, g_ab, f_aa, g_bb), new))
    E = eps[:, None]
    iterations, converged = len(schedule), None
    if tol is None:
        f_ba, g_ab = soft("xy", lb + g_ab / E, eps), soft("yx", la + f_ba / E, eps)
        f_aa, g_bb = soft("xx", la + f_aa / E, eps), soft("yy", lb + g_bb / E, eps)
        g_aa, f_bb = f_aa, g_bb
        iterations += 1
    else:
        g_aa, f_bb = f_aa, g_bb
        converged = False

        def violation(w, old, new):
            return (w * np.abs(np.expm1((old - new) / E))).sum(-1)

        def alternate(k_uv, k_vu, lu, lv, wu, wv, f, g):
            f_new = soft(k_uv, lv + g / E, eps)
            g_new = soft(k_vu, lu + f_new / E, eps)
            worst = np.maximum(violation(wu, f, f_new), violation(wv, g, g_new))
            return f_new, g_new, bool((worst <= tol).all())

        done = [False, False, False]
        while iterations < max_iter:
            if not done[0]:
                f_ba, g_ab, done[0] = alternate("xy", "yx", la, lb, a, b, f_ba, g_ab)
            if not done[1]:
                f_aa, g_aa, done[1] = alternate("xx", "xx", la, la, a, a, f_aa, g_aa)
            if not done[2]:
                f_bb, g_bb, done[2] = alternate("yy", "yy", lb, lb, b, b, f_bb, g_bb)
            iterations += 1
            if all(done):
                converged = True
                break
    if reach is None:
        S = (a * (f_ba - (f_aa + g_aa) / 2)).sum(-1) + (b * (g_ab - (f_bb + g_bb) / 2)).sum(-1)
    else:
        k = reach + eps[:, None] / 2

        def ex(f):
            return np.exp(-f / reach)

        S = (a * k * ((ex(f_aa) + ex(g_aa)) / 2 - ex(f_ba))).sum(-1)
        S = S + (b * k * ((ex(f_bb) + ex(g_bb)) / 2 - ex(g_ab))).sum(-1)
    return S, iterations, converged


def _two_replicas(seed: int = 3, M: int = 7, N: int = 5):
    """Two replicas of weighted clouds in d = 2, the second three times wider (more ε-scaling steps)."""
    g = gen(seed)
    x = torch.randn(2, M, 2, generator=g, dtype=DT)
    y = 0.8 * torch.randn(2, N, 2, generator=g, dtype=DT) + torch.tensor([0.7, -0.2], dtype=DT)
    x[1] *= 3.0
    y[1] *= 3.0
    a = torch.rand(2, M, generator=g, dtype=DT) + 0.2
    b = torch.rand(2, N, generator=g, dtype=DT) + 0.2
    return x, y, a, b


def _normalised(w: torch.Tensor) -> np.ndarray:
    return (w / w.sum(-1, keepdim=True)).numpy()


@pytest.mark.parametrize("blocked", [False, True], ids=["cached", "blocked"])
@pytest.mark.parametrize("tol", [None, 1e-6], ids=["annealing", "tol"])
@pytest.mark.parametrize("reach", [None, 0.8], ids=["balanced", "reach"])
@pytest.mark.parametrize("p", [1, 2])
def test_sinkhorn_core_equals_the_dense_numpy_algorithm(monkeypatch, p, reach, tol, blocked):
    """:func:`sinkhorn_divergence` (two weighted replicas of different widths, so their ε-scaling schedules have
    different lengths) against :func:`_dense_sinkhorn`: the same divergence per replica (1e-9 relative for
    p = 2; 1e-6 for p = 1, where the library's ``sqrt`` of round-off on a zero self-distance differs from the
    exact 0), the same number of updates, ``converged`` ``None`` without ``tol`` and ``True`` with it; the cost
    matrices cached (small clouds) or recomputed blockwise (``DENSE_MAX_ELEMENTS = 0``) alike. Negative control:
    the reference with another scaling (0.6) differs by more than 1e-4 relative."""
    x, y, a, b = _two_replicas()
    if blocked:
        monkeypatch.setattr(W, "DENSE_MAX_ELEMENTS", 0)
    eps, scaling = 0.3 if p == 2 else 0.4, 0.7
    got = sinkhorn_divergence(
        x, y, p=p, x_weights=a, y_weights=b, epsilon=eps, reach=reach, scaling=scaling, tol=tol,
        max_iter=5000, backend="torch",
    )  # fmt: skip
    args = (x.numpy(), y.numpy(), _normalised(a), _normalised(b), p, np.full(2, eps))
    S, iterations, converged = _dense_sinkhorn(*args, reach=reach, scaling=scaling, tol=tol, max_iter=5000)
    rel = 1e-9 if p == 2 else 1e-6
    assert got.divergence.shape == (2,) and got.backend == "torch"
    assert np.allclose(got.divergence.numpy(), S, rtol=rel, atol=rel * 1e-2), (got.divergence, S)
    assert got.iterations == iterations and got.converged is converged
    assert torch.equal(got.epsilon, torch.full((2,), eps, dtype=DT))
    other, _, _ = _dense_sinkhorn(*args, reach=reach, scaling=0.6, tol=tol, max_iter=5000)
    assert tol is not None or np.abs(other - S).max() > 1e-4 * np.abs(S).max()
    if tol is not None:  # both converged: another scaling reaches the same fixed point, another ε does not
        far, _, _ = _dense_sinkhorn(*args[:5], np.full(2, 1.2 * eps), reach=reach, scaling=scaling, tol=tol,
                                    max_iter=5000)  # fmt: skip
        assert np.abs(far - S).max() > 1e-4 * np.abs(S).max()


@pytest.mark.parametrize("reach", [None, 0.8], ids=["balanced", "reach"])
def test_sinkhorn_core_stops_at_max_iter_with_the_partial_value(reach):
    """``max_iter`` counts the annealing updates too: a ``max_iter`` two past the schedule's length stops after
    two alternating updates (``converged`` False, ``iterations == max_iter``) with the reference's value after
    those two; a ``max_iter`` below the schedule's length makes none (``iterations`` = the schedule's length).
    Negative control: the partial value differs from the converged one."""
    x, y, a, b = _two_replicas(seed=4)
    args = (x.numpy(), y.numpy(), _normalised(a), _normalised(b), 2, np.full(2, 0.05))
    _, n_schedule, _ = _dense_sinkhorn(*args, reach=reach, scaling=0.7, tol=None, max_iter=0)
    n_schedule -= 1  # the reference counted the last full update of tol=None
    kw = {"x_weights": a, "y_weights": b, "epsilon": 0.05, "reach": reach, "tol": 1e-9, "backend": "torch"}
    for max_iter in (n_schedule + 2, 1):
        got = sinkhorn_divergence(x, y, max_iter=max_iter, **kw)
        S, iterations, converged = _dense_sinkhorn(
            *args, reach=reach, scaling=0.7, tol=1e-9, max_iter=max_iter
        )
        assert converged is False and got.converged is False
        assert got.iterations == iterations == max(max_iter, n_schedule)
        assert np.allclose(got.divergence.numpy(), S, rtol=1e-9, atol=1e-12)
    full = sinkhorn_divergence(x, y, max_iter=5000, **kw)
    assert full.converged and np.abs(full.divergence.numpy() - S).max() > 1e-6


@pytest.mark.parametrize("tol", [None, 1e-9], ids=["annealing", "tol"])
def test_sinkhorn_core_without_annealing_steps_when_the_target_is_above_the_diameter(tol):
    """A target ``ε = 50`` above ``p·D²`` of both replicas (diameters below 2) leaves no ε-scaling step: the
    schedule is ``[ε, ε]``, so ``tol=None`` makes 3 updates (two averaged ones and the last full one) and the
    value of :func:`_dense_sinkhorn`; with ``tol`` the alternating updates start after 2. Negative control: a
    target of 1 (below ``p·D²``) has more updates."""
    x, y, a, b = _two_replicas(seed=5)
    x, y = 0.2 * x, 0.2 * y  # diameters below 2
    pooled = torch.cat([x, y], 1)
    assert float((2 * (pooled.amax(1) - pooled.amin(1)).norm(dim=-1) ** 2).max()) < 50
    got = sinkhorn_divergence(x, y, x_weights=a, y_weights=b, epsilon=50.0, tol=tol, backend="torch")
    args = (x.numpy(), y.numpy(), _normalised(a), _normalised(b), 2, np.full(2, 50.0))
    S, iterations, converged = _dense_sinkhorn(*args, reach=None, scaling=0.7, tol=tol, max_iter=1000)
    assert got.iterations == iterations and got.converged is converged
    assert iterations == 3 if tol is None else iterations > 2
    assert np.allclose(got.divergence.numpy(), S, rtol=1e-9, atol=1e-15)
    assert sinkhorn_divergence(x, y, x_weights=a, y_weights=b, epsilon=1.0, tol=tol).iterations > iterations


def test_sinkhorn_converged_value_matches_pot_and_the_translation_identity():
    """Balanced, p = 2, to ``tol = 1e-10``: the weighted debiased divergence equals POT's
    ``ot.solve_sample(..., debias=True)`` (to 1e-8), and for a translated cloud with the same weights,
    ``ν = μ + v``, it is ``|v|² = 1.3`` for every ε (0.5 and 2, to 1e-8; smaller ε take many thousand updates
    on so few points). Negative control: moving one point
    of the translated cloud by 0.1 breaks the identity by more than 1e-3."""
    g = gen(9)
    x = torch.randn(8, 2, generator=g, dtype=DT)
    y = torch.rand(6, 2, generator=g, dtype=DT) + 0.5
    a, b = torch.rand(8, generator=g, dtype=DT) + 0.1, torch.rand(6, generator=g, dtype=DT) + 0.1
    ours = sinkhorn_divergence(x, y, x_weights=a, y_weights=b, epsilon=0.2, tol=1e-10, max_iter=20_000)
    pot = ot.solve_sample(
        x,
        y,
        a / a.sum(),
        b / b.sum(),
        metric="sqeuclidean",
        reg=0.2,
        debias=True,
        tol=1e-14,
        max_iter=100_000,
    )
    assert ours.converged and abs(float(ours.divergence) - float(pot.value)) <= 1e-8
    v = torch.tensor([0.7, -0.9], dtype=DT)  # |v|² = 1.3
    for eps in (0.5, 2.0):
        s = sinkhorn_divergence(x, x + v, x_weights=a, y_weights=a, epsilon=eps, tol=1e-10, max_iter=20_000)
        assert s.converged and abs(float(s.divergence) - 1.3) <= 1e-8
    bent = x + v
    bent[0, 0] += 0.1
    s = sinkhorn_divergence(x, bent, x_weights=a, y_weights=a, epsilon=0.5, tol=1e-10, max_iter=20_000)
    assert abs(float(s.divergence) - 1.3) > 1e-3


# ----------------------------------------------------------------------------------------------------------
# meanfield.metrics.diversity
# ----------------------------------------------------------------------------------------------------------


def _cosines(f: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(f, axis=-1, keepdims=True)
    u = f / np.where(n > 0, n, 1.0)
    return u @ np.swapaxes(u, -1, -2)


def _modes_by_hand(
    f: np.ndarray, radius: float, symmetric: bool, live: np.ndarray, min_fraction: float
) -> int:
    """Connected components of the live particles linked at ``1 − cos ≤ r`` (depth-first search), counted when
    they hold at least ``max(2, min_fraction · |L|)`` particles."""
    S = _cosines(f)
    if symmetric:
        S = np.abs(S)
    M = len(f)
    seen, sizes = set(), []
    for start in range(M):
        if not live[start] or start in seen:
            continue
        stack, size = [start], 0
        seen.add(start)
        while stack:
            i = stack.pop()
            size += 1
            for j in range(M):
                if live[j] and j not in seen and 1 - S[i, j] <= radius:
                    seen.add(j)
                    stack.append(j)
        sizes.append(size)
    floor = max(2.0, min_fraction * live.sum())
    return sum(s >= floor for s in sizes)


def test_distinct_modes_floor_counts_live_particles():
    """Clusters of 1, 2, 3 and 4 particles on the orthogonal axes of R⁴ (cosines exactly 0 and 1), interleaved:
    the floor ``max(2, f·|L|)`` gives 3 modes at f = 0 and at the default 0.05, 2 at 0.3 (floor 3), 1 at 0.35
    and at 0.4 (a cluster of exactly the floor counts), 0 at 0.41; with the single particle and the pair dead
    ``|L| = 7``, so f = 0.4 gives floor 2.8 (2 modes) and f = 0.5 floor 3.5 (1 mode), where a floor from all
    10 particles would give 1 and 0. Negative control: every particle on one axis with f = 1 is one mode, one
    short of it is none."""
    sizes = [1, 2, 3, 4]
    axis = [k for k, s in enumerate(sizes) for _ in range(s)]
    order = [3, 9, 1, 6, 0, 4, 8, 2, 5, 7]
    f = torch.eye(4, dtype=DT)[[axis[i] for i in order]]  # (10, 4)
    for frac, modes in [(0.0, 3), (0.05, 3), (0.3, 2), (0.35, 1), (0.4, 1), (0.41, 0)]:
        assert float(distinct_modes(f, min_fraction=frac)) == modes, frac
    assert float(distinct_modes(f)) == 3
    live = torch.tensor([axis[i] >= 2 for i in order])  # the axes with 3 and 4 particles
    assert int(live.sum()) == 7
    assert float(distinct_modes(f, live=live, min_fraction=0.4)) == 2
    assert float(distinct_modes(f, live=live, min_fraction=0.5)) == 1
    one = torch.eye(4, dtype=DT)[[0] * 10]
    assert float(distinct_modes(one, min_fraction=1.0)) == 1
    one[0] = torch.eye(4, dtype=DT)[1]
    assert float(distinct_modes(one, min_fraction=1.0)) == 0


def test_distinct_modes_batches_dtypes_and_arguments_match_a_brute_force_count():
    """Replicas ``(2, 3, 12, 3)`` of particles around four directions (two of them opposite) with random live
    masks: each entry equals :func:`_modes_by_hand` for the radius, ``symmetric`` and ``min_fraction`` given
    (radii chosen away from every pairwise cosine distance); shape ``(2, 3)``, dtype that of the features
    (float64 and float32). Negative control: the counts differ between ``symmetric`` False and True on this data
    (``w`` and ``−w`` join)."""
    g = gen(21)
    centres = torch.tensor([[1.0, 0, 0], [-1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]], dtype=DT)
    pick = torch.randint(0, 4, (2, 3, 12), generator=g)
    f = centres[pick] + 0.08 * torch.randn(2, 3, 12, 3, generator=g, dtype=DT)  # (2, 3, 12, 3)
    live = torch.rand(2, 3, 12, generator=g) > 0.2
    S = _cosines(f.numpy())
    results = {}
    for radius, symmetric, frac in [
        (0.05, False, 0.05),
        (0.05, True, 0.05),
        (0.02, False, 0.25),
        (0.1, True, 0.3),
    ]:
        gaps = np.abs(1 - (np.abs(S) if symmetric else S) - radius)
        assert gaps.min() > 1e-6  # no pair on the boundary
        got = distinct_modes(f, radius, symmetric=symmetric, live=live, min_fraction=frac)
        assert got.shape == (2, 3) and got.dtype == DT
        expected = [
            [_modes_by_hand(f[i, j].numpy(), radius, symmetric, live[i, j].numpy(), frac) for j in range(3)]
            for i in range(2)
        ]
        assert got.tolist() == expected, (radius, symmetric, frac)
        results[(radius, symmetric, frac)] = expected
        assert distinct_modes(f.float(), radius, symmetric=symmetric, live=live, min_fraction=frac).dtype == (
            torch.float32
        )
    assert results[(0.05, False, 0.05)] != results[(0.05, True, 0.05)]
    all_live = distinct_modes(f, 0.05)
    assert all_live.tolist() == [
        [_modes_by_hand(f[i, j].numpy(), 0.05, False, np.ones(12, bool), 0.05) for j in range(3)]
        for i in range(2)
    ]


def test_distinct_modes_refusals_name_the_argument():
    """The messages for ``min_fraction`` above 1 and below 0, a radius above 2, integer and 1-D features.
    Negative control: the boundary values ``min_fraction = 1`` and ``radius = 2`` are accepted."""
    f = torch.eye(3, dtype=DT)
    with pytest.raises(ValueError, match="^" + re.escape("min_fraction must lie in [0, 1], got 1.5") + "$"):
        distinct_modes(f, min_fraction=1.5)
    with pytest.raises(ValueError, match=re.escape("min_fraction must be ≥ 0, got -0.1")):
        distinct_modes(f, min_fraction=-0.1)
    with pytest.raises(
        ValueError, match=re.escape("radius must lie in [0, 2] (a cosine distance 1 − cos), got 2.5")
    ):
        distinct_modes(f, 2.5)
    with pytest.raises(TypeError, match="features must be a floating-point tensor"):
        distinct_modes(torch.eye(3, dtype=torch.int64))
    with pytest.raises(ValueError, match=re.escape("features must have shape (…, M, D) (≥ 2 dimensions)")):
        distinct_modes(torch.ones(3, dtype=DT))
    assert float(distinct_modes(f, 2.0, min_fraction=1.0)) == 1.0  # radius 2 links everything


def _collapse_by_hand(f: np.ndarray, radius: float, symmetric: bool, live: np.ndarray) -> float:
    S = _cosines(f)
    if symmetric:
        S = np.abs(S)
    M = len(f)
    hits = sum(
        1 for i in range(M) if live[i] and any(live[j] and j != i and 1 - S[i, j] <= radius for j in range(M))
    )
    return hits / max(1, int(live.sum()))


def test_collapse_rate_boundaries_of_the_radius_and_the_sign():
    """Exact cosines at the edges of the rule ``1 − S_ij ≤ r``: orthogonal axes are collapsed at ``r = 1`` and
    not at 0.999; two equal axes at ``r = 0``; ``e`` and ``−e`` at ``r = 2`` (``symmetric=False``) and at
    ``r = 0`` with ``symmetric=True``, not at 1.999 without it; the default radius 0.01 takes a pair at
    ``cos = 0.995`` and not one at ``cos = 0.985``. Negative control: one particle off the pair at the default
    radius lowers the rate from 1 to 2/3."""
    e = torch.eye(3, dtype=DT)
    assert float(collapse_rate(e[:2], 1.0)) == 1.0 and float(collapse_rate(e[:2], 0.999)) == 0.0
    assert float(collapse_rate(e[[0, 0]], 0.0)) == 1.0
    anti = torch.stack([e[0], -e[0]])
    assert float(collapse_rate(anti, 2.0)) == 1.0 and float(collapse_rate(anti, 1.999)) == 0.0
    assert float(collapse_rate(anti, 0.0, symmetric=True)) == 1.0
    for c, rate in [(0.995, 1.0), (0.985, 0.0)]:
        pair = torch.tensor([[1.0, 0.0], [c, math.sqrt(1 - c * c)]], dtype=DT)
        assert float(collapse_rate(pair)) == rate
    triple = torch.tensor([[1.0, 0.0], [0.995, math.sqrt(1 - 0.995**2)], [0.0, 1.0]], dtype=DT)
    assert abs(float(collapse_rate(triple)) - 2 / 3) <= 1e-15


def test_collapse_rate_batches_masks_and_dtypes_match_a_brute_force_count():
    """Replicas ``(4, 10, 4)`` of particles near ``e_1``, ``−e_1`` and ``e_2``, with live masks of different
    sizes per replica (replica 1 with a single live particle, whose rate is 0, replica 2 with none, also 0), for
    both signs and three radii: each entry equals :func:`_collapse_by_hand`; shape ``(4,)`` and the features'
    dtype (float64, float32). Negative control: ``symmetric`` changes the result on this data (``w`` and
    ``−w`` count as one neuron)."""
    g = gen(22)
    centres = torch.stack([torch.eye(4, dtype=DT)[0], -torch.eye(4, dtype=DT)[0], torch.eye(4, dtype=DT)[1]])
    f = centres[torch.randint(0, 3, (4, 10), generator=g)] + 0.04 * torch.randn(
        4, 10, 4, generator=g, dtype=DT
    )
    live = torch.rand(4, 10, generator=g) > 0.25
    live[1] = False
    live[1, 4] = True
    live[2] = False
    S = _cosines(f.numpy())
    seen = {}
    for radius, symmetric in [(0.002, False), (0.002, True), (0.0005, True), (0.5, False)]:
        assert np.abs(1 - (np.abs(S) if symmetric else S) - radius).min() > 1e-6
        got = collapse_rate(f, radius, symmetric=symmetric, live=live)
        assert got.shape == (4,) and got.dtype == DT
        expected = [_collapse_by_hand(f[r].numpy(), radius, symmetric, live[r].numpy()) for r in range(4)]
        assert np.allclose(got.numpy(), expected, rtol=0, atol=1e-15), (radius, symmetric, got, expected)
        assert expected[1] == 0.0 and expected[2] == 0.0
        seen[(radius, symmetric)] = expected
        assert collapse_rate(f.float(), radius, symmetric=symmetric, live=live).dtype == torch.float32
    assert seen[(0.002, False)] != seen[(0.002, True)]
    assert len({e for v in seen.values() for e in v}) >= 4  # the rates are not all 0 or 1
    unmasked = collapse_rate(f, 0.002)
    expected = [_collapse_by_hand(f[r].numpy(), 0.002, False, np.ones(10, bool)) for r in range(4)]
    assert np.allclose(unmasked.numpy(), expected, rtol=0, atol=1e-15)


def test_collapse_rate_refusals_name_the_argument():
    """The messages for a radius above 2 and below 0, a single particle, a live mask of the wrong shape or
    dtype. Negative control: two particles with a matching mask are accepted."""
    f = torch.eye(3, dtype=DT)
    message = "radius must lie in [0, 2] (a cosine distance 1 − cos), got 2.0001"
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        collapse_rate(f, 2.0001)
    with pytest.raises(ValueError, match=re.escape("radius must be ≥ 0, got -0.5")):
        collapse_rate(f, -0.5)
    with pytest.raises(
        ValueError, match="^" + re.escape("collapse_rate needs M ≥ 2 particles, got M = 1") + "$"
    ):
        collapse_rate(f[:1])
    with pytest.raises(ValueError, match=re.escape("live must have shape (…, M) = (3,), got (2,)")):
        collapse_rate(f, live=torch.ones(2, dtype=torch.bool))
    with pytest.raises(TypeError, match="live must be a boolean tensor"):
        collapse_rate(f, live=torch.ones(3))
    assert float(collapse_rate(f[:2], live=torch.ones(2, dtype=torch.bool))) == 0.0


def test_minibatch_gradients_closed_form_rows_unused_parameters_and_untouched_grad():
    """``loss = ½‖W x + c − t‖²`` has ``∇_W = r xᵀ`` and ``∇_c = r`` with ``r = W x + c − t``: each row is
    ``[vec(r xᵀ), r, 0₂]`` for its minibatch (an unused parameter gives zeros), in the order of the
    parameters; generators work for both the parameters and the batches; exactly two batches are enough; a
    ``.grad`` set before is left as it was and the rows carry no graph. Negative control: swapping the batches
    swaps the rows."""
    g = gen(23)
    Wm = torch.randn(2, 3, generator=g, dtype=DT, requires_grad=True)
    c = torch.randn(2, generator=g, dtype=DT, requires_grad=True)
    unused = torch.randn(2, generator=g, dtype=DT, requires_grad=True)
    Wm.grad = torch.full((2, 3), 7.0, dtype=DT)
    batches = [
        (torch.randn(3, generator=g, dtype=DT), torch.randn(2, generator=g, dtype=DT)) for _ in range(3)
    ]

    def loss(batch):
        x, t = batch
        return 0.5 * ((Wm @ x + c - t) ** 2).sum()

    G = minibatch_gradients((p for p in (Wm, c, unused)), loss, iter(batches))
    assert G.shape == (3, 10) and G.dtype == DT and not G.requires_grad
    with torch.no_grad():
        for row, (x, t) in zip(G, batches):
            r = Wm @ x + c - t
            expected = torch.cat([torch.outer(r, x).flatten(), r, torch.zeros(2, dtype=DT)])
            assert torch.allclose(row, expected, rtol=1e-13, atol=1e-14)
    assert torch.equal(Wm.grad, torch.full((2, 3), 7.0, dtype=DT)) and c.grad is None and unused.grad is None
    two = minibatch_gradients([Wm, c, unused], loss, batches[:2])
    assert torch.equal(two, G[:2])
    swapped = minibatch_gradients([Wm, c, unused], loss, batches[1::-1])
    assert torch.equal(swapped, G[[1, 0]]) and not torch.equal(swapped, two)


def test_minibatch_gradients_refusals():
    """The messages: fewer than two minibatches (``got 1``, ``got 0``), no parameters, a parameter that does
    not require grad, a non-tensor. Negative control: the same call with two batches returns two rows."""
    theta = torch.zeros(2, dtype=DT, requires_grad=True)

    def loss(x):
        return (theta * x).sum()

    one = [torch.ones(2, dtype=DT)]
    for batches, n in ((one, 1), ([], 0)):
        message = f"batches must hold at least 2 minibatches, got {n}"
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            minibatch_gradients([theta], loss, batches)
    message = "parameters must be a non-empty collection of tensors that require grad"
    for params in ([], [theta, torch.zeros(2, dtype=DT)], [theta, 1.0]):
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            minibatch_gradients(params, loss, one * 2)
    assert torch.equal(minibatch_gradients([theta], loss, one * 2), torch.ones(2, 2, dtype=DT))
