"""``meanfield run`` data-parallel over two gloo processes (torchrun's environment), against the single process.

Oracle: the single-process run of the same configuration (each rank takes half of the same global batch, the
gradients are averaged, the Langevin noise is drawn from the same generator on each rank: the step is the
single-process step, to the round-off of summing two half-batch means). The ranks must end bit-identical.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from meanfield.runs import Checkpoints, RunResult, run

ROOT = Path(__file__).resolve().parents[2]
TEACHER = ROOT / "experiments" / "teacher_student" / "config.toml"
OVERRIDES = [
    "dtype=float64",
    "threads=1",
    "train.steps=12",
    "train.figures=false",
    "train.checkpoint_every=6",
]


def _rank(rank: int, world: int, port: int, out: str, params: str) -> None:
    os.environ.update(WORLD_SIZE=str(world), RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist

    from meanfield import config as _config
    from meanfield.runs.loop import _Run  # the loop itself, to read each rank's parameters

    resolved = _config.resolve(_config.load_toml(TEACHER), "smoke", OVERRIDES)
    r = _Run(resolved, Path(out), resume=False, quiet=True, on_step=None)
    r.train()
    torch.save(
        {k: v.clone() for k, v in r.experiment.model.state_dict().items()}, Path(params) / f"rank{rank}.pt"
    )
    dist.barrier()  # no rank tears down gloo while the other still talks to it (a SIGABRT race)
    dist.destroy_process_group()
    os._exit(
        0
    )  # skip the interpreter's teardown, where gloo's threads could still abort the process (SIGABRT)


@pytest.fixture(scope="module")
def data_parallel(tmp_path_factory, free_port):
    root = tmp_path_factory.mktemp("ddp")
    out, params = root / "run", root / "params"
    params.mkdir()
    mp.spawn(_rank, args=(2, free_port(), str(out), str(params)), nprocs=2, join=True)
    single = run(TEACHER, root / "single", preset="smoke", overrides=OVERRIDES, quiet=True)
    return out, params, single


@pytest.mark.slow  # two processes import torch and train: about 20 s here
def test_data_parallel_run_equals_the_single_process_run(data_parallel):
    out, params, single = data_parallel
    result = RunResult.load(out)
    assert result.summary["status"] == "finished"
    a, b = (torch.load(params / f"rank{r}.pt") for r in (0, 1))
    assert all(torch.equal(a[k], b[k]) for k in a)  # the replicas stay identical, bit for bit
    ckpt = Checkpoints(single.path / "checkpoints")
    ref = ckpt.load(ckpt.latest())["model"]
    worst = max((a[k] - ref[k]).abs().max().item() / max(1.0, ref[k].abs().max().item()) for k in ref)
    assert worst < 1e-9  # float64: the two half-batch means summed in another order
    assert abs(result.final["train_loss"] - single.final["train_loss"]) < 1e-9
    assert not (out / "checkpoints").exists() or len(list((out / "checkpoints").iterdir())) >= 1
    # negative control: one rank's half-batch alone is another run
    lone = run(
        TEACHER,
        out.parent / "half",
        preset="smoke",
        overrides=[*OVERRIDES, "train.batch_size=16"],
        quiet=True,
    )
    assert abs(lone.final["train_loss"] - single.final["train_loss"]) > 1e-6


def _signalled_rank(rank: int, world: int, port: int, out: str, mode: str, report: str) -> None:
    """A rank that sends itself SIGTERM after step 3 (rank 0) or 4 (rank 1): a Ctrl-C or torchrun's SIGTERM
    reaches the ranks between different steps. Writes what the rank's run raised, and at which step."""
    import json
    import signal

    os.environ.update(WORLD_SIZE=str(world), RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist

    from meanfield import config as _config
    from meanfield.runs.loop import _Run

    resolved = _config.resolve(_config.load_toml(TEACHER), "smoke", [*OVERRIDES, f"parallel={mode}"])
    at = 3 + rank
    r = _Run(
        resolved,
        Path(out),
        resume=False,
        quiet=True,
        on_step=lambda step: step == at and os.kill(os.getpid(), signal.SIGTERM),
    )
    try:
        r.train()
        raised = None
    except BaseException as error:  # noqa: BLE001 - the test reads what it was
        raised = type(error).__name__
    Path(report, f"rank{rank}.json").write_text(json.dumps({"raised": raised, "step": r.step}))
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


@pytest.mark.slow  # two processes import torch and train: about 20 s a mode here
@pytest.mark.parametrize("mode", ["data", "particles"])
def test_a_signal_reaching_the_ranks_at_different_steps_stops_them_together(tmp_path, free_port, mode):
    """Rank 0 is signalled after step 3, rank 1 after step 4: both stop after step 3 with RunInterrupted, the
    step-3 checkpoint is written and the summary says "interrupted". Each rank used to read only its own flag:
    rank 0 left the collectives rank 1 was still in (sharded: a gloo abort; data-parallel: a hang), with no
    checkpoint and the summary left "running"."""
    import json

    out, report = tmp_path / "run", tmp_path / "report"
    report.mkdir()
    ctx = mp.spawn(_signalled_rank, args=(2, free_port(), str(out), mode, str(report)), nprocs=2, join=False)
    ctx.join(timeout=120)
    for p in ctx.processes:
        if p.is_alive():
            p.kill()
    got = [
        json.loads((report / f"rank{r}.json").read_text())
        for r in (0, 1)
        if (report / f"rank{r}.json").exists()
    ]
    assert got == [{"raised": "RunInterrupted", "step": 3}] * 2, got
    assert Checkpoints(out / "checkpoints").latest() == 3
    assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"


@pytest.mark.slow
def test_torchrun_launches_meanfield_run(tmp_path, free_port):
    """The documented launch: ``torchrun --nproc_per_node=2 -m meanfield run …`` writes one folder (rank 0)."""
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun not found")
    out = tmp_path / "launched"
    cmd = [torchrun, "--nproc_per_node=2", f"--master_port={free_port()}", "-m", "meanfield", "run", str(TEACHER),
           "--preset", "smoke", "--out", str(out)] + [a for o in OVERRIDES for a in ("--set", o)]  # fmt: skip
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    env = RunResult.load(out)
    assert env.summary["status"] == "finished"
    assert '"world_size": 2' in (out / "environment.json").read_text()


def test_batch_not_divisible_is_refused(tmp_path, monkeypatch):
    """A batch that does not split evenly over the processes is refused before anything is written."""
    from meanfield.config import ConfigError
    from meanfield.runs import parallel

    monkeypatch.setattr(parallel, "process_group", lambda device: (0, 3, False))  # (rank, world, created)
    with pytest.raises(ConfigError, match="multiple of the number of processes"):
        run(TEACHER, tmp_path / "x", preset="smoke", overrides=OVERRIDES, quiet=True)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("_", [0])
def test_batch_share_takes_each_ranks_rows(_):
    from meanfield.runs.parallel import batch_share as _batch_share

    idx = torch.arange(8)
    pair = (torch.arange(16).view(8, 2), torch.arange(8) * 10)
    assert _batch_share(idx, 1, 2, 8).tolist() == [4, 5, 6, 7]
    x, y = _batch_share(pair, 0, 4, 8)
    assert x.tolist() == [[0, 1], [2, 3]] and y.tolist() == [0, 10]
    shared = _batch_share({"a": idx, "n": 3}, 3, 4, 8)
    assert shared["a"].tolist() == [6, 7] and shared["n"] == 3
    assert _batch_share(torch.zeros(5, 3), 0, 2, 8).shape == (5, 3)  # not the batch axis: kept whole


def test_resume_on_another_world_size_warns(tmp_path, monkeypatch):
    """A run that ran on 2 processes and resumes on 1 says so (the continuation is equal to round-off only)."""
    import json

    folder = tmp_path / "r"

    def stop(step: int) -> None:
        if step == 6:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        run(TEACHER, folder, preset="smoke", overrides=OVERRIDES, quiet=True, on_step=stop)
    env = json.loads((folder / "environment.json").read_text())
    (folder / "environment.json").write_text(json.dumps({**env, "world_size": 2}))  # as if it ran on two
    with pytest.warns(UserWarning, match="ran on 2 process"):
        run(TEACHER, folder, preset="smoke", overrides=OVERRIDES, quiet=True, resume=True)
