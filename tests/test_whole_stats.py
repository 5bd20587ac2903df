"""Every public function of ``meanfield.studies.stats`` and ``meanfield.runs.sinks`` pinned whole (issue 25).

Each test checks one function's observable behaviour against an independent answer: a hand computation,
a closed form (the χ² law of 4 degrees of freedom, the weighted least-squares normal equations), a
numerical integral over the χ² law of the sample variance (the paired t-test's power without scipy's
noncentral t), a brute-force search (the number of pairs), or a value written by hand (messages, tags,
table lines, the lines of a figure). Every branch, default, boundary (``n = 2``, ``level`` at 0 and 1,
``power = alpha``), message (anchored at both ends) and side effect (scalars written, flushes, the PNG) is
checked, so that a flipped comparison, a changed constant or a dropped argument fails a test.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import re
import sys
import types

import numpy as np
import pytest
import torch
from scipy import integrate
from scipy import stats as st

from meanfield.runs import sinks
from meanfield.studies import stats
from meanfield.studies.stats import (
    Estimate,
    HolmFamily,
    Interval,
    LogInterval,
    PairedDifference,
    WhitenessCheck,
    Z,
    chi2_variance_pvalue,
    detectable_difference,
    false_failure_rate,
    holm,
    jackknife,
    log_interval,
    loglog_slope,
    mean_se,
    paired_difference,
    paired_t_power,
    pairs_needed,
    t_interval,
    whiteness,
    within,
)

# ======================================================================================================
# constants, Estimate, mean_se, within
# ======================================================================================================


def test_z_is_five_and_the_false_failure_rate_is_the_two_sided_normal_tail():
    """``Z = 5``; ``false_failure_rate(z) = erfc(z/√2)`` (the two-sided tail, by hand), its default ``z`` is
    ``Z``; it returns a Python float."""
    assert Z == 5.0 and type(Z) is float
    assert false_failure_rate() == pytest.approx(math.erfc(5.0 / math.sqrt(2)), rel=1e-12, abs=0)
    assert false_failure_rate() == pytest.approx(5.733031437583878e-07, rel=1e-12, abs=0)
    assert false_failure_rate(0.0) == pytest.approx(1.0, rel=1e-15, abs=0)
    assert false_failure_rate(3.0) == pytest.approx(math.erfc(3.0 / math.sqrt(2)), rel=1e-12, abs=0)
    assert type(false_failure_rate(2.0)) is float
    assert false_failure_rate(4.0) != pytest.approx(false_failure_rate())  # control: the default is z = 5


def test_estimate_fields_are_frozen_and_ordered():
    """``Estimate(value, se)`` in that order; frozen (assignment refused)."""
    e = Estimate(1.5, 0.25)
    assert (e.value, e.se) == (1.5, 0.25)
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.value = 2.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("value", "se", "target", "expected"),
    [
        (3.0, 0.5, 2.0, 2.0),  # (3 − 2)/0.5
        (1.0, 4.0, 3.0, -0.5),  # the sign and the division by se (not a product)
        (2.0, 1.0, 2.0, 0.0),
        (7.0, 1.0, 5.0, 2.0),  # se = 1: not the se = 0 branch
        (1.0, 0.0, 1.0, 0.0),  # no error, no mismatch
        (1.5, 0.0, 1.0, math.inf),
        (0.5, 0.0, 1.0, -math.inf),
    ],
)
def test_z_score_by_hand(value, se, target, expected):
    """``(value − target)/se``; with ``se = 0``: 0 for an exact match, ``±inf`` signed like the mismatch."""
    assert Estimate(value, se).z_score(target) == expected


def test_agrees_and_within_at_their_boundaries_and_defaults():
    """``|value − target| ≤ z·se + bias``, equality included, on both sides of the target; the default ``z``
    is 5 and the default bias 0; :func:`within` passes ``z`` and ``bias`` on."""
    e = Estimate(10.0, 0.5)
    for target in (7.5, 12.5):  # exactly z·se = 2.5 away with the default z: accepted
        assert e.agrees(target) and within(e, target)
    for target in (7.499, 12.501):
        assert not e.agrees(target) and not within(e, target)
    assert e.agrees(11.0, 2.0) and within(e, 11.0, 2.0)
    assert not e.agrees(11.0, 1.999) and not within(e, 11.0, 1.999)
    assert e.agrees(11.5, 2.0, 0.5) and within(e, 11.5, 2.0, 0.5)
    assert not e.agrees(11.5, 2.0, 0.499) and not within(e, 11.5, 2.0, 0.499)
    assert within(e, 11.5, z=2.0, bias=0.5) and not within(e, 11.5, z=2.0)
    exact = Estimate(1.0, 0.0)
    assert exact.agrees(1.0) and not exact.agrees(1.0 + 1e-12) and exact.agrees(1.1, bias=0.1 + 1e-15)


def test_mean_se_by_hand_for_lists_arrays_and_tensors():
    """Mean and ``s/√n`` (``ddof = 1``) of the flattened values, by hand; tensors with gradients accepted;
    Python floats returned; fewer than 2 values refused with the count in the message."""
    e = mean_se([1.0, 2.0, 6.0])  # mean 3, s² = (4 + 1 + 9)/2 = 7
    assert e.value == 3.0 and e.se == pytest.approx(math.sqrt(7 / 3), rel=1e-15, abs=0)
    assert type(e.value) is float and type(e.se) is float
    t = mean_se(torch.tensor([[1.0, 2.0], [6.0, 3.0]], requires_grad=True))  # mean 3, s² = 14/3
    assert t.value == 3.0 and t.se == pytest.approx(math.sqrt(14 / 3 / 4), rel=1e-7, abs=0)
    assert mean_se(np.array([5.0, 5.0])) == Estimate(5.0, 0.0)
    for values, n in (([1.0], 1), ([], 0), (np.zeros((1, 1)), 1)):
        with pytest.raises(ValueError, match=rf"^need at least 2 samples for a standard error, got {n}$"):
            mean_se(values)


# ======================================================================================================
# chi2_variance_pvalue
# ======================================================================================================


def _chi2_4_cdf(s: float) -> float:
    """``P(χ²_4 ≤ s) = 1 − e^{−s/2}(1 + s/2)`` (closed form)."""
    return 1.0 - math.exp(-s / 2) * (1 + s / 2)


@pytest.mark.parametrize(
    ("samples", "variance", "mean"),
    [
        ([[0.1, -0.2], [0.3, 0.05]], 1.0, 0.0),  # s small: the lower tail is the smaller one
        ([[3.0, -2.0], [2.5, 1.0]], 1.0, 0.0),  # s large: the upper tail
        ([[3.0, -2.0], [2.5, 1.0]], 4.0, 0.5),  # the variance divides, the mean is subtracted
        ([1.0, 2.0, 1.5, 0.2], 0.3, 1.0),
    ],
)
def test_chi2_variance_pvalue_of_four_draws_in_closed_form(samples, variance, mean):
    """Four draws (also as a 2×2 array: flattened, n = 4 degrees of freedom): p = 2·min(F(s), 1 − F(s))
    with ``F`` the χ²_4 law in closed form and ``s = Σ(x − mean)²/variance``."""
    x = np.asarray(samples, dtype=float).ravel()
    s = float(((x - mean) ** 2).sum() / variance)
    expected = 2 * min(_chi2_4_cdf(s), 1 - _chi2_4_cdf(s))
    got = chi2_variance_pvalue(torch.tensor(samples, dtype=torch.float64), variance, mean)
    assert got == pytest.approx(expected, rel=1e-10, abs=0) and type(got) is float
    assert chi2_variance_pvalue(np.asarray(samples), variance, mean) == pytest.approx(
        expected, rel=1e-10, abs=0
    )


def test_chi2_variance_pvalue_default_mean_is_zero():
    """Without ``mean`` the hypothesis is mean 0: the same as passing 0, not as passing the sample mean."""
    x = [0.4, 1.3, 0.9, 1.1]
    s = sum(v * v for v in x)
    expected = 2 * min(_chi2_4_cdf(s), 1 - _chi2_4_cdf(s))
    assert chi2_variance_pvalue(x, 1.0) == pytest.approx(expected, rel=1e-10, abs=0)
    assert chi2_variance_pvalue(x, 1.0) != pytest.approx(chi2_variance_pvalue(x, 1.0, float(np.mean(x))))


# ======================================================================================================
# loglog_slope
# ======================================================================================================


def test_loglog_slope_unweighted_by_hand():
    """``log x = 0, 1, 2``, ``log y = 0, 1, 3``: slope 1.5, residuals 1/6, −1/3, 1/6, so the slope's SE is
    ``√(SSR/(n − 2)/Sxx) = √(1/12)`` (hand computation); lists accepted, floats returned."""
    x, y = np.exp([0.0, 1.0, 2.0]).tolist(), np.exp([0.0, 1.0, 3.0]).tolist()
    e = loglog_slope(x, y)
    assert e.value == pytest.approx(1.5, rel=1e-12, abs=0) and e.se == pytest.approx(
        math.sqrt(1 / 12), rel=1e-10, abs=0
    )
    assert type(e.value) is float and type(e.se) is float


def test_loglog_slope_weighted_by_hand():
    """Weights ``(y/y_se)² = 1, 1, 4`` on the same points: weighted mean of ``log x`` 1.5, ``Sxx = 3.5``, slope
    ``(−0.5·1 + 4·0.5·3)/3.5 = 11/7``, SE ``1/√3.5`` (from the weights, not the residuals)."""
    y = np.exp([0.0, 1.0, 3.0])
    y_se = (y / np.array([1.0, 1.0, 2.0])).tolist()
    e = loglog_slope(np.exp([0.0, 1.0, 2.0]).tolist(), y.tolist(), y_se)
    assert e.value == pytest.approx(11 / 7, rel=1e-12, abs=0) and e.se == pytest.approx(
        1 / math.sqrt(3.5), rel=1e-12, abs=0
    )
    assert type(e.value) is float and type(e.se) is float
    scaled = loglog_slope(np.exp([0.0, 1.0, 2.0]), y, 2 * np.asarray(y_se))  # weights /4: SE ×2, slope same
    assert scaled.value == pytest.approx(11 / 7, rel=1e-12, abs=0)
    assert scaled.se == pytest.approx(2 / math.sqrt(3.5), rel=1e-12, abs=0)


@pytest.mark.parametrize(("x", "n"), [([1.0], 1), ([], 0)])
def test_loglog_slope_needs_two_points(x, n):
    """Fewer than 2 points: refused, the count in the message, with or without ``y_se``."""
    with pytest.raises(ValueError, match=rf"^need at least 2 points for a slope, got {n}$"):
        loglog_slope(x, x)
    with pytest.raises(ValueError, match=rf"^need at least 2 points for a slope, got {n}$"):
        loglog_slope(x, x, x)


def test_loglog_slope_two_weighted_points():
    """Two points with weights 1, 1: the line through them (slope 2) and SE ``1/√Sxx = 1/√(ln²2/2)``."""
    e = loglog_slope([1.0, 2.0], [1.0, 4.0], [1.0, 4.0])
    assert e.value == pytest.approx(2.0, rel=1e-12, abs=0)
    assert e.se == pytest.approx(1 / math.sqrt(math.log(2) ** 2 / 2), rel=1e-12, abs=0)


# ======================================================================================================
# jackknife
# ======================================================================================================


def test_jackknife_calls_stat_with_all_means_then_each_leave_one_out_mean():
    """``stat`` is called first with the means over all B replicas, then once per replica b = 0..B−1 with
    the means over the others, the structure (nested dicts) kept and every leaf a Python float; a 2-D leaf is
    averaged over all its entries of the replicas kept; B is the length of the first leaf."""
    a = np.array([1.0, 2.0, 4.0, 8.0])
    m = np.array([[1.0, 3.0], [5.0, 7.0], [0.0, 2.0], [4.0, 6.0]])  # replica means 2, 6, 1, 5
    calls = []

    def stat(t):
        calls.append(t)
        return t["a"] + 10 * t["deep"]["m"]

    e = jackknife(stat, {"a": a, "deep": {"m": m}})
    assert calls[0] == {"a": 3.75, "deep": {"m": 3.5}}
    expected = [
        {"a": 14 / 3, "deep": {"m": 4.0}},
        {"a": 13 / 3, "deep": {"m": 8 / 3}},
        {"a": 11 / 3, "deep": {"m": 13 / 3}},
        {"a": 7 / 3, "deep": {"m": 3.0}},
    ]
    assert len(calls) == 5
    for got, want in zip(calls[1:], expected):
        assert got["a"] == pytest.approx(want["a"], rel=1e-14, abs=0)
        assert got["deep"]["m"] == pytest.approx(want["deep"]["m"], rel=1e-14, abs=0)
    assert all(type(c["a"]) is float and type(c["deep"]["m"]) is float for c in calls)
    loo = np.array([w["a"] + 10 * w["deep"]["m"] for w in expected])
    assert e.value == pytest.approx(3.75 + 35.0, rel=1e-14, abs=0)
    assert e.se == pytest.approx(math.sqrt(3 / 4 * ((loo - loo.mean()) ** 2).sum()), rel=1e-12, abs=0)
    nested_first = jackknife(lambda t: t["x"]["y"], {"x": {"y": np.arange(3.0)}, "z": np.ones(3)})
    assert nested_first.value == 1.0  # B = 3 counted through the nested dict


def test_jackknife_of_a_nonlinear_stat_by_hand():
    """``θ = mean²`` of 1, 2, 6 (B = 3): θ = 9, leave-one-out means 4, 3.5, 1.5 → θ_{−b} = 16, 12.25, 2.25, SE
    ``√(2/3·Σ(θ_{−b} − θ̄)²)`` with θ̄ = 10.1667 their mean (not θ): hand computation."""
    e = jackknife(lambda m: m * m, [1.0, 2.0, 6.0])
    loo = np.array([16.0, 12.25, 2.25])
    assert e.value == 9.0 and type(e.value) is float and type(e.se) is float
    assert e.se == pytest.approx(math.sqrt(2 / 3 * ((loo - loo.mean()) ** 2).sum()), rel=1e-12, abs=0)
    assert e.se != pytest.approx(
        math.sqrt(2 / 3 * ((loo - 9.0) ** 2).sum()), rel=1e-3, abs=0
    )  # control: θ̄ ≠ θ


@pytest.mark.parametrize(
    ("samples", "n"), [(np.ones(1), 1), ({"a": {"b": [2.0]}, "c": [1.0, 2.0]}, 1), ([], 0)]
)
def test_jackknife_needs_two_replicas(samples, n):
    """Fewer than 2 replicas (counted on the first leaf): refused with the count."""
    with pytest.raises(ValueError, match=rf"^the jackknife needs at least 2 replicas, got {n}$"):
        jackknife(lambda m: 0.0, samples)


# ======================================================================================================
# whiteness
# ======================================================================================================


def _z_pairs(z: float, pairs: int) -> float:
    """The Bonferroni z of ``pairs`` two-sided tests at the false-failure rate of ``z`` (norm.ppf, by hand)."""
    return float(-st.norm.ppf(math.erfc(z / math.sqrt(2)) / (2 * pairs)))


def test_whiteness_of_zeros_fails_only_the_variance_and_the_sum():
    """All-zero draws (n = 3, D = 4): the mean is exactly 0 (passes with SE 0), the variance ratio 0 ± 0 and
    the sum's variance 0 fail, the 6 pairs do not (the pair SE floor ``√(1e−300/n)`` keeps the tolerance
    positive); every detectable value by hand."""
    check = whiteness(np.zeros((3, 4)))
    assert check.failures == (
        "variance ratio 0 ± 0 is not 1 (z = -inf)",
        "the variance of the sum of the 4 entries is 0 ± 0 times the independent value (mean correlation ≈ -0.333)",
    )
    assert (check.n, check.D, check.passed) == (3, 4, False)
    assert check.detectable_variance == 0.0 and check.detectable_mean_correlation == 0.0
    assert check.detectable_pair_correlation == pytest.approx(
        _z_pairs(Z, 6) * 1e-150 / math.sqrt(3), rel=1e-9, abs=0
    )


def test_whiteness_of_perfectly_correlated_pairs_by_hand():
    """Two identical ±1 columns over 2 draws: mean 0, ξ² = 1 (pass), the sum's variance 2 ± 0 (mean
    correlation 1, fails), the one pair's correlation 1 below its tolerance ``5·√(1/2) = 3.5`` (too few
    draws); the same draws scaled by 2 with ``variance = 4`` give the same check."""
    a = np.array([[1.0, 1.0], [-1.0, -1.0]])
    msg = (
        "the variance of the sum of the 2 entries is 2 ± 0 times the independent value (mean correlation ≈ 1)"
    )
    for samples, variance in ((a, 1.0), (2 * a, 4.0), (torch.tensor(2 * a), 4.0)):
        check = whiteness(samples, variance)
        assert check.failures == (msg,)
        assert check.detectable_variance == 0.0 and check.detectable_mean_correlation == 0.0
        assert check.detectable_pair_correlation == pytest.approx(
            _z_pairs(Z, 1) / math.sqrt(2), rel=1e-12, abs=0
        )
    ones = whiteness(np.ones((2, 2)))
    assert ones.failures == ("mean 1 ± 0 is not 0 (z = inf)", msg)
    assert whiteness(-np.ones((2, 2))).failures[0] == "mean -1 ± 0 is not 0 (z = -inf)"


def test_whiteness_names_the_largest_correlation_by_its_absolute_value_and_entries():
    """Columns ``y, x, −x`` with ``x ⟂ y`` ±1 over 100 draws: the correlations are 0, 0, −1; the failing
    pair is (1, 2) at −1 (the largest |C|, not the largest C), tolerance ``z_B·0.1`` over 3 pairs; the sum is
    ``y`` so its variance is 1/3 of the independent value."""
    x = np.tile([1.0, -1.0], 50)
    y = np.tile([1.0, 1.0, -1.0, -1.0], 25)
    check = whiteness(np.stack([y, x, -x], 1))
    tol = _z_pairs(Z, 3) * 0.1
    s2 = y * y / 3  # 1/3 in every draw (its SE a rounding error)
    s2_se = s2.std(ddof=1) / 10
    assert s2_se < 1e-15
    assert check.failures == (
        f"the variance of the sum of the 3 entries is 0.3333 ± {s2_se:.2g} times the independent value "
        "(mean correlation ≈ -0.333)",
        f"entries 1 and 2 have correlation -1 (tolerance {tol:.2g} over 3 pairs)",
    )
    assert f"{tol:.2g}" == "0.52"
    assert check.detectable_pair_correlation == pytest.approx(tol, rel=1e-12, abs=0)
    first = whiteness(np.stack([x, -x, y], 1)).failures[-1]
    assert first == f"entries 0 and 1 have correlation -1 (tolerance {tol:.2g} over 3 pairs)"
    positive = whiteness(np.stack([x, y, x], 1)).failures[-1]  # C = (0, 1, 0): entries 0 and 2
    assert positive == f"entries 0 and 2 have correlation 1 (tolerance {tol:.2g} over 3 pairs)"


def test_whiteness_pair_tolerance_uses_the_measured_variance_squared():
    """Orthogonal ±2 patterns tested as variance 1: ``ξ²`` = 4, so the pair SE is ``4/√n`` (the squared mean
    of ``ξ²`` over √n); the variance ratio 4 ± 0 fails and the sum ``(ξ_0 + ξ_1)²/2`` takes the values 8, 0,
    0, 8 (mean 4, SE ``√(1600/99)/10``), no pair and no mean fails. Tested as variance 4 the draws pass."""
    x = np.tile([1.0, -1.0], 50)
    y = np.tile([1.0, 1.0, -1.0, -1.0], 25)
    check = whiteness(2 * np.stack([x, y], 1))
    s2_se = math.sqrt(1600 / 99) / 10
    assert check.failures == (
        "variance ratio 4 ± 0 is not 1 (z = inf)",
        f"the variance of the sum of the 2 entries is 4 ± {s2_se:.2g} times the independent value "
        "(mean correlation ≈ 3)",
    )
    assert check.detectable_pair_correlation == pytest.approx(_z_pairs(Z, 1) * 4 / 10, rel=1e-12, abs=0)
    assert check.detectable_mean_correlation == pytest.approx(Z * s2_se, rel=1e-12, abs=0)
    assert check.detectable_variance == 0.0
    halves = whiteness(2 * np.stack([x, y], 1), variance=4.0)
    assert halves.passed and halves.failures == ()
    assert halves.detectable_pair_correlation == pytest.approx(_z_pairs(Z, 1) / 10, rel=1e-12, abs=0)
    assert halves.detectable_mean_correlation == pytest.approx(Z * s2_se / 4, rel=1e-12, abs=0)


def test_whiteness_messages_and_detectable_values_of_random_draws():
    """Seeded Gaussian draws (n = 500, D = 3) scaled by 1.3 and shifted by 0.7 so that all four checks
    fail: the messages carry the numbers of numpy's computation (the largest |C_kl| found by a loop over the
    pairs) in the stated formats, and the detectable values are ``z·SE`` of ``ξ²``, ``z·SE(S²)/(D − 1)`` and
    ``z_B·prod_se`` at the ``z`` passed (here 3). The same draws unshifted pass (the negative control)."""
    u = np.random.default_rng(0).standard_normal((500, 3))
    a = 1.3 * u + 0.7
    check = whiteness(a, variance=1.0, z=3.0)
    flat, sq = a.ravel(), (a * a).ravel()
    m, m_se = flat.mean(), flat.std(ddof=1) / math.sqrt(flat.size)
    v, v_se = sq.mean(), sq.std(ddof=1) / math.sqrt(sq.size)
    s2 = a.sum(1) ** 2 / 3
    s2m, s2_se = s2.mean(), s2.std(ddof=1) / math.sqrt(500)
    prod_se = float(np.mean((a * a).mean(0))) / math.sqrt(500)
    tol = _z_pairs(3.0, 3) * prod_se
    pairs = {(k, l): float(a[:, k] @ a[:, l] / 500) for k in range(3) for l in range(k + 1, 3)}
    (k, l), c = max(pairs.items(), key=lambda kv: abs(kv[1]))
    assert check.failures == (
        f"mean {m:.3g} ± {m_se:.2g} is not 0 (z = {m / m_se:.1f})",
        f"variance ratio {v:.4g} ± {v_se:.2g} is not 1 (z = {(v - 1) / v_se:.1f})",
        f"the variance of the sum of the 3 entries is {s2m:.4g} ± {s2_se:.2g} times the independent "
        f"value (mean correlation ≈ {(s2m - 1) / 2:.3g})",
        f"entries {k} and {l} have correlation {c:.3g} (tolerance {tol:.2g} over 3 pairs)",
    )
    assert check.detectable_variance == pytest.approx(3.0 * v_se, rel=1e-12, abs=0)
    assert check.detectable_mean_correlation == pytest.approx(3.0 * s2_se / 2, rel=1e-12, abs=0)
    assert check.detectable_pair_correlation == pytest.approx(tol, rel=1e-12, abs=0)
    clean = whiteness(u)
    assert clean.passed and clean.failures == ()
    assert clean.detectable_variance == pytest.approx(
        Z * (u * u).ravel().std(ddof=1) / math.sqrt(1500), rel=1e-12, abs=0
    )


@pytest.mark.parametrize("shape", [(1, 4), (4, 1), (8,), (2, 2, 2), (1, 1)])
def test_whiteness_refuses_other_shapes(shape):
    """Not 2-D, or fewer than 2 draws or entries: refused, the shape in the message; (2, 2) is accepted."""
    with pytest.raises(
        ValueError, match=rf"^samples must have shape \(n, D\) with n, D ≥ 2, got {re.escape(str(shape))}$"
    ):
        whiteness(np.zeros(shape))
    assert whiteness(np.array([[1.0, -1.0], [-1.0, 1.0]])).n == 2


def test_whiteness_check_passed_is_no_failures_and_the_record_is_frozen():
    """``passed`` is true exactly when ``failures`` is empty; the record is frozen."""
    ok = WhitenessCheck((), 2, 2, 0.0, 0.0, 0.0)
    bad = WhitenessCheck(("x",), 2, 2, 0.0, 0.0, 0.0)
    assert ok.passed is True and bad.passed is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        ok.n = 3  # type: ignore[misc]


# ======================================================================================================
# t_interval, paired_difference, PairedDifference
# ======================================================================================================

T2_975 = 4.302652729749462  # t_{2, 0.975} (tables: 4.303)
T2_95 = 2.9199855803537242  # t_{2, 0.95} (tables: 2.920)


def test_t_interval_by_hand_with_the_default_and_another_level():
    """1, 2, 3: mean 2, s = 1, SE 1/√3; the default level 0.95 uses t_{2,0.975}, level 0.9 t_{2,0.95}; the
    values are flattened, n an int."""
    se = 1 / math.sqrt(3)
    r = t_interval([1.0, 2.0, 3.0])
    assert r == Interval(2.0, pytest.approx(se, rel=1e-14, abs=0), pytest.approx(2 - T2_975 * se, rel=1e-12, abs=0),
                         pytest.approx(2 + T2_975 * se, rel=1e-12, abs=0), 3)  # fmt: skip
    assert type(r.n) is int and type(r.se) is float and type(r.lo) is float
    assert r.half_width == pytest.approx(T2_975 * se, rel=1e-12, abs=0)  # the table's ±
    assert r.text() == "2.000 ± 2.484" and r.text(1) == "2.0 ± 2.5"  # by hand: 4.3027 · 0.57735 = 2.4841
    assert t_interval([1.25]).text(2) == "1.25"  # one value: no ±, no "nan"
    assert stats.interval_text([1.0, 2.0, 3.0]) == "2.000 ± 2.484" and stats.interval_text(np.array([1.25]), 2) == "1.25"
    assert stats.interval_text([]) == "—" and stats.interval_text(np.array([]), empty="n/a") == "n/a"  # no values: no error
    r90 = t_interval(np.array([[1.0, 2.0, 3.0]]), 0.9)
    assert r90.n == 3 and (r90.lo, r90.hi) == (
        pytest.approx(2 - T2_95 * se, rel=1e-12, abs=0),
        pytest.approx(2 + T2_95 * se, rel=1e-12, abs=0),
    )


def test_t_interval_of_one_value_and_bad_arguments():
    """One value: its mean, NaN se and bounds, n = 1; no values refused before the level is looked at; a
    level at or outside 0 and 1 refused even for one value; levels just inside accepted."""
    one = t_interval([2.5])
    assert one.mean == 2.5 and one.n == 1 and all(math.isnan(v) for v in (one.se, one.lo, one.hi))
    with pytest.raises(ValueError, match="^t_interval needs at least one value$"):
        t_interval([], 2.0)
    for level in (0.0, 1.0, -0.5, 1.5):
        with pytest.raises(ValueError, match=rf"^level must be in \(0, 1\), got {level}$"):
            t_interval([1.0], level)
    tiny = t_interval([1.0, 2.0, 3.0], 1e-9)
    assert tiny.hi - tiny.lo == pytest.approx(0.0, abs=1e-8) and tiny.hi > tiny.lo
    wide = t_interval([1.0, 2.0, 3.0], 1 - 1e-9)
    assert wide.hi - wide.lo > 1e3


def test_paired_difference_by_hand():
    """Differences ``a − b = 1, 2, 3`` (mean 2, s = 1), by hand: the default 95 % interval
    ``2 ± t_{2,0.975}/√3``, ``sd = 1``, the p-value of t = 2√3 on 2 df (scipy's t law), n = 3."""
    a, b = [3.0, 5.0, 3.5], [2.0, 3.0, 0.5]
    r = paired_difference(a, b)
    se = 1 / math.sqrt(3)
    assert (
        r.mean == pytest.approx(2.0, rel=1e-14, abs=0)
        and r.n == 3
        and r.sd == pytest.approx(1.0, rel=1e-14, abs=0)
    )
    assert (r.lo, r.hi) == (
        pytest.approx(2 - T2_975 * se, rel=1e-12, abs=0),
        pytest.approx(2 + T2_975 * se, rel=1e-12, abs=0),
    )
    assert r.p_value == pytest.approx(2 * st.t.sf(2 * math.sqrt(3), 2), rel=1e-12, abs=0)
    assert r.half_width == pytest.approx(T2_975 * se, rel=1e-12, abs=0)
    r90 = paired_difference(np.array([a]), np.array(b), level=0.9)  # flattened; the level passed on
    assert r90.lo == pytest.approx(2 - T2_95 * se, rel=1e-12, abs=0) and r90.p_value == r.p_value


def test_paired_difference_at_its_edges():
    """Two pairs: a test and an sd (n = 2 is enough); equal differences: no p-value, ``sd = 0`` and a
    zero-width interval; one pair: NaN everywhere but the mean; unequal lengths refused with both sizes."""
    two = paired_difference([1.0, 2.0], [0.0, 0.5])  # d = 1, 1.5: t = 1.25/0.25 = 5 on 1 df
    assert two.p_value == pytest.approx(2 * st.t.sf(5.0, 1), rel=1e-12, abs=0)
    assert two.sd == pytest.approx(math.sqrt(0.125), rel=1e-14, abs=0) and two.n == 2
    same = paired_difference([1.0, 2.0, 3.0], [0.0, 1.0, 2.0])
    assert math.isnan(same.p_value) and same.sd == 0.0 and same.lo == same.hi == same.mean == 1.0
    one = paired_difference([1.0], [0.25])
    assert one.mean == 0.75 and one.n == 1
    assert all(math.isnan(v) for v in (one.lo, one.hi, one.p_value, one.sd))
    with pytest.raises(ValueError, match="^paired values must have the same length, got 2 and 3$"):
        paired_difference([1.0, 2.0], [1.0, 2.0, 3.0])
    assert paired_difference([[1.0, 2.0]], [3.0, 5.0]).mean == -2.5  # only the sizes need to agree


def test_paired_difference_record_defaults_and_methods():
    """``sd`` defaults to NaN; ``half_width = (hi − lo)/2``; ``detectable`` and ``pairs_needed`` pass every
    argument on (defaults 0.8, 0.05, "t") and are NaN for n < 2 or a non-finite sd; n = 2 is enough."""
    r = PairedDifference(0.1, -0.3, 0.7, 5, 0.2)
    assert math.isnan(r.sd) and r.half_width == pytest.approx(0.5, rel=1e-15, abs=0)
    assert math.isnan(r.detectable()) and math.isnan(r.pairs_needed(0.1))
    d = PairedDifference(0.1, -0.3, 0.7, 5, 0.2, 0.4)
    assert d.detectable() == detectable_difference(0.4, 5, 0.8, 0.05, "t")
    assert d.detectable(0.9, 0.01, "normal") == pytest.approx(
        (st.norm.isf(0.005) + st.norm.isf(0.1)) * 0.4 / math.sqrt(5), rel=1e-12, abs=0
    )
    assert d.detectable(alpha=0.1) == detectable_difference(0.4, 5, 0.8, 0.1)
    assert d.pairs_needed(0.2) == pairs_needed(0.2, 0.4, 0.8, 0.05, "t") == 34
    assert d.pairs_needed(0.2, 0.9, 0.01, "normal") == pairs_needed(0.2, 0.4, 0.9, 0.01, "normal")
    assert d.pairs_needed(0.2, alpha=0.2) == pairs_needed(0.2, 0.4, alpha=0.2)
    two = PairedDifference(0.0, 0.0, 0.0, 2, 0.5, 1.0)
    assert math.isfinite(two.detectable()) and two.pairs_needed(1.0) == pairs_needed(1.0, 1.0)
    for bad in (
        PairedDifference(0.0, 0.0, 0.0, 1, 0.5, 1.0),
        PairedDifference(0.0, 0.0, 0.0, 5, 0.5, math.inf),
    ):
        assert math.isnan(bad.detectable()) and math.isnan(bad.pairs_needed(0.1))


# ======================================================================================================
# log_interval
# ======================================================================================================


def test_log_interval_by_hand():
    """e, e², e³: logs 1, 2, 3 (mean 2, SE 1/√3): centre e², bounds ``exp(2 ∓ t_{2,0.975}/√3)``, factor
    ``exp(t/√3)``, log SE 1/√3, n 3; level 0.9 uses t_{2,0.95}."""
    r = log_interval(np.exp([[1.0, 2.0, 3.0]]))
    h = T2_975 / math.sqrt(3)
    assert r == LogInterval(
        pytest.approx(math.e**2, rel=1e-12, abs=0),
        pytest.approx(math.exp(2 - h), rel=1e-12, abs=0),
        pytest.approx(math.exp(2 + h), rel=1e-12, abs=0),
        pytest.approx(math.exp(h), rel=1e-12, abs=0),
        3,
        pytest.approx(1 / math.sqrt(3), rel=1e-12, abs=0),
    )
    r90 = log_interval(np.exp([1.0, 2.0, 3.0]).tolist(), 0.9)
    assert r90.factor == pytest.approx(math.exp(T2_95 / math.sqrt(3)), rel=1e-12, abs=0)
    one = log_interval([4.0])
    assert one.center == pytest.approx(4.0, rel=1e-15, abs=0) and one.n == 1
    assert all(math.isnan(v) for v in (one.lo, one.hi, one.factor, one.log_se))


def test_log_interval_refusals():
    """Values ≤ 0, infinite or NaN refused, the first three shown; no values refused by ``t_interval``; a
    bad level refused."""
    with pytest.raises(
        ValueError, match=r"^log_interval needs positive finite values, got \[ 0\. -2\. inf\]$"
    ):
        log_interval([1.0, 0.0, -2.0, math.inf, -1.0])
    with pytest.raises(ValueError, match=r"^log_interval needs positive finite values, got \[nan\]$"):
        log_interval([1.0, math.nan])
    with pytest.raises(ValueError, match="^t_interval needs at least one value$"):
        log_interval([])
    with pytest.raises(ValueError, match=r"^level must be in \(0, 1\), got 1\.0$"):
        log_interval([1.0, 2.0], 1.0)
    assert log_interval([1e-300, 2e-300]).n == 2  # tiny positive values are fine


# ======================================================================================================
# power: _check_power_args, paired_t_power, detectable_difference, pairs_needed
# ======================================================================================================


def _power_by_integration(lam: float, n: int, alpha: float) -> float:
    """Power of the two-sided paired t-test at noncentrality ``lam`` without the noncentral t: with ``V`` the
    χ²_{n−1} law of ``(n−1)s²/σ²``, ``P(|Z + λ| > c·√(V/(n−1)))`` integrated over ``V`` (scipy.integrate)."""
    df = n - 1
    c = st.t.ppf(1 - alpha / 2, df)

    def f(v):
        r = c * math.sqrt(v / df)
        return (st.norm.sf(r - lam) + st.norm.cdf(-r - lam)) * st.chi2.pdf(v, df)

    return float(integrate.quad(f, 0, np.inf, epsabs=1e-13, epsrel=1e-11, limit=200)[0])


def _normal_power(lam: float, alpha: float) -> float:
    """``Φ(λ − z) + Φ(−λ − z)``, ``z = z_{1−α/2}``, by ``erfc``."""
    z = st.norm.ppf(1 - alpha / 2)
    return 0.5 * math.erfc((z - lam) / math.sqrt(2)) + 0.5 * math.erfc((z + lam) / math.sqrt(2))


@pytest.mark.parametrize(
    ("delta", "sd", "n", "alpha"),
    [
        (0.5, 1.0, 5, 0.05),
        (-1.0, 0.5, 3, 0.05),
        (0.1, 0.2, 12, 0.1),
        (2.0, 1.0, 2, 0.01),
        (0.3, 0.4, 20, 0.05),
    ],
)
def test_paired_t_power_against_the_integral_and_the_normal_formula(delta, sd, n, alpha):
    """The t power equals the integral over the sample variance (independent of scipy's nct); the normal
    method ``Φ(λ − z) + Φ(−λ − z)`` by hand; |δ| counts; n may be an integral float."""
    lam = abs(delta) * math.sqrt(n) / sd
    assert paired_t_power(delta, sd, n, alpha) == pytest.approx(
        _power_by_integration(lam, n, alpha), abs=1e-9
    )
    assert paired_t_power(delta, sd, float(n), alpha) == paired_t_power(delta, sd, n, alpha)
    assert paired_t_power(delta, sd, n, alpha, "normal") == pytest.approx(
        _normal_power(lam, alpha), rel=1e-12, abs=0
    )
    assert paired_t_power(delta, sd, n, alpha, method="t") < paired_t_power(delta, sd, n, alpha, "normal")


def test_paired_t_power_defaults_and_zero_difference():
    """Defaults ``alpha = 0.05``, method "t"; at δ = 0 the power is α (both methods)."""
    assert paired_t_power(0.5, 1.0, 5) == paired_t_power(0.5, 1.0, 5, 0.05, "t")
    assert paired_t_power(0.5, 1.0, 5) == pytest.approx(
        _power_by_integration(0.5 * math.sqrt(5), 5, 0.05), abs=1e-9
    )
    for n, alpha in ((2, 0.05), (4, 0.2)):
        assert paired_t_power(0.0, 1.0, n, alpha) == pytest.approx(alpha, rel=1e-10, abs=0)
        assert paired_t_power(0.0, 1.0, n, alpha, "normal") == pytest.approx(alpha, rel=1e-10, abs=0)
    assert type(paired_t_power(0.5, 1.0, 5)) is float


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: paired_t_power(0.1, 1.0, 3, method="z"),
            r"method must be one of \['t', 'normal'\], got 'z'",
        ),
        (lambda: paired_t_power(0.1, 1.0, 3, alpha=0.0), r"alpha must be in \(0, 1\), got 0\.0"),
        (lambda: paired_t_power(0.1, 1.0, 3, alpha=1.0), r"alpha must be in \(0, 1\), got 1\.0"),
        (lambda: paired_t_power(0.1, math.nan, 3), "sd must be finite and ≥ 0, got nan"),
        (lambda: paired_t_power(0.1, math.inf, 3), "sd must be finite and ≥ 0, got inf"),
        (lambda: paired_t_power(0.1, -1.0, 3), "sd must be finite and ≥ 0, got -1\\.0"),
        (
            lambda: paired_t_power(0.1, 0.0, 3),
            r"sd must be > 0 for a power \(the t statistic is undefined without spread\)",
        ),
        (lambda: paired_t_power(0.1, 1.0, 1), "a paired t-test needs n ≥ 2 pairs, got 1"),
        (lambda: paired_t_power(0.1, 1.0, 2.5), "a paired t-test needs n ≥ 2 pairs, got 2\\.5"),
        (
            lambda: detectable_difference(1.0, 3, power=0.05),
            r"power must be in \(alpha, 1\) = \(0\.05, 1\), got 0\.05",
        ),
        (
            lambda: detectable_difference(1.0, 3, power=1.0),
            r"power must be in \(alpha, 1\) = \(0\.05, 1\), got 1\.0",
        ),
        (
            lambda: detectable_difference(1.0, 3, 0.5, 0.6),
            r"power must be in \(alpha, 1\) = \(0\.6, 1\), got 0\.5",
        ),
        (lambda: detectable_difference(-0.1, 3), "sd must be finite and ≥ 0, got -0\\.1"),
        (lambda: detectable_difference(0.0, 1), "a paired t-test needs n ≥ 2 pairs, got 1"),
        (
            lambda: detectable_difference(1.0, 3, method="Normal"),
            r"method must be one of \['t', 'normal'\], got 'Normal'",
        ),
        (lambda: pairs_needed(0.0, 1.0), "delta must be finite and ≠ 0, got 0\\.0"),
        (lambda: pairs_needed(math.inf, 1.0), "delta must be finite and ≠ 0, got inf"),
        (
            lambda: pairs_needed(0.1, 1.0, power=0.01),
            r"power must be in \(alpha, 1\) = \(0\.05, 1\), got 0\.01",
        ),
        (lambda: pairs_needed(0.1, -1.0), "sd must be finite and ≥ 0, got -1\\.0"),
        (lambda: pairs_needed(0.0, 1.0, method="x"), r"method must be one of \['t', 'normal'\], got 'x'"),
        # the order of the checks: the method first, then alpha, power, sd, n
        (lambda: paired_t_power(0.1, -1.0, 1, alpha=2.0, method="x"), "method must be one of"),
        (lambda: paired_t_power(0.1, -1.0, 1, alpha=2.0), r"alpha must be in \(0, 1\), got 2\.0"),
        (lambda: detectable_difference(-1.0, 1, power=0.01), r"power must be in \(alpha, 1\)"),
        (lambda: detectable_difference(-1.0, 1), "sd must be finite"),
        (lambda: pairs_needed(0.0, -1.0), "sd must be finite"),
    ],
)
def test_power_arguments_are_refused_with_their_message(call, message):
    """Each bad argument refused with its own message (anchored), in the order the checks are made."""
    with pytest.raises(ValueError, match=f"^{message}"):
        call()


def test_power_arguments_at_the_edges_are_accepted():
    """``n = 2``, an integral float n, ``power`` just above α, α just inside (0, 1) are all accepted."""
    assert 0 < paired_t_power(1.0, 1.0, 2) < 1 and paired_t_power(1.0, 1.0, 2.0) == paired_t_power(
        1.0, 1.0, 2
    )
    assert detectable_difference(1.0, 3, power=0.0501) > 0
    assert math.isfinite(detectable_difference(1.0, 3, 0.8, 1e-6))
    assert detectable_difference(1.0, 3.0) == detectable_difference(1.0, 3)


@pytest.mark.parametrize(
    ("n", "power", "alpha"), [(2, 0.8, 0.05), (3, 0.8, 0.05), (5, 0.9, 0.01), (30, 0.6, 0.2), (10, 0.1, 0.05)]
)
def test_detectable_difference_solves_the_power_equation(n, power, alpha):
    """``δ`` with power exactly ``power`` by the integral (independent of the code's nct), scaling with sd,
    and the normal method's ``(z_{1−α/2} + z_power)·sd/√n`` by hand; power 0.1 puts λ* (0.73) below 1."""
    sd = 0.7
    delta = detectable_difference(sd, n, power, alpha)
    assert _power_by_integration(delta * math.sqrt(n) / sd, n, alpha) == pytest.approx(power, abs=1e-8)
    normal = detectable_difference(sd, n, power, alpha, "normal")
    z = st.norm.ppf(1 - alpha / 2) + st.norm.ppf(power)
    assert normal == pytest.approx(z * sd / math.sqrt(n), rel=1e-12, abs=0)
    assert delta > normal  # the t-test with its estimated variance needs more


def test_detectable_difference_defaults_and_zero_sd():
    """Defaults power 0.8, α 0.05, method "t": at 3 pairs λ* = 5.65 (the docstring's number, by the
    integral); ``sd = 0`` gives exactly 0.0."""
    d = detectable_difference(1.0, 3)
    assert d == detectable_difference(1.0, 3, 0.8, 0.05, "t")
    assert d * math.sqrt(3) == pytest.approx(5.65, abs=0.01)
    assert _power_by_integration(d * math.sqrt(3), 3, 0.05) == pytest.approx(0.8, abs=1e-8)
    assert detectable_difference(0.0, 3) == 0.0 and detectable_difference(0.0, 3, method="normal") == 0.0
    assert type(d) is float


def _pairs_by_search(delta: float, sd: float, power: float, alpha: float, method: str) -> int:
    """The smallest n ≥ 2 whose power (the integral, or the normal formula) reaches ``power``: a plain
    upward search, independent of the code's guess and its two loops."""
    n = 2
    while True:
        lam = abs(delta) * math.sqrt(n) / sd
        p = _normal_power(lam, alpha) if method == "normal" else _power_by_integration(lam, n, alpha)
        if p >= power:
            return n
        n += 1


@pytest.mark.parametrize(
    ("delta", "sd", "power", "alpha", "method"),
    [
        (0.8, 1.0, 0.8, 0.05, "t"),  # 15 (G*Power)
        (-0.8, 1.0, 0.8, 0.05, "normal"),  # 13
        (1.5, 1.0, 0.9, 0.01, "t"),
        (0.3, 1.0, 0.51, 0.5, "normal"),  # the guess (6) above the answer (2): the downward loop to n = 2
        (0.1, 1.0, 0.51, 0.5, "normal"),  # the guess (49) far above the answer
        (0.1, 1.0, 0.51, 0.5, "t"),
        (10.0, 1.0, 0.8, 0.05, "t"),  # the guess below 2; n = 2 fails, 3 passes
        (100.0, 1.0, 0.8, 0.05, "t"),  # 2
    ],
)
def test_pairs_needed_is_the_smallest_sufficient_number(delta, sd, power, alpha, method):
    """The answer equals a plain upward search over n with an independent power; an int."""
    n = pairs_needed(delta, sd, power, alpha, method)
    assert n == _pairs_by_search(delta, sd, power, alpha, method) and type(n) is int


def test_pairs_needed_defaults_zero_sd_and_max_pairs():
    """Defaults power 0.8, α 0.05, method "t" (34 pairs at δ/sd = 0.5, G*Power); ``sd = 0`` needs 2; an
    answer above ``max_pairs`` refused — by the guess with its size, or by the search without it;
    ``max_pairs`` equal to the answer accepted."""
    assert pairs_needed(0.5, 1.0) == pairs_needed(0.5, 1.0, 0.8, 0.05, "t", 10**7) == 34
    assert pairs_needed(0.5, 0.0) == 2 and pairs_needed(-1e-9, 0.0) == 2
    guess = ((st.norm.ppf(0.975) + st.norm.ppf(0.8)) / 1e-3) ** 2  # 7.85e6
    with pytest.raises(
        ValueError,
        match=rf"^more than max_pairs = 1000 pairs are needed \(about {re.escape(f'{guess:.3g}')}\)$",
    ):
        pairs_needed(1e-3, 1.0, max_pairs=1000)
    assert f"{guess:.3g}" == "7.85e+06"
    with pytest.raises(
        ValueError, match=r"^more than max_pairs = 10000000 pairs are needed \(about 3\.14e\+07\)$"
    ):
        pairs_needed(5e-4, 1.0)  # the default max_pairs
    with pytest.raises(ValueError, match="^more than max_pairs = 2 pairs are needed$"):
        pairs_needed(10.0, 1.0, max_pairs=2)  # the guess 0.08 passes, n = 3 is needed
    assert pairs_needed(10.0, 1.0, max_pairs=3) == 3
    with pytest.raises(ValueError, match="^more than max_pairs = 33 pairs are needed$"):
        pairs_needed(0.5, 1.0, max_pairs=33)  # guess 31.4 ≤ 33, the t answer 34
    assert pairs_needed(0.5, 1.0, max_pairs=34) == 34
    assert pairs_needed(0.5, 1.0, method="normal", max_pairs=32) == 32


# ======================================================================================================
# holm, HolmFamily
# ======================================================================================================


def test_holm_by_hand_with_nan_bounds_and_shape():
    """Sorted 0.005, 0.01, 0.03, 0.04 → ×4, ×3, ×2, ×1 with the running maximum, capped at 1, back in the
    input order; NaNs stay NaN outside the family; 0 and 1 accepted; 2-D input flattened; float64 out."""
    out = holm([[0.01, 0.04], [0.03, 0.005]])
    assert out.shape == (4,) and out.dtype == np.float64
    assert out.tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02], rel=1e-12, abs=0)
    assert holm([0.0, 1.0]).tolist() == [0.0, 1.0]
    assert holm([0.3, 0.2, 0.9]).tolist() == pytest.approx([0.6, 0.6, 0.9], rel=1e-12, abs=0)
    assert holm([0.4, 0.1]).tolist() == pytest.approx([0.4, 0.2], rel=1e-12, abs=0)
    assert holm([0.6, 0.45]).tolist() == pytest.approx([0.9, 0.9], rel=1e-12, abs=0)  # 1·0.6 raised to 2·0.45
    assert holm([0.6, 0.55]).tolist() == [1.0, 1.0]  # 2·0.55 = 1.1 capped
    nan = holm([math.nan, 0.2, math.nan, 0.3])
    assert np.isnan(nan[[0, 2]]).all() and nan[[1, 3]].tolist() == pytest.approx([0.4, 0.4], rel=1e-12, abs=0)
    assert np.isnan(holm([math.nan, math.nan])).all() and holm([]).shape == (0,)
    assert holm([0.7]).tolist() == [0.7]


def test_holm_refuses_p_values_outside_the_unit_interval():
    """Values below 0 or above 1 refused, the first three of them in the message."""
    with pytest.raises(ValueError, match=r"^p-values must be in \[0, 1\], got \[1\.2\]$"):
        holm([0.1, 1.2])
    with pytest.raises(ValueError, match=r"^p-values must be in \[0, 1\], got \[-0\.1  2\.   3\. \]$"):
        holm([-0.1, 0.5, 2.0, 3.0, 4.0])


def test_holm_family_placeholders_and_fill():
    """Cells are ``\\0i\\0`` in the order made; ``len`` counts them; ``fill`` replaces every occurrence of
    each with ``render(d, p̃, digits)``, ``p̃`` a Python float Holm-adjusted over the family (by hand 0.04,
    0.04, NaN for a comparison without a p-value); a family with no cells leaves the text as it is."""
    d = [PairedDifference(0.5, 0.1, 0.9, 4, p) for p in (0.02, 0.03, math.nan)]
    family = HolmFamily()
    assert len(family) == 0 and family.fill("text", lambda *a: "x") == "text"
    marks = [family.cell(x, k) for x, k in zip(d, (1, 2, 3))]
    assert marks == ["\x000\x00", "\x001\x00", "\x002\x00"] and len(family) == 3
    seen = []

    def render(x, q, digits):
        seen.append((x, q, digits))
        return f"[{digits}:{q:.3f}]"

    out = family.fill(f"{marks[1]} {marks[0]} {marks[2]} {marks[0]}", render)
    assert out == "[2:0.040] [1:0.040] [3:nan] [1:0.040]"
    assert [s[0] for s in seen] == d and [s[2] for s in seen] == [1, 2, 3]
    assert all(type(s[1]) is float for s in seen)
    assert seen[0][1] == pytest.approx(0.04) and seen[1][1] == pytest.approx(0.04) and math.isnan(seen[2][1])


def test_holm_family_refuses_a_missing_cell():
    """A cell made but not in the text is refused with its index and the family size."""
    family = HolmFamily()
    first = family.cell(PairedDifference(0.0, 0.0, 0.0, 3, 0.1), 2)
    family.cell(PairedDifference(0.0, 0.0, 0.0, 3, 0.2), 2)
    with pytest.raises(ValueError, match=r"^cell 1 of the Holm family \(2 cells\) is not in the table$"):
        family.fill(f"| {first} |", lambda *a: "")
    with pytest.raises(ValueError, match=r"^cell 0 of the Holm family \(2 cells\) is not in the table$"):
        family.fill("no cells", lambda *a: "")


def test_stats_exports():
    """The public names of the module."""
    assert set(stats.__all__) == {
        "Z", "Estimate", "mean_se", "within", "chi2_variance_pvalue", "jackknife", "loglog_slope",
        "false_failure_rate", "WhitenessCheck", "whiteness", "Interval", "interval_text", "t_interval", "PairedDifference",
        "paired_difference", "LogInterval", "log_interval", "paired_t_power", "detectable_difference",
        "pairs_needed", "holm", "HolmFamily",
    }  # fmt: skip
    assert sinks.__all__ == ["TensorBoard", "draw_figures", "summary_table"]


# ======================================================================================================
# meanfield.runs.sinks
# ======================================================================================================


class _Writer:
    """A SummaryWriter that records what it is given."""

    def __init__(self, logdir, purge_step=None):
        self.logdir, self.purge_step = logdir, purge_step
        self.scalars, self.flushes, self.closes = [], 0, 0

    def add_scalar(self, tag, value, global_step=None):
        self.scalars.append((tag, value, global_step))

    def flush(self):
        self.flushes += 1

    def close(self):
        self.closes += 1


@pytest.fixture
def fake_writer(monkeypatch):
    """``torch.utils.tensorboard`` replaced by a module whose ``SummaryWriter`` is :class:`_Writer`."""
    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = _Writer
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", module)


@pytest.mark.parametrize(("start", "purge"), [(0, None), (1, 2), (10, 11)])
def test_tensorboard_writer_folder_and_purge_step(tmp_path, fake_writer, start, purge):
    """Enabled: a writer on ``str(folder)`` that purges from ``start + 1`` on a resumed run (none at 0)."""
    board = sinks.TensorBoard(tmp_path / "tb", True, start)
    assert isinstance(board.writer, _Writer)
    assert board.writer.logdir == str(tmp_path / "tb") and type(board.writer.logdir) is str
    assert board.writer.purge_step == purge


def test_tensorboard_disabled_or_missing_writes_nothing(tmp_path, fake_writer, monkeypatch):
    """Disabled, or the package not importable: no writer; write and close are then no-ops."""
    off = sinks.TensorBoard(tmp_path, False, 5)
    assert off.writer is None
    off.write({"step": 1, "x": 1.0})
    off.close()
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails with ImportError
    missing = sinks.TensorBoard(tmp_path, True, 0)
    assert missing.writer is None
    missing.write({"step": 1, "x": 1.0})
    missing.close()
    assert list(tmp_path.iterdir()) == []


def test_tensorboard_write_flattens_numbers_by_path(tmp_path, fake_writer):
    """Each number of a record becomes a float scalar tagged by its path at the record's step (the step not
    itself), mappings of any kind and lists descended into, booleans, strings, None, tuples and numpy
    integers left out; one flush per record; close closes once. Written by hand."""
    board = sinks.TensorBoard(tmp_path, True, 0)
    record = {
        "step": 3,
        1: 2,
        "f": np.float64(0.25),
        "i": np.int64(4),
        "b": False,
        "t": (1.0, 2.0),
        "m": types.MappingProxyType({"x": 1.5, "y": {"z": [7, True, {"w": -1.0}]}}),
        "l": [[0.5], "s", None],
    }
    board.write(record)
    assert board.writer.scalars == [
        ("1", 2.0, 3),
        ("f", 0.25, 3),
        ("m/x", 1.5, 3),
        ("m/y/z/0", 7.0, 3),
        ("m/y/z/2/w", -1.0, 3),
        ("l/0/0", 0.5, 3),
    ]
    assert all(type(v) is float for _, v, _ in board.writer.scalars)
    assert board.writer.flushes == 1
    board.write({"step": 4})
    assert board.writer.flushes == 2 and len(board.writer.scalars) == 6
    board.write({"step": 5, "a": {"": 1.0}})
    assert board.writer.scalars[-1] == ("a/", 1.0, 5)
    board.close()
    assert board.writer.closes == 1


def test_tensorboard_writes_real_event_files(tmp_path):
    """With the real package: the scalars can be read back from the event file with their steps."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = sinks.TensorBoard(tmp_path, True, 0)
    board.write({"step": 2, "loss": 0.5, "optim": {"eta": 0.125}})
    board.write({"step": 3, "loss": 0.25})
    board.close()
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert sorted(acc.Tags()["scalars"]) == ["loss", "optim/eta"]
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(2, 0.5), (3, 0.25)]
    assert [(e.step, e.value) for e in acc.Scalars("optim/eta")] == [(2, 0.125)]


def test_summary_table_by_hand():
    """Names left-aligned to the longest after two spaces, two spaces, then floats (numpy floats too) as
    ``.6g`` and everything else by ``str``."""
    table = sinks.summary_table(
        {"loss": 2 / 3, "n": 7, "big": 1e-7, "whole": 3.0, "ok": True, "none": None, "np": np.float64(1 / 7)}
    )
    assert table == (
        "  loss   0.666667\n  n      7\n  big    1e-07\n  whole  3\n  ok     True\n  none   None\n  np     0.142857"
    )
    assert sinks.summary_table({"a": 1}) == "  a  1"
    assert sinks.summary_table({"abcdefgh": "x", "b": [1]}) == "  abcdefgh  x\n  b         [1]"
    assert sinks.summary_table({}) == ""


def _capture(monkeypatch):
    """Record each ``(fig, path)`` that ``meanfield.studies.plotting.save`` is given (and still save it)."""
    plotting = importlib.import_module("meanfield.studies.plotting")
    saved = []
    real = plotting.save
    monkeypatch.setattr(plotting, "save", lambda fig, path: (saved.append((fig, path)), real(fig, path))[1])
    return saved


def _lines(ax):
    """``(label, xs, ys)`` of each line of ``ax``."""
    return [(l.get_label(), list(l.get_xdata()), list(l.get_ydata())) for l in ax.get_lines()]


def test_training_figure_layout_and_lines(tmp_path, monkeypatch):
    """Two panels 9.2 × 3.2 inches; the loss panel: the training loss, then the val_/test_ metrics in sorted
    order (no perplexities, no other prefixes) where not None; β_t where not None (0 kept) and the
    drift/noise ratio where finite and positive; axis labels, scales, titles and legends by hand."""
    saved = _capture(monkeypatch)
    records = [
        {"step": 1, "train_loss": 0.5, "beta": 0.0, "val_b": 0.9, "optim": {"drift_to_noise": 1e-300}},
        {"step": 2, "test_a": 0.7, "val_a": 0.8, "xval_c": 1.0, "test_ppl": 3.0, "val_b": None, "optim": {}},
        {"step": 3, "train_loss": 0.25, "beta": 0.5, "val_a": 0.6, "optim": None},
        {"step": 4, "train_loss": 0.125, "optim": {"drift_to_noise": -math.inf}},
    ]
    sinks.draw_figures(tmp_path, records, "tokens")
    ((fig, path),) = saved
    assert path == tmp_path / "figures" / "training.png" and path.read_bytes()[:4] == b"\x89PNG"
    assert tuple(fig.get_size_inches()) == pytest.approx((9.2, 3.2))
    ax_loss, ax_beta = fig.axes
    assert _lines(ax_loss) == [
        ("train loss", [1, 3, 4], [0.5, 0.25, 0.125]),
        ("test_a", [2], [0.7]),
        ("val_a", [2, 3], [0.8, 0.6]),
        ("val_b", [1], [0.9]),
    ]
    assert _lines(ax_beta) == [("β_t", [1, 3], [0.0, 0.5]), ("drift/noise RMS", [1], [1e-300])]
    assert (ax_loss.get_xlabel(), ax_loss.get_ylabel(), ax_loss.get_title()) == ("step", "loss", "losses")
    assert (ax_beta.get_xlabel(), ax_beta.get_ylabel(), ax_beta.get_title()) == ("step", "", "temperature")
    assert (ax_loss.get_yscale(), ax_beta.get_yscale()) == ("log", "log")
    assert (ax_loss.get_xscale(), ax_beta.get_xscale()) == ("linear", "linear")
    assert [t.get_text() for t in ax_loss.get_legend().get_texts()] == [
        "train loss",
        "test_a",
        "val_a",
        "val_b",
    ]
    assert [t.get_text() for t in ax_beta.get_legend().get_texts()] == ["β_t", "drift/noise RMS"]
    assert ax_loss.get_lines()[0].get_marker() in ("None", None, "")  # the training loss: a plain line
    for line in ax_loss.get_lines()[1:]:  # the metrics: dots of size 3 joined by lines
        assert (line.get_marker(), line.get_linestyle(), line.get_markersize()) == ("o", "-", 3)
    for line in ax_beta.get_lines():
        assert (line.get_marker(), line.get_linestyle()) == ("None", "-")


def test_training_figure_without_beta_or_ratio(tmp_path, monkeypatch):
    """Records with neither β nor a usable ratio: the temperature panel has no line (and no legend entry),
    the figure is still written; no records write nothing at all."""
    saved = _capture(monkeypatch)
    with pytest.warns(UserWarning, match="No artists with labels found to put in legend"):
        sinks.draw_figures(
            tmp_path, [{"step": 1, "train_loss": 1.0, "beta": None, "optim": {"drift_to_noise": 0.0}}], "s"
        )
    ((fig, path),) = saved
    assert path.is_file() and fig.axes[1].get_lines() == []
    assert _lines(fig.axes[0]) == [("train loss", [1], [1.0])]
    empty = tmp_path / "empty"
    sinks.draw_figures(empty, [], "s")
    assert not empty.exists() and len(saved) == 1


def test_log_interval_of_logs_spread_beyond_float64_gives_inf_not_an_error():
    """Regression: ``log_interval([1e-300, 1.0])`` needs ``exp(≈4040)`` for its upper bound and factor and
    raised OverflowError; now those are ``inf`` while the centre (the geometric mean 1e-150) and the lower
    bound stay exact (scipy's t quantile by hand)."""
    from scipy import stats as st

    from meanfield.studies.stats import log_interval

    r = log_interval([1e-300, 1.0])
    logs = np.log([1e-300, 1.0])
    lo = logs.mean() - st.t.ppf(0.975, 1) * logs.std(ddof=1) / math.sqrt(2)
    assert r.center == pytest.approx(1e-150, rel=1e-9)
    assert r.lo == pytest.approx(math.exp(lo), rel=1e-9) if lo > -745 else r.lo == 0.0
    assert r.hi == math.inf and r.factor == math.inf
