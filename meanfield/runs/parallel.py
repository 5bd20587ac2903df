"""The processes of a ``torchrun`` launch: the process group, each rank's share of a batch, and the all-reduces
of the training loop (a scalar; the gradients of data parallelism as one flat buffer).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["rank_device", "process_group", "batch_share", "all_reduce_scalar", "average_gradients"]


def rank_device(device: torch.device) -> torch.device:
    """This process's GPU under torchrun: ``cuda`` without an index becomes ``cuda:LOCAL_RANK`` (made the
    current device, so that NCCL and every tensor made without a device use it); otherwise ``device`` itself.

    Without it every rank of a node would take GPU 0 (NCCL refuses a duplicate GPU).

    Raises:
        ValueError: ``LOCAL_RANK`` names a GPU this machine does not have.
    """
    local = os.environ.get("LOCAL_RANK")
    if device.type != "cuda" or device.index is not None or local is None:
        return device
    count = torch.cuda.device_count()
    if not 0 <= int(local) < count:
        raise ValueError(
            f"LOCAL_RANK = {local} but this machine has {count} GPU(s): start at most {count} processes a node"
        )
    device = torch.device("cuda", int(local))
    torch.cuda.set_device(device)
    return device


def process_group(device: torch.device) -> tuple[int, int, bool]:
    """``(rank, world, created)``: under torchrun (``WORLD_SIZE`` > 1) the default process group, initialised here
    if it is not yet (NCCL for CUDA, gloo otherwise; ``created`` says so); ``(0, 1, False)`` in a single process."""
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 and not (dist.is_available() and dist.is_initialized()):
        return 0, 1, False
    created = not dist.is_initialized()
    if created:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), dist.get_world_size(), created


def batch_share(batch: Any, rank: int, world: int, size: int) -> Any:
    """Rank ``rank``'s rows ``[rank·size/world, (rank+1)·size/world)`` of every tensor of ``batch`` whose first
    axis is the batch (``size`` rows); other leaves are kept as they are."""
    if torch.is_tensor(batch):
        if batch.dim() and batch.shape[0] == size:
            share = size // world
            return batch[rank * share : (rank + 1) * share]
        return batch
    if isinstance(batch, (tuple, list)):
        return type(batch)(batch_share(b, rank, world, size) for b in batch)
    if isinstance(batch, Mapping):
        return {k: batch_share(v, rank, world, size) for k, v in batch.items()}
    return batch


def all_reduce_scalar(value: float, device: torch.device, op: str = "sum") -> float:
    """``value`` reduced over the ranks (``"sum"``, ``"min"``, ``"max"``), through a tensor on ``device`` (NCCL
    reduces only CUDA tensors; gloo CPU ones)."""
    import torch.distributed as dist

    where = device if dist.get_backend() == "nccl" else torch.device("cpu")
    t = torch.tensor([value], dtype=torch.float64, device=where)
    dist.all_reduce(t, op={"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[op])
    return float(t.item())


def average_gradients(model: torch.nn.Module, world: int) -> None:
    """Average every parameter's gradient over the ranks: one all-reduce of one flat buffer."""
    import torch.distributed as dist

    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])  # (P,)
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()
