"""Tests of meanfield.metrics.wasserstein against POT, known answers and exact laws.

Statistical checks use tolerance ``Z·SE`` (``Z = 5``, two-sided false failure ≈ 6e-7) with fixed seeds, state
the smallest error they detect, and come with a negative control that must fail the same check.
"""

from __future__ import annotations

import math

import numpy as np
import ot
import pytest
import scipy.linalg
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import quad
from scipy.optimize import linear_sum_assignment
from scipy.special import ndtr

from meanfield.metrics.wasserstein import (
    EXACT_MAX_POINTS,
    SINKHORN_MAX_POINTS,
    Normal,
    Uniform,
    _projections,
    resolve_method,
    sinkhorn_divergence,
    w1,
    w2,
    w2_gaussian,
    w2_squared,
    wasserstein,
    wasserstein_to_law,
)
from meanfield.studies.stats import Z, mean_se

DT = torch.float64
CLOUD_METHODS = ["exact", "sliced", "sinkhorn"]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=gen(seed), dtype=DT)


def rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(*shape, generator=gen(seed), dtype=DT)


def normalised(w: torch.Tensor) -> np.ndarray:
    return (w / w.sum(-1, keepdim=True)).numpy()


# ---------------------------------------------------------------------------------------------------------
# Agreement with POT and an independent assignment solver (deterministic, to round-off)


@pytest.mark.parametrize("p", [1, 2])
def test_1d_equal_sizes_matches_pot_wasserstein_1d(p):
    x, y = randn(5, 300, 1, seed=1), 2 * rand(5, 300, 1, seed=2)  # (B, M, 1)
    ours = wasserstein(x, y, p=p, method="1d").cost  # (B,)
    pot = ot.wasserstein_1d(x[..., 0].T.numpy(), y[..., 0].T.numpy(), p=p)  # batched over columns
    np.testing.assert_allclose(ours.numpy(), pot, rtol=1e-12, atol=1e-15)
    assert torch.equal(w2_squared(x, y), wasserstein(x, y, method="1d").cost)  # auto picks "1d" in d = 1


@pytest.mark.parametrize("p", [1, 2])
def test_1d_unequal_sizes_and_weights_match_pot_and_exact_ot(p):
    x, y = randn(40, 1, seed=3), randn(70, 1, seed=4) + 0.3
    a, b = rand(40, seed=5), rand(70, seed=6)  # weights that do not sum to one
    ours = float(wasserstein(x, y, p=p, x_weights=a, y_weights=b, method="1d").cost)
    pot_1d = float(ot.wasserstein_1d(x[:, 0].numpy(), y[:, 0].numpy(), normalised(a), normalised(b), p=p))
    cost = np.abs(x.numpy() - y.numpy().T) ** p  # (M, N)
    pot_emd = float(ot.emd2(normalised(a), normalised(b), cost))
    assert abs(ours - pot_1d) <= 1e-12 and abs(ours - pot_emd) <= 1e-12
    ours_exact = float(wasserstein(x, y, p=p, x_weights=a, y_weights=b, method="exact").cost)
    assert abs(ours_exact - pot_emd) <= 1e-12


@pytest.mark.parametrize("p", [1, 2])
def test_exact_matches_pot_emd2_and_linear_sum_assignment(p):
    x, y = randn(3, 60, 3, seed=7), rand(3, 60, 3, seed=8)  # (B, M, d)
    ours = wasserstein(x, y, p=p, method="exact").cost  # (B,)
    for r in range(3):
        cost = ot.dist(x[r].numpy(), y[r].numpy(), metric="sqeuclidean" if p == 2 else "euclidean")
        assert abs(float(ours[r]) - float(ot.emd2([], [], cost))) <= 1e-12
        rows, cols = linear_sum_assignment(cost)  # Birkhoff: uniform equal sizes → an optimal permutation
        assert abs(float(ours[r]) - cost[rows, cols].mean()) <= 1e-12
    # unequal sizes and weights
    xw, yw, a, b = randn(25, 2, seed=9), randn(35, 2, seed=10), rand(25, seed=11), rand(35, seed=12)
    cost = ot.dist(xw.numpy(), yw.numpy())
    expected = float(ot.emd2(normalised(a), normalised(b), cost))
    assert abs(float(w2_squared(xw, yw, x_weights=a, y_weights=b, method="exact")) - expected) <= 1e-12


@pytest.mark.parametrize("p", [1, 2])
def test_sliced_matches_pot_with_the_same_projections(p):
    x, y = randn(2, 200, 4, seed=13), rand(2, 150, 4, seed=14)
    a, b = rand(2, 200, seed=15), rand(2, 150, seed=16)
    theta = _projections(4, 40, seed=3).numpy().T  # (d, L), as POT takes them
    for weights in [False, True]:
        kw = {"x_weights": a, "y_weights": b} if weights else {}
        ours = wasserstein(x, y, p=p, method="sliced", n_projections=40, seed=3, **kw).cost  # (B,)
        for r in range(2):
            wa, wb = (normalised(a[r]), normalised(b[r])) if weights else (None, None)
            pot = ot.sliced_wasserstein_distance(x[r].numpy(), y[r].numpy(), wa, wb, p=p, projections=theta)
            assert abs(float(ours[r]) - pot**p) <= 1e-12


def test_sliced_projection_seed_fixes_the_value_and_directions_are_unit():
    x, y = randn(300, 3, seed=17), rand(300, 3, seed=18)
    same = [float(w2_squared(x, y, method="sliced", seed=5)) for _ in range(2)]
    other = float(w2_squared(x, y, method="sliced", seed=6))
    assert same[0] == same[1] and other != same[0]
    theta = _projections(3, 1000, seed=0).numpy()
    np.testing.assert_allclose(np.linalg.norm(theta, axis=1), 1.0, rtol=1e-14)


def test_sliced_of_a_translation_is_the_mean_squared_projection():
    """``SW2²(x, x + v) = mean_θ (θ·v)²`` exactly, and ``≈ |v|²/d`` (here the sliced/true ratio)."""
    x = randn(100, 3, seed=19)
    v = torch.tensor([1.0, -2.0, 0.5], dtype=DT)
    theta = _projections(3, 500, seed=0).numpy()
    got = float(w2_squared(x, x + v, method="sliced", n_projections=500))
    assert abs(got - float(np.mean((theta @ v.numpy()) ** 2))) <= 1e-12
    assert abs(float(w2_squared(x, x + v, method="exact")) - float(v @ v)) <= 1e-12


@pytest.mark.filterwarnings("ignore:Sinkhorn did not converge")  # POT at tol 1e-10: 1e-8 is what we ask
def test_sinkhorn_divergence_matches_pot_and_approaches_exact_ot():
    """POT's debiased ``solve_sample`` (plain Sinkhorn, 20,000 iterations: within 1e-9 of 100,000) against
    ours (ε-scaling, then alternating updates) run until the marginals are within 1e-8: equal to 1e-8;
    ``method="sinkhorn"`` (marginals within 0.1 in L1) within 0.5 %; and S_ε → exact OT as ε → 0."""
    x, y = randn(30, 2, seed=20), 0.5 * randn(25, 2, seed=21) + 1.0
    a, b = rand(30, seed=22), rand(25, seed=23)
    pot = ot.solve_sample(
        x,
        y,
        torch.tensor(normalised(a)),
        torch.tensor(normalised(b)),
        reg=0.05,
        debias=True,
        tol=1e-10,
        max_iter=20_000,
    )
    tight = sinkhorn_divergence(x, y, x_weights=a, y_weights=b, epsilon=0.05, tol=1e-8, max_iter=20_000)
    assert tight.converged and abs(float(tight.divergence) - float(pot.value)) <= 1e-8
    ours = float(w2_squared(x, y, x_weights=a, y_weights=b, method="sinkhorn", epsilon=0.05))
    assert abs(ours - float(pot.value)) <= 5e-3 * float(pot.value)  # the default tol: within 0.5 %
    exact = float(w2_squared(x, y, x_weights=a, y_weights=b, method="exact"))
    errors = [
        abs(float(w2_squared(x, y, x_weights=a, y_weights=b, method="sinkhorn", epsilon=eps)) - exact) / exact
        for eps in (0.3, 0.01)
    ]
    assert errors[1] < errors[0] and errors[1] < 0.01  # S_ε → W2² as ε → 0


# ---------------------------------------------------------------------------------------------------------
# Properties


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    M=st.integers(1, 12),
    N=st.integers(1, 12),
    d=st.integers(1, 3),
    method=st.sampled_from(["auto", "exact", "sliced"]),
)
def test_zero_symmetry_and_permutation_invariance(seed, M, N, d, method):
    x, y = randn(M, d, seed=seed), rand(N, d, seed=seed + 1)
    assert float(w2(x, x, method=method)) == 0.0
    assert abs(float(w2_squared(x, y, method=method)) - float(w2_squared(y, x, method=method))) <= 1e-12
    perm = torch.randperm(M, generator=gen(seed))
    assert abs(float(w2_squared(x[perm], y, method=method)) - float(w2_squared(x, y, method=method))) <= 1e-12
    assert abs(float(w2(2 * x, 2 * y, method=method)) - 2 * float(w2(x, y, method=method))) <= 1e-10


def test_sinkhorn_is_zero_on_equal_clouds_symmetric_and_nonnegative():
    """``S_ε(μ, μ) = 0`` exactly (the three problems run the same numbers); ``S_ε(μ, ν) = S_ε(ν, μ)`` to the
    stopping rule: the alternating updates start on one side, so the two orders agree to 2e-3 × the spread
    with the default rule and, run until the marginals are within 1e-8, to 1e-8."""
    x, y = randn(20, 2, seed=24), rand(15, 2, seed=25)
    assert abs(float(w2_squared(x, x, method="sinkhorn"))) <= 1e-12
    spread = float(torch.cat([x, y]).var(0, unbiased=False).sum())
    xy, yx = float(w2_squared(x, y, method="sinkhorn")), float(w2_squared(y, x, method="sinkhorn"))
    assert xy > 0 and abs(xy - yx) <= 2e-3 * spread
    xy, yx = (
        float(sinkhorn_divergence(u, v, tol=1e-8, max_iter=20_000).divergence) for u, v in ((x, y), (y, x))
    )
    assert xy > 0 and abs(xy - yx) <= 1e-8 * xy


def test_batched_equals_per_replica_and_a_2d_cloud_broadcasts():
    x, y = randn(4, 50, 2, seed=26), rand(50, 2, seed=27)  # (B, M, d) and (N, d)
    for method in ["exact", "sliced"]:
        batched = w2_squared(x, y, method=method)  # (B,)
        assert batched.shape == (4,)
        singles = torch.stack([w2_squared(x[r], y, method=method) for r in range(4)])  # (B,)
        assert torch.allclose(batched, singles, rtol=0, atol=1e-13)
        assert torch.equal(w2_squared(y, x, method=method), batched) or torch.allclose(
            w2_squared(y, x, method=method), batched, rtol=0, atol=1e-13
        )
    assert w2_squared(x[0], y).shape == ()


def test_w2_is_the_square_root_of_w2_squared_and_w1_is_the_p1_cost():
    x, y = randn(30, 2, seed=28), rand(30, 2, seed=29)
    assert abs(float(w2(x, y)) ** 2 - float(w2_squared(x, y))) <= 1e-14
    r = wasserstein(x, y, p=1)
    assert float(w1(x, y)) == float(r.cost) == float(r.value)


def test_auto_picks_by_dimension_and_size_and_says_which():
    assert wasserstein(randn(3000, 1), rand(3000, 1)).method == "1d"
    r = wasserstein(randn(50, 2), rand(60, 2))
    assert r.method == "exact" and r.backend is None
    big = EXACT_MAX_POINTS + 1
    r = wasserstein(randn(big, 2), rand(10, 2))
    assert r.method == "sinkhorn" and r.backend == "torch"  # on the CPU
    assert resolve_method("auto", EXACT_MAX_POINTS, EXACT_MAX_POINTS, 5) == "exact"
    assert resolve_method("auto", SINKHORN_MAX_POINTS, 10, 5) == "sinkhorn"
    assert resolve_method("auto", SINKHORN_MAX_POINTS + 1, 10, 5) == "sliced"
    assert resolve_method("sinkhorn", 10**6, 10**6, 1) == "sinkhorn"  # an explicit method is kept


def test_float32_input_gives_float32_output():
    x, y = randn(20, 2).float(), rand(20, 2).float()
    assert w2(x, y).dtype == torch.float32 and w2(x, y.double()).dtype == torch.float64


# ---------------------------------------------------------------------------------------------------------
# Collapsed clouds, weights, bad input


@pytest.mark.parametrize("method", ["1d", *CLOUD_METHODS])
def test_collapsed_clouds(method):
    d = 1 if method == "1d" else 2
    p, q = (
        torch.full((7, d), 0.3, dtype=DT),
        torch.full((5, d), -1.2, dtype=DT),
    )  # every particle at one point
    assert float(w2_squared(p, p.clone(), method=method)) == 0.0
    gap = float(((p[0] - q[0]) ** 2).sum())
    got = float(w2_squared(p, q, method=method))
    if method == "sliced":  # SW2² of two Diracs = mean_θ (θ·(p − q))²
        gap = float(np.mean((_projections(d, 128, 0).numpy() @ (p[0] - q[0]).numpy()) ** 2))
    assert abs(got - gap) <= 1e-10 * gap
    if method in ("1d", "exact"):  # one collapsed cloud: W2² = mean |y − p|²
        y = randn(9, d, seed=30)
        assert abs(float(w2_squared(p, y, method=method)) - float(((y - p[0]) ** 2).sum(1).mean())) <= 1e-12


@pytest.mark.parametrize("method", ["1d", "exact", "sliced"])
def test_weights_are_relative_masses(method):
    d = 1 if method == "1d" else 2
    x, y, a = randn(2, 20, d, seed=31), rand(2, 30, d, seed=32), rand(20, seed=33)
    base = w2_squared(x, y, x_weights=a, method=method)
    assert torch.allclose(w2_squared(x, y, x_weights=7.5 * a, method=method), base, rtol=1e-12, atol=0)
    # a zero weight drops the particle
    a0 = a.clone()
    a0[:5] = 0
    assert torch.allclose(
        w2_squared(x, y, x_weights=a0, method=method), w2_squared(x[:, 5:], y, x_weights=a[5:], method=method)
    )
    # uniform weights change nothing; per-replica weights (B, M) are accepted
    assert torch.allclose(
        w2_squared(x, y, x_weights=torch.ones(20, dtype=DT), method=method), w2_squared(x, y, method=method)
    )
    assert w2_squared(x, y, x_weights=a.expand(2, 20), method=method).shape == (2,)


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"x": torch.tensor([[0.0], [float("nan")]])}, ValueError, ["x", "NaN"]),
        ({"y": torch.tensor([[0.0], [float("inf")]])}, ValueError, ["y", "non-finite"]),
        ({"x": [[0.0]]}, TypeError, ["x", "list"]),
        ({"x": torch.zeros(3, dtype=DT)}, ValueError, ["x", "(M, d)", "(3,)"]),
        ({"x": torch.zeros(0, 1, dtype=DT)}, ValueError, ["x", "at least one"]),
        ({"x": torch.zeros(3, 1, dtype=torch.int64)}, TypeError, ["x", "floating", "int64"]),
        ({"x": torch.zeros(3, 2, dtype=DT)}, ValueError, ["dimension d", "d=2", "d=1"]),
        (
            {"x": torch.zeros(2, 3, 1, dtype=DT), "y": torch.zeros(3, 3, 1, dtype=DT)},
            ValueError,
            ["replicas", "B=2"],
        ),
        ({"x_weights": -torch.ones(4, dtype=DT)}, ValueError, ["x_weights", "≥ 0"]),
        ({"y_weights": torch.zeros(5, dtype=DT)}, ValueError, ["y_weights", "positive sum"]),
        ({"x_weights": torch.ones(3, dtype=DT)}, ValueError, ["x_weights", "(4,)", "(3,)"]),
        ({"x_weights": torch.tensor([1.0, float("nan"), 1, 1])}, ValueError, ["x_weights", "NaN"]),
        ({"method": "emd"}, ValueError, ["method", "'emd'", "sliced"]),
        (
            {"method": "1d", "x": torch.zeros(4, 2, dtype=DT), "y": torch.zeros(5, 2, dtype=DT)},
            ValueError,
            ["d == 1"],
        ),
        ({"p": 3}, ValueError, ["p", "1 or 2", "3"]),
        ({"n_projections": 0}, ValueError, ["n_projections", "0"]),
        ({"seed": 1.5}, TypeError, ["seed", "float"]),
        ({"epsilon": -1.0}, ValueError, ["epsilon", "-1.0"]),
    ],
)
def test_bad_input_raises_a_clear_error(kwargs, error, words):
    args = {"x": torch.zeros(4, 1, dtype=DT), "y": torch.ones(5, 1, dtype=DT), **kwargs}
    with pytest.raises(error) as info:
        wasserstein(**args)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


# ---------------------------------------------------------------------------------------------------------
# Exact laws in one dimension


@pytest.mark.parametrize("law", [Uniform(-1.0, 2.0), Normal(0.3, 1.5)])
@pytest.mark.parametrize("p", [1, 2])
def test_wasserstein_to_law_matches_numerical_quadrature(law, p):
    """``W_p^p = Σ_i ∫_{c_{i−1}}^{c_i} |x_(i) − Q(u)|^p du``, computed by adaptive quadrature on each cell."""
    x = randn(30, 1, seed=34) if isinstance(law, Normal) else 3 * rand(30, 1, seed=34) - 1
    w = rand(30, seed=35)
    for weights in [None, w]:
        got = float(wasserstein_to_law(x, law, p=p, weights=weights).cost)
        order = np.argsort(x[:, 0].numpy())
        xs = x[:, 0].numpy()[order]
        mass = np.full(30, 1 / 30) if weights is None else normalised(w)[order]
        edges = np.concatenate([[0.0], np.cumsum(mass)])
        edges[-1] = 1.0
        expected = sum(
            quad(
                lambda u, xi=xi: abs(xi - law.quantile(u)) ** p, lo, hi, limit=200, epsabs=1e-14, points=kink
            )[0]
            for xi, lo, hi in zip(xs, edges[:-1], edges[1:], strict=True)
            for kink in [[float(law.cdf(xi))] if lo < law.cdf(xi) < hi else None]  # |x − Q(u)| bends there
        )
        assert abs(got - expected) <= 1e-9 * expected


def test_law_quantile_integrals_match_quadrature():
    for law in [Normal(-0.4, 2.0), Uniform(-1.0, 3.0)]:
        for lo, hi in [(0.0, 0.1), (0.2, 0.7), (0.93, 1.0), (0.0, 1.0)]:
            for k in (1, 2):
                expected = quad(lambda u, law=law, k=k: law.quantile(u) ** k, lo, hi, limit=200)[0]
                assert abs(law.quantile_integral(np.array(lo), np.array(hi), k) - expected) <= 1e-9
        assert abs(float(law.cdf(law.quantile(np.array(0.3)))) - 0.3) <= 1e-12


def test_uniform_expected_w2_squared_is_one_over_6m():
    """``E W2²(μ_M, U(0,1)) = 1/(6M)`` exactly; 20 000 replicates at M = 1, 16 and 5 000 at M = 256.

    Detects a relative error of ≈ 2% at M = 1, ≈ 3% at M = 16 and ≈ 6% at M = 256 (5 SE of ``6M·W2²``). Negative
    control: samples of ``U(0, 1.05)`` (at M = 1, ``6M·E W2² = 1.055``) fail at every M.
    """
    law = Uniform()
    for M, reps in ((1, 20_000), (16, 20_000), (256, 5_000)):
        x = law.sample((reps, M), gen(M))  # (reps, M, 1)
        good = mean_se(6 * M * wasserstein_to_law(x, law).cost)
        assert good.agrees(1.0, Z), (M, good)
        bad = mean_se(6 * M * wasserstein_to_law(1.05 * x, law).cost)
        assert not bad.agrees(1.0, Z), (M, bad)


def test_normal_sqrt_m_expected_w1_tends_to_the_known_constant():
    """``sqrt(M) E W1(μ_M, N(0,1)) → sqrt(2/π) ∫ sqrt(Φ(1−Φ)) dx = 1.28838…`` at M = 4096 (1000 replicates).

    Band: ``5 SE + 0.01``; 0.01 bounds the finite-M bias (measured −0.003 ± 0.003 at M = 4096 with 2·10⁴
    replicates). Smallest detectable error ≈ 0.08 (6%). Negative control: samples of N(0, 1.02²) fail.
    """
    constant = math.sqrt(2 / math.pi) * quad(lambda t: math.sqrt(ndtr(t) * (1 - ndtr(t))), -np.inf, np.inf)[0]
    assert abs(constant - 1.288379) <= 1e-6
    law, M = Normal(), 4096
    x = law.sample((1000, M), gen(40))  # (reps, M, 1)
    good = mean_se(math.sqrt(M) * wasserstein_to_law(x, law, p=1).cost)
    assert good.agrees(constant, Z, bias=0.01), good
    bad = mean_se(math.sqrt(M) * wasserstein_to_law(1.02 * x[:300], law, p=1).cost)  # +0.31, band 0.17
    assert not bad.agrees(constant, Z, bias=0.01), bad


def test_wasserstein_to_law_bad_input():
    with pytest.raises(TypeError, match="law must be a Law1d"):
        wasserstein_to_law(torch.zeros(3, 1, dtype=DT), "normal")
    with pytest.raises(ValueError, match=r"1-D particles.*\(3, 2\)"):
        wasserstein_to_law(torch.zeros(3, 2, dtype=DT), Normal())
    with pytest.raises(ValueError, match="scale must be > 0, got -1.0"):
        Normal(0.0, -1.0)
    with pytest.raises(ValueError, match="low < high"):
        Uniform(1.0, 1.0)


def test_wasserstein_to_law_of_collapsed_particles():
    """All particles at ``c``: ``W2² = E (c − X)² = (c − m)² + σ²`` and ``W1 = E |c − X|``."""
    x = torch.full((2, 6, 1), 0.7, dtype=DT)
    got = wasserstein_to_law(x, Normal(0.2, 1.3)).cost
    assert torch.allclose(got, torch.full((2,), 0.5**2 + 1.3**2, dtype=DT), rtol=1e-12)
    got1 = float(wasserstein_to_law(torch.full((4, 1), 0.25, dtype=DT), Uniform(), p=1).cost)
    assert abs(got1 - (0.25**2 + 0.75**2) / 2) <= 1e-14


# ---------------------------------------------------------------------------------------------------------
# Gaussians


def test_w2_gaussian_known_cases():
    m1, m2 = torch.tensor([1.0, -2.0], dtype=DT), torch.tensor([0.0, 1.0], dtype=DT)
    S = torch.tensor([[2.0, 0.3], [0.3, 1.0]], dtype=DT)
    assert abs(float(w2_gaussian(m1, S, m2, S)) ** 2 - 10.0) <= 1e-12  # equal covariances: |Δm|²
    assert abs(float(w2_gaussian(m1, S, m1, 4 * S)) ** 2 - float(torch.trace(S))) <= 1e-12  # (1 − 2)² tr S
    D1, D2 = torch.diag(torch.tensor([4.0, 1.0], dtype=DT)), torch.diag(torch.tensor([1.0, 9.0], dtype=DT))
    assert abs(float(w2_gaussian(m1, D1, m1, D2)) ** 2 - (1 + 4)) <= 1e-12  # commuting: Σ (√λ − √μ)²
    zero = torch.zeros(2, 2, dtype=DT)
    assert abs(float(w2_gaussian(m1, zero, m2, zero)) - math.sqrt(10.0)) <= 1e-12  # collapsed: Diracs
    assert abs(float(w2_gaussian(m1, zero, m1, D1)) ** 2 - 5.0) <= 1e-12  # Dirac to N: tr S
    one_d = w2_gaussian(
        torch.tensor([0.5], dtype=DT),
        torch.tensor([[4.0]], dtype=DT),
        torch.tensor([0.0], dtype=DT),
        torch.tensor([[0.25]], dtype=DT),
    )
    assert abs(float(one_d) ** 2 - (0.25 + 1.5**2)) <= 1e-12
    batched = w2_gaussian(torch.stack([m1, m2]), torch.stack([S, D1]), m2, torch.stack([S, D2]))
    assert batched.shape == (2,) and abs(float(batched[0]) ** 2 - 10.0) <= 1e-12


def test_w2_gaussian_agrees_with_large_sample_exact_ot():
    """Exact OT between 6 × 800 samples of N1 and N2, coupled by the optimal map, against the closed form.

    ``Y = T(X)`` with ``T(x) = m2 + A(x − m1)``, ``A = S1^{-1/2}(S1^{1/2} S2 S1^{1/2})^{1/2} S1^{-1/2}``
    (scipy's ``sqrtm``, independent of the code under test). Then ``Y ~ N2`` (``A S1 A = S2`` is checked),
    the identity pairing is optimal for the clouds (``T`` is the gradient of a convex function), so
    ``E W2²(μ_X, μ_Y) = W2²(N1, N2)`` with no sampling bias. Detects an error of ≈ 2% of W2² (5 SE).
    Negative control: the orientation-blind formula ``|Δm|² + Σ(√λ1_i − √λ2_i)²`` (eigenvalues only) fails.
    """
    m1, m2 = np.array([0.0, 0.0]), np.array([1.0, -0.5])
    S1 = np.diag([4.0, 0.25])
    R = np.array([[1.0, -1.0], [1.0, 1.0]]) / math.sqrt(2)
    S2 = R @ S1 @ R.T  # same eigenvalues, rotated by 45°
    r1 = scipy.linalg.sqrtm(S1).real
    inv1 = np.linalg.inv(r1)
    A = inv1 @ scipy.linalg.sqrtm(r1 @ S2 @ r1).real @ inv1
    assert np.allclose(A @ S1 @ A, S2, atol=1e-12) and np.allclose(A, A.T, atol=1e-12)
    assert np.linalg.eigvalsh(A).min() > 0
    X = m1 + randn(6, 800, 2, seed=41).numpy() @ r1  # (B, n, d) ~ N(m1, S1)
    Y = m2 + (X - m1) @ A  # (B, n, d) ~ N(m2, S2)
    per_point = ((X - Y) ** 2).sum(-1)  # (B, n)
    ot_cost = w2_squared(torch.from_numpy(X), torch.from_numpy(Y), method="exact")  # (B,)
    assert torch.allclose(ot_cost, torch.from_numpy(per_point.mean(1)), rtol=1e-10)  # the map is optimal
    closed = float(w2_gaussian(*(torch.from_numpy(t) for t in (m1, S1, m2, S2)))) ** 2
    estimate = mean_se(per_point)
    assert estimate.agrees(closed, Z), (estimate, closed)
    blind = float(
        ((m1 - m2) ** 2).sum()
        + ((np.sqrt(np.linalg.eigvalsh(S1)) - np.sqrt(np.linalg.eigvalsh(S2))) ** 2).sum()
    )
    assert not estimate.agrees(blind, Z), (estimate, blind)


def test_w2_gaussian_bad_input():
    m, S = torch.zeros(2, dtype=DT), torch.eye(2, dtype=DT)
    with pytest.raises(ValueError, match="S1 must be symmetric"):
        w2_gaussian(m, torch.tensor([[1.0, 0.5], [0.0, 1.0]], dtype=DT), m, S)
    with pytest.raises(ValueError, match="S2 must be positive semi-definite"):
        w2_gaussian(m, S, m, -S)
    with pytest.raises(ValueError, match=r"S2 must have shape \(\.\.\., 2, 2\)"):
        w2_gaussian(m, S, m, torch.eye(3, dtype=DT))
    with pytest.raises(ValueError, match="same d"):
        w2_gaussian(m, S, torch.zeros(3, dtype=DT), S)
    with pytest.raises(ValueError, match="m1 has 1 non-finite"):
        w2_gaussian(torch.tensor([0.0, float("nan")], dtype=DT), S, m, S)
