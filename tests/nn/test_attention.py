"""Tests of :mod:`meanfield.nn.attention`."""

from __future__ import annotations

import math

import pytest
import torch
from helpers.layers import assert_close, attention, features, tokens, vector_features
from torch import nn

from meanfield.nn import (
    CausalParticleAttention,
    ParticleAttention,
)

F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _old_maps(M=2, d=4, h=3, seed=20):
    g = _gen(seed)
    return [torch.randn(M, d, h, generator=g, dtype=F64) for _ in range(3)]


@pytest.mark.parametrize("cls", [ParticleAttention, CausalParticleAttention])
def test_attention_loads_the_earlier_separate_query_key_value_layout(cls):
    """A state dict with ``W_Q, W_K, W_V`` (``(M, d, h)``) and no ``W_QKV`` loads strictly into
    ``W_QKV[:, j] = W_jᵀ``: the properties give the maps back; also under a prefix (a submodule)."""
    layer = cls(4, 2, 3, dtype=F64)
    Wq, Wk, Wv = _old_maps()
    WO = torch.randn(2, 3, 4, generator=_gen(21), dtype=F64)
    result = layer.load_state_dict({"W_Q": Wq, "W_K": Wk, "W_V": Wv, "W_O": WO})
    assert result.missing_keys == [] and result.unexpected_keys == []
    for j, W in enumerate((Wq, Wk, Wv)):
        assert torch.equal(layer.W_QKV[:, j], W.transpose(-1, -2))
    assert torch.equal(layer.W_Q, Wq) and torch.equal(layer.W_K, Wk) and torch.equal(layer.W_V, Wv)
    assert torch.equal(layer.W_O, WO)

    outer = torch.nn.ModuleDict({"attn": cls(4, 2, 3, dtype=F64)})
    outer.load_state_dict({"attn.W_Q": Wq, "attn.W_K": Wk, "attn.W_V": Wv, "attn.W_O": WO})
    assert torch.equal(outer["attn"].W_V, Wv) and torch.equal(outer["attn"].W_Q, Wq)


def test_attention_keeps_w_qkv_when_the_state_has_it_and_ignores_an_incomplete_old_layout():
    """With ``W_QKV`` present the old keys are not converted (non-strict: ``W_QKV`` as saved, the old keys
    reported unexpected; strict: an error); with only some of the old keys nothing is converted (``W_QKV``
    missing, the layer unchanged)."""
    layer = ParticleAttention(4, 2, 3, dtype=F64)
    Wq, Wk, Wv = _old_maps()
    WQKV = torch.randn(2, 3, 3, 4, generator=_gen(22), dtype=F64)
    WO = torch.randn(2, 3, 4, generator=_gen(23), dtype=F64)
    state = {"W_QKV": WQKV, "W_Q": Wq, "W_K": Wk, "W_V": Wv, "W_O": WO}
    result = layer.load_state_dict(state, strict=False)
    assert torch.equal(layer.W_QKV, WQKV)
    assert sorted(result.unexpected_keys) == ["W_K", "W_Q", "W_V"] and result.missing_keys == []
    with pytest.raises(RuntimeError, match="Unexpected key"):
        ParticleAttention(4, 2, 3, dtype=F64).load_state_dict(state)

    fresh = ParticleAttention(4, 2, 3, dtype=F64)
    before = fresh.W_QKV.detach().clone()
    result = fresh.load_state_dict({"W_Q": Wq, "W_K": Wk, "W_O": WO}, strict=False)
    assert result.missing_keys == ["W_QKV"] and sorted(result.unexpected_keys) == ["W_K", "W_Q"]
    assert torch.equal(fresh.W_QKV, before)


DT = torch.float64


TOL = 1e-12


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def mha_copy(layer: ParticleAttention) -> nn.MultiheadAttention:
    """``nn.MultiheadAttention`` holding the heads of ``layer`` (h = d/M), output projection scaled by 1/M."""
    d, M, h = layer.d_model, layer.n_particles, layer.d_head
    assert M * h == d
    mha = nn.MultiheadAttention(d, M, bias=False, batch_first=True, dtype=DT)
    with torch.no_grad():
        W_in = torch.cat(
            [torch.cat([W[i].T for i in range(M)], 0) for W in (layer.W_Q, layer.W_K, layer.W_V)], 0
        )
        mha.in_proj_weight.copy_(W_in)  # (3d, d): rows i·h:(i+1)·h of each block are head i
        mha.out_proj.weight.copy_(torch.cat([layer.W_O[i].T for i in range(M)], 1) / M)  # (d, d)
    return mha


# every SDPA kernel of the device, on the dtypes it takes (the others run the math kernel already)
_SDPA = {
    "cpu": {"MATH": (64, 32, 16), "FLASH_ATTENTION": (64, 32, 16)},
    "cuda": {
        "MATH": (64, 32, 16),
        "EFFICIENT_ATTENTION": (32, 16),
        "FLASH_ATTENTION": (16,),
        "CUDNN_ATTENTION": (16,),
    },
}


_DTYPES = {64: torch.float64, 32: torch.float32, 16: torch.bfloat16}


# max |error| of the output and of the gradient, relative to the largest float64 value: float64 round-off;
# float32 (measured ≈ 3e-7 on the CPU; TF32 is off in tests); bfloat16 keeps 8 bits (2⁻⁸ ≈ 4e-3 per
# rounding, measured ≈ 7e-3 on the CPU)
_SDPA_TOL = {64: 1e-12, 32: 1e-5, 16: 4e-2}


@pytest.mark.parametrize(("d", "M"), [(12, 3), (16, 4), (8, 8), (6, 1)])
@pytest.mark.parametrize("causal", [False, True])
def test_equals_multihead_attention_with_output_scaled(d, M, causal, device):
    layer = attention(d, M, causal=causal)
    assert layer.d_head == d // M
    mha = mha_copy(layer).to(device)
    layer = layer.to(device)
    X = tokens(3, 7, d).to(device)
    mask = nn.Transformer.generate_square_subsequent_mask(7, dtype=DT, device=device) if causal else None
    Y_ref, A_ref = mha(X, X, X, attn_mask=mask, need_weights=True, average_attn_weights=False)
    assert_close(layer(X), Y_ref)
    assert_close(layer.attention_maps(X), A_ref)
    # negative control: without the 1/M on the output projection the outputs differ by the factor M
    if M > 1:
        assert float((layer(X) * M - Y_ref).detach().abs().max()) > 1e-3


@pytest.mark.parametrize("backend", ["MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"])
@pytest.mark.parametrize("causal", [False, True])
def test_every_sdpa_kernel_gives_the_float64_answer(device, backend, causal):
    """Forward and backward through each SDPA kernel of the device, against the float64 CPU layer (which
    equals nn.MultiheadAttention: the test above). A kernel that dropped the causal mask or the 1/√h scale
    would be off by O(1)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    bits = _SDPA[device.type].get(backend)
    if bits is None:
        pytest.skip(f"no {backend} kernel on {device.type}")
    reference = attention(32, 4, h=16, causal=causal)  # (M·3·h = 192 rows, d = 32), head width 16
    X = tokens(3, 33, 32)
    Y = reference(X)
    Y.square().mean().backward()
    Y = Y.detach()
    for b in bits:
        layer = attention(32, 4, h=16, causal=causal).to(device, _DTYPES[b])  # the same weights (seed 0)
        try:
            with sdpa_kernel(getattr(SDPBackend, backend)):
                out = layer(X.to(device, _DTYPES[b]))
                out.double().square().mean().backward()
        except RuntimeError as error:
            if backend == "CUDNN_ATTENTION" and "No available kernel" in str(error):
                pytest.skip(f"cuDNN attention is not available here: {error}")
            raise
        tol = _SDPA_TOL[b]
        assert_close(out.double().cpu(), Y, tol * float(Y.abs().max()))
        grad, ref = layer.W_QKV.grad.double().cpu(), reference.W_QKV.grad
        assert_close(grad, ref, tol * float(ref.abs().max()))
        wrong = attention(32, 4, h=16, causal=not causal)(X)  # negative control: the other mask
        assert float((out.double().cpu() - wrong).detach().abs().max()) > 10 * tol * float(Y.abs().max())


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available here")
def test_tf32_matmuls_stay_within_the_stated_tolerance():
    """With TF32 allowed (``torch.backends.cuda.matmul.allow_tf32 = True``, what many training scripts set),
    float32 matmuls round their inputs to 10 mantissa bits (2⁻¹¹ ≈ 5e-4 relative): the layer's output stays
    within 5e-3 of float64 (relative to its largest value). meanfield never sets the flag itself."""
    reference = attention(32, 4, h=16)
    X = tokens(3, 33, 32)
    Y = reference(X).detach()
    layer = attention(32, 4, h=16).to("cuda", torch.float32)
    torch.backends.cuda.matmul.allow_tf32 = True  # put back by the conftest fixture
    out = layer(X.to("cuda", torch.float32)).double().cpu()
    assert_close(out, Y, 5e-3 * float(Y.abs().max()))


def test_particle_outputs_match_explicit_heads():
    layer = attention(12, 3, h=5)
    X = tokens()
    phi = layer.particle_outputs(X)
    assert phi.shape == (2, 3, 5, 12)
    for i in range(3):
        q, k, v = X @ layer.W_Q[i], X @ layer.W_K[i], X @ layer.W_V[i]  # (B, T, h)
        A = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(5), -1)  # (B, T, T)
        assert_close(phi[:, i], A @ v @ layer.W_O[i])
    assert_close(layer(X), phi.mean(1))


def test_causal_output_ignores_future_tokens():
    X = tokens(2, 6)
    X2 = X.clone()
    X2[:, 4:] += 1.0  # change the last two tokens only
    causal, full = attention(causal=True), attention(causal=False)
    assert_close(causal(X)[:, :4], causal(X2)[:, :4])
    assert float((full(X)[:, :4] - full(X2)[:, :4]).detach().abs().max()) > 1e-3  # negative control
    A = causal.attention_maps(X)
    assert float(A.detach().triu(1).abs().max()) == 0.0
    assert_close(A.sum(-1), torch.ones(2, 3, 6, dtype=DT))


def test_gradients_reach_every_particle():
    cases = ((attention(), tokens()), (features(), torch.randn(5, 4, dtype=DT)))
    for layer, X in (*cases, (vector_features(), torch.randn(5, 4, dtype=DT))):
        layer(X).pow(2).sum().backward()
        for name in layer.particle_parameter_names:
            g = getattr(layer, name).grad
            assert g is not None and g.shape == getattr(layer, name).shape
            assert bool((g.reshape(layer.n_particles, -1).abs().sum(1) > 0).all()), name


def test_the_initialisation_has_the_documented_scales():
    # W_QKV ~ N(0, 1/d) and W_O ~ N(0, 1/h) entrywise (d = 64, M = 8, h = 8: 12,288 and 4,096 entries); the
    # sample variances are within 5·SE (SE = sqrt(2/n)·σ²: 2.6 % and 4.4 %) of 1/d and 1/h. Control: W_O's
    # variance is not 1/d (8× smaller), the mutant a review found passing every other test.
    d, M = 64, 8
    layer = ParticleAttention(d, M, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    h = layer.d_head
    for W, var in ((layer.W_QKV, 1 / d), (layer.W_O, 1 / h)):
        n = W.numel()
        assert abs(float(W.detach().var()) - var) <= 5 * math.sqrt(2 / n) * var, (W.shape, float(W.var()), var)
    assert abs(float(layer.W_O.detach().var()) - 1 / d) > 5 * math.sqrt(2 / layer.W_O.numel()) / h


def test_generator_makes_init_reproducible():
    a, b, c = attention(seed=5), attention(seed=5), attention(seed=6)
    assert torch.equal(a.W_Q, b.W_Q) and torch.equal(a.W_O, b.W_O)
    assert not torch.equal(a.W_Q, c.W_Q)


def test_fused_qkv_layout_is_the_heads_maps():
    """``W_QKV[i, j]`` is ``W_j^iᵀ`` (j = Q, K, V); the views write through, and the gradients of the views are
    the slices of ``W_QKV.grad``; a head computed from ``W_Q, W_K, W_V, W_O`` by hand is the layer's head."""
    layer, X = attention(8, 3, h=2, seed=4), tokens(2, 5, 8, 5)
    for j, W in enumerate((layer.W_Q, layer.W_K, layer.W_V)):
        assert W.shape == (3, 8, 2)
        assert torch.equal(W, layer.W_QKV.detach()[:, j].transpose(1, 2))
        assert W._base is layer.W_QKV  # a view, no copy
    before = layer(X).detach()
    with torch.no_grad():
        layer.W_V.mul_(2.0)  # writes W_QKV[:, 2]: values double, so the output doubles
    assert_close(layer(X), 2 * before)
    q = X @ layer.W_Q[1]  # (B, T, h), by hand from the views
    k, v = X @ layer.W_K[1], X @ layer.W_V[1]
    head = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(2), -1) @ v @ layer.W_O[1]  # (B, T, d)
    assert_close(layer.particle_outputs(X)[:, 1], head)
    layer(X).square().sum().backward()
    leaves = [W.detach().requires_grad_() for W in (layer.W_Q, layer.W_K, layer.W_V, layer.W_O)]
    Wq, Wk, Wv, Wo = leaves  # the same function of independent (M, d, h), (M, h, d) leaves, by hand
    heads = [
        torch.softmax((X @ Wq[i]) @ (X @ Wk[i]).transpose(1, 2) / math.sqrt(2), -1) @ X @ Wv[i] @ Wo[i]
        for i in range(3)
    ]
    (sum(heads) / 3).square().sum().backward()
    for j in range(3):
        assert_close(layer.W_QKV.grad[:, j].transpose(1, 2), leaves[j].grad)
    assert_close(layer.W_O.grad, Wo.grad)


def test_state_dict_of_the_separate_qkv_layout_loads_and_channels_last_runs():
    """A state dict with separate ``W_Q, W_K, W_V (M, d, h)`` (the earlier layout) loads into ``W_QKV``; a
    layer moved to channels_last (its 4-D ``W_QKV`` no longer contiguous) computes the same output."""
    layer, X = attention(8, 3, h=2, seed=6), tokens(2, 5, 8, 7)
    old = {"W_Q": layer.W_Q.detach().clone(), "W_K": layer.W_K.detach().clone()}
    old |= {"W_V": layer.W_V.detach().clone(), "W_O": layer.W_O.detach().clone()}
    fresh = attention(8, 3, h=2, seed=99)
    assert not torch.equal(fresh(X), layer(X))
    fresh.load_state_dict(old)
    assert torch.equal(fresh.W_QKV, layer.W_QKV) and torch.equal(fresh(X), layer(X))
    with pytest.raises(RuntimeError, match="Missing key"):
        attention(8, 3, h=2, seed=1).load_state_dict({"W_Q": old["W_Q"], "W_O": old["W_O"]})
    wrapped = nn.Sequential(attention(8, 3, h=2, seed=5))  # nested: the prefix is honoured
    wrapped.load_state_dict({f"0.{k}": v for k, v in old.items()})
    assert torch.equal(wrapped(X), layer(X))
    cl = attention(8, 3, h=2, seed=6).to(memory_format=torch.channels_last)
    assert not cl.W_QKV.is_contiguous()
    assert_close(cl(X), layer(X))


def test_particle_attention_names_its_input_x_in_a_dtype_error():
    from meanfield.nn import ParticleAttention

    layer = ParticleAttention(8, 2)
    with pytest.raises(TypeError, match=r"^X must have the layer's dtype .*convert it with X\.to\(\.\.\.\)"):
        layer(torch.randn(1, 3, 8, dtype=torch.float64))
