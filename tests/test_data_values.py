"""meanfield.data, value by value: every message, path, name and note of the loaders' helpers checked against a
text written out here (not built with the code's own format strings), on tiny files written in ``tmp_path``;
numpy, hashlib, gzip and Pillow as the references for what is read back. Each check has a negative control
where one makes sense (the neighbouring case that must give the other answer).

These tests kill the mutants that survived ``tests/test_data.py`` (docs/testing.md, issue 25)."""

from __future__ import annotations

import gzip
import hashlib
import importlib
import io
import os
import pickle
import tarfile
import warnings
from pathlib import Path, PurePosixPath

import numpy as np
import pytest
import torch

from meanfield import data
from meanfield.data import (
    SOURCES,
    CorruptDataError,
    DataNotFoundError,
    DatasetInfo,
    FileInfo,
    TokenCorpus,
    _cache,
    _errors,
    _paths,
    catalog,
    cifar,
    cifar10,
    fashion,
    fashion_mnist,
    format_catalog,
    imagefolder,
    inventory,
    read_idx,
    tiny_shakespeare,
    wikitext2,
)

TAIL = "Then pass root=<folder> (the dataset's folder or its parent) or set MEANFIELD_DATA."
"""The last line of every not-found message, written out."""


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Decoded archives are cached in the test's own folder, never in ~/.cache; the default data folder is an
    empty one (a test that wants another sets it), so that no test depends on what data this machine has."""
    monkeypatch.setenv("MEANFIELD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MEANFIELD_DATA", str(tmp_path / "no-default-data"))


def _trampolined(module, name: str) -> bool:
    """Whether ``module.name`` runs behind mutmut's trampoline (inside ``mutmut run``): two more stack frames
    (its wrapper and the trampoline) between the function's body and its caller."""
    return hasattr(module, f"x_{name}__mutmut_orig")


def _pointed_at(module, name: str, line: int) -> tuple[str, int | None]:
    """Where a warning with ``stacklevel=3`` raised in ``module.name`` must point when ``name`` is called from
    a function of this file that is itself called from ``line`` of this file: that line (the caller of the
    loader); behind mutmut's trampoline, stack level 3 is the trampoline's wrapper (the same level)."""
    if _trampolined(module, name):
        import mutmut.mutation.trampoline as trampoline

        return trampoline.__file__, None
    return __file__, line


def _where(w, module, name: str) -> tuple[str, int | None]:
    return (w.filename, None) if _trampolined(module, name) else (w.filename, w.lineno)


# ======================================================================================================
# _cache


def test_cache_dir_meanfield_cache_then_xdg_then_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("MEANFIELD_CACHE", "~/mine")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _cache.cache_dir() == home / "mine"  # MEANFIELD_CACHE first, with ~ expanded
    monkeypatch.setenv("MEANFIELD_CACHE", "")  # empty: as if unset
    assert _cache.cache_dir() == tmp_path / "xdg" / "meanfield"
    monkeypatch.delenv("MEANFIELD_CACHE")
    assert _cache.cache_dir() == tmp_path / "xdg" / "meanfield"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert _cache.cache_dir() == home / ".cache" / "meanfield"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert _cache.cache_dir() == home / ".cache" / "meanfield"
    assert str(_cache.cache_dir()) == os.path.join(str(home), ".cache", "meanfield")  # case and all
    assert data.cache_dir is _cache.cache_dir


def test_cache_file_is_keyed_by_name_size_mtime_and_version(tmp_path):
    archive = tmp_path / "a-cifar.tar"
    archive.write_bytes(b"x" * 123)
    os.utime(archive, ns=(5, 1_700_000_000_123_456_789))
    path = _cache.cache_file("cifar10", archive, 7)
    assert path == tmp_path / "cache" / "cifar10-a-cifar.tar-123-1700000000123456789-v7.pt"
    os.utime(archive, ns=(5, 1_700_000_000_123_456_790))  # negative control: another mtime, another file
    assert (
        _cache.cache_file("cifar10", archive, 7).name == "cifar10-a-cifar.tar-123-1700000000123456790-v7.pt"
    )


def _load_via_a_loader(path, version):
    return _cache.load_cached(path, version)


def _save_via_a_loader(path, tensors):
    return _cache.save_cached(path, tensors)


def _load_as_a_user(path, version):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = _load_via_a_loader(path, version)  # the line the warning points at
    return out, record


_LOAD_LINE = _load_as_a_user.__code__.co_firstlineno + 3


def _save_as_a_user(path, tensors):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = _save_via_a_loader(path, tensors)  # the line the warning points at
    return out, record


_SAVE_LINE = _save_as_a_user.__code__.co_firstlineno + 3


def test_load_cached_returns_the_dict_or_none_with_a_warning_naming_the_file(tmp_path):
    path = tmp_path / "c.pt"
    assert _load_as_a_user(path, 1) == (None, [])  # no file: None, silently
    x = torch.arange(6).reshape(2, 3)
    torch.save({"version": 1, "x": x, "classes": ["a", "b"]}, path)
    loaded, record = _load_as_a_user(path, 1)
    assert record == [] and loaded["classes"] == ["a", "b"] and loaded["x"].equal(x)

    loaded, record = _load_as_a_user(path, 2)  # another cache format
    assert loaded is None and len(record) == 1 and record[0].category is UserWarning
    assert (
        str(record[0].message)
        == f"ignoring the unreadable cache {path} (ValueError: cache format 1, expected 2)"
    )
    assert _where(record[0], _cache, "load_cached") == _pointed_at(
        _cache, "load_cached", _LOAD_LINE
    )  # the loader's caller

    torch.save({"x": x}, path)  # no version at all
    loaded, record = _load_as_a_user(path, 1)
    assert (
        str(record[0].message)
        == f"ignoring the unreadable cache {path} (ValueError: cache format None, expected 1)"
    )

    path.write_bytes(b"not a torch file")
    loaded, record = _load_as_a_user(path, 1)
    assert loaded is None and len(record) == 1
    assert str(record[0].message).startswith(f"ignoring the unreadable cache {path} (UnpicklingError: ")


@pytest.mark.parametrize("force_full_pickle", [False, True])
def test_load_cached_never_unpickles_arbitrary_objects(tmp_path, monkeypatch, force_full_pickle):
    """A cache holding a class other than tensors and containers is refused even where the environment asks
    torch for full pickle by default (``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``): ``weights_only=True`` is explicit."""
    if force_full_pickle:
        monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    path = tmp_path / "c.pt"
    torch.save({"version": 1, "where": PurePosixPath("/x")}, path)
    loaded, record = _load_as_a_user(path, 1)
    assert loaded is None and len(record) == 1
    assert str(record[0].message).startswith(f"ignoring the unreadable cache {path} (UnpicklingError: ")
    # negative control: torch itself loads it with full pickle
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.load(path, weights_only=False)["where"] == PurePosixPath("/x")


def test_save_cached_writes_atomically_or_warns_and_returns_false(tmp_path):
    path = tmp_path / "sub" / "c.pt"
    x = torch.arange(4)
    ok, record = _save_as_a_user(path, {"version": 3, "x": x})
    assert ok is True and record == []
    assert sorted(p.name for p in path.parent.iterdir()) == ["c.pt"]  # no temporary file left
    saved = torch.load(path, weights_only=True)
    assert saved["version"] == 3 and saved["x"].equal(x)

    blocker = tmp_path / "file"
    blocker.write_text("a file, not a folder")
    bad = blocker / "c.pt"  # its folder cannot be made
    try:
        bad.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        reason = str(error)
    ok, record = _save_as_a_user(bad, {"version": 3, "x": x})
    assert ok is False and len(record) == 1 and record[0].category is UserWarning
    assert (
        str(record[0].message) == f"could not write the cache {bad} ({reason}); the next load decodes again"
    )
    assert _where(record[0], _cache, "save_cached") == _pointed_at(_cache, "save_cached", _SAVE_LINE)


# ======================================================================================================
# _errors


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


def test_sources_name_every_dataset_and_where_to_get_it():
    assert sorted(SOURCES) == ["cifar10", "fashion-mnist", "tinyshakespeare", "wikitext-2"]
    assert "apt-get install dataset-fashion-mnist" in SOURCES["fashion-mnist"]
    assert "wikitext-2-v1.zip" in SOURCES["wikitext-2"]
    assert issubclass(CorruptDataError, ValueError)


# ======================================================================================================
# _paths


def _fake_checkout(tmp_path, monkeypatch, pyproject=True, package=True) -> Path:
    repo = tmp_path / "co" / "repo"
    (repo / "meanfield" / "data").mkdir(parents=True)
    if pyproject:
        (repo / "pyproject.toml").write_text("[project]\n")
    if not package:
        (repo / "meanfield" / "data").rmdir()
        (repo / "meanfield").rmdir()
        (repo / "meanfield_data").mkdir()
        monkeypatch.setattr(_paths, "__file__", str(repo / "meanfield_data" / "x" / "_paths.py"))
    else:
        monkeypatch.setattr(_paths, "__file__", str(repo / "meanfield" / "data" / "_paths.py"))
    return repo


def test_checkout_data_is_the_shared_folder_beside_a_source_checkout(tmp_path, monkeypatch):
    _fake_checkout(tmp_path, monkeypatch)
    assert _paths._checkout_data() == tmp_path / "co" / "shared" / "data"
    assert str(_paths._checkout_data()) == str(tmp_path) + "/co/shared/data"


@pytest.mark.parametrize("pyproject, package", [(False, True), (True, False)])
def test_checkout_data_needs_both_pyproject_and_the_package(tmp_path, monkeypatch, pyproject, package):
    _fake_checkout(tmp_path, monkeypatch, pyproject=pyproject, package=package)
    assert _paths._checkout_data() is None


def test_checkout_data_names_are_case_exact(tmp_path, monkeypatch):
    repo = _fake_checkout(tmp_path, monkeypatch, pyproject=False)
    (repo / "PYPROJECT.TOML").write_text("")  # another file on a case-sensitive file system
    assert _paths._checkout_data() is None


def test_default_root_env_then_data_then_checkout(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEANFIELD_DATA", "~/d")
    assert _paths.default_root() == tmp_path / "home" / "d"  # expanded, whether or not it exists
    monkeypatch.setenv("MEANFIELD_DATA", "rel")
    assert _paths.default_root() == tmp_path / "rel"  # absolute
    monkeypatch.delenv("MEANFIELD_DATA")
    checkout = tmp_path / "shared" / "data"
    monkeypatch.setattr(_paths, "_checkout_data", lambda: checkout)
    assert _paths.default_root() == tmp_path / "data"  # nothing exists: ./data, absolute
    checkout.mkdir(parents=True)
    assert _paths.default_root() == checkout
    (tmp_path / "data").mkdir()
    assert _paths.default_root() == tmp_path / "data"  # ./data first
    monkeypatch.setattr(_paths, "_checkout_data", lambda: None)
    (tmp_path / "data").rmdir()
    assert _paths.default_root() == tmp_path / "data"


def test_candidates_and_locate_in_order(tmp_path, monkeypatch):
    monkeypatch.setenv("MEANFIELD_DATA", str(tmp_path / "d"))
    assert _paths.candidates(tmp_path, ("a", "b/c", "a")) == [tmp_path, tmp_path / "a", tmp_path / "b" / "c"]
    assert _paths.candidates(None, ("a",), (tmp_path / "x",)) == [
        tmp_path / "d",
        tmp_path / "d" / "a",
        tmp_path / "x",
        tmp_path / "x" / "a",
    ]
    (tmp_path / "b" / "c").mkdir(parents=True)
    (tmp_path / "a").mkdir()
    assert (
        _paths.locate("cifar10", tmp_path, ("a", "b/c"), lambda p: p.name == "c", "E") == tmp_path / "b" / "c"
    )
    assert (
        _paths.locate("cifar10", tmp_path, ("a", "b/c"), Path.is_dir, "E") == tmp_path
    )  # the first that fits
    with pytest.raises(DataNotFoundError) as error:
        _paths.locate("cifar10", tmp_path, ("a",), lambda p: False, "the thing")
    assert str(error.value).startswith(
        f"cifar10: expected the thing; looked in:\n  {tmp_path}\n  {tmp_path / 'a'}\nGet"
    )


def test_find_file_first_regular_file(tmp_path):
    (tmp_path / "x.gz").mkdir()  # a folder of that name does not count
    (tmp_path / "x").write_bytes(b"")
    (tmp_path / "y").write_bytes(b"")
    assert _paths.find_file(tmp_path, ("x.gz", "x", "y")) == tmp_path / "x"
    assert _paths.find_file(tmp_path, ("y", "x")) == tmp_path / "y"
    assert _paths.find_file(tmp_path, ("x.gz", "z")) is None


# ======================================================================================================
# imagefolder


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


def _encoded(array: np.ndarray, fmt: str = "PNG", mode: str | None = None) -> bytes:
    from PIL import Image

    image = Image.fromarray(array) if mode is None else Image.fromarray(array).convert(mode)
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


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


def _item(split, cls, file, array, fmt="PNG"):
    return (split, cls, file), f"<{split}/{cls}/{file}>", _encoded(array, fmt)


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


def test_stack_images_rgb_is_channels_first_and_jpeg_lossy():
    rng = np.random.default_rng(5)
    rgb = rng.integers(0, 256, (2, 3, 3), dtype=np.uint8)
    out = imagefolder.stack_images(
        [_item("train", "c", "x.PNG", rgb), _item("test", "c", "y.jpg", rgb, "JPEG")], "W"
    )
    assert out["train_x"].shape == (1, 3, 2, 3) and np.array_equal(out["train_x"][0], rgb.transpose(2, 0, 1))
    assert out["lossy"] is True and out["format"] == "images by class, train/<class>/*.jpg/.png"


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


def _plain_tar(path: Path, members: list[tuple[str, bytes]], folders=()) -> Path:
    with tarfile.open(path, "w") as tar:
        for name in folders:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for name, content in members:
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return path


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


# ======================================================================================================
# fashion


def _idx(array: np.ndarray) -> bytes:
    return (
        bytes([0, 0, 8, array.ndim])
        + np.array(array.shape, ">u4").tobytes()
        + array.astype(np.uint8).tobytes()
    )


def test_read_idx_values_plain_and_gzipped(tmp_path):
    a = np.random.default_rng(6).integers(0, 256, (2, 3, 4), dtype=np.uint8)
    (tmp_path / "x").write_bytes(_idx(a))
    (tmp_path / "x.gz").write_bytes(gzip.compress(_idx(a)))
    for name in ("x", "x.gz"):
        out = read_idx(tmp_path / name, 3)
        assert out.dtype == np.uint8 and out.shape == (2, 3, 4) and np.array_equal(out, a)


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


def test_read_idx_good_one_dimensional_is_the_negative_control(tmp_path):
    path = tmp_path / "labels"
    path.write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x02\x07\x08")
    assert read_idx(path, 1).tolist() == [7, 8]
    path.write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x00")  # the header alone: no labels at all
    out = read_idx(path, 1)
    assert out.shape == (0,) and out.dtype == np.uint8


def test_broken_gzip_is_named(tmp_path):
    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(_idx(np.zeros(50, np.uint8)))[:-10])
    with pytest.raises(CorruptDataError) as error:
        read_idx(path, 1)
    assert str(error.value) == (
        f"{path}: not a complete gzip file (Compressed file ended before the end-of-stream marker was reached)"
    )
    plain = tmp_path / "x.gzip"  # only .gz is gunzipped
    plain.write_bytes(_idx(np.array([4, 5])))
    assert read_idx(plain, 1).tolist() == [4, 5]


FASHION = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
]


def _fashion(folder: Path, n=(1001, 3), side=(2, 3), gz=True) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    arrays = {}
    for split, count in zip(("train", "t10k"), n):
        arrays[f"{split}-images-idx3-ubyte"] = rng.integers(0, 256, (count, *side), dtype=np.uint8)
        arrays[f"{split}-labels-idx1-ubyte"] = rng.integers(0, 10, count, dtype=np.uint8)
    for name, array in arrays.items():
        if gz:
            (folder / f"{name}.gz").write_bytes(gzip.compress(_idx(array)))
        else:
            (folder / name).write_bytes(_idx(array))
    return arrays


@pytest.mark.parametrize("sub", ["fashion-mnist", "fashion_mnist", "FashionMNIST/raw", "."])
def test_fashion_mnist_every_folder_name_and_the_description(tmp_path, sub):
    folder = tmp_path / sub if sub != "." else tmp_path
    arrays = _fashion(folder)
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


def test_fashion_mnist_a_wrong_case_folder_is_not_found(tmp_path):
    _fashion(tmp_path / "FASHION_MNIST")  # negative control for the folder names above
    with pytest.raises(DataNotFoundError):
        fashion_mnist(tmp_path)


def test_fashion_mnist_plain_files_say_so(tmp_path):
    _fashion(tmp_path, n=(2, 1), gz=False)
    assert fashion_mnist(tmp_path).description == (
        f"Fashion-MNIST from {tmp_path} (idx-ubyte files): train 2, test 1 images of 2×3 grey levels, 10 classes"
    )


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
    _fashion(tmp_path, n=(2, 1))
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataNotFoundError) as error:
        fashion_mnist(tmp_path)
    assert str(error.value) == (
        "fashion-mnist: expected t10k-labels-idx1-ubyte or t10k-labels-idx1-ubyte.gz; looked in:\n"
        f"  {tmp_path}\nt10k-labels-idx1-ubyte is missing.\nGet it from {SOURCES['fashion-mnist']}.\n" + TAIL
    )


def test_fashion_mnist_label_count_and_range(tmp_path):
    _fashion(tmp_path, n=(4, 2))
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx(np.array([1, 2, 3]))))
    with pytest.raises(CorruptDataError) as error:
        fashion_mnist(tmp_path)
    assert str(error.value) == (
        f"{tmp_path / 't10k-labels-idx1-ubyte.gz'}: 3 labels for 2 images in {tmp_path / 't10k-images-idx3-ubyte.gz'}"
    )
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx(np.array([9, 9]))))
    assert fashion_mnist(tmp_path).test_y.tolist() == [9, 9]  # negative control: 9 is a class
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx(np.array([3, 10]))))
    with pytest.raises(CorruptDataError) as error:
        fashion_mnist(tmp_path)
    assert str(error.value) == f"{tmp_path / 't10k-labels-idx1-ubyte.gz'}: label 10 outside 0…9"


# ======================================================================================================
# cifar


def _batch_bytes(x: np.ndarray, y: list[int]) -> bytes:
    return pickle.dumps({b"batch_label": b"b", b"data": x, b"labels": y}, protocol=2)


def _pickles(folder: Path, per_batch=2, names=None) -> dict[str, tuple[np.ndarray, list[int]]]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(8)
    out = {}
    for n in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        x = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        y = rng.integers(0, 3, per_batch).tolist()
        (folder / n).write_bytes(_batch_bytes(x, y))
        out[n] = (x, y)
    if names is not None:
        (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": names}, protocol=2))
    return out


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


@pytest.mark.parametrize("meta", [{b"label_names": []}, {b"other": 1}, {b"label_names": "abc"}])
def test_cifar10_meta_without_a_list_of_names(tmp_path, meta):
    _pickles(tmp_path)
    (tmp_path / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    with pytest.raises(CorruptDataError) as error:
        cifar10(tmp_path)
    assert str(error.value) == f"{tmp_path}/batches.meta: no 'label_names' list"


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


def test_cifar10_labels_outside_the_classes_are_named(tmp_path):
    batches = _pickles(tmp_path, names=["a", "b"])  # labels drawn in 0..2, two classes
    assert max(max(y) for _, y in batches.values()) == 2
    with pytest.raises(CorruptDataError) as error:
        cifar10(tmp_path)
    assert str(error.value) == f"{tmp_path}: train label 2 outside 0…1"
    (tmp_path / "batches.meta").write_bytes(pickle.dumps({b"label_names": ["a", "b", "c"]}, protocol=2))
    assert cifar10(tmp_path).classes == ["a", "b", "c"]  # negative control


def test_cifar10_not_found_message(tmp_path):
    with pytest.raises(DataNotFoundError) as error:
        cifar10(tmp_path)
    places = "\n".join(f"  {p}" for p in [tmp_path] + [tmp_path / n for n in cifar.FOLDER_NAMES])
    assert str(error.value) == (
        "cifar10: expected cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}, a folder "
        "train/<class>/*.png|jpg + test/<class>/*, or a *cifar*.tar.gz of either; looked in:\n"
        f"{places}\nGet it from {SOURCES['cifar10']}.\n" + TAIL
    )


def _tar_of(folder: Path, archive: Path, arc: str = "") -> Path:
    with tarfile.open(archive, "w:gz") as tar:
        for child in sorted(folder.iterdir()):
            tar.add(child, arcname=f"{arc}{child.name}")
    return archive


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


# ======================================================================================================
# inventory


def _loader(info: DatasetInfo):
    module, _, name = info.loader.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_catalog_cifar_pickles(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    _pickles(folder, names=["a", "b", "c"])
    info = {i.name: i for i in catalog(tmp_path, hash=False)}["cifar10"]
    assert info.found and info.folder == folder and _loader(info) is data.cifar10
    assert info.note == "cifar-10-batches-py pickles"
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]
    assert [(f.path, f.size) for f in info.files] == [
        (folder / n, (folder / n).stat().st_size) for n in names
    ]
    assert info.searched == [tmp_path] + [tmp_path / n for n in cifar.FOLDER_NAMES]
    assert info.source == SOURCES["cifar10"]


def test_catalog_cifar_image_folder_counts_and_lossy(tmp_path):
    folder = tmp_path / "cifar10"
    for rel in ("train/a/1.png", "train/a/2.png", "test/a/3.png"):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(b"")
    (folder / "train" / "a" / "notes.txt").write_bytes(b"")  # counted, not an image: not lossy
    info = {i.name: i for i in catalog(tmp_path, hash=False)}["cifar10"]
    assert info.found and info.folder == folder and info.files == []
    assert info.note == "folder of 4 images by class (not hashed)"  # negative control: PNG only
    (folder / "test" / "a" / "4.JPG").write_bytes(b"")
    info = {i.name: i for i in catalog(tmp_path, hash=False)}["cifar10"]
    assert info.note == "folder of 5 images by class (not hashed); lossy JPEG images, not pixel-exact"


def test_catalog_cifar_archives_lossy_or_not(tmp_path):
    from PIL import Image

    src = tmp_path / "src"
    for split in ("train", "test"):
        (src / split / "c").mkdir(parents=True)
        Image.fromarray(np.zeros((2, 2, 3), np.uint8)).save(src / split / "c" / "0.jpg")
    folder = tmp_path / "cifar-10"
    folder.mkdir()
    _tar_of(src, folder / "b-cifar.tar.gz")
    _tar_of(src, folder / "c-cifar.tar")
    for split in ("train", "test"):
        (src / split / "c" / "0.jpg").unlink()
        Image.fromarray(np.zeros((2, 2, 3), np.uint8)).save(src / split / "c" / "0.png")
    _tar_of(src, folder / "a-cifar.tar.gz")
    info = {i.name: i for i in catalog(tmp_path, hash=True)}["cifar10"]
    assert info.found and info.folder == folder
    assert [f.path.name for f in info.files] == ["a-cifar.tar.gz", "b-cifar.tar.gz", "c-cifar.tar"]
    assert [f.sha256 for f in info.files] == [
        hashlib.sha256(f.path.read_bytes()).hexdigest() for f in info.files
    ]
    assert [(f.size, f.status) for f in info.files] == [
        (f.path.stat().st_size, "not listed") for f in info.files
    ]
    assert info.note == (
        "archive, decoded and cached on first load; lossy JPEG copy, not pixel-exact (b-cifar.tar.gz, c-cifar.tar)"
    )
    (folder / "b-cifar.tar.gz").unlink()
    (folder / "c-cifar.tar").unlink()
    info = {i.name: i for i in catalog(tmp_path, hash=False)}["cifar10"]
    assert info.note == "archive, decoded and cached on first load"  # negative control: PNG only
    assert inventory._archive_is_lossy(folder / "a-cifar.tar.gz") is False
    (tmp_path / "broken.tar.gz").write_bytes(b"\x1f\x8b junk")
    assert inventory._archive_is_lossy(tmp_path / "broken.tar.gz") is None


def test_catalog_fashion_in_torchvision_layout_and_a_partial_set(tmp_path, monkeypatch):
    monkeypatch.setattr(inventory, "DEBIAN_DATASETS", tmp_path / "no-debian")
    folder = tmp_path / "FashionMNIST" / "raw"
    _fashion(folder, n=(2, 1))
    info = {i.name: i for i in catalog(tmp_path, hash=False)}["fashion-mnist"]
    assert info.found and info.folder == folder and _loader(info) is data.fashion_mnist and info.note == ""
    assert [f.path.name for f in info.files] == [f"{n}.gz" for n in FASHION]
    (folder / "t10k-images-idx3-ubyte.gz").unlink()
    (folder / "t10k-labels-idx1-ubyte.gz").unlink()
    info = {i.name: i for i in catalog(tmp_path, hash=False)}["fashion-mnist"]
    assert info.note == "only 2 of the 4 idx files"


@pytest.mark.parametrize("sub", ["tinyshakespeare", "tiny-shakespeare", "shakespeare_char", "shakespeare"])
def test_catalog_and_loader_find_shakespeare_under_every_name(tmp_path, sub):
    (tmp_path / sub).mkdir()
    (tmp_path / sub / "input.txt").write_text("abcab")
    info = {i.name: i for i in catalog(tmp_path, hash=False)}["tinyshakespeare"]
    assert info.found and info.folder == tmp_path / sub and _loader(info) is data.tiny_shakespeare
    assert [(f.path, f.size) for f in info.files] == [(tmp_path / sub / "input.txt", 5)]
    assert tiny_shakespeare(tmp_path).vocab == ["a", "b", "c"]


def test_catalog_wikitext_note_and_loader(tmp_path):
    (tmp_path / "wikitext-2-v1").mkdir()
    (tmp_path / "wikitext-2-v1" / "wiki.valid.tokens").write_text(" a \n")
    info = catalog(tmp_path, hash=False)[0]
    assert (
        info.name == "wikitext-2"
        and info.folder == tmp_path / "wikitext-2-v1"
        and _loader(info) is data.wikitext2
    )
    assert info.note == "split(s) missing: train, test (load the others with splits=...)"


def test_read_sha256sums_replaces_undecodable_bytes(tmp_path):
    (tmp_path / "SUMS").write_bytes(f"{'1' * 64}  caf\xe9.bin\n{'2' * 64}  ok.bin\n".encode("latin-1"))
    assert inventory.read_sha256sums(tmp_path / "SUMS") == {
        (tmp_path / "caf\ufffd.bin").resolve(): "1" * 64,  # U+FFFD, the replacement character
        (tmp_path / "ok.bin").resolve(): "2" * 64,
    }


def test_read_sha256sums_parses_text_and_binary_lines(tmp_path):
    digest = "AB" * 32
    (tmp_path / "sub").mkdir()
    (tmp_path / "SUMS").write_text(
        f"{digest}  sub/é.bin\n{'cd' * 32} *b.bin\n\nnot a line\n{'e' * 63}  short.bin\n  {'f' * 64}  ./c d.bin  \n",
        encoding="utf-8",
    )
    assert inventory.read_sha256sums(tmp_path / "SUMS") == {
        (tmp_path / "sub" / "é.bin").resolve(): "ab" * 32,
        (tmp_path / "b.bin").resolve(): "cd" * 32,
        (tmp_path / "c d.bin").resolve(): "f" * 64,
    }


def test_sha256_and_git_blob_id_against_hashlib(tmp_path):
    path = tmp_path / "f"
    content = bytes(range(256)) * 5
    path.write_bytes(content)
    assert inventory.sha256(path) == hashlib.sha256(content).hexdigest()
    assert inventory.sha256(path, chunk=7) == hashlib.sha256(content).hexdigest()
    blob = hashlib.sha1(b"blob 1280\x00" + content).hexdigest()
    assert inventory.git_blob_id(path) == blob and inventory.git_blob_id(path, chunk=3) == blob


def test_catalog_status_against_sums_in_root_parent_and_folder(tmp_path):
    folder = tmp_path / "tinyshakespeare"
    folder.mkdir()
    (folder / "input.txt").write_bytes(b"hello")
    good = hashlib.sha256(b"hello").hexdigest()
    (folder / "SHA256SUMS").write_text(f"{good}  input.txt\n")
    info = catalog(tmp_path)[1]
    assert info.files[0].sha256 == good and info.files[0].status == "OK"
    (folder / "SHA256SUMS").write_text(f"{'0' * 64}  input.txt\n")
    assert catalog(tmp_path)[1].files[0].status == "MISMATCH"


def test_catalog_reads_sums_of_the_root_and_of_the_folder_s_parent(tmp_path, monkeypatch):
    monkeypatch.setattr(inventory, "DEBIAN_DATASETS", tmp_path / "no-debian")
    root = tmp_path / "root"
    folder = root / "FashionMNIST" / "raw"
    _fashion(folder, n=(1, 1))
    digest = {n: hashlib.sha256((folder / f"{n}.gz").read_bytes()).hexdigest() for n in FASHION}
    (root / "SHA256SUMS").write_text(f"{digest[FASHION[0]]}  FashionMNIST/raw/{FASHION[0]}.gz\n")
    (root / "FashionMNIST" / "SHA256SUMS").write_text(f"{'0' * 64}  raw/{FASHION[1]}.gz\n")
    (folder / "SHA256SUMS").write_text(f"{digest[FASHION[2]]}  {FASHION[2]}.gz\n")
    info = catalog(root)[2]
    assert info.name == "fashion-mnist" and info.folder == folder
    assert [f.status for f in info.files] == ["OK", "MISMATCH", "OK", "not listed"]
    assert [f.sha256 for f in info.files] == [
        hashlib.sha256(f.path.read_bytes()).hexdigest() for f in info.files
    ]
    unhashed = catalog(root, hash=False)[2]
    assert [(f.sha256, f.status) for f in unhashed.files] == [(None, "not hashed")] * 4


def test_catalog_checks_wikitext_train_against_its_git_blob_id(tmp_path, monkeypatch):
    folder = _wiki(tmp_path / "wikitext-2", {"train.txt": " a \n", "valid.txt": " a \n"})
    blob = hashlib.sha1(b"blob 4\x00 a \n").hexdigest()  # what `git hash-object` prints, by hand
    assert inventory.git_blob_id(folder / "train.txt") == blob
    status = {f.path.name: f.status for f in catalog(tmp_path)[0].files}
    assert status == {"train.txt": "MISMATCH (git blob id)", "valid.txt": "not listed"}
    monkeypatch.setitem(inventory.KNOWN_GIT_BLOBS, ("wikitext-2", "train.txt"), blob)
    status = {f.path.name: f.status for f in catalog(tmp_path)[0].files}
    assert status == {"train.txt": "OK (git blob id)", "valid.txt": "not listed"}
    (folder / "SHA256SUMS").write_text(f"{'0' * 64}  train.txt\n")  # a SHA256SUMS that lists it wins
    assert catalog(tmp_path)[0].files[0].status == "MISMATCH"


def test_size_units():
    sizes = (0, 999, 1000, 1_234_567, 1_000_500, 2_500_000_000, 5 * 10**12)
    assert [inventory._size(n) for n in sizes] == [
        "0 B",
        "999 B",
        "1.0 kB",
        "1.2 MB",
        "1.0 MB",  # 1000.5 kB: over the kB range by a hair, so steps of exactly 1000 matter
        "2.5 GB",
        "5000.0 GB",
    ]


def test_format_catalog_lines():
    infos = [
        DatasetInfo(
            "cifar10", "meanfield.data.cifar10", False, searched=[Path("/a"), Path("/b")], source="S"
        ),
        DatasetInfo(
            "tinyshakespeare",
            "meanfield.data.tiny_shakespeare",
            True,
            Path("/d"),
            files=[
                FileInfo(Path("/d/input.txt"), 1_115_394, "0123456789abcdef0123", "OK"),
                FileInfo(Path("/d/x"), 5),
            ],
            note="N",
        ),
    ]
    assert format_catalog(infos).split("\n") == [
        "dataset          status     where / file",
        "-" * 100,
        "cifar10          missing    looked in /a, /b",
        " " * 27 + " get it: S",
        "tinyshakespeare  found      /d   (meanfield.data.tiny_shakespeare)",
        " " * 27 + " input.txt" + " " * 26 + "   1.1 MB  sha256 0123456789abcdef… OK",
        " " * 27 + " x" + " " * 34 + "      5 B  " + " " * 24 + " not hashed",
        " " * 27 + " note: N",
    ]


# ======================================================================================================
# text


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


def test_wikitext_not_found_names_the_requested_files(tmp_path):
    with pytest.raises(DataNotFoundError) as error:
        wikitext2(tmp_path, splits=("test", "valid"))
    places = "\n".join(f"  {p}" for p in (tmp_path, tmp_path / "wikitext-2", tmp_path / "wikitext-2-v1"))
    assert str(error.value) == (
        "wikitext-2: expected the WikiText-2 split files (wiki.valid.tokens or valid.txt, wiki.test.tokens or "
        f"test.txt); looked in:\n{places}\nGet it from {SOURCES['wikitext-2']}.\n" + TAIL
    )


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


def test_tiny_shakespeare_not_found_message(tmp_path):
    with pytest.raises(DataNotFoundError) as error:
        tiny_shakespeare(tmp_path)
    names = ("tinyshakespeare", "tiny-shakespeare", "shakespeare_char", "shakespeare")
    places = "\n".join(f"  {p}" for p in [tmp_path] + [tmp_path / n for n in names])
    assert str(error.value) == (
        f"tinyshakespeare: expected input.txt; looked in:\n{places}\nGet it from {SOURCES['tinyshakespeare']}.\n"
        + TAIL
    )


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


def test_tiny_shakespeare_empty_file(tmp_path):
    (tmp_path / "input.txt").write_text("")
    with pytest.raises(CorruptDataError) as error:
        tiny_shakespeare(tmp_path)
    assert str(error.value) == f"{tmp_path / 'input.txt'}: the file is empty"


def _wiki(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (folder / name).write_text(content, encoding="utf-8")
    return folder


WIKI = {"wiki.train.tokens": " a b <unk> \n\n", "wiki.valid.tokens": " b c \n", "test.txt": " d a d \n"}


def test_wikitext_ids_vocab_unk_counts_and_description(tmp_path):
    folder = _wiki(tmp_path, WIKI)  # both layouts mixed: the first name of each split that is there
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


def test_wikitext_a_given_vocabulary(tmp_path):
    folder = _wiki(tmp_path, WIKI)
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


@pytest.mark.parametrize("splits", [(), ("train", "dev")])
def test_wikitext_bad_splits(tmp_path, splits):
    with pytest.raises(ValueError) as error:
        wikitext2(tmp_path, splits=splits)
    assert (
        str(error.value) == f"splits must be a non-empty subset of ('train', 'valid', 'test'), got {splits!r}"
    )


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


def test_fashion_mnist_default_root_falls_back_to_the_debian_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("MEANFIELD_DATA", str(tmp_path / "empty"))
    debian = tmp_path / "debian"
    monkeypatch.setattr(fashion, "DEBIAN_DATASETS", debian)
    arrays = _fashion(debian / "fashion-mnist", n=(3, 0))  # an empty test split is allowed
    ds = fashion_mnist()
    assert ds.description == (
        f"Fashion-MNIST from {debian / 'fashion-mnist'} (gzipped idx-ubyte files): train 3, test 0 images of 2×3 "
        "grey levels, 10 classes"
    )
    assert ds.test_x.shape == (0, 1, 2, 3) and ds.test_y.shape == (0,)
    assert ds.train_y.tolist() == arrays["train-labels-idx1-ubyte"].tolist()


@pytest.mark.parametrize("present", ["t10k-images-idx3-ubyte", "train-images-idx3-ubyte"])
def test_fashion_mnist_a_folder_with_either_image_file_is_the_one(tmp_path, present):
    """A folder with only one of the two image files is taken, and the first missing file is named."""
    (tmp_path / "fashion-mnist").mkdir()
    (tmp_path / "fashion-mnist" / present).write_bytes(_idx(np.zeros((1, 2, 2), np.uint8)))
    with pytest.raises(DataNotFoundError) as error:
        fashion_mnist(tmp_path)
    first = "train-labels-idx1-ubyte" if present.startswith("train") else "train-images-idx3-ubyte"
    assert str(error.value) == (
        f"fashion-mnist: expected {first} or {first}.gz; looked in:\n  {tmp_path / 'fashion-mnist'}\n"
        f"{first} is missing.\nGet it from {SOURCES['fashion-mnist']}.\n" + TAIL
    )


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


def test_catalog_when_nothing_is_there(tmp_path, monkeypatch):
    monkeypatch.setattr(inventory, "DEBIAN_DATASETS", tmp_path / "no-debian")
    infos = catalog(tmp_path)
    expected = [
        ("wikitext-2", "meanfield.data.wikitext2", ["wikitext-2", "wikitext-2-v1"]),
        (
            "tinyshakespeare",
            "meanfield.data.tiny_shakespeare",
            ["tinyshakespeare", "tiny-shakespeare", "shakespeare_char", "shakespeare"],
        ),
        (
            "fashion-mnist",
            "meanfield.data.fashion_mnist",
            ["fashion-mnist", "fashion_mnist", "FashionMNIST/raw"],
        ),
        ("cifar10", "meanfield.data.cifar10", ["cifar-10-batches-py", "cifar10-jpeg", "cifar10", "cifar-10"]),
    ]
    assert [(i.name, i.loader, i.found, i.folder, i.files, i.note) for i in infos] == [
        (name, loader, False, None, [], "") for name, loader, _ in expected
    ]
    assert [i.searched for i in infos] == [
        [tmp_path] + [tmp_path / n for n in names] for _, _, names in expected
    ]
    assert [i.source for i in infos] == [SOURCES[name] for name, _, _ in expected]
    assert [_loader(i) for i in infos] == [
        data.wikitext2,
        data.tiny_shakespeare,
        data.fashion_mnist,
        data.cifar10,
    ]


@pytest.mark.parametrize(
    "sub, names",
    [("wikitext-2", ("valid.txt", "test.txt")), ("wikitext-2-v1", ("wiki.valid.tokens", "wiki.test.tokens"))],
)
def test_catalog_wikitext_files_in_either_layout(tmp_path, sub, names):
    folder = _wiki(tmp_path / sub, {names[0]: " a \n", names[1]: " b c \n"})
    info = catalog(tmp_path, hash=False)[0]
    assert info.found and info.folder == folder
    assert [(f.path, f.size) for f in info.files] == [(folder / names[0], 4), (folder / names[1], 6)]
    assert info.note == "split(s) missing: train (load the others with splits=...)"
    _wiki(folder, {"train.txt": ""})
    info = catalog(tmp_path, hash=False)[0]
    assert [f.path.name for f in info.files] == ["train.txt", *names] and info.note == ""


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


def test_cifar10_jpeg_folder_carries_the_caveat(tmp_path):
    _png_folder(tmp_path, ".jpg", "JPEG")
    ds = cifar10(tmp_path)
    assert ds.lossy is True
    assert ds.description == (
        f"CIFAR-10 from folder {tmp_path} (images by class, train/<class>/*.jpg): train 2, test 1 images of 2×3, "
        "3 channel(s), 2 classes; CAVEAT: a lossy JPEG copy, not pixel-exact: the pixels differ from the canonical "
        "CIFAR-10 ones, so results are not exactly comparable with those on the original data"
    )


def test_cifar10_grey_folder_has_one_channel(tmp_path):
    _png_folder(tmp_path, shape=(2, 3))
    assert cifar10(tmp_path).description.endswith("images of 2×3, 1 channel(s), 2 classes")


def test_cifar10_empty_image_folder_names_it(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "test").mkdir()
    with pytest.raises(CorruptDataError) as error:
        cifar10(tmp_path)
    assert str(error.value) == (
        f"{tmp_path}: no images under train/<class>/ and test/<class>/ "
        "(expected train/<class>/*.jpg|png and test/<class>/*.jpg|png)"
    )


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


def test_cifar10_a_negative_label_is_the_one_named(tmp_path):
    archive = _cached_archive(tmp_path, [2, -1])
    with pytest.raises(CorruptDataError) as error:
        cifar10(archive)
    assert str(error.value) == f"archive {archive}: train label -1 outside 0…2"


def test_catalog_default_root_and_the_debian_folder(tmp_path, monkeypatch):
    root, debian = tmp_path / "data", tmp_path / "debian"
    monkeypatch.setenv("MEANFIELD_DATA", str(root))
    monkeypatch.setattr(inventory, "DEBIAN_DATASETS", debian)
    _fashion(debian / "fashion-mnist", n=(1, 1))
    (root / "tinyshakespeare").mkdir(parents=True)
    (root / "tinyshakespeare" / "input.txt").write_bytes(b"abc")
    (root / "SHA256SUMS").write_text(f"{hashlib.sha256(b'abc').hexdigest()}  tinyshakespeare/input.txt\n")
    infos = catalog()
    shakespeare, fashion_info = infos[1], infos[2]
    assert shakespeare.folder == root / "tinyshakespeare" and shakespeare.files[0].status == "OK"
    names = ["fashion-mnist", "fashion_mnist", "FashionMNIST/raw"]
    assert fashion_info.searched == [root] + [root / n for n in names] + [debian] + [
        debian / n for n in names
    ]
    assert fashion_info.folder == debian / "fashion-mnist"
    folder = debian / "fashion-mnist"
    assert [(f.path, f.size) for f in fashion_info.files] == [
        (folder / f"{n}.gz", (folder / f"{n}.gz").stat().st_size) for n in FASHION
    ]
    assert [f.status for f in fashion_info.files] == ["not listed"] * 4
    assert infos[3].searched == [root] + [root / n for n in cifar.FOLDER_NAMES]  # no Debian folder for CIFAR


def test_archive_is_lossy_from_its_first_image(tmp_path):
    """The first image of an archive tells whether it is lossy; a corrupt archive, or one without an image,
    gives None."""
    noise = np.random.default_rng(10).integers(0, 256, 20_000, dtype=np.uint8).tobytes()  # does not compress
    members = [("readme", noise), ("train/c/0.jpg", b"x" * 100)]
    plain = _plain_tar(tmp_path / "a.tar", members)
    good = tmp_path / "a.tar.gz"
    good.write_bytes(gzip.compress(plain.read_bytes()))
    assert inventory._archive_is_lossy(good) is True
    raw = bytearray(good.read_bytes())
    for i in range(10_000, 10_100):  # inside the readme's data, before the image's header
        raw[i] ^= 0xFF
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(bytes(raw))
    assert inventory._archive_is_lossy(bad) is None
    assert inventory._archive_is_lossy(_plain_tar(tmp_path / "none.tar", [("readme", b"r")])) is None


def test_folder_kind_needs_both_train_and_test(tmp_path):
    (tmp_path / "train" / "a").mkdir(parents=True)
    assert cifar.folder_kind(tmp_path) is None
    (tmp_path / "test").mkdir()
    assert cifar.folder_kind(tmp_path) == "images"
    (tmp_path / "data_batch_1").write_bytes(b"")
    assert cifar.folder_kind(tmp_path) == "pickles"  # the pickles first
    assert cifar.folder_kind(tmp_path / "nowhere") is None and cifar.archives_in(tmp_path / "nowhere") == []


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


def test_token_corpus_char_level_encode_and_bad_ids():
    corpus = TokenCorpus(None, None, None, ["a", "b", " "], "D", level="char")
    assert corpus.encode("ab a").tolist() == [0, 1, 2, 0] and corpus.decode([1, 2, 0]) == "b a"
    with pytest.raises(ValueError) as error:
        corpus.encode("abc")
    assert str(error.value) == "token 'c' is not in the vocabulary (3 tokens, no <unk>)"
    with pytest.raises(ValueError) as error:
        corpus.decode([0, 1.5])
    assert str(error.value) == "id 1.5 is not a token id (0 ≤ id < 3)"


def test_token_corpus_decode_refuses_a_negative_id():
    corpus = TokenCorpus(None, None, None, ["a", "b", " "], "D", level="char")
    with pytest.raises(ValueError) as error:
        corpus.decode(torch.tensor([1, -1]))  # not an index from the end
    assert str(error.value) == "id -1 is not a token id (0 ≤ id < 3)"
    assert corpus.decode(torch.tensor([1, 2])) == "b "  # negative control


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


def test_token_corpus_decode_names_an_out_of_range_tensor_id():
    corpus = TokenCorpus(None, None, None, ["a", "b", "c"], "D")
    assert corpus.decode(torch.tensor([2, 0])) == "c a"
    with pytest.raises(ValueError) as error:
        corpus.decode(torch.tensor([0, 3]))
    assert str(error.value) == "id 3 is not a token id (0 ≤ id < 3)"
