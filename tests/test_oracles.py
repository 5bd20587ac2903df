"""Every drift, solver step and study against an oracle that does not share its code (issue 12).

Oracles used here:

- **Drifts**: ``b = −∇_x (M · E)`` by autograd of an energy written independently below (explicit pair sums
  over all ``(i, j)``, not the library's O(M) or chunked forms), for every confinement × interaction, through
  ``MeanFieldLangevin.drift``, the generic Euler move, the fused affine move and :func:`simulate`.
- **Fused affine path == generic path** (``ParticleSystem.euler_update_``) for every affine system, and the
  same run through ``simulate`` as a :class:`~meanfield.SDE` (which only has the generic path).
- **Solvers**: one step of each scheme written out from its textbook formula (Euler, Heun, midpoint,
  Euler–Heun) with the autograd drift; srk / reversible_heun / log_ode are checked against the exact GBM
  solution by their strong orders in ``tests/test_orders.py``.
- **Studies**: ``convergence_in_m`` on clouds whose distance to ``U(0, 1)`` is known in closed form.

``test_every_public_name_has_a_named_oracle`` keeps the list honest: a new public drift, noise source,
solver, metric or layer fails it until its oracle test is named in :data:`ORACLES`.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import torch

import meanfield.drift.potentials
import meanfield.metrics
import meanfield.nn
import meanfield.nn.tokens
import meanfield.stepping.brownian
from meanfield import SDE, BrownianIncrements, MeanFieldLangevin, simulate
from meanfield.drift.potentials import (
    Alignment,
    DoubleWell,
    GaussianInteraction,
    Quadratic,
    QuadraticInteraction,
    RadialInteraction,
)
from meanfield.drift.projections import Sphere
from meanfield.drift.schedules import Linear
from meanfield.drift.systems import ParticleSystem
from meanfield.stepping.solvers import SOLVERS

TESTS = Path(__file__).parent


def cloud(B=2, M=9, d=3, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(B, M, d, generator=g, dtype=torch.float64)


# ---------------------------------------------------------------------------------------------------------
# Independent energies: V per particle, W on explicit pairs (B, M, M, d)


def _V(name, params):
    if name == "quadratic":
        (a,) = params
        return lambda x: 0.5 * a * (x * x).sum(-1)
    if name == "double_well":
        return lambda x: (x**4 / 4 - x**2 / 2).sum(-1)
    raise KeyError(name)


def _W(name, params):
    """W(x_i, x_j) on pairs: x_i (B, M, 1, d), x_j (B, 1, M, d) -> (B, M, M)."""
    if name == "quadratic":
        (k,) = params
        return lambda xi, xj: 0.5 * k * ((xi - xj) ** 2).sum(-1)
    if name == "alignment":
        (kappa,) = params
        return lambda xi, xj: -kappa * (xi * xj).sum(-1)
    if name == "gaussian":
        c, length = params
        return lambda xi, xj: c * torch.exp(-((xi - xj) ** 2).sum(-1) / (2 * length**2))
    if name == "soft_coulomb":
        return lambda xi, xj: 1.0 / (1.0 + ((xi - xj) ** 2).sum(-1))
    raise KeyError(name)


def total_energy(V, W, x):
    """``Σ_i V(x_i) + 1/(2M) Σ_{i,j} W(x_i, x_j)`` per replica, (B,): M times the free energy per particle."""
    M = x.shape[1]
    e = V(x).sum(-1)  # (B,)
    if W is not None:
        e = e + W(x[:, :, None, :], x[:, None, :, :]).sum((-1, -2)) / (2 * M)
    return e


def autograd_drift(V, W, x):
    """``−∇_x (M · E)(x)`` by autograd: (B, M, d)."""
    y = x.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(total_energy(V, W, y).sum(), y)
    return -g


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


def system_and_oracle(c, i, beta=0.3, projection=None):
    conf, (vname, vpar) = CONFINEMENTS[c]
    inter, wspec = INTERACTIONS[i]
    V = _V(vname, vpar)
    W = None if wspec is None else _W(*wspec)
    return MeanFieldLangevin(conf, inter, beta=beta, projection=projection), V, W


@pytest.mark.parametrize("c,i", PAIRS)
def test_drift_is_minus_the_gradient_of_M_times_the_energy(c, i):
    """Oracle: autograd of an independently written energy. ``drift``, the generic Euler move, the fused
    move and the library's own ``energy`` (times M) all agree with it to round-off (float64)."""
    system, V, W = system_and_oracle(c, i)
    x = cloud()
    b = autograd_drift(V, W, x)
    assert torch.allclose(system.drift(0.0, x), b, rtol=1e-10, atol=1e-12), "drift()"
    assert torch.allclose(system.energy(x) * x.shape[1], total_energy(V, W, x), rtol=1e-12, atol=1e-12)
    noise, dt = cloud(seed=1), 0.03
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
    x = cloud()
    assert not torch.allclose(flipped.drift(0.0, x), autograd_drift(V, W, x), rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("c,i", PAIRS)
def test_simulate_generic_and_fused_paths_follow_the_oracle_step_by_step(c, i):
    """One run of ``simulate`` (native Euler, pre-drawn increments) against the recursion
    ``x_{n+1} = x_n + dt·(−∇ME)(x_n) + sqrt(2β_n)·dW_n`` with the autograd drift and a β schedule."""
    beta = Linear(0.5, 0.1, T=0.1)
    system, V, W = system_and_oracle(c, i, beta=beta)
    x0, dt, n = cloud(M=7), 0.02, 5
    path = BrownianIncrements.sample(n, tuple(x0.shape), dt, generator=torch.Generator().manual_seed(2))
    run = simulate(system, x0, t1=n * dt, dt=dt, brownian=path, save_every=1).states
    x = x0.clone()
    for step in range(n):
        t = step * dt
        x = x + dt * autograd_drift(V, W, x) + math.sqrt(2 * beta(t)) * path.increments[step]
        assert torch.allclose(run[step + 1], x, rtol=1e-10, atol=1e-12), f"step {step + 1}"


AFFINE = [
    (Quadratic(1.3), None),
    (Quadratic(0.0), QuadraticInteraction(0.7)),
    (Quadratic(2.0), QuadraticInteraction(-0.4)),
    (Quadratic(0.0), None),
]


@pytest.mark.parametrize("conf,inter", AFFINE)
@pytest.mark.parametrize("beta", [0.3, Linear(1.0, 0.0, T=0.1)])
@pytest.mark.parametrize("projection", [None, Sphere()])
def test_fused_affine_path_equals_the_generic_path(conf, inter, beta, projection):
    """Oracle: the same system as an :class:`SDE` (generic path only) with the same increments, over 8 steps
    of ``simulate``; and one fused move against ``ParticleSystem.euler_update_``."""
    system = MeanFieldLangevin(conf, inter, beta=beta, projection=projection)
    assert system._affine  # these are the systems with a fused move
    x0, dt, n = cloud(M=11), 0.01, 8
    noise = cloud(M=11, seed=3)
    generic = ParticleSystem.euler_update_(system, 0.0, x0.clone(), dt, noise)
    assert torch.allclose(system.euler_update_(0.0, x0.clone(), dt, noise), generic, rtol=1e-12, atol=1e-13)
    as_sde = SDE(
        system.drift,
        lambda t, x: system.diffusion(t, x),
        noise="additive",
        projection=projection,
    )
    path = BrownianIncrements.sample(n, tuple(x0.shape), dt, generator=torch.Generator().manual_seed(4))
    fused = simulate(system, x0, t1=n * dt, dt=dt, brownian=path, save_every=1).states
    slow = simulate(as_sde, x0, t1=n * dt, dt=dt, brownian=path, save_every=1).states
    assert torch.allclose(fused, slow, rtol=1e-10, atol=1e-12)
    # negative control: the other sign of the interaction (or of the confinement) is seen
    k = inter.k if inter is not None else 0.0
    wrong = MeanFieldLangevin(Quadratic(conf.a + 0.5), QuadraticInteraction(-k - 0.5), beta=beta)
    other = simulate(wrong, x0, t1=n * dt, dt=dt, brownian=path, save_every=1).states
    assert not torch.allclose(other, slow, rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------------------------------------------------
# Solvers: one step written out from the scheme's formula (additive noise, σ = sqrt(2β))


def _euler(f, x, dt, s_dW):
    return x + dt * f(x) + s_dW


def _heun(f, x, dt, s_dW):  # Stratonovich Heun: predictor, then the trapezoid
    pred = x + dt * f(x) + s_dW
    return x + 0.5 * dt * (f(x) + f(pred)) + s_dW


def _midpoint(f, x, dt, s_dW):
    mid = x + 0.5 * dt * f(x) + 0.5 * s_dW
    return x + dt * f(mid) + s_dW


ONE_STEP = {
    "euler": _euler,
    "torchsde_euler": _euler,
    "milstein": _euler,  # the Milstein correction σσ' vanishes for additive noise
    "euler_heun": _euler,  # ½(g(x) + g(x + g dW)) dW = σ dW for additive noise
    "heun": _heun,
    "midpoint": _midpoint,
}
BY_ORDER_TESTS = {"srk", "reversible_heun", "log_ode"}  # checked against exact GBM paths (test_orders.py)


def test_every_solver_has_a_one_step_oracle_or_an_order_test():
    assert set(SOLVERS) == set(ONE_STEP) | BY_ORDER_TESTS


@pytest.mark.parametrize("name", sorted(ONE_STEP))
@pytest.mark.parametrize(
    "c,i", [("DoubleWell", "GaussianInteraction(0.8,0.6)"), ("Quadratic(1.3)", "QuadraticInteraction(0.7)")]
)
def test_one_solver_step_equals_the_scheme_with_the_autograd_drift(name, c, i):
    """Oracle: the scheme's formula with ``f = −∇(M·E)`` by autograd; two steps (the second from the
    solver's own first state), so that a stepper carrying a wrong state between steps is seen too."""
    system, V, W = system_and_oracle(c, i, beta=0.3)
    x0, dt = cloud(M=6, scale=0.7), 0.05
    path = BrownianIncrements.sample(2, tuple(x0.shape), dt, generator=torch.Generator().manual_seed(6))
    states = simulate(system, x0, t1=2 * dt, dt=dt, brownian=path, solver=name, save_every=1).states
    sigma = math.sqrt(0.6)

    def f(x):
        return autograd_drift(V, W, x)

    for n in range(2):
        expected = ONE_STEP[name](f, states[n], dt, sigma * path.increments[n])
        assert torch.allclose(states[n + 1], expected, rtol=1e-9, atol=1e-11), f"{name} step {n + 1}"
    # negative control: Euler and Heun differ at this step size, so the oracles can tell schemes apart
    assert not torch.allclose(
        _euler(f, x0, dt, sigma * path.increments[0]), _heun(f, x0, dt, sigma * path.increments[0]), atol=1e-6
    )


# ---------------------------------------------------------------------------------------------------------
# Studies: a cloud with a closed-form distance to U(0, 1)


def test_convergence_in_m_on_midpoint_clouds_is_exact():
    """Oracle: the midpoints ``(i + ½)/M`` of M equal cells are at ``W2² = 1/(12 M²)`` and ``W1 = 1/(4M)``
    from ``U(0, 1)`` (each cell contributes ``∫|x_i − u|^p du``), so the slope is exactly −2 (−1 for W1)."""
    from meanfield.metrics import Uniform
    from meanfield.studies.in_memory import convergence_in_m

    def sample(M, reps):
        mid = (torch.arange(M, dtype=torch.float64) + 0.5) / M
        return mid.repeat(reps, 1).unsqueeze(-1)  # (reps, M, 1)

    Ms = [4, 8, 16, 32]
    gen = torch.Generator().manual_seed(0)
    w2 = convergence_in_m(sample, Ms, reps=3, reference=Uniform(), generator=gen, n_boot=50, progress=False)
    expected = torch.tensor([1 / (12 * M**2) for M in Ms], dtype=torch.float64)
    assert torch.allclose(w2.mean, expected, rtol=1e-10)
    assert abs(w2.slope - (-2.0)) < 1e-8
    w1 = convergence_in_m(
        sample, Ms, reps=3, reference=Uniform(), generator=gen, metric="w1", n_boot=50, progress=False
    )
    assert torch.allclose(w1.mean, torch.tensor([1 / (4 * M) for M in Ms], dtype=torch.float64), rtol=1e-10)
    assert abs(w1.slope - (-1.0)) < 1e-8
    shifted = convergence_in_m(
        lambda M, reps: sample(M, reps) + 0.01,
        Ms,
        reps=3,
        reference=Uniform(),
        generator=gen,
        n_boot=50,
        progress=False,
    )  # negative control: a shift of 0.01 adds ≈1e-4 to W2²
    assert not torch.allclose(shifted.mean, expected, rtol=1e-3)


@pytest.mark.filterwarnings("ignore:Sinkhorn did not converge")  # the default ε: checked to 1e-3 below anyway
def test_sinkhorn_divergence_of_a_translation_is_exactly_the_squared_shift():
    """Oracle: for the squared-Euclidean cost the entropic OT of ``μ`` and ``μ + v`` is ``OT_ε(μ, μ) + |v|²``
    (the cross term is the same for every coupling), so the debiased divergence is ``|v|²`` for every ε;
    exact OT and 1-D sorting give ``W2² = |v|²`` too. Tolerance: the solver's stopping rule (rtol 1e-3)."""
    from meanfield.metrics.wasserstein import wasserstein

    x = cloud(B=1, M=40, d=2, seed=8)[0]
    v = torch.tensor([0.3, -0.4], dtype=torch.float64)
    for eps in (None, 0.05, 1.0):
        s = wasserstein(x, x + v, method="sinkhorn", epsilon=eps).cost
        assert abs(float(s) - 0.25) < 1e-3 * 0.25 + 1e-6, eps
    assert abs(float(wasserstein(x, x + v, method="exact").cost) - 0.25) < 1e-12
    x1 = x[:, :1]
    assert abs(float(wasserstein(x1, x1 + 0.3, method="1d").cost) - 0.09) < 1e-12
    # negative control: a different shift is told apart
    assert abs(float(wasserstein(x, x + 1.1 * v, method="sinkhorn").cost) - 0.25) > 1e-2


def test_minibatch_gradients_equal_the_hand_derived_gradient():
    """Oracle: for ``L(θ) = ½ mean_n (θ·x_n − y_n)²`` the gradient is ``mean_n (θ·x_n − y_n) x_n``."""
    from meanfield.metrics import gradient_variance, minibatch_gradients

    g = torch.Generator().manual_seed(1)
    theta = torch.randn(4, generator=g, dtype=torch.float64, requires_grad=True)
    batches = [
        (
            torch.randn(5, 4, generator=g, dtype=torch.float64),
            torch.randn(5, generator=g, dtype=torch.float64),
        )
        for _ in range(6)
    ]
    grads = minibatch_gradients([theta], lambda b: 0.5 * ((b[0] @ theta - b[1]) ** 2).mean(), batches)
    t = theta.detach()
    expected = torch.stack([((X @ t - y)[:, None] * X).mean(0) for X, y in batches])
    assert torch.allclose(grads, expected, atol=1e-12)
    centred = expected - expected.mean(0)
    assert torch.allclose(gradient_variance(grads), (centred**2).sum() / 5, atol=1e-12)
    assert theta.grad is None


# ---------------------------------------------------------------------------------------------------------
# The Transformer LM and its multi-head attention: an explicit forward, head by head


def _layer_norm(x, weight, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * weight


def _causal_softmax(scores):
    T = scores.shape[-1]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(-1)


def _explicit_attention(layer, x):
    from meanfield.nn import CausalParticleAttention, CausalSelfAttention

    if isinstance(layer, CausalSelfAttention):
        d, H = layer.d_model, layer.n_heads
        h = d // H
        Wq, Wk, Wv = layer.qkv.weight.split(d, 0)  # 3 × (d, d), nn.Linear (out, in)
        heads = []
        for j in range(H):
            rows = slice(j * h, (j + 1) * h)
            q, k, v = x @ Wq[rows].T, x @ Wk[rows].T, x @ Wv[rows].T  # (B, T, h)
            heads.append(_causal_softmax(q @ k.transpose(-1, -2) / math.sqrt(h)) @ v)
        return torch.cat(heads, -1) @ layer.out.weight.T
    assert isinstance(layer, CausalParticleAttention)
    M, h = layer.n_particles, layer.d_head
    out = 0
    for i in range(M):
        q, k, v = x @ layer.W_Q[i], x @ layer.W_K[i], x @ layer.W_V[i]  # (B, T, h)
        out = out + _causal_softmax(q @ k.transpose(-1, -2) / math.sqrt(h)) @ v @ layer.W_O[i]
    return out / M


@pytest.mark.parametrize("attention", ["mha", "particle"])
def test_transformer_lm_equals_an_explicit_forward(attention):
    """Oracle: the model written out (LayerNorm by its formula, attention head by head with an explicit causal
    mask, ``x ← x + Δt·Attn(LN x)``, ``x ← x + Δt·MLP(LN x)``, tied head), and the loss as the mean of
    ``−log softmax``. Negative control: the same oracle with ``Δt = 1`` differs."""
    from meanfield.nn import TransformerLM

    g = torch.Generator().manual_seed(0)
    model = TransformerLM(11, 8, 12, 2, 3, attention=attention, dt=0.7, generator=g, dtype=torch.float64)
    with torch.no_grad():  # LayerNorm weights away from 1, so that a missing weight is seen
        for p in model.parameters():
            if p.dim() == 1:
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    idx = torch.randint(0, 11, (2, 6), generator=g)

    def explicit(dt):
        x = model.token_embedding.weight[idx] + model.position_embedding.weight[:6]
        for block in model.blocks:
            x = x + dt * _explicit_attention(block.attention, _layer_norm(x, block.ln1.weight))
            hidden = torch.nn.functional.gelu(_layer_norm(x, block.ln2.weight) @ block.mlp[0].weight.T)
            x = x + dt * hidden @ block.mlp[2].weight.T
        return _layer_norm(x, model.ln_f.weight) @ model.token_embedding.weight.T

    with torch.no_grad():
        logits = model(idx)
        expected = explicit(0.7)
        assert torch.allclose(logits, expected, rtol=1e-10, atol=1e-12)
        assert not torch.allclose(logits, explicit(1.0), atol=1e-6)
        targets = torch.randint(0, 11, (2, 6), generator=g)
        nll = -expected.log_softmax(-1).gather(-1, targets[..., None]).mean()
        assert torch.allclose(model.loss(idx, targets), nll, rtol=1e-12)


# ---------------------------------------------------------------------------------------------------------
# Every public name has a named oracle

ORACLES: dict[str, list[str]] = {
    # potentials: autograd of an independent pair-sum energy
    **{
        n: ["test_oracles.py::test_drift_is_minus_the_gradient_of_M_times_the_energy"]
        for n in (
            "Quadratic",
            "DoubleWell",
            "QuadraticInteraction",
            "Alignment",
            "RadialInteraction",
            "GaussianInteraction",
        )
    },
    "Confinement": ["test_oracles.py::test_drift_is_minus_the_gradient_of_M_times_the_energy"],
    "Interaction": ["test_oracles.py::test_drift_is_minus_the_gradient_of_M_times_the_energy"],
    # singular kernels (self-pair left out): autograd of a dense pair energy; Dyson's Hermite-zero equilibrium
    **{
        n: [
            "test_per_replica.py::test_per_replica_pair_drift_is_the_gradient_of_a_dense_pair_energy",
            "test_per_replica.py::test_dyson_equilibrium_is_the_hermite_zeros_per_replica",
        ]
        for n in ("LogInteraction", "RieszInteraction")
    },
    "Discrete": ["test_laws1d.py::test_a_law_from_a_sample_gives_the_two_cloud_distance"],
    # noise sources: covariance across entries, particles, steps (and the Lévy areas)
    "NoiseSource": ["test_noise_covariance.py::test_noise_sources_are_white"],
    "GaussianNoise": [
        "test_noise_covariance.py::test_noise_sources_are_white",
        "test_noise_covariance.py::test_levy_areas_are_independent_of_the_increments",
    ],
    "RademacherNoise": [
        "test_noise_covariance.py::test_noise_sources_are_white",
        "test_noise_covariance.py::test_shared_bits_are_caught",
    ],
    "BrownianIncrements": [
        "test_noise_covariance.py::test_noise_sources_are_white",
        "test_noise_covariance.py::test_coarsened_increments_are_white",
    ],
    # solvers
    **{
        n: ["test_oracles.py::test_one_solver_step_equals_the_scheme_with_the_autograd_drift"]
        for n in ONE_STEP
    },
    **{
        n: [
            "test_orders.py::test_strong_order_on_gbm",
            "test_orders.py::test_every_solver_converges_to_the_ito_law_of_gbm",
        ]
        for n in BY_ORDER_TESTS
    },
    # metrics: a second implementation, a closed form or quadrature
    "w2": ["test_wasserstein.py::test_exact_matches_pot_emd2_and_linear_sum_assignment"],
    "w1": ["test_wasserstein.py::test_w2_is_the_square_root_of_w2_squared_and_w1_is_the_p1_cost"],
    "w2_squared": ["test_wasserstein.py::test_exact_matches_pot_emd2_and_linear_sum_assignment"],
    "w2_gaussian": [
        "test_wasserstein.py::test_w2_gaussian_known_cases",
        "test_wasserstein.py::test_w2_gaussian_agrees_with_large_sample_exact_ot",
    ],
    "wasserstein_to_law": ["test_wasserstein.py::test_wasserstein_to_law_matches_numerical_quadrature"],
    "Law1d": ["test_wasserstein.py::test_law_quantile_integrals_match_quadrature"],
    "Normal": ["test_wasserstein.py::test_law_quantile_integrals_match_quadrature"],
    "Uniform": ["test_wasserstein.py::test_law_quantile_integrals_match_quadrature"],
    "WassersteinResult": [
        "test_wasserstein.py::test_w2_is_the_square_root_of_w2_squared_and_w1_is_the_p1_cost"
    ],
    "METHODS": [
        "test_wasserstein.py::test_1d_unequal_sizes_and_weights_match_pot_and_exact_ot",
        "test_wasserstein.py::test_sliced_of_a_translation_is_the_mean_squared_projection",
        "test_oracles.py::test_sinkhorn_divergence_of_a_translation_is_exactly_the_squared_shift",
    ],
    "EXACT_MAX_POINTS": ["test_wasserstein.py::test_auto_picks_by_dimension_and_size_and_says_which"],
    "SINKHORN_MAX_POINTS": ["test_wasserstein.py::test_auto_picks_by_dimension_and_size_and_says_which"],
    "sinkhorn_divergence": [
        "test_wasserstein.py::test_sinkhorn_divergence_matches_pot_and_approaches_exact_ot",
        "test_pairwise.py::test_sinkhorn_divergence_with_the_geomloss_schedule_equals_geomloss",
        "test_pairwise.py::test_sinkhorn_p1_matches_pots_converged_value",
    ],
    "SinkhornResult": ["test_wasserstein.py::test_sinkhorn_divergence_matches_pot_and_approaches_exact_ot"],
    "resolve_method": ["test_wasserstein.py::test_auto_picks_by_dimension_and_size_and_says_which"],
    # entropy and KL: closed forms (Gaussians, boxes, products), quadrature (a mixture), brute-force jackknife
    "entropy": [
        "metrics/test_entropy.py::test_knn_gaussian_full_covariance",
        "metrics/test_entropy.py::test_gaussian_high_dimension",
        "metrics/test_entropy.py::test_uniform_box",
        "metrics/test_entropy.py::test_product_law",
        "metrics/test_entropy.py::test_mixture_by_quadrature",
        "metrics/test_entropy.py::test_jackknife_is_the_leave_one_out_formula",
    ],
    "kl": [
        "metrics/test_entropy.py::test_kl_gaussians_two_forms",
        "metrics/test_entropy.py::test_jackknife_is_the_leave_one_out_formula",
    ],
    "EntropyEstimate": ["metrics/test_entropy.py::test_standard_errors_bracket_the_replica_sd"],
    "KLEstimate": ["metrics/test_entropy.py::test_standard_errors_bracket_the_replica_sd"],
    "ENTROPY_METHODS": ["metrics/test_entropy.py::test_gaussian_high_dimension"],
    "bsy_weights": ["metrics/test_entropy.py::test_bsy_weights_cancel_the_bias_terms"],
    "pairwise_cosine": ["test_diversity.py::test_pairwise_cosine_identical_orthogonal_and_known_angle"],
    "attention_similarity": ["test_diversity.py::test_attention_similarity_identical_and_disjoint_maps"],
    "mean_off_diagonal": ["test_diversity.py::test_pairwise_cosine_identical_orthogonal_and_known_angle"],
    "output_covariance": ["test_diversity.py::test_output_covariance_matches_numpy_and_known_ranks"],
    "effective_rank": ["test_diversity.py::test_effective_rank_known_values"],
    "teacher_alignment": ["test_diversity.py::test_teacher_alignment_and_aligned_fraction"],
    "aligned_fraction": ["test_diversity.py::test_teacher_alignment_and_aligned_fraction"],
    "collapse_rate": [
        "test_diversity.py::test_collapse_rate",
        "test_diversity.py::test_collapse_rate_sign_and_dead_particles",
    ],
    "teacher_coverage": ["test_diversity.py::test_aligned_fraction_blind_spot_and_coverage"],
    "live_particles": ["test_diversity.py::test_live_particles"],
    "mode_labels": ["test_diversity.py::test_distinct_modes_known_clusters_and_rule"],
    "distinct_modes": ["test_diversity.py::test_distinct_modes_known_clusters_and_rule"],
    "minibatch_gradients": ["test_oracles.py::test_minibatch_gradients_equal_the_hand_derived_gradient"],
    "gradient_variance": ["test_oracles.py::test_minibatch_gradients_equal_the_hand_derived_gradient"],
    "mean_abs_loss_change": ["test_diversity.py::test_loss_smoothness_known_values"],
    "detrended_loss_variance": ["test_diversity.py::test_loss_smoothness_known_values"],
    # layers: explicit per-head / per-neuron loops, nn.MultiheadAttention
    "ParticleLayer": ["test_nn.py::test_subsample_matches_recomputing_with_those_particles"],
    "ParticleAttention": [
        "test_nn.py::test_equals_multihead_attention_with_output_scaled",
        "test_nn.py::test_particle_outputs_match_explicit_heads",
    ],
    "CausalParticleAttention": [
        "test_nn.py::test_equals_multihead_attention_with_output_scaled",
        "test_nn.py::test_causal_output_ignores_future_tokens",
    ],
    "FeatureParticles": ["test_nn.py::test_features_formula"],
    "TransformerLM": ["test_oracles.py::test_transformer_lm_equals_an_explicit_forward"],
    "CausalSelfAttention": ["test_oracles.py::test_transformer_lm_equals_an_explicit_forward"],
    "ATTENTIONS": ["test_oracles.py::test_transformer_lm_equals_an_explicit_forward"],
    "ACTIVATIONS": ["test_nn.py::test_features_formula"],
    "SubsampleStrategy": ["test_nn.py::test_strategies_return_distinct_particles_among_duplicates"],
    "SUBSAMPLE_STRATEGIES": ["test_nn.py::test_strategies_return_distinct_particles_among_duplicates"],
    "Random": ["test_nn.py::test_random_subsample_is_reproducible_and_uniform"],
    "Importance": ["test_nn.py::test_importance_is_gradient_of_a_per_particle_mask"],
    "FarthestPoint": ["test_nn.py::test_farthest_keeps_one_particle_per_cluster"],
    "Medoids": ["test_nn.py::test_medoids_are_cluster_medoids_and_lower_the_quantisation_error"],
    # the free energy of particle layers: the closed form on exact Gaussian particles
    **{
        n: ["nn/test_gibbs.py::test_gaussian_particles_have_the_closed_form_free_energy"]
        for n in ("free_energy", "NetworkFreeEnergy", "LayerEntropy")
    },
    # the optimizer's noise (drift oracle: test_optim.py's independent implementation of the step)
    "Langevin": ["test_optim_noise.py::test_optimizer_noise_is_white_across_parameters_groups_and_steps"],
    "convergence_in_m": ["test_oracles.py::test_convergence_in_m_on_midpoint_clouds_is_exact"],
    # tokens through depth: an explicit pair sum (numpy loops), the pairwise path for the Fourier one, the layer
    "SelfAttentionDynamics": [
        "test_tokens.py::test_velocity_equals_an_explicit_pair_sum",
        "test_tokens.py::test_fourier_path_equals_pairwise_on_the_circle",
    ],
    "attention_system": ["test_tokens.py::test_bridge_layer_to_system_and_back"],
    "attention_layer": ["test_tokens.py::test_bridge_layer_to_system_and_back"],
    "depth_flow": ["test_tokens.py::test_depth_flow_is_the_euler_scheme_of_the_system"],
    "growth_rate": ["test_tokens.py::test_growth_rate_formula"],
    "fastest_mode": ["test_tokens.py::test_growth_rate_formula"],
    "fourier_modes": ["test_tokens.py::test_cloud_measures"],
    "mean_inner_product": ["test_tokens.py::test_cloud_measures"],
    "count_clusters": ["test_tokens.py::test_cloud_measures"],
}


def _public():
    names = set(meanfield.drift.potentials.__all__) | set(meanfield.stepping.brownian.__all__) | set(SOLVERS)
    names |= set(meanfield.metrics.__all__) | set(meanfield.nn.__all__) | {"Langevin", "convergence_in_m"}
    names |= set(meanfield.nn.tokens.__all__)
    return names


def test_every_public_name_has_a_named_oracle():
    """Each public drift, noise source, solver, metric and layer names the test that holds its oracle, and
    that test exists (so that a renamed or deleted oracle test is noticed)."""
    missing = sorted(_public() - set(ORACLES))
    assert not missing, f"name an oracle test for {missing} in ORACLES"
    defined: dict[str, set[str]] = {}
    for refs in ORACLES.values():
        for ref in refs:
            file, func = ref.split("::")
            if file not in defined:
                tree = ast.parse((TESTS / file).read_text())
                defined[file] = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
            assert func in defined[file], f"{ref} does not exist"
