"""Tests of :mod:`meanfield.optim.layers`."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from meanfield.nn.sharded import ParticleShard
from meanfield.optim import Langevin, LayerProjection
from meanfield.optim.layers import param_groups_for

F64 = torch.float64


TOL = 1e-13  # float64 rounding of a few operations on numbers of order one


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


class _Named(nn.Module):
    """A particle layer naming its particle parameters: ``w`` is one, ``c`` (also M rows) is not."""

    particle_parameter_names = ("w",)

    def __init__(self, M: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(M, 2, dtype=F64))
        self.c = nn.Parameter(torch.zeros(M, dtype=F64))
        self.n_particles = M
        self.projected = 0

    def project_(self) -> None:
        self.projected += 1


class _Shaped(nn.Module):
    """A particle layer without names (its parameters with M rows are the particles), sharded: rows [4, 7) of 12."""

    def __init__(self, M: int) -> None:
        super().__init__()
        self.x = nn.Parameter(torch.zeros(M, 2, dtype=F64))
        self.y = nn.Parameter(torch.zeros(M, dtype=F64))
        self.z = nn.Parameter(torch.zeros(M + 1, dtype=F64))
        self.n_particles = M
        self.particle_shard = ParticleShard(4, 4 + M, 12)


class _Frozen(nn.Module):
    """A particle layer whose particles are all frozen (no group)."""

    def __init__(self, M: int) -> None:
        super().__init__()
        self.f = nn.Parameter(torch.zeros(M, dtype=F64), requires_grad=False)
        self.n_particles = M


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(2, 2, dtype=F64)
        self.shaped = _Shaped(3)
        self.frozen = _Frozen(5)
        self.named = _Named(4)
        self.out = nn.Linear(2, 1, dtype=F64)


def test_param_groups_for_builds_the_documented_groups():
    """The groups of a model with a sharded unnamed layer, a frozen layer, a named layer with ``project_()``
    and plain modules before and after them, in model order: one per particle layer with its particles
    (names, or M rows), ``n_particles`` (the shard's total M and its ``particle_rows``), noise, the layer's
    projection, the particle options; the frozen layer none; then every other trainable parameter in one plain
    group with ``others``."""
    model = _Model()
    groups = param_groups_for(model, others={"lr": 0.5}, lr=0.01)
    assert len(groups) == 3
    shaped, named, rest = groups
    assert [id(p) for p in shaped.pop("params")] == [id(model.shaped.x), id(model.shaped.y)]
    assert shaped == {"n_particles": 12, "particle_rows": (4, 7), "noise": True, "lr": 0.01}
    assert [id(p) for p in named.pop("params")] == [id(model.named.w)]
    projection = named.pop("projection")
    assert type(projection) is LayerProjection and projection.layer is model.named
    assert named == {"n_particles": 4, "noise": True, "lr": 0.01}
    plain = [
        model.inp.weight,
        model.inp.bias,
        model.shaped.z,
        model.named.c,
        model.out.weight,
        model.out.bias,
    ]
    assert [id(p) for p in rest.pop("params")] == [id(p) for p in plain]
    assert rest == {"noise": False, "n_particles": 1, "lr": 0.5}
    assert Langevin.param_groups_for(_Model(), others={"lr": 0.5}, lr=0.01)[1]["n_particles"] == 4


def test_param_groups_for_without_other_parameters_and_bad_model():
    """A model of particles only gives no plain group; a model that is not a module is refused, named."""
    layer = _Named(3)
    layer.c.requires_grad_(False)
    groups = param_groups_for(layer)
    assert len(groups) == 1 and [id(p) for p in groups[0]["params"]] == [id(layer.w)]
    with pytest.raises(TypeError, match=r"^model must be a torch.nn.Module, got str$"):
        param_groups_for("model")


def test_layer_projection_calls_the_layer_once_per_step_and_describes_itself():
    """:class:`LayerProjection` calls the layer's ``project_()`` once per step whatever the number of tensors,
    describes itself as ``{"kind": "layer", "layer": <class name>}``, and refuses a module without
    ``project_()``, naming its class."""
    layer = _Named(3)
    projection = LayerProjection(layer)
    projection.project_all_([layer.w, layer.c])
    assert layer.projected == 1
    x = torch.ones(2)
    assert projection.project_(x) is x and layer.projected == 2
    assert projection.to_dict() == {"kind": "layer", "layer": "_Named"}
    assert repr(projection) == "LayerProjection(_Named)"
    with pytest.raises(
        TypeError, match=r"^LayerProjection needs a module with a project_\(\) method, got Linear$"
    ):
        LayerProjection(nn.Linear(1, 1))
    opt = Langevin(param_groups_for(layer), lr=0.1, beta=0.0, seed=0)
    layer.w.grad, layer.c.grad = torch.ones(3, 2, dtype=F64), torch.ones(3, dtype=F64)
    opt.step()
    assert layer.projected == 3  # one step: one call
    assert _max_diff(layer.w.detach(), torch.full((3, 2), -0.3, dtype=F64)) < TOL  # θ − lr·M·g, M = 3
    assert _max_diff(layer.c.detach(), torch.full((3,), -0.1, dtype=F64)) < TOL  # plain group: θ − lr·g
