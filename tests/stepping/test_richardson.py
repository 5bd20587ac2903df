"""Coupled step-size runs, Richardson extrapolation, and the jackknife."""

import importlib
import math

import numpy as np
import pytest
import torch

from meanfield import MeanFieldLangevin
from meanfield.drift.potentials import (
    Quadratic,
)
from meanfield.drift.systems import SDE
from meanfield.stepping.brownian import BrownianIncrements
from meanfield.stepping.richardson import coupled_step_sizes, richardson
from meanfield.studies.stats import jackknife


def test_jackknife_of_a_mean_is_the_usual_standard_error():
    x = np.random.default_rng(0).normal(size=200)
    est = jackknife(lambda m: m, x)
    assert est.value == pytest.approx(x.mean(), abs=1e-12)
    assert est.se == pytest.approx(x.std(ddof=1) / math.sqrt(200), rel=1e-10)
    nested = jackknife(lambda m: m["a"]["u"] - m["b"], {"a": {"u": x}, "b": 2 * x})
    assert nested.value == pytest.approx(-x.mean(), abs=1e-12)
    with pytest.raises(ValueError, match="at least 2 replicas"):
        jackknife(lambda m: m, np.ones(1))


def test_richardson_removes_the_first_order_bias_of_the_ou_chain():
    """EM on dx = −ax dt + sqrt(2β) dW: Var_η = β/(a(1 − ηa/2)); at ηa = 0.1 the coupled runs at η and 2η
    extrapolate to β/a within 5·SE + the exact O(η²) residual (0.6 %), while Var_η itself (5.3 % off) is
    rejected. 4000 replicas, time averages over 480 records after a burn-in of 160."""
    a, beta, eta = 1.0, 1.0, 0.1
    system = MeanFieldLangevin(Quadratic(a), beta=beta)
    x0 = torch.zeros(4000, 1, 1, dtype=torch.float64)
    series = coupled_step_sizes(
        system,
        x0,
        eta=eta,
        n_segments=40,
        observable=lambda s: s[..., 0, 0].square(),
        generator=torch.Generator().manual_seed(0),
        levels=(1, 2),
        record_every=2,
        segment=16,
    )
    per = {k: v[160:].mean(0) for k, v in series.items()}  # (B,) time averages per level
    exact = {k: beta / (a * (1 - k * eta * a / 2)) for k in (1, 2)}
    residual = abs(richardson(exact[1], exact[2]) - beta / a)
    extrapolated = jackknife(lambda m: richardson(m[1], m[2]), per)
    raw = jackknife(lambda m: m[1], per)
    assert extrapolated.agrees(beta / a, bias=residual), (extrapolated, residual)
    assert raw.agrees(exact[1])  # each level is its own chain's stationary variance
    assert not raw.agrees(beta / a)  # negative control: the raw value carries the O(η) bias


def test_levels_must_divide_the_record_interval():
    system = MeanFieldLangevin(Quadratic(1.0), beta=1.0)
    with pytest.raises(ValueError, match="levels must be positive ints dividing record_every = 6"):
        coupled_step_sizes(
            system,
            torch.zeros(2, 1, 1),
            eta=0.1,
            n_segments=1,
            observable=lambda s: s[..., 0, 0],
            generator=torch.Generator(),
            levels=(1, 4),
            record_every=6,
        )


rich_mod = importlib.import_module("meanfield.stepping.richardson")


F64 = torch.float64


def cloud(B=2, M=4, d=2, seed=0, scale=1.0):
    """A seeded float64 ``(B, M, d)`` state."""
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(B, M, d, generator=g, dtype=F64)


def close(actual, expected, rtol=1e-12, atol=1e-13):
    """``actual`` (tensor or array) equals ``expected`` in shape and within the tolerances (float64)."""
    a = actual.detach().double().numpy() if torch.is_tensor(actual) else np.asarray(actual, np.float64)
    e = expected.detach().double().numpy() if torch.is_tensor(expected) else np.asarray(expected, np.float64)
    return a.shape == e.shape and np.allclose(a, e, rtol=rtol, atol=atol)


def test_coupled_step_sizes_calls_simulate_on_the_shared_path(monkeypatch):
    """A spy on ``simulate`` and on the path's draw: per segment, each level ``k`` continues from its own
    last state at ``t0 = segment·n_fine·η`` to ``t0 + n_fine·η`` with ``dt = k·η``, the solver given and
    ``save_every = record_every/k``; the fine level runs on the drawn path itself, a coarse one on its
    ``coarsen(k)`` (increments summed in blocks of k, numpy)."""
    calls, drawn = [], []
    real_simulate, real_sample = rich_mod.simulate, BrownianIncrements.sample

    def spy_simulate(system, x, **kwargs):
        traj = real_simulate(system, x, **kwargs)
        calls.append((x.clone(), kwargs, traj.final.clone()))
        return traj

    def spy_sample(*args, **kwargs):
        path = real_sample(*args, **kwargs)
        drawn.append(path)
        return path

    monkeypatch.setattr(rich_mod, "simulate", spy_simulate)
    monkeypatch.setattr(BrownianIncrements, "sample", spy_sample)
    eta, record_every, segment, levels = 0.1, 4, 2, (1, 2, 4)
    x0 = cloud(2, 3, 1, seed=27)
    system = MeanFieldLangevin(Quadratic(1.0), beta=0.5)
    out = rich_mod.coupled_step_sizes(
        system,
        x0,
        eta=eta,
        n_segments=3,
        observable=lambda s: s.mean(dim=(2, 3)),
        generator=torch.Generator().manual_seed(3),
        levels=levels,
        record_every=record_every,
        segment=segment,
        solver="euler",
    )
    n_fine = segment * record_every
    assert len(drawn) == 3 and len(calls) == 9
    assert all(p.increments.shape == (n_fine, 2, 3, 1) and p.dt == eta for p in drawn)
    last = {k: x0 for k in levels}
    for i, (x, kwargs, final) in enumerate(calls):
        seg, k = divmod(i, 3)
        k = levels[k]
        t = 0.0 + seg * n_fine * eta
        assert torch.equal(x, last[k])
        assert kwargs["t0"] == pytest.approx(t, abs=1e-15) and kwargs["t1"] == pytest.approx(t + n_fine * eta)
        assert (
            kwargs["dt"] == k * eta
            and kwargs["solver"] == "euler"
            and kwargs["save_every"] == record_every // k
        )
        path = kwargs["brownian"]
        if k == 1:
            assert path is drawn[seg]
        else:
            blocks = drawn[seg].increments.numpy().reshape(n_fine // k, k, 2, 3, 1).sum(1)
            assert close(path.increments, blocks) and path.dt == pytest.approx(k * eta)
        last[k] = final
    assert sorted(out) == [1, 2, 4] and all(v.shape == (3 * segment, 2) for v in out.values())


def test_coupled_step_sizes_equals_the_hand_euler_loops():
    """OU ``dx = −a x dt + sqrt(2β) dW``, levels 1 and 2, two segments: the recorded observable ``x²`` equals
    hand Euler loops (numpy) on the path drawn segment by segment from a generator seeded alike (the coarse
    level on sums of pairs of fine increments), every ``record_every`` fine steps; ``x0`` is not modified.
    Negative control: the coarse level differs from the fine one."""
    a, beta, eta, record_every, segment = 0.8, 0.3, 0.05, 2, 3
    x0 = cloud(2, 1, 1, seed=28)
    x0_copy = x0.clone()
    out = rich_mod.coupled_step_sizes(
        MeanFieldLangevin(Quadratic(a), beta=beta),
        x0,
        eta=eta,
        n_segments=2,
        observable=lambda s: s[..., 0, 0].square(),
        generator=torch.Generator().manual_seed(9),
        levels=(1, 2),
        record_every=record_every,
        segment=segment,
    )
    assert torch.equal(x0, x0_copy)
    g = torch.Generator().manual_seed(9)
    n_fine = segment * record_every
    dW = np.concatenate(
        [(torch.randn(n_fine, 2, 1, 1, generator=g, dtype=F64) * math.sqrt(eta)).numpy() for _ in range(2)]
    )
    expected = {}
    for k in (1, 2):
        x, rec = x0.numpy().copy(), []
        incs = dW.reshape(-1, k, 2, 1, 1).sum(1)
        for n, w in enumerate(incs):
            x = x - k * eta * a * x + math.sqrt(2 * beta) * w
            if (n + 1) % (record_every // k) == 0:
                rec.append(x[:, 0, 0] ** 2)
        expected[k] = np.stack(rec)
    assert out[1].dtype == np.float64 and out[1].shape == (2 * segment, 2)
    assert close(out[1], expected[1], rtol=1e-11) and close(out[2], expected[2], rtol=1e-11)
    assert not close(out[1], out[2], rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"eta": 0.0}, ValueError, r"^eta must be > 0, got 0\.0$"),
        ({"n_segments": 0}, ValueError, r"^n_segments must be ≥ 1, got 0$"),
        ({"record_every": True}, TypeError, r"^record_every must be an int, got bool$"),
        ({"segment": 0}, ValueError, r"^segment must be ≥ 1, got 0$"),
        (
            {"levels": (1, 0)},
            ValueError,
            r"^levels must be positive ints dividing record_every = 8, got \[0\]$",
        ),
        (
            {"levels": (1.0, 2)},
            ValueError,
            r"^levels must be positive ints dividing record_every = 8, got \[1\.0\]$",
        ),
        (
            {"levels": (3, 2, 5)},
            ValueError,
            r"^levels must be positive ints dividing record_every = 8, got \[3, 5\]$",
        ),
    ],
    ids=["eta", "n_segments", "record_every", "segment", "zero_level", "float_level", "non_divisors"],
)
def test_coupled_step_sizes_refusals(kwargs, error, message):
    """Bad arguments are refused by name before anything runs."""
    args = {"eta": 0.1, "n_segments": 1, "record_every": 8, "segment": 2, "levels": (1, 2)}
    args.update(kwargs)
    with pytest.raises(error, match=message):
        rich_mod.coupled_step_sizes(
            MeanFieldLangevin(Quadratic()),
            torch.zeros(1, 1, 1),
            observable=lambda s: s[..., 0, 0],
            generator=torch.Generator(),
            **args,
        )


def test_richardson_is_two_fine_minus_coarse():
    """``richardson(v(η), v(2η)) = 2v(η) − v(2η)`` on numbers and arrays (hand values)."""
    assert rich_mod.richardson(1.5, 2.0) == 1.0
    assert np.array_equal(rich_mod.richardson(np.array([1.0, 3.0]), np.array([0.5, 7.0])), [1.5, -1.0])


SIGMA = 0.7


def _drift(t, x):
    """Time-dependent, so that a wrong clock changes every record after the first segment."""
    return -x + math.cos(3.0 * float(t)) + 0.5 * float(t)


def _sde():
    return SDE(_drift, lambda t, x: SIGMA, noise="additive")


def _reference(x0, eta, n_segments, levels, record_every, segment, seed, dtype, solver="euler", clock=1.0):
    """The coupled runs written out: the segments' increments drawn as documented, summed in blocks of k, the
    Euler (or additive-noise Heun) recursion with the clock t_n = n·k·η, a record every record_every/k steps."""
    g = torch.Generator().manual_seed(seed)
    n_fine = segment * record_every
    dW = torch.cat(
        [
            torch.empty((n_fine, *x0.shape), dtype=dtype).normal_(0.0, math.sqrt(eta), generator=g)
            for _ in range(n_segments)
        ]
    )  # (N, B, M, d)
    out = {}
    for k in levels:
        h = k * eta
        inc = dW.reshape(-1, k, *x0.shape).sum(1)  # (N/k, B, M, d)
        x, rec = x0.clone(), []
        for n in range(inc.shape[0]):
            seg, within = divmod(n * k, n_fine)  # the segment and the fine step inside it
            t = clock * seg * n_fine * eta + within * eta
            if solver == "euler":
                x = x + _drift(t, x) * h + SIGMA * inc[n]
            else:  # Heun (Stratonovich = Itô for additive noise)
                y = x + _drift(t, x) * h + SIGMA * inc[n]
                x = x + 0.5 * (_drift(t, x) + _drift(t + h, y)) * h + SIGMA * inc[n]
            if (n + 1) % (record_every // k) == 0:
                rec.append(x.mean(dim=(1, 2)))
        out[k] = torch.stack(rec).numpy()
    return out


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_coupled_step_sizes_equal_the_runs_written_out(dtype):
    x0 = torch.linspace(-1.0, 1.0, 3 * 2 * 2, dtype=dtype).reshape(3, 2, 2)
    kw = dict(eta=0.05, n_segments=3, levels=(1, 2, 4), record_every=4, segment=2)
    got = coupled_step_sizes(
        _sde(), x0, observable=lambda s: s.mean(dim=(2, 3)), generator=torch.Generator().manual_seed(5), **kw
    )
    ref = _reference(x0, seed=5, dtype=dtype, **kw)
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    assert sorted(got) == [1, 2, 4]
    for k in (1, 2, 4):
        assert got[k].shape == (3 * 2, 3) and got[k].dtype == (
            np.float64 if dtype == torch.float64 else np.float32
        )
        np.testing.assert_allclose(got[k], ref[k], rtol=0, atol=tol)
    # negative controls: the clock running backwards between segments; increments drawn in the other dtype
    backwards = _reference(x0, seed=5, dtype=dtype, clock=-1.0, **kw)
    assert np.allclose(got[1][:2], backwards[1][:2], rtol=0, atol=tol)  # the first segment is the same
    assert not np.allclose(got[1], backwards[1], rtol=0, atol=1e-3)
    other = torch.float32 if dtype == torch.float64 else torch.float64
    wrong = _reference(x0.to(other), seed=5, dtype=other, **kw)[1].astype(np.float64)
    assert not np.allclose(got[1], wrong, rtol=0, atol=1e-3)  # another dtype draws another path
    # each level is a different discretisation of the same path: the levels differ, by O(η)
    assert not np.allclose(got[1], got[2], atol=1e-3)


def test_coupled_step_sizes_run_the_named_solver():
    x0 = torch.zeros(2, 1, 1, dtype=torch.float64)
    kw = dict(eta=0.1, n_segments=2, levels=(1, 2), record_every=2, segment=3)
    got = coupled_step_sizes(
        _sde(),
        x0,
        observable=lambda s: s.mean(dim=(2, 3)),
        generator=torch.Generator().manual_seed(1),
        solver="heun",
        **kw,
    )
    heun = _reference(x0, seed=1, dtype=torch.float64, solver="heun", **kw)
    euler = _reference(x0, seed=1, dtype=torch.float64, **kw)
    for k in (1, 2):
        np.testing.assert_allclose(got[k], heun[k], rtol=0, atol=1e-12)
        assert not np.allclose(got[k], euler[k], rtol=0, atol=1e-6)  # control: Euler is another answer


def test_richardson_is_two_v_eta_minus_v_two_eta():
    assert richardson(1.5, 2.0) == 1.0
    np.testing.assert_array_equal(richardson(np.array([1.0, 3.0]), np.array([0.5, 7.0])), [1.5, -1.0])
    assert richardson(1.0, 1.0) == 1.0 and richardson(1.0, 0.0) != 1.0


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"eta": 0.0}, "eta must be > 0, got 0.0"),
        ({"eta": "a"}, "eta must be a real number, got str"),
        ({"n_segments": 0}, "n_segments must be ≥ 1, got 0"),
        ({"n_segments": 1.0}, "n_segments must be an int, got float"),
        ({"record_every": 0}, "record_every must be ≥ 1, got 0"),
        ({"segment": 0}, "segment must be ≥ 1, got 0"),
        ({"segment": 2.0}, "segment must be an int, got float"),
        ({"levels": (1, 0)}, "levels must be positive ints dividing record_every = 4, got [0]"),
        ({"levels": (1, 2.0, 3)}, "levels must be positive ints dividing record_every = 4, got [2.0, 3]"),
    ],
)
def test_coupled_step_sizes_refuse_bad_arguments_naming_them(kw, message):
    args = dict(eta=0.1, n_segments=1, levels=(1, 2), record_every=4, segment=2) | kw
    with pytest.raises((ValueError, TypeError)) as err:
        coupled_step_sizes(
            _sde(),
            torch.zeros(1, 1, 1, dtype=torch.float64),
            observable=lambda s: s.mean(dim=(2, 3)),
            generator=torch.Generator(),
            **args,
        )
    assert str(err.value) == message


def test_coupled_step_sizes_records_segment_times_n_segments_by_default():
    """By default a segment holds 16 records (``segment = 16``): two segments give 32 records per level, one
    every ``record_every`` fine steps."""
    system = MeanFieldLangevin(Quadratic(1.0), beta=0.5)
    series = coupled_step_sizes(system, torch.zeros(3, 2, 1, dtype=torch.float64), eta=0.01, n_segments=2,
                                observable=lambda s: s.mean(dim=(2, 3)), generator=torch.Generator().manual_seed(0),
                                levels=(1, 2), record_every=2)  # fmt: skip
    assert {k: v.shape for k, v in series.items()} == {1: (32, 3), 2: (32, 3)}


def test_coupled_step_sizes_draws_the_noise_of_a_general_noise_system():
    """A system whose noise has its own dimension (``noise="general"``, m = 3 for a state of d = 2) gets
    increments of shape (B, M, m); they were drawn in the state's shape and refused by ``simulate``. The
    levels share one path: with σ(x) = 0.1·1 the level-1 and level-2 means agree to O(η) (a control that the
    noise is the same path coarsened)."""
    system = SDE(
        lambda t, x: -x,
        lambda t, x: 0.1 * torch.ones(*x.shape, 3, dtype=x.dtype),
        noise="general",
        brownian_dim=3,
    )
    out = coupled_step_sizes(
        system, torch.zeros(2, 4, 2, dtype=torch.float64), eta=0.01, n_segments=1,
        observable=lambda st: st.mean(dim=(2, 3)), generator=torch.Generator().manual_seed(0),
        levels=(1, 2), record_every=2, segment=2,
    )  # fmt: skip
    assert out[1].shape == out[2].shape == (2, 2)
    assert np.abs(out[1] - out[2]).max() < 0.01 * np.abs(out[1]).max()
