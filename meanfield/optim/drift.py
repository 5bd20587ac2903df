r"""The drift of a Langevin step: SGD, or Adam with its diagonal preconditioner.

- ``drift="sgd"``: ``θ ← θ − lr·(M·∇_θL + λθ)``, ``η_eff = lr`` (one ``_foreach_add_`` per bucket, and one or
  two more with weight decay; the drift's size for the statistics is computed only when they are read).
- ``drift="adam"``: ``θ ← θ − η_eff ⊙ m̂`` with ``η_eff = lr/(M·sqrt(v̂) + ε)`` per coordinate (one
  ``torch._fused_adam_`` per bucket on the raw gradients ``g``: Adam of ``M·g`` is Adam of ``g`` with ``ε/M``
  and ``λ/M``), ``v̂`` bias-corrected with each parameter's own step count.

For preconditioned noise [`precondition`][meanfield.optim.drift.precondition] leaves $t = 1/\sqrt{\sqrt{v} + \varepsilon\cdot\sqrt{\mathrm{bias}2}/M}$ in the bucket's work
buffer, so that $\eta_{\mathrm{eff}} = (\operatorname{lr}\cdot\sqrt{\mathrm{bias}2}/M)\cdot t^2$ and the noise is $\sqrt{2\beta_t\cdot\operatorname{lr}\cdot\sqrt{\mathrm{bias}2}/M}\cdot t \odot \xi$.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from meanfield.optim import foreach
from meanfield.optim.buckets import Bucket
from meanfield.optim.groups import noise_beta
from meanfield.optim.groups import scale as group_scale
from meanfield.optim.step_stats import Record

__all__ = ["apply_drift", "sgd_drift_", "precondition"]


def apply_drift(
    group: dict[str, Any],
    b: Bucket,
    index: list[int],
    grads: list[torch.Tensor],
    norms: list[torch.Tensor] | None,
    beta_t: float,
) -> list[Record]:
    r"""Apply the drift $\theta \leftarrow \theta - \eta_{\mathrm{eff}} \odot g$ to the parameters ``index`` of bucket ``b`` (module docstring).

    Args:
        group: the param group (its ``lr``, ``drift``, ``betas``, ``eps``, ``weight_decay``, scaling).
        b: the bucket.
        index: the bucket's parameters that have a gradient.
        grads: their gradients ``∂L/∂θ`` (unscaled; the ×M is applied here).
        norms: ``[()]`` their norms ``‖∂L/∂θ‖`` when the caller checked them (``None`` when the step
            was not checked: ``check_every``).
        beta_t: the group's temperature at this step (recorded for the noise and the statistics).

    Returns:
        The records of the step, one per Adam step count (parameters whose first gradient came at different
        steps have different bias corrections), one for an SGD drift.
    """
    lr = float(group["lr"])
    scale = group_scale(group)
    beta_noise = noise_beta(group, beta_t)  # the β of the noise sqrt(2β η_eff): s·β_s for the "loss" convention
    wd = group["weight_decay"]
    params = [b.params[i] for i in index]
    if group["drift"] == "sgd":
        terms, factor = sgd_drift_(params, grads, lr, scale, wd)
        record = Record(b, index, "sgd", lr, beta_noise, scale, None, False, beta_given=beta_t)
        record.keep_drift(terms, factor, None if wd else norms)
        return [record]
    beta1, beta2 = group["betas"]
    steps = [b.steps[i] for i in index]
    torch._foreach_add_(steps, 1.0)
    for i in index:
        b.counts[i] += 1
    # the fused kernel walks memory: a gradient laid out unlike its parameter is copied into its layout
    grads = [g if g.stride() == p.stride() else torch.empty_like(p).copy_(g) for p, g in zip(params, grads)]
    # Adam of M·g = Adam of g with ε/M and λ/M (the moments stay those of the raw gradient g)
    torch._fused_adam_(
        params,
        grads,
        b.views(b.exp_avg, index, strided=True),
        b.views(b.exp_avg_sq, index, strided=True),
        [],
        steps,
        lr=lr,
        beta1=beta1,
        beta2=beta2,
        weight_decay=wd / scale,
        eps=group["eps"] / scale,
        amsgrad=False,
        maximize=False,
    )
    by_count: dict[int, list[int]] = {}
    for i in index:
        by_count.setdefault(b.counts[i], []).append(i)
    return [
        Record(
            b,
            sub,
            "adam",
            lr,
            beta_noise,
            scale,
            None,
            bool(group["noise_preconditioned"]),
            eps=group["eps"],
            bias1=1 - beta1**k,
            bias2=1 - beta2**k,
            beta_given=beta_t,
        )
        for k, sub in by_count.items()
    ]


def sgd_drift_(
    params: list[torch.Tensor], grads: list[torch.Tensor], lr: float, scale: float, weight_decay: float
) -> tuple[list[torch.Tensor], float]:
    """The SGD drift ``θ ← θ − lr·(M·g + λθ)`` in place; returns ``(d, factor)`` with the drift ``factor·d_k``
    (for the statistics, reduced only when read): ``(M·g + λθ, lr)``, or ``(g, lr·M)`` without weight decay."""
    if weight_decay:  # M·g + λθ (M·g when M ≠ 1: the same rounding as ever), a new list: the gradients stay
        drift = foreach.add(foreach.mul(grads, scale) if scale != 1 else grads, params, alpha=weight_decay)
        foreach.add_(params, drift, alpha=-lr)
        return drift, lr
    foreach.add_(params, grads, alpha=-lr * scale)
    return grads, lr * scale


def precondition(record: Record) -> None:
    r"""For preconditioned Adam noise: $t = 1/\sqrt{\sqrt{v} + \varepsilon\cdot\sqrt{\mathrm{bias}2}/M}$ into the bucket's buffer,
    so that $\eta_{\mathrm{eff}} = (\operatorname{lr}\cdot\sqrt{\mathrm{bias}2}/M)\cdot t^2$ (three flat passes over ``v``)."""
    if record.drift != "adam" or not record.preconditioned:
        return
    b = record.bucket
    if b.rsqrt is None:
        b.rsqrt = torch.empty_like(b.exp_avg)  # (n,)
        b.rsqrt_views = b.views(b.rsqrt, range(len(b.params)), strided=True)
    e = record.eps * math.sqrt(record.bias2) / record.scale
    if len(record.index) == len(b.params):
        t = torch.sqrt(b.exp_avg_sq, out=b.rsqrt)  # (n,)
        t.add_(e).rsqrt_()  # (n,)
    else:  # some parameters only (no gradient, or another step count): their views
        views = [b.rsqrt_views[i] for i in record.index]
        for t, v in zip(views, b.views(b.exp_avg_sq, record.index, strided=True)):
            torch.sqrt(v, out=t)  # (…) laid out like the parameter
        torch._foreach_add_(views, e)
        torch._foreach_rsqrt_(views)
    record.rsqrt_ready = True
