"""The compiled blocks of ``meanfield/stepping/captured.py``: the documented step, its law, and bad input.

The compiled runs are slow to build (``torch.compile`` on the CPU: tens of seconds), so they are marked slow;
the checks of the arguments compile nothing.
"""

import math

import pytest
import torch

from meanfield import MeanFieldLangevin
from meanfield.drift.potentials import Quadratic, QuadraticInteraction
from meanfield.drift.projections import Clip
from meanfield.drift.schedules import Cosine
from meanfield.stepping.captured import euler_block, sgld_block

F64 = torch.float64


@pytest.mark.slow
def test_sgld_block_is_the_sgld_step_and_keeps_its_law():
    """L = a/2·‖θ‖² on n = 20,000 coordinates (independent chains), block of 8 steps: one block equals the
    documented step replayed by hand on the block's noise (drawn from the same seed) to 1e-12; after 40
    blocks Var θ = β/(a(1 − lr·a/2)) (the Euler chain's exact stationary variance, started there) within
    5·SE (SE = sqrt(2/n)·Var: detects 5 %). Negative control: the continuous law β/a (−11 %) is rejected."""
    a, lr, beta, wd, n, k = 1.0, 0.2, 0.5, 0.0, 20_000, 8
    run = sgld_block(lambda th: 0.5 * a * (th * th).sum(), lr=lr, beta=beta, weight_decay=wd, block=k)
    var = beta / (a * (1 - lr * a / 2))
    theta0 = math.sqrt(var) * torch.randn(n, dtype=F64, generator=torch.Generator().manual_seed(0))
    theta = run(theta0, torch.Generator().manual_seed(1))
    xi = torch.empty(k, n, dtype=F64).normal_(
        0.0, math.sqrt(2 * beta * lr), generator=torch.Generator().manual_seed(1)
    )
    ref = theta0.clone()
    for j in range(k):
        ref = ref - lr * (a * ref + wd * ref) + xi[j]
    assert torch.allclose(theta, ref, rtol=0, atol=1e-12)
    g = torch.Generator().manual_seed(2)
    for _ in range(40):
        theta = run(theta, g)
    se = var * math.sqrt(2 / n)
    assert abs(float(theta.square().mean()) - var) < 5 * se
    assert abs(float(theta.square().mean()) - beta / a) > 5 * se


@pytest.mark.slow
def test_euler_block_is_the_euler_step_of_simulate():
    """A McKean–Vlasov OU system, one block of 8 steps: equal to x + dt·b(x) + sqrt(2β·dt)·ξ replayed by hand
    with the block's noise (the same seed) to 1e-12 (float64). Negative control: another seed differs."""
    system = MeanFieldLangevin(Quadratic(1.0), QuadraticInteraction(0.5), beta=0.3)
    dt, k = 0.05, 8
    run = euler_block(system, dt=dt, block=k)
    x0 = torch.randn(2, 50, 3, dtype=F64, generator=torch.Generator().manual_seed(0))
    x = run(x0, torch.Generator().manual_seed(1))
    xi = torch.empty(k, 2, 50, 3, dtype=F64).normal_(
        0.0, math.sqrt(2 * 0.3 * dt), generator=torch.Generator().manual_seed(1)
    )
    ref = x0.clone()
    for j in range(k):
        ref = ref + dt * (-ref - 0.5 * (ref - ref.mean(1, keepdim=True))) + xi[j]
    assert torch.allclose(x, ref, rtol=0, atol=1e-12)
    assert not torch.allclose(run(x0, torch.Generator().manual_seed(2)), ref, atol=1e-3)


def test_bad_input_says_what_is_allowed():
    with pytest.raises(ValueError, match="lr"):
        sgld_block(lambda th: th.sum(), lr=0.0, beta=1.0)
    with pytest.raises(ValueError, match="block"):
        sgld_block(lambda th: th.sum(), lr=0.1, beta=1.0, block=0)
    with pytest.raises(ValueError, match="constant temperature"):
        euler_block(MeanFieldLangevin(Quadratic(1.0), beta=Cosine(1.0, 0.1, T=10)), dt=0.1)
    with pytest.raises(ValueError, match="constant temperature"):
        euler_block(MeanFieldLangevin(Quadratic(1.0), beta=torch.tensor([0.1, 0.2])), dt=0.1)
    with pytest.raises(ValueError, match="project"):
        euler_block(MeanFieldLangevin(Quadratic(1.0), beta=0.1, projection=Clip(1.0)), dt=0.1)
    with pytest.raises(TypeError, match="MeanFieldLangevin"):
        euler_block(object(), dt=0.1)


@pytest.fixture
def eager(monkeypatch):
    """``torch.compile`` replaced by the identity (recording its arguments): the blocks run the very function
    they would compile, eagerly, in the default suite; the compiled path is checked by the slow tests above."""
    calls = []

    def compile_(fn, **kwargs):
        calls.append(kwargs)
        return fn

    monkeypatch.setattr(torch, "compile", compile_)
    return calls


def test_sgld_block_function_is_the_documented_step(eager):
    """The function sgld_block compiles (fullgraph, static shapes): ``block`` steps θ ← θ − lr·(∇L + λθ) +
    sqrt(2β·lr)·ξ on a non-quadratic loss with weight decay, replayed by hand on the same seed's noise to 1e-12;
    the input is left as it was, and the next call carries the generator on (the second block's noise is the
    next draw, not the first again). Negative controls: without the weight decay, or with the noise scale
    sqrt(β·lr), the replay differs."""
    lr, beta, wd, k = 0.05, 0.3, 0.2, 5
    loss = lambda th: (th**4).sum() / 4 + th.sum()  # ∇L = θ³ + 1  # noqa: E731
    run = sgld_block(loss, lr=lr, beta=beta, weight_decay=wd, block=k)
    assert eager == [{"fullgraph": True, "dynamic": False}]
    theta0 = torch.randn(3, 4, dtype=F64, generator=torch.Generator().manual_seed(0))
    before = theta0.clone()
    g = torch.Generator().manual_seed(1)
    out1 = run(theta0, g)
    out2 = run(out1, g)
    assert torch.equal(theta0, before)

    def replay(theta, xi, decay=wd):
        for j in range(k):
            theta = theta - lr * (theta**3 + 1 + decay * theta) + xi[j]
        return theta

    ref_g = torch.Generator().manual_seed(1)
    xi1 = torch.empty(k, 3, 4, dtype=F64).normal_(0.0, math.sqrt(2 * beta * lr), generator=ref_g)
    xi2 = torch.empty(k, 3, 4, dtype=F64).normal_(0.0, math.sqrt(2 * beta * lr), generator=ref_g)
    torch.testing.assert_close(out1, replay(theta0, xi1), rtol=0, atol=1e-12)
    torch.testing.assert_close(out2, replay(out1, xi2), rtol=0, atol=1e-12)
    assert not torch.allclose(out2, replay(out1, xi1), atol=1e-6)  # the generator carried on
    assert not torch.allclose(out1, replay(theta0, xi1, decay=0.0), atol=1e-6)
    assert not torch.allclose(out1, replay(theta0, xi1 / math.sqrt(2)), atol=1e-6)


def test_sgld_block_at_zero_temperature_is_gradient_descent_and_each_shape_gets_its_noise(eager):
    """β = 0: the block is plain gradient descent (no noise whatever the generator); a new shape or dtype gets
    its own noise buffer (float32 after float64 of the same shape stays float32; a (2,) input after (3,) runs)."""
    run = sgld_block(lambda th: 0.5 * (th * th).sum(), lr=0.1, beta=0.0, block=3)
    x = torch.tensor([1.0, -2.0, 4.0], dtype=F64)
    torch.testing.assert_close(run(x, torch.Generator().manual_seed(5)), x * 0.9**3, rtol=0, atol=1e-15)
    y = run(x.float(), torch.Generator().manual_seed(5))  # same shape, another dtype: its own buffer
    assert y.dtype == torch.float32 and torch.allclose(y, x.float() * 0.9**3)
    z = run(torch.tensor([1.0, 2.0]), torch.Generator().manual_seed(5))  # another shape
    assert z.shape == (2,) and torch.allclose(z, torch.tensor([1.0, 2.0]) * 0.9**3)


def test_euler_block_function_is_the_euler_step_of_the_system(eager):
    """The function euler_block compiles: x ← x + dt·b(x) + sqrt(2β·dt)·ξ with the system's own drift (a
    McKean–Vlasov OU pair, b(x) = −a·x − κ(x − x̄)), replayed by hand over two blocks (the generator carried on)
    to 1e-12. Negative controls: the noise scale sqrt(β·dt), or the drift without its interaction, differ."""
    a, kappa, beta, dt, k = 1.5, 0.5, 0.3, 0.05, 4
    system = MeanFieldLangevin(Quadratic(a), QuadraticInteraction(kappa), beta=beta)
    run = euler_block(system, dt=dt, block=k)
    assert eager == [{"fullgraph": True, "dynamic": False}]
    x0 = torch.randn(2, 6, 3, dtype=F64, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    x1 = run(x0, g)
    x2 = run(x1, g)
    ref_g = torch.Generator().manual_seed(1)
    xis = [torch.empty(k, 2, 6, 3, dtype=F64).normal_(0.0, math.sqrt(2 * beta * dt), generator=ref_g) for _ in range(2)]

    def replay(x, xi, interaction=kappa, noise=1.0):
        for j in range(k):
            x = x + dt * (-a * x - interaction * (x - x.mean(1, keepdim=True))) + noise * xi[j]
        return x

    torch.testing.assert_close(x1, replay(x0, xis[0]), rtol=0, atol=1e-12)
    torch.testing.assert_close(x2, replay(x1, xis[1]), rtol=0, atol=1e-12)
    assert not torch.allclose(x1, replay(x0, xis[0], noise=1 / math.sqrt(2)), atol=1e-6)
    assert not torch.allclose(x1, replay(x0, xis[0], interaction=0.0), atol=1e-6)
