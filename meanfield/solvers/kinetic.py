r"""Splitting schemes for kinetic Langevin dynamics: BAOAB, OBABO, ABOBA, with the exact Ornstein–Uhlenbeck O.

The generator of [`KineticMeanFieldLangevin`][meanfield.kinetic.KineticMeanFieldLangevin] splits into three exactly solvable pieces, each
a map on the paired state ``z = (x, v)`` over a time $\tau$:

    A(τ):  x ← x + τ·v                                     (free flight)
    B(τ):  v ← v + τ·f(x),  f = −∇V − 1/M Σ_j ∇W(· − x_j)    (kick)
    O(τ):  v ← e^{−γτ}·v + sqrt(β(1 − e^{−2γτ}))·ξ          (exact OU step, ξ ~ N(0, I))

A scheme is a symmetric word; a letter that appears k times takes $\tau = h/k$ (BAOAB = B(h/2) A(h/2) O(h)
A(h/2) B(h/2)). Each scheme is weak order 2 (stationary averages biased by O(h²)) and strong order 1 under
the additive noise of the kinetic system; it costs one force evaluation per step (the last kick's force is
the next step's first: kept between steps), and on the CPU the next step's noise is drawn in the background
while this step is updated (as the native Euler–Maruyama does: the same numbers either way). On the harmonic confinement $V = a/2\cdot x^2$ the stationary laws of
the three chains are Gaussian, independent of γ, with zero x–v covariance (exact, solve the discrete Lyapunov
equation; ``theory/kinetic_harmonic.py``):

$$
\begin{aligned}
\mathrm{BAOAB}: \operatorname{Var} x = \beta/a, \qquad \operatorname{Var} v = \beta\cdot(1 - h^2a/4) \\
\mathrm{ABOBA}: \operatorname{Var} x = \beta/a, \qquad \operatorname{Var} v = \beta/(1 - h^2a/4) \\
\mathrm{OBABO}: \operatorname{Var} x = \beta/(a\cdot(1 - h^2a/4)), \qquad \operatorname{Var} v = \beta
\end{aligned}
$$

all stable for $h^2a < 4$. A scheduled temperature is read once per step, at its start ($\beta_{t_n}$ for both
halves of an OBABO step).

**Noise.** A step reads one normalised increment $\xi = (\xi_x, \xi_v)$ of shape ``(B, M, 2d)`` from the noise
source (a generator, or [`BrownianIncrements`][meanfield.brownian.BrownianIncrements] of the kinetic system's noise shape): $\xi_v$
is the step's increment of the Brownian motion $W_v$ that drives the velocities (the one the first-order
form's $\Sigma$ reads, so torchsde's methods and the native Euler–Maruyama driven by the same increments follow
the same path), and $\xi_x$ the Brownian-bridge midpoint of $W_v$ over the step: the half-step increments
are $\sqrt{h/2}\cdot \xi_\pm$ with $\xi_\pm = (\xi_v \pm \xi_x)/\sqrt{2}$ (independent ``N(0, I)``, summing to $\sqrt{h}\cdot \xi_v$). An
O over half a step uses $\xi_+$ then $\xi_-$; an O over a whole step is the two halves composed,
$v \leftarrow c\cdot v + s_{1/2}\cdot(c_{1/2}\cdot \xi_+ + \xi_-)$, which is the exact OU step in law. ``BrownianIncrements.coarsen``
sums the $\xi_x$ slot too, so a coarsened path's midpoint is a fresh independent draw (the law of each run
is exact either way; the strong order is measured in ``tests/test_kinetic.py``).
"""

from __future__ import annotations

import math
from collections import Counter

import torch

from ..brownian import NoiseSource
from ..kinetic import KineticMeanFieldLangevin
from ..systems import ParticleSystem
from .base import Solver, Stepper

__all__ = ["Splitting", "SPLITTINGS", "BAOAB", "OBABO", "ABOBA"]

SPLITTINGS: dict[str, str] = {"baoab": "BAOAB", "obabo": "OBABO", "aboba": "ABOBA"}
"""Solver name → the word of the scheme (applied left to right)."""


class Splitting(Solver):
    """A symmetric A/B/O splitting of kinetic Langevin dynamics (see the module docstring).

    Args:
        name: ``"baoab"``, ``"obabo"`` or ``"aboba"`` (a key of [`SPLITTINGS`][meanfield.solvers.kinetic.SPLITTINGS]).

    Raises:
        ValueError: an unknown scheme; at simulation time, a system that is not a
            [`KineticMeanFieldLangevin`][meanfield.kinetic.KineticMeanFieldLangevin], or non-Gaussian noise.
    """

    strong_orders = {"additive": 1.0, "diagonal": None, "general": None}
    weak_orders = {"additive": 2.0, "diagonal": None, "general": None}
    needs_gaussian = True

    def __init__(self, name: str = "baoab") -> None:
        if not isinstance(name, str) or name.lower() not in SPLITTINGS:
            raise ValueError(f"unknown splitting scheme {name!r}; allowed: {sorted(SPLITTINGS)}")
        self.name = name.lower()
        self.word = SPLITTINGS[self.name]
        counts = Counter(self.word)
        self.plan: tuple[tuple[str, float], ...] = tuple((c, 1.0 / counts[c]) for c in self.word)

    def check(self, system: ParticleSystem, source: NoiseSource) -> None:
        if not isinstance(system, KineticMeanFieldLangevin):
            raise ValueError(
                f"solver {self.name!r} is a splitting of kinetic Langevin dynamics: it needs a "
                f"meanfield.kinetic.KineticMeanFieldLangevin system, got {type(system).__name__}"
            )
        super().check(system, source)

    def stepper(self, system: ParticleSystem, source: NoiseSource, t0: float, dt: float) -> Stepper:
        return _SplittingStepper(self.plan, system, source, t0, dt)

    def __repr__(self) -> str:
        return f"Splitting({self.name!r})"


def BAOAB() -> Splitting:
    """BAOAB (Leimkuhler & Matthews 2013): exact position law on harmonic potentials, Var v biased by −h²a/4."""
    return Splitting("baoab")


def OBABO() -> Splitting:
    """OBABO (velocity Verlet between two half OU steps; Bussi & Parrinello 2007): exact velocity law."""
    return Splitting("obabo")


def ABOBA() -> Splitting:
    """ABOBA: exact position law on harmonic potentials, Var v biased by +h²a/4 (to first order)."""
    return Splitting("aboba")


class _SplittingStepper(Stepper):
    def __init__(
        self,
        plan: tuple[tuple[str, float], ...],
        system: KineticMeanFieldLangevin,
        source: NoiseSource,
        t0: float,
        dt: float,
    ) -> None:
        self.plan, self.system, self.source, self.t0, self.dt = plan, system, source, t0, dt
        self._force: torch.Tensor | None = None  # (B, M, d) f(x) at the current positions
        self._force_key: tuple | None = None  # (data_ptr, version) of the state the force belongs to
        gamma = system.friction
        self._c = {frac: math.exp(-gamma * frac * dt) for _, frac in plan}  # e^{−γτ} per fraction

    def _ou(self, v: torch.Tensor, xi: torch.Tensor, d: int, frac: float, beta: float, half: int) -> None:
        r"""O over $\tau = \mathrm{frac}\cdot h$: whole step from both bridge halves, or half step $\text{ half } \in \{0, 1\}$."""
        c = self._c[frac]
        xi_x, xi_v = xi[..., :d], xi[..., d:]  # (B, M, d) each
        if frac == 1.0:  # O(h) = O(h/2)∘O(h/2): v ← c v + s½ (c½ ξ+ + ξ−), ξ± = (ξv ± ξx)/√2
            c_half = math.sqrt(c)
            s_half = math.sqrt(max(beta * (1.0 - c), 0.0)) / math.sqrt(2.0)
            v.mul_(c).add_(xi_v, alpha=s_half * (c_half + 1.0)).add_(xi_x, alpha=s_half * (c_half - 1.0))
        else:  # a half step: ξ+ first, then ξ−
            s = math.sqrt(max(beta * (1.0 - c * c), 0.0)) / math.sqrt(2.0)
            v.mul_(c).add_(xi_v, alpha=s).add_(xi_x, alpha=s if half == 0 else -s)

    def run(self, z: torch.Tensor, n: int, k: int) -> torch.Tensor:
        system, source, t0, dt = self.system, self.source, self.t0, self.dt
        d = z.shape[-1] // 2
        x, v = z[..., :d], z[..., d:]  # (B, M, d) views: the updates write into z
        force = self._force if self._force_key == (z.data_ptr(), z._version) else None
        last = n + k - 1 if source.prefetches else -1  # prefetch only within this segment
        for step in range(n, n + k):
            t = t0 + step * dt
            beta = system.temperature(t)
            xi = source.increment(step, 1.0)  # (B, M, 2d): ξ = (ξ_x, ξ_v), see the module docstring
            if step < last and source.will_prefetch(step + 1):  # drawn in the background during this step
                source.prefetch(step + 1, 1.0)
            halves = 0
            for letter, frac in self.plan:
                if letter == "A":
                    x.add_(v, alpha=frac * dt)
                    force = None
                elif letter == "B":
                    if force is None:
                        force = system.force(t, x)  # (B, M, d)
                    v.add_(force, alpha=frac * dt)
                else:
                    self._ou(v, xi, d, frac, beta, halves)
                    halves += 1
        self._force, self._force_key = force, (z.data_ptr(), z._version)
        return z
