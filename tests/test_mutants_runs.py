"""The run machinery value by value (issue 25: the sampled mutants of ``meanfield.runs.loop``, ``.sinks``,
``.environment`` and ``.folder``).

Every test checks a value against an answer worked out independently of the code under test: a clock that
advances by a known amount (so throughputs and times are exact), a fake ``SummaryWriter`` or progress bar that
records what it was given, a git repository made here and asked with ``git rev-parse HEAD``, a ``/proc/cpuinfo``
written by hand, SHA-256 computed with :mod:`hashlib` over files laid out here, an emulated second rank whose
loss or gradient flag is known. Each has a negative control: the same check on an input where the answer
differs. Nothing here is statistical; the runs are the teacher-student smoke preset cut to 4 steps of 8
particles (well under a second each).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import types
import warnings
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import scipy
import torch

import meanfield
from meanfield import tasks
from meanfield.config import ConfigError
from meanfield.optim import Langevin
from meanfield.runs import loop, sinks
from meanfield.runs.folder import (
    Checkpoints,
    CorruptCheckpointError,
    MetricsLog,
    RunFolderError,
    check_folder,
    config_differences,
    config_hash,
    write_marker,
)
from meanfield.runs.schema import RunConfig, TrainConfig, build_optimizer, check_config, load_config
from meanfield.tasks.regression import FeatureModel, TeacherStudentData

env_mod = importlib.import_module("meanfield.runs.environment")  # meanfield.runs.environment is the function

from _tiny_run import TEACHER, TINY  # noqa: E402  (tests/_tiny_run.py)

STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[+-]\d{4}$")  # time.strftime("%Y-%m-%dT%H:%M:%S%z")
CPU = torch.device("cpu")


def _run(folder: Path, extra=(), **kwargs):
    return loop.run(TEACHER, folder, preset="smoke", overrides=[*TINY, *extra], quiet=True, **kwargs)


def _stopped(folder: Path, extra=()) -> Path:
    """A TINY run stopped by an error after step 3: its latest checkpoint is step 2."""

    def stop(step: int) -> None:
        if step == 3:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        _run(folder, extra, on_step=stop)
    assert Checkpoints(folder / "checkpoints").latest() == 2
    return folder


def _assert_stamp_between(text: str, before: float, after: float) -> None:
    """``text`` is a local ``%Y-%m-%dT%H:%M:%S%z`` stamp of a moment in ``[before, after]`` (whole seconds).

    The lower bound allows one clock tick: ``time.strftime`` reads C's ``time()``, which glibc serves from the
    coarse real-time clock, up to a tick behind ``time.time()`` (here 1,622 of 390,857 ``localtime()`` calls in
    3 s still said the previous second, up to 7 ms after it ended; CI saw a stamp of 06:31:45 for a ``before`` of
    06:31:46.002)."""
    assert STAMP.match(text), text
    moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    assert math.floor(before - 0.05) <= moment <= after, (text, before, after)


class _Clock:
    """A stand-in for the loop's ``time`` module: every ``perf_counter()`` call advances by ``dt`` seconds."""

    def __init__(self, dt: float) -> None:
        self.t, self.dt = 0.0, dt

    def perf_counter(self) -> float:
        self.t += self.dt
        return self.t

    strftime = staticmethod(time.strftime)


def _bars(monkeypatch) -> list:
    """Replace the loop's tqdm by a recorder; returns the list of bars the run makes."""
    made = []

    class Bar:
        def __init__(self, **kwargs):
            self.kwargs, self.postfix, self.updates, self.closed = kwargs, [], 0, False
            made.append(self)

        def set_postfix(self, **kwargs):
            self.postfix.append(kwargs)

        def update(self, n=1):
            self.updates += n

        def close(self):
            self.closed = True

    monkeypatch.setattr(loop, "tqdm", Bar)
    return made


# ======================================================================================================
# meanfield.runs.loop
# ======================================================================================================


def test_throughput_and_times_of_a_run_on_a_clock_of_known_steps(tmp_path, monkeypatch):
    """Each step takes exactly 0.25 s on the loop's clock: a line every 2 steps of 16 samples says
    ``samples_per_s = 2·16 / (2·0.25) = 64`` and ``time = 0.25·step``; summary.json's ``wall_time_s = 4·0.25``,
    its rate ``4·16/1 = 64``, its ``seed`` the configured 3 and ``updated`` a timestamp of now; the progress bar
    counts 4 steps of 4 and shows each line's loss and rate; with ``temperature_convention = "loss"`` every
    line has ``beta_mean_field = M·β`` (M = 8). A window that kept only its last step's time would say 128."""
    monkeypatch.setattr(loop, "time", _Clock(0.25))
    bars = _bars(monkeypatch)
    before = time.time()
    result = _run(tmp_path / "clock", ["seed=3", "optim.temperature_convention=loss"])
    after = time.time()
    records = result.metrics
    assert [r["step"] for r in records] == [2, 4]
    for r in records:
        assert r["samples_per_s"] == 64.0  # not 128: the window's time is the sum of its 2 steps
        assert r["time"] == 0.25 * r["step"]
        assert r["beta"] > 0 and r["beta_mean_field"] == 8 * r["beta"]
    summary = result.summary
    assert (summary["status"], summary["step"], summary["steps"], summary["seed"]) == ("finished", 4, 4, 3)
    assert summary["wall_time_s"] == 1.0 and summary["samples_per_s"] == 64.0
    _assert_stamp_between(summary["updated"], before, after)
    (bar,) = bars
    assert bar.kwargs["total"] == 4 and bar.kwargs["initial"] == 0 and bar.kwargs["unit"] == "step"
    assert bar.kwargs["desc"] == "clock" and bar.updates == 4 and bar.closed
    assert bar.postfix == [{"loss": f"{r['train_loss']:.4g}", "samples/s": "64"} for r in records]
    # negative control: the default convention has no beta_mean_field
    plain = _run(tmp_path / "plain")
    assert all("beta_mean_field" not in r for r in plain.metrics)


def test_steps_that_take_no_time_have_no_rate_and_the_bar_shows_the_loss_alone(tmp_path, monkeypatch):
    """A clock that does not move: each window's time is 0, so its ``samples_per_s`` is None (no rate, not a
    division by zero), summary.json's rate is None too, and the bar's postfix holds the loss alone."""
    monkeypatch.setattr(loop, "time", _Clock(0.0))
    bars = _bars(monkeypatch)
    result = _run(tmp_path / "still")
    assert result.status == "finished"
    records = result.metrics
    assert [r["samples_per_s"] for r in records] == [None, None]
    assert result.summary["samples_per_s"] is None and result.summary["wall_time_s"] == 0.0
    assert bars[0].postfix == [{"loss": f"{r['train_loss']:.4g}"} for r in records]


def test_a_resume_continues_the_wall_clock_of_its_checkpoint(tmp_path):
    """The checkpoint's ``wall`` (seconds of wall clock so far) is where a resumed run's ``wall_clock_s``
    continues from: a checkpoint saying 10⁶ s gives ``wall_clock_s ≥ 10⁶`` at the end, while ``wall_time_s``
    (the steps' own time, the checkpoint's ``elapsed``) stays small. Negative control: the stopped run's own
    wall clock is far below 10⁶ s."""
    folder = _stopped(tmp_path / "wall")
    assert json.loads((folder / "summary.json").read_text())["wall_clock_s"] < 1e3
    checkpoints = Checkpoints(folder / "checkpoints", keep=10)
    state, record = checkpoints.load(2), checkpoints.record(2)
    assert state["wall"] >= state["elapsed"]
    state["wall"] = 1e6
    checkpoints.save(state, 2, meta={k: v for k, v in record.items() if k not in ("step", "sha256", "bytes")})
    result = _run(folder, resume=True)
    assert result.status == "finished" and result.summary["wall_clock_s"] >= 1e6
    assert result.summary["wall_time_s"] < 1e3


def test_a_checkpoint_of_another_configuration_is_refused_naming_both_hashes(tmp_path):
    """A checkpoint record naming another config hash: the resume stops with the exact message (the file,
    the first 12 hex digits of both hashes, what to do); this run's hash is the one run.json recorded.
    Negative control: the record put back, the same resume finishes."""
    folder = _stopped(tmp_path / "other")
    checkpoints = Checkpoints(folder / "checkpoints")
    path = checkpoints.record_path(2)
    original = path.read_text()
    path.write_text(json.dumps({**json.loads(original), "config_sha256": "f" * 64}))
    ours = json.loads((folder / "run.json").read_text())["config_sha256"]
    with pytest.raises(RunFolderError) as caught:
        _run(folder, resume=True)
    assert str(caught.value) == (
        f"{checkpoints.path(2)} was written by a run of another configuration (config hash ffffffffffff…, "
        f"this run's {ours[:12]}…): refusing to mix two runs; use another --out"
    )
    path.write_text(original)
    assert _run(folder, resume=True).status == "finished"


@pytest.mark.parametrize(
    "parallel,how", [("particles", "the particles are"), ("data", "the batch is")], ids=["particles", "data"]
)
def test_a_resume_on_another_number_of_processes_says_what_is_split(tmp_path, parallel, how):
    """environment.json says the steps so far ran on 2 processes, this resume runs on 1: the warning names
    both counts and what is split differently (particles or batch rows), exactly. Negative control: the
    finished folder resumed once more, its environment.json now saying 1 process (the resume wrote it),
    warns nothing."""
    folder = _stopped(tmp_path / parallel, [f"parallel={parallel}"])
    env_path = folder / "environment.json"
    env_path.write_text(json.dumps({**json.loads(env_path.read_text()), "world_size": 2}))
    expected = (
        f"{folder} ran on 2 process(es) and resumes on 1: {how} split differently, so the continuation "
        "equals the original run to round-off, not bit for bit"
    )
    with pytest.warns(UserWarning) as caught:
        assert _run(folder, [f"parallel={parallel}"], resume=True).status == "finished"
    assert expected in [str(w.message) for w in caught]
    assert json.loads(env_path.read_text())["world_size"] == 1
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _run(folder, [f"parallel={parallel}"], resume=True)
    assert not [w for w in seen if "process(es)" in str(w.message)]


def test_temperature_is_beta_and_m_beta_in_the_loss_convention():
    """``_temperature`` of a real Langevin optimizer: ``β`` of the first noisy group; a group in the ``loss``
    convention also ``beta_mean_field = M·β`` (here 8·0.25 = 2); no noisy group: β = 0."""
    theta = torch.zeros(3, requires_grad=True)
    loss_opt = Langevin([theta], lr=0.1, beta=0.25, n_particles=8, temperature_convention="loss", seed=0)
    assert loop._temperature(loss_opt) == {"beta": 0.25, "beta_mean_field": 2.0}
    plain = Langevin([theta], lr=0.1, beta=0.25, n_particles=8, seed=0)
    assert loop._temperature(plain) == {"beta": 0.25}  # negative control: the mean-field convention
    quiet = Langevin([theta], lr=0.1, beta=0.25, noise=False, seed=0)
    assert loop._temperature(quiet) == {"beta": 0.0}


def test_best_of_a_higher_is_better_metric_is_the_maximum_up_to_the_largest_floats():
    """``_track_best`` against the maxima/minima taken by hand: ``accuracy`` (higher is better) keeps
    1.7e308 over 1e308 (a sign of −2 would overflow both to −inf and keep the first), ``test_loss`` the
    smallest finite value, booleans and keys that are not metrics are skipped."""
    fake = SimpleNamespace(experiment=SimpleNamespace(higher_is_better=("accuracy",)), best={})
    records = [
        {"step": 1, "accuracy": 1e308, "test_loss": 3.0, "val_flag": True, "other": 5.0},
        {"step": 2, "accuracy": 1.7e308, "test_loss": float("nan")},
        {"step": 3, "accuracy": 0.5, "test_loss": 1.0},
        {"step": 4, "accuracy": 2.0, "test_loss": 2.0},
    ]
    for record in records:
        loop._Run._track_best(fake, record)
    assert fake.best == {"accuracy": {"value": 1.7e308, "step": 2}, "test_loss": {"value": 1.0, "step": 3}}


def _tiny_experiment():
    cfg = check_config(load_config(TEACHER, "smoke", TINY))
    experiment = loop.build_experiment(cfg, CPU)
    return cfg, experiment, build_optimizer(experiment.model, cfg)


def test_the_checkpoint_state_holds_the_runs_values_and_its_devices_generator(monkeypatch):
    """``_Run._state`` on a stand-in run: the eight entries with the run's own values (a copy of the window);
    on a CUDA device also the generator state of *that* device (``torch.cuda.get_rng_state`` asked for
    cuda:1, faked here); with sharded particles the gathered model and optimizer states in place of the
    local ones."""
    cfg, experiment, optimizer = _tiny_experiment()
    window = {"loss_sum": 1.5, "n": 2, "time": 0.5}
    fake = SimpleNamespace(
        experiment=experiment,
        optimizer=optimizer,
        step=5,
        window=window,
        elapsed=2.0,
        _wall=lambda: 9.0,
        sharded=False,
        device=CPU,
    )
    state = loop._Run._state(fake)
    assert set(state) == {"step", "model", "optimizer", "batches", "torch_rng", "window", "elapsed", "wall"}
    assert (state["step"], state["elapsed"], state["wall"]) == (5, 2.0, 9.0)
    assert state["window"] == window and state["window"] is not window
    assert torch.equal(state["torch_rng"], torch.get_rng_state())
    for name, tensor in experiment.model.state_dict().items():
        assert torch.equal(state["model"][name], tensor)

    seen, marker = [], torch.arange(4, dtype=torch.uint8)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": (seen.append(device), marker)[1])
    fake.device = torch.device("cuda", 1)
    state = loop._Run._state(fake)
    assert seen == [torch.device("cuda", 1)] and state["cuda_rng"] is marker

    monkeypatch.setattr(loop, "full_state_dict", lambda model: {"gathered": "model"})
    monkeypatch.setattr(loop, "full_optimizer_state", lambda opt: {"gathered": "optimizer"})
    fake.device, fake.sharded = CPU, True
    state = loop._Run._state(fake)
    assert state["model"] == {"gathered": "model"} and state["optimizer"] == {"gathered": "optimizer"}
    assert set(state) == {"step", "model", "optimizer", "batches", "torch_rng", "window", "elapsed", "wall"}


def test_a_data_parallel_step_reports_the_whole_batchs_loss(monkeypatch):
    """Rank 0 of 2 takes rows 0–7 of a 16-row batch; the all-reduce (emulated: rank 1 contributes the loss of
    rows 8–15, computed here) sums the two and the step divides by 2: the loss reported is the mean of the two
    half-batch means, i.e. the full batch's ½·MSE (computed directly, float32: rel 1e-6). Negative control: the
    first half alone differs from it by more than that."""
    cfg, experiment, optimizer = _tiny_experiment()
    batch = torch.arange(16)
    experiment.next_batch = lambda: batch
    with torch.no_grad():
        full, first, second = (float(experiment.loss(b)) for b in (batch, batch[:8], batch[8:]))
    assert abs(first - full) > 1e-4 * abs(full)
    monkeypatch.setattr(loop.parallel, "all_reduce_scalar", lambda value, device, op="sum": value + second)
    monkeypatch.setattr(loop.parallel, "average_gradients", lambda model, world: None)
    fake = SimpleNamespace(
        experiment=experiment,
        optimizer=optimizer,
        data_parallel=True,
        sharded=False,
        rank=0,
        world=2,
        cfg=cfg,
        device=CPU,
        step=0,
    )
    assert loop._Run._one_step(fake) == pytest.approx(full, rel=1e-6)


def test_a_sharded_step_stops_every_rank_when_another_ranks_gradient_is_not_finite(monkeypatch):
    """Sharded particles: each rank's flag "my particle gradients are finite" is min-reduced. Emulated second
    rank with a NaN gradient (flag 0): this rank, whose own gradients are finite, raises and does not step;
    negative control: the other rank finite (flag 1), it steps and returns the loss computed directly."""
    cfg, experiment, optimizer = _tiny_experiment()
    batch = torch.arange(16)
    experiment.next_batch = lambda: batch
    with torch.no_grad():
        expected = float(experiment.loss(batch))
    other = {"finite": 0.0}
    calls = []

    def all_reduce_scalar(value, device, op="sum"):
        calls.append(op)
        return {"sum": value + other["finite"], "min": min(value, other["finite"])}[op]

    monkeypatch.setattr(loop.parallel, "all_reduce_scalar", all_reduce_scalar)
    monkeypatch.setattr(loop, "sharded_layers", lambda model: [model])
    fake = SimpleNamespace(
        experiment=experiment,
        optimizer=optimizer,
        data_parallel=False,
        sharded=True,
        rank=0,
        world=2,
        cfg=cfg,
        device=CPU,
        step=0,
    )
    before = {k: v.clone() for k, v in experiment.model.state_dict().items()}
    with pytest.raises(
        loop.NonFiniteLossError, match=r"^step 1: a particle gradient on some rank is not finite"
    ):
        loop._Run._one_step(fake)
    assert calls == ["min"]
    assert all(torch.equal(before[k], v) for k, v in experiment.model.state_dict().items())  # no step
    other["finite"] = 1.0
    assert loop._Run._one_step(fake) == pytest.approx(expected, rel=1e-6)
    assert not all(torch.equal(before[k], v) for k, v in experiment.model.state_dict().items())


def test_build_experiment_names_the_table_of_a_bad_key_and_uses_the_runs_seed_and_dtype():
    """``build_experiment`` straight from a RunConfig (no check_config first): an unknown key is named
    ``data.…``/``model.…``; the model equals the task's own build with the run's seed (3) and dtype
    (float64), and differs from the build with seed 4 (negative control)."""
    with pytest.raises(ConfigError, match=r"^unknown key 'data\.bogus'; the keys allowed in data are "):
        loop.build_experiment(RunConfig(task="teacher_student", data={"bogus": 1}), CPU)
    with pytest.raises(ConfigError, match=r"^unknown key 'model\.bogus'; the keys allowed in model are "):
        loop.build_experiment(RunConfig(task="teacher_student", model={"bogus": 1}), CPU)
    data, model = {"d": 4, "n_train": 16, "n_test": 8}, {"n_particles": 4}
    cfg = RunConfig(
        task="teacher_student",
        seed=3,
        dtype="float64",
        data=data,
        model=model,
        train=TrainConfig(batch_size=4),
    )
    built = loop.build_experiment(cfg, CPU).model.state_dict()

    def direct(seed: int) -> dict:
        return tasks.TEACHER_STUDENT.build(
            TeacherStudentData(**data),
            FeatureModel(**model),
            batch_size=4,
            seed=seed,
            device=CPU,
            dtype=torch.float64,
        ).model.state_dict()

    same, other = direct(3), direct(4)
    assert built.keys() == same.keys()
    assert all(built[k].dtype == torch.float64 and torch.equal(built[k], same[k]) for k in built)
    assert not all(torch.equal(built[k], other[k]) for k in built)


# ======================================================================================================
# meanfield.runs.sinks
# ======================================================================================================


class _Writer:
    """A SummaryWriter that records what it is given."""

    made: list = []

    def __init__(self, logdir, purge_step=None):
        self.logdir, self.purge_step, self.scalars, self.flushes, self.closed = (
            logdir,
            purge_step,
            [],
            0,
            False,
        )
        _Writer.made.append(self)

    def add_scalar(self, tag, value, global_step=None):
        self.scalars.append((tag, value, global_step))

    def flush(self):
        self.flushes += 1

    def close(self):
        self.closed = True


@pytest.fixture
def fake_tensorboard(monkeypatch):
    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = _Writer
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", module)
    _Writer.made = []
    return _Writer.made


def test_tensorboard_purges_after_the_resume_step_and_writes_every_number_by_its_path(
    tmp_path, fake_tensorboard
):
    """A fresh run's writer purges nothing; a run resumed at step 10 purges from step 11 (the events the
    first run wrote past its checkpoint). Each record's numbers become scalars tagged by their path
    (``optim/eta``, ``groups/0/g``) at the record's step, integers as floats; booleans, strings, None and the
    step itself are left out — the list below is written by hand."""
    assert sinks.TensorBoard(tmp_path, True, 0).writer.purge_step is None
    assert sinks.TensorBoard(tmp_path, True, 10).writer.purge_step == 11
    assert sinks.TensorBoard(tmp_path, False, 10).writer is None  # disabled: no writer at all
    board = sinks.TensorBoard(tmp_path, True, 0)
    assert board.writer.logdir == str(tmp_path)
    board.write(
        {
            "step": 7,
            "train_loss": 0.5,
            "beta": 1,
            "flag": True,
            "name": "x",
            "none": None,
            "optim": {"eta": 0.1, "n": 3},
            "groups": [{"g": 2.0}, None, [4.5]],
        }
    )
    assert board.writer.scalars == [
        ("train_loss", 0.5, 7),
        ("beta", 1.0, 7),
        ("optim/eta", 0.1, 7),
        ("optim/n", 3.0, 7),
        ("groups/0/g", 2.0, 7),
        ("groups/2/0", 4.5, 7),
    ]
    assert all(type(v) is float for _, v, _ in board.writer.scalars) and board.writer.flushes == 1
    board.close()
    assert board.writer.closed
    off = sinks.TensorBoard(tmp_path, False, 0)
    off.write({"step": 1, "x": 1.0})  # negative control: nothing to write to, nothing raised
    off.close()


def test_summary_table_aligns_names_and_rounds_floats_to_six_digits():
    """The table printed at the end, written by hand: names padded to the longest, floats as ``.6g``."""
    table = sinks.summary_table({"a": 1.23456789, "long_name": 3, "s": "x"})
    assert table == "  a          1.23457\n  long_name  3\n  s          x"
    assert sinks.summary_table({}) == ""


def _records():
    nan, inf = float("nan"), float("inf")
    return [
        {"step": 1, "train_loss": 0.5, "beta": 0.1, "optim": {"drift_to_noise": 2.0}},
        {"step": 2, "train_loss": 0.4, "beta": 0.05, "val_loss": 0.6, "val_ppl": 1.8, "test_mse": 0.3},
        {"step": 3, "beta": None, "optim": {"drift_to_noise": -1.0}},
        {"step": 4, "train_loss": 0.3, "beta": 0.02, "val_loss": 0.5, "optim": {"drift_to_noise": inf}},
        {"step": 5, "train_loss": 0.2, "optim": {"drift_to_noise": nan}},
        {"step": 6, "train_loss": 0.1, "optim": {"drift_to_noise": 0.0}},
        {"step": 7, "train_loss": 0.1, "optim": {"drift_to_noise": None}},
        {"step": 8, "train_loss": 0.1, "test_mse": None, "optim": {"drift_to_noise": 3.0}},
    ]


def _lines(ax):
    return [(l.get_label(), list(l.get_xdata()), list(l.get_ydata())) for l in ax.get_lines()]


def test_training_figure_plots_exactly_the_logged_points(tmp_path, monkeypatch):
    """``draw_figures`` on records written by hand: the loss panel has the training loss at the steps that
    have one, then each val_/test_ metric (not perplexities) as dots and lines at the steps where it is not
    None; the temperature panel β_t where given and the drift/noise ratio where finite and > 0 (the −1, ∞,
    NaN, 0 and None are left out); both panels log-scaled; written to figures/training.png (a PNG)."""
    plotting = importlib.import_module("meanfield.studies.plotting")
    saved = []
    real = plotting.save
    monkeypatch.setattr(plotting, "save", lambda fig, path: (saved.append((fig, path)), real(fig, path))[1])
    sinks.draw_figures(tmp_path, _records(), "samples")
    ((fig, path),) = saved
    assert path == tmp_path / "figures" / "training.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ax_loss, ax_beta = fig.axes
    assert _lines(ax_loss) == [
        ("train loss", [1, 2, 4, 5, 6, 7, 8], [0.5, 0.4, 0.3, 0.2, 0.1, 0.1, 0.1]),
        ("test_mse", [2], [0.3]),
        ("val_loss", [2, 4], [0.6, 0.5]),
    ]
    for line in ax_loss.get_lines()[1:]:
        assert (line.get_marker(), line.get_linestyle(), line.get_markersize()) == ("o", "-", 3)
    assert _lines(ax_beta) == [("β_t", [1, 2, 4], [0.1, 0.05, 0.02]), ("drift/noise RMS", [1, 8], [2.0, 3.0])]
    assert (ax_loss.get_yscale(), ax_beta.get_yscale()) == ("log", "log")
    assert (ax_loss.get_title(), ax_beta.get_title()) == ("losses", "temperature")
    assert [t.get_text() for t in ax_beta.get_legend().get_texts()] == ["β_t", "drift/noise RMS"]


def test_no_records_draw_no_figure(tmp_path):
    """Negative control of the figure: an empty log writes nothing."""
    sinks.draw_figures(tmp_path, [], "samples")
    assert not (tmp_path / "figures").exists()


# ======================================================================================================
# meanfield.runs.environment
# ======================================================================================================


def _package_hash(root: Path) -> str:
    """SHA-256 over the ``.py`` files under ``root``, ordered by their path's parts: relative path, then bytes."""
    files = []
    for where, _, names in os.walk(root):
        files += [Path(where, n) for n in names if n.endswith(".py")]
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.relative_to(root).parts):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def test_environment_records_the_packages_seed_command_and_start(monkeypatch):
    """environment() against independent sources: numpy's and scipy's ``__version__``, the config's seed,
    ``sys.argv``, the OMP_WAIT_POLICY set here, a start stamp between the clock readings around the call, the
    source hash computed here over meanfield/*.py; on a CUDA device the name the driver gives (faked)."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.delenv("omp_wait_policy", raising=False)
    cfg = RunConfig(task="teacher_student", seed=7)
    before = time.time()
    info = env_mod.environment(cfg, CPU)
    after = time.time()
    assert info["packages"]["numpy"] == np.__version__ and info["packages"]["scipy"] == scipy.__version__
    assert info["packages"]["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert info["seed"] == 7 and info["command"] == sys.argv and info["OMP_WAIT_POLICY"] == "PASSIVE"
    assert info["device"] == "cpu" and "cuda_device" not in info
    assert info["threads"] == torch.get_num_threads() and info["cpu_count"] == os.cpu_count()
    assert info["python"] == platform.python_version()
    assert info["source_sha256"] == _package_hash(Path(meanfield.__file__).parent)
    _assert_stamp_between(info["started"], before, after)

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: f"Fake GPU on {device}")
    cuda = env_mod.environment(cfg, torch.device("cuda", 0))
    assert cuda["device"] == "cuda:0" and cuda["cuda_device"] == "Fake GPU on cuda:0"


def test_source_hash_covers_the_py_files_by_path_and_content(tmp_path, monkeypatch):
    """``_source_hash`` of a package laid out here equals SHA-256 of ``"a.py" + its bytes + "sub/b.py" + its
    bytes``, computed by hand; a non-.py file does not count (negative control: changing it keeps the hash,
    changing b.py does not)."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_bytes(b"x = 1\n")
    (tmp_path / "sub" / "b.py").write_bytes(b"y = 2\n")
    (tmp_path / "notes.txt").write_bytes(b"not code")
    monkeypatch.setattr(env_mod, "_PACKAGE", tmp_path)
    expected = hashlib.sha256(b"a.py" + b"x = 1\n" + b"sub/b.py" + b"y = 2\n").hexdigest()
    assert env_mod._source_hash() == expected
    (tmp_path / "notes.txt").write_bytes(b"changed")
    assert env_mod._source_hash() == expected
    (tmp_path / "sub" / "b.py").write_bytes(b"y = 3\n")
    assert env_mod._source_hash() != expected


def _git(cwd: Path, *args: str) -> str:
    command = ["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    command += ["-c", "commit.gpgsign=false", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=30).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_commit_is_head_of_the_packages_repository_and_dirty_means_a_changed_tracked_file(
    tmp_path, monkeypatch
):
    """``_git_commit`` on a repository made here: the commit is ``git rev-parse HEAD`` (a 40-hex string);
    clean, and with only an untracked file, dirty is False; with a tracked file changed, True. Outside any
    repository both are None. Each git call is bounded by a 5 s timeout and read as text."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "f.txt").write_text("one\n")
    _git(repo, "add", "f.txt")
    _git(repo, "commit", "-q", "-m", "init")
    head = _git(repo, "rev-parse", "HEAD")
    assert re.fullmatch(r"[0-9a-f]{40}", head)
    monkeypatch.setattr(env_mod, "_PACKAGE", repo)
    calls = []
    real = subprocess.run

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(env_mod.subprocess, "run", recording)
    assert env_mod._git_commit() == {"commit": head, "dirty": False}
    assert [(c["timeout"], c["text"], c["errors"], c["check"], c["capture_output"]) for c in calls] == [
        (5, True, "replace", True, True)
    ] * 2
    (repo / "new.txt").write_text("untracked\n")
    assert env_mod._git_commit() == {"commit": head, "dirty": False}
    (repo / "f.txt").write_text("two\n")
    assert env_mod._git_commit() == {"commit": head, "dirty": True}

    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.setattr(env_mod, "_PACKAGE", plain)
    assert env_mod._git_commit() == {"commit": None, "dirty": None}


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_commit_exclude_ignores_changes_under_the_outputs_only(tmp_path, monkeypatch):
    """``_git_commit(exclude=...)``: a changed tracked file under an excluded folder (the benchmarks' results,
    relative to the checkout's top even when meanfield lives in a subfolder) leaves it clean; the same change
    elsewhere, or with no exclusion, makes it dirty (the negative controls)."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "results").mkdir()
    _git(repo, "init", "-q")
    (repo / "results" / "r.md").write_text("old\n")
    (repo / "code.py").write_text("x = 1\n")
    _git(repo, "add", "results/r.md", "code.py")
    _git(repo, "commit", "-q", "-m", "init")
    monkeypatch.setattr(env_mod, "_PACKAGE", repo / "pkg")  # git -C runs in a subfolder of the checkout
    (repo / "results" / "r.md").write_text("new\n")
    assert env_mod._git_commit(exclude=("results",))["dirty"] is False
    assert env_mod._git_commit()["dirty"] is True
    assert env_mod._git_commit(exclude=("other",))["dirty"] is True
    (repo / "code.py").write_text("x = 2\n")
    assert env_mod._git_commit(exclude=("results",))["dirty"] is True


def test_git_commit_without_git_is_none(monkeypatch):
    """No git executable (the OSError of subprocess.run): commit and dirty are None, no error."""

    def missing(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory: 'git'")

    monkeypatch.setattr(env_mod.subprocess, "run", missing)
    assert env_mod._git_commit() == {"commit": None, "dirty": None}


def test_cpu_model_is_the_text_after_the_first_colon_of_the_model_name_line(monkeypatch):
    """``_cpu_model`` on a /proc/cpuinfo written here: the first ``model name`` line's value (not the
    ``model`` line before it, the colon inside kept); without such a line, or without the file, what
    ``platform.processor()`` says (here faked), else ``platform.machine()``."""
    cpuinfo = {
        "text": "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel\t\t: 85\n"
        "model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz: rev A \nmodel name\t: second\n"
    }

    class FakePath:
        def __init__(self, path):
            assert path == "/proc/cpuinfo"

        def read_text(self):
            if cpuinfo["text"] is None:
                raise FileNotFoundError("/proc/cpuinfo")
            return cpuinfo["text"]

    monkeypatch.setattr(env_mod, "Path", FakePath)
    monkeypatch.setattr(platform, "processor", lambda: "fallback cpu")
    monkeypatch.setattr(platform, "machine", lambda: "fallback machine")
    assert env_mod._cpu_model() == "Intel(R) Xeon(R) CPU @ 2.20GHz: rev A"
    cpuinfo["text"] = "processor\t: 0\nmodel\t\t: 85\n"
    assert env_mod._cpu_model() == "fallback cpu"
    cpuinfo["text"] = None
    assert env_mod._cpu_model() == "fallback cpu"
    monkeypatch.setattr(platform, "processor", lambda: "")
    assert env_mod._cpu_model() == "fallback machine"


def test_cpu_model_of_this_machine_matches_proc_cpuinfo_read_by_hand():
    """On a Linux machine whose /proc/cpuinfo has a ``model name`` line: the same text, parsed here."""
    path = Path("/proc/cpuinfo")
    found = re.search(r"^model name\s*:(.*)$", path.read_text(), re.M) if path.exists() else None
    if found is None:
        pytest.skip("no model name line in /proc/cpuinfo here")
    assert env_mod._cpu_model() == found.group(1).strip()


def test_provenance_picks_the_five_keys_from_an_environment_record():
    """``provenance`` of a record written by hand: commit, dirty, source hash, the meanfield-sde and torch
    versions; a record without git or packages gives None for those."""
    env = {
        "git": {"commit": "abc", "dirty": True},
        "packages": {"meanfield-sde": "1.2.3", "torch": "2.0", "numpy": "2.1"},
        "source_sha256": "ff",
        "seed": 0,
    }
    assert env_mod.provenance(env) == {
        "commit": "abc",
        "dirty": True,
        "source_sha256": "ff",
        "meanfield": "1.2.3",
        "torch": "2.0",
    }
    assert env_mod.provenance({}) == dict.fromkeys(env_mod.PROVENANCE_KEYS)


def test_record_environment_compares_with_the_latest_of_several_earlier_records(tmp_path):
    """Four sessions with commits a, b, c, d: each write returns the change from the one before (``c → d``
    at the fourth, not ``b → d``), and the file holds the latest with the three earlier ones, oldest first.
    A damaged file is replaced, with no changes reported."""
    path = tmp_path / "environment.json"

    def env(commit: str) -> dict:
        return {"git": {"commit": commit, "dirty": False}, "packages": {"torch": "2.0"}, "seed": 0}

    assert env_mod.record_environment(path, env("a")) == []
    assert env_mod.record_environment(path, env("b")) == ["commit: a → b"]
    assert env_mod.record_environment(path, env("c")) == ["commit: b → c"]
    assert env_mod.record_environment(path, env("d")) == ["commit: c → d"]
    stored = json.loads(path.read_text())
    assert stored == {**env("d"), "earlier": [env("a"), env("b"), env("c")]}
    path.write_text("{damaged")
    assert env_mod.record_environment(path, env("e")) == []
    assert json.loads(path.read_text()) == {**env("e"), "earlier": []}


# ======================================================================================================
# meanfield.runs.folder
# ======================================================================================================


def test_config_hash_is_the_sha256_of_sorted_json_whatever_the_key_order():
    """Two TOML texts with the keys in either order hash alike, to SHA-256 of ``{"a": 2, "b": {"x": 1, "y":
    2}}`` (keys sorted, computed by hand); negative control: another value, another hash."""
    expected = hashlib.sha256(b'{"a": 2, "b": {"x": 1, "y": 2}}').hexdigest()
    assert config_hash("b = { y = 2, x = 1 }\na = 2\n") == expected
    assert config_hash("a = 2\nb = { x = 1, y = 2 }\n") == expected
    assert config_hash("a = 3\nb = { x = 1, y = 2 }\n") != expected


def test_write_marker_writes_format_stamp_and_hash_once(tmp_path):
    """run.json: format 1, a creation stamp of now, the hash given; a second call keeps the first marker."""
    before = time.time()
    write_marker(tmp_path, "abc")
    after = time.time()
    marker = json.loads((tmp_path / "run.json").read_text())
    assert set(marker) == {"format", "created", "config_sha256"}
    assert marker["format"] == 1 and marker["config_sha256"] == "abc"
    _assert_stamp_between(marker["created"], before, after)
    write_marker(tmp_path, "other")
    assert json.loads((tmp_path / "run.json").read_text()) == marker


def test_checkpoint_steps_records_and_the_checks_of_load(tmp_path):
    """``steps`` lists the step numbers of ``step-N.pt`` names only, ascending; a saved checkpoint's record
    holds its step, the SHA-256 and size of the file as hashlib and stat give them, and the meta; a file
    shorter than its record says is told by its size, a state of another step by its step."""
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for name in (
        "step-00000010.pt",
        "step-5.pt",
        "step-00000002.pt",
        "step-3.json",
        "other.pt",
        ".step-7.pt.x.tmp",
    ):
        (folder / name).write_bytes(b"")
    assert Checkpoints(folder).steps() == [2, 5, 10]

    ck = Checkpoints(tmp_path / "saved", keep=5)
    path = ck.save({"step": 3, "w": torch.ones(4)}, 3, meta={"config_sha256": "abc"})
    data = path.read_bytes()
    assert ck.record(3) == {
        "step": 3,
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
        "config_sha256": "abc",
    }
    path.write_bytes(data[:-7])
    with pytest.raises(
        CorruptCheckpointError, match=rf"it has {len(data) - 7} bytes, its record says {len(data)}$"
    ):
        ck.load(3)
    torch.save({"step": 4}, path)
    fresh = path.read_bytes()
    ck.record_path(3).write_text(
        json.dumps({"step": 3, "bytes": len(fresh), "sha256": hashlib.sha256(fresh).hexdigest()})
    )
    with pytest.raises(CorruptCheckpointError, match=r"it does not hold the state of step 3$") as caught:
        ck.load(3)
    assert caught.value.path == path


def test_a_damaged_metrics_line_is_quoted_to_sixty_characters(tmp_path):
    """The message names the file and line, json's reason, and repr of the line's first 60 characters, then
    the repair, exactly as written here."""
    line = '{"step": 1, ' + "x" * 80
    path = tmp_path / "metrics.jsonl"
    path.write_text(line + "\n" + '{"step": 2}\n')
    try:
        json.loads(line)
    except json.JSONDecodeError as error:
        reason = error.msg
    with pytest.raises(RunFolderError) as caught:
        MetricsLog(path).read()
    assert str(caught.value) == (
        f"{path}, line 1, is not a JSON record ({reason}: {line[:60]!r}); repair the file by deleting that "
        "line (a resumed run rewrites every line after its checkpoint)"
    )


def test_check_folder_reads_the_marker_of_a_resumed_folder(tmp_path):
    """A folder with its config.toml and a run.json: resumable when run.json records this configuration's
    hash; refused when it records another, or cannot be read."""
    text = 'task = "teacher_student"\nseed = 0\n'
    resolved = {"task": "teacher_student", "seed": 0}
    (tmp_path / "config.toml").write_text(text)
    (tmp_path / "run.json").write_text(json.dumps({"format": 1, "config_sha256": config_hash(text)}))
    check_folder(tmp_path, text, resolved, resume=True)
    (tmp_path / "run.json").write_text(json.dumps({"format": 1, "config_sha256": "0" * 64}))
    with pytest.raises(RunFolderError, match="not the configuration its run started with"):
        check_folder(tmp_path, text, resolved, resume=True)
    (tmp_path / "run.json").write_text("{damaged")
    with pytest.raises(RunFolderError, match=r"run\.json is unreadable \("):
        check_folder(tmp_path, text, resolved, resume=True)


def test_differences_include_keys_on_one_side_only():
    """Keys present in one table only are differences too (the union of the keys, not the intersection)."""
    assert sorted(config_differences({"a": 1, "t": {"x": 1}}, {"b": 2, "t": {"x": 1, "y": 0}})) == [
        "a",
        "b",
        "t.y",
    ]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_commit_reads_a_changed_file_whose_name_is_not_utf8(tmp_path, monkeypatch):
    """With ``core.quotePath=false`` git prints a path's raw bytes; a changed tracked file named ``caf\\xe9.txt``
    (Latin-1, not UTF-8) made ``_git_commit`` raise UnicodeDecodeError, which stopped every ``meanfield run`` in
    such a checkout before its first step. Now: the commit and dirty = True. Negative control: the clean tree
    is not dirty."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "core.quotePath", "false")
    name = os.path.join(os.fsencode(repo), b"caf\xe9.txt")
    with open(name, "wb") as f:
        f.write(b"one\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")
    head = _git(repo, "rev-parse", "HEAD")
    monkeypatch.setattr(env_mod, "_PACKAGE", repo)
    assert env_mod._git_commit() == {"commit": head, "dirty": False}
    with open(name, "wb") as f:
        f.write(b"two\n")
    assert env_mod._git_commit() == {"commit": head, "dirty": True}
