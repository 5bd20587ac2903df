"""Tokens as particles (meanfield.nn.tokens): the velocity against an explicit pair sum, the Fourier path against the
pairwise one, the bridge to ParticleAttention both ways, depth = Euler, every solver, the linearised rates."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from scipy import integrate, special

import meanfield.nn.tokens as tk
import meanfield.nn.tokens as tokens
from meanfield import simulate
from meanfield.drift.projections import Sphere
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

    path = Path(__file__).parents[2] / "experiments" / "token_dynamics" / f"{script}.py"
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


F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _circle(B=2, n=7, seed=30, radius=1.0):
    theta = torch.rand(B, n, generator=_gen(seed), dtype=F64) * 2 * math.pi
    return radius * torch.stack((theta.cos(), theta.sin()), -1)


def _direct_velocity(x: np.ndarray, beta: float, normalized: bool, causal: bool) -> np.ndarray:
    """``Σ_j e^{β⟨x_i, x_j⟩} x_j / Z_i`` over ``j`` (``j ≤ i`` if causal), ``Z_i`` the sum of the weights (SA)
    or ``n`` (USA), for unit tokens: the definition, summed pair by pair."""
    B, n, _ = x.shape
    out = np.zeros_like(x)
    for b in range(B):
        for i in range(n):
            js = range(i + 1) if causal else range(n)
            w = np.array([math.exp(beta * float(x[b, i] @ x[b, j])) for j in js])
            z = w.sum() if normalized else n
            out[b, i] = sum(wj * x[b, j] for wj, j in zip(w, js)) / z
    return out


@pytest.mark.parametrize("beta", [0.0, 0.7, 9.0])
@pytest.mark.parametrize("normalized", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_fourier_velocity_is_the_sum_over_token_pairs(beta, normalized, causal):
    """``method="fourier"`` (modes in blocks of 8: β = 9 needs several blocks, β = 0 one mode) equals the
    direct pairwise sum (numpy) for SA and USA, causal or not, to 1e-12 relative; tokens off the unit circle
    are taken at their angle (radius 2 gives the unit-circle answer). Negative control: the answer at
    another β differs."""
    system = SelfAttentionDynamics.identity(
        2, inverse_temperature=beta, sphere=True, normalized=normalized, causal=causal, method="fourier"
    )
    x = _circle()
    want = _direct_velocity(x.numpy(), beta, normalized, causal)
    got = system.velocity(x)
    assert got.dtype == F64 and got.shape == x.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    np.testing.assert_allclose(
        system.velocity(2 * x).numpy(), want, rtol=1e-12, atol=1e-12 * np.abs(want).max()
    )
    other = _direct_velocity(x.numpy(), beta + 0.5, normalized, causal)
    assert np.abs(got.numpy() - other).max() > 1e-3  # negative control


def test_fourier_velocity_in_float32_and_for_a_large_cloud():
    """float32 tokens give float32 velocities within 1e-5 of the float64 direct sum; n = 300 tokens (the
    size ``method="auto"`` switches at) agree with the pairwise method to 1e-10."""
    x = _circle(B=1, n=9, seed=31)
    system = SelfAttentionDynamics.identity(2, inverse_temperature=2.5, sphere=True, method="fourier")
    got = system.velocity(x.float())
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.double().numpy(), _direct_velocity(x.numpy(), 2.5, True, False), atol=1e-5)
    big = _circle(B=1, n=300, seed=32)
    auto = SelfAttentionDynamics.identity(2, inverse_temperature=4.0, sphere=True, normalized=False)
    assert auto.resolved_method(300) == "fourier"
    pairwise = SelfAttentionDynamics.identity(2, inverse_temperature=4.0, sphere=True, normalized=False, method="pairwise")
    scale = float(special.i0(4.0))
    np.testing.assert_allclose(
        auto.velocity(big).numpy(), pairwise.velocity(big).numpy(), rtol=1e-10, atol=1e-12 * scale
    )


_EYE2 = torch.eye(2, dtype=torch.float64)


@pytest.mark.parametrize(
    "args, kw, error, message",
    [
        (
            (torch.ones(3), _EYE2, _EYE2),
            {},
            ValueError,
            "query must have shape (H, h, d) or (h, d), got (3,)",
        ),
        (
            ("q", _EYE2, _EYE2),
            {},
            TypeError,
            "query must be a torch.Tensor of shape (H, h, d) or (h, d), got str",
        ),
        (
            (_EYE2, torch.ones(2, 3), _EYE2),
            {},
            ValueError,
            "key must act on R^2 (last axis 2), got shape (1, 2, 3)",
        ),
        (
            (_EYE2, torch.ones(1, 1, 1, 2), _EYE2),
            {},
            ValueError,
            "key must have shape (H, h, d) or (h, d), got (1, 1, 1, 2)",
        ),
        (
            (_EYE2, torch.ones(3, 2), _EYE2),
            {},
            ValueError,
            "key must have the shape of query (1, 2, 2), got (1, 3, 2)",
        ),
        (
            (_EYE2, _EYE2, torch.ones(2, 3)),
            {},
            ValueError,
            "value must act on R^2 (last axis 2), got shape (1, 2, 3)",
        ),
        ((_EYE2 * math.nan, _EYE2, _EYE2), {}, ValueError, "query has NaN or Inf entries"),
        ((_EYE2, _EYE2, _EYE2), {"inverse_temperature": -1.0}, ValueError, "inverse_temperature must be ≥ 0, got -1.0"),
        ((_EYE2, _EYE2, _EYE2), {"temperature": -0.5}, ValueError, "temperature must be ≥ 0, got -0.5"),
        (
            (_EYE2, _EYE2, _EYE2),
            {"temperature": "hot"},
            TypeError,
            "temperature must be a real number, got str",
        ),
        (
            (_EYE2, _EYE2, _EYE2),
            {"method": "fft"},
            ValueError,
            "method must be 'auto', 'pairwise' or 'fourier', got 'fft'",
        ),
        (
            (_EYE2, _EYE2, torch.ones(1, 3, 2)),
            {},
            ValueError,
            "value maps R^2 to R^3: pass output (H, 2, 3) back to R^2",
        ),
        (
            (_EYE2, _EYE2, torch.ones(2, 2, 2)),
            {},
            ValueError,
            "value must have H = 1 heads like query, got shape (2, 2, 2)",
        ),
        (
            (_EYE2, _EYE2, _EYE2, torch.ones(1, 3, 2)),
            {},
            ValueError,
            "output must have shape (H, d, h_v) = (1, 2, 2), got (1, 3, 2)",
        ),
        (
            (_EYE2, _EYE2, torch.ones(1, 3, 2), torch.ones(1, 2, 2)),
            {},
            ValueError,
            "output must have shape (H, d, h_v) = (1, 2, 3), got (1, 2, 2)",
        ),
        (
            (_EYE2, _EYE2, _EYE2, torch.ones(5)),
            {},
            ValueError,
            "output must have shape (H, d, h_v) or (d, h_v), got (5,)",
        ),
    ],
)
def test_self_attention_dynamics_refuse_bad_weights_naming_them(args, kw, error, message):
    with pytest.raises(error) as err:
        SelfAttentionDynamics(*args, **kw)
    assert str(err.value) == message


def test_self_attention_dynamics_keep_their_options():
    V = torch.ones(2, 3, 2, dtype=torch.float64)
    O = torch.ones(2, 2, 3, dtype=torch.float64)
    s = SelfAttentionDynamics(
        torch.ones(2, 4, 2),
        torch.ones(2, 4, 2),
        V,
        O,
        inverse_temperature=0.5,
        normalized=False,
        causal=True,
        sphere=True,
        temperature=2.0,
        method="pairwise",
    )
    assert (
        repr(s) == "SelfAttentionDynamics(USA, H=2, d=2, inverse_temperature=0.5, causal=True, sphere=True, temperature=2)"
    )
    assert (s.n_heads, s.d, s.inverse_temperature, s.temperature, s.method) == (2, 2, 0.5, 2.0, "pairwise")
    assert s.normalized is False and s.causal is True and s.sphere is True and s.projection is not None
    assert s.diffusion(0.0, None) == 2.0 and torch.equal(s.output, O) and torch.equal(s.value, V)
    plain = SelfAttentionDynamics(_EYE2, _EYE2, _EYE2)
    assert (
        repr(plain)
        == "SelfAttentionDynamics(SA, H=1, d=2, inverse_temperature=1, causal=False, sphere=False, temperature=0)"
    )
    assert plain.projection is None and plain.output is None and plain.diffusion(0.0, None) == 0.0
    assert plain.query.shape == (1, 2, 2) and plain.method == "auto"
    circle = SelfAttentionDynamics.identity(2, sphere=True)
    assert [circle.resolved_method(n) for n in (255, 256)] == ["pairwise", "fourier"]
    assert SelfAttentionDynamics.identity(3, sphere=True).resolved_method(1000) == "pairwise"  # not a circle
    assert SelfAttentionDynamics.identity(2).resolved_method(1000) == "pairwise"  # not on the sphere
    with pytest.raises(ValueError, match=r"^method='fourier' needs identity weights on the circle"):
        SelfAttentionDynamics.identity(3, sphere=True, method="fourier")


def test_identity_system_checks_d_and_keeps_its_temperature():
    with pytest.raises(ValueError) as err:
        SelfAttentionDynamics.identity(0)
    assert str(err.value) == "d must be ≥ 1, got 0"
    with pytest.raises(TypeError) as err:
        SelfAttentionDynamics.identity(2.0)
    assert str(err.value) == "d must be an int, got float"
    s = SelfAttentionDynamics.identity(3, inverse_temperature=2.0, temperature=0.125, dtype=torch.float32)
    assert s.query.dtype == torch.float32 and torch.equal(s.query[0], torch.eye(3))
    assert s.temperature == 0.125 and s.diffusion(0.0, None) == 0.5  # sqrt(2τ)


def test_fourier_weights_are_the_bessel_ratios_on_the_requested_device():
    for beta in (0.0, 0.5, 3.0):
        s = SelfAttentionDynamics.identity(2, inverse_temperature=beta, sphere=True, method="fourier")
        r = s._fourier_weights(torch.float64, torch.device("cpu"))
        K = r.shape[0] - 1
        ref = special.iv(np.arange(K + 1), beta) / special.iv(0, beta)  # not the scaled ive
        np.testing.assert_allclose(r.numpy(), ref, rtol=1e-13, atol=0)
        if beta == 0:
            assert r.tolist() == [1.0, 0.0]  # I_k(0) = 0 for k ≥ 1: one mode is enough
        else:  # truncated at the first K with K·I_K/I_0 ≤ 1e-15
            assert K * ref[K] <= 1e-15 < (K - 1) * ref[K - 1]
        assert s._fourier_weights(torch.float32, torch.device("meta")).device.type == "meta"
        assert s._fourier_weights(torch.float32, torch.device("cpu")).dtype == torch.float32


def test_growth_rate_closed_form_for_any_integer_dtype():
    """λ_k = k² I_k(β)/(β I_0(β)) (SA), k² I_k(β)/β (USA); k given as small integers (uint8: k² overflows in
    the integers' own type) or floats gives the same numbers."""
    beta = 2.5
    k = np.arange(0, 40)
    sa = k.astype(float) ** 2 * special.iv(k, beta) / (beta * special.iv(0, beta))
    usa = k.astype(float) ** 2 * special.iv(k, beta) / beta
    for ks in (k, k.astype(np.uint8), k.astype(np.int16), k.astype(float), list(range(40))):
        np.testing.assert_allclose(growth_rate(ks, beta), sa, rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(growth_rate(ks, beta, normalized=False), usa, rtol=1e-12, atol=1e-300)
    assert growth_rate(20, beta) > 0 and not np.allclose(growth_rate(k, beta), usa)  # control: SA ≠ USA
    np.testing.assert_array_equal(growth_rate(np.array([0, 1, 2], dtype=np.uint8), 0.0), [0.0, 0.5, 0.0])


def exact(pattern: str) -> str:
    """An anchored regex for a whole error message."""
    return "^" + re.escape(pattern) + "$"


def gen(seed: int) -> torch.Generator:
    """A seeded CPU generator."""
    return torch.Generator().manual_seed(seed)


def unit_2(x: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit length."""
    return x / x.norm(dim=-1, keepdim=True)


def weights(H: int, h: int, d: int, hv: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Random float64 ``Q, K (H, h, d)``, ``V (H, hv, d)``, ``O (H, d, hv)``."""
    g = gen(seed)
    return tuple(
        torch.randn(*s, generator=g, dtype=F64) / math.sqrt(s[-1])
        for s in ((H, h, d), (H, h, d), (H, hv, d), (H, d, hv))
    )


def np_velocity(x, Q, K, V, O, beta, normalized, causal) -> np.ndarray:
    """``1/H Σ_m O_m Σ_j A^m_ij V_m x_j`` in numpy: the softmax from ``scipy.special.softmax`` (stable for huge
    logits), USA as ``exp(logits)/n``; ``O = None`` is the identity; causal rows keep ``j ≤ i``."""
    x = np.asarray(x, dtype=float)
    Q, K, V = (np.asarray(w, dtype=float) for w in (Q, K, V))
    B, n, d = x.shape
    H = Q.shape[0]
    out = np.zeros((B, n, d))
    for b in range(B):
        for m in range(H):
            q, k, v = x[b] @ Q[m].T, x[b] @ K[m].T, x[b] @ V[m].T
            logits = beta * q @ k.T  # (n, n)
            if causal:
                logits = np.where(np.tril(np.ones((n, n), dtype=bool)), logits, -np.inf)
            A = special.softmax(logits, axis=1) if normalized else np.exp(logits) / n
            mixed = A @ v
            out[b] += (mixed @ np.asarray(O[m], dtype=float).T if O is not None else mixed) / H
    return out


def circle(B: int, n: int, seed: int, radius: float = 1.0) -> torch.Tensor:
    """``(B, n, 2)`` tokens at uniform random angles on the circle of the given radius."""
    theta = torch.rand(B, n, generator=gen(seed), dtype=F64) * 2 * math.pi
    return radius * torch.stack((theta.cos(), theta.sin()), -1)


def _direct(x: np.ndarray, beta: float, normalized: bool, causal: bool) -> np.ndarray:
    """Circle, identity weights: ``Σ_j e^{β cos(θ_i − θ_j)} x̂_j / Z_i`` (``x̂`` the unit tokens)."""
    xh = x / np.linalg.norm(x, axis=-1, keepdims=True)
    eye = np.eye(2)[None]
    return np_velocity(xh, eye, eye, eye, None, beta, normalized, causal)


def growth_rate_ks(normalized: bool) -> np.ndarray:
    """``growth_rate([0, 1, 2, 3], 0)``."""
    return tk.growth_rate([0, 1, 2, 3], 0.0, normalized=normalized)


def _np_components(x: np.ndarray, radius: float) -> int:
    """Connected components of ``|x_i − x_j| < radius`` by a hand-written union-find."""
    n = len(x)
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for i in range(n):
        for j in range(i + 1, n):
            if np.linalg.norm(x[i] - x[j]) < radius:
                parent[find(i)] = find(j)
    return len({find(i) for i in range(n)})


def test_exported_names_constants_and_noise_type():
    """The chunk budget is 2**22 logits (32 MiB of float64); the token system declares additive noise."""
    assert tk._CHUNK_ELEMENTS == 2**22 and tk._CHUNK_ELEMENTS * 8 == 32 * 2**20
    assert SelfAttentionDynamics.noise == "additive"
    assert SelfAttentionDynamics.identity(2).noise == "additive"


def test_as_heads_promotes_two_d_checks_d_and_finiteness_with_the_name():
    """A 2-D matrix becomes one head (same entries); a 3-D stack is returned as is; the last axis is checked
    only when ``d`` is given; NaN and ±Inf are refused with the argument's name (exact messages)."""
    w = torch.arange(6, dtype=F64).reshape(2, 3)
    out = tk._as_heads("query", w, None, "h, d")
    assert out.shape == (1, 2, 3) and torch.equal(out[0], w)
    stack = torch.ones(2, 4, 3, dtype=F64)
    assert tk._as_heads("value", stack, 3, "h_v, d") is stack
    assert tk._as_heads("output", torch.ones(2, 3, 7, dtype=F64), None, "d, h_v").shape == (2, 3, 7)
    with pytest.raises(ValueError, match=exact("value must act on R^4 (last axis 4), got shape (2, 4, 3)")):
        tk._as_heads("value", stack, 4, "h_v, d")
    with pytest.raises(
        TypeError, match=exact("output must be a torch.Tensor of shape (H, d, h_v) or (d, h_v), got list")
    ):
        tk._as_heads("output", [[1.0]], None, "d, h_v")
    with pytest.raises(ValueError, match=exact("key must have shape (H, h, d) or (h, d), got (3,)")):
        tk._as_heads("key", torch.ones(3), None, "h, d")
    for bad in (math.inf, -math.inf, math.nan):
        w = torch.ones(2, 2, dtype=F64)
        w[1, 0] = bad
        with pytest.raises(ValueError, match=exact("key has NaN or Inf entries")):
            tk._as_heads("key", w, 2, "h, d")


@pytest.mark.parametrize(
    ("position", "name"),
    [(1, "key"), (2, "value"), (3, "output")],
)
def test_constructor_names_the_non_finite_weight(position, name):
    """An Inf in key, value or output is refused naming that weight (the query is the finite identity)."""
    eye = torch.eye(2, dtype=F64)
    args = [eye, eye.clone(), eye.clone(), eye.clone()]
    args[position] = args[position].clone()
    args[position][0, 1] = math.inf
    with pytest.raises(ValueError, match=exact(f"{name} has NaN or Inf entries")):
        SelfAttentionDynamics(*args)


def test_constructor_stores_each_weight_in_its_slot_and_the_flags_as_bools():
    """query/key/value/output land in their own attributes (distinct tensors, 3-D); flags given as 0/1 are
    stored as bools; the sphere system's projection is a unit Sphere; a general system is not an identity
    system (no Fourier path even on the circle with identity matrices); ``_modes`` starts empty; defaults
    beta = 1, SA, not causal, R^d, τ = 0, method 'auto'."""
    Q, K, V, O = weights(2, 3, 4, 5, seed=1)
    s = SelfAttentionDynamics(Q, K, V, O, inverse_temperature=0.25, normalized=0, causal=1, sphere=1, temperature=0.5)
    assert (
        torch.equal(s.query, Q)
        and torch.equal(s.key, K)
        and torch.equal(s.value, V)
        and torch.equal(s.output, O)
    )
    assert s.normalized is False and s.causal is True and s.sphere is True
    assert isinstance(s.projection, Sphere) and s.projection.radius == 1.0 and s.projection.dim == (-1,)
    assert s.inverse_temperature == 0.25 and s.temperature == 0.5 and s._sigma == 1.0 and s._modes is None
    assert s.d == 4 and s.n_heads == 2
    eye = torch.eye(2, dtype=F64)
    general = SelfAttentionDynamics(eye, eye, eye, sphere=True)
    assert general._identity is False and general.resolved_method(10_000) == "pairwise"
    with pytest.raises(ValueError, match="^method='fourier' needs identity weights"):
        SelfAttentionDynamics(eye, eye, eye, sphere=True, method="fourier").resolved_method(5)
    d = SelfAttentionDynamics(eye, eye, eye)
    assert (d.inverse_temperature, d.normalized, d.causal, d.sphere, d.temperature, d.method) == (
        1.0,
        True,
        False,
        False,
        0.0,
        "auto",
    )
    assert d.projection is None and type(d.inverse_temperature) is float and type(d.temperature) is float


def test_identity_defaults_dtype_kwargs_and_eager_fourier_check():
    """``identity(d)``: one head of ``I_d`` in float64 by default, beta = 1 by default, kwargs reach the
    constructor, the identity flag is set (the Fourier path applies on the circle); ``method='fourier'`` off
    the circle is refused at construction with the exact message; d is checked as an int ≥ 1."""
    s = SelfAttentionDynamics.identity(3)
    assert (
        s.query.dtype == F64 and s.query.shape == (1, 3, 3) and torch.equal(s.key[0], torch.eye(3, dtype=F64))
    )
    assert torch.equal(s.value[0], torch.eye(3, dtype=F64)) and s.output is None and s.inverse_temperature == 1.0
    assert s._identity is True
    c = SelfAttentionDynamics.identity(
        2, inverse_temperature=3.0, sphere=True, causal=True, normalized=False, temperature=2.0
    )
    assert (c.inverse_temperature, c.sphere, c.causal, c.normalized, c.temperature) == (3.0, True, True, False, 2.0)
    assert c._fourier_applies and c.resolved_method(256) == "fourier"
    f = SelfAttentionDynamics.identity(2, sphere=True, method="fourier")
    assert f.resolved_method(1) == "fourier" and f.method == "fourier"
    message = "method='fourier' needs identity weights on the circle (SelfAttentionDynamics.identity(2, sphere=True))"
    with pytest.raises(ValueError, match=exact(message)):
        SelfAttentionDynamics.identity(2, method="fourier")  # circle dimension, but in R^2
    with pytest.raises(ValueError, match=exact(message)):
        SelfAttentionDynamics.identity(3, sphere=True, method="fourier")
    with pytest.raises(TypeError, match=exact("d must be an int, got bool")):
        SelfAttentionDynamics.identity(True)
    assert SelfAttentionDynamics.identity(1).d == 1
    assert SelfAttentionDynamics.identity(2, dtype=torch.float32).key.dtype == torch.float32


def test_resolved_method_truth_table():
    """auto: Fourier iff identity ∧ d = 2 ∧ sphere ∧ n ≥ 256; 'pairwise' is always pairwise; 'fourier' ignores n."""
    circle_auto = SelfAttentionDynamics.identity(2, sphere=True)
    assert [circle_auto.resolved_method(n) for n in (0, 255, 256, 257, 10**6)] == [
        "pairwise",
        "pairwise",
        "fourier",
        "fourier",
        "fourier",
    ]
    pair = SelfAttentionDynamics.identity(2, sphere=True, method="pairwise")
    assert pair.resolved_method(10**6) == "pairwise"
    four = SelfAttentionDynamics.identity(2, sphere=True, method="fourier")
    assert [four.resolved_method(n) for n in (0, 1, 255)] == ["fourier"] * 3
    assert SelfAttentionDynamics.identity(2).resolved_method(10**6) == "pairwise"
    assert SelfAttentionDynamics.identity(3, sphere=True).resolved_method(10**6) == "pairwise"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("chunk", ["one_row", "three_rows", "zero_budget", "default"])
def test_pairwise_velocity_in_uneven_chunks_equals_numpy(causal, chunk, monkeypatch):
    """Chunks of 1 or 3 query rows over n = 7 (uneven last chunk), a zero budget (still one row per chunk)
    and the default budget give the numpy velocity for SA and USA (causal mask offset by the chunk start);
    negative control: the acausal answer differs from the causal one."""
    Q, K, V, O = weights(2, 3, 4, 5, seed=2)
    x = torch.randn(2, 7, 4, generator=gen(3), dtype=F64)
    budget = {"one_row": 1, "three_rows": 3 * 2 * 2 * 7, "zero_budget": 0, "default": tk._CHUNK_ELEMENTS}[
        chunk
    ]
    monkeypatch.setattr(tk, "_CHUNK_ELEMENTS", budget)
    for normalized in (True, False):
        s = SelfAttentionDynamics(Q, K, V, O, inverse_temperature=0.9, normalized=normalized, causal=causal)
        want = np_velocity(x, Q, K, V, O, 0.9, normalized, causal)
        got = s.velocity(x)
        assert got.shape == (2, 7, 4) and got.dtype == F64
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-13)
        other = np_velocity(x, Q, K, V, O, 0.9, normalized, not causal)
        assert np.abs(got.numpy() - other).max() > 1e-3


def test_pairwise_softmax_is_stable_for_huge_logits():
    """β = 700 on unit tokens (logits up to 700: exp overflows float64 without the max shift) gives the
    scipy-softmax velocity, finite; causal too."""
    x = unit_2(torch.randn(2, 6, 3, generator=gen(4), dtype=F64))
    for causal in (False, True):
        s = SelfAttentionDynamics.identity(3, inverse_temperature=700.0, causal=causal)
        got = s.velocity(x)
        eye = torch.eye(3, dtype=F64)[None]
        want = np_velocity(x, eye, eye, eye, None, 700.0, True, causal)
        assert torch.isfinite(got).all()
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)


def test_usa_top_shift_is_undone_exactly():
    """USA multiplies the shifted weights back by ``exp(max logit)/n``: with logits up to 30 the numpy
    ``exp(logits)/n`` velocity is matched to 1e-12 relative (a missing factor is off by e^30)."""
    x = unit_2(torch.randn(1, 5, 2, generator=gen(5), dtype=F64))
    s = SelfAttentionDynamics.identity(2, inverse_temperature=30.0, normalized=False)
    eye = torch.eye(2, dtype=F64)[None]
    want = np_velocity(x, eye, eye, eye, None, 30.0, False, False)
    np.testing.assert_allclose(s.velocity(x).numpy(), want, rtol=1e-12)
    assert np.abs(want).max() > 1e10


def test_pairwise_velocity_without_output_and_in_the_tokens_dtype():
    """No output map (``V: R^d → R^d``, two heads) equals numpy; float32 tokens with float64 weights give a
    float32 answer within 1e-5 of float64 (weights cast to the tokens' dtype); n = 0 tokens give an empty
    ``(B, 0, d)`` velocity."""
    Q, K, V, _ = weights(2, 3, 4, 4, seed=6)
    s = SelfAttentionDynamics(Q, K, V, inverse_temperature=1.3)
    x = torch.randn(3, 5, 4, generator=gen(7), dtype=F64)
    want = np_velocity(x, Q, K, V, None, 1.3, True, False)
    np.testing.assert_allclose(s.velocity(x).numpy(), want, rtol=1e-12, atol=1e-13)
    low = s.velocity(x.float())
    assert low.dtype == torch.float32
    np.testing.assert_allclose(low.double().numpy(), want, atol=1e-5)
    Q2, K2, V2, O2 = weights(1, 2, 4, 3, seed=8)
    with_o = SelfAttentionDynamics(Q2, K2, V2, O2, inverse_temperature=0.5).velocity(x.float())
    assert with_o.dtype == torch.float32
    np.testing.assert_allclose(
        with_o.double().numpy(), np_velocity(x, Q2, K2, V2, O2, 0.5, True, False), atol=1e-5
    )
    empty = s.velocity(torch.zeros(2, 0, 4, dtype=F64))
    assert empty.shape == (2, 0, 4)


def test_velocity_dispatches_on_the_resolved_method(monkeypatch):
    """``velocity`` calls the Fourier path exactly when ``resolved_method(n)`` says so (sentinels)."""
    s = SelfAttentionDynamics.identity(2, sphere=True)
    monkeypatch.setattr(s, "_velocity_fourier", lambda x: "fourier")
    monkeypatch.setattr(s, "_velocity_pairwise", lambda x: "pairwise")
    assert s.velocity(torch.zeros(1, 256, 2)) == "fourier"
    assert s.velocity(torch.zeros(1, 255, 2)) == "pairwise"


def test_fourier_weights_cap_cache_and_values():
    """The number of modes stops at K = 10 000 for a huge β (the truncation rule alone would go on: the last
    kept ratio is still above 1e-15/K); the ratios are stored in ``_modes`` and reused when present at the
    same β (recomputed after β changes), and equal ``I_k(β)/I_0(β)`` from scipy's unscaled ``iv``."""
    huge = SelfAttentionDynamics.identity(2, inverse_temperature=1e8, sphere=True, method="fourier")
    r = huge._fourier_weights(F64, torch.device("cpu"))
    assert r.shape == (10_001,)
    assert 10_000 * float(r[-1]) > 1e-15
    s = SelfAttentionDynamics.identity(2, inverse_temperature=2.0, sphere=True, method="fourier")
    r2 = s._fourier_weights(F64, torch.device("cpu"))
    ref = special.iv(np.arange(r2.shape[0]), 2.0) / special.iv(0, 2.0)
    np.testing.assert_allclose(r2.numpy(), ref, rtol=1e-13)
    assert isinstance(s._modes, np.ndarray) and np.array_equal(s._modes, r2.numpy())
    s._modes = np.array([1.0, 0.25])  # a stored table is reused, not recomputed
    assert s._fourier_weights(F64, torch.device("cpu")).tolist() == [1.0, 0.25]
    s.inverse_temperature = 3.0  # another β: a new table (it kept the old one before), I_k(3)/I_0(3) by scipy
    r3 = s._fourier_weights(F64, torch.device("cpu"))
    ref3 = special.iv(np.arange(r3.shape[0]), 3.0) / special.iv(0, 3.0)
    np.testing.assert_allclose(r3.numpy(), ref3, rtol=1e-13)
    assert r3.shape[0] > 2 and s._modes_at == 3.0


@pytest.mark.parametrize("beta", [0.3, 1.0, 5.0, 8.0, 25.0])
def test_fourier_velocity_over_several_mode_blocks_equals_the_direct_sum(beta):
    """Betas whose truncation K falls at different offsets inside the blocks of 8 modes: SA and USA,
    causal or not, equal the direct sum to 1e-11 relative (tokens at radius 3: only the angle counts);
    negative control: β + 1."""
    s0 = SelfAttentionDynamics.identity(2, inverse_temperature=beta, sphere=True, method="fourier")
    K = s0._fourier_weights(F64, torch.device("cpu")).shape[0] - 1
    assert K >= 1
    x = circle(2, 9, seed=int(beta * 10), radius=3.0)
    for normalized in (True, False):
        for causal in (False, True):
            s = SelfAttentionDynamics.identity(
                2, inverse_temperature=beta, sphere=True, method="fourier", normalized=normalized, causal=causal
            )
            got = s.velocity(x).numpy()
            want = _direct(x.numpy(), beta, normalized, causal)
            scale = np.abs(want).max()
            np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11 * scale)
            assert np.abs(got - _direct(x.numpy(), beta + 1.0, normalized, causal)).max() > 1e-4 * scale


def test_fourier_mode_counts_hit_several_block_offsets():
    """The betas of the block test put K + 1 at several residues mod 8 (so both ends of a block are used)."""
    Ks = [
        SelfAttentionDynamics.identity(2, inverse_temperature=b, sphere=True, method="fourier")
        ._fourier_weights(F64, torch.device("cpu"))
        .shape[0]
        for b in (0.3, 1.0, 5.0, 8.0, 25.0)
    ]
    assert sorted(k % 8 for k in Ks) == [0, 1, 2, 4, 7] and max(Ks) > 16


def test_sphere_drift_is_the_numpy_tangent_projection_and_r_d_drift_is_the_velocity():
    """On the sphere ``drift = v − ⟨v, x⟩ x`` (numpy, per token); in R^d ``drift = velocity``; ``t`` is ignored;
    ``diffusion = sqrt(2τ)`` for any state."""
    Q, K, V, O = weights(2, 3, 3, 2, seed=9)
    x = unit_2(torch.randn(2, 6, 3, generator=gen(10), dtype=F64))
    sph = SelfAttentionDynamics(Q, K, V, O, inverse_temperature=2.0, sphere=True, temperature=0.08)
    v = np_velocity(x, Q, K, V, O, 2.0, True, False)
    xn = x.numpy()
    want = v - np.einsum("bnd,bnd->bn", v, xn)[..., None] * xn
    np.testing.assert_allclose(sph.drift(0.0, x).numpy(), want, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(sph.drift(5.0, x).numpy(), want, rtol=1e-12, atol=1e-13)
    flat = SelfAttentionDynamics(Q, K, V, O, inverse_temperature=2.0)
    np.testing.assert_allclose(flat.drift(1.0, x).numpy(), v, rtol=1e-12, atol=1e-13)
    assert np.abs(v - want).max() > 1e-3  # control: the projection matters
    assert (
        sph.diffusion(0.0, x) == pytest.approx(math.sqrt(0.16), rel=1e-15) and flat.diffusion(3.0, x) == 0.0
    )


def test_repr_formats_beta_and_temperature_with_g():
    """``repr`` uses ``:g`` for β and τ (1e-07, 2.5) and names SA."""
    s = SelfAttentionDynamics.identity(3, inverse_temperature=1e-7, temperature=2.5, causal=True)
    assert (
        repr(s)
        == "SelfAttentionDynamics(SA, H=1, d=3, inverse_temperature=1e-07, causal=True, sphere=False, temperature=2.5)"
    )


def test_attention_system_messages_overrides_and_copies():
    """A non-layer is a TypeError naming its type; ``beta``/``causal`` kwargs override the layer's, other
    kwargs reach the system; the weights are detached copies (editing the layer later changes nothing);
    the system's velocity is the numpy velocity of ``Q = W_Qᵀ … O = W_Oᵀ``."""
    with pytest.raises(TypeError, match=exact("layer must be a meanfield.nn.ParticleAttention, got Linear")):
        tk.attention_system(torch.nn.Linear(2, 2))
    layer = ParticleAttention(6, 2, 4, generator=gen(11), dtype=F64)
    s = tk.attention_system(layer, inverse_temperature=0.3, causal=True, temperature=0.5, sphere=True)
    assert (s.inverse_temperature, s.causal, s.temperature, s.sphere) == (0.3, True, 0.5, True)
    plain = tk.attention_system(layer)
    assert plain.inverse_temperature == 1 / math.sqrt(4) and plain.causal is False and plain.sphere is False
    assert plain.temperature == 0.0 and plain.n_heads == 2 and plain.d == 6
    W = layer.W_QKV.detach().numpy().copy()
    Wo = layer.W_O.detach().numpy().copy()
    x = torch.randn(2, 5, 6, generator=gen(12), dtype=F64)
    Q, K, V = W[:, 0], W[:, 1], W[:, 2]
    O = np.swapaxes(Wo, -1, -2)
    want = np_velocity(x, Q, K, V, O, 0.5, True, False)
    np.testing.assert_allclose(plain.velocity(x).numpy(), want, rtol=1e-12, atol=1e-13)
    causal_want = np_velocity(x, Q, K, V, O, 0.3, True, True)
    flat = tk.attention_system(layer, inverse_temperature=0.3, causal=True)
    np.testing.assert_allclose(flat.velocity(x).numpy(), causal_want, rtol=1e-12, atol=1e-13)
    assert not plain.query.requires_grad and not plain.output.requires_grad
    with torch.no_grad():
        layer.W_QKV.mul_(2.0)
        layer.W_O.mul_(3.0)
    np.testing.assert_allclose(plain.velocity(x).numpy(), want, rtol=1e-12, atol=1e-13)
    assert tk.attention_system(CausalParticleAttention(4, 2, generator=gen(1), dtype=F64)).causal is True


def test_attention_layer_messages():
    """A non-system is a TypeError naming its type; USA or sphere systems are refused (exact message)."""
    with pytest.raises(TypeError, match=exact("system must be a SelfAttentionDynamics, got str")):
        tk.attention_layer("system")
    message = "only normalised (softmax) attention in R^d is a ParticleAttention layer: normalized=True, sphere=False"
    for kw in ({"normalized": False}, {"sphere": True}, {"normalized": False, "sphere": True}):
        with pytest.raises(ValueError, match=exact(message)):
            tk.attention_layer(SelfAttentionDynamics.identity(3, **kw))


@pytest.mark.parametrize(("h_qk", "h_v", "causal"), [(5, 2, False), (2, 5, True), (3, 3, False)])
def test_attention_layer_pads_to_the_wider_head_and_folds_beta(h_qk, h_v, causal):
    """The layer has H heads of width ``max(h_qk, h_v)``, the system's causality and dtype, frozen
    parameters (zero-padded rows) and ``layer(x)`` equal to the numpy velocity of the system."""
    Q, K, V, O = weights(2, h_qk, 4, h_v, seed=13)
    s = SelfAttentionDynamics(Q, K, V, O, inverse_temperature=0.37, causal=causal)
    layer = tk.attention_layer(s)
    h = max(h_qk, h_v)
    assert type(layer) is (CausalParticleAttention if causal else ParticleAttention)
    assert layer.d_head == h and layer.n_particles == 2 and layer.d_model == 4
    assert layer.W_QKV.dtype == F64 and not any(p.requires_grad for p in layer.parameters())
    assert torch.equal(layer.W_QKV[:, 0, :h_qk], Q * (0.37 * math.sqrt(h)))
    assert torch.equal(layer.W_QKV[:, 1, :h_qk], K) and torch.equal(layer.W_QKV[:, 2, :h_v], V)
    assert torch.all(layer.W_QKV[:, :2, h_qk:] == 0) and torch.all(layer.W_QKV[:, 2, h_v:] == 0)
    assert torch.equal(layer.W_O[:, :h_v], O.mT) and torch.all(layer.W_O[:, h_v:] == 0)
    x = torch.randn(2, 6, 4, generator=gen(14), dtype=F64)
    want = np_velocity(x, Q, K, V, O, 0.37, True, causal)
    np.testing.assert_allclose(layer(x).numpy(), want, rtol=1e-11, atol=1e-13)


def test_attention_layer_of_an_identity_system_uses_an_identity_output_in_float32():
    """Without an output map the layer's ``W_O`` is the identity; a float32 system gives a float32 layer whose
    output matches numpy to 1e-5."""
    s = SelfAttentionDynamics.identity(3, inverse_temperature=0.8, dtype=torch.float32)
    layer = tk.attention_layer(s)
    assert layer.W_QKV.dtype == torch.float32 and layer.d_head == 3
    assert torch.equal(layer.W_O[0], torch.eye(3))
    x = torch.randn(1, 4, 3, generator=gen(15))
    eye = np.eye(3)[None]
    np.testing.assert_allclose(
        layer(x).numpy(), np_velocity(x, eye, eye, eye, None, 0.8, True, False), atol=1e-5
    )


def test_depth_flow_closed_form_default_T_and_no_grad():
    """With the linear layer ``f(x) = −x`` the stack is ``x (1 − T/L)^L``: default T = 1 (L = 4: 0.75⁴),
    T = 2, T = 0 (identity) and T = −1 (``(1 + 1/L)^L``); no graph is recorded through a grad-requiring
    layer."""
    x = torch.randn(2, 3, 2, generator=gen(16), dtype=F64)
    neg = lambda z: -z  # noqa: E731
    assert torch.allclose(tk.depth_flow(neg, x, depth=4), x * 0.75**4, rtol=1e-15, atol=0)
    assert torch.allclose(tk.depth_flow(neg, x, depth=5, T=2.0), x * (1 - 0.4) ** 5, rtol=1e-14, atol=0)
    assert torch.equal(tk.depth_flow(neg, x, depth=3, T=0.0), x)
    assert torch.allclose(tk.depth_flow(neg, x, depth=10, T=-1), x * 1.1**10, rtol=1e-14, atol=0)
    assert torch.allclose(tk.depth_flow(neg, x, depth=1), torch.zeros_like(x))
    lin = torch.nn.Linear(2, 2, dtype=F64)
    assert lin.weight.requires_grad and not tk.depth_flow(lin, x, depth=2).requires_grad


def test_depth_flow_argument_errors():
    """depth: an int ≥ 1; T: a finite real (exact messages)."""
    x = torch.zeros(1, 2, 2)
    neg = lambda z: -z  # noqa: E731
    with pytest.raises(ValueError, match=exact("depth must be ≥ 1, got 0")):
        tk.depth_flow(neg, x, depth=0)
    with pytest.raises(TypeError, match=exact("depth must be an int, got float")):
        tk.depth_flow(neg, x, depth=2.0)
    with pytest.raises(ValueError, match=exact("T must be finite, got inf")):
        tk.depth_flow(neg, x, depth=2, T=math.inf)
    with pytest.raises(TypeError, match=exact("T must be a real number, got str")):
        tk.depth_flow(neg, x, depth=2, T="1")


def test_growth_rate_at_beta_zero_scalars_and_errors():
    """β = 0: 1/2 at k = 1 and 0 elsewhere for SA and USA alike; a scalar k gives a 0-d value equal to the
    closed form ``k² I_k/(β I_0)``; k = 0 grows at rate 0; a negative β is refused (exact message)."""
    for normalized in (True, False):
        np.testing.assert_array_equal(growth_rate_ks(normalized), [0.0, 0.5, 0.0, 0.0])
    out = tk.growth_rate(3, 1.5)
    assert np.ndim(out) == 0
    assert float(out) == pytest.approx(9 * special.iv(3, 1.5) / (1.5 * special.iv(0, 1.5)), rel=1e-13)
    assert float(tk.growth_rate(3, 1.5, normalized=False)) == pytest.approx(
        9 * special.iv(3, 1.5) / 1.5, rel=1e-13
    )
    assert float(tk.growth_rate(0, 2.0)) == 0.0
    with pytest.raises(ValueError, match=exact("inverse_temperature must be ≥ 0, got -1.0")):
        tk.growth_rate(1, -1.0)
    with pytest.raises(ValueError, match=exact("inverse_temperature must be finite, got nan")):
        tk.growth_rate(1, math.nan)


@pytest.mark.parametrize("beta", [0.0, 0.2, 1.0, 1.9, 3.0, 9.0, 30.0, 120.0, 700.0, 3000.0])
def test_fastest_mode_is_the_brute_force_argmax(beta):
    """``k* = argmax_k k² I_k(β)`` over k = 1 … 400 (scaled Bessel ``ive``: same argmax); β = 0: k* = 1."""
    ks = np.arange(1, 401)
    ref = 1 if beta == 0 else int(ks[np.argmax(ks.astype(float) ** 2 * special.ive(ks, beta))])
    got = tk.fastest_mode(beta)
    assert type(got) is int and got == ref


def test_fourier_modes_equal_numpy_for_int_list_and_tensor_ks():
    """``ĉ_k = 1/n Σ_j e^{ikθ_j}`` (θ from arctan2, so the radius does not matter) equals numpy for an int k
    (shape (B, 1)), a list including negative and zero modes, and a tensor of modes; complex128 out."""
    x = circle(3, 11, seed=17) * torch.rand(3, 11, 1, generator=gen(18), dtype=F64).add(0.5)
    theta = np.arctan2(x[..., 1].numpy(), x[..., 0].numpy())
    ref = lambda ks: np.exp(1j * theta[..., None] * np.asarray(ks, dtype=float)).mean(1)  # noqa: E731
    one = tk.fourier_modes(x, 3)
    assert one.shape == (3, 1) and one.dtype == torch.complex128
    np.testing.assert_allclose(one.numpy(), ref([3]), atol=1e-14)
    ks = [0, 1, -2, 5]
    np.testing.assert_allclose(tk.fourier_modes(x, ks).numpy(), ref(ks), atol=1e-14)
    np.testing.assert_allclose(tk.fourier_modes(x, torch.tensor([2, 4])).numpy(), ref([2, 4]), atol=1e-14)
    assert tk.fourier_modes(x.float(), [1]).dtype == torch.complex64
    with pytest.raises(
        ValueError, match=exact("fourier_modes needs tokens on the circle (d = 2), got shape (1, 3, 3)")
    ):
        tk.fourier_modes(torch.zeros(1, 3, 3), 1)


def test_mean_inner_product_equals_the_numpy_gram_mean():
    """``1/n² Σ_ij ⟨x_i, x_j⟩`` from the numpy Gram matrix for any tokens; for unit tokens also
    ``1 − 1/(2n²) Σ_ij |x_i − x_j|²``; antipodal pairs give 0."""
    x = torch.randn(3, 7, 4, generator=gen(19), dtype=F64)
    G = np.einsum("bid,bjd->bij", x.numpy(), x.numpy())
    got = tk.mean_inner_product(x)
    assert got.shape == (3,)
    np.testing.assert_allclose(got.numpy(), G.sum((1, 2)) / 49, rtol=1e-12)
    u = unit_2(x).numpy()
    D2 = ((u[:, :, None] - u[:, None]) ** 2).sum(-1)
    np.testing.assert_allclose(
        tk.mean_inner_product(unit_2(x)).numpy(), 1 - D2.sum((1, 2)) / (2 * 49), rtol=1e-12
    )
    anti = torch.tensor([[[1.0, 0.0], [-1.0, 0.0]]], dtype=F64)
    assert float(tk.mean_inner_product(anti)) == 0.0


def test_count_clusters_equals_union_find_per_replica():
    """Random clouds (4 replicas of 15 points in the plane) at several radii: the union-find count, as int64."""
    x = torch.rand(4, 15, 2, generator=gen(20), dtype=F64)
    for radius in (0.05, 0.2, 0.35, 2.0):
        got = tk.count_clusters(x, radius=radius)
        assert got.dtype == torch.int64 and got.shape == (4,)
        assert got.tolist() == [_np_components(c, radius) for c in x.numpy()]
    assert tk.count_clusters(x, radius=2.0).tolist() == [1] * 4  # the unit square's diagonal is < 2
    assert min(tk.count_clusters(x, radius=0.05).tolist()) > 3  # control: a small radius splits the clouds


def test_count_clusters_default_radius_and_strict_boundary():
    """Default radius 0.1: points 3/32 apart join, 7/64 apart do not; a distance equal to the radius does not
    link (strict ``<``); the radius must be a finite real (exact messages)."""
    near = torch.tensor([[[0.0, 0.0], [3 / 32, 0.0]]], dtype=F64)
    far = torch.tensor([[[0.0, 0.0], [7 / 64, 0.0]]], dtype=F64)
    assert tk.count_clusters(near).tolist() == [1] and tk.count_clusters(far).tolist() == [2]
    half = torch.tensor([[[0.0, 0.0], [0.5, 0.0], [1.0, 0.0]]], dtype=F64)
    assert tk.count_clusters(half, 0.5).tolist() == [3]
    assert tk.count_clusters(half, 0.5000001).tolist() == [1]
    with pytest.raises(ValueError, match=exact("radius must be finite, got inf")):
        tk.count_clusters(half, math.inf)
    with pytest.raises(TypeError, match=exact("radius must be a real number, got str")):
        tk.count_clusters(half, "0.1")
