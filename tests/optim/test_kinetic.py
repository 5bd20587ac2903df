"""The kinetic Langevin optimizer: heavy-ball SGD at β = 0 (torch.optim.SGD as oracle), BAOAB positions with noise
(a numpy BAOAB fed the same normals as oracle), the ×M scaling, schedules, projections, checkpoints, bad input.

Its stationary laws are checked through the optimizer in ``theory/kinetic_optimizer.py``.
"""

import math

import numpy as np
import pytest
import torch
from torch import nn

from meanfield.drift.projections import Clip
from meanfield.drift.schedules import Step
from meanfield.optim import KineticLangevin

F64 = torch.float64


def _loss(theta):
    """A non-quadratic loss: Σ (θ⁴/4 − θ²/2) + 0.3·Σ θ_i θ_{i+1}."""
    return (theta.pow(4) / 4 - theta.square() / 2).sum() + 0.3 * (theta[:-1] * theta[1:]).sum()


def test_beta_zero_is_heavy_ball_momentum_sgd():
    """β = 0: the parameters equal torch.optim.SGD(lr = h²(1+μ)/2, momentum = μ = e^{−γh}) step for step."""
    h, gamma = 0.3, 1.7
    mu = math.exp(-gamma * h)
    start = torch.randn(6, dtype=F64, generator=torch.Generator().manual_seed(0))
    a, b = nn.Parameter(start.clone()), nn.Parameter(start.clone())
    kin = KineticLangevin([a], lr=h, friction=gamma, beta=0.0, seed=0)
    sgd = torch.optim.SGD([b], lr=h * h * (1 + mu) / 2, momentum=mu)
    for _ in range(50):
        for p, opt in ((a, kin), (b, sgd)):
            opt.zero_grad()
            _loss(p).backward()
            opt.step()
        torch.testing.assert_close(a.detach(), b.detach(), rtol=0, atol=1e-12)


def test_positions_are_baoab_with_the_same_normals():
    """With noise: θ_n equals a numpy BAOAB (B(h/2) A(h/2) O(h) A(h/2) B(h/2)) from (θ0, v0 = −(h/2)∇F(θ0))
    driven by the normals the optimizer's generator draws (one per coordinate and step)."""
    h, gamma, beta, n = 0.4, 0.8, 0.6, 5
    theta = nn.Parameter(torch.randn(n, dtype=F64, generator=torch.Generator().manual_seed(1)))
    grad = lambda x: x**3 - x  # noqa: E731  F = Σ x⁴/4 − x²/2
    x = theta.detach().numpy().copy()
    opt = KineticLangevin([theta], lr=h, friction=gamma, beta=beta, seed=9)
    xi = torch.Generator().manual_seed(9)
    c = math.exp(-gamma * h)
    v = -(h / 2) * grad(x)
    for _ in range(30):
        theta.grad = grad(theta.detach())
        opt.step()
        noise = torch.randn(n, dtype=F64, generator=xi).numpy()
        v = v - (h / 2) * grad(x)
        x = x + (h / 2) * v
        v = c * v + math.sqrt(beta * (1 - c * c)) * noise
        x = x + (h / 2) * v
        v = v - (h / 2) * grad(x)
        np.testing.assert_allclose(theta.detach().numpy(), x, rtol=0, atol=1e-12)


def test_mean_field_scaling_and_loss_convention():
    """n_particles = M multiplies the gradient by M; mean_field_scaling=False removes it; the "loss" convention
    multiplies β by the gradients' factor: M with the scaling, 1 without (as Langevin; M = 4: exact in binary)."""
    start = torch.randn(3, 4, dtype=F64, generator=torch.Generator().manual_seed(2))
    runs = []
    for M, scale, grad_factor, beta, conv in ((4, True, 1.0, 0.5, "mean_field"), (1, True, 4.0, 0.5, "mean_field"),
                                              (4, False, 4.0, 0.5, "mean_field"), (4, True, 1.0, 0.125, "loss"),
                                              (4, False, 4.0, 0.5, "loss")):  # fmt: skip
        p = nn.Parameter(start.clone())
        opt = KineticLangevin([p], lr=0.2, friction=1.0, beta=beta, n_particles=M, mean_field_scaling=scale,
                              temperature_convention=conv, seed=5)  # fmt: skip
        for _ in range(10):
            p.grad = grad_factor * p.detach() ** 3
            opt.step()
        runs.append(p.detach())
    for other in runs[1:]:
        assert torch.equal(runs[0], other)


def test_beta_schedule_projection_and_weight_decay():
    """β(step) from a schedule (β = 0 at step 0: no noise then), Clip keeps θ in the box, λθ enters the kick."""
    p = nn.Parameter(torch.zeros(1000, dtype=F64))
    opt = KineticLangevin([p], lr=0.5, friction=1.0, beta=Step([0.0, 2.0], [1]), projection=Clip(0.1), seed=0)
    p.grad = torch.zeros_like(p)
    opt.step()
    assert torch.equal(p.detach(), torch.zeros_like(p))  # β(0) = 0, zero gradient: nothing moves
    opt.step()
    assert float(p.detach().abs().max()) == pytest.approx(0.1) and float(p.detach().std()) > 0.05
    a, b = nn.Parameter(torch.ones(3, dtype=F64)), nn.Parameter(torch.ones(3, dtype=F64))
    oa = KineticLangevin([a], lr=0.1, friction=1.0, weight_decay=0.5, seed=0)
    ob = KineticLangevin([b], lr=0.1, friction=1.0, seed=0)
    a.grad, b.grad = torch.zeros(3, dtype=F64), 0.5 * b.detach()
    oa.step(), ob.step()
    assert torch.equal(a.detach(), b.detach())


def test_state_dict_resumes_bit_for_bit():
    p = nn.Parameter(torch.randn(8, dtype=F64, generator=torch.Generator().manual_seed(3)))
    opt = KineticLangevin([p], lr=0.3, friction=0.5, beta=0.2, seed=11)

    def steps(param, optimizer, k):
        for _ in range(k):
            param.grad = param.detach() ** 3
            optimizer.step()

    steps(p, opt, 5)
    saved = opt.state_dict()
    q = nn.Parameter(p.detach().clone())
    fresh = KineticLangevin([q], lr=0.3, friction=0.5, beta=0.2, seed=99)
    fresh.load_state_dict(saved)
    steps(p, opt, 7)
    steps(q, fresh, 7)
    assert torch.equal(p.detach(), q.detach())


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(lr=0.1, friction=-1.0), ValueError, "friction"),
        (dict(lr=0.1, beta=-0.5), ValueError, "beta"),
        (dict(lr=0.0), ValueError, "lr"),
        (dict(lr=0.1, temperature_convention="seeds"), ValueError, "temperature_convention"),
        (dict(lr=0.1, projection="clip"), TypeError, "projection"),
        (dict(lr=0.1, n_particles=0), ValueError, "n_particles"),
        (dict(lr=0.1, seed=1, generator=torch.Generator()), ValueError, "either"),
    ],
)
def test_bad_options(kwargs, error, match):
    with pytest.raises(error, match=match):
        KineticLangevin([nn.Parameter(torch.zeros(2))], **kwargs)


def test_non_finite_gradient_changes_nothing():
    p = nn.Parameter(torch.ones(3, dtype=F64))
    q = nn.Parameter(torch.ones(3, dtype=F64))
    opt = KineticLangevin([{"params": [q]}, {"params": [p]}], lr=0.1, beta=0.1, seed=0)
    q.grad = torch.ones(3, dtype=F64)
    p.grad = torch.tensor([1.0, float("nan"), 0.0], dtype=F64)
    with pytest.raises(ValueError, match="NaN"):
        opt.step()
    assert torch.equal(p.detach(), torch.ones(3, dtype=F64)) and torch.equal(
        q.detach(), torch.ones(3, dtype=F64)
    )
    p.grad = torch.zeros(3, dtype=F64)
    with pytest.raises(ValueError, match="temperature"):
        KineticLangevin([p], lr=0.1, beta=lambda k: -1.0, seed=0).step()
    assert torch.equal(p.detach(), torch.ones(3, dtype=F64))


def test_a_huge_finite_gradient_is_not_an_error():
    """A float32 vector gradient of entries 1e30 (its squared norm overflows float32, the check's dot product is
    infinite) is finite: the step is taken, v = −h·g; with one entry Inf instead it is refused (the control)."""
    p = nn.Parameter(torch.zeros(4))
    opt = KineticLangevin([p], lr=1e-30, friction=0.0, beta=0.0, seed=0)
    p.grad = torch.full((4,), 1e30)
    opt.step()
    torch.testing.assert_close(opt.state[p]["velocity"], torch.full((4,), -1.0), rtol=1e-6, atol=0)
    p.grad = torch.tensor([1e30, 1e30, float("inf"), 1e30])
    with pytest.raises(ValueError, match="NaN or Inf"):
        opt.step()


def _param(shape, seed: int) -> nn.Parameter:
    return nn.Parameter(torch.randn(shape, dtype=F64, generator=torch.Generator().manual_seed(seed)))


def test_kinetic_errors_name_where_the_bad_option_is():
    """Bad data forms of β or of the projection are refused naming the constructor or the group; a non-bool
    ``mean_field_scaling`` names the type it got."""
    p = _param((2,), 0)
    with pytest.raises(ValueError, match=r"^KineticLangevin: beta: schedule data needs 'kind'"):
        KineticLangevin([p], lr=0.1, beta={"kind": "nope"})
    with pytest.raises(ValueError, match=r"^KineticLangevin: projection: "):
        KineticLangevin([p], lr=0.1, projection={"kind": "nope"})
    with pytest.raises(TypeError, match=r"^KineticLangevin: mean_field_scaling must be a bool, got int$"):
        KineticLangevin([p], lr=0.1, mean_field_scaling=1)
    opt = KineticLangevin([p], lr=0.1)
    with pytest.raises(ValueError, match=r"^param group 1: beta: schedule data needs 'kind'"):
        opt.add_param_group({"params": [_param((2,), 1)], "beta": {"kind": "nope"}})
    with pytest.raises(TypeError, match=r"^param group 1: mean_field_scaling must be a bool, got str$"):
        opt.add_param_group({"params": [_param((2,), 1)], "mean_field_scaling": "yes"})
    assert len(opt.param_groups) == 1  # the refused groups were not kept


def test_step_calls_the_closure_and_returns_its_loss():
    """``step(closure)``: the closure is evaluated (with gradients on) before the BAOAB step, its loss returned,
    and the step uses the gradient it computed (β = 0: the parameter moves against it); with a step hook
    registered (the hooked path) the same."""
    theta = nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt = KineticLangevin([theta], lr=0.1, friction=1.0, beta=0.0, seed=0)
    calls = []

    def closure():
        calls.append(torch.is_grad_enabled())
        opt.zero_grad()
        loss = 0.5 * (theta * theta).sum()
        loss.backward()
        return loss

    before = theta.detach().clone()
    loss = opt.step(closure)
    assert calls == [True] and float(loss.detach()) == 2.5
    assert torch.all(torch.sign(theta.detach() - before) == -torch.sign(before))  # moved toward 0
    opt.register_step_post_hook(lambda *_: None)
    expected = 0.5 * float((theta.detach() ** 2).sum())  # the closure's loss: at θ before this step
    assert float(opt.step(closure).detach()) == pytest.approx(expected, rel=1e-15) and calls == [True, True]
