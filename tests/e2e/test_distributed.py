"""One particle system over two gloo processes on loopback (meanfield.stepping.sharded).

Oracles: the single-process run with the same per-block noise (the design promises equality up to the
summation order of the collectives: round-off), an explicit sort-based sliced W2 along the same directions, and
the run repeated at the same world size (bit for bit).
"""

from __future__ import annotations

import json
import math
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from meanfield import MeanFieldLangevin, simulate
from meanfield.drift.potentials import GaussianInteraction, Quadratic, QuadraticInteraction
from meanfield.stepping.sharded import (
    BlockNoise,
    ShardedSystem,
    gather_particles,
    shard_range,
    simulate_sharded,
    sliced_w2_sharded,
)

B, M, D, BLOCK, SEED = 3, 64, 2, 16, 7
SYSTEMS = {
    "quadratic": lambda: MeanFieldLangevin(Quadratic(1.0), QuadraticInteraction(0.8), beta=0.5),
    "gaussian": lambda: MeanFieldLangevin(Quadratic(0.5), GaussianInteraction(1.0, 0.7), beta=0.3),
}


def initial() -> torch.Tensor:
    return torch.randn(B, M, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


def _worker(rank: int, world: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        results = {}
        for name, make in SYSTEMS.items():
            runs = [
                simulate_sharded(make(), initial(), t1=0.5, dt=0.05, seed=SEED, block=BLOCK) for _ in range(2)
            ]
            full = gather_particles(runs[0].final)
            repeat = torch.equal(runs[0].final, runs[1].final)
            if rank == 0:
                torch.save(full, os.path.join(out, f"{name}.pt"))
                results[name] = repeat
        g = torch.Generator().manual_seed(3)
        x = torch.randn(B, M, D, dtype=torch.float64, generator=g)
        y = 1.5 * torch.randn(B, M, D, dtype=torch.float64, generator=g) + 0.3
        start, stop = shard_range(M, world, rank)
        sw = sliced_w2_sharded(x[:, start:stop], y[:, start:stop], n_projections=8, n_quantiles=M, seed=5)
        if rank == 0:
            results["sliced"] = sw.tolist()
            with open(os.path.join(out, "results.json"), "w") as f:
                json.dump(results, f)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory, free_port):
    out = tmp_path_factory.mktemp("dist")
    mp.spawn(_worker, args=(2, free_port(), str(out)), nprocs=2, join=True)
    return out, json.loads((out / "results.json").read_text())


@pytest.mark.slow  # two processes spawn and import torch: about 20 s here
@pytest.mark.parametrize("name", list(SYSTEMS))
def test_sharded_run_equals_the_single_process_run(two_ranks, name):
    """2 ranks × 32 particles = 1 process × 64 with the same block noise, to round-off; repeatable bit for bit."""
    out, results = two_ranks
    sharded = torch.load(out / f"{name}.pt")
    noise = BlockNoise((B, M, D), 0.05, SEED, block=BLOCK)
    single = simulate(SYSTEMS[name](), initial(), t1=0.5, dt=0.05, brownian=noise).final
    assert sharded.shape == single.shape == (B, M, D)
    assert (sharded - single).abs().max() < 1e-12
    assert results[name] is True  # the same world size repeats the run bit for bit
    other = simulate(
        SYSTEMS[name](),
        initial(),
        t1=0.5,
        dt=0.05,
        brownian=BlockNoise((B, M, D), 0.05, SEED + 1, block=BLOCK),
    )
    assert (sharded - other.final).abs().max() > 1e-2  # negative control: other noise, other run


@pytest.mark.slow
def test_sliced_w2_by_distributed_quantiles(two_ranks):
    """With Q = M quantile levels the bisection finds the order statistics: the exact sliced W2 along the same
    directions (explicit sort), and the same on one rank as on two."""
    _, results = two_ranks
    g = torch.Generator().manual_seed(3)
    x = torch.randn(B, M, D, dtype=torch.float64, generator=g)
    y = 1.5 * torch.randn(B, M, D, dtype=torch.float64, generator=g) + 0.3
    u = torch.randn(8, D, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    u = u / u.norm(dim=-1, keepdim=True)
    px, py = (x @ u.mT).sort(1).values, (y @ u.mT).sort(1).values  # (B, M, L)
    exact = (px - py).square().mean((1, 2)).sqrt()  # (B,)
    one = sliced_w2_sharded(x, y, n_projections=8, n_quantiles=M, seed=5)
    assert (one - exact).abs().max() < 1e-9
    assert max(abs(a - b) for a, b in zip(results["sliced"], exact.tolist())) < 1e-9
    coarse = sliced_w2_sharded(x, y, n_projections=8, n_quantiles=M // 4, seed=5)
    assert (coarse - exact).abs().max() > 1e-6  # fewer levels: the midpoint rule, not the exact value


def test_single_process_sharded_system_is_the_system():
    """Without a process group a ShardedSystem's drift is the system's own drift (the same formulas)."""
    for make in SYSTEMS.values():
        system = make()
        x = initial()
        assert (ShardedSystem(system, M).drift(0.0, x) - system.drift(0.0, x)).abs().max() < 1e-13


def test_block_noise_is_per_block_and_reproducible():
    whole = BlockNoise((2, 8, 3), 0.1, 11, block=4)
    left = BlockNoise((2, 4, 3), 0.1, 11, block=4, start=0)
    right = BlockNoise((2, 4, 3), 0.1, 11, block=4, start=4)
    for n in range(3):
        a = whole.increment(n, 0.5).clone()
        assert torch.equal(a, torch.cat((left.increment(n, 0.5), right.increment(n, 0.5)), 1))
    z = BlockNoise((4000, 8, 1), 0.1, 0, block=4).increment(0)
    assert abs(z.var().item() - 1) < 5 * math.sqrt(2 / z.numel())  # N(0, 1): z = 5, detects ±2.5 %
    with pytest.raises(RuntimeError, match="step order"):
        whole.increment(7)
    with pytest.raises(ValueError, match="whole blocks"):
        BlockNoise((2, 6, 3), 0.1, 0, block=4)
    with pytest.raises(ValueError, match="multiple of world·block"):
        shard_range(10, 4, 0)


def test_block_noise_layout_does_not_change_the_draw():
    """B = 1 draws straight into the buffer, B > 1 through a scratch block: the same numbers per block."""
    one = BlockNoise((1, 8, 3), 0.1, 4, block=4).increment(0).clone()
    many = BlockNoise((2, 8, 3), 0.1, 4, block=4).increment(0)
    single_block = BlockNoise((1, 4, 3), 0.1, 4, block=4, start=4).increment(0)
    assert torch.equal(one[:, 4:], single_block)
    assert not torch.equal(many[:1], one)  # B = 2 draws (2, 4, 3) per block: another stream layout
