"""Check 2 — the Euler–Maruyama chain on V = a/2·|x|²: exact contraction and its exact O(η) stationary bias.

Formula: one Euler–Maruyama step of Langevin dynamics on the quadratic loss is the linear Gaussian chain

    x' = (1 − ηa)·x + sqrt(2βη)·ξ,    ξ ~ N(0, 1).

With β = 0 (deterministic gradient descent) x_T = (1 − ηa)^T·x_0 exactly, a contraction for 0 < ηa < 2
(the gradient flow contracts as e^{−ηaT}: a second O(η) difference). With β > 0 and x_0 = 0 the chain's law
after T steps is N(0, v·(1 − (1 − ηa)^{2T})) exactly, with stationary variance (solve v = (1 − ηa)²v + 2βη)

    v_η = 2βη / (1 − (1 − ηa)²) = β / (a·(1 − ηa/2)),

against the continuous Ornstein–Uhlenbeck (Gibbs) value β/a: a relative bias (ηa/2)/(1 − ηa/2) = ηa/2 + O(η²).
Source: e.g. Mattingly, Stuart & Higham (2002), "Ergodicity for SDEs and approximations", §7 (linear
test equation); Kloeden & Platen (1992), §9.1 (Euler–Maruyama); the bias of the discretised Langevin chain
is the "asymptotic bias" of unadjusted Langevin (Dalalyan 2017, Durmus & Moulines 2017).

Measured: n independent chains (replicas) from x_0 = 0 run T ≥ ln(10¹²)/(2·|ln|1 − ηa||) steps (the transient
factor (1 − ηa)^{2T} ≤ 1e-12 is kept in the reference anyway), for ηa in a grid up to 1.5; and the β = 0
chain from a few starting points over up to 200 steps.

Tolerance: variance rows 5·SE with SE = v·sqrt(2/n) (sample second moment of n Gaussian coordinates with
known mean 0); false-failure rate 5.7e-7 per row. The smallest detectable relative error is 5·sqrt(2/n)
(1.6 % at n = 2e5, fast; 0.5 % at n = 2e6, full). Contraction row: float64 rounding only, tolerance
4·T·2^-53 relative (T products, each rounded once). Negative controls (expect="differ"): the continuous
value β/a at every ηa ≥ 0.1 (relative bias ≥ 5.3 %, ≥ 3.3 detectable units at the fast n) must be rejected.
BROKEN: the simulated temperature 3 % too high (``perturb_beta=1.03``) must fail the variance rows;
``perturb_a`` moves the simulated curvature instead (fails the contraction row too).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from tqdm.auto import tqdm

from meanfield import MeanFieldLangevin, simulate
from meanfield.drift.potentials import Quadratic
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z
from meanfield.studies.validation import CheckResult

CLAIM = "EM on a/2|x|²: GD contracts by (1−ηa)^T exactly; the chain's stationary variance is β/(a(1−ηa/2)), not β/a"
BROKEN = dict(perturb_beta=1.03)  # the simulated temperature 3 % too high
PRESETS = {
    "fast": dict(n=200_000, eta_a=(0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 1.5)),
    "full": dict(n=2_000_000, eta_a=(0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75)),
}
A, BETA = 2.0, 0.5  # curvature and temperature: continuous stationary variance β/a = 0.25
DIFFER_FROM = 0.1  # the continuous value must be rejected at ηa ≥ this
CONTRACTION_T = 200
EPS = 2.0**-53  # float64 unit roundoff


def chain_variance(eta_a: float, steps: int | None = None) -> float:
    """Variance of the chain from x_0 = 0 after ``steps`` steps (stationary when ``None``): β/(a(1−ηa/2))."""
    c = 1.0 - eta_a
    v = BETA / (A * (1.0 - eta_a / 2.0))
    return v if steps is None else v * (1.0 - c ** (2 * steps))


def burn_in(eta_a: float) -> int:
    """Steps after which the transient factor (1 − ηa)^{2T} is below 1e-12 (at least 20)."""
    c = abs(1.0 - eta_a)
    if c == 0.0:
        return 20
    return max(20, math.ceil(math.log(1e-12) / (2.0 * math.log(c))))


def run(preset: str = "fast", *, perturb_beta: float = 1.0, perturb_a: float = 1.0) -> CheckResult:
    """Run the check; ``perturb_beta``/``perturb_a ≠ 1`` scale the *simulated* temperature/curvature only."""
    p = PRESETS[preset]
    n = p["n"]
    result = CheckResult("chain_bias", CLAIM, preset=preset)
    gen = torch.Generator().manual_seed(0)

    # 1. deterministic gradient descent (β = 0): x_T = (1 − ηa)^T x_0, float64-exact
    x0 = torch.tensor([1.0, -2.5, 3.0e3, 1e-3], dtype=torch.float64).view(1, 4, 1)  # (1, 4, 1)
    gd = MeanFieldLangevin(Quadratic(A * perturb_a), beta=0.0)
    worst, curves = 0.0, {}
    for eta_a in p["eta_a"]:
        eta = eta_a / A
        c = 1.0 - A * eta
        traj = simulate(gd, x0, t1=CONTRACTION_T * eta, dt=eta, save_every=1, generator=gen)
        T = np.arange(CONTRACTION_T + 1)
        factor = c**T  # (T+1,) reference, computed by pow
        ratio = traj.states[:, 0, :, 0].numpy() / x0[0, :, 0].numpy()  # (T+1, 4) measured x_T/x_0
        scale = np.where(factor != 0, np.abs(factor), EPS)[:, None]  # ηa = 1: x_T = 0 exactly for T ≥ 1
        rel = np.abs(ratio - factor[:, None]) / scale  # (T+1, 4)
        rel = rel / np.maximum(T, 1)[:, None]  # per step of rounding
        worst = max(worst, float(rel.max()))
        curves[str(eta_a)] = np.abs(ratio[:, 0]).tolist()
    result.add(
        "GD contraction: max |x_T/x_0 − (1−ηa)^T| / (|1−ηa|^T·T)",
        worst / EPS,
        0.0,
        4.0,
        detectable=4.0,
        note="in units of 2^-53 per step: float64 rounding of T products (≤ ~2 per step); a wrong curvature is ≥ 1e11",
    )

    # 2. stationary variance of the noisy chain against its exact law, and against the continuous β/a
    measured, ses, exact, steps = [], [], [], []
    sample = None
    for eta_a in tqdm(p["eta_a"], desc="chain_bias: ηa", disable=preset == "fast"):
        eta = eta_a / A
        T = burn_in(eta_a)
        system = MeanFieldLangevin(Quadratic(A * perturb_a), beta=BETA * perturb_beta)
        xT = simulate(
            system, torch.zeros(1, n, 1, dtype=torch.float64), t1=T * eta, dt=eta, generator=gen
        ).final.flatten()  # (n,)
        var = float(xT.square().mean())  # known mean 0
        ref = chain_variance(eta_a, T)
        se = ref * math.sqrt(2.0 / n)
        measured.append(var)
        ses.append(var * math.sqrt(2.0 / n))
        exact.append(ref)
        steps.append(T)
        result.add(
            f"Var x_∞, ηa={eta_a:g} vs chain β/(a(1−ηa/2))",
            var,
            ref,
            Z * se,
            detectable=Z * se,
            note=f"5·v·sqrt(2/n), n={n}, T={T} steps from 0 (transient (1−ηa)^(2T) kept)",
        )
        if eta_a == 1.0:
            sample = xT[:20000].tolist()
    continuous = BETA / A
    for eta_a, var, ref in zip(p["eta_a"], measured, exact):
        if eta_a >= DIFFER_FROM:
            se = continuous * math.sqrt(2.0 / n)
            result.add(
                f"negative control: Var x_∞, ηa={eta_a:g} vs continuous β/a",
                var,
                continuous,
                Z * se,
                detectable=Z * se,
                expect="differ",
                note=f"relative bias (ηa/2)/(1−ηa/2) = {(ref - continuous) / continuous:.3g} must be seen",
            )
    result.data = dict(
        eta_a=list(p["eta_a"]),
        measured=measured,
        se=ses,
        exact=exact,
        steps=steps,
        continuous=continuous,
        beta=BETA,
        a=A,
        n=n,
        contraction=curves,
        contraction_T=CONTRACTION_T,
        sample_eta_a_1=sample,
    )
    return result


def plot(result: CheckResult):
    d = result.data
    fig, (ax1, ax2, ax3) = figure(ncols=3)
    ea = np.array(d["eta_a"])
    grid = np.geomspace(ea.min() * 0.8, min(ea.max() * 1.1, 1.95), 200)
    cont = d["continuous"]
    ratio = np.array(d["measured"]) / cont
    err = Z * np.array(d["se"]) / cont
    ax1.plot(grid, 1.0 / (1.0 - grid / 2.0), "k-", label="chain: 1/(1 − ηa/2)")
    ax1.axhline(1.0, color="C3", ls="--", label="continuous: β/a")
    ax1.errorbar(ea, ratio, yerr=err, fmt="o", ms=4, capsize=3, label=f"measured ±5 SE (n = {d['n']:.0e})")
    ax1.set(xlabel="ηa", ylabel="Var x_∞ / (β/a)", xscale="log", title="stationary variance of the EM chain")
    ax1.legend(fontsize=8)
    bias = ratio - 1.0
    ax2.plot(grid, (grid / 2) / (1 - grid / 2), "k-", label="exact (ηa/2)/(1 − ηa/2)")
    ax2.plot(grid, grid / 2, "k:", label="first order ηa/2")
    ax2.errorbar(ea, bias, yerr=err, fmt="o", ms=4, capsize=3, label="measured ±5 SE")
    ax2.set(xlabel="ηa", ylabel="relative bias vs β/a", xscale="log", yscale="log", title="O(η) bias")
    ax2.legend(fontsize=8)
    T = np.arange(d["contraction_T"] + 1)
    for i, (key, curve) in enumerate(d["contraction"].items()):
        e = float(key)
        if e >= 1.0:  # |1−ηa|^T: zero at ηa = 1, too fast to show at 1.5
            continue
        ax3.semilogy(T[::5], curve[::5], "o", ms=2.5, color=f"C{i}", label=f"ηa={e:g}")
        ax3.semilogy(T, np.abs(1 - e) ** T, "-", lw=0.8, color=f"C{i}")
        ax3.semilogy(T, np.exp(-e * T), ":", lw=0.8, color=f"C{i}")
    ax3.set(
        xlabel="steps T",
        ylabel="|x_T / x_0|",
        ylim=(1e-12, 2),
        title="β = 0: (1−ηa)^T (—) vs exp(−ηaT) (⋯)",
    )
    ax3.legend(fontsize=7, ncol=2)
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
