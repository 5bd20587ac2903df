"""The Langevin optimizer: one Euler–Maruyama step of (preconditioned) mean-field Langevin dynamics per call.

For every parameter ``θ`` of a param group with noise, one [`Langevin.step`][meanfield.optim.langevin.Langevin.step] is

    θ ← Π( θ − η_eff ⊙ g + sqrt(2 · β_t · η_eff) ⊙ ξ ),   ξ ~ N(0, I),

- ``g`` is the drift direction: the gradient ``M·∂L/∂θ`` (``drift="sgd"``, ``η_eff = lr``) or the
  bias-corrected Adam mean ``m̂`` of those gradients (``drift="adam"``, ``η_eff = lr/(sqrt(v̂) + ε)`` per
  coordinate: preconditioned Langevin; for a group with noise the defaults are ``β1 = 0``, so ``m̂ = g``,
  the RMSprop-preconditioned drift of pSGLD, and ``ε = 1``, so ``η_eff ≤ lr``),
- ``M`` is the number of particles of the group (the mean-field scaling, below),
- ``β_t`` is the temperature at step ``t`` (a number or a schedule from [`meanfield.schedules`][meanfield.schedules]),
- ``Π`` is an optional projection ([`Clip`][meanfield.projections.Clip], [`Sphere`][meanfield.projections.Sphere], or a particle layer's own ``project_``).

Groups without noise (embeddings, norms) take the plain SGD/Adam step ``θ ← θ − η_eff ⊙ g``.

**Temperature contract.** With ``drift="sgd"`` the step is the Euler–Maruyama discretisation (time step
``lr``) of ``dθ = −∇F dt + sqrt(2β) dW``, whose stationary law is the Gibbs law ``∝ exp(−F/β)``; the discrete
chain's law differs from it by O(lr) (for ``F = a/2 θ²`` the chain's stationary variance is
``β/(a(1 − lr·a/2))``, not ``β/a``). With ``drift="adam"`` and preconditioned noise (the default) the step
discretises ``dθ = −P∇F dt + sqrt(2βP) dW`` with the diagonal preconditioner ``P = diag(η_eff/lr)``; for a
constant ``P`` the Gibbs law ``∝ exp(−F/β)`` is still stationary, and for the slowly varying ``P`` of Adam it
is the target to first order (the Itô correction ``β ∇·P`` is neglected, as in pSGLD, Li et al. 2016).

*The first step cannot explode.* Bias-corrected Adam has ``v̂₁ = g₁²``, so with a tiny ``ε``
``η_eff = lr/(|g₁| + ε)`` is unbounded where a first gradient is small (on a one-layer causal LM with
``CausalParticleAttention(M=16)``, β = lr = 1e-3, ε = 1e-8: ``η_eff`` up to 1.5e3, weights kicked 5.6 × their
RMS). ``ε`` is a floor on ``sqrt(v̂)`` in the units of the Wasserstein gradient (pSGLD's λ), so
``η_eff ≤ lr/ε`` always; groups with noise default to ``ε = 1``: the preconditioner can shorten the SDE's time
step ``lr`` (where the gradients' RMS exceeds 1) but never lengthen it, so the chain is never less stable than
the SGD chain at ``lr``, and a first step with small gradients is the SGD step (noise/drift ratio
``sqrt(2β/(lr·⟨g²⟩))``). A smaller ``ε`` lets Adam lengthen steps by up to ``1/ε``.

*Momentum.* With ``β1 > 0`` the drift uses the running mean ``m̂`` of past gradients and the chain is no
longer Euler–Maruyama: on ``F = a/2 θ²`` with a constant step ``h = η_eff`` and ``u = h·a``, the linear chain
``(θ, m)`` has the stationary variance (the discrete Lyapunov solution, [`momentum_variance_factor`][meanfield.optim.conventions.momentum_variance_factor])

    Var θ = β/a · 2(1 − β1² + 2β1u)/((1 − β1)(2(1 + β1) − (1 − β1)u)) = β/a · (1 + (u/2)(1+β1)/(1−β1) + O(u²)),

the EM bias ``u/2`` multiplied by ``(1 + β1)/(1 − β1)`` (×19 at β1 = 0.9: 1.29 β/a at u = 0.03), unbounded as
``β1 → 1``. Groups with noise therefore default to ``β1 = 0`` (``m̂ = g``: the drift's noise matches it), and
an explicit ``β1 > 0`` on a noisy group warns once. With ``noise_preconditioned=False``
an Adam drift gets the scalar noise ``sqrt(2β·lr) ξ``: the chain discretises
``dθ = −P∇F dt + sqrt(2β) dW``, which for a constant scalar ``P = p·I`` samples ``∝ exp(−p·F/β)``
(temperature ``β/p``) and for a non-scalar ``P`` is not a Gibbs law at all (it warns once).

**Mean-field scaling.** A particle layer computes ``f = 1/M Σ_i φ(θ_i) = ∫ φ dρ_M`` with
``ρ_M = 1/M Σ_i δ_{θ_i}``; the loss is ``L(θ_1, …, θ_M) = F(ρ_M)``. Moving particle ``i`` by ``ε v`` moves
``ρ_M`` by the mass ``1/M`` at ``θ_i``, so by the chain rule for the first variation ``δF/δρ``

    ∂L/∂θ_i = (1/M) ∇_θ (δF/δρ)(ρ_M, θ_i),   i.e.   M·∂L/∂θ_i = ∇_θ (δF/δρ)(θ_i),

the Wasserstein gradient, which is O(1) whatever M. A group with ``n_particles = M`` therefore multiplies
its gradients by ``M`` (``mean_field_scaling=False`` switches it off). The M-particle chain then samples
``∝ exp(−M·L/β)``, whose one-particle marginal tends to the mean-field fixed point
``ρ ∝ exp(−(δF/δρ)(ρ, ·)/β)`` as ``M → ∞``. With an Adam drift the gradients are not touched: Adam of
``M·g`` is Adam of ``g`` with ``ε/M`` and weight decay ``λ/M``, and ``η_eff`` carries the factor ``1/M``
(the moments in the state are those of the raw gradients ``g``).

**Temperature conventions.** The seeds write the step without ×M: ``θ ← θ − η_s∇L + sqrt(2β_s η_s)ξ``,
which samples ``∝ exp(−L/β_s)``. It is this optimizer's chain with ``lr = η_s/M`` and ``β = M·β_s``
(``lr·M∇L = η_s∇L`` and ``2β·lr = 2β_sη_s``): the same β is M times another temperature. A group's
``temperature_convention`` says which β it is given: ``"mean_field"`` (default; the M-particle chain samples
``∝ exp(−M·L/β)``, the mean-field law ``∝ exp(−δF/δρ/β)``) or ``"loss"`` (the seeds' ``β_s``; the noise uses
``M·β_s``, ``M`` the factor applied to the gradients).

**Speed.** Per param group and (device, dtype) one fused drift update (``torch._fused_adam_`` or
``torch._foreach_add_``), one flat normal draw for all the noisy parameters from the optimizer's own
``torch.Generator`` (split into views), three flat passes over ``v`` (``sqrt``, ``+ε``, ``rsqrt``) and one
``_foreach_addcmul_`` for the preconditioned noise, after one reduction that checks the gradients are finite.
torch's CPU ``normal_`` runs on one thread and dominates the step, so on the CPU a large draw runs in a
background thread while the caller's thread applies the drift (the numbers drawn are the same either way).
[`Langevin.last_stats`][meanfield.optim.langevin.Langevin.last_stats] is computed when read, not during the step.

**Layout.** One module per job: `langevin` (the optimizer: param groups, the order of
a step, checkpoints), `drift` (SGD; Adam and its preconditioner),
`noise` (the draw, counter-based blocks, the background draw), `stats`
([`LangevinStats`][meanfield.optim.stats.LangevinStats]), `conventions` (drift rules, temperature conventions, defaults,
[`momentum_variance_factor`][meanfield.optim.conventions.momentum_variance_factor]), `groups` (a group's options),
`buckets` (the flat layout), `layers` (the groups of a model with
particle layers); `kinetic` ([`KineticLangevin`][meanfield.optim.kinetic.KineticLangevin]: kinetic Langevin, BAOAB steps with
a velocity per parameter; heavy-ball momentum SGD at β = 0).
"""

from meanfield.optim.conventions import (
    DRIFTS,
    NOISY_BETAS,
    NOISY_EPS,
    PLAIN_BETAS,
    PLAIN_EPS,
    TEMPERATURE_CONVENTIONS,
    momentum_variance_factor,
)
from meanfield.optim.kinetic import KineticLangevin
from meanfield.optim.langevin import Langevin
from meanfield.optim.layers import LayerProjection
from meanfield.optim.stats import LangevinStats
from meanfield.projections import Clip, Projection, Sphere

__all__ = [
    "Langevin",
    "KineticLangevin",
    "LangevinStats",
    "Projection",
    "Clip",
    "Sphere",
    "LayerProjection",
    "DRIFTS",
    "TEMPERATURE_CONVENTIONS",
    "NOISY_BETAS",
    "PLAIN_BETAS",
    "NOISY_EPS",
    "PLAIN_EPS",
    "momentum_variance_factor",
]
