"""``meanfield sweep``: grid expansion, point folders, resume point by point, means, CIs and paired tests."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as st

from meanfield import cli
from meanfield.config import ConfigError, load_toml_text
from meanfield.runs import RunResult
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
from meanfield.studies.grid import csv_text as _csv
from meanfield.studies.stats import detectable_difference, holm, paired_difference, pairs_needed, t_interval
from meanfield.studies.summary import _markdown

ROOT = Path(__file__).resolve().parents[1]
TEACHER = ROOT / "experiments" / "teacher_student" / "config.toml"


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


def test_sweep_skips_finished_points_and_resumes_the_rest(small_sweep, monkeypatch):
    out, _ = small_sweep
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
