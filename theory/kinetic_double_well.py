"""Kinetic check 2 — the double well V = x⁴/4 − x²/2 at β = 0.5: each splitting's position moments → Gibbs at order h².

Formula: the kinetic dynamics dx = v dt, dv = −V'(x) dt − γv dt + sqrt(2γβ) dW have the stationary law
∝ exp(−(V(x) + v²/2)/β): the position marginal is the overdamped Gibbs law ρ ∝ exp(−V/β) (references E x²,
E x⁴ by ``scipy.integrate.quad``, from ``gibbs_double_well``). BAOAB, OBABO and ABOBA with the exact OU step
are weak order 2 (Leimkuhler & Matthews 2013; Leimkuhler, Matthews & Stoltz 2016, *IMA J. Numer. Anal.*,
"The computation of averages from equilibrium and nonequilibrium Langevin molecular dynamics"): their
stationary averages differ from the Gibbs ones by c₂h² + c₄h⁴ + … (the expansions are even in h for these
symmetric splittings), where Euler–Maruyama's start at c₁h.

Measured: n independent particles (d = 1, γ = 1) per scheme and step h ∈ {0.1, 0.2, 0.3, 0.4}, started
symmetrically at x = ±1 (exactly half each) with Maxwellian velocities, burnt in for T = 8 (even observables
relax at the even spectral gap; the odd mode, the hops between wells, is not excited by the symmetric
start, as in ``gibbs_double_well``), then each particle's x² and x⁴ averaged over the window [8, 8 + W] (states
about every 0.4 time units). The particles are independent, so the SE of the mean of the per-particle time
averages is their sample std/sqrt(n), whatever the autocorrelation within a particle. For each scheme and
moment the weighted least-squares fit ``m(h) = c₀ + c₂h² + c₄h⁴`` (the schemes' even expansion) gives the
intercept c₀, compared with the quadrature.

Tolerance: 5·SE (false-failure rate 5.7e-7 per row), SE of the intercept from the fit with the per-h SEs.
Power (fast, n = 4e4, W = 16): SE(E x²) ≈ 0.001 per h, SE(c₀) ≈ 0.0013: the intercept detects ≈ 0.007 (0.7 %).
Expect="differ" rows (negative controls): ABOBA's E x² at h = 0.4 against the quadrature (its bias, ≈ −0.03,
must be seen), and ABOBA's intercept from the *first-order* model ``c₀ + c₁h`` (the order of Euler–Maruyama:
the wrong order) against the quadrature — a linear extrapolation of an even bias overshoots and must be
rejected. BROKEN: the simulated temperature 5 % too high (``perturb_beta=1.05``; the E x² intercepts move by ≈ 0.007, five of the six intercept rows fail).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from meanfield import simulate
from meanfield.drift.phase_space import KineticMeanFieldLangevin, pair, positions
from meanfield.drift.potentials import DoubleWell
from meanfield.stepping.solvers.splittings import SPLITTINGS
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z, mean_se
from meanfield.studies.validation import CheckResult, load_check

CLAIM = "Double well, kinetic: BAOAB/OBABO/ABOBA position moments → Gibbs exp(−V/β) quadrature as c₀ + c₂h² + c₄h⁴"
BROKEN = dict(perturb_beta=1.05)  # the simulated temperature 5 % too high
PRESETS = {
    "fast": dict(n=40_000, window=16.0, hs=(0.1, 0.2, 0.3, 0.4)),
    "full": dict(n=400_000, window=32.0, hs=(0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4)),
}
BETA, GAMMA, T_BURN, SAVE_DT = 0.5, 1.0, 8.0, 0.4
EVEN, FIRST_ORDER = (0, 2, 4), (0, 1)  # the fitted powers of h


def _gibbs():
    return load_check(Path(__file__).with_name("gibbs_double_well.py"))


def fit(hs, y, se, powers):
    """Weighted least squares ``y = Σ_k c_k h^{p_k}``: coefficients and their SEs."""
    X = np.stack([np.asarray(hs, dtype=float) ** p for p in powers], 1)
    W = 1 / np.asarray(se) ** 2
    cov = np.linalg.inv(X.T @ (W[:, None] * X))
    return cov @ X.T @ (W * np.asarray(y)), np.sqrt(np.diag(cov))


def run(preset: str = "fast", *, perturb_beta: float = 1.0) -> CheckResult:
    """Run the check; ``perturb_beta ≠ 1`` scales the simulated temperature only (a broken input)."""
    p = PRESETS[preset]
    n, hs = p["n"], p["hs"]
    result = CheckResult("kinetic_double_well", CLAIM, preset=preset)
    ref = _gibbs().gibbs_moments(BETA)
    system = KineticMeanFieldLangevin(DoubleWell(), friction=GAMMA, beta=BETA * perturb_beta)
    gen = torch.Generator().manual_seed(292)
    data = dict(beta=BETA, gamma=GAMMA, n=n, hs=list(hs), ref=ref, schemes={})
    for scheme in SPLITTINGS:
        meas = {"x2": [], "x4": []}
        ses = {"x2": [], "x4": []}
        for h in hs:
            x0 = torch.ones(1, n, 1, dtype=torch.float64)  # (1, n, 1)
            x0[:, ::2] = -1.0
            v0 = math.sqrt(BETA) * torch.randn(1, n, 1, generator=gen, dtype=torch.float64)  # (1, n, 1)
            burn, window = round(T_BURN / h), round(p["window"] / h)
            traj = simulate(system, pair(x0, v0), t1=(burn + window) * h, dt=h, solver=scheme, generator=gen,
                            save_every=max(1, round(SAVE_DT / h)))  # fmt: skip
            x = positions(traj.states[traj.steps >= burn])[:, 0, :, 0]  # (S, n): the window's saved states
            for key, f in (("x2", x.square()), ("x4", x.pow(4))):
                est = mean_se(f.mean(0))  # per-particle time averages: n independent numbers
                meas[key].append(est.value)
                ses[key].append(est.se)
        fits = {}
        for key, label in (("x2", "E x²"), ("x4", "E x⁴")):
            (c0, c2, c4), (se0, se2, _) = fit(hs, meas[key], ses[key], EVEN)
            fits[key] = dict(c0=c0, c2=c2, c4=c4, se0=se0, se2=se2)
            result.add(f"{scheme.upper()} {label} at h → 0 (fit c₀ + c₂h² + c₄h⁴) [quadrature]", c0, ref[key], Z * se0,
                       detectable=Z * se0, note=f"5·SE(intercept); fitted c₂ = {c2:.3g} ± {se2:.2g}, c₄ = {c4:.3g}")  # fmt: skip
        if scheme == "aboba":
            j = int(np.argmax(hs))
            se = ses["x2"][j]
            result.add(f"ABOBA E x², h={hs[j]:g} vs quadrature (the bias)", meas["x2"][j], ref["x2"], Z * se,
                       detectable=Z * se, expect="differ", note="the scheme's O(h²) bias must be detected")  # fmt: skip
            (c0, c1), (se0, _) = fit(hs, meas["x2"], ses["x2"], FIRST_ORDER)
            result.add("ABOBA E x² intercept with the wrong order (fit c₀ + c₁h) [quadrature]", c0, ref["x2"], Z * se0,
                       detectable=Z * se0, expect="differ",
                       note=f"negative control: a first-order extrapolation (c₁ = {c1:.3g}) of an even bias must be rejected")  # fmt: skip
        data["schemes"][scheme] = dict(meas=meas, ses=ses, fits=fits)
    result.data = data
    return result


def plot(result: CheckResult):
    d = result.data
    fig, (ax1, ax2) = figure(ncols=2)
    hs = np.array(d["hs"])
    fine = np.linspace(0, hs.max() * 1.05, 100)
    for ax, key, label in ((ax1, "x2", "E x²"), (ax2, "x4", "E x⁴")):
        for i, (scheme, s) in enumerate(d["schemes"].items()):
            f = s["fits"][key]
            ax.errorbar(hs + 0.004 * (i - 1), s["meas"][key], Z * np.array(s["ses"][key]), fmt="o", ms=4,
                        color=f"C{i}", capsize=2, label=f"{scheme.upper()} (±5 SE)")  # fmt: skip
            ax.plot(fine, f["c0"] + f["c2"] * fine**2 + f["c4"] * fine**4, "-", color=f"C{i}", lw=1)
        ax.plot([0], [d["ref"][key]], "k*", ms=10, label="Gibbs quadrature")
        ax.set(
            xlabel="h",
            ylabel=label,
            title=f"{label}: fits c₀ + c₂h² + c₄h⁴ (β = {d['beta']}, γ = {d['gamma']})",
        )
        ax.legend(fontsize=7)
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
