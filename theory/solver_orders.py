"""Check 3 — strong and weak orders of every solver in ``meanfield.SOLVERS``, and their limit (the Itô law).

Problems with exact solutions, all on shared Brownian paths (``BrownianIncrements.sample(..., levy_area=True)``
coarsened onto ≥ 4 nested grids dt = T/L, so every step size sees the same path):

- geometric Brownian motion (diagonal noise) dX = μX dt + σX dW, X_T = X_0 exp((μ − σ²/2)T + σW_T) (Itô;
  Kloeden & Platen 1992, §4.4), μ = 0.5, σ = 0.8, T = 1. Strong error E|X_T^dt − X_T| on the same paths.
  Weak error E[(X_T^dt)²] − X_0² e^{(2μ+σ²)T}, estimated as the mean of (X_T^dt)² − X_T² over the same paths:
  the exact solution is a control variate with a closed-form mean, so the estimate is unbiased and its variance
  shrinks with the strong error (common random numbers);
- Ornstein–Uhlenbeck (additive noise) dY = −aY dt + σ dW, a = 2, σ = 1, Y_T = e^{−aT}Y_0 + σ∫e^{−a(T−s)}dW_s,
  computed on a path 4× finer than the finest grid from its increments ΔW_n and space-time Lévy areas H_n:
  ∫_n e^{−a(T−s)}dW_s = f̄_n·(ΔW_n − a·h·H_n) + r_n, f̄_n the mean of e^{−a(T−s)} over the sub-step; the remainder
  r_n (the second Legendre mode of the Brownian bridge) is O(a²h^{2.5}) per sub-step, O(a²h²) in total:
  E|error| = 2.3e-7 (fast) / 1.4e-8 (full) against a 64× finer path, ≈ 1 % of the smallest error measured
  (srk at the finest step), a slope bias < 0.01;
- the double well with additive noise dY = (Y − Y³)dt + σ dW (no closed form) against srk on the same path
  8× (fast) / 16× (full) finer, for srk and euler only: on the *linear* OU drift the order-1.5 error terms of
  SRK (Rößler 2010, SRA1) vanish and it converges with order 2, so a nonlinear drift is needed to see 1.5.

Declared orders: ``get_solver(name).strong_order(noise)`` / ``.weak_order(noise)`` (torchsde's declarations).
Where a solver converges faster than declared on these problems the declared order is only a lower bound and
the row checks the shortfall max(0, declared − slope): reversible_heun on GBM (declared 0.5 for diagonal
noise; scalar GBM has commutative noise and it reaches ≈ 0.9), srk on OU (declared 1.5, order 2 for a linear
drift). A second row then checks the slope against the order these problems show (1.0 and 2.0).

Tolerance: a slope is the weighted least-squares fit of log error on log dt (weights from the delta-method SE
of each point, levels treated as independent; they share paths, and the positive correlation this gives
makes the slope's SE conservative). A slope row passes if |slope − declared| ≤ band + 5·SE(slope), with
band = 0.15 (strong) and 0.25 (weak): the deterministic pre-asymptotic allowance. The exact weak error of each
one-step scheme on GBM (Gauss–Hermite quadrature of its one-step map, exact for these polynomial maps) has
local slopes 0.79 → 0.98 for EM on E[X²] over dt = 1/4 … 1/128, and 1.70–1.76 for srk there (1.64 between
1/256 and 1/512): srk approaches its declared weak order 1.5 only at smaller steps. The weak rows of the
solvers of declared strong order 0.5 (euler, torchsde_euler, reversible_heun) use 8× more paths, because
their control variate is weaker (Var ∝ dt).
Exact-law rows: E[X_T] at the finest step (as e^{μT} + mean(X_T^dt − X_T)) against e^{μT} within
5·SE + 0.5·dt·e^{μT}, the second term a bound on the weak bias of E[X_T] (exactly e^{μT}(1 − (1+μdt)^{T/dt}e^{−μT})
≈ 0.125·dt·e^{μT} for euler and milstein; ≈ 0.11·dt·e^{μT} (midpoint, heun, log_ode) to 0.16·dt·e^{μT}
(reversible_heun) measured for the others).

False-failure rate ≤ 5.7e-7 per row for the statistical part. Power (fast preset): a strong slope off by more
than ≈ 0.16–0.21, a weak slope off by more than ≈ 0.3–0.55, E[X_T] off by more than ≈ 0.5 % fails.
Negative controls (expect="differ"): wrong declared orders (euler strong 1.0 on GBM, srk strong 1.0,
euler 0.5 on OU, heun weak 2.0) and the Stratonovich limit e^{(μ+σ²/2)T} (38 % above the Itô mean) must be
rejected. BROKEN: GBM simulated with drift μ + σ²/2 (the Itô correction dropped: the Stratonovich reading of
the same equation) must fail the strong, weak and exact-law rows.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from tqdm.auto import tqdm

from meanfield import SDE, SOLVERS, BrownianIncrements, MeanFieldLangevin, get_solver, simulate
from meanfield.drift.potentials import DoubleWell, Quadratic
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z, loglog_slope
from meanfield.studies.validation import CheckResult

CLAIM = (
    "every solver's strong/weak order on GBM and OU matches its declared order, and its limit is the Itô law"
)
BROKEN = dict(drift_shift=0.32)  # GBM simulated with drift μ + σ²/2: the Itô correction dropped
PRESETS = {
    "fast": dict(
        levels=(4, 8, 16, 32, 64, 128),
        n=8000,
        weak_boost=8,
        dw_levels=(32, 64, 128, 256),
        dw_n=2000,
        dw_refine=8,
    ),
    "full": dict(
        levels=(4, 8, 16, 32, 64, 128, 256, 512),
        n=40_000,
        weak_boost=8,
        dw_levels=(32, 64, 128, 256, 512),
        dw_n=8000,
        dw_refine=16,
    ),
}
MU, SIGMA, T = 0.5, 0.8, 1.0  # GBM
A, OU_SIGMA, Y0 = 2.0, 1.0, 1.5  # OU: beta = σ²/2
DW_BETA, DW_X0 = 0.5, 0.5  # double well with additive noise
BAND_STRONG, BAND_WEAK = 0.15, 0.25
# declared order below what these problems show: (problem, solver) -> (the order they show, why)
LOWER_BOUNDS = {
    ("gbm", "reversible_heun"): (
        1.0,
        "commutative noise",
        "scalar GBM has commutative noise; torchsde declares 0.5 for diagonal noise in general",
    ),
    ("ou", "srk"): (
        2.0,
        "linear drift",
        "SRA1 on a linear drift: the unresolved Itô–Taylor terms are O(a²σh^2.5) per step",
    ),
}
CHUNK, DW_CHUNK = 8000, 2000  # paths simulated at once
OU_REFINE = 4  # the OU reference path is this much finer than the finest grid
DW_SOLVERS = ("euler", "srk")
WRONG = [  # negative controls: (fit, label, solver, a wrong order)
    ("gbm", "strong GBM", "euler", 1.0),
    ("gbm", "strong GBM", "srk", 1.0),
    ("ou", "strong OU", "euler", 0.5),
    ("weak", "weak GBM", "heun", 2.0),
]


class _Moments:
    """Running sums of a per-path quantity, for a mean and its standard error."""

    def __init__(self) -> None:
        self.n, self.s1, self.s2 = 0, 0.0, 0.0

    def add(self, x: torch.Tensor) -> None:
        self.n += x.numel()
        self.s1 += float(x.sum())
        self.s2 += float(x.square().sum())

    @property
    def mean(self) -> float:
        return self.s1 / self.n

    @property
    def se(self) -> float:
        var = max(self.s2 / self.n - self.mean**2, 0.0) * self.n / (self.n - 1)
        return math.sqrt(var / self.n)


def _paths(n_steps: int, n: int, dt: float, seed: int) -> BrownianIncrements:
    return BrownianIncrements.sample(
        n_steps, (n, 1, 1), dt, generator=torch.Generator().manual_seed(seed), levy_area=True
    )


def _ou_exact(fine: BrownianIncrements) -> torch.Tensor:
    """Y_T of dY = −aY dt + σ dW from the fine increments and Lévy areas (remainder O(a²h²) in total)."""
    h, N = fine.dt, len(fine)
    t_next = h * torch.arange(1, N + 1, dtype=torch.float64)  # (N,)
    f_bar = torch.exp(-A * (T - t_next)) * (1.0 - math.exp(-A * h)) / (A * h)  # (N,) mean of e^{−a(T−s)}
    stoch = (f_bar.view(-1, 1, 1, 1) * (fine.increments - A * h * fine.H)).sum(0)  # (n, 1, 1)
    return math.exp(-A * T) * Y0 + OU_SIGMA * stoch


def _fit(dts, errors, ses):
    est = loglog_slope(dts, np.abs(errors), ses)
    return est.value, est.se


def run(preset: str = "fast", *, drift_shift: float = 0.0) -> CheckResult:
    """Run the check; ``drift_shift ≠ 0`` adds ``drift_shift·X`` to the *simulated* GBM drift only."""
    p = PRESETS[preset]
    levels, n, L_max = list(p["levels"]), p["n"], max(p["levels"])
    dts = [T / L for L in levels]
    names = sorted(SOLVERS)
    result = CheckResult("solver_orders", CLAIM, preset=preset)
    gbm = SDE(lambda t, x: (MU + drift_shift) * x, lambda t, x: SIGMA * x, noise="diagonal")
    ou = MeanFieldLangevin(Quadratic(A), beta=OU_SIGMA**2 / 2)
    dw = MeanFieldLangevin(DoubleWell(), beta=DW_BETA)
    solvers = {name: get_solver(name) for name in names}

    # GBM: strong (|X^dt − X|), weak ((X^dt)² − X²), limit (X^dt at the finest step), chunk by chunk
    strong = {s: [_Moments() for _ in levels] for s in names}
    weak = {s: [_Moments() for _ in levels] for s in names}
    final = {s: _Moments() for s in names}
    n_paths = {s: n * (p["weak_boost"] if solvers[s].strong_order("diagonal") < 1 else 1) for s in names}
    quiet = preset == "fast"
    for chunk in tqdm(range(math.ceil(max(n_paths.values()) / CHUNK)), desc="GBM chunks", disable=quiet):
        fine = _paths(L_max, CHUNK, T / L_max, seed=1000 + chunk)
        x0 = torch.ones(CHUNK, 1, 1, dtype=torch.float64)  # (n, 1, 1)
        exact = x0 * torch.exp((MU - SIGMA**2 / 2) * T + SIGMA * fine.increments.sum(0))  # (n, 1, 1)
        paths = {L: fine.coarsen(L_max // L) for L in levels}
        for s in names:
            if chunk * CHUNK >= n_paths[s]:
                continue
            for i, L in enumerate(levels):
                xT = simulate(gbm, x0, t1=T, dt=T / L, solver=solvers[s], brownian=paths[L]).final
                strong[s][i].add((xT - exact).abs())
                weak[s][i].add(xT.square() - exact.square())
            final[s].add(xT - exact)  # E X_T^dt − e^{μT}, the exact solution as control variate

    # OU: strong error against the exact solution on a 4× finer path (chunks of CHUNK paths)
    ou_strong = {s: [_Moments() for _ in levels] for s in names}
    ou_refine = OU_REFINE * L_max
    for chunk in tqdm(range(math.ceil(n / CHUNK)), desc="OU chunks", disable=quiet):
        fine = _paths(ou_refine, CHUNK, T / ou_refine, seed=2000 + chunk)
        y_exact = _ou_exact(fine)  # (n, 1, 1)
        y0 = torch.full((CHUNK, 1, 1), Y0, dtype=torch.float64)
        paths = {L: fine.coarsen(ou_refine // L) for L in levels}
        for s in names:
            for i, L in enumerate(levels):
                yT = simulate(ou, y0, t1=T, dt=T / L, solver=solvers[s], brownian=paths[L]).final
                ou_strong[s][i].add((yT - y_exact).abs())

    # double well (additive, nonlinear): srk and euler against srk on a finer grid of the same path
    dw_levels, dw_fine = list(p["dw_levels"]), max(p["dw_levels"]) * p["dw_refine"]
    dw_strong = {s: [_Moments() for _ in dw_levels] for s in DW_SOLVERS}
    for chunk in tqdm(range(math.ceil(p["dw_n"] / DW_CHUNK)), desc="double-well chunks", disable=quiet):
        fine = _paths(dw_fine, DW_CHUNK, T / dw_fine, seed=3000 + chunk)
        z0 = torch.full((DW_CHUNK, 1, 1), DW_X0, dtype=torch.float64)
        z_ref = simulate(dw, z0, t1=T, dt=fine.dt, solver="srk", brownian=fine).final  # (n, 1, 1)
        for i, L in enumerate(dw_levels):
            path = fine.coarsen(dw_fine // L)
            for s in DW_SOLVERS:
                zT = simulate(dw, z0, t1=T, dt=T / L, solver=solvers[s], brownian=path).final
                dw_strong[s][i].add((zT - z_ref).abs())

    # rows
    fits: dict[str, dict] = {}
    note_s = f"band {BAND_STRONG} + 5·SE(slope); weighted log-log fit over dt = 1/{levels[0]}…1/{L_max}"
    note_w = f"band {BAND_WEAK} + 5·SE(slope); weak error of E[X²] with the exact solution as control variate"

    def slope_row(label, s, declared, moments, band, note, dt_list=dts, lower_bound=False, kind=""):
        errs = [m.mean for m in moments]
        ses = [m.se for m in moments]
        slope, se = _fit(dt_list, errs, ses)
        tol = band + Z * se
        fits.setdefault(kind, {})[s] = dict(slope=slope, se=se, declared=declared, tol=tol)
        if lower_bound:
            result.add(
                f"{label} {s}: shortfall max(0, declared − slope), declared {declared:g} (lower bound)",
                max(0.0, declared - slope),
                0.0,
                tol,
                detectable=tol,
                note=f"measured slope {slope:.3f} ± {se:.3f}; {note}",
            )
        else:
            result.add(
                f"{label} {s}: slope vs declared {declared:g}",
                slope,
                declared,
                tol,
                detectable=tol,
                note=f"± {se:.3f} (1 SE); {note}",
            )
        return slope, se

    for kind, label, noise, moments in (
        ("gbm", "strong GBM", "diagonal", strong),
        ("ou", "strong OU", "additive", ou_strong),
    ):
        for s in names:
            declared = solvers[s].strong_order(noise)
            seen = LOWER_BOUNDS.get((kind, s))
            slope, se = slope_row(
                label, s, declared, moments[s], BAND_STRONG, note_s, lower_bound=seen is not None, kind=kind
            )
            if seen is not None:
                order, why, note = seen
                tol = BAND_STRONG + Z * se
                result.add(
                    f"{label} {s}: slope vs {order:g} ({why})", slope, order, tol, detectable=tol, note=note
                )
    dw_dts = [T / L for L in dw_levels]
    for s in DW_SOLVERS:
        slope_row(
            "strong double well (additive)",
            s,
            solvers[s].strong_order("additive"),
            dw_strong[s],
            BAND_STRONG,
            f"band {BAND_STRONG} + 5·SE; reference srk at dt/{p['dw_refine']} on the same path, n={p['dw_n']}",
            dt_list=dw_dts,
            kind="dw",
        )
    for s in names:
        slope_row(
            "weak GBM E[X²]", s, solvers[s].weak_order("diagonal"), weak[s], BAND_WEAK, note_w, kind="weak"
        )

    exact_mean = math.exp(MU * T)
    strat_mean = math.exp((MU + SIGMA**2 / 2) * T)
    bias = 0.5 * (T / L_max) * exact_mean
    for s in names:
        m = final[s]
        result.add(
            f"limit {s}: E X_T at dt=1/{L_max} vs Itô e^(μT)",
            exact_mean + m.mean,
            exact_mean,
            Z * m.se + bias,
            detectable=Z * m.se + bias,
            note=f"5·SE + 0.5·dt·e^(μT) weak-bias bound; e^(μT) + mean(X_T^dt − X_T), n={m.n}",
        )

    for kind, label, s, wrong in WRONG:
        f = fits[kind][s]
        result.add(
            f"negative control: {label} {s} slope vs wrong order {wrong:g}",
            f["slope"],
            wrong,
            f["tol"],
            detectable=f["tol"],
            expect="differ",
            note="a declared order off by ≥ 0.5 must be rejected",
        )
    for s in ("euler", "midpoint"):
        m = final[s]
        result.add(
            f"negative control: {s} E X_T vs Stratonovich e^((μ+σ²/2)T)",
            exact_mean + m.mean,
            strat_mean,
            Z * m.se + bias,
            expect="differ",
            note="the other calculus's limit (38 % higher) must be rejected",
        )

    result.data = dict(
        names=names,
        dts=dts,
        dw_dts=dw_dts,
        gbm=dict(
            errors={s: [m.mean for m in strong[s]] for s in names},
            se={s: [m.se for m in strong[s]] for s in names},
        ),
        weak=dict(
            errors={s: [abs(m.mean) for m in weak[s]] for s in names},
            se={s: [m.se for m in weak[s]] for s in names},
        ),
        ou=dict(
            errors={s: [m.mean for m in ou_strong[s]] for s in names},
            se={s: [m.se for m in ou_strong[s]] for s in names},
        ),
        dw=dict(
            errors={s: [m.mean for m in v] for s, v in dw_strong.items()},
            se={s: [m.se for m in v] for s, v in dw_strong.items()},
        ),
        fits=fits,
        n_paths=n_paths,
        n=n,
        mu=MU,
        sigma=SIGMA,
    )
    return result


_STYLE = {  # marker, colour; solvers that coincide on these problems share a colour
    "euler": ("o", "C0"),
    "torchsde_euler": ("x", "C0"),
    "milstein": ("s", "C1"),
    "euler_heun": ("+", "C1"),
    "midpoint": ("^", "C2"),
    "heun": ("v", "C2"),
    "log_ode": ("1", "C2"),
    "reversible_heun": ("D", "C4"),
    "srk": ("*", "C3"),
}


def _panel(ax, dts, errors, ses, guides, title, ylabel):
    """Error curves per solver (±5 SE) and guide lines ``∝ dt^p`` through ``0.5 × (dt, error)`` anchors."""
    dts = np.asarray(dts)
    for s in errors:
        marker, colour = _STYLE.get(s, ("o", "k"))
        ax.errorbar(
            dts,
            errors[s],
            yerr=Z * np.asarray(ses[s]),
            fmt=marker + "-",
            color=colour,
            ms=5,
            lw=0.8,
            capsize=2,
            label=s,
            alpha=0.85,
        )
    for order, grid, anchor in guides:
        grid = np.asarray(grid)
        guide = 0.5 * anchor * (grid / grid[-1]) ** order
        ax.plot(grid, guide, "k--", lw=0.8, alpha=0.7)
        ax.annotate(f"∝ dt^{order:g}", (grid[-1], guide[-1]), fontsize=7, ha="left", va="top")
    ax.set(xscale="log", yscale="log", xlabel="dt", ylabel=ylabel, title=title)


def plot(result: CheckResult):
    d = result.data
    names, fits, dts = d["names"], d["fits"], d["dts"]
    fig, axes = figure(ncols=2, nrows=2, width=5.4, height=4.1)
    ax1, ax2, ax3, ax4 = axes.flat
    gbm, ou, weak, dw = d["gbm"]["errors"], d["ou"]["errors"], d["weak"]["errors"], d["dw"]["errors"]
    _panel(
        ax1,
        dts,
        gbm,
        d["gbm"]["se"],
        [(0.5, dts, gbm["euler"][-1]), (1.0, dts, gbm["midpoint"][-1]), (1.5, dts, gbm["srk"][-1])],
        "strong error, GBM (diagonal noise)",
        "E|X_T^dt − X_T|  (±5 SE)",
    )
    ax1.legend(fontsize=6.5, ncol=2, loc="lower right")
    _panel(
        ax2,
        dts,
        ou,
        d["ou"]["se"],
        [(1.0, dts, ou["midpoint"][-1]), (2.0, dts, ou["srk"][-1]), (1.5, d["dw_dts"], dw["srk"][-1])],
        "strong error, OU (—) and double well (⋯), additive",
        "E|Y_T^dt − Y_T|  (±5 SE)",
    )
    for s, v in dw.items():
        ax2.plot(
            d["dw_dts"], v, ":", marker=_STYLE[s][0], color=_STYLE[s][1], ms=5, label=f"{s}, double well"
        )
    ax2.legend(
        fontsize=6.5,
        loc="lower right",
        handles=ax2.get_lines()[-2:],
        title="solvers: see left",
        title_fontsize=6.5,
    )
    _panel(
        ax3,
        dts,
        weak,
        d["weak"]["se"],
        [(1.0, dts, weak["midpoint"][-1]), (1.5, dts, weak["srk"][-1])],
        "weak error, GBM: |E(X_T^dt)² − exp((2μ+σ²)T)|",
        "weak error  (±5 SE)",
    )
    x = np.arange(len(names))
    for k, (kind, label, colour) in enumerate(
        [("gbm", "strong GBM", "C0"), ("ou", "strong OU", "C2"), ("weak", "weak GBM E[X²]", "C3")]
    ):
        off = (k - 1) * 0.25
        for i, s in enumerate(names):
            f = fits[kind][s]
            ax4.errorbar(
                x[i] + off,
                f["slope"],
                yerr=f["tol"],
                fmt="o",
                color=colour,
                ms=4,
                capsize=3,
                label=f"{label}: fitted ± tol" if i == 0 else None,
            )
            ax4.plot(x[i] + off, f["declared"], "_", color="k", ms=9, mew=2)
            if (kind, s) in LOWER_BOUNDS:
                ax4.annotate(
                    "≥",
                    (x[i] + off, f["declared"]),
                    xytext=(-7, 0),
                    textcoords="offset points",
                    fontsize=9,
                    ha="right",
                    va="center",
                )
    ax4.plot([], [], "_", color="k", ms=9, mew=2, label="declared (≥: a lower bound here)")
    ax4.set_xticks(x, names, rotation=40, ha="right", fontsize=8)
    ax4.set(ylabel="order", title="declared order vs fitted slope")
    ax4.legend(fontsize=7, loc="upper left")
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
