"""The longest classes and functions of the package, by AST line span (docstrings included), against the
design's limits (docs/design.md, "Pieces stay short": no class over 400 lines, no function over 150):
``python tools/code_shape.py [--top N]``. Exits 1 when a piece is over its limit.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "meanfield"
LIMITS = {"class": 400, "function": 150}


def pieces(root: Path = PACKAGE) -> list[tuple[str, str, int]]:
    """``(kind, dotted name, lines)`` of every class and function (methods and nested ones included)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text(), filename=str(path))

        def visit(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    kind = "class" if isinstance(child, ast.ClassDef) else "function"
                    name = f"{prefix}.{child.name}"
                    found.append((kind, name, child.end_lineno - child.lineno + 1))
                    visit(child, name)

        visit(tree, module)
    return found


def main(argv: list[str] | None = None, root: Path = PACKAGE) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=3, help="how many of each kind to list (default 3)")
    args = parser.parse_args(argv)
    everything = pieces(root)
    over = []
    for kind, limit in LIMITS.items():
        ranked = sorted((p for p in everything if p[0] == kind), key=lambda p: -p[2])
        print(f"longest {'classes' if kind == 'class' else 'functions'} (limit {limit} lines):")
        for _, name, lines in ranked[: args.top]:
            print(f"  {lines:4d}  {name}")
        over += [(name, lines, limit) for _, name, lines in ranked if lines > limit]
    for name, lines, limit in over:
        print(f"over the limit: {name} has {lines} lines (limit {limit})", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
