"""Tests of :mod:`meanfield.runs.loop`."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import socket
import time
import types
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from meanfield import _io
from meanfield.config import ConfigError
from meanfield.drift.schedules import Constant, Cosine, Linear, Step
from meanfield.runs import loop
from meanfield.runs.folder import (
    Checkpoints,
    DiskFullError,
    MetricsLog,
    RunFolderError,
)
from meanfield.runs.lock import FolderLock
from meanfield.runs.schema import RunConfig, TrainConfig, build_optimizer, check_config, load_config

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
import dataclasses
import pickle
import signal
import threading
from datetime import datetime

from helpers.tiny_run import ROOT, TEACHER, TINY  # noqa: E402  (tests/helpers/tiny_run.py)

from meanfield import cli, tasks
from meanfield._display import seconds
from meanfield.config import load_toml_text
from meanfield.data import CorruptDataError
from meanfield.optim import Langevin
from meanfield.runs import TIMING_KEYS, NonFiniteLossError, RunInterrupted, RunResult, derive_seed, run
from meanfield.runs.folder import config_differences
from meanfield.runs.sinks import summary_table
from meanfield.tasks.regression import FeatureModel, TeacherStudentData

STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[+-]\d{4}$")


CPU = torch.device("cpu")


DEAD_PID = 2**31 - 2  # above any pid_max: os.kill(pid, 0) says no such process


def _resolved(extra=()) -> dict:
    return load_config(TEACHER, "smoke", [*TINY, *extra])


def _torch_seed(seed: int) -> int:
    """``derive_seed(seed, "torch")`` recomputed from its definition (SHA-256 of ``"seed/torch"``, 62 bits)."""
    return int.from_bytes(hashlib.sha256(f"{seed}/torch".encode()).digest()[:8], "little") >> 2


def _same(a, b) -> bool:
    """Deep equality of nested dicts/lists/tuples of tensors and plain values."""
    if torch.is_tensor(a) or torch.is_tensor(b):
        return torch.is_tensor(a) and torch.is_tensor(b) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _stopped(folder: Path) -> Path:
    """A TINY run stopped by an error after step 3: checkpoint at step 2, a metrics line at step 2."""

    def stop(step: int) -> None:
        if step == 3:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        loop.run(TEACHER, folder, preset="smoke", overrides=TINY, quiet=True, on_step=stop)
    assert Checkpoints(folder / "checkpoints").steps() == [2]
    return folder


@pytest.fixture
def rng_kept():
    """Put torch's global generator back after a test that reseeds it."""
    state = torch.get_rng_state()
    yield
    torch.set_rng_state(state)


def _restoring(folder: Path, *, lead: bool, world: int):
    """A stand-in ``_Run`` of the stopped folder's configuration, as rank ``0`` (lead) or ``1`` of ``world``,
    with a fresh model, optimizer and data (what ``__init__`` builds before ``_restore``)."""
    cfg = check_config(_resolved())
    experiment = loop.build_experiment(cfg, CPU)
    fake = SimpleNamespace(
        lead=lead,
        world=world,
        sharded=False,
        device=CPU,
        cfg=cfg,
        folder=folder,
        experiment=experiment,
        optimizer=build_optimizer(experiment.model, cfg),
        checkpoints=Checkpoints(folder / "checkpoints", cfg.train.keep_checkpoints),
        log=MetricsLog(folder / "metrics.jsonl"),
        config_sha256=json.loads((folder / "run.json").read_text())["config_sha256"],
        best={},
        step=-1,
        _barrier=lambda: None,
    )
    fake._track_best = types.MethodType(loop._Run._track_best, fake)
    return fake


def _ranks(monkeypatch, rank: int, world: int) -> None:
    monkeypatch.setattr(loop.parallel, "process_group", lambda device: (rank, world, False))
    monkeypatch.setattr(loop._Run, "_barrier", lambda self: None)


def _stale_lock(folder: Path) -> None:
    folder.mkdir(parents=True)
    record = {
        "pid": DEAD_PID,
        "host": socket.gethostname(),
        "since": "2020-01-01T00:00:00+0000",
        "command": ["x"],
    }
    (folder / ".lock").write_text(json.dumps(record) + "\n")


def _summary_run(folder: Path, *, lead=True, elapsed=1.5):
    return SimpleNamespace(
        lead=lead,
        step=3,
        cfg=SimpleNamespace(train=SimpleNamespace(steps=10), task="teacher_student", seed=7),
        elapsed=elapsed,
        _wall=lambda: 4.25,
        experiment=SimpleNamespace(unit="tokens", units_per_step=16, description="a run"),
        best={"val_loss": {"value": 0.5, "step": 2}},
        folder=folder,
    )


@pytest.mark.parametrize("lead", [True, False], ids=["lead", "other_rank"])
def test_restore_loads_the_checkpoint_on_every_rank_and_only_the_lead_truncates_the_log(
    tmp_path, lead, rng_kept
):
    """Both ranks of 2 restore the step-2 checkpoint read here independently (``Checkpoints.load``): step,
    window, elapsed, the model's and the batches' states, the optimizer state and torch's generator state
    equal its entries, and the wall clock continues from its ``wall``. environment.json says 1 process, so
    each warns that the batch is split differently on 2. A line at step 3 (after the checkpoint, with
    ``val_loss = 0.5``) is cut by the lead only: the lead's best is empty, the other rank's best is that
    line's value (its log is untouched). Negative control: the fresh model differs from the checkpoint's."""
    folder = _stopped(tmp_path / "stopped")
    log_path = folder / "metrics.jsonl"
    with log_path.open("a") as f:
        f.write(json.dumps({"step": 3, "val_loss": 0.5}) + "\n")
    lines_before = log_path.read_text()
    state = Checkpoints(folder / "checkpoints").load(2, map_location="cpu")
    fake = _restoring(folder, lead=lead, world=2)
    assert not _same(fake.experiment.model.state_dict(), state["model"])  # negative control
    torch.manual_seed(12345)
    expected_warning = (
        f"{folder} ran on 1 process(es) and resumes on 2: the batch is split differently, so the continuation "
        "equals the original run to round-off, not bit for bit"
    )
    before = time.perf_counter()
    with pytest.warns(UserWarning) as caught:
        loop._Run._restore(fake)
    after = time.perf_counter()
    assert [str(w.message) for w in caught] == [expected_warning]
    assert fake.step == 2 and fake.elapsed == state["elapsed"]
    assert fake.window == state["window"] and fake.window is not state["window"]
    assert _same(fake.experiment.model.state_dict(), state["model"])
    assert _same(fake.experiment.batches.state_dict(), state["batches"])
    restored = fake.optimizer.state_dict()
    assert all(_same(restored[k], state["optimizer"][k]) for k in ("state", "generators", "n_steps"))
    assert torch.equal(torch.get_rng_state(), state["torch_rng"])
    assert before - state["wall"] <= fake._wall_origin <= after - state["wall"]
    if lead:
        assert [r["step"] for r in MetricsLog(log_path).read()] == [2]
        assert fake.best == {}
    else:
        assert log_path.read_text() == lines_before
        assert fake.best == {"val_loss": {"value": 0.5, "step": 3}}


@pytest.mark.parametrize("lead", [True, False], ids=["lead", "other_rank"])
def test_restore_without_a_checkpoint_seeds_torch_from_the_run_seed_and_warns_nothing(
    tmp_path, lead, rng_kept
):
    """No checkpoint at all (a resume of a run that saved none): the step stays where ``__init__`` put it, the
    global generator is seeded with ``derive_seed(seed, "torch")`` (recomputed here with hashlib; the
    configuration's seed is 0), no warning is given even though environment.json names another number of
    processes (nothing is continued), and only the lead empties the log. Negative control: the seed set just
    before (12345) is not the one left."""
    folder = _stopped(tmp_path / "stopped")
    ckpt = folder / "checkpoints"
    for p in list(ckpt.iterdir()):
        p.unlink()
    lines_before = (folder / "metrics.jsonl").read_text()
    assert lines_before
    fake = _restoring(folder, lead=lead, world=2)
    torch.manual_seed(12345)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loop._Run._restore(fake)
    assert torch.initial_seed() == _torch_seed(0) != 12345
    assert fake.step == -1 and fake.best == {}
    expected_text = "" if lead else lines_before
    assert (folder / "metrics.jsonl").read_text() == expected_text


def test_a_resume_whose_checkpoints_all_fail_warns_twice_and_starts_over_at_the_derived_seed(
    tmp_path, rng_kept
):
    """The only checkpoint has a flipped byte: the lead moves it to ``checkpoints/corrupt/`` and warns with
    the exact two lines (the damage and where it went; no checkpoint verifies), then starts from step 0: the
    log emptied, torch seeded with ``derive_seed(0, "torch")`` (hashlib). The stopped run's summary says it
    failed with the error named. Negative control: a resume of a fresh folder (nothing to verify) warns
    nothing."""
    folder = _stopped(tmp_path / "stopped")
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"] == "RuntimeError: stop"
    ck = Checkpoints(folder / "checkpoints")
    data = bytearray(ck.path(2).read_bytes())
    data[len(data) // 2] ^= 0xFF
    ck.path(2).write_bytes(bytes(data))
    moved = folder / "checkpoints" / "corrupt" / "step-00000002.pt"
    torch.manual_seed(12345)
    with pytest.warns(UserWarning) as caught:
        r = loop._Run(_resolved(), folder, resume=True, quiet=True, on_step=None)
    try:
        assert [str(w.message) for w in caught] == [
            f"checkpoint {ck.path(2)} is damaged: its SHA-256 differs from its record's (the file was changed) "
            f"(moved to {moved}); resuming from an earlier checkpoint",
            f"{folder}: no checkpoint verifies; the run starts again from step 0",
        ]
        assert r.step == 0 and moved.exists() and ck.steps() == []
        assert (folder / "metrics.jsonl").read_text() == ""
        assert torch.initial_seed() == _torch_seed(0)
    finally:
        r.release()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fresh = loop._Run(_resolved(), tmp_path / "fresh", resume=True, quiet=True, on_step=None)
    fresh.release()
    assert fresh.step == 0 and torch.initial_seed() == _torch_seed(0)


@pytest.mark.parametrize("world,batch", [(2, 16), (4, 16), (3, 15)], ids=["2of16", "4of16", "3of15"])
def test_data_parallel_accepts_a_batch_that_is_a_multiple_of_the_processes(
    tmp_path, monkeypatch, world, batch
):
    """Rank 0 of ``world`` processes, ``parallel = "data"``, a batch that ``world`` divides: the run is built
    (data-parallel, not sharded, the lead) and writes its folder (config.toml, run.json, the lock)."""
    _ranks(monkeypatch, 0, world)
    r = loop._Run(
        _resolved([f"train.batch_size={batch}"]), tmp_path / "dp", resume=False, quiet=True, on_step=None
    )
    try:
        assert (r.rank, r.world, r.lead, r.data_parallel, r.sharded) == (0, world, True, True, False)
        assert (tmp_path / "dp" / "config.toml").read_text() == r.config_text
        assert json.loads((tmp_path / "dp" / "run.json").read_text())["config_sha256"] == r.config_sha256
        assert r.lock.held
    finally:
        r.release()


@pytest.mark.parametrize("world,batch", [(2, 15), (3, 16), (4, 18)], ids=["2of15", "3of16", "4of18"])
def test_data_parallel_refuses_a_batch_the_processes_do_not_divide(tmp_path, monkeypatch, world, batch):
    """A batch that ``world`` does not divide: the exact message naming both, and nothing written."""
    _ranks(monkeypatch, 0, world)
    with pytest.raises(ConfigError) as caught:
        loop._Run(
            _resolved([f"train.batch_size={batch}"]), tmp_path / "dp", resume=False, quiet=True, on_step=None
        )
    assert str(caught.value) == (
        f"train.batch_size = {batch} must be a multiple of the number of processes ({world}): each takes an "
        "equal share of the rows"
    )
    assert not (tmp_path / "dp").exists()


def test_sharded_particles_skip_the_batch_check_and_name_a_failed_split(tmp_path, monkeypatch):
    """``parallel = "particles"`` on 2 processes with a batch of 15 (not a multiple): no batch refusal; a
    split the model refuses is a ConfigError naming the count and the reason (emulated split)."""
    _ranks(monkeypatch, 0, 2)

    def refuse(model):
        raise ValueError("M = 8 particles cannot be split")

    monkeypatch.setattr(loop, "shard_particles", refuse)
    with pytest.raises(ConfigError) as caught:
        loop._Run(
            _resolved(["parallel=particles", "train.batch_size=15"]),
            tmp_path / "sh",
            resume=False,
            quiet=True,
            on_step=None,
        )
    assert str(caught.value) == "parallel = 'particles' on 2 processes: M = 8 particles cannot be split"


def test_another_rank_builds_the_run_but_writes_nothing_and_seeds_torch(tmp_path, monkeypatch, rng_kept):
    """Rank 1 of 2: not the lead; it takes no lock and writes no file (no config.toml, run.json or .lock),
    and seeds torch with ``derive_seed(0, "torch")`` (hashlib). Negative control: rank 0 writes them."""
    _ranks(monkeypatch, 1, 2)
    torch.manual_seed(12345)
    r = loop._Run(_resolved(), tmp_path / "r1", resume=False, quiet=True, on_step=None)
    r.release()
    assert (r.lead, r.data_parallel) == (False, True) and not r.lock.held
    assert not (tmp_path / "r1").exists()
    assert torch.initial_seed() == _torch_seed(0)
    _ranks(monkeypatch, 0, 2)
    r0 = loop._Run(_resolved(), tmp_path / "r0", resume=False, quiet=True, on_step=None)
    r0.release()
    assert {p.name for p in (tmp_path / "r0").iterdir()} == {"config.toml", "run.json", ".lock"}


def test_taking_over_a_dead_runs_lock_prints_its_pid_unless_quiet(tmp_path, capsys):
    """A lock record of this host naming a process that does not exist: the run takes the folder over and
    prints exactly ``<folder>: the lock of a run that is gone was taken over (<pid>)``; the lock now names
    this process. Negative control: the same with ``quiet`` prints nothing."""
    folder = tmp_path / "stale"
    _stale_lock(folder)
    capsys.readouterr()
    r = loop._Run(_resolved(), folder, resume=False, quiet=False, on_step=None)
    try:
        assert r.lock.stale["pid"] == DEAD_PID
        assert json.loads((folder / ".lock").read_text())["pid"] == os.getpid()
    finally:
        r.release()
    assert (
        capsys.readouterr().out == f"{folder}: the lock of a run that is gone was taken over ({DEAD_PID})\n"
    )
    quiet = tmp_path / "quiet"
    _stale_lock(quiet)
    loop._Run(_resolved(), quiet, resume=False, quiet=True, on_step=None).release()
    assert capsys.readouterr().out == ""


def test_a_run_that_fails_in_restore_releases_its_lock(tmp_path):
    """The checkpoint's record names another configuration: ``_Run`` raises RunFolderError from the restore
    and has released the lock (its record marked ``released``), so another lock on the folder is taken at
    once, not as a stale one. Negative control: while a run holds it, the record has no ``released``."""
    folder = _stopped(tmp_path / "other")
    path = Checkpoints(folder / "checkpoints").record_path(2)
    path.write_text(json.dumps({**json.loads(path.read_text()), "config_sha256": "f" * 64}))
    with pytest.raises(RunFolderError, match="was written by a run of another configuration"):
        loop._Run(_resolved(), folder, resume=True, quiet=True, on_step=None)
    assert "released" in json.loads((folder / ".lock").read_text())
    lock = FolderLock(folder, "run").acquire()
    try:
        assert lock.stale is None and "released" not in json.loads((folder / ".lock").read_text())
    finally:
        lock.release()


def test_a_fresh_run_starts_zeroed_cleans_its_folder_and_marks_it(tmp_path, rng_kept):
    """A new run (seed 5, threads 2) in a folder holding a killed write's ``.config.toml.x.tmp``: torch gets
    2 threads and the seed ``derive_seed(5, "torch")`` (hashlib); step, time, window and best start at zero;
    the temporary is removed; config.toml is the resolved configuration under its header comment (read back
    with tomllib); run.json's hash is the SHA-256 of its sorted JSON (hashlib); the lock names this process.
    Negative control: a file that is not a temporary (``notes.txt``) is kept."""
    folder = tmp_path / "fresh"
    folder.mkdir()
    (folder / ".config.toml.x.tmp").write_text("half")
    (folder / "notes.txt").write_text("mine")
    threads = torch.get_num_threads()
    resolved = _resolved(["seed=5", "threads=2"])
    try:
        r = loop._Run(resolved, folder, resume=False, quiet=True, on_step=None)
        try:
            assert torch.get_num_threads() == 2 and torch.initial_seed() == _torch_seed(5)
            assert (r.step, r.elapsed, r.best, r.provenance) == (0, 0.0, {}, {})
            assert r.window == {"loss_sum": 0.0, "n": 0, "time": 0.0}
            assert (r.checkpoints.folder, r.checkpoints.keep) == (folder / "checkpoints", 5)
            assert r.log.path == folder / "metrics.jsonl"
            assert sorted(p.name for p in folder.iterdir()) == [
                ".lock",
                "config.toml",
                "notes.txt",
                "run.json",
            ]
            text = (folder / "config.toml").read_text()
            assert text == r.config_text
            assert text.startswith("# resolved configuration of this run (meanfield run)\n")
            assert tomllib.loads(text) == resolved
            digest = hashlib.sha256(json.dumps(tomllib.loads(text), sort_keys=True).encode()).hexdigest()
            marker = json.loads((folder / "run.json").read_text())
            assert marker["config_sha256"] == digest == r.config_sha256 and marker["format"] == 1
            lock = json.loads((folder / ".lock").read_text())
            assert (lock["pid"], lock["what"]) == (os.getpid(), "run")
        finally:
            r.release()
    finally:
        torch.set_num_threads(threads)


def test_restore_on_other_ranks_devices_and_layouts(tmp_path, monkeypatch, rng_kept):
    """Restore variants on a stand-in other rank: a checkpoint without a record and without ``wall`` loads
    (the wall clock continues from ``elapsed``); environment.json without ``world_size`` counts as 1 process
    (no warning on 1, a warning naming 1 on 3); a ``cuda_rng`` is set on a CUDA device only (emulated
    ``torch.cuda.set_rng_state``, asked for that device); with sharded particles the full-state loaders get
    the checkpoint's model and optimizer states (emulated), and the local model is left as built."""
    folder = _stopped(tmp_path / "stopped")
    ck = Checkpoints(folder / "checkpoints")
    state = ck.load(2)
    del state["wall"]
    state["cuda_rng"] = torch.arange(5, dtype=torch.uint8)
    ck.save(state, 2)
    ck.record_path(2).unlink()
    env = folder / "environment.json"
    env.write_text(json.dumps({k: v for k, v in json.loads(env.read_text()).items() if k != "world_size"}))
    cuda_calls = []
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, device="cuda": cuda_calls.append((s, device)))

    fake = _restoring(folder, lead=False, world=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        before = time.perf_counter()
        loop._Run._restore(fake)
        after = time.perf_counter()
    assert fake.step == 2 and before - state["elapsed"] <= fake._wall_origin <= after - state["elapsed"]
    assert cuda_calls == [] and _same(fake.experiment.model.state_dict(), state["model"])

    fake = _restoring(folder, lead=False, world=3)
    fake.device = torch.device("cuda", 1)
    with pytest.warns(UserWarning, match=r"ran on 1 process\(es\) and resumes on 3: the batch is split"):
        loop._Run._restore(fake)
    ((saved, device),) = cuda_calls
    assert torch.equal(saved, state["cuda_rng"]) and device == torch.device("cuda", 1)

    loaded = []
    monkeypatch.setattr(loop, "load_full_state_dict", lambda model, s: loaded.append(("model", model, s)))
    monkeypatch.setattr(loop, "load_full_optimizer_state", lambda opt, s: loaded.append(("optim", opt, s)))
    fake = _restoring(folder, lead=False, world=1)
    fake.sharded = True
    built = {k: v.clone() for k, v in fake.experiment.model.state_dict().items()}
    loop._Run._restore(fake)
    (kind_m, model, s_m), (kind_o, opt, s_o) = loaded
    assert (kind_m, kind_o) == ("model", "optim") and model is fake.experiment.model and opt is fake.optimizer
    assert _same(s_m, state["model"]) and _same(s_o, state["optimizer"])
    assert _same(fake.experiment.model.state_dict(), built)


def test_write_summary_writes_every_field_and_the_error_only_when_given(tmp_path):
    """``summary.json`` of a stand-in run (3 of 10 steps, 16 tokens a step, 1.5 s of steps, 4.25 s of wall
    clock): every field against the values worked out by hand (``tokens_per_s = 3·16/1.5 = 32``), ``updated``
    a local timestamp of now, ``error`` present exactly when given; the final metrics are copied. Negative
    controls: no time spent gives no rate (None), and a rank that is not the lead writes nothing."""
    final = {"train_loss": 0.25}
    before = time.time()
    loop._Run._write_summary(_summary_run(tmp_path), "diverged", final, error="the loss is nan at step 3")
    after = time.time()
    summary = json.loads((tmp_path / "summary.json").read_text())
    updated = summary.pop("updated")
    assert STAMP.match(updated)
    moment = time.mktime(time.strptime(updated[:19], "%Y-%m-%dT%H:%M:%S"))
    assert math.floor(before) - 1 <= moment <= after + 1
    assert summary == {
        "status": "diverged",
        "step": 3,
        "steps": 10,
        "task": "teacher_student",
        "seed": 7,
        "wall_time_s": 1.5,
        "wall_clock_s": 4.25,
        "unit": "tokens",
        "tokens_per_s": 32.0,
        "final": {"train_loss": 0.25},
        "best": {"val_loss": {"value": 0.5, "step": 2}},
        "description": "a run",
        "error": "the loss is nan at step 3",
    }
    loop._Run._write_summary(_summary_run(tmp_path, elapsed=0.0), "running", {})
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "error" not in summary and summary["status"] == "running"
    assert summary["tokens_per_s"] is None and summary["final"] == {} and summary["wall_time_s"] == 0.0
    other = tmp_path / "other"
    other.mkdir()
    loop._Run._write_summary(_summary_run(other, lead=False), "finished", final, error="x")
    assert list(other.iterdir()) == []


@pytest.mark.parametrize("name", ["steps", "batch_size", "log_every", "keep_checkpoints"])
def test_train_counts_must_be_at_least_one(name):
    """``steps``, ``batch_size``, ``log_every``, ``keep_checkpoints``: 0 and −3 are refused with the exact
    message naming the key and the value; 1 is accepted (the boundary)."""
    for bad in (0, -3):
        with pytest.raises(ValueError) as caught:
            TrainConfig(**{name: bad})
        assert str(caught.value) == f"train.{name} must be ≥ 1, got {bad}"
    assert getattr(TrainConfig(**{name: 1}), name) == 1


@pytest.mark.parametrize("name", ["eval_every", "checkpoint_every"])
def test_train_intervals_may_be_zero_but_not_negative(name):
    """``eval_every`` and ``checkpoint_every``: −1 and −7 are refused with the exact message (0 means only at
    the end); 0 is accepted (the boundary)."""
    for bad in (-1, -7):
        with pytest.raises(ValueError) as caught:
            TrainConfig(**{name: bad})
        assert str(caught.value) == f"train.{name} must be ≥ 0 (0: only at the end), got {bad}"
    assert getattr(TrainConfig(**{name: 0}), name) == 0


def test_save_prunes_an_old_checkpoint_that_has_no_record(tmp_path):
    """``keep = 2``: saving step 3 deletes step 1's file and record; an old checkpoint written without a
    record (step 1's record removed) is deleted too, without an error. The new record holds the step, the
    SHA-256 and size of the file (hashlib over its bytes) and the meta. Negative control: before step 3,
    both earlier checkpoints are there."""
    ck = Checkpoints(tmp_path / "ck", keep=2)
    for step in (1, 2):
        ck.save({"step": step, "w": torch.full((3,), float(step))}, step)
    assert ck.steps() == [1, 2]
    ck.record_path(1).unlink()
    path = ck.save({"step": 3, "w": torch.ones(2)}, 3, meta={"config_sha256": "abc"})
    assert path == tmp_path / "ck" / "step-00000003.pt"
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == [
        "step-00000002.json",
        "step-00000002.pt",
        "step-00000003.json",
        "step-00000003.pt",
    ]
    data = path.read_bytes()
    assert json.loads(ck.record_path(3).read_text()) == {
        "step": 3,
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
        "config_sha256": "abc",
    }
    ck.record_path(2).unlink()
    ck.keep = 1
    ck.save({"step": 4}, 4)
    assert ck.steps() == [4] and not ck.record_path(3).exists() and ck.record_path(4).exists()


@pytest.mark.parametrize(
    "error", [ValueError("bad"), KeyboardInterrupt()], ids=["ValueError", "KeyboardInterrupt"]
)
def test_a_failed_write_leaves_the_old_file_and_no_tmp(tmp_path, error):
    """``write`` raises (an error, or Ctrl-C: any BaseException): the exception propagates, the temporary
    file is removed, and the old target is untouched."""
    target = tmp_path / "target.bin"
    target.write_bytes(b"old")

    def write(f):
        f.write(b"half")
        raise error

    with pytest.raises(type(error)):
        _io.write_atomic(target, write)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target.bin"]
    assert target.read_bytes() == b"old"


STAMP_2 = re.compile(
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[+-]\d{4}$"
)  # time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _run(folder: Path, extra=(), **kwargs):
    return loop.run(TEACHER, folder, preset="smoke", overrides=[*TINY, *extra], quiet=True, **kwargs)


def _stopped_2(folder: Path, extra=()) -> Path:
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
    assert STAMP_2.match(text), text
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


def _tiny_experiment():
    cfg = check_config(load_config(TEACHER, "smoke", TINY))
    experiment = loop.build_experiment(cfg, CPU)
    return cfg, experiment, build_optimizer(experiment.model, cfg)


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
    folder = _stopped_2(tmp_path / "wall")
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
    folder = _stopped_2(tmp_path / "other")
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
    folder = _stopped_2(tmp_path / parallel, [f"parallel={parallel}"])
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
    unscaled = Langevin([theta], lr=0.1, beta=0.25, n_particles=8, mean_field_scaling=False, seed=0)
    assert loop._temperature(unscaled) == {"beta": 0.25, "beta_mean_field": 2.0}  # the scaled chain's M·β
    both = Langevin([theta], lr=0.1, beta=0.25, n_particles=8, mean_field_scaling=False,
                    temperature_convention="loss", seed=0)  # fmt: skip
    assert loop._temperature(both) == {"beta": 0.25, "beta_mean_field": 2.0}  # M·β_s, not M²·β_s
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


def test_differences_include_keys_on_one_side_only():
    """Keys present in one table only are differences too (the union of the keys, not the intersection)."""
    assert sorted(config_differences({"a": 1, "t": {"x": 1}}, {"b": 2, "t": {"x": 1, "y": 0}})) == [
        "a",
        "b",
        "t.y",
    ]


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


# mutmut's trampolines add frames: a warning's stack level moves under it
UNDER_MUTMUT = "MUTANT_UNDER_TEST" in os.environ


HERE = Path(__file__).resolve()


LOOP_FILE = Path(loop.__file__).resolve()


def _run_2(folder: Path, extra=(), **kwargs) -> RunResult:
    kwargs.setdefault("quiet", True)
    return loop.run(TEACHER, folder, preset="smoke", overrides=[*TINY, *extra], **kwargs)


def _records(folder: Path) -> list[dict]:
    """``metrics.jsonl`` read back line by line with :mod:`json` (not through ``MetricsLog``); none yet: []."""
    if not (folder / "metrics.jsonl").exists():
        return []
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def _cosine(k: int, T: float, start: float = 1e-3, end: float = 1e-5) -> float:
    """The cosine schedule by its formula: ``end + (start − end)·(1 + cos(πk/T))/2``."""
    return end + (start - end) * (1 + math.cos(math.pi * k / T)) / 2


def _plain_loop(steps: int, seed: int = 0, eval_at=()):
    """The TINY run written out by hand: the task's ``build`` with the TINY schemas, a ``Langevin`` with the
    smoke preset's options (cosine β over ``T = steps``) seeded ``derive_seed(seed, "noise")``, torch seeded
    ``derive_seed(seed, "torch")``; zero_grad, loss, backward, step.

    Returns:
        (losses per step, the model's state after each step, the optimizer's ``last_stats`` after each step,
        the evaluation metrics at the steps ``eval_at``)
    """
    experiment = tasks.TEACHER_STUDENT.build(
        TeacherStudentData(d=16, k=2, activation="relu", n_train=64, n_test=32),
        FeatureModel(n_particles=8, activation="relu"),
        batch_size=16,
        seed=seed,
        device=CPU,
        dtype=torch.float32,
    )
    model = experiment.model
    optimizer = Langevin(
        Langevin.param_groups_for(model, others={}),
        lr=0.05,
        beta=Cosine(1e-3, 1e-5, float(steps)),
        drift="sgd",
        seed=derive_seed(seed, "noise"),
    )
    torch.manual_seed(derive_seed(seed, "torch"))
    losses, states, stats, evals = [], {}, {}, {}
    for k in range(1, steps + 1):
        batch = experiment.next_batch()
        optimizer.zero_grad()
        loss = experiment.loss(batch)
        losses.append(float(loss.detach()))
        loss.backward()
        optimizer.step()
        states[k] = {name: t.detach().clone() for name, t in model.state_dict().items()}
        stats[k] = dataclasses.asdict(optimizer.last_stats)
        if k in eval_at:
            model.eval()
            with torch.no_grad():
                evals[k] = {name: float(v) for name, v in experiment.evaluate().items()}
            model.train()
    return losses, states, stats, evals


def _equal_states(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


class _Recording:
    """A task that records what ``build`` receives, then builds the teacher-student task (or raises)."""

    Data = TeacherStudentData
    Model = FeatureModel

    def __init__(self, error: BaseException | None = None) -> None:
        self.calls, self.error = [], error

    def build(self, data, model, **kwargs):
        self.calls.append((data, model, kwargs))
        if self.error is not None:
            raise self.error
        return tasks.TEACHER_STUDENT.build(data, model, **kwargs)


def _saves(monkeypatch) -> list:
    """Record the step of every ``Checkpoints.save`` (the real save still runs)."""
    saved, real = [], Checkpoints.save

    def save(self, state, step, meta=None):
        saved.append(step)
        return real(self, state, step, meta)

    monkeypatch.setattr(Checkpoints, "save", save)
    return saved


class _Bar:
    """A stand-in for tqdm recording its arguments, updates, postfixes and close."""

    made: list = []

    def __init__(self, **kwargs):
        self.kwargs, self.updates, self.postfix, self.closed = kwargs, 0, [], False
        _Bar.made.append(self)

    def update(self, n=1):
        self.updates += n

    def set_postfix(self, **kwargs):
        self.postfix.append(kwargs)

    def close(self):
        self.closed = True


class _Board:
    """A stand-in for the loop's TensorBoard sink recording its arguments, records and close."""

    made: list = []

    def __init__(self, folder, enabled, start_step):
        self.args, self.written, self.closed = (folder, enabled, start_step), [], False
        _Board.made.append(self)

    def write(self, record):
        self.written.append(json.loads(json.dumps(record)))

    def close(self):
        self.closed = True


@pytest.fixture
def sinks(monkeypatch):
    """The loop's progress bar and TensorBoard sink replaced by recorders."""
    _Bar.made, _Board.made = [], []
    monkeypatch.setattr(loop, "tqdm", _Bar)
    monkeypatch.setattr(loop, "TensorBoard", _Board)
    return _Bar.made, _Board.made


def _statuses(monkeypatch) -> list:
    """Record the status of every ``_write_summary`` (the real one still runs)."""
    seen, real = [], loop._Run._write_summary

    def write(self, status, final, error=None):
        seen.append(status)
        return real(self, status, final, error)

    monkeypatch.setattr(loop._Run, "_write_summary", write)
    return seen


class _NanAt(_Recording):
    """The teacher-student task whose loss becomes ``value`` from call ``at`` on."""

    def __init__(self, at: int, value: float) -> None:
        super().__init__()
        self.at, self.value = at, value

    def build(self, data, model, **kwargs):
        experiment = super().build(data, model, **kwargs)
        inner, calls = experiment.loss, [0]

        def loss(batch):
            calls[0] += 1
            out = inner(batch)
            return out * self.value if calls[0] >= self.at else out

        experiment.loss = loss
        return experiment


def _recording_run(step, *, log=2, evaluate=0, window=None, window_metrics=None):
    evaluated = []
    fake = SimpleNamespace(
        cfg=SimpleNamespace(train=SimpleNamespace(log_every=log, eval_every=evaluate, free_energy=False)),
        window=window if window is not None else {"loss_sum": 3.0, "n": 2, "time": 0.5},
        step=step,
        elapsed=7.25,
        experiment=SimpleNamespace(unit="tokens", units_per_step=10, window_metrics=window_metrics),
        optimizer=SimpleNamespace(
            param_groups=[
                {"noise": True, "beta": 0.5, "step": step, "n_particles": 1, "mean_field_scaling": True}
            ],
            last_stats=None,
            last_group_stats=None,
        ),
        _evaluate=lambda: (evaluated.append(step), {"val_loss": 1.25})[1],
    )
    return fake, evaluated


def _evaluating(metrics, allowed=()):
    model = torch.nn.Linear(1, 1)
    seen = []

    def evaluate():
        seen.append((model.training, torch.is_grad_enabled()))
        if isinstance(metrics, BaseException):
            raise metrics
        return metrics

    fake = SimpleNamespace(
        step=4, experiment=SimpleNamespace(model=model, evaluate=evaluate, nonfinite_metrics=allowed)
    )
    return fake, model, seen


def _stepping(loss_value=None, on_backward=None, step_error=None):
    """A stand-in ``_Run`` of the TINY experiment and optimizer at step 5, one process."""
    cfg = check_config(_resolved())
    experiment = loop.build_experiment(cfg, CPU)
    optimizer = build_optimizer(experiment.model, cfg)
    batch = torch.arange(16)
    experiment.next_batch = lambda: batch
    if loss_value is not None:
        inner = experiment.loss
        experiment.loss = lambda b: inner(b) * loss_value
    experiment.on_backward = on_backward
    if step_error is not None:

        def step():
            raise step_error

        optimizer.step = step
    fake = SimpleNamespace(
        experiment=experiment,
        optimizer=optimizer,
        data_parallel=False,
        sharded=False,
        rank=0,
        world=1,
        cfg=cfg,
        device=CPU,
        step=5,
    )
    return fake, batch


class _Saves:
    def __init__(self, latest=None):
        self._latest, self.saved = latest, []

    def latest(self):
        return self._latest

    def save(self, state, step, meta=None):
        self.saved.append((state, step, meta))


def _checkpointing(*, lead=True, sharded=False, latest=None, finite=True):
    model = torch.nn.Linear(2, 1)
    if not finite:
        with torch.no_grad():
            model.weight[0, 1] = float("nan")
    states = []
    fake = SimpleNamespace(
        lead=lead,
        sharded=sharded,
        checkpoints=_Saves(latest),
        step=6,
        experiment=SimpleNamespace(model=model),
        _state=lambda: (states.append(1), {"marker": 1})[1],
        config_sha256="abc123",
        provenance={"commit": "c0ffee", "dirty": False},
        device=CPU,
    )
    return fake, states


def test_a_run_killed_between_its_first_two_files_resumes(tmp_path, monkeypatch):
    """The process dies (an exception in place of SIGKILL) between the two files a run writes first into a new
    folder, config.toml and run.json: the folder resumes and finishes. config.toml is written first; the other
    way round a run.json alone was refused for ever as another run's remains (--resume and sweeps alike).
    Control: the resumed run ends where an uninterrupted one does."""
    from meanfield.runs import RunResult, run

    config = Path(__file__).resolve().parents[2] / "experiments" / "teacher_student" / "config.toml"
    overrides = ["train.steps=6", "train.figures=false"]
    calls = []

    def second_dies(real):
        def write(*args):
            calls.append(real.__name__)
            if len(calls) == 2:
                raise KeyboardInterrupt
            return real(*args)

        return write

    with monkeypatch.context() as patch:
        patch.setattr(loop, "write_marker", second_dies(loop.write_marker))
        patch.setattr(loop, "write_text_atomic", second_dies(loop.write_text_atomic))
        with pytest.raises(KeyboardInterrupt):
            run(config, tmp_path / "run", preset="smoke", overrides=overrides, quiet=True)
    assert calls == ["write_text_atomic", "write_marker"]
    resumed = run(config, tmp_path / "run", preset="smoke", overrides=overrides, quiet=True, resume=True)
    whole = run(config, tmp_path / "whole", preset="smoke", overrides=overrides, quiet=True)
    assert (tmp_path / "run" / "run.json").is_file() and resumed.summary["status"] == "finished"
    assert RunResult.load(resumed.path).final["train_loss"] == RunResult.load(whole.path).final["train_loss"]


def test_run_interrupted_keeps_its_signal_as_an_int_across_pickle():
    """``RunInterrupted``: the message as given, SIGINT (2) by default, the signal stored as a plain int; a
    pickle round trip (a sweep's worker to its parent) keeps type, message and signal (15 here)."""
    default = loop.RunInterrupted("stopped")
    assert str(default) == "stopped" and default.signum == 2 and type(default.signum) is int
    term = loop.RunInterrupted("by term", signal.SIGTERM)
    assert term.signum == 15 and type(term.signum) is int
    back = pickle.loads(pickle.dumps(term))
    assert type(back) is loop.RunInterrupted and str(back) == "by term" and back.signum == 15
    assert not isinstance(term, KeyboardInterrupt) and isinstance(term, Exception)


def test_non_finite_loss_error_is_arithmetic_and_names_its_step():
    """``NonFiniteLossError(message, step)``: an ArithmeticError with the message and ``step``."""
    error = loop.NonFiniteLossError("the loss is nan", 7)
    assert isinstance(error, ArithmeticError) and str(error) == "the loss is nan" and error.step == 7
    assert loop.STOP_SIGNALS == (signal.SIGINT, signal.SIGTERM)


def test_stop_flag_records_the_first_signal_raises_on_the_second_and_puts_the_handlers_back():
    """Inside ``StopFlag``: both stop signals go to the flag (the handlers found are not called), the first
    sets ``signum`` (SIGTERM here) and ``set``, a second raises KeyboardInterrupt and leaves ``signum``; on
    exit the handlers found are back. A fresh flag is unset, and a SIGINT alone gives ``signum = SIGINT``."""
    called = []

    def mine(signum, frame):
        called.append(signum)

    found = {s: signal.signal(s, mine) for s in loop.STOP_SIGNALS}
    try:
        flag = loop.StopFlag()
        assert flag.signum is None and flag.set is False
        with flag as stop:
            assert stop is flag
            assert signal.getsignal(signal.SIGINT) == flag._handle == signal.getsignal(signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop.set is True and stop.signum == signal.SIGTERM
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
            assert stop.signum == signal.SIGTERM
        assert signal.getsignal(signal.SIGINT) is mine and signal.getsignal(signal.SIGTERM) is mine
        with loop.StopFlag() as other:
            os.kill(os.getpid(), signal.SIGINT)
        assert other.signum == signal.SIGINT and called == []
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        for s, handler in found.items():
            signal.signal(s, handler)


def test_stop_flag_off_the_main_thread_installs_nothing():
    """In another thread (where Python allows no handler) the flag installs and puts back nothing: the main
    thread's handler stays, and the flag stays unset."""
    before = signal.getsignal(signal.SIGINT)
    seen = {}

    def body():
        with loop.StopFlag() as stop:
            seen["previous"] = dict(stop._previous)
            seen["handler"] = signal.getsignal(signal.SIGINT)
        seen["set"] = stop.set

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == {"previous": {}, "handler": before, "set": False}
    assert signal.getsignal(signal.SIGINT) is before


def test_device_names_and_their_refusals(monkeypatch):
    """``_device``: ``cpu`` is the CPU; ``auto`` is CUDA exactly when it is available; ``cuda``/``cuda:1``
    without CUDA and a name torch does not know are refused with the exact messages (availability faked)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert loop._device("cpu") == CPU and loop._device("auto") == CPU
    for name in ("cuda", "cuda:1"):
        with pytest.raises(ConfigError) as caught:
            loop._device(name)
        assert str(caught.value) == f"device {name!r} was asked for but CUDA is not available here"
    with pytest.raises(ConfigError) as caught:
        loop._device("gpu")
    assert str(caught.value) == "device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got 'gpu'"
    assert caught.value.__cause__ is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert loop._device("auto") == torch.device("cuda")
    assert loop._device("cuda:1") == torch.device("cuda", 1) and loop._device("cpu") == CPU


def test_finite_parameters_looks_at_every_parameter():
    """``_finite_parameters``: True for finite parameters and for a model without any; False for a NaN in
    the weight or an Inf in the bias (the last parameter)."""
    model = torch.nn.Linear(2, 2)
    assert loop._finite_parameters(model) is True
    assert loop._finite_parameters(torch.nn.Module()) is True
    with torch.no_grad():
        model.bias[1] = float("inf")
    assert loop._finite_parameters(model) is False
    with torch.no_grad():
        model.bias[1] = 0.0
        model.weight[0, 0] = float("nan")
    assert loop._finite_parameters(model) is False


def test_stats_record_of_an_optimizer_with_and_without_statistics():
    """``_stats_record``: nothing without statistics (no ``last_group_stats`` attribute, or an empty list);
    ``optim`` is the dataclass as a dict, ``groups`` one dict (or None) per group, written out here."""
    from meanfield.optim.step_stats import LangevinStats

    stats = LangevinStats(
        step=3,
        beta=0.5,
        eta_eff_mean=0.1,
        eta_eff_min=0.1,
        eta_eff_max=0.1,
        noise_rms=0.2,
        drift_rms=0.3,
        drift_to_noise=1.5,
        n=12,
    )
    as_dict = {
        "step": 3,
        "beta": 0.5,
        "eta_eff_mean": 0.1,
        "eta_eff_min": 0.1,
        "eta_eff_max": 0.1,
        "noise_rms": 0.2,
        "drift_rms": 0.3,
        "drift_to_noise": 1.5,
        "n": 12,
    }
    assert loop._stats_record(SimpleNamespace(last_stats=None)) == {}
    assert loop._stats_record(SimpleNamespace(last_stats=None, last_group_stats=[])) == {}
    assert loop._stats_record(SimpleNamespace(last_stats=stats, last_group_stats=None)) == {"optim": as_dict}
    assert loop._stats_record(SimpleNamespace(last_stats=None, last_group_stats=[None, stats])) == {
        "groups": [None, as_dict]
    }


def test_temperature_reads_the_first_noisy_group_at_its_step():
    """``_temperature``: a noiseless first group is skipped; the schedule is evaluated at the group's
    ``step`` (Linear 2 → 0 over 4 at step 1 is 1.5), an int β becomes a float; the loss convention adds
    ``M·β``; no noisy group is β = 0."""
    quiet = {"noise": False, "beta": 9.0, "step": 0}
    defaults = {"n_particles": 1, "mean_field_scaling": True}  # as every Langevin group has them
    noisy = {"noise": True, "beta": Linear(2.0, 0.0, 4.0), "step": 1, **defaults}
    assert loop._temperature(SimpleNamespace(param_groups=[quiet, noisy])) == {"beta": 1.5}
    whole = loop._temperature(
        SimpleNamespace(param_groups=[{"noise": True, "beta": 2, "step": 0, **defaults}])
    )
    assert whole == {"beta": 2.0} and type(whole["beta"]) is float
    loss = {**noisy, "temperature_convention": "loss", "n_particles": 4}
    assert loop._temperature(SimpleNamespace(param_groups=[loss])) == {"beta": 1.5, "beta_mean_field": 6.0}
    assert loop._temperature(SimpleNamespace(param_groups=[quiet])) == {"beta": 0.0}


def test_check_checkpointable_refuses_what_torch_load_weights_only_refuses():
    """Tensors and plain data pass; an object that pickles but that ``weights_only`` loading refuses, and a
    lambda that does not pickle, are refused with the exact prefix of the message."""
    loop._check_checkpointable({"t": torch.zeros(2), "plain": [1, "x", {"a": 2.5}]})
    prefix = r"^this run's state cannot be checkpointed \(torch\.save \+ torch\.load\(weights_only=True\)\): "
    for bad in ({"obj": SimpleNamespace(a=1)}, {"f": lambda: 0}):
        with pytest.raises(ConfigError, match=prefix):
            loop._check_checkpointable(bad)


def test_build_experiment_hands_the_task_its_schemas_seed_batch_device_and_dtype(monkeypatch):
    """``build`` gets the ``[data]`` and ``[model]`` dataclasses (TINY's values, written out), the batch size
    16, the run's seed 9, the device and float64 for ``dtype = "float64"`` (float32 by default)."""
    task = _Recording()
    monkeypatch.setitem(tasks.TASKS, "recording", task)
    for dtype, expected in (("float64", torch.float64), ("float32", torch.float32)):
        cfg = check_config(_resolved(["task=recording", "seed=9", f"dtype={dtype}"]))
        experiment = loop.build_experiment(cfg, CPU)
        assert all(p.dtype == expected for p in experiment.model.parameters())
    data, model, kwargs = task.calls[0]
    assert data == TeacherStudentData(d=16, k=2, activation="relu", n_train=64, n_test=32)
    assert model == FeatureModel(n_particles=8, activation="relu")
    assert kwargs == {"batch_size": 16, "seed": 9, "device": CPU, "dtype": torch.float64}
    assert task.calls[1][2]["dtype"] == torch.float32


def test_build_experiment_wraps_value_and_type_errors_only(monkeypatch):
    """A ValueError of the real build (``n_particles = 0``) and a TypeError are ConfigErrors naming the task
    and the tables (exact); a ConfigError, a CorruptDataError (itself a ValueError) and any other error pass
    through unchanged, the same object."""
    cfg = check_config(_resolved(["model.n_particles=0"]))
    with pytest.raises(ConfigError) as caught:
        loop.build_experiment(cfg, CPU)
    assert str(caught.value) == (
        "task 'teacher_student' cannot be built from this configuration ([data], [model], train.batch_size): "
        "n_particles must be ≥ 1, got 0"
    )
    monkeypatch.setitem(tasks.TASKS, "typed", _Recording(TypeError("wrong type")))
    with pytest.raises(ConfigError) as caught:
        loop.build_experiment(check_config(_resolved(["task=typed"])), CPU)
    assert str(caught.value) == (
        "task 'typed' cannot be built from this configuration ([data], [model], train.batch_size): wrong type"
    )
    for error in (ConfigError("mine"), CorruptDataError("file damaged"), RuntimeError("other")):
        monkeypatch.setitem(tasks.TASKS, "raising", _Recording(error))
        with pytest.raises(type(error)) as caught:
            loop.build_experiment(check_config(_resolved(["task=raising"])), CPU)
        assert caught.value is error


def test_preflight_checks_builds_and_writes_nothing(tmp_path, monkeypatch):
    """``preflight``: a good configuration returns None and writes nothing (the working folder stays empty);
    a schema error, a model the task refuses, an optimizer ``Langevin`` refuses and a device that is not
    there are refused with their exact messages."""
    monkeypatch.chdir(tmp_path)
    assert loop.preflight(_resolved()) is None
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ConfigError, match=r"^train: train\.steps must be ≥ 1, got 0$"):
        loop.preflight(_resolved(["train.steps=0"]))
    with pytest.raises(ConfigError, match=r"^task 'teacher_student' cannot be built .*got 0$"):
        loop.preflight(_resolved(["model.n_particles=0"]))
    with pytest.raises(ConfigError, match=r"^\[optim\]: Langevin: lr must be > 0, got -1\.0$"):
        loop.preflight(_resolved(["optim.lr=-1.0"]))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"^device 'cuda' was asked for but CUDA is not available here$"):
        loop.preflight(_resolved(["device=cuda"]))
    assert list(tmp_path.iterdir()) == []


def test_a_resolved_dict_takes_no_preset_or_overrides(tmp_path):
    """``run(dict, preset=…)`` or ``run(dict, overrides=…)``: the exact refusal, no folder made."""
    for kwargs in ({"preset": "smoke"}, {"overrides": ["train.steps=2"]}):
        with pytest.raises(ConfigError) as caught:
            loop.run(_resolved(), tmp_path / "r", quiet=True, **kwargs)
        assert (
            str(caught.value) == "preset and overrides apply to a configuration file, not to a resolved dict"
        )
    assert not (tmp_path / "r").exists()


def test_default_folders_are_runs_stem_and_stem_preset(tmp_path, monkeypatch):
    """Without ``out``: a resolved dict runs into ``runs/run``, the teacher file with the smoke preset into
    ``runs/config-smoke``, without a preset into ``runs/config`` (relative to the working folder); each
    result's path is that folder and its config.toml the resolved configuration."""
    monkeypatch.chdir(tmp_path)
    resolved = _resolved()
    a = loop.run(resolved, quiet=True)
    b = loop.run(TEACHER, preset="smoke", overrides=TINY, quiet=True)
    c = loop.run(TEACHER, overrides=TINY, quiet=True)
    assert (a.path, b.path, c.path) == (Path("runs/run"), Path("runs/config-smoke"), Path("runs/config"))
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["config", "config-smoke", "run"]
    assert tomllib.loads((tmp_path / "runs/run/config.toml").read_text()) == resolved
    assert tomllib.loads((tmp_path / "runs/config/config.toml").read_text()) == load_config(
        TEACHER, None, TINY
    )
    assert (a.status, a.step, b.status, c.step) == ("finished", 4, "finished", 4)


def test_the_callers_thread_count_is_back_after_a_failed_run(tmp_path):
    """``threads = 1`` and an error at step 1: the caller's 2 threads are back (the ``finally``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:

        def fail(step):
            assert torch.get_num_threads() == 1
            raise RuntimeError("stop")

        with pytest.raises(RuntimeError, match="^stop$"):
            _run_2(tmp_path / "r", ["threads=1"], on_step=fail)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_state_that_cannot_be_checkpointed_stops_the_run_before_its_folder(tmp_path, monkeypatch):
    """A task whose batch sampler's state holds an object ``weights_only`` loading refuses: the run is refused
    at the start with the checkpoint message, and the folder is never made."""

    class Unsaveable(_Recording):
        def build(self, data, model, **kwargs):
            experiment = super().build(data, model, **kwargs)
            experiment.batches = SimpleNamespace(state_dict=lambda: {"x": SimpleNamespace(a=1)})
            return experiment

    monkeypatch.setitem(tasks.TASKS, "unsaveable", Unsaveable())
    with pytest.raises(ConfigError, match=r"^this run's state cannot be checkpointed \(torch\.save"):
        _run_2(tmp_path / "u", ["task=unsaveable"])
    assert not (tmp_path / "u").exists()


@pytest.mark.parametrize(
    "steps,log,evaluate,every,keep,logged,evaluated,saved,kept",
    [
        (5, 2, 3, 2, 2, [2, 3, 4, 5], [3, 5], [2, 4, 5], [4, 5]),
        (7, 3, 2, 0, 5, [2, 3, 4, 6, 7], [2, 4, 6, 7], [7], [7]),
        (4, 4, 0, 3, 5, [4], [4], [3, 4], [3, 4]),
        (3, 1, 1, 1, 1, [1, 2, 3], [1, 2, 3], [1, 2, 3], [3]),
    ],
    ids=["log2_eval3_ckpt2", "log3_eval2_end_only", "one_line", "every_step"],
)
def test_a_run_is_the_plain_loop_logged_evaluated_and_saved_on_its_schedule(
    tmp_path, monkeypatch, rng_kept, steps, log, evaluate, every, keep, logged, evaluated, saved, kept
):
    """Lines at the multiples of ``log_every`` and ``eval_every`` and at the last step; evaluations at the
    multiples of ``eval_every`` and the last step; a checkpoint saved at the multiples of
    ``checkpoint_every`` and at the end (once, even when the end is a multiple), the last ``keep`` kept (step
    lists worked out by hand). Against the plain loop: each ``train_loss`` (metrics.jsonl read with json) is
    the exact mean of the plain losses since the previous line, ``beta`` the cosine at that step (by its
    formula, rel 1e-12), ``optim``/``groups`` the plain optimizer's ``last_stats``, the evaluation metrics the
    plain model's at that step, every kept checkpoint's parameters the plain ones bit for bit (its window
    empty: saved after a line, or holding the steps since), its record the step, run.json's config hash and
    the provenance read from environment.json by hand. The lines' keys come in the documented order."""
    saves = _saves(monkeypatch)
    folder = tmp_path / "r"
    extra = [
        f"train.steps={steps}",
        f"train.log_every={log}",
        f"train.eval_every={evaluate}",
        f"train.checkpoint_every={every}",
        f"train.keep_checkpoints={keep}",
    ]
    result = _run_2(folder, extra)
    losses, states, stats, evals = _plain_loop(steps, eval_at=evaluated)
    records = _records(folder)
    assert [r["step"] for r in records] == logged
    assert [r["step"] for r in records if "test_mse" in r] == evaluated
    previous = 0
    for r in records:
        window = losses[previous : r["step"]]
        assert r["train_loss"] == sum(window) / len(window)
        assert r["beta"] == pytest.approx(_cosine(r["step"], steps), rel=1e-12, abs=0)
        assert r["optim"] == stats[r["step"]] and r["groups"] == [stats[r["step"]]]
        assert r["samples_per_s"] > 0 and r["time"] > 0
        keys = ["step", "time", "train_loss", "samples_per_s", "beta", "optim", "groups"]
        if r["step"] in evaluated:
            assert {k: r[k] for k in evals[r["step"]]} == evals[r["step"]]
            keys += list(evals[r["step"]])
        assert list(r) == keys
        previous = r["step"]
    assert saves == saved
    checkpoints = Checkpoints(folder / "checkpoints")
    assert checkpoints.steps() == kept
    run_json = json.loads((folder / "run.json").read_text())
    env = json.loads((folder / "environment.json").read_text())
    provenance = {
        "commit": env["git"]["commit"],
        "dirty": env["git"]["dirty"],
        "source_sha256": env["source_sha256"],
        "meanfield": env["packages"].get("meanfield-sde"),
        "torch": env["packages"]["torch"],
    }
    for k in kept:
        state = torch.load(checkpoints.path(k), weights_only=True)
        assert state["step"] == k and _equal_states(state["model"], states[k])
        since = k - max([s for s in logged if s <= k], default=0)
        assert state["window"]["n"] == since
        assert state["window"]["loss_sum"] == sum(losses[k - since : k])
        record = checkpoints.record(k)
        assert {key: record[key] for key in record if key not in ("sha256", "bytes")} == {
            "step": k,
            "config_sha256": run_json["config_sha256"],
            **provenance,
        }
    assert not _equal_states(states[steps], states[steps - 1])  # negative control: the steps move
    summary = _summary(folder)
    assert (result.status, summary["step"], summary["steps"]) == ("finished", steps, steps)
    last = records[-1]
    assert summary["final"] == {
        k: v for k, v in last.items() if k not in ("step", "time", "samples_per_s", "optim", "groups")
    }
    for key in ("test_mse", "test_mse_relative"):
        values = [(evals[k][key], k) for k in evaluated]
        best = min(values, key=lambda vk: vk[0])  # the first of equal values
        assert summary["best"][key] == {"value": best[0], "step": best[1]}
    assert set(summary["best"]) == {"test_mse", "test_mse_relative"}


def test_another_seed_is_another_run(tmp_path, rng_kept):
    """Seed 3: the run equals the plain loop of seed 3 and differs from that of seed 0 (negative control for
    the seeding of the data, initialisation, batches and noise)."""
    result = _run_2(tmp_path / "s3", ["seed=3"])
    state = Checkpoints(tmp_path / "s3" / "checkpoints").load(4)["model"]
    assert result.summary["seed"] == 3
    assert _equal_states(state, _plain_loop(4, seed=3)[1][4])
    assert not _equal_states(state, _plain_loop(4, seed=0)[1][4])


def test_on_step_sees_each_step_after_its_line_and_checkpoint(tmp_path, sinks, monkeypatch):
    """``on_step`` is called with 1, 2, 3, 4 in order; when it runs, that step's line and checkpoint (when
    due) are written, ``summary.json`` says ``running`` at step 0 with empty final and best, and
    environment.json records 1 process and no resumption. The bar: total 4 from 0, disabled (quiet), one
    update a step, the loss and rate of each line, closed; the sink: the run's ``tensorboard`` folder,
    disabled (TINY), from step 0, given each line as written, closed."""
    folder = tmp_path / "r"
    statuses = _statuses(monkeypatch)
    seen = []

    def look(step):
        lines = [r["step"] for r in _records(folder)]
        summary = _summary(folder)
        env = json.loads((folder / "environment.json").read_text())
        seen.append(
            (
                step,
                lines,
                Checkpoints(folder / "checkpoints").steps(),
                (summary["status"], summary["step"], summary["final"], summary["best"]),
                (env["world_size"], "resumed_from_step" in env, env["earlier"]),
            )
        )

    _run_2(folder, on_step=look)
    running = ("running", 0, {}, {})
    assert seen == [
        (1, [], [], running, (1, False, [])),
        (2, [2], [2], running, (1, False, [])),
        (3, [2], [2], running, (1, False, [])),
        (4, [2, 4], [2, 4], running, (1, False, [])),
    ]
    assert statuses == ["running", "finished"]
    bars, boards = sinks
    (bar,) = bars
    assert bar.kwargs == {
        "total": 4,
        "initial": 0,
        "disable": True,
        "unit": "step",
        "dynamic_ncols": True,
        "desc": "r",
    }
    records = _records(folder)
    assert bar.updates == 4 and bar.closed
    assert bar.postfix == [
        {"loss": f"{r['train_loss']:.4g}", "samples/s": f"{r['samples_per_s']:.3g}"} for r in records
    ]
    (board,) = boards
    assert board.args == (folder / "tensorboard", False, 0) and board.written == records and board.closed


def test_the_bar_shows_unless_quiet_and_the_sink_is_on_when_configured(tmp_path, sinks, capsys, monkeypatch):
    """``quiet = False`` where bars are on (``MEANFIELD_PROGRESS=1``, :mod:`meanfield.progress`): the bar is
    enabled; ``train.tensorboard = true``: the sink is enabled. Where they are off (``0``, or stderr not a
    terminal as under pytest) the bar is disabled although not quiet."""
    monkeypatch.setenv("MEANFIELD_PROGRESS", "1")
    _run_2(tmp_path / "r", ["train.tensorboard=true"], quiet=False)
    bars, boards = sinks
    assert bars[0].kwargs["disable"] is False and boards[0].args[1] is True
    monkeypatch.setenv("MEANFIELD_PROGRESS", "0")
    _run_2(tmp_path / "r2", quiet=False)
    assert bars[1].kwargs["disable"] is True


def test_a_resume_continues_the_plain_loop_and_records_where_it_resumed(tmp_path, sinks, rng_kept):
    """A run stopped by an error after step 3 (checkpoint 2) and resumed: ``on_step`` sees 3 and 4, the bar
    starts at 2, the sink from step 2; the line at step 4 is the mean of the plain losses of steps 3 and 4
    (the window restarts at the checkpoint's line); the final parameters are the plain loop's; the summary
    says finished; environment.json says ``resumed_from_step = 2`` and keeps the first record (without it)
    in ``earlier``."""
    folder = tmp_path / "r"

    def stop(step):
        if step == 3:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="^stop$"):
        _run_2(folder, on_step=stop)
    assert _summary(folder)["status"] == "failed" and _summary(folder)["error"] == "RuntimeError: stop"
    first_env = json.loads((folder / "environment.json").read_text())
    steps_seen = []
    result = _run_2(folder, resume=True, on_step=steps_seen.append)
    losses, states, _, _ = _plain_loop(4)
    assert steps_seen == [3, 4] and result.status == "finished" and result.step == 4
    bars, boards = sinks
    assert bars[-1].kwargs["initial"] == 2 and bars[-1].updates == 2 and boards[-1].args[2] == 2
    records = _records(folder)
    assert [r["step"] for r in records] == [2, 4]
    assert records[0]["train_loss"] == (losses[0] + losses[1]) / 2
    assert records[1]["train_loss"] == (losses[2] + losses[3]) / 2
    assert _equal_states(Checkpoints(folder / "checkpoints").load(4)["model"], states[4])
    env = json.loads((folder / "environment.json").read_text())
    assert env["resumed_from_step"] == 2 and env["world_size"] == 1
    assert env["earlier"] == [{k: v for k, v in first_env.items() if k != "earlier"}]
    assert "resumed_from_step" not in first_env


def test_resuming_a_finished_run_changes_nothing(tmp_path, sinks, monkeypatch):
    """A finished run resumed: no step, no bar, environment.json and metrics.jsonl byte for byte as they were,
    the summary rewritten as finished (the only summary written)."""
    folder = tmp_path / "r"
    _run_2(folder)
    env, metrics = (folder / "environment.json").read_bytes(), (folder / "metrics.jsonl").read_bytes()
    bars, boards = sinks
    bars.clear()
    statuses = _statuses(monkeypatch)
    steps_seen = []
    result = _run_2(folder, resume=True, on_step=steps_seen.append)
    assert (result.status, result.step, steps_seen, bars, statuses) == ("finished", 4, [], [], ["finished"])
    assert (folder / "environment.json").read_bytes() == env and (
        folder / "metrics.jsonl"
    ).read_bytes() == metrics


def test_sigterm_stops_after_the_step_with_a_checkpoint_and_an_interrupted_summary(
    tmp_path, monkeypatch, rng_kept
):
    """SIGTERM during step 3 of 5 (no periodic checkpoints): RunInterrupted with the exact message and
    signum 15, no step 4 taken, the checkpoint of step 3 (the plain loop's parameters), the summary
    written once as interrupted with the final values of the line at step 2; the resume finishes as the plain
    loop of 5 steps does."""
    folder = tmp_path / "r"
    statuses = _statuses(monkeypatch)
    steps_seen = []

    def term(step):
        steps_seen.append(step)
        if step == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    extra = ["train.steps=5", "train.checkpoint_every=0"]
    with pytest.raises(loop.RunInterrupted) as caught:
        _run_2(folder, extra, on_step=term)
    assert str(caught.value) == "interrupted by SIGTERM at step 3; checkpoint written, continue with --resume"
    assert caught.value.signum == signal.SIGTERM and steps_seen == [1, 2, 3]
    assert statuses == ["running", "interrupted"]
    losses, states, _, _ = _plain_loop(5)
    assert Checkpoints(folder / "checkpoints").steps() == [3]
    assert _equal_states(Checkpoints(folder / "checkpoints").load(3)["model"], states[3])
    summary = _summary(folder)
    assert (summary["status"], summary["step"], "error" in summary) == ("interrupted", 3, False)
    assert summary["final"] == {
        "train_loss": (losses[0] + losses[1]) / 2,
        "beta": _records(folder)[0]["beta"],
    }
    assert _run_2(folder, extra, resume=True).status == "finished"
    assert _equal_states(Checkpoints(folder / "checkpoints").load(5)["model"], states[5])


def test_a_ctrl_c_stop_names_sigint(tmp_path):
    """SIGINT at step 1: the message names SIGINT and step 1, signum 2, checkpoint 1 written."""

    def interrupt(step):
        os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(loop.RunInterrupted) as caught:
        _run_2(tmp_path / "r", on_step=interrupt)
    assert str(caught.value) == "interrupted by SIGINT at step 1; checkpoint written, continue with --resume"
    assert caught.value.signum == 2 and Checkpoints(tmp_path / "r" / "checkpoints").steps() == [1]


def test_a_keyboard_interrupt_writes_an_interrupted_summary_and_no_checkpoint(tmp_path, monkeypatch):
    """A KeyboardInterrupt at step 3 (a second Ctrl-C): re-raised, the summary rewritten from ``running`` to
    ``interrupted`` at step 3 without an error, no checkpoint beyond step 2."""
    statuses = _statuses(monkeypatch)

    def stop(step):
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run_2(tmp_path / "r", on_step=stop)
    summary = _summary(tmp_path / "r")
    assert (summary["status"], summary["step"], "error" in summary) == ("interrupted", 3, False)
    assert statuses == ["running", "interrupted"]
    assert Checkpoints(tmp_path / "r" / "checkpoints").steps() == [2]


@pytest.mark.parametrize(
    "at,value,every,latest",
    [(3, float("nan"), 2, 2), (2, float("inf"), 0, None)],
    ids=["nan_after_a_checkpoint", "inf_without_one"],
)
def test_a_non_finite_loss_stops_as_diverged_naming_the_step_and_the_checkpoint(
    tmp_path, monkeypatch, at, value, every, latest
):
    """The loss turns NaN at step 3 (checkpoint 2 kept) or Inf at step 2 (no checkpoint): the exact message
    (the step, the value, the checkpoint's path or that there is none), ``step`` kept, the summary written
    once as diverged with the first part of the message as its error."""
    monkeypatch.setitem(tasks.TASKS, "nan_at", _NanAt(at, value))
    statuses = _statuses(monkeypatch)
    folder = tmp_path / "r"
    with pytest.raises(loop.NonFiniteLossError) as caught:
        _run_2(folder, ["task=nan_at", f"train.checkpoint_every={every}"])
    first = f"the training loss is {value} at step {at}"
    where = (
        "none (the run must start again)"
        if latest is None
        else str(Checkpoints(folder / "checkpoints").path(latest))
    )
    assert (
        str(caught.value)
        == f"{first}; the run stopped, the last checkpoint with finite parameters is {where}"
    )
    assert caught.value.step == at and caught.value.__cause__ is None
    summary = _summary(folder)
    assert (summary["status"], summary["step"], summary["error"]) == ("diverged", at - 1, first)
    assert statuses == ["running", "diverged"]


@pytest.mark.parametrize("summary_fails", [False, True], ids=["summary_written", "summary_fails_too"])
@pytest.mark.parametrize("kind", ["disk_full", "other"])
def test_a_failure_is_re_raised_with_a_failed_summary_even_if_that_summary_cannot_be_written(
    tmp_path, monkeypatch, kind, summary_fails
):
    """An error at step 3: the same object is re-raised; the summary says failed with the error — a full disk
    by its own message, any other error as ``Type: message``; if writing that summary raises OSError too
    (a full disk), the original error still comes out and the summary stays ``running``."""

    raised = (
        DiskFullError(errno.ENOSPC, "no space left on device writing x; the checkpoints are intact")
        if kind == "disk_full"
        else RuntimeError("stop")
    )
    real = loop._Run._write_summary

    def write(self, status, final, error=None):
        if status == "failed" and summary_fails:
            raise OSError(errno.ENOSPC, "full")
        return real(self, status, final, error)

    monkeypatch.setattr(loop._Run, "_write_summary", write)

    def fail(step):
        if step == 3:
            raise raised

    with pytest.raises(type(raised)) as caught:
        _run_2(tmp_path / "r", on_step=fail)
    assert caught.value is raised
    summary = _summary(tmp_path / "r")
    if summary_fails:
        assert summary["status"] == "running"
    else:
        expected = (
            "no space left on device writing x; the checkpoints are intact"
            if kind == "disk_full"
            else "RuntimeError: stop"
        )
        assert (summary["status"], summary["step"], summary["error"]) == ("failed", 3, expected)


def test_a_resume_under_other_code_warns_from_the_callers_line_and_a_fresh_run_does_not(
    tmp_path, monkeypatch
):
    """``record_environment`` reporting a provenance change (emulated): a resume at step 2 warns with the exact
    text, attributed to the caller of ``run`` (this file); a fresh run given the same report warns nothing."""
    monkeypatch.setattr(loop, "record_environment", lambda path, env: ["commit: aaa → bbb"])
    folder = tmp_path / "r"

    def stop(step):
        if step == 3:
            raise RuntimeError("stop")

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        with pytest.raises(RuntimeError, match="^stop$"):
            _run_2(folder, on_step=stop)
    with pytest.warns(UserWarning) as caught:
        _run_2(folder, resume=True)
    (warning,) = caught
    assert str(warning.message) == (
        f"{folder} resumes at step 2 under other code than its earlier steps: commit: aaa → bbb (the earlier "
        "records are kept in environment.json's 'earlier')"
    )
    assert UNDER_MUTMUT or Path(warning.filename).resolve() == HERE


def test_a_resume_on_another_process_count_warns_from_runs_line(tmp_path):
    """The warning of ``_restore`` (environment.json says 2 processes) is attributed to ``run`` in loop.py
    (``stacklevel = 3``: ``_restore`` ← ``_Run.__init__`` ← ``run``)."""
    folder = tmp_path / "r"

    def stop(step):
        if step == 3:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        _run_2(folder, on_step=stop)
    env = folder / "environment.json"
    env.write_text(json.dumps({**json.loads(env.read_text()), "world_size": 2}))
    with pytest.warns(UserWarning, match=r"ran on 2 process\(es\) and resumes on 1") as caught:
        _run_2(folder, resume=True)
    assert UNDER_MUTMUT or [Path(w.filename).resolve() for w in caught] == [LOOP_FILE]


def test_record_is_due_at_log_and_eval_steps_and_at_the_end():
    """``_record``: None (the window untouched, the same object) off the schedule; at a multiple of
    ``log_every`` the line is step, time, the window's mean loss 3/2, its rate 2·10/0.5 = 40 tokens/s, β, and
    the window restarts; a multiple of ``eval_every`` or the final step adds the evaluation; ``eval_every =
    0`` evaluates only at the end."""
    fake, evaluated = _recording_run(3)
    window = fake.window
    assert loop._Run._record(fake, final=False) is None and fake.window is window
    fake, evaluated = _recording_run(4)
    assert loop._Run._record(fake, final=False) == {
        "step": 4,
        "time": 7.25,
        "train_loss": 1.5,
        "tokens_per_s": 40.0,
        "beta": 0.5,
    }
    assert fake.window == {"loss_sum": 0.0, "n": 0, "time": 0.0} and evaluated == []
    fake, evaluated = _recording_run(3, evaluate=3)
    assert loop._Run._record(fake, final=False)["val_loss"] == 1.25 and evaluated == [3]
    fake, evaluated = _recording_run(4, evaluate=3)
    assert "val_loss" not in loop._Run._record(fake, final=False) and evaluated == []
    fake, evaluated = _recording_run(5, evaluate=0)
    record = loop._Run._record(fake, final=True)
    assert (record["step"], record["val_loss"], evaluated) == (5, 1.25, [5])
    fake, evaluated = _recording_run(6, log=4, evaluate=0)
    assert loop._Run._record(fake, final=False) is None and evaluated == []


def test_record_of_an_empty_or_instant_window_and_window_metrics():
    """An empty window (n = 0) has no loss and no rate; a window of no time has rate None; the task's window
    metrics join the line after β."""
    fake, _ = _recording_run(2, window={"loss_sum": 0.0, "n": 0, "time": 0.0})
    assert loop._Run._record(fake, final=False) == {"step": 2, "time": 7.25, "beta": 0.5}
    fake, _ = _recording_run(2, window={"loss_sum": 1.0, "n": 1, "time": 0.0})
    assert loop._Run._record(fake, final=False)["tokens_per_s"] is None
    fake, _ = _recording_run(2, window_metrics=lambda: {"grad_var": 0.125})
    record = loop._Run._record(fake, final=False)
    assert list(record) == ["step", "time", "train_loss", "tokens_per_s", "beta", "grad_var"]
    assert record["grad_var"] == 0.125


def test_evaluate_runs_in_eval_mode_without_grad_and_gives_floats():
    """``_evaluate``: the task's evaluate runs with the model in eval mode and no grad; tensors and ints come
    back as floats; the model is back in training mode afterwards, also when evaluate raises."""
    fake, model, seen = _evaluating({"a": torch.tensor(1.5), "b": 2})
    metrics = loop._Run._evaluate(fake)
    assert metrics == {"a": 1.5, "b": 2.0} and all(type(v) is float for v in metrics.values())
    assert seen == [(False, False)] and model.training is True
    fake, model, seen = _evaluating(RuntimeError("broken"))
    with pytest.raises(RuntimeError, match="^broken$"):
        loop._Run._evaluate(fake)
    assert model.training is True


def test_evaluate_stops_on_a_non_finite_metric_the_task_does_not_allow():
    """NaN and Inf metrics are named in order with their values (exact message, ``step`` 4); the ones the
    task declares may be non-finite are left out of it, and when all are declared the values come back."""
    metrics = {"a": float("nan"), "b": float("inf"), "c": 1.0, "d": float("-inf")}
    fake, _, _ = _evaluating(metrics)
    with pytest.raises(loop.NonFiniteLossError) as caught:
        loop._Run._evaluate(fake)
    assert (
        str(caught.value) == "the evaluation at step 4 gave a = nan, b = inf, d = -inf"
        and caught.value.step == 4
    )
    fake, _, _ = _evaluating(metrics, allowed=("a", "d"))
    with pytest.raises(loop.NonFiniteLossError, match=r"^the evaluation at step 4 gave b = inf$"):
        loop._Run._evaluate(fake)
    fake, _, _ = _evaluating(metrics, allowed=("a", "b", "d"))
    out = loop._Run._evaluate(fake)
    assert math.isnan(out["a"]) and out["b"] == math.inf and out["c"] == 1.0


def test_one_step_returns_the_batch_loss_and_steps_after_on_backward():
    """``_one_step``: returns the loss of the batch (computed directly before, float32 exact); ``on_backward``
    runs with the gradients there and the parameters not yet moved; the parameters move after."""
    seen = []
    holder = {}

    def on_backward():
        model = holder["fake"].experiment.model
        seen.append(
            (
                all(p.grad is not None for p in model.parameters()),
                _equal_states(model.state_dict(), holder["before"]),
            )
        )

    fake, batch = _stepping(on_backward=on_backward)
    holder["fake"] = fake
    holder["before"] = {k: v.clone() for k, v in fake.experiment.model.state_dict().items()}
    with torch.no_grad():
        expected = float(fake.experiment.loss(batch))
    assert loop._Run._one_step(fake) == expected
    assert seen == [(True, True)]
    assert not _equal_states(fake.experiment.model.state_dict(), holder["before"])
    assert fake.step == 5  # the caller counts the steps


@pytest.mark.parametrize("value,text", [(float("nan"), "nan"), (float("inf"), "inf")], ids=["nan", "inf"])
def test_one_step_refuses_a_non_finite_loss_before_any_backward(value, text):
    """A NaN or Inf loss at step 6: the exact message and ``step = 6``; no backward ran (no gradient) and
    no parameter moved."""
    fake, _ = _stepping(loss_value=value)
    before = {k: v.clone() for k, v in fake.experiment.model.state_dict().items()}
    with pytest.raises(loop.NonFiniteLossError) as caught:
        loop._Run._one_step(fake)
    assert str(caught.value) == f"the training loss is {text} at step 6" and caught.value.step == 6
    assert all(p.grad is None for p in fake.experiment.model.parameters())
    assert _equal_states(fake.experiment.model.state_dict(), before)


def test_one_step_turns_a_non_finite_gradient_refusal_into_a_non_finite_loss_error():
    """``Langevin.step``'s refusal of a non-finite gradient (a ValueError saying ``non-finite``) becomes
    ``step 6: <its message>``; any other ValueError comes out unchanged."""
    refusal = ValueError("the gradient of parameter 0 has 1 non-finite entries (NaN or Inf)")
    fake, _ = _stepping(step_error=refusal)
    with pytest.raises(loop.NonFiniteLossError) as caught:
        loop._Run._one_step(fake)
    assert str(caught.value) == f"step 6: {refusal}" and caught.value.step == 6
    other = ValueError("something else")
    fake, _ = _stepping(step_error=other)
    with pytest.raises(ValueError) as caught:
        loop._Run._one_step(fake)
    assert caught.value is other


def test_a_real_non_finite_gradient_stops_a_run(tmp_path, monkeypatch):
    """A task whose gradient is NaN while its loss is finite (a hook on the backward): the run stops at step
    1 with ``step 1: <Langevin's message>`` and no checkpoint."""

    class NanGrad(_Recording):
        def build(self, data, model, **kwargs):
            experiment = super().build(data, model, **kwargs)

            def poison():
                for p in experiment.model.parameters():
                    p.grad.fill_(float("nan"))

            experiment.on_backward = poison
            return experiment

    monkeypatch.setitem(tasks.TASKS, "nan_grad", NanGrad())
    with pytest.raises(
        loop.NonFiniteLossError, match=r"^step 1: the gradient of parameter 0 .*non-finite"
    ) as caught:
        _run_2(tmp_path / "r", ["task=nan_grad"])
    assert caught.value.step == 1
    assert str(caught.value).endswith(
        "the last checkpoint with finite parameters is none (the run must start again)"
    )


def test_checkpoint_saves_once_a_step_with_the_hash_and_provenance():
    """``_checkpoint``: the lead saves ``_state()`` as step 6 with ``config_sha256`` and the provenance in
    its record; a step already saved is not saved again; non-finite parameters raise the exact message
    (``step`` 6) and save nothing; a rank that is neither the lead nor sharded does nothing at all, even with
    non-finite parameters."""
    fake, states = _checkpointing()
    loop._Run._checkpoint(fake)
    assert fake.checkpoints.saved == [
        ({"marker": 1}, 6, {"config_sha256": "abc123", "commit": "c0ffee", "dirty": False})
    ]
    fake, states = _checkpointing(latest=6)
    loop._Run._checkpoint(fake)
    assert fake.checkpoints.saved == [] and states == []
    fake, states = _checkpointing(latest=4)
    loop._Run._checkpoint(fake)
    assert [s for _, s, _ in fake.checkpoints.saved] == [6]
    fake, states = _checkpointing(finite=False)
    with pytest.raises(loop.NonFiniteLossError) as caught:
        loop._Run._checkpoint(fake)
    assert str(caught.value) == "the parameters are not finite after step 6" and caught.value.step == 6
    assert fake.checkpoints.saved == [] and states == []
    fake, states = _checkpointing(lead=False, finite=False, latest=None)
    assert loop._Run._checkpoint(fake) is None and states == [] and fake.checkpoints.saved == []


def test_sharded_checkpoints_agree_across_ranks(monkeypatch):
    """Sharded particles (another rank emulated): "already saved" is max-reduced and "finite" min-reduced,
    in that order; a rank that is not the lead gathers the state (``_state``) but saves nothing; another
    rank's saved flag skips the save, its non-finite flag raises on this rank."""
    other = {"saved": 0.0, "finite": 1.0}
    ops = []

    def all_reduce_scalar(value, device, op="sum"):
        ops.append(op)
        key = {"max": "saved", "min": "finite"}[op]
        return {"max": max, "min": min}[op](value, other[key])

    monkeypatch.setattr(loop.parallel, "all_reduce_scalar", all_reduce_scalar)
    fake, states = _checkpointing(lead=False, sharded=True)
    loop._Run._checkpoint(fake)
    assert ops == ["max", "min"] and states == [1] and fake.checkpoints.saved == []
    fake, states = _checkpointing(lead=True, sharded=True)
    loop._Run._checkpoint(fake)
    assert states == [1] and [s for _, s, _ in fake.checkpoints.saved] == [6]
    other["saved"] = 1.0
    fake, states = _checkpointing(lead=True, sharded=True)
    loop._Run._checkpoint(fake)
    assert states == [] and fake.checkpoints.saved == []
    other.update(saved=0.0, finite=0.0)
    fake, states = _checkpointing(lead=False, sharded=True)
    with pytest.raises(loop.NonFiniteLossError, match=r"^the parameters are not finite after step 6$"):
        loop._Run._checkpoint(fake)


def test_final_is_the_latest_value_of_each_metric_without_timings_and_statistics(tmp_path):
    """``_final`` of a log written here: the latest value of every key, over all lines (a key of an earlier
    line only is kept), without step, the timing keys, ``optim`` and ``groups``; an empty log gives {}."""
    path = tmp_path / "metrics.jsonl"
    lines = [
        {"step": 2, "time": 1.0, "train_loss": 0.5, "samples_per_s": 3.0, "beta": 0.1, "optim": {"n": 1}},
        {"step": 3, "test_mse": 0.2, "groups": [None], "tokens_per_s": 1.0, "step_time": 0.1},
        {"step": 4, "train_loss": 0.25, "particles_per_s": 2.0, "beta": 0.05},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    fake = SimpleNamespace(log=MetricsLog(path))
    assert loop._Run._final(fake) == {"train_loss": 0.25, "beta": 0.05, "test_mse": 0.2}
    assert loop._Run._final(SimpleNamespace(log=MetricsLog(tmp_path / "none.jsonl"))) == {}


def test_describe_latest_and_status(tmp_path):
    """``_describe_latest``: the latest checkpoint's path, or that there is none; ``_status``: summary.json's
    status."""
    checkpoints = Checkpoints(tmp_path / "checkpoints", keep=5)
    fake = SimpleNamespace(checkpoints=checkpoints, folder=tmp_path)
    assert loop._Run._describe_latest(fake) == "none (the run must start again)"
    checkpoints.save({"x": torch.zeros(1)}, 3)
    checkpoints.save({"x": torch.zeros(1)}, 7)
    assert loop._Run._describe_latest(fake) == str(tmp_path / "checkpoints" / "step-00000007.pt")
    (tmp_path / "summary.json").write_text(json.dumps({"status": "diverged"}))
    assert loop._Run._status(fake) == "diverged"


def test_finish_prints_the_summary_unless_quiet_and_draws_figures_when_asked(tmp_path, monkeypatch, capsys):
    """Not quiet: stdout is exactly ``<folder>: finished 4 steps in <wall_time_s, _display.seconds>`` and the summary
    table of the final metrics; figures on: ``draw_figures`` (a recorder: drawing is tested in test_runs) gets
    the folder, every line and the unit; quiet with figures off: nothing printed, none drawn."""
    drawn = []
    monkeypatch.setattr(loop, "draw_figures", lambda *a: drawn.append(a))
    folder = tmp_path / "loud"
    capsys.readouterr()
    result = _run_2(folder, ["train.figures=true"], quiet=False)
    out = capsys.readouterr().out
    summary = _summary(folder)
    assert out == (
        f"{folder}: finished 4 steps in {seconds(summary['wall_time_s'])}\n{summary_table(summary['final'])}\n"
    )
    ((where, records, unit),) = drawn
    assert (where, records, unit) == (folder, _records(folder), "samples")
    assert result.final == summary["final"]
    drawn.clear()
    _run_2(tmp_path / "quiet")
    assert capsys.readouterr().out == "" and drawn == [] and not (tmp_path / "quiet" / "figures").exists()


def test_track_best_reads_val_and_test_prefixes_and_keeps_the_first_of_equal_values():
    """``_track_best``: ``val_*``/``test_*`` keep their minimum, ints accepted, an equal later value does not
    replace the first (strict comparison); keys with other names (``loss``, ``validation``) and booleans
    (``val_ok``) are ignored."""
    fake = SimpleNamespace(experiment=SimpleNamespace(higher_is_better=()), best={})
    loop._Run._track_best(
        fake, {"step": 1, "val_loss": 2, "test_err": 0.5, "loss": 0.1, "validation": 0.0, "val_ok": True}
    )
    loop._Run._track_best(fake, {"step": 2, "val_loss": 2.0, "test_err": 0.75})
    assert fake.best == {"val_loss": {"value": 2.0, "step": 1}, "test_err": {"value": 0.5, "step": 1}}
    assert type(fake.best["val_loss"]["value"]) is float
    loop._Run._track_best(fake, {"step": 3, "val_loss": 1.0, "test_err": 0.5})
    assert fake.best == {"val_loss": {"value": 1.0, "step": 3}, "test_err": {"value": 0.5, "step": 1}}


def test_another_rank_trains_but_writes_shows_and_prints_nothing(tmp_path, monkeypatch, sinks, capsys):
    """Rank 1 of 2 (the process group, the all-reduces and the barrier emulated): it takes the 4 steps
    (``on_step`` 1 … 4) but makes no folder, its bar is disabled although not quiet, its TensorBoard sink
    disabled although configured, nothing is printed; it returns what ``RunResult.load`` gives for the
    folder (the lead's summary; stubbed here)."""
    monkeypatch.setattr(loop.parallel, "process_group", lambda device: (1, 2, False))
    monkeypatch.setattr(loop.parallel, "all_reduce_scalar", lambda value, device, op="sum": 2 * value)
    monkeypatch.setattr(loop.parallel, "average_gradients", lambda model, world: None)
    barriers = []
    monkeypatch.setattr(loop._Run, "_barrier", lambda self: barriers.append(self.step))
    loaded = []
    monkeypatch.setattr(loop.RunResult, "load", lambda path: (loaded.append(path), "the lead's result")[1])
    folder = tmp_path / "rank1"
    steps_seen = []
    capsys.readouterr()
    result = _run_2(
        folder, ["train.tensorboard=true", "train.figures=true"], quiet=False, on_step=steps_seen.append
    )
    assert result == "the lead's result" and loaded == [folder]
    assert steps_seen == [1, 2, 3, 4] and not folder.exists()
    bars, boards = sinks
    assert bars[0].kwargs["disable"] is True and boards[0].args[1] is False
    assert capsys.readouterr().out == ""
    assert barriers == [0, 4, 4]  # before writing the folder; after the steps; after the summary


def test_barrier_waits_only_with_several_processes(monkeypatch):
    """``_barrier``: ``torch.distributed.barrier`` once with 2 processes, never with 1."""
    import torch.distributed as dist

    calls = []
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: calls.append(a))
    loop._Run._barrier(SimpleNamespace(world=1))
    assert calls == []
    loop._Run._barrier(SimpleNamespace(world=2))
    assert calls == [()]


def test_checkpoint_state_holds_the_values_it_is_given_and_a_copy_of_the_window():
    """``_checkpoint_state``: the step, the model's, optimizer's and batches' states, torch's generator
    state, the elapsed and wall times as given, and a copy of the window (a later change of the running
    window does not reach it)."""
    cfg = check_config(_resolved())
    experiment = loop.build_experiment(cfg, CPU)
    optimizer = build_optimizer(experiment.model, cfg)
    window = {"loss_sum": 1.5, "n": 2, "time": 0.25}
    state = loop._checkpoint_state(experiment, optimizer, 3, window, 1.25, 9.5)
    assert list(state) == ["step", "model", "optimizer", "batches", "torch_rng", "window", "elapsed", "wall"]
    assert (state["step"], state["elapsed"], state["wall"]) == (3, 1.25, 9.5)
    window["n"] += 1
    assert state["window"] == {"loss_sum": 1.5, "n": 2, "time": 0.25}
    assert _equal_states(state["model"], experiment.model.state_dict())
    assert _same(state["batches"], experiment.batches.state_dict())
    assert _same(state["optimizer"], optimizer.state_dict())
    assert torch.equal(state["torch_rng"], torch.get_rng_state())


def test_horizonless_schedule_tables_get_no_t():
    """A ``step`` or ``constant`` β table has no horizon: it reaches the optimizer as that schedule, no ``T``
    added (a ``T`` would be refused as an unknown field); a ``linear`` one gets ``T = train.steps``."""

    for table, expected in (
        ({"kind": "step", "values": [1.0, 0.5], "boundaries": [2.0]}, Step([1.0, 0.5], [2.0])),
        ({"kind": "constant", "value": 0.25}, Constant(0.25)),
        ({"kind": "linear", "start": 1.0, "end": 0.5}, Linear(1.0, 0.5, 4.0)),
    ):
        config = _resolved()
        config["optim"]["beta"] = table
        cfg = check_config(config)
        (group,) = build_optimizer(loop.build_experiment(cfg, CPU).model, cfg).param_groups
        assert group["beta"] == expected and "T" not in table


def test_a_resume_of_a_run_that_saved_no_checkpoint_starts_over_silently(tmp_path, rng_kept):
    """Stopped by an error at step 1 (the first checkpoint is due at 2): the resume warns nothing (nothing
    was damaged), empties the log and runs steps 1 … 4 again, reaching the plain loop's parameters."""
    folder = tmp_path / "r"

    def stop(step):
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="^stop$"):
        _run_2(folder, on_step=stop)
    assert Checkpoints(folder / "checkpoints").steps() == []
    steps_seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        result = _run_2(folder, resume=True, on_step=steps_seen.append)
    assert steps_seen == [1, 2, 3, 4] and result.status == "finished"
    assert [r["step"] for r in _records(folder)] == [2, 4]
    assert _equal_states(Checkpoints(folder / "checkpoints").load(4)["model"], _plain_loop(4)[1][4])
