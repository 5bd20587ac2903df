"""Every experiment's ``smoke`` preset, run into one folder, and two such folders compared value by value.

For a refactoring that must not change a number: run the presets on the code before (a ``git worktree`` of
the old commit) and after, then compare; every ``metrics.jsonl`` record must be equal except the machine's
timings (:data:`meanfield.runs.TIMING_KEYS`)::

    git worktree add /tmp/before HEAD~1
    (cd /tmp/before && PYTHONPATH=$PWD python experiments/smoke_compare.py run /tmp/smoke-before)
    python experiments/smoke_compare.py run /tmp/smoke-after
    python experiments/smoke_compare.py compare /tmp/smoke-before /tmp/smoke-after     # exit 1 on a difference

The data come from ``MEANFIELD_DATA`` or ``../shared/data`` beside the checkout.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def configs() -> list[Path]:
    """The experiment configurations that have a ``smoke`` preset."""
    from meanfield.config import load_toml

    return sorted(p for p in ROOT.glob("experiments/*/*.toml") if "smoke" in load_toml(p).get("presets", {}))


def run_all(out: Path) -> int:
    """Run every smoke preset into ``out/<experiment>__<config>``, each in its own process (as a user runs it:
    torch's thread count and global state start afresh); the number that failed."""
    env = dict(os.environ)
    shared = ROOT.parent / "shared" / "data"
    if "MEANFIELD_DATA" not in env and shared.is_dir():
        env["MEANFIELD_DATA"] = str(shared)
    failed = 0
    for config in configs():
        name = f"{config.parent.name}__{config.stem}"
        command = [sys.executable, "-m", "meanfield", "run", str(config), "--preset", "smoke", "--quiet"]
        done = subprocess.run([*command, "--out", str(out / name)], env=env, capture_output=True, text=True)
        print(f"{name}: {'finished' if done.returncode == 0 else done.stderr.strip().splitlines()[-1:]}")
        failed += done.returncode != 0
    return failed


def _records(folder: Path) -> list[dict]:
    from meanfield.runs import TIMING_KEYS as TIMING

    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines if line.strip()]


def compare(a: Path, b: Path) -> int:
    """Print, for each run of ``a``, whether ``b``'s run has the same records; the number that differ."""
    differ = 0
    for run in sorted(p for p in a.iterdir() if p.is_dir()):
        other = b / run.name
        same = other.is_dir() and _records(run) == _records(other)
        print(f"{run.name}: {len(_records(run))} records {'identical' if same else 'DIFFERENT or missing'}")
        differ += not same
    return differ


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run").add_argument("out", type=Path)
    p = sub.add_parser("compare")
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.command == "run":
        return 1 if run_all(args.out) else 0
    return 1 if compare(args.a, args.b) else 0


if __name__ == "__main__":
    sys.exit(main())
