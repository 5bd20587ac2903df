r"""The Langevin optimizer: one Euler–Maruyama step of (preconditioned) mean-field Langevin dynamics per call.

For every parameter $\theta$ of a param group with noise, one [`Langevin.step`][meanfield.optim.langevin.Langevin.step] is

$$
\theta \leftarrow \Pi( \theta - \eta_{\mathrm{eff}} \odot g + \sqrt{2 \cdot \beta_t \cdot \eta_{\mathrm{eff}}} \odot \xi ), \qquad \xi \sim N(0, I),
$$

- ``g`` is the drift direction: the gradient $M\cdot\partial L/\partial \theta$ (``drift="sgd"``, $\eta_{\mathrm{eff}} = \operatorname{lr}$) or the
  bias-corrected Adam mean $\hat{m}$ of those gradients (``drift="adam"``, $\eta_{\mathrm{eff}} = \operatorname{lr}/(\sqrt{\hat{v}} + \varepsilon)$ per
  coordinate: preconditioned Langevin; for a group with noise the defaults are $\beta_1 = 0$, so $\hat{m} = g$,
  the RMSprop-preconditioned drift of pSGLD, and $\varepsilon = 1$, so $\eta_{\mathrm{eff}} \le \operatorname{lr}$),
- ``M`` is the number of particles of the group (the mean-field scaling, below),
- $\beta_t$ is the temperature at step ``t`` (a number or a schedule from [`meanfield.drift.schedules`][meanfield.drift.schedules]),
- $\Pi$ is an optional projection ([`Clip`][meanfield.drift.projections.Clip], [`Sphere`][meanfield.drift.projections.Sphere], or a particle layer's own ``project_``).

Groups without noise (embeddings, norms) take the plain SGD/Adam step $\theta \leftarrow \theta - \eta_{\mathrm{eff}} \odot g$.

**Temperature contract.** With ``drift="sgd"`` the step is the Euler–Maruyama discretisation (time step
``lr``) of $d\theta = -\nabla F dt + \sqrt{2\beta} dW$, whose stationary law is the Gibbs law $\propto \exp(-F/\beta)$; the discrete
chain's law differs from it by O(lr) (for $F = a/2 \theta^2$ the chain's stationary variance is
$\beta/(a(1 - \operatorname{lr}\cdot a/2))$, not $\beta/a$). With ``drift="adam"`` and preconditioned noise (the default) the step
discretises $d\theta = -P\nabla F dt + \sqrt{2\beta P} dW$ with the diagonal preconditioner $P = \operatorname{diag}(\eta_{\mathrm{eff}}/\operatorname{lr})$; for a
constant ``P`` the Gibbs law $\propto \exp(-F/\beta)$ is still stationary; Adam's ``P`` follows the recent squared
gradients, and without its Itô correction $\beta \nabla\cdot P$ (neglected, as in pSGLD, Li et al. 2016) the law is biased
beyond O(lr) unless ``P`` barely moves (docs/optim.md, "The temperature contract"; measured in the optimizer check).

*The first step cannot explode.* Bias-corrected Adam has $\hat{v}_1 = g_1^2$, so with a tiny $\varepsilon$
$\eta_{\mathrm{eff}} = \operatorname{lr}/(|g_1| + \varepsilon)$ is unbounded where a first gradient is small (on a one-layer causal LM with
``CausalParticleAttention(M=16)``, β = lr = 1e-3, ε = 1e-8: $\eta_{\mathrm{eff}}$ up to 1.5e3, weights kicked 5.6 × their
RMS). $\varepsilon$ is a floor on $\sqrt{\hat{v}}$ in the units of the Wasserstein gradient (pSGLD's λ), so
$\eta_{\mathrm{eff}} \le \operatorname{lr}/\varepsilon$ always; groups with noise default to $\varepsilon = 1$: the preconditioner can shorten the SDE's time
step ``lr`` (where the gradients' RMS exceeds 1) but never lengthen it, so the chain is never less stable than
the SGD chain at ``lr``, and a first step with small gradients is the SGD step (noise/drift ratio
$\sqrt{2\beta/(\operatorname{lr}\cdot\langle g^2\rangle)}$). A smaller $\varepsilon$ lets Adam lengthen steps by up to $1/\varepsilon$.

*Momentum.* With $\beta_1 > 0$ the drift uses the running mean $\hat{m}$ of past gradients and the chain is no
longer Euler–Maruyama: on $F = a/2 \theta^2$ with a constant step $h = \eta_{\mathrm{eff}}$ and $u = h\cdot a$, the linear chain
$(\theta, m)$ has the stationary variance (the discrete Lyapunov solution, [`momentum_variance_factor`][meanfield.optim.conventions.momentum_variance_factor])

$$
\operatorname{Var} \theta = \beta/a \cdot 2(1 - \beta_1^2 + 2\beta_1u)/((1 - \beta_1)(2(1 + \beta_1) - (1 - \beta_1)u)) = \beta/a \cdot (1 + (u/2)(1+\beta_1)/(1-\beta_1) + O(u^2)),
$$

the EM bias ``u/2`` multiplied by $(1 + \beta_1)/(1 - \beta_1)$ (×19 at β1 = 0.9: 1.29 β/a at u = 0.03), unbounded as
$\beta_1 \to 1$. Groups with noise therefore default to $\beta_1 = 0$ ($\hat{m} = g$: the drift's noise matches it), and
an explicit $\beta_1 > 0$ on a noisy group warns once. With ``noise_preconditioned=False``
an Adam drift gets the scalar noise $\sqrt{2\beta\cdot\operatorname{lr}} \xi$: the chain discretises
$d\theta = -P\nabla F dt + \sqrt{2\beta} dW$, which for a constant scalar $P = p\cdot I$ samples $\propto \exp(-p\cdot F/\beta)$
(temperature $\beta/p$) and for a non-scalar ``P`` is not a Gibbs law at all (it warns once).

**Mean-field scaling.** A particle layer computes $f = 1/M \sum_i \varphi(\theta_i) = \int \varphi d\rho_M$ with
$\rho_M = 1/M \sum_i \delta_{\theta_i}$; the loss is $L(\theta_1, \dots, \theta_M) = F(\rho_M)$. Moving particle ``i`` by $\varepsilon v$ moves
$\rho_M$ by the mass ``1/M`` at $\theta_i$, so by the chain rule for the first variation $\delta F/\delta \rho$

    ∂L/∂θ_i = (1/M) ∇_θ (δF/δρ)(ρ_M, θ_i),   i.e.   M·∂L/∂θ_i = ∇_θ (δF/δρ)(θ_i),

the Wasserstein gradient, which is O(1) whatever M. A group with ``n_particles = M`` therefore multiplies
its gradients by ``M`` (``mean_field_scaling=False`` switches it off). The M-particle chain then samples
$\propto \exp(-M\cdot L/\beta)$, whose one-particle marginal tends to the mean-field fixed point
$\rho \propto \exp(-(\delta F/\delta \rho)(\rho, \cdot)/\beta)$ as $M \to \infty$. With an Adam drift the gradients are not touched: Adam of
$M\cdot g$ is Adam of ``g`` with $\varepsilon/M$ and weight decay $\lambda/M$, and $\eta_{\mathrm{eff}}$ carries the factor ``1/M``
(the moments in the state are those of the raw gradients ``g``).

**Temperature conventions.** The seeds write the step without ×M: $\theta \leftarrow \theta - \eta_s\nabla L + \sqrt{2\beta_s \eta_s}\xi$,
which samples $\propto \exp(-L/\beta_s)$. It is this optimizer's chain with $\operatorname{lr} = \eta_s/M$ and $\beta = M\cdot \beta_s$
($\operatorname{lr}\cdot M\nabla L = \eta_s\nabla L$ and ``2β·lr = 2β_sη_s``): the same β is M times another temperature. A group's
``temperature_convention`` says which β it is given: ``"mean_field"`` (default; the M-particle chain samples
$\propto \exp(-M\cdot L/\beta)$, the mean-field law ``∝ exp(−δF/δρ/β)``) or ``"loss"`` (the seeds' $\beta_s$; the noise uses
$M\cdot \beta_s$, ``M`` the factor applied to the gradients).

**Speed.** Per param group and (device, dtype) one fused drift update (``torch._fused_adam_`` or
``torch._foreach_add_``), one flat normal draw for all the noisy parameters from the optimizer's own
``torch.Generator`` (split into views), three flat passes over ``v`` (``sqrt``, $+\varepsilon$, ``rsqrt``) and one
``_foreach_addcmul_`` for the preconditioned noise, after one reduction that checks the gradients are finite.
torch's CPU ``normal_`` runs on one thread and dominates the step, so on the CPU a large draw runs in a
background thread while the caller's thread applies the drift (the numbers drawn are the same either way).
[`Langevin.last_stats`][meanfield.optim.langevin.Langevin.last_stats] is computed when read, not during the step.

**Layout.** One module per job: `langevin` (the optimizer: param groups, the order of
a step, checkpoints), `drift` (SGD; Adam and its preconditioner),
`noise` (the draw, counter-based blocks, the background draw), `stats`
([`LangevinStats`][meanfield.optim.step_stats.LangevinStats]), `conventions` (drift rules, temperature conventions, defaults,
[`momentum_variance_factor`][meanfield.optim.conventions.momentum_variance_factor]), `groups` (a group's options),
`buckets` (the flat layout), `layers` (the groups of a model with
particle layers); `kinetic` ([`KineticLangevin`][meanfield.optim.kinetic.KineticLangevin]: kinetic Langevin, BAOAB steps with
a velocity per parameter; heavy-ball momentum SGD at β = 0).
"""

from meanfield.drift.projections import Clip, Projection, Sphere
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
from meanfield.optim.step_stats import LangevinStats

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
