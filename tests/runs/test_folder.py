"""Tests of :mod:`meanfield.runs.folder`."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import pickle
import re
import time
from datetime import datetime
from pathlib import Path

import pytest
import torch

from meanfield import _io
from meanfield.runs import folder as folder_mod
from meanfield.runs.errors import FolderAccessError
from meanfield.runs.folder import (
    Checkpoints,
    CorruptCheckpointError,
    DiskFullError,
    MetricsLog,
    RunFolderError,
    RunResult,
    check_folder,
    config_differences,
    config_hash,
    disk_full,
    remove_temporaries,
    write_marker,
)


def _checkpoints(tmp_path, *steps: int) -> Checkpoints:
    ck = Checkpoints(tmp_path / "checkpoints", keep=10)
    for step in steps:
        ck.save({"step": step, "w": torch.full((3,), float(step))}, step)
    return ck


def _overwrite(ck: Checkpoints, step: int, obj, *, record: bool = True) -> None:
    """Replace the checkpoint of ``step`` by ``obj`` with a record that matches its bytes (a valid file)."""
    path = ck.path(step)
    torch.save(obj, path)
    data = path.read_bytes()
    if record:
        ck.record_path(step).write_text(
            json.dumps({"step": step, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        )


class _Pickled:
    """Not on torch's weights-only allow-list: a pickle that runs code would load only with weights_only=False."""


def test_disk_full_is_enospc_naming_the_file_the_cause_and_what_is_intact():
    error = disk_full(
        Path("/x/metrics.jsonl"), OSError(errno.EDQUOT, "Disk quota exceeded"), "the rest is fine"
    )
    assert isinstance(error, DiskFullError) and error.errno == errno.ENOSPC
    assert (
        str(error)
        == "no space left on device writing /x/metrics.jsonl (Disk quota exceeded); the rest is fine"
    )
    bare = disk_full(Path("f"), OSError("bare"), "ok")  # an OSError without strerror: its text instead
    assert str(bare) == "no space left on device writing f (bare); ok"


def test_no_checkpoint_is_file_not_found_naming_the_folder(tmp_path):
    ck = Checkpoints(tmp_path / "checkpoints")
    with pytest.raises(FileNotFoundError, match=rf"^no checkpoint in {tmp_path / 'checkpoints'}$"):
        ck.load()
    assert ck.load_good() == (None, None, [])


@pytest.mark.parametrize(
    "text,reason",
    [("{not json", r"its record step-00000003\.json is unreadable \("), ("[1, 2]", "is not a JSON object")],
)
def test_a_damaged_record_names_the_checkpoint_and_the_record(tmp_path, text, reason):
    ck = _checkpoints(tmp_path, 3)
    ck.record_path(3).write_text(text)
    with pytest.raises(CorruptCheckpointError, match=reason) as caught:
        ck.record(3)
    assert caught.value.path == ck.path(3)
    assert str(caught.value).startswith(f"checkpoint {ck.path(3)} is damaged: ")


def test_a_short_file_is_told_by_its_size_a_changed_one_by_its_hash(tmp_path):
    ck = _checkpoints(tmp_path, 1, 2)
    size = ck.path(1).stat().st_size
    ck.path(1).write_bytes(ck.path(1).read_bytes()[:-5])
    with pytest.raises(
        CorruptCheckpointError, match=rf"it has {size - 5} bytes, its record says {size}$"
    ) as c:
        ck.load(1)
    assert c.value.path == ck.path(1)
    data = bytearray(ck.path(2).read_bytes())
    data[-3] ^= 0xFF  # same size, one flipped byte
    ck.path(2).write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="its SHA-256 differs"):
        ck.load(2)


def test_a_record_without_a_size_is_checked_by_its_hash_alone(tmp_path):
    ck = _checkpoints(tmp_path, 4)
    record = json.loads(ck.record_path(4).read_text())
    del record["bytes"]
    ck.record_path(4).write_text(json.dumps(record))
    assert torch.equal(ck.load(4)["w"], torch.full((3,), 4.0))


def test_load_passes_map_location_to_torch(tmp_path):
    ck = _checkpoints(tmp_path, 2)
    seen = []

    def where(storage, location):
        seen.append(location)
        return storage

    assert torch.equal(ck.load(2, map_location=where)["w"], torch.full((3,), 2.0))
    assert seen == ["cpu"]
    seen.clear()
    step, state, skipped = ck.load_good(map_location=where)
    assert (step, skipped, seen) == (2, [], ["cpu"]) and state["step"] == 2


def test_a_checkpoint_that_needs_full_pickle_is_refused(tmp_path):
    ck = _checkpoints(tmp_path, 1)
    _overwrite(ck, 1, {"step": 1, "object": _Pickled()})
    with pytest.raises(
        CorruptCheckpointError,
        match=rf"weights_only=True\) refused it: .* \(GLOBAL {re.escape(__name__)}\._Pickled\); a run never writes",
    ) as caught:
        ck.load(1)
    assert caught.value.path == ck.path(1)


@pytest.mark.parametrize(
    "obj,ok",
    [({"step": 7, "w": 1}, True), ({"w": 1}, True), ({"step": 6}, False), ([7], False)],
    ids=["right-step", "no-step", "wrong-step", "not-a-dict"],
)
def test_the_state_must_be_a_dict_of_its_own_step(tmp_path, obj, ok):
    ck = _checkpoints(tmp_path, 7)
    _overwrite(ck, 7, obj)
    if ok:
        assert ck.load(7) == obj
    else:
        with pytest.raises(CorruptCheckpointError, match=r"it does not hold the state of step 7$") as caught:
            ck.load(7)
        assert caught.value.path == ck.path(7)


def test_load_good_sets_aside_every_bad_checkpoint_newest_first(tmp_path):
    ck = _checkpoints(tmp_path, 1, 2, 3)
    for step in (2, 3):
        ck.path(step).write_bytes(b"garbage")
    step, state, skipped = ck.load_good()
    assert step == 1 and state["step"] == 1
    assert len(skipped) == 2 and "step-00000003" in skipped[0] and "step-00000002" in skipped[1]
    corrupt = sorted(p.name for p in (ck.folder / "corrupt").iterdir())
    assert corrupt == ["step-00000002.json", "step-00000002.pt", "step-00000003.json", "step-00000003.pt"]
    assert ck.steps() == [1]


def test_truncate_keeps_records_at_or_before_the_step_and_those_without_a_step(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    for record in ({"note": "start"}, {"step": 0, "x": 0}, {"step": 1, "x": 1}, {"step": 2, "x": 2}):
        log.append(record)
    log.truncate(0)
    assert log.read() == [{"note": "start"}, {"step": 0, "x": 0}]
    log.truncate(-1)  # negative control: a step before everything keeps nothing
    assert log.read() == []


def test_append_writes_strict_json_and_a_full_disk_is_named(tmp_path, monkeypatch):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.append({"step": 1, "loss": float("nan")})
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1, "loss": null}\n'

    def failing(errno_value):
        def open_(self, *args, **kwargs):
            raise OSError(errno_value, "simulated")

        return open_

    monkeypatch.setattr(Path, "open", failing(errno.ENOSPC))
    with pytest.raises(
        DiskFullError, match=r"writing .*metrics\.jsonl \(simulated\); the checkpoints are intact"
    ):
        log.append({"step": 2})
    monkeypatch.setattr(Path, "open", failing(errno.EACCES))
    with pytest.raises(PermissionError) as caught:  # negative control: not a full disk, passed on as it is
        log.append({"step": 2})
    assert not isinstance(caught.value, DiskFullError)


def test_run_result_without_final_metrics_has_an_empty_dict(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"status": "failed", "step": 3}))
    result = RunResult.load(tmp_path)
    assert (result.status, result.step, result.final) == ("failed", 3, {})


def test_differences_name_every_changed_added_and_removed_key():
    a = {"x": 1, "only_a": 2, "nest": {"k": 1, "same": 0}, "shape": {"k": 1}}
    b = {"x": 2, "only_b": 3, "nest": {"k": 2, "same": 0}, "shape": 5}
    assert sorted(config_differences(a, b)) == ["nest.k", "only_a", "only_b", "shape", "x"]
    assert list(config_differences(a, a)) == []  # negative control


TMP_NAME = re.compile(r"^\.target\.bin\.[A-Za-z0-9_]+\.tmp$")


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT], ids=["ENOSPC", "EDQUOT"])
def test_a_full_disk_while_saving_names_the_file_and_the_latest_intact_checkpoint(
    tmp_path, monkeypatch, code
):
    """The checkpoint file's write fails with ENOSPC or EDQUOT (emulated): a DiskFullError whose message names
    the file, the cause and the latest earlier checkpoint; the new step's record is removed (no record
    without its file) and nothing is pruned (keep = 1 and step 1 is still there). With no earlier checkpoint
    it says so. Negative control: another OSError (EACCES) is raised as it is, its record removed too."""
    ck = Checkpoints(tmp_path / "ck", keep=1)
    ck.save({"step": 1}, 1)

    def failing(code):
        def write_atomic(path, write):
            raise OSError(code, os.strerror(code))

        return write_atomic

    monkeypatch.setattr(folder_mod, "write_atomic", failing(code))
    with pytest.raises(DiskFullError) as caught:
        ck.save({"step": 2}, 2)
    assert str(caught.value) == (
        f"no space left on device writing {ck.path(2)} ({os.strerror(code)}); the earlier checkpoints are "
        f"intact (latest: {ck.path(1)})"
    )
    assert caught.value.errno == errno.ENOSPC
    assert sorted(p.name for p in ck.folder.iterdir()) == ["step-00000001.json", "step-00000001.pt"]
    empty = Checkpoints(tmp_path / "empty", keep=1)
    with pytest.raises(DiskFullError, match=r"; no earlier checkpoint exists$"):
        empty.save({"step": 5}, 5)
    assert list(empty.folder.iterdir()) == []
    monkeypatch.setattr(folder_mod, "write_atomic", failing(errno.EACCES))
    with pytest.raises(OSError) as caught:
        ck.save({"step": 2}, 2)
    assert type(caught.value) is PermissionError and caught.value.errno == errno.EACCES
    assert not ck.record_path(2).exists()


def test_the_tmp_file_is_one_that_remove_temporaries_deletes(tmp_path):
    """A second code path for the name: ``remove_temporaries`` run while a write is under way finds and
    deletes exactly its temporary file, so that write cannot rename it and fails (FileNotFoundError), leaving
    no target. Negative control: a file of another name (``target.bin.tmp``, not hidden) is kept."""
    target = tmp_path / "target.bin"
    (tmp_path / "target.bin.tmp").write_text("keep")
    removed = []

    def write(f):
        f.write(b"x")
        removed.extend(remove_temporaries(tmp_path))

    with pytest.raises(FileNotFoundError):
        _io.write_atomic(target, write)
    assert len(removed) == 1 and removed[0].parent == tmp_path and TMP_NAME.match(removed[0].name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target.bin.tmp"]


STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[+-]\d{4}$")  # time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _assert_stamp_between(text: str, before: float, after: float) -> None:
    """``text`` is a local ``%Y-%m-%dT%H:%M:%S%z`` stamp of a moment in ``[before, after]`` (whole seconds).

    The lower bound allows one clock tick: ``time.strftime`` reads C's ``time()``, which glibc serves from the
    coarse real-time clock, up to a tick behind ``time.time()`` (here 1,622 of 390,857 ``localtime()`` calls in
    3 s still said the previous second, up to 7 ms after it ended; CI saw a stamp of 06:31:45 for a ``before`` of
    06:31:46.002)."""
    assert STAMP.match(text), text
    moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    assert math.floor(before - 0.05) <= moment <= after, (text, before, after)


def test_config_hash_is_the_sha256_of_sorted_json_whatever_the_key_order():
    """Two TOML texts with the keys in either order hash alike, to SHA-256 of ``{"a": 2, "b": {"x": 1, "y":
    2}}`` (keys sorted, computed by hand); negative control: another value, another hash."""
    expected = hashlib.sha256(b'{"a": 2, "b": {"x": 1, "y": 2}}').hexdigest()
    assert config_hash("b = { y = 2, x = 1 }\na = 2\n") == expected
    assert config_hash("a = 2\nb = { x = 1, y = 2 }\n") == expected
    assert config_hash("a = 3\nb = { x = 1, y = 2 }\n") != expected


def test_write_marker_writes_format_stamp_and_hash_once(tmp_path):
    """run.json: format 1, a creation stamp of now, the hash given; a second call keeps the first marker."""
    before = time.time()
    write_marker(tmp_path, "abc")
    after = time.time()
    marker = json.loads((tmp_path / "run.json").read_text())
    assert set(marker) == {"format", "created", "config_sha256"}
    assert marker["format"] == 1 and marker["config_sha256"] == "abc"
    _assert_stamp_between(marker["created"], before, after)
    write_marker(tmp_path, "other")
    assert json.loads((tmp_path / "run.json").read_text()) == marker


def test_checkpoint_steps_records_and_the_checks_of_load(tmp_path):
    """``steps`` lists the step numbers of ``step-N.pt`` names only, ascending; a saved checkpoint's record
    holds its step, the SHA-256 and size of the file as hashlib and stat give them, and the meta; a file
    shorter than its record says is told by its size, a state of another step by its step."""
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for name in (
        "step-00000010.pt",
        "step-5.pt",
        "step-00000002.pt",
        "step-3.json",
        "other.pt",
        ".step-7.pt.x.tmp",
    ):
        (folder / name).write_bytes(b"")
    assert Checkpoints(folder).steps() == [2, 5, 10]

    ck = Checkpoints(tmp_path / "saved", keep=5)
    path = ck.save({"step": 3, "w": torch.ones(4)}, 3, meta={"config_sha256": "abc"})
    data = path.read_bytes()
    assert ck.record(3) == {
        "step": 3,
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
        "config_sha256": "abc",
    }
    path.write_bytes(data[:-7])
    with pytest.raises(
        CorruptCheckpointError, match=rf"it has {len(data) - 7} bytes, its record says {len(data)}$"
    ):
        ck.load(3)
    torch.save({"step": 4}, path)
    fresh = path.read_bytes()
    ck.record_path(3).write_text(
        json.dumps({"step": 3, "bytes": len(fresh), "sha256": hashlib.sha256(fresh).hexdigest()})
    )
    with pytest.raises(CorruptCheckpointError, match=r"it does not hold the state of step 3$") as caught:
        ck.load(3)
    assert caught.value.path == path


def test_check_folder_reads_the_marker_of_a_resumed_folder(tmp_path):
    """A folder with its config.toml and a run.json: resumable when run.json records this configuration's
    hash; refused when it records another, or cannot be read."""
    text = 'task = "teacher_student"\nseed = 0\n'
    resolved = {"task": "teacher_student", "seed": 0}
    (tmp_path / "config.toml").write_text(text)
    (tmp_path / "run.json").write_text(json.dumps({"format": 1, "config_sha256": config_hash(text)}))
    check_folder(tmp_path, text, resolved, resume=True)
    (tmp_path / "run.json").write_text(json.dumps({"format": 1, "config_sha256": "0" * 64}))
    with pytest.raises(RunFolderError, match="not the configuration its run started with"):
        check_folder(tmp_path, text, resolved, resume=True)
    (tmp_path / "run.json").write_text("{damaged")
    with pytest.raises(RunFolderError, match=r"run\.json is unreadable \("):
        check_folder(tmp_path, text, resolved, resume=True)


# the run folder's errors (meanfield.runs.errors, below every module that raises them)


def test_an_access_error_is_an_os_error_and_a_run_folder_error_that_reads_as_its_message():
    """The command line maps a FolderAccessError to exit 1 (the machine refused) and any other RunFolderError to
    exit 2 (the input): both catches must see it, and its text is the one line that names the file (a plain
    OSError would print ``[Errno 28] …`` before it: the negative control)."""
    error = DiskFullError(
        errno.ENOSPC, "no space left on device writing run/config.toml; the earlier files are intact"
    )
    assert (
        isinstance(error, FolderAccessError)
        and isinstance(error, RunFolderError)
        and isinstance(error, OSError)
    )
    assert error.errno == errno.ENOSPC
    assert str(error) == "no space left on device writing run/config.toml; the earlier files are intact"
    plain = OSError(errno.ENOSPC, "no space left on device writing run/config.toml")
    assert str(plain).startswith("[Errno 28]")


@pytest.mark.parametrize("error", [
    RunFolderError("run/environment.json is unreadable (not a JSON object): restore it from a copy"),
    FolderAccessError(errno.EROFS, "cannot write run/.lock: the file system is read-only"),
    DiskFullError(errno.ENOSPC, "no space left on device writing run/metrics.jsonl"),
])  # fmt: skip
def test_the_errors_cross_processes_with_their_class_errno_and_message(error):
    """A sweep's worker sends its point's error to the parent by pickling it."""
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error)
    assert getattr(back, "errno", None) == getattr(error, "errno", None)


def test_write_error_says_what_to_do_for_a_read_only_file_system_and_a_denied_write():
    """``write_error``'s two access messages, whole: the file named (from the error, or ``path`` when it names
    none), the cause and the remedy; an error outside the access errnos is returned as it is."""
    rofs = folder_mod.write_error(OSError(errno.EROFS, "Read-only file system", "run/metrics.jsonl"))
    assert str(rofs) == (
        "cannot write run/metrics.jsonl: the file system is read-only; remount it read-write, or copy the folder "
        "to a writable place and run there"
    )
    denied = folder_mod.write_error(OSError(errno.EACCES, "Permission denied"), path="run/summary.json")
    assert str(denied) == (
        "cannot write run/summary.json: permission denied (Permission denied); give this user write access to "
        "the folder, or use another --out"
    )
    other = OSError(errno.EIO, "I/O error")
    assert folder_mod.write_error(other) is other
