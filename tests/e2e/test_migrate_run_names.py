"""experiments/migrate_run_names.py: a sweep folder written under the former point names (``key=value`` joined by
``,``) is renamed to :func:`meanfield.runs.sweeps.point_name`'s, given point.json and runs.csv's folder column, and
the files naming its old paths are rewritten; a dry run changes nothing, a second run finds nothing to do, a
folder whose config.toml does not hold its point is left alone (the negative control)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from meanfield.runs.sweeps import _legacy_point_name, expand, point_name

ROOT = Path(__file__).resolve().parents[2]
GRID, SEEDS = {"optim.lr": [0.02, 0.05]}, [0, 1]


def _script():
    spec = importlib.util.spec_from_file_location("migrate_run_names", ROOT / "experiments" / "migrate_run_names.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _legacy_sweep(root: Path) -> Path:
    """``root/results/lr``: a sweep as written before point names were safe: old folder names, no point.json,
    runs.csv without a folder column; and a report naming one run folder by its path."""
    sweep = root / "results" / "lr"
    sweep.mkdir(parents=True)
    spec = {"config": "teacher.toml", "preset": "smoke", "overrides": ["train.steps=10"], "grid": GRID,
            "seeds": SEEDS, "baseline": None}  # fmt: skip
    (sweep / "sweep.json").write_text(json.dumps(spec))
    rows = ["optim.lr,seed,status,test_mse"]
    for point in expand(GRID, SEEDS):
        folder = sweep / _legacy_point_name(point)
        folder.mkdir()
        (folder / "config.toml").write_text(f"seed = {point['seed']}\n\n[optim]\nlr = {point['optim.lr']}\n")
        (folder / "environment.json").write_text("{}")
        rows.append(f"{point['optim.lr']},{point['seed']},finished,1.0")
    (sweep / "runs.csv").write_text("\n".join(rows) + "\n")
    # files name run folders by their path from the repository (here, outside it, the absolute path)
    (root / "results" / "report.md").write_text(f"see {sweep.resolve()}/optim.lr=0.05,seed=1/metrics.jsonl\n")
    return sweep


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_migration_renames_writes_point_json_and_the_folder_column_and_is_idempotent(tmp_path, capsys):
    migrate = _script()
    sweep = _legacy_sweep(tmp_path)
    before = _tree(tmp_path)
    assert migrate.main([str(tmp_path / "results"), "--dry-run"]) == 0
    assert _tree(tmp_path) == before  # a dry run changes nothing
    assert "would rename" in capsys.readouterr().out

    assert migrate.main([str(tmp_path / "results")]) == 0
    for point in expand(GRID, SEEDS):
        folder = sweep / point_name(point)
        assert folder.is_dir() and not (sweep / _legacy_point_name(point)).exists()
        record = json.loads((folder / "point.json").read_text())
        assert record["point"] == point and record["preset"] == "smoke"
        assert record["overrides"] == ["train.steps=10", f"optim.lr={point['optim.lr']}", f"seed={point['seed']}"]
    header, *rows = (sweep / "runs.csv").read_text().splitlines()
    assert header == "optim.lr,seed,folder,status,test_mse"
    assert rows[3] == "0.05,1,optim.lr=0.05_seed=1,finished,1.0"
    report = (tmp_path / "results" / "report.md").read_text()
    assert report == f"see {sweep.resolve()}/optim.lr=0.05_seed=1/metrics.jsonl\n"

    after = _tree(tmp_path)
    capsys.readouterr()
    assert migrate.main([str(tmp_path / "results")]) == 0
    assert _tree(tmp_path) == after  # a second run finds nothing to do
    assert "0 folders renamed, 0 point.json written, 0 runs.csv" in capsys.readouterr().out


def test_a_folder_whose_config_is_not_its_point_is_left_alone(tmp_path, capsys):
    """Negative control: the folder named lr = 0.05, seed 1 holds lr = 0.5: it keeps its name (the other three
    are migrated), the files that name it keep its path, runs.csv is left as it was, and the script exits with
    status 1, saying why."""
    migrate = _script()
    sweep = _legacy_sweep(tmp_path)
    wrong = sweep / "optim.lr=0.05,seed=1"
    (wrong / "config.toml").write_text("seed = 1\n\n[optim]\nlr = 0.5\n")
    assert migrate.main([str(tmp_path / "results")]) == 1
    out = capsys.readouterr().out
    assert "left alone:" in out and "config.toml has optim.lr = 0.5, not 0.05" in out
    assert wrong.is_dir() and not (sweep / "optim.lr=0.05_seed=1").exists()
    assert (sweep / "optim.lr=0.02_seed=0" / "point.json").is_file()  # the others are migrated
    # files keep naming the folder that was not renamed, and runs.csv gets no folder cell that would be wrong
    report = (tmp_path / "results" / "report.md").read_text()
    assert report == f"see {sweep.resolve()}/optim.lr=0.05,seed=1/metrics.jsonl\n"
    assert (sweep / "runs.csv").read_text().splitlines()[0] == "optim.lr,seed,status,test_mse"
