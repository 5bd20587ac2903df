"""Data files in the real formats, written on the fly for the tests of ``meanfield.data`` (WikiText splits, CIFAR
pickles and their archive, plain tar files), and the skip for a real file this machine lacks."""

from __future__ import annotations

import io
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("MEANFIELD_DATA") or ROOT.parent / "shared" / "data")
"""The project's data: ``MEANFIELD_DATA`` when set (a copy of the checkout, e.g. mutmut's ``mutants/``, has no
``../shared`` beside it), else ``../shared/data`` beside the checkout."""


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is not on this machine")
    return path


WIKI = {
    "train": " = Title = \n\n the cat sat on the mat . \n a dog <unk> . \n",
    "valid": " the dog sat . \n\n a bird flew \n",
    "test": " the cat . \n",
}


def _wikitext(folder: Path, layout: str = "txt", splits=("train", "valid", "test")) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for s in splits:
        name = f"{s}.txt" if layout == "txt" else f"wiki.{s}.tokens"
        (folder / name).write_text(WIKI[s], encoding="utf-8")
    return folder


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


def _tar_of(folder: Path, archive: Path, arc: str = "") -> Path:
    with tarfile.open(archive, "w:gz") as tar:
        for child in sorted(folder.iterdir()):
            tar.add(child, arcname=f"{arc}{child.name}")
    return archive


def _wiki(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (folder / name).write_text(content, encoding="utf-8")
    return folder
