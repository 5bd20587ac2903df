r"""The noise of a Langevin step: one flat standard normal draw, counter-based blocks, and its addition.

Per step, the buckets with noise share one flat draw $\xi \sim N(0, I)$ per (device, dtype) from the optimizer's
own generator ([`start_noise`][meanfield.optim.noise.start_noise]), split into views, one per bucket; a bucket of a sharded layer takes its
rows of the draw of all ``M`` particles ([`local_noise`][meanfield.optim.noise.local_noise]), so that every particle moves as in one process.
With ``noise_block = k`` a bucket's noise comes instead from counter-based generators, one per block of ``k``
particles and step ([`block_noise`][meanfield.optim.noise.block_noise]). [`add_noise`][meanfield.optim.noise.add_noise] adds $\sqrt{2\beta_t \eta_{\mathrm{eff}}} \odot \xi$.

torch's CPU ``normal_`` runs on one thread and dominates a step on the CPU, so a large CPU draw runs in a
background thread ([`meanfield._background`][meanfield._background]) while the caller applies the drift ([`NoiseDraw`][meanfield.optim.noise.NoiseDraw]); the
numbers drawn are the same either way (same generators, same order).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import NamedTuple

import torch

from meanfield import _background
from meanfield.optim.buckets import Bucket
from meanfield.optim.step_stats import Record
from meanfield.seeds import derive_seed

__all__ = [
    "NoiseDraw",
    "NoisePlan",
    "NoiseSource",
    "noise_plan",
    "start_noise",
    "draw_size",
    "block_noise",
    "local_noise",
    "add_noise",
]

Kind = tuple[torch.device, torch.dtype]


def draw_size(b: Bucket) -> int:
    """Numbers of the step's shared draw for this bucket: ``n``, the full ``(M, …)`` sizes when sharded, 0
    with block noise (drawn by [`block_noise`][meanfield.optim.noise.block_noise])."""
    if b.block:
        return 0
    if b.rows is None:
        return b.n
    start, stop, M = b.rows
    return sum(p.numel() // (stop - start) * M for p in b.params)


def block_noise(b: Bucket, seed: int, group_index: int, step: int) -> torch.Tensor:
    """The noise ``(n,)`` of this bucket's particles, block by block: block ``j`` from a generator seeded by
    ``derive_seed(seed, f"noise/{group_index}/{j}/{step}{b.stream}")``, drawing every parameter's rows of the
    block in order (the same numbers whichever process holds the block). ``b.stream`` tells apart the buckets of
    one group (another dtype or device): ``""`` for the bucket that holds the group's first parameter, else
    ``/param{i}``, ``i`` the index of its first parameter in the group (the same on every process)."""
    start, stop = (b.rows[0], b.rows[1]) if b.rows is not None else (0, b.params[0].shape[0])
    p0 = b.params[0]
    out = torch.empty(b.n, dtype=p0.dtype, device=p0.device)  # (n,)
    views = b.views(out, range(len(b.params)))  # [(rows, …)]
    k = b.block
    generator = torch.Generator(device=p0.device)
    for j in range(start // k, stop // k):
        generator.manual_seed(derive_seed(seed, f"noise/{group_index}/{j}/{step}{b.stream}"))
        a = j * k - start
        for v in views:
            v[a : a + k].normal_(generator=generator)  # (k, …) ξ ~ N(0, I)
    return out


def local_noise(b: Bucket, full: torch.Tensor) -> torch.Tensor:
    """This rank's rows of the full draw ``full`` (``(draw_size(b),)``), flat like the bucket: ``(n,)``."""
    if b.rows is None:
        return full
    start, stop, M = b.rows
    parts, offset = [], 0
    for p in b.params:
        size = p.numel() // (stop - start) * M
        parts.append(full[offset : offset + size].view(M, -1)[start:stop].reshape(-1))  # (numel,)
        offset += size
    return torch.cat(parts)  # (n,)


def fill_normal(jobs: Sequence[tuple[torch.Tensor, torch.Generator]]) -> None:
    """Fill each ``flat`` with ``N(0, 1)`` numbers from its generator, in order."""
    for flat, generator in jobs:  # in order: kinds sharing a generator draw in the same sequence always
        flat.normal_(generator=generator)  # (n,) ξ ~ N(0, I)


class NoiseDraw:
    """The standard normal draws of one step, one flat buffer per (device, dtype).

    torch's CPU ``normal_`` runs on one thread. When the CPU draws hold ``≥ _background.OVERLAP_MIN``
    numbers (and torch may use two threads or more) they run in a background thread
    ([`meanfield._background`][meanfield._background]) while the caller applies the drift on the other cores; [`wait`][meanfield.optim.noise.NoiseDraw.wait]
    joins it. The numbers drawn are the same either way (same
    generators, same order).

    Args:
        jobs: ``(flat, generator)`` pairs, ``flat`` of shape ``(n,)`` to fill with ``N(0, 1)``.
        views: the per-bucket slices of the flat buffers (what the caller reads after [`wait`][meanfield.optim.noise.NoiseDraw.wait]).
    """

    def __init__(self, jobs: list[tuple[torch.Tensor, torch.Generator]], views: list[torch.Tensor]) -> None:
        self.views = views
        self._saved = {id(g): (g, g.get_state()) for _, g in jobs}
        cpu = [(flat, g) for flat, g in jobs if flat.device.type == "cpu"]
        fill_normal([(flat, g) for flat, g in jobs if flat.device.type != "cpu"])  # asynchronous anyway
        self._pending: _background.Pending | None = None
        if _background.pays(sum(flat.numel() for flat, _ in cpu)):
            self._pending = _background.submit(fill_normal, cpu)
        else:
            fill_normal(cpu)

    def wait(self) -> None:
        """Block until every buffer is drawn (re-raises an error of the background draw)."""
        if self._pending is not None:
            self._pending.result()
            self._pending = None

    def undo(self) -> None:
        """Wait for the draw (whatever it raised), then put the generators back as they were before it."""
        pending, self._pending = self._pending, None
        _background.abandon(pending, self._saved.values())


def noise_plan(
    noisy: Sequence[tuple[Bucket, list[int], int, int]],
    buffers: dict[Kind, torch.Tensor],
    generator: Callable[[torch.device], torch.Generator],
) -> tuple[list[tuple[torch.Tensor, torch.Generator]], list[torch.Tensor]]:
    """The step's draws without drawing: ``(jobs, views)``, one ``(flat, generator)`` job per (device, dtype)
    over ``noisy``'s buckets and one view per bucket (see [`start_noise`][meanfield.optim.noise.start_noise]). The views depend only on the
    buckets, so an optimizer keeps them from step to step while its buckets do not change."""
    sizes: dict[Kind, int] = {}
    for b, *_ in noisy:
        kind = (b.params[0].device, b.params[0].dtype)
        sizes[kind] = sizes.get(kind, 0) + draw_size(b)
    flats = {}
    for kind, n in sizes.items():
        buffer = buffers.get(kind)
        if buffer is None or buffer.numel() < n:
            buffer = torch.empty(n, device=kind[0], dtype=kind[1])  # (n,)
            buffers[kind] = buffer
        flats[kind] = buffer[:n]  # (n,) to hold ξ ~ N(0, I)
    used = dict.fromkeys(sizes, 0)
    views = []
    for b, *_ in noisy:
        kind = (b.params[0].device, b.params[0].dtype)
        views.append(flats[kind][used[kind] : used[kind] + draw_size(b)])  # (draw_size_b,)
        used[kind] += draw_size(b)
    return [(flat, generator(kind[0])) for kind, flat in flats.items()], views


def start_noise(
    noisy: Sequence[tuple[Bucket, list[int], int, int]],
    buffers: dict[Kind, torch.Tensor],
    generator: Callable[[torch.device], torch.Generator],
) -> NoiseDraw:
    """Start the step's standard normal draws: one flat draw per (device, dtype) over ``noisy``'s buckets.

    Args:
        noisy: ``(bucket, index, group index, the group's step)`` of every bucket that gets noise this step.
        buffers: the optimizer's reusable flat buffers, one per (device, dtype); grown here when too small.
        generator: the optimizer's generator of a device.

    Returns:
        A [`NoiseDraw`][meanfield.optim.noise.NoiseDraw] whose ``views[j]`` (``(draw_size_j,)``) is the noise of ``noisy[j]``'s bucket: for
        a sharded bucket (``particle_rows``) the draw of all ``M`` particles, of which [`local_noise`][meanfield.optim.noise.local_noise]
        takes this rank's rows, so that the rank moves its particles exactly as the single process would.
    """
    return NoiseDraw(*noise_plan(noisy, buffers, generator))


def add_noise(record: Record, xi: torch.Tensor, xi_views: list[torch.Tensor] | None = None) -> None:
    """Add ``sqrt(2β_t η_eff) ξ`` (or ``sqrt(2β_t lr) ξ``) to the record's parameters; ``xi``: ``(n,)``;
    ``xi_views``: its views shaped like every parameter of the bucket, when the caller keeps them."""
    b, index = record.bucket, record.index
    record.noise = xi
    params = b.params if xi_views is not None and b.covers(index) else [b.params[i] for i in index]
    if xi_views is None or params is not b.params:
        xi_views = b.views(xi, index)
    lr, beta_t, scale = record.lr, record.beta, record.scale
    if record.rsqrt_ready:
        # η_eff = lr/(M·sqrt(v/bias2) + ε) = (lr·√bias2/M)·t², t = 1/sqrt(sqrt(v) + ε·√bias2/M)
        amplitude = math.sqrt(2 * beta_t * lr * math.sqrt(record.bias2) / scale)
        t_views = b.rsqrt_views if b.covers(index) else [b.rsqrt_views[i] for i in index]
        torch._foreach_addcmul_(params, t_views, xi_views, value=amplitude)
    else:
        torch._foreach_add_(params, xi_views, alpha=math.sqrt(2 * beta_t * lr))


class NoisePlan(NamedTuple):
    """The noise draws of a step: ``(flat, generator)`` jobs, one view per bucket, the views shaped like
    each bucket's parameters (``None`` for block or sharded noise), and the number of CPU numbers drawn."""

    jobs: list[tuple[torch.Tensor, torch.Generator]]
    views: list[torch.Tensor]
    shaped: list[list[torch.Tensor] | None]
    cpu_numbers: int


class NoiseSource:
    """The generators and the kept draw plan of [`Langevin`][meanfield.optim.langevin.Langevin] (a mixin).

    The optimizer holds ``_seed`` (``None`` when a generator was given), ``_generators`` (one per device),
    ``_noise_buffers`` (the flat draws' storage), ``_layout_version`` (counts its bucket layouts) and
    ``_plan_key``/``_plan`` (the plan below and what it was built for).
    """

    _seed: int | None
    _generators: dict[torch.device, torch.Generator]
    _noise_buffers: dict[Kind, torch.Tensor]
    _layout_version: int
    _plan_key: tuple | None
    _plan: NoisePlan

    def _generator(self, device: torch.device) -> torch.Generator:
        g = self._generators.get(device)
        if g is None:
            if self._seed is None:
                have = ", ".join(str(d) for d in self._generators)
                raise ValueError(
                    f"the generator passed to Langevin is on {have} but noisy parameters are on {device}; "
                    "pass a generator on the parameters' device, or seed= for one generator per device"
                )
            g = torch.Generator(device=device).manual_seed(self._seed)
            self._generators[device] = g
        return g

    def _noise_plan(self, noisy: list[tuple[Bucket, list[int], int, int]]) -> NoisePlan:
        """The draws of these buckets ([`noise_plan`][meanfield.optim.noise.noise_plan]), kept while the layout and
        the set of noisy buckets stay the same: the flat buffers and their views are built once."""
        key = (self._layout_version, *map(id, map(itemgetter(0), noisy)))  # (no comprehension: a call)
        if self._plan_key != key:
            jobs, views = noise_plan(noisy, self._noise_buffers, self._generator)
            shaped = [  # ξ shaped like each parameter, where the bucket's noise is its slice of the draw
                None if b.block or b.rows is not None else b.views(view, range(len(b.params)))
                for (b, *_), view in zip(noisy, views)
            ]
            cpu_numbers = sum(flat.numel() for flat, _ in jobs if flat.device.type == "cpu")
            self._plan = NoisePlan(jobs, views, shaped, cpu_numbers)
            self._plan_key = key
        return self._plan
