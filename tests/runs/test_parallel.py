"""Tests of :mod:`meanfield.runs.parallel`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from helpers.fake_dist import FakeWorld
from helpers.tiny_run import TEACHER, TINY  # noqa: E402  (tests/helpers/tiny_run.py)
from torch import nn

from meanfield.runs import loop
from meanfield.runs.folder import RunResult
from meanfield.runs.parallel import (
    all_reduce_scalar,
    average_gradients,
    batch_share,
    process_group,
    rank_device,
)

VALUES = [1.5, -2.0, 4.25]


class Three(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.zeros(2, 3, dtype=torch.float64))
        self.b = nn.Parameter(torch.zeros(4, dtype=torch.float64))
        self.unused = nn.Parameter(torch.zeros(5, dtype=torch.float64))  # no gradient: left alone
        self.c = nn.Parameter(torch.zeros(1, 1, 2, dtype=torch.float64))


def grads_of(rank: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    return {
        k: torch.randn(shape, generator=g, dtype=torch.float64)
        for k, shape in (("a", (2, 3)), ("b", (4,)), ("c", (1, 1, 2)))
    }


def test_all_reduce_scalar_sums_and_takes_extremes_over_the_ranks(monkeypatch):
    fake = FakeWorld(3).install(monkeypatch)
    cpu = torch.device("cpu")
    out = fake.run(lambda r: [all_reduce_scalar(VALUES[r], cpu, op) for op in ("sum", "min", "max")])
    assert out == [[3.75, -2.0, 4.25]] * 3
    assert fake.run(lambda r: all_reduce_scalar(VALUES[r], cpu)) == [3.75] * 3  # the default is the sum
    assert all(type(v) is float for v in out[0])

    def unknown(r):
        with pytest.raises(KeyError):
            all_reduce_scalar(1.0, cpu, "mean")
        return r

    assert fake.run(unknown) == [0, 1, 2]


@pytest.mark.parametrize("backend, where", [("gloo", "cpu"), ("nccl", "meta")])
def test_all_reduce_scalar_reduces_on_the_device_only_for_nccl(monkeypatch, backend, where):
    """gloo reduces CPU tensors whatever the run's device; NCCL tensors on the run's device (here ``meta``,
    the one other device a CPU-only machine has: a stand-in for CUDA)."""
    fake = FakeWorld(2, backend=backend).install(monkeypatch)
    seen = []

    class Stop(Exception):
        pass

    real = dist.all_reduce

    def spy(t, *args, **kwargs):
        seen.append((t.device.type, t.dtype, tuple(t.shape)))
        if t.device.type == "meta":
            raise Stop  # a meta tensor has no value to return: what reached the all-reduce is the check
        return real(t, *args, **kwargs)

    monkeypatch.setattr(dist, "all_reduce", spy)

    def rank_fn(r):
        try:
            return all_reduce_scalar(VALUES[r], torch.device("meta"), "max")
        except Stop:
            return None

    out = fake.run(rank_fn)
    assert seen == [(where, torch.float64, (1,))] * 2
    if backend == "gloo":
        assert out == [1.5, 1.5]


def test_all_reduce_scalar_in_a_gloo_group_of_one(gloo_one):
    for op in ("sum", "min", "max"):
        assert all_reduce_scalar(2.5, torch.device("cpu"), op) == 2.5
    assert process_group(torch.device("cpu")) == (0, 1, False)  # initialised already: not created here


@pytest.mark.parametrize("world", [2, 3])
def test_average_gradients_is_the_mean_over_the_ranks(monkeypatch, world):
    def rank_fn(r, average_over=world):
        model = Three()
        for k, v in grads_of(r).items():
            getattr(model, k).grad = v.clone()
        average_gradients(model, average_over)
        return {k: None if p.grad is None else p.grad.clone() for k, p in model.named_parameters()}

    with monkeypatch.context() as patch:
        fake = FakeWorld(world).install(patch)
        out = fake.run(rank_fn)
    for k in ("a", "b", "c"):
        mean = np.mean([grads_of(r)[k].numpy() for r in range(world)], axis=0)
        for r in range(world):
            assert np.abs(out[r][k].numpy() - mean).max() < 1e-15
        assert np.abs(grads_of(0)[k].numpy() - mean).max() > 1e-3  # negative control: a rank's own gradient
    assert all(o["unused"] is None for o in out)
    assert sum(kind == "all_reduce" for kind, _, _ in fake.calls) == world  # one flat buffer per rank
    with monkeypatch.context() as patch:
        wrong = FakeWorld(world).install(patch).run(lambda r: rank_fn(r, world + 1))
    mean = np.mean([grads_of(r)["a"].numpy() for r in range(world)], axis=0)
    assert np.abs(wrong[0]["a"].numpy() - mean).max() > 1e-3  # negative control: another divisor


def test_average_gradients_without_gradients_does_nothing(monkeypatch):
    fake = FakeWorld(2).install(monkeypatch)
    assert fake.run(lambda r: average_gradients(Three(), 2)) == [None, None]
    assert fake.calls == []  # no all-reduce of an empty buffer


def test_process_group_outside_torchrun_is_one_process(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert process_group(torch.device("cpu")) == (0, 1, False)
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert process_group(torch.device("cpu")) == (0, 1, False)


@pytest.mark.parametrize("device, backend", [("cpu", "gloo"), ("cuda", "nccl")])
def test_process_group_under_torchrun_creates_the_group(monkeypatch, tmp_path, device, backend):
    """``WORLD_SIZE`` > 1 and no group yet: one is created with the device's backend (the creation is replaced
    by a real gloo group of one rank, so that it needs neither the other ranks nor CUDA)."""
    asked = []

    def init(name, *args, **kwargs):
        asked.append(name)
        dist.init_process_group.__wrapped_real__(
            "gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1
        )

    init.__wrapped_real__ = dist.init_process_group
    monkeypatch.setattr(dist, "init_process_group", init)
    monkeypatch.setenv("WORLD_SIZE", "2")
    try:
        assert process_group(torch.device(device)) == (0, 1, True)
        assert asked == [backend]
        assert process_group(torch.device(device)) == (0, 1, False)  # a second call finds it
        assert asked == [backend]
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_process_group_reads_the_rank_of_an_existing_group(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    fake = FakeWorld(3).install(monkeypatch)
    assert fake.run(lambda r: process_group(torch.device("cpu"))) == [(r, 3, False) for r in range(3)]


def test_batch_share_by_hand():
    x = torch.arange(12).view(6, 2)
    assert batch_share(x, 2, 3, 6).tolist() == [[8, 9], [10, 11]]  # the last rank: the last rows
    assert batch_share(x, 0, 1, 6) is not None and torch.equal(batch_share(x, 0, 1, 6), x)
    nested = batch_share([x, (x[:, 0], "label")], 1, 3, 6)
    assert type(nested) is list and type(nested[1]) is tuple
    assert (
        nested[0].tolist() == [[4, 5], [6, 7]] and nested[1][0].tolist() == [4, 6] and nested[1][1] == "label"
    )
    shared = batch_share({"x": x, "w": torch.tensor(2.0)}, 1, 2, 6)
    assert (
        shared["x"].tolist() == [[6, 7], [8, 9], [10, 11]] and shared["w"].item() == 2.0
    )  # a scalar is kept
    assert batch_share(7, 0, 2, 6) == 7


def _run(folder: Path, extra=(), **kwargs) -> RunResult:
    kwargs.setdefault("quiet", True)
    return loop.run(TEACHER, folder, preset="smoke", overrides=[*TINY, *extra], **kwargs)


def test_a_run_that_created_the_process_group_destroys_it(tmp_path, monkeypatch):
    """``process_group`` saying this run created the group (emulated, one process): the run destroys it once
    at the end; a run that did not create it leaves it alone (negative control)."""
    import torch.distributed as dist

    destroyed = []
    monkeypatch.setattr(dist, "destroy_process_group", lambda *a: destroyed.append(a))
    monkeypatch.setattr(loop.parallel, "process_group", lambda device: (0, 1, True))
    assert _run(tmp_path / "owner").status == "finished"
    assert destroyed == [()]
    monkeypatch.setattr(loop.parallel, "process_group", lambda device: (0, 1, False))
    _run(tmp_path / "guest")
    assert destroyed == [()]


def test_rank_device_gives_each_torchrun_process_its_own_gpu(monkeypatch):
    """Under torchrun (``LOCAL_RANK`` = 1, CUDA faked with 2 GPUs) ``cuda`` becomes ``cuda:1`` and is made the
    current device; every rank used to take ``cuda`` = GPU 0. An explicit index, the CPU, or no torchrun keep
    the device (controls); a LOCAL_RANK beyond the GPUs is refused in one line."""
    current = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert rank_device(torch.device("cuda")) == torch.device("cuda", 1) and current == [
        torch.device("cuda", 1)
    ]
    assert rank_device(torch.device("cuda", 0)) == torch.device("cuda", 0)
    assert rank_device(torch.device("cpu")) == torch.device("cpu")
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(ValueError, match=r"^LOCAL_RANK = 2 but this machine has 2 GPU\(s\): start at most 2"):
        rank_device(torch.device("cuda"))
    monkeypatch.delenv("LOCAL_RANK")
    assert rank_device(torch.device("cuda")) == torch.device("cuda") and len(current) == 1
