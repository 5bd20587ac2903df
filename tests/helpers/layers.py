"""Particle layers built small for the tests of ``meanfield.nn`` (attention, features, tokens) and their
comparison helper."""

from __future__ import annotations

import torch

from meanfield.nn import (
    CausalParticleAttention,
    FeatureParticles,
    ParticleAttention,
)

DT = torch.float64


TOL = 1e-12


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def attention(d=12, M=3, h=None, seed=0, causal=False):
    cls = CausalParticleAttention if causal else ParticleAttention
    return cls(d, M, h, generator=gen(seed), dtype=DT)


def features(d=4, M=6, seed=0, **kw):
    return FeatureParticles(d, M, "tanh", generator=gen(seed), dtype=DT, **kw)


def tokens(B=2, T=5, d=12, seed=1):
    return torch.randn(B, T, d, generator=gen(seed), dtype=DT)


def assert_close(a, b, tol=TOL):
    err = float((a - b).detach().abs().max())
    assert err <= tol, f"max abs difference {err:.3e} > {tol:.1e}"


def vector_features(d=4, M=6, k=3, seed=0):
    """FeatureParticles with ``a_i ∈ R^k`` and random biases (their init is 0: made non-zero for the tests)."""
    f = features(d, M, seed, out_features=k, bias=True)
    with torch.no_grad():
        f.b.copy_(torch.randn(M, generator=gen(seed + 100), dtype=DT))
    return f


def with_particles(layer, **params):
    """A copy of ``layer`` whose stacked parameters are replaced by ``params`` (an independent rebuild)."""
    first = next(iter(params.values()))
    if isinstance(layer, ParticleAttention):
        new = type(layer)(layer.d_model, first.shape[0], layer.d_head, dtype=DT)
    else:
        new = FeatureParticles(
            layer.d_in,
            first.shape[0],
            layer.activation,
            layer.A,
            layer.sphere,
            out_features=layer.out_features,
            bias=layer.has_bias,
            dtype=DT,
        )
    with torch.no_grad():
        for name, value in params.items():
            getattr(new, name).copy_(value)
    return new


def stacked(layer):
    return {n: getattr(layer, n).detach() for n in layer.particle_parameter_names}
