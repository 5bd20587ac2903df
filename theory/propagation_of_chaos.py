"""Check 5 — propagation of chaos: the law of M particles converges to the mean-field limit at the i.i.d. rate,
plus an O(1/M) interaction excess βk/(a(a+k)M).

System: the linear McKean–Vlasov model dx_i = −a x_i dt − k(x_i − x̄) dt + sqrt(2β) dW_i, d = 1, whose
mean-field limit has the stationary law ρ = N(0, s∞), s∞ = β/(a+k) (closed form; see check 4). Particles start
i.i.d. from ρ and run for a time T by Euler–Maruyama; ``meanfield.studies.in_memory.convergence_in_m`` measures
E W2²(μ_M, ρ) over M (exact 1-D W2² to a Gaussian, ``wasserstein_to_law``), and again for M i.i.d. samples
of ρ (the baseline a system without interaction would reach).

Theory (exact, no simulation):
- I.i.d. samples: with ordered standard normals z_(1) ≤ … ≤ z_(M) and J_i = ∫_{(i−1)/M}^{i/M} Φ^{-1}(u) du,
  E W2²(μ_M, N(0, s)) = 2s(1 − G(M)), G(M) = Σ_i E z_(i)·J_i, where E z_(i) is integrated numerically from the
  order-statistic density and J_i = φ(Φ^{-1}((i−1)/M)) − φ(Φ^{-1}(i/M)). In d = 1 this is ≍ log log M / M
  (Bobkov & Ledoux 2019, *One-dimensional empirical measures, order statistics, and Kantorovich transport
  distances*, Mem. AMS, §6.4): the log-log slope is −1 up to that log factor (−0.941 over M = 8…512 for
  i.i.d. samples, −0.960 for the particles).
- Particles (exact law of the EM chain, check 4): x_i = x̄ + y_i with x̄ ~ N(0, v_c(n)) independent of the spread
  y = sqrt(S(n))·(ξ − ξ̄), ξ i.i.d. N(0, 1), where v_c and S are the AR(1) variances of the centre (rate a,
  noise 2βη/M) and of the spread (rate a+k, noise 2βη). Since the order statistics of y are those of ξ shifted,
  E W2²(μ_M, N(0, s)) = v_c + S(M−1)/M + s − 2·sqrt(s·S)·G(M).
- Interaction excess: E W2²(particles, ρ) − E W2²(i.i.d., ρ) = v_c − s∞/M + [S(M−1)/M − s∞(M−1)/M −
  2G·(sqrt(s∞S) − s∞)]; at stationarity of the continuous dynamics (S = s∞, v_c = β/(aM)) this is exactly
  c = β/(aM) − β/((a+k)M) = βk/(a(a+k)M) > 0 per dimension (d·c in R^d, each coordinate independent): the
  particles' law is farther from ρ than i.i.d. samples, only through their centre of mass. The bracket is the
  O(η) spread bias ≈ s∞(η(a+k)/4)² (M-independent), stated in the rows' notes.

Tolerance: 5·SE (false-failure rate 5.7e-7 per row), SE over independent replicas; the difference of the two
studies uses sqrt(SE₁² + SE₂²) (independent draws). Slopes: 5·SE with SE = (width of the 95 % bootstrap
interval of ``convergence_in_m``)/(2·1.96). Power (fast, 1000 replicas): E W2² per M to SE ≈ 2–3 % (detects
10–13 %); the excess M·(difference) ≈ 0.33 is ≈ 14 SE at each M and 28 SE pooled (c is ≈ 80 % of the i.i.d.
E W2² at M = 8, 60 % at M = 512); the slopes to SE ≈ 0.006–0.009.
Negative controls (expect="differ"): the pooled excess against 0 (no interaction effect), and the slope
against −½ (the rate of E W2, not W2²). BROKEN: the simulation drops the interaction (k = 0).
"""

from __future__ import annotations

import functools
import math

import matplotlib.pyplot as plt
import numpy as np
import torch
from scipy import special

from meanfield import MeanFieldLangevin, simulate
from meanfield.drift.potentials import Quadratic, QuadraticInteraction
from meanfield.metrics.wasserstein import Normal
from meanfield.studies.in_memory import convergence_in_m
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z
from meanfield.studies.validation import CheckResult

CLAIM = (
    "Propagation of chaos: E W2²(μ_M, ρ) ≍ log log M/M as for i.i.d. samples, plus the excess βk/(a(a+k)M)"
)
BROKEN = dict(simulated_k=0.0)  # the simulation drops the interaction; the references keep k
PRESETS = {
    "fast": dict(Ms=(8, 32, 128, 512), reps=1000),
    "full": dict(Ms=(8, 32, 128, 512, 2048), reps=10_000),
}
A, K, BETA = 1.0, 2.0, 0.5
S_INF = BETA / (A + K)  # stationary variance of the mean-field limit
ETA, T1 = (
    0.02,
    4.0,
)  # EM step and run time from ρ (the centre's transient e^{−2aT} = 3e-4 is in the exact law)
C_M = BETA * K / (A * (A + K))  # M·c: the interaction excess times M


@functools.cache
def order_statistic_gain(M: int) -> float:
    """G(M) = Σ_i E z_(i)·∫_{(i−1)/M}^{i/M} Φ^{-1}(u) du for M i.i.d. N(0, 1) (trapezoid on z ∈ [−10, 10])."""
    z = np.linspace(-10.0, 10.0, 8001)
    log_phi = -0.5 * z**2 - 0.5 * math.log(2 * math.pi)
    log_lo, log_hi = special.log_ndtr(z), special.log_ndtr(-z)
    half = (M + 1) // 2
    mean = np.empty(M)
    for start in range(0, half, 256):
        i = np.arange(start + 1, min(half, start + 256) + 1)[:, None]  # ranks, lower half
        log_c = special.gammaln(M + 1) - special.gammaln(i) - special.gammaln(M - i + 1)
        density = np.exp(log_c + (i - 1) * log_lo + (M - i) * log_hi + log_phi)  # (chunk, z) of z_(i)
        mean[start : start + i.shape[0]] = np.trapezoid(z * density, z, axis=1)
    mean[M - half :] = -mean[:half][::-1] if M % 2 == 0 else np.concatenate([[0.0], -mean[: half - 1][::-1]])
    q = special.ndtri(np.arange(M + 1) / M)
    phi = np.where(np.isfinite(q), np.exp(-0.5 * q**2) / math.sqrt(2 * math.pi), 0.0)
    return float(mean @ (phi[:-1] - phi[1:]))


def iid_w2sq(M: int, s: float = S_INF) -> float:
    """E W2²(μ_M, N(0, s)) for M i.i.d. draws of N(0, s)."""
    return 2 * s * (1 - order_statistic_gain(M))


def chain_variances(M: int, eta: float = ETA, t1: float = T1) -> tuple[float, float]:
    """(v_c, S): Var of the centre of mass and the spread scale after t1/η EM steps from i.i.d. N(0, s∞)."""
    n = round(t1 / eta)
    rho_c, rho_s = 1 - eta * A, 1 - eta * (A + K)
    v_c = rho_c ** (2 * n) * S_INF / M + 2 * BETA * eta / M * (1 - rho_c ** (2 * n)) / (1 - rho_c**2)
    S = rho_s ** (2 * n) * S_INF + 2 * BETA * eta * (1 - rho_s ** (2 * n)) / (1 - rho_s**2)
    return v_c, S


def particle_w2sq(M: int, s: float = S_INF) -> float:
    """E W2²(μ_M, N(0, s)) for the EM particle chain (exact law)."""
    v_c, S = chain_variances(M)
    return v_c + S * (M - 1) / M + s - 2 * math.sqrt(s * S) * order_statistic_gain(M)


def _loglog_slope(Ms, y) -> float:
    return float(np.polyfit(np.log(Ms), np.log(y), 1)[0])


def _boot_se(study) -> float:
    lo, hi = study.slope_ci
    return (hi - lo) / (2 * 1.959964)


def run(preset: str = "fast", *, simulated_k: float | None = None) -> CheckResult:
    """Run the check; ``simulated_k`` replaces k in the simulation only (a broken input that must fail)."""
    p = PRESETS[preset]
    Ms, reps = p["Ms"], p["reps"]
    result = CheckResult("propagation_of_chaos", CLAIM, preset=preset)
    k_sim = K if simulated_k is None else simulated_k
    system = MeanFieldLangevin(Quadratic(A), QuadraticInteraction(k_sim), beta=BETA)
    gen = torch.Generator().manual_seed(5)
    limit = Normal(0.0, math.sqrt(S_INF))

    def particles(M: int, n: int) -> torch.Tensor:
        x0 = math.sqrt(S_INF) * torch.randn(n, M, 1, generator=gen, dtype=torch.float64)  # (n, M, 1) from ρ
        return simulate(system, x0, t1=T1, dt=ETA, generator=gen).final  # (n, M, 1)

    def iid(M: int, n: int) -> torch.Tensor:
        return math.sqrt(S_INF) * torch.randn(n, M, 1, generator=gen, dtype=torch.float64)  # (n, M, 1)

    part = convergence_in_m(particles, Ms, reps=reps, reference=limit, generator=gen, progress=False)
    base = convergence_in_m(iid, Ms, reps=reps, reference=limit, generator=gen, progress=False)
    pm, pse, bm, bse = (t.numpy() for t in (part.mean, part.se, base.mean, base.se))
    exact_part = np.array([particle_w2sq(M) for M in Ms])
    exact_iid = np.array([iid_w2sq(M) for M in Ms])
    Ms_a = np.array(Ms, dtype=float)

    for i, M in enumerate(Ms):
        result.add(f"E W2²(i.i.d., ρ), M={M} [order statistics]", bm[i], exact_iid[i], Z * bse[i],
                   detectable=Z * bse[i], note="5·SE; 2s∞(1 − Σ E z_(i) J_i)")  # fmt: skip
    for i, M in enumerate(Ms):
        result.add(f"E W2²(particles, ρ), M={M} [EM chain law]", pm[i], exact_part[i], Z * pse[i],
                   detectable=Z * pse[i], note="5·SE; v_c + S(M−1)/M + s∞ − 2sqrt(s∞S)·G(M)")  # fmt: skip
    diff, diff_se = pm - bm, np.sqrt(pse**2 + bse**2)
    exact_diff = exact_part - exact_iid
    for i, M in enumerate(Ms):
        result.add(f"M·(particles − i.i.d.), M={M} [EM chain law]", M * diff[i], M * exact_diff[i], Z * M * diff_se[i],
                   detectable=Z * M * diff_se[i], note=f"5·SE; continuous M·c = {C_M:.4g}")  # fmt: skip

    w = 1 / (Ms_a * diff_se) ** 2  # pooled M·difference, inverse-variance weights
    pooled, pooled_se = float((w * Ms_a * diff).sum() / w.sum()), float(1 / math.sqrt(w.sum()))
    pooled_exact = float((w * Ms_a * exact_diff).sum() / w.sum())
    bias = abs(pooled_exact - C_M)
    result.add("pooled M·(particles − i.i.d.) [EM chain law]", pooled, pooled_exact, Z * pooled_se,
               detectable=Z * pooled_se, note="5·SE; inverse-variance weights over M")  # fmt: skip
    result.add("pooled M·(particles − i.i.d.) [βk/(a(a+k))]", pooled, C_M, Z * pooled_se + bias,
               detectable=Z * pooled_se,
               note=f"5·SE + O(η) spread bias and transient {bias:.2g} (same weights)")  # fmt: skip
    result.add("negative control: pooled excess vs 0", pooled, 0.0, Z * pooled_se, expect="differ",
               note="particles indistinguishable from i.i.d.: must be rejected")  # fmt: skip

    slope_exact = _loglog_slope(Ms_a, exact_part)
    se = _boot_se(part)
    lo, hi = part.slope_ci
    result.add("slope of E W2²(particles, ρ) in M [exact curve]", part.slope, slope_exact, Z * se, detectable=Z * se,
               note=f"5·SE(bootstrap), 95 % CI [{lo:.3f}, {hi:.3f}]; theory −1 up to log log M")  # fmt: skip
    se_b = _boot_se(base)
    result.add("slope of E W2²(i.i.d., ρ) in M [exact curve]", base.slope, _loglog_slope(Ms_a, exact_iid), Z * se_b,
               detectable=Z * se_b, note=f"5·SE(bootstrap), 95 % CI [{base.slope_ci[0]:.3f}, {base.slope_ci[1]:.3f}]")  # fmt: skip
    result.add("negative control: slope vs −1/2 (rate of E W2)", part.slope, -0.5, Z * se, expect="differ",
               note="W2 instead of W2² would give ≈ −1/2")  # fmt: skip

    fine = np.unique(np.geomspace(Ms[0], Ms[-1], 24).round().astype(int))
    result.data = dict(
        a=A, k=K, beta=BETA, eta=ETA, t1=T1, reps=reps, Ms=list(Ms),
        particles=dict(mean=pm.tolist(), se=pse.tolist(), slope=part.slope, ci=list(part.slope_ci)),
        iid=dict(mean=bm.tolist(), se=bse.tolist(), slope=base.slope, ci=list(base.slope_ci)),
        exact_particles=exact_part.tolist(), exact_iid=exact_iid.tolist(), exact_diff=exact_diff.tolist(),
        fine_M=fine.tolist(), fine_iid=[iid_w2sq(int(M)) for M in fine],
        fine_particles=[particle_w2sq(int(M)) for M in fine], pooled=pooled, pooled_se=pooled_se, c_M=C_M,
    )  # fmt: skip
    return result


def plot(result: CheckResult):
    d = result.data
    fig, (ax1, ax2) = figure(ncols=2, width=4.8)
    Ms = np.array(d["Ms"], dtype=float)
    fine = np.array(d["fine_M"], dtype=float)
    for key, color, label in (("particles", "C0", "particles"), ("iid", "C1", "i.i.d. samples of ρ")):
        r = d[key]
        lo, hi = r["ci"]
        ax1.errorbar(Ms, r["mean"], Z * np.array(r["se"]), fmt="o", color=color, capsize=3,
                     label=f"{label} (±5 SE): slope {r['slope']:.3f}, 95 % CI [{lo:.3f}, {hi:.3f}]")  # fmt: skip
        ax1.plot(fine, d[f"fine_{key}"], "-", color=color, lw=1)
    ax1.plot(fine, d["fine_iid"][0] * fine[0] / fine, "k:", lw=1, label="∝ 1/M")
    ax1.set(xscale="log", yscale="log", xlabel="M (particles)", ylabel="E W2²(μ_M, ρ)",
            title="convergence to the mean-field limit (lines: exact)")  # fmt: skip
    ax1.legend(fontsize=6.5, loc="upper right")
    diff = np.array(d["particles"]["mean"]) - np.array(d["iid"]["mean"])
    se = np.hypot(d["particles"]["se"], d["iid"]["se"])
    ax2.errorbar(Ms, Ms * diff, Z * Ms * se, fmt="o", capsize=3, label="measured (±5 SE)")
    ax2.plot(Ms, Ms * np.array(d["exact_diff"]), "x", color="C3", ms=8, label="EM chain law (exact)")
    ax2.axhline(d["c_M"], color="k", lw=1, label="βk/(a(a+k))")
    ax2.axhline(0, color="0.5", lw=0.8, ls=":")
    ax2.set(xscale="log", xlabel="M (particles)", ylabel="M·[E W2²(particles) − E W2²(i.i.d.)]",
            title="interaction excess × M")  # fmt: skip
    ax2.legend(fontsize=8)
    for ax in (ax1, ax2):
        ax.set_xticks(Ms, [str(int(M)) for M in Ms])
        ax.xaxis.set_minor_formatter(plt.NullFormatter())
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
