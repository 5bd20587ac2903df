r"""The laws and conventions of the Langevin optimizer: drift rules, what β means, the defaults a group with or
without noise takes, and the stationary law of the momentum chain ([`momentum_variance_factor`][meanfield.optim.conventions.momentum_variance_factor]).

With an Adam drift, momentum $\beta_1 > 0$ makes the chain's stationary law on $F = a/2 \theta^2$ (constant step
$h = \eta_{\mathrm{eff}}$, $u = h\cdot a$)

$$
\operatorname{Var} \theta = \beta/a \cdot 2(1 - \beta_1^2 + 2\beta_1u)/((1 - \beta_1)(2(1 + \beta_1) - (1 - \beta_1)u)) = \beta/a \cdot (1 + (u/2)(1+\beta_1)/(1-\beta_1) + O(u^2)),
$$

the Euler–Maruyama bias ``u/2`` multiplied by $(1 + \beta_1)/(1 - \beta_1)$; groups with noise therefore default to
$\beta_1 = 0$ ([`NOISY_BETAS`][meanfield.optim.conventions.NOISY_BETAS]) and $\varepsilon = 1$ ([`NOISY_EPS`][meanfield.optim.conventions.NOISY_EPS]: $\eta_{\mathrm{eff}} \le \operatorname{lr}$).
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
r"""What a group's $\beta$ means: the temperature of the mean-field law (``"mean_field"``, the default) or of the
raw loss ``L`` (``"loss"``, the seeds' convention $\theta \leftarrow \theta - \eta\nabla L + \sqrt{2\beta \eta}\xi$); see [`Langevin`][meanfield.optim.langevin.Langevin]."""

NOISY_BETAS: tuple[float, float] = (0.0, 0.999)
r"""Adam's $(\beta_1, \beta_2)$ for a group with noise when ``betas`` is not given: no momentum (see
[`momentum_variance_factor`][meanfield.optim.conventions.momentum_variance_factor]), i.e. the RMSprop-preconditioned drift of pSGLD."""
PLAIN_BETAS: tuple[float, float] = (0.9, 0.999)
r"""Adam's $(\beta_1, \beta_2)$ for a group without noise when ``betas`` is not given (torch's default)."""
NOISY_EPS: float = 1.0
r"""Adam's $\varepsilon$ for a group with noise when ``eps`` is not given: $\eta_{\mathrm{eff}} = \operatorname{lr}/(\sqrt{\hat{v}} + \varepsilon) \le \operatorname{lr}$."""
PLAIN_EPS: float = 1e-8
r"""Adam's $\varepsilon$ for a group without noise when ``eps`` is not given (torch's default)."""


def momentum_variance_factor(u: float, beta1: float) -> float:
    r"""Stationary $\operatorname{Var} \theta / (\beta/a)$ of the Adam-momentum Langevin chain on $F = a/2 \theta^2$ with a constant step.

    The chain (fused Adam order, bias corrections at their limit 1, $h = \eta_{\mathrm{eff}}$, $u = h\cdot a$)

    $$
    m' = \beta_1 m + (1 - \beta_1) a \theta, \qquad \theta' = \theta - h m' + \sqrt{2\beta h} \xi
    $$

    is linear in $x = (\theta, h\cdot m)$: $x' = A x + b \xi$ with $A = [[1 - (1-\beta_1)u, -\beta_1], [(1-\beta_1)u, \beta_1]]$ and
    $b = (\sqrt{2\beta h}, 0)$. Its stationary covariance solves the discrete Lyapunov equation
    $\Sigma = A \Sigma A^\top + b b^\top$, whose $\theta \theta$ entry is

    $$
    \begin{aligned}
    \operatorname{Var} \theta = (\beta/a) \cdot 2(1 - \beta_1^2 + 2\beta_1\cdot u) / ((1 - \beta_1)(2(1 + \beta_1) - (1 - \beta_1)u)) \\
    = (\beta/a) \cdot (1 + (u/2)(1 + \beta_1)/(1 - \beta_1) + O(u^2)),
    \end{aligned}
    $$

    stable for $u < 2(1 + \beta_1)/(1 - \beta_1)$. At $\beta_1 = 0$ it is the Euler–Maruyama value $1/(1 - u/2)$;
    momentum multiplies the chain's O(u) bias by $(1 + \beta_1)/(1 - \beta_1)$ (19 at $\beta_1 = 0.9$) and the factor
    grows without bound as $\beta_1 \to 1$.

    Args:
        u: $\eta_{\mathrm{eff}}\cdot a \ge 0$, the step times the curvature.
        beta1: Adam's $\beta_1$ in ``[0, 1)``.

    Returns:
        The factor $\operatorname{Var} \theta/(\beta/a)$; ``inf`` where the chain is not stable.
    """
    u = check_nonnegative("u (η_eff·a)", u)
    beta1 = check_nonnegative("beta1", beta1)
    if beta1 >= 1:
        raise ValueError(f"beta1 must be in [0, 1), got {beta1}")
    denominator = (1 - beta1) * (2 * (1 + beta1) - (1 - beta1) * u)
    if denominator <= 0:
        return math.inf
    return 2 * (1 - beta1**2 + 2 * beta1 * u) / denominator
