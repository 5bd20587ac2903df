"""Tests of :mod:`meanfield.data.batches`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from meanfield.data import (
    Batches,
    TokenBatches,
    iter_blocks,
)


@pytest.fixture
def _private_cache(tmp_path, monkeypatch):
    """Every test caches decoded archives in its own folder, never in the user's ~/.cache."""
    monkeypatch.setenv("MEANFIELD_CACHE", str(tmp_path / "cache"))


def _roundtrip(state: dict, path: Path) -> dict:
    torch.save(state, path)
    return torch.load(path, weights_only=True)


@pytest.mark.usefixtures("_private_cache")
def test_batches_epochs_are_permutations():
    batches = Batches(10, 3, seed=0, drop_last=False)
    assert len(batches) == 4
    epoch = list(batches)
    assert [len(b) for b in epoch] == [3, 3, 3, 1] and batches.epoch == 1
    assert sorted(torch.cat(epoch).tolist()) == list(range(10)) and epoch[0].dtype == torch.int64
    second = torch.cat(list(batches))
    assert sorted(second.tolist()) == list(range(10)) and not torch.equal(second, torch.cat(epoch))
    dropped = Batches(10, 3, seed=0)
    assert len(dropped) == 3 and [len(b) for b in dropped] == [3, 3, 3] and dropped.epoch == 1
    assert torch.equal(torch.cat(list(Batches(10, 3, seed=0))), torch.cat(epoch[:3]))  # same seed, same order


@pytest.mark.usefixtures("_private_cache")
@pytest.mark.parametrize("stop", [0, 2, 3, 5, 7])
def test_batches_resume_through_a_file_is_exact(tmp_path, stop):
    reference = Batches(11, 4, seed=5)
    expected = [reference.next_indices() for _ in range(10)]  # 2 batches per epoch, 5 epochs
    first = Batches(11, 4, seed=5)
    got = [first.next_indices() for _ in range(stop)]
    state = _roundtrip(first.state_dict(), tmp_path / "batches.pt")
    resumed = Batches(11, 4, seed=123)  # the state, not the seed, decides
    resumed.load_state_dict(state)
    assert resumed.epoch == stop // 2
    got += [resumed.next_indices() for _ in range(10 - stop)]
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    with pytest.raises(ValueError, match="batch_size=4, this sampler has batch_size=5"):
        Batches(11, 5, seed=5).load_state_dict(state)


@pytest.mark.usefixtures("_private_cache")
def test_token_batches_match_nanogpt_get_batch_and_resume(tmp_path):
    tokens = torch.arange(100) * 7 % 97
    batches = TokenBatches(tokens, block_size=8, batch_size=4, seed=1)
    x, y = next(batches)
    assert x.shape == y.shape == (4, 8) and x.dtype == y.dtype == torch.int64
    # nanoGPT: ix = torch.randint(len(data) - block_size, (batch_size,)), x = data[i:i+bs], y = data[i+1:i+1+bs]
    generator = torch.Generator().manual_seed(1)
    ix = torch.randint(len(tokens) - 8, (4,), generator=generator)
    assert torch.equal(x, torch.stack([tokens[i : i + 8] for i in ix]))
    assert torch.equal(y, torch.stack([tokens[i + 1 : i + 9] for i in ix]))
    expected = [next(batches) for _ in range(6)]
    again = TokenBatches(tokens, 8, 4, seed=1)
    next(again)
    for _ in range(3):
        next(again)
    state = _roundtrip(again.state_dict(), tmp_path / "tokens.pt")
    resumed = TokenBatches(tokens, 8, 4, seed=99)
    resumed.load_state_dict(state)
    assert resumed.step == 4
    for want in expected[3:]:
        got = next(resumed)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    with pytest.raises(ValueError, match="n_tokens"):
        TokenBatches(tokens[:50], 8, 4, seed=1).load_state_dict(state)


@pytest.mark.usefixtures("_private_cache")
def test_iter_blocks_cover_every_target_once():
    tokens = torch.arange(23)
    blocks = list(iter_blocks(tokens, block_size=5, batch_size=3))
    assert [tuple(x.shape) for x, _ in blocks] == [(3, 5), (1, 5), (1, 2)]
    assert torch.equal(torch.cat([x.reshape(-1) for x, _ in blocks]), tokens[:-1])
    assert torch.equal(torch.cat([y.reshape(-1) for _, y in blocks]), tokens[1:])
    assert [tuple(x.shape) for x, _ in iter_blocks(torch.arange(11), 5, 8)] == [(2, 5)]


@pytest.mark.usefixtures("_private_cache")
@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: TokenBatches(torch.arange(10), 10, 2, seed=0), "block_size must be < the number of tokens"),
        (lambda: TokenBatches(torch.arange(10), 4, 0, seed=0), "batch_size must be ≥ 1, got 0"),
        (lambda: TokenBatches(torch.arange(10), 0, 2, seed=0), "block_size must be ≥ 1, got 0"),
        (lambda: TokenBatches(torch.zeros(3, 4, dtype=torch.long), 2, 2, seed=0), "tokens must have shape"),
        (lambda: Batches(0, 1, seed=0), "n must be ≥ 1, got 0"),
        (lambda: Batches(5, 6, seed=0), "batch_size must be ≤ n = 5 when drop_last=True"),
        (lambda: list(iter_blocks(torch.arange(1), 4, 2)), "at least 2 tokens"),
        (lambda: list(iter_blocks(torch.arange(9), 4, 0)), "batch_size must be ≥ 1, got 0"),
    ],
)
def test_batching_bad_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make()
    assert len(list(Batches(5, 6, seed=0, drop_last=False))) == 1


@pytest.mark.usefixtures("_private_cache")
def test_token_batches_refuse_float_tokens():
    with pytest.raises(TypeError, match="integer tensor"):
        TokenBatches(torch.zeros(10), 4, 2, seed=0)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.int16, torch.int64])
def test_token_batches_are_the_windows_at_the_generators_offsets_as_int64(dtype):
    """``x[b] = tokens[i_b : i_b + L]``, ``y[b] = tokens[i_b + 1 : i_b + 1 + L]`` with
    ``i ~ randint(n − L, (B, 1))`` from the sampler's generator (replayed by hand), batch after batch, as
    int64 whatever the tokens' integer dtype; ``step`` counts the batches. Negative control: another seed."""
    tokens = ((torch.arange(23) * 7) % 19).to(dtype)
    L, B = 4, 5
    batches = TokenBatches(tokens, L, B, seed=8)
    g = _gen(8)
    ref = tokens.to(torch.int64)
    for step in range(1, 4):
        x, y = batches.next_batch()
        offsets = torch.randint(23 - L, (B, 1), generator=g).flatten().tolist()
        assert x.dtype == torch.int64 and y.dtype == torch.int64 and x.shape == (B, L) and y.shape == (B, L)
        assert x.tolist() == [ref[i : i + L].tolist() for i in offsets]
        assert y.tolist() == [ref[i + 1 : i + 1 + L].tolist() for i in offsets]
        assert batches.step == step
    x_other, _ = TokenBatches(tokens, L, B, seed=9).next_batch()
    first = TokenBatches(tokens, L, B, seed=8).next_batch()[0]
    assert not torch.equal(x_other, first)  # negative control
    whole = TokenBatches(tokens, 22, 2, seed=0)  # block_size = n − 1: the only window
    x, y = next(whole)
    assert x.tolist() == [ref[:-1].tolist()] * 2 and y.tolist() == [ref[1:].tolist()] * 2
