"""Tests of :mod:`meanfield.cli`."""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
from helpers.check_files import CONFIG_TEXT  # tests/helpers/check_files.py
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import meanfield.runs
import meanfield.runs.sweeps
from meanfield import cli
from meanfield.config import ConfigError
from meanfield.data import Batches, TokenBatches
from meanfield.runs.sweeps import TableOptions
from meanfield.studies.validation import (
    InputError,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib
import errno
import runpy
import warnings

import meanfield
import meanfield.data
import meanfield.shipped
import meanfield.stepping.solvers
import meanfield.studies.validation
from meanfield.data import CorruptDataError, DataNotFoundError
from meanfield.runs import (
    DiskFullError,
    NonFiniteLossError,
    RunFolderError,
    RunInterrupted,
    RunResult,
)

SETTINGS = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


FEW = settings(SETTINGS, max_examples=25)


FAKE_CHECK = textwrap.dedent(
    """
    from meanfield.studies.validation import CheckResult
    CLAIM = "1 + 1 = 2"

    def run(preset):
        result = CheckResult("fake", CLAIM)
        result.add("1 + 1", 2.0, 2.0, 0.0)
        return result

    def plot(result):
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots()
        return fig
    """
)


@pytest.fixture(scope="module")
def theory(tmp_path_factory):
    folder = tmp_path_factory.mktemp("theory")
    (folder / "fake.py").write_text(FAKE_CHECK)
    return folder


RUN_BAD_SETS = [
    "optim.beta={kind='linear',start=1e-3,end=-1e-3}",  # a β schedule negative mid-run
    "model.n_particles=0",
    "train.batch_size=100000",
    "optim.beta=inf",
]


@FEW
@given(
    checks=st.lists(st.sampled_from(["fake", "nope", "", "-x"]), max_size=2),
    preset=st.sampled_from([None, "fast", "full", "bogus"]),
    out=st.sampled_from(["fresh", "a file", "nested/deep", "corrupt results"]),
    theory_kind=st.sampled_from(["ok", "missing", "a file"]),
    resume=st.booleans(),
)
def test_cli_validate(theory, tmp_path_factory, checks, preset, out, theory_kind, resume):
    """``meanfield validate``: exit 0/1 with a report, or exit 2 with a one-line error; never a traceback,
    and never a half-written ``results.json``/``report.md``."""
    from meanfield.cli import main

    base = tmp_path_factory.mktemp("out")
    target = base / ("nested/deep" if out == "nested/deep" else "out")
    if out == "a file":
        target.write_text("not a folder")
    if out == "corrupt results":
        target.mkdir()
        (target / "results.json").write_text('[{"name": "fake", "claim"')
    folder = {"ok": theory, "missing": base / "nowhere", "a file": theory / "fake.py"}[theory_kind]
    argv = ["validate", *checks, "--out", str(target), "--theory", str(folder)]
    if preset is not None:
        argv += ["--preset", preset]
    if resume:
        argv.append("--resume")
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse: a usage line and exit 2
        assert exit_.code == 2
        event("argparse usage error, exit 2")
        return
    assert code in (0, 1, 2)
    event(f"exit {code}")
    if code in (0, 1):
        import json

        assert (target / "report.md").exists()
        json.loads((target / "results.json").read_text())
    if target.is_dir():
        assert not [f for f in os.listdir(target) if f.endswith(".tmp")]


@pytest.mark.parametrize("override", RUN_BAD_SETS)
def test_meanfield_run_bad_set_is_one_named_line(tmp_path, capsys, override):
    """``meanfield run`` with one bad ``--set``: exit 2 with one line naming the key (no traceback), before
    training starts."""
    from pathlib import Path

    from meanfield.cli import main

    config = Path(__file__).parents[1] / "experiments" / "teacher_student" / "config.toml"
    argv = ["run", str(config), "--preset", "smoke", "--set", override, "--out", str(tmp_path / "run")]
    code = main(argv)  # an exception here fails the test: a traceback
    err = capsys.readouterr().err.strip()
    key = override.split("=")[0].split(".")[-1]
    assert code == 2 and len(err.splitlines()) == 1 and key in err, err


ROOT = Path(__file__).resolve().parents[1]


TEACHER = ROOT / "experiments" / "teacher_student" / "config.toml"


KEYS = [
    "seed",
    "device",
    "dtype",
    "threads",
    "task",
    "data.d",
    "data.k",
    "data.activation",
    "data.n_train",
    "data.label_noise",
    "model.n_particles",
    "model.A",
    "model.sphere",
    "optim.lr",
    "optim.beta",
    "optim.drift",
    "optim.eps",
    "optim.betas",
    "optim.projection",
    "train.batch_size",
    "train.log_every",
    "train.keep_checkpoints",
    "train.eval_every",
    "optim.lrr",  # unknown keys
    "train.stepz",
    "modle.n_particles",
]


VALUES = [
    "0",
    "-1",
    "1",
    "3",
    "0.5",
    "-0.5",
    "1e308",
    "nan",
    "inf",
    "true",
    '"text"',
    "[1, 2]",
    "[]",
    "{}",
    '{kind="cosine", start=1e-3, end=0}',
    '{kind="linear", start=1e-3, end=-1}',
    '{kind="sphere", radius=1.0}',
    '{kind="nope"}',
    "cuda:7",
    "float16",
]


SETTINGS_2 = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


NUMBERS = st.one_of(
    st.integers(-3, 5),
    st.sampled_from([0.5, math.nan, math.inf, -math.inf, 2**70, True, "3", None, [2]]),
)


@SETTINGS_2
@given(key=st.sampled_from(KEYS), value=st.sampled_from(VALUES))
def test_meanfield_run_one_bad_override(tmp_path_factory, capsys, key, value):
    out = tmp_path_factory.mktemp("run") / "r"
    argv = ["run", str(TEACHER), "--preset", "smoke", "--quiet", "--out", str(out)]
    argv += ["--set", "train.steps=2", "--set", "train.figures=false", "--set", f"{key}={value}"]
    code = cli.main(argv)  # an exception here is a traceback: the test fails
    err = capsys.readouterr().err.strip()
    assert code in (0, 2), (code, err)
    if code == 0:
        assert (out / "summary.json").is_file() and (out / "checkpoints").is_dir()
        return
    assert len(err.splitlines()) == 1, err
    leaf = key.split(".")[-1]
    named = leaf in err or key in err or "temperature" in err or "beta" in err or "task" in err
    assert named, f"the error does not name {key}: {err}"
    assert not (out / "config.toml").exists()  # refused before anything was written


@settings(max_examples=60, deadline=None, derandomize=True)
@given(n=NUMBERS, batch_size=NUMBERS, block_size=NUMBERS, length=st.sampled_from([0, 1, 5, 40]))
def test_samplers_arguments(n, batch_size, block_size, length):
    try:
        batches = Batches(n, batch_size, seed=0)
    except (ValueError, TypeError) as error:
        assert "n" in str(error) or "batch_size" in str(error), str(error)
    else:
        index = batches.next_indices()
        assert index.dtype == torch.int64 and index.numel() == batch_size and int(index.max()) < n
    tokens = torch.arange(length)
    try:
        sampler = TokenBatches(tokens, block_size, batch_size, seed=0)
    except (ValueError, TypeError) as error:
        message = str(error)
        assert "block_size" in message or "batch_size" in message or "tokens" in message, message
    else:
        x, y = sampler.next_batch()
        assert x.shape == y.shape == (batch_size, block_size) and torch.equal(x[:, 1:], y[:, :-1])


def test_the_property_tests_see_both_outcomes(tmp_path, capsys):
    """Negative control of the run property: a valid override runs (0), an unknown key is refused (2)."""
    base = ["run", str(TEACHER), "--preset", "smoke", "--quiet", "--set", "train.steps=2"]
    assert cli.main([*base, "--set", "optim.lr=0.01", "--out", str(tmp_path / "ok")]) == 0
    assert cli.main([*base, "--set", "optim.lrr=0.01", "--out", str(tmp_path / "bad")]) == 2
    assert "lrr" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["train.steps=0", "train.steps=-3", "train.steps=1.5"])
def test_train_steps_refused(tmp_path, capsys, bad):
    code = cli.main(["run", str(TEACHER), "--preset", "smoke", "--set", bad, "--out", str(tmp_path / "r")])
    assert code == 2 and "train.steps" in capsys.readouterr().err


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


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "mini_cfg.toml"
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


class _Table:
    failed: list = []


def _record_sweep(monkeypatch):
    calls = []

    def fake_sweep_runs(config, grid, seeds, out, **kwargs):
        calls.append({"config": config, "grid": grid, "seeds": seeds, "out": out, **kwargs})
        return _Table()

    monkeypatch.setattr(meanfield.runs.sweeps, "sweep_runs", fake_sweep_runs)
    return calls


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


def test_cli_run_and_its_errors(tmp_path, capsys):
    out = tmp_path / "cli"
    assert cli.main(["run", str(TEACHER), "--preset", "smoke", "--out", str(out), "--quiet"]) == 0
    assert RunResult.load(out).status == "finished"
    assert cli.main(["run", str(TEACHER), "--preset", "smoke", "--out", str(out), "--quiet"]) == 2
    assert "already holds a run" in capsys.readouterr().err
    code = cli.main(
        ["run", str(TEACHER), "--preset", "smoke", "--set", "train.stpes=3", "--out", str(tmp_path / "x")]
    )
    err = capsys.readouterr().err
    assert code == 2 and "unknown key 'train.stpes'" in err and "did you mean 'steps'" in err
    assert cli.main(["run", str(TEACHER), "--preset", "tiny", "--out", str(tmp_path / "y")]) == 2
    assert "unknown preset 'tiny'" in capsys.readouterr().err
    code = cli.main(["run", str(TEACHER), "--set", "optim.lrr=1", "--out", str(tmp_path / "z")])
    assert code == 2 and "did you mean 'lr'" in capsys.readouterr().err
    # finished runs resume to themselves: nothing more to do
    assert cli.main(["run", str(TEACHER), "--preset", "smoke", "--out", str(out), "--resume", "--quiet"]) == 0


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


def _run_module(run_name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "found in sys.modules": it is already imported
        runpy.run_module("meanfield.cli", run_name=run_name, alter_sys=False)


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


def _record_validate(monkeypatch, passed):
    calls = []

    def fake_validate(checks, **kwargs):
        calls.append((checks, kwargs))
        return types.SimpleNamespace(passed=passed)

    monkeypatch.setattr(meanfield.studies.validation, "validate", fake_validate)
    return calls


@pytest.fixture
def config_file_2(tmp_path):
    path = tmp_path / "my.cfg.toml"
    path.write_text(CONFIG_TEXT, encoding="utf-8")
    return path


def _shipped(monkeypatch, path: Path, name: str):
    asked = []

    def find_config(arg):
        asked.append(arg)
        return path, name

    monkeypatch.setattr(meanfield.shipped, "find_config", find_config)
    return asked


def _fake_catalog(monkeypatch, entries: dict[str, tuple[str, list[str]]], where: str = "/exp"):
    monkeypatch.setattr(meanfield.shipped, "configs", lambda: {n: Path(f"{where}/{n}.toml") for n in entries})
    by_path = {Path(f"{where}/{n}.toml"): value for n, value in entries.items()}
    monkeypatch.setattr(meanfield.shipped, "describe", lambda path: by_path[path])
    monkeypatch.setattr(meanfield.shipped, "experiments_dir", lambda: Path(where))


FOOTER = (
    "meanfield run NAME --preset PRESET trains one; meanfield run NAME --print-config > my.toml copies one to "
    "start your own (then: meanfield run my.toml)\n"
)


def _record_sweep_2(monkeypatch, failed=(), raises=None):
    calls = []

    def fake_sweep_runs(config, grid, seeds, out, **kwargs):
        calls.append({"config": config, "grid": grid, "seeds": seeds, "out": out, **kwargs})
        if raises is not None:
            raise raises
        return types.SimpleNamespace(failed=list(failed))

    monkeypatch.setattr(meanfield.runs.sweeps, "sweep_runs", fake_sweep_runs)
    return calls


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


def test_config_arg_stems_a_file_by_its_name_and_a_shipped_name_by_its_path(config_file_2, monkeypatch):
    """``_config_arg``: a TOML file → ``(str(path), stem)`` with only the last suffix removed
    (``my.cfg.toml`` → ``my.cfg``); a shipped name ``particle_attention/toy`` → its file and the stem
    ``particle_attention-toy`` (``/`` as ``-``). No configuration is an :class:`InputError` with the
    documented message. Negative control: the shipped stem is not the file's stem ``toy``."""
    args = argparse.Namespace(config=str(config_file_2))
    assert cli._config_arg(args) == (str(config_file_2), "my.cfg")
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


def test_print_config_with_a_preset_or_sets_names_them_in_the_header(config_file_2, monkeypatch, capsys):
    """``--print-config``: with ``--preset smoke`` alone the header says ``--preset smoke`` only, with two
    ``--set`` alone it says both in order and no preset; the body, read back with tomllib, is the hand-resolved
    configuration. A shipped name is named as given, not as its file. No run is started (negative control:
    the recorder stays empty)."""
    calls = _record_run(monkeypatch)
    assert cli.main(["run", str(config_file_2), "--print-config", "--preset", "smoke"]) == 0
    out = capsys.readouterr().out
    assert (
        out.splitlines()[0] == f"# {config_file_2} resolved with --preset smoke (meanfield run --print-config)"
    )
    assert tomllib.loads(out) == {"task": "teacher_student", "seed": 1, "train": {"steps": 2, "lr": 0.5}}
    argv = ["run", str(config_file_2), "--print-config", "--set", "train.lr=0.25", "--set", "seed=3"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (
        f"# {config_file_2} resolved with --set train.lr=0.25 --set seed=3 (meanfield run --print-config)"
    )
    assert tomllib.loads(out) == {"task": "teacher_student", "seed": 3, "train": {"steps": 10, "lr": 0.25}}
    _shipped(monkeypatch, config_file_2, "pkg/name")
    assert cli.main(["run", "pkg/name", "--print-config"]) == 0
    assert capsys.readouterr().out == CONFIG_TEXT
    assert cli.main(["run", "pkg/name", "--print-config", "--preset", "smoke"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head == "# pkg/name resolved with --preset smoke (meanfield run --print-config)"
    assert calls == []


def test_run_default_folders_and_the_options_it_passes(config_file_2, monkeypatch):
    """``meanfield run``: the folder ``runs/<stem>`` for a file (``my.cfg``), ``runs/<stem>-<preset>`` with a
    preset, ``runs/particle_attention-toy-smoke`` for a shipped name; ``--out`` as given; the configuration
    file, preset, overrides, ``resume`` and ``quiet`` passed on (defaults None, [], False, False)."""
    calls = _record_run(monkeypatch)
    assert cli.main(["run", str(config_file_2)]) == 0
    assert calls[-1] == (
        str(config_file_2),
        os.path.join("runs", "my.cfg"),
        {"preset": None, "overrides": [], "resume": False, "quiet": False},
    )
    argv = ["run", str(config_file_2), "--preset", "p", "--set", "a=1", "--set", "b=2", "--resume", "--quiet"]
    assert cli.main(argv) == 0
    assert calls[-1] == (
        str(config_file_2),
        "runs/my.cfg-p",
        {"preset": "p", "overrides": ["a=1", "b=2"], "resume": True, "quiet": True},
    )
    assert cli.main(["run", str(config_file_2), "--preset", "p", "--out", "elsewhere"]) == 0
    assert calls[-1][1] == "elsewhere"
    shipped = Path("/x/particle_attention/toy.toml")
    _shipped(monkeypatch, shipped, "particle_attention/toy")
    assert cli.main(["run", "particle_attention/toy", "--preset", "smoke"]) == 0
    assert calls[-1][:2] == (str(shipped), "runs/particle_attention-toy-smoke")
    assert len(calls) == 4


@pytest.mark.parametrize(
    ("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["sigint", "sigterm"]
)
def test_run_interrupted_exits_128_plus_the_signal(signum, status, config_file_2, monkeypatch, capsys):
    """A :class:`RunInterrupted` by SIGINT/SIGTERM: ``meanfield run: <message>`` on stderr and status
    128 + signum (130, 143)."""
    _record_run(monkeypatch, raises=RunInterrupted("stopped after step 4", signum))
    assert cli.main(["run", str(config_file_2), "--out", "o"]) == status
    assert capsys.readouterr() == ("", "meanfield run: stopped after step 4\n")


def test_run_second_interrupt_names_the_folder_given_or_the_default_one(config_file_2, monkeypatch, capsys):
    """A :class:`KeyboardInterrupt` (a second Ctrl-C): status 130 and the message naming ``--out`` when given,
    the default folder ``runs/<config stem>`` when not (it is known: the user can resume from it)."""
    _record_run(monkeypatch, raises=KeyboardInterrupt())
    assert cli.main(["run", str(config_file_2), "--out", "my/run"]) == 130
    tail = " keeps its last complete checkpoint, --resume continues from it\n"
    assert capsys.readouterr() == ("", "meanfield run: stopped at once by a second interrupt; my/run" + tail)
    assert cli.main(["run", str(config_file_2)]) == 130
    assert capsys.readouterr() == (
        "",
        f"meanfield run: stopped at once by a second interrupt; {os.path.join('runs', config_file_2.stem)}"
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
def test_run_errors_are_one_line_with_their_status(error, message, status, config_file_2, monkeypatch, capsys):
    """A non-finite loss and a full disk stop the run with ``meanfield run: error: <message>`` and status 1
    (a :class:`DiskFullError` is a :class:`RunFolderError` but exits 1, not 2); a run-folder or configuration
    error is the same line with status 2."""
    _record_run(monkeypatch, raises=error)
    assert cli.main(["run", str(config_file_2), "--out", "o"]) == status
    assert capsys.readouterr() == ("", f"meanfield run: error: {message}\n")


@pytest.mark.parametrize("seeds", ["1,x", "0.5", "1;2"])
def test_sweep_seeds_that_are_not_integers_are_one_line_and_exit_2(seeds, config_file_2, monkeypatch, capsys):
    """``--seeds 1,x``: exit 2 and the one line that says what is allowed, before any sweep starts (it was a
    traceback of int()'s ValueError). Negative control: ``1,2`` reaches the sweep."""
    calls = _record_sweep_2(monkeypatch)
    assert cli.main(["sweep", str(config_file_2), "--grid", "a=1", "--seeds", seeds]) == 2
    assert capsys.readouterr().err == (
        f"meanfield sweep: error: --seeds must be comma-separated integers (0,1,2), got {seeds!r}\n"
    )
    assert calls == []
    assert cli.main(["sweep", str(config_file_2), "--grid", "a=1", "--seeds", "1,2"]) == 0 and calls


@pytest.mark.parametrize(
    ("seeds", "expected"),
    [("0", [0]), ("3, ,5,", [3, 5]), (" 7 ", [7]), ("", [0]), (" , ", [0]), ("2,1,2", [2, 1, 2])],
    ids=["default", "blanks", "spaces", "empty", "only_blanks", "order_kept"],
)
def test_sweep_seeds_are_the_comma_separated_integers(seeds, expected, config_file_2, monkeypatch):
    """``--seeds``: comma-separated integers, blank items skipped, spaces allowed, order and repeats kept;
    an empty string means seed 0."""
    calls = _record_sweep_2(monkeypatch)
    assert cli.main(["sweep", str(config_file_2), "--grid", "a=1", "--seeds", seeds]) == 0
    assert calls[-1]["seeds"] == expected


def test_sweep_passes_every_option_to_sweep_runs(config_file_2, monkeypatch):
    """Every sweep option reaches :func:`sweep_runs`: the grid parsed (``{"train.steps": [1, 2], "optim.lr":
    [0.5]}``), ``--out``, preset, overrides, jobs, baseline, metrics, quiet, backend, address, the
    :class:`TableOptions` of ``--power``/``--detect``/``--log-scale``/``--holm``, and ``--table-only`` as
    ``run=False``, ``--order``. The defaults (checked in the
    second call): folder ``runs/sweep-<stem>``, metrics None, the default table."""
    calls = _record_sweep_2(monkeypatch)
    argv = ["sweep", str(config_file_2), "--grid", "train.steps=1,2", "--grid", "optim.lr=0.5", "--seeds", "4"]
    argv += ["--out", "S", "--preset", "smoke", "--set", "x=1", "--jobs", "3", "--baseline", "train.steps=1"]
    argv += ["--metric", "m1", "--metric", "m2", "--quiet", "--backend", "ray", "--address", "host:1"]
    argv += ["--power", "0.9", "--detect", "0.5", "--detect", "2", "--log-scale", "m1", "--holm", "metric"]
    argv += ["--table-only", "--order", "seed"]
    assert cli.main(argv) == 0
    assert calls[-1] == {
        "config": str(config_file_2),
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
    assert cli.main(["sweep", str(config_file_2), "--grid", "a=x"]) == 0
    assert calls[-1] == {
        "config": str(config_file_2),
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
    calls = _record_sweep_2(monkeypatch)
    _shipped(monkeypatch, Path("/x/toy.toml"), "particle_attention/toy")
    assert cli.main(["sweep", "particle_attention/toy", "--grid", "a=1", "--preset", "smoke"]) == 0
    assert calls[-1]["out"] == "runs/sweep-particle_attention-toy-smoke"
    assert cli.main(["sweep", "particle_attention/toy", "--grid", "a=1"]) == 0
    assert calls[-1]["out"] == "runs/sweep-particle_attention-toy"


def test_sweep_status_is_1_when_a_point_failed(config_file_2, monkeypatch):
    """A table with failed points exits 1; an empty ``failed`` list exits 0 (negative control)."""
    _record_sweep_2(monkeypatch, failed=["a=1 seed 0"])
    assert cli.main(["sweep", str(config_file_2), "--grid", "a=1"]) == 1
    _record_sweep_2(monkeypatch, failed=[])
    assert cli.main(["sweep", str(config_file_2), "--grid", "a=1"]) == 0


@pytest.mark.parametrize(
    ("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["sigint", "sigterm"]
)
def test_sweep_interrupted_says_to_run_it_again(signum, status, config_file_2, monkeypatch, capsys):
    """A :class:`RunInterrupted` inside the sweep: ``meanfield sweep: <message>; run the same command again to
    resume`` on stderr and status 128 + signum."""
    _record_sweep_2(monkeypatch, raises=RunInterrupted("stopped by a signal", signum))
    assert cli.main(["sweep", str(config_file_2), "--grid", "a=1"]) == status
    assert capsys.readouterr() == (
        "",
        "meanfield sweep: stopped by a signal; run the same command again to resume\n",
    )


def test_sweep_second_interrupt_is_status_130_with_its_message(config_file_2, monkeypatch, capsys):
    """A :class:`KeyboardInterrupt` inside the sweep: the documented one-line message and status 130."""
    _record_sweep_2(monkeypatch, raises=KeyboardInterrupt())
    assert cli.main(["sweep", str(config_file_2), "--grid", "a=1"]) == 130
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
    extra, message, config_file_2, monkeypatch, capsys
):
    """A bad ``--power``, ``--detect`` or ``--grid``: the :class:`ConfigError` as ``meanfield sweep: error:
    <message>`` (status 2) and :func:`sweep_runs` never called."""
    calls = _record_sweep_2(monkeypatch)
    assert cli.main(["sweep", str(config_file_2), "--grid", "a=1", *extra]) == 2
    assert capsys.readouterr() == ("", f"meanfield sweep: error: {message}\n")
    assert calls == []
