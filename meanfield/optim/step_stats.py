"""What a Langevin step did: [`LangevinStats`][meanfield.optim.step_stats.LangevinStats], computed lazily from the step's records.

A step leaves one [`Record`][meanfield.optim.step_stats.Record] per bucket (and Adam step count); reading
[`last_stats`][meanfield.optim.langevin.Langevin.last_stats] reduces them, in chunks, to

    η_eff (mean, min, max),   noise RMS = sqrt(Σ (sqrt(2β_t η_eff) ξ)² / n),   drift RMS = sqrt(Σ (η_eff g)² / n),

over the coordinates with noise; buckets of a sharded layer ([`meanfield.nn.sharded`][meanfield.nn.sharded]) are summed over
the ranks (a collective).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from meanfield.optim.buckets import Bucket

__all__ = ["LangevinStats", "Record", "aggregate", "LazyStats"]

STATS_CHUNK = 1 << 18
"""Elements per chunk of the reductions behind [`Langevin.last_stats`][meanfield.optim.langevin.Langevin.last_stats] (no full-size temporaries)."""


@dataclass(frozen=True)
class LangevinStats:
    r"""What the last [`Langevin.step`][meanfield.optim.langevin.Langevin.step] did to the parameters of the groups with noise (or of one group).

    [`Langevin.last_stats`][meanfield.optim.langevin.Langevin.last_stats] covers the ``n`` coordinates that received noise (groups with ``noise=True``
    and a gradient); [`Langevin.last_group_stats`][meanfield.optim.langevin.Langevin.last_group_stats] has one per param group (a group without noise: its
    drift, with ``beta = 0`` and ``noise_rms = 0``). A dataclass of floats and ints
    (``dataclasses.asdict`` gives a loggable dict).

    Attributes:
        step: the number of steps taken (the step described is the ``step``-th).
        beta: the temperature $\beta_t$ the schedule gave, in the group's ``temperature_convention`` (the
            largest one if the noisy groups differ).
        eta_eff_mean: mean of the per-coordinate step $\eta_{\mathrm{eff}}$ (``lr`` for an SGD drift,
            $\operatorname{lr}/(M\cdot\sqrt{\hat{v}} + \varepsilon)$ for an Adam drift, ``M`` the group's particle count when scaled).
        eta_eff_min: its minimum.
        eta_eff_max: its maximum.
        noise_rms: root mean square of the noise increment $\sqrt{2\beta_t \eta_{\mathrm{eff}}} \xi$ (or $\sqrt{2\beta_t \operatorname{lr}} \xi$).
        drift_rms: root mean square of the drift increment $\eta_{\mathrm{eff}} \odot g$.
        drift_to_noise: ``drift_rms / noise_rms`` (``inf`` without noise): below 1 the step is noise-driven.
        n: the number of coordinates.
    """

    step: int
    beta: float
    eta_eff_mean: float
    eta_eff_min: float
    eta_eff_max: float
    noise_rms: float
    drift_rms: float
    drift_to_noise: float
    n: int


@dataclass
class Record:
    """Lazy statistics of one bucket for [`Langevin.last_stats`][meanfield.optim.langevin.Langevin.last_stats] (valid until the next step)."""

    bucket: Bucket
    index: list[int]
    drift: str
    lr: float
    beta: float  # the β in the noise sqrt(2β η_eff) (×M in the "loss" convention)
    scale: float  # M (or 1)
    noise: torch.Tensor | None  # (n,) the standard normal draw, None when β_t = 0
    preconditioned: bool
    eps: float = 0.0
    bias1: float = 1.0
    bias2: float = 1.0
    rsqrt_ready: bool = False
    beta_given: float = 0.0  # the schedule's β_t (the group's convention), reported in the stats
    drift_terms: list[torch.Tensor] | None = None  # SGD: the tensors d_k of the drift factor·d_k
    drift_factor: float = 0.0
    drift_norms: list[torch.Tensor] | list[float] | None = None  # ‖d_k‖ when the step computed them (its check)
    drift_versions: tuple[int, ...] = ()  # the d_k's versions at the step: an in-place change since voids them

    def keep_drift(
        self, terms: list[torch.Tensor], factor: float, norms: list[torch.Tensor] | list[float] | None
    ) -> None:
        """Keep what ``sums`` needs for the SGD drift ``factor·d_k`` (its size is reduced only when read)."""
        self.drift_terms, self.drift_factor, self.drift_norms = terms, factor, norms
        self.drift_versions = tuple(t._version for t in terms)

    def drift_sq(self) -> float:
        """``Σ_k ‖factor·d_k‖²`` of an SGD step: NaN when a ``d_k`` (a gradient) was changed in place since
        the step (``zero_grad(set_to_none=False)`` before reading the stats)."""
        norms = self.drift_norms
        if norms is None:
            if any(t._version != v for t, v in zip(self.drift_terms, self.drift_versions)):
                return math.nan
            norms = torch._foreach_norm(self.drift_terms)
        # (k,) in float64 (the gradient check gives a vector's norm as a number)
        norms = torch.stack([torch.as_tensor(n, dtype=torch.float64) for n in norms])
        return float((norms * self.drift_factor).square().sum())  # inf, not an error

    def sums(self) -> tuple[int, float, float, float, float, float]:
        """``(n, Σ η_eff, min η_eff, max η_eff, Σ noise², Σ drift²)`` over the recorded coordinates."""
        b, index = self.bucket, self.index
        n = sum(b.params[i].numel() for i in index)
        if n == 0:
            return 0, 0.0, math.inf, -math.inf, 0.0, 0.0
        xi = None if self.noise is None else b.gather(self.noise, index)  # (n,)
        if self.drift == "sgd":
            noise_sq = 0.0 if xi is None else 2 * self.beta * self.lr * float(torch.dot(xi, xi))
            return n, self.lr * n, self.lr, self.lr, noise_sq, self.drift_sq()
        e = self.eps * math.sqrt(self.bias2) / self.scale
        t_all = None  # (n,) 1/sqrt(sqrt(v) + e), when the step computed it
        if self.rsqrt_ready:
            t_all = b.gather(b.rsqrt, index, strided=True)
        v_all = b.gather(b.exp_avg_sq, index, strided=True)  # (n,)
        m_all = b.gather(b.exp_avg, index, strided=True)  # (n,)
        sum_t2, t_min, t_max, sum_mt2, sum_xt, sum_x = 0.0, math.inf, -math.inf, 0.0, 0.0, 0.0
        scratch = torch.empty(min(n, STATS_CHUNK), dtype=v_all.dtype, device=v_all.device)  # (chunk,)
        work = torch.empty_like(scratch)  # (chunk,)
        for a in range(0, n, STATS_CHUNK):  # chunks: no full-size temporaries
            z = min(n, a + STATS_CHUNK)
            if t_all is None:
                t = torch.sqrt(v_all[a:z], out=work[: z - a]).add_(e).rsqrt_()  # (chunk,)
            else:
                t = t_all[a:z]  # (chunk,)
            low, high = torch.aminmax(t)
            t_min, t_max = min(t_min, float(low)), max(t_max, float(high))
            sum_t2 += float(torch.dot(t, t))
            s = torch.mul(t, t, out=scratch[: z - a]).mul_(m_all[a:z])  # (chunk,) m·t²
            sum_mt2 += float(torch.dot(s, s))
            if xi is not None and self.preconditioned:
                s = torch.mul(t, xi[a:z], out=scratch[: z - a])  # (chunk,) ξ·t
                sum_xt += float(torch.dot(s, s))
            elif xi is not None:
                sum_x += float(torch.dot(xi[a:z], xi[a:z]))
        c = self.lr * math.sqrt(self.bias2) / self.scale  # η_eff = c·t²
        # drift η_eff·m̂ = (lr/bias1)·√bias2·m·t²; noise sqrt(2β c)·t·ξ or sqrt(2β lr)·ξ
        drift_sq = (self.lr * math.sqrt(self.bias2) / self.bias1) ** 2 * sum_mt2
        noise_sq = 2 * self.beta * (c * sum_xt if self.preconditioned else self.lr * sum_x)
        return n, c * sum_t2, c * t_min**2, c * t_max**2, noise_sq, drift_sq


def _sums(records: Sequence[Record]) -> list[tuple[int, float, float, float, float, float]]:
    """Each record's [`Record.sums`][meanfield.optim.step_stats.Record.sums]; those of sharded buckets summed over the ranks (a collective: with
    sharded particle layers every rank reads the stats, as ``meanfield run`` does)."""
    sums = [record.sums() for record in records]
    sharded = [i for i, record in enumerate(records) if record.bucket.rows is not None]
    if not sharded or not (dist.is_available() and dist.is_initialized()):
        return sums
    totals = torch.tensor([[sums[i][k] for k in (0, 1, 4, 5)] for i in sharded], dtype=torch.float64)
    extremes = torch.tensor([[-sums[i][2], sums[i][3]] for i in sharded], dtype=torch.float64)
    device = records[sharded[0]].bucket.params[0].device
    if dist.get_backend() == "nccl":
        totals, extremes = totals.to(device), extremes.to(device)
    dist.all_reduce(totals)
    dist.all_reduce(extremes, op=dist.ReduceOp.MAX)
    for i, t, e in zip(sharded, totals.tolist(), extremes.tolist()):
        sums[i] = (int(t[0]), t[1], -e[0], e[1], t[2], t[3])
    return sums


def aggregate(records: Sequence[Record], step: int) -> LangevinStats:
    """The [`LangevinStats`][meanfield.optim.step_stats.LangevinStats] of ``records`` (the coordinates of all of them together)."""
    n, eta_sum, eta_min, eta_max, noise_sq, drift_sq = 0, 0.0, math.inf, -math.inf, 0.0, 0.0
    for r in _sums(records):
        n += r[0]
        eta_sum += r[1]
        eta_min = min(eta_min, r[2])
        eta_max = max(eta_max, r[3])
        noise_sq += r[4]
        drift_sq += r[5]
    nan = math.nan
    noise_rms = math.sqrt(noise_sq / n) if n else nan
    drift_rms = math.sqrt(drift_sq / n) if n else nan
    return LangevinStats(
        step=step,
        beta=max((r.beta_given for r in records), default=nan),
        eta_eff_mean=eta_sum / n if n else nan,
        eta_eff_min=eta_min if n else nan,
        eta_eff_max=eta_max if n else nan,
        noise_rms=noise_rms,
        drift_rms=drift_rms,
        drift_to_noise=(drift_rms / noise_rms if noise_rms > 0 else math.inf) if n else nan,
        n=n,
    )


class LazyStats:
    """The statistics of [`Langevin`][meanfield.optim.langevin.Langevin]'s last step, reduced when first read.

    A mixin of the optimizer: its step leaves ``_records`` (the noisy groups' [`Record`][meanfield.optim.step_stats.Record]s;
    ``None`` after a step that raised half way), ``_group_records`` (every group's) or, on the SGD fast path,
    ``_lazy`` (the same records as tuples), and clears ``_stats``/``_group_stats``; ``_n_steps`` counts the steps.
    """

    param_groups: list[dict[str, Any]]
    _records: list[Record] | None
    _group_records: list[list[Record]]
    _lazy: list[list[Any]] | None
    _stats: LangevinStats | None
    _group_stats: list[LangevinStats | None] | None
    _n_steps: int

    def _materialise(self) -> None:
        """Turn the records the SGD fast path kept as tuples into [`Record`][meanfield.optim.step_stats.Record] objects."""
        lazy, self._lazy = self._lazy, None
        if lazy is None:
            return
        self._records, self._group_records = [], [[] for _ in self.param_groups]
        for gi, noise, b, index, lr, beta_noise, scale, beta_t, xi, terms, factor, norms, versions in lazy:
            record = Record(b, index, "sgd", lr, beta_noise, scale, xi, False, beta_given=beta_t)
            record.drift_terms, record.drift_factor, record.drift_norms = terms, factor, norms
            record.drift_versions = versions if versions else tuple(t._version for t in terms)
            self._group_records[gi].append(record)
            if noise:
                self._records.append(record)

    @property
    def last_stats(self) -> LangevinStats | None:
        """[`LangevinStats`][meanfield.optim.step_stats.LangevinStats] of the last step over the noisy groups (``None`` before the first step, and
        after a step that raised while it was updating the parameters).

        Computed when first read after a step (a few passes over the noisy parameters), then cached.
        """
        if self._records is None:  # the last step raised during its update
            return None
        self._materialise()
        if self._stats is None and self._n_steps > 0:
            self._stats = aggregate(self._records, self._n_steps)
        return self._stats

    @property
    def last_group_stats(self) -> list[LangevinStats | None]:
        """One [`LangevinStats`][meanfield.optim.step_stats.LangevinStats] per param group for the last step, in the order of ``param_groups``:
        ``None`` for a group none of whose parameters had a gradient (and for every group before the first
        step, or after a step that raised while it was updating the parameters). A group without noise is
        described too (its drift; ``beta = 0``, ``noise_rms = 0``). Computed when first read, then cached.
        """
        if self._records is None or self._n_steps == 0:
            return [None] * len(self.param_groups)
        self._materialise()
        if self._group_stats is None:
            self._group_stats = [
                aggregate(records, self._n_steps) if records else None for records in self._group_records
            ]
            self._group_stats += [None] * (
                len(self.param_groups) - len(self._group_stats)
            )  # groups added since
        return self._group_stats
