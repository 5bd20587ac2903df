"""Rename sweep point folders written under the former names (``key=value`` joined by ``,``) to today's.

    python experiments/migrate_run_names.py --dry-run          # print what it would do, change nothing
    python experiments/migrate_run_names.py                    # every sweep under experiments/*/results/
    python experiments/migrate_run_names.py runs/beta-sweep …  # or these folders (searched for sweep.json)

Sweeps used to name a point's folder ``data.d=16,optim.beta=0.0001,seed=0`` (and a schedule table
``optim.beta=_kind_=__cosine_,_start_=_0.001,_end_=_1e-06_,seed=3``); :func:`meanfield.runs.sweeps.point_name`
now gives ``data.d=16_optim.beta=0.0001_seed=0`` (only ``[A-Za-z0-9._=-]``, at most 80 characters). For every
sweep folder (one holding ``sweep.json``) the script expands the sweep's points from ``sweep.json`` exactly as
``meanfield sweep`` does and, for each point:

1. renames ``<former name>/`` to ``<point_name>/``, after checking that the folder's ``config.toml`` holds the
   point's values (a folder that does not, or whose new name is already taken, is reported and left alone);
2. writes ``<point_name>/point.json`` (the point's values, its full override list and presets, as a sweep
   writes it before running a point) where it is missing;
3. adds the ``folder`` column to ``runs.csv`` (after ``seed``, as a sweep writes it now) once every row
   matches its point; every other byte of the file is kept.

Then it rewrites the committed files that name a renamed folder by its path (``.json``, ``.md``, ``.csv``,
``.txt``, ``.toml`` files under the same roots, e.g. ``token_dynamics/results/trained_lm/config.json``):
``…/results/quick_mha/model.attention=mha,seed=0`` → ``…/results/quick_mha/model.attention=mha_seed=0``.
It is idempotent (a second run finds nothing to do) and exits with status 1 when a path component under the
roots is still outside ``[A-Za-z0-9._=-]`` or something was left alone. A sweep resumed by ``meanfield
sweep`` renames its own old folders as it goes, so the script is needed only for folders that are read
(reports) before the sweep runs again.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from pathlib import Path

from meanfield.config import load_toml
from meanfield.runs.sweeps import (
    PRESET_AXIS,
    _legacy_point_name,
    _write_point,
    expand,
    point_name,
    point_overrides,
    point_preset,
)

REPO = Path(__file__).resolve().parents[1]
SAFE = re.compile(r"[A-Za-z0-9._=-]+")
TEXT = (".json", ".md", ".csv", ".txt", ".toml")
RUN_FILES = {"config.toml", "summary.json", "environment.json", "metrics.jsonl", "point.json"}


def _config_value(config: dict, key: str):
    """The value of a point's key in a resolved configuration (``seed`` is top level)."""
    node = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return KeyError
        node = node[part]
    return node


def _mismatch(folder: Path, point: dict) -> str | None:
    """Why ``folder/config.toml`` does not hold ``point`` (``None`` when it does)."""
    try:
        config = load_toml(folder / "config.toml")
    except Exception as error:  # noqa: BLE001 — reported, the folder is left alone
        return f"unreadable config.toml ({type(error).__name__}: {error})"
    for key, value in point.items():
        if key == PRESET_AXIS:
            continue
        stored = _config_value(config, key)
        if stored is KeyError or stored != value:
            return f"config.toml has {key} = {'(missing)' if stored is KeyError else repr(stored)}, not {value!r}"
    return None


def _csv_text(header: list[str], rows: list[list[str]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")  # as meanfield.runs.sweeps._csv writes it
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def _runs_csv(path: Path, points: list[dict], names: list[str]) -> tuple[str | None, str | None]:
    """``(new text, None)`` for ``runs.csv`` with a ``folder`` column, ``(None, None)`` when it has one, or
    ``(None, why)`` when its rows do not match the points."""
    text = path.read_text()
    header, *rows = list(csv.reader(io.StringIO(text)))
    if "folder" in header:
        return None, None
    if _csv_text(header, rows) != text:
        return None, "not written by meanfield sweep (a rewrite would change it)"
    if len(rows) != len(points):
        return None, f"{len(rows)} rows for {len(points)} points"
    for row, point in zip(rows, points):
        cells = dict(zip(header, row))
        for key, value in point.items():
            if cells.get(key) != ("" if value is None else str(value)):
                return None, f"a row has {key} = {cells.get(key)!r}, its point {value!r}"
    at = header.index("seed") + 1 if "seed" in header else len(header)
    rows = [[*row[:at], name, *row[at:]] for row, name in zip(rows, names)]
    return _csv_text([*header[:at], "folder", *header[at:]], rows), None


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path.resolve())


def migrate(roots: list[Path], dry_run: bool) -> int:
    say = (lambda text: print("would " + text)) if dry_run else print
    counts = dict(renamed=0, point_json=0, runs_csv=0, files=0, left=0)
    moves: list[tuple[str, str]] = []  # (old path, new path) of every point, as files name them
    for spec_path in sorted(p for root in roots for p in root.rglob("sweep.json")):
        sweep = spec_path.parent
        spec = json.loads(spec_path.read_text())
        every = {}  # every command's points, with their command (sweep.json's "commands", else its one grid)
        for command in spec.get("commands") or [spec]:
            for p in expand(command["grid"], command["seeds"]):
                every.setdefault(point_name(p), (p, command))
        left_here = False  # a point of this sweep left alone: its runs.csv is left alone too
        for name, (point, command) in every.items():
            old, new = sweep / _legacy_point_name(point), sweep / name
            moved = False
            if old != new and old.is_dir():
                why = f"its new name {name} is taken" if new.exists() else _mismatch(old, point)
                if why:
                    print(f"left alone: {_shown(old)} ({why})")
                    counts["left"] += 1
                    left_here = True
                    continue
                say(f"rename {_shown(old)} -> {name}")
                if not dry_run:
                    old.rename(new)
                moved = True
                counts["renamed"] += 1
            if old != new and (new.is_dir() or moved):  # also when renamed by an earlier, interrupted run
                moves.append((_shown(old), _shown(new)))
            if (new.is_dir() or (dry_run and moved)) and not (new / "point.json").exists():
                overrides = [*command.get("overrides", []), *point_overrides(point)]
                say(f"write {_shown(new / 'point.json')}")
                if not dry_run:
                    _write_point(new, point, overrides, point_preset(point, command.get("preset")))
                counts["point_json"] += 1
        runs = sweep / "runs.csv"
        if runs.is_file() and left_here:
            print(f"left alone: {_shown(runs)} (a point's folder was left alone: its folder cell would be wrong)")
            counts["left"] += 1
        elif runs.is_file():
            latest = expand(spec["grid"], spec["seeds"])  # runs.csv holds the latest command's points
            text, why = _runs_csv(runs, latest, [point_name(p) for p in latest])
            if why:
                print(f"left alone: {_shown(runs)} ({why})")
                counts["left"] += 1
            elif text is not None:
                say(f"add the folder column to {_shown(runs)}")
                if not dry_run:
                    runs.write_text(text)
                counts["runs_csv"] += 1

    if moves:  # files that name a former folder by its path; the longest paths first
        patterns = [
            (old, re.compile(re.escape(old) + r"(?![A-Za-z0-9._=,+~-])"), new)
            for old, new in sorted(moves, key=lambda m: -len(m[0]))
        ]
        for path in sorted(p for root in roots for p in root.rglob("*") if p.suffix in TEXT and p.is_file()):
            if path.name in RUN_FILES and (path.parent / "environment.json").is_file():
                continue  # a run folder's own files
            text = path.read_text()
            changed = text
            for old, pattern, new in patterns:
                if old in changed:
                    changed = pattern.sub(new, changed)
            if changed != text:
                say(f"rewrite the folder paths in {_shown(path)}")
                if not dry_run:
                    path.write_text(changed)
                counts["files"] += 1

    unsafe = [
        p
        for root in roots
        for p in root.rglob("*")
        if not all(SAFE.fullmatch(c) for c in p.relative_to(root).parts)
    ]
    print(
        f"{'dry run: ' if dry_run else ''}{counts['renamed']} folders renamed, {counts['point_json']} point.json "
        f"written, {counts['runs_csv']} runs.csv given the folder column, {counts['files']} other files "
        f"rewritten, {counts['left']} left alone; {len(unsafe)} paths under the roots with unsafe names"
        + (" (before the renames)" if dry_run else "")
    )
    for p in unsafe[:20] if not dry_run else []:
        print(f"  unsafe: {_shown(p)}")
    return 1 if counts["left"] or (unsafe and not dry_run) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "roots", nargs="*", type=Path, help="folders to migrate (default experiments/*/results)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print what would change, change nothing")
    args = parser.parse_args(argv)
    roots = args.roots or sorted(REPO.glob("experiments/*/results"))
    return migrate([r.resolve() for r in roots], args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
