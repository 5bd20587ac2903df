r"""The gradient check before a Langevin step changes anything: finite entries, and a step that does not overflow.

One reduction per bucket, ``‖g_k‖`` for each parameter ``k`` (a dot product for a bucket of one vector), and
one synchronisation (their sum); only when ``lr·(×M)·Σ_k ‖g_k‖`` is not a finite number of the gradients'
dtype are the entries examined: a NaN/Inf entry, or a finite gradient whose float32 norm overflowed
(recomputed in float64), or a step ``lr·‖g‖`` that overflows. Each error names the group, the parameter and
its shape.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from meanfield.optim import foreach
from meanfield.optim.buckets import Bucket
from meanfield.optim.groups import position
from meanfield.optim.groups import scale as group_scale

__all__ = ["gradient_norms", "norms_and_sum"]

_DOT_DTYPES = (torch.float32, torch.float64)
"""Dtypes whose dot product the check trusts (a half-precision square overflows at a norm of 256)."""


def norms_and_sum(grads: list[torch.Tensor]) -> tuple[list[torch.Tensor] | list[float], float]:
    r"""``([‖g_k‖], Σ_k ‖g_k‖)``, the sum a number (one synchronisation), the norms ``[()]`` tensors or, for one
    float32/float64 vector, its norm as a number.

    One such vector (a small model's parameter, $w \in \mathbb{R}^{20}$) has its norm from a dot product, the
    cheapest reduction torch dispatches (cheaper than ``linalg.vector_norm``, a visible part of a small model's
    step: ``benchmarks/peers.py``'s Bayesian logistic regression). Its rounding is that of the dot product's
    sum; NaN and Inf entries propagate, and a square that overflows while the norm would not gives an
    infinite sum, as an overflowing norm does (the callers then examine the entries).
    """
    if len(grads) == 1 and grads[0].dim() == 1 and grads[0].dtype in _DOT_DTYPES:
        norm = math.sqrt(float(torch.dot(grads[0], grads[0])))  # ‖g‖: NaN/Inf when an entry is
        return [norm], norm
    norms = foreach.norms(grads)  # [()] ‖g_k‖ per parameter
    return norms, float(norms[0]) if len(norms) == 1 else float(torch.stack(norms).sum())


def gradient_norms(
    groups: list[dict[str, Any]],
    group: dict[str, Any],
    b: Bucket,
    index: list[int],
    grads: list[torch.Tensor],
) -> list[torch.Tensor] | list[float]:
    r"""The norms ``‖∂L/∂θ‖`` of the gradients ``grads`` of bucket ``b``'s parameters ``index``, checked
    ([`norms_and_sum`][meanfield.optim.gradients.norms_and_sum]: ``[()]`` tensors, or one number).

    Raises:
        ValueError: a gradient with a NaN/Inf entry, or a step $\operatorname{lr}\cdot(\times M)\cdot\|g\|$ that overflows (no parameter
            has been changed yet).
    """
    step_bound = group["lr"] * (group_scale(group) if group["drift"] == "sgd" else 1.0)
    norms, total = norms_and_sum(grads)
    # one synchronisation: Σ_k ‖g_k‖·bound ≤ the dtype's largest number whenever every ‖g_k‖·bound is
    # finite and none overflows (NaN fails the comparison); otherwise the entries are examined one by one
    if not total * step_bound <= _largest(grads[0].dtype):
        stacked = torch.stack(foreach.norms(grads))  # (k,)
        _check_entries(groups, group, b, index, grads, stacked)
        _check_step_size(groups, group, b, index, stacked, step_bound)
        norms = list(stacked)
    return norms


@functools.cache
def _largest(dtype: torch.dtype) -> float:
    """The largest finite number of ``dtype``."""
    return torch.finfo(dtype).max


def _check_step_size(
    groups: list[dict[str, Any]],
    group: dict[str, Any],
    b: Bucket,
    index: list[int],
    norms: torch.Tensor,
    step_bound: float,
) -> None:
    r"""Raise before any change when ``lr``·(×M)·$\|g\|$ overflows for a parameter with a finite gradient."""
    for j in (~torch.isfinite(norms * step_bound)).nonzero()[:, 0].tolist():
        p = b.params[index[j]]
        gi, k = position(groups, group, p)
        raise ValueError(
            f"param group {gi}: the step lr·‖g‖ = {group['lr']:g}·{float(norms[j]):g} of parameter {k} "
            f"(shape {tuple(p.shape)}) overflows; lower lr (the parameters have diverged, or lr is far too "
            "large). No parameter was changed."
        )


def _check_entries(
    groups: list[dict[str, Any]],
    group: dict[str, Any],
    b: Bucket,
    index: list[int],
    grads: list[torch.Tensor],
    norms: torch.Tensor,
) -> None:
    """Raise on the first gradient with a NaN/Inf entry; a finite gradient whose norm overflowed gets its
    norm recomputed in float64 (in place in ``norms``)."""
    for j in (~torch.isfinite(norms)).nonzero()[:, 0].tolist():
        grad = grads[j]
        bad = int((~torch.isfinite(grad)).sum())
        if bad == 0:
            norms[j] = torch.linalg.vector_norm(grad.double())
            continue
        p = b.params[index[j]]
        gi, k = position(groups, group, p)
        raise ValueError(
            f"the gradient of parameter {k} (shape {tuple(p.shape)}) of param group {gi} has {bad} "
            "non-finite entries (NaN or Inf); Langevin needs finite gradients (check the loss, lower lr, "
            "or clip the gradients). No parameter was changed."
        )
