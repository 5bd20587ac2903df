r"""Mean-field attention: M attention heads as M particles, averaged.

Particle ``i`` is one head $\theta_i = (W_Q^i, W_K^i, W_V^i, W_O^i)$ with $W_Q^i, W_K^i, W_V^i \in \mathbb{R}^{d\times h}$ and
$W_O^i \in \mathbb{R}^{h\times d}$ (``d = d_model``, ``h = d_head``). For tokens $X \in \mathbb{R}^{T\times d}$ a head computes

$$
v_\theta(X) = \operatorname{softmax}(X W_Q (X W_K)^T / \sqrt{h} + \mathrm{mask}) X W_V W_O \in \mathbb{R}^{T\times d},
$$

and the layer is the average over the empirical law of the heads, $Y = 1/M \sum_i v_{\theta_i}(X)$.
With ``h = d/M`` this is ``nn.MultiheadAttention`` (no biases) with its output projection scaled by 1/M;
with ``h`` fixed and M growing it is the mean-field limit $Y = \int v_\theta(X) d\rho(\theta)$.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from meanfield._checks import check_int
from meanfield.nn.particles import ParticleLayer, check_float_dtype, check_input_matches

__all__ = ["ParticleAttention", "CausalParticleAttention"]


class ParticleAttention(ParticleLayer):
    r"""Self-attention whose M heads are particles: $Y = 1/M \sum_i v_{\theta_i}(X)$.

    $v_\theta(X) = \operatorname{softmax}(X W_Q (X W_K)^T / \sqrt{h}) X W_V W_O$ (see the module docstring). The parameters are
    stacked over the particle axis in two tensors:

    - $W_{\mathrm{QKV}}$ of shape ``(M, 3, h, d)``: $W_{\mathrm{QKV}}[i] = (W_Q^{i\top}, W_K^{i\top}, W_V^{i\top})$, particle ``i``'s query, key
      and value maps in ``nn.Linear``'s ``(out, in)`` layout, so that ``W_QKV.view(3·M·h, d)`` is the fused
      in-projection of multi-head attention with no copy (state dicts with the earlier separate
      $W_Q, W_K, W_V$ still load);
    - $W_O$ of shape ``(M, h, d)``, so that ``W_O.view(M·h, d)`` is the out-projection.

    $W_Q$, $W_K$, $W_V$ are views ``(M, d, h)`` of $W_{\mathrm{QKV}}$ (reading or writing them in place reads or
    writes $W_{\mathrm{QKV}}$; their gradients are read from $W_{\mathrm{QKV}}.\mathrm{grad}$, e.g. $W_{\mathrm{QKV}}.\mathrm{grad}[:, 0].mT$ for
    $W_Q$). All heads run in one batched ``scaled_dot_product_attention`` call (no loop over
    particles). At initialisation the entries of $W_{\mathrm{QKV}}$ are ``N(0, 1/d)`` and those of $W_O$ are
    ``N(0, 1/h)``, so each head's output is O(1) and the average of M independent heads is O(M^{-1/2}).

    Args:
        d_model: token width ``d``.
        n_particles: number of heads ``M``.
        d_head: head width ``h``; default ``d_model // n_particles`` (then ``d_model`` must be divisible
            by ``n_particles``).
        generator: random generator of the initialisation (``None``: torch's global one).
        device: device of the parameters.
        dtype: dtype of the parameters.

    Shapes:
        ``forward(X)``: ``(B, T, d) -> (B, T, d)``; ``particle_outputs(X)``: ``(B, M, T, d)``;
        ``attention_maps(X)``: ``(B, M, T, T)``.

    Example:
        >>> layer = ParticleAttention(d_model=64, n_particles=8)
        >>> layer(torch.randn(2, 10, 64)).shape
        torch.Size([2, 10, 64])
        >>> layer.W_Q.shape, layer.W_QKV.shape
        (torch.Size([8, 64, 8]), torch.Size([8, 3, 8, 64]))
        >>> layer.subsample(4).n_particles
        4
    """

    particle_parameter_names = ("W_QKV", "W_O")
    is_causal: bool = False

    def __init__(
        self,
        d_model: int,
        n_particles: int,
        d_head: int | None = None,
        *,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_float_dtype(dtype)
        d = check_int("d_model", d_model)
        M = check_int("n_particles", n_particles)
        if d_head is None:
            if d % M != 0:
                raise ValueError(
                    f"d_model = {d} is not divisible by n_particles = {M}, so d_head = d_model/n_particles "
                    "is not an integer; pass d_head explicitly"
                )
            d_head = d // M
        h = check_int("d_head", d_head)
        self.d_model = d
        self.d_head = h
        kw = {"generator": generator, "device": device, "dtype": dtype}
        self.W_QKV = nn.Parameter(torch.randn(M, 3, h, d, **kw) / math.sqrt(d))  # (M, 3, h, d)
        self.W_O = nn.Parameter(torch.randn(M, h, d, **kw) / math.sqrt(h))  # (M, h, d)

    @property
    def W_Q(self) -> torch.Tensor:
        r"""The query maps ``(M, d, h)``, a view of $W_{\mathrm{QKV}}$."""
        return self.W_QKV[:, 0].transpose(-1, -2)  # (M, d, h)

    @property
    def W_K(self) -> torch.Tensor:
        r"""The key maps ``(M, d, h)``, a view of $W_{\mathrm{QKV}}$."""
        return self.W_QKV[:, 1].transpose(-1, -2)  # (M, d, h)

    @property
    def W_V(self) -> torch.Tensor:
        r"""The value maps ``(M, d, h)``, a view of $W_{\mathrm{QKV}}$."""
        return self.W_QKV[:, 2].transpose(-1, -2)  # (M, d, h)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_particles={self.n_particles}, d_head={self.d_head}"

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        """Also load state dicts of the earlier layout, with separate $W_Q, W_K, W_V$ of shape ``(M, d, h)``."""
        old = [prefix + name for name in ("W_Q", "W_K", "W_V")]
        if prefix + "W_QKV" not in state_dict and all(key in state_dict for key in old):
            maps = [state_dict.pop(key).transpose(-1, -2) for key in old]  # 3 × (M, h, d)
            state_dict[prefix + "W_QKV"] = torch.stack(maps, dim=1)  # (M, 3, h, d)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _check_input(self, X: torch.Tensor) -> None:
        if not torch.is_tensor(X):
            raise TypeError(f"X must be a torch.Tensor of shape (B, T, d_model), got {type(X).__name__}")
        if X.dim() != 3 or X.shape[-1] != self.d_model:
            raise ValueError(f"X must have shape (B, T, d_model={self.d_model}), got {tuple(X.shape)}")
        check_input_matches("X", X, self.W_QKV)

    def _heads(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        r"""Queries, keys, values ``(B, M, T, h)`` from one fused matmul $X W_{\mathrm{QKV}}^\top$ (no weight copy).

        Split by ``unbind`` on the q/k/v axis of ``(B, T, M, 3, h)`` before the transposes, so that the
        backward pass stacks the three gradients straight into the $(B, T, M\cdot 3\cdot h)$ layout of the matmul
        (one copy, where splitting after a permute costs a stack and a re-layout).
        """
        self._check_input(X)
        B, T, d = X.shape
        M, h = self.n_particles, self.d_head
        qkv = F.linear(X, self.W_QKV.reshape(M * 3 * h, d)).view(B, T, M, 3, h)  # (B, T, M, 3, h)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(3))  # 3 × (B, M, T, h)
        return q, k, v

    def _mix(self, X: torch.Tensor) -> torch.Tensor:
        r"""The attention-weighted values of every head, $\operatorname{softmax}(Q K^T/\sqrt{h}) V$: ``(B, M, T, h)``."""
        q, k, v = self._heads(X)  # (B, M, T, h) each
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.is_causal)  # (B, M, T, h)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        r"""$Y = 1/M \sum_i v_{\theta_i}(X)$: ``(B, T, d) -> (B, T, d)``."""
        o = self._mix(X)  # (B, M, T, h)
        B, M, T, h = o.shape
        o = o.transpose(1, 2).reshape(B, T, M * h)  # (B, T, M·h)
        return o @ (self.W_O.reshape(M * h, self.d_model) / M)  # (B, T, d)

    def particle_outputs(self, X: torch.Tensor) -> torch.Tensor:
        r"""Every head's output $v_{\theta_i}(X)$, not averaged: ``(B, T, d) -> (B, M, T, d)``."""
        o = self._mix(X)  # (B, M, T, h)
        return o @ self.W_O.unsqueeze(0)  # (B, M, T, d)

    def attention_maps(self, X: torch.Tensor) -> torch.Tensor:
        r"""Every head's attention matrix $A_i = \operatorname{softmax}(X W_Q^i (X W_K^i)^T / \sqrt{h} + \mathrm{mask})$: ``(B, M, T, T)``.

        Rows sum to 1; with a causal mask $A_i[s, t] = 0$ for ``t > s``.
        """
        q, k, _ = self._heads(X)  # (B, M, T, h) each
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d_head)  # (B, M, T, T)
        if self.is_causal:
            T = scores.shape[-1]
            future = torch.ones(T, T, dtype=torch.bool, device=scores.device).triu(1)  # (T, T)
            scores = scores.masked_fill(future, float("-inf"))
        return scores.softmax(-1)  # (B, M, T, T)


class CausalParticleAttention(ParticleAttention):
    r"""[`ParticleAttention`][meanfield.nn.attention.ParticleAttention] with a causal mask: token ``s`` attends only to tokens $t \le s$.

    $v_\theta(X) = \operatorname{softmax}(X W_Q (X W_K)^T / \sqrt{h} + C) X W_V W_O$ with $C[s, t] = -\infty$ for ``t > s``, else 0.
    """

    is_causal = True
