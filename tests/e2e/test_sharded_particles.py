"""Particle layers sharded over two gloo processes (``meanfield.nn.sharded``), against the single process.

Oracle: the unsharded model, built identically in the same process. Sharded, each rank holds half of the
particles and the whole batch; the layer's output is an all-reduce, the Langevin noise of a particle is its row of
the full draw. So the forward pass, every gradient, every Langevin step (SGD and Adam drift, noise) and the
step statistics equal the single-process ones up to the summation order of two partial sums (float64:
1e-12 relative). Negative controls: a rank's half of the heads alone is another layer; noise drawn per rank
(not rows of the full draw) moves the particles differently.
"""

from __future__ import annotations

import copy
import os
import shutil
import time
import warnings
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from torch import nn

from meanfield.nn import FeatureParticles, ParticleAttention
from meanfield.nn.sharded import (
    full_optimizer_state,
    full_state_dict,
    load_full_optimizer_state,
    load_full_state_dict,
    particle_parameter,
    shard_particles,
)
from meanfield.optim import Langevin
from meanfield.runs import Checkpoints, RunResult, run

DT = torch.float64
ROOT = Path(__file__).resolve().parents[2]
TEACHER = ROOT / "experiments" / "teacher_student" / "config.toml"
MEAN_FIELD = ROOT / "experiments" / "mean_field" / "config.toml"
MF_OVERRIDES = ["threads=1", "parallel=particles", "train.figures=false"]
OVERRIDES = [
    "dtype=float64",
    "threads=1",
    "parallel=particles",
    "optim.drift=adam",
    "optim.beta=1e-3",
    "train.steps=12",
    "train.figures=false",
    "train.checkpoint_every=6",
]


class Net(nn.Module):
    """A replicated linear map, particle attention (M = 4 heads), a replicated readout."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.inp = nn.Linear(6, 8, dtype=DT)
        self.attention = ParticleAttention(8, 4, 3, generator=g, dtype=DT)
        self.out = nn.Linear(8, 1, dtype=DT)
        with torch.no_grad():
            for p in (*self.inp.parameters(), *self.out.parameters()):
                p.copy_(torch.randn(p.shape, generator=g, dtype=DT) / 3)

    def forward(self, x):
        return self.out(self.attention(self.inp(x)))  # (B, T, 1)


def _close(a, b, tol=1e-12):
    return (a - b).abs().max().item() <= tol * max(1.0, b.abs().max().item())


def _layers(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    checks: dict[str, bool] = {}
    x = torch.randn(5, 7, 6, generator=torch.Generator().manual_seed(1), dtype=DT)  # (B, T, d_in)

    # 1. forward and backward of particle attention between replicated layers
    ref, net = Net(0), shard_particles(Net(0))
    lo, hi = net.attention.particle_shard.start, net.attention.particle_shard.stop
    checks["rows"] = (lo, hi) == ((0, 2), (2, 4))[rank] and net.attention.n_particles == 2
    y_ref, y = ref(x), net(x)
    checks["forward"] = _close(y, y_ref)
    lone = copy.deepcopy(ref.attention).prune(list(range(lo, hi)))  # negative control: half of the heads
    checks["half_differs"] = not _close(ref.out(lone(ref.inp(x))), y_ref, 1e-3)
    y_ref.square().sum().backward()
    y.square().sum().backward()
    checks["grad_replicated_in"] = _close(net.inp.weight.grad, ref.inp.weight.grad)
    checks["grad_replicated_out"] = _close(net.out.weight.grad, ref.out.weight.grad)
    checks["grad_particles"] = _close(net.attention.W_QKV.grad, ref.attention.W_QKV.grad[lo:hi]) and _close(
        net.attention.W_O.grad, ref.attention.W_O.grad[lo:hi]
    )

    # 2. Langevin steps (Adam drift, preconditioned noise) and their statistics
    def steps(model, k=3):
        groups = Langevin.param_groups_for(model, drift="adam", beta=0.05)
        opt = Langevin(groups, lr=1e-2, beta=0.05, seed=7)
        for _ in range(k):
            opt.zero_grad()
            model(x).square().sum().backward()
            opt.step()
        return opt

    ref, net = Net(0), shard_particles(Net(0))
    opt_ref, opt = steps(ref), steps(net)
    checks["step_particles"] = _close(net.attention.W_QKV, ref.attention.W_QKV[lo:hi])
    checks["step_replicated"] = _close(net.inp.weight, ref.inp.weight)
    s_ref, s = opt_ref.last_stats, opt.last_stats
    checks["stats"] = s.n == s_ref.n and all(
        abs(getattr(s, k) - getattr(s_ref, k)) <= 1e-10 * abs(getattr(s_ref, k))
        for k in ("noise_rms", "drift_rms", "eta_eff_mean", "eta_eff_min", "eta_eff_max")
    )
    # negative control: each rank drawing noise for its own rows only is a different chain
    per_rank = shard_particles(Net(0))
    groups = Langevin.param_groups_for(per_rank, drift="adam", beta=0.05)
    for group in groups:
        group.pop("particle_rows", None)
    opt_bad = Langevin(groups, lr=1e-2, beta=0.05, seed=7)
    for _ in range(3):
        opt_bad.zero_grad()
        per_rank(x).square().sum().backward()
        opt_bad.step()
    checks["per_rank_noise_differs"] = rank == 0 or not _close(
        per_rank.attention.W_QKV, ref.attention.W_QKV[lo:hi], 1e-3
    )

    # 3. checkpoints: the full tensors, and back
    full, full_opt = full_state_dict(net), full_optimizer_state(opt)
    checks["full_state"] = all(_close(full[k], v) for k, v in ref.state_dict().items())
    ref_opt = opt_ref.state_dict()
    checks["full_moments"] = all(
        _close(full_opt["state"][i]["exp_avg_sq"], ref_opt["state"][i]["exp_avg_sq"])
        for i in ref_opt["state"]
    )
    again = shard_particles(Net(5))  # another initialisation, then the checkpoint
    opt_again = Langevin(
        Langevin.param_groups_for(again, drift="adam", beta=0.05), lr=1e-2, beta=0.05, seed=3
    )
    load_full_state_dict(again, full)
    load_full_optimizer_state(opt_again, full_opt)
    for model, o in ((net, opt), (again, opt_again)):  # one more step each: the same
        o.zero_grad()
        model(x).square().sum().backward()
        o.step()
    checks["resumed_step"] = _close(again.attention.W_QKV, net.attention.W_QKV, 0.0)
    checks["gathered_parameter"] = _close(
        particle_parameter(net.attention, "W_O"), full_state_dict(net)["attention.W_O"], 0.0
    )

    # 4. feature particles, whose forward divides by the local M
    f_ref = FeatureParticles(6, 8, "tanh", generator=torch.Generator().manual_seed(2), dtype=DT)
    f = shard_particles(copy.deepcopy(f_ref))
    z = x[:, 0]  # (B, d_in)
    checks["features_forward"] = _close(f(z), f_ref(z))
    torch.save(checks, Path(out) / f"rank{rank}.pt")
    dist.barrier()  # no rank tears down gloo while the other still talks to it (a SIGABRT race)
    dist.destroy_process_group()
    os._exit(0)  # skip the interpreter's teardown, where gloo's threads could still abort the process (SIGABRT)


@pytest.fixture(scope="module")
def layer_checks(tmp_path_factory, free_port):
    out = tmp_path_factory.mktemp("sharded")
    mp.spawn(_layers, args=(2, free_port(), str(out)), nprocs=2, join=True)
    return [torch.load(out / f"rank{r}.pt") for r in (0, 1)]


@pytest.mark.slow  # two processes: about 10 s here
@pytest.mark.parametrize(
    "check",
    [
        "rows",
        "forward",
        "half_differs",
        "grad_replicated_in",
        "grad_replicated_out",
        "grad_particles",
        "step_particles",
        "step_replicated",
        "stats",
        "per_rank_noise_differs",
        "full_state",
        "full_moments",
        "resumed_step",
        "gathered_parameter",
        "features_forward",
    ],
)
def test_sharded_layers_equal_the_single_process(layer_checks, check):
    assert [c[check] for c in layer_checks] == [True, True]


def _run_rank(
    rank: int, world: int, port: int, out: str, params: str, config: str = str(TEACHER), overrides=OVERRIDES
) -> None:
    os.environ.update(WORLD_SIZE=str(world), RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist

    from meanfield import config as _config
    from meanfield.runs.loop import _Run

    resolved = _config.resolve(_config.load_toml(config), "smoke", overrides)
    r = _Run(resolved, Path(out), resume=False, quiet=True, on_step=None)
    r.train()
    torch.save(full_state_dict(r.experiment.model), Path(params) / f"rank{rank}.pt")
    dist.barrier()  # no rank tears down gloo while the other still talks to it (a SIGABRT race)
    dist.destroy_process_group()
    os._exit(0)  # skip the interpreter's teardown, where gloo's threads could still abort the process (SIGABRT)


@pytest.fixture(scope="module")
def sharded_run(tmp_path_factory, free_port):
    root = tmp_path_factory.mktemp("sharded_run")
    out, params = root / "run", root / "params"
    params.mkdir()
    mp.spawn(_run_rank, args=(2, free_port(), str(out), str(params)), nprocs=2, join=True)
    single = run(TEACHER, root / "single", preset="smoke", overrides=OVERRIDES, quiet=True)
    return out, params, single


@pytest.mark.slow  # two processes import torch and train: about 20 s here
def test_particle_sharded_run_equals_the_single_process_run(sharded_run):
    out, params, single = sharded_run
    result = RunResult.load(out)
    assert result.summary["status"] == "finished"
    ckpt = Checkpoints(single.path / "checkpoints")
    ref = ckpt.load(ckpt.latest())["model"]
    mine = Checkpoints(out / "checkpoints").load(12)["model"]
    assert mine["w"].shape == ref["w"].shape  # the checkpoint holds all M particles
    for r in (0, 1):
        gathered = torch.load(params / f"rank{r}.pt")
        assert all(_close(gathered[k], ref[k], 1e-9) for k in ref)
    assert all(_close(mine[k], ref[k], 1e-9) for k in ref)
    for key in ("train_loss", "test_mse", "aligned", "live", "alignment_max"):  # the law's diagnostics too
        assert abs(result.final[key] - single.final[key]) <= 1e-9 * max(1.0, abs(single.final[key])), key


@pytest.mark.slow
def test_a_two_rank_checkpoint_resumes_in_one_process(sharded_run, tmp_path):
    """The checkpoint of step 6 of the 2-rank run, resumed by one process, continues as the single run."""
    out, _, single = sharded_run
    copy_dir = tmp_path / "resumed"
    shutil.copytree(out, copy_dir)
    for step in Checkpoints(copy_dir / "checkpoints").steps():
        if step > 6:
            Checkpoints(copy_dir / "checkpoints").path(step).unlink()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = run(copy_dir / "config.toml", copy_dir, resume=True, quiet=True)
    assert any("resumes on 1" in str(w.message) for w in caught)
    assert abs(resumed.final["train_loss"] - single.final["train_loss"]) <= 1e-9
    ckpt = Checkpoints(single.path / "checkpoints")
    ref, got = ckpt.load(12)["model"], Checkpoints(copy_dir / "checkpoints").load(12)["model"]
    assert all(_close(got[k], ref[k], 1e-9) for k in ref)


def test_without_a_process_group_nothing_is_sharded():
    net = Net(0)
    assert shard_particles(net) is net and not hasattr(net.attention, "particle_shard")
    assert torch.equal(particle_parameter(net.attention, "W_O"), net.attention.W_O.detach())


def test_particles_that_do_not_split_evenly_are_refused(monkeypatch):
    import meanfield.nn.sharded as sharded

    monkeypatch.setattr(sharded, "_world", lambda: (3, 0))  # three ranks, M = 4 heads
    with pytest.raises(ValueError, match="M = 4 particles, which do not split into 3 equal shards"):
        shard_particles(Net(0))


def test_an_unknown_parallel_mode_is_refused(tmp_path):
    from meanfield.config import ConfigError

    with pytest.raises(ConfigError, match="parallel"):
        run(TEACHER, tmp_path / "bad", preset="smoke", overrides=["parallel=heads"], quiet=True)


@pytest.fixture(scope="module")
def sharded_system(tmp_path_factory, free_port):
    root = tmp_path_factory.mktemp("sharded_system")
    out, params = root / "run", root / "params"
    params.mkdir()
    mp.spawn(
        _run_rank,
        args=(2, free_port(), str(out), str(params), str(MEAN_FIELD), MF_OVERRIDES),
        nprocs=2,
        join=True,
    )
    single = run(MEAN_FIELD, root / "single", preset="smoke", overrides=MF_OVERRIDES, quiet=True)
    return out, single


@pytest.mark.slow  # two processes: about 10 s here
def test_a_particle_system_sharded_over_ranks_is_the_single_process_chain(sharded_system, tmp_path):
    """The mean_field smoke run (M = 4096, noise blocks of 1024: each rank draws its own two blocks only)
    on 2 ranks equals the single process to 1e-12; its 2-rank checkpoint of step 20 (all 4096 particles)
    resumed by one process ends where the single run does."""
    out, single = sharded_system
    result = RunResult.load(out)
    ref = Checkpoints(single.path / "checkpoints").load(40)["model"]["x"]  # (M, d)
    mine = Checkpoints(out / "checkpoints").load(40)["model"]["x"]
    assert mine.shape == ref.shape == (4096, 4)
    assert _close(mine, ref)
    for key in ("train_loss", "energy", "variance", "centre"):
        assert abs(result.final[key] - single.final[key]) <= 1e-12 * max(1.0, abs(single.final[key])), key
    resumed_dir = tmp_path / "resumed"
    shutil.copytree(out, resumed_dir)
    Checkpoints(resumed_dir / "checkpoints").path(40).unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run(resumed_dir / "config.toml", resumed_dir, resume=True, quiet=True)
    assert _close(Checkpoints(resumed_dir / "checkpoints").load(40)["model"]["x"], ref)


def _nan_rank(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(WORLD_SIZE=str(world), RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist

    from meanfield import config as _config
    from meanfield.runs import NonFiniteLossError
    from meanfield.runs.loop import _Run

    resolved = _config.resolve(_config.load_toml(TEACHER), "smoke", OVERRIDES)
    r = _Run(resolved, Path(out) / "run", resume=False, quiet=True, on_step=None)
    if rank == 1:  # from step 4 on, rank 1's particles get a NaN gradient; rank 0's stay finite
        r.experiment.model.w.register_hook(lambda g: g * float("nan") if r.step >= 3 else g)
    outcome = "finished"
    try:
        r.train()
    except NonFiniteLossError as error:
        outcome = f"stopped at step {error.step}"
    (Path(out) / f"rank{rank}.txt").write_text(outcome)
    dist.barrier()  # no rank tears down gloo while the other still talks to it (a SIGABRT race)
    dist.destroy_process_group()
    os._exit(0)  # skip the interpreter's teardown, where gloo's threads could still abort the process (SIGABRT)


@pytest.mark.slow
def test_a_nan_gradient_on_one_rank_stops_every_rank(tmp_path, free_port):
    """Without the cross-rank check the rank with the NaN refuses its step and the other waits for it in the
    next all-reduce forever; with it both stop at step 4, and the last checkpoint (step 0 is none, so the run
    says so) is untouched."""
    context = mp.spawn(_nan_rank, args=(2, free_port(), str(tmp_path)), nprocs=2, join=False)
    start = time.monotonic()
    while not context.join(timeout=5):  # False until every process has exited
        if time.monotonic() - start > 120:
            for process in context.processes:
                process.kill()
            pytest.fail("the ranks did not stop within 120 s (a rank waits for the other)")
    assert [(tmp_path / f"rank{r}.txt").read_text() for r in (0, 1)] == ["stopped at step 4"] * 2
    assert RunResult.load(tmp_path / "run").summary["status"] == "diverged"
