"""torch.optim's per-step machinery only when it has something to do: one base for both Langevin optimizers.

``torch.optim.Optimizer.step`` is wrapped by torch in a profiler range and the step hooks, and ``zero_grad`` opens
a profiler range: a fixed cost per step that a small model run many times pays for nothing. [`DirectStep`][meanfield.optim.direct.DirectStep]
runs the optimizer's ``_step`` directly unless a hook is registered or the profiler is on (then
``_hooked_step``, ``torch.optim.Optimizer.profile_hook_step(_step)``, does exactly what torch would), and sets
gradients to ``None`` in a plain loop when no profiler range is wanted.

``_step`` runs the optimizer's ``_update`` with gradients off, as ``torch.no_grad()`` would, but by setting
the mode directly: the context manager's Python objects (four calls in and out) are a visible part of a small
model's step in a training loop (``benchmarks/peers.py``'s Bayesian logistic regression, d = 20), where the
forward and backward pass leave Python's code cold between steps.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

__all__ = ["DirectStep"]


class DirectStep:
    """A mixin placed before ``torch.optim.Optimizer``; the class defines ``_update()``, the step proper (run
    with gradients off)."""

    def _update(self) -> None:
        raise NotImplementedError

    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        if (
            self._optimizer_step_pre_hooks
            or self._optimizer_step_post_hooks
            or _global_optimizer_pre_hooks
            or _global_optimizer_post_hooks
            or torch._C._autograd._profiler_enabled()
        ):
            return self._hooked_step(closure)
        return self._step(closure)

    step.hooked = True  # type: ignore[attr-defined]  # torch.optim: do not wrap it (it calls the wrapper itself)

    def _step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        enabled = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)  # torch.no_grad(), without its context objects (module docstring)
        try:
            self._update()
        finally:
            torch._C._set_grad_enabled(enabled)
        return loss

    _hooked_step = torch.optim.Optimizer.profile_hook_step(_step)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """``torch.optim.Optimizer.zero_grad``; with ``set_to_none=True`` (its default) and the profiler off, a
        plain loop setting every ``p.grad`` to ``None`` (no profiler range to open: the same effect)."""
        if not set_to_none or torch._C._autograd._profiler_enabled():
            return super().zero_grad(set_to_none)
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None
        return None
