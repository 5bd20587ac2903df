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
