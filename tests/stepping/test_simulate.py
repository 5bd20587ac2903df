"""simulate: reproducibility, the torchsde adapter, saving, and clear errors for bad input."""

import importlib
import math
import pickle
import re
import sys
import time
import warnings

import numpy as np
import pytest
import torch
import torchsde
from helpers.bad_input import call, one_bad, tensors
from helpers.drift_oracles import autograd_drift, system_and_oracle
from helpers.kinetic_steps import splitting_step  # tests/helpers/kinetic_steps.py
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import meanfield as mf
import meanfield.drift.potentials
import meanfield.metrics
import meanfield.nn
import meanfield.nn.tokens
import meanfield.stepping.brownian
from meanfield import (
    SDE,
    BrownianIncrements,
    MeanFieldLangevin,
    NonFiniteStateError,
    TorchSDE,
    _background,
    simulate,
)
from meanfield.drift.phase_space import KineticMeanFieldLangevin, pair
from meanfield.drift.potentials import (
    Alignment,
    DoubleWell,
    GaussianInteraction,
    LogInteraction,
    Quadratic,
    QuadraticInteraction,
    RadialInteraction,
    RieszInteraction,
)
from meanfield.drift.projections import Sphere
from meanfield.drift.resolution import CollapseError, CollapseWarning, UnstableStepWarning
from meanfield.drift.schedules import Cosine, Linear
from meanfield.drift.systems import ParticleSystem
from meanfield.metrics.wasserstein import (
    Uniform,
)
from meanfield.stepping.brownian import GaussianNoise, NoiseSource
from meanfield.stepping.solvers import SOLVERS
from meanfield.stepping.solvers.splittings import SPLITTINGS, Splitting
from meanfield.stepping.solvers.torchsde import _SystemAsSDE
from meanfield.studies.in_memory import convergence_in_m
from meanfield.studies.stats import Estimate, mean_se, whiteness

SYSTEM = MeanFieldLangevin(DoubleWell(), QuadraticInteraction(0.5), beta=0.3)


def x0(B=3, M=50, d=2, seed=0, device="cpu"):
    """The same numbers on every device (drawn on the CPU, then moved)."""
    return torch.randn(B, M, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(device)


def test_same_seed_gives_bit_identical_trajectories(device):
    def g(seed):
        return torch.Generator(device=device).manual_seed(seed)

    x = x0(device=device)
    a = simulate(SYSTEM, x, t1=1.0, dt=0.01, save_every=10, generator=g(5))
    b = simulate(SYSTEM, x, t1=1.0, dt=0.01, save_every=10, generator=g(5))
    c = simulate(SYSTEM, x, t1=1.0, dt=0.01, save_every=10, generator=g(6))
    assert a.states.device == x.device and torch.equal(a.states, b.states)
    assert not torch.equal(a.final, c.final)
    d = simulate(SYSTEM, x, t1=1.0, dt=0.01, generator=123)  # an int seed is recorded
    e = simulate(SYSTEM, x, t1=1.0, dt=0.01, generator=d.seed)
    assert d.seed == 123 and torch.equal(d.final, e.final)
    assert torch.equal(d.final, simulate(SYSTEM, x, t1=1.0, dt=0.01, generator=g(123)).final)
    f = simulate(SYSTEM, x, t1=1.0, dt=0.01)  # no generator: a fresh seed, recorded for a rerun
    assert torch.equal(simulate(SYSTEM, x, t1=1.0, dt=0.01, generator=f.seed).final, f.final)


@pytest.mark.parametrize("system", [SYSTEM, SDE(lambda t, x: -x, lambda t, x: 0.3 * (1 + x.square()))])
def test_native_euler_equals_torchsde_euler_with_the_same_increments(system, device):
    x = x0(device=device)

    def g(seed):
        return torch.Generator(device=device).manual_seed(seed)

    native = simulate(system, x, t1=0.5, dt=0.01, generator=g(9))
    other = simulate(system, x, t1=0.5, dt=0.01, solver="torchsde_euler", generator=g(9))
    assert torch.allclose(native.final, other.final, rtol=0, atol=1e-12)  # float64: round-off on any device
    shifted = simulate(system, x, t1=0.5, dt=0.01, solver="torchsde_euler", generator=g(10))
    assert not torch.allclose(native.final, shifted.final, atol=1e-3)  # negative control


def test_pre_drawn_increments_drive_the_run_step_by_step(device):
    path = BrownianIncrements.sample(50, (3, 50, 2), 0.01, generator=torch.Generator().manual_seed(4))
    path = BrownianIncrements(path.increments.to(device), path.dt)  # the same path on every device
    run = simulate(SYSTEM, x0(device=device), t1=0.5, dt=0.01, brownian=path).final
    x = x0(device=device)
    for n in range(50):  # x_{n+1} = x_n + b(x_n) dt + sqrt(2β) dW_n
        x = x + SYSTEM.drift(n * 0.01, x) * 0.01 + (2 * 0.3) ** 0.5 * path.increments[n]
    assert torch.allclose(run, x, atol=1e-12)
    other = simulate(SYSTEM, x0(device=device), t1=0.5, dt=0.01, brownian=path, solver="torchsde_euler").final
    assert torch.allclose(run, other, atol=1e-12)
    # a device-independent known answer: the float64 CPU run, to round-off (FMA contractions differ on CUDA)
    if device.type != "cpu":
        cpu = simulate(
            SYSTEM, x0(), t1=0.5, dt=0.01, brownian=BrownianIncrements(path.increments.cpu(), 0.01)
        )
        assert torch.allclose(run.cpu(), cpu.final, rtol=0, atol=1e-12)


def test_general_noise_matches_diagonal_when_the_matrix_is_diagonal():
    diag = SDE(lambda t, x: -x, lambda t, x: 0.5 + 0 * x, noise="diagonal")
    general = SDE(
        lambda t, x: -x,
        lambda t, x: 0.5 * torch.eye(2, dtype=x.dtype).expand(*x.shape, 2),
        noise="general",
        brownian_dim=2,
    )
    for solver in ("euler", "torchsde_euler"):
        a = simulate(diag, x0(), t1=0.2, dt=0.01, solver=solver, generator=1)
        b = simulate(general, x0(), t1=0.2, dt=0.01, solver=solver, generator=1)
        assert torch.allclose(a.final, b.final, atol=1e-12)


def test_trajectory_saves_the_requested_states():
    traj = simulate(SYSTEM, x0(), t1=1.0, dt=0.1, save_every=3, generator=0)
    assert traj.steps.tolist() == [0, 3, 6, 9, 10]
    assert torch.allclose(traj.times, torch.tensor([0.0, 0.3, 0.6, 0.9, 1.0], dtype=torch.float64))
    assert traj.states.shape == (5, 3, 50, 2) and torch.equal(traj.states[0], x0())
    assert torch.equal(traj.final, traj.states[-1]) and traj.solver == "euler" and traj.dt == 0.1
    # the saved intermediate state is the state of a shorter run with the same noise
    short = simulate(SYSTEM, x0(), t1=0.6, dt=0.1, generator=0)
    assert torch.equal(short.final, traj.states[2])


def test_x0_is_not_modified_and_float32_runs(device):
    x = x0(device=device).float()
    before = x.clone()
    out = simulate(SYSTEM, x, t1=0.1, dt=0.01, generator=0)
    assert torch.equal(x, before) and out.final.dtype == torch.float32 and out.final.device == x.device
    # float32 against float64 on the same increments: 10 steps of round-off ≈ 1e-7 relative stay below 1e-5;
    # the drift moves the state by ≈ 1e-2 a step, so a float32 path that got a step wrong would be far off
    path = BrownianIncrements.sample(10, (3, 50, 2), 0.01, generator=torch.Generator().manual_seed(2))
    dW = path.increments.to(device)  # (10, 3, 50, 2) float64
    exact = simulate(SYSTEM, x.double(), t1=0.1, dt=0.01, brownian=BrownianIncrements(dW, 0.01)).final
    single = simulate(SYSTEM, x, t1=0.1, dt=0.01, brownian=BrownianIncrements(dW.float(), 0.01)).final
    assert single.dtype == torch.float32 and torch.allclose(single.double(), exact, rtol=0, atol=1e-5)
    short = simulate(SYSTEM, x.double(), t1=0.09, dt=0.01, brownian=BrownianIncrements(dW[:9], 0.01)).final
    assert not torch.allclose(single.double(), short, rtol=0, atol=1e-3)  # negative control: a step missing


def test_interaction_and_schedule_in_a_run():
    system = MeanFieldLangevin(Quadratic(1.0), GaussianInteraction(1.0, 0.5), beta=lambda t: 0.1 * (1 + t))
    out = simulate(system, x0(), t1=0.5, dt=0.01, solver="srk", generator=0)
    assert torch.isfinite(out.final).all()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(x0=torch.zeros(5, 2, dtype=torch.float64)), ValueError, r"x0 must have shape \(B, M, d\)"),
        (dict(x0=torch.tensor([[[math.nan]]])), ValueError, "x0 has 1 non-finite"),
        (dict(x0=torch.zeros(1, 2, 1, dtype=torch.long)), TypeError, "floating-point"),
        (dict(dt=0.0), ValueError, "dt must be > 0"),
        (dict(dt=-0.1), ValueError, "dt must be > 0"),
        (dict(t1=0.0), ValueError, "t1 must be"),
        (dict(dt=0.3), ValueError, "whole number of steps"),
        (dict(solver="rk45"), ValueError, "unknown solver 'rk45'; allowed"),
        (dict(solver=3), TypeError, "solver must be a name"),
        (dict(noise="uniform"), ValueError, "noise must be one of"),
        (dict(noise="rademacher", solver="srk"), ValueError, "needs Gaussian increments"),
        (dict(save_every=0), ValueError, "save_every must be ≥ 1"),
        (dict(generator="seed"), TypeError, "generator must be"),
        (dict(system=object()), TypeError, "system must be a meanfield ParticleSystem"),
        (
            dict(generator=None, brownian=BrownianIncrements(torch.zeros(10, 1, 4, 1), 0.1)),
            ValueError,
            "brownian increments have shape",
        ),
        (
            dict(generator=None, brownian=BrownianIncrements(torch.zeros(5, 1, 3, 1), 0.1)),
            ValueError,
            "holds 5 steps",
        ),
        (dict(brownian=BrownianIncrements(torch.zeros(10, 1, 3, 1), 0.1)), ValueError, "not both"),
    ],
)
def test_bad_input_gets_a_clear_error(kwargs, error, match):
    args = dict(system=SYSTEM, x0=torch.zeros(1, 3, 1, dtype=torch.float64), t1=1.0, dt=0.1, generator=0)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        simulate(args.pop("system"), args.pop("x0"), **args)


def test_bad_systems_and_methods():
    with pytest.raises(ValueError, match="beta must be ≥ 0"):
        MeanFieldLangevin(Quadratic(1.0), beta=-1.0)
    with pytest.raises(TypeError, match="confinement must be"):
        MeanFieldLangevin(lambda x: x)
    with pytest.raises(ValueError, match="unknown torchsde method 'rk4'"):
        TorchSDE("rk4")
    with pytest.raises(ValueError, match="noise must be one of"):
        SDE(lambda t, x: x, lambda t, x: x, noise="multiplicative")
    negative_schedule = MeanFieldLangevin(Quadratic(1.0), beta=lambda t: 1.0 - t)
    with pytest.raises(ValueError, match=r"beta\(t=1.1\) = -0.1.*≥ 0"):
        simulate(negative_schedule, torch.zeros(1, 2, 1), t1=2.0, dt=0.1, generator=0)
    general = SDE(lambda t, x: -x, lambda t, x: torch.ones(*x.shape, 3), noise="general", brownian_dim=3)
    for method in ("srk", "milstein", "heun"):
        with pytest.raises(ValueError, match=f"solver '{method}' needs noise of type .* 'general'"):
            simulate(general, torch.zeros(1, 2, 1), t1=1.0, dt=0.1, solver=method, generator=0)


@pytest.mark.parametrize(
    "eager", [True, False], ids=["flag read at every stop", "flags read every check_every"]
)
def test_a_diverging_run_stops_with_the_step_and_time(device, eager, monkeypatch):
    """Where the flags are read together (the default off the CPU: no synchronisation at every saved state),
    the error names the same step, time and last finite step, and keeps the same trajectory."""
    simulate_module = sys.modules[
        "meanfield.stepping.simulate"
    ]  # (meanfield.simulate is also the function's name)
    monkeypatch.setattr(simulate_module, "_EAGER_CHECKS", frozenset({device.type} if eager else ()))
    explosive = SDE(lambda t, x: x.square() * 50, lambda t, x: 0 * x + 0.1)
    x = torch.ones(2, 3, 1, dtype=torch.float64, device=device)
    with pytest.raises(
        NonFiniteStateError,
        match=r"non-finite .* at step \d+ \(t = [\d.]+\), the first non-finite step; it was finite",
    ) as err:
        simulate(explosive, x, t1=10.0, dt=0.01, save_every=5, check_every=16, generator=0)
    e = err.value
    assert e.last_finite_step < e.step <= e.last_finite_step + 5
    assert e.time == pytest.approx(e.step * 0.01)
    assert e.trajectory.steps[-1] <= e.last_finite_step and torch.isfinite(e.trajectory.states).all()
    # the last saved state is the state of a run stopped there (nothing after the first non-finite stop)
    last = int(e.trajectory.steps[-1])
    assert torch.equal(e.trajectory.final, simulate(explosive, x, t1=last * 0.01, dt=0.01, generator=0).final)
    saved_steps = range(0, 1000, 5)
    assert e.trajectory.steps.tolist() == [k for k in saved_steps if k <= e.last_finite_step]


def test_the_finiteness_check_sees_every_kind_of_non_finite_entry():
    from meanfield.stepping.simulate import _all_finite

    for n in (10, 100_000):  # the small path (isfinite().all()) and the large one (aminmax)
        for dtype in (torch.float32, torch.float64):
            x = torch.zeros(1, n, 1, dtype=dtype)
            assert bool(_all_finite(x)) and bool(_all_finite(x + torch.finfo(dtype).max))
            for bad in (math.nan, math.inf, -math.inf):
                for where in (0, n // 2, n - 1):
                    y = x.clone()
                    y[0, where, 0] = bad
                    assert not bool(_all_finite(y)), (n, dtype, bad, where)


def test_a_generator_or_a_path_on_another_device_is_a_clear_error():
    x = x0()
    with pytest.raises(ValueError, match="brownian increments are on meta, x0 is on cpu"):
        path = BrownianIncrements(torch.empty(10, 3, 50, 2, dtype=torch.float64, device="meta"), 0.01)
        simulate(SYSTEM, x, t1=0.1, dt=0.01, brownian=path)
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="generator is on cuda.*x0 is on cpu"):
            simulate(SYSTEM, x, t1=0.1, dt=0.01, generator=torch.Generator(device="cuda"))
        with pytest.raises(ValueError, match="generator is on cpu, x0 is on cuda"):
            simulate(SYSTEM, x.cuda(), t1=0.1, dt=0.01, generator=torch.Generator())


def test_a_run_split_in_two_with_the_generator_state_equals_one_run(device):
    """Checkpoint = (state, time, generator state): resuming reproduces the uninterrupted run bit for bit."""
    x = x0(device=device)
    whole = simulate(SYSTEM, x, t1=1.0, dt=0.01, generator=torch.Generator(device).manual_seed(3)).final
    gen = torch.Generator(device).manual_seed(3)
    first = simulate(SYSTEM, x, t1=0.5, dt=0.01, generator=gen)
    checkpoint = {"x": first.final.clone(), "t": 0.5, "rng": gen.get_state()}
    resumed_gen = torch.Generator(device)
    resumed_gen.set_state(checkpoint["rng"])
    second = simulate(SYSTEM, checkpoint["x"], t0=checkpoint["t"], t1=1.0, dt=0.01, generator=resumed_gen)
    assert torch.equal(second.final, whole)
    assert torch.allclose(second.times[[0, -1]], torch.tensor([0.5, 1.0], dtype=torch.float64))
    fresh = simulate(SYSTEM, checkpoint["x"], t0=0.5, t1=1.0, dt=0.01, generator=torch.Generator(device))
    assert not torch.equal(fresh.final, whole)  # negative control: the generator state is what carries it


# ---------------------------------------------------------------- the next draw in the background


def _prefetched_and_not(monkeypatch, system, noise="gaussian", **kw):
    """(run with the background prefetch, run without, generator states after each)."""
    from meanfield import _background

    out = []
    for overlap_min in (0, 10**12):  # 0: every draw is prefetched; 10**12: none is
        monkeypatch.setattr(_background, "OVERLAP_MIN", overlap_min)
        gen = torch.Generator().manual_seed(11)
        traj = simulate(system, x0(), t1=0.4, dt=0.01, generator=gen, noise=noise, **kw)
        out.append((traj.states, gen.get_state()))
    return out


def _tanh_sde(noise):
    if noise == "general":
        return SDE(lambda t, x: -x, lambda t, x: 0.2 * torch.diag_embed(1 + x.tanh()), "general", 2)
    return SDE(lambda t, x: -x, lambda t, x: 0.3 * (1 + x.square()), noise="diagonal")


@pytest.mark.parametrize(
    "system, noise",
    [
        (SYSTEM, "gaussian"),
        (SYSTEM, "rademacher"),
        (
            MeanFieldLangevin(DoubleWell(), QuadraticInteraction(0.5), beta=Linear(0.5, 0.05, T=0.4)),
            "gaussian",
        ),
        (SDE(lambda t, x: -x, lambda t, x: 0.4 + t), "gaussian"),  # σ a number that changes with t
        (_tanh_sde("diagonal"), "gaussian"),
        (_tanh_sde("general"), "gaussian"),
    ],
    ids=["constant-beta", "rademacher", "beta-schedule", "sigma-of-t", "diagonal", "general"],
)
def test_background_prefetch_gives_the_same_run(monkeypatch, system, noise):
    """Drawing step n+1 in the background during the update of step n changes nothing, bit for bit: states,
    and the generator's state at the end (so a checkpointed run still resumes exactly); also across the
    segments that saving and checking cut the run into."""
    (with_, gen_with), (without, gen_without) = _prefetched_and_not(
        monkeypatch, system, noise, save_every=7, check_every=5
    )
    assert torch.equal(with_, without)
    assert torch.equal(gen_with, gen_without)


def test_prefetch_rules(monkeypatch):
    """A prefetch starts only for the next step, once a draw has shown that the caller's update left the
    generator alone; a scale-1 prefetch read at another scale is exactly the direct draw; the Lévy area of
    a step cannot be drawn once the next step is being drawn."""
    from meanfield import _background
    from meanfield.stepping.brownian import GaussianNoise

    monkeypatch.setattr(_background, "OVERLAP_MIN", 0)
    shape = (40, 3)  # ≥ 16 numbers: normal_'s vectorised path
    a = GaussianNoise(shape, 0.01, torch.Generator().manual_seed(0), torch.float64, "cpu")
    b = GaussianNoise(shape, 0.01, torch.Generator().manual_seed(0), torch.float64, "cpu")
    assert torch.equal(a.increment(0, 0.1), b.increment(0, 0.1))
    a.prefetch(1, 0.1)  # not yet verified (no update seen): nothing starts
    assert a._pending is None
    assert torch.equal(a.increment(1, 0.1), b.increment(1, 0.1))
    a.prefetch(5)  # not the next step: nothing starts
    assert a._pending is None
    a.prefetch(2, 1.0)  # the caller does not know the scale yet
    assert a._pending is not None
    with pytest.raises(RuntimeError, match="before the next step is prefetched"):
        a.space_time_area(1)
    assert torch.equal(a.increment(2, 0.37), b.increment(2, 0.37))  # bit for bit
    a.prefetch(3, 0.1)  # a wrong guess of the scale: rescaled, equal to rounding
    assert torch.allclose(a.increment(3, 0.37), b.increment(3, 0.37), rtol=1e-15, atol=0)
    a.settle()


def test_a_system_drawing_from_the_noise_generator_turns_prefetching_off(monkeypatch):
    """A drift that draws from simulate's own generator (the random-batch idea) would race with a prefetch:
    the source sees the generator move between its draws and never prefetches, so the run is the serial
    run, bit for bit, every time."""
    from meanfield import _background

    gen_holder = {}

    def drift(t, x):
        time.sleep(0.002)  # a prefetch that was started would surely draw first: a race made certain
        noise = torch.randn(x.shape[:2], generator=gen_holder["g"], dtype=x.dtype)  # (B, M)
        return -x + 0.1 * noise[..., None]

    system = SDE(drift, lambda t, x: 0.3, noise="additive")
    runs = []
    for overlap_min in (0, 0, 10**12):
        monkeypatch.setattr(_background, "OVERLAP_MIN", overlap_min)
        gen_holder["g"] = gen = torch.Generator().manual_seed(4)
        runs.append(simulate(system, x0(), t1=0.3, dt=0.01, generator=gen).final)
    assert torch.equal(runs[0], runs[2]) and torch.equal(runs[1], runs[2])


def test_state_dependent_scalar_sigma_is_read_exactly(monkeypatch):
    """σ a number that depends on x (diagonal noise): the prefetch cannot know the scale, draws at scale 1
    and multiplies when read: the run equals the serial one bit for bit, also through σ = 0."""
    system = SDE(lambda t, x: -x, lambda t, x: float(x.abs().mean() > 0.75) * 0.5, noise="diagonal")
    (with_, gen_with), (without, gen_without) = _prefetched_and_not(monkeypatch, system)
    assert torch.equal(with_, without) and torch.equal(gen_with, gen_without)


def test_an_error_inside_the_run_leaves_the_generator_where_the_serial_run_does(monkeypatch):
    """The drift raises half way through a segment, while the next draw is being prefetched: simulate waits
    for that draw and puts the generator back, so it is where the serial run leaves it."""
    from meanfield import _background

    def drift(t, x):
        if t > 0.155:
            raise RuntimeError("drift failed")
        return -x

    system = SDE(drift, lambda t, x: 0.3, noise="additive")
    states = []
    for overlap_min in (0, 10**12):
        monkeypatch.setattr(_background, "OVERLAP_MIN", overlap_min)
        gen = torch.Generator().manual_seed(2)
        with pytest.raises(RuntimeError, match="drift failed"):
            simulate(system, x0(), t1=0.3, dt=0.01, generator=gen)
        states.append(gen.get_state())
    assert torch.equal(states[0], states[1])


def test_no_background_draws_when_torch_runs_one_thread(monkeypatch):
    """With torch on one thread there is no idle core for the draw (the global setting is not touched
    here: changing torch's thread count slows later tests)."""
    from meanfield import _background

    monkeypatch.setattr(_background, "MIN_THREADS", 2)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert not _background.pays(10**9)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert _background.pays(_background.OVERLAP_MIN) and not _background.pays(_background.OVERLAP_MIN - 1)


def test_background_draws_work_under_inference_mode(monkeypatch):
    """Buffers made under torch.inference_mode() may only be written under it; the background thread runs
    its draws in the caller's mode, so simulate and Langevin.step work there, with the same numbers."""
    from meanfield import _background
    from meanfield.optim import Langevin

    results = []
    for overlap_min in (0, 10**12):
        monkeypatch.setattr(_background, "OVERLAP_MIN", overlap_min)
        p = torch.nn.Parameter(torch.zeros(500, dtype=torch.float64))
        opt = Langevin([p], lr=0.1, beta=0.2, drift="adam", seed=3)
        with torch.inference_mode():
            traj = simulate(SYSTEM, x0(), t1=0.1, dt=0.01, generator=3)
            for _ in range(3):
                p.grad = torch.ones_like(p)
                opt.step()
        results.append((traj.final, p.detach().clone()))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


@pytest.mark.parametrize(
    "eager", [True, False], ids=["flag read at every stop", "flags read every check_every"]
)
@pytest.mark.parametrize("noise", ["generator", "pre-drawn"])
def test_a_non_finite_error_names_the_first_non_finite_step_and_a_blow_up(eager, noise, monkeypatch):
    """The step is the first whose state is non-finite, found independently by stepping
    x' = x + b(x)·dt + σ·sqrt(dt)·ξ by hand with the same draws; the checks come only every 64 steps and the
    state is not saved in between, so the step is found by replaying from the last check. The cause here is
    a blow-up (|x| grew without bound), so the advice is about dt and the drift's sign."""
    simulate_module = sys.modules["meanfield.stepping.simulate"]
    monkeypatch.setattr(simulate_module, "_EAGER_CHECKS", frozenset({"cpu"} if eager else ()))
    dt, sigma = 0.01, 0.1
    explosive = SDE(lambda t, x: x.square() * 5, lambda t, x: sigma, noise="additive")
    x0 = torch.full((2, 3, 1), 0.15, dtype=torch.float64)  # blows up near t = 1/(5·0.15) ≈ 1.3
    g = torch.Generator().manual_seed(3)
    path = BrownianIncrements.sample(1000, (2, 3, 1), dt, generator=torch.Generator().manual_seed(4))
    x, first = x0.clone(), None
    for n in range(1000):  # the independent answer
        if noise == "generator":
            xi = torch.empty_like(x).normal_(0.0, sigma * dt**0.5, generator=g)
        else:
            xi = path.increments[n] * (sigma * dt**0.5 / dt**0.5)
        x = torch.add(x, x.square() * 5, alpha=dt).add_(xi)
        if not torch.isfinite(x).all():
            first = n + 1
            break
    assert first is not None and first % 64 and first > 64  # not at a check stop: only a replay finds it
    kwargs = dict(generator=3) if noise == "generator" else dict(brownian=path)
    with pytest.raises(
        NonFiniteStateError,
        match=rf"at step {first} \(t = {first * dt:g}\), the first non-finite"
        rf" step; it was finite at step {first - 1}.*grew to \|x\|.*reduce dt",
    ) as err:
        simulate(explosive, x0, t1=10.0, dt=dt, check_every=64, **kwargs)
    assert err.value.step == first and err.value.last_finite_step == first - 1
    assert err.value.time == pytest.approx(first * dt)


def test_a_source_that_cannot_be_replayed_names_the_checks_that_bracket_the_step():
    """Negative control of the replay: noise drawn by a source other than meanfield's own (here one that
    draws as it goes, like BlockNoise) is not replayed; the error gives the stops around the failure."""
    from meanfield.stepping.brownian import NoiseSource

    class Drawn(NoiseSource):
        def __init__(self):
            super().__init__((1, 1, 1), 0.01)
            self.g = torch.Generator().manual_seed(0)

        def increment(self, n, scale=1.0):
            return torch.randn(self.shape, generator=self.g, dtype=torch.float64) * scale

    explosive = SDE(lambda t, x: x.square() * 5, lambda t, x: 0.1, noise="additive")
    with pytest.raises(NonFiniteStateError, match=r"by step (\d+) .*; it was finite at step \d+") as err:
        simulate(
            explosive,
            torch.full((1, 1, 1), 0.5, dtype=torch.float64),
            t1=10.0,
            dt=0.01,
            brownian=Drawn(),
            check_every=64,
        )
    assert err.value.step % 64 == 0 and err.value.last_finite_step == err.value.step - 64


# --------------------------------------------------------------------------------------------------------
# What the step can resolve: the stability warning before the run, the collapse watch, and save_from


def _keller_segel(chi, B, seed, dt=4e-3, t1=1.6, **kwargs):
    """2-D Keller–Segel: ``LogInteraction(−χ)``, no confinement, β = 1, M = 100, x0 ~ N(0, I₂) (E m2(0) = 2)."""

    system = MeanFieldLangevin(Quadratic(0.0), LogInteraction(-chi), beta=1.0)
    x = torch.randn(B, 100, 2, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trajectory = simulate(system, x, t1=t1, dt=dt, generator=seed, **kwargs)
    return trajectory, [w.message for w in caught if issubclass(w.category, CollapseWarning)]


def test_supercritical_keller_segel_says_once_that_it_collapsed_and_when():
    # χ = 6 > χ_c = 4β·N/(N−1) = 4.04: d/dt E m2 = 4 − 6·0.99 = −1.94, so E m2 hits 0 at t* = 2/1.94 = 1.03
    _, said = _keller_segel(6.0, B=2, seed=1)
    assert len(said) == 1, "one warning per run"
    w = said[0]
    assert 0.3 < w.time <= 1.25 * 2 / 1.94 and w.step == round(w.time / 4e-3)  # at the collapse, not at t = 0
    assert w.replica in (0, 1) and w.replicas[0] == w.replica
    r_star = math.sqrt(2 * 6.0 * 4e-3 / 100)  # (2|c|·dt/M)^{1/2}
    assert w.radius == pytest.approx(r_star) and w.distance < r_star and w.pairs >= 25  # ≥ M/4 pairs below r⋆
    assert f"t = {w.time:g}" in str(w) and f"replica {w.replica}" in str(w)
    with pytest.raises(CollapseError) as error:  # collapse="raise": the same event, and the states so far
        _keller_segel(6.0, B=2, seed=1, save_every=25, collapse="raise")
    assert error.value.time == w.time and error.value.replica == w.replica
    assert float(error.value.trajectory.times[-1]) <= w.time
    again = pickle.loads(pickle.dumps(error.value))  # a worker process can send it back
    assert (str(again), again.step, again.pairs) == (str(error.value), w.step, w.pairs)
    assert torch.equal(again.trajectory.states, error.value.trajectory.states)
    _, quiet = _keller_segel(6.0, B=2, seed=1, collapse="ignore")
    assert quiet == []


def test_a_collapse_read_lazily_is_said_at_the_same_step(monkeypatch):
    # on an accelerator the censuses are queued and read every check_every steps: the same look says it
    _, eager = _keller_segel(6.0, B=2, seed=1)
    monkeypatch.setattr(sys.modules["meanfield.stepping.simulate"], "_EAGER_CHECKS", frozenset())
    _, lazy = _keller_segel(6.0, B=2, seed=1)
    assert len(lazy) == 1 and (lazy[0].step, lazy[0].replicas) == (eager[0].step, eager[0].replicas)


@pytest.mark.parametrize("chi", [2.0, 3.5, -6.0])  # subcritical (χ < 4.04), and repulsive (c = +6 > 0)
def test_subcritical_or_repulsive_keller_segel_says_nothing(chi):
    # the negative control of the test above: the same run below the critical χ, or with the sign flipped;
    # chance pairs closer than r⋆ occur here in every replica (≤ 3 at a time), a collapse holds ≥ M/4
    _, said = _keller_segel(chi, B=4, seed=1)
    assert said == []


def test_close_pairs_counts_the_pairs_of_a_brute_force_distance_matrix():
    from meanfield.drift.resolution import close_pairs

    x = torch.randn(3, 37, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x[1, 5] = x[1, 9] + 1e-6  # a near-collision
    radius = torch.tensor([0.1, 0.2, 0.0], dtype=torch.float64)
    d = torch.cdist(x, x) + torch.diag(torch.full((37,), math.inf, dtype=torch.float64))  # (3, 37, 37)
    for max_elements in (1 << 22, 3 * 5 * 37):  # one block, and blocks of 5 rows
        closest, count = close_pairs(x, radius, max_elements)
        assert torch.allclose(closest, d.amin((1, 2)), atol=1e-9)
        assert count.tolist() == [int((d[b] < radius[b]).sum()) // 2 for b in range(3)]
    assert float(closest[1]) < 1e-5 and int(count[2]) == 0


def test_resolution_radius_is_where_one_step_moves_a_pair_by_its_distance():
    from meanfield.drift.potentials import GaussianInteraction
    from meanfield.drift.resolution import resolution_radius

    def system(W):
        return MeanFieldLangevin(Quadratic(1.0), W, beta=1.0)

    # dt·2|c|·r^{−s−1}/M = r at r⋆: check the defining equation, not the formula
    for W, s in ((LogInteraction(-6.0), 0.0), (RieszInteraction(1.0, -2.0), 1.0)):
        r = float(resolution_radius(system(W), 100, 1e-3)[0])
        assert 1e-3 * 2 * abs(float(W.c)) * r ** (-s - 1) / 100 == pytest.approx(r)
    per_replica = resolution_radius(system(LogInteraction(torch.tensor([-6.0, 0.0, 6.0]))), 100, 1e-3)
    assert per_replica[0] > 0 and per_replica[1:].tolist() == [0.0, 0.0]
    for W in (LogInteraction(6.0), GaussianInteraction(-1.0), None):  # repulsive, not singular, none
        assert resolution_radius(system(W), 100, 1e-3) is None


def _unstable(system, dt, x=None, solver="euler"):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        simulate(system, x0(B=2, M=4) if x is None else x, t1=dt, dt=dt, generator=0, solver=solver)
    said = [str(w.message) for w in caught if issubclass(w.category, UnstableStepWarning)]
    assert len(said) <= 1
    return said[0] if said else None


def test_unstable_step_is_said_before_the_run():
    from meanfield.drift.potentials import Alignment

    # the issue's case: Quadratic(1) at dt = 3 overflows only after ~1000 steps; the warning comes with one step
    said = _unstable(MeanFieldLangevin(Quadratic(1.0)), 3.0)
    assert said is not None and "λ·dt = 3" in said and "997 steps" in said and "dt < 2" in said
    assert _unstable(MeanFieldLangevin(Quadratic(1.0)), 2.0) is not None  # |1 − a·dt| = 1: no contraction
    assert _unstable(MeanFieldLangevin(Quadratic(1.0)), 1.9) is None  # negative control: stable
    assert _unstable(MeanFieldLangevin(Quadratic(torch.tensor([0.5, 1.5]))), 1.5) is not None  # replica 1
    assert "replica 1" in _unstable(MeanFieldLangevin(Quadratic(torch.tensor([0.5, 1.5]))), 1.5)
    assert _unstable(MeanFieldLangevin(Quadratic(0.5), QuadraticInteraction(1.0)), 1.5) is not None  # a + k
    assert _unstable(MeanFieldLangevin(Quadratic(0.5), QuadraticInteraction(-0.4)), 1.5) is None
    assert _unstable(MeanFieldLangevin(Quadratic(0.5), Alignment(-1.0)), 1.5) is not None  # a − κ on the mean
    assert _unstable(MeanFieldLangevin(Quadratic(1.0)), 3.0, solver="heun") is not None  # RK2: the same 2
    assert _unstable(MeanFieldLangevin(Quadratic(1.0)), 3.0, solver="srk") is None  # another region: not said
    far = torch.full((1, 4, 1), 3.0, dtype=torch.float64)  # x⁴/4 − x²/2 at |x| = 3: rate x² − 1 = 8
    assert _unstable(MeanFieldLangevin(DoubleWell()), 0.3, far) is not None  # 8·0.3 = 2.4 ≥ 2
    assert _unstable(MeanFieldLangevin(DoubleWell()), 0.2, far) is None  # 1.6 < 2


def test_save_from_keeps_the_states_after_a_burn_in():
    x = x0()
    full = simulate(SYSTEM, x, t1=1.0, dt=0.01, save_every=10, generator=4)
    late = simulate(SYSTEM, x, t1=1.0, dt=0.01, save_every=10, save_from=0.5, generator=4)
    assert late.steps.tolist() == [50, 60, 70, 80, 90, 100]
    assert torch.allclose(late.times, 0.01 * late.steps.to(torch.float64)) and float(late.times[0]) == 0.5
    assert torch.equal(late.states, full.states[5:])  # the same path, saved from t = 0.5 on
    odd = simulate(SYSTEM, x, t1=1.0, dt=0.01, save_every=30, save_from=0.25, generator=4, t0=0.0)
    assert odd.steps.tolist() == [25, 55, 85, 100]  # every save_every steps from save_from, and the end
    assert simulate(SYSTEM, x, t1=1.0, dt=0.01, save_from=1.0, generator=4).steps.tolist() == [100]
    shifted = simulate(SYSTEM, x, t0=2.0, t1=3.0, dt=0.01, save_every=50, save_from=2.5, generator=4)
    assert shifted.times.tolist() == pytest.approx([2.5, 3.0])
    for bad in (0.505, -0.1, 1.5, math.nan, "0.5"):
        with pytest.raises((ValueError, TypeError), match="save_from") as error:
            simulate(SYSTEM, x, t1=1.0, dt=0.01, save_from=bad, generator=4)
        assert "\n" not in str(error.value)


def test_collapse_arguments_are_checked():
    for bad, kind in (("loud", ValueError), (None, ValueError)):
        with pytest.raises(kind, match="collapse must be one of"):
            simulate(SYSTEM, x0(), t1=0.1, dt=0.01, collapse=bad)
    with pytest.raises(ValueError, match="collapse_every"):
        simulate(SYSTEM, x0(), t1=0.1, dt=0.01, collapse_every=0)


SETTINGS = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


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


DTYPES = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int64,
    torch.bool,
    torch.complex64,
]


X0 = torch.randn(2, 3, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


GOOD_SYSTEM = MeanFieldLangevin(DoubleWell(), GaussianInteraction(0.5, 1.0), beta=0.2)


SYSTEMS = st.one_of(
    NONSENSE,
    st.sampled_from(
        [
            Quadratic(1.0),
            MeanFieldLangevin(Quadratic(1.0), QuadraticInteraction(1.0), beta=Linear(0.3, -0.3, T=0.1)),
            MeanFieldLangevin(DoubleWell(), beta=Linear(0.3, -0.3, T=0.1)),  # negative mid-run, generic path
            MeanFieldLangevin(Quadratic(1.0), beta=lambda t: math.nan if t > 0.05 else 0.2),
            MeanFieldLangevin(Quadratic(1.0), beta=lambda t: "hot"),
            MeanFieldLangevin(Quadratic(1.0), beta=lambda t: None),
            SDE(lambda t, x: x[0], lambda t, x: 0.1, noise="additive"),  # drift of the wrong shape
            SDE(lambda t, x: 1.0, lambda t, x: 0.1, noise="additive"),  # drift not a tensor
            SDE(lambda t, x: -x, lambda t, x: torch.ones(5), noise="diagonal"),  # σ of the wrong shape
            SDE(lambda t, x: -x, lambda t, x: torch.ones(2, 3, 2, 3), noise="general", brownian_dim=2),
            SDE(lambda t, x: -x, lambda t, x: 0.1 + 0 * x[..., :1], noise="diagonal"),  # broadcasts: fine
            MeanFieldLangevin(Quadratic(1.0), beta=0.2, projection=Sphere()),
        ]
    ),
)


SIM_POOLS = {
    "system": SYSTEMS,
    "x0": st.one_of(tensors(), NONSENSE),
    "t1": BAD,
    "t0": BAD,
    "dt": BAD,
    "solver": st.one_of(st.sampled_from([*SOLVERS, "nope", "", "EULER"]), BAD),
    "save_every": BAD,
    "check_every": BAD,
    "generator": st.one_of(BAD, st.just(torch.Generator().manual_seed(1))),
    "noise": st.one_of(st.sampled_from(["gaussian", "rademacher", "uniform", ""]), BAD),
    "brownian": st.one_of(
        NONSENSE,
        st.sampled_from(
            [
                BrownianIncrements.sample(5, (2, 3, 2), 0.02, generator=torch.Generator().manual_seed(2)),
                BrownianIncrements.sample(4, (2, 3, 2), 0.02, generator=torch.Generator().manual_seed(2)),
                BrownianIncrements.sample(5, (2, 3, 1), 0.02, generator=torch.Generator().manual_seed(2)),
                BrownianIncrements.sample(10, (2, 3, 2), 0.01, generator=torch.Generator().manual_seed(2)),
            ]
        ),
    ),
}


SIM_VALID = {
    "system": GOOD_SYSTEM,
    "x0": X0,
    "t1": 0.1,
    "dt": 0.02,
    "t0": 0.0,
    "solver": "euler",
    "generator": 0,
}


SIM_NAMES = {
    "system": ("system", "beta", "drift", "diffusion"),
    "t1": ("t1", "dt"),
    "t0": ("t0", "t1", "dt"),
    "dt": ("dt", "t1"),
    "brownian": ("brownian", "generator"),
    "generator": ("generator", "brownian"),
}


def _steps(kw) -> float:
    try:
        return (float(kw["t1"]) - float(kw["t0"])) / float(kw["dt"])
    except (TypeError, ValueError, RuntimeError, ZeroDivisionError):
        return 0.0


@SETTINGS
@given(one_bad(SIM_VALID, SIM_POOLS))
def test_simulate(case):
    name, kw = case
    n = _steps(kw)
    assume(not (math.isfinite(n) and 2000 < n <= 2**53))  # a correct but long run: not a bad input
    if name == "brownian":
        kw = {**kw, "generator": None}
    traj = call(simulate, SIM_NAMES.get(name, (name,)), kw.pop("system"), kw.pop("x0"), **kw)
    if traj is None:
        return
    x0 = SIM_VALID["x0"] if name != "x0" else case[1]["x0"]
    assert traj.states.shape[1:] == x0.shape and traj.states.dtype == x0.dtype
    assert bool(torch.isfinite(traj.states).all())
    assert math.isclose(float(traj.times[0]), float(kw["t0"]), abs_tol=1e-12)
    assert math.isclose(float(traj.times[-1]), float(kw["t1"]), rel_tol=1e-6, abs_tol=1e-9)
    assert torch.equal(traj.states[0], x0)


def test_a_run_of_more_than_2_to_the_53_steps_is_refused_not_started():
    with pytest.raises(ValueError, match="dt"):
        simulate(GOOD_SYSTEM, X0, t1=1.0, dt=1e-300, generator=0)


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


class _Spy(NoiseSource):
    """A noise source that records prefetch hints (it declines steps in ``refuse``, and every step when
    ``prefetches`` is false); ``increment(n, s) = s·ξ_n`` from a table ``ξ``."""

    def __init__(self, xi, dt, refuse=(), prefetches=True):
        super().__init__(tuple(xi.shape[1:]), dt)
        self.xi, self.hints, self.refuse, self._prefetches = xi, [], set(refuse), prefetches

    @property
    def prefetches(self):
        return self._prefetches

    def will_prefetch(self, n):
        return n not in self.refuse

    def prefetch(self, n, scale=1.0):
        self.hints.append((n, scale))

    def increment(self, n, scale=1.0):
        return self.xi[n] * scale


def _sigma_switch(t, x):
    """Additive σ: the number 0.5 before ``t = 0.3``, 0 on ``[0.3, 0.5)``, then a per-particle tensor."""
    if t < 0.3 - 1e-9:
        return 0.5
    if t < 0.5 - 1e-9:
        return 0.0
    return torch.full(x.shape, 0.7, dtype=x.dtype)


def test_euler_hints_follow_the_next_sigma_and_the_states_are_the_hand_loop():
    """Additive σ switching from the number 0.5 to 0 (at t = 0.3) and to a per-particle tensor 0.7 (at
    t = 0.5), dt = 0.1, eight steps in two segments: the hints are ``(n, σ(t_n)·sqrt(dt))`` while ``σ(t_n)`` is
    a nonzero number, ``1.0`` when it is zero or a tensor, ``sqrt(dt)`` after a tensor step, never past a
    segment's end nor for a step the source declines; the states equal the hand Euler loop ``x + dt·(−x) + σ(t_n)·sqrt(dt)·ξ_n`` (numpy)."""
    dt, B, M = 0.1, 2, 3
    xi = cloud(8, B * M, 1, seed=15).reshape(8, B, M, 1)
    spy = _Spy(xi, dt, refuse={6})
    system = SDE(lambda t, x: -x, _sigma_switch, noise="additive")
    x0 = cloud(B, M, 1, seed=16)
    traj = simulate(system, x0, t1=8 * dt, dt=dt, brownian=spy, save_every=4)
    sq = math.sqrt(dt)
    expected = [(1, 0.5 * sq), (2, 0.5 * sq), (3, 1.0), (5, 1.0), (7, sq)]  # step 6 declined
    assert [n for n, _ in spy.hints] == [n for n, _ in expected]
    assert np.allclose([s for _, s in spy.hints], [s for _, s in expected], rtol=1e-15, atol=0)
    x, states = x0.numpy(), [x0.numpy()]
    for n in range(8):
        sigma = 0.5 if n < 3 else (0.0 if n < 5 else 0.7)
        x = x - dt * x + sigma * sq * xi[n].numpy()
        states.append(x)
    assert close(traj.states, np.stack(states[::4]))


SCHEMES = sorted(SPLITTINGS)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_seed_rules(scheme):
    """Same int seed: bit-identical, seed recorded; pre-drawn increments are accepted (not with a generator);
    two segments with the generator carried over equal one run (the kept force too)."""
    system = KineticMeanFieldLangevin(DoubleWell(), QuadraticInteraction(0.5), friction=2.0, beta=0.3)
    z0 = torch.randn(2, 7, 4, dtype=F64, generator=torch.Generator().manual_seed(5))
    one = simulate(system, z0, t1=1.0, dt=0.05, solver=scheme, generator=11, save_every=5)
    again = simulate(system, z0, t1=1.0, dt=0.05, solver=scheme, generator=11, save_every=5)
    assert one.seed == 11 and torch.equal(one.states, again.states) and one.states.shape == (5, 2, 7, 4)
    path = BrownianIncrements.sample(
        20, (2, 7, 4), 0.05, generator=torch.Generator().manual_seed(11), dtype=F64
    )
    by_path = simulate(system, z0, t1=1.0, dt=0.05, solver=scheme, brownian=path)
    assert by_path.seed is None and not torch.equal(
        by_path.final, one.final
    )  # another draw order: other numbers
    with pytest.raises(ValueError, match="either brownian"):
        simulate(system, z0, t1=1.0, dt=0.05, solver=scheme, brownian=path, generator=11)
    g = torch.Generator().manual_seed(11)
    half = simulate(system, z0, t1=0.5, dt=0.05, solver=scheme, generator=g).final
    rest = simulate(system, half, t0=0.5, t1=1.0, dt=0.05, solver=scheme, generator=g).final
    assert torch.equal(rest, one.final)
    assert torch.equal(
        z0, torch.randn(2, 7, 4, dtype=F64, generator=torch.Generator().manual_seed(5))
    )  # x0 untouched


def test_first_order_form_under_torchsde_and_euler():
    """torchsde's srk and heun and the native Euler–Maruyama integrate the first-order (x, v) form; at a fine
    step they agree pathwise with BAOAB on the same increments (the W_v slot), and Euler–Maruyama's O(h)
    stationary bias on the harmonic oscillator is seen where BAOAB's position law is exact."""
    system = KineticMeanFieldLangevin(Quadratic(1.0), QuadraticInteraction(1.0), friction=1.0, beta=0.5)
    z0 = torch.randn(2, 6, 2, dtype=F64, generator=torch.Generator().manual_seed(2))
    path = BrownianIncrements.sample(
        400, (2, 6, 2), 0.0025, generator=torch.Generator().manual_seed(3), dtype=F64, levy_area=True
    )
    ref = simulate(system, z0, t1=1.0, dt=0.0025, solver="baoab", brownian=path).final
    for name in ("srk", "heun", "euler", "torchsde_euler"):
        z = simulate(system, z0, t1=1.0, dt=0.0025, solver=name, brownian=path).final
        assert float((z - ref).abs().max()) < 0.01, name  # measured 5e-4 (heun) … 4e-3 (euler)
    other = BrownianIncrements.sample(
        400, (2, 6, 2), 0.0025, generator=torch.Generator().manual_seed(4), dtype=F64
    )
    assert (
        float(
            (simulate(system, z0, t1=1.0, dt=0.0025, solver="baoab", brownian=other).final - ref).abs().max()
        )
        > 0.1
    )


def test_bad_input_in_simulate():
    system = KineticMeanFieldLangevin(Quadratic(), friction=1.0, beta=1.0)
    with pytest.raises(ValueError, match="2d"):
        simulate(system, torch.zeros(1, 3, 3), t1=1.0, dt=0.1, solver="baoab", generator=0)
    with pytest.raises(ValueError, match="KineticMeanFieldLangevin"):
        simulate(
            MeanFieldLangevin(Quadratic()), torch.zeros(1, 3, 2), t1=1.0, dt=0.1, solver="baoab", generator=0
        )
    with pytest.raises(ValueError, match="Gaussian"):
        simulate(
            system, torch.zeros(1, 3, 2), t1=1.0, dt=0.1, solver="aboba", generator=0, noise="rademacher"
        )
    with pytest.raises(ValueError, match="shape"):
        path = BrownianIncrements.sample(10, (1, 3, 1), 0.1, generator=torch.Generator().manual_seed(0))
        simulate(system, torch.zeros(1, 3, 2), t1=1.0, dt=0.1, solver="obabo", brownian=path)


A, K, BETA = 1.0, 2.0, 0.5


def _ar1_variance(rho: float, v0: float, q: float, n: int) -> float:
    """Variance after n steps of v ← ρ²v + q from v0."""
    return rho ** (2 * n) * v0 + q * (1 - rho ** (2 * n)) / (1 - rho**2)


def chain_variance(M: int, eta: float, n: int, s0: float) -> float:
    """Exact Var(x_i) of the EM particle chain after n steps from i.i.d. N(·, s0) particles."""
    centre = _ar1_variance(1 - eta * A, s0 / M, 2 * BETA * eta / M, n)
    spread = _ar1_variance(1 - eta * (A + K), s0 * (M - 1) / M, 2 * BETA * eta * (M - 1) / M, n)
    return centre + spread


def _particle_variance(x: torch.Tensor) -> Estimate:
    """Var(x_i) for mean-zero particles: per-replica mean of x_i² (replicas are independent)."""
    return mean_se(x.square().mean(dim=(1, 2)))


def _system(k=K):
    return MeanFieldLangevin(Quadratic(A), QuadraticInteraction(k), beta=BETA)


@pytest.mark.parametrize("M, B", [(2, 40_000), (10, 10_000)])
def test_finite_m_excess_variance(M, B):
    """Stationary Var(x_i) = s∞ + c, c = βk/(a(a+k)M), at two M.

    Compared with the exact EM-chain value; SE ≈ 0.3 % of s∞ (detects ≈ 1.5 %); c is 25 % (M=2) and
    5 % (M=10) of s∞. Negative controls: s∞ alone (no finite-M excess) and the chain without the
    interaction (k = 0) are rejected.
    """
    eta, n = 0.02, 400  # (1 − ηa)^{2n} = 0.98^800 ≈ 1e-7: stationary
    x0 = torch.zeros(B, M, 1, dtype=torch.float64)
    x = simulate(_system(), x0, t1=n * eta, dt=eta, generator=torch.Generator().manual_seed(M)).final
    est = _particle_variance(x)
    s_inf, c = BETA / (A + K), BETA * K / (A * (A + K) * M)
    exact = chain_variance(M, eta, n, 0.0)
    assert est.agrees(exact), (est, exact)
    assert abs(exact - (s_inf + c)) < eta * (A + K) * (s_inf + c)  # = the continuous s∞ + c up to O(η)
    assert not est.agrees(chain_variance(10**9, eta, n, 0.0))  # negative control: no excess (M → ∞)
    assert not est.agrees(BETA / A / (1 - eta * A / 2))  # negative control: interaction dropped (k = 0)


def test_mean_field_limit_mean_and_variance_over_time():
    """M = 1000, B = 100: mean m0·e^{−at} and variance s∞ + (s0 − s∞)e^{−2(a+k)t} at t = 0.25, 0.5, 1.

    Tolerance z·SE plus the exact difference between the EM chain (η = 0.002) and the limit (finite-M
    excess included), which is < 0.3 % of the variance; SE ≈ 0.5 %. Negative control: the law of the
    system without interaction (rate 2a, limit β/a) is rejected.
    """
    M, B, eta, m0, s0 = 1000, 100, 0.002, 1.0, 2.0
    gen = torch.Generator().manual_seed(7)
    x0 = m0 + math.sqrt(s0) * torch.randn(B, M, 1, generator=gen, dtype=torch.float64)
    traj = simulate(_system(), x0, t1=1.0, dt=eta, save_every=125, generator=gen)
    s_inf = BETA / (A + K)
    for t, n, x in zip(traj.times.tolist(), traj.steps.tolist(), traj.states):
        if n == 0:
            continue
        mean = mean_se(x.mean(dim=(1, 2)))
        assert mean.agrees(m0 * math.exp(-A * t), bias=abs((1 - eta * A) ** n - math.exp(-A * t)) * m0)
        m_chain = m0 * (1 - eta * A) ** n
        var = mean_se((x - m_chain).square().mean(dim=(1, 2)))
        limit = s_inf + (s0 - s_inf) * math.exp(-2 * (A + K) * t)
        bias = abs(chain_variance(M, eta, n, s0) - limit)
        assert var.agrees(limit, bias=bias), (t, var, limit)
        no_interaction = BETA / A + (s0 - BETA / A) * math.exp(-2 * A * t)
        assert not var.agrees(no_interaction, bias=bias)


sim_mod = importlib.import_module(
    "meanfield.stepping.simulate"
)  # the module (the package exports the function)


def cloud_2(B=2, M=5, d=2, seed=0, dtype=F64, scale=1.0):
    """A seeded ``(B, M, d)`` state."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(B, M, d, generator=g, dtype=F64)).to(dtype)


def close_2(actual, expected, rtol=1e-10, atol=1e-12):
    """``actual`` (a tensor or array) equals ``expected`` within the tolerances (float64 comparison)."""
    a = actual.detach().double().numpy() if torch.is_tensor(actual) else np.asarray(actual, dtype=np.float64)
    e = expected.detach().double().numpy() if torch.is_tensor(expected) else np.asarray(expected, np.float64)
    return a.shape == e.shape and np.allclose(a, e, rtol=rtol, atol=atol)


def hand_euler(x0, drift, sigma, xis, t0, dt):
    """``x_{n+1} = x_n + dt·b(t_n, x_n) + σ(t_n)·sqrt(dt)·ξ_n`` (numpy; ``sigma`` a function of t)."""
    x, states = np.array(x0, dtype=np.float64), []
    states.append(x.copy())
    for n, xi in enumerate(xis):
        t = t0 + n * dt
        x = x + dt * drift(t, x) + sigma(t) * math.sqrt(dt) * xi
        states.append(x.copy())
    return states


def exploding(t0, dt, jump):
    """Deterministic (σ = 0) dynamics from ``x0 = 1``: still for steps 0–2, ``x ← (1 + jump)x`` at step 3,
    ``x ← x + dt·(x·∞) = ∞`` at step 4. So the state is finite up to step 4 (``1 + jump``) and first non-finite
    at step 5."""

    def drift(t, x):
        n = round((t - t0) / dt)
        if n == 3:
            return x * (jump / dt)
        if n >= 4:
            return x * math.inf
        return torch.zeros_like(x)

    return SDE(drift, lambda t, x: 0.0, noise="additive")


class _HintSpy(NoiseSource):
    """A noise source that accepts prefetch hints and records them; ``increment(n, s) = s·ξ_n`` from a table."""

    def __init__(self, xi, dt):
        super().__init__(tuple(xi.shape[1:]), dt)
        self.xi, self.asked, self.hints = xi, [], []

    @property
    def prefetches(self):
        return True

    def will_prefetch(self, n):
        self.asked.append(n)
        return True

    def prefetch(self, n, scale=1.0):
        self.hints.append((n, scale))

    def increment(self, n, scale=1.0):
        return self.xi[n] * scale


def test_one_euler_step_is_theta_minus_eta_grad_plus_sqrt_2_beta_eta_xi():
    """One step of ``simulate`` on ``MeanFieldLangevin(Quadratic(a), beta)`` with pre-drawn increments
    ``dW = sqrt(η)·ξ``: ``θ − η·aθ + sqrt(2βη)·ξ`` (numpy). Negative control: the step without the noise."""
    a, beta, eta = 1.5, 0.3, 0.01
    x0 = cloud_2(2, 4, 2, seed=25)
    dW = cloud_2(2, 4, 2, seed=26)[None] * math.sqrt(eta)  # (1, B, M, d)
    traj = simulate(
        MeanFieldLangevin(Quadratic(a), beta=beta), x0, t1=eta, dt=eta, brownian=BrownianIncrements(dW, eta)
    )
    xi = dW[0].numpy() / math.sqrt(eta)
    expected = x0.numpy() - eta * a * x0.numpy() + math.sqrt(2 * beta * eta) * xi
    assert close_2(traj.final, expected)
    assert not close_2(traj.final, x0.numpy() - eta * a * x0.numpy())


def test_simulate_with_a_seed_is_the_hand_loop_on_the_seeded_draws():
    """``simulate(..., generator=7)``: the saved states are the hand Euler loop driven by ``ξ_n`` drawn in
    order from ``torch.Generator().manual_seed(7)``; times ``t0 + n·dt``, steps, ``dt``, the solver's name and
    the seed are recorded as given."""
    a, beta, t0, dt = 0.8, 0.2, 0.5, 0.25
    x0 = cloud_2(2, 4, 2, seed=27)
    traj = simulate(
        MeanFieldLangevin(Quadratic(a), beta=beta),
        x0,
        t0=t0,
        t1=t0 + 6 * dt,
        dt=dt,
        save_every=2,
        generator=7,
    )
    g = torch.Generator().manual_seed(7)
    xis = [torch.empty(2, 4, 2, dtype=F64).normal_(0.0, 1.0, generator=g).numpy() for _ in range(6)]
    states = hand_euler(x0.numpy(), lambda t, x: -a * x, lambda t: math.sqrt(2 * beta), xis, t0, dt)
    assert close_2(traj.states, np.stack(states[::2]), rtol=1e-12, atol=1e-13)
    assert torch.equal(traj.steps, torch.tensor([0, 2, 4, 6]))
    assert close_2(traj.times, [0.5, 1.0, 1.5, 2.0])
    assert (traj.dt, traj.solver, traj.seed) == (0.25, "euler", 7)


def test_simulate_refusals_name_the_argument():
    """Bad arguments are refused with their messages: a 2-D ``x0`` (the layout named), more than 2^53 steps,
    a ``brownian`` that is not a noise source (its type named)."""
    system = MeanFieldLangevin(Quadratic())
    x0 = cloud_2()
    with pytest.raises(
        ValueError,
        match=r"^x0 must have shape \(B, M, d\): replicas, particles, dimensions \(use x0\[None\] for one "
        r"replica\) \(3 dimensions\), got shape \(5, 2\)$",
    ):
        simulate(system, x0[0], t1=1.0, dt=0.5)
    with pytest.raises(
        ValueError, match=r"steps: more than 2\^53, where the step times t0 \+ n·dt are no longer"
    ):
        simulate(system, x0, t1=1.0, dt=1e-17)
    with pytest.raises(
        TypeError, match=r"^brownian must be a meanfield\.stepping\.brownian\.BrownianIncrements .*got str$"
    ):
        simulate(system, x0, t1=1.0, dt=0.5, brownian="increments")


def test_rademacher_noise_moves_every_coordinate_by_exactly_sigma_sqrt_dt():
    """``noise="rademacher"`` with Euler–Maruyama: with no drift, one step moves every coordinate by exactly
    ``±sqrt(2β)·sqrt(dt)``, both signs occurring (the ±1 increments)."""
    x0 = cloud_2(2, 8, 2, seed=28)
    traj = simulate(
        MeanFieldLangevin(Quadratic(0.0), beta=0.5), x0, t1=0.25, dt=0.25, noise="rademacher", generator=1
    )
    step = (traj.final - x0).numpy()
    assert np.allclose(np.abs(step), 0.5, rtol=1e-14)
    assert (step > 0).any() and (step < 0).any()


def test_progress_bar_is_labelled_with_the_solver(capsys):
    """``progress=True`` shows a bar labelled ``simulate[euler]`` on stderr."""
    simulate(MeanFieldLangevin(Quadratic()), cloud_2(), t1=0.5, dt=0.25, generator=0, progress=True)
    assert "simulate[euler]" in capsys.readouterr().err


@pytest.mark.parametrize("check_every", [64, 2], ids=["before_the_first_check", "after_checks"])
def test_a_blow_up_is_traced_to_its_first_step_with_blow_up_advice(check_every):
    """A state that explodes at step 5 (hand-computed: ``exploding``) raises ``NonFiniteStateError`` naming
    step 5 at ``t = t0 + 5dt``, the last finite step 4, and the blow-up advice (it grew to 1e200 from 1),
    whether the failure lies before the first check stop or after several; the trajectory keeps ``x0``."""
    t0, dt = 1.0, 0.5
    x0 = torch.ones(2, 3, 1, dtype=F64)
    with pytest.raises(NonFiniteStateError) as info:
        simulate(
            exploding(t0, dt, 1e200 - 1),
            x0,
            t0=t0,
            t1=t0 + 10 * dt,
            dt=dt,
            generator=0,
            check_every=check_every,
        )
    error = info.value
    assert (error.step, error.last_finite_step, error.time) == (5, 4, t0 + 5 * dt)
    assert "at step 5 (t = 3.5), the first non-finite step; it was finite at step 4 (t = 3)" in str(error)
    assert "The state grew to |x| = 1e+200 by step 4 (it started at 1)" in str(error)
    assert torch.equal(error.trajectory.states, x0[None])


def test_a_state_just_past_the_growth_threshold_is_called_a_blow_up():
    """``GROWTH = 1e8`` times ``max(1, max|x0|)``: from ``x0 = 1``, a state of 1.5e8 before the non-finite
    step is a blow-up (not "a singular drift", although the drift there is infinite too)."""
    t0, dt = 0.0, 0.5
    with pytest.raises(
        NonFiniteStateError, match=r"The state grew to \|x\| = 1\.5e\+08 by step 4 \(it started at 1\)"
    ):
        simulate(exploding(t0, dt, 1.5e8 - 1), torch.ones(1, 2, 1, dtype=F64), t1=5.0, dt=dt, generator=0)


def test_a_source_that_cannot_be_replayed_names_the_bracketing_stops():
    """Noise from a source ``simulate`` cannot replay (a subclass of ``GaussianNoise``): the error names the
    check stop where it was found, ``by step 6 (t = t0 + 6dt = 4)``, and the last finite stop 4."""

    class Drawn(GaussianNoise):
        pass

    t0, dt = 1.0, 0.5
    source = Drawn((2, 3, 1), dt, torch.Generator().manual_seed(0), F64, "cpu")
    with pytest.raises(NonFiniteStateError) as info:
        simulate(
            exploding(t0, dt, 1e200),
            torch.ones(2, 3, 1, dtype=F64),
            t0=t0,
            t1=6.0,
            dt=dt,
            brownian=source,
            check_every=2,
        )
    assert (info.value.step, info.value.last_finite_step) == (6, 4)
    assert "by step 6 (t = 4); it was finite at step 4 (t = 3)" in str(info.value)


def test_lazy_checks_of_an_accelerator_find_the_same_first_step(monkeypatch):
    """With the finiteness flags read lazily (as on an accelerator: the set of eagerly checked device types
    emptied), a finite run equals the eager one, and the blow-up is found at the first check stop after it
    (``found when checked after step 6``) and traced to step 5."""
    monkeypatch.setattr(sim_mod, "_EAGER_CHECKS", frozenset())
    system = MeanFieldLangevin(Quadratic(0.7), beta=0.2)
    x0 = cloud_2(2, 4, 2, seed=29)
    g = torch.Generator().manual_seed(3)
    xis = [torch.empty(2, 4, 2, dtype=F64).normal_(0.0, 1.0, generator=g).numpy() for _ in range(5)]
    expected = hand_euler(x0.numpy(), lambda t, x: -0.7 * x, lambda t: math.sqrt(0.4), xis, 0.0, 0.1)
    traj = simulate(system, x0, t1=0.5, dt=0.1, generator=3, check_every=2, save_every=1)
    assert close_2(traj.states, np.stack(expected), rtol=1e-12, atol=1e-13)
    t0, dt = 1.0, 0.5
    with pytest.raises(NonFiniteStateError) as info:
        simulate(
            exploding(t0, dt, 1e200),
            torch.ones(2, 3, 1, dtype=F64),
            t0=t0,
            t1=6.0,
            dt=dt,
            generator=0,
            check_every=2,
        )
    assert (info.value.step, info.value.last_finite_step) == (5, 4)
    assert "(found when checked after step 6) at step 5" in str(info.value)


def test_euler_hints_the_next_step_and_its_scale_to_a_prefetching_source():
    """Additive noise with ``σ(t, x) = (1 + t)/sqrt(M)`` (a number): within each segment (saves at 0, 3, 6)
    the stepper hints step ``n + 1`` with its scale ``σ(t_{n+1})·sqrt(dt)`` (hand-computed), never past the
    segment's end; the states are the hand Euler loop on the same ``ξ``."""
    dt, M = 0.25, 4
    xi = cloud_2(6, 2 * M, 1, seed=30).reshape(6, 2, M, 1)
    spy = _HintSpy(xi, dt)
    system = SDE(lambda t, x: -x, lambda t, x: (1.0 + t) / math.sqrt(x.shape[1]), noise="additive")
    x0 = cloud_2(2, M, 1, seed=31)
    traj = simulate(system, x0, t1=6 * dt, dt=dt, brownian=spy, save_every=3)
    assert spy.asked == [1, 2, 4, 5]
    expected_hints = [(n, (1.0 + n * dt) / 2.0 * 0.5) for n in (1, 2, 4, 5)]
    assert [n for n, _ in spy.hints] == [n for n, _ in expected_hints]
    assert np.allclose([s for _, s in spy.hints], [s for _, s in expected_hints], rtol=1e-15)
    states = hand_euler(x0.numpy(), lambda t, x: -x, lambda t: (1.0 + t) / 2.0, xi.numpy(), 0.0, dt)
    assert close_2(traj.states, np.stack(states[::3]))


def test_diagonal_noise_step_and_the_bad_sigma_message():
    """Diagonal noise: ``x + dt·b + σ(t, x)·dW`` elementwise with the pre-drawn ``dW`` (numpy, three steps,
    ``dt = 0.04``); a σ that does not broadcast is refused, naming the allowed and the returned shapes."""
    dt = 0.04
    x0 = cloud_2(2, 3, 2, seed=32)
    dW = cloud_2(3 * 2, 3, 2, seed=33).reshape(3, 2, 3, 2) * math.sqrt(dt)
    system = SDE(lambda t, x: -(1.0 + t) * x, lambda t, x: 0.3 + 0.1 * x**2, noise="diagonal")
    traj = simulate(system, x0, t1=3 * dt, dt=dt, brownian=BrownianIncrements(dW, dt), save_every=1)
    x = x0.numpy()
    for n in range(3):
        x = x + dt * (-(1.0 + n * dt) * x) + (0.3 + 0.1 * x**2) * dW[n].numpy()
        assert close_2(traj.states[n + 1], x)
    bad = SDE(lambda t, x: -x, lambda t, x: torch.ones(5, dtype=F64), noise="diagonal")
    with pytest.raises(
        ValueError,
        match=r"^diffusion\(t, x\) must return σ of shape \(2, 3, 2\) or one that broadcasts to it, got \(5,\)$",
    ):
        simulate(bad, x0, t1=dt, dt=dt, brownian=BrownianIncrements(dW[:1], dt))


def test_general_noise_step_is_sigma_times_dw_per_particle():
    """General noise, ``m = 3`` Brownian motions per particle (M = 4 ≠ m): one step is
    ``x + dt·b + Σ_k σ_{dk} dW_k`` per particle (numpy einsum over the pre-drawn ``dW``)."""
    dt, B, M, d, m = 0.1, 2, 4, 2, 3
    x0 = cloud_2(B, M, d, seed=34)
    S = torch.randn(B, M, d, m, generator=torch.Generator().manual_seed(35), dtype=F64)
    dW = torch.randn(1, B, M, m, generator=torch.Generator().manual_seed(36), dtype=F64) * math.sqrt(dt)
    system = SDE(lambda t, x: -x, lambda t, x: S * (1.0 + x[..., :1, None]), noise="general", brownian_dim=m)
    traj = simulate(system, x0, t1=dt, dt=dt, brownian=BrownianIncrements(dW, dt))
    x = x0.numpy()
    sigma = S.numpy() * (1.0 + x[..., :1, None])
    expected = x - dt * x + np.einsum("bmdk,bmk->bmd", sigma, dW[0].numpy())
    assert close_2(traj.final, expected)


SHAPE = (2, 4, 3)  # (B, M, d)


N_DRAWS = 3000


DT = 0.01


def pairs_of_steps(increments: torch.Tensor) -> torch.Tensor:
    """``(2n, *shape) -> (n, 2·numel)``: steps ``2j`` and ``2j + 1`` side by side."""
    n2 = increments.shape[0] // 2 * 2
    return increments[:n2].reshape(n2 // 2, -1)


class _Recorded:
    """Mix-in: keeps a copy of the noise ``σ·dW`` each Euler move receives (one segment: background draws on)."""

    def euler_update_(self, t, x, dt, noise):
        self.seen.append(noise.clone())
        return super().euler_update_(t, x, dt, noise)


class RecordedSDE(_Recorded, SDE):
    seen: list


class RecordedLangevin(_Recorded, MeanFieldLangevin):
    seen: list


@pytest.mark.parametrize("prefetch", [False, True], ids=["serial", "background draws"])
@pytest.mark.parametrize(
    "kind",
    [
        "SDE additive",
        "SDE diagonal",
        "MeanFieldLangevin fused",
        "MeanFieldLangevin rademacher",
        "torchsde_euler",
        "heun",
        "srk",
    ],
)
def test_the_noise_that_reaches_the_state_is_white(monkeypatch, kind, prefetch):
    """Through ``simulate``: the noise ``σ·sqrt(dt)·ξ_n`` handed to each native Euler move (fused and generic
    moves, in one segment so that the background draws run), or with no drift the state increments of the
    torchsde methods: the ``ξ_n`` are white across entries and consecutive steps."""
    if prefetch:
        if kind in ("torchsde_euler", "heun", "srk"):
            pytest.skip("torchsde steppers do not prefetch")
        monkeypatch.setattr(_background, "OVERLAP_MIN", 0)
    sigma, n = 0.8, 2 * N_DRAWS
    x0 = torch.zeros(SHAPE, dtype=torch.float64)
    noise = "rademacher" if "rademacher" in kind else "gaussian"
    zero = lambda t, x: torch.zeros_like(x)  # noqa: E731
    if kind.startswith("SDE"):
        diffusion = (lambda t, x: sigma) if "additive" in kind else (lambda t, x: torch.full_like(x, sigma))
        system = RecordedSDE(zero, diffusion, noise="additive" if "additive" in kind else "diagonal")
    elif kind.startswith("MeanFieldLangevin"):
        system = RecordedLangevin(Quadratic(0.0), beta=sigma**2 / 2)
    if kind.startswith(("SDE", "MeanFieldLangevin")):
        system.seen = []
        simulate(system, x0, t1=n * DT, dt=DT, generator=3, noise=noise, check_every=10 * n)
        xi = torch.stack(system.seen) / (sigma * math.sqrt(DT))  # (n, B, M, d)
        if prefetch:  # the background draws did run
            assert system.seen and _background.pays(xi[0].numel())
    else:
        system = SDE(zero, lambda t, x: sigma, noise="additive")
        traj = simulate(system, x0, t1=n * DT, dt=DT, save_every=1, generator=3, solver=kind)
        xi = traj.states.diff(dim=0) / (sigma * math.sqrt(DT))  # (n, B, M, d)
    assert xi.shape == (n, *SHAPE)
    if noise == "rademacher":  # σ·sqrt(dt)·(±1)/(σ·sqrt(dt)) rounds at 1e-16: compare the signs
        assert torch.allclose(xi.abs(), torch.ones_like(xi), atol=1e-9)
        xi = xi.sign()
    check = whiteness(pairs_of_steps(xi))
    assert check.passed, check.failures


def cloud_3(B=2, M=9, d=3, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(B, M, d, generator=g, dtype=torch.float64)


CONFINEMENTS = {
    "Quadratic(1.3)": (Quadratic(1.3), ("quadratic", (1.3,))),
    "Quadratic(0)": (Quadratic(0.0), ("quadratic", (0.0,))),
    "DoubleWell": (DoubleWell(), ("double_well", ())),
}


INTERACTIONS = {
    "none": (None, None),
    "QuadraticInteraction(0.7)": (QuadraticInteraction(0.7), ("quadratic", (0.7,))),
    "QuadraticInteraction(-0.4)": (QuadraticInteraction(-0.4), ("quadratic", (-0.4,))),
    "Alignment(0.9)": (Alignment(0.9), ("alignment", (0.9,))),
    "GaussianInteraction(0.8,0.6)": (GaussianInteraction(0.8, 0.6), ("gaussian", (0.8, 0.6))),
    "GaussianInteraction chunked": (
        GaussianInteraction(-1.1, 1.5, max_elements=20),
        ("gaussian", (-1.1, 1.5)),
    ),
    "RadialInteraction soft Coulomb": (
        RadialInteraction(lambda r2: 1 / (1 + r2), lambda r2: -1 / (1 + r2) ** 2, max_elements=7),
        ("soft_coulomb", ()),
    ),
}


PAIRS = [(c, i) for c in CONFINEMENTS for i in INTERACTIONS]


AFFINE = [
    (Quadratic(1.3), None),
    (Quadratic(0.0), QuadraticInteraction(0.7)),
    (Quadratic(2.0), QuadraticInteraction(-0.4)),
    (Quadratic(0.0), None),
]


@pytest.mark.parametrize("c,i", PAIRS)
def test_simulate_generic_and_fused_paths_follow_the_oracle_step_by_step(c, i):
    """One run of ``simulate`` (native Euler, pre-drawn increments) against the recursion
    ``x_{n+1} = x_n + dt·(−∇ME)(x_n) + sqrt(2β_n)·dW_n`` with the autograd drift and a β schedule."""
    beta = Linear(0.5, 0.1, T=0.1)
    system, V, W = system_and_oracle(c, i, beta=beta)
    x0, dt, n = cloud_3(M=7), 0.02, 5
    path = BrownianIncrements.sample(n, tuple(x0.shape), dt, generator=torch.Generator().manual_seed(2))
    run = simulate(system, x0, t1=n * dt, dt=dt, brownian=path, save_every=1).states
    x = x0.clone()
    for step in range(n):
        t = step * dt
        x = x + dt * autograd_drift(V, W, x) + math.sqrt(2 * beta(t)) * path.increments[step]
        assert torch.allclose(run[step + 1], x, rtol=1e-10, atol=1e-12), f"step {step + 1}"


@pytest.mark.parametrize("conf,inter", AFFINE)
@pytest.mark.parametrize("beta", [0.3, Linear(1.0, 0.0, T=0.1)])
@pytest.mark.parametrize("projection", [None, Sphere()])
def test_fused_affine_path_equals_the_generic_path(conf, inter, beta, projection):
    """Oracle: the same system as an :class:`SDE` (generic path only) with the same increments, over 8 steps
    of ``simulate``; and one fused move against ``ParticleSystem.euler_update_``."""
    system = MeanFieldLangevin(conf, inter, beta=beta, projection=projection)
    assert system._affine  # these are the systems with a fused move
    x0, dt, n = cloud_3(M=11), 0.01, 8
    noise = cloud_3(M=11, seed=3)
    generic = ParticleSystem.euler_update_(system, 0.0, x0.clone(), dt, noise)
    assert torch.allclose(system.euler_update_(0.0, x0.clone(), dt, noise), generic, rtol=1e-12, atol=1e-13)
    as_sde = SDE(
        system.drift,
        lambda t, x: system.diffusion(t, x),
        noise="additive",
        projection=projection,
    )
    path = BrownianIncrements.sample(n, tuple(x0.shape), dt, generator=torch.Generator().manual_seed(4))
    fused = simulate(system, x0, t1=n * dt, dt=dt, brownian=path, save_every=1).states
    slow = simulate(as_sde, x0, t1=n * dt, dt=dt, brownian=path, save_every=1).states
    assert torch.allclose(fused, slow, rtol=1e-10, atol=1e-12)
    # negative control: the other sign of the interaction (or of the confinement) is seen
    k = inter.k if inter is not None else 0.0
    wrong = MeanFieldLangevin(Quadratic(conf.a + 0.5), QuadraticInteraction(-k - 0.5), beta=beta)
    other = simulate(wrong, x0, t1=n * dt, dt=dt, brownian=path, save_every=1).states
    assert not torch.allclose(other, slow, rtol=1e-6, atol=1e-8)


B, M, D = 4, 30, 2


A_2 = torch.tensor([0.5, 1.0, 2.0, 3.5], dtype=F64)


K_2 = torch.tensor([-0.3, 0.0, 0.7, 1.2], dtype=F64)


BETA_2 = torch.tensor([0.05, 0.2, 0.5, 1.0], dtype=F64)


def state(B=B, M=M, d=D, seed=0, dtype=F64):
    return torch.randn(B, M, d, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_a_generator_drawn_batched_run_is_reproducible_and_its_replicas_differ():
    system = MeanFieldLangevin(Quadratic(A_2), Alignment(K_2), beta=BETA_2)
    a = simulate(system, state(), t1=0.2, dt=0.01, generator=np.int64(3)).final
    b = simulate(system, state(), t1=0.2, dt=0.01, generator=3).final
    assert torch.equal(a, b)


def test_ou_stationary_variance_per_replica_is_the_exact_chain_law():
    """V = a/2·x², independent particles, x0 = 0: the Euler chain x' = (1 − ηa)x + sqrt(2βη)ξ has
    Var_n = β/(a(1 − ηa/2))·(1 − (1 − ηa)^{2n}) exactly, per replica with its own a and β (at ηa ≤ 0.1
    the continuous β/a differs by up to 5 %, beyond this test's tolerance at a = 4). Tolerance 5 SE of a
    variance from N = M·d draws (SE = Var·sqrt(2/N)): the smallest detectable error is ≈ 7 %."""
    B, M, d, eta, n = 8, 4000, 1, 0.025, 400
    a = torch.linspace(4.0, 0.5, B, dtype=F64)
    beta = torch.linspace(0.2, 1.5, B, dtype=F64)  # β/a from 0.05 to 3
    x = simulate(
        MeanFieldLangevin(Quadratic(a), beta=beta),
        torch.zeros(B, M, d, dtype=F64),
        t1=n * eta,
        dt=eta,
        generator=11,
    ).final  # (B, M, d)
    var = x.square().mean((1, 2))  # (B,) the mean is 0 exactly in law
    exact = beta / (a * (1 - eta * a / 2)) * (1 - (1 - eta * a) ** (2 * n))  # (B,)
    se = exact * math.sqrt(2 / (M * d))
    assert torch.all((var - exact).abs() < 5 * se), (var, exact)
    # negative control: the values of the reversed grid (another replica's law) are far outside
    swapped = exact.flip(0)
    assert torch.all((var - swapped).abs()[[0, 1, -2, -1]] > 5 * se[[0, 1, -2, -1]])


def test_a_per_replica_count_that_is_not_b_is_refused_before_the_first_step():
    system = MeanFieldLangevin(Quadratic(torch.ones(3)), Alignment(torch.ones(4)), beta=0.1)
    with pytest.raises(ValueError, match=r"confinement a has 3 per-replica values, but the state has B = 4"):
        simulate(system, state(B=4), t1=0.1, dt=0.01, generator=0)
    with pytest.raises(ValueError, match=r"beta has 2 per-replica values, but the state has B = 4"):
        simulate(MeanFieldLangevin(Quadratic(), beta=torch.ones(2)), state(B=4), t1=0.1, dt=0.01, generator=0)
    with pytest.raises(
        ValueError, match=r"has 5 per-replica values, but the state has B = 4"
    ):  # in a schedule
        simulate(
            MeanFieldLangevin(Quadratic(), beta=Cosine(torch.ones(5), 0.1, 1.0)),
            state(B=4),
            t1=0.1,
            dt=0.01,
            generator=0,
        )


DT_2 = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_a_trajectory_sampler_gives_series_per_replicate_at_the_saved_times():
    """``sample`` returns the trajectory of ``simulate``; an observable is evaluated at every saved state.

    The deterministic flow ``dx = −a x dt`` (β = 0) from x0 = 1: EM gives ``x_n = (1 − a dt)^n`` exactly, so
    the series ``mean`` is that at each saved time, for every replicate and M (tolerance 1e-12)."""
    a, dt = 0.5, 0.1
    system = mf.MeanFieldLangevin(Quadratic(a), QuadraticInteraction(0.0), beta=0.0)

    def sample(M, reps):
        x0 = torch.ones(reps, M, 1, dtype=DT_2) + 1e-3 * torch.rand(reps, M, 1, generator=gen(M), dtype=DT_2)
        return mf.simulate(system, x0, t1=1.0, dt=dt, save_every=5, generator=0)

    law = Uniform(0.0, 2.0)
    study = convergence_in_m(sample, [4, 8], reps=3, reference=law, generator=0, progress=False,
                             observables={"mean": lambda x: x.mean((1, 2))})  # fmt: skip
    assert study.times.tolist() == pytest.approx([0.0, 0.5, 1.0])
    assert study.series["mean"].shape == (2, 3, 3)
    exact = torch.tensor([(1 - a * dt) ** n for n in (0, 5, 10)], dtype=DT_2)
    x0_mean = torch.stack(
        [1 + 1e-3 * torch.rand(3, M, 1, generator=gen(M), dtype=DT_2).mean((1, 2)) for M in (4, 8)]
    )
    assert torch.allclose(study.series["mean"], x0_mean[..., None] * exact, atol=1e-12, rtol=0)
    curves = study.curves
    assert curves.keys == ("M", "replicate", "t") and curves.values == ("mean",) and len(curves) == 2 * 3 * 3
    assert curves.rows[4] == {"M": 4, "replicate": 1, "t": 0.5, "mean": float(study.series["mean"][0, 1, 1])}
    table = study.table  # the distance per replicate, and the series' final values
    assert table.columns == ("M", "replicate", "w2_squared", "mean") and len(table) == 6
    assert table.column("w2_squared")[5] == float(study.values[1, 2])
    assert table.column("mean")[5] == float(study.series["mean"][1, 2, -1])


sim_mod_2 = importlib.import_module("meanfield.stepping.simulate")


def cloud_4(B=2, M=4, d=2, seed=0, scale=1.0, dtype=F64):
    """A seeded ``(B, M, d)`` state."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(B, M, d, generator=g, dtype=F64)).to(dtype)


def close_3(actual, expected, rtol=1e-12, atol=1e-13):
    """``actual`` equals ``expected`` in shape and within the tolerances."""
    a = actual.detach().cpu().numpy() if torch.is_tensor(actual) else np.asarray(actual)
    e = expected.detach().cpu().numpy() if torch.is_tensor(expected) else np.asarray(expected)
    return a.shape == e.shape and np.allclose(a, e, rtol=rtol, atol=atol)


def seeded_normals(seed, n, shape):
    """The ``n`` standard normal draws of shape ``shape`` a generator seeded with ``seed`` gives, in order."""
    g = torch.Generator().manual_seed(seed)
    return [torch.empty(shape, dtype=F64).normal_(0.0, 1.0, generator=g).numpy() for _ in range(n)]


def hand_em(x0, drift, sigma, xis, t0, dt):
    """Euler–Maruyama in numpy: ``x ← x + dt·b(t_n, x) + σ(t_n)·sqrt(dt)·ξ_n``; every state, ``x0`` first."""
    xs, x = [x0], x0
    for n, xi in enumerate(xis):
        t = t0 + n * dt
        x = x + dt * drift(t, x) + sigma(t) * math.sqrt(dt) * xi
        xs.append(x)
    return xs


OU = MeanFieldLangevin(Quadratic(0.7), beta=0.2)  # b = −0.7x, σ = sqrt(2·0.2)


def re_num(value):
    """``repr(value)`` escaped for a regular expression."""
    return re.escape(repr(value))


def _system_2(drift, diffusion=lambda t, x: 0.1):
    return SDE(drift, diffusion, noise="additive")


def exploding_2(t0, dt, at=5):
    """σ = 0 dynamics, still up to step ``at − 1`` and ``x·∞`` from step ``at − 1`` on (first non-finite state:
    step ``at``)."""

    def drift(t, x):
        return x * math.inf if round((t - t0) / dt) >= at - 1 else torch.zeros_like(x)

    return SDE(drift, lambda t, x: 0.0, noise="additive")


def counting_force(system):
    """Wrap ``system.force`` to count its calls."""
    calls = []
    real = system.force

    def force(t, x):
        calls.append(t)
        return real(t, x)

    system.force = force
    return calls


class _RefSDE(torch.nn.Module):
    """A hand-written torchsde SDE on flat states: ``b = 0.1t − 0.5y``, diagonal ``σ = 0.3y + 0.2`` (Itô),
    with the hand Stratonovich drift ``b − ½·σ·0.3`` for Stratonovich methods; or additive ``σ = 0.4 + 0.1t``
    as a ``(B, D, D)`` diagonal matrix."""

    def __init__(self, sde_type, noise_type):
        super().__init__()
        self.sde_type, self.noise_type = sde_type, noise_type

    def f(self, t, y):
        b = 0.1 * t - 0.5 * y
        if self.noise_type == "diagonal" and self.sde_type == "stratonovich":
            b = b - 0.5 * (0.3 * y + 0.2) * 0.3
        return b

    def g(self, t, y):
        if self.noise_type == "diagonal":
            return 0.3 * y + 0.2
        return torch.diag_embed(torch.full_like(y, 1.0) * (0.4 + 0.1 * t))


@pytest.mark.parametrize(
    "save_every, steps",
    [(None, [0, 7]), (1, list(range(8))), (3, [0, 3, 6, 7]), (7, [0, 7]), (50, [0, 7])],
    ids=["default", "every", "three", "seven", "more_than_n"],
)
def test_saved_states_times_and_fields_are_the_hand_loop_at_the_save_grid(save_every, steps):
    """Seven steps of ``dt = 0.1`` from ``t0 = 0.5`` with ``generator=5``: the states saved at
    ``range(0, 7, save_every) + [7]`` equal the numpy Euler–Maruyama loop on the seeded draws at those steps;
    ``times = t0 + steps·dt``, ``steps`` int64, ``len``, ``final``, ``dt``, ``solver`` and ``seed`` are the
    documented ones. Negative control: the loop with the draws of seed 6 does not match."""
    x0 = cloud_4(2, 4, 2, seed=1)
    traj = simulate(OU, x0, t0=0.5, t1=1.2, dt=0.1, generator=5, save_every=save_every)
    xs = hand_em(
        x0.numpy(), lambda t, x: -0.7 * x, lambda t: math.sqrt(0.4), seeded_normals(5, 7, x0.shape), 0.5, 0.1
    )
    assert traj.steps.tolist() == steps and traj.steps.dtype == torch.int64
    assert close_3(traj.times, 0.5 + 0.1 * np.array(steps, dtype=float), rtol=0, atol=1e-15)
    assert traj.times.dtype == F64 and len(traj) == len(steps)
    assert close_3(traj.states, np.stack([xs[k] for k in steps]))
    assert traj.final is not None and torch.equal(traj.final, traj.states[-1])
    assert (traj.dt, traj.solver, traj.seed) == (0.1, "euler", 5)
    wrong = hand_em(
        x0.numpy(), lambda t, x: -0.7 * x, lambda t: math.sqrt(0.4), seeded_normals(6, 7, x0.shape), 0.5, 0.1
    )
    assert not close_3(traj.final, wrong[-1])


def test_check_every_and_save_every_do_not_change_the_numbers():
    """The stops (saves and checks) split the run into segments but not its numbers: the final state is bit
    for bit the same for ``check_every`` 1, 3, 64 and ``save_every`` 1, 2, None."""
    x0 = cloud_4(2, 3, 2, seed=2)
    ref = simulate(OU, x0, t1=1.0, dt=0.1, generator=9).final
    for check_every in (1, 3, 64):
        for save_every in (1, 2, None):
            got = simulate(
                OU, x0, t1=1.0, dt=0.1, generator=9, check_every=check_every, save_every=save_every
            )
            assert torch.equal(got.final, ref)


def test_the_drift_is_read_at_t0_plus_n_dt():
    """Deterministic ``dx = (t − x) dt`` (σ = 0) from ``t0 = 2``: the run is the hand loop
    ``x ← x + dt·(t_n − x)`` with ``t_n = 2 + n·dt``. Negative control: the loop with ``t_n = n·dt``."""
    system = SDE(lambda t, x: t - x, lambda t, x: 0.0, noise="additive")
    x0 = cloud_4(1, 2, 1, seed=3)
    traj = simulate(system, x0, t0=2.0, t1=2.5, dt=0.125, generator=0, save_every=1)
    xs = hand_em(x0.numpy(), lambda t, x: t - x, lambda t: 0.0, [0 * x0.numpy()] * 4, 2.0, 0.125)
    assert close_3(traj.states, np.stack(xs))
    off = hand_em(x0.numpy(), lambda t, x: t - x, lambda t: 0.0, [0 * x0.numpy()] * 4, 0.0, 0.125)
    assert not close_3(traj.final, off[-1])


def test_seed_is_recorded_only_when_simulate_made_the_generator():
    """``generator=None`` records a fresh seed that repeats the run; a ``torch.Generator`` records ``None``
    (and draws from it: the run equals the seeded one), a numpy integer seed is recorded as it is, and
    ``brownian`` records ``None``."""
    x0 = cloud_4(1, 3, 1, seed=4)
    fresh = simulate(OU, x0, t1=0.3, dt=0.1)
    assert isinstance(fresh.seed, int)
    assert torch.equal(simulate(OU, x0, t1=0.3, dt=0.1, generator=fresh.seed).final, fresh.final)
    given = simulate(OU, x0, t1=0.3, dt=0.1, generator=torch.Generator().manual_seed(11))
    assert given.seed is None
    assert torch.equal(given.final, simulate(OU, x0, t1=0.3, dt=0.1, generator=11).final)
    assert simulate(OU, x0, t1=0.3, dt=0.1, generator=np.int64(11)).seed == 11
    dW = torch.zeros(3, 1, 3, 1, dtype=F64)
    assert simulate(OU, x0, t1=0.3, dt=0.1, brownian=BrownianIncrements(dW, 0.1)).seed is None


def test_float32_runs_keep_the_dtype_and_leave_x0_alone():
    """A float32 ``x0``: states and times are float32, ``x0`` is not modified, the first saved state is
    ``x0`` itself (bitwise)."""
    x0 = cloud_4(1, 3, 2, seed=5, dtype=torch.float32)
    before = x0.clone()
    traj = simulate(OU, x0, t1=0.3, dt=0.1, generator=0, save_every=1)
    assert traj.states.dtype == torch.float32 and traj.times.dtype == torch.float32
    assert torch.equal(x0, before) and torch.equal(traj.states[0], before)


def test_a_noise_source_that_is_not_pre_drawn_is_used_as_given():
    """``brownian=GaussianNoise(...)`` (a source that draws as it goes; no step count to check) drives the run:
    it equals the run with ``generator`` seeded alike, and records no seed."""
    x0 = cloud_4(2, 3, 1, seed=6)
    source = GaussianNoise((2, 3, 1), 0.1, torch.Generator().manual_seed(13), F64, "cpu")
    traj = simulate(OU, x0, t1=0.5, dt=0.1, brownian=source)
    assert traj.seed is None
    assert torch.equal(traj.final, simulate(OU, x0, t1=0.5, dt=0.1, generator=13).final)


def test_pre_drawn_increments_are_read_by_step():
    """``BrownianIncrements`` with ``dW_n = n + 1`` and no drift (``Quadratic(0)``): the saved states are
    ``x0 + σ·Σ_{k<n} (k + 1)``, ``σ = sqrt(2β)``."""
    dW = torch.arange(1.0, 5.0, dtype=F64).reshape(4, 1, 1, 1).expand(4, 1, 2, 1).contiguous()
    system = MeanFieldLangevin(Quadratic(0.0), beta=0.5)
    x0 = torch.zeros(1, 2, 1, dtype=F64)
    traj = simulate(system, x0, t1=1.0, dt=0.25, brownian=BrownianIncrements(dW, 0.25), save_every=1)
    assert close_3(traj.states[:, 0, 0, 0], [0.0, 1.0, 3.0, 6.0, 10.0])


def test_progress_bar_counts_the_steps_only_when_asked(capsys):
    """``progress=True`` writes ``simulate[euler]`` and ``4/4`` steps (unit ``step``) to stderr; the default
    writes nothing."""
    simulate(OU, cloud_4(1, 2, 1), t1=1.0, dt=0.25, generator=0, progress=True)  # one segment of 4 steps
    err = capsys.readouterr().err
    assert "simulate[euler]" in err and "4/4" in err
    assert re.search(r"[\d?]step/s|s/step", err)
    simulate(OU, cloud_4(1, 2, 1), t1=1.0, dt=0.25, generator=0)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "t1, dt, n",
    [(0.3, 0.1, 3), (1.0000005, 0.001, 1000), (0.1 * (1 + 5e-7), 0.1, 1)],
    ids=["rounding", "within_1e-6_of_n", "within_1e-6_of_1"],
)
def test_a_whole_number_of_steps_up_to_one_millionth_is_accepted(t1, dt, n):
    """``(t1 − t0)/dt`` within ``1e-6·max(1, n)`` of an integer is that many steps (``0.3/0.1`` in float64 is
    2.9999999999999996)."""
    traj = simulate(MeanFieldLangevin(Quadratic(0.0), beta=0.0), torch.ones(1, 1, 1, dtype=F64), t1=t1, dt=dt)
    assert traj.steps.tolist() == [0, n]


@pytest.mark.parametrize(
    "t1, dt, got",
    [(0.35, 0.1, "3.5"), (0.04, 0.1, "0.4"), (1.000002, 0.001, "1000"), (0.1 * (1 + 1.5e-6), 0.1, "1")],
    ids=["half", "below_one", "past_1e-6_of_n", "past_1e-6_of_1"],
)
def test_a_fractional_number_of_steps_is_refused(t1, dt, got):
    """Past ``1e-6·max(1, n)``, or fewer than one step, is refused naming ``t1 − t0``, ``dt`` and the count."""
    with pytest.raises(
        ValueError,
        match=rf"^t1 − t0 = {re_num(t1)} must be a whole number of steps of dt = {re_num(dt)} \(got {got}\d* steps\)$",
    ):
        simulate(OU, torch.ones(1, 1, 1, dtype=F64), t1=t1, dt=dt, generator=0)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(dt=0.0), ValueError, r"^dt must be > 0, got 0\.0$"),
        (dict(t0=math.nan), ValueError, r"^t0 must be finite, got nan$"),
        (dict(t1=math.inf), ValueError, r"^t1 must be finite, got inf$"),
        (dict(t0=1.0, t1=1.0), ValueError, r"^t1 must be a finite time > t0 = 1\.0, got 1\.0$"),
        (dict(t0=1.0, t1=0.5), ValueError, r"^t1 must be a finite time > t0 = 1\.0, got 0\.5$"),
        (dict(save_every=0), ValueError, r"^save_every must be ≥ 1, got 0$"),
        (dict(save_every=1.5), TypeError, r"^save_every must be an int, got float$"),
        (dict(check_every=0), ValueError, r"^check_every must be ≥ 1, got 0$"),
        (
            dict(noise="uniform"),
            ValueError,
            r"^noise must be one of \['gaussian', 'rademacher'\], got 'uniform'$",
        ),
        (dict(noise=3), ValueError, r"^noise must be one of \['gaussian', 'rademacher'\], got 3$"),
        (dict(solver="rk4"), ValueError, r"^unknown solver 'rk4'; allowed: \["),
        (
            dict(solver="srk", noise="rademacher"),
            ValueError,
            r"^solver 'srk' needs Gaussian increments; noise='rademacher' is for the native Euler–Maruyama "
            r"solver only \(weak order 1\)$",
        ),
        (
            dict(generator=True),
            TypeError,
            r"^generator must be a torch\.Generator, an int seed \(Python or numpy integer\) or None, got bool$",
        ),
    ],
    ids=[
        "dt",
        "t0",
        "t1",
        "t1_eq_t0",
        "t1_lt_t0",
        "save0",
        "save_float",
        "check0",
        "noise",
        "noise_int",
        "solver",
        "rademacher_srk",
        "bool_seed",
    ],
)
def test_bad_arguments_are_refused_with_their_messages(kwargs, error, message):
    """Each bad argument raises its documented error, whose message names it and what is allowed."""
    args = dict(t1=0.2, dt=0.1, generator=0)
    args.update(kwargs)
    with pytest.raises(error, match=message):
        simulate(OU, torch.zeros(1, 2, 1, dtype=F64), **args)


def test_bad_systems_and_states_are_refused_with_their_messages():
    """A system that is not a ``ParticleSystem`` (its type named), an empty ``x0`` (its shape named), a
    non-finite ``x0``; ``system.check_state`` is called on ``x0`` (its error comes out)."""
    x0 = torch.zeros(1, 2, 1, dtype=F64)
    with pytest.raises(
        TypeError,
        match=r"^system must be a meanfield ParticleSystem \(e\.g\. MeanFieldLangevin or SDE\), got function$",
    ):
        simulate(lambda t, x: x, x0, t1=0.2, dt=0.1)
    with pytest.raises(
        ValueError,
        match=r"^x0 must have at least one replica, particle and dimension, got shape \(1, 0, 1\)$",
    ):
        simulate(OU, torch.zeros(1, 0, 1), t1=0.2, dt=0.1)
    with pytest.raises(ValueError, match=r"^x0 has 2 non-finite entries \(NaN or Inf\), the first at index"):
        simulate(OU, torch.full((1, 2, 1), math.nan), t1=0.2, dt=0.1)

    class Picky(SDE):
        def check_state(self, x):
            raise LookupError(f"picky about {tuple(x.shape)}")

    with pytest.raises(LookupError, match=r"^picky about \(1, 2, 1\)$"):
        simulate(Picky(lambda t, x: -x, lambda t, x: 0.1, noise="additive"), x0, t1=0.2, dt=0.1, generator=0)


def test_pre_drawn_increments_that_do_not_fit_are_refused_with_their_messages():
    """``brownian`` with a generator, of another per-step shape, another ``dt``, or another number of steps."""
    x0 = torch.zeros(1, 3, 1, dtype=F64)

    def run(dW, dt=0.1, **kwargs):
        simulate(OU, x0, t1=1.0, dt=0.1, brownian=BrownianIncrements(dW, dt), **kwargs)

    with pytest.raises(
        ValueError, match=r"^give either brownian \(pre-drawn increments\) or generator, not both$"
    ):
        run(torch.zeros(10, 1, 3, 1), generator=0)
    with pytest.raises(
        ValueError,
        match=r"^brownian increments have shape \(1, 2, 1\) per step, the system needs \(1, 3, 1\)$",
    ):
        run(torch.zeros(10, 1, 2, 1))
    with pytest.raises(
        ValueError, match=r"^brownian \(the noise source\) has steps of dt=0\.2; this run needs dt=0\.1$"
    ):
        run(torch.zeros(5, 1, 3, 1), dt=0.2)
    with pytest.raises(
        ValueError, match=r"^brownian holds 9 steps of dt=0\.1; this run needs 10 steps of dt=0\.1$"
    ):
        run(torch.zeros(9, 1, 3, 1))
    run(torch.zeros(10, 1, 3, 1), dt=0.1 * (1 + 5e-10))  # dt equal up to 1e-9 relative is the same grid
    with pytest.raises(ValueError, match=r"^brownian \(the noise source\) has steps of dt=0\.1000000005"):
        run(torch.zeros(10, 1, 3, 1), dt=0.1 * (1 + 5e-9))


def test_more_than_2_to_the_53_steps_is_refused():
    """``1.5·2^53`` steps (between 2^53 and 2^54) are refused naming the count."""
    with pytest.raises(
        ValueError,
        match=r"^\(t1 − t0\)/dt = 1\.35e\+16 steps: more than 2\^53, where the step times t0 \+ n·dt are no "
        r"longer exact in float64; check dt$",
    ):
        simulate(OU, torch.zeros(1, 1, 1, dtype=F64), t1=1.0, dt=1.0 / (1.5 * 2**53), generator=0)


@pytest.mark.parametrize("n", [10, 4095, 4096, 6000], ids=["small", "below_4096", "at_4096", "large"])
def test_all_finite_sees_nan_and_both_infinities_at_any_size(n):
    """``_all_finite`` is a 0-dim bool tensor: ``True`` for finite entries, ``False`` with one NaN, +Inf or
    −Inf at the start, middle or end, on both sides of the 4096-entry switch to ``aminmax``."""
    x = torch.linspace(-1.0, 1.0, n, dtype=F64)
    ok = sim_mod_2._all_finite(x)
    assert ok.dim() == 0 and ok.dtype == torch.bool and bool(ok)
    for bad in (math.nan, math.inf, -math.inf):
        for where in (0, n // 2, n - 1):
            y = x.clone()
            y[where] = bad
            assert not bool(sim_mod_2._all_finite(y))


def test_advice_names_the_cause_seen_at_the_step_before():
    """``_advice``: a state larger than ``1e8·max(1, start)`` is a blow-up (thresholds 1e8 from a start below
    1 and 3e8 from 3); else a non-finite drift is a singular drift, else a non-finite diffusion, else the step
    itself overflowed. A drift or diffusion that raises counts as finite. The messages are exact."""
    finite = _system_2(lambda t, x: -x)
    big = torch.tensor([[[1.5e8]]], dtype=F64)
    assert sim_mod_2._advice(finite, 0.0, big, 7, 0.5).startswith(
        "The state grew to |x| = 1.5e+08 by step 6 (it started at 0.5): the explicit scheme is unstable at "
        "this dt for a stiff or superlinear drift (reduce dt, e.g. below 1/L for a drift of Lipschitz "
        "constant L near the state), or the dynamics blow up (check the sign of the drift: a confinement "
        "must pull inwards)."
    )
    assert sim_mod_2._advice(finite, 0.0, 3.1e8 * torch.ones(1, 1, 1, dtype=F64), 7, 3.0).startswith(
        "The state grew"
    )
    last = sim_mod_2._advice(finite, 0.0, 2.9e8 * torch.ones(1, 1, 1, dtype=F64), 7, 3.0)
    assert last == (
        "The drift and diffusion are finite at step 6 (largest |x| = 2.9e+08), so the step itself overflowed: "
        "reduce dt (the explicit scheme is unstable for a stiff drift), or check the drift."
    )
    x = torch.tensor([[[0.5], [-2.0]]], dtype=F64)
    singular = _system_2(lambda t, x: 1.0 / (x - x))
    assert sim_mod_2._advice(singular, 0.0, x, 3, 1.0) == (
        "The drift b(t, x) is already non-finite at the finite, moderate state of step 2 (largest |x| = 2): a "
        "potential singular where the state is — a pair potential at z = 0 (RadialInteraction leaves out the "
        "self-pair i = j when ψ(0) or ψ'(0) is infinite; pass self_pair=False for a kernel it cannot probe), "
        "two particles at one point of a singular kernel, a log or division at 0 in a custom drift. A smaller "
        "dt will not help: fix the drift or the state."
    )
    bad_sigma = _system_2(lambda t, x: -x, lambda t, x: math.inf)
    sigma_message = (
        "The diffusion σ(t, x) is non-finite at the finite state of step 2: check the temperature β_t or the "
        "diffusion; a smaller dt will not help."
    )
    assert sim_mod_2._advice(bad_sigma, 0.0, x, 3, 1.0) == sigma_message

    def boom(t, x):
        raise ArithmeticError

    assert sim_mod_2._advice(_system_2(boom, lambda t, x: math.inf), 0.0, x, 3, 1.0) == sigma_message
    assert sim_mod_2._advice(_system_2(lambda t, x: -x, boom), 0.0, x, 3, 1.0).startswith(
        "The drift and diffusion are finite at step 2 (largest |x| = 2)"
    )
    assert "(largest |x| = 0)" in sim_mod_2._advice(finite, 0.0, torch.zeros(1, 0, 1, dtype=F64), 3, 1.0)


def test_pre_drawn_increments_are_replayed_to_the_first_non_finite_step():
    """With ``BrownianIncrements`` the failure found at the check after step 6 is traced to step 5 (last
    finite 4) by replaying from the check stop 4; the message counts the non-finite entries found (eager CPU
    checks), names the step and time, and the states saved so far; the trajectory keeps those states."""
    t0, dt = 1.0, 0.5
    x0 = torch.ones(2, 3, 1, dtype=F64)
    source = BrownianIncrements(torch.zeros(10, 2, 3, 1, dtype=F64), dt)
    with pytest.raises(sim_mod_2.NonFiniteStateError) as info:
        simulate(
            exploding_2(t0, dt),
            x0,
            t0=t0,
            t1=t0 + 10 * dt,
            dt=dt,
            brownian=source,
            check_every=4,
            save_every=2,
        )
    e = info.value
    assert (e.step, e.last_finite_step, e.time) == (5, 4, t0 + 5 * dt)
    assert str(e).startswith(
        "the state became non-finite (6 NaN/Inf entries) at step 5 (t = 3.5), the first non-finite step; it "
        "was finite at step 4 (t = 3). The drift b(t, x) is already non-finite"
    )
    assert str(e).endswith("error.trajectory holds the 3 states saved so far.")
    assert e.trajectory.steps.tolist() == [0, 2, 4] and torch.equal(
        e.trajectory.states, x0.expand(3, 2, 3, 1)
    )
    assert torch.equal(x0, torch.ones(2, 3, 1, dtype=F64))


@pytest.mark.parametrize("noise", ["gaussian", "rademacher"])
def test_drawn_noise_is_replayed_from_the_generator_state_at_the_last_check(noise):
    """σ = 1, no drift until the state leaves ``|x| ≤ thr``, then an infinite drift: the first non-finite
    step is one after the first crossing of the hand path (numpy cumulative sums of the seeded draws:
    normals, or ±1 signs read from the same run with a huge threshold), after the check stop 8, so the
    replay must restart the generator exactly at the draw of step 8."""
    dt, shape = 0.25, (1, 4, 1)
    free = SDE(lambda t, x: torch.zeros_like(x), lambda t, x: 1.0, noise="additive")
    path = simulate(
        free, torch.zeros(shape, dtype=F64), t1=20 * dt, dt=dt, generator=31, noise=noise, save_every=1
    )
    size = path.states.abs().amax(dim=(1, 2, 3)).numpy()  # max |x_n|, n = 0..20
    if noise == "gaussian":
        xs = np.cumsum(np.stack(seeded_normals(31, 20, shape)) * math.sqrt(dt), axis=0)
        assert close_3(size[1:], np.abs(xs).max(axis=(1, 2, 3)))
    thr = size[:10].max() + 1e-9  # the first crossing lies past step 9
    cross = int(np.argmax(size > thr))
    assert cross >= 10

    def drift(t, x):
        return torch.full_like(x, math.inf) if float(x.abs().max()) > thr else torch.zeros_like(x)

    with pytest.raises(sim_mod_2.NonFiniteStateError) as info:
        simulate(
            SDE(drift, lambda t, x: 1.0, noise="additive"),
            torch.zeros(shape, dtype=F64),
            t1=20 * dt,
            dt=dt,
            generator=31,
            noise=noise,
            check_every=8,
        )
    assert (info.value.step, info.value.last_finite_step) == (cross + 1, cross)
    assert f"at step {cross + 1} (t = {(cross + 1) * dt:g}), the first non-finite step" in str(info.value)


def test_the_growth_threshold_scales_with_the_starting_size():
    """From ``x0 = 10`` a state of 5e8 (grown ×5e7 at step 3) is below ``1e8·10``: the error at step 5 reads
    the infinite drift at step 4 as a singular drift, not a blow-up; from ``x0 = 1`` the same growth (to
    5e7·1 < 1e8) does too, and ×2e8 (to 2e8) is a blow-up."""
    dt = 0.5

    def grows(factor):
        def drift(t, x):
            n = round(t / dt)
            if n == 3:
                return x * ((factor - 1.0) / dt)
            return x * math.inf if n >= 4 else torch.zeros_like(x)

        return _system_2(drift, lambda t, x: 0.0)

    def message(start, factor):
        with pytest.raises(sim_mod_2.NonFiniteStateError) as info:
            simulate(grows(factor), torch.full((1, 2, 1), start, dtype=F64), t1=5.0, dt=dt, generator=0)
        assert info.value.step == 5
        return str(info.value)

    assert (
        "The drift b(t, x) is already non-finite at the finite, moderate state of step 4 (largest |x| = 5e+08)"
        in message(10.0, 5e7)
    )
    assert "The drift b(t, x) is already non-finite" in message(1.0, 5e7)
    assert "The state grew to |x| = 2e+08 by step 4 (it started at 1)" in message(1.0, 2e8)


def test_a_failure_the_replay_cannot_reproduce_names_the_bracketing_stops():
    """A drift that is infinite only at its first call at step 5 (so the replay from the last check finds
    every step finite) and one whose replay raises: the error falls back to the stops that bracket the
    failure, ``by step 6`` and ``finite at step 4``, with the generic advice."""
    dt = 0.5
    for mode in ("once", "raise"):
        calls = {"bad": 0}

        def drift(t, x, mode=mode, calls=calls):
            if round(t / dt) == 5:
                calls["bad"] += 1
                if calls["bad"] == 1:
                    return x * math.inf
                if mode == "raise":
                    raise ArithmeticError("replay")
            return torch.zeros_like(x)

        with pytest.raises(sim_mod_2.NonFiniteStateError) as info:
            simulate(
                _system_2(drift, lambda t, x: 0.0),
                torch.ones(1, 2, 1, dtype=F64),
                t1=5.0,
                dt=dt,
                generator=0,
                check_every=2,
            )
        e = info.value
        assert (e.step, e.last_finite_step, e.time) == (6, 4, 3.0)
        assert str(e) == (
            "the state became non-finite (2 NaN/Inf entries) by step 6 (t = 3); it was finite at step 4 (t = 2). "
            "Reduce dt if the state grew over many steps; check the drift and diffusion if they can be infinite "
            "or NaN (a singular potential, a division by zero). error.trajectory holds the 1 states saved so far."
        )


def test_lazy_checks_name_the_step_after_which_the_flags_were_read(monkeypatch):
    """With the flags read lazily (as on an accelerator), the message says ``found when checked after step 8``
    (the next check stop), and the error still names step 5; a finite lazy run equals the eager one."""
    monkeypatch.setattr(sim_mod_2, "_EAGER_CHECKS", frozenset())
    x0 = cloud_4(1, 2, 1, seed=7)
    assert torch.equal(
        simulate(OU, x0, t1=1.0, dt=0.1, generator=2, check_every=3).final,
        simulate(OU, x0, t1=1.0, dt=0.1, generator=2).final,
    )
    with pytest.raises(sim_mod_2.NonFiniteStateError) as info:
        simulate(
            exploding_2(0.0, 0.5), torch.ones(1, 2, 1, dtype=F64), t1=6.0, dt=0.5, generator=0, check_every=4
        )
    assert (info.value.step, info.value.last_finite_step) == (5, 4)
    assert str(info.value).startswith(
        "the state became non-finite (found when checked after step 8) at step 5"
    )


def test_lazy_checks_of_a_source_that_cannot_be_replayed_name_the_first_bad_stop(monkeypatch):
    """Lazy flags (as on an accelerator) and a source ``simulate`` cannot replay (a subclass of
    ``GaussianNoise``): of the stops 2, 4, 6, 8 read together at the check stop 8, the first non-finite one
    (6, the state explodes at step 5) is named, with the last finite stop 4 and the 3 states saved before it."""
    monkeypatch.setattr(sim_mod_2, "_EAGER_CHECKS", frozenset())

    class Drawn(GaussianNoise):
        pass

    dt = 0.5
    source = Drawn((1, 2, 1), dt, torch.Generator().manual_seed(0), F64, "cpu")
    with pytest.raises(sim_mod_2.NonFiniteStateError) as info:
        simulate(
            exploding_2(0.0, dt),
            torch.ones(1, 2, 1, dtype=F64),
            t1=6.0,
            dt=dt,
            brownian=source,
            check_every=8,
            save_every=2,
        )
    e = info.value
    assert (e.step, e.last_finite_step, e.time) == (6, 4, 3.0)
    assert str(e).startswith(
        "the state became non-finite (found when checked after step 8) by step 6 (t = 3); it was finite at "
        "step 4 (t = 2)."
    )
    assert str(e).endswith("error.trajectory holds the 3 states saved so far.")
    assert e.trajectory.steps.tolist() == [0, 2, 4]


@pytest.mark.parametrize("scheme, extra", [("baoab", 1), ("obabo", 1), ("aboba", 0)])
def test_the_last_kick_force_is_kept_across_steps_and_segments(scheme, extra):
    """One force evaluation per step, plus the first for BAOAB and OBABO (whose word ends with a kick): ``n +
    1`` (``n`` for ABOBA) also when every step is its own segment (``save_every=1``), with drawn noise and with
    pre-drawn increments; the states of the latter equal the numpy oracle of the splitting on those increments
    (the seeded normals), with the exponential ``e^{−γτ}`` per fraction. (Drawn noise is one draw per O since
    issue 51: ``tests/stepping/solvers/test_splittings.py`` replays it.)"""
    system = KineticMeanFieldLangevin(DoubleWell(), friction=0.7, beta=0.4)
    calls = counting_force(system)
    z0 = pair(cloud_4(1, 3, 1, seed=8), cloud_4(1, 3, 1, seed=9))
    n, h = 5, 0.1
    simulate(system, z0, t1=n * h, dt=h, solver=scheme, generator=4, save_every=1)
    assert len(calls) == n + extra
    calls.clear()
    xis = seeded_normals(4, n, (1, 3, 2))
    path = BrownianIncrements(torch.from_numpy(np.stack(xis)) * math.sqrt(h), h)
    traj = simulate(system, z0, t1=n * h, dt=h, solver=scheme, brownian=path, save_every=1)
    assert len(calls) == n + extra
    x, v, cached = z0[..., :1].numpy(), z0[..., 1:].numpy(), None
    ref = KineticMeanFieldLangevin(DoubleWell(), friction=0.7, beta=0.4)
    for k, xi in enumerate(xis):
        x, v, cached = splitting_step(
            SPLITTINGS[scheme],
            x,
            v,
            xi,
            h,
            0.7,
            0.4,
            lambda q: ref.force(0.0, torch.from_numpy(q)).numpy(),
            cached,
        )
        assert close_3(traj.states[k + 1], np.concatenate([x, v], -1))
    stepper = Splitting(scheme).stepper(system, None, 0.0, h)
    assert stepper._c == {frac: math.exp(-0.7 * frac * h) for _, frac in Splitting(scheme).plan}


def test_zero_temperature_splitting_is_the_deterministic_oracle():
    """At ``β = 0`` the O step is the friction ``v ← e^{−γτ} v`` only: the run equals the oracle with zero
    increments whatever the seed."""
    system = KineticMeanFieldLangevin(Quadratic(1.3), friction=0.9, beta=0.0)
    z0 = pair(cloud_4(1, 2, 1, seed=13), cloud_4(1, 2, 1, seed=14))
    traj = simulate(system, z0, t1=0.6, dt=0.2, solver="obabo", generator=3)
    x, v, cached = z0[..., :1].numpy(), z0[..., 1:].numpy(), None
    for _ in range(3):
        x, v, cached = splitting_step(
            "OBABO", x, v, np.zeros((1, 2, 2)), 0.2, 0.9, 0.0, lambda q: -1.3 * q, cached
        )
    assert close_3(traj.final, np.concatenate([x, v], -1))


def test_a_scheduled_temperature_is_read_at_the_midpoint_of_each_step():
    """``β_t = 0.1 + t`` with BAOAB: each step uses ``β_{t_n + h/2}``, ``t_n = t0 + n·h`` (the numpy oracle with
    that β; why the midpoint: the splitting's module docstring); negative control: the oracle with ``β_{t0}``
    throughout differs."""
    system = KineticMeanFieldLangevin(Quadratic(1.0), friction=0.8, beta=lambda t: 0.1 + t)
    z0 = pair(cloud_4(1, 3, 1, seed=22), cloud_4(1, 3, 1, seed=23))
    t0, h, n = 0.5, 0.25, 4
    xis = seeded_normals(7, n, (1, 3, 2))
    path = BrownianIncrements(
        torch.from_numpy(np.stack(xis)) * math.sqrt(h), h
    )  # drawn noise: test_splitting_noise
    traj = simulate(system, z0, t0=t0, t1=t0 + n * h, dt=h, solver="baoab", brownian=path)

    def oracle(beta_at):
        x, v, cached = z0[..., :1].numpy(), z0[..., 1:].numpy(), None
        for k in range(n):
            x, v, cached = splitting_step("BAOAB", x, v, xis[k], h, 0.8, beta_at(k), lambda q: -q, cached)
        return np.concatenate([x, v], -1)

    assert close_3(traj.final, oracle(lambda k: 0.1 + t0 + (k + 0.5) * h))
    assert not close_3(traj.final, oracle(lambda k: 0.1 + t0))


def test_reversible_heun_started_mid_grid_starts_its_state_at_that_time():
    """A stepper whose first ``run`` starts at step 2 initialises reversible Heun's extra state at ``t0 + 2dt``:
    two steps equal ``torchsde.sdeint`` from ``t0 + 2dt`` on the same Brownian interval (a drift depending on
    ``t`` makes the start time visible)."""
    t0, dt, B, M = 0.5, 0.25, 2, 3
    system = SDE(lambda t, x: 0.1 * t - 0.5 * x, lambda t, x: 0.3 * x + 0.2, noise="diagonal")
    x0 = cloud_4(B, M, 1, seed=24)
    bm = torchsde.BrownianInterval(t0, t0 + 4 * dt, size=(B, M), dtype=F64, entropy=25)
    ts = torch.tensor([t0 + k * dt for k in range(5)], dtype=F64)
    dW = torch.stack([bm(ts[k], ts[k + 1]).reshape(B, M, 1) for k in range(4)])
    ref = torchsde.sdeint(
        _RefSDE("stratonovich", "diagonal"), x0.reshape(B, M), ts[2:], bm=bm, method="reversible_heun", dt=dt
    )
    stepper = TorchSDE("reversible_heun").stepper(system, BrownianIncrements(dW, dt), t0, dt)
    assert close_3(stepper.run(x0.clone(), 2, 2).reshape(B, M), ref[-1], rtol=1e-11, atol=1e-12)


def test_a_run_from_an_x0_that_requires_grad_is_not_recorded_by_autograd():
    """``simulate`` from ``x0.requires_grad_()``: the saved states carry no graph (``requires_grad`` False,
    no ``grad_fn``; the first saved state was a ``CopySlices`` of x0) and equal the run from a plain x0, with
    no warning about converting a tensor that requires grad. Negative control: x0 itself still requires grad."""
    system = _system_2(lambda t, x: -x)
    x0 = torch.full((1, 3, 1), 0.5, dtype=F64)
    plain = simulate(system, x0, t1=0.3, dt=0.1, generator=4)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        traced = simulate(system, x0.clone().requires_grad_(), t1=0.3, dt=0.1, generator=4)
    assert not traced.states.requires_grad and traced.states.grad_fn is None
    assert torch.equal(traced.states, plain.states)
    assert x0.clone().requires_grad_().requires_grad  # control


@pytest.mark.parametrize("method", ["heun", "midpoint"])
def test_a_stratonovich_method_with_a_constant_diagonal_sigma_has_no_ito_correction(method):
    """Diagonal noise whose σ has no autograd link to x (``torch.full_like(x, 0.5)``): the Itô → Stratonovich
    drift is the Itô drift itself, ∂σ/∂x = 0 (it raised "element 0 of tensors does not require grad"), and a
    Stratonovich torchsde method runs: on the same Brownian path it equals the Itô Euler–Maruyama run of the
    same additive system to round-off for this linear drift only at dt → 0, so the check here is the drift
    itself against the hand value −x, plus a finite run. Negative control: a drift with a wrong correction
    ``−½σ·1`` is told apart."""
    system = SDE(lambda t, x: -x, lambda t, x: torch.full_like(x, 0.5), noise="diagonal")
    sde = _SystemAsSDE(system, torch.Size((1, 2, 1)), "stratonovich", "diagonal")
    assert sde.convert
    y = torch.tensor([[0.3, -0.7]], dtype=F64)
    b = sde.f(torch.tensor(0.0), y)
    assert torch.equal(b, -y)
    assert not torch.allclose(b, -y - 0.5 * 0.5 * torch.ones_like(y))  # control: a wrong correction
    x0 = torch.full((1, 2, 1), 0.3, dtype=F64)
    out = simulate(system, x0, t1=0.2, dt=0.05, solver=TorchSDE(method), generator=1)
    assert out.final.shape == x0.shape and torch.isfinite(out.final).all()


@pytest.mark.parametrize("save_every, save_from", [(10, 0.5), (30, 0.25), (7, None), (100, 1.0)])
def test_the_memory_check_counts_the_states_simulate_saves(monkeypatch, save_every, save_from):
    """The refusal before allocating counts exactly the states the run then saves (with a burn-in it counted from
    step 0 and over-asked: 11 states instead of 6 at save_every = 10, save_from = 0.5)."""
    asked = []
    monkeypatch.setattr(
        sys.modules["meanfield._checks"],
        "check_memory",
        lambda what, nbytes, device, hint: asked.append(nbytes),
    )
    x = torch.randn(2, 8, 1, generator=torch.Generator().manual_seed(0))
    traj = simulate(SYSTEM, x, t1=1.0, dt=0.01, save_every=save_every, save_from=save_from, generator=4)
    assert asked == [traj.states.numel() * traj.states.element_size()]


def test_a_non_finite_state_error_survives_pickling():
    """It crosses processes (a sweep's worker) with its fields; with only ``args`` pickled, unpickling called
    ``__init__(message)`` and failed (TypeError: missing step, time, last_finite_step, trajectory)."""
    x = torch.tensor([[[1.0]]])
    with pytest.raises(NonFiniteStateError) as caught:
        simulate(
            SDE(lambda t, x: x.square() * 5, lambda t, x: 0.1, noise="additive"), x + 0.5, t1=2.0, dt=0.25
        )
    error = caught.value
    back = pickle.loads(pickle.dumps(error))
    assert (str(back), back.step, back.time, back.last_finite_step) == (
        str(error), error.step, error.time, error.last_finite_step,
    )  # fmt: skip
    assert torch.equal(back.trajectory.states, error.trajectory.states)
