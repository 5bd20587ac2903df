"""Tests of :mod:`meanfield.nn.cloud`."""

from __future__ import annotations

import math
import re

import pytest
import torch

from meanfield.drift.potentials import DoubleWell, Quadratic
from meanfield.nn.cloud import ParticleCloud

F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_particle_cloud_initial_particles_are_init_scale_times_standard_normals():
    """``x = init_scale·N(0, I)`` from the generator (replayed by hand), in the dtype asked; ``k`` kept as a
    float, the confinement as given; on the device asked (``meta``). Negative control: another seed."""
    V = DoubleWell()
    cloud = ParticleCloud(7, 3, V, 2, init_scale=0.5, generator=_gen(4), dtype=F64)
    x = 0.5 * torch.randn(7, 3, generator=_gen(4), dtype=F64)
    torch.testing.assert_close(cloud.x.detach(), x, rtol=0, atol=0)
    assert isinstance(cloud.x, torch.nn.Parameter) and cloud.x.dtype == F64
    assert cloud.k == 2.0 and type(cloud.k) is float and cloud.d == 3 and cloud.confinement is V
    assert cloud.n_particles == 7
    assert cloud.extra_repr() == "n_particles=7, d=3, confinement=DoubleWell(), k=2.0"
    assert not torch.equal(cloud.x, ParticleCloud(7, 3, V, 2, init_scale=0.5, generator=_gen(5), dtype=F64).x)
    default = ParticleCloud(4, 2, Quadratic(1.0), generator=_gen(4))
    torch.testing.assert_close(default.x.detach(), torch.randn(4, 2, generator=_gen(4)), rtol=0, atol=0)
    assert default.k == 0.0 and default.x.dtype == torch.float32
    meta = ParticleCloud(4, 2, Quadratic(1.0), generator=_gen(4), device="meta")
    assert meta.x.device.type == "meta" and tuple(meta.x.shape) == (4, 2)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"n_particles": 0}, ValueError, "n_particles must be ≥ 1, got 0"),
        ({"n_particles": 2.0}, TypeError, "n_particles must be an int, got float"),
        ({"n_particles": True}, TypeError, "n_particles must be an int, got bool"),
        ({"d": 0}, ValueError, "d must be ≥ 1, got 0"),
        ({"d": "2"}, TypeError, "d must be an int, got str"),
        (
            {"confinement": "quadratic"},
            TypeError,
            "confinement must be a meanfield.drift.potentials.Confinement, got 'quadratic'",
        ),
        ({"k": math.inf}, ValueError, "k must be finite, got inf"),
        ({"k": "1"}, TypeError, "k must be a real number, got str"),
        ({"init_scale": math.nan}, ValueError, "init_scale must be finite, got nan"),
        ({"dtype": torch.int32}, TypeError, "dtype must be a floating-point torch.dtype"),
    ],
)
def test_particle_cloud_refuses_bad_arguments_by_name(kwargs, error, message):
    """Every argument check of the constructor, word for word (case included)."""
    args = {"n_particles": 3, "d": 2, "confinement": Quadratic(1.0), **kwargs}
    with pytest.raises(error, match="^" + re.escape(message)):
        ParticleCloud(**args)


F64_2, F32 = torch.float64, torch.float32


def test_cloud_initial_particles_from_the_global_generator_any_scale_and_repr():
    """``generator=None``: torch's global generator (``manual_seed`` replayed); ``init_scale`` multiplies
    the standard normals (0 gives zeros, a negative scale is allowed); a one-element tensor ``k`` becomes a
    float; the default device is the CPU; ``repr`` shows ``extra_repr``; the stacked parameter is named
    ``x``."""
    torch.manual_seed(11)
    cloud = ParticleCloud(5, 2, Quadratic(2.0), torch.tensor(0.5), init_scale=-2.0, dtype=F64_2)
    torch.manual_seed(11)
    assert torch.equal(cloud.x.detach(), -2.0 * torch.randn(5, 2, dtype=F64_2))
    assert cloud.x.device.type == "cpu" and cloud.k == 0.5 and type(cloud.k) is float
    assert ParticleCloud.particle_parameter_names == ("x",) and cloud.n_particles == 5 and cloud.d == 2
    assert repr(cloud) == "ParticleCloud(n_particles=5, d=2, confinement=Quadratic(a=2.0), k=0.5)"
    seeded = ParticleCloud(4, 3, Quadratic(1.0), init_scale=0.5, generator=_gen(2), dtype=F64_2)
    assert torch.equal(seeded.x.detach(), 0.5 * torch.randn(4, 3, generator=_gen(2), dtype=F64_2))
    zero = ParticleCloud(3, 4, Quadratic(1.0), init_scale=0.0, generator=_gen(1))
    assert torch.equal(zero.x.detach(), torch.zeros(3, 4))
    assert zero.x.requires_grad


def test_cloud_refuses_a_non_float_dtype_word_for_word():
    with pytest.raises(
        TypeError,
        match=r"^dtype must be a floating-point torch\.dtype \(e\.g\. torch\.float32\) or None, got torch\.int32$",
    ):
        ParticleCloud(3, 2, Quadratic(1.0), dtype=torch.int32)
    with pytest.raises(TypeError, match=r"^init_scale must be a real number, got NoneType$"):
        ParticleCloud(3, 2, Quadratic(1.0), init_scale=None)
    with pytest.raises(
        TypeError, match=r"^confinement must be a meanfield\.drift\.potentials\.Confinement, got None$"
    ):
        ParticleCloud(3, 2, None)
