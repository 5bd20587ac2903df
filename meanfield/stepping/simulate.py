"""``simulate``: integrate a particle system on a fixed grid and keep a [`Trajectory`][meanfield.stepping.simulate.Trajectory]."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from .. import _checks
from .._checks import check_finite, check_finite_tensor, check_int, check_positive, check_rank
from .._display import fields_html, html_block, shortlist
from ..drift.resolution import (
    CollapseError,
    CollapseWarning,
    CollapseWatch,
    UnstableStepWarning,
    unstable_step,
)
from ..drift.systems import ParticleSystem
from ..progress import progress_bar
from ..seeds import resolve_generator, warn_if_global_seed
from .brownian import BrownianIncrements, GaussianNoise, NoiseSource, RademacherNoise
from .solvers import Solver, get_solver

__all__ = [
    "simulate",
    "Trajectory",
    "NonFiniteStateError",
    "CollapseError",
    "CollapseWarning",
    "UnstableStepWarning",
    "NOISES",
    "COLLAPSE_ACTIONS",
]

NOISES = {"gaussian": GaussianNoise, "rademacher": RademacherNoise}
COLLAPSE_ACTIONS = ("warn", "raise", "ignore")
"""What ``simulate`` does when particles of an attractive singular interaction collapse."""


@dataclass(frozen=True)
class Trajectory:
    """The saved states of one simulation.

    Attributes:
        times: ``(S,)`` the saved times, ``t0`` (or ``save_from``) first and ``t1`` last.
        states: ``(S, B, M, d)`` the states at those times.
        steps: ``(S,)`` the step indices of the saved states.
        dt: the step size.
        solver: the solver's name.
        seed: the seed of the generator the noise came from, when ``simulate`` made it (else ``None``).
    """

    times: torch.Tensor
    states: torch.Tensor
    steps: torch.Tensor
    dt: float
    solver: str
    seed: int | None = None

    @property
    def final(self) -> torch.Tensor:
        """The last state, ``(B, M, d)``."""
        return self.states[-1]

    def __len__(self) -> int:
        return self.times.shape[0]

    def _fields(self) -> list[tuple[str, str]]:
        named = ", ".join(f"{n}={k}" for n, k in zip("SBMd", self.states.shape, strict=True))  # (S, B, M, d)
        times, dtype = self.times.tolist(), str(self.states.dtype).removeprefix("torch.")
        return [
            ("states", f"({named}) {dtype} on {self.states.device}"),
            ("t", f"{times[0]:g} … {times[-1]:g}"),
            ("steps", f"{shortlist(self.steps.tolist(), 4)} of dt = {self.dt:g}"),
            ("solver", self.solver),
            ("seed", str(self.seed)),
        ]

    def __repr__(self) -> str:
        f = dict(self._fields())
        return (
            f"Trajectory: states {f['states']}\n  t = {f['t']} (steps {f['steps']}), solver {self.solver!r}, "
            f"seed {self.seed}"
        )

    def _repr_html_(self) -> str:
        return html_block("Trajectory", fields_html(self._fields()))


class NonFiniteStateError(FloatingPointError):
    """The state became NaN or ±Inf during a run.

    Attributes:
        step: the first step whose state is non-finite (when the noise could be replayed from the last check;
            otherwise the stop at which it was found); ``time`` the time of that step.
        last_finite_step: the step before it (or the last stop at which the state was checked and finite).
        trajectory: the states saved before the failure (nothing saved is lost).
    """

    def __init__(self, message: str, step: int, time: float, last_finite_step: int, trajectory: Trajectory):
        super().__init__(message)
        self.step, self.time, self.last_finite_step, self.trajectory = (
            step,
            time,
            last_finite_step,
            trajectory,
        )

    def __reduce__(self):  # the exception crosses processes (a sweep's worker): pickle its fields, not only args
        return type(self), (str(self), self.step, self.time, self.last_finite_step, self.trajectory)


def _noise_source(
    system: ParticleSystem,
    x0: torch.Tensor,
    dt: float,
    n_steps: int,
    noise: str,
    generator: torch.Generator | int | None,
    brownian: NoiseSource | None,
) -> tuple[NoiseSource, int | None]:
    shape = system.noise_shape(x0.shape)
    if brownian is not None:
        if generator is not None:
            raise ValueError("give either brownian (pre-drawn increments) or generator, not both")
        if not isinstance(brownian, NoiseSource):
            raise TypeError(
                "brownian must be a meanfield.stepping.brownian.BrownianIncrements (or another NoiseSource), "
                f"got {type(brownian).__name__}"
            )
        if brownian.shape != shape:
            raise ValueError(
                f"brownian increments have shape {brownian.shape} per step, the system needs {shape}"
            )
        if not math.isclose(brownian.dt, dt, rel_tol=1e-9):
            raise ValueError(
                f"brownian (the noise source) has steps of dt={brownian.dt}; this run needs dt={dt}"
            )
        if not isinstance(brownian, BrownianIncrements):  # a source that draws as it goes (e.g. BlockNoise)
            return brownian, None
        if len(brownian) != n_steps:
            raise ValueError(
                f"brownian holds {len(brownian)} steps of dt={brownian.dt}; this run needs "
                f"{n_steps} steps of dt={dt}"
            )
        if brownian.increments.device != x0.device:
            raise ValueError(
                f"brownian increments are on {brownian.increments.device}, x0 is on {x0.device}: draw them "
                "on x0's device (BrownianIncrements.sample(..., device=x0.device))"
            )
        return brownian, None
    if not isinstance(noise, str) or noise not in NOISES:
        raise ValueError(f"noise must be one of {sorted(NOISES)}, got {noise!r}")
    if isinstance(generator, torch.Generator) and torch.device(generator.device).type != x0.device.type:
        raise ValueError(
            f"generator is on {generator.device}, x0 is on {x0.device}: the noise is drawn on x0's device, "
            f"so pass torch.Generator(device={str(x0.device)!r}) (or an int seed: simulate makes one there)"
        )
    generator, seed = resolve_generator(generator, x0.device)  # an int, a numpy integer, a Generator or None
    warn_if_global_seed(seed, "simulate", "generator", stacklevel=4)  # the user's simulate(...) call: here, _noise_source, simulate
    return NOISES[noise](shape, dt, generator, x0.dtype, x0.device), seed


_EAGER_CHECKS = frozenset({"cpu"})
"""Device types on which ``simulate`` reads the finiteness flag at every stop (there it costs no
synchronisation); elsewhere the flags are read together every ``check_every`` steps."""


def _all_finite(x: torch.Tensor) -> torch.Tensor:
    """Whether every entry of ``x`` is finite, as a 0-dim bool tensor on ``x``'s device (no synchronisation).

    One reduction pass, ``(min, max) = aminmax(x)``: both are finite exactly when every entry is (a NaN
    propagates to both, +Inf is the max, −Inf the min). ``isfinite(x).all()`` writes a bool per entry and
    reads it again (≈ 8× slower on the CPU at 10⁶ numbers).
    """
    if x.numel() < 4096:  # where the two small launches of isfinite().all() cost less than aminmax's
        return torch.isfinite(x).all()
    lo, hi = torch.aminmax(x)
    return lo.isfinite() & hi.isfinite()


@contextlib.contextmanager
def _settled(source: NoiseSource) -> Iterator[None]:
    """On the way out (also on an error), wait for a noise draw still running in the background."""
    try:
        yield
    finally:
        source.settle()


class _Anchor:
    """The last state confirmed finite at a check stop, and the noise from there, to trace a failure.

    Kept every ``check_every`` steps: a copy of the state (one pass over it per ``check_every`` steps) and
    the noise's position — the generator's state for drawn noise (none is in flight at a stop: prefetches
    stay within a segment), nothing for pre-drawn increments (read by index). A source that draws in other
    ways cannot be replayed, and the error then names the stops that bracket the failure. The replay uses a
    fresh stepper: exact for steppers without state across steps (Euler–Maruyama, most torchsde methods); for
    one that carries state (reversible Heun) it is a diagnosis that may name a neighbouring step.
    """

    def __init__(self, source: NoiseSource, x0: torch.Tensor) -> None:
        self.source, self.step = source, 0
        self.replayable = isinstance(source, BrownianIncrements) or (
            type(source) in (GaussianNoise, RademacherNoise)
        )
        self.x0 = self.state = x0  # (B, M, d), the caller's x0 until the first check stop (not modified)
        self.noise = self._noise_state()

    def _noise_state(self) -> torch.Tensor | None:
        if self.replayable and not isinstance(self.source, BrownianIncrements):
            return self.source.generator.get_state()
        return None

    def set(self, step: int, x: torch.Tensor) -> None:
        if not self.replayable:
            return
        if self.state is self.x0:
            self.state = torch.empty_like(x)  # (B, M, d) a buffer of its own, reused at every check
        self.state.copy_(x)
        self.step, self.noise = step, self._noise_state()

    def _replay_source(self) -> NoiseSource:
        source = self.source
        if isinstance(source, BrownianIncrements):
            return source  # read by index
        generator = torch.Generator(device=source.generator.device)
        generator.set_state(self.noise)
        buffer = source._buffer  # (*noise_shape): its dtype and device
        replay = type(source)(source.shape, source.dt, generator, buffer.dtype, buffer.device)
        replay._n = self.step - 1  # the next draw is the anchor's step
        return replay

    def first_bad_step(
        self, solver: Solver, system: ParticleSystem, t0: float, dt: float, until: int
    ) -> tuple[int, torch.Tensor] | None:
        r"""$(k, x_{k-1})$: the first step $k \le \text{ until }$ whose state is non-finite, and the finite state
        before it, by replaying the steps from the anchor one at a time; ``None`` when it cannot."""
        if not self.replayable:
            return None
        try:
            stepper = solver.stepper(system, self._replay_source(), t0, dt)
            x = self.state.clone()  # (B, M, d)
            for step in range(self.step, until):
                before = x.clone()  # (B, M, d)
                x = stepper.run(x, step, 1)
                if not bool(torch.isfinite(x).all()):
                    return step + 1, before
        except Exception:  # noqa: BLE001 — a diagnosis must never hide the error it explains
            return None
        return None


def _burn_in_steps(save_from: object, t0: float, t1: float, dt: float, n_steps: int) -> int:
    """The step index of ``save_from``: a time on the grid ``t0 + n·dt`` between ``t0`` and ``t1``."""
    try:
        start = check_finite("save_from", save_from)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{error} (the time from which states are saved, t0 ≤ save_from ≤ t1)") from None
    n_float = (start - t0) / dt
    n = round(n_float)
    if not t0 <= start <= t1 or abs(n_float - n) > 1e-6 * max(1.0, n_float) or not 0 <= n <= n_steps:
        raise ValueError(
            f"save_from must be a time t0 + n·dt on the step grid with t0 = {t0:g} ≤ save_from ≤ t1 = {t1:g} "
            f"(dt = {dt:g}), got {save_from}"
        )
    return n


GROWTH = 1e8
r"""A state whose largest entry grew above $\text{ GROWTH } \times \max(1, \max|x_0|)$ before a non-finite step is read as a
blow-up (reduce dt, check the drift's sign), a moderate one whose drift is non-finite as a singular drift."""


def _advice(system: ParticleSystem, t: float, x: torch.Tensor, step: int, start_size: float) -> str:
    """What the cause of the non-finite step ``step`` looks like from the finite state ``x`` before it.

    Three causes: the state grew without bound (the step overflowed, or the drift did at a huge state); the
    drift is non-finite at a moderate state (a singular potential); the diffusion is non-finite.
    """
    size = float(x.abs().max()) if x.numel() else 0.0
    if size > GROWTH * max(1.0, start_size):
        return (
            f"The state grew to |x| = {size:.3g} by step {step - 1} (it started at {start_size:.3g}): the explicit "
            "scheme is unstable at this dt for a stiff or superlinear drift (reduce dt, e.g. below 1/L for a "
            "drift of Lipschitz constant L near the state), or the dynamics blow up (check the sign of the "
            "drift: a confinement must pull inwards)."
        )
    try:
        b = system.drift(t, x)  # (B, M, d)
        drift_ok = bool(torch.isfinite(b).all())
    except Exception:  # noqa: BLE001 — a diagnosis must never hide the error it explains
        drift_ok = True
    if not drift_ok:
        return (
            f"The drift b(t, x) is already non-finite at the finite, moderate state of step {step - 1} (largest "
            f"|x| = {size:.3g}): a potential singular where the state is — a pair potential at z = 0 "
            "(RadialInteraction leaves out the self-pair i = j when ψ(0) or ψ'(0) is infinite; pass "
            "self_pair=False for a kernel it cannot probe), two particles at one point of a singular kernel, a "
            "log or division at 0 in a custom drift. A smaller dt will not help: fix the drift or the state."
        )
    try:
        sigma = system.diffusion(t, x)
        sigma_ok = bool(torch.isfinite(torch.as_tensor(sigma)).all())
    except Exception:  # noqa: BLE001
        sigma_ok = True
    if not sigma_ok:
        return (
            f"The diffusion σ(t, x) is non-finite at the finite state of step {step - 1}: check the temperature "
            "β_t or the diffusion; a smaller dt will not help."
        )
    return (
        f"The drift and diffusion are finite at step {step - 1} (largest |x| = {size:.3g}), so the step itself "
        "overflowed: reduce dt (the explicit scheme is unstable for a stiff drift), or check the drift."
    )


def _check_start(system: object, x0: torch.Tensor) -> None:
    """Raise unless ``system`` is a [`ParticleSystem`][meanfield.drift.systems.ParticleSystem] and ``x0`` a finite,
    non-empty ``(B, M, d)`` tensor."""
    if not isinstance(system, ParticleSystem):
        raise TypeError(
            f"system must be a meanfield ParticleSystem (e.g. MeanFieldLangevin or SDE), "
            f"got {type(system).__name__}"
        )
    check_rank("x0", x0, 3, "(B, M, d): replicas, particles, dimensions (use x0[None] for one replica)")
    check_finite_tensor("x0", x0)
    if x0.numel() == 0:
        raise ValueError(
            f"x0 must have at least one replica, particle and dimension, got shape {tuple(x0.shape)}"
        )


def _step_grid(dt: float, t0: float, t1: float) -> tuple[float, float, float, int]:
    r"""``(dt, t0, t1, n)`` checked: $dt > 0$, $t_1 > t_0$ finite, $n = (t_1 - t_0)/dt$ a whole number
    $1 \le n \le 2^{53}$ (beyond it the times $t_0 + n\cdot dt$ are not exact in float64)."""
    dt, t0, t1 = check_positive("dt", dt), check_finite("t0", t0), check_finite("t1", t1)
    if not t1 > t0:
        raise ValueError(f"t1 must be a finite time > t0 = {t0}, got {t1}")
    n_float = (t1 - t0) / dt
    n_steps = round(n_float)
    if n_steps < 1 or abs(n_float - n_steps) > 1e-6 * max(1.0, n_float):
        raise ValueError(
            f"t1 − t0 = {t1 - t0} must be a whole number of steps of dt = {dt} (got {n_float:.6g} steps)"
        )
    if n_steps > 2**53:
        raise ValueError(
            f"(t1 − t0)/dt = {n_steps:.3g} steps: more than 2^53, where the step times t0 + n·dt are no longer "
            "exact in float64; check dt"
        )
    return dt, t0, t1, n_steps


class _Saves:
    """The states a run keeps: the steps they are taken at, the tensor that holds them (the first ``first``
    filled: ``x0`` unless there is a burn-in), and the [`Trajectory`][meanfield.stepping.simulate.Trajectory]
    of the first ``n`` of them."""

    def __init__(
        self,
        x0: torch.Tensor,
        n_steps: int,
        save_every: int,
        first_save: int,
        t0: float,
        dt: float,
        solver: str,
        seed: int | None,
    ) -> None:
        _checks.check_saved_states(n_steps, save_every, x0, first_save)  # before the list and the tensor below
        self.steps = [*range(first_save, n_steps, save_every), n_steps]
        shape = (len(self.steps), *x0.shape)
        self.states = torch.empty(shape, dtype=x0.dtype, device=x0.device)  # (S, B, M, d)
        self.first = 0
        if first_save == 0:
            self.states[0] = x0.detach()  # the run is not recorded by autograd
            self.first = 1
        self.t0, self.dt, self.solver, self.seed = t0, dt, solver, seed

    def trajectory(self, n: int) -> Trajectory:
        steps = torch.tensor(self.steps[:n])
        times = self.t0 + steps.to(self.states.dtype) * self.dt
        return Trajectory(times, self.states[:n], steps, self.dt, self.solver, self.seed)


class _FiniteCheck:
    """The error a non-finite state raises, traced to its first step where the noise can be replayed.

    ``anchor``: where the state was last confirmed finite at a check stop (the step, a copy of the state and
    how to replay the noise from there). ``flags``: on an accelerator, the stops' finite flags not read yet,
    ``(n, n_next, states saved before n_next, finite?)``, read together by ``read_flags``.
    """

    def __init__(
        self, solver: Solver, system: ParticleSystem, source: NoiseSource, x0: torch.Tensor, saves: _Saves
    ) -> None:
        self.solver, self.system, self.saves = solver, system, saves
        self.t0, self.dt = saves.t0, saves.dt
        self.x0 = x0  # (B, M, d) the caller's, not modified: its size, for the advice of an error
        self.anchor = _Anchor(source, x0)
        self.flags: list[tuple[int, int, int, torch.Tensor]] = []

    def error(self, n: int, n_next: int, n_saved: int, what: str) -> NonFiniteStateError:
        """The error for a state found non-finite at the stop ``n_next`` (finite at the stop ``n``)."""
        t0, dt = self.t0, self.dt
        first = self.anchor.first_bad_step(self.solver, self.system, t0, dt, n_next)
        if first is None:  # the noise cannot be replayed: the stops that bracket it
            step, last, where = n_next, n, f"by step {n_next} (t = {t0 + n_next * dt:g})"
            advice = (
                "Reduce dt if the state grew over many steps; check the drift and diffusion if they can be "
                "infinite or NaN (a singular potential, a division by zero)."
            )
        else:
            step, x_before = first
            last, where = step - 1, f"at step {step} (t = {t0 + step * dt:g}), the first non-finite step"
            advice = _advice(self.system, t0 + last * dt, x_before, step, float(self.x0.detach().abs().max()))
        return NonFiniteStateError(
            f"the state became non-finite ({what}) {where}; it was finite at step {last} "
            f"(t = {t0 + last * dt:g}). {advice} error.trajectory holds the {n_saved} states saved so far.",
            step,
            t0 + step * dt,
            last,
            self.saves.trajectory(n_saved),
        )

    def read_flags(self) -> None:
        """Raise the error of the first flagged stop that is not finite; otherwise forget the flags."""
        flags = self.flags
        ok = torch.stack([f for *_, f in flags])  # (stops,) bool, on x's device
        if not bool(ok.all()):  # the one synchronisation of the segment
            n, n_next, n_saved, _ = flags[int((~ok).nonzero()[0])]  # the first stop found non-finite
            raise self.error(n, n_next, n_saved, f"found when checked after step {flags[-1][1]}")
        flags.clear()


def simulate(
    system: ParticleSystem,
    x0: torch.Tensor,
    *,
    t1: float,
    dt: float,
    t0: float = 0.0,
    solver: str | Solver = "euler",
    save_every: int | None = None,
    generator: torch.Generator | int | None = None,
    noise: str = "gaussian",
    brownian: NoiseSource | None = None,
    check_every: int = 64,
    progress: bool | None = None,
    save_from: float | None = None,
    collapse: str = "warn",
    collapse_every: int = 16,
) -> Trajectory:
    """Integrate ``system`` from ``x0`` at ``t0`` to ``t1`` with $n = (t_1 - t_0)/dt$ steps of size ``dt``.

    Args:
        system: the particle system (drift, diffusion, noise type).
        x0: the initial state, ``(B, M, d)``, finite; it is not modified.
        t1: the final time (``> t0``; $t_1 - t_0$ must be a whole number of steps).
        dt: the step size ``> 0``.
        t0: the initial time.
        solver: a name from [`meanfield.stepping.solvers.SOLVERS`][meanfield.stepping.solvers.SOLVERS] or a solver object; ``"euler"`` is the native
            Euler–Maruyama.
        save_every: keep the state every this many steps (the initial and final states are always kept,
            the initial one only without ``save_from``).
        save_from: a burn-in: keep states from this time on only — the state at ``save_from`` (a whole
            number of steps after ``t0``, ``t0 ≤ save_from ≤ t1``), then every ``save_every`` steps from there,
            and the final state; ``Trajectory.times`` are their times. ``None``: from ``t0``.
        generator: the ``torch.Generator`` the noise is drawn from, an int seed (a Python or numpy integer),
            or ``None`` for a fresh random seed (recorded in ``Trajectory.seed``); read by
            [`meanfield.seeds.resolve_generator`][meanfield.seeds.resolve_generator], as in every entry point.
            An int equal to ``torch.initial_seed()`` warns: after ``torch.manual_seed(s)``, ``generator=s`` draws
            the numbers an ``x0 = torch.randn(...)`` drew ([`warn_if_global_seed`][meanfield.seeds.warn_if_global_seed]).
        noise: ``"gaussian"`` or ``"rademacher"`` (±1 increments: weak order 1, Euler–Maruyama only).
        brownian: pre-drawn increments instead of a generator (e.g. a coarsened path for order tests), or
            another [`NoiseSource`][meanfield.stepping.brownian.NoiseSource] of the system's noise shape (e.g.
            `BlockNoise`, one generator per block of particles).
        check_every: check the state for NaN/Inf at least this often (and at every saved state).
        progress: show a progress bar over the steps (``None``: when the run lasts over a second in a terminal
            or a notebook, [`meanfield.progress`][meanfield.progress]).
        collapse: ``"warn"`` (a [`CollapseWarning`][meanfield.drift.resolution.CollapseWarning], once per run), ``"raise"``
            (a [`CollapseError`][meanfield.drift.resolution.CollapseError] carrying the states saved so far) or ``"ignore"``,
            when the particles of an attractive singular interaction (``LogInteraction(c)`` or
            ``RieszInteraction(s, c)`` with ``c < 0``) collapse: at least a quarter as many pairs as
            particles are closer than ``r⋆ = (2|c|·dt/M)^{1/(s+2)}``, the distance below which one step moves a
            pair by more than its separation ([`meanfield.drift.resolution`][meanfield.drift.resolution] derives it). The warning names the
            time, the replica and the closest pair's distance.
        collapse_every: look for a collapse every this many steps: one pass over the pairs, as costly as one
            evaluation of the interaction's drift, so about ``1/collapse_every`` of the run's time (and only
            for such interactions).

    Before the first step, an [`UnstableStepWarning`][meanfield.drift.resolution.UnstableStepWarning] says when a known linear part
    of the drift makes the explicit step unstable (``a·dt ≥ 2`` for ``Quadratic(a)``; see
    [`meanfield.drift.resolution.unstable_step`][meanfield.drift.resolution.unstable_step]), instead of an overflow many steps later.

    Returns:
        The [`Trajectory`][meanfield.stepping.simulate.Trajectory]. The run is not recorded by autograd.

    Raises:
        ValueError, TypeError: for bad arguments (the message says which and what is allowed).
        NonFiniteStateError: when the state becomes NaN/Inf: the first non-finite step (found by replaying
            the steps since the last check, for meanfield's noise sources) and advice for the cause seen at the
            step before (a blow-up, a singular drift, a non-finite diffusion).
        CollapseError: with ``collapse="raise"``, when the particles collapse (above).
    """
    _check_start(system, x0)
    dt, t0, t1, n_steps = _step_grid(dt, t0, t1)
    save_every = n_steps if save_every is None else check_int("save_every", save_every)
    check_every = check_int("check_every", check_every)
    collapse_every = check_int("collapse_every", collapse_every)
    if not isinstance(collapse, str) or collapse not in COLLAPSE_ACTIONS:
        raise ValueError(f"collapse must be one of {COLLAPSE_ACTIONS}, got {collapse!r}")
    first_save = 0 if save_from is None else _burn_in_steps(save_from, t0, t1, dt, n_steps)
    solver = get_solver(solver)
    source, seed = _noise_source(system, x0, dt, n_steps, noise, generator, brownian)
    solver.check(system, source)
    system.check_state(x0)  # e.g. per-replica parameters for another number of replicas
    unstable = unstable_step(system, x0, dt, solver.name)
    if unstable is not None:
        warnings.warn(unstable, UnstableStepWarning, stacklevel=2)
    watch = CollapseWatch(system, x0, dt, t0, collapse_every, collapse)

    saves = _Saves(x0, n_steps, save_every, first_save, t0, dt, solver.name, seed)
    save_steps, states, saved = saves.steps, saves.states, saves.first
    # where the loop stops to save or check, merged lazily (a long run does not build a list of its checks)
    looks = range(0, n_steps, collapse_every) if not watch.done else ()
    stops = (
        n for n, _ in itertools.groupby(heapq.merge([0], save_steps, range(0, n_steps, check_every), looks))
    )
    stepper = solver.stepper(system, source, t0, dt)
    # On the CPU every stop is checked at once (reading the flag costs nothing). On an accelerator a stop only
    # queues its flag (no synchronisation); the flags are read together at the check stops (every check_every
    # steps) and at the end, so the host never waits for the device at a saved state.
    lazy = x0.device.type not in _EAGER_CHECKS
    finite_check = _FiniteCheck(solver, system, source, x0, saves)
    anchor, flags, non_finite = finite_check.anchor, finite_check.flags, finite_check.error

    def collapsed(n_saved: int) -> None:
        found = watch.read()
        if found is None:
            return
        if collapse == "raise":
            raise CollapseError(found, saves.trajectory(n_saved))
        warnings.warn(found, stacklevel=3)

    x = x0.clone()  # (B, M, d): steppers may update it in place; x0 stays the caller's
    with (
        torch.no_grad(),
        progress_bar(progress, total=n_steps, desc=f"simulate[{solver.name}]", unit="step") as bar,
        _settled(source),
    ):
        for n, n_next in itertools.pairwise(stops):
            x = stepper.run(x, n, n_next - n)
            finite = _all_finite(x)  # () bool, on x's device
            if lazy:
                flags.append((n, n_next, saved, finite))
                if n_next % check_every == 0:
                    finite_check.read_flags()
                    anchor.set(n_next, x)
            elif not bool(finite):
                raise non_finite(n, n_next, saved, f"{int((~torch.isfinite(x)).sum())} NaN/Inf entries")
            elif n_next % check_every == 0:
                anchor.set(n_next, x)
            if n_next % collapse_every == 0 or n_next == n_steps:
                watch.observe(n_next, x)
                if not lazy or n_next % check_every == 0:
                    collapsed(saved)
            if n_next == save_steps[saved]:
                states[saved] = x
                saved += 1
            bar.update(n_next - n)
        if flags:
            finite_check.read_flags()
        collapsed(saved)
    return saves.trajectory(saved)
