"""Tasks: what ``meanfield run`` trains. A task turns the ``[data]`` and ``[model]`` tables into an experiment.

A task has two dataclass schemas (``Data`` and ``Model``, checked strictly by :func:`meanfield.config.from_dict`)
and a ``build`` function returning an :class:`Experiment`: the model, the training batches (an iterator
with ``state_dict``/``load_state_dict``, so a resumed run sees the same data order, and its ``next_batch``), the loss of a batch, an
evaluation, and the unit of throughput. Built in:

- ``teacher_student``: regression of a single- or multi-index teacher ``y = Σ_k c_k g(w*_k·x)`` on
  Gaussian inputs by the mean-field network ``f(x) = 1/M Σ_i a_i σ(w_i·x)``
  (:class:`~meanfield.nn.FeatureParticles`); evaluation: test MSE and teacher alignment.
- ``lm``: next-token language modelling (tiny-shakespeare characters or WikiText-2 words) with
  :class:`~meanfield.nn.TransformerLM`, multi-head or particle attention; evaluation: loss and perplexity.

A user task is named ``"package.module:attribute"`` in the config; the attribute is an object with ``Data``,
``Model`` and ``build`` like :data:`TEACHER_STUDENT`.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from meanfield import data as _data
from meanfield.config import ConfigError
from meanfield.nn import FeatureParticles
from meanfield.nn.transformer import TransformerLM
from meanfield.seeds import derive_seed

__all__ = ["Experiment", "Task", "TASKS", "get_task", "TEACHER_STUDENT", "LM"]


@dataclass
class Experiment:
    """What a task builds for a run.

    Attributes:
        model: the network (its particle layers declare ``n_particles``).
        batches: the batch sampler, with ``state_dict()``/``load_state_dict()`` (saved in checkpoints).
        next_batch: the next training batch of ``batches``.
        loss: the training loss of one batch, a scalar tensor.
        evaluate: held-out metrics of the model (called under ``torch.no_grad()``, model in eval mode).
        unit: what ``units_per_step`` counts (``"samples"`` or ``"tokens"``), for throughput.
        units_per_step: samples or tokens per optimizer step.
        description: what data and model were built.
    """

    model: nn.Module
    batches: Any
    next_batch: Callable[[], Any]
    loss: Callable[[Any], torch.Tensor]
    evaluate: Callable[[], dict[str, float]]
    unit: str
    units_per_step: int
    description: str = ""


class Task(Protocol):
    """A task: the ``[data]`` and ``[model]`` schemas and the function that builds the experiment."""

    Data: type
    Model: type

    def build(
        self, data: Any, model: Any, *, batch_size: int, seed: int, device: torch.device, dtype: torch.dtype
    ) -> Experiment: ...


# ----------------------------------------------------------------------------------------------------------
# teacher–student regression with feature particles
# ----------------------------------------------------------------------------------------------------------


@dataclass
class TeacherStudentData:
    """``[data]`` of ``teacher_student`` (see :func:`meanfield.data.teacher_student`)."""

    d: int = 16
    k: int = 1
    activation: str = "relu"
    directions: Literal["orthonormal", "random"] = "orthonormal"
    n_train: int = 4096
    n_test: int = 2048
    label_noise: float = 0.0
    seed: int | None = None  # None: derived from the run's seed (paired runs share data and initialisation)


@dataclass
class FeatureModel:
    """``[model]`` of ``teacher_student``: ``f(x) = 1/M Σ a_i σ(w_i·x)`` (:class:`FeatureParticles`)."""

    n_particles: int = 256
    activation: str = "relu"
    A: float | None = None
    sphere: bool = False


class _TeacherStudent:
    Data = TeacherStudentData
    Model = FeatureModel

    def build(
        self,
        data: TeacherStudentData,
        model: FeatureModel,
        *,
        batch_size: int,
        seed: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> Experiment:
        ts = _data.teacher_student(
            data.d,
            data.n_train,
            data.n_test,
            k=data.k,
            activation=data.activation,
            directions=data.directions,
            label_noise=data.label_noise,
            seed=derive_seed(seed, "data") if data.seed is None else data.seed,
            dtype=dtype,
        )
        x_train, y_train = ts.x_train.to(device), ts.y_train.to(device)  # (n, d), (n,)
        x_test, y_test = ts.x_test.to(device), ts.y_test.to(device)
        directions = ts.directions.to(device)  # (k, d)
        g = torch.Generator().manual_seed(derive_seed(seed, "init"))
        net = FeatureParticles(
            data.d,
            model.n_particles,
            model.activation,
            A=model.A,
            sphere=model.sphere,
            generator=g,
            dtype=dtype,
        ).to(device)
        batches = _data.Batches(data.n_train, batch_size, seed=derive_seed(seed, "batches"))

        def loss(index: torch.Tensor) -> torch.Tensor:
            index = index.to(device)
            return 0.5 * F.mse_loss(net(x_train[index]), y_train[index])  # ½ E (f − y)²

        def evaluate() -> dict[str, float]:
            test_mse = float(F.mse_loss(net(x_test), y_test))
            w = net.w / net.w.norm(dim=1, keepdim=True).clamp_min(1e-12)  # (M, d)
            cos = (w @ directions.T).abs()  # (M, k)
            return {
                "test_mse": test_mse,
                "test_mse_relative": test_mse / float(y_test.var()),
                "alignment_max": float(cos.max(0).values.mean()),  # mean over teachers of the best |cos|
            }

        return Experiment(
            model=net,
            batches=batches,
            next_batch=batches.next_indices,
            loss=loss,
            evaluate=evaluate,
            unit="samples",
            units_per_step=batch_size,
            description=f"{ts.description}; FeatureParticles(M={model.n_particles}, σ={model.activation})",
        )


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


TEACHER_STUDENT = _TeacherStudent()
"""The ``teacher_student`` task."""
LM = _LanguageModel()
"""The ``lm`` task."""

TASKS: dict[str, Task] = {"teacher_student": TEACHER_STUDENT, "lm": LM}
"""The built-in tasks by name."""


def get_task(name: str) -> Task:
    """The task named ``name``: a key of :data:`TASKS` or ``"package.module:attribute"``.

    Raises:
        ConfigError: for an unknown name or an import path that does not resolve to a task.
    """
    if not isinstance(name, str):
        raise ConfigError(f"task must be a string, got {name!r}")
    if name in TASKS:
        return TASKS[name]
    if ":" not in name:
        raise ConfigError(
            f"unknown task {name!r}; the built-in tasks are {sorted(TASKS)}, or 'module:attribute'"
        )
    module, _, attribute = name.partition(":")
    try:
        task = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"task {name!r} cannot be imported: {error}") from None
    for needed in ("Data", "Model", "build"):
        if not hasattr(task, needed):
            raise ConfigError(f"task {name!r} has no {needed!r}: a task defines Data, Model and build")
    return task
