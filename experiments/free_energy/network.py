r"""The free energy of a trained feature-particle network decaying, against its closed-form flow and rate.

Network: ``FeatureParticles(d_in=1, M, "identity")``, f(x) = 1/M Σ_i a_i w_i x, trained by
``Langevin(param_groups_for(f), lr=η, beta=β, weight_decay=λ)`` (SGD drift, ×M scaling) on the two points
x = ±1 with targets y = c·x (full batch). The loss is L(ρ) = ½(E_ρ[aw] − c)², so with g = E_ρ[aw] − c each
particle θ = (a, w) moves by dθ = −Aθ dt + sqrt(2β) dW, A = [[λ, g], [g, λ]]: linear given g, so a Gaussian
start stays Gaussian (mean 0, covariance Σ) and the law follows the closed ODE

    Σ' = −AΣ − ΣA + 2βI,   g = Σ_aw − c,
    F(Σ) = ½ g² + λ/2·tr Σ − β/2·log((2πe)² det Σ),

whose minimiser is Σ* = β A*⁻¹ (L is convex in ρ: a square of a linear functional). Near Σ* the ODE is linear
with slowest eigenvalue −μ, so F − F* ~ e^{−2μt}. The start is FeatureParticles' own: a_i ~ N(0, 1),
w_i ~ N(0, 1/d_in) = N(0, 1), i.e. Σ(0) = I.

Measured: ``meanfield.nn.free_energy(f, loss, optimizer, entropy="gaussian")`` every 10 steps (the particles
θ_i = (a_i, w_i) ∈ R², ``layer.particle_features()``), over R seeds; its rate by a log-linear fit of F̂ − F̂∞
(F̂∞: the mean over the last fifth) on t ∈ FIT, against the ODE's slope on the same window and 2μ; four
more seeds at lr = η/2 show the gap to the flow is the chain's O(η) bias.

    python experiments/free_energy/network.py [docs/assets/free_energy_network.png]
"""

from __future__ import annotations

import math
import sys

import numpy as np
import torch
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

import meanfield as mf
from meanfield.nn import FeatureParticles
from meanfield.optim.layers import param_groups_for
from meanfield.seeds import derive_seed
from meanfield.studies.plotting import figure, save

C, LAM, BETA = 2.0, 1.0, 0.1
M, SEEDS, ETA, T = 2000, 8, 0.01, 6.0
FIT = (0.8, 1.6)  # rate window (F − F* from ≈ 1e-2 to 1e-4 of F(0) − F*)
X = torch.tensor([[1.0], [-1.0]], dtype=torch.float64)
Y = C * X[:, 0]


def flow(t, s):
    """The ODE of (Σ_aa, Σ_ww, Σ_aw)."""
    saa, sww, saw = s
    g = saw - C
    return [-2 * (LAM * saa + g * saw) + 2 * BETA, -2 * (LAM * sww + g * saw) + 2 * BETA,
            -2 * LAM * saw - g * (saa + sww)]  # fmt: skip


def free_energy(s) -> np.ndarray:
    saa, sww, saw = np.asarray(s)
    det = saa * sww - saw**2
    return (
        0.5 * (saw - C) ** 2
        + 0.5 * LAM * (saa + sww)
        - 0.5 * BETA * np.log((2 * math.pi * math.e) ** 2 * det)
    )


def minimiser() -> np.ndarray:
    """Σ* = β A⁻¹ with g* = Σ*_aw − c: g solves g + c = −βg/(λ² − g²) on (−λ, 0)."""
    g = brentq(lambda g: g + C + BETA * g / (LAM**2 - g**2), -LAM + 1e-12, 0.0)
    d = LAM**2 - g**2
    return np.array([BETA * LAM / d, BETA * LAM / d, -BETA * g / d])


def slowest_rate(star: np.ndarray) -> float:
    """μ: minus the largest real part of the ODE's Jacobian at Σ* (central differences)."""
    J = np.zeros((3, 3))
    for k in range(3):
        e = np.zeros(3)
        e[k] = 1e-6
        J[:, k] = (np.array(flow(0, star + e)) - np.array(flow(0, star - e))) / 2e-6
    return float(-np.linalg.eigvals(J).real.max())


def train(seed: int, eta: float = ETA) -> tuple[np.ndarray, np.ndarray]:
    """F̂ every 0.1 time units of one network trained at lr = η: (times, values)."""
    # two streams: a generator seeded s draws the same normals as Langevin(seed=s), and the first noise would
    # then equal the initial particles (correlated with the state: Σ drifts off the flow by ≈ 7 % at t = 0.5)
    init = torch.Generator().manual_seed(derive_seed(seed, "init"))
    f = FeatureParticles(1, M, "identity", generator=init, dtype=torch.float64)
    opt = mf.Langevin(
        param_groups_for(f), lr=eta, beta=BETA, weight_decay=LAM, seed=derive_seed(seed, "noise")
    )
    steps, values = [], []
    every = round(0.1 / eta)
    for step in range(round(T / eta) + 1):
        loss = 0.5 * (f(X) - Y).square().mean()
        if step % every == 0:
            steps.append(step)
            values.append(mf.nn.free_energy(f, loss, opt, entropy="gaussian").value)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return np.array(steps) * eta, np.array(values)


def fit_rate(t: np.ndarray, F: np.ndarray, floor: float | None = None) -> float:
    """−slope of log(F − F∞) on the window FIT; F∞ the mean of F over the last fifth unless given."""
    floor = F[t >= 0.8 * t[-1]].mean() if floor is None else floor
    w = (
        (t >= FIT[0] - 1e-9) & (t <= FIT[1] + 1e-9) & (F > floor)
    )  # a noisy point at or below the floor: left out
    return -float(np.polyfit(t[w], np.log(F[w] - floor), 1)[0])


def main(path: str) -> None:
    star = minimiser()
    F_star, mu = float(free_energy(star)), slowest_rate(star)
    grid = np.linspace(0, T, 601)
    ode = solve_ivp(flow, (0, T), [1.0, 1.0, 0.0], t_eval=grid, rtol=1e-10, atol=1e-12)
    F_ode = free_energy(ode.y)
    runs = [train(seed) for seed in range(SEEDS)]
    half = np.stack(
        [train(100 + seed, ETA / 2)[1] for seed in range(max(2, SEEDS // 2))]
    )  # (R/2, S) at lr = η/2
    t = runs[0][0]
    F = np.stack([v for _, v in runs])  # (R, S)
    # the rate of the seed-mean curve, its SE by the jackknife over seeds
    rate = fit_rate(t, F.mean(0))
    loo = np.array([fit_rate(t, np.delete(F, r, 0).mean(0)) for r in range(SEEDS)])
    rate_se = math.sqrt((SEEDS - 1) / SEEDS * ((loo - loo.mean()) ** 2).sum())
    ode_rate = fit_rate(grid, F_ode, F_star)
    end, end_se = F[:, -1].mean(), F[:, -1].std(ddof=1) / math.sqrt(SEEDS)
    print(f"Σ* = {star.round(5)}, F* = {F_star:.5f}, slowest mode μ = {mu:.4f}: F − F* ~ e^(−{2 * mu:.4f} t)")
    print(f"F̂(T = {T:g}) = {end:.5f} ± {end_se:.5f} (SE over {SEEDS} seeds), F* = {F_star:.5f}")
    print(f"rate of F̂ − F̂∞ on t ∈ {FIT}: {rate:.3f} ± {rate_se:.3f} (jackknife over seeds); the ODE's on the same "
          f"window {ode_rate:.3f}; asymptotic 2μ = {2 * mu:.3f}")  # fmt: skip
    for tj in (0.5, 1.0, 2.0):
        j = int(np.argmin(np.abs(t - tj)))
        k = int(np.argmin(np.abs(grid - tj)))
        se = lambda a: a.std(ddof=1) / math.sqrt(len(a))  # noqa: E731
        print(f"t = {tj:g}: F̂ = {F[:, j].mean():.5f} ± {se(F[:, j]):.5f} (lr = {ETA}), {half[:, j].mean():.5f} ± "
              f"{se(half[:, j]):.5f} (lr = {ETA / 2}); ODE F = {F_ode[k]:.5f}")  # fmt: skip

    fig, (ax1, ax2) = figure(ncols=2)
    ax1.plot(grid, F_ode, "k-", lw=1, label="closed-form flow F(Σ(t))")
    ax1.errorbar(
        t,
        F.mean(0),
        5 * F.std(0, ddof=1) / math.sqrt(SEEDS),
        fmt="o",
        ms=2,
        label=f"F̂ of the network (±5 SE, {SEEDS} seeds)",
    )
    ax1.axhline(F_star, color="0.6", ls=":", label="F* = F(β A*⁻¹)")
    ax1.set(xlabel="t = step × lr", ylabel="F", title=f"FeatureParticles (M = {M}) trained by Langevin")
    ax1.legend(fontsize=7)
    floor = F[:, t >= 0.8 * t[-1]].mean()
    gap = F.mean(0) - floor
    keep = gap > 0
    ax2.semilogy(t[keep], gap[keep], "o", ms=2, label="F̂ − F̂∞")
    ax2.semilogy(grid, np.clip(F_ode - F_star, 1e-12, None), "k-", lw=1, label="F(Σ(t)) − F*")
    ax2.semilogy(grid, (F_ode[0] - F_star) * 0.3 * np.exp(-2 * mu * grid), "k:", lw=1,
                 label=f"∝ e^(−2μt), 2μ = {2 * mu:.3f}; fit on {FIT}: {rate:.2f} ± {rate_se:.2f}")  # fmt: skip
    ax2.axvspan(*FIT, color="0.92")
    ax2.set(xlabel="t", ylabel="F − F*", title="decay and its rate", ylim=(1e-5, None))
    ax2.legend(fontsize=7)
    print(save(fig, path).resolve())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "free_energy_network.png")
