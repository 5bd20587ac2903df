"""Whole-module tests of :mod:`meanfield.metrics.wasserstein`: every public function and method, the private
helpers they call, every argument (defaults included), every branch and every error message.

Values are checked against independent answers: POT (``ot.emd2``, ``ot.wasserstein_1d``,
``ot.sliced_wasserstein_distance`` with directions drawn here), ``scipy.stats.wasserstein_distance``, sorted
samples by hand in NumPy, a dense NumPy log-domain Sinkhorn iterated to its fixed point, ``scipy.linalg.sqrtm``
for the Bures–Wasserstein formula, ``scipy.integrate.quad`` and closed forms (point masses, translations).
Everything here is deterministic (fixed seeds, exact or converged answers), so the tolerances are round-off or
the stated convergence error; no test is statistical. KeOps and GeomLoss paths are not exercised (CPU torch only).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import re
import warnings

import numpy as np
import ot
import pytest
import scipy.linalg
import scipy.special
import scipy.stats
import torch
from scipy.integrate import quad
from scipy.spatial.distance import cdist
from scipy.special import logsumexp

import meanfield.metrics.wasserstein as W
from meanfield.metrics.wasserstein import (
    Discrete,
    Law1d,
    Normal,
    SinkhornResult,
    Uniform,
    WassersteinResult,
    resolve_method,
    sinkhorn_divergence,
    w1,
    w2,
    w2_gaussian,
    w2_squared,
    wasserstein,
    wasserstein_to_law,
)

DT = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed), dtype=DT)


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(*shape, generator=_gen(seed), dtype=DT)


def _norm(w: torch.Tensor) -> np.ndarray:
    w = w.double().numpy()
    return w / w.sum(-1, keepdims=True)


def _exactly(message: str) -> str:
    """A ``match`` pattern for the whole message, character for character."""
    return "^" + re.escape(message) + "$"


def _sorted_wpp(u: np.ndarray, v: np.ndarray, p: int) -> float:
    """``W_p^p`` of two equal-size 1-D samples by hand: the mean of ``|u_(i) − v_(i)|^p``."""
    return float(np.mean(np.abs(np.sort(u) - np.sort(v)) ** p))


def _directions(d: int, L: int, seed: int) -> np.ndarray:
    """``L`` unit directions in R^d drawn as the module documents (torch normal draws, seeded), ``(L, d)``."""
    t = torch.randn(L, d, generator=_gen(seed), dtype=DT).numpy()
    return t / np.linalg.norm(t, axis=1, keepdims=True)


# ---------------------------------------------------------------------------------------------------------
# Module constants and the result class


def test_documented_constants_and_exports():
    """The thresholds and defaults the docstrings state (``EXACT_MAX_POINTS`` 2048, ``SINKHORN_MAX_POINTS``
    20 000, scaling 0.7, tol 0.1, 1000 updates, a slice budget of 2^18 values) and the public names."""
    assert W.EXACT_MAX_POINTS == 2048 and W.SINKHORN_MAX_POINTS == 20_000
    assert W.SINKHORN_SCALING == 0.7 and W.SINKHORN_TOL == 0.1 and W.SINKHORN_MAX_ITER == 1000
    assert W._SLICE_BUDGET == 262_144
    assert set(W.METHODS) == {"1d", "exact", "sliced", "sinkhorn"}
    assert list(W.METHODS) == ["1d", "exact", "sliced", "sinkhorn"]
    assert W.METHODS["1d"] is W._method_1d and W.METHODS["exact"] is W._method_exact
    assert W.METHODS["sliced"] is W._method_sliced and W.METHODS["sinkhorn"] is W._method_sinkhorn
    assert sorted(W.__all__) == sorted(
        [
            "EXACT_MAX_POINTS",
            "METHODS",
            "SINKHORN_MAX_POINTS",
            "SINKHORN_SCALING",
            "SINKHORN_TOL",
            "SinkhornResult",
            "Law1d",
            "Discrete",
            "Normal",
            "Uniform",
            "WassersteinResult",
            "w1",
            "w2",
            "w2_gaussian",
            "w2_squared",
            "wasserstein",
            "resolve_method",
            "sinkhorn_divergence",
            "wasserstein_to_law",
        ]
    )
    for name in W.__all__:
        assert hasattr(W, name), name


def test_wasserstein_result_value_and_squared_by_hand():
    """``value = max(cost, 0)^{1/p}``, ``squared = value²``; ``backend`` defaults to ``None``; frozen."""
    cost = torch.tensor([4.0, 0.25, -1e-9], dtype=DT)
    r2 = WassersteinResult(cost=cost, p=2, method="exact")
    assert r2.backend is None
    assert torch.equal(r2.value, torch.tensor([2.0, 0.5, 0.0], dtype=DT))
    assert torch.allclose(r2.squared, torch.tensor([4.0, 0.25, 0.0], dtype=DT), rtol=1e-15, atol=0)
    r1 = WassersteinResult(cost=cost, p=1, method="1d", backend="torch")
    assert torch.equal(r1.value, torch.tensor([4.0, 0.25, 0.0], dtype=DT))
    assert torch.equal(r1.squared, torch.tensor([16.0, 0.0625, 0.0], dtype=DT))
    assert r1.backend == "torch" and r1.method == "1d" and r1.p == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        r1.p = 2  # type: ignore[misc]
    s = SinkhornResult(divergence=cost, epsilon=cost, iterations=3, converged=None, backend="torch")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.iterations = 4  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------------------
# Argument handling: p, clouds, weights, shapes


@pytest.mark.parametrize("bad", [3, 0, -1, 1.5, True, False, "2", None])
def test_p_must_be_one_or_two(bad):
    """``_check_p``: anything but 1 or 2 (bools included) is refused with its repr."""
    x = torch.zeros(3, 1, dtype=DT)
    with pytest.raises(ValueError, match=_exactly(f"p must be 1 or 2, got {bad!r}")):
        wasserstein(x, x, p=bad)
    with pytest.raises(ValueError, match=_exactly(f"p must be 1 or 2, got {bad!r}")):
        sinkhorn_divergence(x, x, p=bad)


def test_p_as_a_float_two_is_returned_as_the_int_two():
    """``_check_p`` returns ``int(p)``: ``p=2.0`` gives ``result.p == 2`` of type ``int``; ``p=1.0`` the W1 cost."""
    x, y = _randn(6, 1, seed=1), _randn(6, 1, seed=2)
    r = wasserstein(x, y, p=2.0)
    assert type(r.p) is int and r.p == 2
    r = wasserstein(x, y, p=np.int64(1))
    assert type(r.p) is int and r.p == 1
    assert abs(float(r.cost) - _sorted_wpp(x[:, 0].numpy(), y[:, 0].numpy(), 1)) <= 1e-14


def test_cloud_refusals_with_their_messages():
    """``_cloud``: type, rank, empty axes (particles, dimension, replicas), integer dtype and NaN/Inf."""
    y = torch.zeros(3, 1, dtype=DT)
    with pytest.raises(
        TypeError, match=_exactly("x must be a torch.Tensor of shape (M, d) or (B, M, d), got list")
    ):
        wasserstein([[0.0]], y)
    with pytest.raises(
        TypeError, match=_exactly("y must be a torch.Tensor of shape (M, d) or (B, M, d), got ndarray")
    ):
        wasserstein(y, np.zeros((3, 1)))
    for shape in [(3,), (1, 2, 3, 1), ()]:
        with pytest.raises(
            ValueError, match=_exactly(f"x must have shape (M, d) or (B, M, d), got shape {shape}")
        ):
            wasserstein(torch.zeros(shape, dtype=DT), y)
    for shape in [(0, 1), (3, 0), (0, 3, 1), (2, 0, 1), (2, 3, 0)]:
        message = f"y must have at least one particle in one dimension, got shape {shape}"
        with pytest.raises(ValueError, match=_exactly(message)):
            wasserstein(y, torch.zeros(shape, dtype=DT))
    with pytest.raises(TypeError, match=_exactly("x must be a floating-point tensor, got dtype torch.int64")):
        wasserstein(torch.zeros(3, 1, dtype=torch.int64), y)
    bad = torch.zeros(2, 3, 1, dtype=DT)
    bad[1, 2, 0] = float("nan")
    bad[0, 1, 0] = float("inf")
    message = "y has 2 non-finite entries (NaN or Inf), the first at index (0, 1, 0)"
    with pytest.raises(ValueError, match=_exactly(message)):
        wasserstein(y, bad)
    with pytest.raises(
        ValueError, match=_exactly("x has 1 non-finite entries (NaN or Inf), the first at index (1, 0)")
    ):
        wasserstein(torch.tensor([[0.0], [-float("inf")]], dtype=DT), y)


def test_a_cloud_whose_sum_overflows_is_still_finite_and_accepted():
    """Only a non-finite *entry* is refused: float32 entries of 3e38 whose sum overflows pass, and the cost
    (computed in float64) is the hand value: ``W1 = |3e38 − 1e38|`` for two single particles."""
    x = torch.tensor([[3e38], [3e38]], dtype=torch.float32)
    assert not math.isfinite(float(x.sum()))
    assert float(wasserstein(x, x, p=1).cost) == 0.0
    y = torch.tensor([[1e38], [1e38]], dtype=torch.float32)
    got = float(wasserstein(x, y, p=1).cost)
    assert got == pytest.approx(float(x[0, 0].double() - y[0, 0].double()), rel=1e-7)


def test_dimension_and_replica_mismatches_are_refused():
    """``_prepare``: different ``d``; two batched clouds with different ``B`` (a 2-D cloud with any ``B`` is fine)."""
    message = "x and y must have the same dimension d, got d=2 and d=3"
    with pytest.raises(ValueError, match=_exactly(message)):
        wasserstein(torch.zeros(4, 2, dtype=DT), torch.zeros(2, 5, 3, dtype=DT))
    message = (
        "x and y must have the same number of replicas B (or one of them no batch axis), got B=2 and B=3"
    )
    with pytest.raises(ValueError, match=_exactly(message)):
        wasserstein(torch.zeros(2, 4, 1, dtype=DT), torch.zeros(3, 4, 1, dtype=DT))
    assert wasserstein(torch.zeros(2, 4, 1, dtype=DT), torch.zeros(4, 1, dtype=DT)).cost.shape == (2,)
    assert wasserstein(torch.zeros(4, 1, dtype=DT), torch.zeros(3, 5, 1, dtype=DT)).cost.shape == (3,)


def test_weight_refusals_with_their_messages():
    """``_weights``: non-tensor, integer, NaN, wrong shape (the message gives both shapes allowed), a negative
    entry (with the minimum), a zero sum in one replica only."""
    x, y = torch.zeros(2, 3, 1, dtype=DT), torch.ones(4, 1, dtype=DT)
    with pytest.raises(TypeError, match=_exactly("x_weights must be a torch.Tensor, got list")):
        wasserstein(x, y, x_weights=[1.0, 1.0, 1.0])
    with pytest.raises(
        TypeError, match=_exactly("y_weights must be a floating-point tensor, got dtype torch.int64")
    ):
        wasserstein(x, y, y_weights=torch.ones(4, dtype=torch.int64))
    with pytest.raises(
        ValueError, match=_exactly("x_weights has 1 non-finite entries (NaN or Inf), the first at index (1,)")
    ):
        wasserstein(x, y, x_weights=torch.tensor([1.0, float("nan"), 1.0], dtype=DT))
    for shape in [(4,), (3, 3), (2, 4), (1, 3), (2, 3, 1)]:
        message = f"x_weights must have shape (3,) or (2, 3), got shape {shape}"
        with pytest.raises(ValueError, match=_exactly(message)):
            wasserstein(x, y, x_weights=torch.ones(shape, dtype=DT))
    message = "y_weights must have shape (4,) or (2, 4), got shape (3,)"
    with pytest.raises(ValueError, match=_exactly(message)):
        wasserstein(x, y, y_weights=torch.ones(3, dtype=DT))
    with pytest.raises(ValueError, match=_exactly("y_weights must be ≥ 0, got a minimum of -2.5")):
        wasserstein(x, y, y_weights=torch.tensor([1.0, -2.5, 3.0, -1.0], dtype=DT))
    message = "x_weights must have a positive sum in every replica, got a sum of 0"
    with pytest.raises(ValueError, match=_exactly(message)):
        wasserstein(x, y, x_weights=torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=DT))
    # an unbatched pair: B = 1, so (1, M) weights are allowed and the message says so
    x2 = torch.zeros(3, 1, dtype=DT)
    with pytest.raises(
        ValueError, match=_exactly("x_weights must have shape (3,) or (1, 3), got shape (2,)")
    ):
        wasserstein(x2, y, x_weights=torch.ones(2, dtype=DT))
    got = wasserstein(x2, y, x_weights=torch.ones(1, 3, dtype=DT)).cost
    assert got.shape == () and float(got) == 1.0  # W2² between δ_0 and δ_1


def test_weights_helper_normalises_and_broadcasts():
    """``_weights`` returns ``None`` for ``None``, else ``w / Σ w`` broadcast to ``(B, M)`` per replica."""
    assert W._weights("w", None, 2, 3) is None
    got = W._weights("w", torch.tensor([1.0, 3.0, 4.0], dtype=DT), 2, 3)
    assert got.shape == (2, 3) and np.array_equal(got, np.array([[0.125, 0.375, 0.5]] * 2))
    per = torch.tensor([[1.0, 1.0, 2.0], [0.0, 5.0, 0.0]], dtype=DT)
    assert np.array_equal(W._weights("w", per, 2, 3), np.array([[0.25, 0.25, 0.5], [0.0, 1.0, 0.0]]))


def test_prepare_broadcasts_and_promotes_the_dtype():
    """``_prepare``: float64 arrays ``(B, M, d)``, the ``batched`` flag, the promoted dtype."""
    x = torch.arange(6, dtype=torch.float32).reshape(3, 2)
    y = torch.arange(8, dtype=DT).reshape(2, 2, 2)
    xs, ys, a, b, batched, dtype = W._prepare(x, y, None, torch.ones(2, dtype=DT))
    assert xs.shape == (2, 3, 2) and xs.dtype == np.float64 and np.array_equal(xs[1], x.double().numpy())
    assert ys.shape == (2, 2, 2) and np.array_equal(ys, y.numpy())
    assert a is None and np.array_equal(b, np.full((2, 2), 0.5))
    assert batched is True and dtype == torch.float64
    _, _, _, _, batched, dtype = W._prepare(x, x, None, None)
    assert batched is False and dtype == torch.float32
    _, _, _, _, batched, _ = W._prepare(y, y[0], None, None)
    assert batched is True


def test_float32_in_float32_out_and_mixed_gives_float64():
    """The cost is in the promoted dtype of the inputs (the value is the float64 one, rounded)."""
    x, y = _randn(20, 2, seed=3), _randn(20, 2, seed=4)
    ref = float(wasserstein(x, y).cost)
    r = wasserstein(x.float(), y.float())
    assert r.cost.dtype == torch.float32
    assert float(r.cost) == pytest.approx(
        float(wasserstein(x.float().double(), y.float().double()).cost), rel=1e-6
    )
    assert wasserstein(x.float(), y).cost.dtype == torch.float64
    assert abs(float(wasserstein(x, y.float()).cost) - ref) < 1e-5 * ref


# ---------------------------------------------------------------------------------------------------------
# method="1d"


@pytest.mark.parametrize("p", [1, 2])
def test_1d_equal_sizes_by_hand_and_inputs_are_not_modified(p):
    """Equal sizes, uniform weights: the mean of ``|u_(i) − v_(i)|^p`` by hand per replica; the caller's
    (unsorted) tensors are left as they were."""
    x, y = _randn(3, 25, 1, seed=5), 2 * _rand(3, 25, 1, seed=6) - 0.3
    x0, y0 = x.clone(), y.clone()
    got = wasserstein(x, y, p=p, method="1d")
    assert got.method == "1d" and got.p == p and got.backend is None and got.cost.shape == (3,)
    for r in range(3):
        assert abs(float(got.cost[r]) - _sorted_wpp(x[r, :, 0].numpy(), y[r, :, 0].numpy(), p)) <= 1e-14
    assert torch.equal(x, x0) and torch.equal(y, y0)
    if p == 1:
        for r in range(3):
            expected = scipy.stats.wasserstein_distance(x[r, :, 0].numpy(), y[r, :, 0].numpy())
            assert abs(float(got.cost[r]) - expected) <= 1e-13


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("case", ["unequal", "x_weights", "y_weights", "both", "per_replica"])
def test_1d_general_path_matches_pot_and_scipy(p, case):
    """The merged-quantile path (unequal sizes or any weights) against ``ot.wasserstein_1d`` and, for ``p = 1``,
    ``scipy.stats.wasserstein_distance``, per replica; a zero weight drops its particle."""
    M, N = (17, 11) if case == "unequal" else (13, 13)
    x, y = _randn(2, M, 1, seed=7), 1.5 * _randn(2, N, 1, seed=8) + 0.4
    a = _rand(M, seed=9) + 0.1 if case in ("x_weights", "both") else None
    b = _rand(N, seed=10) + 0.1 if case in ("y_weights", "both") else None
    if case == "per_replica":
        a = _rand(2, M, seed=11)
        a[0, 3] = 0.0
    got = wasserstein(x, y, p=p, x_weights=a, y_weights=b, method="1d").cost
    for r in range(2):
        wa = None if a is None else _norm(a if a.dim() == 1 else a[r])
        wb = None if b is None else _norm(b)
        u, v = x[r, :, 0].numpy(), y[r, :, 0].numpy()
        expected = float(ot.wasserstein_1d(u, v, wa, wb, p=p))
        assert abs(float(got[r]) - expected) <= 1e-12 * max(1.0, expected)
        if p == 1:
            assert abs(float(got[r]) - scipy.stats.wasserstein_distance(u, v, wa, wb)) <= 1e-12
    if case == "per_replica":  # the zero-weight particle of replica 0 counts for nothing
        keep = torch.arange(M) != 3
        dropped = wasserstein(x[0, keep], y[0], p=p, x_weights=a[0, keep], method="1d").cost
        assert abs(float(got[0]) - float(dropped)) <= 1e-13


def test_wp_1d_helper_by_hand_on_a_tiny_case():
    """``_wp_1d`` on rows ``u = (0, 1)`` vs ``v = (0.5,)`` with weights ``(1/4, 3/4)``: the merged cells
    ``[0, ¼]`` (gap 0.5) and ``[¼, 1]`` (gap 0.5) give ``W1 = 0.5``, ``W2² = 0.25``; ``u = (0, 1), v = (3, 2)``
    uniform: sorted pairs (0, 2), (1, 3): ``W1 = 2``, ``W2² = 4``; without ``inplace`` the inputs are left as they
    were, with it the caller's rows are worked in (``v`` sorted)."""
    u, v = np.array([[0.0, 1.0]]), np.array([[0.5]])
    a = np.array([[0.25, 0.75]])
    assert W._wp_1d(u, v, a, None, 1)[0] == pytest.approx(0.5, abs=1e-15)
    assert W._wp_1d(u, v, a, None, 2)[0] == pytest.approx(0.25, abs=1e-15)
    u2, v2 = np.array([[1.0, 0.0]]), np.array([[3.0, 2.0]])
    assert W._wp_1d(u2, v2, None, None, 1)[0] == 2.0 and W._wp_1d(u2, v2, None, None, 2)[0] == 4.0
    assert np.array_equal(u2, [[1.0, 0.0]]) and np.array_equal(v2, [[3.0, 2.0]])  # copies by default
    assert W._wp_1d(u2, v2, None, None, 2, inplace=True)[0] == 4.0
    assert np.array_equal(v2, [[2.0, 3.0]])  # the caller's rows are worked in (v sorted, u overwritten)
    # a weighted pair where the two cloud's cells interleave: x at (0, 2) masses (½, ½), y at (1, 5) masses (¾, ¼)
    # cells [0, ½]: 0↔1, [½, ¾]: 2↔1, [¾, 1]: 2↔5 → W1 = ½·1 + ¼·1 + ¼·3 = 1.5, W2² = ½ + ¼ + ¼·9 = 3
    x, y = np.array([[2.0, 0.0]]), np.array([[5.0, 1.0]])
    b = np.array([[0.25, 0.75]])
    assert W._wp_1d(x, y, None, b, 1)[0] == pytest.approx(1.5, abs=1e-15)
    assert W._wp_1d(x, y, None, b, 2)[0] == pytest.approx(3.0, abs=1e-15)
    assert np.array_equal(
        W._rowwise_searchsorted(np.array([[0.1, 0.5, 1.0]]), np.array([[0.5, 0.7, 0.0]])), [[1, 2, 0]]
    )


def test_1d_refuses_more_than_one_dimension():
    message = "method='1d' needs d == 1, got d=2; use 'exact' or 'sliced'"
    with pytest.raises(ValueError, match=_exactly(message)):
        wasserstein(torch.zeros(4, 2, dtype=DT), torch.zeros(3, 2, dtype=DT), method="1d")


# ---------------------------------------------------------------------------------------------------------
# method="exact"


@pytest.mark.parametrize("p", [1, 2])
def test_exact_matches_pot_emd2_per_replica_with_weights(p):
    """A 2-D cloud against each replica of a batched one, per-replica weights on the 2-D side: ``ot.emd2`` on
    the cost matrix built here (``|x − y|^p`` by NumPy broadcasting)."""
    x, y = _randn(9, 3, seed=12), _rand(3, 7, 3, seed=13)
    a = _rand(3, 9, seed=14)  # (B, M) for the unbatched x
    b = _rand(7, seed=15) + 0.05
    r = wasserstein(x, y, p=p, x_weights=a, y_weights=b, method="exact")
    assert r.method == "exact" and r.backend is None and r.cost.shape == (3,) and r.p == p
    for k in range(3):
        C = (((x.numpy()[:, None, :] - y[k].numpy()[None, :, :]) ** 2).sum(-1)) ** (p / 2)
        expected = float(ot.emd2(_norm(a[k]), _norm(b), C))
        assert abs(float(r.cost[k]) - expected) <= 1e-12
    # the same cloud: exactly 0; two point masses: |Δ|^p
    assert float(wasserstein(x, x, p=p, method="exact").cost) == 0.0
    d1, d2 = torch.tensor([[0.0, 0.0]], dtype=DT), torch.tensor([[3.0, 4.0]], dtype=DT)
    assert float(wasserstein(d1, d2, p=p, method="exact").cost) == pytest.approx(5.0**p, rel=1e-15)


def test_cost_matrix_helper_is_the_pth_power_of_the_distance():
    x, y = np.array([[0.0, 0.0], [1.0, 1.0]]), np.array([[3.0, 4.0]])
    assert np.allclose(W._cost_matrix(x, y, 1), [[5.0], [math.sqrt(13.0)]], rtol=1e-15)
    assert np.allclose(W._cost_matrix(x, y, 2), [[25.0], [13.0]], rtol=1e-15)


def test_exact_passes_the_iteration_budget_and_the_uniform_weights(monkeypatch):
    """``ot.emd2`` gets ``numItermax = max(100 000, 50 M N)``, ``log=True``, uniform weights ``1/M``, ``1/N``
    when none are given, contiguous per-replica weights otherwise, and the cost matrix of the replica."""
    calls = []
    real = ot.emd2

    def spy(a, b, M, numItermax, log):
        calls.append((np.array(a), np.array(b), np.array(M), numItermax, log, a.flags.c_contiguous))
        return real(a, b, M, numItermax=numItermax, log=log)

    monkeypatch.setattr(ot, "emd2", spy)
    x, y = _randn(2, 5, 2, seed=16), _randn(2, 4, 2, seed=17)
    wasserstein(x, y, method="exact")
    assert len(calls) == 2
    for k, (a, b, C, n_iter, log, _) in enumerate(calls):
        assert n_iter == 100_000 and log is True
        assert np.array_equal(a, np.full(5, 0.2)) and np.array_equal(b, np.full(4, 0.25))
        assert np.allclose(C, cdist(x[k].numpy(), y[k].numpy(), "sqeuclidean"), rtol=1e-14)
    calls.clear()
    big_x, big_y = _randn(50, 1, seed=18).expand(50, 2).contiguous(), _randn(41, 2, seed=19)
    weights = _rand(2, 50, seed=20)
    wasserstein(big_x, torch.stack([big_y, big_y]), x_weights=weights, method="exact")
    assert [c[3] for c in calls] == [50 * 50 * 41] * 2  # 102 500 > 100 000
    assert all(c[5] for c in calls)
    assert np.allclose(calls[1][0], _norm(weights[1]), rtol=1e-15)


def test_exact_raises_when_pot_reports_it_did_not_finish(monkeypatch):
    """A warning in POT's log (e.g. ``numItermax`` reached) becomes a ``RuntimeError`` naming the replica."""
    state = {"n": 0}

    def fake(a, b, M, numItermax, log):
        state["n"] += 1
        return 1.0, {"warning": "numItermax reached before optimality" if state["n"] == 2 else None}

    monkeypatch.setattr(ot, "emd2", fake)
    message = "ot.emd2 did not solve replica 1 exactly: numItermax reached before optimality"
    with pytest.raises(RuntimeError, match=_exactly(message)):
        wasserstein(_randn(3, 4, 2), _randn(4, 2, seed=1), method="exact")
    state["n"] = 5  # every call now clean: no error, the value POT returned
    assert torch.equal(
        wasserstein(_randn(2, 4, 2), _randn(4, 2, seed=1), method="exact").cost, torch.ones(2, dtype=DT)
    )


# ---------------------------------------------------------------------------------------------------------
# method="sliced"


def test_projections_are_the_seeded_normalised_normal_draws():
    """``_projections(d, L, seed)``: ``torch.randn(L, d)`` from ``manual_seed(seed)``, rows normalised."""
    theta = W._projections(3, 7, 11)
    assert theta.shape == (7, 3) and theta.dtype == DT
    assert np.allclose(theta.numpy(), _directions(3, 7, 11), rtol=1e-15, atol=0)
    assert W._projections(3, 7, 11) is theta  # cached
    assert not np.allclose(W._projections(3, 7, 12).numpy(), theta.numpy())


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("budget", [None, 40, 120, 1600], ids=["default", "one", "two_dirs", "two_reps"])
def test_sliced_matches_pot_with_our_directions_for_every_pass_size(monkeypatch, p, budget):
    """Sliced ``SW_p^p`` against ``ot.sliced_wasserstein_distance(...)^p`` with the directions drawn here, per
    replica, with per-replica weights on x, shared ones on y, both or none; the projected values are processed in passes of ``_SLICE_BUDGET`` (one
    direction and one replica at a time, two directions, two replicas: the same numbers)."""
    if budget is not None:
        monkeypatch.setattr(W, "_SLICE_BUDGET", budget)
    B, M, N, d, L = 3, 30, 20, 3, 16
    x, y = _randn(B, M, d, seed=21), _rand(B, N, d, seed=22) + 0.2
    a = _rand(B, M, seed=23) + 0.05
    b = _rand(N, seed=24) + 0.05
    theta = _directions(d, L, 4)
    for weights in ("none", "x", "y", "both"):
        kw = {"x_weights": a if weights in ("x", "both") else None}
        kw["y_weights"] = b if weights in ("y", "both") else None
        r = wasserstein(x, y, p=p, method="sliced", n_projections=L, seed=4, **kw)
        assert r.method == "sliced" and r.backend is None and r.cost.shape == (B,)
        for k in range(B):
            wa = _norm(a[k]) if weights in ("x", "both") else None
            wb = _norm(b) if weights in ("y", "both") else None
            pot = ot.sliced_wasserstein_distance(x[k].numpy(), y[k].numpy(), wa, wb, p=p, projections=theta.T)
            assert abs(float(r.cost[k]) - pot**p) <= 1e-12 * max(1.0, pot**p)


def test_sliced_defaults_are_128_directions_from_seed_0():
    """Without ``n_projections`` and ``seed``: the mean of the 1-D costs over the 128 directions of seed 0,
    computed here projection by projection with the sorting formula."""
    x, y = _randn(12, 2, seed=24), _rand(12, 2, seed=25)
    theta = _directions(2, 128, 0)
    expected = np.mean([_sorted_wpp(x.numpy() @ t, y.numpy() @ t, 2) for t in theta])
    assert abs(float(wasserstein(x, y, method="sliced").cost) - expected) <= 1e-13
    other = np.mean([_sorted_wpp(x.numpy() @ t, y.numpy() @ t, 2) for t in _directions(2, 127, 0)])
    assert abs(float(wasserstein(x, y, method="sliced", n_projections=127).cost) - other) <= 1e-13
    assert abs(other - expected) > 1e-6  # negative control: one direction fewer


# ---------------------------------------------------------------------------------------------------------
# wasserstein: arguments, auto, method selection


def test_resolve_method_boundaries_and_refusals():
    """``"1d"`` whenever ``d == 1``; exact up to 2048 points in the larger cloud, Sinkhorn up to 20 000, then
    sliced; explicit methods kept; anything else refused with the list of names."""
    assert resolve_method("auto", 10**6, 10**6, 1) == "1d"
    assert resolve_method("auto", 2048, 2048, 2) == "exact"
    assert resolve_method("auto", 10, 2049, 2) == "sinkhorn"
    assert resolve_method("auto", 2049, 10, 2) == "sinkhorn"
    assert resolve_method("auto", 20_000, 3, 4) == "sinkhorn"
    assert resolve_method("auto", 3, 20_001, 4) == "sliced"
    for m in ("1d", "exact", "sliced", "sinkhorn"):
        assert resolve_method(m, 10**6, 1, 7) == m
    for bad in ("emd", "EXACT", "", 3, None):
        message = f"method must be one of ['auto', '1d', 'exact', 'sliced', 'sinkhorn'], got {bad!r}"
        with pytest.raises(ValueError, match=_exactly(message)):
            resolve_method(bad, 3, 3, 2)
        with pytest.raises(ValueError, match=_exactly(message)):
            wasserstein(torch.zeros(3, 2, dtype=DT), torch.zeros(3, 2, dtype=DT), method=bad)


def test_auto_runs_the_method_it_names():
    """``method="auto"`` (the default): 1-D sorting for ``d = 1`` and exact OT for small clouds, the same
    numbers as the named methods and the independent answers."""
    x, y = _randn(30, 1, seed=26), _randn(40, 1, seed=27)
    r = wasserstein(x, y)
    assert r.method == "1d" and r.p == 2
    assert abs(float(r.cost) - float(ot.wasserstein_1d(x[:, 0].numpy(), y[:, 0].numpy(), p=2))) <= 1e-13
    x2, y2 = _randn(8, 2, seed=28), _randn(8, 2, seed=29)
    r = wasserstein(x2, y2)
    assert r.method == "exact" and r.backend is None
    assert abs(float(r.cost) - float(ot.emd2([], [], cdist(x2.numpy(), y2.numpy(), "sqeuclidean")))) <= 1e-13


def test_seed_epsilon_and_n_projections_are_checked_for_every_method():
    """``n_projections`` (int ≥ 1), ``seed`` (an int in ``[0, 2^63)``, a numpy integer reads as its int) and
    ``epsilon`` (> 0) are checked whichever method runs."""
    x = torch.zeros(3, 1, dtype=DT)
    with pytest.raises(ValueError, match=_exactly("n_projections must be ≥ 1, got 0")):
        wasserstein(x, x, n_projections=0)
    with pytest.raises(TypeError, match=_exactly("n_projections must be an int, got float")):
        wasserstein(x, x, n_projections=4.0)
    with pytest.raises(ValueError, match=_exactly("seed must be ≥ 0, got -1")):
        wasserstein(x, x, seed=-1)
    with pytest.raises(TypeError, match=_exactly("seed must be an int, got bool")):
        wasserstein(x, x, seed=True)
    with pytest.raises(TypeError, match=_exactly("seed must be an int, got float")):
        wasserstein(x, x, seed=1.0)
    with pytest.raises(
        ValueError, match=_exactly(f"seed must be < 2^63 (a torch.Generator seed), got {2**63}")
    ):
        wasserstein(x, x, seed=2**63)
    with pytest.raises(
        ValueError, match=_exactly(f"seed must be < 2^63 (a torch.Generator seed), got {2**63}")
    ):
        wasserstein(x, x, seed=np.uint64(2**63))
    with pytest.raises(ValueError, match=_exactly("epsilon must be > 0, got -1.0")):
        wasserstein(x, x, epsilon=-1.0)
    with pytest.raises(ValueError, match=_exactly("epsilon must be > 0, got 0.0")):
        wasserstein(x, x, epsilon=0)
    assert float(wasserstein(x, x, seed=2**63 - 1, epsilon=1e-3, n_projections=1).cost) == 0.0
    x2, y2 = _randn(10, 2, seed=30), _randn(10, 2, seed=31)
    np_seed = wasserstein(x2, y2, method="sliced", seed=np.int64(7), n_projections=5).cost
    theta = _directions(2, 5, 7)
    expected = np.mean([_sorted_wpp(x2.numpy() @ t, y2.numpy() @ t, 2) for t in theta])
    assert abs(float(np_seed) - expected) <= 1e-13


@pytest.mark.parametrize("method", ["1d", "exact", "sliced"])
def test_w2_w2_squared_w1_forward_their_arguments(method):
    """``w2_squared`` is the ``p = 2`` cost, ``w2`` its square root, ``w1`` the ``p = 1`` cost; ``method``,
    weights, ``n_projections`` and ``seed`` reach :func:`wasserstein` (compared with POT / sorting here)."""
    d = 1 if method == "1d" else 2
    x, y = _randn(2, 15, d, seed=32), _rand(2, 15, d, seed=33)
    a = _rand(15, seed=34) + 0.1
    kw = {"method": method, "x_weights": a, "n_projections": 9, "seed": 2}
    refs = {}
    for p in (1, 2):
        vals = []
        for k in range(2):
            if method == "sliced":
                theta = _directions(d, 9, 2)
                vals.append(
                    ot.sliced_wasserstein_distance(
                        x[k].numpy(), y[k].numpy(), _norm(a), None, p=p, projections=theta.T
                    )
                    ** p
                )
            else:
                C = cdist(x[k].numpy(), y[k].numpy(), "sqeuclidean" if p == 2 else "euclidean")
                vals.append(float(ot.emd2(_norm(a), np.full(15, 1 / 15), C)))
        refs[p] = np.array(vals)
    assert np.allclose(w2_squared(x, y, **kw).numpy(), refs[2], rtol=1e-11, atol=0)
    assert np.allclose(w2(x, y, **kw).numpy(), np.sqrt(refs[2]), rtol=1e-11, atol=0)
    assert np.allclose(w1(x, y, **kw).numpy(), refs[1], rtol=1e-11, atol=0)
    with pytest.raises(TypeError):
        w2(x, y, p=1)  # p is fixed by the name


# ---------------------------------------------------------------------------------------------------------
# Sinkhorn: a dense NumPy reference iterated to its fixed point


def _dense_divergence(x, y, a, b, p, eps, reach=None):
    """``S_ε`` of one replica from the docstring's formulas: plain alternating log-domain Sinkhorn for
    ``OT_ε(μ, ν)`` and averaged updates for the self-problems, on dense cost matrices built by ``cdist``, each
    iterated until the potentials move by less than 1e-14; damped by ``1/(1 + ε/ρ)`` with ``reach``."""
    metric = "sqeuclidean" if p == 2 else "euclidean"
    la, lb = np.log(a), np.log(b)
    damp = 1.0 if reach is None else 1.0 / (1.0 + eps / reach)

    def soft(u, v, h):
        return -eps * logsumexp(h[None, :] - cdist(u, v, metric) / eps, axis=1) * damp

    f, g = np.zeros(len(x)), np.zeros(len(y))
    for _ in range(100_000):
        f_new = soft(x, y, lb + g / eps)
        g_new = soft(y, x, la + f_new / eps)
        moved = max(np.abs(f_new - f).max(), np.abs(g_new - g).max())
        f, g = f_new, g_new
        if moved < 1e-14:
            break

    def self_potential(z, lz):
        h = np.zeros(len(z))
        for _ in range(100_000):
            new = 0.5 * (h + soft(z, z, lz + h / eps))
            if np.abs(new - h).max() < 1e-14:
                return new
            h = new
        return h

    fa, gb = self_potential(x, la), self_potential(y, lb)
    if reach is None:
        return float(a @ (f - fa) + b @ (g - gb))
    k = reach + eps / 2
    return float(
        a @ (k * (np.exp(-fa / reach) - np.exp(-f / reach)))
        + b @ (k * (np.exp(-gb / reach) - np.exp(-g / reach)))
    )


def _small(seed=40, M=7, N=6):
    g = _gen(seed)
    x = torch.randn(M, 2, generator=g, dtype=DT)
    y = 0.7 * torch.randn(N, 2, generator=g, dtype=DT) + torch.tensor([0.8, -0.3], dtype=DT)
    a = torch.rand(M, generator=g, dtype=DT) + 0.2
    b = torch.rand(N, generator=g, dtype=DT) + 0.2
    return x, y, a, b


@pytest.mark.parametrize(
    ("p", "reach", "eps"), [(2, None, 1.0), (1, None, 0.3), (2, 0.7, 0.3)], ids=["p2", "p1", "p2_reach"]
)
def test_sinkhorn_divergence_converges_to_the_dense_reference(p, reach, eps):
    """Run to ``tol = 1e-11``: the dense reference's ``S_ε`` (weighted, ``p`` and ``reach`` as given) to 1e-8;
    ``converged`` True, ``epsilon`` the given one, backend ``"torch"``, shape ``()``. Negative control: the
    reference at ``1.3 ε`` differs by more than 1e-4."""
    x, y, a, b = _small()
    r = sinkhorn_divergence(
        x, y, p=p, x_weights=a, y_weights=b, epsilon=eps, reach=reach, tol=1e-11, max_iter=20_000
    )
    ref = _dense_divergence(x.numpy(), y.numpy(), _norm(a), _norm(b), p, eps, reach)
    assert r.converged is True and r.backend == "torch"
    assert r.divergence.shape == () and r.epsilon.shape == () and float(r.epsilon) == eps
    assert abs(float(r.divergence) - ref) <= 1e-8 * max(1.0, abs(ref)), (float(r.divergence), ref)
    far = _dense_divergence(x.numpy(), y.numpy(), _norm(a), _norm(b), p, 1.3 * eps, reach)
    assert abs(far - ref) > 1e-4


def test_sinkhorn_default_epsilon_by_hand_per_replica():
    """Default ``ε = 0.01 · mean_k |z_k − z̄|^p`` over the pooled particles of each replica (NumPy here), for
    ``p = 2`` and ``p = 1``; a batch gives one ε per replica (shape ``(B,)``)."""
    x, y = _randn(2, 6, 3, seed=41), _rand(5, 3, seed=42)  # y is shared by both replicas
    for p in (1, 2):
        r = sinkhorn_divergence(x, y, p=p, tol=None)
        z = [np.concatenate([x[k].numpy(), y.numpy()]) for k in range(2)]
        expected = [0.01 * np.mean(np.linalg.norm(zk - zk.mean(0), axis=1) ** p) for zk in z]
        assert r.epsilon.shape == (2,) and r.divergence.shape == (2,)
        assert np.allclose(r.epsilon.numpy(), expected, rtol=1e-13, atol=0)
    assert torch.allclose(W._default_epsilon(x, y.expand(2, 5, 3), 2), torch.tensor(expected), rtol=1e-13)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("eps", [0.05, 0.8, 50.0])
def test_sinkhorn_schedule_length_with_the_default_scaling(p, eps):
    """``tol=None``: the ε-scaling schedule and one last update, ``iterations = steps + 3`` with
    ``steps = max(0, ⌈log(max(pD^p, ε)/ε) / (p log(1/0.7))⌉)`` (``D`` the diameter of both clouds), by hand;
    ``converged`` is ``None``; another scaling (0.5) gives another value; the value is that of the annealing
    done here in NumPy (dense costs)."""
    x, y, a, b = _small(seed=43)
    r = sinkhorn_divergence(x, y, p=p, x_weights=a, y_weights=b, epsilon=eps, tol=None)
    z = np.concatenate([x.numpy(), y.numpy()])
    D = np.linalg.norm(z.max(0) - z.min(0))
    top = max(p * D**p, eps)
    steps = max(0, math.ceil(math.log(top / eps) / (p * math.log(1 / 0.7))))
    assert r.iterations == steps + 3 and r.converged is None
    explicit = sinkhorn_divergence(x, y, p=p, x_weights=a, y_weights=b, epsilon=eps, tol=None, scaling=0.7)
    assert torch.equal(explicit.divergence, r.divergence)
    half = sinkhorn_divergence(x, y, p=p, x_weights=a, y_weights=b, epsilon=eps, tol=None, scaling=0.5)
    steps_half = max(0, math.ceil(math.log(top / eps) / (p * math.log(2.0))))
    assert half.iterations == steps_half + 3
    if steps > 0:
        assert float(abs(half.divergence - r.divergence)) > 1e-10
    # the value: GeomLoss's symmetric updates along ε_k = top·0.7^{pk} (k < steps), then ε, ε, and a last update
    schedule = [top] + [top * 0.7 ** (p * k) if k < steps else eps for k in range(steps)] + [eps]
    metric = "sqeuclidean" if p == 2 else "euclidean"
    C = {
        (u, v): cdist(Z[u], Z[v], metric)
        for Z in [{"x": x.numpy(), "y": y.numpy()}]
        for u in "xy"
        for v in "xy"
    }
    lw = {"x": np.log(_norm(a)), "y": np.log(_norm(b))}

    def soft(u, v, h, e):  # softmin over the points of v, for the points of u
        return -e * logsumexp(h[None, :] - C[(u, v)] / e, axis=1)

    pot = {("x", "y"): soft("x", "y", lw["y"], top), ("y", "x"): soft("y", "x", lw["x"], top)}
    pot[("x", "x")], pot[("y", "y")] = soft("x", "x", lw["x"], top), soft("y", "y", lw["y"], top)

    def update(e, average):
        new = {(u, v): soft(u, v, lw[v] + pot[(v, u)] / e, e) for (u, v) in pot}
        return {k: 0.5 * (pot[k] + new[k]) if average else new[k] for k in pot}

    for e in schedule:
        pot = update(e, True)
    pot = update(eps, False)
    wa, wb = _norm(a), _norm(b)
    S = wa @ (pot[("x", "y")] - pot[("x", "x")]) + wb @ (pot[("y", "x")] - pot[("y", "y")])
    assert abs(float(r.divergence) - S) <= 1e-9 * max(1.0, abs(S)), (float(r.divergence), S)


def test_sinkhorn_default_tolerance_and_iteration_limit():
    """Defaults ``tol = 0.1`` (the same run as an explicit 0.1, fewer updates than 1e-4, within 2 % of the
    converged reference where 1e-4 is within 0.01 %) and ``max_iter = 1000`` (the signature's defaults; stopping at ``max_iter``:
    ``tests/test_held_validation.py``)."""
    x, y, a, b = _small(seed=44)
    kw = {"x_weights": a, "y_weights": b, "epsilon": 0.1}
    r = sinkhorn_divergence(x, y, **kw)
    explicit = sinkhorn_divergence(x, y, tol=0.1, **kw)
    tight = sinkhorn_divergence(x, y, tol=1e-4, **kw)
    assert r.converged is True and r.iterations == explicit.iterations < tight.iterations
    assert torch.equal(r.divergence, explicit.divergence)
    ref = _dense_divergence(x.numpy(), y.numpy(), _norm(a), _norm(b), 2, 0.1)
    assert abs(float(r.divergence) - ref) <= 2e-2 * ref  # measured 1.0 % on these 7 + 6 points
    assert abs(float(tight.divergence) - ref) <= 1e-4 * ref
    defaults = inspect.signature(sinkhorn_divergence).parameters
    assert defaults["max_iter"].default == 1000 and defaults["tol"].default == 0.1
    assert defaults["scaling"].default == 0.7 and defaults["backend"].default == "auto"
    assert (
        defaults["p"].default == 2
        and defaults["epsilon"].default is None
        and defaults["reach"].default is None
    )


def test_sinkhorn_default_p_is_two_the_translation_identity():
    """For ``p = 2`` (the default) and ``ν = μ + v`` with the same weights, ``S_ε = |v|²`` at convergence
    (the cross term of the cost is the same for every coupling); ``p = 1`` gives something else."""
    x, _, a, _ = _small(seed=45)
    v = torch.tensor([0.5, -0.2], dtype=DT)  # |v|² = 0.29
    r = sinkhorn_divergence(x, x + v, x_weights=a, y_weights=a, epsilon=0.5, tol=1e-11, max_iter=20_000)
    assert abs(float(r.divergence) - 0.29) <= 1e-9
    r1 = sinkhorn_divergence(x, x + v, p=1, x_weights=a, y_weights=a, epsilon=0.5, tol=1e-11, max_iter=20_000)
    assert abs(float(r1.divergence) - 0.29) > 1e-3


def test_sinkhorn_collapsed_replicas_give_zero_with_epsilon_one():
    """A replica whose particles all sit at one point (both clouds) gives ``S = 0`` and ``ε = 1`` (the default ε
    would be 0); the other replica its own value (the dense reference)."""
    x = torch.stack([torch.full((4, 2), 0.3, dtype=DT), _randn(4, 2, seed=46)])
    y = torch.stack([torch.full((3, 2), 0.3, dtype=DT), _randn(3, 2, seed=47) + 0.5])
    r = sinkhorn_divergence(x, y, epsilon=2.0, tol=1e-11, max_iter=20_000)
    assert float(r.divergence[0]) == 0.0 and float(r.epsilon[0]) == 1.0 and float(r.epsilon[1]) == 2.0
    ref = _dense_divergence(x[1].numpy(), y[1].numpy(), np.full(4, 0.25), np.full(3, 1 / 3), 2, 2.0)
    assert abs(float(r.divergence[1]) - ref) <= 1e-8
    d = sinkhorn_divergence(x[:1], y[:1])
    assert float(d.divergence[0]) == 0.0 and float(d.epsilon[0]) == 1.0
    # a Dirac against a different Dirac is not collapsed: S = |Δ|² (a translation)
    s = sinkhorn_divergence(x[0], torch.full((3, 2), 1.3, dtype=DT), tol=1e-11)
    assert abs(float(s.divergence) - 2.0) <= 1e-9


def test_sinkhorn_overflow_is_refused_with_its_message():
    """``|x − y|^p / ε`` must be finite in the computing dtype: float32 at a diameter of 1e19 and ε = 1e-6 is
    refused; the same clouds in float64 are not."""
    x = torch.tensor([[1e19, 0.0], [0.0, 0.0]], dtype=torch.float32)
    y = torch.zeros(2, 2, dtype=torch.float32)
    message = (
        "x and y: the cost |x − y|^2 over ε overflows torch.float32 (diameter 1e+19, ε = 1e-06); "
        "rescale the clouds or choose a larger epsilon"
    )
    with pytest.raises(ValueError, match=_exactly(message)):
        sinkhorn_divergence(x, y, epsilon=1e-6)
    x1 = torch.tensor([[1e18, 0.0], [0.0, 0.0]], dtype=torch.float32)
    message1 = (
        "x and y: the cost |x − y|^1 over ε overflows torch.float32 (diameter 1e+18, ε = 1e-30); "
        "rescale the clouds or choose a larger epsilon"
    )
    with pytest.raises(ValueError, match=_exactly(message1)):
        sinkhorn_divergence(x1, y, p=1, epsilon=1e-30)
    # one replica overflowing is enough (the other is fine); the message gives the largest diameter
    pair = torch.stack([torch.zeros(2, 2, dtype=torch.float32), x1])
    pair[0, 0, 0] = 1.0
    with pytest.raises(ValueError, match=_exactly(message1)):
        sinkhorn_divergence(pair, y, p=1, epsilon=1e-30)
    assert math.isfinite(float(W._default_epsilon(x.double()[None], y.double()[None], 2)[0]))


def test_sinkhorn_argument_refusals_with_their_messages():
    x, y = _randn(4, 2), _randn(3, 2, seed=1)
    cases = [
        ({"epsilon": 0.0}, ValueError, "epsilon must be > 0, got 0.0"),
        ({"epsilon": float("nan")}, ValueError, "epsilon must be finite, got nan"),
        ({"reach": -1.0}, ValueError, "reach must be > 0, got -1.0"),
        ({"reach": 0}, ValueError, "reach must be > 0, got 0.0"),
        ({"scaling": 1.0}, ValueError, "scaling must be in (0, 1), got 1.0"),
        ({"scaling": 0.0}, ValueError, "scaling must be in (0, 1), got 0.0"),
        ({"scaling": -0.5}, ValueError, "scaling must be in (0, 1), got -0.5"),
        ({"scaling": float("inf")}, ValueError, "scaling must be finite, got inf"),
        ({"scaling": True}, TypeError, "scaling must be a real number, got bool"),
        ({"tol": -1.0}, ValueError, "tol must be > 0, got -1.0"),
        ({"tol": 0.0}, ValueError, "tol must be > 0, got 0.0"),
        ({"tol": float("inf")}, ValueError, "tol must be finite, got inf"),
        ({"reach": float("inf")}, ValueError, "reach must be finite, got inf"),
        ({"max_iter": 0}, ValueError, "max_iter must be ≥ 1, got 0"),
        ({"max_iter": 10.0}, TypeError, "max_iter must be an int, got float"),
        ({"backend": "gpu"}, ValueError, "backend must be one of ['auto', 'torch', 'keops'], got 'gpu'"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=_exactly(message)):
            sinkhorn_divergence(x, y, **kwargs)
    # the cloud and weight checks are the shared ones
    with pytest.raises(ValueError, match=_exactly("x and y must have the same dimension d, got d=2 and d=1")):
        sinkhorn_divergence(x, y[:, :1])
    with pytest.raises(ValueError, match=_exactly("y_weights must be ≥ 0, got a minimum of -1.0")):
        sinkhorn_divergence(x, y, y_weights=torch.tensor([1.0, -1.0, 1.0], dtype=DT))
    # the edges that are allowed
    assert sinkhorn_divergence(x, y, scaling=0.999, tol=None, epsilon=5.0).converged is None
    assert sinkhorn_divergence(x, y, backend="torch", max_iter=1).backend == "torch"


def test_sinkhorn_batch_shapes_dtype_and_zero_weights():
    """Batched: shape ``(B,)`` and the replicas one by one; float32 in, float32 out; a zero weight drops its
    particle (``log 0`` clamped at ``−10^30``), to the tolerance of the stopping rule."""
    x, y = _randn(2, 6, 2, seed=48), _randn(5, 2, seed=49) + 0.3
    kw = {"epsilon": 2.0, "tol": 1e-11, "max_iter": 20_000}
    batch = sinkhorn_divergence(x, y, **kw)
    assert batch.divergence.shape == (2,) and batch.divergence.dtype == DT
    for k in range(2):
        ref = _dense_divergence(x[k].numpy(), y.numpy(), np.full(6, 1 / 6), np.full(5, 0.2), 2, 2.0)
        assert abs(float(batch.divergence[k]) - ref) <= 1e-8
    single = sinkhorn_divergence(x.float(), y.float(), epsilon=0.3)
    assert single.divergence.dtype == torch.float32 and single.epsilon.dtype == torch.float32
    w = torch.ones(6, dtype=DT)
    w[2] = 0.0
    dropped = sinkhorn_divergence(x[0], y, x_weights=w, **kw)
    keep = torch.arange(6) != 2
    assert abs(float(dropped.divergence) - float(sinkhorn_divergence(x[0, keep], y, **kw).divergence)) <= 1e-9
    la = W._log_weights(np.array([[0.5, 0.0, 0.5]]), 1, 3, DT, "cpu")
    assert torch.equal(la, torch.tensor([[math.log(0.5), -1e30, math.log(0.5)]], dtype=DT))
    assert torch.allclose(W._log_weights(None, 2, 4, DT, "cpu"), torch.full((2, 4), -math.log(4), dtype=DT))


def test_sinkhorn_uses_the_cached_costs_up_to_the_dense_limit(monkeypatch):
    """Small clouds on the torch backend compute the cost matrices once while ``B(MN + M² + N²)`` is at most
    ``DENSE_MAX_ELEMENTS`` and call the blocked :func:`softmin` beyond (a spy counts the calls); the same value."""
    x, y = _randn(2, 5, 2, seed=50), _randn(2, 4, 2, seed=51)
    count = 2 * (5 * 4 + 25 + 16)
    calls = []
    real = W.softmin

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(W, "softmin", spy)
    monkeypatch.setattr(W, "DENSE_MAX_ELEMENTS", count)
    cached = sinkhorn_divergence(x, y, epsilon=2.0, tol=1e-9)
    assert calls == []
    monkeypatch.setattr(W, "DENSE_MAX_ELEMENTS", count - 1)
    blocked = sinkhorn_divergence(x, y, epsilon=2.0, tol=1e-9)
    assert calls and blocked.backend == "torch"
    assert torch.allclose(cached.divergence, blocked.divergence, rtol=1e-10, atol=1e-13)


# ---------------------------------------------------------------------------------------------------------
# wasserstein(method="sinkhorn")


def test_wasserstein_sinkhorn_is_sinkhorn_divergence_with_the_module_defaults():
    """``method="sinkhorn"``: the divergence of :func:`sinkhorn_divergence` with its defaults and the given ε,
    in the inputs' dtype, ``backend="torch"`` on the CPU; no warning when it converges."""
    x, y, a, b = _small(seed=52)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = wasserstein(x, y, x_weights=a, y_weights=b, method="sinkhorn", epsilon=0.2)
        d = wasserstein(x, y, method="sinkhorn")
    assert r.method == "sinkhorn" and r.backend == "torch" and r.p == 2
    assert torch.equal(r.cost, sinkhorn_divergence(x, y, x_weights=a, y_weights=b, epsilon=0.2).divergence)
    assert torch.equal(d.cost, sinkhorn_divergence(x, y).divergence)
    ref = _dense_divergence(x.numpy(), y.numpy(), _norm(a), _norm(b), 2, 0.2)
    assert abs(float(r.cost) - ref) <= 5e-3 * ref
    r1 = wasserstein(x, y, p=1, method="sinkhorn", epsilon=0.2)
    assert r1.p == 1 and torch.equal(r1.cost, sinkhorn_divergence(x, y, p=1, epsilon=0.2).divergence)
    f32 = wasserstein(x.float(), y.float(), method="sinkhorn", epsilon=0.2)
    assert f32.cost.dtype == torch.float32
    assert torch.equal(f32.cost, sinkhorn_divergence(x.float(), y.float(), epsilon=0.2).divergence)
    batched = wasserstein(torch.stack([x, x]), y, method="sinkhorn", epsilon=0.2)
    assert batched.cost.shape == (2,) and torch.equal(batched.cost[0], batched.cost[1])


def test_wasserstein_sinkhorn_warns_when_it_stops_unconverged(monkeypatch):
    """With the update limit below the schedule's length (``SINKHORN_MAX_ITER`` patched to 3), the warning
    states the tolerance, the updates made (the schedule's length, by hand) and ε, and points at the caller of
    :func:`w2_squared` or :func:`wasserstein`; ``SINKHORN_TOL`` is the tolerance used."""
    monkeypatch.setattr(W, "SINKHORN_MAX_ITER", 3)
    x, y, _, _ = _small(seed=53)
    z = np.concatenate([x.numpy(), y.numpy()])
    D = np.linalg.norm(z.max(0) - z.min(0))
    steps = math.ceil(math.log(2 * D**2 / 0.05) / (2 * math.log(1 / 0.7)))
    message = (
        f"Sinkhorn did not converge to tol=0.1 in {steps + 2} updates at ε = 0.05: the value is approximate "
        "(a larger epsilon converges faster)"
    )
    for public in (
        w2_squared,
        wasserstein,
    ):  # both name their caller (wasserstein's named its caller's caller)
        with pytest.warns(RuntimeWarning, match=_exactly(message)) as record:
            public(x, y, method="sinkhorn", epsilon=0.05)
        assert len(record) == 1
        if "MUTANT_UNDER_TEST" not in os.environ:  # mutmut's trampolines add stack frames
            assert record[0].filename == __file__
    monkeypatch.setattr(W, "SINKHORN_MAX_ITER", 1000)
    monkeypatch.setattr(W, "SINKHORN_TOL", 1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = wasserstein(x, y, method="sinkhorn", epsilon=0.5).cost
    assert torch.equal(got, sinkhorn_divergence(x, y, epsilon=0.5, tol=1e-9).divergence)


# ---------------------------------------------------------------------------------------------------------
# The 1-D laws


def test_normal_and_uniform_checks_and_defaults():
    """``Normal()`` is N(0, 1), ``Uniform()`` is U(0, 1); the parameters' refusals and messages."""
    assert (Normal().loc, Normal().scale) == (0.0, 1.0) and (Uniform().low, Uniform().high) == (0.0, 1.0)
    with pytest.raises(ValueError, match=_exactly("scale must be > 0, got 0.0")):
        Normal(0.0, 0.0)
    with pytest.raises(ValueError, match=_exactly("scale must be finite, got inf")):
        Normal(0.0, float("inf"))
    with pytest.raises(ValueError, match=_exactly("loc must be finite, got nan")):
        Normal(float("nan"), 1.0)
    with pytest.raises(ValueError, match=_exactly("low must be finite, got -inf")):
        Uniform(-float("inf"), 1.0)
    with pytest.raises(ValueError, match=_exactly("high must be finite, got inf")):
        Uniform(0.0, float("inf"))
    for low, high in [(1.0, 1.0), (2.0, 1.0)]:
        with pytest.raises(
            ValueError, match=_exactly(f"Uniform needs finite low < high, got low={low}, high={high}")
        ):
            Uniform(low, high)
    with pytest.raises(dataclasses.FrozenInstanceError):
        Normal().loc = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("law", [Normal(0.7, 1.9), Uniform(-1.5, 2.5)], ids=["normal", "uniform"])
def test_closed_form_laws_quantile_cdf_and_integrals_against_scipy(law):
    """``quantile``, ``cdf`` against ``scipy.stats``; ``quantile_integral(a, b, k)`` for ``k = 1, 2`` against
    ``quad`` on inner intervals, and in closed form on ``[0, 1]`` (mean, second moment; ``z = ±∞`` there)."""
    ref = (
        scipy.stats.norm(law.loc, law.scale)
        if isinstance(law, Normal)
        else scipy.stats.uniform(law.low, law.high - law.low)
    )
    u = np.array([0.01, 0.2, 0.5, 0.77, 0.999])
    assert np.allclose(law.quantile(u), ref.ppf(u), rtol=1e-13, atol=1e-13)
    xs = np.array([-3.0, -1.0, 0.0, 0.5, 2.0, 4.0])
    assert np.allclose(law.cdf(xs), ref.cdf(xs), rtol=1e-13, atol=1e-15)
    for lo, hi in [(0.05, 0.3), (0.3, 0.95), (0.5, 0.5)]:
        for k in (1, 2):
            expected = quad(lambda t, k=k: ref.ppf(t) ** k, lo, hi, epsabs=1e-13)[0]
            assert abs(float(law.quantile_integral(np.array(lo), np.array(hi), k)) - expected) <= 1e-10
    mean, second = ref.mean(), ref.var() + ref.mean() ** 2
    assert abs(float(law.quantile_integral(np.array(0.0), np.array(1.0), 1)) - mean) <= 1e-12
    assert abs(float(law.quantile_integral(np.array(0.0), np.array(1.0), 2)) - second) <= 1e-12
    lows, highs = np.array([0.0, 0.1]), np.array([0.4, 1.0])
    got = law.quantile_integral(lows, highs, 2)
    assert got.shape == (2,) and np.isfinite(got).all()
    assert abs(got[1] - quad(lambda t: ref.ppf(t) ** 2, 0.1, 1.0, epsabs=1e-13)[0]) <= 1e-9


def test_law_sample_draws_the_quantile_of_seeded_uniforms():
    """``sample(shape, generator)``: ``Q(U)`` with ``U = torch.rand(shape)`` of the generator (an int seed or a
    generator), float64 of shape ``(*shape, 1)``; ``None`` is refused (a seed is required)."""
    law = Normal(0.5, 2.0)
    got = law.sample((3, 4), 9)
    u = torch.rand((3, 4), generator=_gen(9), dtype=DT).numpy()
    assert got.shape == (3, 4, 1) and got.dtype == DT
    assert np.allclose(got[..., 0].numpy(), 0.5 + 2.0 * scipy.special.ndtri(u), rtol=1e-14, atol=0)
    assert torch.equal(law.sample(5, _gen(9)), law.sample((5,), 9))
    assert law.sample(5, 9).shape == (5, 1)
    v = Uniform(1.0, 3.0).sample(6, np.int32(4))
    assert np.allclose(
        v[:, 0].numpy(), 1.0 + 2.0 * torch.rand(6, generator=_gen(4), dtype=DT).numpy(), rtol=1e-15
    )
    message = "generator must be a torch.Generator, an int seed (Python or numpy integer), got NoneType"
    with pytest.raises(TypeError, match=_exactly(message)):
        law.sample(3, None)


def test_discrete_law_by_hand():
    """Atoms ``(2.5, −1, 0.3)`` with masses ``(1, 2, 1)/4``: sorted atoms and masses, ``len``, ``repr``, the
    quantile on the cells ``(0, ½], (½, ¾], (¾, 1]`` (``Q(0)`` the first atom), the right-continuous CDF, the
    exact quantile integrals, mean and variance."""
    law = Discrete(torch.tensor([[2.5], [-1.0], [0.3]], dtype=DT), torch.tensor([1.0, 2.0, 1.0]))
    assert np.array_equal(law.values, [-1.0, 0.3, 2.5]) and np.array_equal(law.weights, [0.5, 0.25, 0.25])
    assert len(law) == 3 and repr(law) == "Discrete(3 atoms in [-1, 2.5])"
    u = np.array([0.0, 0.25, 0.5, 0.5000001, 0.75, 0.76, 1.0])
    assert np.array_equal(law.quantile(u), [-1.0, -1.0, -1.0, 0.3, 0.3, 2.5, 2.5])
    xs = np.array([-2.0, -1.0, 0.0, 0.3, 1.0, 2.5, 9.0])
    assert np.array_equal(law.cdf(xs), [0.0, 0.5, 0.5, 0.75, 0.75, 1.0, 1.0])
    # ∫_0.25^0.9 Q = 0.25·(−1) + 0.25·0.3 + 0.15·2.5, and the same for Q²
    assert law.quantile_integral(0.25, 0.9, 1) == pytest.approx(-0.25 + 0.075 + 0.375, abs=1e-15)
    assert law.quantile_integral(0.25, 0.9, 2) == pytest.approx(0.25 + 0.25 * 0.09 + 0.15 * 6.25, abs=1e-15)
    assert law.quantile_integral(np.array([0.0]), np.array([1.0]), 1)[0] == pytest.approx(
        law.mean(), abs=1e-15
    )
    assert law.mean() == pytest.approx(-0.5 + 0.075 + 0.625, abs=1e-15)
    m = law.mean()
    assert law.variance() == pytest.approx(
        0.5 * (-1 - m) ** 2 + 0.25 * (0.3 - m) ** 2 + 0.25 * (2.5 - m) ** 2, abs=1e-15
    )
    assert isinstance(law.mean(), float) and isinstance(law.variance(), float)
    uniform = Discrete(np.array([3.0, 1.0, 2.0]))  # cells k/3 exactly: Q(1/3) = 1, Q(2/3) = 2
    assert np.array_equal(uniform.weights, [1 / 3] * 3)
    assert np.array_equal(uniform.quantile(np.array([1 / 3, 2 / 3, 0.67])), [1.0, 2.0, 3.0])
    assert np.array_equal(uniform._c, [0.0, 1 / 3, 2 / 3, 1.0])


def test_discrete_refusals_with_their_messages():
    shape_message = "a 1-D law's atoms must have shape (n,) or (n, 1), n ≥ 1, got shape {}"
    for values, shape in [(np.zeros((2, 2)), (2, 2)), (np.array([]), (0,)), (np.float64(1.0), ())]:
        with pytest.raises(ValueError, match=_exactly(shape_message.format(shape))):
            Discrete(values)
    with pytest.raises(ValueError, match=_exactly("a 1-D law's atoms must be finite: 2 are NaN or Inf")):
        Discrete(np.array([1.0, np.nan, np.inf]))
    weight_message = "weights must be finite, ≥ 0, with a positive sum, one per atom (3,), got shape {}"
    for w in ([1.0, 1.0], [1.0, -1.0, 1.0], [0.0, 0.0, 0.0], [1.0, np.nan, 1.0]):
        with pytest.raises(ValueError, match=_exactly(weight_message.format((len(w),)))):
            Discrete(np.ones(3), np.array(w))
    law = Law1d.from_sample(torch.tensor([1.0, 2.0]), torch.tensor([0.0, 1.0]))
    assert np.array_equal(law.weights, [0.0, 1.0]) and law.mean() == 2.0


def test_from_quantile_atoms_are_the_cell_midpoints_and_refusals():
    """``from_quantile(Q, n)``: atoms ``Q((k + ½)/n)``; default ``n = 2^20``; the refusals with their values."""
    law = Law1d.from_quantile(lambda u: 3 * u - 1, n=4)
    assert isinstance(law, Discrete) and np.allclose(
        law.values, [-0.625, 0.125, 0.875, 1.625], rtol=0, atol=1e-15
    )
    assert len(Law1d.from_quantile(lambda u: u)) == 1 << 20
    ties = Law1d.from_quantile(lambda u: np.floor(2 * u), n=4)  # non-decreasing with ties is allowed
    assert np.array_equal(ties.values, [0.0, 0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=_exactly("n must be ≥ 1, got 0")):
        Law1d.from_quantile(lambda u: u, n=0)
    with pytest.raises(
        ValueError, match=_exactly("quantile(u) must return one value per u, shape (4,), got (3,)")
    ):
        Law1d.from_quantile(lambda u: u[:3], n=4)
    with pytest.raises(
        ValueError, match=_exactly("quantile(u) must be finite on (0, 1), got Q(0.375) = nan")
    ):
        Law1d.from_quantile(lambda u: np.where(u > 0.3, np.nan, u), n=4)
    message = "quantile(u) must be non-decreasing, got Q(0.625) = 2 > Q(0.875) = 1.5"
    with pytest.raises(ValueError, match=_exactly(message)):
        Law1d.from_quantile(lambda u: np.array([0.0, 1.0, 2.0, 1.5]), n=4)


def test_from_density_atoms_and_grid():
    """``from_density``: ``F`` tabulated on ``grid`` points (default ``4n + 1``, a spy counts them) by the
    trapezoid rule and inverted linearly. A constant density gives the midpoints of ``[low, high]`` exactly;
    ``p(x) = 1 + x`` on ``[0, 1]`` (trapezoid exact, ``Q(u) = −1 + √(1 + 3u)``) to 1e-8; on a 3-point grid the
    error is larger than 1e-4 (negative control)."""
    sizes = []

    def flat(t):
        sizes.append(t.size)
        return 0 * t + 5.0

    law = Law1d.from_density(flat, 1.0, 3.0, n=4)
    assert sizes == [17] and np.allclose(law.values, [1.25, 1.75, 2.25, 2.75], rtol=0, atol=1e-14)
    Law1d.from_density(flat, 1.0, 3.0, n=4, grid=9)
    assert sizes[-1] == 9
    n = 1000
    u = (np.arange(n) + 0.5) / n
    exact = -1 + np.sqrt(1 + 3 * u)
    fine = Law1d.from_density(lambda t: 1 + t, 0.0, 1.0, n=n)
    assert np.abs(fine.values - exact).max() <= 1e-8
    coarse = Law1d.from_density(lambda t: 1 + t, 0.0, 1.0, n=n, grid=3)
    assert np.abs(coarse.values - exact).max() > 1e-4
    defaults = inspect.signature(Law1d.from_density).parameters
    assert defaults["n"].default == 1 << 20 and defaults["grid"].default is None


def test_from_density_refusals_with_their_messages():
    one = lambda t: 1 + 0 * t  # noqa: E731
    with pytest.raises(ValueError, match=_exactly("from_density needs low < high, got low=1.0, high=1.0")):
        Law1d.from_density(one, 1.0, 1.0)
    with pytest.raises(ValueError, match=_exactly("from_density needs low < high, got low=2.0, high=1.0")):
        Law1d.from_density(one, 2, 1)
    with pytest.raises(ValueError, match=_exactly("low must be finite, got -inf")):
        Law1d.from_density(one, -float("inf"), 1.0)
    with pytest.raises(ValueError, match=_exactly("high must be finite, got nan")):
        Law1d.from_density(one, 0.0, float("nan"))
    with pytest.raises(ValueError, match=_exactly("n must be ≥ 1, got 0")):
        Law1d.from_density(one, 0.0, 1.0, n=0)
    with pytest.raises(ValueError, match=_exactly("grid must be ≥ 2, got 1")):
        Law1d.from_density(one, 0.0, 1.0, n=4, grid=1)
    with pytest.raises(
        ValueError, match=_exactly("density(x) must return one value per x, shape (17,), got (1,)")
    ):
        Law1d.from_density(lambda t: np.ones(1), 0.0, 1.0, n=4)
    with pytest.raises(ValueError, match=_exactly("density(x) must be finite and ≥ 0, got p(0.5) = -0.5")):
        Law1d.from_density(lambda t: 0.5 - t * (t >= 0.5) * 2, 0.0, 1.0, n=1, grid=3)
    with pytest.raises(ValueError, match=_exactly("density(x) must be finite and ≥ 0, got p(0) = inf")):
        Law1d.from_density(lambda t: np.where(t == 0, np.inf, 1.0), 0.0, 1.0, n=4)
    with pytest.raises(ValueError, match=_exactly("density(x) has no mass on [0.0, 1.0]")):
        Law1d.from_density(lambda t: 0 * t, 0.0, 1.0, n=4)
    assert len(Law1d.from_density(one, 0.0, 1.0, n=4, grid=2)) == 4  # the smallest grid


# ---------------------------------------------------------------------------------------------------------
# wasserstein_to_law


@pytest.mark.parametrize("p", [1, 2])
def test_wasserstein_to_law_of_a_discrete_law_matches_pot_and_scipy(p):
    """To a weighted :class:`Discrete` law (exact quantile integrals) the cost is the two-cloud 1-D cost:
    ``ot.wasserstein_1d`` and, for ``p = 1``, ``scipy.stats.wasserstein_distance``, per replica, with
    per-replica particle weights (a zero one included); float32 particles give a float32 result."""
    atoms, masses = _randn(9, seed=60).numpy() * 1.3 + 0.2, _rand(9, seed=61).numpy() + 0.1
    law = Discrete(atoms, masses)
    x = _randn(2, 7, 1, seed=62)
    w = _rand(2, 7, seed=63)
    w[1, 0] = 0.0
    r = wasserstein_to_law(x, law, p=p, weights=w)
    assert r.cost.shape == (2,) and r.method == "law" and r.p == p and r.backend is None
    for k in range(2):
        u = x[k, :, 0].numpy()
        expected = float(ot.wasserstein_1d(u, atoms, _norm(w[k]), masses / masses.sum(), p=p))
        assert abs(float(r.cost[k]) - expected) <= 1e-12, (k, float(r.cost[k]), expected)
        if p == 1:
            assert (
                abs(float(r.cost[k]) - scipy.stats.wasserstein_distance(u, atoms, _norm(w[k]), masses))
                <= 1e-12
            )
    unweighted = wasserstein_to_law(x[0], law, p=p)
    assert unweighted.cost.shape == ()
    expected = float(ot.wasserstein_1d(x[0, :, 0].numpy(), atoms, None, masses / masses.sum(), p=p))
    assert abs(float(unweighted.cost) - expected) <= 1e-12
    f32 = wasserstein_to_law(x[0].float(), law, p=p)
    assert f32.cost.dtype == torch.float32
    assert abs(
        float(f32.cost) - float(wasserstein_to_law(x[0].float().double(), law, p=p).cost)
    ) <= 1e-6 * max(1.0, expected)
    assert float(
        wasserstein_to_law(torch.tensor(atoms)[:, None], Discrete(atoms), p=p).cost
    ) == pytest.approx(0.0, abs=1e-14)


def test_wasserstein_to_law_point_masses_in_closed_form():
    """One particle at ``c`` against U(low, high): ``W2² = (c − m)² + s²/12`` and ``W1 = E|c − U|``
    (``((c − low)² + (high − c)²)/(2s)`` inside, ``|c − m|`` outside); against N(m, σ²): ``(c − m)² + σ²``."""
    low, high = -1.0, 3.0
    s, m = high - low, 1.0
    for c in (-2.5, 0.0, 1.7, 3.0):
        x = torch.tensor([[c]], dtype=DT)
        assert float(wasserstein_to_law(x, Uniform(low, high)).cost) == pytest.approx(
            (c - m) ** 2 + s**2 / 12, rel=1e-13
        )
        w1_expected = ((c - low) ** 2 + (high - c) ** 2) / (2 * s) if low <= c <= high else abs(c - m)
        assert float(wasserstein_to_law(x, Uniform(low, high), p=1).cost) == pytest.approx(
            w1_expected, rel=1e-13
        )
        assert float(wasserstein_to_law(x, Normal(0.4, 1.5)).cost) == pytest.approx(
            (c - 0.4) ** 2 + 2.25, rel=1e-13
        )
    assert float(
        wasserstein_to_law(torch.tensor([[1.0]], dtype=DT), Uniform(low, high), p=1).value
    ) == pytest.approx(1.0)


def test_wasserstein_to_law_refusals_with_their_messages():
    x = torch.zeros(3, 1, dtype=DT)
    with pytest.raises(TypeError, match=_exactly("law must be a Law1d (e.g. Normal, Uniform), got ABCMeta")):
        wasserstein_to_law(x, Normal)
    with pytest.raises(ValueError, match=_exactly("p must be 1 or 2, got 0")):
        wasserstein_to_law(x, "not a law", p=0)  # p is checked first
    with pytest.raises(
        TypeError, match=_exactly("x must be a torch.Tensor of shape (M, d) or (B, M, d), got ndarray")
    ):
        wasserstein_to_law(np.zeros((3, 1)), Normal())
    with pytest.raises(
        ValueError, match=_exactly("x must be 1-D particles, shape (M, 1) or (B, M, 1), got shape (2, 3, 2)")
    ):
        wasserstein_to_law(torch.zeros(2, 3, 2, dtype=DT), Normal())
    with pytest.raises(
        ValueError, match=_exactly("weights must have shape (3,) or (2, 3), got shape (3, 3)")
    ):
        wasserstein_to_law(torch.zeros(2, 3, 1, dtype=DT), Normal(), weights=torch.ones(3, 3, dtype=DT))
    with pytest.raises(
        ValueError, match=_exactly("weights must have a positive sum in every replica, got a sum of 0")
    ):
        wasserstein_to_law(x, Normal(), weights=torch.zeros(3, dtype=DT))


# ---------------------------------------------------------------------------------------------------------
# Gaussians


def _bures(m1, S1, m2, S2) -> float:
    """``W2`` by ``scipy.linalg.sqrtm``: ``|Δm|² + tr S1 + tr S2 − 2 tr (S1^{½} S2 S1^{½})^{½}``."""
    r1 = scipy.linalg.sqrtm(S1).real
    cross = scipy.linalg.sqrtm(r1 @ S2 @ r1).real
    return math.sqrt(
        max(0.0, float(((m1 - m2) ** 2).sum() + np.trace(S1) + np.trace(S2) - 2 * np.trace(cross)))
    )


def _spd(d: int, seed: int) -> np.ndarray:
    A = np.random.default_rng(seed).standard_normal((d, d))
    return A @ A.T + 0.1 * np.eye(d)


def test_w2_gaussian_against_scipy_sqrtm_batched_and_broadcast():
    """Random SPD covariances in d = 3 against :func:`_bures`; leading axes broadcast (``(2, d)`` means with
    ``(2, d, d)`` against one Gaussian), the result is ``W2`` (not squared)."""
    m1 = np.random.default_rng(0).standard_normal((2, 3))
    m2 = np.array([0.5, -1.0, 2.0])
    S1 = np.stack([_spd(3, 1), _spd(3, 2)])
    S2 = _spd(3, 3)
    got = w2_gaussian(*(torch.from_numpy(t) for t in (m1, S1, m2, S2)))
    assert got.shape == (2,) and got.dtype == DT
    for k in range(2):
        assert abs(float(got[k]) - _bures(m1[k], S1[k], m2, S2)) <= 1e-10
    single = float(w2_gaussian(*(torch.from_numpy(t) for t in (m1[0], S1[0], m2, S2))))
    assert single == pytest.approx(float(got[0]), rel=1e-14)
    assert abs(single**2 - _bures(m1[0], S1[0], m2, S2)) > 0.1  # negative control: W2, not W2²


def test_w2_gaussian_singular_and_near_singular_covariances():
    """Rank-deficient covariances (collapsed directions): equal ones give exactly ``|Δm|`` (no NaN from the
    square roots of round-off); a tiny negative eigenvalue within tolerance (``−1e-12``) is read as 0; a
    rank-one pair by hand: ``S_i = v_i v_iᵀ`` gives ``W2² = |v1|² + |v2|² − 2|v1·v2|``."""
    v = np.array([[1.0, 2.0, -1.0]])
    S = torch.from_numpy(v.T @ v)
    m = torch.zeros(3, dtype=DT)
    same = w2_gaussian(m, S, m, S)
    assert math.isfinite(float(same)) and float(same) <= 1e-7
    shift = torch.tensor([0.0, 3.0, 4.0], dtype=DT)
    assert float(w2_gaussian(m, S, shift, S)) == pytest.approx(5.0, abs=1e-7)
    u = np.array([[0.5, -1.0, 2.0]])
    T = torch.from_numpy(u.T @ u)
    expected = math.sqrt((v**2).sum() + (u**2).sum() - 2 * abs(float((v @ u.T)[0, 0])))
    assert float(w2_gaussian(m, S, m, T)) == pytest.approx(expected, abs=1e-7)
    near = torch.diag(torch.tensor([1.0, -1e-12], dtype=DT))
    exact = torch.diag(torch.tensor([1.0, 0.0], dtype=DT))
    two = torch.diag(torch.tensor([4.0, 9.0], dtype=DT))
    m2 = torch.zeros(2, dtype=DT)
    got = float(w2_gaussian(m2, near, m2, two))
    assert math.isfinite(got) and got == pytest.approx(math.sqrt(1.0 + 9.0), abs=1e-5)
    assert float(w2_gaussian(m2, exact, m2, two)) == pytest.approx(math.sqrt(10.0), rel=1e-13)


def test_w2_gaussian_refusals_with_their_messages():
    """Means (shapes, rank 0, NaN, type), covariances (shape, symmetry within ``1e-12 (max|S| + 1)``,
    positive semi-definiteness within ``−1e-10 (max|S| + 1)``)."""
    m, S = torch.zeros(2, dtype=DT), torch.eye(2, dtype=DT)
    with pytest.raises(
        ValueError, match=_exactly("m1 and m2 must have shape (..., d) with the same d, got (2,), (3,)")
    ):
        w2_gaussian(m, S, torch.zeros(3, dtype=DT), S)
    with pytest.raises(
        ValueError, match=_exactly("m1 and m2 must have shape (..., d) with the same d, got (), ()")
    ):
        w2_gaussian(torch.tensor(0.0, dtype=DT), S, torch.tensor(0.0, dtype=DT), S)
    with pytest.raises(
        ValueError, match=_exactly("m2 has 1 non-finite entries (NaN or Inf), the first at index (1,)")
    ):
        w2_gaussian(m, S, torch.tensor([0.0, float("nan")], dtype=DT), S)
    with pytest.raises(TypeError, match=_exactly("m1 must be a torch.Tensor, got list")):
        w2_gaussian([0.0, 0.0], S, m, S)
    with pytest.raises(
        ValueError, match=_exactly("S1 must have shape (..., 2, 2) to match the mean, got (3, 3)")
    ):
        w2_gaussian(m, torch.eye(3, dtype=DT), m, S)
    with pytest.raises(
        ValueError, match=_exactly("S2 must have shape (..., 2, 2) to match the mean, got (2,)")
    ):
        w2_gaussian(m, S, m, torch.ones(2, dtype=DT))
    with pytest.raises(
        ValueError, match=_exactly("S2 has 1 non-finite entries (NaN or Inf), the first at index (0, 0)")
    ):
        w2_gaussian(m, S, m, torch.tensor([[float("inf"), 0.0], [0.0, 1.0]], dtype=DT))
    skew = torch.tensor([[1.0, 1e-9], [0.0, 1.0]], dtype=DT)
    with pytest.raises(ValueError, match=_exactly("S1 must be symmetric")):
        w2_gaussian(m, skew, m, S)
    nearly = torch.tensor([[1.0, 1e-13], [0.0, 1.0]], dtype=DT)  # within the tolerance
    assert float(w2_gaussian(m, nearly, m, S)) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(
        ValueError, match=_exactly("S2 must be positive semi-definite, got a negative eigenvalue")
    ):
        w2_gaussian(m, S, m, torch.diag(torch.tensor([1.0, -1e-9], dtype=DT)))
    with pytest.raises(
        ValueError, match=_exactly("S1 must be positive semi-definite, got a negative eigenvalue")
    ):
        w2_gaussian(m, -S, m, S)


def test_psd_sqrt_helper_squares_back_and_clamps():
    S = torch.from_numpy(_spd(3, 7))
    R = W._psd_sqrt(S)
    assert torch.allclose(R @ R, S, rtol=1e-12, atol=1e-12) and torch.allclose(R, R.T, atol=1e-14)
    assert np.allclose(R.numpy(), scipy.linalg.sqrtm(S.numpy()).real, rtol=1e-10, atol=1e-12)
    clamped = W._psd_sqrt(torch.diag(torch.tensor([4.0, -1e-12], dtype=DT)))
    assert torch.equal(clamped, torch.diag(torch.tensor([2.0, 0.0], dtype=DT)))
