"""Tests of :mod:`meanfield.data.fashion`."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.data_files import _need

from meanfield import data
from meanfield.data import (
    SOURCES,
    CorruptDataError,
    DataNotFoundError,
    fashion,
    fashion_mnist,
    read_idx,
)

DEBIAN_FASHION = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture
def _private_cache(tmp_path, monkeypatch):
    """Every test caches decoded archives in its own folder, never in the user's ~/.cache."""
    monkeypatch.setenv("MEANFIELD_CACHE", str(tmp_path / "cache"))


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


@pytest.mark.usefixtures("_private_cache")
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


@pytest.mark.usefixtures("_private_cache")
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


@pytest.mark.usefixtures("_private_cache")
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


@pytest.mark.usefixtures("_private_cache")
def test_fashion_mnist_missing_file_names_it_and_the_package(tmp_path):
    _fashion(tmp_path, gz=True)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataNotFoundError) as error:
        fashion_mnist(tmp_path)
    assert "t10k-labels-idx1-ubyte" in str(error.value) and "dataset-fashion-mnist" in str(error.value)
    with pytest.raises(DataNotFoundError, match="train-images-idx3-ubyte"):
        fashion_mnist(tmp_path / "empty")


@pytest.mark.usefixtures("_private_cache")
def test_fashion_mnist_real_files_and_debian_default(tmp_path, monkeypatch):
    _need(DEBIAN_FASHION)
    monkeypatch.setenv("MEANFIELD_DATA", str(tmp_path))  # nothing there: the default falls back to Debian's
    ds = fashion_mnist()
    assert ds.train_x.shape == (60_000, 1, 28, 28) and ds.test_x.shape == (10_000, 1, 28, 28)
    assert str(DEBIAN_FASHION) in ds.description
    assert torch.bincount(ds.train_y).tolist() == [6_000] * 10  # balanced classes
    z = ds.normalized("train")
    assert z.dtype == torch.float32 and abs(float(z.mean())) < 1e-4 and abs(float(z.std()) - 1) < 1e-4


@pytest.mark.usefixtures("_private_cache")
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


TAIL = "Then pass root=<folder> (the dataset's folder or its parent) or set MEANFIELD_DATA."


@pytest.fixture
def _private_cache_2(tmp_path, monkeypatch):
    """Decoded archives are cached in the test's own folder, never in ~/.cache; the default data folder is an
    empty one (a test that wants another sets it), so that no test depends on what data this machine has."""
    monkeypatch.setenv("MEANFIELD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MEANFIELD_DATA", str(tmp_path / "no-default-data"))


def _idx_2(array: np.ndarray) -> bytes:
    return (
        bytes([0, 0, 8, array.ndim])
        + np.array(array.shape, ">u4").tobytes()
        + array.astype(np.uint8).tobytes()
    )


def _fashion_2(folder: Path, n=(1001, 3), side=(2, 3), gz=True) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    arrays = {}
    for split, count in zip(("train", "t10k"), n):
        arrays[f"{split}-images-idx3-ubyte"] = rng.integers(0, 256, (count, *side), dtype=np.uint8)
        arrays[f"{split}-labels-idx1-ubyte"] = rng.integers(0, 10, count, dtype=np.uint8)
    for name, array in arrays.items():
        if gz:
            (folder / f"{name}.gz").write_bytes(gzip.compress(_idx_2(array)))
        else:
            (folder / name).write_bytes(_idx_2(array))
    return arrays


@pytest.mark.usefixtures("_private_cache_2")
def test_read_idx_values_plain_and_gzipped(tmp_path):
    a = np.random.default_rng(6).integers(0, 256, (2, 3, 4), dtype=np.uint8)
    (tmp_path / "x").write_bytes(_idx_2(a))
    (tmp_path / "x.gz").write_bytes(gzip.compress(_idx_2(a)))
    for name in ("x", "x.gz"):
        out = read_idx(tmp_path / name, 3)
        assert out.dtype == np.uint8 and out.shape == (2, 3, 4) and np.array_equal(out, a)


@pytest.mark.usefixtures("_private_cache_2")
@pytest.mark.parametrize(
    "raw, message",
    [
        (b"", "not an idx file (bad magic number none)"),
        (b"\x00\x00\x08", "not an idx file (bad magic number 000008)"),
        (b"\x01\x00\x08\x01\x00\x00\x00\x00", "not an idx file (bad magic number 01000801)"),
        (b"\x00\x02\x08\x01\x00\x00\x00\x00", "not an idx file (bad magic number 00020801)"),
        (b"\x00\x00\x0d\x01\x00\x00\x00\x00", "idx element type 0x0d, expected 0x08 (unsigned byte)"),
        (b"\x00\x00\x08\x03\x00\x00\x00\x00", "idx array with 3 dimensions, expected 1"),
        (b"\x00\x00\x08\x01\x00\x00", "truncated idx header (6 bytes, expected 8)"),
        (b"\x00\x00\x08\x01", "truncated idx header (4 bytes, expected 8)"),  # a magic number, no size
        (
            b"\x00\x00\x08\x01\x00\x00\x00\x03\x07\x08",
            "idx data of 2 bytes, expected 3 for shape (3,) (truncated)",
        ),
        (b"\x00\x00\x08\x01\x00\x00\x00\x01\x07\x08", "idx data of 2 bytes, expected 1 for shape (1,)"),
    ],
)
def test_read_idx_damage_is_named_exactly(tmp_path, raw, message):
    path = tmp_path / "labels"
    path.write_bytes(raw)
    with pytest.raises(CorruptDataError) as error:
        read_idx(path, 1)
    assert str(error.value) == f"{path}: {message}"


@pytest.mark.usefixtures("_private_cache_2")
def test_read_idx_good_one_dimensional_is_the_negative_control(tmp_path):
    path = tmp_path / "labels"
    path.write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x02\x07\x08")
    assert read_idx(path, 1).tolist() == [7, 8]
    path.write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x00")  # the header alone: no labels at all
    out = read_idx(path, 1)
    assert out.shape == (0,) and out.dtype == np.uint8


@pytest.mark.usefixtures("_private_cache_2")
def test_broken_gzip_is_named(tmp_path):
    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(_idx_2(np.zeros(50, np.uint8)))[:-10])
    with pytest.raises(CorruptDataError) as error:
        read_idx(path, 1)
    assert str(error.value) == (
        f"{path}: not a complete gzip file (Compressed file ended before the end-of-stream marker was reached)"
    )
    plain = tmp_path / "x.gzip"  # only .gz is gunzipped
    plain.write_bytes(_idx_2(np.array([4, 5])))
    assert read_idx(plain, 1).tolist() == [4, 5]


@pytest.mark.usefixtures("_private_cache_2")
@pytest.mark.parametrize("sub", ["fashion-mnist", "fashion_mnist", "FashionMNIST/raw", "."])
def test_fashion_mnist_every_folder_name_and_the_description(tmp_path, sub):
    folder = tmp_path / sub if sub != "." else tmp_path
    arrays = _fashion_2(folder)
    ds = fashion_mnist(tmp_path)
    assert ds.description == (
        f"Fashion-MNIST from {folder} (gzipped idx-ubyte files): train 1,001, test 3 images of 2×3 grey levels, "
        "10 classes"
    )
    assert ds.train_x.shape == (1001, 1, 2, 3) and ds.train_x.dtype == torch.uint8
    assert np.array_equal(ds.test_x[:, 0].numpy(), arrays["t10k-images-idx3-ubyte"])
    assert (
        ds.train_y.dtype == torch.int64 and ds.train_y.tolist() == arrays["train-labels-idx1-ubyte"].tolist()
    )
    assert ds.classes == list(data.FASHION_CLASSES) and ds.lossy is False


@pytest.mark.usefixtures("_private_cache_2")
def test_fashion_mnist_a_wrong_case_folder_is_not_found(tmp_path):
    _fashion_2(tmp_path / "FASHION_MNIST")  # negative control for the folder names above
    with pytest.raises(DataNotFoundError):
        fashion_mnist(tmp_path)


@pytest.mark.usefixtures("_private_cache_2")
def test_fashion_mnist_plain_files_say_so(tmp_path):
    _fashion_2(tmp_path, n=(2, 1), gz=False)
    assert fashion_mnist(tmp_path).description == (
        f"Fashion-MNIST from {tmp_path} (idx-ubyte files): train 2, test 1 images of 2×3 grey levels, 10 classes"
    )


@pytest.mark.usefixtures("_private_cache_2")
def test_fashion_mnist_not_found_and_a_missing_file_messages(tmp_path):
    with pytest.raises(DataNotFoundError) as error:
        fashion_mnist(tmp_path)
    places = "".join(
        f"  {p}\n" for p in [tmp_path] + [tmp_path / n for n in ("fashion-mnist", "fashion_mnist")]
    )
    places += f"  {tmp_path}/FashionMNIST/raw\n"
    assert str(error.value) == (
        "fashion-mnist: expected train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
        f"t10k-labels-idx1-ubyte (each optionally .gz); looked in:\n{places}"
        f"Get it from {SOURCES['fashion-mnist']}.\n" + TAIL
    )
    _fashion_2(tmp_path, n=(2, 1))
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataNotFoundError) as error:
        fashion_mnist(tmp_path)
    assert str(error.value) == (
        "fashion-mnist: expected t10k-labels-idx1-ubyte or t10k-labels-idx1-ubyte.gz; looked in:\n"
        f"  {tmp_path}\nt10k-labels-idx1-ubyte is missing.\nGet it from {SOURCES['fashion-mnist']}.\n" + TAIL
    )


@pytest.mark.usefixtures("_private_cache_2")
def test_fashion_mnist_label_count_and_range(tmp_path):
    _fashion_2(tmp_path, n=(4, 2))
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx_2(np.array([1, 2, 3]))))
    with pytest.raises(CorruptDataError) as error:
        fashion_mnist(tmp_path)
    assert str(error.value) == (
        f"{tmp_path / 't10k-labels-idx1-ubyte.gz'}: 3 labels for 2 images in {tmp_path / 't10k-images-idx3-ubyte.gz'}"
    )
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx_2(np.array([9, 9]))))
    assert fashion_mnist(tmp_path).test_y.tolist() == [9, 9]  # negative control: 9 is a class
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx_2(np.array([3, 10]))))
    with pytest.raises(CorruptDataError) as error:
        fashion_mnist(tmp_path)
    assert str(error.value) == f"{tmp_path / 't10k-labels-idx1-ubyte.gz'}: label 10 outside 0…9"


@pytest.mark.usefixtures("_private_cache_2")
def test_fashion_mnist_default_root_falls_back_to_the_debian_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("MEANFIELD_DATA", str(tmp_path / "empty"))
    debian = tmp_path / "debian"
    monkeypatch.setattr(fashion, "DEBIAN_DATASETS", debian)
    arrays = _fashion_2(debian / "fashion-mnist", n=(3, 0))  # an empty test split is allowed
    ds = fashion_mnist()
    assert ds.description == (
        f"Fashion-MNIST from {debian / 'fashion-mnist'} (gzipped idx-ubyte files): train 3, test 0 images of 2×3 "
        "grey levels, 10 classes"
    )
    assert ds.test_x.shape == (0, 1, 2, 3) and ds.test_y.shape == (0,)
    assert ds.train_y.tolist() == arrays["train-labels-idx1-ubyte"].tolist()


@pytest.mark.usefixtures("_private_cache_2")
@pytest.mark.parametrize("present", ["t10k-images-idx3-ubyte", "train-images-idx3-ubyte"])
def test_fashion_mnist_a_folder_with_either_image_file_is_the_one(tmp_path, present):
    """A folder with only one of the two image files is taken, and the first missing file is named."""
    (tmp_path / "fashion-mnist").mkdir()
    (tmp_path / "fashion-mnist" / present).write_bytes(_idx_2(np.zeros((1, 2, 2), np.uint8)))
    with pytest.raises(DataNotFoundError) as error:
        fashion_mnist(tmp_path)
    first = "train-labels-idx1-ubyte" if present.startswith("train") else "train-images-idx3-ubyte"
    assert str(error.value) == (
        f"fashion-mnist: expected {first} or {first}.gz; looked in:\n  {tmp_path / 'fashion-mnist'}\n"
        f"{first} is missing.\nGet it from {SOURCES['fashion-mnist']}.\n" + TAIL
    )
