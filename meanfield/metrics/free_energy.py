r"""The free energy of a particle law, estimated from its particles, with each part and its standard error.

For a [`MeanFieldLangevin`][meanfield.drift.systems.MeanFieldLangevin] system ``dx_i = −∇V(x_i) dt − 1/M Σ_j ∇W(x_i − x_j) dt +
sqrt(2β) dW_i``, the free energy of the one-particle law ``ρ`` is

$$F(\rho) = \mathbb{E}_\rho V + \tfrac12\,\mathbb{E}_{\rho\otimes\rho} W + \beta \int \rho\log\rho
          = \underbrace{\mathbb{E}_\rho V}_{\text{confinement}}
          + \underbrace{\tfrac12\,\mathbb{E}_{\rho\otimes\rho} W}_{\text{interaction}} - \beta H(\rho),$$

the Lyapunov function of the mean-field flow. Its critical points are the self-consistent Gibbs laws
``ρ ∝ exp(−(V + W * ρ)/β)``; for a convex ``F`` (e.g. ``W`` positive definite) there is one and it is the
minimiser, otherwise there can be several, some unstable (the double well with attraction below its critical β).
Each replica's M particles are read as M draws of ``ρ`` (propagation of chaos) and every term is estimated
from them:

* confinement: ``1/M Σ_i V(x_i)``, unbiased;
* interaction: the U-statistic ``1/(2M(M − 1)) Σ_{i≠j} W(x_i − x_j)``: the sum over pairs ``j ≠ i`` with
  ``1/(M − 1)``, **not** the ``1/M Σ_j`` of the drift and of ``energy``. It is unbiased
  for ``½ E_{ρ⊗ρ} W`` when the particles are independent draws of ``ρ``; the drift's ``1/M`` sum with the
  diagonal ``j = i`` (kept for a smooth kernel) would add ``(W(0) − E_{ρ⊗ρ} W)/(2M)`` — for
  ``QuadraticInteraction(k)`` its mean is ``k/2·(M − 1)/M`` times the variance instead of ``k/2`` times it. The
  diagonal term is taken out exactly as the interaction includes it ([`self_pair_energy`][meanfield.metrics.free_energy.self_pair_energy]);
* entropy: ``meanfield.metrics.entropy`` (k-nearest-neighbour, weighted, or the Gaussian moment
  estimate), with its own standard error and its finite-M bias (see its docs).

The standard error of ``F`` combines the energy's, ``sd_i(V(x_i) + w_i)/sqrt(M)`` with
``w_i = 1/(M − 1) Σ_{j≠i} W(x_i − x_j)`` (the influence function of ``E V + ½ E W`` is ``V + W * ρ``), and
``β`` times the entropy's, as if the two were independent. Under a confinement a wider cloud has more energy
and more entropy, so ``E`` and ``−βH`` are anti-correlated and this SE is conservative; for a test, the spread
of ``F`` over independent replicas is the sharper SE.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .._checks import check_finite_tensor
from .._display import fields_html, html_block, shortlist
from .._replicas import at, check_replicas
from ..drift.potentials import Alignment, Interaction, QuadraticInteraction, RadialInteraction
from ..drift.projections import Sphere
from ..drift.schedules import Constant
from .information import entropy as estimate_entropy

if TYPE_CHECKING:
    from ..drift.systems import MeanFieldLangevin
    from ..stepping.simulate import Trajectory

__all__ = ["FreeEnergy", "free_energy", "energy_parts", "self_pair_energy"]


@dataclass(frozen=True)
class FreeEnergy:
    r"""The free energy ``F = confinement + interaction − β·entropy`` per replica, with its parts.

    Every tensor has shape ``(B,)`` for a state ``(B, M, d)``, or ``(B, S)`` along a trajectory of ``S``
    saved states (then ``times`` holds the ``S`` times).

    Attributes:
        value: ``F``.
        confinement: ``E_ρ V`` (``1/M Σ_i V(x_i)``).
        interaction: ``½ E_{ρ⊗ρ} W`` (the U-statistic over pairs ``i ≠ j``; 0 without interaction).
        entropy: the estimate of ``H(ρ) = −∫ρ log ρ``.
        entropy_se: its standard error.
        beta: the temperature ``β`` each replica's ``F`` was formed with.
        se: the standard error of ``F``: ``sqrt(SE_energy² + β²·SE_entropy²)``.
        energy_se: the standard error of ``confinement + interaction``.
        method: the entropy estimator used (``"knn"``, ``"weighted"``, ``"gaussian"``).
        M: particles per replica; ``d``: their dimension.
        times: the times of the saved states (along a trajectory), else ``None``.
    """

    value: torch.Tensor
    confinement: torch.Tensor
    interaction: torch.Tensor
    entropy: torch.Tensor
    entropy_se: torch.Tensor
    beta: torch.Tensor
    se: torch.Tensor
    energy_se: torch.Tensor
    method: str
    M: int
    d: int
    times: torch.Tensor | None = None

    @property
    def energy(self) -> torch.Tensor:
        """``E_ρ V + ½ E_{ρ⊗ρ} W``: the confinement and interaction parts together."""
        return self.confinement + self.interaction

    def _fields(self) -> list[tuple[str, str]]:
        def cells(v: torch.Tensor, digits: int = 4) -> str:
            v = v[:, -1] if v.dim() == 2 else v  # along a trajectory: the last saved state
            return shortlist(v.reshape(-1).tolist(), digits=digits)

        when = (
            ""
            if self.times is None
            else f" at t = {float(self.times[-1]):g} (last of {self.times.numel()} times)"
        )
        return [
            ("F", f"{cells(self.value)} ± {cells(self.se, 2)}{when}"),
            ("energy", f"{cells(self.energy)} (confinement {cells(self.confinement)}, interaction {cells(self.interaction)})"),
            ("entropy", f"{cells(self.entropy)} ± {cells(self.entropy_se, 2)} ({self.method}, M = {self.M}, d = {self.d})"),
            ("beta", cells(self.beta)),
        ]  # fmt: skip

    def __repr__(self) -> str:
        fields = dict(self._fields())
        return f"FreeEnergy ({self.value.shape[0]} replicas): F = {fields['F']}; entropy {fields['entropy']}"

    def _repr_html_(self) -> str:
        return html_block("FreeEnergy", fields_html(self._fields()))


def self_pair_energy(interaction: Interaction, x: torch.Tensor) -> torch.Tensor:
    """The ``j = i`` term ``W(x_i, x_i)`` that ``interaction.energy(x)`` includes in its ``1/M Σ_j``, per
    particle: ``(B, M, d) -> (B, M)`` (0 where the sum leaves the self-pair out, as a singular kernel's does).

    Exact for the package's interactions; for any other [`Interaction`][meanfield.drift.potentials.Interaction] it is
    ``interaction.energy`` of each particle alone (a one-particle cloud's ``1/1 Σ_j`` is its self-pair),
    one call per particle.
    """
    B, M, _ = x.shape
    if isinstance(interaction, QuadraticInteraction):  # k/2·|x_i − x_i|² = 0
        return x.new_zeros(B, M)
    if isinstance(interaction, Alignment):  # −κ·x_i·x_i
        return -at(interaction.kappa, x, "kappa", 2) * x.square().sum(-1)  # (B, M)
    if isinstance(interaction, RadialInteraction):
        if not interaction.self_pair:
            return x.new_zeros(B, M)
        phi, _, scale, c, _ = interaction._kernels()  # ψ(r²) = c·φ(s·r²): ψ(0) = c·φ(0)
        zero = x.new_zeros(B, 1, 1)  # (B, 1, 1): per-replica constants inside φ broadcast over it
        psi0 = torch.as_tensor(phi(zero * at(scale, x, "length")), dtype=x.dtype, device=x.device)
        psi0 = psi0.expand(B, 1, 1).reshape(B, 1) * at(c, x, "c", 2)  # (B, 1)
        return psi0.expand(B, M)
    return torch.cat([interaction.energy(x[:, i : i + 1]) for i in range(M)], 1)  # (B, M)


def energy_parts(system, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""``(confinement, interaction, influence)`` of a state ``x (B, M, d)``: ``1/M Σ_i V(x_i)`` ``(B,)``, the
    U-statistic ``1/(2M(M−1)) Σ_{i≠j} W(x_i − x_j)`` ``(B,)``, and each particle's
    ``V(x_i) + 1/(M−1) Σ_{j≠i} W(x_i − x_j)`` ``(B, M)``, whose spread gives the energy's standard error."""
    v = system.confinement.energy(x)  # (B, M)
    if system.interaction is None:
        return v.mean(1), v.new_zeros(v.shape[0]), v
    M = x.shape[1]
    pair = (M * system.interaction.energy(x) - self_pair_energy(system.interaction, x)) / (M - 1)  # (B, M)
    return v.mean(1), 0.5 * pair.mean(1), v + pair


def _beta(system, t: float | None, B: int) -> torch.Tensor:
    """``β`` (or ``β_t``) as a float64 ``(B,)`` tensor."""
    if t is None:
        if not isinstance(system.beta, Constant):
            raise ValueError(
                f"the system's temperature is a schedule ({system.beta!r}): give the time t at which to take "
                "β_t (mf.free_energy(system, x, t=...)), or pass a Trajectory (its saved times are used)"
            )
        beta = system.beta.value
    else:
        beta = system.temperature(float(t))
    check_replicas("beta", beta, B)
    return torch.as_tensor(beta, dtype=torch.float64).expand(B).clone()  # (B,)


def _state_free_energy(system, x: torch.Tensor, beta: torch.Tensor, entropy: str, k: int | None) -> dict:
    B, M, d = x.shape
    system.check_state(x)
    conf, inter, influence = energy_parts(system, x)  # (B,), (B,), (B, M)
    energy_se = influence.to(torch.float64).std(1) / math.sqrt(M)  # (B,)
    kwargs = {} if k is None else {"k": k}
    h = estimate_entropy(x, method=entropy, **kwargs)
    H = torch.as_tensor(h.value, dtype=torch.float64).reshape(B).cpu()  # (B,)
    H_se = torch.as_tensor(h.se, dtype=torch.float64).reshape(B).cpu()  # (B,)
    conf, inter, energy_se = (v.detach().to("cpu", torch.float64) for v in (conf, inter, energy_se))
    return dict(
        value=conf + inter - beta * H,
        confinement=conf,
        interaction=inter,
        entropy=H,
        entropy_se=H_se,
        beta=beta,
        se=(energy_se.square() + (beta * H_se).square()).sqrt(),
        energy_se=energy_se,
        method=h.method,
    )


def free_energy(
    system: MeanFieldLangevin,
    x: torch.Tensor | Trajectory,
    *,
    t: float | None = None,
    entropy: str = "auto",
    k: int | None = None,
) -> FreeEnergy:
    r"""``F(ρ) = E_ρ V + ½ E_{ρ⊗ρ} W − β H(ρ)`` of each replica of ``x``, from its particles (module docstring).

    Args:
        system: a [`MeanFieldLangevin`][meanfield.drift.systems.MeanFieldLangevin].
        x: a state ``(B, M, d)`` (``M ≥ 2``, finite), or a [`Trajectory`][meanfield.stepping.simulate.Trajectory] (``F`` at
            every saved state, with ``β_t`` at its time).
        t: the time at which to take ``β_t`` for a scheduled temperature (required then, for a state); a
            constant ``β`` (a number or one per replica) needs none.
        entropy: the method of ``meanfield.metrics.entropy``: ``"auto"``, ``"knn"``, ``"weighted"`` or
            ``"gaussian"`` (exact in mean up to its known finite-M bias when ``ρ`` is Gaussian).
        k: the neighbour order of the k-NN estimators (``None``: the estimator's default).

    Returns:
        [`FreeEnergy`][meanfield.metrics.free_energy.FreeEnergy], tensors ``(B,)`` (``(B, S)`` along a trajectory), float64 on the CPU.

    Raises:
        TypeError, ValueError: a system other than ``MeanFieldLangevin``, a state that is not ``(B, M, d)``
            with ``M ≥ 2`` and finite, particles on a sphere (their entropy against Lebesgue measure is −∞),
            a scheduled β without ``t``, per-replica values for another ``B``.
    """
    from ..drift.systems import MeanFieldLangevin
    from ..stepping.simulate import Trajectory

    if not isinstance(system, MeanFieldLangevin):
        raise TypeError(
            f"free_energy needs a MeanFieldLangevin system (V, W, β), got {type(system).__name__}"
        )
    if isinstance(system.projection, Sphere):
        raise ValueError(
            "the particles live on a sphere (projection=Sphere()): their entropy against Lebesgue measure on "
            "R^d is −∞, so F is not defined there; the free energy here is for laws with a density on R^d"
        )
    times = None
    if isinstance(x, Trajectory):
        times, states = x.times.to(torch.float64), x.states  # (S,), (S, B, M, d)
    elif torch.is_tensor(x):
        states = x[None]  # (1, B, M, d)
    else:
        raise TypeError(f"x must be a state tensor (B, M, d) or a Trajectory, got {type(x).__name__}")
    if states.dim() != 4:
        raise ValueError(
            f"x must have shape (B, M, d): replicas, particles, dimensions (x[None] for one replica), got shape "
            f"{tuple(states.shape[1:])}"
        )
    if states.shape[2] < 2:
        raise ValueError(
            f"the free energy needs M ≥ 2 particles per replica (pairs and neighbours), got M = {states.shape[2]}"
        )
    check_finite_tensor("x", states)
    B = states.shape[1]
    if times is not None and t is not None:
        raise ValueError("give t only with a state: a Trajectory's β_t is taken at its saved times")
    parts = []
    with torch.no_grad():
        for s, state in enumerate(states):
            when = t if times is None else float(times[s])
            beta = _beta(system, None if times is None and t is None else when, B)
            parts.append(_state_free_energy(system, state, beta, entropy, k))
    stacked = {
        name: torch.stack([p[name] for p in parts], 1) if times is not None else parts[0][name]
        for name in parts[0]
        if name != "method"
    }
    _, _, M, d = states.shape
    return FreeEnergy(**stacked, method=parts[0]["method"], M=M, d=d, times=times)
