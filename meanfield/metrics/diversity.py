r"""Diversity of the particles and smoothness of training.

Particles that collapse onto each other waste the width of a mean-field layer; noise (temperature β) keeps
them apart. These metrics measure how far apart they are, on their parameters, their outputs, or their
attention maps, and how noisy training is:

- [`pairwise_cosine`][meanfield.metrics.diversity.pairwise_cosine], [`attention_similarity`][meanfield.metrics.diversity.attention_similarity], [`mean_off_diagonal`][meanfield.metrics.diversity.mean_off_diagonal]: cosine similarities.
- [`output_covariance`][meanfield.metrics.diversity.output_covariance], [`effective_rank`][meanfield.metrics.diversity.effective_rank]: how many directions the particle outputs span.
- [`teacher_alignment`][meanfield.metrics.diversity.teacher_alignment], [`aligned_fraction`][meanfield.metrics.diversity.aligned_fraction]: recovery of teacher directions by the $w_i$
  (per particle: how many particles sit on *some* teacher direction).
- [`teacher_coverage`][meanfield.metrics.diversity.teacher_coverage]: recovery per teacher direction (how many of the K directions have a particle on
  them): the complement of [`aligned_fraction`][meanfield.metrics.diversity.aligned_fraction], which is 1.0 when every particle sits on one direction.
- [`teacher_overlap`][meanfield.metrics.diversity.teacher_overlap]: the intensive order parameter $q = 1/M \sum_i \|P \hat{w}_i\|^2$ (plain or weighted, e.g.
  by $|a_i|$), ``P`` the projector on the teacher span; no threshold, no extreme over particles.
- [`live_particles`][meanfield.metrics.diversity.live_particles]: the mask of particles whose output weight is not ≈ 0.
- [`distinct_modes`][meanfield.metrics.diversity.distinct_modes], [`mode_labels`][meanfield.metrics.diversity.mode_labels]: clusters of particle directions (single linkage at a cosine
  radius), counted among the live particles.
- [`collapse_rate`][meanfield.metrics.diversity.collapse_rate]: the fraction of (live) particles within a cosine radius of another (sign-aware).
- [`minibatch_gradients`][meanfield.metrics.diversity.minibatch_gradients], [`gradient_variance`][meanfield.metrics.diversity.gradient_variance]: gradient noise across minibatches.
- [`mean_abs_loss_change`][meanfield.metrics.diversity.mean_abs_loss_change], [`detrended_loss_variance`][meanfield.metrics.diversity.detrended_loss_variance]: smoothness of a training-loss curve.

Convention: the cosine of a zero vector with anything is 0. Metrics on particle sets accept leading
replica axes ``(…, M, D)`` and return one value per replica; scalar results are 0-d tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch

from meanfield._checks import check_int, check_nonnegative

__all__ = [
    "pairwise_cosine",
    "attention_similarity",
    "mean_off_diagonal",
    "output_covariance",
    "effective_rank",
    "teacher_alignment",
    "aligned_fraction",
    "teacher_coverage",
    "teacher_overlap",
    "live_particles",
    "mode_labels",
    "distinct_modes",
    "collapse_rate",
    "minibatch_gradients",
    "gradient_variance",
    "mean_abs_loss_change",
    "detrended_loss_variance",
]


def _tensor(name: str, x: object, min_rank: int, layout: str) -> torch.Tensor:
    if not torch.is_tensor(x):
        raise TypeError(f"{name} must be a torch.Tensor of shape {layout}, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.dim() < min_rank:
        raise ValueError(f"{name} must have shape {layout} (≥ {min_rank} dimensions), got {tuple(x.shape)}")
    return x


def _unit(x: torch.Tensor) -> torch.Tensor:
    r"""$x/\|x\|$ along the last axis, and 0 for a zero vector."""
    norm = x.norm(dim=-1, keepdim=True)  # (…, 1)
    top = x.abs().amax(-1, keepdim=True)  # (…, 1)
    odd = (top > 0) & ((norm < torch.finfo(x.dtype).tiny) | torch.isinf(norm))  # norm under/overflowed
    x = torch.where(odd, x / torch.where(odd, top, torch.ones_like(top)), x)  # those rows: largest |entry| 1
    norm = torch.where(odd, x.norm(dim=-1, keepdim=True), norm)
    return x / norm.clamp_min(torch.finfo(x.dtype).tiny)  # (…, D)


def pairwise_cosine(features: torch.Tensor) -> torch.Tensor:
    r"""Cosine similarity of every pair of particles, $S_{ij} = \langle \varphi_i, \varphi_j\rangle / (\|\varphi_i\| \|\varphi_j\|)$.

    Args:
        features: ``(…, M, D)``, one feature vector $\varphi_i$ per particle (parameters $w_i$, flattened
            outputs, flattened attention maps).

    Returns:
        ``(…, M, M)``, symmetric, entries in $[-1, 1]$, 1 on the diagonal (0 for a zero vector).
    """
    u = _unit(_tensor("features", features, 2, "(…, M, D)"))  # (…, M, D)
    return u @ u.transpose(-1, -2)  # (…, M, M)


def attention_similarity(maps: torch.Tensor) -> torch.Tensor:
    r"""Cosine similarity of the attention maps of every pair of heads.

    $S_{ij} = \langle A_i, A_j\rangle_F / (\|A_i\|_F \|A_j\|_F)$ with $A_i$ head ``i``'s maps over all sequences of the
    batch, $\langle A, B\rangle_F = \sum_{b,s,t} A[b,s,t] B[b,s,t]$. Attention maps are non-negative, so $S_{ij} \in [0, 1]$:
    1 for heads that attend identically (up to a scale), 0 for heads whose supports are disjoint.

    Args:
        maps: ``(B, M, T, T)``, e.g. ``ParticleAttention.attention_maps(X)``.

    Returns:
        ``(M, M)``.
    """
    maps = _tensor("maps", maps, 4, "(B, M, T, T)")
    if maps.dim() != 4:
        raise ValueError(f"maps must have shape (B, M, T, T), got {tuple(maps.shape)}")
    return pairwise_cosine(maps.transpose(0, 1).flatten(1))  # (M, M)


def mean_off_diagonal(S: torch.Tensor) -> torch.Tensor:
    r"""$1/(M(M-1)) \sum_{i\ne j} S_{ij}$, the mean pairwise similarity: ``(…, M, M) -> (…)`` (needs M ≥ 2)."""
    S = _tensor("S", S, 2, "(…, M, M)")
    M = S.shape[-1]
    if S.shape[-2] != M or M < 2:
        raise ValueError(f"S must be square (…, M, M) with M ≥ 2, got {tuple(S.shape)}")
    total = S.sum((-1, -2)) - S.diagonal(dim1=-2, dim2=-1).sum(-1)  # (…)
    return total / (M * (M - 1))


def output_covariance(outputs: torch.Tensor) -> torch.Tensor:
    r"""Covariance of the particle outputs across samples.

    With $\varphi_i(n)$ particle ``i``'s output on sample ``n`` (a scalar or an array over the trailing axes)
    and $\mu_i = 1/N \sum_n \varphi_i(n)$,

    $$
    C_{ij} = 1/(N-1) \sum_n \langle \varphi_i(n) - \mu_i, \varphi_j(n) - \mu_j\rangle,
    $$

    $\langle\cdot,\cdot\rangle$ the sum over the trailing axes. Identical particles give $C = c\cdot 11^T$ (rank 1); particles
    with uncorrelated outputs of equal variance give $C = c\cdot I$ (rank M).

    Args:
        outputs: ``(N, M, *F)``, samples first, particles second, e.g. ``FeatureParticles.particle_outputs``
            ``(N, M)`` or ``ParticleAttention.particle_outputs`` ``(B, M, T, d)``.

    Returns:
        ``(M, M)``, symmetric positive semi-definite.
    """
    outputs = _tensor("outputs", outputs, 2, "(N, M, *F)")
    N, M = outputs.shape[:2]
    if N < 2:
        raise ValueError(
            f"outputs needs N ≥ 2 samples on its first axis to estimate a covariance, got N = {N}"
        )
    phi = outputs.reshape(N, M, -1)  # (N, M, F)
    phi = phi - phi.mean(0)  # (N, M, F)
    return torch.einsum("nif,njf->ij", phi, phi) / (N - 1)  # (M, M)


def effective_rank(C: torch.Tensor) -> torch.Tensor:
    r"""Effective rank (Roy & Vetterli, 2007) of a symmetric positive semi-definite matrix.

    With eigenvalues $\lambda_1..\lambda_M$ (negative round-off clipped to 0) and $p_k = \lambda_k / \sum_l \lambda_l$,

    $$
    \mathrm{erank}(C) = \exp(H(p)), \qquad H(p) = -\sum_k p_k \log p_k \qquad (0 \log 0 = 0),
    $$

    which lies in ``[1, rank C]``: 1 for a rank-one matrix, M for a multiple of the identity. A zero matrix
    (no variance at all) has effective rank 0 by convention, a matrix with a NaN or Inf has NaN (a diverged
    model's heads, not "collapsed" ones). The eigenvalues are divided by the largest before they are summed,
    so the value is the same at any scale the dtype holds.

    Args:
        C: ``(…, M, M)``, e.g. [`output_covariance`][meanfield.metrics.diversity.output_covariance].

    Returns:
        ``(…)``.
    """
    C = _tensor("C", C, 2, "(…, M, M)")
    if C.shape[-1] != C.shape[-2]:
        raise ValueError(f"C must be square (…, M, M), got {tuple(C.shape)}")
    lam = torch.linalg.eigvalsh(C).clamp_min(0)  # (…, M)
    top = lam.amax(-1, keepdim=True)  # (…, 1)
    lam = lam / torch.where(top > 0, top, torch.ones_like(top))  # largest 1: no overflow, no subnormal sum
    total = lam.sum(-1, keepdim=True)  # (…, 1), ≥ 1 unless C = 0
    p = lam / total.clamp_min(1)  # (…, M)
    H = -torch.special.xlogy(p, p).sum(-1)  # (…)
    out = torch.where(total.squeeze(-1) > 0, H.exp(), torch.zeros_like(H))
    return torch.where(torch.isfinite(C).all(-1).all(-1), out, torch.full_like(out, float("nan")))


def teacher_alignment(w: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    r"""Cosine of every particle direction with every teacher direction, $A_{ik} = \langle w_i, u_k\rangle/(\|w_i\| \|u_k\|)$.

    Args:
        w: ``(…, M, d)``, the particles' weight vectors.
        teacher: ``(K, d)``, the teacher directions $u_k$.

    Returns:
        ``(…, M, K)``, entries in $[-1, 1]$.
    """
    w = _tensor("w", w, 2, "(…, M, d)")
    teacher = _tensor("teacher", teacher, 2, "(K, d)")
    if teacher.dim() != 2 or teacher.shape[-1] != w.shape[-1]:
        raise ValueError(
            f"teacher must have shape (K, d={w.shape[-1]}) to match w {tuple(w.shape)}, "
            f"got {tuple(teacher.shape)}"
        )
    # (…, M, K), in w's dtype (a float32 teacher for float64 w)
    return _unit(w) @ _unit(teacher.to(w.dtype)).T


def _check_cosine(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number in [−1, 1] (a cosine), got {type(value).__name__}")
    if not -1.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [−1, 1] (a cosine), got {value}")
    return float(value)


def _live_mask(live: torch.Tensor | None, shape: torch.Size, device: torch.device) -> torch.Tensor:
    """``live`` as a boolean ``(…, M)`` mask broadcast to ``shape`` (every particle when ``None``)."""
    if live is None:
        return torch.ones(shape, dtype=torch.bool, device=device)
    if not torch.is_tensor(live) or live.dtype != torch.bool:
        raise TypeError(
            f"live must be a boolean tensor of shape (…, M), got {getattr(live, 'dtype', live)!r}"
        )
    try:
        return live.to(device).expand(shape)
    except RuntimeError:
        raise ValueError(f"live must have shape (…, M) = {tuple(shape)}, got {tuple(live.shape)}") from None


def aligned_fraction(
    w: torch.Tensor,
    teacher: torch.Tensor,
    threshold: float = 0.9,
    symmetric: bool = False,
    *,
    live: torch.Tensor | None = None,
    by_teacher: bool = False,
) -> torch.Tensor:
    r"""Fraction of (live) particles aligned with some teacher direction.

        aligned = 1/|L| Σ_{i∈L} 1[ max_k c_ik ≥ τ ],   c_ik = A_ik (or |A_ik| when ``symmetric``)

    with ``A`` from [`teacher_alignment`][meanfield.metrics.diversity.teacher_alignment] and ``L`` the live particles (all of them by default; an empty
    ``L`` gives 0). Use ``symmetric=True`` when ``w`` and $-w$ are the same feature (an odd activation with
    the sign absorbed by $a_i$).

    **Blind spot.** The scalar counts particles, not directions: it is 1.0 when every particle sits on *one*
    of K teacher directions. Read it with [`teacher_coverage`][meanfield.metrics.diversity.teacher_coverage] (how many directions are found), or ask
    for ``by_teacher=True``: the fraction $1/|L| \sum_{i\in L} 1[c_{ik} \ge \tau \text{ and } k = \operatorname{argmax}_l c_{il}]$ for each k,
    which shows where the aligned particles went (it sums to ``aligned`` over k).

    Args:
        w: ``(…, M, d)``.
        teacher: ``(K, d)``.
        threshold: $\tau \in [-1, 1]$.
        symmetric: compare ``|cos|`` instead of ``cos``.
        live: optional boolean mask ``(…, M)`` of the particles to count (e.g. [`live_particles`][meanfield.metrics.diversity.live_particles]).
        by_teacher: return one fraction per teacher direction.

    Returns:
        ``(…)`` in ``[0, 1]``, or ``(…, K)`` with ``by_teacher``.
    """
    tau = _check_cosine("threshold", threshold)
    A = teacher_alignment(w, teacher)  # (…, M, K)
    if symmetric:
        A = A.abs()
    mask = _live_mask(live, A.shape[:-1], A.device)  # (…, M)
    n_live = mask.sum(-1).clamp_min(1).to(A.dtype)  # (…)
    best, arg = A.max(-1)  # (…, M)
    hit = (best >= tau) & mask  # (…, M)
    if not by_teacher:
        return hit.to(A.dtype).sum(-1) / n_live  # (…)
    onehot = torch.nn.functional.one_hot(arg, A.shape[-1]).to(torch.bool)  # (…, M, K)
    return (onehot & hit.unsqueeze(-1)).to(A.dtype).sum(-2) / n_live.unsqueeze(-1)  # (…, K)


def teacher_coverage(
    w: torch.Tensor,
    teacher: torch.Tensor,
    threshold: float = 0.9,
    *,
    symmetric: bool = True,
    live: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Fraction of the K teacher directions that some live particle recovers.

        coverage = 1/K Σ_k 1[ max_{i∈L} c_ik ≥ τ ],   c_ik = |A_ik| (``symmetric``, default) or A_ik

    with ``A`` from [`teacher_alignment`][meanfield.metrics.diversity.teacher_alignment] and ``L`` the live particles. $K \cdot \text{ coverage }$ is the number of
    directions found. Unlike [`aligned_fraction`][meanfield.metrics.diversity.aligned_fraction], all particles on one of two directions give 1/2.
    Sign-symmetric by default (``w`` and $-w$ recover the same direction $\mathrm{span}(u_k)$).

    Args:
        w: ``(…, M, d)``.
        teacher: ``(K, d)``.
        threshold: $\tau \in [-1, 1]$.
        symmetric: compare ``|cos|`` (default) instead of ``cos``.
        live: optional boolean mask ``(…, M)`` of the particles that may count.

    Returns:
        ``(…)``, in ``{0, 1/K, …, 1}``.
    """
    tau = _check_cosine("threshold", threshold)
    A = teacher_alignment(w, teacher)  # (…, M, K)
    if symmetric:
        A = A.abs()
    mask = _live_mask(live, A.shape[:-1], A.device)  # (…, M)
    A = torch.where(mask.unsqueeze(-1), A, torch.full_like(A, -2.0))  # dead particles never count
    return (A.max(-2).values >= tau).to(A.dtype).mean(-1)  # (…)


def teacher_overlap(
    w: torch.Tensor,
    teacher: torch.Tensor,
    *,
    weights: torch.Tensor | None = None,
    nearest: bool = False,
) -> torch.Tensor:
    r"""The overlap order parameter ``q``: the mean squared projection of the particle directions on the teacher.

        q = Σ_i ω_i ‖P ŵ_i‖² / Σ_i ω_i,   ŵ_i = w_i/‖w_i‖,   ω_i = 1 (default) or ``weights`` (e.g. $|a_i|$)

    with ``P`` the orthogonal projector on $\mathrm{span}(u_1, \dots, u_K)$. For orthonormal teacher directions
    $\|P \hat{w}\|^2 = \sum_k (\hat{w}\cdot u_k)^2$, so for K = 1 this is $1/M \sum_i (w_i\cdot w^*)^2$. Unlike [`aligned_fraction`][meanfield.metrics.diversity.aligned_fraction]
    and [`teacher_coverage`][meanfield.metrics.diversity.teacher_coverage] it has no threshold, and unlike [`teacher_coverage`][meanfield.metrics.diversity.teacher_coverage] it is an average over
    particles, not an extreme: its value for i.i.d. particles does not depend on M (an *intensive* order
    parameter; the mean-field law's $\mathbb{E}_\rho\|P w\|^2$). Uniform directions on $S^{d-1}$ give ``K/d``; every
    particle in the teacher span gives 1. Sign-symmetric (``w`` and $-w$ give the same value).

    ``nearest=True`` replaces $\|P \hat{w}_i\|^2$ by $\max_k \cos^2(w_i, u_k)$ (the nearest teacher direction; equal to
    the span version for K = 1).

    Args:
        w: ``(…, M, d)``.
        teacher: ``(K, d)``, linearly independent directions (any lengths).
        weights: optional non-negative ``(…, M)``; a replica whose weights sum to 0 gives 0.
        nearest: use the nearest teacher direction instead of the span.

    Returns:
        ``(…)`` in ``[0, 1]``.
    """
    w = _tensor("w", w, 2, "(…, M, d)")
    teacher = _tensor("teacher", teacher, 2, "(K, d)")
    if nearest:
        proj = teacher_alignment(w, teacher).square().max(-1).values  # (…, M)
    else:
        teacher_alignment(w, teacher[:1])  # checks the shapes
        basis, _ = torch.linalg.qr(teacher.to(w.dtype).T)  # (d, K) orthonormal basis of the span
        proj = (_unit(w) @ basis).square().sum(-1)  # (…, M)
    if weights is None:
        return proj.mean(-1)  # (…)
    if not torch.is_tensor(weights) or (weights < 0).any():
        raise ValueError("weights must be a non-negative tensor of shape (…, M)")
    weights = weights.to(proj.dtype).expand_as(proj)  # (…, M)
    total = weights.sum(-1)  # (…)
    return (weights * proj).sum(-1) / total.clamp_min(torch.finfo(proj.dtype).tiny)  # (…)


def live_particles(a: torch.Tensor, tol: float = 0.05, *, vector: bool = False) -> torch.Tensor:
    r"""Mask of the particles whose output weight is not ≈ 0: $\|a_i\| > \text{ tol } \cdot (1/M \sum_j \|a_j\|)$.

    A particle with $a_i = 0$ contributes nothing to $f = 1/M \sum a_i \sigma(w_i\cdot x)$ whatever its $w_i$, so
    its direction says nothing about what the network learned (a *dead* particle): diversity and collapse
    metrics count live particles only. The threshold is relative to the mean $\|a_j\|$, so it does not
    depend on the scale of the read-out.

    Args:
        a: ``(…, M)`` scalar output weights, or ``(…, M, k)`` vector ones with ``vector=True``.
        tol: $\ge 0$, the fraction of the mean norm below which a particle is dead.
        vector: the last axis of ``a`` is the output axis ``k`` (the norm $\|a_i\|$ is taken over it).

    Returns:
        Boolean ``(…, M)`` (all ``False`` when every $a_i = 0$).
    """
    tol = check_nonnegative("tol", tol)
    a = _tensor("a", a, 2 if vector else 1, "(…, M, k)" if vector else "(…, M)")
    norm = a.norm(dim=-1) if vector else a.abs()  # (…, M)
    return norm > tol * norm.mean(-1, keepdim=True)  # (…, M)


def mode_labels(
    features: torch.Tensor, radius: float = 0.1, *, symmetric: bool = False, live: torch.Tensor | None = None
) -> torch.Tensor:
    r"""Cluster labels of the particle directions: single linkage at cosine radius ``r``.

    **Rule.** Live particles ``i`` and ``j`` are linked when $1 - c_{ij} \le r$ with $c_{ij}$ their cosine
    (``|cos|`` when ``symmetric``: ``w`` and $-w$ are one direction); the clusters are the connected
    components of that graph. Labels are ``0, 1, …`` in order of each cluster's first particle; dead
    particles get $-1$. Single linkage is order-independent and needs no number of clusters, but chains:
    two groups joined by a path of particles each within ``r`` of the next are one cluster.

    Args:
        features: ``(M, D)`` (one replica), e.g. the $w_i$.
        radius: $r \in [0, 2]$, a cosine distance (``r = 0.1``: cos ≥ 0.9, about 26°).
        symmetric: compare ``|cos|``.
        live: optional boolean mask ``(M,)``.

    Returns:
        ``(M,)`` int64 labels.
    """
    r = check_nonnegative("radius", radius)
    if r > 2:
        raise ValueError(f"radius must lie in [0, 2] (a cosine distance 1 − cos), got {radius}")
    features = _tensor("features", features, 2, "(M, D)")
    if features.dim() != 2:
        raise ValueError(f"features must have shape (M, D) (one replica), got {tuple(features.shape)}")
    S = pairwise_cosine(features.detach())  # (M, M)
    if symmetric:
        S = S.abs()
    M = S.shape[0]
    mask = _live_mask(live, torch.Size([M]), S.device)  # (M,)
    linked = (1 - S <= r) & mask[:, None] & mask[None, :]  # (M, M)
    # connected components by min-label propagation (at most M rounds; usually a handful)
    labels = torch.where(mask, torch.arange(M, device=S.device), torch.full((M,), M, device=S.device))
    big = torch.full((M, M), M, device=S.device, dtype=labels.dtype)
    for _ in range(M):
        new = torch.where(linked, labels[None, :].expand(M, M), big).min(1).values  # (M,)
        new = torch.minimum(new, labels)
        if torch.equal(new, labels):
            break
        labels = new
    out = torch.full((M,), -1, dtype=torch.long, device=S.device)
    roots = labels[mask].unique(sorted=True)  # first particle of each cluster, increasing
    for n, root in enumerate(roots.tolist()):
        out[(labels == root) & mask] = n
    return out


def distinct_modes(
    features: torch.Tensor,
    radius: float = 0.1,
    *,
    symmetric: bool = False,
    live: torch.Tensor | None = None,
    min_fraction: float = 0.05,
) -> torch.Tensor:
    r"""Number of distinct modes of the particle law: clusters of [`mode_labels`][meanfield.metrics.diversity.mode_labels] holding at least a
    fraction ``min_fraction`` of the live particles.

        modes = #{ clusters C : |C| ≥ max(2, min_fraction · |L|) }

    Isolated particles (and clusters smaller than the floor) are not modes: a diffuse, hot cloud has 0 modes,
    every particle on one direction has 1, particles split over K separated directions have K.

    Args:
        features: ``(…, M, D)``.
        radius: ``r``, the linkage cosine distance.
        symmetric: compare ``|cos|`` (an odd activation, or directions up to sign).
        live: optional boolean mask ``(…, M)``.
        min_fraction: $\in [0, 1]$, the smallest share of the live particles a mode holds.

    Returns:
        ``(…)``, integer-valued (dtype of ``features``).
    """
    features = _tensor("features", features, 2, "(…, M, D)")
    f = check_nonnegative("min_fraction", min_fraction)
    if f > 1:
        raise ValueError(f"min_fraction must lie in [0, 1], got {min_fraction}")
    lead = features.shape[:-2]
    M = features.shape[-2]
    flat = features.reshape(-1, M, features.shape[-1])  # (R, M, D)
    masks = _live_mask(live, torch.Size([*lead, M]), features.device).reshape(-1, M)  # (R, M)
    counts = []
    for x, m in zip(flat, masks):
        labels = mode_labels(x, radius, symmetric=symmetric, live=m)  # (M,)
        sizes = torch.bincount(labels[labels >= 0], minlength=1)
        floor = max(2.0, f * float(m.sum()))
        counts.append(float((sizes >= floor).sum()))
    return torch.tensor(counts, dtype=features.dtype, device=features.device).reshape(lead)


def collapse_rate(
    features: torch.Tensor,
    radius: float = 0.01,
    *,
    symmetric: bool = False,
    live: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Fraction of (live) particles within cosine radius ``r`` of another live particle.

        collapse = 1/|L| Σ_{i∈L} 1[ ∃ j ∈ L, j ≠ i : 1 − S_ij ≤ r ],   S from [`pairwise_cosine`][meanfield.metrics.diversity.pairwise_cosine]

    (``|S|`` when ``symmetric``). Identical particles give 1, pairwise orthogonal ones give 0 (for
    ``r < 1``). **Sign:** with ``symmetric=False`` (ReLU and other non-odd activations) ``w`` and $-w$ are
    different features and are not a collapse; with ``symmetric=True`` (odd activations, where
    $a \sigma(-w\cdot x) = (-a) \sigma(w\cdot x)$) they are the same neuron. **Dead particles** (``live`` False, e.g.
    $a_i \approx 0$: [`live_particles`][meanfield.metrics.diversity.live_particles]) are neither counted nor neighbours; fewer than two live particles
    give 0.

    Args:
        features: ``(…, M, D)``.
        radius: $r \in [0, 2]$, a cosine distance.
        symmetric: compare ``|cos|``.
        live: optional boolean mask ``(…, M)``.

    Returns:
        ``(…)``, in ``[0, 1]``.
    """
    r = check_nonnegative("radius", radius)
    if r > 2:
        raise ValueError(f"radius must lie in [0, 2] (a cosine distance 1 − cos), got {radius}")
    S = pairwise_cosine(features)  # (…, M, M)
    if symmetric:
        S = S.abs()
    M = S.shape[-1]
    if M < 2:
        raise ValueError(f"collapse_rate needs M ≥ 2 particles, got M = {M}")
    mask = _live_mask(live, S.shape[:-1], S.device)  # (…, M)
    eye = torch.eye(M, dtype=torch.bool, device=S.device)  # (M, M)
    close = (1 - S <= r) & ~eye & mask.unsqueeze(-1) & mask.unsqueeze(-2)  # (…, M, M)
    n_live = mask.sum(-1).clamp_min(1).to(S.dtype)  # (…)
    return close.any(-1).to(S.dtype).sum(-1) / n_live  # (…)


def minibatch_gradients(
    parameters: Sequence[torch.Tensor] | Iterable[torch.Tensor],
    loss: Callable[[object], torch.Tensor],
    batches: Iterable[object],
) -> torch.Tensor:
    r"""Flattened gradients ``g_s = ∇_θ loss(batch_s)`` for each minibatch: ``(S, P)``.

    ``.grad`` of the parameters is not touched.

    Args:
        parameters: the tensors $\theta$ (requiring grad), e.g. ``model.parameters()``.
        loss: ``batch -> scalar tensor``.
        batches: the minibatches.

    Returns:
        ``(S, P)``, ``P`` the total number of parameter entries.
    """
    params = list(parameters)
    if not params or not all(torch.is_tensor(p) and p.requires_grad for p in params):
        raise ValueError("parameters must be a non-empty collection of tensors that require grad")
    rows = []
    for batch in batches:
        grads = torch.autograd.grad(loss(batch), params, allow_unused=True)
        rows.append(
            torch.cat(
                [
                    (torch.zeros_like(p) if g is None else g).flatten()
                    for p, g in zip(params, grads, strict=True)
                ]
            )
        )
    if len(rows) < 2:
        raise ValueError(f"batches must hold at least 2 minibatches, got {len(rows)}")
    return torch.stack(rows)  # (S, P)


def gradient_variance(grads: torch.Tensor) -> torch.Tensor:
    r"""Total variance of the gradient across minibatches, the trace of its covariance.

    $$
    V = 1/(S-1) \sum_s \|g_s - \bar{g}\|^2, \qquad \bar{g} = 1/S \sum_s g_s
    $$

    Args:
        grads: ``(S, *P)``, one gradient per minibatch (e.g. [`minibatch_gradients`][meanfield.metrics.diversity.minibatch_gradients]).

    Returns:
        0-d tensor $V \ge 0$.
    """
    grads = _tensor("grads", grads, 2, "(S, *P)")
    S = grads.shape[0]
    if S < 2:
        raise ValueError(f"grads needs S ≥ 2 minibatches on its first axis, got S = {S}")
    g = grads.reshape(S, -1)  # (S, P)
    return (g - g.mean(0)).pow(2).sum() / (S - 1)


def _losses(losses: torch.Tensor | Sequence[float], minimum: int) -> torch.Tensor:
    x = losses if torch.is_tensor(losses) else torch.as_tensor(losses, dtype=torch.float64)
    x = _tensor("losses", x, 1, "(T,)")
    if x.dim() != 1 or x.shape[0] < minimum:
        raise ValueError(f"losses must have shape (T,) with T ≥ {minimum}, got {tuple(x.shape)}")
    return x


def mean_abs_loss_change(losses: torch.Tensor | Sequence[float]) -> torch.Tensor:
    r"""Roughness of a loss curve: $1/(T-1) \sum_t |\ell_{t+1} - \ell_t|$.

    A monotone curve gives $(\ell_1 - \ell_T)/(T-1)$ in absolute value; noise adds to it.

    Args:
        losses: ``(T,)``, $T \ge 2$.

    Returns:
        0-d tensor.
    """
    x = _losses(losses, 2)
    return x.diff().abs().mean()


def detrended_loss_variance(losses: torch.Tensor | Sequence[float], window: int = 11) -> torch.Tensor:
    r"""Variance of the loss around its centred moving average.

    With ``w = 2h + 1`` and $m_t = 1/w \sum_{|s-t|\le h} \ell_s$ for $h \le t < T - h$, the residual is
    $r_t = \ell_t - m_t$ and the result is $1/n \sum_t (r_t - \bar{r})^2$ over those $n = T - 2h$ steps.
    A curve that is linear over every window gives 0.

    Args:
        losses: ``(T,)``.
        window: ``w``, odd, $3 \le w \le T - 1$.

    Returns:
        0-d tensor.
    """
    w = check_int("window", window, minimum=3)
    if w % 2 == 0:
        raise ValueError(f"window must be odd (a centred moving average), got {w}")
    x = _losses(losses, w + 1)
    h = w // 2
    m = x.unfold(0, w, 1).mean(-1)  # (T − 2h,)
    r = x[h : x.shape[0] - h] - m  # (T − 2h,)
    return (r - r.mean()).pow(2).mean()
