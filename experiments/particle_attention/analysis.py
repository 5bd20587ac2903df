"""Why the noise does (not) hurt: attention weights and attention's share of the loss, from final checkpoints.

    python experiments/particle_attention/analysis.py       # writes results/analysis.md
    python experiments/particle_attention/analysis.py --init-only   # only the initialisation table

For each run of the quick M = 8 β grid (and the MHA baseline) it rebuilds the model from the run folder's
``config.toml`` and its last checkpoint (``checkpoints/`` is not committed: rerunning the sweep recreates
it bit for bit) and measures, on the first 96 validation blocks:

- the RMS of every layer's ``W_QKV`` and ``W_O`` against what the noise alone would give, a random walk of
  ``T`` steps of ``sqrt(2β·lr)ξ``: RMS ``sqrt(2β·lr·T)``;
- the loss with all attention outputs set to zero (``Δt·Attn ≡ 0``): how much of the model's loss
  reduction goes through attention at all, the most the attention noise can cost;
- the loss with every attention layer replaced by uniform causal averaging of the values (the attention
  maps ignored): how much the learned *patterns* (queries and keys) matter.

Each cell is the mean over the arm's seeds and its 95 % t interval, ``m (lo – hi)`` (``mean_cell``).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import torch

from meanfield import data as _data
from meanfield.nn import head_metrics as _lm
from meanfield.runs import find_runs, load_model
from meanfield.studies.stats import mean_cell

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def _loss(model, held_out, block, blocks=96) -> float:
    """The token-weighted loss on the first ``blocks`` held-out blocks, 12 a batch."""
    batches = itertools.islice(_data.iter_blocks(held_out, block, 12), math.ceil(blocks / 12))
    return _lm.token_mean_loss(model, batches)


class _Zero(torch.nn.Module):
    def forward(self, X):
        return torch.zeros_like(X)


class _Uniform(torch.nn.Module):
    """Causal uniform averaging of the layer's own values: ``Y_s = 1/(s+1) Σ_{t≤s} v(X_t)`` through W_O."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, X):
        T = X.shape[1]
        mask = torch.ones(T, T).tril()
        A = mask / mask.sum(1, keepdim=True)  # (T, T)
        layer = self.layer
        if hasattr(layer, "W_QKV"):
            _, _, v = layer._heads(X)  # (B, M, T, h)
            o = A @ v  # (B, M, T, h)
            B, M, _, h = o.shape
            o = o.transpose(1, 2).reshape(B, T, M * h)
            return o @ (layer.W_O.reshape(M * h, layer.d_model) / M)
        d = X.shape[-1]
        v = layer.qkv(X)[..., 2 * d :]  # (B, T, d)
        return layer.out(A @ v)


@torch.no_grad()
def measure(run: Path) -> dict[str, float]:
    trained = load_model(run)
    model, cfg, data = trained.model, trained.config, trained.data
    corpus = _data.tiny_shakespeare(data.root or None)
    held = getattr(corpus, data.eval_split)
    out = {"loss": _loss(model, held, data.block_size)}
    blocks = list(model.blocks)
    originals = [b.attention for b in blocks]
    for b in blocks:
        b.attention = _Zero()
    out["no_attention"] = _loss(model, held, data.block_size) - out["loss"]
    for b, a in zip(blocks, originals, strict=True):
        b.attention = _Uniform(a)
    out["uniform_attention"] = _loss(model, held, data.block_size) - out["loss"]
    for b, a in zip(blocks, originals, strict=True):
        b.attention = a
    if hasattr(originals[0], "W_QKV"):
        out["rms_qkv"] = float(np.mean([float(a.W_QKV.square().mean().sqrt()) for a in originals]))
        out["rms_o"] = float(np.mean([float(a.W_O.square().mean().sqrt()) for a in originals]))
        beta = cfg.optim["beta"]
        beta = float(beta) if not isinstance(beta, dict) else math.nan
        out["noise_walk_rms"] = math.sqrt(2 * beta * cfg.optim["lr"] * cfg.train.steps)
    return out


@torch.no_grad()
def init_scale() -> str:
    """Std of the first block's attention output at initialisation, particle (native/matched) / baseline."""
    from meanfield.nn.transformer import TransformerLM, attention_inputs

    def sd(kind: str, init: str, d: int, L: int, seed: int) -> float:
        m = TransformerLM(65, 64, d, L, 8, kind, init=init, generator=torch.Generator().manual_seed(seed))
        idx = torch.randint(0, 65, (32, 64), generator=torch.Generator().manual_seed(9))  # (32, 64)
        return float(m.blocks[0].attention(attention_inputs(m, idx)[0]).std())

    rows = [
        "| model (M = 8, h = d/8) | native / baseline | matched / baseline |",
        "|---|---|---|",
    ]
    for d, L in ((64, 2), (128, 4)):
        base = sum(sd("mha", "native", d, L, s) for s in range(5))
        native = sum(sd("particle", "native", d, L, s) for s in range(5))
        matched = sum(sd("particle", "matched", d, L, s) for s in range(5))
        rows.append(f"| {L} × {d} | {native / base:.1f} | {matched / base:.3f} |")
    return "\n".join(rows)


def main(init_only: bool = False) -> None:
    if init_only:  # add the initialisation table to an existing results/analysis.md
        old = (RESULTS / "analysis.md").read_text().split("\n\nAttention output std")[0].rstrip("\n")
        text = old + (
            "\n\nAttention output std of the first block at initialisation, particle / baseline (32 random "
            "sequences of 64 tokens, 5 initialisations):\n\n" + init_scale()
        )
        (RESULTS / "analysis.md").write_text(text + "\n")
        print(text)
        return
    arms = [("MHA baseline", RESULTS / "quick_mha", "model.attention=mha")]
    for beta in ("0", "1e-05", "0.0001", "0.001", "0.01"):
        arms.append((f"M=8, β={beta}", RESULTS / "quick_m8_beta", f"optim.beta={beta}"))
    for beta in ("0.03", "0.1"):
        arms.append((f"M=8, β={beta}", RESULTS / "quick_m8_beta_hot", f"optim.beta={beta}"))
    rows = [
        "| arm | n | val loss (96 blocks) | Δ loss, attention removed | Δ loss, uniform attention maps "
        "| RMS W_QKV | RMS W_O | noise-only random walk RMS sqrt(2β·lr·T) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, folder, point in arms:
        runs = find_runs(folder, dict([point.split("=", 1)])) if folder.is_dir() else []
        found = [
            measure(r) for r in runs if (r / "checkpoints").is_dir() and any((r / "checkpoints").iterdir())
        ]
        if not found:
            continue

        def col(key: str, digits: int = 3, found=found) -> str:
            return mean_cell([f[key] for f in found if key in f], digits)

        rows.append(
            f"| {name} | {len(found)} | {col('loss')} | {col('no_attention')} | {col('uniform_attention')} | "
            f"{col('rms_qkv', 4)} | {col('rms_o', 4)} | {col('noise_walk_rms', 4)} |"
        )
    if len(rows) == 2:  # no arm had a checkpoint here: keep the committed table rather than empty it
        raise SystemExit(
            "analysis.py: no run of the quick sweeps has checkpoints on this machine (they are not committed); "
            "rerun the sweeps (report.py's commands) first. results/analysis.md is unchanged."
        )
    text = "<!-- generated by experiments/particle_attention/analysis.py; do not edit -->\n\n" + "\n".join(
        rows
    )
    text += (
        "\n\nAttention output std of the first block at initialisation, particle / baseline (32 random "
        "sequences of 64 tokens, 5 initialisations):\n\n" + init_scale()
    )
    (RESULTS / "analysis.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    import sys

    main(init_only="--init-only" in sys.argv)
