"""``meanfield sweep --backend ray`` on a local Ray cluster of two workers started by the test.

Oracle: the same sweep on the local backend (each point's final metrics, bit for bit: a point is the same run
wherever it runs, and a resumed run equals the uninterrupted one). A worker killed mid-sweep must cost nothing
but time: Ray retries its point, which resumes from its folder.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from meanfield.runs import RunResult
from meanfield.runs.sweeps import sweep_runs

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # a Ray cluster starts in about 10 s here

ROOT = Path(__file__).resolve().parents[2]
TEACHER = ROOT / "experiments" / "teacher_student" / "config.toml"
GRID = {"optim.lr": [0.02, 0.05]}
SEEDS = [0, 1]
OVERRIDES = ["train.steps=200", "train.figures=false", "train.checkpoint_every=20", "threads=1"]


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def _task_workers() -> list[int]:
    """PIDs of Ray worker processes running a sweep point (their process title is ``ray::_run_point``)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(b"ray::_run_point"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _local(tmp_path):
    return sweep_runs(
        TEACHER, GRID, SEEDS, tmp_path / "local", preset="smoke", overrides=OVERRIDES, quiet=True
    )


def test_ray_backend_equals_local_and_survives_a_killed_worker(cluster, tmp_path):
    killed: list[int] = []
    done = threading.Event()

    def kill_one() -> None:  # SIGKILL the first worker seen running a point, for as long as the sweep runs
        while not done.is_set() and not killed:  # no fixed deadline: under load Ray's workers start late
            pids = _task_workers()
            if pids:
                time.sleep(0.5)  # let it write a checkpoint or two
                if pids[0] in _task_workers():  # still on a point (not finished and idle, not gone)
                    try:
                        os.kill(pids[0], signal.SIGKILL)
                        killed.append(pids[0])
                    except ProcessLookupError:
                        pass
            time.sleep(0.05)

    killer = threading.Thread(target=kill_one)
    killer.start()
    out = tmp_path / "ray"
    try:
        table = sweep_runs(
            TEACHER, GRID, SEEDS, out, preset="smoke", overrides=OVERRIDES, quiet=True, backend="ray"
        )
    finally:
        done.set()
        killer.join()
    assert killed, "no worker was running a point: the kill did not happen"
    assert not table.failed, table.failed
    local = _local(tmp_path)
    for row in local.rows:
        folder = out / row["folder"]
        assert RunResult.load(folder).final["test_mse"] == row["test_mse"]
    assert (out / "summary.md").read_text() == (tmp_path / "local" / "summary.md").read_text()


def test_unknown_backend_is_refused(tmp_path):
    from meanfield.config import ConfigError

    with pytest.raises(ConfigError, match="backend must be one of"):
        sweep_runs(TEACHER, GRID, SEEDS, tmp_path / "x", preset="smoke", overrides=OVERRIDES, backend="dask")
