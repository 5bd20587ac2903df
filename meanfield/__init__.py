"""meanfield: mean-field Langevin dynamics — neural-network training as an interacting-particle SDE.

Mean-field here means *particles*: M particles ``θ_i`` (points, attention heads, neurons) form the empirical
law ``ρ_M = 1/M Σ δ_{θ_i}`` and move by ``dθ = −∇(δL/δρ) dt + sqrt(2β) dW``.
"""

from . import potentials, projections, schedules
from .brownian import BrownianIncrements
from .simulate import NonFiniteStateError, Trajectory, simulate
from .solvers import SOLVERS, EulerMaruyama, Solver, TorchSDE, get_solver
from .systems import SDE, MeanFieldLangevin, ParticleSystem

__version__ = "0.1.0"

__all__ = [
    "BrownianIncrements",
    "EulerMaruyama",
    "MeanFieldLangevin",
    "NonFiniteStateError",
    "ParticleSystem",
    "SDE",
    "SOLVERS",
    "Solver",
    "TorchSDE",
    "Trajectory",
    "get_solver",
    "potentials",
    "projections",
    "schedules",
    "simulate",
]
