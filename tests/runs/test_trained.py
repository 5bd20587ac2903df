"""``meanfield.runs.trained``: a run folder's checkpoint back as the model that wrote it, and a sweep's runs
selected by their resolved configuration.

The model check is exact: the model :func:`load_model` rebuilds from a finished run folder evaluates to the
very validation metrics the run logged at its last step (same weights, same held-out blocks, same probes; any
wrong weight, step or data changes them); an earlier step's weights are the checkpoint's, and a changed byte
is refused (the negative control).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from meanfield.runs import Checkpoints, CorruptCheckpointError, TrainedModel, find_runs, load_model, run

ROOT = Path(__file__).resolve().parents[2]
SCALE = ROOT / "experiments" / "particle_attention" / "scale.toml"


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished smoke run of the 6 × 256 study's M = 8, β = 1e-3 arm (8 steps, checkpoints at 4 and 8)."""
    folder = tmp_path_factory.mktemp("trained") / "p8-b1e-3"
    run(SCALE, folder, preset="smoke", overrides=["optim.beta=1e-3"], quiet=True)
    return folder


def test_load_model_evaluates_to_the_metrics_the_run_logged(finished):
    trained = load_model(finished)
    assert isinstance(trained, TrainedModel) and trained.step == 8 and trained.folder == finished
    assert not trained.model.training
    with torch.no_grad():
        metrics = trained.experiment.evaluate()
    final = json.loads((finished / "summary.json").read_text())["final"]
    for key in ("val_loss", "half_random_gap", "corrupt_loss", "head_sim"):
        assert metrics[key] == final[key], key  # bit for bit: the same weights, blocks and draws
    assert trained.config.optim["beta"] == 1e-3 and trained.data.probe_blocks == 4


def test_load_model_takes_an_earlier_step_with_that_checkpoints_weights(finished):
    early = load_model(finished, step=4)
    state = Checkpoints(finished / "checkpoints").load(4)["model"]
    assert early.step == 4
    got = early.model.state_dict()
    assert all(torch.equal(got[k], state[k]) for k in state)
    late = load_model(finished).model.state_dict()
    assert not all(torch.equal(got[k], late[k]) for k in state)  # control: step 8 is another model


def test_load_model_refuses_a_missing_step_a_missing_checkpoint_and_a_non_run(finished, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at step 5; it has steps \[4, 8\]"):
        load_model(finished, step=5)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.toml").write_text((finished / "config.toml").read_text())
    with pytest.raises(FileNotFoundError, match="has no checkpoint"):
        load_model(bare)
    with pytest.raises(FileNotFoundError, match="no config.toml"):
        load_model(tmp_path)


def test_load_model_refuses_a_changed_checkpoint(finished, tmp_path):
    copy = tmp_path / "copy"
    (copy / "checkpoints").mkdir(parents=True)
    (copy / "config.toml").write_text((finished / "config.toml").read_text())
    for f in (finished / "checkpoints").iterdir():
        (copy / "checkpoints" / f.name).write_bytes(f.read_bytes())
    path = Checkpoints(copy / "checkpoints").path(8)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="SHA-256"):
        load_model(copy)
    assert load_model(copy, step=4).step == 4  # the intact checkpoint still loads


def _fake_sweep(root: Path) -> Path:
    runs = {
        "b": 'seed = 1\n[optim]\nbeta = 1e-3\n[model]\nattention = "particle"\nn_heads = 8\n',
        "a": 'seed = 0\n[optim]\nbeta = 1e-3\n[model]\nattention = "particle"\nn_heads = 8\n',
        "c": 'seed = 0\n[optim]\nbeta = 0.0\n[model]\nattention = "mha"\nn_heads = 8\nsizes = [8, 16]\n',
    }
    for name, text in runs.items():
        (root / name).mkdir()
        (root / name / "config.toml").write_text(text)
    (root / "stray").mkdir()  # no config.toml: not a run
    (root / "notes.txt").write_text("x")
    return root


def test_find_runs_selects_by_the_resolved_values_ordered_by_seed(tmp_path):
    sweep = _fake_sweep(tmp_path)
    assert [p.name for p in find_runs(sweep, {"optim.beta": "1e-3"})] == ["a", "b"]  # seed 0, then 1
    assert [p.name for p in find_runs(sweep, {"optim.beta": 0.001})] == ["a", "b"]  # a number as it is
    assert [p.name for p in find_runs(sweep, {"optim.beta": "0"})] == ["c"]  # 0 == 0.0
    assert [p.name for p in find_runs(sweep, {"model.attention": "mha"})] == ["c"]  # plain string
    assert [p.name for p in find_runs(sweep, {"model.sizes": "[8, 16]"})] == ["c"]  # a TOML list
    assert [p.name for p in find_runs(sweep, {"seed": 0, "optim.beta": "1e-3"})] == ["a"]
    assert [p.name for p in find_runs(sweep)] == ["a", "c", "b"]  # by seed, then name
    assert find_runs(sweep, {"optim.beta": "1e-4"}) == []  # control: a value no run has
    assert find_runs(sweep, {"optim.lr": 1e-3}) == []  # a key no run has never matches
    assert find_runs(sweep, {"model.attention.kind": "x"}) == []  # through a value, not a table


def test_find_runs_refuses_a_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        find_runs(tmp_path / "absent", {})
