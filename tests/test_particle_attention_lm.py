"""Issue 14: particle-attention language models (families, fair init, particle dropping, metrics, runs)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from meanfield.nn.head_metrics import (
    StreamingGradientVariance,
    as_particle_model,
    corrupt_tokens,
    head_similarity,
    layer_diversity,
    loss_roughness,
    output_effective_rank,
)
from meanfield.nn.transformer import TransformerLM, attention_inputs, drop_particles, particle_layers
from meanfield.runs import TIMING_KEYS, run

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "experiments" / "particle_attention" / "config.toml"
TOY = ROOT / "experiments" / "particle_attention" / "toy.toml"


def _model(attention="particle", M=8, d=32, L=2, h=None, init="matched", seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return TransformerLM(11, 12, d, L, M, attention, d_head=h, init=init, generator=g, dtype=dtype)


def _n_params(model):
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------------------------------------
# families and initialisation


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


def _attention_output_std(model, n_seq=64):
    idx = torch.randint(0, 11, (n_seq, 12), generator=torch.Generator().manual_seed(5))
    X = attention_inputs(model, idx)[0]  # (B, T, d)
    with torch.no_grad():
        return float(model.blocks[0].attention(X).std())


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


# ---------------------------------------------------------------------------------------------------------
# model-level particle operations


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


# ---------------------------------------------------------------------------------------------------------
# metrics with known answers


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


# ---------------------------------------------------------------------------------------------------------
# runs through `meanfield run`


def _deterministic(records):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records]


def test_smoke_run_logs_every_metric_and_resumes_exactly(tmp_path):
    """``meanfield run`` of the config's smoke preset (β = 1e-3): every metric is logged and finite; a run
    stopped at step 8 and resumed from its step-6 checkpoint logs the same lines (the streaming gradient
    variance and loss roughness restart at logging steps) and ends with the same parameters."""
    a, b = tmp_path / "a", tmp_path / "b"
    ra = run(CONFIG, a, preset="smoke", overrides=["optim.beta=1e-3"], quiet=True)

    def stop(step: int) -> None:
        if step == 8:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        run(CONFIG, b, preset="smoke", overrides=["optim.beta=1e-3"], quiet=True, on_step=stop)
    rb = run(CONFIG, b, preset="smoke", overrides=["optim.beta=1e-3"], quiet=True, resume=True)
    assert _deterministic(ra.metrics) == _deterministic(rb.metrics)
    sa = torch.load(sorted((a / "checkpoints").glob("*.pt"))[-1], weights_only=True)["model"]
    sb = torch.load(sorted((b / "checkpoints").glob("*.pt"))[-1], weights_only=True)["model"]
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    summary = json.loads((a / "summary.json").read_text())
    assert summary["status"] == "finished"
    final = summary["final"]
    keys = (
        "val_loss",
        "val_bpc",
        "half_random_loss",
        "half_importance_loss",
        "half_farthest_loss",
        "corrupt_loss",
        "head_sim_l0",
        "erank_l1",
        "grad_rel_var_attn",
        "loss_roughness",
    )
    for key in keys:
        assert key in final and math.isfinite(final[key]), key
    assert math.isclose(final["val_bpc"], final["val_loss"] / math.log(2), rel_tol=1e-12)
    groups = ra.metrics[-1]["groups"]
    assert len(groups) == 3 and groups[0]["noise_rms"] > 0 and groups[-1]["noise_rms"] == 0  # 2 layers + rest


def test_toy_smoke_run(tmp_path):
    result = run(TOY, tmp_path / "toy", preset="smoke", quiet=True)
    summary = json.loads((tmp_path / "toy" / "summary.json").read_text())
    assert summary["status"] == "finished" and result.step == 6
    for key in ("val_acc", "half_random_acc", "half_importance_acc", "attention_cosine"):
        assert 0 <= summary["final"][key] <= 1
