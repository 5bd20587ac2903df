r"""Differential entropy of a particle cloud, and the Kullback–Leibler divergence between laws.

The differential entropy of a law $\rho$ on $\mathbb{R}^d$ with density $f$ is
$H(\rho) = -\int f \log f = -\mathbb{E}\log f(X)$, and the divergence of $\rho$ from $\pi$ is
$\mathrm{KL}(\rho \,\|\, \pi) = \int \rho \log(\rho / \pi)$. Both are estimated from $M$ particles
$X_1, \dots, X_M \sim \rho$ (one cloud per replica) through the distance $\varepsilon_{(j),i}$ from $X_i$ to
its $j$-th nearest neighbour among the other particles (scipy's ``cKDTree``, one thread).

Entropy methods ([`entropy`][meanfield.metrics.information.entropy]; ``"auto"`` is ``"knn"`` for $d \le 3$ and ``"weighted"`` for $d \ge 4$ where its
weights are well conditioned, ``"knn"`` again from $d = 12$: [`resolve_entropy_method`][meanfield.metrics.information.resolve_entropy_method]):

* ``"knn"``: Kozachenko–Leonenko (1987) with the digamma constants (Kraskov–Stögbauer–Grassberger 2004),

  $$\hat H_k = \psi(M) - \psi(k) + \log V_d + \frac{d}{M} \sum_{i=1}^M \log \varepsilon_{(k),i},
  \qquad V_d = \frac{\pi^{d/2}}{\Gamma(1 + d/2)},$$

  exact in expectation for a locally uniform law ($\psi(M) - \psi(k) = -\mathbb{E}\log$ of the mass of the
  ball, a Beta$(k, M - k)$ variable); its bias is of order $(k/M)^{2/d}$ (the curvature of $f$) plus tail
  and boundary terms, larger than the $M^{-1/2}$ noise once $d \ge 4$ (Berrett, Samworth & Yuan 2019).
* ``"weighted"``: the weighted Kozachenko–Leonenko estimator of Berrett, Samworth & Yuan (2019, Ann.
  Statist. 47, 288–318), $\hat H^w = \sum_{j=1}^k w_j \hat H_j$ with weights that cancel the first
  $\lfloor d/4 \rfloor$ terms $\propto \Gamma(j + 2\ell/d)/\Gamma(j) \, M^{-2\ell/d}$ of the bias expansion:

  $$\sum_{j=1}^k w_j = 1, \qquad \sum_{j=1}^k w_j \frac{\Gamma(j + 2\ell/d)}{\Gamma(j)} = 0
  \quad (\ell = 1, \dots, \lfloor d/4 \rfloor),$$

  the vector of least Euclidean norm under these constraints ([`bsy_weights`][meanfield.metrics.information.bsy_weights], as in the authors' own
  implementation, ``L2OptW`` of the R package IndepTest), $\hat H_j$ the ``"knn"`` estimate at rank $j$
  (with $\psi(M)$ where the paper writes $\log(M - 1)$: they differ by less than $1/M$). For $d \le 3$
  there is no constraint and the weights are $(0, \dots, 0, 1)$: ``"weighted"`` is ``"knn"`` at the same
  $k$. The default $k$ ([`default_weighted_k`][meanfield.metrics.information.default_weighted_k]) keeps $\|w\|_2 \le 3$ up to its cap
  ($k \le 100$, $k \le M/10$): for $d \ge 12$, or $d = 8$–11 with few particles, it cannot, and ``"auto"``
  takes ``"knn"`` there ([`resolve_entropy_method`][meanfield.metrics.information.resolve_entropy_method]).
* ``"gaussian"``: the entropy of the Gaussian with the sample's covariance,
  $\hat H = \tfrac12 \log\det(2\pi e \hat\Sigma)$ ($\hat\Sigma$ with divisor $M - 1$). It is $H$ for a
  Gaussian law and an upper bound on $H$ for any law with that covariance; for a Gaussian its bias is
  $\tfrac12 \sum_{i=1}^d [\psi(\tfrac{M-i}{2}) + \log\tfrac{2}{M-1}] \approx -\tfrac{d(d+1)}{4M}$.

Standard errors: two, which bracket the true one. Each estimate is a mean over particles of per-particle
terms $t_i$ ($t_i = \psi(M) - \psi(k) + \log V_d + d \log \varepsilon_{(k),i}$ for ``"knn"``, the
$w$-weighted sum of these over $j$ for ``"weighted"``, the influence term
$\tfrac12 (X_i - \bar X)^\top \hat\Sigma^{-1} (X_i - \bar X)$ for ``"gaussian"``).

* ``se`` $= \mathrm{sd}(t_1, \dots, t_M) / \sqrt M$. For ``"gaussian"`` the delta-method standard error, valid
  for any law with finite fourth moments. For the $k$-NN estimators the estimate Berrett, Samworth & Yuan
  (2019) use for confidence intervals: the estimator is efficient, $M \operatorname{Var} \hat H \to
  \operatorname{Var} \log f(X)$, for ``"knn"`` when $d \le 3$ and for ``"weighted"`` in any $d$, as
  $k \to \infty$ with $M$, and then $\mathrm{sd}(t)^2 \to \operatorname{Var}\log f(X)$ too. At a fixed small
  $k$ neighbouring particles share neighbours, which makes the $t_i$ positively correlated: the true
  variance is larger than $\mathrm{sd}(t)^2 / M$, most where $\operatorname{Var}\log f$ is small (a uniform
  law; a KL with $\rho \approx \pi$, where it cancels). Measured (400 replicas of $M = 10^3$,
  ``benchmarks/entropy.py``): replica sd / se = 1.15–1.26.
* ``se_jackknife`` $= \big(\frac{M-1}{M} \sum_m (\hat H_{(-m)} - \hat H_{(\cdot)})^2\big)^{1/2}$, the jackknife
  over particles, exact and cheap here: deleting particle $m$ removes $t_m$ and moves the $j$-th neighbour
  of each particle that had $m$ among its $j$ nearest to the $(j+1)$-th, so one extra neighbour per particle
  gives all $M$ deletions. By the Efron–Stein inequality it is too large in expectation (for the estimator
  at $M - 1$ particles). Measured: replica sd / se_jackknife = 0.61–0.80. For ``"gaussian"`` it equals
  ``se``.

Over 400 replicas the replica-to-replica sd lay between the two for every law and estimator measured
(a Gaussian and a uniform law, ``"weighted"`` in $d = 5$, both KL forms at $\rho = \pi$;
``tests/metrics/test_information.py`` asserts it): read ``se`` as optimistic and ``se_jackknife`` as
conservative (``docs/entropy.md`` has the tables).

Duplicate particles: a particle with $k$ or more exact copies has $\varepsilon_{(k),i} = 0$ and the
estimate would be $-\infty$ (the law has an atom, its differential entropy is $-\infty$); the $k$-NN methods
raise ``ValueError`` saying how many particles, rather than return $-\infty$.

All computations run in float64 NumPy on the CPU (not differentiable); results are float64 tensors.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.special
import torch
from scipy.spatial import cKDTree

from .._checks import check_finite_tensor, check_int

__all__ = [
    "DEFAULT_K",
    "ENTROPY_METHODS",
    "EntropyEstimate",
    "KLEstimate",
    "bsy_weights",
    "default_weighted_k",
    "entropy",
    "gaussian_entropy_bias",
    "kl",
    "resolve_entropy_method",
]

ENTROPY_METHODS = ("knn", "weighted", "gaussian")
"""The entropy estimators [`entropy`][meanfield.metrics.information.entropy] knows (``"auto"`` picks one of the first two by dimension)."""

DEFAULT_K = {"knn": 3, "weighted": None}
"""The default number of neighbours: 3 for ``"knn"`` (and the two-sample [`kl`][meanfield.metrics.information.kl]); for ``"weighted"``
``None`` stands for [`default_weighted_k`][meanfield.metrics.information.default_weighted_k]."""


@functools.lru_cache(maxsize=256)  # a pure function of (M, d), asked by the method's choice and by k's
def default_weighted_k(M: int, d: int) -> int:
    r"""The default largest neighbour rank of ``"weighted"``: the smallest $k \ge 10$ whose weights
    ([`bsy_weights`][meanfield.metrics.information.bsy_weights]) have $\|w\|_2 \le 3$, capped at $\min(100, \max(10, \lfloor M/10 \rfloor), M - 2)$.

    The noise of $\hat H^w$ grows with $\|w\|_2$ (the weights alternate in sign) and its bias with $k/M$:
    this gives $k = 10$ for $4 \le d \le 7$ (one constraint, $\|w\|_2 \approx 1.1$) and larger $k$ from
    $d = 8$ on, where a second constraint gives the weights at $k = 10$ a norm of 7.7 (docs/entropy.md):
    $k = 36$ for $d = 8$, 64 for $d = 10$; from $d = 12$ (three constraints) the cap, $k = 100$.
    """
    cap = max(1, min(100, max(10, M // 10), M - 2))
    k = min(10, cap)
    while k < cap and np.linalg.norm(bsy_weights(k, d)) > 3.0:
        k += 1
    return k


# ----------------------------------------------------------------------------------------------- results


def _format(value: torch.Tensor, se: torch.Tensor, jackknife: torch.Tensor | None) -> str:
    if value.dim() == 0:
        extra = f", jackknife ± {float(jackknife):.2g}" if jackknife is not None else ""
        return f"{float(value):.4g} ± {float(se):.2g}{extra}"
    shown = ", ".join(f"{float(v):.4g} ± {float(s):.2g}" for v, s in zip(value[:3], se[:3]))
    return f"[{shown}{', …' if value.numel() > 3 else ''}] (B={value.numel()})"


class _Scalar:
    """``float(result)`` and ``result.item()`` for a result of one replica."""

    value: torch.Tensor

    def item(self) -> float:
        """The estimate as a float; only for one replica (a 0-d result or ``B = 1``)."""
        if self.value.numel() != 1:
            raise ValueError(
                f"item() needs one replica, this result has {self.value.numel()}: use .value (shape (B,))"
            )
        return float(self.value.reshape(()))

    def __float__(self) -> float:
        return self.item()


@dataclass(frozen=True, repr=False)
class EntropyEstimate(_Scalar):
    r"""An estimate of the differential entropy $H = -\int f \log f$ (nats), per replica.

    Attributes:
        value: the estimate, shape ``()`` for one ``(M, d)`` cloud or ``(B,)``.
        se: its standard error $\mathrm{sd}(t_i)/\sqrt M$, same shape; optimistic at a fixed $k$ (the
            replica sd measured 1.15–1.26 times it, module docstring).
        method: ``"knn"``, ``"weighted"`` or ``"gaussian"``.
        k: the neighbour rank (``"knn"``) or the largest rank (``"weighted"``); ``None`` for ``"gaussian"``.
        M: particles per replica.
        d: dimension.
        se_jackknife: the jackknife standard error, same shape: too large in expectation (Efron–Stein;
            the replica sd measured 0.61–0.80 times it). Equal to ``se`` for ``"gaussian"``.
    """

    value: torch.Tensor
    se: torch.Tensor
    method: str
    k: int | None
    M: int
    d: int
    se_jackknife: torch.Tensor | None = None

    def __repr__(self) -> str:
        k = f", k={self.k}" if self.k is not None else ""
        return f"Entropy({self.method}{k}, M={self.M}, d={self.d}: {_format(self.value, self.se, self.se_jackknife)})"


@dataclass(frozen=True, repr=False)
class KLEstimate(_Scalar):
    r"""An estimate of $\mathrm{KL}(\rho \,\|\, \pi)$ (nats), per replica.

    Attributes:
        value: the estimate, shape ``()`` or ``(B,)``; it can come out below 0 by noise and bias.
        se: its standard error, same shape.
        method: ``"knn"`` (two samples, Wang–Kulkarni–Verdú) or, against a log-density, the entropy
            method used (``"knn"``, ``"weighted"``, ``"gaussian"``).
        reference: ``"sample"`` ($\pi$ given by particles) or ``"density"`` ($\pi$ by its log-density).
        k: the neighbour rank (largest rank for ``"weighted"``); ``None`` for ``"gaussian"``.
        M: particles of $\rho$ per replica.
        N: particles of $\pi$ per replica (``None`` against a density).
        d: dimension.
        se_jackknife: the jackknife standard error (over $x$, and over $y$ for two samples), same shape;
            too large in expectation (Efron–Stein).
    """

    value: torch.Tensor
    se: torch.Tensor
    method: str
    reference: str
    k: int | None
    M: int
    N: int | None
    d: int
    se_jackknife: torch.Tensor | None = None

    def __repr__(self) -> str:
        k = f", k={self.k}" if self.k is not None else ""
        n = f", N={self.N}" if self.N is not None else ", π=density"
        return f"KL({self.method}{k}, M={self.M}{n}, d={self.d}: {_format(self.value, self.se, self.se_jackknife)})"


# ------------------------------------------------------------------------------------------------- checks


def _cloud(name: str, x: object) -> torch.Tensor:
    if not torch.is_tensor(x):
        raise TypeError(f"{name} must be a torch.Tensor of shape (M, d) or (B, M, d), got {type(x).__name__}")
    if x.dim() not in (2, 3):
        raise ValueError(f"{name} must have shape (M, d) or (B, M, d), got shape {tuple(x.shape)}")
    if x.shape[-1] == 0 or (x.dim() == 3 and x.shape[0] == 0):
        raise ValueError(f"{name} must have d ≥ 1 and B ≥ 1, got shape {tuple(x.shape)}")
    # A NaN or Inf makes the sum non-finite: one cheap pass, the full (slower) check only then.
    if not x.is_floating_point() or not math.isfinite(float(x.sum())):
        check_finite_tensor(name, x)
    return x


def _k(k: object, M: int, name: str = "x") -> int:
    if isinstance(k, numbers.Integral) and not isinstance(k, bool):
        k = int(k)  # a numpy integer reads as the int it holds
    check_int("k", k)
    if M < k + 2:
        raise ValueError(
            f"{name} needs at least k + 2 = {k + 2} particles per replica (a k-th neighbour, and one more for "
            f"the jackknife), got M = {M}"
        )
    return k


def resolve_entropy_method(method: str, d: int, M: int | None = None) -> str:
    r"""The method ``"auto"`` stands for in dimension ``d`` with ``M`` particles: ``"knn"`` for ``d ≤ 3``;
    ``"weighted"`` where its default weights ([`default_weighted_k`][meanfield.metrics.information.default_weighted_k])
    reach $\|w\|_2 \le 3$ (every $d \le 7$; $d = 8$–11 from $M \approx 360$–830; ``M=None``: a large $M$); else
    ``"knn"`` again: past the cap on $k$ (from $d = 12$) the weights' norm grows to 11.7 ($d = 12$), 121 ($d = 16$)
    and 1,709 ($d = 20$), and the weighted estimate's noise with it (at $d = 20$, $M = 2000$: se ≈ 20 nats,
    where ``"knn"`` has 0.05 and a bias of about 1 nat)."""
    if not isinstance(method, str) or method != "auto" and method not in ENTROPY_METHODS:
        raise ValueError(f"method must be one of {['auto', *ENTROPY_METHODS]}, got {method!r}")
    if method != "auto":
        return method
    if d <= 3:
        return "knn"
    k = default_weighted_k(10**6 if M is None else M, d)
    return "weighted" if np.linalg.norm(bsy_weights(k, d)) <= 3.0 else "knn"


# ---------------------------------------------------------------------------------------------- estimators


def _log_unit_ball(d: int) -> float:
    """$\\log V_d = \\tfrac d2 \\log\\pi - \\log\\Gamma(1 + d/2)$."""
    return 0.5 * d * math.log(math.pi) - math.lgamma(1 + 0.5 * d)


def _positive(name: str, distance: np.ndarray, replica: int, what: str) -> None:
    zero = int((distance <= 0).sum())
    if zero:
        raise ValueError(
            f"{name} has {zero} particles in replica {replica} at distance 0 from their {what} "
            "(duplicate particles: the law has an atom and its differential entropy is −∞); the k-NN "
            "estimators need distinct particles (a larger k tolerates fewer than k copies)"
        )


def bsy_weights(k: int, d: int) -> np.ndarray:
    r"""The weights $w \in \mathbb{R}^k$ of the weighted Kozachenko–Leonenko estimator.

    The least-norm solution of $\sum_j w_j = 1$ and $\sum_j w_j \Gamma(j + 2\ell/d)/\Gamma(j) = 0$ for
    $\ell = 1, \dots, \lfloor d/4 \rfloor$ (Berrett, Samworth & Yuan 2019, eq. (2) and §3), computed as
    $w = G^\top (G G^\top)^{-1} e_1$ with $G_{\ell j} = \Gamma(j + 2\ell/d)/\Gamma(j)$ ($G_{0j} = 1$).
    For $d \le 3$, or when $k \le \lfloor d/4 \rfloor$ leaves no freedom, the weights are $(0, \dots, 0, 1)$.
    """
    check_int("k", k)
    check_int("d", d)
    constraints = d // 4
    if constraints == 0 or k <= constraints:
        return np.eye(k)[-1]
    j = np.arange(1, k + 1, dtype=np.float64)
    ells = np.arange(0, constraints + 1, dtype=np.float64)[:, None]  # (L + 1, 1)
    G = np.exp(scipy.special.gammaln(j + 2 * ells / d) - scipy.special.gammaln(j))  # (L + 1, k)
    target = np.eye(constraints + 1)[0]
    return G.T @ np.linalg.solve(G @ G.T, target)  # (k,)


def _log_ranks(
    name: str, x: np.ndarray, y: np.ndarray, ranks: int, used: np.ndarray, replica: int, what: str
):
    """``log`` of the distances from each ``x_i`` to its 1st … ``ranks``-th nearest particle of ``y`` (``y is x``:
    the other particles), shape ``(M, ranks)``, and their indices into ``y``; raises where a distance at a rank
    in ``used`` (a boolean mask over the first ranks) is 0 (duplicate particles)."""
    skip = int(y is x)  # x to itself: column 0 is x_i
    distance, index = cKDTree(y).query(x, k=ranks + skip)  # (M, ranks + skip)
    if skip:  # with duplicates x_i need not come first: put it in column 0, its twin where x_i was
        rows, pos = np.nonzero(index == np.arange(len(x))[:, None])
        index[rows, pos] = index[rows, 0]
    distance, index = distance[:, skip:], index[:, skip:]  # (M, ranks)
    _positive(name, distance[:, : used.size][:, used], replica, what)
    with np.errstate(divide="ignore"):
        return np.log(distance), index  # -inf only at ranks outside ``used``


def _deletion_changes(step: np.ndarray, index: np.ndarray, size: int) -> np.ndarray:
    r"""For each particle $m$ of a cloud of ``size``, the total change of the other particles' terms when $m$
    is deleted: the $j$-th neighbour of every $i$ that has $m$ at rank $r \le j$ becomes the $(j+1)$-th, so
    term $i$ changes by $\sum_{j \ge r}$ ``step[i, j]``. ``step`` and ``index`` are ``(M, k)``."""
    after = np.cumsum(step[:, ::-1], axis=1)[:, ::-1]  # (M, k): Σ_{j ≥ r} step[i, j]
    return np.bincount(index.ravel(), weights=after.ravel(), minlength=size)  # (size,)


def _knn_entropy(
    x: np.ndarray, w: np.ndarray, name: str, replica: int
) -> tuple[float, np.ndarray, np.ndarray]:
    """``Σ_j w_j Ĥ_j`` of one cloud ``(M, d)``: the estimate, the per-particle terms ``t`` ``(M,)`` and the
    jackknife pseudo-terms ``t − Δ`` ``(M,)`` (``Δ_m``: the change of the other terms when ``m`` is deleted)."""
    M, d = x.shape
    k = w.size
    used = w != 0
    log_eps, index = _log_ranks(
        name, x, x, k + 1, used, replica, f"nearest neighbour number {np.argmax(used) + 1}"
    )
    j = np.arange(1, k + 1)
    constants = scipy.special.digamma(M) - scipy.special.digamma(j) + _log_unit_ball(d)  # (k,)
    with np.errstate(invalid="ignore"):
        terms = np.where(used, constants + d * log_eps[:, :k], 0.0)  # (M, k)
        step = np.where(used, d * (log_eps[:, 1:] - log_eps[:, :k]), 0.0) * w  # (M, k)
    t = terms @ w  # (M,)
    return float(t.mean()), t, t - _deletion_changes(step, index[:, :k], M)


def gaussian_entropy_bias(M: int, d: int) -> float:
    r"""$\mathbb{E}\hat H - H$ of the ``"gaussian"`` estimate from $M$ i.i.d. draws of a Gaussian in $\mathbb{R}^d$, exactly.

    $(M - 1)\hat\Sigma$ is Wishart with $M - 1$ degrees of freedom, so
    $\mathbb{E}\log\det\hat\Sigma - \log\det\Sigma = \sum_{i=1}^d \psi(\tfrac{M-i}{2}) + d\log\tfrac{2}{M-1}$ and

    $$\mathbb{E}\hat H - H = \tfrac12 \sum_{i=1}^d \Big[\psi\big(\tfrac{M-i}{2}\big) + \log\tfrac{2}{M-1}\Big]
      \approx -\frac{d(d+1)}{4M},$$

    whatever the mean and covariance. Also exact for the particles of a chain that are exchangeable and jointly
    Gaussian (``MeanFieldLangevin`` with quadratic $V$ and $W$ from a Gaussian start): their spreads
    $x_i - \bar x$ are $N(0, (I - \mathbf{1}\mathbf{1}^\top/M) \otimes \Sigma_y)$, so $\sum_i (x_i - \bar x)(x_i - \bar x)^\top$
    is Wishart with $M - 1$ degrees of freedom, as for $M$ i.i.d. draws of covariance $\Sigma_y$.

    Raises:
        TypeError: ``M`` or ``d`` not an integer.
        ValueError: $M \le d$ (the sample covariance is singular).
    """
    M, d = check_int("M", M), check_int("d", d)
    if d < 1 or M <= d:
        raise ValueError(
            f"gaussian_entropy_bias needs d ≥ 1 and M > d (a non-singular sample covariance), got M = {M}, d = {d}"
        )
    return 0.5 * float(
        sum(scipy.special.digamma((M - i) / 2) for i in range(1, d + 1)) + d * math.log(2 / (M - 1))
    )


def _gaussian(x: np.ndarray, name: str, replica: int) -> tuple[float, np.ndarray]:
    """$\\tfrac12 \\log\\det(2\\pi e \\hat\\Sigma)$ and the influence terms $\\tfrac12 z_i^\\top z_i$."""
    M, d = x.shape
    centred = x - x.mean(axis=0)  # (M, d)
    cov = centred.T @ centred / (M - 1)  # (d, d)
    try:
        chol = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        raise ValueError(
            f"{name} has a singular sample covariance in replica {replica} (the particles lie in a subspace, "
            f"or M = {M} ≤ d = {d}): the Gaussian entropy is −∞"
        ) from None
    z = np.linalg.solve(chol, centred.T)  # (d, M) whitened
    value = 0.5 * d * math.log(2 * math.pi * math.e) + float(np.log(np.diag(chol)).sum())
    return value, 0.5 * (z * z).sum(axis=0)  # (M,)


def _entropy_terms(
    x: np.ndarray, method: str, k: int | None, name: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per replica: the estimate ``(B,)``, the per-particle terms ``(B, M)`` whose sd gives ``se`` and the
    jackknife pseudo-terms ``(B, M)`` whose sd gives ``se_jackknife``."""
    values, terms, pseudo = [], [], []
    for r, cloud in enumerate(x):  # cloud (M, d)
        if method == "gaussian":
            value, t = _gaussian(cloud, name, r)
            p = t
        else:
            w = np.eye(k)[-1] if method == "knn" else bsy_weights(k, cloud.shape[1])
            value, t, p = _knn_entropy(cloud, w, name, r)
        values.append(value)
        terms.append(t)
        pseudo.append(p)
    return np.asarray(values), np.stack(terms), np.stack(pseudo)


def _se(terms: np.ndarray) -> np.ndarray:
    """``sd(terms) / sqrt(M)`` along the last axis, ``(B, M) -> (B,)``."""
    return terms.std(axis=-1, ddof=1) / math.sqrt(terms.shape[-1])


def _numpy_cloud(name: str, x: object) -> tuple[np.ndarray, bool]:
    x = _cloud(name, x)
    batched = x.dim() == 3
    xs = x.detach().to("cpu", torch.float64).numpy()
    return (xs if batched else xs[None]), batched  # (B, M, d)


def _resolve_k(method: str, k: int | None, M: int, d: int, name: str = "x") -> int | None:
    if method == "gaussian":
        if k is not None:
            raise ValueError(f"k is for the k-NN methods; method='gaussian' takes no k, got k={k}")
        if M <= d:
            raise ValueError(f"method='gaussian' needs M > d particles per replica, got M = {M}, d = {d}")
        return None
    if k is None:
        k = DEFAULT_K["knn"] if method == "knn" else default_weighted_k(M, d)
    return _k(k, M, name)


def _tensor(a: np.ndarray, batched: bool) -> torch.Tensor:
    t = torch.as_tensor(a, dtype=torch.float64)
    return t if batched else t[0]


def entropy(x: torch.Tensor, *, method: str = "auto", k: int | None = None) -> EntropyEstimate:
    r"""The differential entropy $H(\rho) = -\int \rho \log \rho$ of the law the particles sample, per replica.

    Args:
        x: particles, shape ``(M, d)`` or ``(B, M, d)`` (``B`` replicas, each its own estimate).
        method: ``"auto"`` (``"knn"`` for $d \le 3$, ``"weighted"`` for $d \ge 4$ where its weights are
            well conditioned, else ``"knn"``: [`resolve_entropy_method`][meanfield.metrics.information.resolve_entropy_method]), ``"knn"``,
            ``"weighted"`` or ``"gaussian"``; see the module docstring for the formulas.
        k: the neighbour rank of ``"knn"`` (default 3), or the largest rank of ``"weighted"`` (default
            [`default_weighted_k`][meanfield.metrics.information.default_weighted_k]); needs $M \ge k + 2$ (one neighbour more for the jackknife). Not
            for ``"gaussian"``.

    Returns:
        [`EntropyEstimate`][meanfield.metrics.information.EntropyEstimate]: ``value`` and ``se`` of shape ``()`` for an ``(M, d)`` cloud, else ``(B,)``;
        ``method`` is the method used (never ``"auto"``).

    Raises:
        ValueError: wrong shape, NaN/Inf, $M < k + 2$, duplicate particles (k-NN), a singular covariance
            (``"gaussian"``).
    """
    xs, batched = _numpy_cloud("x", x)
    _, M, d = xs.shape
    used = resolve_entropy_method(method, d, M)
    k = _resolve_k(used, k, M, d)
    values, terms, pseudo = _entropy_terms(xs, used, k, "x")
    return EntropyEstimate(
        value=_tensor(values, batched), se=_tensor(_se(terms), batched), method=used, k=k, M=M, d=d,
        se_jackknife=_tensor(_se(pseudo), batched),
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------------ KL


def _kl_samples(xs: np.ndarray, ys: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Wang–Kulkarni–Verdú, $\hat D = \frac dM \sum_i \log\frac{\nu_k(i)}{\rho_k(i)} + \log\frac{N}{M - 1}$, per
    replica: the estimate ``(B,)``, the terms ``(B, M)`` and the two-sample jackknife standard error ``(B,)``."""
    B, M, d = xs.shape
    N = ys.shape[1]
    used = np.eye(k, dtype=bool)[-1]  # only the k-th distances enter the estimate
    w = np.eye(k)[-1]
    values, terms, jackknife = [], [], []
    for r in range(B):
        x, y = xs[r], ys[r if ys.shape[0] == B else 0]  # (M, d), (N, d)
        log_rho, x_index = _log_ranks("x", x, x, k + 1, used, r, f"nearest neighbour number {k} in x")
        log_nu, y_index = _log_ranks(
            "x", x, y, k + 1 if N > k else k, used, r, f"nearest neighbour number {k} in y (x on top of k particles of y)"
        )  # fmt: skip
        t = d * (log_nu[:, k - 1] - log_rho[:, k - 1]) + math.log(N / (M - 1))  # (M,)
        # jackknife over x (deleting x_m moves ρ_k(i) to ρ_{k+1}(i) where x_m is among i's k nearest) and over
        # y (deleting y_l moves ν_k(i) to ν_{k+1}(i)); the two variances add (two-sample jackknife)
        step_x = -d * (log_rho[:, 1:] - log_rho[:, :k]) * w  # (M, k)
        var_x = _se(t - _deletion_changes(step_x, x_index[:, :k], M)) ** 2
        var_y = 0.0
        if N > k:
            step_y = d * (log_nu[:, 1:] - log_nu[:, :k]) * w  # (M, k)
            change = _deletion_changes(step_y, y_index[:, :k], N) / M  # (N,) change of D̂ per deleted y_l
            var_y = (N - 1) / N * float(((change - change.mean()) ** 2).sum())
        values.append(float(t.mean()))
        terms.append(t)
        jackknife.append(math.sqrt(var_x + var_y))
    return np.asarray(values), np.stack(terms), np.asarray(jackknife)


def kl(
    x: torch.Tensor,
    y: torch.Tensor | Callable[[torch.Tensor], torch.Tensor],
    *,
    k: int | None = None,
    method: str = "auto",
) -> KLEstimate:
    r"""$\mathrm{KL}(\rho \,\|\, \pi)$ from particles of $\rho$, and particles or the log-density of $\pi$.

    Two samples ($y$ a tensor): the $k$-NN estimator of Wang, Kulkarni & Verdú (2009, IEEE Trans. Inf.
    Theory 55, 2392),

    $$\hat D = \frac{d}{M} \sum_{i=1}^M \log\frac{\nu_k(i)}{\rho_k(i)} + \log\frac{N}{M - 1},$$

    $\rho_k(i)$ the distance from $x_i$ to its $k$-th nearest neighbour among the other $x$, $\nu_k(i)$ to its
    $k$-th nearest neighbour among the $N$ particles $y$. Consistent as $M, N \to \infty$ at fixed $k$; its
    bias grows with $d$ like that of ``"knn"``.

    A log-density ($y$ a callable, $y(x) = \log\pi(x)$, **normalised**): cross-entropy by Monte Carlo minus
    the entropy estimate,

    $$\widehat{\mathrm{KL}} = -\frac1M \sum_{i=1}^M \log\pi(x_i) - \hat H(\rho),$$

    with $\hat H$ from [`entropy`][meanfield.metrics.information.entropy] (``method``, ``k``). An unnormalised $\log\pi$ shifts the result by
    $\log Z$.

    ``se`` is $\mathrm{sd}(t_i)/\sqrt M$ over the per-particle terms $t_i$ of the mean
    ($d \log(\nu_k(i)/\rho_k(i))$; $-\log\pi(x_i) - t^H_i$ with $t^H_i$ the entropy's term): it leaves out
    the correlation of neighbouring terms and, for two samples, the noise of $y$ (replica sd / se measured
    1.17–1.24 at $\rho = \pi$). ``se_jackknife`` deletes each particle of $x$ (and, for two samples, of $y$: the two
    jackknife variances add), conservative in expectation; see the module docstring.

    Args:
        x: particles of $\rho$, shape ``(M, d)`` or ``(B, M, d)``.
        y: particles of $\pi$, shape ``(N, d)`` (one cloud for every replica) or ``(B, N, d)`` (an ``(M, d)``
            ``x`` is then compared with every replica); or a
            callable taking ``x`` and returning $\log\pi$ at each particle, shape ``x.shape[:-1]``.
        k: the neighbour rank (default 3; for ``method="weighted"`` the entropy's default).
        method: the entropy method against a log-density (``"auto"``, ``"knn"``, ``"weighted"``,
            ``"gaussian"``); two samples take only ``"auto"`` or ``"knn"``.

    Returns:
        [`KLEstimate`][meanfield.metrics.information.KLEstimate] of shape ``()`` (``x`` of shape ``(M, d)``) or ``(B,)``.
    """
    xs, batched = _numpy_cloud("x", x)
    B, M, d = xs.shape
    if callable(y) and not torch.is_tensor(y):
        used = resolve_entropy_method(method, d, M)
        k = _resolve_k(used, k, M, d)
        log_pi = _log_density(y, x)  # (B, M)
        values, terms, pseudo = _entropy_terms(xs, used, k, "x")
        cross = -log_pi  # (B, M)
        return KLEstimate(
            value=_tensor(cross.mean(axis=1) - values, batched),
            se=_tensor(_se(cross - terms), batched),
            method=used, reference="density", k=k, M=M, N=None, d=d,
            se_jackknife=_tensor(_se(cross - pseudo), batched),
        )  # fmt: skip
    if method not in ("auto", "knn"):
        raise ValueError(
            f"two samples take method 'auto' or 'knn' (Wang–Kulkarni–Verdú), got {method!r}; the other "
            "methods are for y a log-density"
        )
    ys, y_batched = _numpy_cloud("y", y)
    if ys.shape[2] != d:
        raise ValueError(f"x and y must have the same dimension d, got d={d} and d={ys.shape[2]}")
    if y_batched and not batched:  # one cloud x against every replica of y
        xs = np.repeat(xs, ys.shape[0], axis=0)  # (B, M, d)
        B = ys.shape[0]
    elif y_batched and ys.shape[0] != B:
        raise ValueError(f"y must have shape (N, d) or (B={B}, N, d) like x, got shape {tuple(y.shape)}")
    N = ys.shape[1]
    k = _k(DEFAULT_K["knn"] if k is None else k, M)
    if N < k:
        raise ValueError(f"y needs at least k = {k} particles per replica, got N = {N}")
    values, terms, jackknife = _kl_samples(xs, ys, k)
    batched = batched or y_batched
    return KLEstimate(
        value=_tensor(values, batched), se=_tensor(_se(terms), batched),
        method="knn", reference="sample", k=k, M=M, N=N, d=d, se_jackknife=_tensor(jackknife, batched),
    )  # fmt: skip


def _log_density(log_pi: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> np.ndarray:
    """``log_pi(x)`` as a float64 array ``(B, M)``, checked."""
    with torch.no_grad():
        out = log_pi(x)
    expected = tuple(x.shape[:-1])
    if not torch.is_tensor(out) or tuple(out.shape) != expected:
        got = tuple(out.shape) if torch.is_tensor(out) else type(out).__name__
        raise ValueError(f"y(x) must return log π at each particle, a tensor of shape {expected}, got {got}")
    out = out.detach().to("cpu", torch.float64).numpy()
    if not np.isfinite(out).all():
        raise ValueError(
            f"y(x) returned {int((~np.isfinite(out)).sum())} non-finite log-densities (a particle where π = 0, "
            "or NaN): KL(ρ‖π) is +∞ or undefined there"
        )
    return out.reshape(-1, x.shape[-2])  # (B, M)
