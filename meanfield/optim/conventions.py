"""The laws and conventions of the Langevin optimizer: drift rules, what β means, the defaults a group with or
without noise takes, and the stationary law of the momentum chain ([`momentum_variance_factor`][meanfield.optim.conventions.momentum_variance_factor]).

With an Adam drift, momentum ``β1 > 0`` makes the chain's stationary law on ``F = a/2 θ²`` (constant step
``h = η_eff``, ``u = h·a``)

    Var θ = β/a · 2(1 − β1² + 2β1u)/((1 − β1)(2(1 + β1) − (1 − β1)u)) = β/a · (1 + (u/2)(1+β1)/(1−β1) + O(u²)),

the Euler–Maruyama bias ``u/2`` multiplied by ``(1 + β1)/(1 − β1)``; groups with noise therefore default to
``β1 = 0`` ([`NOISY_BETAS`][meanfield.optim.conventions.NOISY_BETAS]) and ``ε = 1`` ([`NOISY_EPS`][meanfield.optim.conventions.NOISY_EPS]: ``η_eff ≤ lr``).
"""

from __future__ import annotations

import math

from meanfield._checks import check_nonnegative

__all__ = [
    "DRIFTS",
    "TEMPERATURE_CONVENTIONS",
    "NOISY_BETAS",
    "PLAIN_BETAS",
    "NOISY_EPS",
    "PLAIN_EPS",
    "momentum_variance_factor",
]

DRIFTS: tuple[str, ...] = ("sgd", "adam")
"""The drift rules a param group can use."""

TEMPERATURE_CONVENTIONS: tuple[str, ...] = ("mean_field", "loss")
"""What a group's ``β`` means: the temperature of the mean-field law (``"mean_field"``, the default) or of the
raw loss ``L`` (``"loss"``, the seeds' convention ``θ ← θ − η∇L + sqrt(2βη)ξ``); see [`Langevin`][meanfield.optim.langevin.Langevin]."""

NOISY_BETAS: tuple[float, float] = (0.0, 0.999)
"""Adam's ``(β1, β2)`` for a group with noise when ``betas`` is not given: no momentum (see
[`momentum_variance_factor`][meanfield.optim.conventions.momentum_variance_factor]), i.e. the RMSprop-preconditioned drift of pSGLD."""
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
