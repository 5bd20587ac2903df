r"""The ``mean_field`` task: a McKean–Vlasov particle system run by ``meanfield run``.

The model is a [`ParticleCloud`][meanfield.nn.cloud.ParticleCloud] — ``M`` particles in $\mathbb{R}^d$ in a confinement ``V``
($a/2\cdot|x|^2$ or the double well $\sum_k x_k^4/4 - x_k^2/2$) with the interaction $W(z) = k/2\cdot|z|^2$ — and the loss
its mean-field energy. With ``[optim] drift = "sgd"`` the Langevin step is the Euler–Maruyama step of
$dx_i = -(\nabla V(x_i) + k(x_i - \bar{x})) dt + \sqrt{2\beta} dW_i$ with ``dt = lr`` (``docs/scaling.md``): the simulation gets
run folders, checkpoints and resume, sweeps over β, k, M and seeds, and ``parallel = "particles"`` under
``torchrun`` (each rank ``M/N`` particles, the averages all-reduced, ``optim.noise_block`` per-block noise so that
a rank draws only its own particles' noise).

There is no data: every step is one step of the dynamics. Evaluation: the energy, the per-coordinate variance
$(\mathrm{mean} |x|^2 - |\bar{x}|^2)/d$, the centre $|\bar{x}|$ (the order parameter of the double well's phase transition), and, for
the quadratic confinement, the stationary variance of the discretised chain in the mean-field limit,
$\beta/((a + k)(1 - \eta(a + k)/2))$ with $\beta$ and $\eta$ those of the chain: ``meanfield run`` passes ``[optim] beta``
and ``lr`` (the model's ``beta`` and ``eta``; a configuration gives them once, in ``[optim]``, and a ``[model] beta``
or ``eta`` is refused), when each is a number (not a schedule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from meanfield.drift.potentials import DoubleWell, Quadratic
from meanfield.nn.cloud import ParticleCloud
from meanfield.seeds import derive_seed
from meanfield.tasks import Experiment

__all__ = ["MEAN_FIELD", "MeanFieldData", "MeanFieldModel", "stationary_variance"]


@dataclass
class MeanFieldData:
    """``[data]`` of ``mean_field``: nothing (a particle system has no data)."""


@dataclass
class MeanFieldModel:
    r"""``[model]`` of ``mean_field``.

    ``confinement``: ``"quadratic"`` ($V = a/2\cdot|x|^2$) or ``"double_well"``; ``k``: the quadratic interaction;
    ``init_scale``: the initial law ``N(0, init_scale² I)``; ``beta`` and ``eta``: the chain's temperature and
    step, only for the reported exact stationary variance (left out for β = 0, η = 0, and where the chain has
    no stationary law: a + k ≤ 0, e.g. free diffusion, or η(a + k) ≥ 2). ``meanfield run`` fills them from
    ``[optim] beta`` and ``lr`` (``FROM_OPTIM``); a configuration does not give them in ``[model]``.
    """

    n_particles: int = 1024
    d: int = 2
    confinement: Literal["quadratic", "double_well"] = "quadratic"
    a: float = 1.0
    k: float = 0.0
    init_scale: float = 3.0
    beta: float = 0.0
    eta: float = 0.0


def _stationary(a: float, k: float, eta: float) -> bool:
    """Whether the quadratic chain has a stationary law about its mean: a + k > 0 and 0 < η(a + k) < 2."""
    c = a + k
    return c > 0 and 0 < eta * c < 2


def stationary_variance(a: float, k: float, beta: float, eta: float) -> float:
    r"""Per-coordinate stationary variance of the Euler–Maruyama chain of the quadratic system, mean-field limit.

    Each coordinate of $x_i - \bar{x}$ follows $u \leftarrow (1 - \eta(a + k))u + \sqrt{2\beta \eta}\xi$ (and $\bar{x} \to 0$ at rate ``a``), so
    $\operatorname{Var} = 2\beta \eta/(1 - (1 - \eta(a + k))^2) = \beta/((a + k)(1 - \eta(a + k)/2))$, the SDE's $\beta/(a + k)$ as $\eta \to 0$.
    """
    c = a + k
    if not _stationary(a, k, eta):
        raise ValueError(
            f"the chain is stationary only for a + k > 0 and 0 < η(a + k) < 2, got {c} and {eta * c}"
        )
    return beta / (c * (1 - eta * c / 2))


class _NoBatches:
    """The batch sampler of a task without data: no state, every batch ``None``."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def next(self) -> None:
        return None


class _MeanField:
    Data = MeanFieldData
    Model = MeanFieldModel
    # the chain's β and step: meanfield run fills them from [optim]
    FROM_OPTIM = {"beta": "beta", "eta": "lr"}

    def build(
        self,
        data: MeanFieldData,
        model: MeanFieldModel,
        *,
        batch_size: int,
        seed: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> Experiment:
        V = Quadratic(model.a) if model.confinement == "quadratic" else DoubleWell()
        g = torch.Generator().manual_seed(derive_seed(seed, "init"))
        cloud = ParticleCloud(
            model.n_particles, model.d, V, model.k, init_scale=model.init_scale, generator=g, dtype=dtype
        ).to(device)
        exact = None
        # a chain without a stationary law (free diffusion, η(a + k) ≥ 2) has no exact value
        if model.confinement == "quadratic" and model.beta > 0 and _stationary(model.a, model.k, model.eta):
            exact = stationary_variance(model.a, model.k, model.beta, model.eta)
        batches = _NoBatches()

        def loss(batch: None) -> torch.Tensor:
            return cloud.energy(cloud())  # every rank's averages, all-reduced when sharded

        @torch.no_grad()
        def evaluate() -> dict[str, float]:
            means = cloud()  # (1, 2 + d) (V̄, mean |x|², x̄) over all M particles (all-reduced when sharded)
            centre = means[0, 2:]  # (d,)
            out = {
                "energy": float(cloud.energy(means)),
                "variance": float((means[0, 1] - centre.square().sum()) / model.d),  # (mean |x|² − |x̄|²)/d
                "centre": float(centre.norm()),
            }
            if exact is not None:
                out["variance_exact"] = exact
                out["variance_ratio"] = out["variance"] / exact
            return out

        return Experiment(
            model=cloud,
            batches=batches,
            next_batch=batches.next,
            loss=loss,
            evaluate=evaluate,
            unit="particles",
            units_per_step=model.n_particles,
            description=(
                f"ParticleCloud(M={model.n_particles}, d={model.d}, V={V!r}, W = k/2|z|², k={model.k})"
            ),
        )


MEAN_FIELD = _MeanField()
"""The ``mean_field`` task."""
