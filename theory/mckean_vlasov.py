"""Check 4 — linear McKean–Vlasov: closed-form mean and variance, the free energy decreasing, finite-M excess.

System: dX = −aX dt − k(X − E X) dt + sqrt(2β) dW, simulated by M particles
dx_i = −a x_i dt − k(x_i − x̄) dt + sqrt(2β) dW_i (``MeanFieldLangevin(Quadratic(a), QuadraticInteraction(k), β)``).

Formulas (mean-field limit, d = 1; e.g. Carrillo, McCann & Villani 2003, §2; Malrieu 2001):
    m(t) = m0·e^{−at},   s(t) = s∞ + (s0 − s∞)·e^{−2(a+k)t},   s∞ = β/(a+k),
and the law stays Gaussian N(m(t), s(t)). Its free energy
    F(m, s) = ∫V dρ + ½∬W(x−y) dρ dρ + β∫ρ log ρ = a/2·(m² + s) + k/2·s − β/2·log(2πe·s)
decreases along the flow: dF/dt = −a²m² − (a+k)²(s − s∞)²/s ≤ 0, to F(0, s∞) = β/2 − β/2·log(2πe·s∞).
At finite M the centre of mass is an OU process of variance β/(aM) and the spread x_i − x̄ has variance
β(M−1)/((a+k)M), so the stationary Var x_i = s∞ + c with c = βk/(a(a+k)M).

Exact law of the Euler–Maruyama chain (step η): x̄ and y_i = x_i − x̄ are independent AR(1) chains,
x̄' = (1 − ηa)x̄ + sqrt(2βη)ξ̄ (Var ξ̄ = 1/M) and y_i' = (1 − η(a+k))y_i + sqrt(2βη)(ξ_i − ξ̄)
(Var = (M−1)/M): with ρ = 1 − ηλ and v ← ρ²v + q the variance after n steps is ρ^{2n}v0 + q(1 − ρ^{2n})/(1 − ρ²).
Every measured number is compared with this exact law (tolerance 5·SE), and with the continuous formula with
tolerance 5·SE + |chain − continuous| (the O(η) discretisation bias, e.g. s∞ → s∞/(1 − η(a+k)/2), and the
O(1/M) excess, both computed exactly and stated in the row's note).

Tolerance: z·SE with z = 5 (false-failure rate 5.7e-7 per row), SE from independent replicas (B axis).
The relaxation run starts from N(m0, s0) particles recentred so that x̄_0 = m0 in every replica (the
chain law above with Var x̄_0 = 0; the continuous s(t) then differs by the O(s0/M) start, inside the bias).

Power (fast preset, M = 1000, B = 100): the variance at t is measured to ≈0.5 % (SE), so a 2.5 % error is
detected, the mean to ≈0.003 (detects 0.015 absolute); the finite-M excess c (100 % of s∞ at M = 2, 20 % at
M = 10) is measured to SE ≈ 1 % of c at M = 2 and ≈ 3 % at M = 10 (detects 5 % and 15 % of c).
Negative controls (expect="differ"): the law without interaction (rate 2a, limit β/a) at t = 1, and zero
finite-M excess at M = 2. BROKEN: the simulation drops the interaction (k = 0), references keep k.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import torch

from meanfield import MeanFieldLangevin, simulate
from meanfield.drift.potentials import Quadratic, QuadraticInteraction
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z, mean_se
from meanfield.studies.validation import CheckResult

CLAIM = (
    "Linear McKean–Vlasov: m0·e^{−at}, s(t) → β/(a+k), free energy decreasing, finite-M excess βk/(a(a+k)M)"
)
BROKEN = dict(simulated_k=0.0)  # the simulation drops the interaction; the references keep k
PRESETS = {
    "fast": dict(M=1000, B=100, save_every=20, Ms=(2, 10), n_stat=100_000),
    "full": dict(M=1000, B=500, save_every=40, Ms=(2, 5, 10, 50), n_stat=1_000_000),
}
A, K, BETA = 1.0, 2.0, 0.5  # confinement a, interaction k, temperature β
M0, S0 = 1.0, 2.0  # initial law N(m0, s0)
ETA, T1 = 0.005, 6.0  # step and horizon of the relaxation run (e^{−aT} = 2.5e-3: F within 1e-5 of F∞)
ETA_STAT, N_STAT = 0.02, 400  # stationary runs: (1 − ηa)^{2n} = 0.98^800 ≈ 1e-7
TIMES = (0.2, 1.0)  # times of the tabulated rows (multiples of save_every·η in both presets)


def s_inf() -> float:
    return BETA / (A + K)


def mean_limit(t):
    return M0 * np.exp(-A * np.asarray(t))


def var_limit(t):
    return s_inf() + (S0 - s_inf()) * np.exp(-2 * (A + K) * np.asarray(t))


def free_energy(m, s):
    """F(m, s) = a/2(m² + s) + k/2·s − β/2·log(2πe·s) of N(m, s) (d = 1)."""
    m, s = np.asarray(m, dtype=float), np.asarray(s, dtype=float)
    return 0.5 * A * (m**2 + s) + 0.5 * K * s - 0.5 * BETA * np.log(2 * math.pi * math.e * s)


def _ar1(rho: float, v0: float, q: float, n):
    """Variance after n steps of v ← ρ²v + q from v0."""
    r = rho ** (2 * np.asarray(n, dtype=float))
    return r * v0 + q * (1 - r) / (1 - rho**2)


def chain_mean(n, eta: float):
    return M0 * (1 - eta * A) ** np.asarray(n, dtype=float)


def chain_var(n, eta: float, M: float, s0: float):
    """Exact Var x_i of the EM chain after n steps (M = inf: the limit chain).

    The start has x̄_0 = m0 exactly and y_i = x_i − x̄ Gaussian with Var y_i = s0(M − 1)/M (i.i.d. N(m0, s0)
    particles recentred on m0), so Var x̄ starts at 0.
    """
    centre = 0.0 if math.isinf(M) else _ar1(1 - eta * A, 0.0, 2 * BETA * eta / M, n)
    frac = 1.0 if math.isinf(M) else (M - 1) / M
    spread = _ar1(1 - eta * (A + K), s0 * frac, 2 * BETA * eta * frac, n)
    return centre + spread


def run(preset: str = "fast", *, simulated_k: float | None = None) -> CheckResult:
    """Run the check; ``simulated_k`` replaces k in the simulation only (a broken input that must fail)."""
    p = PRESETS[preset]
    result = CheckResult("mckean_vlasov", CLAIM, preset=preset)
    k_sim = K if simulated_k is None else simulated_k
    system = MeanFieldLangevin(Quadratic(A), QuadraticInteraction(k_sim), beta=BETA)
    gen = torch.Generator().manual_seed(4)

    # --- relaxation from N(m0, s0): B replicas of M particles ---------------------------------------------
    M, B = p["M"], p["B"]
    z = torch.randn(B, M, 1, generator=gen, dtype=torch.float64)  # (B, M, 1)
    # recentred: x̄_0 = m0 exactly, y_i = x_i − x̄ Gaussian with Var y_i = s0(M−1)/M
    x0 = M0 + math.sqrt(S0) * (z - z.mean(1, keepdim=True))  # (B, M, 1)
    traj = simulate(system, x0, t1=T1, dt=ETA, save_every=p["save_every"], generator=gen)
    times, steps = traj.times.numpy(), traj.steps.numpy()
    m_hat, m_se, s_hat, s_se = [], [], [], []
    for x in traj.states:  # (B, M, 1)
        mean = mean_se(x.mean(dim=(1, 2)))  # replicas are independent
        var = mean_se((x - mean.value).square().mean(dim=(1, 2)))  # Var x_i (centre-of-mass part included)
        m_hat.append(mean.value), m_se.append(mean.se), s_hat.append(var.value), s_se.append(var.se)
    m_hat, m_se, s_hat, s_se = map(np.array, (m_hat, m_se, s_hat, s_se))
    m_ch, s_ch = chain_mean(steps, ETA), chain_var(steps, ETA, M, S0)
    m_ct, s_ct = mean_limit(times), var_limit(times)
    for t in TIMES:
        j = int(np.argmin(np.abs(times - t)))
        n = int(steps[j])
        result.add(f"E x(t), t={t:g} [EM chain]", m_hat[j], m_ch[j], Z * m_se[j], detectable=Z * m_se[j],
                   note="5·SE; exact: m0(1−ηa)^n")  # fmt: skip
        bias = abs(m_ch[j] - m_ct[j])
        result.add(f"E x(t), t={t:g} [m0·e^(−at)]", m_hat[j], m_ct[j], Z * m_se[j] + bias,
                   detectable=Z * m_se[j], note=f"5·SE + O(η) bias |m0(1−ηa)^n − m0e^(−at)| = {bias:.2g}")  # fmt: skip
        result.add(f"Var x(t), t={t:g} [EM chain]", s_hat[j], s_ch[j], Z * s_se[j], detectable=Z * s_se[j],
                   note=f"5·SE; exact AR(1) law of x̄ and x_i − x̄ (n = {n}, M = {M})")  # fmt: skip
        bias = abs(s_ch[j] - s_ct[j])
        result.add(f"Var x(t), t={t:g} [s(t)]", s_hat[j], s_ct[j], Z * s_se[j] + bias, detectable=Z * s_se[j],
                   note=f"5·SE + exact O(η) + O(1/M) bias |chain − s(t)| = {bias:.2g}")  # fmt: skip
    j1 = int(np.argmin(np.abs(times - 1.0)))
    no_interaction = BETA / A + (S0 - BETA / A) * math.exp(-2 * A * times[j1])
    result.add("negative control: Var x(1) vs law with k = 0", s_hat[j1], no_interaction,
               Z * s_se[j1] + abs(s_ch[j1] - s_ct[j1]), expect="differ",
               note="β/a + (s0 − β/a)e^(−2at): must be rejected")  # fmt: skip

    # --- free energy along the flow ------------------------------------------------------------------------
    F_hat = free_energy(m_hat, s_hat)
    dF_dm, dF_ds = A * m_hat, 0.5 * (A + K) - 0.5 * BETA / s_hat
    F_se = np.abs(dF_dm) * m_se + np.abs(dF_ds) * s_se  # delta method, no cancellation assumed
    F_ch, F_ct, F_inf = free_energy(m_ch, s_ch), free_energy(m_ct, s_ct), float(free_energy(0.0, s_inf()))
    j = int(np.argmin(np.abs(times - TIMES[0])))
    bias = abs(F_ch[j] - F_ct[j])
    result.add(f"F(m̂, ŝ)(t), t={times[j]:g} [F(m(t), s(t))]", F_hat[j], F_ct[j], Z * F_se[j] + bias,
               detectable=Z * F_se[j], note=f"5·SE (delta method) + bias |F(chain) − F(limit)| = {bias:.2g}")  # fmt: skip
    bias = abs(F_ch[-1] - F_inf)
    result.add(f"F(m̂, ŝ)(T), T={T1:g} [F(0, s∞)]", F_hat[-1], F_inf, Z * F_se[-1] + bias, detectable=Z * F_se[-1],
               note=f"5·SE + bias |F(chain at T) − F(0, s∞)| = {bias:.2g} (O(η) and O(1/M))")  # fmt: skip
    rise = np.diff(F_hat)  # one-sided: F̂ may only increase by noise
    rise_tol = Z * (F_se[1:] + F_se[:-1])
    worst = int(np.argmax(rise - rise_tol))
    result.add("max increase of F(m̂, ŝ) between saved times", max(0.0, rise[worst]), 0.0, rise_tol[worst],
               detectable=rise_tol[worst], note="one-sided, clipped at 0; tol 5·(SE_j + SE_j+1) at the worst step")  # fmt: skip
    fine = np.linspace(0.0, T1, 20001)
    F_fine = free_energy(mean_limit(fine), var_limit(fine))
    result.add("closed form: max increase of F(m(t), s(t))", max(0.0, float(np.diff(F_fine).max())), 0.0, 1e-12,
               note=f"dF/dt = −a²m² − (a+k)²(s−s∞)²/s on 2e4 points; F(T) − F∞ = {F_fine[-1] - F_inf:.1e}")  # fmt: skip

    # --- finite-M excess variance at stationarity ------------------------------------------------------------
    excess = []
    for M_s in p["Ms"]:
        B_s = p["n_stat"] // M_s
        x = torch.zeros(B_s, M_s, 1, dtype=torch.float64)
        x = simulate(system, x, t1=N_STAT * ETA_STAT, dt=ETA_STAT, generator=gen).final  # (B, M, 1)
        var = mean_se((x - x.mean()).square().mean(dim=(1, 2)))
        base = float(chain_var(N_STAT, ETA_STAT, math.inf, 0.0))  # the M = ∞ chain: s∞/(1 − η(a+k)/2)
        c_hat, c_ch = var.value - base, float(chain_var(N_STAT, ETA_STAT, M_s, 0.0)) - base
        c_ct = BETA * K / (A * (A + K) * M_s)
        excess.append(dict(M=M_s, value=c_hat, se=var.se, chain=c_ch, limit=c_ct))
        result.add(f"excess Var − s∞, M={M_s} [EM chain]", c_hat, c_ch, Z * var.se, detectable=Z * var.se,
                   note=f"5·SE; exact stationary chain, s∞ of the M = ∞ chain = {base:.5g}")  # fmt: skip
        bias = abs(c_ch - c_ct)
        result.add(f"excess Var − s∞, M={M_s} [βk/(a(a+k)M)]", c_hat, c_ct, Z * var.se + bias,
                   detectable=Z * var.se, note=f"5·SE + O(η) bias {bias:.2g}")  # fmt: skip
    first = excess[0]
    result.add(f"negative control: excess at M={first['M']} vs 0", first["value"], 0.0, Z * first["se"],
               expect="differ", note="no finite-M effect: must be rejected")  # fmt: skip

    result.data = dict(
        a=A, k=K, beta=BETA, m0=M0, s0=S0, eta=ETA, M=M, B=B,
        times=times.tolist(), m_hat=m_hat.tolist(), m_se=m_se.tolist(), s_hat=s_hat.tolist(), s_se=s_se.tolist(),
        m_chain=m_ch.tolist(), s_chain=s_ch.tolist(), F_hat=F_hat.tolist(), F_se=F_se.tolist(),
        F_chain=F_ch.tolist(), F_inf=F_inf, excess=excess, eta_stat=ETA_STAT,
    )  # fmt: skip
    return result


def plot(result: CheckResult):
    d = result.data
    fig, (ax1, ax2, ax3) = figure(ncols=3)
    t = np.array(d["times"])
    fine = np.linspace(0, t[-1], 400)
    ax1.plot(fine, mean_limit(fine), "k-", lw=1, label="m0·e^(−at)")
    ax1.plot(fine, var_limit(fine), "k--", lw=1, label="s(t)")
    ax1.errorbar(t, d["m_hat"], Z * np.array(d["m_se"]), fmt="o", ms=3, label="mean (±5 SE)")
    ax1.errorbar(t, d["s_hat"], Z * np.array(d["s_se"]), fmt="s", ms=3, label="variance (±5 SE)")
    ax1.axhline(d["beta"] / (d["a"] + d["k"]), color="0.6", lw=0.8, ls=":", label="s∞ = β/(a+k)")
    ax1.set(xlabel="t", title=f"mean and variance (M = {d['M']}, B = {d['B']})")
    ax1.legend()
    ax2.plot(
        fine, free_energy(mean_limit(fine), var_limit(fine)) - d["F_inf"], "k-", lw=1, label="closed form"
    )
    ax2.errorbar(t, np.array(d["F_hat"]) - d["F_inf"], Z * np.array(d["F_se"]), fmt="o", ms=3,
                 label="F(m̂, ŝ) (±5 SE)")  # fmt: skip
    ax2.set_yscale("symlog", linthresh=1e-3)
    ax2.set(
        xlabel="t", ylabel="F − F(0, s∞)", title="free energy (symlog)", xlim=(0, t[-1]), ylim=(-2e-3, None)
    )
    ax2.legend()
    ex = d["excess"]
    Ms = np.array([e["M"] for e in ex])
    ax3.errorbar(Ms, [e["value"] for e in ex], [Z * e["se"] for e in ex], fmt="o", label="measured (±5 SE)")
    grid = np.geomspace(Ms.min() / 1.3, Ms.max() * 1.3, 50)
    ax3.plot(grid, d["beta"] * d["k"] / (d["a"] * (d["a"] + d["k"]) * grid), "k-", lw=1, label="βk/(a(a+k)M)")
    ax3.plot(Ms, [e["chain"] for e in ex], "x", color="C3", label=f"EM chain, η = {d['eta_stat']}")
    ax3.set(xlabel="M", ylabel="Var(x_i) − s∞", xscale="log", yscale="log", title="finite-M excess variance")
    ax3.set_xticks(Ms, [str(m) for m in Ms])
    ax3.xaxis.set_minor_formatter(plt.NullFormatter())
    ax3.legend()
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
