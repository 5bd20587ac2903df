"""Tests of :mod:`meanfield.tasks.language`."""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from meanfield.config import ConfigError
from meanfield.data import TokenBatches
from meanfield.nn.transformer import (
    TransformerLM,
)
from meanfield.runs import TIMING_KEYS, run
from meanfield.tasks.language import LM, LMData, LMModel, _corpus, lm_splits


def _wikitext(tmp_path):
    folder = tmp_path / "wikitext-2"
    folder.mkdir()
    (folder / "valid.txt").write_text("a b\nc a\n", encoding="utf-8")
    (folder / "test.txt").write_text("b c\n", encoding="utf-8")
    return folder


def test_corpus_loads_the_wikitext_splits_named_for_training_and_evaluation(tmp_path):
    """WikiText-2: exactly the train and eval splits are loaded (ids by first appearance over them: hand
    computed); the same split twice loads it once; the other splits are ``None``."""
    root = _wikitext(tmp_path)
    both = _corpus(LMData(dataset="wikitext2", root=str(root), train_split="valid", eval_split="test"))
    assert both.vocab == ["a", "b", "<eos>", "c"]
    assert both.valid.tolist() == [0, 1, 2, 3, 0, 2] and both.test.tolist() == [1, 3, 2]
    assert both.train is None
    one = _corpus(LMData(dataset="wikitext2", root=str(root), train_split="valid", eval_split="valid"))
    assert one.valid.tolist() == [0, 1, 2, 3, 0, 2] and one.test is None and one.train is None
    swapped = _corpus(LMData(dataset="wikitext2", root=str(root), train_split="test", eval_split="valid"))
    assert swapped.vocab == ["a", "b", "<eos>", "c"]  # read in train, valid, test order whatever is asked


def test_corpus_passes_root_and_splits_to_the_loaders(monkeypatch, tmp_path):
    """``root = ""`` means the default (``None``); ``tiny_shakespeare`` gets only the root; ``wikitext2`` the
    root and the de-duplicated ``(train_split, eval_split)``. The real loader reads a small ``input.txt``."""
    from meanfield import data as _data

    text = tmp_path / "input.txt"
    text.write_text("abcabcabca", encoding="utf-8")
    corpus = _corpus(LMData(dataset="tiny_shakespeare", root=str(text)))
    assert corpus.train.tolist() == [0, 1, 2, 0, 1, 2, 0, 1, 2] and corpus.valid.tolist() == [0]
    calls = []
    monkeypatch.setattr(_data, "tiny_shakespeare", lambda root: calls.append(("ts", root)) or "TS")
    monkeypatch.setattr(_data, "wikitext2", lambda root, splits: calls.append(("wt", root, splits)) or "WT")
    assert _corpus(LMData(dataset="tiny_shakespeare")) == "TS"
    assert _corpus(LMData(dataset="tiny_shakespeare", root="/r")) == "TS"
    assert _corpus(LMData(dataset="wikitext2", root="/w", train_split="valid", eval_split="test")) == "WT"
    assert _corpus(LMData(dataset="wikitext2", train_split="test", eval_split="test")) == "WT"
    assert calls == [("ts", None), ("ts", "/r"), ("wt", "/w", ("valid", "test")), ("wt", None, ("test",))]


ROOT = Path(__file__).resolve().parents[2]


CONFIG = ROOT / "experiments" / "particle_attention" / "config.toml"


TOY = ROOT / "experiments" / "particle_attention" / "toy.toml"


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


def test_a_run_stopped_between_two_metrics_lines_resumes_its_gradient_statistics(tmp_path):
    """Ctrl-C after step 7 (lines at 3, 6, 9, 12): the checkpoint of step 7 holds the window's gradient sums
    and losses (``Experiment.window_state``), so the resumed run logs the uninterrupted run's lines; they were
    lost, and the step-9 line's gradient variance and loss roughness were of steps 8–9 only."""
    import os
    import signal

    from meanfield.runs.loop import RunInterrupted

    a, b = tmp_path / "a", tmp_path / "b"
    ra = run(CONFIG, a, preset="smoke", overrides=["optim.beta=1e-3"], quiet=True)

    def interrupt(step: int) -> None:
        if step == 7:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(RunInterrupted):
        run(CONFIG, b, preset="smoke", overrides=["optim.beta=1e-3"], quiet=True, on_step=interrupt)
    saved = torch.load(b / "checkpoints" / "step-00000007.pt", weights_only=True)
    assert saved["window_metrics"]["grad_var"]["n"] == 1 and len(saved["window_metrics"]["losses"]) == 1
    rb = run(CONFIG, b, preset="smoke", overrides=["optim.beta=1e-3"], quiet=True, resume=True)
    line = next(r for r in _deterministic(rb.metrics) if r["step"] == 9)
    assert "grad_var_attn" in line and "loss_roughness" in line
    assert _deterministic(ra.metrics) == _deterministic(rb.metrics)


def test_toy_smoke_run(tmp_path):
    result = run(TOY, tmp_path / "toy", preset="smoke", quiet=True)
    summary = json.loads((tmp_path / "toy" / "summary.json").read_text())
    assert summary["status"] == "finished" and result.step == 6
    for key in ("val_acc", "half_random_acc", "half_importance_acc", "attention_cosine"):
        assert 0 <= summary["final"][key] <= 1


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


@pytest.mark.parametrize("batch_size", [1, 2, 4])
def test_eval_blocks_evaluates_exactly_that_many_blocks_whatever_the_batch_size(tmp_path, batch_size):
    """``eval_blocks = 3`` of the five 8-token blocks of the 41-token valid split: the loss of exactly the
    first three (by hand), at every batch size. The cap used to stop at a batch's end: 4 blocks at batch sizes
    2 and 4. Control: the first four blocks' loss differs."""
    data, model, _, valid, _ = _lm_setup(tmp_path, eval_blocks=3)
    exp = LM.build(
        data, model, batch_size=batch_size, seed=1, device=torch.device("cpu"), dtype=torch.float64
    )
    with torch.no_grad():
        out = exp.evaluate()
        three, four = (_mean_loss(exp.model, _blocks(valid, 8)[:n]) for n in (3, 4))
    assert out["val_loss"] == pytest.approx(three, rel=1e-12) and three != pytest.approx(four, rel=1e-6)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"eval_blocks": -1}, "data.eval_blocks must be ≥ 0 (0: the whole split), got -1"),
        ({"probe_blocks": -2}, "data.probe_blocks must be ≥ 0 (0: no probes), got -2"),
        ({"corrupt_fraction": 1.5}, "data.corrupt_fraction must be in [0, 1] (the share of input tokens replaced), got 1.5"),
        ({"min_context": 0}, "data.min_context must be ≥ 1 (visible tokens of a row the head similarity reads), got 0"),
        (
            {"drop_strategies": ("random", "bogus")},
            "data.drop_strategies: ['bogus'] unknown; allowed: ['random', 'importance', 'farthest', 'medoids']",
        ),
    ],
)  # fmt: skip
def test_lm_refuses_bad_evaluation_options_when_it_is_built(tmp_path, bad, message):
    """Each used to build and fail the run with a traceback at its first evaluation; now one ConfigError line
    before anything runs. Control: the defaults build."""
    data, model, *_ = _lm_setup(tmp_path, **bad)
    with pytest.raises(ConfigError) as info:
        LM.build(data, model, batch_size=2, seed=0, device=torch.device("cpu"), dtype=torch.float64)
    assert str(info.value) == message
    data, model, *_ = _lm_setup(tmp_path)
    LM.build(data, model, batch_size=2, seed=0, device=torch.device("cpu"), dtype=torch.float64)


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
