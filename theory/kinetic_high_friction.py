"""Kinetic check 4 — the high-friction limit: X_{γs} of kinetic Langevin → the overdamped law at time s as γ → ∞.

Formula: for dX = V dt, dV = −∇U(X) dt − γV dt + sqrt(2γβ) dW the rescaled position Y_s = X_{γs} converges as
γ → ∞ to the overdamped Langevin dynamics dY = −∇U(Y) ds + sqrt(2β) dB (the Smoluchowski–Kramers limit;
Nelson 1967, *Dynamical Theories of Brownian Motion*, §10; Pavliotis 2014, §6.5). On U = a/2·x² everything is
Gaussian and exact: the kinetic law at t from (x0, v ~ N(0, β)) has mean e^{Ct}(x0, 0) and covariance
Σ∞ + e^{Ct}(Σ0 − Σ∞)e^{Cᵀt} (C = [[0, 1], [−a, −γ]], Σ∞ = diag(β/a, β)), the overdamped law at s has mean
x0·e^{−as} and variance β/a·(1 − e^{−2as}); their gap at t = γs shrinks as γ grows (computed here exactly and
stated in each row's note). The BAOAB chain (step h = 0.25/γ, so that hγ — the velocity's decorrelation per
step — stays fixed) is linear, its exact law after n steps is the recursion of ``kinetic_harmonic``.

Measured: n independent particles (x0 = 1, Maxwellian velocities) at γ ∈ {1, 4, 16}, E X and Var X at
t = γ·s, s = 0.5, against (i) the exact chain law (5·SE), (ii) the overdamped law at s with tolerance
5·SE + |chain − kinetic closed form| (the discretisation bias, stated): it must agree at the largest γ
(where the closed-form gap is below one SE) and be rejected at γ = 1 (negative control, expect="differ").

Tolerance: 5·SE (false-failure rate 5.7e-7 per row); SE of the mean sqrt(Var/n), of the variance
Var·sqrt(2/n) (Gaussian). Power (fast, n = 4e4): E X to ≈ 0.003 (detects 0.014 on 0.61), Var X to 0.7 %
(detects 3.5 %). BROKEN: the simulated temperature 10 % too high (``perturb_beta=1.1``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from scipy.linalg import expm

from meanfield import simulate
from meanfield.drift.phase_space import KineticMeanFieldLangevin, pair, positions
from meanfield.drift.potentials import Quadratic
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z
from meanfield.studies.validation import CheckResult, load_check

CLAIM = "High friction: X_{γs} of kinetic Langevin → overdamped law N(x0e^{−as}, β/a(1−e^{−2as})) as γ → ∞"
BROKEN = dict(perturb_beta=1.1)
PRESETS = {
    "fast": dict(n=40_000, gammas=(1.0, 4.0, 16.0)),
    "full": dict(n=400_000, gammas=(1.0, 2.0, 4.0, 8.0, 16.0, 32.0)),
}
A, BETA, X0, S = 1.0, 0.5, 1.0, 0.5
H_GAMMA = 0.25  # h·γ: γs/h = 2γ² steps, a whole number for the γ of both presets


def _harmonic():
    return load_check(Path(__file__).with_name("kinetic_harmonic.py"))


def kinetic_law(t: float, gamma: float) -> tuple[float, float]:
    """(E X_t, Var X_t) of the continuous kinetic dynamics from x0 = X0, v ~ N(0, β)."""
    E = expm(np.array([[0.0, 1.0], [-A, -gamma]]) * t)
    inf = np.diag([BETA / A, BETA])
    cov = inf + E @ (np.diag([0.0, BETA]) - inf) @ E.T
    return float((E @ np.array([X0, 0.0]))[0]), float(cov[0, 0])


def overdamped_law(s: float) -> tuple[float, float]:
    return X0 * math.exp(-A * s), BETA / A * (1 - math.exp(-2 * A * s))


def chain_law(n: int, gamma: float, h: float) -> tuple[float, float]:
    L, Q = _harmonic().step_matrices("baoab", A, h, gamma, BETA)
    mean, cov = np.array([X0, 0.0]), np.diag([0.0, BETA])
    for _ in range(n):
        mean, cov = L @ mean, L @ cov @ L.T + Q
    return float(mean[0]), float(cov[0, 0])


def run(preset: str = "fast", *, perturb_beta: float = 1.0) -> CheckResult:
    """Run the check; ``perturb_beta ≠ 1`` scales the simulated temperature only (a broken input)."""
    p = PRESETS[preset]
    n = p["n"]
    result = CheckResult("kinetic_high_friction", CLAIM, preset=preset)
    gen = torch.Generator().manual_seed(2930)
    od_m, od_v = overdamped_law(S)
    rows = []
    for gamma in p["gammas"]:
        h = H_GAMMA / gamma
        steps = round(gamma * S / h)
        assert abs(steps * h - gamma * S) < 1e-9 * gamma, (gamma, steps, h)  # t = γs on the grid
        system = KineticMeanFieldLangevin(Quadratic(A), friction=gamma, beta=BETA * perturb_beta)
        v0 = math.sqrt(BETA) * torch.randn(1, n, 1, generator=gen, dtype=torch.float64)  # (1, n, 1)
        z = simulate(
            system, pair(torch.full_like(v0, X0), v0), t1=steps * h, dt=h, solver="baoab", generator=gen
        ).final
        x = positions(z).flatten()  # (n,)
        m, v = float(x.mean()), float(x.var())
        cm, cv = chain_law(steps, gamma, h)
        km, kv = kinetic_law(gamma * S, gamma)
        se_m, se_v = math.sqrt(cv / n), cv * math.sqrt(2 / n)
        rows.append(dict(gamma=gamma, m=m, v=v, se_m=se_m, se_v=se_v, chain=(cm, cv), kinetic=(km, kv)))
        for label, val, chain, kin, od, se in (
            ("E X", m, cm, km, od_m, se_m),
            ("Var X", v, cv, kv, od_v, se_v),
        ):
            result.add(f"{label}(γs), γ={gamma:g} [BAOAB chain law]", val, chain, Z * se, detectable=Z * se,
                       note=f"5·SE; h = {h:.3g}, {steps} steps")  # fmt: skip
            disc = abs(chain - kin)
            gap = abs(kin - od)
            if gamma == max(p["gammas"]):
                result.add(f"{label}(γs), γ={gamma:g} [overdamped law at s={S:g}]", val, od, Z * se + disc, detectable=Z * se,
                           note=f"5·SE + discretisation |chain − kinetic| = {disc:.2g}; closed-form gap |kinetic − overdamped| = {gap:.2g}")  # fmt: skip
            if gamma == min(p["gammas"]):
                result.add(f"negative control: {label}(γs), γ={gamma:g} vs overdamped law", val, od, Z * se + disc,
                           expect="differ", note=f"closed-form gap {gap:.2g} at low friction must be seen")  # fmt: skip
    result.data = dict(a=A, beta=BETA, x0=X0, s=S, n=n, rows=rows, overdamped=(od_m, od_v))
    return result


def plot(result: CheckResult):
    d = result.data
    fig, (ax1, ax2) = figure(ncols=2)
    g = np.array([r["gamma"] for r in d["rows"]])
    fine = np.geomspace(0.8, g.max() * 4, 80)
    for ax, j, label in ((ax1, 0, "E X(γs)"), (ax2, 1, "Var X(γs)")):
        ax.plot(
            fine, [kinetic_law(gm * d["s"], gm)[j] for gm in fine], "k-", lw=1, label="kinetic closed form"
        )
        ax.axhline(d["overdamped"][j], color="C3", ls="--", lw=1, label=f"overdamped law at s = {d['s']}")
        key, se = ("m", "se_m") if j == 0 else ("v", "se_v")
        ax.errorbar(g, [r[key] for r in d["rows"]], [Z * r[se] for r in d["rows"]], fmt="o", ms=4, capsize=3,
                    label="BAOAB particles (±5 SE)")  # fmt: skip
        ax.plot(g, [r["chain"][j] for r in d["rows"]], "x", color="C2", ms=7, label="BAOAB chain law")
        ax.set(xscale="log", xlabel="friction γ", ylabel=label, title=f"{label}: high-friction limit")
        ax.legend(fontsize=7)
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
