"""``meanfield run``: run folders, checkpoints, bit-for-bit resume, Ctrl-C, non-finite losses, the CLI."""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import pytest
import torch

from meanfield import cli, tasks
from meanfield.config import ConfigError, load_toml_text
from meanfield.runs import (
    TIMING_KEYS,
    Checkpoints,
    NonFiniteLossError,
    RunInterrupted,
    RunResult,
    derive_seed,
    load_config,
    run,
)

ROOT = Path(__file__).resolve().parents[1]
TEACHER = ROOT / "experiments" / "teacher_student" / "config.toml"
CHAR_LM = ROOT / "experiments" / "char_lm" / "config.toml"
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"

# 24 steps of the smoke preset, a checkpoint every 5 (so a stop at 13 resumes from 10), eval every 6
SMALL = ["train.steps=24", "train.checkpoint_every=5", "train.keep_checkpoints=3", "train.log_every=3"]


def _deterministic(records):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records]


def _final_state(folder: Path) -> dict[str, torch.Tensor]:
    return Checkpoints(folder / "checkpoints").load()["model"]


def _assert_same_run(a: Path, b: Path) -> None:
    sa, sb = _final_state(a), _final_state(b)
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key  # bit for bit
    ra, rb = RunResult.load(a), RunResult.load(b)
    assert _deterministic(ra.metrics) == _deterministic(rb.metrics)
    assert ra.final == rb.final and ra.step == rb.step
    oa = Checkpoints(a / "checkpoints").load()["optimizer"]
    ob = Checkpoints(b / "checkpoints").load()["optimizer"]
    for name in oa["generators"]:
        assert torch.equal(oa["generators"][name], ob["generators"][name])


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("runs") / "full"
    result = run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True)
    assert result.status == "finished" and result.step == 24
    return folder


def test_run_folder_has_every_file(uninterrupted):
    folder = uninterrupted
    for name in ("config.toml", "environment.json", "metrics.jsonl", "summary.json", "figures/training.png"):
        assert (folder / name).is_file(), name
    config = load_config(TEACHER, "smoke", SMALL)
    assert load_toml_text((folder / "config.toml").read_text()) == config  # the resolved configuration
    env = json.loads((folder / "environment.json").read_text())
    assert env["seed"] == 0 and env["packages"]["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert {"git", "threads", "device", "python"} <= env.keys()
    records = RunResult.load(folder).metrics
    # log_every = 3, eval_every = 10 (smoke), and the last step
    assert [r["step"] for r in records] == [3, 6, 9, 10, 12, 15, 18, 20, 21, 24]
    for r in records:
        assert {"train_loss", "samples_per_s", "beta", "optim", "time"} <= r.keys()
        assert r["optim"]["step"] == r["step"]  # the optimizer's statistics of that step
    assert [r["step"] for r in records if "test_mse" in r] == [10, 20, 24]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["final"]["test_mse"] == records[-1]["test_mse"]
    assert summary["best"]["test_mse"]["value"] == min(r["test_mse"] for r in records if "test_mse" in r)


def test_checkpoints_keep_the_last_k_and_load_weights_only(uninterrupted):
    checkpoints = Checkpoints(uninterrupted / "checkpoints")
    assert checkpoints.steps() == [15, 20, 24]  # keep_checkpoints = 3; the end is always saved
    state = torch.load(checkpoints.path(24), weights_only=True)  # plain data only
    assert state["step"] == 24 and set(state) >= {"model", "optimizer", "batches", "torch_rng"}
    assert not list((uninterrupted / "checkpoints").glob("*.tmp"))  # atomic writes leave nothing behind


def test_resume_after_an_error_reaches_the_same_run_bit_for_bit(uninterrupted, tmp_path):
    folder = tmp_path / "stopped"

    def stop_at_13(step: int) -> None:
        if step == 13:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True, on_step=stop_at_13)
    assert RunResult.load(folder).status == "failed"
    assert Checkpoints(folder / "checkpoints").latest() == 10
    assert max(r["step"] for r in RunResult.load(folder).metrics) == 12  # logged past the checkpoint
    result = run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True, resume=True)
    assert result.status == "finished"
    _assert_same_run(uninterrupted, folder)


def test_ctrl_c_writes_a_checkpoint_and_resume_continues(uninterrupted, tmp_path):
    folder = tmp_path / "interrupted"

    def interrupt_at_7(step: int) -> None:
        if step == 7:
            os.kill(os.getpid(), signal.SIGINT)

    before = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN in a background job
    with pytest.raises(RunInterrupted, match="step 7"):
        run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True, on_step=interrupt_at_7)
    assert Checkpoints(folder / "checkpoints").latest() == 7  # written on Ctrl-C
    assert RunResult.load(folder).status == "interrupted"
    assert signal.getsignal(signal.SIGINT) is before  # handler put back
    run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True, resume=True)
    _assert_same_run(uninterrupted, folder)


def test_a_run_on_the_device_finishes_and_resumes_bit_for_bit(device, tmp_path):
    """``device = "cuda"``: the run finishes with finite metrics, names the GPU, saves checkpoints that load
    with weights_only, and (the CPU contract) a resume after an error reaches the same run bit for bit."""
    if device.type == "cpu":
        pytest.skip("on the CPU: test_resume_after_an_error_reaches_the_same_run_bit_for_bit")
    overrides = [*SMALL, f"device={device.type}"]
    full, stopped = tmp_path / "full", tmp_path / "stopped"
    result = run(TEACHER, full, preset="smoke", overrides=overrides, quiet=True)
    assert result.status == "finished" and result.step == 24
    env = json.loads((full / "environment.json").read_text())
    assert env["device"].startswith("cuda") and env["cuda_device"]
    state = torch.load(Checkpoints(full / "checkpoints").path(24), weights_only=True)
    assert all(bool(torch.isfinite(t).all()) for t in state["model"].values())
    assert all(math.isfinite(r["train_loss"]) for r in RunResult.load(full).metrics)

    def stop_at_13(step: int) -> None:
        if step == 13:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        run(TEACHER, stopped, preset="smoke", overrides=overrides, quiet=True, on_step=stop_at_13)
    run(TEACHER, stopped, preset="smoke", overrides=overrides, quiet=True, resume=True)
    _assert_same_run(full, stopped)


def test_resume_refuses_another_configuration_and_a_new_run_refuses_an_existing_folder(uninterrupted):
    with pytest.raises(ConfigError, match=r"differs in optim.lr"):
        run(TEACHER, uninterrupted, preset="smoke", overrides=[*SMALL, "optim.lr=0.5"], resume=True)
    with pytest.raises(ConfigError, match="already holds a run"):
        run(TEACHER, uninterrupted, preset="smoke", overrides=SMALL)


class _NanAfter:
    """A task whose loss becomes NaN at step 8 (wraps the teacher-student task)."""

    Data = tasks.TEACHER_STUDENT.Data
    Model = tasks.TEACHER_STUDENT.Model

    def build(self, data, model, **kw):
        experiment = tasks.TEACHER_STUDENT.build(data, model, **kw)
        inner, calls = experiment.loss, [0]

        def loss(batch):
            calls[0] += 1
            value = inner(batch)
            return value * float("nan") if calls[0] >= 8 else value

        experiment.loss = loss
        return experiment


def test_non_finite_loss_stops_naming_the_step_and_keeps_the_finite_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setitem(tasks.TASKS, "nan_after", _NanAfter())
    folder = tmp_path / "nan"
    with pytest.raises(NonFiniteLossError, match=r"nan at step 8.*step-00000005.pt") as info:
        run(TEACHER, folder, preset="smoke", overrides=[*SMALL, "task=nan_after"], quiet=True)
    assert info.value.step == 8
    assert RunResult.load(folder).status == "diverged"
    state = Checkpoints(folder / "checkpoints").load()
    assert state["step"] == 5 and all(torch.isfinite(v).all() for v in state["model"].values())
    # the CLI says it in one line and exits 1
    code = cli.main(
        [
            "run",
            str(TEACHER),
            "--preset",
            "smoke",
            "--out",
            str(tmp_path / "cli"),
            "--quiet",
            *sum((["--set", s] for s in [*SMALL, "task=nan_after"]), []),
        ]
    )
    assert code == 1


def test_a_schedule_that_cannot_be_saved_is_refused_at_the_start(tmp_path):
    config = load_config(TEACHER, "smoke")
    config["optim"]["beta"] = lambda step: 0.01
    with pytest.raises(ConfigError, match=r"optim.beta must be a number or a table.*callable cannot be"):
        run(config, tmp_path / "lambda", quiet=True)
    assert not (tmp_path / "lambda" / "config.toml").exists()  # nothing was started


def test_cli_run_and_its_errors(tmp_path, capsys):
    out = tmp_path / "cli"
    assert cli.main(["run", str(TEACHER), "--preset", "smoke", "--out", str(out), "--quiet"]) == 0
    assert RunResult.load(out).status == "finished"
    assert cli.main(["run", str(TEACHER), "--preset", "smoke", "--out", str(out), "--quiet"]) == 2
    assert "already holds a run" in capsys.readouterr().err
    code = cli.main(
        ["run", str(TEACHER), "--preset", "smoke", "--set", "train.stpes=3", "--out", str(tmp_path / "x")]
    )
    err = capsys.readouterr().err
    assert code == 2 and "unknown key 'train.stpes'" in err and "did you mean 'steps'" in err
    assert cli.main(["run", str(TEACHER), "--preset", "tiny", "--out", str(tmp_path / "y")]) == 2
    assert "unknown preset 'tiny'" in capsys.readouterr().err
    code = cli.main(["run", str(TEACHER), "--set", "optim.lrr=1", "--out", str(tmp_path / "z")])
    assert code == 2 and "did you mean 'lr'" in capsys.readouterr().err
    # finished runs resume to themselves: nothing more to do
    assert cli.main(["run", str(TEACHER), "--preset", "smoke", "--out", str(out), "--resume", "--quiet"]) == 0


def test_derived_seeds_are_distinct_streams():
    seeds = {derive_seed(s, k) for s in range(3) for k in ("init", "data", "batches", "noise", "torch")}
    assert len(seeds) == 15 and all(0 <= s < 2**62 for s in seeds)


@pytest.mark.skipif(not SHAKESPEARE.exists(), reason="tiny-shakespeare not in ../shared/data")
def test_char_lm_smoke_run_resumes_bit_for_bit(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    run(CHAR_LM, a, preset="smoke", quiet=True)

    def stop(step: int) -> None:
        if step == 8:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        run(CHAR_LM, b, preset="smoke", quiet=True, on_step=stop)
    run(CHAR_LM, b, preset="smoke", quiet=True, resume=True)
    _assert_same_run(a, b)
    records = RunResult.load(a).metrics
    assert "tokens_per_s" in records[0] and "val_loss" in records[-1]
    assert records[-1]["val_ppl"] == pytest.approx(2.718281828459045 ** records[-1]["val_loss"], rel=1e-9)


def test_tensorboard_events_hold_the_logged_metrics(uninterrupted):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    events = event_accumulator.EventAccumulator(str(uninterrupted / "tensorboard"))
    events.Reload()
    logged = [(r["step"], r["train_loss"]) for r in RunResult.load(uninterrupted).metrics]
    scalars = [(e.step, e.value) for e in events.Scalars("train_loss")]
    assert [s for s, _ in scalars] == [s for s, _ in logged]
    assert all(v == pytest.approx(w, rel=1e-6) for (_, v), (_, w) in zip(scalars, logged))  # float32 events
    assert "optim/eta_eff_mean" in events.Tags()["scalars"]


def test_best_is_the_largest_for_higher_is_better_metrics(tmp_path, monkeypatch):
    """``summary.json``'s best: the minimum of a loss, the maximum of a metric the task declares higher-better."""

    class Scored:
        Data = tasks.TEACHER_STUDENT.Data
        Model = tasks.TEACHER_STUDENT.Model

        def build(self, data, model, **kw):
            experiment = tasks.TEACHER_STUDENT.build(data, model, **kw)
            calls = [0]

            def evaluate():
                calls[0] += 1
                return {"test_loss": [3.0, 1.0, 2.0][calls[0] - 1], "accuracy": [0.2, 0.9, 0.5][calls[0] - 1]}

            experiment.evaluate = evaluate
            experiment.higher_is_better = ("accuracy",)
            return experiment

    monkeypatch.setitem(tasks.TASKS, "scored", Scored())
    overrides = [
        "task=scored",
        "train.steps=3",
        "train.eval_every=1",
        "train.log_every=1",
        "train.figures=false",
    ]
    result = run(TEACHER, tmp_path / "r", preset="smoke", overrides=overrides, quiet=True)
    assert result.summary["best"]["test_loss"] == {"value": 1.0, "step": 2}
    assert result.summary["best"]["accuracy"] == {"value": 0.9, "step": 2}
    env = json.loads((tmp_path / "r" / "environment.json").read_text())
    assert len(env["source_sha256"]) == 64


def test_a_runs_thread_count_is_its_own(tmp_path):
    """``threads = 1`` holds for the run only: the caller's thread count is back afterwards (a later run with
    ``threads = 0``, torch's default, would otherwise inherit 1 and reduce in another order)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        run(TEACHER, tmp_path / "one", preset="smoke", overrides=[*SMALL, "threads=1"], quiet=True)
        assert torch.get_num_threads() == 2
        torch.set_num_threads(1)  # negative control: a run with threads = 0 leaves the count alone
        run(TEACHER, tmp_path / "zero", preset="smoke", overrides=[*SMALL, "threads=0"], quiet=True)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
