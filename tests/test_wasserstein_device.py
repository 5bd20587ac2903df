"""Wasserstein distances of particles that live on an accelerator (the ``device`` fixture: CPU always, CUDA
where available): the same known answers as on the CPU, and the same numbers as the CPU call.

The OT methods compute in float64 NumPy on the host, so a CUDA cloud must give the CPU cloud's cost bit for
bit; ``w2_gaussian`` runs torch linear algebra on the tensors' device (float64: round-off only).
"""

import math

import pytest
import torch

from meanfield.metrics.wasserstein import Normal, w2_gaussian, wasserstein, wasserstein_to_law


def _cloud(B, M, d, seed, device):
    """The same numbers on every device (drawn on the CPU, then moved)."""
    x = torch.randn(B, M, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return x.to(device)


@pytest.mark.parametrize("method", ["1d", "exact", "sliced"])  # (sinkhorn: the same host path, slow)
def test_a_translation_costs_its_squared_length_on_every_device(device, method):
    """``W2²(μ, μ + v) = |v|²`` (exact and 1-D OT, to round-off);
    the sliced distance of a translation is the mean of ``(θ·v)²`` over its directions."""
    d = 1 if method == "1d" else 3
    x = _cloud(2, 64, d, 0, device)
    v = torch.linspace(0.5, 1.0, d, dtype=torch.float64, device=device)  # (d,)
    got = wasserstein(x, x + v, method=method).cost
    cpu = wasserstein(x.cpu(), x.cpu() + v.cpu(), method=method).cost
    assert torch.equal(got.cpu(), cpu)  # the same float64 computation on the host
    expected = float(v.square().sum())
    if method in ("1d", "exact"):
        torch.testing.assert_close(
            got.cpu(), torch.full((2,), expected, dtype=torch.float64), rtol=1e-12, atol=0
        )
    elif method == "sliced":  # the mean over the seed's 128 unit directions θ of (θ·v)²
        theta = torch.randn(128, d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        theta = theta / theta.norm(dim=1, keepdim=True)  # (128, d)
        expected = float((theta @ v.cpu()).square().mean())
        torch.testing.assert_close(
            got.cpu(), torch.full((2,), expected, dtype=torch.float64), rtol=1e-10, atol=0
        )
    assert float(wasserstein(x, x, method="exact" if d > 1 else "1d").cost.abs().max()) < 1e-12
    assert (got.cpu() > 0.5 * expected).all()  # negative control: a translation is not free


def test_distance_to_a_law_and_the_gaussian_closed_form_on_every_device(device):
    x = _cloud(3, 500, 1, 1, device)
    got = wasserstein_to_law(x, Normal(0.0, 1.0)).cost
    assert torch.equal(got.cpu(), wasserstein_to_law(x.cpu(), Normal(0.0, 1.0)).cost)
    assert float(got.max()) < 0.05 and float(wasserstein_to_law(x + 1.0, Normal(0.0, 1.0)).cost.min()) > 0.5
    # Bures–Wasserstein: commuting covariances diag(a), diag(b): W2² = |m1 − m2|² + Σ (√a − √b)²
    a = torch.tensor([1.0, 4.0, 0.0], dtype=torch.float64, device=device)
    b = torch.tensor([9.0, 1.0, 2.0], dtype=torch.float64, device=device)
    m1 = torch.zeros(3, dtype=torch.float64, device=device)
    m2 = torch.tensor([1.0, 2.0, 2.0], dtype=torch.float64, device=device)
    w = w2_gaussian(m1, torch.diag(a), m2, torch.diag(b))
    exact = math.sqrt(9.0 + float((a.sqrt() - b.sqrt()).square().sum()))
    assert w.device == a.device and abs(float(w) - exact) < 1e-10
    assert abs(float(w2_gaussian(m1, torch.diag(a), m1, torch.diag(b))) - exact) > 1.0  # the means count
