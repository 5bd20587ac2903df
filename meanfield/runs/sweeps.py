"""Sweeps: one run folder per (grid point, seed), resumable point by point, with a table of means and paired tests.

``meanfield sweep CONFIG.toml --grid key=v1,v2 … --seeds 0,1,2 [--preset NAME] [--jobs N] [--baseline key=v]``
expands the grid's Cartesian product times the seeds into points. Each point is a set of overrides, and its
folder is a pure function of the point ([`point_name`][meanfield.runs.sweeps.point_name]), so that any engine can run the points and a
sweep that was interrupted skips the finished ones and resumes the others from their checkpoints::

    SWEEP/sweep.json                    the latest command's specification (config, preset, overrides, grid,
                                        seeds, baseline) and ``commands``: every command that ran here, in
                                        order, each with its specification and start time (UTC)
    SWEEP/<point>/                      one run folder per point (see [`meanfield.runs`][meanfield.runs]), plus
    SWEEP/<point>/point.json            the point's values, its full override list and its preset
    SWEEP/runs.csv                      one row per point: the grid values, seed, folder, status, final metrics
    SWEEP/summary.csv, summary.md       per grid point: mean and 95 % t interval over the seeds (geometric
                                        mean and the t interval of the logs for ``--log-scale`` metrics), and
                                        the paired difference against the baseline point (same seeds): its
                                        t interval, the paired t-test's raw and Holm-adjusted p-values, the
                                        smallest difference detectable at 80 % power at the observed paired
                                        sd, and (``--detect D``) the pairs a difference D needs

A point's folder name is short and filesystem-safe (only ``[A-Za-z0-9._=-]``, at most 80 characters):
``data.d=16_optim.beta=0.0001_seed=0``; a value that is not a plain word or number is spelled with ``-``
(``optim.beta=cosine-start-0.001-end-1e-06_seed=3_h…``) and the name then ends with a hash of the exact
overrides. Read a point's values from its ``config.toml`` (resolved) or ``point.json``, never from the name.
Sweep folders written before these names (``key=value`` joined by ``,``) still resume: a point whose folder
is missing adopts the old folder with its former name or with its configuration (renamed, one line printed).

``--jobs N`` runs N points at a time in separate processes, each with ``cpu_count/N`` torch threads.
``--order seed`` starts the points seed by seed (every grid point of the first seed, then of the next) instead of
grid point by grid point: a study cut short then holds whole seeds, which pair, and one pool keeps every job
busy across the seeds (a command per seed leaves jobs idle at each seed's tail). The order changes only which
points start first: folders, tables and results are the same.
``--backend ray [--address HOST:PORT]`` runs the points as Ray tasks instead (``pip install
'meanfield-sde[ray]'``): on a running cluster, or on a local one started for the sweep. Each task writes its own
run folder exactly as a local point does; a task whose worker dies is retried by Ray (up to ``RAY_RETRIES``
times) and resumes from the point's latest checkpoint, and a sweep whose driver died is resumed by running the
same command again (finished points are skipped).

``--table-only`` (``sweep_runs(..., run=False)``) writes the tables of a grid × seeds from the points already
finished in the folder and runs nothing: a study that fills one folder through several commands (seed 1 of
some arms, then seed 2, then other arms) gets its whole table, while every command's own table covers only
its points. Points without a finished run are listed with status ``not run`` (a run that diverged or failed
keeps that status and counts as failed); folders under the former names are not adopted (nothing is
renamed): a normal sweep adopts them.

Arms that differ in several keys at once are presets of the file, swept by the grid key ``preset``:
``--preset quick --grid preset=literal,meanfield,adam --baseline preset=adam`` runs ``quick+literal``, … for
every seed and pairs each arm with ``adam`` seed by seed.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from meanfield import config as _config
from meanfield._display import dataframe, html_block, rows_html, rows_text
from meanfield._io import json_clean, write_json_atomic, write_text_atomic
from meanfield.config import ConfigError
from meanfield.progress import progress_default
from meanfield.runs.folder import config_differences
from meanfield.runs.lock import FolderLock
from meanfield.runs.loop import StopFlag
from meanfield.studies.grid import csv_text, grid_points, is_number, runs_of
from meanfield.studies.summary import HOLM_FAMILIES, SummaryTable, TableOptions, summarize

__all__ = [
    "PRESET_AXIS",
    "parse_grid",
    "expand",
    "point_name",
    "point_overrides",
    "point_preset",
    "sweep_runs",
    "SweepTable",
    "TableOptions",
    "summarize",
    "HOLM_FAMILIES",
    "SummaryTable",
]

PRESET_AXIS = "preset"
"""The grid key whose values are presets of the file (arms: ``--grid preset=literal,adam``), applied after
the sweep's ``--preset``."""


def _split_values(text: str) -> list[str]:
    """Split ``"a,[1,2],{k=1,m=2}"`` at the commas outside brackets and quotes."""
    parts, depth, quote, current = [], 0, "", []
    for c in text:
        if quote:
            quote = "" if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(c)
    parts.append("".join(current))
    return [p.strip() for p in parts]


def parse_grid(items: Sequence[str]) -> dict[str, list[Any]]:
    """``["optim.beta=0,1e-4", "model.n_particles=8,16"]`` → ``{"optim.beta": [0, 1e-4], …}``.

    Each value is read as a TOML value (a string when it is not one); commas inside ``[…]``, ``{…}`` or quotes
    do not split.

    Raises:
        ConfigError: for an item without ``=``, an empty value list, or a key given twice.
    """
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or not key or not values.strip():
            raise ConfigError(f"a grid axis must look like key=v1,v2,…, got {item!r}")
        if key in grid:
            raise ConfigError(f"grid key {key!r} is given twice")
        grid[key] = [_config.parse_override(f"{key}={v}")[1] for v in _split_values(values)]
    return grid


def expand(grid: Mapping[str, Sequence[Any]], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """The points of the sweep: the Cartesian product of the grid (in its key order) times the seeds
    ([`grid_points`][meanfield.studies.grid.grid_points], [`runs_of`][meanfield.studies.grid.runs_of]).

    Each point is ``{key: value, …, "seed": s}``, the seed varying fastest.
    """
    if not seeds:
        raise ConfigError("a sweep needs at least one seed")
    if any(not values for values in grid.values()):
        return []
    return runs_of(grid_points(grid, reserved=())[0], seeds)


def _value_text(value: Any) -> str:
    text = _config._toml_value(value)
    return text[1:-1] if isinstance(value, str) else text


_NAME_LIMIT = 80
_UNSAFE_VALUE = re.compile(r"[^A-Za-z0-9.=-]+")  # "_" separates the components of a name
_SAFE_KEY = re.compile(r"[A-Za-z0-9._-]+")


def _name_text(value: Any) -> str:
    """The TOML text of a scalar, a string unquoted and ``1e+20`` written ``1e20`` (the same float)."""
    text = _value_text(value)
    return text.replace("e+", "e") if isinstance(value, float) else text


def _slug(value: Any) -> str:
    """``value`` spelled with ``[A-Za-z0-9.=-]``: a table as its ``kind`` then ``key-value`` pairs."""
    if isinstance(value, Mapping):
        return "-".join(_slug(v) if k == "kind" else f"{_slug(k)}-{_slug(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "-".join(_slug(v) for v in value)
    return _UNSAFE_VALUE.sub("-", _name_text(value))


def _exact(value: Any) -> bool:
    """Whether ``value`` is written as it is: a scalar whose text is safe and reads back as the same value
    (the string ``"1"`` would read back as the number 1)."""
    if isinstance(value, (Mapping, list, tuple)):
        return False
    text = _name_text(value)
    if _UNSAFE_VALUE.search(text):
        return False
    back = _config.parse_override(f"v={text}")[1]
    return type(back) is type(value) and back == value


def point_name(point: Mapping[str, Any]) -> str:
    """The folder name of a point: ``key=value`` in the point's order joined by ``_`` (a pure function).

    ``{"data.d": 16, "optim.beta": 1e-4, "seed": 0}`` → ``data.d=16_optim.beta=0.0001_seed=0``. Only
    ``[A-Za-z0-9._=-]`` occur, and at most 80 characters. A key outside ``[A-Za-z0-9._-]`` or a value whose
    TOML text has characters outside ``[A-Za-z0-9.=-]`` (a table, a list, a string with ``_`` or spaces, a
    string that reads as a number) is spelled with runs of those characters replaced by ``-`` (a table as its
    ``kind`` and ``key-value`` pairs: ``cosine-start-0.001-end-1e-06``); such a name, and one longer than 80
    characters (cut), ends with ``_h`` and the first 8 hex digits of the SHA-256 of the point's exact
    overrides (``key=<TOML value>`` lines, the seed and ``preset`` included). A name without the hash reads
    back unambiguously (a key runs to the first ``=``, its value to the next ``_``) and ends in ``key=value``,
    which a hashed one does not, so two points share a name only by a collision of the hash, which
    [`sweep_runs`][meanfield.runs.sweeps.sweep_runs] refuses. Do not parse names: the values are in the folder's ``config.toml`` and
    ``point.json``.
    """
    parts, exact = [], True
    for k, v in point.items():
        key = str(k)
        if not _SAFE_KEY.fullmatch(key):
            key, exact = re.sub(r"[^A-Za-z0-9.-]+", "-", key), False
        if _exact(v):
            parts.append(f"{key}={_name_text(v)}")
        else:
            parts.append(f"{key}={_slug(v)}")
            exact = False
    name = "_".join(parts)
    if exact and len(name) <= _NAME_LIMIT:
        return name
    text = "\n".join(f"{k}={_config._toml_value(v)}" for k, v in point.items())
    suffix = "_h" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
    return name[: _NAME_LIMIT - len(suffix)].rstrip("_") + suffix


def _legacy_point_name(point: Mapping[str, Any]) -> str:
    r"""The folder name sweeps gave a point before [`point_name`][meanfield.runs.sweeps.point_name] (``key=value`` joined by ``,``; up to 120
    characters of ``[A-Za-z0-9._=,+-]`` and $\sim$): for finding and migrating old sweep folders only."""
    name = ",".join(f"{k}={_value_text(v)}" for k, v in point.items())
    name = re.sub(r"[^A-Za-z0-9._=,+-]", "_", name)
    if len(name) > 120:
        digest = hashlib.sha256(name.encode()).hexdigest()[:10]
        name = f"{name[:109]}~{digest}"
    return name


def point_overrides(point: Mapping[str, Any]) -> list[str]:
    """The ``key=value`` overrides of a point (the seed is the top-level ``seed``; ``preset`` is not a key)."""
    return [f"{k}={_config._toml_value(v)}" for k, v in point.items() if k != PRESET_AXIS]


def point_preset(point: Mapping[str, Any], preset: str | None) -> str | None:
    """The presets of a point: the sweep's ``preset``, then the point's own (``preset`` axis), joined by ``+``."""
    names = [p for p in (preset, point.get(PRESET_AXIS)) if p]
    return "+".join(str(p) for p in names) or None


def _parse_baseline(text: str | None, grid: Mapping[str, Sequence[Any]]) -> dict[str, Any] | None:
    if text is None:
        return None
    baseline = {}
    for item in _split_values(text):
        path, value = _config.parse_override(item)
        key = ".".join(path)
        if key not in grid:
            raise ConfigError(f"baseline key {key!r} is not a grid key; the grid keys are {list(grid)}")
        if value not in grid[key]:
            raise ConfigError(f"baseline {key}={value!r} is not one of the grid's values {grid[key]}")
        baseline[key] = value
    return baseline


_worker_stop: int | None = None  # in a worker process: the signal the sweep's parent forwarded (no new point)


def _worker_init() -> None:
    """A worker of ``--jobs N`` (``WorkerPool`` has made it die with the sweep and put
    it in its own process group): between points SIGINT/SIGTERM only mark it as stopping, and the locks of the
    run folders it takes record the sweep's pid, so that a later sweep can tell one left by a dead sweep."""
    import signal

    from meanfield.runs import lock

    lock.SWEEP_PID = os.getppid()

    def stop(signum: int, frame: Any) -> None:
        global _worker_stop
        _worker_stop = signum

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)


def _resignal(step: int) -> None:
    """After a point's first step: a signal that reached the worker while the run was being built (before the
    run's own handler) is sent again, to the run, which checkpoints and stops."""
    global _worker_stop
    if _worker_stop is not None:
        signum, _worker_stop = _worker_stop, None
        os.kill(os.getpid(), signum)


def _run_point(
    config: str, folder: str, preset: str | None, overrides: list[str], threads: int | None
) -> dict[str, Any]:
    """Run (or resume) one point; returns its summary, or ``{"status": "failed", "error": …}``."""
    from meanfield.runs import RunInterrupted, RunResult, run

    if threads:
        torch.set_num_threads(threads)
    if _worker_stop is not None:  # the sweep is stopping: start nothing
        raise RunInterrupted("the sweep was stopped before this point started", _worker_stop)
    try:
        result = run(
            config, folder, preset=preset, overrides=overrides, resume=True, quiet=True, on_step=_resignal
        )
        return result.summary
    except RunInterrupted:  # Ctrl-C or SIGTERM stops the sweep (the point resumes next time)
        raise
    except Exception as error:  # noqa: BLE001 — a failed point is recorded, the sweep goes on
        reason = f"{type(error).__name__}: {error}"
        try:
            summary = RunResult.load(folder).summary
        except (OSError, ValueError, KeyError):  # no summary, or a damaged one
            summary = {"final": {}}
        return {**summary, "status": "failed", "error": reason}


def _mark_died(folder: str, reason: str) -> dict[str, Any]:
    """The summary of a point whose worker process died (``reason``: how): ``failed`` with the reason, written
    into the point's ``summary.json`` under its lock (the dead worker's lock is stale) when that can be done. A
    later sweep resumes the point from its latest checkpoint."""
    from meanfield.runs import RunFolderError, RunResult

    try:
        summary = RunResult.load(folder).summary
    except (OSError, ValueError, KeyError):
        summary = {"final": {}}
    summary = {**summary, "status": "failed", "error": reason}
    with contextlib.suppress(OSError, RunFolderError), FolderLock(folder, "run"):
        if Path(folder, "summary.json").exists():
            write_json_atomic(Path(folder) / "summary.json", summary)
    return summary


class _Stop(StopFlag):
    """The sweep parent's SIGINT/SIGTERM handler: note the signal (never raise) and forward it to the workers
    (the first makes each running point checkpoint and stop, a second stops them at once)."""

    def __init__(self) -> None:
        super().__init__()
        self.pids: Callable[[], Sequence[int]] = list

    def _handle(self, signum: int, frame: Any) -> None:
        global _worker_stop
        self.signum = signum
        _worker_stop = signum  # --jobs 1: a point being built here stops after its first step (_resignal)
        for pid in self.pids():
            with contextlib.suppress(OSError):
                os.kill(pid, signum)

    def __exit__(self, *exc: object) -> None:
        global _worker_stop
        _worker_stop = None
        super().__exit__(*exc)

    def check(self, what: str) -> None:
        """Raise [`RunInterrupted`][meanfield.runs.RunInterrupted] if a signal came (``what``: where the sweep stands)."""
        from meanfield.runs import RunInterrupted

        if self.signum is not None:
            import signal

            name = signal.Signals(self.signum).name
            raise RunInterrupted(f"the sweep was stopped by {name} {what}", self.signum)


def _run_local(todo: Sequence[int], args, jobs: int, bar, stop: _Stop) -> dict[int, dict[str, Any]]:
    """Run the points ``todo`` here (``jobs`` = 1) or in ``jobs`` worker processes, at most ``jobs`` at a time,
    until all are done or a signal stops the sweep (then every running point checkpoints and stops, no new
    point starts, and [`RunInterrupted`][meanfield.runs.RunInterrupted] is raised once the workers are done). A worker
    that dies (SIGKILL, the out-of-memory killer) fails its own point, with the cause, and is replaced."""
    import signal
    import sys

    from meanfield.runs import RunInterrupted
    from meanfield.runs._workers import NotStarted, WorkerDied, WorkerPool

    summaries: dict[int, dict[str, Any]] = {}
    interrupted: BaseException | None = None
    if jobs == 1:
        for i in todo:
            if stop.signum is not None:
                break
            try:
                summaries[i] = _run_point(*args(i))
            except RunInterrupted as error:
                interrupted = error
                break
            bar.update(1)
    else:
        with WorkerPool(jobs, _run_point, _worker_init) as pool:
            stop.pids = lambda: pool.pids
            waiting = list(todo)
            while waiting or pool.running:
                while waiting and pool.free and stop.signum is None and interrupted is None:
                    i = waiting.pop(0)
                    pool.submit(i, args(i))
                if not pool.running:
                    break
                pool.stopping = stop.signum is not None or interrupted is not None
                for i, ok, value in pool.results(timeout=0.5):
                    if isinstance(value, NotStarted):  # the sweep stopped before the point was sent
                        continue
                    if ok:
                        summaries[i] = value
                    elif isinstance(value, WorkerDied):
                        folder = args(i)[1]
                        summaries[i] = _mark_died(folder, f"{type(value).__name__}: {value}")
                        print(
                            f"sweep point {Path(folder).name}: {value}; marked failed, the other points go on",
                            file=sys.stderr,
                        )
                    elif isinstance(value, (RunInterrupted, KeyboardInterrupt)):
                        interrupted = value
                        continue
                    else:  # _run_point records every failure of a run: this is a bug, which stops the sweep
                        raise value
                    bar.update(1)
    signum = stop.signum if stop.signum is not None else getattr(interrupted, "signum", None)
    if signum is None and isinstance(interrupted, KeyboardInterrupt):  # a worker stopped at once
        signum = signal.SIGINT
    if signum is not None:
        name = signal.Signals(signum).name
        raise RunInterrupted(
            f"the sweep was stopped by {name}: {len(summaries)} points finished this time, the running ones wrote "
            "a checkpoint",
            signum,
        )
    return summaries


BACKENDS = ("local", "ray")
ORDERS = ("grid", "seed")  # which points start first: grid point by grid point, or seed by seed
RAY_RETRIES = 3  # Ray retries a point whose worker process died (the point resumes from its checkpoint)


def _run_on_ray(todo: Sequence[int], args, address: str | None, bar) -> dict[int, dict[str, Any]]:
    """Run the points ``todo`` as Ray tasks (one CPU each); their summaries by index, as they finish."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "backend 'ray' needs Ray: pip install 'meanfield-sde[ray]' (or use --backend local)"
        ) from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        task = ray.remote(num_cpus=1, max_retries=RAY_RETRIES)(_run_point)
        refs = {task.remote(*args(i)): i for i in todo}
        summaries, pending = {}, list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                try:
                    summaries[refs[ref]] = ray.get(ref)
                except Exception as error:  # noqa: BLE001 — retries exhausted: recorded, the sweep goes on
                    summaries[refs[ref]] = {
                        "status": "failed",
                        "error": f"{type(error).__name__}: {error}",
                        "final": {},
                    }
                bar.update(1)
        return summaries
    finally:
        if started:
            ray.shutdown()


def _check_names(points: Sequence[Mapping[str, Any]], names: Sequence[str]) -> None:
    """Raise unless every point has its own folder name."""
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            raise ConfigError(
                f"points {dict(points[seen[name]])} and {dict(points[i])} would share the run folder {name!r}"
                + (" (the grid repeats a value)" if points[seen[name]] == points[i] else "")
            )
        seen[name] = i


def _stored_config(folder: Path) -> dict[str, Any] | None:
    try:
        return _config.load_toml(folder / "config.toml")
    except (OSError, ConfigError, ValueError):
        return None


def _adopt_old_folders(
    out: Path, points: Sequence[Mapping[str, Any]], names: Sequence[str], configs: Sequence[dict]
) -> None:
    """Give the folder of a point written under an older name its [`point_name`][meanfield.runs.sweeps.point_name].

    For each point whose folder ``out/<name>`` is missing: a subfolder of ``out`` (not another point's) named
    [`_legacy_point_name`][meanfield.runs.sweeps._legacy_point_name] of the point, else one whose ``config.toml`` equals the point's resolved
    configuration, is renamed to ``<name>`` (one line printed).
    """
    missing = [i for i, name in enumerate(names) if not (out / name).exists()]
    if not missing:
        return
    taken = set(names)
    free = {p.name: p for p in sorted(out.iterdir()) if p.is_dir() and p.name not in taken}
    if not free:
        return
    found: dict[int, Path] = {}
    for i in missing:
        legacy = _legacy_point_name(points[i])
        if legacy in free:
            found[i] = free.pop(legacy)
    stored = None
    for i in missing:
        if i in found or not free:
            continue
        if stored is None:  # read once, only when some point has no folder by either name
            stored = {name: _stored_config(folder) for name, folder in free.items()}
        want = _config.load_toml_text(_config.to_toml(configs[i]))
        match = next((name for name in free if stored.get(name) is not None and stored[name] == want), None)
        if match is not None:
            found[i] = free.pop(match)
    for i, folder in sorted(found.items()):
        folder.rename(out / names[i])
        print(f"{out}: renamed the run folder {folder.name!r} to {names[i]!r} (its point {dict(points[i])})")


ORPHAN_GRACE_S = 60.0
"""How long a sweep waits for a point's orphan (a worker of a dead sweep, stopping by itself) before it sends
SIGTERM; after SIGTERM it waits [`ORPHAN_STOP_S`][meanfield.runs.sweeps.ORPHAN_STOP_S] more for the checkpoint."""
ORPHAN_STOP_S = 300.0
"""How long a sweep waits, after SIGTERM, for an orphan to write its checkpoint and let its point go."""


def _take_over_orphans(out: Path, names: Sequence[str], quiet: bool) -> None:
    """Free the points of ``out`` still held by the workers of a sweep that is gone (their parent died: SIGKILL,
    a lost node), so that this sweep resumes them instead of failing them with ``FolderLocked``.

    An orphan gets [`ORPHAN_GRACE_S`][meanfield.runs.sweeps.ORPHAN_GRACE_S] seconds to end by itself (a worker dies with its sweep: it finishes its
    step and checkpoints), then SIGTERM (an orphan of an older version keeps training), and
    [`ORPHAN_STOP_S`][meanfield.runs.sweeps.ORPHAN_STOP_S] more. A point held by a live sweep's worker, or by a ``meanfield run`` started by hand,
    is left alone (it fails with ``FolderLocked`` naming its holder)."""
    import signal
    import sys

    from meanfield.runs.lock import orphan_holder, wait_until_free

    for name in names:
        folder = out / name
        holder = orphan_holder(folder)
        if holder is None:
            continue
        pid = holder["pid"]
        say = f"{folder}: held by pid {pid}, a worker of sweep pid {holder['sweep_pid']}, which is gone"
        if wait_until_free(folder, ORPHAN_GRACE_S):
            print(f"{say}; it stopped, the point resumes from its checkpoint", file=sys.stderr)
            continue
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
        stopped = wait_until_free(folder, ORPHAN_STOP_S)
        print(
            f"{say}; sent it SIGTERM: "
            + ("it checkpointed and stopped, the point resumes" if stopped else "it is still running"),
            file=sys.stderr,
        )


def _check_finished(
    out: Path, names: Sequence[str], configs: Sequence[dict], resumes: bool = True
) -> dict[int, dict[str, Any]]:
    """Refuse to count a finished run whose configuration is not its point's: a rerun of a sweep with another
    preset or other overrides into the same folder would otherwise skip the finished points and mix their
    results with the new ones. Every point is checked before anything runs or ``sweep.json`` is rewritten.

    Args:
        out: the sweep folder.
        names: the points' folder names.
        configs: the points' resolved configurations, in the order of ``names``.
        resumes: as in [`_finished`][meanfield.runs.sweeps._finished] (``False`` in a ``--table-only`` command).

    Returns:
        The summaries of the finished points by index (each ``summary.json`` read once).

    Raises:
        ConfigError: naming the first such point, the keys that differ and what to do.
    """
    finished = {}
    for i, (name, resolved) in enumerate(zip(names, configs)):
        folder = out / name
        summary = _finished(folder, resumes)
        if summary is None:
            continue  # an unfinished run is checked by its resume (runs.folder.check_folder)
        finished[i] = summary
        stored = _stored_config(folder)
        want = _config.load_toml_text(_config.to_toml(resolved))
        if stored is not None and stored != want:
            changed = ", ".join(sorted(config_differences(stored, want)))
            raise ConfigError(
                f"sweep point {name}: {folder} holds a finished run of another configuration (it differs in "
                f"{changed}); a rerun must use the same config, preset and overrides, or another --out"
            )
    return finished


def _write_point(folder: Path, point: Mapping[str, Any], overrides: list[str], preset: str | None) -> None:
    """``folder/point.json``: the point's values, its full list of overrides and its presets (unless there)."""
    record = {"point": dict(point), "overrides": overrides, "preset": preset}
    path = folder / "point.json"
    try:
        if json.loads(path.read_text()) == json.loads(json.dumps(json_clean(record))):
            return
    except (OSError, ValueError):
        pass
    write_json_atomic(path, record)


def _read_summary(folder: Path) -> tuple[dict[str, Any] | None, str | None]:
    """``(summary, None)`` for a readable ``folder/summary.json`` (``None`` when it is absent or not an object),
    ``(None, why)`` when it cannot be read."""
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return None, str(error)
    return (summary if isinstance(summary, dict) else None), None


def _finished(folder: Path, resumes: bool = True) -> dict[str, Any] | None:
    """The summary of a finished point, else ``None`` (a damaged ``summary.json`` too, said in one line: the
    point resumes, and its run rewrites the summary from its last checkpoint; ``resumes=False``, in a
    ``--table-only`` command, it is listed as not run)."""
    summary, error = _read_summary(folder)
    if error is not None:
        then = "the point is resumed from its checkpoint" if resumes else "the point is listed as not run"
        print(f"{folder / 'summary.json'} is unreadable ({error}); {then}")
    return summary if summary is not None and summary.get("status") == "finished" else None


def _preflight(names: Sequence[str], configs: Sequence[Mapping[str, Any]]) -> None:
    """Build the task, model and optimizer of every distinct configuration of the sweep (seeds aside) before
    anything runs, so that a value the schemas allow but the model refuses fails at once, naming its point."""
    from meanfield.runs import preflight

    seen: set[str] = set()
    for name, resolved in zip(names, configs):
        key = json.dumps({k: v for k, v in resolved.items() if k != "seed"}, sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        try:
            preflight(resolved)
        except ConfigError as error:
            raise ConfigError(f"sweep point {name}: {error}") from None


@dataclass
class SweepTable:
    """The result of a sweep.

    Attributes:
        path: the sweep folder.
        grid: the grid (key → values).
        rows: one dict per point: the grid values, ``seed``, ``folder`` (the run folder's name in ``path``),
            ``status``, the final metrics, ``error``.
        summary: one dict per grid point, a [`SummaryTable`][meanfield.studies.summary.SummaryTable] (see
            [`summarize`][meanfield.studies.summary.summarize]).
        metrics: the metrics summarised.
        options: how the table was computed ([`TableOptions`][meanfield.studies.summary.TableOptions]).
    """

    path: Path
    grid: dict[str, list[Any]]
    rows: list[dict[str, Any]]
    summary: SummaryTable | list[dict[str, Any]]
    metrics: list[str]
    options: TableOptions = field(default_factory=lambda: TableOptions())

    @property
    def failed(self) -> list[dict[str, Any]]:
        """The rows whose run did not finish (failed, diverged, interrupted), not those left unrun by
        ``--table-only``."""
        return [r for r in self.rows if r["status"] not in ("finished", NOT_RUN)]

    @property
    def not_run(self) -> list[dict[str, Any]]:
        """The rows a ``--table-only`` command found without a finished run (status ``"not run"``)."""
        return [r for r in self.rows if r["status"] == NOT_RUN]

    @property
    def table(self) -> SummaryTable:
        """[`summary`][meanfield.runs.sweeps.SweepTable] as the [`SummaryTable`][meanfield.studies.summary.SummaryTable] of both sweeps."""
        if isinstance(self.summary, SummaryTable):
            return self.summary
        return SummaryTable(self.summary, list(self.grid), self.metrics, self.options)

    def markdown(self) -> str:
        """The summary as a Markdown table, with the legend of its columns."""
        return self.table.markdown()

    def _title(self) -> str:
        points = len({tuple(repr(r.get(k)) for k in self.grid) for r in self.rows})
        seeds = len({repr(r.get("seed")) for r in self.rows})
        counted = ", ".join(f"{n} {status}" for status, n in Counter(r["status"] for r in self.rows).items())
        return f"SweepTable: {self.path}, {len(self.rows)} runs ({points} points × {seeds} seeds): {counted}"

    def __repr__(self) -> str:
        return f"{self._title()}\n{rows_text(*self.table._cells())}"

    def _repr_html_(self) -> str:
        return html_block(self._title(), rows_html(*self.table._cells()))

    def to_pandas(self, *, summary: bool = False):
        """``rows`` (or with ``summary=True`` ``summary``) as a ``pandas.DataFrame``, its columns in the
        order they first appear; needs pandas (``pip install 'meanfield-sde[pandas]'``)."""
        rows = self.summary if summary else self.rows
        return dataframe(rows, list(dict.fromkeys(k for row in rows for k in row)))


def sweep_runs(
    config: str | os.PathLike,
    grid: Mapping[str, Sequence[Any]],
    seeds: Sequence[int],
    out: str | os.PathLike,
    *,
    preset: str | None = None,
    overrides: Sequence[str] = (),
    jobs: int = 1,
    baseline: str | None = None,
    metrics: Sequence[str] | None = None,
    quiet: bool = False,
    backend: str = "local",
    address: str | None = None,
    table: TableOptions | None = None,
    run: bool = True,
    order: str = "grid",
) -> SweepTable:
    """Run every point of ``grid × seeds`` into ``out/<point_name>`` and write the tables (module docstring).

    Finished points are skipped; unfinished ones resume from their latest checkpoint. Every point's
    configuration is checked, and every point's folder name checked unique, before any runs. A point whose
    folder is missing adopts an older folder of it in ``out`` (named by the former ``key=value,…`` rule, or
    holding the point's resolved ``config.toml``), renamed. Each point's folder gets ``point.json`` (its
    values, overrides and presets) before it runs.

    Args:
        config: the TOML configuration file.
        grid: key → values ([`parse_grid`][meanfield.runs.sweeps.parse_grid]).
        seeds: the seeds (each point runs once per seed).
        out: the sweep folder.
        preset: the preset applied to every point.
        overrides: ``key=value`` applied to every point before the point's own values.
        jobs: points run at once (separate processes; local backend).
        baseline: ``"key=value[,key=value]"``, the point the others are compared with, seed by seed.
        metrics: the final metrics to summarise (default: every numeric final metric of the finished runs).
        quiet: no progress bar and no table printed.
        backend: ``"local"`` (this machine, ``jobs`` processes) or ``"ray"`` (Ray tasks; module docstring).
        address: the Ray cluster's address (``None``: a cluster already initialised in this process, else a
            local one started for the sweep, or ``RAY_ADDRESS``).
        table: how the table is computed: power, named differences, log-scale metrics, Holm's family
            ([`TableOptions`][meanfield.studies.summary.TableOptions]; default: its defaults). Rerunning a finished sweep with other options
            rewrites the tables without running anything.
        run: ``False``: write the tables from the points already finished and run nothing (``--table-only``):
            no folder is created, adopted or written but the tables, ``sweep.json`` is left as it is, and a
            point without a finished run gets status ``"not run"`` (``"diverged"``/``"failed"`` when its run
            ended so: those count as failed, as in a sweep that ran them).
        order: which points start first (``ORDERS``): ``"grid"``, the seeds of each grid point in turn, or
            ``"seed"``, every grid point of one seed before the next seed's (module docstring). Only the
            order of the runs: the folders and tables do not depend on it.

    Returns:
        [`SweepTable`][meanfield.runs.sweeps.SweepTable].
    """
    from meanfield.runs import load_config

    out = Path(out)
    grid = {k: list(v) for k, v in grid.items()}
    seeds = list(seeds)
    _check_engine(jobs, backend, order)
    base = _parse_baseline(baseline, grid)
    options = table if table is not None else TableOptions()
    if metrics is not None and (unknown := [m for m in options.log_metrics if m not in metrics]):
        raise ConfigError(f"log-scale metrics {unknown} are not among the metrics summarised {list(metrics)}")
    points = expand(grid, seeds)
    names = [point_name(point) for point in points]
    _check_names(points, names)
    configs = [  # every point's configuration is valid before the first runs
        load_config(config, point_preset(point, preset), [*overrides, *point_overrides(point)])
        for point in points
    ]
    spec = {
        "config": str(config),
        "preset": preset,
        "overrides": list(overrides),
        "grid": grid,
        "seeds": seeds,
        "baseline": baseline,
        "order": order,
    }
    tables = functools.partial(_write_tables, out, grid, points, names, metrics=metrics, base=base, options=options)
    if not run:
        return _table_only(out, names, configs, lambda summaries: tables(summaries, quiet=quiet))
    with _Stop() as stop:  # from here a signal stops the sweep cleanly, start-up included
        _preflight(names, configs)
        if not quiet:
            _say_imported_tasks(out, configs)
        stop.check("before any point ran")
        out.mkdir(parents=True, exist_ok=True)
        with FolderLock(out, "sweep"):  # one sweep per folder; signals reach the workers
            _adopt_old_folders(out, points, names, configs)
            finished = _check_finished(out, names, configs)  # the folder is ours (locked) from here on
            _take_over_orphans(out, [n for i, n in enumerate(names) if i not in finished], quiet)
            stop.check("before any point ran")
            _record_command(out, spec)
            summaries = dict(finished)
            todo = [i for i in range(len(points)) if i not in finished]
            for i, point in enumerate(points):
                if i in todo or not (out / names[i] / "point.json").exists():
                    point_args = [*overrides, *point_overrides(point)]
                    _write_point(out / names[i], point, point_args, point_preset(point, preset))
            if order == "seed":  # stable: within a seed, the grid's order
                todo.sort(key=lambda i: seeds.index(points[i]["seed"]))

            def args(i: int) -> tuple:
                point = points[i]
                return (
                    str(Path(config).resolve()),
                    str((out / names[i]).resolve()),
                    point_preset(point, preset),
                    [*overrides, *point_overrides(point)],
                    _threads(jobs, backend),
                )

            summaries.update(_run_todo(out, todo, len(points), args, jobs, backend, address, stop, quiet))
            return tables(summaries, quiet=quiet)


def _check_engine(jobs: int, backend: str, order: str) -> None:
    """Raise a ``ConfigError`` for a number of jobs below 1, an unknown backend or order."""
    if jobs < 1:
        raise ConfigError(f"jobs must be ≥ 1, got {jobs}")
    if backend not in BACKENDS:
        raise ConfigError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    if order not in ORDERS:
        raise ConfigError(f"order must be one of {list(ORDERS)}, got {order!r}")


def _table_only(
    out: Path, names: Sequence[str], configs: Sequence[dict], tables: Callable[[dict], SweepTable]
) -> SweepTable:
    """``--table-only``: the tables of the points already finished in ``out``; the others listed as not run."""
    if not (out / "sweep.json").is_file():
        raise ConfigError(
            f"--table-only: {out} is not a sweep folder (it holds no sweep.json: nothing has run there)"
        )
    with FolderLock(out, "sweep"):  # the tables have one writer at a time
        finished = _check_finished(out, names, configs, resumes=False)
        return tables({i: finished.get(i) or _not_run(out / name) for i, name in enumerate(names)})


def _say_imported_tasks(out: Path, configs: Sequence[Mapping[str, Any]]) -> None:
    """One line per task of the sweep that runs code imported from a file."""
    from meanfield.tasks import task_source

    for task, source in {c["task"]: task_source(c["task"]) for c in configs}.items():
        if source is not None:  # a configuration that imports code says so
            print(f"{out}: task {task!r} runs code imported from {source}")


def _threads(jobs: int, backend: str) -> int | None:
    """Torch threads per point: one per Ray task, ``cpu_count/jobs`` for several local jobs, else torch's."""
    if backend == "ray":
        return 1  # one CPU per task: Ray schedules the cluster's cores
    return max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None


def _run_todo(
    out: Path,
    todo: Sequence[int],
    total: int,
    args: Callable[[int], tuple],
    jobs: int,
    backend: str,
    address: str | None,
    stop: _Stop,
    quiet: bool,
) -> dict[int, dict[str, Any]]:
    """Run the points ``todo`` on the backend, with a progress bar over all ``total`` points."""
    shown = not quiet and progress_default()  # the policy of meanfield.progress
    bar = tqdm(total=total, initial=total - len(todo), disable=not shown, unit="run", desc=out.name)
    try:
        if backend == "ray":
            return _run_on_ray(todo, args, address, bar)
        return _run_local(todo, args, jobs, bar, stop)
    finally:
        bar.close()


def _write_tables(
    out: Path,
    grid: Mapping[str, Sequence[Any]],
    points: Sequence[Mapping[str, Any]],
    names: Sequence[str],
    summaries: Mapping[int, Mapping[str, Any]],
    *,
    metrics: Sequence[str] | None,
    base: Mapping[str, Any] | None,
    options: TableOptions,
    quiet: bool,
) -> SweepTable:
    """``runs.csv``, ``summary.csv`` and ``summary.md`` of the points from their summaries (printed unless quiet)."""
    rows = []
    for i, point in enumerate(points):
        s = summaries[i]
        finals = {k: v for k, v in s.get("final", {}).items() if is_number(v)}
        row = {**point, "folder": names[i], "status": s.get("status"), **finals, "error": s.get("error")}
        rows.append(row)
    if metrics is None:
        metrics = list(
            dict.fromkeys(
                k
                for r in rows
                if r["status"] == "finished"
                for k in r
                if k not in (*grid, "seed", "folder", "status", "error") and is_number(r[k])
            )
        )
    summary = summarize(rows, list(grid), metrics, base, options=options)
    result = SweepTable(out, dict(grid), rows, summary, list(metrics), options)
    write_text_atomic(out / "runs.csv", csv_text(rows))
    write_text_atomic(out / "summary.csv", csv_text(summary))
    write_text_atomic(out / "summary.md", result.markdown())
    if not quiet:
        print(result.markdown())
        if result.failed:
            print(f"{len(result.failed)} of {len(rows)} runs did not finish; see {out / 'runs.csv'}")
        if result.not_run:
            print(
                f"{len(result.not_run)} of {len(rows)} points have no finished run and were not run (--table-only): "
                f"the tables cover the {len(rows) - len(result.not_run) - len(result.failed)} finished ones"
            )
    return result


NOT_RUN = "not run"
"""The status of a point that a ``--table-only`` command found without a finished run."""


def _not_run(folder: Path) -> dict[str, Any]:
    """A table-only row for a point without a finished run: ``diverged``/``failed`` when its run ended so (with
    its reason), else ``not run`` with what its folder holds."""
    if not (folder / "summary.json").exists():
        return {"status": NOT_RUN, "error": "no run folder" if not folder.is_dir() else "no summary.json"}
    summary, _ = _read_summary(folder)
    if summary is None:
        return {
            "status": NOT_RUN,
            "error": "an unreadable summary.json (a sweep resumes the point from its checkpoint)",
        }
    status = summary.get("status")
    if status in ("diverged", "failed"):
        return {**summary, "final": {}}
    return {"status": NOT_RUN, "error": f"its run is {status} at step {summary.get('step')}"}


def _record_command(out: Path, spec: Mapping[str, Any]) -> None:
    """``out/sweep.json``: the latest command's ``spec`` at the top level and ``commands``, every command that ran
    in ``out`` in order (each ``spec`` with ``started``, UTC ISO 8601). A file from before ``commands`` existed
    starts the list with its own specification, ``started: null``; an unreadable one is replaced (said once)."""
    path = out / "sweep.json"
    commands: list[Any] = []
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            print(f"{path} is unreadable ({error}); its record of earlier commands is lost, this one is kept")
            old = None
        if isinstance(old, dict):
            if isinstance(old.get("commands"), list):
                commands = list(old["commands"])
            else:
                commands = [{**{k: v for k, v in old.items() if k != "commands"}, "started": None}]
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    commands.append({**spec, "started": started})
    write_json_atomic(path, {**spec, "commands": commands})
