"""Tests of :mod:`meanfield.optim.conventions`."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch
from torch import nn

from meanfield.optim import (
    Clip,
    Langevin,
    momentum_variance_factor,
)
from meanfield.optim import groups as G
from meanfield.optim.conventions import NOISY_BETAS, NOISY_EPS, PLAIN_BETAS, PLAIN_EPS


def _lyapunov_factor(u: float, beta1: float) -> float:
    """``Var θ/(β/a)`` of the chain ``x' = A x + b ξ`` from scipy's discrete Lyapunov solver (β = a = 1)."""
    A = np.array([[1 - (1 - beta1) * u, -beta1], [(1 - beta1) * u, beta1]])
    h = u  # a = 1: h = u
    Q = np.array([[2 * h, 0.0], [0.0, 0.0]])  # b bᵀ with b = (sqrt(2βh), 0)
    return float(scipy.linalg.solve_discrete_lyapunov(A, Q)[0, 0])


@pytest.mark.parametrize("u, beta1", [(0.3, 0.0), (1.2, 0.5), (0.05, 0.9), (5.9, 0.5)])
def test_momentum_variance_factor_is_the_lyapunov_solution(u, beta1):
    """The closed form against scipy's solution of ``Σ = AΣAᵀ + bbᵀ`` (rel. 1e-9), also close to the
    stability edge (u = 5.9 < 6 at β1 = 0.5). Negative control: the solution at β1 + 0.05 differs by > 0.1 %."""
    assert momentum_variance_factor(u, beta1) == pytest.approx(_lyapunov_factor(u, beta1), rel=1e-9)
    wrong = _lyapunov_factor(u, beta1 + 0.05)
    assert abs(momentum_variance_factor(u, beta1) / wrong - 1) > 1e-3


@pytest.mark.parametrize("u, beta1", [(2.0, 0.0), (6.0, 0.5), (3.0, 0.0), (1e6, 0.9)])
def test_momentum_variance_factor_is_inf_at_and_beyond_the_stability_edge(u, beta1):
    """``u ≥ 2(1 + β1)/(1 − β1)``: the chain is not stable and the factor is ``inf`` (at the edge itself,
    u = 2 at β1 = 0 and u = 6 at β1 = 0.5, the denominator is exactly 0: ``inf``, not a division error).
    Negative control: just inside the edge the factor is finite and equals the Lyapunov solution."""
    assert momentum_variance_factor(u, beta1) == math.inf
    inside = 0.999 * 2 * (1 + beta1) / (1 - beta1)
    assert momentum_variance_factor(inside, beta1) == pytest.approx(_lyapunov_factor(inside, beta1), rel=1e-6)


@pytest.mark.parametrize("beta1", [1.0, 1.5, 2.0, 7.0])
def test_momentum_variance_factor_refuses_beta1_of_one_or_more(beta1):
    """β1 must lie in ``[0, 1)``: 1 itself and anything above are refused with the documented message
    (not answered with ``inf``)."""
    with pytest.raises(ValueError, match=rf"^beta1 must be in \[0, 1\), got {beta1}$"):
        momentum_variance_factor(0.1, beta1)


def test_momentum_variance_factor_names_its_arguments():
    """A negative or non-numeric ``u`` or ``β1`` is refused with a message that names it exactly."""
    with pytest.raises(ValueError, match=r"^u \(η_eff·a\) must be ≥ 0, got -1.0$"):
        momentum_variance_factor(-1.0, 0.0)
    with pytest.raises(TypeError, match=r"^u \(η_eff·a\) must be a real number, got str$"):
        momentum_variance_factor("1", 0.0)
    with pytest.raises(ValueError, match=r"^beta1 must be ≥ 0, got -0.1$"):
        momentum_variance_factor(0.1, -0.1)
    with pytest.raises(TypeError, match=r"^beta1 must be a real number, got NoneType$"):
        momentum_variance_factor(0.1, None)


def test_momentum_variance_factor_against_a_numerical_lyapunov_solution():
    """The closed form against ``scipy.linalg.solve_discrete_lyapunov`` of the (θ, h·m) recursion."""
    from scipy.linalg import solve_discrete_lyapunov

    for u in (0.01, 0.1, 0.5):
        for r in (0.0, 0.5, 0.9, 0.99):
            A = [[1 - (1 - r) * u, -r], [(1 - r) * u, r]]
            sigma = solve_discrete_lyapunov(A, [[2 * u, 0.0], [0.0, 0.0]])  # β/a = 1: σ² = 2βh = 2u/a
            assert momentum_variance_factor(u, r) == pytest.approx(sigma[0][0], rel=1e-10)
    assert momentum_variance_factor(0.1, 0.0) == pytest.approx(1 / (1 - 0.05), rel=1e-15)
    # beyond the stability limit 2(1 + β1)/(1 − β1) = 38
    assert momentum_variance_factor(38.001, 0.9) == math.inf


def _group(**overrides):
    """A valid param group dict (as ``Langevin.__init__`` builds its defaults)."""
    group = {
        "lr": 0.1,
        "beta": 0.5,
        "drift": "sgd",
        "betas": None,
        "eps": None,
        "weight_decay": 0.0,
        "noise": True,
        "n_particles": 1,
        "mean_field_scaling": True,
        "noise_preconditioned": True,
        "projection": None,
        "temperature_convention": "mean_field",
        "noise_block": 0,
        "step": 0,
    }
    group.update(overrides)
    return group


@pytest.mark.parametrize(
    "noise, betas, eps", [(True, NOISY_BETAS, NOISY_EPS), (False, PLAIN_BETAS, PLAIN_EPS)]
)
def test_resolve_defaults_fills_only_unset_betas_and_eps(noise, betas, eps):
    """Unset ``betas``/``eps`` take the noisy or plain defaults (``(0, 0.999)``, 1 / ``(0.9, 0.999)``, 1e-8); set
    values are kept."""
    assert (
        NOISY_BETAS == (0.0, 0.999) and PLAIN_BETAS == (0.9, 0.999) and NOISY_EPS == 1.0 and PLAIN_EPS == 1e-8
    )
    group = _group(noise=noise)
    G.resolve_defaults(group)
    assert group["betas"] == betas and group["eps"] == eps
    kept = _group(noise=noise, betas=(0.3, 0.4), eps=0.25)
    G.resolve_defaults(kept)
    assert kept["betas"] == (0.3, 0.4) and kept["eps"] == 0.25


def test_add_param_group_checks_resolves_and_removes_a_refused_group():
    """An added group is checked (its error names ``param group 1``, and the group is removed again), gets the
    defaults of a plain group, and an integer parameter or a data projection is handled."""
    opt = Langevin([nn.Parameter(torch.zeros(2))], lr=0.1, beta=0.1, seed=0)
    with pytest.raises(ValueError, match=r"^param group 1: lr must be > 0, got -2\.0$"):
        opt.add_param_group({"params": [nn.Parameter(torch.zeros(2))], "lr": -2.0})
    assert len(opt.param_groups) == 1
    with pytest.raises(
        TypeError, match=r"^param group 1: parameters must be floating-point tensors, got dtype torch\.int64$"
    ):
        opt.add_param_group({"params": [torch.zeros(2, dtype=torch.long)]})
    assert len(opt.param_groups) == 1
    with pytest.raises(ValueError, match=r"^param group 1: projection: "):
        opt.add_param_group({"params": [nn.Parameter(torch.zeros(2))], "projection": {"kind": "nope"}})
    assert len(opt.param_groups) == 1
    opt.add_param_group(
        {"params": [nn.Parameter(torch.zeros(2))], "noise": False, "projection": {"kind": "clip", "A": 1.5}}
    )
    g = opt.param_groups[1]
    assert g["betas"] == PLAIN_BETAS and g["eps"] == PLAIN_EPS and g["step"] == 0
    assert isinstance(g["projection"], Clip) and g["projection"].A == 1.5
    assert opt.param_groups[0]["betas"] == NOISY_BETAS and opt.param_groups[0]["eps"] == NOISY_EPS
