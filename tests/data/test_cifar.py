"""Tests of :mod:`meanfield.data.cifar`."""

from __future__ import annotations

import os
import pickle
import struct
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.data_files import SHARED, _need, _pickles, _tar_of

from meanfield import data
from meanfield.data import (
    SOURCES,
    CorruptDataError,
    DataNotFoundError,
    _cache,
    cifar,
    cifar10,
)

ROOT = Path(__file__).resolve().parents[2]




@pytest.fixture
def _private_cache(tmp_path, monkeypatch):
    """Every test caches decoded archives in its own folder, never in the user's ~/.cache."""
    monkeypatch.setenv("MEANFIELD_CACHE", str(tmp_path / "cache"))


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


class _Evil:
    def __reduce__(self):
        return (os.getcwd, ())


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


@pytest.mark.usefixtures("_private_cache")
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


@pytest.mark.usefixtures("_private_cache")
def test_cifar10_pickles_without_meta_and_missing_batch(tmp_path):
    _cifar_pickles(tmp_path, meta=False)
    ds = cifar10(tmp_path)
    assert ds.classes == data.CIFAR10_CLASSES and "batches.meta absent" in ds.description
    (tmp_path / "test_batch").unlink()
    with pytest.raises(DataNotFoundError, match="test_batch"):
        cifar10(tmp_path)


@pytest.mark.usefixtures("_private_cache")
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


@pytest.mark.usefixtures("_private_cache")
def test_cifar10_official_archive_of_pickles(tmp_path):
    _cifar_pickles(tmp_path / "src" / "cifar-10-batches-py")
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "src" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    ds = cifar10(archive)
    assert ds.train_x.equal(cifar10(tmp_path / "src").train_x) and "pickles" in ds.description


@pytest.mark.usefixtures("_private_cache")
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


@pytest.mark.usefixtures("_private_cache")
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


@pytest.mark.usefixtures("_private_cache")
def test_cifar10_png_archive_equals_the_folder(tmp_path):
    _images(tmp_path / "src", ".png")
    ds = cifar10(_tar(tmp_path / "src", tmp_path / "imgs.tar.gz"))
    assert ds.train_x.equal(cifar10(tmp_path / "src").train_x) and not ds.lossy


@pytest.mark.usefixtures("_private_cache")
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


@pytest.mark.usefixtures("_private_cache")
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


@pytest.mark.usefixtures("_private_cache")
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


TAIL = "Then pass root=<folder> (the dataset's folder or its parent) or set MEANFIELD_DATA."


@pytest.fixture
def _private_cache_2(tmp_path, monkeypatch):
    """Decoded archives are cached in the test's own folder, never in ~/.cache; the default data folder is an
    empty one (a test that wants another sets it), so that no test depends on what data this machine has."""
    monkeypatch.setenv("MEANFIELD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MEANFIELD_DATA", str(tmp_path / "no-default-data"))


def _png_folder(folder: Path, suffix=".png", fmt="PNG", shape=(2, 3, 3)) -> dict:
    """train/{a,b}/0.png and test/b/0.png: 2×3 RGB images (not square, so that height and width are told apart)."""
    from PIL import Image

    rng = np.random.default_rng(9)
    pixels = {}
    for rel in ("train/b/0", "train/a/0", "test/b/0"):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        pixels[rel] = rng.integers(0, 256, shape, dtype=np.uint8)
        Image.fromarray(pixels[rel]).save(folder / f"{rel}{suffix}", format=fmt)
    return pixels


def _cached_archive(tmp_path, train_y, classes=("a", "b", "c"), test_y=(0,)) -> Path:
    """An archive whose cache entry (written here by hand) holds the given train labels."""
    _pickles(tmp_path / "src")
    archive = _tar_of(tmp_path / "src", tmp_path / "c.tar")
    n = len(train_y)
    (tmp_path / "cache").mkdir(exist_ok=True)
    torch.save(
        {
            "version": 1,
            "train_x": torch.zeros(n, 3, 2, 2, dtype=torch.uint8),
            "train_y": torch.tensor(train_y, dtype=torch.int64),
            "test_x": torch.zeros(len(test_y), 3, 2, 2, dtype=torch.uint8),
            "test_y": torch.tensor(test_y, dtype=torch.int64),
            "classes": list(classes),
            "lossy": False,
            "format": "hand-written",
        },
        _cache.cache_file("cifar10", archive, 1),
    )
    return archive


@pytest.mark.usefixtures("_private_cache_2")
def test_cifar10_pickles_with_str_or_bytes_class_names_and_the_description(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    batches = _pickles(folder, names=["x", "y", "z"])  # str names (a Python 3 meta file)
    ds = cifar10(tmp_path)
    assert ds.classes == ["x", "y", "z"]
    assert ds.description == (
        f"CIFAR-10 from folder {folder} (cifar-10-batches-py pickles): train 10, test 2 images of 32×32, "
        "3 channel(s), 3 classes"
    )
    x = np.concatenate([batches[f"data_batch_{i}"][0] for i in range(1, 6)])
    assert np.array_equal(ds.train_x.reshape(10, 3072).numpy(), x)
    assert ds.test_y.tolist() == batches["test_batch"][1]
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"p", b"q", b"r"]}, protocol=2))
    assert cifar10(tmp_path).classes == ["p", "q", "r"]  # bytes names (the originals)
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": [1, 2, 3]}, protocol=2))
    assert cifar10(tmp_path).classes == ["1", "2", "3"]


@pytest.mark.usefixtures("_private_cache_2")
@pytest.mark.parametrize("meta", [{b"label_names": []}, {b"other": 1}, {b"label_names": "abc"}])
def test_cifar10_meta_without_a_list_of_names(tmp_path, meta):
    _pickles(tmp_path)
    (tmp_path / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    with pytest.raises(CorruptDataError) as error:
        cifar10(tmp_path)
    assert str(error.value) == f"{tmp_path}/batches.meta: no 'label_names' list"


@pytest.mark.usefixtures("_private_cache_2")
def test_cifar10_pickles_without_meta_and_with_missing_batches(tmp_path):
    _pickles(tmp_path)
    ds = cifar10(tmp_path)
    assert ds.classes == data.CIFAR10_CLASSES
    assert "(cifar-10-batches-py pickles (batches.meta absent: the standard class names))" in ds.description
    (tmp_path / "data_batch_3").unlink()
    (tmp_path / "test_batch").unlink()
    with pytest.raises(DataNotFoundError) as error:
        cifar10(tmp_path)
    assert str(error.value) == (
        f"cifar10: expected data_batch_3, test_batch; looked in:\n  {tmp_path}\n"
        f"data_batch_3, test_batch missing.\nGet it from {SOURCES['cifar10']}.\n" + TAIL
    )


@pytest.mark.usefixtures("_private_cache_2")
def test_cifar10_unreadable_pickle_names_the_file_and_the_error(tmp_path):
    _pickles(tmp_path)
    (tmp_path / "data_batch_2").write_bytes(b"\x80\x02}q\x00")  # cut short
    with pytest.raises(CorruptDataError) as error:
        cifar10(tmp_path)
    assert (
        str(error.value)
        == f"{tmp_path}/data_batch_2: not a readable CIFAR pickle (EOFError: Ran out of input)"
    )
    (tmp_path / "data_batch_2").write_bytes(
        pickle.dumps({b"data": os.getcwd}, protocol=2)
    )  # not numpy: refused
    with pytest.raises(CorruptDataError) as error:
        cifar10(tmp_path)
    assert str(error.value) == (
        f"{tmp_path}/data_batch_2: not a readable CIFAR pickle "
        "(UnpicklingError: refusing to load posix.getcwd (only numpy arrays are expected))"
    )


@pytest.mark.usefixtures("_private_cache_2")
def test_cifar10_labels_outside_the_classes_are_named(tmp_path):
    batches = _pickles(tmp_path, names=["a", "b"])  # labels drawn in 0..2, two classes
    assert max(max(y) for _, y in batches.values()) == 2
    with pytest.raises(CorruptDataError) as error:
        cifar10(tmp_path)
    assert str(error.value) == f"{tmp_path}: train label 2 outside 0…1"
    (tmp_path / "batches.meta").write_bytes(pickle.dumps({b"label_names": ["a", "b", "c"]}, protocol=2))
    assert cifar10(tmp_path).classes == ["a", "b", "c"]  # negative control


@pytest.mark.usefixtures("_private_cache_2")
def test_cifar10_archive_of_pickles_nested_and_its_cache(tmp_path):
    batches = _pickles(tmp_path / "src", names=["a", "b", "c"])
    archive = _tar_of(tmp_path / "src", tmp_path / "any.tar.gz", arc="deep/cifar-10-batches-py/")
    ds = cifar10(archive)
    cache = _cache.cache_file("cifar10", archive, cifar.CACHE_VERSION)
    assert ds.description == (
        f"CIFAR-10 from archive {archive} (cifar-10-batches-py pickles): train 10, test 2 images of 32×32, "
        f"3 channel(s), 3 classes; decoded tensors cached in {cache}"
    )
    assert ds.classes == ["a", "b", "c"] and ds.test_y.tolist() == batches["test_batch"][1]
    again = cifar10(archive)
    assert again.description.endswith(f"; decoded tensors read from the cache {cache}")
    assert again.train_x.equal(ds.train_x)
    assert cifar10(archive, cache=False).description.endswith("3 classes")


@pytest.mark.usefixtures("_private_cache_2")
def test_cifar10_folder_with_two_archives_is_ambiguous(tmp_path):
    _pickles(tmp_path / "src")
    (tmp_path / "d").mkdir()
    for name in ("b-cifar.tar.gz", "a-cifar.tgz"):
        _tar_of(tmp_path / "src", tmp_path / "d" / name)
    (tmp_path / "d" / "other.tar.gz").write_bytes(b"")  # no "cifar" in the name: not counted
    assert [p.name for p in cifar.archives_in(tmp_path / "d")] == ["a-cifar.tgz", "b-cifar.tar.gz"]
    assert cifar.folder_kind(tmp_path / "d") == "archive" and cifar.folder_kind(tmp_path / "src") == "pickles"
    with pytest.raises(ValueError) as error:
        cifar10(tmp_path / "d")
    assert (
        str(error.value)
        == f"{tmp_path / 'd'} holds several archives (a-cifar.tgz, b-cifar.tar.gz): pass one as root"
    )
    (tmp_path / "d" / "b-cifar.tar.gz").unlink()
    assert cifar10(tmp_path / "d").train_x.shape == (10, 3, 32, 32)


@pytest.mark.usefixtures("_private_cache_2")
def test_cifar10_meta_and_test_batch_messages_name_their_file(tmp_path):
    _pickles(tmp_path, names=["a", "b", "c"])
    (tmp_path / "test_batch").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(CorruptDataError) as error:
        cifar10(tmp_path)
    assert str(error.value) == f"{tmp_path}/test_batch: expected a pickled dict, got list"
    x = np.arange(3072, dtype=np.uint8)[None]  # str keys, as a Python 3 pickle of str keys has them
    (tmp_path / "test_batch").write_bytes(pickle.dumps({"data": x, "labels": [1]}))
    ds = cifar10(tmp_path)
    assert ds.test_x.shape == (1, 3, 32, 32) and np.array_equal(ds.test_x.reshape(1, -1).numpy(), x)
    assert ds.test_y.tolist() == [1]
    (tmp_path / "batches.meta").write_bytes(b"zzz")
    with pytest.raises(CorruptDataError) as error:
        cifar10(tmp_path)
    assert str(error.value) == (
        f"{tmp_path}/batches.meta: not a readable CIFAR pickle (UnpicklingError: invalid load key, 'z'.)"
    )


@pytest.mark.usefixtures("_private_cache_2")
@pytest.mark.parametrize(
    "batch, message",
    [
        (
            {b"data": np.zeros((2, 3072), np.uint8)},
            "a CIFAR-10 batch needs 'data' and 'labels', found keys ['data']",
        ),
        ({b"labels": [0]}, "a CIFAR-10 batch needs 'data' and 'labels', found keys ['labels']"),
        (
            {b"data": np.zeros((2, 10), np.uint8), b"labels": [0, 1]},
            "'data' must be a uint8 array of shape (n, 3072), got (2, 10)",
        ),
        (
            {b"data": np.zeros((2, 3072)), b"labels": [0, 1]},
            "'data' must be a uint8 array of shape (n, 3072), got (2, 3072)",
        ),
        (
            {b"data": np.zeros(3072, np.uint8), b"labels": [0]},
            "'data' must be a uint8 array of shape (n, 3072), got (3072,)",
        ),
        ({b"data": [1, 2], b"labels": [0]}, "'data' must be a uint8 array of shape (n, 3072), got None"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}, "(1,) labels of type int64 for 2 images"),
        (
            {b"data": np.zeros((2, 3072), np.uint8), b"labels": [0.0, 1.0]},
            "(2,) labels of type float64 for 2 images",
        ),
    ],
)
def test_cifar10_a_malformed_batch_is_named_exactly(tmp_path, batch, message):
    _pickles(tmp_path)
    (tmp_path / "data_batch_4").write_bytes(pickle.dumps(batch, protocol=2))
    with pytest.raises(CorruptDataError) as error:
        cifar10(tmp_path)
    assert str(error.value) == f"{tmp_path}/data_batch_4: {message}"


@pytest.mark.usefixtures("_private_cache_2")
def test_cifar10_image_folder_values_and_description(tmp_path, monkeypatch):
    folder = tmp_path / "cifar10"
    pixels = _png_folder(folder)
    monkeypatch.setenv("MEANFIELD_DATA", str(tmp_path))  # root=None: the default root
    ds = cifar10()
    assert ds.description == (
        f"CIFAR-10 from folder {folder} (images by class, train/<class>/*.png): train 2, test 1 images of 2×3, "
        "3 channel(s), 2 classes"
    )
    assert ds.classes == ["a", "b"] and ds.train_y.tolist() == [0, 1] and ds.test_y.tolist() == [1]
    assert np.array_equal(
        ds.train_x.numpy(), np.stack([pixels["train/a/0"], pixels["train/b/0"]]).transpose(0, 3, 1, 2)
    )
    assert np.array_equal(ds.test_x[0].numpy(), pixels["test/b/0"].transpose(2, 0, 1))
    assert ds.lossy is False and ds.train_x.dtype == torch.uint8 and ds.train_y.dtype == torch.int64


@pytest.mark.usefixtures("_private_cache_2")
def test_cifar10_jpeg_folder_carries_the_caveat(tmp_path):
    _png_folder(tmp_path, ".jpg", "JPEG")
    ds = cifar10(tmp_path)
    assert ds.lossy is True
    assert ds.description == (
        f"CIFAR-10 from folder {tmp_path} (images by class, train/<class>/*.jpg): train 2, test 1 images of 2×3, "
        "3 channel(s), 2 classes; CAVEAT: a lossy JPEG copy, not pixel-exact: the pixels differ from the canonical "
        "CIFAR-10 ones, so results are not exactly comparable with those on the original data"
    )


@pytest.mark.usefixtures("_private_cache_2")
def test_cifar10_grey_folder_has_one_channel(tmp_path):
    _png_folder(tmp_path, shape=(2, 3))
    assert cifar10(tmp_path).description.endswith("images of 2×3, 1 channel(s), 2 classes")


@pytest.mark.usefixtures("_private_cache_2")
def test_cifar10_empty_image_folder_names_it(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "test").mkdir()
    with pytest.raises(CorruptDataError) as error:
        cifar10(tmp_path)
    assert str(error.value) == (
        f"{tmp_path}: no images under train/<class>/ and test/<class>/ "
        "(expected train/<class>/*.jpg|png and test/<class>/*.jpg|png)"
    )


@pytest.mark.usefixtures("_private_cache_2")
def test_cifar10_image_archive_names_a_bad_member(tmp_path):
    src = tmp_path / "src"
    pixels = _png_folder(src)
    archive = _tar_of(src, tmp_path / "imgs.tar.gz", arc="top/")
    ds = cifar10(archive)
    assert ds.description.startswith(
        f"CIFAR-10 from archive {archive} (images by class, train/<class>/*.png): train 2, test 1 images of 2×3, "
    )
    assert np.array_equal(ds.test_x[0].numpy(), pixels["test/b/0"].transpose(2, 0, 1))
    (src / "train" / "a" / "0.png").write_bytes(b"not a png")
    archive = _tar_of(src, tmp_path / "bad.tar", arc="top/")
    with pytest.raises(CorruptDataError) as error:
        cifar10(archive)
    assert str(error.value).startswith(
        f"{archive}:top/train/a/0.png: undecodable image (UnidentifiedImageError: "
    )


@pytest.mark.usefixtures("_private_cache_2")
def test_cifar10_archive_of_pickles_at_its_top_level_and_a_bad_one(tmp_path):
    batches = _pickles(tmp_path / "src", names=["a", "b", "c"])
    archive = _tar_of(tmp_path / "src", tmp_path / "flat.tar")  # data_batch_1 … at the top, no folder
    ds = cifar10(archive, cache=False)
    assert ds.train_y.tolist() == [y for i in range(1, 6) for y in batches[f"data_batch_{i}"][1]]
    assert ds.description == (
        f"CIFAR-10 from archive {archive} (cifar-10-batches-py pickles): train 10, test 2 images of 32×32, "
        "3 channel(s), 3 classes"
    )
    (tmp_path / "src" / "data_batch_2").write_bytes(b"zzz")
    archive = _tar_of(tmp_path / "src", tmp_path / "bad.tar")
    with pytest.raises(CorruptDataError) as error:
        cifar10(archive, cache=False)
    assert (
        str(error.value)
        == f"{archive}/data_batch_2: not a readable CIFAR pickle (UnpicklingError: invalid load key, 'z'.)"
    )


@pytest.mark.usefixtures("_private_cache_2")
def test_cifar10_reads_its_cache_entry_and_checks_its_labels(tmp_path):
    archive = _cached_archive(tmp_path, [2, 0])
    ds = cifar10(archive)
    assert ds.train_y.tolist() == [2, 0] and ds.classes == ["a", "b", "c"]
    assert ds.description == (
        f"CIFAR-10 from archive {archive} (hand-written): train 2, test 1 images of 2×2, 3 channel(s), 3 classes; "
        f"decoded tensors read from the cache {_cache.cache_file('cifar10', archive, 1)}"
    )
    assert cifar10(archive, cache=False).train_y.shape == (10,)  # cache=False: decoded again
    ds = cifar10(_cached_archive(tmp_path, [2, 0], test_y=()))  # an empty split has no label to check
    assert ds.test_x.shape == (0, 3, 2, 2) and ds.description.startswith("CIFAR-10 from archive")
    archive = _cached_archive(tmp_path, [1, 3])
    with pytest.raises(CorruptDataError) as error:
        cifar10(archive)
    assert str(error.value) == f"archive {archive}: train label 3 outside 0…2"


@pytest.mark.usefixtures("_private_cache_2")
def test_cifar10_a_negative_label_is_the_one_named(tmp_path):
    archive = _cached_archive(tmp_path, [2, -1])
    with pytest.raises(CorruptDataError) as error:
        cifar10(archive)
    assert str(error.value) == f"archive {archive}: train label -1 outside 0…2"


@pytest.mark.usefixtures("_private_cache_2")
def test_folder_kind_needs_both_train_and_test(tmp_path):
    (tmp_path / "train" / "a").mkdir(parents=True)
    assert cifar.folder_kind(tmp_path) is None
    (tmp_path / "test").mkdir()
    assert cifar.folder_kind(tmp_path) == "images"
    (tmp_path / "data_batch_1").write_bytes(b"")
    assert cifar.folder_kind(tmp_path) == "pickles"  # the pickles first
    assert cifar.folder_kind(tmp_path / "nowhere") is None and cifar.archives_in(tmp_path / "nowhere") == []


@pytest.mark.usefixtures("_private_cache_2")
def test_cifar10_py2_style_pickle_of_numpy_core_is_read(tmp_path):
    """Batches written by old numpy name ``numpy.core.multiarray``; it is read as ``numpy._core`` where that is
    the module's name now."""
    batches = _pickles(tmp_path)
    x, y = batches["data_batch_3"]
    raw = pickle.dumps({b"data": x, b"labels": y}, protocol=2)
    (tmp_path / "data_batch_3").write_bytes(
        raw.replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
    )
    assert b"cnumpy.core.multiarray\n" in (tmp_path / "data_batch_3").read_bytes()
    ds = cifar10(tmp_path)
    assert np.array_equal(ds.train_x[4:6].reshape(2, -1).numpy(), x) and ds.train_y[4:6].tolist() == y


@pytest.mark.usefixtures("_private_cache_2")
def test_cifar10_meta_written_by_python2_with_utf8_names(tmp_path):
    """Python 2 pickled ``str`` as byte strings (SHORT_BINSTRING); they are read as bytes and decoded as UTF-8."""
    _pickles(tmp_path)
    name = "é".encode()  # two bytes, not ASCII
    meta = (
        b"\x80\x02}(U\x0blabel_names](U\x01xU" + bytes([len(name)]) + name + b"eu."
    )  # {'label_names': ['x', 'é']}
    (tmp_path / "batches.meta").write_bytes(meta)
    with pytest.raises(
        CorruptDataError, match="label 2 outside 0…1"
    ):  # the labels go up to 2: names are read
        cifar10(tmp_path)
    meta = meta.replace(b"](U\x01x", b"](U\x01xU\x01y")  # {'label_names': ['x', 'y', 'é']}
    (tmp_path / "batches.meta").write_bytes(meta)
    assert cifar10(tmp_path).classes == ["x", "y", "é"]
