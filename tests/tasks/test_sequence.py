"""Tests of :mod:`meanfield.tasks.sequence`."""

from __future__ import annotations

import copy
import hashlib

import pytest
import torch
import torch.nn.functional as F

from meanfield.data import Batches
from meanfield.nn.attention import ParticleAttention
from meanfield.tasks.sequence import SEQ_CLASSIFY, ParticleClassifier, SeqData, SeqModel, make_sequences


def _stream_seed(seed, stream: str) -> int:
    """``derive_seed`` from its documented formula: sha256 of ``"{seed}/{stream}"``, 8 bytes little-endian >> 2."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{stream}".encode()).digest()[:8], "little") >> 2


_SEQ = SeqData(seq_len=6, vocab=5, n_copies=2, n_train=48, n_test=40)


_SEQ_MODEL = SeqModel(d_model=16, n_particles=8, dt=0.75)


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


def test_make_sequences_label_says_whether_the_query_recurs():
    x, y = make_sequences(400, _SEQ, torch.Generator().manual_seed(0))
    assert x.shape == (400, 6) and y.shape == (400,) and x.dtype == y.dtype == torch.int64
    assert int(y.sum()) == 200  # half of each class
    repeats = (x[:, 1:] == x[:, :1]).sum(1)  # occurrences of the query after position 0
    assert torch.equal(repeats[y == 0], torch.zeros_like(repeats[y == 0]))
    assert torch.equal(repeats[y == 1], torch.full_like(repeats[y == 1], 2))  # n_copies = 2, no other repeat
    assert int(x.min()) >= 0 and int(x.max()) <= 4


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
