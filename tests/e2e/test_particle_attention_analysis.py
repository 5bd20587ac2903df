"""``experiments/particle_attention/analysis.py`` on a machine without the quick sweeps' checkpoints (they are
not committed): it must refuse and leave the committed ``results/analysis.md`` as it is, never rewrite it
with an empty table."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "particle_attention" / "analysis.py"


def test_analysis_without_checkpoints_refuses_and_keeps_the_committed_table(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("pa_analysis_test", SCRIPT)
    analysis = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(analysis)
    run = tmp_path / "quick_mha" / "run0"
    run.mkdir(parents=True)
    (run / "config.toml").write_text('seed = 0\n[model]\nattention = "mha"\n')  # a run, no checkpoints/
    table = tmp_path / "analysis.md"
    table.write_text("the committed table\n")
    monkeypatch.setattr(analysis, "RESULTS", tmp_path)
    measured = []
    monkeypatch.setattr(analysis, "measure", lambda r: measured.append(r))
    with pytest.raises(SystemExit, match="no run of the quick sweeps has checkpoints"):
        analysis.main()
    assert table.read_text() == "the committed table\n" and measured == []
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "step-00000001.pt").write_bytes(b"")
    monkeypatch.setattr(analysis, "measure", lambda r: {"loss": 1.0})
    monkeypatch.setattr(analysis, "init_scale", lambda: "init table")
    analysis.main()  # control: with a checkpoint the table is rewritten, with the run's row
    assert "| MHA baseline | 1 | 1.000" in table.read_text()
