"""Tests of meanfield.studies.in_memory: convergence in M (known rates, the linear McKean–Vlasov excess) and sweeps.

Statistical checks use tolerance ``Z·SE`` (``Z = 5``) or a stated theory band, fixed seeds, state the
smallest error they detect, and come with a negative control that must fail the same check.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import warnings

import matplotlib
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np
import ot
import pytest
import scipy.optimize
import scipy.stats
import torch
from helpers.bad_input import call, one_bad, tensors
from helpers.tiny_run import ROOT  # noqa: E402  (tests/helpers/tiny_run.py)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

import meanfield as mf
import meanfield.drift.potentials
import meanfield.metrics
import meanfield.nn
import meanfield.nn.tokens
import meanfield.stepping.brownian
from meanfield import MeanFieldLangevin, simulate
from meanfield.drift.potentials import (
    Quadratic,
    QuadraticInteraction,
)
from meanfield.metrics.wasserstein import (
    SINKHORN_MAX_POINTS,
    Normal,
    Uniform,
    w2_squared,
    wasserstein_to_law,
)
from meanfield.seeds import derive_seed
from meanfield.stepping.simulate import Trajectory
from meanfield.studies import grid as grid_module
from meanfield.studies import in_memory as studies
from meanfield.studies.in_memory import (
    ESTIMATORS,
    RateEstimate,
    StudyResult,
    SweepResult,
    Table,
    batch_seed,
    convergence_in_m,
    sweep,
)
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Estimate, Z, mean_se

DT = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def uniform_cube(d: int, generator: torch.Generator):
    """``sample(M, reps)``: i.i.d. uniform points of ``[0, 1]^d``."""
    return lambda M, reps: torch.rand(reps, M, d, generator=generator, dtype=DT)


def cube_sampler(d: int):
    """An exact sampler ``(n, generator) -> (n, d)`` of the uniform law on ``[0, 1]^d``."""
    return lambda n, generator: torch.rand(n, d, generator=generator, dtype=DT)


# ---------------------------------------------------------------------------------------------------------
# convergence_in_m: known answers


def test_exact_law_gives_one_over_6m_and_slope_minus_one():
    """Uniform samples against U(0,1) exactly: ``E W2² = 1/(6M)``, so the slope is −1.

    Per M (2 000 replicates) ``6M·mean`` is checked against 1 at 5 SE (≈ 10% detectable); the fitted slope
    against −1 at 5 bootstrap SE (SE = CI half-width / 1.96 ≈ 0.01; ≈ 0.05 detectable). Negative control: samples
    of U(0, 1.1) fail both (the distance tends to the constant W2²(U(0,1.1), U(0,1)) = 0.0033).
    """
    law = Uniform()
    Ms = [16, 32, 64, 128, 256]
    for scale, should_pass in [(1.0, True), (1.1, False)]:
        g = gen(1)
        result = convergence_in_m(
            lambda M, reps, g=g, scale=scale: scale * law.sample((reps, M), g),
            Ms,
            reps=2000,
            reference=law,
            generator=gen(2),
            progress=False,
        )
        assert result.method == "law" and result.floor.shape == (5, 0)
        assert torch.equal(result.floor_mean, torch.zeros(5, dtype=DT))
        per_m = [
            Estimate(float(6 * M * m), float(6 * M * s)).agrees(1.0, Z)
            for M, m, s in zip(Ms, result.mean, result.se, strict=True)
        ]
        slope_se = (result.slope_ci[1] - result.slope_ci[0]) / (2 * 1.96)
        slope_ok = Estimate(result.slope, slope_se).agrees(-1.0, Z)
        assert result.slope_ci[0] < result.slope < result.slope_ci[1]
        if should_pass:
            assert all(per_m) and slope_ok, (result.mean, result.slope, result.slope_ci)
        else:
            assert not any(per_m[1:]) and not slope_ok, (result.mean, result.slope, result.slope_ci)


@pytest.mark.slow
def test_w2_squared_of_uniform_cube_samples_decays_like_m_to_minus_two_thirds():
    """W2² between two independent i.i.d. samples of size M of the uniform law on [0,1]³: slope −2/3.

    Fit over M = 2^7 … 2^11, 40 replicates, exact OT; band ±0.05 around −2/3 (the local slope at these M
    is ≈ −0.69, a finite-size correction; the bootstrap CI is ≈ ±0.015 wide, so a 0.05 error is seen).
    The floor is the same two-sample quantity: one pair per M is enough here (``floor_reps=1``). Negative
    control: the sliced W2² of the same clouds (1-D projections: rate ≈ M^{-1}) falls outside the band.
    """
    Ms = [2**k for k in range(7, 12)]
    kwargs = {"reps": 40, "reference": cube_sampler(3), "floor_reps": 1, "progress": False}
    result = convergence_in_m(uniform_cube(3, gen(3)), Ms, generator=gen(4), method="exact", **kwargs)
    assert result.method == "exact" and result.floor.shape == (5, 1)
    assert abs(result.slope + 2 / 3) <= 0.05, (result.slope, result.slope_ci)
    assert result.slope_ci[1] - result.slope_ci[0] < 0.05  # the test has the power to see a 0.05 error
    sliced = convergence_in_m(uniform_cube(3, gen(3)), Ms, generator=gen(4), method="sliced", **kwargs)
    assert sliced.method == "sliced" and abs(sliced.slope + 2 / 3) > 0.05, sliced.slope


def test_linear_mckean_vlasov_particles_exceed_iid_samples_by_the_predicted_amount():
    """The M-particle law of ``dX = −aX dt − k(X − X̄) dt + sqrt(2β) dW`` vs its limit ``N(0, s∞)``.

    At stationarity the cloud is ``X̄ + Y``: ``Y`` has the law of a centred i.i.d. sample of ``N(0, s_Y)``
    and the centre ``X̄ ~ N(0, v̄)`` is independent of it. As ``W2²(μ, ν) = |m_μ − m_ν|² + W2²`` of the
    centred laws, ``E W2²(particles, ν) − E W2²(M i.i.d. N(0, s_Y), ν) = v̄ − s_Y/M`` exactly. For the
    Euler–Maruyama chain (an OU chain ``dX = −λX dt + σ dW`` has variance ``σ²/(2λ(1 − λ dt/2))``):
    ``v̄ = β/(aM(1 − a dt/2))``, ``s_Y = β/((a+k)(1 − (a+k) dt/2))``; as ``dt → 0`` the excess is
    ``c = βk/(a(a+k)M)`` (per dimension; d = 1 here).

    With a = 1, k = 4, β = 1, M = 64, dt = 0.02: excess 0.01248 (c = 0.0125). 2 000 replicas; i.i.d.
    baseline from 40 000 samples. Detects an error of ≈ 0.0025 (≈ 20% of c) at 5 SE. Negative control: the
    hypothesis "the particles are as close to the limit as i.i.d. samples" (excess 0) fails.
    """
    a, k, beta, M, dt = 1.0, 4.0, 1.0, 64, 0.02
    s_limit = beta / (a + k)
    system = MeanFieldLangevin(Quadratic(a), QuadraticInteraction(k), beta=beta)
    x0 = math.sqrt(s_limit) * torch.randn(2000, M, 1, generator=gen(5), dtype=DT)  # (B, M, 1)
    final = simulate(system, x0, t1=6.0, dt=dt, generator=gen(6)).final  # (B, M, 1); e^{-2a·6} ≈ 6e-6 left
    limit = Normal(0.0, math.sqrt(s_limit))
    particles = mean_se(wasserstein_to_law(final, limit).cost)

    centre_var = beta / (a * M * (1 - a * dt / 2))
    s_y = beta / ((a + k) * (1 - (a + k) * dt / 2))
    iid = Normal(0.0, math.sqrt(s_y)).sample((40_000, M), gen(7))  # (reps, M, 1)
    baseline = mean_se(wasserstein_to_law(iid, limit).cost)
    excess = Estimate(particles.value - baseline.value, math.hypot(particles.se, baseline.se))

    predicted = centre_var - s_y / M
    c = beta * k / (a * (a + k) * M)
    assert abs(predicted - c) <= 0.01 * c  # the EM correction is small at this dt
    assert excess.agrees(predicted, Z), (excess, predicted)
    assert not excess.agrees(0.0, Z), excess  # negative control


# ---------------------------------------------------------------------------------------------------------
# convergence_in_m: references and floors


def test_fixed_cloud_reference_floor_and_warning():
    """A fixed reference cloud: the floor is W2² between two random halves of it (shape (K, 1)).

    A small reference (40 points, floor ≈ its own sampling error) warns that the rate measures the
    reference; a large one does not.
    """
    small = torch.rand(40, 1, generator=gen(8), dtype=DT)
    with pytest.warns(RuntimeWarning, match="reference floor"):
        result = convergence_in_m(
            uniform_cube(1, gen(9)),
            [64, 256, 1024],
            reps=20,
            reference=small,
            generator=gen(10),
            progress=False,
        )
    assert result.floor.shape == (3, 1) and float(result.floor_mean[0]) > 0
    assert torch.equal(result.floor_mean, result.floor_mean[:1].expand(3))  # one floor for every M
    large = torch.rand(200_000, 1, generator=gen(11), dtype=DT)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = convergence_in_m(
            uniform_cube(1, gen(9)),
            [16, 64, 256],
            reps=20,
            reference=large,
            generator=gen(10),
            progress=False,
        )
    assert result.method == "1d"
    # the floor is a distance between two halves of the reference: of the order of 1/(6·N/2)·… (≪ the values)
    assert float(result.floor_mean[0]) < 0.01 * float(result.mean[-1])


def test_sampler_reference_floor_is_the_iid_baseline_and_reference_size_is_used():
    sizes = []

    def sampler(n, generator):
        sizes.append(n)
        return torch.rand(n, 2, generator=generator, dtype=DT)

    result = convergence_in_m(
        uniform_cube(2, gen(12)), [8, 16], reps=5, reference=sampler, generator=gen(13), progress=False
    )
    assert result.floor.shape == (2, 5) and result.method == "exact"
    assert sizes == [3 * 5 * 8, 3 * 5 * 16]  # one call per M: reps comparison clouds + reps floor pairs
    sizes.clear()
    convergence_in_m(
        uniform_cube(2, gen(12)),
        [8, 16],
        reps=5,
        reference=sampler,
        reference_size=100,
        generator=gen(13),
        progress=False,
    )
    assert sizes == [3 * 5 * 100] * 2
    sizes.clear()
    result = convergence_in_m(
        uniform_cube(2, gen(12)),
        [8, 16],
        reps=5,
        reference=sampler,
        floor_reps=2,
        generator=gen(13),
        progress=False,
    )
    assert sizes == [(5 + 2 * 2) * 8, (5 + 2 * 2) * 16] and result.floor.shape == (2, 2)


def test_same_generator_same_result_and_callable_metric():
    def run(seed):
        return convergence_in_m(
            uniform_cube(2, gen(seed)),
            [8, 16, 32],
            reps=4,
            reference=cube_sampler(2),
            generator=gen(seed + 100),
            progress=False,
        )

    a, b = run(14), run(14)
    assert torch.equal(a.values, b.values) and a.slope == b.slope and a.slope_ci == b.slope_ci

    def energy_gap(x, y):  # a user metric: difference of the mean squared norms
        return (x.square().sum(-1).mean(-1) - y.square().sum(-1).mean(-1)).abs()

    custom = convergence_in_m(
        uniform_cube(2, gen(15)),
        [8, 16],
        reps=4,
        reference=cube_sampler(2),
        metric=energy_gap,
        generator=gen(16),
        progress=False,
    )
    assert custom.metric == "energy_gap" and custom.method == "custom" and custom.values.shape == (2, 4)


def test_auto_method_is_resolved_once_at_the_largest_size():
    """Every M is measured by one distance: "auto" at the largest M (> SINKHORN_MAX_POINTS) picks sliced."""
    result = convergence_in_m(
        uniform_cube(2, gen(17)),
        [16, SINKHORN_MAX_POINTS + 1],
        reps=2,
        reference=cube_sampler(2),
        generator=gen(18),
        progress=False,
    )
    assert result.method == "sliced"
    x = uniform_cube(2, gen(17))(16, 2)
    assert w2_squared(x, x.flip(0), method="exact").shape == (2,)


def test_study_metrics_w2_and_w1_and_rows():
    law = Uniform()
    for metric, p in [("w2", 2), ("w1", 1)]:
        result = convergence_in_m(
            lambda M, reps: law.sample((reps, M), gen(M)),
            [4, 8],
            reps=3,
            reference=law,
            metric=metric,
            generator=gen(0),
            progress=False,
        )
        expected = wasserstein_to_law(law.sample((3, 4), gen(4)), law, p=p).value
        assert torch.allclose(result.values[0], expected, rtol=1e-14)
    rows = result.rows()
    assert [r["M"] for r in rows] == [4, 8] and set(rows[0]) == {"M", "mean", "se", "floor"}
    assert math.isclose(rows[1]["mean"], float(result.mean[1]))


def test_study_plot_writes_a_png(tmp_path):
    law = Uniform()
    result = convergence_in_m(
        lambda M, reps: law.sample((reps, M), gen(M)),
        [4, 8, 16],
        reps=4,
        reference=law,
        generator=gen(0),
        progress=False,
    )
    assert isinstance(result, StudyResult)
    result.plot(path=tmp_path / "rate.png")
    assert (tmp_path / "rate.png").stat().st_size > 1000
    assert math.isclose(float(result.fit(8.0)), math.exp(result.intercept) * 8**result.slope)


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"sample": "uniform"}, TypeError, ["sample", "callable"]),
        ({"Ms": [8]}, ValueError, ["Ms", "at least 2", "[8]"]),
        ({"Ms": [16, 8]}, ValueError, ["Ms", "increasing"]),
        ({"Ms": [8, 8.5]}, TypeError, ["Ms[i]", "float"]),
        ({"reps": 1}, ValueError, ["reps", "≥ 2", "1"]),
        ({"generator": 0.5}, TypeError, ["generator", "int seed", "float"]),
        ({"metric": "w3"}, ValueError, ["metric", "'w3'", "w2_squared"]),
        ({"metric": lambda x, y: x}, TypeError, ["metric", "exact law", "callable"]),
        ({"reference": "uniform"}, TypeError, ["reference", "str"]),
        ({"reference_size": 10}, ValueError, ["reference_size", "sampler", "law"]),
        ({"floor_reps": 3}, ValueError, ["floor_reps", "sampler", "law"]),
        ({"floor_reps": 0, "reference": cube_sampler(1)}, ValueError, ["floor_reps", "≥ 1", "0"]),
        ({"level": 1.5}, ValueError, ["level", "1.5"]),
        (
            {"sample": lambda M, reps: torch.rand(reps, M, dtype=DT)},
            ValueError,
            ["sample(M, reps)", "(3, 4, d)", "(3, 4)"],
        ),
        (
            {"sample": lambda M, reps: torch.full((reps, M, 1), float("nan"))},
            ValueError,
            ["sample(M, reps)", "NaN"],
        ),
        ({"reference": torch.zeros(1, 1, dtype=DT)}, ValueError, ["reference", "N ≥ 2", "(1, 1)"]),
    ],
)
def test_convergence_in_m_bad_input(kwargs, error, words):
    law = Uniform()
    args = {
        "sample": lambda M, reps: law.sample((reps, M), gen(0)),
        "Ms": [4, 8],
        "reps": 3,
        "reference": law,
        "generator": gen(0),
        "progress": False,
        **kwargs,
    }
    with pytest.raises(error) as info:
        convergence_in_m(args.pop("sample"), args.pop("Ms"), **args)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_reference_sampler_with_wrong_shape_is_named():
    with pytest.raises(ValueError, match=r"reference\(n, generator\) must return shape"):
        convergence_in_m(
            uniform_cube(1, gen(0)),
            [4, 8],
            reps=2,
            reference=lambda n, g: torch.zeros(n + 1, 1, dtype=DT),
            generator=gen(0),
            progress=False,
        )


# ---------------------------------------------------------------------------------------------------------
# sweep


def noisy_run(beta: float, M: int, seed: int) -> dict:
    """A toy run: the sample variance of M draws of N(0, β), and a tensor and a NumPy output."""
    if beta < 0:
        raise ValueError(f"beta must be ≥ 0, got {beta}")
    x = math.sqrt(beta) * torch.randn(M, generator=gen(seed), dtype=DT)
    return {"var": x.var(), "n": np.int64(M), "label": f"M={M}"}


def test_sweep_runs_the_grid_times_seeds_in_order():
    calls = []

    def run(beta, M, seed):
        calls.append((beta, M, seed))
        return noisy_run(beta, M, seed)

    result = sweep(run, {"beta": [0.5, 1.0], "M": [10, 100]}, seeds=[3, 4], progress=False)
    assert calls == [(b, m, s) for b in (0.5, 1.0) for m in (10, 100) for s in (3, 4)]
    assert result.params == ("beta", "M") and result.outputs == ("var", "n", "label")
    assert result.columns == ("beta", "M", "seed", "var", "n", "label", "error")
    assert len(result.rows) == 8 and result.failures == []
    first = result.rows[0]
    assert first["var"] == float(noisy_run(0.5, 10, 3)["var"]) and isinstance(first["var"], float)
    assert first["n"] == 10 and isinstance(first["n"], int) and first["label"] == "M=10"
    assert result.column("seed") == [3, 4] * 4


def test_sweep_records_a_failed_point_and_goes_on():
    grid = [{"beta": -1.0, "M": 10}, {"beta": 1.0, "M": 10}]
    with pytest.warns(RuntimeWarning, match="3 of 6 runs failed.*beta must be ≥ 0"):
        result = sweep(noisy_run, grid, seeds=3, progress=False)
    assert [r["error"] for r in result.failures] == ["ValueError: beta must be ≥ 0, got -1.0"] * 3
    assert len(result.rows) == 6
    assert all("var" not in r for r in result.failures)
    assert all(r["error"] is None and "var" in r for r in result.rows if r["beta"] == 1.0)
    with pytest.raises(RuntimeError, match="every run of the sweep failed; the first: ValueError"):
        sweep(noisy_run, {"beta": [-1.0], "M": [5]}, seeds=2, progress=False)


def test_sweep_rejects_non_scalar_and_clashing_outputs_per_point():
    """A 2-D output is neither a scalar nor a series (a 1-D output is a series: tests/studies/test_in_memory.py)."""

    def run(kind, seed):
        return {"vector": torch.ones(3, 2)} if kind == "vector" else {"seed": 1} if kind == "clash" else 2.5

    with pytest.warns(RuntimeWarning):
        result = sweep(run, {"kind": ["vector", "clash", "scalar"]}, seeds=1, progress=False)
    errors = {r["kind"]: r["error"] for r in result.rows}
    assert (
        errors["vector"].startswith("TypeError: output 'vector' must be a scalar")
        and "Tensor" in errors["vector"]
    )
    assert errors["clash"].startswith("ValueError") and "'seed'" in errors["clash"]
    assert errors["scalar"] is None and result.rows[2]["value"] == 2.5  # a bare scalar is stored as "value"


def test_sweep_csv_and_json_round_trip(tmp_path):
    def run(x, seed):
        if x == 2:
            raise KeyError("boom")
        return {"y": x * 10.0 + seed, "nan": math.nan}

    with pytest.warns(RuntimeWarning):
        result = sweep(run, {"x": [1, 2]}, seeds=2, progress=False)
    text = result.to_csv(tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_text() == text
    lines = text.splitlines()
    assert (
        lines[0] == "x,seed,y,nan,error"
        and lines[1] == "1,0,10.0,nan,"
        and lines[3] == "2,0,,,KeyError: 'boom'"
    )
    result.to_json(tmp_path / "t.json")
    data = json.loads((tmp_path / "t.json").read_text())  # strict JSON: NaN written as null
    assert data["rows"][0]["nan"] is None
    back = SweepResult.from_json(tmp_path / "t.json")
    assert back.params == result.params and back.outputs == result.outputs
    assert back.rows[0]["y"] == 10.0 and back.rows[2]["error"] == "KeyError: 'boom'"
    assert SweepResult.from_json(result.to_json()).rows[1] == back.rows[1]


def test_sweep_summary_is_the_student_t_interval_over_seeds():
    result = sweep(noisy_run, {"beta": [0.5, 2.0], "M": [20, 40]}, seeds=5, progress=False)
    table = result.summary("M", "var", hue="beta")
    assert [(r["hue"], r["x"]) for r in table] == [(0.5, 20), (0.5, 40), (2.0, 20), (2.0, 40)]
    ys = np.array([float(noisy_run(2.0, 40, s)["var"]) for s in range(5)])
    last = table[-1]
    half = scipy.stats.t.ppf(0.975, 4) * ys.std(ddof=1) / math.sqrt(5)
    assert (
        last["n"] == 5
        and math.isclose(last["mean"], ys.mean())
        and math.isclose(last["hi"] - last["mean"], half)
    )
    only = result.summary("M", "var", where={"beta": 2.0})
    assert [r["x"] for r in only] == [20, 40] and "hue" not in only[0]
    with pytest.raises(ValueError, match="parameter 'beta' takes several values"):
        result.summary("M", "var")
    with pytest.raises(KeyError, match="no column 'loss'"):
        result.summary("M", "loss", hue="beta")


def test_sweep_plot_and_progress_bar(tmp_path, capsys):
    result = sweep(noisy_run, {"beta": [0.5, 1.0], "M": [10, 20]}, seeds=3, progress=True)
    assert "sweep" in capsys.readouterr().err
    fig = result.plot("M", "var", hue="beta", logx=True, path=tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").stat().st_size > 1000 and len(fig.axes[0].lines) == 2


@pytest.mark.parametrize(
    ("grid", "seeds", "error", "words"),
    [
        ("beta", 2, TypeError, ["grid", "mapping", "str"]),
        ({"beta": 0.5}, 2, TypeError, ["grid['beta']", "sequence", "float"]),
        ({"beta": []}, 2, ValueError, ["grid", "at least one point"]),
        ({"seed": [1]}, 2, ValueError, ["grid", "'seed'"]),
        ({"beta": [1.0]}, 0, ValueError, ["seeds", "≥ 1", "0"]),
        ({"beta": [1.0]}, 2.0, TypeError, ["seeds", "float"]),
        ({"beta": [1.0]}, [1, "2"], ValueError, ["seeds", "ints"]),
    ],
)
def test_sweep_bad_input(grid, seeds, error, words):
    with pytest.raises(error) as info:
        sweep(lambda beta=0.0, seed=0: 1.0, grid, seeds=seeds, progress=False)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_a_metric_whose_resampled_means_reach_zero_gives_a_nan_interval_not_a_clamped_one():
    """A custom metric that can be ≤ 0 (e.g. a loss excess): positive means, but some bootstrap resamples
    have a mean ≤ 0. The slope is still fitted; its interval is NaN with a warning (it used to be computed
    from means clamped to the smallest float: an interval like (−0.8, +150))."""
    import math as _math
    import warnings as _warnings

    signs = torch.tensor([1.0, -0.5, 1.0, -0.5])  # replicate values around a small positive mean

    def metric(x, y):
        B = x.shape[0]
        return signs[:B].to(x.dtype) / x.shape[1]  # (B,) mean 0.125/M > 0, half the replicates < 0

    def sample(M, reps):
        return torch.zeros(reps, M, 1, dtype=torch.float64)

    with _warnings.catch_warnings(record=True) as caught:
        _warnings.simplefilter("always")
        result = convergence_in_m(
            sample,
            [4, 8, 16],
            reps=4,
            reference=torch.zeros(64, 1, dtype=torch.float64),
            generator=torch.Generator().manual_seed(0),
            metric=metric,
            n_boot=200,
            progress=False,
        )
    assert result.slope == pytest.approx(-1.0, abs=1e-9)
    assert all(_math.isnan(b) for b in result.slope_ci)
    assert any("bootstrap resample" in str(w.message) for w in caught)


# --------------------------------------------------------------------------------------------------------
# Time windows, one seeding convention, the cause of a sweep that failed everywhere


def _decay(a, seed, M=3):
    """Batched, noiseless: x ← (1 − a·dt)·x from x0 = 1, saved at t = 0, 0.1, …, 1 (exact: (1 − a dt)^n)."""
    system = MeanFieldLangevin(Quadratic(a), beta=0.0)
    x0 = torch.ones(len(seed), M, 1, dtype=DT)
    return simulate(system, x0, t1=1.0, dt=0.01, save_every=10, generator=batch_seed(seed))


def test_a_window_averages_each_series_over_its_saved_times_per_replica():
    a = torch.tensor([0.5, 2.0], dtype=DT)
    exact = torch.stack([(1 - a * 0.01) ** (10 * k) for k in range(11)], 1)  # (2, 11): x̄ at t = 0.1·k
    want = exact[:, 5:9].mean(1)  # t = 0.5, 0.6, 0.7, 0.8 (0.85 lies between saved times)
    mean = {"mean": lambda x: x.mean((1, 2))}
    result = sweep(_decay, {"a": a.tolist()}, seeds=1, batch=True, observables=mean, window=(0.45, 0.85),
                   progress=False)  # fmt: skip
    assert result.column("mean") == pytest.approx(want.tolist(), rel=1e-12)
    plain = sweep(_decay, {"a": a.tolist()}, seeds=1, batch=True, observables=mean, progress=False)
    assert plain.column("mean") == pytest.approx(exact[:, -1].tolist(), rel=1e-12)  # default: the last value
    assert plain.column("mean") != pytest.approx(want.tolist(), rel=1e-3)  # negative control: they differ
    assert len(result.curves) == len(plain.curves) == 22  # the series are kept as they were

    def one(a, seed):  # one call per run, a returned 1-D series and its times
        return {"x": exact[int(a == 2.0)].tolist(), "t": [0.1 * k for k in range(11)]}

    unbatched = sweep(one, {"a": [0.5, 2.0]}, seeds=[0], window=(0.45, 0.85), progress=False)
    assert unbatched.column("x") == pytest.approx(want.tolist(), rel=1e-12)

    def sample(M, reps):  # a quantity that is a series: its window mean per replicate
        return _decay(torch.full((reps,), 0.5, dtype=DT), list(range(reps)), M)

    with warnings.catch_warnings():  # the rate of a constant is not the point here
        warnings.simplefilter("ignore", RuntimeWarning)
        study = convergence_in_m(sample, [2, 4, 8], reps=3, quantity="mean", observables=mean,
                                 window=(0.45, 0.85), estimator="differences", generator=0, progress=False)  # fmt: skip
    assert torch.allclose(study.values, torch.full((3, 3), float(want[0]), dtype=DT), rtol=1e-12)
    with pytest.raises(RuntimeError, match="holds none of the saved times") as error:
        sweep(
            _decay, {"a": [0.5]}, seeds=1, batch=True, observables=mean, window=(0.42, 0.48), progress=False
        )
    assert isinstance(error.value.__cause__, ValueError)
    for bad, kind in (((1.0, 0.5), ValueError), ((0.0, math.nan), ValueError), (0.5, TypeError)):
        with pytest.raises(kind, match="window"):
            sweep(one, {"a": [0.5]}, seeds=1, window=bad, progress=False)


def _draw(M, seed):
    """The convention: replica b's x0 from its own seed, the call's noise from batch_seed of the list."""
    x0 = torch.stack([torch.randn(M, 1, generator=gen(s), dtype=DT) for s in seed])  # (B, M, 1)
    system = MeanFieldLangevin(Quadratic(1.0), QuadraticInteraction(0.5), beta=0.5)
    return simulate(system, x0, t1=0.2, dt=0.02, generator=batch_seed(seed)).final  # (B, M, 1)


@pytest.mark.filterwarnings(
    "ignore:.*(bootstrap fits|power-law fit).*:RuntimeWarning"
)  # 3 replicates: no rate
def test_equal_seeds_give_equal_draws_in_a_sweep_and_in_convergence_in_m():
    m2 = {"m2": lambda x: x.square().mean((1, 2))}
    swept = sweep(lambda M, beta, seed: _draw(M, seed), {"M": [4, 8, 16], "beta": [0.5]}, seeds=3, batch=["beta"],
                  observables=m2, progress=False)  # fmt: skip
    calls = []

    def sample(M, reps, seed):
        calls.append((M, reps, seed))
        return _draw(M, seed)

    study = convergence_in_m(sample, [4, 8, 16], reps=3, quantity="m2", observables=m2, estimator="differences",
                             generator=0, progress=False)  # fmt: skip
    assert calls == [
        (M, 3, [0, 1, 2]) for M in (4, 8, 16)
    ]  # default seeds: 0 … reps − 1, the same at every M
    by_seed = torch.tensor(swept.column("m2"), dtype=DT).view(3, 3)  # grid × seed order: (M, seed)
    assert torch.equal(study.values, by_seed)  # bit for bit
    other = convergence_in_m(sample, [4, 8, 16], reps=3, quantity="m2", observables=m2, estimator="differences",
                             generator=0, progress=False, seeds=[5, 6, 7])  # fmt: skip
    assert not torch.isclose(other.values, by_seed).any()  # negative control: other seeds, other draws
    assert calls[-1] == (16, 3, [5, 6, 7])
    with pytest.raises(ValueError, match="one seed per replicate"):
        convergence_in_m(sample, [4, 8], reps=3, quantity="m2", observables=m2, generator=0, seeds=2,
                         progress=False)  # fmt: skip
    with pytest.raises(TypeError, match="give sample a seed parameter"):
        convergence_in_m(lambda M, reps: _draw(M, [0] * reps), [4, 8], reps=3, quantity="m2", observables=m2,
                         generator=0, seeds=3, progress=False)  # fmt: skip


def test_a_sweep_that_fails_everywhere_raises_from_the_first_error():
    import traceback

    def batched_run(beta, M, seed):  # one call per M (β on the replica axis)
        raise ValueError(f"no run at M = {M}")

    for run, kwargs, first in ((noisy_run, {}, "got -1.0"), (batched_run, {"batch": ["beta"]}, "M = 5")):
        with pytest.raises(RuntimeError, match="every run of the sweep failed") as error:
            sweep(run, {"beta": [-1.0, -2.0], "M": [5, 6]}, seeds=2, progress=False, **kwargs)
        cause = error.value.__cause__
        assert isinstance(cause, ValueError) and first in str(cause)  # the first, not a later one
        frames = [f.name for f in traceback.extract_tb(cause.__traceback__)]
        assert frames[-1] == run.__name__  # the traceback reaches the user's function
    with pytest.warns(RuntimeWarning, match="1 of 2 runs failed"):  # not every run: no exception
        sweep(noisy_run, {"beta": [-1.0, 1.0], "M": [5]}, seeds=1, progress=False)


SETTINGS = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


FEW = settings(SETTINGS, max_examples=25)


class _Opaque:
    def __repr__(self) -> str:
        return "<object>"


NONSENSE = st.sampled_from([None, "1", "abc", "", [1.0], (1,), {}, _Opaque(), b"x", 1j, np.array([1.0, 2.0])])


NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.booleans(),
    st.sampled_from([torch.tensor(0.5), torch.ones(2), torch.tensor(float("nan")), np.float64(0.25)]),
)


BAD = st.one_of(NUMBERS, NONSENSE)


SIZES = st.one_of(
    st.integers(-3, 64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.sampled_from([torch.tensor(3), np.int64(3)]),
    NONSENSE,
)


DTYPES = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int64,
    torch.bool,
    torch.complex64,
]


def _sample(M, reps):
    return torch.rand(reps, M, 1, generator=torch.Generator().manual_seed(M), dtype=torch.float64)


STUDY_VALID = {
    "sample": _sample,
    "Ms": [4, 8],
    "reps": 3,
    "reference": Uniform(),
    "generator": torch.Generator().manual_seed(0),
    "metric": "w2_squared",
    "method": "auto",
    "n_boot": 20,
    "level": 0.9,
    "progress": False,
}


STUDY_POOLS = {
    "sample": st.one_of(
        NONSENSE,
        st.sampled_from(
            [
                lambda M, reps: torch.full((reps, M, 1), math.nan),
                lambda M, reps: torch.zeros(reps, M),
                lambda M, reps: [[0.0]],
                lambda M, reps: torch.zeros(reps, M, 1, dtype=torch.long),
            ]
        ),
    ),
    "Ms": st.one_of(BAD, st.lists(st.one_of(st.integers(-2, 10), st.floats(0, 10)), max_size=4)),
    "reps": SIZES,
    "reference": st.one_of(BAD, tensors(ranks=(1, 2, 3), size=4), st.just(lambda n, g: torch.zeros(n, 2))),
    "generator": BAD,
    "metric": st.one_of(BAD, st.sampled_from(["w1", "w2", "w3", lambda x, y: torch.zeros(7)])),
    "method": st.one_of(BAD, st.sampled_from(["exact", "sliced", "nope"])),
    "n_boot": SIZES,
    "level": BAD,
    "reference_size": SIZES,
    "floor_reps": SIZES,
}


@FEW
@given(one_bad(STUDY_VALID, STUDY_POOLS))
def test_convergence_in_m(case):
    from meanfield.studies.in_memory import convergence_in_m

    name, kw = case
    names = (name, "sample(M, reps)", "reference", "metric", "Ms")
    result = call(convergence_in_m, names, **kw)
    if result is not None:
        assert bool(torch.isfinite(result.values).all()) and result.values.shape[1] == kw.get("reps", 3)


@FEW
@given(
    grid=st.one_of(
        BAD,
        st.just({}),
        st.just([]),
        st.just({"a": [1, 2]}),
        st.just({"a": "12"}),
        st.just({"seed": [1]}),
        st.just([{"a": 1}, {"b": 2}]),
    ),
    seeds=st.one_of(SIZES, st.lists(st.integers(-3, 3), max_size=3)),
)
def test_sweep(grid, seeds):
    from meanfield.studies.in_memory import sweep

    result = call(
        sweep, ("grid", "seeds"), lambda seed, **p: {"v": float(seed)}, grid, seeds=seeds, progress=False
    )
    if result is not None:
        assert result.column("v") == [float(r["seed"]) for r in result.rows]


def test_table_written_to_a_missing_folder_leaves_no_file(tmp_path):
    from meanfield.studies.in_memory import sweep

    table = sweep(lambda seed, a: a * seed, {"a": [1, 2]}, seeds=2, progress=False)
    target = tmp_path / "missing" / "t.csv"
    with pytest.raises(OSError):
        table.to_csv(target)
    assert not target.exists() and not target.parent.exists()


EMPTY = torch.zeros(0, dtype=torch.float64)


def _sample_2(M: int, reps: int) -> torch.Tensor:
    """States far from the reference (shifted by 1000): distances ≫ any floor, so no floor warning."""
    return 1000.0 + torch.randn(reps, M, 1, generator=torch.Generator().manual_seed(M), dtype=torch.float64)


def _w2_squared_1d(a: torch.Tensor, b: torch.Tensor) -> float:
    """W2² of two equal-size 1-d empirical laws: the mean squared difference of the sorted points."""
    return float(((a.flatten().sort().values - b.flatten().sort().values) ** 2).mean())


def _states(M: int, reps: int) -> torch.Tensor:
    return torch.rand(reps, M, 1, generator=torch.Generator().manual_seed(M), dtype=torch.float64)


def _mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean((1, 2))


_EST = "['exact', 'reference', 'fit', 'differences']"


_MET = "['w2_squared', 'w2', 'w1']"


_QUANTITY = {
    "quantity": "m",
    "observables": {"m": _mean},
    "sample": lambda M, reps: {"final": _states(M, reps)},
}


_STUDY_ERRORS = [
    ({"sample": "uniform"}, TypeError, "sample must be a callable (M, reps) -> (reps, M, d), got str"),
    ({"Ms": "48"}, TypeError, "Ms must be a sequence of numbers of particles, got str"),
    ({"Ms": 5}, TypeError, "Ms must be a sequence of numbers of particles, got int"),
    ({"Ms": [8]}, ValueError, "Ms must be at least 2 distinct increasing integers, got [8]"),
    ({"Ms": [16, 8]}, ValueError, "Ms must be at least 2 distinct increasing integers, got [16, 8]"),
    ({"Ms": [4, 4, 8]}, ValueError, "Ms must be at least 2 distinct increasing integers, got [4, 4, 8]"),
    ({"Ms": [8, 8.5]}, TypeError, "Ms[i] must be an int, got float"),
    ({"Ms": [0, 4]}, ValueError, "Ms[i] must be ≥ 1, got 0"),
    ({"reps": 1}, ValueError, "reps must be ≥ 2, got 1"),
    ({"reps": 2.0}, TypeError, "reps must be an int, got float"),
    ({"n_boot": 0}, ValueError, "n_boot must be ≥ 1, got 0"),
    ({"level": 1.5}, ValueError, "level must be in (0, 1), got 1.5"),
    ({"level": 0.0}, ValueError, "level must be in (0, 1), got 0.0"),
    ({"level": float("nan")}, ValueError, "level must be finite, got nan"),
    ({"level": "x"}, TypeError, "level must be a real number, got str"),
    (
        {"generator": None},
        TypeError,
        "generator must be a torch.Generator, an int seed (Python or numpy integer), got NoneType",
    ),
    (
        {"observables": [1]},
        TypeError,
        "observables must be a mapping name -> callable (states (B, M, d) -> (B,))",
    ),
    (
        {"observables": {"a": 1}},
        TypeError,
        "observables must be a mapping name -> callable (states (B, M, d) -> (B,))",
    ),
    ({"quantity": 3}, TypeError, "quantity must be the name of an observable (str), got int"),
    ({"estimator": "bogus"}, ValueError, f"estimator must be 'auto' or one or more of {_EST}, got 'bogus'"),
    ({"estimator": ()}, ValueError, f"estimator must be 'auto' or one or more of {_EST}, got ()"),
    (
        {"estimator": ["exact", 3]},
        ValueError,
        f"estimator must be 'auto' or one or more of {_EST}, got ['exact', 3]",
    ),
    ({"metric": "w3"}, ValueError, f"metric must be one of {_MET} or a callable, got 'w3'"),
    ({"metric": 3}, TypeError, f"metric must be a name in {_MET} or a callable, got int"),
    (
        {**_QUANTITY, "metric": "w2"},
        ValueError,
        "metric applies to a distance study; with quantity='m' leave it out",
    ),
    ({"reference_size": 0}, ValueError, "reference_size must be ≥ 1, got 0"),
    ({"floor_reps": 0}, ValueError, "floor_reps must be ≥ 1, got 0"),
    (
        {"reference": None},
        TypeError,
        "reference is required for a distance study (or name an observable with quantity=)",
    ),
    (
        {"metric": lambda x, y: x.sum((1, 2))},
        TypeError,
        "metric must be 'w2_squared', 'w2' or 'w1' with an exact law reference, got a callable",
    ),
    (
        {"reference": torch.zeros(1, 1, dtype=torch.float64)},
        ValueError,
        "a reference cloud must have shape (N, d) with N ≥ 2, got (1, 1)",
    ),
    (
        {"reference": torch.zeros(3, dtype=torch.float64)},
        ValueError,
        "a reference cloud must have shape (N, d) with N ≥ 2, got (3,)",
    ),
    (
        {"reference": torch.tensor([[0.0], [math.nan]], dtype=torch.float64)},
        ValueError,
        "reference has 1 non-finite entries (NaN or Inf), the first at index (1, 0)",
    ),
    (
        {"reference": "uniform"},
        TypeError,
        "reference must be a Law1d, a tensor (N, d) or a sampler (n, generator) -> (n, d), got str",
    ),
    (
        {"reference_size": 10},
        ValueError,
        "reference_size applies to a sampler reference only, got a law reference",
    ),
    (
        {"floor_reps": 2, "reference": torch.zeros(4, 1, dtype=torch.float64)},
        ValueError,
        "floor_reps applies to a sampler reference only, got a cloud reference",
    ),
    (
        {**_QUANTITY, "reference": None, "reference_size": 3},
        ValueError,
        "reference_size applies to a sampler reference only, got a quantity reference",
    ),
    (
        {"estimator": "reference"},
        ValueError,
        "estimator='reference' needs ≥ 2 reference values (independent reference runs) of the observable "
        "named by quantity=, got a distance study",
    ),
    (
        {**_QUANTITY, "reference": 1.0, "estimator": "reference"},
        ValueError,
        "estimator='reference' needs ≥ 2 reference values (independent reference runs) of the observable "
        "named by quantity=, got 0",
    ),
    (
        {**_QUANTITY, "reference": None, "estimator": "exact"},
        ValueError,
        "estimator='exact' needs a reference (the limit, or reference values)",
    ),
    (
        {"sample": lambda M, reps: _states(M, reps)[..., 0]},
        ValueError,
        "sample(M, reps) must return shape (reps, M, d) = (3, 4, d), got (3, 4)",
    ),
    (
        {"sample": lambda M, reps: _states(M, reps).expand(reps, M, M // 4)},
        ValueError,
        "sample(M, reps) must return shape (reps, M, d) = (3, 8, 1), got (3, 8, 2)",
    ),
    (
        {"sample": lambda M, reps: {"loss": torch.ones(reps, dtype=torch.float64)}},
        ValueError,
        "sample(M, reps) returned no states ('final'): a distance needs them",
    ),
    (
        {"reference": torch.zeros(4, 2, dtype=torch.float64)},
        ValueError,
        "reference has d=2, sample(M, reps) has d=1",
    ),
    (
        {"reference": lambda n, g: torch.zeros(n, 2, dtype=torch.float64)},
        ValueError,
        "reference(n, generator) has d=2, sample(M, reps) has d=1",
    ),
    (
        {"reference": lambda n, g: torch.zeros(n + 1, 1, dtype=torch.float64)},
        ValueError,
        "reference(n, generator) must return shape (n, d) = (36, d), got (37, 1)",
    ),
    (
        {
            "quantity": "q",
            "reference": None,
            "sample": lambda M, reps: {"final": _states(M, reps), "a": torch.ones(reps, dtype=torch.float64)},
        },
        ValueError,
        "quantity 'q' is not an observable of sample(M, reps); it returned ['a']",
    ),
    (
        {
            "quantity": "a",
            "reference": None,
            "sample": lambda M, reps: {("a" if M == 4 else "b"): torch.ones(reps, dtype=torch.float64)},
        },
        ValueError,
        "sample(M, reps) returned other observables at M = 8 than at M = 4",
    ),
    (
        {
            "quantity": "s",
            "reference": None,
            "sample": lambda M, reps: {"t": [0.0, M / 4], "s": torch.ones(reps, 2, dtype=torch.float64)},
        },
        ValueError,
        "the series at M = 8 are saved at other times than at M = 4",
    ),
]


@pytest.mark.parametrize(
    "reference,limit",
    [(2, 2.0), (0.5, 0.5), (np.float32(0.25), 0.25), (np.int64(-3), -3.0), (torch.tensor(1.5), 1.5)],
    ids=["int", "float", "np_float32", "np_int64", "tensor0d"],
)
def test_reference_values_of_an_exact_limit(reference, limit):
    """A number (Python, NumPy or a 0-d tensor) is the exact limit, as a float, with no reference values."""
    got, values = studies._reference_values(reference, "loss", None)
    assert type(got) is float and got == limit and values.dtype == torch.float64 and values.numel() == 0


@pytest.mark.parametrize(
    "reference,text",
    [(float("inf"), "inf"), (float("nan"), "nan"), (-math.inf, "-inf"), (torch.tensor(float("nan")), "nan")],
    ids=["inf", "nan", "-inf", "tensor_nan"],
)
def test_a_non_finite_exact_limit_is_refused_naming_the_reference(reference, text):
    """The exact message names the argument ``reference`` and the value."""
    with pytest.raises(ValueError) as caught:
        studies._reference_values(reference, "loss", None)
    assert str(caught.value) == f"reference must be finite, got {text}"


def test_reference_values_of_runs_and_their_errors():
    """``None``: no limit, no values. A sequence, an array or a 1-d tensor: the values as float64. A reference
    run's mapping: its scalar of that name, or a series' last column; states with an observable: the
    observable of each run (mean of the states, by hand). The errors: a bool or a string, an empty or a
    non-finite list, a run without the quantity, a mapping without it or states, each with its message."""
    limit, values = studies._reference_values(None, "loss", None)
    assert limit is None and torch.equal(values, EMPTY)
    for ref in ([1.0, 2.0, 4.0], (1, 2, 4), np.array([1.0, 2.0, 4.0]), torch.tensor([1.0, 2.0, 4.0])):
        limit, values = studies._reference_values(ref, "loss", None)
        assert limit is None and torch.equal(values, torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64))
    limit, values = studies._reference_values({"loss": [3.0, 5.0]}, "loss", None)
    assert limit is None and torch.equal(values, torch.tensor([3.0, 5.0], dtype=torch.float64))
    limit, values = studies._reference_values({"loss": [[1.0, 2.0], [3.0, 4.0]]}, "loss", None)
    assert torch.equal(values, torch.tensor([2.0, 4.0], dtype=torch.float64))
    states = torch.tensor([[[1.0], [3.0]], [[2.0], [6.0]], [[0.0], [0.0]]], dtype=torch.float64)  # (3, 2, 1)
    mean = {"m": lambda x: x.mean((1, 2))}
    for ref in (states, {"final": states}):
        limit, values = studies._reference_values(ref, "m", mean)
        assert limit is None and torch.equal(values, torch.tensor([2.0, 4.0, 0.0], dtype=torch.float64))
    for bad, kind in ((True, "bool"), ("1.0", "str")):
        with pytest.raises(TypeError) as caught:
            studies._reference_values(bad, "loss", None)
        assert str(caught.value) == f"reference must be a number, values (R,) or a reference run, got {kind}"
    with pytest.raises(ValueError, match=r"^reference values must not be empty$"):
        studies._reference_values([], "loss", None)
    with pytest.raises(
        ValueError, match=r"^reference has 1 non-finite entries \(NaN or Inf\), the first at index \(1,\)$"
    ):
        studies._reference_values([1.0, float("nan"), 2.0], "loss", None)
    with pytest.raises(
        ValueError, match=r"^the reference run has no observable 'loss'; it has \['m', 'x'\]$"
    ):
        studies._reference_values({"final": states, "x": [1.0, 2.0, 3.0]}, "loss", mean)
    with pytest.raises(
        TypeError, match=r"^with quantity='loss', reference must be the exact limit .*got dict$"
    ):
        studies._reference_values({"other": [1.0, 2.0]}, "loss", None)


@pytest.mark.parametrize("n", [3, 5, 8], ids=["N3", "N5", "N8"])
def test_the_floor_of_a_fixed_cloud_is_w2_between_two_equal_random_halves(n):
    """A fixed cloud of N points (odd N included): the floor is W2² between ``reference[perm[:N//2]]`` and
    ``reference[perm[N//2 : 2·(N//2)]]`` (an odd cloud's last permuted point left out), ``perm`` the first
    draw of the study's generator (replayed here from a clone), computed here from sorted points, and the same
    for every M; shape (len(Ms), 1). For N = 3 with points {0, 1, 3} the floor is a squared gap (1, 4 or 9);
    halves of 1 and 2 points would give 2.5, 5 or 6.5. Tolerance: float64 round-off (1e-12)."""
    reference = torch.tensor([0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 63.0, 127.0][:n], dtype=torch.float64)[:, None]
    g = torch.Generator().manual_seed(11)
    replay = torch.Generator()
    replay.set_state(g.get_state())
    perm = torch.randperm(n, generator=replay)
    half = n // 2
    expected = _w2_squared_1d(reference[perm[:half]], reference[perm[half : 2 * half]])
    result = studies.convergence_in_m(
        _sample_2, [2, 4, 8], reps=3, reference=reference, generator=g, progress=False
    )
    assert result.floor.shape == (3, 1)
    assert torch.allclose(result.floor, torch.full((3, 1), expected, dtype=torch.float64), rtol=0, atol=1e-12)
    if n == 3:
        assert expected in (1.0, 4.0, 9.0)


def test_the_floor_halves_given_to_a_custom_metric_are_disjoint_and_equal_in_size():
    """With a callable metric the floor call receives ``(1, N//2, d)`` halves: for N = 5, rows
    ``perm[0:2]`` and ``perm[2:4]`` of the cloud (perm replayed from a clone of the generator); the
    distances to the cloud get the (N, d) cloud itself. The distances (102, 104) are below 3× that floor
    (102) at both M, which the warning lists. Negative control: the replayed permutation's last
    row is in neither half."""
    reference = torch.arange(10.0, dtype=torch.float64).reshape(5, 2)
    g = torch.Generator().manual_seed(3)
    replay = torch.Generator()
    replay.set_state(g.get_state())
    perm = torch.randperm(5, generator=replay)
    calls = []

    def metric(x, y):
        calls.append((x.clone(), y.clone()))
        return torch.full((x.shape[0],), 100.0 + x.shape[1], dtype=torch.float64)

    def sample(M, reps):
        return torch.ones(reps, M, 2, dtype=torch.float64)

    with pytest.warns(RuntimeWarning) as caught:
        result = studies.convergence_in_m(
            sample, [2, 4], reps=2, reference=reference, generator=g, metric=metric, progress=False
        )
    assert [str(w.message) for w in caught if "floor" in str(w.message)] == [
        "the mean distance is below 3× the reference floor at M = [2, 4]: the slope there measures the "
        "reference as much as μ_M (use a larger reference)"
    ]
    *distance_calls, (a, b) = calls
    assert [tuple(x.shape) for x, _ in distance_calls] == [(2, 2, 2), (2, 4, 2)]
    assert all(torch.equal(y, reference) for _, y in distance_calls)
    assert torch.equal(a, reference[perm[:2]].unsqueeze(0)) and torch.equal(
        b, reference[perm[2:4]].unsqueeze(0)
    )
    assert not any(torch.equal(row, reference[perm[4]]) for row in torch.cat([a[0], b[0]]))
    assert result.method == "custom" and torch.equal(
        result.floor, torch.full((2, 1), 102.0, dtype=torch.float64)
    )


@pytest.mark.parametrize(
    "kwargs,error,message", _STUDY_ERRORS, ids=[f"case{i:02d}" for i in range(len(_STUDY_ERRORS))]
)
def test_convergence_in_m_refuses_each_bad_argument_with_its_exact_message(kwargs, error, message):
    """Every refusal of ``convergence_in_m`` against its message written out here (type and whole text): the
    sampler, the sizes, reps, n_boot, level, generator, observables, quantity, estimator, metric, the
    reference of each kind and the options that only a sampler takes, the shapes a sampler returns (3
    replicates at M = 4, 8; a sampled reference of 4 points drawn 3 + 2·3 = 9 times is 36 rows), and the
    observables and times that must agree across M. Base study: uniform states against ``Uniform()``."""
    args = {
        "sample": _states,
        "Ms": [4, 8],
        "reps": 3,
        "reference": Uniform(),
        "generator": 0,
        "progress": False,
        **kwargs,
    }
    with pytest.raises(error) as caught:
        studies.convergence_in_m(args.pop("sample"), args.pop("Ms"), **args)
    assert str(caught.value) == message


def test_a_single_reference_value_warns_that_it_is_treated_as_exact():
    """One reference value (``[-1.0]``): the exact warning; the study runs with the ``exact`` estimator and
    that value as its limit. Negative control: two values warn nothing of the kind."""

    def study(reference: list[float]) -> studies.StudyResult:
        return studies.convergence_in_m(
            lambda M, reps: {"final": _states(M, reps)},
            [4, 8],
            reps=3,
            generator=0,
            progress=False,
            quantity="m",
            observables={"m": _mean},
            reference=reference,
        )

    with pytest.warns(RuntimeWarning) as caught:
        result = study([-1.0])
    assert (
        "one reference value: its fluctuation is in no interval (the reference is treated as exact); give ≥ 2 "
        "independent reference runs (estimator 'reference') or use estimator='fit'"
    ) in [str(w.message) for w in caught]
    assert result.estimator == "exact" and result.limit == -1.0
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        study([-1.0, -1.2])
    assert not [w for w in seen if "one reference value" in str(w.message)]


def test_convergence_in_m_on_midpoint_clouds_is_exact():
    """Oracle: the midpoints ``(i + ½)/M`` of M equal cells are at ``W2² = 1/(12 M²)`` and ``W1 = 1/(4M)``
    from ``U(0, 1)`` (each cell contributes ``∫|x_i − u|^p du``), so the slope is exactly −2 (−1 for W1)."""
    from meanfield.metrics import Uniform
    from meanfield.studies.in_memory import convergence_in_m

    def sample(M, reps):
        mid = (torch.arange(M, dtype=torch.float64) + 0.5) / M
        return mid.repeat(reps, 1).unsqueeze(-1)  # (reps, M, 1)

    Ms = [4, 8, 16, 32]
    gen = torch.Generator().manual_seed(0)
    w2 = convergence_in_m(sample, Ms, reps=3, reference=Uniform(), generator=gen, n_boot=50, progress=False)
    expected = torch.tensor([1 / (12 * M**2) for M in Ms], dtype=torch.float64)
    assert torch.allclose(w2.mean, expected, rtol=1e-10)
    assert abs(w2.slope - (-2.0)) < 1e-8
    w1 = convergence_in_m(
        sample, Ms, reps=3, reference=Uniform(), generator=gen, metric="w1", n_boot=50, progress=False
    )
    assert torch.allclose(w1.mean, torch.tensor([1 / (4 * M) for M in Ms], dtype=torch.float64), rtol=1e-10)
    assert abs(w1.slope - (-1.0)) < 1e-8
    shifted = convergence_in_m(
        lambda M, reps: sample(M, reps) + 0.01,
        Ms,
        reps=3,
        reference=Uniform(),
        generator=gen,
        n_boot=50,
        progress=False,
    )  # negative control: a shift of 0.01 adds ≈1e-4 to W2²
    assert not torch.allclose(shifted.mean, expected, rtol=1e-3)


MS = [16, 32, 64, 128, 256]


def exact_power_sample(limit: float, c: float, alpha: float, eps: float = 1e-9):
    """``Y = limit + c·M^{−α} ± eps`` (replicates alternate the sign: the mean is exact, the SE is not 0)."""

    def sample(M: int, reps: int) -> dict[str, torch.Tensor]:
        pm = torch.tensor([(-1.0) ** b for b in range(reps)], dtype=DT)  # (reps,)
        return {"Y": limit + c * M**-alpha + eps * pm}

    return sample


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


def decay_run(rate: float, seed: int) -> dict:
    """A series ``y(t) = exp(−rate·t) + noise`` at four times, and a scalar."""
    t = torch.tensor([0.0, 0.5, 1.0, 2.0], dtype=DT)
    noise = 0.01 * torch.randn(4, generator=gen(seed), dtype=DT)
    return {"t": t, "y": (-rate * t).exp() + noise, "y_end": float((-rate * 2.0) * 1.0)}


def test_a_mapping_sampler_gives_scalars_and_series_and_csv(tmp_path):
    def sample(M, reps):
        g = gen(M)
        x = torch.randn(reps, M, 1, generator=g, dtype=DT)
        loss = (1 / M) * torch.ones(reps, 4, dtype=DT) * torch.arange(1, 5, dtype=DT)  # (reps, T)
        return {"final": x, "t": [0.0, 1.0, 2.0, 3.0], "loss": loss, "m2": x.square().mean((1, 2))}

    study = convergence_in_m(sample, [4, 8, 16], reps=5, reference=mf.metrics.Normal(0.0, 1.0), generator=0,
                             observables={"m1": lambda x: x.mean((1, 2))}, progress=False)  # fmt: skip
    assert set(study.observed) == {"w2_squared", "m2", "m1"} and set(study.series) == {"loss"}
    assert study.table.columns == ("M", "replicate", "w2_squared", "m2", "m1")
    text = study.to_csv(tmp_path / "per_replicate.csv")
    assert text.splitlines()[0] == "M,replicate,w2_squared,m2,m1" and len(text.splitlines()) == 1 + 15
    curves = study.to_csv(curves=True)
    assert curves.splitlines()[0] == "M,replicate,t,loss" and len(curves.splitlines()) == 1 + 3 * 5 * 4
    assert curves.splitlines()[1] == "4,0,0.0,0.25"
    summary = study.curves.summary("t", "loss", hue="M")
    assert [(r["hue"], r["x"]) for r in summary][:2] == [(4, 0.0), (4, 1.0)]
    assert summary[1]["mean"] == pytest.approx(2 / 4) and summary[1]["n"] == 5


def test_sampler_returning_inconsistent_observables_is_refused():
    def sample(M, reps):
        out = {"final": torch.zeros(reps, M, 1, dtype=DT) + 1 / M, "y": torch.ones(reps, dtype=DT)}
        if M == 8:
            out["z"] = torch.ones(reps, dtype=DT)
        return out

    with pytest.raises(ValueError, match="other observables at M = 8"):
        convergence_in_m(sample, [4, 8], reps=2, reference=Uniform(), generator=0, progress=False)
    with pytest.raises(ValueError, match=r"must have shape \(B,\) = \(2,\)"):
        convergence_in_m(lambda M, r: {"y": torch.ones(3)}, [4, 8], reps=2, quantity="y", generator=0,
                         reference=[1.0, 1.0], progress=False)  # fmt: skip
    with pytest.raises(TypeError, match="state tensor .* Trajectory or a mapping"):
        convergence_in_m(lambda M, r: [1.0], [4, 8], reps=2, reference=Uniform(), generator=0, progress=False)


def test_study_plot_takes_a_label_so_two_studies_share_an_axis(tmp_path):
    law = Uniform()
    studies = [
        convergence_in_m(lambda M, reps, s=s: law.sample((reps, M), gen(M + s)), [4, 8, 16], reps=4,
                         reference=law, generator=0, progress=False)
        for s in (0, 100)
    ]  # fmt: skip
    fig, ax = figure()
    studies[0].plot(ax=ax, label="particles")
    studies[1].plot(ax=ax, label="i.i.d.", path=tmp_path / "two.png")
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("particles (±1.96 SE)") for t in texts) and any(
        t.startswith("i.i.d.:") for t in texts
    )
    assert any("(exact)" in t for t in texts)  # the estimator of the interval is named
    assert not any(t.startswith("w2_squared") for t in texts)
    assert (tmp_path / "two.png").stat().st_size > 1000


def test_sweep_collects_series_into_a_tidy_curves_table(tmp_path):
    result = sweep(decay_run, {"rate": [0.5, 1.0]}, seeds=3, progress=False)
    assert result.outputs == ("y_end",) and result.series == ("y",) and result.batched == ()
    curves = result.curves
    assert curves.keys == ("rate", "seed", "t") and len(curves) == 2 * 3 * 4
    assert curves.rows[5] == {"rate": 0.5, "seed": 1, "t": 0.5, "y": float(decay_run(0.5, 1)["y"][1])}
    table = curves.summary("t", "y", hue="rate")
    ys = [float(decay_run(1.0, s)["y"][3]) for s in range(3)]
    last = table[-1]
    half = scipy.stats.t.ppf(0.975, 2) * np.std(ys, ddof=1) / math.sqrt(3)
    assert (last["hue"], last["x"], last["n"]) == (1.0, 2.0, 3) and last["mean"] == pytest.approx(np.mean(ys))
    assert last["hi"] - last["mean"] == pytest.approx(half)
    assert result.to_csv(curves=True).splitlines()[0] == "rate,seed,t,y"
    back = SweepResult.from_json(result.to_json(tmp_path / "s.json"))
    assert back.series == ("y",) and back.curve_rows == result.curve_rows
    assert Table.from_json(curves.to_json()).rows == curves.rows
    fig = result.plot("t", "y", hue="rate", label="decay", path=tmp_path / "curves.png")
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "decay, rate=0.5 (mean)" in texts and "bands: 95% t-interval of the mean over 3 seeds" in texts


def test_series_without_times_use_the_index_and_mismatched_lengths_fail():
    def run(kind, seed):
        if kind == "index":
            return {"y": [1.0, 2.0, 3.0]}
        if kind == "ragged":
            return {"y": torch.ones(3), "z": torch.ones(4)}
        return {"t": [0.0, 1.0], "y": torch.ones(3)}

    with pytest.warns(RuntimeWarning, match="2 of 3 runs failed"):
        result = sweep(run, {"kind": ["index", "ragged", "t"]}, seeds=1, progress=False)
    assert [r["t"] for r in result.curve_rows] == [0, 1, 2]
    errors = {r["kind"]: r["error"] for r in result.rows}
    assert "share one time axis" in errors["ragged"] and "'t' has 2 times, the series have 3" in errors["t"]


def test_batched_sweep_runs_each_replica_at_its_own_parameter_closed_form():
    """The deterministic flow ``dx = −a x dt − k(x − x̄) dt`` (β = 0): the particle mean follows
    ``x̄_n = (1 − a dt)^n x̄_0`` exactly under EM whatever k. One batched call per value of k (k is left
    off the replica axis), a on it: every replica must match its own a (tolerance 1e-12); the negative
    control, the same check with the a's of the replicas reversed, fails."""
    calls = []
    dt, M = 0.05, 16

    def run(a, k, seed):
        calls.append((tuple(a.tolist()), k, list(seed)))
        x0 = torch.stack([torch.rand(M, 1, generator=gen(s), dtype=DT) for s in seed])  # (B, M, 1)
        system = mf.MeanFieldLangevin(Quadratic(a), QuadraticInteraction(k), beta=0.0)
        return mf.simulate(system, x0, t1=1.0, dt=dt, save_every=10, generator=batch_seed(seed))

    grid = {"a": [0.5, 1.0, 2.0], "k": [0.0, 3.0]}
    result = sweep(run, grid, seeds=[7, 8], batch=["a"], max_batch=4, progress=False,
                   observables={"mean": lambda x: x.mean((1, 2))})  # fmt: skip
    assert result.batched == ("a",) and result.series == ("mean",)
    assert [len(c[0]) for c in calls] == [4, 2, 4, 2]  # per k: 6 replicas in chunks of ≤ 4
    assert {c[1] for c in calls} == {0.0, 3.0} and calls[0][2] == [7, 8, 7, 8]
    assert [(r["a"], r["k"], r["seed"]) for r in result.rows] == [
        (a, k, s) for a in grid["a"] for k in grid["k"] for s in (7, 8)
    ]  # rows in grid × seed order, not in call order
    ok, reversed_ok = [], []
    for row in result.curve_rows:
        x0_mean = float(torch.rand(M, 1, generator=gen(row["seed"]), dtype=DT).mean())
        n = round(row["t"] / dt)
        ok.append(abs(row["mean"] - x0_mean * (1 - row["a"] * dt) ** n) < 1e-12)
        other = {0.5: 2.0, 1.0: 1.0, 2.0: 0.5}[row["a"]]
        reversed_ok.append(abs(row["mean"] - x0_mean * (1 - other * dt) ** n) < 1e-12)
    assert all(ok) and not all(reversed_ok)


def test_batched_sweep_per_replica_temperature_matches_the_stationary_variance():
    """β and a per replica in one call: the EM chain of ``dx = −a x dt + sqrt(2β) dW`` (k = 0) has the
    stationary variance ``β/(a(1 − a dt/2))``; after t = 6 (transient e^{−2at} ≤ 6e-6 of the start) the
    particles' variance of replica (a, β) is that within 5 SE, SE = s²·sqrt(2/(M − 1)) for M = 2000 Gaussian
    particles (≈ 3 % of the variance; a wrong β per replica — the β's of two points swapped — is 2× off)."""
    dt, M = 0.05, 2000

    def run(a, beta, seed):
        x0 = torch.zeros(len(seed), M, 1, dtype=DT)
        system = mf.MeanFieldLangevin(Quadratic(a), QuadraticInteraction(0.0), beta=beta)
        return mf.simulate(system, x0, t1=6.0, dt=dt, generator=batch_seed(seed))

    result = sweep(run, {"a": [1.0, 2.0], "beta": [0.25, 0.5]}, seeds=2, batch=True, progress=False,
                   observables={"var": lambda x: x.var((1, 2))})  # fmt: skip
    assert result.batched == ("a", "beta")
    for row in result.rows:
        s2 = row["beta"] / (row["a"] * (1 - row["a"] * dt / 2))
        assert abs(row["var"] - s2) <= Z * s2 * math.sqrt(2 / (M - 1)), row
        swapped = (0.75 - row["beta"]) / (row["a"] * (1 - row["a"] * dt / 2))
        assert abs(row["var"] - swapped) > Z * swapped * math.sqrt(2 / (M - 1))


def test_batched_sweep_chunks_to_a_memory_budget_and_records_a_failed_call():
    """Budget 1700 bytes, 400·M bytes per replica: M = 2 runs 2 replicas a call, M = 3 and 4 one; the group
    M = 3 raises, and its 4 runs carry the error while the others go on."""
    sizes = []

    def run(x, M, seed):
        sizes.append((M, len(x)))
        if M == 3:
            raise ValueError("M = 3 is refused")
        return {"y": x * M, "curve": x[:, None] * torch.ones(len(x), 2, dtype=DT)}

    with pytest.warns(RuntimeWarning, match="4 of 12 runs failed"):
        result = sweep(run, {"x": [1.0, 2.0], "M": [2, 3, 4]}, seeds=2, batch=["x"], progress=False,
                       memory_budget=1700, replica_bytes=lambda p: 400 * p["M"])  # fmt: skip
    assert sizes == [(2, 2), (2, 2)] + [(3, 1)] * 4 + [(4, 1)] * 4
    assert [r["error"] for r in result.rows if r["M"] == 3] == ["ValueError: M = 3 is refused"] * 4
    assert [r["y"] for r in result.rows if r["M"] == 4] == [4.0, 4.0, 8.0, 8.0]
    assert len(result.curve_rows) == 8 * 2 and result.series == ("curve",)
    sweep(run, {"x": [1.0, 2.0], "M": [2]}, seeds=2, batch=["x"], progress=False, max_batch=3)
    assert sizes[-2:] == [(2, 3), (2, 1)]


def test_batched_sweep_bad_input():
    def run(x, seed):
        return {"y": x}

    with pytest.raises(ValueError, match="not in the grid"):
        sweep(run, {"x": [1.0]}, seeds=1, batch=["z"], progress=False)
    with pytest.raises(TypeError, match="numbers only"):
        sweep(run, {"x": ["a"]}, seeds=1, batch=["x"], progress=False)
    with pytest.raises(ValueError, match="apply with batch= only"):
        sweep(run, {"x": [1.0]}, seeds=1, max_batch=2, progress=False)
    with pytest.raises(ValueError, match="go together"):
        sweep(run, {"x": [1.0]}, seeds=1, batch=True, memory_budget=10, progress=False)
    with pytest.raises(RuntimeError, match=r"must have shape \(B,\) = \(2,\)"):
        sweep(lambda x, seed: {"y": torch.ones(3)}, {"x": [1.0, 2.0]}, seeds=1, batch=True, progress=False)


def test_batch_seed_is_a_pure_function_of_the_chunk():
    assert batch_seed([1, 2, 3]) == batch_seed((1, 2, 3)) == batch_seed(np.array([1, 2, 3]))
    assert batch_seed([1, 2, 3]) != batch_seed([3, 2, 1]) and 0 <= batch_seed([0]) < 2**62


def test_getting_started_batched_sweep_example_runs(tmp_path, monkeypatch, capsys):
    """The getting-started page's batched sweep (4 values of a × 4 seeds, two calls of 8 replicas), run in this
    process from the page's text: it writes its CSV and figure, and prints x̄(2) per a within 2 half-widths of
    its printed 95 % interval of the exact EM mean 2(1 − a·dt)^100 (a t interval with 3 degrees of freedom:
    2 half-widths = 6.4 SE)."""
    text = (ROOT / "docs" / "getting-started.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "batch=True" in b]
    assert len(blocks) == 1, "the getting-started page shows one batched sweep"
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], "getting-started.md", "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    lines = re.findall(r"a=([\d.]+): mean x̄\(2\) = (-?[\d.]+) ± ([\d.]+) .* EM exact (-?[\d.]+)", out)
    assert len(lines) == 4, out
    for a, mean, half, exact in lines:
        assert abs(float(mean) - float(exact)) <= 2 * float(half), (a, mean, half, exact)
    assert (tmp_path / "relax.png").stat().st_size > 1000
    assert (tmp_path / "relax.csv").read_text().splitlines()[0] == "a,seed,t,mean,var"


matplotlib.use("Agg")


# mutmut's trampolines add frames: a warning's stack level moves under it
UNDER_MUTMUT = "MUTANT_UNDER_TEST" in os.environ


GRID = np.linspace(0.01, 4.0, 200)  # the documented α range [0.01, 4], 200 points


SPAN = "[0.01, 4]"


HERE = __file__


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


def messages(caught) -> list[str]:
    return [str(w.message) for w in caught]


EDGE = f"the power-law fit put α at the end of its range {SPAN}: these sizes do not identify the rate"


KS = torch.tensor([8.0, 16.0, 32.0, 64.0, 128.0], dtype=DT)


def noisy_values(limit=1.0, c=2.0, alpha=0.8, reps=6, seed=10, K=5):
    """Replicates ``limit + c·M^{−α}(1 + 0.2ξ)`` at the sizes ``KS[:K]``, shape (K, reps)."""
    Ms = KS[:K]
    return limit + c * Ms[:, None] ** -alpha * (1 + 0.2 * torch.randn(K, reps, generator=gen(seed), dtype=DT))


def t_ci(slope, slopes, level, reps):
    """``slope ± t_{reps−1, (1+level)/2}·sd(slopes)`` by scipy: every estimator's interval (in_memory._t_interval)."""
    half = scipy.stats.t.ppf((1 + level) / 2, reps - 1) * np.std(slopes, ddof=1)
    return slope - half, slope + half


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


def uniform_sample(M: int, reps: int) -> torch.Tensor:
    """``reps`` clouds of M uniform points, from a generator of their own (seeded by M)."""
    return torch.rand(reps, M, 1, generator=gen(100 + M), dtype=DT)


def recording_sampler(calls):
    def reference(n, generator):
        calls.append((n, generator))
        return torch.rand(n, 1, generator=generator, dtype=DT)

    return reference


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


class Unnamed:
    def __call__(self, x, y):
        return (x.mean((1, 2)) - y.mean()) ** 2


def named_metric(x, y):
    return (x.mean((1, 2)) - y.mean()) ** 2


QMS = [8, 16, 32, 64]


def loss_sample(M: int, reps: int) -> dict[str, torch.Tensor]:
    """``Y = 1 + 2·M^{−0.8}(1 + 0.2ξ)`` and a second scalar ``z = −Y``, from a generator seeded by M."""
    y = 1.0 + 2.0 * M**-0.8 * (1 + 0.2 * torch.randn(reps, generator=gen(200 + M), dtype=DT))
    return {"Y": y, "z": -y}


REF = [1.01, 0.99, 1.004, 0.997, 1.0]


def const_ratio_sample(M, reps):
    return {"Y": 1.0 + M**-1.0 * (1 + 0.1 * torch.randn(reps, generator=gen(M), dtype=DT))}


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


@pytest.mark.parametrize(("level", "df"), [(0.95, 4), (0.8, 19)], ids=["95_df4", "80_df19"])
def test_t_interval_is_estimate_plus_minus_t_quantile_times_bootstrap_sd(level, df):
    boot = torch.tensor([0.1, 0.4, -0.2, 0.3, 0.0], dtype=DT)
    lo, hi = studies._t_interval(-1.0, boot, level, df)
    elo, ehi = np_t_ci(-1.0, boot.numpy(), level, df)
    assert abs(lo - elo) < 1e-13 and abs(hi - ehi) < 1e-13


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


def test_estimate_exact_for_a_distance_is_the_loglog_fit_with_a_t_bootstrap_interval():
    """Distance (limit 0): slope and ``c = exp(intercept)`` from ``np.polyfit`` of the means; the interval is
    ``slope ± t_{reps−1, 0.975}·sd`` of the polyfit slopes of the bootstrap rows (scipy's t); no notes. Control:
    the percentile interval of the same slopes, which it replaced, is another pair."""
    values = noisy_values(limit=0.0)
    boot = boot_of(values)
    est, notes = call_estimate("exact", values, boot, distance=True)
    s, i = np_loglog(KS, values.mean(1))
    slopes = np.array([np_loglog(KS, row)[0] for row in boot.numpy()])
    half = scipy.stats.t.ppf(0.975, values.shape[1] - 1) * slopes.std(ddof=1)
    assert notes == [] and est.estimator == "exact" and est.limit == 0.0 and est.level == 0.95
    assert abs(est.slope - s) < 1e-12 and abs(est.coefficient - math.exp(i)) < 1e-12
    assert est.slope_ci == pytest.approx((s - half, s + half), abs=1e-12)
    assert est.slope_ci != pytest.approx(tuple(np.quantile(slopes, [0.025, 0.975])), abs=1e-6)


def test_estimate_exact_for_a_quantity_below_its_limit_has_a_negative_coefficient():
    """Means below the limit 3: the excess is ``3 − mean``; the coefficient is ``−exp(intercept)``; level 0.8
    gives ``slope ± t_{reps−1, 0.9}·sd`` of the bootstrap slopes of ``3 − boot``."""
    values = noisy_values(limit=3.0, c=-2.0)
    boot = boot_of(values)
    est, notes = call_estimate("exact", values, boot, limit=3.0, level=0.8)
    s, i = np_loglog(KS, 3.0 - values.mean(1).numpy())
    slopes = np.array([np_loglog(KS, 3.0 - row)[0] for row in boot.numpy()])
    half = scipy.stats.t.ppf(0.9, values.shape[1] - 1) * slopes.std(ddof=1)
    assert notes == [] and est.limit == 3.0 and est.level == 0.8
    assert abs(est.slope - s) < 1e-12 and abs(est.coefficient + math.exp(i)) < 1e-12
    assert est.slope_ci == pytest.approx((s - half, s + half), abs=1e-12)


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


def test_a_law_study_end_to_end_against_hand_distances_and_a_replayed_bootstrap():
    """Against U(0, 1): every value is the hand ``W2²``; slope and intercept are ``np.polyfit`` of the mean
    distances; the interval is ``slope ± t_4·sd`` of the polyfit slopes of the bootstrap
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
    lo, hi = t_ci(s, [np_loglog(Ms, row)[0] for row in boot], 0.95, 5)
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
    assert r.slope_ci == pytest.approx(t_ci(r.slope, slopes, 0.95, reps), abs=1e-12)
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
    assert ex.slope_ci == pytest.approx(t_ci(s, slopes, 0.9, reps), abs=1e-12)

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
    assert r.slope_ci == pytest.approx(t_ci(r.slope, slopes, 0.95, 4), abs=1e-12)


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


def _t_ci(values, level=0.95):
    """Reference Student-t interval (mean, lo, hi) from scipy."""
    a = np.asarray(values, dtype=float)
    se = a.std(ddof=1) / math.sqrt(a.size)
    q = scipy_stats.t.ppf((1 + level) / 2, a.size - 1)
    return a.mean(), a.mean() - q * se, a.mean() + q * se


def test_cell_clean_is_number():
    """``_cell`` converts NumPy/tensor scalars; ``_clean`` maps non-finite floats to None; ``_is_number``."""
    assert grid_module._cell(np.float32(1.5)) == 1.5 and type(grid_module._cell(np.int64(3))) is int
    assert grid_module._cell(torch.tensor(2.5)) == 2.5 and grid_module._cell(np.array(4.0)) == 4.0
    assert grid_module._cell("x") == "x" and grid_module._cell([1]) == [1]
    assert studies._clean(math.nan) is None and studies._clean(math.inf) is None
    assert studies._clean(1.0) == 1.0 and studies._clean("nan") == "nan" and studies._clean(None) is None
    assert [studies._is_number(v) for v in (1, 2.0, True, "1", None, math.nan)] == [
        True, True, False, False, False, True,
    ]  # fmt: skip


def test_table_columns_len_column():
    """``columns`` = keys + values, ``len`` the rows, ``column`` with None for a missing cell, KeyError else."""
    t = studies.Table([{"a": 1, "b": 2}, {"a": 3}], ("a",), ("b",), replicate="r")
    assert t.columns == ("a", "b") and len(t) == 2 and t.replicate == "r"
    assert t.column("b") == [2, None]
    assert studies.Table([], ("a",), ()).replicate == "seed"
    with pytest.raises(KeyError, match='^"' + re.escape("no column 'c'; the columns are ['a', 'b']")):
        t.column("c")


def test_table_summary_hue_and_errors():
    """``hue`` groups and sorts by hue then x; an unfixed key or an unknown column raises exactly."""
    rows = [
        {"h": h, "x": x, "seed": s, "y": float(h * 10 + x + s)}
        for h in (2, 1) for x in (3, 1) for s in (0, 1)
    ]  # fmt: skip
    t = studies.Table(rows, ("h", "x", "seed"), ("y",))
    got = t.summary("x", "y", hue="h")
    assert [(r["hue"], r["x"], r["mean"]) for r in got] == [
        (1, 1, 11.5),
        (1, 3, 13.5),
        (2, 1, 21.5),
        (2, 3, 23.5),
    ]
    assert list(got[0])[0] == "hue"
    with pytest.raises(
        ValueError,
        match="^"
        + re.escape(
            "parameter 'h' takes several values ['1', '2']; fix it with where={'h': ...} or use it as x or hue"
        ),
    ):
        t.summary("x", "y")
    for bad in (("q", "y", None), ("x", "q", None), ("x", "y", "q")):
        with pytest.raises(
            KeyError, match='^"' + re.escape("no column 'q'; the columns are ['h', 'x', 'seed', 'y']")
        ):
            t.summary(*bad)
    assert [r["x"] for r in t.summary("x", "y", where={"h": 1})] == [1, 3]


def test_table_csv_json_roundtrip(tmp_path):
    """``to_csv`` exact text (None empty, written to a path); ``to_json`` maps NaN to null; ``from_json``."""
    t = studies.Table([{"a": 1, "b": None}, {"a": 2, "b": math.nan, "c": 1}], ("a",), ("b",), replicate="a")
    with pytest.raises(ValueError, match=r"^dict contains fields not in fieldnames: .c.$"):
        t.to_csv()  # "c" is not a column: DictWriter refuses it
    t = studies.Table([{"a": 1, "b": None}, {"a": 2, "b": 0.5}, {"a": 3}], ("a",), ("b",), replicate="a")
    path = tmp_path / "t.csv"
    assert t.to_csv(path) == "a,b\n1,\n2,0.5\n3,\n"
    assert path.read_text() == "a,b\n1,\n2,0.5\n3,\n"
    tn = studies.Table([{"a": 1, "b": math.nan}], ("a",), ("b",), replicate="a")
    text = tn.to_json(tmp_path / "t.json")
    assert json.loads(text) == {
        "keys": ["a"],
        "values": ["b"],
        "replicate": "a",
        "rows": [{"a": 1, "b": None}],
    }
    assert (tmp_path / "t.json").read_text() == text
    assert text.startswith('{\n "keys": [\n  "a"\n ]')
    back = studies.Table.from_json(tmp_path / "t.json")
    assert back == studies.Table([{"a": 1, "b": None}], ("a",), ("b",), replicate="a")
    assert studies.Table.from_json("  " + text) == back
    assert studies.Table.from_json(str(tmp_path / "t.json")) == back


def test_scalar():
    """``_scalar`` passes Python scalars, converts one-element tensors/arrays/NumPy scalars, else TypeError."""
    for v in (True, 3, 2.5, "s", None):
        assert studies._scalar("o", v) is v
    assert studies._scalar("o", torch.tensor([1.5])) == 1.5
    assert studies._scalar("o", np.array([[2.0]])) == 2.0
    assert type(studies._scalar("o", np.int32(4))) is int
    with pytest.raises(
        TypeError,
        match="^"
        + re.escape(
            "o must be a scalar (int, float, bool, str, one-element tensor) or a 1-D series, got list"
        ),
    ):
        studies._scalar("o", [1])
    with pytest.raises(
        TypeError,
        match=r"^o must be a scalar \(int, float, bool, str, one-element tensor\) or a 1-D series, got Tensor$",
    ):
        studies._scalar("o", torch.zeros(0))


def test_series():
    """``_series``: 1-D tensors/arrays/lists of > 1 numbers as floats; None for scalars; TypeError for 2-D."""
    assert studies._series("s", torch.tensor([1, 2])) == [1.0, 2.0]
    assert studies._series("s", np.array([1, 2], dtype=np.int64)) == [1.0, 2.0]
    assert studies._series("s", [1, 2.5, np.float32(3)]) == [1.0, 2.5, 3.0]
    assert studies._series("s", (1, 2)) == [1.0, 2.0]
    for v in (
        torch.tensor([1.0]),
        np.array([1.0]),
        [1.0],
        [True, False],
        [1, "a"],
        3.0,
        "ab",
        torch.tensor(2.0),
    ):
        assert studies._series("s", v) is None
    assert studies._series("s", torch.zeros(1, 1)) is None and studies._series("s", np.zeros((1, 1))) is None
    assert (
        studies._series("s", torch.zeros(0)) is None and studies._series("s", np.zeros(0)) is None
    )  # empty 1-D
    with pytest.raises(
        TypeError,
        match="^"
        + re.escape(
            "s must be a scalar (int, float, bool, str, one-element tensor) or a 1-D series, got a Tensor of shape (2, 3)"
        ),
    ):
        studies._series("s", torch.zeros(2, 3))
    with pytest.raises(
        TypeError,
        match="^"
        + re.escape(
            "s must be a scalar (int, float, bool, str, one-element tensor) or a 1-D series, got a ndarray of shape (3, 1)"
        ),
    ):
        studies._series("s", np.zeros((3, 1)))


def test_sweep_result_tables_and_json(tmp_path):
    """``SweepResult`` columns, tables, failures, column, CSV of rows and curves, JSON round trip."""
    rows = [{"k": 1, "seed": 0, "y": 2.0, "error": None}, {"k": 2, "seed": 0, "error": "E: x"}]
    curves = [{"k": 1, "seed": 0, "t": 0.0, "s": 1.0}, {"k": 1, "seed": 0, "t": 1.0, "s": math.inf}]
    r = studies.SweepResult(rows, ("k",), ("y",), ("s",), curves, ("k",))
    assert r.columns == ("k", "seed", "y", "error")
    assert r.table == studies.Table(rows, ("k", "seed"), ("y", "error"), replicate="seed")
    assert r.curves == studies.Table(curves, ("k", "seed", "t"), ("s",), replicate="seed")
    assert r.failures == [rows[1]]
    assert r.column("y") == [2.0, None]
    with pytest.raises(
        KeyError, match='^"' + re.escape("no column 's'; the columns are ['k', 'seed', 'y', 'error']")
    ):
        r.column("s")
    assert r.to_csv() == "k,seed,y,error\n1,0,2.0,\n2,0,,E: x\n"
    assert r.to_csv(tmp_path / "c.csv", curves=True) == "k,seed,t,s\n1,0,0.0,1.0\n1,0,1.0,inf\n"
    assert (tmp_path / "c.csv").read_text() == "k,seed,t,s\n1,0,0.0,1.0\n1,0,1.0,inf\n"
    text = r.to_json(tmp_path / "r.json")
    data = json.loads(text)
    assert data == {
        "params": ["k"], "outputs": ["y"], "rows": rows, "series": ["s"],
        "curve_rows": [curves[0], {**curves[1], "s": None}], "batched": ["k"],
    }  # fmt: skip
    assert (tmp_path / "r.json").read_text() == text
    back = studies.SweepResult.from_json(tmp_path / "r.json")
    assert back == studies.SweepResult(
        rows, ("k",), ("y",), ("s",), [curves[0], {**curves[1], "s": None}], ("k",)
    )
    assert studies.SweepResult.from_json(text) == back
    old = studies.SweepResult.from_json(json.dumps({"params": ["k"], "outputs": [], "rows": []}))
    assert old == studies.SweepResult([], ("k",))
    bare = studies.SweepResult([], ("k",))
    assert (bare.outputs, bare.series, bare.curve_rows, bare.batched) == ((), (), [], ())


def test_sweep_result_summary():
    """``SweepResult.summary`` is the t interval over seeds of error-free rows (scipy reference)."""
    rows = [{"k": 1, "seed": s, "y": v, "error": None} for s, v in enumerate([1.0, 2.0, 6.0])]
    rows.append({"k": 1, "seed": 3, "y": 50.0, "error": "E: x"})
    r = studies.SweepResult(rows, ("k",), ("y",))
    (got,) = r.summary("k", "y", level=0.9)
    mean, lo, hi = _t_ci([1.0, 2.0, 6.0], 0.9)
    assert got["mean"] == pytest.approx(mean) and got["n"] == 3
    assert got["lo"] == pytest.approx(lo, rel=1e-12) and got["hi"] == pytest.approx(hi, rel=1e-12)


def test_grid_points():
    """``grid_points``: a product grid or a list of points; cells converted; each error's exact message."""
    pts, names = grid_module.grid_points({"a": [1, 2], "b": (np.float64(0.5),)})
    assert pts == [{"a": 1, "b": 0.5}, {"a": 2, "b": 0.5}] and names == ("a", "b")
    assert type(pts[0]["b"]) is float
    pts, names = grid_module.grid_points([{"a": 1}, {"b": 2, "a": 3}])
    assert pts == [{"a": 1}, {"b": 2, "a": 3}] and names == ("a", "b")
    with pytest.raises(TypeError, match="^" + re.escape("grid['a'] must be a sequence of values, got str")):
        grid_module.grid_points({"a": "12"})
    with pytest.raises(TypeError, match="^" + re.escape("grid['a'] must be a sequence of values, got int")):
        grid_module.grid_points({"a": 1})
    with pytest.raises(
        TypeError,
        match="^"
        + re.escape(
            "grid must be a mapping name -> values (a product grid) or a list of mappings (points), got list"
        ),
    ):
        grid_module.grid_points([{"a": 1}, 2])
    with pytest.raises(
        TypeError,
        match=r"^grid must be a mapping name -> values \(a product grid\) or a list of mappings \(points\), got int$",
    ):
        grid_module.grid_points(3)
    with pytest.raises(
        ValueError, match="^" + re.escape("grid must contain at least one point, got an empty grid")
    ):
        grid_module.grid_points({"a": []})
    with pytest.raises(
        ValueError, match="^" + re.escape("grid must contain at least one point, got an empty grid")
    ):
        grid_module.grid_points([])
    for reserved in ("seed", "error", "t"):
        with pytest.raises(
            ValueError,
            match="^"
            + re.escape(
                f"grid must not define {reserved!r} (a column of the table), got ['a', {reserved!r}]"
            ),
        ):
            grid_module.grid_points({"a": [1], reserved: [2]})


def test_store():
    """``_store``: scalars to the row, series to curve rows at ``t`` (default 0..T−1); its errors."""
    rows, curve_rows, outputs, series = [], [], {}, {}
    studies._store({"k": 1, "seed": 0}, {"y": torch.tensor(2.0), "s": [1.0, 2.0], "t": [0.5, 1.5]},
                   rows, curve_rows, outputs, series)  # fmt: skip
    assert rows == [{"k": 1, "seed": 0, "y": 2.0, "error": None}]
    assert curve_rows == [{"k": 1, "seed": 0, "t": 0.5, "s": 1.0}, {"k": 1, "seed": 0, "t": 1.5, "s": 2.0}]
    assert list(outputs) == ["y"] and list(series) == ["s"]
    studies._store({"k": 2, "seed": 0}, 7.0, rows, curve_rows, outputs, series)
    assert rows[-1] == {"k": 2, "seed": 0, "value": 7.0, "error": None} and list(outputs) == ["y", "value"]
    studies._store({"k": 3, "seed": 0}, {"s": np.array([4.0, 5.0, 6.0])}, rows, curve_rows, outputs, series)
    assert [c["t"] for c in curve_rows[-3:]] == [0, 1, 2]
    n = len(curve_rows)
    studies._store({"k": 4, "seed": 0}, {"y": 1.0, "t": [9.0]}, rows, curve_rows, outputs, series)
    assert len(curve_rows) == n  # no series: no curve rows, "t" ignored
    for bad, msg in (
        ({"k": 5}, "run returned an output named 'k', which is a parameter or column name"),
        ({"error": 1}, "run returned an output named 'error', which is a parameter or column name"),
        (
            {"a": [1.0, 2.0], "b": [1.0, 2.0, 3.0]},
            "the series outputs must share one time axis, got lengths [2, 3]",
        ),
        ({"a": [1.0, 2.0], "t": [1.0, 2.0, 3.0]}, "output 't' has 3 times, the series have 2"),
    ):
        with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
            studies._store({"k": 5, "seed": 0}, bad, [], [], {}, {})


def test_batch_seed_and_chunks():
    """``batch_seed`` = ``derive_seed(0, "batch:s1,s2,…")`` (order matters); ``_chunks`` tiles ``range(n)``."""
    assert studies.batch_seed([1, 2]) == derive_seed(0, "batch:1,2")
    assert studies.batch_seed([np.int64(3)]) == derive_seed(0, "batch:3")
    assert studies.batch_seed([torch.tensor(3), 4.0]) == derive_seed(0, "batch:3,4")  # each seed as int
    assert studies.batch_seed([2, 1]) != studies.batch_seed([1, 2])
    assert studies._chunks(5, 2) == [range(0, 2), range(2, 4), range(4, 5)]
    assert studies._chunks(4, 4) == [range(0, 4)]
    assert studies._chunks(3, 5) == [range(0, 3)]
    assert studies._chunks(0, 2) == []


def test_as_tensor():
    """``_as_tensor``: lists/arrays to float64 CPU tensors, tensors converted, anything else TypeError."""
    t = studies._as_tensor("v", [1, 2])
    assert t.dtype == torch.float64 and t.tolist() == [1.0, 2.0]
    assert studies._as_tensor("v", np.array([3], dtype=np.int32)).dtype == torch.float64
    x = torch.ones(2, requires_grad=True)
    y = studies._as_tensor("v", x)
    assert y.dtype == torch.float64 and not y.requires_grad
    with pytest.raises(TypeError, match=r"^v must be a tensor, got str$"):
        studies._as_tensor("v", "ab")


def test_plot_labels(tmp_path):
    """``Table.plot``/``SweepResult.plot``: one labelled mean line per hue, one band label naming the level and
    the replicate count, log axes on request, the file written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [
        {"h": h, "x": x, "seed": s, "y": float(h + x + s)} for h in (1, 2) for x in (1, 2) for s in (0, 1, 2)
    ]
    t = studies.Table(rows, ("h", "x", "seed"), ("y",))
    fig = t.plot("x", "y", hue="h", level=0.9, logx=True, label="run")
    ax = fig.axes[0]
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert labels == ["run, h=1 (mean)", "bands: 90% t-interval of the mean over 3 seeds", "run, h=2 (mean)"]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "linear"
    assert ax.get_xlabel() == "x" and ax.get_ylabel() == "y"
    assert [list(line.get_ydata()) for line in ax.get_lines()] == [[3.0, 4.0], [4.0, 5.0]]
    assert [(ln.get_marker(), ln.get_linestyle(), ln.get_markersize()) for ln in ax.get_lines()] == [
        ("o", "-", 3)
    ] * 2
    assert [c.get_alpha() for c in ax.collections] == [0.25, 0.25]
    for line, band in zip(ax.get_lines(), ax.collections):
        assert matplotlib.colors.same_color(band.get_facecolor()[0][:3], line.get_color())
    assert ax.get_legend().get_texts()[0].get_fontsize() == 8
    plt.close(fig)
    rows2 = rows + [{"h": 1, "x": 1, "seed": 3, "y": 0.0}]
    r = studies.SweepResult(rows2, ("h", "x"), ("y",))
    path = tmp_path / "f.png"
    fig = r.plot("x", "y", where={"h": 1}, logy=True, path=path)
    ax = fig.axes[0]
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert labels == ["y (mean)", "bands: 95% t-interval of the mean over 3–4 seeds"]
    assert ax.get_yscale() == "log" and path.stat().st_size > 0
    plt.close(fig)
    both = studies.SweepResult(
        rows2, ("h", "x"), ("y",), ("y",), [{"h": 1, "x": 1, "seed": 0, "t": 0, "y": 9.0}]
    )
    fig = both.plot(
        "x", "y", where={"h": 1}
    )  # a scalar and a series of that name: x other than t -> the rows
    assert [list(line.get_ydata()) for line in fig.axes[0].get_lines()] == [[2.25, 4.0]]
    plt.close(fig)


def test_sweep_result_plot_series(tmp_path):
    """A series ``y`` is drawn from the curves against ``t`` (its band counts the seeds of the curves)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = [{"k": 1, "seed": s, "t": t, "s": float(t + s)} for s in (0, 1) for t in (0.0, 1.0)]
    r = studies.SweepResult([{"k": 1, "seed": s, "error": None} for s in (0, 1)], ("k",), (), ("s",), curves)
    fig = r.plot("t", "s")
    ax = fig.axes[0]
    assert [list(line.get_ydata()) for line in ax.get_lines()] == [[0.5, 1.5]]
    assert ax.get_xlabel() == "t"
    assert [x.get_text() for x in ax.get_legend().get_texts()] == [
        "s (mean)",
        "bands: 95% t-interval of the mean over 2 seeds",
    ]
    plt.close(fig)
    fig = r.plot("k", "s", where={"t": 1.0})  # a series only: from the curves for any x
    assert [list(line.get_ydata()) for line in fig.axes[0].get_lines()] == [[1.5]]
    plt.close(fig)


def test_sweep_unbatched_rows_failures_and_warning():
    """One call per (point, seed) in grid × seed order; a raising run is a row with its error; a warning
    counts the failures; every run failing raises with the first error."""
    calls = []

    def run(a, b, seed):
        calls.append((a, b, seed))
        if a == 2 and seed == 1:
            raise ValueError("no")
        return {"y": a * 10 + seed, "s": [float(b), float(b + 1)]}

    with pytest.warns(
        RuntimeWarning,
        match="^" + re.escape("1 of 4 runs failed (see SweepResult.failures); the first: ValueError: no"),
    ):
        r = studies.sweep(run, {"a": [1, 2], "b": [5]}, seeds=2, progress=False)
    assert calls == [(1, 5, 0), (1, 5, 1), (2, 5, 0), (2, 5, 1)]
    assert r.rows == [
        {"a": 1, "b": 5, "seed": 0, "y": 10, "error": None},
        {"a": 1, "b": 5, "seed": 1, "y": 11, "error": None},
        {"a": 2, "b": 5, "seed": 0, "y": 20, "error": None},
        {"a": 2, "b": 5, "seed": 1, "error": "ValueError: no"},
    ]
    assert (r.params, r.outputs, r.series, r.batched) == (("a", "b"), ("y",), ("s",), ())
    assert r.curve_rows[:2] == [
        {"a": 1, "b": 5, "seed": 0, "t": 0, "s": 5.0},
        {"a": 1, "b": 5, "seed": 0, "t": 1, "s": 6.0},
    ]
    assert len(r.curve_rows) == 6
    r2 = studies.sweep(lambda k, seed: seed, [{"k": "x"}], seeds=[3, np.int64(4)], progress=False)
    assert r2.rows == [
        {"k": "x", "seed": 3, "value": 3, "error": None},
        {"k": "x", "seed": 4, "value": 4, "error": None},
    ]

    def half(k, seed):
        if seed:
            raise OSError("one")
        return 1.0

    with pytest.warns(
        RuntimeWarning, match=r"^1 of 2 runs failed \(see SweepResult\.failures\); the first: OSError: one$"
    ):
        r3 = studies.sweep(half, {"k": [1]}, seeds=2, progress=False)
    assert r3.failures == [{"k": 1, "seed": 1, "error": "OSError: one"}]

    def fail(k, seed):
        raise KeyError("z")

    with pytest.raises(
        RuntimeError, match="^" + re.escape("every run of the sweep failed; the first: KeyError: 'z'")
    ):
        studies.sweep(fail, {"k": [1]}, seeds=1, progress=False)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"run": 3}, TypeError, "run must be callable, got int"),
        (
            {"seeds": True},
            TypeError,
            "seeds must be an int (a number of seeds) or a sequence of ints, got bool",
        ),
        (
            {"seeds": 1.5},
            TypeError,
            "seeds must be an int (a number of seeds) or a sequence of ints, got float",
        ),
        ({"seeds": []}, ValueError, "seeds must be a non-empty sequence of ints, got []"),
        ({"seeds": [1, True]}, ValueError, "seeds must be a non-empty sequence of ints, got [1, True]"),
        ({"batch": ["q"]}, ValueError, "batch names parameters ['q'] that are not in the grid ['a', 'n']"),
        ({"batch": ["n"]}, TypeError, "batched parameter 'n' must take numbers only (a float per replica)"),
        ({"batch": "a"}, TypeError, "batch must be a bool or a sequence of parameter names, got str"),
        (
            {"max_batch": 2},
            ValueError,
            "max_batch, memory_budget, replica_bytes and observables apply with batch= only",
        ),
        (
            {"observables": {}},
            ValueError,
            "max_batch, memory_budget, replica_bytes and observables apply with batch= only",
        ),
        (
            {"batch": True, "memory_budget": 10.0},
            ValueError,
            "memory_budget and replica_bytes go together (bytes per call, bytes per replica)",
        ),
        (
            {"batch": True, "replica_bytes": 10},
            ValueError,
            "memory_budget and replica_bytes go together (bytes per call, bytes per replica)",
        ),
    ],
    ids=[
        "run",
        "seedsbool",
        "seedsfloat",
        "seedsempty",
        "seedsbool2",
        "batchunknown",
        "batchstr",
        "batchtype",
        "maxbatch",
        "observables",
        "budget",
        "replica",
    ],
)
def test_sweep_argument_errors(kwargs, error, message):
    """Each bad argument of ``sweep`` raises its exact message."""
    args = {
        "run": lambda **k: 1.0,
        "grid": {"a": [1.0, 2.0], "n": ["u"]},
        "seeds": 1,
        "progress": False,
        **kwargs,
    }
    with pytest.raises(error, match="^" + re.escape(message) + "$"):
        studies.sweep(args.pop("run"), args.pop("grid"), **args)


def test_sweep_batched_chunks():
    """Batched: replicas grouped by the fixed parameters, cut by ``max_batch`` or the memory budget; each
    call gets float64 tensors and the seed list; outputs per replica in grid × seed order."""
    calls = []

    def run(a, m, seed):
        calls.append((a.tolist(), m, list(seed)))
        return {"y": a * 100 + torch.tensor(seed, dtype=torch.float64) + m}

    r = studies.sweep(
        lambda a, m, seed: run(a, len(m), seed), {"a": [1.0, 2.0], "m": ["p", "qq"]}, seeds=2, batch=True,
        max_batch=3, progress=False,
    )  # fmt: skip
    assert r.batched == ("a",) and r.outputs == ("y",)
    assert calls == [
        ([1.0, 1.0, 2.0], 1, [0, 1, 0]),
        ([2.0], 1, [1]),
        ([1.0, 1.0, 2.0], 2, [0, 1, 0]),
        ([2.0], 2, [1]),
    ]
    assert [row["y"] for row in r.rows] == [101.0, 102.0, 102.0, 103.0, 201.0, 202.0, 202.0, 203.0]
    assert [(row["a"], row["m"], row["seed"]) for row in r.rows][:3] == [
        (1.0, "p", 0),
        (1.0, "p", 1),
        (1.0, "qq", 0),
    ]
    calls.clear()
    studies.sweep(lambda a, m, seed: run(a, m, seed), {"a": [1.0, 2.0, 3.0], "m": [4]}, seeds=1, batch=True,
                  memory_budget=250.0, replica_bytes=lambda p: 100, progress=False)  # fmt: skip
    assert [c[0] for c in calls] == [[1.0, 2.0], [3.0]]  # 250 // 100 = 2 replicas a call
    assert [c[1].tolist() for c in calls] == [[4.0, 4.0], [4.0]]  # m is a number too: batched
    calls.clear()
    studies.sweep(lambda a, m, seed: run(a, m, seed), {"a": [1.0, 2.0, 3.0], "m": [4]}, seeds=1, batch=["a"],
                  memory_budget=50.0, replica_bytes=100, progress=False)  # fmt: skip
    assert [c[0] for c in calls] == [[1.0], [2.0], [3.0]]  # at least one replica a call
    assert [c[1] for c in calls] == [4, 4, 4]


def test_store_names_the_output_in_type_errors():
    """A 2-D or non-scalar output is refused naming it ``output 'name'``."""
    with pytest.raises(
        TypeError,
        match=r"^output 'y' must be a scalar \(int, float, bool, str, one-element tensor\) or a 1-D series, got a Tensor of shape \(2, 2\)$",
    ):
        studies._store({"k": 1}, {"y": torch.zeros(2, 2)}, [], [], {}, {})
    with pytest.raises(
        TypeError,
        match=r"^output 'z' must be a scalar \(int, float, bool, str, one-element tensor\) or a 1-D series, got dict$",
    ):
        studies._store({"k": 1}, {"z": {}}, [], [], {}, {})
    with pytest.raises(TypeError, match=r"^output 't' must be a tensor, got str$"):
        studies._store({"k": 1}, {"s": [1.0, 2.0], "t": "ab"}, [], [], {}, {})


def test_a_two_point_reference_cloud_is_the_smallest_accepted():
    """A reference cloud of N = 2 points is a cloud (its size N), the boundary of "N ≥ 2"; N = 1 is refused
    (the table of bad input above)."""
    from meanfield.studies.in_memory import _Reference

    cloud = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    ref = _Reference.of(cloud, None, None, None, "w2_squared", "auto", torch.Generator())
    assert ref.kind == "cloud" and ref.cloud_size(8) == 2
    with pytest.raises(ValueError, match="N ≥ 2, got \\(1, 1\\)"):
        _Reference.of(cloud[:1], None, None, None, "w2_squared", "auto", torch.Generator())
