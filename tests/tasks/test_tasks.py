"""Tests of :mod:`meanfield.tasks`."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from meanfield import tasks
from meanfield.config import ConfigError
from meanfield.runs import (
    run,
)


class _UserTask:
    Data = dict
    Model = dict

    @staticmethod
    def build(*args, **kwargs):
        return None


class _NoBuild:
    Data = dict
    Model = dict


@pytest.fixture
def user_module(monkeypatch):
    module = types.ModuleType("h_cli_user_tasks")
    module.task = _UserTask
    module.no_build = _NoBuild
    setattr(module, "odd:name", _UserTask)  # an attribute name with a colon: only the first ':' splits
    monkeypatch.setitem(sys.modules, "h_cli_user_tasks", module)
    return module


def test_get_task_finds_builtin_and_user_tasks(user_module):
    """A built-in name gives :data:`TASKS`'s object; ``"module:attribute"`` gives the attribute (split at the
    first colon: ``"h_cli_user_tasks:odd:name"`` is the attribute ``odd:name``). Negative control: the
    names of other tasks give other objects."""
    assert tasks.get_task("teacher_student") is tasks.TEACHER_STUDENT
    assert tasks.get_task("lm") is tasks.LM and tasks.get_task("lm") is not tasks.TEACHER_STUDENT
    assert tasks.get_task("h_cli_user_tasks:task") is _UserTask
    assert tasks.get_task("h_cli_user_tasks:odd:name") is _UserTask


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (3, "task must be a string, got 3"),
        (
            "nope",
            "unknown task 'nope'; the built-in tasks are ['image_classification', 'lm', 'mean_field', "
            "'seq_classify', 'teacher_student'], or 'module:attribute'",
        ),
        (
            "h_cli_user_tasks:missing",
            "task 'h_cli_user_tasks:missing' cannot be imported: module 'h_cli_user_tasks' has no attribute "
            "'missing'",
        ),
        (
            "h_cli_user_tasks:no_build",
            "task 'h_cli_user_tasks:no_build' has no 'build': a task defines Data, Model and build",
        ),
        (
            ":x",
            "task ':x': an import path is 'package.module:attribute', absolute, with both parts named",
        ),
        (
            ".relative:x",
            "task '.relative:x': an import path is 'package.module:attribute', absolute, with both parts named",
        ),
        (
            "h_cli_user_tasks:",
            "task 'h_cli_user_tasks:': an import path is 'package.module:attribute', absolute, with both parts "
            "named",
        ),
    ],
    ids=[
        "not-a-string",
        "unknown-name",
        "missing-attribute",
        "no-build",
        "no-module",
        "relative",
        "no-attribute",
    ],
)
def test_get_task_errors_say_what_is_wrong(user_module, name, message):
    """The exact :class:`ConfigError` of each bad task name. Negative control: ``h_cli_user_tasks:task``
    (a complete task) raises nothing."""
    with pytest.raises(ConfigError) as info:
        tasks.get_task(name)
    assert str(info.value) == message
    assert tasks.get_task("h_cli_user_tasks:task") is _UserTask


ROOT = Path(__file__).resolve().parents[2]


TEACHER = ROOT / "experiments" / "teacher_student" / "config.toml"


def test_best_is_the_largest_for_higher_is_better_metrics(tmp_path, monkeypatch):
    """``summary.json``'s best: the minimum of a loss, the maximum of a metric the task declares higher-better."""

    class Scored:
        Data = tasks.TEACHER_STUDENT.Data
        Model = tasks.TEACHER_STUDENT.Model

        def build(self, data, model, **kw):
            experiment = tasks.TEACHER_STUDENT.build(data, model, **kw)
            calls = [0]

            def evaluate():
                calls[0] += 1
                return {"test_loss": [3.0, 1.0, 2.0][calls[0] - 1], "accuracy": [0.2, 0.9, 0.5][calls[0] - 1]}

            experiment.evaluate = evaluate
            experiment.higher_is_better = ("accuracy",)
            return experiment

    monkeypatch.setitem(tasks.TASKS, "scored", Scored())
    overrides = [
        "task=scored",
        "train.steps=3",
        "train.eval_every=1",
        "train.log_every=1",
        "train.figures=false",
    ]
    result = run(TEACHER, tmp_path / "r", preset="smoke", overrides=overrides, quiet=True)
    assert result.summary["best"]["test_loss"] == {"value": 1.0, "step": 2}
    assert result.summary["best"]["accuracy"] == {"value": 0.9, "step": 2}
    env = json.loads((tmp_path / "r" / "environment.json").read_text())
    assert len(env["source_sha256"]) == 64
