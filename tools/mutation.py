"""Mutation testing, module by module, within a time budget; the kill-rate table of ``docs/testing.md``.

mutmut (configured in ``pyproject.toml``'s ``[tool.mutmut]``) plants one small bug at a time in
``meanfield/`` (a flipped comparison, a changed constant, a dropped argument, …) and runs the default
(``not slow``) tests that reach the mutated function; a mutant that no test notices *survived*: a missing
oracle. This script runs it per module with a wall-clock budget (mutmut keeps its results in ``mutants/`` and a
later call continues where the budget stopped it), then counts the results and rewrites the table between the
``mutation`` markers of ``docs/testing.md``::

    python tools/mutation.py meanfield.studies.stats meanfield.runs.folder --minutes 20   # run, then the table
    python tools/mutation.py --table                                              # the table from mutants/
    python tools/mutation.py --survivors meanfield.studies.stats                          # what survived, to read
    python tools/mutation.py --sample 30 --minutes 60                              # every module, sampled
    python tools/mutation.py --holdout 10 --after 40 --minutes 45                  # a fresh held-out sample

The whole package has about 21,000 mutants (about one a second on two cores: six hours), so the survey of every
module is a *sample*: in each module the ``--sample K`` mutants whose names have the smallest SHA-256 digest (a
fixed pseudo-random choice that a rerun, or another machine, makes again, and that an edit elsewhere in the
module does not reshuffle). A sampled row gives the kill rate of its sample with a 95 % Wilson interval; the
total is the stratified estimate ``Σ_m N_m·p̂_m / Σ_m N_m`` over modules of ``N_m`` mutants, with its
interval from ``Var = Σ_m (N_m/N)²·p̂_m(1 − p̂_m)/n_m·(1 − n_m/N_m)``. A module run in full (every mutant
checked) has no interval.

Mutants shown equivalent (behaviour provably unchanged) are listed with the reason in
``tests/mutation_equivalent.toml`` and left out of the rate. The rate is killed / (checked − equivalent);
mutants not yet checked (the budget ran out) are counted apart, never as killed.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
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
RECORD = ROOT / "tools" / "mutation_results.json"
"""The committed results: every checked mutant's status with the commit and date it was measured on, and each
module's functions (source hash, number of mutants), so that the table is regenerated on any machine, also one
without mutmut's ``mutants/`` (``--table``), and a later run continues the record."""
BEGIN, END = "<!-- mutation:begin -->", "<!-- mutation:end -->"
BLOCK = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), flags=re.S)

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


RECHECK = ("not checked", "survived", "no tests", "suspicious")
UNMEASURED = ("skipped", "suspicious")
"""Statuses outside the rate: a skipped mutant, and a *suspicious* one, whose test run ended with an exit code that
is neither a test result nor a timeout (a crash, or a worker killed while it hung in a deadlock, which mutmut's
CPU-time limit cannot see: docs/testing.md). Neither killed nor survived: counted apart, rechecked by the next run."""
"""The statuses a sampled run (re)checks: a new test can kill a survivor, while a killed mutant stays killed
(mutmut itself resets the results of a function whose source changed)."""


def _status(code: int | None) -> str:
    if code is None:
        return "not checked"
    if code in (-24, 24, 152, 255):
        return "timeout"
    return STATUS.get(code, "suspicious")


def equivalent() -> dict[str, str]:
    """``{mutant name: reason}`` from ``tests/mutation_equivalent.toml``.

    An entry with ``cpu_only = true`` (a dropped ``device=`` argument: the same tensor on a machine without
    CUDA, a device error on one with it, where the CUDA items of the device tests catch it) counts as
    equivalent only where CUDA is not available.
    """
    if not EQUIVALENT.exists():
        return {}
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    entries = tomllib.loads(EQUIVALENT.read_text())
    cuda = _cuda_available()
    return {name: e["reason"] for name, e in entries.items() if not (e.get("cpu_only") and cuda)}


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _function(name: str) -> str:
    """The mutated function of a mutant name: ``meanfield.studies.stats.x_holm__mutmut_3`` → ``x_holm``."""
    return name.rsplit(".", 1)[1].rsplit("__mutmut_", 1)[0]


def _local() -> dict[str, dict[str, tuple[str, str]]]:
    """``{module: {mutant name: (status, hash of its function's source)}}`` from mutmut's ``mutants/**/*.py.meta``."""
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for meta in sorted((MUTANTS / "meanfield").rglob("*.py.meta")):
        relative = meta.relative_to(MUTANTS).with_suffix("").with_suffix("")
        module = ".".join(relative.parts).removesuffix(".__init__")
        data = json.loads(meta.read_text())
        codes, hashes = data.get("exit_code_by_key", {}), data.get("hash_by_function_name", {})
        if codes:
            out[module] = {
                name: (_status(code), hashes.get(_function(name), "")) for name, code in codes.items()
            }
    return out


def in_package(module: str) -> bool:
    """Whether ``module`` (dotted) is a module of the package now: a record's module that was moved or deleted
    (``meanfield.simulate`` after issue 49's layout) is dropped, not counted beside its new name."""
    path = ROOT.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def load_record() -> dict:
    """The committed record (``RECORD``): per module its functions ``{name: [source hash, mutants]}`` and per
    checked mutant ``{status, commit, date}``; empty where there is none yet."""
    if not RECORD.exists():
        return {"format": 1, "modules": {}, "checked": {}}
    return json.loads(RECORD.read_text(encoding="utf-8"))


def merged(
    local: dict[str, dict[str, tuple[str, str]]], record: dict
) -> tuple[dict[str, dict[str, str]], dict[str, dict]]:
    """Every module's statuses from this machine's ``mutants/`` and the committed record together.

    A module mutmut has generated here takes its mutants from ``mutants/`` (the current source); one checked
    here keeps its status, one not checked here takes the record's where the record saw the same function
    source (equal hash: the same mutant; a changed function's old results are dropped, as mutmut drops them). A
    module only in the record (a fresh machine) takes its mutants and statuses from the record alone.

    Returns:
        ``({module: {name: status}}, {name: {status, commit, date}})``: the statuses for the table and the
        checked entries for the record (an entry measured here has ``commit`` and ``date`` None: filled by
        :func:`write_record`).
    """
    found: dict[str, dict[str, str]] = {}
    checked: dict[str, dict] = {}
    old = record.get("checked", {})
    for module in sorted(set(local) | {m for m in record.get("modules", {}) if in_package(m)}):
        functions = record.get("modules", {}).get(module, {}).get("functions", {})
        if module in local:
            names = local[module]
        else:  # the record alone: its functions' mutants
            names = {
                f"{module}.{fn}__mutmut_{i}": ("not checked", h)
                for fn, (h, count) in functions.items()
                for i in range(1, count + 1)
            }
        statuses = {}
        for name, (status, h) in names.items():
            entry = old.get(name)
            same = entry is not None and functions.get(_function(name), [None])[0] == h
            if status == "not checked" and same:
                status = entry["status"]
                checked[name] = entry
            elif status != "not checked":
                keep = same and entry["status"] == status  # unchanged: keep when it was first measured
                checked[name] = entry if keep else {"status": status, "commit": None, "date": None}
            statuses[name] = status
        found[module] = statuses
    return found, checked


def _tool() -> str:
    """The tool that produced ``mutants/`` and its version, as the record states it (``"mutmut 3.8.1"``).

    Raises:
        RuntimeError: mutmut is not installed here, so there is no measurement to stamp.
    """
    try:
        return f"mutmut {metadata.version('mutmut')}"
    except metadata.PackageNotFoundError as e:
        raise RuntimeError(
            "the record stamps the mutmut version that produced mutants/, and mutmut is not installed here: "
            "pip install mutmut==3.8.1 (docs/testing.md)"
        ) from e


def write_record(local: dict[str, dict[str, tuple[str, str]]], record: dict, commit: str, date: str) -> dict:
    """Rewrite ``RECORD`` from :func:`merged` (entries measured here stamped ``commit``/``date``), atomically."""
    _, checked = merged(local, record)
    modules = {m: entry for m, entry in record.get("modules", {}).items() if in_package(m)}
    for module, names in local.items():
        counts: Counter[str] = Counter(_function(name) for name in names)
        hashes = {_function(name): h for name, (_, h) in names.items()}
        modules[module] = {"functions": {fn: [hashes[fn], counts[fn]] for fn in sorted(counts)}}
    stamped = {
        name: (e if e["commit"] is not None else {**e, "commit": commit, "date": date})
        for name, e in sorted(checked.items())
    }
    new = {
        **record,
        "format": 1,
        "tool": _tool(),
        "modules": dict(sorted(modules.items())),
        "checked": stamped,
    }
    tmp = RECORD.with_suffix(".tmp")
    tmp.write_text(_dump(new), encoding="utf-8")
    os.replace(tmp, RECORD)
    return new


def _dump(record: dict) -> str:
    """JSON with one line per module and per checked mutant (a rerun's git diff shows what changed)."""
    lines = []
    for key, value in record.items():
        if isinstance(value, dict) and key in ("modules", "checked"):
            inner = ",\n".join(
                f"  {json.dumps(k, ensure_ascii=False)}: {json.dumps(v, ensure_ascii=False)}"
                for k, v in value.items()
            )
            lines.append(f" {json.dumps(key)}: {{\n{inner}\n }}" if value else f" {json.dumps(key)}: {{}}")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def results() -> dict[str, dict[str, str]]:
    """``{module: {mutant name: status}}``: this machine's ``mutants/`` merged with the committed record."""
    return merged(_local(), load_record())[0]


def _commit() -> str:
    """The checkout's commit (short), ``+dirty`` when ``meanfield/`` or ``tests/`` differ from it.

    Not ``meanfield.runs.environment._git_commit``: that asks the checkout the *installed* package lives in,
    and mutation runs go on a snapshot (a worktree) beside an editable install of the main checkout."""
    # errors="replace": a path git prints undecoded (not UTF-8) must not stop the record
    git = {"cwd": ROOT, "capture_output": True, "text": True, "errors": "replace"}
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], check=True, **git).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "meanfield", "tests"], **git
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


# modules moved since their mutants were first ranked (issue 49's layout): a mutant is ranked by the digest of its
# name under the module's first name, so that a move keeps every module's sample and held-out sample the same mutants
FIRST_NAMES = {
    "meanfield.drift.pairwise": "meanfield.pairwise",
    "meanfield.drift.phase_space": "meanfield.kinetic",
    "meanfield.drift.potentials": "meanfield.potentials",
    "meanfield.drift.projections": "meanfield.projections",
    "meanfield.drift.resolution": "meanfield.resolution",
    "meanfield.drift.schedules": "meanfield.schedules",
    "meanfield.drift.systems": "meanfield.systems",
    "meanfield.metrics.free_energy": "meanfield.free_energy",
    "meanfield.nn.head_metrics": "meanfield.metrics.lm",
    "meanfield.nn.tokens": "meanfield.tokens",
    "meanfield.optim.step_stats": "meanfield.optim.stats",
    "meanfield.runs._workers": "meanfield._workers",
    "meanfield.runs.schema": "meanfield.runs.config",
    "meanfield.runs.sweeps": "meanfield.sweeps",
    "meanfield.stepping._background": "meanfield._background",
    "meanfield.stepping.brownian": "meanfield.brownian",
    "meanfield.stepping.captured": "meanfield.captured",
    "meanfield.stepping.richardson": "meanfield.richardson",
    "meanfield.stepping.sharded": "meanfield.distributed",
    "meanfield.stepping.simulate": "meanfield.simulate",
    "meanfield.stepping.solvers.base": "meanfield.solvers.base",
    "meanfield.stepping.solvers.euler": "meanfield.solvers.euler",
    "meanfield.stepping.solvers.splittings": "meanfield.solvers.kinetic",
    "meanfield.stepping.solvers.torchsde": "meanfield.solvers.torchsde",
    "meanfield.studies.figures": "meanfield.figures",
    "meanfield.studies.in_memory": "meanfield.studies",
    "meanfield.studies.plotting": "meanfield.plotting",
    "meanfield.studies.stats": "meanfield.stats",
    "meanfield.studies.validation": "meanfield.validation",
}


def first_name(name: str) -> str:
    """A mutant's name with its module's first name (``meanfield.drift.systems.x`` → ``meanfield.systems.x``)."""
    for new in sorted(FIRST_NAMES, key=len, reverse=True):
        if name.startswith(new + "."):
            return FIRST_NAMES[new] + name[len(new) :]
    return name


def sample(names: list[str] | dict[str, str], k: int, offset: int = 0) -> list[str]:
    """The names ranked ``offset + 1 … offset + k`` by SHA-256 digest of their ``first_name`` (fewer where there
    are fewer): a fixed random sample; ``offset = 0`` the ``k`` smallest digests, ``offset = K`` the held-out sample
    beyond the ``K``-sample."""
    ranked = sorted(names, key=lambda name: hashlib.sha256(first_name(name).encode()).hexdigest())
    return ranked[offset : offset + k]


def stratified(rows: list[tuple[int, float, int]]) -> tuple[float, float, float]:
    """The stratified kill rate ``p = Σ_m N_m p̂_m / Σ_m N_m`` over modules ``(N_m, killed_m, scored_m)`` with
    its 95 % interval from ``Var = Σ_m (N_m/N)² p̂_m(1 − p̂_m)/n_m · (1 − n_m/N_m)`` (finite-population
    correction: a module checked in full adds no variance). Returns ``(p, low, high)``."""
    rows = [(n, k, s) for n, k, s in rows if s]
    weight = sum(n for n, _, _ in rows)
    if not weight:
        return float("nan"), float("nan"), float("nan")
    p = sum(n * k / s for n, k, s in rows) / weight
    variance = sum(n**2 * (k / s) * (1 - k / s) / s * (1 - s / n) for n, k, s in rows) / weight**2
    se = math.sqrt(variance)
    return p, max(0.0, p - 1.959963984540054 * se), min(1.0, p + 1.959963984540054 * se)


def wilson(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion,
    ``(p̂ + z²/2n ± z·sqrt(p̂(1 − p̂)/n + z²/4n²)) / (1 + z²/n)``; ``(0, 1)`` for ``n = 0``."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - half) / (1 + z * z / n)), min(1.0, (centre + half) / (1 + z * z / n))


def run_mutmut(names: list[str], minutes: float, children: int) -> float:
    """``mutmut run NAME…`` (mutant names or patterns such as ``meanfield.studies.stats.*``) for at most ``minutes`` of
    wall clock; returns the seconds it ran."""
    # one thread per test process: mutmut forks its workers from a process that has run torch, and a fork of a
    # live OpenMP pool hangs in the child (every such mutant would time out); --children gives the parallelism
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    shared = (
        ROOT.parent / "shared" / "data"
    )  # the tests run inside mutants/, where ../shared is not beside them
    if "MEANFIELD_DATA" not in env and shared.is_dir():
        env["MEANFIELD_DATA"] = str(shared)
    start = time.monotonic()
    command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(children), *names]
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


def scope(statuses: dict[str, str], k: int) -> tuple[str, dict[str, str]]:
    """What a module's row is computed from: every mutant once all are checked (``"all"``), else the largest
    fully checked sample among ``k, k/2, k/4, …`` (each a prefix of the next: the same smallest digests), else
    the checked part of the ``k``-sample (marked ``of k``: not a random sample, mutmut checks fast ones first)."""
    if all(status != "not checked" for status in statuses.values()):
        return "all", statuses
    size = k
    while size >= 8:
        chosen = {name: statuses[name] for name in sample(statuses, size)}
        if all(s != "not checked" for s in chosen.values()):
            return f"sample {len(chosen)}", chosen
        size //= 2
    chosen = {name: statuses[name] for name in sample(statuses, k)}
    checked = {name: s for name, s in chosen.items() if s != "not checked"}
    return f"sample {len(checked)} of {len(chosen)}", checked


def table(found: dict[str, dict[str, str]], k: int = 30) -> str:
    """The markdown table of kill rates (one row per module, then the stratified total)."""
    same = equivalent()
    rows = [
        "| module | mutants | from | killed | survived | no tests | timeout | equivalent | kill rate | 95 % interval |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    strata: list[tuple[int, float, int]] = []
    below: list[str] = []
    for module, statuses in found.items():
        label, used = scope(statuses, k)
        if not used:  # nothing of this module measured yet: no row
            continue
        c = Counter(used.values())
        eq = sum(1 for name, s in used.items() if name in same and s == "survived")
        scored = len(used) - eq - sum(c[status] for status in UNMEASURED)
        killed = c["killed"] + c["timeout"]
        rate = killed / scored if scored else 1.0
        if label == "all":
            interval = ""
        else:
            low, high = wilson(killed, scored)
            interval = f"{100 * low:.0f}–{100 * high:.0f} %"
        rows.append(
            f"| `{module}` | {len(statuses)} | {label} | {c['killed']} | {c['survived'] - eq} | {c['no tests']} | "
            f"{c['timeout']} | {eq} | {100 * rate:.0f} % | {interval} |"
        )
        n_m = len(statuses)
        # a module checked in full (or with nothing left to score) has no sampling variance: n_m = N_m
        strata.append((n_m, killed, scored) if scored and label != "all" else (n_m, rate * n_m, n_m))
        if rate < 0.8:
            below.append(module)
    if strata:
        p, low, high = stratified(strata)
        total = sum(n for n, _, _ in strata)
        rows.append(
            f"| **all measured** (stratified) | {total} | | | | | | | **{100 * p:.0f} %** | "
            f"{100 * low:.0f}–{100 * high:.0f} % |"
        )
    if below:
        rows.append("")
        rows.append("Below 80 %: " + ", ".join(f"`{m}`" for m in below) + ".")
    return "\n".join(rows)


def holdout_table(found: dict[str, dict[str, str]], k: int = 30, h: int = 10) -> str:
    """The kill rate on the *held-out* sample: per module the mutants ranked ``k + 1 … k + h`` by digest, which
    no one reads when writing tests against the survivors of the ranks up to ``k`` (so the sample's rate cannot
    be fitted to its own mutants unseen). Its checked mutants only; the stratified total over the modules with
    any. After a round of tests written against one held-out sample, the next is drawn beyond it (``k`` + ``h``).
    """
    same = equivalent()
    strata: list[tuple[int, float, int]] = []
    cells: list[str] = []
    unmeasured: list[str] = []
    for module, statuses in found.items():
        held = {name: statuses[name] for name in sample(statuses, h, offset=k)}
        checked = {name: st for name, st in held.items() if st != "not checked"}
        unmeasured += [name for name, st in checked.items() if st == "suspicious"]
        scored = sum(
            1
            for name, st in checked.items()
            if st not in UNMEASURED and not (name in same and st == "survived")
        )
        if not scored:
            continue
        killed = sum(1 for st in checked.values() if st in ("killed", "timeout"))
        strata.append((len(statuses), killed, scored))
        cells.append(f"`{module}` {killed}/{scored}")
    if not strata:
        return ""
    p, low, high = stratified(strata)
    return (
        f"Held-out sample (ranks {k + 1}–{k + h} by digest in each module, never read when tests were written): "
        f"**{100 * p:.0f} %** ({100 * low:.0f}–{100 * high:.0f} %, stratified over {len(strata)} modules): "
        + ", ".join(cells)
        + "."
        + (
            f" Not measured ({len(unmeasured)}: the run of their tests ended abnormally, a hang or a crash; "
            f"rechecked by the next run): " + ", ".join(f"`{n}`" for n in sorted(unmeasured)) + "."
            if unmeasured
            else ""
        )
    )


def provenance(record: dict) -> str:
    """Where the table's numbers come from: the record's tool and, per (commit, date), how many mutants."""
    runs = Counter((e["commit"], e["date"]) for e in record.get("checked", {}).values())
    parts = ", ".join(
        f"{n} on `{c}` ({d})" for (c, d), n in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0]))
    )
    held = record.get("holdout")
    line = f"ranks {held['after'] + 1}–{held['after'] + held['size']}" if held else "none"
    return (
        f"From `tools/mutation_results.json` ({record.get('tool', 'mutmut')}): {sum(runs.values())} mutants checked"
        f"{': ' + parts if parts else ''}; held-out sample: {line}. Regenerate with `python tools/mutation.py "
        "--table` (no mutmut run). Killed includes timeouts (a mutant that makes a test hang is caught); *no "
        "tests*: no default test reaches the mutated function."
    )


def render(record: dict) -> str:
    """The block between the markers, from the record alone: the provenance line, the table (of the record's
    sample size, 30 unless a ``--sample K`` run recorded another) and the held-out line."""
    found = merged({}, record)[0]
    text = table(found, record.get("sample", 30))
    held = record.get("holdout")
    if held:
        line = holdout_table(found, held["after"], held["size"])
        if line:
            text += "\n\n" + line
    return f"{BEGIN}\n{provenance(record)}\n\n{text}\n{END}"


def write_table(block: str) -> None:
    """Put ``block`` (from :func:`render`) between the markers of ``docs/testing.md``."""
    doc = DOC.read_text()
    if BEGIN in doc:
        doc = BLOCK.sub(lambda _: block, doc)
    else:
        doc = doc.rstrip() + "\n\n" + block + "\n"
    DOC.write_text(doc)


def documented() -> str | None:
    """The block between the markers of ``docs/testing.md`` as it stands (``None`` without markers)."""
    found = BLOCK.search(DOC.read_text())
    return found.group(0) if found else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "modules", nargs="*", help="dotted module names (meanfield.studies.stats, meanfield.runs.folder)"
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=15.0,
        help="wall-clock budget per module, or for the whole sample (default 15)",
    )
    parser.add_argument("--children", type=int, default=2, help="mutants tested at once (default 2)")
    parser.add_argument(
        "--table", action="store_true", help="only rewrite the table (from mutants/ and the committed record)"
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if docs/testing.md's table is not the committed record's"
    )
    parser.add_argument("--survivors", action="store_true", help="list the surviving mutants of the modules")
    parser.add_argument(
        "--sample",
        type=int,
        default=None,
        metavar="K",
        help="run the K-mutant sample of every module (or of the modules named) instead of whole modules; the "
        "table's rows for modules not run in full come from this sample (default K = 30)",
    )
    parser.add_argument(
        "--after",
        type=int,
        default=None,
        metavar="A",
        help="with --holdout: the held-out sample starts after rank A (default K): a fresh one once tests have "
        "been written against the last (ranks 31-40 read, then --after 40 measures ranks 41-50)",
    )
    parser.add_argument(
        "--holdout",
        type=int,
        default=None,
        metavar="H",
        help="run the held-out sample instead: the mutants ranked K+1..K+H by digest in every module (or the "
        "modules named), which tests were not written against; the table adds its stratified rate",
    )
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
    k = args.sample or 30
    if not args.table and (args.sample or args.holdout):
        after = k if args.after is None else args.after
        size, offset = (args.holdout, after) if args.holdout else (k, 0)
        todo = [
            name
            for module, statuses in results().items()
            if not args.modules or module in args.modules
            for name in sample(statuses, size, offset)
            if statuses[name] in RECHECK
        ]
        print(f"{len(todo)} sampled mutants to check (not yet checked, or not killed last time)")
        if todo:
            print(f"{run_mutmut(todo, args.minutes, args.children) / 60:.1f} min")
    elif not args.table:
        for module in args.modules:
            pattern = f"{module}.*" if module.count(".") else f"{module}*"
            print(f"{module}: {run_mutmut([pattern], args.minutes, args.children) / 60:.1f} min")
    local = _local()
    record = load_record()
    if args.sample and not args.table:
        record["sample"] = args.sample
    if args.holdout and not args.table:
        record["holdout"] = {"after": k if args.after is None else args.after, "size": args.holdout}
    if local and not args.check:
        today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
        record = write_record(local, record, _commit(), today)
    block = render(record)
    if args.check:
        if documented() != block:
            print(
                f"docs/testing.md's mutation table differs from {RECORD.name}: run python tools/mutation.py --table"
            )
            return 1
        print("docs/testing.md's mutation table is the record's")
        return 0
    write_table(block)
    print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
