"""Tests of :mod:`meanfield.nn.particles`."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from helpers.layers import assert_close, attention, features, stacked, tokens, vector_features, with_particles
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from meanfield.nn import (
    SUBSAMPLE_STRATEGIES,
    FeatureParticles,
    Medoids,
)
from meanfield.nn.particles import (
    FarthestPoint,
    Importance,
    ParticleLayer,
    Random,
    SubsampleStrategy,
    _farthest_points,
    _squared_distances,
    _strategy,
    check_float_dtype,
    check_input_matches,
)

DT = torch.float64


TOL = 1e-12


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


LAYERS = st.sampled_from(["attention", "causal", "features", "vector_features"])


# deterministic (fixed seed), no example database written to the repository, 15 cases each
QUICK = settings(max_examples=15, deadline=None, derandomize=True, database=None)


def make(kind: str, M: int, seed: int):
    if kind == "features":
        return features(4, M, seed), torch.randn(6, 4, generator=gen(seed + 1), dtype=DT)
    if kind == "vector_features":
        return vector_features(4, M, 3, seed), torch.randn(6, 4, generator=gen(seed + 1), dtype=DT)
    return attention(8, M, h=3, seed=seed, causal=kind == "causal"), tokens(2, 4, 8, seed + 1)


def clustered_features(sizes=(4, 2, 1), seed=0):
    """FeatureParticles whose (a, w) form tight clusters around well-separated centres."""
    centres = 10.0 * torch.eye(4, dtype=DT)[: len(sizes)]  # (K, 4)
    w = torch.cat(
        [
            c + 0.01 * torch.randn(s, 4, generator=gen(seed + j), dtype=DT)
            for j, (c, s) in enumerate(zip(centres, sizes, strict=True))
        ]
    )  # (M, 4)
    f = FeatureParticles(4, w.shape[0], "tanh", dtype=DT)
    with torch.no_grad():
        f.w.copy_(w)
        f.a.fill_(1.0)
    labels = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    return f, labels


@QUICK
@given(kind=LAYERS, M=st.integers(1, 6), seed=st.integers(0, 1000), data=st.data())
def test_permuting_particles_changes_nothing(kind, M, seed, data):
    layer, X = make(kind, M, seed)
    perm = torch.tensor(data.draw(st.permutations(range(M))))
    permuted = with_particles(layer, **{n: p[perm] for n, p in stacked(layer).items()})
    assert_close(permuted(X), layer(X))


@QUICK
@given(kind=LAYERS, M=st.integers(1, 5), k=st.integers(2, 4), seed=st.integers(0, 1000))
def test_duplicating_every_particle_changes_nothing(kind, M, k, seed):
    layer, X = make(kind, M, seed)
    dup = with_particles(layer, **{n: p.repeat_interleave(k, 0) for n, p in stacked(layer).items()})
    assert dup.n_particles == k * M
    assert_close(dup(X), layer(X))


@QUICK
@given(kind=LAYERS, M=st.integers(1, 6), seed=st.integers(0, 1000))
def test_pruning_to_all_particles_is_identity(kind, M, seed):
    layer, X = make(kind, M, seed)
    same = layer.prune(list(range(M)))
    assert same is not layer and same.n_particles == M
    assert torch.equal(same(X), layer(X))


@QUICK
@given(kind=LAYERS, M=st.integers(2, 7), seed=st.integers(0, 1000), data=st.data())
def test_subsample_matches_recomputing_with_those_particles(kind, M, seed, data):
    layer, X = make(kind, M, seed)
    k = data.draw(st.integers(1, M))
    strategy = data.draw(st.sampled_from(sorted(SUBSAMPLE_STRATEGIES)))
    loss = (lambda Y: Y.pow(2).sum()) if strategy == "importance" else None
    S = layer.select(k, strategy, X=X, loss=loss, generator=gen(seed))
    assert S.shape == (k,) and len(set(S.tolist())) == k and S.tolist() == sorted(S.tolist())
    small = layer.subsample(k, strategy, X=X, loss=loss, generator=gen(seed))
    rebuilt = with_particles(layer, **{n: p[S] for n, p in stacked(layer).items()})
    assert small.n_particles == k
    assert_close(small(X), rebuilt(X))
    assert_close(small(X), layer.particle_outputs(X)[:, S].mean(1))


def test_prune_copies_and_accepts_masks_and_repeats():
    layer, X = make("attention", 4, 0)
    small = layer.prune(torch.tensor([True, False, True, False]))
    assert small.n_particles == 2
    assert torch.equal(small.W_Q, layer.W_Q[[0, 2]])
    assert small.W_QKV.requires_grad and small.W_QKV.grad is None
    with torch.no_grad():
        small.W_Q.zero_()
    assert bool(layer.W_Q.abs().sum() > 0)  # the original is untouched
    twice = layer.prune([1, 1, 3, 3])  # duplication: the same law as particles {1, 3}
    assert_close(twice(X), layer.prune([1, 3])(X))
    f = features(A=0.5, sphere=True)
    g = f.prune([0, 2])
    assert g.A == 0.5 and g.sphere and g.activation is f.activation


def test_random_subsample_is_reproducible_and_uniform():
    layer, _ = make("features", 6, 0)
    a = layer.select(3, "random", generator=gen(7))
    b = layer.select(3, "random", generator=gen(7))
    assert torch.equal(a, b)
    counts = torch.zeros(6)
    g = gen(3)
    for _ in range(600):
        counts[layer.select(2, "random", generator=g)] += 1
    # each particle is kept with probability 1/3: 200 ± 5·SE (SE = sqrt(600·(1/3)(2/3)) ≈ 11.5)
    assert bool(((counts - 200).abs() < 58).all()), counts


def test_importance_is_gradient_of_a_per_particle_mask():
    f = features(3, 5, seed=4)
    X = torch.randn(8, 3, generator=gen(1), dtype=DT)
    y = torch.randn(8, generator=gen(2), dtype=DT)

    def loss(Y):
        return 0.5 * (Y - y).pow(2).sum()

    I = f.importance(X, loss)
    ref = torch.zeros(5, dtype=DT)
    for n in range(8):  # Michel et al.: Σ_n |∂ℓ_n/∂ξ_i|, by autograd through an explicit gate ξ
        xi = torch.ones(5, dtype=DT, requires_grad=True)
        out = (xi * f.a * torch.tanh(X[n] @ f.w.T)).sum() / 5
        (g,) = torch.autograd.grad(0.5 * (out - y[n]) ** 2, xi)
        ref += g.abs()
    assert_close(I, ref)
    assert f.a.grad is None and f.w.grad is None
    with torch.no_grad():
        f.a[[1, 3]] = 0.0  # dead output weights: zero importance, never kept
    assert f.select(3, "importance", X=X, loss=loss).tolist() == [0, 2, 4]


def test_importance_for_attention_matches_masked_forward():
    layer = attention(8, 4, h=2, seed=3)
    X = tokens(3, 4, 8)
    target = tokens(3, 4, 8, seed=9)
    I = layer.importance(X, lambda Y: (Y - target).pow(2).sum())
    phi = layer.particle_outputs(X).detach()  # (B, M, T, d)
    ref = torch.zeros(4, dtype=DT)
    for b in range(3):
        xi = torch.ones(4, dtype=DT, requires_grad=True)
        out = (xi[:, None, None] * phi[b]).mean(0)
        (g,) = torch.autograd.grad((out - target[b]).pow(2).sum(), xi)
        ref += g.abs()
    assert_close(I, ref)


def test_farthest_keeps_one_particle_per_cluster():
    f, labels = clustered_features((4, 2, 1))
    S = f.select(3, "farthest")
    assert sorted(labels[S].tolist()) == [0, 1, 2]


def test_farthest_on_outputs_drops_duplicate_heads_first():
    layer = attention(8, 3, h=2, seed=1)
    dup = layer.prune([0, 0, 0, 1, 1, 2])
    S = dup.select(3, "farthest", X=tokens(2, 4, 8))
    assert sorted(torch.tensor([0, 0, 0, 1, 1, 2])[S].tolist()) == [0, 1, 2]


def test_medoids_are_cluster_medoids_and_lower_the_quantisation_error():
    f, labels = clustered_features((5, 3, 3), seed=2)
    S = f.select(3, "medoids")
    assert sorted(labels[S].tolist()) == [0, 1, 2]
    phi = f.particle_features()
    for i in S.tolist():  # each chosen particle minimises the within-cluster sum of squared distances
        members = (labels == labels[i]).nonzero().flatten()
        D = torch.cdist(phi[members], phi[members]).pow(2).sum(0)
        assert int(members[D.argmin()]) == i
    err = Medoids.quantisation_error(phi, S)
    assert float(err) <= float(Medoids.quantisation_error(phi, f.select(3, "farthest"))) + 1e-15
    assert float(err) < float(Medoids.quantisation_error(phi, torch.tensor([0, 1, 2])))


@pytest.mark.parametrize("strategy", sorted(SUBSAMPLE_STRATEGIES))
def test_strategies_return_distinct_particles_among_duplicates(strategy):
    f = features(3, 3, seed=2).prune([0, 0, 1, 1, 1, 2])
    X = torch.randn(5, 3, generator=gen(3), dtype=DT)
    for k in (3, 5, 6):
        S = f.select(k, strategy, X=X, loss=lambda Y: Y.pow(2).sum(), generator=gen(k))
        assert len(set(S.tolist())) == k, (strategy, k, S)


F64 = torch.float64


TOL_2 = 1e-12  # float64 rounding of a few steps on numbers of order one


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class Lin(ParticleLayer):
    """``φ_i(X) = (X·w_i + c_i, c_i·ΣX)`` of shape (N, M, 2); ``forward = mean over particles``."""

    particle_parameter_names = ("w", "c")

    def __init__(self, w: torch.Tensor, c: torch.Tensor) -> None:
        super().__init__()
        self.w = nn.Parameter(w.clone())
        self.c = nn.Parameter(c.clone())
        self.extra = [1, 2]

    def particle_outputs(self, X):
        first = X @ self.w.T + self.c  # (N, M)
        second = self.c * X.sum(1, keepdim=True)  # (N, M)
        return torch.stack([first, second], 2)

    def forward(self, X):
        return self.particle_outputs(X).mean(1)


def _np_phi(X, w, c):
    X, w, c = (np.asarray(t.detach(), dtype=np.float64) for t in (X, w, c))
    first = X @ w.T + c
    second = c[None, :] * X.sum(1)[:, None]
    return np.stack([first, second], 2)


def _layer(M=5, d=3, seed=0):
    g = _gen(seed)
    return Lin(torch.randn(M, d, dtype=F64, generator=g), torch.randn(M, dtype=F64, generator=g))


def _np_importance(X, layer, target):
    phi = _np_phi(X, layer.w, layer.c)  # (N, M, 2)
    Y = phi.mean(1)
    dY = 2 * (Y - target)  # d/dY of Σ (Y − target)²
    M = phi.shape[1]
    return np.abs((dY[:, None, :] * phi).sum(2) / M).sum(0)


def _np_sq(F):
    F = np.asarray(F, dtype=np.float64)
    return ((F[:, None, :] - F[None, :, :]) ** 2).sum(2)


def _np_farthest(D, k):
    chosen = [int(np.argmin(D.sum(1)))]
    nearest = D[chosen[0]].copy()
    for _ in range(k - 1):
        nearest[chosen] = -1
        nxt = int(np.argmax(nearest))
        chosen.append(nxt)
        nearest = np.minimum(nearest, D[nxt])
    return chosen


def test_base_class_methods_that_subclasses_implement():
    """``ParticleLayer.particle_outputs`` and ``SubsampleStrategy.select`` raise NotImplementedError;
    ``n_particles`` is the leading axis of the first stacked parameter."""
    with pytest.raises(NotImplementedError):
        ParticleLayer().particle_outputs(torch.zeros(1))
    with pytest.raises(NotImplementedError):
        SubsampleStrategy().select(_layer(), 1)
    assert _layer(M=7).n_particles == 7


def test_check_float_dtype():
    """None and floating dtypes pass; an integer dtype or a string raise with its repr."""
    for ok in (None, torch.float16, torch.float32, F64):
        check_float_dtype(ok)
    with pytest.raises(
        TypeError,
        match=r"^dtype must be a floating-point torch\.dtype \(e\.g\. torch\.float32\) or None, got torch\.int64$",
    ):
        check_float_dtype(torch.int64)
    with pytest.raises(TypeError, match=r"got 'float32'$"):
        check_float_dtype("float32")


def test_check_input_matches_dtype_outside_autocast():
    """Another dtype raises naming the layer's and the input's dtype and device; under CPU autocast it passes."""
    weight = torch.zeros(2, dtype=F64)
    check_input_matches("X", torch.zeros(2, dtype=F64), weight)
    message = (
        "X must have the layer's dtype and device (torch.float64 on cpu), got torch.float32 on cpu; "
        "convert it with X.to(...) or the layer with .to(...)"
    )
    with pytest.raises(TypeError, match="^" + re.escape(message) + "$"):
        check_input_matches("X", torch.zeros(2), weight)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        check_input_matches("X", torch.zeros(2), weight)


def test_random_uses_the_generator_or_the_global_one():
    """``Random`` is ``randperm(M)[:k]`` from the generator, or from torch's global generator without one."""
    layer = _layer(M=9)
    assert (
        Random().select(layer, 4, generator=_gen(8)).tolist()
        == torch.randperm(9, generator=_gen(8))[:4].tolist()
    )
    torch.manual_seed(123)
    want = torch.randperm(9)[:4].tolist()
    torch.manual_seed(123)
    assert Random().select(layer, 4).tolist() == want


def test_importance_is_the_numpy_mask_gradient_and_importance_selects_its_top_k():
    """``importance`` equals ``Σ_n |1/M ⟨∂L/∂Y_n, φ_i(X)_n⟩|`` computed in numpy (1e-12), touches no gradient; the
    "importance" strategy keeps the top-k of it (sorted)."""
    layer = _layer(M=6, seed=2)
    X = torch.randn(5, 3, dtype=F64, generator=_gen(4))
    target = torch.randn(5, 2, dtype=F64, generator=_gen(5))

    def loss(Y):
        return ((Y - target) ** 2).sum()

    got = layer.importance(X, loss)
    want = _np_importance(X, layer, target.numpy())
    assert np.max(np.abs(got.numpy() - want)) < TOL_2
    assert layer.w.grad is None and layer.c.grad is None
    top = sorted(np.argsort(-want)[:3].tolist())
    assert layer.select(3, "importance", X=X, loss=loss).tolist() == top
    assert layer.select(3, Importance(), X=X, loss=loss).tolist() == top


def test_importance_errors():
    """A non-callable loss, a non-scalar loss, a non-tensor loss and a missing X or loss raise exactly."""
    layer = _layer()
    X = torch.randn(2, 3, dtype=F64)
    with pytest.raises(TypeError, match=r"^loss must be a callable Y -> scalar tensor, got int$"):
        layer.importance(X, 3)
    with pytest.raises(
        ValueError, match=r"^loss must return a scalar tensor, got Tensor torch\.Size\(\[2, 2\]\)$"
    ):
        layer.importance(X, lambda Y: Y)
    with pytest.raises(ValueError, match=r"^loss must return a scalar tensor, got float $"):
        layer.importance(X, lambda Y: 1.0)
    message = "strategy 'importance' needs X (layer inputs) and loss (a callable: layer output -> scalar)"
    for kwargs in ({"X": X}, {"loss": lambda Y: Y.sum()}):
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            layer.select(2, "importance", **kwargs)


def test_squared_distances_are_the_pairwise_numpy_distances_clamped_at_zero():
    """``_squared_distances`` equals numpy's ``Σ (φ_i − φ_j)²`` (to 1e-12 of the largest) and is ≥ 0 for a
    near-duplicate pair whose Gram-matrix formula rounds below 0 (checked: the unclamped formula is < 0 there).

    Whether it rounds below 0 depends on the matmul kernel's summation order (one seed did on an AMD EPYC and
    not on an Intel Xeon): the first of 64 seeds that does is taken; about a third do on either machine, so
    that none does has probability about (2/3)^64 < 1e-11."""

    def near_duplicates(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        F = torch.randn(6, 4, dtype=F64, generator=_gen(seed)) * 1e3
        F[3] = F[0] * (1 + 1e-15) + 1e-12
        gram = F @ F.T
        return F, gram.diagonal()[:, None] + gram.diagonal()[None, :] - 2 * gram  # (6, 4), (6, 6)

    F, raw = next((c for c in map(near_duplicates, range(64)) if float(c[1].min()) < 0.0), (None, None))
    assert F is not None  # the case the clamp is for
    got = _squared_distances(F).numpy()
    assert np.max(np.abs(got - _np_sq(F))) < 1e-12 * np.max(_np_sq(F)) and got.min() >= 0.0


def test_farthest_points_start_at_the_medoid_and_add_the_farthest():
    """On 1-D points ``[0, 1, 2, 10, 20]`` (by hand: squared-distance sums 505, …, 393, 345, … make 10 the medoid;
    then 0 and 20 tie at 100 and the first, 0, wins; then 20 (100), then 2 (4)) the order is [3, 0, 4, 2]; on random
    features the numpy greedy gives the same list; the strategy returns it sorted."""
    pts = torch.tensor([[0.0], [1.0], [2.0], [10.0], [20.0]], dtype=F64)
    D = _squared_distances(pts)
    assert _farthest_points(D, 4).tolist() == [3, 0, 4, 2]
    assert _farthest_points(D, 1).tolist() == [3]
    F = torch.randn(8, 3, dtype=F64, generator=_gen(3))
    assert _farthest_points(_squared_distances(F), 5).tolist() == _np_farthest(_np_sq(F), 5)
    layer = Lin(pts, torch.zeros(5, dtype=F64))  # features [w_i, 0]
    assert layer.select(3, "farthest").tolist() == [0, 3, 4]
    assert layer.select(3, FarthestPoint()).tolist() == [0, 3, 4]
    dup = torch.tensor([[0.0], [0.0], [5.0]], dtype=F64)
    assert sorted(_farthest_points(_squared_distances(dup), 3).tolist()) == [0, 1, 2]


def test_medoids_move_to_the_cluster_medoids_and_their_quantisation_error():
    """Two clusters ``{0, 1, 2, 3.5}`` and ``{10, 11, 12}``: the selected pair is the global k-medoids optimum
    found by brute force over all pairs in numpy; ``quantisation_error`` is ``1/M Σ_i min_j D_ij`` (numpy) and is
    lower than that of the pair (0, 12); ``max_iter`` must be ≥ 1 and defaults to 100."""
    x = np.array([0.0, 1.0, 2.0, 3.5, 10.0, 11.0, 12.0])
    pts = torch.tensor(x[:, None], dtype=F64)
    layer = Lin(pts, torch.zeros(7, dtype=F64))
    D = _np_sq(x[:, None])
    best = min(((i, j) for i in range(7) for j in range(i + 1, 7)), key=lambda s: D[:, list(s)].min(1).sum())
    got = layer.select(2, "medoids")
    assert tuple(got.tolist()) == best
    assert Medoids(max_iter=50).select(layer, 2).sort().values.tolist() == list(best)
    err = Medoids.quantisation_error(layer.particle_features(), got)
    assert float(err) == pytest.approx(D[:, list(best)].min(1).mean(), rel=1e-12)
    assert float(err) < float(Medoids.quantisation_error(layer.particle_features(), torch.tensor([0, 6])))
    with pytest.raises(ValueError, match=r"^max_iter must be ≥ 1, got 0$"):
        Medoids(max_iter=0)
    assert Medoids().max_iter == 100


def test_strategy_lookup_and_registry():
    """The registry holds the four strategies by name; an instance is returned as is; unknown names raise."""
    assert sorted(SUBSAMPLE_STRATEGIES) == ["farthest", "importance", "medoids", "random"]
    assert type(SUBSAMPLE_STRATEGIES["random"]) is Random and type(SUBSAMPLE_STRATEGIES["medoids"]) is Medoids
    assert (
        type(SUBSAMPLE_STRATEGIES["farthest"]) is FarthestPoint
        and type(SUBSAMPLE_STRATEGIES["importance"]) is Importance
    )
    mine = Medoids(3)
    assert _strategy(mine) is mine and _strategy("random") is SUBSAMPLE_STRATEGIES["random"]
    message = (
        "unknown subsample strategy 'best'; allowed: ['farthest', 'importance', 'medoids', 'random'] "
        "or a SubsampleStrategy instance"
    )
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        _strategy("best")
    with pytest.raises(ValueError, match=r"^unknown subsample strategy 3; "):
        _layer().select(2, 3)


def test_medoids_keep_the_uniform_law_on_their_set_not_the_cell_weighted_one():
    """16 neurons in clusters of 12, 3 and 1 (outputs ×1, ×−2, ×5), k = 3: the medoids are one per cluster, but
    the pruned layer averages them equally, while the W2-best law on them weights each by its cell (12/16,
    3/16, 1/16). Its output error is of the size of the output itself (> 0.5× its RMS; measured 1.25 against
    0.81), the cell-weighted law's is tiny (< 0.01; measured 0.0033), which
    ``prune(S.repeat_interleave(cell sizes))`` reproduces (what the Medoids docstring says)."""
    from meanfield.nn import FeatureParticles
    from meanfield.nn.particles import _squared_distances

    g = torch.Generator().manual_seed(0)
    sizes = (12, 3, 1)
    w = torch.cat([3.0 * torch.eye(4, dtype=torch.float64)[j] + 0.01 * torch.randn(s, 4, generator=g, dtype=torch.float64)
                   for j, s in enumerate(sizes)])  # fmt: skip
    f = FeatureParticles(4, 16, "tanh", dtype=torch.float64)
    with torch.no_grad():
        f.w.copy_(w)
        f.a.copy_(torch.tensor([1.0] * 12 + [-2.0] * 3 + [5.0], dtype=torch.float64))
    X = torch.randn(200, 4, generator=g, dtype=torch.float64)  # (N, d_in)
    S = f.select(3, "medoids", X=X)
    cell = _squared_distances(f.particle_features(X))[:, S].argmin(1)  # (M,)
    counts = torch.bincount(cell, minlength=3)
    assert sorted(counts.tolist()) == [1, 3, 12]  # one medoid per cluster

    def rms(t):
        return float(t.detach().square().mean().sqrt())

    full = f(X)
    assert rms(full - f.subsample(3, "medoids", X=X)(X)) > 0.5 * rms(full)
    assert rms(full - f.prune(S.repeat_interleave(counts))(X)) < 0.01
