"""The validate machinery: comparisons, results, the report files, and the CLI exit code."""

import json

import pytest

from meanfield.cli import main
from meanfield.studies.validation import CheckResult, Comparison, discover, validate


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
