"""The solver interface: a solver turns a system and a noise source into a stepper on a fixed grid."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from ...drift.systems import ParticleSystem
from ..brownian import NoiseSource

__all__ = ["Solver", "Stepper"]


class Stepper(ABC):
    r"""Advances one simulation: ``run(x, n, k)`` takes $x = x_{t_n}$ to $x_{t_{n+k}}$, $t_n = t_0 + n\cdot dt$.

    A stepper may carry solver state between calls (e.g. the reversible Heun auxiliary state), so one
    simulation uses one stepper and calls ``run`` on consecutive segments.

    On an accelerator a step must not wait for the device: no ``.item()``, ``float(tensor)`` or
    ``bool(tensor)`` on the state inside ``run`` (``simulate`` checks the state's finiteness itself, every
    ``check_every`` steps), and the noise comes from the source's reused buffer.
    """

    @abstractmethod
    def run(self, x: torch.Tensor, n: int, k: int) -> torch.Tensor:
        """``(B, M, d) -> (B, M, d)`` after ``k`` steps from step index ``n``; may update ``x`` in place."""


class Solver(ABC):
    """A fixed-step SDE scheme with declared orders of convergence.

    Subclasses declare ``name`` and the strong and weak orders per noise type (``None`` where the
    scheme does not apply). The orders are those of the scheme for the Itô system it is given.
    """

    name: str
    strong_orders: dict[str, float | None]
    weak_orders: dict[str, float | None]
    needs_gaussian: bool = True

    def strong_order(self, noise: str) -> float | None:
        """Strong order for a system with this noise type (``None``: the scheme does not apply)."""
        return self.strong_orders.get(noise)

    def weak_order(self, noise: str) -> float | None:
        """Weak order for a system with this noise type (``None``: the scheme does not apply)."""
        return self.weak_orders.get(noise)

    def check(self, system: ParticleSystem, source: NoiseSource) -> None:
        """Raise ``ValueError`` if this solver cannot integrate ``system`` driven by ``source``."""
        if self.strong_order(system.noise) is None:
            allowed = [k for k, v in self.strong_orders.items() if v is not None]
            raise ValueError(
                f"solver {self.name!r} needs noise of type {allowed}, but this system's noise is "
                f"{system.noise!r}; use solver='euler' (any noise type)"
            )
        if self.needs_gaussian and not source.gaussian:
            raise ValueError(
                f"solver {self.name!r} needs Gaussian increments; noise='rademacher' is for the native "
                "Euler–Maruyama solver only (weak order 1)"
            )

    @abstractmethod
    def stepper(self, system: ParticleSystem, source: NoiseSource, t0: float, dt: float) -> Stepper:
        r"""A stepper for ``system`` on the grid $t_n = t_0 + n\cdot dt$ driven by ``source``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
