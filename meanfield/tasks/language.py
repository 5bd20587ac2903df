"""The ``lm`` task: next-token language modelling with [`TransformerLM`][meanfield.nn.transformer.TransformerLM]."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch

from meanfield import data as _data
from meanfield.config import ConfigError
from meanfield.nn import head_metrics as _lm
from meanfield.nn.transformer import TransformerLM, drop_particles
from meanfield.seeds import derive_seed
from meanfield.tasks import Experiment

__all__ = ["LM", "LMData", "LMModel", "lm_splits"]


# ----------------------------------------------------------------------------------------------------------
# language modelling
# ----------------------------------------------------------------------------------------------------------


@dataclass
class LMData:
    """``[data]`` of ``lm``.

    ``dataset`` ``"tiny_shakespeare"`` (characters, nanoGPT's 90/10 split) or ``"wikitext2"`` (words);
    ``train_split`` / ``eval_split`` name the splits (WikiText-2's train split is not on every machine);
    ``eval_blocks`` caps the number of evaluation blocks of ``block_size`` tokens (0: the whole split).
    WikiText-2 here has only valid and test: train on ``valid``, evaluate on ``test`` (and say so).
    ``holdout > 0`` cuts the last ``holdout`` tokens off the training split, so that training never sees
    them, and ``eval_split = "holdout"`` evaluates on them: a validation split carved from the training
    text, for choosing a hyperparameter without looking at the evaluation split ([`lm_splits`][meanfield.tasks.language.lm_splits]).

    Extra evaluation (``probe_blocks > 0``), on the first ``probe_blocks`` evaluation blocks: the loss after
    dropping half the particles of every layer (``drop_strategies``; a multi-head baseline is rewritten as
    the equal particle model, its heads as particles), the loss with a fraction ``corrupt_fraction`` of the
    input tokens replaced at random, per-layer head similarity (rows with ≥ ``min_context`` visible
    tokens) and output effective rank. ``grad_stats``: streaming gradient variance and loss roughness per
    metrics line.
    """

    dataset: Literal["tiny_shakespeare", "wikitext2"] = "tiny_shakespeare"
    root: str = ""
    block_size: int = 64
    train_split: Literal["train", "valid", "test"] = "train"
    eval_split: Literal["train", "valid", "test", "holdout"] = "valid"
    holdout: int = 0
    eval_blocks: int = 0
    probe_blocks: int = 0
    corrupt_fraction: float = 0.1
    min_context: int = 16
    drop_strategies: tuple[str, ...] = ("random", "importance", "farthest")
    grad_stats: bool = False


@dataclass
class LMModel:
    """``[model]`` of ``lm`` ([`TransformerLM`][meanfield.nn.transformer.TransformerLM])."""

    attention: Literal["mha", "particle"] = "mha"
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_head: int | None = None
    mlp_ratio: int = 4
    dt: float = 1.0
    init: Literal["native", "matched", "coupled"] = "matched"


def _corpus(data: LMData) -> _data.TokenCorpus:
    root = data.root or None
    if data.dataset == "tiny_shakespeare":
        return _data.tiny_shakespeare(root)
    splits = tuple(dict.fromkeys((data.train_split, data.eval_split)))
    return _data.wikitext2(root, splits=tuple(s for s in splits if s != "holdout"))


def lm_splits(corpus: _data.TokenCorpus, data: LMData) -> tuple[torch.Tensor, torch.Tensor]:
    """The training tokens and the held-out tokens of ``data``: the named splits of ``corpus``, except that
    ``holdout = h > 0`` cuts the training split ``t`` (length ``n``) into ``t[: n − h]``, trained on, and
    ``t[n − h :]``, which is the held-out split when ``eval_split = "holdout"``.

    Raises:
        ConfigError: a split that ``corpus`` does not hold; ``eval_split = "holdout"`` without ``holdout``;
            a ``holdout`` that leaves less than one block of ``block_size + 1`` tokens on either side.
    """
    for split in (data.train_split, data.eval_split):
        if split != "holdout" and getattr(corpus, split) is None:
            raise ConfigError(f"data.{split!r} split: {data.dataset} has no {split} split here")
    train = getattr(corpus, data.train_split)
    if data.eval_split == "holdout" and data.holdout == 0:
        raise ConfigError(
            'data.eval_split = "holdout" evaluates on tokens held out of the training split: '
            "set data.holdout to how many (the last ones of the split)"
        )
    if data.holdout:
        least, most = data.block_size + 1, len(train) - data.block_size - 1
        if not least <= data.holdout <= most:
            raise ConfigError(
                f"data.holdout must leave a block of block_size + 1 = {least} tokens on either side of the cut "
                f"of the {len(train):,}-token {data.train_split} split: between {least} and {most}, "
                f"got {data.holdout}"
            )
        train, holdout = train[: -data.holdout], train[-data.holdout :]
        if data.eval_split == "holdout":
            return train, holdout
    return train, getattr(corpus, data.eval_split)


def _check_evaluation(data: LMData) -> None:
    """Raise ``ConfigError`` for evaluation options a run would only fail on at its first evaluation."""
    from meanfield.nn import SUBSAMPLE_STRATEGIES

    for name in ("eval_blocks", "probe_blocks"):
        if getattr(data, name) < 0:
            raise ConfigError(
                f"data.{name} must be ≥ 0 (0: {'the whole split' if name == 'eval_blocks' else 'no probes'}), got {getattr(data, name)}"
            )
    if not 0.0 <= data.corrupt_fraction <= 1.0:
        raise ConfigError(
            f"data.corrupt_fraction must be in [0, 1] (the share of input tokens replaced), got {data.corrupt_fraction}"
        )
    if data.min_context < 1:
        raise ConfigError(
            f"data.min_context must be ≥ 1 (visible tokens of a row the head similarity reads), got {data.min_context}"
        )
    unknown = [s for s in data.drop_strategies if s not in SUBSAMPLE_STRATEGIES]
    if unknown:
        raise ConfigError(f"data.drop_strategies: {unknown} unknown; allowed: {list(SUBSAMPLE_STRATEGIES)}")


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
        _check_evaluation(data)
        corpus = _corpus(data)
        train, held_out = lm_splits(corpus, data)
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
            init=model.init,
            generator=g,
            dtype=dtype,
        ).to(device)
        batches = _data.TokenBatches(train, data.block_size, batch_size, seed=derive_seed(seed, "batches"))

        window_losses: list[float] = []
        attention_params = [p for n, p in net.named_parameters() if ".attention." in n]
        other_params = [p for n, p in net.named_parameters() if ".attention." not in n]
        grad_var = _lm.StreamingGradientVariance(
            {"attn": attention_params, "all": attention_params + other_params}
        )

        def loss(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            x, y = batch
            value = net.loss(x.to(device), y.to(device))
            if data.grad_stats and net.training and torch.is_grad_enabled():
                window_losses.append(float(value.detach()))
            return value

        def mean_loss(model: TransformerLM, blocks: int, corrupt: float = 0.0) -> float:
            """The token-weighted held-out loss on the first ``blocks`` blocks (all for 0), a fraction
            ``corrupt`` of the input tokens replaced (the same draws at every evaluation)."""
            g_corrupt = torch.Generator().manual_seed(derive_seed(seed, "corrupt"))

            # exactly ``blocks`` blocks of ``block_size`` targets, whatever the batch size (a cap at a batch's end
            # rounded it up to a multiple of the batch size, so the loss changed with it)
            tokens = held_out[: blocks * data.block_size + 1] if blocks else held_out  # (n,)

            def held_out_batches():
                for x, y in _data.iter_blocks(tokens, data.block_size, batch_size):
                    if corrupt:
                        x = _lm.corrupt_tokens(x, corrupt, corpus.vocab_size, g_corrupt)
                    yield x.to(device), y.to(device)

            return _lm.token_mean_loss(model, held_out_batches())

        def evaluate() -> dict[str, float]:
            val = mean_loss(net, data.eval_blocks)
            out = {"val_loss": val, "val_ppl": math.exp(min(val, 700.0))}
            if corpus.level == "char":
                out["val_bpc"] = val / math.log(2)
            if data.probe_blocks:
                out.update(_probe(net))
            return out

        def _probe(model: TransformerLM) -> dict[str, float]:
            """Half-drop, corruption and diversity metrics on the first ``probe_blocks`` blocks."""
            out: dict[str, float] = {}
            base = mean_loss(model, data.probe_blocks)
            out["probe_loss"] = base
            corrupt = mean_loss(model, data.probe_blocks, data.corrupt_fraction)
            out["corrupt_loss"], out["corrupt_ppl"] = corrupt, math.exp(min(corrupt, 700.0))
            out["corrupt_gap"] = corrupt - base
            x, y = next(
                iter(_data.iter_blocks(held_out, data.block_size, min(batch_size, data.probe_blocks)))
            )
            x, y = x.to(device), y.to(device)
            pm = _lm.as_particle_model(model)
            for strategy in data.drop_strategies:
                g_drop = torch.Generator().manual_seed(derive_seed(seed, "drop"))
                half = drop_particles(pm, 0.5, strategy, idx=x, targets=y, generator=g_drop)
                dropped = mean_loss(half, data.probe_blocks)
                out[f"half_{strategy}_loss"] = dropped
                out[f"half_{strategy}_ppl"] = math.exp(min(dropped, 700.0))
                out[f"half_{strategy}_gap"] = dropped - base
            out.update(_lm.layer_diversity(model, x, min(data.min_context, x.shape[1])))
            return out

        def on_backward() -> None:
            grad_var.update()

        def window_metrics() -> dict[str, float]:
            out = grad_var.compute()
            out["loss_roughness"] = _lm.loss_roughness(window_losses)
            grad_var.reset()
            window_losses.clear()
            return out

        def window_state() -> dict[str, Any]:
            if grad_var.n == 0 and not window_losses:
                return {}
            return {"grad_var": grad_var.state_dict(), "losses": list(window_losses)}

        def load_window_state(state: dict[str, Any]) -> None:
            grad_var.load_state_dict(state.get("grad_var", {}))
            window_losses[:] = state.get("losses", [])

        return Experiment(
            model=net,
            batches=batches,
            next_batch=batches.next_batch,
            loss=loss,
            evaluate=evaluate,
            unit="tokens",
            units_per_step=batch_size * data.block_size,
            on_backward=on_backward if data.grad_stats else None,
            window_metrics=window_metrics if data.grad_stats else None,
            window_state=window_state if data.grad_stats else None,
            load_window_state=load_window_state if data.grad_stats else None,
            description=(
                f"{corpus.description}"
                + (f"; the last {data.holdout:,} training tokens held out" if data.holdout else "")
                + f"; TransformerLM({model.attention}, d={model.d_model}, "
                f"L={model.n_layers}, heads/particles={model.n_heads}, block={data.block_size})"
            ),
        )


LM = _LanguageModel()
"""The ``lm`` task."""
