r"""The ``seq_classify`` task: the attention seed's toy, synthetic sequence classification with particle heads.

Data (generated from the seed): sequences of ``T`` tokens drawn uniformly from ``V`` symbols; the label says
whether the first token (the *query*) occurs again among the other $T - 1$ positions. Each class has half
of the sequences: for label 1 the query is copied to ``n_copies`` random later positions, for label 0 every
later position is redrawn from the $V - 1$ other symbols. Solving it needs content-based attention from
position 0 to the matching tokens.

Model: learned token and position embeddings $x \in \mathbb{R}^{T\times d}$, one residual particle-attention block
$x \leftarrow x + \Delta t \cdot 1/M \sum_i v_{\theta_i}(\operatorname{LN} x)$ ([`ParticleAttention`][meanfield.nn.attention.ParticleAttention], M heads of width ``d/M``,
not causal), then $\text{ logits } = W \cdot \operatorname{LN}(x_0)$ read at the query position (2 classes).

Evaluation: loss and accuracy on a held-out set, accuracy and loss after keeping half of the particles
(``random`` with a fixed generator, ``importance``, ``farthest``), and the mean pairwise cosine of the
heads' attention maps ([`meanfield.metrics.diversity.attention_similarity`][meanfield.metrics.diversity.attention_similarity]).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from meanfield.data import Batches
from meanfield.metrics.diversity import attention_similarity, mean_off_diagonal
from meanfield.nn.attention import ParticleAttention
from meanfield.seeds import derive_seed
from meanfield.tasks import Experiment

__all__ = ["SEQ_CLASSIFY", "SeqData", "SeqModel", "ParticleClassifier", "make_sequences"]


@dataclass
class SeqData:
    """``[data]`` of ``seq_classify``: ``T`` tokens over ``V`` symbols, ``n_train``/``n_test`` sequences."""

    seq_len: int = 16
    vocab: int = 16
    n_copies: int = 1
    n_train: int = 4096
    n_test: int = 512


@dataclass
class SeqModel:
    r"""``[model]`` of ``seq_classify``: width ``d_model``, ``n_particles`` heads of width ``d/M``, $\Delta t$."""

    d_model: int = 32
    n_particles: int = 8
    dt: float = 1.0


def make_sequences(n: int, data: SeqData, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` sequences ``(n, T)`` int64 and labels ``(n,)`` int64 (half 1: the query occurs again)."""
    T, V = data.seq_len, data.vocab
    query = torch.randint(0, V, (n,), generator=generator)  # (n,)
    other = torch.randint(0, V - 1, (n, T - 1), generator=generator)  # (n, T−1)
    other = other + (other >= query[:, None]).long()  # (n, T−1) uniform on the symbols ≠ query
    label = (torch.arange(n) % 2).long()  # (n,)
    label = label[torch.randperm(n, generator=generator)]
    keys = torch.rand(n, T - 1, generator=generator)  # (n, T−1)
    copies = keys.argsort(1)[:, : data.n_copies]  # (n, n_copies) positions of the copies
    put = torch.zeros(n, T - 1, dtype=torch.bool).scatter_(1, copies, True) & label[:, None].bool()
    other = torch.where(put, query[:, None].expand(-1, T - 1), other)  # (n, T−1)
    return torch.cat([query[:, None], other], 1), label


class ParticleClassifier(nn.Module):
    r"""Embeddings → $x + \Delta t\cdot\mathrm{ParticleAttention}(\operatorname{LN} x)$ → ``Linear(LN x_0)``: ``(B, T)`` int64 → ``(B, 2)``."""

    def __init__(self, data: SeqData, model: SeqModel, generator: torch.Generator) -> None:
        super().__init__()
        d = model.d_model
        self.dt = model.dt
        self.token = nn.Embedding(data.vocab, d)
        self.position = nn.Embedding(data.seq_len, d)
        self.ln = nn.LayerNorm(d)
        self.attention = ParticleAttention(d, model.n_particles, generator=generator)
        self.ln_out = nn.LayerNorm(d)
        self.head = nn.Linear(d, 2)
        with torch.no_grad():
            for p in (self.token.weight, self.position.weight, self.head.weight):
                p.normal_(0.0, 0.5 if p is not self.head.weight else d**-0.5, generator=generator)
            self.head.bias.zero_()

    def stream(self, idx: torch.Tensor) -> torch.Tensor:
        """The residual stream before the block, ``x = E[idx] + P``: ``(B, T) -> (B, T, d)``."""
        T = idx.shape[1]
        return self.token(idx) + self.position(torch.arange(T, device=idx.device))  # (B, T, d)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.stream(idx)  # (B, T, d)
        x = x + self.dt * self.attention(self.ln(x))  # (B, T, d)
        return self.head(self.ln_out(x[:, 0]))  # (B, 2)


class _SeqClassify:
    Data = SeqData
    Model = SeqModel

    def build(
        self,
        data: SeqData,
        model: SeqModel,
        *,
        batch_size: int,
        seed: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> Experiment:
        g = torch.Generator().manual_seed(derive_seed(seed, "data"))
        x_train, y_train = make_sequences(data.n_train, data, g)
        x_test, y_test = make_sequences(data.n_test, data, g)
        net = ParticleClassifier(data, model, torch.Generator().manual_seed(derive_seed(seed, "init")))
        net = net.to(device=device, dtype=dtype)
        batches = Batches(data.n_train, batch_size, seed=derive_seed(seed, "batches"))
        x_test, y_test = x_test.to(device), y_test.to(device)

        def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
            i = batches.next_indices()  # (batch_size,)
            return x_train[i].to(device), y_train[i].to(device)

        def loss(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            x, y = batch
            return F.cross_entropy(net(x), y)

        def scores(m: nn.Module) -> tuple[float, float]:
            logits = m(x_test)  # (N, 2)
            return float(F.cross_entropy(logits, y_test)), float((logits.argmax(1) == y_test).double().mean())

        def evaluate() -> dict[str, float]:
            val_loss, acc = scores(net)
            out = {"val_loss": val_loss, "val_acc": acc}
            X = net.ln(net.stream(x_test))  # (N, T, d)
            for strategy in ("random", "importance", "farthest"):
                half = _with_layer(net, x_test, y_test, strategy, derive_seed(seed, "drop"))
                out[f"half_{strategy}_loss"], out[f"half_{strategy}_acc"] = scores(half)
            maps = net.attention.attention_maps(X)  # (N, M, T, T)
            out["attention_cosine"] = float(mean_off_diagonal(attention_similarity(maps)))
            return out

        return Experiment(
            model=net,
            batches=batches,
            next_batch=next_batch,
            loss=loss,
            evaluate=evaluate,
            unit="samples",
            units_per_step=batch_size,
            description=(
                f"query-repeat classification, T={data.seq_len}, V={data.vocab}; one particle-attention block, "
                f"d={model.d_model}, M={model.n_particles}"
            ),
        )


def _with_layer(
    net: ParticleClassifier, idx: torch.Tensor, y: torch.Tensor, strategy: str, seed: int
) -> nn.Module:
    """A copy of ``net`` whose attention keeps half of its particles, chosen by ``strategy`` on ``idx``."""
    import copy

    x = net.stream(idx)  # (N, T, d) residual stream before the block
    X = net.ln(x)  # (N, T, d) attention inputs

    def downstream(Y: torch.Tensor) -> torch.Tensor:  # the summed loss as a function of the attention output
        return F.cross_entropy(net.head(net.ln_out(x[:, 0] + net.dt * Y[:, 0])), y, reduction="sum")

    new = copy.deepcopy(net)
    g = torch.Generator().manual_seed(seed)
    k = max(1, net.attention.n_particles // 2)
    with torch.enable_grad():
        new.attention = net.attention.subsample(
            k, strategy, X=X, loss=downstream if strategy == "importance" else None, generator=g
        )
    return new


SEQ_CLASSIFY = _SeqClassify()
"""The ``seq_classify`` task (the attention seed's toy)."""
