"""Value tests for the dynamics foundations (issue 25, held-out mutants): per-replica parameters
(``meanfield._replicas``), the potentials' kernels, construction and replica checks
(``meanfield.drift.potentials``), the annealing schedules (``meanfield.drift.schedules``), the paired kinetic state
(``meanfield.drift.phase_space``), the Euler–Maruyama prefetch scale, the kinetic splittings' stepper, the torchsde
adapter (``meanfield.stepping.solvers.*``), pre-drawn Brownian increments (``meanfield.stepping.brownian``) and the coupled
step-size runs (``meanfield.stepping.richardson``).

Each test pins a whole function's observable behaviour against an independent answer: a closed form or a
hand loop in numpy (float64), a reference draw from a generator seeded alike, an exact message (anchored
regular expressions, so a message that names the wrong argument fails), or the arguments a spy records
against hand-computed ones. Everything is deterministic (fixed seeds or tabulated increments): the
tolerances are round-off only, no statistics. Negative controls: wrong replica counts, wrong shapes, wrong
types, deliberately wrong formulas that must not match.
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import torch
from _kinetic_steps import splitting_step  # tests/_kinetic_steps.py
from torchsde._core import methods

import meanfield._replicas as rep
from meanfield import simulate
from meanfield.drift.phase_space import KineticMeanFieldLangevin, pair, positions, velocities
from meanfield.drift.potentials import (
    Alignment,
    DoubleWell,
    GaussianInteraction,
    LogInteraction,
    Quadratic,
    QuadraticInteraction,
    RieszInteraction,
)
from meanfield.drift.schedules import Constant, Cosine, Exponential, Linear, _level
from meanfield.drift.systems import SDE, MeanFieldLangevin
from meanfield.stepping.brownian import BrownianIncrements, NoiseSource
from meanfield.stepping.solvers import EulerMaruyama, TorchSDE
from meanfield.stepping.solvers.euler import _EulerStepper
from meanfield.stepping.solvers.splittings import SPLITTINGS, Splitting
from meanfield.stepping.solvers.torchsde import _SystemAsSDE

rich_mod = importlib.import_module("meanfield.stepping.richardson")

F64 = torch.float64
ALLOWED = r"a number or one value per replica: a tensor of shape \(B,\) or \(B, 1, 1\)"


def cloud(B=2, M=4, d=2, seed=0, scale=1.0):
    """A seeded float64 ``(B, M, d)`` state."""
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(B, M, d, generator=g, dtype=F64)


def close(actual, expected, rtol=1e-12, atol=1e-13):
    """``actual`` (tensor or array) equals ``expected`` in shape and within the tolerances (float64)."""
    a = actual.detach().double().numpy() if torch.is_tensor(actual) else np.asarray(actual, np.float64)
    e = expected.detach().double().numpy() if torch.is_tensor(expected) else np.asarray(expected, np.float64)
    return a.shape == e.shape and np.allclose(a, e, rtol=rtol, atol=atol)


def mismatch(name, held=3, B=2):
    """The anchored message of a per-replica parameter of ``held`` values met by a state of ``B`` replicas."""
    return (
        rf"^{name} has {held} per-replica values, but the state has B = {B} replicas \(x has shape "
        r"\(B, M, d\)\): give one value per replica, or a number for all$"
    )


def re_shape(shape):
    """``tuple(shape)`` as a regular expression."""
    return "\\(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + "\\)"


# --------------------------------------------------------------------------------------------------------
# _replicas: _shape_ok, per_replica, at, check_replicas


@pytest.mark.parametrize(
    "shape, ok",
    [
        ((3,), True),
        ((0,), True),
        ((3, 1, 1), True),
        ((1, 1, 1), True),
        ((3, 2, 1), False),
        ((3, 1, 2), False),
        ((3, 2, 2), False),
        ((3, 1), False),
        ((1, 3), False),
        ((3, 1, 1, 1), False),
        ((), False),
    ],
    ids=lambda v: ("x".join(map(str, v)) or "scalar") if isinstance(v, tuple) else str(v),
)
def test_shape_ok_accepts_exactly_b_and_b11(shape, ok):
    """``_shape_ok`` is true for ``(B,)`` and ``(B, 1, 1)`` only (both trailing axes of a 3-d shape must be 1),
    checked against the documented rule for every kind of near miss."""
    assert rep._shape_ok(torch.Size(shape)) is ok


@pytest.mark.parametrize(
    "shape", [(3, 2, 1), (3, 1, 2), (2, 2), (3, 1), (3, 1, 1, 1)], ids=lambda s: "x".join(map(str, s))
)
def test_per_replica_refuses_shapes_other_than_b_and_b11(shape):
    """A tensor of another shape (more than one number) is refused by name with its shape: ``(3, 2, 1)`` is not
    ``(B, 1, 1)`` even though its last axis is 1."""
    with pytest.raises(
        ValueError, match=rf"^kappa must be {ALLOWED}; got a tensor of shape {re_shape(shape)}$"
    ):
        rep.per_replica("kappa", torch.ones(shape))


def test_per_replica_numbers_and_one_element_tensors_are_checked_as_numbers():
    """A number (int, float, numpy scalar) or a one-element tensor comes back as ``float`` (the float32 value
    of a float32 tensor, bit for bit); the checks name the argument and honour ``minimum``/``strict`` for the
    one-element tensor exactly as for a number (``0`` passes ``≥ 0`` and fails ``> 0``)."""
    assert rep.per_replica("a", 3) == 3.0 and type(rep.per_replica("a", 3)) is float
    assert rep.per_replica("a", np.float32(0.5)) == 0.5 and rep.per_replica("a", np.int64(-2)) == -2.0
    one = rep.per_replica("a", torch.tensor([[0.1]]))
    assert type(one) is float and one == float(np.float32(0.1))
    assert rep.per_replica("s", torch.tensor([0.0]), minimum=0.0) == 0.0
    assert rep.per_replica("s", 0.0, minimum=0.0) == 0.0
    for value in (0.0, torch.tensor(0.0), torch.tensor([0.0], dtype=F64)):
        with pytest.raises(ValueError, match=r"^s must be > 0, got 0\.0$"):
            rep.per_replica("s", value, minimum=0.0, strict=True)
    for value in (-1.0, torch.tensor([[-1.0]])):
        with pytest.raises(ValueError, match=r"^a must be ≥ 0, got -1\.0$"):
            rep.per_replica("a", value, minimum=0.0)
    for value in (float("nan"), torch.tensor(float("nan")), np.float64("inf")):
        with pytest.raises(ValueError, match=r"^kappa must be finite, got (nan|inf)$"):
            rep.per_replica("kappa", value)
    with pytest.raises(ValueError, match=r"^w must be > 0\.5, got 0\.5$"):
        rep.per_replica("w", torch.tensor([0.5]), minimum=0.5, strict=True)


@pytest.mark.parametrize(
    "value, got",
    [
        (True, "bool"),
        ("1.0", "str"),
        (None, "NoneType"),
        ({"a": 1.0}, "dict"),
        ({1.0, 2.0}, "set"),
        (["a", "b"], "list"),
        ([[1.0, 2.0], [3.0]], "list"),
        (("x", 1.0), "tuple"),
        (np.array(["a", "b"]), "ndarray"),
    ],
    ids=["bool", "str", "none", "dict", "set", "list_of_str", "ragged_list", "tuple_of_str", "str_array"],
)
def test_per_replica_refuses_what_is_not_numbers_naming_its_type(value, got):
    """Anything that is not a number or an array of numbers is a ``TypeError`` naming the argument and the
    given object's type (also when the conversion to a tensor fails: the type is the caller's, not ``None``)."""
    with pytest.raises(TypeError, match=rf"^beta must be {ALLOWED}, got {got}$"):
        rep.per_replica("beta", value)


@pytest.mark.parametrize("dtype", [torch.bool, torch.complex64])
def test_per_replica_refuses_boolean_and_complex_tensors(dtype):
    """A boolean or complex tensor is a ``TypeError`` naming the dtype."""
    with pytest.raises(
        TypeError, match=rf"^c must be {ALLOWED} of real numbers, got a tensor of dtype {dtype}$"
    ):
        rep.per_replica("c", torch.ones(3, dtype=dtype))


def test_per_replica_values_come_back_as_detached_float64_b():
    """Per-replica values: a list of Python floats is read in float64 (``0.1`` stays ``0.1``, not float32's
    rounding); a float32 array/tensor keeps its float32 values; ``(B, 1, 1)`` becomes ``(B,)``; the result is
    detached and float64. Negative control: the list read in float32 differs from what comes back."""
    got = rep.per_replica("a", [0.1, 0.2, 0.3])
    assert got.dtype == F64 and got.tolist() == [0.1, 0.2, 0.3]
    assert got.tolist() != torch.tensor([0.1, 0.2, 0.3]).double().tolist()
    arr = rep.per_replica("a", np.array([0.1, 0.7], dtype=np.float32))
    assert arr.dtype == F64 and arr.tolist() == [float(np.float32(0.1)), float(np.float32(0.7))]
    t = torch.tensor([1.5, -2.0, 4.0]).reshape(3, 1, 1).requires_grad_(True)
    out = rep.per_replica("k", t)
    assert out.shape == (3,) and out.dtype == F64 and not out.requires_grad
    assert out.tolist() == [1.5, -2.0, 4.0]
    assert rep.per_replica("k", (1, 2)).tolist() == [1.0, 2.0]


@pytest.mark.parametrize(
    "value, kwargs, message",
    [
        (
            [1.0, float("nan"), float("inf")],
            {},
            r"^c\[1\] = nan \(replica 1 of 3\): every value must be finite$",
        ),
        ([1.0, 2.0, float("-inf")], {}, r"^c\[2\] = -inf \(replica 2 of 3\): every value must be finite$"),
        (
            [1.0, -2.123456789, 3.0],
            {"minimum": 0.0},
            r"^c\[1\] = -2\.1234568 \(replica 1 of 3\): every value must be finite and ≥ 0$",
        ),
        (
            [1.0, 0.0],
            {"minimum": 0.0, "strict": True},
            r"^c\[1\] = 0 \(replica 1 of 2\): every value must be finite and > 0$",
        ),
        (
            [0.25, 1.0],
            {"minimum": 0.5},
            r"^c\[0\] = 0\.25 \(replica 0 of 2\): every value must be finite and ≥ 0\.5$",
        ),
        (torch.zeros(0), {}, rf"^c must be {ALLOWED}; got an empty tensor of shape \(0,\)$"),
        (torch.zeros(0, 1, 1), {}, rf"^c must be {ALLOWED}; got an empty tensor of shape \(0, 1, 1\)$"),
    ],
    ids=["nan", "neg_inf", "below_min", "not_above_min", "min_half", "empty", "empty_b11"],
)
def test_per_replica_names_the_first_bad_replica(value, kwargs, message):
    """Non-finite or out-of-range entries: the message names the first bad replica, its value (``.8g``), the
    number of replicas and the rule (``≥``/``>`` and the minimum in ``g`` format); an empty tensor is refused."""
    with pytest.raises(ValueError, match=message):
        rep.per_replica("c", value, **kwargs)


def test_per_replica_accepts_boundary_values_unless_strict():
    """``minimum = 0``: zeros pass non-strictly and come back unchanged; strictly they fail (above)."""
    assert rep.per_replica("c", [0.0, 2.0], minimum=0.0).tolist() == [0.0, 2.0]
    assert rep.per_replica("c", [0.5, 2.0], minimum=0.5).tolist() == [0.5, 2.0]


def test_at_and_check_replicas():
    """``at``: a number is returned as it is; a ``(B,)`` value becomes ``(B, 1, 1)`` (or ``(B, 1)`` with
    ``ndim = 2``) in the state's dtype; a wrong replica count is refused naming the parameter."""
    x = torch.zeros(3, 2, 2, dtype=torch.float32)
    assert rep.at(1.5, x) == 1.5
    v = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    out = rep.at(v, x, "a")
    assert out.shape == (3, 1, 1) and out.dtype == torch.float32 and out.flatten().tolist() == [1.0, 2.0, 3.0]
    assert rep.at(v, x, "a", 2).shape == (3, 1)
    with pytest.raises(ValueError, match=mismatch("a", 3, 2)):
        rep.at(v, torch.zeros(2, 2, 2), "a")
    with pytest.raises(ValueError, match=mismatch("a per-replica parameter", 3, 4)):
        rep.at(v, torch.zeros(4, 2, 2))
    rep.check_replicas("a", 2.0, 7)
    rep.check_replicas("a", v, 3)


# --------------------------------------------------------------------------------------------------------
# potentials


PER3 = torch.tensor([1.0, 2.0, 0.5], dtype=F64)


@pytest.mark.parametrize(
    "make, method, name",
    [
        (lambda: Quadratic(PER3), "energy", "a"),
        (lambda: Quadratic(PER3), "grad", "a"),
        (lambda: DoubleWell(PER3, 1.0), "energy", "quartic"),
        (lambda: DoubleWell(PER3, 1.0), "grad", "quartic"),
        (lambda: DoubleWell(PER3, PER3), "grad", "quartic"),
        (lambda: DoubleWell(2.0, PER3), "energy", "quadratic"),
        (lambda: DoubleWell(2.0, PER3), "grad", "quadratic"),
        (lambda: DoubleWell(1.0, PER3), "grad", "quadratic"),
        (lambda: DoubleWell(1.0, PER3), "energy", "quadratic"),
        (lambda: QuadraticInteraction(PER3), "energy", "k"),
        (lambda: QuadraticInteraction(PER3), "mean_field_grad", "k"),
        (lambda: Alignment(PER3), "energy", "kappa"),
        (lambda: Alignment(PER3), "mean_field_grad", "kappa"),
        (lambda: GaussianInteraction(PER3, 1.0, backend="torch"), "energy", "c"),
        (lambda: GaussianInteraction(PER3, 1.0, backend="torch"), "mean_field_grad", "c"),
        (lambda: LogInteraction(PER3), "energy", "c"),
        (lambda: LogInteraction(PER3), "mean_field_grad", "c"),
        (lambda: RieszInteraction(2.0, PER3), "energy", "c"),
        (lambda: RieszInteraction(2.0, PER3), "mean_field_grad", "c"),
    ],
    ids=[
        "quadratic_energy",
        "quadratic_grad",
        "dw_quartic_energy",
        "dw_quartic_grad",
        "dw_both_grad",
        "dw_quadratic_energy",
        "dw_quadratic_grad",
        "dw_plain_quadratic_grad",
        "dw_plain_quadratic_energy",
        "qi_energy",
        "qi_grad",
        "alignment_energy",
        "alignment_grad",
        "gaussian_energy",
        "gaussian_grad",
        "log_energy",
        "log_grad",
        "riesz_energy",
        "riesz_grad",
    ],
)
def test_a_wrong_replica_count_is_refused_naming_the_parameter(make, method, name):
    """Three per-replica values met by a state of two replicas: every energy/gradient refuses it with the
    message naming the parameter (the first one checked when both are per replica), never a generic name."""
    with pytest.raises(ValueError, match=mismatch(name)):
        getattr(make(), method)(cloud(B=2, M=3))


@pytest.mark.parametrize(
    "quartic, quadratic",
    [(1.0, -0.5), (1.0, PER3), (torch.ones(3, dtype=F64), 0.7), (PER3, 2.0), (3.0, PER3)],
    ids=["plain_negative_c2", "plain_per_replica_c2", "unit_tensor_c4", "per_replica_c4", "c4_3"],
)
def test_double_well_gradient_is_c4_x3_minus_c2_x(quartic, quadratic):
    """``∇V = c₄x³ − c₂x`` per coordinate against numpy with replica ``b``'s values, on both branches (the
    plain ``c₄ = 1`` number and every other ``c₄``); negative control: the formula without ``c₄`` differs
    whenever some ``c₄ ≠ 1``."""
    x = cloud(B=3, M=4, d=2, seed=11, scale=1.5)
    xn = x.numpy()
    c4 = (np.array(quartic.tolist()) if torch.is_tensor(quartic) else np.full(3, quartic))[:, None, None]
    c2 = (np.array(quadratic.tolist()) if torch.is_tensor(quadratic) else np.full(3, quadratic))[
        :, None, None
    ]
    g = DoubleWell(quartic, quadratic).grad(x)
    assert close(g, c4 * xn**3 - c2 * xn)
    assert close(DoubleWell(quartic, quadratic).energy(x), (c4 * xn**4 / 4 - c2 * xn**2 / 2).sum(-1))
    if not np.all(c4 == 1.0):
        assert not close(g, xn**3 - c2 * xn)


def test_quadratic_interaction_energy_equals_the_pair_average():
    """``QuadraticInteraction(k).energy = 1/M Σ_j k/2 |x_i − x_j|²`` (numpy double sum), per replica ``k``
    (including a negative one), and a number ``k``."""
    x = cloud(B=3, M=5, d=2, seed=12)
    xn = x.numpy()
    diff = xn[:, :, None, :] - xn[:, None, :, :]
    pair_sq = (diff**2).sum(-1).mean(2)  # (B, M)
    k = torch.tensor([2.0, -0.5, 1.25], dtype=F64)
    assert close(QuadraticInteraction(k).energy(x), np.array(k.tolist())[:, None] / 2 * pair_sq)
    assert close(QuadraticInteraction(0.3).energy(x), 0.15 * pair_sq)


@pytest.mark.parametrize("s", [0.5, 2.0, 3.0])
def test_riesz_kernels_are_the_documented_psi_and_its_derivative(s):
    """``RieszInteraction(s)`` (``c = 1``): ``ψ(r²) = (r²)^{−s/2}/s`` and ``ψ'(r²) = −½(r²)^{−s/2−1}`` on a
    block of squared distances (numpy); energy and drift against the double loop over ``j ≠ i`` with
    ``W = c|z|^{−s}/s`` and ``∇W = −c z/|z|^{s+2}`` (per-replica ``c``). Negative control: ``ψ`` with the
    ``1/s`` replaced by ``s`` differs for ``s ≠ 1``."""
    inter = RieszInteraction(s)
    r2 = torch.rand(2, 3, 4, generator=torch.Generator().manual_seed(1), dtype=F64) + 0.2
    rn = r2.numpy()
    assert close(inter.psi(r2), rn ** (-s / 2) / s)
    assert not close(inter.psi(r2), rn ** (-s / 2) * s)
    assert close(inter.dpsi(r2), -0.5 * rn ** (-s / 2 - 1))
    c = torch.tensor([0.7, -1.2, 2.0], dtype=F64)
    x = cloud(B=3, M=5, d=3, seed=13)
    xn = x.numpy()
    energy, grad = np.zeros((3, 5)), np.zeros((3, 5, 3))
    for b in range(3):
        for i in range(5):
            for j in range(5):
                if i != j:
                    z = xn[b, i] - xn[b, j]
                    r = math.sqrt(z @ z)
                    energy[b, i] += float(c[b]) * r**-s / s / 5
                    grad[b, i] += -float(c[b]) * z / r ** (s + 2) / 5
    inter = RieszInteraction(s, c, max_elements=3 * 5, backend="torch")
    assert close(inter.energy(x), energy, rtol=1e-10)
    assert close(inter.mean_field_grad(x), grad, rtol=1e-10)
    assert inter.self_pair is False and inter.max_elements == 15 and inter.backend == "torch"
    assert close(inter.parameters()["c"], c) and inter.s == s and type(inter.s) is float
    assert repr(RieszInteraction(s, 0.7)) == f"RieszInteraction(s={float(s)}, c=0.7)"


def test_riesz_construction_refusals():
    """The exponent must be one number ``> 0`` (a per-replica tensor is a ``TypeError`` with its message; a
    one-element tensor counts as a number); ``c`` is checked by name."""
    with pytest.raises(
        TypeError,
        match=r"^RieszInteraction's exponent s must be a number \(it sets the kernel\), not per replica$",
    ):
        RieszInteraction(torch.tensor([1.0, 2.0]))
    assert RieszInteraction(torch.tensor(2.0)).s == 2.0
    with pytest.raises(ValueError, match=r"^s must be > 0, got 0\.0$"):
        RieszInteraction(0.0)
    with pytest.raises(ValueError, match=r"^s must be > 0, got -1\.0$"):
        RieszInteraction(-1.0)
    with pytest.raises(ValueError, match=r"^s must be finite, got nan$"):
        RieszInteraction(float("nan"))
    with pytest.raises(ValueError, match=r"^c must be finite, got inf$"):
        RieszInteraction(1.0, float("inf"))
    with pytest.raises(ValueError, match=r"^c\[1\] = nan \(replica 1 of 2\): every value must be finite$"):
        RieszInteraction(1.0, [1.0, float("nan")])
    with pytest.raises(ValueError, match=r"^max_elements must be ≥ 1, got 0$"):
        RieszInteraction(1.0, max_elements=0)


def test_gaussian_kernel_callables_name_each_parameter():
    """``GaussianInteraction``'s ``ψ = c e^{−s r²}`` and ``ψ' = −s c e^{−s r²}`` (``s = 1/(2ℓ²)``) with one
    parameter per replica and the other a number, against numpy; a block for another number of replicas is
    refused naming the per-replica parameter (``length`` first in ``ψ'`` when both are per replica)."""
    r2 = torch.rand(2, 3, 4, generator=torch.Generator().manual_seed(2), dtype=F64) + 0.1
    rn = r2.numpy()
    c2, ell2 = torch.tensor([1.5, -0.5], dtype=F64), torch.tensor([0.5, 2.0], dtype=F64)
    cases = [(c2, 0.7), (1.5, ell2), (-0.4, 0.7)]
    for c, ell in cases:
        g = GaussianInteraction(c, ell)
        cn = (np.array(c.tolist()) if torch.is_tensor(c) else np.full(2, c))[:, None, None]
        en = (np.array(ell.tolist()) if torch.is_tensor(ell) else np.full(2, ell))[:, None, None]
        s = 1 / (2 * en**2)
        assert close(g.psi(r2), cn * np.exp(-s * rn))
        assert close(g.dpsi(r2), -s * cn * np.exp(-s * rn))
    block3 = torch.ones(3, 1, 1, dtype=F64)
    for c, ell, name in [(c2, 0.7, "c"), (1.5, ell2, "length"), (c2, ell2, "length")]:
        g = GaussianInteraction(c, ell)
        with pytest.raises(ValueError, match=mismatch(name, 2, 3)):
            g.dpsi(block3)
    with pytest.raises(ValueError, match=mismatch("c", 2, 3)):
        GaussianInteraction(c2, 0.7).psi(block3)
    with pytest.raises(ValueError, match=mismatch("length", 2, 3)):
        GaussianInteraction(1.5, ell2).psi(block3)


def test_gaussian_construction_stores_s_and_refuses_bad_widths():
    """``s = 1/(2ℓ²)`` is stored (a number, or per replica); the parameters, ``self_pair``, ``max_elements``,
    ``backend`` and ``repr`` are the ones given; a width that is ``≤ 0`` or whose ``s`` is not finite is
    refused with its message (the first bad replica named)."""
    g = GaussianInteraction(1.5, 0.7, max_elements=100, backend="torch")
    assert g._s == pytest.approx(1 / 0.98, rel=1e-15) and g.c == 1.5 and g.length == 0.7
    assert g.parameters() == {"c": 1.5, "length": 0.7}
    assert g.self_pair is True and g.max_elements == 100 and g.backend == "torch"
    assert repr(g) == "GaussianInteraction(c=1.5, length=0.7)"
    assert GaussianInteraction().backend == "auto" and GaussianInteraction().max_elements == 1 << 22
    ell = torch.tensor([0.5, 2.0], dtype=F64)
    assert close(GaussianInteraction(1.0, ell)._s, [2.0, 0.125])
    msg = r"^GaussianInteraction needs length > 0 with 1/\(2·length²\) finite, got "
    for length, got in [(0.0, "length=0.0"), (-2.0, "length=-2.0")]:
        with pytest.raises(ValueError, match=msg + got + "$"):
            GaussianInteraction(1.0, length)
    for length, got in [
        ([1.0, 0.0, 2.0], r"length\[1\]=0.0"),
        ([1.0, -1.0], r"length\[1\]=-1.0"),
        ([1e-200, 1.0], r"length\[0\]=1e-200"),
    ]:
        with pytest.raises(ValueError, match=msg + got + "$"):
            GaussianInteraction(1.0, length)
    with pytest.raises(ValueError, match=r"^c must be finite, got nan$"):
        GaussianInteraction(float("nan"))
    with pytest.raises(ValueError, match=r"^length must be finite, got inf$"):
        GaussianInteraction(1.0, float("inf"))


# --------------------------------------------------------------------------------------------------------
# schedules


def test_level_default_is_not_strict():
    """``_level(name, value, minimum)`` checks like ``per_replica``: not strict unless asked (``0 ≥ 0``
    passes, ``0 > 0`` fails), a per-replica level comes back as a float64 ``(B,)`` tensor."""
    assert _level("v", 0.0, 0.0) == 0.0
    assert _level("v", [0.0, 1.0], 0.0).tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match=r"^v must be > 0, got 0\.0$"):
        _level("v", 0.0, 0.0, True)
    with pytest.raises(
        ValueError, match=r"^v\[0\] = 0 \(replica 0 of 2\): every value must be finite and > 0$"
    ):
        _level("v", [0.0, 1.0], 0.0, True)
    with pytest.raises(ValueError, match=r"^v must be ≥ 0, got -1\.0$"):
        _level("v", -1.0, 0.0)
    assert _level("v", -1.0) == -1.0 and type(_level("v", 2)) is float


@pytest.mark.parametrize("cls", [Cosine, Linear, Exponential], ids=["cosine", "linear", "exponential"])
def test_anneal_refusals_name_start_end_and_t(cls):
    """Every annealing schedule checks ``start``, ``end`` (finite numbers or per-replica values, named in
    the message), ``T > 0``, and that per-replica ends hold as many values; the levels and ``T`` are kept as
    floats."""
    with pytest.raises(ValueError, match=r"^start must be finite, got nan$"):
        cls(float("nan"), 1.0, 10)
    with pytest.raises(ValueError, match=r"^end must be finite, got inf$"):
        cls(1.0, float("inf"), 10)
    with pytest.raises(
        ValueError, match=r"^start\[1\] = nan \(replica 1 of 2\): every value must be finite$"
    ):
        cls([1.0, float("nan")], 1.0, 10)
    with pytest.raises(ValueError, match=r"^end\[0\] = inf \(replica 0 of 2\): every value must be finite$"):
        cls(1.0, [float("inf"), 1.0], 10)
    with pytest.raises(TypeError, match=rf"^start must be {ALLOWED}, got str$"):
        cls("1", 1.0, 10)
    with pytest.raises(ValueError, match=r"^T \(the length of the schedule\) must be > 0, got 0\.0$"):
        cls(1.0, 2.0, 0)
    with pytest.raises(TypeError, match=r"^T \(the length of the schedule\) must be a real number, got str$"):
        cls(1.0, 2.0, "10")
    with pytest.raises(
        ValueError, match=r"^start and end hold different numbers of per-replica values: \[2, 3\]$"
    ):
        cls([1.0, 2.0], [1.0, 2.0, 3.0], 10)
    sched = cls(2, 1, 10)
    assert (sched.start, sched.end, sched.T) == (2.0, 1.0, 10.0)
    assert all(type(v) is float for v in (sched.start, sched.end, sched.T))


def test_exponential_is_the_geometric_interpolation():
    """``λ_s = start·(end/start)^{s/T}`` with ``start ≠ 1`` (hand values: 2 → 0.5 over T = 10 halves every
    2.5), clamped outside ``[0, T]``, and per replica; negative control: ``(end·start)^{s/T}`` differs."""
    e = Exponential(2.0, 0.5, 10)
    expected = {0: 2.0, 2.5: math.sqrt(2.0), 5: 1.0, 7.5: 1 / math.sqrt(2.0), 10: 0.5, 25: 0.5, -3: 2.0}
    for s, value in expected.items():
        assert e(s) == pytest.approx(value, rel=1e-14)
    assert e(5) != pytest.approx(2.0 * (0.5 * 2.0) ** 0.5)
    per = Exponential([2.0, 4.0], [0.5, 1.0], 10)
    assert close(per(5), [1.0, 2.0], rtol=1e-14)
    grow = Exponential(0.5, 8.0, 4)
    assert [grow(s) for s in (0, 1, 2, 3, 4)] == pytest.approx([0.5, 1.0, 2.0, 4.0, 8.0], rel=1e-14)


def test_exponential_refuses_non_positive_ends():
    """``start`` and ``end`` must be ``> 0``: a number is named with its value, a per-replica level with the
    first bad replica."""
    with pytest.raises(ValueError, match=r"^Exponential schedule needs start > 0, got 0\.0$"):
        Exponential(0.0, 1.0, 5)
    with pytest.raises(ValueError, match=r"^Exponential schedule needs end > 0, got -1\.0$"):
        Exponential(1.0, -1.0, 5)
    with pytest.raises(ValueError, match=r"^Exponential schedule needs end > 0, got end\[1\] = 0\.0$"):
        Exponential(1.0, [1.0, 0.0, -1.0], 5)
    with pytest.raises(ValueError, match=r"^Exponential schedule needs start > 0, got start\[0\] = -2\.0$"):
        Exponential([-2.0, 1.0], 1.0, 5)


def test_linear_and_cosine_per_replica_values():
    """``Linear`` and ``Cosine`` with per-replica levels against the closed forms, replica by replica."""
    lin = Linear([1.0, -1.0], [3.0, 1.0], 4)
    assert close(lin(1), [1.5, -0.5]) and close(lin(9), [3.0, 1.0]) and close(lin(-1), [1.0, -1.0])
    cos = Cosine([2.0, 1.0], 0.5, 8)
    for s in (0, 2, 4, 8):
        u = math.cos(math.pi * s / 8)
        assert close(cos(s), [0.5 + 0.75 * (1 + u), 0.5 + 0.25 * (1 + u)])
    assert Constant([1.0, 2.0])(5).tolist() == [1.0, 2.0]


# --------------------------------------------------------------------------------------------------------
# kinetic: the paired state


@pytest.mark.parametrize("fn", [positions, velocities], ids=["positions", "velocities"])
def test_check_paired_refusals_and_split(fn):
    """``positions``/``velocities`` (through ``_check_paired``): a non-tensor is a ``TypeError`` naming its
    type; a 0-d tensor, an empty or odd last axis a ``ValueError`` with the shape; a 1-d ``(2d,)`` state and a
    ``(B, M, 2d)`` one split at ``d`` (numpy slices)."""
    for value, got in [("z", "str"), (3.0, "float"), ([1.0, 2.0], "list")]:
        with pytest.raises(TypeError, match=rf"^a kinetic state must be a tensor \(B, M, 2d\), got {got}$"):
            fn(value)
    for shape in [(), (2, 3, 0), (2, 3, 3), (5,)]:
        with pytest.raises(
            ValueError,
            match=r"^a kinetic state has shape \(B, M, 2d\): positions then velocities on the last axis, got "
            rf"shape {re_shape(shape)} \(make one with meanfield\.drift\.phase_space\.pair\(x, v\)\)$",
        ):
            fn(torch.zeros(shape))
    first = fn is positions
    assert fn(torch.arange(4.0)).tolist() == ([0.0, 1.0] if first else [2.0, 3.0])
    z = cloud(2, 3, 6, seed=14)
    assert close(fn(z), z.numpy()[..., :3] if first else z.numpy()[..., 3:])


def test_kinetic_methods_refuse_a_non_tensor_state():
    """Every method of the kinetic system that reads a paired state refuses a non-tensor with the message."""
    system = KineticMeanFieldLangevin(Quadratic(), friction=1.0)
    match = r"^a kinetic state must be a tensor \(B, M, 2d\), got (list|NoneType)$"
    for call in (
        lambda: system.drift(0.0, [[1.0, 2.0]]),
        lambda: system.diffusion(0.0, [[1.0, 2.0]]),
        lambda: system.energy(None),
        lambda: system.check_state(None),
    ):
        with pytest.raises(TypeError, match=match):
            call()
    z = pair(cloud(1, 2, 2))
    assert close(system.drift(0.0, z)[..., :2], z[..., 2:].numpy())


# --------------------------------------------------------------------------------------------------------
# Euler–Maruyama: the prefetch scale


class _Spy(NoiseSource):
    """A noise source that records prefetch hints (it declines steps in ``refuse``, and every step when
    ``prefetches`` is false); ``increment(n, s) = s·ξ_n`` from a table ``ξ``."""

    def __init__(self, xi, dt, refuse=(), prefetches=True):
        super().__init__(tuple(xi.shape[1:]), dt)
        self.xi, self.hints, self.refuse, self._prefetches = xi, [], set(refuse), prefetches

    @property
    def prefetches(self):
        return self._prefetches

    def will_prefetch(self, n):
        return n not in self.refuse

    def prefetch(self, n, scale=1.0):
        self.hints.append((n, scale))

    def increment(self, n, scale=1.0):
        return self.xi[n] * scale


def _sigma_switch(t, x):
    """Additive σ: the number 0.5 before ``t = 0.3``, 0 on ``[0.3, 0.5)``, then a per-particle tensor."""
    if t < 0.3 - 1e-9:
        return 0.5
    if t < 0.5 - 1e-9:
        return 0.0
    return torch.full(x.shape, 0.7, dtype=x.dtype)


def test_next_scale_direct():
    """``_next_scale``: ``sqrt(dt)`` for a tensor σ; for additive noise a nonzero number ``σ(t_next)`` gives
    ``σ(t_next)·sqrt(dt)``, a zero or tensor ``σ(t_next)`` (many entries, or one) gives ``1.0``; other noise
    types give ``1.0`` without calling the diffusion."""
    dt = 0.04
    x = cloud(2, 3, 1)
    calls = []
    additive = SDE(lambda t, x: -x, lambda t, x: calls.append(t) or _sigma_switch(t, x), noise="additive")
    stepper = _EulerStepper(additive, None, 0.0, dt)
    assert stepper._next_scale(0.1, x, torch.ones(1)) == math.sqrt(dt) and calls == []
    assert stepper._next_scale(0.2, x, 0.5) == pytest.approx(0.5 * 0.2, rel=1e-15) and calls == [0.2]
    assert stepper._next_scale(0.4, x, 0.5) == 1.0
    out = stepper._next_scale(0.6, x, 0.5)
    assert out == 1.0 and type(out) is float
    scalar = SDE(lambda t, x: -x, lambda t, x: torch.tensor(0.7, dtype=F64), noise="additive")
    out = _EulerStepper(scalar, None, 0.0, dt)._next_scale(0.1, x, 0.5)
    assert type(out) is float and out == 1.0
    calls.clear()
    diagonal = SDE(lambda t, x: -x, lambda t, x: calls.append(t) or 0.5, noise="diagonal")
    assert _EulerStepper(diagonal, None, 0.0, dt)._next_scale(0.1, x, 0.5) == 1.0 and calls == []


def test_euler_hints_follow_the_next_sigma_and_the_states_are_the_hand_loop():
    """Additive σ switching from the number 0.5 to 0 (at t = 0.3) and to a per-particle tensor 0.7 (at
    t = 0.5), dt = 0.1, eight steps in two segments: the hints are ``(n, σ(t_n)·sqrt(dt))`` while ``σ(t_n)`` is
    a nonzero number, ``1.0`` when it is zero or a tensor, ``sqrt(dt)`` after a tensor step, never past a
    segment's end nor for a step the source declines; the states equal the hand Euler loop ``x + dt·(−x) + σ(t_n)·sqrt(dt)·ξ_n`` (numpy)."""
    dt, B, M = 0.1, 2, 3
    xi = cloud(8, B * M, 1, seed=15).reshape(8, B, M, 1)
    spy = _Spy(xi, dt, refuse={6})
    system = SDE(lambda t, x: -x, _sigma_switch, noise="additive")
    x0 = cloud(B, M, 1, seed=16)
    traj = simulate(system, x0, t1=8 * dt, dt=dt, brownian=spy, save_every=4)
    sq = math.sqrt(dt)
    expected = [(1, 0.5 * sq), (2, 0.5 * sq), (3, 1.0), (5, 1.0), (7, sq)]  # step 6 declined
    assert [n for n, _ in spy.hints] == [n for n, _ in expected]
    assert np.allclose([s for _, s in spy.hints], [s for _, s in expected], rtol=1e-15, atol=0)
    x, states = x0.numpy(), [x0.numpy()]
    for n in range(8):
        sigma = 0.5 if n < 3 else (0.0 if n < 5 else 0.7)
        x = x - dt * x + sigma * sq * xi[n].numpy()
        states.append(x)
    assert close(traj.states, np.stack(states[::4]))


# --------------------------------------------------------------------------------------------------------
# kinetic splittings: the stepper


class _Driven(KineticMeanFieldLangevin):
    """A kinetic system whose force depends on the time: ``F(t, x) = −a x − k(x − x̄) + t``."""

    def force(self, t, x):
        return super().force(t, x) + t


def _hand_run(word, x, v, xi, steps, h, t0, gamma, beta, force, cached=None):
    """Steps ``steps`` of ``word`` by the numpy oracle (``tests/_kinetic_steps.py``), the force ``F(t_n, ·)``
    and temperature ``β(t_n)`` read at each step's start ``t_n = t0 + n h``, the last kick's force carried
    from step to step (and in and out: ``cached``). Returns ``x, v`` and the force carried out."""
    f = cached
    for n in steps:
        t = t0 + n * h
        x, v, f = splitting_step(word, x, v, xi[n], h, gamma, beta(t), lambda y, t=t: force(t, y), f)
    return x, v, f


@pytest.mark.parametrize("scheme", sorted(SPLITTINGS))
def test_splitting_stepper_with_a_time_dependent_force_and_temperature(scheme):
    """The splitting stepper on ``F(t, x) = −a x − k(x − x̄) + t`` and ``β_t = 0.3 + t`` (read at each step's
    start), two ``run`` calls on the same state (the force of the last kick carried across, as documented)
    and a third after the state was touched in place (the force recomputed): the positions and velocities
    equal the numpy splitting above; the stepper hints every next step with scale 1 inside each call only
    (none that the source declines, none at all from a source that does not prefetch).
    Negative control: the time-independent force (no ``+ t``) gives other numbers."""
    B, M, d, h, gamma, a, k, t0 = 2, 3, 2, 0.1, 1.3, 1.5, 0.4, 0.2
    system = _Driven(Quadratic(a), QuadraticInteraction(k), friction=gamma, beta=lambda t: 0.3 + t)
    xi = cloud(7, B * M, 2 * d, seed=17).reshape(7, B, M, 2 * d)
    spy, xin = _Spy(xi, h, refuse={2}), xi.numpy()
    z = pair(cloud(B, M, d, seed=18), cloud(B, M, d, seed=19))
    x, v = z[..., :d].numpy().copy(), z[..., d:].numpy().copy()

    def force(t, y):
        return -a * y - k * (y - y.mean(1, keepdims=True)) + t

    stepper = Splitting(scheme).stepper(system, spy, t0, h)
    word = SPLITTINGS[scheme]
    out = stepper.run(z, 0, 3)
    x, v, f = _hand_run(word, x, v, xin, range(3), h, t0, gamma, lambda t: 0.3 + t, force)
    assert close(out[..., :d], x) and close(out[..., d:], v)
    out = stepper.run(out, 3, 2)
    x, v, f = _hand_run(word, x, v, xin, range(3, 5), h, t0, gamma, lambda t: 0.3 + t, force, cached=f)
    assert close(out[..., :d], x) and close(out[..., d:], v)
    out.add_(0.0)  # same numbers, new version: the carried force no longer belongs to this state
    out = stepper.run(out, 5, 2)
    x, v, _ = _hand_run(word, x, v, xin, range(5, 7), h, t0, gamma, lambda t: 0.3 + t, force)
    assert close(out[..., :d], x) and close(out[..., d:], v)
    assert spy.hints == [(1, 1.0), (4, 1.0), (6, 1.0)]  # step 2 declined by the source
    z2 = pair(cloud(B, M, d, seed=18), cloud(B, M, d, seed=19))
    x2, v2, _ = _hand_run(
        word,
        z2[..., :d].numpy(),
        z2[..., d:].numpy(),
        xin,
        range(3),
        h,
        t0,
        gamma,
        lambda t: 0.3 + t,
        lambda t, y: force(0.0, y),
    )
    quiet = _Spy(xi, h, prefetches=False)
    out2 = Splitting(scheme).stepper(system, quiet, t0, h).run(z2, 0, 3)
    assert not close(out2[..., :d], x2, rtol=1e-6, atol=1e-8) and quiet.hints == []


def test_splitting_names_plan_and_checks():
    """``Splitting``: names case-insensitively, the documented plan (a letter appearing k times takes
    ``h/k``), ``repr``; an unknown name and a non-kinetic system are refused with their messages."""
    s = Splitting("BAOAB")
    assert s.name == "baoab" and s.word == "BAOAB" and repr(s) == "Splitting('baoab')"
    assert s.plan == (("B", 0.5), ("A", 0.5), ("O", 1.0), ("A", 0.5), ("B", 0.5))
    assert Splitting("obabo").plan == (("O", 0.5), ("B", 0.5), ("A", 1.0), ("B", 0.5), ("O", 0.5))
    with pytest.raises(
        ValueError, match=r"^unknown splitting scheme 'bab'; allowed: \['aboba', 'baoab', 'obabo'\]$"
    ):
        Splitting("bab")
    with pytest.raises(
        ValueError,
        match=r"^solver 'obabo' is a splitting of kinetic Langevin dynamics: it needs a "
        r"meanfield\.drift\.phase_space\.KineticMeanFieldLangevin system, got MeanFieldLangevin$",
    ):
        Splitting("obabo").check(MeanFieldLangevin(Quadratic()), None)


# --------------------------------------------------------------------------------------------------------
# torchsde adapter


def test_g_prod_general_diagonal_and_additive():
    """``_SystemAsSDE.g_prod`` on flat states ``(B, M·d)``: general noise is ``Σ_k σ_{dk} v_k`` per particle
    (numpy einsum, m = 3 ≠ d = 2), a tensor σ multiplies elementwise (also a broadcast ``(d,)`` σ), a number
    σ scales ``v``; a σ of a wrong shape is refused with the allowed and the returned shapes."""
    B, M, d, m = 2, 4, 2, 3
    shape = torch.Size((B, M, d))
    x = cloud(B, M, d, seed=20)
    y = x.reshape(B, -1)
    S = torch.randn(B, M, d, m, generator=torch.Generator().manual_seed(21), dtype=F64)
    general = SDE(lambda t, x: -x, lambda t, x: S * (1.0 + x[..., :1, None]), noise="general", brownian_dim=m)
    v = torch.randn(B, M * m, generator=torch.Generator().manual_seed(22), dtype=F64)
    sigma = S.numpy() * (1.0 + x.numpy()[..., :1, None])
    expected = np.einsum("bmdk,bmk->bmd", sigma, v.numpy().reshape(B, M, m)).reshape(B, M * d)
    assert close(_SystemAsSDE(general, shape, "ito", "general").g_prod(0.0, y, v), expected)
    w = torch.randn(B, M * d, generator=torch.Generator().manual_seed(23), dtype=F64)
    diagonal = SDE(lambda t, x: -x, lambda t, x: 0.3 + 0.1 * x**2, noise="diagonal")
    expected = ((0.3 + 0.1 * x.numpy() ** 2) * w.numpy().reshape(B, M, d)).reshape(B, M * d)
    assert close(_SystemAsSDE(diagonal, shape, "ito", "diagonal").g_prod(0.0, y, w), expected)
    row = torch.tensor([0.5, 2.0], dtype=F64)
    broadcast = SDE(lambda t, x: -x, lambda t, x: row, noise="additive")
    expected = (np.array([0.5, 2.0]) * w.numpy().reshape(B, M, d)).reshape(B, M * d)
    assert close(_SystemAsSDE(broadcast, shape, "ito", "additive").g_prod(0.0, y, w), expected)
    number = SDE(lambda t, x: -x, lambda t, x: 1.0 + t, noise="additive")
    assert close(
        _SystemAsSDE(number, shape, "ito", "additive").g_prod(torch.tensor(0.5), y, w), 1.5 * w.numpy()
    )
    bad = SDE(lambda t, x: -x, lambda t, x: torch.ones(5, dtype=F64), noise="diagonal")
    with pytest.raises(
        ValueError, match=r"^diffusion\(t, x\) must return σ of shape \(2, 4, 2\), got \(5,\)$"
    ):
        _SystemAsSDE(bad, shape, "ito", "diagonal").g_prod(0.0, y, w)
    bad_general = SDE(lambda t, x: -x, lambda t, x: S[..., :2], noise="general", brownian_dim=m)
    with pytest.raises(
        ValueError, match=r"^diffusion\(t, x\) must return σ of shape \(2, 4, 2, 3\), got \(2, 4, 2, 2\)$"
    ):
        _SystemAsSDE(bad_general, shape, "ito", "general").g_prod(0.0, y, v)


def test_torchsde_euler_general_noise_is_the_hand_step():
    """``torchsde_euler`` with general noise (m = 3), two steps on pre-drawn ``dW``: each step is
    ``x + dt·b + Σ_k σ_{dk}(x) dW_k`` per particle (numpy), the same as the native Euler–Maruyama."""
    dt, B, M, d, m = 0.05, 2, 3, 2, 3
    x0 = cloud(B, M, d, seed=24)
    S = torch.randn(B, M, d, m, generator=torch.Generator().manual_seed(25), dtype=F64)
    dW = torch.randn(2, B, M, m, generator=torch.Generator().manual_seed(26), dtype=F64) * math.sqrt(dt)
    system = SDE(
        lambda t, x: -x, lambda t, x: S * (1.0 + 0.5 * x[..., :1, None]), noise="general", brownian_dim=m
    )
    traj = simulate(
        system, x0, t1=2 * dt, dt=dt, solver="torchsde_euler", brownian=BrownianIncrements(dW, dt)
    )
    x = x0.numpy()
    for n in range(2):
        sigma = S.numpy() * (1.0 + 0.5 * x[..., :1, None])
        x = x - dt * x + np.einsum("bmdk,bmk->bmd", sigma, dW[n].numpy())
    assert close(traj.final, x)


@pytest.mark.parametrize(
    "method, noise, noise_type, sde_type, levy",
    [
        ("srk", "additive", "additive", "ito", "space-time"),
        ("reversible_heun", "additive", "diagonal", "stratonovich", "none"),
        ("heun", "diagonal", "diagonal", "stratonovich", "none"),
        ("euler", "general", "general", "ito", "none"),
    ],
)
def test_torchsde_stepper_builds_a_fixed_step_solver_on_the_grid(method, noise, noise_type, sde_type, levy):
    """``_build``: torchsde's solver class for the method, on the grid step ``dt`` with adaptive stepping
    off, the system presented with the documented noise type (additive σ as diagonal for reversible Heun),
    and a Brownian motion of shape ``(B, M·m)`` with the method's Lévy-area kind."""
    B, M, d, m, dt = 2, 3, 2, 4, 0.1
    if noise == "general":
        system = SDE(
            lambda t, x: -x, lambda t, x: torch.ones(B, M, d, m, dtype=F64), noise="general", brownian_dim=m
        )
        shape = (B, M, m)
    else:
        system = SDE(lambda t, x: -x, lambda t, x: 0.5 + 0 * x, noise=noise)
        shape = (B, M, d)
    source = BrownianIncrements.sample(3, shape, dt, generator=0)
    stepper = TorchSDE(method).stepper(system, source, 0.0, dt)
    stepper._build(cloud(B, M, d))
    solver = stepper._solver
    assert type(solver) is methods.select(method, sde_type)
    assert solver.adaptive is False and solver.dt == dt
    assert solver.sde.noise_type == noise_type and solver.sde.sde_type == sde_type
    assert solver.bm.shape == (B, shape[1] * shape[2]) and solver.bm.levy_area_approximation == levy


# --------------------------------------------------------------------------------------------------------
# brownian: BrownianIncrements.sample


def test_sample_draws_dw_then_h_from_the_generator_on_the_device_asked():
    """``sample(N, shape, dt, levy_area=True)``: ``dW ~ N(0, dt)`` then ``H ~ N(0, dt/12)`` from the same
    generator (a reference generator seeded alike: standard normals scaled by ``sqrt(dt)`` and
    ``sqrt(dt/12)``), both on the device asked for even under another default device
    (``torch.device("meta")``), in the dtype asked; an int seed is the same as a generator seeded with it."""
    N, shape, dt = 5, (2, 3, 1), 0.04
    ref = torch.Generator().manual_seed(7)
    z1 = torch.randn(N, *shape, generator=ref, dtype=F64)
    z2 = torch.randn(N, *shape, generator=ref, dtype=F64)
    with torch.device("meta"):
        inc = BrownianIncrements.sample(
            N, shape, dt, generator=torch.Generator().manual_seed(7), levy_area=True
        )
    assert inc.increments.device.type == "cpu" and inc.H.device.type == "cpu"
    assert close(inc.increments, z1 * math.sqrt(dt)) and close(inc.H, z2 * math.sqrt(dt / 12))
    assert len(inc) == N and inc.dt == dt and inc.shape == shape
    seeded = BrownianIncrements.sample(N, shape, dt, generator=np.int64(7), levy_area=True)
    assert torch.equal(seeded.increments, inc.increments) and torch.equal(seeded.H, inc.H)
    plain = BrownianIncrements.sample(N, shape, dt, generator=7)
    assert plain.H is None and torch.equal(plain.increments, inc.increments)
    f32 = BrownianIncrements.sample(N, shape, dt, generator=7, dtype=torch.float32, levy_area=True)
    ref32 = torch.Generator().manual_seed(7)
    w1, w2 = (torch.randn(N, *shape, generator=ref32) for _ in range(2))
    assert f32.increments.dtype == torch.float32 and f32.H.dtype == torch.float32
    assert close(f32.increments, w1 * math.sqrt(dt), rtol=1e-6, atol=1e-7)
    assert close(f32.H, w2 * math.sqrt(dt / 12), rtol=1e-6, atol=1e-7)
    assert not close(inc.H, z2 * math.sqrt(dt))  # negative control: H is not scaled like dW


def test_sample_refusals():
    """``sample`` checks ``n_steps`` (an int ≥ 1), ``dt`` (> 0) and the generator (no ``None``)."""
    with pytest.raises(ValueError, match=r"^n_steps must be ≥ 1, got 0$"):
        BrownianIncrements.sample(0, (1, 1, 1), 0.1, generator=0)
    with pytest.raises(TypeError, match=r"^n_steps must be an int, got float$"):
        BrownianIncrements.sample(2.0, (1, 1, 1), 0.1, generator=0)
    with pytest.raises(ValueError, match=r"^dt must be > 0, got -0\.1$"):
        BrownianIncrements.sample(2, (1, 1, 1), -0.1, generator=0)
    with pytest.raises(
        TypeError, match=r"must be a torch\.Generator, an int seed \(Python or numpy integer\), got NoneType$"
    ):
        BrownianIncrements.sample(2, (1, 1, 1), 0.1, generator=None)


# --------------------------------------------------------------------------------------------------------
# richardson: coupled_step_sizes


def test_coupled_step_sizes_calls_simulate_on_the_shared_path(monkeypatch):
    """A spy on ``simulate`` and on the path's draw: per segment, each level ``k`` continues from its own
    last state at ``t0 = segment·n_fine·η`` to ``t0 + n_fine·η`` with ``dt = k·η``, the solver given and
    ``save_every = record_every/k``; the fine level runs on the drawn path itself, a coarse one on its
    ``coarsen(k)`` (increments summed in blocks of k, numpy)."""
    calls, drawn = [], []
    real_simulate, real_sample = rich_mod.simulate, BrownianIncrements.sample

    def spy_simulate(system, x, **kwargs):
        traj = real_simulate(system, x, **kwargs)
        calls.append((x.clone(), kwargs, traj.final.clone()))
        return traj

    def spy_sample(*args, **kwargs):
        path = real_sample(*args, **kwargs)
        drawn.append(path)
        return path

    monkeypatch.setattr(rich_mod, "simulate", spy_simulate)
    monkeypatch.setattr(BrownianIncrements, "sample", spy_sample)
    eta, record_every, segment, levels = 0.1, 4, 2, (1, 2, 4)
    x0 = cloud(2, 3, 1, seed=27)
    system = MeanFieldLangevin(Quadratic(1.0), beta=0.5)
    out = rich_mod.coupled_step_sizes(
        system,
        x0,
        eta=eta,
        n_segments=3,
        observable=lambda s: s.mean(dim=(2, 3)),
        generator=torch.Generator().manual_seed(3),
        levels=levels,
        record_every=record_every,
        segment=segment,
        solver="euler",
    )
    n_fine = segment * record_every
    assert len(drawn) == 3 and len(calls) == 9
    assert all(p.increments.shape == (n_fine, 2, 3, 1) and p.dt == eta for p in drawn)
    last = {k: x0 for k in levels}
    for i, (x, kwargs, final) in enumerate(calls):
        seg, k = divmod(i, 3)
        k = levels[k]
        t = 0.0 + seg * n_fine * eta
        assert torch.equal(x, last[k])
        assert kwargs["t0"] == pytest.approx(t, abs=1e-15) and kwargs["t1"] == pytest.approx(t + n_fine * eta)
        assert (
            kwargs["dt"] == k * eta
            and kwargs["solver"] == "euler"
            and kwargs["save_every"] == record_every // k
        )
        path = kwargs["brownian"]
        if k == 1:
            assert path is drawn[seg]
        else:
            blocks = drawn[seg].increments.numpy().reshape(n_fine // k, k, 2, 3, 1).sum(1)
            assert close(path.increments, blocks) and path.dt == pytest.approx(k * eta)
        last[k] = final
    assert sorted(out) == [1, 2, 4] and all(v.shape == (3 * segment, 2) for v in out.values())


def test_coupled_step_sizes_equals_the_hand_euler_loops():
    """OU ``dx = −a x dt + sqrt(2β) dW``, levels 1 and 2, two segments: the recorded observable ``x²`` equals
    hand Euler loops (numpy) on the path drawn segment by segment from a generator seeded alike (the coarse
    level on sums of pairs of fine increments), every ``record_every`` fine steps; ``x0`` is not modified.
    Negative control: the coarse level differs from the fine one."""
    a, beta, eta, record_every, segment = 0.8, 0.3, 0.05, 2, 3
    x0 = cloud(2, 1, 1, seed=28)
    x0_copy = x0.clone()
    out = rich_mod.coupled_step_sizes(
        MeanFieldLangevin(Quadratic(a), beta=beta),
        x0,
        eta=eta,
        n_segments=2,
        observable=lambda s: s[..., 0, 0].square(),
        generator=torch.Generator().manual_seed(9),
        levels=(1, 2),
        record_every=record_every,
        segment=segment,
    )
    assert torch.equal(x0, x0_copy)
    g = torch.Generator().manual_seed(9)
    n_fine = segment * record_every
    dW = np.concatenate(
        [(torch.randn(n_fine, 2, 1, 1, generator=g, dtype=F64) * math.sqrt(eta)).numpy() for _ in range(2)]
    )
    expected = {}
    for k in (1, 2):
        x, rec = x0.numpy().copy(), []
        incs = dW.reshape(-1, k, 2, 1, 1).sum(1)
        for n, w in enumerate(incs):
            x = x - k * eta * a * x + math.sqrt(2 * beta) * w
            if (n + 1) % (record_every // k) == 0:
                rec.append(x[:, 0, 0] ** 2)
        expected[k] = np.stack(rec)
    assert out[1].dtype == np.float64 and out[1].shape == (2 * segment, 2)
    assert close(out[1], expected[1], rtol=1e-11) and close(out[2], expected[2], rtol=1e-11)
    assert not close(out[1], out[2], rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"eta": 0.0}, ValueError, r"^eta must be > 0, got 0\.0$"),
        ({"n_segments": 0}, ValueError, r"^n_segments must be ≥ 1, got 0$"),
        ({"record_every": True}, TypeError, r"^record_every must be an int, got bool$"),
        ({"segment": 0}, ValueError, r"^segment must be ≥ 1, got 0$"),
        (
            {"levels": (1, 0)},
            ValueError,
            r"^levels must be positive ints dividing record_every = 8, got \[0\]$",
        ),
        (
            {"levels": (1.0, 2)},
            ValueError,
            r"^levels must be positive ints dividing record_every = 8, got \[1\.0\]$",
        ),
        (
            {"levels": (3, 2, 5)},
            ValueError,
            r"^levels must be positive ints dividing record_every = 8, got \[3, 5\]$",
        ),
    ],
    ids=["eta", "n_segments", "record_every", "segment", "zero_level", "float_level", "non_divisors"],
)
def test_coupled_step_sizes_refusals(kwargs, error, message):
    """Bad arguments are refused by name before anything runs."""
    args = {"eta": 0.1, "n_segments": 1, "record_every": 8, "segment": 2, "levels": (1, 2)}
    args.update(kwargs)
    with pytest.raises(error, match=message):
        rich_mod.coupled_step_sizes(
            MeanFieldLangevin(Quadratic()),
            torch.zeros(1, 1, 1),
            observable=lambda s: s[..., 0, 0],
            generator=torch.Generator(),
            **args,
        )


def test_richardson_is_two_fine_minus_coarse():
    """``richardson(v(η), v(2η)) = 2v(η) − v(2η)`` on numbers and arrays (hand values)."""
    assert rich_mod.richardson(1.5, 2.0) == 1.0
    assert np.array_equal(rich_mod.richardson(np.array([1.0, 3.0]), np.array([0.5, 7.0])), [1.5, -1.0])


def test_euler_solver_declared_orders():
    """The native Euler–Maruyama declares strong order 1 for additive noise, ½ otherwise, weak order 1, and
    accepts non-Gaussian increments."""
    e = EulerMaruyama()
    assert e.strong_orders == {"additive": 1.0, "diagonal": 0.5, "general": 0.5}
    assert e.weak_orders == {"additive": 1.0, "diagonal": 1.0, "general": 1.0} and e.needs_gaussian is False


def test_log_and_riesz_psi_carry_the_strength_c():
    """The public ``ψ``/``ψ'`` of ``LogInteraction(c)`` and ``RieszInteraction(s, c)`` include ``c``, as the
    docstrings' formulas (and ``GaussianInteraction``'s) do: ``ψ(r²) = −c/2·log r²``, ``ψ'(r²) = −c/(2r²)``;
    ``ψ(r²) = c/s·(r²)^{−s/2}``, ``ψ'(r²) = −c/2·(r²)^{−s/2−1}``; per replica, ``c[b]`` on block ``b``
    (regression: both left ``c`` out, so ``RieszInteraction(2, c=3).psi(1)`` was 0.5, not 1.5)."""
    r2 = torch.tensor([[[math.e**2]], [[4.0]]], dtype=F64)  # (2, 1, 1)
    log = LogInteraction(torch.tensor([3.0, -1.0], dtype=F64))
    assert close(log.psi(r2), [[[-3.0]], [[1.0 * math.log(4.0) / 2]]])
    assert close(log.dpsi(r2), [[[-1.5 / math.e**2]], [[1.0 / 8]]])
    riesz = RieszInteraction(2.0, c=3.0)
    assert float(riesz.psi(torch.tensor(1.0, dtype=F64))) == pytest.approx(1.5)  # not 0.5: c counts
    assert float(riesz.dpsi(torch.tensor(4.0, dtype=F64))) == pytest.approx(-1.5 / 4**2)
    per = RieszInteraction(1.0, c=torch.tensor([2.0, 0.5], dtype=F64))
    assert close(per.psi(r2), [[[2.0 / math.e]], [[0.25]]])


def test_a_gaussian_width_whose_square_underflows_is_refused_with_the_documented_error():
    """``length = 1e-200`` (``length² = 0.0`` in float64): the documented ValueError, as for the same width
    per replica (regression: a ZeroDivisionError); a tiny width whose square is representable is accepted."""
    with pytest.raises(ValueError, match=r"length > 0 with 1/\(2·length²\) finite, got length=1e-200"):
        GaussianInteraction(1.0, 1e-200)
    with pytest.raises(ValueError, match=r"got length\[0\]=1e-200"):
        GaussianInteraction(1.0, torch.tensor([1e-200, 1.0], dtype=F64))
    assert GaussianInteraction(1.0, 1e-100)._s == pytest.approx(0.5e200)
