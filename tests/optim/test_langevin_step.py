"""What issue 51 changed in a Langevin step: the gradient check every ``check_every`` steps, the SGD fast path
(the same numbers as the general step), the drift statistic reduced when read, torch.optim's hooks.

The fast path (``Langevin._sgd_update``) takes SGD groups whose parameters all have a gradient; the general
step (``_update``) takes everything. Equality is bit for bit: parameters, statistics and the generator.
"""

import dataclasses
import math

import pytest
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from meanfield.optim import KineticLangevin, Langevin

F64 = torch.float64


def _params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        nn.Parameter(torch.randn(6, 3, generator=g, dtype=F64)),
        nn.Parameter(torch.randn(5, generator=g)),
    ]


def _loss(ps):
    return sum((p.double() ** 4).sum() / 4 + torch.sin(3 * p.double()).sum() for p in ps)


def _trace(opt, ps, steps=4):
    out = []
    for _ in range(steps):
        opt.zero_grad()
        _loss(ps).backward()
        opt.step()
        out.append(
            (dataclasses.astuple(opt.last_stats), [dataclasses.astuple(s) for s in opt.last_group_stats])
        )
    return [p.detach().clone() for p in ps], out, opt.state_dict()["generators"]


@pytest.mark.parametrize("wd", [0.0, 0.2])
def test_the_sgd_fast_path_is_the_general_step_bit_for_bit(monkeypatch, wd):
    """Two groups (×M = 3 in the second, the "loss" convention), float64 and float32 sharing the generator:
    the fast path and the general step (the fast path switched off) give the same parameters, statistics and
    generator state. Negative control: another seed does not."""

    def run(fast, seed=4):
        ps = _params()
        opt = Langevin(
            [{"params": ps[:1]}, {"params": ps[1:], "n_particles": 3, "temperature_convention": "loss"}],
            lr=0.01,
            beta=0.3,
            weight_decay=wd,
            seed=seed,
        )
        if not fast:
            monkeypatch.setattr(opt, "_sgd_update", lambda program: False)
        return _trace(opt, ps)

    fast, general = run(True), run(False)
    assert all(torch.equal(a, b) for a, b in zip(fast[0], general[0]))
    assert fast[1] == general[1]
    assert all(torch.equal(fast[2][d], general[2][d]) for d in fast[2])
    other = run(True, seed=5)
    assert not torch.equal(other[0][0], fast[0][0])


def test_a_parameter_without_gradient_takes_the_general_step():
    """One parameter has no gradient: the fast path declines and the general step moves only the other
    (the one without a gradient is untouched, and the step is counted)."""
    ps = _params()
    opt = Langevin(ps, lr=0.01, beta=0.3, seed=1)
    before = ps[1].detach().clone()
    ps[0].grad = torch.ones_like(ps[0])
    opt.step()
    assert torch.equal(ps[1].detach(), before) and not torch.equal(ps[0].detach(), _params()[0].detach())
    assert opt.last_stats.n == ps[0].numel() and opt.last_stats.step == 1


@pytest.mark.parametrize("make", [Langevin, KineticLangevin], ids=["Langevin", "KineticLangevin"])
def test_check_every_checks_the_steps_it_says(make):
    """check_every = 2: a NaN gradient raises at steps 0 and 2, changing nothing; at step 1 it is not checked
    and reaches the parameters. check_every = 0 never raises; 1 (the default) always does."""
    kwargs = {"lr": 0.01, "beta": 0.1, "seed": 0}
    p = nn.Parameter(torch.zeros(4, dtype=F64))
    opt = make([p], check_every=2, **kwargs)
    bad = torch.tensor([0.0, math.nan, 0.0, 0.0], dtype=F64)
    p.grad = bad.clone()
    with pytest.raises(ValueError, match="NaN"):
        opt.step()
    assert torch.equal(p.detach(), torch.zeros(4, dtype=F64))
    p.grad = torch.ones(4, dtype=F64)
    opt.step()  # step 0 done
    p.grad = bad.clone()
    opt.step()  # step 1: not checked
    assert torch.isnan(p.detach()).any()
    p.grad = bad.clone()
    with pytest.raises(ValueError, match="NaN"):
        opt.step()  # step 2: checked
    never = make([nn.Parameter(torch.zeros(4, dtype=F64))], check_every=0, **kwargs)
    never.param_groups[0]["params"][0].grad = bad.clone()
    never.step()
    always = make([nn.Parameter(torch.zeros(4, dtype=F64))], **kwargs)
    always.param_groups[0]["params"][0].grad = bad.clone()
    with pytest.raises(ValueError, match="NaN"):
        always.step()
    with pytest.raises(ValueError, match="check_every"):
        make([p], check_every=-1, **kwargs)


def test_the_drift_statistic_is_read_from_the_gradients_as_the_step_left_them():
    """Without weight decay the SGD drift's size is lr·‖g‖: from the norms of the gradient check when the step
    checked (right even after the gradients are zeroed in place), else from the gradients when last_stats is
    read: right after zero_grad() (set_to_none: the tensors are kept), NaN after an in-place zeroing
    (zero_grad(set_to_none=False)), which would otherwise report a drift of 0."""
    for check_every, set_to_none in ((1, False), (0, True), (0, False)):
        p = nn.Parameter(torch.randn(50, dtype=F64, generator=torch.Generator().manual_seed(0)))
        opt = Langevin([p], lr=0.01, beta=0.1, seed=0, check_every=check_every)
        p.grad = torch.full_like(p, 2.0)
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)
        drift = opt.last_stats.drift_rms
        if check_every or set_to_none:
            assert drift == pytest.approx(0.01 * 2.0, rel=1e-12)
        else:
            assert math.isnan(drift)


def test_step_hooks_and_the_profiler_range_still_run():
    """torch.optim's per-instance and global step hooks are called (pre before, post after the update), and
    under the profiler the step shows as torch.optim's range."""
    p = nn.Parameter(torch.zeros(3, dtype=F64))
    opt = Langevin([p], lr=0.1, beta=0.0, seed=0)
    seen = []
    opt.register_step_pre_hook(lambda o, a, k: seen.append(("pre", float(p.detach()[0]))))
    opt.register_step_post_hook(lambda o, a, k: seen.append(("post", float(p.detach()[0]))))
    handle = register_optimizer_step_post_hook(lambda o, a, k: seen.append(("global", 0.0)))
    try:
        p.grad = torch.ones(3, dtype=F64)
        opt.step()
    finally:
        handle.remove()
    assert seen == [("pre", 0.0), ("post", -0.1), ("global", 0.0)]
    with torch.profiler.profile() as prof:
        opt.step()
    assert any(e.name == "Optimizer.step#Langevin.step" for e in prof.events())
