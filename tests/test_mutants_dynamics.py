"""Value tests for the dynamics modules (issue 25, mutation testing): potentials, pairwise, systems,
simulate, kinetic and the Euler–Maruyama solver.

Every test compares the code against an independent answer: a hand formula in numpy (float64), an explicit
``O(M²)`` double loop over the pairs, ``torch.autograd`` of the energy, one Euler–Maruyama step written out
``θ + η·b(θ) + σ·dW`` with the same increments, or an exact message. The runs are deterministic (pre-drawn
increments or fixed seeds), so the tolerances are round-off only, no statistics. Negative controls: wrong
shapes, wrong replica counts, bad names, deliberately singular or exploding drifts.

Three tests emulate a machine this CPU session is not: KeOps on a GPU (a dense stand-in for
``pykeops.torch.LazyTensor``, which implements its broadcasting and reduction rules on ordinary tensors),
an accelerator's lazy finiteness checks (``simulate``'s set of eagerly checked device types emptied), and a
default device other than the state's (``with torch.device("meta")``).
"""

from __future__ import annotations

import importlib
import math
import sys
import types

import numpy as np
import pytest
import torch
from _pair_loops import loop_pairs as np_pairs  # tests/_pair_loops.py

import meanfield.drift.pairwise as pw
import meanfield.drift.potentials as pot
from meanfield import NonFiniteStateError, simulate
from meanfield.drift.phase_space import KineticMeanFieldLangevin, pair, positions, velocities
from meanfield.drift.potentials import (
    Alignment,
    DoubleWell,
    GaussianInteraction,
    LogInteraction,
    Quadratic,
    QuadraticInteraction,
    RadialInteraction,
    RieszInteraction,
)
from meanfield.drift.projections import Sphere
from meanfield.drift.schedules import Constant
from meanfield.drift.systems import SDE, MeanFieldLangevin
from meanfield.stepping.brownian import BrownianIncrements, GaussianNoise, NoiseSource, RademacherNoise
from meanfield.stepping.solvers import EulerMaruyama

sim_mod = importlib.import_module("meanfield.stepping.simulate")  # the module (the package exports the function)

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


# --------------------------------------------------------------------------------------------------------
# potentials


@pytest.mark.parametrize("a", [1.7, torch.tensor([0.5, 2.0, 3.0], dtype=F64)], ids=["number", "per_replica"])
def test_quadratic_energy_and_grad_equal_the_hand_formula(a):
    """``Quadratic(a)``: ``V = a/2|x|²`` and ``∇V = a x`` against numpy with replica ``b``'s ``a``, and ``∇V``
    against autograd of the energy. Negative control: another replica's ``a`` gives other numbers."""
    x = cloud(B=3)
    V = Quadratic(a)
    xn = x.numpy()
    av = np.array([per(a, b) for b in range(3)])[:, None]
    assert close(V.energy(x), 0.5 * av * (xn**2).sum(-1))
    assert close(V.grad(x), av[:, :, None] * xn)
    xg = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(V.energy(xg).sum(), xg)
    assert close(V.grad(x), auto)
    if torch.is_tensor(a):
        assert not close(V.energy(x), 0.5 * av[::-1] * (xn**2).sum(-1))


@pytest.mark.parametrize(
    "quartic, quadratic",
    [(1.0, 1.0), (2.0, 0.5), (torch.tensor([1.0, 2.0, 0.5], dtype=F64), torch.tensor([1.0, -0.5, 3.0]))],
    ids=["plain", "numbers", "per_replica"],
)
def test_double_well_energy_and_grad_equal_the_hand_formula(quartic, quadratic):
    """``DoubleWell(c₄, c₂)``: ``Σ_k (c₄x⁴/4 − c₂x²/2)`` and ``c₄x³ − c₂x`` against numpy, and the gradient
    against autograd of the energy."""
    x = cloud(B=3)
    V = DoubleWell(quartic, quadratic)
    xn = x.numpy()
    c4 = np.array([per(quartic, b) for b in range(3)])[:, None, None]
    c2 = np.array([per(quadratic, b) for b in range(3)])[:, None, None]
    assert close(V.energy(x), (c4 * xn**4 / 4 - c2 * xn**2 / 2).sum(-1))
    assert close(V.grad(x), c4 * xn**3 - c2 * xn)
    xg = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(V.energy(xg).sum(), xg)
    assert close(V.grad(x), auto)


def _interaction_cases():
    kq = torch.tensor([2.5, -0.4, 1.0], dtype=F64)
    c = torch.tensor([1.5, -0.8, 0.3], dtype=F64)
    ell = torch.tensor([0.6, 1.0, 2.0], dtype=F64)
    return {
        "quadratic_k_number": (
            lambda: QuadraticInteraction(2.5),
            lambda b, z: 2.5 / 2 * z @ z,
            lambda b, z: 2.5 * z,
        ),
        "quadratic_k_per_replica": (
            lambda: QuadraticInteraction(kq),
            lambda b, z: float(kq[b]) / 2 * z @ z,
            lambda b, z: float(kq[b]) * z,
        ),
        "gaussian_numbers": (
            lambda: GaussianInteraction(1.5, 0.7, backend="torch"),
            lambda b, z: 1.5 * math.exp(-(z @ z) / (2 * 0.49)),
            lambda b, z: -1.5 / 0.49 * z * math.exp(-(z @ z) / (2 * 0.49)),
        ),
        "gaussian_per_replica": (
            lambda: GaussianInteraction(c, ell),
            lambda b, z: float(c[b]) * math.exp(-(z @ z) / (2 * float(ell[b]) ** 2)),
            lambda b, z: (
                -float(c[b]) / float(ell[b]) ** 2 * z * math.exp(-(z @ z) / (2 * float(ell[b]) ** 2))
            ),
        ),
        "log_per_replica": (
            lambda: LogInteraction(c),
            lambda b, z: -float(c[b]) / 2 * math.log(z @ z),
            lambda b, z: -float(c[b]) * z / (z @ z),
        ),
        "log_number": (
            lambda: LogInteraction(0.9, backend="torch"),
            lambda b, z: -0.45 * math.log(z @ z),
            lambda b, z: -0.9 * z / (z @ z),
        ),
        "riesz": (
            lambda: RieszInteraction(1.5, 0.8),
            lambda b, z: 0.8 / 1.5 * (z @ z) ** -0.75,
            lambda b, z: -0.8 * z * (z @ z) ** (-0.75 - 1.0),
        ),
        "riesz_per_replica": (
            lambda: RieszInteraction(0.5, c, backend="torch"),
            lambda b, z: float(c[b]) / 0.5 * (z @ z) ** -0.25,
            lambda b, z: -float(c[b]) * z * (z @ z) ** (-0.25 - 1.0),
        ),
    }


CASES = _interaction_cases()


@pytest.mark.parametrize("name", list(CASES))
def test_interaction_energy_and_drift_equal_the_double_loop(name):
    """Every interaction's per-particle energy ``1/M Σ_j W(x_i − x_j)`` and ``1/M Σ_j ∇W(x_i − x_j)`` against an
    explicit numpy double loop with the closed-form ``W`` and ``∇W`` (the self-pair left out exactly for the
    singular kernels), replica by replica. Blocks of rows small enough that several are used."""
    make, W, gradW = CASES[name]
    inter = make()
    if isinstance(inter, RadialInteraction):
        inter.max_elements = 3 * 7  # rows = 1 or 2 per block at B = 3, M = 7
    x = cloud(B=3, M=7, seed=1)
    singular = isinstance(inter, (LogInteraction, RieszInteraction))
    energy, grad = np_pairs(x, W, gradW, self_pair=not singular)
    assert close(inter.energy(x), energy, rtol=1e-9, atol=1e-11)
    assert close(inter.mean_field_grad(x), grad, rtol=1e-9, atol=1e-11)


def test_alignment_energy_and_drift_equal_the_double_loop():
    """``Alignment(κ)`` (``W(x, y) = −κ x·y``): ``1/M Σ_j −κ x_i·x_j`` and ``1/M Σ_j ∇_{x_i} W = −κ x̄`` against a
    numpy double loop, a number and per-replica ``κ``."""
    x = cloud(B=3, M=6, seed=2)
    xn = x.numpy()
    for kappa in (0.8, torch.tensor([0.7, -1.2, 2.0], dtype=F64)):
        inter = Alignment(kappa)
        energy = np.zeros((3, 6))
        grad = np.zeros((3, 6, 2))
        for b in range(3):
            k = per(kappa, b)
            for i in range(6):
                for j in range(6):
                    energy[b, i] += -k * xn[b, i] @ xn[b, j] / 6
                    grad[b, i] += -k * xn[b, j] / 6
        assert close(inter.energy(x), energy)
        assert close(inter.mean_field_grad(x), grad)


@pytest.mark.parametrize("name", ["gaussian_numbers", "gaussian_per_replica", "quadratic_k_per_replica"])
def test_smooth_interaction_drift_is_half_the_autograd_of_the_summed_energy(name):
    """For an even ``W``, ``∂/∂x_i Σ_k energy_k = 2/M Σ_j ∇W(x_i − x_j)``: ``mean_field_grad`` equals half of
    autograd's gradient of the summed energy (which runs the differentiable, list-of-blocks path of
    ``radial_sum``, several blocks)."""
    inter = CASES[name][0]()
    if isinstance(inter, RadialInteraction):
        inter.max_elements = 3 * 7
    x = cloud(B=3, M=7, seed=3)
    xg = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(inter.energy(xg).sum(), xg)
    assert close(inter.mean_field_grad(x), 0.5 * auto, rtol=1e-9, atol=1e-11)


def test_kernel_callables_are_the_documented_psi_and_dpsi():
    """The ``psi``/``dpsi`` a radial interaction exposes are ``ψ`` and ``ψ'`` of its docstring, on a
    ``(B, rows, M)`` block of squared distances: Gaussian ``c·e^{−s r²}`` and ``−s c e^{−s r²}`` per replica
    (``s = 1/(2ℓ²)``), log ``−½ log r²`` and ``−½/r²``. A block for another number of replicas is refused,
    naming ``c``."""
    c = torch.tensor([1.5, -0.5], dtype=F64)
    ell = torch.tensor([0.5, 2.0], dtype=F64)
    g = GaussianInteraction(c, ell)
    r2 = torch.rand(2, 3, 4, generator=torch.Generator().manual_seed(0), dtype=F64) + 0.1
    s = 1 / (2 * ell**2)
    assert close(g.psi(r2), c[:, None, None] * torch.exp(-s[:, None, None] * r2))
    assert close(g.dpsi(r2), -s[:, None, None] * c[:, None, None] * torch.exp(-s[:, None, None] * r2))
    with pytest.raises(ValueError, match=r"^c has 2 per-replica values, but the state has B = 3"):
        g.psi(torch.ones(3, 1, 1, dtype=F64))
    log = LogInteraction()
    assert close(log.psi(r2), -0.5 * np.log(r2.numpy()))
    assert close(log.dpsi(r2), -0.5 / r2.numpy())


def test_gaussian_interaction_parameters_and_refusals_name_the_argument():
    """``parameters()`` maps the documented names to the values given; a NaN width is refused naming
    ``length``; an unknown backend is refused at construction (also for the Riesz kernel, which passes its
    backend on)."""
    g = GaussianInteraction(1.5, 0.7)
    assert g.parameters() == {"c": 1.5, "length": 0.7}
    with pytest.raises(ValueError, match=r"^length must be finite, got nan$"):
        GaussianInteraction(1.0, float("nan"))
    with pytest.raises(ValueError, match=r"backend must be one of \['auto', 'torch', 'keops'\], got 'bogus'"):
        RieszInteraction(1.0, backend="bogus")
    assert RieszInteraction(1.0, backend="torch").backend == "torch"
    assert RieszInteraction(1.0).backend == "auto"


def test_self_pair_probe_evaluates_the_kernel_at_one_zero():
    """``self_pair=None`` probes ``ψ(0)``, ``ψ'(0)`` on a single ``(1, 1, 1)`` zero: a smooth kernel with
    weights over the target particles (``w_j e^{−r²}``, ``w`` of shape ``(M,)`` broadcasting over a block's
    last axis) is finite there, so the self-pair stays in; the energy equals the double loop
    ``1/M Σ_j w_j e^{−|x_i − x_j|²}`` with ``j = i`` included."""
    w = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    inter = RadialInteraction(lambda r2: w * torch.exp(-r2), lambda r2: -w * torch.exp(-r2), backend="torch")
    assert inter.self_pair is True
    x = cloud(B=2, M=3, seed=4)
    xn = x.numpy()
    expected = np.zeros((2, 3))
    for b in range(2):
        for i in range(3):
            for j in range(3):
                expected[b, i] += float(w[j]) * math.exp(-((xn[b, i] - xn[b, j]) ** 2).sum()) / 3
    assert close(inter.energy(x), expected)


def test_singular_kernels_leave_keops_for_torch_when_auto_means_keops(monkeypatch, fake_keops):
    """On a machine where ``"auto"`` means KeOps (emulated: KeOps "installed" by the dense stand-in and
    ``resolve_backend`` mapping ``"auto"`` to ``"keops"``, as on a GPU), a kernel without its self-pair (log,
    Riesz) must run on torch (KeOps cannot leave the pairs ``j = i`` out: asked to, ``radial_sum`` refuses)
    and still give the double loop's numbers; ``backend_used`` says ``"torch"``."""
    real = pw.resolve_backend

    def auto_is_keops(backend, d, device="cpu"):
        return "keops" if backend == "auto" else real(backend, d, device)

    monkeypatch.setattr(pot, "resolve_backend", auto_is_keops)
    monkeypatch.setattr(pw, "resolve_backend", auto_is_keops)
    x = cloud(B=3, M=6, seed=5)
    for name in ("log_per_replica", "riesz"):
        make, W, gradW = CASES[name]
        inter = make()
        energy, grad = np_pairs(x, W, gradW, self_pair=False)
        assert close(inter.energy(x), energy, rtol=1e-9)
        assert close(inter.mean_field_grad(x), grad, rtol=1e-9)
        assert inter.backend_used == "torch"


# --------------------------------------------------------------------------------------------------------
# pairwise


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


# --------------------------------------------------------------------------------------------------------
# systems


def np_drift_qq(x, a, k):
    """``−a x − k (x − x̄)`` per replica (numpy), ``a``, ``k`` numbers or ``(B,)``."""
    xn = x.numpy()
    B = xn.shape[0]
    av = np.array([per(a, b) for b in range(B)])[:, None, None]
    kv = np.array([0.0 if k is None else per(k, b) for b in range(B)])[:, None, None]
    return -av * xn - kv * (xn - xn.mean(1, keepdims=True))


AFFINE = {
    "a_number_no_k": (1.5, None),
    "a_number_k_number": (1.5, 0.6),
    "a_per_replica_no_k": (torch.tensor([0.5, 1.0, 2.0], dtype=F64), None),
    "a_per_replica_k_number": (torch.tensor([0.5, 1.0, 2.0], dtype=F64), 0.6),
    "a_number_k_per_replica": (1.5, torch.tensor([0.3, -0.2, 1.1], dtype=F64)),
    "a_per_replica_k_per_replica": (torch.tensor([0.5, 1.0, 2.0]), torch.tensor([0.3, -0.2, 1.1])),
    "a_per_replica_k_zero": (torch.tensor([0.5, 1.0, 2.0], dtype=F64), 0.0),
}


@pytest.mark.parametrize("name", list(AFFINE))
def test_affine_euler_update_is_the_hand_step_written_into_x(name):
    """The fused Euler move of ``V = a/2|x|²``, ``W = k/2|z|²`` equals ``x + dt·(−a x − k(x − x̄)) + noise``
    (numpy, replica ``b`` with ``a[b]``, ``k[b]``; B = 3 ≠ M = 5), written into ``x`` (the one pass over the
    state), and ``noise`` is not modified."""
    a, k = AFFINE[name]
    system = MeanFieldLangevin(Quadratic(a), None if k is None else QuadraticInteraction(k), beta=0.3)
    x, noise = cloud(3, 5, 2, seed=20), cloud(3, 5, 2, seed=21)
    x_before, noise_before = x.clone(), noise.clone()
    expected = x_before.numpy() + 0.1 * np_drift_qq(x_before, a, k) + noise_before.numpy()
    out = system.euler_update_(0.0, x, 0.1, noise)
    assert close(out, expected)
    assert out.data_ptr() == x.data_ptr() and close(x, expected)
    assert torch.equal(noise, noise_before)


def test_generic_euler_update_and_its_messages():
    """``ParticleSystem.euler_update_``: ``x + dt·b(t, x) + noise`` for a custom drift (numpy), the drift
    called with ``t``; a drift of the wrong shape or type is refused, naming what it returned."""
    x, noise = cloud(2, 3, 1, seed=22), cloud(2, 3, 1, seed=23)
    system = SDE(lambda t, x: -t * x**3, lambda t, x: 0.0, noise="additive")
    expected = x.numpy() + 0.25 * (-2.0 * x.numpy() ** 3) + noise.numpy()
    assert close(system.drift(2.0, x), -2.0 * x.numpy() ** 3)
    assert close(system.euler_update_(2.0, x.clone(), 0.25, noise), expected)
    bad = SDE(lambda t, x: x[..., 0], lambda t, x: 0.0, noise="additive")
    with pytest.raises(
        ValueError,
        match=r"^drift\(t, x\) must return a tensor of the state's shape \(2, 3, 1\), got \(2, 3\)$",
    ):
        bad.euler_update_(0.0, x.clone(), 0.1, noise)
    number = SDE(lambda t, x: 1.0, lambda t, x: 0.0, noise="additive")
    with pytest.raises(ValueError, match=r"of the state's shape \(2, 3, 1\), got float$"):
        number.euler_update_(0.0, x.clone(), 0.1, noise)


def test_mean_field_langevin_drift_energy_and_parameters():
    """``MeanFieldLangevin(DoubleWell, Gaussian)``: drift ``−∇V − 1/M Σ_j ∇W`` and the energy per replica
    ``1/M Σ_i [V(x_i) + ½·1/M Σ_j W(x_i − x_j)]`` against numpy (double loop); ``parameters()`` names every
    value; the projection given is kept."""
    inter = GaussianInteraction(1.5, 0.7)
    sphere = Sphere()
    system = MeanFieldLangevin(DoubleWell(2.0, 0.5), inter, beta=0.25, projection=sphere)
    x = cloud(3, 6, 2, seed=24)
    xn = x.numpy()
    _, W, gradW = CASES["gaussian_numbers"]
    pair_energy, pair_grad = np_pairs(x, W, gradW)
    assert close(system.drift(0.0, x), -(2.0 * xn**3 - 0.5 * xn) - pair_grad)
    V = (2.0 * xn**4 / 4 - 0.5 * xn**2 / 2).sum(-1)
    assert close(system.energy(x), (V + 0.5 * pair_energy).mean(1))
    assert system.parameters() == {
        "confinement quartic": 2.0,
        "confinement quadratic": 0.5,
        "interaction c": 1.5,
        "interaction length": 0.7,
        "beta": 0.25,
    }
    assert system.projection is sphere


def test_per_replica_temperature_diffusion_and_replica_checks():
    """A per-replica β gives ``σ = sqrt(2β_b)`` as ``(B, 1, 1)``; ``check_state`` accepts B matching replicas
    and refuses another B naming the parameter; the diffusion refuses another B naming ``beta``."""
    beta = torch.tensor([0.5, 1.0, 2.0], dtype=F64)
    system = MeanFieldLangevin(Quadratic(torch.tensor([1.0, 2.0, 3.0])), QuadraticInteraction(0.5), beta=beta)
    x = cloud(3, 4, 2)
    sigma = system.diffusion(0.0, x)
    assert close(sigma, np.sqrt(2 * beta.numpy())[:, None, None])
    assert torch.equal(system.parameters()["beta"], beta)
    system.check_state(x)
    with pytest.raises(ValueError, match=r"^confinement a has 3 per-replica values, but the state has B = 2"):
        system.check_state(cloud(2, 4, 2))
    with pytest.raises(ValueError, match=r"^beta has 3 per-replica values, but the state has B = 2"):
        MeanFieldLangevin(Quadratic(), beta=beta).diffusion(0.0, cloud(2, 4, 2))


def test_temperature_schedules_and_refusals():
    """A callable β gives ``σ(t) = sqrt(2β(t))`` at the time asked; a schedule's dict is rebuilt; a negative
    number is refused with the check's message."""
    system = MeanFieldLangevin(Quadratic(), beta=lambda t: 0.5 + t)
    x = cloud()
    assert system.diffusion(2.0, x) == pytest.approx(math.sqrt(5.0), rel=1e-15)
    assert system.temperature(1.0) == pytest.approx(1.5)
    rebuilt = MeanFieldLangevin(Quadratic(), beta=Constant(0.5).to_dict())
    assert rebuilt.diffusion(0.0, x) == pytest.approx(1.0, rel=1e-15)
    assert MeanFieldLangevin(Quadratic(), beta=0.125).diffusion(0.0, x) == pytest.approx(0.5, rel=1e-15)
    with pytest.raises(ValueError, match=r"^beta must be ≥ 0, got -1.0$"):
        MeanFieldLangevin(Quadratic(), beta=-1.0)


def test_sde_brownian_dim_is_checked_by_name():
    """``SDE(noise="general")`` refuses ``brownian_dim = 0`` naming ``brownian_dim``."""
    with pytest.raises(ValueError, match=r"^brownian_dim must be ≥ 1, got 0$"):
        SDE(lambda t, x: x, lambda t, x: x, noise="general", brownian_dim=0)


# --------------------------------------------------------------------------------------------------------
# simulate and the Euler–Maruyama solver


def test_one_euler_step_is_theta_minus_eta_grad_plus_sqrt_2_beta_eta_xi():
    """One step of ``simulate`` on ``MeanFieldLangevin(Quadratic(a), beta)`` with pre-drawn increments
    ``dW = sqrt(η)·ξ``: ``θ − η·aθ + sqrt(2βη)·ξ`` (numpy). Negative control: the step without the noise."""
    a, beta, eta = 1.5, 0.3, 0.01
    x0 = cloud(2, 4, 2, seed=25)
    dW = cloud(2, 4, 2, seed=26)[None] * math.sqrt(eta)  # (1, B, M, d)
    traj = simulate(
        MeanFieldLangevin(Quadratic(a), beta=beta), x0, t1=eta, dt=eta, brownian=BrownianIncrements(dW, eta)
    )
    xi = dW[0].numpy() / math.sqrt(eta)
    expected = x0.numpy() - eta * a * x0.numpy() + math.sqrt(2 * beta * eta) * xi
    assert close(traj.final, expected)
    assert not close(traj.final, x0.numpy() - eta * a * x0.numpy())


def hand_euler(x0, drift, sigma, xis, t0, dt):
    """``x_{n+1} = x_n + dt·b(t_n, x_n) + σ(t_n)·sqrt(dt)·ξ_n`` (numpy; ``sigma`` a function of t)."""
    x, states = np.array(x0, dtype=np.float64), []
    states.append(x.copy())
    for n, xi in enumerate(xis):
        t = t0 + n * dt
        x = x + dt * drift(t, x) + sigma(t) * math.sqrt(dt) * xi
        states.append(x.copy())
    return states


def test_simulate_with_a_seed_is_the_hand_loop_on_the_seeded_draws():
    """``simulate(..., generator=7)``: the saved states are the hand Euler loop driven by ``ξ_n`` drawn in
    order from ``torch.Generator().manual_seed(7)``; times ``t0 + n·dt``, steps, ``dt``, the solver's name and
    the seed are recorded as given."""
    a, beta, t0, dt = 0.8, 0.2, 0.5, 0.25
    x0 = cloud(2, 4, 2, seed=27)
    traj = simulate(
        MeanFieldLangevin(Quadratic(a), beta=beta),
        x0,
        t0=t0,
        t1=t0 + 6 * dt,
        dt=dt,
        save_every=2,
        generator=7,
    )
    g = torch.Generator().manual_seed(7)
    xis = [torch.empty(2, 4, 2, dtype=F64).normal_(0.0, 1.0, generator=g).numpy() for _ in range(6)]
    states = hand_euler(x0.numpy(), lambda t, x: -a * x, lambda t: math.sqrt(2 * beta), xis, t0, dt)
    assert close(traj.states, np.stack(states[::2]), rtol=1e-12, atol=1e-13)
    assert torch.equal(traj.steps, torch.tensor([0, 2, 4, 6]))
    assert close(traj.times, [0.5, 1.0, 1.5, 2.0])
    assert (traj.dt, traj.solver, traj.seed) == (0.25, "euler", 7)


def test_simulate_refusals_name_the_argument():
    """Bad arguments are refused with their messages: a 2-D ``x0`` (the layout named), more than 2^53 steps,
    a ``brownian`` that is not a noise source (its type named)."""
    system = MeanFieldLangevin(Quadratic())
    x0 = cloud()
    with pytest.raises(
        ValueError,
        match=r"^x0 must have shape \(B, M, d\): replicas, particles, dimensions \(use x0\[None\] for one "
        r"replica\) \(3 dimensions\), got shape \(5, 2\)$",
    ):
        simulate(system, x0[0], t1=1.0, dt=0.5)
    with pytest.raises(
        ValueError, match=r"steps: more than 2\^53, where the step times t0 \+ n·dt are no longer"
    ):
        simulate(system, x0, t1=1.0, dt=1e-17)
    with pytest.raises(
        TypeError, match=r"^brownian must be a meanfield\.stepping\.brownian\.BrownianIncrements .*got str$"
    ):
        simulate(system, x0, t1=1.0, dt=0.5, brownian="increments")


def test_rademacher_noise_moves_every_coordinate_by_exactly_sigma_sqrt_dt():
    """``noise="rademacher"`` with Euler–Maruyama: with no drift, one step moves every coordinate by exactly
    ``±sqrt(2β)·sqrt(dt)``, both signs occurring (the ±1 increments)."""
    x0 = cloud(2, 8, 2, seed=28)
    traj = simulate(
        MeanFieldLangevin(Quadratic(0.0), beta=0.5), x0, t1=0.25, dt=0.25, noise="rademacher", generator=1
    )
    step = (traj.final - x0).numpy()
    assert np.allclose(np.abs(step), 0.5, rtol=1e-14)
    assert (step > 0).any() and (step < 0).any()


def test_progress_bar_is_labelled_with_the_solver(capsys):
    """``progress=True`` shows a bar labelled ``simulate[euler]`` on stderr."""
    simulate(MeanFieldLangevin(Quadratic()), cloud(), t1=0.5, dt=0.25, generator=0, progress=True)
    assert "simulate[euler]" in capsys.readouterr().err


def exploding(t0, dt, jump):
    """Deterministic (σ = 0) dynamics from ``x0 = 1``: still for steps 0–2, ``x ← (1 + jump)x`` at step 3,
    ``x ← x + dt·(x·∞) = ∞`` at step 4. So the state is finite up to step 4 (``1 + jump``) and first non-finite
    at step 5."""

    def drift(t, x):
        n = round((t - t0) / dt)
        if n == 3:
            return x * (jump / dt)
        if n >= 4:
            return x * math.inf
        return torch.zeros_like(x)

    return SDE(drift, lambda t, x: 0.0, noise="additive")


@pytest.mark.parametrize("check_every", [64, 2], ids=["before_the_first_check", "after_checks"])
def test_a_blow_up_is_traced_to_its_first_step_with_blow_up_advice(check_every):
    """A state that explodes at step 5 (hand-computed: ``exploding``) raises ``NonFiniteStateError`` naming
    step 5 at ``t = t0 + 5dt``, the last finite step 4, and the blow-up advice (it grew to 1e200 from 1),
    whether the failure lies before the first check stop or after several; the trajectory keeps ``x0``."""
    t0, dt = 1.0, 0.5
    x0 = torch.ones(2, 3, 1, dtype=F64)
    with pytest.raises(NonFiniteStateError) as info:
        simulate(
            exploding(t0, dt, 1e200 - 1),
            x0,
            t0=t0,
            t1=t0 + 10 * dt,
            dt=dt,
            generator=0,
            check_every=check_every,
        )
    error = info.value
    assert (error.step, error.last_finite_step, error.time) == (5, 4, t0 + 5 * dt)
    assert "at step 5 (t = 3.5), the first non-finite step; it was finite at step 4 (t = 3)" in str(error)
    assert "The state grew to |x| = 1e+200 by step 4 (it started at 1)" in str(error)
    assert torch.equal(error.trajectory.states, x0[None])


def test_a_state_just_past_the_growth_threshold_is_called_a_blow_up():
    """``GROWTH = 1e8`` times ``max(1, max|x0|)``: from ``x0 = 1``, a state of 1.5e8 before the non-finite
    step is a blow-up (not "a singular drift", although the drift there is infinite too)."""
    t0, dt = 0.0, 0.5
    with pytest.raises(
        NonFiniteStateError, match=r"The state grew to \|x\| = 1\.5e\+08 by step 4 \(it started at 1\)"
    ):
        simulate(exploding(t0, dt, 1.5e8 - 1), torch.ones(1, 2, 1, dtype=F64), t1=5.0, dt=dt, generator=0)


def test_a_source_that_cannot_be_replayed_names_the_bracketing_stops():
    """Noise from a source ``simulate`` cannot replay (a subclass of ``GaussianNoise``): the error names the
    check stop where it was found, ``by step 6 (t = t0 + 6dt = 4)``, and the last finite stop 4."""

    class Drawn(GaussianNoise):
        pass

    t0, dt = 1.0, 0.5
    source = Drawn((2, 3, 1), dt, torch.Generator().manual_seed(0), F64, "cpu")
    with pytest.raises(NonFiniteStateError) as info:
        simulate(
            exploding(t0, dt, 1e200),
            torch.ones(2, 3, 1, dtype=F64),
            t0=t0,
            t1=6.0,
            dt=dt,
            brownian=source,
            check_every=2,
        )
    assert (info.value.step, info.value.last_finite_step) == (6, 4)
    assert "by step 6 (t = 4); it was finite at step 4 (t = 3)" in str(info.value)


def test_lazy_checks_of_an_accelerator_find_the_same_first_step(monkeypatch):
    """With the finiteness flags read lazily (as on an accelerator: the set of eagerly checked device types
    emptied), a finite run equals the eager one, and the blow-up is found at the first check stop after it
    (``found when checked after step 6``) and traced to step 5."""
    monkeypatch.setattr(sim_mod, "_EAGER_CHECKS", frozenset())
    system = MeanFieldLangevin(Quadratic(0.7), beta=0.2)
    x0 = cloud(2, 4, 2, seed=29)
    g = torch.Generator().manual_seed(3)
    xis = [torch.empty(2, 4, 2, dtype=F64).normal_(0.0, 1.0, generator=g).numpy() for _ in range(5)]
    expected = hand_euler(x0.numpy(), lambda t, x: -0.7 * x, lambda t: math.sqrt(0.4), xis, 0.0, 0.1)
    traj = simulate(system, x0, t1=0.5, dt=0.1, generator=3, check_every=2, save_every=1)
    assert close(traj.states, np.stack(expected), rtol=1e-12, atol=1e-13)
    t0, dt = 1.0, 0.5
    with pytest.raises(NonFiniteStateError) as info:
        simulate(
            exploding(t0, dt, 1e200),
            torch.ones(2, 3, 1, dtype=F64),
            t0=t0,
            t1=6.0,
            dt=dt,
            generator=0,
            check_every=2,
        )
    assert (info.value.step, info.value.last_finite_step) == (5, 4)
    assert "(found when checked after step 6) at step 5" in str(info.value)


class _HintSpy(NoiseSource):
    """A noise source that accepts prefetch hints and records them; ``increment(n, s) = s·ξ_n`` from a table."""

    def __init__(self, xi, dt):
        super().__init__(tuple(xi.shape[1:]), dt)
        self.xi, self.asked, self.hints = xi, [], []

    @property
    def prefetches(self):
        return True

    def will_prefetch(self, n):
        self.asked.append(n)
        return True

    def prefetch(self, n, scale=1.0):
        self.hints.append((n, scale))

    def increment(self, n, scale=1.0):
        return self.xi[n] * scale


def test_euler_hints_the_next_step_and_its_scale_to_a_prefetching_source():
    """Additive noise with ``σ(t, x) = (1 + t)/sqrt(M)`` (a number): within each segment (saves at 0, 3, 6)
    the stepper hints step ``n + 1`` with its scale ``σ(t_{n+1})·sqrt(dt)`` (hand-computed), never past the
    segment's end; the states are the hand Euler loop on the same ``ξ``."""
    dt, M = 0.25, 4
    xi = cloud(6, 2 * M, 1, seed=30).reshape(6, 2, M, 1)
    spy = _HintSpy(xi, dt)
    system = SDE(lambda t, x: -x, lambda t, x: (1.0 + t) / math.sqrt(x.shape[1]), noise="additive")
    x0 = cloud(2, M, 1, seed=31)
    traj = simulate(system, x0, t1=6 * dt, dt=dt, brownian=spy, save_every=3)
    assert spy.asked == [1, 2, 4, 5]
    expected_hints = [(n, (1.0 + n * dt) / 2.0 * 0.5) for n in (1, 2, 4, 5)]
    assert [n for n, _ in spy.hints] == [n for n, _ in expected_hints]
    assert np.allclose([s for _, s in spy.hints], [s for _, s in expected_hints], rtol=1e-15)
    states = hand_euler(x0.numpy(), lambda t, x: -x, lambda t: (1.0 + t) / 2.0, xi.numpy(), 0.0, dt)
    assert close(traj.states, np.stack(states[::3]))


def test_diagonal_noise_step_and_the_bad_sigma_message():
    """Diagonal noise: ``x + dt·b + σ(t, x)·dW`` elementwise with the pre-drawn ``dW`` (numpy, three steps,
    ``dt = 0.04``); a σ that does not broadcast is refused, naming the allowed and the returned shapes."""
    dt = 0.04
    x0 = cloud(2, 3, 2, seed=32)
    dW = cloud(3 * 2, 3, 2, seed=33).reshape(3, 2, 3, 2) * math.sqrt(dt)
    system = SDE(lambda t, x: -(1.0 + t) * x, lambda t, x: 0.3 + 0.1 * x**2, noise="diagonal")
    traj = simulate(system, x0, t1=3 * dt, dt=dt, brownian=BrownianIncrements(dW, dt), save_every=1)
    x = x0.numpy()
    for n in range(3):
        x = x + dt * (-(1.0 + n * dt) * x) + (0.3 + 0.1 * x**2) * dW[n].numpy()
        assert close(traj.states[n + 1], x)
    bad = SDE(lambda t, x: -x, lambda t, x: torch.ones(5, dtype=F64), noise="diagonal")
    with pytest.raises(
        ValueError,
        match=r"^diffusion\(t, x\) must return σ of shape \(2, 3, 2\) or one that broadcasts to it, got \(5,\)$",
    ):
        simulate(bad, x0, t1=dt, dt=dt, brownian=BrownianIncrements(dW[:1], dt))


def test_general_noise_step_is_sigma_times_dw_per_particle():
    """General noise, ``m = 3`` Brownian motions per particle (M = 4 ≠ m): one step is
    ``x + dt·b + Σ_k σ_{dk} dW_k`` per particle (numpy einsum over the pre-drawn ``dW``)."""
    dt, B, M, d, m = 0.1, 2, 4, 2, 3
    x0 = cloud(B, M, d, seed=34)
    S = torch.randn(B, M, d, m, generator=torch.Generator().manual_seed(35), dtype=F64)
    dW = torch.randn(1, B, M, m, generator=torch.Generator().manual_seed(36), dtype=F64) * math.sqrt(dt)
    system = SDE(lambda t, x: -x, lambda t, x: S * (1.0 + x[..., :1, None]), noise="general", brownian_dim=m)
    traj = simulate(system, x0, t1=dt, dt=dt, brownian=BrownianIncrements(dW, dt))
    x = x0.numpy()
    sigma = S.numpy() * (1.0 + x[..., :1, None])
    expected = x - dt * x + np.einsum("bmdk,bmk->bmd", sigma, dW[0].numpy())
    assert close(traj.final, expected)


def test_projected_step_lands_on_the_sphere_at_the_normalised_euler_point():
    """With ``Sphere()``: the normalised Euler point ``y/|y|``, ``y = θ − η aθ + sqrt(2βη) ξ`` (numpy)."""
    eta, a, beta = 0.05, 0.5, 0.2
    x0 = cloud(2, 3, 3, seed=37)
    x0 = x0 / x0.norm(dim=-1, keepdim=True)
    dW = cloud(2, 3, 3, seed=38)[None] * math.sqrt(eta)
    system = MeanFieldLangevin(Quadratic(a), beta=beta, projection=Sphere())
    traj = simulate(system, x0, t1=eta, dt=eta, brownian=BrownianIncrements(dW, eta))
    y = x0.numpy() * (1 - eta * a) + math.sqrt(2 * beta) * dW[0].numpy()
    assert close(traj.final, y / np.linalg.norm(y, axis=-1, keepdims=True))


class _GaussianOnly(EulerMaruyama):
    """A solver for additive noise that needs Gaussian increments (the checks of the base class)."""

    name = "gaussian_only"
    strong_orders = {"additive": 1.0, "diagonal": None, "general": None}
    needs_gaussian = True


def test_solver_checks_orders_and_repr():
    """``Solver.check``: the noise types a solver declares, the Gaussian requirement, each refused with its
    message (and accepted otherwise); the declared orders and ``repr``."""
    solver = _GaussianOnly()
    additive = MeanFieldLangevin(Quadratic())
    diagonal = SDE(lambda t, x: x, lambda t, x: x, noise="diagonal")
    gaussian = GaussianNoise((1, 2, 1), 0.1, torch.Generator(), F64, "cpu")
    signs = RademacherNoise((1, 2, 1), 0.1, torch.Generator(), F64, "cpu")
    solver.check(additive, gaussian)
    EulerMaruyama().check(diagonal, signs)
    with pytest.raises(
        ValueError,
        match=r"^solver 'gaussian_only' needs noise of type \['additive'\], but this system's noise is "
        r"'diagonal'; use solver='euler' \(any noise type\)$",
    ):
        solver.check(diagonal, gaussian)
    with pytest.raises(
        ValueError,
        match=r"^solver 'gaussian_only' needs Gaussian increments; noise='rademacher' is for the native "
        r"Euler–Maruyama solver only \(weak order 1\)$",
    ):
        solver.check(additive, signs)
    euler = EulerMaruyama()
    assert (euler.strong_order("additive"), euler.strong_order("diagonal"), euler.weak_order("general")) == (
        1.0,
        0.5,
        1.0,
    )
    assert repr(euler) == "EulerMaruyama()"


# --------------------------------------------------------------------------------------------------------
# kinetic


def test_pair_positions_velocities_and_their_messages():
    """``pair(x, v)`` is ``(x, v)`` on the last axis (numpy concatenate), ``pair(x)`` zero velocities;
    ``positions``/``velocities`` split it back at ``d``; bad inputs are refused with their messages."""
    x, v = cloud(2, 3, 2, seed=39), cloud(2, 3, 2, seed=40)
    z = pair(x, v)
    assert close(z, np.concatenate([x.numpy(), v.numpy()], -1))
    assert close(pair(x), np.concatenate([x.numpy(), np.zeros((2, 3, 2))], -1))
    assert close(positions(z), x.numpy()) and close(velocities(z), v.numpy())
    with pytest.raises(TypeError, match=r"^x must be a tensor \(B, M, d\), got str$"):
        pair("x")
    with pytest.raises(
        ValueError, match=r"^velocities must have the positions' shape \(2, 3, 2\), got \(2, 3, 1\)$"
    ):
        pair(x, v[..., :1])
    with pytest.raises(ValueError, match=r"shape \(2, 3, 2\), got list$"):
        pair(x, [1.0, 2.0])
    with pytest.raises(
        ValueError, match=r"got shape \(2, 3, 3\) \(make one with meanfield\.drift\.phase_space\.pair\(x, v\)\)$"
    ):
        positions(torch.zeros(2, 3, 3))


def test_kinetic_drift_diffusion_and_energy_equal_the_hand_formulas():
    """``z = (x, v)``: drift ``(v, −a x − k(x − x̄) − γ v)``, diffusion ``(0, …, 0, s, …, s)`` with
    ``s = sqrt(2γβ)``, energy ``1/M Σ_i [a/2|x_i|² + ½·1/M Σ_j k/2|x_i − x_j|² + |v_i|²/2]`` (numpy)."""
    a, k, gamma, beta = 1.3, 0.4, 0.7, 0.6
    system = KineticMeanFieldLangevin(Quadratic(a), QuadraticInteraction(k), friction=gamma, beta=beta)
    x, v = cloud(2, 5, 2, seed=41), cloud(2, 5, 2, seed=42)
    z = pair(x, v)
    xn, vn = x.numpy(), v.numpy()
    force = -a * xn - k * (xn - xn.mean(1, keepdims=True))
    assert close(system.drift(0.0, z), np.concatenate([vn, force - gamma * vn], -1))
    s = math.sqrt(2 * gamma * beta)
    assert close(system.diffusion(0.0, z), [0.0, 0.0, s, s])
    pair_energy, _ = np_pairs(x, lambda b, zz: k / 2 * zz @ zz, lambda b, zz: k * zz)
    energy = (a / 2 * (xn**2).sum(-1) + 0.5 * pair_energy + 0.5 * (vn**2).sum(-1)).mean(1)
    assert close(system.energy(z), energy)
    assert system.noise_shape((2, 5, 4)) == (2, 5, 4)
    with pytest.raises(ValueError, match=r"got shape \(2, 5, 3\)"):
        system.noise_shape((2, 5, 3))


def test_kinetic_temperature_default_schedule_and_refusals():
    """The default β is 1 (``σ_v = sqrt(2γ)``); a scheduled β is read at the step's time; a per-replica β
    is refused with its message."""
    z = pair(cloud(1, 2, 1))
    default = KineticMeanFieldLangevin(Quadratic(), friction=2.0)
    assert default.temperature(0.0) == 1.0
    assert close(default.diffusion(0.0, z), [0.0, 2.0])
    scheduled = KineticMeanFieldLangevin(Quadratic(), friction=0.5, beta=lambda t: 0.2 + t)
    assert close(scheduled.diffusion(1.0, z), [0.0, math.sqrt(2 * 0.5 * 1.2)])
    with pytest.raises(
        TypeError,
        match=r"^KineticMeanFieldLangevin takes one temperature for every replica: beta must be a number or a "
        r"schedule, got Tensor$",
    ):
        KineticMeanFieldLangevin(Quadratic(), beta=torch.tensor([1.0, 2.0]))


def test_kinetic_diffusion_lives_on_the_state_device():
    """With a default device other than the state's (``torch.device("meta")``), ``σ`` is made on the state's
    device with the hand values."""
    system = KineticMeanFieldLangevin(Quadratic(), friction=0.5, beta=2.0)
    z = pair(cloud(1, 2, 2))
    with torch.device("meta"):
        sigma = system.diffusion(0.0, z)
    assert sigma.device.type == "cpu"
    assert close(sigma, [0.0, 0.0, math.sqrt(2.0), math.sqrt(2.0)])


def test_kinetic_check_state_checks_the_pairing_and_the_replicas():
    """``check_state``: an odd last axis is refused; per-replica ``a`` for 3 replicas accepts B = 3 and
    refuses B = 2, naming the parameter."""
    system = KineticMeanFieldLangevin(Quadratic(torch.tensor([1.0, 2.0, 3.0])))
    with pytest.raises(ValueError, match=r"^a kinetic state has shape \(B, M, 2d\)"):
        system.check_state(torch.zeros(3, 2, 3))
    system.check_state(pair(cloud(3, 2, 2)))
    with pytest.raises(ValueError, match=r"^confinement a has 3 per-replica values, but the state has B = 2"):
        system.check_state(pair(cloud(2, 2, 2)))


def test_kinetic_drift_uses_the_force_at_the_step_time():
    """A subclass with a time-dependent force ``F(t, x) = −a x + t`` (the splittings call ``force(t, x)``
    too): the drift's velocity part is ``F(t, x) − γ v`` at the ``t`` asked (numpy)."""

    class Driven(KineticMeanFieldLangevin):
        def force(self, t, x):
            return super().force(t, x) + t

    system = Driven(Quadratic(2.0), friction=0.5)
    x, v = cloud(1, 3, 1, seed=43), cloud(1, 3, 1, seed=44)
    out = system.drift(2.0, pair(x, v))
    assert close(out[..., 1:], -2.0 * x.numpy() + 2.0 - 0.5 * v.numpy())


@pytest.mark.parametrize(
    "make", [lambda: LogInteraction(1.3), lambda: RieszInteraction(1.0, 0.7)], ids=["log", "riesz"]
)
def test_singular_interaction_energy_has_a_finite_autograd_gradient(make):
    """For the singular kernels (the self-pair left out) autograd of the summed energy is finite and twice the
    documented drift, ``∂/∂x_i Σ_k energy_k = 2/M Σ_{j≠i} ∇W(x_i − x_j)`` (several blocks). Before the fix φ was
    applied to the zero self-distance and masked after, so the backward pass met 0·φ'(0) = NaN everywhere.
    Negative control: the drift with the self-pair's factor 2 dropped (the plain autograd) differs."""
    inter = make()
    inter.max_elements = 3 * 7
    x = cloud(B=3, M=7, seed=4)
    xg = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(inter.energy(xg).sum(), xg)
    assert torch.isfinite(auto).all()
    assert close(inter.mean_field_grad(x), 0.5 * auto, rtol=1e-9, atol=1e-11)
    assert not close(inter.mean_field_grad(x), auto, rtol=1e-3, atol=1e-6)
