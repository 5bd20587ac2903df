"""``meanfield.studies.stats`` against independent answers: hand computations, closed forms, scipy and numpy.

Written from the mutants that survived the default suite (``python tools/mutation.py meanfield.studies.stats``,
docs/testing.md): each test pins a value, a boundary (n = 2 is the smallest sample with a standard error) or a
message that a planted bug changes, and each carries a negative control, an input or a reference computed the
wrong way that must be told apart.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats as st

from meanfield.studies.stats import (
    Estimate,
    Z,
    chi2_variance_pvalue,
    false_failure_rate,
    jackknife,
    loglog_slope,
    mean_se,
    paired_difference,
    t_interval,
    whiteness,
)

# float32 values whose float32 mean and standard deviation are visibly wrong: an offset of 1000, a spread of
# 1e-3 (float32 keeps ~7 digits, so the spread is resolved to ~6e-5 of itself only in float64 arithmetic)
_G = np.random.default_rng(0)
OFFSET32 = (1000.0 + 1e-3 * _G.standard_normal(4097)).astype(np.float32)


def test_false_failure_rate_is_the_normal_tail():
    assert false_failure_rate(Z) == pytest.approx(math.erfc(Z / math.sqrt(2)), rel=1e-12)  # 5.73e-7
    assert false_failure_rate(1.0) == pytest.approx(0.3173105078629141, rel=1e-12)
    assert false_failure_rate(2.0) != pytest.approx(math.erfc(1.0 / math.sqrt(2)))  # control: not z/2's


def test_z_score_by_hand_and_with_no_error():
    assert Estimate(3.0, 0.5).z_score(2.0) == 2.0
    assert Estimate(1.0, 0.0).z_score(1.0) == 0.0
    assert Estimate(1.5, 0.0).z_score(1.0) == math.inf
    assert Estimate(0.5, 0.0).z_score(1.0) == -math.inf
    assert Estimate(3.0, 0.5).agrees(2.0, z=2.0) and not Estimate(3.0, 0.5).agrees(2.0, z=1.999)
    assert Estimate(3.0, 0.5).agrees(2.0, z=1.0, bias=0.5) and not Estimate(3.0, 0.5).agrees(
        2.0, z=1.0, bias=0.49
    )


def test_mean_se_by_hand_at_the_smallest_sample_and_beyond():
    two = mean_se(np.array([0.0, 2.0]))  # n = 2: s = sqrt(2), se = s/sqrt(2) = 1
    assert (two.value, two.se) == (1.0, pytest.approx(1.0, rel=1e-15))
    four = mean_se([[1.0, 2.0], [3.0, 4.0]])  # flattened: s = sqrt(5/3), se = s/2
    assert four.value == 2.5 and four.se == pytest.approx(math.sqrt(5 / 3) / 2, rel=1e-15)
    assert four.se != pytest.approx(math.sqrt(5 / 4) / 2)  # control: ddof = 0 is another number
    with pytest.raises(ValueError, match="^need at least 2 samples for a standard error, got 1$"):
        mean_se([1.0])


def test_mean_se_of_float32_and_of_a_tensor_with_grad_is_computed_in_float64():
    ref = OFFSET32.astype(np.float64)
    exact = (ref.mean(), ref.std(ddof=1) / math.sqrt(ref.size))
    wrong = (float(OFFSET32.mean()), float(OFFSET32.std(ddof=1)) / math.sqrt(ref.size))  # float32 arithmetic
    assert abs(wrong[1] - exact[1]) > 1e-5 * exact[1]  # control: float32 arithmetic is off (1.3e-4 here)
    for samples in (OFFSET32, torch.tensor(OFFSET32, requires_grad=True)):
        e = mean_se(samples)
        assert e.value == pytest.approx(exact[0], rel=1e-14) and e.se == pytest.approx(exact[1], rel=1e-9)


def test_t_interval_against_scipy():
    for values, level in (([0.3, 1.1], 0.95), ([1.0, 4.0, 2.0, 8.0, 5.0], 0.9), (OFFSET32, 0.99)):
        a = np.asarray(values, dtype=np.float64)
        lo, hi = st.t.interval(level, a.size - 1, loc=a.mean(), scale=st.sem(a))
        r = t_interval(values, level)
        assert r.n == a.size and r.mean == pytest.approx(a.mean(), rel=1e-14)
        assert r.se == pytest.approx(st.sem(a), rel=1e-9)
        assert (r.lo, r.hi) == (pytest.approx(lo, rel=1e-9), pytest.approx(hi, rel=1e-9))
        z_lo = a.mean() - st.norm.ppf((1 + level) / 2) * st.sem(a)
        assert r.lo < z_lo  # control: the t quantile, wider than the normal one
    one = t_interval([2.0])
    assert one.mean == 2.0 and one.n == 1 and all(math.isnan(v) for v in (one.se, one.lo, one.hi))
    with pytest.raises(ValueError, match="^t_interval needs at least one value$"):
        t_interval([])
    for level in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match=rf"level must be in \(0, 1\), got {level}"):
            t_interval([1.0, 2.0], level)


def test_paired_difference_against_scipys_paired_test():
    a = np.array([1.0, 2.5, 3.0, 4.2, 5.1])
    b = np.array([0.8, 2.0, 3.3, 3.9, 4.0])
    r = paired_difference(a, b, level=0.9)
    d = a - b
    lo, hi = st.t.interval(0.9, d.size - 1, loc=d.mean(), scale=st.sem(d))
    assert r.n == 5 and r.mean == pytest.approx(d.mean(), rel=1e-14)
    assert (r.lo, r.hi) == (pytest.approx(lo, rel=1e-12), pytest.approx(hi, rel=1e-12))
    assert r.p_value == pytest.approx(st.ttest_rel(a, b).pvalue, rel=1e-12)
    assert r.p_value != pytest.approx(st.ttest_ind(a, b).pvalue, rel=1e-3)  # control: not the unpaired test
    two = paired_difference([1.0, 2.0], [0.0, 0.5])  # n = 2 is enough for a test
    assert two.p_value == pytest.approx(st.ttest_rel([1.0, 2.0], [0.0, 0.5]).pvalue, rel=1e-12)
    assert math.isnan(paired_difference([1.0], [0.0]).p_value)
    assert math.isnan(paired_difference([1.0, 2.0], [0.0, 1.0]).p_value)  # every difference equal
    with pytest.raises(ValueError, match="paired values must have the same length, got 2 and 3"):
        paired_difference([1.0, 2.0], [1.0, 2.0, 3.0])


def test_chi2_variance_pvalue_in_closed_form_for_two_draws():
    """For n = 2, ``χ²_2`` has ``P(X ≤ s) = 1 − e^{−s/2}``: p = 2·min(1 − e^{−s/2}, e^{−s/2})."""
    for samples, variance, mean in (([1.0, 3.0], 1.0, 2.0), ([0.1, -0.2], 1.0, 0.0), ([4.0, 0.0], 2.0, 0.0)):
        s = sum((x - mean) ** 2 for x in samples) / variance
        expected = 2 * min(1 - math.exp(-s / 2), math.exp(-s / 2))
        got = chi2_variance_pvalue(
            torch.tensor(samples, dtype=torch.float64, requires_grad=True), variance, mean
        )
        assert got == pytest.approx(expected, rel=1e-12)
    assert chi2_variance_pvalue([1.0, 3.0], 1.0, 0.0) != pytest.approx(
        chi2_variance_pvalue([1.0, 3.0], 1.0, 2.0)
    )


def test_loglog_slope_of_a_power_law_and_its_standard_errors():
    x = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    exact = loglog_slope(x, 3.0 * x**-0.5)
    assert exact.value == pytest.approx(-0.5, abs=1e-14) and exact.se == pytest.approx(0.0, abs=1e-14)
    y = 3.0 * x**-0.5 * np.exp(np.array([0.1, -0.05, 0.02, -0.08, 0.04]))
    fit = loglog_slope(x, y)  # unweighted: numpy's fit and its covariance
    coef, cov = np.polyfit(np.log(x), np.log(y), 1, cov="unscaled")
    resid = np.log(y) - np.polyval(coef, np.log(x))
    assert fit.value == pytest.approx(coef[0], rel=1e-12)
    assert fit.se == pytest.approx(math.sqrt(cov[0, 0] * (resid @ resid) / (x.size - 2)), rel=1e-9)
    y_se = y * np.array([0.01, 0.02, 0.05, 0.1, 0.2])
    weighted = loglog_slope(x, y, y_se)  # weighted least squares with w = (y/y_se)²: (XᵀWX)⁻¹
    X = np.stack([np.log(x), np.ones_like(x)], 1)  # (n, 2)
    W = np.diag((y / y_se) ** 2)
    beta = np.linalg.solve(X.T @ W @ X, X.T @ W @ np.log(y))
    assert weighted.value == pytest.approx(beta[0], rel=1e-12)
    assert weighted.se == pytest.approx(math.sqrt(np.linalg.inv(X.T @ W @ X)[0, 0]), rel=1e-12)
    assert weighted.value != pytest.approx(fit.value, rel=1e-3)  # control: the weights matter here
    with pytest.raises(ValueError, match="^need at least 2 points for a slope, got 1$"):
        loglog_slope([1.0], [2.0])


def test_jackknife_of_a_mean_is_the_classical_standard_error():
    g = np.random.default_rng(1)
    a = g.standard_normal((7, 3))  # 7 replicas
    e = jackknife(lambda m: m, a[:, 0])
    assert e.value == pytest.approx(a[:, 0].mean(), rel=1e-14)
    assert e.se == pytest.approx(a[:, 0].std(ddof=1) / math.sqrt(7), rel=1e-12)  # an exact identity
    ratio = jackknife(lambda m: m["num"] / m["den"]["x"], {"num": a[:, 1] + 5, "den": {"x": a[:, 2] + 3}})
    loo = np.array([(np.delete(a[:, 1] + 5, b).mean()) / np.delete(a[:, 2] + 3, b).mean() for b in range(7)])
    assert ratio.value == pytest.approx((a[:, 1] + 5).mean() / (a[:, 2] + 3).mean(), rel=1e-14)
    assert ratio.se == pytest.approx(math.sqrt(6 / 7 * ((loo - loo.mean()) ** 2).sum()), rel=1e-12)
    assert ratio.se != pytest.approx(math.sqrt(((loo - loo.mean()) ** 2).sum()), rel=1e-3)  # control
    with pytest.raises(ValueError, match="^the jackknife needs at least 2 replicas, got 1$"):
        jackknife(lambda m: m, np.ones(1))


def _white(n: int, D: int, seed: int = 2) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, D))


def test_whiteness_passes_white_noise_and_states_what_it_can_detect():
    a = 1.7 * _white(4000, 6)  # white with variance 2.89
    check = whiteness(torch.tensor(a, requires_grad=True), variance=2.89)
    assert check.passed and (check.n, check.D) == (4000, 6)
    u = a / 1.7
    sq = (u * u).ravel()
    assert check.detectable_variance == pytest.approx(Z * sq.std(ddof=1) / math.sqrt(sq.size), rel=1e-12)
    s2 = u.sum(1) ** 2 / 6
    assert check.detectable_mean_correlation == pytest.approx(
        Z * s2.std(ddof=1) / math.sqrt(4000) / 5, rel=1e-12
    )
    z_pairs = st.norm.isf(math.erfc(Z / math.sqrt(2)) / (2 * 15))  # 15 pairs, Bonferroni
    prod_se = float(np.mean((u * u).mean(0))) / math.sqrt(4000)
    assert check.detectable_pair_correlation == pytest.approx(z_pairs * prod_se, rel=1e-9)
    assert not whiteness(a, variance=1.0).passed  # control: the wrong variance is seen


def test_whiteness_names_each_departure():
    a = _white(4000, 6)
    shifted = whiteness(a + 0.2)
    assert len(shifted.failures) >= 1 and shifted.failures[0].startswith("mean 0.2")
    loud = whiteness(1.1 * a)
    assert any(f.startswith("variance ratio 1.2") for f in loud.failures)
    paired = a.copy()
    paired[:, 4] = (
        0.6 * a[:, 1] + 0.8 * a[:, 4]
    )  # entries 1 and 4 correlated 0.6 (0.567 drawn), the variance still 1
    pair = whiteness(paired)
    assert any(f.startswith("entries 1 and 4 have correlation 0.5") for f in pair.failures), pair.failures
    common = a + 0.3 * a[:, :1]  # every entry shares a common part: the sum's variance grows
    common[:, 0] = a[:, 0]
    summed = whiteness(common / np.sqrt(np.r_[1.0, np.full(5, 1.09)]))
    assert any("variance of the sum of the 6 entries" in f for f in summed.failures)
    assert whiteness(a).passed  # control: the same draws unchanged pass
    for shape in ((1, 4), (4, 1), (8,)):
        with pytest.raises(ValueError, match=r"samples must have shape \(n, D\) with n, D ≥ 2"):
            whiteness(np.zeros(shape))


def test_whiteness_of_plus_minus_one_draws():
    """Rademacher entries have ξ² = 1 exactly: the variance's SE is 0 and still no false failure."""
    r = np.where(np.random.default_rng(3).random((2000, 4)) < 0.5, -1.0, 1.0)
    check = whiteness(r)
    assert check.passed and check.detectable_variance == 0.0
    assert not whiteness(r, variance=1.01).passed  # control: any error in the variance is then seen


def test_float32_inputs_are_computed_in_float64():
    """float32 arrays in, float64 arithmetic inside: each result equals the float64 computation of the same
    (exactly cast) values; the float32 computation differs (the control)."""
    x32 = np.array([1.0, 2.0, 4.0, 8.0, 16.0], dtype=np.float32) * np.float32(1.1)
    y32 = (3.0 * x32.astype(np.float64) ** -0.5 * np.exp([0.1, -0.05, 0.02, -0.08, 0.04])).astype(np.float32)
    ref = loglog_slope(x32.astype(np.float64), y32.astype(np.float64))
    got = loglog_slope(x32, y32)
    assert got.value == pytest.approx(ref.value, rel=1e-13) and got.se == pytest.approx(ref.se, rel=1e-12)
    wrong = st.linregress(np.log(x32), np.log(y32))  # logs in float32
    assert abs(wrong.slope - ref.value) > 1e-9
    samples = OFFSET32[:64] - np.float32(1000.0)  # float32 values of size ~1e-3
    s64 = samples.astype(np.float64)
    stat = float((s64**2).sum() / 1e-6)
    expected = 2 * min(st.chi2.cdf(stat, 64), st.chi2.sf(stat, 64))
    assert chi2_variance_pvalue(samples, 1e-6) == pytest.approx(expected, rel=1e-12)
    w = OFFSET32[:2048].reshape(512, 4) - np.float32(1000.0)
    check, ref_check = whiteness(w, variance=1e-6), whiteness(w.astype(np.float64), variance=1e-6)
    assert check.detectable_variance == pytest.approx(ref_check.detectable_variance, rel=1e-12)
    assert check.detectable_pair_correlation == pytest.approx(
        ref_check.detectable_pair_correlation, rel=1e-12
    )


def test_the_smallest_samples_are_accepted():
    two = loglog_slope([1.0, 2.0], [1.0, 4.0])  # two points: the line through them, no residual
    assert two.value == pytest.approx(2.0, rel=1e-15)
    pair = jackknife(lambda m: m, np.array([1.0, 3.0]))  # two replicas: SE = |a − b|/2
    assert pair.value == 2.0 and pair.se == pytest.approx(1.0, rel=1e-15)
    for shape in ((2, 3), (3, 2)):  # n = 2 draws, or D = 2 entries: the smallest whiteness check
        assert isinstance(whiteness(np.random.default_rng(4).standard_normal(shape)).passed, bool)


def test_whiteness_uses_its_z_and_says_the_numbers_it_tested():
    a = _white(4000, 6)
    u = a  # each departure below sits between z = 2.5 and z = 5: the z passed in must be the one used
    m = mean_se(u)
    shifted = u + (3.5 * m.se - m.value)  # the grand mean at 3.5 standard errors
    assert whiteness(shifted).passed  # z = 5 (the default)
    low = whiteness(shifted, z=2.5)
    z_text = f"z = {mean_se(shifted).z_score(0.0):.1f}"
    assert (
        low.failures
        and low.failures[0].startswith("mean ")
        and z_text in low.failures[0]
        and z_text == "z = 3.5"
    )
    sq = mean_se(u * u)
    scaled = u * math.sqrt(1 + 3.5 * sq.se)  # the variance ratio about 3.5 SE above 1
    failures = whiteness(scaled, z=2.5).failures
    ratio = mean_se(scaled * scaled)
    assert any(f.startswith("variance ratio") and f"(z = {ratio.z_score(1.0):.1f})" in f for f in failures)
    assert whiteness(scaled).passed or not any(
        f.startswith("variance ratio") for f in whiteness(scaled).failures
    )
    common = u + 0.05 * u[:, :1]  # a small common part: the sum's variance a few SE above D·variance
    common[:, 0] = u[:, 0]
    s2 = mean_se(common.sum(1) ** 2 / 6)
    text = [f for f in whiteness(common, z=1.0).failures if "variance of the sum" in f]
    assert text and f"(mean correlation ≈ {(s2.value - 1) / 5:.3g})" in text[0]
    paired = u.copy()
    paired[:, 4] = 0.6 * u[:, 1] + 0.8 * u[:, 4]
    check = whiteness(paired)
    pair_text = [f for f in check.failures if f.startswith("entries 1 and 4")]
    assert pair_text and f"(tolerance {check.detectable_pair_correlation:.2g} over 15 pairs)" in pair_text[0]
