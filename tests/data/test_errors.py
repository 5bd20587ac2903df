"""Tests of :mod:`meanfield.data._errors`."""

from __future__ import annotations

import pytest

from meanfield.data import (
    SOURCES,
    CorruptDataError,
    DataNotFoundError,
    _errors,
    cifar,
    cifar10,
    wikitext2,
)

TAIL = "Then pass root=<folder> (the dataset's folder or its parent) or set MEANFIELD_DATA."


@pytest.fixture
def _private_cache(tmp_path, monkeypatch):
    """Decoded archives are cached in the test's own folder, never in ~/.cache; the default data folder is an
    empty one (a test that wants another sets it), so that no test depends on what data this machine has."""
    monkeypatch.setenv("MEANFIELD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MEANFIELD_DATA", str(tmp_path / "no-default-data"))


@pytest.mark.usefixtures("_private_cache")
def test_not_found_message_is_exactly_what_where_and_how(tmp_path):
    error = _errors.not_found(
        "cifar10",
        "the files A and B",
        [tmp_path / "a", str(tmp_path / "b"), tmp_path / "a"],
        hint="  Two lines.  \n\n",
    )
    assert isinstance(error, DataNotFoundError) and isinstance(error, FileNotFoundError)
    assert str(error) == (
        "cifar10: expected the files A and B; looked in:\n"
        f"  {tmp_path / 'a'}\n"
        f"  {tmp_path / 'b'}\n"  # listed once, in order
        "  Two lines.\n"  # the hint, trailing blanks dropped, leading ones kept
        "Get it from CIFAR-10 (Krizhevsky 2009): https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz "
        "(extract it to get cifar-10-batches-py/, or pass the .tar.gz itself).\n" + TAIL
    )
    # no hint: no hint line (negative control for the line above)
    assert str(_errors.not_found("tinyshakespeare", "input.txt", ["/d"])) == (
        "tinyshakespeare: expected input.txt; looked in:\n  /d\n"
        "Get it from tiny-shakespeare (char-rnn / nanoGPT): "
        "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt.\n" + TAIL
    )


@pytest.mark.usefixtures("_private_cache")
def test_sources_name_every_dataset_and_where_to_get_it():
    assert sorted(SOURCES) == ["cifar10", "fashion-mnist", "tinyshakespeare", "wikitext-2"]
    assert "apt-get install dataset-fashion-mnist" in SOURCES["fashion-mnist"]
    assert "wikitext-2-v1.zip" in SOURCES["wikitext-2"]
    assert issubclass(CorruptDataError, ValueError)


@pytest.mark.usefixtures("_private_cache")
def test_cifar10_not_found_message(tmp_path):
    with pytest.raises(DataNotFoundError) as error:
        cifar10(tmp_path)
    places = "\n".join(f"  {p}" for p in [tmp_path] + [tmp_path / n for n in cifar.FOLDER_NAMES])
    assert str(error.value) == (
        "cifar10: expected cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}, a folder "
        "train/<class>/*.png|jpg + test/<class>/*, or a *cifar*.tar.gz of either; looked in:\n"
        f"{places}\nGet it from {SOURCES['cifar10']}.\n" + TAIL
    )


@pytest.mark.usefixtures("_private_cache")
def test_wikitext_not_found_names_the_requested_files(tmp_path):
    with pytest.raises(DataNotFoundError) as error:
        wikitext2(tmp_path, splits=("test", "valid"))
    places = "\n".join(f"  {p}" for p in (tmp_path, tmp_path / "wikitext-2", tmp_path / "wikitext-2-v1"))
    assert str(error.value) == (
        "wikitext-2: expected the WikiText-2 split files (wiki.valid.tokens or valid.txt, wiki.test.tokens or "
        f"test.txt); looked in:\n{places}\nGet it from {SOURCES['wikitext-2']}.\n" + TAIL
    )
