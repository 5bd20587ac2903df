"""CIFAR-10: the ``cifar-10-batches-py`` pickles, or images by class in a folder or a tar archive.

Decoded archives are cached (see :func:`cache_dir`) so that the second load reads one tensor file.
"""

from __future__ import annotations

import io
import os
import pickle
import tarfile
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from .._io import write_atomic
from ._errors import CorruptDataError, not_found
from ._paths import candidates
from .images import ImageDataset

__all__ = ["CIFAR10_CLASSES", "cache_dir", "cifar10"]

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
PICKLE_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
PICKLE_TEST, PICKLE_META = "test_batch", "batches.meta"
IMAGE_SUFFIXES = {".png": False, ".jpg": True, ".jpeg": True, ".bmp": False, ".ppm": False, ".webp": True}
"""Image file suffix → whether the format is (normally) lossy."""
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
FOLDER_NAMES = ("cifar-10-batches-py", "cifar10-jpeg", "cifar10", "cifar-10")
CACHE_VERSION = 1
_SIDE, _CHANNELS = 32, 3


def cache_dir() -> Path:
    """Where decoded archives are cached: ``$MEANFIELD_CACHE``, else ``$XDG_CACHE_HOME/meanfield``, else
    ``~/.cache/meanfield``."""
    if os.environ.get("MEANFIELD_CACHE"):
        return Path(os.environ["MEANFIELD_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "meanfield"


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
# Images by class


def _decode(data: bytes, name: str) -> np.ndarray:
    """One image as ``uint8`` ``(H, W, 3)`` (RGB) or ``(H, W)`` (grey levels)."""
    from PIL import Image  # Pillow comes with matplotlib

    try:
        with Image.open(io.BytesIO(data)) as image:
            grey = image.mode in ("1", "L", "I;16")
            return np.asarray(image.convert("L" if grey else "RGB"))
    except Exception as error:  # PIL raises OSError, SyntaxError, ValueError, DecompressionBombError, …
        raise CorruptDataError(f"{name}: undecodable image ({type(error).__name__}: {error})") from None


def _image_key(path: str) -> tuple[str, str, str] | None:
    """``(split, class, file)`` for a path ``…/train|test/<class>/<file>`` of an image, else ``None``."""
    parts = path.replace("\\", "/").split("/")
    if len(parts) < 3 or parts[-3] not in ("train", "test") or parts[-1].startswith("."):
        return None
    if Path(parts[-1]).suffix.lower() not in IMAGE_SUFFIXES:
        return None
    return parts[-3], parts[-2], parts[-1]


def _from_images(items: Iterator[tuple[tuple[str, str, str], str, bytes]], where: str) -> dict:
    """Stack decoded images ``train/<class>/*`` and ``test/<class>/*``; class index = sorted folder names."""
    found: dict[str, list[tuple[str, str, np.ndarray]]] = {"train": [], "test": []}
    lossy = set()
    for (split, cls, file), name, data in items:
        found[split].append((cls, file, _decode(data, name)))
        lossy.add(IMAGE_SUFFIXES[Path(file).suffix.lower()])
    if not found["train"] or not found["test"]:
        empty = [s for s in ("train", "test") if not found[s]]
        raise CorruptDataError(
            f"{where}: no images under {' and '.join(f'{s}/<class>/' for s in empty)} "
            f"(expected train/<class>/*.jpg|png and test/<class>/*.jpg|png)"
        )
    classes = sorted({cls for cls, _, _ in found["train"]})
    extra = sorted({cls for cls, _, _ in found["test"]} - set(classes))
    if extra:
        raise CorruptDataError(f"{where}: test classes {extra} have no train/ folder (train has {classes})")
    index = {cls: i for i, cls in enumerate(classes)}
    shape = found["train"][0][2].shape
    out: dict = {"classes": classes, "lossy": True in lossy}
    for split, entries in found.items():
        entries.sort(key=lambda e: (index[e[0]], e[1]))
        for cls, file, image in entries:
            if image.shape != shape:
                raise CorruptDataError(
                    f"{where}: {split}/{cls}/{file} has shape {image.shape}, the first image {shape}: "
                    "all images must have one size and mode"
                )
        x = np.stack([image for _, _, image in entries])  # (N, H, W, C) or (N, H, W)
        x = x[:, None] if x.ndim == 3 else x.transpose(0, 3, 1, 2)  # (N, C, H, W)
        out[f"{split}_x"] = np.ascontiguousarray(x)
        out[f"{split}_y"] = np.array([index[cls] for cls, _, _ in entries], dtype=np.int64)
    kinds = "/".join(sorted({Path(f).suffix.lower() for e in found.values() for _, f, _ in e}))
    out["format"] = f"images by class, train/<class>/*{kinds}"
    return out


def _folder_items(folder: Path) -> Iterator[tuple[tuple[str, str, str], str, bytes]]:
    for split in ("train", "test"):
        for path in sorted((folder / split).glob("*/*")):
            key = _image_key(path.relative_to(folder).as_posix())
            if key is not None and path.is_file():
                yield key, str(path), path.read_bytes()


# --------------------------------------------------------------------------------------------------------
# Archives


def _read_archive(archive: Path) -> dict:
    """Stream a tar archive once: the pickle batches if it holds them, else the images by class."""
    pickles: dict[str, bytes] = {}
    images: list[tuple[tuple[str, str, str], str, bytes]] = []
    member = "(start)"
    try:
        with tarfile.open(archive, mode="r|*") as tar:
            for info in tar:
                member = info.name
                if not info.isfile():
                    continue
                base = member.rsplit("/", 1)[-1]
                key = _image_key(member)
                if base in (*PICKLE_TRAIN, PICKLE_TEST, PICKLE_META) or key is not None:
                    f = tar.extractfile(info)
                    data = f.read() if f is not None else b""
                    if len(data) != info.size:
                        raise tarfile.ReadError(f"member {member} is short: {len(data)} of {info.size} bytes")
                    if key is None:
                        pickles[base] = data
                    else:
                        images.append((key, f"{archive}:{member}", data))
            # tarfile stops silently at a truncated header; a complete archive ends with a zero block
            if tar.fileobj.tell() - tar.offset < tarfile.BLOCKSIZE:
                raise tarfile.ReadError("the archive ends without its end-of-archive block")
    except (tarfile.TarError, EOFError, zlib.error, OSError) as error:
        raise CorruptDataError(
            f"{archive}: truncated or corrupt archive at or after member {member} ({type(error).__name__}: {error})"
        ) from None
    if pickles:
        return _from_pickles(pickles, str(archive))
    return _from_images(iter(images), str(archive))


def _cache_file(archive: Path) -> Path:
    stat = archive.stat()
    return cache_dir() / f"cifar10-{archive.name}-{stat.st_size}-{stat.st_mtime_ns}-v{CACHE_VERSION}.pt"


def _load_cache(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        cached = torch.load(path, weights_only=True)
        if cached["version"] != CACHE_VERSION or cached["train_x"].dtype != torch.uint8:
            raise ValueError(f"cache format {cached['version']}, expected {CACHE_VERSION}")
        return cached
    except Exception as error:  # an unreadable cache is rebuilt, never fatal
        warnings.warn(f"ignoring the unreadable cache {path} ({type(error).__name__}: {error})", stacklevel=3)
        return None


def _save_cache(path: Path, tensors: dict) -> bool:
    try:
        write_atomic(path, lambda f: torch.save(tensors, f))
        return True
    except OSError as error:
        warnings.warn(
            f"could not write the cache {path} ({error}); the next load decodes again", stacklevel=3
        )
        return False


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


def _archives(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _is_archive(p) and "cifar" in p.name.lower())


def _kind(folder: Path) -> str | None:
    """What a folder holds: ``"pickles"``, ``"images"``, ``"archive"`` or ``None``."""
    if (folder / PICKLE_TRAIN[0]).is_file():
        return "pickles"
    if (folder / "train").is_dir() and (folder / "test").is_dir():
        return "images"
    if _archives(folder):
        return "archive"
    return None


def _check_labels(loaded: dict, where: str) -> None:
    for split in ("train", "test"):
        y = loaded[f"{split}_y"]
        if len(y) and (y.min() < 0 or y.max() >= len(loaded["classes"])):
            raise CorruptDataError(
                f"{where}: {split} label {int(y.max())} outside 0…{len(loaded['classes']) - 1}"
            )


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
            :func:`default_root`).
        cache: read and write the cache of decoded archives.

    Returns:
        An :class:`ImageDataset` with ``C = 3`` (``C = 1`` for a folder of grey-level images).

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
        folder = next((p for p in tried if _kind(p) is not None), None)
        if folder is None:
            raise not_found(
                "cifar10",
                "cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}, a folder train/<class>/*.png|jpg + "
                "test/<class>/*, or a *cifar*.tar.gz of either",
                tried,
            )
        archive = None
        if _kind(folder) == "archive":
            found = _archives(folder)
            if len(found) > 1:
                raise ValueError(
                    f"{folder} holds several archives ({', '.join(p.name for p in found)}): pass one as root"
                )
            archive = found[0]

    cached_from = None
    if archive is not None:
        cache_path = _cache_file(archive)
        tensors = _load_cache(cache_path) if cache else None
        if tensors is not None:
            cached_from = cache_path
        else:
            tensors = _tensors(_read_archive(archive))
            if cache and _save_cache(cache_path, tensors):
                cached_from = None
        source = f"archive {archive}"
    else:
        if _kind(folder) == "pickles":
            names = (*PICKLE_TRAIN, PICKLE_TEST, PICKLE_META)
            files = {n: (folder / n).read_bytes() for n in names if (folder / n).is_file()}
            loaded = _from_pickles(files, str(folder))
        else:
            loaded = _from_images(_folder_items(folder), str(folder))
        tensors = _tensors(loaded)
        source = f"folder {folder}"
    _check_labels(
        {k: tensors[k].numpy() if torch.is_tensor(tensors[k]) else tensors[k] for k in tensors}, source
    )

    x = tensors["train_x"]
    text = (
        f"CIFAR-10 from {source} ({tensors['format']}): train {len(x):,}, test {len(tensors['test_x']):,} images "
        f"of {x.shape[2]}×{x.shape[3]}, {x.shape[1]} channel(s), {len(tensors['classes'])} classes"
    )
    if cached_from is not None:
        text += f"; decoded tensors read from the cache {cached_from}"
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
