r"""meanfield: mean-field Langevin dynamics — neural-network training as an interacting-particle SDE.

Mean-field here means *particles*: M particles $\theta_i$ (points, attention heads, neurons) form the empirical
law $\rho_M = 1/M \sum \delta_{\theta_i}$ and move by $d\theta = -\nabla(\delta L/\delta \rho) dt + \sqrt{2\beta} dW$.
"""

from . import metrics, nn, optim, studies
from .drift import phase_space, potentials, projections, schedules
from .drift.phase_space import KineticMeanFieldLangevin
from .drift.systems import SDE, MeanFieldLangevin, ParticleSystem
from .metrics.free_energy import FreeEnergy, free_energy
from .nn import tokens
from .optim import KineticLangevin, Langevin
from .progress import set_progress
from .stepping.brownian import BrownianIncrements
from .stepping.simulate import NonFiniteStateError, Trajectory, simulate
from .stepping.solvers import SOLVERS, EulerMaruyama, Solver, TorchSDE, get_solver
from .studies import StudyResult, SweepResult, convergence_in_m, sweep

kinetic = phase_space  # `mf.kinetic`: the kinetic (phase-space) system's module, meanfield.drift.phase_space

__version__ = "0.1.0"

__all__ = [
    "BrownianIncrements",
    "EulerMaruyama",
    "FreeEnergy",
    "KineticLangevin",
    "KineticMeanFieldLangevin",
    "Langevin",
    "MeanFieldLangevin",
    "NonFiniteStateError",
    "ParticleSystem",
    "SDE",
    "SOLVERS",
    "Solver",
    "StudyResult",
    "SweepResult",
    "TorchSDE",
    "Trajectory",
    "convergence_in_m",
    "free_energy",
    "get_solver",
    "kinetic",
    "metrics",
    "nn",
    "optim",
    "potentials",
    "projections",
    "schedules",
    "set_progress",
    "simulate",
    "studies",
    "tokens",
    "sweep",
]
