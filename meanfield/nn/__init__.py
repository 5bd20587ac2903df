"""Particle layers: attention heads and neurons as the particles of a mean-field law.

- [`ParticleAttention`][meanfield.nn.attention.ParticleAttention] / [`CausalParticleAttention`][meanfield.nn.attention.CausalParticleAttention]: ``Y = 1/M Σ_i v_{θ_i}(X)`` over M heads.
- [`FeatureParticles`][meanfield.nn.features.FeatureParticles]: ``f(x) = 1/M Σ_i a_i σ(w_i · x)`` over M neurons.
- [`TransformerLM`][meanfield.nn.transformer.TransformerLM]: a pre-norm causal language model whose attention is multi-head
  ([`CausalSelfAttention`][meanfield.nn.transformer.CausalSelfAttention]) or particle attention, with residual step ``Δt``.

Both are [`ParticleLayer`][meanfield.nn.particles.ParticleLayer]\\ s: parameters stacked with a leading particle axis, ``n_particles``,
``prune(indices)``, ``subsample(k, strategy)`` (strategies in [`SUBSAMPLE_STRATEGIES`][meanfield.nn.SUBSAMPLE_STRATEGIES]),
``importance(X, loss)`` and ``particle_outputs(X)``.

``free_energy`` ([`meanfield.nn.gibbs`][meanfield.nn.gibbs]): ``F = L(ρ) + Σ_ℓ (λ/2·E|θ|² − β·H(ρ_ℓ))`` of a network
trained by [`Langevin`][meanfield.optim.Langevin], from its layers' particles.
"""

from meanfield.nn.attention import CausalParticleAttention, ParticleAttention
from meanfield.nn.features import ACTIVATIONS, FeatureParticles
from meanfield.nn.gibbs import LayerEntropy, NetworkFreeEnergy, free_energy
from meanfield.nn.particles import (
    SUBSAMPLE_STRATEGIES,
    FarthestPoint,
    Importance,
    Medoids,
    ParticleLayer,
    Random,
    SubsampleStrategy,
)
from meanfield.nn.transformer import ATTENTIONS, CausalSelfAttention, TransformerLM

__all__ = [
    "ParticleAttention",
    "CausalParticleAttention",
    "FeatureParticles",
    "ACTIVATIONS",
    "ParticleLayer",
    "SubsampleStrategy",
    "Random",
    "Importance",
    "FarthestPoint",
    "Medoids",
    "SUBSAMPLE_STRATEGIES",
    "TransformerLM",
    "CausalSelfAttention",
    "ATTENTIONS",
    "free_energy",
    "NetworkFreeEnergy",
    "LayerEntropy",
]
