r"""One particle system over many processes: particles sharded over the ranks of a ``torch.distributed`` group.

Each rank holds the particles ``[start, stop)`` of every replica, a state ``(B, m, d)`` with ``m = M/world``.
The drift of mean-field Langevin dynamics needs only averages over the particle law, which are collectives:

- ``QuadraticInteraction``/``Alignment``: the centre of mass $\bar{x} = 1/M \sum_j x_j$ is one ``all_reduce`` of
  $B\cdot d$ numbers per step;
- a ``RadialInteraction`` (any pair potential $\psi(|z|^2)$): $1/M \sum_j 2\psi'(r^2_{ij})(x_i - x_j)$ is accumulated
  while the shards travel around a ring of ``send``/``recv`` ($\text{ world } - 1$ hops of $B\cdot m\cdot d$ numbers per step),
  each rank holding two shards at a time, never all M particles.

The noise of particle ``i`` is drawn from the generator of its **block** (``block`` consecutive particles,
seeded by ``derive_seed(seed, "noise/block/<j>")``), so a particle gets the same increments whichever rank
holds it: a run's law — its increments, particle by particle — does not depend on the number of ranks, and a
sharded run equals the single-process run with the same `BlockNoise` up to the summation order of the
collectives (round-off, ~1e-15 relative); for a fixed world size it is bit for bit reproducible.

Launch (one process per rank, gloo on CPU, NCCL on GPU)::

    torchrun --nproc_per_node=2 my_script.py      # the script calls init_process_group and simulate_sharded

Bytes moved per step and rank (float64): $8\cdot B\cdot d\cdot 2$ for a mean (all-reduce of a ``(B, d)`` sum; a ring
all-reduce moves about twice its size), $8\cdot B\cdot m\cdot d\cdot(\mathrm{world} - 1)$ for a pair potential (the ring), against
$O(B\cdot m\cdot M\cdot d)$ flops of pair work per rank: the pair kernel is compute-bound for $M \gg \text{ world }$.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import torch
import torch.distributed as dist

from .._checks import check_int
from ..drift.potentials import Alignment, QuadraticInteraction, RadialInteraction
from ..drift.resolution import UnstableStepWarning, resolution_radius, unstable_step
from ..drift.systems import MeanFieldLangevin, ParticleSystem
from ..seeds import derive_seed
from .brownian import NoiseSource
from .simulate import Trajectory, simulate
from .solvers import get_solver

__all__ = [
    "BlockNoise",
    "ShardedSystem",
    "shard_range",
    "simulate_sharded",
    "gather_particles",
    "sliced_w2_sharded",
]


def _world(group: dist.ProcessGroup | None) -> tuple[int, int]:
    if not dist.is_available() or not dist.is_initialized():
        return 1, 0
    return dist.get_world_size(group), dist.get_rank(group)


def shard_range(M: int, world: int, rank: int, block: int = 1) -> tuple[int, int]:
    """Particles ``[start, stop)`` of ``rank``: M split into ``world`` equal shards of whole blocks.

    Raises:
        ValueError: unless ``M`` is a multiple of ``world·block`` (equal shards keep the ring simple and make
            every shard a whole number of noise blocks).
    """
    M, world, block = check_int("M", M), check_int("world", world), check_int("block", block)
    if M % (world * block):
        raise ValueError(
            f"M = {M} particles must split into {world} shards of whole blocks of {block}: M must be a multiple "
            f"of world·block = {world * block}"
        )
    m = M // world
    return rank * m, (rank + 1) * m


class BlockNoise(NoiseSource):
    """Gaussian increments of particles ``[start, start + m)`` drawn block by block.

    Block ``j`` (particles ``[j·block, (j+1)·block)``) has its own generator, seeded by
    ``derive_seed(seed, f"noise/block/{j}")``, which draws ``(B, block, d)`` per step, in step order.

    Args:
        shape: the local noise shape ``(B, m, d)``; ``m`` a multiple of ``block``.
        dt: the step.
        seed: the run's seed.
        start: the global index of the first local particle (a multiple of ``block``).
        block: particles per block.
        dtype: of the increments.
        device: of the increments.
    """

    def __init__(
        self,
        shape: tuple[int, int, int],
        dt: float,
        seed: int,
        *,
        start: int = 0,
        block: int = 1024,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(shape, dt)
        B, m, d = self.shape
        block = check_int("block", block)
        if m % block or start % block:
            raise ValueError(f"the local particles [{start}, {start + m}) must be whole blocks of {block}")
        first = start // block
        self.generators = [
            torch.Generator(device=device).manual_seed(derive_seed(seed, f"noise/block/{first + j}"))
            for j in range(m // block)
        ]
        self.block = block
        self._buffer = torch.empty(self.shape, dtype=dtype, device=device)  # (B, m, d)
        self._scratch = torch.empty((B, block, d), dtype=dtype, device=device)  # (B, block, d)
        self._n, self._scale = -1, 1.0

    def increment(self, n: int, scale: float = 1.0) -> torch.Tensor:
        if n == self._n:
            return self._buffer if scale == self._scale else self._buffer * (scale / self._scale)
        if n != self._n + 1:
            raise RuntimeError(
                f"BlockNoise must be read in step order: asked for step {n} after step {self._n}"
            )
        for j, g in enumerate(self.generators):  # drawn contiguous: torch's draw depends on the layout
            part = self._buffer[:, j * self.block : (j + 1) * self.block]  # (B, block, d)
            if part.is_contiguous():  # B = 1: straight into the buffer
                part.normal_(0.0, scale, generator=g)
            else:
                part.copy_(self._scratch.normal_(0.0, scale, generator=g))
        self._n, self._scale = n, scale
        return self._buffer


class ShardedSystem(ParticleSystem):
    """A [`MeanFieldLangevin`][meanfield.drift.systems.MeanFieldLangevin] whose M particles are sharded over the ranks of ``group``.

    ``drift(t, x)`` takes this rank's shard ``(B, m, d)`` and returns its drift ``−∇V(x_i) − 1/M Σ_j ∇W(x_i −
    x_j)`` with the sum over all M particles, by collectives (module docstring). Every rank must call it at
    every step (a collective).

    Args:
        system: the global system (its confinement, interaction, temperature and projection).
        M: the global number of particles.
        group: the process group (``None``: the default group).
    """

    def __init__(self, system: MeanFieldLangevin, M: int, group: dist.ProcessGroup | None = None) -> None:
        if not isinstance(system, MeanFieldLangevin):
            raise TypeError(f"system must be a MeanFieldLangevin, got {type(system).__name__}")
        interaction = system.interaction
        if interaction is not None and not isinstance(
            interaction, (QuadraticInteraction, Alignment, RadialInteraction)
        ):
            raise TypeError(
                f"ShardedSystem supports QuadraticInteraction, Alignment and RadialInteraction (any pair potential "
                f"ψ(|z|²)), got {type(interaction).__name__}"
            )
        self.system, self.M, self.group = system, check_int("M", M), group
        self.noise, self.projection = system.noise, system.projection
        self.world, self.rank = _world(group)
        self.exchanged = 0  # numbers sent by this rank (collectives and ring), for the cost model
        self.comm_seconds = 0.0  # wall time inside collectives and the ring's send/recv

    def _all_sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            start = time.perf_counter()
            dist.all_reduce(t, group=self.group)
            self.comm_seconds += time.perf_counter() - start
            self.exchanged += t.numel()
        return t

    def _peer(self, rank: int) -> int:
        return dist.get_global_rank(self.group, rank) if self.group is not None else rank

    def _ring_pair_sums(self, x: torch.Tensor) -> torch.Tensor:
        r"""$\sum_j g_{ij} (1, x_j)$ over all M particles, $g_{ij} = 2\psi'(|x_i - x_j|^2)$: ``(B, m, 1 + d)``."""
        from .._replicas import at
        from ..drift.pairwise import radial_sum

        interaction: RadialInteraction = self.system.interaction
        # 2ψ'(r²) = c·φ(s·r²), as RadialInteraction.mean_field_grad reads it (Log and Riesz keep c outside ψ')
        _, phi, scale, _, c = interaction._kernels()
        singular = not interaction.self_pair  # −log|z|, Riesz: close pairs across shards need exact distances

        def pair_sums(
            y: torch.Tensor, exclude_self: bool = False
        ) -> torch.Tensor:  # (B, n, d) -> (B, m, 1+d)
            values = torch.cat((torch.ones_like(y[..., :1]), y), -1)  # (B, n, 1 + d)
            return radial_sum(
                x, y, phi, values, scale=scale, backend="torch", exclude_self=exclude_self, singular=singular
            )[0]

        # the pairs j = i lie in the own shard only: left out when the system leaves them out (a kernel
        # singular at 0, −log|z| or Riesz, has self_pair False)
        total = pair_sums(x, exclude_self=not interaction.self_pair)  # (B, m, 1 + d)
        held = x.contiguous()
        for _ in range(self.world - 1):
            incoming = torch.empty_like(held)  # (B, m, d)
            start = time.perf_counter()
            send = dist.isend(held, self._peer((self.rank + 1) % self.world), group=self.group)
            dist.recv(incoming, self._peer((self.rank - 1) % self.world), group=self.group)
            send.wait()
            self.comm_seconds += time.perf_counter() - start
            self.exchanged += held.numel()
            held = incoming
            total += pair_sums(held)
        return total * at(c, x, "c")  # (B, m, 1 + d)

    def drift(self, t: float, x: torch.Tensor) -> torch.Tensor:
        system = self.system
        b = system.confinement.grad(x)  # (B, m, d)
        interaction = system.interaction
        if isinstance(interaction, (QuadraticInteraction, Alignment)):
            from .._replicas import at

            centre = self._all_sum(x.sum(1, keepdim=True)) / self.M  # (B, 1, d) x̄
            b = b + (  # k, κ: a number or one per replica (B,), read as (B, 1, 1)
                at(interaction.k, x, "k") * (x - centre)
                if isinstance(interaction, QuadraticInteraction)
                else -at(interaction.kappa, x, "kappa") * centre
            )
        elif interaction is not None:
            sums = self._ring_pair_sums(x)  # (B, m, 1 + d)
            b = b + (x * sums[..., :1] - sums[..., 1:]) / self.M  # (B, m, d)
        return -b

    def diffusion(self, t: float, x: torch.Tensor) -> float:
        return self.system.diffusion(t, x)

    def check_state(self, x: torch.Tensor) -> None:
        self.system.check_state(x)  # per-replica parameters: the shard has the global state's B

    def __repr__(self) -> str:
        return f"ShardedSystem({self.system!r}, M={self.M}, world={self.world})"


def simulate_sharded(
    system: MeanFieldLangevin,
    x0: torch.Tensor,
    *,
    t1: float,
    dt: float,
    seed: int,
    block: int = 1024,
    group: dist.ProcessGroup | None = None,
    M: int | None = None,
    **kwargs: Any,
) -> Trajectory:
    """[`simulate`][meanfield.stepping.simulate.simulate] of ``system`` with its M particles sharded over ``group``.

    Args:
        system: the global system.
        x0: the **global** initial state ``(B, M, d)`` (each rank keeps its shard; equal on every rank), or this
            rank's shard ``(B, M/world, d)`` with ``M`` given.
        t1: as in ``simulate``.
        dt: as in ``simulate``.
        seed: the run's seed (the noise of block j comes from ``derive_seed(seed, "noise/block/<j>")``). Each
            call starts the blocks' streams afresh: a run continued by a second call from the first's final
            state must take another seed (e.g. ``derive_seed(seed, "segment/1")``), or it replays the first
            call's increments.
        block: particles per noise block; ``M`` must be a multiple of ``world·block``.
        group: the process group (``None``: the default one; a single process when none is initialised).
        M: the global number of particles (default ``x0.shape[1]``: ``x0`` is the global state).
        **kwargs: passed to ``simulate`` (``save_every``, ``solver``, …).

    Returns:
        This rank's trajectory ``(S, B, m, d)``. With one process it equals ``simulate(system, x0,
        brownian=BlockNoise(...))``.

    The unstable-step warning of ``simulate`` is given for the global system. Its collapse watch is not: it
    needs every pair of particles on one rank. For an attractive singular interaction (``LogInteraction`` or
    ``RieszInteraction`` with ``c < 0``, where ``simulate`` watches for pairs closer than the resolution radius)
    a ``RuntimeWarning`` says so once, before the first step;
    ``collapse="raise"`` is refused. Watch the gathered cloud yourself
    ([`gather_particles`][meanfield.stepping.sharded.gather_particles],
    [`close_pairs`][meanfield.drift.resolution.close_pairs]) where it matters.

    Raises:
        ValueError: ``x0`` is neither the global state nor this rank's shard; ``collapse="raise"`` for an
            attractive singular interaction.
    """
    world, rank = _world(group)
    M = x0.shape[1] if M is None else M
    start, stop = shard_range(M, world, rank, block)
    local = x0[:, start:stop] if x0.shape[1] == M else x0  # (B, m, d)
    if local.shape[1] != stop - start:
        raise ValueError(
            f"x0 must be the global state (B, {M}, d) or this rank's shard (B, {stop - start}, d), got {tuple(x0.shape)}"
        )
    if resolution_radius(system, M, dt) is not None:
        if kwargs.get("collapse") == "raise":
            raise ValueError(
                "simulate_sharded cannot watch for a collapse (it needs every pair of particles on one rank): "
                "collapse='raise' is not available; gather the particles and use close_pairs"
            )
        if kwargs.get("collapse") != "ignore":
            warnings.warn(
                f"simulate_sharded does not watch {system.interaction!r} for a collapse (attractive and "
                "singular; the watch needs every pair on one rank): gather the particles and use close_pairs",
                RuntimeWarning,
                stacklevel=2,
            )
        kwargs["collapse"] = "ignore"  # the shard's own pairs would be a watch of another system
    unstable = unstable_step(system, local, dt, get_solver(kwargs.get("solver", "euler")).name)
    if unstable is not None:
        warnings.warn(unstable, UnstableStepWarning, stacklevel=2)
    sharded = ShardedSystem(system, M, group)
    noise = BlockNoise(
        tuple(local.shape), dt, seed, start=start, block=block, dtype=local.dtype, device=local.device
    )
    if rank:
        kwargs.setdefault("progress", False)  # one bar (meanfield.progress): rank 0's
    return simulate(sharded, local, t1=t1, dt=dt, brownian=noise, **kwargs)


def gather_particles(
    x: torch.Tensor, group: dist.ProcessGroup | None = None, dst: int = 0
) -> torch.Tensor | None:
    """The global cloud ``(B, M, d)`` on rank ``dst`` (``None`` elsewhere), from every rank's shard ``(B, m, d)``:
    for the exact Wasserstein methods, which need every point in one place."""
    world, rank = _world(group)
    if world == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(world)] if rank == dst else None
    dist.gather(
        x.contiguous(), parts, dst=dist.get_global_rank(group, dst) if group is not None else dst, group=group
    )
    return torch.cat(parts, 1) if rank == dst else None


def sliced_w2_sharded(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    n_projections: int = 64,
    n_quantiles: int = 256,
    seed: int = 0,
    group: dist.ProcessGroup | None = None,
    iterations: int = 60,
) -> torch.Tensor:
    r"""Sliced W2 between two sharded clouds by distributed quantiles, without gathering them.

    $SW2^2 = \mathbb{E}_u \int_0^1 (F_{u\cdot x}^{-1}(s) - F_{u\cdot y}^{-1}(s))^2 ds$ over directions ``u`` uniform on the sphere,
    estimated with ``n_projections`` directions (the same on every rank) and the midpoint rule at
    $s_q = (q + \tfrac12)/Q$, ``Q = n_quantiles``. Each quantile is found by bisection on the value: one
    ``all_reduce`` of the counts $\#\{u\cdot x_i \le v\}$ per iteration, for all directions and levels at once
    (``iterations`` halvings of the projected range: error ``range·2^{−iterations}``). The midpoint rule's
    error is ``O(1/Q)`` for smooth laws; when both clouds have exactly ``Q`` points in all, the levels hit the
    order statistics and the result is the exact sliced W2 of the two clouds along those directions.

    Args:
        x: this rank's shard $(B, m_x, d)$ of the first law.
        y: this rank's shard $(B, m_y, d)$ of the second.

    Returns:
        ``SW2`` per replica, ``(B,)``, equal on every rank.
    """
    B, _, d = x.shape
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(n_projections, d, generator=g, dtype=torch.float64).to(x)  # (L, d)
    u = u / u.norm(dim=-1, keepdim=True)
    levels = (torch.arange(n_quantiles, dtype=x.dtype, device=x.device) + 0.5) / n_quantiles  # (Q,)

    world, _ = _world(group)

    def quantiles(z: torch.Tensor) -> torch.Tensor:  # (B, m, d) -> (B, L, Q)
        p = (z @ u.mT).mT.contiguous().sort(-1).values  # (B, L, m) sorted projections of this shard
        n = torch.tensor([float(z.shape[1])], dtype=x.dtype, device=x.device)
        lo, hi = p[..., 0].clone(), p[..., -1].clone()  # (B, L)
        if world > 1:
            dist.all_reduce(n, group=group)
            dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=group)
            dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=group)
        lo = lo[..., None].expand(B, n_projections, n_quantiles).contiguous()  # (B, L, Q)
        hi = hi[..., None].expand(B, n_projections, n_quantiles).contiguous()  # (B, L, Q)
        target = levels * n  # (Q,) counts
        for _ in range(iterations):
            mid = 0.5 * (lo + hi)  # (B, L, Q)
            count = torch.searchsorted(p, mid, right=True).to(x.dtype)  # (B, L, Q) #{p ≤ mid} on this rank
            if world > 1:
                dist.all_reduce(count, group=group)
            below = count < target  # the quantile lies above mid
            lo = torch.where(below, mid, lo)
            hi = torch.where(below, hi, mid)
        return hi  # (B, L, Q): the smallest value whose count reaches s·n, to the bisection's resolution

    diff = quantiles(x) - quantiles(y)  # (B, L, Q)
    return diff.square().mean((1, 2)).sqrt()  # (B,)
