r"""Small statistics used by the tests, the theory checks and the sweep tables: estimates with standard errors,
z-checks, fits, t intervals (also of positive quantities, on the log scale), paired tests, their power and
Holm's correction for a family of tests.

The project's rule for a statistical check: tolerance = $z\cdot\operatorname{SE}$ with ``z = 5`` (two-sided false-failure
rate ≈ 5.7e-7), and the smallest error it can detect stated next to it. The rule for a table of comparisons
(``meanfield sweep``, the experiment pages): each paired difference with its t interval, its raw and
Holm-adjusted p-value, and the smallest difference its seeds could have detected ([`detectable_difference`][meanfield.studies.stats.detectable_difference]).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats as _st
from scipy.optimize import brentq as _brentq

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
    "interval_text",
    "t_interval",
    "PairedDifference",
    "paired_difference",
    "LogInterval",
    "log_interval",
    "paired_t_power",
    "detectable_difference",
    "pairs_needed",
    "holm",
    "HolmFamily",
    "number_text",
    "p_text",
    "interval_cell",
    "mean_cell",
    "paired_cell",
    "holm_cell",
    "cost_text",
]

Z = 5.0


def false_failure_rate(z: float = Z) -> float:
    """Two-sided ``P(|N(0,1)| > z)``: how often a correct z-check fails by chance."""
    return float(2.0 * _st.norm.sf(z))


@dataclass(frozen=True)
class Estimate:
    r"""A Monte-Carlo estimate $\text{ value } \pm se$ (``se``: one standard error)."""

    value: float
    se: float

    def z_score(self, target: float) -> float:
        r"""``(value − target)/se`` ($\pm\inf$ for a mismatch with ``se = 0``)."""
        diff = self.value - target
        if self.se == 0:
            return 0.0 if diff == 0 else math.copysign(math.inf, diff)
        return diff / self.se

    def agrees(self, target: float, z: float = Z, bias: float = 0.0) -> bool:
        """``|value − target| ≤ z·se + bias`` (``bias``: a known bound on a deterministic error)."""
        return abs(self.value - target) <= z * self.se + bias


def mean_se(samples: torch.Tensor | np.ndarray) -> Estimate:
    r"""Mean of independent samples and its standard error $\mathrm{std}/\sqrt{n}$ (flattened)."""
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

    With $y_{se}$ (standard errors of ``y``) the fit is weighted by $(y/y_{se})^2$ (delta method) and the
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
    r"""A smooth function of replica means and its delete-one jackknife standard error.

    ``samples`` is an array with the replicas on its first axis, or a (nested) dict of such arrays, all with
    the same number B of replicas. ``stat`` receives the same structure with every array replaced by its
    mean over the replicas kept, and returns a number: the estimate is ``stat`` of all B means, the SE
    $\sqrt{(B - 1)/B \cdot \sum_b (\theta_{-b} - \bar{\theta})^2}$ over the B leave-one-out values (Efron & Stein 1981).
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
    r"""The outcome of [`whiteness`][meanfield.studies.stats.whiteness]: the failed statistics (empty when the sample passes) and the
    smallest departures from white noise that the check detects at its ``z``.

    Attributes:
        failures: one line per statistic outside its tolerance.
        n: the number of draws; ``D`` the number of entries of one draw.
        detectable_variance: the smallest relative error of the variance it detects, $z\cdot\operatorname{SE}$.
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
    r"""Check that ``n`` draws of a ``D``-vector (``samples`` of shape ``(n, D)``) look like white noise with
    mean 0, covariance $\mathrm{variance}\cdot I$: four z-checks, each with false-failure rate ≤ ``false_failure_rate(z)``.

    1. mean: the grand mean over all $n\cdot D$ entries is 0 within $z\cdot\operatorname{SE}$;
    2. variance: the mean of $\xi^2$ is ``variance`` within $z\cdot\operatorname{SE}$ (SE from the sample; 0 for ±1 entries);
    3. the sum: $S = \sum_k \xi_k/\sqrt{D\cdot\mathrm{variance}}$ has $\mathbb{E} S^2 = 1 + (D - 1)\cdot\bar{\rho}$ with $\bar{\rho}$ the mean
       correlation between entries, so $\text{ mean } S^2 = 1$ within $z\cdot\operatorname{SE}$ (the noise on a particle mean);
    4. every pair: ``C_kl = mean ξ_k ξ_l / variance`` is 0 within $z_B\cdot\operatorname{SE}$ for all ``k < l``, $z_B$ the
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

    @property
    def half_width(self) -> float:
        r"""$(hi - lo)/2 = t_{n-1,(1+\mathrm{level})/2}\cdot s/\sqrt{n}$: the $\pm$ of a table (NaN for ``n < 2``)."""
        return (self.hi - self.lo) / 2

    def text(self, digits: int = 3) -> str:
        """A table cell: ``"mean ± half-width"`` with ``digits`` decimals; the mean alone for ``n < 2``."""
        if self.n < 2:
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} ± {self.half_width:.{digits}f}"


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


def interval_text(values, digits: int = 3, empty: str = "—") -> str:
    """A table cell for ``values``: ``t_interval(values).text(digits)`` (``"mean ± half-width"``, the mean alone
    for one value), or ``empty`` where there are none."""
    return t_interval(values).text(digits) if len(values) else empty


@dataclass(frozen=True)
class PairedDifference:
    r"""$a - b$ over paired values (same seeds): its mean, t interval and the paired t-test's p-value.

    Attributes:
        mean: the mean paired difference $\bar{d}$.
        lo, hi: its Student-t interval $\bar{d} \pm t_{n-1,(1+\mathrm{level})/2}\cdot s_d/\sqrt{n}$ (NaN for ``n < 2``).
        n: the number of pairs.
        p_value: two-sided paired t-test of $\mathbb{E}[a - b] = 0$ (NaN for ``n < 2`` or no spread).
        sd: $s_d$, the sample standard deviation of the differences (``ddof = 1``; NaN for ``n < 2``).
    """

    mean: float
    lo: float
    hi: float
    n: int
    p_value: float
    sd: float = math.nan

    @property
    def half_width(self) -> float:
        r"""$(hi - lo)/2$: the half-width of the t interval, the $\pm$ of a table (df = $n - 1$)."""
        return (self.hi - self.lo) / 2

    def detectable(self, power: float = 0.8, alpha: float = 0.05, method: str = "t") -> float:
        """[`detectable_difference`][meanfield.studies.stats.detectable_difference] at this comparison's ``sd`` and ``n`` (NaN for ``n < 2``
        and where there is no test: the differences have no spread)."""
        if self.n < 2 or not math.isfinite(self.sd) or not math.isfinite(self.p_value):
            return math.nan
        return detectable_difference(self.sd, self.n, power, alpha, method)

    def pairs_needed(self, delta: float, power: float = 0.8, alpha: float = 0.05, method: str = "t") -> float:
        """[`pairs_needed`][meanfield.studies.stats.pairs_needed] for ``delta`` at this comparison's ``sd`` (NaN for ``n < 2`` and
        where there is no test)."""
        if self.n < 2 or not math.isfinite(self.sd) or not math.isfinite(self.p_value):
            return math.nan
        return pairs_needed(delta, self.sd, power, alpha, method)


def paired_difference(a, b, level: float = 0.95) -> PairedDifference:
    r"""The paired difference $a_i - b_i$ (``a``, ``b`` aligned by seed) and the two-sided paired t-test.

    The p-value is that of $H_0: \mathbb{E}[a - b] = 0$ (``scipy.stats.ttest_rel``); NaN for ``n < 2`` or when
    every difference is equal up to rounding (a spread below ``1e-12`` of the values: nothing to test against;
    then ``detectable`` and ``pairs_needed`` are NaN too, not the 0 of a zero ``sd``). ``sd`` is the differences' sample standard
    deviation, the input of [`PairedDifference.detectable`][meanfield.studies.stats.PairedDifference.detectable] and [`PairedDifference.pairs_needed`][meanfield.studies.stats.PairedDifference.pairs_needed].

    Raises:
        ValueError: ``a`` and ``b`` differ in length, or a value is NaN or infinite (a diverged run: which pairs
            to drop is the caller's choice, not a silent NaN).
    """
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired values must have the same length, got {a.size} and {b.size}")
    bad = np.flatnonzero(~(np.isfinite(a) & np.isfinite(b)))
    if bad.size:
        raise ValueError(
            f"paired_difference needs finite values; pairs {bad[:5].tolist()} are not (a = {a[bad[:3]].tolist()}, "
            f"b = {b[bad[:3]].tolist()}): drop those pairs from both a and b"
        )
    d = t_interval(a - b, level)
    p = math.nan
    scale = float(max(np.abs(a).max(initial=0.0), np.abs(b).max(initial=0.0), 1e-300))
    if a.size >= 2 and np.ptp(a - b) > 1e-12 * scale:  # equal up to rounding (1.1 − 1.0 vs 2.2 − 2.1): no spread
        p = float(_st.ttest_rel(a, b).pvalue)
    sd = float(np.std(a - b, ddof=1)) if a.size >= 2 else math.nan
    return PairedDifference(d.mean, d.lo, d.hi, d.n, p, sd)


@dataclass(frozen=True)
class LogInterval:
    r"""A positive quantity over ``n`` independent values, summarised on the log scale.

    Attributes:
        center: the geometric mean ``exp(mean ln x)``.
        lo, hi: ``exp(mean ln x ∓ t_{n−1,(1+level)/2}·SE(ln x))``, the t interval of the log values mapped back
            (an interval for the geometric mean, i.e. the median of a log-normal law; never below 0).
        factor: $\exp(t\cdot\operatorname{SE})$: the interval is ``center ×/÷ factor``.
        n: the number of values.
        log_se: ``SE(ln x) = s_{ln x}/√n``.
    """

    center: float
    lo: float
    hi: float
    factor: float
    n: int
    log_se: float


def log_interval(values, level: float = 0.95) -> LogInterval:
    r"""The t interval of ``ln x`` mapped back by ``exp``: $\exp(\bar{\ell} \pm t_{n-1,(1+\mathrm{level})/2}\cdot s_\ell/\sqrt{n})$,
    $\ell = \ln x$, for a positive quantity (an MSE) whose values span orders of magnitude.

    The arithmetic t interval of such values can reach below 0 and is dominated by the largest value; this
    one is the Student-t interval of the log values, exact for log-normal values (not the delta method,
    which would put $\ln \bar{x} \pm t\cdot\operatorname{SE}(\bar{x})/\bar{x}$ around the arithmetic mean). Its centre is the geometric mean, so it
    estimates ``exp E ln x`` (the median of a log-normal law), not ``E x``.

    Raises:
        ValueError: for no values, a value ≤ 0 or not finite, or a level outside ``(0, 1)``.
    """
    a = np.asarray(values, dtype=np.float64).ravel()
    if a.size and not (np.isfinite(a).all() and (a > 0).all()):
        raise ValueError(
            f"log_interval needs positive finite values, got {a[~(np.isfinite(a) & (a > 0))][:3]}"
        )
    iv = t_interval(np.log(a), level)
    if iv.n < 2:
        return LogInterval(math.exp(iv.mean), math.nan, math.nan, math.nan, 1, math.nan)
    half = iv.half_width

    def exp(x: float) -> float:  # e^x, inf beyond float64 (a huge spread of the logs), never OverflowError
        return math.exp(x) if x < 709.78 else math.inf

    return LogInterval(exp(iv.mean), exp(iv.lo), exp(iv.hi), exp(half), iv.n, iv.se)


_POWER_METHODS = ("t", "normal")


def _check_power_args(n: int | None, sd: float, alpha: float, power: float | None, method: str) -> None:
    if method not in _POWER_METHODS:
        raise ValueError(f"method must be one of {list(_POWER_METHODS)}, got {method!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if power is not None and not alpha < power < 1:
        raise ValueError(f"power must be in (alpha, 1) = ({alpha}, 1), got {power}")
    if not (math.isfinite(sd) and sd >= 0):
        raise ValueError(f"sd must be finite and ≥ 0, got {sd}")
    if n is not None and (int(n) != n or n < 2):
        raise ValueError(f"a paired t-test needs n ≥ 2 pairs, got {n}")


def _power_at(lam: float, n: int, alpha: float, method: str) -> float:
    r"""Two-sided power at noncentrality $\text{ lam } = \delta\sqrt{n}/sd$ (module functions below)."""
    if method == "normal":
        z = float(_st.norm.isf(alpha / 2))
        return float(_st.norm.sf(z - lam) + _st.norm.cdf(-z - lam))
    df = n - 1
    c = float(_st.t.isf(alpha / 2, df))
    return float(_st.nct.sf(c, df, lam) + _st.nct.sf(c, df, -lam))  # P(T < −c) = P(−T > c), −T ~ nct(−λ)


def paired_t_power(delta: float, sd: float, n: int, alpha: float = 0.05, method: str = "t") -> float:
    r"""The power of the two-sided paired t-test at level ``alpha`` with ``n`` pairs whose differences are
    $N(\mathrm{delta}, sd^2)$.

    $T = \bar d/(s_d/\sqrt n)$ has the noncentral t law with $n - 1$ degrees of freedom and
    noncentrality $\lambda = \delta\sqrt n/sd$; the test rejects when $|T| > c = t_{n-1, 1-\alpha/2}$, so

        power = P(T > c) + P(T < −c) = nct.sf(c, n − 1, λ) + nct.sf(c, n − 1, −λ)   (``method="t"``, exact;
        the lower tail as the upper tail of $-T$, which scipy's ``nct.cdf`` returns as NaN at large λ).

    ``method="normal"`` is the large-n approximation $\Phi(\lambda - z) + \Phi(-\lambda - z)$, $z = z_{1-\alpha/2}$ (known
    variance); at small n it overstates the power (3 pairs, α = 0.05: 0.80 where the t-test has 0.35).

    Raises:
        ValueError: for ``n < 2``, $sd \le 0$ or not finite, ``alpha`` outside ``(0, 1)``, an unknown method.
    """
    _check_power_args(n, sd, alpha, None, method)
    if sd == 0:
        raise ValueError("sd must be > 0 for a power (the t statistic is undefined without spread)")
    return _power_at(abs(delta) * math.sqrt(n) / sd, int(n), alpha, method)


def detectable_difference(
    sd: float, n: int, power: float = 0.8, alpha: float = 0.05, method: str = "t"
) -> float:
    r"""The smallest $|\delta|$ that the two-sided paired t-test at level ``alpha`` with ``n`` pairs detects with
    probability ``power``, when the paired differences have standard deviation ``sd``.

    $\delta = \lambda*\cdot sd/\sqrt n$ with $\lambda*$ the root of ``paired_t_power(λ) = power`` in the noncentrality
    ([`paired_t_power`][meanfield.studies.stats.paired_t_power], noncentral t with $n - 1$ degrees of freedom; ``scipy.optimize.brentq``).
    ``method="normal"`` gives the textbook $(z_{1-\alpha/2} + z_{\mathrm{power}})\cdot sd/\sqrt n$, which at 3 pairs is
    2.0× too small (80 % power, α = 0.05: λ* = 5.65 for the t-test against 2.80). With the observed ``sd``
    of a few seeds this is a planning number: ``sd`` itself is uncertain (from 3 seeds the 95 % interval of
    the true sd is 0.52–6.3 times the observed one). ``sd = 0`` gives 0.

    Raises:
        ValueError: for ``n < 2``, ``sd < 0``, ``power`` outside ``(alpha, 1)``, an unknown method.
    """
    _check_power_args(n, sd, alpha, power, method)
    if sd == 0:
        return 0.0
    n = int(n)
    if method == "normal":
        lam = float(_st.norm.isf(alpha / 2) + _st.norm.isf(1 - power))
    else:
        hi = float(_st.norm.isf(alpha / 2) + _st.norm.isf(1 - power))
        while _power_at(hi, n, alpha, method) < power:
            hi *= 2
        lam = float(
            _brentq(lambda x: _power_at(x, n, alpha, method) - power, 0.0, hi, xtol=1e-12, rtol=1e-12)
        )
    return lam * sd / math.sqrt(n)


def pairs_needed(
    delta: float,
    sd: float,
    power: float = 0.8,
    alpha: float = 0.05,
    method: str = "t",
    max_pairs: int = 10**7,
) -> int:
    r"""The smallest number of pairs $n \ge 2$ whose two-sided paired t-test at level ``alpha`` detects a
    mean difference ``delta`` with probability at least ``power``, the differences' sd being ``sd``.

    The smallest ``n`` with ``paired_t_power(delta, sd, n, alpha) ≥ power`` (noncentral t, exact for a known
    ``sd``); ``method="normal"`` uses the normal power instead, close to $\lceil((z_{1-\alpha/2} + z_{\mathrm{power}})\cdot sd/\delta)^2\rceil$
    (smaller than the t answer by about 2 pairs). With ``sd`` measured on a few seeds this is a planning
    estimate. ``sd = 0`` gives 2.

    Raises:
        ValueError: for ``delta = 0`` or not finite, ``sd < 0``, ``power`` outside ``(alpha, 1)``, an unknown
            method, or an answer above ``max_pairs``.
    """
    _check_power_args(None, sd, alpha, power, method)
    if not (math.isfinite(delta) and delta != 0):
        raise ValueError(f"delta must be finite and ≠ 0, got {delta}")
    if sd == 0:
        return 2
    delta = abs(delta)

    def ok(n: int) -> bool:
        return _power_at(delta * math.sqrt(n) / sd, n, alpha, method) >= power

    z = float(_st.norm.isf(alpha / 2) + _st.norm.isf(1 - power))
    guess = (z * sd / delta) ** 2
    if guess > max_pairs:
        raise ValueError(f"more than max_pairs = {max_pairs} pairs are needed (about {guess:.3g})")
    n = max(2, math.ceil(guess))
    while n > 2 and ok(n - 1):
        n -= 1
    while not ok(n):
        n += 1
        if n > max_pairs:
            raise ValueError(f"more than max_pairs = {max_pairs} pairs are needed")
    return n


def holm(p_values) -> np.ndarray:
    r"""Holm's step-down adjusted p-values of a family of tests (Holm 1979): with the ``m`` finite p-values
    sorted, $p_1 \le \dots \le p_m$,

    $$
    \tilde{p}_i = \min(1, \max_{j \le i} (m - j + 1)\cdot p_j),
    $$

    so that rejecting every hypothesis with $\tilde{p} \le \alpha$ keeps the family-wise error rate at α under any
    dependence. The adjusted values are in the input's order, monotone in the raw ones, ≥ the raw ones and
    capped at 1. NaN p-values (a comparison without a test) are not part of the family and stay NaN.

    Raises:
        ValueError: for a p-value outside ``[0, 1]``.
    """
    p = np.asarray(p_values, dtype=np.float64).ravel()
    out = np.full(p.shape, math.nan)
    ok = ~np.isnan(p)
    q = p[ok]
    if ((q < 0) | (q > 1)).any():
        raise ValueError(f"p-values must be in [0, 1], got {q[(q < 0) | (q > 1)][:3]}")
    m = q.size
    order = np.argsort(q, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * q[order]))
    result = np.empty(m)
    result[order] = adjusted
    out[ok] = result
    return out


class HolmFamily:
    r"""The paired comparisons of one table, adjusted together by Holm's method ([`holm`][meanfield.studies.stats.holm]).

    A table is written cell by cell before its family is complete, so each paired cell is first a
    placeholder; [`fill`][meanfield.studies.stats.HolmFamily.fill] replaces every placeholder once all ``m`` p-values are known, with the
    adjusted ``p̃`` of that comparison among the ``m``::

        family = HolmFamily()
        text = f"| A − B | {family.cell(d_ab, 3)} |\n| A − C | {family.cell(d_ac, 3)} |\n"
        text = family.fill(text, lambda d, q, digits: f"{d.mean:+.{digits}f} (Holm {q:.2g})")
    """

    def __init__(self) -> None:
        self._members: list[tuple[PairedDifference, int | None]] = []

    @staticmethod
    def paired(d: PairedDifference, digits: int | None = None) -> str:
        """``d``'s paired cell: inside a [`table`][meanfield.studies.stats.HolmFamily.table], a placeholder of the active family
        (filled with the Holm-adjusted p); outside any, [`paired_cell`][meanfield.studies.stats.paired_cell]."""
        family = _ACTIVE_FAMILY.get()
        return paired_cell(d, digits) if family is None else family.cell(d, digits)

    @staticmethod
    def active() -> HolmFamily | None:
        """The family of the [`table`][meanfield.studies.stats.HolmFamily.table] being built (the innermost one), or ``None`` outside any."""
        return _ACTIVE_FAMILY.get()

    @classmethod
    def table(
        cls,
        render: Callable[[PairedDifference, float, int | None], str],
        finish: Callable[[str, int], str] = lambda text, m: text,
    ) -> Callable[[Callable[..., object]], Callable[..., object]]:
        """Decorator: a function that builds one table gets Holm's adjustment over all its paired cells.

        While the decorated function runs, [`active`][meanfield.studies.stats.HolmFamily.active] is a fresh family, so a cell helper can write
        ``family.cell(d, digits)`` when ``HolmFamily.active()`` is not ``None`` (and a plain cell otherwise).
        The function returns the table's text, or a tuple whose first item is the text; that text comes back
        as ``finish(fill(text, render), m)`` with ``m`` the family's size (``finish`` adds a legend, say).
        Tables built inside the function (nested [`table`][meanfield.studies.stats.HolmFamily.table] calls) have families of their own.
        """

        def decorate(build: Callable[..., object]) -> Callable[..., object]:
            @functools.wraps(build)
            def wrapped(*args, **kwargs):
                family = cls()
                token = _ACTIVE_FAMILY.set(family)
                try:
                    result = build(*args, **kwargs)
                finally:
                    _ACTIVE_FAMILY.reset(token)
                text, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
                text = finish(family.fill(text, render), len(family))
                return (text, *rest) if rest else text

            return wrapped

        return decorate

    def __len__(self) -> int:
        return len(self._members)

    def cell(self, d: PairedDifference, digits: int | None) -> str:
        """A placeholder for ``d``'s cell (printed with ``digits`` decimals) until [`fill`][meanfield.studies.stats.HolmFamily.fill]."""
        self._members.append((d, digits))
        return f"\x00{len(self._members) - 1}\x00"

    def fill(self, text: str, render: Callable[[PairedDifference, float, int | None], str]) -> str:
        """``text`` with each placeholder replaced by ``render(d, p̃, digits)``, ``p̃`` Holm-adjusted over
        the family.

        Raises:
            ValueError: if ``text`` lacks one of the family's placeholders (a cell made but not printed
                would still count in the adjustment, silently).
        """
        adjusted = holm([d.p_value for d, _ in self._members])
        for i, ((d, digits), q) in enumerate(zip(self._members, adjusted)):
            mark = f"\x00{i}\x00"
            if mark not in text:
                raise ValueError(f"cell {i} of the Holm family ({len(self)} cells) is not in the table")
            text = text.replace(mark, render(d, float(q), digits))
        return text


_ACTIVE_FAMILY: ContextVar[HolmFamily | None] = ContextVar("meanfield_holm_family", default=None)


# --------------------------------------------------------------------------------------------------------
# Table cells: one format for every table of comparisons


def number_text(x: float, digits: int | None = None, *, sign: bool = False, significant: int = 3) -> str:
    """A number in a table: ``digits`` decimals, or ``significant`` significant digits (``g``); ``+`` for a
    positive one with ``sign``; ``—`` when it is not a finite number (NaN, ±inf, ``None``)."""
    if x is None or not math.isfinite(x):
        return "—"
    plus = "+" if sign else ""
    return f"{x:{plus}.{digits}f}" if digits is not None else f"{x:{plus}.{significant}g}"


def p_text(p: float) -> str:
    """A p-value to 2 significant digits (``0.0012``, ``3.4e-07``), ``—`` for NaN (no test)."""
    return number_text(p, significant=2)


def interval_cell(
    center: float,
    lo: float,
    hi: float,
    digits: int | None = None,
    *,
    sign: bool = False,
    significant: int = 3,
) -> str:
    """``center (lo – hi)``: an estimate and its interval; the centre alone when the interval is not finite
    (one value); a centre that is not finite reads ``—``."""

    def text(x: float) -> str:
        return number_text(x, digits, sign=sign, significant=significant)

    if not (math.isfinite(lo) and math.isfinite(hi)):
        return text(center)
    return f"{text(center)} ({text(lo)} – {text(hi)})"


def mean_cell(values, digits: int | None = None, *, log: bool = False, level: float = 0.95) -> str:
    r"""The mean of ``values`` and its ``level`` Student-t interval, ``mean (lo – hi)``
    ([`t_interval`][meanfield.studies.stats.t_interval]); with ``log``, the geometric mean and the t interval of the logs mapped
    back ([`log_interval`][meanfield.studies.stats.log_interval], positive values). ``—`` for no values."""
    a = np.asarray(values, dtype=np.float64).ravel()
    if a.size == 0:
        return "—"
    if log:
        li = log_interval(a, level)
        return interval_cell(li.center, li.lo, li.hi, digits)
    iv = t_interval(a, level)
    return interval_cell(iv.mean, iv.lo, iv.hi, digits)


def paired_cell(d: PairedDifference, digits: int | None = None, *, scale: float = 1.0) -> str:
    """``+Δ (lo – hi), p = …``: a mean paired difference, its t interval and the paired t-test's p
    (values times ``scale``, e.g. 1000 for milli-units; the p is unchanged)."""
    iv = interval_cell(d.mean * scale, d.lo * scale, d.hi * scale, digits, sign=True)
    return f"{iv}, p = {p_text(d.p_value)}"


def holm_cell(d: PairedDifference, q: float, digits: int | None = None, *, scale: float = 1.0) -> str:
    """``+Δ (lo – hi), p = …, Holm …, δ80 …``: [`paired_cell`][meanfield.studies.stats.paired_cell] with the Holm-adjusted p ``q``
    of its family and the smallest difference its test detects with 80 % power at α = 0.05
    ([`PairedDifference.detectable`][meanfield.studies.stats.PairedDifference.detectable]); the ``render`` of a
    [`HolmFamily.table`][meanfield.studies.stats.HolmFamily.table]."""
    return (
        f"{paired_cell(d, digits, scale=scale)}, Holm {p_text(q)}, "
        f"δ80 {number_text(d.detectable() * scale, digits)}"
    )


def cost_text(seconds: float) -> str:
    """A cost in hours, ``"1.23 h"``, from seconds (e.g. the sum of the runs' ``wall_time_s``)."""
    return f"{number_text(seconds / 3600, 2)} h"
