"""The benchmark scripts run and write their own provenance; the results of different machines stay apart; the
docs page is the one ``benchmarks/report.py`` generates from the results files. Timings are never judged here:
every assertion is about what is recorded, not about how fast anything ran.
"""

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"


def _load(name: str):
    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))  # for their `from _common import …`, after everything else
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


common = _load("_common")
report = _load("report")


def _run(script: str, argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCH / script), *argv], capture_output=True, text=True, timeout=600
    )


def _tables_are_labelled(text: str) -> bool:
    """Every Markdown table in ``text`` has the machine label two lines above its first row."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("|") and not lines[i - 1].startswith("|")]
    return bool(starts) and all(
        i >= 2 and lines[i - 1] == "" and lines[i - 2].startswith("_on ") for i in starts
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "script, args",
    [
        ("sde.py", ["--smoke", "--out", "{tmp}/sde.md"]),
        ("wasserstein.py", ["--smoke", "--out", "{tmp}/wasserstein.md"]),
        ("entropy.py", ["--smoke", "--out", "{tmp}/entropy.md"]),
        ("sinkhorn.py", ["--smoke", "--out", "{tmp}/sinkhorn.md"]),
        ("kernels.py", ["--smoke", "--out", "{tmp}/kernels.md"]),
        (
            "attention.py",
            ["--M", "8", "--batch", "1", "--seq", "16", "--repeats", "1", "--out", "{tmp}/attention.md"],
        ),
        ("optim.py", ["--params", "0.05", "--rounds", "2", "--warmup", "1", "--out", "{tmp}/optim.md"]),
        ("runs.py", ["--steps", "6", "--rounds", "1", "--out", "{tmp}/runs.md"]),
        ("parallel_lm.py", ["--smoke", "--out", "{tmp}/parallel_lm.md"]),
        ("peers.py", ["--smoke", "--out", "{tmp}/peers.md"]),  # engines not installed: skipped with a note
    ],
)
def test_benchmark_script_runs_and_records_its_provenance(script, args, tmp_path):
    argv = [a.format(tmp=tmp_path) for a in args]
    run = _run(script, argv)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "|" in run.stdout  # it printed its table
    text = Path(argv[argv.index("--out") + 1]).read_text()
    recorded = common.parse_provenance(text)
    assert recorded["command"] == shlex.join(["python", f"benchmarks/{script}", *argv])
    assert recorded["machine"] == common.machine_slug() and recorded["load_end"] is not None
    assert _tables_are_labelled(text)


def test_the_provenance_is_what_the_run_was(tmp_path):
    out = tmp_path / "w.md"
    argv = ["--smoke", "--budget", "0.01", "--out", str(out)]
    run = _run("wasserstein.py", argv)
    assert run.returncode == 0, run.stderr[-3000:]
    text = out.read_text()
    got = common.parse_provenance(text)
    assert got["command"] == f"python benchmarks/wasserstein.py --smoke --budget 0.01 --out {out}"
    # negative control: the same run without a flag would be recorded differently
    assert got["command"] != common.command_line(BENCH / "wasserstein.py", ["--smoke", "--out", str(out)])
    # the commit of the meanfield the script imported (an editable install may be another tree than ROOT)
    where = subprocess.run(
        [sys.executable, "-c", "import meanfield, os; print(os.path.dirname(meanfield.__file__))"],
        capture_output=True, text=True, cwd=BENCH,
    ).stdout.strip()  # fmt: skip
    head = subprocess.run(["git", "-C", where, "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # a checkout (not an unpacked sdist)
        assert got["commit"] == head.stdout.strip() and isinstance(got["dirty"], bool)
    assert got["cpu"] == f"{common.cpu_model()}, {os.cpu_count()} cores"
    assert got["cpu_flags"] == common.cpu_flags() and set(got["cpu_flags"]) == set(common.CPU_FLAGS)
    assert got["versions"]["torch"] == torch.__version__
    assert got["versions"]["numpy"] == np.__version__
    assert got["threads"]["torch"] == torch.get_num_threads()
    assert got["threads"]["OMP_WAIT_POLICY"] == "PASSIVE"  # the script sets it before torch, if unset
    assert len(got["load_start"]) == len(got["load_end"]) == 3
    assert got["started"] <= got["finished"]
    # the reader's list says the same as the JSON record
    assert f"- command: `{got['command']}`" in text
    assert f"- machine: {got['machine']} — {got['cpu']}" in text
    assert _tables_are_labelled(text)
    assert "| case | n | ours | POT | floor | POT/ours | ours/floor |" in text  # the floor beside the peer
    assert "| 1-D exact | 5e+02 |" in text
    assert "identical arrays" in text and "| NO |" not in text  # np.sort and torch.sort sort alike


def test_a_file_without_provenance_is_told_apart():
    legacy = "Command: `python benchmarks/sde.py` — 2026-11-30 16:13 UTC\n\n| a |\n|---|\n| 1 |\n"
    assert common.parse_provenance(legacy) is None
    assert "before issue 31" in report.recorded(legacy)
    assert not _tables_are_labelled(legacy)


def test_a_dirty_run_with_the_committed_source_says_so():
    """A dirty run whose (commit, meanfield source sha256) is that of a clean run ran meanfield as committed
    (its tree differed elsewhere, e.g. in results files); another source hash, or no clean run of that
    commit, stays a plain "dirty tree" (the negative controls)."""

    def text(dirty: bool, sha: str, commit: str = "c" * 40) -> str:
        info = {"command": "x", "commit": commit, "dirty": dirty, "source_sha256": sha, "started": "t0",
                "load_start": [1.0, 1.0, 1.0], "load_end": [2.0, 2.0, 2.0]}  # fmt: skip
        return f"<!-- {common.PROVENANCE_TAG} {json.dumps(info)} -->"

    clean = {("c" * 40, "s1")}
    assert report.recorded(text(True, "s1"), clean).endswith(
        ", dirty tree (meanfield source as committed), 1-minute load 1.00 → 2.00"
    )
    assert ", dirty tree, " in report.recorded(text(True, "s2"), clean)
    assert ", dirty tree, " in report.recorded(text(True, "s1", commit="d" * 40), clean)
    assert "dirty" not in report.recorded(text(False, "s1"), clean)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("Intel(R) Xeon(R) Processor", "intel-xeon"),
        ("AMD EPYC", "amd-epyc"),
        ("AMD EPYC 7B13 64-Core Processor", "amd-epyc-7b13-64-core"),
        ("Intel(R) Xeon(R) CPU @ 2.20GHz", "intel-xeon"),
        ("NVIDIA H200", "nvidia-h200"),
    ],
)
def test_machine_names_become_folder_names(name, expected):
    assert common.slug(name) == expected


def test_bad_machine_and_results_names_are_refused():
    with pytest.raises(ValueError, match="no letters or digits"):
        common.slug("(R) @ 3GHz")
    for bad in ("", "a/b", "wasserstein.md"):
        with pytest.raises(ValueError, match="bare word"):
            common.result_path(bad)
    assert common.result_path("sde") == RESULTS / common.machine_slug() / "sde.md"


def test_results_of_different_machines_are_kept_apart():
    for path in RESULTS.glob("*.md"):  # a file outside a machine's folder says nothing of its machine
        assert common.parse_provenance(path.read_text()) is None, f"{path} belongs in its machine's folder"
    for path in RESULTS.glob("*/*.md"):
        recorded = common.parse_provenance(path.read_text())
        if recorded is not None:
            assert recorded["machine"] == path.parent.name, path
            assert _tables_are_labelled(path.read_text()), path


def test_the_docs_page_is_generated_from_the_results_files():
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert page == report.render(), "docs/benchmarks.md is stale: run python benchmarks/report.py"
    for path in RESULTS.glob("*/*.md"):  # every results file, a new benchmark's too
        assert f'--8<-- "{path.relative_to(ROOT).as_posix()}"' in page, path


def test_the_page_follows_its_results(tmp_path):
    # negative control: a new machine's file changes the page, in its own subsection and summary rows
    results = tmp_path / "results"
    machine = results / "test-machine"
    machine.mkdir(parents=True)
    provenance = {"started": "2026-12-01 12:00:00 UTC", "commit": "0123456789abcdef", "dirty": False,
                  "load_start": [0.5, 0.5, 0.5], "load_end": [0.7, 0.6, 0.5], "machine": "test-machine"}  # fmt: skip
    (machine / "wasserstein.md").write_text(
        "# W2\n\n<!-- benchmark-provenance " + json.dumps(provenance) + " -->\n\n"
        "- target 1-D exact at n = 1e5 ≤ 3 ms: 9 ms, **missed**\n"
    )
    page = report.render(results)
    assert page != report.render()
    assert "### wasserstein on test-machine" in page
    row = re.search(r"^\| \[wasserstein\].*\| test-machine \| (.*) \| (.*) \|$", page, re.M)
    assert row and "0123456789" in row.group(1) and "0.50 → 0.70" in row.group(1)
    assert row.group(2) == "target 1-D exact at n = 1e5 ≤ 3 ms: 9 ms, **missed**"
    assert "No results file yet" in page  # the sections without a file here say so


def test_the_stale_text_is_gone():
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert "Found by reading" not in page  # both items described code that has since changed
    assert "map_location=device" not in page and "torch.tensor(2·scale" not in page
    kernels = (RESULTS / "amd-epyc" / "kernels.md").read_text()
    assert "python benchmarks/kernels.py --cap 90" in kernels  # the command its "> 90 s" rows show
    distributed = (RESULTS / "amd-epyc" / "distributed.md").read_text()
    steps = re.search(r"(\d+) Euler–Maruyama steps", distributed).group(1)
    command = re.search(r"`(python benchmarks/distributed\.py[^`]*)`", distributed).group(1)
    assert command.endswith(f"--steps {steps}")  # the command states the steps the text gives


def test_run_all_reruns_each_results_file_with_its_recorded_command():
    """``benchmarks/run_all.sh`` holds, for every results file with provenance on this repo's CPU machine kinds,
    the exact command the file records (so a rerun rewrites each with the same flags); a command it does not
    hold (a deliberately wrong one) is told apart."""
    script = (BENCH / "run_all.sh").read_text()
    commands = {
        "python " + line.strip()[len("run ") :]
        for line in script.splitlines()
        if line.strip().startswith("run benchmarks/")
    }
    assert "python benchmarks/wasserstein.py --bogus" not in commands
    for path in RESULTS.glob("*/*.md"):
        recorded = common.parse_provenance(path.read_text())
        if recorded is not None and recorded["device"] == "cpu":
            assert recorded["command"] in commands, f"{path}: {recorded['command']} is not in run_all.sh"


@pytest.mark.slow
def test_benchmark_script_runs(tmp_path):
    """``benchmarks/kinetic.py --smoke`` runs and writes its table (the timings are not judged here)."""
    import subprocess
    import sys

    out = tmp_path / "kinetic.md"
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "kinetic.py"), "--smoke", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "| kinetic baoab |" in out.read_text() and "load average" in out.read_text()
