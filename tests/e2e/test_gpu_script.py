"""The GPU script fits a lent device's 15 minutes, and runs end to end without CUDA (its dry run).

The time plan: the stages' caps add up to at most ``--budget`` (less what the summary needs), a budget too
small is refused before anything runs, and the default budget leaves room for one retry and two machine
starts. The dry runs: ``bash benchmarks/gpu.sh --dry-run`` prints the plan, skips the CUDA tests, runs the
benchmark and experiment stages at smoke sizes and writes and packs results with their provenance;
``bash benchmarks/gpu_prepare.sh --dry-run`` says what it would fetch (a wheel per Python for the compiled
POT, pure wheels once) and writes nothing. No test here depends on how fast anything runs.
"""

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def _load_gpu():
    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))  # for their `from _common import …`, after everything else
    spec = importlib.util.spec_from_file_location("benchmarks_gpu", BENCH / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


gpu = _load_gpu()
ALL_STAGES = gpu.stage_names([], gpu.experiment_names())


@pytest.mark.parametrize("budget", [107.0, 150.0, 299.0, 300.0, 450.0, 1000.0])
@pytest.mark.parametrize(
    "skip", [[], ["tests"], ["tests", "optim", "attention"], ["experiments"], ["sde", "optim", "attention"]]
)
def test_the_stage_caps_add_up_to_at_most_the_budget(budget, skip):
    names = gpu.stage_names(skip, gpu.experiment_names())
    caps = gpu.plan_caps(budget, names)
    assert list(caps) == names  # every stage planned, in order
    assert sum(caps.values()) <= budget - gpu.FINISH_S
    assert min(caps.values()) >= gpu.MIN_CAP_S
    assert all(cap == int(cap) for cap in caps.values())  # whole seconds, rounded down


def test_a_budget_too_small_is_refused_before_anything_runs():
    # negative control: 60 s cannot give 8 stages 5 s each after the summary's 10 s
    with pytest.raises(ValueError, match="too small for 8 stages"):
        gpu.plan_caps(60.0, ALL_STAGES)
    with pytest.raises(ValueError, match="no stage to plan"):
        gpu.plan_caps(300.0, [])
    run = subprocess.run(
        [sys.executable, str(BENCH / "gpu.py"), "--plan", "--budget", "60"], capture_output=True, text=True
    )
    assert run.returncode != 0 and "too small" in run.stderr


def test_the_default_budget_leaves_time_for_one_retry():
    assert gpu.DEFAULT_BUDGET_S == 300.0 and gpu.RUN_LIMIT_S == 360.0
    assert gpu.DEFAULT_BUDGET_S < gpu.RUN_LIMIT_S  # the header, the wheels and the transfers fit beside it
    assert 2 * (gpu.RUN_LIMIT_S + gpu.START_S) <= gpu.ALLOWANCE_S  # two tries, two machine starts


def test_the_printed_plan_is_the_planned_caps_and_their_sum():
    run = subprocess.run(
        [sys.executable, str(BENCH / "gpu.py"), "--plan", "--budget", "300"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    printed = dict(re.findall(r"^  (\S.*?)\s+cap\s+(\d+)$", run.stdout, re.M))
    caps = gpu.plan_caps(300.0, ALL_STAGES)
    assert {name: float(cap) for name, cap in printed.items()} == caps
    total = re.search(r"sum of the stage caps\s+(\d+) ≤ budget 300", run.stdout)
    assert total and float(total.group(1)) == sum(caps.values()) <= 290


def test_the_most_informative_experiment_runs_first():
    names = gpu.experiment_names()
    assert names[0] == "particle_attention"
    assert set(names) == {p.parent.name for p in ROOT.glob("experiments/*/config.toml")}
    assert gpu.experiment_names(["mean_field", "char_lm"]) == [
        "char_lm",
        "mean_field",
    ]  # the order, not the given
    with pytest.raises(SystemExit, match="no experiments/<name>/config.toml"):
        gpu.experiment_names(["no_such_experiment"])


def test_a_stage_that_times_out_keeps_its_stdout_and_stderr():
    # the child prints at once (no site import) and then waits far longer than its 4 s limit
    child = "import sys, time; print('to stdout', flush=True); print('to stderr', file=sys.stderr, flush=True); time.sleep(600)"
    out, err, code = gpu.run_limited([sys.executable, "-S", "-c", child], 4.0)
    assert code is None
    assert "to stdout" in out and "to stderr" in err
    out, err, code = gpu.run_limited([sys.executable, "-S", "-c", "import sys; sys.exit(3)"], 60.0)
    assert code == 3  # an exit is not a timeout


@pytest.mark.slow
def test_gpu_sh_dry_run_end_to_end(tmp_path):
    results, bundle = tmp_path / "results", tmp_path / "out"
    args = ["--dry-run", "--skip", "optim", "attention", "--experiments", "teacher_student",
            "--results", str(results), "--bundle", str(bundle)]  # fmt: skip
    run = subprocess.run(
        ["bash", str(BENCH / "gpu.sh"), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "DRY RUN on the CPU" in run.stdout
    caps = gpu.plan_caps(300.0, gpu.stage_names(["optim", "attention"], ["teacher_student"]))
    total = re.search(r"sum of the stage caps\s+(\d+) ≤ budget 300", run.stdout)
    assert total and float(total.group(1)) == sum(caps.values())
    folder = results / "cpu-dry-run"
    summary = (folder / "gpu.md").read_text()
    assert "| CUDA tests | " in summary and "| skipped: CUDA" in summary
    assert re.search(r"\| benchmarks/sde\.py \| \d+ \| ok \|", summary)
    assert re.search(r"\| experiment teacher_student \| \d+ \| ok \|", summary)
    assert "| teacher_student | ok | 4 |" in (folder / "gpu-runs.md").read_text()
    assert "| OU | 1e+04 |" in (folder / "sde-device.md").read_text()
    recorded = re.search(r"^- command: `(.*)`$", summary, re.M).group(1)
    assert recorded == shlex.join(["python", "benchmarks/gpu.py", *args])
    with tarfile.open(bundle / "gpu-results.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"cpu-dry-run/gpu.md", "cpu-dry-run/sde-device.md", "cpu-dry-run/gpu-runs.md"} <= names
    assert "cpu-dry-run/gpu-log.md" in names


def _tree_state() -> tuple:
    exclude = ROOT / ".git" / "info" / "exclude"
    gpu_dir = ROOT / ".gpu"
    files = sorted(str(p) for p in gpu_dir.rglob("*")) if gpu_dir.exists() else None
    return (exclude.read_text() if exclude.is_file() else None, files)


def test_gpu_prepare_dry_run_fetches_for_each_python_and_writes_nothing(tmp_path):
    data = tmp_path / "data" / "tinyshakespeare"
    data.mkdir(parents=True)
    (data / "input.txt").write_text("First Citizen:\n")
    env = {**os.environ, "MEANFIELD_DATA": str(tmp_path / "data")}
    before = _tree_state()
    run = subprocess.run(
        ["bash", str(BENCH / "gpu_prepare.sh"), "--dry-run", "--python", "3.11 3.12"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert _tree_state() == before  # nothing fetched, copied or written
    would = [line for line in run.stdout.splitlines() if "would run:" in line]
    assert any("--implementation py --abi none --platform any -d .gpu/whl torchsde" in w for w in would)
    for tag, version in (("cp311", "3.11"), ("cp312", "3.12")):
        assert any(f"--python-version {version} " in w and f"-d .gpu/whl/{tag} pot==" in w for w in would)
    assert any(w.strip().startswith("would run: cp ") and str(data / "input.txt") in w for w in would)
    # negative controls: a malformed version, a missing data file
    bad = subprocess.run(
        ["bash", str(BENCH / "gpu_prepare.sh"), "--dry-run", "--python", "3,12"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode == 2 and "versions like 3.12" in bad.stderr
    missing = subprocess.run(
        ["bash", str(BENCH / "gpu_prepare.sh"), "--dry-run"],
        capture_output=True,
        text=True,
        env={**env, "MEANFIELD_DATA": str(tmp_path / "nowhere")},
    )
    assert missing.returncode == 1 and "no " in missing.stderr
