"""Check 8 — the λ ≈ 1 transition of mean-field Langevin dynamics on the sphere S^{d−1}.

Particles w_i ∈ S^{d−1} move by projected Euler–Maruyama, w ← Π(w − η·∇_w δF/δρ(w) + sqrt(2βη)·ξ), Π = Sphere(),
whose invariant law converges to ρ ∝ exp(−δF/δρ/β) (uniform reference measure on the sphere) as η → 0. The
M-particle chain targets the Gibbs law ∝ exp(−M·F(ρ_M)/β) exactly (its drift is −∇_{w_i} of M·F(ρ_M)).

Model A — Kuramoto / von Mises–Fisher alignment, W(w, w') = −κ·w·w' (drift κ·w̄):
    ρ ∝ exp(κ·r·(w·e)/β) (vMF), self-consistency r = A_d(κr/β), A_d(k) = I_{d/2}(k)/I_{d/2−1}(k).
    A_d(k) = k/d + O(k³) and A_d is concave, so the uniform law (r = 0) is the only solution for β ≥ β_c = κ/d and
    an ordered branch r*(β) > 0 appears continuously below it. With λ = β·d/κ the transition is at λ = 1 for
    every d. Finite M, exactly: a Hubbard–Stratonovich field h ∈ R^d with h | w ~ N(a·w̄, a/M), a = κ/β, makes
    the particles i.i.d. vMF(h); |h| has density ∝ k^{d−1}·exp(−M[k²/(2a) − log Z_d(k)]),
    Z_d(k) = Γ(d/2)(2/k)^{d/2−1} I_{d/2−1}(k), and E|w̄|² = (E|h|² − d·a/M)/a². M → ∞: E|w̄|² → r*² below λ = 1,
    M·E|w̄|² → λ/(λ − 1) above it (Kuramoto 1975; Bertini, Giacomin & Pakdaman 2010; Frouvelle & Liu 2012 for S^{d−1}).

Model B — He₂ teacher–student (a quadratic network with feature particles on the sphere):
    x ~ N(0, I_d), teacher y = (w*·x)² − 1, student f = E_ρ[(w·x)² − 1]. With E[((u·x)² − 1)((v·x)² − 1)] = 2(u·v)²
    (unit u, v), L(ρ) = ½E(f − y)² = ‖Q − w*w*ᵀ‖_F², Q = E_ρ[wwᵀ], and δL/δρ(w) = 2wᵀ(Q − w*w*ᵀ)w. The particle
    drift is −∇_w δL/δρ(w_i) = −4(Q_M − w*w*ᵀ)w_i (= −M·∂_{w_i} L(ρ_M): the gradient of the first variation, not of
    L per particle), i.e. V(w) = −2(w·w*)² and W(w, w') = 2(w·w')² in ``MeanFieldLangevin``. By symmetry
    Q = q·w*w*ᵀ + (1 − q)/(d − 1)·(I − w*w*ᵀ), q = E(w·w*)², so ρ is a Watson law in t = w·w*:
    density ∝ (1 − t²)^{(d−3)/2}·exp(κ t²) on [−1, 1] with κ = 2d(1 − q)/((d − 1)β), and q = E_κ[t²]
    (one-dimensional quadrature + brentq; E_κ[t²] = M(3/2, d/2+1, κ)/(d·M(1/2, d/2, κ)), Kummer M).
    L is convex in ρ and the entropy strictly convex: the stationary law is unique, q(β) is smooth at every finite
    d — a crossover, not a transition. With λ = β·d/4 the crossover sits at λ ≈ 1 and sharpens as d grows:
    d → ∞ at fixed λ gives q → (1 − sqrt λ)₊ (a saddle point in u = t²: 1 − q = sqrt λ below λ = 1, q = O(1/d)
    above), a continuous transition at λ = 1; at λ = 1, q = 0.21, 0.085, 0.041 for d = 10, 50, 200 (≈ d^{−1/2}).

What is simulated: B replicas of M particles, projected EM at steps η, 2η, 4η on one Brownian path (coupled).
Model A from the polarised state w_i = e₁, model B from uniform w_i. Model B also at M/4 (2B replicas).
The λ of one d (and one M) run as batched simulations: L values stacked on the replica axis (L·B
replicas, value l on replicas [l·B, (l+1)·B)), split back per value, each value's jackknife over its own B
replicas exactly as for a run of its own. A batch holds the λ whose own steps lie within STEP_RATIO = 0.9
and runs at the smallest (no λ coarser than alone, none at more than 1/0.9 of its own steps; fast: A in one
batch, B's two λ apart; full: A {0.5}, {0.7 … 2} at d = 3 and one batch at d = 10, B {0.25, 0.5, (1 at
d = 3)}, then each other λ apart). Model B: a per-replica β = 4λ/d, the same burn-in and measured time.
Model A: in time s = β·t, where the step Π(w + η_s·(κ/β)·w̄ + sqrt(2η_s)·ξ) is the chain at β with
η = η_s/β: a per-replica coupling κ/β at temperature 1, so every λ shares the clock τ_D = 1/(d − 1) (the
same measured 25 or 150 τ_D), with the longest burn-in of the batch (6 or 8 τ_lin). Not faster than the
loop at these sizes (the B·M·d draws and element-wise work of a step dominate; see the docs page).

Tolerance: 5·SE (jackknife over replicas) of the Richardson value 2·v(η) − v(2η), plus the measured O(η²)
residual (|R(2η, 4η) − R(η, 2η)| + 5·SE)/3. Model A is compared with its exact finite-M value (and with the
mean-field value plus the exact finite-M correction); model B with the mean-field q, plus a finite-M allowance
|q_{M/4} − q_M|/3 + 5·SE (the bias at M if it were C/M, from a companion run at M/4; the measured correction
falls faster than 1/M when d/M is not small — a Richardson step in 1/M overshoots there — so the allowance is
conservative). False-failure rate ≈ 5.7e-7 per row (≈ 1e-5 with Student t at B = 32). Smallest detectable
error: each row's tolerance (≈ 3 % of M·r*² and ≈ 15 % of M·E|w̄|² above λ = 1 (A, fast); ≈ 0.01–0.02 on q
(B, fast)).

Negative controls: model A with the wrong critical point β_c = κ/(d − 1) (the spherical Laplacian's eigenvalue in
place of Cov(uniform) = I/d) is rejected in the ordered phase; independent particles (M·E|w̄|² = 1) are rejected in
the disordered phase; model B's q is not the uniform 1/d, nor the teacher-only Watson law (κ = 2/β).
BROKEN: the simulated interaction is dropped (no alignment in A; no student–student term in B).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import integrate, optimize, special

from meanfield import MeanFieldLangevin
from meanfield.drift.potentials import Alignment, Confinement, Interaction, Quadratic
from meanfield.drift.projections import Sphere
from meanfield.stepping.richardson import coupled_step_sizes, richardson
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z, jackknife
from meanfield.studies.validation import CheckResult

CLAIM = "Sphere: Kuramoto transition at λ = βd/κ = 1 (exact finite M); He₂ teacher–student crossover at λ = βd/4 ≈ 1"
BROKEN = dict(interaction=False)  # the simulated particles do not interact
# Model A times in units of τ_D = 1/(β(d−1)) (the first-harmonic decay time of free diffusion on S^{d−1}):
# burn-in `burn`·τ_lin with τ_lin = τ_D/|1 − 1/λ| (the linearised relaxation time of the uniform mode), then
# `measure`·τ_D; η = c·τ_D (capped at 0.01). Model B in time units, η = c/(β(d−1)) capped at 0.005.
PRESETS = {
    "fast": dict(
        kuramoto=dict(d=(3,), lambdas=(0.7, 1.5), B=64, M=64, c=0.015, burn=6.0, measure=25.0),
        he2=dict(d=(10,), lambdas=(0.5, 2.0), B=32, M=128, c=0.03, burn=2.0, measure=2.0),
        curve_d=(3, 10, 50, 500),
    ),
    "full": dict(
        kuramoto=dict(
            d=(3, 10), lambdas=(0.5, 0.7, 0.85, 1.25, 1.5, 2.0), B=64, M=128, c=0.015, burn=8.0, measure=150.0
        ),
        he2=dict(d=(3, 10, 50), lambdas=(0.25, 0.5, 1.0, 2.0), B=32, M=256, c=0.015, burn=3.0, measure=5.0),
        curve_d=(3, 10, 50, 200, 2000),
    ),
}
LEVELS = (1, 2, 4)  # steps η, 2η, 4η on one Brownian path
RECORD = 8  # fine steps between records (divisible by every level)
SEGMENT = 16  # records per block of pre-drawn increments
STEP_RATIO = 0.9  # parameter values whose own steps are within this ratio run as one batched simulation


# --- the two models ------------------------------------------------------------------------------------------
class TeacherOverlap(Confinement):
    """``V(w) = −2(w·w*)²``, ``∇V = −4(w·w*)·w*``: the teacher part of δL/δρ."""

    def __init__(self, teacher: torch.Tensor) -> None:
        self.teacher = teacher  # (d,)

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        return -2.0 * (x @ self.teacher).square()  # (B, M)

    def grad(self, x: torch.Tensor) -> torch.Tensor:
        return -4.0 * (x @ self.teacher)[..., None] * self.teacher  # (B, M, d)


class StudentOverlap(Interaction):
    """``W(w, w') = 2(w·w')²``: ``1/M Σ_j W = 2·w_iᵀQ_M w_i``, ``1/M Σ_j ∇_w W = 4·Q_M w_i``, Q_M = 1/M Σ_j w_j w_jᵀ."""

    @staticmethod
    def _gram(x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bmi,bmj->bij", x, x) / x.shape[1]  # (B, d, d)

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        return 2.0 * ((x @ self._gram(x)) * x).sum(-1)  # (B, M)

    def mean_field_grad(self, x: torch.Tensor) -> torch.Tensor:
        return 4.0 * x @ self._gram(x)  # (B, M, d)


# --- references: model A (von Mises–Fisher) --------------------------------------------------------------------
def vmf_mean(k: float, d: int) -> float:
    """A_d(k) = I_{d/2}(k)/I_{d/2−1}(k): the mean resultant length of vMF(k) on S^{d−1}."""
    return float(special.ive(d / 2, k) / special.ive(d / 2 - 1, k)) if k > 0 else 0.0


def vmf_log_normaliser(k: np.ndarray, d: int) -> np.ndarray:
    """log Z_d(k), Z_d(k) = ∫ exp(k·w·e) dσ(w) over the uniform probability on S^{d−1}."""
    nu = d / 2 - 1
    return special.gammaln(d / 2) + nu * np.log(2 / k) + np.log(special.ive(nu, k)) + k


def kuramoto_r(lam: float, d: int) -> float:
    """r*(λ): the positive root of r = A_d(d·r/λ) for λ < 1, else 0."""
    if lam >= 1:
        return 0.0
    return optimize.brentq(lambda r: vmf_mean(d * r / lam, d) - r, 1e-12, 1.0 - 1e-15, xtol=1e-15)


def kuramoto_finite_m(lam: float, d: int, M: int) -> float:
    """Exact stationary M·E|w̄|² of M particles (Hubbard–Stratonovich, see the docstring); a = κ/β = d/λ."""
    a = d / lam
    k = np.linspace(1e-9, a + 12 * math.sqrt(a * d / M) + 1.0, 8001)
    log_p = (d - 1) * np.log(k) - M * (k**2 / (2 * a) - vmf_log_normaliser(k, d))
    p = np.exp(log_p - log_p.max())
    e_k2 = np.trapezoid(k**2 * p, k) / np.trapezoid(p, k)
    return float(M * (e_k2 - d * a / M) / a**2)


# --- references: model B (Watson) -------------------------------------------------------------------------------
def watson_t2(kappa: float, d: int) -> float:
    """E[t²] under the density ∝ (1 − t²)^{(d−3)/2}·exp(κt²) on [−1, 1] (t = w·w*, w Watson on S^{d−1}, d ≥ 3)."""
    s = 1.0 - (d - 3) / (2 * kappa) if kappa > 0 else 0.0  # argmax of the integrand in u = t²
    u_top = min(max(s, 0.0), 1.0)
    log_top = (d - 3) / 2 * math.log1p(-u_top) + kappa * u_top if u_top < 1 else kappa

    def f(t, power):
        u = t * t
        log_base = (d - 3) / 2 * math.log1p(-u) if d > 3 and u < 1 else (0.0 if d == 3 else -math.inf)
        return u ** (power / 2) * math.exp(log_base + kappa * u - log_top)

    pts = [math.sqrt(u_top)] if 0 < u_top < 1 else None
    num = integrate.quad(f, 0.0, 1.0, args=(2,), points=pts, limit=200, epsabs=0, epsrel=1e-11)[0]
    den = integrate.quad(f, 0.0, 1.0, args=(0,), points=pts, limit=200, epsabs=0, epsrel=1e-11)[0]
    return num / den


def he2_kappa(q: float, beta: float, d: int) -> float:
    """κ(q) = 2d(1 − q)/((d − 1)β): the Watson concentration of exp(−2wᵀ(Q − w*w*ᵀ)w/β)."""
    return 2 * d * (1 - q) / ((d - 1) * beta)


def he2_q(lam: float, d: int) -> float:
    """The self-consistent q = E(w·w*)² at λ = βd/4: the root of E_{κ(q)}[t²] = q (unique: L is convex)."""
    beta = 4 * lam / d
    return optimize.brentq(lambda q: watson_t2(he2_kappa(q, beta, d), d) - q, 0.0, 1.0, xtol=1e-13)


def _importance_moment(d: int, n: int, weight, moment, generator: np.random.Generator):
    """E_ρ[moment] for ρ ∝ weight·uniform(S^{d−1}) by self-normalised importance sampling, with its SE."""
    w = generator.standard_normal((n, d))
    t = w[:, 0] / np.linalg.norm(w, axis=1)  # (n,) t = w·e₁ under the uniform law
    lw = weight(t)
    g = np.exp(lw - lw.max())
    value = float((g * moment(t)).sum() / g.sum())
    se = float(np.sqrt((g**2 * (moment(t) - value) ** 2).sum()) / g.sum())  # delta method
    return value, se


# --- simulation -------------------------------------------------------------------------------------------------
def coupled_runs(system, x0, *, eta, n_segments, observable, generator):
    """``observable(states) -> (S, B)`` at steps η·k (k in LEVELS) driven by one Brownian path: ``{k: (S, B)}``."""
    return coupled_step_sizes(
        system,
        x0,
        eta=eta,
        n_segments=n_segments,
        observable=observable,
        generator=generator,
        levels=LEVELS,
        record_every=RECORD,
        segment=SEGMENT,
    )


def _jackknife(stat, per_replica: dict[int, np.ndarray]) -> tuple[float, float]:
    """``stat({level: replica mean})`` and its jackknife SE over the replicas."""
    est = jackknife(stat, per_replica)
    return est.value, est.se


def extrapolate(series: dict[int, np.ndarray], n_burn: int) -> dict[str, float]:
    """Richardson 2·v(η) − v(2η) of the time averages after ``n_burn`` records: value, SE, O(η²) allowance, raw."""
    per = {k: s[n_burn:].mean(0) for k, s in series.items()}  # (B,) per level
    value, se = _jackknife(lambda m: richardson(m[1], m[2]), per)
    resid, resid_se = _jackknife(lambda m: richardson(m[2], m[4]) - richardson(m[1], m[2]), per)
    bias, bias_se = _jackknife(lambda m: m[2] - m[1], per)
    return dict(
        value=value,
        se=se,
        resid=(abs(resid) + Z * resid_se) / 3,
        bias=bias,
        bias_se=bias_se,
        raw=[float(per[k].mean()) for k in LEVELS],
    )


def _simulate_points(system, x0, n_values, *, eta, burn, measure, observable, generator):
    """One coupled run of ``n_values`` parameter values stacked on the replica axis (value ``l`` on replicas
    ``[l·B, (l+1)·B)`` of ``x0 (n_values·B, M, d)``), split back per value: a list of ``extrapolate`` results,
    each over its own B replicas (its jackknife exactly as for a run of those B replicas alone)."""
    seg_time = SEGMENT * RECORD * eta
    n_burn, n_measure = max(1, round(burn / seg_time)), max(2, round(measure / seg_time))
    series = coupled_runs(
        system, x0, eta=eta, n_segments=n_burn + n_measure, observable=observable, generator=generator
    )
    B = x0.shape[0] // n_values
    outs = []
    for i in range(n_values):
        part = {k: s[:, i * B : (i + 1) * B] for k, s in series.items()}  # (S, B) of value i
        out = extrapolate(part, n_burn * SEGMENT)
        stride = max(1, len(part[1]) // 150)
        out["trace_t"] = (np.arange(1, len(part[1]) + 1) * RECORD * eta)[::stride].tolist()
        out["trace"] = part[1].mean(1)[::stride].tolist()
        out["eta"], out["burn"] = eta, n_burn * seg_time
        outs.append(out)
    return outs


def kuramoto_eta(beta: float, d: int, c: float) -> float:
    """The step of a run at β alone: c·τ_D capped at 0.01, τ_D = 1/(β(d−1)), a whole number of steps per unit time."""
    return 1 / math.ceil(1 / min(c / (beta * (d - 1)), 0.01))


def he2_eta(beta: float, d: int, c: float) -> float:
    """The step of a run at β alone: c/(β(d−1)) capped at 0.005, a whole number of steps per unit time."""
    return 1 / math.ceil(1 / min(c / (beta * (d - 1)), 0.005))


def step_groups(steps: dict, ratio: float = STEP_RATIO) -> list[list]:
    """The values (keys of ``steps``, each with the step of a run of its own) in batches whose steps lie within
    ``ratio`` of the batch's largest: a batch runs at its smallest step, so no value runs at more than
    1/ratio of its own number of steps (values of very different steps run apart)."""
    groups: list[list] = []
    for value in sorted(steps, key=lambda v: -steps[v]):
        if groups and steps[value] >= ratio * steps[groups[-1][0]]:
            groups[-1].append(value)
        else:
            groups.append([value])
    return groups


def per_value(values, B: int) -> torch.Tensor:
    """``(L·B,)`` float64: value ``l`` on replicas ``[l·B, (l+1)·B)``."""
    return torch.tensor(values, dtype=torch.float64).repeat_interleave(B)


def run(preset: str = "fast", *, interaction: bool = True) -> CheckResult:
    """Run the check; ``interaction=False`` drops the simulated interaction only (a broken input that must fail)."""
    p = PRESETS[preset]
    result = CheckResult("sphere_transition", CLAIM, preset=preset)
    gen = torch.Generator().manual_seed(11)
    rng = np.random.default_rng(11)
    data = dict(kuramoto=[], he2=[])

    # model A: Kuramoto / vMF, κ = d so that β = λ
    pk = p["kuramoto"]
    for d in pk["d"]:
        kappa = float(d)
        lam_is = max(
            lam for lam in pk["lambdas"] if lam < 1
        )  # the smallest k: importance sampling stays efficient
        k_test = d / lam_is * kuramoto_r(lam_is, d)
        is_value, is_se = _importance_moment(d, 200_000, lambda t, k=k_test: k * t, lambda t: t, rng)
        result.add(
            f"A: vMF mean A_d(k={k_test:.3g}) by importance sampling, d={d}",
            is_value,
            vmf_mean(k_test, d),
            Z * is_se,
            detectable=Z * is_se,
            note="checks the Bessel-ratio reference (2e5 uniform points)",
        )
        ordered = [lam for lam in pk["lambdas"] if lam < 1]
        lams, M, B = pk["lambdas"], pk["M"], pk["B"]
        betas = {lam: lam * kappa / d for lam in lams}
        # the λ batched on the replica axis, in time s = β·t: the step w ← Π(w + η_s·(κ/β)·w̄ + sqrt(2η_s)·ξ) is
        # the chain at β with η = η_s/β, so a per-replica coupling κ/β at temperature 1 runs every λ on one
        # clock (τ_D = 1/(d−1) in s, the same measured time). A batch of λ whose own steps β·η(β) are within
        # STEP_RATIO runs at the smallest (no λ coarser than in a run of its own) and the longest burn-in.
        tau_s = 1 / (d - 1)
        steps = {lam: betas[lam] * kuramoto_eta(betas[lam], d, pk["c"]) for lam in lams}
        outs_a = {}
        for group in step_groups(steps):
            system = MeanFieldLangevin(
                Quadratic(0.0),
                Alignment(per_value([kappa / betas[lam] for lam in group], B)) if interaction else None,
                beta=1.0,
                projection=Sphere(),
            )
            x0 = torch.zeros(len(group) * B, M, d, dtype=torch.float64)
            x0[..., 0] = 1.0  # polarised
            outs = _simulate_points(
                system,
                x0,
                len(group),
                eta=min(steps[lam] for lam in group),
                burn=max(pk["burn"] * tau_s / abs(1 - 1 / lam) for lam in group),
                measure=pk["measure"] * tau_s,
                observable=lambda s, M=M: M * s.mean(2).square().sum(-1),  # (S, L·B) M·|w̄|²
                generator=gen,
            )
            for lam, out in zip(group, outs):
                beta = betas[lam]
                out["eta"], out["burn"] = out["eta"] / beta, out["burn"] / beta  # back to time t = s/β
                out["trace_t"] = [t / beta for t in out["trace_t"]]
                outs_a[lam] = out
        for lam in lams:
            out, eta = outs_a[lam], outs_a[lam]["eta"]
            exact = kuramoto_finite_m(lam, d, M)
            tag = f"d={d}, λ={lam:g}"
            tol = Z * out["se"] + out["resid"]
            result.add(
                f"A: M·E|w̄|² (η→0), {tag}",
                out["value"],
                exact,
                tol,
                detectable=tol,
                note=f"exact M={M} Gibbs law (HS quadrature); η={eta:.3g}; O(η²) allowance {out['resid']:.2g}",
            )
            if lam < 1:
                mf_value = M * kuramoto_r(lam, d) ** 2
                fm = abs(exact - mf_value)
                result.add(
                    f"A: M·E|w̄|² vs mean-field M·r*², {tag}",
                    out["value"],
                    mf_value,
                    tol + fm,
                    detectable=tol + fm,
                    note=f"+ exact finite-M correction {fm:.3g}",
                )
                if lam == ordered[0]:
                    wrong = M * kuramoto_r(lam * (d - 1) / d, d) ** 2  # λ' = β(d−1)/κ
                    result.add(
                        f"negative control: β_c = κ/(d−1), {tag}",
                        out["value"],
                        wrong,
                        tol,
                        expect="differ",
                        note="the Laplacian eigenvalue d−1 in place of Cov(uniform) = I/d",
                    )
            else:
                mf_value = lam / (lam - 1)
                fm = abs(exact - mf_value)
                result.add(
                    f"A: M·E|w̄|² vs mean-field λ/(λ−1), {tag}",
                    out["value"],
                    mf_value,
                    tol + fm,
                    detectable=tol + fm,
                    note=f"+ exact finite-M correction {fm:.3g}",
                )
                if lam == min(lam2 for lam2 in pk["lambdas"] if lam2 > 1):
                    result.add(
                        f"negative control: independent particles M·E|w̄|² = 1, {tag}",
                        out["value"],
                        1.0,
                        tol,
                        expect="differ",
                        note="the interaction enhances the fluctuations by λ/(λ−1)",
                    )
            data["kuramoto"].append(
                dict(d=d, lam=lam, M=M, B=B, exact=exact, **{k: v for k, v in out.items() if k != "raw"})
            )

    # model B: He₂ teacher–student, λ = βd/4
    ph = p["he2"]
    for d in ph["d"]:
        teacher = torch.zeros(d, dtype=torch.float64)
        teacher[0] = 1.0
        lam0, lam_is = ph["lambdas"][0], max(ph["lambdas"])  # importance sampling at the smallest κ
        kappa0 = he2_kappa(he2_q(lam_is, d), 4 * lam_is / d, d)
        is_value, is_se = _importance_moment(d, 200_000, lambda t, k=kappa0: k * t * t, lambda t: t * t, rng)
        result.add(
            f"B: Watson E[t²] (κ={kappa0:.3g}) by importance sampling, d={d}",
            is_value,
            watson_t2(kappa0, d),
            Z * is_se,
            detectable=Z * is_se,
            note="checks the quadrature and its (1 − t²)^{(d−3)/2} factor (2e5 uniform points)",
        )
        lams = ph["lambdas"]
        betas = {lam: 4 * lam / d for lam in lams}
        # the λ batched on the replica axis with a per-replica β, per size; a batch of λ whose own steps η(β)
        # are within STEP_RATIO runs at the smallest (no λ coarser than in a run of its own), the burn-in and
        # measured time as in a run of its own (in time units, the same for every λ)
        steps = {lam: he2_eta(betas[lam], d, ph["c"]) for lam in lams}
        runs = {lam: {} for lam in lams}
        for group in step_groups(steps):
            for M, B in ((ph["M"], ph["B"]), (ph["M"] // 4, 2 * ph["B"])):  # the companion: half the cost
                system = MeanFieldLangevin(
                    TeacherOverlap(teacher),
                    StudentOverlap() if interaction else None,
                    beta=per_value([betas[lam] for lam in group], B),
                    projection=Sphere(),
                )
                x0 = torch.randn(len(group) * B, M, d, dtype=torch.float64, generator=gen)
                x0 /= x0.norm(dim=-1, keepdim=True)  # uniform start
                outs = _simulate_points(
                    system,
                    x0,
                    len(group),
                    eta=min(steps[lam] for lam in group),
                    burn=ph["burn"],
                    measure=ph["measure"],
                    observable=lambda s, w=teacher: (s @ w).square().mean(2),  # (S, L·B) q_M
                    generator=gen,
                )
                for lam, out in zip(group, outs):
                    runs[lam][M] = out
        for lam in lams:
            beta, q_ref, outs = betas[lam], he2_q(lam, d), runs[lam]
            big, small = outs[ph["M"]], outs[ph["M"] // 4]
            value, se = big["value"], big["se"]
            # finite-M bias at M from the companion at M/4, if it were C/M: (q_{M/4} − q_M)/3; the observed
            # correction falls faster than 1/M when d/M is not small, so this over-estimates it (conservative)
            finite_m = (small["value"] - big["value"]) / 3
            finite_m_se = math.sqrt(big["se"] ** 2 + small["se"] ** 2) / 3
            tag = f"d={d}, λ={lam:g}"
            tol = Z * se + big["resid"] + abs(finite_m) + Z * finite_m_se
            result.add(
                f"B: q (η→0), M={ph['M']}, {tag}",
                value,
                q_ref,
                tol,
                detectable=tol,
                note=(
                    f"self-consistent Watson q; η={big['eta']:.3g}; 5·SE + O(η²) {big['resid']:.1e} + finite-M allowance "
                    f"|{finite_m:.1e}| + 5·{finite_m_se:.1e} (companion M={ph['M'] // 4})"
                ),
            )
            if lam == lam0:
                result.add(
                    f"negative control: q = 1/d (uniform), {tag}",
                    value,
                    1 / d,
                    tol,
                    expect="differ",
                    note="the student is aligned with the teacher",
                )
                teacher_only = watson_t2(2 / beta, d)
                result.add(
                    f"negative control: teacher-only Watson κ = 2/β, {tag}",
                    value,
                    teacher_only,
                    tol,
                    expect="differ",
                    note="the student–student term 2(w·w')² lowers q",
                )
            data["he2"].append(
                dict(
                    d=d,
                    lam=lam,
                    q=value,
                    se=se,
                    finite_m=finite_m,
                    q_small=small["value"],
                    q_ref=q_ref,
                    M=ph["M"],
                    B=ph["B"],
                    eta=big["eta"],
                    raw_big=big["raw"],
                    raw_small=small["raw"],
                    trace_t=big["trace_t"],
                    trace=big["trace"],
                    burn=big["burn"],
                )
            )

    # curves for the figure
    lams = np.geomspace(0.1, 4.0, 25)
    data["curve_lambda"] = lams.tolist()
    data["he2_curves"] = {str(d): [he2_q(lam, d) for lam in lams] for d in p["curve_d"]}
    lam_r = np.concatenate([np.linspace(0.1, 0.99, 30), [0.999, 1.0, 2.0]])
    data["curve_lambda_r"] = lam_r.tolist()
    data["kuramoto_curves"] = {str(d): [kuramoto_r(lam, d) for lam in lam_r] for d in (3, 10, 50)}
    result.data = data
    return result


def plot(result: CheckResult):
    d = result.data
    fig, (ax1, ax2, ax3) = figure(ncols=3)
    lams = np.array(d["curve_lambda"])
    for i, (dim, curve) in enumerate(d["he2_curves"].items()):
        ax1.plot(lams, curve, color=f"C{i}", label=f"d = {dim}")
    ax1.plot(lams, np.clip(1 - np.sqrt(lams), 0, None), "k--", label="d → ∞: (1 − √λ)₊")
    dims = list(d["he2_curves"])
    for j, pt in enumerate(d["he2"]):
        color = f"C{dims.index(str(pt['d']))}" if str(pt["d"]) in dims else "k"
        ax1.errorbar(
            pt["lam"],
            pt["q"],
            yerr=Z * pt["se"],
            fmt="o",
            color=color,
            mec="k",
            label="simulated (η→0, ±5 SE)" if j == 0 else None,
        )
    ax1.axvline(1.0, color="0.6", ls=":", lw=1)
    ax1.set(
        xscale="log", xlabel="λ = βd/4", ylabel="q = E(w·w*)²", title="B: He₂ teacher–student (crossover)"
    )
    ax1.legend(fontsize=7)
    lam_r = np.array(d["curve_lambda_r"])
    for i, (dim, curve) in enumerate(d["kuramoto_curves"].items()):
        ax2.plot(lam_r, curve, color=f"C{i}", label=f"mean field r*, d = {dim}")
    for j, pt in enumerate(d["kuramoto"]):
        if pt["lam"] < 1:
            r = math.sqrt(max(pt["value"], 0) / pt["M"])
            err = Z * pt["se"] / (2 * pt["M"] * max(r, 1e-9))
            ax2.errorbar(
                pt["lam"],
                r,
                yerr=err,
                fmt="o",
                color=f"C{[3, 10, 50].index(pt['d'])}",
                mec="k",
                label="simulated (E|w̄|²)^½" if j == 0 else None,
            )
            ax2.plot(
                pt["lam"],
                math.sqrt(pt["exact"] / pt["M"]),
                "k_",
                ms=14,
                label=f"exact M = {pt['M']}" if j == 0 else None,
            )
    ax2.axvline(1.0, color="0.6", ls=":", lw=1)
    ax2.set(
        xlabel="λ = βd/κ", ylabel="r = |E w|", title="A: Kuramoto on the sphere (transition)", xlim=(0, 2)
    )
    ax2.legend(fontsize=7)
    grid = np.linspace(1.05, 3.0, 60)
    ax3.plot(grid, grid / (grid - 1), "k-", label="mean field λ/(λ−1)")
    first = True
    for pt in d["kuramoto"]:
        if pt["lam"] > 1:
            ax3.errorbar(
                pt["lam"],
                pt["value"],
                yerr=Z * pt["se"],
                fmt="s",
                color="C1",
                label="simulated" if first else None,
            )
            ax3.plot(pt["lam"], pt["exact"], "k_", ms=14, label=f"exact M = {pt['M']}" if first else None)
            first = False
    ax3.axhline(1.0, color="0.6", ls="--", lw=1, label="independent particles")
    ax3.set(xlabel="λ = βd/κ", ylabel="M·E|w̄|²", title="A: fluctuations above λ = 1", ylim=(0, 8))
    ax3.legend(fontsize=7)
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
