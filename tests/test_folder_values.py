"""The run folder's files (checkpoints with their records, metrics.jsonl, summary.json), value by value.

Each test writes a folder by hand (or damages one that :class:`Checkpoints` wrote) and asserts the exact result
or the exact error: which file, which reason, which numbers. ``tests/test_reliability.py`` covers the same code
through whole runs; here every branch of the verification is reached in a few milliseconds.
"""

from __future__ import annotations

import errno
import hashlib
import json
from pathlib import Path

import pytest
import torch

from meanfield.runs.folder import (
    Checkpoints,
    CorruptCheckpointError,
    DiskFullError,
    MetricsLog,
    RunResult,
    config_differences,
    disk_full,
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


class _Pickled:
    """Not on torch's weights-only allow-list: a pickle that runs code would load only with weights_only=False."""


def test_a_checkpoint_that_needs_full_pickle_is_refused(tmp_path):
    ck = _checkpoints(tmp_path, 1)
    _overwrite(ck, 1, {"step": 1, "object": _Pickled()})
    with pytest.raises(
        CorruptCheckpointError,
        match=r"weights_only=True\) refused it: .* \(GLOBAL test_folder_values\._Pickled\); a run never writes",
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
