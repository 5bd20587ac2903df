r"""Param groups of a model with particle layers: particles with noise and the ×M scaling, the rest plain.

A *particle layer* is a module with ``n_particles = M`` ([`meanfield.nn.ParticleLayer`][meanfield.nn.particles.ParticleLayer]): it computes
$1/M \sum_i \varphi(\theta_i)$, so its particles' gradients are multiplied by ``M`` and get the Langevin noise;
[`LayerProjection`][meanfield.optim.layers.LayerProjection] calls the layer's own ``project_()`` after each step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from meanfield._checks import check_int
from meanfield.drift.projections import Projection

__all__ = ["LayerProjection", "param_groups_for"]


class LayerProjection(Projection):
    """The projection a particle layer knows: calls ``layer.project_()`` (e.g. ``FeatureParticles``).

    Args:
        layer: a module with a ``project_()`` method that projects its own parameters in place.
    """

    def __init__(self, layer: nn.Module) -> None:
        if not callable(getattr(layer, "project_", None)):
            raise TypeError(
                f"LayerProjection needs a module with a project_() method, got {type(layer).__name__}"
            )
        self.layer = layer

    def project_(self, x: torch.Tensor) -> torch.Tensor:
        self.layer.project_()
        return x

    def project_all_(self, tensors: Sequence[torch.Tensor]) -> None:
        self.layer.project_()  # once per step, whatever the number of tensors

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "layer", "layer": <class name>}``: a description; the layer's owner rebuilds it."""
        return {"kind": "layer", "layer": type(self.layer).__name__}

    def __repr__(self) -> str:
        return f"LayerProjection({type(self.layer).__name__})"


def param_groups_for(
    model: nn.Module, *, others: dict[str, Any] | None = None, **particle_options: Any
) -> list[dict[str, Any]]:
    """Param groups for a model with particle layers: particles noisy and ×M, everything else plain.

    A *particle layer* is a submodule with an attribute ``n_particles = M``. Its particle parameters are
    the ones named in its ``particle_parameter_names`` (as in [`meanfield.nn.ParticleLayer`][meanfield.nn.particles.ParticleLayer]) or,
    without that attribute, its parameters whose leading dimension is ``M``; a parameter belongs to the
    innermost such layer. Each layer gives one group ``{"params": …, "n_particles": M, "noise": True}``
    (plus ``"projection": LayerProjection(layer)`` when the layer has a ``project_()`` method), updated by
    ``particle_options``; all other parameters form one last group ``{"noise": False,
    "n_particles": 1}`` updated by ``others`` (e.g. its own ``lr`` or ``weight_decay``).

    Args:
        model: the model.
        others: options of the group of the non-particle parameters.
        **particle_options: options of every particle group (e.g. ``projection=Sphere()``).

    Returns:
        A list of param-group dicts for [`Langevin`][meanfield.optim.langevin.Langevin] (the last one is omitted when empty).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    claimed: set[int] = set()
    groups: list[dict[str, Any]] = []
    for _, module in reversed(list(model.named_modules())):  # innermost layers first
        M = getattr(module, "n_particles", None)
        if M is None:
            continue
        M = check_int(f"{type(module).__name__}.n_particles", int(M))
        shard = getattr(module, "particle_shard", None)  # meanfield.nn.sharded: this rank's rows of M
        names = getattr(module, "particle_parameter_names", None)
        if names is not None:
            candidates = [getattr(module, name) for name in names]
        else:
            candidates = [p for p in module.parameters() if p.dim() >= 1 and p.shape[0] == M]
        params = [p for p in candidates if id(p) not in claimed and p.requires_grad]
        if not params:
            continue
        claimed.update(id(p) for p in params)
        group: dict[str, Any] = {"params": params, "n_particles": M, "noise": True}
        if shard is not None:
            group.update(n_particles=shard.M, particle_rows=(shard.start, shard.stop))
        if callable(getattr(module, "project_", None)):
            group["projection"] = LayerProjection(module)
        group.update(particle_options)
        groups.append(group)
    groups.reverse()  # model order
    rest = [p for p in model.parameters() if id(p) not in claimed and p.requires_grad]
    if rest:
        groups.append({"params": rest, "noise": False, "n_particles": 1, **(others or {})})
    return groups
