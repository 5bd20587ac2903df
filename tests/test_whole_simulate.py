"""Whole-function value tests for :mod:`meanfield.stepping.simulate`, :mod:`meanfield.studies.plotting`,
:mod:`meanfield.stepping.solvers.splittings` and :mod:`meanfield.stepping.solvers.torchsde` (issue 25).

Each test pins the observable behaviour of one function against an independent answer: hand Euler–Maruyama
loops in numpy on the same increments (drawn again from a generator seeded alike), the numpy oracle of the
splittings (``tests/_kinetic_steps.py``), ``torchsde.sdeint`` called directly on a hand-written torchsde SDE
and a ``torchsde.BrownianInterval`` whose increments are handed to ``simulate``, matplotlib artists and PNG
headers read back, and exact error messages (anchored regular expressions). Everything is deterministic
(fixed seeds or tabulated increments), so the tolerances are round-off only; no statistics. Negative controls
sit next to the checks they guard (a wrong formula that must not match, a neighbouring threshold).
"""

from __future__ import annotations

import importlib
import math
import re
import struct

import numpy as np
import pytest
import torch
import torchsde
from _kinetic_steps import splitting_step  # tests/_kinetic_steps.py

from meanfield import simulate
from meanfield.drift.phase_space import KineticMeanFieldLangevin, pair
from meanfield.drift.potentials import DoubleWell, Quadratic
from meanfield.drift.systems import SDE, MeanFieldLangevin
from meanfield.stepping.brownian import BrownianIncrements, GaussianNoise
from meanfield.stepping.solvers import get_solver
from meanfield.stepping.solvers.splittings import ABOBA, BAOAB, OBABO, SPLITTINGS, Splitting
from meanfield.stepping.solvers.torchsde import TORCHSDE_METHODS, TorchSDE, _GridBrownian, _SystemAsSDE

sim_mod = importlib.import_module("meanfield.stepping.simulate")
plotting = importlib.import_module("meanfield.studies.plotting")

F64 = torch.float64


def cloud(B=2, M=4, d=2, seed=0, scale=1.0, dtype=F64):
    """A seeded ``(B, M, d)`` state."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(B, M, d, generator=g, dtype=F64)).to(dtype)


def close(actual, expected, rtol=1e-12, atol=1e-13):
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


# --------------------------------------------------------------------------------------------------------
# simulate: the grid, the saved states and the trajectory's fields


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
    x0 = cloud(2, 4, 2, seed=1)
    traj = simulate(OU, x0, t0=0.5, t1=1.2, dt=0.1, generator=5, save_every=save_every)
    xs = hand_em(
        x0.numpy(), lambda t, x: -0.7 * x, lambda t: math.sqrt(0.4), seeded_normals(5, 7, x0.shape), 0.5, 0.1
    )
    assert traj.steps.tolist() == steps and traj.steps.dtype == torch.int64
    assert close(traj.times, 0.5 + 0.1 * np.array(steps, dtype=float), rtol=0, atol=1e-15)
    assert traj.times.dtype == F64 and len(traj) == len(steps)
    assert close(traj.states, np.stack([xs[k] for k in steps]))
    assert traj.final is not None and torch.equal(traj.final, traj.states[-1])
    assert (traj.dt, traj.solver, traj.seed) == (0.1, "euler", 5)
    wrong = hand_em(
        x0.numpy(), lambda t, x: -0.7 * x, lambda t: math.sqrt(0.4), seeded_normals(6, 7, x0.shape), 0.5, 0.1
    )
    assert not close(traj.final, wrong[-1])


def test_check_every_and_save_every_do_not_change_the_numbers():
    """The stops (saves and checks) split the run into segments but not its numbers: the final state is bit
    for bit the same for ``check_every`` 1, 3, 64 and ``save_every`` 1, 2, None."""
    x0 = cloud(2, 3, 2, seed=2)
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
    x0 = cloud(1, 2, 1, seed=3)
    traj = simulate(system, x0, t0=2.0, t1=2.5, dt=0.125, generator=0, save_every=1)
    xs = hand_em(x0.numpy(), lambda t, x: t - x, lambda t: 0.0, [0 * x0.numpy()] * 4, 2.0, 0.125)
    assert close(traj.states, np.stack(xs))
    off = hand_em(x0.numpy(), lambda t, x: t - x, lambda t: 0.0, [0 * x0.numpy()] * 4, 0.0, 0.125)
    assert not close(traj.final, off[-1])


def test_seed_is_recorded_only_when_simulate_made_the_generator():
    """``generator=None`` records a fresh seed that repeats the run; a ``torch.Generator`` records ``None``
    (and draws from it: the run equals the seeded one), a numpy integer seed is recorded as it is, and
    ``brownian`` records ``None``."""
    x0 = cloud(1, 3, 1, seed=4)
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
    x0 = cloud(1, 3, 2, seed=5, dtype=torch.float32)
    before = x0.clone()
    traj = simulate(OU, x0, t1=0.3, dt=0.1, generator=0, save_every=1)
    assert traj.states.dtype == torch.float32 and traj.times.dtype == torch.float32
    assert torch.equal(x0, before) and torch.equal(traj.states[0], before)


def test_a_noise_source_that_is_not_pre_drawn_is_used_as_given():
    """``brownian=GaussianNoise(...)`` (a source that draws as it goes; no step count to check) drives the run:
    it equals the run with ``generator`` seeded alike, and records no seed."""
    x0 = cloud(2, 3, 1, seed=6)
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
    assert close(traj.states[:, 0, 0, 0], [0.0, 1.0, 3.0, 6.0, 10.0])


def test_progress_bar_counts_the_steps_only_when_asked(capsys):
    """``progress=True`` writes ``simulate[euler]`` and ``4/4`` steps (unit ``step``) to stderr; the default
    writes nothing."""
    simulate(OU, cloud(1, 2, 1), t1=1.0, dt=0.25, generator=0, progress=True)  # one segment of 4 steps
    err = capsys.readouterr().err
    assert "simulate[euler]" in err and "4/4" in err
    assert re.search(r"[\d?]step/s|s/step", err)
    simulate(OU, cloud(1, 2, 1), t1=1.0, dt=0.25, generator=0)
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


def re_num(value):
    """``repr(value)`` escaped for a regular expression."""
    return re.escape(repr(value))


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


# --------------------------------------------------------------------------------------------------------
# simulate: the finiteness checks and the failure diagnosis


@pytest.mark.parametrize("n", [10, 4095, 4096, 6000], ids=["small", "below_4096", "at_4096", "large"])
def test_all_finite_sees_nan_and_both_infinities_at_any_size(n):
    """``_all_finite`` is a 0-dim bool tensor: ``True`` for finite entries, ``False`` with one NaN, +Inf or
    −Inf at the start, middle or end, on both sides of the 4096-entry switch to ``aminmax``."""
    x = torch.linspace(-1.0, 1.0, n, dtype=F64)
    ok = sim_mod._all_finite(x)
    assert ok.dim() == 0 and ok.dtype == torch.bool and bool(ok)
    for bad in (math.nan, math.inf, -math.inf):
        for where in (0, n // 2, n - 1):
            y = x.clone()
            y[where] = bad
            assert not bool(sim_mod._all_finite(y))


def _system(drift, diffusion=lambda t, x: 0.1):
    return SDE(drift, diffusion, noise="additive")


def test_advice_names_the_cause_seen_at_the_step_before():
    """``_advice``: a state larger than ``1e8·max(1, start)`` is a blow-up (thresholds 1e8 from a start below
    1 and 3e8 from 3); else a non-finite drift is a singular drift, else a non-finite diffusion, else the step
    itself overflowed. A drift or diffusion that raises counts as finite. The messages are exact."""
    finite = _system(lambda t, x: -x)
    big = torch.tensor([[[1.5e8]]], dtype=F64)
    assert sim_mod._advice(finite, 0.0, big, 7, 0.5).startswith(
        "The state grew to |x| = 1.5e+08 by step 6 (it started at 0.5): the explicit scheme is unstable at "
        "this dt for a stiff or superlinear drift (reduce dt, e.g. below 1/L for a drift of Lipschitz "
        "constant L near the state), or the dynamics blow up (check the sign of the drift: a confinement "
        "must pull inwards)."
    )
    assert sim_mod._advice(finite, 0.0, 3.1e8 * torch.ones(1, 1, 1, dtype=F64), 7, 3.0).startswith(
        "The state grew"
    )
    last = sim_mod._advice(finite, 0.0, 2.9e8 * torch.ones(1, 1, 1, dtype=F64), 7, 3.0)
    assert last == (
        "The drift and diffusion are finite at step 6 (largest |x| = 2.9e+08), so the step itself overflowed: "
        "reduce dt (the explicit scheme is unstable for a stiff drift), or check the drift."
    )
    x = torch.tensor([[[0.5], [-2.0]]], dtype=F64)
    singular = _system(lambda t, x: 1.0 / (x - x))
    assert sim_mod._advice(singular, 0.0, x, 3, 1.0) == (
        "The drift b(t, x) is already non-finite at the finite, moderate state of step 2 (largest |x| = 2): a "
        "potential singular where the state is — a pair potential at z = 0 (RadialInteraction leaves out the "
        "self-pair i = j when ψ(0) or ψ'(0) is infinite; pass self_pair=False for a kernel it cannot probe), "
        "two particles at one point of a singular kernel, a log or division at 0 in a custom drift. A smaller "
        "dt will not help: fix the drift or the state."
    )
    bad_sigma = _system(lambda t, x: -x, lambda t, x: math.inf)
    sigma_message = (
        "The diffusion σ(t, x) is non-finite at the finite state of step 2: check the temperature β_t or the "
        "diffusion; a smaller dt will not help."
    )
    assert sim_mod._advice(bad_sigma, 0.0, x, 3, 1.0) == sigma_message

    def boom(t, x):
        raise ArithmeticError

    assert sim_mod._advice(_system(boom, lambda t, x: math.inf), 0.0, x, 3, 1.0) == sigma_message
    assert sim_mod._advice(_system(lambda t, x: -x, boom), 0.0, x, 3, 1.0).startswith(
        "The drift and diffusion are finite at step 2 (largest |x| = 2)"
    )
    assert "(largest |x| = 0)" in sim_mod._advice(finite, 0.0, torch.zeros(1, 0, 1, dtype=F64), 3, 1.0)


def exploding(t0, dt, at=5):
    """σ = 0 dynamics, still up to step ``at − 1`` and ``x·∞`` from step ``at − 1`` on (first non-finite state:
    step ``at``)."""

    def drift(t, x):
        return x * math.inf if round((t - t0) / dt) >= at - 1 else torch.zeros_like(x)

    return SDE(drift, lambda t, x: 0.0, noise="additive")


def test_pre_drawn_increments_are_replayed_to_the_first_non_finite_step():
    """With ``BrownianIncrements`` the failure found at the check after step 6 is traced to step 5 (last
    finite 4) by replaying from the check stop 4; the message counts the non-finite entries found (eager CPU
    checks), names the step and time, and the states saved so far; the trajectory keeps those states."""
    t0, dt = 1.0, 0.5
    x0 = torch.ones(2, 3, 1, dtype=F64)
    source = BrownianIncrements(torch.zeros(10, 2, 3, 1, dtype=F64), dt)
    with pytest.raises(sim_mod.NonFiniteStateError) as info:
        simulate(
            exploding(t0, dt), x0, t0=t0, t1=t0 + 10 * dt, dt=dt, brownian=source, check_every=4, save_every=2
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
        assert close(size[1:], np.abs(xs).max(axis=(1, 2, 3)))
    thr = size[:10].max() + 1e-9  # the first crossing lies past step 9
    cross = int(np.argmax(size > thr))
    assert cross >= 10

    def drift(t, x):
        return torch.full_like(x, math.inf) if float(x.abs().max()) > thr else torch.zeros_like(x)

    with pytest.raises(sim_mod.NonFiniteStateError) as info:
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

        return _system(drift, lambda t, x: 0.0)

    def message(start, factor):
        with pytest.raises(sim_mod.NonFiniteStateError) as info:
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

        with pytest.raises(sim_mod.NonFiniteStateError) as info:
            simulate(
                _system(drift, lambda t, x: 0.0),
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
    monkeypatch.setattr(sim_mod, "_EAGER_CHECKS", frozenset())
    x0 = cloud(1, 2, 1, seed=7)
    assert torch.equal(
        simulate(OU, x0, t1=1.0, dt=0.1, generator=2, check_every=3).final,
        simulate(OU, x0, t1=1.0, dt=0.1, generator=2).final,
    )
    with pytest.raises(sim_mod.NonFiniteStateError) as info:
        simulate(
            exploding(0.0, 0.5), torch.ones(1, 2, 1, dtype=F64), t1=6.0, dt=0.5, generator=0, check_every=4
        )
    assert (info.value.step, info.value.last_finite_step) == (5, 4)
    assert str(info.value).startswith(
        "the state became non-finite (found when checked after step 8) at step 5"
    )


def test_lazy_checks_of_a_source_that_cannot_be_replayed_name_the_first_bad_stop(monkeypatch):
    """Lazy flags (as on an accelerator) and a source ``simulate`` cannot replay (a subclass of
    ``GaussianNoise``): of the stops 2, 4, 6, 8 read together at the check stop 8, the first non-finite one
    (6, the state explodes at step 5) is named, with the last finite stop 4 and the 3 states saved before it."""
    monkeypatch.setattr(sim_mod, "_EAGER_CHECKS", frozenset())

    class Drawn(GaussianNoise):
        pass

    dt = 0.5
    source = Drawn((1, 2, 1), dt, torch.Generator().manual_seed(0), F64, "cpu")
    with pytest.raises(sim_mod.NonFiniteStateError) as info:
        simulate(
            exploding(0.0, dt),
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


# --------------------------------------------------------------------------------------------------------
# plotting


def test_figure_fonts_come_from_the_style_and_save_writes_at_130_dpi(tmp_path):
    """Tick labels made with the figure are 10 pt (the style's ``font.size``) and the title 12 pt ("large");
    ``save`` writes a PNG of ``4.2·130 × 3.2·130`` pixels (read from the IHDR header), also for a path with no
    suffix (PNG by default). Negative control: the style's dpi is not the figure's 110."""
    fig, ax = plotting.figure()
    assert ax.xaxis.get_major_ticks()[0].label1.get_fontsize() == 10.0
    assert ax.title.get_fontsize() == 12.0
    path = plotting.save(fig, tmp_path / "plain")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (round(4.2 * 130), round(3.2 * 130)) and width != round(4.2 * 110)
    assert plotting.STYLE["savefig.dpi"] == 130 and plotting.STYLE["legend.frameon"] is False


# --------------------------------------------------------------------------------------------------------
# solvers.kinetic


def test_splitting_factories_names_orders_and_refusals():
    """The factories and the default make the three schemes with their plans; the orders are declared for
    additive noise only; a non-string name is refused; non-Gaussian noise is refused at simulation time."""
    assert (BAOAB().name, OBABO().name, ABOBA().name, Splitting().name) == (
        "baoab",
        "obabo",
        "aboba",
        "baoab",
    )
    assert ABOBA().plan == (("A", 0.5), ("B", 0.5), ("O", 1.0), ("B", 0.5), ("A", 0.5))
    assert SPLITTINGS == {"baoab": "BAOAB", "obabo": "OBABO", "aboba": "ABOBA"}
    s = get_solver("aboba")
    assert isinstance(s, Splitting) and s.name == "aboba" and repr(s) == "Splitting('aboba')"
    assert s.strong_orders == {"additive": 1.0, "diagonal": None, "general": None}
    assert s.weak_orders == {"additive": 2.0, "diagonal": None, "general": None} and s.needs_gaussian
    with pytest.raises(
        ValueError, match=r"^unknown splitting scheme 3; allowed: \['aboba', 'baoab', 'obabo'\]$"
    ):
        Splitting(3)
    system = KineticMeanFieldLangevin(Quadratic(1.0), friction=1.0, beta=0.5)
    with pytest.raises(ValueError, match=r"^solver 'baoab' needs Gaussian increments; noise='rademacher'"):
        simulate(
            system, pair(cloud(1, 2, 1)), t1=0.2, dt=0.1, solver="baoab", noise="rademacher", generator=0
        )


def counting_force(system):
    """Wrap ``system.force`` to count its calls."""
    calls = []
    real = system.force

    def force(t, x):
        calls.append(t)
        return real(t, x)

    system.force = force
    return calls


@pytest.mark.parametrize("scheme, extra", [("baoab", 1), ("obabo", 1), ("aboba", 0)])
def test_the_last_kick_force_is_kept_across_steps_and_segments(scheme, extra):
    """One force evaluation per step, plus the first for BAOAB and OBABO (whose word ends with a kick): ``n +
    1`` (``n`` for ABOBA) also when every step is its own segment (``save_every=1``), with drawn noise and with
    pre-drawn increments; the states of the latter equal the numpy oracle of the splitting on those increments
    (the seeded normals), with the exponential ``e^{−γτ}`` per fraction. (Drawn noise is one draw per O since
    issue 51: ``tests/solvers/test_splitting_noise.py`` replays it.)"""
    system = KineticMeanFieldLangevin(DoubleWell(), friction=0.7, beta=0.4)
    calls = counting_force(system)
    z0 = pair(cloud(1, 3, 1, seed=8), cloud(1, 3, 1, seed=9))
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
        assert close(traj.states[k + 1], np.concatenate([x, v], -1))
    stepper = Splitting(scheme).stepper(system, None, 0.0, h)
    assert stepper._c == {frac: math.exp(-0.7 * frac * h) for _, frac in Splitting(scheme).plan}


def test_a_state_changed_between_segments_gets_a_fresh_force():
    """The kept force belongs to the state tensor and its version: after ``z`` is changed in place between
    two calls of ``run`` the force is computed again and the step equals the oracle started with no kept
    force. Negative control: the oracle reusing the stale force differs."""
    system = KineticMeanFieldLangevin(DoubleWell(), friction=0.5, beta=0.3)
    h = 0.2
    dW = torch.randn(2, 1, 3, 2, generator=torch.Generator().manual_seed(10), dtype=F64) * math.sqrt(h)
    source = BrownianIncrements(dW, h)
    stepper = Splitting("baoab").stepper(system, source, 0.0, h)
    z = pair(cloud(1, 3, 1, seed=11), cloud(1, 3, 1, seed=12))
    force = lambda q: system.force(0.0, torch.from_numpy(q)).numpy()  # noqa: E731
    x, v = z[..., :1].numpy().copy(), z[..., 1:].numpy().copy()
    z = stepper.run(z, 0, 1)
    x, v, stale = splitting_step("BAOAB", x, v, dW[0].numpy() / math.sqrt(h), h, 0.5, 0.3, force)
    assert close(z, np.concatenate([x, v], -1))
    z[..., :1].add_(0.25)  # the positions move: the kept force is stale
    x = x + 0.25
    z = stepper.run(z, 1, 1)
    fresh = splitting_step("BAOAB", x, v, dW[1].numpy() / math.sqrt(h), h, 0.5, 0.3, force)
    old = splitting_step("BAOAB", x, v, dW[1].numpy() / math.sqrt(h), h, 0.5, 0.3, force, stale)
    assert close(z, np.concatenate(fresh[:2], -1))
    assert not close(z, np.concatenate(old[:2], -1))


def test_zero_temperature_splitting_is_the_deterministic_oracle():
    """At ``β = 0`` the O step is the friction ``v ← e^{−γτ} v`` only: the run equals the oracle with zero
    increments whatever the seed."""
    system = KineticMeanFieldLangevin(Quadratic(1.3), friction=0.9, beta=0.0)
    z0 = pair(cloud(1, 2, 1, seed=13), cloud(1, 2, 1, seed=14))
    traj = simulate(system, z0, t1=0.6, dt=0.2, solver="obabo", generator=3)
    x, v, cached = z0[..., :1].numpy(), z0[..., 1:].numpy(), None
    for _ in range(3):
        x, v, cached = splitting_step(
            "OBABO", x, v, np.zeros((1, 2, 2)), 0.2, 0.9, 0.0, lambda q: -1.3 * q, cached
        )
    assert close(traj.final, np.concatenate([x, v], -1))


def test_a_scheduled_temperature_is_read_at_the_start_of_each_step():
    """``β_t = 0.1 + t`` with BAOAB: each step uses ``β_{t_n}``, ``t_n = t0 + n·h`` (the numpy oracle with that
    β); negative control: the oracle with ``β_{t0}`` throughout differs."""
    system = KineticMeanFieldLangevin(Quadratic(1.0), friction=0.8, beta=lambda t: 0.1 + t)
    z0 = pair(cloud(1, 3, 1, seed=22), cloud(1, 3, 1, seed=23))
    t0, h, n = 0.5, 0.25, 4
    xis = seeded_normals(7, n, (1, 3, 2))
    path = BrownianIncrements(torch.from_numpy(np.stack(xis)) * math.sqrt(h), h)  # drawn noise: test_splitting_noise
    traj = simulate(system, z0, t0=t0, t1=t0 + n * h, dt=h, solver="baoab", brownian=path)

    def oracle(beta_at):
        x, v, cached = z0[..., :1].numpy(), z0[..., 1:].numpy(), None
        for k in range(n):
            x, v, cached = splitting_step("BAOAB", x, v, xis[k], h, 0.8, beta_at(k), lambda q: -q, cached)
        return np.concatenate([x, v], -1)

    assert close(traj.final, oracle(lambda k: 0.1 + t0 + k * h))
    assert not close(traj.final, oracle(lambda k: 0.1 + t0))


# --------------------------------------------------------------------------------------------------------
# solvers.torchsde


def test_torchsde_solver_names_orders_and_refusals():
    """``TorchSDE``: default ``"srk"``; ``"euler"`` is named ``torchsde_euler``; the weak order is the
    method's where a strong order is declared, else ``None``; ``repr``; an unknown method lists the allowed."""
    assert TorchSDE().method == "srk" and TorchSDE().name == "srk"
    assert TorchSDE("euler").name == "torchsde_euler" and repr(TorchSDE("heun")) == "TorchSDE('heun')"
    assert TorchSDE("srk").weak_orders == {"additive": 1.5, "diagonal": 1.5, "general": None}
    assert TorchSDE("euler").weak_orders == {"additive": 1.0, "diagonal": 1.0, "general": 1.0}
    assert TorchSDE("reversible_heun").strong_orders == {"additive": 1.0, "diagonal": 0.5, "general": None}
    assert TorchSDE("milstein").strong_order("diagonal") == 1.0
    assert (
        TORCHSDE_METHODS["log_ode"].levy_area == "davie" and TORCHSDE_METHODS["srk"].levy_area == "space-time"
    )
    assert {m: s.sde_type for m, s in TORCHSDE_METHODS.items()} == {
        "euler": "ito",
        "milstein": "ito",
        "srk": "ito",
        "midpoint": "stratonovich",
        "heun": "stratonovich",
        "euler_heun": "stratonovich",
        "reversible_heun": "stratonovich",
        "log_ode": "stratonovich",
    }
    with pytest.raises(
        ValueError,
        match=r"^unknown torchsde method 'rk4'; allowed: \['euler', 'euler_heun', 'heun', 'log_ode', "
        r"'midpoint', 'milstein', 'reversible_heun', 'srk'\]$",
    ):
        TorchSDE("rk4")


def test_grid_brownian_serves_grid_increments_and_their_areas():
    """``_GridBrownian``: ``bm(t_n, t_{n+1})`` is ``dW_n`` flattened to ``(B, M·m)``; ``return_U`` adds
    ``dt·(W/2 + H_n)``, ``return_A`` a zero; an interval that is not one grid step (or no ``tb``) is refused
    naming it; the properties and ``repr``."""
    dt = 0.25
    dW = torch.randn(3, 2, 3, 1, generator=torch.Generator().manual_seed(15), dtype=F64)
    H = torch.randn(3, 2, 3, 1, generator=torch.Generator().manual_seed(16), dtype=F64)
    bm = _GridBrownian(BrownianIncrements(dW, dt, H), 1.0, dt, (2, 3), F64, torch.device("cpu"), "space-time")
    assert torch.equal(bm(torch.tensor(1.5), torch.tensor(1.75)), dW[2].reshape(2, 3))
    W, U = bm(1.25, 1.5, return_U=True)
    assert torch.equal(W, dW[1].reshape(2, 3)) and close(U, dt * (0.5 * dW[1] + H[1]).reshape(2, 3))
    W, U, A = bm(1.0, 1.25, return_U=True, return_A=True)
    assert torch.equal(W, dW[0].reshape(2, 3)) and A.shape == () and float(A) == 0.0
    W, A = bm(1.0, 1.25, return_A=True)
    assert torch.equal(W, dW[0].reshape(2, 3)) and float(A) == 0.0
    assert bm(1.0, 1.0 + dt * (1 + 5e-4)).shape == (2, 3)  # within 1e-3·dt of a step
    with pytest.raises(
        RuntimeError,
        match=r"^meanfield's torchsde adapter serves increments over grid steps only, asked for \[1\.0, 1\.5\] "
        r"with dt=0\.25$",
    ):
        bm(1.0, 1.5)
    with pytest.raises(RuntimeError, match=r"asked for \[1\.0, None\] with dt=0\.25$"):
        bm(1.0)
    with pytest.raises(RuntimeError, match=r"grid steps only"):
        bm(1.0, 1.0 + dt * (1 + 2e-3))
    assert (bm.dtype, bm.device, bm.shape, bm.levy_area_approximation) == (
        F64,
        torch.device("cpu"),
        (2, 3),
        "space-time",
    )
    assert repr(bm) == "_GridBrownian(shape=(2, 3), dt=0.25)"


def test_system_as_sde_drift_conversion_and_refusals():
    """``_SystemAsSDE.f``: the Itô drift for Itô methods and for additive noise; ``b − ½σ∂σ/∂x`` (hand
    derivative of ``σ = 0.3x + 0.2``) for a Stratonovich method on diagonal noise; a drift of another shape or
    not a tensor is refused naming the state's shape; ``g`` expands a number to the flat state."""
    shape = torch.Size((2, 3, 1))
    x = cloud(2, 3, 1, seed=17)
    y = x.reshape(2, 3)
    diagonal = SDE(lambda t, x: t - x, lambda t, x: 0.3 * x + 0.2, noise="diagonal")
    xn = x.numpy().reshape(2, 3)
    assert close(_SystemAsSDE(diagonal, shape, "ito", "diagonal").f(torch.tensor(0.5), y), 0.5 - xn)
    strat = _SystemAsSDE(diagonal, shape, "stratonovich", "diagonal")
    assert strat.convert and close(strat.f(torch.tensor(0.5), y), 0.5 - xn - 0.5 * (0.3 * xn + 0.2) * 0.3)
    additive = SDE(lambda t, x: t - x, lambda t, x: 0.4, noise="additive")
    strat_add = _SystemAsSDE(additive, shape, "stratonovich", "additive")
    assert not strat_add.convert and close(strat_add.f(torch.tensor(0.5), y), 0.5 - xn)
    assert close(strat_add.g(torch.tensor(0.0), y), np.full((2, 3), 0.4))
    wrong = SDE(lambda t, x: x[..., :1, :], lambda t, x: 0.1, noise="additive")
    with pytest.raises(
        ValueError,
        match=r"^drift\(t, x\) must return a tensor of the state's shape \(2, 3, 1\), got \(2, 1, 1\)$",
    ):
        _SystemAsSDE(wrong, shape, "ito", "additive").f(torch.tensor(0.0), y)
    wide = SDE(lambda t, x: -x, lambda t, x: torch.ones(2, 3, 2, dtype=F64), noise="diagonal")
    with pytest.raises(
        ValueError, match=r"^diffusion\(t, x\) must return σ of shape \(2, 3, 1\), got \(2, 3, 2\)$"
    ):
        _SystemAsSDE(wide, shape, "ito", "diagonal").g(torch.tensor(0.0), y)
    row = SDE(lambda t, x: -x, lambda t, x: torch.full((3, 1), 0.5, dtype=F64), noise="diagonal")
    assert close(_SystemAsSDE(row, shape, "ito", "diagonal").g(torch.tensor(0.0), y), np.full((2, 3), 0.5))
    number = SDE(lambda t, x: 1.0, lambda t, x: 0.1, noise="additive")
    with pytest.raises(ValueError, match=r"got float$"):
        _SystemAsSDE(number, shape, "ito", "additive").f(torch.tensor(0.0), y)


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
    "method, noise",
    [(m, "diagonal") for m in TORCHSDE_METHODS]
    + [(m, "additive") for m in ("euler", "milstein", "srk", "heun", "midpoint", "reversible_heun")],
)
def test_every_method_equals_torchsde_sdeint_on_the_same_brownian_path(method, noise):
    """Four steps of ``dt = 0.25`` from ``t0 = 0.5``: ``simulate`` with ``solver=method`` driven by the
    increments and space-time areas of a ``torchsde.BrownianInterval`` equals ``torchsde.sdeint`` with the
    same interval on the hand-written SDE, at every step (``H = U/dt − W/2``). Negative control: the run on
    the negated increments differs."""
    t0, dt, n, B, M = 0.5, 0.25, 4, 2, 3
    sde_type = TORCHSDE_METHODS[method].sde_type
    if noise == "diagonal":
        system = SDE(lambda t, x: 0.1 * t - 0.5 * x, lambda t, x: 0.3 * x + 0.2, noise="diagonal")
    else:
        system = SDE(lambda t, x: 0.1 * t - 0.5 * x, lambda t, x: 0.4 + 0.1 * t, noise="additive")
    x0 = cloud(B, M, 1, seed=18)
    bm = torchsde.BrownianInterval(
        t0, t0 + n * dt, size=(B, M), dtype=F64, levy_area_approximation="davie", entropy=19
    )
    ts = torch.tensor([t0 + k * dt for k in range(n + 1)], dtype=F64)
    dW, H = [], []
    for k in range(n):
        W, U = bm(ts[k], ts[k + 1], return_U=True)
        dW.append(W.reshape(B, M, 1))
        H.append((U / dt - 0.5 * W).reshape(B, M, 1))
    dW, H = torch.stack(dW), torch.stack(H)
    ref = torchsde.sdeint(_RefSDE(sde_type, noise), x0.reshape(B, M), ts, bm=bm, method=method, dt=dt)
    traj = simulate(
        system,
        x0,
        t0=t0,
        t1=t0 + n * dt,
        dt=dt,
        solver=TorchSDE(method).name,
        brownian=BrownianIncrements(dW, dt, H),
        save_every=1,
    )
    assert traj.solver == TorchSDE(method).name
    assert close(traj.states.reshape(n + 1, B, M), ref, rtol=1e-11, atol=1e-12)
    flipped = simulate(
        system,
        x0,
        t0=t0,
        t1=t0 + n * dt,
        dt=dt,
        solver=TorchSDE(method).name,
        brownian=BrownianIncrements(-dW, dt, -H),
    )
    assert not close(flipped.final.reshape(B, M), ref[-1], rtol=1e-6, atol=1e-8)


def test_the_projection_is_applied_after_every_torchsde_step():
    """A system with a projection onto the unit sphere: every saved ``torchsde_euler`` state is the hand
    Euler step from the previous one, normalised (numpy)."""
    from meanfield.drift.projections import Sphere

    system = SDE(lambda t, x: -x, lambda t, x: 0.3, noise="additive", projection=Sphere())
    x0 = cloud(1, 3, 2, seed=20)
    x0 = x0 / x0.norm(dim=-1, keepdim=True)
    dt = 0.1
    dW = torch.randn(3, 1, 3, 2, generator=torch.Generator().manual_seed(21), dtype=F64) * math.sqrt(dt)
    traj = simulate(
        system, x0, t1=0.3, dt=dt, solver="torchsde_euler", brownian=BrownianIncrements(dW, dt), save_every=1
    )
    x = x0.numpy()
    for k in range(3):
        x = x - dt * x + 0.3 * dW[k].numpy()
        x = x / np.linalg.norm(x, axis=-1, keepdims=True)
        assert close(traj.states[k + 1], x)


def test_reversible_heun_started_mid_grid_starts_its_state_at_that_time():
    """A stepper whose first ``run`` starts at step 2 initialises reversible Heun's extra state at ``t0 + 2dt``:
    two steps equal ``torchsde.sdeint`` from ``t0 + 2dt`` on the same Brownian interval (a drift depending on
    ``t`` makes the start time visible)."""
    t0, dt, B, M = 0.5, 0.25, 2, 3
    system = SDE(lambda t, x: 0.1 * t - 0.5 * x, lambda t, x: 0.3 * x + 0.2, noise="diagonal")
    x0 = cloud(B, M, 1, seed=24)
    bm = torchsde.BrownianInterval(t0, t0 + 4 * dt, size=(B, M), dtype=F64, entropy=25)
    ts = torch.tensor([t0 + k * dt for k in range(5)], dtype=F64)
    dW = torch.stack([bm(ts[k], ts[k + 1]).reshape(B, M, 1) for k in range(4)])
    ref = torchsde.sdeint(
        _RefSDE("stratonovich", "diagonal"), x0.reshape(B, M), ts[2:], bm=bm, method="reversible_heun", dt=dt
    )
    stepper = TorchSDE("reversible_heun").stepper(system, BrownianIncrements(dW, dt), t0, dt)
    assert close(stepper.run(x0.clone(), 2, 2).reshape(B, M), ref[-1], rtol=1e-11, atol=1e-12)


def test_a_run_from_an_x0_that_requires_grad_is_not_recorded_by_autograd():
    """``simulate`` from ``x0.requires_grad_()``: the saved states carry no graph (``requires_grad`` False,
    no ``grad_fn``; the first saved state was a ``CopySlices`` of x0) and equal the run from a plain x0, with
    no warning about converting a tensor that requires grad. Negative control: x0 itself still requires grad."""
    system = _system(lambda t, x: -x)
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
