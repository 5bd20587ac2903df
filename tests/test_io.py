"""Tests of :mod:`meanfield._io`."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest

from meanfield import _io

TMP_NAME = re.compile(r"^\.target\.bin\.[A-Za-z0-9_]+\.tmp$")


def test_write_atomic_writes_through_a_hidden_tmp_file_beside_the_target(tmp_path):
    """While ``write`` runs, the folder holds exactly one new file, ``.target.bin.<random>.tmp`` (the
    ``.*.tmp`` pattern that ``remove_temporaries`` clears after a killed write) and no target; afterwards the
    target holds the bytes and the temporary is gone. The parent folders are created and the path returned.
    An existing target is replaced whole."""
    target = tmp_path / "a" / "b" / "target.bin"
    seen = []

    def write(f):
        seen.append(sorted(p.name for p in target.parent.iterdir()))
        f.write(b"new bytes")

    assert _io.write_atomic(target, write) == target
    ((name,),) = seen
    assert TMP_NAME.match(name), name
    assert target.read_bytes() == b"new bytes"
    assert sorted(p.name for p in target.parent.iterdir()) == ["target.bin"]
    _io.write_atomic(str(target), lambda f: f.write(b"v2"))
    assert target.read_bytes() == b"v2"


def test_text_and_json_writers_write_utf8_and_strict_indented_json(tmp_path):
    """``write_text_atomic`` writes UTF-8 (β is ``ce b2``); ``write_json_atomic`` writes JSON indented by one
    space with a final newline, NaN/Inf as null (also inside lists and nested dicts, keys made strings)."""
    _io.write_text_atomic(tmp_path / "t.txt", "β\n")
    assert (tmp_path / "t.txt").read_bytes() == b"\xce\xb2\n"
    _io.write_json_atomic(tmp_path / "d.json", {"a": float("nan"), "b": [1, float("inf")], 3: {"c": 2.5}})
    assert (tmp_path / "d.json").read_text() == (
        '{\n "a": null,\n "b": [\n  1,\n  null\n ],\n "3": {\n  "c": 2.5\n }\n}\n'
    )


def test_write_atomic_flushes_and_fsyncs_the_whole_file_before_renaming(tmp_path, monkeypatch):
    """``fsync`` is called once, on the temporary file, when it already holds every byte written (the Python
    buffer flushed) and before the rename (the target does not exist yet); a ``str`` path gives a ``Path``
    back. The temporary file is in the target's folder, which is created (parents too)."""
    target = tmp_path / "sub" / "deeper" / "out.bin"  # two missing folders: made with their parents
    seen = []
    real_fsync = os.fsync

    def fsync(fd):
        seen.append((os.fstat(fd).st_size, target.exists(), sorted(p.name for p in target.parent.iterdir())))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    data = b"x" * 100
    got = _io.write_atomic(str(target), lambda f: f.write(data))
    assert isinstance(got, Path) and got == target
    ((size, existed, names),) = seen
    assert size == 100 and existed is False
    assert len(names) == 1 and re.fullmatch(r"\.out\.bin\.[A-Za-z0-9_]+\.tmp", names[0])
    assert target.read_bytes() == data


def test_a_failed_rename_removes_the_tmp_and_keeps_the_old_file(tmp_path, monkeypatch):
    """``os.replace`` fails (a full disk, say): the error propagates, the temporary file is removed, the old
    file holds its old bytes. A target that did not exist stays absent."""
    target = tmp_path / "t.json"
    target.write_bytes(b"old")

    def replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="No space left"):
        _io.write_text_atomic(target, "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"] and target.read_bytes() == b"old"
    with pytest.raises(OSError, match="No space left"):
        _io.write_json_atomic(tmp_path / "fresh.json", {"a": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_write_text_atomic_writes_utf8_bytes_verbatim_and_returns_the_path(tmp_path):
    """UTF-8 whatever the locale, no newline translation (``\\r\\n`` kept), an empty text an empty file; the
    path returned; a second write replaces the file whole (a shorter text leaves no tail)."""
    target = tmp_path / "t.txt"
    assert _io.write_text_atomic(target, "é€\r\nb") == target
    assert target.read_bytes() == "é€\r\nb".encode() == b"\xc3\xa9\xe2\x82\xac\r\nb"
    _io.write_text_atomic(str(target), "z")
    assert target.read_bytes() == b"z"
    _io.write_text_atomic(target, "")
    assert target.read_bytes() == b""


def test_json_clean_replaces_non_finite_floats_recursively_and_copies():
    """``json_clean``: NaN, +Inf, −Inf (also numpy float64, a float subclass) become ``None`` at any depth;
    finite floats, ints, bools, strings and ``None`` stay; tuples become lists, dict keys strings; the input
    is not changed. Something else (a set) is returned as it is."""
    data = {
        "a": [1.5, float("nan"), (float("inf"), -float("inf"))],
        2: {"b": np.float64("nan"), "c": True, "d": None, "e": "x", "f": 0},
        None: -0.0,
    }
    got = _io.json_clean(data)
    assert got == {
        "a": [1.5, None, [None, None]],
        "2": {"b": None, "c": True, "d": None, "e": "x", "f": 0},
        "None": -0.0,
    }
    assert type(got["a"][2]) is list and got["2"]["c"] is True
    assert math.isnan(data["a"][1]) and isinstance(data["a"][2], tuple) and 2 in data  # the input unchanged
    s = {1, 2}
    assert _io.json_clean(s) is s
    assert (
        _io.json_clean(float("nan")) is None
        and _io.json_clean(3.25) == 3.25
        and _io.json_clean("nan") == "nan"
    )
    assert _io.json_clean((1, 2)) == [1, 2]


def test_write_json_atomic_writes_indent_one_ascii_json_and_a_final_newline(tmp_path):
    """The exact bytes: ``json.dumps(..., indent=1)`` (ASCII escapes for β, keys in insertion order, not
    sorted), non-finite floats as ``null``, one final newline; the path returned."""
    target = tmp_path / "d.json"
    data = {"z": 1, "a": [float("-inf"), "β"], "m": {}}
    assert _io.write_json_atomic(target, data) == target
    assert target.read_text() == '{\n "z": 1,\n "a": [\n  null,\n  "\\u03b2"\n ],\n "m": {}\n}\n'
    assert json.loads(target.read_text()) == {"z": 1, "a": [None, "β"], "m": {}}
    _io.write_json_atomic(target, [1, 2.5])
    assert target.read_bytes() == b"[\n 1,\n 2.5\n]\n"
