"""Particle layers: attention heads and neurons as the particles of a mean-field law.

- :class:`ParticleAttention` / :class:`CausalParticleAttention`: ``Y = 1/M Σ_i v_{θ_i}(X)`` over M heads.
- :class:`FeatureParticles`: ``f(x) = 1/M Σ_i a_i σ(w_i · x)`` over M neurons.
- :class:`TransformerLM`: a pre-norm causal language model whose attention is multi-head
  (:class:`CausalSelfAttention`) or particle attention, with residual step ``Δt``.

Both are :class:`ParticleLayer`\\ s: parameters stacked with a leading particle axis, ``n_particles``,
``prune(indices)``, ``subsample(k, strategy)`` (strategies in :data:`SUBSAMPLE_STRATEGIES`),
``importance(X, loss)`` and ``particle_outputs(X)``.

:func:`free_energy` (:mod:`meanfield.nn.gibbs`): ``F = L(ρ) + Σ_ℓ (λ/2·E|θ|² − β·H(ρ_ℓ))`` of a network
trained by :class:`~meanfield.optim.Langevin`, from its layers' particles.
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
