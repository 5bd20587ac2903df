"""The ``meanfield`` command line."""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported: shared CPUs


def _solvers(args: argparse.Namespace) -> int:
    from .solvers import SOLVERS

    print(f"{'solver':<16} {'additive':>16} {'diagonal':>16} {'general':>16}   (strong / weak order)")
    for name, make in SOLVERS.items():
        solver = make()

        def cell(noise: str, solver=solver) -> str:
            s, w = solver.strong_order(noise), solver.weak_order(noise)
            return "—" if s is None else f"{s:g} / {w:g}"

        print(f"{name:<16} {cell('additive'):>16} {cell('diagonal'):>16} {cell('general'):>16}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from .validation import validate

    report = validate(
        args.checks or None, preset=args.preset, out=args.out, theory_dir=args.theory, resume=args.resume
    )
    return 0 if report.passed else 1


def _figures(args: argparse.Namespace) -> int:
    from .figures import generate

    paths = generate(args.out, preset=args.preset, keep_existing=not args.force)
    print(f"{len(paths)} figures in {args.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="meanfield",
        description="Mean-field Langevin dynamics: training as an interacting-particle SDE.",
    )
    parser.add_argument("--version", action="version", version=f"meanfield {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
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
        "--theory", default=None, help="folder of the checks (default: ./theory or the source checkout's)"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="reuse the finished results already in --out (after an interruption)",
    )
    p.set_defaults(func=_validate)
    p = sub.add_parser(
        "figures", help="regenerate the documentation figures (theory checks' plots, quickstart)"
    )
    p.add_argument("--out", default="docs/figures", help="output folder (default: docs/figures)")
    p.add_argument("--preset", choices=("fast", "full"), default="fast")
    p.add_argument("--force", action="store_true", help="regenerate figures that already exist")
    p.set_defaults(func=_figures)
    p = sub.add_parser("solvers", help="list the solvers and their declared strong/weak orders")
    p.set_defaults(func=_solvers)
    return parser


def _version() -> str:
    from . import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    from .validation import InputError

    try:
        return args.func(args)
    except InputError as error:  # a bad check name, preset or folder: one line, exit 2 (bugs keep tracebacks)
        print(f"meanfield {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
