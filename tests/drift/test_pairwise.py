"""meanfield.drift.pairwise (blocked torch and KeOps reductions) and the Sinkhorn divergence built on it.

Oracles: the dense formulas written with ``torch.cdist`` and an explicit ``logsumexp`` over the full matrix;
KeOps against torch (skipped without ``pykeops``); GeomLoss's ``SamplesLoss("sinkhorn")`` (skipped without
``geomloss``), whose schedule and updates ours follows, to round-off; POT's converged Sinkhorn for ``p = 1``.
"""

from __future__ import annotations

import math
import sys
import types

import numpy as np
import ot
import pytest
import torch
from helpers.pair_loops import loop_pairs  # tests/helpers/pair_loops.py
from scipy.spatial.distance import cdist

import meanfield.drift.pairwise as pairwise
import meanfield.drift.pairwise as pw
import meanfield.drift.potentials as pot
from meanfield.drift.pairwise import radial_sum, resolve_backend, softmin
from meanfield.drift.potentials import (
    GaussianInteraction,
    RadialInteraction,
)
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


F64 = torch.float64


def cloud(B=2, M=5, d=2, seed=0, dtype=F64, scale=1.0):
    """A seeded ``(B, M, d)`` state."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(B, M, d, generator=g, dtype=F64)).to(dtype)


def per(value, b):
    """Replica ``b``'s value of a number or a ``(B,)`` tensor, as a float."""
    return float(value[b]) if torch.is_tensor(value) else float(value)


def close(actual, expected, rtol=1e-10, atol=1e-12):
    """``actual`` (a tensor or array) equals ``expected`` within the tolerances (float64 comparison)."""
    a = actual.detach().double().numpy() if torch.is_tensor(actual) else np.asarray(actual, dtype=np.float64)
    e = expected.detach().double().numpy() if torch.is_tensor(expected) else np.asarray(expected, np.float64)
    return a.shape == e.shape and np.allclose(a, e, rtol=rtol, atol=atol)


def np_radial(x, y, phi, values, scale, exclude_self=False):
    """``Σ_j φ(s_b |x_i − y_j|²) v_j`` by a double loop (float64 numpy); ``phi`` acts on a number."""
    x, y, values = (np.asarray(t, dtype=np.float64) for t in (x, y, values))
    B, M, _ = x.shape
    out = np.zeros((B, M, values.shape[-1]))
    for b in range(B):
        s = per(scale, b)
        for i in range(M):
            for j in range(y.shape[1]):
                if exclude_self and i == j:
                    continue
                out[b, i] += phi(s * ((x[b, i] - y[b, j]) ** 2).sum()) * values[b, j]
    return out


def np_softmin(x, y, h, eps, p):
    """``f_i = −ε_b log Σ_j exp(h_j − |x_i − y_j|^p / ε_b)`` by a loop over the pairs (float64 numpy)."""
    x, y, h = (np.asarray(t, dtype=np.float64) for t in (x, y, h))
    B, M, _ = x.shape
    out = np.zeros((B, M))
    for b in range(B):
        e = per(eps, b)
        for i in range(M):
            z = np.array(
                [h[b, j] - np.sqrt(((x[b, i] - y[b, j]) ** 2).sum()) ** p / e for j in range(y.shape[1])]
            )
            m = z.max()
            out[b, i] = -e * (m + math.log(np.exp(z - m).sum()))
    return out


class _DenseLazy:
    """A dense stand-in for ``pykeops.torch.LazyTensor``: the same broadcasting of ``(B, M, 1, ·)`` against
    ``(B, 1, N, ·)``, the inner-axis ``sum(-1)`` keeping a trailing axis of 1, and the reductions
    ``sum(dim=2)``/``logsumexp(dim=2)`` returning ordinary tensors, computed on full tensors."""

    def __init__(self, t):
        self.t = t

    @staticmethod
    def _v(other):
        return other.t if isinstance(other, _DenseLazy) else other

    def __sub__(self, o):
        return _DenseLazy(self.t - self._v(o))

    def __rsub__(self, o):
        return _DenseLazy(self._v(o) - self.t)

    def __add__(self, o):
        return _DenseLazy(self.t + self._v(o))

    __radd__ = __add__

    def __mul__(self, o):
        return _DenseLazy(self.t * self._v(o))

    __rmul__ = __mul__

    def __truediv__(self, o):
        return _DenseLazy(self.t / self._v(o))

    def __rtruediv__(self, o):
        return _DenseLazy(self._v(o) / self.t)

    def __neg__(self):
        return _DenseLazy(-self.t)

    def __pow__(self, k):
        return _DenseLazy(self.t**k)

    def exp(self):
        return _DenseLazy(self.t.exp())

    def log(self):
        return _DenseLazy(self.t.log())

    def sqrt(self):
        return _DenseLazy(self.t.sqrt())

    def sum(self, axis=-1, dim=None):
        axis = axis if dim is None else dim
        if axis == -1:
            return _DenseLazy(self.t.sum(-1, keepdim=True))
        return self.t.sum(axis)

    def logsumexp(self, axis=None, dim=None):
        return torch.logsumexp(self.t, axis if dim is None else dim)


@pytest.fixture
def fake_keops(monkeypatch):
    """KeOps "installed": ``keops_available()`` true and ``pykeops.torch.LazyTensor`` the dense stand-in."""
    package, module = types.ModuleType("pykeops"), types.ModuleType("pykeops.torch")
    module.LazyTensor = _DenseLazy
    package.torch = module
    monkeypatch.setitem(sys.modules, "pykeops", package)
    monkeypatch.setitem(sys.modules, "pykeops.torch", module)
    monkeypatch.setattr(pw, "keops_available", lambda: True)


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "autograd_blocks"])
@pytest.mark.parametrize("exclude_self", [False, True], ids=["all_pairs", "no_self_pairs"])
@pytest.mark.parametrize(
    "scale", [None, 0.7, torch.tensor([0.4, 1.3])], ids=["default", "number", "per_replica"]
)
def test_radial_sum_equals_the_double_loop(grad, exclude_self, scale):
    """``radial_sum`` on the torch backend against the explicit double loop ``Σ_j φ(s|x_i − y_j|²) v_j``, in
    blocks of 3, 3 and 1 rows, on both the buffered path and the differentiable one; the default scale is 1.
    Negative control: the loop with scale 2 differs."""
    B, M, d = 2, 7, 3
    x = cloud(B, M, d, seed=6)
    values = cloud(B, M, 2, seed=7)
    kwargs = {} if scale is None else {"scale": scale}
    xin, vin = x.clone(), values.clone()
    if grad:
        xin.requires_grad_(True)
    out, used = pw.radial_sum(
        xin,
        xin,
        lambda r2: torch.exp(-r2),
        vin,
        backend="torch",
        max_elements=B * M * 3,
        exclude_self=exclude_self,
        **kwargs,
    )
    s = 1.0 if scale is None else scale
    expected = np_radial(x, x, lambda r: math.exp(-r), values, s, exclude_self)
    assert used == "torch"
    assert out.requires_grad == grad
    assert close(out, expected)
    if scale is None:
        assert not close(out, np_radial(x, x, lambda r: math.exp(-r), values, 2.0, exclude_self))


def test_radial_sum_without_self_pairs_builds_its_mask_on_the_state_device():
    """With a default device other than the state's (``torch.device("meta")``, as a CUDA default would be for
    a CPU state), the differentiable ``exclude_self`` path still gives the double loop's numbers on the
    state's device: the self-pair mask is made where the block lives."""
    x = cloud(2, 5, 2, seed=8)
    values = cloud(2, 5, 1, seed=9)
    xin = x.clone().requires_grad_(True)
    with torch.device("meta"):
        out, _ = pw.radial_sum(
            xin, xin, lambda r2: torch.exp(-r2), values, backend="torch", max_elements=4, exclude_self=True
        )
    assert out.device.type == "cpu"
    assert close(out, np_radial(x, x, lambda r: math.exp(-r), values, 1.0, exclude_self=True))


def test_radial_sum_in_float32_is_accurate_far_from_the_origin():
    """Clouds far from the origin in float32 (replica 0 around ``(+3000, −3000)``, replica 1 around
    ``(−3000, +3000)``): the distances are computed on clouds centred per replica, so the Gaussian sums match
    the float64 double loop of the same float32 points to 1e-4 relative. Uncentred (or centred on a mean over
    all replicas), ``|x|² + |y|² − 2x·y`` would lose every digit (an error of order 1 in each ``r²``)."""
    base = cloud(2, 6, 2, seed=10)
    offset = torch.tensor([[[3000.0, -3000.0]], [[-3000.0, 3000.0]]], dtype=F64)
    x32 = (base + offset).float()
    values = torch.ones(2, 6, 1)
    out, _ = pw.radial_sum(x32, x32, lambda r2: torch.exp(-r2), values, backend="torch")
    expected = np_radial(x32.double(), x32.double(), lambda r: math.exp(-r), values, 1.0)
    assert close(out, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("eps", [0.5, torch.tensor([0.3, 0.8])], ids=["number", "per_replica"])
def test_softmin_equals_the_pairwise_loop(p, dtype, eps):
    """``softmin`` (torch backend, blocks of 2 rows) against the loop ``−ε log Σ_j exp(h_j − |x_i − y_j|^p/ε)``;
    float32 through the module's own log-sum-exp, float64 through torch's. Tolerance: round-off (1e-4
    relative in float32). Negative control: the sign of ε flipped."""
    x, y = cloud(2, 5, 3, seed=11), cloud(2, 7, 3, seed=12)
    h = torch.randn(2, 7, generator=torch.Generator().manual_seed(13), dtype=F64)
    out, used = pw.softmin(x.to(dtype), y.to(dtype), h.to(dtype), eps, p=p, backend="torch", max_elements=28)
    expected = np_softmin(x, y, h, eps, p)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-10}
    assert used == "torch" and out.dtype == dtype
    assert close(out, expected, **tol)
    assert not close(out, -expected, **tol)


@pytest.mark.parametrize("p", [1, 2])
def test_cost_matrix_is_the_distance_to_the_power_p(p):
    """``cost_matrix(x, y, p)[b, i, j] = |x_i − y_j|^p`` against numpy."""
    x, y = cloud(2, 4, 3, seed=14), cloud(2, 5, 3, seed=15)
    diff = x.numpy()[:, :, None, :] - y.numpy()[:, None, :, :]
    assert close(pw.cost_matrix(x, y, p), np.sqrt((diff**2).sum(-1)) ** p, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("p", [1, 2])
def test_keops_formulas_equal_the_pairwise_loops(fake_keops, p):
    """The KeOps formulas (evaluated by the dense ``LazyTensor`` stand-in) against the same loops as the torch
    backend: ``softmin`` with per-replica ε, and ``radial_sum`` with a per-replica scale. ``exclude_self`` is
    refused on KeOps with the documented message."""
    x, y = cloud(2, 5, 3, seed=16), cloud(2, 7, 3, seed=17)
    h = torch.randn(2, 7, generator=torch.Generator().manual_seed(18), dtype=F64)
    eps = torch.tensor([0.3, 0.8])
    out, used = pw.softmin(x, y, h, eps, p=p, backend="keops")
    assert used == "keops"
    assert close(out, np_softmin(x, y, h, eps, p))
    values = cloud(2, 7, 2, seed=19)
    scale = torch.tensor([0.5, 1.5])
    out, used = pw.radial_sum(x, y, lambda r2: (-r2).exp(), values, scale=scale, backend="keops")
    assert used == "keops"
    assert close(out, np_radial(x, y, lambda r: math.exp(-r), values, scale))
    with pytest.raises(
        ValueError,
        match=r"^exclude_self \(leaving out the self-pairs of a singular kernel\) runs on the torch backend only; "
        r"use backend='torch' \(or 'auto'\)$",
    ):
        pw.radial_sum(x, x, lambda r2: (-r2).exp(), cloud(2, 5, 1), backend="keops", exclude_self=True)


def cloud_2(B=2, M=5, d=2, seed=0, dtype=F64, scale=1.0, offset=0.0):
    """A seeded ``(B, M, d)`` state."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(B, M, d, generator=g, dtype=F64) + offset).to(dtype)


def per_2(value, b):
    """Replica ``b``'s value of a number or a ``(B,)`` tensor."""
    return float(value[b]) if torch.is_tensor(value) else float(value)


def close_2(actual, expected, rtol=1e-10, atol=1e-12):
    """Same shape and equal within the tolerances (compared in float64)."""
    a = actual.detach().double().numpy() if torch.is_tensor(actual) else np.asarray(actual, dtype=np.float64)
    e = expected.detach().double().numpy() if torch.is_tensor(expected) else np.asarray(expected, np.float64)
    return a.shape == e.shape and bool(np.allclose(a, e, rtol=rtol, atol=atol))


def loop_radial(x, y, phi, values, scale=1.0, exclude_self=False):
    """``Σ_j φ(s_b |x_i − y_j|²) v_j`` by a double loop (numpy float64); ``phi`` acts on a float."""
    x, y, values = (np.asarray(t.detach().double().numpy(), dtype=np.float64) for t in (x, y, values))
    B, M, _ = x.shape
    out = np.zeros((B, M, values.shape[-1]))
    for b in range(B):
        s = per_2(scale, b)
        for i in range(M):
            for j in range(y.shape[1]):
                if exclude_self and i == j:
                    continue
                out[b, i] += phi(s * float(((x[b, i] - y[b, j]) ** 2).sum())) * values[b, j]
    return out


def loop_softmin(x, y, h, eps, p):
    """``−ε_b log Σ_j exp(h_j − |x_i − y_j|^p/ε_b)`` with scipy's ``cdist`` and a stable log-sum-exp."""
    x, y, h = (np.asarray(t.detach().double().numpy(), dtype=np.float64) for t in (x, y, h))
    out = np.zeros(x.shape[:2])
    for b in range(x.shape[0]):
        e = per_2(eps, b)
        z = h[b][None, :] - cdist(x[b], y[b]) ** p / e  # (M, N)
        m = z.max(1, keepdims=True)
        out[b] = -e * (m[:, 0] + np.log(np.exp(z - m).sum(1)))
    return out


class DenseLazy:
    """``pykeops.torch.LazyTensor`` on ordinary tensors: broadcasting ``(B, M, 1, ·)`` against
    ``(B, 1, N, ·)``, an inner ``sum(-1)`` that keeps a trailing axis of 1, and the reductions over ``dim=2``
    returning tensors. ``created`` counts the LazyTensors built from tensors (the formulas' inputs)."""

    created = 0

    def __init__(self, t, _inner=False):
        if not _inner:
            DenseLazy.created += 1
            assert t.is_contiguous()  # KeOps needs contiguous inputs
        self.t = t

    @staticmethod
    def _v(o):
        return o.t if isinstance(o, DenseLazy) else o

    def __sub__(self, o):
        return DenseLazy(self.t - self._v(o), True)

    def __rsub__(self, o):
        return DenseLazy(self._v(o) - self.t, True)

    def __add__(self, o):
        return DenseLazy(self.t + self._v(o), True)

    __radd__ = __add__

    def __mul__(self, o):
        return DenseLazy(self.t * self._v(o), True)

    __rmul__ = __mul__

    def __truediv__(self, o):
        return DenseLazy(self.t / self._v(o), True)

    def __rtruediv__(self, o):
        return DenseLazy(self._v(o) / self.t, True)

    def __neg__(self):
        return DenseLazy(-self.t, True)

    def __pow__(self, k):
        return DenseLazy(self.t**k, True)

    def exp(self):
        return DenseLazy(self.t.exp(), True)

    def log(self):
        return DenseLazy(self.t.log(), True)

    def sqrt(self):
        return DenseLazy(self.t.sqrt(), True)

    def sum(self, axis=-1, dim=None):
        axis = axis if dim is None else dim
        if axis == -1:
            return DenseLazy(self.t.sum(-1, keepdim=True), True)
        assert axis == 2
        return self.t.sum(axis)

    def logsumexp(self, axis=None, dim=None):
        assert (axis if dim is None else dim) == 2
        return torch.logsumexp(self.t, 2)


@pytest.fixture
def fake_keops_2(monkeypatch):
    """KeOps "installed" (``keops_available()`` true, ``LazyTensor`` the dense stand-in), and ``"auto"``
    meaning KeOps in the potentials module, as on a GPU."""
    package, module = types.ModuleType("pykeops"), types.ModuleType("pykeops.torch")
    module.LazyTensor = DenseLazy
    package.torch = module
    monkeypatch.setitem(sys.modules, "pykeops", package)
    monkeypatch.setitem(sys.modules, "pykeops.torch", module)
    monkeypatch.setattr(pw, "keops_available", lambda: True)
    real = pw.resolve_backend

    def auto_is_keops(backend, d, device="cpu"):
        return "keops" if backend == "auto" else real(backend, d, device)

    monkeypatch.setattr(pot, "resolve_backend", auto_is_keops)
    DenseLazy.created = 0


def test_gaussian_on_keops_equals_the_double_loop_per_replica(fake_keops_2):
    """``GaussianInteraction`` on KeOps: one formula ``e^{−|√s x_i − √s x_j|²}`` with ``c`` and ``−2sc`` outside,
    per-replica ``c`` and ``ℓ``, against the double loop of ``c e^{−|z|²/2ℓ²}`` and its gradient."""
    c = torch.tensor([1.5, -0.8], dtype=F64)
    ell = torch.tensor([0.6, 1.7], dtype=F64)
    W = GaussianInteraction(c, ell)
    x = cloud_2(B=2, M=6, d=3, seed=12)

    def Wf(b, z):
        return per_2(c, b) * math.exp(-(z @ z) / (2 * per_2(ell, b) ** 2))

    def gWf(b, z):
        return -Wf(b, z) / per_2(ell, b) ** 2 * z

    energy, grad = loop_pairs(x, Wf, gWf)
    assert close_2(W.energy(x), energy) and close_2(W.mean_field_grad(x), grad)
    assert W.backend_used == "keops"


def test_pairwise_constants():
    """The documented constants: the two backends, blocks of ``2²⁰`` numbers, dense Sinkhorn up to ``3·2²²``."""
    assert pw.BACKENDS == ("torch", "keops")
    assert pw.MAX_ELEMENTS == 1048576 and pw.DENSE_MAX_ELEMENTS == 12582912


def test_keops_available_reads_the_import(monkeypatch):
    """``keops_available`` (uncached body): ``False`` when ``pykeops.torch`` cannot be imported, for an
    ``ImportError`` or any other exception of a broken install; ``True`` when it imports. ``_keops_gpu`` is
    ``bool(pykeops.config.gpu_available)``."""
    body = pw.keops_available.__wrapped__
    monkeypatch.setitem(sys.modules, "pykeops", None)
    monkeypatch.setitem(sys.modules, "pykeops.torch", None)
    assert body() is False

    class Broken:  # an import hook whose pykeops raises a RuntimeError on import
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name.startswith("pykeops"):
                raise RuntimeError("broken install")
            return None

    monkeypatch.delitem(sys.modules, "pykeops")
    monkeypatch.delitem(sys.modules, "pykeops.torch")
    monkeypatch.setattr(sys, "meta_path", [Broken(), *sys.meta_path])
    assert body() is False
    monkeypatch.setattr(sys, "meta_path", sys.meta_path[1:])
    package = types.ModuleType("pykeops")
    package.__path__ = []
    monkeypatch.setitem(sys.modules, "pykeops", package)
    ok = types.ModuleType("pykeops.torch")
    package.torch = ok
    monkeypatch.setitem(sys.modules, "pykeops.torch", ok)
    assert body() is True
    config = types.ModuleType("pykeops.config")
    package.config = config
    monkeypatch.setitem(sys.modules, "pykeops.config", config)
    for flag, expected in ((1, True), (0, False), (True, True)):
        config.gpu_available = flag
        assert pw._keops_gpu.__wrapped__() is expected


def test_resolve_backend_every_case(monkeypatch):
    """``"torch"`` always; ``"auto"`` is torch on a CPU (a string or a ``torch.device``), and on CUDA is KeOps
    only when KeOps is installed and built with CUDA; ``"keops"`` is itself when installed and refused
    otherwise; unknown names are refused. Messages exact."""
    with pytest.raises(ValueError, match=r"^backend must be one of \['auto', 'torch', 'keops'\], got 'gpu'$"):
        pw.resolve_backend("gpu", 2)
    with pytest.raises(ValueError, match=r"^backend must be one of \['auto', 'torch', 'keops'\], got None$"):
        pw.resolve_backend(None, 2)
    assert pw.resolve_backend("torch", 3) == "torch"
    assert pw.resolve_backend("torch", 3, "cuda") == "torch"
    monkeypatch.setattr(pw, "keops_available", lambda: False)
    with pytest.raises(
        ValueError,
        match=r"^backend='keops' needs pykeops: pip install 'meanfield-sde\[keops\]' \(or use backend='auto'\)$",
    ):
        pw.resolve_backend("keops", 2)
    assert pw.resolve_backend("auto", 2, "cuda") == "torch"
    assert pw.resolve_backend("auto", 2, torch.device("cpu")) == "torch"
    monkeypatch.setattr(pw, "keops_available", lambda: True)
    monkeypatch.setattr(pw, "_keops_gpu", lambda: True)
    assert pw.resolve_backend("keops", 2) == "keops"
    assert pw.resolve_backend("auto", 2) == "torch"
    assert pw.resolve_backend("auto", 2, "cpu") == "torch"
    assert pw.resolve_backend("auto", 2, "cuda") == "keops"
    assert pw.resolve_backend("auto", 100, torch.device("cuda", 0)) == "keops"
    monkeypatch.setattr(pw, "_keops_gpu", lambda: False)
    assert pw.resolve_backend("auto", 2, "cuda") == "torch"


def test_rows_and_blocks():
    """``_rows = max(1, max_elements // max(1, B·N))``; ``_Blocks`` holds ``B·rows·N`` numbers in the dtype of
    its template and hands out contiguous ``(B, c, N)`` views of the same memory."""
    assert pw._rows(2, 5, 23) == 2 and pw._rows(2, 5, 20) == 2 and pw._rows(2, 5, 19) == 1
    assert pw._rows(2, 5, 3) == 1 and pw._rows(0, 0, 7) == 7 and pw._rows(1, 1, 1) == 1
    like = torch.zeros(1, dtype=torch.float32)
    blocks = pw._Blocks(2, 3, 4, like)
    assert blocks.flat.shape == (24,) and blocks.flat.dtype == torch.float32
    assert (blocks.B, blocks.N) == (2, 4)
    view = blocks.take(2)
    assert view.shape == (2, 2, 4) and view.is_contiguous() and view.data_ptr() == blocks.flat.data_ptr()
    blocks.flat.zero_()  # torch.empty: the memory is uninitialised
    view.fill_(1.0)
    assert float(blocks.flat.sum()) == 16.0 and float(blocks.flat[16:].abs().sum()) == 0.0
    assert blocks.take(3).shape == (2, 3, 4)


def test_centred_and_squared_distances():
    """``_centred`` subtracts ``c = (x̄ + ȳ)/2`` per replica (not the mean of the union: M ≠ N); the squared
    distances equal scipy's ``cdist²``, are written into ``out`` when given, and are clamped at 0 (a point
    against itself far from the origin gives 0, not a negative round-off)."""
    x, y = cloud_2(B=2, M=3, d=2, seed=16, offset=1.0), cloud_2(B=2, M=6, d=2, seed=17, offset=-2.0)
    xc, yc = pw._centred(x, y)
    c = 0.5 * (x.numpy().mean(1, keepdims=True) + y.numpy().mean(1, keepdims=True))
    assert close_2(xc, x.numpy() - c, rtol=1e-14) and close_2(yc, y.numpy() - c, rtol=1e-14)
    r2 = pw._squared_distances(xc, yc, yc.square().sum(-1))
    expected = np.stack([cdist(x.numpy()[b], y.numpy()[b], "sqeuclidean") for b in range(2)])
    assert close_2(r2, expected)
    out = torch.empty(2, 3, 6, dtype=F64)
    r2b = pw._squared_distances(xc, yc, yc.square().sum(-1), out=out)
    assert r2b.data_ptr() == out.data_ptr() and close_2(out, expected)
    far = torch.tensor([[[1e4 + 0.1, -1e4 + 0.3], [1e4 + 0.7, -1e4 + 0.2]]], dtype=torch.float32)
    self_r2 = pw._squared_distances(far, far, far.square().sum(-1))
    assert bool((self_r2 >= 0).all())


def test_diagonal_mask_and_root():
    """``_diagonal_mask(c, N, start)`` is true exactly at ``(i, start + i)``; ``_root`` is ``√s`` as a number,
    or ``(B, 1, 1)`` in ``x``'s dtype, refusing a wrong replica count with its message."""
    mask = pw._diagonal_mask(2, 5, 3, "cpu")
    expected = np.zeros((2, 5), dtype=bool)
    expected[0, 3] = expected[1, 4] = True
    assert mask.dtype == torch.bool and np.array_equal(mask.numpy(), expected)
    assert np.array_equal(pw._diagonal_mask(3, 3, 0, "cpu").numpy(), np.eye(3, dtype=bool))
    x = torch.zeros(2, 3, 1, dtype=torch.float32)
    assert pw._root(4.0, x) == 2.0
    r = pw._root(torch.tensor([4.0, 9.0], dtype=F64), x)
    assert r.shape == (2, 1, 1) and r.dtype == torch.float32 and r.flatten().tolist() == [2.0, 3.0]
    with pytest.raises(ValueError, match=r"^scale has 3 per-replica values, but x has B = 2 replicas$"):
        pw._root(torch.ones(3), x)


@pytest.mark.parametrize("exclude_self", [False, True], ids=["all", "no_self"])
@pytest.mark.parametrize(
    "scale", [None, 0.7, 1.0, torch.tensor([0.4, 1.3], dtype=F64)], ids=["dflt", "s", "one", "per"]
)
@pytest.mark.parametrize("max_elements", [None, 1, 2 * 7 * 3], ids=["dflt_block", "rows1", "rows3"])
def test_radial_sum_equals_the_double_loop_2(exclude_self, scale, max_elements):
    """``radial_sum`` (torch backend, the buffered path) against ``Σ_j φ(s|x_i − x_j|²) v_j`` by a double loop,
    ``j ≠ i`` when asked, with the default scale 1 and block, blocks of 1 and of 3 rows (M = 7); a singular
    ``φ = 1/u`` never reaches the sum at the self-pairs."""
    x = cloud_2(B=2, M=7, d=3, seed=18, offset=3.0)
    values = cloud_2(B=2, M=7, d=2, seed=19)
    kwargs = {}
    if scale is not None:
        kwargs["scale"] = scale
    if max_elements is not None:
        kwargs["max_elements"] = max_elements
    s = 1.0 if scale is None else scale
    out, used = pw.radial_sum(
        x, x, lambda u: 1.0 / (0.5 + u), values, backend="torch", exclude_self=exclude_self, **kwargs
    )
    assert used == "torch" and out.dtype == F64 and not out.requires_grad
    assert close_2(out, loop_radial(x, x, lambda u: 1.0 / (0.5 + u), values, s, exclude_self))
    if exclude_self:
        inv, _ = pw.radial_sum(x, x, lambda u: 1.0 / u, values, exclude_self=True, **kwargs)
        assert close_2(inv, loop_radial(x, x, lambda u: 1.0 / u, values, s, True), rtol=1e-9)


def test_radial_sum_two_clouds_and_the_default_backend():
    """Two different clouds (M = 4, N = 6) with the default backend (``"auto"`` → torch on a CPU) and
    ``φ = e^{−u}``: the double loop; negative control: ``y`` and ``x`` swapped in the loop differs in shape."""
    x, y = cloud_2(B=2, M=4, d=2, seed=20), cloud_2(B=2, M=6, d=2, seed=21, offset=0.5)
    values = cloud_2(B=2, M=6, d=3, seed=22)
    out, used = pw.radial_sum(x, y, lambda u: (-u).exp(), values, scale=0.3)
    assert used == "torch" and out.shape == (2, 4, 3)
    assert close_2(out, loop_radial(x, y, lambda u: math.exp(-u), values, 0.3))
    assert not close_2(out, loop_radial(x, y, lambda u: math.exp(-u), values, 0.31))


@pytest.mark.parametrize("exclude_self", [False, True], ids=["all", "no_self"])
def test_radial_sum_differentiable_path_and_its_gradients(exclude_self):
    """With inputs that require a gradient the blocks are kept (not written into a buffer): the values equal
    the double loop, and autograd's gradients in ``x`` and in ``values`` equal those of a dense torch formula
    written out (masked diagonal), including a singular ``φ = 1/u`` (finite gradients). Only ``values``
    requiring a gradient also takes this path; under ``no_grad`` the result is not differentiable."""
    x = cloud_2(B=2, M=6, d=2, seed=23)
    values = cloud_2(B=2, M=6, d=2, seed=24)
    phi = (lambda u: 1.0 / u) if exclude_self else (lambda u: (-u).exp())
    off = (~torch.eye(6, dtype=torch.bool)) if exclude_self else torch.ones(6, 6, dtype=torch.bool)

    def dense(xx, vv):
        r2 = ((xx.unsqueeze(2) - xx.unsqueeze(1)) ** 2).sum(-1)  # (B, M, M)
        r2 = torch.where(off, r2, torch.ones_like(r2))
        return torch.where(off, phi(r2), torch.zeros_like(r2)) @ vv

    for max_elements in (2 * 6 * 4, 1 << 20):  # two blocks (4 + 2 rows) and one
        xg, vg = x.clone().requires_grad_(True), values.clone().requires_grad_(True)
        out, _ = pw.radial_sum(
            xg, xg, phi, vg, backend="torch", max_elements=max_elements, exclude_self=exclude_self
        )
        assert out.requires_grad
        assert close_2(
            out,
            loop_radial(x, x, lambda u: 1 / u if exclude_self else math.exp(-u), values, 1.0, exclude_self),
        )
        w = torch.linspace(-1.0, 1.0, 24, dtype=F64).view(2, 6, 2)
        gx, gv = torch.autograd.grad((out * w).sum(), (xg, vg))
        xr, vr = x.clone().requires_grad_(True), values.clone().requires_grad_(True)
        ex, ev = torch.autograd.grad((dense(xr, vr) * w).sum(), (xr, vr))
        assert torch.isfinite(gx).all() and close_2(gx, ex, rtol=1e-9) and close_2(gv, ev, rtol=1e-9)
    only_v = values.clone().requires_grad_(True)
    out, _ = pw.radial_sum(x, x, phi, only_v, backend="torch", max_elements=20, exclude_self=exclude_self)
    assert out.requires_grad
    with torch.no_grad():
        out, _ = pw.radial_sum(x.clone().requires_grad_(True), x, phi, values, exclude_self=exclude_self)
    assert not out.requires_grad


def test_radial_sum_refusals():
    """``exclude_self`` with two clouds of different sizes, a scale with the wrong replica count, an unknown
    backend: each refused with its message."""
    x, values = cloud_2(B=2, M=5, d=2), cloud_2(B=2, M=5, d=1)
    with pytest.raises(
        ValueError,
        match=r"^exclude_self leaves out the pairs j = i of one cloud: x and y must be the same cloud, "
        r"got M = 5 and N = 3 points$",
    ):
        pw.radial_sum(x, x[:, :3], lambda u: u, values[:, :3], exclude_self=True)
    with pytest.raises(ValueError, match=r"^scale has 3 per-replica values, but x has B = 2 replicas$"):
        pw.radial_sum(x, x, lambda u: u, values, scale=torch.ones(3))
    with pytest.raises(ValueError, match=r"^backend must be one of"):
        pw.radial_sum(x, x, lambda u: u, values, backend="numpy")


def test_radial_sum_and_softmin_on_keops_equal_the_loops(fake_keops_2):
    """The KeOps formulas (on the dense stand-in): ``radial_sum`` with a number and a per-replica scale (the
    scale applied as ``√s`` to both clouds), ``softmin`` with ``p = 1, 2`` and per-replica ε; ``exclude_self``
    refused on KeOps with its full message."""
    x, y = cloud_2(B=2, M=4, d=3, seed=25), cloud_2(B=2, M=6, d=3, seed=26)
    values = cloud_2(B=2, M=6, d=2, seed=27)
    for scale in (0.6, torch.tensor([0.5, 1.5], dtype=F64)):
        out, used = pw.radial_sum(x, y, lambda u: (-u).exp(), values, scale=scale, backend="keops")
        assert used == "keops" and close_2(out, loop_radial(x, y, lambda u: math.exp(-u), values, scale))
    h = cloud_2(B=2, M=6, d=1, seed=28)[..., 0]
    eps = torch.tensor([0.3, 0.8], dtype=F64)
    for p in (1, 2):
        out, used = pw.softmin(x, y, h, eps, p=p, backend="keops")
        assert used == "keops" and close_2(out, loop_softmin(x, y, h, eps, p))
    with pytest.raises(
        ValueError,
        match=r"^exclude_self \(leaving out the self-pairs of a singular kernel\) runs on the torch backend only; "
        r"use backend='torch' \(or 'auto'\)$",
    ):
        pw.radial_sum(x, x, lambda u: u, cloud_2(B=2, M=4, d=1), backend="keops", exclude_self=True)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("eps", [0.4, torch.tensor([0.3, 0.9], dtype=F64)], ids=["number", "per"])
@pytest.mark.parametrize("max_elements", [None, 1, 2 * 7 * 2], ids=["dflt", "rows1", "rows2"])
@pytest.mark.parametrize("dtype", [torch.float32, F64], ids=["f32", "f64"])
def test_softmin_equals_the_cdist_formula(p, eps, max_elements, dtype):
    """``softmin`` (torch backend) against ``−ε log Σ_j exp(h_j − cdist^p/ε)`` (scipy, stable log-sum-exp),
    every block size (M = 5 in blocks of 1, 2 and all rows), both powers, ε a number or per replica, float32
    through the module's log-sum-exp (1e-4) and float64 through torch's (1e-10)."""
    x, y = cloud_2(B=2, M=5, d=3, seed=29, offset=2.0), cloud_2(B=2, M=7, d=3, seed=30, offset=2.5)
    h = cloud_2(B=2, M=7, d=1, seed=31)[..., 0]
    kwargs = {} if max_elements is None else {"max_elements": max_elements}
    out, used = pw.softmin(x.to(dtype), y.to(dtype), h.to(dtype), eps, p=p, backend="torch", **kwargs)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-10}
    assert used == "torch" and out.dtype == dtype and out.shape == (2, 5)
    assert close_2(out, loop_softmin(x, y, h, eps, p), **tol)


def test_softmin_defaults_are_p2_and_auto():
    """Without ``p`` and ``backend``: the squared cost on torch; negative control: ``p = 1`` differs."""
    x, y = cloud_2(B=1, M=4, d=2, seed=32), cloud_2(B=1, M=3, d=2, seed=33)
    h = torch.zeros(1, 3, dtype=F64)
    out, used = pw.softmin(x, y, h, 0.5)
    assert used == "torch" and close_2(out, loop_softmin(x, y, h, 0.5, 2))
    assert not close_2(out, loop_softmin(x, y, h, 0.5, 1))


def test_per_replica_epsilon_and_scaled_clouds():
    """``_per_replica`` makes ``(B, 1)`` in ``x``'s dtype from a number or ``(B,)``; ``_scaled`` centres and
    divides by ``ε`` for ``p = 1`` and by ``√ε`` for ``p = 2``."""
    x = torch.zeros(3, 2, 1, dtype=torch.float32)
    e = pw._per_replica(0.5, x)
    assert e.shape == (3, 1) and e.dtype == torch.float32 and e.flatten().tolist() == [0.5] * 3
    e = pw._per_replica(torch.tensor([1.0, 4.0, 0.25], dtype=F64), x)
    assert e.dtype == torch.float32 and e.flatten().tolist() == [1.0, 4.0, 0.25]
    a, b = cloud_2(B=2, M=3, d=2, seed=34, offset=1.0), cloud_2(B=2, M=4, d=2, seed=35)
    eps = torch.tensor([[0.25], [4.0]], dtype=F64)
    c = 0.5 * (a.numpy().mean(1, keepdims=True) + b.numpy().mean(1, keepdims=True))
    for p, factor in ((1, np.array([4.0, 0.25])), (2, np.array([2.0, 0.5]))):
        sa, sb = pw._scaled(a, b, eps, p)
        assert close_2(sa, (a.numpy() - c) * factor[:, None, None], rtol=1e-14)
        assert close_2(sb, (b.numpy() - c) * factor[:, None, None], rtol=1e-14)


@pytest.mark.parametrize("p", [1, 2])
def test_cost_matrix_and_softmin_from_cost(p):
    """``cost_matrix`` is scipy's ``cdist^p`` (default ``p = 2``); ``softmin_from_cost`` equals the cdist formula,
    per-replica ε, from a transposed view too, and computes in ``work`` when given (the buffer is written)."""
    x, y = cloud_2(B=2, M=4, d=3, seed=36, offset=1.0), cloud_2(B=2, M=5, d=3, seed=37)
    C = pw.cost_matrix(x, y, p)
    expected = np.stack([cdist(x.numpy()[b], y.numpy()[b]) ** p for b in range(2)])
    assert close_2(C, expected, rtol=1e-9, atol=1e-12)
    if p == 2:
        assert close_2(pw.cost_matrix(x, y), expected, rtol=1e-9, atol=1e-12)
    h = cloud_2(B=2, M=5, d=1, seed=38)[..., 0]
    eps = torch.tensor([0.2, 0.7], dtype=F64)
    f = pw.softmin_from_cost(C, h, eps)
    assert close_2(f, loop_softmin(x, y, h, eps, p), rtol=1e-9, atol=1e-10)
    work = torch.zeros(2, 4, 5, dtype=F64)
    f2 = pw.softmin_from_cost(C, h, eps, work=work)
    assert close_2(f2, f, rtol=1e-14) and not torch.equal(work, torch.zeros_like(work))
    hx = cloud_2(B=2, M=4, d=1, seed=39)[..., 0]
    g = pw.softmin_from_cost(C.transpose(1, 2), hx, 0.5)
    assert close_2(g, loop_softmin(y, x, hx, 0.5, p), rtol=1e-9, atol=1e-10)


def test_logsumexp_in_every_dtype():
    """``_logsumexp_`` against float64 ``torch.logsumexp``: float64 (torch's, ``z`` left alone), float32 and
    float16 (the module's shift by the row maximum: values near ±500 neither overflow nor vanish; a row of
    ``−∞`` gives ``−∞``; ``−∞`` entries in a row are ignored)."""
    z = torch.tensor(
        [[500.0, 499.0, -3.0], [-500.0, -501.0, -math.inf], [-math.inf, -math.inf, -math.inf]], dtype=F64
    )
    expected = torch.logsumexp(z, -1)
    kept = z.clone()
    out64 = pw._logsumexp_(kept)
    assert torch.equal(kept, z) and torch.equal(out64, expected)
    out32 = pw._logsumexp_(z.float().clone())
    assert out32.dtype == torch.float32 and torch.isneginf(out32[2])
    assert close_2(out32[:2], expected[:2], rtol=1e-6)
    small = torch.tensor([[1.0, 2.0, 0.5], [-math.inf, -math.inf, -math.inf]], dtype=F64)
    out16 = pw._logsumexp_(small.half())
    assert out16.dtype == torch.float16 and torch.isneginf(out16[1])
    assert abs(float(out16[0]) - float(torch.logsumexp(small[0], -1))) < 4e-3


def test_squared_distances_never_go_below_zero_in_float32():
    """A float32 cloud around 100: ``|x|² + |y|² − 2x·y`` of a point with itself rounds below 0 (by about 1e-2
    unclamped, for this seed); the block is those numbers clamped at 0, so every entry is ``≥ 0`` and a square
    root of it (``p = 1`` costs) is never NaN."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(1, 50, 3, generator=g, dtype=F64) * 3 + 100).float()  # uncentred on purpose
    r2 = pw._squared_distances(x, x, x.square().sum(-1))
    assert bool((r2 >= 0).all())
    raw = torch.baddbmm(x.square().sum(-1).unsqueeze(1), x, x.transpose(1, 2), alpha=-2.0)
    raw += x.square().sum(-1, keepdim=True)
    assert bool((raw < 0).any())  # the control: without the clamp some entries are negative
    assert close_2(r2, raw.clamp(min=0.0), rtol=0, atol=0)


def test_radial_sum_refuses_fewer_scales_and_a_smaller_second_cloud():
    """The replica count of a per-replica scale must equal B exactly (fewer is refused too, with the
    message), and ``exclude_self`` needs ``N = M`` also when ``N > M``."""
    x, values = cloud_2(B=3, M=4, d=2), cloud_2(B=3, M=4, d=1)
    with pytest.raises(ValueError, match=r"^scale has 2 per-replica values, but x has B = 3 replicas$"):
        pw.radial_sum(x, x, lambda u: u, values, scale=torch.ones(2), backend="torch")
    y = cloud_2(B=3, M=6, d=2, seed=1)
    with pytest.raises(ValueError, match=r"got M = 4 and N = 6 points$"):
        pw.radial_sum(x, y, lambda u: u, cloud_2(B=3, M=6, d=1), exclude_self=True)


@pytest.mark.parametrize("kernel", ["log", "riesz"])
def test_a_singular_kernel_in_float32_keeps_a_close_distinct_pair_finite(kernel):
    """float32, a cloud of size 1 with two distinct particles 3e-4 apart: |x|² + |y|² − 2x·y cancels their r²
    to 0 and the drift was NaN; from the differences it is that of the same points in float64 to 5 %. Control:
    the matrix-product distance of that pair is off by more than half its value."""
    from meanfield.drift.potentials import LogInteraction, RieszInteraction

    W = LogInteraction(-1.0) if kernel == "log" else RieszInteraction(1.0, 1.0)
    x = torch.randn(1, 200, 2, generator=torch.Generator().manual_seed(0))  # (1, M, 2) float32
    x[0, 1] = x[0, 0] + torch.tensor([3e-4, 0.0])
    got, ref = W.mean_field_grad(x), W.mean_field_grad(x.double())  # (1, M, 2)
    assert torch.isfinite(got).all()
    assert (got[0, :2].double() - ref[0, :2]).norm() <= 0.05 * ref[0, :2].norm()
    from meanfield.drift.pairwise import _centred, _squared_distances

    xc, _ = _centred(x, x)
    r2 = _squared_distances(xc[:, :2], xc, xc.square().sum(-1))  # (1, 2, M): the matrix-product path
    assert r2[0, 0, 1] < 0.5 * 9e-8  # control: there the pair's r² = 9e-8 cancels (to 0 here)
