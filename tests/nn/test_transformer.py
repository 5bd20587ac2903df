"""Tests of :mod:`meanfield.nn.transformer`."""

from __future__ import annotations

import math

import pytest
import torch

from meanfield.nn.attention import CausalParticleAttention
from meanfield.nn.head_metrics import (
    as_particle_model,
)
from meanfield.nn.transformer import (
    CausalSelfAttention,
    TransformerLM,
    attention_inputs,
    drop_particles,
    particle_layers,
)

TRANSFORMER_BAD_INPUTS = [
    ("token id >= vocab_size", lambda nn: nn.TransformerLM(5, 4, 8, 1, 2)(torch.tensor([[7, 1]])), "idx"),
    ("negative token id", lambda nn: nn.TransformerLM(5, 4, 8, 1, 2)(torch.tensor([[-1, 1]])), "idx"),
    (
        "targets of another shape",
        lambda nn: nn.TransformerLM(5, 4, 8, 1, 2).loss(
            torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long)
        ),
        "targets",
    ),
    ("CausalSelfAttention on a 2-D X", lambda nn: nn.CausalSelfAttention(8, 2)(torch.randn(2, 8)), "X"),
    (
        "CausalSelfAttention on X of width 7",
        lambda nn: nn.CausalSelfAttention(8, 2)(torch.randn(1, 2, 7)),
        "X",
    ),
    ("dtype=torch.int64", lambda nn: nn.TransformerLM(5, 4, 8, 1, 2, dtype=torch.int64), "dtype"),
]


@pytest.mark.parametrize(
    "what, make, name", TRANSFORMER_BAD_INPUTS, ids=[f[0] for f in TRANSFORMER_BAD_INPUTS]
)
def test_transformer_bad_tokens_and_inputs_are_named(what, make, name):
    """Were an IndexError from the embedding and torch's own errors that named neither idx, targets nor X."""
    import meanfield.nn as mfnn

    with pytest.raises((ValueError, TypeError), match=name):
        make(mfnn)


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


def _model(attention="particle", M=8, d=32, L=2, h=None, init="matched", seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return TransformerLM(11, 12, d, L, M, attention, d_head=h, init=init, generator=g, dtype=dtype)


def _n_params(model):
    return sum(p.numel() for p in model.parameters())


def _attention_output_std(model, n_seq=64):
    idx = torch.randint(0, 11, (n_seq, 12), generator=torch.Generator().manual_seed(5))
    X = attention_inputs(model, idx)[0]  # (B, T, d)
    with torch.no_grad():
        return float(model.blocks[0].attention(X).std())


def test_families_parameter_counts():
    """Width d/M at M = 8 has exactly the parameters of 8-head MHA (and at M = 16 too); width d/8 fixed adds
    4·d·(d/8)·(M − 8) attention parameters per layer."""
    d, L = 32, 2
    mha = _n_params(_model("mha", 8, d, L))
    assert _n_params(_model("particle", 8, d, L)) == mha
    assert _n_params(_model("particle", 16, d, L)) == mha
    assert _n_params(_model("particle", 16, d, L, h=d // 8)) == mha + L * 4 * d * (d // 8) * 8


def test_mha_rewritten_as_particles_is_the_same_function():
    """as_particle_model: head j → particle j with W_O^j = H·W_out[:, jh:(j+1)h]ᵀ gives the same logits
    (float64, 1e-12); a wrong factor (W_O without ×H) does not."""
    mha = _model("mha", 4, 16, 2)
    idx = torch.randint(0, 11, (3, 12), generator=torch.Generator().manual_seed(1))
    pm = as_particle_model(mha)
    assert all(layer.n_particles == 4 for layer in particle_layers(pm))
    with torch.no_grad():
        assert torch.allclose(pm(idx), mha(idx), rtol=0, atol=1e-12)
        for layer in particle_layers(pm):
            layer.W_O.div_(4)
        assert not torch.allclose(pm(idx), mha(idx), atol=1e-4)


@pytest.mark.parametrize("M,h", [(8, None), (16, None), (16, 8)])
def test_matched_init_matches_the_baseline_block_output_scale(M, h):
    """init="matched": the first block's attention output has the baseline's standard deviation at init
    (ratio within 15 % averaged over 6 initialisations, d = 64); "native" is ≥ 5× larger — the mismatch the
    matched init removes. For h = d/M the weights' laws are the baseline's: W_QKV std 0.02, W_O std
    M·0.02/√(2L)."""
    d = 64
    mha = sum(_attention_output_std(_model("mha", 8, d, 2, seed=s)) for s in range(6))
    matched = sum(_attention_output_std(_model("particle", M, d, 2, h=h, seed=s)) for s in range(6))
    native = sum(
        _attention_output_std(_model("particle", M, d, 2, h=h, init="native", seed=s)) for s in range(6)
    )
    assert 0.85 < matched / mha < 1.15
    assert native / mha > 5
    if h is None:
        layer = particle_layers(_model("particle", M, d, 2))[0]
        assert abs(float(layer.W_QKV.detach().std()) / 0.02 - 1) < 0.05
        assert abs(float(layer.W_O.detach().std()) / (M * 0.02 / 2) - 1) < 0.05


def test_coupled_init_shares_the_baseline_draws_at_every_width_d_over_m():
    """At M = 16 (h = d/16) against the 8-head baseline: embeddings, LayerNorms and MLPs are the baseline's,
    and W_QKV / W_O hold the baseline's qkv / out draws (rows q, k, v cut into 16 heads; W_O = M·W_outᵀ). In the
    fixed-width family (M·h ≠ d) the heads are drawn in the baseline's place with the matched law: W_QKV std
    0.02, W_O std 0.02/√(2L)·√(M d/h) (within 5 % over 6,144 / 2,048 entries; SE ≈ 1 %, 1.5 %)."""
    d, L = 32, 2
    mha = _model("mha", 8, d, L, seed=3)
    wide = _model("particle", 16, d, L, init="coupled", seed=3)
    base = dict(mha.named_parameters())
    for name, p in wide.named_parameters():
        if name.endswith("W_QKV"):
            qkv = base[name.replace("W_QKV", "qkv.weight")]  # (3d, d)
            assert torch.equal(p.transpose(0, 1).reshape(3 * d, d), qkv), name
        elif name.endswith("W_O"):
            out = base[name.replace("W_O", "out.weight")]  # (d, d)
            assert torch.equal(p.reshape(d, d), 16 * out.T), name
        else:
            assert torch.equal(p, base[name]), name
    fixed = _model("particle", 16, d, L, h=8, init="coupled", seed=3)
    layer = particle_layers(fixed)[0]
    assert abs(float(layer.W_QKV.detach().std()) / 0.02 - 1) < 0.05
    assert abs(float(layer.W_O.detach().std()) / (0.02 / 2 * math.sqrt(16 * d / 8)) - 1) < 0.05
    assert torch.equal(fixed.token_embedding.weight, mha.token_embedding.weight)


def test_bad_init_name():
    with pytest.raises(ValueError, match="init"):
        _model(init="xavier")


def test_drop_all_kept_is_identity_and_original_untouched():
    model = _model("particle", 8)
    idx = torch.randint(0, 11, (2, 12), generator=torch.Generator().manual_seed(2))
    before = [p.detach().clone() for p in model.parameters()]
    same = drop_particles(model, 1.0, "random", generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(same(idx), model(idx), atol=1e-12)
    half = drop_particles(model, 0.5, "random", generator=torch.Generator().manual_seed(0))
    assert [layer.n_particles for layer in particle_layers(half)] == [4, 4]
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    with torch.no_grad():
        assert not torch.allclose(half(idx), model(idx), atol=1e-6)


def test_drop_keeps_the_chosen_particles_average():
    """The dropped model's layer ℓ is 1/k Σ_{i∈S} v_θi: checked against the particle outputs of the original."""
    model = _model("particle", 8)
    idx = torch.randint(0, 11, (2, 12), generator=torch.Generator().manual_seed(3))
    half = drop_particles(model, 4, "random", generator=torch.Generator().manual_seed(7))
    X = attention_inputs(half, idx)  # inputs seen by the dropped model
    for small, big, x in zip(particle_layers(half), particle_layers(model), X, strict=True):
        phi = big.particle_outputs(x)  # (B, 8, T, d)
        # find which particles were kept: rows of W_QKV equal to the original's
        kept = [i for i in range(8) if any(torch.equal(big.W_QKV[i], w) for w in small.W_QKV)]
        assert len(kept) == 4
        with torch.no_grad():
            assert torch.allclose(small(x), phi[:, kept].mean(1), atol=1e-12)


def test_farthest_keeps_the_distinct_particles_of_a_duplicated_law():
    """Each of 4 particles duplicated (M = 8): the empirical law is unchanged by keeping one copy of each, so
    the diversity-keeping drop to 4 returns the same function (a random drop usually does not)."""
    model = _model("particle", 4)
    with torch.no_grad():
        for block in model.blocks:
            block.attention = block.attention.prune([0, 1, 2, 3, 0, 1, 2, 3])
    idx = torch.randint(0, 11, (3, 12), generator=torch.Generator().manual_seed(4))
    kept = drop_particles(model, 0.5, "farthest", idx=idx)
    with torch.no_grad():
        assert torch.allclose(kept(idx), model(idx), atol=1e-12)
        rand = drop_particles(model, 0.5, "random", generator=torch.Generator().manual_seed(1))
        assert not torch.allclose(rand(idx), model(idx), atol=1e-6)


def test_importance_drops_the_particles_that_do_nothing():
    """Particles 0..3 of every layer have W_O = 0 (zero output, zero gate gradient): importance keeps 4..7."""
    model = _model("particle", 8)
    with torch.no_grad():
        for layer in particle_layers(model):
            layer.W_O[:4] = 0
    g = torch.Generator().manual_seed(5)
    idx, targets = torch.randint(0, 11, (4, 12), generator=g), torch.randint(0, 11, (4, 12), generator=g)
    kept = drop_particles(model, 0.5, "importance", idx=idx, targets=targets)
    for small, big in zip(particle_layers(kept), particle_layers(model), strict=True):
        assert torch.equal(small.W_QKV, big.W_QKV[4:])
    with pytest.raises(ValueError, match="targets"):
        drop_particles(model, 0.5, "importance", idx=idx)
    with pytest.raises(ValueError, match="particle"):
        drop_particles(_model("mha"), 0.5)


def test_dropped_model_trains_with_rebuilt_groups():
    from meanfield.optim import Langevin

    model = drop_particles(_model("particle", 8, dtype=torch.float32), 0.5, generator=torch.Generator())
    groups = Langevin.param_groups_for(model)
    assert [g["n_particles"] for g in groups[:-1]] == [4, 4]
    opt = Langevin(groups, lr=1e-3, beta=1e-4, drift="adam", seed=0)
    idx = torch.randint(0, 11, (2, 12))
    before = particle_layers(model)[0].W_QKV.detach().clone()
    model.loss(idx, idx).backward()
    opt.step()
    assert not torch.equal(before, particle_layers(model)[0].W_QKV)


_LM_ARGS = dict(vocab_size=7, block_size=5, d_model=8, n_layers=2, n_heads=2)


class _OnAccelerator(torch.Tensor):
    """CPU tokens that say they are on an accelerator, so that the check takes its asynchronous branch (on the
    CPU ``torch._assert_async`` raises at once)."""

    @property
    def device(self):
        return torch.device("cuda", 0)


@pytest.mark.parametrize(
    "kw, error, message",
    [
        ({"vocab_size": 0}, ValueError, "vocab_size must be ≥ 1, got 0"),
        ({"block_size": 0}, ValueError, "block_size must be ≥ 1, got 0"),
        ({"block_size": 2.0}, TypeError, "block_size must be an int, got float"),
        ({"d_model": 0}, ValueError, "d_model must be ≥ 1, got 0"),
        ({"n_layers": 0}, ValueError, "n_layers must be ≥ 1, got 0"),
        ({"n_heads": 0}, ValueError, "n_heads must be ≥ 1, got 0"),
        ({"n_heads": 3}, ValueError, "d_model=8 must be divisible by n_heads=3"),
        ({"mlp_ratio": 0}, ValueError, "mlp_ratio must be ≥ 1, got 0"),
        ({"dt": 0.0}, ValueError, "dt must be > 0, got 0.0"),
        ({"attention": "rnn"}, ValueError, "attention must be one of ('mha', 'particle'), got 'rnn'"),
        ({"init": "xavier"}, ValueError, "init must be one of ('native', 'matched', 'coupled'), got 'xavier'"),
        (
            {"dtype": torch.long},
            TypeError,
            "dtype must be a floating-point torch.dtype (e.g. torch.float32) or None, got torch.int64",
        ),
    ],
)
def test_transformer_lm_refuses_bad_arguments_naming_them(kw, error, message):
    with pytest.raises(error) as err:
        TransformerLM(**(_LM_ARGS | kw))
    assert str(err.value) == message


@pytest.mark.parametrize(
    "args, error, message",
    [
        ((0, 1), ValueError, "d_model must be ≥ 1, got 0"),
        ((4, 0), ValueError, "n_heads must be ≥ 1, got 0"),
        ((4.0, 1), TypeError, "d_model must be an int, got float"),
        ((6, 4), ValueError, "d_model=6 must be divisible by n_heads=4"),
        (
            (8, 2, torch.long),
            TypeError,
            "dtype must be a floating-point torch.dtype (e.g. torch.float32) or None, got torch.int64",
        ),
    ],
)
def test_causal_self_attention_refuses_bad_sizes_naming_them(args, error, message):
    with pytest.raises(error) as err:
        CausalSelfAttention(*args[:2], dtype=args[2] if len(args) > 2 else None)
    assert str(err.value) == message


def test_causal_self_attention_has_no_biases_and_lives_on_its_device():
    layer = CausalSelfAttention(8, 2, dtype=torch.float64)
    assert [n for n, _ in layer.named_parameters()] == ["qkv.weight", "out.weight"]
    assert layer.qkv.weight.shape == (24, 8) and layer.out.weight.shape == (8, 8)
    assert layer.qkv.bias is None and layer.out.bias is None
    meta = CausalSelfAttention(8, 2, device="meta")
    assert {p.device.type for p in meta.parameters()} == {"meta"} and len(list(meta.parameters())) == 2
    for attention in ("mha", "particle"):
        model = TransformerLM(**_LM_ARGS, attention=attention, device="meta")
        assert {p.device.type for p in model.parameters()} == {"meta"}
    assert {p.device.type for p in CausalSelfAttention(8, 2).parameters()} == {"cpu"}  # control


def test_transformer_lm_forward_refuses_bad_tokens_with_the_exact_message():
    model = TransformerLM(**_LM_ARGS, dtype=torch.float64)
    ok = torch.tensor([[0, 6, 3]])
    assert model(ok).shape == (1, 3, 7)
    assert model(torch.zeros(1, 5, dtype=torch.long)).shape == (1, 5, 7)  # T = block_size is allowed
    cases = [
        (torch.zeros(1, 6, dtype=torch.long), "sequence length 6 exceeds block_size=5"),
        (torch.tensor([[0, 7]]), "idx must hold token ids in [0, vocab_size=7), got min 0, max 7"),
        (torch.tensor([[-1, 2]]), "idx must hold token ids in [0, vocab_size=7), got min -1, max 2"),
        (
            torch.zeros(3, dtype=torch.long),
            "idx must be an int64 tensor of shape (B, T), got torch.int64 (3,)",
        ),
        (
            torch.zeros(1, 3, dtype=torch.int32),
            "idx must be an int64 tensor of shape (B, T), got torch.int32 (1, 3)",
        ),
        ([[0, 1]], "idx must be an int64 tensor of shape (B, T), got list"),
    ]
    for idx, message in cases:
        with pytest.raises(ValueError) as err:
            model(idx)
        assert str(err.value) == message
    with pytest.raises(ValueError) as err:
        model.loss(ok, torch.zeros(1, 2, dtype=torch.long))
    assert str(err.value) == "targets must have the shape of idx (1, 3), got (1, 2)"
    with pytest.raises(ValueError) as err:
        model.loss(ok, torch.tensor([[0, 1, 9]]))
    assert str(err.value) == "targets must hold token ids in [0, vocab_size=7), got min 0, max 9"


def test_token_range_on_an_accelerator_is_asserted_with_the_same_bounds():
    model = TransformerLM(**_LM_ARGS)
    for good in ([[0, 6]], [[3, 3]]):
        model._check_tokens("idx", torch.tensor(good).as_subclass(_OnAccelerator))  # no error
    for bad in ([[0, 7]], [[-1, 0]], [[8, 2]]):
        with pytest.raises(RuntimeError, match=r"^idx must hold token ids in \[0, vocab_size=7\)$"):
            model._check_tokens("idx", torch.tensor(bad).as_subclass(_OnAccelerator))
    with pytest.raises(ValueError, match=r"got min 0, max 7$"):  # control: the CPU branch says more
        model._check_tokens("idx", torch.tensor([[0, 7]]))


def test_mha_lm_initialisation_by_hand():
    """Every matrix N(0, 0.02²) in parameter order from the generator, the output projections (attention
    ``out`` and ``mlp.2``) N(0, 0.02²/(2L)); LayerNorm weights 1."""
    torch.manual_seed(0)
    model = TransformerLM(
        **(_LM_ARGS | {"n_layers": 3}), generator=torch.Generator().manual_seed(2), dtype=torch.float64
    )
    g = torch.Generator().manual_seed(2)
    small = 0
    for name, p in model.named_parameters():
        if p.dim() < 2:
            assert torch.equal(p, torch.ones_like(p)), name
            continue
        std = 0.02 / math.sqrt(6) if name.endswith(("out.weight", "mlp.2.weight")) else 0.02
        small += std < 0.02
        assert torch.equal(p, torch.empty_like(p).normal_(0.0, std, generator=g)), name
    assert small == 6  # two per block
    assert float(model.token_embedding.weight.detach().std()) == pytest.approx(0.02, rel=0.1)  # control: the scale


@pytest.mark.parametrize("init", ["native", "matched"])
def test_particle_lm_initialisation_comes_from_its_generator_only(init):
    """Layers first (each ``CausalParticleAttention`` draws its heads from the generator), then every other
    matrix N(0, 0.02²), the output projections N(0, 0.02²/(2L)); the global generator is never read."""
    kw = _LM_ARGS | {"attention": "particle", "d_head": 3, "init": init, "dtype": torch.float64}
    torch.manual_seed(0)
    a = TransformerLM(**kw, generator=torch.Generator().manual_seed(11))
    torch.manual_seed(1)
    b = TransformerLM(**kw, generator=torch.Generator().manual_seed(11))
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), name
    c = TransformerLM(**kw, generator=torch.Generator().manual_seed(12))
    assert not torch.equal(a.blocks[0].attention.W_QKV, c.blocks[0].attention.W_QKV)  # control: another seed
    g = torch.Generator().manual_seed(11)
    layers = [CausalParticleAttention(8, 2, d_head=3, generator=g, dtype=torch.float64) for _ in range(2)]
    ref = {}
    for name, p in a.named_parameters():  # the remaining draws, in parameter order
        if name.endswith(("W_QKV", "W_O")) or p.dim() < 2:
            continue
        std = 0.02 / math.sqrt(4) if name.endswith(("out.weight", "mlp.2.weight")) else 0.02
        ref[name] = torch.empty_like(p).normal_(0.0, std, generator=g)
    for name, p in a.named_parameters():
        if name in ref:
            assert torch.equal(p, ref[name]), name
        elif p.dim() < 2:
            assert torch.equal(p, torch.ones_like(p)), name  # LayerNorm weights
    for ell, layer in enumerate(layers):
        mine = a.blocks[ell].attention
        assert (mine.d_head, mine.n_particles) == (3, 2)
        if init == "native":
            assert torch.equal(mine.W_QKV, layer.W_QKV) and torch.equal(mine.W_O, layer.W_O)
    if init == "matched":  # then W_QKV ~ N(0, 0.02²), W_O ~ N(0, σ_o² M d/h), drawn after the rest
        for layer in a.blocks:
            att = layer.attention
            assert torch.equal(att.W_QKV, torch.empty_like(att.W_QKV).normal_(0.0, 0.02, generator=g))
            std = 0.02 / math.sqrt(4) * math.sqrt(2 * 8 / 3)
            assert torch.equal(att.W_O, torch.empty_like(att.W_O).normal_(0.0, std, generator=g))
