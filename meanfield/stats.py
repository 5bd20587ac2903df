"""Small statistics used by the tests and the theory checks: estimates with standard errors, z-checks, fits.

The project's rule for a statistical check: tolerance = ``z·SE`` with ``z = 5`` (two-sided false-failure
rate ≈ 5.7e-7), and the smallest error it can detect stated next to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats as _st

__all__ = [
    "Z",
    "Estimate",
    "mean_se",
    "within",
    "chi2_variance_pvalue",
    "jackknife",
    "loglog_slope",
    "false_failure_rate",
    "WhitenessCheck",
    "whiteness",
    "Interval",
    "t_interval",
    "PairedDifference",
    "paired_difference",
]

Z = 5.0


def false_failure_rate(z: float = Z) -> float:
    """Two-sided ``P(|N(0,1)| > z)``: how often a correct z-check fails by chance."""
    return float(2.0 * _st.norm.sf(z))


@dataclass(frozen=True)
class Estimate:
    """A Monte-Carlo estimate ``value ± se`` (``se``: one standard error)."""

    value: float
    se: float

    def z_score(self, target: float) -> float:
        """``(value − target)/se`` (``±inf`` for a mismatch with ``se = 0``)."""
        diff = self.value - target
        if self.se == 0:
            return 0.0 if diff == 0 else math.copysign(math.inf, diff)
        return diff / self.se

    def agrees(self, target: float, z: float = Z, bias: float = 0.0) -> bool:
        """``|value − target| ≤ z·se + bias`` (``bias``: a known bound on a deterministic error)."""
        return abs(self.value - target) <= z * self.se + bias


def mean_se(samples: torch.Tensor | np.ndarray) -> Estimate:
    """Mean of independent samples and its standard error ``std/sqrt(n)`` (flattened)."""
    a = np.asarray(samples.detach().cpu() if torch.is_tensor(samples) else samples, dtype=np.float64).ravel()
    if a.size < 2:
        raise ValueError(f"need at least 2 samples for a standard error, got {a.size}")
    return Estimate(float(a.mean()), float(a.std(ddof=1) / math.sqrt(a.size)))


def within(estimate: Estimate, target: float, z: float = Z, bias: float = 0.0) -> bool:
    """Shorthand for ``estimate.agrees(target, z, bias)``."""
    return estimate.agrees(target, z, bias)


def chi2_variance_pvalue(samples: torch.Tensor | np.ndarray, variance: float, mean: float = 0.0) -> float:
    """Two-sided p-value of ``H0: samples ~ i.i.d. N(mean, variance)`` from ``Σ(x − mean)²/variance ~ χ²_n``."""
    a = np.asarray(samples.detach().cpu() if torch.is_tensor(samples) else samples, dtype=np.float64).ravel()
    statistic = float(((a - mean) ** 2).sum() / variance)
    n = a.size
    return float(2.0 * min(_st.chi2.cdf(statistic, n), _st.chi2.sf(statistic, n)))


def loglog_slope(x, y, y_se=None) -> Estimate:
    """Least-squares slope of ``log y`` against ``log x`` with its standard error.

    With ``y_se`` (standard errors of ``y``) the fit is weighted by ``(y/y_se)²`` (delta method) and the
    slope's SE comes from those weights; otherwise from the residuals.
    """
    lx, ly = np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float))
    if lx.size < 2:
        raise ValueError(f"need at least 2 points for a slope, got {lx.size}")
    if y_se is None:
        res = _st.linregress(lx, ly)
        return Estimate(float(res.slope), float(res.stderr))
    w = (np.asarray(y, dtype=float) / np.asarray(y_se, dtype=float)) ** 2
    xm = np.sum(w * lx) / w.sum()
    sxx = np.sum(w * (lx - xm) ** 2)
    slope = np.sum(w * (lx - xm) * ly) / sxx
    return Estimate(float(slope), float(1.0 / math.sqrt(sxx)))


def jackknife(stat, samples) -> Estimate:
    """A smooth function of replica means and its delete-one jackknife standard error.

    ``samples`` is an array with the replicas on its first axis, or a (nested) dict of such arrays, all with
    the same number B of replicas. ``stat`` receives the same structure with every array replaced by its
    mean over the replicas kept, and returns a number: the estimate is ``stat`` of all B means, the SE
    ``sqrt((B − 1)/B · Σ_b (θ_{−b} − θ̄)²)`` over the B leave-one-out values (Efron & Stein 1981).
    Correlations within a replica (e.g. over time) are kept whole.
    """

    def count(tree) -> int:
        return count(next(iter(tree.values()))) if isinstance(tree, dict) else len(tree)

    def means(tree, keep):
        if isinstance(tree, dict):
            return {k: means(v, keep) for k, v in tree.items()}
        return float(np.asarray(tree)[keep].mean())

    B = count(samples)
    if B < 2:
        raise ValueError(f"the jackknife needs at least 2 replicas, got {B}")
    keep = np.ones(B, dtype=bool)
    value = float(stat(means(samples, keep)))
    loo = np.empty(B)
    for b in range(B):
        keep[b] = False
        loo[b] = stat(means(samples, keep))
        keep[b] = True
    return Estimate(value, float(math.sqrt((B - 1) / B * ((loo - loo.mean()) ** 2).sum())))


@dataclass(frozen=True)
class WhitenessCheck:
    """The outcome of :func:`whiteness`: the failed statistics (empty when the sample passes) and the
    smallest departures from white noise that the check detects at its ``z``.

    Attributes:
        failures: one line per statistic outside its tolerance.
        n: the number of draws; ``D`` the number of entries of one draw.
        detectable_variance: the smallest relative error of the variance it detects, ``z·SE``.
        detectable_mean_correlation: the smallest mean correlation over all pairs of entries it detects.
        detectable_pair_correlation: the smallest correlation of any one pair it detects (Bonferroni ``z``).
    """

    failures: tuple[str, ...]
    n: int
    D: int
    detectable_variance: float
    detectable_mean_correlation: float
    detectable_pair_correlation: float

    @property
    def passed(self) -> bool:
        return not self.failures


def whiteness(samples: torch.Tensor | np.ndarray, variance: float = 1.0, z: float = Z) -> WhitenessCheck:
    """Check that ``n`` draws of a ``D``-vector (``samples`` of shape ``(n, D)``) look like white noise with
    mean 0, covariance ``variance·I``: four z-checks, each with false-failure rate ≤ ``false_failure_rate(z)``.

    1. mean: the grand mean over all ``n·D`` entries is 0 within ``z·SE``;
    2. variance: the mean of ``ξ²`` is ``variance`` within ``z·SE`` (SE from the sample; 0 for ±1 entries);
    3. the sum: ``S = Σ_k ξ_k/sqrt(D·variance)`` has ``E S² = 1 + (D − 1)·ρ̄`` with ``ρ̄`` the mean
       correlation between entries, so ``mean S² = 1`` within ``z·SE`` (the noise on a particle mean);
    4. every pair: ``C_kl = mean ξ_k ξ_l / variance`` is 0 within ``z_B·SE`` for all ``k < l``, ``z_B`` the
       Bonferroni-corrected z that keeps the false-failure rate of the whole family at that of ``z``.

    Lay the entries of consecutive steps side by side in one draw to test across steps too.
    """
    a = np.asarray(samples.detach().cpu() if torch.is_tensor(samples) else samples, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] < 2 or a.shape[1] < 2:
        raise ValueError(f"samples must have shape (n, D) with n, D ≥ 2, got {a.shape}")
    n, D = a.shape
    a = a / math.sqrt(variance)
    failures = []
    mean = mean_se(a)
    if not mean.agrees(0.0, z):
        failures.append(f"mean {mean.value:.3g} ± {mean.se:.2g} is not 0 (z = {mean.z_score(0.0):.1f})")
    sq = mean_se(a * a)
    if not sq.agrees(1.0, z):
        failures.append(f"variance ratio {sq.value:.4g} ± {sq.se:.2g} is not 1 (z = {sq.z_score(1.0):.1f})")
    S2 = mean_se(a.sum(1) ** 2 / D)
    if not S2.agrees(1.0, z):
        failures.append(
            f"the variance of the sum of the {D} entries is {S2.value:.4g} ± {S2.se:.2g} times the independent "
            f"value (mean correlation ≈ {(S2.value - 1) / (D - 1):.3g})"
        )
    C = a.T @ a / n  # (D, D)
    off = C[np.triu_indices(D, 1)]
    pairs = off.size
    z_pairs = float(_st.norm.isf(false_failure_rate(z) / (2 * pairs)))
    prod_se = math.sqrt(max(float(np.mean((a * a).mean(0))) ** 2, 1e-300) / n)  # ≈ 1/sqrt(n) under H0
    worst = int(np.argmax(np.abs(off)))
    if abs(off[worst]) > z_pairs * prod_se:
        k, l = (int(i[worst]) for i in np.triu_indices(D, 1))
        failures.append(
            f"entries {k} and {l} have correlation {off[worst]:.3g} (tolerance {z_pairs * prod_se:.2g} over "
            f"{pairs} pairs)"
        )
    return WhitenessCheck(
        failures=tuple(failures),
        n=n,
        D=D,
        detectable_variance=z * sq.se,
        detectable_mean_correlation=z * S2.se / (D - 1),
        detectable_pair_correlation=z_pairs * prod_se,
    )


@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` independent values with its Student-t confidence interval ``[lo, hi]``."""

    mean: float
    se: float
    lo: float
    hi: float
    n: int


def t_interval(values, level: float = 0.95) -> Interval:
    r"""``mean ± t_{n−1,(1+level)/2} · s/\sqrt{n}`` over the values (NaN bounds for ``n < 2``).

    Raises:
        ValueError: for no values or a level outside ``(0, 1)``.
    """
    a = np.asarray(values, dtype=np.float64).ravel()
    if a.size == 0:
        raise ValueError("t_interval needs at least one value")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    mean = float(a.mean())
    if a.size < 2:
        return Interval(mean, math.nan, math.nan, math.nan, 1)
    se = float(a.std(ddof=1) / math.sqrt(a.size))
    half = float(_st.t.ppf((1 + level) / 2, a.size - 1)) * se
    return Interval(mean, se, mean - half, mean + half, int(a.size))


@dataclass(frozen=True)
class PairedDifference:
    """``a − b`` over paired values (same seeds): its mean, t interval and the paired t-test's p-value."""

    mean: float
    lo: float
    hi: float
    n: int
    p_value: float


def paired_difference(a, b, level: float = 0.95) -> PairedDifference:
    """The paired difference ``a_i − b_i`` (``a``, ``b`` aligned by seed) and the two-sided paired t-test.

    The p-value is that of ``H0: E[a − b] = 0`` (``scipy.stats.ttest_rel``); NaN for ``n < 2`` or when
    every difference is equal (no spread to test against).
    """
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired values must have the same length, got {a.size} and {b.size}")
    d = t_interval(a - b, level)
    p = math.nan
    if a.size >= 2 and np.ptp(a - b) > 0:
        p = float(_st.ttest_rel(a, b).pvalue)
    return PairedDifference(d.mean, d.lo, d.hi, d.n, p)
