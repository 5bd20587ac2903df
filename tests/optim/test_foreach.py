"""meanfield.optim.foreach: the foreach ops, with the tensor's own op for a list of one."""

import torch

from meanfield.optim import foreach


def test_the_foreach_ops_of_one_tensor_give_the_numbers_of_the_list_op():
    """``foreach`` on a list of one tensor (the tensor's own op) and on a list of two (torch's foreach op) give
    bit-identical results to the foreach op on the same tensors (negative control: a different α differs)."""
    gen = torch.Generator().manual_seed(2)
    a, b = torch.randn(20, generator=gen), torch.randn(20, generator=gen)
    for n in (1, 2):
        xs, ys = [a.clone() for _ in range(n)], [b.clone() for _ in range(n)]
        ref = [a.clone() for _ in range(n)]
        foreach.add_(xs, ys, alpha=-0.37)
        torch._foreach_add_(ref, ys, alpha=-0.37)
        assert all(torch.equal(x, r) for x, r in zip(xs, ref))
        assert all(
            torch.equal(x, r)
            for x, r in zip(foreach.add(ys, ref, alpha=0.5), torch._foreach_add(ys, ref, alpha=0.5))
        )
        assert all(torch.equal(x, r) for x, r in zip(foreach.mul(ys, 1.7), torch._foreach_mul(ys, 1.7)))
        foreach.mul_(xs, 0.9)
        torch._foreach_mul_(ref, 0.9)
        assert all(torch.equal(x, r) for x, r in zip(xs, ref))
        assert all(torch.equal(x, r) for x, r in zip(foreach.norms(ys), torch._foreach_norm(ys)))
    shifted, ref = [a.clone()], [a.clone()]
    foreach.add_(shifted, [b], alpha=-0.36)
    torch._foreach_add_(ref, [b], alpha=-0.37)
    assert not torch.equal(shifted[0], ref[0])
