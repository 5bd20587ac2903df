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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="meanfield",
        description="Mean-field Langevin dynamics: training as an interacting-particle SDE.",
    )
    parser.add_argument("--version", action="version", version=f"meanfield {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
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
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
