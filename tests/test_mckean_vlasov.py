"""Linear McKean–Vlasov dX = −aX dt − k(X − E X) dt + sqrt(2β) dW, simulated by M interacting particles.

Mean-field limit: mean m0·e^{−at}, variance s∞ + (s0 − s∞)e^{−2(a+k)t}, s∞ = β/(a+k). At finite M the
particle variance at stationarity is s∞ + c, c = βk/(a(a+k)M) (the centre of mass is an OU process with
variance β/(aM)). The EM chain's exact law: x̄ and x_i − x̄ are independent AR(1) chains,
x̄' = (1 − ηa)x̄ + sqrt(2βη) ξ̄ (Var ξ̄ = 1/M) and y' = (1 − η(a+k))y + sqrt(2βη)(ξ_i − ξ̄).
"""

import math

import pytest
import torch

from meanfield import MeanFieldLangevin, simulate
from meanfield.drift.potentials import Quadratic, QuadraticInteraction
from meanfield.studies.stats import Estimate, mean_se

A, K, BETA = 1.0, 2.0, 0.5


def _ar1_variance(rho: float, v0: float, q: float, n: int) -> float:
    """Variance after n steps of v ← ρ²v + q from v0."""
    return rho ** (2 * n) * v0 + q * (1 - rho ** (2 * n)) / (1 - rho**2)


def chain_variance(M: int, eta: float, n: int, s0: float) -> float:
    """Exact Var(x_i) of the EM particle chain after n steps from i.i.d. N(·, s0) particles."""
    centre = _ar1_variance(1 - eta * A, s0 / M, 2 * BETA * eta / M, n)
    spread = _ar1_variance(1 - eta * (A + K), s0 * (M - 1) / M, 2 * BETA * eta * (M - 1) / M, n)
    return centre + spread


def _particle_variance(x: torch.Tensor) -> Estimate:
    """Var(x_i) for mean-zero particles: per-replica mean of x_i² (replicas are independent)."""
    return mean_se(x.square().mean(dim=(1, 2)))


def _system(k=K):
    return MeanFieldLangevin(Quadratic(A), QuadraticInteraction(k), beta=BETA)


@pytest.mark.parametrize("M, B", [(2, 40_000), (10, 10_000)])
def test_finite_m_excess_variance(M, B):
    """Stationary Var(x_i) = s∞ + c, c = βk/(a(a+k)M), at two M.

    Compared with the exact EM-chain value; SE ≈ 0.3 % of s∞ (detects ≈ 1.5 %); c is 25 % (M=2) and
    5 % (M=10) of s∞. Negative controls: s∞ alone (no finite-M excess) and the chain without the
    interaction (k = 0) are rejected.
    """
    eta, n = 0.02, 400  # (1 − ηa)^{2n} = 0.98^800 ≈ 1e-7: stationary
    x0 = torch.zeros(B, M, 1, dtype=torch.float64)
    x = simulate(_system(), x0, t1=n * eta, dt=eta, generator=torch.Generator().manual_seed(M)).final
    est = _particle_variance(x)
    s_inf, c = BETA / (A + K), BETA * K / (A * (A + K) * M)
    exact = chain_variance(M, eta, n, 0.0)
    assert est.agrees(exact), (est, exact)
    assert abs(exact - (s_inf + c)) < eta * (A + K) * (s_inf + c)  # = the continuous s∞ + c up to O(η)
    assert not est.agrees(chain_variance(10**9, eta, n, 0.0))  # negative control: no excess (M → ∞)
    assert not est.agrees(BETA / A / (1 - eta * A / 2))  # negative control: interaction dropped (k = 0)


def test_mean_field_limit_mean_and_variance_over_time():
    """M = 1000, B = 100: mean m0·e^{−at} and variance s∞ + (s0 − s∞)e^{−2(a+k)t} at t = 0.25, 0.5, 1.

    Tolerance z·SE plus the exact difference between the EM chain (η = 0.002) and the limit (finite-M
    excess included), which is < 0.3 % of the variance; SE ≈ 0.5 %. Negative control: the law of the
    system without interaction (rate 2a, limit β/a) is rejected.
    """
    M, B, eta, m0, s0 = 1000, 100, 0.002, 1.0, 2.0
    gen = torch.Generator().manual_seed(7)
    x0 = m0 + math.sqrt(s0) * torch.randn(B, M, 1, generator=gen, dtype=torch.float64)
    traj = simulate(_system(), x0, t1=1.0, dt=eta, save_every=125, generator=gen)
    s_inf = BETA / (A + K)
    for t, n, x in zip(traj.times.tolist(), traj.steps.tolist(), traj.states):
        if n == 0:
            continue
        mean = mean_se(x.mean(dim=(1, 2)))
        assert mean.agrees(m0 * math.exp(-A * t), bias=abs((1 - eta * A) ** n - math.exp(-A * t)) * m0)
        m_chain = m0 * (1 - eta * A) ** n
        var = mean_se((x - m_chain).square().mean(dim=(1, 2)))
        limit = s_inf + (s0 - s_inf) * math.exp(-2 * (A + K) * t)
        bias = abs(chain_variance(M, eta, n, s0) - limit)
        assert var.agrees(limit, bias=bias), (t, var, limit)
        no_interaction = BETA / A + (s0 - BETA / A) * math.exp(-2 * A * t)
        assert not var.agrees(no_interaction, bias=bias)
