r"""Captured paths, opt-in: a block of steps compiled by ``torch.compile`` into one call.

An eager step of [`meanfield.simulate`][meanfield.stepping.simulate.simulate] or [`meanfield.optim.Langevin`][meanfield.optim.Langevin] pays Python and one dispatch
per tensor operation; on a small system (a thousand particles, a twenty-dimensional posterior) that fixed cost
*is* the step. Here a block of ``k`` steps is traced once and compiled (TorchInductor: C++ on the CPU, with the
system's compiler; Triton on a GPU), so that a call runs ``k`` steps with no Python in between, as JAX's
``lax.scan`` does.

- [`sgld_block`][meanfield.stepping.captured.sgld_block]: ``k`` SGLD steps ``θ ← θ − lr·(∇L(θ) + λθ) + sqrt(2β·lr)·ξ`` of a loss ``L`` written as
  a function of one tensor (its data closed over; the gradient by ``torch.func.grad``), the step of
  ``Langevin(drift="sgd", weight_decay=λ)`` with one group and ``M = 1``.
- [`euler_block`][meanfield.stepping.captured.euler_block]: ``k`` Euler–Maruyama steps ``x ← x + dt·b(x) + σ·sqrt(dt)·ξ`` of a
  ``MeanFieldLangevin`` with a constant temperature (``σ = sqrt(2β)``), the step of
  ``simulate(system, x0, solver="euler")``.

The noise of a block, ``ξ`` of shape ``(k, *θ.shape)``, is drawn from the caller's ``torch.Generator`` in one
``normal_`` call before the compiled call, so a seed gives a reproducible run and a chain carries on from
block to block. The numbers are the eager path's when a step's draw holds a multiple of 16 numbers (torch's
CPU ``normal_`` transforms its uniforms 16 at a time); otherwise other numbers of the same law. The compiled
arithmetic may round differently from the eager one (fused multiply–adds): same law, not the same bits.

What it costs: the first call compiles (tens of seconds on a CPU, growing with ``k``: the loop is unrolled), and
so does every call with a new shape or dtype. No NaN check runs inside a block: check the result.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .._checks import check_int, check_nonnegative, check_positive
from ..drift.schedules import Constant
from ..drift.systems import MeanFieldLangevin

__all__ = ["sgld_block", "euler_block"]

Block = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


def _with_noise(steps: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], block: int, scale: float) -> Block:
    """``run(x, generator)``: draw the block's noise ``(block, *x.shape)`` scaled by ``scale``, then ``steps``."""
    compiled = torch.compile(steps, fullgraph=True, dynamic=False)
    buffers: dict[tuple, torch.Tensor] = {}

    def run(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        key = (tuple(x.shape), x.dtype, x.device)
        xi = buffers.get(key)
        if xi is None:
            xi = buffers[key] = torch.empty((block, *x.shape), dtype=x.dtype, device=x.device)  # (k, *x)
        xi.normal_(0.0, scale, generator=generator)  # (k, *x.shape) the block's noise, scaled
        with torch.no_grad():
            return compiled(x, xi)

    return run


def sgld_block(
    loss: Callable[[torch.Tensor], torch.Tensor],
    *,
    lr: float,
    beta: float,
    weight_decay: float = 0.0,
    block: int = 64,
) -> Block:
    r"""``block`` SGLD steps of ``loss`` as one compiled call (see the module docstring).

    $$\theta \leftarrow \theta - \mathrm{lr}\,(\nabla L(\theta) + \lambda\theta) + \sqrt{2\beta\,\mathrm{lr}}\,\xi,
    \qquad \xi \sim \mathcal N(0, I)$$

    Args:
        loss: ``θ ↦ L(θ)``, a scalar, differentiable by ``torch.func.grad`` (its data closed over).
        lr: the step ``> 0``.
        beta: the temperature ``β ≥ 0``.
        weight_decay: ``λ ≥ 0`` (a Gaussian prior ``λ/2‖θ‖²``).
        block: steps per call.

    Returns:
        ``run(theta, generator) -> theta`` after ``block`` steps (``theta`` is not modified).
    """
    lr = check_positive("lr", lr)
    beta = check_nonnegative("beta", beta)
    weight_decay = check_nonnegative("weight_decay", weight_decay)
    block = check_int("block", block)
    grad = torch.func.grad(loss)

    def steps(theta: torch.Tensor, xi: torch.Tensor) -> torch.Tensor:
        for k in range(block):
            theta = theta - lr * (grad(theta) + weight_decay * theta) + xi[k]
        return theta

    return _with_noise(steps, block, math.sqrt(2.0 * beta * lr))


def euler_block(system: MeanFieldLangevin, *, dt: float, block: int = 64) -> Block:
    r"""``block`` Euler–Maruyama steps of ``system`` as one compiled call (see the module docstring).

    $$x \leftarrow x + \Delta t\, b(x) + \sqrt{2\beta\,\Delta t}\,\xi, \qquad \xi \sim \mathcal N(0, I)$$

    Args:
        system: a ``MeanFieldLangevin`` with a constant temperature (one number) and no
            projection (its drift does not depend on time).
        dt: the step ``> 0``.
        block: steps per call.

    Returns:
        ``run(x, generator) -> x`` after ``block`` steps, ``x`` of shape ``(B, M, d)`` (not modified).

    Raises:
        TypeError, ValueError: another system, a scheduled or per-replica temperature, or a projection.
    """
    if not isinstance(system, MeanFieldLangevin):
        raise TypeError(f"euler_block takes a meanfield.MeanFieldLangevin, got {type(system).__name__}")
    beta = system.beta.value if isinstance(system.beta, Constant) else None
    if beta is None or torch.is_tensor(beta):
        raise ValueError("euler_block needs one constant temperature (a number β, not a schedule or per replica)")
    if system.projection is not None:
        raise ValueError("euler_block does not project: use simulate for a system with a projection")
    dt = check_positive("dt", dt)
    block = check_int("block", block)

    def steps(x: torch.Tensor, xi: torch.Tensor) -> torch.Tensor:
        for k in range(block):
            x = x + dt * system.drift(0.0, x) + xi[k]
        return x

    return _with_noise(steps, block, math.sqrt(2.0 * float(beta) * dt))
