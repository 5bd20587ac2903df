"""meanfield.optim.gradients: the gradient norms of the finiteness check."""

from __future__ import annotations

import math

import pytest
import torch

from meanfield.optim.buckets import Bucket
from meanfield.optim.gradients import gradient_norms


def _check(grads: list[torch.Tensor], lr: float = 1e-3) -> list:
    params = [torch.zeros_like(g) for g in grads]
    group = {"params": params, "lr": lr, "drift": "sgd", "n_particles": 1, "mean_field_scaling": True}
    offsets = [sum(p.numel() for p in params[:k]) for k in range(len(params))]
    b = Bucket(params, offsets, sum(p.numel() for p in params))
    return gradient_norms([group], group, b, list(range(len(params))), grads)


@pytest.mark.parametrize("dtype, rel", [(torch.float32, 1e-6), (torch.float64, 1e-14)])
def test_a_vectors_norm_from_its_dot_product_is_its_norm_and_finds_every_bad_entry(dtype, rel):
    """One float32/float64 vector: the check's norm (a number, from the dot product) is ``‖g‖`` to the dtype's
    rounding; a NaN, +Inf or −Inf at any position raises naming the parameter, and nothing else does
    (negative control: the same vector without the bad entry passes)."""
    g = torch.randn(20, generator=torch.Generator().manual_seed(0), dtype=dtype)
    (norm,) = _check([g])
    assert isinstance(norm, float)
    assert norm == pytest.approx(float(torch.linalg.vector_norm(g.double())), rel=rel)
    for bad in (math.nan, math.inf, -math.inf):
        for i in (0, 7, 19):
            h = g.clone()
            h[i] = bad
            with pytest.raises(
                ValueError, match=r"^the gradient of parameter 0 \(shape \(20,\)\) of param group 0 has 1 "
            ):
                _check([h])
    assert _check([g.clone()])[0] == norm


def test_other_gradients_keep_their_norms_as_tensors():
    """A matrix, two vectors and a float16 vector (whose square would overflow at a norm of 256) take the
    reduction of every shape: ``[()]`` tensors equal to ``linalg.vector_norm``; a float16 vector of norm
    ~300 is not an error."""
    gen = torch.Generator().manual_seed(1)
    cases = [
        [torch.randn(4, 5, generator=gen)],
        [torch.randn(3, generator=gen), torch.randn(6, generator=gen)],
        [torch.full((4,), 150.0, dtype=torch.float16)],
    ]
    for grads in cases:
        norms = _check(grads)
        assert all(isinstance(n, torch.Tensor) and n.dim() == 0 for n in norms)
        assert all(torch.equal(n, torch.linalg.vector_norm(g)) for n, g in zip(norms, grads))
