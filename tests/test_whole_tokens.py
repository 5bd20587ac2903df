"""Whole-behaviour tests of ``meanfield.nn.tokens`` (and the gaps left in ``meanfield.metrics.diversity``).

Every public function and method of :mod:`meanfield.nn.tokens` (and the private helpers they call) is checked
branch by branch against an independent answer: numpy re-implementations of the attention velocity (with a
numerically stable softmax from scipy), the tangent projection written out, closed forms of the residual
stack for a linear layer, brute-force arg-maxima over Bessel functions, a hand-written union-find for the
cluster count, and exact error messages (anchored, so a changed word fails). For
:mod:`meanfield.metrics.diversity` only what ``tests/test_whole_diversity.py`` does not pin is added: a live
zero-vector particle in :func:`mode_labels`, the suppressed exception context of the live-mask check, output
dtypes in float32, effective ranks against ``numpy.linalg.svd`` and the exported names. Deterministic inputs
only: no statistical tolerance is needed.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from scipy import special

import meanfield.nn.tokens as tk
from meanfield.drift.projections import Sphere
from meanfield.metrics import diversity as dv
from meanfield.nn import CausalParticleAttention, ParticleAttention
from meanfield.nn.tokens import SelfAttentionDynamics

F64 = torch.float64


def exact(pattern: str) -> str:
    """An anchored regex for a whole error message."""
    return "^" + re.escape(pattern) + "$"


def gen(seed: int) -> torch.Generator:
    """A seeded CPU generator."""
    return torch.Generator().manual_seed(seed)


def unit(x: torch.Tensor) -> torch.Tensor:
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


# ======================================================================================================
# module surface
# ======================================================================================================


def test_exported_names_constants_and_noise_type():
    """``__all__`` of both modules is exactly the documented list; the chunk budget is 2**22 logits (32 MiB of
    float64); the token system declares additive noise."""
    assert tk.__all__ == [
        "SelfAttentionDynamics",
        "attention_system",
        "attention_layer",
        "depth_flow",
        "growth_rate",
        "fastest_mode",
        "fourier_modes",
        "mean_inner_product",
        "count_clusters",
    ]
    assert dv.__all__ == [
        "pairwise_cosine",
        "attention_similarity",
        "mean_off_diagonal",
        "output_covariance",
        "effective_rank",
        "teacher_alignment",
        "aligned_fraction",
        "teacher_coverage",
        "teacher_overlap",
        "live_particles",
        "mode_labels",
        "distinct_modes",
        "collapse_rate",
        "minibatch_gradients",
        "gradient_variance",
        "mean_abs_loss_change",
        "detrended_loss_variance",
    ]
    assert tk._CHUNK_ELEMENTS == 2**22 and tk._CHUNK_ELEMENTS * 8 == 32 * 2**20
    assert SelfAttentionDynamics.noise == "additive"
    assert SelfAttentionDynamics.identity(2).noise == "additive"


# ======================================================================================================
# _as_heads and the constructor
# ======================================================================================================


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


# ======================================================================================================
# the pairwise velocity
# ======================================================================================================


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
    x = unit(torch.randn(2, 6, 3, generator=gen(4), dtype=F64))
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
    x = unit(torch.randn(1, 5, 2, generator=gen(5), dtype=F64))
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


# ======================================================================================================
# the Fourier velocity
# ======================================================================================================


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


def _direct(x: np.ndarray, beta: float, normalized: bool, causal: bool) -> np.ndarray:
    """Circle, identity weights: ``Σ_j e^{β cos(θ_i − θ_j)} x̂_j / Z_i`` (``x̂`` the unit tokens)."""
    xh = x / np.linalg.norm(x, axis=-1, keepdims=True)
    eye = np.eye(2)[None]
    return np_velocity(xh, eye, eye, eye, None, beta, normalized, causal)


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


# ======================================================================================================
# drift, diffusion
# ======================================================================================================


def test_sphere_drift_is_the_numpy_tangent_projection_and_r_d_drift_is_the_velocity():
    """On the sphere ``drift = v − ⟨v, x⟩ x`` (numpy, per token); in R^d ``drift = velocity``; ``t`` is ignored;
    ``diffusion = sqrt(2τ)`` for any state."""
    Q, K, V, O = weights(2, 3, 3, 2, seed=9)
    x = unit(torch.randn(2, 6, 3, generator=gen(10), dtype=F64))
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


# ======================================================================================================
# attention_system, attention_layer
# ======================================================================================================


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


# ======================================================================================================
# depth_flow
# ======================================================================================================


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


# ======================================================================================================
# growth rates and the fastest mode
# ======================================================================================================


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


def growth_rate_ks(normalized: bool) -> np.ndarray:
    """``growth_rate([0, 1, 2, 3], 0)``."""
    return tk.growth_rate([0, 1, 2, 3], 0.0, normalized=normalized)


@pytest.mark.parametrize("beta", [0.0, 0.2, 1.0, 1.9, 3.0, 9.0, 30.0, 120.0, 700.0, 3000.0])
def test_fastest_mode_is_the_brute_force_argmax(beta):
    """``k* = argmax_k k² I_k(β)`` over k = 1 … 400 (scaled Bessel ``ive``: same argmax); β = 0: k* = 1."""
    ks = np.arange(1, 401)
    ref = 1 if beta == 0 else int(ks[np.argmax(ks.astype(float) ** 2 * special.ive(ks, beta))])
    got = tk.fastest_mode(beta)
    assert type(got) is int and got == ref


# ======================================================================================================
# fourier_modes, mean_inner_product, count_clusters
# ======================================================================================================


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
    u = unit(x).numpy()
    D2 = ((u[:, :, None] - u[:, None]) ** 2).sum(-1)
    np.testing.assert_allclose(
        tk.mean_inner_product(unit(x)).numpy(), 1 - D2.sum((1, 2)) / (2 * 49), rtol=1e-12
    )
    anti = torch.tensor([[[1.0, 0.0], [-1.0, 0.0]]], dtype=F64)
    assert float(tk.mean_inner_product(anti)) == 0.0


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


# ======================================================================================================
# diversity: what test_whole_diversity.py leaves open
# ======================================================================================================


def test_mode_labels_live_zero_vector_keeps_its_own_label():
    """A live zero vector (cosine 0 with everything, not even linked to itself below r = 1) is its own
    cluster, labelled in order of its position; at r = 1 it links to every particle (1 − 0 ≤ 1) and chains
    x and −x into one cluster."""
    z = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=F64)
    assert dv.mode_labels(z).tolist() == [0, 1, 2]
    mid = torch.tensor([[1.0, 0.0], [0.0, 0.0], [2.0, 0.0]], dtype=F64)
    assert dv.mode_labels(mid).tolist() == [0, 1, 0]
    two = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]], dtype=F64)
    assert dv.mode_labels(two).tolist() == [0, 1, 2]
    pm = torch.tensor([[1.0, 0.0], [0.0, 0.0], [-1.0, 0.0]], dtype=F64)
    assert dv.mode_labels(pm, 1.0).tolist() == [0, 0, 0]
    assert dv.mode_labels(pm, 0.999).tolist() == [0, 1, 2]


def test_live_mask_shape_error_suppresses_the_torch_context():
    """The shape ValueError is raised ``from None``: no cause, context suppressed."""
    with pytest.raises(ValueError, match=exact("live must have shape (…, M) = (2, 4), got (3,)")) as err:
        dv._live_mask(torch.ones(3, dtype=torch.bool), torch.Size([2, 4]), torch.device("cpu"))
    assert err.value.__cause__ is None and err.value.__suppress_context__ is True


def test_diversity_metrics_keep_float32():
    """float32 particles give float32 fractions, coverage, overlap, collapse rate and mean similarity, with
    the float64 values (hand-built fan: cos with x = 1, 0, 0.9998)."""
    w = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.02]], dtype=torch.float32)
    teacher = torch.tensor([[1.0, 0.0]], dtype=torch.float32)
    outs = {
        "aligned": dv.aligned_fraction(w, teacher),
        "by_teacher": dv.aligned_fraction(w, teacher, by_teacher=True),
        "coverage": dv.teacher_coverage(w, teacher),
        "overlap": dv.teacher_overlap(w, teacher, weights=torch.tensor([1.0, 1.0, 2.0])),
        "collapse": dv.collapse_rate(w),
        "mean": dv.mean_off_diagonal(dv.pairwise_cosine(w)),
    }
    assert all(v.dtype == torch.float32 for v in outs.values())
    c = 1 / math.sqrt(1 + 0.02**2)
    assert float(outs["aligned"]) == pytest.approx(2 / 3) and outs["by_teacher"].tolist() == pytest.approx(
        [2 / 3]
    )
    assert float(outs["coverage"]) == 1.0
    assert float(outs["overlap"]) == pytest.approx((1 + 0 + 2 * c**2) / 4, rel=1e-6)
    assert float(outs["collapse"]) == pytest.approx(2 / 3)
    assert float(outs["mean"]) == pytest.approx((c + 0.02 * c) / 3, rel=1e-6)  # pairs: 0, c, sin


def test_effective_rank_equals_numpy_svd_entropy():
    """Random PSD matrices ``A Aᵀ`` (ranks 1 … 5 of 5, batched): ``exp(H(s/Σs))`` from ``numpy.linalg.svd``;
    one value per replica; a scaled copy has the same effective rank."""
    g = gen(21)
    Cs = []
    for r in range(1, 6):
        A = torch.randn(5, r, generator=g, dtype=F64)
        Cs.append(A @ A.T)
    C = torch.stack(Cs)
    s = np.linalg.svd(C.numpy(), compute_uv=False)
    p = s / s.sum(-1, keepdims=True)
    ref = np.exp(-special.xlogy(p, p).sum(-1))
    got = dv.effective_rank(C)
    assert got.shape == (5,)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-9)
    np.testing.assert_allclose(dv.effective_rank(7.5 * C).numpy(), ref, rtol=1e-9)
    assert float(got[0]) == pytest.approx(1.0, abs=1e-6) and all(
        1 <= v <= r + 1e-9 for v, r in zip(got, range(1, 6))
    )


def test_distinct_modes_of_one_replica_is_zero_d_and_all_dead_is_zero():
    """A single ``(M, D)`` replica gives a 0-d count; all particles dead gives 0 modes; a (2, M) live mask
    on a (2, M, D) stack is read per replica."""
    w = torch.tensor([[1.0, 0.0], [1.0, 0.001], [0.0, 1.0], [0.0, 1.001]], dtype=F64)
    out = dv.distinct_modes(w)
    assert out.shape == () and float(out) == 2.0
    assert float(dv.distinct_modes(w, live=torch.zeros(4, dtype=torch.bool))) == 0.0
    live = torch.tensor([[True, True, False, False], [True, True, True, True]])
    assert dv.distinct_modes(torch.stack([w, w]), live=live).tolist() == [1.0, 2.0]
