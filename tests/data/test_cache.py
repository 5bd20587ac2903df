"""Tests of :mod:`meanfield.data._cache`."""

from __future__ import annotations

import os
import warnings
from pathlib import PurePosixPath

import pytest
import torch

from meanfield import data
from meanfield.data import (
    _cache,
)


@pytest.fixture
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


@pytest.mark.usefixtures("_private_cache")
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


@pytest.mark.usefixtures("_private_cache")
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


@pytest.mark.usefixtures("_private_cache")
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


@pytest.mark.usefixtures("_private_cache")
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


@pytest.mark.usefixtures("_private_cache")
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
