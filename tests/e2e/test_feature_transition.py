"""Tests of theory/feature_transition.py, the mean-field law of the ReLU teacher–student network on the sphere.

Every reference is independent of the code under test: Monte Carlo over Gaussian inputs for the arc-cosine
kernel (and the population loss written with it), scipy quadrature for the amplitude law, sampling of the sphere
for the zonal kernel, exact moments of the uniform law, autograd for the particle drift, and the variational
characterisation (the solution minimises the free energy L + β·KL) for the fixed point. Each has a negative
control that the same test rejects.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import integrate

from meanfield.studies.validation import load_check

ft = load_check(Path(__file__).resolve().parents[2] / "theory" / "feature_transition.py")


def test_arc_cosine_kernel_matches_monte_carlo_and_rejects_a_wrong_formula():
    rng = np.random.default_rng(0)
    n = 400_000
    for t in (-0.8, 0.0, 0.45, 0.95):
        u = rng.standard_normal(n)
        v = t * u + math.sqrt(1 - t * t) * rng.standard_normal(n)
        prod = np.maximum(u, 0) * np.maximum(v, 0)
        se = prod.std() / math.sqrt(n)
        assert abs(prod.mean() - ft.kappa(t)) <= 5 * se, t
        wrong = (math.sqrt(1 - t * t) + math.acos(t) * t) / (2 * math.pi)  # arccos in place of π − arccos
        if t != 0.0:
            assert abs(prod.mean() - wrong) > 5 * se, t
    assert math.isclose(ft.kappa(1.0), 0.5) and math.isclose(ft.kappa(0.0), 1 / (2 * math.pi))


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")  # ∫ a·dens ≈ 0 at s ≈ 0
@pytest.mark.parametrize("s", [0.0, 1e-7, 0.03, -0.4, 2.5, -40.0])
def test_amplitude_law_moments_match_quadrature(s):
    A = ft.A_CLIP
    dens = lambda a: math.exp(-a * s - A * abs(s))  # noqa: E731  (scaled to avoid overflow)
    Z = integrate.quad(dens, -A, A, epsabs=0, epsrel=1e-12)[0]
    ref = [
        integrate.quad(lambda a, f=f: f(a) * dens(a), -A, A, epsabs=1e-14, epsrel=1e-10)[0] / Z
        for f in (lambda a: a, lambda a: a * a, abs)
    ]
    mean, second, absolute = ft.amplitude_moments(np.array(s), A)
    assert np.allclose([mean, second, absolute], ref, rtol=1e-6, atol=1e-9)
    assert math.isclose(
        float(ft.amplitude_log_normaliser(np.array(s), A)),
        math.log(Z) + A * abs(s),
        rel_tol=1e-7,
        abs_tol=1e-9,
    )
    c = 0.3
    tail = integrate.quad(dens, c, A)[0] + integrate.quad(dens, -A, -c)[0]
    assert math.isclose(float(ft.amplitude_tail(np.array(s), c, A)), tail / Z, rel_tol=1e-6, abs_tol=1e-9)
    if abs(s) > 1:  # negative control: the uniform law's moments (0, A²/3, A/2) are far off
        assert abs(second - A * A / 3) > 0.1


@pytest.mark.parametrize("d", [4, 8, 16])
def test_zonal_grid_and_kernel_against_the_sphere(d):
    z = ft.Zonal(d)
    assert math.isclose(float(z.q.sum()), 1.0)
    assert math.isclose(float((z.q * z.t**2).sum()), 1 / d, rel_tol=1e-10)  # E t² = 1/d under the uniform law
    assert math.isclose(float((z.q * z.t**4).sum()), 3 / (d * (d + 2)), rel_tol=1e-8)
    assert abs(float((z.q * z.t**2).sum()) - 1 / (d - 1)) > 1e-3  # negative control
    rng = np.random.default_rng(d)
    i, j = int(np.argmin(np.abs(z.t - 0.7))), int(np.argmin(np.abs(z.t + 0.35)))
    n = 200_000
    v = rng.standard_normal((n, d))
    v[:, 0] = 0.0
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    wi = np.zeros(d)
    wi[0], wi[1] = z.t[i], math.sqrt(1 - z.t[i] ** 2)
    wj = z.t[j] * np.eye(d)[0] + math.sqrt(1 - z.t[j] ** 2) * v
    sample = ft.kappa(wj @ wi)
    se = sample.std() / math.sqrt(n)
    assert abs(sample.mean() - z.K[i, j]) <= 5 * se
    # negative control: the kernel at the nearest-point overlap t·s alone (no average over the orthogonal part)
    assert abs(sample.mean() - ft.kappa(z.t[i] * z.t[j])) > 5 * se


def test_population_loss_in_kernel_form_matches_monte_carlo_and_the_drift_matches_autograd():
    """½E(f − y)² of a particle network = its kernel form (Monte Carlo over x); M·∂L/∂(a_i, w_i) (tangential part
    for w) from autograd of the kernel form = :func:`particle_drift`."""
    torch.manual_seed(0)
    d, M, c = 5, 7, ft.C_TEACHER
    w = torch.randn(1, M, d, dtype=torch.float64)
    w = w / w.norm(dim=-1, keepdim=True)
    a = torch.randn(1, M, dtype=torch.float64)
    x = torch.randn(400_000, d, dtype=torch.float64)
    f = torch.relu(x @ w[0].T) @ a[0] / M
    y = c * torch.relu(x[:, 0])
    sq = 0.5 * (f - y).square()

    def kernel_loss(a, w):
        G = (w[0] @ w[0].T).clamp(-1, 1)
        off = ~torch.eye(M, dtype=torch.bool)
        K = torch.where(off, ft._kappa_t(torch.where(off, G, torch.zeros_like(G))), torch.full_like(G, 0.5))
        return 0.5 * a[0] @ K @ a[0] / M**2 - c * (a[0] * ft._kappa_t(w[0, :, 0])).sum() / M + c * c / 4

    L = kernel_loss(a, w)
    assert abs(float(sq.mean()) - float(L)) <= 5 * float(sq.std()) / math.sqrt(len(x))
    a_ = a.clone().requires_grad_(True)
    w_ = w.clone().requires_grad_(True)
    ga, gw = torch.autograd.grad(M * kernel_loss(a_, w_), (a_, w_))
    h, drift_w = ft.particle_drift(a, w, c)
    assert torch.allclose(h, ga, atol=1e-12)
    tangent = lambda g: g - (g * w).sum(-1, keepdim=True) * w  # noqa: E731
    assert torch.allclose(tangent(drift_w), tangent(gw), atol=1e-12)
    h0, _ = ft.particle_drift(a, w, c, interaction=False)  # negative control: no student term
    assert not torch.allclose(h0, ga, atol=1e-3)


def _free_energy(z, h, beta, A=ft.A_CLIP, c=ft.C_TEACHER):
    """F = L + β·KL(ρ_h | uniform on [−A, A] × S^{d−1}) of the law ρ_h ∝ exp(−a·h(t)/β), from its (a, t) form."""
    s = h / beta
    lz = ft.amplitude_log_normaliser(s, A)
    top = lz.max()
    p = np.exp(lz - top)
    norm = (z.q * p).sum()
    rho = z.q * p / norm
    mean, _, _ = ft.amplitude_moments(s, A)
    g = mean * p / norm  # amplitude density against the uniform law
    L = 0.5 * (z.q * g) @ z.K @ (z.q * g) - c * (z.q * g * ft.kappa(z.t)).sum() + c * c / 4
    kl = math.log(2 * A) - (math.log(norm) + top) - (rho * mean * h).sum() / beta
    return L + beta * kl


@pytest.mark.parametrize("d,beta", [(8, 0.05), (16, 2e-3)])
def test_the_fixed_point_minimises_the_free_energy(d, beta):
    """The solution is the free energy's minimiser over the Gibbs family ρ_h: random perturbations of h raise F,
    at second order; the teacher-only field (no student term) is not the minimiser."""
    z = ft.Zonal(d)
    h = None
    for b in np.geomspace(1.0, beta, 10):
        h, res = ft.solve(z, float(b), h0=h)
    assert res < 1e-10
    F0 = _free_energy(z, h, beta)
    rng = np.random.default_rng(1)
    for _ in range(5):
        delta = rng.standard_normal(len(h)) * 1e-3 * beta  # δs = δh/β ~ 1e-3: F − F0 = O(δ²), odd part O(δ³)
        up, down = _free_energy(z, h + delta, beta), _free_energy(z, h - delta, beta)
        assert up > F0 and down > F0
        assert abs(up - down) < 0.1 * (up + down - 2 * F0)  # no first-order term
    assert _free_energy(z, -ft.C_TEACHER * ft.kappa(z.t), beta) > F0 + 1e-4


def test_predictions_are_intensive_and_ordered():
    """The hot law is uniform (q → 1/d), the cold one aligned; the half-way temperatures fall with d."""
    z = ft.Zonal(8)
    h, _ = ft.solve(z, 50.0)
    assert abs(ft.observables(z, h, 50.0)["q"] - 1 / 8) < 2e-3
    cross = {d: ft.predicted_crossings(d, n_beta=31) for d in (8, 16)}
    for key in ("q", "q_abs_a", "aligned"):
        assert 0 < cross[16][key] < cross[8][key] < 1
    assert math.isnan(ft.half_crossing([1e-3, 1e-2], [0.5, 0.45], 0.1, 0.5))  # never reaches half way


@pytest.fixture(scope="module")
def disc():
    return ft.Disc(8, n_theta=2, n_phi=2, n_u=8)


def test_disc_grid_and_kernel_against_the_sphere(disc):
    """Two teacher directions: the (θ, φ) grid integrates the uniform law's moments of (t_1, t_2) exactly
    enough, and its kernel matches sampling the orthogonal part of w' (negative control: no orthogonal part)."""
    d, z = 8, disc
    assert math.isclose(float(z.q.sum()), 1.0)
    # a coarse grid (2 nodes per panel, for speed) integrates them to a few 1e-4 (the page's grid: 4 per panel)
    assert math.isclose(float((z.q * (z.t1**2 + z.t2**2)).sum()), 2 / d, rel_tol=2e-3)
    assert math.isclose(float((z.q * z.t1**4).sum()), 3 / (d * (d + 2)), rel_tol=5e-3)
    assert math.isclose(float((z.q * z.t1**2 * z.t2**2).sum()), 1 / (d * (d + 2)), rel_tol=5e-3)
    assert abs(float((z.q * (z.t1**2 + z.t2**2)).sum()) - 2 / (d - 1)) > 1e-3
    rng = np.random.default_rng(5)
    i = int(np.argmin((z.t1 - 0.6) ** 2 + (z.t2 - 0.3) ** 2))
    j = int(np.argmin((z.t1 + 0.2) ** 2 + (z.t2 - 0.5) ** 2))
    n = 200_000
    v = rng.standard_normal((n, d))
    v[:, :3] = 0.0
    v /= np.linalg.norm(v, axis=1, keepdims=True)  # uniform on the sphere ⊥ (w*_1, w*_2, e_3)
    wi = np.zeros(d)
    wi[0], wi[1] = z.t1[i], z.t2[i]
    wi[2] = math.sqrt(1 - z.t1[i] ** 2 - z.t2[i] ** 2)
    wj = np.zeros((n, d))
    wj[:, 0], wj[:, 1] = z.t1[j], z.t2[j]
    rj = math.sqrt(1 - z.t1[j] ** 2 - z.t2[j] ** 2)
    cos = rng.standard_normal((n, d - 2))
    cos /= np.linalg.norm(cos, axis=1, keepdims=True)  # a uniform direction of the orthogonal complement
    wj[:, 2:] = rj * cos
    sample = ft.kappa(wj @ wi)
    se = sample.std() / math.sqrt(n)
    assert abs(sample.mean() - z.K[i, j]) <= 5 * se
    plane = z.t1[i] * z.t1[j] + z.t2[i] * z.t2[j]
    assert abs(sample.mean() - ft.kappa(plane)) > 5 * se


def test_disc_solution_is_hot_uniform_and_cold_aligned(disc):
    h, res = ft.solve_disc(disc, 50.0)
    assert res < 1e-9 and abs(ft.observables_disc(disc, h, 50.0)["q"] - 2 / 8) < 5e-3
    cold = ft.curve_disc(8, [1.0, 0.1, 0.01], cap_nodes=None, n_theta=2, n_phi=2, n_u=8)
    assert max(cold["residual"]) < 1e-9
    assert cold["q"][0] < cold["q"][1] < cold["q"][2]  # more order as β falls


def test_disc_newton_stops_when_its_direction_does_not_descend(disc, monkeypatch):
    """A Newton step that lowers no residual ends the solve at once (the continuation then halves its step in
    β) instead of running every remaining iteration; negative control: the same solve with GMRES's step
    converges. The fake GMRES returns −(Newton's right-hand side) = F, an ascent direction at β = 50."""
    import scipy.sparse.linalg

    real, calls = scipy.sparse.linalg.gmres, []

    def ascent(J, b, **kw):
        calls.append(kw["maxiter"])
        return b, 0  # b = −F: the step −F raises |F|_∞ at every size

    monkeypatch.setattr(scipy.sparse.linalg, "gmres", ascent)
    h, res = ft.solve_disc(disc, 50.0)
    assert len(calls) == 1 and res > 1e-6  # one Newton step, then it gave up
    assert calls == [ft.GMRES_CYCLES]
    monkeypatch.setattr(scipy.sparse.linalg, "gmres", real)
    assert ft.solve_disc(disc, 50.0)[1] < 1e-9


def test_curve_disc_logs_every_solve_in_order(disc):
    seen = []
    out = ft.curve_disc(
        8, [1.0, 0.1], log=lambda b, r: seen.append((b, r)), cap_nodes=None, n_theta=2, n_phi=2, n_u=8
    )
    assert [b for b, _ in seen] == [1.0, 0.1]  # no halving needed on this path
    assert [r for _, r in seen] == out["residual"]


@pytest.mark.parametrize("d", [8, 32])
def test_disc_caps_integrate_the_uniform_cap_mass_exactly(disc, d):
    """The caps' weights sum to the uniform law's mass of max(|t_1|, |t_2|) ≥ 0.9, 2·P(t² ≥ 0.81) with t² ~
    Beta(1/2, (d − 1)/2); every cap node is on the sphere and inside its cap. Negative control: the disc's own
    nodes, where the cap's edge cuts across panels, miss that mass by far more (at d = 8, the coarse grid)."""
    from scipy import special

    z = disc if d == 8 else ft.Disc(d, n_theta=2, n_phi=2, n_u=8)
    t1, t2, r, w = z.caps(8)
    exact = 2 * (1 - special.betainc(0.5, (d - 1) / 2, ft.THRESHOLD**2))
    assert math.isclose(w.sum(), exact, rel_tol=1e-4)  # 7e-5 at d = 32, 1e-14 at d = 8
    np.testing.assert_allclose(t1**2 + t2**2 + r**2, 1.0, rtol=1e-12)  # on the sphere
    assert (np.maximum(abs(t1), abs(t2)) >= ft.THRESHOLD - 1e-12).all()  # inside a cap
    if d == 8:
        on_nodes = float((z.q * (np.maximum(abs(z.t1), abs(z.t2)) >= ft.THRESHOLD)).sum())
        assert abs(on_nodes / exact - 1) > 0.05


def test_field_at_the_nodes_is_the_solution(disc):
    """The Nyström extension of the fixed point, evaluated at the nodes, returns h to within the solve's residual;
    negative control: the extension of another density (2·g) is not h."""
    beta = 0.01
    h, res = ft.solve_disc(disc, 1.0)
    for b in (0.3, 0.1, 0.03, beta):
        h, res = ft.solve_disc(disc, b, h)
    s = h / beta
    lz = ft.amplitude_log_normaliser(s)
    p = np.exp(lz - lz.max())
    mean, _, _ = ft.amplitude_moments(s)
    g = mean * p / (disc.q * p).sum()
    at_nodes = ft.field_at(disc, disc.K, disc.t1, disc.t2, g)
    assert res < 1e-9 and np.abs(at_nodes - h).max() <= 2 * res + 1e-14
    assert np.abs(ft.field_at(disc, disc.K, disc.t1, disc.t2, 2 * g) - h).max() > 1e-3  # another g is not h


def test_observables_disc_extends_the_field_of_the_solves_teacher_weight(disc):
    """With the aligned nodes themselves as "caps" (their own weights and kernel rows), the caps' Nyström field is
    the solution there, so both integrals of the aligned fraction agree to round-off, for a teacher weight c = 0.5
    that is not the default. Negative control: extending the field with the default weight 1/√2 (what
    ``observables_disc`` did before it took ``c``) moves the aligned fraction by more than 1e-3."""
    c, beta = 0.5, 0.003
    h, res = ft.solve_disc(disc, 1.0, c=c)
    for b in np.geomspace(1.0, beta, 8)[1:]:
        h, res = ft.solve_disc(disc, b, h, c=c)
    hit = np.maximum(np.abs(disc.t1), np.abs(disc.t2)) >= ft.THRESHOLD
    caps = ((disc.t1[hit], disc.t2[hit], disc.r[hit], disc.q[hit]), disc.K[hit])
    on_nodes = ft.observables_disc(disc, h, beta, c=c)["aligned"]
    on_caps = ft.observables_disc(disc, h, beta, c=c, caps=caps)["aligned"]
    wrong_c = ft.observables_disc(disc, h, beta, caps=caps)["aligned"]
    assert res < 1e-9 and 0.02 < on_nodes < 0.95
    assert abs(on_caps - on_nodes) < 1e-8
    assert abs(wrong_c - on_nodes) > 1e-3


@pytest.mark.slow
def test_aligned_fraction_on_the_caps_converges_where_the_nodes_do_not():
    """At β = 0.01 (d = 8) the aligned fraction integrated on the caps changes by < 2 % between 4 and 8 cap
    nodes a panel and between disc grids 2×2 and 3×3, while the disc's own node indicator changes by more."""
    betas = [1.0, 0.3, 0.1, 0.03, 0.01]
    small = ft.curve_disc(8, betas, cap_nodes=4, n_theta=2, n_phi=2, n_u=8)["aligned"][-1]
    fine = ft.curve_disc(8, betas, cap_nodes=8, n_theta=2, n_phi=2, n_u=8)["aligned"][-1]
    finer_disc = ft.curve_disc(8, betas, cap_nodes=8, n_theta=3, n_phi=3, n_u=8)["aligned"][-1]
    nodes = [
        ft.curve_disc(8, betas, cap_nodes=None, n_theta=n, n_phi=n, n_u=8)["aligned"][-1] for n in (2, 3)
    ]
    assert abs(small / fine - 1) < 0.02 and abs(finer_disc / fine - 1) < 0.02
    assert abs(nodes[0] / nodes[1] - 1) > 0.02
