r"""The table of a sweep: per grid point the mean and its confidence interval over the seeds, and against a
baseline the paired difference with its interval, p-value, Holm's adjustment, detectable difference and cost.

[`summarize`][meanfield.studies.summary.summarize] builds it from the runs' rows (one dict per point × seed) and
returns a [`SummaryTable`][meanfield.studies.summary.SummaryTable], the one table type of both sweeps: the
in-memory [`SweepResult.summarize`][meanfield.studies.in_memory.SweepResult.summarize] and the run-folder
[`SweepTable.summary`][meanfield.runs.sweeps.SweepTable] (``summary.md``, ``summary.csv`` of ``meanfield sweep``).
How a point pairs with its baseline is [`meanfield.studies.grid`][meanfield.studies.grid]'s.

Imports: [`grid`][meanfield.studies.grid], [`stats`][meanfield.studies.stats] and the base modules.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._display import dataframe, html_block, rows_html, rows_text
from ..config import ConfigError
from .grid import baseline_runs, csv_text, is_number, paired_values, point_key
from .stats import (
    PairedDifference,
    cost_text,
    holm,
    interval_cell,
    log_interval,
    number_text,
    p_text,
    paired_difference,
    t_interval,
)

__all__ = ["HOLM_FAMILIES", "TableOptions", "SummaryTable", "summarize"]

HOLM_FAMILIES = ("table", "metric")


@dataclass(frozen=True)
class TableOptions:
    r"""How [`summarize`][meanfield.studies.summary.summarize] computes the table (``meanfield sweep`` flags in brackets).

    Attributes:
        level: the confidence level of every interval; the tests' α is $1 - \text{ level }$ (0.95, α = 0.05).
        power: the power of the detectable difference and of the pairs needed [``--power``, 0.8].
        detect: named differences D, each adding "pairs for Δ = D" [``--detect D``, repeatable]. For a
            log-scale metric D is a difference of natural logs (D = 0.1: a ratio of e^0.1 = 1.105).
        log_metrics: positive metrics (an MSE) summarised on the log scale [``--log-scale NAME``]: the
            geometric mean with the t interval of the logs, and paired ratios (differences of logs).
        holm: the family of Holm's correction: ``"table"`` (every paired test of the table, all metrics) or
            ``"metric"`` (the tests of each metric separately) [``--holm``].
        cost: a column of the runs' rows (seconds, e.g. ``wall_time_s``) whose sum over a point's runs is its
            cost, shown in hours in a column ``cost``.
    """

    level: float = 0.95
    power: float = 0.8
    detect: tuple[float, ...] = ()
    log_metrics: tuple[str, ...] = ()
    holm: str = "table"
    cost: str | None = None

    def __post_init__(self) -> None:
        if not 0 < self.level < 1:
            raise ConfigError(f"the confidence level must be in (0, 1), got {self.level}")
        if not 1 - self.level < self.power < 1:
            raise ConfigError(f"power must be in (α, 1) = ({1 - self.level:g}, 1), got {self.power}")
        for d in self.detect:
            if not (is_number(d) and d > 0):
                raise ConfigError(f"a difference to detect must be a number > 0, got {d!r}")
        if self.cost is not None and not isinstance(self.cost, str):
            raise ConfigError(f"cost must be the name of a column (str), got {self.cost!r}")
        if self.holm not in HOLM_FAMILIES:
            raise ConfigError(f"holm must be one of {list(HOLM_FAMILIES)}, got {self.holm!r}")

    @property
    def alpha(self) -> float:
        return 1 - self.level


def _pairs_key(metric: str, delta: float) -> str:
    return f"{metric}:pairs_for_{delta:g}"


def _pairs_needed(d: PairedDifference, delta: float, options: TableOptions) -> float:
    """The pairs ``d``'s test needs for ``delta`` (inf beyond ``pairs_needed``'s limit, NaN without an sd)."""
    try:
        return d.pairs_needed(delta, options.power, options.alpha)
    except ValueError:  # more pairs than any sweep runs
        return math.inf


def summarize(
    rows: Sequence[Mapping[str, Any]],
    keys: Sequence[str],
    metrics: Sequence[str],
    baseline: Mapping[str, Any] | None = None,
    level: float = 0.95,
    options: TableOptions | None = None,
    finished: Callable[[Mapping[str, Any]], bool] | None = None,
) -> SummaryTable:
    r"""Per grid point: ``n`` and, per metric, the mean with its t interval over the seeds that finished.

    Per metric ``m`` the entry has ``m``, ``m:lo``, ``m:hi``: the mean and its Student-t interval (df = n − 1);
    for a log-scale metric (``options.log_metrics``, every value > 0) the geometric mean and the t interval of
    the logs mapped back ([`log_interval`][meanfield.studies.stats.log_interval]), with ``m:scale = "log"``.
    With ``options.cost`` (a column of the rows, e.g. ``wall_time_s``), ``cost``: its sum over the point's runs.

    With a ``baseline`` (values of some grid keys; the other keys are matched point by point,
    [`baseline_runs`][meanfield.studies.grid.baseline_runs]) each point also gets ``is_baseline`` (whether it is a
    baseline point) and, per metric, the paired difference ``point − baseline`` over the seeds both finished
    (for a log-scale metric, of the natural logs: ``ln(point/baseline)``):

    - ``m:diff``, ``m:diff_lo``, ``m:diff_hi``: its mean and t interval (df = ``m:pairs`` − 1);
    - ``m:pairs``: the number of pairs; ``m:sd``: the sample sd of the paired differences;
    - ``m:p``: the two-sided paired t-test's p-value; ``m:p_holm``: Holm's adjustment of it over the family
      ``options.holm`` (every test of the table, or of the metric), NaN p-values left out of the family;
    - ``m:detectable``: the smallest $|\Delta|$ the same test detects with power ``options.power`` at α =
      $1 - \text{ level }$ if the paired sd is ``m:sd`` ([`detectable_difference`][meanfield.studies.stats.detectable_difference], noncentral
      t);
    - ``m:pairs_for_D`` for each ``D`` of ``options.detect``: the pairs that give that power for $|\Delta| = D$
      at ``m:sd`` ([`pairs_needed`][meanfield.studies.stats.pairs_needed]).

    Args:
        rows: one dict per point × seed: the values of ``keys``, ``seed`` and the metrics.
        finished: which rows count (default: ``status == "finished"``, a run folder's).
        level: used when ``options`` is not given.

    Returns:
        [`SummaryTable`][meanfield.studies.summary.SummaryTable]: one entry per grid point with a finished run,
        in the order of ``rows``.

    Raises:
        ValueError: two finished rows of one point have the same ``seed``.
    """
    options = options if options is not None else TableOptions(level=level)
    finished = finished or (lambda r: r.get("status") == "finished")
    done = [r for r in rows if finished(r)]
    groups: dict[tuple, list[Mapping[str, Any]]] = {point_key(r, keys): [] for r in rows}
    seen: set[tuple] = set()
    for r in done:
        key = point_key(r, keys)
        if "seed" in r and (key, r["seed"]) in seen:  # counted twice, it would narrow every interval
            point = ", ".join(f"{k}={r[k]!r}" for k in keys)
            raise ValueError(
                f"summarize: two finished runs of the point ({point}) have seed {r['seed']!r}; give each seed once"
            )
        seen.add((key, r.get("seed")))
        groups[key].append(r)
    table = []
    for runs in groups.values():
        if not runs:
            continue
        entry: dict[str, Any] = {**{k: runs[0][k] for k in keys}, "n": len(runs)}
        for m in metrics:
            values = [r[m] for r in runs if is_number(r.get(m))]
            if len(values) < len(runs):  # a run's value is NaN, inf or missing: the mean is of the others
                entry[f"{m}:n"] = len(values)
            entry.update(_mean_entry(m, values, options))
        if options.cost is not None:
            entry["cost"] = math.fsum(r[options.cost] for r in runs if is_number(r.get(options.cost)))
        if baseline is not None:
            entry.update(_paired_entry(entry, runs, done, keys, metrics, baseline, options))
        table.append(entry)
    if baseline is not None and table and not any(e.get("is_baseline") for e in table):
        warnings.warn(
            f"baseline {dict(baseline)} matches no finished run of the table's points: no paired column (a value "
            "must equal the stored one, e.g. a float32 grid stores 1e-3 as 0.0010000000474974513)",
            RuntimeWarning,
            stacklevel=2,
        )
    _adjust(table, metrics, options)
    return SummaryTable(table, tuple(keys), tuple(metrics), options)


def _logged(m: str, values: Sequence[float], options: TableOptions) -> bool:
    return m in options.log_metrics and all(v > 0 for v in values)


def _mean_entry(m: str, values: Sequence[float], options: TableOptions) -> dict[str, Any]:
    """``m``, ``m:lo``, ``m:hi`` (and ``m:scale`` for a log-scale metric) of one point's values."""
    if not values:
        return {}
    if _logged(m, values, options):
        li = log_interval(values, options.level)
        return {m: li.center, f"{m}:lo": li.lo, f"{m}:hi": li.hi, f"{m}:scale": "log"}
    ci = t_interval(values, options.level)
    entry: dict[str, Any] = {m: ci.mean, f"{m}:lo": ci.lo, f"{m}:hi": ci.hi}
    if m in options.log_metrics:
        entry[f"{m}:scale"] = "linear (a value ≤ 0)"
    return entry


def _paired_entry(
    entry: Mapping[str, Any],
    runs: Sequence[Mapping[str, Any]],
    done: Sequence[Mapping[str, Any]],
    keys: Sequence[str],
    metrics: Sequence[str],
    baseline: Mapping[str, Any],
    options: TableOptions,
) -> dict[str, Any]:
    """``is_baseline`` and, per metric, the paired difference against the baseline (``summarize``)."""
    point = {k: entry[k] for k in keys}
    is_base, base = baseline_runs(point, baseline, done, keys)
    out: dict[str, Any] = {"is_baseline": is_base}
    if is_base:
        return out
    for m in metrics:
        a, b = paired_values(runs, base, m)
        if not a:
            continue
        if _logged(m, a + b, options):
            a, b = [math.log(v) for v in a], [math.log(v) for v in b]
            out[f"{m}:diff_scale"] = "log"
        d = paired_difference(a, b, level=options.level)
        out.update(
            {
                f"{m}:diff": d.mean,
                f"{m}:diff_lo": d.lo,
                f"{m}:diff_hi": d.hi,
                f"{m}:p": d.p_value,
                f"{m}:pairs": d.n,
                f"{m}:sd": d.sd,
                f"{m}:detectable": d.detectable(options.power, options.alpha),
            }
        )
        for delta in options.detect:
            out[_pairs_key(m, delta)] = _pairs_needed(d, delta, options)
    return out


def _adjust(table: Sequence[dict[str, Any]], metrics: Sequence[str], options: TableOptions) -> None:
    """``m:p_holm`` in every entry with a paired test: Holm over the family ``options.holm``."""
    families: dict[str, list[tuple[dict[str, Any], str]]] = {}
    for entry in table:
        for m in metrics:
            if f"{m}:p" in entry:
                families.setdefault("table" if options.holm == "table" else m, []).append((entry, m))
    for members in families.values():
        adjusted = holm([e[f"{m}:p"] for e, m in members])
        for (e, m), value in zip(members, adjusted):
            e[f"{m}:p_holm"] = float(value)


class SummaryTable(list):
    """The table of a sweep: a list of entries, one dict per grid point ([`summarize`][meanfield.studies.summary.summarize]), that
    knows its keys, metrics and options, and prints itself (``repr``, notebook HTML, Markdown, CSV, pandas).

    Attributes:
        keys: the grid keys; ``metrics``: the metrics summarised; ``options``: how
            ([`TableOptions`][meanfield.studies.summary.TableOptions]).
    """

    def __init__(
        self,
        entries: Sequence[Mapping[str, Any]] = (),
        keys: Sequence[str] = (),
        metrics: Sequence[str] = (),
        options: TableOptions | None = None,
    ) -> None:
        super().__init__(entries)
        self.keys, self.metrics = tuple(keys), tuple(metrics)
        self.options = options if options is not None else TableOptions()

    @property
    def paired(self) -> bool:
        """Whether the table compares its points with a baseline."""
        return any(f"{m}:diff" in e for e in self for m in self.metrics)

    def markdown(self) -> str:
        """The table in Markdown, with the legend of its columns."""
        return _markdown(self, self.keys, self.metrics, self.options)

    def to_csv(self, path: str | os.PathLike | None = None) -> str:
        """Every field of every entry as CSV (written to ``path`` when given). Returns the text."""
        return csv_text(self, path=path)

    def to_pandas(self):
        """The entries as a ``pandas.DataFrame`` (every field; needs pandas)."""
        return dataframe(self, list(dict.fromkeys(k for e in self for k in e)))

    def _cells(self) -> tuple[list[dict], list[str]]:
        """Per point: the grid values, ``n``, each metric's ``mean (lo – hi)`` and, against a baseline, its
        paired difference ``+Δ (lo – hi), p = …, Holm …``."""
        columns, paired = [*self.keys, "n"], self.paired
        for m in self.metrics:
            columns += [m, f"Δ{m}"] if paired else [m]
        if self.options.cost is not None:
            columns.append("cost")
        cells = []
        for e in self:
            row: dict[str, Any] = {k: e.get(k) for k in (*self.keys, "n")}
            for m in self.metrics:
                row[m] = _mean_text(e, m)
                if paired:
                    row[f"Δ{m}"] = _diff_text(e, m)
            if "cost" in e:
                row["cost"] = cost_text(e["cost"])
            cells.append(row)
        return cells, columns

    def _title(self) -> str:
        ps = [e[f"{m}:p"] for e in self for m in self.metrics if f"{m}:p" in e]
        tests = sum(math.isfinite(p) for p in ps)  # a point with one pair has a difference, and no test
        untested = f", {len(ps) - tests} with too few pairs or no spread for one" if len(ps) > tests else ""
        against = f", {tests} paired tests (Holm over the {self.options.holm}){untested}" if self.paired else ""
        return f"SummaryTable: {len(self)} points × {len(self.metrics)} metrics{against}"

    def __repr__(self) -> str:
        return f"{self._title()}\n{rows_text(*self._cells())}"

    def _repr_html_(self) -> str:
        return html_block(self._title(), rows_html(*self._cells()))


def _mean_text(e: Mapping[str, Any], m: str) -> str:
    text = interval_cell(e[m], e[f"{m}:lo"], e[f"{m}:hi"], significant=4) if m in e else "—"
    counted = e.get(f"{m}:n", e.get("n"))
    return text if counted == e.get("n") else f"{text} [{counted} of {e['n']} finite]"


def _diff_text(e: Mapping[str, Any], m: str) -> str:
    """The paired cell of a summary entry (a ratio ``×r (lo – hi)`` on the log scale)."""
    if f"{m}:diff" not in e:
        return "baseline" if e.get("is_baseline") else "—"
    values = [e[f"{m}:{k}"] for k in ("diff", "diff_lo", "diff_hi")]
    p = f", p = {p_text(e[f'{m}:p'])}, Holm {p_text(e.get(f'{m}:p_holm', math.nan))}"
    if e.get(f"{m}:diff_scale") == "log":
        return "×" + interval_cell(*(math.exp(v) for v in values), significant=4) + p
    return interval_cell(*values, sign=True, significant=4) + p


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "—" if not math.isfinite(value) else f"{value:.4g}"
    return str(value)


def _pct(x: float) -> str:
    return f"{100 * x:g} %"


def _markdown(
    summary: Sequence[Mapping[str, Any]],
    keys: Sequence[str],
    metrics: Sequence[str],
    options: TableOptions | None = None,
) -> str:
    r"""The table of [`summarize`][meanfield.studies.summary.summarize] with a legend that says what every interval, $\pm$ and p is."""
    options = options if options is not None else TableOptions()
    level, power = _pct(options.level), _pct(options.power)
    paired = any(f"{m}:diff" in e for e in summary for m in metrics)
    logs = {m for m in metrics if any(e.get(f"{m}:scale") == "log" for e in summary)}
    head = [*keys, "n"]
    for m in metrics:
        if m in logs:
            head.append(f"{m}: geometric mean ({level} CI, log scale)")
        else:
            head.append(f"{m} ({level} CI)")
        if paired:
            if m in logs:
                head.append(f"{m} ratio vs baseline ({level} CI)")
            else:
                head.append(f"Δ{m} vs baseline ± {level} CI half-width")
            head += ["pairs", "p (paired t)", "p (Holm)", f"detectable at {power} power"]
            head += [
                f"pairs for {'ln ratio' if m in logs else 'Δ'} = {d:g} ({power} power)"
                for d in options.detect
            ]
    cost = options.cost is not None
    if cost:
        head.append(f"cost (h, Σ {options.cost})")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    tests = 0
    for e in summary:
        cells = [_fmt(e[k]) for k in keys] + [str(e["n"])]
        for m in metrics:
            if m in e:
                mark = (
                    " (arithmetic: a value ≤ 0)" if str(e.get(f"{m}:scale", "")).startswith("linear") else ""
                )
                cells.append(_mean_text(e, m) + mark)
            else:
                cells.append("—")
            if not paired:
                continue
            if f"{m}:diff" in e:
                if e.get(f"{m}:diff_scale") == "log":
                    ratio = [math.exp(e[f"{m}:{k}"]) for k in ("diff", "diff_lo", "diff_hi")]
                    cells.append("×" + interval_cell(*ratio, significant=4))
                    detect = math.exp(e[f"{m}:detectable"]) if is_number(e[f"{m}:detectable"]) else math.nan
                    detect_text = f"×/÷ {_fmt(detect)}"
                else:
                    half = (e[f"{m}:diff_hi"] - e[f"{m}:diff_lo"]) / 2
                    cells.append(f"{_fmt(e[m + ':diff'])} ± {_fmt(half)}")
                    detect_text = _fmt(e[f"{m}:detectable"])
                tests += is_number(e.get(f"{m}:p"))
                cells += [str(e[f"{m}:pairs"]), _fmt(e[m + ":p"]), _fmt(e.get(f"{m}:p_holm", math.nan))]
                cells.append(detect_text)
                cells += [_fmt(e.get(_pairs_key(m, d), math.nan)) for d in options.detect]
            else:
                cells += (["baseline"] if e.get("is_baseline") else ["—"]) + [""] * (4 + len(options.detect))
        if cost:
            cells.append(number_text(e.get("cost", math.nan) / 3600, 2))
        lines.append("| " + " | ".join(cells) + " |")
    legend = [
        "",
        f"Intervals in parentheses: {level} Student-t intervals of the mean over the seeds (df = n − 1)"
        + (
            "; for a log-scale metric, of the logs, mapped back by exp (around the geometric mean)."
            if logs
            else "."
        ),
    ]
    if paired:
        family = (
            f"over the {tests} tests of this table"
            if options.holm == "table"
            else f"over the tests of each metric separately ({tests} tests in all)"
        )
        legend.append(
            f"Paired over the seeds both finished: ± is the half-width of the {level} Student-t interval of the "
            "mean paired difference (df = pairs − 1)"
            + ("; a ratio is exp of the mean difference of ln values, with its interval" if logs else "")
            + f". p: two-sided paired t-test; p (Holm): Holm's step-down adjustment {family}. Detectable: the smallest |Δ| that this test (α = {options.alpha:g}, the same pairs) "
            f"detects with {power} power if the paired sd is the observed one (noncentral t)"
            + ("; ×/÷ f for a log-scale metric: a ratio of f or 1/f" if logs else "")
            + (
                f". Pairs for D: the pairs giving {power} power for |Δ| = D at that sd"
                if options.detect
                else ""
            )
            + ". Both are planning numbers: the sd of a few seeds is itself uncertain."
        )
    return "\n".join(lines) + "\n" + "\n".join(legend) + "\n"
