r"""Tasks: what ``meanfield run`` trains. A task turns the ``[data]`` and ``[model]`` tables into an experiment.

A task has two dataclass schemas (``Data`` and ``Model``, checked strictly by [`meanfield.config.from_dict`][meanfield.config.from_dict])
and a ``build`` function returning an [`Experiment`][meanfield.tasks.Experiment]: the model, the batch sampler (with
``state_dict``/``load_state_dict``, so a resumed run sees the same data order) and its ``next_batch``, the
loss of a batch, an evaluation, and the unit of throughput. Built in:

- ``teacher_student``: regression of a single- or multi-index teacher $y = \sum_k c_k g(w^*_k\cdot x)$ on
  Gaussian inputs by the mean-field network $f(x) = 1/M \sum_i a_i \sigma(w_i\cdot x)$
  ([`FeatureParticles`][meanfield.nn.features.FeatureParticles]); evaluation: test MSE and teacher alignment.
- ``image_classification``: Fashion-MNIST or CIFAR-10 by an MLP whose hidden layer is
  [`FeatureParticles`][meanfield.nn.features.FeatureParticles] with vector outputs (or the same-width ordinary MLP); evaluation:
  test loss, error and accuracy.
- ``lm``: next-token language modelling (tiny-shakespeare characters or WikiText-2 words) with
  [`TransformerLM`][meanfield.nn.transformer.TransformerLM], multi-head or particle attention; evaluation: loss and perplexity.
- ``mean_field``: a McKean–Vlasov particle system (confinement, quadratic interaction) as a
  [`ParticleCloud`][meanfield.nn.cloud.ParticleCloud] whose Langevin steps are its Euler–Maruyama steps; evaluation:
  energy, variance (against the discretised chain's exact stationary variance), centre of mass.

A user task is named ``"package.module:attribute"`` in the config; the attribute is an object with ``Data``,
``Model`` and ``build`` like [`TEACHER_STUDENT`][meanfield.tasks.TEACHER_STUDENT].
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from meanfield.config import ConfigError

__all__ = [
    "Experiment",
    "Task",
    "TASKS",
    "get_task",
    "task_source",
    "TEACHER_STUDENT",
    "LM",
    "IMAGE_CLASSIFICATION",
    "SEQ_CLASSIFY",
    "MEAN_FIELD",
]


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
        on_backward: called after every ``loss.backward()``, before the optimizer step (the gradients are
            in ``.grad``): for streaming statistics such as gradient variance.
        higher_is_better: the evaluation metrics whose best value is the largest (accuracy, coverage, …);
            every other ``val_*``/``test_*`` metric is best when smallest (``summary.json``'s ``best``).
        window_metrics: called at every metrics line; its numbers join the line. State it keeps (e.g. the
            accumulators of ``on_backward``) must cover the steps since the last line and restart there, so
            that a run resumed from a checkpoint taken on a logging step logs the same numbers.
        window_state: that state as ``torch.load(weights_only=True)`` can read it (tensors, numbers, lists,
            dicts), empty on a logging step; saved in a checkpoint where it is not empty, so that a run
            stopped between two lines (Ctrl-C) and resumed logs the same numbers too.
        load_window_state: puts a saved ``window_state`` back (on resume).
        nonfinite_metrics: the evaluation metrics that may be NaN or Inf (e.g. a statistic undefined while no
            particle is alive); any other non-finite evaluation metric stops the run as ``diverged``.
    """

    model: nn.Module
    batches: Any
    next_batch: Callable[[], Any]
    loss: Callable[[Any], torch.Tensor]
    evaluate: Callable[[], dict[str, float]]
    unit: str
    units_per_step: int
    description: str = ""
    higher_is_better: tuple[str, ...] = ()
    on_backward: Callable[[], None] | None = None
    window_metrics: Callable[[], dict[str, float]] | None = None
    nonfinite_metrics: tuple[str, ...] = ()
    window_state: Callable[[], dict[str, Any]] | None = None
    load_window_state: Callable[[dict[str, Any]], None] | None = None


class Task(Protocol):
    """A task: the ``[data]`` and ``[model]`` schemas and the function that builds the experiment.

    A task may also define ``FROM_OPTIM = {model field: [optim] key}``: fields of its ``Model`` that
    ``meanfield run`` fills from the run's ``[optim]`` (the chain's own temperature or step, given once, there),
    and that a configuration's ``[model]`` may not give (the ``mean_field`` task: ``beta`` and ``eta = lr``).
    """

    Data: type
    Model: type

    def build(
        self, data: Any, model: Any, *, batch_size: int, seed: int, device: torch.device, dtype: torch.dtype
    ) -> Experiment: ...


from meanfield.tasks.language import LM  # noqa: E402  (the tasks import Experiment from here)
from meanfield.tasks.mean_field import MEAN_FIELD  # noqa: E402
from meanfield.tasks.regression import IMAGE_CLASSIFICATION, TEACHER_STUDENT  # noqa: E402
from meanfield.tasks.sequence import SEQ_CLASSIFY  # noqa: E402

TASKS: dict[str, Task] = {
    "teacher_student": TEACHER_STUDENT,
    "lm": LM,
    "image_classification": IMAGE_CLASSIFICATION,
    "seq_classify": SEQ_CLASSIFY,
    "mean_field": MEAN_FIELD,
}
"""The built-in tasks by name."""


def get_task(name: str) -> Task:
    """The task named ``name``: a key of [`TASKS`][meanfield.tasks.TASKS] or ``"package.module:attribute"``.

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
    if not module or module.startswith(".") or not attribute:  # importlib: ValueError, TypeError
        raise ConfigError(
            f"task {name!r}: an import path is 'package.module:attribute', absolute, with both parts named"
        )
    try:
        task = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"task {name!r} cannot be imported: {error}") from None
    for needed in ("Data", "Model", "build"):
        if not hasattr(task, needed):
            raise ConfigError(f"task {name!r} has no {needed!r}: a task defines Data, Model and build")
    return task


def task_source(name: str) -> str | None:
    """Where the code of a ``"module:attribute"`` task was imported from (the module's file, or its name when it
    has no file); ``None`` for a built-in task. A configuration that names such a task runs that code."""
    if not isinstance(name, str) or name in TASKS or ":" not in name:
        return None
    get_task(name)  # a name that does not resolve is one ConfigError line, here as there
    module = importlib.import_module(name.partition(":")[0])
    return getattr(module, "__file__", None) or module.__name__
