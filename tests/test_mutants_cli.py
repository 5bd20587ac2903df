"""The command line, the configuration helpers, the validate machinery and task lookup, value by value.

Every test compares what the code produced with an answer written down by hand: the documented command-line
interface (option defaults, choices, help texts), text tables rendered character by character from their
format strings, TOML parsed back with :mod:`tomllib`, the known orders of the Euler–Maruyama scheme. The
subcommands run in-process (``meanfield.cli.main([...])``) with the expensive work (``run``,
``sweep_runs``) replaced by recorders, so what is checked is what the command line passes on and prints.
Each test has a negative control: an input that must be told apart from the expected one.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import types
from dataclasses import dataclass
from typing import Literal

import pytest
from _check_files import CONFIG_TEXT, PLOT_OK, write_check  # tests/_check_files.py

import meanfield.runs
import meanfield.runs.sweeps
from meanfield import cli, tasks
from meanfield.config import ConfigError, from_dict, load_toml_text, resolve, set_key, to_toml
from meanfield.runs.sweeps import TableOptions
from meanfield.studies.validation import (
    CheckResult,
    Comparison,
    InputError,
    ValidationReport,
    run_as_script,
    run_check,
    validate,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# ----------------------------------------------------------------------------------------------------------
# the parser: defaults, choices, help texts, subcommand names
# ----------------------------------------------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.dest != "help"}


SUBCOMMAND_HELP = {
    "validate": "run the theory checks against their analytic answers (the main job)",
    "figures": "regenerate the documentation figures (theory checks' plots, overview, quickstart)",
    "solvers": "list the solvers and their declared strong/weak orders",
    "run": "train a configured task into a run folder (checkpoints, metrics, resume)",
    "sweep": "run a grid of configurations over seeds; table of means, CIs and paired differences",
    "data": "list the datasets found, their sizes and SHA-256 checks",
}

SWEEP_DESCRIPTION = (
    "One run folder per (grid point, seed) under --out; finished points are skipped and unfinished ones "
    "resume, so an interrupted sweep continues when the command is run again. Writes runs.csv, summary.csv "
    "and summary.md (mean and 95 % t interval over seeds; paired difference against --baseline with its 95 % "
    "t interval, the paired t-test's raw and Holm-adjusted p-values and the smallest difference detectable at "
    "--power). Run it again with other table options to rewrite the tables of a finished sweep without "
    "running anything."
)

# dest -> (default, choices, metavar, help) of the options whose values the documentation promises
SWEEP_OPTIONS = {
    "grid": ([], None, "KEY=V1,V2", "a grid axis (repeatable); the sweep is the product of the axes"),
    "seeds": ("0", None, None, "comma-separated seeds (default: 0)"),
    "jobs": (1, None, None, "points run at once, in separate processes"),
    "backend": (
        "local",
        ("local", "ray"),
        None,
        "where the points run: local processes (--jobs) or Ray tasks (pip install 'meanfield-sde[ray]')",
    ),
    "address": (None, None, None, "the Ray cluster's address (default: start a local one)"),
    "out": (None, None, None, "the sweep folder (default: runs/sweep-<config>[-<preset>])"),
    "baseline": (None, None, "KEY=V", "the grid point compared with, seed by seed"),
    "metric": ([], None, None, "a final metric to summarise (repeatable; default all)"),
    "power": (
        0.8,
        None,
        None,
        "the power of the 'detectable' column and of --detect (default: 0.8; α = 0.05)",
    ),
    "holm": (
        "table",
        ("table", "metric"),
        None,
        "the family of Holm's correction: every paired test of the table (default) or each metric's",
    ),
    "preset": (None, None, None, "a preset of the file: smoke, quick, full, …"),
    "set": (
        [],
        None,
        "KEY=VALUE",
        "override a key after the preset (repeatable), e.g. --set train.steps=100",
    ),
    "quiet": (False, None, None, "no progress bar, no summary table"),
}

RUN_OPTIONS = {
    "out": (None, None, None, "the run folder (default: runs/<name or file stem>[-<preset>])"),
    "resume": (False, None, None, "continue from the folder's latest checkpoint"),
    "list": (False, None, None, "list the shipped configurations, their presets and descriptions"),
    "preset": SWEEP_OPTIONS["preset"],
    "set": SWEEP_OPTIONS["set"],
    "quiet": SWEEP_OPTIONS["quiet"],
}

FIGURES_OPTIONS = {
    "out": ("docs/figures", None, None, "output folder (default: docs/figures)"),
    "preset": ("fast", ("fast", "full"), None, None),
    "force": (False, None, None, "regenerate figures that already exist"),
}

VALIDATE_OPTIONS = {
    "preset": ("fast", ("fast", "full"), None, "fast: minutes (CI); full: paper figures"),
    "out": ("validate-out", None, None, "output folder (default: validate-out)"),
    "resume": (False, None, None, "reuse the finished results already in --out (after an interruption)"),
}


def test_subcommands_have_their_documented_names_and_one_line_help():
    """The subcommands and the one-line help ``meanfield --help`` lists for each, against the documented
    texts (the help the parser was written with; docs/running.md): a renamed subcommand or a lost help
    line fails. Negative control: ``meanfield nope`` is refused by argparse (exit 2)."""
    action = _subcommands(cli.build_parser())
    assert {a.dest: a.help for a in action._choices_actions} == SUBCOMMAND_HELP
    assert list(action.choices) == list(SUBCOMMAND_HELP)
    with pytest.raises(SystemExit) as info:
        cli.build_parser().parse_args(["nope"])
    assert info.value.code == 2


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("sweep", SWEEP_OPTIONS),
        ("run", RUN_OPTIONS),
        ("figures", FIGURES_OPTIONS),
        ("validate", VALIDATE_OPTIONS),
    ],
    ids=["sweep", "run", "figures", "validate"],
)
def test_options_have_their_documented_defaults_choices_and_help(command, expected):
    """Each option's default, choices, metavar and help text against the documented ones (the table above,
    written from docs/running.md and each option's promise, e.g. ``--seeds`` defaults to ``"0"``), and the
    defaults ``parse_args([command])`` gives. Negative control: a value outside ``choices``
    (``--preset``/``--backend``/``--holm`` = ``nope``) exits with status 2."""
    options = _options(_subcommands(cli.build_parser()).choices[command])
    got = {
        dest: (
            options[dest].default,
            None if options[dest].choices is None else tuple(options[dest].choices),
            options[dest].metavar,
            options[dest].help,
        )
        for dest in expected
    }
    assert got == expected
    parsed = vars(cli.build_parser().parse_args([command]))
    assert {dest: parsed[dest] for dest in expected} == {dest: spec[0] for dest, spec in expected.items()}
    for dest, spec in expected.items():
        if spec[1] is not None:
            with pytest.raises(SystemExit) as info:
                cli.build_parser().parse_args([command, f"--{dest}", "nope"])
            assert info.value.code == 2


def test_descriptions_and_types_of_the_sweep_and_run_commands():
    """The sweep command's description (exact text), the types of the numeric sweep options (``--jobs 3``
    → 3, ``--power 0.9`` → 0.9, ``--detect`` repeated → a list of floats) and the run command's description.
    Negative control: ``--jobs two`` is refused (exit 2)."""
    action = _subcommands(cli.build_parser())
    assert action.choices["sweep"].description == SWEEP_DESCRIPTION
    assert action.choices["run"].description.startswith(
        "Train the task of CONFIG (a shipped name, see --list, or a TOML file) into a run folder: "
    )
    args = cli.build_parser().parse_args(
        ["sweep", "c.toml", "--jobs", "3", "--power", "0.9", "--detect", "0.5", "--detect", "2"]
    )
    assert (args.jobs, args.power, args.detect, args.config) == (3, 0.9, [0.5, 2.0], "c.toml")
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["sweep", "--jobs", "two"])


# ----------------------------------------------------------------------------------------------------------
# the subcommands, in-process
# ----------------------------------------------------------------------------------------------------------


def test_solvers_lists_the_euler_maruyama_orders(capsys):
    """``meanfield solvers``: the header and the Euler–Maruyama row against the scheme's known orders
    (strong 1 and weak 1 for additive noise, strong 1/2 and weak 1 for diagonal and general noise,
    Kloeden & Platen), in the table's fixed-width columns. Negative control: a row of dashes (orders of an
    unknown noise type) is not what the euler row shows."""
    assert cli.main(["solvers"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = f"{'solver':<16} {'additive':>16} {'diagonal':>16} {'general':>16}   (strong / weak order)"
    euler = f"{'euler':<16} {'1 / 1':>16} {'0.5 / 1':>16} {'0.5 / 1':>16}"
    assert lines[0] == header
    assert euler in lines
    dashes = f"{'euler':<16} {'—':>16} {'—':>16} {'—':>16}"
    assert dashes not in lines


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "mini_cfg.toml"
    path.write_text(CONFIG_TEXT, encoding="utf-8")
    return path


def test_print_config_prints_the_file_or_its_resolved_form(config_file, capsys):
    """``run CONFIG --print-config``: without a preset, the file byte for byte; with ``--preset smoke --set
    train.lr=0.25``, a header naming both and the resolved configuration, which tomllib reads back as the
    hand-resolved dict (steps 2 from the preset, lr 0.25 from the override, no presets table). Negative
    control: the unresolved base (steps 10) is not what it prints."""
    assert cli.main(["run", str(config_file), "--print-config"]) == 0
    assert capsys.readouterr().out == CONFIG_TEXT
    assert (
        cli.main(["run", str(config_file), "--print-config", "--preset", "smoke", "--set", "train.lr=0.25"])
        == 0
    )
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (
        f"# {config_file} resolved with --preset smoke --set train.lr=0.25 (meanfield run --print-config)"
    )
    expected = {"task": "teacher_student", "seed": 1, "train": {"steps": 2, "lr": 0.25}}
    assert tomllib.loads(out) == expected
    assert tomllib.loads(out)["train"]["steps"] != 10


def _record_run(monkeypatch, raises=None):
    calls = []

    def fake_run(config, out, **kwargs):
        calls.append((config, out, kwargs))
        if raises is not None:
            raise raises

    monkeypatch.setattr(meanfield.runs, "run", fake_run)
    return calls


def test_run_passes_the_default_folder_and_reports_an_interrupt_on_stderr(
    config_file, monkeypatch, capsys, tmp_path
):
    """``run CONFIG --preset smoke``: the run gets the folder ``runs/<file stem>-<preset>`` and the options;
    a :class:`RunInterrupted` by SIGTERM exits 128 + 15 = 143 with ``meanfield run: <message>`` on stderr and
    nothing on stdout. Negative control: without a preset the folder has no ``-<preset>`` suffix."""
    monkeypatch.chdir(tmp_path)
    calls = _record_run(monkeypatch)
    assert cli.main(["run", str(config_file), "--preset", "smoke", "--set", "a=1", "--quiet"]) == 0
    assert calls[-1] == (
        str(config_file),
        "runs/mini_cfg-smoke",
        {"preset": "smoke", "overrides": ["a=1"], "resume": False, "quiet": True},
    )
    assert cli.main(["run", str(config_file)]) == 0
    assert calls[-1][1] == "runs/mini_cfg"
    calls = _record_run(
        monkeypatch, raises=meanfield.runs.RunInterrupted("stopped by SIGTERM", signal.SIGTERM)
    )
    capsys.readouterr()
    assert cli.main(["run", str(config_file), "--out", str(tmp_path / "r")]) == 143
    captured = capsys.readouterr()
    assert captured.err == "meanfield run: stopped by SIGTERM\n"
    assert captured.out == ""


class _Table:
    failed: list = []


def _record_sweep(monkeypatch):
    calls = []

    def fake_sweep_runs(config, grid, seeds, out, **kwargs):
        calls.append({"config": config, "grid": grid, "seeds": seeds, "out": out, **kwargs})
        return _Table()

    monkeypatch.setattr(meanfield.runs.sweeps, "sweep_runs", fake_sweep_runs)
    return calls


def test_sweep_passes_grid_seeds_folder_metrics_and_table_options(config_file, monkeypatch, tmp_path):
    """``sweep CONFIG --grid … --seeds 3,5 --metric test_mse --detect 0.5 --log-scale test_mse --holm metric
    --power 0.9``: what reaches ``sweep_runs``, against the hand-parsed values (grid ``{"train.steps":
    [1, 2]}``, seeds ``[3, 5]``, folder ``runs/sweep-mini_cfg`` without a preset suffix, the metric list, the
    :class:`TableOptions` of the flags). Negative control: with ``--preset smoke`` the folder gets the
    ``-smoke`` suffix, and with no ``--metric`` the metrics are ``None`` (all)."""
    monkeypatch.chdir(tmp_path)
    calls = _record_sweep(monkeypatch)
    argv = ["sweep", str(config_file), "--grid", "train.steps=1,2", "--seeds", "3,5", "--metric", "test_mse"]
    argv += ["--detect", "0.5", "--log-scale", "test_mse", "--holm", "metric", "--power", "0.9"]
    assert cli.main(argv) == 0
    got = calls[-1]
    assert got["config"] == str(config_file)
    assert got["grid"] == {"train.steps": [1, 2]}
    assert got["seeds"] == [3, 5]
    assert got["out"] == "runs/sweep-mini_cfg"
    assert got["metrics"] == ["test_mse"]
    assert got["table"] == TableOptions(power=0.9, detect=(0.5,), log_metrics=("test_mse",), holm="metric")
    assert (got["preset"], got["jobs"], got["backend"], got["baseline"]) == (None, 1, "local", None)
    assert cli.main(["sweep", str(config_file), "--grid", "train.steps=1", "--preset", "smoke"]) == 0
    assert calls[-1]["out"] == "runs/sweep-mini_cfg-smoke"
    assert calls[-1]["metrics"] is None
    assert calls[-1]["seeds"] == [0]
    assert calls[-1]["table"] == TableOptions()


# ----------------------------------------------------------------------------------------------------------
# validation: the rendered tables, run_check, validate, run_as_script
# ----------------------------------------------------------------------------------------------------------


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


def _check(folder, name, reference=1.0, extra="pass", plot=PLOT_OK):
    """A check that measures 1.0 against ``reference`` and keeps its preset (``tests/_check_files.py``)."""
    return write_check(
        folder, name, reference=reference, extra=extra, claim="the preset is passed on", plot=plot
    )


def test_run_check_passes_the_preset_and_keeps_the_claim_of_a_failing_check(tmp_path):
    """:func:`run_check`: the check's ``run`` receives the preset given (``"full"``, seen in its data) and
    the result is stamped with it; a check whose ``run`` raises becomes an error result that keeps the
    check's CLAIM; one that deleted its CLAIM before raising gets an empty claim. Negative control: the
    raising check does not pass and its error names the exception."""
    result, module = run_check("good", _check(tmp_path, "good"), "full")
    assert result.data == {"preset_seen": "full"} and result.preset == "full" and result.passed
    assert module.CLAIM == "the preset is passed on"
    raising = _check(tmp_path, "raising", extra="raise RuntimeError('boom')")
    result, _ = run_check("raising", raising, "fast")
    assert result.claim == "the preset is passed on" and result.preset == "fast"
    assert not result.passed and "RuntimeError: boom" in result.error
    vanishing = _check(tmp_path, "vanishing", extra="del globals()['CLAIM']\n    raise RuntimeError('x')")
    result, _ = run_check("vanishing", vanishing, "fast")
    assert result.claim == "" and "RuntimeError: x" in result.error


def test_validate_progress_bar_report_line_and_plot_failure(tmp_path, capsys):
    """:func:`validate`: with ``progress=True`` the bar ``validate: 100%… 1/1`` goes to stderr and with
    ``progress=False`` nothing does; ``echo`` receives the summary and ``report: <absolute report.md>``; a
    check whose ``plot`` raises fails with an error starting ``plot failed:``. Negative control: the
    plot-failing check is not reported as passed, and ``report.md`` names it FAIL."""
    theory = tmp_path / "theory"
    theory.mkdir()
    _check(theory, "good")
    _check(theory, "noplot", plot="raise ValueError('no plot')")
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
    _check(theory, "good", plot="raise ValueError('skip the figure')")
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
    good = _check(tmp_path, "good_script")
    bad = _check(tmp_path, "bad_script", reference=2.0)
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


# ----------------------------------------------------------------------------------------------------------
# config: messages, int/float coercion, TOML writing
# ----------------------------------------------------------------------------------------------------------


@dataclass
class _Checked:
    kind: Literal["sgd", "adam"] = "sgd"
    level: Literal[1, 2] = 1
    count: int | None = None
    rate: float = 0.5
    sizes: list[int] | None = None

    def __post_init__(self) -> None:
        if self.rate < 0:
            raise ValueError("rate must be >= 0")


def test_from_dict_keeps_ints_where_an_int_is_allowed_and_floats_elsewhere():
    """``int | None`` and ``Literal[1, 2]`` fields keep an integer as ``int``; a ``float`` field stores
    ``2`` as ``2.0`` (type checked, not just value). Negative control: ``sizes=3`` (not a list) and
    ``sizes=[1, "a"]`` are refused."""
    out = from_dict(_Checked, {"count": 3, "level": 2, "rate": 2, "sizes": [4]})
    assert (type(out.count), out.count) == (int, 3)
    assert (type(out.level), out.level) == (int, 2)
    assert (type(out.rate), out.rate) == (float, 2.0)
    assert out.sizes == [4]
    with pytest.raises(
        ConfigError, match=r"^sizes must be a list of an integer or nothing \(omit the key\), got 3$"
    ):
        from_dict(_Checked, {"sizes": 3})
    with pytest.raises(ConfigError, match="sizes must be"):
        from_dict(_Checked, {"sizes": [1, "a"]})


@pytest.mark.parametrize(
    ("table", "where", "message"),
    [
        ({"kind": "rmsprop"}, "", "kind must be one of 'sgd', 'adam', got 'rmsprop'"),
        ({"level": 3}, "optim", "optim.level must be one of 1, 2, got 3"),
        ({"rate": -1.0}, "", "configuration: rate must be >= 0"),
        ({"rate": -1.0}, "optim", "optim: rate must be >= 0"),
        (3, "", "the configuration must be a table, got 3"),
        ([1], "optim", "optim must be a table, got [1]"),
    ],
    ids=[
        "literal-str",
        "literal-int",
        "post-init-top",
        "post-init-where",
        "not-a-table-top",
        "not-a-table-where",
    ],
)
def test_from_dict_messages_name_the_key_the_value_and_the_choices(table, where, message):
    """The exact :class:`ConfigError` messages (a Literal's allowed values listed by repr, a dataclass's own
    check prefixed by where it is, a non-table named). Negative control: the accepted table ``{"kind":
    "adam"}`` raises nothing."""
    with pytest.raises(ConfigError) as info:
        from_dict(_Checked, table, where)
    assert str(info.value) == message
    assert from_dict(_Checked, {"kind": "adam"}).kind == "adam"


def test_set_key_and_resolve_messages_and_new_tables():
    """:func:`set_key` creates missing tables (``{"new": {"key": 1}}``) and refuses to go through a value,
    naming the full dotted path and the dotted prefix that is a value; an unknown preset suggests the
    nearest; bad TOML text is named. Negative control: setting through a table works."""
    config = {"a": {"b": 1}}
    set_key(config, ["new", "key"], 1)
    set_key(config, ["a", "c"], 2)
    assert config == {"a": {"b": 1, "c": 2}, "new": {"key": 1}}
    with pytest.raises(ConfigError) as info:
        set_key(config, ["a", "b", "c"], 3)
    assert str(info.value) == "cannot set a.b.c: a.b is a value, not a table"
    with pytest.raises(ConfigError) as info:
        resolve({"presets": {"smoke": {}}}, "smok")
    assert str(info.value) == "unknown preset 'smok'; this file defines ['smoke']; did you mean 'smoke'?"
    assert resolve({"x": 1}, None, ["y.z=2"]) == {"x": 1, "y": {"z": 2}}
    with pytest.raises(ConfigError, match=r"^not valid TOML: "):
        load_toml_text("x = ")


def test_to_toml_writes_booleans_infinities_and_empty_tables():
    """:func:`to_toml` against hand-written TOML: ``false``/``true``, ``inf``/``-inf``/``nan``, a float's
    repr, an empty table as its own header, a table holding only tables written without a header of its
    own; tomllib reads each back. Negative control: a ``None`` value is left out."""
    text = to_toml({"f": False, "t": True, "hi": float("inf"), "lo": float("-inf"), "x": 0.1, "none": None})
    assert text == "f = false\nt = true\nhi = inf\nlo = -inf\nx = 0.1\n"
    assert tomllib.loads(text) == {"f": False, "t": True, "hi": float("inf"), "lo": float("-inf"), "x": 0.1}
    assert to_toml({"x": float("nan")}) == "x = nan\n"
    assert to_toml({"e": {}}) == "[e]\n"
    assert tomllib.loads(to_toml({"e": {}})) == {"e": {}}
    assert to_toml({"a": {"b": {"x": 1}}}) == "[a.b]\nx = 1\n"


# ----------------------------------------------------------------------------------------------------------
# tasks.get_task
# ----------------------------------------------------------------------------------------------------------


class _UserTask:
    Data = dict
    Model = dict

    @staticmethod
    def build(*args, **kwargs):
        return None


class _NoBuild:
    Data = dict
    Model = dict


@pytest.fixture
def user_module(monkeypatch):
    module = types.ModuleType("h_cli_user_tasks")
    module.task = _UserTask
    module.no_build = _NoBuild
    setattr(module, "odd:name", _UserTask)  # an attribute name with a colon: only the first ':' splits
    monkeypatch.setitem(sys.modules, "h_cli_user_tasks", module)
    return module


def test_get_task_finds_builtin_and_user_tasks(user_module):
    """A built-in name gives :data:`TASKS`'s object; ``"module:attribute"`` gives the attribute (split at the
    first colon: ``"h_cli_user_tasks:odd:name"`` is the attribute ``odd:name``). Negative control: the
    names of other tasks give other objects."""
    assert tasks.get_task("teacher_student") is tasks.TEACHER_STUDENT
    assert tasks.get_task("lm") is tasks.LM and tasks.get_task("lm") is not tasks.TEACHER_STUDENT
    assert tasks.get_task("h_cli_user_tasks:task") is _UserTask
    assert tasks.get_task("h_cli_user_tasks:odd:name") is _UserTask


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (3, "task must be a string, got 3"),
        (
            "nope",
            "unknown task 'nope'; the built-in tasks are ['image_classification', 'lm', 'mean_field', "
            "'seq_classify', 'teacher_student'], or 'module:attribute'",
        ),
        (
            "h_cli_user_tasks:missing",
            "task 'h_cli_user_tasks:missing' cannot be imported: module 'h_cli_user_tasks' has no attribute "
            "'missing'",
        ),
        (
            "h_cli_user_tasks:no_build",
            "task 'h_cli_user_tasks:no_build' has no 'build': a task defines Data, Model and build",
        ),
    ],
    ids=["not-a-string", "unknown-name", "missing-attribute", "no-build"],
)
def test_get_task_errors_say_what_is_wrong(user_module, name, message):
    """The exact :class:`ConfigError` of each bad task name. Negative control: ``h_cli_user_tasks:task``
    (a complete task) raises nothing."""
    with pytest.raises(ConfigError) as info:
        tasks.get_task(name)
    assert str(info.value) == message
    assert tasks.get_task("h_cli_user_tasks:task") is _UserTask
