"""Check — the stationary mean-field law of the ReLU teacher–student network on the sphere (issue 28).

The network of ``experiments/feature_particles``: f(x) = E_ρ[a·relu(w·x)] over particles (a, w) ∈ [−A, A] × S^{d−1},
a single-index teacher y = c·relu(w*·x), x ~ N(0, I_d), loss L(ρ) = ½E(f − y)². For unit u, v the arc-cosine
kernel of degree 1 (Cho & Saul 2009) gives E[relu(u·x) relu(v·x)] = κ(u·v),

    κ(t) = (√(1 − t²) + (π − arccos t)·t)/(2π),   κ'(t) = (π − arccos t)/(2π),

so the first variation is δL/δρ(a, w) = a·h(w) with h(w) = ∫ a'κ(w·w') ρ(da', dw') − c·κ(w·w*). The mean-field
Langevin law (mean-field units: drift −∇δL/δρ, noise sqrt(2β)) is the self-consistent Gibbs law
ρ(a, w) ∝ exp(−a·h(w)/β) on [−A, A] × S^{d−1} (uniform reference measure on the sphere, Lebesgue on [−A, A]).
L is convex in ρ and the entropy strictly convex, so it is unique. Integrating a out:

    ρ(w) ∝ Z(h(w)/β),   Z(s) = ∫_{−A}^{A} e^{−as} da = 2 sinh(As)/s,   E[a | w] = 1/s − A·coth(As)   (s = h/β),

and, the teacher being one direction, everything depends on w through t = w·w* only: the law of t has density
∝ (1 − t²)^{(d−3)/2}·Z(h(t)/β) on [−1, 1], and h(t) = ∫ K_d(t, s)·E[a | s]·ρ(s) ds − c·κ(t) with the zonal kernel
K_d(t, s) = E_u κ(ts + √(1 − t²)√(1 − s²)·u), u the cosine between two uniform points of S^{d−2} (density
∝ (1 − u²)^{(d−4)/2}). This one-dimensional fixed point is solved by Newton's method on a graded Gauss–Legendre
grid in θ = arccos t (panels refined at t = ±1 and at the aligned threshold |t| = 0.9; Gauss–Jacobi in u), by
continuation from β = 1 down (the Jacobian is explicit: dE[a·1_w]/dh = −E[a² | w]·ρ(w)/β and the normaliser's
rank-one term). Order parameters of the law: q = E t², q_|a| = E[|a| t²]/E|a|, and the aligned fraction
P(|t| ≥ 0.9 | live), live = |a| > 5 % of E|a| (the definitions of ``meanfield.tasks.regression.particle_metrics``).

**What is simulated**: B replicas of M particles with the exact population drift of the same network (no data:
h_M(w_i) = 1/M Σ_j a_j κ(w_i·w_j) − c κ(w_i·w*) and its w-gradient, the j = i term included as in training),
a reflected at ±A, w projected on the sphere, Euler–Maruyama at steps η and 2η on one Brownian path, from
a ~ N(0, 1) clipped, w uniform. Compared: the Richardson value 2v(η) − v(2η) of the time averages of q and q_|a|
after a burn-in.

**Tolerance**: 5·SE (jackknife over replicas) of the Richardson value, plus |v(η) − v(2η)|/2 (allowance for the
O(η²) remainder), plus a finite-M allowance |v_{M/4} − v_M|/3 + 5·SE from a companion run at M/4 (the bias at M
if it were C/M). **Negative controls**: the uniform law (q = 1/d) and the teacher-only Gibbs law (h = −c·κ(t),
no student–student term) are rejected. BROKEN: the simulated particles do not interact (teacher field only).

The predictions used by docs/experiments/feature_particles.md: :func:`curve` (q, q_|a|, aligned against β for
d = 8, 16, 32) and :func:`half_crossing` (the β where an order parameter is half way from its uniform-law value to
its value at β = 1e-5).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import special

from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z, jackknife
from meanfield.studies.validation import CheckResult

CLAIM = (
    "ReLU teacher–student on the sphere: the finite-M particle law matches the self-consistent Gibbs law "
    "ρ ∝ exp(−a·h(w)/β) with the arc-cosine kernel (1-D law of t = w·w*)"
)
BROKEN = dict(interaction=False)
A_CLIP, C_TEACHER, THRESHOLD, LIVE_TOL, BETA_COLD = 4.0, 1.0, 0.9, 0.05, 1e-5
# the two-index teacher's weight on each direction (the default of solve_disc, field_at, observables_disc, curve_disc)
C_TWO = 1 / math.sqrt(2)
PRESETS = {
    "fast": dict(
        points=((6, 0.1),), M=48, B=12, eta=0.05, burn=30.0, measure=60.0, curve_d=(8, 16, 32), n_beta=31
    ),
    "full": dict(
        points=((6, 0.1), (4, 0.05), (8, 0.1)),
        M=96,
        B=16,
        eta=0.025,
        burn=60.0,
        measure=200.0,
        curve_d=(8, 16, 32),
        n_beta=61,
    ),
}


# --- the kernel and the amplitude law ---------------------------------------------------------------------------
def kappa(t):
    """The degree-1 arc-cosine kernel κ(t) = E[relu(u)relu(v)], (u, v) standard Gaussians with correlation t."""
    t = np.clip(t, -1.0, 1.0)
    return (np.sqrt(1 - t * t) + (np.pi - np.arccos(t)) * t) / (2 * np.pi)


def amplitude_log_normaliser(s, A: float = A_CLIP):
    """log Z(s), Z(s) = ∫_{−A}^{A} e^{−as} da = 2 sinh(A|s|)/|s| (2A at s = 0)."""
    x = A * np.abs(s)
    small = x < 1e-6
    xs = np.where(small, 1.0, x)
    big = xs + np.log1p(-np.exp(-2 * xs)) - np.log(xs) + math.log(A)
    return np.where(small, math.log(2 * A) + x * x / 6, big)


def amplitude_moments(s, A: float = A_CLIP):
    """E a, E a², E|a| under the density ∝ e^{−as} on [−A, A] (s may be an array)."""
    x = A * np.asarray(s, dtype=float)
    ax = np.abs(x)
    small = ax < 1e-4
    xs = np.where(small, 1.0, x)
    axs = np.where(small, 1.0, ax)
    coth = 1 / np.tanh(xs)
    mean = -A * np.where(small, x / 3 - x**3 / 45, coth - 1 / xs)  # −A·L(As), L the Langevin function
    second = A * A * np.where(small, 1 / 3 - x * x / 15, 1 + 2 / xs**2 - 2 * coth / xs)
    absolute = A * np.where(small, 0.5 + ax * ax / 24, 1 - np.tanh(axs / 2) / axs)
    return mean, second, absolute


def amplitude_tail(s, c: float, A: float = A_CLIP):
    """P(|a| > c) under ∝ e^{−as} on [−A, A]: (sinh(A|s|) − sinh(c|s|))/sinh(A|s|) (1 − c/A at s = 0)."""
    x, y = A * np.abs(s), c * np.abs(s)
    small = x < 1e-6
    xs = np.where(small, 1.0, x)
    big = (1 - np.exp(-2 * xs) - np.exp(y - xs) + np.exp(-y - xs)) / (1 - np.exp(-2 * xs))
    return np.where(small, 1 - c / A, big)


# --- zonal functions on the sphere ------------------------------------------------------------------------------
class Zonal:
    """Functions of t = w·w* on S^{d−1}: nodes t_i, the uniform law's weights q_i, the kernel K_d(t_i, t_j)."""

    EDGES = (0, 1e-3, 3e-3, 1e-2, 2e-2, 4e-2, 7e-2, 0.1, 0.15, 0.22, 0.3, 0.4, 0.5, 0.6, 0.7, 0.78, 0.85, 0.9)

    def __init__(self, d: int, n_panel: int = 12, n_u: int = 64) -> None:
        if d < 3:
            raise ValueError(f"d must be ≥ 3, got {d}")
        self.d = d
        near = np.array(self.EDGES) * np.pi
        edges = np.unique(
            np.concatenate([near, np.pi - near, [np.arccos(THRESHOLD), np.arccos(-THRESHOLD)]])
        )  # θ panels
        x, wq = np.polynomial.legendre.leggauss(n_panel)
        lo, hi = edges[:-1, None], edges[1:, None]
        theta = ((lo + hi) / 2 + (hi - lo) / 2 * x).ravel()
        wt = ((hi - lo) / 2 * wq).ravel()
        self.t = np.cos(theta)  # (n,)
        log_w = (d - 2) * np.log(np.sin(theta)) + np.log(wt)
        w = np.exp(log_w - log_w.max())
        self.q = w / w.sum()  # (n,) the uniform law on S^{d−1}, in t
        sin = np.sin(theta)
        alpha = (d - 4) / 2
        u, wu = special.roots_jacobi(n_u, alpha, alpha)  # weight (1 − u²)^{(d−4)/2}
        wu = wu / wu.sum()
        arg = self.t[:, None, None] * self.t[None, :, None] + sin[:, None, None] * sin[None, :, None] * u
        self.K = (kappa(arg) * wu).sum(-1)  # (n, n)


def _state(z: Zonal, h: np.ndarray, beta: float, A: float):
    s = h / beta
    lz = amplitude_log_normaliser(s, A)
    p = np.exp(lz - lz.max())  # (n,) ∝ Z(h/β)
    norm = float((z.q * p).sum())
    mean, second, _ = amplitude_moments(s, A)
    return p, norm, mean, second


def _backtrack(residual, h: np.ndarray, step: np.ndarray, F: np.ndarray):
    """Newton's step halved until the residual's max-norm drops below ``|F|_∞`` (or the step is below
    1e-6 of a full one): ``(h + size·step, F(h + size·step), aux)``."""
    size, f0 = 1.0, np.abs(F).max()
    while True:
        Fn, auxn = residual(h + size * step)
        if np.abs(Fn).max() < f0 or size < 1e-6:
            return h + size * step, Fn, auxn
        size /= 2


def solve(z: Zonal, beta: float, *, A: float = A_CLIP, c: float = C_TEACHER, h0=None, tol=1e-12, maxit=300):
    """The self-consistent field h(t_i) at temperature β (Newton with backtracking), and the final residual."""
    target = c * kappa(z.t)  # (n,)

    def residual(h):
        p, norm, mean, second = _state(z, h, beta, A)
        g = mean * p / norm  # (n,) E[a | t]·ρ(t)/uniform(t)
        return z.K @ (z.q * g) - target - h, (p, norm, mean, second, g)

    h = -target.copy() if h0 is None else np.array(h0, dtype=float)
    F, aux = residual(h)
    for _ in range(maxit):
        if np.abs(F).max() < tol:
            break
        p, norm, mean, second, g = aux
        J = z.K * (z.q * (-p * second / beta / norm))[None, :]
        J += (z.K @ (z.q * g))[:, None] * (p * mean * z.q / beta / norm)[None, :]
        J -= np.eye(len(h))
        step = np.linalg.solve(J, -F)
        h, F, aux = _backtrack(residual, h, step, F)
    return h, float(np.abs(F).max())


def solve_path(z: Zonal, beta_from: float, beta_to: float, h: np.ndarray | None, depth: int = 0, **kw):
    """``solve`` at ``beta_to`` by continuation from the solution ``h`` at ``beta_from``: when Newton does not
    converge (residual > 1e-10) the step in log β is halved, recursively (at most 12 times)."""
    h_new, res = solve(z, beta_to, h0=h, **kw)
    if res <= 1e-10 or depth >= 12 or h is None:
        return h_new, res
    mid = math.sqrt(beta_from * beta_to)
    h_mid, _ = solve_path(z, beta_from, mid, h, depth + 1, **kw)
    return solve_path(z, mid, beta_to, h_mid, depth + 1, **kw)


def observables(z: Zonal, h: np.ndarray, beta: float, *, A: float = A_CLIP) -> dict[str, float]:
    """q = E t², q_|a| = E[|a| t²]/E|a|, aligned = P(|t| ≥ 0.9 | |a| > 5 % E|a|), live, E|a| of the law h."""
    p, norm, _, _ = _state(z, h, beta, A)
    rho = z.q * p / norm  # (n,) the law of t
    _, _, eabs = amplitude_moments(h / beta, A)
    mean_abs = float((rho * eabs).sum())
    live = amplitude_tail(h / beta, LIVE_TOL * mean_abs, A)
    t2 = z.t**2
    return dict(
        q=float((rho * t2).sum()),
        q_abs_a=float((rho * eabs * t2).sum() / mean_abs),
        aligned=float((rho * live * (np.abs(z.t) >= THRESHOLD)).sum() / (rho * live).sum()),
        live=float((rho * live).sum()),
        mean_abs_a=mean_abs,
    )


def uniform_values(d: int, k: int = 1) -> dict[str, float]:
    """The order parameters of the uniform law on S^{d−1} (k orthonormal teacher directions)."""
    z = Zonal(d)
    tail = float((z.q * (np.abs(z.t) >= THRESHOLD)).sum())  # P(|t| ≥ 0.9), disjoint over k directions
    return dict(q=k / d, q_abs_a=k / d, aligned=k * tail)


def curve(d: int, betas, **kw) -> dict[str, list[float]]:
    """The order parameters along ``betas`` (any order; solved by continuation from the hottest)."""
    z = Zonal(d)
    order = np.argsort(betas)[::-1]
    out: dict[str, list[float]] = {}
    rows = [None] * len(betas)
    h, h_beta = None, None
    for i in order:
        b = float(betas[i])
        if h is None:
            h, res = solve(z, max(b, 1.0), **kw)  # from the hot end: nearly uniform, Newton converges
            h_beta = max(b, 1.0)
        h, res = solve_path(z, h_beta, b, h, **kw)
        h_beta = b
        rows[i] = dict(observables(z, h, b), residual=res)
    for key in rows[0]:
        out[key] = [r[key] for r in rows]
    out["beta"] = [float(b) for b in betas]
    return out


def half_crossing(betas, values, uniform: float, cold: float) -> float:
    """The β (log-linear interpolation) where ``values`` first falls, going hot from cold, below
    ``uniform + (cold − uniform)/2``; NaN if it does not."""
    b = np.asarray(betas, dtype=float)
    v = np.asarray(values, dtype=float)
    order = np.argsort(b)
    b, v = b[order], v[order]
    level = uniform + (cold - uniform) / 2
    for i in range(len(b) - 1):
        if v[i] >= level > v[i + 1]:
            f = (v[i] - level) / (v[i] - v[i + 1])
            return float(math.exp(math.log(b[i]) + f * (math.log(b[i + 1]) - math.log(b[i]))))
    return math.nan


def predicted_crossings(d: int, n_beta: int = 61) -> dict[str, float]:
    """β_half of q, q_|a| and aligned at dimension d, the cold value taken at β = 1e-5."""
    betas = np.geomspace(1.0, BETA_COLD, n_beta)
    cur = curve(d, betas)
    uni = uniform_values(d)
    return {
        key: half_crossing(betas, cur[key], uni[key], cur[key][-1]) for key in ("q", "q_abs_a", "aligned")
    }


# --- two orthonormal teacher directions: the 2-D law of (w·w*_1, w·w*_2) ----------------------------------------
class Disc:
    """Functions of (t_1, t_2) = (w·w*_1, w·w*_2) on S^{d−1} (d ≥ 4), for two orthonormal teacher directions.

    w = cos θ (cos φ w*_1 + sin φ w*_2) + sin θ·v, v uniform on the unit sphere of the orthogonal complement:
    the uniform law has density ∝ cos θ·sin^{d−3} θ dθ dφ on [0, π/2] × [0, 2π), and
    K(w, w') = E_u κ(cos θ cos θ' cos(φ − φ') + sin θ sin θ'·u), u the cosine between two uniform points of
    S^{d−3} (density ∝ (1 − u²)^{(d−5)/2}). Gauss–Legendre panels graded towards the teacher plane (θ = 0) and
    towards the directions ±w*_1, ±w*_2 in it; ``n_theta``, ``n_phi`` points per panel.
    """

    THETA = (0, 1e-3, 4e-3, 1.5e-2, 4e-2, 0.08, 0.15, 0.25, 0.4, 0.6, 0.8, 1.0)  # × π/2
    PHI = (0, 3e-3, 1e-2, 3e-2, 0.07, 0.13, 0.2, 0.3, 0.4, 0.5)  # × π/2, away from a teacher direction

    def __init__(self, d: int, n_theta: int = 4, n_phi: int = 4, n_u: int = 12) -> None:
        if d < 4:
            raise ValueError(f"d must be ≥ 4 for two teacher directions, got {d}")
        self.d = d
        x, wq = np.polynomial.legendre.leggauss(n_theta)
        e = np.array(self.THETA) * np.pi / 2
        th = ((e[:-1, None] + e[1:, None]) / 2 + (e[1:, None] - e[:-1, None]) / 2 * x).ravel()
        wth = ((e[1:, None] - e[:-1, None]) / 2 * wq).ravel()
        base = np.array(self.PHI) * np.pi / 2
        quarter = np.pi / 2
        ph_e = np.unique(
            np.concatenate([np.concatenate([base + k * quarter, (k + 1) * quarter - base]) for k in range(4)])
        )
        x, wq = np.polynomial.legendre.leggauss(n_phi)
        ph = ((ph_e[:-1, None] + ph_e[1:, None]) / 2 + (ph_e[1:, None] - ph_e[:-1, None]) / 2 * x).ravel()
        wph = ((ph_e[1:, None] - ph_e[:-1, None]) / 2 * wq).ravel()
        TH, PH = np.meshgrid(th, ph, indexing="ij")
        log_w = np.log(np.cos(TH)) + (d - 3) * np.log(np.sin(TH)) + np.log(wth[:, None] * wph[None, :])
        w = np.exp(log_w - log_w.max()).ravel()
        self.q = w / w.sum()  # (n,)
        rho, self.r = np.cos(TH).ravel(), np.sin(TH).ravel()
        self.t1, self.t2 = rho * np.cos(PH.ravel()), rho * np.sin(PH.ravel())  # (n,)
        alpha = (d - 5) / 2
        self.u, wu = special.roots_jacobi(n_u, alpha, alpha)
        self.wu = wu / wu.sum()
        self.K = self.kernel(self.t1, self.t2, self.r)  # (n, n)

    def kernel(self, t1: np.ndarray, t2: np.ndarray, r: np.ndarray) -> np.ndarray:
        """K(w, w') between points w = (t_1, t_2, r = |orthogonal part|) and the nodes w': (m, n)."""
        out = np.empty((len(t1), len(self.t1)))
        for i0 in range(0, len(t1), 256):
            sl = slice(i0, i0 + 256)
            inner = t1[sl, None] * self.t1[None, :] + t2[sl, None] * self.t2[None, :]  # (b, n)
            radial = r[sl, None] * self.r[None, :]
            out[sl] = (kappa(inner[..., None] + radial[..., None] * self.u) * self.wu).sum(-1)
        return out

    def caps(self, n: int = 8) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Nodes and weights of the four caps max(|t_1|, |t_2|) ≥ 0.9, with the cap's edge a coordinate line:
        about ±w*_k, w = cos ϑ·(±w*_k) + sin ϑ·(cos ψ·w*_other + sin ψ·v), ϑ ≤ arccos 0.9, uniform density
        ∝ sin^{d−2} ϑ·sin^{d−3} ψ; ``n`` Gauss–Legendre points per panel (ϑ graded towards the pole as the
        disc's θ, ψ in 8 panels). Weights are fractions of the whole sphere: ``(t1, t2, r, weight)``, (m,) each."""
        d, edge = self.d, math.acos(THRESHOLD)
        x, wq = np.polynomial.legendre.leggauss(n)
        e = np.array([v * np.pi / 2 for v in self.THETA if v * np.pi / 2 < edge] + [edge])
        th = ((e[:-1, None] + e[1:, None]) / 2 + (e[1:, None] - e[:-1, None]) / 2 * x).ravel()
        wth = ((e[1:, None] - e[:-1, None]) / 2 * wq).ravel() * np.sin(th) ** (d - 2)
        f = np.linspace(0.0, np.pi, 9)
        ps = ((f[:-1, None] + f[1:, None]) / 2 + (f[1:, None] - f[:-1, None]) / 2 * x).ravel()
        wps = ((f[1:, None] - f[:-1, None]) / 2 * wq).ravel() * np.sin(ps) ** (d - 3)
        norm = special.beta(0.5, (d - 1) / 2) * special.beta(0.5, (d - 2) / 2)  # the whole sphere's ∫ of both
        TH, PS = np.meshgrid(th, ps, indexing="ij")
        pole, along, r = (
            np.cos(TH).ravel(),
            (np.sin(TH) * np.cos(PS)).ravel(),
            (np.sin(TH) * np.sin(PS)).ravel(),
        )
        w = (wth[:, None] * wps[None, :]).ravel() / norm
        t1 = np.concatenate([pole, -pole, along, along])
        t2 = np.concatenate([along, along, pole, -pole])
        return t1, t2, np.tile(r, 4), np.tile(w, 4)


# GMRES restart cycles of 200 inner steps per Newton step: on the path of d = 8 from β = 1 to 1e-5 no step took more
# than 29 inner steps; a failing solve would otherwise spend up to 4,000 kernel products on each Newton step
GMRES_CYCLES = 2


def solve_disc(z: Disc, beta: float, h0=None, *, A: float = A_CLIP, c: float = C_TWO, tol=1e-10):
    """The self-consistent field on the nodes of ``z`` for y = c·(relu(w*_1·x) + relu(w*_2·x)): Newton–Krylov
    (GMRES on the explicit Jacobian–vector product) with backtracking; returns (h, residual)."""
    from scipy.sparse.linalg import LinearOperator, gmres

    target = c * (kappa(z.t1) + kappa(z.t2))
    n = len(target)

    def residual(h):
        s = h / beta
        lz = amplitude_log_normaliser(s, A)
        p = np.exp(lz - lz.max())
        norm = float((z.q * p).sum())
        mean, second, _ = amplitude_moments(s, A)
        g = mean * p / norm
        return z.K @ (z.q * g) - target - h, (p, norm, mean, second, g)

    h = -target.copy() if h0 is None else np.array(h0, dtype=float)
    F, aux = residual(h)
    for _ in range(60):
        if np.abs(F).max() < tol:
            break
        p, norm, mean, second, g = aux
        diag = z.q * (-p * second / beta / norm)
        Kg = z.K @ (z.q * g)
        rank1 = p * mean * z.q / beta / norm
        J = LinearOperator(
            (n, n), matvec=lambda v, dg=diag, kg=Kg, r1=rank1: z.K @ (dg * v) + kg * (r1 @ v) - v
        )
        step, _ = gmres(J, -F, rtol=1e-11, atol=0, restart=200, maxiter=GMRES_CYCLES)
        h, F_new, aux = _backtrack(residual, h, step, F)
        stalled = np.abs(F_new).max() >= np.abs(F).max()
        F = F_new
        if stalled:  # no descent along Newton's direction: give up here, the continuation halves its step
            break
    return h, float(np.abs(F).max())


def field_at(z: Disc, K: np.ndarray, t1: np.ndarray, t2: np.ndarray, g: np.ndarray, c: float = C_TWO):
    r"""The self-consistent field at points off the nodes (Nyström): $h(w) = \sum_j K(w, w_j)\, q_j\, g_j -
    c\,(\kappa(t_1) + \kappa(t_2))$ with ``K = z.kernel(t1, t2, r)`` and ``g`` = E[a | w_j]·ρ/uniform on the
    nodes; at the nodes themselves it is h + the fixed point's residual."""
    return K @ (z.q * g) - c * (kappa(t1) + kappa(t2))


def observables_disc(
    z: Disc, h: np.ndarray, beta: float, *, A: float = A_CLIP, c: float = C_TWO, caps=None
) -> dict[str, float]:
    r"""q = E(t_1² + t_2²), q_|a|, aligned = P(max(|t_1|, |t_2|) ≥ 0.9 | live) of the two-direction law.

    The aligned fraction integrates an indicator whose edge cuts across the disc's panels, so on the disc's
    nodes it converges slowly; with ``caps = (Disc.caps(n), K(caps, nodes))`` its numerator is integrated on the
    caps' own nodes instead, where h is the fixed point's own extension (Nyström) $h(w) = \int K(w, w')\,
    \bar a(w')\, d\rho(w') - \text{target}(w)$ from the solution on the nodes; ``c`` must be the solve's."""
    s = h / beta
    lz = amplitude_log_normaliser(s, A)
    shift = lz.max()
    p = np.exp(lz - shift)
    norm = (z.q * p).sum()
    rho = z.q * p / norm
    mean, _, eabs = amplitude_moments(s, A)
    mean_abs = float((rho * eabs).sum())
    live = amplitude_tail(s, LIVE_TOL * mean_abs, A)
    proj = z.t1**2 + z.t2**2
    if caps is None:
        hit = np.maximum(np.abs(z.t1), np.abs(z.t2)) >= THRESHOLD
        in_caps = (rho * live * hit).sum()
    else:
        (t1, t2, _, w), Kc = caps
        sc = field_at(z, Kc, t1, t2, mean * p / norm, c) / beta  # (m,)
        pc = np.exp(amplitude_log_normaliser(sc, A) - shift)  # same scale as p
        in_caps = (w * pc * amplitude_tail(sc, LIVE_TOL * mean_abs, A)).sum() / norm
    return dict(
        q=float((rho * proj).sum()),
        q_abs_a=float((rho * eabs * proj).sum() / mean_abs),
        aligned=float(in_caps / (rho * live).sum()),
    )


def curve_disc(
    d: int, betas, *, log=None, cap_nodes: int | None = 8, c: float = C_TWO, **kw
) -> dict[str, list[float]]:
    """:func:`curve` for the two-direction teacher (weight ``c`` each, 1/√2 by default), by continuation with step halving;
    ``log(β, residual)``, if given, is called after every solve (the halved steps included). The aligned
    fraction is integrated on the caps' own nodes (``cap_nodes`` per panel; ``None``: on the disc's nodes)."""
    z = Disc(d, **kw)
    caps = None
    if cap_nodes is not None:
        points = z.caps(cap_nodes)
        caps = (points, z.kernel(*points[:3]))
    rows: dict[float, dict] = {}
    h, prev = solve_disc(z, 1.0, c=c)[0], 1.0

    def path(b0, b1, h, depth=0):
        hn, res = solve_disc(z, b1, h, c=c)
        if log is not None:
            log(b1, res)
        if res <= 1e-9 or depth >= 10:
            return hn, res
        mid = math.sqrt(b0 * b1)
        return path(mid, b1, path(b0, mid, h, depth + 1)[0], depth + 1)

    for b in sorted((float(x) for x in betas), reverse=True):
        h, res = path(prev, b, h)
        prev = b
        rows[b] = dict(observables_disc(z, h, b, c=c, caps=caps), residual=res)
    out = {key: [rows[float(b)][key] for b in betas] for key in ("q", "q_abs_a", "aligned", "residual")}
    out["beta"] = [float(b) for b in betas]
    return out


# --- the particle simulation ------------------------------------------------------------------------------------
def _kappa_t(t: torch.Tensor) -> torch.Tensor:
    t = t.clamp(-1.0, 1.0)
    return (torch.sqrt((1 - t * t).clamp_min(0)) + (math.pi - torch.arccos(t)) * t) / (2 * math.pi)


def _kappa_prime_t(t: torch.Tensor) -> torch.Tensor:
    return (math.pi - torch.arccos(t.clamp(-1.0, 1.0))) / (2 * math.pi)


def particle_drift(a: torch.Tensor, w: torch.Tensor, c: float, interaction: bool = True):
    """``(∂_{a_i}, ∇_{w_i})`` of M·L(ρ_M) for the population loss, teacher w* = e₁: (B, M) and (B, M, d)."""
    M = a.shape[1]
    t = w[..., 0]  # (B, M)
    h = -c * _kappa_t(t)  # (B, M)
    gw = torch.zeros_like(w)  # (B, M, d)
    gw[..., 0] = -c * _kappa_prime_t(t)
    if interaction:
        G = w @ w.transpose(1, 2)  # (B, M, M)
        h = h + (_kappa_t(G) @ a[..., None])[..., 0] / M
        gw = gw + (_kappa_prime_t(G) * a[:, None, :]) @ w / M
    return h, a[..., None] * gw


def _reflect(a: torch.Tensor, A: float) -> torch.Tensor:
    a = torch.where(a > A, 2 * A - a, a)
    return torch.where(a < -A, -2 * A - a, a).clamp(-A, A)


def simulate(
    d, beta, M, B, eta, burn, measure, *, generator, interaction=True, c=C_TEACHER, A=A_CLIP, every=5
):
    """Time averages after ``burn`` of (q, q_|a|) per replica at steps η and 2η on one Brownian path: {k: (B, 2)}."""
    dt = torch.float64
    w0 = torch.randn(B, M, d, generator=generator, dtype=dt)
    w0 = w0 / w0.norm(dim=-1, keepdim=True)
    a0 = torch.randn(B, M, generator=generator, dtype=dt).clamp(-A, A)
    state = {k: (a0.clone(), w0.clone()) for k in (1, 2)}
    n_burn = 2 * round(burn / eta / 2)
    n_all = n_burn + 2 * every * round(measure / eta / (2 * every))
    sums = {k: torch.zeros(B, 2, dtype=dt) for k in (1, 2)}
    count = 0
    sq = math.sqrt(2 * beta * eta)
    pending = None
    for n in range(n_all):
        xa = torch.randn(B, M, generator=generator, dtype=dt) * sq  # (B, M)
        xw = torch.randn(B, M, d, generator=generator, dtype=dt) * sq  # (B, M, d)
        for k in (1, 2):
            if k == 2 and n % 2 == 0:
                pending = (xa, xw)
                continue
            na, nw = (xa, xw) if k == 1 else (pending[0] + xa, pending[1] + xw)
            a, w = state[k]
            h, gw = particle_drift(a, w, c, interaction)
            a = _reflect(a - k * eta * h + na, A)
            w = w - k * eta * gw + nw
            state[k] = (a, w / w.norm(dim=-1, keepdim=True))
        if n >= n_burn and (n + 1) % (2 * every) == 0:
            count += 1
            for k in (1, 2):
                a, w = state[k]
                t2 = w[..., 0].square()  # (B, M)
                sums[k] += torch.stack([t2.mean(1), (a.abs() * t2).sum(1) / a.abs().sum(1)], -1)
    return {k: (v / count).numpy() for k, v in sums.items()}


def _richardson(per: dict[int, np.ndarray], j: int):
    """Jackknife value and SE of 2v(η) − v(2η), and of v(η) − v(2η), for observable ``j`` (column of (B, 2))."""
    col = {k: v[:, j] for k, v in per.items()}  # {level: (B,)}
    value = jackknife(lambda m: 2 * m[1] - m[2], col)
    diff = jackknife(lambda m: m[1] - m[2], col)
    return value, diff


def run(preset: str = "fast", *, interaction: bool = True) -> CheckResult:
    p = PRESETS[preset]
    result = CheckResult("feature_transition", CLAIM, preset=preset)
    gen = torch.Generator().manual_seed(28)
    rng = np.random.default_rng(28)
    data: dict = dict(points=[], curves={}, crossings={})

    # the kernel: closed form against Monte Carlo over Gaussian inputs, and the zonal integral against sampling
    n_mc = 400_000
    rho_t = 0.3
    u = rng.standard_normal(n_mc)
    v = rho_t * u + math.sqrt(1 - rho_t**2) * rng.standard_normal(n_mc)
    prod = np.maximum(u, 0) * np.maximum(v, 0)
    result.add(
        f"arc-cosine kernel κ({rho_t}) vs Monte Carlo E[relu(u)relu(v)]",
        float(prod.mean()),
        float(kappa(rho_t)),
        Z * float(prod.std() / math.sqrt(n_mc)),
        note=f"{n_mc} Gaussian pairs",
    )
    d0 = p["points"][0][0]
    z0 = Zonal(d0)
    i, j = int(np.argmin(np.abs(z0.t - 0.5))), int(np.argmin(np.abs(z0.t + 0.2)))
    e = np.zeros(d0)
    e[0] = 1.0
    vv = rng.standard_normal((n_mc // 4, d0))
    vv[:, 0] = 0.0
    vv /= np.linalg.norm(vv, axis=1, keepdims=True)  # uniform on S^{d−2} ⊥ e
    wi = z0.t[i] * e + math.sqrt(1 - z0.t[i] ** 2) * np.eye(d0)[1]
    wj = z0.t[j] * e[None, :] + math.sqrt(1 - z0.t[j] ** 2) * vv
    sample = kappa(wj @ wi)
    result.add(
        f"zonal kernel K_d(t, s) vs sampling the sphere, d={d0}, t={z0.t[i]:.3f}, s={z0.t[j]:.3f}",
        float(sample.mean()),
        float(z0.K[i, j]),
        Z * float(sample.std() / math.sqrt(len(sample))),
        note="checks the Gauss–Jacobi weight (1 − u²)^{(d−4)/2}",
    )

    for d, beta in p["points"]:
        z = Zonal(d)
        betas = np.geomspace(1.0, beta, 12)
        h, res = solve(z, 1.0)
        for b0, b in zip(betas, betas[1:]):
            h, res = solve_path(z, float(b0), float(b), h)
        ref = observables(z, h, beta)
        teacher_only = observables(z, -C_TEACHER * kappa(z.t), beta)
        result.add(
            f"fixed-point residual max|h − T(h)|, d={d}, β={beta:g}",
            res,
            0.0,
            1e-9,
            note="Newton, 12-step continuation",
        )
        M, B = p["M"], p["B"]
        runs = {
            M: simulate(
                d, beta, M, B, p["eta"], p["burn"], p["measure"], generator=gen, interaction=interaction
            ),
            M // 4: simulate(
                d,
                beta,
                M // 4,
                2 * B,
                p["eta"],
                p["burn"],
                p["measure"],
                generator=gen,
                interaction=interaction,
            ),
        }
        point = dict(d=d, beta=beta, reference=ref, teacher_only=teacher_only)
        for jdx, key in enumerate(("q", "q_abs_a")):
            big = _richardson({1: runs[M][1], 2: runs[M][2]}, jdx)
            small = _richardson({1: runs[M // 4][1], 2: runs[M // 4][2]}, jdx)
            value, diff = big
            finite_m = (small[0].value - value.value) / 3
            finite_m_se = math.hypot(small[0].se, value.se) / 3
            tol = Z * value.se + abs(diff.value) / 2 + abs(finite_m) + Z * finite_m_se
            tag = f"d={d}, β={beta:g}"
            result.add(
                f"{key} (η→0), M={M}, {tag}",
                value.value,
                ref[key],
                tol,
                detectable=tol,
                note=(
                    f"self-consistent Gibbs law; η={p['eta']}; 5·SE {Z * value.se:.1e} + O(η²) {abs(diff.value) / 2:.1e}"
                    f" + finite-M |{finite_m:.1e}| + 5·{finite_m_se:.1e} (companion M={M // 4})"
                ),
            )
            if key == "q":
                result.add(
                    f"negative control: q = 1/d (uniform law), {tag}",
                    value.value,
                    1 / d,
                    tol,
                    expect="differ",
                )
                result.add(
                    f"negative control: teacher-only Gibbs law (no student term), {tag}",
                    value.value,
                    teacher_only["q"],
                    tol,
                    expect="differ",
                    note="the student–student term a·a'κ(w·w') lowers q",
                )
            point[key] = dict(value=value.value, se=value.se, tol=tol, small=small[0].value)
        data["points"].append(point)

    betas = np.geomspace(1.0, BETA_COLD, p["n_beta"])
    for d in p["curve_d"]:
        cur = curve(d, betas)
        uni = uniform_values(d)
        data["curves"][str(d)] = cur
        data["crossings"][str(d)] = {
            key: half_crossing(betas, cur[key], uni[key], cur[key][-1]) for key in ("q", "q_abs_a", "aligned")
        }
    result.data = data
    return result


def plot(result: CheckResult):
    data = result.data
    fig, (ax1, ax2) = figure(ncols=2)
    for i, (d, cur) in enumerate(data["curves"].items()):
        b = np.array(cur["beta"])
        ax1.semilogx(b * int(d) / 4, cur["q"], color=f"C{i}", label=f"q, d = {d}")
        ax1.semilogx(b * int(d) / 4, cur["aligned"], color=f"C{i}", ls="--", label=f"aligned, d = {d}")
    for pt in data["points"]:
        ax1.errorbar(
            pt["beta"] * pt["d"] / 4,
            pt["q"]["value"],
            yerr=pt["q"]["tol"],
            fmt="o",
            mec="k",
            label=f"simulated q, d = {pt['d']} (±tolerance)",
        )
        ax1.plot(
            pt["beta"] * pt["d"] / 4, pt["reference"]["q"], "k_", ms=14, label=f"mean-field q, d = {pt['d']}"
        )
    ax1.set(xlabel="β·d/4", ylabel="order parameter", title="mean-field law, single-index ReLU teacher")
    ax1.legend(fontsize=7)
    ds = [int(d) for d in data["crossings"]]
    for key, marker in (("q", "o"), ("q_abs_a", "s"), ("aligned", "^")):
        ax2.loglog(ds, [data["crossings"][str(d)][key] for d in ds], marker=marker, label=key)
    ax2.set(xlabel="d", ylabel="β_half (predicted)", title="half-way temperature")
    ax2.legend(fontsize=7)
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
