"""Tests of :mod:`meanfield.stepping.sharded`."""

from __future__ import annotations

import hashlib
import re
import threading
import warnings

import numpy as np
import pytest
import torch
import torch.distributed as dist
from helpers.fake_dist import FakeWorld

from meanfield import MeanFieldLangevin, simulate
from meanfield.drift.potentials import (
    Alignment,
    GaussianInteraction,
    Interaction,
    LogInteraction,
    Quadratic,
    QuadraticInteraction,
    RieszInteraction,
)
from meanfield.stepping.sharded import (
    BlockNoise,
    ShardedSystem,
    gather_particles,
    shard_range,
    simulate_sharded,
    sliced_w2_sharded,
)

DT = torch.float64


B, M, D = 2, 12, 2


SYSTEMS = {
    "quadratic": lambda: MeanFieldLangevin(Quadratic(1.0), QuadraticInteraction(0.8), beta=0.5),
    "alignment": lambda: MeanFieldLangevin(Quadratic(0.7), Alignment(0.6), beta=0.4),
    "gaussian": lambda: MeanFieldLangevin(Quadratic(0.5), GaussianInteraction(1.3, 0.7), beta=0.3),
    "none": lambda: MeanFieldLangevin(Quadratic(0.9), None, beta=0.2),
    # singular at 0 (the pairs j = i left out) and c outside ψ' (applied after the pair sums), per replica
    "log": lambda: MeanFieldLangevin(Quadratic(1.1), LogInteraction(torch.tensor([2.0, 0.5])), beta=0.3),
    "riesz": lambda: MeanFieldLangevin(Quadratic(1.0), RieszInteraction(1.0, 1.5), beta=0.3),
}


RING = ("gaussian", "log", "riesz")


def cloud(seed: int, n: int = M, b: int = B, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    return scale * torch.randn(b, n, D, dtype=DT, generator=torch.Generator().manual_seed(seed)) + shift


def close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-12) -> bool:
    return a.shape == b.shape and (a - b).abs().max().item() <= tol * max(1.0, b.abs().max().item())


def block_seed(seed: int, j: int) -> int:
    """``derive_seed(seed, "noise/block/<j>")`` written out: sha256, first 8 bytes little-endian, 62 bits."""
    return int.from_bytes(hashlib.sha256(f"{seed}/noise/block/{j}".encode()).digest()[:8], "little") >> 2


def exact_sliced_w2(x: torch.Tensor, y: torch.Tensor, n_projections: int, seed: int) -> torch.Tensor:
    """Sliced W2 of two equal-size clouds along the directions of ``sliced_w2_sharded``: sorted projections."""
    u = torch.randn(n_projections, x.shape[-1], generator=torch.Generator().manual_seed(seed), dtype=DT)
    u = (u / u.norm(dim=-1, keepdim=True)).numpy()
    px = np.sort(x.numpy() @ u.T, axis=1)  # (B, M, L)
    py = np.sort(y.numpy() @ u.T, axis=1)
    return torch.from_numpy(np.sqrt(((px - py) ** 2).mean((1, 2))))


def gaussian_drift_numpy(x: torch.Tensor, a: float, c: float, length: float) -> np.ndarray:
    """``−a x_i − 1/M Σ_j ∇W(x_i − x_j)``, ``W(z) = c exp(−|z|²/(2ℓ²))``, with explicit pairs."""
    z = x.numpy()[:, :, None, :] - x.numpy()[:, None, :, :]  # (B, M, M, d) x_i − x_j
    grad_w = -c / length**2 * np.exp(-(z**2).sum(-1, keepdims=True) / (2 * length**2)) * z
    return -a * x.numpy() - grad_w.mean(2)


class Clock:
    """A stand-in for the ``time`` module whose ``perf_counter`` advances by exactly 1 s per read, per thread."""

    def __init__(self) -> None:
        self.local = threading.local()

    def perf_counter(self) -> float:
        self.local.now = getattr(self.local, "now", 0.0) + 1.0
        return self.local.now


def log_drift_numpy(x: torch.Tensor, a: float, c: np.ndarray) -> np.ndarray:
    """``−a x_i + c/M Σ_{j≠i} (x_i − x_j)/|x_i − x_j|²`` (``W = −c log|z|``), with explicit pairs."""
    z = x.numpy()[:, :, None, :] - x.numpy()[:, None, :, :]  # (B, M, M, d)
    r2 = (z**2).sum(-1, keepdims=True)
    i = np.arange(x.shape[1])
    r2[:, i, i] = np.inf  # j = i left out
    return -a * x.numpy() + c[:, None, None] * (z / r2).sum(2) / x.shape[1]


def _groups(fake):
    """Two groups of two in a world of four, listed out of order: global ranks (2, 0) and (3, 1)."""
    return fake.new_group([2, 0]), fake.new_group([3, 1])


def midpoint_sliced_w2(x: torch.Tensor, y: torch.Tensor, n_projections: int, n_quantiles: int, seed: int):
    """The midpoint rule of sliced W2 with NumPy: level ``s_q = (q + ½)/Q``, the quantile of a cloud of n points
    is its order statistic ``⌈s_q·n⌉ − 1`` (the smallest value whose count reaches ``s_q·n``)."""
    u = torch.randn(n_projections, x.shape[-1], generator=torch.Generator().manual_seed(seed), dtype=DT)
    u = (u / u.norm(dim=-1, keepdim=True)).numpy()
    s = (np.arange(n_quantiles) + 0.5) / n_quantiles

    def q(z):
        p = np.sort(z.numpy() @ u.T, axis=1)  # (B, n, L)
        return p[:, np.ceil(s * z.shape[1]).astype(int) - 1]  # (B, Q, L)

    return torch.from_numpy(np.sqrt(((q(x) - q(y)) ** 2).mean((1, 2))))


def test_shard_range_by_hand():
    assert [shard_range(12, 3, r) for r in range(3)] == [(0, 4), (4, 8), (8, 12)]
    assert [shard_range(16, 2, r, block=4) for r in range(2)] == [(0, 8), (8, 16)]
    assert shard_range(24, 3, 2, block=2) == (16, 24)
    assert shard_range(5, 1, 0) == (0, 5)  # one rank holds everything
    for m, world, block in ((12, 4, 1), (48, 4, 3), (30, 5, 2)):  # every particle on exactly one rank
        ranges = [shard_range(m, world, r, block) for r in range(world)]
        owned = [i for lo, hi in ranges for i in range(lo, hi)]
        assert owned == list(range(m)) and all((hi - lo) % block == 0 for lo, hi in ranges)


def test_shard_range_refuses_shards_that_are_not_whole_blocks():
    message = (
        "M = 12 particles must split into 4 shards of whole blocks of 2: M must be a multiple of "
        "world·block = 8"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        shard_range(12, 4, 0, block=2)
    with pytest.raises(ValueError, match=re.escape("world·block = 5")):
        shard_range(12, 5, 1)
    with pytest.raises(TypeError, match="M must be an int"):
        shard_range(12.0, 2, 0)
    with pytest.raises(TypeError, match="block must be an int"):
        shard_range(12, 2, 0, block=None)
    with pytest.raises(ValueError, match="world must be ≥ 1"):
        shard_range(12, 0, 0)
    assert shard_range(12, 4, 1, block=3) == (3, 6)  # negative control: 12 = 4·3 splits


@pytest.mark.parametrize("b", [1, 3])  # B = 1 draws into the buffer, B > 1 through the scratch block
def test_block_noise_draws_block_j_from_the_seed_of_block_j(b):
    """Particles [8, 16) with blocks of 4 are the global blocks 2 and 3: each block's (B, 4, d) normals per step
    from ``Generator().manual_seed(sha256(f"{seed}/noise/block/{j}"))``, in step order."""
    seed, dt, shape = 5, 0.1, (b, 8, D)
    noise = BlockNoise(shape, dt, seed, start=8, block=4)
    gens = [torch.Generator().manual_seed(block_seed(seed, j)) for j in (2, 3)]
    for n, scale in enumerate((1.0, 0.5, 2.0)):
        want = torch.cat([torch.empty(b, 4, D, dtype=DT).normal_(0.0, scale, generator=g) for g in gens], 1)
        got = noise.increment(n, scale)
        assert got.dtype == DT and torch.equal(got, want)
    other = BlockNoise(shape, dt, seed + 1, start=8, block=4).increment(0)
    first = torch.empty(b, 4, D, dtype=DT).normal_(
        generator=torch.Generator().manual_seed(block_seed(seed, 2))
    )
    assert not torch.equal(other[:, :4], first)  # negative control: another seed, other numbers
    shifted = BlockNoise(shape, dt, seed, start=4, block=4).increment(0)  # blocks 1 and 2
    assert torch.equal(shifted[:, 4:], first) and not torch.equal(shifted[:, :4], first)


def test_block_noise_rereads_a_step_at_another_scale_and_refuses_skips():
    noise = BlockNoise((2, 4, D), 0.1, 3, block=2)
    buffer = noise.increment(0, 0.5)
    a = buffer.clone()
    again = noise.increment(0, 0.5)
    assert (
        torch.equal(again, a) and again is buffer
    )  # the same step again: its buffer, nothing redrawn or copied
    assert close(noise.increment(0, 2.0), 4 * a, 1e-15)  # rescaled, not redrawn
    noise.increment(1, 1.0)
    with pytest.raises(RuntimeError, match=re.escape("asked for step 3 after step 1")):
        noise.increment(3)
    with pytest.raises(ValueError, match=re.escape("the local particles [4, 10) must be whole blocks of 4")):
        BlockNoise((2, 6, D), 0.1, 0, start=4, block=4)
    with pytest.raises(ValueError, match=re.escape("the local particles [2, 6) must be whole blocks of 4")):
        BlockNoise((2, 4, D), 0.1, 0, start=2, block=4)
    assert BlockNoise((2, 4, D), 0.1, 0, start=8, block=4).increment(0).shape == (2, 4, D)  # control
    with pytest.raises(TypeError, match="^block must be an int, got float$"):
        BlockNoise((2, 4, D), 0.1, 0, block=2.0)
    with pytest.raises(ValueError, match="^block must be ≥ 1, got 0$"):
        BlockNoise((2, 4, D), 0.1, 0, block=0)


def test_the_default_block_is_1024_particles(monkeypatch):
    """``block = 1024`` by default, in BlockNoise and in simulate_sharded: 2048 particles over 2 ranks are one
    block each, drawn from the seed of block 0 on rank 0 and of block 1 on rank 1."""
    noise = BlockNoise((1, 2048, 1), 0.1, 9)
    assert noise.block == 1024 and len(noise.generators) == 2
    g = torch.Generator().manual_seed(block_seed(9, 1))
    assert torch.equal(noise.increment(0)[:, 1024:], torch.empty(1, 1024, 1, dtype=DT).normal_(generator=g))
    fake = FakeWorld(2).install(monkeypatch)
    system = SYSTEMS["quadratic"]()
    x0 = cloud(2, 2048, b=1)
    out = fake.run(lambda r: simulate_sharded(system, x0, t1=0.1, dt=0.05, seed=9).final)
    ref = simulate(system, x0, t1=0.1, dt=0.05, brownian=BlockNoise((1, 2048, D), 0.05, 9, block=1024))
    assert close(torch.cat(out, 1), ref.final)


def test_block_noise_on_the_device(device):
    """The generators and the increments live on ``device``: the draw of block j is the device generator's."""
    noise = BlockNoise((2, 4, D), 0.1, 3, block=2, device=device)
    got = noise.increment(0)
    assert got.device.type == torch.device(device).type and all(
        g.device.type == got.device.type for g in noise.generators
    )
    for j in range(2):
        g = torch.Generator(device=device).manual_seed(block_seed(3, j))
        want = torch.empty(2, 2, D, dtype=DT, device=device).normal_(generator=g)
        assert torch.equal(got[:, 2 * j : 2 * j + 2], want)


def test_sharded_system_refuses_what_it_cannot_shard():
    class Custom(Interaction):
        def energy(self, x):
            return x.sum(-1)

        def mean_field_grad(self, x):
            return x

    with pytest.raises(TypeError, match="must be a MeanFieldLangevin, got Quadratic"):
        ShardedSystem(Quadratic(1.0), M)
    with pytest.raises(TypeError, match="RadialInteraction .*got Custom"):
        ShardedSystem(MeanFieldLangevin(Quadratic(1.0), Custom(), beta=0.5), M)
    with pytest.raises(TypeError, match="M must be an int"):
        ShardedSystem(SYSTEMS["quadratic"](), 12.0)
    system = SYSTEMS["gaussian"]()
    sharded = ShardedSystem(system, M)  # control: a supported system is accepted
    assert (sharded.world, sharded.rank, sharded.M) == (1, 0, M)
    assert repr(sharded) == f"ShardedSystem({system!r}, M={M}, world=1)"
    assert sharded.diffusion(0.0, cloud(0)) == pytest.approx((2 * 0.3) ** 0.5, rel=1e-15)


def test_a_gloo_group_of_one_is_the_single_process(gloo_one):
    """Initialised with one rank: the drift, the run, the gather and the sliced W2 of the unsharded path."""
    x0 = cloud(1, 16)
    for name in ("quadratic", "gaussian"):
        system = SYSTEMS[name]()
        sharded = ShardedSystem(system, 16)
        assert (sharded.world, sharded.rank) == (1, 0)
        assert close(sharded.drift(0.0, x0), system.drift(0.0, x0))
        run = simulate_sharded(system, x0, t1=0.3, dt=0.05, seed=4, block=4)
        ref = simulate(system, x0, t1=0.3, dt=0.05, brownian=BlockNoise((B, 16, D), 0.05, 4, block=4))
        assert close(run.final, ref.final)
        assert sharded.exchanged == 0  # nothing travels with one rank
    assert gather_particles(x0) is x0
    y = cloud(2, 16, scale=1.5, shift=0.3)
    assert close(
        sliced_w2_sharded(x0, y, n_projections=6, n_quantiles=16, seed=3), exact_sliced_w2(x0, y, 6, 3), 1e-9
    )


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("name", list(SYSTEMS))
def test_sharded_drift_is_the_drift_of_all_particles(monkeypatch, name, world):
    """Each rank's drift on its shard = rows [start, stop) of the one-process drift on all M particles
    (``MeanFieldLangevin.drift``, and the pair sums written out with NumPy)."""
    import meanfield.stepping.sharded as distributed

    fake = FakeWorld(world).install(monkeypatch)
    monkeypatch.setattr(distributed, "time", Clock())
    system, x = SYSTEMS[name](), cloud(3)

    def rank_fn(r):
        lo, hi = shard_range(M, world, r)
        s = ShardedSystem(system, M)
        first = s.drift(0.0, x[:, lo:hi])
        assert torch.equal(s.drift(0.0, x[:, lo:hi]), first)  # a second step: the counts add up
        return (s.world, s.rank), first, s.exchanged, s.comm_seconds

    out = fake.run(rank_fn)
    assert [o[0] for o in out] == [(world, r) for r in range(world)]
    drift = torch.cat([o[1] for o in out], 1)
    assert close(drift, system.drift(0.0, x))
    m = M // world
    numbers = (
        (world - 1) * B * m * D if name in RING else {"quadratic": B * D, "alignment": B * D, "none": 0}[name]
    )
    numbers *= world > 1  # one rank sends nothing
    assert all(
        o[2] == 2 * numbers for o in out
    )  # numbers sent per step: the (B, 1, d) sum, or world − 1 hops
    sections = (world - 1 if name in RING else 0 if name == "none" else 1) * (world > 1)
    assert all(o[3] == 2 * sections for o in out)  # the clock ticks 1 s per read: 1 s per timed exchange
    if name == "gaussian":
        assert np.abs(drift.numpy() - gaussian_drift_numpy(x, 0.5, 1.3, 0.7)).max() < 1e-12
    if name == "log":
        assert np.abs(drift.numpy() - log_drift_numpy(x, 1.1, np.array([2.0, 0.5]))).max() < 1e-12
    if name != "none" and world > 1:  # negative control: each shard alone is another system
        alone = torch.cat(
            [system.drift(0.0, x[:, slice(*shard_range(M, world, r))]) for r in range(world)], 1
        )
        assert not close(alone, system.drift(0.0, x), 1e-3)


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("kind", ["quadratic", "alignment"])
def test_a_per_replica_strength_is_read_per_replica(monkeypatch, kind, world, d):
    """k (κ) one per replica, (B,) = (0.5, 2.0): the sharded drift is the one-process drift. At d = B = 2 the
    (B,) tensor broadcast against the last axis (d) gave a silently wrong drift (max error 2.8), at d = 3 a
    shape error. Control: the replica-swapped strengths give another drift."""
    x = torch.randn(2, 8, d, dtype=torch.float64, generator=torch.Generator().manual_seed(0))  # (B, M, d)

    def system(v):
        pair = QuadraticInteraction(v) if kind == "quadratic" else Alignment(v)
        return MeanFieldLangevin(Quadratic(1.0), pair, beta=0.3)

    fake = FakeWorld(world).install(monkeypatch)
    s = system(torch.tensor([0.5, 2.0]))
    out = fake.run(lambda r: ShardedSystem(s, 8).drift(0.0, x[:, slice(*shard_range(8, world, r))]))
    assert close(torch.cat(out, 1), s.drift(0.0, x), 1e-12)
    assert not close(system(torch.tensor([2.0, 0.5])).drift(0.0, x), s.drift(0.0, x), 1e-3)


def test_a_close_pair_across_two_shards_keeps_a_singular_drift_finite_in_float32(monkeypatch):
    """float32, LogInteraction(−1), M = 16 over 2 ranks, particle 0 (rank 0) and particle 8 (rank 1) 3e-4 apart:
    the ring's sums over the other shard take exact distances too (the matrix product cancelled that pair's r²
    to 0: a NaN drift); the pair's drift is that of the same points in float64 to 5 %."""
    x = torch.randn(1, 16, 2, generator=torch.Generator().manual_seed(0))  # (1, M, 2) float32
    x[0, 8] = x[0, 0] + torch.tensor([3e-4, 0.0])
    system = MeanFieldLangevin(Quadratic(1.0), LogInteraction(-1.0), beta=0.1)
    fake = FakeWorld(2).install(monkeypatch)
    out = fake.run(lambda r: ShardedSystem(system, 16).drift(0.0, x[:, slice(*shard_range(16, 2, r))]))
    drift, ref = torch.cat(out, 1), system.drift(0.0, x.double())  # (1, 16, 2)
    assert torch.isfinite(drift).all()
    pair = [0, 8]
    assert (drift[0, pair].double() - ref[0, pair]).norm() <= 0.05 * ref[0, pair].norm()


def test_the_ring_passes_every_shard_to_every_rank(monkeypatch):
    """Four ranks: each sends world − 1 = 3 times to rank + 1 and receives from rank − 1 (mod 4)."""
    fake = FakeWorld(4).install(monkeypatch)
    system, x = SYSTEMS["gaussian"](), cloud(4)
    out = fake.run(lambda r: ShardedSystem(system, M).drift(0.0, x[:, 3 * r : 3 * r + 3]))
    assert close(torch.cat(out, 1), system.drift(0.0, x))
    sends = sorted((rank, dst) for kind, rank, dst in fake.calls if kind == "isend")
    recvs = sorted((rank, src) for kind, rank, src in fake.calls if kind == "recv")
    assert sends == sorted((r, (r + 1) % 4) for r in range(4) for _ in range(3))
    assert recvs == sorted((r, (r - 1) % 4) for r in range(4) for _ in range(3))


@pytest.mark.parametrize("name", ["gaussian", "quadratic"])
def test_sharded_runs_in_two_groups_are_two_single_process_runs(monkeypatch, name):
    """Two groups of a world of four run two systems at once, each its own cloud: each group's run is the
    single-process run of its cloud (its collectives and ring stay inside the group), and the gather lands on
    the group's rank ``dst`` (a global rank through ``get_global_rank``)."""
    fake = FakeWorld(4).install(monkeypatch)
    groups = _groups(fake)
    system, N, block = SYSTEMS[name](), 16, 4
    x0 = {0: cloud(10, N), 1: cloud(11, N, scale=2.0)}

    def rank_fn(r):
        which = 0 if r in groups[0].members else 1
        g = groups[which]
        lo, hi = shard_range(N, 2, dist.get_rank(g), block)
        run = simulate_sharded(system, x0[which], t1=0.3, dt=0.05, seed=8, block=block, group=g)
        shard = simulate_sharded(
            system, x0[which][:, lo:hi], t1=0.3, dt=0.05, seed=8, block=block, group=g, M=N
        )
        return which, dist.get_rank(g), run.final, shard.final, gather_particles(run.final, group=g, dst=1)

    out = fake.run(rank_fn)
    for which in (0, 1):
        mine = sorted((o for o in out if o[0] == which), key=lambda o: o[1])
        ref = simulate(
            system, x0[which], t1=0.3, dt=0.05, brownian=BlockNoise((B, N, D), 0.05, 8, block=block)
        )
        assert close(torch.cat([o[2] for o in mine], 1), ref.final)
        assert all(torch.equal(o[2], o[3]) for o in mine)  # the global x0 or the rank's shard: the same run
        assert mine[0][4] is None and close(mine[1][4], ref.final)  # group rank 1 = global rank 0 or 1
        other = simulate(
            system, x0[which], t1=0.3, dt=0.05, brownian=BlockNoise((B, N, D), 0.05, 9, block=block)
        )
        assert not close(mine[1][4], other.final, 1e-3)  # negative control: another seed


def test_simulate_sharded_refuses_a_state_of_neither_size(monkeypatch):
    fake = FakeWorld(2).install(monkeypatch)
    message = "x0 must be the global state (B, 16, d) or this rank's shard (B, 8, d), got (2, 5, 2)"

    def rank_fn(r):
        with pytest.raises(ValueError, match=re.escape(message)):
            simulate_sharded(SYSTEMS["quadratic"](), cloud(0, 5), t1=0.1, dt=0.05, seed=1, block=4, M=16)
        with pytest.raises(ValueError, match=re.escape("world·block = 16")):
            simulate_sharded(SYSTEMS["quadratic"](), cloud(0, 12), t1=0.1, dt=0.05, seed=1, block=8)
        return r

    assert fake.run(rank_fn) == [0, 1]


def test_simulate_sharded_says_what_it_does_not_watch():
    """One process: an attractive singular interaction (``LogInteraction(-8)``), where ``simulate`` raises a
    CollapseError at t ≈ 0.16, cannot be watched sharded: ``collapse="raise"`` is refused in one line, the
    default warns once before the first step (the sharded run used to end silently); ``"ignore"`` is quiet.
    A step beyond the stability limit (Quadratic(30), dt 0.1: a·dt = 3 > 2) warns as ``simulate`` does; a
    repulsive kernel and a stable step (controls) warn of nothing."""
    from meanfield.drift.resolution import CollapseError, UnstableStepWarning

    x0 = cloud(5, 16)
    attractive = MeanFieldLangevin(Quadratic(1.0), LogInteraction(-8.0), beta=0.01)
    with pytest.raises(CollapseError):
        simulate(attractive, x0, t1=0.5, dt=0.01, generator=0, collapse="raise")
    message = "simulate_sharded cannot watch for a collapse (it needs every pair of particles on one rank)"
    with pytest.raises(ValueError, match=re.escape(message)):
        simulate_sharded(attractive, x0, t1=0.5, dt=0.01, seed=0, block=4, collapse="raise")
    with pytest.warns(RuntimeWarning, match="simulate_sharded does not watch LogInteraction"):
        simulate_sharded(attractive, x0, t1=0.05, dt=0.01, seed=0, block=4)
    unstable = MeanFieldLangevin(Quadratic(30.0), beta=0.1)
    with pytest.warns(UnstableStepWarning):
        simulate_sharded(unstable, x0, t1=0.2, dt=0.1, seed=0, block=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        simulate_sharded(attractive, x0, t1=0.05, dt=0.01, seed=0, block=4, collapse="ignore")
        repulsive = MeanFieldLangevin(Quadratic(1.0), LogInteraction(1.0), beta=0.01)
        simulate_sharded(repulsive, x0, t1=0.05, dt=0.01, seed=0, block=4)
        simulate_sharded(MeanFieldLangevin(Quadratic(3.0), beta=0.1), x0, t1=0.2, dt=0.1, seed=0, block=4)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_simulate_sharded_hands_simulate_the_shard_and_its_block_noise(monkeypatch, dtype):
    """Rank 1 of 2 with blocks of 4: ``simulate`` gets the rows [8, 16) of x0, a ShardedSystem of all 16
    particles, and the noise of blocks 2 and 3, made where x0 is (CPU, its dtype) even when the default
    device is another one, the other arguments as they were given, and no progress bar (rank 0 shows the one
    bar)."""
    import meanfield.stepping.sharded as distributed

    fake = FakeWorld(2).install(monkeypatch)
    monkeypatch.setattr(distributed, "simulate", lambda system, x, **kw: (system, x, kw))
    x0 = cloud(1, 16).to(dtype)

    def rank_fn(r):
        torch.set_default_device("meta")  # per thread: what a tensor without a device would get
        try:
            return simulate_sharded(
                SYSTEMS["quadratic"](), x0, t1=0.2, dt=0.05, seed=2, block=4, save_every=2
            )
        finally:
            torch.set_default_device(None)

    system, local, kw = fake.run(rank_fn)[1]
    assert isinstance(system, ShardedSystem) and (system.M, system.world, system.rank) == (16, 2, 1)
    assert torch.equal(local, x0[:, 8:16])
    noise = kw.pop("brownian")
    assert kw == {"t1": 0.2, "dt": 0.05, "save_every": 2, "progress": False}
    assert isinstance(noise, BlockNoise) and noise.dt == 0.05 and tuple(noise.shape) == (B, 8, D)
    assert noise._buffer.device.type == "cpu" and noise._buffer.dtype == dtype
    gens = [torch.Generator().manual_seed(block_seed(2, j)) for j in (2, 3)]
    want = torch.cat([torch.empty(B, 4, D, dtype=dtype).normal_(generator=g) for g in gens], 1)
    assert torch.equal(noise.increment(0), want)


@pytest.mark.parametrize("world, dst", [(2, 0), (3, 2), (3, 1)])
def test_gather_particles_puts_the_cloud_on_dst(monkeypatch, world, dst):
    fake = FakeWorld(world).install(monkeypatch)
    x = cloud(5)
    out = fake.run(lambda r: gather_particles(x[:, slice(*shard_range(M, world, r))], dst=dst))
    assert all((o is None) == (r != dst) for r, o in enumerate(out))
    assert torch.equal(out[dst], x)


@pytest.mark.parametrize("world", [2, 3])
def test_sliced_w2_by_distributed_quantiles_is_the_exact_sliced_w2(monkeypatch, world):
    """With Q = M levels the bisection finds the order statistics of the whole cloud: the exact sliced W2 of
    the gathered clouds along the same directions (sorted projections), whatever the shards (uneven here)."""
    x, y = cloud(6), cloud(7, scale=1.5, shift=0.3)
    alone = sliced_w2_sharded(x[:, :5], y[:, :8], n_projections=5, n_quantiles=M, seed=4)  # one process
    fake = FakeWorld(world).install(monkeypatch)
    cuts = {2: [0, 5, 12], 3: [0, 3, 4, 12]}[world]  # shards of unequal sizes: the counts are summed
    ycuts = {2: [0, 8, 12], 3: [0, 6, 9, 12]}[world]

    def rank_fn(r):
        xs, ys = x[:, cuts[r] : cuts[r + 1]], y[:, ycuts[r] : ycuts[r + 1]]
        exact = sliced_w2_sharded(xs, ys, n_projections=5, n_quantiles=M, seed=4)
        coarse = sliced_w2_sharded(xs, ys, n_projections=5, n_quantiles=M // 3, seed=4)
        return exact, coarse

    out = fake.run(rank_fn)
    want = exact_sliced_w2(x, y, 5, 4)
    assert all(close(o[0], want, 1e-9) for o in out)
    assert all(torch.equal(o[0], out[0][0]) for o in out)  # the same on every rank
    assert all(not close(o[1], want, 1e-6) for o in out)  # negative control: fewer levels, the midpoint rule
    assert not close(alone, want, 1e-3)  # negative control: one shard's quantiles


def test_sliced_w2_in_two_groups_uses_each_groups_cloud(monkeypatch):
    fake = FakeWorld(4).install(monkeypatch)
    groups = _groups(fake)
    clouds = {0: (cloud(6), cloud(7, scale=1.5)), 1: (cloud(8, shift=1.0), cloud(9, scale=0.5))}

    def rank_fn(r):
        which = 0 if r in groups[0].members else 1
        lo, hi = shard_range(M, 2, dist.get_rank(groups[which]))
        x, y = clouds[which]
        return which, sliced_w2_sharded(
            x[:, lo:hi], y[:, lo:hi], n_projections=4, n_quantiles=M, seed=1, group=groups[which]
        )

    for which, sw in fake.run(rank_fn):
        assert close(sw, exact_sliced_w2(*clouds[which], 4, 1), 1e-9)


def test_one_group_computes_while_the_other_does_not(monkeypatch):
    """Only the ranks of one group call ``sliced_w2_sharded``: every collective stays in that group (a
    collective on the default group would wait for ranks that never come)."""
    fake = FakeWorld(4).install(monkeypatch)
    groups = _groups(fake)
    x, y = cloud(6), cloud(7, scale=1.5)

    def rank_fn(r):
        if r not in groups[0].members:
            return None
        lo, hi = shard_range(M, 2, dist.get_rank(groups[0]))
        return sliced_w2_sharded(
            x[:, lo:hi], y[:, lo:hi], n_projections=4, n_quantiles=M, seed=1, group=groups[0]
        )

    out = fake.run(rank_fn)
    assert out[1] is None and out[3] is None
    assert close(out[0], exact_sliced_w2(x, y, 4, 1), 1e-9) and torch.equal(out[0], out[2])


def test_the_ring_sums_on_the_torch_backend_whatever_auto_picks(monkeypatch):
    """Where ``"auto"`` would pick KeOps (a GPU with pykeops), the ring still sums with torch: the only backend
    that leaves out the pairs j = i of a singular kernel. Here ``"auto"`` is made to mean KeOps, which this
    machine does not have: a call that left the backend to ``"auto"`` fails."""
    import meanfield.drift.pairwise as pairwise

    if pairwise.keops_available():
        pytest.skip("pykeops is installed: a KeOps call would not fail here")
    system, x = SYSTEMS["log"](), cloud(3)
    want = system.drift(0.0, x)
    real = pairwise.resolve_backend
    monkeypatch.setattr(
        pairwise, "resolve_backend", lambda b, d, device="cpu": real("keops" if b == "auto" else b, d, device)
    )
    with pytest.raises(ValueError, match="needs pykeops"):
        pairwise.radial_sum(x, x, lambda r2: r2, x)  # control: "auto" now asks for KeOps
    fake = FakeWorld(2).install(monkeypatch)
    out = fake.run(lambda r: ShardedSystem(system, M).drift(0.0, x[:, 6 * r : 6 * r + 6]))
    assert close(torch.cat(out, 1), want)


def test_the_sharded_diffusion_is_the_systems_at_each_time_and_replica():
    """σ = sqrt(2β_t): a schedule read at the time asked, per-replica β as (B, 1, 1)."""
    x = cloud(0)
    scheduled = ShardedSystem(MeanFieldLangevin(Quadratic(1.0), None, beta=lambda t: 0.5 + t), M)
    assert scheduled.diffusion(0.25, x) == pytest.approx(1.5**0.5, rel=1e-15)
    assert scheduled.diffusion(0.0, x) == pytest.approx(1.0, rel=1e-15)  # control: another time, another σ
    per_replica = ShardedSystem(
        MeanFieldLangevin(Quadratic(1.0), None, beta=torch.tensor([0.3, 0.8], dtype=DT)), M
    )
    sigma = per_replica.diffusion(0.0, x)
    assert sigma.shape == (B, 1, 1) and close(
        sigma.flatten(), torch.tensor([0.6, 1.6], dtype=DT).sqrt(), 1e-15
    )


def test_defaults_of_gather_and_sliced_w2(monkeypatch):
    """``gather_particles`` gathers on rank 0 by default; ``sliced_w2_sharded`` uses 64 directions from seed 0
    and 256 levels by default: with 256 points in all it is the exact sliced W2 along those directions."""
    x, y = cloud(20, 256, b=1), cloud(21, 256, b=1, scale=1.4, shift=0.2)
    want = exact_sliced_w2(x, y, 64, 0)
    assert close(sliced_w2_sharded(x, y), want, 1e-9)
    assert not close(sliced_w2_sharded(x, y, iterations=20), want, 1e-9)  # control: fewer halvings, coarser
    fake = FakeWorld(2).install(monkeypatch)
    out = fake.run(lambda r: gather_particles(x[:, 128 * r : 128 * r + 128]))
    assert out[1] is None and torch.equal(out[0], x)


def test_simulate_sharded_on_the_device(device):
    """The run stays on x0's device, its noise made there: the single-process run with that device's noise."""
    system, x0 = SYSTEMS["quadratic"](), cloud(1, 8).to(device)
    run = simulate_sharded(system, x0, t1=0.2, dt=0.05, seed=2, block=4)
    noise = BlockNoise((B, 8, D), 0.05, 2, block=4, device=device)
    ref = simulate(system, x0, t1=0.2, dt=0.05, brownian=noise)
    assert run.final.device == x0.device and close(run.final, ref.final)


def test_the_bisection_resolution_is_the_range_over_two_to_the_iterations():
    """On [−1, 1] the k-th halving leaves the quantile at the smallest grid point ``−1 + j·2^{1−k}`` at or
    above it: a middle point at 10⁻²⁰ is found as 2⁻⁵⁹ after the default 60 halvings (2⁻⁶⁰ after 61), while
    0, a grid point, is found exactly; so SW = 2⁻⁵⁹/√3 between {−1, 10⁻²⁰, 1} and {−1, 0, 1}."""
    u = torch.randn(1, 1, generator=torch.Generator().manual_seed(0), dtype=DT)
    s = 1.0 if u.item() > 0 else -1.0  # the one direction of d = 1 is ±1: put the points where u·x is as said
    x = s * torch.tensor([[[-1.0], [1e-20], [1.0]]], dtype=DT)
    y = s * torch.tensor([[[-1.0], [0.0], [1.0]]], dtype=DT)
    sw = sliced_w2_sharded(x, y, n_projections=1, n_quantiles=3)
    assert sw.item() * 2.0**60 * 3**0.5 == pytest.approx(2.0, rel=1e-12)  # in units of 2⁻⁶⁰/√3
    finer = sliced_w2_sharded(x, y, n_projections=1, n_quantiles=3, iterations=61)
    assert finer.item() * 2.0**60 * 3**0.5 == pytest.approx(1.0, rel=1e-12)  # control: one halving more


def test_sliced_w2_with_fewer_levels_is_the_midpoint_rule():
    """Q = 5 levels for 10 and 15 points: ``s·n`` hits whole counts (1, 3, …), where the smallest value whose
    count reaches it is exactly one order statistic."""
    x, y = cloud(30, 10), cloud(31, 15, scale=1.3, shift=0.4)
    want = midpoint_sliced_w2(x, y, 7, 5, 2)
    assert close(sliced_w2_sharded(x, y, n_projections=7, n_quantiles=5, seed=2), want, 1e-12)
    assert not close(sliced_w2_sharded(x, y, n_projections=7, n_quantiles=6, seed=2), want, 1e-3)  # control


def test_sliced_w2_in_float32():
    x, y = cloud(6), cloud(7, scale=1.5, shift=0.3)
    sw = sliced_w2_sharded(x.float(), y.float(), n_projections=5, n_quantiles=M, seed=4)
    assert sw.dtype == torch.float32 and close(sw.double(), exact_sliced_w2(x, y, 5, 4), 1e-6)


def test_sliced_w2_on_the_device(device):
    x, y = cloud(6), cloud(7, scale=1.5, shift=0.3)
    sw = sliced_w2_sharded(x.to(device), y.to(device), n_projections=5, n_quantiles=M, seed=4)
    assert sw.device.type == torch.device(device).type and close(sw.cpu(), exact_sliced_w2(x, y, 5, 4), 1e-9)


def test_a_group_of_one_rank_makes_no_collective_call(monkeypatch):
    """Each rank of a world of two in a group of its own: its sliced W2 is its own cloud's, with no all-reduce
    (the collectives are skipped for a group of one, whatever the size of the whole world)."""
    fake = FakeWorld(2).install(monkeypatch)
    alone = [fake.new_group([0]), fake.new_group([1])]
    clouds = [(cloud(6), cloud(7)), (cloud(8), cloud(9, shift=1.0))]
    out = fake.run(
        lambda r: sliced_w2_sharded(*clouds[r], n_projections=4, n_quantiles=M, seed=1, group=alone[r])
    )
    assert all(close(out[r], exact_sliced_w2(*clouds[r], 4, 1), 1e-9) for r in range(2))
    assert fake.calls == []
