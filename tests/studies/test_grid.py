"""meanfield.studies.grid: the points, the seeds and the pairing shared by both sweeps."""

import math

import numpy as np
import pytest
import torch

from meanfield.runs.sweeps import expand
from meanfield.studies.grid import (
    baseline_runs,
    csv_text,
    grid_points,
    is_number,
    paired_values,
    point_key,
    runs_of,
    seed_list,
)
from meanfield.studies.in_memory import sweep


def test_grid_points_is_the_product_in_key_order_with_python_cells():
    points, names = grid_points({"a": [1, 2], "b": (np.float64(0.5), torch.tensor(1.5))})
    assert names == ("a", "b")
    assert points == [{"a": 1, "b": 0.5}, {"a": 1, "b": 1.5}, {"a": 2, "b": 0.5}, {"a": 2, "b": 1.5}]
    assert all(type(p["b"]) is float for p in points)
    listed, names = grid_points([{"a": 1}, {"b": 2, "a": 3}])
    assert names == ("a", "b") and listed == [{"a": 1}, {"b": 2, "a": 3}]


def test_grid_points_refuses_bad_grids_in_one_line():
    with pytest.raises(TypeError, match=r"^grid\['a'\] must be a sequence of values, got str$"):
        grid_points({"a": "12"})
    with pytest.raises(ValueError, match="at least one point"):
        grid_points({"a": []})
    with pytest.raises(ValueError, match=r"^grid must not define 'seed'"):
        grid_points({"seed": [1]})
    assert grid_points({"seed": [1]}, reserved=())[0] == [{"seed": 1}]  # a run-folder grid names no column


def test_seed_list_and_runs_of_put_the_seed_fastest():
    assert seed_list(3) == [0, 1, 2] and seed_list((np.int64(4), 7)) == [4, 7]
    for bad, error in (
        (0, ValueError),
        ([], ValueError),
        ([1.5], ValueError),
        ("01", TypeError),
        (True, TypeError),
    ):
        with pytest.raises(error):
            seed_list(bad)
    with pytest.raises(ValueError, match=r"^seeds must be distinct \(a repeated seed counts one run twice\), got \[0\] more"):
        seed_list([0, 0, 1])  # would pair and count seed 0 twice: n = 3 where 2 runs exist
    assert runs_of([{"a": 1}, {"a": 2}], [5, 6]) == [
        {"a": 1, "seed": 5}, {"a": 1, "seed": 6}, {"a": 2, "seed": 5}, {"a": 2, "seed": 6},
    ]  # fmt: skip


def test_both_sweeps_expand_the_same_grid_to_the_same_runs():
    """The run-folder sweep's ``expand`` and the in-memory sweep's rows come from one core: same points, same
    order, same seeds."""
    grid, seeds = {"a": [1, 2], "b": ["x", "y"]}, [3, 0]
    memory = sweep(lambda a, b, seed: {"v": float(seed)}, grid, seeds=seeds)
    assert [{k: r[k] for k in ("a", "b", "seed")} for r in memory.rows] == expand(grid, seeds)


def test_point_key_tells_int_from_float_and_text():
    assert point_key({"a": 1, "b": "1"}, ["a", "b"]) != point_key({"a": 1.0, "b": "1"}, ["a", "b"])
    assert point_key({"a": 1}, ["a", "b"]) == ("1", "None")


def test_pairing_matches_seeds_and_skips_what_is_missing():
    """A point pairs with its baseline seed by seed, over the seeds where both have a finite value; a
    pairing by position instead of by seed would give other pairs (the negative control)."""
    rows = [
        {"a": 0, "seed": 1, "m": 10.0},
        {"a": 0, "seed": 0, "m": 20.0},
        {"a": 0, "seed": 2, "m": 30.0},
        {"a": 1, "seed": 0, "m": 21.0},
        {"a": 1, "seed": 1, "m": 11.5},
        {"a": 1, "seed": 2, "m": math.nan},
        {"a": 1, "seed": 3, "m": 5.0},
    ]
    is_base, base = baseline_runs({"a": 1}, {"a": 0}, rows, ["a"])
    assert not is_base and sorted(base) == [0, 1, 2]
    a, b = paired_values([r for r in rows if r["a"] == 1], base, "m")
    assert (a, b) == ([21.0, 11.5], [20.0, 10.0])
    by_position = [r["m"] for r in rows if r["a"] == 0][:2]
    assert b != by_position
    assert baseline_runs({"a": 0}, {"a": 0}, rows, ["a"])[0]


def test_is_number_and_csv_text():
    assert [is_number(v) for v in (1, 1.5, True, math.nan, math.inf, "1", None)] == [
        True, True, False, False, False, False, False,
    ]  # fmt: skip
    assert csv_text([{"a": 1, "b": None}, {"c": "x", "a": 2.5}]) == "a,b,c\n1,,\n2.5,,x\n"
    assert csv_text([]) == "\n"
