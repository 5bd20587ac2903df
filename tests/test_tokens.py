"""Tokens as particles (meanfield.nn.tokens): the velocity against an explicit pair sum, the Fourier path against the
pairwise one, the bridge to ParticleAttention both ways, depth = Euler, every solver, the linearised rates."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, special

import meanfield.nn.tokens as tokens
from meanfield import simulate
from meanfield.nn import CausalParticleAttention, ParticleAttention
from meanfield.nn.tokens import (
    SelfAttentionDynamics,
    attention_layer,
    attention_system,
    count_clusters,
    depth_flow,
    fastest_mode,
    fourier_modes,
    growth_rate,
    mean_inner_product,
)
from meanfield.stepping.solvers import SOLVERS


def unit(x):
    return x / x.norm(dim=-1, keepdim=True)


def random_weights(H=3, h=4, d=5, hv=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64) / math.sqrt(s[-1])  # noqa: E731
    return w(H, h, d), w(H, h, d), w(H, hv, d), w(H, d, hv)


def explicit_velocity(x, Q, K, V, O, beta, normalized, causal):
    """V(x)_i = 1/H Σ_m O_m Σ_j A^m_ij V_m x_j with every weight written out (numpy loops over heads and rows)."""
    x, Q, K, V, O = (t.numpy() for t in (x, Q, K, V, O))
    B, n, d = x.shape
    out = np.zeros((B, n, d))
    for b in range(B):
        for m in range(Q.shape[0]):
            q, k, v = x[b] @ Q[m].T, x[b] @ K[m].T, x[b] @ V[m].T
            for i in range(n):
                j = np.arange(n) if not causal else np.arange(i + 1)
                w = np.exp(beta * (k[j] @ q[i]))
                w = w / w.sum() if normalized else w / n
                out[b, i] += O[m] @ (w @ v[j]) / Q.shape[0]
    return torch.from_numpy(out)


@pytest.mark.parametrize("normalized", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_velocity_equals_an_explicit_pair_sum(normalized, causal, monkeypatch):
    Q, K, V, O = random_weights()
    x = torch.randn(2, 7, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    system = SelfAttentionDynamics(Q, K, V, O, inverse_temperature=0.8, normalized=normalized, causal=causal)
    want = explicit_velocity(x, Q, K, V, O, 0.8, normalized, causal)
    assert torch.allclose(system.velocity(x), want, rtol=0, atol=1e-13)
    monkeypatch.setattr(tokens, "_CHUNK_ELEMENTS", 1)  # one query row per chunk: the same numbers
    assert torch.allclose(system.velocity(x), want, rtol=0, atol=1e-13)
    wrong = SelfAttentionDynamics(Q, K, V, O, inverse_temperature=0.8, normalized=not normalized, causal=causal)
    assert (wrong.velocity(x) - want).abs().max() > 1e-3  # negative control: the other normalisation


def test_sphere_drift_is_tangent_and_flow_stays_on_the_sphere():
    system = SelfAttentionDynamics.identity(4, inverse_temperature=2.0, sphere=True)
    x = unit(torch.randn(3, 10, 4, dtype=torch.float64))
    assert (system.drift(0.0, x) * x).sum(-1).abs().max() < 1e-14
    y = simulate(system, x, t1=1.0, dt=0.05).final
    assert (y.norm(dim=-1) - 1).abs().max() < 1e-14


@pytest.mark.parametrize("normalized", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_fourier_path_equals_pairwise_on_the_circle(normalized, causal):
    x = unit(torch.randn(3, 300, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(2)))
    kw = dict(inverse_temperature=6.0, sphere=True, normalized=normalized, causal=causal)
    pair = SelfAttentionDynamics.identity(2, method="pairwise", **kw)
    four = SelfAttentionDynamics.identity(2, method="fourier", **kw)
    assert four.resolved_method(300) == "fourier" and pair.resolved_method(300) == "pairwise"
    scale = pair.drift(0, x).abs().max()
    assert (pair.drift(0, x) - four.drift(0, x)).abs().max() < 1e-13 * max(1.0, scale)


def test_auto_method_and_fourier_restrictions():
    assert SelfAttentionDynamics.identity(2, sphere=True).resolved_method(1000) == "fourier"
    assert SelfAttentionDynamics.identity(2, sphere=True).resolved_method(10) == "pairwise"
    assert SelfAttentionDynamics.identity(3, sphere=True).resolved_method(1000) == "pairwise"
    with pytest.raises(ValueError, match="circle"):
        SelfAttentionDynamics.identity(3, sphere=True, method="fourier")
    Q, K, V, O = random_weights(d=2)
    with pytest.raises(ValueError, match="identity weights"):
        SelfAttentionDynamics(Q, K, V, O, method="fourier", sphere=True).velocity(
            torch.randn(1, 4, 2, dtype=torch.float64)
        )


@pytest.mark.parametrize("cls", [ParticleAttention, CausalParticleAttention])
def test_bridge_layer_to_system_and_back(cls):
    g = torch.Generator().manual_seed(3)
    layer = cls(12, 4, generator=g, dtype=torch.float64)
    x = torch.randn(2, 9, 12, dtype=torch.float64, generator=g)
    system = attention_system(layer)
    assert system.causal == layer.is_causal and system.inverse_temperature == 1 / math.sqrt(3)
    assert torch.allclose(system.drift(0.0, x), layer(x).detach(), rtol=0, atol=1e-14)
    back = attention_layer(system)
    assert torch.allclose(back(x), layer(x).detach(), rtol=0, atol=1e-14)
    # a system with unequal widths and β ≠ 1/√h becomes a layer too (zero padding, β folded into W_Q)
    Q, K, V, O = random_weights(H=2, h=3, d=12, hv=5)
    other = SelfAttentionDynamics(Q, K, V, O, inverse_temperature=0.37)
    assert torch.allclose(attention_layer(other)(x), other.velocity(x), rtol=0, atol=1e-13)
    with pytest.raises(ValueError, match="normalised"):
        attention_layer(SelfAttentionDynamics.identity(12, normalized=False))


def test_depth_flow_is_the_euler_scheme_of_the_system():
    """L residual copies of a layer = simulate(system, dt = T/L) with the native Euler (the network is the scheme)."""
    g = torch.Generator().manual_seed(4)
    layer = ParticleAttention(8, 2, generator=g, dtype=torch.float64)
    x = torch.randn(2, 6, 8, dtype=torch.float64, generator=g)
    net = depth_flow(layer, x, depth=20, T=2.0)
    euler = simulate(attention_system(layer), x, t1=2.0, dt=0.1).final
    assert torch.allclose(net, euler, rtol=0, atol=1e-13)
    assert (
        depth_flow(layer, x, depth=10, T=2.0) - euler
    ).abs().max() > 1e-4  # another depth is another scheme


@pytest.mark.parametrize("solver", list(SOLVERS))
def test_every_solver_runs_the_token_ode(solver):
    """Every solver (noise-free, τ = 0) lands within its first-order error of scipy's DOP853 solution."""
    system = SelfAttentionDynamics(*random_weights(H=2, h=3, d=4, hv=4, seed=5), inverse_temperature=1.0)
    x0 = torch.randn(2, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    rhs = lambda _t, y: system.drift(0.0, torch.from_numpy(y).view(x0.shape)).reshape(-1).numpy()  # noqa: E731
    exact = integrate.solve_ivp(
        rhs, (0, 1), x0.reshape(-1).numpy(), method="DOP853", rtol=1e-12, atol=1e-12
    ).y[:, -1]
    got = simulate(system, x0, t1=1.0, dt=1 / 64, solver=solver, generator=0).final.reshape(-1).numpy()
    assert np.abs(got - exact).max() < 0.02


def test_noise_has_variance_2_tau_dt():
    """With V = 0 (zero value map) the tokens are Brownian: Var = 2τt per coordinate (z = 5 on 60,000 draws:
    detects a 2.9 % error; negative control: a 5 % hotter τ is told apart)."""
    d = 3
    zero = torch.zeros(1, d, d, dtype=torch.float64)
    eye = torch.eye(d, dtype=torch.float64)[None]
    system = SelfAttentionDynamics(eye, eye, zero, inverse_temperature=1.0, temperature=0.3)
    x = simulate(system, torch.zeros(2000, 10, d, dtype=torch.float64), t1=0.5, dt=0.05, generator=7).final
    var, se = x.var().item(), 2 * 0.3 * 0.5 * math.sqrt(2 / x.numel())
    assert abs(var - 0.3) < 5 * se
    assert abs(var - 1.05 * 0.3) > 5 * se


def test_growth_rate_formula():
    ks = np.arange(1, 8)
    beta = 7.0
    # λ_k from the Fourier coefficient of h(u) = −e^{β cos u} sin u, computed by quadrature (independent of Bessel
    # identities): ĥ_k = (1/2π) ∫ h(u) e^{−iku} du = i·k·I_k(β)/β, λ_k = −ik·ĥ_k/Z, Z = I_0(β) (SA)
    for k in ks:
        im = integrate.quad(
            lambda u, k=k: math.exp(beta * math.cos(u)) * math.sin(u) * math.sin(k * u), 0, 2 * math.pi
        )[0]
        lam_usa = k * im / (2 * math.pi)
        assert abs(growth_rate(k, beta, normalized=False) - lam_usa) < 1e-9 * lam_usa
        assert abs(growth_rate(k, beta) - lam_usa / special.i0(beta)) < 1e-9 * lam_usa / special.i0(beta)
    assert np.allclose(growth_rate([1, 2], 1e-9), [0.5, 0.0], atol=1e-8)
    assert growth_rate([1, 2], 0.0).tolist() == [0.5, 0.0]
    # one return type per input kind at every β: a scalar mode gives a NumPy scalar (β = 0 once gave a 0-d array)
    for beta in (0.0, 7.0):
        assert type(growth_rate(1, beta)) is np.float64 and growth_rate(np.arange(1, 3), beta).shape == (2,)
    assert growth_rate(1, 0.0) == 0.5 and growth_rate(3, 0.0) == 0.0
    assert fastest_mode(9.0) == 4 and fastest_mode(1.0) == 1
    assert abs(fastest_mode(800.0) - math.sqrt(2 * 800)) <= 1.5  # k* ≈ sqrt(2β)


def test_cloud_measures():
    theta = torch.tensor([0.0, 0.01, 0.02, math.pi, math.pi + 0.01], dtype=torch.float64)
    x = torch.stack((theta.cos(), theta.sin()), -1)[None]  # (1, 5, 2): two clusters
    assert count_clusters(x, radius=0.1).tolist() == [2]
    assert count_clusters(x, radius=3.0).tolist() == [1]
    c = fourier_modes(x, [0, 1, 2])
    assert torch.allclose(c[0, 0], torch.tensor(1.0 + 0j, dtype=c.dtype))
    assert abs(c[0, 2].abs().item() - 1) < 1e-3 and c[0, 1].abs().item() < 0.25
    assert abs(mean_inner_product(x).item() - ((x[0].sum(0) / 5).square().sum()).item()) < 1e-15
    one = unit(torch.ones(1, 4, 3, dtype=torch.float64))
    assert abs(mean_inner_product(one).item() - 1) < 1e-15


def test_bad_input():
    eye = torch.eye(3, dtype=torch.float64)
    with pytest.raises(ValueError, match="inverse_temperature"):
        SelfAttentionDynamics(eye, eye, eye, inverse_temperature=-1.0)
    with pytest.raises(ValueError, match="temperature"):
        SelfAttentionDynamics(eye, eye, eye, temperature=-0.1)
    with pytest.raises(ValueError, match="key must have the shape"):
        SelfAttentionDynamics(eye, eye[:2], eye)
    with pytest.raises(ValueError, match="pass output"):
        SelfAttentionDynamics(eye, eye, eye[:2])
    with pytest.raises(ValueError, match="NaN"):
        SelfAttentionDynamics(eye * math.nan, eye, eye)
    with pytest.raises(ValueError, match="method"):
        SelfAttentionDynamics(eye, eye, eye, method="fft")
    with pytest.raises(TypeError, match="ParticleAttention"):
        attention_system(torch.nn.Linear(3, 3))
    with pytest.raises(ValueError, match="d = 2"):
        fourier_modes(torch.zeros(1, 3, 3), 1)


@pytest.mark.slow
@pytest.mark.parametrize("script", ["heads_in_m", "panels"])
def test_token_dynamics_experiments_smoke(script, tmp_path):
    """The experiments' smoke presets run end to end and write their files; heads_in_m's W2 falls with M."""
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).parents[1] / "experiments" / "token_dynamics" / f"{script}.py"
    spec = importlib.util.spec_from_file_location(script, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--preset", "smoke", "--out", str(tmp_path)])
    summary = json.loads((tmp_path / "summary.json").read_text())
    if script == "heads_in_m":
        means = [row["mean"] for row in summary["rows"]]
        assert means[0] > means[-1] > 0 and summary["slope"] < 0
        assert (tmp_path / "tables.md").read_text().startswith("Heads of width")
    else:
        assert summary["sphere"][0]["final_inner"] > 0.99  # β = 1 on S²: one cluster by t = 5
