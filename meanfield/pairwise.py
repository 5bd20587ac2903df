r"""Pairwise reductions without an ``M × N`` matrix in memory: one backend for interactions and Sinkhorn.

Two reductions over the pairs of two clouds ``x (B, M, d)`` and ``y (B, N, d)`` (replicas never mix):

* :func:`radial_sum`: ``out_i = Σ_j φ(|x_i − y_j|²) v_j`` for a function ``φ`` of the squared distance and
  values ``v_j`` (``(B, N, k)``): the drift and energy of a radial interaction (``v_j = (1, y_j)``);
* :func:`softmin`: ``f_i = −ε log Σ_j exp(h_j − |x_i − y_j|^p / ε)``: the ``c``-transform of Sinkhorn's
  log-domain iterations.

Each has two implementations, which give the same numbers to round-off:

* ``"torch"``: blocks of rows, ``B × rows × N ≤ max_elements`` numbers at a time; the squared distances
  come from one matrix product per block, ``|x|² + |y|² − 2 x·y``, and the clouds are centred on their
  common mean first (the cost is translation invariant, and centring keeps that difference accurate).
  Memory ``O(max_elements + B(M + N)d)``: linear in the number of points.
* ``"keops"``: KeOps' symbolic ``LazyTensor`` reductions (compiled C++ on the CPU, CUDA on a GPU), memory
  ``O(B(M + N)d)``. Present when ``pykeops`` is installed (``pip install 'meanfield-sde[keops]'``); the
  first call of each formula compiles it (seconds, then cached on disk).

``backend="auto"`` (:func:`resolve_backend`) takes KeOps for tensors on a GPU (when KeOps was built with
CUDA) and the blocked torch path on the CPU (``benchmarks/kernels.py``, 2-core CPU: for the soft-minimum
KeOps was 1.2× faster at d ≤ 10 on a quieter machine and up to 2× slower under load, 10× slower at
d = 100; for the interaction drift it was 1.0–1.9× slower; and each new formula compiles for seconds).
Every function that uses a backend reports the one it used.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

__all__ = [
    "BACKENDS",
    "MAX_ELEMENTS",
    "keops_available",
    "radial_sum",
    "resolve_backend",
    "softmin",
]

BACKENDS = ("torch", "keops")
"""The implementations of the reductions; ``"auto"`` picks one of them (:func:`resolve_backend`)."""

MAX_ELEMENTS = 1 << 20
"""Default block of the torch path: ``B × rows × N`` numbers (4 MiB in float32; cache-sized passes)."""


@functools.cache
def keops_available() -> bool:
    """Whether ``pykeops`` can be imported (it is imported on the first call of this function)."""
    try:
        import pykeops.torch  # noqa: F401
    except Exception:  # noqa: BLE001 — a broken install is the same as none: use torch
        return False
    return True


@functools.cache
def _keops_gpu() -> bool:
    import pykeops.config

    return bool(pykeops.config.gpu_available)


def resolve_backend(backend: str, d: int, device: torch.device | str = "cpu") -> str:
    """The backend ``backend`` stands for in dimension ``d`` on ``device``.

    ``"auto"``: ``"keops"`` when it is installed with CUDA and the tensors are on a GPU; ``"torch"``
    otherwise (on the CPU KeOps was at best 1.2× faster, often slower: ``benchmarks/kernels.py``).
    ``"keops"`` without ``pykeops`` raises. ``d`` is kept for a crossover in dimension (none measured yet).
    """
    if backend not in ("auto", *BACKENDS):
        raise ValueError(f"backend must be one of {['auto', *BACKENDS]}, got {backend!r}")
    if backend == "keops" and not keops_available():
        raise ValueError(
            "backend='keops' needs pykeops: pip install 'meanfield-sde[keops]' (or use backend='auto')"
        )
    if backend != "auto":
        return backend
    if torch.device(device).type != "cuda" or not keops_available():
        return "torch"
    return "keops" if _keops_gpu() else "torch"


def _rows(B: int, N: int, max_elements: int) -> int:
    return max(1, max_elements // max(1, B * N))


def _centred(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x − c``, ``y − c`` with ``c`` the mean of both clouds per replica (distances unchanged)."""
    c = 0.5 * (x.mean(1, keepdim=True) + y.mean(1, keepdim=True))  # (B, 1, d)
    return x - c, y - c  # (B, M, d), (B, N, d)


def _squared_distances(x: torch.Tensor, y: torch.Tensor, y2: torch.Tensor) -> torch.Tensor:
    """``|x_i − y_j|²`` for a block ``x (B, c, d)`` against ``y (B, N, d)`` with ``y2 = |y|² (B, N)``."""
    r2 = torch.baddbmm(y2.unsqueeze(1), x, y.transpose(1, 2), alpha=-2.0)  # (B, c, N)  |y|² − 2x·y
    return r2.add_(x.square().sum(-1, keepdim=True)).clamp_(min=0.0)  # (B, c, N)


# --------------------------------------------------------------------------------------------------------
# Σ_j φ(|x_i − y_j|²) v_j


def _radial_sum_torch(x, y, phi, values, max_elements):
    B, M, _ = x.shape
    N = y.shape[1]
    x, y = _centred(x, y)
    y2 = y.square().sum(-1)  # (B, N)
    rows = _rows(B, N, max_elements)
    blocks = [  # a list, not writes into a buffer: the result stays differentiable
        torch.bmm(phi(_squared_distances(x[:, start : start + rows], y, y2)), values)  # (B, c, k)
        for start in range(0, M, rows)
    ]
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks, 1)  # (B, M, k)


def _radial_sum_keops(x, y, phi, values, scale):
    from pykeops.torch import LazyTensor

    # φ is applied to s·|x − y|² = |√s x − √s y|²: constants stay out of the compiled formula when
    # ``phi`` is written in the scaled variable (as GaussianInteraction's is).
    root = scale**0.5
    X = LazyTensor((root * x).unsqueeze(2).contiguous())  # (B, M, 1, d)
    Y = LazyTensor((root * y).unsqueeze(1).contiguous())  # (B, 1, N, d)
    V = LazyTensor(values.unsqueeze(1).contiguous())  # (B, 1, N, k)
    r2 = ((X - Y) ** 2).sum(-1)  # (B, M, N) symbolic
    return (phi(r2) * V).sum(dim=2)  # (B, M, k)


def radial_sum(
    x: torch.Tensor,
    y: torch.Tensor,
    phi: Callable,
    values: torch.Tensor,
    *,
    scale: float = 1.0,
    backend: str = "auto",
    max_elements: int = MAX_ELEMENTS,
) -> tuple[torch.Tensor, str]:
    r"""``out_i = Σ_j φ(s·|x_i − y_j|²) v_j`` per replica, without the ``M × N`` matrix.

    Args:
        x: ``(B, M, d)``.
        y: ``(B, N, d)``.
        phi: ``φ``, applied elementwise to a tensor of scaled squared distances (torch) or to a KeOps
            ``LazyTensor`` (so write it with operators and methods, ``(-r2).exp()``, not ``torch.exp``).
        values: ``v``, shape ``(B, N, k)``.
        scale: ``s > 0``, multiplies the squared distances before ``φ``.
        backend: ``"auto"``, ``"torch"`` or ``"keops"``.
        max_elements: block size of the torch path (``B × rows × N``).

    Returns:
        ``(out (B, M, k), backend used)``.
    """
    used = resolve_backend(backend, x.shape[-1], x.device)
    if used == "keops":
        return _radial_sum_keops(x, y, phi, values, scale), used
    if scale != 1.0:
        x, y = x * scale**0.5, y * scale**0.5  # (B, M, d), (B, N, d)
    return _radial_sum_torch(x, y, phi, values, max_elements), used


# --------------------------------------------------------------------------------------------------------
# Softmin: −ε log Σ_j exp(h_j − |x_i − y_j|^p / ε)


def _per_replica(epsilon: float | torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``ε`` as a ``(B, 1)`` tensor of ``x``'s dtype and device."""
    eps = torch.as_tensor(epsilon, dtype=x.dtype, device=x.device)
    return eps.reshape(-1, 1).expand(x.shape[0], 1)  # (B, 1)


def _scaled(x, y, eps, p):
    """Centred clouds scaled so that ``|x − y|^p / ε`` is the plain cost: ε stays out of any formula."""
    x, y = _centred(x, y)
    scale = (1.0 / eps if p == 1 else eps.rsqrt()).unsqueeze(-1)  # (B, 1, 1)
    return x * scale, y * scale  # (B, M, d), (B, N, d)


def _softmin_torch(x, y, h, eps, p, max_elements):
    B, M, _ = x.shape
    N = y.shape[1]
    x, y = _scaled(x, y, eps, p)
    y2 = y.square().sum(-1)  # (B, N)
    out = torch.empty(B, M, dtype=x.dtype, device=x.device)  # (B, M)
    rows = _rows(B, N, max_elements)
    for start in range(0, M, rows):
        xi = x[:, start : start + rows]  # (B, c, d)
        if p == 2:  # h_j − |y_j|² + 2 x_i·y_j, then − |x_i|² outside the log-sum-exp
            z = torch.baddbmm((h - y2).unsqueeze(1), xi, y.transpose(1, 2), alpha=2.0)  # (B, c, N)
            out[:, start : start + rows] = torch.logsumexp(z, -1) - xi.square().sum(-1)  # (B, c)
        else:
            z = _squared_distances(xi, y, y2).sqrt_().neg_().add_(h.unsqueeze(1))  # (B, c, N)
            out[:, start : start + rows] = torch.logsumexp(z, -1)  # (B, c)
    return out.mul_(-eps)


def _softmin_keops(x, y, h, eps, p):
    from pykeops.torch import LazyTensor

    x, y = _scaled(x, y, eps, p)  # one compiled formula for every ε
    X = LazyTensor(x.unsqueeze(2).contiguous())  # (B, M, 1, d)
    Y = LazyTensor(y.unsqueeze(1).contiguous())  # (B, 1, N, d)
    H = LazyTensor(h.unsqueeze(1).unsqueeze(-1).contiguous())  # (B, 1, N, 1)
    r2 = ((X - Y) ** 2).sum(-1)  # (B, M, N) symbolic
    cost = r2 if p == 2 else r2.sqrt()
    return (H - cost).logsumexp(dim=2).squeeze(-1).mul_(-eps)  # (B, M)


def softmin(
    x: torch.Tensor,
    y: torch.Tensor,
    h: torch.Tensor,
    epsilon: float | torch.Tensor,
    *,
    p: int = 2,
    backend: str = "auto",
    max_elements: int = MAX_ELEMENTS,
) -> tuple[torch.Tensor, str]:
    r"""The soft minimum over ``j`` of ``C_ij − ε h_j`` with ``C_ij = |x_i − y_j|^p``:

    .. math::  f_i = −ε \log \sum_j \exp\big(h_j − |x_i − y_j|^p / ε\big)

    (with ``h_j = log b_j + g_j/ε`` this is Sinkhorn's update of the potential ``f`` in the log domain).

    Args:
        x: ``(B, M, d)``.
        y: ``(B, N, d)``.
        h: ``(B, N)``.
        epsilon: ``ε > 0``, in units of the cost: a number, or one per replica (shape ``(B,)``).
        p: 1 or 2.
        backend: ``"auto"``, ``"torch"`` or ``"keops"``.
        max_elements: block size of the torch path.

    Returns:
        ``(f (B, M), backend used)``.
    """
    used = resolve_backend(backend, x.shape[-1], x.device)
    eps = _per_replica(epsilon, x)  # (B, 1)
    if used == "keops":
        return _softmin_keops(x, y, h, eps, p), used
    return _softmin_torch(x, y, h, eps, p, max_elements), used
