"""CIFAR-10: the ``cifar-10-batches-py`` pickles, or images by class in a folder or a tar archive.

Decoded archives are cached (see [`cache_dir`][meanfield.data._cache.cache_dir]) so that the second load reads one
tensor file.
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path

import numpy as np
import torch

from ._cache import cache_file, load_cached, save_cached
from ._errors import CorruptDataError, not_found
from ._paths import candidates
from .imagefolder import folder_images, image_key, read_tar, stack_images
from .images import ImageDataset

__all__ = ["CIFAR10_CLASSES", "cifar10"]

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
PICKLE_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
PICKLE_TEST, PICKLE_META = "test_batch", "batches.meta"
PICKLE_NAMES = (*PICKLE_TRAIN, PICKLE_TEST, PICKLE_META)
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
FOLDER_NAMES = ("cifar-10-batches-py", "cifar10-jpeg", "cifar10", "cifar-10")
CACHE_VERSION = 1
_SIDE, _CHANNELS = 32, 3


# --------------------------------------------------------------------------------------------------------
# The pickle format


class _NumpyUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays only: a CIFAR batch file cannot run arbitrary code."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} (only numpy arrays are expected)")
        if module.startswith("numpy.core.") and hasattr(np, "_core"):
            module = "numpy._core." + module[len("numpy.core.") :]
        return super().find_class(module, name)


def _unpickle(data: bytes, name: str) -> dict:
    try:
        obj = _NumpyUnpickler(io.BytesIO(data), encoding="bytes").load()
    except Exception as error:  # a corrupt pickle can raise almost anything
        raise CorruptDataError(
            f"{name}: not a readable CIFAR pickle ({type(error).__name__}: {error})"
        ) from None
    if not isinstance(obj, dict):
        raise CorruptDataError(f"{name}: expected a pickled dict, got {type(obj).__name__}")
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in obj.items()}


def _batch(data: bytes, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Images ``(n, 3, 32, 32)`` uint8 and labels ``(n,)`` int64 of one batch file."""
    d = _unpickle(data, name)
    if "data" not in d or "labels" not in d:
        raise CorruptDataError(f"{name}: a CIFAR-10 batch needs 'data' and 'labels', found keys {sorted(d)}")
    x, y = d["data"], np.asarray(d["labels"])
    if (
        not isinstance(x, np.ndarray)
        or x.dtype != np.uint8
        or x.ndim != 2
        or x.shape[1] != _CHANNELS * _SIDE**2
    ):
        shape = getattr(x, "shape", None)
        raise CorruptDataError(f"{name}: 'data' must be a uint8 array of shape (n, 3072), got {shape}")
    if y.shape != (len(x),) or not np.issubdtype(y.dtype, np.integer):
        raise CorruptDataError(f"{name}: {y.shape} labels of type {y.dtype} for {len(x)} images")
    return x.reshape(-1, _CHANNELS, _SIDE, _SIDE), y.astype(np.int64)


def _from_pickles(files: dict[str, bytes], where: str) -> dict:
    missing = [n for n in (*PICKLE_TRAIN, PICKLE_TEST) if n not in files]
    if missing:
        raise not_found("cifar10", ", ".join(missing), [where], hint=f"{', '.join(missing)} missing.")
    train = [_batch(files[n], f"{where}/{n}") for n in PICKLE_TRAIN]
    test_x, test_y = _batch(files[PICKLE_TEST], f"{where}/{PICKLE_TEST}")
    note = ""
    if PICKLE_META in files:
        names = _unpickle(files[PICKLE_META], f"{where}/{PICKLE_META}").get("label_names")
        if not isinstance(names, list) or not names:
            raise CorruptDataError(f"{where}/{PICKLE_META}: no 'label_names' list")
        classes = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    else:
        classes, note = list(CIFAR10_CLASSES), f" ({PICKLE_META} absent: the standard class names)"
    out = {
        "train_x": np.concatenate([x for x, _ in train]),
        "train_y": np.concatenate([y for _, y in train]),
        "test_x": test_x,
        "test_y": test_y,
        "classes": classes,
        "lossy": False,
        "format": f"cifar-10-batches-py pickles{note}",
    }
    _check_labels(out, where)
    return out


# --------------------------------------------------------------------------------------------------------
# Archives


def _read_archive(archive: Path) -> dict:
    """Stream a tar archive once: the pickle batches if it holds them, else the images by class."""
    members = read_tar(
        archive, lambda name: name.rsplit("/", 1)[-1] in PICKLE_NAMES or image_key(name) is not None
    )
    pickles = {name.rsplit("/", 1)[-1]: data for name, data in members if image_key(name) is None}
    if pickles:
        return _from_pickles(pickles, str(archive))
    return stack_images(
        ((image_key(name), f"{archive}:{name}", data) for name, data in members), str(archive)
    )


def _tensors(loaded: dict) -> dict:
    return {
        "version": CACHE_VERSION,
        **{k: torch.from_numpy(loaded[k]) for k in ("train_x", "train_y", "test_x", "test_y")},
        "classes": list(loaded["classes"]),
        "lossy": bool(loaded["lossy"]),
        "format": loaded["format"],
    }


# --------------------------------------------------------------------------------------------------------
# The loader


def _is_archive(path: Path) -> bool:
    return path.is_file() and path.name.lower().endswith(ARCHIVE_SUFFIXES)


def archives_in(folder: Path) -> list[Path]:
    """The tar archives in ``folder`` whose name contains ``cifar``, sorted."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _is_archive(p) and "cifar" in p.name.lower())


def folder_kind(folder: Path) -> str | None:
    """What a folder holds: ``"pickles"``, ``"images"``, ``"archive"`` or ``None``."""
    if (folder / PICKLE_TRAIN[0]).is_file():
        return "pickles"
    if (folder / "train").is_dir() and (folder / "test").is_dir():
        return "images"
    if archives_in(folder):
        return "archive"
    return None


def _check_labels(loaded: dict, where: str) -> None:
    """Raise unless every label (a numpy array or a tensor) is in ``[0, len(classes))``."""
    for split in ("train", "test"):
        y = loaded[f"{split}_y"]
        if len(y) and (y.min() < 0 or y.max() >= len(loaded["classes"])):
            bad = int(y.min()) if y.min() < 0 else int(y.max())  # the offending label, also when negative
            raise CorruptDataError(f"{where}: {split} label {bad} outside 0…{len(loaded['classes']) - 1}")


def cifar10(root: str | os.PathLike | None = None, *, cache: bool = True) -> ImageDataset:
    """CIFAR-10: 50,000 training and 10,000 test images, 32×32 RGB, 10 classes.

    Formats, looked for in this order in the first folder that holds one of them:

    * ``cifar-10-batches-py``: the pickles ``data_batch_1`` … ``data_batch_5``, ``test_batch`` (each a
      dict with ``data``, uint8 ``(10000, 3072)`` in CHW order, and ``labels``) and ``batches.meta``
      (``label_names``). Only numpy arrays and plain containers are unpickled.
    * images by class: ``train/<class>/*.png|jpg`` and ``test/<class>/*``; the label is the position of
      the folder name in sorted order; images are ordered by class, then file name.
    * a tar archive (``.tar.gz``, ``.tgz``, ``.tar``, with ``cifar`` in its name inside a folder; any name
      when passed as ``root``) of either of the above, e.g. the official ``cifar-10-python.tar.gz``. The
      archive is streamed, never extracted to disk. The decoded tensors are cached in
      ``cache_dir()/cifar10-<name>-<size>-<mtime>-v1.pt`` (written atomically; keyed by the archive's
      name, size and modification time), so that later loads skip the decoding.

    A JPEG copy (such as ``../shared/data/cifar10-jpeg``) is lossy: its pixels are not CIFAR-10's; the
    result says so in ``description`` and ``lossy=True``.

    Args:
        root: a folder of one of the formats, a parent holding one as ``cifar-10-batches-py/``,
            ``cifar10-jpeg/``, ``cifar10/`` or ``cifar-10/``, or an archive file (``None``:
            [`default_root`][meanfield.data._paths.default_root]).
        cache: read and write the cache of decoded archives.

    Returns:
        An [`ImageDataset`][meanfield.data.images.ImageDataset] with ``C = 3`` (``C = 1`` for a folder of grey-level images).

    Raises:
        DataNotFoundError: nothing of the above was found (the message lists the folders searched).
        CorruptDataError: a bad pickle, truncated archive or short member, undecodable image, images of
            different sizes, or a label outside the classes.
    """
    if root is not None and _is_archive(Path(root)):
        archive: Path | None = Path(root)
        folder = archive.parent
    else:
        tried = candidates(root, FOLDER_NAMES)
        folder = next((p for p in tried if folder_kind(p) is not None), None)
        if folder is None:
            raise not_found(
                "cifar10",
                "cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}, a folder train/<class>/*.png|jpg + "
                "test/<class>/*, or a *cifar*.tar.gz of either",
                tried,
            )
        archive = None
        if folder_kind(folder) == "archive":
            found = archives_in(folder)
            if len(found) > 1:
                raise ValueError(
                    f"{folder} holds several archives ({', '.join(p.name for p in found)}): pass one as root"
                )
            archive = found[0]

    cache_note = ""
    if archive is not None:
        cache_path = cache_file("cifar10", archive, CACHE_VERSION)
        tensors = load_cached(cache_path, CACHE_VERSION) if cache else None
        if tensors is not None:
            cache_note = f"; decoded tensors read from the cache {cache_path}"
        else:
            tensors = _tensors(_read_archive(archive))
            if cache and save_cached(cache_path, tensors):
                cache_note = f"; decoded tensors cached in {cache_path}"
        source = f"archive {archive}"
    else:
        if folder_kind(folder) == "pickles":
            files = {n: (folder / n).read_bytes() for n in PICKLE_NAMES if (folder / n).is_file()}
            loaded = _from_pickles(files, str(folder))
        else:
            loaded = stack_images(folder_images(folder), str(folder))
        tensors = _tensors(loaded)
        source = f"folder {folder}"
    _check_labels(tensors, source)

    x = tensors["train_x"]
    text = (
        f"CIFAR-10 from {source} ({tensors['format']}): train {len(x):,}, test {len(tensors['test_x']):,} images "
        f"of {x.shape[2]}×{x.shape[3]}, {x.shape[1]} channel(s), {len(tensors['classes'])} classes"
    )
    text += cache_note
    if tensors["lossy"]:
        text += (
            "; CAVEAT: a lossy JPEG copy, not pixel-exact: the pixels differ from the canonical CIFAR-10 ones, "
            "so results are not exactly comparable with those on the original data"
        )
    return ImageDataset(
        train_x=tensors["train_x"],
        train_y=tensors["train_y"],
        test_x=tensors["test_x"],
        test_y=tensors["test_y"],
        classes=tensors["classes"],
        description=text,
        lossy=tensors["lossy"],
    )
