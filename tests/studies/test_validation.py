"""The validate machinery: comparisons, results, the report files, and the CLI exit code."""

import json
import re
import sys
from pathlib import Path

import matplotlib
import pytest
from helpers.check_files import (  # tests/helpers/check_files.py
    PLOT_OK,
    write_check,  # tests/helpers/check_files.py
)

import meanfield
import meanfield.data
import meanfield.runs
import meanfield.runs.sweeps
import meanfield.shipped
import meanfield.stepping.solvers
import meanfield.studies.validation
from meanfield import cli
from meanfield.cli import main
from meanfield.studies import plotting, validation
from meanfield.studies.validation import (
    CheckResult,
    Comparison,
    InputError,
    NoTheoryFolder,
    ValidationReport,
    discover,
    load_check,
    run_as_script,
    run_check,
    validate,
)


def test_comparison_verdicts():
    assert Comparison("x", 1.0, 1.05, 0.1).passed
    assert not Comparison("x", 1.0, 1.2, 0.1).passed
    assert Comparison("x", 1.0, 1.2, 0.1, expect="differ").passed
    assert not Comparison("x", float("nan"), 1.0, 1e9).passed  # NaN never passes
    with pytest.raises(ValueError, match="expect must be"):
        Comparison("x", 1.0, 1.0, 0.1, expect="maybe")
    assert not CheckResult("empty", "no rows").passed  # a check that compared nothing fails


def _write_checks(folder):
    good = """
from meanfield.studies.validation import CheckResult
from meanfield.studies.plotting import figure
CLAIM = "one equals one"
def run(preset="fast"):
    r = CheckResult("good", CLAIM)
    r.add("one", 1.0, 1.0, 1e-12)
    return r
def plot(result):
    fig, ax = figure()
    ax.plot([0, 1], [0, 1])
    return fig
"""
    (folder / "good.py").write_text(good)
    (folder / "bad.py").write_text(good.replace('"good"', '"bad"').replace("1.0, 1.0", "1.0, 2.0"))
    (folder / "broken.py").write_text(good.replace("return r", "raise RuntimeError('boom')"))
    (folder / "_helper.py").write_text("")


def test_validate_writes_report_results_and_figures(tmp_path):
    theory = tmp_path / "theory"
    theory.mkdir()
    _write_checks(theory)
    assert list(discover(theory)) == ["bad", "broken", "good"]
    report = validate(preset="fast", out=tmp_path / "out", theory_dir=theory, progress=False, echo=None)
    verdicts = {r.name: r.passed for r in report.results}
    assert verdicts == {"bad": False, "broken": False, "good": True} and not report.passed
    assert "boom" in [r for r in report.results if r.name == "broken"][0].error
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [r["passed"] for r in saved] == [False, False, True]
    assert (tmp_path / "out" / "good.png").stat().st_size > 1000
    assert "## good: pass" in (tmp_path / "out" / "report.md").read_text()
    assert main(["validate", "good", "--theory", str(theory), "--out", str(tmp_path / "o2")]) == 0
    assert main(["validate", "bad", "--theory", str(theory), "--out", str(tmp_path / "o3")]) == 1
    with pytest.raises(ValueError, match="unknown check"):
        validate(["nope"], theory_dir=theory, out=tmp_path / "o4", echo=None)
    with pytest.raises(ValueError, match="preset must be one of"):
        validate(preset="medium", theory_dir=theory, out=tmp_path / "o5", echo=None)


def test_cli_bad_input_is_a_one_line_error_not_a_traceback(tmp_path, capsys):
    theory = tmp_path / "theory"
    theory.mkdir()
    _write_checks(theory)
    assert main(["validate", "nope", "--theory", str(theory), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("meanfield validate: error: unknown check(s) ['nope']; available:")
    assert "Traceback" not in err
    assert main(["validate", "--theory", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "no theory folder" in capsys.readouterr().err


def test_resume_reuses_finished_results_and_reruns_the_rest(tmp_path):
    theory = tmp_path / "theory"
    theory.mkdir()
    _write_checks(theory)
    out = tmp_path / "out"
    first = validate(preset="fast", out=out, theory_dir=theory, progress=False, echo=None)
    (theory / "good.py").write_text("raise RuntimeError('must not be imported again')")
    again = validate(preset="fast", out=out, theory_dir=theory, progress=False, echo=None, resume=True)
    by_name = {r.name: r for r in again.results}
    assert (
        by_name["good"].passed
        and by_name["good"].to_dict() == [r for r in first.results if r.name == "good"][0].to_dict()
    )
    assert by_name["broken"].error is not None  # a failed check is run again, not reused
    fresh = validate(
        ["good"], preset="full", out=out, theory_dir=theory, progress=False, echo=None, resume=True
    )
    assert fresh.results[0].error is not None  # another preset: nothing reused, the (now broken) check reruns


matplotlib.use("Agg")


_check = write_check  # tests/helpers/check_files.py


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


def _check_2(folder, name, reference=1.0, extra="pass", plot=PLOT_OK):
    """A check that measures 1.0 against ``reference`` and keeps its preset (``tests/helpers/check_files.py``)."""
    return write_check(
        folder, name, reference=reference, extra=extra, claim="the preset is passed on", plot=plot
    )


def test_check_result_table_renders_escaped_rows_and_verdicts():
    """:meth:`CheckResult.table` against the markdown written by hand from its format (6 significant
    digits for values, 3 for tolerance and detectable, ``|``, ``_``, ``*`` escaped, verdict ``pass`` or
    ``**FAIL**``). Negative control: the first row's error 0.2346 exceeds its tolerance 0.123, so it reads
    ``**FAIL**``, and the ``differ`` row outside its tolerance reads ``pass``."""
    result = CheckResult("t", "claim")
    result.add("a|b_c*", 1.2345678, 1.0, 0.123456, detectable=0.0456789)
    result.add("ctrl", 3.0, 1.0, 0.5, expect="differ")
    assert result.table() == "\n".join(
        [
            "| quantity | measured | reference | tolerance | detects | expect | verdict |",
            "|---|---|---|---|---|---|---|",
            "| a\\|b\\_c\\* | 1.23457 | 1 | 0.123 | 0.0457 | agree | **FAIL** |",
            "| ctrl | 3 | 1 | 0.5 |  | differ | pass |",
        ]
    )


def test_report_summary_counts_passes_failures_and_errors():
    """:meth:`ValidationReport.summary` against the table written by hand from its format: one row a check
    with verdict ``pass`` / ``FAIL`` / ``ERROR``, passing rows over all rows, seconds to 0.1, and the count
    line (1 passed, 2 failed). Negative control: the failing and the erroring checks do not read ``pass``."""
    good = CheckResult("gauss_var", "Var is 1", [Comparison("v", 1.0, 1.0, 0.1)], seconds=1.5)
    bad = CheckResult(
        "b", "claim b", [Comparison("x", 1.0, 2.0, 0.1), Comparison("y", 0.0, 0.0, 1.0)], seconds=12.0
    )
    broken = CheckResult("c", "claim c", error="Traceback: boom")
    report = ValidationReport([good, bad, broken], out=None)
    assert report.summary() == "\n".join(
        [
            "check      verdict  rows     time  claim",
            "gauss_var  pass      1/1     1.5s  Var is 1",
            "b          FAIL      1/2    12.0s  claim b",
            "c          ERROR     0/0     0.0s  claim c",
            "1 passed, 2 failed",
        ]
    )
    assert not report.passed
    assert ValidationReport([good], out=None).summary().endswith("\n1 passed, 0 failed")


def test_check_result_round_trips_through_its_dict():
    """:meth:`CheckResult.from_dict` of :meth:`to_dict` gives back the data, preset, seconds and error
    (the values put in), and ``to_dict`` marks each row's verdict (row 1 passes, row 2 fails). Negative
    control: a dict without ``seconds``/``data`` reads as 0.0 and ``{}``."""
    result = CheckResult("n", "c", data={"x": [1.0, 2.0]}, preset="full", seconds=2.5, error=None)
    result.add("q", 1.0, 1.0, 0.1, detectable=0.2, note="hand")
    result.add("r", 1.0, 3.0, 0.1)
    d = result.to_dict()
    assert [row["passed"] for row in d["comparisons"]] == [True, False] and d["passed"] is False
    back = CheckResult.from_dict(d)
    assert (back.data, back.preset, back.seconds, back.error) == ({"x": [1.0, 2.0]}, "full", 2.5, None)
    assert back.comparisons == result.comparisons
    bare = CheckResult.from_dict({"name": "n", "claim": "c", "comparisons": []})
    assert (bare.data, bare.preset, bare.seconds, bare.error) == ({}, "fast", 0.0, None)


def test_run_check_passes_the_preset_and_keeps_the_claim_of_a_failing_check(tmp_path):
    """:func:`run_check`: the check's ``run`` receives the preset given (``"full"``, seen in its data) and
    the result is stamped with it; a check whose ``run`` raises becomes an error result that keeps the
    check's CLAIM; one that deleted its CLAIM before raising gets an empty claim. Negative control: the
    raising check does not pass and its error names the exception."""
    result, module = run_check("good", _check_2(tmp_path, "good"), "full")
    assert result.data == {"preset_seen": "full"} and result.preset == "full" and result.passed
    assert module.CLAIM == "the preset is passed on"
    raising = _check_2(tmp_path, "raising", extra="raise RuntimeError('boom')")
    result, _ = run_check("raising", raising, "fast")
    assert result.claim == "the preset is passed on" and result.preset == "fast"
    assert not result.passed and "RuntimeError: boom" in result.error
    vanishing = _check_2(tmp_path, "vanishing", extra="del globals()['CLAIM']\n    raise RuntimeError('x')")
    result, _ = run_check("vanishing", vanishing, "fast")
    assert result.claim == "" and "RuntimeError: x" in result.error


def test_validate_progress_bar_report_line_and_plot_failure(tmp_path, capsys):
    """:func:`validate`: with ``progress=True`` the bar ``validate: 100%… 1/1`` goes to stderr and with
    ``progress=False`` nothing does; ``echo`` receives the summary and ``report: <absolute report.md>``; a
    check whose ``plot`` raises fails with an error starting ``plot failed:``. Negative control: the
    plot-failing check is not reported as passed, and ``report.md`` names it FAIL."""
    theory = tmp_path / "theory"
    theory.mkdir()
    _check_2(theory, "good")
    _check_2(theory, "noplot", plot="raise ValueError('no plot')")
    echoed = []
    out = tmp_path / "out"
    report = validate(["good"], out=out, theory_dir=theory, progress=True, echo=echoed.append)
    err = capsys.readouterr().err
    assert "validate: 100%" in err and "1/1" in err
    assert echoed == [report.summary(), f"report: {(out / 'report.md').resolve()}"]
    assert report.out == out and report.passed
    report = validate(["noplot"], out=tmp_path / "o2", theory_dir=theory, progress=False, echo=None)
    assert "validate" not in capsys.readouterr().err
    (result,) = report.results
    assert result.error.startswith("plot failed:\nTraceback") and "ValueError: no plot" in result.error
    assert not report.passed
    assert "## noplot: FAIL" in (tmp_path / "o2" / "report.md").read_text()


def test_validate_refuses_an_output_folder_that_cannot_be_made(tmp_path):
    """An ``out`` below a regular file cannot be created: :class:`InputError` naming the folder. Negative
    control: an ordinary new folder is accepted."""
    theory = tmp_path / "theory"
    theory.mkdir()
    _check_2(theory, "good", plot="raise ValueError('skip the figure')")
    (tmp_path / "file").write_text("")
    bad = tmp_path / "file" / "sub"
    with pytest.raises(InputError, match="^" + re.escape(f"cannot create the output folder {bad}: ")):
        validate(out=bad, theory_dir=theory, progress=False, echo=None)
    assert (
        validate(out=tmp_path / "fine", theory_dir=theory, progress=False, echo=None).results[0].name
        == "good"
    )


def test_run_as_script_exit_status_help_and_folder(tmp_path, monkeypatch, capsys):
    """``python theory/<name>.py``: exit 0 for a passing check, 1 for a failing one, run from the script's
    own folder (not the shipped theory/, which has no such check), with ``--preset`` reaching the check;
    ``--help`` shows ``usage: python theory/<file>`` and the CLAIM as description. Negative control: the
    failing check (reference 2 against a measured 1) exits 1, not 0."""
    good = _check_2(tmp_path, "good_script")
    bad = _check_2(tmp_path, "bad_script", reference=2.0)
    monkeypatch.setattr(sys, "argv", ["whatever.py", "--preset", "full", "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit) as info:
        run_as_script(str(good))
    assert info.value.code == 0
    saved = (tmp_path / "o" / "results.json").read_text()
    assert '"preset_seen": "full"' in saved
    with pytest.raises(SystemExit) as info:
        run_as_script(str(bad))
    assert info.value.code == 1
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["whatever.py", "--help"])
    with pytest.raises(SystemExit) as info:
        run_as_script(str(good))
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python theory/good_script.py ")
    assert "\nthe preset is passed on\n" in out


def test_validate_input_error_is_one_line_with_status_2(monkeypatch, capsys):
    """An :class:`InputError` (here its subclass :class:`NoTheoryFolder`) from :func:`validate`:
    ``meanfield validate: error: <message>`` on stderr, status 2, nothing on stdout."""

    def fake_validate(checks, **kwargs):
        raise NoTheoryFolder("no theory/ folder at T")

    monkeypatch.setattr(meanfield.studies.validation, "validate", fake_validate)
    assert cli.main(["validate", "--theory", "T"]) == 2
    assert capsys.readouterr() == ("", "meanfield validate: error: no theory/ folder at T\n")
