"""Whole-function value tests for the run machinery and its neighbours (issue 25, held-out mutants).

Covered, each function as a whole (every branch, argument, message and side effect), against answers worked
out here: ``_Run.__init__`` (a fresh run's zeroed state, threads, seed and folder files; the data-parallel
batch split; the sharding refusal; a non-lead rank that writes nothing; the stale-lock notice; the lock
released on failure), ``_Run._restore`` (lead and non-lead ranks, with and without a checkpoint that
verifies, CUDA generator and sharded loaders emulated; the torch seed recomputed with :mod:`hashlib`),
``_Run._write_summary`` (every field of ``summary.json`` worked out by hand), ``TrainConfig.__post_init__``,
``_check_temperatures`` and ``_optimizer_options`` of :mod:`meanfield.runs.schema`, ``Checkpoints.save``
(pruning, the record, a full disk), :mod:`meanfield._io`'s atomic writers (the temporary file's name, what a
failed write leaves), ``sweeps.point_name`` and ``sweep_runs`` (its argument checks, and what it hands each
point and tabulates, the runner emulated), ``studies._reference_values`` and ``convergence_in_m`` (every
argument refusal by its exact message; the fixed-cloud floor, W2² of two halves recomputed from the same
permutation), ``config.to_toml``/``from_dict`` (exact TOML text, ``tomllib`` as the independent reader) and
``shipped.config_name``/``find_config``.

Nothing here is statistical: every expected value is exact (or float64 round-off, stated where used). The
runs are the teacher-student smoke preset cut to 4 steps of 8 particles (well under a second each).
"""

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
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from meanfield import _io, shipped
from meanfield import config as mconfig
from meanfield.config import ConfigError
from meanfield.drift.projections import Clip
from meanfield.drift.schedules import Constant, Cosine, Linear, Step
from meanfield.metrics.wasserstein import Uniform
from meanfield.runs import folder as folder_mod
from meanfield.runs import loop, sweeps
from meanfield.runs import schema as rconfig
from meanfield.runs.folder import (
    Checkpoints,
    DiskFullError,
    MetricsLog,
    RunFolderError,
    remove_temporaries,
)
from meanfield.runs.lock import FolderLock
from meanfield.runs.schema import RunConfig, TrainConfig, build_optimizer, check_config, load_config
from meanfield.runs.sweeps import TableOptions
from meanfield.studies import in_memory as studies

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from _tiny_run import ROOT, TEACHER, TINY  # noqa: E402  (tests/_tiny_run.py)

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


# ======================================================================================================
# _Run._restore
# ======================================================================================================


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


# ======================================================================================================
# _Run.__init__
# ======================================================================================================


def _ranks(monkeypatch, rank: int, world: int) -> None:
    monkeypatch.setattr(loop.parallel, "process_group", lambda device: (rank, world, False))
    monkeypatch.setattr(loop._Run, "_barrier", lambda self: None)


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


def _stale_lock(folder: Path) -> None:
    folder.mkdir(parents=True)
    record = {
        "pid": DEAD_PID,
        "host": socket.gethostname(),
        "since": "2020-01-01T00:00:00+0000",
        "command": ["x"],
    }
    (folder / ".lock").write_text(json.dumps(record) + "\n")


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


# ======================================================================================================
# _Run._write_summary
# ======================================================================================================


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


# ======================================================================================================
# meanfield.runs.schema
# ======================================================================================================


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


def test_train_config_names_the_first_bad_key_in_field_order():
    """Two bad keys: the counts are checked first (``steps`` before ``keep_checkpoints`` before the
    intervals)."""
    with pytest.raises(ValueError, match=r"^train\.steps must be ≥ 1, got 0$"):
        TrainConfig(steps=0, keep_checkpoints=0, eval_every=-1)
    with pytest.raises(ValueError, match=r"^train\.keep_checkpoints must be ≥ 1, got 0$"):
        TrainConfig(keep_checkpoints=0, eval_every=-1)
    with pytest.raises(ValueError, match=r"^train\.eval_every must be ≥ 0 \(0: only at the end\), got -1$"):
        TrainConfig(eval_every=-1, checkpoint_every=-2)


def _temps(optim: dict, steps: int = 5) -> None:
    rconfig._check_temperatures(
        RunConfig(task="teacher_student", optim=optim, train=TrainConfig(steps=steps))
    )


@pytest.mark.parametrize(
    "optim,message",
    [
        ({"beta": -1}, "optim.beta gives β = -1 at step 0"),
        ({"beta": float("nan")}, "optim.beta gives β = nan at step 0"),
        ({"beta": float("inf")}, "optim.beta gives β = inf at step 0"),
        ({"beta": True}, "optim.beta gives β = True at step 0"),
        ({"beta": 1.0, "others": {"beta": -0.5}}, "optim.others.beta gives β = -0.5 at step 0"),
        (
            {"beta": {"kind": "step", "values": [1.0, -2.0], "boundaries": [2.5]}},
            "optim.beta gives β = -2.0 at step 3",
        ),
        (
            {"beta": 0.0, "others": {"beta": {"kind": "linear", "start": 1.0, "end": -1.0}}},
            "optim.others.beta gives β = -0.19999999999999996 at step 3",
        ),
    ],
    ids=["negative", "nan", "inf", "bool", "others", "step_schedule", "others_linear"],
)
def test_a_temperature_below_zero_or_not_finite_at_some_step_is_refused(optim, message):
    """The exact message: the table, the value and the first step where it is bad, and the run's steps
    (0 … 4). A linear schedule from 1 to −1 over T = steps = 5 is 1 − 2k/5: first negative at k = 3
    (−0.2 in floating point: 1 + (−2)·0.6)."""
    with pytest.raises(ConfigError) as caught:
        _temps(optim)
    assert str(caught.value) == (
        f"{message}: a temperature must be a finite number ≥ 0 at every step of the run (0 … 4)"
    )


def test_temperatures_that_stay_valid_pass_and_a_bad_schedule_table_names_its_table():
    """β = 0, a constant schedule, a cosine from 1 to 0 and a step schedule that turns negative only after
    the last step (boundary 5.5 of 5 steps) pass, as does a table without β; a schedule table the schedules
    refuse is ``<table>.beta: <their message>``."""
    for optim in (
        {"beta": 0},
        {"beta": {"kind": "constant", "value": 0.5}},
        {"beta": {"kind": "cosine", "start": 1.0, "end": 0.0}},
        {"beta": {"kind": "step", "values": [1.0, -1.0], "boundaries": [5.5]}},
        {"lr": 0.1},
        {"beta": 1.0, "others": {"lr": 0.1}},
    ):
        _temps(optim)
    with pytest.raises(ConfigError, match=r"^optim\.beta: schedule data needs 'kind' in \["):
        _temps({"beta": {"kind": "bogus"}})
    with pytest.raises(
        ConfigError, match=r"^optim\.others\.beta: schedule data of kind 'constant' needs exactly"
    ):
        _temps({"beta": 1.0, "others": {"beta": {"kind": "constant"}}})


def test_a_long_run_probes_its_schedule_at_100001_evenly_spaced_steps():
    """200,001 steps: the schedule is evaluated at ``round(k·200000/100000) = 2k``, so a step schedule that
    turns negative at step 100,001 (boundary 100,000.5) is first seen bad at step 100,002 (an exhaustive scan
    would say 100,001). Negative control: 100,001 steps are scanned exhaustively and name step 100,000 of a
    boundary at 99,999.5."""
    bad = {"beta": {"kind": "step", "values": [1.0, -1.0], "boundaries": [100_000.5]}}
    with pytest.raises(ConfigError, match=r"^optim\.beta gives β = -1\.0 at step 100002: .* \(0 … 200000\)$"):
        _temps(bad, steps=200_001)
    bad = {"beta": {"kind": "step", "values": [1.0, -1.0], "boundaries": [99_999.5]}}
    with pytest.raises(ConfigError, match=r"^optim\.beta gives β = -1\.0 at step 100000: .* \(0 … 100000\)$"):
        _temps(bad, steps=100_001)


def test_optimizer_options_turn_tables_into_objects_and_leave_the_rest():
    """``_optimizer_options``: a β table becomes its schedule, with ``T = steps`` added unless given or the
    kind has no horizon (constant, step); a projection table becomes its projection; a ``betas`` list a
    tuple; every other value (a list for another key included) is passed through unchanged, and the input
    tables are not modified."""
    beta = {"kind": "cosine", "start": 1.0, "end": 0.001}
    out = rconfig._optimizer_options({"lr": 0.1, "beta": beta}, 50)
    assert out == {"lr": 0.1, "beta": Cosine(1.0, 0.001, 50.0)} and "T" not in beta
    out = rconfig._optimizer_options({"beta": {"kind": "linear", "start": 2.0, "end": 1.0, "T": 7.0}}, 50)
    assert out["beta"] == Linear(2.0, 1.0, 7.0)
    constant = rconfig._optimizer_options({"beta": {"kind": "constant", "value": 0.5}}, 50)["beta"]
    assert constant == Constant(0.5)
    step = {"kind": "step", "values": [1.0, 0.5], "boundaries": [3.0]}
    assert rconfig._optimizer_options({"beta": step}, 50)["beta"] == Step([1.0, 0.5], [3.0])
    out = rconfig._optimizer_options({"projection": {"kind": "clip", "A": 2.0}}, 50)
    assert isinstance(out["projection"], Clip) and out["projection"].to_dict() == {"kind": "clip", "A": 2.0}
    out = rconfig._optimizer_options({"betas": [0.9, 0.999], "momentum": [1, 2], "projection": [3]}, 50)
    assert out == {"betas": (0.9, 0.999), "momentum": [1, 2], "projection": [3]}
    assert type(out["betas"]) is tuple and type(out["momentum"]) is list and type(out["projection"]) is list
    out = rconfig._optimizer_options({"beta": 0.25, "projection": None, "betas": (0.5, 0.6)}, 50)
    assert out == {"beta": 0.25, "projection": None, "betas": (0.5, 0.6)}
    assert rconfig._optimizer_options({}, 50) == {}


# ======================================================================================================
# Checkpoints.save
# ======================================================================================================


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


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT], ids=["ENOSPC", "EDQUOT"])
def test_a_full_disk_while_saving_names_the_file_and_the_latest_intact_checkpoint(
    tmp_path, monkeypatch, code
):
    """The checkpoint file's write fails with ENOSPC or EDQUOT (emulated): a DiskFullError whose message names
    the file, the cause and the latest earlier checkpoint; the new step's record is removed (no record
    without its file) and nothing is pruned (keep = 1 and step 1 is still there). With no earlier checkpoint
    it says so. Negative control: another OSError (EACCES) is raised as it is, its record removed too."""
    ck = Checkpoints(tmp_path / "ck", keep=1)
    ck.save({"step": 1}, 1)

    def failing(code):
        def write_atomic(path, write):
            raise OSError(code, os.strerror(code))

        return write_atomic

    monkeypatch.setattr(folder_mod, "write_atomic", failing(code))
    with pytest.raises(DiskFullError) as caught:
        ck.save({"step": 2}, 2)
    assert str(caught.value) == (
        f"no space left on device writing {ck.path(2)} ({os.strerror(code)}); the earlier checkpoints are "
        f"intact (latest: {ck.path(1)})"
    )
    assert caught.value.errno == errno.ENOSPC
    assert sorted(p.name for p in ck.folder.iterdir()) == ["step-00000001.json", "step-00000001.pt"]
    empty = Checkpoints(tmp_path / "empty", keep=1)
    with pytest.raises(DiskFullError, match=r"; no earlier checkpoint exists$"):
        empty.save({"step": 5}, 5)
    assert list(empty.folder.iterdir()) == []
    monkeypatch.setattr(folder_mod, "write_atomic", failing(errno.EACCES))
    with pytest.raises(OSError) as caught:
        ck.save({"step": 2}, 2)
    assert type(caught.value) is PermissionError and caught.value.errno == errno.EACCES
    assert not ck.record_path(2).exists()


# ======================================================================================================
# meanfield._io
# ======================================================================================================

TMP_NAME = re.compile(r"^\.target\.bin\.[A-Za-z0-9_]+\.tmp$")


def test_write_atomic_writes_through_a_hidden_tmp_file_beside_the_target(tmp_path):
    """While ``write`` runs, the folder holds exactly one new file, ``.target.bin.<random>.tmp`` (the
    ``.*.tmp`` pattern that ``remove_temporaries`` clears after a killed write) and no target; afterwards the
    target holds the bytes and the temporary is gone. The parent folders are created and the path returned.
    An existing target is replaced whole."""
    target = tmp_path / "a" / "b" / "target.bin"
    seen = []

    def write(f):
        seen.append(sorted(p.name for p in target.parent.iterdir()))
        f.write(b"new bytes")

    assert _io.write_atomic(target, write) == target
    ((name,),) = seen
    assert TMP_NAME.match(name), name
    assert target.read_bytes() == b"new bytes"
    assert sorted(p.name for p in target.parent.iterdir()) == ["target.bin"]
    _io.write_atomic(str(target), lambda f: f.write(b"v2"))
    assert target.read_bytes() == b"v2"


def test_the_tmp_file_is_one_that_remove_temporaries_deletes(tmp_path):
    """A second code path for the name: ``remove_temporaries`` run while a write is under way finds and
    deletes exactly its temporary file, so that write cannot rename it and fails (FileNotFoundError), leaving
    no target. Negative control: a file of another name (``target.bin.tmp``, not hidden) is kept."""
    target = tmp_path / "target.bin"
    (tmp_path / "target.bin.tmp").write_text("keep")
    removed = []

    def write(f):
        f.write(b"x")
        removed.extend(remove_temporaries(tmp_path))

    with pytest.raises(FileNotFoundError):
        _io.write_atomic(target, write)
    assert len(removed) == 1 and removed[0].parent == tmp_path and TMP_NAME.match(removed[0].name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target.bin.tmp"]


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


def test_text_and_json_writers_write_utf8_and_strict_indented_json(tmp_path):
    """``write_text_atomic`` writes UTF-8 (β is ``ce b2``); ``write_json_atomic`` writes JSON indented by one
    space with a final newline, NaN/Inf as null (also inside lists and nested dicts, keys made strings)."""
    _io.write_text_atomic(tmp_path / "t.txt", "β\n")
    assert (tmp_path / "t.txt").read_bytes() == b"\xce\xb2\n"
    _io.write_json_atomic(tmp_path / "d.json", {"a": float("nan"), "b": [1, float("inf")], 3: {"c": 2.5}})
    assert (tmp_path / "d.json").read_text() == (
        '{\n "a": null,\n "b": [\n  1,\n  null\n ],\n "3": {\n  "c": 2.5\n }\n}\n'
    )


# ======================================================================================================
# meanfield.runs.sweeps
# ======================================================================================================


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


# ======================================================================================================
# meanfield.studies.in_memory
# ======================================================================================================

EMPTY = torch.zeros(0, dtype=torch.float64)


@pytest.mark.parametrize(
    "reference,limit",
    [(2, 2.0), (0.5, 0.5), (np.float32(0.25), 0.25), (np.int64(-3), -3.0), (torch.tensor(1.5), 1.5)],
    ids=["int", "float", "np_float32", "np_int64", "tensor0d"],
)
def test_reference_values_of_an_exact_limit(reference, limit):
    """A number (Python, NumPy or a 0-d tensor) is the exact limit, as a float, with no reference values."""
    got, values = studies._reference_values(reference, "loss", None)
    assert type(got) is float and got == limit and values.dtype == torch.float64 and values.numel() == 0


@pytest.mark.parametrize(
    "reference,text",
    [(float("inf"), "inf"), (float("nan"), "nan"), (-math.inf, "-inf"), (torch.tensor(float("nan")), "nan")],
    ids=["inf", "nan", "-inf", "tensor_nan"],
)
def test_a_non_finite_exact_limit_is_refused_naming_the_reference(reference, text):
    """The exact message names the argument ``reference`` and the value."""
    with pytest.raises(ValueError) as caught:
        studies._reference_values(reference, "loss", None)
    assert str(caught.value) == f"reference must be finite, got {text}"


def test_reference_values_of_runs_and_their_errors():
    """``None``: no limit, no values. A sequence, an array or a 1-d tensor: the values as float64. A reference
    run's mapping: its scalar of that name, or a series' last column; states with an observable: the
    observable of each run (mean of the states, by hand). The errors: a bool or a string, an empty or a
    non-finite list, a run without the quantity, a mapping without it or states, each with its message."""
    limit, values = studies._reference_values(None, "loss", None)
    assert limit is None and torch.equal(values, EMPTY)
    for ref in ([1.0, 2.0, 4.0], (1, 2, 4), np.array([1.0, 2.0, 4.0]), torch.tensor([1.0, 2.0, 4.0])):
        limit, values = studies._reference_values(ref, "loss", None)
        assert limit is None and torch.equal(values, torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64))
    limit, values = studies._reference_values({"loss": [3.0, 5.0]}, "loss", None)
    assert limit is None and torch.equal(values, torch.tensor([3.0, 5.0], dtype=torch.float64))
    limit, values = studies._reference_values({"loss": [[1.0, 2.0], [3.0, 4.0]]}, "loss", None)
    assert torch.equal(values, torch.tensor([2.0, 4.0], dtype=torch.float64))
    states = torch.tensor([[[1.0], [3.0]], [[2.0], [6.0]], [[0.0], [0.0]]], dtype=torch.float64)  # (3, 2, 1)
    mean = {"m": lambda x: x.mean((1, 2))}
    for ref in (states, {"final": states}):
        limit, values = studies._reference_values(ref, "m", mean)
        assert limit is None and torch.equal(values, torch.tensor([2.0, 4.0, 0.0], dtype=torch.float64))
    for bad, kind in ((True, "bool"), ("1.0", "str")):
        with pytest.raises(TypeError) as caught:
            studies._reference_values(bad, "loss", None)
        assert str(caught.value) == f"reference must be a number, values (R,) or a reference run, got {kind}"
    with pytest.raises(ValueError, match=r"^reference values must not be empty$"):
        studies._reference_values([], "loss", None)
    with pytest.raises(
        ValueError, match=r"^reference has 1 non-finite entries \(NaN or Inf\), the first at index \(1,\)$"
    ):
        studies._reference_values([1.0, float("nan"), 2.0], "loss", None)
    with pytest.raises(
        ValueError, match=r"^the reference run has no observable 'loss'; it has \['m', 'x'\]$"
    ):
        studies._reference_values({"final": states, "x": [1.0, 2.0, 3.0]}, "loss", mean)
    with pytest.raises(
        TypeError, match=r"^with quantity='loss', reference must be the exact limit .*got dict$"
    ):
        studies._reference_values({"other": [1.0, 2.0]}, "loss", None)


def _sample(M: int, reps: int) -> torch.Tensor:
    """States far from the reference (shifted by 1000): distances ≫ any floor, so no floor warning."""
    return 1000.0 + torch.randn(reps, M, 1, generator=torch.Generator().manual_seed(M), dtype=torch.float64)


def _w2_squared_1d(a: torch.Tensor, b: torch.Tensor) -> float:
    """W2² of two equal-size 1-d empirical laws: the mean squared difference of the sorted points."""
    return float(((a.flatten().sort().values - b.flatten().sort().values) ** 2).mean())


@pytest.mark.parametrize("n", [3, 5, 8], ids=["N3", "N5", "N8"])
def test_the_floor_of_a_fixed_cloud_is_w2_between_two_equal_random_halves(n):
    """A fixed cloud of N points (odd N included): the floor is W2² between ``reference[perm[:N//2]]`` and
    ``reference[perm[N//2 : 2·(N//2)]]`` (an odd cloud's last permuted point left out), ``perm`` the first
    draw of the study's generator (replayed here from a clone), computed here from sorted points, and the same
    for every M; shape (len(Ms), 1). For N = 3 with points {0, 1, 3} the floor is a squared gap (1, 4 or 9);
    halves of 1 and 2 points would give 2.5, 5 or 6.5. Tolerance: float64 round-off (1e-12)."""
    reference = torch.tensor([0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 63.0, 127.0][:n], dtype=torch.float64)[:, None]
    g = torch.Generator().manual_seed(11)
    replay = torch.Generator()
    replay.set_state(g.get_state())
    perm = torch.randperm(n, generator=replay)
    half = n // 2
    expected = _w2_squared_1d(reference[perm[:half]], reference[perm[half : 2 * half]])
    result = studies.convergence_in_m(
        _sample, [2, 4, 8], reps=3, reference=reference, generator=g, progress=False
    )
    assert result.floor.shape == (3, 1)
    assert torch.allclose(result.floor, torch.full((3, 1), expected, dtype=torch.float64), rtol=0, atol=1e-12)
    if n == 3:
        assert expected in (1.0, 4.0, 9.0)


def test_the_floor_halves_given_to_a_custom_metric_are_disjoint_and_equal_in_size():
    """With a callable metric the floor call receives ``(1, N//2, d)`` halves: for N = 5, rows
    ``perm[0:2]`` and ``perm[2:4]`` of the cloud (perm replayed from a clone of the generator); the
    distances to the cloud get the (N, d) cloud itself. The distances (102, 104) are below 3× that floor
    (102) at both M, which the warning lists. Negative control: the replayed permutation's last
    row is in neither half."""
    reference = torch.arange(10.0, dtype=torch.float64).reshape(5, 2)
    g = torch.Generator().manual_seed(3)
    replay = torch.Generator()
    replay.set_state(g.get_state())
    perm = torch.randperm(5, generator=replay)
    calls = []

    def metric(x, y):
        calls.append((x.clone(), y.clone()))
        return torch.full((x.shape[0],), 100.0 + x.shape[1], dtype=torch.float64)

    def sample(M, reps):
        return torch.ones(reps, M, 2, dtype=torch.float64)

    with pytest.warns(RuntimeWarning) as caught:
        result = studies.convergence_in_m(
            sample, [2, 4], reps=2, reference=reference, generator=g, metric=metric, progress=False
        )
    assert [str(w.message) for w in caught if "floor" in str(w.message)] == [
        "the mean distance is below 3× the reference floor at M = [2, 4]: the slope there measures the "
        "reference as much as μ_M (use a larger reference)"
    ]
    *distance_calls, (a, b) = calls
    assert [tuple(x.shape) for x, _ in distance_calls] == [(2, 2, 2), (2, 4, 2)]
    assert all(torch.equal(y, reference) for _, y in distance_calls)
    assert torch.equal(a, reference[perm[:2]].unsqueeze(0)) and torch.equal(
        b, reference[perm[2:4]].unsqueeze(0)
    )
    assert not any(torch.equal(row, reference[perm[4]]) for row in torch.cat([a[0], b[0]]))
    assert result.method == "custom" and torch.equal(
        result.floor, torch.full((2, 1), 102.0, dtype=torch.float64)
    )


def _states(M: int, reps: int) -> torch.Tensor:
    return torch.rand(reps, M, 1, generator=torch.Generator().manual_seed(M), dtype=torch.float64)


def _mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean((1, 2))


_EST = "['exact', 'reference', 'fit', 'differences']"
_MET = "['w2_squared', 'w2', 'w1']"
_QUANTITY = {
    "quantity": "m",
    "observables": {"m": _mean},
    "sample": lambda M, reps: {"final": _states(M, reps)},
}
_STUDY_ERRORS = [
    ({"sample": "uniform"}, TypeError, "sample must be a callable (M, reps) -> (reps, M, d), got str"),
    ({"Ms": "48"}, TypeError, "Ms must be a sequence of numbers of particles, got str"),
    ({"Ms": 5}, TypeError, "Ms must be a sequence of numbers of particles, got int"),
    ({"Ms": [8]}, ValueError, "Ms must be at least 2 distinct increasing integers, got [8]"),
    ({"Ms": [16, 8]}, ValueError, "Ms must be at least 2 distinct increasing integers, got [16, 8]"),
    ({"Ms": [4, 4, 8]}, ValueError, "Ms must be at least 2 distinct increasing integers, got [4, 4, 8]"),
    ({"Ms": [8, 8.5]}, TypeError, "Ms[i] must be an int, got float"),
    ({"Ms": [0, 4]}, ValueError, "Ms[i] must be ≥ 1, got 0"),
    ({"reps": 1}, ValueError, "reps must be ≥ 2, got 1"),
    ({"reps": 2.0}, TypeError, "reps must be an int, got float"),
    ({"n_boot": 0}, ValueError, "n_boot must be ≥ 1, got 0"),
    ({"level": 1.5}, ValueError, "level must be in (0, 1), got 1.5"),
    ({"level": 0.0}, ValueError, "level must be in (0, 1), got 0.0"),
    ({"level": float("nan")}, ValueError, "level must be finite, got nan"),
    ({"level": "x"}, TypeError, "level must be a real number, got str"),
    (
        {"generator": None},
        TypeError,
        "generator must be a torch.Generator, an int seed (Python or numpy integer), got NoneType",
    ),
    (
        {"observables": [1]},
        TypeError,
        "observables must be a mapping name -> callable (states (B, M, d) -> (B,))",
    ),
    (
        {"observables": {"a": 1}},
        TypeError,
        "observables must be a mapping name -> callable (states (B, M, d) -> (B,))",
    ),
    ({"quantity": 3}, TypeError, "quantity must be the name of an observable (str), got int"),
    ({"estimator": "bogus"}, ValueError, f"estimator must be 'auto' or one or more of {_EST}, got 'bogus'"),
    ({"estimator": ()}, ValueError, f"estimator must be 'auto' or one or more of {_EST}, got ()"),
    (
        {"estimator": ["exact", 3]},
        ValueError,
        f"estimator must be 'auto' or one or more of {_EST}, got ['exact', 3]",
    ),
    ({"metric": "w3"}, ValueError, f"metric must be one of {_MET} or a callable, got 'w3'"),
    ({"metric": 3}, TypeError, f"metric must be a name in {_MET} or a callable, got int"),
    (
        {**_QUANTITY, "metric": "w2"},
        ValueError,
        "metric applies to a distance study; with quantity='m' leave it out",
    ),
    ({"reference_size": 0}, ValueError, "reference_size must be ≥ 1, got 0"),
    ({"floor_reps": 0}, ValueError, "floor_reps must be ≥ 1, got 0"),
    (
        {"reference": None},
        TypeError,
        "reference is required for a distance study (or name an observable with quantity=)",
    ),
    (
        {"metric": lambda x, y: x.sum((1, 2))},
        TypeError,
        "metric must be 'w2_squared', 'w2' or 'w1' with an exact law reference, got a callable",
    ),
    (
        {"reference": torch.zeros(1, 1, dtype=torch.float64)},
        ValueError,
        "a reference cloud must have shape (N, d) with N ≥ 2, got (1, 1)",
    ),
    (
        {"reference": torch.zeros(3, dtype=torch.float64)},
        ValueError,
        "a reference cloud must have shape (N, d) with N ≥ 2, got (3,)",
    ),
    (
        {"reference": torch.tensor([[0.0], [math.nan]], dtype=torch.float64)},
        ValueError,
        "reference has 1 non-finite entries (NaN or Inf), the first at index (1, 0)",
    ),
    (
        {"reference": "uniform"},
        TypeError,
        "reference must be a Law1d, a tensor (N, d) or a sampler (n, generator) -> (n, d), got str",
    ),
    (
        {"reference_size": 10},
        ValueError,
        "reference_size applies to a sampler reference only, got a law reference",
    ),
    (
        {"floor_reps": 2, "reference": torch.zeros(4, 1, dtype=torch.float64)},
        ValueError,
        "floor_reps applies to a sampler reference only, got a cloud reference",
    ),
    (
        {**_QUANTITY, "reference": None, "reference_size": 3},
        ValueError,
        "reference_size applies to a sampler reference only, got a quantity reference",
    ),
    (
        {"estimator": "reference"},
        ValueError,
        "estimator='reference' needs ≥ 2 reference values (independent reference runs) of the observable "
        "named by quantity=, got a distance study",
    ),
    (
        {**_QUANTITY, "reference": 1.0, "estimator": "reference"},
        ValueError,
        "estimator='reference' needs ≥ 2 reference values (independent reference runs) of the observable "
        "named by quantity=, got 0",
    ),
    (
        {**_QUANTITY, "reference": None, "estimator": "exact"},
        ValueError,
        "estimator='exact' needs a reference (the limit, or reference values)",
    ),
    (
        {"sample": lambda M, reps: _states(M, reps)[..., 0]},
        ValueError,
        "sample(M, reps) must return shape (reps, M, d) = (3, 4, d), got (3, 4)",
    ),
    (
        {"sample": lambda M, reps: _states(M, reps).expand(reps, M, M // 4)},
        ValueError,
        "sample(M, reps) must return shape (reps, M, d) = (3, 8, 1), got (3, 8, 2)",
    ),
    (
        {"sample": lambda M, reps: {"loss": torch.ones(reps, dtype=torch.float64)}},
        ValueError,
        "sample(M, reps) returned no states ('final'): a distance needs them",
    ),
    (
        {"reference": torch.zeros(4, 2, dtype=torch.float64)},
        ValueError,
        "reference has d=2, sample(M, reps) has d=1",
    ),
    (
        {"reference": lambda n, g: torch.zeros(n, 2, dtype=torch.float64)},
        ValueError,
        "reference(n, generator) has d=2, sample(M, reps) has d=1",
    ),
    (
        {"reference": lambda n, g: torch.zeros(n + 1, 1, dtype=torch.float64)},
        ValueError,
        "reference(n, generator) must return shape (n, d) = (36, d), got (37, 1)",
    ),
    (
        {
            "quantity": "q",
            "reference": None,
            "sample": lambda M, reps: {"final": _states(M, reps), "a": torch.ones(reps, dtype=torch.float64)},
        },
        ValueError,
        "quantity 'q' is not an observable of sample(M, reps); it returned ['a']",
    ),
    (
        {
            "quantity": "a",
            "reference": None,
            "sample": lambda M, reps: {("a" if M == 4 else "b"): torch.ones(reps, dtype=torch.float64)},
        },
        ValueError,
        "sample(M, reps) returned other observables at M = 8 than at M = 4",
    ),
    (
        {
            "quantity": "s",
            "reference": None,
            "sample": lambda M, reps: {"t": [0.0, M / 4], "s": torch.ones(reps, 2, dtype=torch.float64)},
        },
        ValueError,
        "the series at M = 8 are saved at other times than at M = 4",
    ),
]


@pytest.mark.parametrize(
    "kwargs,error,message", _STUDY_ERRORS, ids=[f"case{i:02d}" for i in range(len(_STUDY_ERRORS))]
)
def test_convergence_in_m_refuses_each_bad_argument_with_its_exact_message(kwargs, error, message):
    """Every refusal of ``convergence_in_m`` against its message written out here (type and whole text): the
    sampler, the sizes, reps, n_boot, level, generator, observables, quantity, estimator, metric, the
    reference of each kind and the options that only a sampler takes, the shapes a sampler returns (3
    replicates at M = 4, 8; a sampled reference of 4 points drawn 3 + 2·3 = 9 times is 36 rows), and the
    observables and times that must agree across M. Base study: uniform states against ``Uniform()``."""
    args = {
        "sample": _states,
        "Ms": [4, 8],
        "reps": 3,
        "reference": Uniform(),
        "generator": 0,
        "progress": False,
        **kwargs,
    }
    with pytest.raises(error) as caught:
        studies.convergence_in_m(args.pop("sample"), args.pop("Ms"), **args)
    assert str(caught.value) == message


def test_a_single_reference_value_warns_that_it_is_treated_as_exact():
    """One reference value (``[-1.0]``): the exact warning; the study runs with the ``exact`` estimator and
    that value as its limit. Negative control: two values warn nothing of the kind."""

    def study(reference: list[float]) -> studies.StudyResult:
        return studies.convergence_in_m(
            lambda M, reps: {"final": _states(M, reps)},
            [4, 8],
            reps=3,
            generator=0,
            progress=False,
            quantity="m",
            observables={"m": _mean},
            reference=reference,
        )

    with pytest.warns(RuntimeWarning) as caught:
        result = study([-1.0])
    assert (
        "one reference value: its fluctuation is in no interval (the reference is treated as exact); give ≥ 2 "
        "independent reference runs (estimator 'reference') or use estimator='fit'"
    ) in [str(w.message) for w in caught]
    assert result.estimator == "exact" and result.limit == -1.0
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        study([-1.0, -1.2])
    assert not [w for w in seen if "one reference value" in str(w.message)]


# ======================================================================================================
# meanfield.config
# ======================================================================================================


@pytest.mark.parametrize(
    "config,header,text",
    [
        ({"Xa": 1}, "", "Xa = 1\n"),
        ({"X": {"y": 2}}, "", "[X]\ny = 2\n"),
        ({}, "", "\n"),
        ({"x": 1}, "a\n\nb", "# a\n#\n# b\nx = 1\n"),
        ({"t": {"k": 1}}, "h", "# h\n\n[t]\nk = 1\n"),
        ({"a": None, "b": 1}, "", "b = 1\n"),
        ({"t": {"x": 1}, "a": 2}, "", "a = 2\n\n[t]\nx = 1\n"),
        ({"a": {"b": {"c": 1}}}, "", "[a.b]\nc = 1\n"),
        ({"a": {}}, "", "[a]\n"),
        ({"a": {"x": 1, "b": {"c": 2}}}, "", "[a]\nx = 1\n\n[a.b]\nc = 2\n"),
        ({"a b": {"c.d": 1}}, "", '["a b"]\n"c.d" = 1\n'),
        ({"XX": "X\n", "s": [1, 2.5, True]}, "", 'XX = "X\\n"\ns = [1, 2.5, true]\n'),
    ],
    ids=[
        "x_key",
        "x_table",
        "empty",
        "header",
        "header_table",
        "none",
        "scalars_first",
        "only_subtables",
        "empty_table",
        "nested",
        "quoted",
        "string_list",
    ],
)
def test_to_toml_text_exactly(config, header, text):
    """The exact TOML text: header lines as comments (an empty line as ``#``), scalars before tables, a table
    header only when the table has scalars or no subtables, dotted and quoted keys, ``None`` left out, and the
    leading newline of a first table removed (only newlines: a key starting with ``X`` is kept). Every
    text reads back with :mod:`tomllib` as the configuration without its ``None`` values."""
    written = mconfig.to_toml(config, header=header)
    assert written == text
    assert tomllib.loads(written) == {k: v for k, v in config.items() if v is not None}


@dataclass
class _Inner:
    n: int = 1


@dataclass
class _Outer:
    name: str
    rate: float = 0.5
    opt: int = 3
    flag: bool = False
    sizes: tuple[int, ...] = ()
    inner: _Inner = field(default_factory=_Inner)


def test_from_dict_reads_every_field_given_after_ones_left_at_their_defaults():
    """Keys after fields left out are still read (``flag``, ``sizes`` and ``inner`` after ``rate``/``opt``
    missing); an int for a float field is stored as a float, a list for a tuple field as a tuple, a sub-table
    as its dataclass. Negative control: the defaults when nothing but the required key is given."""
    got = mconfig.from_dict(_Outer, {"name": "x", "flag": True, "sizes": [1, 2], "inner": {"n": 5}})
    assert got == _Outer(name="x", flag=True, sizes=(1, 2), inner=_Inner(5)) and type(got.sizes) is tuple
    got = mconfig.from_dict(_Outer, {"name": "x", "rate": 2})
    assert got.rate == 2.0 and type(got.rate) is float and got.opt == 3
    assert mconfig.from_dict(_Outer, {"name": "y"}) == _Outer(name="y")
    train = mconfig.from_dict(TrainConfig, {"figures": False}, "train")
    assert train == TrainConfig(figures=False)


@dataclass
class _Nested:
    inner: _Inner
    name: str
    sizes: tuple[int, ...] = ()
    rate: float = 1.0


def test_from_dict_reads_the_fields_after_a_nested_table():
    """A sub-table first, then more fields: every one after it is read too (the required ``name``, the
    list made a tuple, the int made a float), in the order of the dataclass. A missing sub-table is named
    with its dataclass; a wrong value inside it with its dotted key."""
    got = mconfig.from_dict(_Nested, {"inner": {"n": 2}, "name": "b", "sizes": [3, 4], "rate": 2})
    assert got == _Nested(_Inner(2), "b", (3, 4), 2.0)
    assert type(got.sizes) is tuple and type(got.rate) is float
    assert mconfig.from_dict(_Nested, {"inner": {}, "name": "c"}) == _Nested(_Inner(1), "c")
    with pytest.raises(ConfigError) as caught:
        mconfig.from_dict(_Nested, {"name": "c"}, "t")
    assert str(caught.value) == "missing key 't.inner' (_Inner)"
    with pytest.raises(ConfigError) as caught:
        mconfig.from_dict(_Nested, {"inner": {"n": 1.5}, "name": "c"}, "t")
    assert str(caught.value) == "t.inner.n must be an integer, got 1.5"


def test_from_dict_errors_name_the_key_the_value_and_the_type():
    """Each refusal with its exact message: a missing required key (with ``where``), a non-table, an
    unknown key (the valid keys sorted and the nearest one), a wrong type (also in a sub-table, a bool for an
    int), and a dataclass's own check prefixed with where it is."""
    cases = [
        ((_Outer, {}), "missing key 'name' (a string)"),
        ((_Outer, {}, "t"), "missing key 't.name' (a string)"),
        ((_Outer, [1]), "the configuration must be a table, got [1]"),
        ((_Outer, 3, "t"), "t must be a table, got 3"),
        (
            (_Outer, {"name": "x", "nam": 1}),
            "unknown key 'nam'; the keys allowed in the top level are flag, inner, name, opt, rate, sizes; "
            "did you mean 'name'?",
        ),
        ((_Outer, {"name": 1}), "name must be a string, got 1"),
        ((_Outer, {"name": "x", "inner": {"n": "a"}}), "inner.n must be an integer, got 'a'"),
        ((_Outer, {"name": "x", "opt": True}), "opt must be an integer, got True"),
        ((_Outer, {"name": "x", "sizes": [1, "b"]}), "sizes must be a list of an integer, got [1, 'b']"),
        ((TrainConfig, {"steps": 0}, "train"), "train: train.steps must be ≥ 1, got 0"),
        (
            (TrainConfig, {"eval_every": -1}),
            "configuration: train.eval_every must be ≥ 0 (0: only at the end), got -1",
        ),
    ]
    for args, message in cases:
        with pytest.raises(ConfigError) as caught:
            mconfig.from_dict(*args)
        assert str(caught.value) == message


# ======================================================================================================
# meanfield.shipped
# ======================================================================================================


def test_config_name_drops_only_a_last_config_component(tmp_path):
    """The name is the path under the root without its suffix, a *last* ``config`` read as its folder:
    ``a.toml`` → ``a``, ``char_lm/config.toml`` → ``char_lm``, ``a/b/config.toml`` → ``a/b``,
    ``a/config/x.toml`` → ``a/config/x``, a bare ``config.toml`` → ``config``; by default under the shipped
    experiments folder."""
    root = tmp_path / "experiments"
    cases = {
        "a.toml": "a",
        "config.toml": "config",
        "char_lm/config.toml": "char_lm",
        "a/b/config.toml": "a/b",
        "a/config/x.toml": "a/config/x",
        "a/config/config.toml": "a/config",
        "particle_attention/toy.toml": "particle_attention/toy",
    }
    for rel, name in cases.items():
        assert shipped.config_name(root / rel, root) == name, rel
    assert shipped.config_name(shipped.experiments_dir() / "char_lm" / "config.toml") == "char_lm"


def test_find_config_prefers_a_file_names_a_shipped_one_and_says_what_is_missing(tmp_path, monkeypatch):
    """A file that exists wins (even one named like a shipped configuration); a shipped name gives its file
    and the name; a missing ``.toml`` path and an unknown name are refused with the exact messages (the
    shipped names listed, found here by globbing ``experiments/*/*.toml``)."""
    monkeypatch.chdir(tmp_path)
    Path("char_lm").write_text("task = 'x'\n")
    assert shipped.find_config("char_lm") == (Path("char_lm"), None)
    monkeypatch.chdir(ROOT)
    assert shipped.find_config("char_lm") == (
        shipped.experiments_dir() / "char_lm" / "config.toml",
        "char_lm",
    )
    assert shipped.find_config(TEACHER) == (TEACHER, None)
    for arg in ("missing/nope.toml", Path("missing/nope.toml")):
        with pytest.raises(ConfigError) as caught:
            shipped.find_config(arg)
        assert str(caught.value) == (
            "configuration file missing/nope.toml does not exist; the shipped configurations are run by name "
            "(meanfield run --list)"
        )
    root = shipped.experiments_dir()
    names = sorted(
        str(p.relative_to(root).with_suffix("")).removesuffix("/config") for p in root.glob("*/*.toml")
    )
    with pytest.raises(shipped.UnknownConfig) as caught:
        shipped.find_config("nope")
    assert str(caught.value) == (
        f"no configuration file or shipped configuration named 'nope'; shipped: {', '.join(names)} "
        "(meanfield run --list), or pass the path of a TOML file"
    )
