"""Solvers: the native Euler–Maruyama (default) and every torchsde method, through one registry.

``SOLVERS`` maps a name to a factory; :func:`get_solver` turns a name or a solver object into a solver.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from .base import Solver, Stepper
from .euler import EulerMaruyama
from .torchsde import TORCHSDE_METHODS, TorchSDE

__all__ = ["Solver", "Stepper", "EulerMaruyama", "TorchSDE", "SOLVERS", "get_solver"]

SOLVERS: dict[str, Callable[[], Solver]] = {
    "euler": EulerMaruyama,
    "torchsde_euler": partial(TorchSDE, "euler"),
    **{name: partial(TorchSDE, name) for name in TORCHSDE_METHODS if name != "euler"},
}


def get_solver(solver: str | Solver) -> Solver:
    """Return the solver named ``solver`` (a key of :data:`SOLVERS`), or ``solver`` itself if it is one.

    Raises:
        ValueError: for an unknown name (the message lists the allowed ones).
        TypeError: for anything that is neither a name nor a :class:`Solver`.
    """
    if isinstance(solver, Solver):
        return solver
    if isinstance(solver, str):
        if solver not in SOLVERS:
            raise ValueError(f"unknown solver {solver!r}; allowed: {sorted(SOLVERS)} or a Solver object")
        return SOLVERS[solver]()
    raise TypeError(
        f"solver must be a name ({sorted(SOLVERS)}) or a Solver object, got {type(solver).__name__}"
    )
