"""Tests of :mod:`meanfield.optim.step_stats`."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from meanfield.optim.step_stats import _sums, aggregate

F64 = torch.float64


def _fake_record(sums, rows, device="cpu", beta_given=0.0):
    bucket = SimpleNamespace(rows=rows, params=[torch.empty(2, device=device)])
    return SimpleNamespace(sums=lambda: sums, bucket=bucket, beta_given=beta_given)


class _OtherRank:
    """A fake ``torch.distributed`` whose collectives combine this process's tensors with a second rank's."""

    def __init__(self, totals, extremes, backend="gloo", stop=False):
        self.totals = torch.tensor(totals, dtype=F64)
        self.extremes = torch.tensor(extremes, dtype=F64)
        self.backend, self.stop = backend, stop
        self.calls = []

    def install(self, monkeypatch):
        monkeypatch.setattr(dist, "is_available", lambda: True)
        monkeypatch.setattr(dist, "is_initialized", lambda: True)
        monkeypatch.setattr(dist, "get_backend", lambda group=None: self.backend)
        monkeypatch.setattr(dist, "all_reduce", self.all_reduce)
        return self

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        self.calls.append((op, tensor.device.type, tensor.dtype, tensor.detach().clone()))
        if self.stop:
            raise _Stop
        if op == dist.ReduceOp.MAX:
            tensor.copy_(torch.maximum(tensor, self.extremes))
        elif op == dist.ReduceOp.SUM:
            tensor.add_(self.totals)
        else:
            raise AssertionError(f"unexpected op {op}")


class _Stop(Exception):
    pass


_LOCAL = [(3, 0.5, 0.125, 0.375, 2.0, 0.5), (1, 0.25, 0.25, 0.25, 9.0, 8.0), (2, 0.75, 0.5, 1.5, 1.0, 4.0)]


_OTHER_TOTALS = [[5.0, 1.25, 3.0, 0.25], [4.0, 1.0, 0.5, 2.0]]  # (n, Σ η, Σ noise², Σ drift²) of rank 1


_OTHER_EXTREMES = [[-0.0625, 0.25], [-0.75, 2.0]]  # (−min η, max η) of rank 1


def _three_records(device="cpu"):
    return [
        _fake_record(_LOCAL[0], (0, 2, 4), device, beta_given=0.5),
        _fake_record(_LOCAL[1], None, device, beta_given=0.25),
        _fake_record(_LOCAL[2], (2, 4, 4), device, beta_given=0.125),
    ]


def test_sums_of_sharded_records_are_summed_and_their_extremes_taken_over_the_ranks(monkeypatch):
    """With a process group, the sharded records' ``(n, Σ η, Σ noise², Σ drift²)`` go through one SUM
    all-reduce and ``(−min η, max η)`` through one MAX all-reduce (float64, one row per sharded record, in
    record order); the sums come back combined with the other rank's (hand-computed), ``n`` an int; a
    replicated record's sums are left as they are. Negative control: rank 0's own sums are not the result."""
    world = _OtherRank(_OTHER_TOTALS, _OTHER_EXTREMES).install(monkeypatch)
    out = _sums(_three_records())
    assert out[0] == (8, 1.75, 0.0625, 0.375, 5.0, 0.75)
    assert out[1] == _LOCAL[1]
    assert out[2] == (6, 1.75, 0.5, 2.0, 1.5, 6.0)
    assert type(out[0][0]) is int and type(out[2][0]) is int
    assert out[0] != _LOCAL[0]  # negative control
    assert len(world.calls) == 2
    (op_sum, dev_sum, dt_sum, totals), (op_max, dev_max, dt_max, extremes) = world.calls
    assert op_sum == dist.ReduceOp.SUM and op_max == dist.ReduceOp.MAX
    assert dt_sum == dt_max == F64 and dev_sum == dev_max == "cpu"
    assert torch.equal(totals, torch.tensor([[3.0, 0.5, 2.0, 0.5], [2.0, 0.75, 1.0, 4.0]], dtype=F64))
    assert torch.equal(extremes, torch.tensor([[-0.125, 0.375], [-0.5, 1.5]], dtype=F64))

    stats = aggregate(_three_records(), step=7)  # the statistics of all ranks' coordinates together
    n = 8 + 1 + 6
    assert stats.step == 7 and stats.n == n
    assert stats.eta_eff_mean == pytest.approx((1.75 + 0.25 + 1.75) / n, rel=1e-15)
    assert stats.eta_eff_min == 0.0625 and stats.eta_eff_max == 2.0
    assert stats.noise_rms == pytest.approx(math.sqrt((5.0 + 9.0 + 1.5) / n), rel=1e-15)
    assert stats.drift_rms == pytest.approx(math.sqrt((0.75 + 8.0 + 6.0) / n), rel=1e-15)
    assert stats.drift_to_noise == pytest.approx(stats.drift_rms / stats.noise_rms, rel=1e-15)
    assert stats.beta == 0.5


@pytest.mark.parametrize(
    ("backend", "device", "reduced_on"), [("nccl", "meta", "meta"), ("gloo", "meta", "cpu")]
)
def test_sums_are_reduced_on_the_first_sharded_parameters_device_under_nccl_only(
    monkeypatch, backend, device, reduced_on
):
    """NCCL reduces device tensors: the two tensors go to the device of the first sharded record's parameters
    (here ``meta``, a device other than the CPU); any other backend reduces them on the CPU."""
    world = _OtherRank(_OTHER_TOTALS, _OTHER_EXTREMES, backend=backend, stop=True).install(monkeypatch)
    records = [_fake_record(_LOCAL[1], None, "cpu"), _fake_record(_LOCAL[0], (0, 2, 4), device)]
    records.append(_fake_record(_LOCAL[2], (2, 4, 4), "cpu"))
    with pytest.raises(_Stop):
        _sums(records)
    assert world.calls[0][1] == reduced_on


def test_sums_without_a_process_group_or_sharded_records_reduce_nothing(monkeypatch):
    """No collective (and the sums as each record computed them) when ``torch.distributed`` is unavailable,
    when no process group is initialised, or when no record is sharded."""
    world = _OtherRank(_OTHER_TOTALS, _OTHER_EXTREMES).install(monkeypatch)

    def never():
        raise AssertionError("is_initialized asked although torch.distributed is unavailable")

    monkeypatch.setattr(dist, "is_available", lambda: False)
    monkeypatch.setattr(dist, "is_initialized", never)
    assert _sums(_three_records()) == _LOCAL
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    assert _sums(_three_records()) == _LOCAL
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    plain = [_fake_record(_LOCAL[0], None), _fake_record(_LOCAL[2], None)]
    assert _sums(plain) == [_LOCAL[0], _LOCAL[2]]
    assert world.calls == []
