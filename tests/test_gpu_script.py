"""benchmarks/gpu.py, the one script for a lent GPU, runs end to end without CUDA (its dry run): it says so,
skips the CUDA tests, runs the benchmark and experiment stages at smoke sizes, and writes and packs results."""

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_script_dry_run_end_to_end(tmp_path):
    results, bundle = tmp_path / "results", tmp_path / "out"
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu.py"),
            "--dry-run",
            "--skip",
            "optim",
            "attention",
            "--experiments",
            "teacher_student",
            "--results",
            str(results),
            "--bundle",
            str(bundle),
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "DRY RUN on the CPU" in run.stdout
    summary = (results / "gpu-cpu-dry-run.md").read_text()
    assert "| CUDA tests | skipped: CUDA" in summary or "| CUDA tests | skipped" in summary
    assert "| benchmarks/sde.py | ok |" in summary and "| experiments | ok |" in summary
    assert "| teacher_student | ok | 4 |" in (results / "gpu-cpu-dry-run-runs.md").read_text()
    assert "| OU | 1e+04 |" in (results / "sde-cpu-dry-run.md").read_text()
    with tarfile.open(bundle / "gpu-results.tar.gz") as tar:
        assert {"gpu-cpu-dry-run.md", "sde-cpu-dry-run.md", "gpu-cpu-dry-run-runs.md"} <= set(tar.getnames())
