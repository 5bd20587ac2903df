"""Kinetic Langevin: the paired state, the BAOAB/OBABO/ABOBA splittings against an independent numpy
implementation, the closed-form stationary laws against scipy's discrete Lyapunov solver, the seed and noise
rules of ``simulate``, the first-order form under torchsde, and bad input.

Oracles: ``splitting_step`` (``tests/_kinetic_steps.py``) re-implements the schemes letter by letter in
numpy (an O over a whole step as two half steps composed, not the fused formula of the solver);
``scipy.linalg.solve_discrete_lyapunov`` of the composed step matrices (built here, not by the check) gives
the stationary covariances.
"""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from _kinetic_steps import splitting_step  # tests/_kinetic_steps.py
from scipy.linalg import solve_discrete_lyapunov

from meanfield import BrownianIncrements, MeanFieldLangevin, simulate
from meanfield.drift.phase_space import KineticMeanFieldLangevin, pair, positions, velocities
from meanfield.drift.potentials import DoubleWell, GaussianInteraction, Quadratic, QuadraticInteraction
from meanfield.stepping.solvers import get_solver
from meanfield.stepping.solvers.splittings import SPLITTINGS, Splitting
from meanfield.studies.validation import load_check

ROOT = Path(__file__).resolve().parents[1]
F64 = torch.float64
SCHEMES = sorted(SPLITTINGS)


def _harmonic():
    return load_check(ROOT / "theory" / "kinetic_harmonic.py")


def _numpy_force(x, a, k, double_well):
    """−∇V − k(x − x̄) in numpy, x: (B, M, d)."""
    f = -(x**3 - x) if double_well else -a * x
    return f - k * (x - x.mean(1, keepdims=True))


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("double_well", [False, True])
def test_splitting_equals_numpy_oracle(scheme, double_well):
    """20 steps on shared pre-drawn noise: the torch stepper equals the numpy implementation to 1e-12."""
    B, M, d, h, gamma, beta, a, k = 3, 5, 2, 0.1, 1.3, 0.7, 1.5, 0.8
    conf = DoubleWell() if double_well else Quadratic(a)
    system = KineticMeanFieldLangevin(conf, QuadraticInteraction(k), friction=gamma, beta=beta)
    gen = torch.Generator().manual_seed(1)
    z0 = torch.randn(B, M, 2 * d, generator=gen, dtype=F64)
    noise = BrownianIncrements.sample(20, (B, M, 2 * d), h, generator=gen, dtype=F64)
    zT = simulate(system, z0, t1=20 * h, dt=h, solver=scheme, brownian=noise).final
    x, v = z0[..., :d].numpy(), z0[..., d:].numpy()
    xi = (noise.increments / math.sqrt(h)).numpy()  # (20, B, M, 2d)
    for n in range(20):
        x, v, _ = splitting_step(
            SPLITTINGS[scheme], x, v, xi[n], h, gamma, beta, lambda y: _numpy_force(y, a, k, double_well)
        )
    np.testing.assert_allclose(positions(zT).numpy(), x, rtol=0, atol=1e-12)
    np.testing.assert_allclose(velocities(zT).numpy(), v, rtol=0, atol=1e-12)


def _step_matrices(word, a, h, gamma, beta):
    L, Q = np.eye(2), np.zeros((2, 2))
    for letter in word:
        tau = h / word.count(letter)
        if letter == "A":
            S, q = np.array([[1, tau], [0, 1.0]]), 0.0
        elif letter == "B":
            S, q = np.array([[1, 0], [-tau * a, 1.0]]), 0.0
        else:
            c = math.exp(-gamma * tau)
            S, q = np.diag([1.0, c]), beta * (1 - c**2)
        L, Q = S @ L, S @ Q @ S.T + np.diag([0.0, q])
    return L, Q


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("a, h, gamma", [(1.0, 0.1, 1.0), (1.0, 1.0, 0.3), (2.5, 1.2, 7.0), (0.4, 2.5, 1.0)])
def test_closed_form_stationary_law_equals_discrete_lyapunov(scheme, a, h, gamma):
    """The check's closed forms (independent of γ) = scipy's discrete Lyapunov solution, Cov(x, v) = 0."""
    beta = 0.7
    L, Q = _step_matrices(SPLITTINGS[scheme], a, h, gamma, beta)
    assert max(abs(np.linalg.eigvals(L))) < 1
    S = solve_discrete_lyapunov(L, Q)
    var_x, var_v = _harmonic().stationary_variances(scheme, a, h, beta)
    np.testing.assert_allclose([S[0, 0], S[1, 1], S[0, 1]], [var_x, var_v, 0.0], rtol=1e-10, atol=1e-12)
    L2, Q2 = _harmonic().step_matrices(scheme, a, h, gamma, beta)
    np.testing.assert_allclose(L2, L, atol=1e-15)
    np.testing.assert_allclose(Q2, Q, atol=1e-15)


def test_closed_form_negative_control():
    """A wrong formula (BAOAB's velocity law given to OBABO) is told apart by the Lyapunov oracle."""
    L, Q = _step_matrices("OBABO", 1.0, 1.0, 1.0, 0.5)
    S = solve_discrete_lyapunov(L, Q)
    assert abs(S[1, 1] - _harmonic().stationary_variances("baoab", 1.0, 1.0, 0.5)[1]) > 0.1
    with pytest.raises(ValueError, match="not stable"):
        _harmonic().stationary_variances("baoab", 1.0, 2.0, 0.5)


def test_baoab_stationary_position_variance_is_exact():
    """BAOAB at h = 1.5 (h²a/4 = 56 %): Var x = β/a within 5·SE (SE = sqrt(2/n)·β/a, n = 4e4: detects 3.5 %);
    negative control: OBABO's position law at the same h (+129 %) is rejected."""
    n, h, beta = 40_000, 1.5, 0.5
    system = KineticMeanFieldLangevin(Quadratic(1.0), friction=1.0, beta=beta)
    z0 = pair(math.sqrt(beta) * torch.randn(1, n, 1, dtype=F64, generator=torch.Generator().manual_seed(0)))
    zT = simulate(system, z0, t1=30 * h, dt=h, solver="baoab", generator=3).final
    var = float(positions(zT).square().mean())
    se = beta * math.sqrt(2 / n)
    assert abs(var - beta) < 5 * se
    assert abs(var - _harmonic().stationary_variances("obabo", 1.0, h, beta)[0]) > 5 * se


@pytest.mark.parametrize("scheme", SCHEMES)
def test_seed_rules(scheme):
    """Same int seed: bit-identical, seed recorded; pre-drawn increments are accepted (not with a generator);
    two segments with the generator carried over equal one run (the kept force too)."""
    system = KineticMeanFieldLangevin(DoubleWell(), QuadraticInteraction(0.5), friction=2.0, beta=0.3)
    z0 = torch.randn(2, 7, 4, dtype=F64, generator=torch.Generator().manual_seed(5))
    one = simulate(system, z0, t1=1.0, dt=0.05, solver=scheme, generator=11, save_every=5)
    again = simulate(system, z0, t1=1.0, dt=0.05, solver=scheme, generator=11, save_every=5)
    assert one.seed == 11 and torch.equal(one.states, again.states) and one.states.shape == (5, 2, 7, 4)
    path = BrownianIncrements.sample(
        20, (2, 7, 4), 0.05, generator=torch.Generator().manual_seed(11), dtype=F64
    )
    by_path = simulate(system, z0, t1=1.0, dt=0.05, solver=scheme, brownian=path)
    assert by_path.seed is None and not torch.equal(
        by_path.final, one.final
    )  # another draw order: other numbers
    with pytest.raises(ValueError, match="either brownian"):
        simulate(system, z0, t1=1.0, dt=0.05, solver=scheme, brownian=path, generator=11)
    g = torch.Generator().manual_seed(11)
    half = simulate(system, z0, t1=0.5, dt=0.05, solver=scheme, generator=g).final
    rest = simulate(system, half, t0=0.5, t1=1.0, dt=0.05, solver=scheme, generator=g).final
    assert torch.equal(rest, one.final)
    assert torch.equal(
        z0, torch.randn(2, 7, 4, dtype=F64, generator=torch.Generator().manual_seed(5))
    )  # x0 untouched


def test_first_order_form_under_torchsde_and_euler():
    """torchsde's srk and heun and the native Euler–Maruyama integrate the first-order (x, v) form; at a fine
    step they agree pathwise with BAOAB on the same increments (the W_v slot), and Euler–Maruyama's O(h)
    stationary bias on the harmonic oscillator is seen where BAOAB's position law is exact."""
    system = KineticMeanFieldLangevin(Quadratic(1.0), QuadraticInteraction(1.0), friction=1.0, beta=0.5)
    z0 = torch.randn(2, 6, 2, dtype=F64, generator=torch.Generator().manual_seed(2))
    path = BrownianIncrements.sample(
        400, (2, 6, 2), 0.0025, generator=torch.Generator().manual_seed(3), dtype=F64, levy_area=True
    )
    ref = simulate(system, z0, t1=1.0, dt=0.0025, solver="baoab", brownian=path).final
    for name in ("srk", "heun", "euler", "torchsde_euler"):
        z = simulate(system, z0, t1=1.0, dt=0.0025, solver=name, brownian=path).final
        assert float((z - ref).abs().max()) < 0.01, name  # measured 5e-4 (heun) … 4e-3 (euler)
    other = BrownianIncrements.sample(
        400, (2, 6, 2), 0.0025, generator=torch.Generator().manual_seed(4), dtype=F64
    )
    assert (
        float(
            (simulate(system, z0, t1=1.0, dt=0.0025, solver="baoab", brownian=other).final - ref).abs().max()
        )
        > 0.1
    )


@pytest.mark.parametrize("scheme", SCHEMES)
def test_strong_order_one_on_shared_paths(scheme):
    """Each splitting on 2^3…2^6 steps of one Brownian path against 2^10 steps (a double well, γ = 2): the RMS
    error's log-log slope is within 0.25 of the declared strong order 1 (measured 1.01–1.02); negative
    control: the slope is not ½."""
    system = KineticMeanFieldLangevin(DoubleWell(), friction=2.0, beta=0.5)
    z0 = torch.randn(1, 2000, 2, dtype=F64, generator=torch.Generator().manual_seed(8))
    fine = BrownianIncrements.sample(
        1024, (1, 2000, 2), 1 / 1024, generator=torch.Generator().manual_seed(9), dtype=F64
    )
    ref = simulate(system, z0, t1=1.0, dt=1 / 1024, solver=scheme, brownian=fine).final
    dts, errs = [], []
    for k in (128, 64, 32, 16):
        z = simulate(system, z0, t1=1.0, dt=k / 1024, solver=scheme, brownian=fine.coarsen(k)).final
        dts.append(k / 1024)
        errs.append(float((z - ref).square().sum(-1).mean().sqrt()))
    slope = np.polyfit(np.log(dts), np.log(errs), 1)[0]
    assert (
        get_solver("baoab").strong_order("additive") == 1.0
        and get_solver("obabo").weak_order("additive") == 2.0
    )
    assert abs(slope - 1.0) < 0.25, (slope, errs)
    assert abs(slope - 0.5) > 0.25


def test_interactions_on_the_position_view():
    """A pair interaction (GaussianInteraction) sees the positions only: the force equals the overdamped drift."""
    x = torch.randn(2, 9, 3, dtype=F64, generator=torch.Generator().manual_seed(1))
    v = torch.randn(2, 9, 3, dtype=F64, generator=torch.Generator().manual_seed(2))
    W = GaussianInteraction(1.0, 0.7)
    kin = KineticMeanFieldLangevin(Quadratic(0.5), W, friction=0.3, beta=0.1)
    over = MeanFieldLangevin(Quadratic(0.5), W, beta=0.1)
    b = kin.drift(0.0, pair(x, v))
    torch.testing.assert_close(b[..., :3], v)
    torch.testing.assert_close(b[..., 3:], over.drift(0.0, x) - 0.3 * v)
    assert kin.diffusion(0.0, pair(x, v)).tolist() == [0.0] * 3 + [math.sqrt(2 * 0.3 * 0.1)] * 3
    z = simulate(kin, pair(x, v), t1=0.5, dt=0.05, solver="obabo", generator=0).final
    assert torch.isfinite(z).all()
    e = kin.energy(pair(x, v))
    torch.testing.assert_close(e, over.energy(x) + 0.5 * v.square().sum(-1).mean(1))


def test_hamiltonian_limit_conserves_energy_to_order_h2():
    """γ = 0, β = 0: velocity Verlet; the energy error over 100 steps shrinks ≈ 4× when h halves."""
    system = KineticMeanFieldLangevin(DoubleWell(), friction=0.0, beta=0.0)
    z0 = pair(torch.full((1, 1, 1), 1.8, dtype=F64))
    drift = []
    for h in (0.1, 0.05):
        z = simulate(system, z0, t1=10.0, dt=h, solver="baoab", generator=0, save_every=1).states
        e = system.energy(z.reshape(-1, 1, 2))
        drift.append(float((e - e[0]).abs().max()))
    assert 3.0 < drift[0] / drift[1] < 5.0, drift


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: KineticMeanFieldLangevin(Quadratic(), friction=-1.0), ValueError, "friction"),
        (lambda: KineticMeanFieldLangevin(Quadratic(), beta=-0.1), ValueError, "beta"),
        (lambda: KineticMeanFieldLangevin(Quadratic(), friction=float("nan")), ValueError, "friction"),
        (lambda: KineticMeanFieldLangevin("quadratic"), TypeError, "confinement"),
        (lambda: Splitting("BAOBA"), ValueError, "unknown splitting"),
        (lambda: get_solver("baobab"), ValueError, "unknown solver"),
        (lambda: pair(torch.zeros(1, 2, 3), torch.zeros(1, 2, 2)), ValueError, "velocities"),
        (lambda: positions(torch.zeros(1, 2, 3)), ValueError, "2d"),
    ],
)
def test_bad_input(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_bad_input_in_simulate():
    system = KineticMeanFieldLangevin(Quadratic(), friction=1.0, beta=1.0)
    with pytest.raises(ValueError, match="2d"):
        simulate(system, torch.zeros(1, 3, 3), t1=1.0, dt=0.1, solver="baoab", generator=0)
    with pytest.raises(ValueError, match="KineticMeanFieldLangevin"):
        simulate(
            MeanFieldLangevin(Quadratic()), torch.zeros(1, 3, 2), t1=1.0, dt=0.1, solver="baoab", generator=0
        )
    with pytest.raises(ValueError, match="Gaussian"):
        simulate(
            system, torch.zeros(1, 3, 2), t1=1.0, dt=0.1, solver="aboba", generator=0, noise="rademacher"
        )
    with pytest.raises(ValueError, match="shape"):
        path = BrownianIncrements.sample(10, (1, 3, 1), 0.1, generator=torch.Generator().manual_seed(0))
        simulate(system, torch.zeros(1, 3, 2), t1=1.0, dt=0.1, solver="obabo", brownian=path)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_background_draw_gives_the_same_run(scheme, monkeypatch):
    """With the next step's noise drawn in the background (OVERLAP_MIN = 0) the run and the generator's final
    state are bit-identical to the serial run (OVERLAP_MIN = ∞)."""
    from meanfield import _background

    system = KineticMeanFieldLangevin(DoubleWell(), QuadraticInteraction(0.5), friction=1.0, beta=0.4)
    z0 = torch.randn(2, 50, 4, dtype=F64, generator=torch.Generator().manual_seed(3))
    out, submitted = [], []
    submit = _background.submit
    monkeypatch.setattr(_background, "submit", lambda *a: submitted.append(1) or submit(*a))
    for overlap_min in (0, math.inf):
        monkeypatch.setattr(_background, "OVERLAP_MIN", overlap_min)
        g = torch.Generator().manual_seed(4)
        out.append(
            (
                simulate(system, z0, t1=2.0, dt=0.05, solver=scheme, generator=g, save_every=7).states,
                g.get_state(),
            )
        )
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])
    assert len(submitted) > 20  # the first run did draw in the background


def test_one_temperature_for_every_replica():
    """A per-replica temperature is refused with a message (the splittings take one β)."""
    with pytest.raises(TypeError, match="one temperature"):
        KineticMeanFieldLangevin(Quadratic(), beta=torch.tensor([0.1, 0.2]))
    system = KineticMeanFieldLangevin(Quadratic(), friction=1.0, beta=lambda t: torch.tensor([0.1, 0.2]))
    with pytest.raises(TypeError, match="one temperature"):
        simulate(system, torch.zeros(2, 3, 2), t1=0.2, dt=0.1, solver="baoab", generator=0)


@pytest.mark.slow
def test_benchmark_script_runs(tmp_path):
    """``benchmarks/kinetic.py --smoke`` runs and writes its table (the timings are not judged here)."""
    import subprocess
    import sys

    out = tmp_path / "kinetic.md"
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "kinetic.py"), "--smoke", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "| kinetic baoab |" in out.read_text() and "load average" in out.read_text()
