"""Tests of :mod:`meanfield.optim.noise`."""

from __future__ import annotations

import hashlib
import math
import threading

import numpy as np
import pytest
import torch

from meanfield import _background, _io
from meanfield.drift.potentials import DoubleWell, Quadratic
from meanfield.nn.cloud import ParticleCloud
from meanfield.optim.buckets import Bucket
from meanfield.optim.noise import (
    NoiseDraw,
    add_noise,
    block_noise,
    draw_size,
    fill_normal,
    local_noise,
    start_noise,
)
from meanfield.optim.step_stats import Record
from meanfield.stepping.brownian import BrownianIncrements, GaussianNoise, NoiseSource, RademacherNoise

F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _channels_last(seed: int) -> torch.Tensor:
    return torch.randn(2, 3, 2, 2, generator=_gen(seed), dtype=F64).to(memory_format=torch.channels_last)


def _logical(flat24: torch.Tensor) -> torch.Tensor:
    """A (2, 3, 2, 2) channels_last tensor's memory ``flat24`` read at logical (n, c, h, w): memory order is
    (n, h, w, c)."""
    return flat24.reshape(2, 2, 2, 3).permute(0, 3, 1, 2)


def _noise_bucket():
    p0, p1 = _channels_last(1), torch.randn(5, generator=_gen(2), dtype=F64)
    b = Bucket([p0, p1], [0, 24], 29)
    t = torch.rand(29, generator=_gen(3), dtype=F64) + 0.5  # (n,) the preconditioner t, memory order
    b.rsqrt, b.rsqrt_views = t, b.views(t, range(2), strided=True)
    return b, p0.clone(), p1.clone(), t


def _bucket(shape, dtype=F64, rows=None, block=0):
    p = torch.zeros(shape, dtype=dtype)
    return Bucket([p], [0], p.numel(), rows=rows, block=block)


def test_add_noise_without_preconditioner_adds_root_2_beta_lr_times_xi():
    """``θ ← θ + sqrt(2β lr)·ξ`` (hand formula), ``ξ`` read in each parameter's logical order from its bucket
    offset; only the record's parameters move; the record keeps ``ξ``. Negative control: ``sqrt(β lr)``."""
    lr, beta = 0.1, 0.3
    b, p0, p1, _ = _noise_bucket()
    xi = torch.randn(29, generator=_gen(4), dtype=F64)
    record = Record(b, [0, 1], "sgd", lr, beta, 1.0, None, False)
    add_noise(record, xi)
    amp = math.sqrt(2 * beta * lr)
    torch.testing.assert_close(b.params[0], p0 + amp * xi[:24].reshape(2, 3, 2, 2), rtol=1e-15, atol=1e-15)
    torch.testing.assert_close(b.params[1], p1 + amp * xi[24:], rtol=1e-15, atol=1e-15)
    assert record.noise is xi
    assert (b.params[1] - (p1 + math.sqrt(beta * lr) * xi[24:])).abs().max() > 1e-3  # negative control

    b, p0, p1, _ = _noise_bucket()
    record = Record(b, [1], "adam", lr, beta, 4.0, None, False, bias2=0.19)  # not preconditioned: lr
    add_noise(record, xi)
    assert torch.equal(b.params[0], p0)
    torch.testing.assert_close(b.params[1], p1 + amp * xi[24:], rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("index", [[0, 1], [0], [1], [1, 0]])
def test_add_noise_with_preconditioner_adds_the_amplitude_times_t_times_xi(index):
    """With ``rsqrt_ready``: ``θ ← θ + sqrt(2β lr √bias2/M)·t ⊙ ξ`` (hand formula), ``t`` the bucket's
    preconditioner read at each parameter's memory layout (channels_last here: (n, h, w, c) memory order),
    for all parameters or some, in any order (``[1, 0]``: every parameter, not in the bucket's order); the
    others do not move. Negative control: the unpreconditioned amplitude."""
    lr, beta, scale, bias2 = 0.05, 0.4, 4.0, 0.19
    b, p0, p1, t = _noise_bucket()
    xi = torch.randn(29, generator=_gen(5), dtype=F64)
    record = Record(b, index, "adam", lr, beta, scale, None, True, eps=1e-8, bias2=bias2, rsqrt_ready=True)
    add_noise(record, xi)
    amp = math.sqrt(2 * beta * lr * math.sqrt(bias2) / scale)
    want0 = p0 + amp * _logical(t[:24]) * xi[:24].reshape(2, 3, 2, 2) if 0 in index else p0
    want1 = p1 + amp * t[24:] * xi[24:] if 1 in index else p1
    torch.testing.assert_close(b.params[0], want0, rtol=1e-15, atol=1e-15)
    torch.testing.assert_close(b.params[1], want1, rtol=1e-15, atol=1e-15)
    assert record.noise is xi
    plain = math.sqrt(2 * beta * lr)
    if 1 in index:
        assert (b.params[1] - (p1 + plain * xi[24:])).abs().max() > 1e-3  # negative control
    else:
        assert (b.params[0] - (p0 + plain * xi[:24].reshape(2, 3, 2, 2))).abs().max() > 1e-3


def test_start_noise_draws_one_flat_normal_per_kind_split_in_views_and_reuses_a_large_enough_buffer():
    """One flat ``N(0, 1)`` draw per (device, dtype), in order of first appearance, from the optimizer's
    generator (replayed by hand with ``normal_``); the views: ``n`` numbers for a bucket, the ``(M, …)`` draw
    for a sharded bucket (6 particles × 3 here), none for block noise. A buffer that is large enough is
    reused (the same tensor, the views at its start); a missing or too small one is replaced by one of the
    exact size. ``undo`` puts the generator back. Negative control: another seed gives other numbers."""
    b64 = _bucket((10,))
    b32 = _bucket((3,), dtype=torch.float32)
    sharded = _bucket((2, 3), rows=(2, 4, 6))
    blocks = _bucket((4, 1), block=2)
    noisy = [(b64, [0], 0, 0), (b32, [0], 1, 0), (sharded, [0], 2, 0), (blocks, [0], 3, 0)]
    k64, k32 = (torch.device("cpu"), F64), (torch.device("cpu"), torch.float32)
    big = torch.full((40,), -1.0, dtype=F64)
    small = torch.zeros(1, dtype=torch.float32)
    buffers = {k64: big, k32: small}
    g = _gen(11)
    asked = []

    def generator(device):
        asked.append(device)
        return g

    draw = start_noise(noisy, buffers, generator)
    draw.wait()
    ref = _gen(11)
    ref64 = torch.empty(28, dtype=F64).normal_(generator=ref)
    ref32 = torch.empty(3, dtype=torch.float32).normal_(generator=ref)
    views = draw.views
    assert [v.numel() for v in views] == [10, 3, 18, 0]
    assert torch.equal(views[0], ref64[:10]) and torch.equal(views[2], ref64[10:28])
    assert torch.equal(views[1], ref32)
    assert buffers[k64] is big and views[0].data_ptr() == big.data_ptr()
    assert views[2].data_ptr() == big.data_ptr() + 10 * big.element_size()
    assert torch.equal(big[28:], torch.full((12,), -1.0, dtype=F64))  # beyond the draw: untouched
    assert buffers[k32] is not small and buffers[k32].numel() == 3 and buffers[k32].dtype == torch.float32
    assert views[1].data_ptr() == buffers[k32].data_ptr()
    assert asked == [torch.device("cpu"), torch.device("cpu")]
    other = torch.empty(28, dtype=F64).normal_(generator=_gen(12))
    assert not torch.equal(views[0], other[:10])  # negative control

    grown = buffers[k32]  # exactly the size of its draw now
    again = start_noise(noisy, buffers, lambda device: g)  # the grown buffers are reused the next step
    again.wait()
    assert buffers[k64] is big and buffers[k32] is grown
    assert again.views[1].data_ptr() == grown.data_ptr()
    state = g.get_state()
    fresh = {}
    third = start_noise(noisy[1:2], fresh, lambda device: g)  # no buffer yet: one of the exact size
    third.undo()
    assert fresh[k32].numel() == 3 and list(fresh) == [k32]
    assert torch.equal(g.get_state(), state)


F64_2, F32 = torch.float64, torch.float32


def _normals(seed: int, shape, scales, dtype=F64_2) -> list[torch.Tensor]:
    """The reference: ``normal_(0, s)`` draws of ``shape`` for each ``s`` in turn from one generator."""
    g = _gen(seed)
    return [torch.empty(shape, dtype=dtype).normal_(0.0, s, generator=g) for s in scales]


def _close(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> None:
    """``got`` equals ``want`` to ``atol + rtol·|want|`` entrywise (numpy), with the same shape and dtype."""
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=rtol, atol=atol)


def _prefetching(monkeypatch) -> None:
    """Every CPU draw may go to the background thread (conftest already allows one torch thread)."""
    monkeypatch.setattr(_background, "OVERLAP_MIN", 0)


class _Table(NoiseSource):
    """A concrete NoiseSource: ``increment(n, s) = s·ξ[n]`` from a table, each call recorded."""

    def __init__(self, xi, dt):
        super().__init__(list(xi.shape[1:]), dt)
        self.xi, self.calls = xi, []

    def increment(self, n, scale=1.0):
        self.calls.append((n, scale))
        return scale * self.xi[n]


def _bits_reference(seed: int, n: int, scales, dtype=F64_2) -> list[torch.Tensor]:
    """Entry ``k`` of each draw: ``s·(2·bit_{k mod 8}(byte_{⌊k/8⌋}) − 1)``, ``⌈n/8⌉`` bytes per draw."""
    g = _gen(seed)
    out = []
    k = torch.arange(n)
    for s in scales:
        raw = torch.empty((n + 7) // 8, dtype=torch.uint8).random_(0, 256, generator=g)
        bits = (raw[k // 8].long() >> (k % 8)) & 1
        out.append(s * (2.0 * bits.to(dtype) - 1.0))
    return out


def _bucket_2(shapes, dtype=F64_2, rows=None, block=0) -> Bucket:
    params = [torch.zeros(s, dtype=dtype) for s in shapes]
    offsets = [sum(math.prod(s) for s in shapes[:i]) for i in range(len(shapes))]
    return Bucket(params, offsets, sum(math.prod(s) for s in shapes), rows=rows, block=block)


def _block_seed(seed: int, group: int, j: int, step: int) -> int:
    digest = hashlib.sha256(f"{seed}/noise/{group}/{j}/{step}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 2


def _block_reference(seed, group, step, shapes, start, stop, k, dtype=F64_2) -> torch.Tensor:
    """Block ``j`` of ``[start, stop)`` from ``Generator().manual_seed(sha256 seed of block j)``: each
    parameter's ``k`` rows in turn; the result flat, parameter after parameter (rows in order)."""
    per_param = [[] for _ in shapes]
    for j in range(start // k, stop // k):
        g = _gen(_block_seed(seed, group, j, step))
        for i, s in enumerate(shapes):
            per_param[i].append(torch.empty((k, *s[1:]), dtype=dtype).normal_(generator=g))
    return torch.cat([torch.cat(parts).reshape(-1) for parts in per_param])


class _OtherDevice:
    """A stand-in for a buffer on an accelerator (``device.type != "cpu"``): records each fill and the thread
    that made it."""

    device = torch.device("meta")

    def __init__(self, n):
        self.n, self.filled = n, []

    def numel(self):
        return self.n

    def normal_(self, generator):
        self.filled.append((generator, threading.get_ident()))
        return self


def _three_param_bucket(dtype=F64_2):
    shapes = [(2, 3), (4,), (3, 2)]
    b = Bucket(
        [torch.randn(s, generator=_gen(30 + i), dtype=dtype) for i, s in enumerate(shapes)], [0, 6, 10], 16
    )
    t = torch.rand(16, generator=_gen(40), dtype=dtype) + 0.5  # (n,) the preconditioner
    b.rsqrt, b.rsqrt_views = t, b.views(t, range(3))
    return b, [p.clone() for p in b.params], t


def _pairwise_energy(x: np.ndarray, V, k: float) -> float:
    """``(1/M) Σ_i V(x_i) + 1/(2M²) Σ_ij k/2·|x_i − x_j|²`` as a double sum (numpy)."""
    M = x.shape[0]
    diff = x[:, None, :] - x[None, :, :]
    return float(V(x).sum() / M + (k / 2 * (diff**2).sum(-1)).sum() / (2 * M * M))


def _double_well(x):
    return (x**4 / 4 - x**2 / 2).sum(-1)


def test_noise_source_without_areas_names_its_class_in_the_refusal():
    """The default ``space_time_area`` refuses with the class's own name and the two ways to get areas."""
    src = _Table(torch.zeros(2, 1), 0.1)
    with pytest.raises(
        ValueError,
        match=r"^_Table has no space-time Lévy area; use Gaussian noise from a generator or "
        r"BrownianIncrements\.sample\(\.\.\., levy_area=True\)$",
    ):
        src.space_time_area(0)


def test_asking_again_for_a_step_returns_its_buffer_or_a_rescaled_copy_without_drawing():
    """The same step at the same scale is the very same tensor (no draw: the generator does not move); at
    another scale ``s'`` a new tensor ``buffer·s'/s`` (hand formula) and the buffer is left as it was. The next
    step then continues the stream where step 0 left it."""
    g = _gen(3)
    src = GaussianNoise((4, 4), 0.1, g, F64_2, "cpu")
    first = src.increment(0, 0.5)
    kept = first.clone()
    state = g.get_state()
    assert src.increment(0, 0.5) is first
    again = src.increment(0, 2.0)
    assert again is not first and torch.equal(again, kept * (2.0 / 0.5))
    assert torch.equal(first, kept) and torch.equal(g.get_state(), state)
    ref = _normals(3, (4, 4), (0.5, 0.7))
    assert torch.equal(kept, ref[0])
    assert torch.equal(src.increment(1, 0.7), ref[1])
    # the rescale is relative to the scale the step was drawn at, not to 1
    assert not torch.equal(again, kept * 2.0)


def test_gaussian_areas_are_drawn_after_their_step_once_and_afresh_each_step():
    """``space_time_area(n)`` is ``N(0, dt/12)`` drawn right after ``ξ_n``: the stream reads ``ξ_0, H_0, ξ_1,
    H_1`` (replayed by hand); asked twice it is the same tensor (drawn once); the next step gets a new one.
    A step whose area is never asked for leaves the stream to the next ``ξ``."""
    dt, shape = 0.09, (3, 2)
    sd = math.sqrt(dt / 12)
    src = GaussianNoise(shape, dt, _gen(4), F64_2, "cpu")
    xi0 = src.increment(0, 0.5).clone()
    H0 = src.space_time_area(0)
    assert src.space_time_area(0) is H0
    xi1 = src.increment(1, 0.5).clone()
    H1 = src.space_time_area(1)
    ref = _normals(4, shape, (0.5, sd, 0.5, sd))
    assert torch.equal(xi0, ref[0]) and torch.equal(H0, ref[1])
    assert torch.equal(xi1, ref[2]) and torch.equal(H1, ref[3])
    assert H1 is not H0 and not torch.equal(H1, H0)
    assert H0.dtype == F64_2 and H0.shape == shape
    plain = GaussianNoise(shape, dt, _gen(4), F64_2, "cpu")
    plain.increment(0, 0.5)
    assert torch.equal(plain.increment(1, 0.5), _normals(4, shape, (0.5, 0.5))[1])


def test_an_area_asked_first_draws_its_step_at_sqrt_dt():
    """``space_time_area(n)`` before ``increment(n)`` draws ``ξ_n`` at scale ``sqrt(dt)``: ``increment(n,
    sqrt_dt)`` is then that buffer itself, and ``increment(n, 1)`` the buffer divided by ``sqrt(dt)``."""
    dt = 0.25
    src = GaussianNoise((5,), dt, _gen(6), F64_2, "cpu")
    H = src.space_time_area(0).clone()
    buf = src.increment(0, 0.5)
    assert src.increment(0, 0.5) is buf
    ref = _normals(6, (5,), (0.5, math.sqrt(dt / 12)))
    assert torch.equal(buf, ref[0]) and torch.equal(H, ref[1])
    assert torch.equal(src.increment(0, 1.0), ref[0] * (1.0 / 0.5))


def test_without_prefetching_nothing_watches_the_generator():
    """A source that cannot prefetch (buffer below ``OVERLAP_MIN``) never saves the generator's state, never
    marks itself verified, and ``will_prefetch``/``prefetch`` start nothing; the draws are the serial ones."""
    g = _gen(2)
    src = GaussianNoise((3,), 0.1, g, F64_2, "cpu")
    for n in range(3):
        src.increment(n)
        assert src._state_after is None and src._verified is False and src._shared is False
        assert src.will_prefetch(n + 1) is False
        src.prefetch(n + 1)
        assert src._pending is None
    assert torch.equal(src.increment(2), _normals(2, (3,), (1.0, 1.0, 1.0))[2])


def test_a_generator_drawn_from_between_steps_turns_prefetching_off_for_good(monkeypatch):
    """Something else draws from the generator between two draws: the source sees the state differ from the
    one it saved, marks itself shared, and never prefetches again (even after clean steps); the increments
    are then simply the generator's next numbers."""
    _prefetching(monkeypatch)
    g = _gen(9)
    src = GaussianNoise((4, 4), 0.1, g, F64_2, "cpu")
    src.increment(0)
    intruder = torch.empty(3, dtype=F64_2).normal_(generator=g)
    expected = torch.empty(4, 4, dtype=F64_2).normal_(generator=_gen(9).set_state(g.get_state()))
    assert torch.equal(src.increment(1), expected)
    assert src._shared is True and src._verified is False and intruder.numel() == 3
    for n in (2, 3, 4):
        assert src.will_prefetch(n) is False
        src.prefetch(n)
        assert src._pending is None
        src.increment(n)
    assert src._shared is True


def test_settle_abandons_a_prefetch_and_puts_the_generator_back(monkeypatch):
    """``settle`` with a pending prefetch: the generator returns to its state when the prefetch started,
    the step is then drawn serially (the serial numbers), and the source may prefetch again (its saved state
    is the one the prefetch started from, even if the caller drew from the generator just before the
    prefetch). Without a pending prefetch it changes nothing."""
    _prefetching(monkeypatch)
    g = _gen(12)
    src = GaussianNoise((5, 4), 0.1, g, F64_2, "cpu")
    src.increment(0)
    src.increment(1)
    state = g.get_state()
    src.settle()  # nothing pending: nothing happens
    assert torch.equal(g.get_state(), state) and src._pending is None
    src.prefetch(2)
    src.settle()
    assert src._pending is None and torch.equal(g.get_state(), state)
    assert torch.equal(src.increment(2), _normals(12, (5, 4), (1.0, 1.0, 1.0))[2])
    assert src.will_prefetch(3) is True
    torch.empty(2, dtype=F64_2).normal_(generator=g)  # the caller draws between step 2 and the prefetch
    moved = g.get_state()
    src.prefetch(3)
    src.settle()
    assert torch.equal(g.get_state(), moved)
    src.increment(3)  # its draw compares against the prefetch's starting state: clean
    assert src._shared is False and src.will_prefetch(4) is True


@pytest.mark.parametrize("shape", [(1,), (3,), (8,), (3, 3), (2, 8)], ids=["1", "3", "8", "9", "16"])
def test_rademacher_entries_are_the_bits_of_ceil_n_over_8_bytes_per_step(shape):
    """Sizes below, at, and above whole bytes: each step reads exactly ``⌈n/8⌉`` bytes (so later steps stay
    aligned with the reference) and entry ``k`` is bit ``k mod 8`` of byte ``⌊k/8⌋``, times the scale; the
    scale may change and return to 1 (the sign table follows it)."""
    n = math.prod(shape)
    scales = (1.0, 0.37, 0.37, 1.0, 2.5)
    src = RademacherNoise(shape, 0.1, _gen(21), F64_2, "cpu")
    ref = _bits_reference(21, n, scales)
    for step, s in enumerate(scales):
        got = src.increment(step, s)
        assert got.shape == shape and torch.equal(got.reshape(-1), ref[step])
    assert not torch.equal(ref[3], ref[0]) or n < 3  # negative control: the steps differ


def test_rademacher_prefetched_steps_are_the_serial_ones(monkeypatch):
    """With background draws, prefetched Rademacher steps (scale known, or 1 and read at another) equal the
    serial bits times the scale."""
    _prefetching(monkeypatch)
    src = RademacherNoise((3, 7), 0.1, _gen(4), F64_2, "cpu")
    scales = (0.5, 0.5, 0.5, 0.25)
    got = [src.increment(0, 0.5).clone(), src.increment(1, 0.5).clone()]
    src.prefetch(2, 0.5)
    assert src._pending is not None
    got.append(src.increment(2, 0.5).clone())
    src.prefetch(3, 1.0)
    got.append(src.increment(3, 0.25).clone())
    for a, b in zip(got, _bits_reference(4, 21, scales)):
        assert torch.equal(a.reshape(-1), b)


def test_a_2d_float_dw_and_a_matching_h_are_accepted():
    """Negative control of the refusals: the smallest accepted ``dW`` (2 dimensions) with a matching ``H``."""
    inc = BrownianIncrements(torch.zeros(3, 1, dtype=F32), 0.1, torch.zeros(3, 1, dtype=F32))
    assert inc.shape == (1,) and len(inc) == 3


def test_path_is_zero_then_the_cumulative_sums():
    """``path``: ``(N + 1, *shape)``, row 0 zeros, row ``n`` the sum of the first ``n`` increments (numpy
    cumsum), in the increments' dtype."""
    dW = torch.randn(5, 2, 3, generator=_gen(8), dtype=F32)
    path = BrownianIncrements(dW, 0.1).path
    assert path.shape == (6, 2, 3) and path.dtype == F32
    want = np.concatenate([np.zeros((1, 2, 3), np.float32), np.cumsum(dW.numpy(), 0)])
    np.testing.assert_allclose(path.numpy(), want, rtol=1e-6, atol=1e-6)
    assert torch.equal(path[0], torch.zeros(2, 3))


def test_draw_size_is_n_the_full_rows_when_sharded_and_zero_with_block_noise():
    """``draw_size``: the bucket's ``n`` unsharded; sharded rows ``[2, 4)`` of ``M = 6`` particles with
    parameters ``(2, 3)`` and ``(2,)``: ``3·6 + 1·6 = 24`` (hand count); 0 with block noise (sharded or not)."""
    assert draw_size(_bucket_2([(4, 3), (5,)])) == 17
    assert draw_size(_bucket_2([(2, 3), (2,)], rows=(2, 4, 6))) == 24
    assert draw_size(_bucket_2([(3, 2, 2)], rows=(0, 3, 9))) == 36
    assert draw_size(_bucket_2([(4, 3)], block=2)) == 0
    assert draw_size(_bucket_2([(2, 3)], rows=(2, 4, 6), block=2)) == 0


@pytest.mark.parametrize("dtype", [F64_2, F32], ids=["f64", "f32"])
def test_block_noise_draws_each_block_from_its_own_hashed_seed(dtype):
    """``block_noise``: particles ``[0, 4)`` in blocks of 2, two parameters ``(4, 2)`` and ``(4,)``: block
    ``j`` from the seed ``sha256(f"{seed}/noise/{group}/{j}/{step}")`` (hashlib by hand), drawing the
    parameters' rows in order, in the bucket's dtype. Negative controls: another step, group, seed or block
    size gives other numbers."""
    shapes = [(4, 2), (4,)]
    b = _bucket_2(shapes, dtype=dtype, block=2)
    got = block_noise(b, 5, 1, 3)
    assert got.shape == (12,) and got.dtype == dtype
    assert torch.equal(got, _block_reference(5, 1, 3, shapes, 0, 4, 2, dtype))
    for other in (block_noise(b, 5, 1, 4), block_noise(b, 5, 2, 3), block_noise(b, 6, 1, 3)):
        assert not torch.equal(other, got)
    assert not torch.equal(block_noise(_bucket_2(shapes, dtype=dtype, block=4), 5, 1, 3), got)


def test_block_noise_of_a_shard_is_its_rows_of_the_whole_draw():
    """Sharded rows ``[2, 6)`` of 8 particles, blocks of 2: the global blocks 1 and 2 (hashlib reference);
    the shards ``[0, 4)`` and ``[4, 8)`` together are, parameter by parameter, the unsharded draw."""
    shapes = [(4, 3), (4,)]
    shard = _bucket_2(shapes, rows=(2, 6, 8), block=2)
    assert torch.equal(block_noise(shard, 9, 0, 2), _block_reference(9, 0, 2, shapes, 2, 6, 2))
    whole = block_noise(_bucket_2([(8, 3), (8,)], block=2), 9, 0, 2)
    left = block_noise(_bucket_2(shapes, rows=(0, 4, 8), block=2), 9, 0, 2)
    right = block_noise(_bucket_2(shapes, rows=(4, 8, 8), block=2), 9, 0, 2)
    assert torch.equal(whole[:24], torch.cat([left[:12], right[:12]]))
    assert torch.equal(whole[24:], torch.cat([left[12:], right[12:]]))
    assert torch.equal(block_noise(shard, 9, 0, 2)[:6], whole[6:12])


def test_local_noise_is_the_full_draw_unsharded_and_this_ranks_rows_when_sharded():
    """``local_noise``: unsharded, the very tensor given; sharded rows ``[2, 4)`` of ``M = 5`` with parameters
    ``(2, 3)`` and ``(2,)``: the full draw is ``[p0 of all M (5·3), p1 of all M (5)]`` and the local noise
    the rows 2 and 3 of each, in order (by hand)."""
    full = torch.arange(7.0)
    assert local_noise(_bucket_2([(7,)]), full) is full
    full = torch.arange(20.0, dtype=F64_2)
    got = local_noise(_bucket_2([(2, 3), (2,)], rows=(2, 4, 5)), full)
    assert got.tolist() == [6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 17.0, 18.0]
    got = local_noise(_bucket_2([(1, 2, 2), (1,)], rows=(0, 1, 3)), torch.arange(15.0))
    assert got.tolist() == [0.0, 1.0, 2.0, 3.0, 12.0]
    # three parameters: the third's part starts after both others' (5·2 + 5·1 = 15 numbers)
    got = local_noise(_bucket_2([(1, 2), (1,), (1, 3)], rows=(3, 4, 5)), torch.arange(30.0))
    assert got.tolist() == [6.0, 7.0, 13.0, 24.0, 25.0, 26.0]


def test_fill_normal_fills_in_order_and_a_shared_generator_continues_its_stream():
    """``fill_normal``: each flat from its generator, in the order given: two flats on one generator read
    consecutive numbers (one draw of 5 then one of 3), a third on its own generator its first numbers."""
    g, h = _gen(4), _gen(5)
    a, b, c = torch.empty(5, dtype=F64_2), torch.empty(3, dtype=F64_2), torch.empty(2, dtype=F32)
    fill_normal([(a, g), (c, h), (b, g)])
    ref = _gen(4)
    assert torch.equal(a, torch.empty(5, dtype=F64_2).normal_(generator=ref))
    assert torch.equal(b, torch.empty(3, dtype=F64_2).normal_(generator=ref))
    assert torch.equal(c, torch.empty(2, dtype=F32).normal_(generator=_gen(5)))
    fill_normal([])  # nothing to do


@pytest.mark.parametrize("background", [False, True], ids=["serial", "background"])
def test_noise_draw_fills_its_buffers_keeps_the_views_and_undo_restores_the_generators(
    monkeypatch, background
):
    """``NoiseDraw``: drawn at once when the CPU draws are smaller than ``OVERLAP_MIN``, in the background
    otherwise (pending until ``wait``); either way the numbers are the serial ones, ``views`` are the ones
    given, ``wait`` twice is harmless, and ``undo`` puts every generator back where it was before."""
    monkeypatch.setattr(_background, "OVERLAP_MIN", 8 if background else 9)
    g, h = _gen(1), _gen(2)
    a, b = torch.empty(5, dtype=F64_2), torch.empty(3, dtype=F32)
    views = [a[:2], b]
    sg, sh = g.get_state(), h.get_state()
    draw = NoiseDraw([(a, g), (b, h)], views)
    assert draw.views is views
    assert (draw._pending is not None) is background
    draw.wait()
    assert draw._pending is None
    draw.wait()
    assert torch.equal(a, torch.empty(5, dtype=F64_2).normal_(generator=_gen(1)))
    assert torch.equal(b, torch.empty(3, dtype=F32).normal_(generator=_gen(2)))
    draw.undo()
    assert torch.equal(g.get_state(), sg) and torch.equal(h.get_state(), sh)


def test_noise_draw_counts_only_cpu_numbers_and_draws_other_devices_at_once(monkeypatch):
    """Only the CPU buffers count for ``OVERLAP_MIN`` (4 CPU numbers stay serial next to 100 elsewhere; at
    ``OVERLAP_MIN = 4`` they go to the background); the other devices' buffers are filled in the caller's
    thread, once, from their own generator, before ``wait``."""
    g, m = _gen(1), _gen(3)
    cpu, other = torch.empty(4, dtype=F64_2), _OtherDevice(100)
    monkeypatch.setattr(_background, "OVERLAP_MIN", 5)
    assert NoiseDraw([(cpu, g), (other, m)], [])._pending is None
    assert other.filled == [(m, threading.get_ident())]
    monkeypatch.setattr(_background, "OVERLAP_MIN", 4)
    g, other = _gen(1), _OtherDevice(100)
    draw = NoiseDraw([(cpu, g), (other, m)], [])
    assert draw._pending is not None and other.filled == [(m, threading.get_ident())]
    draw.wait()
    assert torch.equal(cpu, torch.empty(4, dtype=F64_2).normal_(generator=_gen(1)))


def test_a_failed_background_draw_is_reraised_by_wait_and_swallowed_by_undo(monkeypatch):
    """A draw that fails in the background thread (an integer buffer: ``normal_`` is not implemented for it)
    re-raises in ``wait``; ``undo`` waits, drops the error and restores the generator."""
    _prefetching(monkeypatch)
    g = _gen(6)
    state = g.get_state()
    draw = NoiseDraw([(torch.empty(3, dtype=F64_2), g), (torch.empty(2, dtype=torch.int64), g)], [])
    with pytest.raises(NotImplementedError, match="normal_kernel_cpu"):
        draw.wait()
    state = g.get_state()
    again = NoiseDraw([(torch.empty(3, dtype=F64_2), g), (torch.empty(2, dtype=torch.int64), g)], [])
    again.undo()
    assert torch.equal(g.get_state(), state) and again._pending is None


def test_start_noise_of_nothing_draws_nothing():
    """No noisy buckets: no views, no buffers made, the generator never asked for."""
    buffers = {}
    draw = start_noise([], buffers, lambda device: pytest.fail("no generator is needed"))
    draw.wait()
    assert draw.views == [] and buffers == {}


def test_start_noise_asks_the_generator_of_each_kinds_device_and_reuses_an_exact_buffer():
    """The generator callback gets the kind's device; a buffer of exactly the draw's size is reused (the same
    tensor); the views of two buckets of one kind are consecutive slices of one flat draw (by hand)."""
    b1, b2 = _bucket_2([(3,)]), _bucket_2([(2, 2)])
    kind = (torch.device("cpu"), F64_2)
    exact = torch.zeros(7, dtype=F64_2)
    buffers = {kind: exact}
    asked = []
    g = _gen(8)
    draw = start_noise([(b1, [0], 0, 0), (b2, [0], 1, 0)], buffers, lambda d: asked.append(d) or g)
    draw.wait()
    assert asked == [torch.device("cpu")] and buffers[kind] is exact
    ref = torch.empty(7, dtype=F64_2).normal_(generator=_gen(8))
    assert torch.equal(draw.views[0], ref[:3]) and torch.equal(draw.views[1], ref[3:])
    assert draw.views[1].data_ptr() == exact.data_ptr() + 3 * 8


def test_start_noise_splits_one_draw_per_kind_among_buckets_in_order():
    """Buckets of two kinds interleaved (float64 of 2, float32 of 3, float64 of 4 and 5 numbers): one float64
    draw of 11 and one float32 draw of 3 (replayed by hand in that order from the one generator); the
    float64 views are the slices ``[0, 2)``, ``[2, 6)``, ``[6, 11)`` of their draw, each in its dtype."""
    bs = [_bucket_2([(2,)]), _bucket_2([(3,)], dtype=F32), _bucket_2([(4,)]), _bucket_2([(5,)])]
    buffers = {}
    g = _gen(14)
    draw = start_noise([(b, [0], i, 0) for i, b in enumerate(bs)], buffers, lambda d: g)
    draw.wait()
    ref = _gen(14)
    r64 = torch.empty(11, dtype=F64_2).normal_(generator=ref)
    r32 = torch.empty(3, dtype=F32).normal_(generator=ref)
    views = draw.views
    assert [v.dtype for v in views] == [F64_2, F32, F64_2, F64_2]
    assert (
        torch.equal(views[0], r64[:2]) and torch.equal(views[2], r64[2:6]) and torch.equal(views[3], r64[6:])
    )
    assert torch.equal(views[1], r32)
    assert sorted(b.numel() for b in buffers.values()) == [3, 11]


@pytest.mark.parametrize("preconditioned", [False, True], ids=["plain", "preconditioned"])
def test_add_noise_moves_only_the_indexed_parameters_of_a_subset(preconditioned):
    """Index ``[0, 2]`` of three parameters: parameter 1 does not move; 0 and 2 get ``sqrt(2β lr)·ξ`` or, with
    the preconditioner ready, ``sqrt(2β lr √bias2/M)·t ⊙ ξ`` (hand formulas with ``ξ`` and ``t`` read at each
    parameter's offset); the record keeps ``ξ``. Negative control: the other amplitude."""
    lr, beta, scale, bias2 = 0.02, 0.7, 3.0, 0.36
    b, before, t = _three_param_bucket()
    xi = torch.randn(16, generator=_gen(41), dtype=F64_2)
    record = Record(
        b, [0, 2], "adam", lr, beta, scale, None, preconditioned, bias2=bias2, rsqrt_ready=preconditioned
    )
    add_noise(record, xi)
    assert record.noise is xi
    if preconditioned:
        amp = math.sqrt(2 * beta * lr * math.sqrt(bias2) / scale)
        want0 = before[0] + amp * (t[:6] * xi[:6]).reshape(2, 3)
        want2 = before[2] + amp * (t[10:] * xi[10:]).reshape(3, 2)
        wrong = before[2] + math.sqrt(2 * beta * lr) * xi[10:].reshape(3, 2)
    else:
        amp = math.sqrt(2 * beta * lr)
        want0 = before[0] + amp * xi[:6].reshape(2, 3)
        want2 = before[2] + amp * xi[10:].reshape(3, 2)
        wrong = before[2] + math.sqrt(beta * lr) * xi[10:].reshape(3, 2)
    _close(b.params[0], want0, rtol=1e-14, atol=1e-15)
    _close(b.params[2], want2, rtol=1e-14, atol=1e-15)
    assert torch.equal(b.params[1], before[1])
    assert (b.params[2] - wrong).abs().max() > 1e-3


def test_add_noise_reads_the_preconditioner_only_when_it_is_ready():
    """A preconditioned record whose ``t`` has not been computed this step (``rsqrt_ready`` false) gets the
    plain ``sqrt(2β lr)·ξ``: the stale buffer is not read (hand formula; control: the ``t``-weighted one)."""
    lr, beta = 0.05, 0.4
    b, before, t = _three_param_bucket()
    xi = torch.randn(16, generator=_gen(43), dtype=F64_2)
    add_noise(Record(b, [0, 1, 2], "adam", lr, beta, 2.0, None, True, bias2=0.5, rsqrt_ready=False), xi)
    amp = math.sqrt(2 * beta * lr)
    _close(b.params[1], before[1] + amp * xi[6:10], rtol=1e-14, atol=1e-15)
    weighted = before[1] + math.sqrt(2 * beta * lr * math.sqrt(0.5) / 2.0) * t[6:10] * xi[6:10]
    assert (b.params[1] - weighted).abs().max() > 1e-3


def test_add_noise_at_zero_temperature_moves_nothing_and_float32_follows_the_formula():
    """``β = 0``: the amplitude is 0, nothing moves (both branches). float32 parameters: the same hand
    formula to float32 rounding."""
    for ready in (False, True):
        b, before, _ = _three_param_bucket()
        add_noise(
            Record(b, [0, 1, 2], "adam", 0.1, 0.0, 2.0, None, ready, rsqrt_ready=ready),
            torch.ones(16, dtype=F64_2),
        )
        assert all(torch.equal(p, q) for p, q in zip(b.params, before))
    b, before, _ = _three_param_bucket(F32)
    xi = torch.randn(16, generator=_gen(42), dtype=F32)
    add_noise(Record(b, [0, 1, 2], "sgd", 0.5, 0.5, 1.0, None, False), xi)
    _close(b.params[1], before[1] + 0.5**0.5 * xi[6:10], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("confinement", "V", "k"),
    [(Quadratic(1.5), lambda x: 0.75 * (x**2).sum(-1), 0.8), (DoubleWell(), _double_well, -0.3)],
    ids=["quadratic", "double-well-repulsive"],
)
def test_cloud_outputs_their_mean_and_the_energy_against_a_pairwise_double_sum(confinement, V, k):
    """``particle_outputs``: ``(1, M, 2 + d)`` = ``(V(x_i), |x_i|², x_i)`` (numpy, any ``X`` ignored);
    ``forward``: their mean; ``energy``: the pairwise double sum; its gradient ``(1/M)(∇V(x_i) + k(x_i −
    x̄))`` (autograd against the closed form). Negative control: the energy of another ``k``."""
    M, d = 6, 3
    cloud = ParticleCloud(M, d, confinement, k, generator=_gen(3), dtype=F64_2)
    x = cloud.x.detach().numpy()
    out = cloud.particle_outputs()
    assert out.shape == (1, M, 2 + d)
    want = np.concatenate([V(x)[:, None], (x**2).sum(-1, keepdims=True), x], -1)
    np.testing.assert_allclose(out[0].detach().numpy(), want, rtol=1e-13, atol=1e-14)
    assert torch.equal(cloud.particle_outputs(torch.randn(2, 5)), out)
    means = cloud()
    assert means.shape == (1, 2 + d)
    np.testing.assert_allclose(means[0].detach().numpy(), want.mean(0), rtol=1e-13, atol=1e-14)
    assert torch.equal(cloud(torch.zeros(1)), means)
    E = cloud.energy(means)
    assert E.shape == ()
    assert math.isclose(float(E.detach()), _pairwise_energy(x, V, k), rel_tol=1e-12, abs_tol=1e-13)
    assert not math.isclose(float(E.detach()), _pairwise_energy(x, V, k + 0.5), rel_tol=1e-6)
    E.backward()
    grad_V = confinement.grad(cloud.x.detach()[None])[0].numpy()
    want_grad = (grad_V + k * (x - x.mean(0))) / M
    np.testing.assert_allclose(cloud.x.grad.numpy(), want_grad, rtol=1e-12, atol=1e-14)


def test_cloud_energy_reads_row_zero_of_the_means_by_formula():
    """``energy(means)`` = ``means[0,0] + k/2·(means[0,1] − |means[0,2:]|²)`` of any means given (by hand)."""
    cloud = ParticleCloud(2, 2, Quadratic(1.0), 3.0, generator=_gen(0), dtype=F64_2)
    means = torch.tensor([[1.5, 4.0, 1.0, -0.5], [9.0, 9.0, 9.0, 9.0]], dtype=F64_2)
    assert float(cloud.energy(means)) == 1.5 + 1.5 * (4.0 - 1.25)


def test_an_interrupted_write_removes_the_tmp_and_keeps_the_old_file(tmp_path):
    """Ctrl-C inside ``write`` (a ``KeyboardInterrupt``, not an ``Exception``): it propagates, the temporary
    file is removed, and the old file keeps its bytes."""
    target = tmp_path / "a.bin"
    target.write_bytes(b"old bytes")

    def write(f):
        f.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _io.write_atomic(target, write)
    assert [p.name for p in tmp_path.iterdir()] == ["a.bin"] and target.read_bytes() == b"old bytes"


def test_a_writer_that_removes_its_tmp_then_fails_keeps_its_own_error(tmp_path):
    """When the temporary file is already gone, the clean-up does not try to remove it again: the writer's
    own error (not a ``FileNotFoundError``) reaches the caller, and no file is left."""
    target = tmp_path / "a.bin"

    def write(f):
        for p in tmp_path.iterdir():
            p.unlink()
        raise ValueError("writer failed")

    with pytest.raises(ValueError, match="^writer failed$"):
        _io.write_atomic(target, write)
    assert list(tmp_path.iterdir()) == []
