"""Whole-behaviour tests of the noise modules: ``meanfield.stepping.brownian``, ``meanfield.optim.noise``,
``meanfield.nn.cloud`` and ``meanfield._io``.

Every public function and method (and the private helpers they call) is pinned against an independent answer:
torch draws replayed by hand from a generator seeded alike, the bits of the drawn bytes read by shifts, SHA-256
seeds computed with :mod:`hashlib`, numpy block sums and cumulative sums, the space-time Lévy area of a
piecewise-linear path integrated exactly by the trapezoid rule, closed-form moments of Brownian increments,
paths and bridges (checked at ``z·SE`` with fixed seeds and negative controls), the mean-field energy as a
pairwise double sum, and the exact bytes of the files the atomic writers leave.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
from pathlib import Path

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

F64, F32 = torch.float64, torch.float32
Z = 4.5  # z of the statistical checks: a false failure has probability ≈ 7e-6 per statistic


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _normals(seed: int, shape, scales, dtype=F64) -> list[torch.Tensor]:
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


# ================================================================================================================
# meanfield.stepping.brownian: NoiseSource (the base class)
# ================================================================================================================


class _Table(NoiseSource):
    """A concrete NoiseSource: ``increment(n, s) = s·ξ[n]`` from a table, each call recorded."""

    def __init__(self, xi, dt):
        super().__init__(list(xi.shape[1:]), dt)
        self.xi, self.calls = xi, []

    def increment(self, n, scale=1.0):
        self.calls.append((n, scale))
        return scale * self.xi[n]


def test_noise_source_base_stores_the_grid_and_reads_dw_at_scale_sqrt_dt():
    """``NoiseSource.__init__``: ``shape`` a tuple (from a list), ``dt`` and ``sqrt_dt = math.sqrt(dt)``;
    ``dW(n)`` is ``increment(n, sqrt_dt)`` (the call recorded, the value ``sqrt(dt)·ξ_n`` by hand); the
    defaults: Gaussian, no prefetching (``prefetches``/``will_prefetch`` false, ``prefetch``/``settle`` do
    nothing and return None). The class itself is abstract."""
    xi = torch.randn(3, 2, 4, generator=_gen(1), dtype=F64)
    src = _Table(xi, 0.09)
    assert src.shape == (2, 4) and type(src.shape) is tuple
    assert src.dt == 0.09 and src.sqrt_dt == math.sqrt(0.09)
    got = src.dW(2)
    assert src.calls == [(2, math.sqrt(0.09))]
    assert torch.equal(got, math.sqrt(0.09) * xi[2])
    assert src.gaussian is True and NoiseSource.gaussian is True
    assert src.prefetches is False
    assert src.will_prefetch(0) is False and src.will_prefetch(1) is False
    assert src.prefetch(0) is None and src.prefetch(1, 0.5) is None and src.settle() is None
    assert src.calls == [(2, math.sqrt(0.09))]  # the hints drew nothing
    with pytest.raises(TypeError, match="abstract"):
        NoiseSource((1,), 0.1)


def test_noise_source_without_areas_names_its_class_in_the_refusal():
    """The default ``space_time_area`` refuses with the class's own name and the two ways to get areas."""
    src = _Table(torch.zeros(2, 1), 0.1)
    with pytest.raises(
        ValueError,
        match=r"^_Table has no space-time Lévy area; use Gaussian noise from a generator or "
        r"BrownianIncrements\.sample\(\.\.\., levy_area=True\)$",
    ):
        src.space_time_area(0)


# ================================================================================================================
# meanfield.stepping.brownian: GaussianNoise (and _SequentialNoise)
# ================================================================================================================


def test_gaussian_noise_draws_each_step_once_in_order_at_its_scale():
    """``increment(n, s)`` for ``n = 0, 1, 2`` is torch's ``normal_(0, s)`` of the generator in order (replayed
    by hand), in the dtype asked; ``dW(n)`` is the draw at ``sqrt(dt)``. Negative control: another seed."""
    shape, dt = (3, 5), 0.04
    scales = (0.3, 1.0, math.sqrt(dt))
    src = GaussianNoise(list(shape), dt, _gen(7), F64, "cpu")
    assert src.shape == shape and src.dt == dt and src.sqrt_dt == 0.2
    ref = _normals(7, shape, scales)
    assert torch.equal(src.increment(0, 0.3), ref[0])
    assert torch.equal(src.increment(1), ref[1])  # the default scale is 1
    assert torch.equal(src.dW(2), ref[2])
    assert src.increment(2, src.sqrt_dt).dtype == F64
    f32 = GaussianNoise(shape, dt, _gen(7), F32, "cpu")
    got = f32.increment(0, 0.3)
    assert got.dtype == F32 and torch.equal(got, _normals(7, shape, (0.3,), F32)[0])
    other = GaussianNoise(shape, dt, _gen(8), F64, "cpu")
    assert not torch.equal(other.increment(0, 0.3), ref[0])


def test_asking_again_for_a_step_returns_its_buffer_or_a_rescaled_copy_without_drawing():
    """The same step at the same scale is the very same tensor (no draw: the generator does not move); at
    another scale ``s'`` a new tensor ``buffer·s'/s`` (hand formula) and the buffer is left as it was. The next
    step then continues the stream where step 0 left it."""
    g = _gen(3)
    src = GaussianNoise((4, 4), 0.1, g, F64, "cpu")
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


@pytest.mark.parametrize(
    ("asked", "after", "first"),
    [(1, -1, None), (2, 0, 0), (0, 1, 1)],
    ids=["first-not-0", "skip", "back"],
)
def test_gaussian_noise_refuses_steps_out_of_order_word_for_word(asked, after, first):
    """Only ``n = last + 1`` (or ``last`` again) may be asked for: a first step other than 0, a skipped step
    and an earlier step are refused with the step asked and the last one drawn."""
    src = GaussianNoise((2,), 0.1, _gen(0), F64, "cpu")
    if first is not None:
        for n in range(first + 1):
            src.increment(n)
    with pytest.raises(
        RuntimeError,
        match=rf"^noise drawn from a generator must be read in step order: asked for step {asked} after step "
        rf"{after}$",
    ):
        src.increment(asked)


def test_gaussian_areas_are_drawn_after_their_step_once_and_afresh_each_step():
    """``space_time_area(n)`` is ``N(0, dt/12)`` drawn right after ``ξ_n``: the stream reads ``ξ_0, H_0, ξ_1,
    H_1`` (replayed by hand); asked twice it is the same tensor (drawn once); the next step gets a new one.
    A step whose area is never asked for leaves the stream to the next ``ξ``."""
    dt, shape = 0.09, (3, 2)
    sd = math.sqrt(dt / 12)
    src = GaussianNoise(shape, dt, _gen(4), F64, "cpu")
    xi0 = src.increment(0, 0.5).clone()
    H0 = src.space_time_area(0)
    assert src.space_time_area(0) is H0
    xi1 = src.increment(1, 0.5).clone()
    H1 = src.space_time_area(1)
    ref = _normals(4, shape, (0.5, sd, 0.5, sd))
    assert torch.equal(xi0, ref[0]) and torch.equal(H0, ref[1])
    assert torch.equal(xi1, ref[2]) and torch.equal(H1, ref[3])
    assert H1 is not H0 and not torch.equal(H1, H0)
    assert H0.dtype == F64 and H0.shape == shape
    plain = GaussianNoise(shape, dt, _gen(4), F64, "cpu")
    plain.increment(0, 0.5)
    assert torch.equal(plain.increment(1, 0.5), _normals(4, shape, (0.5, 0.5))[1])


def test_an_area_asked_first_draws_its_step_at_sqrt_dt():
    """``space_time_area(n)`` before ``increment(n)`` draws ``ξ_n`` at scale ``sqrt(dt)``: ``increment(n,
    sqrt_dt)`` is then that buffer itself, and ``increment(n, 1)`` the buffer divided by ``sqrt(dt)``."""
    dt = 0.25
    src = GaussianNoise((5,), dt, _gen(6), F64, "cpu")
    H = src.space_time_area(0).clone()
    buf = src.increment(0, 0.5)
    assert src.increment(0, 0.5) is buf
    ref = _normals(6, (5,), (0.5, math.sqrt(dt / 12)))
    assert torch.equal(buf, ref[0]) and torch.equal(H, ref[1])
    assert torch.equal(src.increment(0, 1.0), ref[0] * (1.0 / 0.5))


def test_prefetches_needs_a_cpu_float32_or_float64_buffer_of_at_least_overlap_min_numbers(monkeypatch):
    """``prefetches``: CPU, float32/float64 (where a scale-1 draw times ``s`` is ``normal_(0, s)``), and
    ``_background.pays(numel)``: at ``numel = OVERLAP_MIN`` yes, one fewer no; float16/bfloat16 or the meta
    device never."""
    shape = (4, 3)
    monkeypatch.setattr(_background, "OVERLAP_MIN", 12)
    assert GaussianNoise(shape, 0.1, _gen(0), F64, "cpu").prefetches is True
    assert GaussianNoise(shape, 0.1, _gen(0), F32, "cpu").prefetches is True
    assert RademacherNoise(shape, 0.1, _gen(0), F64, "cpu").prefetches is True
    assert GaussianNoise(shape, 0.1, _gen(0), torch.float16, "cpu").prefetches is False
    assert GaussianNoise(shape, 0.1, _gen(0), torch.bfloat16, "cpu").prefetches is False
    assert GaussianNoise(shape, 0.1, _gen(0), F64, "meta").prefetches is False
    monkeypatch.setattr(_background, "OVERLAP_MIN", 13)
    assert GaussianNoise(shape, 0.1, _gen(0), F64, "cpu").prefetches is False
    monkeypatch.setattr(_background, "MIN_THREADS", 10**6)  # torch may not use enough threads
    monkeypatch.setattr(_background, "OVERLAP_MIN", 0)
    assert GaussianNoise(shape, 0.1, _gen(0), F64, "cpu").prefetches is False


def test_without_prefetching_nothing_watches_the_generator():
    """A source that cannot prefetch (buffer below ``OVERLAP_MIN``) never saves the generator's state, never
    marks itself verified, and ``will_prefetch``/``prefetch`` start nothing; the draws are the serial ones."""
    g = _gen(2)
    src = GaussianNoise((3,), 0.1, g, F64, "cpu")
    for n in range(3):
        src.increment(n)
        assert src._state_after is None and src._verified is False and src._shared is False
        assert src.will_prefetch(n + 1) is False
        src.prefetch(n + 1)
        assert src._pending is None
    assert torch.equal(src.increment(2), _normals(2, (3,), (1.0, 1.0, 1.0))[2])


def test_will_prefetch_only_the_next_step_once_the_callers_update_left_the_generator_alone(monkeypatch):
    """``will_prefetch(n)``: false before two draws have shown that nothing else drew between them; then true
    for ``last + 1`` only, false while a prefetch is pending. A chain of prefetched steps (scale known, scale 1
    then read at another scale) gives the serial draws bit for bit, and leaves the generator where the serial
    run leaves it."""
    _prefetching(monkeypatch)
    shape = (6, 5)  # ≥ 16 numbers: a scale-1 draw times s is normal_(0, s) bit for bit
    g = _gen(5)
    src = GaussianNoise(shape, 0.1, g, F64, "cpu")
    assert src.will_prefetch(0) is False  # nothing verified yet
    src.increment(0, 0.3)
    assert src._state_after is not None and src.will_prefetch(1) is False  # one draw: not verified yet
    src.increment(1, 0.3)
    assert src._verified is True and src._shared is False
    assert [src.will_prefetch(n) for n in (0, 1, 2, 3)] == [False, False, True, False]
    src.prefetch(3)  # not the next step: nothing starts
    assert src._pending is None
    src.prefetch(2, 0.3)
    assert src._pending is not None and src._pending[0] == 2 and src._pending[1] == 0.3
    assert src.will_prefetch(2) is False  # one pending already
    got = [src.increment(2, 0.3).clone()]
    assert src._pending is None
    src.prefetch(3, 1.0)  # the caller does not know the scale: drawn at 1, read at 0.7
    got.append(src.increment(3, 0.7).clone())
    src.prefetch(4, 0.5)  # a wrong guess: rescaled by 2/0.5, equal to rounding
    got.append(src.increment(4, 2.0).clone())
    src.prefetch(5, 0.5)  # drawn at 0.5, read at 1: multiplied by 1/0.5
    got.append(src.increment(5, 1.0).clone())
    ref = _normals(5, shape, (0.3, 0.3, 0.3, 0.7, 2.0, 1.0))
    assert torch.equal(got[0], ref[2]) and torch.equal(got[1], ref[3])
    _close(got[2], ref[4], rtol=1e-15, atol=0)
    _close(got[3], ref[5], rtol=1e-15, atol=0)
    assert (got[2] - ref[4] / 2.0).abs().max() > 0.1  # negative control: the rescale matters
    serial = _gen(5)
    for _ in range(6):
        torch.empty(shape, dtype=F64).normal_(generator=serial)
    assert torch.equal(g.get_state(), serial.get_state())


def test_a_shared_source_never_prefetches_even_if_marked_verified(monkeypatch):
    """``will_prefetch`` checks ``_shared`` on its own (a defensive clause: the two flags are set together in
    normal use): a source marked shared declines although verified; unmarked it accepts (control)."""
    _prefetching(monkeypatch)
    src = GaussianNoise((4, 4), 0.1, _gen(9), F64, "cpu")
    src.increment(0)
    src._verified, src._shared = True, True
    assert src.will_prefetch(1) is False
    src._shared = False
    assert src.will_prefetch(1) is True


def test_a_generator_drawn_from_between_steps_turns_prefetching_off_for_good(monkeypatch):
    """Something else draws from the generator between two draws: the source sees the state differ from the
    one it saved, marks itself shared, and never prefetches again (even after clean steps); the increments
    are then simply the generator's next numbers."""
    _prefetching(monkeypatch)
    g = _gen(9)
    src = GaussianNoise((4, 4), 0.1, g, F64, "cpu")
    src.increment(0)
    intruder = torch.empty(3, dtype=F64).normal_(generator=g)
    expected = torch.empty(4, 4, dtype=F64).normal_(generator=_gen(9).set_state(g.get_state()))
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
    src = GaussianNoise((5, 4), 0.1, g, F64, "cpu")
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
    torch.empty(2, dtype=F64).normal_(generator=g)  # the caller draws between step 2 and the prefetch
    moved = g.get_state()
    src.prefetch(3)
    src.settle()
    assert torch.equal(g.get_state(), moved)
    src.increment(3)  # its draw compares against the prefetch's starting state: clean
    assert src._shared is False and src.will_prefetch(4) is True


def test_an_area_cannot_follow_a_prefetch_of_the_next_step_but_a_prefetched_step_has_its_area(monkeypatch):
    """With step ``n + 1`` prefetched, ``space_time_area(n)`` is refused word for word; ``space_time_area(n +
    1)`` reads the prefetched step (drawn at ``sqrt(dt)``) and then draws its area: the serial stream."""
    _prefetching(monkeypatch)
    dt, shape = 0.04, (4, 5)
    src = GaussianNoise(shape, dt, _gen(13), F64, "cpu")
    src.increment(0, 0.2)
    src.increment(1, 0.2)
    src.prefetch(2, 0.2)
    with pytest.raises(
        RuntimeError, match=r"^the Lévy area of a step must be asked for before the next step is prefetched$"
    ):
        src.space_time_area(1)
    H2 = src.space_time_area(2)
    ref = _normals(13, shape, (0.2, 0.2, 0.2, math.sqrt(dt / 12)))
    assert torch.equal(src.increment(2, 0.2), ref[2]) and torch.equal(H2, ref[3])


# ================================================================================================================
# meanfield.stepping.brownian: RademacherNoise
# ================================================================================================================


def _bits_reference(seed: int, n: int, scales, dtype=F64) -> list[torch.Tensor]:
    """Entry ``k`` of each draw: ``s·(2·bit_{k mod 8}(byte_{⌊k/8⌋}) − 1)``, ``⌈n/8⌉`` bytes per draw."""
    g = _gen(seed)
    out = []
    k = torch.arange(n)
    for s in scales:
        raw = torch.empty((n + 7) // 8, dtype=torch.uint8).random_(0, 256, generator=g)
        bits = (raw[k // 8].long() >> (k % 8)) & 1
        out.append(s * (2.0 * bits.to(dtype) - 1.0))
    return out


@pytest.mark.parametrize("shape", [(1,), (3,), (8,), (3, 3), (2, 8)], ids=["1", "3", "8", "9", "16"])
def test_rademacher_entries_are_the_bits_of_ceil_n_over_8_bytes_per_step(shape):
    """Sizes below, at, and above whole bytes: each step reads exactly ``⌈n/8⌉`` bytes (so later steps stay
    aligned with the reference) and entry ``k`` is bit ``k mod 8`` of byte ``⌊k/8⌋``, times the scale; the
    scale may change and return to 1 (the sign table follows it)."""
    n = math.prod(shape)
    scales = (1.0, 0.37, 0.37, 1.0, 2.5)
    src = RademacherNoise(shape, 0.1, _gen(21), F64, "cpu")
    ref = _bits_reference(21, n, scales)
    for step, s in enumerate(scales):
        got = src.increment(step, s)
        assert got.shape == shape and torch.equal(got.reshape(-1), ref[step])
    assert not torch.equal(ref[3], ref[0]) or n < 3  # negative control: the steps differ


def test_rademacher_is_not_gaussian_has_no_areas_and_keeps_its_dtype():
    """``gaussian`` is false (Gaussian noise's is true); areas are refused with the class's name; float32
    entries are exactly ``±float32(s)``; the sign table is ``2·bit − 1`` for all 256 bytes."""
    src = RademacherNoise((2, 5), 0.1, _gen(1), F32, "cpu")
    assert src.gaussian is False and RademacherNoise.gaussian is False and GaussianNoise.gaussian is True
    got = src.increment(0, 0.37)
    assert got.dtype == F32 and torch.equal(got.reshape(-1), _bits_reference(1, 10, (0.37,), F32)[0])
    with pytest.raises(ValueError, match=r"^RademacherNoise has no space-time Lévy area; use Gaussian noise"):
        src.space_time_area(0)
    b = torch.arange(256)
    table = torch.stack([((b >> j) & 1) * 2 - 1 for j in range(8)], 1).to(F32)
    assert torch.equal(src._signs, table) and src._bytes.shape == (2,) and src._bytes.dtype == torch.uint8


def test_rademacher_prefetched_steps_are_the_serial_ones(monkeypatch):
    """With background draws, prefetched Rademacher steps (scale known, or 1 and read at another) equal the
    serial bits times the scale."""
    _prefetching(monkeypatch)
    src = RademacherNoise((3, 7), 0.1, _gen(4), F64, "cpu")
    scales = (0.5, 0.5, 0.5, 0.25)
    got = [src.increment(0, 0.5).clone(), src.increment(1, 0.5).clone()]
    src.prefetch(2, 0.5)
    assert src._pending is not None
    got.append(src.increment(2, 0.5).clone())
    src.prefetch(3, 1.0)
    got.append(src.increment(3, 0.25).clone())
    for a, b in zip(got, _bits_reference(4, 21, scales)):
        assert torch.equal(a.reshape(-1), b)


# ================================================================================================================
# meanfield.stepping.brownian: BrownianIncrements
# ================================================================================================================


def test_brownian_increments_keep_their_tensors_and_read_them_at_any_scale():
    """The constructor keeps ``dW`` and ``H`` themselves, ``shape = dW.shape[1:]``, ``dt`` as a float;
    ``increment(n, sqrt_dt)`` is the stored row itself (a view, no copy), ``increment(n, s)`` the row times
    ``s/sqrt(dt)`` (numpy reference), ``dW(n)`` the row; ``space_time_area(n)`` is ``H[n]``; ``len`` is N."""
    dW = torch.randn(4, 2, 3, generator=_gen(2), dtype=F64)
    H = torch.randn(4, 2, 3, generator=_gen(3), dtype=F64)
    inc = BrownianIncrements(dW, 1, H)
    assert inc.increments is dW and inc.H is H and len(inc) == 4
    assert inc.shape == (2, 3) and inc.dt == 1.0 and type(inc.dt) is float and inc.sqrt_dt == 1.0
    inc = BrownianIncrements(dW, 0.25, H)
    row = inc.increment(2, 0.5)
    assert row.data_ptr() == dW[2].data_ptr() and torch.equal(row, dW[2])
    assert inc.dW(1).data_ptr() == dW[1].data_ptr()
    np.testing.assert_allclose(inc.increment(3).numpy(), dW[3].numpy() / 0.5, rtol=1e-15)
    np.testing.assert_allclose(inc.increment(0, 0.1).numpy(), dW[0].numpy() * 0.2, rtol=1e-15)
    assert torch.equal(inc.space_time_area(3), H[3])
    assert inc.gaussian is True and inc.prefetches is False and inc.will_prefetch(0) is False


def test_brownian_increments_without_areas_refuse_them_by_name():
    inc = BrownianIncrements(torch.zeros(2, 1), 0.1)
    assert inc.H is None
    with pytest.raises(
        ValueError,
        match=r"^BrownianIncrements has no space-time Lévy area; use Gaussian noise from a generator or "
        r"BrownianIncrements\.sample\(\.\.\., levy_area=True\)$",
    ):
        inc.space_time_area(0)


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((torch.zeros(3, 2), 0.0), ValueError, r"^dt must be > 0, got 0\.0$"),
        ((torch.zeros(3, 2), "0.1"), TypeError, r"^dt must be a real number, got str$"),
        ((torch.zeros(3, 2), math.inf), ValueError, r"^dt must be finite, got inf$"),
        (
            (np.zeros((3, 2)), 0.1),
            ValueError,
            r"^dW must be a floating-point tensor of shape \(N, \*noise_shape\), got \(3, 2\)$",
        ),
        (
            (torch.zeros(3), 0.1),
            ValueError,
            r"^dW must be a floating-point tensor .*got torch\.Size\(\[3\]\)$",
        ),
        (
            (torch.zeros(3, 2, dtype=torch.int64), 0.1),
            ValueError,
            r"^dW must be .*got torch\.Size\(\[3, 2\]\)$",
        ),
        (
            (torch.zeros(3, 2), 0.1, torch.zeros(3, 1)),
            ValueError,
            r"^H must have the shape of dW \(3, 2\), got torch\.Size\(\[3, 1\]\)$",
        ),
        (
            (torch.zeros(3, 2), 0.1, [[0.0, 0.0]]),
            ValueError,
            r"^H must have the shape of dW \(3, 2\), got \[\[0\.0, 0\.0\]\]$",
        ),
    ],
    ids=["dt-zero", "dt-str", "dt-inf", "numpy", "1d", "int", "H-shape", "H-list"],
)
def test_brownian_increments_refuse_bad_arguments_word_for_word(args, error, message):
    """Each check of the constructor: ``dt`` (> 0, finite, real), ``dW`` (a floating tensor of ≥ 2
    dimensions; a non-tensor's shape or type name), ``H`` (a tensor of ``dW``'s shape)."""
    with pytest.raises(error, match=message):
        BrownianIncrements(*args)


def test_a_2d_float_dw_and_a_matching_h_are_accepted():
    """Negative control of the refusals: the smallest accepted ``dW`` (2 dimensions) with a matching ``H``."""
    inc = BrownianIncrements(torch.zeros(3, 1, dtype=F32), 0.1, torch.zeros(3, 1, dtype=F32))
    assert inc.shape == (1,) and len(inc) == 3


def test_sample_defaults_float64_cpu_no_areas_and_takes_a_list_shape():
    """``sample`` without options: float64 on the CPU, no areas, ``normal_(0, sqrt(dt))`` of the seed."""
    inc = BrownianIncrements.sample(3, [2, 2], 0.16, generator=5)
    ref = torch.empty(3, 2, 2, dtype=F64).normal_(0.0, 0.4, generator=_gen(5))
    assert inc.H is None and inc.increments.dtype == F64 and inc.increments.device.type == "cpu"
    assert torch.equal(inc.increments, ref) and inc.dt == 0.16 and inc.shape == (2, 2)
    areas = BrownianIncrements.sample(3, (2, 2), 0.16, generator=5, levy_area=True)
    g = _gen(5)
    dW = torch.empty(3, 2, 2, dtype=F64).normal_(0.0, 0.4, generator=g)
    H = torch.empty(3, 2, 2, dtype=F64).normal_(0.0, math.sqrt(0.16 / 12), generator=g)
    assert torch.equal(areas.increments, dW) and torch.equal(areas.H, H)  # H: the same generator, after dW
    with pytest.raises(ValueError, match=r"^generator is on cpu, but the numbers are drawn on meta"):
        BrownianIncrements.sample(3, (2,), 0.1, generator=_gen(0), device="meta")


def test_sample_refuses_bad_steps_dt_and_a_missing_generator_word_for_word():
    """``sample`` checks ``n_steps`` (an int ≥ 1), ``dt`` (> 0) and the generator (``None`` refused)."""
    with pytest.raises(ValueError, match=r"^n_steps must be ≥ 1, got 0$"):
        BrownianIncrements.sample(0, (1,), 0.1, generator=0)
    with pytest.raises(TypeError, match=r"^n_steps must be an int, got float$"):
        BrownianIncrements.sample(2.0, (1,), 0.1, generator=0)
    with pytest.raises(ValueError, match=r"^dt must be > 0, got -0\.5$"):
        BrownianIncrements.sample(2, (1,), -0.5, generator=0)
    with pytest.raises(
        TypeError,
        match=r"^generator must be a torch\.Generator, an int seed \(Python or numpy integer\), got NoneType$",
    ):
        BrownianIncrements.sample(2, (1,), 0.1, generator=None)
    assert len(BrownianIncrements.sample(1, (1,), 0.1, generator=0)) == 1  # control: the smallest accepted


def _zstat(samples: np.ndarray, expected: float) -> float:
    """``(mean − expected)/SE`` of i.i.d. samples."""
    return (samples.mean() - expected) / (samples.std(ddof=1) / math.sqrt(samples.size))


def _brownian_moment_checks(dW: np.ndarray, H: np.ndarray, dt: float) -> list[float]:
    """z statistics of the closed-form moments of ``S`` independent paths of ``N`` steps (``dW``, ``H`` of
    shape ``(N, S)``): increments ``E = 0``, ``Var = dt``, areas ``Var = dt/12``, ``Cov(dW, H) = 0``; the
    path ``Var W_n = n·dt``, ``Cov(W_m, W_n) = min(m, n)·dt``; the bridge ``B_n = W_n − (n/N)·W_N``:
    ``Var B_n = dt·n(N − n)/N``, ``Cov(B_m, B_n) = dt·m(N − n)/N`` for ``m ≤ n``."""
    N = dW.shape[0]
    W = BrownianIncrements(torch.from_numpy(dW), dt).path.numpy()  # (N + 1, S)
    B = W - (np.arange(N + 1) / N)[:, None] * W[N]
    m, n = N // 4, 3 * N // 4
    return [
        _zstat(dW[0], 0.0),
        _zstat(dW[1] ** 2, dt),
        _zstat(H[2] ** 2, dt / 12),
        _zstat(dW[3] * H[3], 0.0),
        _zstat(W[n] ** 2, n * dt),
        _zstat(W[m] * W[n], m * dt),
        _zstat(B[N // 2] ** 2, dt * (N // 2) * (N - N // 2) / N),
        _zstat(B[m] * B[n], dt * m * (N - n) / N),
    ]


def test_sampled_paths_and_bridges_have_the_brownian_moments():
    """``sample(N, (S,), dt, levy_area=True)``: ``S = 40000`` paths of ``N = 16`` steps, eight closed-form
    moments (see ``_brownian_moment_checks``) within ``Z·SE``. Smallest detectable error: a variance off by
    ``Z·sqrt(2/S) ≈ 3.2 %``, a correlation of ``≈ 0.023``. Negative controls: increments 10 % too wide, areas
    with the variance of ``dt`` instead of ``dt/12``, and a path made of increments repeated in pairs (its
    covariances wrong) each fail."""
    N, S, dt = 16, 40000, 0.05
    inc = BrownianIncrements.sample(N, (S,), dt, generator=17, levy_area=True)
    dW, H = inc.increments.numpy(), inc.H.numpy()
    z = _brownian_moment_checks(dW, H, dt)
    assert max(abs(v) for v in z) < Z, z
    assert max(abs(v) for v in _brownian_moment_checks(1.1 * dW, H, dt)) > Z
    assert abs(_brownian_moment_checks(dW, H * math.sqrt(12), dt)[2]) > Z
    paired = np.repeat(dW[::2], 2, axis=0)  # w_{2j+1} = w_{2j}: each step still N(0, dt)
    assert abs(_brownian_moment_checks(paired, H, dt)[1]) < Z
    assert max(abs(v) for v in _brownian_moment_checks(paired, H, dt)[4:]) > Z


def test_path_is_zero_then_the_cumulative_sums():
    """``path``: ``(N + 1, *shape)``, row 0 zeros, row ``n`` the sum of the first ``n`` increments (numpy
    cumsum), in the increments' dtype."""
    dW = torch.randn(5, 2, 3, generator=_gen(8), dtype=F32)
    path = BrownianIncrements(dW, 0.1).path
    assert path.shape == (6, 2, 3) and path.dtype == F32
    want = np.concatenate([np.zeros((1, 2, 3), np.float32), np.cumsum(dW.numpy(), 0)])
    np.testing.assert_allclose(path.numpy(), want, rtol=1e-6, atol=1e-6)
    assert torch.equal(path[0], torch.zeros(2, 3))


def _area(W: np.ndarray, lo: int, hi: int, u: float) -> np.ndarray:
    """``1/T ∫_a^b (W_s − W_a − (s − a)/T·ΔW) ds`` of the piecewise-linear path through ``W[lo..hi]`` (grid
    step ``u``): the trapezoid rule is exact for it."""
    T = (hi - lo) * u
    seg = W[lo : hi + 1]
    integral = u * (seg[:-1] + seg[1:]).sum(0) / 2
    return (integral - W[lo] * T) / T - (W[hi] - W[lo]) / 2


@pytest.mark.parametrize("k", [1, 2, 4])
def test_coarsen_sums_increments_and_combines_areas_exactly(k):
    """An exact Brownian-like path on a super-fine grid (piecewise linear through ``L = 5`` points per fine
    step): its fine increments and areas (trapezoid integrals), coarsened by ``k``, equal the increments and
    areas of the same path measured directly on the coarse grid (to 1e-12); ``dt`` becomes ``k·dt``; ``k = 1``
    changes nothing. Negative control: areas measured on the coarse grid without the fine areas differ."""
    N, L, h = 8, 5, 0.125
    u = h / L
    steps = np.random.default_rng(3).normal(0.0, math.sqrt(u), size=(N * L, 2, 3))
    W = np.concatenate([np.zeros((1, 2, 3)), np.cumsum(steps, 0)])  # (N·L + 1, 2, 3)
    w = np.stack([W[(j + 1) * L] - W[j * L] for j in range(N)])
    Hf = np.stack([_area(W, j * L, (j + 1) * L, u) for j in range(N)])
    coarse = BrownianIncrements(torch.from_numpy(w), h, torch.from_numpy(Hf)).coarsen(k)
    assert len(coarse) == N // k and coarse.dt == k * h and coarse.shape == (2, 3)
    want_w = np.stack([W[(j + 1) * k * L] - W[j * k * L] for j in range(N // k)])
    want_H = np.stack([_area(W, j * k * L, (j + 1) * k * L, u) for j in range(N // k)])
    np.testing.assert_allclose(coarse.increments.numpy(), want_w, rtol=0, atol=1e-12)
    np.testing.assert_allclose(coarse.H.numpy(), want_H, rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        coarse.increments.numpy(), w.reshape(N // k, k, 2, 3).sum(1), rtol=0, atol=1e-12
    )
    if k > 1:
        lost = BrownianIncrements(torch.from_numpy(w), h, torch.zeros(N, 2, 3, dtype=F64)).coarsen(k)
        assert np.abs(lost.H.numpy() - want_H).max() > 1e-3


def test_coarsen_without_areas_and_its_refusals():
    """Without areas the coarse source has none; ``k`` must be an int ≥ 1 that divides N (each refusal word
    for word)."""
    dW = torch.randn(6, 2, generator=_gen(1), dtype=F64)
    coarse = BrownianIncrements(dW, 0.25).coarsen(3)
    assert (
        coarse.H is None and coarse.dt == 0.75 and torch.equal(coarse.increments, dW.reshape(2, 3, 2).sum(1))
    )
    inc = BrownianIncrements(dW, 0.25)
    with pytest.raises(
        ValueError, match=r"^cannot coarsen 6 steps by k=4: k must divide the number of steps$"
    ):
        inc.coarsen(4)
    with pytest.raises(ValueError, match=r"^k must be ≥ 1, got 0$"):
        inc.coarsen(0)
    with pytest.raises(TypeError, match=r"^k must be an int, got float$"):
        inc.coarsen(2.0)
    assert len(inc.coarsen(6)) == 1 and len(inc.coarsen(2)) == 3


# ================================================================================================================
# meanfield.optim.noise
# ================================================================================================================


def _bucket(shapes, dtype=F64, rows=None, block=0) -> Bucket:
    params = [torch.zeros(s, dtype=dtype) for s in shapes]
    offsets = [sum(math.prod(s) for s in shapes[:i]) for i in range(len(shapes))]
    return Bucket(params, offsets, sum(math.prod(s) for s in shapes), rows=rows, block=block)


def test_draw_size_is_n_the_full_rows_when_sharded_and_zero_with_block_noise():
    """``draw_size``: the bucket's ``n`` unsharded; sharded rows ``[2, 4)`` of ``M = 6`` particles with
    parameters ``(2, 3)`` and ``(2,)``: ``3·6 + 1·6 = 24`` (hand count); 0 with block noise (sharded or not)."""
    assert draw_size(_bucket([(4, 3), (5,)])) == 17
    assert draw_size(_bucket([(2, 3), (2,)], rows=(2, 4, 6))) == 24
    assert draw_size(_bucket([(3, 2, 2)], rows=(0, 3, 9))) == 36
    assert draw_size(_bucket([(4, 3)], block=2)) == 0
    assert draw_size(_bucket([(2, 3)], rows=(2, 4, 6), block=2)) == 0


def _block_seed(seed: int, group: int, j: int, step: int) -> int:
    digest = hashlib.sha256(f"{seed}/noise/{group}/{j}/{step}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 2


def _block_reference(seed, group, step, shapes, start, stop, k, dtype=F64) -> torch.Tensor:
    """Block ``j`` of ``[start, stop)`` from ``Generator().manual_seed(sha256 seed of block j)``: each
    parameter's ``k`` rows in turn; the result flat, parameter after parameter (rows in order)."""
    per_param = [[] for _ in shapes]
    for j in range(start // k, stop // k):
        g = _gen(_block_seed(seed, group, j, step))
        for i, s in enumerate(shapes):
            per_param[i].append(torch.empty((k, *s[1:]), dtype=dtype).normal_(generator=g))
    return torch.cat([torch.cat(parts).reshape(-1) for parts in per_param])


@pytest.mark.parametrize("dtype", [F64, F32], ids=["f64", "f32"])
def test_block_noise_draws_each_block_from_its_own_hashed_seed(dtype):
    """``block_noise``: particles ``[0, 4)`` in blocks of 2, two parameters ``(4, 2)`` and ``(4,)``: block
    ``j`` from the seed ``sha256(f"{seed}/noise/{group}/{j}/{step}")`` (hashlib by hand), drawing the
    parameters' rows in order, in the bucket's dtype. Negative controls: another step, group, seed or block
    size gives other numbers."""
    shapes = [(4, 2), (4,)]
    b = _bucket(shapes, dtype=dtype, block=2)
    got = block_noise(b, 5, 1, 3)
    assert got.shape == (12,) and got.dtype == dtype
    assert torch.equal(got, _block_reference(5, 1, 3, shapes, 0, 4, 2, dtype))
    for other in (block_noise(b, 5, 1, 4), block_noise(b, 5, 2, 3), block_noise(b, 6, 1, 3)):
        assert not torch.equal(other, got)
    assert not torch.equal(block_noise(_bucket(shapes, dtype=dtype, block=4), 5, 1, 3), got)


def test_block_noise_of_a_shard_is_its_rows_of_the_whole_draw():
    """Sharded rows ``[2, 6)`` of 8 particles, blocks of 2: the global blocks 1 and 2 (hashlib reference);
    the shards ``[0, 4)`` and ``[4, 8)`` together are, parameter by parameter, the unsharded draw."""
    shapes = [(4, 3), (4,)]
    shard = _bucket(shapes, rows=(2, 6, 8), block=2)
    assert torch.equal(block_noise(shard, 9, 0, 2), _block_reference(9, 0, 2, shapes, 2, 6, 2))
    whole = block_noise(_bucket([(8, 3), (8,)], block=2), 9, 0, 2)
    left = block_noise(_bucket(shapes, rows=(0, 4, 8), block=2), 9, 0, 2)
    right = block_noise(_bucket(shapes, rows=(4, 8, 8), block=2), 9, 0, 2)
    assert torch.equal(whole[:24], torch.cat([left[:12], right[:12]]))
    assert torch.equal(whole[24:], torch.cat([left[12:], right[12:]]))
    assert torch.equal(block_noise(shard, 9, 0, 2)[:6], whole[6:12])


def test_local_noise_is_the_full_draw_unsharded_and_this_ranks_rows_when_sharded():
    """``local_noise``: unsharded, the very tensor given; sharded rows ``[2, 4)`` of ``M = 5`` with parameters
    ``(2, 3)`` and ``(2,)``: the full draw is ``[p0 of all M (5·3), p1 of all M (5)]`` and the local noise
    the rows 2 and 3 of each, in order (by hand)."""
    full = torch.arange(7.0)
    assert local_noise(_bucket([(7,)]), full) is full
    full = torch.arange(20.0, dtype=F64)
    got = local_noise(_bucket([(2, 3), (2,)], rows=(2, 4, 5)), full)
    assert got.tolist() == [6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 17.0, 18.0]
    got = local_noise(_bucket([(1, 2, 2), (1,)], rows=(0, 1, 3)), torch.arange(15.0))
    assert got.tolist() == [0.0, 1.0, 2.0, 3.0, 12.0]
    # three parameters: the third's part starts after both others' (5·2 + 5·1 = 15 numbers)
    got = local_noise(_bucket([(1, 2), (1,), (1, 3)], rows=(3, 4, 5)), torch.arange(30.0))
    assert got.tolist() == [6.0, 7.0, 13.0, 24.0, 25.0, 26.0]


def test_fill_normal_fills_in_order_and_a_shared_generator_continues_its_stream():
    """``fill_normal``: each flat from its generator, in the order given: two flats on one generator read
    consecutive numbers (one draw of 5 then one of 3), a third on its own generator its first numbers."""
    g, h = _gen(4), _gen(5)
    a, b, c = torch.empty(5, dtype=F64), torch.empty(3, dtype=F64), torch.empty(2, dtype=F32)
    fill_normal([(a, g), (c, h), (b, g)])
    ref = _gen(4)
    assert torch.equal(a, torch.empty(5, dtype=F64).normal_(generator=ref))
    assert torch.equal(b, torch.empty(3, dtype=F64).normal_(generator=ref))
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
    a, b = torch.empty(5, dtype=F64), torch.empty(3, dtype=F32)
    views = [a[:2], b]
    sg, sh = g.get_state(), h.get_state()
    draw = NoiseDraw([(a, g), (b, h)], views)
    assert draw.views is views
    assert (draw._pending is not None) is background
    draw.wait()
    assert draw._pending is None
    draw.wait()
    assert torch.equal(a, torch.empty(5, dtype=F64).normal_(generator=_gen(1)))
    assert torch.equal(b, torch.empty(3, dtype=F32).normal_(generator=_gen(2)))
    draw.undo()
    assert torch.equal(g.get_state(), sg) and torch.equal(h.get_state(), sh)


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


def test_noise_draw_counts_only_cpu_numbers_and_draws_other_devices_at_once(monkeypatch):
    """Only the CPU buffers count for ``OVERLAP_MIN`` (4 CPU numbers stay serial next to 100 elsewhere; at
    ``OVERLAP_MIN = 4`` they go to the background); the other devices' buffers are filled in the caller's
    thread, once, from their own generator, before ``wait``."""
    g, m = _gen(1), _gen(3)
    cpu, other = torch.empty(4, dtype=F64), _OtherDevice(100)
    monkeypatch.setattr(_background, "OVERLAP_MIN", 5)
    assert NoiseDraw([(cpu, g), (other, m)], [])._pending is None
    assert other.filled == [(m, threading.get_ident())]
    monkeypatch.setattr(_background, "OVERLAP_MIN", 4)
    g, other = _gen(1), _OtherDevice(100)
    draw = NoiseDraw([(cpu, g), (other, m)], [])
    assert draw._pending is not None and other.filled == [(m, threading.get_ident())]
    draw.wait()
    assert torch.equal(cpu, torch.empty(4, dtype=F64).normal_(generator=_gen(1)))


def test_a_failed_background_draw_is_reraised_by_wait_and_swallowed_by_undo(monkeypatch):
    """A draw that fails in the background thread (an integer buffer: ``normal_`` is not implemented for it)
    re-raises in ``wait``; ``undo`` waits, drops the error and restores the generator."""
    _prefetching(monkeypatch)
    g = _gen(6)
    state = g.get_state()
    draw = NoiseDraw([(torch.empty(3, dtype=F64), g), (torch.empty(2, dtype=torch.int64), g)], [])
    with pytest.raises(NotImplementedError, match="normal_kernel_cpu"):
        draw.wait()
    state = g.get_state()
    again = NoiseDraw([(torch.empty(3, dtype=F64), g), (torch.empty(2, dtype=torch.int64), g)], [])
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
    b1, b2 = _bucket([(3,)]), _bucket([(2, 2)])
    kind = (torch.device("cpu"), F64)
    exact = torch.zeros(7, dtype=F64)
    buffers = {kind: exact}
    asked = []
    g = _gen(8)
    draw = start_noise([(b1, [0], 0, 0), (b2, [0], 1, 0)], buffers, lambda d: asked.append(d) or g)
    draw.wait()
    assert asked == [torch.device("cpu")] and buffers[kind] is exact
    ref = torch.empty(7, dtype=F64).normal_(generator=_gen(8))
    assert torch.equal(draw.views[0], ref[:3]) and torch.equal(draw.views[1], ref[3:])
    assert draw.views[1].data_ptr() == exact.data_ptr() + 3 * 8


def test_start_noise_splits_one_draw_per_kind_among_buckets_in_order():
    """Buckets of two kinds interleaved (float64 of 2, float32 of 3, float64 of 4 and 5 numbers): one float64
    draw of 11 and one float32 draw of 3 (replayed by hand in that order from the one generator); the
    float64 views are the slices ``[0, 2)``, ``[2, 6)``, ``[6, 11)`` of their draw, each in its dtype."""
    bs = [_bucket([(2,)]), _bucket([(3,)], dtype=F32), _bucket([(4,)]), _bucket([(5,)])]
    buffers = {}
    g = _gen(14)
    draw = start_noise([(b, [0], i, 0) for i, b in enumerate(bs)], buffers, lambda d: g)
    draw.wait()
    ref = _gen(14)
    r64 = torch.empty(11, dtype=F64).normal_(generator=ref)
    r32 = torch.empty(3, dtype=F32).normal_(generator=ref)
    views = draw.views
    assert [v.dtype for v in views] == [F64, F32, F64, F64]
    assert (
        torch.equal(views[0], r64[:2]) and torch.equal(views[2], r64[2:6]) and torch.equal(views[3], r64[6:])
    )
    assert torch.equal(views[1], r32)
    assert sorted(b.numel() for b in buffers.values()) == [3, 11]


def _three_param_bucket(dtype=F64):
    shapes = [(2, 3), (4,), (3, 2)]
    b = Bucket(
        [torch.randn(s, generator=_gen(30 + i), dtype=dtype) for i, s in enumerate(shapes)], [0, 6, 10], 16
    )
    t = torch.rand(16, generator=_gen(40), dtype=dtype) + 0.5  # (n,) the preconditioner
    b.rsqrt, b.rsqrt_views = t, b.views(t, range(3))
    return b, [p.clone() for p in b.params], t


@pytest.mark.parametrize("preconditioned", [False, True], ids=["plain", "preconditioned"])
def test_add_noise_moves_only_the_indexed_parameters_of_a_subset(preconditioned):
    """Index ``[0, 2]`` of three parameters: parameter 1 does not move; 0 and 2 get ``sqrt(2β lr)·ξ`` or, with
    the preconditioner ready, ``sqrt(2β lr √bias2/M)·t ⊙ ξ`` (hand formulas with ``ξ`` and ``t`` read at each
    parameter's offset); the record keeps ``ξ``. Negative control: the other amplitude."""
    lr, beta, scale, bias2 = 0.02, 0.7, 3.0, 0.36
    b, before, t = _three_param_bucket()
    xi = torch.randn(16, generator=_gen(41), dtype=F64)
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
    xi = torch.randn(16, generator=_gen(43), dtype=F64)
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
            torch.ones(16, dtype=F64),
        )
        assert all(torch.equal(p, q) for p, q in zip(b.params, before))
    b, before, _ = _three_param_bucket(F32)
    xi = torch.randn(16, generator=_gen(42), dtype=F32)
    add_noise(Record(b, [0, 1, 2], "sgd", 0.5, 0.5, 1.0, None, False), xi)
    _close(b.params[1], before[1] + 0.5**0.5 * xi[6:10], rtol=1e-6, atol=1e-6)


# ================================================================================================================
# meanfield.nn.cloud
# ================================================================================================================


def _pairwise_energy(x: np.ndarray, V, k: float) -> float:
    """``(1/M) Σ_i V(x_i) + 1/(2M²) Σ_ij k/2·|x_i − x_j|²`` as a double sum (numpy)."""
    M = x.shape[0]
    diff = x[:, None, :] - x[None, :, :]
    return float(V(x).sum() / M + (k / 2 * (diff**2).sum(-1)).sum() / (2 * M * M))


def _double_well(x):
    return (x**4 / 4 - x**2 / 2).sum(-1)


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
    cloud = ParticleCloud(M, d, confinement, k, generator=_gen(3), dtype=F64)
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
    cloud = ParticleCloud(2, 2, Quadratic(1.0), 3.0, generator=_gen(0), dtype=F64)
    means = torch.tensor([[1.5, 4.0, 1.0, -0.5], [9.0, 9.0, 9.0, 9.0]], dtype=F64)
    assert float(cloud.energy(means)) == 1.5 + 1.5 * (4.0 - 1.25)


def test_cloud_initial_particles_from_the_global_generator_any_scale_and_repr():
    """``generator=None``: torch's global generator (``manual_seed`` replayed); ``init_scale`` multiplies
    the standard normals (0 gives zeros, a negative scale is allowed); a one-element tensor ``k`` becomes a
    float; the default device is the CPU; ``repr`` shows ``extra_repr``; the stacked parameter is named
    ``x``."""
    torch.manual_seed(11)
    cloud = ParticleCloud(5, 2, Quadratic(2.0), torch.tensor(0.5), init_scale=-2.0, dtype=F64)
    torch.manual_seed(11)
    assert torch.equal(cloud.x.detach(), -2.0 * torch.randn(5, 2, dtype=F64))
    assert cloud.x.device.type == "cpu" and cloud.k == 0.5 and type(cloud.k) is float
    assert ParticleCloud.particle_parameter_names == ("x",) and cloud.n_particles == 5 and cloud.d == 2
    assert repr(cloud) == "ParticleCloud(n_particles=5, d=2, confinement=Quadratic(a=2.0), k=0.5)"
    seeded = ParticleCloud(4, 3, Quadratic(1.0), init_scale=0.5, generator=_gen(2), dtype=F64)
    assert torch.equal(seeded.x.detach(), 0.5 * torch.randn(4, 3, generator=_gen(2), dtype=F64))
    zero = ParticleCloud(3, 4, Quadratic(1.0), init_scale=0.0, generator=_gen(1))
    assert torch.equal(zero.x.detach(), torch.zeros(3, 4))
    assert zero.x.requires_grad


def test_cloud_refuses_a_non_float_dtype_word_for_word():
    with pytest.raises(
        TypeError,
        match=r"^dtype must be a floating-point torch\.dtype \(e\.g\. torch\.float32\) or None, got torch\.int32$",
    ):
        ParticleCloud(3, 2, Quadratic(1.0), dtype=torch.int32)
    with pytest.raises(TypeError, match=r"^init_scale must be a real number, got NoneType$"):
        ParticleCloud(3, 2, Quadratic(1.0), init_scale=None)
    with pytest.raises(
        TypeError, match=r"^confinement must be a meanfield\.drift\.potentials\.Confinement, got None$"
    ):
        ParticleCloud(3, 2, None)


# ================================================================================================================
# meanfield._io
# ================================================================================================================


def test_write_atomic_flushes_and_fsyncs_the_whole_file_before_renaming(tmp_path, monkeypatch):
    """``fsync`` is called once, on the temporary file, when it already holds every byte written (the Python
    buffer flushed) and before the rename (the target does not exist yet); a ``str`` path gives a ``Path``
    back. The temporary file is in the target's folder, which is created (parents too)."""
    target = tmp_path / "sub" / "deeper" / "out.bin"  # two missing folders: made with their parents
    seen = []
    real_fsync = os.fsync

    def fsync(fd):
        seen.append((os.fstat(fd).st_size, target.exists(), sorted(p.name for p in target.parent.iterdir())))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    data = b"x" * 100
    got = _io.write_atomic(str(target), lambda f: f.write(data))
    assert isinstance(got, Path) and got == target
    ((size, existed, names),) = seen
    assert size == 100 and existed is False
    assert len(names) == 1 and re.fullmatch(r"\.out\.bin\.[A-Za-z0-9_]+\.tmp", names[0])
    assert target.read_bytes() == data


def test_a_failed_rename_removes_the_tmp_and_keeps_the_old_file(tmp_path, monkeypatch):
    """``os.replace`` fails (a full disk, say): the error propagates, the temporary file is removed, the old
    file holds its old bytes. A target that did not exist stays absent."""
    target = tmp_path / "t.json"
    target.write_bytes(b"old")

    def replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="No space left"):
        _io.write_text_atomic(target, "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"] and target.read_bytes() == b"old"
    with pytest.raises(OSError, match="No space left"):
        _io.write_json_atomic(tmp_path / "fresh.json", {"a": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


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


def test_write_text_atomic_writes_utf8_bytes_verbatim_and_returns_the_path(tmp_path):
    """UTF-8 whatever the locale, no newline translation (``\\r\\n`` kept), an empty text an empty file; the
    path returned; a second write replaces the file whole (a shorter text leaves no tail)."""
    target = tmp_path / "t.txt"
    assert _io.write_text_atomic(target, "é€\r\nb") == target
    assert target.read_bytes() == "é€\r\nb".encode() == b"\xc3\xa9\xe2\x82\xac\r\nb"
    _io.write_text_atomic(str(target), "z")
    assert target.read_bytes() == b"z"
    _io.write_text_atomic(target, "")
    assert target.read_bytes() == b""


def test_json_clean_replaces_non_finite_floats_recursively_and_copies():
    """``json_clean``: NaN, +Inf, −Inf (also numpy float64, a float subclass) become ``None`` at any depth;
    finite floats, ints, bools, strings and ``None`` stay; tuples become lists, dict keys strings; the input
    is not changed. Something else (a set) is returned as it is."""
    data = {
        "a": [1.5, float("nan"), (float("inf"), -float("inf"))],
        2: {"b": np.float64("nan"), "c": True, "d": None, "e": "x", "f": 0},
        None: -0.0,
    }
    got = _io.json_clean(data)
    assert got == {
        "a": [1.5, None, [None, None]],
        "2": {"b": None, "c": True, "d": None, "e": "x", "f": 0},
        "None": -0.0,
    }
    assert type(got["a"][2]) is list and got["2"]["c"] is True
    assert math.isnan(data["a"][1]) and isinstance(data["a"][2], tuple) and 2 in data  # the input unchanged
    s = {1, 2}
    assert _io.json_clean(s) is s
    assert (
        _io.json_clean(float("nan")) is None
        and _io.json_clean(3.25) == 3.25
        and _io.json_clean("nan") == "nan"
    )
    assert _io.json_clean((1, 2)) == [1, 2]


def test_write_json_atomic_writes_indent_one_ascii_json_and_a_final_newline(tmp_path):
    """The exact bytes: ``json.dumps(..., indent=1)`` (ASCII escapes for β, keys in insertion order, not
    sorted), non-finite floats as ``null``, one final newline; the path returned."""
    target = tmp_path / "d.json"
    data = {"z": 1, "a": [float("-inf"), "β"], "m": {}}
    assert _io.write_json_atomic(target, data) == target
    assert target.read_text() == '{\n "z": 1,\n "a": [\n  null,\n  "\\u03b2"\n ],\n "m": {}\n}\n'
    assert json.loads(target.read_text()) == {"z": 1, "a": [None, "β"], "m": {}}
    _io.write_json_atomic(target, [1, 2.5])
    assert target.read_bytes() == b"[\n 1,\n 2.5\n]\n"
