"""Tests of :mod:`meanfield.stepping.brownian`."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from meanfield import BrownianIncrements, MeanFieldLangevin, _background, get_solver, simulate
from meanfield.drift.potentials import (
    Quadratic,
)
from meanfield.stepping.brownian import GaussianNoise, NoiseSource, RademacherNoise
from meanfield.studies.stats import loglog_slope, whiteness

F64 = torch.float64


def close(actual, expected, rtol=1e-12, atol=1e-13):
    """``actual`` (tensor or array) equals ``expected`` in shape and within the tolerances (float64)."""
    a = actual.detach().double().numpy() if torch.is_tensor(actual) else np.asarray(actual, np.float64)
    e = expected.detach().double().numpy() if torch.is_tensor(expected) else np.asarray(expected, np.float64)
    return a.shape == e.shape and np.allclose(a, e, rtol=rtol, atol=atol)


def test_sample_draws_dw_then_h_from_the_generator_on_the_device_asked():
    """``sample(N, shape, dt, levy_area=True)``: ``dW ~ N(0, dt)`` then ``H ~ N(0, dt/12)`` from the same
    generator (a reference generator seeded alike: standard normals scaled by ``sqrt(dt)`` and
    ``sqrt(dt/12)``), both on the device asked for even under another default device
    (``torch.device("meta")``), in the dtype asked; an int seed is the same as a generator seeded with it."""
    N, shape, dt = 5, (2, 3, 1), 0.04
    ref = torch.Generator().manual_seed(7)
    z1 = torch.randn(N, *shape, generator=ref, dtype=F64)
    z2 = torch.randn(N, *shape, generator=ref, dtype=F64)
    with torch.device("meta"):
        inc = BrownianIncrements.sample(
            N, shape, dt, generator=torch.Generator().manual_seed(7), levy_area=True
        )
    assert inc.increments.device.type == "cpu" and inc.H.device.type == "cpu"
    assert close(inc.increments, z1 * math.sqrt(dt)) and close(inc.H, z2 * math.sqrt(dt / 12))
    assert len(inc) == N and inc.dt == dt and inc.shape == shape
    seeded = BrownianIncrements.sample(N, shape, dt, generator=np.int64(7), levy_area=True)
    assert torch.equal(seeded.increments, inc.increments) and torch.equal(seeded.H, inc.H)
    plain = BrownianIncrements.sample(N, shape, dt, generator=7)
    assert plain.H is None and torch.equal(plain.increments, inc.increments)
    f32 = BrownianIncrements.sample(N, shape, dt, generator=7, dtype=torch.float32, levy_area=True)
    ref32 = torch.Generator().manual_seed(7)
    w1, w2 = (torch.randn(N, *shape, generator=ref32) for _ in range(2))
    assert f32.increments.dtype == torch.float32 and f32.H.dtype == torch.float32
    assert close(f32.increments, w1 * math.sqrt(dt), rtol=1e-6, atol=1e-7)
    assert close(f32.H, w2 * math.sqrt(dt / 12), rtol=1e-6, atol=1e-7)
    assert not close(inc.H, z2 * math.sqrt(dt))  # negative control: H is not scaled like dW


def test_sample_refusals():
    """``sample`` checks ``n_steps`` (an int ≥ 1), ``dt`` (> 0) and the generator (no ``None``)."""
    with pytest.raises(ValueError, match=r"^n_steps must be ≥ 1, got 0$"):
        BrownianIncrements.sample(0, (1, 1, 1), 0.1, generator=0)
    with pytest.raises(TypeError, match=r"^n_steps must be an int, got float$"):
        BrownianIncrements.sample(2.0, (1, 1, 1), 0.1, generator=0)
    with pytest.raises(ValueError, match=r"^dt must be > 0, got -0\.1$"):
        BrownianIncrements.sample(2, (1, 1, 1), -0.1, generator=0)
    with pytest.raises(
        TypeError, match=r"must be a torch\.Generator, an int seed \(Python or numpy integer\), got NoneType$"
    ):
        BrownianIncrements.sample(2, (1, 1, 1), 0.1, generator=None)


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


MU, S, T, N_PATHS = 0.5, 0.8, 1.0, 4000


LEVELS = [2**4, 2**5, 2**6, 2**7, 2**8]  # number of steps on each grid


BAND = 0.15  # |fitted slope − declared order| allowed with 4000 paths and 5 grids


def _strong_errors(system, solver, fine: BrownianIncrements, x0, exact):
    errors, dts = [], []
    for n in LEVELS:
        path = fine.coarsen(len(fine) // n)
        xT = simulate(system, x0, t1=T, dt=T / n, solver=solver, brownian=path).final
        errors.append(float((xT - exact).abs().mean()))
        dts.append(T / n)
    return dts, errors


def test_euler_is_strong_order_one_under_additive_noise():
    a, beta, n_paths = 2.0, 0.5, 2000
    fine = BrownianIncrements.sample(
        16 * LEVELS[-1],
        (n_paths, 1, 1),
        T / (16 * LEVELS[-1]),
        generator=torch.Generator().manual_seed(12),
        levy_area=True,
    )
    system = MeanFieldLangevin(Quadratic(a), beta=beta)
    x0 = torch.full((n_paths, 1, 1), 1.5, dtype=torch.float64)
    reference = simulate(system, x0, t1=T, dt=fine.dt, solver="srk", brownian=fine).final
    dts, errors = _strong_errors(system, "euler", fine, x0, reference)
    slope = loglog_slope(dts, errors).value
    assert get_solver("euler").strong_order("additive") == 1.0
    assert abs(slope - 1.0) < BAND, (slope, errors)
    assert abs(slope - 0.5) > BAND  # negative control: the multiplicative-noise order is rejected


def test_sampled_increments_and_areas_are_torchs_draws_in_order_and_dtype():
    dt, shape = 0.25, (2, 3)
    inc = BrownianIncrements.sample(4, shape, dt, generator=torch.Generator().manual_seed(9), levy_area=True)
    g = torch.Generator().manual_seed(9)
    dW = torch.empty(4, *shape, dtype=torch.float64).normal_(0.0, math.sqrt(dt), generator=g)
    H = torch.empty(4, *shape, dtype=torch.float64).normal_(0.0, math.sqrt(dt / 12), generator=g)
    assert inc.H.dtype == torch.float64
    assert torch.equal(inc.increments, dW) and torch.equal(inc.H, H)
    assert not torch.equal(inc.H, dW * math.sqrt(1 / 12))  # negative control: the areas are a second draw


def test_gaussian_noise_draws_the_increment_then_the_area_even_when_the_area_is_asked_first():
    dt = 0.04
    noise = GaussianNoise((3, 2), dt, torch.Generator().manual_seed(2), torch.float64, "cpu")
    H0 = noise.space_time_area(0).clone()
    xi0 = noise.increment(0, math.sqrt(dt)).clone()
    g = torch.Generator().manual_seed(2)
    assert torch.equal(xi0, torch.empty(3, 2, dtype=torch.float64).normal_(0.0, math.sqrt(dt), generator=g))
    assert torch.equal(
        H0, torch.empty(3, 2, dtype=torch.float64).normal_(0.0, math.sqrt(dt / 12), generator=g)
    )


def test_rademacher_draw_into_a_strided_output_equals_the_contiguous_draw():
    def noise():
        return RademacherNoise((4, 5), 0.1, torch.Generator().manual_seed(3), torch.float64, "cpu")

    contiguous = torch.empty(4, 5, dtype=torch.float64)
    noise()._draw(contiguous, 2.0)
    strided = torch.zeros(5, 4, dtype=torch.float64).t()  # (4, 5), not contiguous
    noise()._draw(strided, 2.0)
    assert torch.equal(strided, contiguous)
    assert set(contiguous.unique().tolist()) == {-2.0, 2.0}
    g = torch.Generator().manual_seed(3)  # entry k is bit k mod 8 of byte k // 8
    byte = torch.empty(3, dtype=torch.uint8).random_(0, 256, generator=g)
    bits = [(int(byte[k // 8]) >> (k % 8)) & 1 for k in range(20)]
    assert contiguous.flatten().tolist() == [2.0 * (2 * b - 1) for b in bits]


def test_increments_of_the_wrong_kind_are_named_by_their_type():
    with pytest.raises(ValueError, match=r"shape \(N, \*noise_shape\), got list$"):
        BrownianIncrements([[0.0, 1.0]], 0.1)
    with pytest.raises(ValueError, match=r"got torch.Size\(\[3\]\)$"):
        BrownianIncrements(torch.zeros(3), 0.1)


F64_2, F32 = torch.float64, torch.float32


Z = 4.5  # z of the statistical checks: a false failure has probability ≈ 7e-6 per statistic


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _normals(seed: int, shape, scales, dtype=F64_2) -> list[torch.Tensor]:
    """The reference: ``normal_(0, s)`` draws of ``shape`` for each ``s`` in turn from one generator."""
    g = _gen(seed)
    return [torch.empty(shape, dtype=dtype).normal_(0.0, s, generator=g) for s in scales]


def _close(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> None:
    """``got`` equals ``want`` to ``atol + rtol·|want|`` entrywise (numpy), with the same shape and dtype."""
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=rtol, atol=atol)


def _prefetching(monkeypatch) -> None:
    """Every CPU draw may go to the background thread (conftest already allows one torch thread)."""
    monkeypatch.setattr(_background, "OVERLAP_MIN", 0)


class _Table(NoiseSource):
    """A concrete NoiseSource: ``increment(n, s) = s·ξ[n]`` from a table, each call recorded."""

    def __init__(self, xi, dt):
        super().__init__(list(xi.shape[1:]), dt)
        self.xi, self.calls = xi, []

    def increment(self, n, scale=1.0):
        self.calls.append((n, scale))
        return scale * self.xi[n]


def _bits_reference(seed: int, n: int, scales, dtype=F64_2) -> list[torch.Tensor]:
    """Entry ``k`` of each draw: ``s·(2·bit_{k mod 8}(byte_{⌊k/8⌋}) − 1)``, ``⌈n/8⌉`` bytes per draw."""
    g = _gen(seed)
    out = []
    k = torch.arange(n)
    for s in scales:
        raw = torch.empty((n + 7) // 8, dtype=torch.uint8).random_(0, 256, generator=g)
        bits = (raw[k // 8].long() >> (k % 8)) & 1
        out.append(s * (2.0 * bits.to(dtype) - 1.0))
    return out


def _zstat(samples: np.ndarray, expected: float) -> float:
    """``(mean − expected)/SE`` of i.i.d. samples."""
    return (samples.mean() - expected) / (samples.std(ddof=1) / math.sqrt(samples.size))


def _brownian_moment_checks(dW: np.ndarray, H: np.ndarray, dt: float) -> list[float]:
    """z statistics of the closed-form moments of ``S`` independent paths of ``N`` steps (``dW``, ``H`` of
    shape ``(N, S)``): increments ``E = 0``, ``Var = dt``, areas ``Var = dt/12``, ``Cov(dW, H) = 0``; the
    path ``Var W_n = n·dt``, ``Cov(W_m, W_n) = min(m, n)·dt``; the bridge ``B_n = W_n − (n/N)·W_N``:
    ``Var B_n = dt·n(N − n)/N``, ``Cov(B_m, B_n) = dt·m(N − n)/N`` for ``m ≤ n``."""
    N = dW.shape[0]
    W = BrownianIncrements(torch.from_numpy(dW), dt).path.numpy()  # (N + 1, S)
    B = W - (np.arange(N + 1) / N)[:, None] * W[N]
    m, n = N // 4, 3 * N // 4
    return [
        _zstat(dW[0], 0.0),
        _zstat(dW[1] ** 2, dt),
        _zstat(H[2] ** 2, dt / 12),
        _zstat(dW[3] * H[3], 0.0),
        _zstat(W[n] ** 2, n * dt),
        _zstat(W[m] * W[n], m * dt),
        _zstat(B[N // 2] ** 2, dt * (N // 2) * (N - N // 2) / N),
        _zstat(B[m] * B[n], dt * m * (N - n) / N),
    ]


def _area(W: np.ndarray, lo: int, hi: int, u: float) -> np.ndarray:
    """``1/T ∫_a^b (W_s − W_a − (s − a)/T·ΔW) ds`` of the piecewise-linear path through ``W[lo..hi]`` (grid
    step ``u``): the trapezoid rule is exact for it."""
    T = (hi - lo) * u
    seg = W[lo : hi + 1]
    integral = u * (seg[:-1] + seg[1:]).sum(0) / 2
    return (integral - W[lo] * T) / T - (W[hi] - W[lo]) / 2


def test_noise_source_base_stores_the_grid_and_reads_dw_at_scale_sqrt_dt():
    """``NoiseSource.__init__``: ``shape`` a tuple (from a list), ``dt`` and ``sqrt_dt = math.sqrt(dt)``;
    ``dW(n)`` is ``increment(n, sqrt_dt)`` (the call recorded, the value ``sqrt(dt)·ξ_n`` by hand); the
    defaults: Gaussian, no prefetching (``prefetches``/``will_prefetch`` false, ``prefetch``/``settle`` do
    nothing and return None). The class itself is abstract."""
    xi = torch.randn(3, 2, 4, generator=_gen(1), dtype=F64_2)
    src = _Table(xi, 0.09)
    assert src.shape == (2, 4) and type(src.shape) is tuple
    assert src.dt == 0.09 and src.sqrt_dt == math.sqrt(0.09)
    got = src.dW(2)
    assert src.calls == [(2, math.sqrt(0.09))]
    assert torch.equal(got, math.sqrt(0.09) * xi[2])
    assert src.gaussian is True and NoiseSource.gaussian is True
    assert src.prefetches is False
    assert src.will_prefetch(0) is False and src.will_prefetch(1) is False
    assert src.prefetch(0) is None and src.prefetch(1, 0.5) is None and src.settle() is None
    assert src.calls == [(2, math.sqrt(0.09))]  # the hints drew nothing
    with pytest.raises(TypeError, match="abstract"):
        NoiseSource((1,), 0.1)


def test_gaussian_noise_draws_each_step_once_in_order_at_its_scale():
    """``increment(n, s)`` for ``n = 0, 1, 2`` is torch's ``normal_(0, s)`` of the generator in order (replayed
    by hand), in the dtype asked; ``dW(n)`` is the draw at ``sqrt(dt)``. Negative control: another seed."""
    shape, dt = (3, 5), 0.04
    scales = (0.3, 1.0, math.sqrt(dt))
    src = GaussianNoise(list(shape), dt, _gen(7), F64_2, "cpu")
    assert src.shape == shape and src.dt == dt and src.sqrt_dt == 0.2
    ref = _normals(7, shape, scales)
    assert torch.equal(src.increment(0, 0.3), ref[0])
    assert torch.equal(src.increment(1), ref[1])  # the default scale is 1
    assert torch.equal(src.dW(2), ref[2])
    assert src.increment(2, src.sqrt_dt).dtype == F64_2
    f32 = GaussianNoise(shape, dt, _gen(7), F32, "cpu")
    got = f32.increment(0, 0.3)
    assert got.dtype == F32 and torch.equal(got, _normals(7, shape, (0.3,), F32)[0])
    other = GaussianNoise(shape, dt, _gen(8), F64_2, "cpu")
    assert not torch.equal(other.increment(0, 0.3), ref[0])


@pytest.mark.parametrize(
    ("asked", "after", "first"),
    [(1, -1, None), (2, 0, 0), (0, 1, 1)],
    ids=["first-not-0", "skip", "back"],
)
def test_gaussian_noise_refuses_steps_out_of_order_word_for_word(asked, after, first):
    """Only ``n = last + 1`` (or ``last`` again) may be asked for: a first step other than 0, a skipped step
    and an earlier step are refused with the step asked and the last one drawn."""
    src = GaussianNoise((2,), 0.1, _gen(0), F64_2, "cpu")
    if first is not None:
        for n in range(first + 1):
            src.increment(n)
    with pytest.raises(
        RuntimeError,
        match=rf"^noise drawn from a generator must be read in step order: asked for step {asked} after step "
        rf"{after}$",
    ):
        src.increment(asked)


def test_will_prefetch_only_the_next_step_once_the_callers_update_left_the_generator_alone(monkeypatch):
    """``will_prefetch(n)``: false before two draws have shown that nothing else drew between them; then true
    for ``last + 1`` only, false while a prefetch is pending. A chain of prefetched steps (scale known, scale 1
    then read at another scale) gives the serial draws bit for bit, and leaves the generator where the serial
    run leaves it."""
    _prefetching(monkeypatch)
    shape = (6, 5)  # ≥ 16 numbers: a scale-1 draw times s is normal_(0, s) bit for bit
    g = _gen(5)
    src = GaussianNoise(shape, 0.1, g, F64_2, "cpu")
    assert src.will_prefetch(0) is False  # nothing verified yet
    src.increment(0, 0.3)
    assert src._state_after is not None and src.will_prefetch(1) is False  # one draw: not verified yet
    src.increment(1, 0.3)
    assert src._verified is True and src._shared is False
    assert [src.will_prefetch(n) for n in (0, 1, 2, 3)] == [False, False, True, False]
    src.prefetch(3)  # not the next step: nothing starts
    assert src._pending is None
    src.prefetch(2, 0.3)
    assert src._pending is not None and src._pending[0] == 2 and src._pending[1] == 0.3
    assert src.will_prefetch(2) is False  # one pending already
    got = [src.increment(2, 0.3).clone()]
    assert src._pending is None
    src.prefetch(3, 1.0)  # the caller does not know the scale: drawn at 1, read at 0.7
    got.append(src.increment(3, 0.7).clone())
    src.prefetch(4, 0.5)  # a wrong guess: rescaled by 2/0.5, equal to rounding
    got.append(src.increment(4, 2.0).clone())
    src.prefetch(5, 0.5)  # drawn at 0.5, read at 1: multiplied by 1/0.5
    got.append(src.increment(5, 1.0).clone())
    ref = _normals(5, shape, (0.3, 0.3, 0.3, 0.7, 2.0, 1.0))
    assert torch.equal(got[0], ref[2]) and torch.equal(got[1], ref[3])
    _close(got[2], ref[4], rtol=1e-15, atol=0)
    _close(got[3], ref[5], rtol=1e-15, atol=0)
    assert (got[2] - ref[4] / 2.0).abs().max() > 0.1  # negative control: the rescale matters
    serial = _gen(5)
    for _ in range(6):
        torch.empty(shape, dtype=F64_2).normal_(generator=serial)
    assert torch.equal(g.get_state(), serial.get_state())


def test_a_shared_source_never_prefetches_even_if_marked_verified(monkeypatch):
    """``will_prefetch`` checks ``_shared`` on its own (a defensive clause: the two flags are set together in
    normal use): a source marked shared declines although verified; unmarked it accepts (control)."""
    _prefetching(monkeypatch)
    src = GaussianNoise((4, 4), 0.1, _gen(9), F64_2, "cpu")
    src.increment(0)
    src._verified, src._shared = True, True
    assert src.will_prefetch(1) is False
    src._shared = False
    assert src.will_prefetch(1) is True


def test_an_area_cannot_follow_a_prefetch_of_the_next_step_but_a_prefetched_step_has_its_area(monkeypatch):
    """With step ``n + 1`` prefetched, ``space_time_area(n)`` is refused word for word; ``space_time_area(n +
    1)`` reads the prefetched step (drawn at ``sqrt(dt)``) and then draws its area: the serial stream."""
    _prefetching(monkeypatch)
    dt, shape = 0.04, (4, 5)
    src = GaussianNoise(shape, dt, _gen(13), F64_2, "cpu")
    src.increment(0, 0.2)
    src.increment(1, 0.2)
    src.prefetch(2, 0.2)
    with pytest.raises(
        RuntimeError, match=r"^the Lévy area of a step must be asked for before the next step is prefetched$"
    ):
        src.space_time_area(1)
    H2 = src.space_time_area(2)
    ref = _normals(13, shape, (0.2, 0.2, 0.2, math.sqrt(dt / 12)))
    assert torch.equal(src.increment(2, 0.2), ref[2]) and torch.equal(H2, ref[3])


def test_rademacher_is_not_gaussian_has_no_areas_and_keeps_its_dtype():
    """``gaussian`` is false (Gaussian noise's is true); areas are refused with the class's name; float32
    entries are exactly ``±float32(s)``; the sign table is ``2·bit − 1`` for all 256 bytes."""
    src = RademacherNoise((2, 5), 0.1, _gen(1), F32, "cpu")
    assert src.gaussian is False and RademacherNoise.gaussian is False and GaussianNoise.gaussian is True
    got = src.increment(0, 0.37)
    assert got.dtype == F32 and torch.equal(got.reshape(-1), _bits_reference(1, 10, (0.37,), F32)[0])
    with pytest.raises(ValueError, match=r"^RademacherNoise has no space-time Lévy area; use Gaussian noise"):
        src.space_time_area(0)
    b = torch.arange(256)
    table = torch.stack([((b >> j) & 1) * 2 - 1 for j in range(8)], 1).to(F32)
    assert torch.equal(src._signs, table) and src._bytes.shape == (2,) and src._bytes.dtype == torch.uint8


def test_brownian_increments_keep_their_tensors_and_read_them_at_any_scale():
    """The constructor keeps ``dW`` and ``H`` themselves, ``shape = dW.shape[1:]``, ``dt`` as a float;
    ``increment(n, sqrt_dt)`` is the stored row itself (a view, no copy), ``increment(n, s)`` the row times
    ``s/sqrt(dt)`` (numpy reference), ``dW(n)`` the row; ``space_time_area(n)`` is ``H[n]``; ``len`` is N."""
    dW = torch.randn(4, 2, 3, generator=_gen(2), dtype=F64_2)
    H = torch.randn(4, 2, 3, generator=_gen(3), dtype=F64_2)
    inc = BrownianIncrements(dW, 1, H)
    assert inc.increments is dW and inc.H is H and len(inc) == 4
    assert inc.shape == (2, 3) and inc.dt == 1.0 and type(inc.dt) is float and inc.sqrt_dt == 1.0
    inc = BrownianIncrements(dW, 0.25, H)
    row = inc.increment(2, 0.5)
    assert row.data_ptr() == dW[2].data_ptr() and torch.equal(row, dW[2])
    assert inc.dW(1).data_ptr() == dW[1].data_ptr()
    np.testing.assert_allclose(inc.increment(3).numpy(), dW[3].numpy() / 0.5, rtol=1e-15)
    np.testing.assert_allclose(inc.increment(0, 0.1).numpy(), dW[0].numpy() * 0.2, rtol=1e-15)
    assert torch.equal(inc.space_time_area(3), H[3])
    assert inc.gaussian is True and inc.prefetches is False and inc.will_prefetch(0) is False


def test_brownian_increments_without_areas_refuse_them_by_name():
    inc = BrownianIncrements(torch.zeros(2, 1), 0.1)
    assert inc.H is None
    with pytest.raises(
        ValueError,
        match=r"^BrownianIncrements has no space-time Lévy area; use Gaussian noise from a generator or "
        r"BrownianIncrements\.sample\(\.\.\., levy_area=True\)$",
    ):
        inc.space_time_area(0)


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((torch.zeros(3, 2), 0.0), ValueError, r"^dt must be > 0, got 0\.0$"),
        ((torch.zeros(3, 2), "0.1"), TypeError, r"^dt must be a real number, got str$"),
        ((torch.zeros(3, 2), math.inf), ValueError, r"^dt must be finite, got inf$"),
        (
            (np.zeros((3, 2)), 0.1),
            ValueError,
            r"^dW must be a floating-point tensor of shape \(N, \*noise_shape\), got \(3, 2\)$",
        ),
        (
            (torch.zeros(3), 0.1),
            ValueError,
            r"^dW must be a floating-point tensor .*got torch\.Size\(\[3\]\)$",
        ),
        (
            (torch.zeros(3, 2, dtype=torch.int64), 0.1),
            ValueError,
            r"^dW must be .*got torch\.Size\(\[3, 2\]\)$",
        ),
        (
            (torch.zeros(3, 2), 0.1, torch.zeros(3, 1)),
            ValueError,
            r"^H must have the shape of dW \(3, 2\), got torch\.Size\(\[3, 1\]\)$",
        ),
        (
            (torch.zeros(3, 2), 0.1, [[0.0, 0.0]]),
            ValueError,
            r"^H must have the shape of dW \(3, 2\), got \[\[0\.0, 0\.0\]\]$",
        ),
    ],
    ids=["dt-zero", "dt-str", "dt-inf", "numpy", "1d", "int", "H-shape", "H-list"],
)
def test_brownian_increments_refuse_bad_arguments_word_for_word(args, error, message):
    """Each check of the constructor: ``dt`` (> 0, finite, real), ``dW`` (a floating tensor of ≥ 2
    dimensions; a non-tensor's shape or type name), ``H`` (a tensor of ``dW``'s shape)."""
    with pytest.raises(error, match=message):
        BrownianIncrements(*args)


def test_sample_defaults_float64_cpu_no_areas_and_takes_a_list_shape():
    """``sample`` without options: float64 on the CPU, no areas, ``normal_(0, sqrt(dt))`` of the seed."""
    inc = BrownianIncrements.sample(3, [2, 2], 0.16, generator=5)
    ref = torch.empty(3, 2, 2, dtype=F64_2).normal_(0.0, 0.4, generator=_gen(5))
    assert inc.H is None and inc.increments.dtype == F64_2 and inc.increments.device.type == "cpu"
    assert torch.equal(inc.increments, ref) and inc.dt == 0.16 and inc.shape == (2, 2)
    areas = BrownianIncrements.sample(3, (2, 2), 0.16, generator=5, levy_area=True)
    g = _gen(5)
    dW = torch.empty(3, 2, 2, dtype=F64_2).normal_(0.0, 0.4, generator=g)
    H = torch.empty(3, 2, 2, dtype=F64_2).normal_(0.0, math.sqrt(0.16 / 12), generator=g)
    assert torch.equal(areas.increments, dW) and torch.equal(areas.H, H)  # H: the same generator, after dW
    with pytest.raises(ValueError, match=r"^generator is on cpu, but the numbers are drawn on meta"):
        BrownianIncrements.sample(3, (2,), 0.1, generator=_gen(0), device="meta")


def test_sample_refuses_bad_steps_dt_and_a_missing_generator_word_for_word():
    """``sample`` checks ``n_steps`` (an int ≥ 1), ``dt`` (> 0) and the generator (``None`` refused)."""
    with pytest.raises(ValueError, match=r"^n_steps must be ≥ 1, got 0$"):
        BrownianIncrements.sample(0, (1,), 0.1, generator=0)
    with pytest.raises(TypeError, match=r"^n_steps must be an int, got float$"):
        BrownianIncrements.sample(2.0, (1,), 0.1, generator=0)
    with pytest.raises(ValueError, match=r"^dt must be > 0, got -0\.5$"):
        BrownianIncrements.sample(2, (1,), -0.5, generator=0)
    with pytest.raises(
        TypeError,
        match=r"^generator must be a torch\.Generator, an int seed \(Python or numpy integer\), got NoneType$",
    ):
        BrownianIncrements.sample(2, (1,), 0.1, generator=None)
    assert len(BrownianIncrements.sample(1, (1,), 0.1, generator=0)) == 1  # control: the smallest accepted


def test_sampled_paths_and_bridges_have_the_brownian_moments():
    """``sample(N, (S,), dt, levy_area=True)``: ``S = 40000`` paths of ``N = 16`` steps, eight closed-form
    moments (see ``_brownian_moment_checks``) within ``Z·SE``. Smallest detectable error: a variance off by
    ``Z·sqrt(2/S) ≈ 3.2 %``, a correlation of ``≈ 0.023``. Negative controls: increments 10 % too wide, areas
    with the variance of ``dt`` instead of ``dt/12``, and a path made of increments repeated in pairs (its
    covariances wrong) each fail."""
    N, S, dt = 16, 40000, 0.05
    inc = BrownianIncrements.sample(N, (S,), dt, generator=17, levy_area=True)
    dW, H = inc.increments.numpy(), inc.H.numpy()
    z = _brownian_moment_checks(dW, H, dt)
    assert max(abs(v) for v in z) < Z, z
    assert max(abs(v) for v in _brownian_moment_checks(1.1 * dW, H, dt)) > Z
    assert abs(_brownian_moment_checks(dW, H * math.sqrt(12), dt)[2]) > Z
    paired = np.repeat(dW[::2], 2, axis=0)  # w_{2j+1} = w_{2j}: each step still N(0, dt)
    assert abs(_brownian_moment_checks(paired, H, dt)[1]) < Z
    assert max(abs(v) for v in _brownian_moment_checks(paired, H, dt)[4:]) > Z


@pytest.mark.parametrize("k", [1, 2, 4])
def test_coarsen_sums_increments_and_combines_areas_exactly(k):
    """An exact Brownian-like path on a super-fine grid (piecewise linear through ``L = 5`` points per fine
    step): its fine increments and areas (trapezoid integrals), coarsened by ``k``, equal the increments and
    areas of the same path measured directly on the coarse grid (to 1e-12); ``dt`` becomes ``k·dt``; ``k = 1``
    changes nothing. Negative control: areas measured on the coarse grid without the fine areas differ."""
    N, L, h = 8, 5, 0.125
    u = h / L
    steps = np.random.default_rng(3).normal(0.0, math.sqrt(u), size=(N * L, 2, 3))
    W = np.concatenate([np.zeros((1, 2, 3)), np.cumsum(steps, 0)])  # (N·L + 1, 2, 3)
    w = np.stack([W[(j + 1) * L] - W[j * L] for j in range(N)])
    Hf = np.stack([_area(W, j * L, (j + 1) * L, u) for j in range(N)])
    coarse = BrownianIncrements(torch.from_numpy(w), h, torch.from_numpy(Hf)).coarsen(k)
    assert len(coarse) == N // k and coarse.dt == k * h and coarse.shape == (2, 3)
    want_w = np.stack([W[(j + 1) * k * L] - W[j * k * L] for j in range(N // k)])
    want_H = np.stack([_area(W, j * k * L, (j + 1) * k * L, u) for j in range(N // k)])
    np.testing.assert_allclose(coarse.increments.numpy(), want_w, rtol=0, atol=1e-12)
    np.testing.assert_allclose(coarse.H.numpy(), want_H, rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        coarse.increments.numpy(), w.reshape(N // k, k, 2, 3).sum(1), rtol=0, atol=1e-12
    )
    if k > 1:
        lost = BrownianIncrements(torch.from_numpy(w), h, torch.zeros(N, 2, 3, dtype=F64_2)).coarsen(k)
        assert np.abs(lost.H.numpy() - want_H).max() > 1e-3


def test_coarsen_without_areas_and_its_refusals():
    """Without areas the coarse source has none; ``k`` must be an int ≥ 1 that divides N (each refusal word
    for word)."""
    dW = torch.randn(6, 2, generator=_gen(1), dtype=F64_2)
    coarse = BrownianIncrements(dW, 0.25).coarsen(3)
    assert (
        coarse.H is None and coarse.dt == 0.75 and torch.equal(coarse.increments, dW.reshape(2, 3, 2).sum(1))
    )
    inc = BrownianIncrements(dW, 0.25)
    with pytest.raises(
        ValueError, match=r"^cannot coarsen 6 steps by k=4: k must divide the number of steps$"
    ):
        inc.coarsen(4)
    with pytest.raises(ValueError, match=r"^k must be ≥ 1, got 0$"):
        inc.coarsen(0)
    with pytest.raises(TypeError, match=r"^k must be an int, got float$"):
        inc.coarsen(2.0)
    assert len(inc.coarsen(6)) == 1 and len(inc.coarsen(2)) == 3


def test_pre_drawn_increments_say_what_they_hold():
    b = BrownianIncrements.sample(100, (4, 3), 0.01, generator=5)
    assert repr(b) == "BrownianIncrements: 100 steps of dt = 0.01 (t ∈ [0, 1]), noise shape (4, 3), float64"
    with_areas = BrownianIncrements.sample(10, (2,), 0.5, generator=5, levy_area=True, dtype=torch.float32)
    assert repr(with_areas).endswith("noise shape (2,), float32, with Lévy areas")


def test_a_prefetch_at_scale_zero_can_be_read_at_another_scale(monkeypatch):
    """A step prefetched at scale 0 (a β schedule that is 0 there, computed at a time a rounding away from the
    one the step reads) and read at scale 0.4 gives 0.4·ξ, the serial draw, instead of dividing by 0; read at 0
    it is 0. The generator ends where the serial run leaves it."""
    _prefetching(monkeypatch)
    shape = (6, 5)
    g = _gen(5)
    src = GaussianNoise(shape, 0.1, g, F64_2, "cpu")
    src.increment(0, 0.3)
    src.increment(1, 0.3)
    src.prefetch(2, 0.0)
    got = src.increment(2, 0.4).clone()
    src.prefetch(3, 0.0)
    zero = src.increment(3, 0.0).clone()
    ref = _normals(5, shape, (0.3, 0.3, 0.4, 0.0))
    _close(got, ref[2], rtol=1e-15, atol=0)
    assert torch.equal(zero, torch.zeros(shape, dtype=F64_2)) and got.abs().max() > 0.1
    serial = _gen(5)
    for _ in range(4):
        torch.empty(shape, dtype=F64_2).normal_(generator=serial)
    assert torch.equal(g.get_state(), serial.get_state())
