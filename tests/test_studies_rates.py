"""Rates in M with a finite reference (issue 26, item 3): the estimators of ``convergence_in_m`` against
closed forms and scipy, and the coverage of their intervals over repeated studies of a known exponent.

Coverage is a binomial proportion over ``n`` independent studies: ``SE = sqrt(0.95 · 0.05 / n)``; a check is
``|coverage − 0.95| ≤ Z·SE`` (``Z = 5``), so with n = 400 (SE = 0.0109, tolerance 0.054) it detects a coverage
below 0.896 — an 80 % interval is 13.8 SE away. The negative control is the naive interval (the finite
reference treated as exact), which must fall below ``0.95 − Z·SE``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.optimize
import torch

from meanfield.studies.in_memory import ESTIMATORS, convergence_in_m
from meanfield.studies.stats import Z

DT = torch.float64
MS = [16, 32, 64, 128, 256]


def exact_power_sample(limit: float, c: float, alpha: float, eps: float = 1e-9):
    """``Y = limit + c·M^{−α} ± eps`` (replicates alternate the sign: the mean is exact, the SE is not 0)."""

    def sample(M: int, reps: int) -> dict[str, torch.Tensor]:
        pm = torch.tensor([(-1.0) ** b for b in range(reps)], dtype=DT)  # (reps,)
        return {"Y": limit + c * M**-alpha + eps * pm}

    return sample


@pytest.mark.parametrize(("limit", "c", "alpha"), [(2.0, -3.0, 0.75), (0.5, 1.0, 1.0), (-1.0, 0.2, 1.6)])
def test_noise_free_power_law_is_recovered_by_every_estimator(limit, c, alpha):
    """``E Y_M = L + c M^{−α}`` exactly: ``fit`` and ``differences`` recover (α, L, c) without a reference,
    ``reference`` with reference values at L, ``exact`` with L given. Tolerance 2e-3 on α (the grid of α has
    step 0.02, refined by a parabola; the error measured is below 1e-3)."""
    sample = exact_power_sample(limit, c, alpha)
    ref = torch.full((4,), limit, dtype=DT) + 1e-12 * torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=DT)
    for reference, estimators in [(None, ("fit", "differences")), (ref, ("reference",)), (limit, ("exact",))]:
        s = convergence_in_m(sample, MS, reps=4, reference=reference, quantity="Y", generator=0,
                             estimator=estimators, n_boot=50, progress=False)  # fmt: skip
        assert s.method == "observable" and s.metric == "Y" and s.estimator == estimators[0]
        for e in estimators:
            est = s.estimates[e]
            assert abs(est.slope + alpha) < 2e-3, (e, est)
            assert abs(est.limit - limit) < 2e-3 * abs(c) and abs(est.coefficient - c) < 1e-2 * abs(c), (
                e,
                est,
            )


def test_fit_estimator_agrees_with_scipy_curve_fit():
    """The weighted fit ``L + c M^{−α}`` (weights 1/SE²) equals ``scipy.optimize.curve_fit`` on the same means
    (an independent optimiser), on noisy data; and ``reference`` equals the same fit with the reference mean
    added as the point M = ∞ with its own SE."""
    g = torch.Generator().manual_seed(3)

    def sample(M, reps):
        return {"Y": 1.0 + M**-1.0 * (1 + 0.5 * torch.randn(reps, generator=g, dtype=DT))}

    ref = 1.0 + 0.002 * torch.randn(6, generator=torch.Generator().manual_seed(4), dtype=DT)
    s = convergence_in_m(sample, MS, reps=40, reference=ref, quantity="Y", generator=1,
                         estimator=("fit", "reference"), n_boot=50, progress=False)  # fmt: skip
    m, se = s.mean.numpy(), s.se.numpy()

    def f(M, L, c, a):
        return L + c * np.asarray(M, dtype=float) ** -a

    (L, c, a), _ = scipy.optimize.curve_fit(f, np.array(MS, float), m, p0=(1, 1, 1), sigma=se, maxfev=20000)
    fit = s.estimates["fit"]
    assert (
        abs(fit.slope + a) < 2e-3 and abs(fit.limit - L) < 1e-4 and abs(fit.coefficient - c) < 1e-2 * abs(c)
    )
    Mx = np.array([*MS, np.inf])
    mx = np.array([*m, float(ref.mean())])
    sx = np.array([*se, float(ref.std() / math.sqrt(6))])
    (L2, c2, a2), _ = scipy.optimize.curve_fit(
        f, Mx, mx, p0=(1, 1, 1), sigma=sx, maxfev=20000, check_finite=False
    )
    r = s.estimates["reference"]
    assert abs(r.slope + a2) < 2e-3 and abs(r.limit - L2) < 1e-4, (r, (L2, c2, a2))


def test_exact_estimator_with_a_given_limit_is_the_loglog_slope_of_the_excess():
    g = torch.Generator().manual_seed(5)

    def sample(M, reps):
        return {"Y": 3.0 - M**-0.5 * (1 + 0.1 * torch.randn(reps, generator=g, dtype=DT))}

    s = convergence_in_m(sample, MS, reps=20, reference=3.0, quantity="Y", generator=0, progress=False)
    assert s.estimator == "exact" and s.limit == 3.0
    slope = np.polyfit(np.log(MS), np.log(3.0 - s.mean.numpy()), 1)[0]
    assert math.isclose(s.slope, slope, rel_tol=1e-12)
    assert torch.allclose(s.excess, 3.0 - s.mean)


def test_auto_estimator_and_reported_source():
    sample = exact_power_sample(1.0, 1.0, 1.0, eps=1e-3)
    kw = dict(reps=4, quantity="Y", generator=0, n_boot=50, progress=False)
    assert convergence_in_m(sample, MS, reference=[1.0, 1.001], **kw).estimator == "reference"
    assert convergence_in_m(sample, MS, reference=1.0, **kw).estimator == "exact"
    equal = convergence_in_m(sample, MS, reference=[1.0, 1.0], **kw)  # no spread: the limit as exact
    assert equal.estimator == "reference" and abs(equal.slope + 1) < 2e-3 and math.isfinite(equal.slope_ci[0])
    assert convergence_in_m(sample, MS, reference=None, **kw).estimator == "fit"
    assert convergence_in_m(sample, MS[:3], reference=None, **kw).estimator == "differences"
    with pytest.warns(RuntimeWarning, match="one reference value"):
        assert convergence_in_m(sample, MS, reference=[1.0], **kw).estimator == "exact"
    both = convergence_in_m(sample, MS, reference=[1.0, 1.001], estimator=("fit", "auto"), **kw)
    assert both.estimator == "fit" and set(both.estimates) == {"fit", "reference"}
    assert both.slope == both.estimates["fit"].slope and both.slope_ci == both.estimates["fit"].slope_ci


def test_the_reference_run_can_be_a_run_output_and_series_use_their_last_time():
    """``reference`` as a reference run's output (a mapping with the quantity; states with an observable), and
    a quantity that is a series: its last saved value is the one studied."""

    def sample(M, reps):
        t = torch.linspace(0, 1, 3, dtype=DT)
        y = (1.0 + M**-1.0) * torch.ones(reps, 3, dtype=DT) * t  # (reps, 3): ends at 1 + 1/M
        return {"t": t, "Y": y + 1e-6 * torch.randn(reps, 3, generator=torch.Generator().manual_seed(M))}

    s = convergence_in_m(sample, MS, reps=4, reference={"Y": torch.tensor([1.0, 1.0 + 1e-6])}, quantity="Y",
                         generator=0, n_boot=50, progress=False)  # fmt: skip
    assert s.estimator == "reference" and abs(s.slope + 1) < 2e-3
    assert s.reference_values.shape == (2,) and torch.allclose(
        s.values[:, 0], 1 + torch.tensor(MS, dtype=DT) ** -1.0, atol=1e-5
    )
    x_ref = torch.ones(3, 8, 1, dtype=DT)  # three reference clouds, observable = mean
    s2 = convergence_in_m(lambda M, reps: torch.full((reps, M, 1), 1 + 1 / M, dtype=DT) + 1e-9 * torch.randn(reps, M, 1, generator=torch.Generator().manual_seed(M), dtype=DT),
                          MS, reps=3, reference=x_ref + 1e-9 * torch.arange(3, dtype=DT).reshape(3, 1, 1),
                          quantity="m", observables={"m": lambda x: x.mean((1, 2))}, generator=0, n_boot=50,
                          progress=False)  # fmt: skip
    assert s2.reference_values.shape == (3,) and abs(s2.slope + 1) < 2e-3


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"estimator": "reference", "reference": 1.0}, ValueError, ["reference", "≥ 2 reference values"]),
        ({"estimator": "exact", "reference": None}, ValueError, ["exact", "needs a reference"]),
        ({"estimator": "fit", "Ms": [16, 32, 64]}, ValueError, ["fit", "≥ 4 sizes"]),
        ({"estimator": "differences", "Ms": [16, 32, 48, 64]}, ValueError, ["differences", "constant ratio"]),
        ({"estimator": "median"}, ValueError, ["estimator", "'median'"]),
        ({"quantity": "loss"}, ValueError, ["quantity 'loss'", "['Y']"]),
        ({"metric": "w1"}, ValueError, ["metric", "quantity"]),
        ({"reference": "one"}, TypeError, ["reference", "str"]),
        ({"observables": {"m": 3}}, TypeError, ["observables", "callable"]),
    ],
)
def test_quantity_study_bad_input(kwargs, error, words):
    args = {"Ms": MS, "reps": 3, "reference": [1.0, 1.1], "quantity": "Y", "generator": 0, "progress": False}
    args.update(kwargs)
    with pytest.raises(error) as info:
        convergence_in_m(exact_power_sample(1.0, 1.0, 1.0, 1e-3), args.pop("Ms"), **args)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_distance_study_defaults_to_exact_and_offers_the_reference_free_fits():
    """A distance study keeps the old estimator ("exact": the reference as exact) by default, and reports it;
    ``fit`` on a finite reference cloud absorbs its floor: for ``Y = (x̄_M − ȳ_N)²``, ``E Y = 1/M + ȳ_N²``."""
    g = torch.Generator().manual_seed(6)
    cloud = torch.randn(64, 1, generator=g, dtype=DT)  # a small reference: a floor ȳ² ≈ 1/64

    def sq_error(x, y):
        return (x.mean(-2) - y.mean(-2)).square().sum(-1)

    def sample(M, reps):
        return torch.randn(reps, M, 1, generator=g, dtype=DT)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        s = convergence_in_m(sample, MS, reps=400, reference=cloud, metric=sq_error, generator=0,
                             estimator=("exact", "fit"), n_boot=300, progress=False)  # fmt: skip
    assert s.estimator == "exact" and set(s.estimates) == {"exact", "fit"}
    floor = float(cloud.mean()) ** 2
    fit = s.estimates["fit"]
    fit_se = (fit.slope_ci[1] - fit.slope_ci[0]) / (2 * 1.97)
    assert abs(fit.slope + 1) <= Z * fit_se, fit  # the fit sees −1 ...
    assert abs(fit.limit - floor) < 0.5 * floor + 1e-3, (fit.limit, floor)
    assert s.estimates["exact"].slope > -1 + 0.05, s.estimates["exact"]  # ... the naive slope is flattened


# ---------------------------------------------------------------------------------------------------------
# Coverage over repeated studies


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


@pytest.mark.slow
def test_coverage_full_size():
    """2000 studies, 1000 bootstrap draws each (SE = 0.0049, tolerance 0.024: detects coverage below 0.926)."""
    n = 2000
    se = math.sqrt(0.95 * 0.05 / n)
    cov = coverages(n, first_seed=70_000, n_boot=1000)
    for e in ("reference", "fit", "differences"):
        assert abs(cov[e] - 0.95) <= Z * se, (e, cov)
    assert cov["exact"] < 0.95 - Z * se, cov


def test_the_reference_interval_grows_with_the_reference_noise_and_the_naive_one_does_not():
    """Same replicates, reference values with spread ×1, ×4, ×16 about the same mean: the ``reference``
    interval widens with the spread (its uncertainty is propagated), the naive ``exact`` one stays put."""
    widths = {"reference": [], "exact": []}
    z = torch.tensor([-1.5, -0.5, 0.0, 0.5, 1.5], dtype=DT)  # (R,) mean 0
    for spread in (1e-4, 4e-4, 16e-4):
        g = torch.Generator().manual_seed(11)

        def sample(M, reps, g=g):
            return {"L": 1.0 + M**-1.0 * (1 + 0.3 * torch.randn(reps, generator=g, dtype=DT))}

        s = convergence_in_m(sample, MS, reps=40, reference=1.0 + spread * z, quantity="L", generator=12,
                             estimator=("reference", "exact"), n_boot=400, progress=False)  # fmt: skip
        for e in widths:
            lo, hi = s.estimates[e].slope_ci
            widths[e].append(hi - lo)
    assert widths["reference"][0] < widths["reference"][1] < widths["reference"][2], widths
    assert widths["reference"][2] > 1.5 * widths["reference"][0], widths
    assert max(widths["exact"]) - min(widths["exact"]) < 1e-12, widths  # it cannot see the reference's noise
