r"""Step-size studies on one Brownian path: the same system at steps $k\cdot \eta$ (k = 1, 2, 4, …), coupled.

Runs at $\eta$ and $2\eta$ driven by the same Brownian path (the coarse increments are sums of the fine ones,
[`coarsen`][meanfield.stepping.brownian.BrownianIncrements.coarsen]) have strongly correlated errors, so the Richardson
extrapolation $2\cdot v(\eta) - v(2\eta)$ removes the O(η) bias of a weak-order-1 scheme at a small cost in variance,
and $v(2\eta) - v(\eta)$ measures that bias directly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from .._checks import check_int, check_positive
from ..drift.systems import ParticleSystem
from .brownian import BrownianIncrements
from .simulate import simulate

__all__ = ["coupled_step_sizes", "richardson"]


def coupled_step_sizes(
    system: ParticleSystem,
    x0: torch.Tensor,
    *,
    eta: float,
    n_segments: int,
    observable: Callable[[torch.Tensor], torch.Tensor],
    generator: torch.Generator,
    levels: Sequence[int] = (1, 2, 4),
    record_every: int = 8,
    segment: int = 16,
    solver: str = "euler",
) -> dict[int, np.ndarray]:
    r"""Simulate ``system`` at steps $k\cdot eta$ for every ``k`` in ``levels`` on one shared Brownian path.

    The path is drawn in segments of ``segment·record_every`` fine steps (so memory stays bounded); each
    run records ``observable(states)`` every ``record_every`` fine steps.

    Args:
        system: the particle system.
        x0: the initial state ``(B, M, d)``, the same for every level.
        eta: the finest step.
        n_segments: how many segments to run (time ``n_segments·segment·record_every·eta``).
        observable: ``states (S, B, M, d) -> (S, B)``, e.g. ``lambda s: s.mean(dim=(2, 3))``.
        generator: draws the Brownian path.
        levels: step multipliers; each must divide ``record_every``.
        record_every: fine steps between records.
        segment: records per segment of pre-drawn increments.
        solver: the solver of every run.

    Returns:
        ``{k: (n_segments·segment, B)}`` NumPy arrays of the recorded observable.
    """
    eta = check_positive("eta", eta)
    n_segments, record_every = check_int("n_segments", n_segments), check_int("record_every", record_every)
    segment = check_int("segment", segment)
    bad = [k for k in levels if not isinstance(k, int) or k < 1 or record_every % k]
    if bad:
        raise ValueError(f"levels must be positive ints dividing record_every = {record_every}, got {bad}")
    states = {k: x0.clone() for k in levels}
    series: dict[int, list[torch.Tensor]] = {k: [] for k in levels}
    n_fine, t = segment * record_every, 0.0
    for _ in range(n_segments):
        path = BrownianIncrements.sample(  # the system's noise shape (general noise: (B, M, m)), where x0 is
            n_fine, system.noise_shape(x0.shape), eta, generator=generator, dtype=x0.dtype, device=x0.device
        )
        for k in levels:
            traj = simulate(
                system,
                states[k],
                t0=t,
                t1=t + n_fine * eta,
                dt=k * eta,
                solver=solver,
                brownian=path if k == 1 else path.coarsen(k),
                save_every=record_every // k,
            )
            states[k] = traj.final
            series[k].append(observable(traj.states[1:]))  # (segment, B)
        t += n_fine * eta
    return {k: torch.cat(v).numpy() for k, v in series.items()}


def richardson(v_eta, v_2eta):
    r"""$2\cdot v(\eta) - v(2\eta)$: removes the O(η) term of $v(\eta) = v(0) + c\cdot \eta + O(\eta^2)$."""
    return 2 * v_eta - v_2eta
