"""Check 11 — tokens through depth: self-attention dynamics (Geshkovski, Letrouit, Polyanskiy & Rigollet 2023).

n tokens on S^{d−1} move by ẋ_i = P_{x_i} Σ_j A_ij x_j, A_ij = e^{β⟨x_i,x_j⟩}/Z_i (Q = K = V = I; SA: Z_i = Σ_j e^{β⟨x_i,x_j⟩},
USA: Z_i = n). Derivations in docs/theory/token_dynamics.md.

A — a single cluster (d = 3) and the rate near consensus. With x_i = e + y_i, y_i ⊥ e small, the weights are uniform
to first order (A_ij = 1/n + O(|y|²) for SA, e^β/n for USA) and P_{x_i}(e + ȳ) = ȳ − y_i + O(|y|²), so ẏ_i = c(ȳ − y_i)
with c = 1 (SA, every β) or c = e^β (USA): the deviations contract at rate c and 1 − |x̄|² (half the mean squared
pairwise distance) at rate 2c. The Euler chain (step η, then the projection, which is O(|y|²)) multiplies the
deviations by 1 − cη per step: the exact rate of the chain is −2·log(1 − cη)/η per unit time. Measured: the slope
of log(1 − |x̄|²) while it falls from 1e-5 to 1e-11, per replica (mean ± SE over B replicas), and the fraction of
replicas that end in one cluster (every pairwise distance < 1e-3). Proven for small and large β in d ≥ 3 (A
mathematical perspective on Transformers, §4–5), conjectured for every β; checked at β = 1.

B — metastability from the uniform law on the circle (d = 2). Linearising ∂_t μ + ∂_θ(μ V[μ]) = 0 at μ = 1/(2π), the
Fourier mode k of μ grows at λ_k = k² I_k(β)/(β I_0(β)) (SA) or k² I_k(β)/β (USA); the Euler chain's mode grows
by 1 + λ_k η per step (rate log(1 + λ_k η)/η). Measured: the slope of log|ĉ_k(t)|, ĉ_k = 1/n Σ_j e^{ikθ_j}, for i.i.d.
uniform tokens (|ĉ_k(0)| ≈ n^{−1/2}) until the largest mode reaches ≈ 7·n^{−1/2}, per replica. The nonlinear terms
are O(|ĉ|) relative: allowance |slope(whole window) − slope(first half)| + 5·SE. Then the number of clusters at
the metastable plateau (t = 10/λ_{k*}) against the fastest-growing mode k* = argmax k² I_k(β) (observed, not
proven: the neighbours k* ± 1 grow almost as fast, so the tolerance is ±1 cluster on the mean over replicas).

C — depth as time: L residual copies of one frozen ParticleAttention layer, x ← x + (T/L)·layer(x) (the network
code path, ``meanfield.nn.tokens.depth_flow``), against the ODE solved by scipy's DOP853 at rtol 1e-13 from the
layer's system (``attention_system``): the error at T falls as L^{−1} (Euler, order 1). Measured: the slope over
the two finest depths; tolerance twice the change of the slope between the last two pairs of depths (the O(1/L)
correction of the slope) + 0.02.

Negative controls: A — the rate of |x_i − x_j| (c, not 2c) and SA's rate for USA; B — λ_k with k in place of k²
and SA's rates at β·1.25; C — order 2. BROKEN: the simulated attention's β is 1.25× the references' (a network
whose 1/√h is misplaced): A's USA rate, B's rates and C's limit move.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import integrate

from meanfield import simulate
from meanfield.nn import ParticleAttention
from meanfield.nn.tokens import (
    SelfAttentionDynamics,
    attention_system,
    count_clusters,
    depth_flow,
    fastest_mode,
    fourier_modes,
    growth_rate,
    mean_inner_product,
)
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z, loglog_slope
from meanfield.studies.validation import CheckResult

CLAIM = "Tokens: one cluster at rate 2 (SA) / 2e^β (USA); circle modes grow at k²I_k(β)/(βI₀(β)) (SA), k²I_k(β)/β (USA); depth L → ODE at order 1"
BROKEN = dict(beta_scale=1.25)  # the simulated attention's β is 1.25× the references'
PRESETS = {
    "fast": dict(
        consensus=dict(d=3, n=32, B=16, beta=1.0, eta=0.05, T=40.0),
        circle=dict(beta=9.0, n=8000, B=8, steps=40, modes=(1, 2, 3, 4, 5, 6), n_meta=1000, B_meta=8),
        depth=dict(d=16, M=4, n=12, B=4, T=1.0, depths=(8, 16, 32, 64, 128)),
    ),
    "full": dict(
        consensus=dict(d=3, n=64, B=32, beta=1.0, eta=0.025, T=40.0),
        circle=dict(beta=25.0, n=40000, B=16, steps=80, modes=tuple(range(1, 13)), n_meta=2000, B_meta=16),
        depth=dict(d=32, M=8, n=32, B=8, T=1.0, depths=(8, 16, 32, 64, 128, 256, 512)),
    ),
}


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True)


# --- A: consensus ------------------------------------------------------------------------------------------------
def consensus(p: dict, *, normalized: bool, beta_scale: float, generator: torch.Generator) -> dict:
    """Simulate to near-consensus; the slope of log(1 − |x̄|²) per replica while it falls from 1e-5 to 1e-11."""
    system = SelfAttentionDynamics.identity(
        p["d"], inverse_temperature=p["beta"] * beta_scale, sphere=True, normalized=normalized
    )
    eta = p["eta"] if normalized else p["eta"] / math.exp(p["beta"])
    x0 = _unit(torch.randn(p["B"], p["n"], p["d"], dtype=torch.float64, generator=generator))
    traj = simulate(
        system, x0, t1=p["T"] if normalized else p["T"] / math.exp(p["beta"]), dt=eta, save_every=1
    )
    spread = (
        (1 - mean_inner_product(traj.states.flatten(0, 1)).view(len(traj.times), -1))
        .clamp_min(1e-300)
        .numpy()
    )
    t = np.asarray(traj.times)
    slopes = []
    for b in range(p["B"]):
        window = (spread[:, b] < 1e-5) & (spread[:, b] > 1e-11)
        slopes.append(np.polyfit(t[window], np.log(spread[window, b]), 1)[0] if window.sum() >= 3 else np.nan)
    final = traj.final
    one = (torch.cdist(final, final).amax((1, 2)) < 1e-3).double().mean().item()
    c = 1.0 if normalized else math.exp(p["beta"])
    return dict(
        slopes=np.asarray(slopes),
        one_cluster=one,
        eta=eta,
        rate=-2 * math.log(1 - c * eta) / eta,
        rate_continuous=2 * c,
        c=c,
        t=t[:: max(1, len(t) // 200)].tolist(),
        spread=np.median(spread, 1)[:: max(1, len(t) // 200)].tolist(),
    )


# --- B: circle -----------------------------------------------------------------------------------------------------
def circle_growth(p: dict, *, normalized: bool, beta_scale: float, generator: torch.Generator) -> dict:
    """Slopes of log|ĉ_k| from i.i.d. uniform tokens over ``steps`` Euler steps up to log(7)/λ_{k*}, per replica."""
    beta, modes = p["beta"], list(p["modes"])
    lam = growth_rate(np.asarray(modes), beta, normalized=normalized)
    lam_top = growth_rate(fastest_mode(beta), beta, normalized=normalized)
    horizon = math.log(7.0) / lam_top  # the largest mode grows ≈ 7×: |ĉ| ≈ 7·n^{−1/2}
    eta = horizon / p["steps"]
    system = SelfAttentionDynamics.identity(2, inverse_temperature=beta * beta_scale, sphere=True, normalized=normalized)
    theta = 2 * math.pi * torch.rand(p["B"], p["n"], dtype=torch.float64, generator=generator)
    x0 = torch.stack((theta.cos(), theta.sin()), -1)  # (B, n, 2)
    traj = simulate(system, x0, t1=horizon, dt=eta, save_every=1)
    logc = torch.stack([fourier_modes(x, modes) for x in traj.states]).abs().log().numpy()  # (S, B, K)
    t = np.asarray(traj.times)
    half = len(t) // 2 + 1

    def slope(upto: int) -> np.ndarray:
        tt = t[:upto] - t[:upto].mean()
        return (tt[:, None, None] * logc[:upto]).sum(0) / (tt**2).sum()  # (B, K)

    whole, first = slope(len(t)), slope(half)
    return dict(
        modes=modes,
        eta=eta,
        rate=(np.log1p(lam * eta) / eta).tolist(),
        rate_continuous=lam.tolist(),
        mean=whole.mean(0).tolist(),
        se=(whole.std(0, ddof=1) / math.sqrt(p["B"])).tolist(),
        nonlinear=np.abs(whole.mean(0) - first.mean(0)).tolist(),
        amplitude=float(np.exp(logc[-1]).max()),
    )


def circle_clusters(p: dict, *, beta_scale: float, generator: torch.Generator) -> dict:
    """Clusters at the metastable plateau t = 10/λ_{k*} from i.i.d. uniform tokens (SA)."""
    beta = p["beta"]
    lam_top = growth_rate(fastest_mode(beta), beta)
    eta = 0.1 / lam_top
    system = SelfAttentionDynamics.identity(2, inverse_temperature=beta * beta_scale, sphere=True)
    theta = 2 * math.pi * torch.rand(p["B_meta"], p["n_meta"], dtype=torch.float64, generator=generator)
    x0 = torch.stack((theta.cos(), theta.sin()), -1)  # (B, n, 2)
    traj = simulate(system, x0, t1=100 * eta, dt=eta, save_every=10)
    counts = [count_clusters(x, radius=0.05).double() for x in traj.states]  # S × (B,)
    final = traj.final
    return dict(
        counts=counts[-1].tolist(),
        t=[float(s * lam_top) for s in traj.times],
        mean_counts=[c.mean().item() for c in counts],
        angles=torch.atan2(final[0, :, 1], final[0, :, 0]).tolist(),
        angles0=theta[0].tolist(),
    )


# --- C: depth ------------------------------------------------------------------------------------------------------
def depth_order(p: dict, *, beta_scale: float, generator: torch.Generator) -> dict:
    """Error of the L-layer network against the ODE, for each depth L."""
    layer = ParticleAttention(p["d"], p["M"], generator=generator, dtype=torch.float64).requires_grad_(False)
    system = attention_system(layer)  # the references' ODE
    with torch.no_grad():
        layer.W_QKV[:, 0] *= beta_scale  # BROKEN: the network's queries (its β) scaled
    x0 = torch.randn(p["B"], p["n"], p["d"], dtype=torch.float64, generator=generator)
    shape = x0.shape

    def rhs(_t: float, y: np.ndarray) -> np.ndarray:
        return system.drift(0.0, torch.from_numpy(y).view(shape)).reshape(-1).numpy()

    sol = integrate.solve_ivp(
        rhs, (0.0, p["T"]), x0.reshape(-1).numpy(), method="DOP853", rtol=1e-13, atol=1e-13
    )
    exact = torch.from_numpy(sol.y[:, -1]).view(shape)
    errors = [
        (depth_flow(layer, x0, depth=L, T=p["T"]) - exact).square().sum(-1).mean().sqrt().item()
        for L in p["depths"]
    ]
    return dict(depths=list(p["depths"]), errors=errors, scale=exact.square().sum(-1).mean().sqrt().item())


def run(preset: str = "fast", *, beta_scale: float = 1.0) -> CheckResult:
    """Run the check; ``beta_scale ≠ 1`` scales the simulated attention's β only (a broken input that must fail)."""
    p = PRESETS[preset]
    result = CheckResult("token_dynamics", CLAIM, preset=preset)
    gen = torch.Generator().manual_seed(15)
    data: dict = {}

    # A: one cluster, and the rate near consensus
    pc = p["consensus"]
    for normalized, kind in ((True, "SA"), (False, "USA")):
        out = consensus(pc, normalized=normalized, beta_scale=beta_scale, generator=gen)
        s = out["slopes"]
        value = float(-np.nanmean(s)) if np.isfinite(s).any() else math.nan
        se = (
            float(np.nanstd(s, ddof=1) / math.sqrt(np.isfinite(s).sum()))
            if np.isfinite(s).sum() > 1
            else math.nan
        )
        tol = Z * se + 1e-3 * out["rate"]
        result.add(
            f"A: replicas in one cluster at t = {pc['T']:g}{'' if normalized else '·e^−β'}, {kind}, d = {pc['d']}, β = {pc['beta']:g}",
            out["one_cluster"],
            1.0,
            0.0,
            detectable=1 / pc["B"],
            note=f"every |x_i − x_j| < 1e-3; {pc['B']} replicas of n = {pc['n']} i.i.d. uniform tokens",
        )
        result.add(
            f"A: decay rate of 1 − |x̄|², {kind}",
            value,
            out["rate"],
            tol,
            detectable=tol,
            note=(
                f"chain's exact −2·log(1 − cη)/η, c = {out['c']:.4g}, η = {out['eta']:.3g} (continuous 2c = "
                f"{out['rate_continuous']:.4g}); 5·SE + 1e-3 relative for the O(|y|²) terms"
            ),
        )
        wrong = out["rate"] / 2 if normalized else -2 * math.log(1 - out["eta"]) / out["eta"]
        result.add(
            f"negative control: {'the rate of |x_i − x_j| (c, not 2c)' if normalized else 'SA rate (c = 1) for USA'}",
            value,
            wrong,
            tol,
            expect="differ",
        )
        data[f"consensus_{kind}"] = {k: v for k, v in out.items() if k != "slopes"} | dict(
            rate_measured=value, se=se
        )

    # B: the circle — growth rates of the Fourier modes and metastable clusters
    pb = p["circle"]
    k_star = fastest_mode(pb["beta"])
    for normalized, kind in ((True, "SA"), (False, "USA")):
        out = circle_growth(pb, normalized=normalized, beta_scale=beta_scale, generator=gen)
        for i, k in enumerate(out["modes"]):
            tol = Z * out["se"][i] + out["nonlinear"][i]
            result.add(
                f"B: growth rate of mode k = {k}, {kind}, β = {pb['beta']:g}",
                out["mean"][i],
                out["rate"][i],
                tol,
                detectable=tol,
                note=f"log(1 + λ_k η)/η, η = {out['eta']:.3g}; n = {pb['n']}, {pb['B']} replicas; 5·SE + nonlinear {out['nonlinear'][i]:.2g}",
            )
            eta_k = out["eta"]
            if k == k_star:
                wrong = growth_rate(k, pb["beta"], normalized=normalized) / k  # k I_k/β in place of k² I_k/β
                result.add(
                    f"negative control: λ_k with k for k², k = {k}, {kind}",
                    out["mean"][i],
                    float(np.log1p(wrong * eta_k) / eta_k),
                    tol,
                    expect="differ",
                )
            if k == 2:  # SA's rates move most, relative to their errors, away from k*
                hot = growth_rate(k, 1.25 * pb["beta"], normalized=normalized)
                result.add(
                    f"negative control: λ_k at β·1.25, k = {k}, {kind}",
                    out["mean"][i],
                    float(np.log1p(hot * eta_k) / eta_k),
                    tol,
                    expect="differ",
                )
        measured_top = out["modes"][int(np.argmax(out["mean"]))]
        result.add(
            f"B: fastest measured mode = k* = argmax k²I_k(β), {kind}",
            measured_top,
            k_star,
            0.0,
            detectable=1.0,
        )
        data[f"circle_{kind}"] = out
    out = circle_clusters(pb, beta_scale=beta_scale, generator=gen)
    mean_count = float(np.mean(out["counts"]))
    result.add(
        f"B: clusters at t = 10/λ_k* (mean over replicas) vs k* = {k_star}, SA, β = {pb['beta']:g}",
        mean_count,
        k_star,
        1.0,
        detectable=1.0,
        note=f"observed, not proven: counts {out['counts']}; n = {pb['n_meta']}; clusters = components at distance < 0.05",
    )
    result.add("negative control: a single cluster at t = 10/λ_k*", mean_count, 1.0, 1.0, expect="differ")
    data["clusters"] = out | dict(k_star=k_star, beta=pb["beta"])

    # C: depth → time
    pd = p["depth"]
    out = depth_order(pd, beta_scale=beta_scale, generator=gen)
    L, err = out["depths"], out["errors"]
    s_last = loglog_slope(L[-2:], err[-2:]).value
    s_prev = loglog_slope(L[-3:-1], err[-3:-1]).value
    tol = 2 * abs(s_last - s_prev) + 0.02
    result.add(
        f"C: order of the L-layer network in Δt = T/L (L = {L[-2]}, {L[-1]})",
        -s_last,
        1.0,
        tol,
        detectable=tol,
        note=f"ParticleAttention d = {pd['d']}, M = {pd['M']}; tolerance 2·|Δslope| + 0.02; errors {', '.join(f'{e:.2e}' for e in err)}",
    )
    result.add("negative control: order 2", -s_last, 2.0, tol, expect="differ")
    data["depth"] = out | dict(slope=-s_last)
    result.data = data
    return result


def plot(result: CheckResult):
    d = result.data
    fig, axes = figure(ncols=4)
    ax = axes[0]
    for kind, color in (("SA", "C0"), ("USA", "C1")):
        c = d[f"consensus_{kind}"]
        t = np.asarray(c["t"])
        ax.semilogy(t * (c["c"]), c["spread"], color=color, label=f"{kind} (median replica)")
        t0 = t[np.argmin(np.abs(np.log(np.asarray(c["spread"]) / 1e-6)))]
        ax.semilogy(t * c["c"], 1e-6 * np.exp(-c["rate"] * (t - t0)), "k:", lw=1)
    ax.set(
        xlabel="c·t (c = 1 SA, e^β USA)", ylabel="1 − |x̄|²", title="A: one cluster, rate 2c", ylim=(1e-14, 2)
    )
    ax.legend(fontsize=7)
    ax = axes[1]
    beta = d["clusters"]["beta"]
    ks = np.arange(1, 13)
    ax.plot(ks, growth_rate(ks, beta), "k-", label=f"λ_k = k²I_k(β)/(βI_0(β)), β = {beta:g}")
    c = d["circle_SA"]
    ax.errorbar(
        c["modes"],
        c["mean"],
        yerr=Z * np.asarray(c["se"]) + np.asarray(c["nonlinear"]),
        fmt="o",
        color="C0",
        label="measured (SA)",
    )
    u = d["circle_USA"]
    i0 = np.asarray(u["rate_continuous"]) / np.asarray(c["rate_continuous"])
    ax.plot(
        u["modes"], np.asarray(u["mean"]) / i0, "s", mfc="none", color="C1", label="measured USA / I_0(β)"
    )
    ax.set(xlabel="mode k", ylabel="growth rate", title="B: linear instability of the uniform law")
    ax.legend(fontsize=7)
    ax = axes[2]
    cl = d["clusters"]
    ax.plot(np.cos(cl["angles0"]), np.sin(cl["angles0"]), ".", ms=1, color="0.7", label="t = 0")
    ax.plot(np.cos(cl["angles"]), np.sin(cl["angles"]), "o", ms=4, color="C3", label="t = 10/λ_k*")
    ax.set(aspect="equal", title=f"B: {np.mean(cl['counts']):.2g} clusters on average, k* = {cl['k_star']}")
    ax.legend(fontsize=7, loc="center")
    ax = axes[3]
    dd = d["depth"]
    L = np.asarray(dd["depths"])
    ax.loglog(L, dd["errors"], "o-", label="L-layer network")
    ax.loglog(L, dd["errors"][-1] * L[-1] / L, "k:", label="∝ 1/L")
    ax.set(xlabel="depth L (Δt = T/L)", ylabel="RMS error at T", title="C: depth → ODE, order 1")
    ax.legend(fontsize=7)
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
