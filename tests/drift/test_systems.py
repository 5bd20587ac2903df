"""Tests of :mod:`meanfield.drift.systems`."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers.pair_loops import loop_pairs as np_pairs  # tests/helpers/pair_loops.py

from meanfield import SDE, MeanFieldLangevin, simulate
from meanfield.drift.potentials import (
    DoubleWell,
    GaussianInteraction,
    LogInteraction,
    Quadratic,
    QuadraticInteraction,
    RieszInteraction,
)
from meanfield.drift.projections import Sphere
from meanfield.drift.schedules import Constant

X0 = torch.randn(2, 3, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def test_a_diffusion_that_does_not_broadcast_is_named():
    """σ of shape (5,) against a (2, 3, 2) state: not torch's broadcasting error, the allowed shapes (a
    hypothesis example found it)."""
    bad = SDE(lambda t, x: -x, lambda t, x: torch.ones(5, dtype=x.dtype), noise="diagonal")
    with pytest.raises(ValueError, match=r"σ of shape \(2, 3, 2\) or one that broadcasts to it, got \(5,\)"):
        simulate(bad, X0, t1=0.1, dt=0.02, solver="euler", generator=0)


F64 = torch.float64


def cloud(B=2, M=5, d=2, seed=0, dtype=F64, scale=1.0):
    """A seeded ``(B, M, d)`` state."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(B, M, d, generator=g, dtype=F64)).to(dtype)


def per(value, b):
    """Replica ``b``'s value of a number or a ``(B,)`` tensor, as a float."""
    return float(value[b]) if torch.is_tensor(value) else float(value)


def close(actual, expected, rtol=1e-10, atol=1e-12):
    """``actual`` (a tensor or array) equals ``expected`` within the tolerances (float64 comparison)."""
    a = actual.detach().double().numpy() if torch.is_tensor(actual) else np.asarray(actual, dtype=np.float64)
    e = expected.detach().double().numpy() if torch.is_tensor(expected) else np.asarray(expected, np.float64)
    return a.shape == e.shape and np.allclose(a, e, rtol=rtol, atol=atol)


def _interaction_cases():
    kq = torch.tensor([2.5, -0.4, 1.0], dtype=F64)
    c = torch.tensor([1.5, -0.8, 0.3], dtype=F64)
    ell = torch.tensor([0.6, 1.0, 2.0], dtype=F64)
    return {
        "quadratic_k_number": (
            lambda: QuadraticInteraction(2.5),
            lambda b, z: 2.5 / 2 * z @ z,
            lambda b, z: 2.5 * z,
        ),
        "quadratic_k_per_replica": (
            lambda: QuadraticInteraction(kq),
            lambda b, z: float(kq[b]) / 2 * z @ z,
            lambda b, z: float(kq[b]) * z,
        ),
        "gaussian_numbers": (
            lambda: GaussianInteraction(1.5, 0.7, backend="torch"),
            lambda b, z: 1.5 * math.exp(-(z @ z) / (2 * 0.49)),
            lambda b, z: -1.5 / 0.49 * z * math.exp(-(z @ z) / (2 * 0.49)),
        ),
        "gaussian_per_replica": (
            lambda: GaussianInteraction(c, ell),
            lambda b, z: float(c[b]) * math.exp(-(z @ z) / (2 * float(ell[b]) ** 2)),
            lambda b, z: (
                -float(c[b]) / float(ell[b]) ** 2 * z * math.exp(-(z @ z) / (2 * float(ell[b]) ** 2))
            ),
        ),
        "log_per_replica": (
            lambda: LogInteraction(c),
            lambda b, z: -float(c[b]) / 2 * math.log(z @ z),
            lambda b, z: -float(c[b]) * z / (z @ z),
        ),
        "log_number": (
            lambda: LogInteraction(0.9, backend="torch"),
            lambda b, z: -0.45 * math.log(z @ z),
            lambda b, z: -0.9 * z / (z @ z),
        ),
        "riesz": (
            lambda: RieszInteraction(1.5, 0.8),
            lambda b, z: 0.8 / 1.5 * (z @ z) ** -0.75,
            lambda b, z: -0.8 * z * (z @ z) ** (-0.75 - 1.0),
        ),
        "riesz_per_replica": (
            lambda: RieszInteraction(0.5, c, backend="torch"),
            lambda b, z: float(c[b]) / 0.5 * (z @ z) ** -0.25,
            lambda b, z: -float(c[b]) * z * (z @ z) ** (-0.25 - 1.0),
        ),
    }


CASES = _interaction_cases()


def np_drift_qq(x, a, k):
    """``−a x − k (x − x̄)`` per replica (numpy), ``a``, ``k`` numbers or ``(B,)``."""
    xn = x.numpy()
    B = xn.shape[0]
    av = np.array([per(a, b) for b in range(B)])[:, None, None]
    kv = np.array([0.0 if k is None else per(k, b) for b in range(B)])[:, None, None]
    return -av * xn - kv * (xn - xn.mean(1, keepdims=True))


AFFINE = {
    "a_number_no_k": (1.5, None),
    "a_number_k_number": (1.5, 0.6),
    "a_per_replica_no_k": (torch.tensor([0.5, 1.0, 2.0], dtype=F64), None),
    "a_per_replica_k_number": (torch.tensor([0.5, 1.0, 2.0], dtype=F64), 0.6),
    "a_number_k_per_replica": (1.5, torch.tensor([0.3, -0.2, 1.1], dtype=F64)),
    "a_per_replica_k_per_replica": (torch.tensor([0.5, 1.0, 2.0]), torch.tensor([0.3, -0.2, 1.1])),
    "a_per_replica_k_zero": (torch.tensor([0.5, 1.0, 2.0], dtype=F64), 0.0),
}


@pytest.mark.parametrize("name", list(AFFINE))
def test_affine_euler_update_is_the_hand_step_written_into_x(name):
    """The fused Euler move of ``V = a/2|x|²``, ``W = k/2|z|²`` equals ``x + dt·(−a x − k(x − x̄)) + noise``
    (numpy, replica ``b`` with ``a[b]``, ``k[b]``; B = 3 ≠ M = 5), written into ``x`` (the one pass over the
    state), and ``noise`` is not modified."""
    a, k = AFFINE[name]
    system = MeanFieldLangevin(Quadratic(a), None if k is None else QuadraticInteraction(k), beta=0.3)
    x, noise = cloud(3, 5, 2, seed=20), cloud(3, 5, 2, seed=21)
    x_before, noise_before = x.clone(), noise.clone()
    expected = x_before.numpy() + 0.1 * np_drift_qq(x_before, a, k) + noise_before.numpy()
    out = system.euler_update_(0.0, x, 0.1, noise)
    assert close(out, expected)
    assert out.data_ptr() == x.data_ptr() and close(x, expected)
    assert torch.equal(noise, noise_before)


def test_generic_euler_update_and_its_messages():
    """``ParticleSystem.euler_update_``: ``x + dt·b(t, x) + noise`` for a custom drift (numpy), the drift
    called with ``t``; a drift of the wrong shape or type is refused, naming what it returned."""
    x, noise = cloud(2, 3, 1, seed=22), cloud(2, 3, 1, seed=23)
    system = SDE(lambda t, x: -t * x**3, lambda t, x: 0.0, noise="additive")
    expected = x.numpy() + 0.25 * (-2.0 * x.numpy() ** 3) + noise.numpy()
    assert close(system.drift(2.0, x), -2.0 * x.numpy() ** 3)
    assert close(system.euler_update_(2.0, x.clone(), 0.25, noise), expected)
    bad = SDE(lambda t, x: x[..., 0], lambda t, x: 0.0, noise="additive")
    with pytest.raises(
        ValueError,
        match=r"^drift\(t, x\) must return a tensor of the state's shape \(2, 3, 1\), got \(2, 3\)$",
    ):
        bad.euler_update_(0.0, x.clone(), 0.1, noise)
    number = SDE(lambda t, x: 1.0, lambda t, x: 0.0, noise="additive")
    with pytest.raises(ValueError, match=r"of the state's shape \(2, 3, 1\), got float$"):
        number.euler_update_(0.0, x.clone(), 0.1, noise)


def test_mean_field_langevin_drift_energy_and_parameters():
    """``MeanFieldLangevin(DoubleWell, Gaussian)``: drift ``−∇V − 1/M Σ_j ∇W`` and the energy per replica
    ``1/M Σ_i [V(x_i) + ½·1/M Σ_j W(x_i − x_j)]`` against numpy (double loop); ``parameters()`` names every
    value; the projection given is kept."""
    inter = GaussianInteraction(1.5, 0.7)
    sphere = Sphere()
    system = MeanFieldLangevin(DoubleWell(2.0, 0.5), inter, beta=0.25, projection=sphere)
    x = cloud(3, 6, 2, seed=24)
    xn = x.numpy()
    _, W, gradW = CASES["gaussian_numbers"]
    pair_energy, pair_grad = np_pairs(x, W, gradW)
    assert close(system.drift(0.0, x), -(2.0 * xn**3 - 0.5 * xn) - pair_grad)
    V = (2.0 * xn**4 / 4 - 0.5 * xn**2 / 2).sum(-1)
    assert close(system.energy(x), (V + 0.5 * pair_energy).mean(1))
    assert system.parameters() == {
        "confinement quartic": 2.0,
        "confinement quadratic": 0.5,
        "interaction c": 1.5,
        "interaction length": 0.7,
        "beta": 0.25,
    }
    assert system.projection is sphere


def test_per_replica_temperature_diffusion_and_replica_checks():
    """A per-replica β gives ``σ = sqrt(2β_b)`` as ``(B, 1, 1)``; ``check_state`` accepts B matching replicas
    and refuses another B naming the parameter; the diffusion refuses another B naming ``beta``."""
    beta = torch.tensor([0.5, 1.0, 2.0], dtype=F64)
    system = MeanFieldLangevin(Quadratic(torch.tensor([1.0, 2.0, 3.0])), QuadraticInteraction(0.5), beta=beta)
    x = cloud(3, 4, 2)
    sigma = system.diffusion(0.0, x)
    assert close(sigma, np.sqrt(2 * beta.numpy())[:, None, None])
    assert torch.equal(system.parameters()["beta"], beta)
    system.check_state(x)
    with pytest.raises(ValueError, match=r"^confinement a has 3 per-replica values, but the state has B = 2"):
        system.check_state(cloud(2, 4, 2))
    with pytest.raises(ValueError, match=r"^beta has 3 per-replica values, but the state has B = 2"):
        MeanFieldLangevin(Quadratic(), beta=beta).diffusion(0.0, cloud(2, 4, 2))


def test_temperature_schedules_and_refusals():
    """A callable β gives ``σ(t) = sqrt(2β(t))`` at the time asked; a schedule's dict is rebuilt; a negative
    number is refused with the check's message."""
    system = MeanFieldLangevin(Quadratic(), beta=lambda t: 0.5 + t)
    x = cloud()
    assert system.diffusion(2.0, x) == pytest.approx(math.sqrt(5.0), rel=1e-15)
    assert system.temperature(1.0) == pytest.approx(1.5)
    rebuilt = MeanFieldLangevin(Quadratic(), beta=Constant(0.5).to_dict())
    assert rebuilt.diffusion(0.0, x) == pytest.approx(1.0, rel=1e-15)
    assert MeanFieldLangevin(Quadratic(), beta=0.125).diffusion(0.0, x) == pytest.approx(0.5, rel=1e-15)
    with pytest.raises(ValueError, match=r"^beta must be ≥ 0, got -1.0$"):
        MeanFieldLangevin(Quadratic(), beta=-1.0)


def test_sde_brownian_dim_is_checked_by_name():
    """``SDE(noise="general")`` refuses ``brownian_dim = 0`` naming ``brownian_dim``."""
    with pytest.raises(ValueError, match=r"^brownian_dim must be ≥ 1, got 0$"):
        SDE(lambda t, x: x, lambda t, x: x, noise="general", brownian_dim=0)


B, M, D = 4, 30, 2


def state(B=B, M=M, d=D, seed=0, dtype=F64):
    return torch.randn(B, M, d, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_a_scheduled_temperature_that_turns_negative_in_one_replica_stops_with_its_index():
    beta = lambda t: torch.tensor([0.5, 0.5 - t, 0.5], dtype=F64)  # noqa: E731 — replica 1 below 0 after t = 0.5
    with pytest.raises(ValueError, match=r"beta\(t=0.51\)\[1\] = -0.01.*every replica"):
        simulate(MeanFieldLangevin(Quadratic(), beta=beta), state(B=3), t1=1.0, dt=0.01, generator=0)
