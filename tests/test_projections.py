"""Projected particles: the sphere (von Mises–Fisher law) and the box."""

import math

import pytest
import torch

from meanfield import MeanFieldLangevin, simulate
from meanfield.drift.potentials import Confinement, Quadratic
from meanfield.drift.projections import Clip, Sphere
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
