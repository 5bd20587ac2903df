"""Which way the package's imports go (docs/design.md, "Which way imports go"): every import of a meanfield module,
at module level or inside a function, points to its own subpackage or down to a lower floor, never up or
sideways: ``python tools/import_floors.py``. Prints each import that breaks the rule and exits 1 if there is one.

The floors, lowest first (a top-level module or subpackage of ``meanfield``):

0. the base: ``_checks``, ``_io``, ``config``, ``seeds``, ``_background``, ``_replicas``, ``_display``,
   ``progress`` (which import nothing of meanfield but each other, in that order);
1. ``drift``, ``data``, ``shipped``; 2. ``stepping``, ``optim`` (its projections and β schedules are drift's);
3. ``metrics``; 4. ``nn``, ``studies``; 5. ``tasks``; 6. ``runs``; 7. the package's face ``meanfield/__init__.py``;
8. ``cli``; 9. ``__main__``.

Within the base the order above is the rule too (a base module imports only earlier ones).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "meanfield"
BASE = ("_checks", "_io", "config", "seeds", "_background", "_replicas", "_display", "progress")
FLOORS = {
    **{name: 0 for name in BASE},
    **{name: 1 for name in ("drift", "data", "shipped")},
    "stepping": 2,
    "optim": 2,
    "metrics": 3,
    "nn": 4,
    "studies": 4,
    "tasks": 5,
    "runs": 6,
    "": 7,  # meanfield/__init__.py, the face
    "cli": 8,
    "__main__": 9,
}


def _part(module: str) -> str:
    """The top-level piece of ``meanfield.a.b`` (``a``); ``""`` for ``meanfield`` itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imported(node: ast.AST, module: str, is_package: bool, root: Path) -> list[str]:
    """The meanfield modules an import statement names (``from meanfield import x``: ``meanfield.x`` where ``x`` is
    a module of the package, else the face ``meanfield``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "meanfield"]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target.split(".")[0] != "meanfield":
        return []
    out = []
    for alias in node.names:
        candidate = f"{target}.{alias.name}"
        path = root.parent.joinpath(*candidate.split("."))
        out.append(candidate if path.with_suffix(".py").is_file() or path.is_dir() else target)
    return out


def breaks(root: Path = PACKAGE) -> list[str]:
    """``"importer -> imported (floor f -> g)"`` for each import against the rule."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("").parts
        is_package = rel[-1] == "__init__"
        module = ".".join(rel[:-1] if is_package else rel)
        here = _part(module)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            for target in _imported(node, module, is_package, root):
                there = _part(target)
                if there == here:
                    continue
                f, g = FLOORS.get(here), FLOORS.get(there)
                if f is None or g is None:
                    found.append(f"{module} -> {target}: {(here if f is None else there)!r} has no floor (add it to FLOORS)")
                elif g > f or (g == f and (f != 0 or BASE.index(there) > BASE.index(here))):
                    found.append(f"{module} -> {target} (floor {f} -> {g})")
    return sorted(set(found))


def main(root: Path = PACKAGE) -> int:
    found = breaks(root)
    for line in found:
        print(f"import against the floors: {line}")
    if not found:
        print(f"every import of {root.name} goes down or stays in its subpackage ({len(FLOORS)} pieces on {len(set(FLOORS.values()))} floors)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
