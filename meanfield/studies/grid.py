r"""The core of both sweeps: the grid's points, the seeds, and the pairing of a point with its baseline.

A sweep runs every point of a grid once per seed. [`sweep`][meanfield.studies.in_memory.sweep] (in memory) and
[`sweep_runs`][meanfield.runs.sweeps.sweep_runs] (one run folder per point) take their points from
[`grid_points`][meanfield.studies.grid.grid_points], their seeds from [`seed_list`][meanfield.studies.grid.seed_list], their
(point, seed) runs from [`runs_of`][meanfield.studies.grid.runs_of], and compare a point with its baseline seed by seed
through [`paired_values`][meanfield.studies.grid.paired_values]; both tables are a
[`SummaryTable`][meanfield.studies.summary.SummaryTable].

**Pairing.** The baseline names values of some grid keys; the baseline of a point $p$ is $p$ with those values
put in, $b(p) = p \oplus \mathrm{baseline}$, and its runs pair with $p$'s by seed: the paired differences
$d_s = y_s(p) - y_s(b(p))$ over the seeds $s$ where both finished.

Imports: the base modules only (used by ``studies`` and ``runs``).
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._checks import check_int

__all__ = [
    "RESERVED",
    "grid_points",
    "seed_list",
    "runs_of",
    "point_key",
    "baseline_runs",
    "paired_values",
    "is_number",
    "csv_text",
]

RESERVED = ("seed", "error", "t")
"""Names a grid may not define: columns of a sweep's tables."""


def _cell(value: object) -> object:
    """A table cell: NumPy and one-element tensor values become Python numbers."""
    if isinstance(value, (np.generic, np.ndarray, torch.Tensor)):
        return value.item()
    return value


def grid_points(
    grid: Mapping[str, Sequence] | Sequence[Mapping], reserved: Sequence[str] = RESERVED
) -> tuple[list[dict], tuple[str, ...]]:
    """The points of a grid and its parameter names.

    Args:
        grid: ``{"beta": [...], "M": [...]}`` (the Cartesian product, the last key varying fastest) or a list of
            points ``[{"beta": 0.1, "M": 64}, ...]``.
        reserved: names the grid may not define.

    Returns:
        ``(points, names)``: one dict per point (NumPy and one-element tensor values as Python numbers).

    Raises:
        TypeError: for a grid of another shape, or an axis that is not a sequence of values.
        ValueError: for an empty grid or a reserved name.
    """
    if isinstance(grid, Mapping):
        for name, values in grid.items():
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                raise TypeError(f"grid[{name!r}] must be a sequence of values, got {type(values).__name__}")
        names = tuple(grid)
        points = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*grid.values())]
    elif isinstance(grid, Sequence) and all(isinstance(p, Mapping) for p in grid):
        points = [dict(p) for p in grid]
        names = tuple(dict.fromkeys(k for p in points for k in p))
    else:
        raise TypeError(
            f"grid must be a mapping name -> values (a product grid) or a list of mappings (points), "
            f"got {type(grid).__name__}"
        )
    if not points:
        raise ValueError("grid must contain at least one point, got an empty grid")
    for name in reserved:
        if name in names:
            raise ValueError(f"grid must not define {name!r} (a column of the table), got {list(names)}")
    return [{k: _cell(v) for k, v in p.items()} for p in points], names


def seed_list(seeds: object, name: str = "seeds") -> list[int]:
    """A number of seeds ``n`` (``0, …, n − 1``) or the seeds themselves, as a non-empty list of ints.

    Raises:
        TypeError: for anything but an int or a sequence.
        ValueError: for no seeds, or a seed that is not an int.
    """
    if isinstance(seeds, bool) or not isinstance(seeds, (int, Sequence)) or isinstance(seeds, (str, bytes)):
        raise TypeError(
            f"{name} must be an int (a number of seeds) or a sequence of ints, got {type(seeds).__name__}"
        )
    seeds = list(range(check_int(name, seeds))) if isinstance(seeds, int) else [_cell(s) for s in seeds]
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ValueError(f"{name} must be a non-empty sequence of ints, got {seeds}")
    if len(set(seeds)) < len(seeds):
        repeated = sorted({s for s in seeds if seeds.count(s) > 1})
        raise ValueError(f"{name} must be distinct (a repeated seed counts one run twice), got {repeated} more than once")
    return seeds


def runs_of(points: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """Every (point, seed) of a sweep as ``{**point, "seed": s}``, in grid order, the seed varying fastest."""
    return [{**point, "seed": seed} for point in points for seed in seeds]


def point_key(row: Mapping[str, Any], keys: Sequence[str]) -> tuple[str, ...]:
    """What identifies a row's grid point: the ``repr`` of its values of ``keys`` (``1`` and ``1.0`` differ)."""
    return tuple(repr(row.get(k)) for k in keys)


def baseline_runs(
    point: Mapping[str, Any],
    baseline: Mapping[str, Any],
    rows: Iterable[Mapping[str, Any]],
    keys: Sequence[str],
) -> tuple[bool, dict[Any, Mapping[str, Any]]]:
    r"""The baseline of ``point``, $b(p) = p \oplus \mathrm{baseline}$, among ``rows`` (the finished runs).

    Returns:
        ``(is_baseline, runs)``: whether ``point`` is its own baseline, and the runs of $b(p)$ by seed.
    """
    base = {**point, **baseline}
    runs = {r["seed"]: r for r in rows if all(r.get(k) == base[k] for k in keys)}
    return all(point.get(k) == base[k] for k in keys), runs


def is_number(value: Any) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def paired_values(
    runs: Iterable[Mapping[str, Any]], base: Mapping[Any, Mapping[str, Any]], metric: str
) -> tuple[list[float], list[float]]:
    """``(a, b)``: ``metric`` of a point's runs and of its baseline's runs of the same seeds, where both are
    finite numbers (in the order of ``runs``)."""
    pairs = [
        (r[metric], base[r["seed"]][metric])
        for r in runs
        if r["seed"] in base and is_number(r.get(metric)) and is_number(base[r["seed"]].get(metric))
    ]
    return [a for a, _ in pairs], [b for _, b in pairs]


def csv_text(
    rows: Sequence[Mapping], columns: Sequence[str] | None = None, path: str | os.PathLike | None = None
) -> str:
    """Rows as CSV (``columns``: default, every key in order of first appearance; missing and ``None`` cells
    empty), written to ``path`` when given. Returns the text."""
    columns = list(dict.fromkeys(k for r in rows for k in r)) if columns is None else list(columns)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in rows)
    text = buffer.getvalue()
    if path is not None:
        Path(path).write_text(text)
    return text
