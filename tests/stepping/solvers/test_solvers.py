"""Tests of :mod:`meanfield.stepping.solvers`."""

from __future__ import annotations

import math

import pytest
import torch
from helpers.drift_oracles import autograd_drift, system_and_oracle

from meanfield import BrownianIncrements, simulate
from meanfield.drift.potentials import (
    Alignment,
    DoubleWell,
    GaussianInteraction,
    Quadratic,
    QuadraticInteraction,
    RadialInteraction,
)
from meanfield.stepping.solvers import SOLVERS


def cloud(B=2, M=9, d=3, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(B, M, d, generator=g, dtype=torch.float64)


CONFINEMENTS = {
    "Quadratic(1.3)": (Quadratic(1.3), ("quadratic", (1.3,))),
    "Quadratic(0)": (Quadratic(0.0), ("quadratic", (0.0,))),
    "DoubleWell": (DoubleWell(), ("double_well", ())),
}


INTERACTIONS = {
    "none": (None, None),
    "QuadraticInteraction(0.7)": (QuadraticInteraction(0.7), ("quadratic", (0.7,))),
    "QuadraticInteraction(-0.4)": (QuadraticInteraction(-0.4), ("quadratic", (-0.4,))),
    "Alignment(0.9)": (Alignment(0.9), ("alignment", (0.9,))),
    "GaussianInteraction(0.8,0.6)": (GaussianInteraction(0.8, 0.6), ("gaussian", (0.8, 0.6))),
    "GaussianInteraction chunked": (
        GaussianInteraction(-1.1, 1.5, max_elements=20),
        ("gaussian", (-1.1, 1.5)),
    ),
    "RadialInteraction soft Coulomb": (
        RadialInteraction(lambda r2: 1 / (1 + r2), lambda r2: -1 / (1 + r2) ** 2, max_elements=7),
        ("soft_coulomb", ()),
    ),
}


def _euler(f, x, dt, s_dW):
    return x + dt * f(x) + s_dW


def _heun(f, x, dt, s_dW):  # Stratonovich Heun: predictor, then the trapezoid
    pred = x + dt * f(x) + s_dW
    return x + 0.5 * dt * (f(x) + f(pred)) + s_dW


def _midpoint(f, x, dt, s_dW):
    mid = x + 0.5 * dt * f(x) + 0.5 * s_dW
    return x + dt * f(mid) + s_dW


ONE_STEP = {
    "euler": _euler,
    "torchsde_euler": _euler,
    "milstein": _euler,  # the Milstein correction σσ' vanishes for additive noise
    "euler_heun": _euler,  # ½(g(x) + g(x + g dW)) dW = σ dW for additive noise
    "heun": _heun,
    "midpoint": _midpoint,
}


BY_ORDER_TESTS = {"srk", "reversible_heun", "log_ode"}  # checked against exact GBM paths (test_orders.py)


def test_every_solver_has_a_one_step_oracle_or_an_order_test():
    assert set(SOLVERS) == set(ONE_STEP) | BY_ORDER_TESTS


@pytest.mark.parametrize("name", sorted(ONE_STEP))
@pytest.mark.parametrize(
    "c,i", [("DoubleWell", "GaussianInteraction(0.8,0.6)"), ("Quadratic(1.3)", "QuadraticInteraction(0.7)")]
)
def test_one_solver_step_equals_the_scheme_with_the_autograd_drift(name, c, i):
    """Oracle: the scheme's formula with ``f = −∇(M·E)`` by autograd; two steps (the second from the
    solver's own first state), so that a stepper carrying a wrong state between steps is seen too."""
    system, V, W = system_and_oracle(c, i, beta=0.3)
    x0, dt = cloud(M=6, scale=0.7), 0.05
    path = BrownianIncrements.sample(2, tuple(x0.shape), dt, generator=torch.Generator().manual_seed(6))
    states = simulate(system, x0, t1=2 * dt, dt=dt, brownian=path, solver=name, save_every=1).states
    sigma = math.sqrt(0.6)

    def f(x):
        return autograd_drift(V, W, x)

    for n in range(2):
        expected = ONE_STEP[name](f, states[n], dt, sigma * path.increments[n])
        assert torch.allclose(states[n + 1], expected, rtol=1e-9, atol=1e-11), f"{name} step {n + 1}"
    # negative control: Euler and Heun differ at this step size, so the oracles can tell schemes apart
    assert not torch.allclose(
        _euler(f, x0, dt, sigma * path.increments[0]), _heun(f, x0, dt, sigma * path.increments[0]), atol=1e-6
    )
