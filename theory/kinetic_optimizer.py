"""Kinetic check 5 — the kinetic Langevin optimizer samples its laws, checked through the optimizer itself.

:class:`meanfield.optim.KineticLangevin` is stepped on parameters whose ``.grad`` a loss (by autograd) or a
closed-form gradient filled, exactly as in training. Its step is BAOAB with the first kick of a step merged
into the last of the step before (``meanfield/optim/kinetic.py``), so θ follows BAOAB's positions and the
stored velocity is BAOAB's velocity before its final half kick, v⁻ = v + (h/2)∇F(θ).

1. **Quadratic F = a/2‖θ‖²** (n independent coordinates, γ = 1): BAOAB's stationary law has Var θ = β/a exactly
   and Var v = β(1 − h²a/4), Cov(θ, v) = 0 (``kinetic_harmonic``), so v⁻ has Var = β(1 − h²a/4) + (h²a²/4)(β/a)
   = β exactly: both checked at h√a ∈ {0.5, 1, 1.5} (BAOAB's synchronous Var v is 25 % low at h√a = 1).
2. **Momentum SGD with Langevin noise on θ** (the naive alternative, ``Langevin`` with Adam's β1 > 0 in
   heavy-ball form): ``b ← μb + g, θ ← θ − ηb + sqrt(2β·η/(1−μ))ξ`` at the optimizer's equivalent
   μ = e^{−γh}, η = h²(1 + μ)/2; its stationary variance is the Lyapunov value
   :func:`meanfield.optim.momentum_variance_factor` ``(u = a·η/(1−μ), β1 = μ)``·β/a, not β/a (negative control).
3. **×M: a mean-field layer** (as ``langevin_optimizer``): M particles enter ``L = (a+k)/2·⟨θ²⟩ − k/2·⟨θ⟩²``,
   the ×M gradient is the McKean–Vlasov drift; the stationary Var θ_i of the kinetic chain is exactly
   β/(aM) + β(M−1)/((a+k)M) (BAOAB positions exact per mode), the finite-M excess βk/(a(a+k)M) over β/(a+k); the
   same law from ``simulate`` on ``KineticMeanFieldLangevin`` with BAOAB. ``temperature_convention="loss"`` at
   β/M is the run at β bit for bit (M = 8).

Tolerance: 5·SE (false-failure 5.7e-7 per row), SE = v·sqrt(2/n) for a Gaussian second moment of n
independent coordinates (items 1–2) or from independent replicas (item 3). Power (fast): n = 4e4 gives SE
0.7 %, detects 3.5 %; item 3 (4e4 coordinates) detects ≈ 4 % of Var θ_i; the excess at M = 2 equals β/(a+k)
itself (100 %). BROKEN: the optimizer without the ×M scaling (``mean_field_scaling=False``): the ×M rows fail.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

from meanfield import simulate
from meanfield.drift.phase_space import KineticMeanFieldLangevin, pair, positions
from meanfield.drift.potentials import Quadratic, QuadraticInteraction
from meanfield.optim import KineticLangevin, momentum_variance_factor
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z, mean_se
from meanfield.studies.validation import CheckResult, load_check

CLAIM = "KineticLangevin optimizer: Var θ = β/a and Var v = β exactly on a/2θ²; ×M = kinetic McKean–Vlasov; momentum SGD + noise is biased"
BROKEN = dict(mean_field_scaling=False)  # the optimizer drops the ×M scaling; the references keep it
PRESETS = {"fast": dict(n=40_000, n_mf=40_000), "full": dict(n=1_000_000, n_mf=400_000)}
F64 = torch.float64
A_Q, BETA_Q, GAMMA, HS = 1.0, 0.3, 1.0, (0.5, 1.0, 1.5)
A_MF, K_MF, BETA_MF, H_MF, MS = 1.0, 2.0, 0.5, 0.5, (2, 8)
T_RELAX = 20.0  # γT: the start's deviation decays as e^{−γT}


def _lo():
    return load_check(Path(__file__).with_name("langevin_optimizer.py"))


def stationary_var_x(M: float) -> float:
    """β/(aM) + β(M−1)/((a+k)M): exact for the BAOAB chain at any stable h (``M = inf``: β/(a+k))."""
    if math.isinf(M):
        return BETA_MF / (A_MF + K_MF)
    return BETA_MF / (A_MF * M) + BETA_MF * (M - 1) / ((A_MF + K_MF) * M)


def _train_layer(
    M: int, B: int, beta: float, convention: str, scaling: bool, steps: int, seed: int
) -> torch.Tensor:
    theta = nn.Parameter(torch.zeros(B, M, dtype=F64))  # (B, M): B replicas of an M-particle layer
    opt = KineticLangevin([theta], lr=H_MF, friction=GAMMA, beta=beta, n_particles=M, mean_field_scaling=scaling,
                          temperature_convention=convention, seed=seed)  # fmt: skip
    loss_fn = _lo().mf_layer_loss
    for _ in range(steps):
        opt.zero_grad(set_to_none=False)
        loss_fn(theta).backward()
        opt.step()
    return theta.detach()


def run(preset: str = "fast", *, mean_field_scaling: bool = True) -> CheckResult:
    """Run the check; ``mean_field_scaling=False`` breaks the optimizer's ×M scaling only (must fail)."""
    p = PRESETS[preset]
    n = p["n"]
    result = CheckResult("kinetic_optimizer", CLAIM, preset=preset)
    data: dict = {"quad": [], "mf": []}

    # 1. quadratic through the optimizer
    for j, h in enumerate(HS):
        theta = nn.Parameter(
            math.sqrt(BETA_Q / A_Q) * torch.randn(n, dtype=F64, generator=torch.Generator().manual_seed(j))
        )
        opt = KineticLangevin([theta], lr=h, friction=GAMMA, beta=BETA_Q, seed=100 + j)
        for _ in range(math.ceil(T_RELAX / (GAMMA * h))):
            theta.grad = A_Q * theta.detach()
            opt.step()
        x = theta.detach()
        v = opt.state[theta]["velocity"]
        vx, vv = mean_se(x.square()).value, mean_se(v.square()).value
        for label, val, ref in (("Var θ", vx, BETA_Q / A_Q), ("Var v (stored)", vv, BETA_Q)):
            se = ref * math.sqrt(2 / n)
            result.add(f"quadratic: {label}, h√a={h:g} [BAOAB: exact]", val, ref, Z * se, detectable=Z * se,
                       note="5·v·sqrt(2/n); θ: BAOAB positions exact; v⁻ = v + (h/2)aθ has Var β exactly")  # fmt: skip
        data["quad"].append(dict(h=h, var_x=vx, var_v=vv))

    # 2. heavy-ball momentum SGD + Langevin noise on θ at the equivalent (μ, η): biased
    h = HS[1]
    mu = math.exp(-GAMMA * h)
    eta = h * h * (1 + mu) / 2
    h_eff = eta / (1 - mu)
    gen = torch.Generator().manual_seed(7)
    x = math.sqrt(BETA_Q / A_Q) * torch.randn(n, dtype=F64, generator=gen)
    b = torch.zeros(n, dtype=F64)
    for _ in range(400):
        b.mul_(mu).add_(A_Q * x)
        x.add_(b, alpha=-eta).add_(
            torch.randn(n, dtype=F64, generator=gen), alpha=math.sqrt(2 * BETA_Q * h_eff)
        )
    var = mean_se(x.square()).value
    factor = momentum_variance_factor(A_Q * h_eff, mu)
    ref = factor * BETA_Q / A_Q
    se = ref * math.sqrt(2 / n)
    result.add(f"momentum SGD + noise on θ (μ={mu:.3f}, η={eta:.3f}): Var θ [Lyapunov]", var, ref, Z * se, detectable=Z * se,
               note="5·SE; momentum_variance_factor(a·η/(1−μ), μ)·β/a")  # fmt: skip
    se = BETA_Q / A_Q * math.sqrt(2 / n)
    result.add("negative control: momentum SGD + noise on θ vs Gibbs β/a", var, BETA_Q / A_Q, Z * se, expect="differ",
               note=f"the ×{factor:.2f} bias of the unmatched noise must be seen")  # fmt: skip
    data["momentum_sgd"] = dict(mu=mu, eta=eta, var=var, factor=factor)

    # 3. ×M layer through the optimizer, and simulate on the kinetic system
    system = KineticMeanFieldLangevin(
        Quadratic(A_MF), QuadraticInteraction(K_MF), friction=GAMMA, beta=BETA_MF
    )
    steps = math.ceil(T_RELAX / (GAMMA * H_MF))
    for M in MS:
        B = p["n_mf"] // M
        x = _train_layer(M, B, BETA_MF, "mean_field", mean_field_scaling, steps, seed=10 + M)
        opt_var = mean_se(x.square().mean(1))
        z = simulate(
            system,
            pair(torch.zeros(B, M, 1, dtype=F64)),
            t1=steps * H_MF,
            dt=H_MF,
            solver="baoab",
            generator=20 + M,
        ).final
        sim_var = mean_se(positions(z).square().mean(dim=(1, 2)))
        exact = stationary_var_x(M)
        for who, est in (("KineticLangevin", opt_var), ("simulate (BAOAB)", sim_var)):
            result.add(f"×M layer, M={M}: Var θ_i by {who} [exact]", est.value, exact, Z * est.se, detectable=Z * est.se,
                       note="5·SE over replicas; β/(aM) + β(M−1)/((a+k)M), exact for BAOAB")  # fmt: skip
        excess, c = opt_var.value - stationary_var_x(math.inf), BETA_MF * K_MF / (A_MF * (A_MF + K_MF) * M)
        if M == MS[0]:
            result.add(f"×M layer, M={M}: finite-M excess vs none", excess, 0.0, Z * opt_var.se, expect="differ",
                       note=f"negative control: the excess {c:.3g} must be detected")  # fmt: skip
        data["mf"].append(
            dict(M=M, opt=opt_var.value, opt_se=opt_var.se, sim=sim_var.value, sim_se=sim_var.se, exact=exact)
        )
    M = MS[-1]
    a = _train_layer(M, 64, BETA_MF, "mean_field", mean_field_scaling, 20, seed=3)
    b = _train_layer(M, 64, BETA_MF / M, "loss", mean_field_scaling, 20, seed=3)
    result.add(f"conventions: max |θ(β, mean_field) − θ(β/M, loss)|, M={M}, 20 steps", float((a - b).abs().max()), 0.0, 0.0,
               note="bit-identical: β/M·M = β exactly for M a power of 2")  # fmt: skip
    result.data = data
    return result


def plot(result: CheckResult):
    d = result.data
    fig, (ax1, ax2) = figure(ncols=2)
    hs = np.array([r["h"] for r in d["quad"]])
    ax1.plot(hs, [r["var_x"] / BETA_Q * A_Q for r in d["quad"]], "o", label="Var θ / (β/a), KineticLangevin")
    ax1.plot(hs, [r["var_v"] / BETA_Q for r in d["quad"]], "s", label="Var v / β (stored velocity)")
    fine = np.linspace(0.3, 1.7, 50)
    ax1.plot(fine, 1 - fine**2 / 4, "k:", lw=1, label="BAOAB's synchronous Var v / β = 1 − h²a/4")
    ax1.axhline(1.0, color="k", lw=1, label="exact: 1")
    m = d["momentum_sgd"]
    ax1.plot(
        [1.0], [m["var"] / BETA_Q * A_Q], "C3^", ms=8, label=f"momentum SGD + noise on θ (μ = {m['mu']:.2f})"
    )
    ax1.set(
        xlabel="h√a", ylabel="variance / Gibbs value", title="quadratic, through the optimizer", ylim=(0, 4.6)
    )
    ax1.legend(fontsize=7, loc="upper left")
    Ms = np.array([r["M"] for r in d["mf"]])
    ax2.errorbar(
        Ms * 0.97,
        [r["opt"] for r in d["mf"]],
        [Z * r["opt_se"] for r in d["mf"]],
        fmt="o",
        label="KineticLangevin (×M)",
    )
    ax2.errorbar(
        Ms * 1.03,
        [r["sim"] for r in d["mf"]],
        [Z * r["sim_se"] for r in d["mf"]],
        fmt="s",
        label="simulate, BAOAB",
    )
    grid = np.geomspace(1.5, 12, 50)
    ax2.plot(grid, [stationary_var_x(g) for g in grid], "k-", lw=1, label="β/(aM) + β(M−1)/((a+k)M)")
    ax2.axhline(stationary_var_x(math.inf), color="0.5", ls=":", label="mean field β/(a+k)")
    ax2.set(xscale="log", xlabel="M", ylabel="Var θ_i", title="×M layer = kinetic McKean–Vlasov")
    ax2.set_xticks(list(Ms), [str(m) for m in Ms])
    ax2.set_xticks([], minor=True)
    ax2.legend(fontsize=7)
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
