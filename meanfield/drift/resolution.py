r"""What an explicit step can resolve: the linear stability bound, and the collapse of attractive singular kernels.

Two things [`meanfield.simulate`][meanfield.stepping.simulate.simulate] says about a run that its NaN/Inf check would only see late or never:

* **An unstable step, before the run.** A drift with a known linear part ``b(x) = −λx + …`` is integrated by
  Euler–Maruyama as ``x ← (1 − λ·dt)x + …``: the factor ``|1 − λ·dt|`` exceeds 1 once ``λ·dt > 2`` and the
  state grows geometrically (``Quadratic(1)`` at ``dt = 3`` doubles every step and overflowed float64 after
  about 1,000 steps). The two-stage Runge–Kutta drifts (torchsde's ``heun``, ``midpoint``) have the factor
  ``1 − λdt + (λdt)²/2``, which leaves ``[−1, 1]`` at the same ``λ·dt = 2``. [`unstable_step`][meanfield.drift.resolution.unstable_step] reads
  ``λ`` off the potentials whose drift is linear (``Quadratic(a)``, ``QuadraticInteraction(k)``,
  ``Alignment(κ)``) or whose growth on the initial state is (``DoubleWell``) and returns the warning.
* **A collapse, while it runs.** An attractive singular pair potential (``LogInteraction(c)`` or
  ``RieszInteraction(s, c)`` with ``c < 0``) pulls a pair at distance ``r`` together at the relative speed
  ``2|c|·r^{−s−1}/M`` (``s = 0`` for the logarithm). One Euler step carries the pair through each other — it
  cannot resolve the force — once that displacement exceeds the distance, ``dt·2|c|r^{−s−1}/M ≥ r``:

  $$ r \le r_\star = \left(\frac{2|c|\,dt}{M}\right)^{1/(s+2)}. $$

  A single pair below ``r⋆`` is no collapse: the noise brings pairs that close by chance and moves them apart
  again within one step (it moves a pair by ``≈ sqrt(4βd·dt) ≫ r⋆``). Measured on 2-D Keller–Segel
  (``LogInteraction(−χ)``, ``β = 1``, ``dt = 1e-3``, 8 replicas, a look every 16 steps;
  ``experiments/keller_segel/collapse_census.py``): the closest pair fell below ``r⋆`` in every *subcritical*
  replica (χ = 2, 3.5; M = 100 and 400) by t = 0.58, and the expected number of such chance pairs grows like
  ``M·|c|·dt·∫ρ²``, so the closest pair alone would cry wolf; the number of pairs below ``r⋆`` never exceeded 3
  there, while in every *supercritical* replica (χ = 6) it climbed to 0.6–0.75·M as the cluster formed. A
  collapse is therefore declared when at least [`COLLAPSE_PAIRS`][meanfield.drift.resolution.COLLAPSE_PAIRS] ``· M`` pairs are closer than ``r⋆`` — a
  finite fraction of the particles sits in a cluster the step cannot
  resolve — and it is reported with the closest pair's distance.
"""

from __future__ import annotations

import math

import torch

from .._replicas import Param
from .pairwise import _rows, _squared_distances
from .potentials import (
    Alignment,
    DoubleWell,
    LogInteraction,
    Quadratic,
    QuadraticInteraction,
    RieszInteraction,
)
from .systems import MeanFieldLangevin, ParticleSystem

__all__ = [
    "COLLAPSE_PAIRS",
    "STABILITY_LIMITS",
    "CollapseWarning",
    "CollapseError",
    "UnstableStepWarning",
    "unstable_step",
    "resolution_radius",
    "close_pairs",
]

COLLAPSE_PAIRS = 0.25
"""A collapse is declared when at least ``COLLAPSE_PAIRS · M`` pairs of a replica are closer than ``r⋆``."""

STABILITY_LIMITS = {"euler": 2.0, "torchsde_euler": 2.0, "milstein": 2.0, "heun": 2.0, "midpoint": 2.0}
"""Solver name → the ``λ·dt`` at which its drift step stops contracting ``ẋ = −λx`` (the real stability
interval ``[−2, 0]`` of Euler and of the two-stage Runge–Kutta drifts; Milstein is Euler for additive noise).
Other solvers (kinetic splittings, SRK, reversible Heun) have other regions and are not checked."""


class UnstableStepWarning(RuntimeWarning):
    """The explicit step is unstable for a known linear part of the drift (issued before the run)."""


class CollapseWarning(RuntimeWarning):
    """Particles of an attractive singular interaction collapsed below what the step resolves.

    Attributes:
        step, time: the check at which it was seen.
        replicas: the replicas that had collapsed then (``replica`` the first of them).
        distance: the closest pair's distance in ``replica``; ``radius`` the resolution ``r⋆``; ``pairs`` the
            number of pairs closer than ``r⋆`` in ``replica``.
    """

    def __init__(self, message: str, step: int, time: float, replicas: list[int], distance: float,
                 radius: float, pairs: int) -> None:  # fmt: skip
        super().__init__(message)
        self.step, self.time, self.replicas = step, time, replicas
        self.replica = replicas[0]
        self.distance, self.radius, self.pairs = distance, radius, pairs

    def __reduce__(self):  # picklable (a sweep's worker process sends it back)
        args = (str(self), self.step, self.time, self.replicas, self.distance, self.radius, self.pairs)
        return type(self), args


class CollapseError(FloatingPointError):
    """``simulate(..., collapse="raise")``: as [`CollapseWarning`][meanfield.drift.resolution.CollapseWarning], raised, with ``trajectory`` the
    states saved before the collapse was seen."""

    def __init__(self, warning: CollapseWarning, trajectory) -> None:
        super().__init__(str(warning))
        self.warning = warning
        self.step, self.time, self.replicas, self.replica = (
            warning.step,
            warning.time,
            warning.replicas,
            warning.replica,
        )
        self.distance, self.radius, self.pairs = warning.distance, warning.radius, warning.pairs
        self.trajectory = trajectory

    def __reduce__(self):  # picklable (a sweep's worker process sends it back)
        return type(self), (self.warning, self.trajectory)


def _values(value: Param) -> torch.Tensor:
    """A number or per-replica ``(B,)`` values as a float64 ``(B,)`` or ``(1,)`` tensor."""
    return torch.as_tensor(value, dtype=torch.float64, device="cpu").reshape(-1)  # not the default device


def unstable_step(system: ParticleSystem, x0: torch.Tensor, dt: float, solver: str) -> str | None:
    """The warning for a step ``dt`` that a known linear part of the drift makes unstable, or ``None``.

    For [`MeanFieldLangevin`][meanfield.drift.systems.MeanFieldLangevin] without a projection, integrated by a solver of
    [`STABILITY_LIMITS`][meanfield.drift.resolution.STABILITY_LIMITS]. The drift's rates: ``a`` (``Quadratic(a)``) on the mean, ``a + k`` with
    ``QuadraticInteraction(k)`` on the modes about the mean, ``a − κ`` with ``Alignment(κ)`` on the mean; for
    ``DoubleWell`` alone the growth rate ``c₄x² − c₂`` of the per-coordinate map ``x ← x − dt·(c₄x² − c₂)x``
    at the initial state's largest ``|x|`` (beyond ``λ·dt = 2`` the first steps move ``|x|`` outwards, where
    the rate is larger still). The step is unstable when a rate times ``dt`` reaches the solver's limit (2):
    ``|1 − λ·dt| ≥ 1``. Per-replica parameters: the largest rate, and its replica.
    """
    limit = STABILITY_LIMITS.get(solver)
    if limit is None or not isinstance(system, MeanFieldLangevin) or system.projection is not None:
        return None
    V, W = system.confinement, system.interaction
    # `what` gives the warning's words, written only when it warns (the reprs cost more than the test below, in
    # every call of a small simulate)
    if isinstance(V, Quadratic) and (W is None or isinstance(W, (QuadraticInteraction, Alignment))):
        a = _values(V.a)  # (B,) or (1,)
        if isinstance(W, QuadraticInteraction):
            rates = torch.maximum(a, a + _values(W.k))
            what = lambda: f"Quadratic(a) with {W!r}: rates a and a + k"  # noqa: E731
        elif isinstance(W, Alignment):
            rates = torch.maximum(a, a - _values(W.kappa))
            what = lambda: f"Quadratic(a) with {W!r}: rates a and a − κ"  # noqa: E731
        else:
            rates, what = a, lambda: f"{V!r}: rate a"
    elif isinstance(V, DoubleWell) and W is None:
        top = float(x0.detach().abs().max())
        rates = _values(V.quartic) * top**2 - _values(V.quadratic)  # (B,) or (1,)
        what = lambda: f"{V!r} at the initial state's largest |x| = {top:.3g}: growth rate c₄x² − c₂"  # noqa: E731
    else:
        return None
    where = int(rates.argmax())
    rate = float(rates[where])
    if not rate * dt >= limit:
        return None
    replica = f" (replica {where})" if rates.numel() > 1 else ""
    factor = abs(1.0 - rate * dt)
    steps = math.log(1e300) / math.log(factor) if factor > 1 else math.inf
    when = f"overflow after about {steps:.0f} steps" if math.isfinite(steps) else "never contract"
    return (
        f"dt = {dt:g} is beyond the stability limit of the explicit step{replica}: {what()}, λ = {rate:.4g}, so "
        f"λ·dt = {rate * dt:.3g} ≥ {limit:g} and each step multiplies that part of the state by |1 − λ·dt| = "
        f"{factor:.3g}: it will {when}. Take dt < {limit / rate:.3g} (dt ≤ {1 / rate:.3g} for a contraction "
        "without oscillation)."
    )


def resolution_radius(system: ParticleSystem, M: int, dt: float) -> torch.Tensor | None:
    r"""``r⋆ = (2|c|·dt/M)^{1/(s+2)}`` per replica for an attractive singular interaction (``c < 0``), 0 where
    ``c ≥ 0``: a ``(B,)`` tensor (or one value ``(1,)``), or ``None`` when the system has no such kernel."""
    W = getattr(system, "interaction", None)
    if isinstance(W, LogInteraction):
        s = 0.0
    elif isinstance(W, RieszInteraction):
        s = float(W.s)
    else:
        return None
    c = torch.as_tensor(W.c, dtype=torch.float64).reshape(-1)  # (B,) or (1,)
    if not bool((c < 0).any()):
        return None
    return torch.where(c < 0, (2.0 * c.abs() * dt / M) ** (1.0 / (s + 2.0)), 0.0)  # (B,) or (1,)


def close_pairs(
    x: torch.Tensor, radius: torch.Tensor, max_elements: int = 1 << 22
) -> tuple[torch.Tensor, torch.Tensor]:
    """The closest pair's distance and the number of pairs closer than ``radius``, per replica.

    One pass over the pairs in blocks of ``B × rows × M ≤ max_elements`` squared distances (the pairwise
    code of the interactions), so its cost is that of one evaluation of the interaction's drift.

    Args:
        x: ``(B, M, d)``.
        radius: ``(B,)`` or ``(1,)`` (float64).

    Returns:
        ``(distance (B,), count (B,))`` on ``x``'s device (no synchronisation).
    """
    B, M, _ = x.shape
    x = x - x.mean(1, keepdim=True)  # (B, M, d) centred: distances lose less to round-off
    x2 = x.square().sum(-1)  # (B, M)
    r2 = radius.to(x.device, x.dtype).square().expand(B)[:, None, None]  # (B, 1, 1)
    rows = min(M, _rows(B, M, max_elements))
    closest = torch.full((B,), math.inf, dtype=x.dtype, device=x.device)  # (B,)
    count = torch.zeros(B, dtype=torch.long, device=x.device)  # (B,)
    for start in range(0, M, rows):
        d2 = _squared_distances(x[:, start : start + rows], x, x2)  # (B, c, M)
        d2.diagonal(offset=start, dim1=1, dim2=2).fill_(math.inf)  # the self-pairs j = i
        closest = torch.minimum(closest, d2.amin((1, 2)))
        count += (d2 < r2).sum((1, 2))
    return closest.sqrt(), count // 2  # each pair was seen from both ends


class CollapseWatch:
    """Watches a run for a collapse every ``every`` steps (see the module docstring); says it once."""

    def __init__(self, system: ParticleSystem, x0: torch.Tensor, dt: float, t0: float, every: int,
                 action: str) -> None:  # fmt: skip
        self.radius = resolution_radius(system, x0.shape[1], dt)  # (B,) or None
        self.every, self.action, self.t0, self.dt = every, action, t0, dt
        self.threshold = max(1, math.ceil(COLLAPSE_PAIRS * x0.shape[1]))
        self.max_elements = (
            getattr(system.interaction, "max_elements", 1 << 22) if self.radius is not None else 0
        )
        self.pending: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        self.done = self.radius is None or action == "ignore"

    def observe(self, step: int, x: torch.Tensor) -> None:
        """Queue the pair census of the state after ``step`` (nothing is read from the device here)."""
        if not self.done:
            self.pending.append((step, *close_pairs(x, self.radius, self.max_elements)))

    def read(self) -> CollapseWarning | None:
        """The first collapse among the queued censuses (then the watch stops), or ``None``."""
        if self.done or not self.pending:
            return None
        counts = torch.stack([c for _, _, c in self.pending])  # (checks, B)
        hit = counts >= self.threshold  # (checks, B)
        pending, self.pending = self.pending, []
        if not bool(hit.any()):
            return None
        self.done = True
        k = int(hit.any(1).nonzero()[0])
        step, closest, count = pending[k]
        replicas = hit[k].nonzero()[:, 0].tolist()
        b = replicas[0]
        r = float(self.radius[b if self.radius.numel() > 1 else 0])
        time = self.t0 + step * self.dt
        others = (
            f" (and {len(replicas) - 1} more replicas: {replicas[1:6]}{'…' if len(replicas) > 6 else ''})"
        )
        message = (
            f"particles collapsed at t = {time:g} (step {step}) in replica {b}"
            f"{others if len(replicas) > 1 else ''}: {int(count[b])} pairs are closer than r⋆ = {r:.3g}, the "
            f"distance below which one step of dt = {self.dt:g} moves a pair by more than its separation "
            f"(closest pair {float(closest[b]):.3g}). The attractive singular interaction has concentrated the "
            "particles (a supercritical Keller–Segel-type collapse): from here on the path depends on dt and "
            "is not the SDE's. Stop before this time, weaken the attraction (|c| below the critical value), "
            "or take simulate(..., collapse='raise') to stop here."
        )
        return CollapseWarning(message, step, time, replicas, float(closest[b]), r, int(count[b]))
