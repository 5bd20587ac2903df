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
    effective_rank,
    gradient_variance,
    mean_abs_loss_change,
    mean_off_diagonal,
    minibatch_gradients,
    output_covariance,
    pairwise_cosine,
    teacher_alignment,
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
