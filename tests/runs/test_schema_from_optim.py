"""A configuration gives the chain's β and step once, in ``[optim]``: a task's ``FROM_OPTIM`` fields of ``[model]``
are filled from there (``meanfield.runs.schema.model_options``) and refused in ``[model]`` with one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from meanfield import config as _config
from meanfield.cli import main
from meanfield.config import ConfigError
from meanfield.runs.loop import build_experiment
from meanfield.runs.schema import check_config, model_options
from meanfield.tasks import get_task

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "experiments" / "mean_field" / "config.toml"


def _resolved(*overrides: str) -> dict:
    return _config.resolve(_config.load_toml(CONFIG), "smoke", ["model.n_particles=64", *overrides])


def test_the_mean_field_task_reads_beta_and_the_step_from_optim():
    """The shipped config gives β = 0.5 and lr = 0.05 in [optim] only; the model gets them as beta and eta, and
    the evaluation's exact variance is β/((a + k)(1 − η(a + k)/2)) = 0.5/(2·0.95) of those values (a = k = 1).
    Negative control: another [optim] lr changes the model's eta and the exact variance with it."""
    cfg = check_config(_resolved())
    assert "beta" not in cfg.model and "eta" not in cfg.model
    model = model_options(get_task("mean_field"), cfg)
    assert (model["beta"], model["eta"]) == (0.5, 0.05)
    out = build_experiment(cfg, torch.device("cpu")).evaluate()
    assert out["variance_exact"] == pytest.approx(0.5 / (2 * (1 - 0.05)), rel=1e-15)
    other = check_config(_resolved("optim.lr=0.1"))
    assert model_options(get_task("mean_field"), other)["eta"] == 0.1
    assert build_experiment(other, torch.device("cpu")).evaluate()["variance_exact"] == pytest.approx(
        0.5 / (2 * (1 - 0.1)), rel=1e-15
    )


def test_a_beta_schedule_leaves_the_exact_variance_out():
    """A β schedule has no one value: the model's beta stays 0 and the evaluation reports no exact variance
    (the step, a number, is still passed)."""
    cfg = check_config(_resolved('optim.beta={kind = "cosine", start = 0.5, end = 0.1}'))
    model = model_options(get_task("mean_field"), cfg)
    assert "beta" not in model and model["eta"] == 0.05
    assert "variance_exact" not in build_experiment(cfg, torch.device("cpu")).evaluate()


@pytest.mark.parametrize(("key", "there"), [("beta", "optim.beta"), ("eta", "optim.lr")])
def test_model_beta_or_eta_in_a_config_is_refused_naming_the_one_place(key, there):
    """``[model] beta`` or ``eta`` beside [optim]'s: a ConfigError naming the [optim] key, at the check (before a
    folder is made). Negative control: the same config without it is accepted."""
    check_config(_resolved())
    with pytest.raises(ConfigError, match=rf"^model\.{key}: task 'mean_field' reads it from {there} "):
        check_config(_resolved(f"model.{key}=0.5"))


def test_meanfield_run_says_the_duplicate_in_one_line(tmp_path, capsys):
    """The command line: exit 2 (a configuration error), one line on stderr, no traceback, no run folder."""
    out = tmp_path / "run"
    code = main(
        ["run", str(CONFIG), "--preset", "smoke", "--set", "model.eta=0.05", "--out", str(out), "--quiet"]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "model.eta: task 'mean_field' reads it from optim.lr" in err
    assert not out.exists()
