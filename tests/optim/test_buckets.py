"""Tests of :mod:`meanfield.optim.buckets`."""

from __future__ import annotations

import re

import pytest
import torch

from meanfield.optim.buckets import Bucket, build_buckets, check_dense

F64 = torch.float64


def test_a_bucket_covers_an_index_only_when_it_is_every_parameter_in_order():
    """``Bucket.covers``: ``[0, 1, 2]`` and ``range(3)`` are the whole bucket; a subset, a permutation of all
    (``[1, 0, 2]``: its flat buffer is not the index's concatenation) and a longer index are not; ``gather`` of
    the permutation is the hand concatenation in the index's order, of the whole index the buffer itself."""
    params = [torch.zeros(2, dtype=F64), torch.zeros(3, dtype=F64), torch.zeros(1, dtype=F64)]
    b = Bucket(params, [0, 2, 5], 6)
    assert b.covers([0, 1, 2]) and b.covers(range(3))
    assert (
        not b.covers([0, 1]) and not b.covers([1, 0, 2]) and not b.covers([0, 1, 2, 3]) and not b.covers([])
    )
    flat = torch.arange(6, dtype=F64)
    assert b.gather(flat, [0, 1, 2]) is flat
    assert b.gather(flat, [1, 0, 2]).tolist() == [2.0, 3.0, 4.0, 0.0, 1.0, 5.0]  # control: not the buffer


def _group(params, drift="sgd", **extra):
    return {"params": list(params), "drift": drift, "step": 0, **extra}


def _channels_last(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 3, 2, 2, generator=g, dtype=F64).to(memory_format=torch.channels_last)


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.zeros(3, 4),
        lambda: torch.zeros(3, 4).t(),  # a permutation of contiguous memory
        lambda: _channels_last(),
        lambda: torch.zeros(0),  # empty: nothing to lay out
        lambda: torch.zeros(2, 0, 3),
        lambda: torch.zeros(1),
        lambda: torch.tensor(2.0),  # a scalar: no strides at all
        lambda: torch.zeros(5, 1, 2)[:, :, :],
        lambda: torch.zeros(4, 1).as_strided((4, 1), (1, 7)),  # a size-1 axis's stride does not matter
    ],
    ids=[
        "contiguous",
        "transposed",
        "channels_last",
        "empty",
        "empty-3d",
        "one",
        "scalar",
        "view",
        "size1-stride",
    ],
)
def test_dense_parameters_pass(make):
    """Contiguous memory, any permutation of it, empty tensors, scalars and size-1 axes with any stride:
    accepted."""
    p = make()
    group = _group([p])
    check_dense(p, group, [group])  # no error


@pytest.mark.parametrize(
    ("make", "shape", "strides"),
    [
        (lambda: torch.zeros(4, 4)[:, :2], (4, 2), (4, 1)),  # spans 14 entries for 8
        (lambda: torch.zeros(1).expand(3), (3,), (0,)),  # one entry for 3
        (lambda: torch.zeros(6)[::2], (3,), (2,)),
    ],
    ids=["column-slice", "expanded", "step-2"],
)
def test_a_parameter_with_holes_or_overlaps_is_refused_by_its_position(make, shape, strides):
    """A parameter whose memory is not dense: ``ValueError`` naming its index and its group's index (here
    parameter 1 of param group 1, behind a dense one in each group), its shape and strides, and the fix."""
    dense = torch.zeros(2)
    p = make()
    groups = [_group([torch.zeros(3)]), _group([dense, p])]
    message = (
        f"parameter 1 of param group 1 (shape {shape}, strides {strides}) does not fill its memory densely; "
        "Langevin needs parameters that are contiguous or a permutation of it (e.g. channels_last): use "
        "p.data = p.data.contiguous()"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_dense(p, groups[1], groups)
    check_dense(p.contiguous(), groups[1], groups)  # control: the fix it names works


def test_views_are_segments_in_logical_or_memory_order():
    """``views(flat, index)``: parameter i's segment ``flat[offset_i : offset_i + numel_i]`` shaped like it, in
    row-major (logical) order; ``strided=True``: laid out with the parameter's own strides, so that for a
    channels_last (2, 3, 2, 2) tensor entry (n, c, h, w) is memory entry ((n·2 + h)·2 + w)·3 + c. Views share
    ``flat``'s memory (writing one writes ``flat``)."""
    p0, p1 = _channels_last(), torch.zeros(5, dtype=F64)
    b = Bucket([p0, p1], [0, 24], 29)
    flat = torch.arange(29, dtype=F64)
    v0, v1 = b.views(flat, [0, 1])
    assert torch.equal(v0, torch.arange(24, dtype=F64).reshape(2, 3, 2, 2)) and torch.equal(v1, flat[24:])
    s0, s1 = b.views(flat, [0, 1], strided=True)
    assert s0.stride() == p0.stride() and s0.shape == p0.shape
    for n in range(2):
        for c in range(3):
            for h in range(2):
                for w in range(2):
                    assert s0[n, c, h, w] == ((n * 2 + h) * 2 + w) * 3 + c
    assert torch.equal(s1, flat[24:])  # a contiguous parameter: the same either way
    (only,) = b.views(flat, [1], strided=True)
    only.fill_(-1.0)
    assert flat[24:].eq(-1).all() and flat[:24].eq(torch.arange(24)).all()
    assert v0.data_ptr() == flat.data_ptr() and s1.data_ptr() == flat.data_ptr() + 24 * flat.element_size()


def test_gather_returns_the_buffer_itself_only_when_its_layout_is_the_index_order():
    """``gather(flat, every parameter in order)`` is ``flat`` itself (no copy: the optimizer's statistics read
    full-size buffers without temporaries) when the buffer's layout is logical order: ``strided=False``
    always, ``strided=True`` when every parameter is contiguous. With a channels_last parameter and
    ``strided=True`` it is a new tensor: the memory read in logical order (the hand permutation); for a
    subset, the subset's segments."""
    p0, p1 = _channels_last(), torch.zeros(5, dtype=F64)
    b = Bucket([p0, p1], [0, 24], 29)
    flat = torch.arange(29, dtype=F64)
    assert b.gather(flat, [0, 1]) is flat  # logical layout: the buffer, even with a channels_last parameter
    permuted = b.gather(flat, [0, 1], strided=True)
    assert permuted is not flat
    logical = (
        flat[:24].reshape(2, 2, 2, 3).permute(0, 3, 1, 2).reshape(-1)
    )  # memory (n, h, w, c) → (n, c, h, w)
    assert torch.equal(permuted, torch.cat([logical, flat[24:]]))
    assert not torch.equal(permuted, flat)  # control: the layouts differ
    contiguous = Bucket([torch.zeros(2, 3, dtype=F64), torch.zeros(4, dtype=F64)], [0, 6], 10)
    flat10 = torch.arange(10, dtype=F64)
    assert contiguous.gather(flat10, [0, 1], strided=True) is flat10
    assert contiguous.gather(flat10, [0, 1], strided=False) is flat10
    assert contiguous.gather(flat10, [1]).tolist() == [6.0, 7.0, 8.0, 9.0]
    assert contiguous.gather(flat10, [1, 0]).tolist() == [6.0, 7.0, 8.0, 9.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_buckets_split_by_dtype_in_order_of_first_appearance_with_hand_offsets():
    """Parameters of float64, float32, float64, float32 (sizes 6, 5, 4, 1): two buckets, float64 first (first
    seen), each keeping its parameters' order, offsets the running sums of numel (0, 6 | 0, 5), sizes 10 and 6;
    an SGD group has no moments, counts or steps; ``rows`` None and ``block`` 0 by default."""
    a, b, c, d = (
        torch.zeros(2, 3, dtype=F64),
        torch.zeros(5),
        torch.zeros(4, dtype=F64),
        torch.zeros(1),
    )
    group = _group([a, b, c, d])
    buckets = build_buckets(group, [group], {}, seed=0)
    assert [x.params[0].dtype for x in buckets] == [F64, torch.float32]
    first, second = buckets
    assert first.params[0] is a and first.params[1] is c and second.params[0] is b and second.params[1] is d
    assert (first.offsets, first.n, second.offsets, second.n) == ([0, 6], 10, [0, 5], 6)
    for x in buckets:
        assert x.exp_avg is None and x.exp_avg_sq is None and x.counts is None and x.steps is None
        assert x.rows is None and x.block == 0
    floats = _group([b, d])  # control: one kind, one bucket
    assert len(build_buckets(floats, [floats], {}, seed=0)) == 1


def test_adam_moments_move_into_flat_buffers_laid_out_like_each_parameter():
    """An Adam group: ``exp_avg``/``exp_avg_sq`` of each parameter become views of one flat (n,) buffer each,
    with the parameter's strides (a channels_last parameter's moment is channels_last in memory), holding the
    old values (copied in; zeros where there were none); ``state[p]["step"]`` the bucket's float32 step
    tensor, counts from the old state (an old ``exp_avg`` without a step takes the group's count, a parameter
    with neither starts at 0)."""
    p0, p1, p2 = _channels_last(1), torch.zeros(3, dtype=F64), torch.zeros(2, dtype=F64)
    old_m0 = torch.randn(2, 3, 2, 2, dtype=F64)  # logical layout, contiguous
    old_v1 = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    state = {
        p0: {"exp_avg": old_m0, "exp_avg_sq": old_m0.square(), "step": torch.tensor(7.0)},
        p1: {"exp_avg": torch.zeros(3, dtype=F64), "exp_avg_sq": old_v1},  # no step: the group's
        p2: {},
    }
    group = _group([p0, p1, p2], drift="adam", step=4)
    (b,) = build_buckets(group, [group], state, seed=0)
    assert b.counts == [7, 4, 0]
    assert [float(s) for s in b.steps] == [7.0, 4.0, 0.0] and all(s.dtype == torch.float32 for s in b.steps)
    assert all(state[p]["step"] is s for p, s in zip((p0, p1, p2), b.steps))
    assert b.exp_avg.shape == (29,) and b.exp_avg_sq.shape == (29,) and b.exp_avg.dtype == F64
    m0 = state[p0]["exp_avg"]
    assert m0.stride() == p0.stride() and torch.equal(m0, old_m0)  # the values, in the parameter's layout
    memory = old_m0.permute(0, 2, 3, 1).reshape(-1)  # channels_last memory order (n, h, w, c)
    assert torch.equal(b.exp_avg[:24], memory)
    assert torch.equal(b.exp_avg_sq[24:27], old_v1) and torch.equal(
        b.exp_avg_sq[27:], torch.zeros(2, dtype=F64)
    )
    assert m0.data_ptr() == b.exp_avg.data_ptr()
    assert state[p2]["exp_avg_sq"].data_ptr() == b.exp_avg_sq.data_ptr() + 27 * 8
    state[p1]["exp_avg"].fill_(5.0)  # the state entries are the buffer
    assert b.exp_avg[24:27].eq(5.0).all()


@pytest.mark.parametrize(
    ("shape", "rows", "ok"),
    [((2, 3), (2, 4, 6), True), ((3, 3), (2, 4, 6), False), ((), (0, 1, 1), False)],
    ids=["rows", "wrong-leading-axis", "scalar"],
)
def test_particle_rows_are_recorded_and_checked(shape, rows, ok):
    """``particle_rows = (start, stop)`` with ``n_particles = M``: ``rows = (start, stop, M)`` as ints; every
    parameter's leading axis must hold ``stop − start`` particles, else a ValueError naming its shape."""
    p = torch.zeros(shape, dtype=F64)
    group = _group([p], particle_rows=(rows[0], rows[1]), n_particles=rows[2])
    if ok:
        (b,) = build_buckets(group, [group], {}, seed=0)
        assert b.rows == rows and all(type(r) is int for r in b.rows)
        return
    message = (
        f"a parameter of shape {shape} is in a group with particle_rows = {(rows[0], rows[1])}: its leading "
        f"axis must hold those {rows[1] - rows[0]} particles"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        build_buckets(group, [group], {}, seed=0)


@pytest.mark.parametrize(
    ("shape", "block", "rows", "ok"),
    [
        ((6, 2), 2, None, True),
        ((6, 2), 3, None, True),
        ((6, 2), 4, None, False),  # 6 rows are not whole blocks of 4
        ((4, 2), 2, (2, 6), True),  # rows [2, 6): whole blocks of 2
        ((3, 2), 3, (3, 6), True),
        ((4, 2), 4, (2, 6), False),  # starts inside a block
        ((2, 2), 2, (2, 6), False),  # the leading axis is not the rows'
        ((), 1, None, False),
    ],
    ids=["6/2", "6/3", "6/4", "rows-2-6/2", "rows-3-6/3", "rows-2-6/4", "short", "scalar"],
)
def test_noise_block_needs_whole_blocks_of_particle_rows(shape, block, rows, ok):
    """``noise_block = k``: the rows ``[start, stop)`` of every parameter (``particle_rows``, or the whole
    leading axis) must be whole blocks (``start`` and ``stop`` multiples of k, the leading axis their count);
    else a ValueError naming k, the rows and the shape (a scalar parameter too: it was an IndexError)."""
    p = torch.zeros(shape, dtype=F64)
    extra = {"noise_block": block}
    if rows is not None:
        extra.update(particle_rows=rows, n_particles=8)
    group = _group([p], **extra)
    if ok:
        (b,) = build_buckets(group, [group], {}, seed=3)
        assert b.block == block
        return
    start, stop = rows if rows is not None else (0, shape[0] if shape else 0)  # a scalar: no rows at all
    message = (
        f"noise_block = {block}: every parameter of the group needs a leading particle axis whose rows "
        f"[{start}, {stop}) are whole blocks, got a parameter of shape {shape}"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        build_buckets(group, [group], {}, seed=3)


def test_noise_block_needs_the_seed():
    """Counter-based block noise is drawn from the optimizer's seed: ``seed=None`` (a user generator) is refused
    with the fix; ``noise_block = 0`` needs no seed (the control)."""
    p = torch.zeros(4, 2, dtype=F64)
    group = _group([p], noise_block=2)
    message = (
        "noise_block > 0 draws counter-based noise from the optimizer's seed: pass seed=, not generator="
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        build_buckets(group, [group], {}, seed=None)
    plain = _group([p])
    assert build_buckets(plain, [plain], {}, seed=None)[0].block == 0
