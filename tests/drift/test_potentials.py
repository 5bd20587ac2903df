"""Potentials: gradients against autograd, the O(M) and chunked pairwise paths against each other."""

import math
import sys
import types

import numpy as np
import pytest
import torch
from helpers.bad_input import call
from helpers.drift_oracles import autograd_drift, system_and_oracle, total_energy
from helpers.pair_loops import loop_pairs  # tests/helpers/pair_loops.py
from helpers.pair_loops import loop_pairs as np_pairs  # tests/helpers/pair_loops.py
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import meanfield.drift.pairwise as pw
import meanfield.drift.potentials as pot
from meanfield import SDE, BrownianIncrements, MeanFieldLangevin, NonFiniteStateError, simulate
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
from meanfield.drift.projections import Sphere
from meanfield.drift.schedules import Cosine, Exponential, Linear, Step
from meanfield.drift.systems import ParticleSystem


def x(seed=0, B=2, M=37, d=3):
    return torch.randn(B, M, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


PER_REPLICA = torch.tensor([0.7, 2.5], dtype=torch.float64)  # one value per replica of x() (B = 2)


@pytest.mark.parametrize(
    "V",
    [
        Quadratic(2.5),
        DoubleWell(),
        Quadratic(PER_REPLICA),
        DoubleWell(quartic=PER_REPLICA, quadratic=-PER_REPLICA),
        DoubleWell(quartic=0.5, quadratic=2.0),
    ],
    ids=[
        "quadratic",
        "double well",
        "quadratic per replica",
        "double well per replica",
        "double well c4, c2",
    ],
)
def test_confinement_gradient_is_the_gradient_of_the_energy(V):
    y = x().requires_grad_(True)
    (auto,) = torch.autograd.grad(V.energy(y).sum(), y)
    assert torch.allclose(V.grad(y.detach()), auto, atol=1e-12)


def test_per_replica_values_act_replica_by_replica():
    """Replica b of a per-replica potential is the scalar potential with value [b] (an independent path:
    the scalar code), and not the other replica's (negative control)."""
    y = x()
    for batched, scalar in [
        (Quadratic(PER_REPLICA), Quadratic),
        (QuadraticInteraction(PER_REPLICA), QuadraticInteraction),
        (Alignment(PER_REPLICA), Alignment),
        (DoubleWell(quartic=PER_REPLICA), lambda v: DoubleWell(quartic=v)),
    ]:
        grad = batched.grad if hasattr(batched, "grad") else batched.mean_field_grad
        for b in range(2):
            one = scalar(float(PER_REPLICA[b]))
            one_grad = one.grad if hasattr(one, "grad") else one.mean_field_grad
            assert torch.allclose(grad(y)[b], one_grad(y[b : b + 1])[0], rtol=1e-14, atol=1e-15)
            assert torch.allclose(batched.energy(y)[b], one.energy(y[b : b + 1])[0], rtol=1e-14, atol=1e-15)
            other = scalar(float(PER_REPLICA[1 - b]))
            other_grad = other.grad if hasattr(other, "grad") else other.mean_field_grad
            assert not torch.allclose(grad(y)[b], other_grad(y[b : b + 1])[0], atol=1e-3)
    with pytest.raises(ValueError, match="3 per-replica values, but the state has B = 2"):
        Quadratic(torch.ones(3)).grad(y)


def test_double_well_coefficients_move_the_wells_and_the_barrier():
    """V = c4 x⁴/4 − c2 x²/2: ∇V = 0 at ±sqrt(c2/c4), V there = −c2²/(4 c4) per coordinate."""
    V = DoubleWell(
        quartic=torch.tensor([2.0, 0.5], dtype=torch.float64),
        quadratic=torch.tensor([1.0, 3.0], dtype=torch.float64),
    )
    wells = torch.tensor([[[0.5**0.5]], [[6.0**0.5]]], dtype=torch.float64)  # (2, 1, 1) sqrt(c2/c4)
    assert torch.allclose(V.grad(wells), torch.zeros_like(wells), atol=1e-14)
    assert torch.allclose(
        V.energy(wells)[:, 0], torch.tensor([-1 / 8, -9 / 2], dtype=torch.float64), atol=1e-14
    )
    assert not torch.allclose(V.grad(wells.flip(0)), torch.zeros_like(wells), atol=1e-3)  # negative control


def test_double_well_values():
    pts = torch.tensor([[[1.0], [-1.0], [0.0]]], dtype=torch.float64)
    assert torch.allclose(DoubleWell().energy(pts), torch.tensor([[-0.25, -0.25, 0.0]], dtype=torch.float64))
    assert torch.equal(DoubleWell().grad(pts), torch.zeros_like(pts))


@pytest.mark.parametrize(
    "W",
    [
        QuadraticInteraction(1.7),
        GaussianInteraction(0.8, 0.7),
        GaussianInteraction(-1.0, 2.0, max_elements=50),
        QuadraticInteraction(PER_REPLICA),
        Alignment(PER_REPLICA),
        GaussianInteraction(PER_REPLICA, PER_REPLICA.flip(0), max_elements=50),
    ],
    ids=[
        "quadratic",
        "gaussian",
        "gaussian blocked",
        "quadratic per replica",
        "alignment per replica",
        "gaussian per replica",
    ],
)
def test_mean_field_gradient_is_the_gradient_of_the_pair_energy(W):
    """E = 1/(2M) Σ_ij W(x_i, x_j) has ∂E/∂x_i = 1/M Σ_j ∇_1 W(x_i, x_j) (W symmetric)."""
    y = x().requires_grad_(True)
    (auto,) = torch.autograd.grad(0.5 * W.energy(y).sum(), y)
    assert torch.allclose(W.mean_field_grad(y.detach()), auto, atol=1e-10)


def test_radial_quadratic_equals_the_centre_of_mass_form_and_chunks_do_not_matter():
    k = 1.3
    radial = RadialInteraction(lambda r2: 0.5 * k * r2, lambda r2: 0.5 * k + 0 * r2, max_elements=7)
    exact = QuadraticInteraction(k)
    assert torch.allclose(radial.mean_field_grad(x()), exact.mean_field_grad(x()), atol=1e-10)
    assert torch.allclose(radial.energy(x()), exact.energy(x()), atol=1e-10)
    assert not torch.allclose(radial.mean_field_grad(x()), QuadraticInteraction(1.2 * k).mean_field_grad(x()))


def test_interactions_stay_within_a_replica():
    y = x()
    z = y.clone()
    z[1] += 100.0  # move replica 1 far away: replica 0 must not notice
    for W in (QuadraticInteraction(1.0), GaussianInteraction(1.0, 1.0)):
        assert torch.allclose(W.mean_field_grad(y)[0], W.mean_field_grad(z)[0], atol=1e-12)


def test_bad_potentials():
    with pytest.raises(ValueError, match="a must be ≥ 0"):
        Quadratic(-1.0)
    with pytest.raises(ValueError, match="length > 0"):
        GaussianInteraction(1.0, 0.0)
    with pytest.raises(TypeError, match="psi and dpsi"):
        RadialInteraction(1.0, 2.0)
    with pytest.raises(TypeError, match="self_pair must be True, False or None"):
        RadialInteraction(lambda r: r, lambda r: r, self_pair="no")
    with pytest.raises(ValueError, match="quartic must be > 0"):
        DoubleWell(quartic=0.0)


@pytest.mark.parametrize("W", [LogInteraction, lambda c: RieszInteraction(1.0, c)])
def test_singular_kernels_attract_for_negative_c_and_repel_for_positive_c(W):
    # the documented sign convention: the drift −1/M Σ_j ∇W(x_i − x_j) moves two particles towards each other
    # for c < 0 (the Keller–Segel kernel LogInteraction(−χ)) and apart for c > 0
    x = torch.tensor([[[0.0, 0.0], [1.0, 0.0]]], dtype=torch.float64)  # (1, 2, 2): particle 1 right of 0
    for c, sign in ((-2.0, 1.0), (2.0, -1.0)):
        drift = -W(c).mean_field_grad(x)  # (1, 2, 2)
        assert sign * float(drift[0, 0, 0]) > 0 and sign * float(drift[0, 1, 0]) < 0  # towards / away
        assert float(drift[0, 0, 0]) == pytest.approx(sign * 2.0 / 2)  # |c|/(M r) = 2/(2·1), r = 1


SETTINGS = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


class _Opaque:
    def __repr__(self) -> str:
        return "<object>"


NONSENSE = st.sampled_from([None, "1", "abc", "", [1.0], (1,), {}, _Opaque(), b"x", 1j, np.array([1.0, 2.0])])


NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.booleans(),
    st.sampled_from([torch.tensor(0.5), torch.ones(2), torch.tensor(float("nan")), np.float64(0.25)]),
)


BAD = st.one_of(NUMBERS, NONSENSE)


X0 = torch.randn(2, 3, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


POTENTIALS = {
    "Quadratic": (Quadratic, {"a": 1.0}),
    "QuadraticInteraction": (QuadraticInteraction, {"k": 1.0}),
    "Alignment": (Alignment, {"kappa": 1.0}),
    "GaussianInteraction": (GaussianInteraction, {"c": 1.0, "length": 1.0, "max_elements": 64}),
    "RadialInteraction": (
        RadialInteraction,
        {"psi": lambda r2: 1 / (1 + r2), "dpsi": lambda r2: -1 / (1 + r2) ** 2, "max_elements": 64},
    ),
    "MeanFieldLangevin": (
        MeanFieldLangevin,
        {
            "confinement": DoubleWell(),
            "interaction": QuadraticInteraction(0.5),
            "beta": 0.2,
            "projection": None,
        },
    ),
    "SDE": (
        SDE,
        {"drift": lambda t, x: -x, "diffusion": lambda t, x: 0.1, "noise": "additive", "brownian_dim": None},
    ),
}


@st.composite
def potential_cases(draw):
    cls_name = draw(st.sampled_from(sorted(POTENTIALS)))
    cls, valid = POTENTIALS[cls_name]
    name = draw(st.sampled_from(sorted(valid)))
    pool = st.one_of(BAD, st.sampled_from([DoubleWell(), Sphere(), "general", "diagonal", 3, lambda t, x: x]))
    return cls_name, name, {**valid, name: draw(pool)}


@pytest.mark.parametrize("solver", ["euler", "srk", "heun"])
def test_a_schedule_that_goes_negative_mid_run_names_the_time(solver):
    system = MeanFieldLangevin(DoubleWell(), GaussianInteraction(0.5), beta=Linear(0.3, -0.3, T=0.1))
    with pytest.raises(ValueError, match=r"beta\(t=0\.06"):
        simulate(system, X0, t1=0.1, dt=0.02, generator=0, solver=solver)


@SETTINGS
@given(potential_cases())
def test_systems_and_potentials(case):
    """A constructor either refuses the argument by name or builds an object whose drift on a small state is
    finite, of the state's shape, and (for a ``MeanFieldLangevin``) minus the gradient of M·energy."""
    cls_name, name, kw = case
    cls = POTENTIALS[cls_name][0]
    obj = call(cls, (name, "noise", "brownian_dim", "GaussianInteraction"), **kw)
    if obj is None:
        return
    x = X0.clone()
    if cls_name == "MeanFieldLangevin":
        y = x.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(obj.energy(y).sum() * x.shape[1], y)
        b = obj.drift(0.0, x)
        assert b.shape == x.shape and torch.allclose(b, -g, atol=1e-10)
    elif cls_name == "SDE":
        assert obj.noise in ("additive", "diagonal", "general")
    elif cls_name == "Quadratic":
        assert obj.a >= 0 and math.isfinite(obj.a)
        assert torch.allclose(obj.grad(x), obj.a * x)
    else:
        assert all(math.isfinite(v) for v in vars(obj).values() if isinstance(v, float))


@SETTINGS
@given(
    B=st.integers(1, 3),
    M=st.integers(1, 5),
    d=st.integers(1, 3),
    collapse=st.booleans(),
    scale=st.sampled_from([1e-8, 1.0, 30.0]),
    seed=st.integers(0, 99),
)
def test_drift_on_degenerate_states_is_the_autograd_drift(B, M, d, collapse, scale, seed):
    """Degenerate states (one particle, one dimension, every particle at one point, far-apart particles): the
    drift of every interaction is minus the gradient of M·energy and finite."""
    x = scale * torch.randn(B, M, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    if collapse:
        x = x[:, :1].expand(B, M, d).clone()
    for inter in (
        None,
        QuadraticInteraction(0.7),
        Alignment(-0.3),
        GaussianInteraction(0.8, 0.6, max_elements=4),
        RadialInteraction(lambda r2: 1 / (1 + r2), lambda r2: -1 / (1 + r2) ** 2),
    ):
        system = MeanFieldLangevin(Quadratic(1.3), inter, beta=0.1)
        y = x.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(system.energy(y).sum() * M, y)
        b = system.drift(0.0, x)
        assert bool(torch.isfinite(b).all())
        assert torch.allclose(b, -g, rtol=1e-9, atol=1e-9 * (1 + scale)), repr(inter)


F64 = torch.float64


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


def cloud_2(B=2, M=5, d=2, seed=0, dtype=F64, scale=1.0):
    """A seeded ``(B, M, d)`` state."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(B, M, d, generator=g, dtype=F64)).to(dtype)


def per(value, b):
    """Replica ``b``'s value of a number or a ``(B,)`` tensor, as a float."""
    return float(value[b]) if torch.is_tensor(value) else float(value)


def close_2(actual, expected, rtol=1e-10, atol=1e-12):
    """``actual`` (a tensor or array) equals ``expected`` within the tolerances (float64 comparison)."""
    a = actual.detach().double().numpy() if torch.is_tensor(actual) else np.asarray(actual, dtype=np.float64)
    e = expected.detach().double().numpy() if torch.is_tensor(expected) else np.asarray(expected, np.float64)
    return a.shape == e.shape and np.allclose(a, e, rtol=rtol, atol=atol)


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


@pytest.mark.parametrize("a", [1.7, torch.tensor([0.5, 2.0, 3.0], dtype=F64)], ids=["number", "per_replica"])
def test_quadratic_energy_and_grad_equal_the_hand_formula(a):
    """``Quadratic(a)``: ``V = a/2|x|²`` and ``∇V = a x`` against numpy with replica ``b``'s ``a``, and ``∇V``
    against autograd of the energy. Negative control: another replica's ``a`` gives other numbers."""
    x = cloud_2(B=3)
    V = Quadratic(a)
    xn = x.numpy()
    av = np.array([per(a, b) for b in range(3)])[:, None]
    assert close_2(V.energy(x), 0.5 * av * (xn**2).sum(-1))
    assert close_2(V.grad(x), av[:, :, None] * xn)
    xg = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(V.energy(xg).sum(), xg)
    assert close_2(V.grad(x), auto)
    if torch.is_tensor(a):
        assert not close_2(V.energy(x), 0.5 * av[::-1] * (xn**2).sum(-1))


@pytest.mark.parametrize(
    "quartic, quadratic",
    [(1.0, 1.0), (2.0, 0.5), (torch.tensor([1.0, 2.0, 0.5], dtype=F64), torch.tensor([1.0, -0.5, 3.0]))],
    ids=["plain", "numbers", "per_replica"],
)
def test_double_well_energy_and_grad_equal_the_hand_formula(quartic, quadratic):
    """``DoubleWell(c₄, c₂)``: ``Σ_k (c₄x⁴/4 − c₂x²/2)`` and ``c₄x³ − c₂x`` against numpy, and the gradient
    against autograd of the energy."""
    x = cloud_2(B=3)
    V = DoubleWell(quartic, quadratic)
    xn = x.numpy()
    c4 = np.array([per(quartic, b) for b in range(3)])[:, None, None]
    c2 = np.array([per(quadratic, b) for b in range(3)])[:, None, None]
    assert close_2(V.energy(x), (c4 * xn**4 / 4 - c2 * xn**2 / 2).sum(-1))
    assert close_2(V.grad(x), c4 * xn**3 - c2 * xn)
    xg = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(V.energy(xg).sum(), xg)
    assert close_2(V.grad(x), auto)


@pytest.mark.parametrize("name", list(CASES))
def test_interaction_energy_and_drift_equal_the_double_loop(name):
    """Every interaction's per-particle energy ``1/M Σ_j W(x_i − x_j)`` and ``1/M Σ_j ∇W(x_i − x_j)`` against an
    explicit numpy double loop with the closed-form ``W`` and ``∇W`` (the self-pair left out exactly for the
    singular kernels), replica by replica. Blocks of rows small enough that several are used."""
    make, W, gradW = CASES[name]
    inter = make()
    if isinstance(inter, RadialInteraction):
        inter.max_elements = 3 * 7  # rows = 1 or 2 per block at B = 3, M = 7
    x = cloud_2(B=3, M=7, seed=1)
    singular = isinstance(inter, (LogInteraction, RieszInteraction))
    energy, grad = np_pairs(x, W, gradW, self_pair=not singular)
    assert close_2(inter.energy(x), energy, rtol=1e-9, atol=1e-11)
    assert close_2(inter.mean_field_grad(x), grad, rtol=1e-9, atol=1e-11)


def test_alignment_energy_and_drift_equal_the_double_loop():
    """``Alignment(κ)`` (``W(x, y) = −κ x·y``): ``1/M Σ_j −κ x_i·x_j`` and ``1/M Σ_j ∇_{x_i} W = −κ x̄`` against a
    numpy double loop, a number and per-replica ``κ``."""
    x = cloud_2(B=3, M=6, seed=2)
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
        assert close_2(inter.energy(x), energy)
        assert close_2(inter.mean_field_grad(x), grad)


@pytest.mark.parametrize("name", ["gaussian_numbers", "gaussian_per_replica", "quadratic_k_per_replica"])
def test_smooth_interaction_drift_is_half_the_autograd_of_the_summed_energy(name):
    """For an even ``W``, ``∂/∂x_i Σ_k energy_k = 2/M Σ_j ∇W(x_i − x_j)``: ``mean_field_grad`` equals half of
    autograd's gradient of the summed energy (which runs the differentiable, list-of-blocks path of
    ``radial_sum``, several blocks)."""
    inter = CASES[name][0]()
    if isinstance(inter, RadialInteraction):
        inter.max_elements = 3 * 7
    x = cloud_2(B=3, M=7, seed=3)
    xg = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(inter.energy(xg).sum(), xg)
    assert close_2(inter.mean_field_grad(x), 0.5 * auto, rtol=1e-9, atol=1e-11)


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
    assert close_2(g.psi(r2), c[:, None, None] * torch.exp(-s[:, None, None] * r2))
    assert close_2(g.dpsi(r2), -s[:, None, None] * c[:, None, None] * torch.exp(-s[:, None, None] * r2))
    with pytest.raises(ValueError, match=r"^c has 2 per-replica values, but the state has B = 3"):
        g.psi(torch.ones(3, 1, 1, dtype=F64))
    log = LogInteraction()
    assert close_2(log.psi(r2), -0.5 * np.log(r2.numpy()))
    assert close_2(log.dpsi(r2), -0.5 / r2.numpy())


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
    x = cloud_2(B=2, M=3, seed=4)
    xn = x.numpy()
    expected = np.zeros((2, 3))
    for b in range(2):
        for i in range(3):
            for j in range(3):
                expected[b, i] += float(w[j]) * math.exp(-((xn[b, i] - xn[b, j]) ** 2).sum()) / 3
    assert close_2(inter.energy(x), expected)


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
    x = cloud_2(B=3, M=6, seed=5)
    for name in ("log_per_replica", "riesz"):
        make, W, gradW = CASES[name]
        inter = make()
        energy, grad = np_pairs(x, W, gradW, self_pair=False)
        assert close_2(inter.energy(x), energy, rtol=1e-9)
        assert close_2(inter.mean_field_grad(x), grad, rtol=1e-9)
        assert inter.backend_used == "torch"


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
    x = cloud_2(B=3, M=7, seed=4)
    xg = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(inter.energy(xg).sum(), xg)
    assert torch.isfinite(auto).all()
    assert close_2(inter.mean_field_grad(x), 0.5 * auto, rtol=1e-9, atol=1e-11)
    assert not close_2(inter.mean_field_grad(x), auto, rtol=1e-3, atol=1e-6)


def cloud_3(B=2, M=9, d=3, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(B, M, d, generator=g, dtype=torch.float64)


CONFINEMENTS = {
    "Quadratic(1.3)": (Quadratic(1.3), ("quadratic", (1.3,))),
    "Quadratic(0)": (Quadratic(0.0), ("quadratic", (0.0,))),
    "DoubleWell": (DoubleWell(), ("double_well", ())),
}


INTERACTIONS = {
    "none": (None, None),
    "QuadraticInteraction(0.7)": (QuadraticInteraction(0.7), ("quadratic", (0.7,))),
    "QuadraticInteraction(-0.4)": (QuadraticInteraction(-0.4), ("quadratic", (-0.4,))),
    "Alignment(0.9)": (Alignment(0.9), ("alignment", (0.9,))),
    "GaussianInteraction(0.8,0.6)": (GaussianInteraction(0.8, 0.6), ("gaussian", (0.8, 0.6))),
    "GaussianInteraction chunked": (
        GaussianInteraction(-1.1, 1.5, max_elements=20),
        ("gaussian", (-1.1, 1.5)),
    ),
    "RadialInteraction soft Coulomb": (
        RadialInteraction(lambda r2: 1 / (1 + r2), lambda r2: -1 / (1 + r2) ** 2, max_elements=7),
        ("soft_coulomb", ()),
    ),
}


PAIRS = [(c, i) for c in CONFINEMENTS for i in INTERACTIONS]


@pytest.mark.parametrize("c,i", PAIRS)
def test_drift_is_minus_the_gradient_of_M_times_the_energy(c, i):
    """Oracle: autograd of an independently written energy. ``drift``, the generic Euler move, the fused
    move and the library's own ``energy`` (times M) all agree with it to round-off (float64)."""
    system, V, W = system_and_oracle(c, i)
    x = cloud_3()
    b = autograd_drift(V, W, x)
    assert torch.allclose(system.drift(0.0, x), b, rtol=1e-10, atol=1e-12), "drift()"
    assert torch.allclose(system.energy(x) * x.shape[1], total_energy(V, W, x), rtol=1e-12, atol=1e-12)
    noise, dt = cloud_3(seed=1), 0.03
    noise_copy = noise.clone()
    expected = x + dt * b + noise
    generic = ParticleSystem.euler_update_(system, 0.0, x.clone(), dt, noise)
    assert torch.allclose(generic, expected, rtol=1e-10, atol=1e-12), "generic Euler move"
    fused = system.euler_update_(0.0, x.clone(), dt, noise)
    assert torch.allclose(fused, expected, rtol=1e-10, atol=1e-12), "system's Euler move (fused if affine)"
    assert torch.equal(noise, noise_copy), "the move must not modify the noise"


def test_drift_oracle_rejects_a_flipped_interaction():
    """Negative control: the oracle tells a sign error in the interaction term apart."""
    system, V, W = system_and_oracle("DoubleWell", "GaussianInteraction(0.8,0.6)")
    flipped = MeanFieldLangevin(DoubleWell(), GaussianInteraction(-0.8, 0.6), beta=0.3)
    x = cloud_3()
    assert not torch.allclose(flipped.drift(0.0, x), autograd_drift(V, W, x), rtol=1e-3, atol=1e-6)


B, M, D = 4, 30, 2


A = torch.tensor([0.5, 1.0, 2.0, 3.5], dtype=F64)


K = torch.tensor([-0.3, 0.0, 0.7, 1.2], dtype=F64)


BETA = torch.tensor([0.05, 0.2, 0.5, 1.0], dtype=F64)


def state(B=B, M=M, d=D, seed=0, dtype=F64):
    return torch.randn(B, M, d, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def increments(n, B=B, M=M, d=D, dt=0.01, levy=False, dtype=F64):
    return BrownianIncrements.sample(
        n, (B, M, d), dt, generator=torch.Generator().manual_seed(1), levy_area=levy, dtype=dtype
    )


def replica(path, b):
    """Replica ``b``'s increments of a batched path, as a path of one replica."""
    H = None if path.H is None else path.H[:, b : b + 1]
    return BrownianIncrements(
        path.increments[:, b : b + 1].clone(), path.dt, None if H is None else H.clone()
    )


# Each case: (batched system, the scalar system of replica b)
CASES_2 = {
    "OU + Curie–Weiss (fused affine step), β per replica": (
        lambda: MeanFieldLangevin(Quadratic(A), QuadraticInteraction(K), beta=BETA),
        lambda b: MeanFieldLangevin(
            Quadratic(float(A[b])), QuadraticInteraction(float(K[b])), beta=float(BETA[b])
        ),
    ),
    "OU, a per replica, one β (fused, no interaction)": (
        lambda: MeanFieldLangevin(Quadratic(A), beta=0.3),
        lambda b: MeanFieldLangevin(Quadratic(float(A[b])), beta=0.3),
    ),
    "double well + alignment, β scheduled per replica": (
        lambda: MeanFieldLangevin(
            DoubleWell(quartic=A, quadratic=1.0 + K), Alignment(2 * K), beta=Linear(BETA, BETA / 10, 0.2)
        ),
        lambda b: MeanFieldLangevin(
            DoubleWell(quartic=float(A[b]), quadratic=float(1.0 + K[b])),
            Alignment(float(2 * K[b])),
            beta=Linear(float(BETA[b]), float(BETA[b] / 10), 0.2),
        ),
    ),
    "Gaussian repulsion, strength and width per replica (blocked pair sums)": (
        lambda: MeanFieldLangevin(
            Quadratic(1.0), GaussianInteraction(K + 1.0, A, max_elements=500), beta=BETA
        ),
        lambda b: MeanFieldLangevin(
            Quadratic(1.0),
            GaussianInteraction(float(K[b] + 1.0), float(A[b]), max_elements=500),
            beta=float(BETA[b]),
        ),
    ),
    "log repulsion (self-pair left out), strength per replica": (
        lambda: MeanFieldLangevin(Quadratic(1.0), LogInteraction(A / 10, max_elements=300), beta=BETA),
        lambda b: MeanFieldLangevin(
            Quadratic(1.0), LogInteraction(float(A[b] / 10), max_elements=300), beta=float(BETA[b])
        ),
    ),
    "Riesz repulsion s = 1, strength per replica": (
        lambda: MeanFieldLangevin(Quadratic(A), RieszInteraction(1.0, A / 20), beta=0.1),
        lambda b: MeanFieldLangevin(
            Quadratic(float(A[b])), RieszInteraction(1.0, float(A[b] / 20)), beta=0.1
        ),
    ),
}


@pytest.mark.parametrize("solver", ["euler", "srk"])
@pytest.mark.parametrize("case", list(CASES_2))
def test_a_batched_run_equals_one_scalar_run_per_replica(case, solver):
    """Replica b of the batched run = the scalar run with value [b] on replica b's increments (to round-off:
    the scalar path folds σ·√dt into one factor, the batched one multiplies σ_b by dW); a run with replica
    b+1's values is the negative control."""
    batched, single = CASES_2[case]
    x = state()
    path = increments(40, levy=solver == "srk")
    out = simulate(
        batched(), x, t1=0.4, dt=0.01, solver=solver, brownian=path, save_every=10
    ).states  # (S, B, M, d)
    assert torch.isfinite(out).all()
    for b in range(B):
        ref = simulate(
            single(b), x[b : b + 1], t1=0.4, dt=0.01, solver=solver, brownian=replica(path, b), save_every=10
        ).states  # (S, 1, M, d)
        assert torch.allclose(out[:, b], ref[:, 0], rtol=1e-11, atol=1e-12), (case, b)
        other = simulate(
            single((b + 1) % B),
            x[b : b + 1],
            t1=0.4,
            dt=0.01,
            solver=solver,
            brownian=replica(path, b),
            save_every=10,
        ).states
        assert not torch.allclose(out[:, b], other[:, 0], rtol=1e-6, atol=1e-6), (case, b)  # negative control


def test_float32_batched_runs_match_the_scalar_runs_to_float32_round_off():
    x = state(dtype=torch.float32)
    path = increments(50, dtype=torch.float32)
    batched, single = CASES_2["OU + Curie–Weiss (fused affine step), β per replica"]
    out = simulate(batched(), x, t1=0.5, dt=0.01, brownian=path).final  # (B, M, d) float32
    assert out.dtype == torch.float32
    for b in range(B):
        ref = simulate(single(b), x[b : b + 1], t1=0.5, dt=0.01, brownian=replica(path, b)).final
        assert torch.allclose(out[b], ref[0], rtol=1e-5, atol=1e-6)


def test_dyson_equilibrium_is_the_hermite_zeros_per_replica():
    """β = 0, V = x²/2, W = −c·log|z| in d = 1: the fixed point of x_i = (c/M) Σ_{j≠i} 1/(x_i − x_j) is
    x_i = sqrt(c/M)·z_i, z the zeros of the Hermite polynomial H_M (Stieltjes); its mean square is
    c(M − 1)/(2M). The Euler scheme at β = 0 is gradient descent, whose fixed points are exact."""
    M, c = 12, torch.tensor([0.5, 1.0, 2.0], dtype=F64)
    x0 = torch.linspace(-2, 2, M, dtype=F64).expand(3, M).unsqueeze(-1).clone()  # (3, M, 1) distinct
    x = simulate(
        MeanFieldLangevin(Quadratic(1.0), LogInteraction(c), beta=0.0), x0, t1=40.0, dt=0.005, generator=0
    ).final  # (3, M, 1)
    zeros = torch.from_numpy(np.polynomial.hermite.hermgauss(M)[0])  # (M,) zeros of H_M
    for b in range(3):
        exact = torch.sqrt(c[b] / M) * zeros
        assert torch.allclose(x[b, :, 0].sort().values, exact, atol=1e-9), b
        assert x[b].square().mean() == pytest.approx(float(c[b]) * (M - 1) / (2 * M), rel=1e-9)
        if b:  # negative control: another replica's strength
            assert not torch.allclose(x[b, :, 0].sort().values, torch.sqrt(c[b - 1] / M) * zeros, atol=1e-3)


def test_a_singular_kernel_with_its_self_pair_is_nan_at_step_1_and_the_error_says_so():
    """Negative control of the self-pair rule: the same log kernel with the j = i term kept is NaN at the
    first step, and the error names step 1 and the drift (not dt)."""
    kept = RadialInteraction(lambda r2: -0.5 * r2.log(), lambda r2: -0.5 / r2, self_pair=True)
    auto = RadialInteraction(lambda r2: -0.5 * r2.log(), lambda r2: -0.5 / r2)  # probed: singular, left out
    assert auto.self_pair is False and kept.self_pair is True
    assert (
        GaussianInteraction().self_pair
        and RadialInteraction(lambda r: 1 / (1 + r), lambda r: -1 / (1 + r) ** 2).self_pair
    )
    x0 = torch.linspace(-1, 1, 8, dtype=F64).reshape(1, 8, 1)
    ok = simulate(MeanFieldLangevin(Quadratic(1.0), auto, beta=0.0), x0, t1=1.0, dt=0.01, generator=0).final
    ref = simulate(
        MeanFieldLangevin(Quadratic(1.0), LogInteraction(1.0), beta=0.0), x0, t1=1.0, dt=0.01, generator=0
    ).final
    assert torch.allclose(ok, ref, rtol=1e-12, atol=1e-13)
    with pytest.raises(
        NonFiniteStateError, match=r"at step 1 \(t = 0.01\), the first non-finite step.*drift"
    ) as e:
        simulate(MeanFieldLangevin(Quadratic(1.0), kept, beta=0.0), x0, t1=1.0, dt=0.01, generator=0)
    assert e.value.step == 1 and e.value.last_finite_step == 0
    assert "dt will not help" in str(e.value)


@pytest.mark.parametrize(
    "W, energy",
    [
        (LogInteraction(torch.tensor([0.5, 2.0], dtype=F64)), lambda r, c: -c * r.log()),
        (RieszInteraction(1.5, torch.tensor([1.0, -0.5], dtype=F64)), lambda r, c: c * r**-1.5 / 1.5),
        (
            GaussianInteraction(torch.tensor([1.0, -2.0], dtype=F64), torch.tensor([0.5, 1.5], dtype=F64)),
            lambda r, c: (
                c * torch.exp(-r.square() / (2 * torch.tensor([0.5, 1.5], dtype=F64).view(2, 1, 1) ** 2))
            ),
        ),
    ],
    ids=["log", "riesz", "gaussian"],
)
def test_per_replica_pair_drift_is_the_gradient_of_a_dense_pair_energy(W, energy):
    """Independent oracle: E = 1/(2M) Σ_{i≠j} W(|x_i − x_j|) from the dense distance matrix (the self-pair
    dropped by index; the Gaussian's j = i term is a constant), differentiated by autograd."""
    x = state(B=2, M=15, d=3, seed=3)
    y = x.clone().requires_grad_(True)
    r = (y.unsqueeze(2) - y.unsqueeze(1)).square().sum(-1)  # (2, M, M)
    off = ~torch.eye(15, dtype=torch.bool)
    r = torch.where(off, r, torch.ones_like(r)).sqrt()  # (2, M, M), 1 on the diagonal (masked below)
    c = W.c.view(2, 1, 1)
    E = (energy(r, c) * off).sum() / (2 * 15)
    (grad,) = torch.autograd.grad(E, y)
    assert torch.allclose(W.mean_field_grad(x), grad, rtol=1e-10, atol=1e-12)
    e_dense = (energy(r, c) * off).sum(-1).detach() / 15  # (2, M)
    if isinstance(W, GaussianInteraction):
        e_dense = e_dense + c.view(2, 1) / 15  # the j = i term W(0) = c
    assert torch.allclose(W.energy(x), e_dense, rtol=1e-10, atol=1e-12)
    # negative control: the other replica's strength
    flipped = type(W).__new__(type(W))
    flipped.__dict__.update(W.__dict__, c=W.c.flip(0))
    assert not torch.allclose(flipped.mean_field_grad(x), grad, atol=1e-3)


@pytest.mark.parametrize(
    "make, error, match",
    [
        (
            lambda: Alignment(torch.ones(3, 2)),
            ValueError,
            r"kappa must be a number or one value per replica: a tensor "
            r"of shape \(B,\) or \(B, 1, 1\); got a tensor of shape \(3, 2\)",
        ),
        (lambda: Quadratic(torch.tensor([1.0, -1.0])), ValueError, r"a\[1\] = -1 \(replica 1 of 2\).*≥ 0"),
        (
            lambda: QuadraticInteraction(torch.tensor([1.0, float("nan")])),
            ValueError,
            r"k\[1\] = nan.*finite",
        ),
        (lambda: GaussianInteraction(1.0, torch.tensor([1.0, 0.0])), ValueError, r"length\[1\]"),
        (lambda: DoubleWell(quartic=torch.tensor([1.0, 0.0])), ValueError, r"quartic\[1\] = 0 .*> 0"),
        (lambda: Alignment(torch.tensor([True, False])), TypeError, "dtype torch.bool"),
        (lambda: Alignment("2"), TypeError, "kappa must be a number or one value per replica"),
        (
            lambda: MeanFieldLangevin(Quadratic(), beta=torch.tensor([0.1, -0.2, 0.3])),
            ValueError,
            r"beta\[1\] = -0.2 \(replica 1 of 3\)",
        ),
        (
            lambda: MeanFieldLangevin(Quadratic(), beta=torch.tensor([0.1, float("nan")])),
            ValueError,
            r"beta\[1\] = nan",
        ),
        (
            lambda: simulate(
                MeanFieldLangevin(
                    Quadratic(),
                    beta=Cosine(
                        torch.tensor([1.0, 0.5], dtype=F64), torch.tensor([0.1, -0.1], dtype=F64), 0.1
                    ),
                ),
                state(B=2),
                t1=0.2,
                dt=0.01,
                generator=0,
            ),
            ValueError,
            r"beta\(t=0.0[5-9]\)\[1\] = -0.0.*every replica",
        ),
        (
            lambda: simulate(
                MeanFieldLangevin(Quadratic(), beta=Step([0.5, torch.tensor([1.0, -1.0], dtype=F64)], [0.1])),
                state(B=2),
                t1=0.2,
                dt=0.01,
                generator=0,
            ),
            ValueError,
            r"beta\(t=0.1\)\[1\] = -1 \(replica 1 of 2\)",
        ),
        (
            lambda: Linear(torch.ones(2), torch.ones(3), 1.0),
            ValueError,
            "different numbers of per-replica values",
        ),
        (lambda: Exponential(torch.tensor([1.0, 0.0]), 1.0, 1.0), ValueError, r"start\[1\] = 0"),
    ],
)
def test_bad_per_replica_values_are_named(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_a_one_element_tensor_is_a_number_bit_for_bit():
    x = state()
    a = simulate(
        MeanFieldLangevin(
            Quadratic(torch.tensor(1.5)), Alignment(torch.tensor([0.5])), beta=torch.tensor(0.2, dtype=F64)
        ),
        x,
        t1=0.2,
        dt=0.01,
        generator=4,
    ).final
    b = simulate(
        MeanFieldLangevin(Quadratic(1.5), Alignment(0.5), beta=0.2), x, t1=0.2, dt=0.01, generator=4
    ).final
    assert torch.equal(a, b)
    assert isinstance(Quadratic(torch.tensor(1.5)).a, float)


def test_b_1_1_values_lists_and_arrays_are_the_same_per_replica_values():
    expect = Alignment(K).kappa  # (B,) float64
    for given in (K.view(B, 1, 1), K.tolist(), K.numpy(), tuple(K.tolist())):  # noqa: F402
        got = Alignment(given).kappa
        assert got.shape == (B,) and got.dtype == F64 and torch.equal(got, expect)
    with pytest.raises(ValueError, match=r"got a tensor of shape \(1, 4\)"):
        Alignment(K.view(1, B))  # broadcasts to (1, 1, 4), not to (B, 1, 1): refused, not silently transposed


def cloud_4(B=2, M=5, d=2, seed=0, dtype=F64, scale=1.0, offset=0.0):
    """A seeded ``(B, M, d)`` state."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(B, M, d, generator=g, dtype=F64) + offset).to(dtype)


def per_2(value, b):
    """Replica ``b``'s value of a number or a ``(B,)`` tensor."""
    return float(value[b]) if torch.is_tensor(value) else float(value)


def close_3(actual, expected, rtol=1e-10, atol=1e-12):
    """Same shape and equal within the tolerances (compared in float64)."""
    a = actual.detach().double().numpy() if torch.is_tensor(actual) else np.asarray(actual, dtype=np.float64)
    e = expected.detach().double().numpy() if torch.is_tensor(expected) else np.asarray(expected, np.float64)
    return a.shape == e.shape and bool(np.allclose(a, e, rtol=rtol, atol=atol))


def mismatch_2(name, held, B):
    """The anchored message of ``held`` per-replica values met by a state of ``B`` replicas."""
    return (
        rf"^{name} has {held} per-replica values, but the state has B = {B} replicas \(x has shape "
        r"\(B, M, d\)\): give one value per replica, or a number for all$"
    )


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


def _raise(exc):
    def f(r2):
        raise exc

    return f


def _smooth(w=1.3):
    """``ψ(r²) = w/(1 + r²)``, ``ψ'(r²) = −w/(1 + r²)²`` and the matching ``W(z)``, ``∇W(z) = 2ψ'(|z|²)z``."""
    return (
        lambda r2: w / (1 + r2),
        lambda r2: -w / (1 + r2) ** 2,
        lambda b, z: w / (1 + z @ z),
        lambda b, z: -2 * w / (1 + z @ z) ** 2 * z,
    )


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

    x = cloud_4()
    assert V().parameters() == {} and W().parameters() == {}
    assert V().energy(x) is None and V().grad(x) is None
    assert W().energy(x) is None and W().mean_field_grad(x) is None


def test_quadratic_defaults_parameters_and_repr():
    """``Quadratic()`` is ``a = 1``: ``V = |x|²/2``, ``∇V = x`` exactly; ``a = 0`` is allowed (``≥ 0``);
    ``parameters``/``repr`` give the value; per-replica values read back as float64 ``(B,)``."""
    x = cloud_4(B=2, M=4, d=3, seed=1)
    V = Quadratic()
    assert V.a == 1.0 and V.parameters() == {"a": 1.0} and repr(V) == "Quadratic(a=1.0)"
    assert torch.equal(V.grad(x), x)
    assert close_3(V.energy(x), 0.5 * (x.numpy() ** 2).sum(-1), rtol=1e-15)
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
    x = cloud_4(B=3, M=4, d=2, seed=2, dtype=dtype)
    V = Quadratic(a)
    xn = x.double().numpy()
    tol = {"rtol": 1e-6, "atol": 1e-6} if dtype == torch.float32 else {}
    e, g = V.energy(x), V.grad(x)
    assert e.dtype == dtype and g.dtype == dtype
    assert close_3(e, 0.5 * a.numpy()[:, None] * (xn**2).sum(-1), **tol)
    assert close_3(g, a.numpy()[:, None, None] * xn, **tol)
    xg = x.double().requires_grad_(True)
    (auto,) = torch.autograd.grad(V.energy(xg).sum(), xg)
    assert close_3(V.grad(x.double()), auto)


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
    with pytest.raises(ValueError, match=mismatch_2("a", 3, 2)):
        V.energy(cloud_4(B=2))
    with pytest.raises(ValueError, match=mismatch_2("a", 3, 2)):
        V.grad(cloud_4(B=2))


def test_double_well_defaults_and_closed_form_points():
    """``DoubleWell()``: ``V = x⁴/4 − x²/2`` per coordinate summed, ``∇V = x³ − x``: at ``x = (2, −1, 0.5)``
    ``V = 4 − 2 + (1/4 − 1/2) + (1/64 − 1/8)`` and ``∇V = (6, 0, −3/8)`` by hand."""
    V = DoubleWell()
    assert V.quartic == 1.0 and V.quadratic == 1.0 and V._plain is True
    assert V.parameters() == {"quartic": 1.0, "quadratic": 1.0}
    x = torch.tensor([[[2.0, -1.0, 0.5]]], dtype=F64)
    assert close_3(V.energy(x), [[2.0 - 0.25 + 1 / 64 - 1 / 8]], rtol=1e-15)
    assert close_3(V.grad(x), [[[6.0, 0.0, -0.375]]], rtol=1e-15)


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
    x = cloud_4(B=3, M=4, d=2, seed=3, scale=1.4)
    V = DoubleWell(quartic, quadratic)
    xn = x.numpy()
    c4 = np.array([per_2(quartic, b) for b in range(3)])[:, None, None]
    c2 = np.array([per_2(quadratic, b) for b in range(3)])[:, None, None]
    assert close_3(V.energy(x), (c4 * xn**4 / 4 - c2 * xn**2 / 2).sum(-1))
    assert close_3(V.grad(x), c4 * xn**3 - c2 * xn)
    xg = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(V.energy(xg).sum(), xg)
    assert close_3(V.grad(x), auto)
    if torch.is_tensor(quartic) or torch.is_tensor(quadratic):
        assert not close_3(V.grad(x), c4[::-1] * xn**3 - c2[::-1] * xn)


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


@pytest.mark.parametrize(
    "k", [None, 2.5, -0.7, torch.tensor([2.0, -0.5, 1.25], dtype=F64)], ids=["default", "k", "neg", "per"]
)
def test_quadratic_interaction_against_the_double_loop(k):
    """``1/M Σ_j k/2 |x_i − x_j|²`` and ``1/M Σ_j k (x_i − x_j)`` by a numpy double loop (default ``k = 1``);
    ``mean_field_grad`` is half the autograd gradient of the summed energy."""
    W = QuadraticInteraction() if k is None else QuadraticInteraction(k)
    kk = 1.0 if k is None else k
    x = cloud_4(B=3, M=5, d=2, seed=4, offset=1.5)
    energy, grad = loop_pairs(x, lambda b, z: per_2(kk, b) / 2 * z @ z, lambda b, z: per_2(kk, b) * z)
    assert close_3(W.energy(x), energy)
    assert close_3(W.mean_field_grad(x), grad)
    xg = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(W.energy(xg).sum(), xg)
    assert close_3(W.mean_field_grad(x), 0.5 * auto)


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
        with pytest.raises(ValueError, match=mismatch_2(name, 3, 2)):
            W.energy(cloud_4(B=2))
        with pytest.raises(ValueError, match=mismatch_2(name, 3, 2)):
            W.mean_field_grad(cloud_4(B=2))


@pytest.mark.parametrize(
    "kappa", [None, -1.3, torch.tensor([0.7, -1.2, 2.0], dtype=F64)], ids=["default", "k", "per"]
)
def test_alignment_against_the_double_loop(kappa):
    """``1/M Σ_j −κ x_i·x_j`` and ``1/M Σ_j −κ x_j`` (``∇_{x_i}`` of ``W(x_i, x_j) = −κ x_i·x_j``) by a numpy
    double loop; the drift has the state's full shape and is a real tensor one can write into."""
    W = Alignment() if kappa is None else Alignment(kappa)
    kk = 1.0 if kappa is None else kappa
    x = cloud_4(B=3, M=6, d=2, seed=5, offset=0.5)
    xn = x.numpy()
    energy, grad = np.zeros((3, 6)), np.zeros((3, 6, 2))
    for b in range(3):
        for i in range(6):
            for j in range(6):
                energy[b, i] += -per_2(kk, b) * xn[b, i] @ xn[b, j] / 6
                grad[b, i] += -per_2(kk, b) * xn[b, j] / 6
    assert close_3(W.energy(x), energy)
    g = W.mean_field_grad(x)
    assert g.shape == (3, 6, 2) and close_3(g, grad)


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
    W.energy(cloud_4())
    assert W.backend_used == "torch"
    W2 = RadialInteraction(psi, dpsi, max_elements=7, backend="torch", self_pair=False)
    assert W2.max_elements == 7 and W2.backend == "torch" and W2.self_pair is False


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


@pytest.mark.parametrize("max_elements", [1, 2 * 7 * 3, 1 << 22], ids=["rows1", "rows3", "one_block"])
@pytest.mark.parametrize("self_pair", [None, True, False], ids=["probe", "kept", "left_out"])
def test_radial_energy_and_drift_against_the_double_loop(max_elements, self_pair):
    """A smooth user kernel: ``1/M Σ_j ψ(|x_i − x_j|²)`` and ``1/M Σ_j 2ψ'(|x_i − x_j|²)(x_i − x_j)`` by the
    numpy double loop, with the self-pair kept (probe, ``True``) or left out (``False``: ``1/M Σ_{j≠i}``, the
    energy lower by ``ψ(0)/M = w/M``), in blocks of 1, 3 (uneven: M = 7) and all rows. The state is far from
    the origin (the drift centres it)."""
    psi, dpsi, Wf, gWf = _smooth()
    W = RadialInteraction(psi, dpsi, max_elements=max_elements, backend="torch", self_pair=self_pair)
    x = cloud_4(B=2, M=7, d=3, seed=6, offset=5.0)
    keep = self_pair is not False
    energy, grad = loop_pairs(x, Wf, gWf, self_pair=keep)
    assert close_3(W.energy(x), energy) and close_3(W.mean_field_grad(x), grad)
    assert W.backend_used == "torch"
    other, _ = loop_pairs(x, Wf, gWf, self_pair=not keep)
    assert close_3(other - energy, np.full((2, 7), (1.3 if not keep else -1.3) / 7))  # the control: ψ(0)/M


def test_radial_drift_is_half_the_autograd_gradient_of_the_summed_energy():
    """For an even ``W``, ``∂/∂x_i Σ_k energy_k = 2/M Σ_j ∇W(x_i − x_j)``: ``mean_field_grad`` is half of
    autograd's gradient through the differentiable path of ``radial_sum`` (several blocks), with and
    without the self-pair (its gradient is 0 either way)."""
    psi, dpsi, _, _ = _smooth(0.8)
    x = cloud_4(B=2, M=6, d=2, seed=7)
    for self_pair in (True, False):
        W = RadialInteraction(psi, dpsi, max_elements=10, backend="torch", self_pair=self_pair)
        xg = x.clone().requires_grad_(True)
        (auto,) = torch.autograd.grad(W.energy(xg).sum(), xg)
        assert close_3(W.mean_field_grad(x), 0.5 * auto)


def test_radial_drift_in_float32_far_from_the_origin_is_accurate():
    """Float32 clouds around ``±3000``: the drift centres the state before ``x_i Σ g − Σ g x_j``, so it
    matches the float64 double loop (of the same float32 points) to 2e-4 of its scale; uncentred, the
    cancellation of two terms of size ``3000·Σg`` would lose about ``3000·6e-8·M ≈ 1e-3`` of it."""
    psi, dpsi, Wf, gWf = _smooth(1.0)
    base = cloud_4(B=2, M=8, d=2, seed=8)
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
        assert close_3(kept.energy(x), [[2.0]]) and close_3(kept.mean_field_grad(x), [[[0.0, 0.0]]])
        assert torch.equal(left.energy(x), torch.zeros(1, 1, dtype=F64))
        assert torch.equal(left.mean_field_grad(x), torch.zeros(1, 1, 2, dtype=F64))
    else:
        p5, dp5 = 2.0 / 6, -2.0 / 36
        assert close_3(kept.energy(x), [[(2.0 + p5) / 2, (2.0 + p5) / 2]])
        assert close_3(left.energy(x), [[p5 / 2, p5 / 2]])
        z = np.array([1.0, 2.0])
        drift = [[2 * dp5 * (-z) / 2, 2 * dp5 * z / 2]]
        assert close_3(kept.mean_field_grad(x), drift) and close_3(left.mean_field_grad(x), drift)


def test_smooth_radial_on_auto_keops_equals_the_double_loop(fake_keops_2):
    """Where ``"auto"`` means KeOps (emulated), a smooth kernel written with operators runs on KeOps and gives
    the double loop's numbers; ``backend_used`` says ``"keops"``."""
    psi, dpsi, Wf, gWf = _smooth(0.9)
    W = RadialInteraction(psi, dpsi)
    x = cloud_4(B=2, M=6, d=2, seed=9)
    energy, grad = loop_pairs(x, Wf, gWf)
    assert close_3(W.energy(x), energy) and W.backend_used == "keops"
    assert close_3(W.mean_field_grad(x), grad) and W.backend_used == "keops"
    assert DenseLazy.created == 6 and W._keops_fails is False  # X, Y, V per call


def test_a_kernel_keops_cannot_apply_falls_back_to_torch_once_and_for_all(fake_keops_2):
    """``ψ`` written with ``torch.exp`` raises ``TypeError`` on a LazyTensor: on ``"auto"`` the call falls back to
    the torch backend (the double loop's numbers, ``backend_used == "torch"``) and remembers it
    (``_keops_fails``), so the next call builds no LazyTensor; asked for ``"keops"`` the error propagates."""
    W = RadialInteraction(lambda r2: torch.exp(-r2), lambda r2: -torch.exp(-r2))
    x = cloud_4(B=2, M=5, d=2, seed=10)
    energy, grad = loop_pairs(x, lambda b, z: math.exp(-(z @ z)), lambda b, z: -2 * math.exp(-(z @ z)) * z)
    assert close_3(W.energy(x), energy)
    assert W.backend_used == "torch" and W._keops_fails is True
    made = DenseLazy.created
    assert close_3(W.mean_field_grad(x), grad) and W.backend_used == "torch"
    assert DenseLazy.created == made
    strict = RadialInteraction(lambda r2: torch.exp(-r2), lambda r2: -torch.exp(-r2), backend="keops")
    with pytest.raises(TypeError):
        strict.energy(x)
    assert strict._keops_fails is False and strict.backend_used is None


def test_singular_kernels_on_keops(fake_keops_2):
    """Without the self-pair, ``"auto"`` runs on torch (KeOps cannot leave ``j = i`` out): the double loop over
    ``j ≠ i``; an explicit ``backend="keops"`` is refused by ``radial_sum`` with its message."""
    x = cloud_4(B=2, M=5, d=2, seed=11)
    W = LogInteraction(0.7)
    energy, grad = loop_pairs(
        x, lambda b, z: -0.35 * math.log(z @ z), lambda b, z: -0.7 * z / (z @ z), self_pair=False
    )
    assert close_3(W.energy(x), energy) and close_3(W.mean_field_grad(x), grad)
    assert W.backend_used == "torch" and DenseLazy.created == 0
    with pytest.raises(
        ValueError, match=r"^exclude_self \(leaving out the self-pairs of a singular kernel\) runs"
    ):
        LogInteraction(0.7, backend="keops").energy(x)


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
    x = cloud_4(B=2, M=6, d=2, seed=13)

    def Wf(b, z):
        return per_2(cc, b) * math.exp(-(z @ z) / (2 * per_2(ll, b) ** 2))

    energy, grad = loop_pairs(x, Wf, lambda b, z: -Wf(b, z) / per_2(ll, b) ** 2 * z)
    assert close_3(W.energy(x), energy) and close_3(W.mean_field_grad(x), grad)
    xg = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(W.energy(xg).sum(), xg)
    assert close_3(W.mean_field_grad(x), 0.5 * auto)
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
    assert close_3(s, [2.0, 0.5]) and close_3(ce, [1.0, -2.0]) and close_3(cg, [-4.0, 2.0])
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
    with pytest.raises(ValueError, match=mismatch_2("c", 3, 2)):
        GaussianInteraction([1.0, 2.0, 3.0], backend="torch").energy(cloud_4(B=2))
    with pytest.raises(ValueError, match=mismatch_2("c", 3, 2)):
        GaussianInteraction([1.0, 2.0, 3.0], backend="torch").mean_field_grad(cloud_4(B=2))


def test_the_gaussian_kernel_is_in_place_only_without_a_gradient():
    """``_gaussian_kernel(u) = e^{−u}``: in place on a plain tensor (the block is overwritten), and on a tensor
    that requires a gradient while gradients are off; out of place (the input kept, the result
    differentiable with ``d/du = −e^{−u}``) when a gradient flows; a non-tensor goes through ``(−u).exp()``."""
    u = torch.tensor([0.0, 1.0, 2.5], dtype=F64)
    expected = np.exp(-np.array([0.0, 1.0, 2.5]))
    plain = u.clone()
    out = pot._gaussian_kernel(plain)
    assert out.data_ptr() == plain.data_ptr() and close_3(plain, expected, rtol=1e-15)
    leaf = u.clone().requires_grad_(True)
    out = pot._gaussian_kernel(leaf)
    assert close_3(out, expected, rtol=1e-15) and torch.equal(leaf.detach(), u)
    (g,) = torch.autograd.grad(out.sum(), leaf)
    assert close_3(g, -expected, rtol=1e-15)
    with torch.no_grad():
        nograd = u.clone().requires_grad_(True)
        out = pot._gaussian_kernel(nograd)
        assert out.data_ptr() == nograd.data_ptr() and close_3(nograd.detach(), expected, rtol=1e-15)
    lazy = pot._gaussian_kernel(DenseLazy(u.clone(), True))
    assert isinstance(lazy, DenseLazy) and close_3(lazy.t, expected, rtol=1e-15)


@pytest.mark.parametrize("c", [None, 0.9, torch.tensor([2.0, -0.5], dtype=F64)], ids=["default", "c", "per"])
def test_log_interaction_against_the_double_loop(c):
    """``−c/2 log|z|²`` and ``−c z/|z|²`` over ``j ≠ i`` (default ``c = 1``) by the double loop, in blocks of one
    row; the drift is half the (finite) autograd gradient of the summed energy."""
    W = LogInteraction(max_elements=1) if c is None else LogInteraction(c, max_elements=1)
    cc = 1.0 if c is None else c
    x = cloud_4(B=2, M=5, d=2, seed=14, offset=2.0)
    energy, grad = loop_pairs(
        x, lambda b, z: -per_2(cc, b) / 2 * math.log(z @ z), lambda b, z: -per_2(cc, b) * z / (z @ z), False
    )
    assert close_3(W.energy(x), energy) and close_3(W.mean_field_grad(x), grad)
    xg = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(W.energy(xg).sum(), xg)
    assert close_3(W.mean_field_grad(x), 0.5 * auto)


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
    assert close_3(pot._log_kernel(r2), [-math.log(2.0), math.log(2.0)], rtol=1e-15)
    assert close_3(pot._inverse_kernel(r2), [0.25, 4.0], rtol=1e-15)
    assert close_3(W.psi(r2), [-0.3 * math.log(4.0), -0.3 * math.log(0.25)], rtol=1e-15)
    assert close_3(W.dpsi(r2), [-0.3 / 4.0, -0.3 / 0.25], rtol=1e-15)
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
    x = cloud_4(B=2, M=5, d=3, seed=15)
    energy, grad = loop_pairs(
        x,
        lambda b, z: per_2(c, b) * math.sqrt(z @ z) ** -3.0 / 3.0,
        lambda b, z: -per_2(c, b) * z / math.sqrt(z @ z) ** 5.0,
        self_pair=False,
    )
    assert close_3(Wp.energy(x), energy) and close_3(Wp.mean_field_grad(x), grad)
    with pytest.raises(ValueError, match=r"^s must be > 0, got 0\.0$"):
        RieszInteraction(0.0)


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
    x = cloud_4(B=2, M=5, d=2, seed=40)
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
    x2, block2 = cloud_4(B=2, M=3), torch.ones(2, 1, 1, dtype=F64)
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
        with pytest.raises(ValueError, match=mismatch_2(name, 3, 2)):
            method(arg)
    with pytest.raises(ValueError, match=r"^length must be finite, got inf$"):
        GaussianInteraction(1.0, float("inf"))
    with pytest.raises(ValueError, match=r"^c must be finite, got nan$"):
        GaussianInteraction(float("nan"))
