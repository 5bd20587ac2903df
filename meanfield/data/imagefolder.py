"""Images by class (``train/<class>/*``, ``test/<class>/*``) from a folder or a streamed tar archive."""

from __future__ import annotations

import io
import tarfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from ._errors import CorruptDataError

__all__ = ["IMAGE_SUFFIXES", "folder_images", "image_key", "read_tar", "stack_images"]

IMAGE_SUFFIXES = {".png": False, ".jpg": True, ".jpeg": True, ".bmp": False, ".ppm": False, ".webp": True}
"""Image file suffix → whether the format is (normally) lossy."""

ImageItem = tuple[tuple[str, str, str], str, bytes]
"""``((split, class, file), name for messages, encoded bytes)``."""


def image_key(path: str) -> tuple[str, str, str] | None:
    """``(split, class, file)`` for a path ``…/train|test/<class>/<file>`` of an image, else ``None``
    (hidden files such as ``._x.jpg`` and ``.DS_Store`` are skipped)."""
    parts = path.replace("\\", "/").split("/")
    if len(parts) < 3 or parts[-3] not in ("train", "test") or parts[-1].startswith("."):
        return None
    if Path(parts[-1]).suffix.lower() not in IMAGE_SUFFIXES:
        return None
    return parts[-3], parts[-2], parts[-1]


def decode(data: bytes, name: str) -> np.ndarray:
    """One image as ``uint8`` ``(H, W, 3)`` (RGB) or ``(H, W)`` (grey levels), decoded by Pillow."""
    from PIL import Image  # Pillow comes with matplotlib

    try:
        with Image.open(io.BytesIO(data)) as image:
            grey = image.mode in ("1", "L", "I;16")
            return np.asarray(image.convert("L" if grey else "RGB"))
    except Exception as error:  # PIL raises OSError, SyntaxError, ValueError, DecompressionBombError, …
        raise CorruptDataError(f"{name}: undecodable image ({type(error).__name__}: {error})") from None


def stack_images(items: Iterable[ImageItem], where: str) -> dict:
    r"""Decode and stack the images of both splits.

    The label is the position of the class folder's name in the sorted train class names; images are
    ordered by class, then file name.

    Returns:
        $\mathrm{train}_x$/$\mathrm{test}_x$ ``uint8 (N, C, H, W)``, $\mathrm{train}_y$/$\mathrm{test}_y$ ``int64 (N,)``, ``classes``,
        ``lossy`` (any image in a lossy format) and ``format`` (in words).

    Raises:
        CorruptDataError: an undecodable image, images of different sizes or modes, an empty split, a test
            class without a train folder.
    """
    found: dict[str, list[tuple[str, str, np.ndarray]]] = {"train": [], "test": []}
    lossy = set()
    for (split, cls, file), name, data in items:
        found[split].append((cls, file, decode(data, name)))
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


def folder_images(folder: Path) -> Iterator[ImageItem]:
    """The image files ``folder/{train,test}/<class>/*``, sorted, with their bytes."""
    for split in ("train", "test"):
        for path in sorted((folder / split).glob("*/*")):
            key = image_key(path.relative_to(folder).as_posix())
            if key is not None and path.is_file():
                yield key, str(path), path.read_bytes()


def read_tar(archive: Path, wanted: Callable[[str], bool]) -> list[tuple[str, bytes]]:
    """Stream a tar archive (compressed or not) once and return ``(member name, bytes)`` of the regular
    files for which ``wanted(name)`` is true, in archive order. Nothing is extracted to disk.

    Raises:
        CorruptDataError: a truncated or corrupt archive: a broken compressed stream, a short member, or an
            archive cut between two members (where ``tarfile`` itself stops silently), named with the
            member at which it happened.
    """
    out: list[tuple[str, bytes]] = []
    member = "(start)"
    try:
        with tarfile.open(archive, mode="r|*") as tar:
            for info in tar:
                member = info.name
                if not info.isfile() or not wanted(member):
                    continue
                f = tar.extractfile(info)
                data = f.read() if f is not None else b""
                if len(data) != info.size:
                    raise tarfile.ReadError(f"member {member} is short: {len(data)} of {info.size} bytes")
                out.append((member, data))
            # tarfile stops silently at a truncated header; a complete archive ends with a zero block
            if tar.fileobj.tell() - tar.offset < tarfile.BLOCKSIZE:
                raise tarfile.ReadError("the archive ends without its end-of-archive block")
    except (tarfile.TarError, EOFError, zlib.error, OSError) as error:
        raise CorruptDataError(
            f"{archive}: truncated or corrupt archive at or after member {member} ({type(error).__name__}: {error})"
        ) from None
    return out
