"""Tests of the diversity metrics on constructed cases with known values."""

from __future__ import annotations

import math
import re
from typing import Any

import matplotlib
import numpy as np
import pytest
import torch
from scipy import special

from meanfield.metrics import diversity as dv
from meanfield.metrics.diversity import (
    aligned_fraction,
    attention_similarity,
    collapse_rate,
    detrended_loss_variance,
    distinct_modes,
    effective_rank,
    gradient_variance,
    live_particles,
    mean_abs_loss_change,
    mean_off_diagonal,
    minibatch_gradients,
    mode_labels,
    output_covariance,
    pairwise_cosine,
    teacher_alignment,
    teacher_coverage,
    teacher_overlap,
)
from meanfield.nn import FeatureParticles, ParticleAttention

DT = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def close(x, value, tol=1e-12):
    x = torch.as_tensor(x, dtype=DT).detach()
    err = float((x - torch.as_tensor(value, dtype=DT)).abs().max())
    return err <= tol


def test_pairwise_cosine_identical_orthogonal_and_known_angle():
    v = torch.randn(5, generator=gen(0), dtype=DT)
    identical = torch.stack([v, 2 * v, 0.5 * v])  # same direction, different norms
    assert close(pairwise_cosine(identical), torch.ones(3, 3))
    assert close(pairwise_cosine(torch.eye(4, dtype=DT) * 3), torch.eye(4))
    sixty = torch.tensor([[1.0, 0.0], [0.5, math.sqrt(3) / 2], [-1.0, 0.0]], dtype=DT)
    S = pairwise_cosine(sixty)
    assert close(S[0, 1], 0.5) and close(S[0, 2], -1.0)
    zero = torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=DT)
    assert close(pairwise_cosine(zero)[0], [0.0, 0.0])  # a zero vector has cosine 0 with everything
    batched = torch.stack([identical, -identical, torch.eye(3, 5, dtype=DT)])  # (3 replicas, M=3, D=5)
    assert pairwise_cosine(batched).shape == (3, 3, 3)
    assert close(pairwise_cosine(batched)[2], torch.eye(3))


def test_attention_similarity_identical_and_disjoint_maps():
    T = 4
    one_hot = torch.zeros(2, 3, T, T, dtype=DT)  # (B, M, T, T)
    one_hot[:, 0, :, 0] = 1  # head 0 attends to token 0
    one_hot[:, 1, :, 1] = 1  # head 1 attends to token 1: disjoint support
    one_hot[:, 2, :, 0] = 1  # head 2 = head 0
    S = attention_similarity(one_hot)
    assert close(S, [[1, 0, 1], [0, 1, 0], [1, 0, 1]])
    assert close(mean_off_diagonal(S), 2 / 6)
    layer = ParticleAttention(8, 2, 4, generator=gen(1), dtype=DT).prune([0, 0, 1])
    S = attention_similarity(layer.attention_maps(torch.randn(2, 5, 8, generator=gen(2), dtype=DT)).detach())
    assert close(S[0, 1], 1.0)
    assert float(S[0, 2].detach()) < 1 - 1e-6  # negative control: distinct heads differ


def test_output_covariance_matches_numpy_and_known_ranks():
    phi = torch.randn(20, 4, generator=gen(3), dtype=DT)  # (N, M)
    assert close(output_covariance(phi), np.cov(phi.numpy(), rowvar=False))
    # identical particles: C = c·11^T, effective rank 1
    x = torch.randn(30, 1, 3, generator=gen(4), dtype=DT)
    same = x.expand(30, 5, 3)  # (N, M, F)
    C = output_covariance(same)
    assert close(C / C[0, 0], torch.ones(5, 5))
    assert close(effective_rank(C), 1.0, 1e-9)
    # orthogonal centred outputs of equal norm: C = c·I, effective rank M
    H = torch.tensor([[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]], dtype=DT)
    ortho = H[:, 1:]  # (N=4, M=3): columns orthogonal, each with mean 0
    C = output_covariance(ortho)
    assert close(C, 4 / 3 * torch.eye(3, dtype=DT))
    assert close(effective_rank(C), 3.0)


def test_effective_rank_known_values():
    assert close(effective_rank(torch.diag(torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=DT))), 2.0)
    p = torch.tensor([0.25, 0.75], dtype=DT)
    H = -(p * p.log()).sum()
    assert close(effective_rank(torch.diag(torch.tensor([1.0, 3.0], dtype=DT))), H.exp())
    assert close(effective_rank(torch.zeros(3, 3, dtype=DT)), 0.0)
    Q, _ = torch.linalg.qr(torch.randn(4, 4, generator=gen(5), dtype=DT))
    rotated = Q @ torch.diag(torch.tensor([2.0, 2.0, 2.0, 0.0], dtype=DT)) @ Q.T  # rank 3, equal eigenvalues
    assert close(effective_rank(rotated), 3.0, 1e-9)
    batched = torch.stack([torch.eye(5, dtype=DT), torch.ones(5, 5, dtype=DT)])
    assert close(effective_rank(batched), [5.0, 1.0], 1e-9)


def test_duplicated_neurons_have_rank_one_outputs():
    f = FeatureParticles(3, 1, "tanh", generator=gen(6), dtype=DT).prune([0, 0, 0, 0])
    X = torch.randn(50, 3, generator=gen(7), dtype=DT)
    assert close(effective_rank(output_covariance(f.particle_outputs(X).detach())), 1.0, 1e-9)
    g = FeatureParticles(3, 4, "tanh", generator=gen(6), dtype=DT)
    assert float(effective_rank(output_covariance(g.particle_outputs(X).detach()))) > 1.5


def test_teacher_alignment_and_aligned_fraction():
    teacher = torch.eye(3, dtype=DT)[:2] * 5  # u_1 = e1, u_2 = e2 (scaled)
    c = 0.95
    s = math.sqrt(1 - c**2)
    w = torch.tensor([[c, 0, s], [-c, 0, s], [0, 0, 1], [1, 1, 0]], dtype=DT)  # (M=4, d=3)
    A = teacher_alignment(w, teacher)
    assert close(A, [[c, 0], [-c, 0], [0, 0], [1 / math.sqrt(2), 1 / math.sqrt(2)]])
    assert close(aligned_fraction(w, teacher, 0.9), 0.25)
    assert close(aligned_fraction(w, teacher, 0.9, symmetric=True), 0.5)
    assert close(aligned_fraction(w, teacher, 0.7), 0.5)
    assert close(aligned_fraction(teacher.repeat(3, 1), teacher, 1.0 - 1e-12), 1.0)
    assert aligned_fraction(torch.stack([w, w]), teacher).shape == (2,)


def unit(angle_deg: float, axis: int = 0, d: int = 4) -> torch.Tensor:
    """A unit vector at ``angle_deg`` from ``e_axis`` towards ``e_{axis+1}`` (in R^d)."""
    v = torch.zeros(d, dtype=DT)
    t = math.radians(angle_deg)
    v[axis], v[axis + 1] = math.cos(t), math.sin(t)
    return v


def test_aligned_fraction_blind_spot_and_coverage():
    """Every particle on one of two teacher directions: aligned = 1 (the blind spot), coverage = 1/2."""
    teacher = torch.eye(4, dtype=DT)[[0, 2]]  # u_1 = e1, u_2 = e3
    on_one = teacher[0].repeat(8, 1)  # (8, 4)
    assert close(aligned_fraction(on_one, teacher), 1.0)
    assert close(teacher_coverage(on_one, teacher), 0.5)
    assert close(aligned_fraction(on_one, teacher, by_teacher=True), [1.0, 0.0])
    split = torch.cat([teacher[0].repeat(3, 1), teacher[1].repeat(5, 1)])
    assert close(teacher_coverage(split, teacher), 1.0)
    assert close(aligned_fraction(split, teacher, by_teacher=True), [3 / 8, 5 / 8])
    assert close(aligned_fraction(split, teacher, by_teacher=True).sum(), aligned_fraction(split, teacher))
    # sign symmetry: −u_2 covers u_2 with |cos|, not with the signed cosine
    flipped = torch.cat([teacher[0][None], -teacher[1][None]])
    assert close(teacher_coverage(flipped, teacher), 1.0)
    assert close(teacher_coverage(flipped, teacher, symmetric=False), 0.5)
    # the threshold: a particle at 25° (cos 0.906) counts at τ = 0.9, at 26° (cos 0.899) does not
    assert close(teacher_coverage(torch.stack([unit(25), unit(25, 2)]), teacher, 0.9), 1.0)
    assert close(teacher_coverage(torch.stack([unit(26), unit(25, 2)]), teacher, 0.9), 0.5)
    # dead particles do not count: the only particle on u_2 is dead
    live = torch.tensor([True, False])
    assert close(teacher_coverage(flipped, teacher, live=live), 0.5)
    assert close(aligned_fraction(torch.stack([teacher[0], unit(60)]), teacher, live=live), 1.0)
    assert close(aligned_fraction(torch.stack([teacher[0], unit(60)]), teacher), 0.5)
    # replicas
    assert teacher_coverage(torch.stack([on_one, split]), teacher).tolist() == [0.5, 1.0]


def test_teacher_overlap_known_values_span_nearest_and_weights():
    """q = Σ_i ω_i ‖P ŵ_i‖²/Σ ω_i on constructed particles; the span does not depend on the teacher's basis."""
    e = torch.eye(4, dtype=DT)
    w = torch.stack(
        [e[0], 3 * e[1], (e[0] + e[2]) / math.sqrt(2), e[3], (e[0] + e[1]) / math.sqrt(2)]
    )  # (5, 4)
    orthonormal = e[:2]
    skew = torch.stack([2 * e[0], e[0] + e[1]])  # the same span, not orthonormal
    span = [1.0, 1.0, 0.5, 0.0, 1.0]
    assert close(teacher_overlap(w, orthonormal), np.mean(span))
    assert close(teacher_overlap(w, skew), np.mean(span))
    # nearest direction: the particle between e1 and e2 counts 1/2, not 1 (negative control of the span)
    assert close(teacher_overlap(w, orthonormal, nearest=True), np.mean([1.0, 1.0, 0.5, 0.0, 0.5]))
    assert not close(teacher_overlap(w, orthonormal, nearest=True), np.mean(span), 1e-3)
    weights = torch.tensor([1.0, 0.0, 2.0, 3.0, 0.0], dtype=DT)
    assert close(teacher_overlap(w, orthonormal, weights=weights), (1.0 + 2 * 0.5) / 6)
    assert close(teacher_overlap(w, orthonormal, weights=torch.zeros(5, dtype=DT)), 0.0)
    assert close(teacher_overlap(-w, orthonormal), np.mean(span))  # sign-symmetric
    assert teacher_overlap(torch.stack([w, w, w]), orthonormal).shape == (3,)
    with pytest.raises(ValueError, match="non-negative"):
        teacher_overlap(w, orthonormal, weights=-weights)


def test_teacher_overlap_matches_numpy_and_is_intensive_while_coverage_is_not():
    """Uniform directions: E q = K/d whatever M (an average over particles; numpy least-squares projection as
    the reference), while the coverage of the same particles grows with M (an extreme over particles)."""
    rng = np.random.default_rng(3)
    d, K = 10, 3
    teacher = torch.tensor(rng.standard_normal((K, d)), dtype=DT)  # not orthonormal
    w = torch.tensor(rng.standard_normal((7, d)), dtype=DT)
    coef, *_ = np.linalg.lstsq(teacher.numpy().T, (w / w.norm(dim=1, keepdim=True)).numpy().T, rcond=None)
    proj = teacher.numpy().T @ coef  # (d, 7) the projections on the span
    assert close(teacher_overlap(w, teacher), (proj**2).sum(0).mean(), 1e-12)
    for M in (4, 400):
        R = 40_000 // M
        clouds = torch.randn(R, M, d, generator=gen(M), dtype=DT)  # (R, M, d) i.i.d. uniform directions
        q = teacher_overlap(clouds, teacher)  # (R,)
        se = float(q.std()) / math.sqrt(R)
        assert abs(float(q.mean()) - K / d) <= 5 * se, (M, float(q.mean()))
        assert abs(float(q.mean()) - K / (d - 1)) > 5 * se  # negative control: the wrong uniform value
    cov = [
        float(teacher_coverage(torch.randn(50, M, d, generator=gen(M), dtype=DT), teacher, 0.8).mean())
        for M in (4, 400)
    ]
    assert cov[1] > cov[0] + 0.05


def test_live_particles():
    a = torch.tensor([1.0, -1.0, 2.0, 0.0, 1e-4], dtype=DT)  # mean |a| = 0.80002
    assert live_particles(a).tolist() == [True, True, True, False, False]
    assert live_particles(a, tol=1.5).tolist() == [False, False, True, False, False]  # 2 > 1.2
    vec = torch.tensor([[3.0, 4.0], [0.0, 0.0], [0.6, 0.8]], dtype=DT)  # norms 5, 0, 1; mean 2
    assert live_particles(vec, vector=True).tolist() == [True, False, True]
    assert live_particles(vec, 0.6, vector=True).tolist() == [True, False, False]
    assert not bool(live_particles(torch.zeros(4, dtype=DT)).any())


def test_distinct_modes_known_clusters_and_rule():
    """Two tight clusters of 5 (spread 2°) at 90° from each other, plus isolated particles: 2 modes."""
    g = gen(11)
    c1 = torch.stack([unit(float(x), 0) for x in torch.rand(5, generator=g, dtype=DT) * 2])
    c2 = torch.stack([unit(float(x), 2) for x in torch.rand(5, generator=g, dtype=DT) * 2])
    # pairwise ≥ 60° apart and from the clusters
    lonely = torch.stack([unit(45, 0), unit(45, 1), unit(45, 2)])
    w = torch.cat([c1, c2, lonely])  # (13, 4)
    labels = mode_labels(w, 0.1)
    assert labels[:5].unique().numel() == 1 and labels[5:10].unique().numel() == 1
    assert labels[0] != labels[5] and labels[10:].unique().numel() == 3
    assert close(distinct_modes(w, 0.1), 2.0)  # singletons are not modes
    assert close(distinct_modes(w, 0.1, min_fraction=0.5), 0.0)  # no cluster holds half of the particles
    assert close(distinct_modes(c1.repeat(2, 1), 0.1), 1.0)  # one direction: one mode
    # sign: −c2 is a third direction for ReLU, the same as c2 for an odd activation
    w3 = torch.cat([c1, c2, -c2])
    assert close(distinct_modes(w3, 0.1), 3.0)
    assert close(distinct_modes(w3, 0.1, symmetric=True), 2.0)
    # single linkage chains: particles every 10° along an arc (cos 10° ≥ 0.9) are one mode
    arc = torch.stack([unit(10.0 * i) for i in range(10)])
    assert close(distinct_modes(arc, 1 - math.cos(math.radians(10.5))), 1.0)
    assert close(distinct_modes(arc, 1 - math.cos(math.radians(9.5))), 0.0)  # negative control
    # dead particles are neither members nor links: killing the middle of the arc splits it
    live = torch.ones(10, dtype=torch.bool)
    live[4] = False
    assert close(distinct_modes(arc, 1 - math.cos(math.radians(10.5)), live=live, min_fraction=0.0), 2.0)
    assert int(mode_labels(arc, 0.1, live=live)[4]) == -1
    # a diffuse cloud (i.i.d. uniform directions in d = 32) has no mode; replicas
    cloud = torch.randn(2, 64, 32, generator=gen(12), dtype=DT)
    assert distinct_modes(cloud, 0.1).tolist() == [0.0, 0.0]


def test_collapse_rate_sign_and_dead_particles():
    v = torch.randn(6, generator=gen(9), dtype=DT)
    pair = torch.stack([v, -v, torch.eye(6, dtype=DT)[0]])
    pair[2] = pair[2] - (pair[2] @ v) / (v @ v) * v  # orthogonal to v
    assert close(collapse_rate(pair), 0.0)  # ReLU: w and −w are different features
    assert close(collapse_rate(pair, symmetric=True), 2 / 3)  # odd σ: the same neuron
    dup = torch.stack([v, v, torch.eye(6, dtype=DT)[1] + 0.0])
    dup[2] = dup[2] - (dup[2] @ v) / (v @ v) * v
    assert close(collapse_rate(dup), 2 / 3)
    # a dead duplicate is not a collapse, and the rate is over the live particles
    assert close(collapse_rate(dup, live=torch.tensor([True, False, True])), 0.0)
    assert close(collapse_rate(dup, live=torch.tensor([True, True, False])), 1.0)
    assert close(collapse_rate(dup, live=torch.tensor([False, False, False])), 0.0)


def test_collapse_rate():
    v = torch.randn(6, generator=gen(8), dtype=DT)
    assert close(collapse_rate(v.repeat(5, 1)), 1.0)
    assert close(collapse_rate(torch.eye(5, dtype=DT)), 0.0)
    w = torch.cat([v.repeat(2, 1), torch.eye(6, dtype=DT)[:2] * 7])  # two identical, two orthogonal
    assert close(collapse_rate(w, radius=1e-9), 0.5)
    near = torch.tensor([[1.0, 0.0], [math.cos(0.1), math.sin(0.1)]], dtype=DT)
    assert close(collapse_rate(near, radius=1 - math.cos(0.1) + 1e-9), 1.0)
    assert close(collapse_rate(near, radius=1 - math.cos(0.1) - 1e-9), 0.0)


def test_gradient_variance_known_values_and_minibatch_gradients():
    g = torch.tensor([[1.0, 0.0], [3.0, 0.0], [5.0, 3.0]], dtype=DT)
    ref = float(np.var(g.numpy(), axis=0, ddof=1).sum())  # 4 + 3
    assert close(gradient_variance(g), ref) and close(gradient_variance(g), 7.0)
    assert close(gradient_variance(torch.ones(4, 2, 3, dtype=DT)), 0.0)
    theta = torch.zeros(3, dtype=DT, requires_grad=True)
    batches = [torch.tensor([1.0, 2.0, 3.0], dtype=DT), torch.tensor([0.0, 1.0, 0.0], dtype=DT)]
    G = minibatch_gradients([theta], lambda x: (theta * x).sum() + theta.pow(2).sum(), batches)
    assert close(G, torch.stack(batches))  # ∇(θ·x + ‖θ‖²) at θ = 0 is x
    assert theta.grad is None


def test_loss_smoothness_known_values():
    t = torch.arange(14, dtype=DT)
    line = 10 - 0.5 * t
    assert close(mean_abs_loss_change(line), 0.5)
    assert close(detrended_loss_variance(line, window=3), 0.0)
    noisy = line + (-1.0) ** t  # ± 1 alternating on the line
    assert close(mean_abs_loss_change(noisy[:13]), 2.0)  # |−0.5 ∓ 2| alternates 2.5, 1.5 over 12 steps
    assert close(detrended_loss_variance(noisy, window=3), 16 / 9)  # residual ±4/3 on 12 steps
    assert close(detrended_loss_variance(noisy, window=5), 16 / 25)  # residual ±4/5 on 10 steps
    assert close(mean_abs_loss_change([1.0, 3.0, 2.0]), 1.5)


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: pairwise_cosine(torch.ones(3, dtype=DT)), ValueError, "(…, M, D)"),
        (lambda: pairwise_cosine([[1.0]]), TypeError, "torch.Tensor"),
        (lambda: pairwise_cosine(torch.ones(2, 2, dtype=torch.long)), TypeError, "floating-point"),
        (lambda: attention_similarity(torch.ones(2, 3, 4, dtype=DT)), ValueError, "(B, M, T, T)"),
        (lambda: mean_off_diagonal(torch.ones(1, 1, dtype=DT)), ValueError, "M ≥ 2"),
        (lambda: output_covariance(torch.ones(1, 3, dtype=DT)), ValueError, "N ≥ 2"),
        (lambda: effective_rank(torch.ones(2, 3, dtype=DT)), ValueError, "square"),
        (
            lambda: teacher_alignment(torch.ones(4, 3, dtype=DT), torch.ones(2, 5, dtype=DT)),
            ValueError,
            "d=3",
        ),
        (
            lambda: aligned_fraction(torch.ones(4, 3, dtype=DT), torch.ones(2, 3, dtype=DT), 1.5),
            ValueError,
            "[−1, 1]",
        ),
        (lambda: collapse_rate(torch.ones(4, 3, dtype=DT), radius=3.0), ValueError, "[0, 2]"),
        (lambda: collapse_rate(torch.ones(4, 3, dtype=DT), radius=-0.1), ValueError, "radius must be ≥ 0"),
        (lambda: collapse_rate(torch.ones(1, 3, dtype=DT)), ValueError, "M ≥ 2"),
        (lambda: collapse_rate(torch.ones(4, 3, dtype=DT), live=torch.ones(3) > 0), ValueError, "live"),
        (lambda: collapse_rate(torch.ones(4, 3, dtype=DT), live=torch.ones(4)), TypeError, "boolean"),
        (
            lambda: teacher_coverage(torch.ones(4, 3, dtype=DT), torch.ones(2, 3, dtype=DT), 2),
            ValueError,
            "[−1, 1]",
        ),
        (lambda: distinct_modes(torch.ones(4, 3, dtype=DT), min_fraction=2.0), ValueError, "min_fraction"),
        (lambda: mode_labels(torch.ones(2, 4, 3, dtype=DT)), ValueError, "one replica"),
        (lambda: live_particles(torch.ones(4, dtype=DT), vector=True), ValueError, "(…, M, k)"),
        (lambda: gradient_variance(torch.ones(1, 3, dtype=DT)), ValueError, "S ≥ 2"),
        (lambda: minibatch_gradients([torch.zeros(2)], lambda b: b, [1, 2]), ValueError, "require grad"),
        (lambda: mean_abs_loss_change([1.0]), ValueError, "T ≥ 2"),
        (lambda: detrended_loss_variance(torch.ones(20, dtype=DT), window=4), ValueError, "odd"),
        (lambda: detrended_loss_variance(torch.ones(5, dtype=DT), window=5), ValueError, "T ≥ 6"),
    ],
)
def test_bad_input_is_named(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value), str(info.value)


matplotlib.use("Agg")


def _cosines(f: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(f, axis=-1, keepdims=True)
    u = f / np.where(n > 0, n, 1.0)
    return u @ np.swapaxes(u, -1, -2)


def _modes_by_hand(
    f: np.ndarray, radius: float, symmetric: bool, live: np.ndarray, min_fraction: float
) -> int:
    """Connected components of the live particles linked at ``1 − cos ≤ r`` (depth-first search), counted when
    they hold at least ``max(2, min_fraction · |L|)`` particles."""
    S = _cosines(f)
    if symmetric:
        S = np.abs(S)
    M = len(f)
    seen, sizes = set(), []
    for start in range(M):
        if not live[start] or start in seen:
            continue
        stack, size = [start], 0
        seen.add(start)
        while stack:
            i = stack.pop()
            size += 1
            for j in range(M):
                if live[j] and j not in seen and 1 - S[i, j] <= radius:
                    seen.add(j)
                    stack.append(j)
        sizes.append(size)
    floor = max(2.0, min_fraction * live.sum())
    return sum(s >= floor for s in sizes)


def _collapse_by_hand(f: np.ndarray, radius: float, symmetric: bool, live: np.ndarray) -> float:
    S = _cosines(f)
    if symmetric:
        S = np.abs(S)
    M = len(f)
    hits = sum(
        1 for i in range(M) if live[i] and any(live[j] and j != i and 1 - S[i, j] <= radius for j in range(M))
    )
    return hits / max(1, int(live.sum()))


def test_distinct_modes_floor_counts_live_particles():
    """Clusters of 1, 2, 3 and 4 particles on the orthogonal axes of R⁴ (cosines exactly 0 and 1), interleaved:
    the floor ``max(2, f·|L|)`` gives 3 modes at f = 0 and at the default 0.05, 2 at 0.3 (floor 3), 1 at 0.35
    and at 0.4 (a cluster of exactly the floor counts), 0 at 0.41; with the single particle and the pair dead
    ``|L| = 7``, so f = 0.4 gives floor 2.8 (2 modes) and f = 0.5 floor 3.5 (1 mode), where a floor from all
    10 particles would give 1 and 0. Negative control: every particle on one axis with f = 1 is one mode, one
    short of it is none."""
    sizes = [1, 2, 3, 4]
    axis = [k for k, s in enumerate(sizes) for _ in range(s)]
    order = [3, 9, 1, 6, 0, 4, 8, 2, 5, 7]
    f = torch.eye(4, dtype=DT)[[axis[i] for i in order]]  # (10, 4)
    for frac, modes in [(0.0, 3), (0.05, 3), (0.3, 2), (0.35, 1), (0.4, 1), (0.41, 0)]:
        assert float(distinct_modes(f, min_fraction=frac)) == modes, frac
    assert float(distinct_modes(f)) == 3
    live = torch.tensor([axis[i] >= 2 for i in order])  # the axes with 3 and 4 particles
    assert int(live.sum()) == 7
    assert float(distinct_modes(f, live=live, min_fraction=0.4)) == 2
    assert float(distinct_modes(f, live=live, min_fraction=0.5)) == 1
    one = torch.eye(4, dtype=DT)[[0] * 10]
    assert float(distinct_modes(one, min_fraction=1.0)) == 1
    one[0] = torch.eye(4, dtype=DT)[1]
    assert float(distinct_modes(one, min_fraction=1.0)) == 0


def test_distinct_modes_batches_dtypes_and_arguments_match_a_brute_force_count():
    """Replicas ``(2, 3, 12, 3)`` of particles around four directions (two of them opposite) with random live
    masks: each entry equals :func:`_modes_by_hand` for the radius, ``symmetric`` and ``min_fraction`` given
    (radii chosen away from every pairwise cosine distance); shape ``(2, 3)``, dtype that of the features
    (float64 and float32). Negative control: the counts differ between ``symmetric`` False and True on this data
    (``w`` and ``−w`` join)."""
    g = gen(21)
    centres = torch.tensor([[1.0, 0, 0], [-1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]], dtype=DT)
    pick = torch.randint(0, 4, (2, 3, 12), generator=g)
    f = centres[pick] + 0.08 * torch.randn(2, 3, 12, 3, generator=g, dtype=DT)  # (2, 3, 12, 3)
    live = torch.rand(2, 3, 12, generator=g) > 0.2
    S = _cosines(f.numpy())
    results = {}
    for radius, symmetric, frac in [
        (0.05, False, 0.05),
        (0.05, True, 0.05),
        (0.02, False, 0.25),
        (0.1, True, 0.3),
    ]:
        gaps = np.abs(1 - (np.abs(S) if symmetric else S) - radius)
        assert gaps.min() > 1e-6  # no pair on the boundary
        got = distinct_modes(f, radius, symmetric=symmetric, live=live, min_fraction=frac)
        assert got.shape == (2, 3) and got.dtype == DT
        expected = [
            [_modes_by_hand(f[i, j].numpy(), radius, symmetric, live[i, j].numpy(), frac) for j in range(3)]
            for i in range(2)
        ]
        assert got.tolist() == expected, (radius, symmetric, frac)
        results[(radius, symmetric, frac)] = expected
        assert distinct_modes(f.float(), radius, symmetric=symmetric, live=live, min_fraction=frac).dtype == (
            torch.float32
        )
    assert results[(0.05, False, 0.05)] != results[(0.05, True, 0.05)]
    all_live = distinct_modes(f, 0.05)
    assert all_live.tolist() == [
        [_modes_by_hand(f[i, j].numpy(), 0.05, False, np.ones(12, bool), 0.05) for j in range(3)]
        for i in range(2)
    ]


def test_distinct_modes_refusals_name_the_argument():
    """The messages for ``min_fraction`` above 1 and below 0, a radius above 2, integer and 1-D features.
    Negative control: the boundary values ``min_fraction = 1`` and ``radius = 2`` are accepted."""
    f = torch.eye(3, dtype=DT)
    with pytest.raises(ValueError, match="^" + re.escape("min_fraction must lie in [0, 1], got 1.5") + "$"):
        distinct_modes(f, min_fraction=1.5)
    with pytest.raises(ValueError, match=re.escape("min_fraction must be ≥ 0, got -0.1")):
        distinct_modes(f, min_fraction=-0.1)
    with pytest.raises(
        ValueError, match=re.escape("radius must lie in [0, 2] (a cosine distance 1 − cos), got 2.5")
    ):
        distinct_modes(f, 2.5)
    with pytest.raises(TypeError, match="features must be a floating-point tensor"):
        distinct_modes(torch.eye(3, dtype=torch.int64))
    with pytest.raises(ValueError, match=re.escape("features must have shape (…, M, D) (≥ 2 dimensions)")):
        distinct_modes(torch.ones(3, dtype=DT))
    assert float(distinct_modes(f, 2.0, min_fraction=1.0)) == 1.0  # radius 2 links everything


def test_collapse_rate_boundaries_of_the_radius_and_the_sign():
    """Exact cosines at the edges of the rule ``1 − S_ij ≤ r``: orthogonal axes are collapsed at ``r = 1`` and
    not at 0.999; two equal axes at ``r = 0``; ``e`` and ``−e`` at ``r = 2`` (``symmetric=False``) and at
    ``r = 0`` with ``symmetric=True``, not at 1.999 without it; the default radius 0.01 takes a pair at
    ``cos = 0.995`` and not one at ``cos = 0.985``. Negative control: one particle off the pair at the default
    radius lowers the rate from 1 to 2/3."""
    e = torch.eye(3, dtype=DT)
    assert float(collapse_rate(e[:2], 1.0)) == 1.0 and float(collapse_rate(e[:2], 0.999)) == 0.0
    assert float(collapse_rate(e[[0, 0]], 0.0)) == 1.0
    anti = torch.stack([e[0], -e[0]])
    assert float(collapse_rate(anti, 2.0)) == 1.0 and float(collapse_rate(anti, 1.999)) == 0.0
    assert float(collapse_rate(anti, 0.0, symmetric=True)) == 1.0
    for c, rate in [(0.995, 1.0), (0.985, 0.0)]:
        pair = torch.tensor([[1.0, 0.0], [c, math.sqrt(1 - c * c)]], dtype=DT)
        assert float(collapse_rate(pair)) == rate
    triple = torch.tensor([[1.0, 0.0], [0.995, math.sqrt(1 - 0.995**2)], [0.0, 1.0]], dtype=DT)
    assert abs(float(collapse_rate(triple)) - 2 / 3) <= 1e-15


def test_collapse_rate_batches_masks_and_dtypes_match_a_brute_force_count():
    """Replicas ``(4, 10, 4)`` of particles near ``e_1``, ``−e_1`` and ``e_2``, with live masks of different
    sizes per replica (replica 1 with a single live particle, whose rate is 0, replica 2 with none, also 0), for
    both signs and three radii: each entry equals :func:`_collapse_by_hand`; shape ``(4,)`` and the features'
    dtype (float64, float32). Negative control: ``symmetric`` changes the result on this data (``w`` and
    ``−w`` count as one neuron)."""
    g = gen(22)
    centres = torch.stack([torch.eye(4, dtype=DT)[0], -torch.eye(4, dtype=DT)[0], torch.eye(4, dtype=DT)[1]])
    f = centres[torch.randint(0, 3, (4, 10), generator=g)] + 0.04 * torch.randn(
        4, 10, 4, generator=g, dtype=DT
    )
    live = torch.rand(4, 10, generator=g) > 0.25
    live[1] = False
    live[1, 4] = True
    live[2] = False
    S = _cosines(f.numpy())
    seen = {}
    for radius, symmetric in [(0.002, False), (0.002, True), (0.0005, True), (0.5, False)]:
        assert np.abs(1 - (np.abs(S) if symmetric else S) - radius).min() > 1e-6
        got = collapse_rate(f, radius, symmetric=symmetric, live=live)
        assert got.shape == (4,) and got.dtype == DT
        expected = [_collapse_by_hand(f[r].numpy(), radius, symmetric, live[r].numpy()) for r in range(4)]
        assert np.allclose(got.numpy(), expected, rtol=0, atol=1e-15), (radius, symmetric, got, expected)
        assert expected[1] == 0.0 and expected[2] == 0.0
        seen[(radius, symmetric)] = expected
        assert collapse_rate(f.float(), radius, symmetric=symmetric, live=live).dtype == torch.float32
    assert seen[(0.002, False)] != seen[(0.002, True)]
    assert len({e for v in seen.values() for e in v}) >= 4  # the rates are not all 0 or 1
    unmasked = collapse_rate(f, 0.002)
    expected = [_collapse_by_hand(f[r].numpy(), 0.002, False, np.ones(10, bool)) for r in range(4)]
    assert np.allclose(unmasked.numpy(), expected, rtol=0, atol=1e-15)


def test_collapse_rate_refusals_name_the_argument():
    """The messages for a radius above 2 and below 0, a single particle, a live mask of the wrong shape or
    dtype. Negative control: two particles with a matching mask are accepted."""
    f = torch.eye(3, dtype=DT)
    message = "radius must lie in [0, 2] (a cosine distance 1 − cos), got 2.0001"
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        collapse_rate(f, 2.0001)
    with pytest.raises(ValueError, match=re.escape("radius must be ≥ 0, got -0.5")):
        collapse_rate(f, -0.5)
    with pytest.raises(
        ValueError, match="^" + re.escape("collapse_rate needs M ≥ 2 particles, got M = 1") + "$"
    ):
        collapse_rate(f[:1])
    with pytest.raises(ValueError, match=re.escape("live must have shape (…, M) = (3,), got (2,)")):
        collapse_rate(f, live=torch.ones(2, dtype=torch.bool))
    with pytest.raises(TypeError, match="live must be a boolean tensor"):
        collapse_rate(f, live=torch.ones(3))
    assert float(collapse_rate(f[:2], live=torch.ones(2, dtype=torch.bool))) == 0.0


def test_minibatch_gradients_closed_form_rows_unused_parameters_and_untouched_grad():
    """``loss = ½‖W x + c − t‖²`` has ``∇_W = r xᵀ`` and ``∇_c = r`` with ``r = W x + c − t``: each row is
    ``[vec(r xᵀ), r, 0₂]`` for its minibatch (an unused parameter gives zeros), in the order of the
    parameters; generators work for both the parameters and the batches; exactly two batches are enough; a
    ``.grad`` set before is left as it was and the rows carry no graph. Negative control: swapping the batches
    swaps the rows."""
    g = gen(23)
    Wm = torch.randn(2, 3, generator=g, dtype=DT, requires_grad=True)
    c = torch.randn(2, generator=g, dtype=DT, requires_grad=True)
    unused = torch.randn(2, generator=g, dtype=DT, requires_grad=True)
    Wm.grad = torch.full((2, 3), 7.0, dtype=DT)
    batches = [
        (torch.randn(3, generator=g, dtype=DT), torch.randn(2, generator=g, dtype=DT)) for _ in range(3)
    ]

    def loss(batch):
        x, t = batch
        return 0.5 * ((Wm @ x + c - t) ** 2).sum()

    G = minibatch_gradients((p for p in (Wm, c, unused)), loss, iter(batches))
    assert G.shape == (3, 10) and G.dtype == DT and not G.requires_grad
    with torch.no_grad():
        for row, (x, t) in zip(G, batches):
            r = Wm @ x + c - t
            expected = torch.cat([torch.outer(r, x).flatten(), r, torch.zeros(2, dtype=DT)])
            assert torch.allclose(row, expected, rtol=1e-13, atol=1e-14)
    assert torch.equal(Wm.grad, torch.full((2, 3), 7.0, dtype=DT)) and c.grad is None and unused.grad is None
    two = minibatch_gradients([Wm, c, unused], loss, batches[:2])
    assert torch.equal(two, G[:2])
    swapped = minibatch_gradients([Wm, c, unused], loss, batches[1::-1])
    assert torch.equal(swapped, G[[1, 0]]) and not torch.equal(swapped, two)


def test_minibatch_gradients_refusals():
    """The messages: fewer than two minibatches (``got 1``, ``got 0``), no parameters, a parameter that does
    not require grad, a non-tensor. Negative control: the same call with two batches returns two rows."""
    theta = torch.zeros(2, dtype=DT, requires_grad=True)

    def loss(x):
        return (theta * x).sum()

    one = [torch.ones(2, dtype=DT)]
    for batches, n in ((one, 1), ([], 0)):
        message = f"batches must hold at least 2 minibatches, got {n}"
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            minibatch_gradients([theta], loss, batches)
    message = "parameters must be a non-empty collection of tensors that require grad"
    for params in ([], [theta, torch.zeros(2, dtype=DT)], [theta, 1.0]):
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            minibatch_gradients(params, loss, one * 2)
    assert torch.equal(minibatch_gradients([theta], loss, one * 2), torch.ones(2, 2, dtype=DT))


def test_minibatch_gradients_equal_the_hand_derived_gradient():
    """Oracle: for ``L(θ) = ½ mean_n (θ·x_n − y_n)²`` the gradient is ``mean_n (θ·x_n − y_n) x_n``."""
    from meanfield.metrics import gradient_variance, minibatch_gradients

    g = torch.Generator().manual_seed(1)
    theta = torch.randn(4, generator=g, dtype=torch.float64, requires_grad=True)
    batches = [
        (
            torch.randn(5, 4, generator=g, dtype=torch.float64),
            torch.randn(5, generator=g, dtype=torch.float64),
        )
        for _ in range(6)
    ]
    grads = minibatch_gradients([theta], lambda b: 0.5 * ((b[0] @ theta - b[1]) ** 2).mean(), batches)
    t = theta.detach()
    expected = torch.stack([((X @ t - y)[:, None] * X).mean(0) for X, y in batches])
    assert torch.allclose(grads, expected, atol=1e-12)
    centred = expected - expected.mean(0)
    assert torch.allclose(gradient_variance(grads), (centred**2).sum() / 5, atol=1e-12)
    assert theta.grad is None


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


def _fan(degrees: list[float]) -> torch.Tensor:
    """Particles at the given angles in the plane, each scaled by 1 + its index (lengths must not matter)."""
    return t([[(1 + i) * c for c in unit_at(d)] for i, d in enumerate(degrees)])


TEACH2 = t([[1.0, 0.0], [0.0, 1.0]])


def _np_overlap(w: np.ndarray, teacher: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """numpy reference: ‖P ŵ‖² with P = U (UᵀU)⁻¹ Uᵀ the projector on the rows of teacher."""
    U = teacher.T
    P = U @ np.linalg.inv(U.T @ U) @ U.T
    wh = w / np.linalg.norm(w, axis=-1, keepdims=True)
    proj = np.einsum("...i,ij,...j->...", wh, P, wh)
    if weights is None:
        return proj.mean(-1)
    return (weights * proj).sum(-1) / weights.sum(-1)


def mode_list(x: torch.Tensor) -> list[int]:
    """A label tensor as a list."""
    return [int(v) for v in x]


def _np_detrended(x: np.ndarray, w: int) -> float:
    """numpy reference of the detrended variance (population variance of ℓ_t − centred mean)."""
    h = w // 2
    m = np.convolve(x, np.ones(w) / w, mode="valid")
    r = x[h : len(x) - h] - m
    return float(np.var(r))


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


F64 = torch.float64


def gen_2(seed: int) -> torch.Generator:
    """A seeded CPU generator."""
    return torch.Generator().manual_seed(seed)


def test_mode_labels_live_zero_vector_keeps_its_own_label():
    """A live zero vector (cosine 0 with everything, not even linked to itself below r = 1) is its own
    cluster, labelled in order of its position; at r = 1 it links to every particle (1 − 0 ≤ 1) and chains
    x and −x into one cluster."""
    z = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=F64)
    assert dv.mode_labels(z).tolist() == [0, 1, 2]
    mid = torch.tensor([[1.0, 0.0], [0.0, 0.0], [2.0, 0.0]], dtype=F64)
    assert dv.mode_labels(mid).tolist() == [0, 1, 0]
    two = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]], dtype=F64)
    assert dv.mode_labels(two).tolist() == [0, 1, 2]
    pm = torch.tensor([[1.0, 0.0], [0.0, 0.0], [-1.0, 0.0]], dtype=F64)
    assert dv.mode_labels(pm, 1.0).tolist() == [0, 0, 0]
    assert dv.mode_labels(pm, 0.999).tolist() == [0, 1, 2]


def test_live_mask_shape_error_suppresses_the_torch_context():
    """The shape ValueError is raised ``from None``: no cause, context suppressed."""
    with pytest.raises(ValueError, match=exact("live must have shape (…, M) = (2, 4), got (3,)")) as err:
        dv._live_mask(torch.ones(3, dtype=torch.bool), torch.Size([2, 4]), torch.device("cpu"))
    assert err.value.__cause__ is None and err.value.__suppress_context__ is True


def test_diversity_metrics_keep_float32():
    """float32 particles give float32 fractions, coverage, overlap, collapse rate and mean similarity, with
    the float64 values (hand-built fan: cos with x = 1, 0, 0.9998)."""
    w = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.02]], dtype=torch.float32)
    teacher = torch.tensor([[1.0, 0.0]], dtype=torch.float32)
    outs = {
        "aligned": dv.aligned_fraction(w, teacher),
        "by_teacher": dv.aligned_fraction(w, teacher, by_teacher=True),
        "coverage": dv.teacher_coverage(w, teacher),
        "overlap": dv.teacher_overlap(w, teacher, weights=torch.tensor([1.0, 1.0, 2.0])),
        "collapse": dv.collapse_rate(w),
        "mean": dv.mean_off_diagonal(dv.pairwise_cosine(w)),
    }
    assert all(v.dtype == torch.float32 for v in outs.values())
    c = 1 / math.sqrt(1 + 0.02**2)
    assert float(outs["aligned"]) == pytest.approx(2 / 3) and outs["by_teacher"].tolist() == pytest.approx(
        [2 / 3]
    )
    assert float(outs["coverage"]) == 1.0
    assert float(outs["overlap"]) == pytest.approx((1 + 0 + 2 * c**2) / 4, rel=1e-6)
    assert float(outs["collapse"]) == pytest.approx(2 / 3)
    assert float(outs["mean"]) == pytest.approx((c + 0.02 * c) / 3, rel=1e-6)  # pairs: 0, c, sin


def test_effective_rank_equals_numpy_svd_entropy():
    """Random PSD matrices ``A Aᵀ`` (ranks 1 … 5 of 5, batched): ``exp(H(s/Σs))`` from ``numpy.linalg.svd``;
    one value per replica; a scaled copy has the same effective rank."""
    g = gen_2(21)
    Cs = []
    for r in range(1, 6):
        A = torch.randn(5, r, generator=g, dtype=F64)
        Cs.append(A @ A.T)
    C = torch.stack(Cs)
    s = np.linalg.svd(C.numpy(), compute_uv=False)
    p = s / s.sum(-1, keepdims=True)
    ref = np.exp(-special.xlogy(p, p).sum(-1))
    got = dv.effective_rank(C)
    assert got.shape == (5,)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-9)
    np.testing.assert_allclose(dv.effective_rank(7.5 * C).numpy(), ref, rtol=1e-9)
    assert float(got[0]) == pytest.approx(1.0, abs=1e-6) and all(
        1 <= v <= r + 1e-9 for v, r in zip(got, range(1, 6))
    )


def test_distinct_modes_of_one_replica_is_zero_d_and_all_dead_is_zero():
    """A single ``(M, D)`` replica gives a 0-d count; all particles dead gives 0 modes; a (2, M) live mask
    on a (2, M, D) stack is read per replica."""
    w = torch.tensor([[1.0, 0.0], [1.0, 0.001], [0.0, 1.0], [0.0, 1.001]], dtype=F64)
    out = dv.distinct_modes(w)
    assert out.shape == () and float(out) == 2.0
    assert float(dv.distinct_modes(w, live=torch.zeros(4, dtype=torch.bool))) == 0.0
    live = torch.tensor([[True, True, False, False], [True, True, True, True]])
    assert dv.distinct_modes(torch.stack([w, w]), live=live).tolist() == [1.0, 2.0]


def test_effective_rank_is_nan_for_a_non_finite_matrix_and_scale_free_in_float32():
    """A NaN or Inf in C: NaN (it was 1.0 and 0.0: a diverged model's heads read as collapsed ones); I·1e38
    and I·1e-40 in float32 have effective rank 4 (the eigenvalues' sum overflowed to 1.0, the clamp gave
    1.18). Control: I·1 is 4 and the zero matrix 0."""
    from meanfield.metrics.diversity import effective_rank

    for bad in (math.nan, math.inf):
        C = torch.eye(3, dtype=torch.float64)
        C[0, 0] = bad
        assert math.isnan(float(effective_rank(C)))
    for s in (1e38, 1e-40, 1.0):
        assert float(effective_rank(torch.eye(4) * s)) == pytest.approx(4.0, rel=1e-5)
    assert float(effective_rank(torch.zeros(4, 4))) == 0.0


@pytest.mark.parametrize("s", [2e19, 1e-40, 1.0])
def test_pairwise_cosine_has_ones_on_the_diagonal_at_any_float32_scale(s):
    """Vectors whose norm overflows float32 (2e19·(3, 4)) were read as zero vectors (cosine 0 with
    themselves), subnormal ones gave 0.0018: the diagonal is 1 at every scale (control: s = 1)."""
    from meanfield.metrics.diversity import pairwise_cosine

    x = torch.tensor([[3.0, 4.0], [1.0, 0.0]]) * s
    assert pairwise_cosine(x).diagonal().tolist() == pytest.approx([1.0, 1.0], rel=1e-6)
    assert float(pairwise_cosine(x)[0, 1]) == pytest.approx(0.6, rel=1e-6)
