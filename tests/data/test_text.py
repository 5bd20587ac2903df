"""Tests of :mod:`meanfield.data.text`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.data_files import SHARED, _need, _wiki, _wikitext

from meanfield.data import (
    SOURCES,
    CorruptDataError,
    DataNotFoundError,
    TokenCorpus,
    tiny_shakespeare,
    wikitext2,
)

ROOT = Path(__file__).resolve().parents[2]




@pytest.fixture
def _private_cache(tmp_path, monkeypatch):
    """Every test caches decoded archives in its own folder, never in the user's ~/.cache."""
    monkeypatch.setenv("MEANFIELD_CACHE", str(tmp_path / "cache"))


WIKI = {
    "train": " = Title = \n\n the cat sat on the mat . \n a dog <unk> . \n",
    "valid": " the dog sat . \n\n a bird flew \n",
    "test": " the cat . \n",
}


@pytest.mark.usefixtures("_private_cache")
def test_wikitext_eos_per_line_and_vocab_from_train(tmp_path):
    corpus = wikitext2(_wikitext(tmp_path / "wikitext-2"))
    assert (
        corpus.decode(corpus.train)
        == "= Title = <eos> <eos> the cat sat on the mat . <eos> a dog <unk> . <eos>"
    )
    # vocabulary from train, in order of first appearance; valid's "bird" and "flew" are not in it: <unk>
    assert corpus.vocab[:4] == ["=", "Title", "<eos>", "the"]
    assert corpus.vocab_size == len(set(WIKI["train"].split())) + 1
    assert corpus.decode(corpus.valid) == "the dog sat . <eos> <eos> a <unk> <unk> <eos>"
    assert corpus.valid.dtype == torch.int64 and corpus.valid.dim() == 1
    assert corpus.test.tolist() == corpus.encode("the cat . <eos>").tolist()
    assert "out-of-vocabulary tokens mapped to <unk>: valid 2" in corpus.description


@pytest.mark.usefixtures("_private_cache")
def test_wikitext_tokens_layout_from_a_parent_folder(tmp_path):
    _wikitext(tmp_path / "wikitext-2", layout="tokens")
    corpus = wikitext2(tmp_path)
    assert corpus.train.numel() == 4 + 1 + 8 + 5 and "wiki.*.tokens layout" in corpus.description
    assert corpus.encode("the zebra").tolist() == [corpus.vocab.index("the"), corpus.vocab.index("<unk>")]


@pytest.mark.usefixtures("_private_cache")
def test_wikitext_vocab_precedence(tmp_path):
    folder = _wikitext(tmp_path, splits=("valid", "test"))
    # no train, no vocab: built from the requested splits in train, valid, test order
    corpus = wikitext2(folder, splits=("test", "valid"))
    assert corpus.train is None and corpus.vocab[:3] == ["the", "dog", "sat"]
    assert "<unk>" not in corpus.decode(corpus.valid) and "built from valid + test" in corpus.description
    # a given vocabulary wins; unknown tokens become <unk>
    corpus = wikitext2(folder, splits=("valid",), vocab=["<unk>", "<eos>", "the", "dog"])
    assert corpus.decode(corpus.valid) == "the dog <unk> <unk> <eos> <eos> <unk> <unk> <unk> <eos>"
    with pytest.raises(ValueError, match="no <unk>"):
        wikitext2(folder, splits=("valid",), vocab=["<eos>", "the"])
    with pytest.raises(ValueError, match="splits must be"):
        wikitext2(folder, splits=("training",))


@pytest.mark.usefixtures("_private_cache")
def test_wikitext_missing_split_and_missing_folder(tmp_path):
    folder = _wikitext(tmp_path / "wikitext-2", splits=("valid", "test"))
    with pytest.raises(DataNotFoundError) as error:
        wikitext2(tmp_path)
    text = str(error.value)
    assert "train split" in text and "train.txt" in text and str(folder) in text and "wikitext-2-v1" in text
    assert isinstance(error.value, FileNotFoundError)
    with pytest.raises(FileNotFoundError) as error:
        wikitext2(tmp_path / "nowhere")
    assert "valid.txt" in str(error.value) and str(tmp_path / "nowhere" / "wikitext-2") in str(error.value)


@pytest.mark.usefixtures("_private_cache")
def test_wikitext_real_valid_and_test_token_counts():
    folder = _need(SHARED / "wikitext-2")
    corpus = wikitext2(folder, splits=("valid", "test"))
    assert corpus.valid.numel() == 217_646 and corpus.test.numel() == 245_569  # the README's counts
    assert corpus.decode(corpus.valid[:5]) == "<eos> = Homarus gammarus ="
    assert int((corpus.valid == corpus.vocab.index("<eos>")).sum()) == 3_760  # one per line
    with pytest.raises(DataNotFoundError, match="train split"):
        wikitext2(folder)


@pytest.mark.usefixtures("_private_cache")
def test_wikitext_not_utf8_is_corrupt(tmp_path):
    (tmp_path / "valid.txt").write_bytes(b"caf\xe9 \n")
    with pytest.raises(CorruptDataError, match="valid.txt"):
        wikitext2(tmp_path, splits=("valid",))


@pytest.mark.usefixtures("_private_cache")
def test_tiny_shakespeare_character_level_nanogpt_split(tmp_path):
    text = "First Citizen:\nBefore we proceed any further, hear me speak.\n"
    folder = tmp_path / "tinyshakespeare"
    folder.mkdir()
    (folder / "input.txt").write_text(text, encoding="utf-8")
    corpus = tiny_shakespeare(tmp_path)
    assert corpus.vocab == sorted(set(text)) and corpus.test is None and corpus.level == "char"
    n_train = int(len(text) * 0.9)
    assert corpus.train.numel() == n_train and corpus.valid.numel() == len(text) - n_train
    assert corpus.decode(torch.cat([corpus.train, corpus.valid])) == text
    assert corpus.encode("hear").tolist() == [corpus.vocab.index(c) for c in "hear"]
    with pytest.raises(ValueError, match="'Z'"):
        corpus.encode("Z")
    with pytest.raises(ValueError, match="not a token id"):
        corpus.decode([len(corpus.vocab)])
    assert tiny_shakespeare(folder / "input.txt").train.equal(corpus.train)  # the file itself as root


@pytest.mark.usefixtures("_private_cache")
def test_tiny_shakespeare_real_file():
    path = _need(SHARED / "tinyshakespeare" / "input.txt")
    corpus = tiny_shakespeare(path.parent)
    n = corpus.train.numel() + corpus.valid.numel()
    assert n == 1_115_394 and corpus.vocab_size == 65  # the README's numbers
    assert corpus.train.numel() == int(0.9 * n)
    assert corpus.decode(corpus.train[:14]) == "First Citizen:"


@pytest.mark.usefixtures("_private_cache")
def test_tiny_shakespeare_missing(tmp_path):
    with pytest.raises(DataNotFoundError) as error:
        tiny_shakespeare(tmp_path)
    assert "input.txt" in str(error.value) and "karpathy/char-rnn" in str(error.value)


TAIL = "Then pass root=<folder> (the dataset's folder or its parent) or set MEANFIELD_DATA."


@pytest.fixture
def _private_cache_2(tmp_path, monkeypatch):
    """Decoded archives are cached in the test's own folder, never in ~/.cache; the default data folder is an
    empty one (a test that wants another sets it), so that no test depends on what data this machine has."""
    monkeypatch.setenv("MEANFIELD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MEANFIELD_DATA", str(tmp_path / "no-default-data"))


WIKI_2 = {"wiki.train.tokens": " a b <unk> \n\n", "wiki.valid.tokens": " b c \n", "test.txt": " d a d \n"}


@pytest.mark.usefixtures("_private_cache_2")
def test_token_corpus_split_encode_decode():
    corpus = TokenCorpus(torch.tensor([0, 1]), None, torch.tensor([2]), ["a", "b", "<unk>"], "D")
    assert corpus.split("train").tolist() == [0, 1] and corpus.split("test").tolist() == [2]
    with pytest.raises(ValueError) as error:
        corpus.split("valid")
    assert str(error.value) == "the valid split was not loaded: D"
    with pytest.raises(ValueError) as error:
        corpus.split("dev")
    assert str(error.value) == "split must be one of ('train', 'valid', 'test'), got 'dev'"
    assert corpus.encode("a zz b").tolist() == [0, 2, 1] and corpus.decode([1, 0]) == "b a"
    with pytest.raises(ValueError) as error:
        corpus.decode([3])
    assert str(error.value) == "id 3 is not a token id (0 ≤ id < 3)"


@pytest.mark.usefixtures("_private_cache_2")
def test_wikitext_description_says_when_train_is_not_loaded(tmp_path):
    (tmp_path / "valid.txt").write_text(" a b \n\n a \n", encoding="utf-8")
    (tmp_path / "train.txt").write_text(" a <unk> \n", encoding="utf-8")
    corpus = wikitext2(tmp_path, splits=("valid",))
    assert corpus.description == (
        f"WikiText-2, word level, from {tmp_path} (*.txt layout): valid 6 tokens; one <eos> per line; "
        "vocabulary of 3 words, built from valid; train split not loaded"
    )
    corpus = wikitext2(
        tmp_path, splits=("train", "valid")
    )  # negative control: train loaded, b not in its vocabulary
    assert corpus.description == (
        f"WikiText-2, word level, from {tmp_path} (*.txt layout): train 3 tokens, valid 6 tokens; one <eos> per "
        "line; vocabulary of 3 words, built from train; out-of-vocabulary tokens mapped to <unk>: valid 1"
    )


@pytest.mark.usefixtures("_private_cache_2")
def test_tiny_shakespeare_not_found_message(tmp_path):
    with pytest.raises(DataNotFoundError) as error:
        tiny_shakespeare(tmp_path)
    names = ("tinyshakespeare", "tiny-shakespeare", "shakespeare_char", "shakespeare")
    places = "\n".join(f"  {p}" for p in [tmp_path] + [tmp_path / n for n in names])
    assert str(error.value) == (
        f"tinyshakespeare: expected input.txt; looked in:\n{places}\nGet it from {SOURCES['tinyshakespeare']}.\n"
        + TAIL
    )


@pytest.mark.usefixtures("_private_cache_2")
def test_tiny_shakespeare_code_points_split_and_description(tmp_path, monkeypatch):
    text_ = "wörld 😀\n" * 154 + "xy"  # 1,234 characters, one outside the BMP
    folder = tmp_path / "tinyshakespeare"
    folder.mkdir()
    (folder / "input.txt").write_text(text_, encoding="utf-8")
    monkeypatch.setenv("MEANFIELD_DATA", str(tmp_path))  # root=None: the default root
    corpus = tiny_shakespeare()
    vocab = ["\n", " ", "d", "l", "r", "w", "x", "y", "ö", "😀"]  # sorted by code point, by hand
    assert corpus.vocab == vocab and corpus.level == "char" and corpus.test is None
    ids = [vocab.index(c) for c in text_]
    assert corpus.train.dtype == torch.int64 and corpus.train.tolist() == ids[:1110]  # int(0.9 · 1234) = 1110
    assert corpus.valid.dtype == torch.int64 and corpus.valid.tolist() == ids[1110:]
    assert corpus.description == (
        f"tiny-shakespeare, character level, from {folder / 'input.txt'}: 1,234 characters, 10 distinct; "
        "nanoGPT split: train = first 1,110 (90%), valid = last 124"
    )
    assert corpus.decode(corpus.valid) == text_[1110:]
    # the file itself as root; a folder root that is not a file is searched
    assert tiny_shakespeare(folder / "input.txt").train.equal(corpus.train)
    assert tiny_shakespeare(folder).valid.equal(corpus.valid)


@pytest.mark.usefixtures("_private_cache_2")
def test_tiny_shakespeare_empty_file(tmp_path):
    (tmp_path / "input.txt").write_text("")
    with pytest.raises(CorruptDataError) as error:
        tiny_shakespeare(tmp_path)
    assert str(error.value) == f"{tmp_path / 'input.txt'}: the file is empty"


@pytest.mark.usefixtures("_private_cache_2")
def test_wikitext_ids_vocab_unk_counts_and_description(tmp_path):
    folder = _wiki(tmp_path, WIKI_2)  # both layouts mixed: the first name of each split that is there
    corpus = wikitext2(folder)
    assert corpus.vocab == ["a", "b", "<unk>", "<eos>"]  # train's tokens, in order of first appearance
    assert corpus.train.tolist() == [0, 1, 2, 3, 3] and corpus.train.dtype == torch.int64
    assert corpus.valid.tolist() == [1, 2, 3]  # c → <unk>
    assert corpus.test.tolist() == [2, 0, 2, 3]  # d → <unk>; a keeps id 0
    assert corpus.description == (
        f"WikiText-2, word level, from {folder} (wiki.*.tokens layout): train 5 tokens, valid 3 tokens, test 4 tokens; "
        "one <eos> per line; vocabulary of 4 words, built from train; out-of-vocabulary tokens mapped to <unk>: "
        "valid 1, test 2"
    )
    corpus = wikitext2(folder, splits=("test", "valid"))  # no train: the vocabulary of valid + test
    assert corpus.train is None and corpus.vocab == ["b", "c", "<eos>", "d", "a"]
    assert corpus.valid.tolist() == [0, 1, 2] and corpus.test.tolist() == [3, 4, 3, 2]
    assert corpus.description == (
        f"WikiText-2, word level, from {folder} (wiki.*.tokens layout): valid 3 tokens, test 4 tokens; one <eos> "
        "per line; vocabulary of 5 words, built from valid + test; train split not loaded"
    )
    corpus = wikitext2(folder, splits=("test",))
    assert corpus.description.startswith(
        f"WikiText-2, word level, from {folder} (*.txt layout): test 4 tokens;"
    )


@pytest.mark.usefixtures("_private_cache_2")
def test_wikitext_a_given_vocabulary(tmp_path):
    folder = _wiki(tmp_path, WIKI_2)
    corpus = wikitext2(folder, splits=("valid",), vocab=("<unk>", "b", 7))
    assert corpus.vocab == ["<unk>", "b", "7"] and corpus.valid.tolist() == [1, 0, 0]
    assert corpus.train is None and corpus.test is None
    assert corpus.description == (
        f"WikiText-2, word level, from {folder} (wiki.*.tokens layout): valid 3 tokens; one <eos> per line; "
        "vocabulary of 3 words, the given vocabulary (3 tokens); out-of-vocabulary tokens mapped to <unk>: valid 2; "
        "train split not loaded"
    )
    corpus = wikitext2(folder, splits=("valid",), vocab=["b", "<unk>", "c", "<eos>"])  # nothing out of it
    assert corpus.valid.tolist() == [0, 2, 3] and "out-of-vocabulary" not in corpus.description
    with pytest.raises(ValueError) as error:
        wikitext2(folder, splits=("valid",), vocab=["a", "<eos>", "b"])
    assert str(error.value) == (
        f"{folder / 'wiki.valid.tokens'}: 1 tokens are not in the vocabulary (the first: 'c') and the vocabulary "
        "has no <unk> to map them to"
    )
    with pytest.raises(ValueError) as error:
        wikitext2(folder, splits=("test",), vocab=["<eos>", "x", "y"])
    assert str(error.value).startswith(
        f"{folder / 'test.txt'}: 3 tokens are not in the vocabulary (the first: 'd')"
    )
    with pytest.raises(ValueError) as error:
        wikitext2(folder, splits=("valid",), vocab=["a", "b", "a"])
    assert str(error.value) == "vocab has repeated tokens: every token needs exactly one id"


@pytest.mark.usefixtures("_private_cache_2")
@pytest.mark.parametrize("splits", [(), ("train", "dev")])
def test_wikitext_bad_splits(tmp_path, splits):
    with pytest.raises(ValueError) as error:
        wikitext2(tmp_path, splits=splits)
    assert (
        str(error.value) == f"splits must be a non-empty subset of ('train', 'valid', 'test'), got {splits!r}"
    )


@pytest.mark.usefixtures("_private_cache_2")
def test_wikitext_a_missing_split_names_what_is_there(tmp_path):
    folder = _wiki(tmp_path / "wikitext-2", {"valid.txt": " a \n", "test.txt": " a \n"})
    with pytest.raises(DataNotFoundError) as error:
        wikitext2(tmp_path)
    assert str(error.value) == (
        f"wikitext-2: expected the train split (wiki.train.tokens or train.txt); looked in:\n  {folder}\n"
        f"The train split is missing from {folder} (found: valid.txt, test.txt); load only the splits that are there "
        f"with splits=(...).\nGet it from {SOURCES['wikitext-2']}.\n" + TAIL
    )
    assert wikitext2(tmp_path, splits=("valid", "test")).vocab == ["a", "<eos>"]  # negative control
    _wiki(tmp_path / "wikitext-2-v1", {"wiki.train.tokens": " z \n"})
    assert wikitext2(tmp_path / "wikitext-2-v1", splits=("train",)).vocab == ["z", "<eos>"]


@pytest.mark.usefixtures("_private_cache_2")
def test_token_corpus_char_level_encode_and_bad_ids():
    corpus = TokenCorpus(None, None, None, ["a", "b", " "], "D", level="char")
    assert corpus.encode("ab a").tolist() == [0, 1, 2, 0] and corpus.decode([1, 2, 0]) == "b a"
    with pytest.raises(ValueError) as error:
        corpus.encode("abc")
    assert str(error.value) == "token 'c' is not in the vocabulary (3 tokens, no <unk>)"
    with pytest.raises(ValueError) as error:
        corpus.decode([0, 1.5])
    assert str(error.value) == "id 1.5 is not a token id (0 ≤ id < 3)"


@pytest.mark.usefixtures("_private_cache_2")
def test_token_corpus_decode_refuses_a_negative_id():
    corpus = TokenCorpus(None, None, None, ["a", "b", " "], "D", level="char")
    with pytest.raises(ValueError) as error:
        corpus.decode(torch.tensor([1, -1]))  # not an index from the end
    assert str(error.value) == "id -1 is not a token id (0 ≤ id < 3)"
    assert corpus.decode(torch.tensor([1, 2])) == "b "  # negative control


@pytest.mark.usefixtures("_private_cache_2")
def test_token_corpus_encode_empty_and_no_unk_at_char_level():
    words = TokenCorpus(None, None, None, ["a", "<unk>"], "D")
    out = words.encode("")
    assert out.dtype == torch.int64 and out.shape == (0,)  # an empty text is an empty int64 tensor
    assert words.encode("zz a").tolist() == [1, 0]  # word level: unknown words become <unk>
    chars = TokenCorpus(None, None, None, ["a", "<unk>"], "D", level="char")
    assert chars.encode("").dtype == torch.int64
    with pytest.raises(ValueError) as error:  # char level: no <unk> mapping, even when the vocabulary has it
        chars.encode("ab")
    assert str(error.value) == "token 'b' is not in the vocabulary (2 tokens, no <unk>)"


@pytest.mark.usefixtures("_private_cache_2")
def test_token_corpus_decode_names_an_out_of_range_tensor_id():
    corpus = TokenCorpus(None, None, None, ["a", "b", "c"], "D")
    assert corpus.decode(torch.tensor([2, 0])) == "c a"
    with pytest.raises(ValueError) as error:
        corpus.decode(torch.tensor([0, 3]))
    assert str(error.value) == "id 3 is not a token id (0 ≤ id < 3)"
