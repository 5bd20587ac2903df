"""Tests of :mod:`meanfield.data._paths`."""

from __future__ import annotations

from pathlib import Path

import pytest

from meanfield.data import (
    DataNotFoundError,
    _paths,
    default_root,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def _private_cache(tmp_path, monkeypatch):
    """Every test caches decoded archives in its own folder, never in the user's ~/.cache."""
    monkeypatch.setenv("MEANFIELD_CACHE", str(tmp_path / "cache"))


@pytest.mark.usefixtures("_private_cache")
def test_default_root_order(tmp_path, monkeypatch):
    monkeypatch.setenv("MEANFIELD_DATA", str(tmp_path / "mine"))
    assert default_root() == tmp_path / "mine"  # even when it does not exist
    monkeypatch.delenv("MEANFIELD_DATA")
    monkeypatch.chdir(tmp_path)
    checkout = ROOT.parent / "shared" / "data"
    assert default_root() == (checkout.absolute() if checkout.is_dir() else tmp_path / "data")
    (tmp_path / "data").mkdir()
    assert default_root() == tmp_path / "data"  # ./data comes first


@pytest.fixture
def _private_cache_2(tmp_path, monkeypatch):
    """Decoded archives are cached in the test's own folder, never in ~/.cache; the default data folder is an
    empty one (a test that wants another sets it), so that no test depends on what data this machine has."""
    monkeypatch.setenv("MEANFIELD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MEANFIELD_DATA", str(tmp_path / "no-default-data"))


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


@pytest.mark.usefixtures("_private_cache_2")
def test_checkout_data_is_the_shared_folder_beside_a_source_checkout(tmp_path, monkeypatch):
    _fake_checkout(tmp_path, monkeypatch)
    assert _paths._checkout_data() == tmp_path / "co" / "shared" / "data"
    assert str(_paths._checkout_data()) == str(tmp_path) + "/co/shared/data"


@pytest.mark.usefixtures("_private_cache_2")
@pytest.mark.parametrize("pyproject, package", [(False, True), (True, False)])
def test_checkout_data_needs_both_pyproject_and_the_package(tmp_path, monkeypatch, pyproject, package):
    _fake_checkout(tmp_path, monkeypatch, pyproject=pyproject, package=package)
    assert _paths._checkout_data() is None


@pytest.mark.usefixtures("_private_cache_2")
def test_checkout_data_names_are_case_exact(tmp_path, monkeypatch):
    repo = _fake_checkout(tmp_path, monkeypatch, pyproject=False)
    (repo / "PYPROJECT.TOML").write_text("")  # another file on a case-sensitive file system
    assert _paths._checkout_data() is None


@pytest.mark.usefixtures("_private_cache_2")
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


@pytest.mark.usefixtures("_private_cache_2")
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


@pytest.mark.usefixtures("_private_cache_2")
def test_find_file_first_regular_file(tmp_path):
    (tmp_path / "x.gz").mkdir()  # a folder of that name does not count
    (tmp_path / "x").write_bytes(b"")
    (tmp_path / "y").write_bytes(b"")
    assert _paths.find_file(tmp_path, ("x.gz", "x", "y")) == tmp_path / "x"
    assert _paths.find_file(tmp_path, ("y", "x")) == tmp_path / "y"
    assert _paths.find_file(tmp_path, ("x.gz", "z")) is None
