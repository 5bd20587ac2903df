"""Whole-behaviour tests of ``meanfield.metrics.diversity``, ``meanfield.tasks.regression`` and ``meanfield.config``.

Every public function (and the private helpers it calls) is checked branch by branch against an independent
answer: numpy references, closed forms, hand-built particle sets with known cosines, and exact error
messages (anchored, so a changed word fails). Deterministic inputs only; no statistical tolerance is needed.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from typing import Any, Literal

import numpy as np
import pytest
import torch
from torch import nn

from meanfield import config as cfg
from meanfield.metrics import diversity as dv
from meanfield.tasks import regression as rg

DT = torch.float64


def t(x: Any, dtype: torch.dtype = DT) -> torch.Tensor:
    """A float64 tensor from nested lists."""
    return torch.tensor(x, dtype=dtype)


def unit_at(deg: float) -> list[float]:
    """The unit vector of the plane at angle ``deg`` degrees."""
    r = math.radians(deg)
    return [math.cos(r), math.sin(r)]


def np_cos(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Cosine matrix of the rows of X and Y, 0 for a zero row (numpy reference)."""
    nx = np.linalg.norm(X, axis=-1, keepdims=True)
    ny = np.linalg.norm(Y, axis=-1, keepdims=True)
    Xu = np.where(nx > 0, X / np.where(nx > 0, nx, 1), 0)
    Yu = np.where(ny > 0, Y / np.where(ny > 0, ny, 1), 0)
    return Xu @ np.swapaxes(Yu, -1, -2)


def exact(pattern: str) -> str:
    """An anchored regex for a whole error message."""
    return "^" + re.escape(pattern) + "$"


# ======================================================================================================
# diversity: input checks
# ======================================================================================================


def test_tensor_check_messages_and_min_rank():
    """``_tensor`` names the argument, the layout, the got type/dtype/shape; min_rank itself is accepted."""
    with pytest.raises(
        TypeError, match=exact("features must be a torch.Tensor of shape (…, M, D), got list")
    ):
        dv.pairwise_cosine([[1.0, 2.0]])
    with pytest.raises(
        TypeError, match=exact("features must be a floating-point tensor, got dtype torch.int64")
    ):
        dv.pairwise_cosine(torch.ones(2, 2, dtype=torch.long))
    with pytest.raises(
        ValueError, match=exact("features must have shape (…, M, D) (≥ 2 dimensions), got (3,)")
    ):
        dv.pairwise_cosine(torch.ones(3, dtype=DT))
    x = dv._tensor("x", torch.ones(2, 3, dtype=DT), 2, "(A, B)")
    assert x.shape == (2, 3)
    with pytest.raises(ValueError, match=exact("y must have shape (L) (≥ 3 dimensions), got (2, 3)")):
        dv._tensor("y", torch.ones(2, 3), 3, "(L)")


def test_unit_normalises_rows_and_maps_zero_to_zero():
    """``_unit`` divides by the row norm (numpy) and gives 0 (not NaN) for a zero row, in float32 too."""
    x = t([[3.0, 4.0], [0.0, 0.0], [-1.0, 0.0]])
    assert torch.equal(dv._unit(x), t([[0.6, 0.8], [0.0, 0.0], [-1.0, 0.0]]))
    small = torch.tensor([[1e-10, 0.0]], dtype=torch.float32)  # tiny but non-zero: still a unit vector
    assert torch.allclose(dv._unit(small), torch.tensor([[1.0, 0.0]]))
    assert torch.equal(dv._unit(torch.zeros(1, 3)), torch.zeros(1, 3))


# ======================================================================================================
# cosine similarities
# ======================================================================================================


def test_pairwise_cosine_matches_numpy_with_replica_axes_and_zero_rows():
    """``pairwise_cosine`` on ``(2, 3, 5, 4)`` equals the numpy cosine matrix; a zero row gives 0 throughout."""
    g = torch.Generator().manual_seed(1)
    X = torch.randn(2, 3, 5, 4, generator=g, dtype=DT)
    X[0, 1, 2] = 0
    got = dv.pairwise_cosine(X)
    ref = np_cos(X.numpy(), X.numpy())
    assert got.shape == (2, 3, 5, 5)
    assert np.allclose(got.numpy(), ref, atol=1e-14)
    assert torch.all(got[0, 1, 2] == 0) and got[0, 1, 1, 1] == pytest.approx(1.0)


def test_attention_similarity_matches_flattened_numpy_reference():
    """``attention_similarity`` equals the cosine of head maps flattened over (batch, s, t) (numpy)."""
    g = torch.Generator().manual_seed(2)
    maps = torch.rand(3, 4, 2, 2, generator=g, dtype=DT)
    got = dv.attention_similarity(maps)
    flat = maps.numpy().transpose(1, 0, 2, 3).reshape(4, -1)
    assert got.shape == (4, 4)
    assert np.allclose(got.numpy(), np_cos(flat, flat), atol=1e-14)
    # heads with disjoint supports give 0, identical up to scale give 1
    m = torch.zeros(1, 3, 2, 2, dtype=DT)
    m[0, 0, 0, 0] = 1
    m[0, 1, 1, 1] = 1
    m[0, 2, 0, 0] = 5
    assert torch.allclose(dv.attention_similarity(m), t([[1, 0, 1], [0, 1, 0], [1, 0, 1]]))


def test_attention_similarity_shape_errors():
    """Fewer than 4 axes: the ``_tensor`` message; more than 4: the exact-rank message."""
    with pytest.raises(
        ValueError, match=exact("maps must have shape (B, M, T, T) (≥ 4 dimensions), got (2, 3, 4)")
    ):
        dv.attention_similarity(torch.ones(2, 3, 4, dtype=DT))
    with pytest.raises(ValueError, match=exact("maps must have shape (B, M, T, T), got (1, 2, 3, 4, 4)")):
        dv.attention_similarity(torch.ones(1, 2, 3, 4, 4, dtype=DT))


def test_mean_off_diagonal_matches_numpy_on_nonsymmetric_batches():
    """``mean_off_diagonal`` equals ``(ΣS − tr S)/(M(M−1))`` per replica for non-symmetric S; M = 2 works."""
    g = torch.Generator().manual_seed(3)
    S = torch.randn(2, 4, 4, generator=g, dtype=DT)
    ref = (S.numpy().sum((-1, -2)) - np.trace(S.numpy(), axis1=-2, axis2=-1)) / 12
    got = dv.mean_off_diagonal(S)
    assert got.shape == (2,) and np.allclose(got.numpy(), ref, atol=1e-14)
    assert float(dv.mean_off_diagonal(t([[7.0, 2.0], [4.0, 9.0]]))) == pytest.approx(3.0)


@pytest.mark.parametrize(("shape", "got"), [((2, 3), "(2, 3)"), ((1, 1), "(1, 1)"), ((3, 1, 1), "(3, 1, 1)")])
def test_mean_off_diagonal_refuses_non_square_or_single(shape, got):
    """Non-square S or M = 1: the message gives the rule and the shape."""
    with pytest.raises(ValueError, match=exact(f"S must be square (…, M, M) with M ≥ 2, got {got}")):
        dv.mean_off_diagonal(torch.ones(*shape, dtype=DT))


# ======================================================================================================
# covariance and effective rank
# ======================================================================================================


def test_output_covariance_matches_numpy_with_trailing_axes():
    """``C_ij = 1/(N−1) Σ_n ⟨φ_i−μ_i, φ_j−μ_j⟩`` over trailing axes equals numpy; N = 2 is accepted."""
    g = torch.Generator().manual_seed(4)
    out = torch.randn(6, 3, 2, 2, generator=g, dtype=DT) + 5.0
    phi = out.numpy().reshape(6, 3, 4)
    phi = phi - phi.mean(0)
    ref = np.einsum("nif,njf->ij", phi, phi) / 5
    assert np.allclose(dv.output_covariance(out).numpy(), ref, atol=1e-12)
    scalar = t([[1.0, 2.0], [3.0, 6.0]])  # N = 2, M = 2: C = [[2, 4], [4, 8]]
    assert torch.allclose(dv.output_covariance(scalar), t([[2.0, 4.0], [4.0, 8.0]]))


def test_output_covariance_equals_numpy_cov_for_scalar_outputs():
    """For ``(N, M)`` outputs the covariance is ``np.cov`` of the columns (ddof = 1)."""
    g = torch.Generator().manual_seed(5)
    out = torch.randn(7, 4, generator=g, dtype=DT)
    assert np.allclose(dv.output_covariance(out).numpy(), np.cov(out.numpy().T), atol=1e-13)


def test_output_covariance_needs_two_samples():
    """N = 1: the exact message; a 1-d tensor: the layout message."""
    with pytest.raises(
        ValueError,
        match=exact("outputs needs N ≥ 2 samples on its first axis to estimate a covariance, got N = 1"),
    ):
        dv.output_covariance(torch.ones(1, 3, dtype=DT))
    with pytest.raises(ValueError, match=re.escape("outputs must have shape (N, M, *F) (≥ 2 dimensions)")):
        dv.output_covariance(torch.ones(3, dtype=DT))


def test_effective_rank_closed_forms():
    """``exp(H(p))`` of the eigenvalues: diag(1, 1, 2) gives exp(H(1/4, 1/4, 1/2)); identity M; rank one 1;
    zero matrix 0; negative round-off eigenvalues are clipped (diag(1, −1) has rank 1); batches and float32."""
    p = np.array([0.25, 0.25, 0.5])
    assert float(dv.effective_rank(torch.diag(t([1.0, 1.0, 2.0])))) == pytest.approx(
        math.exp(-(p * np.log(p)).sum())
    )
    assert float(dv.effective_rank(torch.eye(4, dtype=DT))) == pytest.approx(4.0)
    assert float(dv.effective_rank(torch.ones(3, 3, dtype=DT))) == pytest.approx(1.0)
    assert float(dv.effective_rank(torch.zeros(3, 3, dtype=DT))) == 0.0
    assert float(dv.effective_rank(torch.diag(t([1.0, -1.0])))) == pytest.approx(1.0)
    assert float(dv.effective_rank(torch.diag(t([0.0, 0.0, 3.0, 3.0])))) == pytest.approx(2.0)
    batch = torch.stack([torch.eye(3, dtype=DT), torch.zeros(3, 3, dtype=DT), torch.diag(t([2.0, 2.0, 0.0]))])
    assert torch.allclose(dv.effective_rank(batch), t([3.0, 0.0, 2.0]))
    r32 = dv.effective_rank(torch.eye(5))
    assert r32.dtype == torch.float32 and float(r32) == pytest.approx(5.0, rel=1e-5)


def test_effective_rank_refuses_non_square():
    """Non-square C: the exact message."""
    with pytest.raises(ValueError, match=exact("C must be square (…, M, M), got (2, 3)")):
        dv.effective_rank(torch.ones(2, 3, dtype=DT))


# ======================================================================================================
# teacher alignment, aligned fraction, coverage
# ======================================================================================================


def test_teacher_alignment_matches_numpy_and_any_teacher_length():
    """``A_ik`` equals the numpy cosine of (replica-batched) w and teacher rows of any length; w = 0 gives 0."""
    g = torch.Generator().manual_seed(6)
    w = torch.randn(2, 5, 3, generator=g, dtype=DT)
    w[1, 0] = 0
    teacher = torch.randn(2, 3, generator=g, dtype=DT) * 7
    got = dv.teacher_alignment(w, teacher)
    assert got.shape == (2, 5, 2)
    assert np.allclose(got.numpy(), np_cos(w.numpy(), teacher.numpy()), atol=1e-14)
    assert torch.all(got[1, 0] == 0)


def test_teacher_alignment_shape_errors():
    """A d mismatch or a 3-d teacher: the message names the expected d, w's shape and the teacher's."""
    with pytest.raises(
        ValueError, match=exact("teacher must have shape (K, d=3) to match w (4, 3), got (2, 5)")
    ):
        dv.teacher_alignment(torch.ones(4, 3, dtype=DT), torch.ones(2, 5, dtype=DT))
    with pytest.raises(
        ValueError, match=exact("teacher must have shape (K, d=3) to match w (4, 3), got (1, 2, 3)")
    ):
        dv.teacher_alignment(torch.ones(4, 3, dtype=DT), torch.ones(1, 2, 3, dtype=DT))
    with pytest.raises(ValueError, match=exact("teacher must have shape (K, d) (≥ 2 dimensions), got (3,)")):
        dv.teacher_alignment(torch.ones(4, 3, dtype=DT), torch.ones(3, dtype=DT))
    with pytest.raises(ValueError, match=exact("w must have shape (…, M, d) (≥ 2 dimensions), got (3,)")):
        dv.teacher_alignment(torch.ones(3, dtype=DT), torch.ones(1, 3, dtype=DT))


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (True, TypeError, "threshold must be a real number in [−1, 1] (a cosine), got bool"),
        ("0.5", TypeError, "threshold must be a real number in [−1, 1] (a cosine), got str"),
        (None, TypeError, "threshold must be a real number in [−1, 1] (a cosine), got NoneType"),
        (1.0000001, ValueError, "threshold must lie in [−1, 1] (a cosine), got 1.0000001"),
        (-1.5, ValueError, "threshold must lie in [−1, 1] (a cosine), got -1.5"),
        (2, ValueError, "threshold must lie in [−1, 1] (a cosine), got 2"),
    ],
)
def test_check_cosine_refuses(value, error, message):
    """``_check_cosine``: bools and non-numbers are a TypeError, out-of-range a ValueError (exact texts)."""
    with pytest.raises(error, match=exact(message)):
        dv._check_cosine("threshold", value)
    with pytest.raises(error, match=exact(message)):
        dv.aligned_fraction(torch.ones(2, 2, dtype=DT), torch.ones(1, 2, dtype=DT), value)


def test_check_cosine_accepts_bounds_and_returns_float():
    """−1, 1 (ints) and 0.3 are accepted and returned as floats."""
    for v in (-1, 1, 0.3, -1.0, 1.0):
        out = dv._check_cosine("x", v)
        assert out == v and type(out) is float


def test_live_mask_default_broadcast_and_errors():
    """``_live_mask``: None gives all True of the shape; a (M,) mask broadcasts over replicas; a wrong dtype
    or a non-tensor is a TypeError naming the dtype (or the value); a wrong shape a ValueError."""
    m = dv._live_mask(None, torch.Size([2, 3]), torch.device("cpu"))
    assert m.dtype == torch.bool and m.shape == (2, 3) and bool(m.all())
    live = torch.tensor([True, False, True])
    assert torch.equal(dv._live_mask(live, torch.Size([2, 3]), torch.device("cpu")), live.expand(2, 3))
    with pytest.raises(
        TypeError, match=exact("live must be a boolean tensor of shape (…, M), got torch.float32")
    ):
        dv._live_mask(torch.ones(3), torch.Size([3]), torch.device("cpu"))
    with pytest.raises(
        TypeError, match=exact("live must be a boolean tensor of shape (…, M), got [True, False]")
    ):
        dv._live_mask([True, False], torch.Size([2]), torch.device("cpu"))
    with pytest.raises(ValueError, match=exact("live must have shape (…, M) = (2, 4), got (3,)")):
        dv._live_mask(live, torch.Size([2, 4]), torch.device("cpu"))


def _fan(degrees: list[float]) -> torch.Tensor:
    """Particles at the given angles in the plane, each scaled by 1 + its index (lengths must not matter)."""
    return t([[(1 + i) * c for c in unit_at(d)] for i, d in enumerate(degrees)])


TEACH2 = t([[1.0, 0.0], [0.0, 1.0]])


def test_aligned_fraction_default_threshold_is_point_nine_inclusive():
    """Default τ = 0.9, compared with ≥: cos = 0.9 exactly counts, cos = 0.89 does not (x-axis teacher)."""
    w = t([[0.9, math.sqrt(1 - 0.81)], [0.89, math.sqrt(1 - 0.89**2)], [1.0, 0.0], [-1.0, 0.0]])
    teacher = t([[1.0, 0.0]])
    A = dv.teacher_alignment(w, teacher)
    assert float(A[0, 0]) >= 0.9  # the boundary particle really sits at 0.9 up to rounding
    assert float(dv.aligned_fraction(w, teacher)) == pytest.approx(2 / 4)
    assert float(dv.aligned_fraction(w, teacher, 0.95)) == pytest.approx(1 / 4)
    assert float(dv.aligned_fraction(w, teacher, -1.0)) == pytest.approx(1.0)


def test_aligned_fraction_symmetric_live_and_empty():
    """``symmetric`` counts −u; ``live`` restricts numerator and denominator; no live particle gives 0."""
    w = _fan([0.0, 180.0, 90.0, 45.0, 270.0])  # cos with x: 1, −1, 0, .707, 0; with y: 0, 0, 1, .707, −1
    assert float(dv.aligned_fraction(w, TEACH2)) == pytest.approx(2 / 5)  # 0°, 90°
    assert float(dv.aligned_fraction(w, TEACH2, symmetric=True)) == pytest.approx(4 / 5)  # + 180°, 270°
    assert float(dv.aligned_fraction(w, TEACH2, 0.7)) == pytest.approx(3 / 5)
    live = torch.tensor([True, True, False, False, False])
    assert float(dv.aligned_fraction(w, TEACH2, live=live)) == pytest.approx(1 / 2)
    assert float(dv.aligned_fraction(w, TEACH2, symmetric=True, live=live)) == pytest.approx(1.0)
    one = torch.tensor([True, False, False, False, False])  # a single live particle, aligned: 1/1
    assert float(dv.aligned_fraction(w, TEACH2, live=one)) == 1.0
    assert torch.equal(dv.aligned_fraction(w, TEACH2, live=one, by_teacher=True), t([1.0, 0.0]))
    none = torch.zeros(5, dtype=torch.bool)
    assert float(dv.aligned_fraction(w, TEACH2, live=none)) == 0.0
    assert torch.equal(dv.aligned_fraction(w, TEACH2, live=none, by_teacher=True), t([0.0, 0.0]))


def test_aligned_fraction_by_teacher_counts_the_argmax_direction():
    """``by_teacher``: per direction, the live aligned particles whose best teacher it is (sums to aligned)."""
    w = _fan([0.0, 5.0, 10.0, 88.0, 45.0, 180.0])
    got = dv.aligned_fraction(w, TEACH2, by_teacher=True)
    assert torch.allclose(got, t([3 / 6, 1 / 6]))
    assert float(got.sum()) == pytest.approx(float(dv.aligned_fraction(w, TEACH2)))
    sym = dv.aligned_fraction(w, TEACH2, symmetric=True, by_teacher=True)
    assert torch.allclose(sym, t([4 / 6, 1 / 6]))
    live = torch.tensor([False, True, True, True, True, True])
    assert torch.allclose(dv.aligned_fraction(w, TEACH2, by_teacher=True, live=live), t([2 / 5, 1 / 5]))
    # a particle at 45° has max below τ: never counted, whatever its argmax
    assert torch.allclose(dv.aligned_fraction(_fan([45.0, 45.0]), TEACH2, by_teacher=True), t([0.0, 0.0]))


def test_aligned_fraction_per_replica():
    """Replica axes: one value per replica, with a (M,) live mask broadcast over replicas."""
    w = torch.stack([_fan([0.0, 90.0, 45.0]), _fan([45.0, 45.0, 0.0])])  # (2, 3, 2)
    assert torch.allclose(dv.aligned_fraction(w, TEACH2), t([2 / 3, 1 / 3]))
    live = torch.tensor([True, False, True])
    assert torch.allclose(dv.aligned_fraction(w, TEACH2, live=live), t([1 / 2, 1 / 2]))
    bt = dv.aligned_fraction(w, TEACH2, by_teacher=True)
    assert bt.shape == (2, 2) and torch.allclose(bt, t([[1 / 3, 1 / 3], [1 / 3, 0.0]]))


def test_teacher_coverage_counts_directions_symmetric_by_default():
    """Coverage: fraction of the K directions with a live particle at |cos| ≥ τ (default symmetric, τ = 0.9)."""
    w = _fan([180.0, 5.0, 45.0])  # covers x (both signs), not y
    assert float(dv.teacher_coverage(w, TEACH2)) == pytest.approx(1 / 2)
    w2 = _fan([180.0, 270.0])  # −x and −y: covered only up to sign
    assert float(dv.teacher_coverage(w2, TEACH2)) == pytest.approx(1.0)
    assert float(dv.teacher_coverage(w2, TEACH2, symmetric=False)) == 0.0
    # default τ = 0.9 inclusive: cos 0.9 exactly covers, 0.89 does not
    at = t([[0.9, math.sqrt(1 - 0.81)]])
    below = t([[0.89, math.sqrt(1 - 0.89**2)]])
    teacher = t([[1.0, 0.0]])
    assert float(dv.teacher_coverage(at, teacher)) == 1.0
    assert float(dv.teacher_coverage(below, teacher)) == 0.0
    assert float(dv.teacher_coverage(below, teacher, 0.85)) == 1.0


def test_teacher_coverage_dead_particles_never_count_even_at_minus_one():
    """A dead particle is filled below −1, so τ = −1 covers only through live particles; a live one at
    cos = −1 (symmetric off) covers at τ = −1 (≥)."""
    w = _fan([180.0, 0.0])
    teacher = t([[1.0, 0.0]])
    dead_pos = torch.tensor([True, False])  # only the −x particle is live
    assert float(dv.teacher_coverage(w, teacher, -1.0, symmetric=False, live=dead_pos)) == 1.0
    assert float(dv.teacher_coverage(w, teacher, 0.5, symmetric=False, live=dead_pos)) == 0.0
    assert float(dv.teacher_coverage(w, teacher, 0.5, live=dead_pos)) == 1.0
    none = torch.zeros(2, dtype=torch.bool)
    assert float(dv.teacher_coverage(w, teacher, -1.0, symmetric=False, live=none)) == 0.0
    assert float(dv.teacher_coverage(w, teacher, -1.0, live=none)) == 0.0


def test_teacher_coverage_per_replica_and_threshold_check():
    """Replicas give one coverage each; the threshold is checked with the cosine message."""
    w = torch.stack([_fan([0.0, 90.0]), _fan([45.0, 46.0]), _fan([10.0, 12.0])])
    assert torch.allclose(dv.teacher_coverage(w, TEACH2), t([1.0, 0.0, 0.5]))
    with pytest.raises(ValueError, match=exact("threshold must lie in [−1, 1] (a cosine), got 2")):
        dv.teacher_coverage(w, TEACH2, 2)
    with pytest.raises(
        TypeError, match=exact("threshold must be a real number in [−1, 1] (a cosine), got bool")
    ):
        dv.teacher_coverage(w, TEACH2, False)


# ======================================================================================================
# teacher overlap
# ======================================================================================================


def _np_overlap(w: np.ndarray, teacher: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """numpy reference: ‖P ŵ‖² with P = U (UᵀU)⁻¹ Uᵀ the projector on the rows of teacher."""
    U = teacher.T
    P = U @ np.linalg.inv(U.T @ U) @ U.T
    wh = w / np.linalg.norm(w, axis=-1, keepdims=True)
    proj = np.einsum("...i,ij,...j->...", wh, P, wh)
    if weights is None:
        return proj.mean(-1)
    return (weights * proj).sum(-1) / weights.sum(-1)


def test_teacher_overlap_span_matches_numpy_projector_for_skew_teacher():
    """Span version equals ``1/M Σ ŵᵀ P ŵ`` with the numpy projector, for a non-orthogonal float32 teacher."""
    g = torch.Generator().manual_seed(7)
    w = torch.randn(3, 6, 4, generator=g, dtype=DT) * 3
    teacher = t([[1.0, 1.0, 0.0, 0.0], [0.0, 2.0, 1.0, 0.0]])  # not orthogonal, any lengths
    got = dv.teacher_overlap(w, teacher)
    assert got.dtype == DT and got.shape == (3,)
    assert np.allclose(got.numpy(), _np_overlap(w.numpy(), teacher.numpy()), atol=1e-12)
    assert not np.allclose(got.numpy(), _np_overlap(w.numpy(), teacher.numpy()[:1]), atol=1e-3)


def test_teacher_overlap_nearest_and_known_values():
    """``nearest`` takes max_k cos²; for two axes and w at 30°: span gives 1, nearest cos²30° = 3/4."""
    w = _fan([30.0, 90.0])
    assert float(dv.teacher_overlap(w, TEACH2)) == pytest.approx(1.0)
    assert float(dv.teacher_overlap(w, TEACH2, nearest=True)) == pytest.approx((0.75 + 1.0) / 2)
    w3 = t([[1.0, 1.0, 1.0], [0.0, 0.0, 2.0]])
    teach = t([[1.0, 0.0, 0.0]])
    assert float(dv.teacher_overlap(w3, teach)) == pytest.approx((1 / 3 + 0) / 2)
    assert float(dv.teacher_overlap(w3, teach, nearest=True)) == pytest.approx((1 / 3 + 0) / 2)
    assert float(dv.teacher_overlap(-w3, teach)) == pytest.approx(1 / 6)  # sign-symmetric


def test_teacher_overlap_weights():
    """Weights: ``Σ ω_i q_i / Σ ω_i`` (numpy), broadcast over replicas; zero total weight gives 0."""
    w = _fan([0.0, 90.0, 45.0])  # against teacher x: q = 1, 0, 1/2
    teacher = t([[1.0, 0.0]])
    weights = t([1.0, 3.0, 2.0])
    assert float(dv.teacher_overlap(w, teacher, weights=weights)) == pytest.approx((1 + 0 + 1) / 6)
    wr = torch.stack([w, w.flip(0)])
    got = dv.teacher_overlap(wr, teacher, weights=weights)
    assert torch.allclose(got, t([2 / 6, (1 * 0.5 + 3 * 0 + 2 * 1) / 6]))
    assert float(dv.teacher_overlap(w, teacher, weights=torch.zeros(3, dtype=DT))) == 0.0
    assert float(dv.teacher_overlap(w, teacher, weights=t([0.0, 0.0, 5.0]), nearest=True)) == pytest.approx(
        0.5
    )
    w32 = dv.teacher_overlap(w, teacher, weights=torch.tensor([1, 1, 0]))  # integer weights are cast
    assert w32.dtype == DT and float(w32) == pytest.approx(0.5)


def test_teacher_overlap_errors():
    """Negative or non-tensor weights, and a teacher of the wrong width, are refused with their messages."""
    w = _fan([0.0, 90.0])
    with pytest.raises(ValueError, match=exact("weights must be a non-negative tensor of shape (…, M)")):
        dv.teacher_overlap(w, TEACH2, weights=t([1.0, -0.1]))
    with pytest.raises(ValueError, match=exact("weights must be a non-negative tensor of shape (…, M)")):
        dv.teacher_overlap(w, TEACH2, weights=[1.0, 1.0])
    with pytest.raises(
        ValueError, match=exact("teacher must have shape (K, d=2) to match w (2, 2), got (1, 3)")
    ):
        dv.teacher_overlap(w, torch.ones(2, 3, dtype=DT))
    with pytest.raises(TypeError, match=exact("w must be a torch.Tensor of shape (…, M, d), got list")):
        dv.teacher_overlap([[1.0]], TEACH2)
    with pytest.raises(
        TypeError, match=exact("teacher must be a floating-point tensor, got dtype torch.int64")
    ):
        dv.teacher_overlap(w, torch.ones(1, 2, dtype=torch.long))


# ======================================================================================================
# live particles
# ======================================================================================================


def test_live_particles_default_tol_relative_to_mean_strict():
    """Live iff ``|a_i| > tol · mean|a|`` (strict), default tol 0.05; scale-free; per replica."""
    a = t([10.0, 10.0, 10.0, 10.0, 0.5, 0.6, -0.6, 0.0])  # mean |a| = 42.2 / 8 = 5.275; 0.05·mean = 0.26375
    assert torch.equal(dv.live_particles(a), torch.tensor([True] * 4 + [True, True, True, False]))
    # exact boundary: |a| = [4, 1, 1, 2] mean 2, tol 0.5 -> threshold 1: the 1's are dead (strict)
    b = t([4.0, 1.0, -1.0, 2.0])
    assert torch.equal(dv.live_particles(b, 0.5), torch.tensor([True, False, False, True]))
    assert torch.equal(dv.live_particles(b * 1e6, 0.5), torch.tensor([True, False, False, True]))
    assert torch.equal(dv.live_particles(b, 0.0), torch.tensor([True, True, True, True]))
    c = t([1.0, 0.04, 0.06, 0.0])  # mean 0.275, 0.05·mean = 0.01375: 0.04 and 0.06 live
    assert torch.equal(dv.live_particles(c), torch.tensor([True, True, True, False]))
    # mean 5.7957: 0.05·mean = 0.2898 (0.06·mean = 0.348, 0.04·mean = 0.232)
    e = t([10.0, 10.0, 10.0, 10.0, 0.3, 0.27, 0.0])
    assert torch.equal(dv.live_particles(e), torch.tensor([True] * 5 + [False, False]))
    d = t([1.0, 0.01, 0.0, 0.0])  # mean 0.2525, threshold 0.012625: 0.01 dead
    assert torch.equal(dv.live_particles(d), torch.tensor([True, False, False, False]))
    rep = torch.stack([b, t([1.0, 1.0, 1.0, 1.0])])
    assert torch.equal(dv.live_particles(rep, 0.5), torch.tensor([[True, False, False, True], [True] * 4]))
    assert not bool(dv.live_particles(torch.zeros(3, dtype=DT)).any())


def test_live_particles_vector_norm_over_output_axis():
    """``vector=True`` uses ``‖a_i‖`` over the last axis; without it a (M, k) tensor is read per entry."""
    a = t([[3.0, 4.0], [0.0, 0.1], [0.0, 0.0], [1.0, 0.0]])  # norms 5, 0.1, 0, 1; mean 1.525
    assert torch.equal(dv.live_particles(a, 0.5, vector=True), torch.tensor([True, False, False, True]))
    assert dv.live_particles(a, 0.5).shape == (4, 2)


def test_live_particles_errors():
    """Negative tol: the checker's message; vector needs 2 axes; scalar needs 1."""
    with pytest.raises(ValueError, match=exact("tol must be ≥ 0, got -0.1")):
        dv.live_particles(t([1.0]), -0.1)
    with pytest.raises(ValueError, match=exact("a must have shape (…, M, k) (≥ 2 dimensions), got (4,)")):
        dv.live_particles(torch.ones(4, dtype=DT), vector=True)
    with pytest.raises(ValueError, match=exact("a must have shape (…, M) (≥ 1 dimensions), got ()")):
        dv.live_particles(torch.tensor(1.0, dtype=DT))


# ======================================================================================================
# mode labels, distinct modes, collapse rate
# ======================================================================================================


def test_mode_labels_order_of_first_particle_and_default_radius():
    """Labels 0, 1, … in order of each cluster's first particle; default r = 0.1 links cos 0.95 (18.2°),
    not cos 0.85 (31.8°)."""
    w = _fan([0.0, 90.0, 10.0, 200.0, 95.0, 40.0])
    assert mode_list(dv.mode_labels(w)) == [0, 1, 0, 2, 1, 3]
    pair = _fan([0.0, math.degrees(math.acos(0.95))])
    assert mode_list(dv.mode_labels(pair)) == [0, 0]
    far = _fan([0.0, math.degrees(math.acos(0.85))])
    assert mode_list(dv.mode_labels(far)) == [0, 1]
    assert mode_list(dv.mode_labels(far, 0.16)) == [0, 0]
    out = dv.mode_labels(w)
    assert out.dtype == torch.long


def mode_list(x: torch.Tensor) -> list[int]:
    """A label tensor as a list."""
    return [int(v) for v in x]


def test_mode_labels_radius_boundary_inclusive_and_range():
    """``1 − cos ≤ r`` (inclusive): at r = 0 identical directions link; r = 2 links all non-zero ones."""
    w = t([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    assert mode_list(dv.mode_labels(w, 0.0)) == [0, 0, 1, 2]
    assert mode_list(dv.mode_labels(w, 1.0)) == [0, 0, 0, 0]  # 1 − cos 90° = 1 ≤ 1, chains to −x
    assert mode_list(dv.mode_labels(w, 0.999)) == [0, 0, 1, 2]
    assert mode_list(dv.mode_labels(w, 2)) == [0, 0, 0, 0]
    with pytest.raises(
        ValueError, match=exact("radius must lie in [0, 2] (a cosine distance 1 − cos), got 2.5")
    ):
        dv.mode_labels(w, 2.5)
    with pytest.raises(ValueError, match=exact("radius must be ≥ 0, got -0.1")):
        dv.mode_labels(w, -0.1)
    with pytest.raises(
        ValueError, match=exact("features must have shape (M, D) (one replica), got (2, 4, 2)")
    ):
        dv.mode_labels(torch.ones(2, 4, 2, dtype=DT))
    with pytest.raises(ValueError, match=exact("features must have shape (M, D) (≥ 2 dimensions), got (4,)")):
        dv.mode_labels(torch.ones(4, dtype=DT))


def test_mode_labels_symmetric_and_dead_particles():
    """``symmetric`` joins w and −w; dead particles get −1 and do not link (a dead chain link splits)."""
    w = _fan([0.0, 180.0, 90.0])
    assert mode_list(dv.mode_labels(w)) == [0, 1, 2]
    assert mode_list(dv.mode_labels(w, symmetric=True)) == [0, 0, 1]
    chain = _fan([0.0, 20.0, 40.0])
    r = 1 - math.cos(math.radians(25))  # neighbours (20°) link, 40° does not
    assert mode_list(dv.mode_labels(chain, r)) == [0, 0, 0]
    assert mode_list(dv.mode_labels(chain, r, live=torch.tensor([True, False, True]))) == [0, -1, 1]
    assert mode_list(dv.mode_labels(chain, r, live=torch.tensor([False, True, True]))) == [-1, 0, 0]
    assert mode_list(dv.mode_labels(chain, r, live=torch.zeros(3, dtype=torch.bool))) == [-1, -1, -1]


def test_mode_labels_long_chain_needs_several_propagation_rounds():
    """A chain stored in reverse angle order joins into one cluster (label 0 must travel M − 1 hops)."""
    chain = _fan([100.0, 80.0, 60.0, 40.0, 20.0, 0.0])
    r = 1 - math.cos(math.radians(25))
    assert mode_list(dv.mode_labels(chain, r)) == [0] * 6
    shuffled = chain[[0, 5, 1, 4, 2, 3]]  # 100, 0, 80, 20, 60, 40: still one chain
    assert mode_list(dv.mode_labels(shuffled, r)) == [0] * 6
    split = _fan([100.0, 80.0, 60.0, 10.0, -10.0])  # 60 → 10 is a 50° gap
    assert mode_list(dv.mode_labels(split, r)) == [0, 0, 0, 1, 1]


def test_mode_labels_detaches_features():
    """Features that require grad are accepted (the cosines are computed on a detached copy)."""
    w = _fan([0.0, 5.0]).requires_grad_(True)
    out = dv.mode_labels(w)
    assert mode_list(out) == [0, 0] and not out.requires_grad


def test_distinct_modes_floor_is_max_of_two_and_fraction():
    """A mode holds ≥ max(2, f·|L|) live particles: singletons never count; with f = 0.5 of 8 a cluster of 4
    counts and one of 3 does not; the default f = 0.05 with 60 particles needs 3."""
    w = _fan([0.0, 90.0, 200.0, 300.0])
    assert float(dv.distinct_modes(w)) == 0.0
    w2 = _fan([0.0, 1.0, 90.0, 91.0, 200.0])
    assert float(dv.distinct_modes(w2)) == 2.0
    eight = _fan([0.0] * 4 + [90.0] * 3 + [200.0])
    assert float(dv.distinct_modes(eight, min_fraction=0.5)) == 1.0
    assert float(dv.distinct_modes(eight, min_fraction=0.375)) == 2.0
    assert float(dv.distinct_modes(eight, min_fraction=0.0)) == 2.0
    assert float(dv.distinct_modes(eight, min_fraction=1.0)) == 0.0
    sixty = torch.eye(60, dtype=DT)  # 60 orthogonal particles, then a pair (0, 1) and a triple (2, 3, 4)
    sixty[1] = sixty[0]
    sixty[3] = sixty[2]
    sixty[4] = sixty[2]
    assert float(dv.distinct_modes(sixty)) == 1.0  # floor 0.05·60 = 3: the pair is not a mode
    assert float(dv.distinct_modes(sixty, min_fraction=0.0)) == 2.0


def test_distinct_modes_radius_symmetric_live_replicas_and_dtype():
    """Arguments reach ``mode_labels``; live counts set the floor per replica; output dtype/shape."""
    w = _fan([0.0, 180.0, 90.0, 270.0])
    assert float(dv.distinct_modes(w)) == 0.0
    assert float(dv.distinct_modes(w, symmetric=True)) == 2.0
    assert float(dv.distinct_modes(_fan([0.0, 30.0]))) == 0.0
    assert float(dv.distinct_modes(_fan([0.0, 30.0]), 0.2)) == 1.0
    live = torch.tensor([True, True, True, False])
    assert float(dv.distinct_modes(w, symmetric=True, live=live)) == 1.0
    rep = torch.stack([torch.stack([_fan([0.0, 1.0, 90.0])] * 2), torch.stack([_fan([0.0, 90.0, 91.0])] * 2)])
    out = dv.distinct_modes(rep)
    assert out.shape == (2, 2) and out.dtype == DT and torch.equal(out, t([[1.0, 1.0], [1.0, 1.0]]))
    f32 = dv.distinct_modes(_fan([0.0, 1.0]).float())
    assert f32.dtype == torch.float32 and float(f32) == 1.0
    per_rep_live = torch.tensor([[True, True, True], [True, False, True]])
    got = dv.distinct_modes(torch.stack([_fan([0.0, 1.0, 90.0]), _fan([0.0, 90.0, 91.0])]), live=per_rep_live)
    assert torch.equal(got, t([1.0, 0.0]))


def test_distinct_modes_min_fraction_errors():
    """min_fraction outside [0, 1]: exact messages."""
    w = _fan([0.0, 1.0])
    with pytest.raises(ValueError, match=exact("min_fraction must lie in [0, 1], got 1.5")):
        dv.distinct_modes(w, min_fraction=1.5)
    with pytest.raises(ValueError, match=exact("min_fraction must be ≥ 0, got -0.5")):
        dv.distinct_modes(w, min_fraction=-0.5)
    with pytest.raises(
        TypeError, match=exact("features must be a torch.Tensor of shape (…, M, D), got list")
    ):
        dv.distinct_modes([[1.0]])


def test_collapse_rate_default_radius_and_boundary():
    """Default r = 0.01: cos 0.995 collapses, cos 0.985 does not; the comparison is inclusive."""
    a = math.degrees(math.acos(0.995))
    b = math.degrees(math.acos(0.985))
    assert float(dv.collapse_rate(_fan([0.0, a, 90.0]))) == pytest.approx(2 / 3)
    assert float(dv.collapse_rate(_fan([0.0, b, 90.0]))) == 0.0
    assert float(dv.collapse_rate(_fan([0.0, b, 90.0]), 0.02)) == pytest.approx(2 / 3)
    w = t([[1.0, 0.0], [0.0, 1.0], [2.0, 0.0]])
    assert float(dv.collapse_rate(w, 0.0)) == pytest.approx(2 / 3)  # identical directions at r = 0
    assert float(dv.collapse_rate(w, 1.0)) == pytest.approx(1.0)  # 1 − cos 90° = 1 ≤ 1
    assert float(dv.collapse_rate(_fan([0.0, 90.0, 180.0]), 0.999)) == 0.0
    assert float(dv.collapse_rate(_fan([0.0, 180.0]), 2)) == 1.0


def test_collapse_rate_symmetric_live_self_and_replicas():
    """−w collapses only with ``symmetric``; dead particles are no neighbours; a particle is not its own
    neighbour; replicas give one value each."""
    w = _fan([0.0, 180.0, 90.0, 91.0])
    r = 1 - math.cos(math.radians(2))
    assert float(dv.collapse_rate(w, r)) == pytest.approx(2 / 4)
    assert float(dv.collapse_rate(w, r, symmetric=True)) == pytest.approx(1.0)
    live = torch.tensor([True, True, True, False])
    assert float(dv.collapse_rate(w, r, live=live)) == 0.0
    assert float(dv.collapse_rate(w, r, symmetric=True, live=live)) == pytest.approx(2 / 3)
    one = torch.tensor([True, False, False, False])
    assert float(dv.collapse_rate(w, 2, live=one)) == 0.0
    assert float(dv.collapse_rate(w, 2, live=torch.zeros(4, dtype=torch.bool))) == 0.0
    rep = torch.stack([w, _fan([0.0, 90.0, 180.0, 270.0])])
    assert torch.allclose(dv.collapse_rate(rep, r), t([0.5, 0.0]))


def test_collapse_rate_errors():
    """Radius range, M ≥ 2 and the live mask: exact messages."""
    w = torch.ones(4, 3, dtype=DT)
    with pytest.raises(
        ValueError, match=exact("radius must lie in [0, 2] (a cosine distance 1 − cos), got 3.0")
    ):
        dv.collapse_rate(w, radius=3.0)
    with pytest.raises(ValueError, match=exact("radius must be ≥ 0, got -0.1")):
        dv.collapse_rate(w, radius=-0.1)
    with pytest.raises(ValueError, match=exact("collapse_rate needs M ≥ 2 particles, got M = 1")):
        dv.collapse_rate(torch.ones(1, 3, dtype=DT))
    with pytest.raises(ValueError, match=exact("live must have shape (…, M) = (4,), got (3,)")):
        dv.collapse_rate(w, live=torch.ones(3, dtype=torch.bool))


# ======================================================================================================
# gradient noise
# ======================================================================================================


def test_minibatch_gradients_concatenates_in_order_with_unused_zeros():
    """Rows are ``[∇_a, ∇_b, ∇_c]`` flattened in parameter order (unused c → 0), from an iterator of
    parameters and a generator of batches; ``.grad`` stays None."""
    a = torch.tensor([1.0, 2.0], dtype=DT, requires_grad=True)
    b = torch.tensor([[3.0], [4.0]], dtype=DT, requires_grad=True)
    c = torch.zeros(3, dtype=DT, requires_grad=True)

    def loss(x: float) -> torch.Tensor:
        return x * (a**2).sum() + (b**3).sum() * x**2  # ∇a = 2xa, ∇b = 3x²b²

    G = dv.minibatch_gradients(iter([a, b, c]), loss, (x for x in [1.0, 2.0, -1.0]))
    ref = torch.stack(
        [
            torch.cat([2 * x * a.detach(), 3 * x**2 * b.detach().flatten() ** 2, torch.zeros(3, dtype=DT)])
            for x in [1.0, 2.0, -1.0]
        ]
    )
    assert G.shape == (3, 7) and torch.allclose(G, ref)
    assert a.grad is None and b.grad is None and c.grad is None


def test_minibatch_gradients_errors():
    """No parameters, a parameter without grad, or fewer than 2 batches: exact messages."""
    p = torch.zeros(2, requires_grad=True)
    msg = exact("parameters must be a non-empty collection of tensors that require grad")
    with pytest.raises(ValueError, match=msg):
        dv.minibatch_gradients([], lambda b: p.sum(), [1, 2])
    with pytest.raises(ValueError, match=msg):
        dv.minibatch_gradients([p, torch.zeros(2)], lambda b: p.sum(), [1, 2])
    with pytest.raises(ValueError, match=msg):
        dv.minibatch_gradients([p, [1.0]], lambda b: p.sum(), [1, 2])
    with pytest.raises(ValueError, match=exact("batches must hold at least 2 minibatches, got 1")):
        dv.minibatch_gradients([p], lambda b: (p * b).sum(), [1.0])
    with pytest.raises(ValueError, match=exact("batches must hold at least 2 minibatches, got 0")):
        dv.minibatch_gradients([p], lambda b: (p * b).sum(), [])
    assert dv.minibatch_gradients([p], lambda b: (p * b).sum(), [1.0, 3.0]).shape == (2, 2)


def test_gradient_variance_matches_numpy_trace_of_covariance():
    """``V = tr Cov`` (ddof 1) of the flattened gradients, equal to numpy; S = 2 works; S = 1 refused."""
    g = torch.Generator().manual_seed(8)
    G = torch.randn(5, 2, 3, generator=g, dtype=DT)
    ref = np.trace(np.cov(G.numpy().reshape(5, -1).T))
    out = dv.gradient_variance(G)
    assert out.dim() == 0 and float(out) == pytest.approx(ref, rel=1e-12)
    assert float(dv.gradient_variance(t([[0.0, 1.0], [2.0, 5.0]]))) == pytest.approx(2.0 + 8.0)
    with pytest.raises(ValueError, match=exact("grads needs S ≥ 2 minibatches on its first axis, got S = 1")):
        dv.gradient_variance(torch.ones(1, 3, dtype=DT))
    with pytest.raises(ValueError, match=exact("grads must have shape (S, *P) (≥ 2 dimensions), got (3,)")):
        dv.gradient_variance(torch.ones(3, dtype=DT))


# ======================================================================================================
# loss-curve smoothness
# ======================================================================================================


def test_losses_helper_dtypes_and_errors():
    """``_losses``: a list becomes float64, a float32 tensor stays float32; 2-d or short: exact message."""
    assert dv._losses([1, 2, 3], 2).dtype == torch.float64
    x = torch.ones(3)
    assert dv._losses(x, 3) is x
    with pytest.raises(ValueError, match=exact("losses must have shape (T,) with T ≥ 2, got (2, 2)")):
        dv._losses(torch.ones(2, 2), 2)
    with pytest.raises(ValueError, match=exact("losses must have shape (T,) with T ≥ 4, got (3,)")):
        dv._losses([1.0, 2.0, 3.0], 4)
    with pytest.raises(
        TypeError, match=exact("losses must be a floating-point tensor, got dtype torch.int64")
    ):
        dv._losses(torch.ones(3, dtype=torch.long), 2)
    with pytest.raises(ValueError, match=exact("losses must have shape (T,) (≥ 1 dimensions), got ()")):
        dv._losses(torch.tensor(1.0), 1)


def test_mean_abs_loss_change_matches_numpy():
    """``mean |Δℓ|`` equals numpy on a random curve; T = 2 works; T = 1 refused."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(17, generator=g, dtype=DT)
    out = dv.mean_abs_loss_change(x)
    assert out.dim() == 0 and float(out) == pytest.approx(np.abs(np.diff(x.numpy())).mean(), rel=1e-13)
    assert float(dv.mean_abs_loss_change([3.0, 1.0])) == pytest.approx(2.0)
    assert dv.mean_abs_loss_change([3.0, 1.0]).dtype == torch.float64
    with pytest.raises(ValueError, match=exact("losses must have shape (T,) with T ≥ 2, got (1,)")):
        dv.mean_abs_loss_change([1.0])


def _np_detrended(x: np.ndarray, w: int) -> float:
    """numpy reference of the detrended variance (population variance of ℓ_t − centred mean)."""
    h = w // 2
    m = np.convolve(x, np.ones(w) / w, mode="valid")
    r = x[h : len(x) - h] - m
    return float(np.var(r))


@pytest.mark.parametrize("window", [3, 5, 11])
def test_detrended_loss_variance_matches_numpy(window):
    """Random curve, windows 3, 5, 11: equals the numpy convolution reference."""
    g = torch.Generator().manual_seed(10 + window)
    x = torch.randn(23, generator=g, dtype=DT).cumsum(0)
    got = dv.detrended_loss_variance(x, window=window)
    assert got.dim() == 0 and float(got) == pytest.approx(_np_detrended(x.numpy(), window), rel=1e-12)


def test_detrended_loss_variance_default_window_and_minimum_length():
    """The default window is 11 (numpy reference), so T = 12 is the shortest curve; T = 11 is refused."""
    g = torch.Generator().manual_seed(30)
    x = torch.randn(12, generator=g, dtype=DT)
    assert float(dv.detrended_loss_variance(x)) == pytest.approx(_np_detrended(x.numpy(), 11), rel=1e-12)
    assert float(dv.detrended_loss_variance(x)) != pytest.approx(_np_detrended(x.numpy(), 9), rel=1e-6)
    with pytest.raises(ValueError, match=exact("losses must have shape (T,) with T ≥ 12, got (11,)")):
        dv.detrended_loss_variance(x[:11])
    assert float(dv.detrended_loss_variance([1.0, 5.0, 2.0, 7.0], window=3)) == pytest.approx(
        _np_detrended(np.array([1.0, 5.0, 2.0, 7.0]), 3)
    )


def test_detrended_loss_variance_window_errors():
    """window: an int ≥ 3, odd (exact messages)."""
    x = torch.ones(30, dtype=DT)
    with pytest.raises(ValueError, match=exact("window must be odd (a centred moving average), got 4")):
        dv.detrended_loss_variance(x, window=4)
    with pytest.raises(ValueError, match=exact("window must be ≥ 3, got 2")):
        dv.detrended_loss_variance(x, window=2)
    with pytest.raises(ValueError, match=exact("window must be ≥ 3, got 1")):
        dv.detrended_loss_variance(x, window=1)
    with pytest.raises(TypeError, match=exact("window must be an int, got float")):
        dv.detrended_loss_variance(x, window=5.0)
    assert float(dv.detrended_loss_variance(torch.arange(4, dtype=DT), window=3)) == 0.0


# ======================================================================================================
# config: reading TOML
# ======================================================================================================


def test_load_toml_reads_file_and_names_missing_or_bad_file(tmp_path):
    """``load_toml`` returns the parsed dict (str or Path); a missing path, a folder, or bad TOML is a
    ConfigError naming the path."""
    good = tmp_path / "a.toml"
    good.write_text('task = "x"\n[train]\nsteps = 3\n')
    assert cfg.load_toml(good) == {"task": "x", "train": {"steps": 3}}
    assert cfg.load_toml(str(good)) == {"task": "x", "train": {"steps": 3}}
    missing = tmp_path / "none.toml"
    with pytest.raises(cfg.ConfigError, match=exact(f"configuration file {missing} does not exist")):
        cfg.load_toml(missing)
    with pytest.raises(cfg.ConfigError, match=exact(f"configuration file {tmp_path} does not exist")):
        cfg.load_toml(tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text("x = = 1\n")
    with pytest.raises(cfg.ConfigError, match="^" + re.escape(f"{bad} is not valid TOML: ") + r"\S") as info:
        cfg.load_toml(bad)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_load_toml_text_parses_and_refuses():
    """``load_toml_text`` parses text; invalid text: 'not valid TOML: <reason>' (no chained cause)."""
    assert cfg.load_toml_text("a = 1\nb = [1, 2]\n") == {"a": 1, "b": [1, 2]}
    with pytest.raises(cfg.ConfigError, match=r"^not valid TOML: \S") as info:
        cfg.load_toml_text("a = \n")
    assert info.value.__suppress_context__
    assert issubclass(cfg.ConfigError, ValueError) and cfg.PRESETS_KEY == "presets"


# ======================================================================================================
# config: merging, overrides, presets
# ======================================================================================================


def test_merge_nested_key_by_key_without_mutating_inputs():
    """Tables merge recursively; a non-table replaces a table and vice versa; the inputs are unchanged."""
    base = {"a": 1, "t": {"x": 1, "y": {"p": 1, "q": 2}}, "s": {"k": 1}, "v": 5}
    changes = {"t": {"y": {"q": 3}, "z": 4}, "s": 2, "v": {"new": 1}, "n": 7}
    out = cfg.merge(base, changes)
    assert out == {"a": 1, "t": {"x": 1, "y": {"p": 1, "q": 3}, "z": 4}, "s": 2, "v": {"new": 1}, "n": 7}
    assert base == {"a": 1, "t": {"x": 1, "y": {"p": 1, "q": 2}}, "s": {"k": 1}, "v": 5}
    assert changes == {"t": {"y": {"q": 3}, "z": 4}, "s": 2, "v": {"new": 1}, "n": 7}
    assert out is not base and cfg.merge({}, {}) == {}


@pytest.mark.parametrize(
    ("text", "path", "value"),
    [
        ("a.b.c=3", ["a", "b", "c"], 3),
        (" a . b = 1e-3 ", ["a", "b"], 1e-3),
        ("x=true", ["x"], True),
        ("x=[8, 16]", ["x"], [8, 16]),
        ('x={kind="cosine"}', ["x"], {"kind": "cosine"}),
        ('x="text"', ["x"], "text"),
        ("x=wikitext2", ["x"], "wikitext2"),
        ("x= spaced words ", ["x"], "spaced words"),
        ("x=a=b", ["x"], "a=b"),
        ("x=", ["x"], ""),
    ],
)
def test_parse_override_values(text, path, value):
    """TOML values are parsed, anything else is the stripped raw string; the key is split at dots."""
    got_path, got_value = cfg.parse_override(text)
    assert got_path == path and got_value == value and type(got_value) is type(value)


@pytest.mark.parametrize("text", ["abc", "a..b=1", "=3", ".a=1", "a.=1", " =1"])
def test_parse_override_refuses_malformed(text):
    """No '=' or an empty key part: the message quotes the text (repr)."""
    with pytest.raises(
        cfg.ConfigError, match=exact(f"an override must look like key.sub=value, got {text!r}")
    ):
        cfg.parse_override(text)


def test_set_key_creates_tables_in_place_and_refuses_through_values():
    """``set_key`` sets nested keys in place, creating tables; a value on the way is named."""
    c: dict[str, Any] = {"a": {"b": 1}}
    assert cfg.set_key(c, ["a", "c", "d"], 5) is None
    assert c == {"a": {"b": 1, "c": {"d": 5}}}
    cfg.set_key(c, ["top"], [1])
    assert c["top"] == [1]
    cfg.set_key(c, ["a", "b"], {"x": 1})
    assert c["a"]["b"] == {"x": 1}
    with pytest.raises(cfg.ConfigError, match=exact("cannot set a.b.x.y: a.b.x is a value, not a table")):
        cfg.set_key(c, ["a", "b", "x", "y"], 2)
    with pytest.raises(cfg.ConfigError, match=exact("cannot set top.z: top is a value, not a table")):
        cfg.set_key(c, ["top", "z"], 2)


RAW = {
    "task": "t",
    "seed": 0,
    "train": {"steps": 100, "lr": 0.1},
    "presets": {
        "smoke": {"train": {"steps": 2}},
        "quick": {"train": {"steps": 20}, "seed": 3},
        "lit": {"arm": "L"},
    },
}


def test_resolve_base_presets_and_overrides_in_order():
    """No preset: the base without [presets]; presets joined by '+' apply left to right, overrides last."""
    assert cfg.resolve(RAW) == {"task": "t", "seed": 0, "train": {"steps": 100, "lr": 0.1}}
    assert cfg.resolve(RAW, "smoke") == {"task": "t", "seed": 0, "train": {"steps": 2, "lr": 0.1}}
    assert cfg.resolve(RAW, "smoke+quick")["train"]["steps"] == 20
    assert cfg.resolve(RAW, "quick+smoke") == {"task": "t", "seed": 3, "train": {"steps": 2, "lr": 0.1}}
    out = cfg.resolve(RAW, "quick+lit", ["train.steps=7", "train.steps=8", "new.key=x"])
    assert out == {"task": "t", "seed": 3, "train": {"steps": 8, "lr": 0.1}, "arm": "L", "new": {"key": "x"}}
    assert RAW["train"] == {"steps": 100, "lr": 0.1}  # not mutated
    assert cfg.resolve({"a": 1}, None, ["a=2"]) == {"a": 2}


def test_resolve_errors():
    """Unknown preset: lists the defined ones and suggests the nearest (or says none are defined);
    a non-table [presets]; a malformed override."""
    with pytest.raises(
        cfg.ConfigError,
        match=exact(
            "unknown preset 'smok'; this file defines ['lit', 'quick', 'smoke']; did you mean 'smoke'?"
        ),
    ):
        cfg.resolve(RAW, "smok")
    with pytest.raises(
        cfg.ConfigError, match=exact("unknown preset 'zzzz'; this file defines ['lit', 'quick', 'smoke']")
    ):
        cfg.resolve(RAW, "zzzz")
    with pytest.raises(cfg.ConfigError, match=exact("unknown preset 'smoke'; this file defines no presets")):
        cfg.resolve({"a": 1}, "smoke")
    with pytest.raises(
        cfg.ConfigError, match=exact("unknown preset ''; this file defines ['lit', 'quick', 'smoke']")
    ):
        cfg.resolve(RAW, "smoke+")
    with pytest.raises(cfg.ConfigError, match=exact("[presets] must be a table of presets, got int")):
        cfg.resolve({"presets": 3})
    with pytest.raises(cfg.ConfigError, match=exact("an override must look like key.sub=value, got 'oops'")):
        cfg.resolve(RAW, None, ["oops"])


def test_suggest_cutoff():
    """``_suggest`` proposes the nearest name above a 0.5 similarity ratio, else nothing."""
    assert cfg._suggest("stesp", ["steps", "lr"]) == "; did you mean 'steps'?"
    assert cfg._suggest("xyz", ["steps", "lr"]) == ""
    assert cfg._suggest("ab", ["abcd"]) == "; did you mean 'abcd'?"  # ratio 2·2/6 = 0.667
    assert (
        cfg._suggest("ab", ["abcdef"]) == "; did you mean 'abcdef'?"
    )  # ratio 4/8 = 0.5: the cutoff is inclusive
    assert cfg._suggest("ab", ["abcdefg"]) == ""  # ratio 4/9 < 0.5
    assert cfg._suggest("stpes", ["steps", "stpe"]) == "; did you mean 'stpe'?"  # only the nearest one
    assert cfg._suggest("a", ["ab"]) == "; did you mean 'ab'?"  # ratio 2/3


def test_check_keys_messages():
    """The first unknown key is named (dotted), the valid keys listed sorted, the nearest suggested;
    the top level is named so; valid keys pass."""
    cfg.check_keys({"a": 1, "b": 2}, iter(["b", "a"]), "x")
    with pytest.raises(
        cfg.ConfigError,
        match=exact(
            "unknown key 'train.stpes'; the keys allowed in train are lr, steps; did you mean 'steps'?"
        ),
    ):
        cfg.check_keys({"lr": 1, "stpes": 2, "zz": 3}, ["steps", "lr"], "train")
    with pytest.raises(
        cfg.ConfigError, match=exact("unknown key 'qqq'; the keys allowed in the top level are a, b")
    ):
        cfg.check_keys({"qqq": 1}, {"b": 0, "a": 0}, "")
    assert cfg._dotted("", "k") == "k" and cfg._dotted("a.b", "k") == "a.b.k"


# ======================================================================================================
# config: schemas
# ======================================================================================================


@dataclasses.dataclass
class Inner:
    """A nested schema."""

    rate: float = 0.5
    names: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Outer:
    """A schema covering every annotation branch."""

    steps: int
    inner: Inner = dataclasses.field(default_factory=Inner)
    scale: float = 1.0
    maybe: int | None = None
    either: float | str = 0.0
    kind: Literal["a", "b"] = "a"
    shape: tuple[int, ...] = (1,)
    table: dict = dataclasses.field(default_factory=dict)
    flag: bool = False
    anything: Any = None
    label: str = "x"
    derived: int = dataclasses.field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ValueError(f"steps must be ≥ 0, got {self.steps}")


def test_from_dict_builds_coerces_and_defaults():
    """Nested dataclasses from sub-tables, int→float for float fields (stored as float), tuples from lists,
    defaults for missing keys, int kept where int is allowed (also in a union)."""
    o = cfg.from_dict(
        Outer,
        {
            "steps": 3,
            "inner": {"rate": 2, "names": ["p"]},
            "scale": 4,
            "maybe": 5,
            "either": 6,
            "kind": "b",
            "shape": [2, 3],
            "table": {"k": 1},
            "flag": True,
            "anything": [1, "x"],
            "label": "y",
        },
    )
    assert o.inner == Inner(2.0, ["p"]) and type(o.inner.rate) is float
    assert o.scale == 4.0 and type(o.scale) is float
    assert o.maybe == 5 and type(o.maybe) is int
    assert o.either == 6.0 and type(o.either) is float
    assert o.kind == "b" and o.shape == (2, 3) and type(o.shape) is tuple
    assert o.table == {"k": 1} and o.flag is True and o.anything == [1, "x"] and o.label == "y"
    d = cfg.from_dict(Outer, {"steps": 1})
    assert d == Outer(steps=1) and d.inner == Inner() and d.derived == 0


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"steps": 1.5}, "steps must be an integer, got 1.5"),
        ({"steps": True}, "steps must be an integer, got True"),
        ({"steps": 1, "scale": "x"}, "scale must be a number, got 'x'"),
        ({"steps": 1, "scale": False}, "scale must be a number, got False"),
        ({"steps": 1, "maybe": 1.0}, "maybe must be an integer or nothing (omit the key), got 1.0"),
        ({"steps": 1, "either": True}, "either must be a number or a string, got True"),
        ({"steps": 1, "kind": "c"}, "kind must be one of 'a', 'b', got 'c'"),
        ({"steps": 1, "shape": [1, "2"]}, "shape must be a list of an integer, got [1, '2']"),
        ({"steps": 1, "shape": 3}, "shape must be a list of an integer, got 3"),
        ({"steps": 1, "table": [1]}, "table must be a table, got [1]"),
        ({"steps": 1, "flag": 1}, "flag must be true or false, got 1"),
        ({"steps": 1, "label": 3}, "label must be a string, got 3"),
        ({"steps": 1, "inner": {"rate": "fast"}}, "inner.rate must be a number, got 'fast'"),
        ({"steps": 1, "inner": {"names": [1]}}, "inner.names must be a list of a string, got [1]"),
    ],
)
def test_from_dict_wrong_types_are_named(table, message):
    """A value of the wrong type names the dotted key, the type allowed and the value (exact)."""
    with pytest.raises(cfg.ConfigError, match=exact(message)):
        cfg.from_dict(Outer, table)


def test_from_dict_structure_errors():
    """Missing required key, unknown key (init=False fields are not keys), a non-table, and a
    ``__post_init__`` error (prefixed by where, or 'configuration')."""
    with pytest.raises(cfg.ConfigError, match=exact("missing key 'steps' (an integer)")):
        cfg.from_dict(Outer, {})
    with pytest.raises(cfg.ConfigError, match=exact("missing key 'run.steps' (an integer)")):
        cfg.from_dict(Outer, {}, "run")
    with pytest.raises(
        cfg.ConfigError, match=r"^unknown key 'derived'; the keys allowed in the top level are anything, "
    ):
        cfg.from_dict(Outer, {"steps": 1, "derived": 2})
    with pytest.raises(
        cfg.ConfigError,
        match=exact(
            "unknown key 'inner.rat'; the keys allowed in inner are names, rate; did you mean 'rate'?"
        ),
    ):
        cfg.from_dict(Outer, {"steps": 1, "inner": {"rat": 1}})
    with pytest.raises(cfg.ConfigError, match=exact("the configuration must be a table, got 3")):
        cfg.from_dict(Outer, 3)
    with pytest.raises(cfg.ConfigError, match=exact("inner must be a table, got [1]")):
        cfg.from_dict(Outer, {"steps": 1, "inner": [1]})
    with pytest.raises(cfg.ConfigError, match=exact("configuration: steps must be ≥ 0, got -1")):
        cfg.from_dict(Outer, {"steps": -1})
    with pytest.raises(cfg.ConfigError, match=exact("run: steps must be ≥ 0, got -1")):
        cfg.from_dict(Outer, {"steps": -1}, "run")


def test_type_name_and_matches_branches():
    """``_type_name`` and ``_matches`` on each annotation kind (independent expectations)."""
    assert cfg._type_name(type(None)) == "nothing (omit the key)"
    assert cfg._type_name(int | None) == "an integer or nothing (omit the key)"
    assert cfg._type_name(Literal[1, "x"]) == "one of 1, 'x'"
    assert (
        cfg._type_name(typing.List) == "a list"  # noqa: UP006 (the bare typing alias is the branch)
        and cfg._type_name(list) == "list"
        and cfg._type_name(tuple[float, ...]) == "a list of a number"
    )
    assert cfg._type_name(dict) == "a table" and cfg._type_name(dict[str, int]) == "a table"
    assert cfg._type_name(Inner) == "Inner" and cfg._type_name(bool) == "true or false"
    assert cfg._matches(object(), Any) and cfg._matches(None, type(None)) and not cfg._matches(0, type(None))
    assert cfg._matches([1, 2], list[int]) and not cfg._matches([1, 2.0], list[int])
    assert cfg._matches((1,), tuple[int, ...]) and cfg._matches([], list[int]) and cfg._matches(["x"], list)
    assert not cfg._matches("ab", list[str])
    assert cfg._matches({"a": 1}, dict[str, int]) and not cfg._matches([("a", 1)], dict)
    assert cfg._matches(3, float) and cfg._matches(3.5, float) and not cfg._matches(True, float)
    assert cfg._matches(3, int) and not cfg._matches(3.0, int) and not cfg._matches(False, int)
    assert cfg._matches(Inner(), Inner) and not cfg._matches({}, Inner)
    assert cfg._matches(True, bool) and not cfg._matches(1, bool)
    assert cfg._matches("anything", typing_newtype())
    assert cfg._allows_int(int) and cfg._allows_int(Any) and cfg._allows_int(float | int)
    assert cfg._allows_int(Literal[1]) and not cfg._allows_int(float) and not cfg._allows_int(float | str)


def typing_newtype() -> Any:
    """An annotation that is neither a type nor a known origin (a TypeVar): ``_matches`` accepts anything."""
    return typing.TypeVar("T")


# ======================================================================================================
# config: writing TOML
# ======================================================================================================


def test_to_toml_exact_text():
    """Scalars first, then one [table] per mapping (dotted paths, quoted keys where not bare), None left out,
    header lines as comments (an empty line as '#'), tables with only sub-tables get no header."""
    config = {
        "task": "ts",
        "n": 3,
        "x": 0.1,
        "on": True,
        "off": False,
        "none": None,
        "lst": [1, "a", [2.5]],
        "inline": [{"k": 1}],
        "train": {"steps": 2, "sched": {"kind": "cos"}},
        "outer": {"mid": {"leaf": 1}},
        "empty": {},
        "odd key": {"a.b": 1, "": 2},
    }
    text = cfg.to_toml(config, header="line one\n\nline three")
    expected = (
        "\n".join(
            [
                "# line one",
                "#",
                "# line three",
                'task = "ts"',
                "n = 3",
                "x = 0.1",
                "on = true",
                "off = false",
                'lst = [1, "a", [2.5]]',
                "inline = [{k = 1}]",
                "",
                "[train]",
                "steps = 2",
                "",
                "[train.sched]",
                'kind = "cos"',
                "",
                "[outer.mid]",
                "leaf = 1",
                "",
                "[empty]",
                "",
                '["odd key"]',
                '"a.b" = 1',
                '"" = 2',
            ]
        )
        + "\n"
    )
    assert text == expected
    import tomllib

    back = tomllib.loads(text)
    assert back == {k: v for k, v in config.items() if k != "none"}


def test_to_toml_without_header_and_special_values():
    """No header: starts at the first key; nan/±inf, DEL escaped, unicode kept, tuples as lists; a value that
    is not TOML is refused with its type and repr."""
    text = cfg.to_toml(
        {"a": float("nan"), "b": float("inf"), "c": float("-inf"), "s": 'x\x7fé"\n', "t": (1, 2)}
    )
    assert text == 'a = nan\nb = inf\nc = -inf\ns = "x\\u007fé\\"\\n"\nt = [1, 2]\n'
    import tomllib

    back = tomllib.loads(text)
    assert math.isnan(back["a"]) and back["b"] == math.inf and back["c"] == -math.inf
    assert back["s"] == 'x\x7fé"\n' and back["t"] == [1, 2]
    assert cfg.to_toml({}) == "\n"
    assert cfg.to_toml({"t": {"a": 1}}) == "[t]\na = 1\n"
    assert cfg.to_toml({"a": 1}, "h") == "# h\na = 1\n"
    with pytest.raises(cfg.ConfigError, match=exact("cannot write a set ({1}) as TOML")):
        cfg.to_toml({"a": {1}})
    with pytest.raises(cfg.ConfigError, match=exact("cannot write a NoneType (None) as TOML")):
        cfg._toml_value([None])
    assert cfg._toml_value(1e300) == "1e+300" and cfg._toml_value(-0.0) == "-0.0"
    assert cfg._toml_key("a-b_1") == "a-b_1" and cfg._toml_key("a b") == '"a b"' and cfg._toml_key("") == '""'


# ======================================================================================================
# regression: WideMLP
# ======================================================================================================


def test_wide_mlp_unknown_activation():
    """An unknown activation name lists the allowed ones (sorted)."""
    allowed = sorted(["relu", "tanh", "sigmoid", "gelu", "erf", "identity"])
    with pytest.raises(ValueError, match=exact(f"unknown activation 'swish'; allowed: {allowed}")):
        rg.WideMLP(3, 4, "swish")


def test_wide_mlp_generator_init_is_uniform_kaiming_in_layer_order():
    """With a generator: weight then bias of each layer ~ U(±1/√fan_in), drawn in that order (reference
    draws from a twin generator); float64 dtype honoured; w and a expose the layouts."""
    net = rg.WideMLP(3, 5, "relu", generator=torch.Generator().manual_seed(11), dtype=DT)
    g = torch.Generator().manual_seed(11)
    W1 = torch.empty(5, 3, dtype=DT).uniform_(-1 / math.sqrt(3), 1 / math.sqrt(3), generator=g)
    b1 = torch.empty(5, dtype=DT).uniform_(-1 / math.sqrt(3), 1 / math.sqrt(3), generator=g)
    W2 = torch.empty(1, 5, dtype=DT).uniform_(-1 / math.sqrt(5), 1 / math.sqrt(5), generator=g)
    b2 = torch.empty(1, dtype=DT).uniform_(-1 / math.sqrt(5), 1 / math.sqrt(5), generator=g)
    assert torch.equal(net.hidden_layer.weight, W1) and torch.equal(net.hidden_layer.bias, b1)
    assert torch.equal(net.readout.weight, W2) and torch.equal(net.readout.bias, b2)
    assert net.w is net.hidden_layer.weight and net.w.shape == (5, 3)
    assert net.a.shape == (5,) and torch.equal(net.a, W2[0])
    assert not hasattr(net, "n_particles") and net.out_features is None


def test_wide_mlp_without_bias_and_vector_output():
    """bias=False: no biases and the readout draws follow the hidden weights directly; out_features k gives
    ``a`` of shape (M, k) = readout.weight.T and outputs (N, k)."""
    net = rg.WideMLP(2, 3, "tanh", 4, bias=False, generator=torch.Generator().manual_seed(12), dtype=DT)
    g = torch.Generator().manual_seed(12)
    W1 = torch.empty(3, 2, dtype=DT).uniform_(-1 / math.sqrt(2), 1 / math.sqrt(2), generator=g)
    W2 = torch.empty(4, 3, dtype=DT).uniform_(-1 / math.sqrt(3), 1 / math.sqrt(3), generator=g)
    assert net.hidden_layer.bias is None and net.readout.bias is None
    assert torch.equal(net.hidden_layer.weight, W1) and torch.equal(net.readout.weight, W2)
    assert net.a.shape == (3, 4) and torch.equal(net.a, W2.T) and net.out_features == 4
    X = torch.randn(6, 2, generator=torch.Generator().manual_seed(13), dtype=DT)
    assert torch.allclose(net(X), torch.tanh(X @ W1.T) @ W2.T)
    assert len(list(net.parameters())) == 2


@pytest.mark.parametrize("activation", ["relu", "tanh", "sigmoid", "erf", "identity"])
def test_wide_mlp_forward_formula(activation):
    """``f(x) = Σ_i a_i σ(w_i·x + b_i) + c`` (scalar output, shape (N,)) for each activation."""
    net = rg.WideMLP(3, 4, activation, generator=torch.Generator().manual_seed(14), dtype=DT)
    X = torch.randn(5, 3, generator=torch.Generator().manual_seed(15), dtype=DT)
    sigma = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "erf": torch.erf}.get(
        activation, lambda z: z
    )
    ref = sigma(X @ net.w.T + net.hidden_layer.bias) @ net.a + net.readout.bias
    out = net(X)
    assert out.shape == (5,) and torch.allclose(out, ref)


def test_wide_mlp_default_init_without_generator_uses_torch_default():
    """Without a generator the layers keep torch's own init (bounded by 1/√fan_in), in float32 by default."""
    torch.manual_seed(3)
    net = rg.WideMLP(4, 6, "gelu")
    torch.manual_seed(3)
    ref = nn.Linear(4, 6)
    assert torch.equal(net.hidden_layer.weight, ref.weight) and net.w.dtype == torch.float32


# ======================================================================================================
# regression: particle_metrics
# ======================================================================================================


class _Units(nn.Module):
    """A bare layer with ``w`` and ``a`` (what ``particle_metrics`` reads)."""

    def __init__(self, w: torch.Tensor, a: torch.Tensor) -> None:
        super().__init__()
        self.w = nn.Parameter(w)
        self.a = nn.Parameter(a)


def test_particle_metrics_hand_built_units():
    """Units e1, e1, e2, −e1 (all live) and a dead 20° unit against teacher e1: every metric by hand."""
    w = torch.stack([t(unit_at(d)) for d in (0.0, 0.0, 90.0, 180.0, 20.0)])
    a = t([1.0, -2.0, 1.0, 1.0, 0.01])  # mean |a| = 1.002: the last is below 5 % of it
    teacher = t([[1.0, 0.0]])
    relu = rg.particle_metrics(_Units(w, a), teacher, "relu")
    c20 = math.cos(math.radians(20)) ** 2
    assert relu == pytest.approx(
        {
            "live": 4 / 5,
            "modes": 1.0,  # {0, 1}; 90° and 180° alone (sign-aware)
            "collapse": 2 / 4,
            "aligned": 3 / 4,  # |cos| with the teacher: 0, 1, 3
            "coverage": 1.0,
            "q": (1 + 1 + 0 + 1 + c20) / 5,
            "q_abs_a": (1 + 2 + 0 + 1 + 0.01 * c20) / 5.01,
        }
    )
    assert all(type(v) is float for v in relu.values())
    tanh = rg.particle_metrics(_Units(w, a), teacher, "tanh")
    assert tanh["modes"] == 1.0 and tanh["collapse"] == pytest.approx(3 / 4)  # −e1 joins e1
    assert {k: v for k, v in tanh.items() if k not in ("modes", "collapse")} == pytest.approx(
        {k: v for k, v in relu.items() if k not in ("modes", "collapse")}
    )
    loose = rg.particle_metrics(_Units(w, a * t([1, 1, 1, 1, 100.0])), teacher, "relu", threshold=0.9)
    assert loose["aligned"] == pytest.approx(4 / 5) and loose["live"] == 1.0  # 20°: cos 0.94 ≥ 0.9
    strict = rg.particle_metrics(_Units(w, a * t([1, 1, 1, 1, 100.0])), teacher, "relu", threshold=0.95)
    assert strict["aligned"] == pytest.approx(3 / 5)


@pytest.mark.parametrize(
    ("activation", "odd"),
    [("tanh", True), ("erf", True), ("identity", True), ("relu", False), ("gelu", False), ("sigmoid", False)],
)
def test_particle_metrics_sign_symmetry_follows_odd_activations(activation, odd):
    """Only tanh, erf, identity treat w and −w as one unit in ``modes`` and ``collapse``."""
    w = torch.stack([t(unit_at(d)) for d in (0.0, 180.0, 90.0)])
    m = rg.particle_metrics(_Units(w, t([1.0, 1.0, 1.0])), None, activation)
    assert set(m) == {"live", "modes", "collapse"}
    assert m["collapse"] == pytest.approx(2 / 3 if odd else 0.0)
    assert m["modes"] == (1.0 if odd else 0.0)
    assert rg.ODD_ACTIVATIONS == ("tanh", "erf", "identity")


def test_particle_metrics_vector_outputs_use_row_norms():
    """(M, k) read-out weights: live and the q weighting use ``‖a_i‖`` over the output axis."""
    w = torch.stack([t(unit_at(d)) for d in (0.0, 90.0, 45.0)])
    a = t([[3.0, 4.0], [0.0, 1.0], [0.0, 0.1]])  # norms 5, 1, 0.1: mean 6.1/3
    m = rg.particle_metrics(_Units(w, a), t([[1.0, 0.0]]), "relu")
    assert m["live"] == pytest.approx(2 / 3)  # 0.1 < 0.05 · 6.1/3 = 0.1017
    assert m["q_abs_a"] == pytest.approx((5 * 1 + 1 * 0 + 0.1 * 0.5) / 6.1)
    assert m["q"] == pytest.approx(0.5)
    assert m["aligned"] == pytest.approx(1 / 2) and m["coverage"] == 1.0


# ======================================================================================================
# regression: configuration dataclasses and the validation split
# ======================================================================================================


def test_task_dataclass_defaults():
    """The documented defaults of the four ``[data]``/``[model]`` tables."""
    assert dataclasses.asdict(rg.TeacherStudentData()) == {
        "d": 16,
        "k": 1,
        "activation": "relu",
        "directions": "orthonormal",
        "n_train": 4096,
        "n_test": 2048,
        "label_noise": 0.0,
        "seed": None,
    }
    assert dataclasses.asdict(rg.FeatureModel()) == {
        "n_particles": 256,
        "activation": "relu",
        "A": None,
        "sphere": False,
        "kind": "particles",
        "bias": True,
    }
    assert dataclasses.asdict(rg.ImageData()) == {
        "dataset": "fashion_mnist",
        "root": "",
        "n_train": 0,
        "n_test": 0,
        "n_val": 0,
    }
    assert dataclasses.asdict(rg.ImageModel()) == {
        "n_particles": 256,
        "activation": "relu",
        "kind": "particles",
        "A": None,
    }
    assert rg.TEACHER_STUDENT.Data is rg.TeacherStudentData and rg.TEACHER_STUDENT.Model is rg.FeatureModel
    assert rg.IMAGE_CLASSIFICATION.Data is rg.ImageData and rg.IMAGE_CLASSIFICATION.Model is rg.ImageModel
    assert rg.VAL_SPLIT_SEED == 20_281


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3", None])
def test_image_data_refuses_bad_n_val(bad):
    """``n_val`` must be a non-bool int ≥ 0 (message with the repr of the value)."""
    msg = f"n_val must be an integer ≥ 0 (the training images held out for validation; 0: none), got {bad!r}"
    with pytest.raises(ValueError, match=exact(msg)):
        rg.ImageData(n_val=bad)
    assert rg.ImageData(n_val=0).n_val == 0 and rg.ImageData(n_val=5).n_val == 5


def test_validation_split_reference_permutation():
    """Held-out = sorted first n_val of randperm(n) from a generator seeded 20281; kept = the sorted rest."""
    for n, n_val in [(10, 3), (7, 6), (5, 1)]:
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(20281))
        val, kept = rg.validation_split(n, n_val)
        assert val.tolist() == sorted(perm[:n_val].tolist())
        assert kept.tolist() == sorted(perm[n_val:].tolist())
        assert val.dtype == torch.int64 and kept.dtype == torch.int64


@pytest.mark.parametrize(("n", "n_val"), [(10, 0), (10, 10), (10, 11), (10, -1), (1, 1)])
def test_validation_split_refuses_out_of_range(n, n_val):
    """Unless 0 < n_val < n: the ConfigError names data.n_val, n and the value."""
    msg = (
        f"data.n_val must be ≥ 1 and < the number of training images ({n}, after data.n_train), "
        f"got {n_val}: at least one image must be left to train on"
    )
    with pytest.raises(cfg.ConfigError, match=exact(msg)):
        rg.validation_split(n, n_val)


# ======================================================================================================
# regression: the teacher_student task
# ======================================================================================================


def _ts_build(data: rg.TeacherStudentData, model: rg.FeatureModel, seed: int = 5, batch_size: int = 8):
    return rg.TEACHER_STUDENT.build(
        data, model, batch_size=batch_size, seed=seed, device=torch.device("cpu"), dtype=DT
    )


def test_teacher_student_build_wires_data_init_batches_loss_and_evaluate():
    """Against a second code path: the data from ``teacher_student`` with the derived data seed and every
    [data] field, the net from ``FeatureParticles`` with the derived init seed, the batches from the
    derived batch seed, the loss ½·MSE, and each evaluation metric recomputed."""
    from meanfield import data as mdata
    from meanfield.nn import FeatureParticles
    from meanfield.seeds import derive_seed

    data = rg.TeacherStudentData(
        d=4, k=2, activation="tanh", directions="random", n_train=32, n_test=16, label_noise=0.3
    )
    model = rg.FeatureModel(n_particles=6, activation="relu", A=0.5, sphere=True)
    exp = _ts_build(data, model)
    ts = mdata.teacher_student(
        4,
        32,
        16,
        k=2,
        activation="tanh",
        directions="random",
        label_noise=0.3,
        seed=derive_seed(5, "data"),
        dtype=DT,
    )
    ref = FeatureParticles(
        4,
        6,
        "relu",
        A=0.5,
        sphere=True,
        generator=torch.Generator().manual_seed(derive_seed(5, "init")),
        dtype=DT,
    )
    net = exp.model
    assert isinstance(net, FeatureParticles) and net.A == 0.5 and net.sphere is True and net.b is None
    assert torch.equal(net.w, ref.w) and torch.equal(net.a, ref.a)
    assert float(net.a.detach().abs().max()) <= 0.5 and torch.allclose(
        net.w.norm(dim=1), torch.ones(6, dtype=DT)
    )
    bref = mdata.Batches(32, 8, seed=derive_seed(5, "batches"))
    idx = exp.next_batch()
    assert torch.equal(idx, bref.next_indices()) and idx.shape == (8,)
    with torch.no_grad():
        loss = exp.loss(idx)
        assert float(loss) == pytest.approx(
            0.5 * float(((ref(ts.x_train[idx]) - ts.y_train[idx]) ** 2).mean())
        )
        m = exp.evaluate()
        mse = float(((ref(ts.x_test) - ts.y_test) ** 2).mean())
    cos = torch.abs(dv.teacher_alignment(ref.w.detach(), ts.directions))  # (M, K)
    assert m["test_mse"] == pytest.approx(mse)
    assert m["test_mse_relative"] == pytest.approx(mse / float(ts.y_test.var()))
    assert m["alignment_max"] == pytest.approx(float(cos.max(0).values.mean()))
    assert set(m) == {
        "test_mse",
        "test_mse_relative",
        "alignment_max",
        "live",
        "modes",
        "collapse",
        "aligned",
        "coverage",
        "q",
        "q_abs_a",
    }
    pm = rg.particle_metrics(ref, ts.directions, "relu")
    assert {k: m[k] for k in pm} == pytest.approx(pm)
    assert exp.unit == "samples" and exp.units_per_step == 8
    assert exp.description == f"{ts.description}; FeatureParticles(M=6, σ=relu)"
    assert exp.batches.n == 32 and exp.batches.batch_size == 8


def test_teacher_student_explicit_data_seed_and_run_seed_independence():
    """``data.seed`` given: the data come from it, whatever the run seed; None: from the run seed."""
    from meanfield import data as mdata

    data = rg.TeacherStudentData(d=3, n_train=16, n_test=8, seed=42)
    model = rg.FeatureModel(n_particles=4)
    ts = mdata.teacher_student(3, 16, 8, k=1, activation="relu", directions="orthonormal", seed=42, dtype=DT)
    for run_seed in (0, 1):
        exp = _ts_build(data, model, seed=run_seed, batch_size=16)
        idx = torch.arange(16)
        with torch.no_grad():
            ref = 0.5 * float(((exp.model(ts.x_train) - ts.y_train) ** 2).mean())
            assert float(exp.loss(idx)) == pytest.approx(ref)
    e0 = _ts_build(rg.TeacherStudentData(d=3, n_train=16, n_test=8), model, seed=0)
    e1 = _ts_build(rg.TeacherStudentData(d=3, n_train=16, n_test=8), model, seed=1)
    assert not torch.equal(e0.model.w, e1.model.w)


def test_teacher_student_mlp_kind():
    """``kind = "mlp"``: a WideMLP with the derived init seed and ``bias`` passed; description says so."""
    from meanfield.seeds import derive_seed

    data = rg.TeacherStudentData(d=3, n_train=16, n_test=8)
    for bias in (True, False):
        exp = _ts_build(
            data, rg.FeatureModel(n_particles=5, activation="tanh", kind="mlp", bias=bias), seed=2
        )
        ref = rg.WideMLP(
            3, 5, "tanh", bias=bias, generator=torch.Generator().manual_seed(derive_seed(2, "init")), dtype=DT
        )
        assert isinstance(exp.model, rg.WideMLP)
        sd, rsd = exp.model.state_dict(), ref.state_dict()
        assert sd.keys() == rsd.keys() and all(torch.equal(sd[k], rsd[k]) for k in sd)
        assert exp.description.endswith("; WideMLP(M=5, σ=tanh)")
        assert exp.model.w.dtype == DT
        with torch.no_grad():
            m = exp.evaluate()
        assert m["modes"] >= 0 and "q_abs_a" in m


# ======================================================================================================
# regression: the image_classification task (a fake dataset stands in for the loaders)
# ======================================================================================================


def _fake_images(n_train: int = 20, n_test: int = 7):
    """An ImageDataset of 2-channel 2×1 images, 3 classes, from a fixed generator."""
    from meanfield.data.images import ImageDataset

    g = torch.Generator().manual_seed(21)
    return ImageDataset(
        train_x=torch.randint(0, 256, (n_train, 2, 2, 1), generator=g, dtype=torch.uint8),
        train_y=torch.randint(0, 3, (n_train,), generator=g),
        test_x=torch.randint(0, 256, (n_test, 2, 2, 1), generator=g, dtype=torch.uint8),
        test_y=torch.randint(0, 3, (n_test,), generator=g),
        classes=["a", "b", "c"],
        description="FAKE",
    )


@pytest.fixture
def fake_loaders(monkeypatch):
    """Replace both loaders; record (which, root) of each call."""
    calls: list[tuple[str, Any]] = []
    ds = _fake_images()

    def loader(name):
        def load(root):
            calls.append((name, root))
            return ds

        return load

    monkeypatch.setattr(rg._data, "fashion_mnist", loader("fashion"))
    monkeypatch.setattr(rg._data, "cifar10", loader("cifar"))
    return ds, calls


def _np_standardise(ds, x: torch.Tensor) -> torch.Tensor:
    """Independent standardisation: per-channel population mean/std of ALL training pixels in [0, 1]."""
    tr = ds.train_x.double().numpy() / 255
    mean = tr.mean(axis=(0, 2, 3))
    std = tr.std(axis=(0, 2, 3))
    z = (x.double().numpy() / 255 - mean[None, :, None, None]) / std[None, :, None, None]
    return torch.from_numpy(z.reshape(len(x), -1))


def _img_build(data, model, seed=3, batch_size=4):
    return rg.IMAGE_CLASSIFICATION.build(
        data, model, batch_size=batch_size, seed=seed, device=torch.device("cpu"), dtype=DT
    )


def test_image_classification_standardises_slices_and_evaluates(fake_loaders):
    """n_train/n_test slice the splits (stats from the whole train split), the default loader and root
    ``""`` → None, the FeatureParticles net (k outputs, bias, A) from the derived init seed, cross-entropy
    loss, test metrics recomputed, description, higher_is_better."""
    from meanfield import data as mdata
    from meanfield.nn import FeatureParticles
    from meanfield.seeds import derive_seed

    ds, calls = fake_loaders
    exp = _img_build(
        rg.ImageData(n_train=12, n_test=5), rg.ImageModel(n_particles=6, activation="tanh", A=0.7)
    )
    assert calls == [("fashion", None)]
    ref = FeatureParticles(
        4,
        6,
        "tanh",
        A=0.7,
        out_features=3,
        bias=True,
        generator=torch.Generator().manual_seed(derive_seed(3, "init")),
        dtype=DT,
    )
    sd, rsd = exp.model.state_dict(), ref.state_dict()
    assert sd.keys() == rsd.keys() and all(torch.equal(sd[k], rsd[k]) for k in sd)
    assert exp.model.A == 0.7 and exp.model.out_features == 3
    x_train = _np_standardise(ds, ds.train_x[:12])
    x_test = _np_standardise(ds, ds.test_x[:5])
    idx = exp.next_batch()
    assert torch.equal(idx, mdata.Batches(12, 4, seed=derive_seed(3, "batches")).next_indices())
    with torch.no_grad():
        assert float(exp.loss(idx)) == pytest.approx(
            float(nn.functional.cross_entropy(ref(x_train[idx]), ds.train_y[idx]))
        )
        m = exp.evaluate()
        logits = ref(x_test)
    err = float((logits.argmax(1) != ds.test_y[:5]).double().mean())
    assert m["test_loss"] == pytest.approx(float(nn.functional.cross_entropy(logits, ds.test_y[:5])))
    assert m["test_error"] == pytest.approx(err) and m["accuracy"] == pytest.approx(1 - err)
    assert set(m) == {"test_loss", "test_error", "accuracy", "live", "modes", "collapse"}
    assert exp.description == "FAKE; 12 train / 5 test; FeatureParticles(M=6, σ=tanh, k=3, bias)"
    assert exp.higher_is_better == ("accuracy",) and exp.unit == "samples" and exp.units_per_step == 4


def test_image_classification_all_images_by_default_and_cifar_root(fake_loaders):
    """n_train = n_test = 0 keep every image; dataset cifar10 calls the CIFAR loader with the root."""
    ds, calls = fake_loaders
    exp = _img_build(
        rg.ImageData(dataset="cifar10", root="/some/where"), rg.ImageModel(n_particles=3), batch_size=20
    )
    assert calls == [("cifar", "/some/where")]
    assert exp.description == "FAKE; 20 train / 7 test; FeatureParticles(M=3, σ=relu, k=3, bias)"
    x_train = _np_standardise(ds, ds.train_x)
    with torch.no_grad():
        got = float(exp.loss(torch.arange(20)))
        assert got == pytest.approx(float(nn.functional.cross_entropy(exp.model(x_train), ds.train_y)))
        m = exp.evaluate()
        logits = exp.model(_np_standardise(ds, ds.test_x))
    assert m["test_loss"] == pytest.approx(float(nn.functional.cross_entropy(logits, ds.test_y)))


def test_image_classification_validation_split(fake_loaders):
    """n_val: held-out images from ``validation_split`` of the first n_train, removed from training (the
    batches cover the rest), val_loss / val_error recomputed, description counts both."""
    from meanfield import data as mdata
    from meanfield.seeds import derive_seed

    ds, _ = fake_loaders
    exp = _img_build(rg.ImageData(n_train=12, n_val=4), rg.ImageModel(n_particles=5), seed=4, batch_size=8)
    val, kept = rg.validation_split(12, 4)
    x_all = _np_standardise(ds, ds.train_x[:12])
    y_all = ds.train_y[:12]
    idx = exp.next_batch()
    assert torch.equal(idx, mdata.Batches(8, 8, seed=derive_seed(4, "batches")).next_indices())
    with torch.no_grad():
        assert float(exp.loss(idx)) == pytest.approx(
            float(nn.functional.cross_entropy(exp.model(x_all[kept][idx]), y_all[kept][idx]))
        )
        m = exp.evaluate()
        vl = exp.model(x_all[val])
    assert m["val_loss"] == pytest.approx(float(nn.functional.cross_entropy(vl, y_all[val])))
    assert m["val_error"] == pytest.approx(float((vl.argmax(1) != y_all[val]).double().mean()))
    assert set(m) == {
        "test_loss",
        "test_error",
        "accuracy",
        "val_loss",
        "val_error",
        "live",
        "modes",
        "collapse",
    }
    assert (
        exp.description
        == "FAKE; 8 train / 4 validation (held out of train) / 7 test; FeatureParticles(M=5, σ=relu, k=3, bias)"
    )
    with pytest.raises(
        cfg.ConfigError,
        match=re.escape(
            "data.n_val must be ≥ 1 and < the number of training images (12, after data.n_train), got 12"
        ),
    ):
        _img_build(rg.ImageData(n_train=12, n_val=12), rg.ImageModel(n_particles=5))


def test_image_classification_mlp_kind(fake_loaders):
    """``kind = "mlp"``: WideMLP(d, M, σ, k) from the derived init seed; description says WideMLP."""
    from meanfield.seeds import derive_seed

    exp = _img_build(rg.ImageData(), rg.ImageModel(n_particles=4, activation="gelu", kind="mlp"), seed=6)
    ref = rg.WideMLP(
        4, 4, "gelu", 3, generator=torch.Generator().manual_seed(derive_seed(6, "init")), dtype=DT
    )
    sd, rsd = exp.model.state_dict(), ref.state_dict()
    assert sd.keys() == rsd.keys() and all(torch.equal(sd[k], rsd[k]) for k in sd)
    assert exp.description == "FAKE; 20 train / 7 test; WideMLP(M=4, σ=gelu)"
    with torch.no_grad():
        m = exp.evaluate()
    assert set(m) == {"test_loss", "test_error", "accuracy", "live", "modes", "collapse"}


def test_a_teacher_of_another_dtype_is_compared_in_the_particles_dtype():
    """Regression: a float32 teacher with float64 particles raised "expected m1 and m2 to have the same dtype"
    in ``teacher_alignment`` (and so in ``teacher_overlap``, both modes); now the teacher is cast to ``w``'s
    dtype: the same values as with a float64 teacher, in float64."""
    from meanfield.metrics.diversity import teacher_alignment, teacher_overlap

    g = torch.Generator().manual_seed(3)
    w = torch.randn(2, 5, 4, generator=g, dtype=torch.float64)
    teacher = torch.randn(2, 4, generator=g, dtype=torch.float64)
    low = teacher.float()
    same = teacher_alignment(w, low)
    assert same.dtype == torch.float64
    assert torch.allclose(same, teacher_alignment(w, low.double()), rtol=0, atol=1e-15)
    for nearest in (False, True):
        q = teacher_overlap(w, low, nearest=nearest)
        assert q.dtype == torch.float64
        assert torch.allclose(q, teacher_overlap(w, low.double(), nearest=nearest), rtol=0, atol=1e-15)
