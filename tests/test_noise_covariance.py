"""The noise sources are white: mean 0, variance 1, uncorrelated across entries, particles, replicas and steps.

Oracle: the covariance of ``ξ`` is ``I`` (``meanfield.studies.stats.whiteness``: grand mean, mean of ``ξ²``, the variance
of the sum of all entries, and every pairwise correlation with a Bonferroni z). Each draw laid out for the
check is two consecutive steps side by side (shape ``(2·B·M·d,)``), so correlations between steps count.

Sizes: n = 3000 draws of D = 2·2·4·3 = 48 entries. With z = 5 (false failure ≈ 5.7e-7 per statistic) the
check detects a variance off by ≈ 2 % (Gaussian; exactly for ±1 entries), a mean correlation between entries
of ≈ 0.003–0.005 (the variance of a particle mean ≈ 15 % too large), and any one pair correlated by ≈ 0.11
(each test asserts the detectable sizes it reaches). Negative controls: ±1 noise whose entries share random
bits, a step repeated, σ × 1.05 — each must fail.
"""

from __future__ import annotations

import math

import pytest
import torch

from meanfield import SDE, MeanFieldLangevin, _background, simulate
from meanfield.drift.potentials import Quadratic
from meanfield.stepping.brownian import BrownianIncrements, GaussianNoise, RademacherNoise
from meanfield.studies.stats import whiteness

SHAPE = (2, 4, 3)  # (B, M, d)
N_DRAWS = 3000
DT = 0.01


def pairs_of_steps(increments: torch.Tensor) -> torch.Tensor:
    """``(2n, *shape) -> (n, 2·numel)``: steps ``2j`` and ``2j + 1`` side by side."""
    n2 = increments.shape[0] // 2 * 2
    return increments[:n2].reshape(n2 // 2, -1)


def from_source(source, n_steps: int, scale: float = 1.0) -> torch.Tensor:
    return torch.stack([source.increment(k, scale).clone() for k in range(n_steps)])  # (n, *shape)


class SharedBits(RademacherNoise):
    """Negative control: one random byte serves two neighbouring groups of 8 entries (each bit used twice)."""

    def _draw(self, out, scale):
        self._bytes.random_(0, 256, generator=self.generator)
        half = self._bytes[: (self._bytes.numel() + 1) // 2].repeat_interleave(2)[: self._bytes.numel()]
        mask = 1 << torch.arange(8, dtype=torch.uint8)  # (8,) bit j of a byte
        bits = half.unsqueeze(-1).bitwise_and(mask).view(-1)[: out.numel()]
        out.copy_(bits.view(out.shape).bool().to(out.dtype) * (2 * scale) - scale)


class RepeatedStep(GaussianNoise):
    """Negative control: every odd step repeats the even one before it."""

    def _draw(self, out, scale):
        if self._n % 2 == 0:  # about to give an odd step: keep the buffer
            return
        super()._draw(out, scale)


def _sources():
    g = lambda: torch.Generator().manual_seed(11)  # noqa: E731
    return {
        "GaussianNoise": lambda: GaussianNoise(SHAPE, DT, g(), torch.float64, "cpu"),
        "GaussianNoise float32": lambda: GaussianNoise(SHAPE, DT, g(), torch.float32, "cpu"),
        "RademacherNoise": lambda: RademacherNoise(SHAPE, DT, g(), torch.float64, "cpu"),
        "RademacherNoise odd size": lambda: RademacherNoise((1, 5, 3), DT, g(), torch.float64, "cpu"),
        "BrownianIncrements.sample": lambda: BrownianIncrements.sample(2 * N_DRAWS, SHAPE, DT, generator=g()),
    }


@pytest.mark.parametrize("name", list(_sources()))
def test_noise_sources_are_white(name):
    """``increment(n, s)/s`` over 2n steps: white across entries and consecutive steps (see the module
    docstring for the detectable sizes), asked for with a scale ≠ 1 so that the scaling is checked too."""
    source = _sources()[name]()
    s = 0.37
    xi = from_source(source, 2 * N_DRAWS, s) / s
    check = whiteness(pairs_of_steps(xi))
    assert check.passed, check.failures
    assert check.detectable_mean_correlation < 0.005 and check.detectable_pair_correlation < 0.13
    if "Gaussian" in name or "Brownian" in name:
        assert check.detectable_variance < 0.03
        # dW(n) is sqrt(dt)·ξ
        assert torch.allclose(source.dW(2 * N_DRAWS - 1), source.increment(2 * N_DRAWS - 1, math.sqrt(DT)))


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda g: SharedBits(SHAPE, DT, g, torch.float64, "cpu"), "correlation"),
        (lambda g: RepeatedStep(SHAPE, DT, g, torch.float64, "cpu"), "correlation"),
    ],
    ids=["shared bits", "repeated step"],
)
def test_shared_bits_are_caught(make, words):
    """Negative controls: ±1 entries two of which share a random bit (each is still ±1 with mean 0 and
    variance 1), or a step that repeats the one before, fail the whiteness check."""
    source = make(torch.Generator().manual_seed(3))
    check = whiteness(pairs_of_steps(from_source(source, 2 * N_DRAWS)))
    assert not check.passed and any(words in f for f in check.failures), check.failures


def test_a_wrong_scale_is_caught():
    """Negative control: σ × 1.05 fails the variance statistic."""
    source = GaussianNoise(SHAPE, DT, torch.Generator().manual_seed(5), torch.float64, "cpu")
    check = whiteness(pairs_of_steps(from_source(source, 2 * N_DRAWS)) * 1.05)
    assert not check.passed and any("variance" in f for f in check.failures)


@pytest.mark.parametrize("source", ["gaussian", "brownian"])
def test_levy_areas_are_independent_of_the_increments(source):
    """``(ξ_n, H_n/sqrt(dt/12))`` side by side is white: ``H ~ N(0, dt/12)``, independent of ``dW`` and of
    the other entries and steps."""
    g = torch.Generator().manual_seed(7)
    n = 2 * N_DRAWS
    if source == "gaussian":
        noise = GaussianNoise(SHAPE, DT, g, torch.float64, "cpu")
        rows = [
            torch.cat([noise.increment(k).flatten(), noise.space_time_area(k).flatten()]) for k in range(n)
        ]
    else:
        noise = BrownianIncrements.sample(n, SHAPE, DT, generator=g, levy_area=True)
        rows = [
            torch.cat([noise.increment(k).flatten(), noise.space_time_area(k).flatten()]) for k in range(n)
        ]
    rows = torch.stack(rows)  # (n, 2·numel)
    rows[:, rows.shape[1] // 2 :] /= math.sqrt(DT / 12)
    check = whiteness(rows.reshape(N_DRAWS, -1))
    assert check.passed, check.failures
    rows[:, rows.shape[1] // 2 :] = rows[:, : rows.shape[1] // 2]  # negative control: H = ξ
    assert not whiteness(rows.reshape(N_DRAWS, -1)).passed


def test_coarsened_increments_are_white():
    """``coarsen(k)``: increments ``/sqrt(k·dt)`` and areas ``/sqrt(k·dt/12)`` are white, independent of each
    other and across coarse steps (the exact law of a Brownian path on the coarse grid)."""
    k = 4
    fine = BrownianIncrements.sample(
        2 * N_DRAWS * k, SHAPE, DT, generator=torch.Generator().manual_seed(8), levy_area=True
    )
    coarse = fine.coarsen(k)
    assert len(coarse) == 2 * N_DRAWS and math.isclose(coarse.dt, k * DT)
    dW = coarse.increments / math.sqrt(k * DT)
    H = coarse.H / math.sqrt(k * DT / 12)
    rows = torch.cat([dW.reshape(2 * N_DRAWS, -1), H.reshape(2 * N_DRAWS, -1)], 1)  # (2n, 2·numel)
    check = whiteness(rows.reshape(N_DRAWS, -1))
    assert check.passed, check.failures
    bad = BrownianIncrements(fine.increments, DT, fine.H * 2).coarsen(k)  # negative control: H too wide
    assert not whiteness((bad.H / math.sqrt(k * DT / 12)).reshape(N_DRAWS, -1)).passed


class _Recorded:
    """Mix-in: keeps a copy of the noise ``σ·dW`` each Euler move receives (one segment: background draws on)."""

    def euler_update_(self, t, x, dt, noise):
        self.seen.append(noise.clone())
        return super().euler_update_(t, x, dt, noise)


class RecordedSDE(_Recorded, SDE):
    seen: list


class RecordedLangevin(_Recorded, MeanFieldLangevin):
    seen: list


@pytest.mark.parametrize("prefetch", [False, True], ids=["serial", "background draws"])
@pytest.mark.parametrize(
    "kind",
    [
        "SDE additive",
        "SDE diagonal",
        "MeanFieldLangevin fused",
        "MeanFieldLangevin rademacher",
        "torchsde_euler",
        "heun",
        "srk",
    ],
)
def test_the_noise_that_reaches_the_state_is_white(monkeypatch, kind, prefetch):
    """Through ``simulate``: the noise ``σ·sqrt(dt)·ξ_n`` handed to each native Euler move (fused and generic
    moves, in one segment so that the background draws run), or with no drift the state increments of the
    torchsde methods: the ``ξ_n`` are white across entries and consecutive steps."""
    if prefetch:
        if kind in ("torchsde_euler", "heun", "srk"):
            pytest.skip("torchsde steppers do not prefetch")
        monkeypatch.setattr(_background, "OVERLAP_MIN", 0)
    sigma, n = 0.8, 2 * N_DRAWS
    x0 = torch.zeros(SHAPE, dtype=torch.float64)
    noise = "rademacher" if "rademacher" in kind else "gaussian"
    zero = lambda t, x: torch.zeros_like(x)  # noqa: E731
    if kind.startswith("SDE"):
        diffusion = (lambda t, x: sigma) if "additive" in kind else (lambda t, x: torch.full_like(x, sigma))
        system = RecordedSDE(zero, diffusion, noise="additive" if "additive" in kind else "diagonal")
    elif kind.startswith("MeanFieldLangevin"):
        system = RecordedLangevin(Quadratic(0.0), beta=sigma**2 / 2)
    if kind.startswith(("SDE", "MeanFieldLangevin")):
        system.seen = []
        simulate(system, x0, t1=n * DT, dt=DT, generator=3, noise=noise, check_every=10 * n)
        xi = torch.stack(system.seen) / (sigma * math.sqrt(DT))  # (n, B, M, d)
        if prefetch:  # the background draws did run
            assert system.seen and _background.pays(xi[0].numel())
    else:
        system = SDE(zero, lambda t, x: sigma, noise="additive")
        traj = simulate(system, x0, t1=n * DT, dt=DT, save_every=1, generator=3, solver=kind)
        xi = traj.states.diff(dim=0) / (sigma * math.sqrt(DT))  # (n, B, M, d)
    assert xi.shape == (n, *SHAPE)
    if noise == "rademacher":  # σ·sqrt(dt)·(±1)/(σ·sqrt(dt)) rounds at 1e-16: compare the signs
        assert torch.allclose(xi.abs(), torch.ones_like(xi), atol=1e-9)
        xi = xi.sign()
    check = whiteness(pairs_of_steps(xi))
    assert check.passed, check.failures


@pytest.mark.parametrize("shape", [(2, 8, 3), (1, 5, 3)])
def test_rademacher_entries_are_the_bits_of_the_drawn_bytes(shape):
    """Oracle: entry ``k`` of a draw is ``scale·(2·bit_{k mod 8}(byte_{⌊k/8⌋}) − 1)`` of the bytes the same
    generator gives (one bit per entry, read by shifts here, by a lookup table in the library), for two
    steps and two scales; negative control: the bits of the next bytes differ."""
    n = math.prod(shape)
    source = RademacherNoise(shape, DT, torch.Generator().manual_seed(3), torch.float64, "cpu")
    stream = torch.Generator().manual_seed(3)
    for step, scale in enumerate((1.0, 0.37)):
        raw = torch.empty((n + 7) // 8, dtype=torch.uint8).random_(0, 256, generator=stream)  # (⌈n/8⌉,)
        k = torch.arange(n)
        bits = (raw[k // 8].long() >> (k % 8)) & 1  # (n,)
        expected = (scale * (2.0 * bits.double() - 1.0)).reshape(shape)
        got = source.increment(step, scale)
        assert torch.equal(got, expected)
    assert not torch.equal(source.increment(1, 0.37), (1.0 - 2.0 * bits.double()).reshape(shape) * 0.37)
