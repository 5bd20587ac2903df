"""Check — the free energy of the double-well Gibbs law, measured from particles, against quadrature.

System: V(x) = x⁴/4 − x²/2, no interaction, β = 0.5, d = 1 (``MeanFieldLangevin(DoubleWell(), beta=β)``). The
Gibbs law ρ ∝ e^{−V/β} minimises F(ρ) = E_ρ V + β∫ρ log ρ, with F* = −β log Z, Z = ∫e^{−V/β} (scipy quad). The
Euler–Maruyama chain at step η has the law ρ_η = ρ + O(η) (computed independently of the simulator by the
Nyström fixed point of its Gaussian kernel, ``gibbs_double_well.chain_law``), and F(ρ_η) = ∫Vρ_η + β∫ρ_η log ρ_η
by the trapezoid rule on that grid.

Measured: B replicas of M particles from x = ±1 (half each: a symmetric start, so the law relaxes at the even
gap λ2 ≈ 2.3 and T = 6 leaves ≈ 1e-6), ``free_energy(system, x, entropy="knn")`` per replica, mean ± SE over the
replicas. The k-NN entropy has a finite-M bias on this bimodal law: it is *measured* at the same M on exact
draws of ρ_η (inverse CDF of the Nyström law, 400 samples of size M), bias ± SE, and enters the references.

Rows: F̂ vs F(ρ_η) − β·bias (tolerance 5·SE + 5·β·SE(bias)), Ĥ vs H(ρ_η) + bias and E V̂ vs ∫Vρ_η check the
simulated law (the bias comes from exact draws of ρ_η, so these rows cannot see an error of the estimator
itself: it is in the bias too); the measured bias vs 0 (within 5·SE + 0.01 nats: ``ENTROPY_SLACK``) checks the
estimator; F̂ vs F* checks both against the quadrature alone, with tolerance 5·SE + |F(ρ_η) − F*| +
β·``ENTROPY_SLACK`` (no measured number in it).
Power (fast: M = 1000, B = 100, k = 3): SE(F̂) ≈ 1.2e-3, so an error of the simulated law of 0.006 in F (0.8 % of
|F*|) is detected; an error of the entropy estimator is detected above 0.017 nats (the bias row: 0.01 + 5·SE,
SE ≈ 1.4e-3), 0.0085 in F.
Negative control (expect="differ"): F̂ against F* at 1.2β (−1.2β log Z(1.2β)). BROKEN: the simulation at 1.2β,
caught by Ĥ and E V̂ but *not* by F̂: F is stationary at its minimiser, F(ρ) − F* = β·KL(ρ‖ρ*) for this
potential-only F, so the 20 % hotter law moves F by β·KL(ρ_{1.2β}‖ρ_β) ≈ 1e-3 (second order), below the SE.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from scipy import integrate

from meanfield import MeanFieldLangevin, free_energy, simulate
from meanfield.drift.potentials import DoubleWell
from meanfield.metrics import entropy
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z, mean_se
from meanfield.studies.validation import CheckResult, load_check

CLAIM = "Free energy of the double-well Gibbs law from particles (k-NN entropy, bias measured) = −β log Z by quadrature"
BROKEN = dict(beta_sim=0.6)  # the simulation runs 20 % hotter; the references keep β
PRESETS = {"fast": dict(M=1000, B=100, bias_reps=400), "full": dict(M=4000, B=250, bias_reps=1000)}
BETA, ETA, T_BURN = 0.5, 0.025, 6.0
ENTROPY_SLACK = 0.01  # nats: the k-NN bias allowed at M = 1000 on this law (measured −0.001 ± 0.0014)


def _dw():
    return load_check(Path(__file__).with_name("gibbs_double_well.py"))


def gibbs_free_energy(beta: float) -> float:
    """F* = −β log ∫e^{−V/β} (scipy quad)."""
    Zn = integrate.quad(lambda x: math.exp(-(x**4 / 4 - x**2 / 2) / beta), -np.inf, np.inf, epsrel=1e-12)[0]
    return -beta * math.log(Zn)


def law_free_energy(x: np.ndarray, density: np.ndarray, beta: float) -> tuple[float, float]:
    """(F, H) of a density on a grid by the trapezoid rule: F = ∫Vρ − β·H, H = −∫ρ log ρ."""
    rho = density / np.trapezoid(density, x)
    H = -np.trapezoid(np.where(rho > 0, rho * np.log(np.where(rho > 0, rho, 1.0)), 0.0), x)
    return float(np.trapezoid((x**4 / 4 - x**2 / 2) * rho, x) - beta * H), float(H)


def knn_bias(x: np.ndarray, density: np.ndarray, H: float, M: int, reps: int, seed: int = 3):
    """Mean ± SE of Ĥ_kNN − H on ``reps`` exact samples of size M from the grid law (inverse CDF)."""
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (density[1:] + density[:-1]) * np.diff(x))])
    cdf /= cdf[-1]
    u = np.random.default_rng(seed).random((reps, M))
    draws = torch.as_tensor(np.interp(u, cdf, x))[..., None]  # (reps, M, 1)
    h = torch.as_tensor(entropy(draws, method="knn").value, dtype=torch.float64)  # (reps,)
    return mean_se(h - H)


def run(preset: str = "fast", *, beta_sim: float | None = None) -> CheckResult:
    p = PRESETS[preset]
    M, B = p["M"], p["B"]
    result = CheckResult("free_energy_gibbs", CLAIM, preset=preset)
    chain = _dw().chain_law(BETA, ETA)
    F_eta, H_eta = law_free_energy(chain["x"], chain["density"], BETA)
    F_star = gibbs_free_energy(BETA)
    bias = knn_bias(chain["x"], chain["density"], H_eta, M, p["bias_reps"])

    system = MeanFieldLangevin(DoubleWell(), beta=BETA if beta_sim is None else beta_sim)
    measured = MeanFieldLangevin(DoubleWell(), beta=BETA)
    gen = torch.Generator().manual_seed(5)
    x0 = torch.ones(B, M, 1, dtype=torch.float64)
    x0[:, ::2] = -1.0  # symmetric start
    x = simulate(system, x0, t1=T_BURN, dt=ETA, generator=gen).final  # (B, M, 1)
    F = free_energy(measured, x, entropy="knn")
    Fh, Hh = mean_se(F.value), mean_se(F.entropy)

    tol = Z * Fh.se + Z * BETA * bias.se
    result.add("F̂ [F(ρ_η) − β·bias, EM chain law]", Fh.value, F_eta - BETA * bias.value, tol, detectable=tol,
               note=f"5·SE + 5·β·SE(bias); k-NN bias measured {bias.value:.2e} ± {bias.se:.1e} at M = {M}")  # fmt: skip
    slack = abs(F_eta - F_star) + BETA * ENTROPY_SLACK
    result.add("F̂ [F* = −β log Z]", Fh.value, F_star, Z * Fh.se + slack, detectable=Z * Fh.se,
               note=f"5·SE + O(η) gap |F(ρ_η) − F*| = {abs(F_eta - F_star):.2g} + β·{ENTROPY_SLACK} (entropy bias allowed)")  # fmt: skip
    result.add("Ĥ [H(ρ_η) + bias]", Hh.value, H_eta + bias.value, Z * Hh.se + Z * bias.se,
               detectable=Z * Hh.se, note="5·SE + 5·SE(bias); H(ρ_η) by the trapezoid rule")  # fmt: skip
    Vh = mean_se(F.confinement)
    V_eta = float(np.trapezoid((chain["x"] ** 4 / 4 - chain["x"] ** 2 / 2) * chain["density"], chain["x"]))
    result.add(
        "E V̂ [∫V ρ_η]",
        Vh.value,
        V_eta,
        Z * Vh.se,
        detectable=Z * Vh.se,
        note="5·SE; trapezoid on the Nyström grid",
    )
    result.add(f"k-NN entropy bias at M = {M} (exact draws of ρ_η)", bias.value, 0.0, Z * bias.se + ENTROPY_SLACK,
               detectable=Z * bias.se + ENTROPY_SLACK, note=f"the estimator: its bias within {ENTROPY_SLACK} nats (+ 5·SE)")  # fmt: skip
    wrong = gibbs_free_energy(1.2 * BETA)
    result.add("negative control: F̂ vs F* at 1.2β", Fh.value, wrong, Z * Fh.se + slack,
               expect="differ", note="the Gibbs free energy at the wrong temperature: must be rejected")  # fmt: skip
    result.data = dict(
        beta=BETA, eta=ETA, M=M, B=B, F_hat=F.value.tolist(), F_eta=F_eta, F_star=F_star, H_eta=H_eta,
        bias=bias.value, bias_se=bias.se, F_wrong=wrong, grid=chain["x"][::4].tolist(),
        density=chain["density"][::4].tolist(), sample=x[0, :, 0].tolist(),
    )  # fmt: skip
    return result


def plot(result: CheckResult):
    d = result.data
    fig, (ax1, ax2) = figure(ncols=2)
    ax1.hist(d["sample"], bins=60, density=True, alpha=0.5, label=f"one replica (M = {d['M']})")
    ax1.plot(d["grid"], d["density"], "k-", lw=1, label=f"EM chain law ρ_η (η = {d['eta']})")
    ax1.set(xlabel="x", ylabel="density", title="double well at β = 0.5")
    ax1.legend()
    F = np.array(d["F_hat"])
    ax2.hist(F, bins=25, alpha=0.6, label=f"F̂ per replica ({d['B']} replicas)")
    ax2.axvline(d["F_star"], color="k", label="F* = −β log Z")
    ax2.axvline(d["F_eta"] - d["beta"] * d["bias"], color="C1", ls="--", label="F(ρ_η) − β·bias")
    ax2.axvline(d["F_wrong"], color="C3", ls=":", label="F* at 1.2β (negative control)")
    ax2.axvline(F.mean(), color="C0", lw=2, label=f"mean F̂ = {F.mean():.4f}")
    ax2.set(xlabel="F", title="free energy: particles vs quadrature")
    ax2.legend(fontsize=7)
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
