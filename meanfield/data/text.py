"""Text corpora as token-id tensors: WikiText-2 (word level) and tiny-shakespeare (character level).

WikiText-2 follows the PyTorch ``word_language_model`` example: every line of a split, blank ones included,
becomes ``line.split() + ["<eos>"]``; ids are given in order of first appearance. tiny-shakespeare follows
nanoGPT's ``shakespeare_char``: the vocabulary is the sorted set of distinct characters, the first 90 % of
the characters are the training split and the last 10 % the validation split.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ._errors import CorruptDataError, not_found
from ._paths import find_file, locate

__all__ = ["SPLITS", "TokenCorpus", "tiny_shakespeare", "wikitext2"]

SPLITS = ("train", "valid", "test")
UNK, EOS = "<unk>", "<eos>"


@dataclass
class TokenCorpus:
    """Token ids of a text corpus, split by split, and the vocabulary that maps them back to text.

    Attributes:
        train: 1-D ``int64`` ids of the training split, or ``None`` when it was not loaded.
        valid: 1-D ``int64`` ids of the validation split, or ``None``.
        test: 1-D ``int64`` ids of the test split, or ``None``.
        vocab: ``vocab[i]`` is the token (a word, or one character) with id ``i``.
        description: what was loaded, from where, the sizes, and any caveat.
        level: ``"word"`` (tokens separated by whitespace) or ``"char"`` (one token per character).
    """

    train: torch.Tensor | None
    valid: torch.Tensor | None
    test: torch.Tensor | None
    vocab: list[str]
    description: str
    level: str = "word"
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._index = {token: i for i, token in enumerate(self.vocab)}

    @property
    def vocab_size(self) -> int:
        """The number of distinct tokens, ``len(vocab)``."""
        return len(self.vocab)

    def split(self, name: str) -> torch.Tensor:
        """The ids of split ``name`` (``"train"``, ``"valid"`` or ``"test"``); an error if it was not loaded."""
        if name not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
        ids = getattr(self, name)
        if ids is None:
            raise ValueError(f"the {name} split was not loaded: {self.description}")
        return ids

    def encode(self, text: str) -> torch.Tensor:
        """Ids of ``text``: one per whitespace-separated word (word level) or per character (char level).

        A word outside the vocabulary becomes ``<unk>`` when the vocabulary has it; an unknown token is an
        error otherwise. No ``<eos>`` is added.

        Returns:
            ``int64`` tensor of shape ``(n_tokens,)``.
        """
        tokens = text.split() if self.level == "word" else list(text)
        unk = self._index.get(UNK) if self.level == "word" else None
        ids = []
        for token in tokens:
            i = self._index.get(token, unk)
            if i is None:
                raise ValueError(
                    f"token {token!r} is not in the vocabulary ({self.vocab_size} tokens, no {UNK})"
                )
            ids.append(i)
        return torch.tensor(ids, dtype=torch.int64)  # (n_tokens,)

    def decode(self, ids: torch.Tensor | Sequence[int]) -> str:
        """The text of ``ids``: words joined by single spaces (word level) or characters concatenated."""
        ids = ids.tolist() if torch.is_tensor(ids) else list(ids)
        sep = " " if self.level == "word" else ""
        try:
            if any(i < 0 for i in ids):  # a negative id is no token id (it would index from the end)
                raise IndexError
            return sep.join(self.vocab[i] for i in ids)
        except (IndexError, TypeError):
            bad = next(i for i in ids if not isinstance(i, int) or not 0 <= i < self.vocab_size)
            raise ValueError(f"id {bad!r} is not a token id (0 ≤ id < {self.vocab_size})") from None


# --------------------------------------------------------------------------------------------------------
# Reading text


def _read_text(path: Path) -> str:
    """The file's text (UTF-8, universal newlines); undecodable bytes are a [`CorruptDataError`][meanfield.data._errors.CorruptDataError]."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as error:
        raise CorruptDataError(f"{path}: not UTF-8 text ({error})") from None


def _lines(text: str) -> list[str]:
    """The lines of ``text`` as Python's file iteration gives them (split at ``\\n`` only)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


# --------------------------------------------------------------------------------------------------------
# WikiText-2

WIKITEXT_FILES = {s: (f"wiki.{s}.tokens", f"{s}.txt") for s in SPLITS}
"""Split → its file names in the two layouts, the original ``wiki.*.tokens`` one first."""


def _wikitext_words(path: Path) -> list[str]:
    """The word tokens of a WikiText file: ``line.split() + ["<eos>"]`` for every line, blank ones included."""
    words: list[str] = []
    for line in _lines(_read_text(path)):
        words.extend(line.split())
        words.append(EOS)
    return words


def wikitext2(
    root: str | os.PathLike | None = None,
    splits: Sequence[str] = SPLITS,
    vocab: Sequence[str] | None = None,
) -> TokenCorpus:
    """WikiText-2 at word level, as in the PyTorch ``word_language_model`` example.

    Format: each split is a tokenised text file, ``wiki.{train,valid,test}.tokens`` (the original archive)
    or ``{train,valid,test}.txt`` (the PyTorch example's copy); both layouts are accepted, the first when
    both are present. Every line, blank ones included, becomes ``line.split() + ["<eos>"]`` (valid: 3,760
    lines, 217,646 tokens; test: 4,358 lines, 245,569 tokens; train: 2,088,628 tokens).

    The vocabulary is, in order of precedence:

    1. ``vocab`` when given (e.g. the vocabulary saved with a model); a token outside it becomes ``<unk>``,
       which must then be in ``vocab``;
    2. else the training split's tokens, when ``"train"`` is among ``splits`` (the standard choice: every
       valid/test token of WikiText-2 occurs in train; any that does not becomes ``<unk>``);
    3. else the tokens of the requested splits, read in train, valid, test order.

    Ids are given in order of first appearance (as ``torch``'s example ``Dictionary`` does).

    Args:
        root: the ``wikitext-2`` folder or a folder containing ``wikitext-2/`` (``None``: [`default_root`][meanfield.data._paths.default_root]).
        splits: which of ``"train"``, ``"valid"``, ``"test"`` to load; the others are ``None``.
        vocab: a fixed vocabulary (id → word).

    Returns:
        A word-level [`TokenCorpus`][meanfield.data.text.TokenCorpus].

    Raises:
        DataNotFoundError: no WikiText-2 folder, or a requested split is missing from it (the message names
            the split, the folder and where to get it).
        CorruptDataError: a file is not UTF-8 text.
        ValueError: an unknown split name; a token outside ``vocab`` when ``vocab`` has no ``<unk>``.
    """
    splits = tuple(splits)
    unknown = [s for s in splits if s not in SPLITS]
    if unknown or not splits:
        raise ValueError(f"splits must be a non-empty subset of {SPLITS}, got {splits!r}")
    requested = [s for s in SPLITS if s in splits]
    every_file = [name for s in SPLITS for name in WIKITEXT_FILES[s]]
    folder = locate(
        "wikitext-2",
        root,
        ("wikitext-2", "wikitext-2-v1"),
        lambda p: find_file(p, every_file) is not None,
        "the WikiText-2 split files ("
        + ", ".join(f"{WIKITEXT_FILES[s][0]} or {WIKITEXT_FILES[s][1]}" for s in requested)
        + ")",
    )
    files: dict[str, Path] = {}
    for s in requested:
        path = find_file(folder, WIKITEXT_FILES[s])
        if path is None:
            present = [n for n in every_file if (folder / n).is_file()]
            raise not_found(
                "wikitext-2",
                f"the {s} split ({' or '.join(WIKITEXT_FILES[s])})",
                [folder],
                hint=f"The {s} split is missing from {folder} (found: {', '.join(present)}); "
                f"load only the splits that are there with splits=(...).",
            )
        files[s] = path
    words = {s: _wikitext_words(files[s]) for s in requested}

    if vocab is not None:
        vocab_list, origin = [str(t) for t in vocab], f"the given vocabulary ({len(vocab)} tokens)"
    else:
        sources = ["train"] if "train" in words else requested
        vocab_list = list(dict.fromkeys(w for s in sources for w in words[s]))
        origin = f"built from {' + '.join(sources)}"
    index = {w: i for i, w in enumerate(vocab_list)}
    if len(index) != len(vocab_list):
        raise ValueError("vocab has repeated tokens: every token needs exactly one id")
    unk = index.get(UNK)

    ids: dict[str, torch.Tensor] = {}
    unk_counts: dict[str, int] = {}
    for s in requested:
        out = np.fromiter((index.get(w, -1) for w in words[s]), dtype=np.int64, count=len(words[s]))
        missing = out < 0
        if missing.any():
            if unk is None:
                first = words[s][int(np.argmax(missing))]
                raise ValueError(
                    f"{files[s]}: {int(missing.sum())} tokens are not in the vocabulary (the first: {first!r}) and "
                    f"the vocabulary has no {UNK} to map them to"
                )
            out[missing] = unk
            unk_counts[s] = int(missing.sum())
        ids[s] = torch.from_numpy(out)  # (n_tokens,)

    layout = "wiki.*.tokens" if files[requested[0]].name.startswith("wiki.") else "*.txt"
    sizes = ", ".join(f"{s} {ids[s].numel():,} tokens" for s in requested)
    text = (
        f"WikiText-2, word level, from {folder} ({layout} layout): {sizes}; one {EOS} per line; "
        f"vocabulary of {len(vocab_list):,} words, {origin}"
    )
    if unk_counts:
        text += "; out-of-vocabulary tokens mapped to <unk>: " + ", ".join(
            f"{s} {n:,}" for s, n in unk_counts.items()
        )
    if "train" not in requested:
        text += "; train split not loaded"
    return TokenCorpus(
        train=ids.get("train"),
        valid=ids.get("valid"),
        test=ids.get("test"),
        vocab=vocab_list,
        description=text,
    )


# --------------------------------------------------------------------------------------------------------
# tiny-shakespeare

TRAIN_FRACTION = 0.9


def tiny_shakespeare(root: str | os.PathLike | None = None) -> TokenCorpus:
    """tiny-shakespeare at character level, with nanoGPT's ``shakespeare_char`` split.

    Format: one UTF-8 text file, ``input.txt`` (1,115,394 characters, 65 distinct). The vocabulary is the
    sorted list of distinct characters (id = position in it); with ``n`` characters, ``train`` is the
    first ``int(0.9 n)`` and ``valid`` the rest; ``test`` is ``None``.

    Args:
        root: the ``tinyshakespeare`` folder, a folder containing ``tinyshakespeare/``, or the text file
            itself (``None``: [`default_root`][meanfield.data._paths.default_root]).

    Returns:
        A character-level [`TokenCorpus`][meanfield.data.text.TokenCorpus].

    Raises:
        DataNotFoundError: no ``input.txt`` was found.
        CorruptDataError: the file is not UTF-8 text or is empty.
    """
    if root is not None and Path(root).is_file():
        path = Path(root)
    else:
        names = ("tinyshakespeare", "tiny-shakespeare", "shakespeare_char", "shakespeare")
        folder = locate("tinyshakespeare", root, names, lambda p: (p / "input.txt").is_file(), "input.txt")
        path = folder / "input.txt"
    text = _read_text(path)
    if not text:
        raise CorruptDataError(f"{path}: the file is empty")
    vocab = sorted(set(text))
    codes = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")  # (n_chars,) code points
    lookup = np.zeros(int(codes.max()) + 1, dtype=np.int64)
    lookup[[ord(c) for c in vocab]] = np.arange(len(vocab))
    data = torch.from_numpy(lookup[codes])  # (n_chars,)
    n_train = int(len(data) * TRAIN_FRACTION)
    description = (
        f"tiny-shakespeare, character level, from {path}: {len(data):,} characters, {len(vocab)} distinct; "
        f"nanoGPT split: train = first {n_train:,} ({TRAIN_FRACTION:.0%}), valid = last {len(data) - n_train:,}"
    )
    return TokenCorpus(
        train=data[:n_train].clone(),
        valid=data[n_train:].clone(),
        test=None,
        vocab=vocab,
        description=description,
        level="char",
    )
