r"""What every particle layer shares: the particle count, pruning, subsampling, mask importance.

A *particle layer* holds the parameters of its M particles as stacked tensors with a leading particle axis
``(M, …)`` and computes $Y = 1/M \sum_i \varphi_{\theta_i}(X)$, the average of the particle outputs
(``particle_outputs(X)`` has the particle axis at dimension 1:
``forward(X) == particle_outputs(X).mean(1)``).
Keeping a subset ``S`` of the particles is indexing every stacked tensor with ``S``; the smaller layer
computes $1/|S| \sum_{i\in S} \varphi_{\theta_i}(X)$, the same layer for the empirical law of the kept particles.

Subsampling strategies choose ``S`` (``|S| = k``); they are objects registered by name in
`SUBSAMPLE_STRATEGIES`:

- ``"random"`` ([`Random`][meanfield.nn.particles.Random]): ``k`` particles drawn uniformly without replacement.
- ``"importance"`` ([`Importance`][meanfield.nn.particles.Importance]): the ``k`` particles with the largest mask importance
  $I_i = \sum_n |\partial \ell_n/\partial \xi_i|$ (Michel et al., 2019, *Are sixteen heads really better than one?*).
- ``"farthest"`` ([`FarthestPoint`][meanfield.nn.particles.FarthestPoint]): greedy farthest-point sampling of the particles' features
  (their outputs on ``X``, or their flattened parameters), which keeps the most diverse particles.
- ``"medoids"`` ([`Medoids`][meanfield.nn.particles.Medoids]): an OT quantisation of the particle law: the ``k`` particles ``S``
  that (locally) minimise $\sum_i \min_{j\in S} \|\varphi_i - \varphi_j\|^2$, which is $M \cdot W_2^2$ between $\rho_M$ and the
  best law supported on ``S``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from torch import nn

from meanfield._checks import check_int

__all__ = [
    "ParticleLayer",
    "SubsampleStrategy",
    "Random",
    "Importance",
    "FarthestPoint",
    "Medoids",
    "SUBSAMPLE_STRATEGIES",
]

Loss = Callable[[torch.Tensor], torch.Tensor]
Layer = TypeVar("Layer", bound="ParticleLayer")


def check_float_dtype(dtype: torch.dtype | None) -> None:
    """Raise a ``TypeError`` unless ``dtype`` is ``None`` or a floating-point ``torch.dtype`` (for parameters)."""
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise TypeError(
            f"dtype must be a floating-point torch.dtype (e.g. torch.float32) or None, got {dtype!r}"
        )


def check_input_matches(name: str, X: torch.Tensor, weight: torch.Tensor) -> None:
    """Raise a ``TypeError`` unless ``X`` has the dtype (outside autocast, which casts both) and the device of the
    layer's ``weight``."""
    other_dtype = X.dtype != weight.dtype and not torch.is_autocast_enabled(X.device.type)
    if other_dtype or X.device != weight.device:
        raise TypeError(
            f"{name} must have the layer's dtype and device ({weight.dtype} on {weight.device}), "
            f"got {X.dtype} on {X.device}; convert it with {name}.to(...) or the layer with .to(...)"
        )


class ParticleLayer(nn.Module):
    r"""Base class of the layers whose parameters are M particles stacked along a leading axis.

    A subclass lists the names of its stacked parameters in ``particle_parameter_names`` (each of shape
    ``(M, …)``) and implements ``particle_outputs(X)``, the outputs $\varphi_{\theta_i}(X)$ of every particle with
    the particle axis at dimension 1; its ``forward`` must equal ``particle_outputs(X).mean(1)``.
    """

    particle_parameter_names: tuple[str, ...] = ()

    @property
    def n_particles(self) -> int:
        """The number of particles M (the leading axis of every stacked parameter)."""
        return getattr(self, self.particle_parameter_names[0]).shape[0]

    def particle_outputs(self, X: torch.Tensor) -> torch.Tensor:
        """The output of every particle, particle axis at dimension 1 (subclasses implement it)."""
        raise NotImplementedError

    def prune(self: Layer, indices: Sequence[int] | torch.Tensor) -> Layer:
        r"""Return a new layer made of the particles ``indices`` (this layer is left unchanged).

        The new layer computes $1/|S| \sum_{i\in S} \varphi_{\theta_i}(X)$. Its parameters are fresh copies (no
        gradient), on the same device and dtype; everything else (e.g. projection bounds) is copied.

        Args:
            indices: particle indices in ``[0, M)``, a sequence of ints or a 1-D integer tensor, or a
                boolean mask of shape ``(M,)``. A repeated index duplicates that particle.

        Returns:
            A layer of the same class with ``n_particles == len(indices)``.

        Raises:
            TypeError: ``indices`` is not integer or boolean.
            ValueError: ``indices`` is empty, not 1-D, out of range, or a mask of the wrong length.
        """
        index = self._check_indices(indices)
        new = copy.deepcopy(self)
        for name in self.particle_parameter_names:
            old = getattr(self, name)
            setattr(new, name, nn.Parameter(old.detach()[index].clone(), requires_grad=old.requires_grad))
        return new

    def subsample(
        self: Layer,
        k: int,
        strategy: str | SubsampleStrategy = "random",
        *,
        X: torch.Tensor | None = None,
        loss: Loss | None = None,
        generator: torch.Generator | None = None,
    ) -> Layer:
        r"""Return a new layer of ``k`` of these particles, chosen by ``strategy``.

        Args:
            k: how many particles to keep, $1 \le k \le M$.
            strategy: a name in `SUBSAMPLE_STRATEGIES` (``"random"``, ``"importance"``,
                ``"farthest"``, ``"medoids"``) or a [`SubsampleStrategy`][meanfield.nn.particles.SubsampleStrategy] instance.
            X: layer inputs; needed by ``"importance"``, used as features by ``"farthest"`` and
                ``"medoids"`` (without it those use the flattened particle parameters).
            loss: for ``"importance"``: the loss as a function of the layer output ``Y = forward(X)``.
            generator: for ``"random"``: the random generator (``None``: torch's global one).

        Returns:
            ``self.prune(self.select(k, strategy, …))``.
        """
        return self.prune(self.select(k, strategy, X=X, loss=loss, generator=generator))

    def select(
        self,
        k: int,
        strategy: str | SubsampleStrategy = "random",
        *,
        X: torch.Tensor | None = None,
        loss: Loss | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """The sorted indices ``(k,)`` of the particles that [`subsample`][meanfield.nn.particles.ParticleLayer.subsample] keeps (same arguments)."""
        k = check_int("k", k)
        M = self.n_particles
        if k > M:
            raise ValueError(f"k must be ≤ n_particles = {M} (a subsample of the particles), got {k}")
        chosen = _strategy(strategy).select(self, k, X=X, loss=loss, generator=generator)  # (k,)
        return torch.sort(chosen).values

    def importance(self, X: torch.Tensor, loss: Loss) -> torch.Tensor:
        r"""Mask importance of each particle (Michel et al., 2019).

        Gate particle ``i`` by $\xi_i$: $Y_\xi = 1/M \sum_i \xi_i \varphi_i(X)$. With ``L = loss(Y)`` a sum (or mean)
        of per-example losses $\ell_n$ over the leading axis of ``X``, the importance is

        $$
        I_i = \sum_n |\partial \ell_n/\partial \xi_i| \text{ at } \xi = 1, \qquad \partial \ell_n/\partial \xi_i = 1/M \langle\partial L/\partial Y_n, \varphi_i(X)_n\rangle,
        $$

        proportional to Michel et al.'s $\mathbb{E}_x |\partial L(x)/\partial \xi_i|$. No parameter gradient is touched.

        Args:
            X: layer inputs, leading axis = examples.
            loss: the loss as a function of the layer output, returning a scalar.

        Returns:
            ``(M,)`` non-negative importances.
        """
        if not callable(loss):
            raise TypeError(f"loss must be a callable Y -> scalar tensor, got {type(loss).__name__}")
        with torch.no_grad():
            phi = self.particle_outputs(X)  # (N, M, …)
        Y = phi.mean(1).requires_grad_(True)  # (N, …)
        L = loss(Y)
        if not torch.is_tensor(L) or L.numel() != 1:
            raise ValueError(
                f"loss must return a scalar tensor, got {type(L).__name__} {getattr(L, 'shape', '')}"
            )
        (dL_dY,) = torch.autograd.grad(L, Y)  # (N, …)
        N, M = phi.shape[:2]
        per_example = (dL_dY.unsqueeze(1) * phi).reshape(N, M, -1).sum(2) / M  # (N, M)
        return per_example.abs().sum(0)  # (M,)

    def particle_features(self, X: torch.Tensor | None = None) -> torch.Tensor:
        """Features ``(M, D)`` that represent the particles: their outputs on ``X`` flattened, or (``X=None``)
        their flattened, concatenated parameters."""
        with torch.no_grad():
            if X is None:
                M = self.n_particles
                return torch.cat(
                    [getattr(self, n).detach().reshape(M, -1) for n in self.particle_parameter_names], 1
                )
            phi = self.particle_outputs(X)  # (N, M, …)
            return phi.transpose(0, 1).flatten(1)  # (M, N·…)

    def _check_indices(self, indices: Sequence[int] | torch.Tensor) -> torch.Tensor:
        M = self.n_particles
        if torch.is_tensor(indices):
            index = indices.detach()
        else:
            if isinstance(indices, (str, bytes)) or not isinstance(indices, Sequence):
                raise TypeError(
                    "indices must be a sequence of ints or a 1-D integer/boolean tensor, "
                    f"got {type(indices).__name__}"
                )
            if not all(isinstance(i, int) and not isinstance(i, bool) for i in indices):
                raise TypeError(f"indices must be ints, got {[type(i).__name__ for i in indices]}")
            index = torch.tensor(list(indices), dtype=torch.long)
        if index.dtype == torch.bool:
            if index.shape != (M,):
                raise ValueError(
                    f"a boolean mask of particles must have shape ({M},), got {tuple(index.shape)}"
                )
            index = index.nonzero().flatten()
        elif index.is_floating_point() or index.is_complex():
            raise TypeError(f"indices must be integers or a boolean mask, got dtype {index.dtype}")
        if index.dim() != 1:
            raise ValueError(f"indices must be 1-D, got shape {tuple(index.shape)}")
        if index.numel() == 0:
            raise ValueError("indices must select at least one particle, got none")
        if bool((index < 0).any()) or bool((index >= M).any()):
            raise ValueError(
                f"indices must lie in [0, {M}) (n_particles = {M}), got min {int(index.min())}, "
                f"max {int(index.max())}"
            )
        device = getattr(self, self.particle_parameter_names[0]).device
        return index.to(device=device, dtype=torch.long)


class SubsampleStrategy:
    """Chooses which ``k`` particles of a layer to keep: ``select(layer, k, …) -> (k,)`` distinct indices."""

    name: str = ""

    def select(
        self,
        layer: ParticleLayer,
        k: int,
        *,
        X: torch.Tensor | None = None,
        loss: Loss | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        raise NotImplementedError


class Random(SubsampleStrategy):
    """``k`` particles uniformly at random without replacement (``torch.randperm(M)[:k]``)."""

    name = "random"

    def select(self, layer, k, *, X=None, loss=None, generator=None):
        device = getattr(layer, layer.particle_parameter_names[0]).device
        on = generator.device if generator is not None else "cpu"
        perm = torch.randperm(layer.n_particles, generator=generator, device=on)  # (M,)
        return perm[:k].to(device)  # (k,)


class Importance(SubsampleStrategy):
    """The ``k`` particles with the largest mask importance $I_i$ ([`ParticleLayer.importance`][meanfield.nn.particles.ParticleLayer.importance])."""

    name = "importance"

    def select(self, layer, k, *, X=None, loss=None, generator=None):
        if X is None or loss is None:
            raise ValueError(
                "strategy 'importance' needs X (layer inputs) and loss (a callable: layer output -> scalar)"
            )
        scores = layer.importance(X, loss)  # (M,)
        return torch.topk(scores, k).indices  # (k,)


def _squared_distances(features: torch.Tensor) -> torch.Tensor:
    r"""$D_{ij} = \|\varphi_i - \varphi_j\|^2$ for features ``(M, D)``, via the Gram matrix (clamped at 0)."""
    gram = features @ features.T  # (M, M)
    sq = gram.diagonal()  # (M,)
    return (sq[:, None] + sq[None, :] - 2 * gram).clamp_min(0)  # (M, M)


def _farthest_points(D: torch.Tensor, k: int) -> torch.Tensor:
    """Greedy farthest-point indices from squared distances ``D (M, M)``, started at the medoid."""
    first = int(D.sum(1).argmin())
    chosen = [first]
    nearest = D[first].clone()  # (M,) distance to the chosen set
    for _ in range(k - 1):
        nearest[chosen] = -1.0  # never choose twice, even among duplicates
        nxt = int(nearest.argmax())
        chosen.append(nxt)
        nearest = torch.minimum(nearest, D[nxt])
    return torch.tensor(chosen, dtype=torch.long, device=D.device)


class FarthestPoint(SubsampleStrategy):
    r"""Greedy farthest-point sampling: start at the medoid, then repeatedly add the particle whose
    distance to the chosen set, $\min_{j\in S} \|\varphi_i - \varphi_j\|$, is largest. $\varphi_i$: the particle's outputs
    on ``X`` (or its parameters without ``X``). Duplicated particles are kept only once until every
    distinct particle is kept."""

    name = "farthest"

    def select(self, layer, k, *, X=None, loss=None, generator=None):
        return _farthest_points(_squared_distances(layer.particle_features(X)), k)


class Medoids(SubsampleStrategy):
    r"""OT quantisation of the particle law onto ``k`` of its own particles (k-medoids).

    Minimises $Q(S) = \sum_i \min_{j\in S} \|\varphi_i - \varphi_j\|^2 = M \cdot \min_w W_2^2(\rho_M, \sum_{j\in S} w_j \delta_{\varphi_j})$ over
    ``|S| = k`` by alternating Voronoi assignment and medoid update (``Q`` never increases), started from
    farthest-point sampling; a local minimum, at most ``max_iter`` rounds.

    The law that attains $Q(S)/M$ weights medoid $j$ by its cell's mass $|\mathrm{cell}_j|/M$; a layer averages
    its particles equally, so ``subsample(k, "medoids")`` keeps the *uniform* law on ``S``. With unequal cells
    the two differ, and the pruned layer can be far from the full one (16 neurons in clusters of 12, 3 and 1,
    k = 3: RMS output error 1.25 against 0.0033 for the cell-weighted law, whose output
    ``prune(S.repeat_interleave(cell sizes))`` reproduces with M particles). Prefer it where the clusters are
    of similar size, or where diversity, not the output, is what is kept.
    """

    name = "medoids"

    def __init__(self, max_iter: int = 100) -> None:
        self.max_iter = check_int("max_iter", max_iter)

    def select(self, layer, k, *, X=None, loss=None, generator=None):
        D = _squared_distances(layer.particle_features(X))  # (M, M)
        S = _farthest_points(D, k)  # (k,)
        for _ in range(self.max_iter):
            cell = D[:, S].argmin(1)  # (M,) index into S of each particle's nearest medoid
            cell[S] = torch.arange(k, device=D.device)  # a medoid stays in its own cell (ties, duplicates)
            new = S.clone()
            for j in range(k):
                members = (cell == j).nonzero().flatten()  # (n_j,)
                if members.numel() > 0:
                    new[j] = members[D[members][:, members].sum(0).argmin()]
            if torch.equal(new, S):
                break
            S = new
        return S

    @staticmethod
    def quantisation_error(features: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
        r"""$W_2^2(\rho_M, \text{ best law on } S) = 1/M \sum_i \min_{j\in S} \|\varphi_i - \varphi_j\|^2$ for features ``(M, D)``."""
        return _squared_distances(features)[:, S].min(1).values.mean()


SUBSAMPLE_STRATEGIES: dict[str, SubsampleStrategy] = {
    s.name: s for s in (Random(), Importance(), FarthestPoint(), Medoids())
}


def _strategy(strategy: str | SubsampleStrategy) -> SubsampleStrategy:
    if isinstance(strategy, SubsampleStrategy):
        return strategy
    if isinstance(strategy, str) and strategy in SUBSAMPLE_STRATEGIES:
        return SUBSAMPLE_STRATEGIES[strategy]
    raise ValueError(
        f"unknown subsample strategy {strategy!r}; allowed: {sorted(SUBSAMPLE_STRATEGIES)} "
        "or a SubsampleStrategy instance"
    )
