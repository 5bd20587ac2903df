"""Whole-behaviour tests of ``meanfield.runs.sweeps`` and the table helpers of ``meanfield.studies.in_memory``.

Every public function and the private helpers they call are pinned against independent answers: grid
parsing and point expansion against hand-written lists, folder names against hand-built strings and
``hashlib`` digests, the sweep table against ``scipy.stats`` (t intervals, ``ttest_rel``, noncentral-t
power) and a hand computation of Holm's adjustment, the Markdown and CSV text against literal strings, and
every error against its exact message. Nothing here runs a training run: the argument checks of
``sweep_runs`` raise before any configuration is loaded.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from _tiny_run import TEACHER, TINY  # tests/_tiny_run.py
from scipy import stats as st

from meanfield import config as _config
from meanfield.config import ConfigError
from meanfield.runs import sweeps
from meanfield.runs.sweeps import TableOptions
from meanfield.seeds import derive_seed
from meanfield.studies import grid as grid_module
from meanfield.studies import in_memory as studies
from meanfield.studies import summary as summary_module
from meanfield.studies.stats import paired_difference


def _h(text: str) -> str:
    """The ``_h`` suffix of a hashed point name: the first 8 hex digits of the SHA-256 of ``text``."""
    return "_h" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def _t_ci(values, level=0.95):
    """Reference Student-t interval (mean, lo, hi) from scipy."""
    a = np.asarray(values, dtype=float)
    se = a.std(ddof=1) / math.sqrt(a.size)
    q = st.t.ppf((1 + level) / 2, a.size - 1)
    return a.mean(), a.mean() - q * se, a.mean() + q * se


def _power(delta, sd, n, alpha):
    """Two-sided paired t-test power from scipy's noncentral t (reference for detectable / pairs)."""
    df = n - 1
    nc = delta * math.sqrt(n) / sd
    tc = st.t.isf(alpha / 2, df)
    return st.nct.sf(tc, df, nc) + st.nct.sf(tc, df, -nc)  # P(T < -tc) = P(-T > tc), -T ~ nct(-nc)


def _is_smallest_n(n, delta, sd, alpha, power):
    """Whether ``n`` (≥ 2) is the smallest number of pairs with power ≥ ``power`` (scipy reference)."""
    return (
        n >= 2
        and _power(delta, sd, n, alpha) >= power
        and (n == 2 or _power(delta, sd, n - 1, alpha) < power)
    )


# --------------------------------------------------------------------------------------------------------
# _split_values, parse_grid, expand


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("a,b", ["a", "b"]),
        (" a , b ", ["a", "b"]),
        ("[1,2],3", ["[1,2]", "3"]),
        ("{k=1,m=2},x", ["{k=1,m=2}", "x"]),
        ('"a,b",c', ['"a,b"', "c"]),
        ("'a,b',c", ["'a,b'", "c"]),
        ("[[1,2],[3]],4", ["[[1,2],[3]]", "4"]),
        ('"x\'y,",z', ['"x\'y,"', "z"]),
        ("a", ["a"]),
        ("a,", ["a", ""]),
    ],
    ids=["plain", "strip", "list", "table", "dquote", "squote", "nested", "mixedquote", "one", "trailing"],
)
def test_split_values(text, parts):
    """``_split_values`` splits at commas outside brackets and quotes, stripping each part (hand answers)."""
    assert sweeps._split_values(text) == parts


def test_parse_grid_values_and_order():
    """``parse_grid`` reads TOML values per item, keeps key order, strips keys; strings stay strings."""
    grid = sweeps.parse_grid([" optim.beta =0,1e-4", "model.n=8,16", "name=adam,sgd", "xs=[1,2],[3]"])
    assert list(grid) == ["optim.beta", "model.n", "name", "xs"]
    assert grid["optim.beta"] == [0, 1e-4]
    assert type(grid["optim.beta"][0]) is int
    assert grid["model.n"] == [8, 16]
    assert grid["name"] == ["adam", "sgd"]
    assert grid["xs"] == [[1, 2], [3]]
    assert sweeps.parse_grid([]) == {}


@pytest.mark.parametrize(
    "item", ["novalue", "=1,2", "key=", "key=  ", " =1"], ids=["nosep", "nokey", "empty", "blank", "blankkey"]
)
def test_parse_grid_malformed(item):
    """A grid item without ``=``, key or values raises with the exact message."""
    with pytest.raises(
        ConfigError, match="^" + re.escape(f"a grid axis must look like key=v1,v2,…, got {item!r}")
    ):
        sweeps.parse_grid([item])


def test_parse_grid_key_twice():
    """A key given twice (after stripping) raises naming it."""
    with pytest.raises(ConfigError, match=r"^grid key 'a' is given twice$"):
        sweeps.parse_grid(["a=1", " a =2"])


def test_expand_product_seed_fastest():
    """``expand``: the Cartesian product in key order, seeds fastest (hand-written list)."""
    got = sweeps.expand({"a": [1, 2], "b": ["x", "y"]}, [5, 6])
    want = [{"a": a, "b": b, "seed": s} for a in (1, 2) for b in ("x", "y") for s in (5, 6)]
    assert got == want
    assert list(got[0]) == ["a", "b", "seed"]
    assert sweeps.expand({}, [3, 4]) == [{"seed": 3}, {"seed": 4}]


def test_expand_needs_a_seed():
    """No seeds raises the exact message."""
    with pytest.raises(ConfigError, match=r"^a sweep needs at least one seed$"):
        sweeps.expand({"a": [1]}, [])


# --------------------------------------------------------------------------------------------------------
# value texts, point names


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1, "1"),
        (1.5, "1.5"),
        (1e20, "1e20"),
        (1e-6, "1e-06"),
        ("ab", "ab"),
        (True, "true"),
        ([1, 2], "[1, 2]"),
    ],
    ids=["int", "float", "bigfloat", "smallfloat", "str", "bool", "list"],
)
def test_name_text(value, text):
    """``_name_text``: TOML text, strings unquoted, ``e+`` dropped only for floats (hand answers)."""
    assert sweeps._name_text(value) == text


def test_value_text_keeps_e_plus():
    """``_value_text`` keeps ``1e+20`` (only ``_name_text`` drops the ``+``), unquotes only strings."""
    assert sweeps._value_text(1e20) == "1e+20"
    assert sweeps._value_text("e+x") == "e+x"
    assert sweeps._value_text([1]) == "[1]"


@pytest.mark.parametrize(
    ("value", "slug"),
    [
        ({"kind": "cosine", "start": 0.001, "end": 1e-6}, "cosine-start-0.001-end-1e-06"),
        ([1, "a b"], "1-a-b"),
        ((2, 3), "2-3"),
        ("a_b c", "a-b-c"),
        ("x__y", "x-y"),
        (1e20, "1e20"),
    ],
    ids=["table", "list", "tuple", "string", "run", "float"],
)
def test_slug(value, slug):
    """``_slug`` spells tables as kind then key-value pairs, lists joined by ``-``, unsafe runs as one ``-``."""
    assert sweeps._slug(value) == slug


@pytest.mark.parametrize(
    ("value", "exact"),
    [(1, True), (0.0001, True), ("adam", True), (True, True), ("1", False), ("a b", False), ("a_b", False),
     ([1], False), ((1,), False), ({"k": 1}, False), ("true", False), (1e20, True)],
    ids=["int", "float", "word", "bool", "numstr", "space", "underscore", "list", "tuple", "dict", "boolstr", "big"],
)  # fmt: skip
def test_exact(value, exact):
    """``_exact``: a safe scalar that reads back as the same type and value (hand classification)."""
    assert sweeps._exact(value) is exact


def test_point_name_plain():
    """A plain point: ``key=value`` joined by ``_`` in point order, no hash (docstring example)."""
    point = {"data.d": 16, "optim.beta": 1e-4, "seed": 0}
    assert sweeps.point_name(point) == "data.d=16_optim.beta=0.0001_seed=0"
    assert sweeps.point_name({"seed": 3, "a": "x"}) == "seed=3_a=x"


def test_point_name_hashed_value():
    """An inexact value is slugged and the name ends with the hash of the exact override lines."""
    sched = {"kind": "cosine", "start": 0.001, "end": 1e-6}
    point = {"optim.beta": sched, "seed": 3}
    text = 'optim.beta={kind = "cosine", start = 0.001, end = 1e-06}\nseed=3'
    assert sweeps.point_name(point) == "optim.beta=cosine-start-0.001-end-1e-06_seed=3" + _h(text)
    assert sweeps.point_name({"a": "1", "seed": 0}) == "a=1_seed=0" + _h('a="1"\nseed=0')


def test_point_name_unsafe_key():
    """A key outside ``[A-Za-z0-9._-]`` is slugged (runs to one ``-``) and the name hashed."""
    point = {"a b/c": 1, "seed": 0}
    assert sweeps.point_name(point) == "a-b-c=1_seed=0" + _h("a b/c=1\nseed=0")


def test_point_name_length_limit():
    """Exactly 80 characters stay unhashed; 81 are cut to 70 plus the hash; a cut ending in ``_`` loses it."""
    assert sweeps.point_name({"k" * 78: 1}) == "k" * 78 + "=1"
    assert sweeps.point_name({"k" * 79: 1}) == "k" * 70 + _h("k" * 79 + "=1")
    point = {"a" * 67: 1, "b" * 20: 2}  # "a"*67 + "=1_" puts "_" at index 69, the last one kept
    assert sweeps.point_name(point) == "a" * 67 + "=1" + _h("a" * 67 + "=1\n" + "b" * 20 + "=2")
    point = {"a" * 68: 1, "b" * 20: 2}  # the cut ends in "1"
    assert sweeps.point_name(point) == "a" * 68 + "=1" + _h("a" * 68 + "=1\n" + "b" * 20 + "=2")
    assert len(sweeps.point_name({"k" * 200: 1})) == 80


def test_legacy_point_name():
    """``_legacy_point_name``: ``key=value`` joined by ``,``, unsafe characters ``_``, long names digested."""
    assert sweeps._legacy_point_name({"a": 1, "b": "x y", "seed": 0}) == "a=1,b=x_y,seed=0"
    assert sweeps._legacy_point_name({"c": 1e20}) == "c=1e+20"
    point = {"k" * 118: 1}  # 120 characters: kept
    assert sweeps._legacy_point_name(point) == "k" * 118 + "=1"
    long = {"k" * 119: 1}  # 121 characters
    name = "k" * 119 + "=1"
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    assert sweeps._legacy_point_name(long) == name[:109] + "~" + digest


def test_point_overrides_and_preset():
    """``point_overrides`` skips ``preset`` and writes TOML values; ``point_preset`` joins with ``+``."""
    point = {"optim.lr": 0.1, "name": "a", "preset": "adam", "seed": 2}
    assert sweeps.point_overrides(point) == ["optim.lr=0.1", 'name="a"', "seed=2"]
    assert sweeps.point_preset(point, "quick") == "quick+adam"
    assert sweeps.point_preset(point, None) == "adam"
    assert sweeps.point_preset({"seed": 0}, "quick") == "quick"
    assert sweeps.point_preset({"seed": 0}, None) is None
    assert sweeps.point_preset({"preset": ""}, "") is None
    assert sweeps.PRESET_AXIS == "preset"


# --------------------------------------------------------------------------------------------------------
# baseline, names, folders


def test_parse_baseline():
    """``_parse_baseline``: None passes through; items are TOML-parsed and checked against the grid."""
    grid = {"a": [1, 2], "b.c": ["x", "y"]}
    assert sweeps._parse_baseline(None, grid) is None
    assert sweeps._parse_baseline("a=2, b.c=x", grid) == {"a": 2, "b.c": "x"}
    with pytest.raises(
        ConfigError,
        match="^" + re.escape("baseline key 'z' is not a grid key; the grid keys are ['a', 'b.c']"),
    ):
        sweeps._parse_baseline("z=1", grid)
    with pytest.raises(
        ConfigError, match="^" + re.escape("baseline a=3 is not one of the grid's values [1, 2]")
    ):
        sweeps._parse_baseline("a=3", grid)
    with pytest.raises(
        ConfigError, match="^" + re.escape("baseline b.c='w' is not one of the grid's values ['x', 'y']")
    ):
        sweeps._parse_baseline("b.c=w", grid)


def test_check_names():
    """``_check_names`` passes distinct names and names both points of a shared one (repeat noted)."""
    sweeps._check_names([{"a": 1}, {"a": 2}], ["x", "y"])
    with pytest.raises(
        ConfigError,
        match="^"
        + re.escape("points {'a': 1} and {'a': 1} would share the run folder 'n' (the grid repeats a value)"),
    ):
        sweeps._check_names([{"a": 0}, {"a": 1}, {"a": 1}], ["m", "n", "n"])
    with pytest.raises(
        ConfigError, match=r"^points \{'a': 1\} and \{'a': 2\} would share the run folder 'n'$"
    ):
        sweeps._check_names([{"a": 1}, {"a": 2}], ["n", "n"])


def test_write_point(tmp_path):
    """``_write_point`` writes the record as JSON, leaves an equal one untouched and replaces a different one."""
    folder = tmp_path / "p"
    folder.mkdir()
    sweeps._write_point(folder, {"a": 1, "seed": 0}, ["a=1", "seed=0"], "quick")
    record = json.loads((folder / "point.json").read_text())
    assert record == {"point": {"a": 1, "seed": 0}, "overrides": ["a=1", "seed=0"], "preset": "quick"}
    compact = json.dumps(record, separators=(",", ":"))
    (folder / "point.json").write_text(compact)
    sweeps._write_point(folder, {"a": 1, "seed": 0}, ["a=1", "seed=0"], "quick")
    assert (folder / "point.json").read_text() == compact  # equal: not rewritten
    sweeps._write_point(folder, {"a": 1, "seed": 0}, ["a=1", "seed=0"], None)
    assert json.loads((folder / "point.json").read_text())["preset"] is None
    (folder / "point.json").write_text("{broken")
    sweeps._write_point(folder, {"a": 2}, [], None)
    assert json.loads((folder / "point.json").read_text()) == {
        "point": {"a": 2},
        "overrides": [],
        "preset": None,
    }


def test_finished(tmp_path, capsys):
    """``_finished``: the summary of a finished run, else None (missing, unreadable with a line, other status)."""
    folder = tmp_path / "p"
    folder.mkdir()
    assert sweeps._finished(folder) is None
    path = folder / "summary.json"
    path.write_text("{not json")
    assert sweeps._finished(folder) is None
    out = capsys.readouterr().out
    assert out.startswith(f"{path} is unreadable (")
    assert out.endswith("); the point is resumed from its checkpoint\n")
    path.write_text(json.dumps({"status": "failed"}))
    assert sweeps._finished(folder) is None
    path.write_text(json.dumps(["finished"]))
    assert sweeps._finished(folder) is None
    summary = {"status": "finished", "final": {"loss": 1.0}}
    path.write_text(json.dumps(summary))
    assert sweeps._finished(folder) == summary
    assert capsys.readouterr().out == ""


def test_adopt_old_folders_legacy_and_config(tmp_path, capsys):
    """Missing points adopt a folder with their legacy name first, else one whose config.toml is theirs."""
    points = [{"a": 1, "seed": 0}, {"a": 2, "seed": 0}, {"a": 3, "seed": 0}, {"a": 4, "seed": 0}]
    names = [sweeps.point_name(p) for p in points]
    configs = [{"x": {"a": p["a"]}, "seed": 0} for p in points]
    (tmp_path / "a=1,seed=0").mkdir()  # legacy name of point 0
    (tmp_path / "a=1,seed=0" / "mark").write_text("0")
    (tmp_path / "yy_copy").mkdir()  # point 0's config too: point 0 already found by its legacy name
    (tmp_path / "yy_copy" / "config.toml").write_text(_config.to_toml(configs[0]))
    (tmp_path / "a=4,seed=0").write_text("a file, not a folder")  # point 3's legacy name, but a file
    other = tmp_path / "zz_old"
    other.mkdir()
    (other / "config.toml").write_text(_config.to_toml(configs[1]))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.toml").write_text("= = =")
    (tmp_path / names[2]).mkdir()  # point 2 already has its folder (holding point 1's config: not free)
    (tmp_path / names[2] / "config.toml").write_text(_config.to_toml(configs[1]))
    (tmp_path / "file.txt").write_text("not a folder")
    sweeps._adopt_old_folders(tmp_path, points, names, configs)
    assert (tmp_path / names[0] / "mark").read_text() == "0"
    assert (tmp_path / names[1] / "config.toml").exists()
    assert not (tmp_path / "a=1,seed=0").exists() and not other.exists()
    assert (tmp_path / "broken").exists() and (tmp_path / "yy_copy" / "config.toml").exists()
    assert (tmp_path / names[2] / "config.toml").exists() and not (tmp_path / names[3]).exists()
    assert (tmp_path / "a=4,seed=0").read_text() == "a file, not a folder"
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"{tmp_path}: renamed the run folder 'a=1,seed=0' to 'a=1_seed=0' (its point {{'a': 1, 'seed': 0}})",
        f"{tmp_path}: renamed the run folder 'zz_old' to 'a=2_seed=0' (its point {{'a': 2, 'seed': 0}})",
    ]


def test_adopt_old_folders_nothing_to_do(tmp_path, capsys):
    """No missing point, or no free folder, or no match: nothing renamed, nothing printed."""
    points = [{"a": 1}]
    names = ["a=1"]
    (tmp_path / "a=1").mkdir()
    sweeps._adopt_old_folders(tmp_path, points, names, [{"a": 1}])
    (tmp_path / "a=1").rmdir()
    sweeps._adopt_old_folders(tmp_path, points, names, [{"a": 1}])
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.toml").write_text(_config.to_toml({"a": 2}))
    sweeps._adopt_old_folders(tmp_path, points, names, [{"a": 1}])
    assert (tmp_path / "other").exists() and not (tmp_path / "a=1").exists()
    assert capsys.readouterr().out == ""


def test_check_finished(tmp_path):
    """A finished folder with another config raises naming the point and the key; same config, unfinished pass."""
    name = "a=1"
    folder = tmp_path / name
    folder.mkdir()
    want = {"x": {"a": 1}, "seed": 0}
    (folder / "config.toml").write_text(_config.to_toml({"x": {"a": 2}, "seed": 0}))
    sweeps._check_finished(tmp_path, [name], [want])  # not finished: not checked
    (folder / "summary.json").write_text(json.dumps({"status": "finished"}))
    with pytest.raises(
        ConfigError,
        match="^"
        + re.escape(
            f"sweep point {name}: {folder} holds a finished run of another configuration (it differs in "
        )
        + r"x\.a\); a rerun must use the same config, preset and overrides, or another --out$",
    ):
        sweeps._check_finished(tmp_path, [name], [want])
    (folder / "config.toml").write_text(_config.to_toml(want))
    sweeps._check_finished(tmp_path, [name], [want])
    (folder / "config.toml").unlink()
    sweeps._check_finished(tmp_path, [name], [want])  # no stored config: passes


def test_stored_config(tmp_path):
    """``_stored_config`` reads config.toml, None when missing or unreadable."""
    assert sweeps._stored_config(tmp_path) is None
    (tmp_path / "config.toml").write_text("a = 1\n")
    assert sweeps._stored_config(tmp_path) == {"a": 1}
    (tmp_path / "config.toml").write_text("a = = 1\n")
    assert sweeps._stored_config(tmp_path) is None


# --------------------------------------------------------------------------------------------------------
# TableOptions, pairs


def test_table_options_defaults_and_alpha():
    """Defaults 0.95 / 0.8 / () / () / "table"; alpha = 1 − level."""
    o = TableOptions()
    assert (o.level, o.power, o.detect, o.log_metrics, o.holm) == (0.95, 0.8, (), (), "table")
    assert o.alpha == pytest.approx(0.05, abs=1e-15)
    assert TableOptions(level=0.9).alpha == pytest.approx(0.1, abs=1e-15)
    assert sweeps.HOLM_FAMILIES == ("table", "metric")
    TableOptions(level=0.5, power=0.51, detect=(1, 0.5), holm="metric")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"level": 0.0}, "the confidence level must be in (0, 1), got 0.0"),
        ({"level": 1.0}, "the confidence level must be in (0, 1), got 1.0"),
        ({"power": 0.05}, "power must be in (α, 1) = (0.05, 1), got 0.05"),
        ({"power": 1.0}, "power must be in (α, 1) = (0.05, 1), got 1.0"),
        ({"level": 0.5, "power": 0.5}, "power must be in (α, 1) = (0.5, 1), got 0.5"),
        ({"detect": (0,)}, "a difference to detect must be a number > 0, got 0"),
        ({"detect": (-1.0,)}, "a difference to detect must be a number > 0, got -1.0"),
        ({"detect": (True,)}, "a difference to detect must be a number > 0, got True"),
        ({"detect": (math.inf,)}, "a difference to detect must be a number > 0, got inf"),
        ({"holm": "all"}, "holm must be one of ['table', 'metric'], got 'all'"),
    ],
    ids=["level0", "level1", "poweralpha", "power1", "halves", "d0", "dneg", "dbool", "dinf", "holm"],
)
def test_table_options_invalid(kwargs, message):
    """Each invalid option raises ConfigError with its exact message."""
    with pytest.raises(ConfigError, match="^" + re.escape(message) + "$"):
        TableOptions(**kwargs)


def test_pairs_key_and_needed():
    """``_pairs_key`` uses ``:g``; ``_pairs_needed`` is the smallest n with power ≥ target, inf beyond the cap."""
    assert summary_module._pairs_key("loss", 0.10) == "loss:pairs_for_0.1"
    assert summary_module._pairs_key("m", 2.0) == "m:pairs_for_2"
    d = paired_difference([1.0, 2.0, 4.0], [0.0, 0.0, 0.0])
    opts = TableOptions()
    n = summary_module._pairs_needed(d, 1.0, opts)
    assert _is_smallest_n(n, 1.0, d.sd, 0.05, 0.8) and n > 2
    opts9 = TableOptions(power=0.9, level=0.9)
    n9 = summary_module._pairs_needed(d, 1.0, opts9)
    assert _is_smallest_n(n9, 1.0, d.sd, 0.1, 0.9) and n9 != n
    assert summary_module._pairs_needed(d, 1e-6, opts) == math.inf
    one = paired_difference([1.0], [0.0])
    assert math.isnan(summary_module._pairs_needed(one, 1.0, opts))


# --------------------------------------------------------------------------------------------------------
# summarize


def _rows():
    """Rows: a = 1 (baseline), 2, 3 over seeds 0–2; a failed row; a = 4 all failed; a non-number value."""
    loss = {1: [1.0, 2.0, 4.0], 2: [1.5, 2.0, 5.5], 3: [3.0, 3.5, 9.0]}
    acc = {1: [0.5, 0.6, 0.7], 2: [0.4, 0.65, 0.6], 3: [0.9, 0.8, 0.75]}
    rows = []
    for a in (1, 2, 3):
        for s in range(3):
            rows.append({"a": a, "seed": s, "status": "finished", "loss": loss[a][s], "acc": acc[a][s]})
    rows.append({"a": 2, "seed": 3, "status": "failed", "loss": 100.0, "acc": 0.0})
    rows.append({"a": 4, "seed": 0, "status": "failed", "loss": 1.0, "acc": 1.0})
    rows.append({"a": 3, "seed": 3, "status": "finished", "loss": float("nan"), "acc": True})
    return rows, loss, acc


def test_summarize_means_and_intervals():
    """Per point: n counts finished rows; mean/lo/hi equal scipy's t interval of the finite numbers."""
    rows, loss, acc = _rows()
    table = sweeps.summarize(rows, ["a"], ["loss", "acc"])
    assert [e["a"] for e in table] == [1, 2, 3]  # a = 4 (no finished row) left out
    assert [e["n"] for e in table] == [3, 3, 4]
    for e in table:
        for m, data in (("loss", loss), ("acc", acc)):
            mean, lo, hi = _t_ci(data[e["a"]])
            assert e[m] == pytest.approx(mean, rel=1e-12)
            assert e[f"{m}:lo"] == pytest.approx(lo, rel=1e-12)
            assert e[f"{m}:hi"] == pytest.approx(hi, rel=1e-12)
        assert "is_baseline" not in e and "loss:scale" not in e and "loss:diff" not in e
    assert set(table[0]) == {"a", "n", "loss", "loss:lo", "loss:hi", "acc", "acc:lo", "acc:hi"}
    table90 = sweeps.summarize(rows, ["a"], ["loss"], level=0.9)
    assert table90[0]["loss:lo"] == pytest.approx(_t_ci(loss[1], 0.9)[1], rel=1e-12)
    opt = sweeps.summarize(rows, ["a"], ["loss"], level=0.9, options=TableOptions(level=0.8))
    assert opt[0]["loss:lo"] == pytest.approx(_t_ci(loss[1], 0.8)[1], rel=1e-12)


def test_summarize_group_key_by_toml_value():
    """Groups are keyed by TOML text, in order of first appearance (1 and 1.0 are distinct points)."""
    rows = [
        {"a": 1.0, "seed": 0, "status": "finished", "m": 1.0},
        {"a": 1, "seed": 0, "status": "finished", "m": 3.0},
        {"a": 1.0, "seed": 1, "status": "finished", "m": 2.0},
    ]
    table = sweeps.summarize(rows, ["a"], ["m"])
    assert [(e["a"], type(e["a"]), e["n"], e["m"]) for e in table] == [(1.0, float, 2, 1.5), (1, int, 1, 3.0)]
    assert math.isnan(table[1]["m:lo"]) and math.isnan(table[1]["m:hi"])
    none = sweeps.summarize([{"a": 1, "seed": 0, "status": "finished", "m": None}], ["a"], ["m"])
    assert none == [{"a": 1, "n": 1}]


def _holm_ref(p):
    """Holm's step-down by hand (reference)."""
    p = list(p)
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, (m - rank) * p[i])
        out[i] = min(1.0, running)
    return out


def test_summarize_paired_against_scipy():
    """With a baseline: paired diff, interval, p (ttest_rel), pairs, sd, detectable (nct), Holm over the table."""
    rows, loss, acc = _rows()
    opts = TableOptions(detect=(0.5, 2.0))
    table = sweeps.summarize(rows, ["a"], ["loss", "acc"], {"a": 1}, options=opts)
    assert [e["is_baseline"] for e in table] == [True, False, False]
    assert not any(k.startswith(("loss:diff", "loss:p")) for k in table[0])
    ps = []
    for e in table[1:]:
        for m, data in (("loss", loss), ("acc", acc)):
            a, b = np.array(data[e["a"]]), np.array(data[1])
            d = a - b
            mean, lo, hi = _t_ci(d)
            assert e[f"{m}:diff"] == pytest.approx(mean, rel=1e-12)
            assert e[f"{m}:diff_lo"] == pytest.approx(lo, rel=1e-12)
            assert e[f"{m}:diff_hi"] == pytest.approx(hi, rel=1e-12)
            assert e[f"{m}:p"] == pytest.approx(st.ttest_rel(a, b).pvalue, rel=1e-10)
            assert e[f"{m}:pairs"] == 3
            assert e[f"{m}:sd"] == pytest.approx(d.std(ddof=1), rel=1e-12)
            assert _power(e[f"{m}:detectable"], d.std(ddof=1), 3, 0.05) == pytest.approx(0.8, abs=1e-7)
            for delta in (0.5, 2.0):
                n = e[summary_module._pairs_key(m, delta)]
                assert _is_smallest_n(n, delta, d.std(ddof=1), 0.05, 0.8)
            assert f"{m}:diff_scale" not in e
            ps.append(e[f"{m}:p"])
    want = _holm_ref(ps)
    got = [e[f"{m}:p_holm"] for e in table[1:] for m in ("loss", "acc")]
    assert got == pytest.approx(want, rel=1e-12)
    assert all(type(v) is float for v in got)


def test_summarize_holm_per_metric_and_power():
    """``holm="metric"`` adjusts each metric's tests separately; ``power`` moves the detectable difference."""
    rows, loss, acc = _rows()
    opts = TableOptions(holm="metric", power=0.9)
    table = sweeps.summarize(rows, ["a"], ["loss", "acc"], {"a": 1}, options=opts)
    for m in ("loss", "acc"):
        ps = [e[f"{m}:p"] for e in table[1:]]
        assert [e[f"{m}:p_holm"] for e in table[1:]] == pytest.approx(_holm_ref(ps), rel=1e-12)
        e = table[1]
        assert _power(e[f"{m}:detectable"], e[f"{m}:sd"], 3, 0.05) == pytest.approx(0.9, abs=1e-7)
    assert not any(k.startswith("loss:pairs_for") for k in table[1])


def test_summarize_log_scale():
    """A log-scale metric: geometric mean, exp of the t interval of logs, paired differences of logs."""
    rows, loss, acc = _rows()
    opts = TableOptions(log_metrics=("loss",))
    table = sweeps.summarize(rows, ["a"], ["loss", "acc"], {"a": 1}, options=opts)
    for e in table:
        mean, lo, hi = _t_ci(np.log(loss[e["a"]]))
        assert e["loss"] == pytest.approx(math.exp(mean), rel=1e-12)
        assert e["loss:lo"] == pytest.approx(math.exp(lo), rel=1e-12)
        assert e["loss:hi"] == pytest.approx(math.exp(hi), rel=1e-12)
        assert e["loss:scale"] == "log"
        assert "acc:scale" not in e
    e = table[1]
    d = np.log(loss[2]) - np.log(loss[1])
    assert e["loss:diff"] == pytest.approx(d.mean(), rel=1e-12)
    assert e["loss:diff_scale"] == "log"
    assert e["loss:p"] == pytest.approx(st.ttest_rel(np.log(loss[2]), np.log(loss[1])).pvalue, rel=1e-10)
    assert "acc:diff_scale" not in e


def test_summarize_log_scale_nonpositive_falls_back():
    """A log-scale metric with a value ≤ 0 is arithmetic, marked ``linear (a value ≤ 0)``; diffs linear."""
    rows = [
        {"a": a, "seed": s, "status": "finished", "m": v}
        for a, vals in ((1, [1.0, 2.0, 3.0]), (2, [0.0, 2.5, 5.0]))
        for s, v in enumerate(vals)
    ]
    table = sweeps.summarize(rows, ["a"], ["m"], {"a": 1}, options=TableOptions(log_metrics=("m",)))
    assert table[0]["m:scale"] == "log"
    assert table[1]["m:scale"] == "linear (a value ≤ 0)"
    assert table[1]["m"] == pytest.approx(2.5, rel=1e-12)
    assert "m:diff_scale" not in table[1]
    assert table[1]["m:diff"] == pytest.approx(0.5, rel=1e-12)
    rows = [
        {"a": a, "seed": s, "status": "finished", "m": v}
        for a, vals in ((1, [0.0, 2.0, 3.0]), (2, [1.0, 2.5, 5.0]))
        for s, v in enumerate(vals)
    ]
    table = sweeps.summarize(rows, ["a"], ["m"], {"a": 1}, options=TableOptions(log_metrics=("m",)))
    assert table[1]["m:scale"] == "log"  # the point's own values are positive ...
    assert "m:diff_scale" not in table[1]  # ... but its baseline has a 0: the differences are linear
    assert table[1]["m:diff"] == pytest.approx(3.5 / 3, rel=1e-12)


def test_summarize_pairs_only_shared_seeds_and_multi_key():
    """Pairs use only seeds finished in both; other keys are matched; no pairs → no diff; NaN p left out."""
    rows = []
    vals = {(1, "x"): [1.0, 2.0, 3.0], (2, "x"): [2.0, 2.0, 9.0], (1, "y"): [5.0, 6.0], (2, "y"): [5.0]}
    for (a, b), vs in vals.items():
        for s, v in enumerate(vs):
            rows.append(
                {"a": a, "b": b, "seed": s + (2 if (a, b) == (2, "y") else 0), "status": "finished", "m": v}
            )
    rows.append({"a": 1, "b": "x", "seed": 9, "status": "finished", "m": None})
    table = sweeps.summarize(rows, ["a", "b"], ["m"], {"a": 1})
    by = {(e["a"], e["b"]): e for e in table}
    assert by[(1, "x")]["is_baseline"] and by[(1, "y")]["is_baseline"]
    e = by[(2, "x")]
    assert e["m:pairs"] == 3 and e["m:diff"] == pytest.approx(7.0 / 3, rel=1e-12)
    assert "m:diff" not in by[(2, "y")]  # seed 2 has no baseline (1, y) row
    assert not by[(2, "y")]["is_baseline"]
    rows2 = [
        {"a": a, "seed": s, "status": "finished", "m": v}
        for a, vs in ((1, [1.0, 2.0]), (2, [2.0, 3.0]), (3, [1.0, 4.0]))
        for s, v in enumerate(vs)
    ]
    t2 = sweeps.summarize(rows2, ["a"], ["m"], {"a": 1})
    assert math.isnan(t2[1]["m:p"]) and math.isnan(t2[1]["m:p_holm"])  # no spread: NaN, not in the family
    p3 = st.ttest_rel([1.0, 4.0], [1.0, 2.0]).pvalue
    assert t2[2]["m:p_holm"] == pytest.approx(p3, rel=1e-12)  # a family of one


def test_summarize_single_pair():
    """One pair: mean difference, NaN interval/p/sd/detectable, NaN pairs needed."""
    rows = [
        {"a": 1, "seed": 0, "status": "finished", "m": 1.0},
        {"a": 2, "seed": 0, "status": "finished", "m": 3.0},
    ]
    e = sweeps.summarize(rows, ["a"], ["m"], {"a": 1}, options=TableOptions(detect=(1.0,)))[1]
    assert e["m:diff"] == 2.0 and e["m:pairs"] == 1
    assert all(math.isnan(e[k]) for k in ("m:diff_lo", "m:p", "m:sd", "m:detectable", "m:pairs_for_1"))


# --------------------------------------------------------------------------------------------------------
# _number, _fmt, _pct, _csv, _markdown, SweepTable


def test_number_fmt_pct():
    """``_number`` excludes bools/non-finite; ``_fmt`` uses 4 significant digits, ``—`` for non-finite."""
    assert [grid_module.is_number(v) for v in (1, 1.5, True, math.nan, math.inf, "1", None)] == [
        True, True, False, False, False, False, False,
    ]  # fmt: skip
    assert summary_module._fmt(1.23456) == "1.235"
    assert summary_module._fmt(12345.0) == "1.234e+04"
    assert summary_module._fmt(math.nan) == "—" and summary_module._fmt(-math.inf) == "—"
    assert summary_module._fmt(3) == "3" and summary_module._fmt("x") == "x"
    assert summary_module._fmt(None) == "None"
    assert summary_module._pct(0.95) == "95 %" and summary_module._pct(0.8) == "80 %"
    assert summary_module._pct(0.975) == "97.5 %"


def test_csv_text():
    """``_csv``: union of columns in order, missing cells and None empty, ``\\n`` line ends."""
    text = grid_module.csv_text([{"a": 1, "b": None}, {"c": "x", "a": 2.5}])
    assert text == "a,b,c\n1,,\n2.5,,x\n"
    assert grid_module.csv_text([]) == "\n"


def test_markdown_unpaired_exact():
    """Without a baseline: header, separator, one row per point, the legend (exact text)."""
    summary = [
        {"a": 1, "n": 3, "m": 1.0, "m:lo": 0.5, "m:hi": 1.5},
        {"a": 2, "n": 1, "m": 2.0, "m:lo": math.nan, "m:hi": math.nan},
        {"a": 3, "n": 0},
    ]
    text = summary_module._markdown(summary, ["a"], ["m"])
    assert text == (
        "| a | n | m (95 % CI) |\n"
        "|---|---|---|\n"
        "| 1 | 3 | 1 (0.5 – 1.5) |\n"
        "| 2 | 1 | 2 |\n"  # one seed: no interval
        "| 3 | 0 | — |\n"
        "\n"
        "Intervals in parentheses: 95 % Student-t intervals of the mean over the seeds (df = n − 1).\n"
    )
    assert summary_module._markdown(summary, ["a"], ["m"], TableOptions(level=0.9)).startswith(
        "| a | n | m (90 % CI) |"
    )


def test_markdown_paired_exact():
    """With paired columns: Δ ± half-width, pairs, p, Holm, detectable, pairs-for-D, baseline mark, legend."""
    summary = [
        {"a": 1, "n": 2, "m": 1.0, "m:lo": 0.0, "m:hi": 2.0, "is_baseline": True},
        {
            "a": 2, "n": 2, "m": 3.0, "m:lo": 2.0, "m:hi": 4.0, "is_baseline": False, "m:diff": 2.0,
            "m:diff_lo": 1.0, "m:diff_hi": 3.5, "m:p": 0.01, "m:pairs": 2, "m:sd": 0.5, "m:detectable": 0.25,
            "m:p_holm": 0.02, "m:pairs_for_1": 7,
        },
        {"a": 3, "n": 1, "m": 5.0, "m:lo": math.nan, "m:hi": math.nan, "is_baseline": False},
    ]  # fmt: skip
    opts = TableOptions(detect=(1.0,))
    text = summary_module._markdown(summary, ["a"], ["m"], opts)
    head = (
        "| a | n | m (95 % CI) | Δm vs baseline ± 95 % CI half-width | pairs | p (paired t) | p (Holm) | "
        "detectable at 80 % power | pairs for Δ = 1 (80 % power) |"
    )
    legend = (
        "Paired over the seeds both finished: ± is the half-width of the 95 % Student-t interval of the mean "
        "paired difference (df = pairs − 1). p: two-sided paired t-test; p (Holm): Holm's step-down adjustment "
        "over the 1 tests of this table. Detectable: the smallest |Δ| that this test (α = 0.05, the same pairs) "
        "detects with 80 % power if the paired sd is the observed one (noncentral t). Pairs for D: the pairs "
        "giving 80 % power for |Δ| = D at that sd. Both are planning numbers: the sd of a few seeds is itself "
        "uncertain."
    )
    assert text == (
        head + "\n" + "|" + "---|" * 9 + "\n"
        "| 1 | 2 | 1 (0 – 2) | baseline |  |  |  |  |  |\n"
        "| 2 | 2 | 3 (2 – 4) | 2 ± 1.25 | 2 | 0.01 | 0.02 | 0.25 | 7 |\n"
        "| 3 | 1 | 5 | — |  |  |  |  |  |\n"
        "\n"
        "Intervals in parentheses: 95 % Student-t intervals of the mean over the seeds (df = n − 1).\n"
        + legend
        + "\n"
    )
    per_metric = summary_module._markdown(summary, ["a"], ["m"], TableOptions(holm="metric"))
    assert "adjustment over the tests of each metric separately (1 tests in all). Detectable" in per_metric
    assert "Pairs for D" not in per_metric
    nan_p = [dict(summary[1], **{"m:p": math.nan})]
    assert "over the 0 tests of this table" in summary_module._markdown(nan_p, ["a"], ["m"])
    no_holm = [{k: v for k, v in summary[1].items() if k != "m:p_holm"}]
    assert "| 2 ± 1.25 | 2 | 0.01 | — | 0.25 |" in summary_module._markdown(no_holm, ["a"], ["m"])


def test_markdown_log_scale_exact():
    """Log-scale cells: geometric-mean header, ×ratio (exp of diff bounds), ×/÷ detectable, log legend."""
    summary = [
        {"a": 1, "n": 2, "m": 2.0, "m:lo": 1.0, "m:hi": 4.0, "m:scale": "log", "is_baseline": True},
        {
            "a": 2, "n": 2, "m": 3.0, "m:lo": 2.0, "m:hi": 4.0, "m:scale": "log", "m:diff": math.log(2.0),
            "m:diff_lo": math.log(1.5), "m:diff_hi": math.log(3.0), "m:diff_scale": "log", "m:p": 0.5,
            "m:pairs": 2, "m:detectable": math.log(1.25), "m:p_holm": 0.5,
        },
        {
            "a": 3, "n": 2, "m": -1.0, "m:lo": -2.0, "m:hi": 0.5, "m:scale": "linear (a value ≤ 0)",
            "m:diff": 1.0, "m:diff_lo": 0.0, "m:diff_hi": 2.0, "m:p": 0.2, "m:pairs": 2,
            "m:detectable": math.nan, "m:p_holm": 0.4,
        },
        {
            "a": 4, "n": 2, "m": 2.0, "m:lo": 1.0, "m:hi": 4.0, "m:scale": "log", "m:diff": 0.0,
            "m:diff_lo": math.nan, "m:diff_hi": math.nan, "m:diff_scale": "log", "m:p": math.nan,
            "m:pairs": 1, "m:detectable": math.nan,
        },
    ]  # fmt: skip
    text = summary_module._markdown(summary, ["a"], ["m"])
    lines = text.splitlines()
    assert lines[0] == (
        "| a | n | m: geometric mean (95 % CI, log scale) | m ratio vs baseline (95 % CI) | pairs | p (paired t) "
        "| p (Holm) | detectable at 80 % power |"
    )
    assert lines[3] == "| 2 | 2 | 3 (2 – 4) | ×2 (1.5 – 3) | 2 | 0.5 | 0.5 | ×/÷ 1.25 |"
    assert lines[4] == "| 3 | 2 | -1 (-2 – 0.5) (arithmetic: a value ≤ 0) | 1 ± 1 | 2 | 0.2 | 0.4 | — |"
    assert lines[5] == "| 4 | 2 | 2 (1 – 4) | ×1 | 1 | — | — | ×/÷ — |"
    assert lines[7] == (
        "Intervals in parentheses: 95 % Student-t intervals of the mean over the seeds (df = n − 1); for a "
        "log-scale metric, of the logs, mapped back by exp (around the geometric mean)."
    )
    assert (
        "(df = pairs − 1); a ratio is exp of the mean difference of ln values, with its interval. p:"
        in lines[8]
    )
    assert "over the 2 tests of this table" in lines[8]
    assert "(noncentral t); ×/÷ f for a log-scale metric: a ratio of f or 1/f. Both are planning" in lines[8]
    log_detect = summary_module._markdown(summary[:2], ["a"], ["m"], TableOptions(detect=(0.1,)))
    assert log_detect.splitlines()[0].endswith("| pairs for ln ratio = 0.1 (80 % power) |")
    assert "| ×/÷ 1.25 | — |" in log_detect


def test_sweep_table_failed_and_markdown(tmp_path):
    """``SweepTable.failed`` keeps non-finished rows; ``markdown`` is ``_markdown`` of its fields."""
    rows = [{"a": 1, "status": "finished"}, {"a": 2, "status": "failed"}, {"a": 3, "status": None}]
    summary = [{"a": 1, "n": 1, "m": 1.0, "m:lo": math.nan, "m:hi": math.nan}]
    t = sweeps.SweepTable(tmp_path, {"a": [1, 2, 3]}, rows, summary, ["m"])
    assert t.failed == rows[1:]
    assert t.options == TableOptions()
    assert t.markdown() == summary_module._markdown(summary, ["a"], ["m"], TableOptions())
    t90 = sweeps.SweepTable(tmp_path, {"a": [1]}, rows, summary, ["m"], TableOptions(level=0.9))
    assert "m (90 % CI)" in t90.markdown()


# --------------------------------------------------------------------------------------------------------
# sweep_runs argument checks (before any configuration is loaded)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"jobs": 0}, "jobs must be ≥ 1, got 0"),
        ({"backend": "slurm"}, "backend must be one of ['local', 'ray'], got 'slurm'"),
        ({"baseline": "a=9"}, "baseline a=9 is not one of the grid's values [1, 2]"),
        (
            {"metrics": ["acc"], "table": TableOptions(log_metrics=("loss", "acc", "mse"))},
            "log-scale metrics ['loss', 'mse'] are not among the metrics summarised ['acc']",
        ),
    ],
    ids=["jobs", "backend", "baseline", "logmetrics"],
)
def test_sweep_runs_argument_errors(tmp_path, kwargs, message):
    """Each bad argument raises its exact message before anything is written."""
    with pytest.raises(ConfigError, match="^" + re.escape(message) + "$"):
        sweeps.sweep_runs(tmp_path / "none.toml", {"a": [1, 2]}, [0], tmp_path / "out", quiet=True, **kwargs)
    assert not (tmp_path / "out").exists()
    assert sweeps.BACKENDS == ("local", "ray") and sweeps.RAY_RETRIES == 3


def test_sweep_runs_repeated_value(tmp_path):
    """A grid that repeats a value fails the name check (before loading the configuration)."""
    with pytest.raises(ConfigError, match=r"\(the grid repeats a value\)$"):
        sweeps.sweep_runs(tmp_path / "none.toml", {"a": [1, 1]}, [0], tmp_path / "out", quiet=True)
    with pytest.raises(ConfigError, match=r"^a sweep needs at least one seed$"):
        sweeps.sweep_runs(tmp_path / "none.toml", {"a": [1]}, [], tmp_path / "out", quiet=True)


# ========================================================================================================
# meanfield.studies.in_memory: tidy tables


def test_cell_clean_is_number():
    """``_cell`` converts NumPy/tensor scalars; ``_clean`` maps non-finite floats to None; ``_is_number``."""
    assert grid_module._cell(np.float32(1.5)) == 1.5 and type(grid_module._cell(np.int64(3))) is int
    assert grid_module._cell(torch.tensor(2.5)) == 2.5 and grid_module._cell(np.array(4.0)) == 4.0
    assert grid_module._cell("x") == "x" and grid_module._cell([1]) == [1]
    assert studies._clean(math.nan) is None and studies._clean(math.inf) is None
    assert studies._clean(1.0) == 1.0 and studies._clean("nan") == "nan" and studies._clean(None) is None
    assert [studies._is_number(v) for v in (1, 2.0, True, "1", None, math.nan)] == [
        True, True, False, False, False, True,
    ]  # fmt: skip


def _table():
    """A table over k (0.5, 1, 2, "z") and seeds, with a failed row, a NaN and a bool ``y`` to be skipped."""
    rows = [
        {"k": 1, "seed": 0, "y": 1.0, "error": None},
        {"k": 1, "seed": 1, "y": 3.0, "error": None},
        {"k": 1, "seed": 2, "y": 8.0, "error": None},
        {"k": 2, "seed": 0, "y": 2.0, "error": None},
        {"k": 2, "seed": 1, "y": 4.0, "error": None},
        {"k": 2, "seed": 2, "y": 100.0, "error": "Boom: x"},
        {"k": 2, "seed": 3, "y": math.nan, "error": None},
        {"k": 2, "seed": 4, "y": True, "error": None},
        {"k": 0.5, "seed": 0, "y": 5.0, "error": None},
        {"k": "z", "seed": 0, "y": 6.0, "error": None},
    ]
    return studies.Table(rows, ("k", "seed"), ("y", "error"))


def test_table_columns_len_column():
    """``columns`` = keys + values, ``len`` the rows, ``column`` with None for a missing cell, KeyError else."""
    t = studies.Table([{"a": 1, "b": 2}, {"a": 3}], ("a",), ("b",), replicate="r")
    assert t.columns == ("a", "b") and len(t) == 2 and t.replicate == "r"
    assert t.column("b") == [2, None]
    assert studies.Table([], ("a",), ()).replicate == "seed"
    with pytest.raises(KeyError, match='^"' + re.escape("no column 'c'; the columns are ['a', 'b']")):
        t.column("c")


def test_table_summary_against_scipy():
    """``Table.summary``: per x the t interval of the finite, non-bool, error-free y; numbers sorted first."""
    t = _table()
    got = t.summary("k", "y")
    assert [r["x"] for r in got] == [0.5, 1, 2, "z"]
    r1 = got[1]
    mean, lo, hi = _t_ci([1.0, 3.0, 8.0])
    assert (r1["mean"], r1["n"]) == (pytest.approx(mean), 3)
    assert r1["lo"] == pytest.approx(lo, rel=1e-12) and r1["hi"] == pytest.approx(hi, rel=1e-12)
    assert r1["se"] == pytest.approx(np.std([1.0, 3.0, 8.0], ddof=1) / math.sqrt(3), rel=1e-12)
    assert got[2]["mean"] == 3.0 and got[2]["n"] == 2
    assert set(r1) == {"x", "mean", "se", "lo", "hi", "n"}
    got80 = t.summary("k", "y", level=0.8)
    assert got80[1]["lo"] == pytest.approx(_t_ci([1.0, 3.0, 8.0], 0.8)[1], rel=1e-12)
    w = t.summary("seed", "y", where={"k": 1})
    assert [(r["x"], r["mean"]) for r in w] == [(0, 1.0), (1, 3.0), (2, 8.0)]


def test_table_summary_hue_and_errors():
    """``hue`` groups and sorts by hue then x; an unfixed key or an unknown column raises exactly."""
    rows = [
        {"h": h, "x": x, "seed": s, "y": float(h * 10 + x + s)}
        for h in (2, 1) for x in (3, 1) for s in (0, 1)
    ]  # fmt: skip
    t = studies.Table(rows, ("h", "x", "seed"), ("y",))
    got = t.summary("x", "y", hue="h")
    assert [(r["hue"], r["x"], r["mean"]) for r in got] == [
        (1, 1, 11.5),
        (1, 3, 13.5),
        (2, 1, 21.5),
        (2, 3, 23.5),
    ]
    assert list(got[0])[0] == "hue"
    with pytest.raises(
        ValueError,
        match="^"
        + re.escape(
            "parameter 'h' takes several values ['1', '2']; fix it with where={'h': ...} or use it as x or hue"
        ),
    ):
        t.summary("x", "y")
    for bad in (("q", "y", None), ("x", "q", None), ("x", "y", "q")):
        with pytest.raises(
            KeyError, match='^"' + re.escape("no column 'q'; the columns are ['h', 'x', 'seed', 'y']")
        ):
            t.summary(*bad)
    assert [r["x"] for r in t.summary("x", "y", where={"h": 1})] == [1, 3]


def test_table_csv_json_roundtrip(tmp_path):
    """``to_csv`` exact text (None empty, written to a path); ``to_json`` maps NaN to null; ``from_json``."""
    t = studies.Table([{"a": 1, "b": None}, {"a": 2, "b": math.nan, "c": 1}], ("a",), ("b",), replicate="a")
    with pytest.raises(ValueError, match=r"^dict contains fields not in fieldnames: .c.$"):
        t.to_csv()  # "c" is not a column: DictWriter refuses it
    t = studies.Table([{"a": 1, "b": None}, {"a": 2, "b": 0.5}, {"a": 3}], ("a",), ("b",), replicate="a")
    path = tmp_path / "t.csv"
    assert t.to_csv(path) == "a,b\n1,\n2,0.5\n3,\n"
    assert path.read_text() == "a,b\n1,\n2,0.5\n3,\n"
    tn = studies.Table([{"a": 1, "b": math.nan}], ("a",), ("b",), replicate="a")
    text = tn.to_json(tmp_path / "t.json")
    assert json.loads(text) == {
        "keys": ["a"],
        "values": ["b"],
        "replicate": "a",
        "rows": [{"a": 1, "b": None}],
    }
    assert (tmp_path / "t.json").read_text() == text
    assert text.startswith('{\n "keys": [\n  "a"\n ]')
    back = studies.Table.from_json(tmp_path / "t.json")
    assert back == studies.Table([{"a": 1, "b": None}], ("a",), ("b",), replicate="a")
    assert studies.Table.from_json("  " + text) == back
    assert studies.Table.from_json(str(tmp_path / "t.json")) == back


# --------------------------------------------------------------------------------------------------------
# scalars, series, SweepResult


def test_scalar():
    """``_scalar`` passes Python scalars, converts one-element tensors/arrays/NumPy scalars, else TypeError."""
    for v in (True, 3, 2.5, "s", None):
        assert studies._scalar("o", v) is v
    assert studies._scalar("o", torch.tensor([1.5])) == 1.5
    assert studies._scalar("o", np.array([[2.0]])) == 2.0
    assert type(studies._scalar("o", np.int32(4))) is int
    with pytest.raises(
        TypeError,
        match="^"
        + re.escape(
            "o must be a scalar (int, float, bool, str, one-element tensor) or a 1-D series, got list"
        ),
    ):
        studies._scalar("o", [1])
    with pytest.raises(
        TypeError,
        match=r"^o must be a scalar \(int, float, bool, str, one-element tensor\) or a 1-D series, got Tensor$",
    ):
        studies._scalar("o", torch.zeros(0))


def test_series():
    """``_series``: 1-D tensors/arrays/lists of > 1 numbers as floats; None for scalars; TypeError for 2-D."""
    assert studies._series("s", torch.tensor([1, 2])) == [1.0, 2.0]
    assert studies._series("s", np.array([1, 2], dtype=np.int64)) == [1.0, 2.0]
    assert studies._series("s", [1, 2.5, np.float32(3)]) == [1.0, 2.5, 3.0]
    assert studies._series("s", (1, 2)) == [1.0, 2.0]
    for v in (
        torch.tensor([1.0]),
        np.array([1.0]),
        [1.0],
        [True, False],
        [1, "a"],
        3.0,
        "ab",
        torch.tensor(2.0),
    ):
        assert studies._series("s", v) is None
    assert studies._series("s", torch.zeros(1, 1)) is None and studies._series("s", np.zeros((1, 1))) is None
    assert (
        studies._series("s", torch.zeros(0)) is None and studies._series("s", np.zeros(0)) is None
    )  # empty 1-D
    with pytest.raises(
        TypeError,
        match="^"
        + re.escape(
            "s must be a scalar (int, float, bool, str, one-element tensor) or a 1-D series, got a Tensor of shape (2, 3)"
        ),
    ):
        studies._series("s", torch.zeros(2, 3))
    with pytest.raises(
        TypeError,
        match="^"
        + re.escape(
            "s must be a scalar (int, float, bool, str, one-element tensor) or a 1-D series, got a ndarray of shape (3, 1)"
        ),
    ):
        studies._series("s", np.zeros((3, 1)))


def test_sweep_result_tables_and_json(tmp_path):
    """``SweepResult`` columns, tables, failures, column, CSV of rows and curves, JSON round trip."""
    rows = [{"k": 1, "seed": 0, "y": 2.0, "error": None}, {"k": 2, "seed": 0, "error": "E: x"}]
    curves = [{"k": 1, "seed": 0, "t": 0.0, "s": 1.0}, {"k": 1, "seed": 0, "t": 1.0, "s": math.inf}]
    r = studies.SweepResult(rows, ("k",), ("y",), ("s",), curves, ("k",))
    assert r.columns == ("k", "seed", "y", "error")
    assert r.table == studies.Table(rows, ("k", "seed"), ("y", "error"), replicate="seed")
    assert r.curves == studies.Table(curves, ("k", "seed", "t"), ("s",), replicate="seed")
    assert r.failures == [rows[1]]
    assert r.column("y") == [2.0, None]
    with pytest.raises(
        KeyError, match='^"' + re.escape("no column 's'; the columns are ['k', 'seed', 'y', 'error']")
    ):
        r.column("s")
    assert r.to_csv() == "k,seed,y,error\n1,0,2.0,\n2,0,,E: x\n"
    assert r.to_csv(tmp_path / "c.csv", curves=True) == "k,seed,t,s\n1,0,0.0,1.0\n1,0,1.0,inf\n"
    assert (tmp_path / "c.csv").read_text() == "k,seed,t,s\n1,0,0.0,1.0\n1,0,1.0,inf\n"
    text = r.to_json(tmp_path / "r.json")
    data = json.loads(text)
    assert data == {
        "params": ["k"], "outputs": ["y"], "rows": rows, "series": ["s"],
        "curve_rows": [curves[0], {**curves[1], "s": None}], "batched": ["k"],
    }  # fmt: skip
    assert (tmp_path / "r.json").read_text() == text
    back = studies.SweepResult.from_json(tmp_path / "r.json")
    assert back == studies.SweepResult(
        rows, ("k",), ("y",), ("s",), [curves[0], {**curves[1], "s": None}], ("k",)
    )
    assert studies.SweepResult.from_json(text) == back
    old = studies.SweepResult.from_json(json.dumps({"params": ["k"], "outputs": [], "rows": []}))
    assert old == studies.SweepResult([], ("k",))
    bare = studies.SweepResult([], ("k",))
    assert (bare.outputs, bare.series, bare.curve_rows, bare.batched) == ((), (), [], ())


def test_sweep_result_summary():
    """``SweepResult.summary`` is the t interval over seeds of error-free rows (scipy reference)."""
    rows = [{"k": 1, "seed": s, "y": v, "error": None} for s, v in enumerate([1.0, 2.0, 6.0])]
    rows.append({"k": 1, "seed": 3, "y": 50.0, "error": "E: x"})
    r = studies.SweepResult(rows, ("k",), ("y",))
    (got,) = r.summary("k", "y", level=0.9)
    mean, lo, hi = _t_ci([1.0, 2.0, 6.0], 0.9)
    assert got["mean"] == pytest.approx(mean) and got["n"] == 3
    assert got["lo"] == pytest.approx(lo, rel=1e-12) and got["hi"] == pytest.approx(hi, rel=1e-12)


def test_grid_points():
    """``grid_points``: a product grid or a list of points; cells converted; each error's exact message."""
    pts, names = grid_module.grid_points({"a": [1, 2], "b": (np.float64(0.5),)})
    assert pts == [{"a": 1, "b": 0.5}, {"a": 2, "b": 0.5}] and names == ("a", "b")
    assert type(pts[0]["b"]) is float
    pts, names = grid_module.grid_points([{"a": 1}, {"b": 2, "a": 3}])
    assert pts == [{"a": 1}, {"b": 2, "a": 3}] and names == ("a", "b")
    with pytest.raises(TypeError, match="^" + re.escape("grid['a'] must be a sequence of values, got str")):
        grid_module.grid_points({"a": "12"})
    with pytest.raises(TypeError, match="^" + re.escape("grid['a'] must be a sequence of values, got int")):
        grid_module.grid_points({"a": 1})
    with pytest.raises(
        TypeError,
        match="^"
        + re.escape(
            "grid must be a mapping name -> values (a product grid) or a list of mappings (points), got list"
        ),
    ):
        grid_module.grid_points([{"a": 1}, 2])
    with pytest.raises(
        TypeError,
        match=r"^grid must be a mapping name -> values \(a product grid\) or a list of mappings \(points\), got int$",
    ):
        grid_module.grid_points(3)
    with pytest.raises(
        ValueError, match="^" + re.escape("grid must contain at least one point, got an empty grid")
    ):
        grid_module.grid_points({"a": []})
    with pytest.raises(
        ValueError, match="^" + re.escape("grid must contain at least one point, got an empty grid")
    ):
        grid_module.grid_points([])
    for reserved in ("seed", "error", "t"):
        with pytest.raises(
            ValueError,
            match="^"
            + re.escape(
                f"grid must not define {reserved!r} (a column of the table), got ['a', {reserved!r}]"
            ),
        ):
            grid_module.grid_points({"a": [1], reserved: [2]})


def test_store():
    """``_store``: scalars to the row, series to curve rows at ``t`` (default 0..T−1); its errors."""
    rows, curve_rows, outputs, series = [], [], {}, {}
    studies._store({"k": 1, "seed": 0}, {"y": torch.tensor(2.0), "s": [1.0, 2.0], "t": [0.5, 1.5]},
                   rows, curve_rows, outputs, series)  # fmt: skip
    assert rows == [{"k": 1, "seed": 0, "y": 2.0, "error": None}]
    assert curve_rows == [{"k": 1, "seed": 0, "t": 0.5, "s": 1.0}, {"k": 1, "seed": 0, "t": 1.5, "s": 2.0}]
    assert list(outputs) == ["y"] and list(series) == ["s"]
    studies._store({"k": 2, "seed": 0}, 7.0, rows, curve_rows, outputs, series)
    assert rows[-1] == {"k": 2, "seed": 0, "value": 7.0, "error": None} and list(outputs) == ["y", "value"]
    studies._store({"k": 3, "seed": 0}, {"s": np.array([4.0, 5.0, 6.0])}, rows, curve_rows, outputs, series)
    assert [c["t"] for c in curve_rows[-3:]] == [0, 1, 2]
    n = len(curve_rows)
    studies._store({"k": 4, "seed": 0}, {"y": 1.0, "t": [9.0]}, rows, curve_rows, outputs, series)
    assert len(curve_rows) == n  # no series: no curve rows, "t" ignored
    for bad, msg in (
        ({"k": 5}, "run returned an output named 'k', which is a parameter or column name"),
        ({"error": 1}, "run returned an output named 'error', which is a parameter or column name"),
        (
            {"a": [1.0, 2.0], "b": [1.0, 2.0, 3.0]},
            "the series outputs must share one time axis, got lengths [2, 3]",
        ),
        ({"a": [1.0, 2.0], "t": [1.0, 2.0, 3.0]}, "output 't' has 3 times, the series have 2"),
    ):
        with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
            studies._store({"k": 5, "seed": 0}, bad, [], [], {}, {})


def test_batch_seed_and_chunks():
    """``batch_seed`` = ``derive_seed(0, "batch:s1,s2,…")`` (order matters); ``_chunks`` tiles ``range(n)``."""
    assert studies.batch_seed([1, 2]) == derive_seed(0, "batch:1,2")
    assert studies.batch_seed([np.int64(3)]) == derive_seed(0, "batch:3")
    assert studies.batch_seed([torch.tensor(3), 4.0]) == derive_seed(0, "batch:3,4")  # each seed as int
    assert studies.batch_seed([2, 1]) != studies.batch_seed([1, 2])
    assert studies._chunks(5, 2) == [range(0, 2), range(2, 4), range(4, 5)]
    assert studies._chunks(4, 4) == [range(0, 4)]
    assert studies._chunks(3, 5) == [range(0, 3)]
    assert studies._chunks(0, 2) == []


def test_sweep_runs_tables_written_and_printed(tmp_path, monkeypatch, capsys):
    """The runner emulated (a failed point among them): runs.csv, summary.csv and summary.md are exactly
    ``_csv``/``_markdown`` of the rows and the summary (checked against ``summarize`` called directly), the
    table and the failure line are printed unless quiet, explicit ``metrics`` are kept, and the Ray backend
    gets one thread per point."""
    finals = {0: 1.0, 1: 2.0, 2: 4.0, 3: 3.5}
    seen = {}

    def fake(todo, args, *rest):
        seen["threads"] = [args(i)[4] for i in todo]
        out = {}
        for i in todo:
            if i == 3:
                out[i] = {"status": "failed", "error": "Boom: x", "final": {"test_mse": math.nan}}
            else:
                out[i] = {"status": "finished", "final": {"test_mse": finals[i], "other": 7, "flag": True}}
                (Path(args(i)[1]) / "summary.json").write_text(json.dumps(out[i]))
        return out

    monkeypatch.setattr(sweeps, "_run_on_ray", lambda todo, args, address, bar: fake(todo, args))
    out = tmp_path / "sw"
    grid = {"optim.lr": [0.1, 0.2]}
    result = sweeps.sweep_runs(
        TEACHER, grid, [0, 1], out, preset="smoke", overrides=TINY, baseline="optim.lr=0.1",
        metrics=["test_mse"], backend="ray",
    )  # fmt: skip
    assert seen["threads"] == [1, 1, 1, 1]
    names = [f"optim.lr={lr}_seed={s}" for lr in (0.1, 0.2) for s in (0, 1)]
    rows = [
        {"optim.lr": lr, "seed": s, "folder": names[2 * j + s], "status": "finished",
         "test_mse": finals[2 * j + s], "other": 7, "error": None}
        for j, lr in enumerate((0.1, 0.2)) for s in (0, 1)
    ]  # fmt: skip
    rows[3] = {"optim.lr": 0.2, "seed": 1, "folder": names[3], "status": "failed", "error": "Boom: x"}
    assert result.rows == rows
    assert result.metrics == ["test_mse"] and result.failed == [rows[3]]
    summary = sweeps.summarize(rows, ["optim.lr"], ["test_mse"], {"optim.lr": 0.1})
    assert repr(result.summary) == repr(summary)  # repr: NaN cells compare equal
    assert summary[1]["n"] == 1 and summary[1]["test_mse:diff"] == pytest.approx(3.0)
    assert (out / "runs.csv").read_text() == (
        "optim.lr,seed,folder,status,test_mse,other,error\n"
        f"0.1,0,{names[0]},finished,1.0,7,\n0.1,1,{names[1]},finished,2.0,7,\n"
        f"0.2,0,{names[2]},finished,4.0,7,\n0.2,1,{names[3]},failed,,,Boom: x\n"
    )
    assert (out / "summary.csv").read_text() == grid_module.csv_text(summary)
    md = summary_module._markdown(summary, ["optim.lr"], ["test_mse"], TableOptions())
    assert (out / "summary.md").read_text() == md
    assert capsys.readouterr().out == md + "\n" + f"1 of 4 runs did not finish; see {out / 'runs.csv'}\n"
    recorded = json.loads((out / "sweep.json").read_text())
    commands = recorded.pop("commands")  # this one command, with its start time
    assert [{k: v for k, v in c.items() if k != "started"} for c in commands] == [recorded]
    assert recorded == {
        "config": str(TEACHER), "preset": "smoke", "overrides": TINY, "grid": {"optim.lr": [0.1, 0.2]},
        "seeds": [0, 1], "baseline": "optim.lr=0.1", "order": "grid",
    }  # fmt: skip
    capsys.readouterr()
    (out / names[0] / "point.json").write_text('{"kept": 1}')  # finished, point.json there: left alone
    (out / names[1] / "point.json").unlink()  # finished without point.json: written
    monkeypatch.setenv("MEANFIELD_PROGRESS", "1")  # bars on, stderr no terminal (meanfield.progress)
    again = sweeps.sweep_runs(TEACHER, grid, [0, 1], out, preset="smoke", overrides=TINY, metrics=None,
                              backend="ray")  # fmt: skip
    err = capsys.readouterr().err
    assert (
        "sw:  75%" in err and " 3/4 " in err and "run/s" in err
    )  # desc, 3 of 4 done, unit (bar not advanced)
    assert seen["threads"] == [1]  # only the failed point runs again
    assert json.loads((out / names[0] / "point.json").read_text()) == {"kept": 1}
    assert json.loads((out / names[1] / "point.json").read_text()) == {
        "point": {"optim.lr": 0.1, "seed": 1}, "overrides": [*TINY, "optim.lr=0.1", "seed=1"], "preset": "smoke",
    }  # fmt: skip
    assert again.metrics == ["test_mse", "other"]  # default: every numeric final of the finished rows


# --------------------------------------------------------------------------------------------------------
# _run_point, _Stop, _preflight, _run_on_ray, _run_local (one job)


def test_run_point_records_a_failure(tmp_path, monkeypatch):
    """A point whose run raises is recorded: its saved summary (or ``{"final": {}}``) with status and error;
    the run gets resume=True, quiet=True and on_step=_resignal (a signal that came while it was built reaches
    the run after its first step); ``threads`` sets torch's threads; RunInterrupted propagates."""
    import meanfield.runs as runs_mod

    calls = []

    def boom(config, folder, **kwargs):
        calls.append((config, folder, kwargs))
        raise ValueError("bad value")

    monkeypatch.setattr(runs_mod, "run", boom)
    monkeypatch.setattr(sweeps, "_worker_stop", None)
    threads = torch.get_num_threads()
    try:
        got = sweeps._run_point("c.toml", str(tmp_path / "p"), "quick", ["a=1"], 1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert got == {"final": {}, "status": "failed", "error": "ValueError: bad value"}
    assert calls == [
        (
            "c.toml",
            str(tmp_path / "p"),
            {
                "preset": "quick",
                "overrides": ["a=1"],
                "resume": True,
                "quiet": True,
                "on_step": sweeps._resignal,
            },
        )
    ]

    class Saved:
        summary = {"final": {"loss": 2.0}, "status": "finished", "step": 4}

    monkeypatch.setattr(runs_mod.RunResult, "load", classmethod(lambda cls, folder: Saved()))
    got = sweeps._run_point("c.toml", "f", None, [], None)
    assert got == {"final": {"loss": 2.0}, "status": "failed", "step": 4, "error": "ValueError: bad value"}

    class Done:
        summary = {"status": "finished", "final": {"loss": 1.0}}

    monkeypatch.setattr(runs_mod, "run", lambda *a, **k: Done())
    assert sweeps._run_point("c.toml", "f", None, [], None) == Done.summary

    def interrupted(*a, **k):
        raise runs_mod.RunInterrupted("stop", 15)

    monkeypatch.setattr(runs_mod, "run", interrupted)
    with pytest.raises(runs_mod.RunInterrupted, match="^stop$"):
        sweeps._run_point("c.toml", "f", None, [], None)


def test_stop_forwards_every_signal_and_marks_a_point_built_here(monkeypatch):
    """``_Stop._handle`` records every signal (never raises), sends each one to the workers (the first makes
    their points checkpoint and stop, a second stops them at once) and sets ``_worker_stop``, so that a point
    being built in this process (``--jobs 1``) stops after its first step; leaving the ``with`` clears it."""
    killed = []

    def kill(pid, signum):
        killed.append((pid, signum))
        if pid == 2:
            raise OSError("gone")

    monkeypatch.setattr(sweeps.os, "kill", kill)
    monkeypatch.setattr(sweeps, "_worker_stop", None)
    stop = sweeps._Stop()
    assert stop.pids() == [] and stop.signum is None
    stop.pids = lambda: [1, 2, 3]
    stop._handle(15, None)
    assert killed == [(1, 15), (2, 15), (3, 15)] and stop.signum == 15 and sweeps._worker_stop == 15
    stop._handle(2, None)
    assert killed == [(1, 15), (2, 15), (3, 15), (1, 2), (2, 2), (3, 2)] and stop.signum == 2
    stop.__exit__(None, None, None)
    assert sweeps._worker_stop is None


def test_preflight_once_per_config_and_names_the_point(monkeypatch):
    """``_preflight`` builds each distinct configuration (seed aside) once and prefixes an error with the point."""
    import meanfield.runs as runs_mod

    built = []

    def preflight(resolved):
        built.append(dict(resolved))
        if resolved["x"] == 3:
            raise ConfigError("x is too big")

    monkeypatch.setattr(runs_mod, "preflight", preflight)
    sweeps._preflight(["p0", "p1", "p2"], [{"x": 1, "seed": 0}, {"x": 1, "seed": 1}, {"x": 2, "seed": 0}])
    assert built == [{"x": 1, "seed": 0}, {"x": 2, "seed": 0}]
    with pytest.raises(ConfigError, match=r"^sweep point p1: x is too big$"):
        sweeps._preflight(["p0", "p1"], [{"x": 1, "seed": 0}, {"x": 3, "seed": 0}])


def test_run_on_ray_without_ray(monkeypatch):
    """Without Ray the ray backend raises the install hint."""
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(
        ConfigError,
        match="^"
        + re.escape("backend 'ray' needs Ray: pip install 'meanfield-sde[ray]' (or use --backend local)"),
    ):
        sweeps._run_on_ray([0], lambda i: (), None, None)


class _FakeRay:
    """A stand-in for the ``ray`` module, run in this process: ``remote(...)(f).remote(*a)`` calls ``f(*a)``
    (an exception is kept and raised by ``get``); ``wait`` hands back one finished ref at a time, in reverse
    submission order (Ray returns them as they finish, not in order); the calls are recorded."""

    def __init__(self, initialized: bool):
        self.initialized, self.calls, self.options = initialized, [], None

    def is_initialized(self):
        return self.initialized

    def init(self, **kwargs):
        self.calls.append(("init", kwargs))

    def shutdown(self):
        self.calls.append(("shutdown",))

    def remote(self, **options):
        self.options = options

        def wrap(fn):
            class Task:
                @staticmethod
                def remote(*args):
                    ref = _Ref()  # hashable, like Ray's ObjectRef
                    try:
                        ref.kind, ref.value = "ok", fn(*args)
                    except Exception as error:  # noqa: BLE001 - kept for get
                        ref.kind, ref.value = "error", error
                    return ref

            return Task

        return wrap

    def wait(self, pending, num_returns):
        assert num_returns == 1
        return [pending[-1]], pending[:-1]

    def get(self, ref):
        if ref.kind == "error":
            raise ref.value
        return ref.value


class _Ref:
    kind: str
    value: object


@pytest.mark.parametrize("initialized", [False, True], ids=["starts-ray", "ray-running"])
def test_run_on_ray_collects_every_point_by_index_and_counts_each_once(monkeypatch, initialized):
    """The Ray backend through a fake ``ray`` (one process): each point's summary under its index whatever order
    the tasks finish in; a task that raised (retries exhausted) is a ``failed`` summary with the error, and the
    others go on; the progress bar moves by exactly one per point (3 points: 3); tasks ask one CPU and
    ``RAY_RETRIES`` retries; Ray is started with the address (and shut down after) only when it was not running."""
    import sys

    fake = _FakeRay(initialized)
    monkeypatch.setitem(sys.modules, "ray", fake)

    def point(i, name):
        if name == "bad":
            raise RuntimeError("worker died")
        return {"status": "finished", "final": {"i": i}}

    monkeypatch.setattr(sweeps, "_run_point", point)
    names = {0: "a", 2: "bad", 5: "c"}

    class Bar:
        n = 0

        def update(self, k):
            self.n += k

    bar = Bar()
    out = sweeps._run_on_ray([0, 2, 5], lambda i: (i, names[i]), "host:6379", bar)
    assert out == {
        0: {"status": "finished", "final": {"i": 0}},
        2: {"status": "failed", "error": "RuntimeError: worker died", "final": {}},
        5: {"status": "finished", "final": {"i": 5}},
    }
    assert bar.n == 3
    assert fake.options == {"num_cpus": 1, "max_retries": sweeps.RAY_RETRIES}
    if initialized:
        assert fake.calls == []
    else:
        assert fake.calls == [
            (
                "init",
                {
                    "address": "host:6379",
                    "include_dashboard": False,
                    "log_to_driver": False,
                    "configure_logging": False,
                },
            ),
            ("shutdown",),
        ]


def test_run_local_one_job_stops_on_interrupt(monkeypatch):
    """One job: points run in order, the bar advances per point; a RunInterrupted stops the sweep with the
    signal's name and the count of points finished."""
    import signal

    from meanfield.runs import RunInterrupted

    def run_point(config, folder, preset, overrides, threads):
        if folder == "p2":
            raise RunInterrupted("x", int(signal.SIGTERM))
        return {"status": "finished", "folder": folder}

    class Bar:
        n = 0

        def update(self, k):
            self.n += k

    monkeypatch.setattr(sweeps, "_run_point", run_point)
    bar = Bar()
    got = sweeps._run_local([0, 1], lambda i: ("c", f"p{i}", None, [], None), 1, bar, sweeps._Stop())
    assert got == {0: {"status": "finished", "folder": "p0"}, 1: {"status": "finished", "folder": "p1"}}
    assert bar.n == 2
    bar = Bar()
    with pytest.raises(
        RunInterrupted,
        match="^"
        + re.escape(
            "the sweep was stopped by SIGTERM: 2 points finished this time, the running ones wrote a checkpoint"
        ),
    ) as caught:
        sweeps._run_local([0, 1, 2, 3], lambda i: ("c", f"p{i}", None, [], None), 1, bar, sweeps._Stop())
    assert caught.value.signum == signal.SIGTERM and bar.n == 2
    stop = sweeps._Stop()
    stop.signum = int(signal.SIGINT)
    with pytest.raises(RunInterrupted, match=r"^the sweep was stopped by SIGINT: 0 points finished"):
        sweeps._run_local([0], lambda i: ("c", f"p{i}", None, [], None), 1, Bar(), stop)


def test_as_tensor():
    """``_as_tensor``: lists/arrays to float64 CPU tensors, tensors converted, anything else TypeError."""
    t = studies._as_tensor("v", [1, 2])
    assert t.dtype == torch.float64 and t.tolist() == [1.0, 2.0]
    assert studies._as_tensor("v", np.array([3], dtype=np.int32)).dtype == torch.float64
    x = torch.ones(2, requires_grad=True)
    y = studies._as_tensor("v", x)
    assert y.dtype == torch.float64 and not y.requires_grad
    with pytest.raises(TypeError, match=r"^v must be a tensor, got str$"):
        studies._as_tensor("v", "ab")


def test_plot_labels(tmp_path):
    """``Table.plot``/``SweepResult.plot``: one labelled mean line per hue, one band label naming the level and
    the replicate count, log axes on request, the file written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [
        {"h": h, "x": x, "seed": s, "y": float(h + x + s)} for h in (1, 2) for x in (1, 2) for s in (0, 1, 2)
    ]
    t = studies.Table(rows, ("h", "x", "seed"), ("y",))
    fig = t.plot("x", "y", hue="h", level=0.9, logx=True, label="run")
    ax = fig.axes[0]
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert labels == ["run, h=1 (mean)", "bands: 90% t-interval of the mean over 3 seeds", "run, h=2 (mean)"]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "linear"
    assert ax.get_xlabel() == "x" and ax.get_ylabel() == "y"
    assert [list(line.get_ydata()) for line in ax.get_lines()] == [[3.0, 4.0], [4.0, 5.0]]
    assert [(ln.get_marker(), ln.get_linestyle(), ln.get_markersize()) for ln in ax.get_lines()] == [
        ("o", "-", 3)
    ] * 2
    assert [c.get_alpha() for c in ax.collections] == [0.25, 0.25]
    for line, band in zip(ax.get_lines(), ax.collections):
        assert matplotlib.colors.same_color(band.get_facecolor()[0][:3], line.get_color())
    assert ax.get_legend().get_texts()[0].get_fontsize() == 8
    plt.close(fig)
    rows2 = rows + [{"h": 1, "x": 1, "seed": 3, "y": 0.0}]
    r = studies.SweepResult(rows2, ("h", "x"), ("y",))
    path = tmp_path / "f.png"
    fig = r.plot("x", "y", where={"h": 1}, logy=True, path=path)
    ax = fig.axes[0]
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert labels == ["y (mean)", "bands: 95% t-interval of the mean over 3–4 seeds"]
    assert ax.get_yscale() == "log" and path.stat().st_size > 0
    plt.close(fig)
    both = studies.SweepResult(
        rows2, ("h", "x"), ("y",), ("y",), [{"h": 1, "x": 1, "seed": 0, "t": 0, "y": 9.0}]
    )
    fig = both.plot(
        "x", "y", where={"h": 1}
    )  # a scalar and a series of that name: x other than t -> the rows
    assert [list(line.get_ydata()) for line in fig.axes[0].get_lines()] == [[2.25, 4.0]]
    plt.close(fig)


@pytest.mark.parametrize(
    ("jobs", "cpus", "threads"),
    [(1, 8, None), (3, 8, 2), (2, None, 1), (4, 2, 1)],
    ids=["one", "split", "nocount", "floor"],
)
def test_sweep_runs_threads_per_point(tmp_path, monkeypatch, jobs, cpus, threads):
    """The local backend gives each point ``max(1, cpu_count // jobs)`` torch threads when ``jobs > 1``
    (``cpu_count`` None counts as 1), none for one job; ``jobs`` reaches the runner."""
    seen = {}

    def run_local(todo, args, j, bar, stop):
        seen["jobs"], seen["threads"] = j, [args(i)[4] for i in todo]
        return {i: {"status": "finished", "final": {"m": 1.0}} for i in todo}

    monkeypatch.setattr(sweeps, "_run_local", run_local)
    monkeypatch.setattr(sweeps.os, "cpu_count", lambda: cpus)
    sweeps.sweep_runs(
        TEACHER,
        {"optim.lr": [0.1]},
        [0],
        tmp_path / "s",
        preset="smoke",
        overrides=TINY,
        jobs=jobs,
        quiet=True,
    )
    assert seen == {"jobs": jobs, "threads": [threads]}


def test_sweep_result_plot_series(tmp_path):
    """A series ``y`` is drawn from the curves against ``t`` (its band counts the seeds of the curves)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = [{"k": 1, "seed": s, "t": t, "s": float(t + s)} for s in (0, 1) for t in (0.0, 1.0)]
    r = studies.SweepResult([{"k": 1, "seed": s, "error": None} for s in (0, 1)], ("k",), (), ("s",), curves)
    fig = r.plot("t", "s")
    ax = fig.axes[0]
    assert [list(line.get_ydata()) for line in ax.get_lines()] == [[0.5, 1.5]]
    assert ax.get_xlabel() == "t"
    assert [x.get_text() for x in ax.get_legend().get_texts()] == [
        "s (mean)",
        "bands: 95% t-interval of the mean over 2 seeds",
    ]
    plt.close(fig)
    fig = r.plot("k", "s", where={"t": 1.0})  # a series only: from the curves for any x
    assert [list(line.get_ydata()) for line in fig.axes[0].get_lines()] == [[1.5]]
    plt.close(fig)


# --------------------------------------------------------------------------------------------------------
# studies.sweep


def test_sweep_unbatched_rows_failures_and_warning():
    """One call per (point, seed) in grid × seed order; a raising run is a row with its error; a warning
    counts the failures; every run failing raises with the first error."""
    calls = []

    def run(a, b, seed):
        calls.append((a, b, seed))
        if a == 2 and seed == 1:
            raise ValueError("no")
        return {"y": a * 10 + seed, "s": [float(b), float(b + 1)]}

    with pytest.warns(
        RuntimeWarning,
        match="^" + re.escape("1 of 4 runs failed (see SweepResult.failures); the first: ValueError: no"),
    ):
        r = studies.sweep(run, {"a": [1, 2], "b": [5]}, seeds=2, progress=False)
    assert calls == [(1, 5, 0), (1, 5, 1), (2, 5, 0), (2, 5, 1)]
    assert r.rows == [
        {"a": 1, "b": 5, "seed": 0, "y": 10, "error": None},
        {"a": 1, "b": 5, "seed": 1, "y": 11, "error": None},
        {"a": 2, "b": 5, "seed": 0, "y": 20, "error": None},
        {"a": 2, "b": 5, "seed": 1, "error": "ValueError: no"},
    ]
    assert (r.params, r.outputs, r.series, r.batched) == (("a", "b"), ("y",), ("s",), ())
    assert r.curve_rows[:2] == [
        {"a": 1, "b": 5, "seed": 0, "t": 0, "s": 5.0},
        {"a": 1, "b": 5, "seed": 0, "t": 1, "s": 6.0},
    ]
    assert len(r.curve_rows) == 6
    r2 = studies.sweep(lambda k, seed: seed, [{"k": "x"}], seeds=[3, np.int64(4)], progress=False)
    assert r2.rows == [
        {"k": "x", "seed": 3, "value": 3, "error": None},
        {"k": "x", "seed": 4, "value": 4, "error": None},
    ]

    def half(k, seed):
        if seed:
            raise OSError("one")
        return 1.0

    with pytest.warns(
        RuntimeWarning, match=r"^1 of 2 runs failed \(see SweepResult\.failures\); the first: OSError: one$"
    ):
        r3 = studies.sweep(half, {"k": [1]}, seeds=2, progress=False)
    assert r3.failures == [{"k": 1, "seed": 1, "error": "OSError: one"}]

    def fail(k, seed):
        raise KeyError("z")

    with pytest.raises(
        RuntimeError, match="^" + re.escape("every run of the sweep failed; the first: KeyError: 'z'")
    ):
        studies.sweep(fail, {"k": [1]}, seeds=1, progress=False)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"run": 3}, TypeError, "run must be callable, got int"),
        (
            {"seeds": True},
            TypeError,
            "seeds must be an int (a number of seeds) or a sequence of ints, got bool",
        ),
        (
            {"seeds": 1.5},
            TypeError,
            "seeds must be an int (a number of seeds) or a sequence of ints, got float",
        ),
        ({"seeds": []}, ValueError, "seeds must be a non-empty sequence of ints, got []"),
        ({"seeds": [1, True]}, ValueError, "seeds must be a non-empty sequence of ints, got [1, True]"),
        ({"batch": ["q"]}, ValueError, "batch names parameters ['q'] that are not in the grid ['a', 'n']"),
        ({"batch": ["n"]}, TypeError, "batched parameter 'n' must take numbers only (a float per replica)"),
        ({"batch": "a"}, TypeError, "batch must be a bool or a sequence of parameter names, got str"),
        (
            {"max_batch": 2},
            ValueError,
            "max_batch, memory_budget, replica_bytes and observables apply with batch= only",
        ),
        (
            {"observables": {}},
            ValueError,
            "max_batch, memory_budget, replica_bytes and observables apply with batch= only",
        ),
        (
            {"batch": True, "memory_budget": 10.0},
            ValueError,
            "memory_budget and replica_bytes go together (bytes per call, bytes per replica)",
        ),
        (
            {"batch": True, "replica_bytes": 10},
            ValueError,
            "memory_budget and replica_bytes go together (bytes per call, bytes per replica)",
        ),
    ],
    ids=[
        "run",
        "seedsbool",
        "seedsfloat",
        "seedsempty",
        "seedsbool2",
        "batchunknown",
        "batchstr",
        "batchtype",
        "maxbatch",
        "observables",
        "budget",
        "replica",
    ],
)
def test_sweep_argument_errors(kwargs, error, message):
    """Each bad argument of ``sweep`` raises its exact message."""
    args = {
        "run": lambda **k: 1.0,
        "grid": {"a": [1.0, 2.0], "n": ["u"]},
        "seeds": 1,
        "progress": False,
        **kwargs,
    }
    with pytest.raises(error, match="^" + re.escape(message) + "$"):
        studies.sweep(args.pop("run"), args.pop("grid"), **args)


def test_sweep_batched_chunks():
    """Batched: replicas grouped by the fixed parameters, cut by ``max_batch`` or the memory budget; each
    call gets float64 tensors and the seed list; outputs per replica in grid × seed order."""
    calls = []

    def run(a, m, seed):
        calls.append((a.tolist(), m, list(seed)))
        return {"y": a * 100 + torch.tensor(seed, dtype=torch.float64) + m}

    r = studies.sweep(
        lambda a, m, seed: run(a, len(m), seed), {"a": [1.0, 2.0], "m": ["p", "qq"]}, seeds=2, batch=True,
        max_batch=3, progress=False,
    )  # fmt: skip
    assert r.batched == ("a",) and r.outputs == ("y",)
    assert calls == [
        ([1.0, 1.0, 2.0], 1, [0, 1, 0]),
        ([2.0], 1, [1]),
        ([1.0, 1.0, 2.0], 2, [0, 1, 0]),
        ([2.0], 2, [1]),
    ]
    assert [row["y"] for row in r.rows] == [101.0, 102.0, 102.0, 103.0, 201.0, 202.0, 202.0, 203.0]
    assert [(row["a"], row["m"], row["seed"]) for row in r.rows][:3] == [
        (1.0, "p", 0),
        (1.0, "p", 1),
        (1.0, "qq", 0),
    ]
    calls.clear()
    studies.sweep(lambda a, m, seed: run(a, m, seed), {"a": [1.0, 2.0, 3.0], "m": [4]}, seeds=1, batch=True,
                  memory_budget=250.0, replica_bytes=lambda p: 100, progress=False)  # fmt: skip
    assert [c[0] for c in calls] == [[1.0, 2.0], [3.0]]  # 250 // 100 = 2 replicas a call
    assert [c[1].tolist() for c in calls] == [[4.0, 4.0], [4.0]]  # m is a number too: batched
    calls.clear()
    studies.sweep(lambda a, m, seed: run(a, m, seed), {"a": [1.0, 2.0, 3.0], "m": [4]}, seeds=1, batch=["a"],
                  memory_budget=50.0, replica_bytes=100, progress=False)  # fmt: skip
    assert [c[0] for c in calls] == [[1.0], [2.0], [3.0]]  # at least one replica a call
    assert [c[1] for c in calls] == [4, 4, 4]


def test_store_names_the_output_in_type_errors():
    """A 2-D or non-scalar output is refused naming it ``output 'name'``."""
    with pytest.raises(
        TypeError,
        match=r"^output 'y' must be a scalar \(int, float, bool, str, one-element tensor\) or a 1-D series, got a Tensor of shape \(2, 2\)$",
    ):
        studies._store({"k": 1}, {"y": torch.zeros(2, 2)}, [], [], {}, {})
    with pytest.raises(
        TypeError,
        match=r"^output 'z' must be a scalar \(int, float, bool, str, one-element tensor\) or a 1-D series, got dict$",
    ):
        studies._store({"k": 1}, {"z": {}}, [], [], {}, {})
    with pytest.raises(TypeError, match=r"^output 't' must be a tensor, got str$"):
        studies._store({"k": 1}, {"s": [1.0, 2.0], "t": "ab"}, [], [], {}, {})
