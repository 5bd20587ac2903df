"""The flat layout of a param group: its parameters per (device, dtype), with flat Adam moments.

A [`Bucket`][meanfield.optim.buckets.Bucket] holds the parameters of one group on one (device, dtype) and, for an Adam drift, the moments
``m`` and ``v`` of all of them in one flat buffer each, so that one fused kernel updates the whole bucket; the
per-parameter state entries ``state[p]["exp_avg"]`` are views into those buffers, laid out like each parameter
(its own strides: channels_last stays channels_last).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from meanfield.optim.groups import position

__all__ = ["Bucket", "build_buckets", "check_dense"]


@dataclass
class Bucket:
    """The parameters of one group on one (device, dtype), with flat Adam moments (per-param views)."""

    params: list[torch.Tensor]
    offsets: list[int]
    n: int
    exp_avg: torch.Tensor | None = None  # (n,)
    exp_avg_sq: torch.Tensor | None = None  # (n,)
    steps: list[torch.Tensor] | None = None  # per parameter: () float32 Adam step count (the fused kernel's)
    counts: list[int] | None = None  # the same counts as Python ints
    rsqrt: torch.Tensor | None = None  # (n,) preconditioned-noise work buffer
    rsqrt_views: list[torch.Tensor] | None = None
    rows: tuple[int, int, int] | None = None  # (start, stop, M): the parameters are rows of (M, …) tensors
    block: int = 0  # > 0: counter-based noise per block of this many particles (Langevin's noise_block)
    stream: str = ""  # the block noise's key suffix: "" for the group's first bucket, else /param{i} (block_noise)

    def views(self, flat: torch.Tensor, index: Sequence[int], strided: bool = False) -> list[torch.Tensor]:
        """Views of ``flat`` (n,) shaped like the parameters ``index``.

        ``strided=False``: each segment in the parameter's logical (row-major) order, ``view_as``.
        ``strided=True``: with the parameter's own strides (e.g. channels_last), so that a kernel walking
        memory (``_fused_adam_``) and an elementwise op agree on which entry belongs to which coordinate:
        for the optimizer state (moments, preconditioner) of non-contiguous parameters.
        """
        out = []
        for i in index:
            p = self.params[i]
            segment = flat[self.offsets[i] : self.offsets[i] + p.numel()]  # (numel,)
            out.append(
                segment.as_strided(p.shape, p.stride())
                if strided and not p.is_contiguous()
                else segment.view_as(p)
            )
        return out

    def covers(self, index: Sequence[int]) -> bool:
        r"""Whether ``index`` is every parameter of the bucket in its own order ($0, 1, \dots, n - 1$): then
        a flat buffer of the bucket *is* the buffer of ``index``, and per-parameter lists line up with it."""
        return len(index) == len(self.params) and all(i == k for k, i in enumerate(index))

    def gather(self, flat: torch.Tensor, index: Sequence[int], strided: bool = False) -> torch.Tensor:
        """The entries of ``flat`` (n,) that belong to the parameters ``index``, flat, in logical order
        (``strided`` as in [`views`][meanfield.optim.buckets.Bucket.views]: how ``flat`` is laid out)."""
        if self.covers(index) and (not strided or all(p.is_contiguous() for p in self.params)):
            return flat
        return torch.cat([v.reshape(-1) for v in self.views(flat, index, strided)])  # (n_index,)


def check_dense(p: torch.Tensor, group: dict[str, Any], groups: list[dict[str, Any]]) -> None:
    """The optimizer keeps per-parameter state in flat buffers laid out like each parameter: that needs a
    parameter whose memory is dense (contiguous, or a permutation of it such as channels_last)."""
    span = 1 + sum((size - 1) * stride for size, stride in zip(p.shape, p.stride()) if size > 0)
    if p.numel() > 0 and span != p.numel():  # torch strides are never negative
        gi, k = position(groups, group, p)
        raise ValueError(
            f"parameter {k} of param group {gi} (shape {tuple(p.shape)}, strides {p.stride()}) does not fill "
            "its memory densely; Langevin needs parameters that are contiguous or a permutation of it "
            "(e.g. channels_last): use p.data = p.data.contiguous()"
        )


def build_buckets(
    group: dict[str, Any],
    groups: list[dict[str, Any]],
    state: dict[torch.Tensor, dict[str, Any]],
    seed: int | None,
) -> list[Bucket]:
    """The buckets of ``group``: its parameters split by (device, dtype), Adam moments moved into flat buffers.

    Args:
        group: the param group.
        groups: all the optimizer's groups (for error messages that name a parameter's position).
        state: the optimizer's per-parameter state; an Adam group's ``exp_avg``/``exp_avg_sq`` entries become
            views of the bucket's flat buffers (their values copied in) and ``step`` its step-count tensors.
        seed: the optimizer's seed (``None`` with a user generator: then ``noise_block`` is refused).

    Raises:
        ValueError: a parameter that does not fill its memory densely, or whose leading axis does not match
            the group's ``noise_block`` or ``particle_rows``.
    """
    by_kind: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    first: dict[tuple[torch.device, torch.dtype], int] = {}  # each kind's first parameter's index in the group
    for i, p in enumerate(group["params"]):
        by_kind.setdefault((p.device, p.dtype), []).append(p)
        first.setdefault((p.device, p.dtype), i)
    buckets = []
    for (device, dtype), params in by_kind.items():
        offsets, n = [], 0
        for p in params:
            check_dense(p, group, groups)
            offsets.append(n)
            n += p.numel()
        rows = group.get("particle_rows")
        index = first[(device, dtype)]
        b = Bucket(params, offsets, n, block=int(group.get("noise_block", 0)), stream=f"/param{index}" if index else "")
        if b.block:
            if seed is None:
                raise ValueError(
                    "noise_block > 0 draws counter-based noise from the optimizer's seed: pass seed=, "
                    "not generator="
                )
            # a scalar has no particle axis (0 rows): refused below with the rule, not an IndexError here
            lead = params[0].shape[0] if params[0].dim() else 0
            start, stop = (rows[0], rows[1]) if rows is not None else (0, lead)
            for p in params:
                if p.dim() == 0 or p.shape[0] != stop - start or start % b.block or stop % b.block:
                    raise ValueError(
                        f"noise_block = {b.block}: every parameter of the group needs a leading particle axis "
                        f"whose rows [{start}, {stop}) are whole blocks, got a parameter of shape "
                        f"{tuple(p.shape)}"
                    )
        if rows is not None:
            b.rows = (int(rows[0]), int(rows[1]), int(group["n_particles"]))
            for p in params:
                if p.dim() == 0 or p.shape[0] != b.rows[1] - b.rows[0]:
                    raise ValueError(
                        f"a parameter of shape {tuple(p.shape)} is in a group with particle_rows = "
                        f"{tuple(rows)}: its leading axis must hold those {b.rows[1] - b.rows[0]} particles"
                    )
        if group["drift"] == "adam":
            # per-parameter step counts: a parameter whose first gradient comes late gets its own bias
            # correction (a state without them, from an older checkpoint, takes the group's count)
            b.counts, b.steps = [], []
            for p in params:
                old = state[p].get("step")
                if old is None:
                    old = group["step"] if "exp_avg" in state[p] else 0
                b.counts.append(int(old))
                b.steps.append(torch.tensor(float(int(old)), dtype=torch.float32, device=device))
                state[p]["step"] = b.steps[-1]
            for key in ("exp_avg", "exp_avg_sq"):
                flat = torch.zeros(n, device=device, dtype=dtype)  # (n,)
                for p, view in zip(params, b.views(flat, range(len(params)), strided=True)):
                    old = state[p].get(key)
                    if old is not None:
                        view.copy_(old.reshape(view.shape))
                    state[p][key] = view
                setattr(b, key, flat)
        buckets.append(b)
    return buckets
