"""``meanfield sweep``: grid expansion, point folders, resume point by point, means, CIs and paired tests."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import signal
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.tiny_run import TEACHER, TINY  # noqa: E402  (tests/helpers/tiny_run.py)
from scipy import stats as st

from meanfield import cli
from meanfield import config as _config
from meanfield import config as mconfig
from meanfield.config import ConfigError, load_toml_text
from meanfield.runs import RunInterrupted, RunResult, sweeps
from meanfield.runs.lock import FolderLock, FolderLocked
from meanfield.runs.sweeps import (
    TableOptions,
    _legacy_point_name,
    expand,
    parse_grid,
    point_name,
    summarize,
    sweep_runs,
)
from meanfield.studies import grid as grid_module
from meanfield.studies import in_memory as studies
from meanfield.studies import summary as summary_module
from meanfield.studies.grid import csv_text as _csv
from meanfield.studies.stats import detectable_difference, holm, paired_difference, pairs_needed, t_interval
from meanfield.studies.summary import _markdown


def test_parse_grid_reads_toml_values_and_keeps_brackets_whole():
    grid = parse_grid(
        ["optim.lr=0.1,1e-2", 'optim.beta=0,{kind="cosine", start=1, end=0}', "data.dataset=a,b"]
    )
    assert grid == {
        "optim.lr": [0.1, 0.01],
        "optim.beta": [0, {"kind": "cosine", "start": 1, "end": 0}],
        "data.dataset": ["a", "b"],
    }
    for bad in (["optim.lr"], ["=1,2"], ["a=1", "a=2"]):
        with pytest.raises(ConfigError):
            parse_grid(bad)


def test_expand_is_the_product_with_seeds_fastest():
    points = expand({"a": [1, 2], "b": ["x"]}, [0, 1])
    assert points == [
        {"a": 1, "b": "x", "seed": 0},
        {"a": 1, "b": "x", "seed": 1},
        {"a": 2, "b": "x", "seed": 0},
        {"a": 2, "b": "x", "seed": 1},
    ]


SAFE = re.compile(r"[A-Za-z0-9._=-]+")


def test_point_name_is_pure_unique_short_and_safe():
    assert point_name({"optim.lr": 0.1, "seed": 0}) == "optim.lr=0.1_seed=0"
    assert point_name({"data.d": 16, "optim.beta": 1e-4, "seed": 0}) == "data.d=16_optim.beta=0.0001_seed=0"
    assert point_name({"model.n_heads": 16, "model.attention": "mha", "x": -1e-3, "y": True, "seed": 1}) == (
        "model.n_heads=16_model.attention=mha_x=-0.001_y=true_seed=1"
    )
    assert point_name({"train.lr": 1e20, "z": 2.0, "seed": 0}) == "train.lr=1e20_z=2.0_seed=0"  # not 1e+20
    cosine = {"optim.beta": {"kind": "cosine", "start": 1e-3, "end": 1e-6}, "seed": 3}
    text = 'optim.beta={kind = "cosine", start = 0.001, end = 1e-06}\nseed=3'  # the exact overrides, hashed
    digest = __import__("hashlib").sha256(text.encode()).hexdigest()[:8]
    assert point_name(cosine) == f"optim.beta=cosine-start-0.001-end-1e-06_seed=3_h{digest}"
    assert point_name(cosine) == point_name(dict(cosine))  # pure
    points = [
        cosine,
        {"optim.beta": {"kind": "cosine", "start": 1e-3, "end": 1e-5}, "seed": 3},
        {"optim.beta": {"kind": "cosine", "start": 1e-3, "end": 1e-5}, "seed": 4},
        {"data.root": "/x/y", "seed": 0},
        {"data.root": "-x-y", "seed": 0},  # the same spelling as the one above: the hash tells them apart
        {"optim.betas": [0.9, 0.999], "seed": 0},
        {"a": "1", "seed": 0},  # the string "1" and the number 1
        {"a": 1, "seed": 0},
        {"data.dataset": "fashion_mnist", "seed": 0},
        {"preset": "hot", "seed": 0},
        {"we ird": "a b", "seed": 0},
        *({"optim.lr": lr, "seed": s} for lr in (0.1, 0.01, 1e-3) for s in range(4)),
        *({f"model.k{i}": c * 20 for i in range(10)} for c in "vw"),  # long: cut, then hashed
    ]
    names = [point_name(p) for p in points]
    assert len(set(names)) == len(points)
    assert all(SAFE.fullmatch(n) and len(n) <= 80 for n in names), names
    assert names[3] != names[4] and names[3].startswith("data.root=-x-y_seed=0_h")


def test_the_legacy_name_is_the_former_rule():
    assert (
        _legacy_point_name({"data.d": 16, "optim.beta": 1e-4, "seed": 0})
        == "data.d=16,optim.beta=0.0001,seed=0"
    )
    cosine = {"optim.beta": {"kind": "cosine", "start": 1e-3, "end": 1e-6}, "seed": 3}
    assert _legacy_point_name(cosine) == "optim.beta=_kind_=__cosine_,_start_=_0.001,_end_=_1e-06_,seed=3"


def test_a_sweep_refuses_points_that_share_a_folder(tmp_path):
    with pytest.raises(ConfigError, match="would share the run folder"):
        sweep_runs(TEACHER, {"optim.lr": [0.02, 0.02]}, [0], tmp_path / "x", preset="smoke", quiet=True)
    assert not (tmp_path / "x").exists()


def test_t_interval_and_paired_difference_against_scipy():
    x = np.array([1.0, 2.0, 4.0, 3.5, 2.2])
    y = x - np.array([0.3, 0.1, 0.5, 0.2, 0.4])
    ci = t_interval(x)
    lo, hi = st.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=st.sem(x))
    assert ci.lo == pytest.approx(lo, rel=1e-12) and ci.hi == pytest.approx(hi, rel=1e-12)
    d = paired_difference(x, y)
    assert d.mean == pytest.approx(0.3) and d.p_value == pytest.approx(st.ttest_rel(x, y).pvalue, rel=1e-12)
    assert math.isnan(t_interval([1.0]).lo) and math.isnan(paired_difference([1.0, 2.0], [0.0, 1.0]).p_value)


def test_summarize_pairs_by_seed():
    rows = [
        {"lr": lr, "seed": s, "status": "finished", "loss": base + 0.1 * s + (0.5 if lr == 2 else 0.0)}
        for lr, base in ((1, 1.0), (2, 1.0))
        for s in range(4)
    ]
    rows[-1] = {**rows[-1], "status": "failed"}  # lr=2, seed 3 did not finish: pairs over seeds 0-2
    table = summarize(rows, ["lr"], ["loss"], baseline={"lr": 1})
    base, other = table
    assert base["n"] == 4 and "loss:diff" not in base
    assert base["is_baseline"] is True and other["is_baseline"] is False
    assert other["n"] == 3 and other["loss:diff"] == pytest.approx(0.5) and math.isnan(other["loss:p"])


def _beta_rows() -> list[dict]:
    """Three β arms × 4 seeds: a loss with a seed effect shared by the arms (the pairing removes it) and an
    MSE spanning decades (a log-scale metric)."""
    g = np.random.default_rng(3)
    seed_effect = np.array([0.0, 0.03, -0.02, 0.05])
    rows = []
    for beta, shift, factor in ((0.0, 0.0, 1.0), (1e-3, -0.012, 0.5), (1e-2, 0.004, 3.0)):
        for s in range(4):
            rows.append(
                {
                    "beta": beta,
                    "seed": s,
                    "status": "finished",
                    "loss": 2.1 + seed_effect[s] + shift + 0.004 * g.standard_normal(),
                    "mse": factor * 10.0 ** (-4 + 1.5 * g.standard_normal()),
                }
            )
    return rows


def _column(rows, beta, key):
    return np.array([r[key] for r in rows if r["beta"] == beta])


def test_summarize_gives_holm_power_and_pairs_needed_against_scipy():
    rows = _beta_rows()
    options = TableOptions(detect=(0.01, 0.002), power=0.9)
    base, cold, hot = summarize(rows, ["beta"], ["loss"], {"beta": 0.0}, options=options)
    raw = []
    for entry, beta in ((cold, 1e-3), (hot, 1e-2)):
        a, b = _column(rows, beta, "loss"), _column(rows, 0.0, "loss")
        d = a - b
        lo, hi = st.t.interval(0.95, 3, loc=d.mean(), scale=st.sem(d))
        assert entry["loss:diff"] == pytest.approx(d.mean(), rel=1e-12) and entry["loss:pairs"] == 4
        assert (entry["loss:diff_lo"], entry["loss:diff_hi"]) == (pytest.approx(lo), pytest.approx(hi))
        assert entry["loss:p"] == pytest.approx(st.ttest_rel(a, b).pvalue, rel=1e-12)
        assert entry["loss:sd"] == pytest.approx(d.std(ddof=1), rel=1e-12)
        sd = d.std(ddof=1)
        assert entry["loss:detectable"] == pytest.approx(detectable_difference(sd, 4, 0.9, 0.05), rel=1e-9)
        assert entry["loss:pairs_for_0.01"] == pairs_needed(0.01, sd, 0.9, 0.05)
        assert entry["loss:pairs_for_0.002"] == pairs_needed(0.002, sd, 0.9, 0.05)
        assert entry["loss:detectable"] != pytest.approx(detectable_difference(sd, 4, 0.8))  # the power used
        raw.append(entry["loss:p"])
    m = sorted(raw)  # Holm by hand over the two tests: 2·p_(1), max(2·p_(1), p_(2))
    by_hand = {m[0]: min(1, 2 * m[0]), m[1]: min(1, max(2 * m[0], m[1]))}
    assert cold["loss:p_holm"] == pytest.approx(by_hand[cold["loss:p"]], rel=1e-12)
    assert hot["loss:p_holm"] == pytest.approx(by_hand[hot["loss:p"]], rel=1e-12)
    assert cold["loss:p_holm"] != pytest.approx(cold["loss:p"])  # control: adjusted
    assert "loss:p_holm" not in base and "loss:detectable" not in base


def test_holm_families_are_the_table_or_each_metric():
    rows = _beta_rows()
    table = summarize(rows, ["beta"], ["loss", "mse"], {"beta": 0.0})
    p = [e[f"{m}:p"] for m in ("loss", "mse") for e in table[1:]]
    assert [e[f"{m}:p_holm"] for m in ("loss", "mse") for e in table[1:]] == pytest.approx(holm(p).tolist())
    per = summarize(rows, ["beta"], ["loss", "mse"], {"beta": 0.0}, options=TableOptions(holm="metric"))
    for m in ("loss", "mse"):
        q = [e[f"{m}:p"] for e in per[1:]]
        assert [e[f"{m}:p_holm"] for e in per[1:]] == pytest.approx(holm(q).tolist())
    assert per[1]["loss:p_holm"] != pytest.approx(table[1]["loss:p_holm"])  # control: the family matters
    options = TableOptions(holm="metric")
    assert "over the tests of each metric separately (4 tests in all)" in _markdown(
        per, ["beta"], ["loss", "mse"], options
    )
    with pytest.raises(ConfigError, match="holm must be one of"):
        TableOptions(holm="all")


def test_a_log_scale_metric_is_a_geometric_mean_and_paired_ratios():
    rows = _beta_rows()
    options = TableOptions(log_metrics=("mse",), detect=(0.1,))
    base, cold, _ = summarize(rows, ["beta"], ["mse"], {"beta": 0.0}, options=options)
    logs = np.log(_column(rows, 0.0, "mse"))
    lo, hi = st.t.interval(0.95, 3, loc=logs.mean(), scale=st.sem(logs))
    assert base["mse"] == pytest.approx(st.gmean(_column(rows, 0.0, "mse")), rel=1e-12)
    assert (base["mse:lo"], base["mse:hi"]) == (pytest.approx(np.exp(lo)), pytest.approx(np.exp(hi)))
    assert base["mse:lo"] > 0 and base["mse:scale"] == "log"
    assert t_interval(_column(rows, 0.0, "mse")).lo < 0  # control: the arithmetic interval goes below 0
    d = np.log(_column(rows, 1e-3, "mse")) - logs
    assert cold["mse:diff"] == pytest.approx(d.mean(), rel=1e-12) and cold["mse:diff_scale"] == "log"
    assert cold["mse:p"] == pytest.approx(st.ttest_rel(np.log(_column(rows, 1e-3, "mse")), logs).pvalue)
    assert cold["mse:pairs_for_0.1"] == pairs_needed(0.1, d.std(ddof=1))
    text = _markdown([base, cold], ["beta"], ["mse"], options)
    assert f"×{math.exp(d.mean()):.4g} (" in text and "mse: geometric mean (95 % CI, log scale)" in text
    plain = summarize(rows, ["beta"], ["mse"], {"beta": 0.0})  # not asked: the arithmetic mean
    assert plain[0]["mse"] == pytest.approx(_column(rows, 0.0, "mse").mean()) and "mse:scale" not in plain[0]
    negative = [{**r, "mse": -r["mse"]} if r["seed"] == 0 else r for r in rows]
    fallback = summarize(negative, ["beta"], ["mse"], {"beta": 0.0}, options=options)
    assert fallback[0]["mse:scale"] == "linear (a value ≤ 0)"
    assert "(arithmetic: a value ≤ 0)" in _markdown(fallback, ["beta"], ["mse"], options)


def test_the_markdown_table_labels_every_interval_and_says_the_family():
    rows = _beta_rows()
    options = TableOptions(detect=(0.01,))
    table = summarize(rows, ["beta"], ["loss"], {"beta": 0.0}, options=options)
    text = _markdown(table, ["beta"], ["loss"], options)
    head = text.splitlines()[0]
    for column in (
        "loss (95 % CI)",
        "Δloss vs baseline ± 95 % CI half-width",
        "pairs",
        "p (paired t)",
        "p (Holm)",
        "detectable at 80 % power",
        "pairs for Δ = 0.01 (80 % power)",
    ):
        assert f"| {column} |" in head, column
    cold = table[1]
    half = (cold["loss:diff_hi"] - cold["loss:diff_lo"]) / 2
    assert f"| {cold['loss:diff']:.4g} ± {half:.4g} | 4 |" in text
    assert (
        "± is the half-width of the 95 % Student-t interval of the mean paired difference (df = pairs − 1)"
        in text
    )
    assert "Holm's step-down adjustment over the 2 tests of this table" in text
    assert "(df = n − 1)" in text and "noncentral t" in text
    assert "loss:pairs_for_0.01" in _csv(table).splitlines()[0]
    missing = _markdown(
        summarize(rows, ["beta"], ["loss", "absent"], {"beta": 0.0}), ["beta"], ["loss", "absent"]
    )
    base_row, cold_row = missing.splitlines()[2:4]
    assert base_row.count("| baseline |") == 2 and cold_row.count("| baseline |") == 0  # absent: "—"
    unpaired = _markdown(summarize(rows, ["beta"], ["loss"]), ["beta"], ["loss"])
    assert "±" not in unpaired and "Holm" not in unpaired and "(df = n − 1)" in unpaired
    with pytest.raises(ConfigError, match="a difference to detect must be a number > 0"):
        TableOptions(detect=(0.0,))
    with pytest.raises(ConfigError, match=r"power must be in \(α, 1\)"):
        TableOptions(power=1.0)


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "lr"
    table = sweep_runs(
        TEACHER,
        {"optim.lr": [0.02, 0.05]},
        [0, 1, 2],
        out,
        preset="smoke",
        overrides=["train.steps=10", "train.figures=false"],
        baseline="optim.lr=0.02",
        metrics=["test_mse"],
        quiet=True,
    )
    return out, table


def test_sweep_writes_one_folder_per_point_and_the_tables(small_sweep):
    out, table = small_sweep
    folders = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert folders == [f"optim.lr={lr}_seed={s}" for lr in (0.02, 0.05) for s in range(3)]
    assert not table.failed and len(table.rows) == 6
    for name in ("sweep.json", "runs.csv", "summary.csv", "summary.md"):
        assert (out / name).is_file()
    assert json.loads((out / "sweep.json").read_text())["seeds"] == [0, 1, 2]
    assert json.loads((out / "optim.lr=0.05_seed=2" / "point.json").read_text()) == {
        "point": {"optim.lr": 0.05, "seed": 2},
        "overrides": ["train.steps=10", "train.figures=false", "optim.lr=0.05", "seed=2"],
        "preset": "smoke",
    }
    lines = (out / "runs.csv").read_text().splitlines()
    assert lines[0].startswith("optim.lr,seed,folder,status,")
    assert lines[1].startswith("0.02,0,optim.lr=0.02_seed=0,finished,")
    assert [r["folder"] for r in table.rows] == folders
    base, other = table.summary
    finals = {
        (lr, s): RunResult.load(out / f"optim.lr={lr}_seed={s}").final["test_mse"]
        for lr in (0.02, 0.05)
        for s in range(3)
    }
    assert base["test_mse"] == pytest.approx(np.mean([finals[0.02, s] for s in range(3)]), rel=1e-12)
    diff = [finals[0.05, s] - finals[0.02, s] for s in range(3)]
    assert other["test_mse:diff"] == pytest.approx(np.mean(diff), rel=1e-12)
    p = st.ttest_rel([finals[0.05, s] for s in range(3)], [finals[0.02, s] for s in range(3)]).pvalue
    assert other["test_mse:p"] == pytest.approx(p, rel=1e-9)
    assert "Δtest_mse vs baseline" in (out / "summary.md").read_text()


def _rerun(out: Path, monkeypatch) -> tuple[list[str], object]:
    """The small sweep run again into ``out``: the folder names of the points that ran, and the table."""
    import meanfield.runs.sweeps as sweeps

    ran, real = [], sweeps._run_point
    monkeypatch.setattr(sweeps, "_run_point", lambda *a: ran.append(Path(a[1]).name) or real(*a))
    table = sweep_runs(
        TEACHER,
        {"optim.lr": [0.02, 0.05]},
        [0, 1, 2],
        out,
        preset="smoke",
        overrides=["train.steps=10", "train.figures=false"],
        quiet=True,
    )
    return ran, table


def test_a_finished_sweep_rerun_with_table_options_rewrites_its_tables_only(
    small_sweep, monkeypatch, tmp_path
):
    import meanfield.runs.sweeps as sweeps

    out = tmp_path / "again"
    shutil.copytree(small_sweep[0], out)
    ran = []
    monkeypatch.setattr(sweeps, "_run_point", lambda *a: ran.append(a) or {})
    code = cli.main(
        [
            *ARGS[:-4],
            "--set",
            "train.steps=10",
            "--set",
            "train.figures=false",
            "--grid",
            "optim.lr=0.02,0.05",
        ]
        + ["--seeds", "0,1,2", "--baseline", "optim.lr=0.02", "--metric", "test_mse", "--quiet"]
        + ["--log-scale", "test_mse", "--detect", "0.5", "--power", "0.9", "--out", str(out)]
    )
    assert code == 0 and ran == []  # nothing ran
    text = (out / "summary.md").read_text()
    assert "test_mse ratio vs baseline (95 % CI)" in text and "pairs for ln ratio = 0.5 (90 % power)" in text
    header = (out / "summary.csv").read_text().splitlines()[0]
    assert "test_mse:p_holm" in header and "test_mse:pairs_for_0.5" in header


def test_bad_table_options_are_refused_before_anything_runs(tmp_path, capsys):
    code = cli.main([*ARGS, "--grid", "model.n_particles=8", "--power", "0.01", "--out", str(tmp_path / "p")])
    assert code == 2 and "power must be in" in capsys.readouterr().err and not (tmp_path / "p").exists()
    code = cli.main(
        [*ARGS, "--grid", "model.n_particles=8", "--metric", "test_mse", "--log-scale", "loss"]
        + ["--out", str(tmp_path / "q")]
    )
    assert code == 2 and "log-scale metrics ['loss'] are not among" in capsys.readouterr().err


def test_a_rerun_with_other_overrides_refuses_the_finished_points(small_sweep, monkeypatch, tmp_path):
    """The small sweep rerun into a copy of its folder with one more override (train.steps=11): its finished
    points hold runs of another configuration, so the sweep stops before running anything or rewriting
    sweep.json, naming the point and the key; without the check it skipped them and mixed their results
    with the new configuration's. Negative control: the same overrides rerun nothing and pass."""
    import meanfield.runs.sweeps as sweeps

    out = tmp_path / "mixed"
    shutil.copytree(small_sweep[0], out)
    spec = (out / "sweep.json").read_text()
    ran = []
    monkeypatch.setattr(sweeps, "_run_point", lambda *a: ran.append(a) or {})
    with pytest.raises(
        ConfigError,
        match=r"sweep point optim.lr=0.02_seed=0: .* another configuration \(it differs in train.steps\)",
    ):
        sweep_runs(
            TEACHER,
            {"optim.lr": [0.02, 0.05]},
            [0, 1, 2],
            out,
            preset="smoke",
            overrides=["train.steps=10", "train.figures=false", "train.steps=11"],
            quiet=True,
        )
    assert ran == [] and (out / "sweep.json").read_text() == spec
    table = sweep_runs(
        TEACHER,
        {"optim.lr": [0.02, 0.05]},
        [0, 1, 2],
        out,
        preset="smoke",
        overrides=["train.steps=10", "train.figures=false"],
        quiet=True,
    )
    assert ran == [] and not table.failed


SMALL_SET = ["train.steps=10", "train.figures=false"]  # the small sweep's overrides


def _no_runs(monkeypatch) -> None:
    import meanfield.runs.sweeps as sweeps

    def refuse(*args):
        raise AssertionError(f"a --table-only sweep ran a point: {args[1]}")

    monkeypatch.setattr(sweeps, "_run_point", refuse)


def test_table_only_summarises_the_finished_points_and_runs_nothing(small_sweep, monkeypatch, tmp_path):
    """--table-only over a wider grid × seeds than ran: the finished points are the table (lr 0.02 at seeds
    0-2, lr 0.05 at 0-1 once one summary is gone), every other point is a 'not run' row saying why, no point
    runs, no folder or point.json is created, sweep.json is left as it was; a diverged run counts as failed,
    as in a sweep that ran it. Negative control: the same command with run=True runs exactly the missing ones."""
    import meanfield.runs.sweeps as sweeps

    out = tmp_path / "lr"
    shutil.copytree(small_sweep[0], out)
    (out / "optim.lr=0.05_seed=2" / "summary.json").unlink()  # as if interrupted before its summary
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    spec = (out / "sweep.json").read_bytes()
    grid, seeds = {"optim.lr": [0.02, 0.05, 0.1]}, [0, 1, 2, 3]
    _no_runs(monkeypatch)
    table = sweep_runs(TEACHER, grid, seeds, out, preset="smoke", overrides=SMALL_SET, baseline="optim.lr=0.02",
                       metrics=["test_mse"], quiet=True, run=False)  # fmt: skip
    after = sorted(p.relative_to(out) for p in out.rglob("*"))
    assert [p for p in after if p not in before] == [] and (out / "sweep.json").read_bytes() == spec
    assert len(table.rows) == 12 and table.failed == []
    not_run = {r["folder"]: r["error"] for r in table.not_run}
    assert len(not_run) == 12 - 5
    assert not_run["optim.lr=0.05_seed=2"] == "no summary.json"
    assert (
        not_run["optim.lr=0.1_seed=0"] == "no run folder"
        and not_run["optim.lr=0.02_seed=3"] == "no run folder"
    )
    n = {row["optim.lr"]: row["n"] for row in table.summary}
    assert n == {0.02: 3, 0.05: 2}  # lr 0.1 has no finished seed: no row
    finished = {r["folder"]: r["test_mse"] for r in small_sweep[1].rows}
    mine = [row for row in table.summary if row["optim.lr"] == 0.05][0]
    diffs = [finished[f"optim.lr=0.05_seed={s}"] - finished[f"optim.lr=0.02_seed={s}"] for s in (0, 1)]
    assert mine["test_mse:pairs"] == 2 and mine["test_mse:diff"] == pytest.approx(sum(diffs) / 2, rel=1e-12)
    csv_lines = (out / "runs.csv").read_text().splitlines()
    assert sum(",not run," in line for line in csv_lines) == 7 and len(csv_lines) == 13

    diverged = out / "optim.lr=0.02_seed=1" / "summary.json"
    record = json.loads(diverged.read_text())
    diverged.write_text(json.dumps({**record, "status": "diverged", "error": "NaN loss at step 7"}))
    again = sweep_runs(TEACHER, grid, seeds, out, preset="smoke", overrides=SMALL_SET, metrics=["test_mse"],
                       quiet=True, run=False)  # fmt: skip
    assert [(r["folder"], r["status"], r["error"]) for r in again.failed] == [
        ("optim.lr=0.02_seed=1", "diverged", "NaN loss at step 7")
    ]
    assert "test_mse" not in again.failed[0]  # its last metrics are not a finished run's
    diverged.write_text(json.dumps(record))

    ran = []  # the control: a sweep that runs
    monkeypatch.setattr(sweeps, "_run_point", lambda *a: ran.append(Path(a[1]).name) or {"status": "failed"})
    sweep_runs(TEACHER, grid, seeds, out, preset="smoke", overrides=SMALL_SET, quiet=True)
    assert sorted(ran) == sorted(not_run)


def test_table_only_refuses_what_a_sweep_refuses(small_sweep, monkeypatch, tmp_path):
    """A finished point of another configuration, a folder held by another sweep, and a folder that does not
    exist (a mistyped --out) are refused, each before any table is written."""
    out = tmp_path / "lr"
    shutil.copytree(small_sweep[0], out)
    tables = (out / "runs.csv").read_bytes()
    _no_runs(monkeypatch)
    grid = {"optim.lr": [0.02, 0.05]}
    with pytest.raises(ConfigError, match=r"another configuration \(it differs in train.steps\)"):
        sweep_runs(TEACHER, grid, [0], out, preset="smoke", overrides=[*SMALL_SET, "train.steps=11"], quiet=True,
                   run=False)  # fmt: skip
    with FolderLock(out, "sweep"):
        with pytest.raises(FolderLocked, match="in use by another sweep"):
            sweep_runs(TEACHER, grid, [0], out, preset="smoke", overrides=SMALL_SET, quiet=True, run=False)
    with pytest.raises(ConfigError, match="is not a sweep folder"):
        sweep_runs(
            TEACHER, grid, [0], tmp_path / "typo", preset="smoke", overrides=SMALL_SET, quiet=True, run=False
        )
    assert (out / "runs.csv").read_bytes() == tables and not (tmp_path / "typo").exists()
    (tmp_path / "plain").mkdir()  # an existing folder that no sweep wrote: nothing written into it
    with pytest.raises(ConfigError, match="holds no sweep.json"):
        sweep_runs(TEACHER, grid, [0], tmp_path / "plain", preset="smoke", overrides=SMALL_SET, run=False)
    assert list((tmp_path / "plain").iterdir()) == []
    control = sweep_runs(TEACHER, grid, [0], out, preset="smoke", overrides=SMALL_SET, quiet=True, run=False)
    assert len(control.rows) == 2 and not control.not_run


def test_table_only_lists_a_damaged_summary_as_not_run_and_says_so_once(
    small_sweep, monkeypatch, tmp_path, capsys
):
    """A finished point whose summary.json is damaged: --table-only lists it as not run with that reason (not as
    failed, not in the table), and says so in one line that does not promise a resume it will not do."""
    out = tmp_path / "lr"
    shutil.copytree(small_sweep[0], out)
    damaged = out / "optim.lr=0.05_seed=1" / "summary.json"
    damaged.write_text("{not json")
    _no_runs(monkeypatch)
    table = sweep_runs(TEACHER, {"optim.lr": [0.02, 0.05]}, [0, 1, 2], out, preset="smoke", overrides=SMALL_SET,
                       metrics=["test_mse"], quiet=True, run=False)  # fmt: skip
    said = capsys.readouterr().out.splitlines()
    assert said == [said[0]] and said[0].startswith(f"{damaged} is unreadable (")
    assert said[0].endswith("); the point is listed as not run")
    assert table.failed == [] and [(r["folder"], r["error"]) for r in table.not_run] == [
        ("optim.lr=0.05_seed=1", "an unreadable summary.json (a sweep resumes the point from its checkpoint)")
    ]
    assert {row["optim.lr"]: row["n"] for row in table.summary} == {0.02: 3, 0.05: 2}
    assert damaged.read_text() == "{not json"  # left as it is


def test_sweep_json_keeps_every_command_in_order(tmp_path, monkeypatch):
    """Two commands with other grids and seeds into one folder: ``commands`` lists both in order, each with its
    grid, seeds and start time; the top level is the latest. A sweep.json from before ``commands`` becomes the
    first entry (``started: null``); a --table-only command adds nothing."""
    import meanfield.runs.sweeps as sweeps

    monkeypatch.setattr(sweeps, "_run_point", lambda *a: {"status": "finished", "final": {"test_mse": 1.0}})
    out = tmp_path / "s"
    out.mkdir()
    old = {"config": "old.toml", "preset": None, "overrides": [], "grid": {"optim.lr": [0.5]}, "seeds": [9],
           "baseline": None}  # fmt: skip
    (out / "sweep.json").write_text(json.dumps(old))
    sweep_runs(TEACHER, {"optim.lr": [0.02]}, [0], out, preset="smoke", overrides=SMALL_SET, quiet=True)
    sweep_runs(TEACHER, {"optim.lr": [0.05]}, [1, 2], out, preset="smoke", overrides=SMALL_SET, quiet=True)
    spec = json.loads((out / "sweep.json").read_text())
    assert spec["grid"] == {"optim.lr": [0.05]} and spec["seeds"] == [1, 2]
    commands = spec["commands"]
    assert commands[0] == {**old, "started": None}
    assert [(c["grid"], c["seeds"]) for c in commands[1:]] == [
        ({"optim.lr": [0.02]}, [0]),
        ({"optim.lr": [0.05]}, [1, 2]),
    ]
    assert all(c["started"].endswith("+00:00") and c["preset"] == "smoke" for c in commands[1:])
    assert commands[1]["started"] <= commands[2]["started"]
    assert {k: v for k, v in spec.items() if k != "commands"} == {
        k: v for k, v in commands[2].items() if k != "started"
    }
    text = (out / "sweep.json").read_text()
    sweep_runs(TEACHER, {"optim.lr": [0.02, 0.05]}, [0, 1, 2], out, preset="smoke", overrides=SMALL_SET, quiet=True,
               run=False)  # fmt: skip
    assert (out / "sweep.json").read_text() == text


def test_table_only_says_where_a_running_or_interrupted_point_stands(small_sweep, monkeypatch, tmp_path):
    """A point whose run is interrupted (or still running in another process) is 'not run' with its status and
    step, not a table row and not failed; the same summary marked finished is a row again (the control)."""
    out = tmp_path / "lr"
    shutil.copytree(small_sweep[0], out)
    path = out / "optim.lr=0.05_seed=0" / "summary.json"
    record = json.loads(path.read_text())
    _no_runs(monkeypatch)
    for status in ("interrupted", "running"):
        path.write_text(json.dumps({**record, "status": status, "step": 6}))
        table = sweep_runs(TEACHER, {"optim.lr": [0.05]}, [0, 1], out, preset="smoke", overrides=SMALL_SET,
                           metrics=["test_mse"], quiet=True, run=False)  # fmt: skip
        assert [(r["folder"], r["error"]) for r in table.not_run] == [
            ("optim.lr=0.05_seed=0", f"its run is {status} at step 6")
        ]
        assert table.failed == [] and [row["n"] for row in table.summary] == [1]
    path.write_text(json.dumps(record))
    control = sweep_runs(TEACHER, {"optim.lr": [0.05]}, [0, 1], out, preset="smoke", overrides=SMALL_SET,
                         metrics=["test_mse"], quiet=True, run=False)  # fmt: skip
    assert control.not_run == [] and [row["n"] for row in control.summary] == [2]


def test_an_unreadable_sweep_json_is_replaced_and_said_once(tmp_path, monkeypatch, capsys):
    """A damaged sweep.json (a disk filled mid-write by another tool): the next sweep says once that the record
    of earlier commands is lost and writes a readable one holding its own command only."""
    import meanfield.runs.sweeps as sweeps

    monkeypatch.setattr(sweeps, "_run_point", lambda *a: {"status": "finished", "final": {"test_mse": 1.0}})
    out = tmp_path / "s"
    out.mkdir()
    (out / "sweep.json").write_text('{"config": "a.toml", "grid"')
    sweep_runs(TEACHER, {"optim.lr": [0.02]}, [0], out, preset="smoke", overrides=SMALL_SET, quiet=True)
    said = [line for line in capsys.readouterr().out.splitlines() if "sweep.json" in line]
    assert len(said) == 1 and said[0].endswith("its record of earlier commands is lost, this one is kept")
    spec = json.loads((out / "sweep.json").read_text())
    assert [(c["grid"], c["seeds"]) for c in spec["commands"]] == [({"optim.lr": [0.02]}, [0])]


def test_sweep_cli_table_only_says_what_it_did_not_run(small_sweep, tmp_path, capsys, monkeypatch):
    out = tmp_path / "lr"
    shutil.copytree(small_sweep[0], out)
    _no_runs(monkeypatch)
    argv = ["sweep", str(TEACHER), "--preset", "smoke", *(a for s in SMALL_SET for a in ("--set", s)),
            "--grid", "optim.lr=0.02,0.05", "--seeds", "0,1,2,3", "--metric", "test_mse", "--table-only", "--out", str(out)]  # fmt: skip
    assert cli.main(argv) == 0
    shown = capsys.readouterr().out
    assert "| optim.lr | n |" in shown
    assert (
        "2 of 8 points have no finished run and were not run (--table-only): the tables cover the 6 finished ones"
        in shown
    )


def test_sweep_skips_finished_points_and_resumes_the_rest(small_sweep, monkeypatch, tmp_path):
    # on a copy: the module's sweep is shared, and rerunning it in place rewrote its summary.md (no baseline), so
    # test_sweep_writes_one_folder_per_point_and_the_tables failed whenever it ran after this test (mutmut's order)
    out = tmp_path / "resumed"
    shutil.copytree(small_sweep[0], out)
    (out / "optim.lr=0.05_seed=1" / "summary.json").unlink()  # as if that point was interrupted
    ran, table = _rerun(out, monkeypatch)
    assert ran == ["optim.lr=0.05_seed=1"]
    assert not table.failed


def test_a_sweep_folder_with_old_names_is_renamed_and_resumes(small_sweep, tmp_path, monkeypatch, capsys):
    """Folders named by the former rule (``optim.lr=0.02,seed=0``) or by anything else but holding the point's
    configuration are renamed; the finished ones are not rerun, the unfinished one resumes."""
    out = tmp_path / "old"
    shutil.copytree(small_sweep[0], out)
    for p in out.iterdir():
        if p.is_dir():
            (p / "point.json").unlink()
            p.rename(out / p.name.replace("_seed=", ",seed="))  # the former names
    (out / "optim.lr=0.02,seed=1").rename(out / "some other name")  # found by its config.toml
    (out / "optim.lr=0.05,seed=1" / "summary.json").unlink()  # an unfinished point, under its old name
    finals = {
        p.name: json.loads((p / "summary.json").read_text())["final"]
        for p in out.glob("*/")
        if (p / "summary.json").exists()
    }
    capsys.readouterr()
    ran, table = _rerun(out, monkeypatch)
    assert ran == ["optim.lr=0.05_seed=1"]
    assert not table.failed
    printed = capsys.readouterr().out
    assert "'some other name' to 'optim.lr=0.02_seed=1'" in printed and printed.count("renamed") == 6
    folders = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert folders == [f"optim.lr={lr}_seed={s}" for lr in (0.02, 0.05) for s in range(3)]
    assert all((out / f / "point.json").is_file() for f in folders)
    moved = json.loads((out / "optim.lr=0.02_seed=1" / "summary.json").read_text())["final"]
    assert moved == finals["some other name"]  # the same run, not a new one
    assert json.loads((out / "optim.lr=0.05_seed=1" / "summary.json").read_text())["status"] == "finished"


ARGS = ["sweep", str(TEACHER), "--preset", "smoke", "--set", "train.steps=6", "--set", "train.figures=false"]


@pytest.mark.slow
def test_sweep_cli_with_two_jobs_equals_one_process(tmp_path, capsys):
    """Two worker processes (spawned: each imports torch, about 10 s on two cores) give the finals of one."""
    out = tmp_path / "cli"
    code = cli.main(
        [*ARGS, "--grid", "model.n_particles=8,16", "--seeds", "0,1", "--jobs", "2", "--out", str(out)]
    )
    assert code == 0
    assert len(list(out.glob("model.n_particles=*_seed=*"))) == 4
    assert "| model.n_particles | n |" in capsys.readouterr().out
    one = sweep_runs(
        TEACHER,
        {"model.n_particles": [8, 16]},
        [0, 1],
        tmp_path / "one",
        preset="smoke",
        overrides=["train.steps=6", "train.figures=false"],
        quiet=True,
    )
    for row in one.rows:
        folder = out / row["folder"]
        assert RunResult.load(folder).final["test_mse"] == row["test_mse"]


def test_sweep_cli_refuses_a_bad_grid_and_baseline(tmp_path, capsys):
    code = cli.main([*ARGS, "--grid", "model.n_particels=8", "--out", str(tmp_path / "bad")])
    assert code == 2 and "did you mean 'n_particles'" in capsys.readouterr().err
    code = cli.main(
        [*ARGS, "--grid", "model.n_particles=8", "--baseline", "optim.lr=1", "--out", str(tmp_path / "b")]
    )
    assert code == 2 and "not a grid key" in capsys.readouterr().err


def test_arms_are_presets_swept_by_the_preset_axis_and_paired(tmp_path):
    """``--grid preset=a,b`` applies each arm after ``--preset``; the table pairs the arms seed by seed."""
    config = tmp_path / "arms.toml"
    config.write_text(
        TEACHER.read_text()
        + "\n[presets.sgd]\noptim.lr = 0.05\n\n[presets.hot]\noptim.lr = 0.05\noptim.beta = 1e-2\nmodel.A = 2.0\n"
    )
    table = sweep_runs(
        config,
        parse_grid(["preset=sgd,hot"]),
        [0, 1],
        tmp_path / "arms",
        preset="smoke",
        overrides=["train.steps=6", "train.figures=false"],
        baseline="preset=sgd",
        metrics=["test_mse"],
        quiet=True,
    )
    assert not table.failed
    hot = RunResult.load(tmp_path / "arms" / "preset=hot_seed=1")
    resolved = load_toml_text((hot.path / "config.toml").read_text())
    assert resolved["optim"]["beta"] == 1e-2 and resolved["model"]["A"] == 2.0  # the arm
    assert resolved["train"]["batch_size"] == 32 and resolved["data"]["n_train"] == 256  # then smoke's size
    base, arm = table.summary
    assert base["preset"] == "sgd" and arm["preset"] == "hot" and "test_mse:diff" in arm
    with pytest.raises(ConfigError, match="unknown preset 'cold'"):
        sweep_runs(config, {"preset": ["cold"]}, [0], tmp_path / "x", preset="smoke", quiet=True)


def test_order_seed_starts_every_grid_point_of_a_seed_before_the_next_and_changes_nothing_else(
    tmp_path, monkeypatch
):
    """``--order seed``: the points start seed by seed (the grid's order within a seed, the seeds in the
    order given), and runs.csv/summary.md are those of the default order (the order is only which run starts
    first; sweep.json records it). Control: the default order runs each grid point's seeds in turn. An unknown
    order is refused, naming the allowed ones."""
    import meanfield.runs.sweeps as sweeps

    def sweep(out: Path, *order: str) -> list[str]:
        ran: list[str] = []
        monkeypatch.setattr(
            sweeps,
            "_run_point",
            lambda *a: ran.append(Path(a[1]).name) or {"status": "finished", "final": {"test_mse": 1.0}},
        )
        code = cli.main([*ARGS, "--grid", "optim.lr=0.02,0.05,0.1", "--seeds", "3,1", "--quiet", "--out", str(out),
                         *order])  # fmt: skip
        assert code == 0
        return ran

    by_grid, by_seed = sweep(tmp_path / "g"), sweep(tmp_path / "s", "--order", "seed")
    assert by_grid == [f"optim.lr={lr}_seed={s}" for lr in (0.02, 0.05, 0.1) for s in (3, 1)]
    assert by_seed == [f"optim.lr={lr}_seed={s}" for s in (3, 1) for lr in (0.02, 0.05, 0.1)]
    for name in ("runs.csv", "summary.md"):
        assert (tmp_path / "s" / name).read_text() == (tmp_path / "g" / name).read_text()
    assert json.loads((tmp_path / "s" / "sweep.json").read_text())["order"] == "seed"
    with pytest.raises(ConfigError, match=r"order must be one of \['grid', 'seed'\], got 'random'"):
        sweep_runs(TEACHER, {"optim.lr": [0.02]}, [0], tmp_path / "r", preset="smoke", order="random")


def _h(text: str) -> str:
    return "_h" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


@pytest.mark.parametrize(
    "point,name",
    [
        ({"my key": 1, "seed": 0}, "my-key=1_seed=0" + _h("my key=1\nseed=0")),
        ({"a/b.c": 2.5, "seed": 1}, "a-b.c=2.5_seed=1" + _h("a/b.c=2.5\nseed=1")),
        ({"x  //Yz": 3, "seed": 2}, "x-Yz=3_seed=2" + _h("x  //Yz=3\nseed=2")),
        ({"optim.Beta_max": 4, "seed": 0}, "optim.Beta_max=4_seed=0"),
        ({"key(sub)": "abc", "seed": 0}, "key-sub-=abc_seed=0" + _h('key(sub)="abc"\nseed=0')),
    ],
    ids=["space", "slash", "runs", "safe", "brackets"],
)
def test_point_name_replaces_runs_of_unsafe_key_characters_and_hashes(point, name):
    """A key outside ``[A-Za-z0-9._-]``: each run of other characters becomes one ``-`` (letters of both
    cases, digits, ``.`` and ``-`` kept), and the name ends with ``_h`` + 8 hex digits of the SHA-256 of the
    exact ``key=<TOML value>`` lines (hashlib here). A safe key (``_`` and capitals included) is kept as it
    is, without a hash."""
    assert sweeps.point_name(point) == name


def test_point_name_cuts_a_long_name_at_80_characters_without_a_trailing_underscore():
    """A name over 80 characters is cut to ``80 − 10`` characters, a trailing ``_`` dropped, then the hash:
    ``'a'·67 + '=1_bb=22_seed=0'`` (82 characters) keeps ``'a'·67 + '=1'``. Negative control: 80 characters
    exactly are kept whole, without a hash."""
    point = {"a" * 67: 1, "bb": 22, "seed": 0}
    assert sweeps.point_name(point) == "a" * 67 + "=1" + _h("a" * 67 + "=1\nbb=22\nseed=0")
    assert sweeps.point_name({"a" * 67: 1, "b": 2, "seed": 0}) == "a" * 67 + "=1_b=2_seed=0"


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"jobs": 0}, "jobs must be ≥ 1, got 0"),
        ({"jobs": -2}, "jobs must be ≥ 1, got -2"),
        ({"backend": "slurm"}, "backend must be one of ['local', 'ray'], got 'slurm'"),
        ({"jobs": 1, "backend": "dask"}, "backend must be one of ['local', 'ray'], got 'dask'"),
        ({"baseline": "nope=1"}, "baseline key 'nope' is not a grid key; the grid keys are ['optim.lr']"),
        ({"baseline": "optim.lr=0.3"}, "baseline optim.lr=0.3 is not one of the grid's values [0.1, 0.2]"),
        (
            {"metrics": ["test_mse"], "table": TableOptions(log_metrics=("train_loss",))},
            "log-scale metrics ['train_loss'] are not among the metrics summarised ['test_mse']",
        ),
    ],
    ids=["jobs0", "jobs-2", "backend", "jobs1_backend", "baseline_key", "baseline_value", "log_metric"],
)
def test_sweep_runs_refuses_bad_arguments_before_writing_anything(tmp_path, kwargs, message):
    """Each bad argument is a ConfigError with the exact message, raised before the sweep folder is made
    (jobs = 1 passes its check: the next one speaks)."""
    out = tmp_path / "sweep"
    with pytest.raises(ConfigError) as caught:
        sweeps.sweep_runs(TEACHER, {"optim.lr": [0.1, 0.2]}, [0], out, preset="smoke", quiet=True, **kwargs)
    assert str(caught.value) == message
    assert not out.exists()


def test_sweep_runs_hands_each_point_its_arguments_and_tabulates_their_summaries(tmp_path, monkeypatch):
    """The points' runner emulated (it returns a summary per point, ``test_mse = i``): each of the 4 points
    (2 learning rates × seeds 0, 1, the seed fastest) gets the resolved config path, its folder, the preset,
    the sweep's then its own overrides, and ``cpu_count // jobs`` threads (8 // 2 = 4); sweep.json, each
    point.json and the rows (non-numeric finals dropped, ``error`` None) are exactly those. A second call,
    one point finished by hand (``test_mse = 9``), runs the other 3 only, with no thread setting for one job.
    """
    calls = []

    def run_local(todo, args, jobs, bar, stop):
        calls.append((list(todo), jobs, [args(i) for i in todo]))
        return {i: {"status": "finished", "final": {"test_mse": float(i), "note": "x"}} for i in todo}

    monkeypatch.setattr(sweeps, "_run_local", run_local)
    monkeypatch.setattr(sweeps.os, "cpu_count", lambda: 8)
    out = tmp_path / "sw"
    grid = {"optim.lr": [0.1, 0.2]}
    result = sweeps.sweep_runs(TEACHER, grid, [0, 1], out, preset="smoke", overrides=TINY, jobs=2, quiet=True)
    points = [{"optim.lr": lr, "seed": s} for lr in (0.1, 0.2) for s in (0, 1)]
    names = [f"optim.lr={lr}_seed={s}" for lr in (0.1, 0.2) for s in (0, 1)]
    overrides = [[*TINY, f"optim.lr={p['optim.lr']}", f"seed={p['seed']}"] for p in points]
    ((todo, jobs, args),) = calls
    assert todo == [0, 1, 2, 3] and jobs == 2
    assert args == [
        (str(TEACHER.resolve()), str((out / n).resolve()), "smoke", o, 4) for n, o in zip(names, overrides)
    ]
    recorded = json.loads((out / "sweep.json").read_text())
    commands = recorded.pop("commands")  # this one command, with its start time
    assert [{k: v for k, v in c.items() if k != "started"} for c in commands] == [recorded]
    assert recorded == {
        "config": str(TEACHER),
        "preset": "smoke",
        "overrides": TINY,
        "grid": grid,
        "seeds": [0, 1],
        "baseline": None,
        "order": "grid",
    }
    for p, n, o in zip(points, names, overrides):
        assert json.loads((out / n / "point.json").read_text()) == {
            "point": p,
            "overrides": o,
            "preset": "smoke",
        }
    expected_rows = [
        {**p, "folder": n, "status": "finished", "test_mse": float(i), "error": None}
        for i, (p, n) in enumerate(zip(points, names))
    ]
    assert result.rows == expected_rows and result.metrics == ["test_mse"] and result.failed == []
    assert all((out / f).is_file() for f in ("runs.csv", "summary.csv", "summary.md"))

    (out / names[0] / "summary.json").write_text(
        json.dumps({"status": "finished", "final": {"test_mse": 9.0}})
    )
    calls.clear()
    result = sweeps.sweep_runs(TEACHER, grid, [0, 1], out, preset="smoke", overrides=TINY, quiet=True)
    ((todo, jobs, args),) = calls
    assert todo == [1, 2, 3] and jobs == 1 and [a[4] for a in args] == [None] * 3
    assert [r["test_mse"] for r in result.rows] == [9.0, 1.0, 2.0, 3.0]


class _ThreadPool:
    """A stand-in for :class:`meanfield.runs._workers.WorkerPool`: the calls run at once, here, recording the pool's
    arguments."""

    made: list = []

    def __init__(self, jobs, function, init):
        _ThreadPool.made.append((jobs, function, init))
        self.jobs, self.function, self.done, self.stopping = jobs, function, [], False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    pids: list = []

    @property
    def running(self):
        return len(self.done)

    @property
    def free(self):
        return len(self.done) < self.jobs

    def submit(self, key, args):
        self.done.append((key, True, self.function(*args)))

    def results(self, timeout=None):
        done, self.done = self.done, []
        yield from done


def _fake_summary(config, folder, preset, overrides, threads):
    return {"status": "finished", "final": {"x": 1.0}, "folder": folder, "threads": threads}


def _finals(lr: float, seed: int) -> dict:
    loss = 1.0 + lr * (seed + 1) + 0.01 * seed**2
    return {"loss": loss, "acc": 1 - loss / 10, "flag": True, "label": "x"}


def _point_runner(ran: list):
    def run_point(config, folder, preset, overrides, threads):
        values = dict(o.split("=", 1) for o in overrides)
        ran.append((Path(folder).name, preset, threads, config))
        return {"status": "finished", "final": _finals(float(values["optim.lr"]), int(values["seed"]))}

    return run_point


def test_a_stopped_worker_refuses_to_start_a_point(monkeypatch, tmp_path):
    """Once the worker was signalled, ``_run_point`` raises :class:`RunInterrupted` with its message and the
    signal, and writes nothing. Control: the message is the documented one, the signal SIGTERM."""
    monkeypatch.setattr(sweeps, "_worker_stop", int(signal.SIGTERM))
    with pytest.raises(RunInterrupted, match=r"^the sweep was stopped before this point started$") as info:
        sweeps._run_point(str(TEACHER), str(tmp_path / "p"), "smoke", [], None)
    assert info.value.signum == signal.SIGTERM and not (tmp_path / "p").exists()


def test_worker_init_records_the_sweep_in_locks_and_signals_only_mark_the_worker(monkeypatch):
    """``_worker_init`` sets ``lock.SWEEP_PID`` to its parent (the sweep) and installs handlers for SIGINT and
    SIGTERM that record the signal in ``_worker_stop`` (nothing is raised)."""
    from meanfield.runs import lock

    handlers = {}
    monkeypatch.setattr(signal, "signal", lambda signum, handler: handlers.__setitem__(signum, handler))
    monkeypatch.setattr(sweeps, "_worker_stop", None)
    monkeypatch.setattr(lock, "SWEEP_PID", None)
    sweeps._worker_init()
    assert set(handlers) == {signal.SIGINT, signal.SIGTERM} and lock.SWEEP_PID == os.getppid()
    handlers[signal.SIGTERM](signal.SIGTERM, None)
    assert sweeps._worker_stop == signal.SIGTERM
    handlers[signal.SIGINT](signal.SIGINT, None)
    assert sweeps._worker_stop == signal.SIGINT


def test_a_signal_that_came_while_a_point_was_built_stops_it_after_its_first_step(monkeypatch, tmp_path):
    """A worker's SIGTERM that arrives while the run is being built is only recorded (``_worker_stop``, the
    run's handler is not in place yet): ``_resignal``, the run's ``on_step``, sends it again after step 1, and
    the run checkpoints there and stops as interrupted; the record is cleared. (Dropping the resend ran the
    point to its end through a stop; nothing tested it.) Control: without a recorded signal it runs to step 4."""
    from meanfield.runs import run

    monkeypatch.setattr(sweeps, "_worker_stop", signal.SIGTERM)
    with pytest.raises(RunInterrupted) as info:
        run(TEACHER, tmp_path / "a", overrides=TINY, quiet=True, on_step=sweeps._resignal)
    assert info.value.signum == signal.SIGTERM and sweeps._worker_stop is None
    assert RunResult.load(tmp_path / "a").summary["status"] == "interrupted"
    assert (tmp_path / "a" / "checkpoints" / "step-00000001.pt").is_file()
    assert run(TEACHER, tmp_path / "b", overrides=TINY, quiet=True, on_step=sweeps._resignal).step == 4


@pytest.mark.parametrize("jobs", [1, 2])
def test_run_local_returns_every_point_by_its_index(monkeypatch, jobs):
    """``_run_local`` runs every point of ``todo`` with its own arguments and files its summary under its
    index, here or (``jobs`` = 2) in a ``WorkerPool`` of ``_run_point`` with ``_worker_init``; the bar counts
    them."""
    from meanfield.runs import _workers

    _ThreadPool.made = []
    monkeypatch.setattr(_workers, "WorkerPool", _ThreadPool)
    monkeypatch.setattr(sweeps, "_run_point", _fake_summary)
    ticks = []
    bar = types.SimpleNamespace(update=ticks.append)
    stop = types.SimpleNamespace(signum=None, pids=list)
    todo = [4, 0, 2, 7, 1]
    got = sweeps._run_local(todo, lambda i: ("c.toml", f"point{i}", None, [f"seed={i}"], 3), jobs, bar, stop)
    assert {i: s["folder"] for i, s in got.items()} == {i: f"point{i}" for i in todo}
    assert all(s["threads"] == 3 for s in got.values()) and ticks == [1] * len(todo)
    assert _ThreadPool.made == ([] if jobs == 1 else [(2, _fake_summary, sweeps._worker_init)])


def test_sweep_runs_with_a_fake_point_runner_summarises_against_scipy(monkeypatch, tmp_path):
    """A sweep whose points return known finals: every point runs here once (no threads set), the
    metrics default to the numeric finals (not the seed, a flag or a string), ``sweep.json`` records the
    configuration; the means, t intervals and paired t-test against scipy (to 1e-12)."""
    ran = []
    monkeypatch.setattr(sweeps, "_run_point", _point_runner(ran))
    monkeypatch.setattr(sweeps, "_preflight", lambda names, configs: None)
    out = tmp_path / "sw"
    table = sweeps.sweep_runs(
        TEACHER,
        {"optim.lr": [0.02, 0.05]},
        [0, 1, 2],
        out,
        preset="smoke",
        baseline="optim.lr=0.02",
        quiet=True,
    )
    names = [f"optim.lr={lr}_seed={s}" for lr in (0.02, 0.05) for s in range(3)]
    assert [r[0] for r in ran] == names and {r[1:3] for r in ran} == {("smoke", None)}
    assert {r[3] for r in ran} == {str(TEACHER.resolve())}
    assert table.metrics == ["loss", "acc"]
    spec = json.loads((out / "sweep.json").read_text())
    assert [c["seeds"] for c in spec.pop("commands")] == [spec["seeds"]]
    assert spec == {
        "config": str(TEACHER),
        "preset": "smoke",
        "overrides": [],
        "grid": {"optim.lr": [0.02, 0.05]},
        "seeds": [0, 1, 2],
        "baseline": "optim.lr=0.02",
        "order": "grid",
    }
    base = np.array([_finals(0.02, s)["loss"] for s in range(3)])
    arm = np.array([_finals(0.05, s)["loss"] for s in range(3)])
    first, second = table.summary
    lo, hi = st.t.interval(0.95, 2, loc=base.mean(), scale=st.sem(base))
    assert first["loss"] == pytest.approx(base.mean(), rel=1e-12)
    assert first["loss:lo"] == pytest.approx(lo, rel=1e-12) and first["loss:hi"] == pytest.approx(
        hi, rel=1e-12
    )
    assert second["loss:diff"] == pytest.approx((arm - base).mean(), rel=1e-12)
    assert second["loss:p"] == pytest.approx(st.ttest_rel(arm, base).pvalue, rel=1e-9)
    assert first["is_baseline"] is True and second["is_baseline"] is False


def test_sweep_runs_on_ray_hands_the_points_to_ray_with_one_thread(monkeypatch, tmp_path):
    """``backend = "ray"``: the points go to ``_run_on_ray`` (with the address), each with one torch thread,
    and nothing runs locally."""
    ran, calls = [], []
    runner = _point_runner(ran)

    def on_ray(todo, args, address, bar):
        calls.append((list(todo), address))
        return {i: runner(*args(i)) for i in todo}

    def local(*a):
        raise AssertionError("ran locally")

    monkeypatch.setattr(sweeps, "_run_on_ray", on_ray)
    monkeypatch.setattr(sweeps, "_run_local", local)
    monkeypatch.setattr(sweeps, "_preflight", lambda names, configs: None)
    table = sweeps.sweep_runs(
        TEACHER, {"optim.lr": [0.02]}, [0, 1], tmp_path / "ray", backend="ray", address="host:1", quiet=True
    )
    assert calls == [([0, 1], "host:1")] and [r[2] for r in ran] == [1, 1]
    assert [r["loss"] for r in table.rows] == [_finals(0.02, s)["loss"] for s in (0, 1)]


def test_adopt_old_folders_by_legacy_name_and_by_configuration(tmp_path, capsys):
    """A missing point's folder is found under its former name or by its ``config.toml`` (renamed, one line
    each); an unrelated folder is left alone."""
    points = [{"a": 1, "seed": 0}, {"a": 2, "seed": 0}]
    names = [sweeps.point_name(p) for p in points]
    configs = [{"seed": 0, "x": {"a": 1}}, {"seed": 0, "x": {"a": 2}}]
    (tmp_path / "a=1,seed=0").mkdir()
    (tmp_path / "anything").mkdir()
    (tmp_path / "anything" / "config.toml").write_text(mconfig.to_toml(configs[1]))
    (tmp_path / "unrelated").mkdir()
    (tmp_path / "unrelated" / "config.toml").write_text(mconfig.to_toml({"seed": 1}))
    sweeps._adopt_old_folders(tmp_path, points, names, configs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a=1_seed=0", "a=2_seed=0", "unrelated"]
    assert capsys.readouterr().out.count("renamed the run folder") == 2


def test_expand_names_and_log_scale_summary_against_hand_and_scipy():
    """``expand`` is the product in key order with the seed fastest; names by hand (a list value is
    spelled with ``-`` and hashed: the SHA-256 recomputed here); a log-scale metric's paired difference is
    the mean difference of the logs, its p the paired t-test of the logs (scipy), its mean the geometric
    one; the Markdown table marks the baseline row."""
    assert sweeps.expand({"b": [1, 2], "a": ["x"]}, [5, 6]) == [
        {"b": 1, "a": "x", "seed": 5},
        {"b": 1, "a": "x", "seed": 6},
        {"b": 2, "a": "x", "seed": 5},
        {"b": 2, "a": "x", "seed": 6},
    ]
    with pytest.raises(ConfigError, match="at least one seed"):
        sweeps.expand({"b": [1]}, [])
    assert sweeps.point_name({"a": 1, "seed": 0}) == "a=1_seed=0"
    digest = hashlib.sha256(b"opt.betas=[0.9, 0.999]\nseed=0").hexdigest()[:8]
    assert (
        sweeps.point_name({"opt.betas": [0.9, 0.999], "seed": 0}) == f"opt.betas=0.9-0.999_seed=0_h{digest}"
    )
    base = np.array([1.0, 2.0, 4.0, 3.0])
    arm = np.array([1.5, 2.2, 5.0, 3.9])
    rows = [
        {"lr": lr, "seed": s, "status": "finished", "mse": float(v)}
        for lr, values in ((1, base), (2, arm))
        for s, v in enumerate(values)
    ]
    options = sweeps.TableOptions(log_metrics=("mse",))
    first, second = sweeps.summarize(rows, ["lr"], ["mse"], {"lr": 1}, options=options)
    assert first["mse"] == pytest.approx(st.gmean(base), rel=1e-12) and first["mse:scale"] == "log"
    la, lb = np.log(arm), np.log(base)
    assert second["mse:diff_scale"] == "log" and second["mse:diff"] == pytest.approx(
        (la - lb).mean(), rel=1e-12
    )
    assert second["mse:p"] == pytest.approx(st.ttest_rel(la, lb).pvalue, rel=1e-9)
    assert second["mse:p"] != pytest.approx(st.ttest_rel(arm, base).pvalue, rel=1e-3)  # control: not linear
    text = summary_module._markdown([first, second], ["lr"], ["mse"], options)
    base_line, arm_line = text.splitlines()[2:4]
    assert "| baseline |" in base_line and "| baseline |" not in arm_line


def _h_2(text: str) -> str:
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
    assert sweeps.point_name(point) == "optim.beta=cosine-start-0.001-end-1e-06_seed=3" + _h_2(text)
    assert sweeps.point_name({"a": "1", "seed": 0}) == "a=1_seed=0" + _h_2('a="1"\nseed=0')


def test_point_name_unsafe_key():
    """A key outside ``[A-Za-z0-9._-]`` is slugged (runs to one ``-``) and the name hashed."""
    point = {"a b/c": 1, "seed": 0}
    assert sweeps.point_name(point) == "a-b-c=1_seed=0" + _h_2("a b/c=1\nseed=0")


def test_point_name_length_limit():
    """Exactly 80 characters stay unhashed; 81 are cut to 70 plus the hash; a cut ending in ``_`` loses it."""
    assert sweeps.point_name({"k" * 78: 1}) == "k" * 78 + "=1"
    assert sweeps.point_name({"k" * 79: 1}) == "k" * 70 + _h_2("k" * 79 + "=1")
    point = {"a" * 67: 1, "b" * 20: 2}  # "a"*67 + "=1_" puts "_" at index 69, the last one kept
    assert sweeps.point_name(point) == "a" * 67 + "=1" + _h_2("a" * 67 + "=1\n" + "b" * 20 + "=2")
    point = {"a" * 68: 1, "b" * 20: 2}  # the cut ends in "1"
    assert sweeps.point_name(point) == "a" * 68 + "=1" + _h_2("a" * 68 + "=1\n" + "b" * 20 + "=2")
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
    assert none == [{"a": 1, "n": 1, "m:n": 0}]  # one run, no value: counted, and said


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


def test_number_fmt_pct():
    """``_number`` excludes bools/non-finite; ``_fmt`` uses 4 significant digits, ``—`` for non-finite."""
    assert [grid_module.is_number(v) for v in (1, 1.5, True, math.nan, math.inf, "1", None)] == [
        True, True, False, False, False, False, False,
    ]  # fmt: skip
    assert summary_module._fmt(1.23456) == "1.235"
    assert summary_module._fmt(12345.0) == "1.234e+04"
    assert summary_module._fmt(math.nan) == "—" and summary_module._fmt(-math.inf) == "—"
    assert summary_module._fmt(3) == "3" and summary_module._fmt("x") == "x" and summary_module._fmt(None) == "None"
    assert summary_module._pct(0.95) == "95 %" and summary_module._pct(0.8) == "80 %" and summary_module._pct(0.975) == "97.5 %"


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

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(
        ConfigError,
        match="^"
        + re.escape("backend 'ray' needs Ray: pip install 'meanfield-sde[ray]' (or use --backend local)"),
    ):
        sweeps._run_on_ray([0], lambda i: (), None, None)


@pytest.mark.parametrize("initialized", [False, True], ids=["starts-ray", "ray-running"])
def test_run_on_ray_collects_every_point_by_index_and_counts_each_once(monkeypatch, initialized):
    """The Ray backend through a fake ``ray`` (one process): each point's summary under its index whatever order
    the tasks finish in; a task that raised (retries exhausted) is a ``failed`` summary with the error, and the
    others go on; the progress bar moves by exactly one per point (3 points: 3); tasks ask one CPU and
    ``RAY_RETRIES`` retries; Ray is started with the address (and shut down after) only when it was not running."""

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
