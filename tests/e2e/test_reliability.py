"""Runs that cannot corrupt or silently lose results (issue 24): each fault made for real — a second process on
one folder, flipped and truncated checkpoint bytes, SIGTERM, a damaged metrics line, other code on resume, a
folder without its config, a full disk (a real tmpfs where the machine allows), a NaN evaluation, a killed
write's temporary file — and what the run does about it. Each test has its negative control: the same run
without the fault behaves as before (and, where it matters, equals the uninterrupted run bit for bit).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from meanfield import cli
from meanfield.config import ConfigError
from meanfield.runs import (
    TIMING_KEYS,
    Checkpoints,
    CorruptCheckpointError,
    DiskFullError,
    FolderLock,
    FolderLocked,
    MetricsLog,
    NonFiniteLossError,
    RunFolderError,
    RunInterrupted,
    RunResult,
    run,
)

ROOT = Path(__file__).resolve().parents[2]
TEACHER = ROOT / "experiments" / "teacher_student" / "config.toml"
SMALL = ["train.steps=24", "train.checkpoint_every=5", "train.keep_checkpoints=3", "train.log_every=3"]


def _deterministic(records):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records]


def _same_run(a: Path, b: Path) -> bool:
    sa, sb = Checkpoints(a / "checkpoints").load()["model"], Checkpoints(b / "checkpoints").load()["model"]
    return (
        sa.keys() == sb.keys()
        and all(torch.equal(sa[k], sb[k]) for k in sa)
        and _deterministic(RunResult.load(a).metrics) == _deterministic(RunResult.load(b).metrics)
    )


def _stop_at(step_to_stop: int):
    def on_step(step: int) -> None:
        if step == step_to_stop:
            raise RuntimeError("stop")

    return on_step


def _stopped(folder: Path, at: int = 13) -> Path:
    """A run of SMALL stopped by an error after step ``at`` (checkpoints 5 and 10 when ``at`` = 13)."""
    with pytest.raises(RuntimeError, match="stop"):
        run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True, on_step=_stop_at(at))
    return folder


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("reliability") / "full"
    assert run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True).status == "finished"
    return folder


def _meanfield(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "meanfield", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the condition was not reached")
        time.sleep(0.05)


def _steps_logged(folder: Path) -> int:
    path = folder / "metrics.jsonl"
    if not path.exists():
        return 0
    with contextlib.suppress(RunFolderError):
        return max((r["step"] for r in MetricsLog(path).read()), default=0)
    return 0


# -- 1. one writer per folder ------------------------------------------------------------------------------


def test_a_folder_lock_refuses_a_second_holder_and_names_the_first(tmp_path):
    with FolderLock(tmp_path / "run"):
        with pytest.raises(FolderLocked, match=rf"in use by another run: pid {os.getpid()}"):
            FolderLock(tmp_path / "run").acquire()
    with FolderLock(tmp_path / "run") as lock:  # negative control: released on exit, free again
        assert lock.held and lock.stale is None


def test_a_lock_naming_another_host_is_not_taken_over(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ".lock").write_text(json.dumps({"pid": 1, "host": "elsewhere.example", "since": "then"}))
    with pytest.raises(FolderLocked, match=r"another host: pid 1 on elsewhere\.example.*remove .*\.lock"):
        FolderLock(folder).acquire()
    (folder / ".lock").write_text(json.dumps({"pid": 1, "host": "elsewhere.example", "released": "now"}))
    with FolderLock(folder) as lock:  # a released record is no holder
        assert lock.held


def test_a_run_inside_a_run_on_the_same_folder_is_refused_and_writes_nothing(tmp_path):
    """Two runs on one folder (here the second starts while the first is at step 3, in the same process: the
    lock is per open file, so this is what a second process meets too)."""
    folder = tmp_path / "one"
    refused = []

    def second(step: int) -> None:
        if step == 3:
            with pytest.raises(FolderLocked, match="in use by another run"):
                run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True, resume=True)
            refused.append(step)

    run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True, on_step=second)
    assert refused == [3]
    records = RunResult.load(folder).metrics
    assert [r["step"] for r in records] == sorted({r["step"] for r in records})  # no duplicates, in order


@pytest.mark.slow
def test_two_processes_on_one_fresh_folder_one_is_refused_and_the_lock_of_a_killed_one_is_stale(tmp_path):
    folder = tmp_path / "race"
    long = [
        "--preset",
        "smoke",
        "--set",
        "train.steps=200000",
        "--set",
        "train.checkpoint_every=0",
        "--quiet",
    ]
    first = _meanfield("run", str(TEACHER), "--out", str(folder), *long)
    try:
        _wait_for(lambda: _steps_logged(folder) >= 10)
        second = _meanfield("run", str(TEACHER), "--out", str(folder), "--resume", *long)
        _, err = second.communicate(timeout=120)
        assert second.returncode == 2, err
        assert err.count("\n") == 1 and f"in use by another run: pid {first.pid}" in err
        first.kill()  # SIGKILL: no handler runs, the lock record stays, unreleased
        first.wait(timeout=30)
        assert "released" not in json.loads((folder / ".lock").read_text())
        third = _meanfield("run", str(TEACHER), "--out", str(folder), "--resume", *long[:-1])

        def third_is_training() -> (
            bool
        ):  # its train() wrote environment.json, keeping the first's as 'earlier'
            with contextlib.suppress(OSError, ValueError):
                return bool(json.loads((folder / "environment.json").read_text()).get("earlier"))
            return False

        _wait_for(third_is_training)  # negative control: a dead holder's lock does not block
        _wait_for(lambda: _steps_logged(folder) >= 10)
        third.send_signal(signal.SIGTERM)
        out, err = third.communicate(timeout=60)
        assert third.returncode == 143, err
        assert "taken over" in out and RunResult.load(folder).status == "interrupted"
    finally:
        for p in (first,):
            if p.poll() is None:
                p.kill()


# -- 2. checkpoint integrity and fallback -------------------------------------------------------------------


def _flip_tensor_bytes(path: Path, n: int = 16) -> None:
    """Overwrite ``n`` bytes of tensor data in the middle of the largest stored tensor (a zip entry 'data/…')."""
    import zipfile

    with zipfile.ZipFile(path) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with path.open("r+b") as f:
        f.seek(info.header_offset)
        header = f.read(30)
        name_len, extra_len = int.from_bytes(header[26:28], "little"), int.from_bytes(header[28:30], "little")
        f.seek(info.header_offset + 30 + name_len + extra_len + info.file_size // 2)
        f.write(os.urandom(n))


def test_flipped_tensor_bytes_load_silently_in_torch_but_not_in_checkpoints(tmp_path):
    folder = _stopped(tmp_path / "flip")
    checkpoints = Checkpoints(folder / "checkpoints")
    _flip_tensor_bytes(checkpoints.path(10))
    torch.load(checkpoints.path(10), weights_only=True)  # the fault is real: torch itself sees nothing
    with pytest.raises(CorruptCheckpointError, match=r"step-00000010\.pt is damaged: its SHA-256 differs"):
        checkpoints.load(10)
    checkpoints.load(5)  # negative control: the untouched one verifies


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_a_damaged_latest_checkpoint_is_set_aside_and_the_run_resumes_from_the_previous(
    damage, uninterrupted, tmp_path
):
    folder = _stopped(tmp_path / damage)
    path = Checkpoints(folder / "checkpoints").path(10)
    if damage == "flip":
        _flip_tensor_bytes(path)
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        path.write_bytes(b"")
    with pytest.warns(
        UserWarning, match=r"step-00000010\.pt is damaged.*moved to .*corrupt.*earlier checkpoint"
    ):
        result = run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True, resume=True)
    assert result.status == "finished"
    assert (folder / "checkpoints" / "corrupt" / "step-00000010.pt").exists()
    assert _same_run(uninterrupted, folder)  # resumed from step 5: still the uninterrupted run, bit for bit


def test_an_undamaged_resume_warns_nothing(uninterrupted, tmp_path, recwarn):
    folder = _stopped(tmp_path / "clean")
    run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True, resume=True)
    assert not [w for w in recwarn if "damaged" in str(w.message) or "other code" in str(w.message)]
    assert not (folder / "checkpoints" / "corrupt").exists() and _same_run(uninterrupted, folder)


def test_checkpoints_carry_their_step_config_hash_and_provenance(tmp_path):
    folder = _stopped(tmp_path / "meta")
    record = Checkpoints(folder / "checkpoints").record(10)
    env = json.loads((folder / "environment.json").read_text())
    assert record["step"] == 10 and len(record["sha256"]) == 64
    assert record["bytes"] == Checkpoints(folder / "checkpoints").path(10).stat().st_size
    assert record["source_sha256"] == env["source_sha256"] and record["torch"] == torch.__version__
    assert record["config_sha256"] == json.loads((folder / "run.json").read_text())["config_sha256"]


# -- 3. SIGTERM ------------------------------------------------------------------------------------------------


def test_sigterm_is_a_clean_stop_with_a_checkpoint(uninterrupted, tmp_path):
    folder = tmp_path / "term"

    def terminate_at_7(step: int) -> None:
        if step == 7:
            os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RunInterrupted, match="SIGTERM at step 7") as caught:
        run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True, on_step=terminate_at_7)
    assert caught.value.signum == signal.SIGTERM
    assert (
        Checkpoints(folder / "checkpoints").latest() == 7 and RunResult.load(folder).status == "interrupted"
    )
    assert signal.getsignal(signal.SIGTERM) is before  # handler put back
    run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True, resume=True)
    assert _same_run(uninterrupted, folder)


@pytest.mark.slow
def test_sigterm_to_a_meanfield_run_process_exits_143_interrupted(tmp_path):
    folder = tmp_path / "term"
    p = _meanfield(
        "run",
        str(TEACHER),
        "--out",
        str(folder),
        "--preset",
        "smoke",
        "--set",
        "train.steps=200000",
        "--quiet",
    )
    try:
        _wait_for(lambda: _steps_logged(folder) >= 10)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, err
    summary = RunResult.load(folder)
    assert summary.status == "interrupted" and Checkpoints(folder / "checkpoints").latest() == summary.step
    assert "SIGTERM" in err and "Traceback" not in err


# -- 4. metrics.jsonl -------------------------------------------------------------------------------------------


def test_a_torn_last_metrics_line_is_dropped_and_a_damaged_middle_line_stops_the_resume(
    uninterrupted, tmp_path
):
    folder = _stopped(tmp_path / "torn")
    log = folder / "metrics.jsonl"
    log.write_text(log.read_text() + '{"step": 13, "train_lo')  # a crash in the middle of a write
    run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True, resume=True)
    assert _same_run(uninterrupted, folder)  # negative control: the torn end is the partial write, dropped

    folder = _stopped(tmp_path / "damaged")
    log = folder / "metrics.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    lines[1] = lines[1][:10] + "\x00garbage\n"
    log.write_text("".join(lines))
    with pytest.raises(
        RunFolderError, match=r"metrics\.jsonl, line 2, is not a JSON record.*deleting that line"
    ):
        run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True, resume=True)
    assert log.read_text() == "".join(lines)  # nothing rewritten


# -- 5. provenance ----------------------------------------------------------------------------------------------


def test_a_resume_under_other_code_warns_and_keeps_the_earlier_record(tmp_path):
    folder = _stopped(tmp_path / "prov")
    path = folder / "environment.json"
    env = json.loads(path.read_text())
    env["source_sha256"] = "0" * 64  # the steps so far were made by other code
    env["packages"]["torch"] = "1.0.0"
    path.write_text(json.dumps(env))
    with pytest.warns(
        UserWarning, match=r"resumes at step 10 under other code.*source_sha256: 0{64} → .*torch: 1\.0\.0"
    ):
        run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True, resume=True)
    now = json.loads(path.read_text())
    assert now["earlier"][-1]["source_sha256"] == "0" * 64 and now["resumed_from_step"] == 10
    assert now["source_sha256"] != "0" * 64


# -- 6. a folder knows its run ----------------------------------------------------------------------------------


def test_a_folder_with_a_runs_files_but_no_config_is_refused(tmp_path):
    folder = _stopped(tmp_path / "headless")
    (folder / "config.toml").unlink()
    before = sorted(p.name for p in folder.iterdir())
    with pytest.raises(
        RunFolderError, match=r"holds files of a run \(run\.json, metrics\.jsonl, summary\.json"
    ):
        run(TEACHER, folder, preset="smoke", overrides=[*SMALL, "optim.lr=0.01"], quiet=True)
    assert sorted(p.name for p in folder.iterdir()) == before
    run(
        TEACHER, tmp_path / "fresh", preset="smoke", overrides=SMALL, quiet=True
    )  # control: an empty folder runs


def test_a_config_toml_swapped_for_another_runs_is_refused(tmp_path):
    a, b = _stopped(tmp_path / "a"), tmp_path / "b"
    run(TEACHER, b, preset="smoke", overrides=[*SMALL, "optim.lr=0.01"], quiet=True)
    (a / "config.toml").write_text((b / "config.toml").read_text())  # a's folder now claims b's settings
    with pytest.raises(RunFolderError, match="not the configuration its run started with"):
        run(TEACHER, a, preset="smoke", overrides=[*SMALL, "optim.lr=0.01"], quiet=True, resume=True)


# -- 8. messages --------------------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 24 MiB tmpfs (as root where mounts are allowed), else None."""
    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(where)], capture_output=True
    )
    if done.returncode != 0:
        yield None
        return
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_full_disk_is_one_clear_error_and_the_earlier_checkpoints_stay(small_disk, tmp_path, monkeypatch):
    if small_disk is not None:  # a real full device: after the first checkpoint, fill it to half a checkpoint
        folder = small_disk / "run"

        def fill(step: int) -> None:
            if step == 6:
                size = Checkpoints(folder / "checkpoints").path(5).stat().st_size
                free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
                (small_disk / "ballast").write_bytes(
                    b"\0" * max(0, free - size // 2)
                )  # half a checkpoint left
    else:  # inject ENOSPC into the checkpoint write after the first
        folder = tmp_path / "run"
        from meanfield.runs import folder as folder_module

        real = folder_module.write_atomic
        calls = []

        def write_atomic(path, write):
            if path.suffix == ".pt":
                calls.append(path)
                if len(calls) > 1:
                    raise OSError(errno.ENOSPC, "No space left on device")
            return real(path, write)

        monkeypatch.setattr(folder_module, "write_atomic", write_atomic)
        fill = None
    overrides = [*SMALL, "data.n_train=30000", "model.n_particles=2000"]  # checkpoints of ~1 MB
    with pytest.raises(
        DiskFullError,
        match=r"no space left on device writing .*step-00000010\.pt.*intact \(latest: .*step-00000005\.pt\)",
    ):
        run(TEACHER, folder, preset="smoke", overrides=overrides, quiet=True, on_step=fill)
    checkpoints = Checkpoints(folder / "checkpoints")
    assert checkpoints.steps() == [5] and checkpoints.load(5)["step"] == 5  # the earlier one is intact
    assert not list((folder / "checkpoints").glob(".*.tmp"))  # the partial file was removed
    assert not Checkpoints(folder / "checkpoints").record_path(10).exists()  # nor a record without its file


def test_bad_thread_counts_and_seeds_are_one_line_errors(tmp_path, capsys):
    for override, expected in [
        ("threads=-1", "threads must be an integer ≥ 0"),
        ("seed=-1", r"seed must be an integer in \[0, 2\*\*63\)"),
        ("seed=100000000000000000000", r"seed must be an integer in \[0, 2\*\*63\)"),
    ]:
        with pytest.raises(ConfigError, match=expected):
            run(TEACHER, tmp_path / "x", preset="smoke", overrides=[override], quiet=True)
        assert not (tmp_path / "x").exists()
    code = cli.main(
        ["run", str(TEACHER), "--preset", "smoke", "--set", "threads=-1", "--out", str(tmp_path / "y")]
    )
    assert code == 2 and capsys.readouterr().err.count("\n") == 1


def test_an_interrupted_interrupt_is_one_line_and_exit_130(tmp_path, capsys, monkeypatch):
    from meanfield.runs import loop

    real_checkpoint, real_run = loop._Run._checkpoint, loop.run

    def second_ctrl_c(self):  # the second Ctrl-C arrives while the first one's checkpoint is being written
        if self.step == 7:
            raise KeyboardInterrupt
        return real_checkpoint(self)

    def interrupt_at_7(step: int) -> None:
        if step == 7:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(loop._Run, "_checkpoint", second_ctrl_c)
    monkeypatch.setattr("meanfield.runs.run", lambda *a, **k: real_run(*a, **k, on_step=interrupt_at_7))
    folder = tmp_path / "twice"
    sets = [x for s in SMALL for x in ("--set", s)]
    code = cli.main(["run", str(TEACHER), "--preset", "smoke", "--out", str(folder), "--quiet", *sets])
    err = capsys.readouterr().err
    assert code == 130 and err.count("\n") == 1 and "second interrupt" in err and "Traceback" not in err
    assert (
        RunResult.load(folder).status == "interrupted" and Checkpoints(folder / "checkpoints").latest() == 5
    )
    assert "released" in json.loads((folder / ".lock").read_text())  # the lock was released on this path too


# -- 9. NaN evaluation metrics ------------------------------------------------------------------------------


@pytest.mark.parametrize("allowed", [False, True])
def test_a_nan_evaluation_metric_stops_the_run_unless_the_task_allows_it(allowed, tmp_path, monkeypatch):
    from meanfield import tasks

    task = tasks.TASKS["teacher_student"]
    build = task.build

    class Wrapped:
        Data, Model = task.Data, task.Model

        @staticmethod
        def build(*args, **kwargs):
            experiment = build(*args, **kwargs)
            evaluate = experiment.evaluate
            experiment.evaluate = lambda: {**evaluate(), "test_broken": float("nan")}
            if allowed:
                experiment.nonfinite_metrics = ("test_broken",)
            return experiment

    monkeypatch.setitem(tasks.TASKS, "teacher_student", Wrapped)
    folder = tmp_path / "nan"
    if allowed:  # negative control: a declared metric may be NaN
        assert run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True).status == "finished"
        return
    with pytest.raises(NonFiniteLossError, match=r"evaluation at step 10 gave test_broken = nan"):
        run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True)
    assert RunResult.load(folder).status == "diverged"


# -- 10. leftovers of killed writes --------------------------------------------------------------------------


def test_temporary_files_of_a_killed_write_are_removed_on_resume(uninterrupted, tmp_path):
    folder = _stopped(tmp_path / "tmp")
    leftovers = [folder / "checkpoints" / ".step-00000015.pt.abc123.tmp", folder / ".summary.json.xyz.tmp"]
    for path in leftovers:
        path.write_bytes(b"partial")
    run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True, resume=True)
    assert not any(p.exists() for p in leftovers) and _same_run(uninterrupted, folder)


# -- sweeps: one sweep per folder, damaged points, signals, the up-front check (issue 24: 1, 3, 7, 10) --------

GRID = {"optim.lr": [0.02, 0.05]}
SWEEP_SET = ["train.steps=12", "train.checkpoint_every=5", "train.log_every=3"]


def test_a_second_sweep_on_one_folder_is_refused_before_it_runs_anything(tmp_path):
    from meanfield.runs.sweeps import sweep_runs

    out = tmp_path / "sweep"
    with FolderLock(out, "sweep"):
        with pytest.raises(FolderLocked, match=rf"in use by another sweep: pid {os.getpid()}"):
            sweep_runs(TEACHER, GRID, [0], out, preset="smoke", overrides=SWEEP_SET, quiet=True)
    assert sorted(p.name for p in out.iterdir()) == [".lock"]
    table = sweep_runs(TEACHER, GRID, [0], out, preset="smoke", overrides=SWEEP_SET, quiet=True)  # control
    assert not table.failed


def test_a_damaged_point_does_not_stop_the_sweep(tmp_path):
    from meanfield.runs.sweeps import sweep_runs

    out = tmp_path / "sweep"
    first = sweep_runs(TEACHER, GRID, [0, 1], out, preset="smoke", overrides=SWEEP_SET, quiet=True)
    folders = [out / row["folder"] for row in first.rows]
    (folders[0] / "summary.json").write_text('{"status": "fini')  # a finished point's summary, damaged
    log = folders[1] / "metrics.jsonl"  # another point: an unreadable line in the middle, and no summary
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join([lines[0], "not json\n", *lines[1:]]))
    (folders[1] / "summary.json").unlink()
    table = sweep_runs(TEACHER, GRID, [0, 1], out, preset="smoke", overrides=SWEEP_SET, quiet=True)
    by_folder = {row["folder"]: row for row in table.rows}
    assert by_folder[folders[0].name]["status"] == "finished"  # resumed from its last checkpoint
    assert by_folder[folders[0].name]["test_mse"] == first.rows[0]["test_mse"]  # to the same numbers
    bad = by_folder[folders[1].name]
    assert bad["status"] == "failed" and "line 2, is not a JSON record" in bad["error"]
    assert [row["status"] for row in table.rows].count("finished") == 3  # the others went on


def test_the_up_front_check_builds_every_points_model(tmp_path):
    from meanfield.runs.sweeps import sweep_runs

    with pytest.raises(
        ConfigError, match=r"sweep point model\.n_particles=-1_seed=0: .*n_particles must be ≥ 1"
    ):
        sweep_runs(TEACHER, {"model.n_particles": [8, -1]}, [0], tmp_path / "s", preset="smoke", quiet=True)
    assert not (tmp_path / "s").exists()  # nothing ran, nothing was written


def test_a_signal_during_a_one_process_sweep_stops_it_after_the_running_point(tmp_path, monkeypatch):
    from meanfield.runs import sweeps

    real, started = sweeps._run_point, []

    def point_then_sigterm(*args):
        started.append(args[1])
        summary = real(*args)
        os.kill(os.getpid(), signal.SIGTERM)  # arrives between two points: the sweep's own handler
        return summary

    monkeypatch.setattr(sweeps, "_run_point", point_then_sigterm)
    out = tmp_path / "sweep"
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RunInterrupted, match="stopped by SIGTERM") as caught:
        sweeps.sweep_runs(TEACHER, GRID, [0, 1], out, preset="smoke", overrides=SWEEP_SET, quiet=True)
    assert caught.value.signum == signal.SIGTERM and len(started) == 1  # no new point after the signal
    assert signal.getsignal(signal.SIGTERM) is before
    monkeypatch.setattr(sweeps, "_run_point", real)
    table = sweeps.sweep_runs(TEACHER, GRID, [0, 1], out, preset="smoke", overrides=SWEEP_SET, quiet=True)
    assert not table.failed  # negative control: the same command again finishes every point


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_sigterm_to_a_sweep_parent_reaches_its_workers_and_leaves_no_orphans(tmp_path):
    out = tmp_path / "sweep"
    args = ["sweep", str(TEACHER), "--preset", "smoke", "--out", str(out), "--jobs", "2", "--quiet"]
    args += ["--grid", "optim.lr=0.02,0.05", "--seeds", "0,1", "--set", "train.steps=100000"]
    args += ["--set", "train.checkpoint_every=0", "--set", "train.log_every=5"]
    p = _meanfield(*args)
    try:
        _wait_for(lambda: sum(_steps_logged(f) >= 10 for f in out.glob("*_seed=*")) >= 2, timeout=120)
        workers = [
            c for c in _children(p.pid) if "spawn" in Path(f"/proc/{c}/cmdline").read_text(errors="replace")
        ]
        p.send_signal(signal.SIGTERM)  # to the parent alone
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, err
    assert "stopped by SIGTERM" in err and "run the same command again" in err and "--resume" not in err
    assert workers and not [w for w in workers if Path(f"/proc/{w}").exists()]  # every worker ended
    points = sorted(out.glob("*_seed=*"))
    started = [f for f in points if (f / "summary.json").exists()]
    assert len(started) == 2  # the two running points; the other two never started
    for folder in started:
        summary = RunResult.load(folder)
        assert (
            summary.status == "interrupted" and Checkpoints(folder / "checkpoints").latest() == summary.step
        )


# -- issue 50: sweep workers that die, and sweeps that die ---------------------------------------------------


def _sweep_args(out: Path, steps: int, seeds: str = "0", checkpoint_every: int = 0) -> list[str]:
    args = ["sweep", str(TEACHER), "--preset", "smoke", "--out", str(out), "--jobs", "2", "--quiet"]
    args += ["--grid", "optim.lr=0.02,0.05", "--seeds", seeds, "--set", f"train.steps={steps}"]
    return args + ["--set", f"train.checkpoint_every={checkpoint_every}", "--set", "train.log_every=5"]


def _workers(pid: int) -> list[int]:
    """The sweep's worker processes (spawned: ``spawn_main`` in their command line)."""
    found = []
    for child in _children(pid):
        with contextlib.suppress(OSError):
            if "spawn_main" in Path(f"/proc/{child}/cmdline").read_text(errors="replace"):
                found.append(child)
    return found


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie waiting for a parent that does not reap it counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def _resumable(folder: Path) -> bool:
    """A point that never started, or one that stopped with a checkpoint of the step its summary names."""
    if not (folder / "summary.json").exists():
        return not (folder / "checkpoints").exists()
    summary = RunResult.load(folder)
    return summary.status == "interrupted" and Checkpoints(folder / "checkpoints").latest() == summary.step


@pytest.mark.slow
def test_a_sweeps_workers_die_with_its_parent_and_the_same_command_finishes_their_points(tmp_path):
    """SIGKILL to a sweep's parent: its workers get SIGTERM from the kernel (PR_SET_PDEATHSIG), finish their
    step, checkpoint and end; running the same command at once resumes both points (no ``FolderLocked``)."""
    out = tmp_path / "sweep"
    p = _meanfield(*_sweep_args(out, steps=3000))
    try:
        _wait_for(lambda: sum(_steps_logged(f) >= 10 for f in out.glob("*_seed=*")) >= 2, timeout=180)
        workers = _workers(p.pid)
        p.kill()
        p.wait(timeout=30)
        assert len(workers) == 2
        _wait_for(lambda: all(_gone(w) for w in workers), timeout=120)  # none outlives its sweep
    finally:
        if p.poll() is None:
            p.kill()
    points = sorted(out.glob("*_seed=*"))
    assert len(points) == 2 and all(_resumable(f) and (f / "summary.json").exists() for f in points)
    again = _meanfield(*_sweep_args(out, steps=3000))
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert "FolderLocked" not in err and "Traceback" not in err
    assert all(RunResult.load(f).status == "finished" for f in points)


def _lock_holder(folder: Path, sweep_pid: int | None) -> subprocess.Popen:
    """A process that holds ``folder``'s lock as a sweep worker of ``sweep_pid`` would (``None``: as a run
    started by hand) and, on SIGTERM, releases it and exits 0."""
    code = (
        "import signal, sys\n"
        "from meanfield.runs import lock\n"
        f"lock.SWEEP_PID = {sweep_pid!r}\n"
        f"held = lock.FolderLock({str(folder)!r}).acquire()\n"
        "signal.signal(signal.SIGTERM, lambda s, f: (held.release(), sys.exit(0)))\n"
        "print('held', flush=True)\n"
        "while True: signal.pause()\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    return holder


@pytest.mark.slow
def test_a_sweep_stops_the_orphan_of_a_dead_sweep_but_not_a_live_sweeps_worker_or_a_hand_run(
    tmp_path, monkeypatch
):
    """An older sweep's worker whose sweep is gone and which keeps training (no parent-death signal) holds a
    point: the new sweep waits ORPHAN_GRACE_S, sends it SIGTERM and gets the point. Controls: a holder whose
    recorded sweep is its live parent, and a run started by hand, are left alone."""
    from meanfield.runs import sweeps

    monkeypatch.setattr(sweeps, "ORPHAN_GRACE_S", 0.2)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a sweep pid that no longer runs
    orphan = _lock_holder(tmp_path / "a", gone.pid)
    live = _lock_holder(tmp_path / "b", os.getpid())  # its recorded sweep is its parent: this process
    by_hand = _lock_holder(tmp_path / "c", None)
    try:
        sweeps._take_over_orphans(tmp_path, ["a", "b", "c"], quiet=True)
        assert orphan.wait(timeout=60) == 0  # it got SIGTERM and released the point
        with FolderLock(tmp_path / "a") as lock:
            assert lock.held and lock.stale is None  # released, not stale
        assert live.poll() is None and by_hand.poll() is None
        for folder in ("b", "c"):
            with pytest.raises(FolderLocked):
                FolderLock(tmp_path / folder).acquire()
    finally:
        for holder in (orphan, live, by_hand):
            if holder.poll() is None:
                holder.kill()
                holder.wait()


@pytest.mark.slow
def test_a_killed_worker_fails_its_own_point_and_the_others_go_on(tmp_path):
    """SIGKILL (what the out-of-memory killer sends) to one worker: its point is marked failed with the signal,
    the pool gets a new worker, the other three points finish, the tables are written, exit 1, no traceback.
    Control: the same command again resumes the failed point from its checkpoint and exits 0."""
    out = tmp_path / "sweep"
    p = _meanfield(*_sweep_args(out, steps=600, seeds="0,1", checkpoint_every=5))
    victim = out / "optim.lr=0.02_seed=0"
    try:
        _wait_for(lambda: _steps_logged(victim) >= 10, timeout=180)
        holder = json.loads((victim / ".lock").read_text())["pid"]
        assert holder in _workers(p.pid)
        os.kill(holder, signal.SIGKILL)
        _, err = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1, err
    assert "Traceback" not in err and "BrokenProcessPool" not in err
    assert f"{victim.name}: its worker process (pid {holder}) was killed by SIGKILL" in err
    import csv

    rows = {r["folder"]: r for r in csv.DictReader((out / "runs.csv").open())}
    assert rows[victim.name]["status"] == "failed" and "was killed by SIGKILL" in rows[victim.name]["error"]
    assert [r["status"] for n, r in rows.items() if n != victim.name] == ["finished"] * 3
    assert (out / "summary.md").exists()
    summary = RunResult.load(victim)
    assert summary.status == "failed" and "SIGKILL" in summary.summary["error"]
    again = _meanfield(*_sweep_args(out, steps=600, seeds="0,1", checkpoint_every=5))
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert RunResult.load(victim).status == "finished"


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_the_workers_start_exits_128_plus_it_and_every_point_resumes(signum, tmp_path):
    """The signal reaches the parent while its two workers are still importing torch: the workers hold it
    (started with it blocked), the parent forwards it, no point starts or each stops with a checkpoint; exit
    128 + signal, one line, no ``BrokenProcessPool``. Control: the same command again finishes every point."""
    out = tmp_path / "sweep"
    p = _meanfield(*_sweep_args(out, steps=40))
    try:
        _wait_for(lambda: _workers(p.pid), timeout=180)
        p.send_signal(signum)
        _, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 128 + signum, err
    assert "Traceback" not in err and "BrokenProcessPool" not in err and err.count("\n") == 1
    assert all(_resumable(f) for f in out.glob("*_seed=*"))
    again = _meanfield(*_sweep_args(out, steps=40))
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err


# -- issue 50: resume faults are one line naming the file, exit 1 (the machine) or 2 (the input) -------------


def _resume(folder: Path, capsys, *extra: str) -> tuple[int, str]:
    sets = [x for s in (*SMALL, *extra) for x in ("--set", s)]
    code = cli.main(
        ["run", str(TEACHER), "--preset", "smoke", "--out", str(folder), "--resume", "--quiet", *sets]
    )
    return code, capsys.readouterr().err


def _fill(where: Path) -> Path:
    """Fill the file system of ``where`` to the last byte; return the ballast file."""
    ballast = where / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (1 << 16, 1):  # blocks, then the last bytes
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return ballast


def test_a_resume_onto_a_full_disk_is_one_line_naming_the_file_exit_1(
    small_disk, uninterrupted, tmp_path, capsys, monkeypatch
):
    """A stopped run on a full device (a real 24 MiB tmpfs filled to the last byte, else an injected ENOSPC
    from writing config.toml): resuming it is one line naming a file of the folder, exit 1 (the machine's
    fault, not the input's), no traceback. Control: with the space back the same command resumes it, and the
    run equals the uninterrupted one bit for bit."""
    folder = _stopped((small_disk if small_disk is not None else tmp_path) / "run")
    if small_disk is not None:
        ballast = _fill(small_disk)
    else:
        from meanfield.runs import loop

        real = loop.write_text_atomic

        def full(path, text):
            if Path(path).name == "config.toml":
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(path, text)

        monkeypatch.setattr(loop, "write_text_atomic", full)
    code, err = _resume(folder, capsys)
    assert code == 1 and err.count("\n") == 1, err
    assert f"no space left on device writing {folder}" in err and "free some space" in err
    assert RunResult.load(folder).status != "finished"
    if small_disk is not None:
        ballast.unlink()
    else:
        monkeypatch.undo()
    assert _resume(folder, capsys)[0] == 0 and _same_run(uninterrupted, folder)


@pytest.fixture
def read_only(tmp_path):
    """``(writable, read_only)``: a folder and a read-only bind mount of it (as root where mounts are allowed),
    else ``(writable, None)``."""
    source, view = tmp_path / "rw", tmp_path / "ro"
    source.mkdir()
    view.mkdir()
    done = subprocess.run(["mount", "--bind", str(source), str(view)], capture_output=True)
    if done.returncode != 0:
        yield source, None
        return
    try:
        if subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], capture_output=True).returncode:
            yield source, None
        else:
            yield source, view
    finally:
        subprocess.run(["umount", "-l", str(view)], capture_output=True)


def test_a_resume_in_a_read_only_folder_is_one_line_naming_the_lock_exit_1(read_only, capsys, monkeypatch):
    """A run folder seen through a read-only bind mount (else an injected EROFS from opening the lock): one line
    naming FOLDER/.lock and what to do, exit 1. Control: the same folder, writable, resumes (exit 0)."""
    source, view = read_only
    _stopped(source / "run")
    if view is None:
        view, real = source, os.open

        def read_only_open(path, flags, *args):
            if str(path).endswith(".lock"):
                raise OSError(errno.EROFS, "Read-only file system", str(path))
            return real(path, flags, *args)

        monkeypatch.setattr(os, "open", read_only_open)
    code, err = _resume(view / "run", capsys)
    assert code == 1 and err.count("\n") == 1, err
    assert f"cannot write {view / 'run' / '.lock'}: the file system is read-only" in err
    monkeypatch.undo()
    assert _resume(source / "run", capsys)[0] == 0


def test_a_garbled_environment_json_is_one_line_naming_it_exit_2(tmp_path, capsys):
    """environment.json cut in the middle: the resume refuses before writing anything, naming the file and what
    to do, exit 2; no JSONDecodeError traceback. Control: once it is deleted, as the message says, it resumes."""
    folder = _stopped(tmp_path / "env")
    path = folder / "environment.json"
    path.write_text(path.read_text()[:40])
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    code, err = _resume(folder, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert f"{path} is unreadable (JSONDecodeError" in err and "delete it" in err
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before  # nothing written
    path.unlink()
    assert _resume(folder, capsys)[0] == 0 and RunResult.load(folder).status == "finished"


def test_checkpoints_replaced_by_a_file_is_one_line_exit_2(tmp_path, capsys):
    """``checkpoints/`` replaced by a file: one line naming it (no NotADirectoryError), exit 2. Control: with the
    file moved away the run resumes (from step 0: there is no checkpoint)."""
    import shutil

    folder = _stopped(tmp_path / "file")
    shutil.rmtree(folder / "checkpoints")
    (folder / "checkpoints").write_text("not a folder")
    code, err = _resume(folder, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert f"{folder / 'checkpoints'} is not a folder" in err and "Traceback" not in err
    (folder / "checkpoints").unlink()
    assert _resume(folder, capsys)[0] == 0 and RunResult.load(folder).status == "finished"


def test_debug_prints_the_traceback_of_a_refused_resume(tmp_path):
    """``--debug``: the same refusal raises with its traceback (here: the RunFolderError of a garbled record)."""
    folder = _stopped(tmp_path / "env")
    (folder / "environment.json").write_text("{")
    sets = [x for s in SMALL for x in ("--set", s)]
    with pytest.raises(RunFolderError, match="environment.json is unreadable"):
        cli.main(
            ["--debug", "run", str(TEACHER), "--preset", "smoke", "--out", str(folder), "--resume", *sets]
        )


# -- issue 50: truthful messages ------------------------------------------------------------------------------


def _resign(checkpoints: Checkpoints, step: int, state: dict) -> None:
    """Write ``state`` as the checkpoint of ``step`` with a matching record (what a forger would do)."""
    import hashlib
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    record = checkpoints.record(step)
    record.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    checkpoints.path(step).write_bytes(data)
    checkpoints.record_path(step).write_text(json.dumps(record))


def test_a_resigned_checkpoint_with_nan_parameters_is_set_aside_not_resumed(uninterrupted, tmp_path):
    """A checkpoint whose parameters were set to NaN and whose record was rewritten to match: it verifies, so
    before it was loaded and the run diverged at once, calling it 'the last checkpoint with finite parameters'.
    Now it is refused as damaged, moved to corrupt/, and the run resumes from step 5 to the uninterrupted
    result. Control: the same re-signing with finite parameters resumes from it without a warning."""
    folder = _stopped(tmp_path / "nan")
    checkpoints = Checkpoints(folder / "checkpoints")
    state = checkpoints.load(10)
    name = next(k for k, v in state["model"].items() if v.is_floating_point())
    _resign(checkpoints, 10, state)  # control first: re-signed, finite
    assert checkpoints.load_good()[0] == 10
    state["model"][name] = torch.full_like(state["model"][name], float("nan"))
    _resign(checkpoints, 10, state)
    with pytest.warns(UserWarning, match=rf"step-00000010\.pt is damaged: its parameters {name}.* hold NaN"):
        run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True, resume=True)
    assert (folder / "checkpoints" / "corrupt" / "step-00000010.pt").exists()
    assert _same_run(uninterrupted, folder)


class _Payload:
    def __reduce__(self):
        return (os.system, ("echo this must never run",))


def test_a_refused_malicious_checkpoint_does_not_suggest_weights_only_false(tmp_path):
    """A re-signed checkpoint holding a pickled call of os.system: torch.load(weights_only=True) refuses it;
    the message names what it held but never repeats torch's hint to retry with weights_only=False.
    Control: torch's own message does carry that hint."""
    folder = _stopped(tmp_path / "evil")
    checkpoints = Checkpoints(folder / "checkpoints")
    state = checkpoints.load(10)
    _resign(checkpoints, 10, {**state, "payload": _Payload()})
    with pytest.raises(CorruptCheckpointError) as caught:
        checkpoints.load(10)
    message = str(caught.value)
    assert "refused it" in message and "system" in message
    assert "weights_only=False" not in message and "set to `False`" not in message
    with pytest.raises(Exception, match="set to `False`"):  # the hint torch gives
        torch.load(checkpoints.path(10), weights_only=True)


# -- issue 50: sizes ------------------------------------------------------------------------------------------


def test_sizes_that_cannot_fit_are_refused_in_one_line_with_the_size_and_the_memory(tmp_path, capsys):
    """``model.n_particles = 10**12`` (a 15 TiB tensor): one line stating the size asked and the memory there
    is, exit 2, nothing written; ``train.steps = 10**20``: the allowed range. Controls: 2**53 steps pass the
    check (the config only), and 32 particles run."""
    from meanfield.runs import check_config

    out = tmp_path / "big"
    code = cli.main(
        [
            "run",
            str(TEACHER),
            "--preset",
            "smoke",
            "--set",
            "model.n_particles=1000000000000",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert re.search(r"one of its tensors needs [\d.]+ TiB, and cpu has [\d.]+ GiB", err), err
    assert "of memory available" in err and not out.exists()
    code = cli.main(
        [
            "run",
            str(TEACHER),
            "--preset",
            "smoke",
            "--set",
            "train.steps=100000000000000000000",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "train.steps must be in 1 … 2**53" in err and err.count("\n") == 1
    resolved = {"task": "teacher_student", "optim": {"lr": 0.1, "beta": 0.0}}
    check_config({**resolved, "train": {"steps": 2**53}})  # control: the largest allowed
    with pytest.raises(ConfigError, match=r"2\*\*53"):
        check_config({**resolved, "train": {"steps": 2**53 + 1}})


def test_simulate_refuses_saved_states_beyond_the_memory_before_allocating():
    """``simulate`` asked to save 2,000,001 states of 100,000 floats (800 GB): refused before the tensor (and the
    list of save steps) is made, naming the size and the memory. Control: saving only the two ends passes."""
    from meanfield import _checks
    from meanfield.drift.potentials import Quadratic
    from meanfield.drift.systems import MeanFieldLangevin
    from meanfield.stepping.simulate import simulate

    x0 = torch.zeros(1, 1000, 100)
    with pytest.raises(ValueError, match=r"2000001 saved states .* need 745 GiB, and cpu has .* available"):
        simulate(MeanFieldLangevin(Quadratic(1.0), beta=1.0), x0, t1=2.0, dt=1e-6, save_every=1, generator=0)
    _checks.check_saved_states(2_000_000, 2_000_000, x0)  # control: two states fit


# -- issue 50: leftovers of a kill, and the optimizer's state after a resume ---------------------------------


def test_a_record_left_without_its_checkpoint_is_removed_and_the_optimizer_state_resumes_exactly(
    uninterrupted, tmp_path
):
    """A kill between a checkpoint's record and its file leaves ``step-N.json`` alone: the next run that takes
    the folder removes it (the records of existing checkpoints stay). After the resume the optimizer's state
    dict equals the uninterrupted run's strictly: the same keys in every group (no ``differentiable`` added by
    torch) and the same tensors."""
    folder = _stopped(tmp_path / "orphan")
    checkpoints = Checkpoints(folder / "checkpoints")
    orphan = checkpoints.record_path(17)  # not a checkpoint step of this run
    orphan.write_text(checkpoints.record_path(10).read_text())
    run(TEACHER, folder, preset="smoke", overrides=SMALL, quiet=True, resume=True)
    assert not orphan.exists()
    assert all(checkpoints.record_path(s).exists() for s in checkpoints.steps())  # control: the others stay

    def same(a, b) -> bool:
        if torch.is_tensor(a):
            return torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b)
        if isinstance(a, dict):
            return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, (list, tuple)):
            return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
        return a == b

    mine = checkpoints.load()["optimizer"]
    theirs = Checkpoints(uninterrupted / "checkpoints").load()["optimizer"]
    assert same(mine, theirs)
    theirs["param_groups"][0]["differentiable"] = False  # negative control: what a resume used to add
    assert not same(mine, theirs)


def test_a_run_that_imports_code_says_from_where(tmp_path, capsys):
    """``task = "module:attribute"`` imports that module: the run prints its file and records it in
    environment.json. Control: a built-in task prints nothing of the kind."""
    folder = tmp_path / "imported"
    run(TEACHER, folder, preset="smoke", overrides=[*SMALL, "task=meanfield.tasks:TEACHER_STUDENT"])
    out = capsys.readouterr().out
    import meanfield.tasks

    assert f"task 'meanfield.tasks:TEACHER_STUDENT' runs code imported from {meanfield.tasks.__file__}" in out
    assert json.loads((folder / "environment.json").read_text())["task_source"] == meanfield.tasks.__file__
    run(TEACHER, tmp_path / "builtin", preset="smoke", overrides=SMALL)
    assert "imported from" not in capsys.readouterr().out
