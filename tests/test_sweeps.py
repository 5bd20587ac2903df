"""``meanfield sweep``: grid expansion, point folders, resume point by point, means, CIs and paired tests."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as st

from meanfield import cli
from meanfield.config import ConfigError, load_toml_text
from meanfield.runs import RunResult
from meanfield.stats import paired_difference, t_interval
from meanfield.sweeps import expand, parse_grid, point_name, summarize, sweep_runs

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


def test_point_name_is_pure_unique_and_safe():
    a = {"optim.beta": {"kind": "cosine", "start": 1.0, "end": 1e-3}, "seed": 2}
    assert point_name(a) == point_name(dict(a))
    assert "/" not in point_name({"data.root": "/x/y", "seed": 0})
    names = {point_name({"optim.lr": lr, "seed": s}) for lr in (0.1, 0.01, 1e-3) for s in range(4)}
    assert len(names) == 12
    long = {f"model.k{i}": "v" * 20 for i in range(10)}
    assert len(point_name(long)) <= 120 and point_name(long) != point_name({**long, "model.k0": "w" * 20})
    assert point_name({"optim.lr": 0.1, "seed": 0}) == "optim.lr=0.1,seed=0"


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
    assert other["n"] == 3 and other["loss:diff"] == pytest.approx(0.5) and math.isnan(other["loss:p"])


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
    assert folders == [f"optim.lr={lr},seed={s}" for lr in (0.02, 0.05) for s in range(3)]
    assert not table.failed and len(table.rows) == 6
    for name in ("sweep.json", "runs.csv", "summary.csv", "summary.md"):
        assert (out / name).is_file()
    assert json.loads((out / "sweep.json").read_text())["seeds"] == [0, 1, 2]
    base, other = table.summary
    finals = {
        (lr, s): RunResult.load(out / f"optim.lr={lr},seed={s}").final["test_mse"]
        for lr in (0.02, 0.05)
        for s in range(3)
    }
    assert base["test_mse"] == pytest.approx(np.mean([finals[0.02, s] for s in range(3)]), rel=1e-12)
    diff = [finals[0.05, s] - finals[0.02, s] for s in range(3)]
    assert other["test_mse:diff"] == pytest.approx(np.mean(diff), rel=1e-12)
    p = st.ttest_rel([finals[0.05, s] for s in range(3)], [finals[0.02, s] for s in range(3)]).pvalue
    assert other["test_mse:p"] == pytest.approx(p, rel=1e-9)
    assert "Δtest_mse vs baseline" in (out / "summary.md").read_text()


def test_sweep_skips_finished_points_and_resumes_the_rest(small_sweep, monkeypatch):
    out, _ = small_sweep
    (out / "optim.lr=0.05,seed=1" / "summary.json").unlink()  # as if that point was interrupted
    ran = []
    import meanfield.sweeps as sweeps

    real = sweeps._run_point
    monkeypatch.setattr(sweeps, "_run_point", lambda *a: ran.append(a[1]) or real(*a))
    table = sweep_runs(
        TEACHER,
        {"optim.lr": [0.02, 0.05]},
        [0, 1, 2],
        out,
        preset="smoke",
        overrides=["train.steps=10", "train.figures=false"],
        quiet=True,
    )
    assert [Path(f).name for f in ran] == ["optim.lr=0.05,seed=1"]
    assert not table.failed


ARGS = ["sweep", str(TEACHER), "--preset", "smoke", "--set", "train.steps=6", "--set", "train.figures=false"]


@pytest.mark.slow
def test_sweep_cli_with_two_jobs_equals_one_process(tmp_path, capsys):
    """Two worker processes (spawned: each imports torch, about 10 s on two cores) give the finals of one."""
    out = tmp_path / "cli"
    code = cli.main(
        [*ARGS, "--grid", "model.n_particles=8,16", "--seeds", "0,1", "--jobs", "2", "--out", str(out)]
    )
    assert code == 0
    assert len(list(out.glob("model.n_particles=*"))) == 4
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
        folder = out / f"model.n_particles={row['model.n_particles']},seed={row['seed']}"
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
    hot = RunResult.load(tmp_path / "arms" / "preset=hot,seed=1")
    resolved = load_toml_text((hot.path / "config.toml").read_text())
    assert resolved["optim"]["beta"] == 1e-2 and resolved["model"]["A"] == 2.0  # the arm
    assert resolved["train"]["batch_size"] == 32 and resolved["data"]["n_train"] == 256  # then smoke's size
    base, arm = table.summary
    assert base["preset"] == "sgd" and arm["preset"] == "hot" and "test_mse:diff" in arm
    with pytest.raises(ConfigError, match="unknown preset 'cold'"):
        sweep_runs(config, {"preset": ["cold"]}, [0], tmp_path / "x", preset="smoke", quiet=True)
