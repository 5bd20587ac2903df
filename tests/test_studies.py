"""Tests of meanfield.studies.in_memory: convergence in M (known rates, the linear McKean–Vlasov excess) and sweeps.

Statistical checks use tolerance ``Z·SE`` (``Z = 5``) or a stated theory band, fixed seeds, state the
smallest error they detect, and come with a negative control that must fail the same check.
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import scipy.stats
import torch

from meanfield import MeanFieldLangevin, simulate
from meanfield.drift.potentials import Quadratic, QuadraticInteraction
from meanfield.metrics.wasserstein import SINKHORN_MAX_POINTS, Normal, Uniform, w2_squared, wasserstein_to_law
from meanfield.studies.in_memory import StudyResult, SweepResult, batch_seed, convergence_in_m, sweep
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
    """A 2-D output is neither a scalar nor a series (a 1-D output is a series: tests/test_studies_tables.py)."""

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
