"""Check 6 — Gibbs law of the double well V(x) = x⁴/4 − x²/2 at temperature β, and the O(η) bias of the EM chain.

Formula: dx = −V'(x) dt + sqrt(2β) dW has the stationary law ρ(x) ∝ exp(−V(x)/β) (Gibbs; e.g. Pavliotis 2014,
*Stochastic Processes and Applications*, §4.5). Integration by parts gives E_ρ[x·V'(x)] = β: since
V'·e^{−V/β} = −β (e^{−V/β})', ∫ x V' e^{−V/β} = β ∫ e^{−V/β}. The references E x², E x⁴, E[xV'] come from
``scipy.integrate.quad``.

The Euler–Maruyama chain x' = x − ηV'(x) + sqrt(2βη)ξ has a different law ρ_η = ρ + O(η) (Talay & Tubaro
1990; Mattingly, Stuart & Tretyakov 2010). Its law is computed here independently of the simulator: its
transition kernel is Gaussian, N(x − ηV'(x), 2βη), so ρ_η solves ρ_η(y) = ∫ρ_η(x)K(x, y)dx, discretised by
the Nyström method on [−4, 4] with a step h ≤ σ/4 (σ = sqrt(2βη); the trapezoid rule on a Gaussian of
width σ errs by ≈ e^{−2π²σ²/h²} < 1e-100) and solved as a linear system. Strictly, EM with a cubic drift is
transient (Mattingly, Stuart & Higham 2002; Hutzenthaler, Jentzen & Kloeden 2011); the Nyström law is
its quasi-stationary law on [−4, 4]. The escape probability per particle-step (reported in the data) is at
the round-off floor (< 1e-15) for η ≤ 0.12 but ≈ 8e-10 at η = 0.16, where a run of 1e7 particle-steps would
blow up with probability ≈ 1 %: hence η ≤ 0.1 here (the run asserts escape·N·steps < 1e-6).

Measured: N independent particles (no interaction, d = 1) at each of four step sizes η; each η row compares
E x² and E[xV'] with the chain's exact law (5·SE); a weighted linear fit in η gives the η → 0 intercepts of
E x², E x⁴ and E[xV'], compared with quadrature and with β, with tolerance 5·SE(intercept) + the
deterministic intercept bias of the same fit applied to the exact chain moments (curvature in η, stated in
the row's note); the fitted slope is compared with the exact chain's slope.

Burn-in and mixing (β = 0.5): the generator's spectrum, computed from its Schrödinger form
−β d² + V'²/(4β) − V''/2, is 0, λ1 ≈ 0.42 (odd eigenfunction: the hops between wells, Kramers rate), λ2 ≈
2.31 (even). The start x0 = ±1 (exactly half each) is symmetric, the dynamics (and EM) commute with x → −x,
so the law stays symmetric and even observables (x², x⁴, xV') relax at rate λ2: the burn-in T = 6 leaves
e^{−λ2·T} ≈ 1e-6 of the initial deviation (≈ 0.1), far below the SE. At β = 0.5 the wells still mix on a
time 1/λ1 ≈ 2.4 (an asymmetric start would need T ≈ 30 instead).

Tolerance: 5·SE (false-failure rate 5.7e-7 per row), SE = sample std/sqrt(N) of i.i.d. particles. Power
(fast, N = 2e5): SE(E x²) ≈ 0.0017 (0.2 %, detects 1 %), SE(E[xV']) ≈ 0.0033 (detects 3 % of β). The η-bias of
E x² at the largest η = 0.1 is −0.0225 ≈ 13 SE: the expect="differ" row (the bias must be detected).
Negative control BROKEN: the simulated temperature 5 % too high (E[xV'] moves by ≈ 0.023–0.032 ≈ 7–10 SE at
every η, E x² by ≈ 0.008 ≈ 5 SE).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import integrate, linalg

from meanfield import MeanFieldLangevin, simulate
from meanfield.drift.potentials import DoubleWell
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z, mean_se
from meanfield.studies.validation import CheckResult

CLAIM = "Double well at temperature β: EM moments → Gibbs exp(−V/β) quadrature linearly in η; E[xV'] = β"
BROKEN = dict(perturb=1.05)  # the simulated temperature 5 % too high
PRESETS = {
    "fast": dict(n=200_000, etas=(0.0125, 0.025, 0.05, 0.1)),
    "full": dict(n=2_000_000, etas=(0.00625, 0.0125, 0.025, 0.05, 0.1)),
}
BETA = 0.5
T_BURN = 6.0  # ≥ 10/λ2: even observables relaxed (see the docstring)
L_DOMAIN = 4.0  # Nyström and eigenvalue domain [−L, L]; V(4)/β = 112


def V(x):
    return x**4 / 4 - x**2 / 2


def dV(x):
    return x**3 - x


def gibbs_moments(beta: float) -> dict[str, float]:
    """E x², E x⁴, E[xV'] under ρ ∝ exp(−V/β) by quadrature."""
    w = lambda x: math.exp(-V(x) / beta)  # noqa: E731
    q = lambda f: integrate.quad(lambda x: f(x) * w(x), -np.inf, np.inf, epsabs=0, epsrel=1e-12)[0]  # noqa: E731
    Zn = q(lambda x: 1.0)
    return dict(x2=q(lambda x: x**2) / Zn, x4=q(lambda x: x**4) / Zn, xdV=q(lambda x: x * dV(x)) / Zn)


def gibbs_density(x, beta: float):
    Zn = integrate.quad(lambda y: math.exp(-V(y) / beta), -np.inf, np.inf, epsrel=1e-12)[0]
    return np.exp(-V(np.asarray(x)) / beta) / Zn


def spectral_gaps(beta: float, n: int = 4000) -> tuple[float, float]:
    """λ1 (odd) and λ2 (even) of −L, L = β d² − V' d, from −β d² + V'²/(4β) − V''/2 by finite differences."""
    x = np.linspace(-L_DOMAIN, L_DOMAIN, n)
    h = x[1] - x[0]
    U = dV(x) ** 2 / (4 * beta) - (3 * x**2 - 1) / 2
    w = linalg.eigh_tridiagonal(
        2 * beta / h**2 + U, -beta / h**2 * np.ones(n - 1), select="i", select_range=(0, 2), eigvals_only=True
    )
    return float(w[1] - w[0]), float(w[2] - w[0])


def chain_law(beta: float, eta: float) -> dict:
    """The EM chain's (quasi-)stationary law by Nyström on [−L, L]: grid, density, moments, escape per step."""
    sigma = math.sqrt(2 * beta * eta)
    h = min(sigma / 4, 0.02)
    x = np.arange(-L_DOMAIN, L_DOMAIN + h / 2, h)
    K = (
        np.exp(-((x[None, :] - (x - eta * dV(x))[:, None]) ** 2) / (2 * sigma**2))
        * h
        / (sigma * math.sqrt(2 * math.pi))
    )
    kept = K.sum(1)  # mass staying in [−L, L] (≈ 1 up to quadrature error)
    P = K / kept[:, None]
    A = P.T - np.eye(x.size)
    A[-1] = 1.0  # normalisation replaces one (redundant) balance equation
    b = np.zeros(x.size)
    b[-1] = 1.0
    pi = np.linalg.solve(A, b)  # probabilities of the grid points
    escape = float(pi @ np.clip(1 - kept, 0, None))
    return dict(
        x=x,
        density=pi / h,
        x2=float(pi @ x**2),
        x4=float(pi @ x**4),
        xdV=float(pi @ (x * dV(x))),
        escape=escape,
    )


def _linear_fit(eta, y, se):
    """Weighted least squares y = c0 + c1·η with known SEs: (c0, c1), their SEs."""
    X = np.stack([np.ones_like(eta), eta], 1)
    W = 1 / np.asarray(se) ** 2
    cov = np.linalg.inv(X.T @ (W[:, None] * X))
    coef = cov @ X.T @ (W * y)
    return coef, np.sqrt(np.diag(cov))


def run(preset: str = "fast", *, perturb: float = 1.0) -> CheckResult:
    """Run the check; ``perturb ≠ 1`` multiplies the simulated temperature only (a broken input that must fail)."""
    p = PRESETS[preset]
    n, etas = p["n"], np.array(p["etas"])
    result = CheckResult("gibbs_double_well", CLAIM, preset=preset)
    ref = gibbs_moments(BETA)
    lam1, lam2 = spectral_gaps(BETA)
    assert lam2 * T_BURN >= 10, (lam2, T_BURN)
    result.add(
        "quadrature: E[x·V'(x)] = β (by parts)", ref["xdV"], BETA, 1e-9, note="scipy quad, epsrel 1e-12"
    )

    system = MeanFieldLangevin(DoubleWell(), beta=BETA * perturb)  # no interaction: N independent particles
    gen = torch.Generator().manual_seed(6)
    x0 = torch.ones(1, n, 1, dtype=torch.float64)
    x0[:, ::2] = -1.0  # exactly symmetric start: even observables relax at rate λ2
    meas = {key: [] for key in ("x2", "x4", "xdV")}
    ses = {key: [] for key in meas}
    chains, hist, relax = [], [], None
    for i, eta in enumerate(etas):
        steps = round(T_BURN / eta)
        save = max(1, steps // 30) if i == 0 else None
        traj = simulate(system, x0, t1=steps * eta, dt=float(eta), save_every=save, generator=gen)
        x = traj.final.flatten()  # (n,) i.i.d. draws of the chain's law after the burn-in
        chain = chain_law(BETA, float(eta))
        chains.append(chain)
        if chain["escape"] * n * steps > 1e-6:
            raise ValueError(
                f"η = {eta}: the EM chain escapes [−4, 4] (and blows up) too often: {chain['escape']:.1e}/step"
            )
        for key, f in (("x2", x.square()), ("x4", x.pow(4)), ("xdV", x * (x.pow(3) - x))):
            est = mean_se(f)
            meas[key].append(est.value), ses[key].append(est.se)
        for key, label in (("x2", "E x²"), ("xdV", "E[x·V']")):
            se = ses[key][-1]
            result.add(f"{label}, η={eta:g} [EM chain law]", meas[key][-1], chain[key], Z * se, detectable=Z * se,
                       note="5·SE; Nyström fixed point of the Gaussian EM kernel")  # fmt: skip
        hist.append(np.histogram(x.numpy(), bins=120, range=(-2.5, 2.5), density=True)[0].tolist())
        if i == 0:
            relax = dict(t=traj.times.tolist(), x2=traj.states.square().mean(dim=(1, 2, 3)).tolist())

    fits = {}
    for key, label, target in (
        ("x2", "E x²", ref["x2"]),
        ("x4", "E x⁴", ref["x4"]),
        ("xdV", "E[x·V']", BETA),
    ):
        y, se = np.array(meas[key]), np.array(ses[key])
        (c0, c1), (se0, se1) = _linear_fit(etas, y, se)
        (e0, e1), _ = _linear_fit(etas, np.array([c[key] for c in chains]), se)  # same fit on the exact chain
        bias = abs(e0 - target)  # the fit's intercept error from curvature in η (deterministic)
        fits[key] = dict(c0=c0, c1=c1, se0=se0, se1=se1, exact0=e0, exact1=e1)
        result.add(f"{label} at η → 0 (linear-fit intercept) [quadrature]", c0, target, Z * se0 + bias, detectable=Z * se0,
                   note=f"5·SE(intercept) + curvature bias of the fit {bias:.1g}")  # fmt: skip
        if key == "x2":
            result.add("slope d(E x²)/dη [EM chain law]", c1, e1, Z * se1, detectable=Z * se1,
                       note="5·SE(slope); same weighted fit on the exact chain moments")  # fmt: skip
    j = int(np.argmax(etas))
    se = ses["x2"][j]
    result.add(f"η-bias: E x² at η={etas[j]:g} vs quadrature", meas["x2"][j], ref["x2"], Z * se, expect="differ",
               note=f"exact chain bias {chains[j]['x2'] - ref['x2']:.3g} must be detected")  # fmt: skip

    result.data = dict(
        beta=BETA, n=n, etas=etas.tolist(), ref=ref, lam1=lam1, lam2=lam2, t_burn=T_BURN,
        meas=meas, ses=ses, fits=fits, relax=relax, hist=hist, hist_range=[-2.5, 2.5],
        chain=[dict(eta=float(e), x2=c["x2"], x4=c["x4"], xdV=c["xdV"], escape=c["escape"]) for e, c in zip(etas, chains)],
        chain_density=[dict(x=c["x"][::4].tolist(), density=c["density"][::4].tolist()) for c in (chains[0], chains[-1])],
    )  # fmt: skip
    return result


def plot(result: CheckResult):
    d = result.data
    fig, (ax1, ax2, ax3, ax4) = figure(ncols=4, width=3.8)
    lo, hi = d["hist_range"]
    edges = np.linspace(lo, hi, len(d["hist"][0]) + 1)
    centres = 0.5 * (edges[1:] + edges[:-1])
    grid = np.linspace(lo, hi, 400)
    for k, color in ((0, "C0"), (-1, "C3")):
        ax1.step(
            centres,
            d["hist"][k],
            where="mid",
            color=color,
            alpha=0.8,
            lw=1,
            label=f"particles, η = {d['etas'][k]:g}",
        )
        c = d["chain_density"][k]
        ax1.plot(c["x"], c["density"], ":", color=color, lw=1.2, label=f"EM chain law, η = {d['etas'][k]:g}")
    ax1.plot(grid, gibbs_density(grid, d["beta"]), "k-", lw=1, label="Gibbs exp(−V/β)/Z")
    ax1.set(
        xlabel="x", ylabel="density", title=f"double well, β = {d['beta']}", xlim=(lo, hi), ylim=(0, None)
    )
    ax1.legend(fontsize=6.5, loc="lower center")

    etas = np.array(d["etas"])
    fine = np.linspace(0, etas.max() * 1.05, 50)
    for ax, key, label, target in (
        (ax2, "x2", "E x²", d["ref"]["x2"]),
        (ax3, "xdV", "E[x·V'(x)]", d["beta"]),
    ):
        f = d["fits"][key]
        ax.errorbar(
            etas, d["meas"][key], Z * np.array(d["ses"][key]), fmt="o", ms=4, label="measured (±5 SE)"
        )
        ax.plot(etas, [c[key] for c in d["chain"]], "x", color="C3", ms=7, label="EM chain law (Nyström)")
        ax.plot(fine, f["c0"] + f["c1"] * fine, "-", color="C0", lw=1, label="linear fit")
        ax.plot([0], [target], "k*", ms=10, label="quadrature (η = 0)" if key == "x2" else "β")
        ax.set(xlabel="η", ylabel=label, title=f"{label} vs step size")
        ax.legend(fontsize=7)

    r = d["relax"]
    dev = np.abs(np.array(r["x2"]) - d["chain"][0]["x2"])
    t = np.array(r["t"])
    ax4.semilogy(t, np.maximum(dev, 1e-6), "o-", ms=3, label=f"|E x²(t) − E_η x²|, η = {d['etas'][0]:g}")
    j = int(np.argmin(np.abs(t - 1.0)))  # anchor the guide after the initial transient (higher even modes)
    ax4.semilogy(
        t, dev[j] * np.exp(-d["lam2"] * (t - t[j])), "k--", lw=1, label=f"∝ e^(−λ2 t), λ2 = {d['lam2']:.2f}"
    )
    se = d["ses"]["x2"][0]
    ax4.axhline(se, color="0.5", ls=":", lw=1, label="1 SE")
    ax4.axvline(d["t_burn"], color="C2", lw=1, label=f"burn-in T = {d['t_burn']:g}")
    ax4.set(xlabel="t", title=f"burn-in of E x²\n(odd mode λ1 = {d['lam1']:.2f} not excited)", ylim=(1e-5, 1))
    ax4.legend(fontsize=7)
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
