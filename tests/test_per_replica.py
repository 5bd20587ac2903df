"""Per-replica parameters: one batched run over B parameter values equals B runs with one value each.

The oracle is a second code path: the scalar parameters (the code every other test checks), run replica by
replica on the same Brownian increments. Plus closed forms (the OU chain's variance per replica, Dyson's
equilibrium at the Hermite zeros) and negative controls (another replica's value, wrong shapes, wrong counts,
negative or NaN temperatures).
"""

import math

import numpy as np
import pytest
import torch

from meanfield import BrownianIncrements, MeanFieldLangevin, NonFiniteStateError, simulate
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
from meanfield.drift.schedules import Constant, Cosine, Exponential, Linear, Step, schedule_from_dict
from meanfield.seeds import resolve_generator

F64 = torch.float64
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
CASES = {
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
@pytest.mark.parametrize("case", list(CASES))
def test_a_batched_run_equals_one_scalar_run_per_replica(case, solver):
    """Replica b of the batched run = the scalar run with value [b] on replica b's increments (to round-off:
    the scalar path folds σ·√dt into one factor, the batched one multiplies σ_b by dW); a run with replica
    b+1's values is the negative control."""
    batched, single = CASES[case]
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
    batched, single = CASES["OU + Curie–Weiss (fused affine step), β per replica"]
    out = simulate(batched(), x, t1=0.5, dt=0.01, brownian=path).final  # (B, M, d) float32
    assert out.dtype == torch.float32
    for b in range(B):
        ref = simulate(single(b), x[b : b + 1], t1=0.5, dt=0.01, brownian=replica(path, b)).final
        assert torch.allclose(out[b], ref[0], rtol=1e-5, atol=1e-6)


def test_a_generator_drawn_batched_run_is_reproducible_and_its_replicas_differ():
    system = MeanFieldLangevin(Quadratic(A), Alignment(K), beta=BETA)
    a = simulate(system, state(), t1=0.2, dt=0.01, generator=np.int64(3)).final
    b = simulate(system, state(), t1=0.2, dt=0.01, generator=3).final
    assert torch.equal(a, b)


def test_ou_stationary_variance_per_replica_is_the_exact_chain_law():
    """V = a/2·x², independent particles, x0 = 0: the Euler chain x' = (1 − ηa)x + sqrt(2βη)ξ has
    Var_n = β/(a(1 − ηa/2))·(1 − (1 − ηa)^{2n}) exactly, per replica with its own a and β (at ηa ≤ 0.1
    the continuous β/a differs by up to 5 %, beyond this test's tolerance at a = 4). Tolerance 5 SE of a
    variance from N = M·d draws (SE = Var·sqrt(2/N)): the smallest detectable error is ≈ 7 %."""
    B, M, d, eta, n = 8, 4000, 1, 0.025, 400
    a = torch.linspace(4.0, 0.5, B, dtype=F64)
    beta = torch.linspace(0.2, 1.5, B, dtype=F64)  # β/a from 0.05 to 3
    x = simulate(
        MeanFieldLangevin(Quadratic(a), beta=beta),
        torch.zeros(B, M, d, dtype=F64),
        t1=n * eta,
        dt=eta,
        generator=11,
    ).final  # (B, M, d)
    var = x.square().mean((1, 2))  # (B,) the mean is 0 exactly in law
    exact = beta / (a * (1 - eta * a / 2)) * (1 - (1 - eta * a) ** (2 * n))  # (B,)
    se = exact * math.sqrt(2 / (M * d))
    assert torch.all((var - exact).abs() < 5 * se), (var, exact)
    # negative control: the values of the reversed grid (another replica's law) are far outside
    swapped = exact.flip(0)
    assert torch.all((var - swapped).abs()[[0, 1, -2, -1]] > 5 * se[[0, 1, -2, -1]])


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


def test_a_per_replica_count_that_is_not_b_is_refused_before_the_first_step():
    system = MeanFieldLangevin(Quadratic(torch.ones(3)), Alignment(torch.ones(4)), beta=0.1)
    with pytest.raises(ValueError, match=r"confinement a has 3 per-replica values, but the state has B = 4"):
        simulate(system, state(B=4), t1=0.1, dt=0.01, generator=0)
    with pytest.raises(ValueError, match=r"beta has 2 per-replica values, but the state has B = 4"):
        simulate(MeanFieldLangevin(Quadratic(), beta=torch.ones(2)), state(B=4), t1=0.1, dt=0.01, generator=0)
    with pytest.raises(
        ValueError, match=r"has 5 per-replica values, but the state has B = 4"
    ):  # in a schedule
        simulate(
            MeanFieldLangevin(Quadratic(), beta=Cosine(torch.ones(5), 0.1, 1.0)),
            state(B=4),
            t1=0.1,
            dt=0.01,
            generator=0,
        )


def test_a_scheduled_temperature_that_turns_negative_in_one_replica_stops_with_its_index():
    beta = lambda t: torch.tensor([0.5, 0.5 - t, 0.5], dtype=F64)  # noqa: E731 — replica 1 below 0 after t = 0.5
    with pytest.raises(ValueError, match=r"beta\(t=0.51\)\[1\] = -0.01.*every replica"):
        simulate(MeanFieldLangevin(Quadratic(), beta=beta), state(B=3), t1=1.0, dt=0.01, generator=0)


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


def test_per_replica_schedules_evaluate_each_replicas_schedule_and_round_trip():
    start, end = torch.tensor([1.0, 0.4, 2.0], dtype=F64), torch.tensor([0.1, 0.2, 0.01], dtype=F64)
    for cls in (Cosine, Linear, Exponential):
        batched = cls(start, end, 10.0)
        for s in (0.0, 3.3, 10.0, 12.0):
            expect = torch.tensor([cls(float(a), float(b), 10.0)(s) for a, b in zip(start, end)], dtype=F64)
            assert torch.allclose(batched(s), expect, rtol=1e-15, atol=0), (cls, s)
        again = schedule_from_dict(batched.to_dict())
        assert again == batched and torch.equal(again(4.0), batched(4.0))
        assert again != cls(start, end + 0.01, 10.0)  # negative control
    step = Step([start, 0.5], [2.0])
    assert torch.equal(step(1.0), start) and step(3.0) == 0.5
    assert schedule_from_dict(step.to_dict()) == step
    assert Constant(torch.tensor([0.1, 0.2], dtype=F64)).to_dict() == {
        "kind": "constant",
        "value": [0.1, 0.2],
    }


def test_one_seed_resolver_for_int_numpy_integer_and_generator():
    ref = torch.randn(5, generator=torch.Generator().manual_seed(7))
    for given in (7, np.int64(7), np.uint32(7), torch.Generator().manual_seed(7)):
        g, seed = resolve_generator(given)
        assert torch.equal(torch.randn(5, generator=g), ref), given
        assert seed == (None if isinstance(given, torch.Generator) else 7)
    g, seed = resolve_generator(None)
    assert isinstance(seed, int) and torch.equal(
        torch.randn(3, generator=g), torch.randn(3, generator=torch.Generator().manual_seed(seed))
    )
    for bad in (True, np.bool_(True), 7.0, "7", np.float64(7.0)):
        with pytest.raises(TypeError, match="must be a torch.Generator, an int seed"):
            resolve_generator(bad)
    with pytest.raises(ValueError, match=r"\[−2\^63, 2\^64\)"):
        resolve_generator(2**64)
    with pytest.raises(TypeError):
        resolve_generator(None, allow_none=False)


def test_every_entry_point_reads_a_seed_the_same_way():
    """simulate, BrownianIncrements.sample, Law1d.sample and the sliced distance's seed: a numpy integer is the
    int it holds (the same numbers); a float or a bool is refused (negative controls)."""
    from meanfield.metrics.wasserstein import Normal, wasserstein

    system = MeanFieldLangevin(Quadratic(A), beta=BETA)
    runs = [
        simulate(system, state(), t1=0.05, dt=0.01, generator=g).final
        for g in (5, np.int64(5), torch.Generator().manual_seed(5))
    ]
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])
    paths = [
        BrownianIncrements.sample(3, (2, 2), 0.1, generator=g).increments
        for g in (9, np.uint16(9), torch.Generator().manual_seed(9))
    ]
    assert torch.equal(paths[0], paths[1]) and torch.equal(paths[0], paths[2])
    assert torch.equal(Normal().sample(4, np.int32(2)), Normal().sample(4, 2))
    x, y = state(B=1, d=3)[0], state(B=1, d=3, seed=1)[0]
    sliced = [wasserstein(x, y, method="sliced", seed=s).cost for s in (3, np.int64(3))]
    assert torch.equal(sliced[0], sliced[1])
    assert not torch.equal(sliced[0], wasserstein(x, y, method="sliced", seed=4).cost)
    for bad in (5.0, True):
        with pytest.raises(TypeError, match="int seed"):
            simulate(system, state(), t1=0.05, dt=0.01, generator=bad)
        with pytest.raises(TypeError, match="int seed"):
            BrownianIncrements.sample(3, (2, 2), 0.1, generator=bad)


def test_b_1_1_values_lists_and_arrays_are_the_same_per_replica_values():
    expect = Alignment(K).kappa  # (B,) float64
    for given in (K.view(B, 1, 1), K.tolist(), K.numpy(), tuple(K.tolist())):
        got = Alignment(given).kappa
        assert got.shape == (B,) and got.dtype == F64 and torch.equal(got, expect)
    with pytest.raises(ValueError, match=r"got a tensor of shape \(1, 4\)"):
        Alignment(K.view(1, B))  # broadcasts to (1, 1, 4), not to (B, 1, 1): refused, not silently transposed
