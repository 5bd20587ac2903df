"""Tests of :mod:`meanfield.data.inventory`."""

from __future__ import annotations

import gzip
import hashlib
import importlib
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers.data_files import SHARED, _need, _pickles, _plain_tar, _tar_of, _wiki, _wikitext

from meanfield import data
from meanfield.data import (
    SOURCES,
    DatasetInfo,
    FileInfo,
    catalog,
    cifar,
    format_catalog,
    inventory,
    tiny_shakespeare,
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


@pytest.mark.usefixtures("_private_cache")
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


@pytest.mark.usefixtures("_private_cache")
def test_catalog_of_the_shared_data():
    _need(SHARED / "SHA256SUMS")
    infos = {i.name: i for i in catalog(SHARED)}
    listed = [f for i in infos.values() for f in i.files if f.status != "not listed"]
    assert len(listed) == 4 and all(f.status == "OK" for f in listed), format_catalog(list(infos.values()))
    assert "lossy" in infos["cifar10"].note and "train" in infos["wikitext-2"].note


@pytest.fixture
def _private_cache_2(tmp_path, monkeypatch):
    """Decoded archives are cached in the test's own folder, never in ~/.cache; the default data folder is an
    empty one (a test that wants another sets it), so that no test depends on what data this machine has."""
    monkeypatch.setenv("MEANFIELD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MEANFIELD_DATA", str(tmp_path / "no-default-data"))


def _idx(array: np.ndarray) -> bytes:
    return (
        bytes([0, 0, 8, array.ndim])
        + np.array(array.shape, ">u4").tobytes()
        + array.astype(np.uint8).tobytes()
    )


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


def _loader(info: DatasetInfo):
    module, _, name = info.loader.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.usefixtures("_private_cache_2")
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


@pytest.mark.usefixtures("_private_cache_2")
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


@pytest.mark.usefixtures("_private_cache_2")
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


@pytest.mark.usefixtures("_private_cache_2")
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


@pytest.mark.usefixtures("_private_cache_2")
@pytest.mark.parametrize("sub", ["tinyshakespeare", "tiny-shakespeare", "shakespeare_char", "shakespeare"])
def test_catalog_and_loader_find_shakespeare_under_every_name(tmp_path, sub):
    (tmp_path / sub).mkdir()
    (tmp_path / sub / "input.txt").write_text("abcab")
    info = {i.name: i for i in catalog(tmp_path, hash=False)}["tinyshakespeare"]
    assert info.found and info.folder == tmp_path / sub and _loader(info) is data.tiny_shakespeare
    assert [(f.path, f.size) for f in info.files] == [(tmp_path / sub / "input.txt", 5)]
    assert tiny_shakespeare(tmp_path).vocab == ["a", "b", "c"]


@pytest.mark.usefixtures("_private_cache_2")
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


@pytest.mark.usefixtures("_private_cache_2")
def test_read_sha256sums_replaces_undecodable_bytes(tmp_path):
    (tmp_path / "SUMS").write_bytes(f"{'1' * 64}  caf\xe9.bin\n{'2' * 64}  ok.bin\n".encode("latin-1"))
    assert inventory.read_sha256sums(tmp_path / "SUMS") == {
        (tmp_path / "caf\ufffd.bin").resolve(): "1" * 64,  # U+FFFD, the replacement character
        (tmp_path / "ok.bin").resolve(): "2" * 64,
    }


@pytest.mark.usefixtures("_private_cache_2")
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


@pytest.mark.usefixtures("_private_cache_2")
def test_sha256_and_git_blob_id_against_hashlib(tmp_path):
    path = tmp_path / "f"
    content = bytes(range(256)) * 5
    path.write_bytes(content)
    assert inventory.sha256(path) == hashlib.sha256(content).hexdigest()
    assert inventory.sha256(path, chunk=7) == hashlib.sha256(content).hexdigest()
    blob = hashlib.sha1(b"blob 1280\x00" + content).hexdigest()
    assert inventory.git_blob_id(path) == blob and inventory.git_blob_id(path, chunk=3) == blob


@pytest.mark.usefixtures("_private_cache_2")
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


@pytest.mark.usefixtures("_private_cache_2")
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


@pytest.mark.usefixtures("_private_cache_2")
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


@pytest.mark.usefixtures("_private_cache_2")
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


@pytest.mark.usefixtures("_private_cache_2")
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


@pytest.mark.usefixtures("_private_cache_2")
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


@pytest.mark.usefixtures("_private_cache_2")
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


@pytest.mark.usefixtures("_private_cache_2")
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


@pytest.mark.usefixtures("_private_cache_2")
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
