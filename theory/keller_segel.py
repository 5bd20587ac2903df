"""Check — 2-D Keller–Segel: the virial slope below and above the critical χ, and the run that says it collapsed.

System: N particles in R², no confinement, an attractive logarithmic pair potential W(z) = χ·log|z|
(``MeanFieldLangevin(Quadratic(0), LogInteraction(−χ), beta=β)``: ``LogInteraction(c)`` is W = −c·log|z|,
so c = −χ < 0 attracts):

    dX_i = −χ/N · Σ_{j≠i} (X_i − X_j)/|X_i − X_j|² dt + sqrt(2β) dW_i.

Virial identity (e.g. Fournier & Jourdain 2017, Ann. Appl. Probab. 27, for this particle system): with
m2 = 1/N Σ_i |X_i|², Itô's formula gives dm2 = (2/N)Σ_i X_i·dX_i + 2dβ dt, and pairing i with j,
Σ_i X_i·Σ_{j≠i}(X_i − X_j)/|X_i − X_j|² = Σ_{i<j} 1 = N(N−1)/2 exactly, so in d = 2

    d/dt E m2 = 4β − χ(N−1)/N

(a constant, whatever the law). Subcritical χ < χ_c(N) = 4βN/(N−1) (→ 4β, the 8π critical mass of the
classical normalisation ∂ρ = Δρ − ∇·(ρ∇c), −Δc = ρ, whose mass m corresponds to χ = βm/(2π); Blanchet,
Dolbeault & Perthame 2006): m2 grows;
supercritical: E m2 reaches 0 at t* = E m2(0)/(χ(N−1)/N − 4β) (1.03 for χ = 6, β = 1, N = 100 from
x_i ~ N(0, I₂)), so the particles must collapse by then, and the SDE has no solution past the collapse.

What is simulated: B replicas of N = 100 particles from N(0, I₂) by Euler–Maruyama (step dt), every step
saved over the fit window [0, T] (T = 0.5, or t*/2 if that is earlier), then on to t1 = 1.6.
Per replica the slope (m2(T) − m2(0))/T — the unbiased estimate: m2 is a drift plus a martingale with
independent increments; its replica mean is compared with 4β − χ(N−1)/N. The Euler step adds
dt²·1/N Σ|b_i|² per step to m2 (the realised quadratic variation 1/N Σ|Δx_i|² exceeds 4β·dt), heavy-tailed
for a singular drift; it is measured (QV/T − 4β, per replica) and allowed for.

Tolerance: 5·SE (SE over replicas) + |QV excess| + 5·SE of it. Smallest detectable error: the tolerance
(fast: ≈ 0.5 on slopes ±2, i.e. 25 %). Collapse: the run warns (``CollapseWarning``) in the supercritical
case, no later than t* + one look (``collapse_every·dt``), and not at all in the subcritical one.
Negative controls (``expect="differ"``): each slope against 4β, the slope without the interaction.
BROKEN: the simulated kernel repels (LogInteraction(+χ)): the slopes are 4β + χ(N−1)/N and nothing collapses.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from meanfield import MeanFieldLangevin, simulate
from meanfield.drift.potentials import LogInteraction, Quadratic
from meanfield.drift.resolution import CollapseWarning
from meanfield.seeds import derive_seed
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z
from meanfield.studies.validation import CheckResult

CLAIM = "2-D Keller–Segel: d/dt E m2 = 4β − χ(N−1)/N below and above χ_c = 4βN/(N−1); a supercritical run says it collapsed, a subcritical one says nothing"
BROKEN = dict(sign=1.0)  # the simulated kernel repels: LogInteraction(+χ); the references are unchanged
PRESETS = {
    "fast": dict(B=32, chis=(2.0, 6.0), dt=2e-3),
    "full": dict(B=128, chis=(1.0, 2.0, 3.0, 5.0, 6.0, 8.0), dt=1e-3),
}
N, BETA, D = 100, 1.0, 2
T_FIT, T1, SEED = 0.5, 1.6, 48
COLLAPSE_EVERY = 16  # simulate's default look interval


def slope(chi: float) -> float:
    """The virial slope d/dt E m2 = 2dβ − χ(N−1)/N (d = 2)."""
    return 2 * D * BETA - chi * (N - 1) / N


def critical_chi() -> float:
    """χ_c(N) = 4βN/(N − 1): the slope's zero."""
    return 2 * D * BETA * N / (N - 1)


def _run(chi: float, B: int, dt: float, sign: float):
    """m2 per replica on [0, t1]; the slope and QV excess on the fit window; the collapse warnings."""
    system = MeanFieldLangevin(Quadratic(0.0), LogInteraction(sign * chi), beta=BETA)
    x0 = torch.randn(B, N, D, generator=torch.Generator().manual_seed(derive_seed(SEED, f"x0/{chi}")),
                     dtype=torch.float64)  # fmt: skip  # (B, N, 2)
    t_star = D / -slope(chi) if slope(chi) < 0 else math.inf  # E m2(0) = d = 2 for N(0, I₂)
    fit = min(T_FIT, t_star / 2)
    fit = round(fit / dt) * dt
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CollapseWarning)
        early = simulate(system, x0, t1=fit, dt=dt, save_every=1, generator=derive_seed(SEED, f"noise/{chi}"))
        late = simulate(system, early.final, t0=fit, t1=T1, dt=dt, save_every=round(0.02 / dt),
                        generator=derive_seed(SEED, f"noise late/{chi}"))  # fmt: skip
    said = [w.message for w in caught if issubclass(w.category, CollapseWarning)]
    X = early.states  # (S, B, N, 2)
    m2 = X.square().sum(-1).mean(-1)  # (S, B)
    qv = (X[1:] - X[:-1]).square().sum(-1).mean(-1).sum(0) / fit  # (B,) realised quadratic variation / T
    per_replica = (m2[-1] - m2[0]) / fit  # (B,)
    stride = round(0.02 / dt)
    times = torch.cat([early.times[::stride], late.times[1:]])  # (T,)
    curve = torch.cat([m2[::stride], late.states[1:].square().sum(-1).mean(-1)])  # (T, B)
    return dict(
        slope=per_replica, excess=qv - 2 * D * BETA, fit=fit, t_star=t_star, said=said,
        times=times.tolist(), m2=curve.mean(1).tolist(), m2_se=(curve.std(1) / math.sqrt(B)).tolist(),
    )  # fmt: skip


def run(preset: str = "fast", *, sign: float = -1.0) -> CheckResult:
    """Run the check; ``sign`` is the sign of ``c`` in the simulated ``LogInteraction(c = sign·χ)`` only."""
    p = PRESETS[preset]
    B, dt = p["B"], p["dt"]
    result = CheckResult("keller_segel", CLAIM, preset=preset)
    points = []
    controls = {min(p["chis"]), max(p["chis"])}
    for chi in p["chis"]:
        r = _run(chi, B, dt, sign)
        value, se = float(r["slope"].mean()), float(r["slope"].std() / math.sqrt(B))
        bias, bias_se = float(r["excess"].mean()), float(r["excess"].std() / math.sqrt(B))
        tol = Z * se + abs(bias) + Z * bias_se
        side = "subcritical" if chi < critical_chi() else "supercritical"
        result.add(
            f"d/dt E m2 on [0, {r['fit']:g}], χ = {chi:g} ({side})",
            value,
            slope(chi),
            tol,
            detectable=tol,
            note=f"5·SE (B = {B}) + Euler excess of the quadratic variation {bias:+.3g} ± 5·{bias_se:.2g}",
        )
        if chi in controls:
            result.add(
                f"negative control: d/dt E m2 = 4β (no interaction), χ = {chi:g}",
                value,
                2 * D * BETA,
                tol,
                expect="differ",
                note="the attraction's −χ(N−1)/N is resolved",
            )
        said = r["said"]
        when = said[0].time if said else math.nan
        if side == "supercritical":
            lag = COLLAPSE_EVERY * dt
            result.add(f"collapse said (1 = yes), χ = {chi:g}", float(bool(said)), 1.0, 0.5,
                       note=f"CollapseWarning at t = {when:.3g}, replica {said[0].replica if said else '-'}")  # fmt: skip
            result.add(
                f"collapse said by the virial time t* = {r['t_star']:.3g}: (t_said − t*)⁺, χ = {chi:g}",
                max(0.0, when - r["t_star"]) if said else math.inf,
                0.0,
                lag,
                note=f"said at t = {when:.3g}; tolerance one look, collapse_every·dt = {lag:g}",
            )
        else:
            result.add(f"collapse said (1 = yes), χ = {chi:g}", float(bool(said)), 0.0, 0.5,
                       note="a subcritical run must say nothing")  # fmt: skip
        points.append(dict(chi=chi, slope=value, se=se, tol=tol, bias=bias, said=when, t_star=r["t_star"],
                           times=r["times"], m2=r["m2"], m2_se=r["m2_se"], fit=r["fit"]))  # fmt: skip
    result.data = dict(points=points, B=B, N=N, beta=BETA, dt=dt, chi_c=critical_chi())
    return result


def plot(result: CheckResult):
    d = result.data
    fig, (ax1, ax2) = figure(ncols=2)
    for i, pt in enumerate(d["points"]):
        t, m2, se = (np.array(pt[k]) for k in ("times", "m2", "m2_se"))
        color = f"C{i}"
        ax1.plot(t, m2, color=color, lw=1.2, label=f"χ = {pt['chi']:g}")
        ax1.fill_between(t, m2 - Z * se, m2 + Z * se, color=color, alpha=0.2, lw=0)
        line = np.linspace(0, min(t[-1], pt["t_star"]), 50)
        ax1.plot(line, m2[0] + (4 * d["beta"] - pt["chi"] * (d["N"] - 1) / d["N"]) * line, "k:", lw=1,
                 label="virial: slope 4β − χ(N−1)/N" if i == 0 else None)  # fmt: skip
        if math.isfinite(pt["t_star"]):
            ax1.axvline(pt["t_star"], color="0.6", ls=":", lw=1)
            ax1.annotate("t*", (pt["t_star"], 0.1), color="0.4", fontsize=8)
        if math.isfinite(pt["said"]):
            ax1.axvline(pt["said"], color=color, ls="--", lw=1)
            ax1.annotate("collapse said", (pt["said"], m2.max() * 0.9), color=color, fontsize=8)
    ax1.set(xlabel="t", ylabel="E m2 = E 1/N Σ|X_i|²",
            title=f"E m2 (±5 SE, B = {d['B']}, N = {d['N']})")  # fmt: skip
    ax1.legend(fontsize=8)
    chis = np.array([pt["chi"] for pt in d["points"]])
    grid = np.linspace(0, chis.max() * 1.1, 50)
    ax2.plot(grid, 4 * d["beta"] - grid * (d["N"] - 1) / d["N"], "k-", lw=1, label="4β − χ(N−1)/N")
    ax2.errorbar(chis, [pt["slope"] for pt in d["points"]], [pt["tol"] for pt in d["points"]], fmt="o",
                 label="measured (± tolerance)")  # fmt: skip
    ax2.axvline(d["chi_c"], color="0.6", ls="--", lw=1, label=f"χ_c = 4βN/(N−1) = {d['chi_c']:.3g}")
    ax2.axhline(0, color="0.8", lw=0.8)
    ax2.set(xlabel="χ", ylabel="d/dt E m2", title=f"slope before the collapse (dt = {d['dt']:g})")
    ax2.legend(fontsize=8)
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
