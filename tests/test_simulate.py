"""simulate: reproducibility, the torchsde adapter, saving, and clear errors for bad input."""

import math
import pickle
import sys
import time
import warnings

import pytest
import torch

from meanfield import SDE, BrownianIncrements, MeanFieldLangevin, NonFiniteStateError, TorchSDE, simulate
from meanfield.drift.potentials import DoubleWell, GaussianInteraction, Quadratic, QuadraticInteraction
from meanfield.drift.resolution import CollapseError, CollapseWarning, UnstableStepWarning
from meanfield.drift.schedules import Linear

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
    simulate_module = sys.modules["meanfield.stepping.simulate"]  # (meanfield.simulate is also the function's name)
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
    from meanfield.drift.potentials import LogInteraction

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
    from meanfield.drift.potentials import GaussianInteraction, LogInteraction, RieszInteraction
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

    # the case: Quadratic(1) at dt = 3 overflows only after ~1000 steps; the warning comes with one step
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


@pytest.mark.parametrize("save_every, save_from", [(10, 0.5), (30, 0.25), (7, None), (100, 1.0)])
def test_the_memory_check_counts_the_states_simulate_saves(monkeypatch, save_every, save_from):
    """The refusal before allocating counts exactly the states the run then saves (with a burn-in it counted from
    step 0 and over-asked: 11 states instead of 6 at save_every = 10, save_from = 0.5)."""
    asked = []
    monkeypatch.setattr(
        sys.modules["meanfield._checks"], "check_memory", lambda what, nbytes, device, hint: asked.append(nbytes)
    )
    x = torch.randn(2, 8, 1, generator=torch.Generator().manual_seed(0))
    traj = simulate(SYSTEM, x, t1=1.0, dt=0.01, save_every=save_every, save_from=save_from, generator=4)
    assert asked == [traj.states.numel() * traj.states.element_size()]


def test_a_non_finite_state_error_survives_pickling():
    """It crosses processes (a sweep's worker) with its fields; with only ``args`` pickled, unpickling called
    ``__init__(message)`` and failed (TypeError: missing step, time, last_finite_step, trajectory)."""
    x = torch.tensor([[[1.0]]])
    with pytest.raises(NonFiniteStateError) as caught:
        simulate(SDE(lambda t, x: x.square() * 5, lambda t, x: 0.1, noise="additive"), x + 0.5, t1=2.0, dt=0.25)
    error = caught.value
    back = pickle.loads(pickle.dumps(error))
    assert (str(back), back.step, back.time, back.last_finite_step) == (
        str(error), error.step, error.time, error.last_finite_step,
    )  # fmt: skip
    assert torch.equal(back.trajectory.states, error.trajectory.states)
