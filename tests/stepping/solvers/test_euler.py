"""Euler–Maruyama against exact answers: noise variance, contraction, the chain's stationary law.

Every statistical check uses tolerance z·SE with z = 5 (false failure ≈ 6e-7) and has a negative control.
"""

import math

import pytest
import torch

from meanfield import (
    SDE,
    SOLVERS,
    BrownianIncrements,
    MeanFieldLangevin,
    get_solver,
    simulate,
)
from meanfield.drift.potentials import (
    Quadratic,
)
from meanfield.drift.schedules import Step
from meanfield.stepping.brownian import GaussianNoise, RademacherNoise
from meanfield.stepping.solvers import EulerMaruyama
from meanfield.stepping.solvers.euler import _EulerStepper
from meanfield.studies.stats import Z, chi2_variance_pvalue, loglog_slope, mean_se

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


F64 = torch.float64


def cloud(B=2, M=4, d=2, seed=0, scale=1.0):
    """A seeded float64 ``(B, M, d)`` state."""
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(B, M, d, generator=g, dtype=F64)


def _sigma_switch(t, x):
    """Additive σ: the number 0.5 before ``t = 0.3``, 0 on ``[0.3, 0.5)``, then a per-particle tensor."""
    if t < 0.3 - 1e-9:
        return 0.5
    if t < 0.5 - 1e-9:
        return 0.0
    return torch.full(x.shape, 0.7, dtype=x.dtype)


def test_next_scale_direct():
    """``_next_scale``: ``sqrt(dt)`` for a tensor σ; for additive noise a nonzero number ``σ(t_next)`` gives
    ``σ(t_next)·sqrt(dt)``, a zero or tensor ``σ(t_next)`` (many entries, or one) gives ``1.0``; other noise
    types give ``1.0`` without calling the diffusion."""
    dt = 0.04
    x = cloud(2, 3, 1)
    calls = []
    additive = SDE(lambda t, x: -x, lambda t, x: calls.append(t) or _sigma_switch(t, x), noise="additive")
    stepper = _EulerStepper(additive, None, 0.0, dt)
    assert stepper._next_scale(0.1, x, torch.ones(1)) == math.sqrt(dt) and calls == []
    assert stepper._next_scale(0.2, x, 0.5) == pytest.approx(0.5 * 0.2, rel=1e-15) and calls == [0.2]
    assert stepper._next_scale(0.4, x, 0.5) == 1.0
    out = stepper._next_scale(0.6, x, 0.5)
    assert out == 1.0 and type(out) is float
    scalar = SDE(lambda t, x: -x, lambda t, x: torch.tensor(0.7, dtype=F64), noise="additive")
    out = _EulerStepper(scalar, None, 0.0, dt)._next_scale(0.1, x, 0.5)
    assert type(out) is float and out == 1.0
    calls.clear()
    diagonal = SDE(lambda t, x: -x, lambda t, x: calls.append(t) or 0.5, noise="diagonal")
    assert _EulerStepper(diagonal, None, 0.0, dt)._next_scale(0.1, x, 0.5) == 1.0 and calls == []


def test_euler_solver_declared_orders():
    """The native Euler–Maruyama declares strong order 1 for additive noise, ½ otherwise, weak order 1, and
    accepts non-Gaussian increments."""
    e = EulerMaruyama()
    assert e.strong_orders == {"additive": 1.0, "diagonal": 0.5, "general": 0.5}
    assert e.weak_orders == {"additive": 1.0, "diagonal": 1.0, "general": 1.0} and e.needs_gaussian is False


class _GaussianOnly(EulerMaruyama):
    """A solver for additive noise that needs Gaussian increments (the checks of the base class)."""

    name = "gaussian_only"
    strong_orders = {"additive": 1.0, "diagonal": None, "general": None}
    needs_gaussian = True


def test_solver_checks_orders_and_repr():
    """``Solver.check``: the noise types a solver declares, the Gaussian requirement, each refused with its
    message (and accepted otherwise); the declared orders and ``repr``."""
    solver = _GaussianOnly()
    additive = MeanFieldLangevin(Quadratic())
    diagonal = SDE(lambda t, x: x, lambda t, x: x, noise="diagonal")
    gaussian = GaussianNoise((1, 2, 1), 0.1, torch.Generator(), F64, "cpu")
    signs = RademacherNoise((1, 2, 1), 0.1, torch.Generator(), F64, "cpu")
    solver.check(additive, gaussian)
    EulerMaruyama().check(diagonal, signs)
    with pytest.raises(
        ValueError,
        match=r"^solver 'gaussian_only' needs noise of type \['additive'\], but this system's noise is "
        r"'diagonal'; use solver='euler' \(any noise type\)$",
    ):
        solver.check(diagonal, gaussian)
    with pytest.raises(
        ValueError,
        match=r"^solver 'gaussian_only' needs Gaussian increments; noise='rademacher' is for the native "
        r"Euler–Maruyama solver only \(weak order 1\)$",
    ):
        solver.check(additive, signs)
    euler = EulerMaruyama()
    assert (euler.strong_order("additive"), euler.strong_order("diagonal"), euler.weak_order("general")) == (
        1.0,
        0.5,
        1.0,
    )
    assert repr(euler) == "EulerMaruyama()"


MU, S, T, N_PATHS = 0.5, 0.8, 1.0, 4000


LEVELS = [2**4, 2**5, 2**6, 2**7, 2**8]  # number of steps on each grid


BAND = 0.15  # |fitted slope − declared order| allowed with 4000 paths and 5 grids


GBM = SDE(lambda t, x: MU * x, lambda t, x: S * x, noise="diagonal")


def _strong_errors(system, solver, fine: BrownianIncrements, x0, exact):
    errors, dts = [], []
    for n in LEVELS:
        path = fine.coarsen(len(fine) // n)
        xT = simulate(system, x0, t1=T, dt=T / n, solver=solver, brownian=path).final
        errors.append(float((xT - exact).abs().mean()))
        dts.append(T / n)
    return dts, errors


@pytest.fixture(scope="module")
def gbm_paths():
    fine = BrownianIncrements.sample(
        LEVELS[-1],
        (N_PATHS, 1, 1),
        T / LEVELS[-1],
        generator=torch.Generator().manual_seed(11),
        levy_area=True,
    )
    x0 = torch.ones(N_PATHS, 1, 1, dtype=torch.float64)
    exact = x0 * torch.exp((MU - S**2 / 2) * T + S * fine.increments.sum(0))
    return fine, x0, exact


@pytest.mark.parametrize(
    "name, declared",
    [
        ("euler", 0.5),
        ("milstein", 1.0),
        ("srk", 1.5),
        ("midpoint", 1.0),
        ("heun", 1.0),
        ("euler_heun", 1.0),
        ("log_ode", 1.0),
    ],
)
def test_strong_order_on_gbm(gbm_paths, name, declared):
    """Fitted slope within ±0.15 of the declared order (measured: 0.48, 0.98, 1.47, 0.97, 0.97, 0.98, 0.97).

    reversible_heun is left out: torchsde declares it 0.5 for diagonal noise, and on scalar GBM (commutative
    noise) it reaches 0.95, so the declared order is a lower bound there.
    """
    fine, x0, exact = gbm_paths
    dts, errors = _strong_errors(GBM, name, fine, x0, exact)
    slope = loglog_slope(dts, errors).value
    assert get_solver(name).strong_order("diagonal") == declared
    assert abs(slope - declared) < BAND, (name, slope, errors)
    # negative control: half an order less is outside the band
    assert abs(slope - (declared - 0.5)) > BAND


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_every_solver_converges_to_the_ito_law_of_gbm(name):
    """E X_T = X_0 e^{μT} (Itô) for every solver at 64 steps, n = 20000 paths.

    Tolerance 5·SE (SE ≈ 0.6 % of the mean) plus a weak-bias allowance of 2·dt·|E X_T|: detects a
    relative error of ≈ 6 %. Negative control: the Stratonovich reading (mean e^{(μ + s²/2)T}, 38 % higher)
    is rejected, so a Stratonovich method that were not converted would fail.
    """
    n, steps = 20_000, 64
    x0 = torch.ones(n, 1, 1, dtype=torch.float64)
    xT = simulate(GBM, x0, t1=T, dt=T / steps, solver=name, generator=torch.Generator().manual_seed(13)).final
    est = mean_se(xT)
    bias = 2 * (T / steps) * math.exp(MU * T)
    assert est.agrees(math.exp(MU * T), bias=bias), (name, est, math.exp(MU * T))
    assert not est.agrees(math.exp((MU + S**2 / 2) * T), bias=bias)
