"""Tests of :mod:`meanfield.optim.drift`."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from meanfield.optim.buckets import Bucket
from meanfield.optim.drift import precondition
from meanfield.optim.step_stats import Record

F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _channels_last(seed: int) -> torch.Tensor:
    return torch.randn(2, 3, 2, 2, generator=_gen(seed), dtype=F64).to(memory_format=torch.channels_last)


def _logical(flat24: torch.Tensor) -> torch.Tensor:
    """A (2, 3, 2, 2) channels_last tensor's memory ``flat24`` read at logical (n, c, h, w): memory order is
    (n, h, w, c)."""
    return flat24.reshape(2, 2, 2, 3).permute(0, 3, 1, 2)


def _adam_bucket():
    p0, p1 = _channels_last(6), torch.randn(5, generator=_gen(7), dtype=F64)
    b = Bucket([p0, p1], [0, 24], 29)
    b.exp_avg = torch.zeros(29, dtype=F64)
    b.exp_avg_sq = torch.rand(29, generator=_gen(8), dtype=F64) * 2 + 1e-4  # (n,) memory order
    return b


def _t(v: np.ndarray, eps: float, bias2: float, scale: float) -> np.ndarray:
    return 1 / np.sqrt(np.sqrt(v) + eps * math.sqrt(bias2) / scale)


def test_precondition_of_all_parameters_fills_a_new_flat_buffer_with_t():
    """``t = 1/sqrt(sqrt(v) + ε·√bias2/M)`` elementwise over the flat ``v`` (numpy), in a buffer allocated like
    the moments with per-parameter views in their own layout; ``rsqrt_ready`` is set. Negative control:
    ``ε`` without the ``√bias2/M`` factor."""
    eps, bias2, scale = 0.5, 0.19, 4.0
    b = _adam_bucket()
    record = Record(b, [0, 1], "adam", 0.01, 0.1, scale, None, True, eps=eps, bias1=0.1, bias2=bias2)
    precondition(record)
    assert record.rsqrt_ready is True
    assert b.rsqrt.shape == (29,) and b.rsqrt.dtype == F64
    want = _t(b.exp_avg_sq.numpy(), eps, bias2, scale)
    np.testing.assert_allclose(b.rsqrt.numpy(), want, rtol=1e-14)
    assert np.abs(b.rsqrt.numpy() - _t(b.exp_avg_sq.numpy(), eps, 1.0, 1.0)).max() > 1e-3  # negative control
    v0, v1 = b.rsqrt_views
    assert v0.shape == (2, 3, 2, 2) and v0.stride() == b.params[0].stride() and v1.shape == (5,)
    assert v0.data_ptr() == b.rsqrt.data_ptr() and v1.data_ptr() == b.rsqrt.data_ptr() + 24 * 8
    torch.testing.assert_close(v0, _logical(torch.from_numpy(want[:24])), rtol=1e-14, atol=0)


@pytest.mark.parametrize("index", [[0], [1]])
def test_precondition_of_some_parameters_fills_only_their_segments_in_their_layout(index):
    """Some parameters only: their segments of the existing buffer get ``t`` of their own ``v`` elementwise in
    memory order (a channels_last parameter included, numpy), the rest of the buffer is untouched, and the
    buffer is not reallocated."""
    eps, bias2, scale = 1e-3, 0.36, 2.0
    b = _adam_bucket()
    buf = torch.full((29,), -7.0, dtype=F64)
    b.rsqrt, b.rsqrt_views = buf, b.views(buf, range(2), strided=True)
    record = Record(b, index, "adam", 0.01, 0.1, scale, None, True, eps=eps, bias2=bias2)
    precondition(record)
    assert b.rsqrt is buf and record.rsqrt_ready is True
    want = _t(b.exp_avg_sq.numpy(), eps, bias2, scale)
    lo, hi = (0, 24) if index == [0] else (24, 29)
    np.testing.assert_allclose(buf.numpy()[lo:hi], want[lo:hi], rtol=1e-14)
    rest = np.r_[buf.numpy()[:lo], buf.numpy()[hi:]]
    assert (rest == -7.0).all()


@pytest.mark.parametrize(("drift", "preconditioned"), [("sgd", True), ("sgd", False), ("adam", False)])
def test_precondition_does_nothing_for_sgd_or_unpreconditioned_noise(drift, preconditioned):
    """An SGD drift or ``noise_preconditioned=False``: no buffer, ``rsqrt_ready`` stays false."""
    b = _adam_bucket()
    record = Record(b, [0, 1], drift, 0.01, 0.1, 1.0, None, preconditioned, eps=1e-8)
    precondition(record)
    assert b.rsqrt is None and b.rsqrt_views is None and record.rsqrt_ready is False
