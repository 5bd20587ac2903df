"""Check 1 — Euler–Maruyama noise: Var(Σ_n sqrt(2βη)·ξ_n) = 2βηT, and the increments are independent.

Formula: with zero drift, x_T = Σ_{n<T} sqrt(2βη)·ξ_n, ξ_n ~ N(0, 1) i.i.d., so x_T ~ N(0, 2βηT) exactly and
Corr(Δx_n, Δx_{n+1}) = 0 (Euler–Maruyama; e.g. Kloeden & Platen 1992, §9.1).

Tolerance: 5·SE with SE(S²) = σ²·sqrt(2/n) for the sample variance of n Gaussian coordinates, and SE = 1/sqrt(n)
for a lag-1 correlation; false-failure rate 5.7e-7 per row. The smallest detectable relative error of the
variance is 5·sqrt(2/n) (1.6 % at n = 2e5, fast; 0.5 % at n = 2e6, full). Negative control: the variance 5 %
too high must be rejected.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from meanfield import MeanFieldLangevin, simulate
from meanfield.drift.potentials import Quadratic
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z
from meanfield.studies.validation import CheckResult

CLAIM = "Euler–Maruyama noise: Var(Σ sqrt(2βη)ξ) = 2βηT over T steps, lag-1 increments uncorrelated"
BROKEN = dict(perturb=1.05)  # the simulated temperature 5 % too high
PRESETS = {
    "fast": dict(n=200_000, steps=(1, 5, 25, 100)),
    "full": dict(n=2_000_000, steps=(1, 2, 5, 10, 25, 50, 100)),
}


def run(preset: str = "fast", *, perturb: float = 1.0) -> CheckResult:
    """Run the check; ``perturb ≠ 1`` multiplies the simulated temperature only (a broken input that must fail)."""
    p = PRESETS[preset]
    beta, eta, n = 0.7, 0.01, p["n"]
    result = CheckResult("noise_variance", CLAIM, preset=preset)
    system = MeanFieldLangevin(Quadratic(0.0), beta=beta * perturb)  # zero drift: only the noise moves x
    T_max = max(p["steps"])
    traj = simulate(
        system, torch.zeros(1, n, 1, dtype=torch.float64), t1=T_max * eta, dt=eta, save_every=1, generator=0
    )
    variances = []
    for T in p["steps"]:
        x = traj.states[T].flatten()
        exact = 2 * beta * eta * T
        var = float(x.square().mean())
        se = exact * math.sqrt(2 / n)
        variances.append(var)
        result.add(f"Var x_T, T={T}", var, exact, Z * se, detectable=Z * se, note="5·σ²·sqrt(2/n)")
    dx = traj.states.diff(dim=0).flatten(1)  # (T_max, n) increments
    lag1 = float(((dx[:-1] * dx[1:]).mean(1) / (2 * beta * eta)).abs().max())
    result.add("max |lag-1 corr|", lag1, 0.0, Z / math.sqrt(n), detectable=Z / math.sqrt(n), note="5/sqrt(n)")
    wrong = 1.05 * 2 * beta * eta * T_max
    result.add(
        "negative control: 1.05 × 2βηT", variances[-1], wrong, Z * wrong * math.sqrt(2 / n), expect="differ"
    )
    result.data = dict(
        steps=list(p["steps"]),
        variances=variances,
        beta=beta,
        eta=eta,
        n=n,
        final=traj.states[T_max].flatten()[:20000].tolist(),
    )
    return result


def plot(result: CheckResult):
    d = result.data
    fig, (ax1, ax2) = figure(ncols=2)
    T = np.array(d["steps"])
    ax1.plot(T, 2 * d["beta"] * d["eta"] * T, "k-", label="2βηT")
    ax1.plot(T, d["variances"], "o", label=f"measured (n = {d['n']:.0e})")
    ax1.set(xlabel="steps T", ylabel="Var x_T", xscale="log", yscale="log", title="noise variance")
    ax1.legend()
    var = 2 * d["beta"] * d["eta"] * T[-1]
    x = np.linspace(-4, 4, 200) * math.sqrt(var)
    ax2.hist(d["final"], bins=80, density=True, alpha=0.6, label="x_T")
    ax2.plot(x, np.exp(-(x**2) / (2 * var)) / math.sqrt(2 * math.pi * var), "k", label="N(0, 2βηT)")
    ax2.set(xlabel="x", title=f"T = {T[-1]}")
    ax2.legend()
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
