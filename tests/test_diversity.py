"""Tests of the diversity metrics on constructed cases with known values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

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
