r"""Metrics of a Transformer language model's heads: similarity, output diversity, gradient noise, robustness.

Heads of a multi-head block are particles too: [`as_particle_model`][meanfield.nn.head_metrics.as_particle_model] rewrites a multi-head
[`TransformerLM`][meanfield.nn.transformer.TransformerLM] as the particle model that computes the same function (head ``j`` of
width ``h = d/H`` is particle ``j`` with $W_O^j = H\cdot W_{\mathrm{out}}[:, jh:(j+1)h]^\top$), so every metric below is
computed the same way for the baseline and the particle models.

- [`head_similarity`][meanfield.nn.head_metrics.head_similarity]: the mean pairwise cosine of the heads' attention maps, on the rows that have
  attended to at least ``min_context`` tokens (row ``s`` of a causal map has ``s + 1`` non-zero entries, and
  the first rows are identical for every head: row 0 is $e_0$ for all of them).
- [`output_effective_rank`][meanfield.nn.head_metrics.output_effective_rank]: ``erank`` (Roy & Vetterli) of the heads' output covariance across tokens.
- [`StreamingGradientVariance`][meanfield.nn.head_metrics.StreamingGradientVariance]: $\sum_k \operatorname{Var}_t(g_k) / \sum_k \mathbb{E}_t[g_k^2]$ over the steps of a window, from
  running sums (two tensors the size of the parameters; no samples × parameters matrix).
- [`corrupt_tokens`][meanfield.nn.head_metrics.corrupt_tokens]: replace a fraction of the input tokens by uniformly random ones.
- [`token_mean_loss`][meanfield.nn.head_metrics.token_mean_loss]: the next-token loss over batches, weighted by tokens.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from typing import Any

import torch

from meanfield.metrics.diversity import (
    attention_similarity,
    effective_rank,
    mean_off_diagonal,
    output_covariance,
)
from meanfield.nn.attention import CausalParticleAttention
from meanfield.nn.transformer import CausalSelfAttention, TransformerLM, attention_inputs

__all__ = [
    "as_particle_model",
    "head_similarity",
    "output_effective_rank",
    "layer_diversity",
    "StreamingGradientVariance",
    "corrupt_tokens",
    "token_mean_loss",
    "loss_roughness",
]


@torch.no_grad()
def as_particle_model(model: TransformerLM) -> TransformerLM:
    r"""The particle-attention model equal to ``model`` (a copy; particle models are copied unchanged).

    A multi-head block $\mathrm{Concat}_j(o_j) W_{\mathrm{out}}^\top$ with ``H`` heads of width ``h = d/H`` equals
    $1/H \sum_j o_j W_O^j$ with $W_O^j = H \cdot W_{\mathrm{out}}^\top[jh:(j+1)h]$ ``(h, d)`` and particle ``j``'s query/key/value
    maps the rows ``jh:(j+1)h`` of $W_q$, $W_k$, $W_v$.
    """
    new = copy.deepcopy(model)
    for block in new.blocks:
        mha = block.attention
        if not isinstance(mha, CausalSelfAttention):
            continue
        d, H = mha.d_model, mha.n_heads
        h = d // H
        W = mha.qkv.weight  # (3d, d): rows q | k | v, head j at rows jh:(j+1)h of each
        layer = CausalParticleAttention(d, H, d_head=h, device=W.device, dtype=W.dtype)
        layer.W_QKV.copy_(W.view(3, H, h, d).transpose(0, 1))  # (H, 3, h, d)
        layer.W_O.copy_(H * mha.out.weight.T.reshape(H, h, d))  # (H, h, d)
        block.attention = layer
    new.attention_kind = "particle"
    return new


def head_similarity(maps: torch.Tensor, min_context: int) -> torch.Tensor:
    r"""Mean pairwise cosine of attention maps over the rows with at least ``min_context`` visible tokens.

    $S_{ij} = \langle A_i, A_j\rangle / (\|A_i\| \|A_j\|)$ with $A_i = \mathrm{maps}[:, i, s, :]$ for ``s ≥ min_context − 1``
    (flattened over the batch and those rows); returns $1/(M(M-1)) \sum_{i\ne j} S_{ij} \in [0, 1]$.

    Args:
        maps: ``(B, M, T, T)`` causal attention maps (rows sum to 1).
        min_context: the least number of visible tokens of a row that counts, ``1 ≤ min_context ≤ T``.

    Returns:
        0-d tensor.
    """
    T = maps.shape[-1]
    if not 1 <= min_context <= T:
        raise ValueError(f"min_context must lie in [1, T = {T}], got {min_context}")
    rows = maps[:, :, min_context - 1 :, :]  # (B, M, T − s0, T)
    return mean_off_diagonal(attention_similarity(rows))


def output_effective_rank(outputs: torch.Tensor) -> torch.Tensor:
    r"""``erank`` of the heads' output covariance $C_{ij} = \operatorname{Cov}_n(\varphi_i(n), \varphi_j(n))$ over tokens ``n``.

    Args:
        outputs: ``(N, M, d)``: the outputs $v_{\theta_i}$ of the M heads on N tokens.

    Returns:
        0-d tensor in ``[1, M]`` (1: all heads' outputs collinear; M: uncorrelated, equal variances), or 0
        when the outputs do not vary at all, NaN when they are not finite ([`effective_rank`][meanfield.metrics.diversity.effective_rank]).
    """
    return effective_rank(output_covariance(outputs.double()))


@torch.no_grad()
def layer_diversity(model: TransformerLM, idx: torch.Tensor, min_context: int) -> dict[str, float]:
    """Per-layer head similarity and output effective rank of ``model`` on tokens ``idx`` ``(B, T)``.

    Returns:
        ``{"head_sim_l{ℓ}": …, "erank_l{ℓ}": …, "head_sim": mean over layers, "erank": mean,
        "erank_frac": mean of erank/M}``; the output covariance is over the tokens of the rows with at
        least ``min_context`` visible tokens.
    """
    pm = as_particle_model(model)
    inputs = attention_inputs(pm, idx)  # L × (B, T, d)
    out: dict[str, float] = {}
    sims, ranks, fracs = [], [], []
    for ell, (block, X) in enumerate(zip(pm.blocks, inputs, strict=True)):
        layer = block.attention
        M = layer.n_particles
        if M < 2:
            continue
        sim = float(head_similarity(layer.attention_maps(X), min_context))  # maps (B, M, T, T)
        phi = layer.particle_outputs(X)[:, :, min_context - 1 :, :]  # (B, M, T', d)
        phi = phi.transpose(1, 2).reshape(-1, M, phi.shape[-1])  # (B·T', M, d)
        rank = float(output_effective_rank(phi))
        out[f"head_sim_l{ell}"], out[f"erank_l{ell}"] = sim, rank
        sims.append(sim), ranks.append(rank), fracs.append(rank / M)
    if sims:
        out["head_sim"] = sum(sims) / len(sims)
        out["erank"] = sum(ranks) / len(ranks)
        out["erank_frac"] = sum(fracs) / len(fracs)
    return out


class StreamingGradientVariance:
    r"""Relative minibatch-gradient variance over a window of steps, from running sums.

    With $g_t$ the gradient at step ``t`` of the window (``n`` steps) and coordinates ``k`` of the watched
    parameters, $m_k = 1/n \sum_t g_{t,k}$ and $s_k = 1/n \sum_t g_{t,k}^2$,

    $$
    \text{ var } = \sum_k (s_k - m_k^2) \cdot n/(n-1), \qquad \text{ rel } = \text{ var } / \sum_k s_k \qquad \in [0, n/(n-1)],
    $$

    the total (unbiased) variance of the gradient across steps, and its share of the mean squared gradient
    (scale-free, so comparable between parametrisations). Memory: two tensors per parameter.

    Args:
        groups: the parameters to watch by group name, ``{name: parameters}``; each group is reported
            separately (e.g. one group per layer's attention particles).
    """

    def __init__(self, groups: dict[str, Iterable[torch.nn.Parameter]]) -> None:
        self.groups = {k: list(v) for k, v in groups.items()}
        self.reset()

    def reset(self) -> None:
        """Start a new window."""
        self.n = 0
        self.sum: dict[str, list[torch.Tensor]] = {k: [] for k in self.groups}
        self.sq: dict[str, list[torch.Tensor]] = {k: [] for k in self.groups}

    @torch.no_grad()
    def update(self) -> None:
        """Add the current ``.grad`` of every watched parameter (a missing gradient counts as 0)."""
        for key, params in self.groups.items():
            grads = [
                (p.grad if p.grad is not None else torch.zeros_like(p)).detach().double().flatten()
                for p in params
            ]
            g = torch.cat(grads) if grads else torch.zeros(0, dtype=torch.float64)  # (P,)
            if self.n == 0:
                self.sum[key], self.sq[key] = [g.clone()], [g * g]
            else:
                self.sum[key][0] += g
                self.sq[key][0] += g * g
        self.n += 1

    def state_dict(self) -> dict[str, Any]:
        """The window's running sums (``{}`` for an empty window), for a checkpoint."""
        if self.n == 0:
            return {}
        return {
            "n": self.n,
            "sum": {k: v[0] for k, v in self.sum.items()},
            "sq": {k: v[0] for k, v in self.sq.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put back a window's sums saved by [`state_dict`][meanfield.nn.head_metrics.StreamingGradientVariance.state_dict]."""
        self.reset()
        if state:
            self.n = int(state["n"])
            self.sum = {k: [state["sum"][k].clone()] for k in self.groups}
            self.sq = {k: [state["sq"][k].clone()] for k in self.groups}

    def compute(self) -> dict[str, float]:
        """``{"grad_var_{group}": var/P, "grad_rel_var_{group}": rel}`` for the window (empty if ``n < 2``)."""
        out: dict[str, float] = {}
        n = self.n
        if n < 2:
            return out
        for key in self.groups:
            m, s = self.sum[key][0] / n, self.sq[key][0] / n  # (P,)
            var = float((s - m * m).clamp_min(0).sum()) * n / (n - 1)
            total = float(s.sum())
            out[f"grad_var_{key}"] = var / max(1, m.numel())
            out[f"grad_rel_var_{key}"] = var / total if total > 0 else math.nan
        return out


def corrupt_tokens(
    idx: torch.Tensor, fraction: float, vocab_size: int, generator: torch.Generator
) -> torch.Tensor:
    r"""A copy of ``idx`` with each token replaced, with probability ``fraction``, by a uniform random token.

    Args:
        idx: ``(B, T)`` int64 tokens.
        fraction: replacement probability in ``[0, 1]``.
        vocab_size: ``V``; replacements are uniform on $\{0, \dots, V-1\}$ (possibly the same token).
        generator: the random generator (CPU).

    Returns:
        ``(B, T)`` int64.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must lie in [0, 1], got {fraction}")
    mask = torch.rand(idx.shape, generator=generator) < fraction  # (B, T)
    random = torch.randint(0, vocab_size, idx.shape, generator=generator)  # (B, T)
    return torch.where(mask.to(idx.device), random.to(idx.device), idx)


@torch.no_grad()
def token_mean_loss(model: TransformerLM, batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> float:
    r"""The mean next-token loss over ``batches``, weighted by tokens: $\bar{L} = \sum_b n_b\cdot L_b / \sum_b n_b$.

    ``L_b = model.loss(x_b, y_b)`` is batch ``b``'s mean cross-entropy and ``n_b = y_b.numel()`` its number of
    target tokens, so $\bar{L}$ is the mean over every token, whatever the batch sizes (a last, shorter batch
    counts by its tokens, not as one batch).

    Args:
        model: anything with ``loss(x, y) -> scalar tensor`` (a [`TransformerLM`][meanfield.nn.transformer.TransformerLM]).
        batches: ``(x, y)`` pairs, ``x`` ``(B, T)`` int64 inputs and ``y`` ``(B, T)`` int64 targets, on the
            model's device.

    Returns:
        $\bar{L}$ in nats per token.

    Raises:
        ValueError: when ``batches`` holds no token.
    """
    total, count = 0.0, 0
    for x, y in batches:
        total += float(model.loss(x, y)) * y.numel()
        count += y.numel()
    if count == 0:
        raise ValueError("token_mean_loss needs at least one batch with a target token, got none")
    return total / count


def loss_roughness(losses: list[float]) -> float:
    r"""$1/(n-1) \sum_t |\ell_{t+1} - \ell_t|$ of per-step training losses (NaN for fewer than 2)."""
    if len(losses) < 2:
        return math.nan
    return sum(abs(b - a) for a, b in zip(losses, losses[1:], strict=False)) / (len(losses) - 1)
