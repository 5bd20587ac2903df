"""Whole-behaviour tests of the convergence-in-M part of ``meanfield.studies.in_memory``.

Covered: ``_as_tensor``, ``_collect``, ``RateEstimate``, ``_fit_loglog``, ``_profile``, ``_fit_power``,
``_student_t``, ``_quantiles``, ``_t_interval``, ``_edge_notes``, ``_estimate``, ``StudyResult`` (every
property and method), ``_distance`` and ``convergence_in_m``.

Independent answers: ``np.polyfit`` for the log-log slopes, a NumPy re-implementation of the documented
α-grid-plus-parabola power-law fit built on ``np.linalg.lstsq`` (weighted least squares), ``np.quantile`` and
``scipy.stats.t`` for the intervals, the bootstrap replayed from a clone of the study's generator (the
resampling indices, then the statistics computed here in NumPy), hand closed forms of ``W_p`` between an
empirical law and ``U(0, 1)``, sorted-point / quantile-function ``W_p`` in 1-D and POT's ``emd2`` in 2-D,
literal strings for every message, label, CSV text. The errors already pinned by ``test_held_runs.py`` are
not repeated; those of the helpers and of the branches it leaves are.
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings

import matplotlib
import numpy as np
import ot
import pytest
import scipy.stats
import torch

from meanfield.metrics.wasserstein import Uniform
from meanfield.stepping.simulate import Trajectory
from meanfield.studies import in_memory as studies
from meanfield.studies.in_memory import ESTIMATORS, RateEstimate, StudyResult, convergence_in_m

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# mutmut's trampolines add frames: a warning's stack level moves under it
UNDER_MUTMUT = "MUTANT_UNDER_TEST" in os.environ

DT = torch.float64
GRID = np.linspace(0.01, 4.0, 200)  # the documented α range [0.01, 4], 200 points
SPAN = "[0.01, 4]"
HERE = __file__


# --------------------------------------------------------------------------------------------------------
# Independent references


def np_power_fit(M, m, w, free=True):
    """The documented power-law fit, rebuilt with ``np.linalg.lstsq``: for each α of the grid the weighted
    least squares of ``m ≈ L + c·M^{−α}`` (``L = 0`` unless ``free``), the α of least RSS refined by the
    vertex of the parabola through it and its two neighbours (not at an end of the grid), then (L, c) at
    that α. Returns ``α, c, L, at_edge``."""
    M, m, w = (np.asarray(v, dtype=float) for v in (M, m, w))
    w = w / w.sum()
    sw = np.sqrt(w)

    def solve(a):
        x = M**-a  # inf ** -a = 0: a point on the limit
        A = np.stack([np.ones_like(x), x], 1) if free else x[:, None]
        coef = np.linalg.lstsq(A * sw[:, None], m * sw, rcond=None)[0]
        rss = float(np.sum(w * (m - A @ coef) ** 2))
        return (rss, coef[1], coef[0]) if free else (rss, coef[0], 0.0)

    rss = np.array([solve(a)[0] for a in GRID])
    i = int(np.argmin(rss))
    edge = i in (0, len(GRID) - 1)
    if edge:
        a = GRID[i]
    else:
        f0, f1, f2 = rss[i - 1 : i + 2]
        curv = f0 - 2 * f1 + f2
        a = GRID[i] + (0.5 * (f0 - f2) / curv if curv > 0 else 0.0) * (GRID[1] - GRID[0])
    _, c, L = solve(a)
    return float(a), float(c), float(L), edge


def np_t_ci(estimate, boot, level, df):
    """``estimate ± t_{df,(1+level)/2}·sd(boot)`` with scipy's quantile and NumPy's sd (ddof = 1)."""
    half = scipy.stats.t.ppf((1 + level) / 2, df) * np.std(np.asarray(boot, dtype=float), ddof=1)
    return estimate - half, estimate + half


def replay_boot(values, state, n_boot):
    """The bootstrap means ``(n_boot, K)`` replayed: a clone of the generator draws the resampling indices of
    each M in turn (``randint(reps, (n_boot, reps))``), the means are taken here in NumPy. Returns the means
    and the clone (for the draws that follow)."""
    g = torch.Generator()
    g.set_state(state)
    v = np.asarray(values, dtype=float)
    reps = v.shape[1]
    cols = [v[k][torch.randint(reps, (n_boot, reps), generator=g).numpy()].mean(1) for k in range(v.shape[0])]
    return np.stack(cols, 1), g


def np_loglog(M, y):
    """``np.polyfit`` of ``log y`` on ``log M``: ``(slope, intercept)``."""
    slope, intercept = np.polyfit(np.log(np.asarray(M, dtype=float)), np.log(np.asarray(y, dtype=float)), 1)
    return float(slope), float(intercept)


def w_to_uniform(x, p):
    """``W_p^p`` between the empirical law of the points ``x`` and ``U(0, 1)``, by hand: the sorted points
    against the quantile ``u``, ``Σ_i ∫_{(i−1)/n}^{i/n} |x_(i) − u|^p du`` in closed form."""
    xs = np.sort(np.asarray(x, dtype=float).ravel())
    n = xs.size
    total = 0.0
    for i, xi in enumerate(xs):
        a, b = i / n, (i + 1) / n
        if p == 2:
            total += ((xi - a) ** 3 - (xi - b) ** 3) / 3
        else:  # ∫ |x − u| du = F(b) − F(a), F(u) = sign(u − x)(u − x)²/2
            total += np.sign(b - xi) * (b - xi) ** 2 / 2 - np.sign(a - xi) * (a - xi) ** 2 / 2
    return total


def w_1d(x, y, p):
    """``W_p^p`` between two 1-D empirical laws of any sizes: the quantile functions on the merged grid of
    their breakpoints ``{i/n} ∪ {j/m}``."""
    xs, ys = np.sort(np.ravel(x)), np.sort(np.ravel(y))
    cuts = np.unique(np.concatenate([np.arange(xs.size + 1) / xs.size, np.arange(ys.size + 1) / ys.size]))
    mid = (cuts[:-1] + cuts[1:]) / 2
    qx = xs[np.minimum((mid * xs.size).astype(int), xs.size - 1)]
    qy = ys[np.minimum((mid * ys.size).astype(int), ys.size - 1)]
    return float(np.sum(np.diff(cuts) * np.abs(qx - qy) ** p))


def clone(g: torch.Generator) -> torch.Generator:
    c = torch.Generator()
    c.set_state(g.get_state())
    return c


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def messages(caught) -> list[str]:
    return [str(w.message) for w in caught]


# --------------------------------------------------------------------------------------------------------
# _as_tensor


@pytest.mark.parametrize(
    "value", [[1, 2, 3], (1, 2, 3), np.array([1, 2, 3], dtype=np.int32)], ids=["list", "tuple", "ndarray"]
)
def test_as_tensor_turns_lists_tuples_and_arrays_into_float64(value):
    """A list, tuple or integer array becomes a float64 CPU tensor of the same numbers."""
    out = studies._as_tensor("v", value)
    assert out.dtype == DT and out.device.type == "cpu" and out.tolist() == [1.0, 2.0, 3.0]


def test_as_tensor_detaches_and_casts_a_tensor():
    """A float32 tensor that needs grad comes back float64 and detached, with the same values."""
    x = torch.tensor([0.5, 1.5], dtype=torch.float32, requires_grad=True)
    out = studies._as_tensor("v", x)
    assert out.dtype == DT and not out.requires_grad and out.tolist() == [0.5, 1.5]


@pytest.mark.parametrize(
    ("value", "kind"), [(3, "int"), ({"a": 1}, "dict"), ("s", "str")], ids=["int", "dict", "str"]
)
def test_as_tensor_refuses_other_types_by_name(value, kind):
    """Anything else is a TypeError naming the argument and the type."""
    with pytest.raises(TypeError, match=rf"^thing must be a tensor, got {kind}$"):
        studies._as_tensor("thing", value)


# --------------------------------------------------------------------------------------------------------
# _collect


def test_collect_of_a_state_tensor_is_the_states_alone():
    x = torch.arange(12.0, dtype=DT).reshape(2, 3, 2)
    states, scalars, series, times = studies._collect("f", x, 2, None)
    assert states is x and scalars == {} and series == {} and times is None


def test_collect_applies_observables_to_the_final_states():
    """On states, an observable is a scalar per replica (reshaped to (B,), float64, detached); no series."""
    x = torch.arange(12.0, dtype=torch.float32).reshape(2, 3, 2)
    states, scalars, series, times = studies._collect("f", x, 2, {"m": lambda s: s.mean((1, 2))[:, None]})
    assert list(scalars) == ["m"] and scalars["m"].dtype == DT
    assert scalars["m"].tolist() == [2.5, 8.5] and series == {} and times is None


def test_collect_of_a_trajectory_gives_series_at_the_saved_states_and_their_last_value():
    """A trajectory: the final state, the saved times as float64 and, per observable, the series over the
    saved states (B, S) with its last column as the scalar."""
    states = torch.arange(2 * 3 * 2 * 1, dtype=DT).reshape(2, 3, 2, 1)  # (S=2, B=3, M=2, d=1)
    traj = Trajectory(
        times=torch.tensor([0.0, 0.5], dtype=torch.float32), states=states, steps=torch.tensor([0, 5]),
        dt=0.1, solver="em",
    )  # fmt: skip
    final, scalars, series, times = studies._collect("f", traj, 3, {"m": lambda s: s.mean((1, 2))})
    assert torch.equal(final, states[-1]) and times.dtype == DT and times.tolist() == [0.0, 0.5]
    # means of pairs (0,1),(2,3),(4,5) at S=0 and (6,7),(8,9),(10,11) at S=1
    assert series["m"].tolist() == [[0.5, 6.5], [2.5, 8.5], [4.5, 10.5]]
    assert scalars["m"].tolist() == [6.5, 8.5, 10.5]


def test_collect_of_a_mapping_sorts_scalars_series_states_and_times():
    """``final`` → states, ``t`` → times (flattened, float64), a (B,) value → a scalar, a (B, T) value → a
    series; lists are accepted."""
    x = torch.zeros(2, 3, 1, dtype=DT)
    out = {"final": x, "t": [[0.0, 1.0, 2.0]], "loss": [1.0, 2.0], "curve": [[1, 2, 3], [4, 5, 6]]}
    states, scalars, series, times = studies._collect("f", out, 2, None)
    assert states is x and times.tolist() == [0.0, 1.0, 2.0] and times.dtype == DT
    assert list(scalars) == ["loss"] and scalars["loss"].tolist() == [1.0, 2.0]
    assert (
        list(series) == ["curve"] and series["curve"].dtype == DT and series["curve"][1].tolist() == [4, 5, 6]
    )


def test_collect_gives_index_times_to_series_without_t_and_keeps_t_without_series():
    _, _, series, times = studies._collect("f", {"s": torch.ones(2, 4, dtype=DT)}, 2, None)
    assert times.dtype == DT and times.tolist() == [0.0, 1.0, 2.0, 3.0]
    _, scalars, series, times = studies._collect("f", {"t": [0.0, 7.0], "y": [1.0, 2.0]}, 2, None)
    assert series == {} and times.tolist() == [0.0, 7.0]


@pytest.mark.parametrize(
    ("out", "observables", "error", "message"),
    [
        ({3: torch.ones(2)}, None, TypeError, "f returned a mapping with a key 3: names must be str"),
        (
            {"y": torch.ones(3, dtype=DT)},
            None,
            ValueError,
            "f['y'] must have shape (B,) = (2,) (a scalar per replica) or (B, T) = (2, T) (a series at the "
            "saved times), got (3,)",
        ),
        (
            {"y": torch.ones(2, 2, 1, dtype=DT)},
            None,
            ValueError,
            "f['y'] must have shape (B,) = (2,) (a scalar per replica) or (B, T) = (2, T) (a series at the "
            "saved times), got (2, 2, 1)",
        ),
        (
            {"y": torch.ones(3, 2, dtype=DT)},
            None,
            ValueError,
            "f['y'] must have shape (B,) = (2,) (a scalar per replica) or (B, T) = (2, T) (a series at the "
            "saved times), got (3, 2)",
        ),
        (
            {"y": torch.tensor(1.0, dtype=DT)},
            None,
            ValueError,
            "f['y'] must have shape (B,) = (2,) (a scalar per replica) or (B, T) = (2, T) (a series at the "
            "saved times), got ()",
        ),
        (
            {"y": torch.tensor([1.0, math.inf], dtype=DT)},
            None,
            ValueError,
            "f['y'] has 1 non-finite entries (NaN or Inf), the first at index (1,)",
        ),
        ({"t": 3}, None, TypeError, "f['t'] must be a tensor, got int"),
        ({"y": "ab"}, None, TypeError, "f['y'] must be a tensor, got str"),
        (
            [1.0],
            None,
            TypeError,
            "f must return a state tensor (B, M, d), a Trajectory or a mapping of observables, got list",
        ),  # fmt: skip
        ({"y": [1.0, 2.0]}, {"y": lambda s: s}, ValueError, "observable 'y' is also a name f returned"),
        ({"s": torch.ones(2, 3)}, {"s": lambda s: s}, ValueError, "observable 's' is also a name f returned"),
        (
            torch.ones(2, 1, 1),
            {"final": lambda s: s},
            ValueError,
            "observable 'final' is also a name f returned",
        ),
        (torch.ones(2, 1, 1), {"t": lambda s: s}, ValueError, "observable 't' is also a name f returned"),
        (
            {"y": [1.0, 2.0]},
            {"m": lambda s: s},
            ValueError,
            "observable 'm' needs states, but f returned none (no 'final')",
        ),
        (
            torch.ones(2, 1, 1, dtype=DT),
            {"m": lambda s: torch.tensor([1.0, math.nan])},
            ValueError,
            "observable 'm' has 1 non-finite entries (NaN or Inf), the first at index (1,)",
        ),
        (
            {"a": torch.ones(2, 2), "b": torch.ones(2, 3)},
            None,
            ValueError,
            "the series of f must share one time axis, got lengths [2, 3]",
        ),
        ({"t": [0.0, 1.0], "a": torch.ones(2, 3)}, None, ValueError, "f: 't' has 2 times, the series have 3"),
    ],
    ids=[f"case{i:02d}" for i in range(17)],
)
def test_collect_refuses_each_bad_output_with_its_exact_message(out, observables, error, message):
    """Every refusal of ``_collect`` (reps = 2, the output named ``f``) against its whole message."""
    with pytest.raises(error) as caught:
        studies._collect("f", out, 2, observables)
    assert str(caught.value) == message


def test_collect_checks_a_trajectory_observable_series_for_non_finite_values():
    """A trajectory observable that is NaN at the first saved state (not the last) is still refused: the check
    covers the series' scalar, the last value, and here the NaN sits in the scalar column of S = 1."""
    states = torch.ones(2, 2, 1, 1, dtype=DT)
    traj = Trajectory(times=torch.tensor([0.0, 1.0]), states=states, steps=torch.tensor([0, 1]), dt=1.0,
                      solver="em")  # fmt: skip
    calls = iter([torch.tensor([1.0, 1.0]), torch.tensor([math.nan, 1.0])])
    with pytest.raises(
        ValueError,
        match=r"^observable 'm' has 1 non-finite entries \(NaN or Inf\), the first at index \(0,\)$",
    ):
        studies._collect("f", traj, 2, {"m": lambda s: next(calls)})


# --------------------------------------------------------------------------------------------------------
# RateEstimate


def test_rate_estimate_fields_and_intercept():
    """Positional fields in the documented order; ``intercept = log|c|`` (−inf at c = 0); frozen."""
    r = RateEstimate("fit", -0.5, (-0.7, -0.3), 1.25, -(math.e**2), 0.9)
    assert (r.estimator, r.slope, r.slope_ci, r.limit, r.coefficient, r.level) == (
        "fit", -0.5, (-0.7, -0.3), 1.25, -math.e**2, 0.9,
    )  # fmt: skip
    assert r.intercept == pytest.approx(2.0, abs=1e-15)
    assert RateEstimate("fit", -0.5, (0, 0), 0.0, 3.0, 0.9).intercept == pytest.approx(
        math.log(3.0), abs=1e-15
    )
    assert RateEstimate("fit", -0.5, (0, 0), 0.0, 0.0, 0.9).intercept == -math.inf
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.slope = 0.0


# --------------------------------------------------------------------------------------------------------
# _fit_loglog, _profile, _fit_power


def test_fit_loglog_is_np_polyfit_on_each_row():
    """Batched ``(3, K)`` means: the slope and intercept of each row equal ``np.polyfit`` of log on log."""
    Ms = torch.tensor([4.0, 8.0, 32.0, 100.0], dtype=DT)
    means = torch.rand(3, 4, generator=gen(1), dtype=DT) + 0.1
    slope, intercept = studies._fit_loglog(Ms, means)
    assert slope.shape == (3,) and intercept.shape == (3,)
    for row in range(3):
        s, i = np_loglog(Ms.numpy(), means[row].numpy())
        assert abs(float(slope[row]) - s) < 1e-12 and abs(float(intercept[row]) - i) < 1e-12


def test_fit_loglog_recovers_an_exact_power_law():
    Ms = torch.tensor([2.0, 5.0, 11.0], dtype=DT)
    slope, intercept = studies._fit_loglog(Ms, 3.0 * Ms**-0.7)
    assert abs(float(slope) + 0.7) < 1e-13 and abs(float(intercept) - math.log(3.0)) < 1e-13


def test_profile_is_weighted_least_squares_in_l_and_c_for_each_alpha():
    """For each α, (RSS, c, L) equal the weighted ``lstsq`` of ``means = L + c·M^{−α}`` with normalised
    weights, a point at M = ∞ (x = 0) included; batched over two rows of means."""
    Ms = torch.tensor([4.0, 8.0, 16.0, math.inf], dtype=DT)
    means = torch.rand(2, 4, generator=gen(2), dtype=DT)
    w = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=DT)
    alpha = torch.tensor([0.3, 1.0, 2.5], dtype=DT)
    rss, c, L = studies._profile(alpha, Ms, means, w)
    assert rss.shape == c.shape == L.shape == (2, 3)
    sw = np.sqrt(w.numpy())
    for r in range(2):
        for g, a in enumerate(alpha.tolist()):
            x = Ms.numpy() ** -a
            A = np.stack([np.ones(4), x], 1)
            coef = np.linalg.lstsq(A * sw[:, None], means[r].numpy() * sw, rcond=None)[0]
            res = np.sum(w.numpy() * (means[r].numpy() - A @ coef) ** 2)
            assert abs(float(L[r, g]) - coef[0]) < 1e-12 and abs(float(c[r, g]) - coef[1]) < 1e-11
            assert abs(float(rss[r, g]) - res) < 1e-13


@pytest.mark.parametrize("free", [True, False], ids=["free", "zero_limit"])
def test_fit_power_matches_the_numpy_grid_fit_on_noisy_rows(free):
    """Four noisy rows of ``1 + 2·M^{−0.8}`` (or ``2·M^{−0.8}`` with L = 0), unequal weights: α, c, L and
    ``at_edge`` of each row equal the NumPy re-implementation (1e-9; a grid step is 0.02, so a missing
    parabola step or a wrong neighbour is off by ≥ 1e-3)."""
    Ms = torch.tensor([8.0, 16.0, 32.0, 64.0, 128.0], dtype=DT)
    noise = 0.05 * torch.randn(4, 5, generator=gen(3), dtype=DT)
    means = (1.0 if free else 0.0) + 2.0 * Ms**-0.8 * (1 + noise)
    w = torch.tensor([1.0, 2.0, 3.0, 2.0, 1.0], dtype=DT)
    w = w / w.sum()
    alpha, c, L, edge = studies._fit_power(Ms, means, w, free_limit=free)
    assert alpha.shape == c.shape == L.shape == edge.shape == (4,)
    for r in range(4):
        a, cr, Lr, e = np_power_fit(Ms.numpy(), means[r].numpy(), w.numpy(), free=free)
        assert abs(float(alpha[r]) - a) < 1e-9 and bool(edge[r]) is e is False
        assert abs(float(c[r]) - cr) < 1e-8 and abs(float(L[r]) - Lr) < 1e-9
        assert min(abs(float(alpha[r]) - GRID)) > 1e-6  # refined off the grid
    if not free:
        assert torch.equal(L, torch.zeros(4, dtype=DT))


def test_fit_power_at_the_ends_of_the_grid_reports_the_end_and_flags_it():
    """Data decaying like ``M^{−6}`` (beyond the grid): α = 4 exactly, at_edge; constant data with L = 0:
    α = 0.01 exactly, at_edge; c from the closed form ``Σw x m / Σw x²`` at that α."""
    Ms = torch.tensor([2.0, 4.0, 8.0, 16.0], dtype=DT)
    w = torch.full((4,), 0.25, dtype=DT)
    alpha, c, L, edge = studies._fit_power(Ms, 5.0 * Ms**-6.0, w, free_limit=False)
    assert float(alpha) == 4.0 and bool(edge)
    x = Ms.numpy() ** -4.0
    m = 5.0 * Ms.numpy() ** -6.0
    assert abs(float(c) - np.sum(x * m) / np.sum(x * x)) < 1e-12 and float(L) == 0.0
    alpha, c, L, edge = studies._fit_power(Ms, torch.full((4,), 3.0, dtype=DT), w, free_limit=False)
    assert float(alpha) == pytest.approx(0.01, abs=1e-15) and bool(edge)
    x = Ms.numpy() ** -0.01
    assert abs(float(c) - 3.0 * np.sum(x) / np.sum(x * x)) < 1e-12
    alpha, c, L, edge = studies._fit_power(Ms, 1.0 + 5.0 * Ms**-6.0, w)  # free limit, beyond the grid
    assert float(alpha) == 4.0 and bool(edge)


# --------------------------------------------------------------------------------------------------------
# _student_t, _quantiles, _t_interval, _edge_notes


def test_student_t_is_z_over_root_chi2_over_df_from_the_generator():
    """Replayed from a clone of the generator: first n normals z, then an (n, df) block of normals whose
    squares summed per row are χ²_df; the draws are ``z / sqrt(χ²/df)`` (float64, shape (n,))."""
    g = gen(7)
    c = clone(g)
    t = studies._student_t(5, 3, g)
    z = torch.randn(5, generator=c, dtype=DT).numpy()
    chi2 = (torch.randn(5, 3, generator=c, dtype=DT).numpy() ** 2).sum(1)
    assert t.dtype == DT and t.shape == (5,)
    assert np.allclose(t.numpy(), z / np.sqrt(chi2 / 3), rtol=1e-15, atol=0)
    assert torch.equal(g.get_state(), c.get_state())  # exactly those draws were taken


def test_student_t_draws_follow_students_law():
    """4000 draws with df = 2 against ``scipy.stats.t(2)`` by Kolmogorov–Smirnov: p > 1e-3. A wrong df or
    scale shows: negative controls t(5) and the normal law give p < 1e-6 (KS statistic 0.04 detectable at
    n = 4000, where the 1e-6 critical value is about 0.04)."""
    t = studies._student_t(4000, 2, gen(8)).numpy()
    assert scipy.stats.kstest(t, scipy.stats.t(2).cdf).pvalue > 1e-3
    assert scipy.stats.kstest(t, scipy.stats.t(5).cdf).pvalue < 1e-6
    assert scipy.stats.kstest(t, scipy.stats.norm.cdf).pvalue < 1e-6


def test_quantiles_are_the_two_sided_linear_quantiles():
    t = torch.arange(101, dtype=DT)
    lo, hi = studies._quantiles(t, 0.9)
    assert (lo, hi) == pytest.approx((5.0, 95.0), abs=1e-12) and type(lo) is float and type(hi) is float
    r = torch.rand(37, generator=gen(9), dtype=DT)
    lo, hi = studies._quantiles(r, 0.5)
    assert (lo, hi) == pytest.approx(tuple(np.quantile(r.numpy(), [0.25, 0.75])), abs=1e-15)


@pytest.mark.parametrize(("level", "df"), [(0.95, 4), (0.8, 19)], ids=["95_df4", "80_df19"])
def test_t_interval_is_estimate_plus_minus_t_quantile_times_bootstrap_sd(level, df):
    boot = torch.tensor([0.1, 0.4, -0.2, 0.3, 0.0], dtype=DT)
    lo, hi = studies._t_interval(-1.0, boot, level, df)
    elo, ehi = np_t_ci(-1.0, boot.numpy(), level, df)
    assert abs(lo - elo) < 1e-13 and abs(hi - ehi) < 1e-13


EDGE = f"the power-law fit put α at the end of its range {SPAN}: these sizes do not identify the rate"


@pytest.mark.parametrize(
    ("edge", "boot_edge", "level", "notes"),
    [
        (False, 0.0, 0.95, []),
        (True, 0.0, 0.95, [EDGE]),
        (False, (1 - 0.95) / 2, 0.95, []),  # exactly the tail mass: not more
        (
            False,
            0.5,
            0.95,
            [f"50% of the bootstrap fits put α at an end of {SPAN}: the interval is cut there"],
        ),
        (
            True,
            0.034,
            0.95,
            [EDGE, f"3% of the bootstrap fits put α at an end of {SPAN}: the interval is cut there"],
        ),
        (False, 0.2, 0.5, []),
        (
            False,
            0.3,
            0.5,
            [f"30% of the bootstrap fits put α at an end of {SPAN}: the interval is cut there"],
        ),
    ],
    ids=["none", "edge", "at_tail", "half", "both", "below_level50", "above_level50"],
)
def test_edge_notes(edge, boot_edge, level, notes):
    """The warning texts of a fit at an end of the α grid, and of bootstrap fits there beyond the tail mass
    ``(1 − level)/2``."""
    assert studies._edge_notes(edge, boot_edge, level) == notes


# --------------------------------------------------------------------------------------------------------
# _estimate

KS = torch.tensor([8.0, 16.0, 32.0, 64.0, 128.0], dtype=DT)


def noisy_values(limit=1.0, c=2.0, alpha=0.8, reps=6, seed=10, K=5):
    """Replicates ``limit + c·M^{−α}(1 + 0.2ξ)`` at the sizes ``KS[:K]``, shape (K, reps)."""
    Ms = KS[:K]
    return limit + c * Ms[:, None] ** -alpha * (1 + 0.2 * torch.randn(K, reps, generator=gen(seed), dtype=DT))


def boot_of(values, n_boot=40, seed=11):
    """Bootstrap means (n_boot, K) drawn here with NumPy (any resample of the rows will do)."""
    rng = np.random.default_rng(seed)
    v = values.numpy()
    idx = rng.integers(0, v.shape[1], size=(v.shape[0], n_boot, v.shape[1]))
    return torch.tensor(np.stack([v[k][idx[k]].mean(1) for k in range(v.shape[0])], 1), dtype=DT)


def call_estimate(estimator, values, boot, Ms=KS, *, limit=None, ref_boot=None, ref_mean=None, ref_se=None,
                  distance=False, level=0.95):  # fmt: skip
    return studies._estimate(
        estimator, Ms, values, boot, limit=limit, ref_boot=ref_boot, ref_mean=ref_mean, ref_se=ref_se,
        distance=distance, level=level,
    )  # fmt: skip


def test_estimate_exact_for_a_distance_is_the_loglog_fit_with_percentile_bootstrap():
    """Distance (limit 0): slope and ``c = exp(intercept)`` from ``np.polyfit`` of the means; the interval is
    the ``np.quantile`` (2.5 %, 97.5 %) of the polyfit slopes of the bootstrap rows; no notes."""
    values = noisy_values(limit=0.0)
    boot = boot_of(values)
    est, notes = call_estimate("exact", values, boot, distance=True)
    s, i = np_loglog(KS, values.mean(1))
    slopes = [np_loglog(KS, row)[0] for row in boot.numpy()]
    lo, hi = np.quantile(slopes, [0.025, 0.975])
    assert notes == [] and est.estimator == "exact" and est.limit == 0.0 and est.level == 0.95
    assert abs(est.slope - s) < 1e-12 and abs(est.coefficient - math.exp(i)) < 1e-12
    assert est.slope_ci == pytest.approx((lo, hi), abs=1e-12)


def test_estimate_exact_for_a_quantity_below_its_limit_has_a_negative_coefficient():
    """Means below the limit 3: the excess is ``3 − mean``; the coefficient is ``−exp(intercept)``; level 0.8
    gives the (10 %, 90 %) quantiles of the bootstrap slopes of ``3 − boot``."""
    values = noisy_values(limit=3.0, c=-2.0)
    boot = boot_of(values)
    est, notes = call_estimate("exact", values, boot, limit=3.0, level=0.8)
    s, i = np_loglog(KS, 3.0 - values.mean(1).numpy())
    slopes = [np_loglog(KS, 3.0 - row)[0] for row in boot.numpy()]
    assert notes == [] and est.limit == 3.0 and est.level == 0.8
    assert abs(est.slope - s) < 1e-12 and abs(est.coefficient + math.exp(i)) < 1e-12
    assert est.slope_ci == pytest.approx(tuple(np.quantile(slopes, [0.1, 0.9])), abs=1e-12)


def test_estimate_exact_for_a_quantity_without_a_limit_uses_zero():
    values = noisy_values(limit=0.0)
    est, _ = call_estimate("exact", values, boot_of(values), limit=None)
    assert est.limit == 0.0 and abs(est.slope - np_loglog(KS, values.mean(1))[0]) < 1e-12


def test_estimate_exact_refuses_a_non_positive_mean_distance_with_nan():
    values = torch.tensor([[0.5, 0.5], [-0.25, 0.25], [0.1, 0.2]], dtype=DT)
    Ms = KS[:3]
    est, notes = call_estimate("exact", values, boot_of(values), Ms, distance=True, level=0.9)
    assert notes == ["a mean distance is ≤ 0 ([0.5, 0.0, 0.15000000000000002]): no log-log slope"]
    assert math.isnan(est.slope) and all(math.isnan(b) for b in est.slope_ci) and math.isnan(est.coefficient)
    assert est.limit == 0.0 and est.level == 0.9 and est.estimator == "exact"


def test_estimate_exact_refuses_means_on_both_sides_of_the_limit():
    values = torch.tensor([[2.0, 2.0], [0.5, 0.5], [1.25, 1.25]], dtype=DT)
    est, notes = call_estimate("exact", values, boot_of(values), KS[:3], limit=1.0)
    assert notes == [
        "the mean excess over the limit 1 changes sign over M ([1.0, -0.5, 0.25]): no log-log slope (the "
        "reference is not on one side of every mean; try estimator='fit')"
    ]
    assert math.isnan(est.slope) and est.limit == 1.0
    _, notes = call_estimate("exact", values + 0.5, boot_of(values), KS[:3], limit=1.5 + 1 / 3)
    assert notes[0].startswith("the mean excess over the limit 1.83333 changes sign")  # the limit as .6g


def test_estimate_exact_with_a_resample_at_or_below_zero_has_a_nan_interval():
    """Positive means but a bootstrap mean ≤ 0 (exactly 0 here): a finite slope, a NaN interval, the note
    naming the distance (or the excess for a quantity)."""
    values = noisy_values(limit=0.0, K=3)
    boot = boot_of(values)
    boot[3, 1] = 0.0
    est, notes = call_estimate("exact", values, boot, KS[:3], distance=True)
    assert notes == [
        "a bootstrap resample has a mean distance ≤ 0 (a metric that can be negative, or too few replicates): "
        "the slope's interval is NaN"
    ]
    assert abs(est.slope - np_loglog(KS[:3], values.mean(1))[0]) < 1e-12
    assert all(math.isnan(b) for b in est.slope_ci)
    _, notes = call_estimate("exact", values, boot, KS[:3], distance=False)
    assert notes[0].startswith("a bootstrap resample has a mean excess ≤ 0 (")


def test_estimate_differences_matches_the_numpy_fit_of_successive_differences():
    """``d_k = mean_k − mean_{k+1}`` fitted by ``c₁ M_k^{−α}`` with weights ``1/(SE²_k + SE²_{k+1})``; then
    ``c = c₁/(1 − r^{−α})`` and ``L = mean_K − c M_K^{−α}``; the interval ``−α ± t_{reps−1}·sd`` of the
    bootstrap α's. All against the NumPy fit (1e-9)."""
    values = noisy_values(reps=8)
    boot = boot_of(values, n_boot=30)
    est, notes = call_estimate("differences", values, boot, level=0.9)
    m = values.mean(1).numpy()
    se2 = values.var(1).numpy() / 8
    w = 1 / (se2[:-1] + se2[1:])
    a, c1, _, edge = np_power_fit(KS[:-1], m[:-1] - m[1:], w, free=False)
    c = c1 / (1 - 2.0**-a)
    L = m[-1] - c * 128.0**-a
    ab = [np_power_fit(KS[:-1], row[:-1] - row[1:], w, free=False)[0] for row in boot.numpy()]
    assert notes == [] and not edge and est.estimator == "differences" and est.level == 0.9
    assert abs(est.slope + a) < 1e-9 and abs(est.coefficient - c) < 1e-7 and abs(est.limit - L) < 1e-8
    assert est.slope_ci == pytest.approx(np_t_ci(-a, ab, 0.9, 7), abs=1e-8)


@pytest.mark.parametrize(
    "Ms", [[16.0, 32.0], [16.0, 32.0, 48.0, 64.0], [10.0, 20.0, 40.000001]], ids=["two", "uneven", "near"]
)
def test_estimate_differences_needs_three_sizes_in_a_constant_ratio(Ms):
    Ms_t = torch.tensor(Ms, dtype=DT)
    values = noisy_values(K=len(Ms))
    got = str([int(M) for M in Ms])
    with pytest.raises(ValueError) as caught:
        call_estimate("differences", values, boot_of(values), Ms_t)
    assert str(caught.value) == (
        f"estimator='differences' needs ≥ 3 sizes with a constant ratio M_(k+1)/M_k, got Ms = {got} "
        "(use estimator='fit')"
    )


def test_estimate_differences_accepts_a_ratio_constant_to_round_off():
    """Ratios equal to 1e-12 relative pass (the check is a relative tolerance, not equality); r is the first."""
    Ms = torch.tensor([10.0, 20.0, 40.0 * (1 + 1e-12)], dtype=DT)
    values = noisy_values(K=3)
    est, _ = call_estimate("differences", values, boot_of(values), Ms)
    assert math.isfinite(est.slope)


def test_estimate_fit_matches_the_numpy_free_limit_fit():
    """``fit``: ``L + c M^{−α}`` with weights ``1/SE²`` against the NumPy fit, and the t interval of the
    bootstrap α's (df = reps − 1 = 5)."""
    values = noisy_values()
    boot = boot_of(values, n_boot=30)
    est, notes = call_estimate("fit", values, boot)
    w = 1 / (values.var(1).numpy() / 6)
    a, c, L, edge = np_power_fit(KS, values.mean(1).numpy(), w)
    ab = [np_power_fit(KS, row, w)[0] for row in boot.numpy()]
    assert notes == [] and not edge and est.estimator == "fit" and est.level == 0.95
    assert abs(est.slope + a) < 1e-9 and abs(est.coefficient - c) < 1e-7 and abs(est.limit - L) < 1e-8
    assert est.slope_ci == pytest.approx(np_t_ci(-a, ab, 0.95, 5), abs=1e-8)


def test_estimate_fit_needs_four_sizes():
    values = noisy_values(K=3)
    with pytest.raises(ValueError) as caught:
        call_estimate("fit", values, boot_of(values), KS[:3])
    assert str(caught.value) == "estimator='fit' fits 3 numbers (Y_∞, c, α): it needs ≥ 4 sizes, got 3"


def test_estimate_fit_replaces_a_zero_standard_error_by_the_smallest_positive_one():
    """A size whose replicates are equal (SE 0) gets the weight of the smallest positive SE²; with every SE 0,
    equal weights. Checked against the NumPy fit with those weights (and a negative control: the weight 1
    in place of the smallest SE² gives another α)."""
    values = noisy_values()
    values[2] = values[2].mean()
    se2 = values.var(1).numpy() / 6
    se2[2] = se2[[0, 1, 3, 4]].min()
    est, _ = call_estimate("fit", values, boot_of(values, n_boot=5))
    a = np_power_fit(KS, values.mean(1).numpy(), 1 / se2)[0]
    assert abs(est.slope + a) < 1e-9
    se2[2] = 1.0
    assert abs(est.slope + np_power_fit(KS, values.mean(1).numpy(), 1 / se2)[0]) > 1e-4
    flat = values.mean(1, keepdim=True).expand(5, 6).clone()
    est, _ = call_estimate("fit", flat + 0 * flat, boot_of(flat, n_boot=5))
    flat_means = flat.mean(1).numpy()
    assert abs(est.slope + np_power_fit(KS, flat_means, np.ones(5))[0]) < 1e-9


def test_estimate_reference_adds_the_reference_mean_as_the_point_at_infinity():
    """``reference``: the same fit with the point ``(M = ∞, ref_mean)`` of weight ``1/ref_se²``; the bootstrap
    rows get the ``ref_boot`` draws as that point. Against the NumPy fit (1e-9)."""
    values = noisy_values(reps=8)
    boot = boot_of(values, n_boot=30)
    ref_boot = 1.0 + 0.001 * torch.randn(30, generator=gen(12), dtype=DT)
    est, notes = call_estimate("reference", values, boot, ref_boot=ref_boot, ref_mean=1.0005, ref_se=0.001,
                               level=0.9)  # fmt: skip
    M = np.array([*KS.tolist(), np.inf])
    w = np.array([*(8 / values.var(1).numpy()), 1 / 0.001**2])
    a, c, L, edge = np_power_fit(M, [*values.mean(1).tolist(), 1.0005], w)
    ab = [np_power_fit(M, [*row, rb], w)[0] for row, rb in zip(boot.numpy(), ref_boot.numpy())]
    assert notes == [] and not edge and est.estimator == "reference"
    assert abs(est.slope + a) < 1e-9 and abs(est.coefficient - c) < 1e-7 and abs(est.limit - L) < 1e-9
    assert est.slope_ci == pytest.approx(np_t_ci(-a, ab, 0.9, 7), abs=1e-8)


def test_estimate_reference_with_equal_reference_values_pins_the_limit():
    """``ref_se = 0``: the reference point weighs 1e12 × the largest replicate weight, so the fitted limit is
    the reference mean to ~1e-12 relative; a weight of only 1e6 × would leave it ~1e-6 off. Negative
    control: ``fit`` on the same means puts the limit elsewhere."""
    values = noisy_values(reps=8)
    boot = boot_of(values, n_boot=5)
    est, _ = call_estimate("reference", values, boot, ref_boot=torch.full((5,), 1.02, dtype=DT),
                           ref_mean=1.02, ref_se=0.0)  # fmt: skip
    assert abs(est.limit - 1.02) < 1e-9
    w = 8 / values.var(1).numpy()
    M = np.array([*KS.tolist(), np.inf])
    a = np_power_fit(M, [*values.mean(1).tolist(), 1.02], [*w, 1e12 * w.max()])[0]
    assert abs(est.slope + a) < 1e-7
    assert abs(call_estimate("fit", values, boot)[0].limit - 1.02) > 1e-3


def test_estimate_notes_a_fit_at_the_end_of_the_grid():
    """Means decaying like ``M^{−6}`` noise-free: α = 4 at the end of the grid, and every bootstrap fit too
    (here the bootstrap rows are the means): both edge notes."""
    values = (1.0 + 5.0 * KS**-6.0)[:, None] * torch.tensor([1.0 + 1e-9, 1.0 - 1e-9], dtype=DT)
    boot = values.mean(1).expand(10, 5).clone()
    est, notes = call_estimate("fit", values, boot)
    assert est.slope == -4.0 and notes == [
        EDGE,
        f"100% of the bootstrap fits put α at an end of {SPAN}: the interval is cut there",
    ]


# --------------------------------------------------------------------------------------------------------
# StudyResult


def hand_result(**kw) -> StudyResult:
    """A study built by hand: Ms (4, 16), three replicates, slope −0.5, intercept log 2."""
    args = dict(
        Ms=(4, 16),
        values=torch.tensor([[1.0, 2.0, 4.0], [0.25, 0.5, 0.75]], dtype=DT),
        floor=torch.zeros(2, 0, dtype=DT),
        metric="w2_squared",
        method="law",
        slope=-0.5,
        intercept=math.log(2.0),
        slope_ci=(-0.75, -0.25),
        level=0.9,
    )
    args.update(kw)
    return StudyResult(**args)


def test_study_result_defaults():
    r = hand_result()
    assert r.estimator == "exact" and r.estimates == {} and r.limit == 0.0 and r.times is None
    assert r.observed == {} and r.series == {}
    assert r.reference_values.dtype == DT and r.reference_values.shape == (0,)


def test_study_result_mean_se_excess_and_floor_mean():
    """``mean``, ``se = std(ddof=1)/sqrt(reps)`` and ``excess = |mean − limit|`` against NumPy; the floor mean
    is zeros (float64, one per M) for an empty floor and the row mean otherwise."""
    r = hand_result(limit=1.0)
    v = r.values.numpy()
    assert r.mean.tolist() == pytest.approx(v.mean(1).tolist(), abs=1e-15)
    assert r.se.tolist() == pytest.approx((v.std(1, ddof=1) / math.sqrt(3)).tolist(), abs=1e-15)
    assert r.excess.tolist() == pytest.approx(np.abs(v.mean(1) - 1.0).tolist(), abs=1e-15)
    assert r.floor_mean.dtype == DT and r.floor_mean.tolist() == [0.0, 0.0]
    r = hand_result(floor=torch.tensor([[0.1, 0.3], [0.02, 0.04]], dtype=DT))
    assert r.floor_mean.tolist() == pytest.approx([0.2, 0.03], abs=1e-15)


def test_study_result_fit_is_the_power_law():
    r = hand_result()
    assert float(r.fit(16.0)) == pytest.approx(0.5, abs=1e-15)
    assert r.fit(torch.tensor([1.0, 4.0])).tolist() == pytest.approx([2.0, 1.0], abs=1e-15)
    assert r.fit(4).dtype == DT


def test_study_result_rows():
    r = hand_result(floor=torch.tensor([[0.1, 0.3], [0.02, 0.04]], dtype=DT))
    se = r.values.numpy().std(1, ddof=1) / math.sqrt(3)
    rows = r.rows()
    assert [list(row) for row in rows] == [["M", "mean", "se", "floor"]] * 2
    assert rows[0]["M"] == 4 and rows[1]["M"] == 16
    assert rows[0]["mean"] == pytest.approx(7 / 3, abs=1e-15) and rows[1]["mean"] == pytest.approx(
        0.5, abs=1e-15
    )
    assert [row["se"] for row in rows] == pytest.approx(se.tolist(), abs=1e-15)
    assert [row["floor"] for row in rows] == pytest.approx([0.2, 0.03], abs=1e-15)
    assert all(type(row["mean"]) is float and type(row["se"]) is float for row in rows)


def test_study_result_table_and_csv(tmp_path):
    """One row per M × replicate with every observed scalar, in the order of ``observed``; the CSV text and
    the file written are exactly these rows."""
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=DT)
    r = hand_result(
        values=values, observed={"w2_squared": values, "m": torch.tensor([[0.5, 1.5], [2.5, 3.5]])}
    )
    t = r.table
    assert t.keys == ("M", "replicate") and t.values == ("w2_squared", "m") and t.replicate == "replicate"
    assert t.rows == [
        {"M": 4, "replicate": 0, "w2_squared": 1.0, "m": 0.5},
        {"M": 4, "replicate": 1, "w2_squared": 2.0, "m": 1.5},
        {"M": 16, "replicate": 0, "w2_squared": 3.0, "m": 2.5},
        {"M": 16, "replicate": 1, "w2_squared": 4.0, "m": 3.5},
    ]
    text = "M,replicate,w2_squared,m\n4,0,1.0,0.5\n4,1,2.0,1.5\n16,0,3.0,2.5\n16,1,4.0,3.5\n"
    assert r.to_csv() == text
    assert r.to_csv(tmp_path / "t.csv") == text and (tmp_path / "t.csv").read_text() == text


def test_study_result_curves_and_their_csv(tmp_path):
    """One row per M × replicate × time with every series; empty (same keys, no values) without series."""
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=DT)
    a = torch.arange(8.0, dtype=DT).reshape(2, 2, 2)  # (K, reps, T)
    r = hand_result(values=values, series={"a": a, "b": -a}, times=torch.tensor([0.0, 0.5], dtype=DT))
    c = r.curves
    assert c.keys == ("M", "replicate", "t") and c.values == ("a", "b") and c.replicate == "replicate"
    assert len(c) == 8
    assert c.rows[0] == {"M": 4, "replicate": 0, "t": 0.0, "a": 0.0, "b": -0.0}
    assert c.rows[3] == {"M": 4, "replicate": 1, "t": 0.5, "a": 3.0, "b": -3.0}
    assert c.rows[6] == {"M": 16, "replicate": 1, "t": 0.0, "a": 6.0, "b": -6.0}
    text = r.to_csv(tmp_path / "c.csv", curves=True)
    assert text.splitlines()[:3] == ["M,replicate,t,a,b", "4,0,0.0,0.0,-0.0", "4,0,0.5,1.0,-1.0"]
    assert (tmp_path / "c.csv").read_text() == text and len(text.splitlines()) == 9
    empty = hand_result(values=values).curves
    assert empty.rows == [] and empty.keys == ("M", "replicate", "t") and empty.values == ()
    assert hand_result(values=values).to_csv(curves=True) == "M,replicate,t\n"


def test_study_result_plot_draws_the_excess_its_bars_the_fit_and_the_floor(tmp_path):
    """The errorbar points at ``|mean − limit|`` with half-width 1.96 SE, the fitted line
    ``exp(intercept)·M^slope`` in the same colour, the floor dashed in grey, log axes, the sizes as tick
    labels, and every legend text; with ``path`` the figure is written and closed."""
    floor = torch.tensor([[0.1, 0.3], [0.02, 0.04]], dtype=DT)
    r = hand_result(floor=floor, estimator="fit")
    fig = r.plot()
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert texts == [
        "w2_squared: slope -0.500, 90% CI [-0.750, -0.250] (fit)",
        "w2_squared: reference floor",
        "w2_squared (±1.96 SE)",
    ]
    fit_line, floor_line = ax.lines[-2:]
    assert fit_line.get_linestyle() == "-" and fit_line.get_xdata().tolist() == [4.0, 16.0]
    assert fit_line.get_ydata().tolist() == pytest.approx([1.0, 0.5], abs=1e-15)
    assert floor_line.get_linestyle() == "--" and floor_line.get_color() == "grey"
    assert floor_line.get_ydata().tolist() == pytest.approx([0.2, 0.03], abs=1e-15)
    points = ax.containers[0]
    assert points[0].get_ydata().tolist() == pytest.approx(r.mean.tolist(), abs=1e-15)
    assert points[0].get_color() == fit_line.get_color()
    se = r.values.numpy().std(1, ddof=1) / math.sqrt(3)
    segments = points[2][0].get_segments()
    assert [s[1][1] - s[0][1] for s in segments] == pytest.approx((2 * 1.96 * se).tolist(), abs=1e-12)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_xlabel() == "M (particles)" and ax.get_ylabel() == "w2_squared (law)"
    assert ax.get_xticks().tolist() == [4.0, 16.0] and [t.get_text() for t in ax.get_xticklabels()] == [
        "4",
        "16",
    ]
    assert isinstance(ax.xaxis.get_minor_formatter(), matplotlib.ticker.NullFormatter)
    assert ax.get_legend().get_texts()[0].get_fontsize() == 8
    plt.close(fig)
    fig = r.plot(path=tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not plt.fignum_exists(fig.number)


def test_study_result_plot_of_an_observable_without_floor_on_a_given_axis():
    """An observable: the y label ``|name − limit|``; no floor line when the floor is 0; the label names the
    study in the legend; drawn on the given axis, whose figure is returned."""
    r = hand_result(metric="loss", method="observable", limit=0.1, estimator="reference", level=0.95)
    fig0, ax = plt.subplots()
    fig = r.plot(ax=ax, label="mine")
    assert fig is fig0 and ax.get_ylabel() == "|loss − limit|" and len(ax.lines) == 4  # points, 2 caps, fit
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "mine: slope -0.500, 95% CI [-0.750, -0.250] (reference)",
        "mine (±1.96 SE)",
    ]
    assert ax.containers[0][0].get_ydata().tolist() == pytest.approx((r.mean - 0.1).abs().tolist(), abs=1e-15)
    plt.close(fig)
    r = hand_result(floor=torch.zeros(2, 3, dtype=DT))  # a floor of zeros draws no floor line
    fig = r.plot()
    assert len(fig.axes[0].lines) == 4 and len(fig.axes[0].get_legend().get_texts()) == 2
    plt.close(fig)


# --------------------------------------------------------------------------------------------------------
# _distance


def test_distance_with_a_callable_reshapes_its_output():
    x, y = torch.zeros(3, 2, 1), torch.zeros(4, 1)
    out = studies._distance(lambda a, b: torch.ones(a.shape[0], 1) * b.shape[0], "custom", x, y)
    assert out.shape == (3,) and out.tolist() == [4.0, 4.0, 4.0]


@pytest.mark.parametrize(
    ("metric", "p", "root"), [("w2_squared", 2, False), ("w2", 2, True), ("w1", 1, False)]
)
def test_distance_to_an_exact_law_is_the_closed_form(metric, p, root):
    """Against U(0, 1): ``W_p^p`` by hand (the sorted points against the quantile), its root for ``w2``."""
    x = torch.rand(3, 5, 1, generator=gen(13), dtype=DT) * 1.4 - 0.2
    got = studies._distance(metric, "law", x, Uniform())
    want = [w_to_uniform(row, p) ** (0.5 if root else 1.0) for row in x.numpy()]
    assert got.tolist() == pytest.approx(want, abs=1e-13)


@pytest.mark.parametrize(
    ("metric", "p", "root"), [("w2_squared", 2, False), ("w2", 2, True), ("w1", 1, False)]
)
def test_distance_to_a_cloud_in_1d_is_the_quantile_integral(metric, p, root):
    """A (B, M, 1) batch against an (N, 1) cloud of another size, method ``1d``: the quantile integral."""
    x = torch.rand(2, 6, 1, generator=gen(14), dtype=DT)
    y = torch.rand(4, 1, generator=gen(15), dtype=DT)
    got = studies._distance(metric, "1d", x, y)
    want = [w_1d(row, y.numpy(), p) ** (0.5 if root else 1.0) for row in x.numpy()]
    assert got.tolist() == pytest.approx(want, abs=1e-13)


def test_distance_to_clouds_in_2d_with_the_exact_method_is_pots_emd():
    """Per-replica reference clouds (B, N, 2), method ``exact``: ``ot.emd2`` with uniform weights and the
    squared (w2_squared) or plain (w1) Euclidean cost."""
    x = torch.rand(2, 5, 2, generator=gen(16), dtype=DT)
    y = torch.rand(2, 7, 2, generator=gen(17), dtype=DT)
    for metric, power in (("w2_squared", 2), ("w1", 1)):
        got = studies._distance(metric, "exact", x, y)
        for b in range(2):
            cost = ot.dist(x[b].numpy(), y[b].numpy(), metric="euclidean") ** power
            assert abs(float(got[b]) - ot.emd2(np.full(5, 0.2), np.full(7, 1 / 7), cost)) < 1e-9


# --------------------------------------------------------------------------------------------------------
# convergence_in_m: distance studies


def uniform_sample(M: int, reps: int) -> torch.Tensor:
    """``reps`` clouds of M uniform points, from a generator of their own (seeded by M)."""
    return torch.rand(reps, M, 1, generator=gen(100 + M), dtype=DT)


def test_a_law_study_end_to_end_against_hand_distances_and_a_replayed_bootstrap():
    """Against U(0, 1): every value is the hand ``W2²``; slope and intercept are ``np.polyfit`` of the mean
    distances; the interval is the (2.5 %, 97.5 %) ``np.quantile`` of the polyfit slopes of the bootstrap
    means, replayed from a clone of the generator (n_boot = 64); and every other field."""
    Ms = [4, 8, 16]
    g = gen(21)
    state = g.get_state()
    r = convergence_in_m(
        uniform_sample, Ms, reps=5, reference=Uniform(), generator=g, n_boot=64, progress=False
    )
    values = np.array([[w_to_uniform(x, 2) for x in uniform_sample(M, 5).numpy()] for M in Ms])
    assert r.values.dtype == DT and np.allclose(r.values.numpy(), values, rtol=0, atol=1e-14)
    s, i = np_loglog(Ms, values.mean(1))
    boot, _ = replay_boot(values, state, 64)
    lo, hi = np.quantile([np_loglog(Ms, row)[0] for row in boot], [0.025, 0.975])
    assert abs(r.slope - s) < 1e-12 and abs(r.intercept - i) < 1e-12
    assert r.slope_ci == pytest.approx((lo, hi), abs=1e-12)
    assert r.Ms == (4, 8, 16) and r.metric == "w2_squared" and r.method == "law" and r.level == 0.95
    assert r.estimator == "exact" and list(r.estimates) == ["exact"] and r.limit == 0.0
    assert r.estimates["exact"] == RateEstimate(
        "exact", r.slope, r.slope_ci, 0.0, math.exp(r.intercept), 0.95
    )
    assert r.floor.shape == (3, 0) and r.floor.dtype == DT and r.reference_values.shape == (0,)
    assert list(r.observed) == ["w2_squared"] and r.observed["w2_squared"] is r.values
    assert r.series == {} and r.times is None


@pytest.mark.parametrize(("metric", "p", "root"), [("w2", 2, True), ("w1", 1, False)])
def test_a_law_study_with_another_metric(metric, p, root):
    r = convergence_in_m(uniform_sample, [4, 8], reps=3, reference=Uniform(), metric=metric, generator=0,
                         n_boot=8, progress=False)  # fmt: skip
    want = [
        [w_to_uniform(x, p) ** (0.5 if root else 1.0) for x in uniform_sample(M, 3).numpy()] for M in (4, 8)
    ]
    assert r.metric == metric and np.allclose(r.values.numpy(), want, rtol=0, atol=1e-13)


def recording_sampler(calls):
    def reference(n, generator):
        calls.append((n, generator))
        return torch.rand(n, 1, generator=generator, dtype=DT)

    return reference


def test_a_sampler_study_draws_fresh_clouds_per_replicate_and_the_floor_pairs():
    """A sampler: at each M one call ``reference(N·(reps + 2·floor_reps), generator)`` with the study's own
    generator (N = M, floor_reps = reps by default), cut into (count, N, d) clouds: the first ``reps`` are
    the references of the replicates, the next two blocks of ``floor_reps`` the floor pairs. Values, floor and
    interval against the hand 1-D distances and the replayed draws; no floor warning (a two-sample study)."""
    Ms, reps = [4, 8], 3
    calls = []
    g = gen(22)
    replay = clone(g)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = convergence_in_m(uniform_sample, Ms, reps=reps, reference=recording_sampler(calls), generator=g,
                             n_boot=16, progress=False)  # fmt: skip
    assert [n for n, _ in calls] == [4 * 9, 8 * 9] and all(c is g for _, c in calls)
    values, floor = [], []
    for M in Ms:
        ref = torch.rand(M * 9, 1, generator=replay, dtype=DT).reshape(9, M, 1).numpy()
        values.append([w_1d(x, ref[b], 2) for b, x in enumerate(uniform_sample(M, reps).numpy())])
        floor.append([w_1d(ref[3 + i], ref[6 + i], 2) for i in range(3)])
    assert np.allclose(r.values.numpy(), values, rtol=0, atol=1e-14)
    assert r.floor.shape == (2, 3) and np.allclose(r.floor.numpy(), floor, rtol=0, atol=1e-14)
    boot, _ = replay_boot(np.array(values), replay.get_state(), 16)
    slopes = [np_loglog(Ms, row)[0] for row in boot]
    assert r.slope_ci == pytest.approx(tuple(np.quantile(slopes, [0.025, 0.975])), abs=1e-12)
    assert r.method == "1d" and not [m for m in messages(caught) if "floor" in m]


def test_a_sampler_study_with_reference_size_and_floor_reps_and_its_floor_warning():
    """``reference_size = 5``, ``floor_reps = 2``: calls of 5·(3 + 4) rows, a floor (K, 2); a reference meant
    to stand for the law, so a mean distance below 3× the mean floor is named in a RuntimeWarning pointing at
    the caller, with the sizes where it happens (computed here from the values)."""
    calls = []
    g = gen(43)
    replay = clone(g)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = convergence_in_m(uniform_sample, [4, 8], reps=3, reference=recording_sampler(calls), generator=g,
                             reference_size=5, floor_reps=2, n_boot=8, progress=False)  # fmt: skip
    assert [n for n, _ in calls] == [35, 35]
    floors = []
    for M in (4, 8):
        ref = torch.rand(35, 1, generator=replay, dtype=DT).reshape(7, 5, 1).numpy()
        floors.append([w_1d(ref[3 + i], ref[5 + i], 2) for i in range(2)])
        assert np.allclose(
            r.values[(4, 8).index(M)].numpy(),
            [w_1d(x, ref[b], 2) for b, x in enumerate(uniform_sample(M, 3).numpy())], rtol=0, atol=1e-14,
        )  # fmt: skip
    assert r.floor.shape == (2, 2) and np.allclose(r.floor.numpy(), floors, rtol=0, atol=1e-14)
    low = [M for M, m, f in zip((4, 8), r.values.mean(1).tolist(), np.mean(floors, 1)) if m < 3 * f]
    assert low == [4]  # one size of two: the list is filtered
    floor_warnings = [w for w in caught if "floor" in str(w.message)]
    assert [str(w.message) for w in floor_warnings] == [
        f"the mean distance is below 3× the reference floor at M = {low}: the slope there measures the "
        "reference as much as μ_M (use a larger reference)"
    ]
    assert floor_warnings[0].category is RuntimeWarning and (
        UNDER_MUTMUT or floor_warnings[0].filename == HERE
    )


def floor_study(values_by_M, floor=1.0, **kw):
    """A cloud study with a custom metric: the floor halves (batch 1) are at distance ``floor``, a sample of
    size M (filled with M) at ``values_by_M[M]`` from the cloud."""

    def metric(x, y):
        if x.shape[0] == 1:
            return torch.full((1,), floor, dtype=DT)
        return torch.full((x.shape[0],), values_by_M[int(x[0, 0, 0])], dtype=DT)

    def sample(M, reps):
        return torch.full((reps, M, 1), float(M), dtype=DT)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = convergence_in_m(sample, sorted(values_by_M), reps=2, reference=torch.zeros(6, 1, dtype=DT),
                             metric=metric, generator=0, n_boot=4, progress=False, **kw)  # fmt: skip
    return r, caught


def test_the_floor_warning_is_strictly_below_three_times_the_floor():
    """Mean distances 2.9, 3.0 and 3.1 over a floor of 1: only M = 2 is below 3× (3.0 is not)."""
    r, caught = floor_study({2: 2.9, 4: 3.0, 8: 3.1})
    assert messages(caught) == [
        "the mean distance is below 3× the reference floor at M = [2]: the slope there measures the reference "
        "as much as μ_M (use a larger reference)"
    ]
    assert (UNDER_MUTMUT or caught[0].filename == HERE) and r.method == "custom" and r.metric == "metric"
    assert r.floor.tolist() == [[1.0]] * 3 and r.values.tolist() == [[2.9, 2.9], [3.0, 3.0], [3.1, 3.1]]


def test_no_floor_warning_when_a_mean_distance_is_zero():
    """A mean distance of 0 (below every floor) gives the log-log note, pointing at the caller, and no floor
    warning (there is no rate to spoil)."""
    r, caught = floor_study({2: 0.5, 4: 0.0, 8: 0.25})
    assert messages(caught) == ["a mean distance is ≤ 0 ([0.5, 0.0, 0.25]): no log-log slope"]
    assert caught[0].category is RuntimeWarning and (UNDER_MUTMUT or caught[0].filename == HERE)
    assert math.isnan(r.slope) and math.isnan(r.intercept)


def test_a_cloud_study_measures_each_sample_against_the_whole_cloud():
    """A fixed cloud (N = 7): the values are the 1-D distances of each sample to all 7 points, ``w1`` here."""
    cloud = torch.rand(7, 1, generator=gen(24), dtype=DT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        r = convergence_in_m(uniform_sample, [4, 8], reps=3, reference=cloud, metric="w1", generator=1, n_boot=8,
                             progress=False)  # fmt: skip
    want = [[w_1d(x, cloud.numpy(), 1) for x in uniform_sample(M, 3).numpy()] for M in (4, 8)]
    np.testing.assert_allclose(r.values.numpy(), want, rtol=0, atol=1e-14)
    assert r.method == "1d" and r.floor.shape == (2, 1)


def test_a_2d_cloud_study_with_the_exact_method_is_pots_emd():
    cloud = torch.rand(6, 2, generator=gen(25), dtype=DT)

    def sample(M, reps):
        return torch.rand(reps, M, 2, generator=gen(M), dtype=DT)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        r = convergence_in_m(sample, [3, 5], reps=2, reference=cloud, method="exact", generator=1, n_boot=8,
                             progress=False)  # fmt: skip
    assert r.method == "exact"
    for k, M in enumerate((3, 5)):
        for b, x in enumerate(sample(M, 2).numpy()):
            cost = ot.dist(x, cloud.numpy())
            assert abs(float(r.values[k, b]) - ot.emd2(np.full(M, 1 / M), np.full(6, 1 / 6), cost)) < 1e-9


@pytest.mark.parametrize(
    ("reference", "kw", "expected"),
    [
        (torch.rand(6, 1, generator=gen(26), dtype=DT), {}, ("auto", 8, 6, 1)),
        (recording_sampler([]), {}, ("auto", 8, 8, 1)),
        (recording_sampler([]), {"reference_size": 5}, ("auto", 8, 5, 1)),
        (recording_sampler([]), {"method": "exact"}, ("exact", 8, 8, 1)),
    ],
    ids=["cloud", "sampler", "sampler_size", "given"],
)
def test_the_method_is_resolved_once_at_the_largest_sizes(monkeypatch, reference, kw, expected):
    """``resolve_method(method, M_K, N(M_K), d)`` is called once, with the largest M and its reference size
    (the cloud's N, ``reference_size``, or M), and its answer is the study's method."""
    seen = []

    def record(*args):
        seen.append(args)
        return "1d"

    monkeypatch.setattr(studies, "resolve_method", record)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        r = convergence_in_m(uniform_sample, [4, 8], reps=2, reference=reference, generator=0, n_boot=4,
                             progress=False, **kw)  # fmt: skip
    assert seen == [expected] and r.method == "1d"


class Unnamed:
    def __call__(self, x, y):
        return (x.mean((1, 2)) - y.mean()) ** 2


def named_metric(x, y):
    return (x.mean((1, 2)) - y.mean()) ** 2


@pytest.mark.parametrize(("metric", "name"), [(named_metric, "named_metric"), (Unnamed(), "custom"),
                                              (lambda x, y: (x.mean((1, 2)) - y.mean()) ** 2, "<lambda>")],
                         ids=["function", "object", "lambda"])  # fmt: skip
def test_a_custom_metric_is_named_after_the_callable(metric, name):
    cloud = torch.linspace(-1, 1, 8, dtype=DT)[:, None] + 5.0
    r = convergence_in_m(uniform_sample, [4, 8], reps=2, reference=cloud, metric=metric, generator=0, n_boot=4,
                         progress=False)  # fmt: skip
    want = [[(float(x.mean()) - 5.0) ** 2 for x in uniform_sample(M, 2)] for M in (4, 8)]
    assert r.metric == name and r.method == "custom" and np.allclose(r.values.numpy(), want, rtol=1e-12)


def test_a_non_finite_custom_distance_is_refused_by_the_metric_name():
    def sq(x, y):
        return torch.full((x.shape[0],), math.nan if x.shape[1] == 8 else 1.0, dtype=DT)

    with pytest.raises(ValueError) as caught:
        convergence_in_m(uniform_sample, [4, 8], reps=2, reference=torch.zeros(4, 1, dtype=DT), metric=sq,
                         generator=0, progress=False)  # fmt: skip
    assert str(caught.value) == "sq has 2 non-finite entries (NaN or Inf), the first at index (1, 0)"


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"sample": lambda M, reps: torch.full((reps, M, 1), math.nan, dtype=DT)},
            ValueError,
            "sample(M, reps) has 12 non-finite entries (NaN or Inf), the first at index (0, 0, 0)",
        ),
        (
            {"reference": lambda n, g: torch.full((n, 1), math.inf, dtype=DT)},
            ValueError,
            "reference(n, generator) has 36 non-finite entries (NaN or Inf), the first at index (0, 0)",
        ),
        (
            {"reference": lambda n, g: torch.zeros(n, dtype=DT)},
            ValueError,
            "reference(n, generator) must return shape (n, d) = (36, d), got (36,)",
        ),
        (
            {"sample": lambda M, reps: torch.zeros(reps + 1, M, 1, dtype=DT)},
            ValueError,
            "sample(M, reps) must return shape (reps, M, d) = (3, 4, d), got (4, 4, 1)",
        ),
        (
            {"reference": Unnamed()},
            ValueError,
            "reference(n, generator) must return shape (n, d) = (36, d), got ()",
        ),
    ],
    ids=["nan_sample", "inf_reference", "flat_reference", "reps_off", "object_reference"],
)
def test_distance_study_refusals_not_covered_elsewhere(kwargs, error, message):
    """Whole messages for the finiteness and shape checks of the sampled clouds (3 replicates at M = 4, a
    sampled reference of 4 points drawn 3 + 2·3 times). A callable object is taken as a sampler."""
    args = {"sample": uniform_sample, "reference": Uniform(), **kwargs}
    if isinstance(args["reference"], Unnamed):
        args["reference"] = lambda n, g: torch.tensor(0.0, dtype=DT).expand(())
    with pytest.raises(error) as caught:
        convergence_in_m(args.pop("sample"), [4, 8], reps=3, generator=0, progress=False, **args)
    assert str(caught.value) == message


# --------------------------------------------------------------------------------------------------------
# convergence_in_m: quantity studies

QMS = [8, 16, 32, 64]


def loss_sample(M: int, reps: int) -> dict[str, torch.Tensor]:
    """``Y = 1 + 2·M^{−0.8}(1 + 0.2ξ)`` and a second scalar ``z = −Y``, from a generator seeded by M."""
    y = 1.0 + 2.0 * M**-0.8 * (1 + 0.2 * torch.randn(reps, generator=gen(200 + M), dtype=DT))
    return {"Y": y, "z": -y}


REF = [1.01, 0.99, 1.004, 0.997, 1.0]


def test_a_quantity_study_with_every_estimator_against_numpy_and_the_replayed_draws():
    """Reference values R = 5, level 0.9, every estimator. Replayed from a clone of the generator: the
    bootstrap indices, then the reference mean's t draws (n normals, then an (n, R − 1) block). Each estimate
    against its NumPy answer: ``exact`` with the reference mean as the limit (polyfit, quantiles),
    ``reference`` with the point (∞, ȳ_ref) of weight ``1/SE_ref²`` and bootstrap point ``ȳ + SE·t``, ``fit``
    and ``differences`` (t intervals, df = reps − 1). The head (first named) gives slope, interval,
    intercept and limit; no warnings."""
    reps, n_boot = 6, 30
    g = gen(31)
    state = g.get_state()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = convergence_in_m(loss_sample, QMS, reps=reps, reference=REF, quantity="Y", generator=g,
                             n_boot=n_boot, level=0.9, estimator=ESTIMATORS, progress=False)  # fmt: skip
    assert messages(caught) == []
    values = np.stack([loss_sample(M, reps)["Y"].numpy() for M in QMS])
    assert np.array_equal(r.values.numpy(), values)
    boot, replay = replay_boot(values, state, n_boot)
    z = torch.randn(n_boot, generator=replay, dtype=DT).numpy()
    chi2 = (torch.randn(n_boot, 4, generator=replay, dtype=DT).numpy() ** 2).sum(1)
    ref = np.array(REF)
    ref_mean, ref_se = ref.mean(), ref.std(ddof=1) / math.sqrt(5)
    ref_boot = ref_mean + ref_se * z / np.sqrt(chi2 / 4)
    m = values.mean(1)
    se2 = values.var(1, ddof=1) / reps
    df = reps - 1

    s, i = np_loglog(QMS, m - ref_mean)
    ex = r.estimates["exact"]
    assert (
        abs(ex.slope - s) < 1e-12
        and abs(ex.coefficient - math.exp(i)) < 1e-12
        and ex.limit == pytest.approx(ref_mean, abs=1e-15)
    )
    slopes = [np_loglog(QMS, row - ref_mean)[0] for row in boot]
    assert ex.slope_ci == pytest.approx(tuple(np.quantile(slopes, [0.05, 0.95])), abs=1e-12)

    Mi = np.array([*QMS, np.inf])
    w = np.array([*(1 / se2), 1 / ref_se**2])
    a, c, L, _ = np_power_fit(Mi, [*m, ref_mean], w)
    ab = [np_power_fit(Mi, [*row, rb], w)[0] for row, rb in zip(boot, ref_boot)]
    rf = r.estimates["reference"]
    assert abs(rf.slope + a) < 1e-9 and abs(rf.coefficient - c) < 1e-7 and abs(rf.limit - L) < 1e-9
    assert rf.slope_ci == pytest.approx(np_t_ci(-a, ab, 0.9, df), abs=1e-8)

    a, c, L, _ = np_power_fit(QMS, m, 1 / se2)
    ab = [np_power_fit(QMS, row, 1 / se2)[0] for row in boot]
    ft = r.estimates["fit"]
    assert abs(ft.slope + a) < 1e-9 and abs(ft.coefficient - c) < 1e-7 and abs(ft.limit - L) < 1e-8
    assert ft.slope_ci == pytest.approx(np_t_ci(-a, ab, 0.9, df), abs=1e-8)

    wd = 1 / (se2[:-1] + se2[1:])
    a, c1, _, _ = np_power_fit(QMS[:-1], m[:-1] - m[1:], wd, free=False)
    ab = [np_power_fit(QMS[:-1], row[:-1] - row[1:], wd, free=False)[0] for row in boot]
    c = c1 / (1 - 2.0**-a)
    df_ = r.estimates["differences"]
    assert abs(df_.slope + a) < 1e-9 and abs(df_.coefficient - c) < 1e-7
    assert abs(df_.limit - (m[-1] - c * 64.0**-a)) < 1e-8
    assert df_.slope_ci == pytest.approx(np_t_ci(-a, ab, 0.9, df), abs=1e-8)

    assert list(r.estimates) == list(ESTIMATORS) and all(e.level == 0.9 for e in r.estimates.values())
    assert (r.estimator, r.slope, r.slope_ci, r.limit) == ("exact", ex.slope, ex.slope_ci, ex.limit)
    assert r.intercept == ex.intercept and r.level == 0.9
    assert r.metric == "Y" and r.method == "observable" and r.floor.shape == (4, 0)
    assert r.reference_values.tolist() == REF and r.reference_values.dtype == DT
    assert list(r.observed) == ["Y", "z"] and torch.equal(r.observed["z"], -r.values)
    assert r.series == {} and r.times is None


def test_the_first_estimator_named_heads_the_result():
    r = convergence_in_m(loss_sample, QMS, reps=4, reference=REF, quantity="Y", generator=0, n_boot=10,
                         estimator=("fit", "reference"), progress=False)  # fmt: skip
    head = r.estimates["fit"]
    assert list(r.estimates) == ["fit", "reference"] and r.estimator == "fit"
    assert (r.slope, r.slope_ci, r.limit, r.intercept) == (
        head.slope,
        head.slope_ci,
        head.limit,
        head.intercept,
    )


def test_an_exact_limit_is_the_limit_of_the_exact_estimator_and_draws_no_t():
    """A number as the reference: ``exact`` by default, the limit that number, ``reference_values`` empty; no
    t draws follow the bootstrap (the generator advanced by the bootstrap alone)."""
    g = gen(32)
    state = g.get_state()
    r = convergence_in_m(loss_sample, QMS, reps=4, reference=1.0, quantity="Y", generator=g, n_boot=12,
                         progress=False)  # fmt: skip
    values = np.stack([loss_sample(M, 4)["Y"].numpy() for M in QMS])
    boot, replay = replay_boot(values, state, 12)
    assert torch.equal(g.get_state(), replay.get_state())
    assert r.estimator == "exact" and r.limit == 1.0 and r.reference_values.shape == (0,)
    assert abs(r.slope - np_loglog(QMS, values.mean(1) - 1.0)[0]) < 1e-12
    slopes = [np_loglog(QMS, row - 1.0)[0] for row in boot]
    assert r.slope_ci == pytest.approx(tuple(np.quantile(slopes, [0.025, 0.975])), abs=1e-12)


def test_a_quantity_below_its_limit_has_a_negative_coefficient():
    """The limit 2 above every mean: the coefficient is negative and the excess is ``2 − mean``."""
    r = convergence_in_m(loss_sample, QMS, reps=4, reference=2.0, quantity="Y", generator=0, n_boot=8,
                         progress=False)  # fmt: skip
    values = np.stack([loss_sample(M, 4)["Y"].numpy() for M in QMS])
    s, i = np_loglog(QMS, 2.0 - values.mean(1))
    assert abs(r.slope - s) < 1e-12 and r.estimates["exact"].coefficient == pytest.approx(
        -math.exp(i), rel=1e-12
    )
    assert r.excess.tolist() == pytest.approx((2.0 - values.mean(1)).tolist(), abs=1e-15)
    assert all(math.isfinite(b) for b in r.slope_ci)


def test_a_trajectory_quantity_is_the_observable_at_the_last_saved_state():
    """The sampler returns a trajectory; the quantity is an observable, so a series over the saved states;
    its last value is Y. The series (K, reps, S) and the saved times are kept; the distance checks apply to
    the states (d consistent)."""

    def sample(M, reps):
        base = torch.rand(reps, M, 1, generator=gen(M), dtype=DT)
        states = torch.stack([base, base + 1 / M, base + 2 / M])  # (S=3, reps, M, 1)
        return Trajectory(times=torch.tensor([0.0, 0.5, 1.0]), states=states, steps=torch.arange(3), dt=0.5,
                          solver="em")  # fmt: skip

    with pytest.raises(ValueError, match=r"^estimator='differences' needs ≥ 3 sizes"):
        convergence_in_m(sample, [4, 8], reps=3, reference=None, quantity="m", estimator="differences",
                         observables={"m": lambda x: x.mean((1, 2))}, generator=0, n_boot=4, progress=False)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # two sizes: bootstrap fits at the grid's end
        r = convergence_in_m(sample, [4, 8], reps=3, reference=[0.5, 0.6], quantity="m",
                             observables={"m": lambda x: x.mean((1, 2))}, generator=0, n_boot=4,
                             progress=False)  # fmt: skip
    base = [torch.rand(3, M, 1, generator=gen(M), dtype=DT).mean((1, 2)) for M in (4, 8)]
    want = torch.stack(
        [b[:, None] + torch.tensor([0.0, 1.0, 2.0], dtype=DT) / M for b, M in zip(base, (4, 8))]
    )
    assert r.series["m"].shape == (2, 3, 3) and torch.allclose(r.series["m"], want, rtol=0, atol=1e-15)
    assert torch.allclose(r.values, want[..., -1], rtol=0, atol=1e-15) and r.times.tolist() == [0.0, 0.5, 1.0]
    assert r.observed["m"] is r.values and r.estimator == "reference"


def test_a_quantity_study_checks_the_states_it_is_given():
    """States returned with a quantity are checked as in a distance study: shape and finiteness."""

    def bad_shape(M, reps):
        return {"final": torch.zeros(reps, M + 1, 1, dtype=DT), "Y": torch.ones(reps, dtype=DT)}

    with pytest.raises(ValueError) as caught:
        convergence_in_m(bad_shape, [4, 8], reps=3, reference=1.0, quantity="Y", generator=0, progress=False)
    assert str(caught.value) == "sample(M, reps) must return shape (reps, M, d) = (3, 4, d), got (3, 5, 1)"

    def nan_states(M, reps):
        return {"final": torch.full((reps, M, 1), math.nan, dtype=DT), "Y": torch.ones(reps, dtype=DT)}

    with pytest.raises(ValueError, match=r"^sample\(M, reps\) has 12 non-finite entries"):
        convergence_in_m(nan_states, [4, 8], reps=3, reference=1.0, quantity="Y", generator=0, progress=False)

    def d_changes(M, reps):
        return {"final": torch.zeros(reps, M, M // 4, dtype=DT), "Y": torch.ones(reps, dtype=DT)}

    with pytest.raises(ValueError) as caught:
        convergence_in_m(d_changes, [4, 8], reps=3, reference=1.0, quantity="Y", generator=0, progress=False)
    assert str(caught.value) == "sample(M, reps) must return shape (reps, M, d) = (3, 8, 1), got (3, 8, 2)"


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        (
            lambda M, reps: {"Y": torch.ones(reps, dtype=DT), "t": [0.0, 1.0] if M == 4 else [0.0, 1.0, 2.0],
                             "s": torch.ones(reps, 2 if M == 4 else 3, dtype=DT)},
            "the series at M = 8 are saved at other times than at M = 4",
        ),
        (
            lambda M, reps: {"Y": torch.ones(reps, dtype=DT), **({"s": torch.ones(reps, 2)} if M == 8 else {})},
            "sample(M, reps) returned other observables at M = 8 than at M = 4",
        ),
        (
            lambda M, reps: {"Y": torch.ones(reps, dtype=DT), **({"s": torch.ones(reps, 2)} if M == 4 else {})},
            "sample(M, reps) returned other observables at M = 8 than at M = 4",
        ),
        (
            lambda M, reps: {"Y": torch.ones(reps, dtype=DT), ("a" if M == 4 else "b"): torch.ones(reps, dtype=DT)},
            "sample(M, reps) returned other observables at M = 8 than at M = 4",
        ),
    ],
    ids=["times_length", "series_added", "series_dropped", "scalar_renamed"],
)  # fmt: skip
def test_observables_and_times_must_agree_across_sizes(sample, message):
    with pytest.raises(ValueError) as caught:
        convergence_in_m(sample, [4, 8], reps=2, reference=1.0, quantity="Y", generator=0, progress=False)
    assert str(caught.value) == message


def test_series_saved_at_the_same_times_are_stacked_per_size():
    """Equal times at every M: the series stacked (K, reps, T), the times kept, the scalars in ``observed``."""

    def sample(M, reps):
        return {"Y": torch.full((reps,), 1 + 1 / M, dtype=DT) + 1e-3 * torch.arange(reps, dtype=DT),
                "t": [0.0, 2.0], "s": torch.arange(2 * reps, dtype=DT).reshape(reps, 2) * M}  # fmt: skip

    r = convergence_in_m(sample, [4, 8, 16, 32], reps=2, reference=1.0, quantity="Y", generator=0, n_boot=4,
                         progress=False)  # fmt: skip
    assert r.times.tolist() == [0.0, 2.0] and list(r.series) == ["s"] and r.series["s"].shape == (4, 2, 2)
    assert r.series["s"][2].tolist() == [[0.0, 16.0], [32.0, 48.0]] and list(r.observed) == ["Y"]
    assert r.curves.rows[0] == {"M": 4, "replicate": 0, "t": 0.0, "s": 0.0}


# --------------------------------------------------------------------------------------------------------
# convergence_in_m: estimators chosen, arguments read


def const_ratio_sample(M, reps):
    return {"Y": 1.0 + M**-1.0 * (1 + 0.1 * torch.randn(reps, generator=gen(M), dtype=DT))}


@pytest.mark.parametrize(
    ("Ms", "reference", "expected"),
    [
        ([10, 20, 40], None, "differences"),
        ([10, 20, 40, 80], None, "fit"),
        ([10, 20, 30, 45], None, "fit"),
        ([10, 20, 40], 1.0, "exact"),
        ([10, 20, 40], [1.0, 1.01], "reference"),
    ],
    ids=["three_in_ratio", "four", "four_uneven", "limit", "values"],
)
def test_auto_picks_the_estimator_the_reference_allows(Ms, reference, expected):
    r = convergence_in_m(const_ratio_sample, Ms, reps=3, reference=reference, quantity="Y", generator=0,
                         n_boot=6, progress=False)  # fmt: skip
    assert r.estimator == expected and list(r.estimates) == [expected]


@pytest.mark.parametrize(
    ("Ms", "message"),
    [
        ([10, 20, 30], "estimator='fit' fits 3 numbers (Y_∞, c, α): it needs ≥ 4 sizes, got 3"),
        ([2, 3], "estimator='differences' needs ≥ 3 sizes with a constant ratio M_(k+1)/M_k, got Ms = [2, 3] "
                 "(use estimator='fit')"),
    ],
    ids=["three_uneven", "two"],
)  # fmt: skip
def test_auto_without_a_reference_on_too_few_sizes_says_why(Ms, message):
    """No reference: three sizes not in one ratio go to ``fit`` (which needs four), two sizes (one ratio) to
    ``differences`` (which needs three)."""
    with pytest.raises(ValueError) as caught:
        convergence_in_m(const_ratio_sample, Ms, reps=3, reference=None, quantity="Y", generator=0, n_boot=6,
                         progress=False)  # fmt: skip
    assert str(caught.value) == message


def test_repeated_and_auto_estimators_are_kept_once_in_order():
    r = convergence_in_m(uniform_sample, [4, 8, 16, 32], reps=3, reference=Uniform(), generator=0, n_boot=6,
                         estimator=["auto", "exact", "fit", "auto"], progress=False)  # fmt: skip
    assert list(r.estimates) == ["exact", "fit"] and r.estimator == "exact"


def test_a_single_reference_value_with_the_fit_warns_nothing():
    """One reference value and ``estimator='fit'``: the value is not used as exact, so no warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = convergence_in_m(const_ratio_sample, [10, 20, 40, 80], reps=3, reference=[1.0], quantity="Y",
                             generator=0, n_boot=6, estimator="fit", progress=False)  # fmt: skip
    assert messages(caught) == [] and r.estimator == "fit" and r.reference_values.tolist() == [1.0]


def test_the_single_reference_value_warning_points_at_the_caller():
    with pytest.warns(RuntimeWarning, match="^one reference value: its fluctuation") as caught:
        r = convergence_in_m(const_ratio_sample, [10, 20, 40], reps=3, reference=[1.0], quantity="Y",
                             generator=0, n_boot=6, progress=False)  # fmt: skip
    assert (UNDER_MUTMUT or caught[0].filename == HERE) and r.limit == 1.0 and r.estimator == "exact"


def test_a_fit_at_the_end_of_the_grid_warns_from_the_caller():
    """Noise-free ``1 + M^{−6}``: α sits at the end (4) and so does every bootstrap fit: both notes, as
    RuntimeWarnings pointing at the caller."""

    def sample(M, reps):
        return {
            "Y": (1.0 + M**-6.0) * (1 + 1e-12 * torch.tensor([(-1.0) ** b for b in range(reps)], dtype=DT))
        }

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = convergence_in_m(sample, [2, 4, 8, 16], reps=2, reference=None, quantity="Y", generator=0, n_boot=5,
                             progress=False)  # fmt: skip
    assert messages(caught) == [
        EDGE,
        f"100% of the bootstrap fits put α at an end of {SPAN}: the interval is cut there",
    ]
    assert (
        all(w.category is RuntimeWarning and (UNDER_MUTMUT or w.filename == HERE) for w in caught)
        and r.slope == -4.0
    )


@pytest.mark.parametrize(
    "Ms", [np.array([4, 8, 16]), [torch.tensor(4), torch.tensor(8), torch.tensor(16)], (4, 8, 16), range(4, 17, 4)],
    ids=["numpy", "tensors", "tuple", "range"],
)  # fmt: skip
def test_sizes_may_be_numpy_or_tensor_integers(Ms):
    r = convergence_in_m(
        uniform_sample, Ms, reps=2, reference=Uniform(), generator=0, n_boot=4, progress=False
    )
    want = tuple(int(M) for M in Ms)
    assert r.Ms == want and all(type(M) is int for M in r.Ms)


@pytest.mark.parametrize("seed", [7, np.int64(7)], ids=["int", "numpy_int"])
def test_an_int_seed_is_a_fresh_generator_seeded_with_it(seed):
    kw = dict(reps=3, reference=Uniform(), n_boot=20, progress=False)
    a = convergence_in_m(uniform_sample, [4, 8], generator=seed, **kw)
    b = convergence_in_m(uniform_sample, [4, 8], generator=gen(7), **kw)
    c = convergence_in_m(uniform_sample, [4, 8], generator=gen(8), **kw)
    assert a.slope_ci == b.slope_ci and a.slope_ci != c.slope_ci


def test_the_progress_bar_is_shown_only_when_asked(capsys):
    convergence_in_m(
        uniform_sample, [4, 8], reps=2, reference=Uniform(), generator=0, n_boot=4, progress=True
    )
    err = capsys.readouterr().err
    assert "convergence in M" in err and "2/2" in err
    convergence_in_m(
        uniform_sample, [4, 8], reps=2, reference=Uniform(), generator=0, n_boot=4, progress=False
    )
    assert capsys.readouterr().err == ""


def test_the_default_progress_bar_follows_the_policy(capsys, monkeypatch):
    """``progress=None`` (the default): no bar into captured stderr (no terminal); with bars on
    (``MEANFIELD_PROGRESS=1``) and no delay, the bar (:mod:`meanfield.progress`)."""
    from meanfield import progress

    monkeypatch.delenv("MEANFIELD_PROGRESS", raising=False)
    convergence_in_m(uniform_sample, [4, 8], reps=2, reference=Uniform(), generator=0, n_boot=4)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("MEANFIELD_PROGRESS", "1")
    monkeypatch.setattr(progress, "DELAY", 0.0)
    convergence_in_m(uniform_sample, [4, 8], reps=2, reference=Uniform(), generator=0, n_boot=4)
    assert "convergence in M" in capsys.readouterr().err


def test_the_default_bootstrap_has_2000_draws():
    """``n_boot`` defaults to 2000: the generator advances exactly as a replay of 2000 index draws per M."""
    g = gen(33)
    state = g.get_state()
    convergence_in_m(uniform_sample, [4, 8], reps=2, reference=Uniform(), generator=g, progress=False)
    _, replay = replay_boot(np.ones((2, 2)), state, 2000)
    assert torch.equal(g.get_state(), replay.get_state())


def test_collect_of_a_float32_trajectory_gives_float64_series():
    """Observables of float32 saved states: the series and its scalar come back float64, detached."""
    states = torch.ones(2, 2, 3, 1, dtype=torch.float32, requires_grad=True)
    traj = Trajectory(
        times=torch.tensor([0.0, 1.0]), states=states, steps=torch.tensor([0, 1]), dt=1.0, solver="em"
    )
    _, scalars, series, _ = studies._collect("f", traj, 2, {"m": lambda x: x.mean((1, 2))})
    assert series["m"].dtype == DT and not series["m"].requires_grad and scalars["m"].dtype == DT
    assert series["m"].tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_a_quantity_that_is_a_returned_series_is_its_last_saved_value():
    """The sampler returns the quantity as a series (reps, T): Y is its last column (not the first)."""

    def sample(M, reps):
        base = 1.0 + M**-1.0 * (1 + 0.1 * torch.randn(reps, generator=gen(M), dtype=DT))
        return {"t": [0.0, 1.0, 2.0], "s": base[:, None] * torch.tensor([3.0, 2.0, 1.0], dtype=DT)}

    r = convergence_in_m(sample, [4, 8, 16, 32], reps=3, reference=1.0, quantity="s", generator=0, n_boot=4,
                         progress=False)  # fmt: skip
    want = torch.stack([sample(M, 3)["s"][:, -1] for M in (4, 8, 16, 32)])
    assert torch.equal(r.values, want) and r.series["s"].shape == (4, 3, 3) and r.observed["s"] is r.values


def test_estimate_differences_notes_a_fit_at_the_end_of_the_grid():
    """Differences of ``1 + 5·M^{−6}`` (noise-free; bootstrap rows equal to the means): α at the end of the
    grid, and every bootstrap fit too: both notes."""
    values = (1.0 + 5.0 * KS**-6.0)[:, None] * torch.tensor([1.0 + 1e-12, 1.0 - 1e-12], dtype=DT)
    boot = values.mean(1).expand(10, 5).clone()
    est, notes = call_estimate("differences", values, boot)
    assert est.slope == -4.0 and notes == [
        EDGE,
        f"100% of the bootstrap fits put α at an end of {SPAN}: the interval is cut there",
    ]
