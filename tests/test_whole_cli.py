"""The whole ``meanfield`` command line (:mod:`meanfield.cli`) and the run's provenance record
(:mod:`meanfield.runs.environment`), function by function.

Every subcommand runs in-process through ``cli.main(argv)`` with the work it hands on (``run``, ``sweep_runs``,
``validate``, ``generate``, ``catalog``, the solver table, the shipped configurations) replaced by recorders or
fakes written here, so what is checked is the command line itself: what it passes on, the exact text it prints
on stdout and stderr, and its exit status. The parser is compared, action by action, with the documented
interface written out by hand (every option's flags, default, choices, metavar, type and help text).

The environment record is compared with answers computed independently: a dict written by hand with every
source of it (versions, platform, clock, git, hash) faked, SHA-256 digests computed here with :mod:`hashlib`
in the documented order, and the git facts of temporary repositories built with the ``git`` executable in
``tmp_path``. Each test has a negative control: an input that must be told apart from the expected one.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import importlib
import json
import os
import pathlib
import platform
import re
import runpy
import shutil
import signal
import subprocess
import sys
import time
import types
import warnings
from importlib import metadata
from pathlib import Path

import pytest
import torch
from _check_files import CONFIG_TEXT  # tests/_check_files.py

import meanfield
import meanfield.data
import meanfield.runs
import meanfield.runs.sweeps
import meanfield.shipped
import meanfield.stepping.solvers
import meanfield.studies.validation
from meanfield import cli
from meanfield.config import ConfigError
from meanfield.data import CorruptDataError, DataNotFoundError
from meanfield.runs import DiskFullError, NonFiniteLossError, RunFolderError, RunInterrupted
from meanfield.runs.schema import RunConfig
from meanfield.runs.sweeps import TableOptions
from meanfield.studies.validation import InputError, NoTheoryFolder

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

env_mod = importlib.import_module("meanfield.runs.environment")  # meanfield.runs.environment is the function

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

# ==========================================================================================================
# the parser, action by action
# ==========================================================================================================

STORE, TRUE, APPEND = "_StoreAction", "_StoreTrueAction", "_AppendAction"

PRESET_HELP = "a preset of the file: smoke, quick, full, …"
SET_HELP = "override a key after the preset (repeatable), e.g. --set train.steps=100"
CONFIG_HELP = (
    "a shipped configuration by name (char_lm, teacher_student, …: meanfield run --list) or a TOML file"
)
QUIET_HELP = "no progress bar, no summary table"

# (flags, dest, kind, default, choices, metavar, nargs, type, help), in the order --help lists them
CONFIG_OPTIONS = [
    ((), "config", STORE, None, None, None, "?", None, CONFIG_HELP),
    (("--preset",), "preset", STORE, None, None, None, None, None, PRESET_HELP),
    (("--set",), "set", APPEND, [], None, "KEY=VALUE", None, None, SET_HELP),
    (("--quiet",), "quiet", TRUE, False, None, None, 0, None, QUIET_HELP),
]

PARSER_SPEC = {
    "validate": [
        ((), "checks", STORE, None, None, None, "*", None, "check names (default: all)"),
        (
            ("--preset",),
            "preset",
            STORE,
            "fast",
            ("fast", "full"),
            None,
            None,
            None,
            "fast: minutes (CI); full: paper figures",
        ),
        (
            ("--out",),
            "out",
            STORE,
            "validate-out",
            None,
            None,
            None,
            None,
            "output folder (default: validate-out)",
        ),
        (
            ("--theory",),
            "theory",
            STORE,
            None,
            None,
            None,
            None,
            None,
            "folder of the checks (default: those installed with the package, a checkout's theory/)",
        ),
        (
            ("--resume",),
            "resume",
            TRUE,
            False,
            None,
            None,
            0,
            None,
            "reuse the finished results already in --out (after an interruption)",
        ),
    ],
    "figures": [
        (
            ("--out",),
            "out",
            STORE,
            "docs/figures",
            None,
            None,
            None,
            None,
            "output folder (default: docs/figures)",
        ),
        (("--preset",), "preset", STORE, "fast", ("fast", "full"), None, None, None, None),
        (("--force",), "force", TRUE, False, None, None, 0, None, "regenerate figures that already exist"),
    ],
    "solvers": [],
    "run": [
        *CONFIG_OPTIONS,
        (
            ("--out",),
            "out",
            STORE,
            None,
            None,
            None,
            None,
            None,
            "the run folder (default: runs/<name or file stem>[-<preset>])",
        ),
        (
            ("--resume",),
            "resume",
            TRUE,
            False,
            None,
            None,
            0,
            None,
            "continue from the folder's latest checkpoint",
        ),
        (
            ("--list",),
            "list",
            TRUE,
            False,
            None,
            None,
            0,
            None,
            "list the shipped configurations, their presets and descriptions",
        ),
        (
            ("--print-config",),
            "print_config",
            TRUE,
            False,
            None,
            None,
            0,
            None,
            "print the configuration file and exit (to start your own: > my.toml); with --preset/--set, "
            "the resolved configuration",
        ),
    ],
    "sweep": [
        *CONFIG_OPTIONS,
        (
            ("--grid",),
            "grid",
            APPEND,
            [],
            None,
            "KEY=V1,V2",
            None,
            None,
            "a grid axis (repeatable); the sweep is the product of the axes",
        ),
        (("--seeds",), "seeds", STORE, "0", None, None, None, None, "comma-separated seeds (default: 0)"),
        (("--jobs",), "jobs", STORE, 1, None, None, None, int, "points run at once, in separate processes"),
        (
            ("--order",),
            "order",
            STORE,
            "grid",
            ("grid", "seed"),
            None,
            None,
            None,
            "which points start first: each grid point's seeds in turn (default), or every grid point of a seed "
            "before the next seed's (a study cut short holds whole seeds; one pool keeps --jobs busy across seeds)",
        ),
        (
            ("--backend",),
            "backend",
            STORE,
            "local",
            ("local", "ray"),
            None,
            None,
            None,
            "where the points run: local processes (--jobs) or Ray tasks (pip install 'meanfield-sde[ray]')",
        ),
        (
            ("--address",),
            "address",
            STORE,
            None,
            None,
            None,
            None,
            None,
            "the Ray cluster's address (default: start a local one)",
        ),
        (
            ("--out",),
            "out",
            STORE,
            None,
            None,
            None,
            None,
            None,
            "the sweep folder (default: runs/sweep-<config>[-<preset>])",
        ),
        (
            ("--baseline",),
            "baseline",
            STORE,
            None,
            None,
            "KEY=V",
            None,
            None,
            "the grid point compared with, seed by seed",
        ),
        (
            ("--metric",),
            "metric",
            APPEND,
            [],
            None,
            None,
            None,
            None,
            "a final metric to summarise (repeatable; default all)",
        ),
        (
            ("--detect",),
            "detect",
            APPEND,
            [],
            None,
            "D",
            None,
            float,
            "a difference to plan for (repeatable): adds 'pairs for Δ = D', the seeds a paired comparison "
            "needs to detect |Δ| = D at --power, at its observed paired sd (ln units for a --log-scale metric)",
        ),
        (
            ("--power",),
            "power",
            STORE,
            0.8,
            None,
            None,
            None,
            float,
            "the power of the 'detectable' column and of --detect (default: 0.8; α = 0.05)",
        ),
        (
            ("--log-scale",),
            "log_scale",
            APPEND,
            [],
            None,
            "METRIC",
            None,
            None,
            "a positive metric (an MSE) summarised on the log scale: geometric mean, t interval of the logs, "
            "paired ratios (repeatable)",
        ),
        (
            ("--table-only",),
            "table_only",
            TRUE,
            False,
            None,
            None,
            0,
            None,
            "write the tables of the grid × seeds from the points already finished in --out and run nothing "
            "(a folder filled by several commands gets its whole table; unfinished points are listed as 'not run')",
        ),
        (
            ("--holm",),
            "holm",
            STORE,
            "table",
            ("table", "metric"),
            None,
            None,
            None,
            "the family of Holm's correction: every paired test of the table (default) or each metric's",
        ),
    ],
    "data": [
        (
            ("--root",),
            "root",
            STORE,
            None,
            None,
            None,
            None,
            None,
            "the data folder (default: $MEANFIELD_DATA or the project's)",
        ),
    ],
}

DESCRIPTIONS = {
    "validate": "Run the theory checks in theory/, print a pass/fail table, write report.md, results.json "
    "and one PNG per check; exit 1 if any check fails.",
    "figures": None,
    "solvers": None,
    "run": "Train the task of CONFIG (a shipped name, see --list, or a TOML file) into a run folder: "
    "config.toml, environment.json, metrics.jsonl, summary.json, figures/, checkpoints/. Ctrl-C writes a "
    "checkpoint (exit 130); a non-finite loss stops the run (exit 1); a bad configuration is one line (exit 2).",
    "sweep": "One run folder per (grid point, seed) under --out; finished points are skipped and unfinished "
    "ones resume, so an interrupted sweep continues when the command is run again. Writes runs.csv, "
    "summary.csv and summary.md (mean and 95 % t interval over seeds; paired difference against --baseline "
    "with its 95 % t interval, the paired t-test's raw and Holm-adjusted p-values and the smallest difference "
    "detectable at --power). Run it again with other table options to rewrite the tables of a finished sweep "
    "without running anything.",
    "data": None,
}


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action


def _spec(action: argparse.Action) -> tuple:
    choices = None if action.choices is None else tuple(action.choices)
    return (
        tuple(action.option_strings),
        action.dest,
        type(action).__name__,
        action.default,
        choices,
        action.metavar,
        action.nargs,
        action.type,
        action.help,
    )


def _version_in_source() -> str:
    text = (Path(meanfield.__file__).parent / "__init__.py").read_text(encoding="utf-8")
    return re.search(r'^__version__ = "([^"]+)"$', text, re.M).group(1)


def test_top_level_parser_prog_description_version_and_subcommand_slot():
    """The top-level parser: prog ``meanfield``, its one-sentence description, ``--version`` printing
    ``meanfield <__version__>`` (read here from ``meanfield/__init__.py``'s text) and exiting 0, the
    subcommands stored in ``command`` with metavar ``COMMAND``, in the documented order. Negative control:
    the version line is not just the number."""
    parser = cli.build_parser()
    assert parser.prog == "meanfield"
    assert parser.description == "Mean-field Langevin dynamics: training as an interacting-particle SDE."
    sub = _subparsers(parser)
    assert (sub.dest, sub.metavar) == ("command", "COMMAND")
    assert list(sub.choices) == ["validate", "figures", "solvers", "run", "sweep", "data"]
    (version,) = [a for a in parser._actions if a.option_strings == ["--version"]]
    assert version.version == f"meanfield {_version_in_source()}"
    assert cli._version() == _version_in_source()
    assert version.version != _version_in_source()


def test_version_flag_prints_the_version_line_and_exits_0(capsys):
    """``meanfield --version``: stdout is ``meanfield <version>\\n`` exactly and SystemExit(0), nothing on
    stderr. Negative control: an unknown flag exits 2 with the usage on stderr."""
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    out = capsys.readouterr()
    assert (out.out, out.err) == (f"meanfield {_version_in_source()}\n", "")
    with pytest.raises(SystemExit) as info:
        cli.main(["--nope"])
    assert info.value.code == 2
    assert capsys.readouterr().err.startswith("usage: meanfield")


@pytest.mark.parametrize("command", list(PARSER_SPEC), ids=list(PARSER_SPEC))
def test_every_option_of_every_subcommand_is_the_documented_one(command):
    """Each subcommand's prog, description and every action (flags, dest, kind, default, choices, metavar,
    nargs, type, help text) against the table written out by hand above, in order: a changed default, a lost
    ``type=float``, a renamed flag or a changed word of a help text fails. Negative control: the table of
    another subcommand is not this one's."""
    sub = _subparsers(cli.build_parser()).choices[command]
    assert sub.prog == f"meanfield {command}"
    assert sub.description == DESCRIPTIONS[command]
    got = [_spec(a) for a in sub._actions if a.dest != "help"]
    assert got == PARSER_SPEC[command]
    others = [spec for name, spec in PARSER_SPEC.items() if name != command and spec]
    assert all(got != spec for spec in others)


def test_the_parsed_defaults_of_each_subcommand():
    """``parse_args([command])`` for every subcommand gives exactly the documented defaults (the dict
    written here, plus ``command``); the ``--set``/``--grid`` lists of two parses are not one shared list
    (appending to one leaves the other empty). Negative control: a given value replaces its default."""
    parser = cli.build_parser()
    expected = {
        "validate": {"checks": [], "preset": "fast", "out": "validate-out", "theory": None, "resume": False},
        "figures": {"out": "docs/figures", "preset": "fast", "force": False},
        "solvers": {},
        "run": {
            "config": None,
            "preset": None,
            "set": [],
            "quiet": False,
            "out": None,
            "resume": False,
            "list": False,
            "print_config": False,
        },
        "sweep": {
            "config": None,
            "preset": None,
            "set": [],
            "quiet": False,
            "grid": [],
            "seeds": "0",
            "jobs": 1,
            "order": "grid",
            "backend": "local",
            "address": None,
            "out": None,
            "baseline": None,
            "metric": [],
            "detect": [],
            "power": 0.8,
            "log_scale": [],
            "table_only": False,
            "holm": "table",
        },
        "data": {"root": None},
    }
    for command, defaults in expected.items():
        got = vars(parser.parse_args([command]))
        func = got.pop("func")
        assert func is getattr(cli, f"_{command}")
        assert got == {"command": command, **defaults}
    first = parser.parse_args(["sweep", "--set", "a=1", "--grid", "b=1,2"])
    second = parser.parse_args(["sweep"])
    assert (first.set, first.grid, second.set, second.grid) == (["a=1"], ["b=1,2"], [], [])
    assert parser.parse_args(["sweep", "--seeds", "1,2", "--jobs", "4"]).seeds == "1,2"


# ==========================================================================================================
# main: no command, argv from sys.argv, the __main__ block
# ==========================================================================================================


def test_main_without_a_command_prints_the_help_and_returns_0(capsys):
    """``meanfield`` alone: the top-level help on stdout (the text argparse formats for the same parser,
    starting ``usage: meanfield``), nothing on stderr, return 0. Negative control: it is not a subcommand's
    help."""
    assert cli.main([]) == 0
    out = capsys.readouterr()
    assert out.out == cli.build_parser().format_help()
    assert out.out.startswith("usage: meanfield [-h] [--version] [--debug] COMMAND ...")
    assert out.err == ""
    assert "meanfield run" not in out.out.splitlines()[0]


def test_main_with_no_argv_reads_sys_argv(monkeypatch, capsys):
    """``main()`` parses ``sys.argv[1:]``: with ``sys.argv = ["meanfield", "data", "--root", "R"]`` the data
    command runs with root ``R`` (catalog faked). Negative control: ``sys.argv[0]`` is not read as the
    command (it would be refused)."""
    roots = []
    monkeypatch.setattr(meanfield.data, "catalog", lambda root: roots.append(root) or [])
    monkeypatch.setattr(meanfield.data, "format_catalog", lambda infos: "table")
    monkeypatch.setattr(sys, "argv", ["meanfield", "data", "--root", "R"])
    assert cli.main() == 0
    assert roots == ["R"]
    assert capsys.readouterr().out == "table\n"


def _run_module(run_name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "found in sys.modules": it is already imported
        runpy.run_module("meanfield.cli", run_name=run_name, alter_sys=False)


def test_module_run_as_a_script_exits_with_mains_status(monkeypatch, capsys):
    """``python -m meanfield.cli solvers`` (the ``__main__`` block, run here with runpy): SystemExit with
    status 0 and the solver table's header on stdout; ``... data`` whose catalog raises a
    :class:`DataNotFoundError` exits 2. Imported under another name it runs nothing (negative control)."""
    monkeypatch.setattr(sys, "argv", ["meanfield", "solvers"])
    with pytest.raises(SystemExit) as info:
        _run_module("__main__")
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("solver  ")

    def missing(root):
        raise DataNotFoundError("no data here")

    monkeypatch.setattr(meanfield.data, "catalog", missing)
    monkeypatch.setattr(sys, "argv", ["meanfield", "data"])
    with pytest.raises(SystemExit) as info:
        _run_module("__main__")
    assert info.value.code == 2
    assert capsys.readouterr().err == "meanfield data: error: no data here\n"
    _run_module("meanfield_cli_imported")
    assert capsys.readouterr() == ("", "")


def test_importing_the_cli_sets_omp_wait_policy_only_when_unset(monkeypatch):
    """The module's first statement: ``OMP_WAIT_POLICY`` becomes ``PASSIVE`` when the environment has none,
    and a value the user set (``ACTIVE``) is kept (negative control)."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    _run_module("meanfield_cli_imported")
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    _run_module("meanfield_cli_imported")
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


# ==========================================================================================================
# solvers
# ==========================================================================================================


class _FakeSolver:
    def __init__(self, orders):
        self.orders = orders
        self.asked = []

    def strong_order(self, noise):
        self.asked.append(("strong", noise))
        return self.orders[noise][0]

    def weak_order(self, noise):
        self.asked.append(("weak", noise))
        return self.orders[noise][1]


def test_solvers_table_is_rendered_from_each_solvers_orders(monkeypatch, capsys):
    """``meanfield solvers`` over two fake solvers: the exact lines written out by hand (16-character
    columns, the name left-aligned, ``strong / weak`` right-aligned in ``%g``, ``—`` where the strong order is
    None, whatever the weak order), each solver made once and asked about the three noise types in order.
    Negative control: a solver whose weak order alone is None still shows its strong order."""
    one = _FakeSolver({"additive": (1.0, 2.0), "diagonal": (0.5, 1.0), "general": (None, 1.0)})
    two = _FakeSolver({"additive": (1.5, 1.25), "diagonal": (None, None), "general": (2.0, 3.0)})
    made = []

    def factory(solver, name):
        return lambda: made.append(name) or solver

    monkeypatch.setattr(
        meanfield.stepping.solvers, "SOLVERS", {"one": factory(one, "one"), "two_x": factory(two, "two")}
    )
    assert cli.main(["solvers"]) == 0
    out = capsys.readouterr()
    assert out.out == (
        "solver                   additive         diagonal          general   (strong / weak order)\n"
        "one                         1 / 2          0.5 / 1                —\n"
        "two_x                  1.5 / 1.25                —            2 / 3\n"
    )
    assert out.err == ""
    assert made == ["one", "two"]
    both = [(kind, noise) for noise in ("additive", "diagonal", "general") for kind in ("strong", "weak")]
    assert one.asked == both and two.asked == both


# ==========================================================================================================
# validate and figures
# ==========================================================================================================


def _record_validate(monkeypatch, passed):
    calls = []

    def fake_validate(checks, **kwargs):
        calls.append((checks, kwargs))
        return types.SimpleNamespace(passed=passed)

    monkeypatch.setattr(meanfield.studies.validation, "validate", fake_validate)
    return calls


def test_validate_passes_checks_preset_folder_theory_and_resume_and_exits_by_the_verdict(monkeypatch):
    """``meanfield validate``: no check names → ``None`` (all), with the defaults ``preset="fast"``,
    ``out="validate-out"``, ``theory_dir=None``, ``resume=False``; named checks, ``--preset full``, ``--out``,
    ``--theory`` and ``--resume`` reach :func:`validate` as given. A report that passed exits 0, one that did
    not exits 1 (the negative control)."""
    calls = _record_validate(monkeypatch, passed=True)
    assert cli.main(["validate"]) == 0
    assert calls[-1] == (None, {"preset": "fast", "out": "validate-out", "theory_dir": None, "resume": False})
    argv = ["validate", "a", "b", "--preset", "full", "--out", "O", "--theory", "T", "--resume"]
    assert cli.main(argv) == 0
    assert calls[-1] == (["a", "b"], {"preset": "full", "out": "O", "theory_dir": "T", "resume": True})
    calls = _record_validate(monkeypatch, passed=False)
    assert cli.main(["validate"]) == 1
    assert len(calls) == 1


def test_validate_input_error_is_one_line_with_status_2(monkeypatch, capsys):
    """An :class:`InputError` (here its subclass :class:`NoTheoryFolder`) from :func:`validate`:
    ``meanfield validate: error: <message>`` on stderr, status 2, nothing on stdout."""

    def fake_validate(checks, **kwargs):
        raise NoTheoryFolder("no theory/ folder at T")

    monkeypatch.setattr(meanfield.studies.validation, "validate", fake_validate)
    assert cli.main(["validate", "--theory", "T"]) == 2
    assert capsys.readouterr() == ("", "meanfield validate: error: no theory/ folder at T\n")


def test_figures_passes_folder_preset_and_keep_existing_and_counts_what_it_wrote(monkeypatch, capsys):
    """``meanfield figures`` with :func:`meanfield.studies.figures.generate` replaced by a fake module: the defaults
    ``docs/figures``, ``fast`` and ``keep_existing=True``; ``--force`` → ``keep_existing=False``; the line
    ``<n> figures in <out>`` with the number of paths returned. Negative control: without ``--force`` existing
    figures are kept."""
    calls = []

    def generate(out, *, preset, keep_existing):
        calls.append((out, preset, keep_existing))
        return ["a.png", "b.png", "c.png"][: len(calls)]

    monkeypatch.setitem(sys.modules, "meanfield.studies.figures", types.SimpleNamespace(generate=generate))
    assert cli.main(["figures"]) == 0
    assert cli.main(["figures", "--out", "F", "--preset", "full", "--force"]) == 0
    assert calls == [("docs/figures", "fast", True), ("F", "full", False)]
    assert capsys.readouterr() == ("1 figures in docs/figures\n2 figures in F\n", "")


# ==========================================================================================================
# data, and main's handling of user errors and a closed pipe
# ==========================================================================================================


def test_data_prints_the_formatted_catalog_of_the_root(monkeypatch, capsys):
    """``meanfield data``: :func:`catalog` of ``--root`` (default None) handed to :func:`format_catalog`, whose
    text is printed with one newline. Negative control: the root given is not replaced by the default."""
    seen = []
    monkeypatch.setattr(meanfield.data, "catalog", lambda root: [f"info of {root}"])
    monkeypatch.setattr(
        meanfield.data, "format_catalog", lambda infos: seen.append(infos) or "line 1\nline 2"
    )
    assert cli.main(["data"]) == 0
    assert cli.main(["data", "--root", "/d"]) == 0
    assert seen == [["info of None"], ["info of /d"]]
    assert capsys.readouterr() == ("line 1\nline 2\nline 1\nline 2\n", "")


@pytest.mark.parametrize(
    "error",
    [
        InputError("bad input"),
        ConfigError("bad key"),
        DataNotFoundError("no data"),
        CorruptDataError("truncated file"),
        RunFolderError("another run's folder"),
    ],
    ids=["input", "config", "not_found", "corrupt", "run_folder"],
)
def test_each_user_error_is_one_line_naming_the_command_with_status_2(error, monkeypatch, capsys):
    """Each of the five user-error classes raised inside a subcommand: ``meanfield <command>: error:
    <message>`` on stderr (one line), nothing on stdout, status 2."""

    def fail(root):
        raise error

    monkeypatch.setattr(meanfield.data, "catalog", fail)
    assert cli.main(["data"]) == 2
    assert capsys.readouterr() == ("", f"meanfield data: error: {error}\n")
    assert cli._user_errors() == (
        InputError,
        ConfigError,
        DataNotFoundError,
        CorruptDataError,
        RunFolderError,
    )


@pytest.mark.parametrize(
    "error",
    [ValueError("a bug"), FileNotFoundError("a bug"), RuntimeError("a bug"), OSError("a bug")],
    ids=["value", "file_not_found", "runtime", "os"],
)
def test_other_errors_keep_their_traceback(error, monkeypatch, capsys):
    """An error that is not the user's (including the base classes of the user errors, ValueError and
    FileNotFoundError) propagates out of ``main`` unchanged, with nothing printed: bugs keep tracebacks."""

    def fail(root):
        raise error

    monkeypatch.setattr(meanfield.data, "catalog", fail)
    with pytest.raises(type(error), match="^a bug$") as info:
        cli.main(["data"])
    assert info.value is error
    assert capsys.readouterr() == ("", "")


def test_a_closed_pipe_ends_quietly_with_status_0_and_stdout_on_devnull(monkeypatch, tmp_path):
    """A :class:`BrokenPipeError` (``meanfield data | head`` after the reader left): ``main`` returns 0, and
    the file descriptor of ``sys.stdout`` now writes to ``/dev/null`` (a byte written to it afterwards does
    not reach the file it pointed to before). Negative control: before the error the same write reaches the
    file."""
    target = tmp_path / "stdout.txt"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        os.write(fd, b"a")
        assert target.read_bytes() == b"a"
        monkeypatch.setattr(sys, "stdout", types.SimpleNamespace(fileno=lambda: fd))
        monkeypatch.setattr(meanfield.data, "catalog", lambda root: [])

        def closed(infos):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

        monkeypatch.setattr(meanfield.data, "format_catalog", closed)
        assert cli.main(["data"]) == 0
        os.write(fd, b"b")
        assert target.read_bytes() == b"a"
        assert os.path.samestat(os.fstat(fd), os.stat(os.devnull))
    finally:
        os.close(fd)


# ==========================================================================================================
# run: the configuration argument, --list, --print-config, the folder, the errors
# ==========================================================================================================


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "my.cfg.toml"
    path.write_text(CONFIG_TEXT, encoding="utf-8")
    return path


def _record_run(monkeypatch, raises=None):
    calls = []

    def fake_run(config, out, **kwargs):
        calls.append((config, out, kwargs))
        if raises is not None:
            raise raises

    monkeypatch.setattr(meanfield.runs, "run", fake_run)
    return calls


def _shipped(monkeypatch, path: Path, name: str):
    asked = []

    def find_config(arg):
        asked.append(arg)
        return path, name

    monkeypatch.setattr(meanfield.shipped, "find_config", find_config)
    return asked


def test_config_arg_stems_a_file_by_its_name_and_a_shipped_name_by_its_path(config_file, monkeypatch):
    """``_config_arg``: a TOML file → ``(str(path), stem)`` with only the last suffix removed
    (``my.cfg.toml`` → ``my.cfg``); a shipped name ``particle_attention/toy`` → its file and the stem
    ``particle_attention-toy`` (``/`` as ``-``). No configuration is an :class:`InputError` with the
    documented message. Negative control: the shipped stem is not the file's stem ``toy``."""
    args = argparse.Namespace(config=str(config_file))
    assert cli._config_arg(args) == (str(config_file), "my.cfg")
    shipped = Path("/somewhere/experiments/particle_attention/toy.toml")
    asked = _shipped(monkeypatch, shipped, "particle_attention/toy")
    assert cli._config_arg(argparse.Namespace(config="particle_attention/toy")) == (
        str(shipped),
        "particle_attention-toy",
    )
    assert asked == ["particle_attention/toy"]
    with pytest.raises(
        InputError,
        match=r"^a configuration is needed: a shipped name \(meanfield run --list\) or a TOML file$",
    ):
        cli._config_arg(argparse.Namespace(config=None))
    assert asked == ["particle_attention/toy"]


def test_run_without_a_configuration_is_one_line_with_status_2(monkeypatch, capsys):
    """``meanfield run`` and ``meanfield sweep`` with no CONFIG: the :class:`InputError` line on stderr,
    status 2, and nothing run. Negative control: with ``--list`` no configuration is needed."""
    calls = _record_run(monkeypatch)
    message = "a configuration is needed: a shipped name (meanfield run --list) or a TOML file"
    assert cli.main(["run"]) == 2
    assert capsys.readouterr() == ("", f"meanfield run: error: {message}\n")
    assert cli.main(["sweep", "--grid", "a=1"]) == 2
    assert capsys.readouterr() == ("", f"meanfield sweep: error: {message}\n")
    assert calls == []
    monkeypatch.setattr(meanfield.shipped, "configs", dict)
    assert cli.main(["run", "--list"]) == 0


def _fake_catalog(monkeypatch, entries: dict[str, tuple[str, list[str]]], where: str = "/exp"):
    monkeypatch.setattr(meanfield.shipped, "configs", lambda: {n: Path(f"{where}/{n}.toml") for n in entries})
    by_path = {Path(f"{where}/{n}.toml"): value for n, value in entries.items()}
    monkeypatch.setattr(meanfield.shipped, "describe", lambda path: by_path[path])
    monkeypatch.setattr(meanfield.shipped, "experiments_dir", lambda: Path(where))


FOOTER = (
    "meanfield run NAME --preset PRESET trains one; meanfield run NAME --print-config > my.toml copies one to "
    "start your own (then: meanfield run my.toml)\n"
)


def test_run_list_of_short_names_pads_to_the_headers(monkeypatch, capsys):
    """``meanfield run --list`` with names and preset lists shorter than their headers: the columns are the
    headers' widths (4 and 7) plus two spaces, the lines written out by hand, then a blank line, the count
    and folder, and the footer. A configuration given with ``--list`` is not looked up. Negative control: no
    training is started."""
    _fake_catalog(monkeypatch, {"ab": ("first one", ["s"]), "c": ("", [])})
    monkeypatch.setattr(meanfield.shipped, "find_config", lambda arg: pytest.fail("looked up"))
    calls = _record_run(monkeypatch)
    assert cli.main(["run", "whatever", "--list"]) == 0
    assert capsys.readouterr() == (
        "name  presets  description\n"
        "ab    s        first one\n"
        "c              \n"
        "\n"
        "2 configurations in /exp\n" + FOOTER,
        "",
    )
    assert calls == []


def test_run_list_of_long_names_pads_to_the_longest(monkeypatch, capsys):
    """``meanfield run --list`` where a name (``particle_attention/toy``, 22 characters) and a preset list
    (``smoke, quick, full``, 18) are longer than the headers: each column as wide as its longest entry, the
    presets joined by ``", "``."""
    _fake_catalog(
        monkeypatch,
        {
            "char_lm": ("a character LM", ["smoke"]),
            "particle_attention/toy": ("toy", ["smoke", "quick", "full"]),
        },
        where="/e",
    )
    assert cli.main(["run", "--list"]) == 0
    assert capsys.readouterr().out == (
        "name                    presets             description\n"
        "char_lm                 smoke               a character LM\n"
        "particle_attention/toy  smoke, quick, full  toy\n"
        "\n"
        "2 configurations in /e\n" + FOOTER
    )


def test_run_list_without_shipped_configurations_says_so(monkeypatch, capsys):
    """No shipped configurations: the one line ``no shipped configurations found`` and status 0 (the folder
    is not asked for)."""
    monkeypatch.setattr(meanfield.shipped, "configs", dict)
    monkeypatch.setattr(meanfield.shipped, "experiments_dir", lambda: pytest.fail("asked for the folder"))
    assert cli.main(["run", "--list"]) == 0
    assert capsys.readouterr() == ("no shipped configurations found\n", "")


def test_print_config_with_a_preset_or_sets_names_them_in_the_header(config_file, monkeypatch, capsys):
    """``--print-config``: with ``--preset smoke`` alone the header says ``--preset smoke`` only, with two
    ``--set`` alone it says both in order and no preset; the body, read back with tomllib, is the hand-resolved
    configuration. A shipped name is named as given, not as its file. No run is started (negative control:
    the recorder stays empty)."""
    calls = _record_run(monkeypatch)
    assert cli.main(["run", str(config_file), "--print-config", "--preset", "smoke"]) == 0
    out = capsys.readouterr().out
    assert (
        out.splitlines()[0] == f"# {config_file} resolved with --preset smoke (meanfield run --print-config)"
    )
    assert tomllib.loads(out) == {"task": "teacher_student", "seed": 1, "train": {"steps": 2, "lr": 0.5}}
    argv = ["run", str(config_file), "--print-config", "--set", "train.lr=0.25", "--set", "seed=3"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (
        f"# {config_file} resolved with --set train.lr=0.25 --set seed=3 (meanfield run --print-config)"
    )
    assert tomllib.loads(out) == {"task": "teacher_student", "seed": 3, "train": {"steps": 10, "lr": 0.25}}
    _shipped(monkeypatch, config_file, "pkg/name")
    assert cli.main(["run", "pkg/name", "--print-config"]) == 0
    assert capsys.readouterr().out == CONFIG_TEXT
    assert cli.main(["run", "pkg/name", "--print-config", "--preset", "smoke"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head == "# pkg/name resolved with --preset smoke (meanfield run --print-config)"
    assert calls == []


def test_run_default_folders_and_the_options_it_passes(config_file, monkeypatch):
    """``meanfield run``: the folder ``runs/<stem>`` for a file (``my.cfg``), ``runs/<stem>-<preset>`` with a
    preset, ``runs/particle_attention-toy-smoke`` for a shipped name; ``--out`` as given; the configuration
    file, preset, overrides, ``resume`` and ``quiet`` passed on (defaults None, [], False, False)."""
    calls = _record_run(monkeypatch)
    assert cli.main(["run", str(config_file)]) == 0
    assert calls[-1] == (
        str(config_file),
        os.path.join("runs", "my.cfg"),
        {"preset": None, "overrides": [], "resume": False, "quiet": False},
    )
    argv = ["run", str(config_file), "--preset", "p", "--set", "a=1", "--set", "b=2", "--resume", "--quiet"]
    assert cli.main(argv) == 0
    assert calls[-1] == (
        str(config_file),
        "runs/my.cfg-p",
        {"preset": "p", "overrides": ["a=1", "b=2"], "resume": True, "quiet": True},
    )
    assert cli.main(["run", str(config_file), "--preset", "p", "--out", "elsewhere"]) == 0
    assert calls[-1][1] == "elsewhere"
    shipped = Path("/x/particle_attention/toy.toml")
    _shipped(monkeypatch, shipped, "particle_attention/toy")
    assert cli.main(["run", "particle_attention/toy", "--preset", "smoke"]) == 0
    assert calls[-1][:2] == (str(shipped), "runs/particle_attention-toy-smoke")
    assert len(calls) == 4


@pytest.mark.parametrize(
    ("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["sigint", "sigterm"]
)
def test_run_interrupted_exits_128_plus_the_signal(signum, status, config_file, monkeypatch, capsys):
    """A :class:`RunInterrupted` by SIGINT/SIGTERM: ``meanfield run: <message>`` on stderr and status
    128 + signum (130, 143)."""
    _record_run(monkeypatch, raises=RunInterrupted("stopped after step 4", signum))
    assert cli.main(["run", str(config_file), "--out", "o"]) == status
    assert capsys.readouterr() == ("", "meanfield run: stopped after step 4\n")


def test_run_second_interrupt_names_the_folder_given_or_the_default_one(config_file, monkeypatch, capsys):
    """A :class:`KeyboardInterrupt` (a second Ctrl-C): status 130 and the message naming ``--out`` when given,
    the default folder ``runs/<config stem>`` when not (it is known: the user can resume from it)."""
    _record_run(monkeypatch, raises=KeyboardInterrupt())
    assert cli.main(["run", str(config_file), "--out", "my/run"]) == 130
    tail = " keeps its last complete checkpoint, --resume continues from it\n"
    assert capsys.readouterr() == ("", "meanfield run: stopped at once by a second interrupt; my/run" + tail)
    assert cli.main(["run", str(config_file)]) == 130
    assert capsys.readouterr() == (
        "",
        f"meanfield run: stopped at once by a second interrupt; {os.path.join('runs', config_file.stem)}"
        + tail,
    )


@pytest.mark.parametrize(
    ("error", "message", "status"),
    [
        (NonFiniteLossError("loss is nan at step 3", 3), "loss is nan at step 3", 1),
        (
            DiskFullError(errno.ENOSPC, "no space left on device writing x"),
            "no space left on device writing x",
            1,
        ),
        (RunFolderError("the folder holds another run"), "the folder holds another run", 2),
        (ConfigError("unknown key 'optim.lrr'"), "unknown key 'optim.lrr'", 2),
    ],
    ids=["non_finite", "disk_full", "run_folder", "config"],
)
def test_run_errors_are_one_line_with_their_status(error, message, status, config_file, monkeypatch, capsys):
    """A non-finite loss and a full disk stop the run with ``meanfield run: error: <message>`` and status 1
    (a :class:`DiskFullError` is a :class:`RunFolderError` but exits 1, not 2); a run-folder or configuration
    error is the same line with status 2."""
    _record_run(monkeypatch, raises=error)
    assert cli.main(["run", str(config_file), "--out", "o"]) == status
    assert capsys.readouterr() == ("", f"meanfield run: error: {message}\n")


# ==========================================================================================================
# sweep
# ==========================================================================================================


def _record_sweep(monkeypatch, failed=(), raises=None):
    calls = []

    def fake_sweep_runs(config, grid, seeds, out, **kwargs):
        calls.append({"config": config, "grid": grid, "seeds": seeds, "out": out, **kwargs})
        if raises is not None:
            raise raises
        return types.SimpleNamespace(failed=list(failed))

    monkeypatch.setattr(meanfield.runs.sweeps, "sweep_runs", fake_sweep_runs)
    return calls


@pytest.mark.parametrize("seeds", ["1,x", "0.5", "1;2"])
def test_sweep_seeds_that_are_not_integers_are_one_line_and_exit_2(seeds, config_file, monkeypatch, capsys):
    """``--seeds 1,x``: exit 2 and the one line that says what is allowed, before any sweep starts (it was a
    traceback of int()'s ValueError). Negative control: ``1,2`` reaches the sweep."""
    calls = _record_sweep(monkeypatch)
    assert cli.main(["sweep", str(config_file), "--grid", "a=1", "--seeds", seeds]) == 2
    assert capsys.readouterr().err == (
        f"meanfield sweep: error: --seeds must be comma-separated integers (0,1,2), got {seeds!r}\n"
    )
    assert calls == []
    assert cli.main(["sweep", str(config_file), "--grid", "a=1", "--seeds", "1,2"]) == 0 and calls


@pytest.mark.parametrize(
    ("seeds", "expected"),
    [("0", [0]), ("3, ,5,", [3, 5]), (" 7 ", [7]), ("", [0]), (" , ", [0]), ("2,1,2", [2, 1, 2])],
    ids=["default", "blanks", "spaces", "empty", "only_blanks", "order_kept"],
)
def test_sweep_seeds_are_the_comma_separated_integers(seeds, expected, config_file, monkeypatch):
    """``--seeds``: comma-separated integers, blank items skipped, spaces allowed, order and repeats kept;
    an empty string means seed 0."""
    calls = _record_sweep(monkeypatch)
    assert cli.main(["sweep", str(config_file), "--grid", "a=1", "--seeds", seeds]) == 0
    assert calls[-1]["seeds"] == expected


def test_sweep_passes_every_option_to_sweep_runs(config_file, monkeypatch):
    """Every sweep option reaches :func:`sweep_runs`: the grid parsed (``{"train.steps": [1, 2], "optim.lr":
    [0.5]}``), ``--out``, preset, overrides, jobs, baseline, metrics, quiet, backend, address, the
    :class:`TableOptions` of ``--power``/``--detect``/``--log-scale``/``--holm``, and ``--table-only`` as
    ``run=False``, ``--order``. The defaults (checked in the
    second call): folder ``runs/sweep-<stem>``, metrics None, the default table."""
    calls = _record_sweep(monkeypatch)
    argv = ["sweep", str(config_file), "--grid", "train.steps=1,2", "--grid", "optim.lr=0.5", "--seeds", "4"]
    argv += ["--out", "S", "--preset", "smoke", "--set", "x=1", "--jobs", "3", "--baseline", "train.steps=1"]
    argv += ["--metric", "m1", "--metric", "m2", "--quiet", "--backend", "ray", "--address", "host:1"]
    argv += ["--power", "0.9", "--detect", "0.5", "--detect", "2", "--log-scale", "m1", "--holm", "metric"]
    argv += ["--table-only", "--order", "seed"]
    assert cli.main(argv) == 0
    assert calls[-1] == {
        "config": str(config_file),
        "grid": {"train.steps": [1, 2], "optim.lr": [0.5]},
        "seeds": [4],
        "out": "S",
        "preset": "smoke",
        "overrides": ["x=1"],
        "jobs": 3,
        "baseline": "train.steps=1",
        "metrics": ["m1", "m2"],
        "quiet": True,
        "backend": "ray",
        "address": "host:1",
        "table": TableOptions(power=0.9, detect=(0.5, 2.0), log_metrics=("m1",), holm="metric"),
        "run": False,
        "order": "seed",
    }
    assert cli.main(["sweep", str(config_file), "--grid", "a=x"]) == 0
    assert calls[-1] == {
        "config": str(config_file),
        "grid": {"a": ["x"]},
        "seeds": [0],
        "out": "runs/sweep-my.cfg",
        "preset": None,
        "overrides": [],
        "jobs": 1,
        "baseline": None,
        "metrics": None,
        "quiet": False,
        "backend": "local",
        "address": None,
        "table": TableOptions(power=0.8, detect=(), log_metrics=(), holm="table"),
        "run": True,
        "order": "grid",
    }


def test_sweep_default_folder_of_a_shipped_name_with_a_preset(monkeypatch):
    """The default sweep folder of the shipped ``particle_attention/toy`` with ``--preset smoke``:
    ``runs/sweep-particle_attention-toy-smoke``; without the preset no suffix (negative control)."""
    calls = _record_sweep(monkeypatch)
    _shipped(monkeypatch, Path("/x/toy.toml"), "particle_attention/toy")
    assert cli.main(["sweep", "particle_attention/toy", "--grid", "a=1", "--preset", "smoke"]) == 0
    assert calls[-1]["out"] == "runs/sweep-particle_attention-toy-smoke"
    assert cli.main(["sweep", "particle_attention/toy", "--grid", "a=1"]) == 0
    assert calls[-1]["out"] == "runs/sweep-particle_attention-toy"


def test_sweep_status_is_1_when_a_point_failed(config_file, monkeypatch):
    """A table with failed points exits 1; an empty ``failed`` list exits 0 (negative control)."""
    _record_sweep(monkeypatch, failed=["a=1 seed 0"])
    assert cli.main(["sweep", str(config_file), "--grid", "a=1"]) == 1
    _record_sweep(monkeypatch, failed=[])
    assert cli.main(["sweep", str(config_file), "--grid", "a=1"]) == 0


@pytest.mark.parametrize(
    ("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["sigint", "sigterm"]
)
def test_sweep_interrupted_says_to_run_it_again(signum, status, config_file, monkeypatch, capsys):
    """A :class:`RunInterrupted` inside the sweep: ``meanfield sweep: <message>; run the same command again to
    resume`` on stderr and status 128 + signum."""
    _record_sweep(monkeypatch, raises=RunInterrupted("stopped by a signal", signum))
    assert cli.main(["sweep", str(config_file), "--grid", "a=1"]) == status
    assert capsys.readouterr() == (
        "",
        "meanfield sweep: stopped by a signal; run the same command again to resume\n",
    )


def test_sweep_second_interrupt_is_status_130_with_its_message(config_file, monkeypatch, capsys):
    """A :class:`KeyboardInterrupt` inside the sweep: the documented one-line message and status 130."""
    _record_sweep(monkeypatch, raises=KeyboardInterrupt())
    assert cli.main(["sweep", str(config_file), "--grid", "a=1"]) == 130
    assert capsys.readouterr() == (
        "",
        "meanfield sweep: stopped at once by a second interrupt; every point keeps its last complete "
        "checkpoint: run the same command again to resume\n",
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--power", "1.5"], "power must be in (α, 1) = (0.05, 1), got 1.5"),
        (["--detect", "-1"], "a difference to detect must be a number > 0, got -1.0"),
        (["--grid", "b"], "a grid axis must look like key=v1,v2,…, got 'b'"),
    ],
    ids=["power", "detect", "grid"],
)
def test_sweep_bad_table_options_or_grid_are_one_line_before_running(
    extra, message, config_file, monkeypatch, capsys
):
    """A bad ``--power``, ``--detect`` or ``--grid``: the :class:`ConfigError` as ``meanfield sweep: error:
    <message>`` (status 2) and :func:`sweep_runs` never called."""
    calls = _record_sweep(monkeypatch)
    assert cli.main(["sweep", str(config_file), "--grid", "a=1", *extra]) == 2
    assert capsys.readouterr() == ("", f"meanfield sweep: error: {message}\n")
    assert calls == []


# ==========================================================================================================
# meanfield.runs.environment: environment()
# ==========================================================================================================

PACKAGE_NAMES = ["meanfield-sde", "torch", "numpy", "scipy", "torchsde", "pot", "tensorboard"]


@pytest.fixture
def faked_sources(monkeypatch):
    """Every source of :func:`environment` replaced by a value written here; returns what was asked."""
    asked = {"versions": [], "git": [], "strftime": []}

    def version(name):
        asked["versions"].append(name)
        if name in ("pot", "tensorboard"):
            raise metadata.PackageNotFoundError(name)
        return f"v-{name}"

    def git_commit(*args, **kwargs):
        asked["git"].append((args, kwargs))
        return {"commit": "c0ffee", "dirty": True}

    def strftime(fmt, *rest):
        asked["strftime"].append(fmt)
        return "<stamp>"

    monkeypatch.setattr(metadata, "version", version)
    monkeypatch.setattr(env_mod, "_git_commit", git_commit)
    monkeypatch.setattr(env_mod, "_source_hash", lambda: "feedbeef")
    monkeypatch.setattr(env_mod, "_cpu_model", lambda: "Fake CPU @ 1 GHz")
    monkeypatch.setattr(platform, "platform", lambda *a, **k: "FakeOS-1.0")
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    monkeypatch.setattr(sys, "version", "3.99.7 (main, Jan 1 2030) [Fake C]")
    monkeypatch.setattr(sys, "argv", ["meanfield", "run", "x.toml"])
    monkeypatch.setattr(time, "strftime", strftime)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 5)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    return asked


EXPECTED_ENV = {
    "python": "3.99.7",
    "platform": "FakeOS-1.0",
    "processor": "Fake CPU @ 1 GHz",
    "cpu_count": 3,
    "packages": {
        "meanfield-sde": "v-meanfield-sde",
        "torch": "v-torch",
        "numpy": "v-numpy",
        "scipy": "v-scipy",
        "torchsde": "v-torchsde",
    },
    "git": {"commit": "c0ffee", "dirty": True},
    "source_sha256": "feedbeef",
    "seed": 11,
    "threads": 5,
    "device": "cpu",
    "command": ["meanfield", "run", "x.toml"],
    "started": "<stamp>",
    "OMP_WAIT_POLICY": "ACTIVE",
}


def test_environment_is_the_record_of_every_source(faked_sources, monkeypatch):
    """:func:`environment` on a CPU with every source faked equals the dict written by hand: the Python
    version's first word, the platform, processor, CPU count, the versions of the seven packages that are
    installed (asked in order; the two that are not are left out), ``_git_commit()`` asked with no exclusion,
    the source hash, the config's seed, the threads, ``"cpu"``, ``sys.argv``, the start stamp in the format
    ``%Y-%m-%dT%H:%M:%S%z`` and ``OMP_WAIT_POLICY``; without that variable, None. Negative control: no
    ``cuda_device`` key on a CPU."""
    info = env_mod.environment(RunConfig(task="teacher_student", seed=11), torch.device("cpu"))
    assert info == EXPECTED_ENV
    assert list(info) == list(EXPECTED_ENV)
    assert faked_sources["versions"] == PACKAGE_NAMES
    assert faked_sources["git"] == [((), {})]
    assert faked_sources["strftime"] == ["%Y-%m-%dT%H:%M:%S%z"]
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert env_mod.environment(RunConfig(task="teacher_student", seed=11), torch.device("cpu")) == {
        **EXPECTED_ENV,
        "OMP_WAIT_POLICY": None,
    }


def test_environment_on_cuda_adds_the_device_name(faked_sources, monkeypatch):
    """On ``cuda:1`` the record is the CPU one with ``device = "cuda:1"`` and ``cuda_device`` the name the
    driver gives for that device (faked, given the device asked)."""
    asked = []
    monkeypatch.setattr(
        torch.cuda, "get_device_name", lambda device=None: asked.append(device) or "Fake H200"
    )
    info = env_mod.environment(RunConfig(task="teacher_student", seed=11), torch.device("cuda", 1))
    assert info == {**EXPECTED_ENV, "device": "cuda:1", "cuda_device": "Fake H200"}
    assert asked == [torch.device("cuda", 1)]


def test_environment_python_version_and_real_sources(monkeypatch):
    """Unfaked, the record's python is :func:`platform.python_version`, its platform :func:`platform.platform`,
    its command ``sys.argv`` and its ``started`` a stamp matching ``YYYY-MM-DDTHH:MM:SS±HHMM``."""
    monkeypatch.setattr(env_mod, "_git_commit", lambda exclude=(): {"commit": None, "dirty": None})
    info = env_mod.environment(RunConfig(task="teacher_student", seed=2), torch.device("cpu"))
    assert info["python"] == platform.python_version()
    assert info["platform"] == platform.platform()
    assert info["command"] == sys.argv and info["seed"] == 2
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}", info["started"])
    assert info["git"] == {"commit": None, "dirty": None}


# ==========================================================================================================
# _git_commit on repositories made here, and on a faked git
# ==========================================================================================================


def _git(cwd: Path, *args: str) -> str:
    command = ["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    command += ["-c", "commit.gpgsign=false", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=30).stdout.strip()


def _repo(root: Path, files: dict[str, str]) -> str:
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    _git(root, "add", *files)
    _git(root, "commit", "-q", "-m", "init")
    return _git(root, "rev-parse", "HEAD")


@needs_git
def test_environment_records_the_git_facts_and_hash_of_a_repository_made_here(tmp_path, monkeypatch):
    """With the package in a repository made here (one file ``m.py``): ``environment()["git"]`` is the
    commit ``git rev-parse HEAD`` gives and not dirty, and ``source_sha256`` is SHA-256 of ``b"m.py"`` + the
    file's bytes, computed here. After a change to ``m.py``: dirty, a different hash (the negative control);
    after committing it: clean again, at the new commit."""
    repo = tmp_path / "repo"
    head = _repo(repo, {"m.py": "x = 1\n"})
    monkeypatch.setattr(env_mod, "_PACKAGE", repo)
    cfg = RunConfig(task="teacher_student", seed=0)
    info = env_mod.environment(cfg, torch.device("cpu"))
    assert info["git"] == {"commit": head, "dirty": False}
    assert info["source_sha256"] == hashlib.sha256(b"m.py" + b"x = 1\n").hexdigest()
    (repo / "m.py").write_text("x = 2\n")
    info = env_mod.environment(cfg, torch.device("cpu"))
    assert info["git"] == {"commit": head, "dirty": True}
    assert info["source_sha256"] == hashlib.sha256(b"m.py" + b"x = 2\n").hexdigest()
    _git(repo, "commit", "-q", "-am", "two")
    new = _git(repo, "rev-parse", "HEAD")
    assert new != head
    assert env_mod._git_commit() == {"commit": new, "dirty": False}


@needs_git
def test_git_commit_staged_and_deleted_files_are_dirty(tmp_path, monkeypatch):
    """A staged change, and a deleted tracked file, both make the checkout dirty; a repository without any
    commit (``rev-parse HEAD`` fails) gives None for both facts."""
    repo = tmp_path / "repo"
    head = _repo(repo, {"a.txt": "a\n", "b.txt": "b\n"})
    monkeypatch.setattr(env_mod, "_PACKAGE", repo)
    assert env_mod._git_commit() == {"commit": head, "dirty": False}
    (repo / "a.txt").write_text("changed\n")
    _git(repo, "add", "a.txt")
    assert env_mod._git_commit() == {"commit": head, "dirty": True}
    _git(repo, "reset", "-q", "--hard")
    assert env_mod._git_commit() == {"commit": head, "dirty": False}
    (repo / "b.txt").unlink()
    assert env_mod._git_commit() == {"commit": head, "dirty": True}
    empty = tmp_path / "empty"
    empty.mkdir()
    _git(empty, "init", "-q")
    monkeypatch.setattr(env_mod, "_PACKAGE", empty)
    assert env_mod._git_commit() == {"commit": None, "dirty": None}


@needs_git
def test_git_commit_excludes_several_folders_each_relative_to_the_top(tmp_path, monkeypatch):
    """``exclude=("results", "logs")`` from a subfolder of the checkout: changes under both folders leave it
    clean; excluding only one of them, it is dirty (the other's change counts), and so with no exclusion."""
    repo = tmp_path / "repo"
    _repo(repo, {"results/r.md": "r\n", "logs/l.txt": "l\n", "pkg/code.py": "x = 1\n"})
    monkeypatch.setattr(env_mod, "_PACKAGE", repo / "pkg")
    (repo / "results" / "r.md").write_text("r2\n")
    (repo / "logs" / "l.txt").write_text("l2\n")
    assert env_mod._git_commit(exclude=("results", "logs"))["dirty"] is False
    assert env_mod._git_commit(exclude=("logs", "results"))["dirty"] is False
    assert env_mod._git_commit(exclude=("results",))["dirty"] is True
    assert env_mod._git_commit(exclude=("logs",))["dirty"] is True
    assert env_mod._git_commit()["dirty"] is True


def _fake_git(monkeypatch, outputs):
    """subprocess.run replaced: each call is recorded and answered by the next of ``outputs`` (a stdout text,
    or an exception to raise)."""
    calls = []
    answers = iter(outputs)

    def run(argv, **kwargs):
        calls.append((argv, kwargs))
        answer = next(answers)
        if isinstance(answer, BaseException):
            raise answer
        return subprocess.CompletedProcess(argv, 0, stdout=answer, stderr="")

    monkeypatch.setattr(env_mod.subprocess, "run", run)
    return calls


def test_git_commit_asks_git_with_these_commands_and_pathspecs(tmp_path, monkeypatch):
    """The two git commands, exactly: ``git -C <package> rev-parse HEAD`` then ``git -C <package> status
    --porcelain --untracked-files=no --`` with no pathspec, or ``:(top)`` and one ``:(top,exclude)<path>`` per
    excluded path; each with ``capture_output``, ``text``, ``errors="replace"``, a 5 s timeout and ``check``.
    The commit is git's output stripped; a status of only whitespace is clean, one line is dirty."""
    monkeypatch.setattr(env_mod, "_PACKAGE", tmp_path)
    calls = _fake_git(monkeypatch, ["abc123\n", " \n \n"])
    assert env_mod._git_commit() == {"commit": "abc123", "dirty": False}
    options = {"capture_output": True, "text": True, "errors": "replace", "timeout": 5, "check": True}
    status = ["git", "-C", str(tmp_path), "status", "--porcelain", "--untracked-files=no", "--"]
    assert calls == [
        (["git", "-C", str(tmp_path), "rev-parse", "HEAD"], options),
        (status, options),
    ]
    calls = _fake_git(monkeypatch, ["  abc123  \n", " M f.txt\n"])
    assert env_mod._git_commit(exclude=("benchmarks/results", "logs")) == {"commit": "abc123", "dirty": True}
    assert calls[1] == (
        status + [":(top)", ":(top,exclude)benchmarks/results", ":(top,exclude)logs"],
        options,
    )


@pytest.mark.parametrize(
    "failure",
    [
        subprocess.TimeoutExpired(["git"], 5),
        subprocess.CalledProcessError(128, ["git"]),
        FileNotFoundError(2, "No such file or directory: 'git'"),
        PermissionError(13, "Permission denied: 'git'"),
    ],
    ids=["timeout", "git_failed", "no_git", "not_executable"],
)
@pytest.mark.parametrize("at", [0, 1], ids=["rev_parse", "status"])
def test_git_commit_is_none_when_either_git_call_fails(failure, at, tmp_path, monkeypatch):
    """A timeout, a failing git (non-zero exit), a missing or non-executable git, at the first or the second
    call: both facts None (not the commit with an unknown dirty flag), no error."""
    monkeypatch.setattr(env_mod, "_PACKAGE", tmp_path)
    outputs = ["abc\n", ""]
    outputs[at] = failure
    calls = _fake_git(monkeypatch, outputs)
    assert env_mod._git_commit() == {"commit": None, "dirty": None}
    assert len(calls) == at + 1


def test_git_commit_lets_other_errors_through(tmp_path, monkeypatch):
    """An error that is neither an OSError nor a SubprocessError (a bug) is not swallowed."""
    monkeypatch.setattr(env_mod, "_PACKAGE", tmp_path)
    _fake_git(monkeypatch, [RuntimeError("a bug")])
    with pytest.raises(RuntimeError, match="^a bug$"):
        env_mod._git_commit()


# ==========================================================================================================
# _source_hash
# ==========================================================================================================


def test_source_hash_orders_the_files_by_path_and_reads_them_recursively(tmp_path, monkeypatch):
    """``_source_hash`` of files created out of order (``z.py``, ``m/n/c.py``, ``a.py``, ``m/b.py``,
    ``B.py``): SHA-256 computed here over path-then-bytes in sorted path order (``B.py``, ``a.py``,
    ``m/b.py``, ``m/n/c.py``, ``z.py``), paths relative to the package with ``/``. Files not ending ``.py``
    (``.pyi``, ``.txt``, ``.pyc``) do not count. Negative controls: the digest in creation order differs, and
    an empty package hashes to SHA-256 of nothing."""
    files = {"z.py": b"z\n", "m/n/c.py": b"c\n", "a.py": b"a\n", "m/b.py": b"b\n", "B.py": b"B\n"}
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    for name in ("stub.pyi", "notes.txt", "m/cache.pyc"):
        (tmp_path / name).write_bytes(b"ignored")
    monkeypatch.setattr(env_mod, "_PACKAGE", tmp_path)
    order = ["B.py", "a.py", "m/b.py", "m/n/c.py", "z.py"]
    expected = hashlib.sha256(b"".join(name.encode() + files[name] for name in order)).hexdigest()
    assert env_mod._source_hash() == expected
    unsorted = hashlib.sha256(b"".join(name.encode() + data for name, data in files.items())).hexdigest()
    assert unsorted != expected
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setattr(env_mod, "_PACKAGE", empty)
    assert env_mod._source_hash() == hashlib.sha256(b"").hexdigest()


def test_source_hash_separates_path_from_content(tmp_path, monkeypatch):
    """The path is part of the digest: renaming ``a.py`` to ``b.py`` with the same bytes changes it, and the
    digest is over the relative path (a package moved elsewhere hashes the same)."""
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "a.py").write_bytes(b"x = 1\n")
    monkeypatch.setattr(env_mod, "_PACKAGE", tmp_path / "one")
    first = env_mod._source_hash()
    assert first == hashlib.sha256(b"a.py" + b"x = 1\n").hexdigest()
    (tmp_path / "two").mkdir()
    (tmp_path / "two" / "a.py").write_bytes(b"x = 1\n")
    monkeypatch.setattr(env_mod, "_PACKAGE", tmp_path / "two")
    assert env_mod._source_hash() == first
    (tmp_path / "two" / "a.py").rename(tmp_path / "two" / "b.py")
    assert env_mod._source_hash() == hashlib.sha256(b"b.py" + b"x = 1\n").hexdigest() != first


@pytest.mark.parametrize(
    ("text", "processor", "expected"),
    [
        (
            "vendor_id\t: X\nmodel\t\t: 85\nmodel name\t: Chip: rev 2 @ 3 GHz \nmodel name\t: other\n",
            "p",
            "Chip: rev 2 @ 3 GHz",
        ),
        ("model\t\t: 85\n  model name : indented\nflags : model name\n", "fallback cpu", "fallback cpu"),
        (None, "fallback cpu", "fallback cpu"),
        (None, "", "fallback machine"),
        ("model name:   \n", "p", ""),
    ],
    ids=["first_line", "no_line", "no_file", "no_processor", "empty_value"],
)
def test_cpu_model_reads_the_first_model_name_line(text, processor, expected, monkeypatch):
    """``_cpu_model`` on a ``/proc/cpuinfo`` written here (``None``: reading it fails with an OSError): the
    text after the first colon of the first line *starting* ``model name`` (later colons kept, spaces
    stripped; not the ``model`` line, not a line with ``model name`` elsewhere in it), else
    :func:`platform.processor`, else :func:`platform.machine` when that is empty."""
    opened = []

    class FakePath:
        def __init__(self, path):
            opened.append(path)

        def read_text(self):
            if text is None:
                raise PermissionError(13, "Permission denied", "/proc/cpuinfo")
            return text

    monkeypatch.setattr(env_mod, "Path", FakePath)
    monkeypatch.setattr(platform, "processor", lambda: processor)
    monkeypatch.setattr(platform, "machine", lambda: "fallback machine")
    assert env_mod._cpu_model() == expected
    assert opened == ["/proc/cpuinfo"]


def test_the_package_folder_is_the_one_holding_the_module():
    """``_PACKAGE`` is the ``meanfield/`` folder (the parent of ``runs/``), resolved."""
    assert Path(meanfield.__file__).resolve().parent == env_mod._PACKAGE
    assert (env_mod._PACKAGE / "runs" / "environment.py").is_file()


# ==========================================================================================================
# provenance, provenance_changes, record_environment
# ==========================================================================================================


def _env(commit="a", dirty=False, sha="h1", mf="0.1", torch_version="2.0", **extra):
    return {
        "git": {"commit": commit, "dirty": dirty},
        "packages": {"meanfield-sde": mf, "torch": torch_version, "numpy": "1.0"},
        "source_sha256": sha,
        "seed": 0,
        **extra,
    }


def test_provenance_keys_and_a_record_with_null_git_and_packages():
    """:data:`PROVENANCE_KEYS` are the five documented names in order; a record whose ``git`` and ``packages``
    are ``null`` (None) gives None for all five, like an empty record. Negative control: a full record gives
    its values."""
    assert env_mod.PROVENANCE_KEYS == ("commit", "dirty", "source_sha256", "meanfield", "torch")
    assert env_mod.provenance({"git": None, "packages": None}) == dict.fromkeys(env_mod.PROVENANCE_KEYS)
    assert env_mod.provenance(_env()) == {
        "commit": "a",
        "dirty": False,
        "source_sha256": "h1",
        "meanfield": "0.1",
        "torch": "2.0",
    }


def test_provenance_changes_lists_each_differing_key_in_order():
    """``provenance_changes``: one ``"key: before → now"`` line per differing key, in
    :data:`PROVENANCE_KEYS` order, values as ``str`` gives them (``False``, ``None``); keys outside the
    provenance (seed, numpy) do not count; identical records give ``[]`` (negative control)."""
    before = _env()
    now = _env(dirty=True, sha="h2", mf="0.2", seed=5)
    now["packages"]["numpy"] = "9.9"
    assert env_mod.provenance_changes(before, now) == [
        "dirty: False → True",
        "source_sha256: h1 → h2",
        "meanfield: 0.1 → 0.2",
    ]
    assert env_mod.provenance_changes({}, _env(torch_version="2.1")) == [
        "commit: None → a",
        "dirty: None → False",
        "source_sha256: None → h1",
        "meanfield: None → 0.1",
        "torch: None → 2.1",
    ]
    assert env_mod.provenance_changes(before, _env(seed=9)) == []


def test_record_environment_writes_indented_json_and_keeps_env_unchanged(tmp_path):
    """The first record: the file's text is exactly the one-space-indented JSON written out by hand, with an
    empty ``earlier`` list after the record's keys and a final newline; the folder is made when missing;
    nothing is reported and the dict passed in gets no ``earlier`` key. Negative control: the second record's
    file is not the first's."""
    path = tmp_path / "new" / "environment.json"
    env = {"seed": 1, "git": {"commit": "a"}}
    assert env_mod.record_environment(path, env) == []
    assert path.read_text() == ('{\n "seed": 1,\n "git": {\n  "commit": "a"\n },\n "earlier": []\n}\n')
    assert env == {"seed": 1, "git": {"commit": "a"}}
    assert env_mod.record_environment(path, {"seed": 2}) == ["commit: a → None"]
    assert json.loads(path.read_text()) == {"seed": 2, "earlier": [{"seed": 1, "git": {"commit": "a"}}]}


@pytest.mark.parametrize(
    "text",
    ["[1, 2]", '"a string"', "3", "null", "", "{not json"],
    ids=["list", "string", "number", "null", "empty", "damaged"],
)
def test_record_environment_replaces_a_record_that_is_not_an_object(text, tmp_path):
    """An ``environment.json`` holding valid JSON that is not an object, or text that is not JSON: replaced
    by the new record with no earlier ones and no changes reported."""
    path = tmp_path / "environment.json"
    path.write_text(text)
    assert env_mod.record_environment(path, _env("b")) == []
    assert json.loads(path.read_text()) == {**_env("b"), "earlier": []}


def test_record_environment_of_an_unreadable_record_replaces_it(tmp_path, monkeypatch):
    """A record that exists but cannot be read (an OSError from ``read_text``): replaced, no changes, no
    error."""
    path = tmp_path / "environment.json"
    path.write_text(json.dumps(_env("a")))
    real = pathlib.Path.read_text

    def read_text(self, *args, **kwargs):
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "read_text", read_text)
    assert env_mod.record_environment(path, _env("b")) == []
    monkeypatch.setattr(pathlib.Path, "read_text", real)
    assert json.loads(path.read_text()) == {**_env("b"), "earlier": []}


def test_record_environment_of_a_record_without_earlier_keeps_it_as_the_first(tmp_path):
    """A record written before ``earlier`` existed (an object without that key): it becomes the only earlier
    record, and the changes are against it (commit and dirty)."""
    path = tmp_path / "environment.json"
    path.write_text(json.dumps(_env("a")))
    assert env_mod.record_environment(path, _env("b", dirty=True)) == ["commit: a → b", "dirty: False → True"]
    assert json.loads(path.read_text()) == {**_env("b", dirty=True), "earlier": [_env("a")]}
