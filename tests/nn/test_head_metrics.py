"""Tests of :mod:`meanfield.nn.head_metrics`: a language model's heads (similarity, effective rank, gradient noise, corruption)."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from meanfield.nn.head_metrics import (
    StreamingGradientVariance,
    as_particle_model,
    corrupt_tokens,
    head_similarity,
    layer_diversity,
    loss_roughness,
    output_effective_rank,
    token_mean_loss,
)
from meanfield.nn.transformer import (
    TransformerLM,
    drop_particles,
)
from meanfield.tasks.language import LM, LMData, LMModel


def _model(attention="particle", M=8, d=32, L=2, h=None, init="matched", seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return TransformerLM(11, 12, d, L, M, attention, d_head=h, init=init, generator=g, dtype=dtype)


def test_coupled_init_is_the_baseline_rewritten_as_particles():
    """init="coupled" at M = H, h = d/M: every parameter equals as_particle_model(the H-head LM of the same
    generator), an independent rearrangement (head j -> particle j, W_O^j = H·W_out[:, jh:(j+1)h]ᵀ), so the
    logits agree to 1e-12; the matched init of the same seed (same law, other draws) does not."""
    mha = _model("mha", 4, 16, 2, seed=7)
    coupled = _model("particle", 4, 16, 2, init="coupled", seed=7)
    reference = dict(as_particle_model(mha).named_parameters())
    for name, p in coupled.named_parameters():
        assert torch.equal(p, reference[name]), name
    idx = torch.randint(0, 11, (3, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(coupled(idx), mha(idx), rtol=0, atol=1e-12)
        matched = _model("particle", 4, 16, 2, init="matched", seed=7)
        assert not torch.allclose(matched(idx), mha(idx), atol=1e-3)


def test_head_similarity_ignores_the_early_rows():
    """Head A attends to token 0, head B to itself: rows s ≥ 1 are disjoint (cosine 0), row 0 is e_0 for
    both. With all T rows the cosine is 1/T; from min_context = 2 on it is 0; identical heads give 1."""
    T = 8
    A = torch.zeros(T, T)
    A[:, 0] = 1
    B = torch.eye(T)
    maps = torch.stack([A, B])[None]  # (1, 2, T, T)
    assert math.isclose(float(head_similarity(maps, 1)), 1 / T, rel_tol=1e-6)
    assert float(head_similarity(maps, 2)) == 0.0
    assert math.isclose(float(head_similarity(torch.stack([A, A])[None], 3)), 1.0, rel_tol=1e-6)


def test_output_effective_rank_known_answers():
    g = torch.Generator().manual_seed(0)
    one = torch.randn(500, 1, 4, generator=g).expand(500, 6, 4)  # (N, M, d) identical heads
    assert math.isclose(float(output_effective_rank(one)), 1.0, rel_tol=1e-6)
    indep = torch.randn(20000, 6, 4, generator=g, dtype=torch.float64)
    assert 5.9 < float(output_effective_rank(indep)) <= 6.0


def test_streaming_gradient_variance_equals_the_batch_formula():
    g = torch.Generator().manual_seed(0)
    p, q = torch.nn.Parameter(torch.zeros(3, 4)), torch.nn.Parameter(torch.zeros(5))
    tracker = StreamingGradientVariance({"p": [p], "all": [p, q]})
    draws = []
    for _ in range(7):
        p.grad, q.grad = torch.randn(3, 4, generator=g) + 2, torch.randn(5, generator=g)
        draws.append(torch.cat([p.grad.flatten(), q.grad]).double())
        tracker.update()
    G = torch.stack(draws)  # (7, 17)
    out = tracker.compute()
    assert math.isclose(out["grad_var_all"], float(G.var(0).mean()), rel_tol=1e-10)
    assert math.isclose(
        out["grad_rel_var_all"], float(G.var(0).sum() / G.square().mean(0).sum()), rel_tol=1e-10
    )
    assert math.isclose(out["grad_var_p"], float(G[:, :12].var(0).mean()), rel_tol=1e-10)
    tracker.reset()
    assert tracker.compute() == {}


def test_streaming_gradient_variance_state_continues_a_window_in_another_tracker():
    """3 updates, the state saved and loaded into a fresh tracker, 4 more: the 7-step window's numbers, bit for
    bit (a run resumed between two metrics lines); an empty window saves ``{}`` and loads as empty. Control:
    the fresh tracker without the state has the last 4 steps only."""
    g = torch.Generator().manual_seed(1)
    p = torch.nn.Parameter(torch.zeros(6))
    grads = [torch.randn(6, generator=g) + 1 for _ in range(7)]
    whole, first, second, alone = (StreamingGradientVariance({"p": [p]}) for _ in range(4))
    assert whole.state_dict() == {}
    for k, grad in enumerate(grads):
        p.grad = grad
        whole.update()
        (first if k < 3 else second).update()
        if k >= 3:
            alone.update()
        if k == 2:
            second.load_state_dict(first.state_dict())
    assert second.compute() == whole.compute() and alone.compute() != whole.compute()
    second.load_state_dict({})
    assert second.n == 0 and second.compute() == {}


def test_corrupt_tokens_fraction():
    idx = torch.zeros(200, 100, dtype=torch.long)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(corrupt_tokens(idx, 0.0, 10, g), idx)
    changed = (corrupt_tokens(idx, 0.3, 10, g) != idx).double().mean()
    assert abs(float(changed) - 0.3 * 0.9) < 0.01  # a replacement is the same token with probability 1/V


def test_loss_roughness():
    assert loss_roughness([1.0, 3.0, 2.0]) == 1.5
    assert math.isnan(loss_roughness([1.0]))


def test_layer_diversity_of_mha_and_particles():
    idx = torch.randint(0, 11, (4, 12), generator=torch.Generator().manual_seed(0))
    for model in (_model("mha", 4), _model("particle", 4)):
        out = layer_diversity(model, idx, 4)
        assert set(out) >= {"head_sim_l0", "head_sim_l1", "erank_l0", "erank_l1", "head_sim", "erank"}
        assert 0 <= out["head_sim"] <= 1 and 1 <= out["erank"] <= 4


def _grad_window(steps):
    """Parameters a (scalar), b (3,), c (never a gradient); ``steps`` = [(g_a, g_b), ...]."""
    a, b, c = (torch.nn.Parameter(torch.zeros(s, dtype=torch.float32)) for s in ((), (3,), (2,)))
    sgv = StreamingGradientVariance({"a": [a], "ab": [a, b], "c": [c], "none": []})
    for ga, gb in steps:
        a.grad, b.grad = torch.tensor(ga), torch.tensor(gb)
        sgv.update()
    return sgv


class _KnownLoss:
    """``loss(x, y)`` = the mean of ``y`` as a float: a model whose batch losses are known by hand."""

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return y.double().mean()


def _stream_seed(seed, stream: str) -> int:
    """``derive_seed`` from its documented formula: sha256 of ``"{seed}/{stream}"``, 8 bytes little-endian >> 2."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{stream}".encode()).digest()[:8], "little") >> 2


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
        blocks = _blocks(valid, 8)[:3]  # probe_blocks = 3 with batches of 2: exactly 3 blocks (2 + 1)
        base = _mean_loss(net, blocks)
        assert out["probe_loss"] == pytest.approx(base, rel=1e-12)
        assert base != pytest.approx(_mean_loss(net, _blocks(valid, 8)[:4]), rel=1e-6)  # not rounded up to 4
        g = torch.Generator().manual_seed(_stream_seed(seed, "corrupt"))  # one generator across the batches
        corrupted = []
        for batch in (blocks[:2], blocks[2:]):
            xc = corrupt_tokens(torch.stack([b[0] for b in batch]), 0.5, V, g)  # (2 or 1, 8)
            corrupted += [(xc[i], batch[i][1]) for i in range(len(batch))]
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


def test_layer_diversity_by_hand():
    """A 2-layer 4-head LM, rows from min_context = 4 on (s ≥ 3: at least 4 visible tokens): per layer the mean
    off-diagonal cosine of the heads' attention maps and the effective rank of the heads' output covariance over
    the (batch, token) pairs, written out with NumPy; their means over layers and erank/M. Six mutations passed
    the bounds-only tests (no min_context slice, heads mixed with tokens, erank_frac not over M, one layer only)."""
    import scipy.special

    from meanfield.nn.transformer import attention_inputs

    model = TransformerLM(
        11, 12, 16, 2, 4, "mha", generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    idx = torch.randint(0, 11, (3, 12), generator=torch.Generator().manual_seed(1))  # (B, T)
    mc = 4
    out = layer_diversity(model, idx, mc)
    pm = as_particle_model(model)
    sims, ranks = [], []
    with torch.no_grad():
        for ell, (block, X) in enumerate(zip(pm.blocks, attention_inputs(pm, idx))):
            A = block.attention.attention_maps(X)  # (B, M, T, T)
            P = block.attention.particle_outputs(X)  # (B, M, T, d)
            M = A.shape[1]
            vec = [A[:, i, mc - 1 :, :].reshape(-1) for i in range(M)]
            cos = [
                float(vec[i] @ vec[j] / (vec[i].norm() * vec[j].norm()))
                for i in range(M)
                for j in range(M)
                if i != j
            ]
            Z = np.stack(
                [P[:, i, mc - 1 :, :].reshape(-1, P.shape[-1]).numpy() for i in range(M)]
            )  # (M, N, d)
            Z = Z - Z.mean(1, keepdims=True)
            lam = np.clip(np.linalg.eigvalsh(np.einsum("inf,jnf->ij", Z, Z) / (Z.shape[1] - 1)), 0, None)
            p = lam / lam.sum()
            sims.append(sum(cos) / len(cos))
            ranks.append(math.exp(-scipy.special.xlogy(p, p).sum()))
            assert out[f"head_sim_l{ell}"] == pytest.approx(sims[-1], rel=1e-9)
            assert out[f"erank_l{ell}"] == pytest.approx(ranks[-1], rel=1e-9)
    assert out["head_sim"] == pytest.approx(np.mean(sims), rel=1e-9)
    assert out["erank"] == pytest.approx(np.mean(ranks), rel=1e-9)
    assert out["erank_frac"] == pytest.approx(np.mean(ranks) / 4, rel=1e-9)
    # control: the layers differ by far more than the 1e-9 the checks resolve (near-uniform maps at init)
    assert abs(sims[0] - sims[1]) > 1e-7 and abs(ranks[0] - ranks[1]) > 1e-7
