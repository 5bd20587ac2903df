"""Potentials: gradients against autograd, the O(M) and chunked pairwise paths against each other."""

import pytest
import torch

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


def x(seed=0, B=2, M=37, d=3):
    return torch.randn(B, M, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


PER_REPLICA = torch.tensor([0.7, 2.5], dtype=torch.float64)  # one value per replica of x() (B = 2)


@pytest.mark.parametrize(
    "V",
    [
        Quadratic(2.5),
        DoubleWell(),
        Quadratic(PER_REPLICA),
        DoubleWell(quartic=PER_REPLICA, quadratic=-PER_REPLICA),
        DoubleWell(quartic=0.5, quadratic=2.0),
    ],
    ids=[
        "quadratic",
        "double well",
        "quadratic per replica",
        "double well per replica",
        "double well c4, c2",
    ],
)
def test_confinement_gradient_is_the_gradient_of_the_energy(V):
    y = x().requires_grad_(True)
    (auto,) = torch.autograd.grad(V.energy(y).sum(), y)
    assert torch.allclose(V.grad(y.detach()), auto, atol=1e-12)


def test_per_replica_values_act_replica_by_replica():
    """Replica b of a per-replica potential is the scalar potential with value [b] (an independent path:
    the scalar code), and not the other replica's (negative control)."""
    y = x()
    for batched, scalar in [
        (Quadratic(PER_REPLICA), Quadratic),
        (QuadraticInteraction(PER_REPLICA), QuadraticInteraction),
        (Alignment(PER_REPLICA), Alignment),
        (DoubleWell(quartic=PER_REPLICA), lambda v: DoubleWell(quartic=v)),
    ]:
        grad = batched.grad if hasattr(batched, "grad") else batched.mean_field_grad
        for b in range(2):
            one = scalar(float(PER_REPLICA[b]))
            one_grad = one.grad if hasattr(one, "grad") else one.mean_field_grad
            assert torch.allclose(grad(y)[b], one_grad(y[b : b + 1])[0], rtol=1e-14, atol=1e-15)
            assert torch.allclose(batched.energy(y)[b], one.energy(y[b : b + 1])[0], rtol=1e-14, atol=1e-15)
            other = scalar(float(PER_REPLICA[1 - b]))
            other_grad = other.grad if hasattr(other, "grad") else other.mean_field_grad
            assert not torch.allclose(grad(y)[b], other_grad(y[b : b + 1])[0], atol=1e-3)
    with pytest.raises(ValueError, match="3 per-replica values, but the state has B = 2"):
        Quadratic(torch.ones(3)).grad(y)


def test_double_well_coefficients_move_the_wells_and_the_barrier():
    """V = c4 x⁴/4 − c2 x²/2: ∇V = 0 at ±sqrt(c2/c4), V there = −c2²/(4 c4) per coordinate."""
    V = DoubleWell(
        quartic=torch.tensor([2.0, 0.5], dtype=torch.float64),
        quadratic=torch.tensor([1.0, 3.0], dtype=torch.float64),
    )
    wells = torch.tensor([[[0.5**0.5]], [[6.0**0.5]]], dtype=torch.float64)  # (2, 1, 1) sqrt(c2/c4)
    assert torch.allclose(V.grad(wells), torch.zeros_like(wells), atol=1e-14)
    assert torch.allclose(
        V.energy(wells)[:, 0], torch.tensor([-1 / 8, -9 / 2], dtype=torch.float64), atol=1e-14
    )
    assert not torch.allclose(V.grad(wells.flip(0)), torch.zeros_like(wells), atol=1e-3)  # negative control


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
        QuadraticInteraction(PER_REPLICA),
        Alignment(PER_REPLICA),
        GaussianInteraction(PER_REPLICA, PER_REPLICA.flip(0), max_elements=50),
    ],
    ids=[
        "quadratic",
        "gaussian",
        "gaussian blocked",
        "quadratic per replica",
        "alignment per replica",
        "gaussian per replica",
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
    with pytest.raises(TypeError, match="self_pair must be True, False or None"):
        RadialInteraction(lambda r: r, lambda r: r, self_pair="no")
    with pytest.raises(ValueError, match="quartic must be > 0"):
        DoubleWell(quartic=0.0)


@pytest.mark.parametrize("W", [LogInteraction, lambda c: RieszInteraction(1.0, c)])
def test_singular_kernels_attract_for_negative_c_and_repel_for_positive_c(W):
    # the documented sign convention: the drift −1/M Σ_j ∇W(x_i − x_j) moves two particles towards each other
    # for c < 0 (the Keller–Segel kernel LogInteraction(−χ)) and apart for c > 0
    x = torch.tensor([[[0.0, 0.0], [1.0, 0.0]]], dtype=torch.float64)  # (1, 2, 2): particle 1 right of 0
    for c, sign in ((-2.0, 1.0), (2.0, -1.0)):
        drift = -W(c).mean_field_grad(x)  # (1, 2, 2)
        assert sign * float(drift[0, 0, 0]) > 0 and sign * float(drift[0, 1, 0]) < 0  # towards / away
        assert float(drift[0, 0, 0]) == pytest.approx(sign * 2.0 / 2)  # |c|/(M r) = 2/(2·1), r = 1
