"""Potentials: gradients against autograd, the O(M) and chunked pairwise paths against each other."""

import pytest
import torch

from meanfield.potentials import (
    DoubleWell,
    GaussianInteraction,
    Quadratic,
    QuadraticInteraction,
    RadialInteraction,
)


def x(seed=0, B=2, M=37, d=3):
    return torch.randn(B, M, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("V", [Quadratic(2.5), DoubleWell()])
def test_confinement_gradient_is_the_gradient_of_the_energy(V):
    y = x().requires_grad_(True)
    (auto,) = torch.autograd.grad(V.energy(y).sum(), y)
    assert torch.allclose(V.grad(y.detach()), auto, atol=1e-12)


def test_double_well_values():
    pts = torch.tensor([[[1.0], [-1.0], [0.0]]], dtype=torch.float64)
    assert torch.allclose(DoubleWell().energy(pts), torch.tensor([[-0.25, -0.25, 0.0]], dtype=torch.float64))
    assert torch.equal(DoubleWell().grad(pts), torch.zeros_like(pts))


@pytest.mark.parametrize(
    "W",
    [
        QuadraticInteraction(1.7),
        GaussianInteraction(0.8, 0.7),
        GaussianInteraction(-1.0, 2.0, max_elements=50),
    ],
)
def test_mean_field_gradient_is_the_gradient_of_the_pair_energy(W):
    """E = 1/(2M) Σ_ij W(x_i, x_j) has ∂E/∂x_i = 1/M Σ_j ∇_1 W(x_i, x_j) (W symmetric)."""
    y = x().requires_grad_(True)
    (auto,) = torch.autograd.grad(0.5 * W.energy(y).sum(), y)
    assert torch.allclose(W.mean_field_grad(y.detach()), auto, atol=1e-10)


def test_radial_quadratic_equals_the_centre_of_mass_form_and_chunks_do_not_matter():
    k = 1.3
    radial = RadialInteraction(lambda r2: 0.5 * k * r2, lambda r2: 0.5 * k + 0 * r2, max_elements=7)
    exact = QuadraticInteraction(k)
    assert torch.allclose(radial.mean_field_grad(x()), exact.mean_field_grad(x()), atol=1e-10)
    assert torch.allclose(radial.energy(x()), exact.energy(x()), atol=1e-10)
    assert not torch.allclose(radial.mean_field_grad(x()), QuadraticInteraction(1.2 * k).mean_field_grad(x()))


def test_interactions_stay_within_a_replica():
    y = x()
    z = y.clone()
    z[1] += 100.0  # move replica 1 far away: replica 0 must not notice
    for W in (QuadraticInteraction(1.0), GaussianInteraction(1.0, 1.0)):
        assert torch.allclose(W.mean_field_grad(y)[0], W.mean_field_grad(z)[0], atol=1e-12)


def test_bad_potentials():
    with pytest.raises(ValueError, match="a must be ≥ 0"):
        Quadratic(-1.0)
    with pytest.raises(ValueError, match="length > 0"):
        GaussianInteraction(1.0, 0.0)
    with pytest.raises(TypeError, match="psi and dpsi"):
        RadialInteraction(1.0, 2.0)
