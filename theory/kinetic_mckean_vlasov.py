"""Kinetic check 3 — the linear kinetic McKean–Vlasov system in closed form, and its convergence in M.

System: dX = V dt, dV = −aX dt − k(X − E X) dt − γV dt + sqrt(2γβ) dW, simulated by M particles with
``KineticMeanFieldLangevin(Quadratic(a), QuadraticInteraction(k), γ, β)`` and BAOAB (step h).

Formulas (d = 1). The law stays Gaussian. Its mean (m, u) = (E X, E V) is the damped oscillator
d(m, u)/dt = C_a (m, u), C_λ = [[0, 1], [−λ, −γ]], so (m, u)(t) = e^{C_a t}(m0, u0); the centred part has
stiffness a + k and covariance Σ(t) = Σ∞ + e^{C_{a+k} t}(Σ0 − Σ∞)e^{C_{a+k}ᵀ t} with Σ∞ = diag(β/(a+k), β)
(Σ∞ solves CΣ + ΣCᵀ + diag(0, 2γβ) = 0). At finite M the centre of mass (x̄, v̄) is the same linear system with
stiffness a and noise 2γβ/M, the spread (x_i − x̄, v_i − v̄) one with stiffness a + k and noise 2γβ(M−1)/M;
both are independent, so the stationary Var x_i = β/(aM) + β(M−1)/((a+k)M) = s∞ + βk/(a(a+k)M), as in the
overdamped system (the position marginal of the Gibbs law is the same). The BAOAB chain is linear too: its
exact law follows from Σ ← LΣLᵀ + Q per mode (``kinetic_harmonic.step_matrices``), and since BAOAB's
position law is exact for quadratic potentials, its stationary Var x_i is exactly the continuous one.

Convergence in M (``meanfield.studies.in_memory.convergence_in_m``, exact 1-D W2² to N(0, s∞)): at stationarity
x_i = x̄ + sqrt(s∞)(ξ_i − ξ̄) with x̄ ~ N(0, β/(aM)) independent, so (``propagation_of_chaos``)
E W2²(μ_M, N(0, s∞)) = β/(aM) + s∞(M−1)/M + s∞ − 2 s∞ G(M), with G(M) the order-statistic gain; ≍ log log M/M.

Measured: (1) relaxation: B replicas of M particles from N(m0, s0) positions and N(0, β) velocities, both
recentred (x̄0 = m0, v̄0 = 0 exactly); mean, Var x and Var v at t = 1 and 3 against the exact BAOAB chain
law (5·SE) and the closed form (5·SE + |chain − closed form|, the O(h²) and O(1/M) bias, stated). (2)
stationary W2² at M = 8…512 from the Gibbs start run T = 12 (transient ≤ e^{−12} of an O(1/M) deviation),
the log-log slope against the exact curve's.

Tolerance: 5·SE (false-failure 5.7e-7 per row), SE over independent replicas; slope SE = (95 % bootstrap
width)/(2·1.96). Power (fast, measured in a trial run): Var x(t) to SE ≈ 0.7 % (detects 3.3 %), E W2² per M
to ≈ 5 % (detects 25 %), the slope to ≈ 0.016 (detects 0.08). Negative controls (expect="differ"): Var x(1) against the law
without interaction (stiffness a), and the slope against −½. BROKEN: the simulation drops the interaction.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from scipy.linalg import expm

from meanfield import simulate
from meanfield.drift.phase_space import KineticMeanFieldLangevin, pair, positions, velocities
from meanfield.drift.potentials import Quadratic, QuadraticInteraction
from meanfield.metrics.wasserstein import Normal
from meanfield.studies.in_memory import convergence_in_m
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z, mean_se
from meanfield.studies.validation import CheckResult, load_check

CLAIM = "Linear kinetic McKean–Vlasov: damped-oscillator mean, Σ(t) → diag(β/(a+k), β), E W2²(μ_M, ρ) ≍ log log M/M"
BROKEN = dict(simulated_k=0.0)  # the simulation drops the interaction; the references keep k
PRESETS = {
    "fast": dict(M=500, B=100, Ms=(8, 32, 128, 512), reps=300),
    "full": dict(M=1000, B=500, Ms=(8, 32, 128, 512, 2048), reps=3000),
}
A, K, BETA, GAMMA = 1.0, 2.0, 0.5, 1.0
M0, S0 = 1.0, 2.0
H = 0.1  # relaxation step: BAOAB's velocity bias h²(a+k)/4 = 0.75 %
H_STAT, T_STAT = 0.5, 12.0  # stationary runs: positions exact at any stable h
TIMES = (1.0, 3.0)
S_INF = BETA / (A + K)


def _harmonic():
    return load_check(Path(__file__).with_name("kinetic_harmonic.py"))


def _chaos():
    return load_check(Path(__file__).with_name("propagation_of_chaos.py"))


def generator_matrix(lam: float) -> np.ndarray:
    return np.array([[0.0, 1.0], [-lam, -GAMMA]])


def mean_limit(t: float) -> np.ndarray:
    """(E X, E V)(t) = e^{C_a t}(m0, 0)."""
    return expm(generator_matrix(A) * t) @ np.array([M0, 0.0])


def cov_limit(t: float, lam: float = A + K, s0: float = S0) -> np.ndarray:
    """Σ(t) = Σ∞ + e^{Ct}(Σ0 − Σ∞)e^{Cᵀt} of the centred part (stiffness λ), Σ0 = diag(s0, β)."""
    E = expm(generator_matrix(lam) * t)
    inf = np.diag([BETA / lam, BETA])
    return inf + E @ (np.diag([s0, BETA]) - inf) @ E.T


def chain_law(n: int, M: float, lam_k: float = K) -> tuple[np.ndarray, np.ndarray]:
    """Exact BAOAB chain after n steps of h = H: the mean (E x, E v) and Cov of (x_i, v_i) (centre + spread)."""
    hm = _harmonic()
    La, Qa = hm.step_matrices("baoab", A, H, GAMMA, BETA)
    Ls, Qs = hm.step_matrices("baoab", A + lam_k, H, GAMMA, BETA)
    mean = np.linalg.matrix_power(La, n) @ np.array([M0, 0.0])
    frac = 1.0 if math.isinf(M) else (M - 1) / M
    centre, spread = np.zeros((2, 2)), np.diag([S0, BETA]) * frac
    for _ in range(n):
        centre = La @ centre @ La.T + (0.0 if math.isinf(M) else Qa / M)
        spread = Ls @ spread @ Ls.T + Qs * frac
    return mean, centre + spread


def stationary_w2sq(M: int) -> float:
    """E W2²(μ_M, N(0, s∞)) of the stationary M-particle law (positions: x̄ ~ N(0, β/(aM)), spread s∞)."""
    return BETA / (A * M) + S_INF * (M - 1) / M + S_INF - 2 * S_INF * _chaos().order_statistic_gain(M)


def run(preset: str = "fast", *, simulated_k: float | None = None) -> CheckResult:
    """Run the check; ``simulated_k`` replaces k in the simulation only (a broken input that must fail)."""
    p = PRESETS[preset]
    result = CheckResult("kinetic_mckean_vlasov", CLAIM, preset=preset)
    k_sim = K if simulated_k is None else simulated_k
    system = KineticMeanFieldLangevin(Quadratic(A), QuadraticInteraction(k_sim), friction=GAMMA, beta=BETA)
    gen = torch.Generator().manual_seed(2929)

    # 1. relaxation from N(m0, s0) × N(0, β), recentred
    M, B = p["M"], p["B"]
    zx = torch.randn(B, M, 1, generator=gen, dtype=torch.float64)  # (B, M, 1)
    zv = torch.randn(B, M, 1, generator=gen, dtype=torch.float64)  # (B, M, 1)
    x0 = M0 + math.sqrt(S0) * (zx - zx.mean(1, keepdim=True))  # (B, M, 1), x̄0 = m0
    v0 = math.sqrt(BETA) * (zv - zv.mean(1, keepdim=True))  # (B, M, 1), v̄0 = 0
    save = round(0.5 / H)
    traj = simulate(system, pair(x0, v0), t1=TIMES[-1], dt=H, solver="baoab", save_every=save, generator=gen)
    curves = dict(t=traj.times.tolist(), m=[], s=[], w=[])
    for z in traj.states:  # (B, M, 2)
        x, v = positions(z), velocities(z)
        m = mean_se(x.mean(dim=(1, 2)))
        curves["m"].append(m.value)
        curves["s"].append(mean_se((x - m.value).square().mean(dim=(1, 2))).value)
        curves["w"].append(mean_se(v.square().mean(dim=(1, 2))).value)
    for t in TIMES:
        j = int(np.argmin(np.abs(traj.times.numpy() - t)))
        n = int(traj.steps[j])
        x, v = positions(traj.states[j]), velocities(traj.states[j])
        m = mean_se(x.mean(dim=(1, 2)))
        s = mean_se((x - m.value).square().mean(dim=(1, 2)))
        w = mean_se(v.square().mean(dim=(1, 2)))  # E v = 0 up to the mean's O(e^{−γt/2}) part, kept below
        cm, cS = chain_law(n, M)
        lm, lS = mean_limit(t), cov_limit(t)
        rows = (
            ("E x", m, cm[0], lm[0]),
            ("Var x", s, cS[0, 0], lS[0, 0]),
            ("E v²", w, cS[1, 1] + cm[1] ** 2, lS[1, 1] + lm[1] ** 2),
        )
        for label, est, chain, limit in rows:
            result.add(f"{label}(t), t={t:g} [BAOAB chain law]", est.value, chain, Z * est.se, detectable=Z * est.se,
                       note=f"5·SE; exact linear recursion, n = {n}, M = {M}")  # fmt: skip
            bias = abs(chain - limit)
            result.add(f"{label}(t), t={t:g} [closed form]", est.value, limit, Z * est.se + bias, detectable=Z * est.se,
                       note=f"5·SE + O(h²) and O(1/M) bias |chain − closed form| = {bias:.2g}")  # fmt: skip
        if t == TIMES[0]:
            no_k = cov_limit(t, lam=A)[0, 0]
            result.add(f"negative control: Var x({t:g}) vs the law with k = 0", s.value, no_k, Z * s.se + abs(cS[0, 0] - lS[0, 0]),
                       expect="differ", note="stiffness a instead of a + k: must be rejected")  # fmt: skip
    curves["chain"] = [chain_law(int(n), M)[1][0, 0] for n in traj.steps]

    # 2. convergence in M at stationarity (study machinery)
    Ms, reps = p["Ms"], p["reps"]

    def particles(M: int, n: int) -> torch.Tensor:
        x0 = math.sqrt(S_INF) * torch.randn(n, M, 1, generator=gen, dtype=torch.float64)  # (n, M, 1)
        v0 = math.sqrt(BETA) * torch.randn(n, M, 1, generator=gen, dtype=torch.float64)  # (n, M, 1)
        steps = round(T_STAT / H_STAT)
        z = simulate(system, pair(x0, v0), t1=steps * H_STAT, dt=H_STAT, solver="baoab", generator=gen).final
        return positions(z).contiguous()  # (n, M, 1)

    study = convergence_in_m(particles, Ms, reps=reps, reference=Normal(0.0, math.sqrt(S_INF)), generator=gen,
                             progress=False)  # fmt: skip
    exact = np.array([stationary_w2sq(M) for M in Ms])
    for i, M in enumerate(Ms):
        se = float(study.se[i])
        result.add(f"E W2²(μ_M, N(0, s∞)), M={M} [exact stationary law]", float(study.mean[i]), exact[i], Z * se,
                   detectable=Z * se, note="5·SE; β/(aM) + s∞(M−1)/M + s∞ − 2s∞G(M)")  # fmt: skip
    slope_exact = float(np.polyfit(np.log(Ms), np.log(exact), 1)[0])
    lo, hi = study.slope_ci
    se = (hi - lo) / (2 * 1.959964)
    result.add("slope of E W2² in M [exact curve]", study.slope, slope_exact, Z * se, detectable=Z * se,
               note=f"5·SE(bootstrap), 95 % CI [{lo:.3f}, {hi:.3f}]; −1 up to log log M")  # fmt: skip
    result.add("negative control: slope vs −1/2", study.slope, -0.5, Z * se, expect="differ",
               note="the rate of E W2 (not W2²) must be rejected")  # fmt: skip
    result.data = dict(
        a=A, k=K, beta=BETA, gamma=GAMMA, M=M, B=B, h=H, curves=curves,
        Ms=list(Ms), w2=study.mean.tolist(), w2_se=study.se.tolist(), w2_exact=exact.tolist(),
        slope=study.slope, slope_ci=list(study.slope_ci),
    )  # fmt: skip
    return result


def plot(result: CheckResult):
    d = result.data
    fig, (ax1, ax2) = figure(ncols=2)
    c = d["curves"]
    t = np.array(c["t"])
    fine = np.linspace(0, t[-1], 200)
    ax1.plot(fine, [mean_limit(s)[0] for s in fine], "k-", lw=1, label="E X: e^{C_a t}(m0, 0)")
    ax1.plot(fine, [cov_limit(s)[0, 0] for s in fine], "k--", lw=1, label="Var X: Σ(t)")
    ax1.plot(fine, [cov_limit(s)[1, 1] + mean_limit(s)[1] ** 2 for s in fine], "k:", lw=1, label="E V²")
    ax1.plot(t, c["m"], "o", ms=3, label="E x (particles)")
    ax1.plot(t, c["s"], "s", ms=3, label="Var x")
    ax1.plot(t, c["w"], "^", ms=3, label="E v²")
    ax1.set(xlabel="t", title=f"kinetic McKean–Vlasov\nBAOAB h = {d['h']}, M = {d['M']}, B = {d['B']}")
    ax1.legend(fontsize=7)
    Ms = np.array(d["Ms"])
    ax2.errorbar(
        Ms, d["w2"], Z * np.array(d["w2_se"]), fmt="o", ms=4, capsize=3, label="convergence_in_m (±5 SE)"
    )
    ax2.plot(Ms, d["w2_exact"], "k-", lw=1, label="exact stationary law")
    lo, hi = d["slope_ci"]
    ax2.set(xscale="log", yscale="log", xlabel="M", ylabel="E W2²(μ_M, N(0, s∞))",
            title=f"convergence in M (convergence_in_m)\nslope {d['slope']:.3f}, 95 % CI [{lo:.3f}, {hi:.3f}]")  # fmt: skip
    ax2.set_xticks(Ms, [str(m) for m in Ms])
    ax2.set_xticks([], minor=True)
    ax2.legend(fontsize=7)
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
