"""Tests of :mod:`meanfield.shipped`."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.tiny_run import ROOT, TEACHER  # noqa: E402  (tests/helpers/tiny_run.py)

import meanfield
import meanfield.data
import meanfield.runs
import meanfield.runs.sweeps
import meanfield.shipped
import meanfield.stepping.solvers
import meanfield.studies.validation
from meanfield import cli, shipped
from meanfield.config import ConfigError


def test_config_name_drops_only_a_last_config_component(tmp_path):
    """The name is the path under the root without its suffix, a *last* ``config`` read as its folder:
    ``a.toml`` → ``a``, ``char_lm/config.toml`` → ``char_lm``, ``a/b/config.toml`` → ``a/b``,
    ``a/config/x.toml`` → ``a/config/x``, a bare ``config.toml`` → ``config``; by default under the shipped
    experiments folder."""
    root = tmp_path / "experiments"
    cases = {
        "a.toml": "a",
        "config.toml": "config",
        "char_lm/config.toml": "char_lm",
        "a/b/config.toml": "a/b",
        "a/config/x.toml": "a/config/x",
        "a/config/config.toml": "a/config",
        "particle_attention/toy.toml": "particle_attention/toy",
    }
    for rel, name in cases.items():
        assert shipped.config_name(root / rel, root) == name, rel
    assert shipped.config_name(shipped.experiments_dir() / "char_lm" / "config.toml") == "char_lm"


def test_find_config_prefers_a_file_names_a_shipped_one_and_says_what_is_missing(tmp_path, monkeypatch):
    """A file that exists wins (even one named like a shipped configuration); a shipped name gives its file
    and the name; a missing ``.toml`` path and an unknown name are refused with the exact messages (the
    shipped names listed, found here by globbing ``experiments/*/*.toml``)."""
    monkeypatch.chdir(tmp_path)
    Path("char_lm").write_text("task = 'x'\n")
    assert shipped.find_config("char_lm") == (Path("char_lm"), None)
    monkeypatch.chdir(ROOT)
    assert shipped.find_config("char_lm") == (
        shipped.experiments_dir() / "char_lm" / "config.toml",
        "char_lm",
    )
    assert shipped.find_config(TEACHER) == (TEACHER, None)
    for arg in ("missing/nope.toml", Path("missing/nope.toml")):
        with pytest.raises(ConfigError) as caught:
            shipped.find_config(arg)
        assert str(caught.value) == (
            "configuration file missing/nope.toml does not exist; the shipped configurations are run by name "
            "(meanfield run --list)"
        )
    root = shipped.experiments_dir()
    names = sorted(
        str(p.relative_to(root).with_suffix("")).removesuffix("/config") for p in root.glob("*/*.toml")
    )
    with pytest.raises(shipped.UnknownConfig) as caught:
        shipped.find_config("nope")
    assert str(caught.value) == (
        f"no configuration file or shipped configuration named 'nope'; shipped: {', '.join(names)} "
        "(meanfield run --list), or pass the path of a TOML file"
    )


def test_describe_reads_description_and_preset_names(tmp_path):
    from meanfield.shipped import describe

    path = tmp_path / "c.toml"
    path.write_text('description = "a test"\n[presets.smoke]\n[presets.full]\n')
    assert describe(path) == ("a test", ["smoke", "full"])
    path.write_text('presets = "not a table"\n')
    assert describe(path) == ("", [])


def test_an_unknown_shipped_name_lists_what_there_is():
    from meanfield.shipped import UnknownConfig, config_path, configs

    with pytest.raises(UnknownConfig) as caught:
        config_path("no-such-config")
    listed = ", ".join(configs()) or "none"
    assert str(caught.value) == (
        f"no configuration file or shipped configuration named 'no-such-config'; shipped: {listed} "
        "(meanfield run --list), or pass the path of a TOML file"
    )


def test_run_list_without_shipped_configurations_says_so(monkeypatch, capsys):
    """No shipped configurations: the one line ``no shipped configurations found`` and status 0 (the folder
    is not asked for)."""
    monkeypatch.setattr(meanfield.shipped, "configs", dict)
    monkeypatch.setattr(meanfield.shipped, "experiments_dir", lambda: pytest.fail("asked for the folder"))
    assert cli.main(["run", "--list"]) == 0
    assert capsys.readouterr() == ("no shipped configurations found\n", "")
