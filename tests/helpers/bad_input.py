"""The bad-input property tests' tools (hypothesis): tensors of any rank, dtype and NaN/±Inf entries, one argument
replaced by a draw from its pool, and what a clear refusal is (a ValueError/TypeError naming the argument)."""

from __future__ import annotations

import math

import torch
from hypothesis import event
from hypothesis import strategies as st

DTYPES = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int64,
    torch.bool,
    torch.complex64,
]


@st.composite
def tensors(draw, ranks=(0, 1, 2, 3, 4), size=3):
    """Tensors of any rank 0–4, sizes 0–``size``, any dtype, some with NaN or ±Inf entries."""
    rank = draw(st.sampled_from(ranks))
    shape = tuple(draw(st.integers(0, size)) for _ in range(rank))
    dtype = draw(st.sampled_from(DTYPES))
    x = torch.randn(
        shape, generator=torch.Generator().manual_seed(draw(st.integers(0, 99))), dtype=torch.float64
    )
    if x.numel() and draw(st.booleans()):
        x.view(-1)[draw(st.integers(0, x.numel() - 1))] = draw(
            st.sampled_from([math.nan, math.inf, -math.inf])
        )
    if dtype.is_complex:
        return x.to(dtype)
    return x.to(dtype) if dtype != torch.bool else x > 0


def is_clear(error: BaseException, names: tuple[str, ...]) -> bool:
    msg = str(error)
    return isinstance(error, (ValueError, TypeError)) and any(n in msg for n in names)


def call(fn, names, *args, **kwargs):
    """``fn(*args, **kwargs)``; a ValueError/TypeError must name one of ``names`` (returns ``None`` then)."""
    try:
        result = fn(*args, **kwargs)
    except (ValueError, TypeError) as error:
        assert is_clear(error, names), f"unclear error for {names}: {type(error).__name__}: {error}"
        event(f"{names[0]}: refused")
        return None
    event(f"{names[0]}: result")
    return result


@st.composite
def one_bad(draw, valid: dict, pools: dict):
    """``(name, kwargs)``: the valid kwargs with the argument ``name`` drawn from its pool."""
    name = draw(st.sampled_from(sorted(pools)))
    return name, {**valid, name: draw(pools[name])}
