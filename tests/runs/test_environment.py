"""Tests of :mod:`meanfield.runs.environment`."""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
import scipy
import torch

import meanfield
import meanfield.data
import meanfield.runs
import meanfield.runs.sweeps
import meanfield.shipped
import meanfield.stepping.solvers
import meanfield.studies.validation
from meanfield.runs.schema import RunConfig

env_mod = importlib.import_module("meanfield.runs.environment")  # meanfield.runs.environment is the function


STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[+-]\d{4}$")  # time.strftime("%Y-%m-%dT%H:%M:%S%z")


CPU = torch.device("cpu")


def _assert_stamp_between(text: str, before: float, after: float) -> None:
    """``text`` is a local ``%Y-%m-%dT%H:%M:%S%z`` stamp of a moment in ``[before, after]`` (whole seconds).

    The lower bound allows one clock tick: ``time.strftime`` reads C's ``time()``, which glibc serves from the
    coarse real-time clock, up to a tick behind ``time.time()`` (here 1,622 of 390,857 ``localtime()`` calls in
    3 s still said the previous second, up to 7 ms after it ended; CI saw a stamp of 06:31:45 for a ``before`` of
    06:31:46.002)."""
    assert STAMP.match(text), text
    moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    assert math.floor(before - 0.05) <= moment <= after, (text, before, after)


def _package_hash(root: Path) -> str:
    """SHA-256 over the ``.py`` files under ``root``, ordered by their path's parts: relative path, then bytes."""
    files = []
    for where, _, names in os.walk(root):
        files += [Path(where, n) for n in names if n.endswith(".py")]
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.relative_to(root).parts):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _git(cwd: Path, *args: str) -> str:
    command = ["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    command += ["-c", "commit.gpgsign=false", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=30).stdout.strip()


def test_environment_records_the_packages_seed_command_and_start(monkeypatch):
    """environment() against independent sources: numpy's and scipy's ``__version__``, the config's seed,
    ``sys.argv``, the OMP_WAIT_POLICY set here, a start stamp between the clock readings around the call, the
    source hash computed here over meanfield/*.py; on a CUDA device the name the driver gives (faked)."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.delenv("omp_wait_policy", raising=False)
    cfg = RunConfig(task="teacher_student", seed=7)
    before = time.time()
    info = env_mod.environment(cfg, CPU)
    after = time.time()
    assert info["packages"]["numpy"] == np.__version__ and info["packages"]["scipy"] == scipy.__version__
    assert info["packages"]["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert info["seed"] == 7 and info["command"] == sys.argv and info["OMP_WAIT_POLICY"] == "PASSIVE"
    assert info["device"] == "cpu" and "cuda_device" not in info
    assert info["threads"] == torch.get_num_threads() and info["cpu_count"] == os.cpu_count()
    assert info["python"] == platform.python_version()
    assert info["source_sha256"] == _package_hash(Path(meanfield.__file__).parent)
    _assert_stamp_between(info["started"], before, after)

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: f"Fake GPU on {device}")
    cuda = env_mod.environment(cfg, torch.device("cuda", 0))
    assert cuda["device"] == "cuda:0" and cuda["cuda_device"] == "Fake GPU on cuda:0"


def test_source_hash_covers_the_py_files_by_path_and_content(tmp_path, monkeypatch):
    """``_source_hash`` of a package laid out here equals SHA-256 of ``"a.py" + its bytes + "sub/b.py" + its
    bytes``, computed by hand; a non-.py file does not count (negative control: changing it keeps the hash,
    changing b.py does not)."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_bytes(b"x = 1\n")
    (tmp_path / "sub" / "b.py").write_bytes(b"y = 2\n")
    (tmp_path / "notes.txt").write_bytes(b"not code")
    monkeypatch.setattr(env_mod, "_PACKAGE", tmp_path)
    expected = hashlib.sha256(b"a.py" + b"x = 1\n" + b"sub/b.py" + b"y = 2\n").hexdigest()
    assert env_mod._source_hash() == expected
    (tmp_path / "notes.txt").write_bytes(b"changed")
    assert env_mod._source_hash() == expected
    (tmp_path / "sub" / "b.py").write_bytes(b"y = 3\n")
    assert env_mod._source_hash() != expected


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_commit_is_head_of_the_packages_repository_and_dirty_means_a_changed_tracked_file(
    tmp_path, monkeypatch
):
    """``_git_commit`` on a repository made here: the commit is ``git rev-parse HEAD`` (a 40-hex string);
    clean, and with only an untracked file, dirty is False; with a tracked file changed, True. Outside any
    repository both are None. Each git call is bounded by a 5 s timeout and read as text."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "f.txt").write_text("one\n")
    _git(repo, "add", "f.txt")
    _git(repo, "commit", "-q", "-m", "init")
    head = _git(repo, "rev-parse", "HEAD")
    assert re.fullmatch(r"[0-9a-f]{40}", head)
    monkeypatch.setattr(env_mod, "_PACKAGE", repo)
    calls = []
    real = subprocess.run

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(env_mod.subprocess, "run", recording)
    assert env_mod._git_commit() == {"commit": head, "dirty": False}
    assert [(c["timeout"], c["text"], c["errors"], c["check"], c["capture_output"]) for c in calls] == [
        (5, True, "replace", True, True)
    ] * 2
    (repo / "new.txt").write_text("untracked\n")
    assert env_mod._git_commit() == {"commit": head, "dirty": False}
    (repo / "f.txt").write_text("two\n")
    assert env_mod._git_commit() == {"commit": head, "dirty": True}

    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.setattr(env_mod, "_PACKAGE", plain)
    assert env_mod._git_commit() == {"commit": None, "dirty": None}


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_commit_exclude_ignores_changes_under_the_outputs_only(tmp_path, monkeypatch):
    """``_git_commit(exclude=...)``: a changed tracked file under an excluded folder (the benchmarks' results,
    relative to the checkout's top even when meanfield lives in a subfolder) leaves it clean; the same change
    elsewhere, or with no exclusion, makes it dirty (the negative controls)."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "results").mkdir()
    _git(repo, "init", "-q")
    (repo / "results" / "r.md").write_text("old\n")
    (repo / "code.py").write_text("x = 1\n")
    _git(repo, "add", "results/r.md", "code.py")
    _git(repo, "commit", "-q", "-m", "init")
    monkeypatch.setattr(env_mod, "_PACKAGE", repo / "pkg")  # git -C runs in a subfolder of the checkout
    (repo / "results" / "r.md").write_text("new\n")
    assert env_mod._git_commit(exclude=("results",))["dirty"] is False
    assert env_mod._git_commit()["dirty"] is True
    assert env_mod._git_commit(exclude=("other",))["dirty"] is True
    (repo / "code.py").write_text("x = 2\n")
    assert env_mod._git_commit(exclude=("results",))["dirty"] is True


def test_git_commit_without_git_is_none(monkeypatch):
    """No git executable (the OSError of subprocess.run): commit and dirty are None, no error."""

    def missing(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory: 'git'")

    monkeypatch.setattr(env_mod.subprocess, "run", missing)
    assert env_mod._git_commit() == {"commit": None, "dirty": None}


def test_cpu_model_is_the_text_after_the_first_colon_of_the_model_name_line(monkeypatch):
    """``_cpu_model`` on a /proc/cpuinfo written here: the first ``model name`` line's value (not the
    ``model`` line before it, the colon inside kept); without such a line, or without the file, what
    ``platform.processor()`` says (here faked), else ``platform.machine()``."""
    cpuinfo = {
        "text": "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel\t\t: 85\n"
        "model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz: rev A \nmodel name\t: second\n"
    }

    class FakePath:
        def __init__(self, path):
            assert path == "/proc/cpuinfo"

        def read_text(self):
            if cpuinfo["text"] is None:
                raise FileNotFoundError("/proc/cpuinfo")
            return cpuinfo["text"]

    monkeypatch.setattr(env_mod, "Path", FakePath)
    monkeypatch.setattr(platform, "processor", lambda: "fallback cpu")
    monkeypatch.setattr(platform, "machine", lambda: "fallback machine")
    assert env_mod._cpu_model() == "Intel(R) Xeon(R) CPU @ 2.20GHz: rev A"
    cpuinfo["text"] = "processor\t: 0\nmodel\t\t: 85\n"
    assert env_mod._cpu_model() == "fallback cpu"
    cpuinfo["text"] = None
    assert env_mod._cpu_model() == "fallback cpu"
    monkeypatch.setattr(platform, "processor", lambda: "")
    assert env_mod._cpu_model() == "fallback machine"


def test_cpu_model_of_this_machine_matches_proc_cpuinfo_read_by_hand():
    """On a Linux machine whose /proc/cpuinfo has a ``model name`` line: the same text, parsed here."""
    path = Path("/proc/cpuinfo")
    found = re.search(r"^model name\s*:(.*)$", path.read_text(), re.M) if path.exists() else None
    if found is None:
        pytest.skip("no model name line in /proc/cpuinfo here")
    assert env_mod._cpu_model() == found.group(1).strip()


def test_provenance_picks_the_five_keys_from_an_environment_record():
    """``provenance`` of a record written by hand: commit, dirty, source hash, the meanfield-sde and torch
    versions; a record without git or packages gives None for those."""
    env = {
        "git": {"commit": "abc", "dirty": True},
        "packages": {"meanfield-sde": "1.2.3", "torch": "2.0", "numpy": "2.1"},
        "source_sha256": "ff",
        "seed": 0,
    }
    assert env_mod.provenance(env) == {
        "commit": "abc",
        "dirty": True,
        "source_sha256": "ff",
        "meanfield": "1.2.3",
        "torch": "2.0",
    }
    assert env_mod.provenance({}) == dict.fromkeys(env_mod.PROVENANCE_KEYS)


def test_record_environment_compares_with_the_latest_of_several_earlier_records(tmp_path):
    """Four sessions with commits a, b, c, d: each write returns the change from the one before (``c → d``
    at the fourth, not ``b → d``), and the file holds the latest with the three earlier ones, oldest first.
    A damaged file is replaced, with no changes reported."""
    path = tmp_path / "environment.json"

    def env(commit: str) -> dict:
        return {"git": {"commit": commit, "dirty": False}, "packages": {"torch": "2.0"}, "seed": 0}

    assert env_mod.record_environment(path, env("a")) == []
    assert env_mod.record_environment(path, env("b")) == ["commit: a → b"]
    assert env_mod.record_environment(path, env("c")) == ["commit: b → c"]
    assert env_mod.record_environment(path, env("d")) == ["commit: c → d"]
    stored = json.loads(path.read_text())
    assert stored == {**env("d"), "earlier": [env("a"), env("b"), env("c")]}
    path.write_text("{damaged")
    assert env_mod.record_environment(path, env("e")) == []
    assert json.loads(path.read_text()) == {**env("e"), "earlier": []}


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_commit_reads_a_changed_file_whose_name_is_not_utf8(tmp_path, monkeypatch):
    """With ``core.quotePath=false`` git prints a path's raw bytes; a changed tracked file named ``caf\\xe9.txt``
    (Latin-1, not UTF-8) made ``_git_commit`` raise UnicodeDecodeError, which stopped every ``meanfield run`` in
    such a checkout before its first step. Now: the commit and dirty = True. Negative control: the clean tree
    is not dirty."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "core.quotePath", "false")
    name = os.path.join(os.fsencode(repo), b"caf\xe9.txt")
    with open(name, "wb") as f:
        f.write(b"one\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")
    head = _git(repo, "rev-parse", "HEAD")
    monkeypatch.setattr(env_mod, "_PACKAGE", repo)
    assert env_mod._git_commit() == {"commit": head, "dirty": False}
    with open(name, "wb") as f:
        f.write(b"two\n")
    assert env_mod._git_commit() == {"commit": head, "dirty": True}


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


PACKAGE_NAMES = ["meanfield-sde", "torch", "numpy", "scipy", "torchsde", "pot", "tensorboard"]


@pytest.fixture
def faked_sources(monkeypatch):
    """Every source of :func:`environment` replaced by a value written here; returns what was asked."""
    asked = {"versions": [], "git": [], "strftime": []}

    def version(name):
        asked["versions"].append(name)
        if name in ("pot", "tensorboard"):
            raise metadata.PackageNotFoundError(name)
        return f"v-{name}"

    def git_commit(*args, **kwargs):
        asked["git"].append((args, kwargs))
        return {"commit": "c0ffee", "dirty": True}

    def strftime(fmt, *rest):
        asked["strftime"].append(fmt)
        return "<stamp>"

    monkeypatch.setattr(metadata, "version", version)
    monkeypatch.setattr(env_mod, "_git_commit", git_commit)
    monkeypatch.setattr(env_mod, "_source_hash", lambda: "feedbeef")
    monkeypatch.setattr(env_mod, "_cpu_model", lambda: "Fake CPU @ 1 GHz")
    monkeypatch.setattr(platform, "platform", lambda *a, **k: "FakeOS-1.0")
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    monkeypatch.setattr(sys, "version", "3.99.7 (main, Jan 1 2030) [Fake C]")
    monkeypatch.setattr(sys, "argv", ["meanfield", "run", "x.toml"])
    monkeypatch.setattr(time, "strftime", strftime)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 5)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    return asked


EXPECTED_ENV = {
    "python": "3.99.7",
    "platform": "FakeOS-1.0",
    "processor": "Fake CPU @ 1 GHz",
    "cpu_count": 3,
    "packages": {
        "meanfield-sde": "v-meanfield-sde",
        "torch": "v-torch",
        "numpy": "v-numpy",
        "scipy": "v-scipy",
        "torchsde": "v-torchsde",
    },
    "git": {"commit": "c0ffee", "dirty": True},
    "source_sha256": "feedbeef",
    "seed": 11,
    "threads": 5,
    "device": "cpu",
    "command": ["meanfield", "run", "x.toml"],
    "started": "<stamp>",
    "OMP_WAIT_POLICY": "ACTIVE",
}


def _repo(root: Path, files: dict[str, str]) -> str:
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    _git(root, "add", *files)
    _git(root, "commit", "-q", "-m", "init")
    return _git(root, "rev-parse", "HEAD")


def _fake_git(monkeypatch, outputs):
    """subprocess.run replaced: each call is recorded and answered by the next of ``outputs`` (a stdout text,
    or an exception to raise)."""
    calls = []
    answers = iter(outputs)

    def run(argv, **kwargs):
        calls.append((argv, kwargs))
        answer = next(answers)
        if isinstance(answer, BaseException):
            raise answer
        return subprocess.CompletedProcess(argv, 0, stdout=answer, stderr="")

    monkeypatch.setattr(env_mod.subprocess, "run", run)
    return calls


def _env(commit="a", dirty=False, sha="h1", mf="0.1", torch_version="2.0", **extra):
    return {
        "git": {"commit": commit, "dirty": dirty},
        "packages": {"meanfield-sde": mf, "torch": torch_version, "numpy": "1.0"},
        "source_sha256": sha,
        "seed": 0,
        **extra,
    }


def test_environment_is_the_record_of_every_source(faked_sources, monkeypatch):
    """:func:`environment` on a CPU with every source faked equals the dict written by hand: the Python
    version's first word, the platform, processor, CPU count, the versions of the seven packages that are
    installed (asked in order; the two that are not are left out), ``_git_commit()`` asked with no exclusion,
    the source hash, the config's seed, the threads, ``"cpu"``, ``sys.argv``, the start stamp in the format
    ``%Y-%m-%dT%H:%M:%S%z`` and ``OMP_WAIT_POLICY``; without that variable, None. Negative control: no
    ``cuda_device`` key on a CPU."""
    info = env_mod.environment(RunConfig(task="teacher_student", seed=11), torch.device("cpu"))
    assert info == EXPECTED_ENV
    assert list(info) == list(EXPECTED_ENV)
    assert faked_sources["versions"] == PACKAGE_NAMES
    assert faked_sources["git"] == [((), {})]
    assert faked_sources["strftime"] == ["%Y-%m-%dT%H:%M:%S%z"]
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert env_mod.environment(RunConfig(task="teacher_student", seed=11), torch.device("cpu")) == {
        **EXPECTED_ENV,
        "OMP_WAIT_POLICY": None,
    }


def test_environment_on_cuda_adds_the_device_name(faked_sources, monkeypatch):
    """On ``cuda:1`` the record is the CPU one with ``device = "cuda:1"`` and ``cuda_device`` the name the
    driver gives for that device (faked, given the device asked)."""
    asked = []
    monkeypatch.setattr(
        torch.cuda, "get_device_name", lambda device=None: asked.append(device) or "Fake H200"
    )
    info = env_mod.environment(RunConfig(task="teacher_student", seed=11), torch.device("cuda", 1))
    assert info == {**EXPECTED_ENV, "device": "cuda:1", "cuda_device": "Fake H200"}
    assert asked == [torch.device("cuda", 1)]


def test_environment_python_version_and_real_sources(monkeypatch):
    """Unfaked, the record's python is :func:`platform.python_version`, its platform :func:`platform.platform`,
    its command ``sys.argv`` and its ``started`` a stamp matching ``YYYY-MM-DDTHH:MM:SS±HHMM``."""
    monkeypatch.setattr(env_mod, "_git_commit", lambda exclude=(): {"commit": None, "dirty": None})
    info = env_mod.environment(RunConfig(task="teacher_student", seed=2), torch.device("cpu"))
    assert info["python"] == platform.python_version()
    assert info["platform"] == platform.platform()
    assert info["command"] == sys.argv and info["seed"] == 2
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}", info["started"])
    assert info["git"] == {"commit": None, "dirty": None}


@needs_git
def test_environment_records_the_git_facts_and_hash_of_a_repository_made_here(tmp_path, monkeypatch):
    """With the package in a repository made here (one file ``m.py``): ``environment()["git"]`` is the
    commit ``git rev-parse HEAD`` gives and not dirty, and ``source_sha256`` is SHA-256 of ``b"m.py"`` + the
    file's bytes, computed here. After a change to ``m.py``: dirty, a different hash (the negative control);
    after committing it: clean again, at the new commit."""
    repo = tmp_path / "repo"
    head = _repo(repo, {"m.py": "x = 1\n"})
    monkeypatch.setattr(env_mod, "_PACKAGE", repo)
    cfg = RunConfig(task="teacher_student", seed=0)
    info = env_mod.environment(cfg, torch.device("cpu"))
    assert info["git"] == {"commit": head, "dirty": False}
    assert info["source_sha256"] == hashlib.sha256(b"m.py" + b"x = 1\n").hexdigest()
    (repo / "m.py").write_text("x = 2\n")
    info = env_mod.environment(cfg, torch.device("cpu"))
    assert info["git"] == {"commit": head, "dirty": True}
    assert info["source_sha256"] == hashlib.sha256(b"m.py" + b"x = 2\n").hexdigest()
    _git(repo, "commit", "-q", "-am", "two")
    new = _git(repo, "rev-parse", "HEAD")
    assert new != head
    assert env_mod._git_commit() == {"commit": new, "dirty": False}


@needs_git
def test_git_commit_staged_and_deleted_files_are_dirty(tmp_path, monkeypatch):
    """A staged change, and a deleted tracked file, both make the checkout dirty; a repository without any
    commit (``rev-parse HEAD`` fails) gives None for both facts."""
    repo = tmp_path / "repo"
    head = _repo(repo, {"a.txt": "a\n", "b.txt": "b\n"})
    monkeypatch.setattr(env_mod, "_PACKAGE", repo)
    assert env_mod._git_commit() == {"commit": head, "dirty": False}
    (repo / "a.txt").write_text("changed\n")
    _git(repo, "add", "a.txt")
    assert env_mod._git_commit() == {"commit": head, "dirty": True}
    _git(repo, "reset", "-q", "--hard")
    assert env_mod._git_commit() == {"commit": head, "dirty": False}
    (repo / "b.txt").unlink()
    assert env_mod._git_commit() == {"commit": head, "dirty": True}
    empty = tmp_path / "empty"
    empty.mkdir()
    _git(empty, "init", "-q")
    monkeypatch.setattr(env_mod, "_PACKAGE", empty)
    assert env_mod._git_commit() == {"commit": None, "dirty": None}


@needs_git
def test_git_commit_excludes_several_folders_each_relative_to_the_top(tmp_path, monkeypatch):
    """``exclude=("results", "logs")`` from a subfolder of the checkout: changes under both folders leave it
    clean; excluding only one of them, it is dirty (the other's change counts), and so with no exclusion."""
    repo = tmp_path / "repo"
    _repo(repo, {"results/r.md": "r\n", "logs/l.txt": "l\n", "pkg/code.py": "x = 1\n"})
    monkeypatch.setattr(env_mod, "_PACKAGE", repo / "pkg")
    (repo / "results" / "r.md").write_text("r2\n")
    (repo / "logs" / "l.txt").write_text("l2\n")
    assert env_mod._git_commit(exclude=("results", "logs"))["dirty"] is False
    assert env_mod._git_commit(exclude=("logs", "results"))["dirty"] is False
    assert env_mod._git_commit(exclude=("results",))["dirty"] is True
    assert env_mod._git_commit(exclude=("logs",))["dirty"] is True
    assert env_mod._git_commit()["dirty"] is True


def test_git_commit_asks_git_with_these_commands_and_pathspecs(tmp_path, monkeypatch):
    """The two git commands, exactly: ``git -C <package> rev-parse HEAD`` then ``git -C <package> status
    --porcelain --untracked-files=no --`` with no pathspec, or ``:(top)`` and one ``:(top,exclude)<path>`` per
    excluded path; each with ``capture_output``, ``text``, ``errors="replace"``, a 5 s timeout and ``check``.
    The commit is git's output stripped; a status of only whitespace is clean, one line is dirty."""
    monkeypatch.setattr(env_mod, "_PACKAGE", tmp_path)
    calls = _fake_git(monkeypatch, ["abc123\n", " \n \n"])
    assert env_mod._git_commit() == {"commit": "abc123", "dirty": False}
    options = {"capture_output": True, "text": True, "errors": "replace", "timeout": 5, "check": True}
    status = ["git", "-C", str(tmp_path), "status", "--porcelain", "--untracked-files=no", "--"]
    assert calls == [
        (["git", "-C", str(tmp_path), "rev-parse", "HEAD"], options),
        (status, options),
    ]
    calls = _fake_git(monkeypatch, ["  abc123  \n", " M f.txt\n"])
    assert env_mod._git_commit(exclude=("benchmarks/results", "logs")) == {"commit": "abc123", "dirty": True}
    assert calls[1] == (
        status + [":(top)", ":(top,exclude)benchmarks/results", ":(top,exclude)logs"],
        options,
    )


@pytest.mark.parametrize(
    "failure",
    [
        subprocess.TimeoutExpired(["git"], 5),
        subprocess.CalledProcessError(128, ["git"]),
        FileNotFoundError(2, "No such file or directory: 'git'"),
        PermissionError(13, "Permission denied: 'git'"),
    ],
    ids=["timeout", "git_failed", "no_git", "not_executable"],
)
@pytest.mark.parametrize("at", [0, 1], ids=["rev_parse", "status"])
def test_git_commit_is_none_when_either_git_call_fails(failure, at, tmp_path, monkeypatch):
    """A timeout, a failing git (non-zero exit), a missing or non-executable git, at the first or the second
    call: both facts None (not the commit with an unknown dirty flag), no error."""
    monkeypatch.setattr(env_mod, "_PACKAGE", tmp_path)
    outputs = ["abc\n", ""]
    outputs[at] = failure
    calls = _fake_git(monkeypatch, outputs)
    assert env_mod._git_commit() == {"commit": None, "dirty": None}
    assert len(calls) == at + 1


def test_git_commit_lets_other_errors_through(tmp_path, monkeypatch):
    """An error that is neither an OSError nor a SubprocessError (a bug) is not swallowed."""
    monkeypatch.setattr(env_mod, "_PACKAGE", tmp_path)
    _fake_git(monkeypatch, [RuntimeError("a bug")])
    with pytest.raises(RuntimeError, match="^a bug$"):
        env_mod._git_commit()


def test_source_hash_orders_the_files_by_path_and_reads_them_recursively(tmp_path, monkeypatch):
    """``_source_hash`` of files created out of order (``z.py``, ``m/n/c.py``, ``a.py``, ``m/b.py``,
    ``B.py``): SHA-256 computed here over path-then-bytes in sorted path order (``B.py``, ``a.py``,
    ``m/b.py``, ``m/n/c.py``, ``z.py``), paths relative to the package with ``/``. Files not ending ``.py``
    (``.pyi``, ``.txt``, ``.pyc``) do not count. Negative controls: the digest in creation order differs, and
    an empty package hashes to SHA-256 of nothing."""
    files = {"z.py": b"z\n", "m/n/c.py": b"c\n", "a.py": b"a\n", "m/b.py": b"b\n", "B.py": b"B\n"}
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    for name in ("stub.pyi", "notes.txt", "m/cache.pyc"):
        (tmp_path / name).write_bytes(b"ignored")
    monkeypatch.setattr(env_mod, "_PACKAGE", tmp_path)
    order = ["B.py", "a.py", "m/b.py", "m/n/c.py", "z.py"]
    expected = hashlib.sha256(b"".join(name.encode() + files[name] for name in order)).hexdigest()
    assert env_mod._source_hash() == expected
    unsorted = hashlib.sha256(b"".join(name.encode() + data for name, data in files.items())).hexdigest()
    assert unsorted != expected
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setattr(env_mod, "_PACKAGE", empty)
    assert env_mod._source_hash() == hashlib.sha256(b"").hexdigest()


def test_source_hash_separates_path_from_content(tmp_path, monkeypatch):
    """The path is part of the digest: renaming ``a.py`` to ``b.py`` with the same bytes changes it, and the
    digest is over the relative path (a package moved elsewhere hashes the same)."""
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "a.py").write_bytes(b"x = 1\n")
    monkeypatch.setattr(env_mod, "_PACKAGE", tmp_path / "one")
    first = env_mod._source_hash()
    assert first == hashlib.sha256(b"a.py" + b"x = 1\n").hexdigest()
    (tmp_path / "two").mkdir()
    (tmp_path / "two" / "a.py").write_bytes(b"x = 1\n")
    monkeypatch.setattr(env_mod, "_PACKAGE", tmp_path / "two")
    assert env_mod._source_hash() == first
    (tmp_path / "two" / "a.py").rename(tmp_path / "two" / "b.py")
    assert env_mod._source_hash() == hashlib.sha256(b"b.py" + b"x = 1\n").hexdigest() != first


@pytest.mark.parametrize(
    ("text", "processor", "expected"),
    [
        (
            "vendor_id\t: X\nmodel\t\t: 85\nmodel name\t: Chip: rev 2 @ 3 GHz \nmodel name\t: other\n",
            "p",
            "Chip: rev 2 @ 3 GHz",
        ),
        ("model\t\t: 85\n  model name : indented\nflags : model name\n", "fallback cpu", "fallback cpu"),
        (None, "fallback cpu", "fallback cpu"),
        (None, "", "fallback machine"),
        ("model name:   \n", "p", ""),
    ],
    ids=["first_line", "no_line", "no_file", "no_processor", "empty_value"],
)
def test_cpu_model_reads_the_first_model_name_line(text, processor, expected, monkeypatch):
    """``_cpu_model`` on a ``/proc/cpuinfo`` written here (``None``: reading it fails with an OSError): the
    text after the first colon of the first line *starting* ``model name`` (later colons kept, spaces
    stripped; not the ``model`` line, not a line with ``model name`` elsewhere in it), else
    :func:`platform.processor`, else :func:`platform.machine` when that is empty."""
    opened = []

    class FakePath:
        def __init__(self, path):
            opened.append(path)

        def read_text(self):
            if text is None:
                raise PermissionError(13, "Permission denied", "/proc/cpuinfo")
            return text

    monkeypatch.setattr(env_mod, "Path", FakePath)
    monkeypatch.setattr(platform, "processor", lambda: processor)
    monkeypatch.setattr(platform, "machine", lambda: "fallback machine")
    assert env_mod._cpu_model() == expected
    assert opened == ["/proc/cpuinfo"]


def test_the_package_folder_is_the_one_holding_the_module():
    """``_PACKAGE`` is the ``meanfield/`` folder (the parent of ``runs/``), resolved."""
    assert Path(meanfield.__file__).resolve().parent == env_mod._PACKAGE
    assert (env_mod._PACKAGE / "runs" / "environment.py").is_file()


def test_provenance_keys_and_a_record_with_null_git_and_packages():
    """:data:`PROVENANCE_KEYS` are the five documented names in order; a record whose ``git`` and ``packages``
    are ``null`` (None) gives None for all five, like an empty record. Negative control: a full record gives
    its values."""
    assert env_mod.PROVENANCE_KEYS == ("commit", "dirty", "source_sha256", "meanfield", "torch")
    assert env_mod.provenance({"git": None, "packages": None}) == dict.fromkeys(env_mod.PROVENANCE_KEYS)
    assert env_mod.provenance(_env()) == {
        "commit": "a",
        "dirty": False,
        "source_sha256": "h1",
        "meanfield": "0.1",
        "torch": "2.0",
    }


def test_provenance_changes_lists_each_differing_key_in_order():
    """``provenance_changes``: one ``"key: before → now"`` line per differing key, in
    :data:`PROVENANCE_KEYS` order, values as ``str`` gives them (``False``, ``None``); keys outside the
    provenance (seed, numpy) do not count; identical records give ``[]`` (negative control)."""
    before = _env()
    now = _env(dirty=True, sha="h2", mf="0.2", seed=5)
    now["packages"]["numpy"] = "9.9"
    assert env_mod.provenance_changes(before, now) == [
        "dirty: False → True",
        "source_sha256: h1 → h2",
        "meanfield: 0.1 → 0.2",
    ]
    assert env_mod.provenance_changes({}, _env(torch_version="2.1")) == [
        "commit: None → a",
        "dirty: None → False",
        "source_sha256: None → h1",
        "meanfield: None → 0.1",
        "torch: None → 2.1",
    ]
    assert env_mod.provenance_changes(before, _env(seed=9)) == []


def test_record_environment_writes_indented_json_and_keeps_env_unchanged(tmp_path):
    """The first record: the file's text is exactly the one-space-indented JSON written out by hand, with an
    empty ``earlier`` list after the record's keys and a final newline; the folder is made when missing;
    nothing is reported and the dict passed in gets no ``earlier`` key. Negative control: the second record's
    file is not the first's."""
    path = tmp_path / "new" / "environment.json"
    env = {"seed": 1, "git": {"commit": "a"}}
    assert env_mod.record_environment(path, env) == []
    assert path.read_text() == ('{\n "seed": 1,\n "git": {\n  "commit": "a"\n },\n "earlier": []\n}\n')
    assert env == {"seed": 1, "git": {"commit": "a"}}
    assert env_mod.record_environment(path, {"seed": 2}) == ["commit: a → None"]
    assert json.loads(path.read_text()) == {"seed": 2, "earlier": [{"seed": 1, "git": {"commit": "a"}}]}


@pytest.mark.parametrize(
    "text",
    ["[1, 2]", '"a string"', "3", "null", "", "{not json"],
    ids=["list", "string", "number", "null", "empty", "damaged"],
)
def test_record_environment_replaces_a_record_that_is_not_an_object(text, tmp_path):
    """An ``environment.json`` holding valid JSON that is not an object, or text that is not JSON: replaced
    by the new record with no earlier ones and no changes reported."""
    path = tmp_path / "environment.json"
    path.write_text(text)
    assert env_mod.record_environment(path, _env("b")) == []
    assert json.loads(path.read_text()) == {**_env("b"), "earlier": []}


def test_record_environment_of_an_unreadable_record_replaces_it(tmp_path, monkeypatch):
    """A record that exists but cannot be read (an OSError from ``read_text``): replaced, no changes, no
    error."""
    path = tmp_path / "environment.json"
    path.write_text(json.dumps(_env("a")))
    real = pathlib.Path.read_text

    def read_text(self, *args, **kwargs):
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "read_text", read_text)
    assert env_mod.record_environment(path, _env("b")) == []
    monkeypatch.setattr(pathlib.Path, "read_text", real)
    assert json.loads(path.read_text()) == {**_env("b"), "earlier": []}


def test_record_environment_of_a_record_without_earlier_keeps_it_as_the_first(tmp_path):
    """A record written before ``earlier`` existed (an object without that key): it becomes the only earlier
    record, and the changes are against it (commit and dirty)."""
    path = tmp_path / "environment.json"
    path.write_text(json.dumps(_env("a")))
    assert env_mod.record_environment(path, _env("b", dirty=True)) == ["commit: a → b", "dirty: False → True"]
    assert json.loads(path.read_text()) == {**_env("b", dirty=True), "earlier": [_env("a")]}
