r"""A pre-norm causal Transformer language model whose attention is multi-head or particle attention.

One block with residual step $\Delta t$ (the depth view of the attention seed: tokens are particles transported
through depth by $x \leftarrow x + \Delta t\cdot V(x)$):

$$
x \leftarrow x + \Delta t \cdot \mathrm{Attn}(\operatorname{LN}(x)), \qquad x \leftarrow x + \Delta t \cdot \mathrm{MLP}(\operatorname{LN}(x)),
$$

where ``Attn`` is ordinary causal multi-head attention ([`CausalSelfAttention`][meanfield.nn.transformer.CausalSelfAttention], the baseline) or
[`CausalParticleAttention`][meanfield.nn.attention.CausalParticleAttention] ($1/M \sum_i v_{\theta_i}$, the heads as particles). Token and
position embeddings are learned, the output head is tied to the token embedding (nanoGPT's GPT without
biases or dropout).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from meanfield._checks import check_int, check_positive
from meanfield.nn.attention import CausalParticleAttention
from meanfield.nn.particles import check_float_dtype, check_input_matches

__all__ = [
    "CausalSelfAttention",
    "TransformerLM",
    "ATTENTIONS",
    "INITS",
    "particle_layers",
    "drop_particles",
    "attention_inputs",
]

ATTENTIONS: tuple[str, ...] = ("mha", "particle")
"""The attention kinds of [`TransformerLM`][meanfield.nn.transformer.TransformerLM]."""

INITS: tuple[str, ...] = ("native", "matched", "coupled")
"""Initialisations of the particle heads of [`TransformerLM`][meanfield.nn.transformer.TransformerLM] (see its docstring)."""


class CausalSelfAttention(nn.Module):
    r"""Causal multi-head self-attention (no biases): $Y = \mathrm{Concat}_j \operatorname{softmax}(Q_j K_j^\top/\sqrt{h} + C) V_j \cdot W_{\mathrm{out}}$.

    Args:
        d_model: token width ``d``.
        n_heads: number of heads ``H`` (``d`` divisible by ``H``; head width ``h = d/H``).

    Shapes:
        ``forward(X)``: ``(B, T, d) -> (B, T, d)``.
    """

    def __init__(self, d_model: int, n_heads: int, *, device=None, dtype=None) -> None:
        super().__init__()
        check_float_dtype(dtype)
        self.d_model, self.n_heads = check_int("d_model", d_model), check_int("n_heads", n_heads)
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False, device=device, dtype=dtype)
        self.out = nn.Linear(d_model, d_model, bias=False, device=device, dtype=dtype)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        if not torch.is_tensor(X) or X.dim() != 3 or X.shape[-1] != self.d_model:
            got = tuple(X.shape) if torch.is_tensor(X) else type(X).__name__
            raise ValueError(f"X must be a tensor of shape (B, T, d_model={self.d_model}), got {got}")
        check_input_matches("X", X, self.qkv.weight)
        B, T, d = X.shape
        q, k, v = self.qkv(X).split(d, dim=-1)  # 3 × (B, T, d)
        shape = (B, T, self.n_heads, d // self.n_heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))  # (B, H, T, h)
        Y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, h)
        return self.out(Y.transpose(1, 2).reshape(B, T, d))  # (B, T, d)


class _Block(nn.Module):
    def __init__(self, attention: nn.Module, d_model: int, mlp_ratio: int, dt: float, device, dtype) -> None:
        super().__init__()
        self.dt = dt
        self.ln1 = nn.LayerNorm(d_model, bias=False, device=device, dtype=dtype)
        self.attention = attention
        self.ln2 = nn.LayerNorm(d_model, bias=False, device=device, dtype=dtype)
        hidden = mlp_ratio * d_model
        self.mlp = nn.Sequential(
            nn.Linear(d_model, hidden, bias=False, device=device, dtype=dtype),
            nn.GELU(),
            nn.Linear(hidden, d_model, bias=False, device=device, dtype=dtype),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.dt * self.attention(self.ln1(x))  # (B, T, d)
        return x + self.dt * self.mlp(self.ln2(x))  # (B, T, d)


class TransformerLM(nn.Module):
    r"""Pre-norm causal Transformer LM with multi-head (``"mha"``) or particle (``"particle"``) attention.

    Args:
        vocab_size: number of tokens ``V``.
        block_size: the longest context $T_{\max}$.
        d_model: token width ``d``.
        n_layers: number of blocks ``L``.
        n_heads: heads ``H`` of multi-head attention, or particles ``M`` of particle attention.
        attention: ``"mha"`` or ``"particle"`` ([`ATTENTIONS`][meanfield.nn.transformer.ATTENTIONS]).
        d_head: head width of particle attention (default ``d/M``: the same parameters as MHA).
        mlp_ratio: MLP hidden width ``mlp_ratio·d``.
        dt: the residual step $\Delta t$ (1 for the usual Transformer).
        init: initialisation of the particle heads ([`INITS`][meanfield.nn.transformer.INITS]): ``"native"`` keeps
            [`CausalParticleAttention`][meanfield.nn.attention.CausalParticleAttention]'s own ($W_{\mathrm{QKV}} \sim N(0, 1/d)$, $W_O \sim N(0, 1/h)$:
            each head O(1), the 1/M average O(M^{-1/2}), about 20× the GPT-2-initialised baseline block at
            d = 128, M = 8); ``"matched"`` matches the baseline block's output law at init:
            $W_{\mathrm{QKV}} \sim N(0, \sigma^2)$ and $W_O \sim N(0, \sigma_o^2 \cdot M d / h)$ with $\sigma = 0.02$,
            $\sigma_o = 0.02/\sqrt{2L}$, so that ``Var(1/M Σ_i o_i W_O^i) = h·Var(o)·Var(W_O)/M = d·Var(o)·σ_o²``,
            the variance of ``Concat(o) W_out`` in the baseline. For ``h = d/M`` the particle block is then
            *equal in law* to the baseline block (the particle layer is MHA with $W_{\mathrm{out}} = W_O/M$).
            ``"coupled"`` is the matched law drawn from the *same random numbers* as the MHA model with the
            same ``generator``: every weight is drawn in the MHA model's order, and where $M\cdot h = d$ a
            layer's heads are the baseline's draws rearranged, ``W_QKV[i, j] = W_qkv[j·d + i·h : j·d +
            (i+1)·h]`` and ``W_O[i] = M · W_outᵀ[i·h : (i+1)·h]``, so that at ``M = H`` the particle LM
            computes the very function of the ``H``-head LM at init (a coupling of the two initial laws:
            the embeddings and MLPs of every arm of width ``d/M`` are equal, whatever ``M``). Where
            $M\cdot h \ne d$ the heads are drawn in the baseline's place, so the later weights differ.
        generator: random generator of the initialisation (``None``: torch's global one).

    Linear and embedding weights start $N(0, 0.02^2)$ (the output projections of each block
    $N(0, 0.02^2/(2L))$, as GPT-2); the particle heads as ``init`` says.

    Shapes:
        ``forward(idx)``: ``(B, T)`` int64 ``-> (B, T, V)`` logits.
    """

    def __init__(
        self,
        vocab_size: int,
        block_size: int,
        d_model: int,
        n_layers: int,
        n_heads: int,
        attention: str = "mha",
        *,
        d_head: int | None = None,
        mlp_ratio: int = 4,
        dt: float = 1.0,
        init: str = "native",
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_float_dtype(dtype)
        if not isinstance(attention, str) or attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
        if not isinstance(init, str) or init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {init!r}")
        self.init = init
        self.vocab_size, self.block_size = (
            check_int("vocab_size", vocab_size),
            check_int("block_size", block_size),
        )
        d_model, n_layers = check_int("d_model", d_model), check_int("n_layers", n_layers)
        check_int("n_heads", n_heads)
        self.attention_kind, self.dt = attention, check_positive("dt", dt)
        kw = {"device": device, "dtype": dtype}
        self.token_embedding = nn.Embedding(vocab_size, d_model, **kw)
        self.position_embedding = nn.Embedding(block_size, d_model, **kw)
        blocks = []
        for _ in range(n_layers):
            if attention == "mha":
                layer: nn.Module = CausalSelfAttention(d_model, n_heads, **kw)
            else:  # the coupled init draws the heads in _init, in the baseline's order
                g_layer = torch.Generator() if init == "coupled" else generator
                layer = CausalParticleAttention(d_model, n_heads, d_head=d_head, generator=g_layer, **kw)
            blocks.append(_Block(layer, d_model, check_int("mlp_ratio", mlp_ratio), self.dt, **kw))
        self.blocks = nn.ModuleList(blocks)
        self.ln_f = nn.LayerNorm(d_model, bias=False, **kw)
        self._init(generator, n_layers)

    @torch.no_grad()
    def _init(self, generator: torch.Generator | None, n_layers: int) -> None:
        out_std = 0.02 / math.sqrt(2 * n_layers)
        coupled = self.init == "coupled"
        for name, p in self.named_parameters():
            if coupled and name.endswith(("W_QKV", "W_O")):
                self._init_coupled(name, p, out_std, generator)
                continue
            if name.endswith(("W_QKV", "W_O")) or p.dim() < 2:  # particle heads; LayerNorm weights stay 1
                continue
            std = out_std if name.endswith(("out.weight", "mlp.2.weight")) else 0.02
            p.normal_(0.0, std, generator=generator)
        if self.init == "matched":
            for layer in particle_layers(self):
                M, h, d = layer.n_particles, layer.d_head, layer.d_model
                layer.W_QKV.normal_(0.0, 0.02, generator=generator)  # (M, 3, h, d)
                layer.W_O.normal_(0.0, out_std * math.sqrt(M * d / h), generator=generator)  # (M, h, d)

    @torch.no_grad()
    def _init_coupled(
        self, name: str, p: torch.Tensor, out_std: float, generator: torch.Generator | None
    ) -> None:
        """Draw one particle head parameter where the MHA model draws its ``qkv`` or ``out`` weight."""
        M, h, d = p.shape[0], p.shape[-2], p.shape[-1]
        if M * h != d:  # the fixed-width family: the matched law, drawn in the baseline's place
            p.normal_(0.0, 0.02 if name.endswith("W_QKV") else out_std * math.sqrt(M * d / h), generator=generator)
        elif name.endswith("W_QKV"):
            W_qkv = torch.empty(3 * d, d, dtype=p.dtype, device=p.device).normal_(0.0, 0.02, generator=generator)
            p.copy_(W_qkv.view(3, M, h, d).transpose(0, 1))  # (3d, d) -> (M, 3, h, d)
        else:
            W_out = torch.empty(d, d, dtype=p.dtype, device=p.device).normal_(0.0, out_std, generator=generator)
            p.copy_(M * W_out.T.reshape(M, h, d))  # (d_out, M·h) -> (M, h, d)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        self._check_tokens("idx", idx)
        T = idx.shape[1]
        if T > self.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size={self.block_size}")
        positions = torch.arange(T, device=idx.device)  # (T,)
        x = self.token_embedding(idx) + self.position_embedding(positions)  # (B, T, d)
        for block in self.blocks:
            x = block(x)  # (B, T, d)
        return self.ln_f(x) @ self.token_embedding.weight.T  # (B, T, V) tied output head

    def _check_tokens(self, name: str, tokens: torch.Tensor, like: torch.Tensor | None = None) -> None:
        """Raise a ``ValueError`` naming ``name`` unless it is an int64 ``(B, T)`` tensor (of ``like``'s shape) of
        ids in ``[0, vocab_size)`` (on an accelerator the range is asserted without a sync)."""
        if not torch.is_tensor(tokens) or tokens.dim() != 2 or tokens.dtype != torch.long:
            got = (
                f"{tokens.dtype} {tuple(tokens.shape)}" if torch.is_tensor(tokens) else type(tokens).__name__
            )
            raise ValueError(f"{name} must be an int64 tensor of shape (B, T), got {got}")
        if like is not None and tokens.shape != like.shape:
            raise ValueError(
                f"{name} must have the shape of idx {tuple(like.shape)}, got {tuple(tokens.shape)}"
            )
        message = f"{name} must hold token ids in [0, vocab_size={self.vocab_size})"
        if tokens.device.type != "cpu":
            torch._assert_async(((tokens >= 0) & (tokens < self.vocab_size)).all(), message)
        elif tokens.numel() and not 0 <= int(tokens.min()) <= int(tokens.max()) < self.vocab_size:
            raise ValueError(f"{message}, got min {int(tokens.min())}, max {int(tokens.max())}")

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        r"""Mean next-token cross-entropy $-1/(BT) \sum \log p(\mathrm{targets} | \mathrm{idx})$ (nats)."""
        self._check_tokens("targets", targets, like=idx)
        logits = self(idx)  # (B, T, V)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def particle_layers(model: nn.Module) -> list[CausalParticleAttention]:
    """The particle attention layers of ``model``, in model order (one per block of a particle LM)."""
    return [m for m in model.modules() if isinstance(m, CausalParticleAttention)]


@torch.no_grad()
def attention_inputs(model: TransformerLM, idx: torch.Tensor) -> list[torch.Tensor]:
    r"""The inputs $\operatorname{LN}_1(x^\ell)$ of every block's attention on the tokens ``idx`` ``(B, T)``: $L \times (B, T, d)$."""
    inputs: list[torch.Tensor] = []
    hooks = [
        block.attention.register_forward_pre_hook(lambda _m, args: inputs.append(args[0].detach()))
        for block in model.blocks
    ]
    try:
        model(idx)
    finally:
        for hook in hooks:
            hook.remove()
    return inputs


def drop_particles(
    model: TransformerLM,
    keep: float | int,
    strategy: str = "random",
    *,
    idx: torch.Tensor | None = None,
    targets: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> TransformerLM:
    r"""A copy of ``model`` keeping ``k`` particles in every particle attention layer (the model is unchanged).

    Each layer $\ell$ becomes $1/k \sum_{i\in S_\ell} v_{\theta_i}$ ([`subsample`][meanfield.nn.particles.ParticleLayer.subsample]), the
    same layer for the empirical law of the kept particles, so the copy is ready to evaluate and to train:
    its particle parameters are new tensors, so build the optimizer's groups again
    (``Langevin.param_groups_for(copy)``).

    Strategies (chosen per layer, all layers at once, on the *original* model's activations):

    - ``"random"``: uniformly without replacement (``generator``);
    - ``"importance"``: the largest mask importances $\sum_n |\partial \ell_n/\partial \xi_i|$ of the next-token loss on
      ``(idx, targets)``, the gate of layer ℓ's particles seen through the rest of the network;
    - ``"farthest"`` / ``"medoids"``: diversity-keeping, on the particles' outputs on ``idx``.

    Args:
        model: a particle [`TransformerLM`][meanfield.nn.transformer.TransformerLM].
        keep: the fraction of particles kept (a float in ``(0, 1]``, ``k = max(1, round(keep·M))``) or the
            number ``k`` (an int).
        strategy: ``"random"``, ``"importance"``, ``"farthest"`` or ``"medoids"``.
        idx: tokens ``(B, T)``; needed by every strategy except ``"random"``.
        targets: next tokens ``(B, T)``; needed by ``"importance"``.
        generator: for ``"random"``.

    Returns:
        A new [`TransformerLM`][meanfield.nn.transformer.TransformerLM] (deep copy) with fewer particles per layer.

    Raises:
        ValueError: for a model without particle layers, a bad ``keep`` or a missing ``idx``/``targets``.
    """
    import copy

    if not particle_layers(model):
        raise ValueError("drop_particles needs a model with particle attention (attention='particle')")
    if isinstance(keep, bool) or not isinstance(keep, (int, float)):
        raise TypeError(f"keep must be a fraction (float) or a count (int), got {type(keep).__name__}")
    if isinstance(keep, float) and not 0.0 < keep <= 1.0:
        raise ValueError(f"keep as a fraction must lie in (0, 1], got {keep}")
    if strategy != "random" and idx is None:
        raise ValueError(f"strategy {strategy!r} needs idx (tokens on which to judge the particles)")
    if strategy == "importance" and targets is None:
        raise ValueError("strategy 'importance' needs targets (the next tokens of idx)")
    new = copy.deepcopy(model)
    inputs = attention_inputs(model, idx) if idx is not None else [None] * len(new.blocks)
    for ell, block in enumerate(new.blocks):
        layer = block.attention
        M = layer.n_particles
        k = keep if isinstance(keep, int) else max(1, round(keep * M))
        if not 1 <= k <= M:
            raise ValueError(f"keep = {keep} gives k = {k} particles, outside [1, {M}]")
        loss = None
        if strategy == "importance":
            loss = _downstream_loss(model, ell, idx, targets)
        with torch.enable_grad():
            block.attention = layer.subsample(k, strategy, X=inputs[ell], loss=loss, generator=generator)
    return new


def _downstream_loss(model: TransformerLM, ell: int, idx: torch.Tensor, targets: torch.Tensor):
    r"""$Y \mapsto$ the next-token loss of ``model`` when block ``ell``'s attention output is ``Y`` ``(B, T, d)``."""

    def loss(Y: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        x = model.token_embedding(idx) + model.position_embedding(torch.arange(T, device=idx.device))
        for i, block in enumerate(model.blocks):
            if i == ell:
                x = x + block.dt * Y  # (B, T, d)
                x = x + block.dt * block.mlp(block.ln2(x))
            else:
                x = block(x)  # (B, T, d)
        logits = model.ln_f(x) @ model.token_embedding.weight.T  # (B, T, V)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum")

    return loss
