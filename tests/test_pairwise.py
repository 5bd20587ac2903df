"""meanfield.drift.pairwise (blocked torch and KeOps reductions) and the Sinkhorn divergence built on it.

Oracles: the dense formulas written with ``torch.cdist`` and an explicit ``logsumexp`` over the full matrix;
KeOps against torch (skipped without ``pykeops``); GeomLoss's ``SamplesLoss("sinkhorn")`` (skipped without
``geomloss``), whose schedule and updates ours follows, to round-off; POT's converged Sinkhorn for ``p = 1``.
"""

from __future__ import annotations

import math

import ot
import pytest
import torch

import meanfield.drift.pairwise as pairwise
from meanfield.drift.pairwise import radial_sum, resolve_backend, softmin
from meanfield.drift.potentials import GaussianInteraction, RadialInteraction
from meanfield.metrics.wasserstein import sinkhorn_divergence

DT = torch.float64
keops = pytest.mark.skipif(not pairwise.keops_available(), reason="pykeops is not installed")


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def clouds(B=2, M=37, N=29, d=3, seed=0, offset=4.0):
    g = gen(seed)
    x = torch.randn(B, M, d, generator=g, dtype=DT) + offset  # (B, M, d) away from 0: centring matters
    y = 0.7 * torch.randn(B, N, d, generator=g, dtype=DT) + offset + 0.5  # (B, N, d)
    return x, y


def dense_softmin(x, y, h, eps, p):
    C = torch.cdist(x, y) ** p  # (B, M, N)
    return -eps[:, None] * torch.logsumexp(h[:, None, :] - C / eps[:, None, None], -1)  # (B, M)


@pytest.mark.parametrize("p", [1, 2])
def test_softmin_equals_the_dense_formula_in_blocks(p):
    x, y = clouds()
    h = torch.randn(2, 29, generator=gen(1), dtype=DT)
    eps = torch.tensor([0.3, 0.05], dtype=DT)  # one ε per replica
    expected = dense_softmin(x, y, h, eps, p)  # (B, M)
    for max_elements in (1, 100, 10**6):  # one row per block, a few rows, everything at once
        got, used = softmin(x, y, h, eps, p=p, backend="torch", max_elements=max_elements)
        assert used == "torch"
        torch.testing.assert_close(got, expected, rtol=1e-11, atol=1e-11)
    other, _ = softmin(x, y, h, eps * 1.01, p=p, backend="torch")  # negative control: another ε
    assert (other - expected).abs().max() > 1e-4


def test_float32_softmin_drops_only_terms_below_e_minus_80_and_keeps_empty_rows():
    """The float32 log-sum-exp raises terms below e^{−80}·max (subnormal, slow on a CPU) to that level.

    Oracle: float64 ``torch.logsumexp`` of the same numbers. The spread (z up to −400) puts most terms
    in float32's subnormal range; the bound is float32 round-off on ~600 terms (1e-5 relative); a wrong
    floor (e^{−8} instead of e^{−80}) is the negative control and errs by ~1e-2.
    """
    z = -400.0 * torch.rand(3, 7, 600, generator=gen(5), dtype=DT)  # (3, 7, 600)
    z[0, 0] = -math.inf  # a row with no mass: log 0
    expected = torch.logsumexp(z, -1)  # (3, 7)
    got = pairwise._logsumexp_(z.float().clone())  # (3, 7)
    assert torch.isneginf(got[0, 0])
    finite = torch.isfinite(expected)
    torch.testing.assert_close(got[finite].double(), expected[finite], rtol=1e-5, atol=1e-5)
    wrong = torch.logsumexp(z.clamp_min(z.amax(-1, keepdim=True) - 8.0), -1)  # negative control: floor e^{−8}
    assert (wrong[finite] - expected[finite]).abs().max() > 1e-3
    x, y = clouds(B=1, M=300, N=200, d=2, seed=6)  # the full reduction in float32 against float64
    h = torch.randn(1, 200, generator=gen(7), dtype=DT)
    f32, _ = softmin(x.float(), y.float(), h.float(), 0.01, backend="torch", max_elements=5000)
    f64, _ = softmin(x, y, h, 0.01, backend="torch")
    torch.testing.assert_close(f32.double(), f64, rtol=2e-5, atol=2e-5)


def test_the_gaussian_kernel_in_place_on_blocks_keeps_gradients():
    """``GaussianInteraction`` exponentiates the torch backend's fresh blocks in place, but not when a
    gradient flows through them: ``energy`` is differentiable and its gradient is the drift's formula."""
    x = torch.randn(1, 40, 2, generator=gen(8), dtype=DT).requires_grad_(True)  # (1, M, d)
    W = GaussianInteraction(c=0.8, length=0.6, backend="torch")
    total = W.energy(x).sum() / 2  # ½ (1/M) Σ_ij W(x_i − x_j): its gradient in x_i is (1/M) Σ_j ∇W(x_i − x_j)
    (grad,) = torch.autograd.grad(total, x)  # (1, M, d)
    with torch.no_grad():
        r2 = torch.cdist(x, x) ** 2  # (1, M, M)
        expected = W.mean_field_grad(x)  # (1, M, d) ∇_i (1/M) Σ_j W(x_i − x_j)
        k = 0.8 * torch.exp(-r2 / (2 * 0.36))  # (1, M, M)
        dense = ((x.unsqueeze(2) - x.unsqueeze(1)) * k.unsqueeze(-1)).sum(2) * (-1 / 0.36) / 40  # (1, M, d)
    torch.testing.assert_close(expected, dense, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-12)


def test_radial_sum_equals_the_dense_formula_in_blocks():
    x, y = clouds()
    values = torch.randn(2, 29, 4, generator=gen(2), dtype=DT)  # (B, N, k)
    r2 = torch.cdist(x, y) ** 2  # (B, M, N)
    expected = torch.exp(-0.7 * r2) @ values  # (B, M, k)
    for max_elements in (1, 200, 10**6):
        got, _ = radial_sum(
            x, y, lambda u: (-u).exp(), values, scale=0.7, backend="torch", max_elements=max_elements
        )
        torch.testing.assert_close(got, expected, rtol=1e-11, atol=1e-11)
    wrong, _ = radial_sum(x, y, lambda u: (-u).exp(), values, scale=0.71, backend="torch")
    assert (wrong - expected).abs().max() > 1e-4


def test_radial_sum_per_replica_scale_and_without_the_self_pairs_equals_the_dense_formula():
    """Dense oracle: Σ_{j≠i} φ(s_b |x_i − x_j|²) v_j with the diagonal removed by a mask, s per replica; in
    blocks of every size, and differentiable (the autograd path masks out of place). The negative control
    keeps the self-pairs, which add φ(0)·v_i."""
    x, _ = clouds(M=23)
    values = torch.randn(2, 23, 3, generator=gen(3), dtype=DT)  # (B, M, k)
    s = torch.tensor([0.4, 1.7], dtype=DT)
    r2 = torch.cdist(x, x) ** 2 * s.view(2, 1, 1)  # (B, M, M)
    off = ~torch.eye(23, dtype=torch.bool)
    expected = (torch.exp(-r2) * off) @ values  # (B, M, k)
    for max_elements in (1, 100, 10**6):
        got, used = radial_sum(
            x,
            x,
            lambda u: (-u).exp(),
            values,
            scale=s,
            backend="torch",
            max_elements=max_elements,
            exclude_self=True,
        )
        torch.testing.assert_close(got, expected, rtol=1e-11, atol=1e-11)
    grad_x = x.clone().requires_grad_(True)
    got, _ = radial_sum(
        grad_x, grad_x, lambda u: (-u).exp(), values, scale=s, max_elements=100, exclude_self=True
    )
    torch.testing.assert_close(got.detach(), expected, rtol=1e-11, atol=1e-11)
    kept, _ = radial_sum(x, x, lambda u: (-u).exp(), values, scale=s, backend="torch")
    torch.testing.assert_close(kept - expected, values, rtol=1e-10, atol=1e-10)  # φ(0) = 1 times v_i
    # a singular φ: the diagonal's ∞ never reaches the sum
    inv, _ = radial_sum(x, x, lambda u: 1 / u, values, exclude_self=True, max_elements=50)
    r2_plain = torch.cdist(x, x) ** 2 + torch.eye(23, dtype=DT)  # (B, M, M), 1 on the diagonal (masked)
    torch.testing.assert_close(inv, (off / r2_plain) @ values, rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="same cloud"):
        radial_sum(x, x[:, :5], lambda u: u, values[:, :5], exclude_self=True)
    with pytest.raises(ValueError, match="scale has 3 per-replica values, but x has B = 2"):
        radial_sum(x, x, lambda u: u, values, scale=torch.ones(3))


def test_auto_is_torch_on_the_cpu_and_bad_names_or_a_missing_keops_are_refused(monkeypatch):
    assert resolve_backend("auto", 2, "cpu") == "torch"
    assert resolve_backend("torch", 2, "cpu") == "torch"
    with pytest.raises(ValueError, match="backend must be one of"):
        resolve_backend("cuda", 2)
    monkeypatch.setattr(pairwise, "keops_available", lambda: False)
    with pytest.raises(ValueError, match="needs pykeops"):
        resolve_backend("keops", 2)
    assert resolve_backend("auto", 2, "cuda") == "torch"  # no KeOps: torch everywhere
    with pytest.raises(ValueError, match="needs pykeops"):
        GaussianInteraction(1.0, 1.0, backend="keops")


@keops
@pytest.mark.parametrize("p", [1, 2])
def test_keops_equals_torch(p):
    x, y = clouds()
    h = torch.randn(2, 29, generator=gen(3), dtype=DT)
    eps = torch.tensor([0.3, 0.05], dtype=DT)
    a, used = softmin(x, y, h, eps, p=p, backend="keops")
    b, _ = softmin(x, y, h, eps, p=p, backend="torch")
    assert used == "keops"
    torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-11)
    values = torch.randn(2, 29, 4, generator=gen(4), dtype=DT)
    a, _ = radial_sum(x, y, lambda u: (-u).exp(), values, scale=0.7, backend="keops")
    b, _ = radial_sum(x, y, lambda u: (-u).exp(), values, scale=0.7, backend="torch")
    torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-11)


@keops
def test_interactions_on_keops_equal_torch_and_report_the_backend():
    x, _ = clouds(M=40)
    for make in (
        lambda b: GaussianInteraction(0.8, 0.6, backend=b),
        lambda b: RadialInteraction(lambda r2: 1 / (1 + r2), lambda r2: -1 / (1 + r2) ** 2, backend=b),
    ):
        on_keops, on_torch = make("keops"), make("torch")
        torch.testing.assert_close(
            on_keops.mean_field_grad(x), on_torch.mean_field_grad(x), rtol=1e-10, atol=1e-12
        )
        torch.testing.assert_close(on_keops.energy(x), on_torch.energy(x), rtol=1e-10, atol=1e-12)
        assert (on_keops.backend_used, on_torch.backend_used) == ("keops", "torch")
    # ψ' written with torch.exp cannot act on a LazyTensor: asked for KeOps it says so
    with_torch_exp = RadialInteraction(lambda r2: torch.exp(-r2), lambda r2: -torch.exp(-r2), backend="keops")
    with pytest.raises(TypeError):
        with_torch_exp.mean_field_grad(x)


# ---------------------------------------------------------------------------------------------------------
# Sinkhorn divergence


def normalised(w: torch.Tensor) -> torch.Tensor:
    return w / w.sum()


@pytest.mark.parametrize("reach", [None, 0.5])
@pytest.mark.parametrize("scaling", [0.5, 0.8])
@pytest.mark.parametrize("eps", [0.05, 0.3])
def test_sinkhorn_divergence_with_the_geomloss_schedule_equals_geomloss(eps, scaling, reach):
    """GeomLoss's cost is ``|x − y|²/2``: ours with ``(ε, ρ)`` is twice GeomLoss with ``blur = sqrt(ε/2)``,
    ``reach = sqrt(ρ/2)``. Same schedule, same updates: equal to round-off (weighted, balanced and not)."""
    geomloss = pytest.importorskip("geomloss")
    g = gen(5)
    x = torch.randn(120, 3, generator=g, dtype=DT)
    y = torch.rand(90, 3, generator=g, dtype=DT) + 0.3
    a, b = torch.rand(120, generator=g, dtype=DT), torch.rand(90, generator=g, dtype=DT)
    loss = geomloss.SamplesLoss(
        "sinkhorn",
        p=2,
        blur=math.sqrt(eps / 2),
        scaling=scaling,
        reach=None if reach is None else math.sqrt(reach / 2),
        debias=True,
        backend="tensorized",
    )
    theirs = 2 * float(loss(normalised(a), x, normalised(b), y))
    ours = sinkhorn_divergence(
        x, y, x_weights=a, y_weights=b, epsilon=eps, scaling=scaling, reach=reach, tol=None, backend="torch"
    )
    assert ours.converged is None and ours.backend == "torch"
    assert abs(float(ours.divergence) - theirs) <= 1e-12 * abs(theirs) + 1e-13
    other = sinkhorn_divergence(
        x, y, x_weights=a, y_weights=b, epsilon=1.05 * eps, scaling=scaling, reach=reach, tol=None
    )
    assert abs(float(other.divergence) - theirs) > 1e-6  # negative control: another ε is told apart


def test_sinkhorn_p1_matches_pots_converged_value():
    g = gen(6)
    x, y = torch.randn(40, 2, generator=g, dtype=DT), torch.rand(30, 2, generator=g, dtype=DT) + 0.5
    u, v = torch.full((40,), 1 / 40, dtype=DT), torch.full((30,), 1 / 30, dtype=DT)
    pot = ot.solve_sample(x, y, u, v, metric="euclidean", reg=0.2, debias=True, tol=1e-12, max_iter=100_000)
    ours = sinkhorn_divergence(x, y, p=1, epsilon=0.2, tol=1e-9, max_iter=20_000)
    assert ours.converged and abs(float(ours.divergence) - float(pot.value)) <= 1e-8
    assert abs(float(sinkhorn_divergence(x, y + 0.01, p=1, epsilon=0.2).divergence) - float(pot.value)) > 1e-4


def test_an_infinite_reach_is_balanced_and_a_batch_is_its_replicas():
    """``ρ → ∞`` gives balanced OT (damping ``1/(1 + ε/ρ) → 1``); a batch equals its replicas one by one to the
    stopping rule (the batch stops when its slowest replica does)."""
    x, y = clouds(B=3, M=30, N=25, d=2, seed=7, offset=0.0)
    kw = {"epsilon": 0.5, "tol": 1e-9, "max_iter": 5000}
    balanced = sinkhorn_divergence(x, y, **kw).divergence  # (B,)
    far = sinkhorn_divergence(x, y, reach=1e9, **kw).divergence  # (B,)
    torch.testing.assert_close(far, balanced, rtol=1e-6, atol=0)
    near = sinkhorn_divergence(x, y, reach=0.1, **kw).divergence  # (B,)
    assert (near < 0.9 * balanced).all()  # negative control: a short reach pays less than transport
    singles = torch.stack([sinkhorn_divergence(x[r], y[r], **kw).divergence for r in range(3)])  # (B,)
    torch.testing.assert_close(balanced, singles, rtol=1e-7, atol=0)


def test_float32_is_within_its_tolerance_of_float64():
    x, y = clouds(B=1, M=150, N=150, d=5, seed=8)
    s64 = float(sinkhorn_divergence(x, y, epsilon=0.5, tol=1e-6).divergence)
    s32 = float(sinkhorn_divergence(x.float(), y.float(), epsilon=0.5, tol=1e-4).divergence)
    assert abs(s32 - s64) <= 1e-4 * s64


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"scaling": 1.0}, "scaling"),
        ({"scaling": 0.0}, "scaling"),
        ({"tol": -1.0}, "tol"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"reach": -1.0}, "reach"),
        ({"max_iter": 0}, "max_iter"),
        ({"backend": "gpu"}, "backend"),
        ({"p": 3}, "p must be"),
    ],
)
def test_sinkhorn_divergence_refuses_bad_arguments(kwargs, message):
    x, y = clouds(B=1, M=5, N=5, d=2)
    with pytest.raises(ValueError, match=message):
        sinkhorn_divergence(x, y, **kwargs)


@pytest.mark.parametrize("p", [1, 2])
def test_sinkhorn_from_cached_costs_equals_the_blocked_path(monkeypatch, p):
    """Small clouds compute the three cost matrices once (``DENSE_MAX_ELEMENTS``); the blocked path recomputes
    the distances in each soft-minimum: the same updates, the same value to round-off (float64)."""
    import meanfield.metrics.wasserstein as W

    x, y = clouds(B=2, M=40, N=30, d=3, seed=11)
    cached = sinkhorn_divergence(x, y, p=p, epsilon=0.1, reach=None if p == 2 else 2.0)
    monkeypatch.setattr(W, "DENSE_MAX_ELEMENTS", 0)
    blocked = sinkhorn_divergence(x, y, p=p, epsilon=0.1, reach=None if p == 2 else 2.0)
    assert cached.iterations == blocked.iterations
    # p = 1: |x − y| = sqrt(|x|² + |y|² − 2x·y) turns the ~1e-16 round-off of a zero distance (the diagonal of
    # the self-costs) into ~1e-8, differently in the two paths (unscaled, and scaled by 1/ε): 1e-8 there
    tol = 1e-12 if p == 2 else 1e-8
    torch.testing.assert_close(cached.divergence, blocked.divergence, rtol=tol, atol=tol)
    h = torch.randn(2, 30, generator=gen(12), dtype=DT)
    f, _ = softmin(x, y, h, torch.tensor([0.2, 0.05], dtype=DT), p=p, backend="torch")
    g = pairwise.softmin_from_cost(pairwise.cost_matrix(x, y, p), h, torch.tensor([0.2, 0.05], dtype=DT))
    torch.testing.assert_close(g, f, rtol=tol, atol=tol)
