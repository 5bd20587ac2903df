"""Shared test set-up. OMP_WAIT_POLICY must be set before torch is imported (2-core CI machines)."""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture
def gen():
    """A seeded CPU generator factory: ``gen(seed)``."""
    return lambda seed=0: torch.Generator().manual_seed(seed)


@pytest.fixture(autouse=True)
def _background_draws_whatever_the_threads(monkeypatch):
    """Tests that switch the background draws on (``OVERLAP_MIN = 0``) get them on any machine, also one
    where torch runs a single thread."""
    from meanfield import _background

    monkeypatch.setattr(_background, "MIN_THREADS", 1)


@pytest.fixture(autouse=True)
def _seed_global_rng():
    """Tests pass explicit generators; this pins the global RNG too, so no test depends on the run order."""
    torch.manual_seed(0)
