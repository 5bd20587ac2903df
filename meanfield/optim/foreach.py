r"""torch's list ("foreach") ops, or the tensor's own op when the list holds one tensor.

A step of the optimizers updates lists of tensors with ``torch._foreach_*`` ops: one call per list. For a list
of one tensor (a small model, one parameter per group: $w \in \mathbb{R}^{20}$) the list machinery is most of
the call (``torch._foreach_add_([w], [g])`` against ``w.add_(g)``), and a step makes four or five such calls.
Each function here makes the tensor's own call for a single tensor and the foreach call otherwise. The
numbers are the same on the CPU, whose foreach kernels call the tensor op on each tensor in turn (on a GPU
both kernels compute ``a + α·b`` elementwise; not checked there bit for bit: a run and its resumption take
the same path either way, since the path depends only on the length of the list).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["add", "add_", "mul", "mul_", "norms"]


def add_(tensors: list[torch.Tensor], others: list[torch.Tensor], alpha: float) -> None:
    r"""$t_k \leftarrow t_k + \alpha\cdot o_k$ in place, for every ``k``."""
    if len(tensors) == 1:
        tensors[0].add_(others[0], alpha=alpha)
    else:
        torch._foreach_add_(tensors, others, alpha=alpha)


def add(tensors: list[torch.Tensor], others: list[torch.Tensor], alpha: float) -> list[torch.Tensor]:
    r"""New tensors $t_k + \alpha\cdot o_k$."""
    if len(tensors) == 1:
        return [torch.add(tensors[0], others[0], alpha=alpha)]
    return torch._foreach_add(tensors, others, alpha=alpha)


def mul(tensors: list[torch.Tensor], c: float) -> list[torch.Tensor]:
    r"""New tensors $c\cdot t_k$."""
    if len(tensors) == 1:
        return [torch.mul(tensors[0], c)]
    return torch._foreach_mul(tensors, c)


def mul_(tensors: list[torch.Tensor], c: float) -> None:
    r"""$t_k \leftarrow c\cdot t_k$ in place, for every ``k``."""
    if len(tensors) == 1:
        tensors[0].mul_(c)
    else:
        torch._foreach_mul_(tensors, c)


def norms(tensors: list[torch.Tensor]) -> Sequence[torch.Tensor]:
    r"""``[()]`` the Euclidean norms $\|t_k\|$."""
    if len(tensors) == 1:
        return [torch.linalg.vector_norm(tensors[0])]
    return torch._foreach_norm(tensors)
