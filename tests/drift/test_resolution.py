"""Tests of :mod:`meanfield.drift.resolution`: the collapse watch's message."""

from __future__ import annotations

import torch

from meanfield import MeanFieldLangevin
from meanfield.drift.potentials import LogInteraction, Quadratic
from meanfield.drift.resolution import CollapseWatch


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
