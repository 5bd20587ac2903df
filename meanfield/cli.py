"""The ``meanfield`` command line."""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported: shared CPUs


def _solvers(args: argparse.Namespace) -> int:
    from .stepping.solvers import SOLVERS

    print(f"{'solver':<16} {'additive':>16} {'diagonal':>16} {'general':>16}   (strong / weak order)")
    for name, make in SOLVERS.items():
        solver = make()

        def cell(noise: str, solver=solver) -> str:
            s, w = solver.strong_order(noise), solver.weak_order(noise)
            return "—" if s is None else f"{s:g} / {w:g}"

        print(f"{name:<16} {cell('additive'):>16} {cell('diagonal'):>16} {cell('general'):>16}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from .studies.validation import validate

    report = validate(
        args.checks or None, preset=args.preset, out=args.out, theory_dir=args.theory, resume=args.resume
    )
    return 0 if report.passed else 1


def _figures(args: argparse.Namespace) -> int:
    from .studies.figures import generate

    paths = generate(args.out, preset=args.preset, keep_existing=not args.force)
    print(f"{len(paths)} figures in {args.out}")
    return 0


def _config_arg(args: argparse.Namespace) -> tuple[str, str]:
    """The configuration file of ``args.config`` (a TOML file, or a shipped name) and the stem of the default
    output folder: the file's stem, or the name with ``/`` as ``-`` (``runs/particle_attention-toy-smoke``)."""
    from .shipped import find_config
    from .studies.validation import InputError

    if args.config is None:
        raise InputError("a configuration is needed: a shipped name (meanfield run --list) or a TOML file")
    path, name = find_config(args.config)
    stem = name.replace("/", "-") if name is not None else os.path.splitext(os.path.basename(path))[0]
    return str(path), stem


def _list_configs() -> int:
    from .shipped import configs, describe, experiments_dir

    found = configs()
    if not found:
        print("no shipped configurations found")
        return 0
    rows = [
        (name, ", ".join(presets), description)
        for name, (description, presets) in ((name, describe(path)) for name, path in found.items())
    ]
    width = max(len(r[0]) for r in rows + [("name", "", "")])
    pwidth = max(len(r[1]) for r in rows + [("", "presets", "")])
    print(f"{'name':<{width}}  {'presets':<{pwidth}}  description")
    for name, presets, description in rows:
        print(f"{name:<{width}}  {presets:<{pwidth}}  {description}")
    print(
        f"\n{len(found)} configurations in {experiments_dir()}\n"
        "meanfield run NAME --preset PRESET trains one; meanfield run NAME --print-config > my.toml copies one "
        "to start your own (then: meanfield run my.toml)"
    )
    return 0


def _print_config(path: str, args: argparse.Namespace) -> int:
    from pathlib import Path

    from .config import load_toml, resolve, to_toml

    if args.preset is None and not args.set:
        sys.stdout.write(Path(path).read_text(encoding="utf-8"))  # as shipped, comments and presets kept
        return 0
    resolved = resolve(load_toml(path), args.preset, args.set)
    what = " ".join(
        [f"--preset {args.preset}"] * (args.preset is not None) + [f"--set {o}" for o in args.set]
    )
    sys.stdout.write(
        to_toml(resolved, header=f"{args.config} resolved with {what} (meanfield run --print-config)")
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    from .runs import NonFiniteLossError, RunInterrupted, run

    if args.list:
        return _list_configs()
    config, stem = _config_arg(args)
    if args.print_config:
        return _print_config(config, args)
    out = (
        args.out
        if args.out is not None
        else os.path.join("runs", stem + (f"-{args.preset}" if args.preset else ""))
    )
    try:
        run(
            config,
            out,
            preset=args.preset,
            overrides=args.set,
            resume=args.resume,
            quiet=args.quiet,
        )
    except RunInterrupted as error:
        print(f"meanfield run: {error}", file=sys.stderr)
        return 128 + error.signum  # 130 after SIGINT, 143 after SIGTERM, as a shell reports them
    except KeyboardInterrupt:  # a second Ctrl-C during the first one's checkpoint
        print(
            f"meanfield run: stopped at once by a second interrupt; {out} keeps its last complete checkpoint, "
            "--resume continues from it",
            file=sys.stderr,
        )
        return 130
    except NonFiniteLossError as error:
        print(f"meanfield run: error: {error}", file=sys.stderr)
        return 1
    return 0


def _seeds(text: str) -> list[int]:
    """``--seeds 0,1,2`` → ``[0, 1, 2]`` (empty items skipped; nothing at all is seed 0)."""
    from .studies.validation import InputError

    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise InputError(f"--seeds must be comma-separated integers (0,1,2), got {text!r}") from None
    return seeds or [0]


def _sweep(args: argparse.Namespace) -> int:
    from .runs import RunInterrupted
    from .runs.sweeps import TableOptions, parse_grid, sweep_runs

    seeds = _seeds(args.seeds)
    config, stem = _config_arg(args)
    out = args.out or f"runs/sweep-{stem}" + (f"-{args.preset}" if args.preset else "")
    try:
        options = TableOptions(
            power=args.power, detect=tuple(args.detect), log_metrics=tuple(args.log_scale), holm=args.holm
        )
        table = sweep_runs(
            config,
            parse_grid(args.grid),
            seeds,
            out,
            preset=args.preset,
            overrides=args.set,
            jobs=args.jobs,
            baseline=args.baseline,
            metrics=args.metric or None,
            quiet=args.quiet,
            backend=args.backend,
            address=args.address,
            table=options,
            run=not args.table_only,
            order=args.order,
        )
    except RunInterrupted as error:
        print(f"meanfield sweep: {error}; run the same command again to resume", file=sys.stderr)
        return 128 + error.signum
    except KeyboardInterrupt:
        print(
            "meanfield sweep: stopped at once by a second interrupt; every point keeps its last complete "
            "checkpoint: run the same command again to resume",
            file=sys.stderr,
        )
        return 130
    return 1 if table.failed else 0


def _data(args: argparse.Namespace) -> int:
    from .data import catalog, format_catalog

    print(format_catalog(catalog(args.root)))
    return 0


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors caused by the user's input: printed on one line with exit status 2 (bugs keep tracebacks)."""
    from .config import ConfigError
    from .data import CorruptDataError, DataNotFoundError
    from .runs import RunFolderError
    from .studies.validation import InputError

    return (InputError, ConfigError, DataNotFoundError, CorruptDataError, RunFolderError)


Subcommands = argparse._SubParsersAction  # what add_subparsers returns (the subcommands' parsers)


def _add_validate(sub: Subcommands) -> None:
    """``meanfield validate``: the theory checks."""
    p = sub.add_parser(
        "validate",
        help="run the theory checks against their analytic answers (the main job)",
        description="Run the theory checks in theory/, print a pass/fail table, write report.md, results.json "
        "and one PNG per check; exit 1 if any check fails.",
    )
    p.add_argument("checks", nargs="*", help="check names (default: all)")
    p.add_argument(
        "--preset", choices=("fast", "full"), default="fast", help="fast: minutes (CI); full: paper figures"
    )
    p.add_argument("--out", default="validate-out", help="output folder (default: validate-out)")
    p.add_argument(
        "--theory",
        default=None,
        help="folder of the checks (default: those installed with the package, a checkout's theory/)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="reuse the finished results already in --out (after an interruption)",
    )
    p.set_defaults(func=_validate)


def _add_figures(sub: Subcommands) -> None:
    """``meanfield figures``: the documentation's figures."""
    p = sub.add_parser(
        "figures", help="regenerate the documentation figures (theory checks' plots, overview, quickstart)"
    )
    p.add_argument("--out", default="docs/figures", help="output folder (default: docs/figures)")
    p.add_argument("--preset", choices=("fast", "full"), default="fast")
    p.add_argument("--force", action="store_true", help="regenerate figures that already exist")
    p.set_defaults(func=_figures)


def _add_solvers(sub: Subcommands) -> None:
    """``meanfield solvers``: the solver table."""
    p = sub.add_parser("solvers", help="list the solvers and their declared strong/weak orders")
    p.set_defaults(func=_solvers)


def _config_options(p: argparse.ArgumentParser) -> None:
    """CONFIG, --preset, --set and --quiet: the options of ``run`` and ``sweep``."""
    p.add_argument(
        "config",
        nargs="?",
        help="a shipped configuration by name (char_lm, teacher_student, …: meanfield run --list) "
        "or a TOML file",
    )
    p.add_argument("--preset", default=None, help="a preset of the file: smoke, quick, full, …")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key after the preset (repeatable), e.g. --set train.steps=100",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar, no summary table")


def _add_run(sub: Subcommands) -> None:
    """``meanfield run``: one configured training run."""
    p = sub.add_parser(
        "run",
        help="train a configured task into a run folder (checkpoints, metrics, resume)",
        description="Train the task of CONFIG (a shipped name, see --list, or a TOML file) into a run folder: "
        "config.toml, environment.json, "
        "metrics.jsonl, summary.json, figures/, checkpoints/. Ctrl-C writes a checkpoint (exit 130); a "
        "non-finite loss stops the run (exit 1); a bad configuration is one line (exit 2).",
    )
    _config_options(p)
    p.add_argument(
        "--out", default=None, help="the run folder (default: runs/<name or file stem>[-<preset>])"
    )
    p.add_argument("--resume", action="store_true", help="continue from the folder's latest checkpoint")
    p.add_argument(
        "--list", action="store_true", help="list the shipped configurations, their presets and descriptions"
    )
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the configuration file and exit (to start your own: > my.toml); with --preset/--set, "
        "the resolved configuration",
    )
    p.set_defaults(func=_run)


def _add_sweep(sub: Subcommands) -> None:
    """``meanfield sweep``: a grid of runs over seeds and its tables."""
    p = sub.add_parser(
        "sweep",
        help="run a grid of configurations over seeds; table of means, CIs and paired differences",
        description="One run folder per (grid point, seed) under --out; finished points are skipped and "
        "unfinished ones resume, so an interrupted sweep continues when the command is run again. Writes "
        "runs.csv, summary.csv and summary.md (mean and 95 % t interval over seeds; paired difference against "
        "--baseline with its 95 % t interval, the paired t-test's raw and Holm-adjusted p-values and the "
        "smallest difference detectable at --power). Run it again with other table options to rewrite the "
        "tables of a finished sweep without running anything.",
    )
    _config_options(p)
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="a grid axis (repeatable); the sweep is the product of the axes",
    )
    p.add_argument("--seeds", default="0", help="comma-separated seeds (default: 0)")
    p.add_argument("--jobs", type=int, default=1, help="points run at once, in separate processes")
    p.add_argument(
        "--order",
        choices=("grid", "seed"),
        default="grid",
        help="which points start first: each grid point's seeds in turn (default), or every grid point of a seed "
        "before the next seed's (a study cut short holds whole seeds; one pool keeps --jobs busy across seeds)",
    )
    p.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="where the points run: local processes (--jobs) or Ray tasks (pip install 'meanfield-sde[ray]')",
    )
    p.add_argument("--address", default=None, help="the Ray cluster's address (default: start a local one)")
    p.add_argument("--out", default=None, help="the sweep folder (default: runs/sweep-<config>[-<preset>])")
    p.add_argument(
        "--baseline", default=None, metavar="KEY=V", help="the grid point compared with, seed by seed"
    )
    p.add_argument(
        "--metric", action="append", default=[], help="a final metric to summarise (repeatable; default all)"
    )
    p.add_argument(
        "--detect",
        action="append",
        type=float,
        default=[],
        metavar="D",
        help="a difference to plan for (repeatable): adds 'pairs for Δ = D', the seeds a paired comparison "
        "needs to detect |Δ| = D at --power, at its observed paired sd (ln units for a --log-scale metric)",
    )
    p.add_argument(
        "--power",
        type=float,
        default=0.8,
        help="the power of the 'detectable' column and of --detect (default: 0.8; α = 0.05)",
    )
    p.add_argument(
        "--log-scale",
        action="append",
        default=[],
        metavar="METRIC",
        help="a positive metric (an MSE) summarised on the log scale: geometric mean, t interval of the logs, "
        "paired ratios (repeatable)",
    )
    p.add_argument(
        "--table-only",
        action="store_true",
        help="write the tables of the grid × seeds from the points already finished in --out and run nothing "
        "(a folder filled by several commands gets its whole table; unfinished points are listed as 'not run')",
    )
    p.add_argument(
        "--holm",
        choices=("table", "metric"),
        default="table",
        help="the family of Holm's correction: every paired test of the table (default) or each metric's",
    )
    p.set_defaults(func=_sweep)


def _add_data(sub: Subcommands) -> None:
    """``meanfield data``: the datasets found."""
    p = sub.add_parser("data", help="list the datasets found, their sizes and SHA-256 checks")
    p.add_argument("--root", default=None, help="the data folder (default: $MEANFIELD_DATA or the project's)")
    p.set_defaults(func=_data)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="meanfield",
        description="Mean-field Langevin dynamics: training as an interacting-particle SDE.",
    )
    parser.add_argument("--version", action="version", version=f"meanfield {_version()}")
    parser.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,  # absent from the parsed arguments unless given
        help="print every error with its traceback (not one line): meanfield --debug run …",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (_add_validate, _add_figures, _add_solvers, _add_run, _add_sweep, _add_data):
        add(sub)
    return parser


def _version() -> str:
    from . import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    """The ``meanfield`` command. Its figures are only written to files, so it draws with matplotlib's
    non-interactive ``Agg`` (importing meanfield leaves the backend alone)."""
    import matplotlib

    matplotlib.use("Agg")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    if getattr(args, "debug", False):  # every error with its traceback
        return args.func(args)
    from .runs.folder import ACCESS_ERRNOS, FolderAccessError, write_error

    try:
        return args.func(args)
    except FolderAccessError as error:  # the machine's fault (a full disk, a read-only folder): exit 1
        print(f"meanfield {args.command}: error: {error}", file=sys.stderr)
        return 1
    except _user_errors() as error:  # a bad name, configuration, preset or file: one line, exit 2
        print(f"meanfield {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C outside a run's or a sweep's own handling (while starting, say)
        print(f"meanfield {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `meanfield run --list | head`: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the interpreter's final flush does not fail again
        return 0
    except OSError as error:  # a write the machine refused outside a run's own files (sweep.json, …)
        if error.errno not in ACCESS_ERRNOS:
            raise
        print(f"meanfield {args.command}: error: {write_error(error)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
