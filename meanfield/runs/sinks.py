"""Where a run's records go besides ``metrics.jsonl``: TensorBoard event files, the training figure, the
summary table printed at the end.
"""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from meanfield.runs.folder import write_error

__all__ = ["TensorBoard", "draw_figures", "summary_table"]


def _quiet_writer_thread(hook: Callable[[Any], None]) -> Callable[[Any], None]:
    """``threading.excepthook`` without the traceback of TensorBoard's writer thread on an ``OSError`` (a full
    disk): the writer raises it again in the training thread, where it becomes one line naming the folder."""

    def excepthook(args: Any) -> None:
        if type(args.thread).__name__ == "_AsyncWriterThread" and issubclass(args.exc_type, OSError):
            return
        hook(args)

    return excepthook


class TensorBoard:
    """Scalars of each metrics record into TensorBoard event files, when the package is installed.

    A write the file system refuses (a full disk, a read-only mount) is the folder's one-line error
    ([`write_error`][meanfield.runs.folder.write_error], naming the events folder); the writer is not used after it."""

    def __init__(self, folder: Path, enabled: bool, start_step: int) -> None:
        self.writer = None
        self.folder = folder
        self._hook: Callable[[Any], None] | None = None
        if not enabled:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # the optional extra is not installed: nothing else depends on it
            return
        # events of steps after start_step are another try's: a resume rewrites them, and a run that starts
        # again from step 0 (no checkpoint) rewrites every one
        self.writer = SummaryWriter(str(folder), purge_step=start_step + 1)
        self._hook, threading.excepthook = threading.excepthook, _quiet_writer_thread(threading.excepthook)

    def write(self, record: Mapping[str, Any]) -> None:
        if self.writer is None:
            return

        def flat(prefix: str, node: Any) -> Iterator[tuple[str, float]]:
            if isinstance(node, Mapping):
                for k, v in node.items():
                    yield from flat(f"{prefix}/{k}" if prefix else str(k), v)
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    yield from flat(f"{prefix}/{i}", v)
            elif isinstance(node, (int, float)) and not isinstance(node, bool):
                yield prefix, float(node)

        try:
            for tag, value in flat("", {k: v for k, v in record.items() if k != "step"}):
                self.writer.add_scalar(tag, value, record["step"])
            self.writer.flush()
        except OSError as error:
            self.writer = None  # its thread is gone; close() has nothing left to flush
            raise write_error(error, self.folder) from None

    def close(self) -> None:
        """Flush and close the event files; a refused last write is a warning (the run's own records,
        ``metrics.jsonl`` and the checkpoints, are written already, and an error here would hide the one that
        may be on its way out)."""
        try:
            if self.writer is not None:
                self.writer.close()
        except OSError as error:
            warnings.warn(f"TensorBoard: {write_error(error, self.folder)}", RuntimeWarning, stacklevel=2)
        finally:
            if self._hook is not None:
                threading.excepthook, self._hook = self._hook, None


def summary_table(final: Mapping[str, Any]) -> str:
    rows = [(k, f"{v:.6g}" if isinstance(v, float) else str(v)) for k, v in final.items()]
    width = max((len(k) for k, _ in rows), default=6)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def draw_figures(folder: Path, records: list[dict[str, Any]], unit: str) -> None:
    from meanfield.studies.plotting import figure, save

    if not records:
        return
    fig, (ax_loss, ax_beta) = figure(ncols=2, width=4.6)
    steps = [r["step"] for r in records if "train_loss" in r]
    ax_loss.plot(steps, [r["train_loss"] for r in records if "train_loss" in r], label="train loss")
    for key in sorted({k for r in records for k in r if k.startswith(("val_", "test_")) and "ppl" not in k}):
        pts = [(r["step"], r[key]) for r in records if r.get(key) is not None]
        ax_loss.plot(*zip(*pts), "o-", ms=3, label=key)
    ax_loss.set(xlabel="step", ylabel="loss", yscale="log", title="losses")
    ax_loss.legend()
    betas = [(r["step"], r["beta"]) for r in records if r.get("beta") is not None]
    if betas:
        ax_beta.plot(*zip(*betas), label="β_t")
    ratio = [(r["step"], r["optim"]["drift_to_noise"]) for r in records if r.get("optim")]
    ratio = [(s, v) for s, v in ratio if v is not None and math.isfinite(v) and v > 0]
    if ratio:
        ax_beta.plot(*zip(*ratio), label="drift/noise RMS")
    ax_beta.set(xlabel="step", yscale="log", title="temperature")
    ax_beta.legend()
    save(fig, folder / "figures" / "training.png")
