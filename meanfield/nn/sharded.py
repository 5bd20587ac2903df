r"""Particle layers sharded over the ranks of ``torch.distributed``: each rank owns ``M/world`` particles.

A particle layer computes $Y = 1/M \sum_i \varphi_{\theta_i}(X)$. Sharded, rank ``r`` holds the particles
``[start_r, stop_r)`` of every particle layer (its rows of each stacked parameter) and the whole batch; the
layer's output is

$$
Y = \sum_r \Big(\frac{1}{M} \sum_{i ∈ \text{shard}_r} φ_{θ_i}(X)\Big)
$$

one ``all_reduce`` of a ``Y``-sized tensor per layer and forward pass, and its backward the mirror image
(Megatron-LM's tensor-parallel operators, Shoeybi et al., 2019): the layer's input enters through an
identity whose backward all-reduces the input's gradient (each rank holds only its particles' part of it),
the output leaves through an all-reduce whose backward is the identity (the gradient of ``Y`` is already the
same on every rank). Everything outside the particle layers (embeddings, MLPs, norms, the loss) is
replicated: every rank computes the same numbers and gets the same gradients, with no gradient all-reduce.

The Langevin noise of a sharded parameter is drawn at its full ``(M, …)`` size from the optimizer's generator
(the same on every rank) and each rank takes its rows ([`Langevin`][meanfield.optim.langevin.Langevin], group key
``particle_rows``): a sharded run makes the single-process run's moves, particle by particle, for any number of
ranks, up to the summation order of the all-reduces (round-off). Drawing the whole noise on every rank costs
$O(M\cdot p)$ numbers per step per rank (``p`` parameters per particle), small beside the forward pass of
``M`` heads; checkpoints hold the full tensors ([`full_state_dict`][meanfield.nn.sharded.full_state_dict], [`full_optimizer_state`][meanfield.nn.sharded.full_optimizer_state]),
so a run resumes on any number of ranks.

Only the default process group is used (``shard_particles`` shards over all ranks). ``particle_outputs``,
``attention_maps``, ``prune`` and ``subsample`` of a sharded layer see the rank's own particles;
[`particle_parameter`][meanfield.nn.sharded.particle_parameter] gathers a stacked parameter for diagnostics of the whole law.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from meanfield.nn.particles import ParticleLayer

__all__ = [
    "ParticleShard",
    "shard_particles",
    "sharded_layers",
    "particle_parameter",
    "full_state_dict",
    "load_full_state_dict",
    "full_optimizer_state",
    "load_full_optimizer_state",
]


@dataclass(frozen=True)
class ParticleShard:
    """The particles ``[start, stop)`` of ``M`` that this rank holds in a sharded layer."""

    start: int
    stop: int
    M: int


def _world() -> tuple[int, int]:
    """``(world, rank)`` of the default process group, ``(1, 0)`` without one."""
    if not dist.is_available() or not dist.is_initialized():
        return 1, 0
    return dist.get_world_size(), dist.get_rank()


class _CopyToShards(torch.autograd.Function):
    """Identity forward; backward: the sum over ranks of the input's gradient (each rank's particles' part)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad


class _SumOverShards(torch.autograd.Function):
    """Forward: the sum over ranks (``all_reduce``); backward: identity (the output's gradient is replicated)."""

    @staticmethod
    def forward(ctx: Any, y: torch.Tensor) -> torch.Tensor:
        y = y.contiguous().clone()
        dist.all_reduce(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


def _enter(module: nn.Module, args: tuple) -> tuple | None:
    if not args or not torch.is_tensor(args[0]):  # a layer without an input (a particle cloud)
        return None
    return (_CopyToShards.apply(args[0]), *args[1:])


def _leave(module: nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
    shard: ParticleShard = module.particle_shard
    # the layer averaged its own m particles: (1/m) Σ_local, times m/M, summed over the ranks: (1/M) Σ_all
    return _SumOverShards.apply(out * ((shard.stop - shard.start) / shard.M))


def sharded_layers(model: nn.Module) -> list[ParticleLayer]:
    """The sharded particle layers of ``model`` (those [`shard_particles`][meanfield.nn.sharded.shard_particles] split), in module order."""
    return [m for m in model.modules() if getattr(m, "particle_shard", None) is not None]


def shard_particles(model: nn.Module) -> nn.Module:
    """Split every particle layer of ``model`` over the ranks of the default process group, in place.

    Each [`ParticleLayer`][meanfield.nn.particles.ParticleLayer] keeps the rows ``[start, stop)`` of its stacked parameters
    (`meanfield.stepping.sharded.shard_range`: ``M`` must be a multiple of the number of ranks), gets a
    ``particle_shard`` attribute ([`ParticleShard`][meanfield.nn.sharded.ParticleShard]) and hooks that make its output the average over all
    ``M`` particles (module docstring). Build the model identically on every rank first (same seed), and the
    optimizer after this call ([`meanfield.optim.Langevin.param_groups_for`][meanfield.optim.langevin.Langevin.param_groups_for] reads the shards). Without a
    process group (or with one rank) the model is returned unchanged.

    Returns:
        ``model``.

    Raises:
        ValueError: a layer's ``M`` is not a multiple of the number of ranks, or the model is already sharded.
    """
    from meanfield.stepping.sharded import shard_range

    world, rank = _world()
    if world == 1:
        return model
    if sharded_layers(model):
        raise ValueError("the model is already sharded (shard_particles was called on it before)")
    layers = [m for m in model.modules() if isinstance(m, ParticleLayer)]
    for layer in layers:
        M = layer.n_particles
        try:
            start, stop = shard_range(M, world, rank)
        except ValueError:
            raise ValueError(
                f"{type(layer).__name__} has M = {M} particles, which do not split into {world} equal shards: "
                f"M must be a multiple of the number of ranks ({world})"
            ) from None
        for name in layer.particle_parameter_names:
            p = getattr(layer, name)
            setattr(layer, name, nn.Parameter(p.detach()[start:stop].clone(), requires_grad=p.requires_grad))
        layer.particle_shard = ParticleShard(start, stop, M)
        layer.register_forward_pre_hook(_enter)
        layer.register_forward_hook(_leave)
    return model


def _gather_rows(t: torch.Tensor) -> torch.Tensor:
    r"""Every rank's equal shard ``(m, …)`` stacked in rank order: $(\mathrm{world}\cdot m, \dots)$ on every rank."""
    parts = [torch.empty_like(t) for _ in range(_world()[0])]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts, 0)


def particle_parameter(layer: ParticleLayer, name: str) -> torch.Tensor:
    """The stacked parameter ``name`` of all ``M`` particles of ``layer`` (gathered from every rank when the
    layer is sharded: a collective, every rank must call it), detached."""
    p = getattr(layer, name).detach()
    return p if getattr(layer, "particle_shard", None) is None else _gather_rows(p)


def _sharded_keys(model: nn.Module) -> dict[str, ParticleShard]:
    """State-dict key → shard of every sharded parameter of ``model``."""
    keys = {}
    for prefix, module in model.named_modules():
        shard = getattr(module, "particle_shard", None)
        if shard is not None:
            for name in module.particle_parameter_names:
                keys[f"{prefix}.{name}" if prefix else name] = shard
    return keys


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` with every sharded parameter gathered to its full ``(M, …)`` (a collective):
    the state dict of the unsharded model."""
    keys = _sharded_keys(model)
    return {k: _gather_rows(v) if k in keys else v for k, v in model.state_dict().items()}


def load_full_state_dict(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load an unsharded state dict ([`full_state_dict`][meanfield.nn.sharded.full_state_dict], or a single-process run's) into a sharded model:
    each rank takes its rows."""
    keys = _sharded_keys(model)
    state = {k: v[keys[k].start : keys[k].stop] if k in keys else v for k, v in state.items()}
    model.load_state_dict(state)


def _sharded_slots(optimizer: torch.optim.Optimizer) -> dict[int, tuple[int, int, int]]:
    """Index of each sharded parameter in ``optimizer.state_dict()`` → ``(start, stop, M)``."""
    slots, index = {}, 0
    for group in optimizer.param_groups:
        rows = group.get("particle_rows")
        for _ in group["params"]:
            if rows is not None:
                slots[index] = (int(rows[0]), int(rows[1]), int(group["n_particles"]))
            index += 1
    return slots


def _per_particle(v: Any, rows: int) -> bool:
    return torch.is_tensor(v) and v.dim() > 0 and v.shape[0] == rows


def full_optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``optimizer.state_dict()`` with the per-coordinate state of sharded parameters (Adam's moments) gathered
    to full size (a collective); the generators are the same on every rank."""
    state = optimizer.state_dict()
    slots = _sharded_slots(optimizer)
    for i, entry in state["state"].items():
        if i in slots:
            start, stop, _ = slots[i]
            state["state"][i] = {
                k: _gather_rows(v) if _per_particle(v, stop - start) else v for k, v in entry.items()
            }
    return state


def load_full_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load [`full_optimizer_state`][meanfield.nn.sharded.full_optimizer_state]'s (or a single-process run's) state: each rank takes its rows."""
    slots = _sharded_slots(optimizer)
    entries = {}
    for i, entry in state["state"].items():
        if i in slots:
            start, stop, M = slots[i]
            entry = {k: v[start:stop] if _per_particle(v, M) else v for k, v in entry.items()}
        entries[i] = entry
    optimizer.load_state_dict({**state, "state": entries})
