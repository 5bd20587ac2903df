r"""Studies over many runs: convergence in the number of particles M, and sweeps over a parameter grid.

* [`convergence_in_m`][meanfield.studies.in_memory.convergence_in_m] measures how a quantity of the M-particle system approaches its limit,
  $\mathbb{E} Y_M \approx Y_\infty + c\cdot M^{\mathrm{slope}}$: a distance $Y_M = D(\mu_M, \mu)$ to a reference law ($Y_\infty = 0$), or a named
  observable (a loss, a moment) with a limit $Y_\infty$ that is known, estimated by replicated reference runs, or
  fitted. Replicas run on the batch axis; the slope comes with a bootstrap interval from a named
  *estimator* ([`ESTIMATORS`][meanfield.studies.in_memory.ESTIMATORS]), which says whether a finite reference was treated as exact
  (``"exact"``), resampled with the replicates (``"reference"``), or not used at all (``"fit"``,
  ``"differences"``).
* [`sweep`][meanfield.studies.in_memory.sweep] runs a function over a parameter grid × seeds — one call per point, or batched over the
  replica axis with per-replica parameters — and collects named observables, scalars or series at saved times.

Both return tidy tables ([`Table`][meanfield.studies.in_memory.Table]: one row per point × seed [× time]) with CSV/JSON export and plots of
mean curves with labelled confidence bands (Student-t over seeds or replicates).

**One seeding convention.** A study hands the user's function the seeds it must draw from, as the keyword
``seed``, and never draws for it: ``sweep`` calls ``run(**point, seed=s)`` (one run: an int) or
``run(**point, seed=[s_1, …, s_B])`` (batched: replica ``b``'s seed); ``convergence_in_m`` calls
``sample(M, reps, seed=[s_1, …, s_reps])`` when ``sample`` takes a ``seed`` (replicate ``r`` of every M has
seed ``seeds[r]``, as a sweep's seed ``s`` is the same at every grid point). In every case: draw what belongs
to one replica (its initial state) from ``torch.Generator().manual_seed(s)`` of its own seed, and the noise
of a call over several replicas from [`batch_seed`][meanfield.studies.in_memory.batch_seed] of the list (``simulate(..., generator=
batch_seed(seed))``). So a function called with equal seeds draws equal numbers in both studies.

**A time window.** A series (an observable on a [`Trajectory`][meanfield.stepping.simulate.Trajectory]'s saved states, or a
returned ``(B, T)``/1-D series) also gives one scalar per replica: its value at the last saved time, or,
with ``window=(t_a, t_b)``, its mean over the saved times ``t_a ≤ t ≤ t_b`` (a time average after a burn-in).
"""

from __future__ import annotations

import inspect
import itertools
import json
import math
import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.axes
import matplotlib.ticker
import numpy as np
import torch
from scipy import stats as _st

from .._checks import check_finite, check_finite_tensor, check_int
from .._display import dataframe, html_block, number, paragraph, rows_html, rows_text, shortlist
from ..metrics.wasserstein import Law1d, resolve_method, wasserstein, wasserstein_to_law
from ..progress import progress_bar
from ..seeds import derive_seed, resolve_generator
from ..stepping.simulate import Trajectory
from .grid import csv_text, grid_points, seed_list
from .plotting import figure, returned, save
from .stats import t_interval
from .summary import SummaryTable, TableOptions, summarize

__all__ = [
    "ESTIMATORS",
    "METRICS",
    "RateEstimate",
    "StudyResult",
    "SweepResult",
    "Table",
    "batch_seed",
    "convergence_in_m",
    "sweep",
]

METRICS: dict[str, tuple[int, Callable[[torch.Tensor], torch.Tensor]]] = {
    "w2_squared": (2, lambda cost: cost),
    "w2": (2, lambda cost: cost.clamp_min(0).sqrt()),
    "w1": (1, lambda cost: cost),
}
"""Metric name → (order p, map from the cost $W_p^p$ to the reported distance)."""

ESTIMATORS = ("exact", "reference", "fit", "differences")
r"""How [`convergence_in_m`][meanfield.studies.in_memory.convergence_in_m] estimates the rate of $\mathbb{E} Y_M \to Y_\infty$ (see [`RateEstimate`][meanfield.studies.in_memory.RateEstimate])."""

Sampler = Callable[[int, int], object]
Metric = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Observable = Callable[[torch.Tensor], torch.Tensor]

_ALPHA_GRID = torch.linspace(0.01, 4.0, 200, dtype=torch.float64)
r"""Exponents $\alpha$ scanned by the power-law fit $Y_\infty + c\cdot M^{-\alpha}$ (then refined by a parabola)."""


# --------------------------------------------------------------------------------------------------------
# Tidy tables


def _summary_rows(
    rows: Sequence[Mapping],
    fixed: Sequence[str],
    columns: Sequence[str],
    x: str,
    y: str,
    hue: str | None,
    where: Mapping[str, object] | None,
    level: float,
) -> list[dict]:
    """Mean of ``y`` for each (``hue``, ``x``) over the rows of a group, with a Student-t interval.

    ``fixed``: the identifying columns other than the replicate one: each of them that is neither ``x``
    nor ``hue`` must be fixed by ``where`` or take one value.
    """
    for name in (x, y, *(() if hue is None else (hue,))):
        if name not in columns:
            raise KeyError(f"no column {name!r}; the columns are {list(columns)}")
    where = dict(where or {})
    rows = [r for r in rows if r.get("error") is None and all(r.get(k) == v for k, v in where.items())]
    for p in fixed:
        if p not in (x, hue) and p not in where and len({repr(r.get(p)) for r in rows}) > 1:
            raise ValueError(
                f"parameter {p!r} takes several values {sorted({repr(r.get(p)) for r in rows})}; "
                f"fix it with where={{{p!r}: ...}} or use it as x or hue"
            )
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        value = r.get(y)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            groups.setdefault((r.get(hue) if hue else None, r[x]), []).append(float(value))
    out = []
    for (h, xv), ys in groups.items():
        ci = t_interval(ys, level)
        row = {"x": xv, "mean": ci.mean, "se": ci.se, "lo": ci.lo, "hi": ci.hi, "n": ci.n}
        out.append(row if hue is None else {"hue": h, **row})

    def order(v: object) -> tuple:  # numbers by value, anything else after them by its text
        return (0, v, "") if _is_number(v) else (1, 0, repr(v))

    return sorted(out, key=lambda r: (order(r.get("hue")), order(r["x"])))


def _plot_summary(
    table: list[dict],
    x: str,
    y: str,
    hue: str | None,
    *,
    level: float,
    replicate: str,
    logx: bool,
    logy: bool,
    label: str | None,
    ax,
    path: str | os.PathLike | None,
):
    """Mean curves with their ``level`` bands; every line and band is labelled (the band says what it is)."""
    made_here = ax is None
    fig, ax = figure() if made_here else (ax.figure, ax)
    hues = list(dict.fromkeys(r.get("hue") for r in table))
    n = sorted({r["n"] for r in table})
    over = f"{n[0]}" if len(n) == 1 else f"{n[0]}–{n[-1]}"
    for k, h in enumerate(hues):
        part = [r for r in table if r.get("hue") == h]
        xs = [r["x"] for r in part]
        name = ", ".join(s for s in (label, None if hue is None else f"{hue}={h}") if s) or y
        (line,) = ax.plot(xs, [r["mean"] for r in part], "o-", ms=3, label=f"{name} (mean)")
        ax.fill_between(
            xs,
            [r["lo"] for r in part],
            [r["hi"] for r in part],
            alpha=0.25,
            color=line.get_color(),
            label=f"bands: {level:.0%} t-interval of the mean over {over} {replicate}s" if k == 0 else None,
        )
    ax.set(xlabel=x, ylabel=y, xscale="log" if logx else "linear", yscale="log" if logy else "linear")
    ax.legend(fontsize=8)
    if path is not None:
        save(fig, path)
    return returned(fig, made_here)


def _clean(v: object) -> object:
    return None if isinstance(v, float) and not math.isfinite(v) else v


@dataclass(frozen=True)
class Table:
    """A tidy table: one dict row per observation (point × seed, or point × seed × time).

    Attributes:
        rows: the rows; each holds every column of ``keys`` and the ``values`` it has.
        keys: the identifying columns, e.g. ``("kappa", "seed", "t")`` or ``("M", "replicate")``.
        values: the measured columns.
        replicate: the key whose values are independent replicates (the confidence bands are over it).
    """

    rows: list[dict]
    keys: tuple[str, ...]
    values: tuple[str, ...]
    replicate: str = "seed"

    @property
    def columns(self) -> tuple[str, ...]:
        """``keys + values``."""
        return (*self.keys, *self.values)

    def __len__(self) -> int:
        return len(self.rows)

    def _title(self) -> str:
        return (
            f"Table: {len(self.rows)} rows × {len(self.columns)} columns (keys {', '.join(self.keys)}; values "
            f"{', '.join(self.values) or 'none'}; replicate {self.replicate!r})"
        )

    def __repr__(self) -> str:
        return f"{self._title()}\n{rows_text(self.rows, self.columns)}"

    def _repr_html_(self) -> str:
        return html_block(self._title(), rows_html(self.rows, self.columns))

    def to_pandas(self):
        """The table as a ``pandas.DataFrame``, one row per row and the columns in order (a missing cell is
        NaN, or ``None`` in a column of text); needs pandas (``pip install 'meanfield-sde[pandas]'``)."""
        return dataframe(self.rows, self.columns)

    def column(self, name: str) -> list:
        """The values of one column (``None`` where a row lacks it)."""
        if name not in self.columns:
            raise KeyError(f"no column {name!r}; the columns are {list(self.columns)}")
        return [row.get(name) for row in self.rows]

    def to_csv(self, path: str | os.PathLike | None = None) -> str:
        """The table as CSV (missing cells empty); written to ``path`` when given. Returns the text."""
        return csv_text(self.rows, self.columns, path)

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """The table as JSON ``{"keys", "values", "replicate", "rows"}`` (non-finite floats become ``null``)."""
        data = {
            "keys": list(self.keys),
            "values": list(self.values),
            "replicate": self.replicate,
            "rows": [{k: _clean(v) for k, v in row.items()} for row in self.rows],
        }
        text = json.dumps(data, indent=1, allow_nan=False)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_json(cls, source: str | os.PathLike) -> Table:
        """Read a table written by [`to_json`][meanfield.studies.in_memory.Table.to_json] (a path or the JSON text)."""
        text = str(source)
        if not text.lstrip().startswith("{"):
            text = Path(source).read_text()
        data = json.loads(text)
        return cls(data["rows"], tuple(data["keys"]), tuple(data["values"]), data["replicate"])

    def summary(
        self,
        x: str,
        y: str,
        hue: str | None = None,
        *,
        where: Mapping[str, object] | None = None,
        level: float = 0.95,
    ) -> list[dict]:
        r"""Mean of ``y`` over the replicates for each (``hue``, ``x``), with a Student-t interval.

        ``mean ± t_{n−1, (1+level)/2} · s/\sqrt{n}`` over the ``n`` replicates with a finite ``y``. Keys
        other than ``x``, ``hue`` and the replicate must be fixed by ``where`` (or take one value).

        Returns:
            One dict per group: ``hue`` (if given), ``x``, ``mean``, ``se``, ``lo``, ``hi``, ``n``.
        """
        fixed = [k for k in self.keys if k != self.replicate]
        return _summary_rows(self.rows, fixed, self.columns, x, y, hue, where, level)

    def plot(
        self,
        x: str,
        y: str,
        hue: str | None = None,
        *,
        where: Mapping[str, object] | None = None,
        level: float = 0.95,
        logx: bool = False,
        logy: bool = False,
        label: str | None = None,
        ax=None,
        path: str | os.PathLike | None = None,
    ):
        """Mean of ``y`` against ``x`` (e.g. ``"t"``), one line per ``hue``, with its labelled ``level`` band.

        Args:
            label: a prefix for the legend entries (to tell two tables apart on one axis).

        Returns the figure; with ``path`` it is also written there (and closed). In a notebook it shows once
        ([`returned`][meanfield.studies.plotting.returned]).
        """
        table = self.summary(x, y, hue, where=where, level=level)
        return _plot_summary(
            table, x, y, hue, level=level, replicate=self.replicate, logx=logx, logy=logy, label=label,
            ax=ax, path=path,
        )  # fmt: skip


def _observed(value: object) -> torch.Tensor:
    """An observable's value as a tensor: a result object with a ``.value`` (``system.free_energy``, an entropy
    estimate) gives its ``value``."""
    return torch.as_tensor(getattr(value, "value", value))


def _as_tensor(name: str, value: object) -> torch.Tensor:
    if isinstance(value, np.ndarray) or isinstance(value, (list, tuple)):
        value = torch.as_tensor(np.asarray(value, dtype=np.float64))
    if not torch.is_tensor(value):
        raise TypeError(f"{name} must be a tensor, got {type(value).__name__}")
    return value.detach().to("cpu", torch.float64)


def _check_window(window: object) -> tuple[float, float] | None:
    """``window`` as ``(t_a, t_b)`` with finite ``t_a ≤ t_b``, or ``None``."""
    if window is None:
        return None
    if isinstance(window, (str, bytes)) or not isinstance(window, Sequence) or len(window) != 2:
        raise TypeError(f"window must be a pair of times (t_a, t_b) or None, got {window!r}")
    lo, hi = check_finite("window[0]", window[0]), check_finite("window[1]", window[1])
    if not lo <= hi:
        raise ValueError(f"window must be (t_a, t_b) with t_a ≤ t_b, got {window!r}")
    return lo, hi


def _window_mean(
    name: str, values: torch.Tensor, times: torch.Tensor, window: tuple[float, float]
) -> torch.Tensor:
    """The mean of a series ``values (B, T)`` over its times ``times (T,)`` in ``window``: ``(B,)``."""
    inside = (times >= window[0]) & (times <= window[1])  # (T,)
    if not bool(inside.any()):
        raise ValueError(
            f"window={window} holds none of the saved times of {name!r} "
            f"({float(times[0]):g} … {float(times[-1]):g}, {times.numel()} times)"
        )
    return values[:, inside].mean(1)  # (B,)


def _collect(
    what: str,
    out: object,
    reps: int,
    observables: Mapping[str, Observable] | None,
    window: tuple[float, float] | None = None,
) -> tuple[torch.Tensor | None, dict[str, torch.Tensor], dict[str, torch.Tensor], torch.Tensor | None]:
    """Split a sampler's or batched run's output into (final states, scalars, series, times).

    ``out`` is a state tensor ``(B, M, d)``, a [`Trajectory`][meanfield.stepping.simulate.Trajectory] (states ``(S, B, M, d)``
    at ``times (S,)``) or a mapping: ``"final"`` → states ``(B, M, d)`` (optional), ``"t"`` → times ``(T,)``
    (optional), any other name → a tensor ``(B,)`` (a scalar per replica) or ``(B, T)`` (a series at the
    times). Each ``observables[name](x (B, M, d)) -> (B,)`` is applied to the final state (a scalar) or,
    for a trajectory, to every saved state (a series, and its final value as the scalar of that name). With
    ``window``, every series' scalar is its mean over the saved times in the window instead.

    Returns:
        ``states (B, M, d) | None``, ``scalars {name: (B,)}``, ``series {name: (B, T)}``, ``times (T,) | None``.
    """
    states = times = None
    scalars: dict[str, torch.Tensor] = {}
    series: dict[str, torch.Tensor] = {}
    saved = None  # (S, B, M, d) for a trajectory
    if isinstance(out, Trajectory):
        saved, times, states = out.states, out.times.to(torch.float64), out.final
    elif torch.is_tensor(out):
        states = out
    elif isinstance(out, Mapping):
        for name, value in out.items():
            if not isinstance(name, str):
                raise TypeError(f"{what} returned a mapping with a key {name!r}: names must be str")
            if name == "final":
                states = value
            elif name == "t":
                times = _as_tensor(f"{what}['t']", value).reshape(-1)  # (T,)
            else:
                v = _as_tensor(f"{what}[{name!r}]", value)
                check_finite_tensor(f"{what}[{name!r}]", v)
                if v.dim() == 1 and v.shape[0] == reps:
                    scalars[name] = v  # (B,)
                elif v.dim() == 2 and v.shape[0] == reps:
                    series[name] = v  # (B, T)
                else:
                    raise ValueError(
                        f"{what}[{name!r}] must have shape (B,) = ({reps},) (a scalar per replica) or "
                        f"(B, T) = ({reps}, T) (a series at the saved times), got {tuple(v.shape)}"
                    )
    else:
        raise TypeError(
            f"{what} must return a state tensor (B, M, d), a Trajectory or a mapping of observables, "
            f"got {type(out).__name__}"
        )
    for name, fn in (observables or {}).items():
        if name in scalars or name in series or name in ("final", "t"):
            raise ValueError(f"observable {name!r} is also a name {what} returned")
        if states is None:
            raise ValueError(f"observable {name!r} needs states, but {what} returned none (no 'final')")
        if saved is not None:  # a series at the saved times, and its final value as a scalar
            v = torch.stack([_observed(fn(s)).reshape(reps) for s in saved], 1)  # (B, S)
            series[name] = v.detach().to("cpu", torch.float64)
            scalars[name] = series[name][:, -1]
        else:
            scalars[name] = _observed(fn(states)).detach().to("cpu", torch.float64).reshape(reps)
        check_finite_tensor(f"observable {name!r}", scalars.get(name, series.get(name)))
    lengths = {v.shape[1] for v in series.values()}
    if len(lengths) > 1:
        raise ValueError(f"the series of {what} must share one time axis, got lengths {sorted(lengths)}")
    if series:
        T = lengths.pop()
        if times is None:
            times = torch.arange(T, dtype=torch.float64)  # (T,) the save index
        elif times.shape[0] != T:
            raise ValueError(f"{what}: 't' has {times.shape[0]} times, the series have {T}")
    if window is not None:
        if not series:
            raise ValueError(
                f"window={window} averages series over time, but {what} returned none (return a Trajectory "
                "or (B, T) series with their times 't')"
            )
        for name, v in series.items():
            scalars[name] = _window_mean(name, v, times, window)  # (B,)
    return states, scalars, series, times


# --------------------------------------------------------------------------------------------------------
# Rates: the estimators


@dataclass(frozen=True)
class RateEstimate:
    r"""The rate of $\mathbb{E} Y_M \to Y_\infty$, $|\mathbb{E} Y_M - Y_\infty| \approx |c|\cdot M^{\mathrm{slope}}$, from one estimator.

    Every interval comes from one bootstrap: the replicates resampled within each M (``n_boot`` draws).

    * ``"exact"``: the least-squares slope of $\log|\mathrm{mean}_M - Y_\infty|$ on ``log M`` with $Y_\infty$ treated as
      exact: 0 for a distance, the given limit, or the mean of the reference values (then it ignores their
      uncertainty: the *naive* interval). ``slope ± t_{reps−1}·SE_boot`` of the bootstrap slopes (NaN when a
      resampled excess is ≤ 0: no logarithm); the percentile interval it replaced (2026-12-07) covered a truly
      exact limit in only 87 % of studies with 5 replicates (83 % with replicates coupled across M).
    * ``"reference"``: the weighted least-squares fit of $\mathrm{mean}_M = Y_\infty + c\cdot M^{-\alpha}$ (weights $1/\operatorname{SE}_M^2$) in
      which the mean of the ``R`` reference values is one more point, at $M = \infty$ (weight ``1/SE_ref²``);
      each bootstrap draw redraws that mean from its Student-t sampling law ``ȳ_ref + SE_ref·t_{R−1}``
      together with the resampled replicates, so the reference's uncertainty is in the interval.
    * ``"fit"``: the same fit with $Y_\infty$ free (reference-free; needs ≥ 4 sizes).
    * ``"differences"``: the weighted fit of ``mean_{M_k} − mean_{M_{k+1}} = c(1 − r^{−α})M_k^{−α}``
      (reference-free; needs ≥ 3 sizes with a constant ratio $r = M_{k+1}/M_k$: then
      $\mathbb{E} Y_M - \mathbb{E} Y_{rM}$ is exactly that power law whatever $Y_\infty$).

    The three fits scan α over [0.01, 4]. Every estimator reports ``slope ± t_{reps−1, (1+level)/2}·SE_boot`` (the
    bootstrap standard error with a Student-t quantile), which covered a known exponent closer to ``level`` than
    the percentile interval of the same draws (``theory/rate_coverage.py``).

    Attributes:
        estimator: one of [`ESTIMATORS`][meanfield.studies.in_memory.ESTIMATORS].
        slope: $-\alpha$.
        slope_ci: its ``level`` interval, ``slope ± t·SE_boot`` (NaN when a resample has no logarithm).
        limit: $Y_\infty$ used or estimated.
        coefficient: ``c`` (signed: $\mathbb{E} Y_M - Y_\infty \approx c\cdot M^{-\alpha}$).
        level: the confidence level.
    """

    estimator: str
    slope: float
    slope_ci: tuple[float, float]
    limit: float
    coefficient: float
    level: float

    @property
    def intercept(self) -> float:
        """``log|c|``: the excess is ``exp(intercept)·M^{slope}``."""
        return math.log(abs(self.coefficient)) if self.coefficient != 0 else -math.inf

    def _cells(self) -> dict:
        lo, hi = self.slope_ci
        return {
            "estimator": self.estimator,
            "slope": number(self.slope, 3),
            f"{self.level:.0%} CI": f"[{number(lo, 3)}, {number(hi, 3)}]",
            "limit": number(self.limit, 4),
            "c": number(self.coefficient, 3),
        }

    def __repr__(self) -> str:
        cells = ", ".join(f"{k} {v}" for k, v in self._cells().items() if k != "estimator")
        return f"RateEstimate({self.estimator}): {cells}"

    def _repr_html_(self) -> str:
        cells = self._cells()
        return html_block("RateEstimate", rows_html([cells], list(cells)))


def _fit_loglog(Ms: torch.Tensor, means: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Least-squares ``log mean = intercept + slope · log M`` along the last axis of ``means (..., K)``."""
    u = Ms.log() - Ms.log().mean()  # (K,)
    logm = means.log()  # (..., K)
    slope = (logm * u).sum(-1) / (u * u).sum()  # (...)
    intercept = logm.mean(-1) - slope * Ms.log().mean()  # (...)
    return slope, intercept


def _profile(
    alpha: torch.Tensor, Ms: torch.Tensor, means: torch.Tensor, w: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""For each α, the weighted least squares of $\text{ means } = L + c\cdot M^{-\alpha}$ in (L, c), in closed form.

    With $x = M^{-\alpha}$ and normalised weights ``w``: $c = \sum w(x-\bar{x})(m-\bar{m})/\sum w(x-\bar{x})^2$, $L = \bar{m} - c \bar{x}$,
    $\text{ RSS } = \sum w(m-\bar{m})^2 - c^2\sum w(x-\bar{x})^2$. $M = \infty$ is allowed (``x = 0``: a point on the limit).

    Args:
        alpha: ``(..., G)`` exponents (broadcast against the leading axes of ``means``).
        Ms: ``(K,)``; means: ``(..., K)``; w: ``(K,)`` weights summing to 1.

    Returns:
        ``rss, c, L``, each ``(..., G)``.
    """
    x = Ms ** (-alpha[..., None])  # (..., G, K)
    xbar = (w * x).sum(-1)  # (..., G)
    xc = x - xbar[..., None]  # (..., G, K)
    sxx = (w * xc * xc).sum(-1)  # (..., G)
    mbar = (w * means).sum(-1, keepdim=True)  # (..., 1)
    mc = means - mbar  # (..., K)
    sxm = (w * xc * mc[..., None, :]).sum(-1)  # (..., G)
    c = sxm / sxx  # (..., G)
    rss = (w * mc * mc).sum(-1, keepdim=True) - c * sxm  # (..., G)
    return rss, c, mbar - c * xbar


def _fit_power(
    Ms: torch.Tensor, means: torch.Tensor, w: torch.Tensor, *, free_limit: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Weighted least squares $\text{ means } (..., K) \approx L + c\cdot M^{-\alpha}$ (``L = 0`` unless ``free_limit``).

    α is scanned on [`_ALPHA_GRID`][meanfield.studies.in_memory._ALPHA_GRID] (the best (L, c) of each α in closed form, [`_profile`][meanfield.studies.in_memory._profile]; with
    ``L = 0``: $c = \sum w x m/\sum w x^2$, $\text{ RSS } = \sum w m^2 - (\sum w x m)^2/\sum w x^2$) and refined by the parabola through
    the three grid points around the minimum.

    Returns:
        ``α, c, L, at_edge``, each ``(...)``; ``at_edge`` where the minimum is an end of the grid (α is not
        identified there).
    """
    grid = _ALPHA_GRID  # (G,)
    x = Ms ** (-grid[:, None])  # (G, K)
    if free_limit:
        xc = x - (w * x).sum(-1, keepdim=True)  # (G, K)
        mc = means - (w * means).sum(-1, keepdim=True)  # (..., K)
    else:
        xc, mc = x, means
    sxx = (w * xc * xc).sum(-1)  # (G,)
    sxm = mc @ (w * xc).T  # (..., G)
    rss = (w * mc * mc).sum(-1, keepdim=True) - sxm**2 / sxx  # (..., G)
    i = rss.argmin(-1)  # (...)
    at_edge = (i == 0) | (i == grid.shape[0] - 1)
    j = i.clamp(1, grid.shape[0] - 2)
    f0, f1, f2 = (rss.gather(-1, (j + s)[..., None])[..., 0] for s in (-1, 0, 1))  # (...)
    curvature = f0 - 2 * f1 + f2
    shift = torch.where(curvature > 0, 0.5 * (f0 - f2) / curvature, torch.zeros_like(f1)).clamp(-1, 1)
    step = grid[1] - grid[0]
    alpha = torch.where(at_edge, grid[i], grid[j] + shift * step)  # (...)
    if free_limit:
        _, c, L = _profile(alpha[..., None], Ms, means, w)
        return alpha, c[..., 0], L[..., 0], at_edge
    xa = Ms ** (-alpha[..., None])  # (..., K)
    c = (w * xa * means).sum(-1) / (w * xa * xa).sum(-1)  # (...)
    return alpha, c, torch.zeros_like(c), at_edge


def _student_t(n: int, df: int, generator: torch.Generator) -> torch.Tensor:
    r"""``n`` draws of Student's t with ``df`` degrees of freedom, $z/\sqrt{\chi^2_{df}/df}$, shape ``(n,)``."""
    z = torch.randn(n, generator=generator, dtype=torch.float64)  # (n,)
    chi2 = torch.randn(n, df, generator=generator, dtype=torch.float64).square().sum(1)  # (n,)
    return z / (chi2 / df).sqrt()


def _t_interval(estimate: float, boot: torch.Tensor, level: float, df: int) -> tuple[float, float]:
    r"""``estimate ± t_{df,(1+level)/2} · sd(boot)``: the bootstrap-SE interval with a Student-t quantile.

    Used by the fits: over repeated studies (``theory/rate_coverage.py``) it came closer to its level than the
    percentile interval of the same bootstrap draws, which was 2–4 points short with 50 replicates per M.
    """
    half = float(_st.t.ppf((1 + level) / 2, df)) * float(boot.std())
    return estimate - half, estimate + half


def _edge_notes(edge: bool, boot_edge: float, level: float) -> list[str]:
    """Warnings for a power-law fit whose α sits at an end of [`_ALPHA_GRID`][meanfield.studies.in_memory._ALPHA_GRID]."""
    span = f"[{float(_ALPHA_GRID[0]):g}, {float(_ALPHA_GRID[-1]):g}]"
    notes = []
    if edge:
        notes.append(
            f"the power-law fit put α at the end of its range {span}: these sizes do not identify the rate"
        )
    if boot_edge > (1 - level) / 2:
        notes.append(
            f"{boot_edge:.0%} of the bootstrap fits put α at an end of {span}: the interval is cut there"
        )
    return notes


def _estimate(
    estimator: str,
    Ms: torch.Tensor,
    values: torch.Tensor,
    boot: torch.Tensor,
    *,
    limit: float | None,
    ref_boot: torch.Tensor | None,
    ref_mean: float | None,
    ref_se: float | None,
    distance: bool,
    level: float,
) -> tuple[RateEstimate, list[str]]:
    """One estimator on the replicate values ``(K, reps)`` and their bootstrap means ``(n_boot, K)``.

    Returns the estimate and the warnings it raised (as text).
    """
    what = "distance" if distance else "excess"
    means = values.mean(1)  # (K,)
    notes: list[str] = []
    nan = (math.nan, math.nan)
    if estimator == "exact":
        L = 0.0 if limit is None else limit
        sign = 1.0 if distance else (1.0 if float((means - L).sum()) >= 0 else -1.0)
        excess = sign * (means - L)  # (K,)
        if bool((excess <= 0).any()):
            notes.append(
                f"a mean {what} is ≤ 0 ({excess.tolist()}): no log-log slope"
                if distance
                else f"the mean excess over the limit {L:.6g} changes sign over M ({(means - L).tolist()}): "
                f"no log-log slope (the reference is not on one side of every mean; try estimator='fit')"
            )
            return RateEstimate(estimator, math.nan, nan, L, math.nan, level), notes
        slope, intercept = (float(t) for t in _fit_loglog(Ms, excess))
        eb = sign * (boot - L)  # (n_boot, K)
        if bool((eb <= 0).any()):  # a resample with a mean ≤ 0 has no logarithm: no interval
            notes.append(
                f"a bootstrap resample has a mean {what} ≤ 0 (a metric that can be negative, or too few "
                "replicates): the slope's interval is NaN"
            )
            ci = nan
        else:
            ci = _t_interval(slope, _fit_loglog(Ms, eb)[0], level, values.shape[1] - 1)
        return RateEstimate(estimator, slope, ci, L, sign * math.exp(intercept), level), notes
    se2 = values.var(1) / values.shape[1]  # (K,) squared standard errors of the means
    se2 = torch.where(se2 > 0, se2, se2[se2 > 0].min() if bool((se2 > 0).any()) else torch.ones_like(se2))
    if estimator == "differences":
        ratios = Ms[1:] / Ms[:-1]  # (K − 1,)
        if len(Ms) < 3 or not torch.allclose(ratios, ratios[0].expand_as(ratios), rtol=1e-9):
            raise ValueError(
                f"estimator='differences' needs ≥ 3 sizes with a constant ratio M_(k+1)/M_k, got Ms = "
                f"{[int(M) for M in Ms]} (use estimator='fit')"
            )
        r = float(ratios[0])
        diff = means[:-1] - means[1:]  # (K − 1,)  = c(1 − r^{−α}) M_k^{−α}
        w = 1 / (se2[:-1] + se2[1:])  # (K − 1,)
        w = w / w.sum()
        alpha, c1, _, edge = _fit_power(Ms[:-1], diff, w, free_limit=False)
        ab, _, _, edges = _fit_power(Ms[:-1], boot[:, :-1] - boot[:, 1:], w, free_limit=False)  # (n_boot,)
        notes += _edge_notes(bool(edge), float(edges.double().mean()), level)
        a = float(alpha)
        c = float(c1) / (1 - r**-a)
        L = float(means[-1]) - c * float(Ms[-1]) ** -a
        ci = _t_interval(-a, -ab, level, values.shape[1] - 1)
        return RateEstimate(estimator, -a, ci, L, c, level), notes
    # the power-law fits
    if estimator == "fit":
        if len(Ms) < 4:
            raise ValueError(f"estimator='fit' fits 3 numbers (Y_∞, c, α): it needs ≥ 4 sizes, got {len(Ms)}")
        M_fit, m_fit, b_fit, w = Ms, means, boot, 1 / se2
    else:  # "reference": the reference mean is the point M = ∞
        inf = torch.tensor([math.inf], dtype=torch.float64)
        M_fit = torch.cat([Ms, inf])  # (K + 1,)
        m_fit = torch.cat([means, torch.tensor([ref_mean], dtype=torch.float64)])  # (K + 1,)
        b_fit = torch.cat([boot, ref_boot[:, None]], 1)  # (n_boot, K + 1)
        w_ref = 1 / ref_se**2 if ref_se > 0 else 1e12 * float((1 / se2).max())  # equal values: an exact limit
        w = torch.cat([1 / se2, torch.tensor([w_ref], dtype=torch.float64)])
    w = w / w.sum()
    alpha, c, L, edge = _fit_power(M_fit, m_fit, w)
    ab, _, _, edges = _fit_power(M_fit, b_fit, w)  # (n_boot,)
    notes += _edge_notes(bool(edge), float(edges.double().mean()), level)
    ci = _t_interval(-float(alpha), -ab, level, values.shape[1] - 1)
    return RateEstimate(estimator, -float(alpha), ci, float(L), float(c), level), notes


# --------------------------------------------------------------------------------------------------------
# Convergence in M


@dataclass(frozen=True)
class StudyResult:
    r"""A quantity $Y_M$ per number of particles M (a distance to a reference, or an observable), its
    rate of approach to the limit, and the observables collected per replicate.

    Attributes:
        Ms: the numbers of particles, increasing.
        values: ``Y`` of every replicate, shape ``(len(Ms), reps)``: the distance $D(\mu_M, \mu)$, or the
            observable named by ``quantity``.
        floor: the distance between two independent reference clouds of the size used at each M,
            shape ``(len(Ms), n)`` (``n = floor_reps`` for a sampled reference, 1 for a fixed cloud, 0 for an
            exact law, whose floor is 0, and for an observable). A distance near its floor measures the
            reference, not μ_M.
        metric: what was measured (``"w2_squared"``, ``"w2"``, ``"w1"``, the callable's name, or the
            observable's name).
        method: how (``"law"``, ``"1d"``, ``"exact"``, ``"sliced"``, ``"sinkhorn"``, ``"custom"``,
            ``"observable"``), the same for every M.
        slope: the slope $-\alpha$ of $|\mathbb{E} Y_M - Y_\infty| \approx |c| M^{\mathrm{slope}}$ from `estimator`.
        intercept: ``log|c|``: the excess ``≈ exp(intercept) · M^slope``.
        slope_ci: the bootstrap interval of the slope from `estimator` ([`RateEstimate`][meanfield.studies.in_memory.RateEstimate] says how).
        level: the confidence level of ``slope_ci``.
        estimator: which estimator gave ``slope`` and ``slope_ci`` ([`ESTIMATORS`][meanfield.studies.in_memory.ESTIMATORS]).
        estimates: every estimator that was asked for, by name ([`RateEstimate`][meanfield.studies.in_memory.RateEstimate]).
        limit: $Y_\infty$ used or estimated by `estimator` (0 for a distance with ``"exact"``; with
            ``"fit"``, a finite reference's floor).
        reference_values: the reference's values of the observable, shape ``(R,)`` (empty for a distance,
            an exact limit or a reference-free study).
        observed: every scalar observable per replicate, ``{name: (len(Ms), reps)}`` (``values`` among them).
        series: every series per replicate, ``{name: (len(Ms), reps, T)}``, at `times`.
        times: ``(T,)`` the saved times of the series (``None`` without series).
    """

    Ms: tuple[int, ...]
    values: torch.Tensor
    floor: torch.Tensor
    metric: str
    method: str
    slope: float
    intercept: float
    slope_ci: tuple[float, float]
    level: float
    estimator: str = "exact"
    estimates: Mapping[str, RateEstimate] = field(default_factory=dict)
    limit: float = 0.0
    reference_values: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.float64))
    observed: Mapping[str, torch.Tensor] = field(default_factory=dict)
    series: Mapping[str, torch.Tensor] = field(default_factory=dict)
    times: torch.Tensor | None = None

    @property
    def mean(self) -> torch.Tensor:
        """Mean of ``Y`` per M, shape ``(len(Ms),)``."""
        return self.values.mean(1)

    @property
    def se(self) -> torch.Tensor:
        r"""Standard error of [`mean`][meanfield.studies.in_memory.StudyResult.mean], $\mathrm{std} / \sqrt{\mathrm{reps}}$, shape ``(len(Ms),)``."""
        return self.values.std(1) / math.sqrt(self.values.shape[1])

    @property
    def excess(self) -> torch.Tensor:
        """``|mean_M − limit|`` per M, shape ``(len(Ms),)`` (the mean itself for a distance with ``"exact"``)."""
        return (self.mean - self.limit).abs()

    @property
    def floor_mean(self) -> torch.Tensor:
        """Mean reference floor per M, shape ``(len(Ms),)`` (zeros for an exact law)."""
        if self.floor.shape[1] == 0:
            return torch.zeros(len(self.Ms), dtype=self.values.dtype)
        return self.floor.mean(1)

    def _lines(self) -> list[str]:
        lo, hi = self.slope_ci
        what = self.metric if self.method == "observable" else f"{self.metric} ({self.method})"
        pairs = [f"{number(m, 3)} ± {number(e, 2)}" for m, e in zip(self.mean.tolist(), self.se.tolist())]
        lines = [
            f"StudyResult: {what} at M = {shortlist(self.Ms)}; {self.values.shape[1]} replicates each",
            f"  slope {number(self.slope, 3)}, {self.level:.0%} CI [{number(lo, 3)}, {number(hi, 3)}] "
            f"({self.estimator}), limit {number(self.limit)}",
            f"  mean ± SE: {shortlist(pairs)}",
        ]
        if self.floor.shape[1] > 0:
            lines.append(f"  floor: {shortlist(self.floor_mean.tolist(), digits=3)}")
        lines += [f"  {e!r}" for name, e in self.estimates.items() if name != self.estimator]
        if self.observed or self.series:
            times = "" if self.times is None else f" at {len(self.times)} times"
            series = f"; series {', '.join(self.series)}{times}" if self.series else ""
            lines.append(f"  observed {', '.join(self.observed) or 'none'}{series}")
        return lines

    def __repr__(self) -> str:
        return "\n".join(self._lines())

    def _repr_html_(self) -> str:
        lines = self._lines()
        columns = ["M", "mean", "se", *(["floor"] if self.floor.shape[1] > 0 else [])]
        estimates = [e._cells() for e in self.estimates.values()]
        return html_block(
            lines[0],
            rows_html(self.rows(), columns),
            rows_html(estimates, list(estimates[0])) if estimates else paragraph(lines[1].strip()),
            *(paragraph(line.strip()) for line in lines[3:] if line.startswith("  observed")),
        )

    def to_pandas(self, *, curves: bool = False):
        """``table`` (or ``curves``) as a ``pandas.DataFrame`` ([`to_pandas`][meanfield.studies.in_memory.Table.to_pandas])."""
        return (self.curves if curves else self.table).to_pandas()

    def fit(self, M: float | torch.Tensor) -> torch.Tensor:
        """The fitted power law of the excess, ``exp(intercept) · M^slope``."""
        return math.exp(self.intercept) * torch.as_tensor(M, dtype=self.values.dtype) ** self.slope

    def rows(self) -> list[dict]:
        """One dict per M: ``M``, ``mean``, ``se``, ``floor`` (a table for [`SweepResult`][meanfield.studies.in_memory.SweepResult]-style export)."""
        return [
            {"M": M, "mean": float(m), "se": float(s), "floor": float(f)}
            for M, m, s, f in zip(self.Ms, self.mean, self.se, self.floor_mean, strict=True)
        ]

    @property
    def table(self) -> Table:
        """The tidy table of scalars: one row per M × replicate, with ``Y`` and every scalar observable."""
        names = tuple(self.observed)
        rows = [
            {"M": M, "replicate": b, **{n: float(self.observed[n][k, b]) for n in names}}
            for k, M in enumerate(self.Ms)
            for b in range(self.values.shape[1])
        ]
        return Table(rows, ("M", "replicate"), names, replicate="replicate")

    @property
    def curves(self) -> Table:
        """The tidy table of series: one row per M × replicate × saved time ``t`` (empty without series)."""
        names = tuple(self.series)
        rows = []
        if names:
            ts = self.times.tolist()
            stacked = torch.stack([self.series[n] for n in names], -1).tolist()  # (K, reps, T, n)
            for k, M in enumerate(self.Ms):
                for b, per_t in enumerate(stacked[k]):
                    rows.extend(
                        {"M": M, "replicate": b, "t": t, **dict(zip(names, v, strict=True))}
                        for t, v in zip(ts, per_t, strict=True)
                    )
        return Table(rows, ("M", "replicate", "t"), names, replicate="replicate")

    def to_csv(self, path: str | os.PathLike | None = None, *, curves: bool = False) -> str:
        """[`table`][meanfield.studies.in_memory.StudyResult.table] (or [`curves`][meanfield.studies.in_memory.StudyResult.curves]) as CSV; written to ``path`` when given. Returns the text."""
        return (self.curves if curves else self.table).to_csv(path)

    def plot(
        self,
        ax: matplotlib.axes.Axes | None = None,
        path: str | os.PathLike | None = None,
        *,
        label: str | None = None,
    ):
        """Log-log plot of the mean excess ``|mean_M − limit|`` (±1.96 SE), the fitted rate and the floor.

        Args:
            ax: an Axes to draw on (default: a new figure).
            path: also write the figure there (and close it).
            label: the name of this study in the legend (default: `metric`), so that two studies on
                one axis can be told apart.

        Returns the figure, shown once in a notebook ([`returned`][meanfield.studies.plotting.returned]).
        The error bars are the replicates' ±1.96 SE; the reference's own uncertainty is in
        the slope's interval (estimator ``"reference"``), not in the bars.
        """
        made_here = ax is None
        fig, ax = figure() if made_here else (ax.figure, ax)
        name = self.metric if label is None else label
        Ms = np.asarray(self.Ms, dtype=float)
        excess = self.excess.numpy()
        points = ax.errorbar(
            Ms, excess, yerr=1.96 * self.se.numpy(), fmt="o", capsize=3, label=f"{name} (±1.96 SE)"
        )
        lo, hi = self.slope_ci
        ax.plot(
            Ms,
            self.fit(torch.as_tensor(Ms)).numpy(),
            "-",
            color=points[0].get_color(),
            label=f"{name}: slope {self.slope:.3f}, {self.level:.0%} CI [{lo:.3f}, {hi:.3f}] ({self.estimator})",
        )
        if bool((self.floor_mean > 0).any()):
            ax.plot(Ms, self.floor_mean.numpy(), "--", color="grey", label=f"{name}: reference floor")
        is_distance = self.method != "observable"
        ylabel = f"{self.metric} ({self.method})" if is_distance else f"|{self.metric} − limit|"
        ax.set(xscale="log", yscale="log", xlabel="M (particles)", ylabel=ylabel)
        ax.set_xticks(Ms, labels=[str(M) for M in self.Ms])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.legend(fontsize=8)
        if path is not None:
            save(fig, path)
        return returned(fig, made_here)


def _distance(metric: str | Metric, method: str, x: torch.Tensor, ref) -> torch.Tensor:
    r"""$D(x_b, \mathrm{ref}_b)$ per replica, shape ``(B,)``; ``ref`` is a [`Law1d`][meanfield.metrics.wasserstein.Law1d] or a cloud."""
    if callable(metric):
        return torch.as_tensor(metric(x, ref)).reshape(x.shape[0])
    p, finish = METRICS[metric]
    if isinstance(ref, Law1d):
        return finish(wasserstein_to_law(x, ref, p=p).cost)
    return finish(wasserstein(x, ref, p=p, method=method).cost)


def _reference_values(
    reference: object,
    quantity: str,
    observables: Mapping[str, Observable] | None,
    window: tuple[float, float] | None = None,
) -> tuple[float | None, torch.Tensor]:
    """A quantity study's reference: ``(exact limit, values (R,))``; both empty for a reference-free study."""
    empty = torch.zeros(0, dtype=torch.float64)
    if reference is None:
        return None, empty
    if isinstance(reference, (bool, str)):
        raise TypeError(
            f"reference must be a number, values (R,) or a reference run, got {type(reference).__name__}"
        )
    if isinstance(reference, (int, float, np.number)) or torch.is_tensor(reference) and reference.dim() == 0:
        return check_finite("reference", float(reference)), empty
    if (
        isinstance(reference, (list, tuple, np.ndarray))
        or torch.is_tensor(reference)
        and reference.dim() == 1
    ):
        values = _as_tensor("reference", reference).reshape(-1)  # (R,)
        check_finite_tensor("reference", values)
        if values.numel() == 0:
            raise ValueError("reference values must not be empty")
        return None, values
    R = None
    if torch.is_tensor(reference):
        R = reference.shape[0]
    elif isinstance(reference, Trajectory):
        R = reference.states.shape[1]
    elif isinstance(reference, Mapping) and quantity in reference:
        R = len(reference[quantity])
    elif isinstance(reference, Mapping) and "final" in reference:
        R = reference["final"].shape[0]
    if R is None:
        raise TypeError(
            f"with quantity={quantity!r}, reference must be the exact limit (a number), the reference runs' "
            f"values (R,), or a reference run's output (states, Trajectory or mapping), got "
            f"{type(reference).__name__}"
        )
    _, scalars, series, _ = _collect("reference", reference, R, observables, window)
    if quantity in scalars:
        return None, scalars[quantity]
    if quantity in series:
        return None, series[quantity][:, -1]
    raise ValueError(
        f"the reference run has no observable {quantity!r}; it has {sorted({*scalars, *series})}"
    )


def _sample_seeds(sample: Callable, seeds: object, reps: int) -> list[int] | None:
    """The replicates' seeds when ``sample`` takes ``seed`` (``None`` when it does not)."""
    try:
        takes_seed = "seed" in inspect.signature(sample).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        takes_seed = False
    if not takes_seed:
        if seeds is not None:
            raise TypeError(
                "seeds= is handed to sample(M, reps, seed): give sample a seed parameter (the replicates' "
                "seeds), or leave seeds out"
            )
        return None
    out = seed_list(reps if seeds is None else seeds)
    if len(out) != reps:
        raise ValueError(f"seeds must hold one seed per replicate (reps = {reps}), got {len(out)}")
    return out


def convergence_in_m(
    sample: Sampler,
    Ms: Sequence[int],
    *,
    reps: int,
    reference: object = None,
    generator: torch.Generator | int,
    metric: str | Metric = "w2_squared",
    method: str = "auto",
    reference_size: int | None = None,
    floor_reps: int | None = None,
    n_boot: int = 2000,
    level: float = 0.95,
    progress: bool | None = None,
    observables: Mapping[str, Observable] | None = None,
    quantity: str | None = None,
    estimator: str | Sequence[str] = "auto",
    seeds: int | Sequence[int] | None = None,
    window: tuple[float, float] | None = None,
) -> StudyResult:
    r"""How fast a quantity of M particles approaches its limit: $|\mathbb{E} Y_M - Y_\infty| \approx |c| M^{\mathrm{slope}}$.

    For each M, ``sample(M, reps)`` gives ``reps`` independent replicates: states ``(reps, M, d)``, a
    [`Trajectory`][meanfield.stepping.simulate.Trajectory], or a mapping of observables (``{"final": states, "t": times,
    "loss": (reps,) or (reps, T), ...}``). ``observables`` (``name → f(x (reps, M, d)) -> (reps,)``) are
    evaluated on the final states, or on every saved state of a trajectory (a series); every scalar and
    series is kept per replicate ([`StudyResult.table`][meanfield.studies.in_memory.StudyResult.table], [`StudyResult.curves`][meanfield.studies.in_memory.StudyResult.curves]).

    **What is studied.** Without ``quantity``, $Y_M = D(\mu_M, \mu)$ ($Y_\infty = 0$), the distance of the final
    states to ``reference``:

    * an exact law ([`Law1d`][meanfield.metrics.wasserstein.Law1d], 1-D): $D(\mu_M, \mu)$ in closed form,
      floor 0;
    * a fixed cloud of shape ``(N, d)`` (e.g. a large-M run): $D(\mu_M, \mu_N)$; floor ``D`` between two
      random halves of it;
    * an exact sampler ``reference(n, generator) -> (n, d)`` of i.i.d. draws: $D(\mu_M, \nu_N)$ with a fresh
      $\nu_N$ per replicate, ``N = reference_size`` (default M, the same size); floor $\mathbb{E} D(\nu_N, \nu'_N)$
      over ``floor_reps`` pairs, which at ``N = M`` is the i.i.d. baseline of the particle system (a two-sample
      study: $D(\mu_M, \nu_M)$ against $D(\nu_M, \nu'_M)$).

    With ``quantity="loss"``, $Y_M$ is that scalar observable (a series: its value at the last saved time)
    and ``reference`` its limit $Y_\infty$: a number (exact), the values of ``R`` independent reference runs
    (a sequence ``(R,)``, or a reference run's output, to which ``observables`` apply), or ``None``
    (reference-free). The R values must be independent: replicated reference runs, or a pooled reference —
    one long or large run cut into R independent blocks, each block's value one entry. They should also be
    unbiased for $Y_\infty$ to within the interval (a reference at $M_{\mathrm{ref}}$ carries $c\cdot M_{\mathrm{ref}}^{-\alpha}$).

    **Estimators** ([`RateEstimate`][meanfield.studies.in_memory.RateEstimate]; ``estimator`` names one, or several — the first gives ``slope`` and
    ``slope_ci``, all are in ``estimates``): ``"exact"`` (the reference as exact: right for an exact law or
    limit; for a finite reference the naive interval), ``"reference"`` (the reference values' uncertainty
    propagated: their mean, redrawn from its t law in every bootstrap draw, is the point $M = \infty$ of a
    $Y_\infty + c M^{-\alpha}$ fit), ``"fit"`` ($Y_\infty$ fitted, no reference) and ``"differences"``
    (``mean_M − mean_{rM}``, no reference). ``"auto"``: ``"exact"`` for a distance or an exact limit,
    ``"reference"`` with ≥ 2 reference values, ``"fit"`` (≥ 4 sizes) or ``"differences"`` without a reference.
    A single reference value warns: its fluctuation is in no interval.

    A ``RuntimeWarning`` says when a mean distance is below 3× the floor of a reference meant to stand for
    the law (a fixed cloud, or a sampler with ``reference_size``): there the rate measures the reference.
    ``method="auto"`` is resolved once, at the largest sizes, so that every M is measured by the same distance.

    **Seeds.** ``sample(M, reps, seed)`` (a ``seed`` parameter) is called with ``seed`` the list of the
    ``reps`` replicates' seeds, the same at every M: ``seeds`` (a number ``n`` means ``0, …, n − 1``; default
    ``reps``). It is the convention of a batched [`sweep`][meanfield.studies.in_memory.sweep] (module docstring): replicate ``r``'s initial
    state from ``torch.Generator().manual_seed(seed[r])``, the call's noise from ``batch_seed(seed)``; then
    the same function gives the same draws in a sweep and here. A ``sample(M, reps)`` without ``seed`` draws
    from generators of its own.

    Args:
        sample: ``sample(M, reps)`` or ``sample(M, reps, seed)`` → states, a trajectory or a mapping (above);
            e.g. ``simulate(system, x0, ..., generator=batch_seed(seed))`` with ``B = reps``. ``generator``
            does not seed it.
        Ms: numbers of particles, at least 2 distinct, increasing.
        reps: replicates per M (≥ 2).
        reference: see above.
        generator: drives the reference draws, the split of a fixed cloud and the bootstrap: a
            ``torch.Generator`` or an int seed (Python or NumPy integer), as for ``simulate``.
        metric: ``"w2_squared"`` (default), ``"w2"``, ``"w1"`` or a callable ``(x (B, M, d), y (B, N, d)) -> (B,)``
            (not with an exact law); without ``quantity`` only.
        method: Wasserstein method (``"auto"``, ``"1d"``, ``"exact"``, ``"sliced"``, ``"sinkhorn"``).
        reference_size: size N of each sampled reference cloud (sampler only); default M.
        floor_reps: pairs of reference clouds for the floor (sampler only); default ``reps``.
        n_boot: bootstrap resamplings.
        level: confidence level of the slope interval.
        progress: show a progress bar over M (``None``: when it lasts over a second in a terminal or a
            notebook, [`meanfield.progress`][meanfield.progress]).
        observables: named functions of the states ``(reps, M, d) -> (reps,)`` to collect per replicate.
        quantity: the observable whose approach to its limit is studied (instead of a distance).
        estimator: ``"auto"``, one of [`ESTIMATORS`][meanfield.studies.in_memory.ESTIMATORS], or a sequence of them.
        seeds: the replicates' seeds for a ``sample`` that takes ``seed`` (above): ``reps`` ints, or a number
            ``reps`` (``0, …, reps − 1``, the default).
        window: ``(t_a, t_b)``: each series' scalar (and a ``quantity`` that is a series) is its mean over the
            saved times in ``[t_a, t_b]`` per replicate, not its last value.

    Returns:
        [`StudyResult`][meanfield.studies.in_memory.StudyResult] (``estimator`` says where the interval comes from).
    """
    if not callable(sample):
        raise TypeError(f"sample must be a callable (M, reps) -> (reps, M, d), got {type(sample).__name__}")
    Ms = _check_sizes(Ms)
    check_int("reps", reps, minimum=2)
    check_int("n_boot", n_boot)
    if not 0 < check_finite("level", level) < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    generator, _ = resolve_generator(generator, name="generator", allow_none=False)
    window = _check_window(window)
    replicate_seeds = _sample_seeds(sample, seeds, reps)
    names = _check_study(observables, quantity, estimator, metric)
    for name, given in (("reference_size", reference_size), ("floor_reps", floor_reps)):
        if given is not None:
            check_int(name, given)
    ref = _Reference.of(reference, quantity, observables, window, metric, method, generator)
    for name, given in (("reference_size", reference_size), ("floor_reps", floor_reps)):
        if given is not None and ref.kind != "sampler":
            raise ValueError(f"{name} applies to a sampler reference only, got a {ref.kind} reference")
    ref.size, ref.n_floor = reference_size, floor_reps or reps
    names = _resolve_estimators(names, ref, Ms)

    measured = _Measured()
    for M in progress_bar(progress, iterable=Ms, desc="convergence in M"):
        out = sample(M, reps) if replicate_seeds is None else sample(M, reps, seed=list(replicate_seeds))
        measured.add(M, Ms, _collect("sample(M, reps)", out, reps, observables, window), ref, quantity, reps)
    values, floor = measured.tensors(ref, Ms)  # (K, reps), (K, n)
    name = quantity if ref.kind == "quantity" else metric if isinstance(metric, str) else _name_of(metric)
    check_finite_tensor(name, values)
    estimates = _rate_estimates(names, Ms, values, ref, n_boot, level, generator)
    if ref.kind != "quantity":
        _warn_floor(Ms, values.mean(1), floor, ref.kind == "cloud" or reference_size is not None)
    head = estimates[names[0]]
    observed_t = {name: values, **{n: torch.stack(v) for n, v in measured.observed.items() if n != name}}
    return StudyResult(
        Ms=tuple(Ms),
        values=values,
        floor=floor,
        metric=name,
        method=measured.method,
        slope=head.slope,
        intercept=head.intercept,
        slope_ci=head.slope_ci,
        level=level,
        estimator=head.estimator,
        estimates=estimates,
        limit=head.limit,
        reference_values=ref.values,
        observed=observed_t,
        series={n: torch.stack(v) for n, v in measured.series.items()},
        times=measured.times,
    )


def _name_of(metric: Metric) -> str:
    return getattr(metric, "__name__", "custom")


def _check_sizes(Ms: object) -> list[int]:
    """The numbers of particles as ints: at least 2, distinct and increasing."""
    if isinstance(Ms, (str, bytes)) or not isinstance(Ms, Iterable) or getattr(Ms, "ndim", 1) == 0:
        raise TypeError(f"Ms must be a sequence of numbers of particles, got {type(Ms).__name__}")
    Ms = [check_int("Ms[i]", int(M) if isinstance(M, (np.integer, torch.Tensor)) else M) for M in Ms]
    if len(set(Ms)) < 2 or Ms != sorted(Ms) or len(set(Ms)) != len(Ms):
        raise ValueError(f"Ms must be at least 2 distinct increasing integers, got {Ms}")
    return Ms


def _check_study(observables: object, quantity: object, estimator: object, metric: object) -> tuple[str, ...]:
    """Check what ``convergence_in_m`` measures; returns the estimators' names as given."""
    if observables is not None and (
        not isinstance(observables, Mapping) or not all(callable(f) for f in observables.values())
    ):
        raise TypeError("observables must be a mapping name -> callable (states (B, M, d) -> (B,))")
    if quantity is not None and not isinstance(quantity, str):
        raise TypeError(f"quantity must be the name of an observable (str), got {type(quantity).__name__}")
    names = (estimator,) if isinstance(estimator, str) else tuple(estimator)
    if not names or any(not isinstance(e, str) or e not in ("auto", *ESTIMATORS) for e in names):
        raise ValueError(f"estimator must be 'auto' or one or more of {list(ESTIMATORS)}, got {estimator!r}")
    _check_metric(metric, quantity)
    return names


def _check_metric(metric: object, quantity: str | None) -> None:
    """A metric name of ``METRICS`` or a callable, for a distance study only."""
    if quantity is not None:
        if metric != "w2_squared":
            raise ValueError(f"metric applies to a distance study; with quantity={quantity!r} leave it out")
        return
    if isinstance(metric, str) and metric not in METRICS:
        raise ValueError(f"metric must be one of {list(METRICS)} or a callable, got {metric!r}")
    if not isinstance(metric, str) and not callable(metric):
        raise TypeError(
            f"metric must be a name in {list(METRICS)} or a callable, got {type(metric).__name__}"
        )


@dataclass
class _Reference:
    r"""What a convergence study measures against: ``kind`` is ``"quantity"`` (an observable with its
    ``limit`` or reference ``values``), ``"law"`` (an exact [`Law1d`][meanfield.metrics.wasserstein.Law1d]),
    ``"cloud"`` (a fixed ``(N, d)`` cloud) or ``"sampler"`` (``reference(n, generator)``), with the metric,
    the Wasserstein method asked for, the generator, and for a sampler its clouds' ``size`` and the
    ``n_floor`` pairs of its floor."""

    kind: str
    reference: object
    limit: float | None
    values: torch.Tensor  # (R,)
    metric: str | Metric
    method: str
    generator: torch.Generator
    size: int | None = None
    n_floor: int = 0

    @classmethod
    def of(cls, reference, quantity, observables, window, metric, method, generator) -> _Reference:
        limit, values = None, torch.zeros(0, dtype=torch.float64)
        if quantity is not None:
            kind = "quantity"
            limit, values = _reference_values(reference, quantity, observables, window)
        elif reference is None:
            raise TypeError(
                "reference is required for a distance study (or name an observable with quantity=)"
            )
        elif isinstance(reference, Law1d):
            kind = "law"
            if callable(metric):
                raise TypeError(
                    "metric must be 'w2_squared', 'w2' or 'w1' with an exact law reference, got a callable"
                )
        elif torch.is_tensor(reference):
            kind = "cloud"
            check_finite_tensor("reference", reference)
            if reference.dim() != 2 or reference.shape[0] < 2:
                raise ValueError(
                    f"a reference cloud must have shape (N, d) with N ≥ 2, got {tuple(reference.shape)}"
                )
        elif callable(reference):
            kind = "sampler"
        else:
            raise TypeError(
                f"reference must be a Law1d, a tensor (N, d) or a sampler (n, generator) -> (n, d), "
                f"got {type(reference).__name__}"
            )
        return cls(kind, reference, limit, values, metric, method, generator)

    @property
    def R(self) -> int:
        """The number of reference values (a quantity study)."""
        return self.values.numel()

    def cloud_size(self, M: int) -> int:
        """N: the size of the reference cloud compared with M particles (0 for a law or a quantity)."""
        if self.kind == "cloud":
            return self.reference.shape[0]
        return (self.size or M) if self.kind == "sampler" else 0

    def draw(self, n: int, count: int) -> torch.Tensor:
        """``count`` fresh clouds of ``n`` draws of a sampler reference, ``(count, n, d)``."""
        ref = self.reference(n * count, self.generator)  # (count·n, d)
        check_finite_tensor("reference(n, generator)", ref)
        if ref.dim() != 2 or ref.shape[0] != n * count:
            raise ValueError(
                f"reference(n, generator) must return shape (n, d) = ({n * count}, d), got {tuple(ref.shape)}"
            )
        return ref.reshape(count, n, ref.shape[1])  # (count, n, d)

    def method_for(self, Ms: Sequence[int], d: int) -> str:
        """One method for every M: the one ``"auto"`` picks at the largest sizes."""
        if self.kind == "law":
            return "law"
        if callable(self.metric):
            return "custom"
        return resolve_method(self.method, Ms[-1], self.cloud_size(Ms[-1]), d)

    def distances(self, M: int, x: torch.Tensor, method: str) -> tuple[torch.Tensor, torch.Tensor | None]:
        r"""$D(\mu_M, \mu)$ of each replicate ``x (reps, M, d)`` and the floor at M (``None``: the cloud's, later)."""
        reps, d = x.shape[0], x.shape[2]
        if self.kind == "law":
            return _distance(self.metric, method, x, self.reference), torch.zeros(0, dtype=x.dtype)
        if self.kind == "cloud":
            if self.reference.shape[1] != d:
                raise ValueError(f"reference has d={self.reference.shape[1]}, sample(M, reps) has d={d}")
            return _distance(self.metric, method, x, self.reference.to(x.dtype)), None
        n = self.n_floor
        ref = self.draw(self.cloud_size(M), reps + 2 * n).to(x.dtype)  # (reps + 2·n_floor, N, d)
        if ref.shape[2] != d:
            raise ValueError(f"reference(n, generator) has d={ref.shape[2]}, sample(M, reps) has d={d}")
        value = _distance(self.metric, method, x, ref[:reps])
        return value, _distance(self.metric, method, ref[reps : reps + n], ref[reps + n :])

    def cloud_floor(self, method: str) -> torch.Tensor:
        """The floor of a fixed cloud: the distance between two random halves of it, ``(1,)``."""
        perm = torch.randperm(self.reference.shape[0], generator=self.generator)  # (N,)
        half = self.reference.shape[0] // 2
        halves = (
            self.reference[perm[:half]].unsqueeze(0),
            self.reference[perm[half : 2 * half]].unsqueeze(0),
        )  # (1, N/2, d)
        return _distance(self.metric, method, *halves)


def _resolve_estimators(names: tuple[str, ...], ref: _Reference, Ms: Sequence[int]) -> tuple[str, ...]:
    """The estimators, ``"auto"`` resolved, each checked against what the reference allows."""
    R = ref.R

    def resolve(e: str) -> str:
        if e != "auto":
            return e
        if ref.kind != "quantity" or ref.limit is not None or R == 1:
            return "exact"
        if R >= 2:
            return "reference"
        ratios = {round(b / a, 9) for a, b in itertools.pairwise(Ms)}
        return "fit" if len(Ms) >= 4 else "differences" if len(ratios) == 1 else "fit"

    names = tuple(dict.fromkeys(resolve(e) for e in names))
    for e in names:
        if e == "reference" and R < 2:
            raise ValueError(
                "estimator='reference' needs ≥ 2 reference values (independent reference runs) of the "
                f"observable named by quantity=, got {R if ref.kind == 'quantity' else 'a distance study'}"
            )
        if e == "exact" and ref.kind == "quantity" and ref.limit is None and R == 0:
            raise ValueError("estimator='exact' needs a reference (the limit, or reference values)")
    if ref.kind == "quantity" and R == 1 and "exact" in names:
        warnings.warn(
            "one reference value: its fluctuation is in no interval (the reference is treated as exact); give "
            "≥ 2 independent reference runs (estimator 'reference') or use estimator='fit'",
            RuntimeWarning,
            stacklevel=3,
        )
    return names


class _Measured:
    """What a convergence study gathers over M: the values $Y_M$ and floors per M, the method, the other
    observables and series per M, and the series' times."""

    def __init__(self) -> None:
        self.values: list[torch.Tensor] = []
        self.floors: list[torch.Tensor | None] = []
        self.method: str | None = None
        self.observed: dict[str, list[torch.Tensor]] = {}
        self.series: dict[str, list[torch.Tensor]] = {}
        self.times: torch.Tensor | None = None
        self.d: int | None = None

    def add(
        self, M: int, Ms: Sequence[int], collected, ref: _Reference, quantity: str | None, reps: int
    ) -> None:
        """One M: the states' checks, the observables, and $Y_M$ (the quantity, or the distance and floor)."""
        x, scalars, curves, t = collected
        if ref.kind != "quantity" or x is not None:
            self._check_states(x, M, reps)
        if curves:
            if self.times is not None and (self.times.shape != t.shape or not torch.allclose(self.times, t)):
                raise ValueError(f"the series at M = {M} are saved at other times than at M = {Ms[0]}")
            self.times = t
        if M != Ms[0] and (set(curves) != set(self.series) or set(scalars) != set(self.observed)):
            raise ValueError(f"sample(M, reps) returned other observables at M = {M} than at M = {Ms[0]}")
        for n, v in scalars.items():
            self.observed.setdefault(n, []).append(v)
        for n, v in curves.items():
            self.series.setdefault(n, []).append(v)
        if ref.kind == "quantity":
            if quantity in scalars:
                self.values.append(scalars[quantity])
            elif quantity in curves:
                self.values.append(curves[quantity][:, -1])
            else:
                raise ValueError(
                    f"quantity {quantity!r} is not an observable of sample(M, reps); it returned "
                    f"{sorted({*scalars, *curves})}"
                )
            self.floors.append(torch.zeros(0, dtype=torch.float64))
            self.method = "observable"
            return
        if self.method is None:
            self.method = ref.method_for(Ms, self.d)
        value, floor = ref.distances(M, x, self.method)
        self.values.append(value)
        self.floors.append(floor)

    def _check_states(self, x: torch.Tensor | None, M: int, reps: int) -> None:
        if x is None:
            raise ValueError("sample(M, reps) returned no states ('final'): a distance needs them")
        check_finite_tensor("sample(M, reps)", x)
        d = self.d
        if x.dim() != 3 or tuple(x.shape[:2]) != (reps, M) or (d is not None and x.shape[2] != d):
            raise ValueError(
                f"sample(M, reps) must return shape (reps, M, d) = ({reps}, {M}, {d or 'd'}), got {tuple(x.shape)}"
            )
        self.d = x.shape[2]

    def tensors(self, ref: _Reference, Ms: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The values ``(K, reps)`` and floors ``(K, n)`` in float64 (a cloud's one floor at every M)."""
        floors = [ref.cloud_floor(self.method)] * len(Ms) if ref.kind == "cloud" else self.floors
        return torch.stack(self.values).to(torch.float64), torch.stack(floors).to(torch.float64)


def _rate_estimates(
    names: Sequence[str],
    Ms: Sequence[int],
    values: torch.Tensor,
    ref: _Reference,
    n_boot: int,
    level: float,
    generator: torch.Generator,
) -> dict[str, RateEstimate]:
    """Each estimator's slope and interval from the values ``(K, reps)``: the bootstrap resamples the
    replicates within each M, and with ``"reference"`` the reference mean from its t law."""
    reps, R = values.shape[1], ref.R
    Ms_t = torch.tensor(Ms, dtype=torch.float64)  # (K,)
    boot = torch.stack(  # resample the replicates within each M
        [row[torch.randint(reps, (n_boot, reps), generator=generator)].mean(1) for row in values], dim=1
    )  # (n_boot, K)
    ref_mean = float(ref.values.mean()) if R >= 1 else None
    ref_se = ref_boot = None
    if "reference" in names:  # the reference mean's sampling law: ȳ + SE·t_{R−1}
        ref_se = float(ref.values.std() / math.sqrt(R))
        ref_boot = ref_mean + ref_se * _student_t(n_boot, R - 1, generator)  # (n_boot,)
    estimates: dict[str, RateEstimate] = {}
    for e in names:
        est, notes = _estimate(
            e, Ms_t, values, boot,
            limit=ref.limit if ref.limit is not None else ref_mean,
            ref_boot=ref_boot, ref_mean=ref_mean, ref_se=ref_se,
            distance=ref.kind != "quantity", level=level,
        )  # fmt: skip
        for note in notes:
            warnings.warn(note, RuntimeWarning, stacklevel=3)
        estimates[e] = est
    return estimates


def _warn_floor(Ms: Sequence[int], means: torch.Tensor, floor: torch.Tensor, approximates_law: bool) -> None:
    """A ``RuntimeWarning`` where the mean distance is below 3× the floor of a reference meant to stand for
    the law (a fixed cloud, or a sampler with ``reference_size``; not a two-sample study)."""
    if bool((means <= 0).any()) or not approximates_law:
        return
    floor_mean = floor.mean(1) if floor.shape[1] else torch.zeros(len(Ms), dtype=torch.float64)
    if bool((means < 3 * floor_mean).any()):
        warnings.warn(
            f"the mean distance is below 3× the reference floor at M = "
            f"{[M for M, m, f in zip(Ms, means, floor_mean, strict=True) if m < 3 * f]}: "
            f"the slope there measures the reference as much as μ_M (use a larger reference)",
            RuntimeWarning,
            stacklevel=3,
        )


# --------------------------------------------------------------------------------------------------------
# Sweeps


def _scalar(name: str, value: object) -> object:
    """A table cell: int, float, bool or str (tensors and NumPy scalars of one element are converted)."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if (
        isinstance(value, torch.Tensor)
        and value.numel() == 1
        or isinstance(value, np.ndarray)
        and value.size == 1
    ):
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(
        f"{name} must be a scalar (int, float, bool, str, one-element tensor) or a 1-D series, "
        f"got {type(value).__name__}"
    )


def _series(name: str, value: object) -> list[float] | None:
    """A 1-D series (tensor, array, list of numbers) as a list of floats; ``None`` for anything else."""
    if torch.is_tensor(value) and value.dim() == 1 and value.numel() > 1:
        return value.detach().cpu().to(torch.float64).tolist()
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.size > 1:
        return value.astype(np.float64).tolist()
    if (
        isinstance(value, (list, tuple))
        and len(value) > 1
        and all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in value)
    ):
        return [float(v) for v in value]
    if (torch.is_tensor(value) and value.dim() > 1 and value.numel() != 1) or (
        isinstance(value, np.ndarray) and value.ndim > 1 and value.size != 1
    ):
        raise TypeError(
            f"{name} must be a scalar (int, float, bool, str, one-element tensor) or a 1-D series, "
            f"got a {type(value).__name__} of shape {tuple(value.shape)}"
        )
    return None


@dataclass(frozen=True)
class SweepResult:
    """A table of runs: one dict row per (grid point, seed), with the point, ``seed``, the scalar outputs and
    ``error``; series outputs in [`curves`][meanfield.studies.in_memory.SweepResult.curves] (one row per point × seed × saved time).

    Attributes:
        rows: the table; ``error`` is ``None`` or ``"ExceptionType: message"`` (then the outputs are absent).
        params: the grid's parameter names.
        outputs: the scalar output names, in order of first appearance.
        series: the series output names.
        curve_rows: the rows of [`curves`][meanfield.studies.in_memory.SweepResult.curves].
        batched: the parameters that ran on the replica axis (empty for one call per point and seed).
    """

    rows: list[dict]
    params: tuple[str, ...]
    outputs: tuple[str, ...] = field(default=())
    series: tuple[str, ...] = field(default=())
    curve_rows: list[dict] = field(default_factory=list)
    batched: tuple[str, ...] = field(default=())

    @property
    def columns(self) -> tuple[str, ...]:
        """``params + ("seed",) + outputs + ("error",)``."""
        return (*self.params, "seed", *self.outputs, "error")

    @property
    def table(self) -> Table:
        """[`rows`][meanfield.studies.in_memory.StudyResult.rows] as a [`Table`][meanfield.studies.in_memory.Table] (failed rows included, with their ``error``)."""
        return Table(self.rows, (*self.params, "seed"), (*self.outputs, "error"), replicate="seed")

    @property
    def curves(self) -> Table:
        """The series: a tidy [`Table`][meanfield.studies.in_memory.Table] with one row per point × seed × saved time ``t``."""
        return Table(self.curve_rows, (*self.params, "seed", "t"), self.series, replicate="seed")

    @property
    def failures(self) -> list[dict]:
        """The rows whose run raised."""
        return [row for row in self.rows if row["error"] is not None]

    def _title(self) -> str:
        points = len({tuple(repr(row.get(p)) for p in self.params) for row in self.rows})
        seeds = len({repr(row.get("seed")) for row in self.rows})
        title = f"SweepResult: {len(self.rows)} runs ({points} points × {seeds} seeds), {len(self.failures)} failed"
        title += f"; outputs {', '.join(self.outputs) or 'none'}"
        if self.series:
            title += f"; series {', '.join(self.series)} ({len(self.curve_rows)} rows in curves)"
        return title

    def _shown(self) -> tuple[str, ...]:  # the error column only when a run failed
        return self.columns if self.failures else self.columns[:-1]

    def __repr__(self) -> str:
        return f"{self._title()}\n{rows_text(self.rows, self._shown())}"

    def _repr_html_(self) -> str:
        return html_block(self._title(), rows_html(self.rows, self._shown()))

    def to_pandas(self, *, curves: bool = False):
        """``table`` (or ``curves``) as a ``pandas.DataFrame`` ([`to_pandas`][meanfield.studies.in_memory.Table.to_pandas])."""
        return (self.curves if curves else self.table).to_pandas()

    def column(self, name: str) -> list:
        """The values of one column (``None`` where a row lacks it)."""
        if name not in self.columns:
            raise KeyError(f"no column {name!r}; the columns are {list(self.columns)}")
        return [row.get(name) for row in self.rows]

    def to_csv(self, path: str | os.PathLike | None = None, *, curves: bool = False) -> str:
        """The table (or with ``curves=True`` the series table) as CSV, missing cells empty; written to
        ``path`` when given. Returns the text."""
        if curves:
            return self.curves.to_csv(path)
        return csv_text(self.rows, self.columns, path)

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """The tables as JSON ``{"params", "outputs", "rows", "series", "curve_rows", "batched"}`` (non-finite
        floats become ``null``)."""
        data = {
            "params": list(self.params),
            "outputs": list(self.outputs),
            "rows": [{k: _clean(v) for k, v in row.items()} for row in self.rows],
            "series": list(self.series),
            "curve_rows": [{k: _clean(v) for k, v in row.items()} for row in self.curve_rows],
            "batched": list(self.batched),
        }
        text = json.dumps(data, indent=1, allow_nan=False)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_json(cls, source: str | os.PathLike) -> SweepResult:
        """Read a table written by [`to_json`][meanfield.studies.in_memory.SweepResult.to_json] (a path or the JSON text)."""
        text = str(source)
        if not text.lstrip().startswith("{"):
            text = Path(source).read_text()
        data = json.loads(text)
        return cls(
            rows=data["rows"],
            params=tuple(data["params"]),
            outputs=tuple(data["outputs"]),
            series=tuple(data.get("series", ())),
            curve_rows=data.get("curve_rows", []),
            batched=tuple(data.get("batched", ())),
        )

    def summary(
        self,
        x: str,
        y: str,
        hue: str | None = None,
        *,
        where: Mapping[str, object] | None = None,
        level: float = 0.95,
    ) -> list[dict]:
        r"""Mean of ``y`` over seeds for each (``hue``, ``x``), with a Student-t confidence interval.

        ``mean ± t_{n−1, (1+level)/2} · s/\sqrt{n}`` over the ``n`` successful seeds with a finite ``y``.
        Grid parameters other than ``x`` and ``hue`` must be fixed by ``where`` (or take one value). For a
        series, use ``curves.summary("t", y, hue)``.

        Returns:
            One dict per group: ``hue`` (if given), ``x``, ``mean``, ``se``, ``lo``, ``hi``, ``n``.
        """
        return _summary_rows(self.rows, self.params, self.columns, x, y, hue, where, level)

    def summarize(
        self,
        metrics: Sequence[str] | None = None,
        baseline: Mapping[str, object] | None = None,
        *,
        options: TableOptions | None = None,
    ) -> SummaryTable:
        """The sweep's table of comparisons, the one ``meanfield sweep`` writes to ``summary.md``: per grid
        point the mean of each metric with its t interval over the seeds that ran, and against ``baseline``
        (values of some parameters, e.g. ``{"beta": 0.0}``) the paired difference seed by seed with its
        interval, p-value, Holm's adjustment over the table and detectable difference
        ([`summarize`][meanfield.studies.summary.summarize]).

        Args:
            metrics: the outputs to summarise (default: every numeric output).
            baseline: the point every other is compared with; its parameters must be in the grid.
            options: level, power, log-scale metrics, Holm's family, cost
                ([`TableOptions`][meanfield.studies.summary.TableOptions]).

        Raises:
            KeyError: for a metric that is not an output.
            ValueError: for a baseline parameter outside the grid.
        """
        metrics = [m for m in self.outputs if _is_metric(self.rows, m)] if metrics is None else list(metrics)
        for m in metrics:
            if m not in self.outputs:
                raise KeyError(f"no output {m!r}; the outputs are {list(self.outputs)}")
        if baseline is not None and (unknown := [k for k in baseline if k not in self.params]):
            raise ValueError(f"baseline names {unknown}, which are not grid parameters {list(self.params)}")
        return summarize(
            self.rows,
            self.params,
            metrics,
            baseline,
            options=options,
            finished=lambda r: r.get("error") is None,
        )

    def plot(
        self,
        x: str,
        y: str,
        hue: str | None = None,
        *,
        where: Mapping[str, object] | None = None,
        level: float = 0.95,
        logx: bool = False,
        logy: bool = False,
        label: str | None = None,
        ax=None,
        path: str | os.PathLike | None = None,
    ):
        """Mean of ``y`` against ``x`` over seeds, one line per ``hue``, with a labelled ``level`` band; a
        series ``y`` is drawn against ``x = "t"`` from [`curves`][meanfield.studies.in_memory.SweepResult.curves].

        Returns the figure; with ``path`` it is also written there (and closed). In a notebook it shows once
        ([`returned`][meanfield.studies.plotting.returned]).
        """
        if y in self.series and (y not in self.outputs or x == "t"):
            return self.curves.plot(
                x, y, hue, where=where, level=level, logx=logx, logy=logy, label=label, ax=ax, path=path
            )
        table = self.summary(x, y, hue, where=where, level=level)
        return _plot_summary(
            table, x, y, hue, level=level, replicate="seed", logx=logx, logy=logy, label=label, ax=ax,
            path=path,
        )  # fmt: skip


def _is_metric(rows: Sequence[Mapping], name: str) -> bool:
    """Whether an output is a number in some successful row (a metric the table can average)."""
    return any(_is_number(r.get(name)) for r in rows if r.get("error") is None)


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _store(
    row: dict,
    result: object,
    rows: list,
    curve_rows: list,
    outputs: dict,
    series: dict,
    window: tuple[float, float] | None = None,
) -> None:
    """Add one run's outputs (a mapping name → scalar or 1-D series, ``"t"`` the series' times); with
    ``window``, each series' mean over it as a scalar of the same name."""
    result = dict(result) if isinstance(result, Mapping) else {"value": result}
    times = result.pop("t", None)
    cells, curves = {}, {}
    for key, value in result.items():
        if key in row or key in ("error", "t"):
            raise ValueError(f"run returned an output named {key!r}, which is a parameter or column name")
        s = _series(f"output {key!r}", value)
        if s is None:
            cells[key] = _scalar(f"output {key!r}", value)
        else:
            curves[key] = s
    if curves:
        lengths = {len(v) for v in curves.values()}
        if len(lengths) > 1:
            raise ValueError(f"the series outputs must share one time axis, got lengths {sorted(lengths)}")
        T = lengths.pop()
        ts = list(range(T)) if times is None else _as_tensor("output 't'", times).reshape(-1).tolist()
        if len(ts) != T:
            raise ValueError(f"output 't' has {len(ts)} times, the series have {T}")
        if window is not None:
            at = torch.tensor(ts, dtype=torch.float64)  # (T,)
            for key, v in curves.items():
                cells[key] = float(_window_mean(key, torch.tensor([v], dtype=torch.float64), at, window)[0])
    elif window is not None:
        raise ValueError(f"window={window} averages series over time, but run returned none")
    outputs.update(dict.fromkeys(cells))
    series.update(dict.fromkeys(curves))
    rows.append({**row, **cells, "error": None})
    for j, t in enumerate(ts if curves else ()):
        curve_rows.append({**row, "t": t, **{k: v[j] for k, v in curves.items()}})


def batch_seed(seeds: Sequence[int]) -> int:
    """One seed for a batched call from the seeds of its replicas (``derive_seed`` of their list).

    A batched ``run`` draws the noise of all its replicas from one generator, so its numbers depend on the
    whole chunk (which seeds, in which order), not on each replica's seed alone: the same sweep (grid, seeds,
    ``max_batch``) gives the same numbers, a different chunking other (equally distributed) ones. Draw what
    must follow one replica's seed alone (e.g. its initial state) from ``torch.Generator().manual_seed(seed)``.
    """
    return derive_seed(0, "batch:" + ",".join(str(int(s)) for s in seeds))


def _chunks(n: int, size: int) -> list[range]:
    return [range(i, min(n, i + size)) for i in range(0, n, size)]


def sweep(
    run: Callable[..., Mapping[str, object] | object],
    grid: Mapping[str, Sequence] | Sequence[Mapping],
    *,
    seeds: int | Sequence[int],
    batch: bool | Sequence[str] = False,
    max_batch: int | None = None,
    memory_budget: float | None = None,
    replica_bytes: int | Callable[[Mapping[str, object]], int] | None = None,
    observables: Mapping[str, Observable] | None = None,
    progress: bool | None = None,
    window: tuple[float, float] | None = None,
) -> SweepResult:
    r"""Run ``run`` for every grid point and seed and collect its outputs: scalars, or series at saved times.

    **One call per run** (``batch=False``): ``run(**point, seed=seed)`` returns a mapping name → scalar or
    1-D series (a tensor, array or list of numbers), with ``"t"`` the series' times (default ``0, 1, …``),
    or one scalar (stored as ``"value"``).

    **Batched** (``batch=True``, or the names of the parameters to batch): the runs whose other parameters
    agree go on the replica axis of one call. ``run(**fixed, **{name: values (B,)}, seed=seeds)`` gets each
    batched parameter as a float64 tensor of shape ``(B,)`` (replica ``b`` runs at ``values[b]``), the
    others as plain values, and ``seed`` as a list of ``B`` ints (replica ``b``'s seed); it returns a
    mapping name → ``(B,)`` (a scalar per replica) or ``(B, T)`` (a series at times ``"t"``, ``(T,)``), a
    state tensor ``(B, M, d)`` or a [`Trajectory`][meanfield.stepping.simulate.Trajectory], on which ``observables``
    ($\text{ name } \to f(x (B, M, d)) -> (B,)$) are evaluated (at every saved time for a trajectory). ``batch=True``
    batches every parameter whose grid values are all numbers (leave a size such as M out by naming the
    others). A call holds at most ``max_batch`` replicas, or ``memory_budget // replica_bytes`` (bytes;
    ``replica_bytes`` a number or a function of the fixed parameters, e.g. ``lambda p: 8 * p["M"] * 2 * 50``).

    Args:
        run: the function (above); build the noise from the seed(s) given.
        grid: ``{"beta": [...], "M": [...]}`` (the Cartesian product, in that order) or a list of points
            ``[{"beta": 0.1, "M": 64}, ...]``.
        seeds: a number of seeds ($0, \dots, \text{ seeds } - 1$) or the seeds themselves.
        batch: ``False``, ``True`` or the names of the parameters that vary along the replica axis.
        max_batch: the most replicas in one call (batched only).
        memory_budget: bytes one call may use, with ``replica_bytes`` (batched only).
        replica_bytes: bytes per replica (a number, or a function of the call's fixed parameters).
        observables: functions of the states returned by a batched ``run`` (each may return a result with a
            ``.value (B,)``, e.g. ``system.free_energy``).
        progress: show a progress bar over grid × seeds (``None``: when it lasts over a second in a terminal
            or a notebook, [`meanfield.progress`][meanfield.progress]).
        window: ``(t_a, t_b)``: each series also gives a scalar column of its name, its mean over the saved
            times in ``[t_a, t_b]`` per run (replica), in place of an observable's final value.

    Seeds follow the convention of the module docstring (the seed is handed over, never drawn here).

    Returns:
        [`SweepResult`][meanfield.studies.in_memory.SweepResult]: ``rows`` in grid × seed order, series in ``curves``. A run that raises (or
        returns a non-scalar, non-series) is recorded with ``error = "Type: message"`` and the sweep goes on —
        batched, every replica of the failed call; a warning counts the failures, and if every run fails a
        ``RuntimeError`` names the first error and is raised from it (``__cause__``: its traceback reaches
        ``run``).
    """
    if not callable(run):
        raise TypeError(f"run must be callable, got {type(run).__name__}")
    points, names = grid_points(grid)
    seeds = seed_list(seeds)
    window = _check_window(window)
    batched = _batched_names(batch, names, points)
    if not batch and (max_batch, memory_budget, replica_bytes, observables) != (None,) * 4:
        raise ValueError("max_batch, memory_budget, replica_bytes and observables apply with batch= only")
    if max_batch is not None:
        check_int("max_batch", max_batch)
    if (memory_budget is None) != (replica_bytes is None):
        raise ValueError("memory_budget and replica_bytes go together (bytes per call, bytes per replica)")
    runs = list(itertools.product(points, seeds))
    found = _Collected(len(runs))
    bar = progress_bar(progress, total=len(runs), desc="sweep")
    if not batch:
        _run_each(run, runs, window, found, bar)
    else:
        sizes = _call_size(max_batch, memory_budget, replica_bytes)
        for members, fixed in _batch_groups(runs, names, batched):
            for chunk in _chunks(len(members), sizes(fixed, len(members))):
                idx = [members[j] for j in chunk]
                _run_batch(run, runs, idx, fixed, batched, names, observables, window, found)
                bar.update(len(idx))
    bar.close()
    result = SweepResult(
        rows=found.ordered_rows(),
        params=names,
        outputs=tuple(found.outputs),
        series=tuple(found.series),
        curve_rows=found.ordered_curves(),
        batched=batched,
    )
    _check_failures(result, found.first_error)
    return result


def _batched_names(batch: object, names: tuple[str, ...], points: Sequence[Mapping]) -> tuple[str, ...]:
    """The parameters that run on the replica axis: every numeric one for ``batch=True``, the named ones."""
    if isinstance(batch, bool):
        return tuple(n for n in names if all(_is_number(p.get(n)) for p in points)) if batch else ()
    if not isinstance(batch, Sequence) or isinstance(batch, (str, bytes)):
        raise TypeError(f"batch must be a bool or a sequence of parameter names, got {type(batch).__name__}")
    batched = tuple(batch)
    unknown = [n for n in batched if n not in names]
    if unknown:
        raise ValueError(f"batch names parameters {unknown} that are not in the grid {list(names)}")
    for n in batched:
        if not all(_is_number(p.get(n)) for p in points):
            raise TypeError(f"batched parameter {n!r} must take numbers only (a float per replica)")
    return batched


class _Collected:
    """What a sweep has gathered: a slot of rows and of curve rows per (point, seed) run, in grid × seed
    order, the output and series names in order of first appearance, and the first error."""

    def __init__(self, n: int) -> None:
        self.rows: list[dict | None] = [None] * n
        self.curves: list[list[dict]] = [[] for _ in range(n)]
        self.outputs: dict[str, None] = {}
        self.series: dict[str, None] = {}
        self.first_error: Exception | None = None  # the cause of the RuntimeError when every run fails

    def failed(self, i: int, row: dict, exc: Exception) -> None:
        self.first_error = self.first_error or exc
        self.rows[i] = {**row, "error": f"{type(exc).__name__}: {exc}"}

    def ordered_rows(self) -> list[dict]:
        return [r for r in self.rows if r is not None]

    def ordered_curves(self) -> list[dict]:
        return [r for rs in self.curves for r in rs]


def _run_each(run: Callable, runs: Sequence[tuple[dict, int]], window, found: _Collected, bar) -> None:
    """One call ``run(**point, seed=seed)`` per run; a run that raises is recorded and the sweep goes on."""
    for i, (point, seed) in enumerate(runs):
        row = {**point, "seed": seed}
        rows: list[dict] = []
        curve_rows: list[dict] = []
        try:
            _store(row, run(**point, seed=seed), rows, curve_rows, found.outputs, found.series, window)
            found.rows[i], found.curves[i] = rows[0], curve_rows
        except Exception as exc:  # noqa: BLE001 — a failed point is recorded and the sweep goes on
            found.failed(i, row, exc)
        bar.update(1)


def _call_size(
    max_batch: int | None, memory_budget: float | None, replica_bytes
) -> Callable[[dict, int], int]:
    """The replicas of one call, as a function of the call's fixed parameters and the group's size:
    ``max_batch``, and ``memory_budget // replica_bytes`` (at least 1)."""

    def size(fixed: dict, n: int) -> int:
        out = n if max_batch is None else max_batch
        if memory_budget is not None:
            per = replica_bytes(fixed) if callable(replica_bytes) else replica_bytes
            out = min(out, max(1, int(memory_budget // max(int(per), 1))))
        return out

    return size


def _batch_groups(
    runs: Sequence[tuple[dict, int]], names: Sequence[str], batched: Sequence[str]
) -> list[tuple[list[int], dict]]:
    """The runs whose unbatched parameters agree (indices into ``runs``), with those parameters' values."""
    groups: dict[tuple, list[int]] = {}
    for i, (point, _) in enumerate(runs):
        groups.setdefault(tuple((n, repr(point.get(n))) for n in names if n not in batched), []).append(i)
    out = []
    for members in groups.values():
        point0 = runs[members[0]][0]
        out.append((members, {n: point0[n] for n in names if n not in batched and n in point0}))
    return out


def _run_batch(
    run: Callable,
    runs: Sequence[tuple[dict, int]],
    idx: Sequence[int],
    fixed: dict,
    batched: Sequence[str],
    names: Sequence[str],
    observables,
    window,
    found: _Collected,
) -> None:
    """One batched call over the runs ``idx``: ``run(**fixed, **{name: (B,)}, seed=[…])``; a call that raises
    fails every replica of it, and the sweep goes on."""
    B = len(idx)
    args = {n: torch.tensor([float(runs[i][0][n]) for i in idx], dtype=torch.float64) for n in batched}
    try:
        out = run(**fixed, **args, seed=[runs[i][1] for i in idx])
        _, scalars, curves, times = _collect("run(...)", out, B, observables, window)
        for key in (*scalars, *curves):
            if key in names or key in ("seed", "error"):
                raise ValueError(f"run returned an output named {key!r}, which is a parameter or column name")
        if not scalars and not curves:
            raise ValueError("run returned no observables (give observables= for states)")
        ts = times.tolist() if curves else []
        lists = {k: v.tolist() for k, v in scalars.items()}  # {name: (B,)}
        clists = {k: v.tolist() for k, v in curves.items()}  # {name: (B, T)}
        for b, i in enumerate(idx):
            point, seed = runs[i]
            row = {**point, "seed": seed}
            found.rows[i] = {**row, **{k: v[b] for k, v in lists.items()}, "error": None}
            found.curves[i] = [
                {**row, "t": t, **{k: v[b][j] for k, v in clists.items()}} for j, t in enumerate(ts)
            ]
        found.outputs.update(dict.fromkeys(scalars))
        found.series.update(dict.fromkeys(curves))
    except Exception as exc:  # noqa: BLE001 — a failed call is recorded and the sweep goes on
        for i in idx:
            point, seed = runs[i]
            found.failed(i, {**point, "seed": seed}, exc)


def _check_failures(result: SweepResult, first_error: Exception | None) -> None:
    """A warning that counts the failed runs; a ``RuntimeError`` (from the first error) when every run failed."""
    failed = result.failures
    if len(failed) == len(result.rows):
        raise RuntimeError(f"every run of the sweep failed; the first: {failed[0]['error']}") from first_error
    if failed:
        warnings.warn(
            f"{len(failed)} of {len(result.rows)} runs failed (see SweepResult.failures); the first: "
            f"{failed[0]['error']}",
            RuntimeWarning,
            stacklevel=3,
        )
