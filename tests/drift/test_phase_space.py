"""Tests of :mod:`meanfield.drift.phase_space`."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers.kinetic_steps import splitting_step  # tests/helpers/kinetic_steps.py
from helpers.pair_loops import loop_pairs as np_pairs  # tests/helpers/pair_loops.py

from meanfield import BrownianIncrements, MeanFieldLangevin, simulate
from meanfield.drift.phase_space import KineticMeanFieldLangevin, pair, positions, velocities
from meanfield.drift.potentials import (
    DoubleWell,
    GaussianInteraction,
    Quadratic,
    QuadraticInteraction,
)
from meanfield.stepping.brownian import GaussianNoise
from meanfield.stepping.solvers import get_solver
from meanfield.stepping.solvers.splittings import Splitting

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


def re_shape(shape):
    """``tuple(shape)`` as a regular expression."""
    return "\\(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + "\\)"


@pytest.mark.parametrize("fn", [positions, velocities], ids=["positions", "velocities"])
def test_check_paired_refusals_and_split(fn):
    """``positions``/``velocities`` (through ``_check_paired``): a non-tensor is a ``TypeError`` naming its
    type; a 0-d tensor, an empty or odd last axis a ``ValueError`` with the shape; a 1-d ``(2d,)`` state and a
    ``(B, M, 2d)`` one split at ``d`` (numpy slices)."""
    for value, got in [("z", "str"), (3.0, "float"), ([1.0, 2.0], "list")]:
        with pytest.raises(TypeError, match=rf"^a kinetic state must be a tensor \(B, M, 2d\), got {got}$"):
            fn(value)
    for shape in [(), (2, 3, 0), (2, 3, 3), (5,)]:
        with pytest.raises(
            ValueError,
            match=r"^a kinetic state has shape \(B, M, 2d\): positions then velocities on the last axis, got "
            rf"shape {re_shape(shape)} \(make one with meanfield\.drift\.phase_space\.pair\(x, v\)\)$",
        ):
            fn(torch.zeros(shape))
    first = fn is positions
    assert fn(torch.arange(4.0)).tolist() == ([0.0, 1.0] if first else [2.0, 3.0])
    z = cloud(2, 3, 6, seed=14)
    assert close(fn(z), z.numpy()[..., :3] if first else z.numpy()[..., 3:])


def test_kinetic_methods_refuse_a_non_tensor_state():
    """Every method of the kinetic system that reads a paired state refuses a non-tensor with the message."""
    system = KineticMeanFieldLangevin(Quadratic(), friction=1.0)
    match = r"^a kinetic state must be a tensor \(B, M, 2d\), got (list|NoneType)$"
    for call in (
        lambda: system.drift(0.0, [[1.0, 2.0]]),
        lambda: system.diffusion(0.0, [[1.0, 2.0]]),
        lambda: system.energy(None),
        lambda: system.check_state(None),
    ):
        with pytest.raises(TypeError, match=match):
            call()
    z = pair(cloud(1, 2, 2))
    assert close(system.drift(0.0, z)[..., :2], z[..., 2:].numpy())


def test_interactions_on_the_position_view():
    """A pair interaction (GaussianInteraction) sees the positions only: the force equals the overdamped drift."""
    x = torch.randn(2, 9, 3, dtype=F64, generator=torch.Generator().manual_seed(1))
    v = torch.randn(2, 9, 3, dtype=F64, generator=torch.Generator().manual_seed(2))
    W = GaussianInteraction(1.0, 0.7)
    kin = KineticMeanFieldLangevin(Quadratic(0.5), W, friction=0.3, beta=0.1)
    over = MeanFieldLangevin(Quadratic(0.5), W, beta=0.1)
    b = kin.drift(0.0, pair(x, v))
    torch.testing.assert_close(b[..., :3], v)
    torch.testing.assert_close(b[..., 3:], over.drift(0.0, x) - 0.3 * v)
    assert kin.diffusion(0.0, pair(x, v)).tolist() == [0.0] * 3 + [math.sqrt(2 * 0.3 * 0.1)] * 3
    z = simulate(kin, pair(x, v), t1=0.5, dt=0.05, solver="obabo", generator=0).final
    assert torch.isfinite(z).all()
    e = kin.energy(pair(x, v))
    torch.testing.assert_close(e, over.energy(x) + 0.5 * v.square().sum(-1).mean(1))


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: KineticMeanFieldLangevin(Quadratic(), friction=-1.0), ValueError, "friction"),
        (lambda: KineticMeanFieldLangevin(Quadratic(), beta=-0.1), ValueError, "beta"),
        (lambda: KineticMeanFieldLangevin(Quadratic(), friction=float("nan")), ValueError, "friction"),
        (lambda: KineticMeanFieldLangevin("quadratic"), TypeError, "confinement"),
        (lambda: Splitting("BAOBA"), ValueError, "unknown splitting"),
        (lambda: get_solver("baobab"), ValueError, "unknown solver"),
        (lambda: pair(torch.zeros(1, 2, 3), torch.zeros(1, 2, 2)), ValueError, "velocities"),
        (lambda: positions(torch.zeros(1, 2, 3)), ValueError, "2d"),
    ],
)
def test_bad_input(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_one_temperature_for_every_replica():
    """A per-replica temperature is refused with a message (the splittings take one β)."""
    with pytest.raises(TypeError, match="one temperature"):
        KineticMeanFieldLangevin(Quadratic(), beta=torch.tensor([0.1, 0.2]))
    system = KineticMeanFieldLangevin(Quadratic(), friction=1.0, beta=lambda t: torch.tensor([0.1, 0.2]))
    with pytest.raises(TypeError, match="one temperature"):
        simulate(system, torch.zeros(2, 3, 2), t1=0.2, dt=0.1, solver="baoab", generator=0)


def cloud_2(B=2, M=5, d=2, seed=0, dtype=F64, scale=1.0):
    """A seeded ``(B, M, d)`` state."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(B, M, d, generator=g, dtype=F64)).to(dtype)


def close_2(actual, expected, rtol=1e-10, atol=1e-12):
    """``actual`` (a tensor or array) equals ``expected`` within the tolerances (float64 comparison)."""
    a = actual.detach().double().numpy() if torch.is_tensor(actual) else np.asarray(actual, dtype=np.float64)
    e = expected.detach().double().numpy() if torch.is_tensor(expected) else np.asarray(expected, np.float64)
    return a.shape == e.shape and np.allclose(a, e, rtol=rtol, atol=atol)


def test_pair_positions_velocities_and_their_messages():
    """``pair(x, v)`` is ``(x, v)`` on the last axis (numpy concatenate), ``pair(x)`` zero velocities;
    ``positions``/``velocities`` split it back at ``d``; bad inputs are refused with their messages."""
    x, v = cloud_2(2, 3, 2, seed=39), cloud_2(2, 3, 2, seed=40)
    z = pair(x, v)
    assert close_2(z, np.concatenate([x.numpy(), v.numpy()], -1))
    assert close_2(pair(x), np.concatenate([x.numpy(), np.zeros((2, 3, 2))], -1))
    assert close_2(positions(z), x.numpy()) and close_2(velocities(z), v.numpy())
    with pytest.raises(TypeError, match=r"^x must be a tensor \(B, M, d\), got str$"):
        pair("x")
    with pytest.raises(
        ValueError, match=r"^velocities must have the positions' shape \(2, 3, 2\), got \(2, 3, 1\)$"
    ):
        pair(x, v[..., :1])
    with pytest.raises(ValueError, match=r"shape \(2, 3, 2\), got list$"):
        pair(x, [1.0, 2.0])
    with pytest.raises(
        ValueError, match=r"got shape \(2, 3, 3\) \(make one with meanfield\.drift\.phase_space\.pair\(x, v\)\)$"
    ):
        positions(torch.zeros(2, 3, 3))


def test_kinetic_drift_diffusion_and_energy_equal_the_hand_formulas():
    """``z = (x, v)``: drift ``(v, −a x − k(x − x̄) − γ v)``, diffusion ``(0, …, 0, s, …, s)`` with
    ``s = sqrt(2γβ)``, energy ``1/M Σ_i [a/2|x_i|² + ½·1/M Σ_j k/2|x_i − x_j|² + |v_i|²/2]`` (numpy)."""
    a, k, gamma, beta = 1.3, 0.4, 0.7, 0.6
    system = KineticMeanFieldLangevin(Quadratic(a), QuadraticInteraction(k), friction=gamma, beta=beta)
    x, v = cloud_2(2, 5, 2, seed=41), cloud_2(2, 5, 2, seed=42)
    z = pair(x, v)
    xn, vn = x.numpy(), v.numpy()
    force = -a * xn - k * (xn - xn.mean(1, keepdims=True))
    assert close_2(system.drift(0.0, z), np.concatenate([vn, force - gamma * vn], -1))
    s = math.sqrt(2 * gamma * beta)
    assert close_2(system.diffusion(0.0, z), [0.0, 0.0, s, s])
    pair_energy, _ = np_pairs(x, lambda b, zz: k / 2 * zz @ zz, lambda b, zz: k * zz)
    energy = (a / 2 * (xn**2).sum(-1) + 0.5 * pair_energy + 0.5 * (vn**2).sum(-1)).mean(1)
    assert close_2(system.energy(z), energy)
    assert system.noise_shape((2, 5, 4)) == (2, 5, 4)
    with pytest.raises(ValueError, match=r"got shape \(2, 5, 3\)"):
        system.noise_shape((2, 5, 3))


def test_kinetic_temperature_default_schedule_and_refusals():
    """The default β is 1 (``σ_v = sqrt(2γ)``); a scheduled β is read at the step's time; a per-replica β
    is refused with its message."""
    z = pair(cloud_2(1, 2, 1))
    default = KineticMeanFieldLangevin(Quadratic(), friction=2.0)
    assert default.temperature(0.0) == 1.0
    assert close_2(default.diffusion(0.0, z), [0.0, 2.0])
    scheduled = KineticMeanFieldLangevin(Quadratic(), friction=0.5, beta=lambda t: 0.2 + t)
    assert close_2(scheduled.diffusion(1.0, z), [0.0, math.sqrt(2 * 0.5 * 1.2)])
    with pytest.raises(
        TypeError,
        match=r"^KineticMeanFieldLangevin takes one temperature for every replica: beta must be a number or a "
        r"schedule, got Tensor$",
    ):
        KineticMeanFieldLangevin(Quadratic(), beta=torch.tensor([1.0, 2.0]))


def test_kinetic_diffusion_lives_on_the_state_device():
    """With a default device other than the state's (``torch.device("meta")``), ``σ`` is made on the state's
    device with the hand values."""
    system = KineticMeanFieldLangevin(Quadratic(), friction=0.5, beta=2.0)
    z = pair(cloud_2(1, 2, 2))
    with torch.device("meta"):
        sigma = system.diffusion(0.0, z)
    assert sigma.device.type == "cpu"
    assert close_2(sigma, [0.0, 0.0, math.sqrt(2.0), math.sqrt(2.0)])


def test_kinetic_check_state_checks_the_pairing_and_the_replicas():
    """``check_state``: an odd last axis is refused; per-replica ``a`` for 3 replicas accepts B = 3 and
    refuses B = 2, naming the parameter."""
    system = KineticMeanFieldLangevin(Quadratic(torch.tensor([1.0, 2.0, 3.0])))
    with pytest.raises(ValueError, match=r"^a kinetic state has shape \(B, M, 2d\)"):
        system.check_state(torch.zeros(3, 2, 3))
    system.check_state(pair(cloud_2(3, 2, 2)))
    with pytest.raises(ValueError, match=r"^confinement a has 3 per-replica values, but the state has B = 2"):
        system.check_state(pair(cloud_2(2, 2, 2)))


def test_kinetic_drift_uses_the_force_at_the_step_time():
    """A subclass with a time-dependent force ``F(t, x) = −a x + t`` (the splittings call ``force(t, x)``
    too): the drift's velocity part is ``F(t, x) − γ v`` at the ``t`` asked (numpy)."""

    class Driven(KineticMeanFieldLangevin):
        def force(self, t, x):
            return super().force(t, x) + t

    system = Driven(Quadratic(2.0), friction=0.5)
    x, v = cloud_2(1, 3, 1, seed=43), cloud_2(1, 3, 1, seed=44)
    out = system.drift(2.0, pair(x, v))
    assert close_2(out[..., 1:], -2.0 * x.numpy() + 2.0 - 0.5 * v.numpy())


def cloud_3(B=2, M=4, d=2, seed=0, scale=1.0, dtype=F64):
    """A seeded ``(B, M, d)`` state."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(B, M, d, generator=g, dtype=F64)).to(dtype)


def close_3(actual, expected, rtol=1e-12, atol=1e-13):
    """``actual`` equals ``expected`` in shape and within the tolerances."""
    a = actual.detach().cpu().numpy() if torch.is_tensor(actual) else np.asarray(actual)
    e = expected.detach().cpu().numpy() if torch.is_tensor(expected) else np.asarray(expected)
    return a.shape == e.shape and np.allclose(a, e, rtol=rtol, atol=atol)


def test_a_state_changed_between_segments_gets_a_fresh_force():
    """The kept force belongs to the state tensor and its version: after ``z`` is changed in place between
    two calls of ``run`` the force is computed again and the step equals the oracle started with no kept
    force. Negative control: the oracle reusing the stale force differs."""
    system = KineticMeanFieldLangevin(DoubleWell(), friction=0.5, beta=0.3)
    h = 0.2
    dW = torch.randn(2, 1, 3, 2, generator=torch.Generator().manual_seed(10), dtype=F64) * math.sqrt(h)
    source = BrownianIncrements(dW, h)
    stepper = Splitting("baoab").stepper(system, source, 0.0, h)
    z = pair(cloud_3(1, 3, 1, seed=11), cloud_3(1, 3, 1, seed=12))
    force = lambda q: system.force(0.0, torch.from_numpy(q)).numpy()  # noqa: E731
    x, v = z[..., :1].numpy().copy(), z[..., 1:].numpy().copy()
    z = stepper.run(z, 0, 1)
    x, v, stale = splitting_step("BAOAB", x, v, dW[0].numpy() / math.sqrt(h), h, 0.5, 0.3, force)
    assert close_3(z, np.concatenate([x, v], -1))
    z[..., :1].add_(0.25)  # the positions move: the kept force is stale
    x = x + 0.25
    z = stepper.run(z, 1, 1)
    fresh = splitting_step("BAOAB", x, v, dW[1].numpy() / math.sqrt(h), h, 0.5, 0.3, force)
    old = splitting_step("BAOAB", x, v, dW[1].numpy() / math.sqrt(h), h, 0.5, 0.3, force, stale)
    assert close_3(z, np.concatenate(fresh[:2], -1))
    assert not close_3(z, np.concatenate(old[:2], -1))


@pytest.mark.parametrize("potential", ["double well", "quadratic"])
def test_a_state_changed_between_segments_gets_a_fresh_force_with_drawn_noise(potential):
    """The same on the drawn-noise path (its own contiguous copy of the state and ``force_into``): after ``z``
    changed in place, the next segment equals a fresh stepper started on the changed state at that time with
    the generator where the first segment left it. Negative control: a change the stepper cannot see (through
    ``.data``, no new version) keeps the stale copy and force, and differs."""
    conf = DoubleWell() if potential == "double well" else Quadratic(1.3)
    system = KineticMeanFieldLangevin(conf, friction=0.5, beta=0.3)
    h = 0.2

    def stepper(g, t0):
        return Splitting("baoab").stepper(system, GaussianNoise((1, 3, 2), h, g, torch.float64, "cpu"), t0, h)

    results = {}
    for how in ("in place", "unseen"):
        g = torch.Generator().manual_seed(10)
        z = pair(cloud_3(1, 3, 1, seed=11), cloud_3(1, 3, 1, seed=12))
        first = stepper(g, 0.0)
        z = first.run(z, 0, 1)
        state = g.get_state()
        (z[..., :1] if how == "in place" else z.data[..., :1]).add_(0.25)
        changed = z.clone()
        results[how] = first.run(z, 1, 1)
        fresh = stepper(torch.Generator().manual_seed(0), h)
        fresh._noise.generator.set_state(state)
        results[how + " fresh"] = fresh.run(changed, 0, 1)
    assert torch.equal(results["in place"], results["in place fresh"])
    assert not torch.allclose(results["unseen"], results["unseen fresh"], atol=1e-3)


def test_force_into_writes_the_affine_force_into_out():
    """For V = a/2·|x|² and W = k/2·|z|² (numbers a, k) ``force_into`` writes −(a + k)·x + k·x̄ into ``out`` and
    returns that very tensor (the caller's buffer, no new one), equal to ``force`` to round-off, with and
    without the interaction; the default friction is γ = 1 (the class's documented default)."""
    x = torch.randn(2, 5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for interaction in (None, QuadraticInteraction(0.7)):
        system = KineticMeanFieldLangevin(Quadratic(1.3), interaction, beta=0.2)
        out = torch.empty_like(x)
        got = system.force_into(0.0, x, out)
        assert got.data_ptr() == out.data_ptr()
        torch.testing.assert_close(out, system.force(0.0, x), rtol=1e-14, atol=1e-14)
        assert system.friction == 1.0
