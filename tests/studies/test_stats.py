"""Tests of :mod:`meanfield.studies.stats`."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import warnings

import numpy as np
import pytest
import torch
from scipy import integrate
from scipy import stats as st
from torch import nn

from meanfield import BrownianIncrements
from meanfield.optim import (
    Langevin,
    momentum_variance_factor,
)
from meanfield.studies import stats
from meanfield.studies.in_memory import ESTIMATORS, convergence_in_m
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

F64 = torch.float64


def _param(shape, seed=0, scale=1.0) -> nn.Parameter:
    g = torch.Generator().manual_seed(seed)
    return nn.Parameter(scale * torch.randn(shape, generator=g, dtype=F64))


def _stationary_adam(betas, *, a=1.0, lr=0.1, beta=1e-4, n=200_000, steps=500, seed=11):
    """Run the Adam drift with noise on ``F = a/2 Σθ²`` (``n`` coordinates, replicas) from the Gibbs law;
    return ``(mean θ², its SE, u = a·⟨η_eff⟩ over the last half)``."""
    theta = nn.Parameter(
        math.sqrt(beta / a) * torch.randn(n, dtype=F64, generator=torch.Generator().manual_seed(seed))
    )
    kwargs = {} if betas is None else {"betas": betas}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = Langevin([theta], lr=lr, beta=beta, drift="adam", seed=seed, **kwargs)
    etas = []
    for k in range(steps):
        theta.grad = a * theta.detach()
        opt.step()
        if k >= steps // 2:
            etas.append(opt.last_stats.eta_eff_mean)
    est = mean_se(theta.detach() ** 2)
    return est, a * sum(etas) / len(etas)


def test_default_adam_drift_with_noise_samples_the_chain_law():
    """Default Adam drift on a group with noise (β1 = 0: RMSprop-preconditioned, pSGLD), ε = 1 ≫
    ``a·sd θ = 0.01``, so ``η_eff ≈ lr/1.01`` is nearly constant: the chain is ``θ ← (1 − u)θ + sqrt(2βh)ξ``
    with stationary variance ``β/(a(1 − u/2))``, ``u = a·η_eff ≈ 0.099``. ``n = 200 000`` replicas: relative SE
    ``sqrt(2/n) = 0.32 %``, smallest detectable error 1.6 %. Negative controls: the continuous β/a (−5 %) and
    the law with the old default momentum β1 = 0.9 (+85 %) are rejected. On the code before the fix (defaults
    β1 = 0.9, ε = 1e-8) this test fails: ``u = 2.1``."""
    a, beta = 1.0, 1e-4
    est, u = _stationary_adam(None, a=a, beta=beta)
    assert 0.098 < u < 0.1
    assert est.agrees(beta / a * momentum_variance_factor(u, 0.0), Z), (est, u)
    assert est.agrees(beta / (a * (1 - u / 2)), Z)
    assert not est.agrees(beta / a, Z), "negative control: the continuous Gibbs value β/a"
    assert not est.agrees(beta / a * momentum_variance_factor(u, 0.9), Z), "negative control: momentum law"


def test_momentum_chain_variance_is_the_lyapunov_solution():
    """With β1 = 0.9 (asked for explicitly: it warns) the stationary variance is the Lyapunov solution
    ``β/a·2(1 − β1² + 2β1u)/((1 − β1)(2(1 + β1) − (1 − β1)u))`` (≈ 1.95 β/a at u = 0.099), far from the
    Gibbs value β/a (negative control) and from the momentum-free chain value."""
    a, beta = 1.0, 1e-4
    with pytest.warns(UserWarning, match="momentum"):
        Langevin([_param((2,))], lr=0.1, beta=beta, drift="adam", betas=(0.9, 0.999))
    est, u = _stationary_adam((0.9, 0.999), a=a, beta=beta)
    assert est.agrees(beta / a * momentum_variance_factor(u, 0.9), Z), (est, u)
    assert not est.agrees(beta / a, Z), "negative control: the Gibbs value"
    assert not est.agrees(beta / a * momentum_variance_factor(u, 0.0), Z), "negative control: no momentum"


def test_coarsened_levy_area_is_consistent():
    """Coarsening by 4 then 2 equals coarsening by 8; the coarse areas have variance k·dt/12."""
    fine = BrownianIncrements.sample(
        64, (20_000, 1, 1), 1 / 64, generator=torch.Generator().manual_seed(14), levy_area=True
    )
    once, twice = fine.coarsen(8), fine.coarsen(4).coarsen(2)
    assert torch.allclose(once.increments, twice.increments, atol=1e-12)
    assert torch.allclose(once.H, twice.H, atol=1e-12)
    est = mean_se(once.H.square())  # E H² = h/12 for a step h = 8/64
    assert est.agrees(once.dt / 12)
    assert not est.agrees(1.1 * once.dt / 12)  # negative control
    assert mean_se(once.H * once.increments).agrees(0.0)  # H independent of the increment


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


# float32 values whose float32 mean and standard deviation are visibly wrong: an offset of 1000, a spread of
# 1e-3 (float32 keeps ~7 digits, so the spread is resolved to ~6e-5 of itself only in float64 arithmetic)
_G = np.random.default_rng(0)


OFFSET32 = (1000.0 + 1e-3 * _G.standard_normal(4097)).astype(np.float32)


def _white(n: int, D: int, seed: int = 2) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, D))


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


DT = torch.float64


MS = [16, 32, 64, 128, 256]


def loss_excess_study(seed: int, *, n_boot: int = 400, alpha: float = 1.0):
    """One study of ``L_M = 1 + M^{−α}(1 + 0.5ξ)`` (50 replicates per M) with 10 reference values of SE 0.2× the
    smallest excess (``1/256``): a reference one is tempted to treat as exact."""
    g = torch.Generator().manual_seed(seed)

    def sample(M, reps):
        return {"L": 1.0 + M**-alpha * (1 + 0.5 * torch.randn(reps, generator=g, dtype=DT))}

    ref = 1.0 + 0.2 / 256 * math.sqrt(10) * torch.randn(10, generator=g, dtype=DT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return convergence_in_m(sample, MS, reps=50, reference=ref, quantity="L", generator=g, n_boot=n_boot,
                                estimator=ESTIMATORS, progress=False)  # fmt: skip


def coverages(n: int, first_seed: int, **kwargs) -> dict[str, float]:
    hits = dict.fromkeys(ESTIMATORS, 0)
    for seed in range(first_seed, first_seed + n):
        study = loss_excess_study(seed, **kwargs)
        for e, est in study.estimates.items():
            hits[e] += int(est.slope_ci[0] <= -1.0 <= est.slope_ci[1])
    return {e: h / n for e, h in hits.items()}


def test_intervals_cover_the_known_exponent_and_the_naive_one_does_not():
    """400 studies (seeds apart from the theory check's): the 95 % interval of ``reference``, ``fit`` and
    ``differences`` covers −1 in 0.95 ± 5 SE of them (SE = 0.0109: a coverage below 0.896 is detected); the
    naive ``exact`` interval (the reference mean treated as L_∞) covers below 0.896 (measured about 0.6).
    Negative control on the other side: the same intervals for data that decay like M^{−0.8} miss −1."""
    n = 400
    se = math.sqrt(0.95 * 0.05 / n)
    cov = coverages(n, first_seed=50_000)
    for e in ("reference", "fit", "differences"):
        assert abs(cov[e] - 0.95) <= Z * se, (e, cov)
    assert cov["exact"] < 0.95 - Z * se, cov
    # data with exponent −0.8: every interval must miss −1 more often than 0.95 − 5 SE (n = 100, SE = 0.022).
    # Measured: 'reference' 0.01, the reference-free fits about 0.5 (wider: they fit L_∞ too).
    wrong = coverages(100, first_seed=60_000, alpha=0.8)
    assert all(v < 0.95 - Z * math.sqrt(0.95 * 0.05 / 100) for v in wrong.values()), wrong
    assert wrong["reference"] < 0.2, wrong  # the propagated reference keeps the power the fits lose


def _chi2_4_cdf(s: float) -> float:
    """``P(χ²_4 ≤ s) = 1 − e^{−s/2}(1 + s/2)`` (closed form)."""
    return 1.0 - math.exp(-s / 2) * (1 + s / 2)


def _z_pairs(z: float, pairs: int) -> float:
    """The Bonferroni z of ``pairs`` two-sided tests at the false-failure rate of ``z`` (norm.ppf, by hand)."""
    return float(-st.norm.ppf(math.erfc(z / math.sqrt(2)) / (2 * pairs)))


T2_975 = 4.302652729749462  # t_{2, 0.975} (tables: 4.303)


T2_95 = 2.9199855803537242  # t_{2, 0.95} (tables: 2.920)


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
    # a NaN or inf (a diverged run) is refused, naming the pairs, rather than a NaN result with a numpy warning
    with pytest.raises(ValueError, match=r"^paired_difference needs finite values; pairs \[1, 3\] are not"):
        paired_difference([1.0, float("nan"), 2.0, 3.0], [0.5, 0.5, 0.5, float("inf")])


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


def test_differences_equal_up_to_rounding_have_no_test_and_nothing_detectable():
    """1.1 − 1.0, 2.2 − 2.1, 3.3 − 3.2 are 0.1 up to rounding (spread 4e-16): no p (it was 2e-30, Holm 0), and
    δ80 and pairs_needed NaN, as for exactly equal differences (δ80 was 0: "any difference detected");
    control: a spread of 1e-6 is tested."""
    for a, b in (([1.1, 2.2, 3.3], [1.0, 2.1, 3.2]), ([1.5, 2.5, 3.5], [1.0, 2.0, 3.0])):
        d = paired_difference(a, b)
        assert math.isnan(d.p_value) and math.isnan(d.detectable()) and math.isnan(d.pairs_needed(0.1))
    tested = paired_difference([1.1, 2.2, 3.3 + 1e-6], [1.0, 2.1, 3.2])
    assert 0 < tested.p_value < 1 and tested.detectable() > 0
