"""Tests of :mod:`meanfield._background`."""

from __future__ import annotations

import math
import threading

import pytest
import torch

from meanfield import _background, simulate
from meanfield.drift.phase_space import KineticMeanFieldLangevin
from meanfield.drift.potentials import DoubleWell, QuadraticInteraction
from meanfield.stepping.brownian import GaussianNoise, RademacherNoise
from meanfield.stepping.solvers.splittings import SPLITTINGS

F64 = torch.float64


SCHEMES = sorted(SPLITTINGS)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_background_draw_gives_the_same_run(scheme, monkeypatch):
    """With the next step's noise drawn in the background (OVERLAP_MIN = 0) the run and the generator's final
    state are bit-identical to the serial run (OVERLAP_MIN = ∞)."""
    from meanfield import _background

    system = KineticMeanFieldLangevin(DoubleWell(), QuadraticInteraction(0.5), friction=1.0, beta=0.4)
    z0 = torch.randn(2, 50, 4, dtype=F64, generator=torch.Generator().manual_seed(3))
    out, submitted = [], []
    submit = _background.submit
    monkeypatch.setattr(_background, "submit", lambda *a: submitted.append(1) or submit(*a))
    for overlap_min in (0, math.inf):
        monkeypatch.setattr(_background, "OVERLAP_MIN", overlap_min)
        g = torch.Generator().manual_seed(4)
        out.append(
            (
                simulate(system, z0, t1=2.0, dt=0.05, solver=scheme, generator=g, save_every=7).states,
                g.get_state(),
            )
        )
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])
    assert len(submitted) > 20  # the first run did draw in the background


def test_a_background_task_returns_its_value_or_reraises_its_error_in_a_named_daemon_thread():

    from meanfield import _background

    assert _background.submit(lambda a, b: a + b, 2, 3).result() == 5

    def fails():
        raise KeyError("inside the draw")

    pending = _background.submit(fails)
    with pytest.raises(KeyError, match="inside the draw"):
        pending.result()
    with pytest.raises(KeyError):  # asked again: the same outcome
        pending.result()
    workers = [t for t in threading.enumerate() if t.name == "meanfield-draw"]
    assert len(workers) == 1 and workers[0].daemon  # a daemon: it never keeps the interpreter alive


F64_2, F32 = torch.float64, torch.float32


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_prefetches_needs_a_cpu_float32_or_float64_buffer_of_at_least_overlap_min_numbers(monkeypatch):
    """``prefetches``: CPU, float32/float64 (where a scale-1 draw times ``s`` is ``normal_(0, s)``), and
    ``_background.pays(numel)``: at ``numel = OVERLAP_MIN`` yes, one fewer no; float16/bfloat16 or the meta
    device never."""
    shape = (4, 3)
    monkeypatch.setattr(_background, "OVERLAP_MIN", 12)
    assert GaussianNoise(shape, 0.1, _gen(0), F64_2, "cpu").prefetches is True
    assert GaussianNoise(shape, 0.1, _gen(0), F32, "cpu").prefetches is True
    assert RademacherNoise(shape, 0.1, _gen(0), F64_2, "cpu").prefetches is True
    assert GaussianNoise(shape, 0.1, _gen(0), torch.float16, "cpu").prefetches is False
    assert GaussianNoise(shape, 0.1, _gen(0), torch.bfloat16, "cpu").prefetches is False
    assert GaussianNoise(shape, 0.1, _gen(0), F64_2, "meta").prefetches is False
    monkeypatch.setattr(_background, "OVERLAP_MIN", 13)
    assert GaussianNoise(shape, 0.1, _gen(0), F64_2, "cpu").prefetches is False
    monkeypatch.setattr(_background, "MIN_THREADS", 10**6)  # torch may not use enough threads
    monkeypatch.setattr(_background, "OVERLAP_MIN", 0)
    assert GaussianNoise(shape, 0.1, _gen(0), F64_2, "cpu").prefetches is False
