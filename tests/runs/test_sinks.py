"""Tests of :mod:`meanfield.runs.sinks`."""

from __future__ import annotations

import importlib
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from meanfield.runs import sinks


class _Writer:
    """A SummaryWriter that records what it is given."""

    made: list = []

    def __init__(self, logdir, purge_step=None):
        self.logdir, self.purge_step, self.scalars, self.flushes, self.closed = (
            logdir,
            purge_step,
            [],
            0,
            False,
        )
        _Writer.made.append(self)

    def add_scalar(self, tag, value, global_step=None):
        self.scalars.append((tag, value, global_step))

    def flush(self):
        self.flushes += 1

    def close(self):
        self.closed = True


@pytest.fixture
def fake_tensorboard(monkeypatch):
    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = _Writer
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", module)
    _Writer.made = []
    return _Writer.made


def _records():
    nan, inf = float("nan"), float("inf")
    return [
        {"step": 1, "train_loss": 0.5, "beta": 0.1, "optim": {"drift_to_noise": 2.0}},
        {"step": 2, "train_loss": 0.4, "beta": 0.05, "val_loss": 0.6, "val_ppl": 1.8, "test_mse": 0.3},
        {"step": 3, "beta": None, "optim": {"drift_to_noise": -1.0}},
        {"step": 4, "train_loss": 0.3, "beta": 0.02, "val_loss": 0.5, "optim": {"drift_to_noise": inf}},
        {"step": 5, "train_loss": 0.2, "optim": {"drift_to_noise": nan}},
        {"step": 6, "train_loss": 0.1, "optim": {"drift_to_noise": 0.0}},
        {"step": 7, "train_loss": 0.1, "optim": {"drift_to_noise": None}},
        {"step": 8, "train_loss": 0.1, "test_mse": None, "optim": {"drift_to_noise": 3.0}},
    ]


def _lines(ax):
    return [(l.get_label(), list(l.get_xdata()), list(l.get_ydata())) for l in ax.get_lines()]


def test_tensorboard_purges_after_the_resume_step_and_writes_every_number_by_its_path(
    tmp_path, fake_tensorboard
):
    """A run from step 0 purges from step 1 (the events of an earlier try that had no checkpoint: they were
    kept, each step's scalars twice); a run resumed at step 10 purges from step 11 (the events the first run
    wrote past its checkpoint). Each record's numbers become scalars tagged by their path
    (``optim/eta``, ``groups/0/g``) at the record's step, integers as floats; booleans, strings, None and the
    step itself are left out — the list below is written by hand."""
    assert sinks.TensorBoard(tmp_path, True, 0).writer.purge_step == 1
    assert sinks.TensorBoard(tmp_path, True, 10).writer.purge_step == 11
    assert sinks.TensorBoard(tmp_path, False, 10).writer is None  # disabled: no writer at all
    board = sinks.TensorBoard(tmp_path, True, 0)
    assert board.writer.logdir == str(tmp_path)
    board.write(
        {
            "step": 7,
            "train_loss": 0.5,
            "beta": 1,
            "flag": True,
            "name": "x",
            "none": None,
            "optim": {"eta": 0.1, "n": 3},
            "groups": [{"g": 2.0}, None, [4.5]],
        }
    )
    assert board.writer.scalars == [
        ("train_loss", 0.5, 7),
        ("beta", 1.0, 7),
        ("optim/eta", 0.1, 7),
        ("optim/n", 3.0, 7),
        ("groups/0/g", 2.0, 7),
        ("groups/2/0", 4.5, 7),
    ]
    assert all(type(v) is float for _, v, _ in board.writer.scalars) and board.writer.flushes == 1
    board.close()
    assert board.writer.closed
    off = sinks.TensorBoard(tmp_path, False, 0)
    off.write({"step": 1, "x": 1.0})  # negative control: nothing to write to, nothing raised
    off.close()


def test_summary_table_aligns_names_and_rounds_floats_to_six_digits():
    """The table printed at the end, written by hand: names padded to the longest, floats as ``.6g``."""
    table = sinks.summary_table({"a": 1.23456789, "long_name": 3, "s": "x"})
    assert table == "  a          1.23457\n  long_name  3\n  s          x"
    assert sinks.summary_table({}) == ""


def test_training_figure_plots_exactly_the_logged_points(tmp_path, monkeypatch):
    """``draw_figures`` on records written by hand: the loss panel has the training loss at the steps that
    have one, then each val_/test_ metric (not perplexities) as dots and lines at the steps where it is not
    None; the temperature panel β_t where given and the drift/noise ratio where finite and > 0 (the −1, ∞,
    NaN, 0 and None are left out); both panels log-scaled; written to figures/training.png (a PNG)."""
    plotting = importlib.import_module("meanfield.studies.plotting")
    saved = []
    real = plotting.save
    monkeypatch.setattr(plotting, "save", lambda fig, path: (saved.append((fig, path)), real(fig, path))[1])
    sinks.draw_figures(tmp_path, _records(), "samples")
    ((fig, path),) = saved
    assert path == tmp_path / "figures" / "training.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ax_loss, ax_beta = fig.axes
    assert _lines(ax_loss) == [
        ("train loss", [1, 2, 4, 5, 6, 7, 8], [0.5, 0.4, 0.3, 0.2, 0.1, 0.1, 0.1]),
        ("test_mse", [2], [0.3]),
        ("val_loss", [2, 4], [0.6, 0.5]),
    ]
    for line in ax_loss.get_lines()[1:]:
        assert (line.get_marker(), line.get_linestyle(), line.get_markersize()) == ("o", "-", 3)
    assert _lines(ax_beta) == [("β_t", [1, 2, 4], [0.1, 0.05, 0.02]), ("drift/noise RMS", [1, 8], [2.0, 3.0])]
    assert (ax_loss.get_yscale(), ax_beta.get_yscale()) == ("log", "log")
    assert (ax_loss.get_title(), ax_beta.get_title()) == ("losses", "temperature")
    assert [t.get_text() for t in ax_beta.get_legend().get_texts()] == ["β_t", "drift/noise RMS"]


def test_no_records_draw_no_figure(tmp_path):
    """Negative control of the figure: an empty log writes nothing."""
    sinks.draw_figures(tmp_path, [], "samples")
    assert not (tmp_path / "figures").exists()


class _Writer_2:
    """A SummaryWriter that records what it is given."""

    def __init__(self, logdir, purge_step=None):
        self.logdir, self.purge_step = logdir, purge_step
        self.scalars, self.flushes, self.closes = [], 0, 0

    def add_scalar(self, tag, value, global_step=None):
        self.scalars.append((tag, value, global_step))

    def flush(self):
        self.flushes += 1

    def close(self):
        self.closes += 1


@pytest.fixture
def fake_writer(monkeypatch):
    """``torch.utils.tensorboard`` replaced by a module whose ``SummaryWriter`` is :class:`_Writer_2`."""
    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = _Writer_2
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", module)


def _capture(monkeypatch):
    """Record each ``(fig, path)`` that ``meanfield.studies.plotting.save`` is given (and still save it)."""
    plotting = importlib.import_module("meanfield.studies.plotting")
    saved = []
    real = plotting.save
    monkeypatch.setattr(plotting, "save", lambda fig, path: (saved.append((fig, path)), real(fig, path))[1])
    return saved


def _lines_2(ax):
    """``(label, xs, ys)`` of each line of ``ax``."""
    return [(l.get_label(), list(l.get_xdata()), list(l.get_ydata())) for l in ax.get_lines()]


@pytest.mark.parametrize(("start", "purge"), [(0, 1), (1, 2), (10, 11)])
def test_tensorboard_writer_folder_and_purge_step(tmp_path, fake_writer, start, purge):
    """Enabled: a writer on ``str(folder)`` that purges from ``start + 1`` (at 0 too: a try without a
    checkpoint left events)."""
    board = sinks.TensorBoard(tmp_path / "tb", True, start)
    assert isinstance(board.writer, _Writer_2)
    assert board.writer.logdir == str(tmp_path / "tb") and type(board.writer.logdir) is str
    assert board.writer.purge_step == purge


def test_tensorboard_disabled_or_missing_writes_nothing(tmp_path, fake_writer, monkeypatch):
    """Disabled, or the package not importable: no writer; write and close are then no-ops."""
    off = sinks.TensorBoard(tmp_path, False, 5)
    assert off.writer is None
    off.write({"step": 1, "x": 1.0})
    off.close()
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails with ImportError
    missing = sinks.TensorBoard(tmp_path, True, 0)
    assert missing.writer is None
    missing.write({"step": 1, "x": 1.0})
    missing.close()
    assert list(tmp_path.iterdir()) == []


def test_tensorboard_write_flattens_numbers_by_path(tmp_path, fake_writer):
    """Each number of a record becomes a float scalar tagged by its path at the record's step (the step not
    itself), mappings of any kind and lists descended into, booleans, strings, None, tuples and numpy
    integers left out; one flush per record; close closes once. Written by hand."""
    board = sinks.TensorBoard(tmp_path, True, 0)
    record = {
        "step": 3,
        1: 2,
        "f": np.float64(0.25),
        "i": np.int64(4),
        "b": False,
        "t": (1.0, 2.0),
        "m": types.MappingProxyType({"x": 1.5, "y": {"z": [7, True, {"w": -1.0}]}}),
        "l": [[0.5], "s", None],
    }
    board.write(record)
    assert board.writer.scalars == [
        ("1", 2.0, 3),
        ("f", 0.25, 3),
        ("m/x", 1.5, 3),
        ("m/y/z/0", 7.0, 3),
        ("m/y/z/2/w", -1.0, 3),
        ("l/0/0", 0.5, 3),
    ]
    assert all(type(v) is float for _, v, _ in board.writer.scalars)
    assert board.writer.flushes == 1
    board.write({"step": 4})
    assert board.writer.flushes == 2 and len(board.writer.scalars) == 6
    board.write({"step": 5, "a": {"": 1.0}})
    assert board.writer.scalars[-1] == ("a/", 1.0, 5)
    board.close()
    assert board.writer.closes == 1


def test_tensorboard_writes_real_event_files(tmp_path):
    """With the real package: the scalars can be read back from the event file with their steps."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = sinks.TensorBoard(tmp_path, True, 0)
    board.write({"step": 2, "loss": 0.5, "optim": {"eta": 0.125}})
    board.write({"step": 3, "loss": 0.25})
    board.close()
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert sorted(acc.Tags()["scalars"]) == ["loss", "optim/eta"]
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(2, 0.5), (3, 0.25)]
    assert [(e.step, e.value) for e in acc.Scalars("optim/eta")] == [(2, 0.125)]


def test_a_run_started_again_from_step_0_keeps_one_event_per_logged_step(tmp_path):
    """A run stopped at step 9 before any checkpoint starts again from step 0: its TensorBoard events are the
    steps of metrics.jsonl, once each (the first try's 2, 4, 6, 8 were kept beside the new ones)."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from meanfield.runs import RunResult, run

    config = Path(__file__).resolve().parents[2] / "experiments" / "teacher_student" / "config.toml"
    folder = tmp_path / "run"
    overrides = ["train.steps=12", "train.checkpoint_every=0", "train.log_every=2", "train.figures=false"]

    def stop(step):
        if step == 9:
            raise RuntimeError("stopped")

    with pytest.raises(RuntimeError, match="stopped"):
        run(config, folder, preset="smoke", overrides=overrides, quiet=True, on_step=stop)
    assert not (folder / "checkpoints").exists() or not list((folder / "checkpoints").glob("*.pt"))
    run(config, folder, preset="smoke", overrides=overrides, quiet=True, resume=True)
    acc = EventAccumulator(str(folder / "tensorboard"))
    acc.Reload()
    logged = [r["step"] for r in RunResult.load(folder).metrics if "train_loss" in r]
    assert logged == [2, 4, 6, 8, 10, 12]
    assert [e.step for e in acc.Scalars("train_loss")] == logged


def test_a_refused_tensorboard_write_is_one_line_naming_the_events_folder(tmp_path, monkeypatch):
    """A full disk met by the event writer (its flush raises ENOSPC with no file name): a DiskFullError naming
    the events folder (the message said "writing None"); the writer is not used again, and a refused close
    warns. A writer thread's OSError prints no traceback (the training thread raises it)."""
    import errno
    import threading

    from meanfield.runs.errors import DiskFullError

    pytest.importorskip("tensorboard")
    original = threading.excepthook
    monkeypatch.setattr(threading, "excepthook", original)  # put back at teardown whatever happens here
    board = sinks.TensorBoard(tmp_path / "tb", True, 0)
    assert threading.excepthook is not original  # the writer thread's OSError is kept quiet while it lives

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(board.writer, "flush", full)
    with pytest.raises(DiskFullError, match=rf"^no space left on device writing {tmp_path / 'tb'} "):
        board.write({"step": 1, "loss": 0.5})
    assert board.writer is None
    board.write({"step": 2, "loss": 0.25})  # nothing to write to: nothing raised
    board.close()
    assert threading.excepthook is original  # close puts the hook back
    printed = []
    quiet = sinks._quiet_writer_thread(printed.append)
    writer_thread = type("_AsyncWriterThread", (), {})()
    quiet(types.SimpleNamespace(exc_type=OSError, thread=writer_thread))
    other = [types.SimpleNamespace(exc_type=ValueError, thread=writer_thread),
             types.SimpleNamespace(exc_type=OSError, thread=threading.Thread())]  # fmt: skip
    for args in other:
        quiet(args)
    assert printed == other  # only the writer thread's OSError is silenced
    closing = sinks.TensorBoard(tmp_path / "tb2", True, 0)
    monkeypatch.setattr(closing.writer, "close", full)
    with pytest.warns(RuntimeWarning, match=r"^TensorBoard: no space left on device writing"):
        closing.close()
    assert threading.excepthook is original


def test_summary_table_by_hand():
    """Names left-aligned to the longest after two spaces, two spaces, then floats (numpy floats too) as
    ``.6g`` and everything else by ``str``."""
    table = sinks.summary_table(
        {"loss": 2 / 3, "n": 7, "big": 1e-7, "whole": 3.0, "ok": True, "none": None, "np": np.float64(1 / 7)}
    )
    assert table == (
        "  loss   0.666667\n  n      7\n  big    1e-07\n  whole  3\n  ok     True\n  none   None\n  np     0.142857"
    )
    assert sinks.summary_table({"a": 1}) == "  a  1"
    assert sinks.summary_table({"abcdefgh": "x", "b": [1]}) == "  abcdefgh  x\n  b         [1]"
    assert sinks.summary_table({}) == ""


def test_training_figure_layout_and_lines(tmp_path, monkeypatch):
    """Two panels 9.2 × 3.2 inches; the loss panel: the training loss, then the val_/test_ metrics in sorted
    order (no perplexities, no other prefixes) where not None; β_t where not None (0 kept) and the
    drift/noise ratio where finite and positive; axis labels, scales, titles and legends by hand."""
    saved = _capture(monkeypatch)
    records = [
        {"step": 1, "train_loss": 0.5, "beta": 0.0, "val_b": 0.9, "optim": {"drift_to_noise": 1e-300}},
        {"step": 2, "test_a": 0.7, "val_a": 0.8, "xval_c": 1.0, "test_ppl": 3.0, "val_b": None, "optim": {}},
        {"step": 3, "train_loss": 0.25, "beta": 0.5, "val_a": 0.6, "optim": None},
        {"step": 4, "train_loss": 0.125, "optim": {"drift_to_noise": -math.inf}},
    ]
    sinks.draw_figures(tmp_path, records, "tokens")
    ((fig, path),) = saved
    assert path == tmp_path / "figures" / "training.png" and path.read_bytes()[:4] == b"\x89PNG"
    assert tuple(fig.get_size_inches()) == pytest.approx((9.2, 3.2))
    ax_loss, ax_beta = fig.axes
    assert _lines_2(ax_loss) == [
        ("train loss", [1, 3, 4], [0.5, 0.25, 0.125]),
        ("test_a", [2], [0.7]),
        ("val_a", [2, 3], [0.8, 0.6]),
        ("val_b", [1], [0.9]),
    ]
    assert _lines_2(ax_beta) == [("β_t", [1, 3], [0.0, 0.5]), ("drift/noise RMS", [1], [1e-300])]
    assert (ax_loss.get_xlabel(), ax_loss.get_ylabel(), ax_loss.get_title()) == ("step", "loss", "losses")
    assert (ax_beta.get_xlabel(), ax_beta.get_ylabel(), ax_beta.get_title()) == ("step", "", "temperature")
    assert (ax_loss.get_yscale(), ax_beta.get_yscale()) == ("log", "log")
    assert (ax_loss.get_xscale(), ax_beta.get_xscale()) == ("linear", "linear")
    assert [t.get_text() for t in ax_loss.get_legend().get_texts()] == [
        "train loss",
        "test_a",
        "val_a",
        "val_b",
    ]
    assert [t.get_text() for t in ax_beta.get_legend().get_texts()] == ["β_t", "drift/noise RMS"]
    assert ax_loss.get_lines()[0].get_marker() in ("None", None, "")  # the training loss: a plain line
    for line in ax_loss.get_lines()[1:]:  # the metrics: dots of size 3 joined by lines
        assert (line.get_marker(), line.get_linestyle(), line.get_markersize()) == ("o", "-", 3)
    for line in ax_beta.get_lines():
        assert (line.get_marker(), line.get_linestyle()) == ("None", "-")


def test_training_figure_without_beta_or_ratio(tmp_path, monkeypatch):
    """Records with neither β nor a usable ratio: the temperature panel has no line (and no legend entry),
    the figure is still written; no records write nothing at all."""
    saved = _capture(monkeypatch)
    with pytest.warns(UserWarning, match="No artists with labels found to put in legend"):
        sinks.draw_figures(
            tmp_path, [{"step": 1, "train_loss": 1.0, "beta": None, "optim": {"drift_to_noise": 0.0}}], "s"
        )
    ((fig, path),) = saved
    assert path.is_file() and fig.axes[1].get_lines() == []
    assert _lines_2(fig.axes[0]) == [("train loss", [1], [1.0])]
    empty = tmp_path / "empty"
    sinks.draw_figures(empty, [], "s")
    assert not empty.exists() and len(saved) == 1
