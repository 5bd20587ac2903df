"""Projected particles: the sphere (von Mises–Fisher law) and the box."""

import math

import numpy as np
import pytest
import torch

from meanfield import MeanFieldLangevin, simulate
from meanfield.drift.potentials import (
    Confinement,
    Quadratic,
)
from meanfield.drift.projections import Clip, Projection, Sphere, projection_from_dict
from meanfield.drift.systems import SDE
from meanfield.stepping.brownian import BrownianIncrements
from meanfield.studies.stats import mean_se


class Tilt(Confinement):
    """V(w) = −κ·w_1: on S² the Gibbs law ∝ exp(−V/β) is von Mises–Fisher with concentration κ/β."""

    def __init__(self, kappa):
        self.kappa = kappa

    def energy(self, x):
        return -self.kappa * x[..., 0]

    def grad(self, x):
        g = torch.zeros_like(x)
        g[..., 0] = -self.kappa
        return g


def test_projected_langevin_on_the_sphere_reaches_von_mises_fisher():
    """E[w_1] = coth(k) − 1/k, k = κ/β (d = 3), from 20000 particles after t = 10 at dt = 0.005.

    Tolerance 5·SE (SE ≈ 0.003) plus 2·dt·β·(d−1) for the projected scheme's O(dt) bias; detects an
    error of ≈ 0.035 in E[w_1]. Negative control: the law at a 20 % different temperature is rejected.
    """
    kappa, beta, dt = 1.0, 0.5, 0.005
    x0 = torch.randn(1, 20_000, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    system = MeanFieldLangevin(Tilt(kappa), beta=beta, projection=Sphere())
    x = simulate(system, Sphere()(x0), t1=10.0, dt=dt, generator=1).final
    assert torch.allclose(x.norm(dim=-1), torch.ones(1, 20_000, dtype=torch.float64), atol=1e-12)
    est = mean_se(x[..., 0])

    def vmf_mean(k):
        return 1 / math.tanh(k) - 1 / k

    bias = 2 * dt * beta * 2
    assert est.agrees(vmf_mean(kappa / beta), bias=bias), (est, vmf_mean(kappa / beta))
    assert not est.agrees(vmf_mean(kappa / (1.2 * beta)), bias=bias)


@pytest.mark.parametrize("solver", ["euler", "srk"])
def test_box_projection_holds_after_every_step(solver):
    system = MeanFieldLangevin(Quadratic(0.1), beta=5.0, projection=Clip(0.5))
    traj = simulate(
        system,
        torch.zeros(2, 100, 2, dtype=torch.float64),
        t1=1.0,
        dt=0.01,
        save_every=1,
        solver=solver,
        generator=0,
    )
    assert traj.states.abs().max() <= 0.5
    assert (traj.states.abs() == 0.5).any()  # the clip is active (negative control for a no-op)


def test_bad_projection():
    with pytest.raises(TypeError, match="projection must be"):
        MeanFieldLangevin(Quadratic(1.0), projection=lambda x: x)
    with pytest.raises(ValueError, match="Clip bound A must be > 0"):
        Clip(0.0)


def test_projections_round_trip_through_their_dicts():
    from meanfield.drift.projections import PROJECTIONS, projection_from_dict

    assert Clip(2.5).to_dict() == {"kind": "clip", "A": 2.5}
    assert Sphere(2.0, dim=(1, 2)).to_dict() == {"kind": "sphere", "radius": 2.0, "dim": [1, 2]}
    for p in (Clip(2.5), Sphere(), Sphere(2.0, dim=(1, 2)), Sphere(dim=0)):
        q = projection_from_dict(p.to_dict())
        assert (
            type(q) is type(p) and q.to_dict() == p.to_dict() and PROJECTIONS[p.to_dict()["kind"]] is type(p)
        )
        x = torch.randn(4, 3, 2, generator=torch.Generator().manual_seed(0))
        assert torch.equal(p(x.clone()), q(x.clone()))


@pytest.mark.parametrize(
    "data, match",
    [
        ({"kind": "box", "A": 1.0}, r"'kind' in \['clip', 'sphere'\]"),
        ({"kind": "clip"}, r"missing \['A'\]"),
        ({"kind": "sphere", "radius": 1.0, "dim": [0], "r": 2}, r"unexpected \['r'\]"),
        ({"kind": "clip", "A": -1.0}, "A must be > 0"),
        ({"kind": "layer", "layer": "FeatureParticles"}, "its owner rebuilds it"),
    ],
)
def test_bad_projection_data_is_named(data, match):
    from meanfield.drift.projections import projection_from_dict

    with pytest.raises(ValueError, match=match):
        projection_from_dict(data)


F64 = torch.float64


def cloud(B=2, M=5, d=2, seed=0, dtype=F64, scale=1.0):
    """A seeded ``(B, M, d)`` state."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(B, M, d, generator=g, dtype=F64)).to(dtype)


def close(actual, expected, rtol=1e-10, atol=1e-12):
    """``actual`` (a tensor or array) equals ``expected`` within the tolerances (float64 comparison)."""
    a = actual.detach().double().numpy() if torch.is_tensor(actual) else np.asarray(actual, dtype=np.float64)
    e = expected.detach().double().numpy() if torch.is_tensor(expected) else np.asarray(expected, np.float64)
    return a.shape == e.shape and np.allclose(a, e, rtol=rtol, atol=atol)


def test_projected_step_lands_on_the_sphere_at_the_normalised_euler_point():
    """With ``Sphere()``: the normalised Euler point ``y/|y|``, ``y = θ − η aθ + sqrt(2βη) ξ`` (numpy)."""
    eta, a, beta = 0.05, 0.5, 0.2
    x0 = cloud(2, 3, 3, seed=37)
    x0 = x0 / x0.norm(dim=-1, keepdim=True)
    dW = cloud(2, 3, 3, seed=38)[None] * math.sqrt(eta)
    system = MeanFieldLangevin(Quadratic(a), beta=beta, projection=Sphere())
    traj = simulate(system, x0, t1=eta, dt=eta, brownian=BrownianIncrements(dW, eta))
    y = x0.numpy() * (1 - eta * a) + math.sqrt(2 * beta) * dW[0].numpy()
    assert close(traj.final, y / np.linalg.norm(y, axis=-1, keepdims=True))


class _Halve(Projection):
    def project_(self, x):
        return x.mul_(0.5)

    def __repr__(self):
        return "Halve()"


def test_a_custom_projection_is_described_by_its_class_and_repr():
    assert _Halve().to_dict() == {"kind": "custom", "class": f"{__name__}._Halve", "repr": "Halve()"}
    with pytest.raises(
        ValueError, match=r"owner rebuilds it \(e\.g\. Langevin\.param_groups_for\(model\)\)$"
    ):
        projection_from_dict(_Halve().to_dict())


@pytest.mark.parametrize("dim", [(1, "a"), (0, True), (), "x", 1.5])
def test_sphere_axes_must_be_ints(dim):
    with pytest.raises(TypeError, match="Sphere dim must be an int or a non-empty tuple of ints, got"):
        Sphere(dim=dim)
    assert Sphere(dim=(1, 2)).dim == (1, 2)  # negative control


def cloud_2(B=2, M=4, d=2, seed=0, scale=1.0, dtype=F64):
    """A seeded ``(B, M, d)`` state."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(B, M, d, generator=g, dtype=F64)).to(dtype)


def close_2(actual, expected, rtol=1e-12, atol=1e-13):
    """``actual`` equals ``expected`` in shape and within the tolerances."""
    a = actual.detach().cpu().numpy() if torch.is_tensor(actual) else np.asarray(actual)
    e = expected.detach().cpu().numpy() if torch.is_tensor(expected) else np.asarray(expected)
    return a.shape == e.shape and np.allclose(a, e, rtol=rtol, atol=atol)


def test_the_projection_is_applied_after_every_torchsde_step():
    """A system with a projection onto the unit sphere: every saved ``torchsde_euler`` state is the hand
    Euler step from the previous one, normalised (numpy)."""
    from meanfield.drift.projections import Sphere

    system = SDE(lambda t, x: -x, lambda t, x: 0.3, noise="additive", projection=Sphere())
    x0 = cloud_2(1, 3, 2, seed=20)
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
        assert close_2(traj.states[k + 1], x)


@pytest.mark.parametrize("v", [1e20, 1e30, torch.finfo(torch.float32).tiny / 4, 1.0])
def test_sphere_puts_every_nonzero_float32_particle_on_the_sphere_and_leaves_zero_at_zero(v):
    """float32 particles (v, v): |Π(x)| = r for huge ones (|x| overflowed: they were sent to 0) and subnormal
    ones (they were left at 0.71 of r), and Π(Π(x)) = Π(x); a zero particle stays zero (untested: without the
    clamp it became NaN); r itself is used (a radius of 1 passed the drift tests). Control: v = 1."""
    x = torch.full((1, 3, 2), v, dtype=torch.float32)
    x[0, 2] = 0.0
    y = Sphere(2.5)(x.clone())
    assert torch.allclose(y[0, :2].norm(dim=-1), torch.full((2,), 2.5), rtol=1e-6, atol=0)
    assert torch.equal(y[0, 2], torch.zeros(2)) and torch.equal(Sphere(2.5)(y.clone()), y)
