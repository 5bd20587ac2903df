"""Mutation testing, module by module, within a time budget; the kill-rate table of ``docs/testing.md``.

mutmut (configured in ``pyproject.toml``'s ``[tool.mutmut]``) plants one small bug at a time in
``meanfield/`` (a flipped comparison, a changed constant, a dropped argument, …) and runs the default
(``not slow``) tests that reach the mutated function; a mutant that no test notices *survived*: a missing
oracle. This script runs it per module with a wall-clock budget (mutmut keeps its results in ``mutants/`` and a
later call continues where the budget stopped it), then counts the results and rewrites the table between the
``mutation`` markers of ``docs/testing.md``::

    python tools/mutation.py meanfield.stats meanfield.runs.folder --minutes 20   # run, then the table
    python tools/mutation.py --table                                              # the table from mutants/
    python tools/mutation.py --survivors meanfield.stats                          # what survived, to read

Mutants shown equivalent (behaviour provably unchanged) are listed with the reason in
``tests/mutation_equivalent.toml`` and left out of the rate. The rate is killed / (checked − equivalent);
mutants not yet checked (the budget ran out) are counted apart, never as killed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTANTS = ROOT / "mutants"
DOC = ROOT / "docs" / "testing.md"
EQUIVALENT = ROOT / "tests" / "mutation_equivalent.toml"
BEGIN, END = "<!-- mutation:begin -->", "<!-- mutation:end -->"

STATUS = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    34: "skipped",
    36: "timeout",
}
"""mutmut's exit codes by status (its ``status_by_exit_code``); anything else is ``suspicious``, ``None``
not checked."""


def _status(code: int | None) -> str:
    if code is None:
        return "not checked"
    if code in (-24, 24, 152, 255):
        return "timeout"
    return STATUS.get(code, "suspicious")


def equivalent() -> dict[str, str]:
    """``{mutant name: reason}`` from ``tests/mutation_equivalent.toml``."""
    if not EQUIVALENT.exists():
        return {}
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    return {name: entry["reason"] for name, entry in tomllib.loads(EQUIVALENT.read_text()).items()}


def results() -> dict[str, dict[str, str]]:
    """``{module: {mutant name: status}}`` from mutmut's ``mutants/**/*.py.meta`` files."""
    out: dict[str, dict[str, str]] = {}
    for meta in sorted((MUTANTS / "meanfield").rglob("*.py.meta")):
        relative = meta.relative_to(MUTANTS).with_suffix("").with_suffix("")
        module = ".".join(relative.parts).removesuffix(".__init__")
        codes = json.loads(meta.read_text()).get("exit_code_by_key", {})
        if codes:
            out[module] = {name: _status(code) for name, code in codes.items()}
    return out


def run_module(module: str, minutes: float, children: int) -> float:
    """``mutmut run "<module>.*"`` for at most ``minutes``; returns the seconds it ran."""
    # one thread per test process: mutmut forks its workers from a process that has run torch, and a fork of a
    # live OpenMP pool hangs in the child (every such mutant would time out); --children gives the parallelism
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    shared = (
        ROOT.parent / "shared" / "data"
    )  # the tests run inside mutants/, where ../shared is not beside them
    if "MEANFIELD_DATA" not in env and shared.is_dir():
        env["MEANFIELD_DATA"] = str(shared)
    start = time.monotonic()
    pattern = f"{module}.*" if module.count(".") else f"{module}*"
    command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(children), pattern]
    log = ROOT / "mutmut-run.log"  # mutmut's own output (ignored by git), for when a run fails
    with log.open("wb") as out, subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out) as p:
        try:
            p.wait(timeout=minutes * 60)
        except subprocess.TimeoutExpired:
            p.terminate()  # mutmut keeps what it finished; the next call goes on
            p.wait()
    if p.returncode not in (0, -15):
        tail = log.read_bytes()[-3000:].decode(errors="replace").replace("\r", "\n")
        print(f"mutmut exited with {p.returncode}; the end of {log}:\n{tail}", file=sys.stderr)
    return time.monotonic() - start


def table(found: dict[str, dict[str, str]], seconds: dict[str, float]) -> str:
    """The markdown table of kill rates (one row per module, then the total)."""
    same = equivalent()
    rows = [
        "| module | mutants | checked | killed | survived | no tests | timeout | equivalent | kill rate | minutes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    total: Counter = Counter()
    for module, statuses in found.items():
        c = Counter(statuses.values())
        eq = sum(1 for name, s in statuses.items() if name in same and s == "survived")
        checked = len(statuses) - c["not checked"]
        if checked == 0:  # not measured yet: no row (the total counts measured modules only)
            continue
        scored = checked - eq - c["skipped"]
        rate = f"{100 * (c['killed'] + c['timeout']) / scored:.0f} %" if scored else "—"
        minutes = f"{seconds[module] / 60:.1f}" if module in seconds else ""
        rows.append(
            f"| `{module}` | {len(statuses)} | {checked} | {c['killed']} | {c['survived'] - eq} | {c['no tests']} | "
            f"{c['timeout']} | {eq} | {rate} | {minutes} |"
        )
        total.update(c)
        total["equivalent"] += eq
        total["mutants"] += len(statuses)
    checked = total["mutants"] - total["not checked"]
    scored = checked - total["equivalent"] - total["skipped"]
    rate = f"{100 * (total['killed'] + total['timeout']) / scored:.0f} %" if scored else "—"
    rows.append(
        f"| **all measured** | {total['mutants']} | {checked} | {total['killed']} | "
        f"{total['survived'] - total['equivalent']} | {total['no tests']} | {total['timeout']} | "
        f"{total['equivalent']} | {rate} | |"
    )
    return "\n".join(rows)


def write_table(text: str, command: str) -> None:
    """Put the table between the markers of ``docs/testing.md``."""
    doc = DOC.read_text()
    stamp = (
        f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC with mutmut "
        f"{metadata.version('mutmut')} on {os.cpu_count()} cores: `{command}`. Killed includes timeouts (a mutant "
        "that makes a test hang is caught); *no tests*: no default test reaches the mutated function."
    )
    block = f"{BEGIN}\n{stamp}\n\n{text}\n{END}"
    if BEGIN in doc:
        doc = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _: block, doc, flags=re.S)
    else:
        doc = doc.rstrip() + "\n\n" + block + "\n"
    DOC.write_text(doc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "modules", nargs="*", help="dotted module names (meanfield.stats, meanfield.runs.folder)"
    )
    parser.add_argument(
        "--minutes", type=float, default=15.0, help="wall-clock budget per module (default 15)"
    )
    parser.add_argument("--children", type=int, default=2, help="mutants tested at once (default 2)")
    parser.add_argument("--table", action="store_true", help="only rewrite the table from mutants/")
    parser.add_argument("--survivors", action="store_true", help="list the surviving mutants of the modules")
    args = parser.parse_args()
    if args.survivors:
        same = equivalent()
        for module, statuses in results().items():
            if args.modules and module not in args.modules:
                continue
            for name, status in statuses.items():
                if status == "survived" and name not in same:
                    print(name)
        return 0
    seconds: dict[str, float] = {}
    if not args.table:
        for module in args.modules:
            seconds[module] = run_module(module, args.minutes, args.children)
            print(f"{module}: {seconds[module] / 60:.1f} min")
    found = results()
    if args.modules:
        found = {m: s for m, s in found.items() if m in args.modules or not seconds}
    text = table(found, seconds)
    write_table(text, "python tools/mutation.py " + " ".join(sys.argv[1:]))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
