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
