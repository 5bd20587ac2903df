"""Whole-module value tests of ``meanfield.drift.potentials`` and ``meanfield.drift.pairwise`` (issue 25, mutation testing).

Every public class and function of the two modules, and the private helpers they call, is pinned against an
independent answer: closed forms written out by hand, ``torch.autograd`` of a hand-written energy, an
explicit ``O(M²)`` double loop in numpy (float64), ``scipy.spatial.distance.cdist``, and exact messages for
every refusal. KeOps paths run on a dense stand-in for ``pykeops.torch.LazyTensor`` (ordinary tensors with
its broadcasting and reduction rules), so that the code that builds the formulas, and the fallbacks of
:class:`~meanfield.drift.potentials.RadialInteraction`, are checked on a CPU without KeOps. Everything is
deterministic (fixed seeds), so the tolerances are round-off only.
"""

from __future__ import annotations

import math
import sys
import types

import numpy as np
import pytest
import torch
from _pair_loops import loop_pairs  # tests/_pair_loops.py
from scipy.spatial.distance import cdist

import meanfield.drift.pairwise as pw
import meanfield.drift.potentials as pot
from meanfield.drift.potentials import (
    Alignment,
    Confinement,
    DoubleWell,
    GaussianInteraction,
    Interaction,
    LogInteraction,
    Quadratic,
    QuadraticInteraction,
    RadialInteraction,
    RieszInteraction,
)

F64 = torch.float64


def cloud(B=2, M=5, d=2, seed=0, dtype=F64, scale=1.0, offset=0.0):
    """A seeded ``(B, M, d)`` state."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(B, M, d, generator=g, dtype=F64) + offset).to(dtype)


def per(value, b):
    """Replica ``b``'s value of a number or a ``(B,)`` tensor."""
    return float(value[b]) if torch.is_tensor(value) else float(value)


def close(actual, expected, rtol=1e-10, atol=1e-12):
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
        s = per(scale, b)
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
        e = per(eps, b)
        z = h[b][None, :] - cdist(x[b], y[b]) ** p / e  # (M, N)
        m = z.max(1, keepdims=True)
        out[b] = -e * (m[:, 0] + np.log(np.exp(z - m).sum(1)))
    return out


def mismatch(name, held, B):
    """The anchored message of ``held`` per-replica values met by a state of ``B`` replicas."""
    return (
        rf"^{name} has {held} per-replica values, but the state has B = {B} replicas \(x has shape "
        r"\(B, M, d\)\): give one value per replica, or a number for all$"
    )


# --------------------------------------------------------------------------------------------------------
# a dense stand-in for KeOps


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
def fake_keops(monkeypatch):
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


# --------------------------------------------------------------------------------------------------------
# the abstract bases


def test_the_bases_are_abstract_and_have_no_parameters():
    """``Confinement`` and ``Interaction`` cannot be instantiated (abstract ``energy``/``grad`` and
    ``energy``/``mean_field_grad``); a subclass that defines them has ``parameters() == {}``, and the abstract
    bodies return ``None``."""
    with pytest.raises(TypeError, match="abstract"):
        Confinement()
    with pytest.raises(TypeError, match="abstract"):
        Interaction()

    class V(Confinement):
        def energy(self, x):
            return super().energy(x)

        def grad(self, x):
            return super().grad(x)

    class W(Interaction):
        def energy(self, x):
            return super().energy(x)

        def mean_field_grad(self, x):
            return super().mean_field_grad(x)

    x = cloud()
    assert V().parameters() == {} and W().parameters() == {}
    assert V().energy(x) is None and V().grad(x) is None
    assert W().energy(x) is None and W().mean_field_grad(x) is None
    assert sorted(pot.__all__) == sorted(
        [
            "Confinement",
            "Interaction",
            "Quadratic",
            "DoubleWell",
            "QuadraticInteraction",
            "Alignment",
            "RadialInteraction",
            "GaussianInteraction",
            "LogInteraction",
            "RieszInteraction",
        ]
    )


# --------------------------------------------------------------------------------------------------------
# Quadratic


def test_quadratic_defaults_parameters_and_repr():
    """``Quadratic()`` is ``a = 1``: ``V = |x|²/2``, ``∇V = x`` exactly; ``a = 0`` is allowed (``≥ 0``);
    ``parameters``/``repr`` give the value; per-replica values read back as float64 ``(B,)``."""
    x = cloud(B=2, M=4, d=3, seed=1)
    V = Quadratic()
    assert V.a == 1.0 and V.parameters() == {"a": 1.0} and repr(V) == "Quadratic(a=1.0)"
    assert torch.equal(V.grad(x), x)
    assert close(V.energy(x), 0.5 * (x.numpy() ** 2).sum(-1), rtol=1e-15)
    zero = Quadratic(0)
    assert zero.a == 0.0 and type(zero.a) is float
    assert torch.equal(zero.energy(x), torch.zeros(2, 4, dtype=F64))
    assert repr(Quadratic(2.5)) == "Quadratic(a=2.5)"
    per_a = Quadratic([0.5, 3.0])
    assert per_a.a.dtype == F64 and per_a.a.tolist() == [0.5, 3.0]
    assert per_a.parameters()["a"] is per_a.a


@pytest.mark.parametrize("dtype", [torch.float32, F64], ids=["float32", "float64"])
def test_quadratic_values_per_replica_against_the_hand_formula(dtype):
    """``V = a_b/2 |x|²`` of shape ``(B, M)`` and ``∇V = a_b x`` against numpy, in the state's dtype; the
    gradient against autograd of the energy."""
    a = torch.tensor([0.5, 2.0, 3.0], dtype=F64)
    x = cloud(B=3, M=4, d=2, seed=2, dtype=dtype)
    V = Quadratic(a)
    xn = x.double().numpy()
    tol = {"rtol": 1e-6, "atol": 1e-6} if dtype == torch.float32 else {}
    e, g = V.energy(x), V.grad(x)
    assert e.dtype == dtype and g.dtype == dtype
    assert close(e, 0.5 * a.numpy()[:, None] * (xn**2).sum(-1), **tol)
    assert close(g, a.numpy()[:, None, None] * xn, **tol)
    xg = x.double().requires_grad_(True)
    (auto,) = torch.autograd.grad(V.energy(xg).sum(), xg)
    assert close(V.grad(x.double()), auto)


def test_quadratic_refusals():
    """Negative curvature, NaN, a bool and a wrong replica count are refused with their messages."""
    with pytest.raises(ValueError, match=r"^a must be ≥ 0, got -1\.0$"):
        Quadratic(-1.0)
    with pytest.raises(ValueError, match=r"^a must be finite, got nan$"):
        Quadratic(float("nan"))
    with pytest.raises(TypeError, match=r"^a must be a number or one value per replica"):
        Quadratic(True)
    with pytest.raises(
        ValueError, match=r"^a\[1\] = -0\.5 \(replica 1 of 2\): every value must be finite and ≥ 0$"
    ):
        Quadratic([1.0, -0.5])
    V = Quadratic(torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match=mismatch("a", 3, 2)):
        V.energy(cloud(B=2))
    with pytest.raises(ValueError, match=mismatch("a", 3, 2)):
        V.grad(cloud(B=2))


# --------------------------------------------------------------------------------------------------------
# DoubleWell


def test_double_well_defaults_and_closed_form_points():
    """``DoubleWell()``: ``V = x⁴/4 − x²/2`` per coordinate summed, ``∇V = x³ − x``: at ``x = (2, −1, 0.5)``
    ``V = 4 − 2 + (1/4 − 1/2) + (1/64 − 1/8)`` and ``∇V = (6, 0, −3/8)`` by hand."""
    V = DoubleWell()
    assert V.quartic == 1.0 and V.quadratic == 1.0 and V._plain is True
    assert V.parameters() == {"quartic": 1.0, "quadratic": 1.0}
    x = torch.tensor([[[2.0, -1.0, 0.5]]], dtype=F64)
    assert close(V.energy(x), [[2.0 - 0.25 + 1 / 64 - 1 / 8]], rtol=1e-15)
    assert close(V.grad(x), [[[6.0, 0.0, -0.375]]], rtol=1e-15)


@pytest.mark.parametrize(
    "quartic, quadratic",
    [
        (1.0, 1.0),
        (1.0, -2.0),
        (2.0, 0.5),
        (0.5, 0.0),
        (torch.tensor([1.0, 2.0, 0.5], dtype=F64), 1.5),
        (3.0, torch.tensor([1.0, -0.5, 2.0], dtype=F64)),
        (1.0, torch.tensor([1.0, -0.5, 2.0], dtype=F64)),
        (torch.tensor([0.3, 1.0, 2.0], dtype=F64), torch.tensor([2.0, 0.0, -1.0], dtype=F64)),
    ],
    ids=["plain", "plain_c2_neg", "numbers", "c2_zero", "c4_per", "c2_per", "plain_c2_per", "both_per"],
)
def test_double_well_values_against_the_hand_formula(quartic, quadratic):
    """``Σ_k (c₄x⁴/4 − c₂x²/2)`` and ``c₄x³ − c₂x`` against numpy with replica ``b``'s values on both
    branches (the plain ``c₄ = 1`` number and any other); the gradient against autograd of the energy;
    negative control: the other replicas' values differ."""
    x = cloud(B=3, M=4, d=2, seed=3, scale=1.4)
    V = DoubleWell(quartic, quadratic)
    xn = x.numpy()
    c4 = np.array([per(quartic, b) for b in range(3)])[:, None, None]
    c2 = np.array([per(quadratic, b) for b in range(3)])[:, None, None]
    assert close(V.energy(x), (c4 * xn**4 / 4 - c2 * xn**2 / 2).sum(-1))
    assert close(V.grad(x), c4 * xn**3 - c2 * xn)
    xg = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(V.energy(xg).sum(), xg)
    assert close(V.grad(x), auto)
    if torch.is_tensor(quartic) or torch.is_tensor(quadratic):
        assert not close(V.grad(x), c4[::-1] * xn**3 - c2[::-1] * xn)


def test_double_well_plain_flag_and_repr():
    """``_plain`` is set exactly for the number ``c₄ = 1``; ``repr`` is ``DoubleWell()`` only for the defaults."""
    assert DoubleWell(1, 1)._plain is True and repr(DoubleWell(1, 1)) == "DoubleWell()"
    assert DoubleWell(2.0)._plain is False
    assert DoubleWell(torch.tensor([1.0, 1.0]))._plain is False
    assert repr(DoubleWell(2.0)) == "DoubleWell(quartic=2.0, quadratic=1.0)"
    assert repr(DoubleWell(1.0, 2.0)) == "DoubleWell(quartic=1.0, quadratic=2.0)"
    per_c2 = DoubleWell(1.0, [1.0, 2.0])
    assert repr(per_c2) == f"DoubleWell(quartic=1.0, quadratic={per_c2.quadratic})"
    assert per_c2.parameters()["quadratic"].tolist() == [1.0, 2.0]


def test_double_well_refusals():
    """``c₄`` must be ``> 0`` (strictly), ``c₂`` any finite value; messages name the argument."""
    with pytest.raises(ValueError, match=r"^quartic must be > 0, got 0\.0$"):
        DoubleWell(quartic=0.0)
    with pytest.raises(ValueError, match=r"^quartic must be > 0, got -1\.0$"):
        DoubleWell(quartic=-1.0)
    with pytest.raises(
        ValueError, match=r"^quartic\[0\] = 0 \(replica 0 of 2\): every value must be finite and > 0$"
    ):
        DoubleWell(quartic=[0.0, 1.0])
    with pytest.raises(ValueError, match=r"^quadratic must be finite, got inf$"):
        DoubleWell(quadratic=float("inf"))
    assert DoubleWell(quadratic=-5.0).quadratic == -5.0


# --------------------------------------------------------------------------------------------------------
# QuadraticInteraction and Alignment


@pytest.mark.parametrize(
    "k", [None, 2.5, -0.7, torch.tensor([2.0, -0.5, 1.25], dtype=F64)], ids=["default", "k", "neg", "per"]
)
def test_quadratic_interaction_against_the_double_loop(k):
    """``1/M Σ_j k/2 |x_i − x_j|²`` and ``1/M Σ_j k (x_i − x_j)`` by a numpy double loop (default ``k = 1``);
    ``mean_field_grad`` is half the autograd gradient of the summed energy."""
    W = QuadraticInteraction() if k is None else QuadraticInteraction(k)
    kk = 1.0 if k is None else k
    x = cloud(B=3, M=5, d=2, seed=4, offset=1.5)
    energy, grad = loop_pairs(x, lambda b, z: per(kk, b) / 2 * z @ z, lambda b, z: per(kk, b) * z)
    assert close(W.energy(x), energy)
    assert close(W.mean_field_grad(x), grad)
    xg = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(W.energy(xg).sum(), xg)
    assert close(W.mean_field_grad(x), 0.5 * auto)


def test_quadratic_interaction_and_alignment_parameters_repr_and_refusals():
    """Defaults, ``parameters``, ``repr``; a NaN strength and a wrong replica count are refused."""
    assert QuadraticInteraction().k == 1.0 and QuadraticInteraction().parameters() == {"k": 1.0}
    assert repr(QuadraticInteraction(-2.0)) == "QuadraticInteraction(k=-2.0)"
    assert Alignment().kappa == 1.0 and Alignment(0.5).parameters() == {"kappa": 0.5}
    assert repr(Alignment(3.0)) == "Alignment(kappa=3.0)"
    with pytest.raises(ValueError, match=r"^k must be finite, got nan$"):
        QuadraticInteraction(float("nan"))
    with pytest.raises(ValueError, match=r"^kappa must be finite, got -inf$"):
        Alignment(float("-inf"))
    for W, name in ((QuadraticInteraction([1.0, 2.0, 3.0]), "k"), (Alignment([1.0, 2.0, 3.0]), "kappa")):
        with pytest.raises(ValueError, match=mismatch(name, 3, 2)):
            W.energy(cloud(B=2))
        with pytest.raises(ValueError, match=mismatch(name, 3, 2)):
            W.mean_field_grad(cloud(B=2))


@pytest.mark.parametrize(
    "kappa", [None, -1.3, torch.tensor([0.7, -1.2, 2.0], dtype=F64)], ids=["default", "k", "per"]
)
def test_alignment_against_the_double_loop(kappa):
    """``1/M Σ_j −κ x_i·x_j`` and ``1/M Σ_j −κ x_j`` (``∇_{x_i}`` of ``W(x_i, x_j) = −κ x_i·x_j``) by a numpy
    double loop; the drift has the state's full shape and is a real tensor one can write into."""
    W = Alignment() if kappa is None else Alignment(kappa)
    kk = 1.0 if kappa is None else kappa
    x = cloud(B=3, M=6, d=2, seed=5, offset=0.5)
    xn = x.numpy()
    energy, grad = np.zeros((3, 6)), np.zeros((3, 6, 2))
    for b in range(3):
        for i in range(6):
            for j in range(6):
                energy[b, i] += -per(kk, b) * xn[b, i] @ xn[b, j] / 6
                grad[b, i] += -per(kk, b) * xn[b, j] / 6
    assert close(W.energy(x), energy)
    g = W.mean_field_grad(x)
    assert g.shape == (3, 6, 2) and close(g, grad)


# --------------------------------------------------------------------------------------------------------
# RadialInteraction: construction


def test_radial_construction_refusals_have_their_exact_messages():
    """Non-callable kernels, a non-bool ``self_pair`` (an int too), a non-int or small ``max_elements``, an
    unknown backend: each refused at construction with its message."""
    f = lambda r2: r2  # noqa: E731
    with pytest.raises(TypeError, match=r"^psi and dpsi must be callables of a tensor of squared distances$"):
        RadialInteraction(1.0, f)
    with pytest.raises(TypeError, match=r"^psi and dpsi must be callables of a tensor of squared distances$"):
        RadialInteraction(f, None)
    with pytest.raises(
        TypeError, match=r"^self_pair must be True, False or None \(decide from ψ\(0\)\), got 1$"
    ):
        RadialInteraction(f, f, self_pair=1)
    with pytest.raises(
        TypeError, match=r"^self_pair must be True, False or None \(decide from ψ\(0\)\), got 'no'$"
    ):
        RadialInteraction(f, f, self_pair="no")
    with pytest.raises(TypeError, match=r"^max_elements must be an int, got float$"):
        RadialInteraction(f, f, max_elements=10.0)
    with pytest.raises(ValueError, match=r"^max_elements must be ≥ 1, got 0$"):
        RadialInteraction(f, f, max_elements=0)
    with pytest.raises(
        ValueError, match=r"^backend must be one of \['auto', 'torch', 'keops'\], got 'cuda'$"
    ):
        RadialInteraction(f, f, backend="cuda")


def test_radial_construction_stores_its_arguments():
    """Defaults ``max_elements = 2²²``, ``backend = "auto"``; ``backend_used`` is ``None`` until a call, then
    the backend used; ``repr`` shows the callables; the base ``parameters`` are empty."""

    def psi(r2):
        return (-r2).exp()

    def dpsi(r2):
        return -(-r2).exp()

    W = RadialInteraction(psi, dpsi)
    assert W.psi is psi and W.dpsi is dpsi
    assert W.max_elements == 1 << 22 and W.backend == "auto" and W.backend_used is None
    assert W._keops_fails is False and W.parameters() == {}
    assert repr(W) == f"RadialInteraction(psi={psi!r}, dpsi={dpsi!r})"
    W.energy(cloud())
    assert W.backend_used == "torch"
    W2 = RadialInteraction(psi, dpsi, max_elements=7, backend="torch", self_pair=False)
    assert W2.max_elements == 7 and W2.backend == "torch" and W2.self_pair is False


def _raise(exc):
    def f(r2):
        raise exc

    return f


@pytest.mark.parametrize(
    "psi, dpsi, expected",
    [
        (lambda r2: (-r2).exp(), lambda r2: -(-r2).exp(), True),
        (lambda r2: -0.5 * r2.log(), lambda r2: -0.5 / r2, False),  # −∞ and −∞ at 0
        (lambda r2: r2, lambda r2: 1.0 / r2, False),  # ψ finite, ψ' infinite
        (lambda r2: 1.0 / r2, lambda r2: r2, False),  # ψ infinite, ψ' finite
        (lambda r2: r2, lambda r2: r2.sqrt() / r2, False),  # ψ'(0) = NaN
        (lambda r2: 2.0, lambda r2: 0.0, True),  # numbers, not tensors
        (lambda r2: math.inf, lambda r2: 0.0, False),
        (_raise(ZeroDivisionError("0")), lambda r2: r2, False),  # an ArithmeticError
        (lambda r2: r2, _raise(RuntimeError("no")), False),
        (_raise(ValueError("no")), lambda r2: r2, False),
    ],
    ids=[
        "smooth",
        "log",
        "dpsi_inf",
        "psi_inf",
        "dpsi_nan",
        "numbers",
        "number_inf",
        "zerodiv",
        "runtime",
        "value",
    ],
)
def test_self_pair_is_decided_from_the_kernel_at_zero(psi, dpsi, expected):
    """``self_pair=None``: the ``j = i`` term is kept exactly when ``ψ(0)`` and ``ψ'(0)`` are both finite and
    can be evaluated (an ``ArithmeticError``, ``RuntimeError`` or ``ValueError`` counts as singular)."""
    W = RadialInteraction(psi, dpsi)
    assert W.self_pair is expected
    assert W._singular_at_zero() is (not expected)


def test_self_pair_probe_is_one_float64_zero_per_kernel_without_gradient():
    """The probe hands each kernel its own fresh ``(1, 1, 1)`` float64 zero, with gradients off: ``ψ`` adding 1
    in place must not change what ``ψ'`` sees (``1/r²`` at 0 is infinite, so the self-pair is left out).
    An error other than the three caught (a ``TypeError``) is not swallowed; an explicit ``self_pair``
    overrides the probe."""
    seen = []

    def psi(r2):
        seen.append((r2.shape, r2.dtype, float(r2.sum()), torch.is_grad_enabled()))
        return r2.add_(1.0)

    def dpsi(r2):
        seen.append((r2.shape, r2.dtype, float(r2.sum()), torch.is_grad_enabled()))
        return 1.0 / r2

    W = RadialInteraction(psi, dpsi)
    assert W.self_pair is False
    assert seen == [((1, 1, 1), F64, 0.0, False), ((1, 1, 1), F64, 0.0, False)]
    with pytest.raises(TypeError, match="^boom$"):
        RadialInteraction(_raise(TypeError("boom")), lambda r2: r2)
    assert RadialInteraction(lambda r2: -r2.log(), lambda r2: -1 / r2, self_pair=True).self_pair is True
    assert RadialInteraction(lambda r2: r2, lambda r2: r2, self_pair=False).self_pair is False


# --------------------------------------------------------------------------------------------------------
# RadialInteraction: values


def _smooth(w=1.3):
    """``ψ(r²) = w/(1 + r²)``, ``ψ'(r²) = −w/(1 + r²)²`` and the matching ``W(z)``, ``∇W(z) = 2ψ'(|z|²)z``."""
    return (
        lambda r2: w / (1 + r2),
        lambda r2: -w / (1 + r2) ** 2,
        lambda b, z: w / (1 + z @ z),
        lambda b, z: -2 * w / (1 + z @ z) ** 2 * z,
    )


@pytest.mark.parametrize("max_elements", [1, 2 * 7 * 3, 1 << 22], ids=["rows1", "rows3", "one_block"])
@pytest.mark.parametrize("self_pair", [None, True, False], ids=["probe", "kept", "left_out"])
def test_radial_energy_and_drift_against_the_double_loop(max_elements, self_pair):
    """A smooth user kernel: ``1/M Σ_j ψ(|x_i − x_j|²)`` and ``1/M Σ_j 2ψ'(|x_i − x_j|²)(x_i − x_j)`` by the
    numpy double loop, with the self-pair kept (probe, ``True``) or left out (``False``: ``1/M Σ_{j≠i}``, the
    energy lower by ``ψ(0)/M = w/M``), in blocks of 1, 3 (uneven: M = 7) and all rows. The state is far from
    the origin (the drift centres it)."""
    psi, dpsi, Wf, gWf = _smooth()
    W = RadialInteraction(psi, dpsi, max_elements=max_elements, backend="torch", self_pair=self_pair)
    x = cloud(B=2, M=7, d=3, seed=6, offset=5.0)
    keep = self_pair is not False
    energy, grad = loop_pairs(x, Wf, gWf, self_pair=keep)
    assert close(W.energy(x), energy) and close(W.mean_field_grad(x), grad)
    assert W.backend_used == "torch"
    other, _ = loop_pairs(x, Wf, gWf, self_pair=not keep)
    assert close(other - energy, np.full((2, 7), (1.3 if not keep else -1.3) / 7))  # the control: ψ(0)/M


def test_radial_drift_is_half_the_autograd_gradient_of_the_summed_energy():
    """For an even ``W``, ``∂/∂x_i Σ_k energy_k = 2/M Σ_j ∇W(x_i − x_j)``: ``mean_field_grad`` is half of
    autograd's gradient through the differentiable path of ``radial_sum`` (several blocks), with and
    without the self-pair (its gradient is 0 either way)."""
    psi, dpsi, _, _ = _smooth(0.8)
    x = cloud(B=2, M=6, d=2, seed=7)
    for self_pair in (True, False):
        W = RadialInteraction(psi, dpsi, max_elements=10, backend="torch", self_pair=self_pair)
        xg = x.clone().requires_grad_(True)
        (auto,) = torch.autograd.grad(W.energy(xg).sum(), xg)
        assert close(W.mean_field_grad(x), 0.5 * auto)


def test_radial_drift_in_float32_far_from_the_origin_is_accurate():
    """Float32 clouds around ``±3000``: the drift centres the state before ``x_i Σ g − Σ g x_j``, so it
    matches the float64 double loop (of the same float32 points) to 2e-4 of its scale; uncentred, the
    cancellation of two terms of size ``3000·Σg`` would lose about ``3000·6e-8·M ≈ 1e-3`` of it."""
    psi, dpsi, Wf, gWf = _smooth(1.0)
    base = cloud(B=2, M=8, d=2, seed=8)
    offset = torch.tensor([[[3000.0, -3000.0]], [[-3000.0, 3000.0]]], dtype=F64)
    x32 = (base + offset).float()
    W = RadialInteraction(psi, dpsi, backend="torch")
    _, grad = loop_pairs(x32.double(), Wf, gWf)
    got = W.mean_field_grad(x32)
    assert got.dtype == torch.float32
    assert np.abs(got.double().numpy() - grad).max() <= 2e-4 * np.abs(grad).max()


@pytest.mark.parametrize("M", [1, 2], ids=["one", "two"])
def test_radial_on_tiny_clouds(M):
    """One particle: no pairs without the self-pair (energy and drift exactly 0), ``ψ(0)`` with it; two
    particles at ``0`` and ``z = (1, 2)``: energy ``(ψ(0) + ψ(5))/2`` each, drift ``±ψ'(5)·z`` (closed form)."""
    psi, dpsi, _, _ = _smooth(2.0)
    x = torch.tensor([[[0.0, 0.0], [1.0, 2.0]]], dtype=F64)[:, :M]
    kept = RadialInteraction(psi, dpsi, backend="torch")
    left = RadialInteraction(psi, dpsi, backend="torch", self_pair=False)
    if M == 1:
        assert close(kept.energy(x), [[2.0]]) and close(kept.mean_field_grad(x), [[[0.0, 0.0]]])
        assert torch.equal(left.energy(x), torch.zeros(1, 1, dtype=F64))
        assert torch.equal(left.mean_field_grad(x), torch.zeros(1, 1, 2, dtype=F64))
    else:
        p5, dp5 = 2.0 / 6, -2.0 / 36
        assert close(kept.energy(x), [[(2.0 + p5) / 2, (2.0 + p5) / 2]])
        assert close(left.energy(x), [[p5 / 2, p5 / 2]])
        z = np.array([1.0, 2.0])
        drift = [[2 * dp5 * (-z) / 2, 2 * dp5 * z / 2]]
        assert close(kept.mean_field_grad(x), drift) and close(left.mean_field_grad(x), drift)


# --------------------------------------------------------------------------------------------------------
# RadialInteraction on the (emulated) KeOps backend


def test_smooth_radial_on_auto_keops_equals_the_double_loop(fake_keops):
    """Where ``"auto"`` means KeOps (emulated), a smooth kernel written with operators runs on KeOps and gives
    the double loop's numbers; ``backend_used`` says ``"keops"``."""
    psi, dpsi, Wf, gWf = _smooth(0.9)
    W = RadialInteraction(psi, dpsi)
    x = cloud(B=2, M=6, d=2, seed=9)
    energy, grad = loop_pairs(x, Wf, gWf)
    assert close(W.energy(x), energy) and W.backend_used == "keops"
    assert close(W.mean_field_grad(x), grad) and W.backend_used == "keops"
    assert DenseLazy.created == 6 and W._keops_fails is False  # X, Y, V per call


def test_a_kernel_keops_cannot_apply_falls_back_to_torch_once_and_for_all(fake_keops):
    """``ψ`` written with ``torch.exp`` raises ``TypeError`` on a LazyTensor: on ``"auto"`` the call falls back to
    the torch backend (the double loop's numbers, ``backend_used == "torch"``) and remembers it
    (``_keops_fails``), so the next call builds no LazyTensor; asked for ``"keops"`` the error propagates."""
    W = RadialInteraction(lambda r2: torch.exp(-r2), lambda r2: -torch.exp(-r2))
    x = cloud(B=2, M=5, d=2, seed=10)
    energy, grad = loop_pairs(x, lambda b, z: math.exp(-(z @ z)), lambda b, z: -2 * math.exp(-(z @ z)) * z)
    assert close(W.energy(x), energy)
    assert W.backend_used == "torch" and W._keops_fails is True
    made = DenseLazy.created
    assert close(W.mean_field_grad(x), grad) and W.backend_used == "torch"
    assert DenseLazy.created == made
    strict = RadialInteraction(lambda r2: torch.exp(-r2), lambda r2: -torch.exp(-r2), backend="keops")
    with pytest.raises(TypeError):
        strict.energy(x)
    assert strict._keops_fails is False and strict.backend_used is None


def test_singular_kernels_on_keops(fake_keops):
    """Without the self-pair, ``"auto"`` runs on torch (KeOps cannot leave ``j = i`` out): the double loop over
    ``j ≠ i``; an explicit ``backend="keops"`` is refused by ``radial_sum`` with its message."""
    x = cloud(B=2, M=5, d=2, seed=11)
    W = LogInteraction(0.7)
    energy, grad = loop_pairs(
        x, lambda b, z: -0.35 * math.log(z @ z), lambda b, z: -0.7 * z / (z @ z), self_pair=False
    )
    assert close(W.energy(x), energy) and close(W.mean_field_grad(x), grad)
    assert W.backend_used == "torch" and DenseLazy.created == 0
    with pytest.raises(
        ValueError, match=r"^exclude_self \(leaving out the self-pairs of a singular kernel\) runs"
    ):
        LogInteraction(0.7, backend="keops").energy(x)


def test_gaussian_on_keops_equals_the_double_loop_per_replica(fake_keops):
    """``GaussianInteraction`` on KeOps: one formula ``e^{−|√s x_i − √s x_j|²}`` with ``c`` and ``−2sc`` outside,
    per-replica ``c`` and ``ℓ``, against the double loop of ``c e^{−|z|²/2ℓ²}`` and its gradient."""
    c = torch.tensor([1.5, -0.8], dtype=F64)
    ell = torch.tensor([0.6, 1.7], dtype=F64)
    W = GaussianInteraction(c, ell)
    x = cloud(B=2, M=6, d=3, seed=12)

    def Wf(b, z):
        return per(c, b) * math.exp(-(z @ z) / (2 * per(ell, b) ** 2))

    def gWf(b, z):
        return -Wf(b, z) / per(ell, b) ** 2 * z

    energy, grad = loop_pairs(x, Wf, gWf)
    assert close(W.energy(x), energy) and close(W.mean_field_grad(x), grad)
    assert W.backend_used == "keops"


# --------------------------------------------------------------------------------------------------------
# GaussianInteraction, LogInteraction, RieszInteraction


@pytest.mark.parametrize(
    "c, length",
    [
        (None, None),
        (1.5, 0.7),
        (-0.4, 2.0),
        (torch.tensor([1.5, -0.8]), 0.7),
        (0.9, torch.tensor([0.6, 1.7])),
    ],
    ids=["default", "numbers", "attract", "c_per", "length_per"],
)
def test_gaussian_against_the_double_loop_and_autograd(c, length):
    """``c e^{−|z|²/2ℓ²}`` (default ``c = ℓ = 1``) and ``−c/ℓ² z e^{−|z|²/2ℓ²}``: energy and drift against the
    double loop (self-pair included: ``c/M`` in the energy) in blocks of 2 rows; the drift against half the
    autograd gradient of the summed energy (the differentiable path, where the kernel is not in place)."""
    W = GaussianInteraction() if c is None else GaussianInteraction(c, length, max_elements=2 * 6 * 2)
    cc, ll = (1.0, 1.0) if c is None else (c, length)
    x = cloud(B=2, M=6, d=2, seed=13)

    def Wf(b, z):
        return per(cc, b) * math.exp(-(z @ z) / (2 * per(ll, b) ** 2))

    energy, grad = loop_pairs(x, Wf, lambda b, z: -Wf(b, z) / per(ll, b) ** 2 * z)
    assert close(W.energy(x), energy) and close(W.mean_field_grad(x), grad)
    xg = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(W.energy(xg).sum(), xg)
    assert close(W.mean_field_grad(x), 0.5 * auto)
    assert W.self_pair is True


def test_gaussian_kernels_and_parameters():
    """``_kernels`` is ``(e^{−u}, e^{−u}, s, c, −2sc)`` with ``s = 1/(2ℓ²)`` (numbers and per replica); the
    stored fields, ``parameters`` and ``repr`` are the values given."""
    g = GaussianInteraction(1.5, 0.5)
    phi_e, phi_g, s, ce, cg = g._kernels()
    assert phi_e is pot._gaussian_kernel and phi_g is pot._gaussian_kernel
    assert s == 2.0 and ce == 1.5 and cg == -6.0
    assert g.parameters() == {"c": 1.5, "length": 0.5} and repr(g) == "GaussianInteraction(c=1.5, length=0.5)"
    gp = GaussianInteraction(torch.tensor([1.0, -2.0]), torch.tensor([0.5, 1.0]))
    _, _, s, ce, cg = gp._kernels()
    assert close(s, [2.0, 0.5]) and close(ce, [1.0, -2.0]) and close(cg, [-4.0, 2.0])
    assert gp.length.dtype == F64 and gp.c.dtype == F64
    assert repr(gp) == f"GaussianInteraction(c={gp.c}, length={gp.length})"
    with pytest.raises(
        ValueError,
        match=r"^GaussianInteraction needs length > 0 with 1/\(2·length²\) finite, got length=-1\.0$",
    ):
        GaussianInteraction(1.0, -1.0)
    with pytest.raises(
        ValueError,
        match=r"^GaussianInteraction needs length > 0 with 1/\(2·length²\) finite, got length\[2\]=0\.0$",
    ):
        GaussianInteraction(1.0, [1.0, 2.0, 0.0])
    with pytest.raises(ValueError, match=mismatch("c", 3, 2)):
        GaussianInteraction([1.0, 2.0, 3.0], backend="torch").energy(cloud(B=2))
    with pytest.raises(ValueError, match=mismatch("c", 3, 2)):
        GaussianInteraction([1.0, 2.0, 3.0], backend="torch").mean_field_grad(cloud(B=2))


def test_the_gaussian_kernel_is_in_place_only_without_a_gradient():
    """``_gaussian_kernel(u) = e^{−u}``: in place on a plain tensor (the block is overwritten), and on a tensor
    that requires a gradient while gradients are off; out of place (the input kept, the result
    differentiable with ``d/du = −e^{−u}``) when a gradient flows; a non-tensor goes through ``(−u).exp()``."""
    u = torch.tensor([0.0, 1.0, 2.5], dtype=F64)
    expected = np.exp(-np.array([0.0, 1.0, 2.5]))
    plain = u.clone()
    out = pot._gaussian_kernel(plain)
    assert out.data_ptr() == plain.data_ptr() and close(plain, expected, rtol=1e-15)
    leaf = u.clone().requires_grad_(True)
    out = pot._gaussian_kernel(leaf)
    assert close(out, expected, rtol=1e-15) and torch.equal(leaf.detach(), u)
    (g,) = torch.autograd.grad(out.sum(), leaf)
    assert close(g, -expected, rtol=1e-15)
    with torch.no_grad():
        nograd = u.clone().requires_grad_(True)
        out = pot._gaussian_kernel(nograd)
        assert out.data_ptr() == nograd.data_ptr() and close(nograd.detach(), expected, rtol=1e-15)
    lazy = pot._gaussian_kernel(DenseLazy(u.clone(), True))
    assert isinstance(lazy, DenseLazy) and close(lazy.t, expected, rtol=1e-15)


@pytest.mark.parametrize("c", [None, 0.9, torch.tensor([2.0, -0.5], dtype=F64)], ids=["default", "c", "per"])
def test_log_interaction_against_the_double_loop(c):
    """``−c/2 log|z|²`` and ``−c z/|z|²`` over ``j ≠ i`` (default ``c = 1``) by the double loop, in blocks of one
    row; the drift is half the (finite) autograd gradient of the summed energy."""
    W = LogInteraction(max_elements=1) if c is None else LogInteraction(c, max_elements=1)
    cc = 1.0 if c is None else c
    x = cloud(B=2, M=5, d=2, seed=14, offset=2.0)
    energy, grad = loop_pairs(
        x, lambda b, z: -per(cc, b) / 2 * math.log(z @ z), lambda b, z: -per(cc, b) * z / (z @ z), False
    )
    assert close(W.energy(x), energy) and close(W.mean_field_grad(x), grad)
    xg = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(W.energy(xg).sum(), xg)
    assert close(W.mean_field_grad(x), 0.5 * auto)


def test_log_interaction_fields_kernels_and_psi():
    """Fields, ``parameters``, ``repr``, ``self_pair = False``; ``_kernels`` is ``(−½ log u, 1/u, 1, c, −c)``,
    and the public ``ψ``/``ψ'`` are ``−c/2 log r²``, ``−c/(2r²)`` (numbers by hand)."""
    W = LogInteraction(0.6, max_elements=9, backend="torch")
    assert W.c == 0.6 and W.parameters() == {"c": 0.6} and repr(W) == "LogInteraction(c=0.6)"
    assert W.self_pair is False and W.max_elements == 9 and W.backend == "torch"
    assert LogInteraction().c == 1.0 and LogInteraction().backend == "auto"
    assert LogInteraction().max_elements == 1 << 22
    phi_e, phi_g, s, ce, cg = W._kernels()
    assert phi_e is pot._log_kernel and phi_g is pot._inverse_kernel and s == 1.0 and ce == 0.6 and cg == -0.6
    r2 = torch.tensor([4.0, 0.25], dtype=F64)
    assert close(pot._log_kernel(r2), [-math.log(2.0), math.log(2.0)], rtol=1e-15)
    assert close(pot._inverse_kernel(r2), [0.25, 4.0], rtol=1e-15)
    assert close(W.psi(r2), [-0.3 * math.log(4.0), -0.3 * math.log(0.25)], rtol=1e-15)
    assert close(W.dpsi(r2), [-0.3 / 4.0, -0.3 / 0.25], rtol=1e-15)
    with pytest.raises(ValueError, match=r"^c must be finite, got nan$"):
        LogInteraction(float("nan"))


def test_riesz_fields_kernels_and_values():
    """``RieszInteraction(s, c)``: ``_kernels`` is ``((r²)^{−s/2}, (r²)^{−s/2−1}, 1, c/s, −c)`` (by hand at
    ``r² = 4``), defaults ``s = c = 1``, and energy/drift against the double loop of ``c|z|^{−s}/s`` and
    ``−c z/|z|^{s+2}`` with ``s = 3`` (where ``1/s ≠ s``, ``s/2 ≠ s``), per-replica ``c``."""
    W = RieszInteraction(3.0, 2.0)
    phi_e, phi_g, one, ce, cg = W._kernels()
    four = torch.tensor(4.0, dtype=F64)
    assert float(phi_e(four)) == pytest.approx(4.0**-1.5, rel=1e-15)
    assert float(phi_g(four)) == pytest.approx(4.0**-2.5, rel=1e-15)
    assert one == 1.0 and ce == pytest.approx(2.0 / 3.0, rel=1e-15) and cg == -2.0
    assert float(W.psi(four)) == pytest.approx(2.0 / 3.0 * 4.0**-1.5, rel=1e-15)
    assert float(W.dpsi(four)) == pytest.approx(-1.5 * 2.0 * 4.0**-2.5 / 3.0, rel=1e-15)
    d = RieszInteraction()
    assert d.s == 1.0 and d.c == 1.0 and d.backend == "auto" and d.max_elements == 1 << 22
    assert (
        d.self_pair is False and d.parameters() == {"c": 1.0} and repr(d) == "RieszInteraction(s=1.0, c=1.0)"
    )
    c = torch.tensor([0.7, -1.2], dtype=F64)
    Wp = RieszInteraction(3.0, c, max_elements=5)
    x = cloud(B=2, M=5, d=3, seed=15)
    energy, grad = loop_pairs(
        x,
        lambda b, z: per(c, b) * math.sqrt(z @ z) ** -3.0 / 3.0,
        lambda b, z: -per(c, b) * z / math.sqrt(z @ z) ** 5.0,
        self_pair=False,
    )
    assert close(Wp.energy(x), energy) and close(Wp.mean_field_grad(x), grad)
    with pytest.raises(ValueError, match=r"^s must be > 0, got 0\.0$"):
        RieszInteraction(0.0)


# --------------------------------------------------------------------------------------------------------
# pairwise: constants and backends


def test_pairwise_constants():
    """The documented constants: the two backends, blocks of ``2²⁰`` numbers, dense Sinkhorn up to ``3·2²²``."""
    assert pw.BACKENDS == ("torch", "keops")
    assert pw.MAX_ELEMENTS == 1048576 and pw.DENSE_MAX_ELEMENTS == 12582912
    assert sorted(pw.__all__) == sorted(
        [
            "BACKENDS",
            "DENSE_MAX_ELEMENTS",
            "MAX_ELEMENTS",
            "cost_matrix",
            "keops_available",
            "radial_sum",
            "resolve_backend",
            "softmin",
            "softmin_from_cost",
        ]
    )


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


# --------------------------------------------------------------------------------------------------------
# pairwise: the torch helpers


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
    x, y = cloud(B=2, M=3, d=2, seed=16, offset=1.0), cloud(B=2, M=6, d=2, seed=17, offset=-2.0)
    xc, yc = pw._centred(x, y)
    c = 0.5 * (x.numpy().mean(1, keepdims=True) + y.numpy().mean(1, keepdims=True))
    assert close(xc, x.numpy() - c, rtol=1e-14) and close(yc, y.numpy() - c, rtol=1e-14)
    r2 = pw._squared_distances(xc, yc, yc.square().sum(-1))
    expected = np.stack([cdist(x.numpy()[b], y.numpy()[b], "sqeuclidean") for b in range(2)])
    assert close(r2, expected)
    out = torch.empty(2, 3, 6, dtype=F64)
    r2b = pw._squared_distances(xc, yc, yc.square().sum(-1), out=out)
    assert r2b.data_ptr() == out.data_ptr() and close(out, expected)
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


# --------------------------------------------------------------------------------------------------------
# radial_sum


@pytest.mark.parametrize("exclude_self", [False, True], ids=["all", "no_self"])
@pytest.mark.parametrize(
    "scale", [None, 0.7, 1.0, torch.tensor([0.4, 1.3], dtype=F64)], ids=["dflt", "s", "one", "per"]
)
@pytest.mark.parametrize("max_elements", [None, 1, 2 * 7 * 3], ids=["dflt_block", "rows1", "rows3"])
def test_radial_sum_equals_the_double_loop(exclude_self, scale, max_elements):
    """``radial_sum`` (torch backend, the buffered path) against ``Σ_j φ(s|x_i − x_j|²) v_j`` by a double loop,
    ``j ≠ i`` when asked, with the default scale 1 and block, blocks of 1 and of 3 rows (M = 7); a singular
    ``φ = 1/u`` never reaches the sum at the self-pairs."""
    x = cloud(B=2, M=7, d=3, seed=18, offset=3.0)
    values = cloud(B=2, M=7, d=2, seed=19)
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
    assert close(out, loop_radial(x, x, lambda u: 1.0 / (0.5 + u), values, s, exclude_self))
    if exclude_self:
        inv, _ = pw.radial_sum(x, x, lambda u: 1.0 / u, values, exclude_self=True, **kwargs)
        assert close(inv, loop_radial(x, x, lambda u: 1.0 / u, values, s, True), rtol=1e-9)


def test_radial_sum_two_clouds_and_the_default_backend():
    """Two different clouds (M = 4, N = 6) with the default backend (``"auto"`` → torch on a CPU) and
    ``φ = e^{−u}``: the double loop; negative control: ``y`` and ``x`` swapped in the loop differs in shape."""
    x, y = cloud(B=2, M=4, d=2, seed=20), cloud(B=2, M=6, d=2, seed=21, offset=0.5)
    values = cloud(B=2, M=6, d=3, seed=22)
    out, used = pw.radial_sum(x, y, lambda u: (-u).exp(), values, scale=0.3)
    assert used == "torch" and out.shape == (2, 4, 3)
    assert close(out, loop_radial(x, y, lambda u: math.exp(-u), values, 0.3))
    assert not close(out, loop_radial(x, y, lambda u: math.exp(-u), values, 0.31))


@pytest.mark.parametrize("exclude_self", [False, True], ids=["all", "no_self"])
def test_radial_sum_differentiable_path_and_its_gradients(exclude_self):
    """With inputs that require a gradient the blocks are kept (not written into a buffer): the values equal
    the double loop, and autograd's gradients in ``x`` and in ``values`` equal those of a dense torch formula
    written out (masked diagonal), including a singular ``φ = 1/u`` (finite gradients). Only ``values``
    requiring a gradient also takes this path; under ``no_grad`` the result is not differentiable."""
    x = cloud(B=2, M=6, d=2, seed=23)
    values = cloud(B=2, M=6, d=2, seed=24)
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
        assert close(
            out,
            loop_radial(x, x, lambda u: 1 / u if exclude_self else math.exp(-u), values, 1.0, exclude_self),
        )
        w = torch.linspace(-1.0, 1.0, 24, dtype=F64).view(2, 6, 2)
        gx, gv = torch.autograd.grad((out * w).sum(), (xg, vg))
        xr, vr = x.clone().requires_grad_(True), values.clone().requires_grad_(True)
        ex, ev = torch.autograd.grad((dense(xr, vr) * w).sum(), (xr, vr))
        assert torch.isfinite(gx).all() and close(gx, ex, rtol=1e-9) and close(gv, ev, rtol=1e-9)
    only_v = values.clone().requires_grad_(True)
    out, _ = pw.radial_sum(x, x, phi, only_v, backend="torch", max_elements=20, exclude_self=exclude_self)
    assert out.requires_grad
    with torch.no_grad():
        out, _ = pw.radial_sum(x.clone().requires_grad_(True), x, phi, values, exclude_self=exclude_self)
    assert not out.requires_grad


def test_radial_sum_refusals():
    """``exclude_self`` with two clouds of different sizes, a scale with the wrong replica count, an unknown
    backend: each refused with its message."""
    x, values = cloud(B=2, M=5, d=2), cloud(B=2, M=5, d=1)
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


def test_radial_sum_and_softmin_on_keops_equal_the_loops(fake_keops):
    """The KeOps formulas (on the dense stand-in): ``radial_sum`` with a number and a per-replica scale (the
    scale applied as ``√s`` to both clouds), ``softmin`` with ``p = 1, 2`` and per-replica ε; ``exclude_self``
    refused on KeOps with its full message."""
    x, y = cloud(B=2, M=4, d=3, seed=25), cloud(B=2, M=6, d=3, seed=26)
    values = cloud(B=2, M=6, d=2, seed=27)
    for scale in (0.6, torch.tensor([0.5, 1.5], dtype=F64)):
        out, used = pw.radial_sum(x, y, lambda u: (-u).exp(), values, scale=scale, backend="keops")
        assert used == "keops" and close(out, loop_radial(x, y, lambda u: math.exp(-u), values, scale))
    h = cloud(B=2, M=6, d=1, seed=28)[..., 0]
    eps = torch.tensor([0.3, 0.8], dtype=F64)
    for p in (1, 2):
        out, used = pw.softmin(x, y, h, eps, p=p, backend="keops")
        assert used == "keops" and close(out, loop_softmin(x, y, h, eps, p))
    with pytest.raises(
        ValueError,
        match=r"^exclude_self \(leaving out the self-pairs of a singular kernel\) runs on the torch backend only; "
        r"use backend='torch' \(or 'auto'\)$",
    ):
        pw.radial_sum(x, x, lambda u: u, cloud(B=2, M=4, d=1), backend="keops", exclude_self=True)


# --------------------------------------------------------------------------------------------------------
# softmin, cost_matrix, softmin_from_cost, _logsumexp_


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("eps", [0.4, torch.tensor([0.3, 0.9], dtype=F64)], ids=["number", "per"])
@pytest.mark.parametrize("max_elements", [None, 1, 2 * 7 * 2], ids=["dflt", "rows1", "rows2"])
@pytest.mark.parametrize("dtype", [torch.float32, F64], ids=["f32", "f64"])
def test_softmin_equals_the_cdist_formula(p, eps, max_elements, dtype):
    """``softmin`` (torch backend) against ``−ε log Σ_j exp(h_j − cdist^p/ε)`` (scipy, stable log-sum-exp),
    every block size (M = 5 in blocks of 1, 2 and all rows), both powers, ε a number or per replica, float32
    through the module's log-sum-exp (1e-4) and float64 through torch's (1e-10)."""
    x, y = cloud(B=2, M=5, d=3, seed=29, offset=2.0), cloud(B=2, M=7, d=3, seed=30, offset=2.5)
    h = cloud(B=2, M=7, d=1, seed=31)[..., 0]
    kwargs = {} if max_elements is None else {"max_elements": max_elements}
    out, used = pw.softmin(x.to(dtype), y.to(dtype), h.to(dtype), eps, p=p, backend="torch", **kwargs)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-10}
    assert used == "torch" and out.dtype == dtype and out.shape == (2, 5)
    assert close(out, loop_softmin(x, y, h, eps, p), **tol)


def test_softmin_defaults_are_p2_and_auto():
    """Without ``p`` and ``backend``: the squared cost on torch; negative control: ``p = 1`` differs."""
    x, y = cloud(B=1, M=4, d=2, seed=32), cloud(B=1, M=3, d=2, seed=33)
    h = torch.zeros(1, 3, dtype=F64)
    out, used = pw.softmin(x, y, h, 0.5)
    assert used == "torch" and close(out, loop_softmin(x, y, h, 0.5, 2))
    assert not close(out, loop_softmin(x, y, h, 0.5, 1))


def test_per_replica_epsilon_and_scaled_clouds():
    """``_per_replica`` makes ``(B, 1)`` in ``x``'s dtype from a number or ``(B,)``; ``_scaled`` centres and
    divides by ``ε`` for ``p = 1`` and by ``√ε`` for ``p = 2``."""
    x = torch.zeros(3, 2, 1, dtype=torch.float32)
    e = pw._per_replica(0.5, x)
    assert e.shape == (3, 1) and e.dtype == torch.float32 and e.flatten().tolist() == [0.5] * 3
    e = pw._per_replica(torch.tensor([1.0, 4.0, 0.25], dtype=F64), x)
    assert e.dtype == torch.float32 and e.flatten().tolist() == [1.0, 4.0, 0.25]
    a, b = cloud(B=2, M=3, d=2, seed=34, offset=1.0), cloud(B=2, M=4, d=2, seed=35)
    eps = torch.tensor([[0.25], [4.0]], dtype=F64)
    c = 0.5 * (a.numpy().mean(1, keepdims=True) + b.numpy().mean(1, keepdims=True))
    for p, factor in ((1, np.array([4.0, 0.25])), (2, np.array([2.0, 0.5]))):
        sa, sb = pw._scaled(a, b, eps, p)
        assert close(sa, (a.numpy() - c) * factor[:, None, None], rtol=1e-14)
        assert close(sb, (b.numpy() - c) * factor[:, None, None], rtol=1e-14)


@pytest.mark.parametrize("p", [1, 2])
def test_cost_matrix_and_softmin_from_cost(p):
    """``cost_matrix`` is scipy's ``cdist^p`` (default ``p = 2``); ``softmin_from_cost`` equals the cdist formula,
    per-replica ε, from a transposed view too, and computes in ``work`` when given (the buffer is written)."""
    x, y = cloud(B=2, M=4, d=3, seed=36, offset=1.0), cloud(B=2, M=5, d=3, seed=37)
    C = pw.cost_matrix(x, y, p)
    expected = np.stack([cdist(x.numpy()[b], y.numpy()[b]) ** p for b in range(2)])
    assert close(C, expected, rtol=1e-9, atol=1e-12)
    if p == 2:
        assert close(pw.cost_matrix(x, y), expected, rtol=1e-9, atol=1e-12)
    h = cloud(B=2, M=5, d=1, seed=38)[..., 0]
    eps = torch.tensor([0.2, 0.7], dtype=F64)
    f = pw.softmin_from_cost(C, h, eps)
    assert close(f, loop_softmin(x, y, h, eps, p), rtol=1e-9, atol=1e-10)
    work = torch.zeros(2, 4, 5, dtype=F64)
    f2 = pw.softmin_from_cost(C, h, eps, work=work)
    assert close(f2, f, rtol=1e-14) and not torch.equal(work, torch.zeros_like(work))
    hx = cloud(B=2, M=4, d=1, seed=39)[..., 0]
    g = pw.softmin_from_cost(C.transpose(1, 2), hx, 0.5)
    assert close(g, loop_softmin(y, x, hx, 0.5, p), rtol=1e-9, atol=1e-10)


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
    assert close(out32[:2], expected[:2], rtol=1e-6)
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
    assert close(r2, raw.clamp(min=0.0), rtol=0, atol=0)


def test_radial_sum_refuses_fewer_scales_and_a_smaller_second_cloud():
    """The replica count of a per-replica scale must equal B exactly (fewer is refused too, with the
    message), and ``exclude_self`` needs ``N = M`` also when ``N > M``."""
    x, values = cloud(B=3, M=4, d=2), cloud(B=3, M=4, d=1)
    with pytest.raises(ValueError, match=r"^scale has 2 per-replica values, but x has B = 3 replicas$"):
        pw.radial_sum(x, x, lambda u: u, values, scale=torch.ones(2), backend="torch")
    y = cloud(B=3, M=6, d=2, seed=1)
    with pytest.raises(ValueError, match=r"got M = 4 and N = 6 points$"):
        pw.radial_sum(x, y, lambda u: u, cloud(B=3, M=6, d=1), exclude_self=True)


def test_the_interaction_hands_its_settings_to_radial_sum(monkeypatch):
    """``RadialInteraction`` passes its block size, the self-pair rule (``exclude_self = not self_pair``), the
    torch backend on a CPU and its kernel's scale to :func:`meanfield.drift.pairwise.radial_sum` (recorded by a
    wrapper around the real function, whose numbers stay the double loop's)."""
    calls = []
    real = pw.radial_sum

    def spy(x, y, phi, values, **kw):
        calls.append(kw)
        return real(x, y, phi, values, **kw)

    monkeypatch.setattr(pot, "radial_sum", spy)
    x = cloud(B=2, M=5, d=2, seed=40)
    GaussianInteraction(1.0, 0.5, max_elements=13).mean_field_grad(x)
    LogInteraction(max_elements=11).energy(x)
    assert calls == [
        {"scale": 2.0, "backend": "torch", "max_elements": 13, "exclude_self": False},
        {"scale": 1.0, "backend": "torch", "max_elements": 11, "exclude_self": True},
    ]


def test_every_kernel_names_its_per_replica_parameter():
    """A state with another replica count is refused naming the parameter, in ``energy``/``grad`` of the
    confinements and in the public ``ψ``/``ψ'`` of the radial interactions."""
    per3 = torch.tensor([1.0, 2.0, 0.5], dtype=F64)
    x2, block2 = cloud(B=2, M=3), torch.ones(2, 1, 1, dtype=F64)
    cases = [
        (DoubleWell(per3, 1.0).energy, x2, "quartic"),
        (DoubleWell(per3, 1.0).grad, x2, "quartic"),
        (DoubleWell(2.0, per3).energy, x2, "quadratic"),
        (DoubleWell(2.0, per3).grad, x2, "quadratic"),
        (DoubleWell(1.0, per3).grad, x2, "quadratic"),
        (GaussianInteraction(per3, 1.0).psi, block2, "c"),
        (GaussianInteraction(1.0, per3).psi, block2, "length"),
        (GaussianInteraction(per3, 1.0).dpsi, block2, "c"),
        (GaussianInteraction(1.0, per3).dpsi, block2, "length"),
        (LogInteraction(per3).psi, block2, "c"),
        (LogInteraction(per3).dpsi, block2, "c"),
        (RieszInteraction(2.0, per3).psi, block2, "c"),
        (RieszInteraction(2.0, per3).dpsi, block2, "c"),
        (LogInteraction(per3, backend="torch").mean_field_grad, x2, "c"),
        (RieszInteraction(2.0, per3, backend="torch").energy, x2, "c"),
    ]
    for method, arg, name in cases:
        with pytest.raises(ValueError, match=mismatch(name, 3, 2)):
            method(arg)
    with pytest.raises(ValueError, match=r"^length must be finite, got inf$"):
        GaussianInteraction(1.0, float("inf"))
    with pytest.raises(ValueError, match=r"^c must be finite, got nan$"):
        GaussianInteraction(float("nan"))
