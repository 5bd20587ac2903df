"""Tests of the particle layers: exact equivalence with multi-head attention, the mean-field properties
(permutation, duplication, pruning, subsampling), the subsample strategies, the projection, bad input."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from meanfield.nn import (
    SUBSAMPLE_STRATEGIES,
    CausalParticleAttention,
    FeatureParticles,
    Medoids,
    ParticleAttention,
)

DT = torch.float64
TOL = 1e-12


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def attention(d=12, M=3, h=None, seed=0, causal=False):
    cls = CausalParticleAttention if causal else ParticleAttention
    return cls(d, M, h, generator=gen(seed), dtype=DT)


def features(d=4, M=6, seed=0, **kw):
    return FeatureParticles(d, M, "tanh", generator=gen(seed), dtype=DT, **kw)


def tokens(B=2, T=5, d=12, seed=1):
    return torch.randn(B, T, d, generator=gen(seed), dtype=DT)


def with_particles(layer, **params):
    """A copy of ``layer`` whose stacked parameters are replaced by ``params`` (an independent rebuild)."""
    first = next(iter(params.values()))
    if isinstance(layer, ParticleAttention):
        new = type(layer)(layer.d_model, first.shape[0], layer.d_head, dtype=DT)
    else:
        new = FeatureParticles(
            layer.d_in,
            first.shape[0],
            layer.activation,
            layer.A,
            layer.sphere,
            out_features=layer.out_features,
            bias=layer.has_bias,
            dtype=DT,
        )
    with torch.no_grad():
        for name, value in params.items():
            getattr(new, name).copy_(value)
    return new


def stacked(layer):
    return {n: getattr(layer, n).detach() for n in layer.particle_parameter_names}


def assert_close(a, b, tol=TOL):
    err = float((a - b).detach().abs().max())
    assert err <= tol, f"max abs difference {err:.3e} > {tol:.1e}"


# ---------------------------------------------------------------- exactness against nn.MultiheadAttention


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


def test_features_formula():
    f = features(3, 5, A=1.5)
    X = torch.randn(7, 3, generator=gen(2), dtype=DT)
    ref = sum(f.a[i] * torch.tanh(X @ f.w[i]) for i in range(5)) / 5
    assert_close(f(X), ref)
    assert f.particle_outputs(X).shape == (7, 5)
    assert_close(f(X), f.particle_outputs(X).mean(1))


def vector_features(d=4, M=6, k=3, seed=0):
    """FeatureParticles with ``a_i ∈ R^k`` and random biases (their init is 0: made non-zero for the tests)."""
    f = features(d, M, seed, out_features=k, bias=True)
    with torch.no_grad():
        f.b.copy_(torch.randn(M, generator=gen(seed + 100), dtype=DT))
    return f


def test_vector_output_features_formula():
    f = vector_features(3, 5, 4, seed=3)
    assert f.particle_parameter_names == ("a", "w", "b") and f.a.shape == (5, 4) and f.b.shape == (5,)
    X = torch.randn(7, 3, generator=gen(2), dtype=DT)
    ref = sum(f.a[i] * torch.tanh(X @ f.w[i] + f.b[i])[:, None] for i in range(5)) / 5  # (7, 4)
    assert_close(f(X), ref)
    assert f.particle_outputs(X).shape == (7, 5, 4)
    assert_close(f(X), f.particle_outputs(X).mean(1))
    # a transformer MLP expansion: tokens (B, T, d) map token by token, particle axis at dimension 1
    T = torch.randn(2, 6, 3, generator=gen(4), dtype=DT)
    assert_close(f(T), torch.stack([f(T[b]) for b in range(2)]))
    assert f.particle_outputs(T).shape == (2, 5, 6, 4)
    assert_close(f.particle_outputs(T).mean(1), f(T))
    # negative control: without the biases the output differs
    no_bias = with_particles(f, a=f.a.detach(), w=f.w.detach(), b=torch.zeros(5, dtype=DT))
    assert float((no_bias(X) - f(X)).detach().abs().max()) > 1e-3


def test_one_output_is_the_scalar_layer_with_a_trailing_axis():
    """``out_features=1`` draws the same init as the scalar layer and computes the same function."""
    scalar, one = features(4, 9, seed=5), features(4, 9, seed=5, out_features=1)
    assert scalar.a.shape == (9,) and one.a.shape == (9, 1)
    assert torch.equal(one.a[:, 0], scalar.a) and torch.equal(one.w, scalar.w)
    X = torch.randn(11, 4, generator=gen(6), dtype=DT)
    assert one(X).shape == (11, 1) and scalar(X).shape == (11,)
    assert_close(one(X)[:, 0], scalar(X))
    assert_close(one.particle_outputs(X)[..., 0], scalar.particle_outputs(X))


def test_gradients_reach_every_particle():
    cases = ((attention(), tokens()), (features(), torch.randn(5, 4, dtype=DT)))
    for layer, X in (*cases, (vector_features(), torch.randn(5, 4, dtype=DT))):
        layer(X).pow(2).sum().backward()
        for name in layer.particle_parameter_names:
            g = getattr(layer, name).grad
            assert g is not None and g.shape == getattr(layer, name).shape
            assert bool((g.reshape(layer.n_particles, -1).abs().sum(1) > 0).all()), name


def test_generator_makes_init_reproducible():
    a, b, c = attention(seed=5), attention(seed=5), attention(seed=6)
    assert torch.equal(a.W_Q, b.W_Q) and torch.equal(a.W_O, b.W_O)
    assert not torch.equal(a.W_Q, c.W_Q)


# ---------------------------------------------------------------- mean-field properties

LAYERS = st.sampled_from(["attention", "causal", "features", "vector_features"])
# deterministic (fixed seed), no example database written to the repository, 15 cases each
QUICK = settings(max_examples=15, deadline=None, derandomize=True, database=None)


def make(kind: str, M: int, seed: int):
    if kind == "features":
        return features(4, M, seed), torch.randn(6, 4, generator=gen(seed + 1), dtype=DT)
    if kind == "vector_features":
        return vector_features(4, M, 3, seed), torch.randn(6, 4, generator=gen(seed + 1), dtype=DT)
    return attention(8, M, h=3, seed=seed, causal=kind == "causal"), tokens(2, 4, 8, seed + 1)


@QUICK
@given(kind=LAYERS, M=st.integers(1, 6), seed=st.integers(0, 1000), data=st.data())
def test_permuting_particles_changes_nothing(kind, M, seed, data):
    layer, X = make(kind, M, seed)
    perm = torch.tensor(data.draw(st.permutations(range(M))))
    permuted = with_particles(layer, **{n: p[perm] for n, p in stacked(layer).items()})
    assert_close(permuted(X), layer(X))


@QUICK
@given(kind=LAYERS, M=st.integers(1, 5), k=st.integers(2, 4), seed=st.integers(0, 1000))
def test_duplicating_every_particle_changes_nothing(kind, M, k, seed):
    layer, X = make(kind, M, seed)
    dup = with_particles(layer, **{n: p.repeat_interleave(k, 0) for n, p in stacked(layer).items()})
    assert dup.n_particles == k * M
    assert_close(dup(X), layer(X))


@QUICK
@given(kind=LAYERS, M=st.integers(1, 6), seed=st.integers(0, 1000))
def test_pruning_to_all_particles_is_identity(kind, M, seed):
    layer, X = make(kind, M, seed)
    same = layer.prune(list(range(M)))
    assert same is not layer and same.n_particles == M
    assert torch.equal(same(X), layer(X))


@QUICK
@given(kind=LAYERS, M=st.integers(2, 7), seed=st.integers(0, 1000), data=st.data())
def test_subsample_matches_recomputing_with_those_particles(kind, M, seed, data):
    layer, X = make(kind, M, seed)
    k = data.draw(st.integers(1, M))
    strategy = data.draw(st.sampled_from(sorted(SUBSAMPLE_STRATEGIES)))
    loss = (lambda Y: Y.pow(2).sum()) if strategy == "importance" else None
    S = layer.select(k, strategy, X=X, loss=loss, generator=gen(seed))
    assert S.shape == (k,) and len(set(S.tolist())) == k and S.tolist() == sorted(S.tolist())
    small = layer.subsample(k, strategy, X=X, loss=loss, generator=gen(seed))
    rebuilt = with_particles(layer, **{n: p[S] for n, p in stacked(layer).items()})
    assert small.n_particles == k
    assert_close(small(X), rebuilt(X))
    assert_close(small(X), layer.particle_outputs(X)[:, S].mean(1))


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


def test_prune_copies_and_accepts_masks_and_repeats():
    layer, X = make("attention", 4, 0)
    small = layer.prune(torch.tensor([True, False, True, False]))
    assert small.n_particles == 2
    assert torch.equal(small.W_Q, layer.W_Q[[0, 2]])
    assert small.W_QKV.requires_grad and small.W_QKV.grad is None
    with torch.no_grad():
        small.W_Q.zero_()
    assert bool(layer.W_Q.abs().sum() > 0)  # the original is untouched
    twice = layer.prune([1, 1, 3, 3])  # duplication: the same law as particles {1, 3}
    assert_close(twice(X), layer.prune([1, 3])(X))
    f = features(A=0.5, sphere=True)
    g = f.prune([0, 2])
    assert g.A == 0.5 and g.sphere and g.activation is f.activation


def test_random_subsample_is_reproducible_and_uniform():
    layer, _ = make("features", 6, 0)
    a = layer.select(3, "random", generator=gen(7))
    b = layer.select(3, "random", generator=gen(7))
    assert torch.equal(a, b)
    counts = torch.zeros(6)
    g = gen(3)
    for _ in range(600):
        counts[layer.select(2, "random", generator=g)] += 1
    # each particle is kept with probability 1/3: 200 ± 5·SE (SE = sqrt(600·(1/3)(2/3)) ≈ 11.5)
    assert bool(((counts - 200).abs() < 58).all()), counts


def test_importance_is_gradient_of_a_per_particle_mask():
    f = features(3, 5, seed=4)
    X = torch.randn(8, 3, generator=gen(1), dtype=DT)
    y = torch.randn(8, generator=gen(2), dtype=DT)

    def loss(Y):
        return 0.5 * (Y - y).pow(2).sum()

    I = f.importance(X, loss)
    ref = torch.zeros(5, dtype=DT)
    for n in range(8):  # Michel et al.: Σ_n |∂ℓ_n/∂ξ_i|, by autograd through an explicit gate ξ
        xi = torch.ones(5, dtype=DT, requires_grad=True)
        out = (xi * f.a * torch.tanh(X[n] @ f.w.T)).sum() / 5
        (g,) = torch.autograd.grad(0.5 * (out - y[n]) ** 2, xi)
        ref += g.abs()
    assert_close(I, ref)
    assert f.a.grad is None and f.w.grad is None
    with torch.no_grad():
        f.a[[1, 3]] = 0.0  # dead output weights: zero importance, never kept
    assert f.select(3, "importance", X=X, loss=loss).tolist() == [0, 2, 4]


def test_importance_for_attention_matches_masked_forward():
    layer = attention(8, 4, h=2, seed=3)
    X = tokens(3, 4, 8)
    target = tokens(3, 4, 8, seed=9)
    I = layer.importance(X, lambda Y: (Y - target).pow(2).sum())
    phi = layer.particle_outputs(X).detach()  # (B, M, T, d)
    ref = torch.zeros(4, dtype=DT)
    for b in range(3):
        xi = torch.ones(4, dtype=DT, requires_grad=True)
        out = (xi[:, None, None] * phi[b]).mean(0)
        (g,) = torch.autograd.grad((out - target[b]).pow(2).sum(), xi)
        ref += g.abs()
    assert_close(I, ref)


def clustered_features(sizes=(4, 2, 1), seed=0):
    """FeatureParticles whose (a, w) form tight clusters around well-separated centres."""
    centres = 10.0 * torch.eye(4, dtype=DT)[: len(sizes)]  # (K, 4)
    w = torch.cat(
        [
            c + 0.01 * torch.randn(s, 4, generator=gen(seed + j), dtype=DT)
            for j, (c, s) in enumerate(zip(centres, sizes, strict=True))
        ]
    )  # (M, 4)
    f = FeatureParticles(4, w.shape[0], "tanh", dtype=DT)
    with torch.no_grad():
        f.w.copy_(w)
        f.a.fill_(1.0)
    labels = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    return f, labels


def test_farthest_keeps_one_particle_per_cluster():
    f, labels = clustered_features((4, 2, 1))
    S = f.select(3, "farthest")
    assert sorted(labels[S].tolist()) == [0, 1, 2]


def test_farthest_on_outputs_drops_duplicate_heads_first():
    layer = attention(8, 3, h=2, seed=1)
    dup = layer.prune([0, 0, 0, 1, 1, 2])
    S = dup.select(3, "farthest", X=tokens(2, 4, 8))
    assert sorted(torch.tensor([0, 0, 0, 1, 1, 2])[S].tolist()) == [0, 1, 2]


def test_medoids_are_cluster_medoids_and_lower_the_quantisation_error():
    f, labels = clustered_features((5, 3, 3), seed=2)
    S = f.select(3, "medoids")
    assert sorted(labels[S].tolist()) == [0, 1, 2]
    phi = f.particle_features()
    for i in S.tolist():  # each chosen particle minimises the within-cluster sum of squared distances
        members = (labels == labels[i]).nonzero().flatten()
        D = torch.cdist(phi[members], phi[members]).pow(2).sum(0)
        assert int(members[D.argmin()]) == i
    err = Medoids.quantisation_error(phi, S)
    assert float(err) <= float(Medoids.quantisation_error(phi, f.select(3, "farthest"))) + 1e-15
    assert float(err) < float(Medoids.quantisation_error(phi, torch.tensor([0, 1, 2])))


# ---------------------------------------------------------------- projection


def test_project_clips_and_normalises():
    f = features(3, 50, A=0.7, sphere=True)
    assert float(f.a.detach().abs().max()) <= 0.7
    assert_close(f.w.norm(dim=1), torch.ones(50, dtype=DT))
    with torch.no_grad():
        f.a.mul_(10)
        f.w.mul_(3)
    assert f.project_() is f
    assert float(f.a.detach().abs().max()) == pytest.approx(0.7)
    assert_close(f.w.norm(dim=1), torch.ones(50, dtype=DT))
    free = features(3, 50, seed=1)
    before = stacked(free)
    free.project_()
    assert torch.equal(free.a, before["a"]) and torch.equal(free.w, before["w"])
    assert float(free.a.detach().abs().max()) > 0.7  # negative control: nothing was clipped without A


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: ParticleAttention(10, 3), ValueError, "not divisible by n_particles"),
        (lambda: ParticleAttention(8, 0), ValueError, "n_particles"),
        (lambda: ParticleAttention(8, 2.0), TypeError, "n_particles must be an int"),
        (lambda: ParticleAttention(8, 2, 0), ValueError, "d_head"),
        (lambda: attention()(torch.randn(2, 5, 7, dtype=DT)), ValueError, "d_model=12"),
        (lambda: attention()(torch.randn(5, 12, dtype=DT)), ValueError, "(B, T, d_model=12)"),
        (lambda: attention().attention_maps([1.0]), TypeError, "torch.Tensor"),
        (lambda: features()(torch.randn(5, 3, dtype=DT)), ValueError, "(N, d_in=4)"),
        (lambda: FeatureParticles(3, 4, "swish"), ValueError, "allowed"),
        (lambda: FeatureParticles(3, 4, 3.0), TypeError, "activation must be a callable"),
        (lambda: FeatureParticles(3, 4, "tanh", A=0.0), ValueError, "A must be > 0"),
        (lambda: FeatureParticles(3, 4, "tanh", sphere=1), TypeError, "sphere must be a bool"),
        (lambda: FeatureParticles(3, 4, "tanh", bias=1), TypeError, "bias must be a bool"),
        (lambda: FeatureParticles(3, 4, "tanh", out_features=0), ValueError, "out_features"),
        (lambda: features(out_features=2)(torch.randn(5, 3, dtype=DT)), ValueError, "(…, d_in=4)"),
        (lambda: features().subsample(7), ValueError, "k must be ≤ n_particles = 6"),
        (lambda: features().subsample(0), ValueError, "k must be ≥ 1"),
        (lambda: features().subsample(2.5), TypeError, "k must be an int"),
        (lambda: features().subsample(2, "best"), ValueError, "allowed: ['farthest', 'importance'"),
        (lambda: features().subsample(2, "importance"), ValueError, "needs X"),
        (
            lambda: features().importance(torch.randn(3, 4, dtype=DT), "mse"),
            TypeError,
            "loss must be a callable",
        ),
        (lambda: features().importance(torch.randn(3, 4, dtype=DT), lambda Y: Y), ValueError, "scalar"),
        (lambda: features().prune([]), ValueError, "at least one particle"),
        (lambda: features().prune([0, 6]), ValueError, "[0, 6)"),
        (lambda: features().prune([-1]), ValueError, "[0, 6)"),
        (lambda: features().prune(torch.tensor([0.0, 1.0])), TypeError, "integers or a boolean mask"),
        (lambda: features().prune(torch.tensor([True, False])), ValueError, "shape (6,)"),
        (lambda: features().prune(torch.tensor([[0, 1]])), ValueError, "1-D"),
        (lambda: features().prune("01"), TypeError, "sequence of ints"),
        (lambda: features().prune([0, True]), TypeError, "ints"),
        (lambda: Medoids(max_iter=0), ValueError, "max_iter"),
    ],
)
def test_bad_input_is_named(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value), str(info.value)


@pytest.mark.parametrize("strategy", sorted(SUBSAMPLE_STRATEGIES))
def test_strategies_return_distinct_particles_among_duplicates(strategy):
    f = features(3, 3, seed=2).prune([0, 0, 1, 1, 1, 2])
    X = torch.randn(5, 3, generator=gen(3), dtype=DT)
    for k in (3, 5, 6):
        S = f.select(k, strategy, X=X, loss=lambda Y: Y.pow(2).sum(), generator=gen(k))
        assert len(set(S.tolist())) == k, (strategy, k, S)


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
