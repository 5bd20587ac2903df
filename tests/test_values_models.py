"""Richardson's coupled runs, the LM metrics, the Transformer LM, token dynamics and the two model tasks
against independent answers: explicit loops, hand computations, closed forms, ``torch.nn`` references and the
exact error messages.

Written from the mutants that survived the default suite (``python tools/mutation.py <module>``,
docs/testing.md): each test pins a value that a planted bug changes and carries a negative control, an input
or a reference computed the wrong way that must be told apart.
"""

from __future__ import annotations

import copy
import hashlib
import math
import re
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import special

from meanfield.config import ConfigError
from meanfield.data import Batches, TokenBatches
from meanfield.drift.systems import SDE
from meanfield.nn.attention import CausalParticleAttention, ParticleAttention
from meanfield.nn.head_metrics import (
    StreamingGradientVariance,
    as_particle_model,
    corrupt_tokens,
    layer_diversity,
    loss_roughness,
    token_mean_loss,
)
from meanfield.nn.tokens import SelfAttentionDynamics, growth_rate
from meanfield.nn.transformer import CausalSelfAttention, TransformerLM, drop_particles
from meanfield.stepping.richardson import coupled_step_sizes, richardson
from meanfield.tasks.language import LM, LMData, LMModel, _corpus, lm_splits
from meanfield.tasks.sequence import SEQ_CLASSIFY, ParticleClassifier, SeqData, SeqModel, make_sequences

# ------------------------------------------------------------------------------------------------------------
# meanfield.stepping.richardson
# ------------------------------------------------------------------------------------------------------------

SIGMA = 0.7


def _drift(t, x):
    """Time-dependent, so that a wrong clock changes every record after the first segment."""
    return -x + math.cos(3.0 * float(t)) + 0.5 * float(t)


def _sde():
    return SDE(_drift, lambda t, x: SIGMA, noise="additive")


def _reference(x0, eta, n_segments, levels, record_every, segment, seed, dtype, solver="euler", clock=1.0):
    """The coupled runs written out: the segments' increments drawn as documented, summed in blocks of k, the
    Euler (or additive-noise Heun) recursion with the clock t_n = n·k·η, a record every record_every/k steps."""
    g = torch.Generator().manual_seed(seed)
    n_fine = segment * record_every
    dW = torch.cat(
        [
            torch.empty((n_fine, *x0.shape), dtype=dtype).normal_(0.0, math.sqrt(eta), generator=g)
            for _ in range(n_segments)
        ]
    )  # (N, B, M, d)
    out = {}
    for k in levels:
        h = k * eta
        inc = dW.reshape(-1, k, *x0.shape).sum(1)  # (N/k, B, M, d)
        x, rec = x0.clone(), []
        for n in range(inc.shape[0]):
            seg, within = divmod(n * k, n_fine)  # the segment and the fine step inside it
            t = clock * seg * n_fine * eta + within * eta
            if solver == "euler":
                x = x + _drift(t, x) * h + SIGMA * inc[n]
            else:  # Heun (Stratonovich = Itô for additive noise)
                y = x + _drift(t, x) * h + SIGMA * inc[n]
                x = x + 0.5 * (_drift(t, x) + _drift(t + h, y)) * h + SIGMA * inc[n]
            if (n + 1) % (record_every // k) == 0:
                rec.append(x.mean(dim=(1, 2)))
        out[k] = torch.stack(rec).numpy()
    return out


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_coupled_step_sizes_equal_the_runs_written_out(dtype):
    x0 = torch.linspace(-1.0, 1.0, 3 * 2 * 2, dtype=dtype).reshape(3, 2, 2)
    kw = dict(eta=0.05, n_segments=3, levels=(1, 2, 4), record_every=4, segment=2)
    got = coupled_step_sizes(
        _sde(), x0, observable=lambda s: s.mean(dim=(2, 3)), generator=torch.Generator().manual_seed(5), **kw
    )
    ref = _reference(x0, seed=5, dtype=dtype, **kw)
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    assert sorted(got) == [1, 2, 4]
    for k in (1, 2, 4):
        assert got[k].shape == (3 * 2, 3) and got[k].dtype == (
            np.float64 if dtype == torch.float64 else np.float32
        )
        np.testing.assert_allclose(got[k], ref[k], rtol=0, atol=tol)
    # negative controls: the clock running backwards between segments; increments drawn in the other dtype
    backwards = _reference(x0, seed=5, dtype=dtype, clock=-1.0, **kw)
    assert np.allclose(got[1][:2], backwards[1][:2], rtol=0, atol=tol)  # the first segment is the same
    assert not np.allclose(got[1], backwards[1], rtol=0, atol=1e-3)
    other = torch.float32 if dtype == torch.float64 else torch.float64
    wrong = _reference(x0.to(other), seed=5, dtype=other, **kw)[1].astype(np.float64)
    assert not np.allclose(got[1], wrong, rtol=0, atol=1e-3)  # another dtype draws another path
    # each level is a different discretisation of the same path: the levels differ, by O(η)
    assert not np.allclose(got[1], got[2], atol=1e-3)


def test_coupled_step_sizes_run_the_named_solver():
    x0 = torch.zeros(2, 1, 1, dtype=torch.float64)
    kw = dict(eta=0.1, n_segments=2, levels=(1, 2), record_every=2, segment=3)
    got = coupled_step_sizes(
        _sde(),
        x0,
        observable=lambda s: s.mean(dim=(2, 3)),
        generator=torch.Generator().manual_seed(1),
        solver="heun",
        **kw,
    )
    heun = _reference(x0, seed=1, dtype=torch.float64, solver="heun", **kw)
    euler = _reference(x0, seed=1, dtype=torch.float64, **kw)
    for k in (1, 2):
        np.testing.assert_allclose(got[k], heun[k], rtol=0, atol=1e-12)
        assert not np.allclose(got[k], euler[k], rtol=0, atol=1e-6)  # control: Euler is another answer


def test_richardson_is_two_v_eta_minus_v_two_eta():
    assert richardson(1.5, 2.0) == 1.0
    np.testing.assert_array_equal(richardson(np.array([1.0, 3.0]), np.array([0.5, 7.0])), [1.5, -1.0])
    assert richardson(1.0, 1.0) == 1.0 and richardson(1.0, 0.0) != 1.0


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"eta": 0.0}, "eta must be > 0, got 0.0"),
        ({"eta": "a"}, "eta must be a real number, got str"),
        ({"n_segments": 0}, "n_segments must be ≥ 1, got 0"),
        ({"n_segments": 1.0}, "n_segments must be an int, got float"),
        ({"record_every": 0}, "record_every must be ≥ 1, got 0"),
        ({"segment": 0}, "segment must be ≥ 1, got 0"),
        ({"segment": 2.0}, "segment must be an int, got float"),
        ({"levels": (1, 0)}, "levels must be positive ints dividing record_every = 4, got [0]"),
        ({"levels": (1, 2.0, 3)}, "levels must be positive ints dividing record_every = 4, got [2.0, 3]"),
    ],
)
def test_coupled_step_sizes_refuse_bad_arguments_naming_them(kw, message):
    args = dict(eta=0.1, n_segments=1, levels=(1, 2), record_every=4, segment=2) | kw
    with pytest.raises((ValueError, TypeError)) as err:
        coupled_step_sizes(
            _sde(),
            torch.zeros(1, 1, 1, dtype=torch.float64),
            observable=lambda s: s.mean(dim=(2, 3)),
            generator=torch.Generator(),
            **args,
        )
    assert str(err.value) == message


# ------------------------------------------------------------------------------------------------------------
# meanfield.nn.head_metrics: corrupt_tokens, StreamingGradientVariance
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fraction", [0.0, 0.3, 1.0])
def test_corrupt_tokens_equal_the_documented_draws(fraction):
    """Mask ``U(0,1) < fraction`` first, then the replacements, both from ``generator``: written out by hand."""
    idx = torch.arange(40).reshape(4, 10) % 7
    g = torch.Generator().manual_seed(3)
    mask = torch.rand(idx.shape, generator=g) < fraction
    random = torch.randint(0, 7, idx.shape, generator=g)
    expected = torch.where(mask, random, idx)
    torch.manual_seed(123)  # the global generator must not matter
    got = corrupt_tokens(idx, fraction, 7, torch.Generator().manual_seed(3))
    assert got.dtype == torch.int64 and torch.equal(got, expected)
    assert torch.equal(idx, torch.arange(40).reshape(4, 10) % 7)  # a copy: idx unchanged
    if fraction == 0.0:
        assert torch.equal(got, idx)
    if fraction == 1.0:
        assert torch.equal(got, random)  # every token replaced
        assert not torch.equal(got, idx)  # control
    if fraction == 0.3:
        assert 0 < int(mask.sum()) < mask.numel() and not torch.equal(got, idx)
        torch.manual_seed(7)
        assert torch.equal(corrupt_tokens(idx, fraction, 7, torch.Generator().manual_seed(3)), expected)
        assert not torch.equal(corrupt_tokens(idx, fraction, 7, torch.Generator().manual_seed(4)), expected)


@pytest.mark.parametrize("fraction", [-0.1, 1.0000001, 1.5, 2.0, math.nan])
def test_corrupt_tokens_refuse_a_fraction_outside_the_unit_interval(fraction):
    with pytest.raises(ValueError) as err:
        corrupt_tokens(torch.zeros(2, 3, dtype=torch.long), fraction, 5, torch.Generator())
    assert str(err.value) == f"fraction must lie in [0, 1], got {fraction}"


def test_corrupt_tokens_keep_the_tokens_device():
    """On another device (``meta`` here; CUDA in use) the mask and the draws follow ``idx``."""
    idx = torch.zeros(2, 3, dtype=torch.long, device="meta")
    out = corrupt_tokens(idx, 0.5, 5, torch.Generator())
    assert out.device == idx.device and out.shape == (2, 3)
    with pytest.raises(RuntimeError):  # control: a CPU mask with meta tokens is refused by torch.where
        torch.where(torch.zeros(2, 3, dtype=torch.bool), idx, idx)


def _grad_window(steps):
    """Parameters a (scalar), b (3,), c (never a gradient); ``steps`` = [(g_a, g_b), ...]."""
    a, b, c = (torch.nn.Parameter(torch.zeros(s, dtype=torch.float32)) for s in ((), (3,), (2,)))
    sgv = StreamingGradientVariance({"a": [a], "ab": [a, b], "c": [c], "none": []})
    for ga, gb in steps:
        a.grad, b.grad = torch.tensor(ga), torch.tensor(gb)
        sgv.update()
    return sgv


def test_streaming_gradient_variance_by_hand_and_with_numpy():
    steps = [(1.0, [0.0, 1.0, -2.0]), (2.0, [1.0, 1.0, 0.5]), (4.0, [3.0, 1.0, 0.25])]
    sgv = _grad_window(steps)
    out = sgv.compute()
    # group a (one scalar): g = 1, 2, 4: unbiased variance 7/3, mean square 7, rel 1/3; per coordinate /1
    assert out["grad_var_a"] == pytest.approx(7 / 3, rel=1e-14)
    assert out["grad_rel_var_a"] == pytest.approx(1 / 3, rel=1e-14)
    G = np.array([[ga, *gb] for ga, gb in steps])  # (n, P) the samples x parameters matrix
    var = G.var(axis=0, ddof=1).sum()
    assert out["grad_var_ab"] == pytest.approx(var / 4, rel=1e-12)
    assert out["grad_rel_var_ab"] == pytest.approx(var / (G**2).mean(0).sum(), rel=1e-12)
    assert out["grad_var_ab"] != pytest.approx(G.var(axis=0, ddof=0).sum() / 4)  # control: biased variance
    # group c: no gradient ever (counted as 0): variance 0, relative variance undefined; empty group too
    assert out["grad_var_c"] == 0.0 and math.isnan(out["grad_rel_var_c"])
    assert out["grad_var_none"] == 0.0 and math.isnan(out["grad_rel_var_none"])
    assert sorted(out) == sorted(
        f"grad_{w}_{k}" for k in ("a", "ab", "c", "none") for w in ("var", "rel_var")
    )


def test_streaming_gradient_variance_windows_and_the_smallest_one():
    assert _grad_window([(1.0, [0.0, 0.0, 0.0])]).compute() == {}  # n = 1: no variance
    two = _grad_window([(1.0, [0.0] * 3), (3.0, [0.0] * 3)]).compute()  # n = 2: var = 2, s = 5
    assert two["grad_var_a"] == pytest.approx(2.0, rel=1e-14) and two["grad_rel_var_a"] == pytest.approx(0.4)
    same = _grad_window([(2.0, [1.0, 1.0, 1.0])] * 3).compute()  # constant gradient: no variance
    assert same["grad_var_ab"] == 0.0 and same["grad_rel_var_ab"] == 0.0
    sgv = _grad_window([(1.0, [0.0] * 3), (3.0, [0.0] * 3)])
    sgv.reset()
    assert sgv.n == 0 and sgv.compute() == {}
    (a,) = sgv.groups["a"]
    for g in (5.0, 6.0, 10.0):  # a new window after reset: only its own steps count
        a.grad = torch.tensor(g)
        sgv.update()
    assert sgv.compute()["grad_var_a"] == pytest.approx(np.var([5.0, 6.0, 10.0], ddof=1), rel=1e-14)


class _KnownLoss:
    """``loss(x, y)`` = the mean of ``y`` as a float: a model whose batch losses are known by hand."""

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return y.double().mean()


def test_token_mean_loss_weights_batches_by_their_tokens():
    # batch 0: 2×3 targets of mean 1; batch 1: 1×3 targets of mean 4 → (6·1 + 3·4)/9 = 2, not (1 + 4)/2 = 2.5
    batches = [
        (torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.long)),
        (torch.zeros(1, 3, dtype=torch.long), torch.full((1, 3), 4, dtype=torch.long)),
    ]
    assert token_mean_loss(_KnownLoss(), batches) == 2.0
    assert token_mean_loss(_KnownLoss(), iter(batches)) == 2.0  # any iterable, once
    assert token_mean_loss(_KnownLoss(), batches[1:]) == 4.0


def test_token_mean_loss_equals_the_cross_entropy_over_all_tokens():
    lm = TransformerLM(11, 8, 16, 1, 2, "mha", generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, 11, (5, 8), generator=g), torch.randint(0, 11, (5, 8), generator=g)
    with torch.no_grad():
        whole = float(F.cross_entropy(lm(x).reshape(-1, 11), y.reshape(-1)))
    assert token_mean_loss(lm, [(x[:3], y[:3]), (x[3:], y[3:])]) == pytest.approx(whole, rel=1e-6)


def test_token_mean_loss_refuses_no_tokens():
    with pytest.raises(ValueError, match="at least one batch with a target token"):
        token_mean_loss(_KnownLoss(), [])


def test_loss_roughness_by_hand():
    assert loss_roughness([1.0, 3.0, 2.0, 2.5]) == pytest.approx((2 + 1 + 0.5) / 3)
    assert math.isnan(loss_roughness([1.0])) and math.isnan(loss_roughness([]))
    assert loss_roughness([2.0, 1.0]) == 1.0


# ------------------------------------------------------------------------------------------------------------
# meanfield.nn.transformer
# ------------------------------------------------------------------------------------------------------------

_LM_ARGS = dict(vocab_size=7, block_size=5, d_model=8, n_layers=2, n_heads=2)


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


class _OnAccelerator(torch.Tensor):
    """CPU tokens that say they are on an accelerator, so that the check takes its asynchronous branch (on the
    CPU ``torch._assert_async`` raises at once)."""

    @property
    def device(self):
        return torch.device("cuda", 0)


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


# ------------------------------------------------------------------------------------------------------------
# meanfield.nn.tokens
# ------------------------------------------------------------------------------------------------------------


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


# ------------------------------------------------------------------------------------------------------------
# meanfield.tasks.sequence (seq_classify)
# ------------------------------------------------------------------------------------------------------------


def _stream_seed(seed, stream: str) -> int:
    """``derive_seed`` from its documented formula: sha256 of ``"{seed}/{stream}"``, 8 bytes little-endian >> 2."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{stream}".encode()).digest()[:8], "little") >> 2


_SEQ = SeqData(seq_len=6, vocab=5, n_copies=2, n_train=48, n_test=40)
_SEQ_MODEL = SeqModel(d_model=16, n_particles=8, dt=0.75)


def test_make_sequences_label_says_whether_the_query_recurs():
    x, y = make_sequences(400, _SEQ, torch.Generator().manual_seed(0))
    assert x.shape == (400, 6) and y.shape == (400,) and x.dtype == y.dtype == torch.int64
    assert int(y.sum()) == 200  # half of each class
    repeats = (x[:, 1:] == x[:, :1]).sum(1)  # occurrences of the query after position 0
    assert torch.equal(repeats[y == 0], torch.zeros_like(repeats[y == 0]))
    assert torch.equal(repeats[y == 1], torch.full_like(repeats[y == 1], 2))  # n_copies = 2, no other repeat
    assert int(x.min()) >= 0 and int(x.max()) <= 4


def _seq_reference(seed):
    """The experiment built by hand from the documented streams: data, init, batches, drop."""
    g = torch.Generator().manual_seed(_stream_seed(seed, "data"))
    x_train, y_train = make_sequences(_SEQ.n_train, _SEQ, g)
    x_test, y_test = make_sequences(_SEQ.n_test, _SEQ, g)
    net = ParticleClassifier(
        _SEQ, _SEQ_MODEL, torch.Generator().manual_seed(_stream_seed(seed, "init"))
    ).double()
    return x_train, y_train, x_test, y_test, net


def _half_by_hand(net, x_test, y_test, strategy, drop_seed):
    """Half of the particles kept, chosen on the attention inputs, the loss seen through the head for
    "importance"; returns (loss, accuracy) of the copy on the test set."""
    x = net.token(x_test) + net.position.weight[None, : x_test.shape[1]]  # (N, T, d)
    X = net.ln(x)

    def downstream(Y):
        return F.cross_entropy(net.head(net.ln_out(x[:, 0] + net.dt * Y[:, 0])), y_test, reduction="sum")

    new = copy.deepcopy(net)
    with torch.enable_grad():
        new.attention = net.attention.subsample(
            4,
            strategy,
            X=X,
            loss=downstream if strategy == "importance" else None,
            generator=torch.Generator().manual_seed(drop_seed),
        )
    logits = new(x_test)
    return float(F.cross_entropy(logits, y_test)), float((logits.argmax(1) == y_test).double().mean())


def test_seq_classify_build_follows_the_documented_seed_streams():
    seed = 3
    torch.manual_seed(99)  # the global generator must not matter
    exp = SEQ_CLASSIFY.build(
        _SEQ, _SEQ_MODEL, batch_size=8, seed=seed, device=torch.device("cpu"), dtype=torch.float64
    )
    x_train, y_train, x_test, y_test, net = _seq_reference(seed)
    for (name, p), q in zip(exp.model.named_parameters(), net.parameters(), strict=True):
        assert torch.equal(p, q), name
    assert exp.unit == "samples" and exp.units_per_step == 8
    batches = Batches(_SEQ.n_train, 8, seed=_stream_seed(seed, "batches"))
    for _ in range(3):
        i = batches.next_indices()
        xb, yb = exp.next_batch()
        assert torch.equal(xb, x_train[i]) and torch.equal(yb, y_train[i])
    xb, yb = exp.next_batch()
    assert float(exp.loss((xb, yb)).detach()) == pytest.approx(
        float(F.cross_entropy(net(xb), yb).detach()), rel=1e-12
    )
    with torch.no_grad():
        out = exp.evaluate()
    logits = net(x_test)
    assert out["val_loss"] == pytest.approx(float(F.cross_entropy(logits, y_test)), rel=1e-12)
    assert out["val_acc"] == float((logits.argmax(1) == y_test).double().mean())
    drop = _stream_seed(seed, "drop")
    for strategy in ("random", "importance", "farthest"):
        loss, acc = _half_by_hand(net, x_test, y_test, strategy, drop)
        assert out[f"half_{strategy}_loss"] == pytest.approx(loss, rel=1e-12), strategy
        assert out[f"half_{strategy}_acc"] == acc
    # controls: other drop seeds keep other particles; farthest is not random
    for other in (_stream_seed(seed, "XXdropXX"), _stream_seed(None, "drop"), _stream_seed(seed, "DROP")):
        assert _half_by_hand(net, x_test, y_test, "random", other)[0] != pytest.approx(
            out["half_random_loss"], rel=1e-9
        )
    assert _half_by_hand(net, x_test, y_test, "random", drop)[0] != pytest.approx(
        out["half_farthest_loss"], rel=1e-9
    )
    X = net.ln(net.token(x_test) + net.position.weight[None, :6])
    A = net.attention.attention_maps(X)  # (N, M, T, T)
    flat = A.permute(1, 0, 2, 3).reshape(8, -1)
    cos = (flat @ flat.T) / (flat.norm(dim=1)[:, None] * flat.norm(dim=1)[None, :])
    assert out["attention_cosine"] == pytest.approx(float((cos.sum() - cos.diagonal().sum()) / 56), rel=1e-10)


def test_seq_classify_data_and_init_streams_are_the_documented_ones():
    x_train, y_train, x_test, y_test, net = _seq_reference(5)
    exp = SEQ_CLASSIFY.build(
        _SEQ, _SEQ_MODEL, batch_size=_SEQ.n_train, seed=5, device=torch.device("cpu"), dtype=torch.float64
    )
    xb, yb = exp.next_batch()  # one batch = a permutation of the whole training set
    order = Batches(_SEQ.n_train, _SEQ.n_train, seed=_stream_seed(5, "batches")).next_indices()
    assert torch.equal(xb, x_train[order]) and torch.equal(yb, y_train[order])
    other = SEQ_CLASSIFY.build(
        _SEQ, _SEQ_MODEL, batch_size=8, seed=6, device=torch.device("cpu"), dtype=torch.float64
    )
    assert not torch.equal(other.model.token.weight, exp.model.token.weight)  # control: another seed


def test_particle_classifier_draws_everything_from_its_generator():
    torch.manual_seed(0)
    a = ParticleClassifier(_SEQ, _SEQ_MODEL, torch.Generator().manual_seed(4))
    torch.manual_seed(1)
    b = ParticleClassifier(_SEQ, _SEQ_MODEL, torch.Generator().manual_seed(4))
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), name
    g = torch.Generator().manual_seed(4)
    att = ParticleAttention(16, 8, generator=g)  # the layer first, then embeddings and head
    assert torch.equal(a.attention.W_QKV, att.W_QKV) and torch.equal(a.attention.W_O, att.W_O)
    assert torch.equal(a.token.weight, torch.empty(5, 16).normal_(0.0, 0.5, generator=g))
    assert torch.equal(a.position.weight, torch.empty(6, 16).normal_(0.0, 0.5, generator=g))
    assert torch.equal(a.head.weight, torch.empty(2, 16).normal_(0.0, 0.25, generator=g))
    assert torch.equal(a.head.bias, torch.zeros(2))
    idx = torch.tensor([[0, 1, 2, 3, 4, 0]])
    x = a.token.weight[idx] + a.position.weight[None]
    assert torch.equal(a.stream(idx), x)
    y = x + 0.75 * a.attention(a.ln(x))
    assert torch.allclose(a(idx), a.head(a.ln_out(y[:, 0])), rtol=0, atol=1e-6)


def test_seq_classify_puts_the_batches_on_the_device():
    exp = SEQ_CLASSIFY.build(
        _SEQ, _SEQ_MODEL, batch_size=8, seed=0, device=torch.device("meta"), dtype=torch.float32
    )
    xb, yb = exp.next_batch()
    assert xb.device.type == yb.device.type == "meta" and xb.shape == (8, 6)
    assert {p.device.type for p in exp.model.parameters()} == {"meta"}


def test_particle_classifier_stream_on_the_device(device):
    net = ParticleClassifier(_SEQ, _SEQ_MODEL, torch.Generator().manual_seed(4)).double()
    idx = torch.tensor([[0, 1, 2, 3, 4, 0], [4, 4, 1, 0, 2, 3]])
    expected = net.token.weight[idx] + net.position.weight[None]
    got = copy.deepcopy(net).to(device).stream(idx.to(device))
    assert got.device.type == device.type
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-15, atol=0)


# ------------------------------------------------------------------------------------------------------------
# meanfield.tasks.language (lm)
# ------------------------------------------------------------------------------------------------------------

_TEXT = "the quick brown fox jumps over the lazy dog; " * 9  # 405 characters, 28 distinct


def _lm_setup(tmp_path, **data_kw):
    path = tmp_path / "input.txt"
    path.write_text(_TEXT, encoding="utf-8")
    vocab = sorted(set(_TEXT))
    ids = torch.tensor([vocab.index(c) for c in _TEXT])
    n_train = int(0.9 * len(ids))
    data = LMData(root=str(path), block_size=8, **data_kw)
    model = LMModel(attention="particle", d_model=8, n_layers=2, n_heads=2, d_head=3, mlp_ratio=2, dt=0.5)
    return data, model, ids[:n_train], ids[n_train:], len(vocab)


def _blocks(tokens, L):
    """The evaluation blocks written out: full blocks of L, then the remainder (every target once)."""
    n = len(tokens) - 1
    out = [(tokens[s : s + L], tokens[s + 1 : s + 1 + L]) for s in range(0, n - n % L, L)]
    if n % L:
        s = n - n % L
        out.append((tokens[s:n], tokens[s + 1 : n + 1]))
    return out


def _mean_loss(model, blocks):
    total = sum(
        float(F.cross_entropy(model(x[None]).reshape(-1, model.vocab_size), y, reduction="sum"))
        for x, y in blocks
    )
    return total / sum(len(y) for _, y in blocks)


def test_lm_build_follows_the_documented_model_and_seed_streams(tmp_path):
    data, model, train, valid, V = _lm_setup(tmp_path)
    seed = 2
    torch.manual_seed(5)
    exp = LM.build(data, model, batch_size=3, seed=seed, device=torch.device("cpu"), dtype=torch.float64)
    ref = TransformerLM(
        V,
        8,
        8,
        2,
        2,
        "particle",
        d_head=3,
        mlp_ratio=2,
        dt=0.5,
        init="matched",
        generator=torch.Generator().manual_seed(_stream_seed(seed, "init")),
        dtype=torch.float64,
    )
    assert exp.model.blocks[0].attention.d_head == 3 and exp.model.dt == 0.5
    for (name, p), (rname, q) in zip(exp.model.named_parameters(), ref.named_parameters(), strict=True):
        assert name == rname and p.shape == q.shape and torch.equal(p, q), name
    assert exp.unit == "tokens" and exp.units_per_step == 3 * 8 and exp.on_backward is None
    batches = TokenBatches(train, 8, 3, seed=_stream_seed(seed, "batches"))
    for _ in range(2):
        (x, y), (rx, ry) = exp.next_batch(), batches.next_batch()
        assert torch.equal(x, rx) and torch.equal(y, ry)
    with torch.no_grad():
        out = exp.evaluate()
        val = _mean_loss(ref, _blocks(valid, 8))
    assert len(valid) == 41 and out["val_loss"] == pytest.approx(val, rel=1e-12)
    assert out["val_ppl"] == pytest.approx(math.exp(val), rel=1e-12)
    assert out["val_bpc"] == pytest.approx(val / math.log(2), rel=1e-12)
    assert out["val_loss"] != pytest.approx(
        _mean_loss(ref, _blocks(valid, 4)), rel=1e-6
    )  # control: other blocks
    assert "probe_loss" not in out


def test_lm_probe_metrics_by_hand(tmp_path):
    data, model, train, valid, V = _lm_setup(
        tmp_path, probe_blocks=3, corrupt_fraction=0.5, min_context=3, drop_strategies=("random", "farthest")
    )
    model.attention, model.d_head = "mha", None
    seed = 4
    exp = LM.build(data, model, batch_size=2, seed=seed, device=torch.device("cpu"), dtype=torch.float64)
    net = exp.model
    net.eval()
    with torch.no_grad():
        out = exp.evaluate()
        blocks = _blocks(valid, 8)[:4]  # probe_blocks = 3 with batches of 2: the first two batches, 4 blocks
        base = _mean_loss(net, blocks)
        assert out["probe_loss"] == pytest.approx(base, rel=1e-12)
        g = torch.Generator().manual_seed(_stream_seed(seed, "corrupt"))  # one generator across the batches
        corrupted = []
        for b in range(2):
            xs = torch.stack([blocks[2 * b][0], blocks[2 * b + 1][0]])
            xc = corrupt_tokens(xs, 0.5, V, g)
            corrupted += [(xc[0], blocks[2 * b][1]), (xc[1], blocks[2 * b + 1][1])]
        corrupt = _mean_loss(net, corrupted)
        assert out["corrupt_loss"] == pytest.approx(corrupt, rel=1e-12)
        assert out["corrupt_ppl"] == pytest.approx(math.exp(corrupt), rel=1e-12)
        assert out["corrupt_gap"] == pytest.approx(corrupt - base, rel=1e-10)
        first = torch.stack([c[0] for c in corrupted[:2]])
        for other in ("CORRUPT", "XXcorruptXX", "None"):  # control: another stream corrupts other tokens
            g = torch.Generator().manual_seed(_stream_seed(seed, other))
            assert not torch.equal(
                corrupt_tokens(torch.stack([blocks[0][0], blocks[1][0]]), 0.5, V, g), first
            )
        x = torch.stack([blk[0] for blk in blocks[:2]])
        y = torch.stack([blk[1] for blk in blocks[:2]])
        pm = as_particle_model(net)
        for strategy in ("random", "farthest"):
            half = drop_particles(
                pm,
                0.5,
                strategy,
                idx=x,
                targets=y,
                generator=torch.Generator().manual_seed(_stream_seed(seed, "drop")),
            )
            dropped = _mean_loss(half, blocks)
            assert out[f"half_{strategy}_loss"] == pytest.approx(dropped, rel=1e-12)
            assert out[f"half_{strategy}_ppl"] == pytest.approx(math.exp(dropped), rel=1e-12)
            assert out[f"half_{strategy}_gap"] == pytest.approx(dropped - base, rel=1e-10)
        assert "half_importance_loss" not in out
        div = layer_diversity(net, x, 3)
        for key, value in div.items():
            assert out[key] == pytest.approx(value, rel=1e-12)
        assert {"head_sim_l0", "erank_l1", "head_sim", "erank", "erank_frac"} <= set(div)


def test_lm_gradient_statistics_window(tmp_path):
    data, model, train, valid, V = _lm_setup(tmp_path, grad_stats=True)
    exp = LM.build(data, model, batch_size=2, seed=0, device=torch.device("cpu"), dtype=torch.float64)
    net = exp.model
    names = [n for n, _ in net.named_parameters()]
    attn = [i for i, n in enumerate(names) if ".attention." in n]
    grads, losses = [], []
    for _ in range(3):
        net.zero_grad(set_to_none=True)
        loss = exp.loss(exp.next_batch())
        loss.backward()
        exp.on_backward()
        losses.append(float(loss.detach()))
        grads.append([p.grad.detach().flatten().clone() for p in net.parameters()])
    out = exp.window_metrics()
    G_all = torch.stack([torch.cat(g) for g in grads]).numpy()  # (3, P)
    G_attn = torch.stack([torch.cat([g[i] for i in attn]) for g in grads]).numpy()
    for key, G in (("attn", G_attn), ("all", G_all)):
        var = G.var(axis=0, ddof=1).sum()
        assert out[f"grad_var_{key}"] == pytest.approx(var / G.shape[1], rel=1e-9)
        assert out[f"grad_rel_var_{key}"] == pytest.approx(var / (G**2).mean(0).sum(), rel=1e-9)
    assert out["loss_roughness"] == pytest.approx(
        (abs(losses[1] - losses[0]) + abs(losses[2] - losses[1])) / 2, rel=1e-12
    )
    assert G_attn.shape[1] < G_all.shape[1]
    again = exp.window_metrics()  # the window restarted: nothing since
    assert set(again) == {"loss_roughness"} and math.isnan(again["loss_roughness"])
    with torch.no_grad():
        exp.loss(exp.next_batch())  # evaluation-like calls add no loss to the window
    assert math.isnan(exp.window_metrics()["loss_roughness"])


def test_lm_build_refuses_a_missing_split_and_places_the_model(tmp_path):
    data, model, train, valid, V = _lm_setup(tmp_path)
    data.eval_split = "test"
    with pytest.raises(ConfigError) as err:
        LM.build(data, model, batch_size=2, seed=0, device=torch.device("cpu"), dtype=torch.float64)
    assert str(err.value) == "data.'test' split: tiny_shakespeare has no test split here"
    data.eval_split = "valid"
    exp = LM.build(data, model, batch_size=2, seed=0, device=torch.device("meta"), dtype=torch.float32)
    assert {p.device.type for p in exp.model.parameters()} == {"meta"}
    assert {p.dtype for p in exp.model.parameters()} == {torch.float32}


def test_lm_holdout_trains_without_the_last_tokens_and_evaluates_on_them(tmp_path):
    """``data.holdout = h`` with ``eval_split = "holdout"``: the batches are drawn from the training split
    minus its last h tokens (the same windows as ``TokenBatches`` of ``train[:-h]``) and ``val_loss`` is the
    loss on those h tokens by hand (rel 1e-12: float64 round-off). Controls: the full training split gives
    other batches, and the loss on the valid split differs; bad settings are refused in one line."""
    h = 60
    data, model, train, valid, V = _lm_setup(tmp_path, holdout=h, eval_split="holdout")
    seed = 1
    exp = LM.build(data, model, batch_size=3, seed=seed, device=torch.device("cpu"), dtype=torch.float64)
    kept, held = train[:-h], train[-h:]
    assert len(train) == 364 and len(kept) == 304 and len(held) == h
    ours = TokenBatches(kept, 8, 3, seed=_stream_seed(seed, "batches"))
    full = TokenBatches(train, 8, 3, seed=_stream_seed(seed, "batches"))
    same_as_full = True
    for _ in range(4):
        (x, y), (rx, ry), (fx, _fy) = exp.next_batch(), ours.next_batch(), full.next_batch()
        assert torch.equal(x, rx) and torch.equal(y, ry)
        same_as_full &= torch.equal(x, fx)
    assert not same_as_full  # control: the windows of the uncut split are other windows
    with torch.no_grad():
        out = exp.evaluate()
        assert out["val_loss"] == pytest.approx(_mean_loss(exp.model, _blocks(held, 8)), rel=1e-12)
        assert out["val_loss"] != pytest.approx(_mean_loss(exp.model, _blocks(valid, 8)), rel=1e-6)
    assert lm_splits(_corpus(data), replace(data, eval_split="valid"))[1].equal(valid)  # cut, valid untouched
    D64 = torch.float64
    for bad, message in (
        ({"holdout": 0}, 'data.eval_split = "holdout" evaluates on tokens held out of the training split'),
        ({"holdout": 8}, "data.holdout must leave a block of block_size + 1 = 9 tokens on either side"),
        ({"holdout": 356}, "between 9 and 355, got 356"),
    ):
        with pytest.raises(ConfigError, match=re.escape(message)):
            LM.build(replace(data, **bad), model, batch_size=3, seed=0, device=torch.device("cpu"), dtype=D64)
