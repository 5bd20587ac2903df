"""Solvers: the native Euler–Maruyama (default), every torchsde method and the kinetic splittings (BAOAB,
OBABO, ABOBA).

``SOLVERS`` maps a name to a factory (the solvers of any particle system), ``SPLITTINGS`` the kinetic
splittings' names to their words; [`get_solver`][meanfield.stepping.solvers.get_solver] turns a name or a solver object into a solver.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from .base import Solver, Stepper
from .euler import EulerMaruyama
from .splittings import SPLITTINGS, Splitting
from .torchsde import TORCHSDE_METHODS, TorchSDE

__all__ = ["Solver", "Stepper", "EulerMaruyama", "TorchSDE", "Splitting", "SOLVERS", "get_solver"]

SOLVERS: dict[str, Callable[[], Solver]] = {
    "euler": EulerMaruyama,
    "torchsde_euler": partial(TorchSDE, "euler"),
    **{name: partial(TorchSDE, name) for name in TORCHSDE_METHODS if name != "euler"},
}
"""Name → factory of the solvers that integrate any [`ParticleSystem`][meanfield.drift.systems.ParticleSystem]. The kinetic splittings
([`SPLITTINGS`][meanfield.stepping.solvers.splittings.SPLITTINGS]: ``"baoab"``, ``"obabo"``, ``"aboba"``) integrate only a
[`KineticMeanFieldLangevin`][meanfield.drift.phase_space.KineticMeanFieldLangevin] and are kept apart; [`get_solver`][meanfield.stepping.solvers.get_solver] knows both."""


def get_solver(solver: str | Solver) -> Solver:
    """Return the solver named ``solver`` (a key of [`SOLVERS`][meanfield.stepping.solvers.SOLVERS] or of
    [`SPLITTINGS`][meanfield.stepping.solvers.splittings.SPLITTINGS]), or ``solver`` itself if it is one.

    Raises:
        ValueError: for an unknown name (the message lists the allowed ones).
        TypeError: for anything that is neither a name nor a [`Solver`][meanfield.stepping.solvers.base.Solver].
    """
    if isinstance(solver, Solver):
        return solver
    if isinstance(solver, str):
        if solver in SPLITTINGS:  # kinetic Langevin splittings (meanfield.stepping.solvers.splittings)
            return Splitting(solver)
        if solver not in SOLVERS:
            raise ValueError(
                f"unknown solver {solver!r}; allowed: {sorted(SOLVERS)}, the kinetic splittings "
                f"{sorted(SPLITTINGS)}, or a Solver object"
            )
        return SOLVERS[solver]()
    raise TypeError(
        f"solver must be a name ({sorted(SOLVERS)}) or a Solver object, got {type(solver).__name__}"
    )
