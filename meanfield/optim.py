"""The Langevin optimizer: one Euler–Maruyama step of (preconditioned) mean-field Langevin dynamics per call.

For every parameter ``θ`` of a param group with noise, one :meth:`Langevin.step` is

    θ ← Π( θ − η_eff ⊙ g + sqrt(2 · β_t · η_eff) ⊙ ξ ),   ξ ~ N(0, I),

- ``g`` is the drift direction: the gradient ``M·∂L/∂θ`` (``drift="sgd"``, ``η_eff = lr``) or the
  bias-corrected Adam mean ``m̂`` of those gradients (``drift="adam"``, ``η_eff = lr/(sqrt(v̂) + ε)`` per
  coordinate: preconditioned Langevin; for a group with noise the defaults are ``β1 = 0``, so ``m̂ = g``,
  the RMSprop-preconditioned drift of pSGLD, and ``ε = 1``, so ``η_eff ≤ lr``),
- ``M`` is the number of particles of the group (the mean-field scaling, below),
- ``β_t`` is the temperature at step ``t`` (a number or a schedule from :mod:`meanfield.schedules`),
- ``Π`` is an optional projection (:class:`Clip`, :class:`Sphere`, or a particle layer's own ``project_``).

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
``(θ, m)`` has the stationary variance (the discrete Lyapunov solution, :func:`momentum_variance_factor`)

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
:attr:`Langevin.last_stats` is computed when read, not during the step.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from meanfield import _background
from meanfield._checks import check_int, check_nonnegative, check_positive
from meanfield.projections import Clip, Projection, Sphere, projection_from_dict
from meanfield.schedules import Schedule, as_schedule, schedule_from_dict, schedule_to_data
from meanfield.seeds import derive_seed

__all__ = [
    "Langevin",
    "LangevinStats",
    "Projection",
    "Clip",
    "Sphere",
    "LayerProjection",
    "DRIFTS",
    "TEMPERATURE_CONVENTIONS",
    "momentum_variance_factor",
]

DRIFTS: tuple[str, ...] = ("sgd", "adam")
"""The drift rules a param group can use."""

TEMPERATURE_CONVENTIONS: tuple[str, ...] = ("mean_field", "loss")
"""What a group's ``β`` means: the temperature of the mean-field law (``"mean_field"``, the default) or of the
raw loss ``L`` (``"loss"``, the seeds' convention ``θ ← θ − η∇L + sqrt(2βη)ξ``); see :class:`Langevin`."""

NOISY_BETAS: tuple[float, float] = (0.0, 0.999)
"""Adam's ``(β1, β2)`` for a group with noise when ``betas`` is not given: no momentum (see
:func:`momentum_variance_factor`), i.e. the RMSprop-preconditioned drift of pSGLD."""
PLAIN_BETAS: tuple[float, float] = (0.9, 0.999)
"""Adam's ``(β1, β2)`` for a group without noise when ``betas`` is not given (torch's default)."""
NOISY_EPS: float = 1.0
"""Adam's ``ε`` for a group with noise when ``eps`` is not given: ``η_eff = lr/(sqrt(v̂) + ε) ≤ lr``."""
PLAIN_EPS: float = 1e-8
"""Adam's ``ε`` for a group without noise when ``eps`` is not given (torch's default)."""


def momentum_variance_factor(u: float, beta1: float) -> float:
    """Stationary ``Var θ / (β/a)`` of the Adam-momentum Langevin chain on ``F = a/2 θ²`` with a constant step.

    The chain (fused Adam order, bias corrections at their limit 1, ``h = η_eff``, ``u = h·a``)

        m' = β1 m + (1 − β1) a θ,    θ' = θ − h m' + sqrt(2βh) ξ

    is linear in ``x = (θ, h·m)``: ``x' = A x + b ξ`` with ``A = [[1 − (1−β1)u, −β1], [(1−β1)u, β1]]`` and
    ``b = (sqrt(2βh), 0)``. Its stationary covariance solves the discrete Lyapunov equation
    ``Σ = A Σ Aᵀ + b bᵀ``, whose ``θθ`` entry is

        Var θ = (β/a) · 2(1 − β1² + 2β1·u) / ((1 − β1)(2(1 + β1) − (1 − β1)u))
              = (β/a) · (1 + (u/2)(1 + β1)/(1 − β1) + O(u²)),

    stable for ``u < 2(1 + β1)/(1 − β1)``. At ``β1 = 0`` it is the Euler–Maruyama value ``1/(1 − u/2)``;
    momentum multiplies the chain's O(u) bias by ``(1 + β1)/(1 − β1)`` (19 at ``β1 = 0.9``) and the factor
    grows without bound as ``β1 → 1``.

    Args:
        u: ``η_eff·a ≥ 0``, the step times the curvature.
        beta1: Adam's ``β1`` in ``[0, 1)``.

    Returns:
        The factor ``Var θ/(β/a)``; ``inf`` where the chain is not stable.
    """
    u = check_nonnegative("u (η_eff·a)", u)
    beta1 = check_nonnegative("beta1", beta1)
    if beta1 >= 1:
        raise ValueError(f"beta1 must be in [0, 1), got {beta1}")
    denominator = (1 - beta1) * (2 * (1 + beta1) - (1 - beta1) * u)
    if denominator <= 0:
        return math.inf
    return 2 * (1 - beta1**2 + 2 * beta1 * u) / denominator


_STATS_CHUNK = 1 << 18  # elements per chunk of the reductions behind Langevin.last_stats


# ----------------------------------------------------------------------------------------------------------
# projections: meanfield.projections (Clip, Sphere), plus a particle layer's own
# ----------------------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------------------
# step records
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LangevinStats:
    """What the last :meth:`Langevin.step` did to the parameters of the groups with noise (or of one group).

    :attr:`Langevin.last_stats` covers the ``n`` coordinates that received noise (groups with ``noise=True``
    and a gradient); :attr:`Langevin.last_group_stats` has one per param group (a group without noise: its
    drift, with ``beta = 0`` and ``noise_rms = 0``). A dataclass of floats and ints
    (``dataclasses.asdict`` gives a loggable dict).

    Attributes:
        step: the number of steps taken (the step described is the ``step``-th).
        beta: the temperature ``β_t`` the schedule gave, in the group's ``temperature_convention`` (the
            largest one if the noisy groups differ).
        eta_eff_mean: mean of the per-coordinate step ``η_eff`` (``lr`` for an SGD drift,
            ``lr/(M·sqrt(v̂) + ε)`` for an Adam drift, ``M`` the group's particle count when scaled).
        eta_eff_min: its minimum.
        eta_eff_max: its maximum.
        noise_rms: root mean square of the noise increment ``sqrt(2β_t η_eff) ξ`` (or ``sqrt(2β_t lr) ξ``).
        drift_rms: root mean square of the drift increment ``η_eff ⊙ g``.
        drift_to_noise: ``drift_rms / noise_rms`` (``inf`` without noise): below 1 the step is noise-driven.
        n: the number of coordinates.
    """

    step: int
    beta: float
    eta_eff_mean: float
    eta_eff_min: float
    eta_eff_max: float
    noise_rms: float
    drift_rms: float
    drift_to_noise: float
    n: int


@dataclass
class _Bucket:
    """The parameters of one group on one (device, dtype), with flat Adam moments (per-param views)."""

    params: list[torch.Tensor]
    offsets: list[int]
    n: int
    exp_avg: torch.Tensor | None = None  # (n,)
    exp_avg_sq: torch.Tensor | None = None  # (n,)
    steps: list[torch.Tensor] | None = None  # per parameter: () float32 Adam step count (the fused kernel's)
    counts: list[int] | None = None  # the same counts as Python ints
    rsqrt: torch.Tensor | None = None  # (n,) preconditioned-noise work buffer
    rsqrt_views: list[torch.Tensor] | None = None
    rows: tuple[int, int, int] | None = None  # (start, stop, M): the parameters are rows of (M, …) tensors
    block: int = 0  # > 0: counter-based noise per block of this many particles (Langevin's noise_block)

    @property
    def noise_size(self) -> int:
        """Numbers of the step's shared draw for this bucket: ``n``, the full ``(M, …)`` sizes when sharded, 0
        with block noise (drawn by :meth:`block_noise`)."""
        if self.block:
            return 0
        if self.rows is None:
            return self.n
        start, stop, M = self.rows
        return sum(p.numel() // (stop - start) * M for p in self.params)

    def block_noise(self, seed: int, group_index: int, step: int) -> torch.Tensor:
        """The noise ``(n,)`` of this bucket's particles, block by block: block ``j`` from a generator seeded by
        ``derive_seed(seed, f"noise/{group_index}/{j}/{step}")``, drawing every parameter's rows of the block in
        order (the same numbers whichever process holds the block)."""
        start, stop = (self.rows[0], self.rows[1]) if self.rows is not None else (0, self.params[0].shape[0])
        p0 = self.params[0]
        out = torch.empty(self.n, dtype=p0.dtype, device=p0.device)  # (n,)
        views = self.views(out, range(len(self.params)))  # [(rows, …)]
        k = self.block
        generator = torch.Generator(device=p0.device)
        for j in range(start // k, stop // k):
            generator.manual_seed(derive_seed(seed, f"noise/{group_index}/{j}/{step}"))
            a = j * k - start
            for v in views:
                v[a : a + k].normal_(generator=generator)  # (k, …) ξ ~ N(0, I)
        return out

    def local_noise(self, full: torch.Tensor) -> torch.Tensor:
        """This rank's rows of the full draw ``full`` (``(noise_size,)``), flat like the bucket: ``(n,)``."""
        if self.rows is None:
            return full
        start, stop, M = self.rows
        parts, offset = [], 0
        for p in self.params:
            size = p.numel() // (stop - start) * M
            parts.append(full[offset : offset + size].view(M, -1)[start:stop].reshape(-1))  # (numel,)
            offset += size
        return torch.cat(parts)  # (n,)

    def views(self, flat: torch.Tensor, index: Sequence[int], strided: bool = False) -> list[torch.Tensor]:
        """Views of ``flat`` (n,) shaped like the parameters ``index``.

        ``strided=False``: each segment in the parameter's logical (row-major) order, ``view_as``.
        ``strided=True``: with the parameter's own strides (e.g. channels_last), so that a kernel walking
        memory (``_fused_adam_``) and an elementwise op agree on which entry belongs to which coordinate:
        for the optimizer state (moments, preconditioner) of non-contiguous parameters.
        """
        out = []
        for i in index:
            p = self.params[i]
            segment = flat[self.offsets[i] : self.offsets[i] + p.numel()]  # (numel,)
            out.append(
                segment.as_strided(p.shape, p.stride())
                if strided and not p.is_contiguous()
                else segment.view_as(p)
            )
        return out

    def gather(self, flat: torch.Tensor, index: Sequence[int], strided: bool = False) -> torch.Tensor:
        """The entries of ``flat`` (n,) that belong to the parameters ``index``, flat, in logical order
        (``strided`` as in :meth:`views`: how ``flat`` is laid out)."""
        if len(index) == len(self.params) and (not strided or all(p.is_contiguous() for p in self.params)):
            return flat
        return torch.cat([v.reshape(-1) for v in self.views(flat, index, strided)])  # (n_index,)


@dataclass
class _Record:
    """Lazy statistics of one bucket for :attr:`Langevin.last_stats` (valid until the next step)."""

    bucket: _Bucket
    index: list[int]
    drift: str
    lr: float
    beta: float  # the β in the noise sqrt(2β η_eff) (×M in the "loss" convention)
    scale: float  # M (or 1)
    noise: torch.Tensor | None  # (n,) the standard normal draw, None when β_t = 0
    preconditioned: bool
    eps: float = 0.0
    bias1: float = 1.0
    bias2: float = 1.0
    rsqrt_ready: bool = False
    drift_sq: torch.Tensor | None = None  # () SGD drift ‖η g‖², computed during the step
    beta_given: float = 0.0  # the schedule's β_t (the group's convention), reported in the stats

    def sums(self) -> tuple[int, float, float, float, float, float]:
        """``(n, Σ η_eff, min η_eff, max η_eff, Σ noise², Σ drift²)`` over the recorded coordinates."""
        b, index = self.bucket, self.index
        n = sum(b.params[i].numel() for i in index)
        if n == 0:
            return 0, 0.0, math.inf, -math.inf, 0.0, 0.0
        xi = None if self.noise is None else b.gather(self.noise, index)  # (n,)
        if self.drift == "sgd":
            noise_sq = 0.0 if xi is None else 2 * self.beta * self.lr * float(torch.dot(xi, xi))
            return n, self.lr * n, self.lr, self.lr, noise_sq, float(self.drift_sq)
        e = self.eps * math.sqrt(self.bias2) / self.scale
        t_all = None  # (n,) 1/sqrt(sqrt(v) + e), when the step computed it
        if self.rsqrt_ready:
            t_all = b.gather(b.rsqrt, index, strided=True)
        v_all = b.gather(b.exp_avg_sq, index, strided=True)  # (n,)
        m_all = b.gather(b.exp_avg, index, strided=True)  # (n,)
        sum_t2, t_min, t_max, sum_mt2, sum_xt, sum_x = 0.0, math.inf, -math.inf, 0.0, 0.0, 0.0
        scratch = torch.empty(min(n, _STATS_CHUNK), dtype=v_all.dtype, device=v_all.device)  # (chunk,)
        work = torch.empty_like(scratch)  # (chunk,)
        for a in range(0, n, _STATS_CHUNK):  # chunks: no full-size temporaries
            z = min(n, a + _STATS_CHUNK)
            if t_all is None:
                t = torch.sqrt(v_all[a:z], out=work[: z - a]).add_(e).rsqrt_()  # (chunk,)
            else:
                t = t_all[a:z]  # (chunk,)
            low, high = torch.aminmax(t)
            t_min, t_max = min(t_min, float(low)), max(t_max, float(high))
            sum_t2 += float(torch.dot(t, t))
            s = torch.mul(t, t, out=scratch[: z - a]).mul_(m_all[a:z])  # (chunk,) m·t²
            sum_mt2 += float(torch.dot(s, s))
            if xi is not None and self.preconditioned:
                s = torch.mul(t, xi[a:z], out=scratch[: z - a])  # (chunk,) ξ·t
                sum_xt += float(torch.dot(s, s))
            elif xi is not None:
                sum_x += float(torch.dot(xi[a:z], xi[a:z]))
        c = self.lr * math.sqrt(self.bias2) / self.scale  # η_eff = c·t²
        # drift η_eff·m̂ = (lr/bias1)·√bias2·m·t²; noise sqrt(2β c)·t·ξ or sqrt(2β lr)·ξ
        drift_sq = (self.lr * math.sqrt(self.bias2) / self.bias1) ** 2 * sum_mt2
        noise_sq = 2 * self.beta * (c * sum_xt if self.preconditioned else self.lr * sum_x)
        return n, c * sum_t2, c * t_min**2, c * t_max**2, noise_sq, drift_sq


def _fill_normal(jobs: Sequence[tuple[torch.Tensor, torch.Generator]]) -> None:
    for flat, generator in jobs:  # in order: kinds sharing a generator draw in the same sequence always
        flat.normal_(generator=generator)  # (n,) ξ ~ N(0, I)


class _NoiseDraw:
    """The standard normal draws of one step, one flat buffer per (device, dtype).

    torch's CPU ``normal_`` runs on one thread. When the CPU draws hold ``≥ _background.OVERLAP_MIN``
    numbers (and torch may use two threads or more) they run in a background thread
    (:mod:`meanfield._background`) while the caller applies the drift on the other cores; :meth:`wait`
    joins it. The numbers drawn are the same either way (same
    generators, same order).

    Args:
        jobs: ``(flat, generator)`` pairs, ``flat`` of shape ``(n,)`` to fill with ``N(0, 1)``.
        views: the per-bucket slices of the flat buffers (what the caller reads after :meth:`wait`).
    """

    def __init__(self, jobs: list[tuple[torch.Tensor, torch.Generator]], views: list[torch.Tensor]) -> None:
        self.views = views
        self._saved = {id(g): (g, g.get_state()) for _, g in jobs}
        cpu = [(flat, g) for flat, g in jobs if flat.device.type == "cpu"]
        _fill_normal([(flat, g) for flat, g in jobs if flat.device.type != "cpu"])  # asynchronous anyway
        self._pending: _background.Pending | None = None
        if _background.pays(sum(flat.numel() for flat, _ in cpu)):
            self._pending = _background.submit(_fill_normal, cpu)
        else:
            _fill_normal(cpu)

    def wait(self) -> None:
        """Block until every buffer is drawn (re-raises an error of the background draw)."""
        if self._pending is not None:
            self._pending.result()
            self._pending = None

    def undo(self) -> None:
        """Wait for the draw (whatever it raised), then put the generators back as they were before it."""
        pending, self._pending = self._pending, None
        _background.abandon(pending, self._saved.values())


# ----------------------------------------------------------------------------------------------------------
# the optimizer
# ----------------------------------------------------------------------------------------------------------

_CONFIG_KEYS = ("beta", "projection", "particle_rows")  # kept from this optimizer on load (callables; a
# rank's own rows of a sharded layer, which differ from those of the rank that saved the state)


class Langevin(torch.optim.Optimizer):
    r"""Mean-field Langevin dynamics as a ``torch.optim.Optimizer`` (SGD or Adam drift, noise, projection).

    One step on a param group with noise, temperature ``β_t`` and ``M`` particles:

        θ ← Π( θ − η_eff ⊙ g + sqrt(2 · β_t · η_eff) ⊙ ξ ),   ξ ~ N(0, I)

    - ``drift="sgd"``: ``g = M·∇_θL + λθ``, ``η_eff = lr``. This is Euler–Maruyama with time step ``lr`` for
      ``dθ = −∇F dt + sqrt(2β) dW``; the target law is ``∝ exp(−F/β)`` (``F = M·L + λ/2‖θ‖²``) up to the
      O(lr) bias of the discrete chain.
    - ``drift="adam"``: ``g = m̂`` (bias-corrected first moment of ``M·∇_θL + λθ``) and
      ``η_eff = lr/(sqrt(v̂) + ε)`` per coordinate (``v̂`` bias-corrected with each parameter's own step
      count). With ``noise_preconditioned=True`` (default) the noise is ``sqrt(2β_t η_eff) ξ``:
      preconditioned Langevin with ``P = diag(η_eff/lr)``, whose target is still ``∝ exp(−F/β)`` to first
      order while ``P`` varies slowly. Groups with noise default to ``betas = (0, 0.999)`` (no momentum:
      ``m̂ = g``, the pSGLD drift, whose chain has the EM law; momentum multiplies its O(η) bias by
      ``(1 + β1)/(1 − β1)``, see :func:`momentum_variance_factor`) and ``ε = 1`` (``η_eff ≤ lr``: no
      explosion at step 1, see the module docstring). With ``noise_preconditioned=False`` the noise
      is ``sqrt(2β_t lr) ξ`` and the target is no longer the Gibbs law at temperature ``β`` (for a constant
      ``P = p·I`` it is ``∝ exp(−p·F/β)``; for a non-scalar ``P`` not a Gibbs law at all); it warns once.
    - Groups with ``noise=False`` take the plain step ``θ ← Π(θ − η_eff ⊙ g)`` (SGD or Adam).

    ``M·∇_θL`` is the Wasserstein gradient ``∇_θ δF/δρ`` of a particle of a layer computing
    ``1/M Σ_i φ(θ_i)`` (see the module docstring for the derivation); a group declares its M with
    ``n_particles`` (default 1: no scaling) and ``mean_field_scaling=False`` switches the factor off. At
    ``β = 0`` the optimizer is ``torch.optim.SGD`` / ``torch.optim.Adam`` on the gradients ``M·∇_θL`` (for
    Adam on a group with noise, with torch's ``betas``/``eps`` given: its defaults differ).

    Every argument after ``params`` except ``generator`` and ``seed`` is a param-group default and can be
    overridden per group. :meth:`param_groups_for` builds the groups of a model with particle layers:
    particles with noise and the ×M scaling, everything else plain.

    Args:
        params: parameters or param-group dicts.
        lr: learning rate ``lr > 0`` (the time step of the SDE for an SGD drift).
        beta: temperature ``β ≥ 0``, a number or a schedule ``step -> β`` (:mod:`meanfield.schedules`),
            evaluated at the number of steps taken so far (``β(0)`` for the first step).
        drift: ``"sgd"`` or ``"adam"`` (:data:`DRIFTS`).
        betas: Adam's ``(β1, β2)``, each in ``[0, 1)``; ``None`` (default): ``(0, 0.999)`` for a group with
            noise (no momentum: the right law), ``(0.9, 0.999)`` without. ``β1 > 0`` with noise warns once.
        eps: Adam's ``ε > 0``, a floor on ``sqrt(v̂)`` in Wasserstein-gradient units: ``η_eff ≤ lr/ε``, and a
            coordinate whose gradient stays near 0 gets noise up to ``sqrt(2β·lr/ε)``. ``None`` (default):
            ``1`` for a group with noise (``η_eff ≤ lr``), ``1e-8`` without; ``last_stats.eta_eff_max`` shows
            the largest step.
        weight_decay: ``λ ≥ 0``, an L2 term ``λ/2‖θ‖²`` in ``F`` (a Gaussian prior), added to ``M·∇_θL``.
        noise: whether the group gets the Langevin noise.
        n_particles: the number of particles ``M ≥ 1`` of the group (its gradients are multiplied by M).
        mean_field_scaling: whether to apply the factor ``M``.
        noise_preconditioned: with an Adam drift, scale the noise with ``η_eff`` (``True``) or ``lr``.
        projection: ``None`` or a :class:`Projection` (:class:`Clip`, :class:`Sphere`,
            :class:`LayerProjection`), applied to the group's parameters after every step.
        generator: the ``torch.Generator`` of the noise (on the parameters' device).
        seed: seed of the optimizer's own generator (one per device) when ``generator`` is not given; with
            neither, one seed is drawn from torch's global generator at construction.
        temperature_convention: what ``beta`` means (:data:`TEMPERATURE_CONVENTIONS`): ``"mean_field"``
            (default: the temperature of ``exp(−M·L/β)``) or ``"loss"`` (the seeds' ``β_s`` of
            ``exp(−L/β_s)``; the noise uses ``M·β_s``). ``β_s = β/M`` gives the same chain.
        noise_block: ``0`` (default): the group's noise comes from the optimizer's generator, one draw per step
            for all groups. ``k > 0``: the noise of particles ``[j·k, (j+1)·k)`` (rows of every parameter's
            leading particle axis) at the group's step ``t`` is drawn from a generator seeded by
            ``derive_seed(seed, f"noise/{group index}/{j}/{t}")`` — counter-based: no state, and a particle's
            noise does not depend on which process holds it, so a rank of a sharded system draws only its own
            rows (:mod:`meanfield.nn.sharded`; ``M`` and each shard a multiple of ``k``). Needs ``seed``
            (not ``generator``).

    A β schedule or a projection may also be given as data (its ``to_dict()``, e.g. from a TOML config).

    Attributes:
        last_stats: :class:`LangevinStats` of the last step over the groups with noise (computed when read).
        last_group_stats: one :class:`LangevinStats` (or ``None``) per param group.

    Raises:
        ValueError / TypeError: on an invalid argument (naming it, what it got and what is allowed), on a
            schedule value ``β_t < 0`` or non-finite, and in :meth:`step` on a non-finite gradient (before
            any parameter is changed).

    Example:
        >>> import torch
        >>> from meanfield.schedules import Cosine
        >>> theta = torch.nn.Parameter(torch.zeros(1000, 3, dtype=torch.float64))  # (M, d) particles
        >>> opt = Langevin([theta], lr=0.1, beta=Cosine(1.0, 0.01, T=100), n_particles=1000, seed=0)
        >>> for _ in range(100):
        ...     opt.zero_grad()
        ...     loss = 0.5 * (theta**2).sum(1).mean()  # L = 1/M Σ V(θ_i), V = |θ|²/2
        ...     loss.backward()
        ...     opt.step()
        >>> opt.last_stats.step, opt.last_stats.eta_eff_mean
        (100, 0.1)
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float,
        beta: float | Schedule,
        *,
        drift: str = "sgd",
        betas: tuple[float, float] | None = None,
        eps: float | None = None,
        weight_decay: float = 0.0,
        noise: bool = True,
        n_particles: int = 1,
        mean_field_scaling: bool = True,
        noise_preconditioned: bool = True,
        projection: Projection | Mapping[str, Any] | None = None,
        generator: torch.Generator | None = None,
        seed: int | None = None,
        temperature_convention: str = "mean_field",
        noise_block: int = 0,
    ) -> None:
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        if seed is not None:
            seed = check_int("seed", seed, minimum=0)
            if seed >= 2**63:
                raise ValueError(
                    f"seed must be < 2**63 (a torch.Generator seed is a 64-bit integer), got {seed}"
                )
        if generator is not None and seed is not None:
            raise ValueError("pass either generator or seed, not both")
        self._warned_not_gibbs = False
        self._warned_momentum = False
        self._layout: list[list[_Bucket]] | None = None
        self._layout_key: tuple | None = None
        self._noise_buffers: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}
        self._records: list[_Record] | None = []  # noisy groups' records; None: the last step failed half way
        self._group_records: list[list[_Record]] = []  # every group's records of the last step
        self._stats: LangevinStats | None = None
        self._group_stats: list[LangevinStats | None] | None = None
        self._n_steps = 0
        self._generators: dict[torch.device, torch.Generator] = {}
        if generator is not None:
            self._generators[torch.device(generator.device)] = generator
            self._seed = None
        else:
            self._seed = int(torch.randint(0, 2**62, (1,))) if seed is None else seed
        defaults = {
            "lr": lr,
            "beta": beta,
            "drift": drift,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "noise": noise,
            "n_particles": n_particles,
            "mean_field_scaling": mean_field_scaling,
            "noise_preconditioned": noise_preconditioned,
            "projection": projection,
            "temperature_convention": temperature_convention,
            "noise_block": noise_block,
            "step": 0,
        }
        _normalise(defaults, "Langevin")
        _check_group(defaults, "Langevin")
        self._constructed = False
        super().__init__(params, defaults)
        self._constructed = True
        if any(_not_gibbs(g) for g in self.param_groups):
            self._warn_not_gibbs(stacklevel=2)
        if any(_momentum_with_noise(g) for g in self.param_groups):
            self._warn_momentum(stacklevel=2)

    # -- groups ----------------------------------------------------------------------------------------------

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a param group (``torch.optim.Optimizer.add_param_group``), checking its options."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        where = f"param group {len(self.param_groups) - 1}"
        try:
            _normalise(group, where)
            _check_group(group, where)
            _resolve_defaults(group)
            for p in group["params"]:
                if not p.is_floating_point():
                    raise TypeError(
                        f"{where}: parameters must be floating-point tensors, got dtype {p.dtype}"
                    )
            if group["projection"] is not None:
                for p in group["params"]:
                    group["projection"].check(p)
        except (TypeError, ValueError):
            self.param_groups.pop()
            raise
        if self._constructed and _not_gibbs(group):
            self._warn_not_gibbs(stacklevel=3)
        if self._constructed and _momentum_with_noise(group):
            self._warn_momentum(stacklevel=3)
        self._layout = None

    def _warn_not_gibbs(self, stacklevel: int) -> None:
        if not self._warned_not_gibbs:
            self._warned_not_gibbs = True
            warnings.warn(
                "Langevin: an Adam drift with noise_preconditioned=False gets the noise sqrt(2·β·lr)·ξ while its "
                "drift is preconditioned by P = diag(η_eff/lr): the chain no longer targets the Gibbs law "
                "exp(−F/β) (for a scalar P = p·I it targets exp(−p·F/β); otherwise no Gibbs law). Use "
                "noise_preconditioned=True for the temperature contract.",
                UserWarning,
                stacklevel=stacklevel + 1,
            )

    def _warn_momentum(self, stacklevel: int) -> None:
        if not self._warned_momentum:
            self._warned_momentum = True
            warnings.warn(
                "Langevin: a group with noise has an Adam drift with momentum β1 > 0: the chain's stationary law "
                "is biased beyond the Euler–Maruyama O(η) bias (on F = a/2·θ², Var θ = β/a·(1 + "
                "(η_eff·a/2)(1 + β1)/(1 − β1) + …), see momentum_variance_factor). Leave betas unset (β1 = 0 "
                "for groups with noise: the pSGLD drift) for the Gibbs law.",
                UserWarning,
                stacklevel=stacklevel + 1,
            )

    @staticmethod
    def param_groups_for(
        model: nn.Module, *, others: dict[str, Any] | None = None, **particle_options: Any
    ) -> list[dict[str, Any]]:
        """Param groups for a model with particle layers: particles noisy and ×M, everything else plain.

        A *particle layer* is a submodule with an attribute ``n_particles = M``. Its particle parameters are
        the ones named in its ``particle_parameter_names`` (as in :class:`meanfield.nn.ParticleLayer`) or,
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
            A list of param-group dicts for :class:`Langevin` (the last one is omitted when empty).
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

    # -- randomness ------------------------------------------------------------------------------------------

    def _generator(self, device: torch.device) -> torch.Generator:
        g = self._generators.get(device)
        if g is None:
            if self._seed is None:
                have = ", ".join(str(d) for d in self._generators)
                raise ValueError(
                    f"the generator passed to Langevin is on {have} but noisy parameters are on {device}; "
                    "pass a generator on the parameters' device, or seed= for one generator per device"
                )
            g = torch.Generator(device=device).manual_seed(self._seed)
            self._generators[device] = g
        return g

    # -- layout ----------------------------------------------------------------------------------------------

    def _get_layout(self) -> list[list[_Bucket]]:
        key = tuple((tuple(id(p) for p in g["params"]), g["drift"]) for g in self.param_groups)
        if self._layout is None or key != self._layout_key:
            self._layout = [self._build_buckets(g) for g in self.param_groups]
            self._layout_key = key
        return self._layout

    def _build_buckets(self, group: dict[str, Any]) -> list[_Bucket]:
        by_kind: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
        for p in group["params"]:
            by_kind.setdefault((p.device, p.dtype), []).append(p)
        buckets = []
        for (device, dtype), params in by_kind.items():
            offsets, n = [], 0
            for p in params:
                _check_dense(p, group, self.param_groups)
                offsets.append(n)
                n += p.numel()
            rows = group.get("particle_rows")
            b = _Bucket(params, offsets, n, block=int(group.get("noise_block", 0)))
            if b.block:
                if self._seed is None:
                    raise ValueError(
                        "noise_block > 0 draws counter-based noise from the optimizer's seed: pass seed=, "
                        "not generator="
                    )
                start, stop = (rows[0], rows[1]) if rows is not None else (0, params[0].shape[0])
                for p in params:
                    if p.dim() == 0 or p.shape[0] != stop - start or start % b.block or stop % b.block:
                        raise ValueError(
                            f"noise_block = {b.block}: every parameter of the group needs a leading particle axis "
                            f"whose rows [{start}, {stop}) are whole blocks, got a parameter of shape "
                            f"{tuple(p.shape)}"
                        )
            if rows is not None:
                b.rows = (int(rows[0]), int(rows[1]), int(group["n_particles"]))
                for p in params:
                    if p.dim() == 0 or p.shape[0] != b.rows[1] - b.rows[0]:
                        raise ValueError(
                            f"a parameter of shape {tuple(p.shape)} is in a group with particle_rows = "
                            f"{tuple(rows)}: its leading axis must hold those {b.rows[1] - b.rows[0]} particles"
                        )
            if group["drift"] == "adam":
                # per-parameter step counts: a parameter whose first gradient comes late gets its own bias
                # correction (a state without them, from an older checkpoint, takes the group's count)
                b.counts, b.steps = [], []
                for p in params:
                    old = self.state[p].get("step")
                    if old is None:
                        old = group["step"] if "exp_avg" in self.state[p] else 0
                    b.counts.append(int(old))
                    b.steps.append(torch.tensor(float(int(old)), dtype=torch.float32, device=device))
                    self.state[p]["step"] = b.steps[-1]
                for key in ("exp_avg", "exp_avg_sq"):
                    flat = torch.zeros(n, device=device, dtype=dtype)  # (n,)
                    for p, view in zip(params, b.views(flat, range(len(params)), strided=True)):
                        old = self.state[p].get(key)
                        if old is not None:
                            view.copy_(old.reshape(view.shape))
                        self.state[p][key] = view
                    setattr(b, key, flat)
            buckets.append(b)
        return buckets

    # -- the step --------------------------------------------------------------------------------------------

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        """One Langevin step for every param group (see the class docstring for the update).

        Args:
            closure: re-evaluates the model and returns the loss (optional, as in ``torch.optim``).

        Returns:
            The closure's loss, or ``None``.

        Raises:
            ValueError: a gradient has a NaN or Inf entry, or a β schedule returned a value that is not a
                finite number ≥ 0 (nothing is changed then, :attr:`last_stats` included).

        An error while the parameters are being updated (e.g. a ``KeyboardInterrupt``) leaves the groups
        before it updated and the rest not; the noise generator is put back and :attr:`last_stats` is
        ``None``: reload a checkpoint (:meth:`state_dict`) rather than step again.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        layout = self._get_layout()

        # 1. gather gradients and temperatures (a schedule error raises before anything changes)
        plan = []
        for gi, (group, buckets) in enumerate(zip(self.param_groups, layout)):
            work = []
            for b in buckets:
                index = [i for i, p in enumerate(b.params) if p.grad is not None]
                if not index:
                    continue
                grads = [b.params[i].grad for i in index]
                if any(g.is_sparse for g in grads):
                    raise ValueError(f"param group {gi}: Langevin does not support sparse gradients")
                work.append((b, index, grads))
            if work:
                beta_t = self._beta_at(group, gi) if group["noise"] else 0.0
                plan.append((gi, group, beta_t, work))
        # 2. check the gradients (one reduction per bucket): a refused step changes nothing, stats included
        checked = []
        for gi, group, beta_t, work in plan:
            entries = []
            for b, index, grads in work:
                norms = torch.stack(torch._foreach_norm(grads))  # (k,) ‖∂L/∂θ‖ per parameter
                step_bound = group["lr"] * (_scale(group) if group["drift"] == "sgd" else 1.0)
                if not bool(torch.isfinite(norms * step_bound).all()):  # NaN/Inf, or an overflowing step
                    self._check_entries(group, b, index, grads, norms)
                    self._check_step_size(group, b, index, norms, step_bound)
                entries.append((b, index, grads, norms))
            checked.append((gi, group, beta_t, entries))

        # 3. the noise draw starts (on the CPU in a background thread) while 4. the drift is applied
        self._records = []  # the last step's records point into the noise buffers about to be redrawn
        self._group_records = [[] for _ in self.param_groups]
        self._stats = None
        self._group_stats = None
        noisy = [  # (bucket, index, group index, the group's step): what the noise of each bucket needs
            (b, index, gi, group["step"])
            for gi, group, beta_t, work in plan
            if group["noise"] and beta_t > 0
            for b, index, _ in work
        ]
        draw = self._start_noise(noisy)
        try:
            records = []  # (record, j): a record of the j-th bucket of the draw (noisy[j])
            j = 0
            for gi, group, beta_t, entries in checked:
                for b, index, grads, norms in entries:
                    bucket_records = self._drift(group, b, index, grads, norms, beta_t)
                    self._group_records[gi].extend(bucket_records)
                    if group["noise"]:
                        self._records.extend(bucket_records)
                        if beta_t > 0:
                            for record in bucket_records:
                                self._precondition(record)
                                records.append((record, j))
                            j += 1
            draw.wait()
            noises = [  # [(n_j,)] this rank's rows of the shared draw, or the counter-based blocks
                b.block_noise(self._seed, gi, t) if b.block else b.local_noise(view)
                for (b, _, gi, t), view in zip(noisy, draw.views)
            ]
        except BaseException:
            draw.undo()  # no draw left running on the generator, which is back where it was
            self._records = None  # the step is half done: no stats describe it (last_stats is None)
            raise
        # 5. noise, 6. projection
        for record, j in records:
            self._add_noise(record, noises[j])
        for _, group, _, _ in plan:
            if group["projection"] is not None:
                group["projection"].project_all_(group["params"])
            group["step"] += 1
        self._n_steps += 1
        return loss

    def _beta_at(self, group: dict[str, Any], gi: int) -> float:
        k = group["step"]
        beta = group["beta"]
        value = beta(k) if callable(beta) else beta
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(
                f"param group {gi}: the β schedule returned {value!r} at step {k}; it must return a number"
            ) from None
        if not math.isfinite(value) or value < 0:
            raise ValueError(
                f"param group {gi}: the temperature β_t must be a finite number ≥ 0, but the β schedule "
                f"returned {value} at step {k}"
            )
        if not math.isfinite(2.0 * value * group["lr"]):
            raise ValueError(
                f"param group {gi}: the noise variance 2·beta·lr = 2·{value:g}·{group['lr']:g} overflows at step "
                f"{k}; lower beta or lr"
            )
        return value

    def _check_step_size(
        self, group: dict[str, Any], b: _Bucket, index: list[int], norms: torch.Tensor, step_bound: float
    ) -> None:
        """Raise before any change when ``lr``·(×M)·``‖g‖`` overflows for a parameter with a finite gradient."""
        for j in (~torch.isfinite(norms * step_bound)).nonzero()[:, 0].tolist():
            p = b.params[index[j]]
            gi, k = _position(self.param_groups, group, p)
            raise ValueError(
                f"param group {gi}: the step lr·‖g‖ = {group['lr']:g}·{float(norms[j]):g} of parameter {k} "
                f"(shape {tuple(p.shape)}) overflows; lower lr (the parameters have diverged, or lr is far too "
                "large). No parameter was changed."
            )

    def _check_entries(
        self,
        group: dict[str, Any],
        b: _Bucket,
        index: list[int],
        grads: list[torch.Tensor],
        norms: torch.Tensor,
    ) -> None:
        """Raise on the first gradient with a NaN/Inf entry; a finite gradient whose norm overflowed gets its
        norm recomputed in float64 (in place in ``norms``)."""
        for j in (~torch.isfinite(norms)).nonzero()[:, 0].tolist():
            grad = grads[j]
            bad = int((~torch.isfinite(grad)).sum())
            if bad == 0:
                norms[j] = torch.linalg.vector_norm(grad.double())
                continue
            p = b.params[index[j]]
            gi, k = _position(self.param_groups, group, p)
            raise ValueError(
                f"the gradient of parameter {k} (shape {tuple(p.shape)}) of param group {gi} has {bad} "
                "non-finite entries (NaN or Inf); Langevin needs finite gradients (check the loss, lower lr, "
                "or clip the gradients). No parameter was changed."
            )

    def _drift(
        self,
        group: dict[str, Any],
        b: _Bucket,
        index: list[int],
        grads: list[torch.Tensor],
        norms: torch.Tensor,
        beta_t: float,
    ) -> list[_Record]:
        """Apply the drift to the parameters ``index`` of bucket ``b``; return their records (one per Adam
        step count: parameters whose first gradient came at different steps have different bias corrections)."""
        lr = float(group["lr"])
        scale = _scale(group)
        # the β of the noise sqrt(2β η_eff): the "loss" convention's β is the temperature of exp(−L/β), i.e.
        # of exp(−M·L/(M·β)): M·β in the mean-field convention
        beta_noise = beta_t * scale if group["temperature_convention"] == "loss" else beta_t
        wd = group["weight_decay"]
        params = [b.params[i] for i in index]
        if group["drift"] == "sgd":
            if wd:
                drift = torch._foreach_mul(grads, scale)  # [(…)] M·g
                torch._foreach_add_(drift, params, alpha=wd)  # M·g + λθ
                drift_sq = (torch.stack(torch._foreach_norm(drift)).double() * lr).square().sum()  # ‖η g‖²
                torch._foreach_add_(params, drift, alpha=-lr)
            else:
                drift_sq = (norms.double() * (lr * scale)).square().sum()  # () ‖η M g‖² (inf, not an error)
                torch._foreach_add_(params, grads, alpha=-lr * scale)
            return [
                _Record(
                    b, index, "sgd", lr, beta_noise, scale, None, False, drift_sq=drift_sq, beta_given=beta_t
                )
            ]
        beta1, beta2 = group["betas"]
        steps = [b.steps[i] for i in index]
        torch._foreach_add_(steps, 1.0)
        for i in index:
            b.counts[i] += 1
        # the fused kernel walks memory: a gradient laid out unlike its parameter is copied into its layout
        grads = [
            g if g.stride() == p.stride() else torch.empty_like(p).copy_(g) for p, g in zip(params, grads)
        ]
        # Adam of M·g = Adam of g with ε/M and λ/M (the moments stay those of the raw gradient g)
        torch._fused_adam_(
            params,
            grads,
            b.views(b.exp_avg, index, strided=True),
            b.views(b.exp_avg_sq, index, strided=True),
            [],
            steps,
            lr=lr,
            beta1=beta1,
            beta2=beta2,
            weight_decay=wd / scale,
            eps=group["eps"] / scale,
            amsgrad=False,
            maximize=False,
        )
        by_count: dict[int, list[int]] = {}
        for i in index:
            by_count.setdefault(b.counts[i], []).append(i)
        return [
            _Record(
                b,
                sub,
                "adam",
                lr,
                beta_noise,
                scale,
                None,
                bool(group["noise_preconditioned"]),
                eps=group["eps"],
                bias1=1 - beta1**k,
                bias2=1 - beta2**k,
                beta_given=beta_t,
            )
            for k, sub in by_count.items()
        ]

    def _start_noise(self, noisy: list[tuple[_Bucket, list[int], int, int]]) -> _NoiseDraw:
        """Start the step's standard normal draws: one flat draw per (device, dtype) over ``noisy``'s buckets.

        Returns a :class:`_NoiseDraw` whose ``views[j]`` (``(noise_size_j,)``) is the noise of ``noisy[j]``'s
        bucket: for a sharded bucket (``particle_rows``) the draw of all ``M`` particles, of which
        :meth:`_Bucket.local_noise` takes this rank's rows, so that the rank moves its particles exactly as the
        single process would.
        """
        sizes: dict[tuple[torch.device, torch.dtype], int] = {}
        for b, *_ in noisy:
            kind = (b.params[0].device, b.params[0].dtype)
            sizes[kind] = sizes.get(kind, 0) + b.noise_size
        flats = {}
        for kind, n in sizes.items():
            buffer = self._noise_buffers.get(kind)
            if buffer is None or buffer.numel() < n:
                buffer = torch.empty(n, device=kind[0], dtype=kind[1])  # (n,)
                self._noise_buffers[kind] = buffer
            flats[kind] = buffer[:n]  # (n,) to hold ξ ~ N(0, I)
        used = dict.fromkeys(sizes, 0)
        views = []
        for b, *_ in noisy:
            kind = (b.params[0].device, b.params[0].dtype)
            views.append(flats[kind][used[kind] : used[kind] + b.noise_size])  # (noise_size_b,)
            used[kind] += b.noise_size
        return _NoiseDraw([(flat, self._generator(kind[0])) for kind, flat in flats.items()], views)

    @staticmethod
    def _precondition(record: _Record) -> None:
        """For preconditioned Adam noise: ``t = 1/sqrt(sqrt(v) + ε·√bias2/M)`` into the bucket's buffer,
        so that ``η_eff = (lr·√bias2/M)·t²`` (three flat passes over ``v``)."""
        if record.drift != "adam" or not record.preconditioned:
            return
        b = record.bucket
        if b.rsqrt is None:
            b.rsqrt = torch.empty_like(b.exp_avg)  # (n,)
            b.rsqrt_views = b.views(b.rsqrt, range(len(b.params)), strided=True)
        e = record.eps * math.sqrt(record.bias2) / record.scale
        if len(record.index) == len(b.params):
            t = torch.sqrt(b.exp_avg_sq, out=b.rsqrt)  # (n,)
            t.add_(e).rsqrt_()  # (n,)
        else:  # some parameters only (no gradient, or another step count): their views
            views = [b.rsqrt_views[i] for i in record.index]
            for t, v in zip(views, b.views(b.exp_avg_sq, record.index, strided=True)):
                torch.sqrt(v, out=t)  # (…) laid out like the parameter
            torch._foreach_add_(views, e)
            torch._foreach_rsqrt_(views)
        record.rsqrt_ready = True

    @staticmethod
    def _add_noise(record: _Record, xi: torch.Tensor) -> None:
        """Add ``sqrt(2β_t η_eff) ξ`` (or ``sqrt(2β_t lr) ξ``) to the record's parameters; ``xi``: ``(n,)``."""
        b, index = record.bucket, record.index
        record.noise = xi
        params = [b.params[i] for i in index]
        lr, beta_t, scale = record.lr, record.beta, record.scale
        if record.rsqrt_ready:
            # η_eff = lr/(M·sqrt(v/bias2) + ε) = (lr·√bias2/M)·t², t = 1/sqrt(sqrt(v) + ε·√bias2/M)
            amplitude = math.sqrt(2 * beta_t * lr * math.sqrt(record.bias2) / scale)
            t_views = b.rsqrt_views if len(index) == len(b.params) else [b.rsqrt_views[i] for i in index]
            torch._foreach_addcmul_(params, t_views, b.views(xi, index), value=amplitude)
        else:
            torch._foreach_add_(params, b.views(xi, index), alpha=math.sqrt(2 * beta_t * lr))

    # -- records ---------------------------------------------------------------------------------------------

    @property
    def last_stats(self) -> LangevinStats | None:
        """:class:`LangevinStats` of the last step over the noisy groups (``None`` before the first step, and
        after a step that raised while it was updating the parameters).

        Computed when first read after a step (a few passes over the noisy parameters), then cached.
        """
        if self._records is None:  # the last step raised during its update
            return None
        if self._stats is None and self._n_steps > 0:
            self._stats = _aggregate(self._records, self._n_steps)
        return self._stats

    @property
    def last_group_stats(self) -> list[LangevinStats | None]:
        """One :class:`LangevinStats` per param group for the last step, in the order of ``param_groups``:
        ``None`` for a group none of whose parameters had a gradient (and for every group before the first
        step, or after a step that raised while it was updating the parameters). A group without noise is
        described too (its drift; ``beta = 0``, ``noise_rms = 0``). Computed when first read, then cached.
        """
        if self._records is None or self._n_steps == 0:
            return [None] * len(self.param_groups)
        if self._group_stats is None:
            self._group_stats = [
                _aggregate(records, self._n_steps) if records else None for records in self._group_records
            ]
            self._group_stats += [None] * (
                len(self.param_groups) - len(self._group_stats)
            )  # groups added since
        return self._group_stats

    # -- checkpoints -----------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim`` state plus the generators' states (a resumed run draws the same noise), as plain data.

        Everything in it is a tensor, a number, a string, a list, a tuple, a dict or ``None``, so
        ``torch.save(opt.state_dict(), f)`` and ``torch.load(f, weights_only=True)`` (torch's default) work:
        β schedules are stored as their ``to_dict()`` (a constant β as a number), projections as their
        ``to_dict()`` (a :class:`LayerProjection` as ``{"kind": "layer", "layer": <class name>}``). Besides
        ``state`` and ``param_groups``: ``generators`` (``{device: ByteTensor}``), ``seed``, ``n_steps``.

        Raises:
            TypeError: a group's β is a callable that is not a :mod:`meanfield.schedules` object (a lambda):
                it has no data form (use ``Cosine``, ``Linear``, ``Exponential``, ``Step`` or ``Constant``).
        """
        state = super().state_dict()
        for gi, group in enumerate(state["param_groups"]):
            group["beta"] = schedule_to_data(group["beta"], f"the β schedule of param group {gi}")
            if group.get("projection") is not None:
                group["projection"] = group["projection"].to_dict()
        state["generators"] = {str(d): g.get_state() for d, g in self._generators.items()}
        state["seed"] = self._seed
        state["n_steps"] = self._n_steps
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a :meth:`state_dict` (e.g. from ``torch.load(f, weights_only=True)``).

        Moments, per-parameter Adam step counts, group step counts (the schedules' clock), options and the
        generators' states are restored, so the continuation is bit-identical to the uninterrupted run. The β
        schedules and projections of this optimizer are kept (the saved ones are data describing them).
        """
        state_dict = dict(state_dict)
        # copies: a live state dict (another optimizer's, whose step counts and moments it holds by reference)
        # must not share tensors with this one, or stepping either would move both
        state_dict["state"] = {
            k: {key: v.clone() if torch.is_tensor(v) else v for key, v in entry.items()}
            for k, entry in state_dict.get("state", {}).items()
        }
        generators = state_dict.pop("generators", {})
        seed = state_dict.pop("seed", self._seed)
        n_steps = state_dict.pop("n_steps", self._n_steps)
        kept = [{key: g.get(key) for key in _CONFIG_KEYS} for g in self.param_groups]
        super().load_state_dict(state_dict)
        for group, config in zip(self.param_groups, kept):
            group.update(config)
            for key, value in self.defaults.items():  # options added since the state was saved
                group.setdefault(key, value)
            _resolve_defaults(group)
        self._seed = seed
        self._n_steps = n_steps
        for name, rng_state in generators.items():
            self._generator(torch.device(name)).set_state(rng_state)
        self._layout = None
        self._records = []
        self._group_records = []
        self._stats = None
        self._group_stats = None


def _sums(records: Sequence[_Record]) -> list[tuple[int, float, float, float, float, float]]:
    """Each record's :meth:`_Record.sums`; those of sharded buckets summed over the ranks (a collective: with
    sharded particle layers every rank reads the stats, as ``meanfield run`` does)."""
    sums = [record.sums() for record in records]
    sharded = [i for i, record in enumerate(records) if record.bucket.rows is not None]
    if not sharded or not (dist.is_available() and dist.is_initialized()):
        return sums
    totals = torch.tensor([[sums[i][k] for k in (0, 1, 4, 5)] for i in sharded], dtype=torch.float64)
    extremes = torch.tensor([[-sums[i][2], sums[i][3]] for i in sharded], dtype=torch.float64)
    device = records[sharded[0]].bucket.params[0].device
    if dist.get_backend() == "nccl":
        totals, extremes = totals.to(device), extremes.to(device)
    dist.all_reduce(totals)
    dist.all_reduce(extremes, op=dist.ReduceOp.MAX)
    for i, t, e in zip(sharded, totals.tolist(), extremes.tolist()):
        sums[i] = (int(t[0]), t[1], -e[0], e[1], t[2], t[3])
    return sums


def _aggregate(records: Sequence[_Record], step: int) -> LangevinStats:
    """The :class:`LangevinStats` of ``records`` (the coordinates of all of them together)."""
    n, eta_sum, eta_min, eta_max, noise_sq, drift_sq = 0, 0.0, math.inf, -math.inf, 0.0, 0.0
    for r in _sums(records):
        n += r[0]
        eta_sum += r[1]
        eta_min = min(eta_min, r[2])
        eta_max = max(eta_max, r[3])
        noise_sq += r[4]
        drift_sq += r[5]
    nan = math.nan
    noise_rms = math.sqrt(noise_sq / n) if n else nan
    drift_rms = math.sqrt(drift_sq / n) if n else nan
    return LangevinStats(
        step=step,
        beta=max((r.beta_given for r in records), default=nan),
        eta_eff_mean=eta_sum / n if n else nan,
        eta_eff_min=eta_min if n else nan,
        eta_eff_max=eta_max if n else nan,
        noise_rms=noise_rms,
        drift_rms=drift_rms,
        drift_to_noise=(drift_rms / noise_rms if noise_rms > 0 else math.inf) if n else nan,
        n=n,
    )


def _position(groups: list[dict[str, Any]], group: dict[str, Any], p: torch.Tensor) -> tuple[int, int]:
    """``(group index, parameter index in the group)`` of ``p``, for error messages."""
    gi = next(i for i, g in enumerate(groups) if g is group)
    return gi, next(k for k, q in enumerate(group["params"]) if q is p)


def _check_dense(p: torch.Tensor, group: dict[str, Any], groups: list[dict[str, Any]]) -> None:
    """The optimizer keeps per-parameter state in flat buffers laid out like each parameter: that needs a
    parameter whose memory is dense (contiguous, or a permutation of it such as channels_last)."""
    span = 1 + sum((size - 1) * stride for size, stride in zip(p.shape, p.stride()) if size > 0)
    if p.numel() > 0 and (span != p.numel() or min(p.stride(), default=1) < 0):
        gi, k = _position(groups, group, p)
        raise ValueError(
            f"parameter {k} of param group {gi} (shape {tuple(p.shape)}, strides {p.stride()}) does not fill "
            "its memory densely; Langevin needs parameters that are contiguous or a permutation of it "
            "(e.g. channels_last): use p.data = p.data.contiguous()"
        )


def _scale(group: dict[str, Any]) -> float:
    """The factor ``M`` a group multiplies its gradients by (1 without the mean-field scaling)."""
    return float(group["n_particles"]) if group["mean_field_scaling"] else 1.0


def _not_gibbs(group: dict[str, Any]) -> bool:
    """Whether ``group`` has noise that does not follow its Adam preconditioner (not Gibbs at ``β``)."""
    return group["noise"] and group["drift"] == "adam" and not group["noise_preconditioned"]


def _momentum_with_noise(group: dict[str, Any]) -> bool:
    """Whether ``group`` has noise and an Adam drift with momentum (a biased stationary law)."""
    return group["noise"] and group["drift"] == "adam" and group["betas"][0] > 0


def _normalise(group: dict[str, Any], where: str) -> None:
    """A β schedule or a projection given as data (a dict: a config or a checkpoint) becomes the object."""
    if isinstance(group.get("beta"), Mapping):
        try:
            group["beta"] = schedule_from_dict(group["beta"])
        except ValueError as error:
            raise ValueError(f"{where}: beta: {error}") from None
    if isinstance(group.get("projection"), Mapping):
        try:
            group["projection"] = projection_from_dict(group["projection"])
        except ValueError as error:
            raise ValueError(f"{where}: projection: {error}") from None


def _resolve_defaults(group: dict[str, Any]) -> None:
    """``betas``/``eps`` left unset (``None``) take the defaults of a group with or without noise."""
    if group["betas"] is None:
        group["betas"] = NOISY_BETAS if group["noise"] else PLAIN_BETAS
    if group["eps"] is None:
        group["eps"] = NOISY_EPS if group["noise"] else PLAIN_EPS


def _check_group(group: dict[str, Any], where: str) -> None:
    """Raise a ``ValueError``/``TypeError`` naming the option of ``group`` that is not allowed."""
    group["lr"] = check_positive(f"{where}: lr", group["lr"])
    beta = group["beta"]
    as_schedule(beta, f"{where}: beta")  # TypeError unless a number or a callable
    if not callable(beta):
        check_nonnegative(f"{where}: beta (the temperature)", beta)
    if not isinstance(group["drift"], str):
        raise TypeError(
            f"{where}: drift must be a string, one of {DRIFTS}, got {type(group['drift']).__name__}"
        )
    if group["drift"] not in DRIFTS:
        raise ValueError(f"{where}: drift must be one of {DRIFTS}, got {group['drift']!r}")
    betas = group["betas"]
    if betas is not None:
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"{where}: betas must be None or a pair (β1, β2), got {betas!r}")
        for name, value in zip(("β1", "β2"), betas):
            value = check_nonnegative(f"{where}: betas {name}", value)
            if value >= 1:
                raise ValueError(f"{where}: betas {name} must be in [0, 1), got {value}")
    if group["eps"] is not None:
        check_positive(f"{where}: eps", group["eps"])
    convention = group["temperature_convention"]
    if convention not in TEMPERATURE_CONVENTIONS:
        raise ValueError(
            f"{where}: temperature_convention must be one of {TEMPERATURE_CONVENTIONS}, got {convention!r}"
        )
    group["weight_decay"] = check_nonnegative(f"{where}: weight_decay", group["weight_decay"])
    for name in ("noise", "mean_field_scaling", "noise_preconditioned"):
        if not isinstance(group[name], bool):
            raise TypeError(f"{where}: {name} must be a bool, got {type(group[name]).__name__}")
    check_int(f"{where}: n_particles", group["n_particles"])
    check_int(f"{where}: noise_block", group["noise_block"], minimum=0)
    projection = group["projection"]
    if projection is not None and not isinstance(projection, Projection):
        raise TypeError(
            f"{where}: projection must be None or a Projection (Clip, Sphere, LayerProjection), "
            f"got {type(projection).__name__}"
        )
    step = group["step"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"{where}: step (the group's step count) must be an int ≥ 0, got {step!r}")
