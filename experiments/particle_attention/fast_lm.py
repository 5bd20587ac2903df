"""The ``lm`` task with two speed options for the 6 × 256 study (issue 27): bf16 autocast and ``torch.compile``.

The task is :data:`meanfield.tasks.language.LM` itself; its ``[model]`` table takes two more keys:

- ``autocast = "none"`` (default) or ``"bf16"``: the *training* loss (forward and backward) runs under
  ``torch.autocast(device, dtype=torch.bfloat16)``. Parameters, gradients, the optimizer's moments and its
  noise stay float32 (autocast casts inside the matmuls only; cross-entropy runs in float32). The evaluation
  stays float32, so that every metric is measured the same way as a float32 run's.
- ``compile = false`` (default) or ``true``: the model's forward is compiled (``nn.Module.compile``: the
  module, its parameters and its ``state_dict`` keys are unchanged, so checkpoints are a float32 run's). The
  evaluation runs the uncompiled forward (the probes deep-copy the model).

Use it by its import path, with this folder on ``PYTHONPATH`` (the sweep's workers import it too)::

    PYTHONPATH=experiments/particle_attention meanfield run experiments/particle_attention/scale.toml \\
        --preset smoke --set task=fast_lm:TASK --set model.autocast=bf16

``benchmarks/lm_step.py`` times both options; ``precision_check.py`` compares the loss curves of float32
and the alternative over paired seeds. Neither option is adopted by ``scale.toml`` (it runs the built-in
``lm`` task, float32) unless those show it faster *and* the science unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Literal

import torch

from meanfield.config import ConfigError
from meanfield.tasks import Experiment
from meanfield.tasks.language import LM, LMData, LMModel

__all__ = ["FastLMModel", "TASK", "autocast_context", "bf16_supported"]

BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""``/proc/cpuinfo`` flags of CPUs with bf16 arithmetic (AVX-512 BF16, AMX BF16)."""


def bf16_supported(device: torch.device | str = "cpu") -> bool:
    """Whether bf16 autocast is worth trying here: a CUDA device with bf16, or a CPU with bf16 instructions."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return any(flag in flags for flag in BF16_FLAGS)


def autocast_context(kind: str, device: torch.device | str = "cpu"):
    """``torch.autocast`` for ``kind = "bf16"``, a null context for ``"none"``."""
    if kind == "none":
        return contextlib.nullcontext()
    if kind == "bf16":
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    raise ValueError(f"autocast must be 'none' or 'bf16', got {kind!r}")


@dataclass
class FastLMModel(LMModel):
    """``[model]`` of the ``lm`` task plus ``autocast`` and ``compile`` (see the module docstring)."""

    autocast: Literal["none", "bf16"] = "none"
    compile: bool = False


class _FastLM:
    Data = LMData
    Model = FastLMModel

    def build(
        self,
        data: LMData,
        model: FastLMModel,
        *,
        batch_size: int,
        seed: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> Experiment:
        if model.autocast == "bf16" and dtype != torch.float32:
            raise ConfigError("model.autocast = 'bf16' needs dtype = 'float32' (the parameters' dtype)")
        base = {f.name: getattr(model, f.name) for f in dataclasses.fields(LMModel)}
        exp = LM.build(data, LMModel(**base), batch_size=batch_size, seed=seed, device=device, dtype=dtype)
        net = exp.model
        if model.compile:
            net.compile()
        inner_loss, inner_evaluate = exp.loss, exp.evaluate

        def loss(batch):
            with autocast_context(model.autocast, device):
                return inner_loss(batch)

        def evaluate():
            compiled = getattr(net, "_compiled_call_impl", None)
            net._compiled_call_impl = None  # the probes deep-copy the model: evaluate the plain forward
            try:
                return inner_evaluate()
            finally:
                net._compiled_call_impl = compiled

        extra = [f"autocast {model.autocast}"] + (["compiled"] if model.compile else [])
        return dataclasses.replace(
            exp, loss=loss, evaluate=evaluate, description=f"{exp.description}; {', '.join(extra)}"
        )


TASK = _FastLM()
"""The ``lm`` task with ``model.autocast`` and ``model.compile``: ``task = "fast_lm:TASK"``."""
