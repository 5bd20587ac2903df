"""Errors of the data loaders, and where each dataset can be had.

A missing dataset raises [`DataNotFoundError`][meanfield.data._errors.DataNotFoundError] (a ``FileNotFoundError``) whose message names the
expected files, the folders searched and where to get them; a truncated or corrupt file raises
[`CorruptDataError`][meanfield.data._errors.CorruptDataError] (a ``ValueError``) naming the file and what is wrong with it. No loader ever
touches the network: the addresses below are text for the user.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = ["SOURCES", "CorruptDataError", "DataNotFoundError", "not_found"]

SOURCES: dict[str, str] = {
    "wikitext-2": (
        "WikiText-2 (Merity et al. 2016, CC BY-SA 3.0): the 'wikitext-2-v1' archive "
        "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip (wiki.{train,valid,test}.tokens; "
        "also on the Hugging Face hub as Salesforce/wikitext, config wikitext-2-v1) or the PyTorch example's copy "
        "https://github.com/pytorch/examples/tree/main/word_language_model/data/wikitext-2 ({train,valid,test}.txt)"
    ),
    "tinyshakespeare": (
        "tiny-shakespeare (char-rnn / nanoGPT): "
        "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
    ),
    "fashion-mnist": (
        "Fashion-MNIST (Zalando, MIT licence): on Debian/Ubuntu `apt-get install dataset-fashion-mnist` puts the "
        "four idx .gz files in /usr/share/datasets/fashion-mnist/; or https://github.com/zalandoresearch/fashion-mnist"
    ),
    "cifar10": (
        "CIFAR-10 (Krizhevsky 2009): https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz "
        "(extract it to get cifar-10-batches-py/, or pass the .tar.gz itself)"
    ),
}
"""Dataset name → where to get it (text only: nothing here is ever downloaded)."""


class DataNotFoundError(FileNotFoundError):
    """A dataset's folder or one of its files is missing; the message says what, where, and where to get it."""


class CorruptDataError(ValueError):
    """A data file exists but is truncated or malformed; the message names the file and what is wrong."""


def not_found(
    dataset: str, expected: str, searched: Iterable[Path | str], hint: str = ""
) -> DataNotFoundError:
    """Build the error for a dataset that is not where it was looked for.

    Args:
        dataset: a key of [`SOURCES`][meanfield.data._errors.SOURCES].
        expected: the files that were expected, in words (e.g. ``"valid.txt or wiki.valid.tokens"``).
        searched: the folders (or files) that were looked in, in order.
        hint: an optional extra sentence.
    """
    places = "\n".join(f"  {p}" for p in dict.fromkeys(str(p) for p in searched))
    text = f"{dataset}: expected {expected}; looked in:\n{places}\n"
    if hint:
        text += hint.rstrip() + "\n"
    text += (
        f"Get it from {SOURCES[dataset]}.\n"
        "Then pass root=<folder> (the dataset's folder or its parent) or set MEANFIELD_DATA."
    )
    return DataNotFoundError(text)
