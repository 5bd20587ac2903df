"""Mean-field two-layer network: neurons ``(a_i, w_i)`` as particles.

    f(x) = 1/M Σ_i a_i σ(w_i · x),   a_i ∈ R,  w_i ∈ R^{d_in}

with the optional projection ``Π`` of the particles onto the constraint set
``{|a_i| ≤ A} × {‖w_i‖ = 1}`` (clip and/or sphere), applied by :meth:`FeatureParticles.project_`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from meanfield._checks import check_int, check_positive
from meanfield.nn.particles import ParticleLayer

__all__ = ["FeatureParticles", "ACTIVATIONS"]

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "gelu": F.gelu,
    "erf": torch.erf,
    "identity": lambda z: z,
}


class FeatureParticles(ParticleLayer):
    """Two-layer mean-field network ``f(x) = 1/M Σ_i a_i σ(w_i · x)`` with stacked particles ``(a, w)``.

    The weights ``a`` have shape ``(M,)`` and ``w`` shape ``(M, d_in)`` (no bias: append a constant
    feature to ``x`` for one). At initialisation ``w_i ~ N(0, I/d_in)`` (or uniform on the unit sphere when
    ``sphere``) and ``a_i ~ N(0, 1)`` (clipped to ``[−A, A]``).

    Args:
        d_in: input width.
        n_particles: number of neurons ``M``.
        activation: ``σ``, a callable on tensors or a name in :data:`ACTIVATIONS`.
        A: clip bound of the projection ``|a_i| ≤ A`` (``None``: no clip).
        sphere: whether ``w_i`` lives on the unit sphere (the projection renormalises it).
        generator: random generator of the initialisation (``None``: torch's global one).
        device: device of the parameters.
        dtype: dtype of the parameters.

    Shapes:
        ``forward(X)``: ``(N, d_in) -> (N,)``; ``particle_outputs(X)``: ``(N, M)``, entry
        ``a_i σ(w_i · x_n)``.

    Example:
        >>> f = FeatureParticles(d_in=5, n_particles=100, activation="tanh", A=2.0, sphere=True)
        >>> f(torch.randn(7, 5)).shape
        torch.Size([7])
        >>> bool((f.w.norm(dim=1) - 1).abs().max() < 1e-6)
        True
    """

    particle_parameter_names = ("a", "w")

    def __init__(
        self,
        d_in: int,
        n_particles: int,
        activation: str | Callable[[torch.Tensor], torch.Tensor],
        A: float | None = None,
        sphere: bool = False,
        *,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.d_in = check_int("d_in", d_in)
        M = check_int("n_particles", n_particles)
        if isinstance(activation, str):
            if activation not in ACTIVATIONS:
                raise ValueError(
                    f"unknown activation {activation!r}; allowed: {sorted(ACTIVATIONS)} or a callable"
                )
            self.activation_name = activation
            activation = ACTIVATIONS[activation]
        elif callable(activation):
            self.activation_name = getattr(activation, "__name__", type(activation).__name__)
        else:
            raise TypeError(
                f"activation must be a callable or a name in {sorted(ACTIVATIONS)}, got {activation!r}"
            )
        self.activation = activation
        self.A = None if A is None else check_positive("A", A)
        if not isinstance(sphere, bool):
            raise TypeError(f"sphere must be a bool, got {type(sphere).__name__}")
        self.sphere = sphere
        kw = {"generator": generator, "device": device, "dtype": dtype}
        self.a = nn.Parameter(torch.randn(M, **kw))  # (M,)
        self.w = nn.Parameter(torch.randn(M, self.d_in, **kw) / math.sqrt(self.d_in))  # (M, d_in)
        self.project_()

    def extra_repr(self) -> str:
        return (
            f"d_in={self.d_in}, n_particles={self.n_particles}, activation={self.activation_name}, "
            f"A={self.A}, sphere={self.sphere}"
        )

    @torch.no_grad()
    def project_(self) -> FeatureParticles:
        """Apply ``Π`` in place: ``a_i ← clip(a_i, −A, A)``, and ``w_i ← w_i/‖w_i‖`` when ``sphere``.

        Returns:
            ``self``.
        """
        if self.A is not None:
            self.a.clamp_(-self.A, self.A)
        if self.sphere:
            self.w.div_(self.w.norm(dim=1, keepdim=True).clamp_min(torch.finfo(self.w.dtype).tiny))
        return self

    def _check_input(self, X: torch.Tensor) -> None:
        if not torch.is_tensor(X):
            raise TypeError(f"X must be a torch.Tensor of shape (N, d_in), got {type(X).__name__}")
        if X.dim() != 2 or X.shape[1] != self.d_in:
            raise ValueError(f"X must have shape (N, d_in={self.d_in}), got {tuple(X.shape)}")

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """``f(x_n) = 1/M Σ_i a_i σ(w_i · x_n)``: ``(N, d_in) -> (N,)``."""
        self._check_input(X)
        return self.activation(X @ self.w.T) @ self.a / self.n_particles  # (N,)

    def particle_outputs(self, X: torch.Tensor) -> torch.Tensor:
        """Every neuron's output ``a_i σ(w_i · x_n)``: ``(N, d_in) -> (N, M)``."""
        self._check_input(X)
        return self.activation(X @ self.w.T) * self.a  # (N, M)
