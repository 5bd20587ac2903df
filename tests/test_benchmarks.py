"""The benchmark scripts still run (tiny sizes, results to a temporary folder). Their timings are not judged here."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.parametrize(
    "script, args",
    [
        ("sde.py", ["--smoke", "--out", "{tmp}/sde.md"]),
        ("wasserstein.py", ["--smoke", "--out", "{tmp}/wasserstein.md"]),
        ("sinkhorn.py", ["--smoke", "--out", "{tmp}/sinkhorn.md"]),
        ("kernels.py", ["--smoke", "--out", "{tmp}/kernels.md"]),
        (
            "attention.py",
            ["--M", "8", "--batch", "1", "--seq", "16", "--repeats", "1", "--out", "{tmp}/attention.md"],
        ),
        ("optim.py", ["--params", "0.05", "--rounds", "2", "--warmup", "1", "--no-write"]),
        ("runs.py", ["--steps", "6", "--rounds", "1", "--out", "{tmp}/runs.md"]),
        ("parallel_lm.py", ["--smoke", "--out", "{tmp}/parallel_lm.md"]),
    ],
)
def test_benchmark_script_runs(script, args, tmp_path):
    argv = [a.format(tmp=tmp_path) for a in args]
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *argv],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "|" in run.stdout  # it printed its table
