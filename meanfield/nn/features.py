r"""Mean-field two-layer network: neurons $(a_i, w_i)$ (optionally $(a_i, w_i, b_i)$) as particles.

$$
f(x) = 1/M \sum_i a_i \sigma(w_i \cdot x + b_i), \qquad a_i \in R (or \mathbb{R}^k), w_i \in \mathbb{R}^{d_{in}}, b_i \in R (or \mathrm{none})
$$

with the optional projection $\Pi$ of the particles onto the constraint set
$\{|a_i| \le A\} \times \{\|w_i\| = 1\}$ (clip and/or sphere), applied by [`FeatureParticles.project_`][meanfield.nn.features.FeatureParticles.project_].
With vector outputs $a_i \in \mathbb{R}^k$ the layer is the hidden layer and read-out of an MLP (``k`` classes) or the
expansion of a transformer MLP block (``k = d_model``, inputs ``(B, T, d_model)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from meanfield._checks import check_int, check_positive
from meanfield.nn.particles import ParticleLayer, check_float_dtype, check_input_matches

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
    r"""Two-layer mean-field network $f(x) = 1/M \sum_i a_i \sigma(w_i \cdot x + b_i)$ with stacked particles.

    The particles are ``a`` (shape ``(M,)``, or ``(M, k)`` with ``out_features=k``), ``w`` (shape
    $(M, d_{in})$) and, with ``bias=True``, ``b`` (shape ``(M,)``). At initialisation
    $w_i \sim N(0, I/d_{in})$ (or uniform on the unit sphere when ``sphere``), $a_i \sim N(0, I_k)$ (clipped to
    $[-A, A]$) and $b_i = 0$.

    Scalar outputs (``out_features=None``, the default) are the mean-field network of the teacher–student
    task; vector outputs $a_i \in \mathbb{R}^k$ make the layer an MLP hidden layer with its read-out
    ($f: \mathbb{R}^{d_{in}} \to \mathbb{R}^k$, e.g. ``k = 10`` class logits) or a transformer MLP expansion
    (``d_in = k = d_model``). ``out_features=1`` gives outputs ``(…, 1)`` (the scalar layer with a
    trailing axis).

    Args:
        d_in: input width.
        n_particles: number of neurons ``M``.
        activation: $\sigma$, a callable on tensors or a name in `ACTIVATIONS`.
        A: clip bound of the projection $|a_i| \le A$ (entrywise for vector $a_i$; ``None``: no clip).
        sphere: whether $w_i$ lives on the unit sphere (the projection renormalises it).
        out_features: ``k``, the width of $a_i$ (``None``: scalar $a_i$).
        bias: give every particle a bias $b_i$ (a particle parameter, not projected).
        generator: random generator of the initialisation (``None``: torch's global one).
        device: device of the parameters.
        dtype: dtype of the parameters.

    Shapes:
        ``forward(X)``: $(N, d_{in}) -> (N,)$ or $(\dots, d_{in}) -> (\dots, k)$ with ``out_features=k`` (any
        leading axes, e.g. ``(B, T, d_model)``); ``particle_outputs(X)``: ``(N, M)`` or ``(N, M, k)``, entry
        $a_i \sigma(w_i \cdot x_n + b_i)$; for inputs $(B, T, d_{in})$ the particle axis is inserted at dimension 1:
        ``(B, M, T, k)``.

    Example:
        >>> f = FeatureParticles(d_in=5, n_particles=100, activation="tanh", A=2.0, sphere=True)
        >>> f(torch.randn(7, 5)).shape
        torch.Size([7])
        >>> bool((f.w.norm(dim=1) - 1).abs().max() < 1e-6)
        True
        >>> FeatureParticles(5, 100, "relu", out_features=10, bias=True)(torch.randn(7, 5)).shape
        torch.Size([7, 10])
    """

    particle_parameter_names: tuple[str, ...] = ("a", "w")

    def __init__(
        self,
        d_in: int,
        n_particles: int,
        activation: str | Callable[[torch.Tensor], torch.Tensor],
        A: float | None = None,
        sphere: bool = False,
        *,
        out_features: int | None = None,
        bias: bool = False,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_float_dtype(dtype)
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
        if not isinstance(bias, bool):
            raise TypeError(f"bias must be a bool, got {type(bias).__name__}")
        self.sphere = sphere
        self.out_features = None if out_features is None else check_int("out_features", out_features)
        self.has_bias = bias
        kw = {"generator": generator, "device": device, "dtype": dtype}
        shape_a = (M,) if self.out_features is None else (M, self.out_features)
        self.a = nn.Parameter(torch.randn(*shape_a, **kw))  # (M,) or (M, k)
        self.w = nn.Parameter(torch.randn(M, self.d_in, **kw) / math.sqrt(self.d_in))  # (M, d_in)
        if bias:
            self.b = nn.Parameter(torch.zeros(M, device=device, dtype=dtype))  # (M,)
            self.particle_parameter_names = ("a", "w", "b")
        else:
            self.b = None
        self.project_()

    def extra_repr(self) -> str:
        return (
            f"d_in={self.d_in}, n_particles={self.n_particles}, activation={self.activation_name}, "
            f"A={self.A}, sphere={self.sphere}, out_features={self.out_features}, bias={self.has_bias}"
        )

    @torch.no_grad()
    def project_(self) -> FeatureParticles:
        r"""Apply $\Pi$ in place: $a_i \leftarrow \operatorname{clip}(a_i, -A, A)$, and $w_i \leftarrow w_i/\|w_i\|$ when ``sphere``.

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
        bad_rank = X.dim() != 2 if self.out_features is None else X.dim() < 1
        if bad_rank or X.shape[-1] != self.d_in:
            raise ValueError(
                f"X must have shape (N, d_in={self.d_in})"
                + ("" if self.out_features is None else f" or (…, d_in={self.d_in})")
                + f", got {tuple(X.shape)}"
            )
        check_input_matches("X", X, self.w)

    def hidden(self, X: torch.Tensor) -> torch.Tensor:
        r"""The features $\sigma(w_i \cdot x + b_i)$: $(\dots, d_{in}) -> (\dots, M)$."""
        z = X @ self.w.T  # (…, M)
        if self.b is not None:
            z = z + self.b
        return self.activation(z)  # (…, M)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        r"""$f(x) = 1/M \sum_i a_i \sigma(w_i \cdot x + b_i)$: $(N, d_{in}) -> (N,)$, or $(\dots, d_{in}) -> (\dots, k)$."""
        self._check_input(X)
        return self.hidden(X) @ self.a / self.n_particles  # (N,) or (…, k)

    def particle_outputs(self, X: torch.Tensor) -> torch.Tensor:
        r"""Every neuron's output $a_i \sigma(w_i \cdot x + b_i)$, particle axis at dimension 1.

        $(N, d_{in}) -> (N, M)$ for scalar $a_i$; $(N, d_{in}) -> (N, M, k)$ and
        $(B, T, d_{in}) -> (B, M, T, k)$ for $a_i \in \mathbb{R}^k$. A single input ``(d_in,)`` has no axis 0 to
        put before the particles and is refused (``forward`` takes it): pass ``X[None]``.
        """
        self._check_input(X)
        if X.dim() == 1:
            raise ValueError(
                f"particle_outputs needs a batch axis (the particle axis is dimension 1): X of shape (N, d_in), got "
                f"{tuple(X.shape)}; pass X[None] for one input"
            )
        h = self.hidden(X)  # (…, M)
        if self.out_features is None:
            return h * self.a  # (N, M)
        out = h.unsqueeze(-1) * self.a  # (…, M, k)
        return out.movedim(-2, 1)  # (N, M, k), (B, M, T, k)
