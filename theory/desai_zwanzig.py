"""Check 7 — Desai–Zwanzig (Curie–Weiss) phase transition: critical temperature, magnetisation, susceptibility.

System: dx_i = −V'(x_i) dt − θ(x_i − x̄) dt + sqrt(2β) dW_i, V(x) = x⁴/4 − x²/2, W(z) = θ/2·z²
(``MeanFieldLangevin(DoubleWell(), QuadraticInteraction(θ), beta=β)``), θ = 1.

Formulas (Dawson 1983, J. Stat. Phys. 31; Shiino 1987, Phys. Rev. A 36; Gomes & Pavliotis 2018):
- mean-field stationary laws ρ_m ∝ exp(−(V(x) + θ/2·(x − m)²)/β) with the self-consistency m = R(m) := ∫x ρ_m;
- R'(0) = θ·Var_{ρ_0}(x)/β, so the symmetric law m = 0 loses stability at the β_c solving
  θ·Var_{ρ_0}(x) = β_c (scipy brentq; β_c = 0.456947 for θ = 1); below β_c the magnetisation m*(β) > 0 is the
  positive root of R(m) = m (unique: R is concave on m ≥ 0 by the GHS inequality for single-site laws
  ∝ exp(−ax⁴ − bx²), Ellis, Monroe & Newman 1976 — the transition is continuous);
- the M-particle chain has the exact Gibbs law ∝ exp(−H/β), H = Σ V(x_i) + θ/2·Σ(x_i − x̄)². A
  Hubbard–Stratonovich field h with h | x ~ N(a·x̄, a/M), a = θ/β, makes the particles i.i.d. ρ_{m = h/a}
  given h, and the law of h ∝ exp(−M[h²/(2a) − log Z(h)]) (Z(h) = ∫exp(−(V + θx²/2)/β + h·x)dx). Hence
  the finite-M moments exactly, by one-dimensional quadrature: E[x̄²] = (E[h²] − a/M)/a² and
  E|x̄| = E|h|/a (up to the weight of x̄ ≈ 0, exponentially small in M below β_c). Their M → ∞ limits: E|x̄| → m*,
  M·Var(x̄) → χ = v/(1 − θv/β) with v = Var_{ρ_m*}(x) (the susceptibility, divergent at β_c from both sides).

What is simulated: B replicas of M particles, all started at x_i = 1 (polarised), by Euler–Maruyama at steps
η, 2η and 4η driven by one Brownian path (coarsened: the three chains are coupled, so their differences have
tiny variance). Time averages after a burn-in; one independent value per replica.

Tolerance: 5·SE (SE by the jackknife over replicas, which carries the time correlation) of the Richardson
value 2·v(η) − v(2η) (its O(η) bias removed), plus |R(2η, 4η) − R(η, 2η)|/3 (the O(η²) residual, measured),
plus, for the mean-field rows, the exact finite-M correction |m_M − m*|. False-failure rate ≈ 5.7e-7 per row
(Student t with B − 1 dof: ≈ 1e-5 at B = 32). The O(η) bias itself (v(2η) − v(η)) is shown as a row that
must be told apart from 0. The fast preset stays at 0.7·β_c and 1.3·β_c (away from the critical slowing
down: the relaxation time of x̄ is ≈ 6 time units at 1.3·β_c and grows as |β − β_c|⁻¹).

Smallest detectable error: the tolerance of each row (fast: ≈ 0.013 on m* = 0.666, i.e. 2 %; ≈ 35 % on
M·Var x̄ below and ≈ 25 % on M·E x̄² at 1.3·β_c, where the SE is set by B·T/τ).
Negative controls: below β_c the magnetisation is not 0; above β_c the ordered value m*(0.7β_c) is rejected.
BROKEN: the simulated interaction is dropped (θ = 0): no ordered phase, x̄ decays to 0 and χ falls to Var(x).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import optimize

from meanfield import MeanFieldLangevin
from meanfield.drift.potentials import DoubleWell, QuadraticInteraction
from meanfield.stepping.richardson import coupled_step_sizes, richardson
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z, jackknife
from meanfield.studies.validation import CheckResult

CLAIM = "Desai–Zwanzig: θ·Var_ρ0(x) = β_c, magnetisation m*(β) below β_c, m = 0 and susceptibility χ above"
BROKEN = dict(theta_sim=0.0)  # the simulated particles do not interact: no ordered phase
PRESETS = {
    # (B, M) below and above β_c: above, the SE of M·E x̄² is set by B·T/τ (not by M), so many small replicas
    "fast": dict(ratios=(0.7, 1.3), size=((32, 500), (128, 125)), eta=0.01, burn=(10.0, 30.0), measure=30.0),
    "full": dict(
        ratios=(0.5, 0.7, 0.85, 1.3, 1.6),
        size=((64, 1000), (256, 250)),
        eta=0.01,
        burn=(30.0, 50.0),
        measure=80.0,
    ),
}
THETA = 1.0
LEVELS = (1, 2, 4)  # step sizes η, 2η, 4η on one Brownian path
RECORD = 20  # fine steps between recorded x̄ (divisible by every level)
SEGMENT = 10  # records per segment of pre-drawn Brownian increments

# --- references: quadrature on a fixed grid (the integrands are smooth and decay like exp(−x⁴/4β), so the
# trapezoid rule is spectrally accurate; checked against scipy.integrate.quad to 1e-12) -----------------------
_X = np.linspace(-4.0, 4.0, 4001)
_DX = _X[1] - _X[0]


def _tilted(beta: float, h: np.ndarray, theta: float = THETA):
    """log Z(h), mean and variance of ∝ exp(−(V(x) + θx²/2)/β + h·x) for each h (ρ_m is h = θm/β)."""
    h = np.atleast_1d(np.asarray(h, dtype=float))
    base = -(_X**4 / 4 - _X**2 / 2 + theta * _X**2 / 2) / beta  # (N,)
    out = []
    for chunk in np.array_split(h, max(1, h.size // 512)):
        e = base[None, :] + chunk[:, None] * _X[None, :]  # (h, N)
        top = e.max(1, keepdims=True)
        w = np.exp(e - top)
        z = w.sum(1)
        mean = (w * _X).sum(1) / z
        var = (w * _X**2).sum(1) / z - mean**2
        out.append((top[:, 0] + np.log(z * _DX), mean, var))
    return tuple(np.concatenate(parts) for parts in zip(*out))


def self_consistency(beta: float, m: float, theta: float = THETA) -> float:
    """R(m) = ∫x ρ_m(x) dx."""
    return float(_tilted(beta, theta * m / beta, theta)[1][0])


def critical_temperature(theta: float = THETA) -> float:
    """β_c: θ·Var_{ρ_0}(x) = β (R'(0) = 1)."""
    return optimize.brentq(lambda b: theta * _tilted(b, 0.0, theta)[2][0] / b - 1.0, 0.02, 20.0, xtol=1e-14)


def magnetisation(beta: float, theta: float = THETA) -> float:
    """m*(β): the positive root of R(m) = m below β_c, 0 above."""
    if theta * _tilted(beta, 0.0, theta)[2][0] / beta <= 1.0:
        return 0.0
    return optimize.brentq(lambda m: self_consistency(beta, m, theta) - m, 1e-9, 3.0, xtol=1e-14)


def susceptibility(beta: float, theta: float = THETA) -> float:
    """χ = lim M·Var(x̄) = v/(1 − θv/β), v = Var_{ρ_m*}(x)."""
    v = _tilted(beta, theta * magnetisation(beta, theta) / beta, theta)[2][0]
    return float(v / (1.0 - theta * v / beta))


def finite_m_moments(beta: float, M: int, theta: float = THETA) -> dict[str, float]:
    """Exact stationary E|x̄| and M·E[x̄²] of the M-particle system (Hubbard–Stratonovich, see the docstring)."""
    a = theta / beta
    h = np.linspace(0.0, 3.0 * a, 2001)  # p(h) is even: integrate over h ≥ 0
    log_z = _tilted(beta, h, theta)[0]
    log_p = -M * (h**2 / (2 * a) - log_z)
    p = np.exp(log_p - log_p.max())
    p /= np.trapezoid(p, h)
    e_abs, e_sq = np.trapezoid(h * p, h) / a, (np.trapezoid(h**2 * p, h) - a / M) / a**2
    return dict(abs=float(e_abs), sq=float(M * e_sq), var=float(M * (e_sq - e_abs**2)))


# --- simulation ----------------------------------------------------------------------------------------------
def coupled_runs(system, x0, *, eta, n_burn, n_measure, generator):
    """x̄ per replica at steps η·k (k in LEVELS), one Brownian path: ``{k: (S, B)}``, S = (n_burn + n_measure)·SEGMENT.

    ``n_burn`` and ``n_measure`` count segments of ``SEGMENT·RECORD`` fine steps; the first ``n_burn·SEGMENT``
    records are the burn-in.
    """
    return coupled_step_sizes(
        system,
        x0,
        eta=eta,
        n_segments=n_burn + n_measure,
        observable=lambda states: states.mean(dim=(2, 3)),
        generator=generator,
        levels=LEVELS,
        record_every=RECORD,
        segment=SEGMENT,
    )


def _jackknife(stat, per_replica: dict[int, dict[str, np.ndarray]]):
    """``stat(means)`` with ``means[k][name]`` the replica average, and its jackknife standard error."""
    est = jackknife(stat, per_replica)
    return est.value, est.se


def _richardson(f, k1: int = 1, k2: int = 2):
    """The statistic 2·f(level k1) − f(level k2) of the replica means (k2 = 2·k1): its O(η) bias removed."""
    return lambda means: richardson(f(means[k1]), f(means[k2]))


def _extrapolate(per_replica, f):
    """Richardson value and SE; the O(η²) residual allowance (|R(2η,4η) − R(η,2η)| + 5·SE)/3; the O(η) bias
    f(2η) − f(η) and its SE; the raw values per level. ``f`` maps ``{name: replica mean}`` to a number."""
    value, se = _jackknife(_richardson(f), per_replica)
    resid, resid_se = _jackknife(lambda m: _richardson(f, 2, 4)(m) - _richardson(f)(m), per_replica)
    bias, bias_se = _jackknife(lambda m: f(m[2]) - f(m[1]), per_replica)
    raw = {k: f({n: float(v.mean()) for n, v in per_replica[k].items()}) for k in LEVELS}
    return value, se, (abs(resid) + Z * resid_se) / 3, bias, bias_se, raw


def run(preset: str = "fast", *, theta_sim: float = THETA) -> CheckResult:
    """Run the check; ``theta_sim`` is the interaction strength of the simulated particles only."""
    p = PRESETS[preset]
    eta = p["eta"]
    result = CheckResult("desai_zwanzig", CLAIM, preset=preset)
    beta_c = critical_temperature()
    eps = 1e-4
    slope = (self_consistency(beta_c, eps) - self_consistency(beta_c, -eps)) / (2 * eps)
    result.add(
        "R'(0) at β_c (finite difference)",
        slope,
        1.0,
        1e-6,
        note="quadrature check of the criterion θVar/β = 1; O(ε²) = 1e-8",
    )
    gen = torch.Generator().manual_seed(7)
    seg_time = SEGMENT * RECORD * eta
    ordered_ref = magnetisation(p["ratios"][0] * beta_c)
    points, traces = [], {}
    for ratio in p["ratios"]:
        beta = ratio * beta_c
        below = ratio < 1
        B, M = p["size"][0] if below else p["size"][1]
        m_star, chi = magnetisation(beta), susceptibility(beta)
        exact = finite_m_moments(beta, M)
        system = MeanFieldLangevin(
            DoubleWell(), QuadraticInteraction(theta_sim) if theta_sim else None, beta=beta
        )
        burn = p["burn"][0] if below else p["burn"][1]
        x0 = torch.ones(B, M, 1, dtype=torch.float64)  # polarised start
        n_burn = round(burn / seg_time)
        full = coupled_runs(
            system, x0, eta=eta, n_burn=n_burn, n_measure=round(p["measure"] / seg_time), generator=gen
        )
        series = {k: s[n_burn * SEGMENT :] for k, s in full.items()}  # (S, B) after burn-in
        per = {
            k: dict(abs=np.abs(s).mean(0), sq=M * (s**2).mean(0), mean=s.mean(0), M=np.full(B, float(M)))
            for k, s in series.items()
        }

        tag = f"β={ratio:g}β_c"
        if below:
            value, se, resid, bias, bias_se, raw = _extrapolate(per, lambda m: m["abs"])
            result.add(
                f"E|x̄| (η→0), {tag}",
                value,
                exact["abs"],
                Z * se + resid,
                detectable=Z * se + resid,
                note=f"exact M={M} law (HS quadrature); 5·SE + O(η²) residual {resid:.1e}",
            )
            fm = abs(exact["abs"] - m_star)
            result.add(
                f"E|x̄| (η→0) vs mean-field m*, {tag}",
                value,
                m_star,
                Z * se + resid + fm,
                detectable=Z * se + resid + fm,
                note=f"+ exact finite-M correction |m_M − m*| = {fm:.1e}",
            )
            result.add(
                f"O(η) bias of E|x̄|: v(2η) − v(η), {tag}",
                bias,
                0.0,
                Z * bias_se,
                expect="differ",
                note="coupled chains: the discretisation bias is resolved, not hidden",
            )
            var_value, var_se, var_resid, *_ = _extrapolate(per, lambda m: m["sq"] - m["M"] * m["abs"] ** 2)
            result.add(
                f"M·Var x̄ (η→0), {tag}",
                var_value,
                exact["var"],
                Z * var_se + var_resid,
                detectable=Z * var_se + var_resid,
                note=f"exact M={M}; mean-field χ = {chi:.4g}",
            )
            if ratio == p["ratios"][0]:
                result.add(
                    f"negative control: E|x̄| = 0, {tag}",
                    value,
                    0.0,
                    Z * se + resid,
                    expect="differ",
                    note="the ordered phase has m ≠ 0",
                )
            points.append(dict(ratio=ratio, m=value, m_se=se, raw=raw, chi=var_value, chi_se=var_se))
        else:
            sq_value, sq_se, sq_resid, *_ = _extrapolate(per, lambda m: m["sq"])
            result.add(
                f"M·E x̄² (η→0), {tag}",
                sq_value,
                exact["sq"],
                Z * sq_se + sq_resid,
                detectable=Z * sq_se + sq_resid,
                note=f"exact M={M}; mean-field χ = {chi:.4g}",
            )
            mean_value, mean_se, mean_resid, *_ = _extrapolate(per, lambda m: m["mean"])
            result.add(
                f"E x̄ (η→0), {tag}",
                mean_value,
                0.0,
                Z * mean_se + mean_resid,
                detectable=Z * mean_se + mean_resid,
                note="the polarised start has relaxed to m = 0",
            )
            abs_value, abs_se, abs_resid, *_ = _extrapolate(per, lambda m: m["abs"])
            if ratio == next(r for r in p["ratios"] if r > 1):
                result.add(
                    f"negative control: E|x̄| = m*({p['ratios'][0]:g}β_c), {tag}",
                    abs_value,
                    ordered_ref,
                    Z * abs_se + abs_resid,
                    expect="differ",
                    note="the ordered solution does not exist above β_c",
                )
            points.append(dict(ratio=ratio, m=abs_value, m_se=abs_se, chi=sq_value, chi_se=sq_se))
        stride = max(1, len(full[1]) // 200)
        traces[f"{ratio:g}"] = dict(
            t=(np.arange(1, len(full[1]) + 1) * RECORD * eta)[::stride].tolist(),
            mean=full[1].mean(1)[::stride].tolist(),
            one=full[1][::stride, 0].tolist(),
            burn=burn,
        )
    grid = np.concatenate([np.linspace(0.3, 0.98, 35), np.linspace(0.985, 0.9995, 8)])
    (B_lo, M_lo), (B_hi, M_hi) = p["size"]
    result.data = dict(
        beta_c=beta_c,
        size=p["size"],
        eta=eta,
        points=points,
        traces=traces,
        curve_ratio=grid.tolist(),
        curve_m=[magnetisation(r * beta_c) for r in grid],
        chi_ratio=np.concatenate([np.linspace(0.4, 0.97, 20), np.linspace(1.03, 2.0, 20)]).tolist(),
        curve_m_M=[finite_m_moments(r * beta_c, M_lo)["abs"] for r in np.linspace(0.3, 0.9, 7)],
        curve_m_M_ratio=np.linspace(0.3, 0.9, 7).tolist(),
        curve_rms_ratio=np.linspace(1.1, 2.0, 7).tolist(),
        curve_rms=[
            math.sqrt(2 / math.pi * finite_m_moments(r * beta_c, M_hi)["sq"] / M_hi)
            for r in np.linspace(1.1, 2.0, 7)
        ],
    )
    result.data["curve_chi"] = [susceptibility(r * beta_c) for r in result.data["chi_ratio"]]
    return result


def plot(result: CheckResult):
    d = result.data
    fig, (ax1, ax2, ax3) = figure(ncols=3)
    ax1.plot(d["curve_ratio"] + [1.0, 2.0], d["curve_m"] + [0.0, 0.0], "k-", label="mean field m*(β)")
    (B_lo, M_lo), (B_hi, M_hi) = d["size"]
    ax1.plot(d["curve_m_M_ratio"], d["curve_m_M"], "k:", label=f"exact E|x̄|, M = {M_lo}")
    ax1.plot(d["curve_rms_ratio"], d["curve_rms"], "k-.", label=f"(2E x̄²/π)^½ exact, M = {M_hi}")
    for i, pt in enumerate(d["points"]):
        ax1.errorbar(
            pt["ratio"],
            pt["m"],
            yerr=Z * pt["m_se"],
            fmt="o",
            color="C0",
            label="simulated (η→0, ±5 SE)" if i == 0 else None,
        )
    ax1.axvline(1.0, color="0.6", ls="--", lw=1)
    ax1.set(xlabel="β / β_c", ylabel="magnetisation |x̄|", title=f"β_c = {d['beta_c']:.5f} (θ = 1)")
    ax1.legend(fontsize=8)
    ratios = np.array(d["chi_ratio"])
    chi = np.array(d["curve_chi"])
    ax2.plot(ratios[ratios < 1], chi[ratios < 1], "k-", label="mean field χ")
    ax2.plot(ratios[ratios > 1], chi[ratios > 1], "k-")
    for i, pt in enumerate(d["points"]):
        ax2.errorbar(
            pt["ratio"],
            pt["chi"],
            yerr=Z * pt["chi_se"],
            fmt="s",
            color="C1",
            label="M·Var x̄ simulated (±5 SE)" if i == 0 else None,
        )
    ax2.axvline(1.0, color="0.6", ls="--", lw=1)
    ax2.set(xlabel="β / β_c", ylabel="susceptibility", yscale="log", title="fluctuations of x̄")
    ax2.legend(fontsize=8)
    for i, (key, tr) in enumerate(d["traces"].items()):
        B, M = d["size"][0] if float(key) < 1 else d["size"][1]
        ax3.plot(tr["t"], tr["mean"], color=f"C{i}", label=f"β = {key} β_c: mean of {B} (M = {M})")
        ax3.plot(tr["t"], tr["one"], color=f"C{i}", lw=0.6, alpha=0.5)
        ax3.axvline(tr["burn"], color=f"C{i}", ls=":", lw=1)
    ax3.set(xlabel="time", ylabel="x̄", title=f"x̄ from x_i = 1, step η = {d['eta']:g}")
    ax3.legend(fontsize=8)
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
