"""What data is where: the known datasets, their files, sizes and SHA-256 checks (``meanfield data``)."""

from __future__ import annotations

import hashlib
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from ._errors import SOURCES
from ._paths import DEBIAN_DATASETS, candidates, default_root, find_file
from .cifar import FOLDER_NAMES as CIFAR_FOLDERS
from .cifar import PICKLE_META, PICKLE_TEST, PICKLE_TRAIN, archives_in, folder_kind
from .fashion import FASHION_FILES
from .imagefolder import IMAGE_SUFFIXES, image_key
from .text import SPLITS, WIKITEXT_FILES

__all__ = [
    "KNOWN_GIT_BLOBS",
    "DatasetInfo",
    "FileInfo",
    "catalog",
    "format_catalog",
    "git_blob_id",
    "read_sha256sums",
    "sha256",
]

SUMS_NAME = "SHA256SUMS"
KNOWN_GIT_BLOBS: dict[tuple[str, str], str] = {
    ("wikitext-2", "train.txt"): "2d84b35af79e411d73ea7cae83c73964c6ac83b4",
}
"""(dataset, file name) → git blob id of the official file, checked when no ``SHA256SUMS`` lists it. The
WikiText-2 ``train.txt`` id is that of the PyTorch example's copy (from ``../shared/data/README.md``)."""


@dataclass
class FileInfo:
    """One data file.

    Attributes:
        path: where it is.
        size: its size in bytes.
        sha256: its SHA-256 (hex), or ``None`` when not hashed.
        status: ``"OK"`` / ``"MISMATCH"`` against a ``SHA256SUMS`` that lists it, ``"OK (git blob id)"`` /
            ``"MISMATCH (git blob id)"`` against a known official git blob id, ``"not listed"``, or
            ``"not hashed"``.
    """

    path: Path
    size: int
    sha256: str | None = None
    status: str = "not hashed"


@dataclass
class DatasetInfo:
    """Whether a known dataset was found, where, and its files.

    Attributes:
        name: the dataset's conventional folder name (``wikitext-2``, ``tinyshakespeare``, ``fashion-mnist``,
            ``cifar10``).
        loader: the function that loads it, e.g. ``"meanfield.data.wikitext2"``.
        found: whether its folder (or archive) was found.
        folder: where, or ``None``.
        files: its files (sizes and checksums).
        note: caveats: a missing split, a lossy copy.
        searched: the folders looked in.
        source: where to get it.
    """

    name: str
    loader: str
    found: bool
    folder: Path | None = None
    files: list[FileInfo] = field(default_factory=list)
    note: str = ""
    searched: list[Path] = field(default_factory=list)
    source: str = ""


def sha256(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """The SHA-256 of a file, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def git_blob_id(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """The git blob id of a file (what ``git hash-object`` prints): ``sha1(b"blob <size>\\0" + content)``, hex."""
    path = Path(path)
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def read_sha256sums(path: str | os.PathLike) -> dict[Path, str]:
    """Parse a ``sha256sum`` output file: resolved absolute path → lower-case hex digest.

    Each line is ``<hex>  <path>`` (``<hex> *<path>`` in binary mode), the path relative to the file's
    folder; other lines are skipped.
    """
    path = Path(path)
    sums: dict[Path, str] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.strip().split(maxsplit=1)
        if len(parts) != 2 or len(parts[0]) != 64:
            continue
        digest, name = parts
        sums[(path.parent / name.lstrip("*")).resolve()] = digest.lower()
    return sums


def _first(folders: list[Path], test) -> Path | None:
    return next((p for p in folders if test(p)), None)


def _wikitext(root: str | os.PathLike | None) -> DatasetInfo:
    tried = candidates(root, ("wikitext-2", "wikitext-2-v1"))
    every = [n for s in SPLITS for n in WIKITEXT_FILES[s]]
    folder = _first(tried, lambda p: find_file(p, every) is not None)
    info = DatasetInfo("wikitext-2", "meanfield.data.wikitext2", folder is not None, folder, searched=tried)
    if folder is not None:
        present = {s: find_file(folder, WIKITEXT_FILES[s]) for s in SPLITS}
        info.files = [FileInfo(p, p.stat().st_size) for p in present.values() if p is not None]
        missing = [s for s, p in present.items() if p is None]
        if missing:
            info.note = f"split(s) missing: {', '.join(missing)} (load the others with splits=...)"
    return info


def _shakespeare(root: str | os.PathLike | None) -> DatasetInfo:
    names = ("tinyshakespeare", "tiny-shakespeare", "shakespeare_char", "shakespeare")
    tried = candidates(root, names)
    folder = _first(tried, lambda p: (p / "input.txt").is_file())
    info = DatasetInfo(
        "tinyshakespeare", "meanfield.data.tiny_shakespeare", folder is not None, folder, searched=tried
    )
    if folder is not None:
        info.files = [FileInfo(folder / "input.txt", (folder / "input.txt").stat().st_size)]
    return info


def _fashion(root: str | os.PathLike | None) -> DatasetInfo:
    tried = candidates(root, ("fashion-mnist", "fashion_mnist", "FashionMNIST/raw"), (DEBIAN_DATASETS,))
    bases = list(FASHION_FILES.values())

    def files(p: Path) -> list[Path]:
        return [f for b in bases if (f := find_file(p, (f"{b}.gz", b))) is not None]

    folder = _first(tried, lambda p: bool(files(p)))
    info = DatasetInfo(
        "fashion-mnist", "meanfield.data.fashion_mnist", folder is not None, folder, searched=tried
    )
    if folder is not None:
        info.files = [FileInfo(p, p.stat().st_size) for p in files(folder)]
        if len(info.files) < len(bases):
            info.note = f"only {len(info.files)} of the {len(bases)} idx files"
    return info


def _archive_is_lossy(archive: Path) -> bool | None:
    """Whether the first image in the archive is in a lossy format (``None``: no image or unreadable)."""
    try:
        with tarfile.open(archive, mode="r|*") as tar:
            for info in tar:
                if info.isfile() and image_key(info.name) is not None:
                    return IMAGE_SUFFIXES[Path(info.name).suffix.lower()]
    except (tarfile.TarError, EOFError, OSError):
        return None
    return None


def _cifar(root: str | os.PathLike | None) -> DatasetInfo:
    tried = candidates(root, CIFAR_FOLDERS)
    folder = _first(tried, lambda p: folder_kind(p) is not None)
    info = DatasetInfo("cifar10", "meanfield.data.cifar10", folder is not None, folder, searched=tried)
    if folder is None:
        return info
    kind = folder_kind(folder)
    if kind == "pickles":
        paths = [folder / n for n in (*PICKLE_TRAIN, PICKLE_TEST, PICKLE_META) if (folder / n).is_file()]
        info.files = [FileInfo(p, p.stat().st_size) for p in paths]
        info.note = "cifar-10-batches-py pickles"
    elif kind == "images":
        images = [p for s in ("train", "test") for p in (folder / s).glob("*/*") if p.is_file()]
        info.note = f"folder of {len(images):,} images by class (not hashed)"
        if any(IMAGE_SUFFIXES.get(p.suffix.lower(), False) for p in images):
            info.note += "; lossy JPEG images, not pixel-exact"
    else:
        info.files = [FileInfo(p, p.stat().st_size) for p in archives_in(folder)]
        lossy = [f.path.name for f in info.files if _archive_is_lossy(f.path)]
        info.note = "archive, decoded and cached on first load"
        if lossy:
            info.note += f"; lossy JPEG copy, not pixel-exact ({', '.join(lossy)})"
    return info


def catalog(root: str | os.PathLike | None = None, *, hash: bool = True) -> list[DatasetInfo]:
    """Which of the known datasets are found where, with their files, sizes and checksums.

    Each dataset is looked for as its loader would (``root`` or [`default_root`][meanfield.data._paths.default_root]; Fashion-MNIST also in
    ``/usr/share/datasets``) without being loaded. With ``hash``, every file's SHA-256 is computed and
    checked against the ``SHA256SUMS`` files (``sha256sum`` format, paths relative to the file) in the root,
    the dataset's folder and its parent: ``OK``, ``MISMATCH`` or ``not listed``; a file no ``SHA256SUMS``
    lists but whose official git blob id is known (`KNOWN_GIT_BLOBS`: WikiText-2's ``train.txt``) is
    checked against it instead (``OK (git blob id)`` / ``MISMATCH (git blob id)``).

    Args:
        root: the data folder (``None``: [`default_root`][meanfield.data._paths.default_root]).
        hash: compute the SHA-256 of each file (about a second per 100 MB).

    Returns:
        One [`DatasetInfo`][meanfield.data.inventory.DatasetInfo] per known dataset: wikitext-2, tinyshakespeare, fashion-mnist, cifar10.
    """
    infos = [_wikitext(root), _shakespeare(root), _fashion(root), _cifar(root)]
    base = Path(root).expanduser() if root is not None else default_root()
    for info in infos:
        info.source = SOURCES[info.name]
        if not hash or info.folder is None:
            continue
        sums: dict[Path, str] = {}
        for folder in dict.fromkeys((base, info.folder.parent, info.folder)):
            if (folder / SUMS_NAME).is_file():
                sums.update(read_sha256sums(folder / SUMS_NAME))
        for f in info.files:
            f.sha256 = sha256(f.path)
            listed = sums.get(f.path.resolve())
            if listed is not None:
                f.status = "OK" if listed == f.sha256 else "MISMATCH"
            elif (blob := KNOWN_GIT_BLOBS.get((info.name, f.path.name))) is not None:
                f.status = "OK (git blob id)" if git_blob_id(f.path) == blob else "MISMATCH (git blob id)"
            else:
                f.status = "not listed"
    return infos


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def format_catalog(infos: list[DatasetInfo]) -> str:
    """A plain-text table of [`catalog`][meanfield.data.inventory.catalog]'s result: one line per dataset, then one per file."""
    lines = [f"{'dataset':<16} {'status':<10} where / file", "-" * 100]
    for info in infos:
        if not info.found:
            lines.append(
                f"{info.name:<16} {'missing':<10} looked in {', '.join(str(p) for p in info.searched)}"
            )
            lines.append(f"{'':<27} get it: {info.source}")
            continue
        lines.append(f"{info.name:<16} {'found':<10} {info.folder}   ({info.loader})")
        for f in info.files:
            digest = f"sha256 {f.sha256[:16]}…" if f.sha256 else ""
            lines.append(f"{'':<27} {f.path.name:<34} {_size(f.size):>9}  {digest:<24} {f.status}")
        if info.note:
            lines.append(f"{'':<27} note: {info.note}")
    return "\n".join(lines)
