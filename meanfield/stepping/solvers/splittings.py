r"""Splitting schemes for kinetic Langevin dynamics: BAOAB, OBABO, ABOBA, with the exact Ornstein–Uhlenbeck O.

The generator of [`KineticMeanFieldLangevin`][meanfield.drift.phase_space.KineticMeanFieldLangevin] splits into three exactly solvable pieces, each
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

all stable for $h^2a < 4$.

**Time-dependent β and force.** A scheduled temperature is read once per step, at its midpoint: every O of
step $n$ uses $\beta_{t_n + h/2}$ (both halves of an OBABO step). A force that depends on time is read where its
kick sits when time advances with the drifts: $t_n$ plus the A fractions before it, so $t_n$ for a first kick,
$t_{n+1}$ for a last one (which the next step's first kick reuses), $t_n + h/2$ for both of ABOBA's. Both keep every
scheme weak order 2 (each step stays symmetric: run backward in time it reads the same β and forces); reading them at $t_n$ made it
order 1 (measured on $V = a/2\cdot x^2$, $\beta_t = 0.1 + t$: the exact covariance recursion's error in
$\operatorname{Var} x(2)$ falls by 4.0 per halving of $h$ instead of 2.0; ``tests/stepping/solvers/test_splittings.py``).

**Noise.** With noise drawn from a generator (``simulate(..., generator=...)``: no path to couple to) each O
draws what it needs and no more: ``B·M·d`` numbers ``s·ξ ~ N(0, s²)``, ``s = sqrt(β(1 − c²))``, scaled as they
are drawn, and ``v ← c·v + s·ξ`` is one pass (the exact OU step); the positions and velocities are kept in
one contiguous ``(2, B, M, d)`` buffer during a segment of steps (copied from and back to the paired state
once a segment), and for ``V = a/2·|x|²``, ``W = k/2·|z|²`` the force is one pass after the mean
([`force_into`][meanfield.drift.phase_space.KineticMeanFieldLangevin.force_into]).

**Coupled noise.** With a noise source (``brownian=``, e.g. pre-drawn increments shared with another solver or
step size) a step reads one normalised increment ``ξ = (ξ_x, ξ_v)`` of shape ``(B, M, 2d)`` from the noise
source (a generator, or ``BrownianIncrements`` of the kinetic system's noise shape): ``ξ_v``
is the step's increment of the Brownian motion ``W_v`` that drives the velocities (the one the first-order
form's ``Σ`` reads, so torchsde's methods and the native Euler–Maruyama driven by the same increments follow
the same path), and ``ξ_x`` the Brownian-bridge midpoint of ``W_v`` over the step: the half-step increments
are ``sqrt(h/2)·ξ_±`` with ``ξ_± = (ξ_v ± ξ_x)/√2`` (independent ``N(0, I)``, summing to ``sqrt(h)·ξ_v``). An
O over half a step uses ``ξ_+`` then ``ξ_−``; an O over a whole step is the two halves composed,
``v ← c·v + s_{1/2}·(c_{1/2}·ξ_+ + ξ_−)``, which is the exact OU step in law. ``BrownianIncrements.coarsen``
sums the ``ξ_x`` slot too, so a coarsened path's midpoint is a fresh independent draw (the law of each run
is exact either way; the strong order is measured in ``tests/stepping/solvers/test_splittings.py``).
"""

from __future__ import annotations

import math
from collections import Counter

import torch

from ...drift.phase_space import KineticMeanFieldLangevin
from ...drift.systems import ParticleSystem
from ..brownian import GaussianNoise, NoiseSource
from .base import Solver, Stepper

__all__ = ["Splitting", "SPLITTINGS", "BAOAB", "OBABO", "ABOBA"]

SPLITTINGS: dict[str, str] = {"baoab": "BAOAB", "obabo": "OBABO", "aboba": "ABOBA"}
"""Solver name → the word of the scheme (applied left to right)."""


class Splitting(Solver):
    """A symmetric A/B/O splitting of kinetic Langevin dynamics (see the module docstring).

    Args:
        name: ``"baoab"``, ``"obabo"`` or ``"aboba"`` (a key of [`SPLITTINGS`][meanfield.stepping.solvers.splittings.SPLITTINGS]).

    Raises:
        ValueError: an unknown scheme; at simulation time, a system that is not a
            [`KineticMeanFieldLangevin`][meanfield.drift.phase_space.KineticMeanFieldLangevin], or non-Gaussian noise.
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
        drifted = [sum(f for c, f in self.plan[:i] if c == "A") for i in range(len(self.plan))]
        self.kick_times: tuple[float, ...] = tuple(drifted[i] for i, (c, _) in enumerate(self.plan) if c == "B")
        """Each kick's time in the step, in units of ``h`` from its start (the A fractions before it)."""

    def check(self, system: ParticleSystem, source: NoiseSource) -> None:
        if not isinstance(system, KineticMeanFieldLangevin):
            raise ValueError(
                f"solver {self.name!r} is a splitting of kinetic Langevin dynamics: it needs a "
                f"meanfield.drift.phase_space.KineticMeanFieldLangevin system, got {type(system).__name__}"
            )
        super().check(system, source)

    def stepper(self, system: ParticleSystem, source: NoiseSource, t0: float, dt: float) -> Stepper:
        return _SplittingStepper(self.plan, self.kick_times, system, source, t0, dt)

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
        kick_times: tuple[float, ...],
        system: KineticMeanFieldLangevin,
        source: NoiseSource,
        t0: float,
        dt: float,
    ) -> None:
        self.plan, self.system, self.source, self.t0, self.dt = plan, system, source, t0, dt
        self.kick_offsets = tuple(f * dt for f in kick_times)  # each kick's time after the step's start
        self._force: torch.Tensor | None = None  # (B, M, d) f(x) at the current positions
        self._force_key: tuple | None = None  # (data_ptr, version) of the state the force belongs to
        gamma = system.friction
        self._c = {frac: math.exp(-gamma * frac * dt) for _, frac in plan}  # e^{−γτ} per fraction
        # drawn noise (no path to couple to): one N(0, I) number per velocity coordinate and O, drawn into its
        # own (n_O, B, M, d) buffer already scaled, on positions and velocities kept contiguous between steps
        self.lean = type(source) is GaussianNoise
        if self.lean:
            B, M, two_d = source.shape
            buffer = source._buffer  # (B, M, 2d): its dtype and device
            self._o_frac = next(frac for letter, frac in plan if letter == "O")
            n_o = sum(letter == "O" for letter, _ in plan)
            self._noise = GaussianNoise((n_o, B, M, two_d // 2), dt, source.generator, buffer.dtype, buffer.device)
            self._work = torch.empty((2, B, M, two_d // 2), dtype=buffer.dtype, device=buffer.device)  # (x, v)
            self._f = torch.empty_like(self._work[0])  # (B, M, d) the force, where force_into writes it
            self._work_key: tuple | None = None  # (data_ptr, version) of the state _work holds

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

    def _o_scale(self, t: float) -> float:
        """The standard deviation ``sqrt(β_t(1 − c²))`` of an O's noise, ``c = e^{−γτ}``."""
        c = self._c[self._o_frac]
        return math.sqrt(max(self.system.temperature(t) * (1.0 - c * c), 0.0))

    def _run_lean(self, z: torch.Tensor, n: int, k: int) -> torch.Tensor:
        """``run`` with drawn noise: each O is ``v ← c·v + s·ξ``, one draw of ``B·M·d`` numbers scaled as drawn
        (``s = sqrt(β(1 − c²))``, the exact OU step) and one pass; positions and velocities are contiguous
        copies of ``z``'s halves, written back at the end of the segment."""
        system, noise, t0, dt, plan = self.system, self._noise, self.t0, self.dt, self.plan
        B, M, two_d = z.shape
        paired = z.unflatten(-1, (2, two_d // 2))  # (B, M, 2, d) a view
        work = self._work  # (2, B, M, d)
        force = self._force
        if self._work_key != (z.data_ptr(), z._version):  # a state _work does not hold (a first segment)
            work.copy_(paired.permute(2, 0, 1, 3))
            force = None
        x, v = work[0], work[1]  # (B, M, d) each, contiguous
        c = self._c[self._o_frac]
        last = n + k - 1 if noise.prefetches else -1  # prefetch only within this segment
        try:
            for step in range(n, n + k):
                t = t0 + step * dt
                xi = noise.increment(step, self._o_scale(t0 + (step + 0.5) * dt))  # (n_O, B, M, d) s·ξ, β at t_n + h/2
                if step < last and noise.will_prefetch(step + 1):  # drawn in the background during this step
                    noise.prefetch(step + 1, self._o_scale(t0 + (step + 1.5) * dt))
                o = b = 0
                for letter, frac in plan:
                    if letter == "A":
                        x.add_(v, alpha=frac * dt)
                        force = None
                    elif letter == "B":
                        if force is None:
                            force = system.force_into(t + self.kick_offsets[b], x, self._f)  # (B, M, d)
                        v.add_(force, alpha=frac * dt)
                        b += 1
                    else:
                        torch.add(xi[o], v, alpha=c, out=v)  # O: v ← c·v + s·ξ
                        o += 1
        finally:
            noise.settle()  # no draw left running on the caller's generator
        paired.copy_(work.permute(1, 2, 0, 3))
        self._force, self._work_key = force, (z.data_ptr(), z._version)
        return z

    def run(self, z: torch.Tensor, n: int, k: int) -> torch.Tensor:
        if self.lean:
            return self._run_lean(z, n, k)
        system, source, t0, dt = self.system, self.source, self.t0, self.dt
        d = z.shape[-1] // 2
        x, v = z[..., :d], z[..., d:]  # (B, M, d) views: the updates write into z
        force = self._force if self._force_key == (z.data_ptr(), z._version) else None
        last = n + k - 1 if source.prefetches else -1  # prefetch only within this segment
        for step in range(n, n + k):
            t = t0 + step * dt
            beta = system.temperature(t0 + (step + 0.5) * dt)  # every O of the step: β at t_n + h/2
            xi = source.increment(step, 1.0)  # (B, M, 2d): ξ = (ξ_x, ξ_v), see the module docstring
            if step < last and source.will_prefetch(step + 1):  # drawn in the background during this step
                source.prefetch(step + 1, 1.0)
            halves = b = 0
            for letter, frac in self.plan:
                if letter == "A":
                    x.add_(v, alpha=frac * dt)
                    force = None
                elif letter == "B":
                    if force is None:
                        force = system.force(t + self.kick_offsets[b], x)  # (B, M, d)
                    v.add_(force, alpha=frac * dt)
                    b += 1
                else:
                    self._ou(v, xi, d, frac, beta, halves)
                    halves += 1
        self._force, self._force_key = force, (z.data_ptr(), z._version)
        return z
