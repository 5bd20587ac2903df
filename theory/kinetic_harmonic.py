"""Kinetic check 1 — BAOAB, OBABO, ABOBA on V = a/2·x²: the exact stationary position and velocity laws as functions of h.

Formula: on the harmonic confinement every splitting step is linear, z' = L z + G ξ with z = (x, v), so the
chain's law from a Gaussian start stays Gaussian and its covariance obeys Σ' = L Σ Lᵀ + G Gᵀ. With
A(τ) = [[1, τ], [0, 1]], B(τ) = [[1, 0], [−τa, 1]], O(τ): v ← e^{−γτ}v + sqrt(β(1 − e^{−2γτ}))ξ, the
stationary solutions of the discrete Lyapunov equation Σ = L Σ Lᵀ + Q are (solved symbolically; the tests
check them against ``scipy.linalg.solve_discrete_lyapunov`` of the composed matrices)

    BAOAB:  Var x = β/a,                Var v = β·(1 − h²a/4),   Cov(x, v) = 0
    ABOBA:  Var x = β/a,                Var v = β/(1 − h²a/4),   Cov(x, v) = 0
    OBABO:  Var x = β/(a(1 − h²a/4)),   Var v = β,               Cov(x, v) = 0

for every friction γ > 0, stable for h²a < 4 (Leimkuhler & Matthews 2013, *Appl. Math. Res. Express*,
"Rational construction of stochastic numerical methods for molecular sampling", §4 for BAOAB; the other two
follow the same way). The continuous Gibbs values are β/a and β: each scheme is exact in one marginal and
biased by ±h²a/4 + O(h⁴) (relative) in the other — weak order 2, against Euler–Maruyama's O(h).

Measured: n independent particles (d = 1) per scheme and step, started from the continuous Gibbs law
N(0, β/a) × N(0, β) and run T = 12/γ time units (γ = 1, a = 1); the reference is the exact covariance after
those steps (the recursion Σ_{k+1} = L Σ_k Lᵀ + Q from the start, transient included, which here is
≤ 1.3e-5 relative to the stationary value over both presets' steps).

Tolerance: 5·SE, SE = v·sqrt(2/n) for the second moment of n Gaussian draws of known mean 0 (false-failure
rate 5.7e-7 per row); the smallest detectable relative error is 5·sqrt(2/n) = 2.2 % at n = 1e5 (fast),
0.7 % at n = 1e6 (full). The biased marginal at h = 1 is 25 % (BAOAB's Var v: −25 %, OBABO's Var x +33 %,
ABOBA's Var v +33 %) and 6.3–6.7 % at h = 0.5.
Negative controls (expect="differ"): at h ≥ 0.5 each scheme's biased marginal against the continuous value
(≥ 2.8 detectable units at the fast n). BROKEN: the simulated temperature 5 % too high
(``perturb_beta=1.05``: every row moves by 5 %, 2.3 × the detectable 2.2 %, and fails).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from meanfield import simulate
from meanfield.drift.phase_space import KineticMeanFieldLangevin, pair, positions, velocities
from meanfield.drift.potentials import Quadratic
from meanfield.stepping.solvers.splittings import SPLITTINGS
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z
from meanfield.studies.validation import CheckResult

CLAIM = "BAOAB/ABOBA: Var x = β/a exactly, Var v = β(1∓h²a/4)^±1; OBABO: Var v = β, Var x = β/(a(1−h²a/4))"
BROKEN = dict(perturb_beta=1.05)  # the simulated temperature 5 % too high
PRESETS = {
    "fast": dict(n=100_000, hs=(0.25, 0.5, 1.0)),
    "full": dict(n=1_000_000, hs=(0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5)),
}
A, BETA, GAMMA = 1.0, 0.5, 1.0
T_RUN = 12.0  # γT = 12: the start's deviation (O(h²)) decays to ≲ e^{−12}
DIFFER_FROM = 0.5  # the continuous value must be rejected at h ≥ this


def stationary_variances(scheme: str, a: float, h: float, beta: float) -> tuple[float, float]:
    """``(Var x, Var v)`` of the stationary law of ``scheme`` on ``V = a/2 x²`` (any γ > 0; Cov(x, v) = 0)."""
    r = 1.0 - h * h * a / 4.0
    if r <= 0:
        raise ValueError(f"h²a = {h * h * a:g} ≥ 4: the {scheme} chain is not stable")
    return {
        "baoab": (beta / a, beta * r),
        "aboba": (beta / a, beta / r),
        "obabo": (beta / (a * r), beta),
    }[scheme]


def step_matrices(
    scheme: str, a: float, h: float, gamma: float, beta: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(L, Q)`` of one step ``z' = L z + noise``, ``Cov(noise) = Q``, composed letter by letter."""
    word = SPLITTINGS[scheme]
    L, Q = np.eye(2), np.zeros((2, 2))
    for letter in word:
        tau = h / word.count(letter)
        if letter == "A":
            S, q = np.array([[1.0, tau], [0.0, 1.0]]), 0.0
        elif letter == "B":
            S, q = np.array([[1.0, 0.0], [-tau * a, 1.0]]), 0.0
        else:
            c = math.exp(-gamma * tau)
            S, q = np.array([[1.0, 0.0], [0.0, c]]), beta * (1 - c * c)
        L, Q = S @ L, S @ Q @ S.T + np.diag([0.0, q])
    return L, Q


def covariance_after(
    scheme: str, steps: int, start: np.ndarray, a=A, h=0.5, gamma=GAMMA, beta=BETA
) -> np.ndarray:
    """The exact covariance of the chain after ``steps`` steps from a centred Gaussian with covariance ``start``."""
    L, Q = step_matrices(scheme, a, h, gamma, beta)
    S = start.copy()
    for _ in range(steps):
        S = L @ S @ L.T + Q
    return S


def run(preset: str = "fast", *, perturb_beta: float = 1.0) -> CheckResult:
    """Run the check; ``perturb_beta ≠ 1`` scales the *simulated* temperature only (a broken input)."""
    p = PRESETS[preset]
    n = p["n"]
    result = CheckResult("kinetic_harmonic", CLAIM, preset=preset)
    gen = torch.Generator().manual_seed(29)
    system = KineticMeanFieldLangevin(Quadratic(A), friction=GAMMA, beta=BETA * perturb_beta)
    start = np.diag([BETA / A, BETA])
    rows = {}
    for scheme in SPLITTINGS:
        rows[scheme] = []
        for h in p["hs"]:
            steps = math.ceil(T_RUN / h)
            x0 = math.sqrt(BETA / A) * torch.randn(1, n, 1, generator=gen, dtype=torch.float64)  # (1, n, 1)
            v0 = math.sqrt(BETA) * torch.randn(1, n, 1, generator=gen, dtype=torch.float64)  # (1, n, 1)
            zT = simulate(system, pair(x0, v0), t1=steps * h, dt=h, solver=scheme, generator=gen).final
            vx, vv = (float(f(zT).square().mean()) for f in (positions, velocities))  # known mean 0
            S = covariance_after(scheme, steps, start, h=h)
            sx, sv = stationary_variances(scheme, A, h, BETA)
            rows[scheme].append(
                dict(h=h, var_x=vx, var_v=vv, ref_x=S[0, 0], ref_v=S[1, 1], stat_x=sx, stat_v=sv)
            )
            for label, val, ref, cont in (("Var x", vx, S[0, 0], BETA / A), ("Var v", vv, S[1, 1], BETA)):
                se = ref * math.sqrt(2.0 / n)
                result.add(f"{scheme.upper()} {label}, h={h:g} [exact chain law]", val, ref, Z * se, detectable=Z * se,
                           note=f"5·v·sqrt(2/n), n={n}; stationary {sx if label == 'Var x' else sv:.5g}, {steps} steps from Gibbs")  # fmt: skip
                if h >= DIFFER_FROM and not math.isclose(ref, cont, rel_tol=1e-3):
                    se_c = cont * math.sqrt(2.0 / n)
                    result.add(f"negative control: {scheme.upper()} {label}, h={h:g} vs continuous", val, cont, Z * se_c,
                               detectable=Z * se_c, expect="differ",
                               note=f"the chain's bias {ref / cont - 1:+.3g} (relative) must be seen")  # fmt: skip
    result.data = dict(a=A, beta=BETA, gamma=GAMMA, n=n, rows=rows)
    # a phase-space sample of BAOAB at the largest h for the figure
    h = p["hs"][-1]
    z = simulate(system, pair(torch.zeros(1, 4000, 1, dtype=torch.float64)), t1=math.ceil(T_RUN / h) * h, dt=h,
                 solver="baoab", generator=gen).final[0]  # fmt: skip
    result.data["phase"] = dict(h=h, x=z[:, 0].tolist(), v=z[:, 1].tolist())
    return result


def plot(result: CheckResult):
    d = result.data
    fig, (ax0, ax1, ax2) = figure(ncols=3)
    ph = d["phase"]
    ax0.plot(ph["x"], ph["v"], ".", ms=1.5, alpha=0.5, label=f"BAOAB, h = {ph['h']:g}")
    t = np.linspace(0, 2 * np.pi, 200)
    sx, sv = stationary_variances("baoab", d["a"], ph["h"], d["beta"])
    for k in (1, 2, 3):
        ax0.plot(k * math.sqrt(sx) * np.cos(t), k * math.sqrt(sv) * np.sin(t), "k-", lw=0.7)
    ax0.plot(k * math.sqrt(d["beta"] / d["a"]) * np.cos(t), k * math.sqrt(d["beta"]) * np.sin(t), "C3--", lw=0.7,
             label="Gibbs 3σ")  # fmt: skip
    ax0.set(xlabel="x", ylabel="v", title="phase-space law (1, 2, 3σ of the chain)")
    ax0.legend(fontsize=7)
    hs = np.linspace(0.05, 1.6, 200)
    for ax, key, cont, title in (
        (ax1, "x", d["beta"] / d["a"], "Var x / (β/a)"),
        (ax2, "v", d["beta"], "Var v / β"),
    ):
        for i, scheme in enumerate(SPLITTINGS):
            rows = d["rows"][scheme]
            pred = [
                stationary_variances(scheme, d["a"], h, d["beta"])[0 if key == "x" else 1] / cont for h in hs
            ]
            ax.plot(hs, pred, "-", color=f"C{i}", lw=1, label=f"{scheme.upper()} exact")
            h = np.array([r["h"] for r in rows])
            val = np.array([r[f"var_{key}"] for r in rows]) / cont
            err = Z * np.array([r[f"ref_{key}"] for r in rows]) * math.sqrt(2 / d["n"]) / cont
            ax.errorbar(h + 0.01 * (i - 1), val, err, fmt="o", ms=4, color=f"C{i}", capsize=2)
        ax.axhline(1.0, color="0.5", ls=":", lw=1, label="continuous")
        ax.set(xlabel="h (a = 1)", ylabel=title, title=f"stationary {title}: measured ±5 SE")
        ax.legend(fontsize=7)
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
