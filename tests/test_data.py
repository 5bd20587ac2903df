"""meanfield.data: every loader on tiny files in the real formats (written here), the real files when they are
present (``../shared/data``, ``/usr/share/datasets/fashion-mnist``; skipped otherwise), corrupt and missing
files, teacher–student data, and batching that resumes exactly through ``torch.save``/``torch.load``."""

import gzip
import hashlib
import math
import os
import pickle
import struct
import subprocess
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from meanfield import data
from meanfield.data import (
    Batches,
    CorruptDataError,
    DataNotFoundError,
    TokenBatches,
    catalog,
    cifar10,
    default_root,
    fashion_mnist,
    format_catalog,
    iter_blocks,
    teacher_student,
    tiny_shakespeare,
    wikitext2,
)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
DEBIAN_FASHION = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Every test caches decoded archives in its own folder, never in the user's ~/.cache."""
    monkeypatch.setenv("MEANFIELD_CACHE", str(tmp_path / "cache"))


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is not on this machine")
    return path


# --------------------------------------------------------------------------------------------------------
# WikiText-2

WIKI = {
    "train": " = Title = \n\n the cat sat on the mat . \n a dog <unk> . \n",
    "valid": " the dog sat . \n\n a bird flew \n",
    "test": " the cat . \n",
}


def _wikitext(folder: Path, layout: str = "txt", splits=("train", "valid", "test")) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for s in splits:
        name = f"{s}.txt" if layout == "txt" else f"wiki.{s}.tokens"
        (folder / name).write_text(WIKI[s], encoding="utf-8")
    return folder


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


def test_wikitext_tokens_layout_from_a_parent_folder(tmp_path):
    _wikitext(tmp_path / "wikitext-2", layout="tokens")
    corpus = wikitext2(tmp_path)
    assert corpus.train.numel() == 4 + 1 + 8 + 5 and "wiki.*.tokens layout" in corpus.description
    assert corpus.encode("the zebra").tolist() == [corpus.vocab.index("the"), corpus.vocab.index("<unk>")]


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


def test_wikitext_real_valid_and_test_token_counts():
    folder = _need(SHARED / "wikitext-2")
    corpus = wikitext2(folder, splits=("valid", "test"))
    assert corpus.valid.numel() == 217_646 and corpus.test.numel() == 245_569  # the README's counts
    assert corpus.decode(corpus.valid[:5]) == "<eos> = Homarus gammarus ="
    assert int((corpus.valid == corpus.vocab.index("<eos>")).sum()) == 3_760  # one per line
    with pytest.raises(DataNotFoundError, match="train split"):
        wikitext2(folder)


def test_wikitext_not_utf8_is_corrupt(tmp_path):
    (tmp_path / "valid.txt").write_bytes(b"caf\xe9 \n")
    with pytest.raises(CorruptDataError, match="valid.txt"):
        wikitext2(tmp_path, splits=("valid",))


# --------------------------------------------------------------------------------------------------------
# tiny-shakespeare


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


def test_tiny_shakespeare_real_file():
    path = _need(SHARED / "tinyshakespeare" / "input.txt")
    corpus = tiny_shakespeare(path.parent)
    n = corpus.train.numel() + corpus.valid.numel()
    assert n == 1_115_394 and corpus.vocab_size == 65  # the README's numbers
    assert corpus.train.numel() == int(0.9 * n)
    assert corpus.decode(corpus.train[:14]) == "First Citizen:"


def test_tiny_shakespeare_missing(tmp_path):
    with pytest.raises(DataNotFoundError) as error:
        tiny_shakespeare(tmp_path)
    assert "input.txt" in str(error.value) and "karpathy/char-rnn" in str(error.value)


# --------------------------------------------------------------------------------------------------------
# default root


def test_default_root_order(tmp_path, monkeypatch):
    monkeypatch.setenv("MEANFIELD_DATA", str(tmp_path / "mine"))
    assert default_root() == tmp_path / "mine"  # even when it does not exist
    monkeypatch.delenv("MEANFIELD_DATA")
    monkeypatch.chdir(tmp_path)
    checkout = ROOT.parent / "shared" / "data"
    assert default_root() == (checkout.absolute() if checkout.is_dir() else tmp_path / "data")
    (tmp_path / "data").mkdir()
    assert default_root() == tmp_path / "data"  # ./data comes first


# --------------------------------------------------------------------------------------------------------
# Fashion-MNIST


def _idx(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + np.array(array.shape, dtype=">u4").tobytes()
    return header + array.astype(np.uint8).tobytes()


def _fashion(folder: Path, gz: bool, n=(6, 3), side=(5, 4)) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    arrays = {}
    for split, count in zip(("train", "t10k"), n):
        arrays[f"{split}-images-idx3-ubyte"] = rng.integers(0, 256, (count, *side), dtype=np.uint8)
        arrays[f"{split}-labels-idx1-ubyte"] = rng.integers(0, 10, count, dtype=np.uint8)
    for name, array in arrays.items():
        raw = _idx(array)
        if gz:
            (folder / f"{name}.gz").write_bytes(gzip.compress(raw))
        else:
            (folder / name).write_bytes(raw)
    return arrays


@pytest.mark.parametrize("gz", [True, False])
def test_fashion_mnist_idx_files_gzipped_or_not(tmp_path, gz):
    arrays = _fashion(tmp_path / "fashion-mnist", gz)
    ds = fashion_mnist(tmp_path)
    assert ds.train_x.shape == (6, 1, 5, 4) and ds.train_x.dtype == torch.uint8
    assert ds.test_x.shape == (3, 1, 5, 4) and ds.test_y.dtype == torch.int64
    assert np.array_equal(ds.train_x[:, 0].numpy(), arrays["train-images-idx3-ubyte"])
    assert np.array_equal(ds.test_y.numpy(), arrays["t10k-labels-idx1-ubyte"])
    assert ds.classes[0] == "T-shirt/top" and ds.num_classes == 10 and not ds.lossy
    assert ("gzipped" in ds.description) == gz


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda raw: b"\x00\x00\x08\x09" + raw[4:], "dimensions"),
        (lambda raw: b"\x01\x02" + raw[2:], "magic"),
        (lambda raw: raw[:-3], "truncated"),
        (lambda raw: raw + b"\x00", "expected"),
        (lambda raw: raw[:10], "header"),
    ],
)
def test_fashion_mnist_corrupt_idx(tmp_path, damage, message):
    _fashion(tmp_path, gz=False)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CorruptDataError, match=message) as error:
        fashion_mnist(tmp_path)
    assert str(path) in str(error.value)


def test_fashion_mnist_truncated_gzip_and_inconsistent_labels(tmp_path):
    _fashion(tmp_path, gz=True)
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:-12])
    with pytest.raises(CorruptDataError, match="gzip") as error:
        fashion_mnist(tmp_path)
    assert str(path) in str(error.value)
    _fashion(tmp_path, gz=True)
    (tmp_path / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx(np.array([1, 2, 3]))))
    with pytest.raises(CorruptDataError, match="3 labels for 6 images"):
        fashion_mnist(tmp_path)
    (tmp_path / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx(np.array([0, 1, 2, 3, 4, 10]))))
    with pytest.raises(CorruptDataError, match="label 10"):
        fashion_mnist(tmp_path)


def test_fashion_mnist_missing_file_names_it_and_the_package(tmp_path):
    _fashion(tmp_path, gz=True)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataNotFoundError) as error:
        fashion_mnist(tmp_path)
    assert "t10k-labels-idx1-ubyte" in str(error.value) and "dataset-fashion-mnist" in str(error.value)
    with pytest.raises(DataNotFoundError, match="train-images-idx3-ubyte"):
        fashion_mnist(tmp_path / "empty")


def test_fashion_mnist_real_files_and_debian_default(tmp_path, monkeypatch):
    _need(DEBIAN_FASHION)
    monkeypatch.setenv("MEANFIELD_DATA", str(tmp_path))  # nothing there: the default falls back to Debian's
    ds = fashion_mnist()
    assert ds.train_x.shape == (60_000, 1, 28, 28) and ds.test_x.shape == (10_000, 1, 28, 28)
    assert str(DEBIAN_FASHION) in ds.description
    assert torch.bincount(ds.train_y).tolist() == [6_000] * 10  # balanced classes
    z = ds.normalized("train")
    assert z.dtype == torch.float32 and abs(float(z.mean())) < 1e-4 and abs(float(z.std()) - 1) < 1e-4


def test_normalized_uses_the_train_statistics(tmp_path):
    _fashion(tmp_path, gz=False)
    ds = fashion_mnist(tmp_path)
    x = ds.train_x.double() / 255
    assert torch.allclose(ds.mean, x.mean(dim=(0, 2, 3))) and torch.allclose(
        ds.std, x.std(dim=(0, 2, 3), unbiased=False)
    )
    expected = ((ds.test_x.double() / 255 - ds.mean.view(1, -1, 1, 1)) / ds.std.view(1, -1, 1, 1)).float()
    assert torch.allclose(ds.normalized("test"), expected, atol=1e-6)
    with pytest.raises(ValueError, match="split"):
        ds.normalized("valid")


# --------------------------------------------------------------------------------------------------------
# CIFAR-10: pickles


def _py2_str(b: bytes) -> bytes:
    return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<i", len(b)) + b


def _py2_pickle(x: np.ndarray, labels: list[int]) -> bytes:
    """``{'data': x, 'labels': labels}`` as Python 2's cPickle (protocol 2) wrote the original CIFAR batches:
    str keys and array bytes as BINSTRING opcodes, the array through ``numpy.core.multiarray._reconstruct``."""
    out = b"\x80\x02}q\x00(" + _py2_str(b"data")
    out += (
        b"cnumpy.core.multiarray\n_reconstruct\nq\x01cnumpy\nndarray\nq\x02K\x00\x85"
        + _py2_str(b"b")
        + b"\x87R"
    )
    out += b"(K\x01" + b"".join(b"M" + struct.pack("<H", d) for d in x.shape) + b"\x86"
    out += b"cnumpy\ndtype\n" + _py2_str(b"u1") + b"K\x00K\x01\x87R(K\x03" + _py2_str(b"|")
    out += b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb\x89" + _py2_str(x.tobytes()) + b"tb"
    out += _py2_str(b"labels") + b"](" + b"".join(b"K" + bytes([v]) for v in labels) + b"eu."
    return out


def _cifar_pickles(folder: Path, per_batch: int = 3, meta: bool = True) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        x = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        y = rng.integers(0, 10, per_batch).tolist()
        batches[name] = (x, y)
        if name == "data_batch_1":  # byte for byte as Python 2 wrote the originals
            (folder / name).write_bytes(_py2_pickle(x, y))
            continue
        with open(folder / name, "wb") as f:  # as Python 3 writes them, with bytes keys like the originals
            pickle.dump({b"batch_label": name.encode(), b"data": x, b"labels": y}, f, protocol=2)
    if meta:
        names = [c.encode() for c in data.CIFAR10_CLASSES]
        with open(folder / "batches.meta", "wb") as f:
            pickle.dump({b"label_names": names, b"num_vis": 3072}, f, protocol=2)
    return batches


def test_cifar10_pickles(tmp_path):
    batches = _cifar_pickles(tmp_path / "cifar-10-batches-py")
    ds = cifar10(tmp_path)
    assert ds.train_x.shape == (15, 3, 32, 32) and ds.test_x.shape == (3, 3, 32, 32) and not ds.lossy
    x, y = batches["data_batch_2"]
    assert np.array_equal(ds.train_x[3:6].reshape(3, -1).numpy(), x)  # rows are CHW: R plane, G, B
    assert np.array_equal(ds.train_x[4, 1].numpy(), x[1, 1024:2048].reshape(32, 32))
    assert ds.train_y[3:6].tolist() == y and ds.classes == data.CIFAR10_CLASSES
    x, y = batches["data_batch_1"]  # the Python 2 pickle
    assert np.array_equal(ds.train_x[:3].reshape(3, -1).numpy(), x) and ds.train_y[:3].tolist() == y
    assert "pickles" in ds.description and "lossy" not in ds.description


def test_cifar10_pickles_without_meta_and_missing_batch(tmp_path):
    _cifar_pickles(tmp_path, meta=False)
    ds = cifar10(tmp_path)
    assert ds.classes == data.CIFAR10_CLASSES and "batches.meta absent" in ds.description
    (tmp_path / "test_batch").unlink()
    with pytest.raises(DataNotFoundError, match="test_batch"):
        cifar10(tmp_path)


class _Evil:
    def __reduce__(self):
        return (os.getcwd, ())


@pytest.mark.parametrize(
    "content, message",
    [
        (lambda raw: raw[: len(raw) // 2], "not a readable CIFAR pickle"),
        (lambda raw: b"garbage", "not a readable CIFAR pickle"),
        (lambda raw: pickle.dumps({b"data": _Evil(), b"labels": []}, protocol=2), "refusing to load"),
        (lambda raw: pickle.dumps({b"data": np.zeros((2, 10), np.uint8), b"labels": [0, 1]}), r"\(n, 3072\)"),
        (lambda raw: pickle.dumps({b"data": np.zeros((2, 3072), np.uint8)}), "needs 'data' and 'labels'"),
        (lambda raw: pickle.dumps([1, 2]), "expected a pickled dict"),
    ],
)
def test_cifar10_corrupt_pickle(tmp_path, content, message):
    _cifar_pickles(tmp_path)
    path = tmp_path / "data_batch_3"
    path.write_bytes(content(path.read_bytes()))
    with pytest.raises(CorruptDataError, match=message) as error:
        cifar10(tmp_path)
    assert "data_batch_3" in str(error.value)


def test_cifar10_official_archive_of_pickles(tmp_path):
    _cifar_pickles(tmp_path / "src" / "cifar-10-batches-py")
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "src" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    ds = cifar10(archive)
    assert ds.train_x.equal(cifar10(tmp_path / "src").train_x) and "pickles" in ds.description


# --------------------------------------------------------------------------------------------------------
# CIFAR-10: images by class, folders and archives

CLASSES = ["cat", "airplane", "dog"]  # written out of order: the index is the sorted position


def _images(folder: Path, suffix: str, per_class=(2, 1), side: int = 8) -> dict:
    from PIL import Image

    rng = np.random.default_rng(2)
    pixels = {}
    for split, count in zip(("train", "test"), per_class):
        for cls in CLASSES:
            (folder / split / cls).mkdir(parents=True, exist_ok=True)
            for i in range(count):
                image = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
                Image.fromarray(image).save(folder / split / cls / f"{i:04d}{suffix}", quality=75)
                pixels[(split, cls, i)] = image
    return pixels


def _tar(folder: Path, archive: Path, prefix: str = "") -> Path:
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        for split in ("train", "test"):
            tar.add(folder / split, arcname=f"{prefix}{split}")
    return archive


def test_cifar10_png_folder_is_pixel_exact(tmp_path):
    pixels = _images(tmp_path / "cifar10", ".png")
    (tmp_path / "cifar10" / "train" / "cat" / ".DS_Store").write_bytes(b"junk")  # ignored
    ds = cifar10(tmp_path)
    assert (
        ds.classes == sorted(CLASSES) and ds.train_x.shape == (6, 3, 8, 8) and ds.test_x.shape == (3, 3, 8, 8)
    )
    assert ds.train_y.tolist() == [0, 0, 1, 1, 2, 2] and ds.test_y.tolist() == [0, 1, 2]
    assert np.array_equal(ds.train_x[2].permute(1, 2, 0).numpy(), pixels[("train", "cat", 0)])
    assert not ds.lossy and "lossy" not in ds.description


def test_cifar10_jpeg_archive_is_lossy_and_cached(tmp_path):
    _images(tmp_path / "src", ".jpg")
    archive = _tar(tmp_path / "src", tmp_path / "cifar10-jpeg" / "cifar10-jpg.tar.gz", prefix="./")
    first = cifar10(tmp_path)
    assert first.lossy and "lossy JPEG copy" in first.description and str(archive) in first.description
    assert first.train_x.shape == (6, 3, 8, 8) and "from the cache" not in first.description
    assert "cached in" in first.description
    cached = list((tmp_path / "cache").glob("cifar10-cifar10-jpg.tar.gz-*.pt"))
    assert len(cached) == 1
    second = cifar10(archive)
    assert "from the cache" in second.description and second.lossy and "lossy JPEG copy" in second.description
    for name in ("train_x", "train_y", "test_x", "test_y"):
        assert getattr(first, name).equal(getattr(second, name))
    assert cifar10(archive, cache=False).train_x.equal(first.train_x)
    cached[0].write_bytes(b"not a torch file")  # an unreadable cache is rebuilt, with a warning
    with pytest.warns(UserWarning, match="unreadable cache"):
        assert cifar10(archive).train_x.equal(first.train_x)
    os.utime(archive, ns=(1, 1))  # a changed archive gets a new cache entry
    cifar10(archive)
    assert len(list((tmp_path / "cache").glob("*.pt"))) == 2


def test_cifar10_png_archive_equals_the_folder(tmp_path):
    _images(tmp_path / "src", ".png")
    ds = cifar10(_tar(tmp_path / "src", tmp_path / "imgs.tar.gz"))
    assert ds.train_x.equal(cifar10(tmp_path / "src").train_x) and not ds.lossy


def test_cifar10_truncated_archive_and_bad_images(tmp_path):
    _images(tmp_path / "src", ".png", per_class=(20, 1), side=16)
    archive = _tar(tmp_path / "src", tmp_path / "a-cifar.tar.gz")
    raw = archive.read_bytes()
    cut = tmp_path / "cut-cifar.tar.gz"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(CorruptDataError, match="truncated or corrupt archive") as error:
        cifar10(cut)
    assert str(cut) in str(error.value)
    # an uncompressed tar cut inside a member, or exactly between two members (tarfile itself stops silently)
    plain = tmp_path / "plain-cifar.tar"
    with tarfile.open(plain, "w") as tar:
        tar.add(tmp_path / "src" / "train", arcname="train")
        tar.add(tmp_path / "src" / "test", arcname="test")
    raw = plain.read_bytes()
    with tarfile.open(plain) as tar:
        offsets = [m.offset for m in tar.getmembers()]
    assert cifar10(plain, cache=False).train_x.shape[0] == 60
    for cut in (offsets[30], offsets[30] + 100, offsets[30] + 600):
        plain.write_bytes(raw[:cut])
        with pytest.raises(CorruptDataError, match="truncated or corrupt archive") as error:
            cifar10(plain, cache=False)
        assert str(plain) in str(error.value)

    bad = tmp_path / "src" / "train" / "dog" / "0003.png"
    bad.write_bytes(b"\x89PNG not really")
    with pytest.raises(CorruptDataError, match="undecodable image") as error:
        cifar10(tmp_path / "src")
    assert "0003.png" in str(error.value)
    bad.unlink()
    from PIL import Image

    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(bad)
    with pytest.raises(CorruptDataError, match="one size"):
        cifar10(tmp_path / "src")


def test_cifar10_missing(tmp_path):
    with pytest.raises(DataNotFoundError) as error:
        cifar10(tmp_path)
    text = str(error.value)
    assert (
        "cifar-10-batches-py" in text
        and "cifar-10-python.tar.gz" in text
        and str(tmp_path / "cifar10-jpeg") in text
    )
    (tmp_path / "cifar10" / "train").mkdir(parents=True)
    (tmp_path / "cifar10" / "test").mkdir()
    with pytest.raises(CorruptDataError, match="no images"):
        cifar10(tmp_path)


@pytest.mark.slow
def test_cifar10_real_jpeg_copy_and_its_cache():
    archive = _need(SHARED / "cifar10-jpeg" / "cifar10-jpg.tar.gz")
    start = time.perf_counter()
    ds = cifar10(archive.parent.parent)
    decode = time.perf_counter() - start
    assert ds.train_x.shape == (50_000, 3, 32, 32) and ds.test_x.shape == (10_000, 3, 32, 32)
    assert ds.lossy and "lossy JPEG copy" in ds.description
    assert ds.classes[0] == "airplane" and ds.classes[-1] == "truck"
    assert (
        torch.bincount(ds.train_y).tolist() == [5_000] * 10
        and torch.bincount(ds.test_y).tolist() == [1_000] * 10
    )
    mean = ds.mean * 255
    readme = torch.tensor([125.27, 122.93, 113.86], dtype=torch.float64)
    assert (mean - readme).abs().max() < 0.1, mean
    start = time.perf_counter()
    again = cifar10(archive)
    assert "from the cache" in again.description and again.train_x.equal(ds.train_x)
    assert time.perf_counter() - start < decode


# --------------------------------------------------------------------------------------------------------
# Teacher–student


def test_teacher_directions_orthonormal_or_random():
    ts = teacher_student(20, 10, 5, k=4, dtype=torch.float64)
    assert ts.directions.shape == (4, 20)
    assert torch.allclose(ts.directions @ ts.directions.T, torch.eye(4, dtype=torch.float64), atol=1e-12)
    rnd = teacher_student(20, 10, 5, k=4, directions="random", dtype=torch.float64)
    assert torch.allclose(rnd.directions.norm(dim=1), torch.ones(4, dtype=torch.float64))
    off_diagonal = (rnd.directions @ rnd.directions.T - torch.eye(4, dtype=torch.float64)).abs().max()
    assert off_diagonal > 1e-3  # independent unit vectors are not orthogonal
    with pytest.raises(ValueError, match="k must be ≤ d"):
        teacher_student(3, 10, 5, k=4)
    assert teacher_student(3, 10, 5, k=4, directions="random").directions.shape == (4, 3)


@pytest.mark.parametrize("activation", sorted(data.ACTIVATIONS))
def test_teacher_targets_follow_the_formula(activation):
    ts = teacher_student(6, 50, 20, k=2, activation=activation, coefficients=[0.5, -2.0], dtype=torch.float64)
    g = {
        "relu": lambda z: z.clamp_min(0),
        "tanh": torch.tanh,
        "sigmoid": lambda z: 1 / (1 + torch.exp(-z)),
        "abs": torch.abs,
        "identity": lambda z: z,
        "he1": lambda z: z,
        "he2": lambda z: z * z - 1,
        "he3": lambda z: z * z * z - 3 * z,
        "he4": lambda z: z**4 - 6 * z * z + 3,
    }[activation]
    for x, y in ((ts.x_train, ts.y_train), (ts.x_test, ts.y_test)):
        expected = sum(c * g(x @ w) for c, w in zip([0.5, -2.0], ts.directions))
        assert torch.allclose(y, expected, atol=1e-10)
    assert ts.coefficients.tolist() == [0.5, -2.0]


def test_teacher_defaults_seed_and_arguments():
    one = teacher_student(5, 8, 4)
    assert one.coefficients.tolist() == [1.0] and one.x_train.dtype == torch.float32
    assert torch.equal(one.y_train, torch.relu(one.x_train @ one.directions[0]))
    two = teacher_student(5, 8, 4, k=2, seed=3)
    assert torch.allclose(two.coefficients, torch.full((2,), 2**-0.5))
    same = teacher_student(5, 8, 4, k=2, seed=3)
    for name in ("x_train", "y_train", "x_test", "y_test", "directions"):
        assert torch.equal(getattr(two, name), getattr(same, name))
    assert not torch.equal(two.x_train, teacher_student(5, 8, 4, k=2, seed=4).x_train)
    assert "2-index relu" in two.description and "seed 3" in two.description
    with pytest.raises(ValueError, match="coefficients must be 2"):
        teacher_student(5, 8, 4, k=2, coefficients=[1.0])
    with pytest.raises(ValueError, match="activation must be one of"):
        teacher_student(5, 8, 4, activation="gelu")
    with pytest.raises(ValueError, match="label_noise must be ≥ 0"):
        teacher_student(5, 8, 4, label_noise=-1.0)
    with pytest.raises(ValueError, match="n_train must be ≥ 1, got 0"):
        teacher_student(5, 0, 4)


def _noise_within(residual: torch.Tensor, sigma: float, z: float = 5.0) -> bool:
    """Whether the sample variance of ``residual`` is within z·SE of σ², SE = σ² sqrt(2/(n−1)) (Gaussian)."""
    n = residual.numel()
    return abs(float(residual.var()) - sigma**2) <= z * sigma**2 * math.sqrt(2 / (n - 1))


def test_teacher_label_noise_variance():
    """Residual variance = σ² within 5 SE (n = 200,000: SE = 0.32 % of σ², so the test detects an error of
    about 1.6 % in the variance, 0.8 % in σ); the test targets stay noiseless. Negative control: σ×1.05
    (variance +10 %) must fail."""
    sigma = 0.3
    ts = teacher_student(4, 200_000, 1_000, k=2, label_noise=sigma, dtype=torch.float64, seed=7)
    residual = ts.y_train - ts.teacher(ts.x_train)
    assert _noise_within(residual, sigma)
    assert abs(float(residual.mean())) < 5 * sigma / math.sqrt(residual.numel())
    assert not _noise_within(residual, sigma * 1.05)  # negative control
    assert torch.equal(ts.y_test, ts.teacher(ts.x_test))
    noisy = teacher_student(
        4, 10, 2_000, k=2, label_noise=sigma, noisy_test=True, dtype=torch.float64, seed=7
    )
    assert not torch.equal(noisy.y_test, noisy.teacher(noisy.x_test))


# --------------------------------------------------------------------------------------------------------
# Batching


def _roundtrip(state: dict, path: Path) -> dict:
    torch.save(state, path)
    return torch.load(path, weights_only=True)


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


def test_iter_blocks_cover_every_target_once():
    tokens = torch.arange(23)
    blocks = list(iter_blocks(tokens, block_size=5, batch_size=3))
    assert [tuple(x.shape) for x, _ in blocks] == [(3, 5), (1, 5), (1, 2)]
    assert torch.equal(torch.cat([x.reshape(-1) for x, _ in blocks]), tokens[:-1])
    assert torch.equal(torch.cat([y.reshape(-1) for _, y in blocks]), tokens[1:])
    assert [tuple(x.shape) for x, _ in iter_blocks(torch.arange(11), 5, 8)] == [(2, 5)]


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


def test_token_batches_refuse_float_tokens():
    with pytest.raises(TypeError, match="integer tensor"):
        TokenBatches(torch.zeros(10), 4, 2, seed=0)


# --------------------------------------------------------------------------------------------------------
# Catalog


def test_catalog_checks_sha256sums(tmp_path):
    _wikitext(tmp_path / "wikitext-2", splits=("valid", "test"))
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare" / "input.txt").write_text("abc")
    valid = hashlib.sha256((tmp_path / "wikitext-2" / "valid.txt").read_bytes()).hexdigest()
    (tmp_path / "SHA256SUMS").write_text(
        f"{valid}  wikitext-2/valid.txt\n{'0' * 64}  tinyshakespeare/input.txt\n"
    )
    infos = {i.name: i for i in catalog(tmp_path)}
    wiki = infos["wikitext-2"]
    assert wiki.found and wiki.folder == tmp_path / "wikitext-2" and "train" in wiki.note
    status = {f.path.name: f.status for f in wiki.files}
    assert status == {"valid.txt": "OK", "test.txt": "not listed"}
    assert (
        infos["tinyshakespeare"].files[0].status == "MISMATCH" and infos["tinyshakespeare"].files[0].size == 3
    )
    assert not infos["cifar10"].found and "cifar-10-python.tar.gz" in infos["cifar10"].source
    table = format_catalog(list(infos.values()))
    assert "MISMATCH" in table and "missing" in table and "valid.txt" in table
    assert catalog(tmp_path, hash=False)[0].files[0].status == "not hashed"


def test_catalog_checks_wikitext_train_by_its_git_blob_id(tmp_path, monkeypatch):
    folder = _wikitext(tmp_path / "wikitext-2")
    blob = subprocess.run(["git", "hash-object", str(folder / "train.txt")], capture_output=True, text=True)
    if blob.returncode != 0:
        pytest.skip("git is not installed")
    assert data.git_blob_id(folder / "train.txt") == blob.stdout.strip()
    status = {f.path.name: f.status for f in catalog(tmp_path)[0].files}
    assert status["train.txt"] == "MISMATCH (git blob id)" and status["valid.txt"] == "not listed"
    monkeypatch.setitem(data.inventory.KNOWN_GIT_BLOBS, ("wikitext-2", "train.txt"), blob.stdout.strip())
    assert catalog(tmp_path)[0].files[0].status == "OK (git blob id)"


def test_catalog_of_the_shared_data():
    _need(SHARED / "SHA256SUMS")
    infos = {i.name: i for i in catalog(SHARED)}
    listed = [f for i in infos.values() for f in i.files if f.status != "not listed"]
    assert len(listed) == 4 and all(f.status == "OK" for f in listed), format_catalog(list(infos.values()))
    assert "lossy" in infos["cifar10"].note and "train" in infos["wikitext-2"].note
