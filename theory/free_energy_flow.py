"""Check — the free energy measured from particles along the linear McKean–Vlasov flow: closed form, decrease, rate.

System: dX = −aX dt − k(X − E X) dt + sqrt(2β) dW in d = 1, M particles per replica
(``MeanFieldLangevin(Quadratic(a), QuadraticInteraction(k), β)``), from N(m0, s0) recentred so that x̄_0 = m0.
The law stays Gaussian N(m(t), s(t)), m = m0·e^{−at}, s = s∞ + (s0 − s∞)e^{−2(a+k)t}, s∞ = β/(a+k), and

    F(ρ_t) = a/2·(m² + s) + k/2·s − β/2·log(2πe·s),     F∞ = F(0, s∞).

Measured: ``free_energy(system, trajectory, entropy="gaussian")`` — confinement 1/M Σ V(x_i), the pair
U-statistic over i ≠ j, and the Gaussian moment entropy ½ log(2πe ŝ) (ŝ the replica's sample variance) — per
replica at every saved time; mean ± SE over B independent replicas. The moment method is exact in law here: the
spreads y_i = x_i − x̄ of the EM chain are a centred Gaussian vector N(0, v(I − 11ᵀ/M)), so Σ y_i² ~ v·χ²_{M−1}
exactly as for M i.i.d. draws of variance v, and its bias E Ĥ − ½ log(2πe v) = ½[ψ((M − 1)/2) + log(2/(M − 1))]
(``gaussian_entropy_bias``, the χ² law's) is exact. It is also measured, on 4000 i.i.d. N(0, 1) samples of size M,
as a row of its own (the estimator against the formula); the references use the formula, so an error of the
estimator shows in them instead of being absorbed by a measured bias.

References: (i) the exact mean of F̂ under the EM chain: E conf = a/2(m_n² + Var x̄_n + Var y_n), E inter =
k/2·v_n, E(−βĤ) = −β(½ log(2πe v_n) + bias), with m_n = m0(1 − ηa)^n, the centre-of-mass AR(1)
Var x̄_n and v_n = Var y_n·M/(M − 1) (tolerance 5·SE); (ii) the continuous closed form F(m(t), s(t)) (tolerance
5·SE + |(i) − (ii)|: the O(η), O(1/M) and estimator biases, all from formulas, stated in the note).

Decrease: the largest increase of the replica-mean F̂ between saved times, clipped at 0, within 5·(SE_j + SE_j+1).
Rate: F − F∞ = a/2·m0²e^{−2at} + O(e^{−4(a+k)t}), so on t ∈ [1, 2] (the variance term below 1e-4 of the mean
term) the slope of log(F̂(t) − F̂∞) is −2a (EM chain: 2·log(1/(1 − ηa))/η); F̂∞ is the mean of F̂ over t ∈ [5, 6]
(gap e^{−10}/2 ≈ 2e-5), which cancels every constant bias. SE of the slope by the jackknife over replicas.

Power (fast: M = 1000, B = 100, η = 0.01): SE(F̂) ≈ 0.004 at t = 0.2 (detects 0.02, 2.6 % of F) and ≈ 8e-4 at
t = 1 (detects 0.004, 7 % of F − F∞ there); SE(rate) ≈ 0.03 (detects 0.15, 7 % of 2a). Negative controls (expect="differ"): F̂ at t = 0.2 against the closed form at
1.2β; the rate against 2(a+k), the variance's rate. BROKEN: the simulation runs at 1.2β.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from meanfield import MeanFieldLangevin, free_energy, simulate
from meanfield.drift.potentials import Quadratic, QuadraticInteraction
from meanfield.metrics import entropy, gaussian_entropy_bias
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z, jackknife, mean_se
from meanfield.studies.validation import CheckResult

CLAIM = "Free energy from particles on the linear McKean–Vlasov flow: closed form F(m, s), non-increasing, rate 2a"
BROKEN = dict(beta_sim=1.2 * 0.5)  # the simulation runs 20 % hotter; the references keep β
PRESETS = {"fast": dict(M=1000, B=100, save_every=10), "full": dict(M=2000, B=1000, save_every=5)}
A, K, BETA = 1.0, 2.0, 0.5
M0, S0 = 1.0, 2.0
ETA, T1 = 0.01, 6.0
TIMES = (0.2, 1.0)  # tabulated times
FIT = (1.0, 2.0)  # rate window
FLOOR = (5.0, 6.0)  # F̂∞ window


def closed_form(t, beta: float = BETA):
    """F(m(t), s(t)) of the mean-field law (d = 1)."""
    t = np.asarray(t, dtype=float)
    m, s = M0 * np.exp(-A * t), BETA / (A + K) + (S0 - BETA / (A + K)) * np.exp(-2 * (A + K) * t)
    return 0.5 * A * (m**2 + s) + 0.5 * K * s - 0.5 * beta * np.log(2 * math.pi * math.e * s)


def _ar1(rho: float, v0: float, q: float, n):
    r = rho ** (2 * np.asarray(n, dtype=float))
    return r * v0 + q * (1 - r) / (1 - rho**2)


def chain_expectation(n, M: int, bias: float):
    """E F̂ of the EM chain after n steps (module docstring), with the entropy estimator's bias."""
    m = M0 * (1 - ETA * A) ** np.asarray(n, dtype=float)
    centre = _ar1(1 - ETA * A, 0.0, 2 * BETA * ETA / M, n)  # Var x̄_n, from x̄_0 = m0
    spread = _ar1(1 - ETA * (A + K), S0 * (M - 1) / M, 2 * BETA * ETA * (M - 1) / M, n)  # Var y_n
    v = spread * M / (M - 1)
    H = 0.5 * np.log(2 * math.pi * math.e * v) + bias
    return 0.5 * A * (m**2 + centre + spread) + 0.5 * K * v - BETA * H


def measured_bias(M: int, reps: int = 4000, seed: int = 7):
    """Mean ± SE of Ĥ − ½ log(2πe) of the Gaussian moment method on ``reps`` i.i.d. N(0, 1) samples of size M."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(reps, M, 1, generator=g, dtype=torch.float64)  # (reps, M, 1)
    h = torch.as_tensor(entropy(x, method="gaussian").value, dtype=torch.float64)  # (reps,)
    return mean_se(h - 0.5 * math.log(2 * math.pi * math.e))


def _rate(F: np.ndarray, times: np.ndarray) -> float:
    """−slope of log(F(t) − F∞) on the fit window, F∞ the mean over the floor window; F: (S,)."""
    floor = F[(times >= FLOOR[0] - 1e-9) & (times <= FLOOR[1] + 1e-9)].mean()
    w = (times >= FIT[0] - 1e-9) & (times <= FIT[1] + 1e-9)
    return -float(np.polyfit(times[w], np.log(np.clip(F[w] - floor, 1e-12, None)), 1)[0])


def run(preset: str = "fast", *, beta_sim: float | None = None) -> CheckResult:
    p = PRESETS[preset]
    result = CheckResult("free_energy_flow", CLAIM, preset=preset)
    M, B = p["M"], p["B"]
    system = MeanFieldLangevin(
        Quadratic(A), QuadraticInteraction(K), beta=BETA if beta_sim is None else beta_sim
    )
    measured = MeanFieldLangevin(
        Quadratic(A), QuadraticInteraction(K), beta=BETA
    )  # F is formed at the true β
    gen = torch.Generator().manual_seed(11)
    z = torch.randn(B, M, 1, generator=gen, dtype=torch.float64)  # (B, M, 1)
    x0 = M0 + math.sqrt(S0) * (z - z.mean(1, keepdim=True))  # (B, M, 1), x̄_0 = m0 in every replica
    traj = simulate(system, x0, t1=T1, dt=ETA, save_every=p["save_every"], generator=gen)
    F = free_energy(measured, traj, entropy="gaussian")
    values = F.value.numpy()  # (B, S)
    times, steps = traj.times.numpy(), traj.steps.numpy()
    F_hat, F_se = values.mean(0), values.std(0, ddof=1) / math.sqrt(B)  # (S,)
    bias, measured = gaussian_entropy_bias(M, 1), measured_bias(M)
    result.add(f"bias of the moment entropy at M = {M} [½(ψ((M−1)/2) + log(2/(M−1)))]", measured.value, bias,
               Z * measured.se, detectable=Z * measured.se, note="4000 i.i.d. N(0, 1) samples of size M; 5·SE")  # fmt: skip
    F_chain, F_ct = chain_expectation(steps, M, bias), closed_form(times)

    for t in TIMES:
        j = int(np.argmin(np.abs(times - t)))
        tol = Z * F_se[j]
        result.add(f"F̂(t), t={t:g} [E F̂ of the EM chain]", F_hat[j], F_chain[j], tol, detectable=tol,
                   note=f"5·SE; the entropy's bias {bias:.2e} at M = {M} from the χ² law")  # fmt: skip
        gap = abs(F_chain[j] - F_ct[j])
        result.add(f"F̂(t), t={t:g} [F(m(t), s(t))]", F_hat[j], F_ct[j], Z * F_se[j] + gap, detectable=Z * F_se[j],
                   note=f"5·SE + |E F̂ − F(m, s)| = {gap:.2g} (O(η), O(1/M), estimator bias)")  # fmt: skip
    j = int(np.argmin(np.abs(times - TIMES[0])))
    gap = abs(F_chain[j] - F_ct[j])
    result.add(f"negative control: F̂(t={TIMES[0]:g}) vs F at 1.2β", F_hat[j], float(closed_form(times[j], 1.2 * BETA)),
               Z * F_se[j] + gap, expect="differ", note="the closed form at the wrong temperature: must be rejected")  # fmt: skip
    rise = np.diff(F_hat)
    rise_tol = Z * (F_se[1:] + F_se[:-1])
    worst = int(np.argmax(rise - rise_tol))
    result.add("max increase of F̂ between saved times", max(0.0, rise[worst]), 0.0, rise_tol[worst],
               detectable=rise_tol[worst], note="one-sided, clipped at 0; tol 5·(SE_j + SE_j+1) at the worst step")  # fmt: skip

    rate = _rate(F_hat, times)
    columns = {
        str(j): values[:, j] for j in range(len(times))
    }  # the jackknife takes replica means per column
    rate_se = jackknife(lambda m: _rate(np.array([m[str(j)] for j in range(len(times))]), times), columns).se
    chain_rate = 2 * math.log(1 / (1 - ETA * A)) / ETA
    result.add(f"rate of F̂ − F̂∞ on t ∈ [{FIT[0]:g}, {FIT[1]:g}] (2a)", rate, 2 * A, Z * rate_se + abs(chain_rate - 2 * A),
               detectable=Z * rate_se, note=f"5·SE (jackknife over replicas) + EM bias |{chain_rate:.4f} − 2a|")  # fmt: skip
    result.add("negative control: rate vs 2(a+k)", rate, 2 * (A + K), Z * rate_se + abs(chain_rate - 2 * A),
               expect="differ", note="the variance's rate: must be rejected")  # fmt: skip

    result.data = dict(
        a=A, k=K, beta=BETA, M=M, B=B, eta=ETA, times=times.tolist(), F_hat=F_hat.tolist(), F_se=F_se.tolist(),
        F_chain=F_chain.tolist(), F_inf=float(closed_form(1e9)), rate=rate, rate_se=rate_se,
        bias=bias, bias_measured=measured.value, bias_measured_se=measured.se, fit=FIT,
    )  # fmt: skip
    return result


def plot(result: CheckResult):
    d = result.data
    fig, (ax1, ax2) = figure(ncols=2)
    t = np.array(d["times"])
    F_hat, F_se = np.array(d["F_hat"]), np.array(d["F_se"])
    fine = np.linspace(0, t[-1], 600)
    ax1.plot(fine, closed_form(fine), "k-", lw=1, label="closed form F(m(t), s(t))")
    ax1.errorbar(
        t, F_hat, Z * F_se, fmt="o", ms=2.5, label=f"F̂ from particles (±5 SE), M = {d['M']}, B = {d['B']}"
    )
    ax1.set(xlabel="t", ylabel="F", title="free energy along the flow")
    ax1.legend(loc="upper right")
    floor = F_hat[t >= 5.0 - 1e-9].mean()
    keep = F_hat - floor > 3 * F_se
    ax2.errorbar(t[keep], (F_hat - floor)[keep], Z * F_se[keep], fmt="o", ms=2.5, label="F̂ − F̂∞ (±5 SE)")
    ax2.plot(fine, closed_form(fine) - d["F_inf"], "k-", lw=1, label="closed form F − F∞")
    ax2.plot(fine, 0.5 * d["a"] * np.exp(-2 * d["a"] * fine), "k:", lw=1, label="a/2·m0²·e^(−2at)")
    lo, hi = d["fit"]
    ax2.axvspan(
        lo, hi, color="0.9", label=f"fit: rate {d['rate']:.3f} ± {d['rate_se']:.3f} (2a = {2 * d['a']:g})"
    )
    ax2.set(yscale="log", xlabel="t", ylabel="F − F∞", title="exponential decay")
    ax2.legend()
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
