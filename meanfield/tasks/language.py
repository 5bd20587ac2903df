"""The ``lm`` task: next-token language modelling with :class:`~meanfield.nn.TransformerLM`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from meanfield import data as _data
from meanfield.config import ConfigError
from meanfield.nn.transformer import TransformerLM
from meanfield.seeds import derive_seed
from meanfield.tasks import Experiment

__all__ = ["LM", "LMData", "LMModel"]


# ----------------------------------------------------------------------------------------------------------
# language modelling
# ----------------------------------------------------------------------------------------------------------


@dataclass
class LMData:
    """``[data]`` of ``lm``.

    ``dataset`` ``"tiny_shakespeare"`` (characters, nanoGPT's 90/10 split) or ``"wikitext2"`` (words);
    ``train_split`` / ``eval_split`` name the splits (WikiText-2's train split is not on every machine);
    ``eval_blocks`` caps the number of evaluation blocks of ``block_size`` tokens (0: the whole split).
    """

    dataset: Literal["tiny_shakespeare", "wikitext2"] = "tiny_shakespeare"
    root: str = ""
    block_size: int = 64
    train_split: Literal["train", "valid", "test"] = "train"
    eval_split: Literal["train", "valid", "test"] = "valid"
    eval_blocks: int = 0


@dataclass
class LMModel:
    """``[model]`` of ``lm`` (:class:`~meanfield.nn.TransformerLM`)."""

    attention: Literal["mha", "particle"] = "mha"
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_head: int | None = None
    mlp_ratio: int = 4
    dt: float = 1.0


def _corpus(data: LMData) -> _data.TokenCorpus:
    root = data.root or None
    if data.dataset == "tiny_shakespeare":
        return _data.tiny_shakespeare(root)
    splits = tuple(dict.fromkeys((data.train_split, data.eval_split)))
    return _data.wikitext2(root, splits=splits)


class _LanguageModel:
    Data = LMData
    Model = LMModel

    def build(
        self,
        data: LMData,
        model: LMModel,
        *,
        batch_size: int,
        seed: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> Experiment:
        corpus = _corpus(data)
        train, held_out = getattr(corpus, data.train_split), getattr(corpus, data.eval_split)
        for split, tokens in ((data.train_split, train), (data.eval_split, held_out)):
            if tokens is None:
                raise ConfigError(f"data.{split!r} split: {data.dataset} has no {split} split here")
        g = torch.Generator().manual_seed(derive_seed(seed, "init"))
        net = TransformerLM(
            corpus.vocab_size,
            data.block_size,
            model.d_model,
            model.n_layers,
            model.n_heads,
            model.attention,
            d_head=model.d_head,
            mlp_ratio=model.mlp_ratio,
            dt=model.dt,
            generator=g,
            dtype=dtype,
        ).to(device)
        batches = _data.TokenBatches(train, data.block_size, batch_size, seed=derive_seed(seed, "batches"))

        def loss(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            x, y = batch
            return net.loss(x.to(device), y.to(device))

        def evaluate() -> dict[str, float]:
            total, count = 0.0, 0
            for i, (x, y) in enumerate(_data.iter_blocks(held_out, data.block_size, batch_size)):
                if data.eval_blocks and i * batch_size >= data.eval_blocks:
                    break
                total += float(net.loss(x.to(device), y.to(device))) * y.numel()
                count += y.numel()
            val = total / count
            return {"val_loss": val, "val_ppl": math.exp(min(val, 700.0))}

        return Experiment(
            model=net,
            batches=batches,
            next_batch=batches.next_batch,
            loss=loss,
            evaluate=evaluate,
            unit="tokens",
            units_per_step=batch_size * data.block_size,
            description=(
                f"{corpus.description}; TransformerLM({model.attention}, d={model.d_model}, "
                f"L={model.n_layers}, heads/particles={model.n_heads}, block={data.block_size})"
            ),
        )


LM = _LanguageModel()
"""The ``lm`` task."""
