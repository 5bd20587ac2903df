"""Euler–Maruyama against exact answers: noise variance, contraction, the chain's stationary law.

Every statistical check uses tolerance z·SE with z = 5 (false failure ≈ 6e-7) and has a negative control.
"""

import math

import pytest
import torch

from meanfield import MeanFieldLangevin, simulate
from meanfield.drift.potentials import Quadratic
from meanfield.drift.schedules import Step
from meanfield.studies.stats import Z, chi2_variance_pvalue, mean_se

P_MIN = 1e-6  # a chi-square p-value below this rejects (false failure 1e-6)


def _free_noise(beta, eta, T, n, gen, schedule=None, noise="gaussian", device="cpu"):
    """Zero drift: x_T = Σ_n sqrt(2 β_n η) ξ_n over T steps, n independent coordinates (returned on the CPU)."""
    system = MeanFieldLangevin(Quadratic(0.0), beta=schedule if schedule is not None else beta)
    x0 = torch.zeros(1, n, 1, dtype=torch.float64, device=device)
    return simulate(system, x0, t1=T * eta, dt=eta, generator=gen, noise=noise).final.flatten().cpu()


def _gen(device, seed):
    return torch.Generator(device=device).manual_seed(seed)


def test_noise_variance_is_2_beta_eta_T(device):
    """Var(Σ sqrt(2βη) ξ) = 2βηT, chi-square test on n = 2e5 coordinates.

    Smallest detectable relative error of the variance ≈ 5·sqrt(2/n) ≈ 1.6 %.
    """
    beta, eta, T, n = 0.7, 0.01, 25, 200_000
    x = _free_noise(beta, eta, T, n, _gen(device, 1), device=device)
    assert chi2_variance_pvalue(x, 2 * beta * eta * T) > P_MIN
    # negative control: a variance 5 % off is rejected
    assert chi2_variance_pvalue(x, 1.05 * 2 * beta * eta * T) < P_MIN
    # increments are independent across steps: lag-1 correlation of the path within z·SE of 0
    system = MeanFieldLangevin(Quadratic(0.0), beta=beta)
    traj = simulate(
        system,
        torch.zeros(1, 20_000, 1, dtype=torch.float64, device=device),
        t1=4 * eta,
        dt=eta,
        save_every=1,
        generator=_gen(device, 2),
    )
    dx = traj.states.cpu().diff(dim=0).flatten(1)  # (4, n)
    r = (dx[:-1] * dx[1:]).mean(1) / (2 * beta * eta)  # lag-1 correlations, SE 1/sqrt(n)
    assert r.abs().max() < Z / math.sqrt(20_000)


def test_beta_schedule_is_applied_per_step(gen):
    """With β_t piecewise constant the variance is Σ_n 2 β(t_n) η (each step uses its own β)."""
    eta, T, n = 0.01, 20, 200_000
    schedule = Step([2.0, 0.5], [10 * eta - 1e-12])  # β = 2 for steps 0..9, 0.5 for steps 10..19
    x = _free_noise(None, eta, T, n, gen(3), schedule=schedule)
    exact = 2 * eta * (10 * 2.0 + 10 * 0.5)
    assert chi2_variance_pvalue(x, exact) > P_MIN
    assert chi2_variance_pvalue(x, 2 * eta * T * 2.0) < P_MIN  # negative control: β frozen at its start


def test_rademacher_noise_has_the_same_variance(device):
    """±1 increments: E x_T² = 2βηT; x_T takes only lattice values (not Gaussian)."""
    beta, eta, T, n = 0.5, 0.01, 16, 200_000
    x = _free_noise(beta, eta, T, n, _gen(device, 4), noise="rademacher", device=device)
    est = mean_se(x.square())
    assert est.agrees(2 * beta * eta * T)
    assert not est.agrees(1.05 * 2 * beta * eta * T)  # negative control
    steps = x / math.sqrt(2 * beta * eta)  # sums of 16 signs: even integers in [-16, 16]
    assert (steps - steps.round()).abs().max() < 1e-9
    assert ((steps.round() % 2) == 0).all()


def test_gradient_descent_contracts_by_exactly_one_minus_eta_a_to_the_T(device):
    """β = 0 on V = a/2|x|²: x_T = (1 − ηa)^T x_0 exactly (float64)."""
    a, eta, T = 3.0, 0.05, 40
    x0 = torch.linspace(-2, 2, 30, dtype=torch.float64, device=device).reshape(3, 5, 2)
    xT = simulate(MeanFieldLangevin(Quadratic(a), beta=0.0), x0, t1=T * eta, dt=eta, generator=0).final
    assert torch.allclose(xT, (1 - eta * a) ** T * x0, rtol=1e-12, atol=0)
    assert not torch.allclose(xT, (1 - eta * a) ** (T + 1) * x0, rtol=1e-3, atol=0)  # negative control


@pytest.mark.parametrize("noise", ["gaussian", "rademacher"])
def test_ou_chain_stationary_variance_and_continuous_rejected(device, noise):
    """EM on dx = −ax dt + sqrt(2β) dW has stationary variance β/(a(1 − ηa/2)), not β/a.

    At ηa = 0.1 the two differ by 5.3 %; with n = 2e5 coordinates the SE is 0.32 %, so the test
    detects a 1.6 % error and rejects the continuous value at ≈ 16 SE. (The chain's first two moments
    depend only on the increments' mean and variance, so ±1 noise has the same stationary variance.)
    """
    a, beta, eta, n = 2.0, 0.5, 0.05, 200_000
    x0 = torch.zeros(1, n, 1, dtype=torch.float64, device=device)
    system = MeanFieldLangevin(Quadratic(a), beta=beta)
    x = simulate(system, x0, t1=300 * eta, dt=eta, generator=_gen(device, 5), noise=noise).final.cpu()
    # (0.9^600 ≈ 3e-28: stationary)
    est = mean_se(x.square())
    chain, continuous = beta / (a * (1 - eta * a / 2)), beta / a
    assert est.agrees(chain), est.z_score(chain)
    assert not est.agrees(continuous)  # negative control: the discretisation bias is visible
