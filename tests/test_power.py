"""Power, sample sizes, Holm's correction and log-scale intervals (``meanfield.studies.stats``) against independent
answers: a Monte-Carlo simulation of the paired t-test itself, published sample sizes, the closed-testing
definition of Holm's procedure, hand computations and scipy's t quantiles. Each test carries a negative
control (the normal approximation at 3 pairs, Bonferroni, a step-down without its running maximum, the
arithmetic interval of skewed values) that the same assertion tells apart.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as st

from meanfield.studies.stats import (
    HolmFamily,
    Z,
    detectable_difference,
    holm,
    log_interval,
    paired_difference,
    paired_t_power,
    pairs_needed,
    t_interval,
)

Z80 = st.norm.isf(0.2)  # 0.8416
Z975 = st.norm.isf(0.025)  # 1.95996


def _simulated_power(
    delta: float, sd: float, n: int, alpha: float, reps: int, seed: int
) -> tuple[float, float]:
    """The rejection rate of the two-sided paired t-test over ``reps`` simulated studies of ``n`` pairs with
    differences ``N(delta, sd²)``, and its binomial standard error: the test itself, no noncentral t."""
    d = delta + sd * np.random.default_rng(seed).standard_normal((reps, n))  # (reps, n)
    t = d.mean(1) / (d.std(1, ddof=1) / math.sqrt(n))
    rate = float((np.abs(t) > st.t.isf(alpha / 2, n - 1)).mean())
    return rate, math.sqrt(max(rate * (1 - rate), 1e-12) / reps)


@pytest.mark.parametrize(
    ("delta", "sd", "n", "alpha"), [(0.5, 1.0, 5, 0.05), (1.0, 0.5, 3, 0.05), (0.1, 0.2, 12, 0.1)]
)
def test_power_equals_the_simulated_rejection_rate(delta, sd, n, alpha):
    """200,000 simulated studies: SE ≤ 0.0012, so the check (5 SE) detects a power error of 0.006."""
    rate, se = _simulated_power(delta, sd, n, alpha, 200_000, seed=n)
    assert abs(paired_t_power(delta, sd, n, alpha) - rate) <= Z * se
    assert paired_t_power(-delta, sd, n, alpha) == paired_t_power(delta, sd, n, alpha)  # two-sided
    if n == 3:  # control: the normal approximation's power is far outside the same tolerance
        assert abs(paired_t_power(delta, sd, n, alpha, method="normal") - rate) > 20 * Z * se


def test_power_at_no_difference_is_alpha_and_the_normal_formula_by_hand():
    for n, alpha in ((2, 0.05), (3, 0.05), (10, 0.01)):
        assert paired_t_power(0.0, 1.0, n, alpha) == pytest.approx(alpha, rel=1e-10)
    lam = 0.3 * math.sqrt(20) / 0.4  # δ√n/sd
    by_hand = st.norm.cdf(lam - Z975) + st.norm.cdf(-lam - Z975)
    assert paired_t_power(0.3, 0.4, 20, method="normal") == pytest.approx(by_hand, rel=1e-12)
    assert paired_t_power(0.3, 0.4, 20) < by_hand  # the t-test, its variance estimated, has less power


def test_the_detectable_difference_has_the_asked_power_and_simulates_to_it():
    for n in (2, 3, 5, 30):
        for power, alpha in ((0.8, 0.05), (0.9, 0.01)):
            delta = detectable_difference(0.7, n, power, alpha)
            assert paired_t_power(delta, 0.7, n, alpha) == pytest.approx(power, abs=1e-9)
            assert paired_t_power(0.99 * delta, 0.7, n, alpha) < power  # the smallest such difference
    assert detectable_difference(2.0, 5) == pytest.approx(2 * detectable_difference(1.0, 5), rel=1e-9)
    rate, se = _simulated_power(detectable_difference(1.0, 3), 1.0, 3, 0.05, 200_000, seed=7)
    assert abs(rate - 0.8) <= Z * se  # 3 pairs at that difference: 80 % of studies reject
    normal = detectable_difference(1.0, 3, method="normal")
    assert normal == pytest.approx((Z975 + Z80) / math.sqrt(3), rel=1e-12)  # the textbook formula
    rate, se = _simulated_power(normal, 1.0, 3, 0.05, 200_000, seed=8)
    assert abs(rate - 0.8) > 50 * se and rate < 0.4  # control: at 3 pairs the normal answer has ~35 % power
    assert detectable_difference(1.0, 3) / normal == pytest.approx(2.02, abs=0.01)
    big = detectable_difference(1.0, 100_000)  # many pairs: the t-test becomes the z-test
    assert big == pytest.approx((Z975 + Z80) / math.sqrt(100_000), rel=1e-4)
    assert detectable_difference(0.0, 3) == 0.0


def test_pairs_needed_matches_published_sample_sizes_and_is_the_smallest():
    """R's ``power.t.test(delta = d, sd = 1, power = 0.8, type = "one.sample")`` (the paired test is the
    one-sample test of the differences) gives n = 33.37 for d = 0.5, 198.15 for d = 0.2, 14.30 for d = 0.8
    (G*Power: 34, 199, 15 pairs)."""
    assert [pairs_needed(d, 1.0) for d in (0.5, 0.2, 0.8)] == [34, 199, 15]
    assert pairs_needed(0.05, 0.1) == 34 and pairs_needed(-0.5, 1.0) == 34  # only δ/sd and |δ| matter
    assert [pairs_needed(d, 1.0, method="normal") for d in (0.5, 0.8)] == [32, 13]  # control: too few
    assert math.ceil(((Z975 + Z80) / 0.8) ** 2) == 13  # the textbook formula by hand
    for delta, sd, power, alpha in ((0.01, 0.013, 0.8, 0.05), (1.0, 1.0, 0.8, 0.05), (0.3, 0.5, 0.95, 0.01)):
        n = pairs_needed(delta, sd, power, alpha)
        assert paired_t_power(delta, sd, n, alpha) >= power > paired_t_power(delta, sd, n - 1, alpha)
    assert pairs_needed(10.0, 1.0) == 3  # huge effects still need 3 pairs at 80 % (2 pairs: df = 1)
    assert paired_t_power(10.0, 1.0, 2) < 0.8 <= paired_t_power(10.0, 1.0, 3)
    assert pairs_needed(100.0, 1.0) == 2 and paired_t_power(100.0, 1.0, 2) >= 0.8  # the smallest test
    assert pairs_needed(1.0, 0.0) == 2


def test_power_functions_refuse_bad_arguments():
    bad = [
        (lambda: paired_t_power(0.1, 1.0, 1), "needs n ≥ 2 pairs, got 1"),
        (lambda: paired_t_power(0.1, 0.0, 3), "sd must be > 0"),
        (lambda: paired_t_power(0.1, 1.0, 3, alpha=1.0), r"alpha must be in \(0, 1\)"),
        (lambda: paired_t_power(0.1, 1.0, 3, method="z"), "method must be one of"),
        (lambda: detectable_difference(-1.0, 3), "sd must be finite and ≥ 0"),
        (lambda: detectable_difference(1.0, 2.5), "needs n ≥ 2 pairs"),
        (lambda: detectable_difference(1.0, 3, power=0.04), r"power must be in \(alpha, 1\)"),
        (lambda: pairs_needed(0.0, 1.0), "delta must be finite and ≠ 0"),
        (lambda: pairs_needed(math.nan, 1.0), "delta must be finite"),
        (lambda: pairs_needed(1e-6, 1.0, max_pairs=1000), "more than max_pairs = 1000"),
    ]
    for call, message in bad:
        with pytest.raises(ValueError, match=message):
            call()


def _holm_by_closed_testing(p: list[float]) -> list[float]:
    """Holm's procedure is the closed test of Bonferroni tests (Marcus, Peritz & Gabriel 1976; Holm 1979):
    the adjusted p of hypothesis i is the largest Bonferroni p, ``min(1, |S|·min_{j∈S} p_j)``, over the
    intersections S that contain i. Enumerates every subset: an oracle that shares no code with ``holm``."""
    m = len(p)
    out = []
    for i in range(m):
        worst = 0.0
        for size in range(1, m + 1):
            for subset in itertools.combinations(range(m), size):
                if i in subset:
                    worst = max(worst, min(1.0, size * min(p[j] for j in subset)))
        out.append(worst)
    return out


def test_holm_by_hand_and_by_closed_testing():
    p = [0.01, 0.04, 0.03, 0.005]  # sorted 0.005, 0.01, 0.03, 0.04 → ×4, ×3, ×2, ×1 = 0.02, 0.03, 0.06, 0.04
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02], rel=1e-12)  # 0.04 raised to 0.06: monotone
    bonferroni = np.minimum(1, 4 * np.array(p))
    assert not np.allclose(holm(p), bonferroni)  # control: Bonferroni is another (larger) answer
    assert holm(p)[1] != pytest.approx(0.04)  # control: the step-down without its running maximum
    g = np.random.default_rng(5)
    for m in (1, 2, 3, 6):
        for _ in range(20):
            q = list(g.random(m) ** 3)  # small p-values too
            assert holm(q) == pytest.approx(_holm_by_closed_testing(q), rel=1e-12, abs=1e-15)
    assert holm([0.5, 0.6]).tolist() == [1.0, 1.0]  # capped at 1
    assert holm([0.02, 0.02, 0.5]).tolist() == pytest.approx([0.06, 0.06, 0.5])  # ties
    raw = g.random(7)
    adj = holm(raw)
    assert (adj >= raw).all() and (np.diff(adj[np.argsort(raw)]) >= 0).all()
    assert holm([]).size == 0


def test_holm_leaves_untested_comparisons_out_of_the_family():
    adj = holm([0.01, math.nan, 0.04])
    assert math.isnan(adj[1]) and adj[[0, 2]].tolist() == pytest.approx([0.02, 0.04])  # m = 2, not 3
    with pytest.raises(ValueError, match=r"p-values must be in \[0, 1\]"):
        holm([0.1, 1.2])
    with pytest.raises(ValueError, match=r"p-values must be in \[0, 1\]"):
        holm([-0.1])


def test_holm_family_fills_each_cell_with_its_own_adjusted_p_in_table_order():
    """``HolmFamily``: cells made in table order get Holm's p over the whole family (by hand: sorted raw p
    0.005, 0.01, 0.04 → ×3, ×2, ×1 with the running maximum = 0.015, 0.02, 0.04), each cell its own (not the
    next one's: the placeholders carry their index), with the digits it was made with; a cell made but not
    printed is refused (it would count in m silently)."""
    g = np.random.default_rng(0)
    base = g.normal(size=8)
    d = [paired_difference(base + shift + 0.1 * g.normal(size=8), base) for shift in (0.3, 0.02, 0.1)]
    raw = [x.p_value for x in d]
    family = HolmFamily()
    text = f"| a | {family.cell(d[0], 2)} |\n| b | {family.cell(d[1], 4)} |\n| c | {family.cell(d[2], 3)} |\n"
    assert len(family) == 3 and "\x00" in text
    out = family.fill(text, lambda x, q, digits: f"{x.mean:.{digits}f}/{q!r}")
    expected = holm(raw)
    rows = out.splitlines()
    for row, x, q, digits in zip(rows, d, expected, (2, 4, 3)):
        assert row.split(" | ")[1].rstrip(" |") == f"{x.mean:.{digits}f}/{float(q)!r}"
    order = np.argsort(raw)
    by_hand = np.maximum.accumulate(np.minimum(1, (3 - np.arange(3)) * np.asarray(raw)[order]))
    assert sorted(float(r.split("/")[1].rstrip(" |")) for r in rows) == pytest.approx(sorted(by_hand))
    assert float(rows[0].split("/")[1].rstrip(" |")) != pytest.approx(raw[0])  # control: unadjusted p
    dropped = HolmFamily()
    kept = dropped.cell(d[0], 2)
    dropped.cell(d[1], 2)
    with pytest.raises(ValueError, match="cell 1 of the Holm family \\(2 cells\\) is not in the table"):
        dropped.fill(f"| {kept} |", lambda x, q, digits: "")


def test_holm_family_table_adjusts_each_built_table_over_its_own_cells_only():
    """``HolmFamily.table``: inside the decorated builder ``active()`` is a fresh family, outside it ``None``;
    the text comes back as ``finish(filled, m)`` with m the cells of *that* table (by hand: raw p 0.01, 0.04
    → Holm 0.02, 0.04), a tuple's extra items pass through, a nested table keeps its own family (its cell
    is not counted in the outer m: control, Holm over 3 would give 0.03 for the smallest), and an error in
    the builder leaves no active family behind."""

    zeros = [0.0, 0.0, 0.0]
    diffs = {  # keyed by their rough p: paired differences 1.0, 1.1, 0.9 (p ≈ 0.006) and 1, 2, 0.5 (≈ 0.07)
        0.01: paired_difference([1.0, 1.1, 0.9], zeros),
        0.04: paired_difference([1.0, 2.0, 0.5], zeros),
    }
    raw = {k: d.p_value for k, d in diffs.items()}
    assert raw[0.01] < raw[0.04] / 2 < raw[0.04] < 0.5  # the step-down's two regimes apart
    render = lambda d, q, digits: f"{q:.{digits}f}"  # noqa: E731
    table = HolmFamily.table(render, lambda text, m: f"{text}[m={m}]")

    @table
    def inner() -> str:
        """the inner table"""
        return f"<{HolmFamily.active().cell(diffs[0.01], 4)}>"

    @table
    def outer(extra: int) -> tuple[str, int]:
        """the outer table"""
        family = HolmFamily.active()
        assert family is not None and len(family) == 0
        first = family.cell(diffs[0.04], 4)
        nested = inner()
        assert HolmFamily.active() is family  # the inner table's family is gone again
        return f"{first} {family.cell(diffs[0.01], 4)} {nested}", extra

    assert HolmFamily.active() is None
    text, extra = outer(7)
    lo, hi = sorted(raw.values())
    adjusted = {raw[0.01]: min(1, 2 * lo), raw[0.04]: max(min(1, 2 * lo), hi)}  # Holm's step-down by hand
    assert extra == 7 and HolmFamily.active() is None
    assert text == (f"{adjusted[raw[0.04]]:.4f} {adjusted[raw[0.01]]:.4f} <{raw[0.01]:.4f}>[m=1][m=2]")
    assert f"{min(1, 3 * lo):.4f}" not in text.split(" <")[0]  # control: one family of 3 over both tables
    assert outer.__name__ == "outer" and outer.__doc__ == "the outer table"

    @table
    def broken() -> str:
        HolmFamily.active().cell(diffs[0.01], 2)
        raise RuntimeError("mid-table")

    with pytest.raises(RuntimeError, match="mid-table"):
        broken()
    assert HolmFamily.active() is None


def test_log_interval_is_the_t_interval_of_the_logs():
    values = np.array([2.1e-5, 3.4e-6, 8.0e-5, 1.2e-5, 4.4e-6])
    lo, hi = st.t.interval(0.95, 4, loc=np.log(values).mean(), scale=st.sem(np.log(values)))
    r = log_interval(values)
    assert r.center == pytest.approx(st.gmean(values), rel=1e-12) and r.n == 5
    assert (r.lo, r.hi) == (pytest.approx(math.exp(lo), rel=1e-12), pytest.approx(math.exp(hi), rel=1e-12))
    assert r.factor == pytest.approx(math.sqrt(r.hi / r.lo), rel=1e-12)
    assert r.log_se == pytest.approx(st.sem(np.log(values)), rel=1e-12)
    arithmetic = t_interval(np.array([2.1e-5, 1e-7, 1e-7, 1e-7, 1e-7]))
    assert arithmetic.lo < 0 < log_interval([2.1e-5, 1e-7, 1e-7, 1e-7, 1e-7]).lo  # control: below 0
    two = log_interval([1.0, 100.0])  # by hand: mean ln = ln 10, SE = ln 10, t_{1, 0.975} = 12.706
    t1 = st.t.isf(0.025, 1)
    assert two.center == pytest.approx(10.0, rel=1e-14)
    assert two.lo == pytest.approx(10 ** (1 - t1), rel=1e-9) and two.hi == pytest.approx(
        10 ** (1 + t1), rel=1e-9
    )
    one = log_interval([3.0])
    assert one.center == pytest.approx(3.0) and one.n == 1 and math.isnan(one.lo) and math.isnan(one.factor)
    for bad in ([1.0, 0.0], [1.0, -2.0], [1.0, math.inf]):
        with pytest.raises(ValueError, match="log_interval needs positive finite values"):
            log_interval(bad)


def test_log_interval_covers_the_log_normal_median():
    """4,000 studies of 5 log-normal values (σ = 1): the interval covers the median e^μ in 95 % of them (SE
    0.0034; the check detects a coverage error of 0.017); the arithmetic interval of the same values covers
    their mean e^{μ+σ²/2} far less often (the negative control)."""
    x = np.exp(0.3 + np.random.default_rng(11).standard_normal((4000, 5)))  # (studies, n)
    t = st.t.isf(0.025, 4)
    logs = np.log(x)
    half = t * logs.std(1, ddof=1) / math.sqrt(5)
    covered = (np.abs(logs.mean(1) - 0.3) <= half).mean()
    assert abs(covered - 0.95) <= Z * math.sqrt(0.95 * 0.05 / 4000)
    spot = log_interval(x[0])  # the function gives the same interval as the vectorised one here
    assert math.log(spot.lo) == pytest.approx(logs[0].mean() - half[0], rel=1e-12)
    mean = math.exp(0.3 + 0.5)
    arith = (np.abs(x.mean(1) - mean) <= t * x.std(1, ddof=1) / math.sqrt(5)).mean()
    assert arith < 0.95 - Z * math.sqrt(0.95 * 0.05 / 4000)


def test_paired_difference_carries_its_sd_and_power():
    a = np.array([2.10, 2.13, 2.16, 2.12])
    b = np.array([2.12, 2.14, 2.19, 2.12])
    d = paired_difference(a, b)
    assert d.sd == pytest.approx(np.std(a - b, ddof=1), rel=1e-12)
    assert d.half_width == pytest.approx(st.t.isf(0.025, 3) * d.sd / 2, rel=1e-12)
    assert d.detectable() == pytest.approx(detectable_difference(d.sd, 4), rel=1e-12)
    assert d.detectable(0.9, 0.01) == pytest.approx(detectable_difference(d.sd, 4, 0.9, 0.01), rel=1e-12)
    assert d.pairs_needed(0.01) == pairs_needed(0.01, d.sd)
    one = paired_difference([1.0], [0.5])
    assert math.isnan(one.sd) and math.isnan(one.detectable()) and math.isnan(one.pairs_needed(0.1))
