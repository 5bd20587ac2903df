"""The progress-bar policy (``meanfield/progress.py``): ``progress=True`` shows, ``False`` hides, ``None`` follows
``set_progress``, else ``MEANFIELD_PROGRESS``, else whether stderr is a terminal (or a Jupyter kernel runs); a
call inside another call that has a bar shows none, even after that call was interrupted; ``None`` waits
:data:`~meanfield.progress.DELAY` seconds before drawing."""

from __future__ import annotations

import io
import sys
import types

import pytest
import torch

import meanfield as mf
from meanfield import progress
from meanfield.drift.potentials import Quadratic


@pytest.fixture(autouse=True)
def _policy(monkeypatch):
    """No process-wide choice, no environment variable, no delay (a bar shows at its first update)."""
    monkeypatch.delenv("MEANFIELD_PROGRESS", raising=False)
    monkeypatch.setattr(progress, "DELAY", 0.0)
    mf.set_progress(None)
    yield
    mf.set_progress(None)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run(progress_arg=None):
    system = mf.MeanFieldLangevin(Quadratic(), beta=0.1)
    return mf.simulate(system, torch.zeros(1, 4, 1), t1=0.2, dt=0.1, generator=0, progress=progress_arg)


def test_the_default_follows_set_progress_then_the_variable_then_the_terminal(monkeypatch):
    """Not a terminal (pytest captures stderr): off; a Jupyter kernel: on; a terminal: on; ``MEANFIELD_PROGRESS=1``/``0`` overrides
    the terminal test, ``set_progress`` overrides the variable, ``set_progress(None)`` restores it. A value
    other than 0/1, or a non-bool to ``set_progress``, is refused in one line saying what is allowed."""
    assert progress.progress_default() is False
    kernel = types.SimpleNamespace(config={"IPKernelApp": {}})  # what a Jupyter kernel's shell holds
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: kernel))
    assert progress.progress_default() is True
    kernel.config = {}  # IPython in a terminal whose stderr is captured: no kernel, no terminal
    assert progress.progress_default() is False
    monkeypatch.setattr("sys.stderr", _Terminal())
    assert progress.progress_default() is True
    monkeypatch.setenv("MEANFIELD_PROGRESS", "0")
    assert progress.progress_default() is False
    mf.set_progress(True)
    assert progress.progress_default() is True
    mf.set_progress(None)
    assert progress.progress_default() is False
    monkeypatch.setenv("MEANFIELD_PROGRESS", "yes")
    with pytest.raises(
        ValueError, match=r"^MEANFIELD_PROGRESS must be 0 \(no progress bars\) or 1 \(bars\), got 'yes'$"
    ):
        progress.progress_default()
    with pytest.raises(TypeError, match="set_progress takes True, False or None, got 1"):
        mf.set_progress(1)


def test_simulate_shows_its_bar_in_a_terminal_and_not_into_a_pipe(monkeypatch, capsys):
    """``simulate(progress=None)``: no bar on a captured (non-terminal) stderr; on a terminal the bar
    ``simulate[euler]`` counts its 2 steps; ``set_progress(False)`` hides it there, ``progress=True`` shows it
    on the pipe, ``progress=False`` hides it on the terminal."""
    _run()
    assert capsys.readouterr().err == ""
    _run(True)
    assert "simulate[euler]" in capsys.readouterr().err
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    _run()
    assert "simulate[euler]" in terminal.getvalue() and "2/2" in terminal.getvalue()
    terminal.seek(0), terminal.truncate()
    _run(False)
    mf.set_progress(False)
    _run()
    assert terminal.getvalue() == ""


def test_a_call_inside_a_sweep_shows_no_bar_of_its_own(monkeypatch):
    """On a terminal, the ``simulate`` calls made by a sweep's ``run`` show no bar (the sweep's counts its 2
    runs); after a sweep interrupted by ``KeyboardInterrupt`` (its bar left open by the traceback) a ``simulate``
    shows its bar again. Negative control: ``run`` called directly shows ``simulate[euler]``."""
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)

    def run(a, seed):
        return {"x": _run().final.mean()}

    mf.sweep(run, {"a": [1, 2]}, seeds=[0])
    assert "sweep" in terminal.getvalue() and "2/2" in terminal.getvalue()
    assert "simulate[euler]" not in terminal.getvalue()
    run(1, 0)
    assert "simulate[euler]" in terminal.getvalue()

    def interrupted(a, seed):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as caught:
        mf.sweep(interrupted, {"a": [1]}, seeds=[0])
    terminal.seek(0), terminal.truncate()
    _run()
    assert "simulate[euler]" in terminal.getvalue()
    del caught


def test_an_undecided_bar_waits_before_drawing():
    """``progress=None`` gives a bar with the policy's delay (a quick call draws nothing), ``True`` one without
    (it draws at once)."""
    progress.DELAY = 1.5  # the fixture's monkeypatch puts 0 back afterwards
    mf.set_progress(True)
    with progress.progress_bar(None, total=1, file=io.StringIO()) as bar:
        assert bar.delay == 1.5 and not bar.disable
    with progress.progress_bar(True, total=1, file=io.StringIO()) as bar:
        assert bar.delay == 0.0 and not bar.disable
