r"""Minibatch order with its own generator, saved in checkpoints.

* [`Batches`][meanfield.data.batches.Batches] shuffles indices $0 \dots n-1$ afresh every epoch (samples indexed along dim 0).
* [`TokenBatches`][meanfield.data.batches.TokenBatches] draws random windows of a token stream, as nanoGPT's ``get_batch`` does.
* [`iter_blocks`][meanfield.data.batches.iter_blocks] cuts a token stream into contiguous evaluation blocks, deterministically.

The samplers' ``state_dict()`` holds only tensors, ints and bools, so it round-trips through
``torch.save`` and ``torch.load(weights_only=True)``; a sampler restored from it yields exactly the
sequence the uninterrupted one would have.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from .._checks import check_int, check_rank

__all__ = ["Batches", "TokenBatches", "iter_blocks"]


def _size(name: str, value: object) -> int:
    """An int ``1 ≤ value < 2**63`` (torch indexes and sizes with int64), else an error naming ``name``."""
    value = check_int(name, value)
    if value >= 2**63:
        raise ValueError(f"{name} must be < 2**63 (torch sizes are int64), got {value}")
    return value


def _generator(seed: int) -> torch.Generator:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    return torch.Generator().manual_seed(seed)


def _check_state(owner: str, state: dict[str, Any], expected: dict[str, Any]) -> None:
    """Raise unless ``state`` has every key of ``expected`` with the same values (the sampler's set-up)."""
    for key, value in expected.items():
        if key not in state:
            raise ValueError(f"{owner} state dict has no {key!r}: keys are {sorted(state)}")
        got = state[key].item() if torch.is_tensor(state[key]) else state[key]
        if got != value:
            raise ValueError(
                f"{owner} state dict was saved with {key}={got!r}, this sampler has {key}={value!r}"
            )


def _tokens_tensor(tokens: torch.Tensor) -> torch.Tensor:
    check_rank("tokens", tokens, 1, "(n_tokens,)")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise TypeError(f"tokens must be an integer tensor, got dtype {tokens.dtype}")
    return tokens


class Batches:
    """Shuffled minibatch indices for ``n`` samples: a fresh random permutation every epoch.

    Each epoch draws ``torch.randperm(n)`` from the sampler's own generator (seeded with ``seed``) and
    cuts it into consecutive batches of ``batch_size``; with ``drop_last`` the last ``n mod batch_size``
    indices of the permutation are skipped, else they form a last, smaller batch. The permutation is drawn
    when the epoch's first batch is asked for.

    ``next_indices()`` returns the next batch, starting a new epoch when the current one is used up;
    iterating yields the batches of the current epoch only (a whole epoch when called between epochs)::

        batches = Batches(len(x), 128, seed=0)
        for epoch in range(10):
            for idx in batches:            # idx: int64, shape (128,)
                loss = loss_fn(model(x[idx]), y[idx])

    Args:
        n: the number of samples (≥ 1).
        batch_size: samples per batch (≥ 1; ≤ n when ``drop_last``).
        seed: seed of the sampler's generator.
        drop_last: skip the incomplete last batch of each epoch.
    """

    def __init__(self, n: int, batch_size: int, *, seed: int, drop_last: bool = True) -> None:
        self.n = _size("n", n)
        self.batch_size = _size("batch_size", batch_size)
        if drop_last and batch_size > n:
            raise ValueError(
                f"batch_size must be ≤ n = {n} when drop_last=True (else an epoch has no batch), got {batch_size}"
            )
        self.drop_last = bool(drop_last)
        self.seed = seed
        self._generator = _generator(seed)
        self._epoch = 0
        self._position = 0
        self._permutation = torch.empty(0, dtype=torch.int64)  # (n,) once an epoch has started

    @property
    def epoch(self) -> int:
        """The number of epochs completed (all batches of the epoch yielded)."""
        return self._epoch

    @property
    def position(self) -> int:
        """Where in the current epoch's permutation the next batch starts (0 between epochs)."""
        return self._position

    def __len__(self) -> int:
        """Batches per epoch: ``n // batch_size`` with ``drop_last``, else ``ceil(n / batch_size)``."""
        return self.n // self.batch_size if self.drop_last else -(-self.n // self.batch_size)

    def next_indices(self) -> torch.Tensor:
        """The next batch's sample indices, ``int64`` of shape ``(batch_size,)`` (the last one of an epoch
        may be smaller without ``drop_last``)."""
        if self._permutation.numel() == 0:
            self._permutation = torch.randperm(self.n, generator=self._generator)  # (n,)
            self._position = 0
        start, stop = self._position, min(self._position + self.batch_size, self.n)
        indices = self._permutation[start:stop].clone()  # (batch_size,)
        self._position = stop
        left = self.n - stop
        if left == 0 or (self.drop_last and left < self.batch_size):
            self._epoch += 1
            self._position = 0
            self._permutation = torch.empty(0, dtype=torch.int64)
        return indices

    def __iter__(self) -> Iterator[torch.Tensor]:
        """Yield the remaining batches of the current epoch (all of the next one between epochs)."""
        epoch = self._epoch
        while self._epoch == epoch:
            yield self.next_indices()

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state: set-up, epoch, position, current permutation and generator state.

        Plain ints, bools and tensors (the generator state is a ``uint8`` tensor): loadable with
        ``torch.load(..., weights_only=True)``.
        """
        return {
            "n": self.n,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "epoch": self._epoch,
            "position": self._position,
            "permutation": self._permutation.clone(),
            "generator": self._generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from [`state_dict`][meanfield.data.batches.Batches.state_dict]; ``n``, ``batch_size`` and ``drop_last`` must match."""
        _check_state(
            "Batches", state, {"n": self.n, "batch_size": self.batch_size, "drop_last": self.drop_last}
        )
        permutation = torch.as_tensor(state["permutation"], dtype=torch.int64)
        if permutation.numel() not in (0, self.n):
            raise ValueError(
                f"Batches state dict has a permutation of {permutation.numel()} indices, n = {self.n}"
            )
        self._generator.set_state(state["generator"])
        self._epoch = int(state["epoch"])
        self._position = int(state["position"])
        self._permutation = permutation.clone()

    def __repr__(self) -> str:
        return (
            f"Batches(n={self.n}, batch_size={self.batch_size}, seed={self.seed}, drop_last={self.drop_last}, "
            f"epoch={self._epoch}, position={self._position})"
        )


class TokenBatches:
    """Random training windows of a token stream, as nanoGPT's ``get_batch``.

    Each batch draws ``batch_size`` offsets ``i ~ U{0, …, n_tokens − block_size − 1}`` from the sampler's
    own generator and returns ``x[b] = tokens[i_b : i_b + block_size]`` and the next-token targets
    ``y[b] = tokens[i_b + 1 : i_b + 1 + block_size]``. It is an endless iterator::

        batches = TokenBatches(corpus.train, block_size=256, batch_size=32, seed=0)
        x, y = next(batches)        # each int64, shape (32, 256)

    Args:
        tokens: 1-D integer token ids.
        block_size: context length (``1 ≤ block_size < n_tokens``).
        batch_size: windows per batch (≥ 1).
        seed: seed of the sampler's generator.
    """

    def __init__(self, tokens: torch.Tensor, block_size: int, batch_size: int, *, seed: int) -> None:
        self.tokens = _tokens_tensor(tokens)
        self.block_size = _size("block_size", block_size)
        self.batch_size = _size("batch_size", batch_size)
        if block_size >= len(tokens):
            raise ValueError(
                f"block_size must be < the number of tokens ({len(tokens)}; a window needs block_size + 1 tokens), "
                f"got {block_size}"
            )
        self.seed = seed
        self._generator = _generator(seed)
        self._step = 0
        self._window = torch.arange(block_size + 1)  # (block_size + 1,)

    @property
    def step(self) -> int:
        """The number of batches drawn so far."""
        return self._step

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next ``(x, y)``, each ``int64`` of shape ``(batch_size, block_size)``, on the tokens' device."""
        high = len(self.tokens) - self.block_size
        offsets = torch.randint(high, (self.batch_size, 1), generator=self._generator)  # (B, 1)
        index = (offsets + self._window).to(self.tokens.device)  # (B, block_size + 1)
        windows = self.tokens[index].to(torch.int64)  # (B, block_size + 1)
        self._step += 1
        return windows[:, :-1], windows[:, 1:]  # (B, block_size) each

    def __iter__(self) -> TokenBatches:
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.next_batch()

    def state_dict(self) -> dict[str, Any]:
        """Set-up, step and generator state (a ``uint8`` tensor); loadable with ``weights_only=True``.
        The tokens themselves are not saved."""
        return {
            "n_tokens": len(self.tokens),
            "block_size": self.block_size,
            "batch_size": self.batch_size,
            "step": self._step,
            "generator": self._generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from [`state_dict`][meanfield.data.batches.TokenBatches.state_dict]; ``n_tokens``, ``block_size``, ``batch_size`` must match."""
        expected = {
            "n_tokens": len(self.tokens),
            "block_size": self.block_size,
            "batch_size": self.batch_size,
        }
        _check_state("TokenBatches", state, expected)
        self._generator.set_state(state["generator"])
        self._step = int(state["step"])

    def __repr__(self) -> str:
        return (
            f"TokenBatches(n_tokens={len(self.tokens)}, block_size={self.block_size}, batch_size={self.batch_size}, "
            f"seed={self.seed}, step={self._step})"
        )


def iter_blocks(
    tokens: torch.Tensor, block_size: int, batch_size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Deterministic, non-overlapping evaluation blocks covering a token stream (validation loss, perplexity).

    Block ``j`` is ``x = tokens[s : s + L]``, ``y = tokens[s + 1 : s + 1 + L]`` with ``s = j · block_size``;
    the full blocks (``L = block_size``) come in batches of up to ``batch_size`` rows, then the remainder, if
    any, as one last batch of one shorter row. Every target ``tokens[1:]`` is predicted exactly once, so
    the mean of the per-token losses over all yielded ``y`` is the split's loss (``exp`` of it the
    perplexity). Each token sees only the context inside its own block, which gives a higher loss than a
    sliding window would.

    Args:
        tokens: 1-D integer token ids, at least 2.
        block_size: context length (≥ 1).
        batch_size: blocks per batch (≥ 1).

    Yields:
        ``(x, y)``, each ``int64`` of shape ``(b, L)`` with ``b ≤ batch_size``, ``L ≤ block_size``.
    """
    tokens = _tokens_tensor(tokens)
    block_size = check_int("block_size", block_size)
    batch_size = check_int("batch_size", batch_size)
    if len(tokens) < 2:
        raise ValueError(f"tokens must hold at least 2 tokens (one input, one target), got {len(tokens)}")
    n_targets = len(tokens) - 1
    n_full = n_targets // block_size
    for start in range(0, n_full, batch_size):
        rows = min(batch_size, n_full - start)
        begin = start * block_size
        x = tokens[begin : begin + rows * block_size].reshape(rows, block_size)  # (rows, block_size)
        y = tokens[begin + 1 : begin + 1 + rows * block_size].reshape(rows, block_size)  # (rows, block_size)
        yield x.to(torch.int64), y.to(torch.int64)
    rest = n_targets - n_full * block_size
    if rest:
        begin = n_full * block_size
        yield (
            tokens[begin : begin + rest].reshape(1, rest).to(torch.int64),  # (1, rest)
            tokens[begin + 1 : begin + 1 + rest].reshape(1, rest).to(torch.int64),  # (1, rest)
        )
