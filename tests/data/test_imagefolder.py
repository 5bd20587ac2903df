"""Tests of :mod:`meanfield.data.imagefolder`."""

from __future__ import annotations

import gzip
import io
import tarfile

import numpy as np
import pytest
from helpers.data_files import _plain_tar

from meanfield.data import (
    CorruptDataError,
    imagefolder,
)


@pytest.fixture
def _private_cache(tmp_path, monkeypatch):
    """Decoded archives are cached in the test's own folder, never in ~/.cache; the default data folder is an
    empty one (a test that wants another sets it), so that no test depends on what data this machine has."""
    monkeypatch.setenv("MEANFIELD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MEANFIELD_DATA", str(tmp_path / "no-default-data"))


def _encoded(array: np.ndarray, fmt: str = "PNG", mode: str | None = None) -> bytes:
    from PIL import Image

    image = Image.fromarray(array) if mode is None else Image.fromarray(array).convert(mode)
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


def _item(split, cls, file, array, fmt="PNG"):
    return (split, cls, file), f"<{split}/{cls}/{file}>", _encoded(array, fmt)


@pytest.mark.usefixtures("_private_cache")
@pytest.mark.parametrize(
    "path, key",
    [
        ("train/cat/0001.png", ("train", "cat", "0001.png")),
        ("a/b/test/dog/x.JPG", ("test", "dog", "x.JPG")),
        ("x\\train\\cat\\0.jpeg", ("train", "cat", "0.jpeg")),
        ("train/cat/._0001.png", None),  # hidden: AppleDouble
        ("train/cat/.png", None),
        ("train/cat/.DS_Store", None),
        ("valid/cat/0001.png", None),  # not train/test
        ("cat/0001.png", None),  # too short
        ("train/cat/readme.txt", None),  # not an image
        ("train/0001.png", None),
    ],
)
def test_image_key(path, key):
    assert imagefolder.image_key(path) == key


@pytest.mark.usefixtures("_private_cache")
def test_decode_grey_modes_stay_grey_and_colour_is_rgb():
    rng = np.random.default_rng(3)
    grey = rng.integers(0, 256, (3, 5), dtype=np.uint8)
    out = imagefolder.decode(_encoded(grey), "g.png")  # mode L
    assert out.shape == (3, 5) and out.dtype == np.uint8 and np.array_equal(out, grey)
    wide = rng.integers(0, 256, (3, 5), dtype=np.uint16)  # 16-bit grey (mode I;16), values below 256
    assert np.array_equal(imagefolder.decode(_encoded(wide), "w.png"), wide.astype(np.uint8))
    bits = grey > 127  # mode 1
    assert np.array_equal(
        imagefolder.decode(_encoded(bits), "b.png"), np.where(bits, 255, 0).astype(np.uint8)
    )
    rgb = rng.integers(0, 256, (3, 5, 3), dtype=np.uint8)
    assert np.array_equal(imagefolder.decode(_encoded(rgb), "c.png"), rgb)  # negative control: colour, 3-D
    rgba = np.concatenate([rgb, np.full((3, 5, 1), 9, np.uint8)], axis=2)
    assert np.array_equal(imagefolder.decode(_encoded(rgba), "a.png"), rgb)  # alpha dropped
    with pytest.raises(CorruptDataError) as error:
        imagefolder.decode(b"\x89PNG nope", "x/y.png")
    assert str(error.value).startswith(
        "x/y.png: undecodable image (UnidentifiedImageError: cannot identify image"
    )


@pytest.mark.usefixtures("_private_cache")
def test_stack_images_grey_labels_order_and_format():
    rng = np.random.default_rng(4)
    a = {k: rng.integers(0, 256, (2, 3), dtype=np.uint8) for k in range(5)}
    items = [
        _item("train", "zebra", "b.png", a[0]),
        _item("train", "ant", "b.png", a[1]),
        _item("test", "zebra", "a.png", a[2]),
        _item("train", "zebra", "a.png", a[3]),
        _item("test", "ant", "z.bmp", a[4], "BMP"),
    ]
    out = imagefolder.stack_images(items, "W")
    assert out["classes"] == ["ant", "zebra"] and out["lossy"] is False
    assert out["train_x"].shape == (3, 1, 2, 3) and out["train_x"].dtype == np.uint8
    assert np.array_equal(out["train_x"][:, 0], np.stack([a[1], a[3], a[0]]))  # by class, then file name
    assert out["train_y"].tolist() == [0, 1, 1] and out["train_y"].dtype == np.int64
    assert np.array_equal(out["test_x"][:, 0], np.stack([a[4], a[2]])) and out["test_y"].tolist() == [0, 1]
    assert out["train_x"].flags["C_CONTIGUOUS"]
    assert out["format"] == "images by class, train/<class>/*.bmp/.png"


@pytest.mark.usefixtures("_private_cache")
def test_stack_images_rgb_is_channels_first_and_jpeg_lossy():
    rng = np.random.default_rng(5)
    rgb = rng.integers(0, 256, (2, 3, 3), dtype=np.uint8)
    out = imagefolder.stack_images(
        [_item("train", "c", "x.PNG", rgb), _item("test", "c", "y.jpg", rgb, "JPEG")], "W"
    )
    assert out["train_x"].shape == (1, 3, 2, 3) and np.array_equal(out["train_x"][0], rgb.transpose(2, 0, 1))
    assert out["lossy"] is True and out["format"] == "images by class, train/<class>/*.jpg/.png"


@pytest.mark.usefixtures("_private_cache")
@pytest.mark.parametrize(
    "splits, missing",
    [(("test",), "train/<class>/"), (("train",), "test/<class>/"), ((), "train/<class>/ and test/<class>/")],
)
def test_stack_images_an_empty_split_is_named(splits, missing):
    items = [_item(s, "c", "x.png", np.zeros((2, 2), np.uint8)) for s in splits]
    with pytest.raises(CorruptDataError) as error:
        imagefolder.stack_images(items, "W")
    assert str(error.value) == (
        f"W: no images under {missing} (expected train/<class>/*.jpg|png and test/<class>/*.jpg|png)"
    )


@pytest.mark.usefixtures("_private_cache")
def test_stack_images_extra_test_class_and_size_mismatch():
    z = np.zeros((2, 2), np.uint8)
    with pytest.raises(CorruptDataError) as error:
        imagefolder.stack_images([_item("train", "a", "x.png", z), _item("test", "b", "x.png", z)], "W")
    assert str(error.value) == "W: test classes ['b'] have no train/ folder (train has ['a'])"
    with pytest.raises(CorruptDataError) as error:
        imagefolder.stack_images(
            [_item("train", "a", "x.png", z), _item("test", "a", "y.png", np.zeros((3, 2), np.uint8))], "W"
        )
    assert str(error.value) == (
        "W: test/a/y.png has shape (3, 2), the first image (2, 2): all images must have one size and mode"
    )


@pytest.mark.usefixtures("_private_cache")
def test_stack_images_an_undecodable_image_is_named_by_its_item_name():
    z = np.zeros((2, 2), np.uint8)
    items = [
        _item("train", "a", "x.png", z),
        (("test", "a", "y.png"), "archive.tar:test/a/y.png", b"not a png"),
    ]
    with pytest.raises(CorruptDataError) as error:
        imagefolder.stack_images(items, "W")
    assert str(error.value).startswith(
        "archive.tar:test/a/y.png: undecodable image (UnidentifiedImageError: "
    )


@pytest.mark.usefixtures("_private_cache")
def test_folder_images_sorted_skipping_hidden_and_folders(tmp_path):
    for rel, content in [("test/b/1.png", b"t"), ("train/b/2.png", b"b2"), ("train/a/9.png", b"a9")]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(content)
    (tmp_path / "train" / "a" / ".hidden.png").write_bytes(b"h")
    (tmp_path / "train" / "a" / "sub.png").mkdir()
    (tmp_path / "train" / "a" / "notes.txt").write_bytes(b"n")
    assert list(imagefolder.folder_images(tmp_path)) == [
        (("train", "a", "9.png"), str(tmp_path / "train" / "a" / "9.png"), b"a9"),
        (("train", "b", "2.png"), str(tmp_path / "train" / "b" / "2.png"), b"b2"),
        (("test", "b", "1.png"), str(tmp_path / "test" / "b" / "1.png"), b"t"),
    ]


@pytest.mark.usefixtures("_private_cache")
def test_read_tar_regular_wanted_files_in_archive_order(tmp_path):
    archive = _plain_tar(
        tmp_path / "a.tar",
        [("z/keep1", b"one"), ("skip", b"no"), ("a/keep2", b"two" * 200)],
        folders=["keepdir"],
    )
    assert imagefolder.read_tar(archive, lambda n: "keep" in n) == [
        ("z/keep1", b"one"),
        ("a/keep2", b"two" * 200),
    ]
    gz = tmp_path / "a.tar.gz"
    gz.write_bytes(gzip.compress(archive.read_bytes()))
    assert imagefolder.read_tar(gz, lambda n: n == "skip") == [("skip", b"no")]


@pytest.mark.usefixtures("_private_cache")
def test_read_tar_a_short_member_is_named(tmp_path, monkeypatch):
    """A member that reads back shorter than its header says (CPython's tarfile raises its own error first,
    so the reader is stubbed to return the first 3 bytes)."""
    archive = _plain_tar(tmp_path / "a.tar", [("train/c/x.png", b"0123456789")])
    extract = tarfile.TarFile.extractfile

    def short(self, member):
        return io.BytesIO(extract(self, member).read()[:3])

    monkeypatch.setattr(tarfile.TarFile, "extractfile", short)
    with pytest.raises(CorruptDataError) as error:
        imagefolder.read_tar(archive, lambda n: True)
    assert str(error.value) == (
        f"{archive}: truncated or corrupt archive at or after member train/c/x.png "
        "(ReadError: member train/c/x.png is short: 3 of 10 bytes)"
    )


@pytest.mark.usefixtures("_private_cache")
def test_read_tar_cut_between_members_or_before_any(tmp_path):
    archive = _plain_tar(tmp_path / "a.tar", [("m1", b"a" * 10), ("m2", b"b" * 10)])
    raw = archive.read_bytes()
    archive.write_bytes(raw[: 3 * tarfile.BLOCKSIZE])  # m1 complete (header + one block), m2's header only
    with pytest.raises(CorruptDataError) as error:
        imagefolder.read_tar(archive, lambda n: True)
    assert str(error.value).startswith(f"{archive}: truncated or corrupt archive at or after member ")
    archive.write_bytes(raw[: 2 * tarfile.BLOCKSIZE])  # exactly between m1 and m2: tarfile stops silently
    with pytest.raises(CorruptDataError) as error:
        imagefolder.read_tar(archive, lambda n: True)
    assert str(error.value) == (
        f"{archive}: truncated or corrupt archive at or after member m1 "
        "(ReadError: the archive ends without its end-of-archive block)"
    )
    archive.write_bytes(b"")
    with pytest.raises(CorruptDataError) as error:
        imagefolder.read_tar(archive, lambda n: True)
    assert str(error.value).startswith(
        f"{archive}: truncated or corrupt archive at or after member (start) ("
    )
