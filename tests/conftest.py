"""Shared test set-up. OMP_WAIT_POLICY must be set before torch is imported (2-core CI machines)."""

import os
import re

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
    """Tests pass explicit generators; this pins the global RNG too, so no test depends on the run order. Its
    seed is one no test gives an optimizer or a sampler: with ``torch.manual_seed(0)`` here, ``Langevin(seed=0)``
    would draw the global stream's numbers (``meanfield.seeds.warn_if_global_seed`` says so)."""
    torch.manual_seed(GLOBAL_TEST_SEED)


GLOBAL_TEST_SEED = 20_261_206


# -- devices ---------------------------------------------------------------------------------------------------
# The tests that matter run once per device: ``cpu`` always, ``cuda`` where CUDA is available (skipped with a
# reason otherwise). The CUDA items carry the ``cuda`` marker, so ``pytest -m cuda`` runs exactly them
# (benchmarks/gpu.sh does). Known answers are the same on both; where a tolerance differs it is stated next
# to the assertion (float32 on CUDA: other reduction orders, so a few ulps instead of bit equality).

CUDA = torch.cuda.is_available()
DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not CUDA, reason="CUDA is not available here")]
    ),
]


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: the CUDA item of a device-parametrised test (pytest -m cuda)")


def pytest_make_parametrize_id(config, val, argname):
    """Test ids a command line can name: a string parameter with characters pytest would escape (``≤``,
    ``β``, a backslash) gets an id of plain ASCII instead (``≤`` → ``_``); pytest cannot select an escaped id
    such as ``[\\u2264]`` again, and mutation testing (docs/testing.md) runs tests by their ids."""
    if isinstance(val, str) and not (val.isascii() and "\\" not in val):
        return re.sub(r"[^A-Za-z0-9 _.,:=()<>+-]+", "_", val)
    return None


@pytest.fixture(params=DEVICES)
def device(request):
    """``torch.device("cpu")``, then ``torch.device("cuda")`` where CUDA is available (else skipped)."""
    return torch.device(request.param)


@pytest.fixture(autouse=True)
def _float32_matmuls_in_full_precision():
    """TF32 off for every test, whatever the process set before: float32 matmuls and convolutions on CUDA in
    full float32 precision (torch's default for matmuls, not for cuDNN convolutions), so the known answers
    and their float32 tolerances hold on an Ampere-or-later GPU. A test that wants TF32 turns it on itself
    and states the looser tolerance (a TF32 product keeps 10 mantissa bits: relative error ≈ 2⁻¹¹ per
    factor). Restored afterwards. On the CPU these flags change nothing."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def free_port():
    """``free_port()`` -> a free TCP port on loopback, for a process group's rendezvous (tests that spawn ranks)."""
    return _free_port


@pytest.fixture
def gloo_one(tmp_path):
    """A real gloo process group of one rank in this process (file rendezvous), destroyed afterwards."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
