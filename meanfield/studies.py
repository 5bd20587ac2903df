r"""Studies over many runs: convergence in the number of particles M, and sweeps over a parameter grid.

* :func:`convergence_in_m` measures ``D_M = E D(μ_M, μ)`` for several M (replicas on the batch axis), with
  standard errors, a *reference floor* and the log-log slope of ``D_M`` in M with a bootstrap confidence
  interval: ``D_M ≈ C M^{slope}``.
* :func:`sweep` runs a function over a parameter grid × seeds and collects its scalar outputs into a table
  (a list of dict rows) with CSV/JSON export and a plot with confidence bands; a point that raises is
  recorded with its error and the sweep goes on.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.ticker
import numpy as np
import torch
from tqdm.auto import tqdm

from ._checks import check_finite, check_finite_tensor, check_int
from .metrics.wasserstein import Law1d, resolve_method, wasserstein, wasserstein_to_law
from .plotting import figure, save
from .stats import t_interval

__all__ = ["METRICS", "StudyResult", "SweepResult", "convergence_in_m", "sweep"]

METRICS: dict[str, tuple[int, Callable[[torch.Tensor], torch.Tensor]]] = {
    "w2_squared": (2, lambda cost: cost),
    "w2": (2, lambda cost: cost.clamp_min(0).sqrt()),
    "w1": (1, lambda cost: cost),
}
"""Metric name → (order p, map from the cost ``W_p^p`` to the reported distance)."""

Sampler = Callable[[int, int], torch.Tensor]
Metric = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


# --------------------------------------------------------------------------------------------------------
# Convergence in M


@dataclass(frozen=True)
class StudyResult:
    r"""Distances ``D(μ_M, μ)`` per number of particles M, the reference floor and the fitted rate.

    Attributes:
        Ms: the numbers of particles, increasing.
        values: the distance of every replicate, shape ``(len(Ms), reps)``.
        floor: the distance between two independent reference clouds of the size used at each M,
            shape ``(len(Ms), n)`` (``n = floor_reps`` for a sampled reference, 1 for a fixed cloud, 0 for an
            exact law, whose floor is 0). A distance near its floor measures the reference, not μ_M.
        metric: what was measured (``"w2_squared"``, ``"w2"``, ``"w1"`` or the callable's name).
        method: how (``"law"``, ``"1d"``, ``"exact"``, ``"sliced"``, ``"sinkhorn"``, ``"custom"``), the
            same for every M.
        slope: least-squares slope of ``log mean_M`` on ``log M``.
        intercept: its intercept: ``mean_M ≈ exp(intercept) · M^slope``.
        slope_ci: bootstrap percentile interval of the slope (replicates resampled within each M).
        level: the confidence level of ``slope_ci``.
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

    @property
    def mean(self) -> torch.Tensor:
        """Mean distance per M, shape ``(len(Ms),)``."""
        return self.values.mean(1)

    @property
    def se(self) -> torch.Tensor:
        """Standard error of :attr:`mean`, ``std / sqrt(reps)``, shape ``(len(Ms),)``."""
        return self.values.std(1) / math.sqrt(self.values.shape[1])

    @property
    def floor_mean(self) -> torch.Tensor:
        """Mean reference floor per M, shape ``(len(Ms),)`` (zeros for an exact law)."""
        if self.floor.shape[1] == 0:
            return torch.zeros(len(self.Ms), dtype=self.values.dtype)
        return self.floor.mean(1)

    def fit(self, M: float | torch.Tensor) -> torch.Tensor:
        """The fitted power law ``exp(intercept) · M^slope``."""
        return math.exp(self.intercept) * torch.as_tensor(M, dtype=self.values.dtype) ** self.slope

    def rows(self) -> list[dict]:
        """One dict per M: ``M``, ``mean``, ``se``, ``floor`` (a table for :class:`SweepResult`-style export)."""
        return [
            {"M": M, "mean": float(m), "se": float(s), "floor": float(f)}
            for M, m, s, f in zip(self.Ms, self.mean, self.se, self.floor_mean, strict=True)
        ]

    def plot(self, ax=None, path: str | os.PathLike | None = None):
        """Log-log plot of the mean distance (±1.96 SE), the fitted rate and the reference floor.

        Returns the figure; with ``path`` it is also written there (and closed).
        """
        fig, ax = figure() if ax is None else (ax.figure, ax)
        Ms = np.asarray(self.Ms, dtype=float)
        ax.errorbar(Ms, self.mean.numpy(), yerr=1.96 * self.se.numpy(), fmt="o", capsize=3, label=self.metric)
        lo, hi = self.slope_ci
        ax.plot(
            Ms,
            self.fit(torch.as_tensor(Ms)).numpy(),
            "-",
            label=f"slope {self.slope:.3f} [{lo:.3f}, {hi:.3f}]",
        )
        if bool((self.floor_mean > 0).any()):
            ax.plot(Ms, self.floor_mean.numpy(), "--", color="grey", label="reference floor")
        ax.set(xscale="log", yscale="log", xlabel="M (particles)", ylabel=f"{self.metric} ({self.method})")
        ax.set_xticks(Ms, labels=[str(M) for M in self.Ms])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.legend()
        if path is not None:
            save(fig, path)
        return fig


def _fit_loglog(Ms: torch.Tensor, means: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Least-squares ``log mean = intercept + slope · log M`` along the last axis of ``means (..., K)``."""
    u = Ms.log() - Ms.log().mean()  # (K,)
    logm = means.log()  # (..., K)
    slope = (logm * u).sum(-1) / (u * u).sum()  # (...)
    intercept = logm.mean(-1) - slope * Ms.log().mean()  # (...)
    return slope, intercept


def _distance(metric: str | Metric, method: str, x: torch.Tensor, ref) -> torch.Tensor:
    """``D(x_b, ref_b)`` per replica, shape ``(B,)``; ``ref`` is a :class:`Law1d` or a cloud."""
    if callable(metric):
        return torch.as_tensor(metric(x, ref)).reshape(x.shape[0])
    p, finish = METRICS[metric]
    if isinstance(ref, Law1d):
        return finish(wasserstein_to_law(x, ref, p=p).cost)
    return finish(wasserstein(x, ref, p=p, method=method).cost)


def convergence_in_m(
    sample: Sampler,
    Ms: Sequence[int],
    *,
    reps: int,
    reference: torch.Tensor | Law1d | Callable[[int, torch.Generator], torch.Tensor],
    generator: torch.Generator,
    metric: str | Metric = "w2_squared",
    method: str = "auto",
    reference_size: int | None = None,
    floor_reps: int | None = None,
    n_boot: int = 2000,
    level: float = 0.95,
    progress: bool = True,
) -> StudyResult:
    r"""How fast the law of M particles approaches a reference: ``D_M = E D(μ_M, μ) ≈ C M^{slope}``.

    For each M, ``sample(M, reps)`` gives ``reps`` independent clouds, each compared with the reference:

    * an exact law (:class:`~meanfield.metrics.wasserstein.Law1d`, 1-D): ``D(μ_M, μ)`` in closed form,
      floor 0;
    * a fixed cloud of shape ``(N, d)`` (e.g. a large-M run): ``D(μ_M, μ_N)``; floor ``D`` between two
      random halves of it;
    * an exact sampler ``reference(n, generator) -> (n, d)`` of i.i.d. draws: ``D(μ_M, ν_N)`` with a fresh
      ``ν_N`` per replicate, ``N = reference_size`` (default M, the same size); floor ``E D(ν_N, ν'_N)``
      over ``floor_reps`` pairs, which at ``N = M`` is the i.i.d. baseline of the particle system (a two-sample
      study: ``D(μ_M, ν_M)`` against ``D(ν_M, ν'_M)``).

    A ``RuntimeWarning`` says when a mean distance is below 3× the floor of a reference meant to stand for
    the law (a fixed cloud, or a sampler with ``reference_size``): there the rate measures the reference.

    The slope is the least-squares slope of ``log mean_M`` on ``log M``; its interval is the bootstrap
    percentile interval over ``n_boot`` resamplings of the replicates within each M. ``method="auto"`` is
    resolved once, at the largest sizes, so that every M is measured by the same distance.

    Args:
        sample: ``sample(M, reps) -> (reps, M, d)``, e.g. ``simulate(system, x0, ...).final`` with ``B = reps``;
            it draws from its own generator (seeded apart from ``generator``: equal seeds give equal clouds).
        Ms: numbers of particles, at least 2 distinct, increasing.
        reps: replicates per M (≥ 2).
        reference: an exact law, a fixed cloud ``(N, d)`` or an exact sampler (see above).
        generator: drives the reference draws, the split of a fixed cloud and the bootstrap.
        metric: ``"w2_squared"`` (default), ``"w2"``, ``"w1"`` or a callable ``(x (B, M, d), y (B, N, d)) -> (B,)``
            (not with an exact law).
        method: Wasserstein method (``"auto"``, ``"1d"``, ``"exact"``, ``"sliced"``, ``"sinkhorn"``).
        reference_size: size N of each sampled reference cloud (sampler only); default M.
        floor_reps: pairs of reference clouds for the floor (sampler only); default ``reps``.
        n_boot: bootstrap resamplings.
        level: confidence level of the slope interval.
        progress: show a progress bar over M.

    Returns:
        :class:`StudyResult`.
    """
    if not callable(sample):
        raise TypeError(f"sample must be a callable (M, reps) -> (reps, M, d), got {type(sample).__name__}")
    if isinstance(Ms, (str, bytes)) or not isinstance(Ms, Iterable):
        raise TypeError(f"Ms must be a sequence of numbers of particles, got {type(Ms).__name__}")
    Ms = [check_int("Ms[i]", int(M) if isinstance(M, (np.integer, torch.Tensor)) else M) for M in Ms]
    if len(set(Ms)) < 2 or Ms != sorted(Ms) or len(set(Ms)) != len(Ms):
        raise ValueError(f"Ms must be at least 2 distinct increasing integers, got {Ms}")
    check_int("reps", reps, minimum=2)
    check_int("n_boot", n_boot)
    if not 0 < check_finite("level", level) < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if isinstance(metric, str) and metric not in METRICS:
        raise ValueError(f"metric must be one of {list(METRICS)} or a callable, got {metric!r}")
    if not isinstance(metric, str) and not callable(metric):
        raise TypeError(
            f"metric must be a name in {list(METRICS)} or a callable, got {type(metric).__name__}"
        )
    if reference_size is not None:
        check_int("reference_size", reference_size)
    if floor_reps is not None:
        check_int("floor_reps", floor_reps)

    if isinstance(reference, Law1d):
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
    for name, given in (("reference_size", reference_size), ("floor_reps", floor_reps)):
        if given is not None and kind != "sampler":
            raise ValueError(f"{name} applies to a sampler reference only, got a {kind} reference")
    n_floor = floor_reps or reps

    def ref_size(M: int) -> int:
        if kind == "cloud":
            return reference.shape[0]
        return (reference_size or M) if kind == "sampler" else 0

    def draw(n: int, count: int) -> torch.Tensor:
        ref = reference(n * count, generator)  # (count·n, d)
        check_finite_tensor("reference(n, generator)", ref)
        if ref.dim() != 2 or ref.shape[0] != n * count:
            raise ValueError(
                f"reference(n, generator) must return shape (n, d) = ({n * count}, d), got {tuple(ref.shape)}"
            )
        return ref.reshape(count, n, ref.shape[1])  # (count, n, d)

    values, floors, method_used, d = [], [], None, None
    for M in tqdm(Ms, desc="convergence in M", disable=not progress):
        x = sample(M, reps)  # (reps, M, d)
        check_finite_tensor("sample(M, reps)", x)
        if x.dim() != 3 or tuple(x.shape[:2]) != (reps, M) or (d is not None and x.shape[2] != d):
            raise ValueError(
                f"sample(M, reps) must return shape (reps, M, d) = ({reps}, {M}, {d or 'd'}), "
                f"got {tuple(x.shape)}"
            )
        d = x.shape[2]
        if method_used is None:  # one method for every M: the one "auto" picks at the largest sizes
            if kind == "law":
                method_used = "law"
            elif callable(metric):
                method_used = "custom"
            else:
                method_used = resolve_method(method, Ms[-1], ref_size(Ms[-1]), d)
        if kind == "law":
            values.append(_distance(metric, method_used, x, reference))
            floors.append(torch.zeros(0, dtype=x.dtype))
        elif kind == "cloud":
            if reference.shape[1] != d:
                raise ValueError(f"reference has d={reference.shape[1]}, sample(M, reps) has d={d}")
            values.append(_distance(metric, method_used, x, reference.to(x.dtype)))
        else:
            ref = draw(ref_size(M), reps + 2 * n_floor).to(x.dtype)  # (reps + 2·n_floor, N, d)
            if ref.shape[2] != d:
                raise ValueError(f"reference(n, generator) has d={ref.shape[2]}, sample(M, reps) has d={d}")
            values.append(_distance(metric, method_used, x, ref[:reps]))
            floors.append(_distance(metric, method_used, ref[reps : reps + n_floor], ref[reps + n_floor :]))
    if kind == "cloud":  # one floor: two random halves of the cloud
        perm = torch.randperm(reference.shape[0], generator=generator)  # (N,)
        half = reference.shape[0] // 2
        halves = (
            reference[perm[:half]].unsqueeze(0),
            reference[perm[half : 2 * half]].unsqueeze(0),
        )  # (1, N/2, d)
        floors = [_distance(metric, method_used, *halves)] * len(Ms)
    values = torch.stack(values).to(torch.float64)  # (K, reps)
    floor = torch.stack(floors).to(torch.float64)  # (K, n)

    Ms_t = torch.tensor(Ms, dtype=torch.float64)  # (K,)
    means = values.mean(1)  # (K,)
    if bool((means <= 0).any()):
        warnings.warn(
            f"a mean distance is ≤ 0 ({means.tolist()}): no log-log slope", RuntimeWarning, stacklevel=2
        )
        slope = intercept = lo = hi = math.nan
    else:
        slope, intercept = (float(t) for t in _fit_loglog(Ms_t, means))
        boot = torch.stack(  # resample the replicates within each M
            [row[torch.randint(reps, (n_boot, reps), generator=generator)].mean(1) for row in values], dim=1
        )  # (n_boot, K)
        if bool((boot <= 0).any()):  # a resample with a mean ≤ 0 has no logarithm: no interval
            warnings.warn(
                "a bootstrap resample has a mean distance ≤ 0 (a metric that can be negative, or too few "
                "replicates): the slope's interval is NaN",
                RuntimeWarning,
                stacklevel=2,
            )
            lo = hi = math.nan
        else:
            boot_slope, _ = _fit_loglog(Ms_t, boot)  # (n_boot,)
            q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
            lo, hi = (float(t) for t in torch.quantile(boot_slope, q))
        floor_mean = floor.mean(1) if floor.shape[1] else torch.zeros(len(Ms), dtype=torch.float64)
        reference_approximates_law = kind == "cloud" or reference_size is not None  # not a two-sample study
        if reference_approximates_law and bool((means < 3 * floor_mean).any()):
            warnings.warn(
                f"the mean distance is below 3× the reference floor at M = "
                f"{[M for M, m, f in zip(Ms, means, floor_mean, strict=True) if m < 3 * f]}: "
                f"the slope there measures the reference as much as μ_M (use a larger reference)",
                RuntimeWarning,
                stacklevel=2,
            )
    name = metric if isinstance(metric, str) else getattr(metric, "__name__", "custom")
    return StudyResult(
        Ms=tuple(Ms),
        values=values,
        floor=floor,
        metric=name,
        method=method_used,
        slope=slope,
        intercept=intercept,
        slope_ci=(lo, hi),
        level=level,
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
        f"{name} must be a scalar (int, float, bool, str, one-element tensor), got {type(value).__name__}"
    )


@dataclass(frozen=True)
class SweepResult:
    """A table of runs: one dict row per (grid point, seed), with the point, ``seed``, the outputs and ``error``.

    Attributes:
        rows: the table; ``error`` is ``None`` or ``"ExceptionType: message"`` (then the outputs are absent).
        params: the grid's parameter names.
        outputs: the output names, in order of first appearance.
    """

    rows: list[dict]
    params: tuple[str, ...]
    outputs: tuple[str, ...] = field(default=())

    @property
    def columns(self) -> tuple[str, ...]:
        """``params + ("seed",) + outputs + ("error",)``."""
        return (*self.params, "seed", *self.outputs, "error")

    @property
    def failures(self) -> list[dict]:
        """The rows whose run raised."""
        return [row for row in self.rows if row["error"] is not None]

    def column(self, name: str) -> list:
        """The values of one column (``None`` where a row lacks it)."""
        if name not in self.columns:
            raise KeyError(f"no column {name!r}; the columns are {list(self.columns)}")
        return [row.get(name) for row in self.rows]

    def to_csv(self, path: str | os.PathLike | None = None) -> str:
        """The table as CSV (missing cells empty); written to ``path`` when given. Returns the text."""
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=self.columns, restval="", lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in self.rows)
        text = buffer.getvalue()
        if path is not None:
            Path(path).write_text(text)
        return text

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """The table as JSON ``{"params", "outputs", "rows"}`` (non-finite floats become ``null``)."""

        def clean(v):
            return None if isinstance(v, float) and not math.isfinite(v) else v

        data = {
            "params": list(self.params),
            "outputs": list(self.outputs),
            "rows": [{k: clean(v) for k, v in row.items()} for row in self.rows],
        }
        text = json.dumps(data, indent=1, allow_nan=False)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_json(cls, source: str | os.PathLike) -> SweepResult:
        """Read a table written by :meth:`to_json` (a path or the JSON text)."""
        text = str(source)
        if not text.lstrip().startswith("{"):
            text = Path(source).read_text()
        data = json.loads(text)
        return cls(rows=data["rows"], params=tuple(data["params"]), outputs=tuple(data["outputs"]))

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
        Grid parameters other than ``x`` and ``hue`` must be fixed by ``where`` (or take one value).

        Returns:
            One dict per group: ``hue`` (if given), ``x``, ``mean``, ``se``, ``lo``, ``hi``, ``n``.
        """
        for name in (x, y, *(() if hue is None else (hue,))):
            if name not in self.columns:
                raise KeyError(f"no column {name!r}; the columns are {list(self.columns)}")
        where = dict(where or {})
        rows = [r for r in self.rows if r["error"] is None and all(r.get(k) == v for k, v in where.items())]
        for p in self.params:
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
        return sorted(out, key=lambda r: (repr(r.get("hue")), r["x"]))

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
        ax=None,
        path: str | os.PathLike | None = None,
    ):
        """Mean of ``y`` against ``x`` over seeds, one line per ``hue``, with a ``level`` confidence band.

        Returns the figure; with ``path`` it is also written there (and closed).
        """
        table = self.summary(x, y, hue, where=where, level=level)
        fig, ax = figure() if ax is None else (ax.figure, ax)
        hues = list(dict.fromkeys(r.get("hue") for r in table))
        for h in hues:
            part = [r for r in table if r.get("hue") == h]
            xs = [r["x"] for r in part]
            ax.plot(xs, [r["mean"] for r in part], "o-", ms=3, label=None if hue is None else f"{hue}={h}")
            ax.fill_between(xs, [r["lo"] for r in part], [r["hi"] for r in part], alpha=0.25)
        ax.set(xlabel=x, ylabel=y, xscale="log" if logx else "linear", yscale="log" if logy else "linear")
        if hue is not None:
            ax.legend()
        if path is not None:
            save(fig, path)
        return fig


def _grid_points(grid: Mapping[str, Sequence] | Sequence[Mapping]) -> tuple[list[dict], tuple[str, ...]]:
    if isinstance(grid, Mapping):
        for name, values in grid.items():
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                raise TypeError(f"grid[{name!r}] must be a sequence of values, got {type(values).__name__}")
        names = tuple(grid)
        points = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*grid.values())]
    elif isinstance(grid, Sequence) and all(isinstance(p, Mapping) for p in grid):
        points = [dict(p) for p in grid]
        names = tuple(dict.fromkeys(k for p in points for k in p))
    else:
        raise TypeError(
            f"grid must be a mapping name -> values (a product grid) or a list of mappings (points), "
            f"got {type(grid).__name__}"
        )
    if not points:
        raise ValueError("grid must contain at least one point, got an empty grid")
    for reserved in ("seed", "error"):
        if reserved in names:
            raise ValueError(f"grid must not define {reserved!r} (a column of the table), got {list(names)}")
    return points, names


def sweep(
    run: Callable[..., Mapping[str, object] | object],
    grid: Mapping[str, Sequence] | Sequence[Mapping],
    *,
    seeds: int | Sequence[int],
    progress: bool = True,
) -> SweepResult:
    """Run ``run(**point, seed=seed)`` for every grid point and seed and collect its scalar outputs.

    Args:
        run: returns a mapping name → scalar (or one scalar, stored as ``"value"``); it gets the point's
            parameters as keyword arguments and ``seed`` (build its generator from it:
            ``torch.Generator().manual_seed(seed)``).
        grid: ``{"beta": [...], "M": [...]}`` (the Cartesian product, in that order) or a list of points
            ``[{"beta": 0.1, "M": 64}, ...]``.
        seeds: a number of seeds (``0, …, seeds − 1``) or the seeds themselves.
        progress: show a progress bar over grid × seeds.

    Returns:
        :class:`SweepResult`. A point whose run raises (or returns a non-scalar) is recorded with
        ``error = "Type: message"`` and the sweep goes on; a warning counts the failures, and if every run
        fails a ``RuntimeError`` carries the first error.
    """
    if not callable(run):
        raise TypeError(f"run must be callable, got {type(run).__name__}")
    points, names = _grid_points(grid)
    if isinstance(seeds, bool) or not isinstance(seeds, (int, Sequence)):
        raise TypeError(
            f"seeds must be an int (a number of seeds) or a sequence of ints, got {type(seeds).__name__}"
        )
    seeds = list(range(check_int("seeds", seeds))) if isinstance(seeds, int) else list(seeds)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ValueError(f"seeds must be a non-empty sequence of ints, got {seeds}")

    rows: list[dict] = []
    outputs: dict[str, None] = {}
    for point, seed in tqdm(
        itertools.product(points, seeds), total=len(points) * len(seeds), desc="sweep", disable=not progress
    ):
        row = {**point, "seed": seed}
        try:
            result = run(**point, seed=seed)
            result = dict(result) if isinstance(result, Mapping) else {"value": result}
            cells = {}
            for key, value in result.items():
                if key in row or key == "error":
                    raise ValueError(
                        f"run returned an output named {key!r}, which is a parameter or column name"
                    )
                cells[key] = _scalar(f"output {key!r}", value)
        except Exception as exc:  # noqa: BLE001 — a failed point is recorded and the sweep goes on
            rows.append({**row, "error": f"{type(exc).__name__}: {exc}"})
            continue
        outputs.update(dict.fromkeys(cells))
        rows.append({**row, **cells, "error": None})
    result = SweepResult(rows=rows, params=names, outputs=tuple(outputs))
    failed = result.failures
    if len(failed) == len(rows):
        raise RuntimeError(f"every run of the sweep failed; the first: {failed[0]['error']}")
    if failed:
        warnings.warn(
            f"{len(failed)} of {len(rows)} runs failed (see SweepResult.failures); the first: {failed[0]['error']}",
            RuntimeWarning,
            stacklevel=2,
        )
    return result
