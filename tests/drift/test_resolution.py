"""Tests of :mod:`meanfield.drift.resolution`: the collapse watch's message."""

from __future__ import annotations

import warnings

import pytest
import torch

from meanfield import MeanFieldLangevin, simulate
from meanfield.drift.potentials import LogInteraction, Quadratic
from meanfield.drift.resolution import STABILITY_LIMITS, CollapseWatch, UnstableStepWarning, unstable_step


def _collapsed_in(B: int) -> str:
    """The watch's message for B replicas of M = 8 particles all within 1e-9 of one point (every replica
    collapsed), under an attractive logarithmic interaction."""
    system = MeanFieldLangevin(Quadratic(1.0), LogInteraction(-4.0), beta=0.1)
    x = 1e-9 * torch.randn(B, 8, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    watch = CollapseWatch(system, x, dt=0.01, t0=0.0, every=1, action="warn")
    watch.observe(3, x)
    warning = watch.read()
    assert warning is not None and warning.replicas == list(range(B)) and watch.read() is None  # said once
    return str(warning.args[0])


def test_the_message_lists_five_more_replicas_and_marks_the_rest():
    """Replica 0 is named, then "(and B − 1 more replicas: [1, …, 5])", with "…" only when more than five
    others collapsed: B = 6 lists all of them (no mark), B = 7 lists five and marks the sixth; one replica
    alone gets no list."""
    assert "in replica 0 (and 5 more replicas: [1, 2, 3, 4, 5]):" in _collapsed_in(6)
    assert "in replica 0 (and 6 more replicas: [1, 2, 3, 4, 5]…):" in _collapsed_in(7)
    alone = _collapsed_in(1)
    assert "in replica 0: " in alone and "more replicas" not in alone
    assert "at t = 0.03 (step 3)" in alone


@pytest.mark.parametrize("solver", sorted(STABILITY_LIMITS))
def test_each_stability_limit_is_where_the_solvers_own_step_stops_contracting(solver):
    """The solver's step of ẋ = −x (β = 0) at λ·dt = 1.99 and 2.01: its measured growth per step |R| (Euler
    1 − z, the two-stage Runge–Kutta 1 − z + z²/2) passes 1 where ``unstable_step`` starts to warn. Only
    Euler's limit was tested: Heun's at 2.1 or 2.5 passed."""
    system = MeanFieldLangevin(Quadratic(1.0), beta=0.0)
    x0 = torch.ones(1, 1, 1, dtype=torch.float64)
    for z in (1.99, 2.01):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnstableStepWarning)
            final = simulate(system, x0, t1=20 * z, dt=z, solver=solver).final
        growth = abs(float(final)) ** (1 / 20)  # |R| per step
        warned = unstable_step(system, x0, z, solver) is not None
        assert (growth >= 1.0) == warned == (z > 2), (solver, z, growth)
