"""The two noise paths of the kinetic splittings (``meanfield/stepping/solvers/splittings.py``).

- A path to couple to (``brownian=``: pre-drawn increments of shape ``(B, M, 2d)``): the step of before issue
  51, replayed here op for op (force ``system.force`` on the position view, the O over a whole step as the
  composed bridge halves) — equal bit for bit, so a coupled run keeps its values.
- Drawn noise (``generator=``): one draw ``N(0, s²)`` of ``B·M·d`` numbers per O (``s = sqrt(β(1 − c²))``),
  ``v ← c·v + s·ξ``; replayed by hand from the same seed (to 1e-12 in float64, the force's rounding aside)
  and the generator's final state equal (a draw of ``2·B·M·d`` numbers per O would leave it elsewhere).
  Its laws: BAOAB's exact position variance is tested in ``tests/test_kinetic.py``; OBABO's exact velocity
  variance and ABOBA's exact position variance here.
"""

import math

import pytest
import torch

from meanfield import BrownianIncrements, simulate
from meanfield.drift.phase_space import KineticMeanFieldLangevin, pair, positions, velocities
from meanfield.drift.potentials import DoubleWell, Quadratic, QuadraticInteraction
from meanfield.stepping.solvers.splittings import SPLITTINGS

F64 = torch.float64
SCHEMES = sorted(SPLITTINGS)


def _old_coupled_run(system, z0, path, dt, n, word):
    """The splitting step of before issue 51 on pre-drawn increments, op for op."""
    z = z0.clone()
    d = z.shape[-1] // 2
    x, v = z[..., :d], z[..., d:]  # strided views: the updates write into z
    counts = {c: word.count(c) for c in word}
    gamma, force = system.friction, None
    for step in range(n):
        t = step * dt
        beta = system.temperature(t)
        xi = path.increment(step, 1.0)  # (B, M, 2d)
        xi_x, xi_v = xi[..., :d], xi[..., d:]
        halves = 0
        for letter in word:
            frac = 1.0 / counts[letter]
            if letter == "A":
                x.add_(v, alpha=frac * dt)
                force = None
            elif letter == "B":
                if force is None:
                    force = system.force(t, x)
                v.add_(force, alpha=frac * dt)
            else:
                c = math.exp(-gamma * frac * dt)
                if frac == 1.0:
                    c_half = math.sqrt(c)
                    s_half = math.sqrt(max(beta * (1.0 - c), 0.0)) / math.sqrt(2.0)
                    v.mul_(c).add_(xi_v, alpha=s_half * (c_half + 1.0)).add_(
                        xi_x, alpha=s_half * (c_half - 1.0)
                    )
                else:
                    s = math.sqrt(max(beta * (1.0 - c * c), 0.0)) / math.sqrt(2.0)
                    v.mul_(c).add_(xi_v, alpha=s).add_(xi_x, alpha=s if halves == 0 else -s)
                halves += 1
    return z


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_coupled_run_keeps_the_values_of_before_bit_for_bit(scheme):
    """Pre-drawn increments (two segments: check_every = 7 of 20 steps): the run equals the old step replayed
    op for op, bit for bit. Negative control: the drawn-noise path from the same seed differs."""
    system = KineticMeanFieldLangevin(DoubleWell(), QuadraticInteraction(0.5), friction=2.0, beta=0.3)
    z0 = torch.randn(2, 7, 4, dtype=F64, generator=torch.Generator().manual_seed(5))
    path = BrownianIncrements.sample(
        20, (2, 7, 4), 0.05, generator=torch.Generator().manual_seed(11), dtype=F64
    )
    run = simulate(system, z0, t1=1.0, dt=0.05, solver=scheme, brownian=path, check_every=7).final
    assert torch.equal(run, _old_coupled_run(system, z0, path, 0.05, 20, SPLITTINGS[scheme]))
    drawn = simulate(system, z0, t1=1.0, dt=0.05, solver=scheme, generator=11).final
    assert not torch.allclose(drawn, run, atol=1e-3)


def _drawn_run(z0, n, dt, word, a, k, gamma, beta, g, t0=0.0):
    """The drawn-noise splitting by hand: x, v apart, each O ``v ← c·v + s·ξ`` with one draw of
    ``(n_O, B, M, d)`` numbers ``N(0, s²)`` per step, ``s`` from ``β`` at the step's start (``beta`` a number
    or a function of t); the force ``−a·x − k·(x − x̄)``."""
    d = z0.shape[-1] // 2
    x, v = z0[..., :d].clone(), z0[..., d:].clone()
    counts = {c: word.count(c) for c in word}
    n_o = counts["O"]
    c = math.exp(-gamma * dt / n_o)
    for step in range(n):
        b = beta(t0 + step * dt) if callable(beta) else beta
        s = math.sqrt(b * (1 - c * c))
        xi = torch.empty((n_o, *x.shape), dtype=x.dtype).normal_(0.0, s, generator=g)
        o = 0
        for letter in word:
            tau = dt / counts[letter]
            if letter == "A":
                x = x + tau * v
            elif letter == "B":
                v = v + tau * (-a * x - k * (x - x.mean(1, keepdim=True)))
            else:
                v = c * v + xi[o]
                o += 1
    return pair(x, v)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("k", [0.0, 0.7])
def test_drawn_noise_is_one_scaled_draw_of_b_m_d_numbers_per_o(scheme, k):
    """From one seed: the run (three segments) equals the hand-written splitting to 1e-12 and leaves the
    generator where n_O·B·M·d numbers a step leave it. Negative control: a replay that draws 2·B·M·d numbers
    per O (the coupled path's size) ends with another generator state."""
    a, gamma, beta, dt, n = 1.3, 0.8, 0.4, 0.1, 25
    system = KineticMeanFieldLangevin(
        Quadratic(a), QuadraticInteraction(k) if k else None, friction=gamma, beta=beta
    )
    z0 = torch.randn(3, 20, 4, dtype=F64, generator=torch.Generator().manual_seed(2))
    g = torch.Generator().manual_seed(8)
    run = simulate(system, z0, t1=n * dt, dt=dt, solver=scheme, generator=g, check_every=10).final
    ref_g = torch.Generator().manual_seed(8)
    ref = _drawn_run(z0, n, dt, SPLITTINGS[scheme], a, k, gamma, beta, ref_g)
    assert torch.allclose(run, ref, rtol=0, atol=1e-12)
    assert torch.equal(g.get_state(), ref_g.get_state())
    double = torch.Generator().manual_seed(8)
    torch.empty(n, 2 * SPLITTINGS[scheme].count("O"), 3, 20, 2, dtype=F64).normal_(generator=double)
    assert not torch.equal(g.get_state(), double.get_state())


def test_drawn_noise_reads_a_scheduled_temperature_at_the_start_of_each_step():
    """β_t = 0.1 + t with BAOAB from t0 = 0.5 (two segments): each step's O uses β_{t_n}, as the hand-written
    run does (to 1e-12); negative control: β_{t0} throughout differs."""
    system = KineticMeanFieldLangevin(Quadratic(1.0), friction=0.8, beta=lambda t: 0.1 + t)
    z0 = torch.randn(1, 6, 2, dtype=F64, generator=torch.Generator().manual_seed(22))
    t0, h, n = 0.5, 0.25, 6
    run = simulate(
        system,
        z0,
        t0=t0,
        t1=t0 + n * h,
        dt=h,
        solver="baoab",
        generator=torch.Generator().manual_seed(7),
        check_every=4,
    ).final

    def hand(beta):
        return _drawn_run(z0, n, h, "BAOAB", 1.0, 0.0, 0.8, beta, torch.Generator().manual_seed(7), t0=t0)

    assert torch.allclose(run, hand(lambda t: 0.1 + t), rtol=0, atol=1e-12)
    assert not torch.allclose(run, hand(0.1 + t0), rtol=0, atol=1e-6)


@pytest.mark.parametrize(("scheme", "which"), [("obabo", "v"), ("aboba", "x")])
def test_drawn_noise_keeps_the_exact_stationary_laws(scheme, which):
    """On V = a/2·x² at h²a/4 = 56 %: OBABO's Var v = β and ABOBA's Var x = β/a exactly (discrete Lyapunov,
    tests/test_kinetic.py), within 5·SE (SE = sqrt(2/n)·the variance, n = 4e4: detects 3.5 %), started
    there, after 30 steps. Negative control: the other half's law is biased by more than 5·SE (ABOBA's
    Var v = β/(1 − h²a/4) is +129 %; OBABO's Var x = β/(a(1 − h²a/4)) likewise)."""
    n, h, beta = 40_000, 1.5, 0.5
    system = KineticMeanFieldLangevin(Quadratic(1.0), friction=1.0, beta=beta)
    g0 = torch.Generator().manual_seed(0)
    z0 = pair(
        math.sqrt(beta) * torch.randn(1, n, 1, dtype=F64, generator=g0),
        math.sqrt(beta) * torch.randn(1, n, 1, dtype=F64, generator=g0),
    )
    zT = simulate(system, z0, t1=30 * h, dt=h, solver=scheme, generator=3).final
    exact, biased = (velocities(zT), positions(zT)) if which == "v" else (positions(zT), velocities(zT))
    se = beta * math.sqrt(2 / n)
    assert abs(float(exact.square().mean()) - beta) < 5 * se
    assert abs(float(biased.square().mean()) - beta) > 5 * se
