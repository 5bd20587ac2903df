"""Fashion-MNIST from its idx-ubyte files (gzipped or not)."""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import numpy as np
import torch

from ._errors import CorruptDataError, not_found
from ._paths import DEBIAN_DATASETS, find_file, locate
from .images import ImageDataset

__all__ = ["FASHION_CLASSES", "FASHION_FILES", "fashion_mnist", "read_idx"]

FASHION_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]
FASHION_FILES = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}
"""Role → base file name; each file may also be gzipped (``<name>.gz``)."""

_UBYTE = 0x08


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when the name ends in ``.gz``; a broken gzip is a [`CorruptDataError`][meanfield.data._errors.CorruptDataError]."""
    if path.suffix != ".gz":
        return path.read_bytes()
    try:
        with gzip.open(path, "rb") as f:
            return f.read()
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as error:
        raise CorruptDataError(f"{path}: not a complete gzip file ({error})") from None


def read_idx(path: str | os.PathLike, ndim: int) -> np.ndarray:
    """Read an idx-ubyte array (the MNIST format), gzipped when the name ends in ``.gz``.

    Format: two zero bytes, the element type (``0x08`` = unsigned byte, the only one accepted), the number
    of dimensions, then each dimension as a big-endian ``uint32``, then the data in C order.

    Args:
        path: the file.
        ndim: the number of dimensions it must have (3 for images, 1 for labels).

    Returns:
        ``uint8`` array of the stored shape.

    Raises:
        CorruptDataError: a bad magic number, element type, dimension count or data size.
    """
    path = Path(path)
    raw = _read_bytes(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise CorruptDataError(f"{path}: not an idx file (bad magic number {raw[:4].hex() or 'none'})")
    if raw[2] != _UBYTE:
        raise CorruptDataError(f"{path}: idx element type 0x{raw[2]:02x}, expected 0x08 (unsigned byte)")
    if raw[3] != ndim:
        raise CorruptDataError(f"{path}: idx array with {raw[3]} dimensions, expected {ndim}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise CorruptDataError(f"{path}: truncated idx header ({len(raw)} bytes, expected {header})")
    shape = tuple(int(s) for s in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    size = int(np.prod(shape))
    if len(raw) - header != size:
        raise CorruptDataError(
            f"{path}: idx data of {len(raw) - header} bytes, expected {size} for shape {shape}"
            + (" (truncated)" if len(raw) - header < size else "")
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def _file(folder: Path, base: str) -> Path | None:
    return find_file(folder, (f"{base}.gz", base))


def fashion_mnist(root: str | os.PathLike | None = None) -> ImageDataset:
    """Fashion-MNIST: 60,000 training and 10,000 test images, 28×28 grey levels, 10 classes.

    Format: the four idx-ubyte files ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
    ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, each gzipped (``.gz``) or not (see
    [`read_idx`][meanfield.data.fashion.read_idx]).

    Args:
        root: the folder holding the four files, or a parent with them in ``fashion-mnist/`` (also
            ``FashionMNIST/raw/``, torchvision's layout). ``None``: [`default_root`][meanfield.data._paths.default_root], then
            ``/usr/share/datasets`` (where Debian's ``dataset-fashion-mnist`` installs them).

    Returns:
        An [`ImageDataset`][meanfield.data.images.ImageDataset] with ``C = 1``.

    Raises:
        DataNotFoundError: no folder with the four files.
        CorruptDataError: a file is truncated or malformed, the label and image counts differ, or a label is
            not in 0…9.
    """
    names = ("fashion-mnist", "fashion_mnist", "FashionMNIST/raw")
    expected = ", ".join(FASHION_FILES.values()) + " (each optionally .gz)"
    folder = locate(
        "fashion-mnist",
        root,
        names,
        lambda p: (
            _file(p, FASHION_FILES["train_x"]) is not None or _file(p, FASHION_FILES["test_x"]) is not None
        ),
        expected,
        extra_default=(DEBIAN_DATASETS,),
    )
    paths: dict[str, Path] = {}
    for role, base in FASHION_FILES.items():
        path = _file(folder, base)
        if path is None:
            raise not_found("fashion-mnist", f"{base} or {base}.gz", [folder], hint=f"{base} is missing.")
        paths[role] = path
    arrays = {role: read_idx(p, 3 if role.endswith("_x") else 1) for role, p in paths.items()}
    for split in ("train", "test"):
        x, y = arrays[f"{split}_x"], arrays[f"{split}_y"]
        if len(x) != len(y):
            raise CorruptDataError(
                f"{paths[f'{split}_y']}: {len(y)} labels for {len(x)} images in {paths[f'{split}_x']}"
            )
        if len(y) and int(y.max()) >= len(FASHION_CLASSES):
            raise CorruptDataError(f"{paths[f'{split}_y']}: label {int(y.max())} outside 0…9")
    tensors = {
        role: torch.from_numpy(a.copy()).unsqueeze(1)
        if role.endswith("_x")
        else torch.from_numpy(a.astype(np.int64))
        for role, a in arrays.items()
    }  # images (N, 1, H, W) uint8, labels (N,) int64
    h, w = tensors["train_x"].shape[2:]
    gz = "gzipped " if paths["train_x"].suffix == ".gz" else ""
    description = (
        f"Fashion-MNIST from {folder} ({gz}idx-ubyte files): train {len(tensors['train_y']):,}, "
        f"test {len(tensors['test_y']):,} images of {h}×{w} grey levels, {len(FASHION_CLASSES)} classes"
    )
    return ImageDataset(classes=list(FASHION_CLASSES), description=description, **tensors)
