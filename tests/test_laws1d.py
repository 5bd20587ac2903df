"""1-D exact laws from a sample, a quantile function or a density: W_p to them against independent answers."""

import math

import numpy as np
import pytest
import scipy.special
import torch

from meanfield.metrics.wasserstein import Discrete, Law1d, Normal, Uniform, w1, w2_squared, wasserstein_to_law

F64 = torch.float64


def cloud(M, seed, B=None, scale=1.0):
    shape = (M, 1) if B is None else (B, M, 1)
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def point(c):
    return torch.full((1, 1), float(c), dtype=F64)


def semicircle(R):
    return lambda x: np.sqrt(np.clip(R * R - x * x, 0.0, None))


@pytest.mark.parametrize("p", [1, 2])
def test_a_law_from_a_sample_gives_the_two_cloud_distance(p):
    """Independent path: the two-cloud sorting formula (method "1d") for clouds of one size, per replica."""
    x, y = cloud(300, 0, B=3), cloud(300, 1, scale=1.3)
    law = Law1d.from_sample(y)
    got = wasserstein_to_law(x, law, p=p).cost  # (3,)
    expect = w2_squared(x, y) if p == 2 else w1(x, y)  # W_2² or W_1
    assert torch.allclose(got, expect, rtol=1e-12, atol=1e-14)
    shifted = wasserstein_to_law(x, Law1d.from_sample(y + 0.1), p=p).cost
    assert torch.all((shifted - expect).abs() > 1e-3)  # negative control


def test_a_large_sample_is_exact_for_a_point_mass_and_weights_count():
    """W_2²(δ_c, Σ w_k δ_{y_k}) = Σ w_k (y_k − c)², computed by numpy; weights equal to repeated atoms."""
    y = np.random.default_rng(0).standard_normal(1_000_000)
    law = Law1d.from_sample(y)
    assert float(wasserstein_to_law(point(0.3), law).cost) == pytest.approx(
        np.mean((y - 0.3) ** 2), rel=1e-12
    )
    assert float(wasserstein_to_law(point(0.3), law, p=1).cost) == pytest.approx(
        np.mean(np.abs(y - 0.3)), rel=1e-12
    )
    weighted = Law1d.from_sample(np.array([0.0, 1.0]), np.array([1.0, 3.0]))
    repeated = Law1d.from_sample(np.array([0.0, 1.0, 1.0, 1.0]))
    x = cloud(50, 2)
    assert torch.allclose(
        wasserstein_to_law(x, weighted).cost, wasserstein_to_law(x, repeated).cost, rtol=1e-13
    )
    assert weighted.mean() == 0.75 and weighted.variance() == pytest.approx(0.1875)


def test_a_law_from_the_normal_quantile_matches_the_closed_form_normal():
    """n = 2^20 midpoint atoms of Φ^{-1} (the default): W_2² from 500 particles within 1e-6 of the closed form
    Normal's (measured 5.5e-7), W_1 within 5e-7 (measured 1.2e-7); deterministic, so tight bounds hold."""
    x = cloud(500, 3)
    law = Law1d.from_quantile(scipy.special.ndtri)
    exact = float(wasserstein_to_law(x, Normal()).cost)
    assert float(wasserstein_to_law(x, law).cost) == pytest.approx(exact, abs=1e-6)
    assert float(wasserstein_to_law(x, law, p=1).cost) == pytest.approx(
        float(wasserstein_to_law(x, Normal(), p=1).cost), abs=5e-7
    )
    # the quantization's own W_2² to N(0, 1) is what the docstring states (8.1e-8 at n = 2^20)
    atoms = torch.from_numpy(law.values).unsqueeze(-1)
    assert float(wasserstein_to_law(atoms, Normal()).cost) < 1e-7
    wrong = float(wasserstein_to_law(x, Law1d.from_quantile(lambda u: 1.05 * scipy.special.ndtri(u))).cost)
    assert abs(wrong - exact) > 1e-4  # negative control: σ × 1.05


def test_a_law_from_a_density_has_the_right_moments_and_distance():
    """The semicircle of radius R has E X² = R²/4 = W_2²(δ_0, law); the uniform density gives U(0, 1)."""
    law = Law1d.from_density(semicircle(2.0), -2.0, 2.0)
    assert float(wasserstein_to_law(point(0.0), law).cost) == pytest.approx(1.0, abs=1e-8)  # measured 4.9e-10
    assert law.mean() == pytest.approx(0.0, abs=1e-12)
    wrong = Law1d.from_density(semicircle(2.1), -2.1, 2.1)
    assert abs(float(wasserstein_to_law(point(0.0), wrong).cost) - 1.0) > 0.05  # negative control: R = 2.1
    # unnormalised density of U(0, 1) against the closed form Uniform, and the normal density against Normal
    x = cloud(400, 4)
    flat = Law1d.from_density(lambda t: 3.0 + 0 * t, 0.0, 1.0)
    assert float(wasserstein_to_law(x, flat).cost) == pytest.approx(
        float(wasserstein_to_law(x, Uniform()).cost), abs=1e-7
    )
    gauss = Law1d.from_density(lambda t: np.exp(-t * t / 2), -12.0, 12.0)
    assert float(wasserstein_to_law(x, gauss).cost) == pytest.approx(
        float(wasserstein_to_law(x, Normal()).cost), abs=1e-6
    )


def test_sampling_a_discrete_law_draws_its_atoms():
    law = Law1d.from_sample(np.array([-1.0, 2.0]), np.array([1.0, 3.0]))
    draws = law.sample(40_000, torch.Generator().manual_seed(0))  # (n, 1)
    share = float((draws == 2.0).double().mean())
    assert set(draws.unique().tolist()) == {-1.0, 2.0}
    assert abs(share - 0.75) < 5 * math.sqrt(0.75 * 0.25 / 40_000)
    assert torch.equal(
        law.sample(10, np.int64(5)), law.sample(10, torch.Generator().manual_seed(5))
    )  # one resolver
    assert torch.equal(law.sample(10, 5), Normal().sample(10, 5) * 0 + law.sample(10, 5))
    with pytest.raises(TypeError, match="int seed"):
        law.sample(10, 5.0)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: Law1d.from_sample(np.array([])), r"shape \(n,\) or \(n, 1\)"),
        (lambda: Law1d.from_sample(np.array([1.0, np.nan])), "must be finite"),
        (lambda: Law1d.from_sample(np.ones(3), np.array([1.0, -1.0, 1.0])), "weights must be finite, ≥ 0"),
        (lambda: Law1d.from_quantile(lambda u: -u), "non-decreasing"),
        (lambda: Law1d.from_quantile(lambda u: np.where(u < 0.5, -np.inf, u)), "finite on"),
        (lambda: Law1d.from_density(lambda x: x, -1.0, 1.0), r"finite and ≥ 0, got p\(-1\) = -1"),
        (lambda: Law1d.from_density(lambda x: 0 * x, -1.0, 1.0), "no mass"),
        (lambda: Law1d.from_density(lambda x: 1 + 0 * x, 1.0, 1.0), "low < high"),
    ],
)
def test_bad_laws_are_refused_with_the_reason(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_discrete_is_a_law1d():
    assert isinstance(Law1d.from_sample(np.arange(3.0)), Discrete)
