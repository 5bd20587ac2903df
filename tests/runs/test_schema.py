"""Tests of :mod:`meanfield.runs.schema`."""

from __future__ import annotations

import pytest
import torch

from meanfield.config import ConfigError
from meanfield.drift.projections import Clip
from meanfield.drift.schedules import Constant, Cosine, Linear, Step
from meanfield.runs import loop
from meanfield.runs import schema as rconfig
from meanfield.runs.schema import RunConfig, TrainConfig, build_optimizer, check_config, load_config

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
import dataclasses
from pathlib import Path

from helpers.tiny_run import TEACHER, TINY  # noqa: E402  (tests/helpers/tiny_run.py)

from meanfield import config as _config
from meanfield.cli import main
from meanfield.optim import Langevin
from meanfield.runs.loop import build_experiment
from meanfield.runs.schema import (
    OPTIM_OPTIONS,
    model_options,
)
from meanfield.seeds import derive_seed
from meanfield.tasks import get_task


def _temps(optim: dict, steps: int = 5) -> None:
    rconfig._check_temperatures(
        RunConfig(task="teacher_student", optim=optim, train=TrainConfig(steps=steps))
    )


def test_train_config_names_the_first_bad_key_in_field_order():
    """Two bad keys: the counts are checked first (``steps`` before ``keep_checkpoints`` before the
    intervals)."""
    with pytest.raises(ValueError, match=r"^train\.steps must be ≥ 1, got 0$"):
        TrainConfig(steps=0, keep_checkpoints=0, eval_every=-1)
    with pytest.raises(ValueError, match=r"^train\.keep_checkpoints must be ≥ 1, got 0$"):
        TrainConfig(keep_checkpoints=0, eval_every=-1)
    with pytest.raises(ValueError, match=r"^train\.eval_every must be ≥ 0 \(0: only at the end\), got -1$"):
        TrainConfig(eval_every=-1, checkpoint_every=-2)


@pytest.mark.parametrize(
    "optim,message",
    [
        ({"beta": -1}, "optim.beta gives β = -1 at step 0"),
        ({"beta": float("nan")}, "optim.beta gives β = nan at step 0"),
        ({"beta": float("inf")}, "optim.beta gives β = inf at step 0"),
        ({"beta": True}, "optim.beta gives β = True at step 0"),
        ({"beta": 1.0, "others": {"beta": -0.5}}, "optim.others.beta gives β = -0.5 at step 0"),
        (
            {"beta": {"kind": "step", "values": [1.0, -2.0], "boundaries": [2.5]}},
            "optim.beta gives β = -2.0 at step 3",
        ),
        (
            {"beta": 0.0, "others": {"beta": {"kind": "linear", "start": 1.0, "end": -1.0}}},
            "optim.others.beta gives β = -0.19999999999999996 at step 3",
        ),
    ],
    ids=["negative", "nan", "inf", "bool", "others", "step_schedule", "others_linear"],
)
def test_a_temperature_below_zero_or_not_finite_at_some_step_is_refused(optim, message):
    """The exact message: the table, the value and the first step where it is bad, and the run's steps
    (0 … 4). A linear schedule from 1 to −1 over T = steps = 5 is 1 − 2k/5: first negative at k = 3
    (−0.2 in floating point: 1 + (−2)·0.6)."""
    with pytest.raises(ConfigError) as caught:
        _temps(optim)
    assert str(caught.value) == (
        f"{message}: a temperature must be a finite number ≥ 0 at every step of the run (0 … 4)"
    )


def test_temperatures_that_stay_valid_pass_and_a_bad_schedule_table_names_its_table():
    """β = 0, a constant schedule, a cosine from 1 to 0 and a step schedule that turns negative only after
    the last step (boundary 5.5 of 5 steps) pass, as does a table without β; a schedule table the schedules
    refuse is ``<table>.beta: <their message>``."""
    for optim in (
        {"beta": 0},
        {"beta": {"kind": "constant", "value": 0.5}},
        {"beta": {"kind": "cosine", "start": 1.0, "end": 0.0}},
        {"beta": {"kind": "step", "values": [1.0, -1.0], "boundaries": [5.5]}},
        {"lr": 0.1},
        {"beta": 1.0, "others": {"lr": 0.1}},
    ):
        _temps(optim)
    with pytest.raises(ConfigError, match=r"^optim\.beta: schedule data needs 'kind' in \["):
        _temps({"beta": {"kind": "bogus"}})
    with pytest.raises(
        ConfigError, match=r"^optim\.others\.beta: schedule data of kind 'constant' needs exactly"
    ):
        _temps({"beta": 1.0, "others": {"beta": {"kind": "constant"}}})


def test_a_long_run_probes_its_schedule_at_100001_evenly_spaced_steps():
    """200,001 steps: the schedule is evaluated at ``round(k·200000/100000) = 2k``, so a step schedule that
    turns negative at step 100,001 (boundary 100,000.5) is first seen bad at step 100,002 (an exhaustive scan
    would say 100,001). Negative control: 100,001 steps are scanned exhaustively and name step 100,000 of a
    boundary at 99,999.5."""
    bad = {"beta": {"kind": "step", "values": [1.0, -1.0], "boundaries": [100_000.5]}}
    with pytest.raises(ConfigError, match=r"^optim\.beta gives β = -1\.0 at step 100002: .* \(0 … 200000\)$"):
        _temps(bad, steps=200_001)
    bad = {"beta": {"kind": "step", "values": [1.0, -1.0], "boundaries": [99_999.5]}}
    with pytest.raises(ConfigError, match=r"^optim\.beta gives β = -1\.0 at step 100000: .* \(0 … 100000\)$"):
        _temps(bad, steps=100_001)


def test_optimizer_options_turn_tables_into_objects_and_leave_the_rest():
    """``_optimizer_options``: a β table becomes its schedule, with ``T = steps`` added unless given or the
    kind has no horizon (constant, step); a projection table becomes its projection; a ``betas`` list a
    tuple; every other value (a list for another key included) is passed through unchanged, and the input
    tables are not modified."""
    beta = {"kind": "cosine", "start": 1.0, "end": 0.001}
    out = rconfig._optimizer_options({"lr": 0.1, "beta": beta}, 50)
    assert out == {"lr": 0.1, "beta": Cosine(1.0, 0.001, 50.0)} and "T" not in beta
    out = rconfig._optimizer_options({"beta": {"kind": "linear", "start": 2.0, "end": 1.0, "T": 7.0}}, 50)
    assert out["beta"] == Linear(2.0, 1.0, 7.0)
    constant = rconfig._optimizer_options({"beta": {"kind": "constant", "value": 0.5}}, 50)["beta"]
    assert constant == Constant(0.5)
    step = {"kind": "step", "values": [1.0, 0.5], "boundaries": [3.0]}
    assert rconfig._optimizer_options({"beta": step}, 50)["beta"] == Step([1.0, 0.5], [3.0])
    out = rconfig._optimizer_options({"projection": {"kind": "clip", "A": 2.0}}, 50)
    assert isinstance(out["projection"], Clip) and out["projection"].to_dict() == {"kind": "clip", "A": 2.0}
    out = rconfig._optimizer_options({"betas": [0.9, 0.999], "momentum": [1, 2], "projection": [3]}, 50)
    assert out == {"betas": (0.9, 0.999), "momentum": [1, 2], "projection": [3]}
    assert type(out["betas"]) is tuple and type(out["momentum"]) is list and type(out["projection"]) is list
    out = rconfig._optimizer_options({"beta": 0.25, "projection": None, "betas": (0.5, 0.6)}, 50)
    assert out == {"beta": 0.25, "projection": None, "betas": (0.5, 0.6)}
    assert rconfig._optimizer_options({}, 50) == {}


CPU = torch.device("cpu")


SORTED_OPTIONS = (
    "beta, betas, drift, eps, lr, mean_field_scaling, n_particles, noise, noise_block, "
    "noise_preconditioned, projection, temperature_convention, weight_decay"
)


CALLABLE_TAIL = (
    ": a run's state is saved as data, and a Python callable cannot be (use the schedules of "
    "meanfield.drift.schedules and projections of meanfield.drift.projections)"
)


def _resolved(extra=()) -> dict:
    return load_config(TEACHER, "smoke", [*TINY, *extra])


def _equal_states(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _flat(table: dict, prefix: str = ""):
    for key, value in table.items():
        if isinstance(value, dict):
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _by_hand(preset: str | None, overrides) -> dict:
    """The teacher config read with tomllib, its preset and ``key=value`` overrides applied by hand."""
    base = tomllib.loads(TEACHER.read_text())
    presets = base.pop("presets")
    changes = [] if preset is None else list(_flat(presets[preset]))
    for text in overrides:
        key, _, value = text.partition("=")
        changes.append((key, tomllib.loads(f"v = {value}")["v"]))
    for key, value in changes:
        *parents, last = key.split(".")
        node = base
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return base


def test_train_config_defaults_are_the_documented_values():
    """``TrainConfig()``: 1000 steps of 64, a line every 10, no evaluation but at the end, a checkpoint every
    200, 2 kept, TensorBoard and figures on, no free energy logged."""
    assert dataclasses.astuple(TrainConfig()) == (1000, 64, 10, 0, 200, 2, True, True, False)
    assert [f.name for f in dataclasses.fields(TrainConfig)] == [
        "steps",
        "batch_size",
        "log_every",
        "eval_every",
        "checkpoint_every",
        "keep_checkpoints",
        "tensorboard",
        "figures",
        "free_energy",
    ]


@pytest.mark.parametrize(
    "name,bad,message",
    [
        ("steps", 0, "train.steps must be ≥ 1, got 0"),
        ("batch_size", -1, "train.batch_size must be ≥ 1, got -1"),
        ("log_every", 0, "train.log_every must be ≥ 1, got 0"),
        ("keep_checkpoints", 0, "train.keep_checkpoints must be ≥ 1, got 0"),
        ("eval_every", -1, "train.eval_every must be ≥ 0 (0: only at the end), got -1"),
        ("checkpoint_every", -2, "train.checkpoint_every must be ≥ 0 (0: only at the end), got -2"),
    ],
    ids=["steps", "batch_size", "log_every", "keep", "eval_every", "checkpoint_every"],
)
def test_train_config_refusals_reach_check_config_as_a_train_error(name, bad, message):
    """A bad ``[train]`` value in a resolved configuration: ``check_config`` raises ConfigError
    ``train: <the TrainConfig message>`` (exact); the boundary values (1, or 0 for the intervals) pass."""
    config = _resolved()
    config["train"][name] = bad
    with pytest.raises(ConfigError) as caught:
        check_config(config)
    assert str(caught.value) == f"train: {message}"
    config["train"][name] = 1 if bad == 0 or name in ("batch_size",) else 0
    assert getattr(check_config(config).train, name) == config["train"][name]


def test_run_config_defaults_and_fresh_tables():
    """``RunConfig(task=…)``: seed 0, cpu, float32, threads 0, data parallel, no description, empty tables that
    are not shared between two instances, and ``TrainConfig()``."""
    a, b = RunConfig(task="x"), RunConfig(task="y")
    assert (a.seed, a.device, a.dtype, a.threads, a.parallel, a.description) == (
        0,
        "cpu",
        "float32",
        0,
        "data",
        "",
    )
    assert (a.data, a.model, a.optim) == ({}, {}, {}) and a.train == TrainConfig()
    assert a.data is not b.data and a.model is not b.model and a.optim is not b.optim
    assert a.train is not b.train


def test_optim_options_are_langevins_keyword_arguments_but_params_generator_and_seed():
    """``OPTIM_OPTIONS``: ``Langevin.__init__``'s parameters in signature order, without ``self``,
    ``params``, ``generator`` and ``seed`` (listed here by hand)."""
    expected = (
        "lr",
        "beta",
        "drift",
        "betas",
        "eps",
        "weight_decay",
        "noise",
        "n_particles",
        "mean_field_scaling",
        "noise_preconditioned",
        "projection",
        "temperature_convention",
        "noise_block",
    )
    assert OPTIM_OPTIONS == expected and rconfig._langevin_options() == expected
    assert ", ".join(sorted(expected)) == SORTED_OPTIONS


def test_load_config_resolves_preset_and_overrides_like_a_hand_merge():
    """``load_config`` of the teacher config: no preset and no overrides is the file without its presets;
    the smoke preset then the TINY overrides equal the same merge done by hand (overrides after the preset:
    ``train.steps`` is TINY's 4, not smoke's 20); a str path works as a Path does; the result is a plain
    dict holding no ``presets``."""
    plain = load_config(TEACHER)
    assert plain == _by_hand(None, []) and "presets" not in plain
    assert plain["train"]["steps"] == 2000
    tiny = load_config(str(TEACHER), "smoke", TINY)
    assert tiny == _by_hand("smoke", TINY) and type(tiny) is dict
    assert tiny["train"]["steps"] == 4 and tiny["train"]["eval_every"] == 0
    assert load_config(TEACHER, "smoke")["train"]["steps"] == 20


def test_load_config_checks_what_it_resolved():
    """An override the schemas refuse is refused by ``load_config`` itself (it calls ``check_config``): the
    exact unknown-key message of ``[optim]`` with its nearest key; a missing file is named."""
    with pytest.raises(ConfigError) as caught:
        load_config(TEACHER, "smoke", ["optim.lrr=1"])
    assert str(caught.value) == (
        f"unknown key 'optim.lrr'; the keys allowed in optim are {SORTED_OPTIONS.replace('noise_preconditioned, ', 'noise_preconditioned, others, ')}"
        "; did you mean 'lr'?"
    )
    with pytest.raises(ConfigError, match=r"^train: train\.steps must be ≥ 1, got 0$"):
        load_config(TEACHER, "smoke", ["train.steps=0"])


def test_check_config_returns_the_run_config_of_the_table():
    """The RunConfig of the TINY configuration holds its values (seed, device, dtype, the tables as given,
    TrainConfig of ``[train]``)."""
    resolved = _resolved(["seed=7", "threads=3", "dtype=float64"])
    cfg = check_config(resolved)
    assert isinstance(cfg, RunConfig)
    assert (cfg.task, cfg.seed, cfg.threads, cfg.dtype, cfg.device, cfg.parallel) == (
        "teacher_student",
        7,
        3,
        "float64",
        "cpu",
        "data",
    )
    assert cfg.optim == resolved["optim"] and cfg.data == resolved["data"] and cfg.model == resolved["model"]
    assert cfg.train == TrainConfig(
        steps=4,
        batch_size=16,
        log_every=2,
        eval_every=0,
        checkpoint_every=2,
        keep_checkpoints=5,
        tensorboard=False,
        figures=False,
    )


def test_check_config_reads_the_top_level_with_the_run_config_schema():
    """The top level is read against ``RunConfig``: an unknown key lists the eleven fields; ``task`` is
    required; ``dtype`` and ``parallel`` take their two values only (exact messages)."""
    config = _resolved()
    config["bogus"] = 1
    with pytest.raises(ConfigError) as caught:
        check_config(config)
    assert str(caught.value) == (
        "unknown key 'bogus'; the keys allowed in the top level are data, description, device, dtype, model, "
        "optim, parallel, seed, task, threads, train"
    )
    config = _resolved()
    del config["task"]
    with pytest.raises(ConfigError, match=r"^missing key 'task' \(a string\)$"):
        check_config(config)
    for key, bad, allowed in (
        ("dtype", "float16", "'float32', 'float64'"),
        ("parallel", "model", "'data', 'particles'"),
    ):
        config = _resolved()
        config[key] = bad
        with pytest.raises(ConfigError) as caught:
            check_config(config)
        assert str(caught.value) == f"{key} must be one of {allowed}, got {bad!r}"
    for key, good in (("dtype", "float64"), ("parallel", "particles"), ("device", "auto")):
        config = _resolved()
        config[key] = good
        assert getattr(check_config(config), key) == good


@pytest.mark.parametrize("seed", [0, 1, 2**63 - 1], ids=["zero", "one", "largest"])
def test_seeds_in_range_pass(seed):
    """Seeds 0 … 2⁶³ − 1 (both ends) are accepted."""
    config = _resolved()
    config["seed"] = seed
    assert check_config(config).seed == seed


@pytest.mark.parametrize("seed", [-1, 2**63, 2**64], ids=["minus_one", "two63", "two64"])
def test_seeds_out_of_range_are_refused_exactly(seed):
    """−1, 2⁶³ and 2⁶⁴: the exact message naming the range and the value."""
    config = _resolved()
    config["seed"] = seed
    with pytest.raises(ConfigError) as caught:
        check_config(config)
    assert (
        str(caught.value) == f"seed must be an integer in [0, 2**63) (a torch.Generator seed), got {seed!r}"
    )


def test_thread_counts():
    """``threads``: 0 and 5 pass; −1 is refused with the exact message; a bool is refused by the schema."""
    config = _resolved()
    for good in (0, 5):
        config["threads"] = good
        assert check_config(config).threads == good
    config["threads"] = -1
    with pytest.raises(ConfigError) as caught:
        check_config(config)
    assert str(caught.value) == "threads must be an integer ≥ 0 (0: torch's default), got -1"
    config["threads"] = True
    with pytest.raises(ConfigError, match=r"^threads must be an integer, got True$"):
        check_config(config)


def test_check_config_checks_the_task_and_its_data_and_model_tables():
    """An unknown task is named with the built-in ones; an unknown key of ``[data]`` or ``[model]`` is named
    with its table prefix (``data.bogus``, ``model.bogus``); a value of the wrong type too."""
    config = _resolved()
    config["task"] = "bogus"
    with pytest.raises(ConfigError, match=r"^unknown task 'bogus'; the built-in tasks are \["):
        check_config(config)
    for table in ("data", "model"):
        config = _resolved()
        config[table]["bogus"] = 1
        with pytest.raises(
            ConfigError, match=rf"^unknown key '{table}\.bogus'; the keys allowed in {table} are "
        ):
            check_config(config)
    config = _resolved()
    config["model"]["n_particles"] = "eight"
    with pytest.raises(ConfigError, match=r"^model\.n_particles must be an integer, got 'eight'$"):
        check_config(config)


def test_optim_keys_others_and_missing_keys():
    """``[optim]``: an unknown key lists the options and ``others`` and suggests the nearest; ``others`` that
    is not a table is refused exactly; an unknown key of ``[optim.others]`` lists the options without
    ``others``; ``lr`` then ``beta`` must be present (exact messages, ``lr`` named first); a known key of
    ``[optim.others]`` passes."""
    with_others = SORTED_OPTIONS.replace("noise_preconditioned, ", "noise_preconditioned, others, ")
    config = _resolved()
    config["optim"]["betta"] = 1.0
    with pytest.raises(ConfigError) as caught:
        check_config(config)
    assert str(caught.value) == (
        f"unknown key 'optim.betta'; the keys allowed in optim are {with_others}; did you mean 'beta'?"
    )
    config = _resolved()
    config["optim"]["others"] = 3
    with pytest.raises(ConfigError) as caught:
        check_config(config)
    assert str(caught.value) == "optim.others must be a table of Langevin options, got 3"
    config["optim"]["others"] = {"lrr": 0.1}
    with pytest.raises(ConfigError) as caught:
        check_config(config)
    assert str(caught.value) == (
        f"unknown key 'optim.others.lrr'; the keys allowed in optim.others are {SORTED_OPTIONS}; did you mean "
        "'lr'?"
    )
    config["optim"]["others"] = {"lr": 0.1, "noise": False}
    assert check_config(config).optim["others"] == {"lr": 0.1, "noise": False}
    config = _resolved()
    config["optim"] = {}
    with pytest.raises(ConfigError) as caught:
        check_config(config)
    assert str(caught.value) == "missing key 'optim.lr' (the Langevin lr; see docs/running.md)"
    config["optim"] = {"lr": 0.1}
    with pytest.raises(ConfigError) as caught:
        check_config(config)
    assert str(caught.value) == "missing key 'optim.beta' (the Langevin beta; see docs/running.md)"
    config["optim"] = {"lr": 0.1, "beta": 0.5}
    assert check_config(config).optim == {"lr": 0.1, "beta": 0.5}


@pytest.mark.parametrize(
    "optim,where,value",
    [
        ({"beta": "hot"}, "optim.beta", "'hot'"),
        ({"beta": [1.0]}, "optim.beta", "[1.0]"),
        ({"beta": 1.0, "projection": "sphere"}, "optim.projection", "'sphere'"),
        ({"beta": 1.0, "others": {"beta": "x"}}, "optim.others.beta", "'x'"),
        ({"beta": 1.0, "others": {"projection": [1]}}, "optim.others.projection", "[1]"),
        ({"beta": 1.0, "projection": "p", "others": {"beta": "x"}}, "optim.projection", "'p'"),
    ],
    ids=["beta_str", "beta_list", "projection", "others_beta", "others_projection", "order"],
)
def test_beta_and_projection_must_be_numbers_or_tables(optim, where, value):
    """A β or projection that is neither a number, a table nor absent: the exact message naming the table
    and key (``[optim]`` before ``[optim.others]``, β before the projection) and the value."""
    config = _resolved()
    config["optim"] = {"lr": 0.1, **optim}
    with pytest.raises(ConfigError) as caught:
        check_config(config)
    assert str(caught.value) == (
        f'{where} must be a number or a table such as {{kind = "cosine", start = 1.0, end = 0.001}}, '
        f"got {value}{CALLABLE_TAIL}"
    )


def test_a_callable_beta_or_projection_is_refused_and_tables_numbers_and_none_pass():
    """A Python callable (a lambda, a schedule object) as β or projection is refused with the same message;
    an int β, a schedule table, a projection table and ``projection = None`` pass."""
    config = _resolved()
    config["optim"]["beta"] = Cosine(1.0, 0.5, 4.0)
    with pytest.raises(ConfigError, match=r"^optim\.beta must be a number or a table .*got Cosine\("):
        check_config(config)
    config = _resolved()
    config["optim"]["others"] = {"projection": lambda p: p}
    with pytest.raises(ConfigError, match=r"^optim\.others\.projection must be a number or a table"):
        check_config(config)
    for optim in (
        {"lr": 0.1, "beta": 1},
        {"lr": 0.1, "beta": {"kind": "linear", "start": 1.0, "end": 0.5}, "projection": None},
        {"lr": 0.1, "beta": 0.5, "projection": {"kind": "clip", "A": 2.0}},
    ):
        config = _resolved()
        config["optim"] = optim
        assert check_config(config).optim == optim


def test_check_config_checks_the_temperatures():
    """``check_config`` refuses a β that goes negative during the run (the exact ``_check_temperatures``
    message: a linear schedule 1 → −1 over 4 steps is 1 − k/2, −0.0 at k = 2 passes, −0.5 at k = 3
    does not); the same schedule ending at 0 passes."""
    config = _resolved()
    config["optim"]["beta"] = {"kind": "linear", "start": 1.0, "end": -1.0}
    with pytest.raises(ConfigError) as caught:
        check_config(config)
    assert str(caught.value) == (
        "optim.beta gives β = -0.5 at step 3: a temperature must be a finite number ≥ 0 at every step of the "
        "run (0 … 3)"
    )
    config["optim"]["beta"] = {"kind": "linear", "start": 1.0, "end": 0.0}
    check_config(config)


def test_temperatures_are_probed_at_every_step_of_a_short_run():
    """``_check_temperatures`` of 4 steps evaluates the schedule at exactly 0, 1, 2, 3 (a recording
    schedule stands in, as if built from the table); a number is looked at once, as step 0."""
    seen = []

    class Recording:
        def __call__(self, k):
            seen.append(k)
            return 1.0

    original = rconfig._optimizer_options

    def options(table, steps):
        out = original(table, steps)
        if isinstance(table.get("beta"), dict):
            out["beta"] = Recording()
        return out

    cfg = RunConfig(
        task="teacher_student",
        optim={"beta": {"kind": "constant", "value": 1.0}},
        train=TrainConfig(steps=4),
    )
    try:
        rconfig._optimizer_options = options
        rconfig._check_temperatures(cfg)
    finally:
        rconfig._optimizer_options = original
    assert seen == [0, 1, 2, 3]


def test_build_optimizer_puts_optim_on_the_particles_and_others_on_the_rest():
    """Particles (FeatureParticles): one group with ``[optim]``'s lr, drift and the cosine β with ``T`` =
    train.steps = 4, noisy. An ordinary network (``kind = "mlp"``): one group of every parameter with
    ``[optim.others]``'s lr 0.2 and its linear β table given ``T = 4``, no noise."""
    cfg = check_config(_resolved())
    model = loop.build_experiment(cfg, CPU).model
    (group,) = build_optimizer(model, cfg).param_groups
    assert (group["lr"], group["drift"], group["noise"], group["n_particles"]) == (0.05, "sgd", True, 8)
    assert group["beta"] == Cosine(1e-3, 1e-5, 4.0)
    assert {id(p) for p in group["params"]} == {id(p) for p in model.parameters()}
    cfg = check_config(
        _resolved(
            [
                "model.kind=mlp",
                "optim.others.lr=0.2",
                "optim.others.noise=false",
                'optim.others.beta={kind="linear", start=2.0, end=1.0}',
            ]
        )
    )
    model = loop.build_experiment(cfg, CPU).model
    (group,) = build_optimizer(model, cfg).param_groups
    assert (group["lr"], group["noise"]) == (0.2, False)
    assert group["beta"] == Linear(2.0, 1.0, 4.0)
    assert {id(p) for p in group["params"]} == {id(p) for p in model.parameters()}


def test_build_optimizer_draws_the_noise_of_derive_seed_noise():
    """One step of ``build_optimizer``'s optimizer on a fresh model equals one step of a ``Langevin`` built
    by hand with ``seed = derive_seed(5, "noise")`` (same gradient), bit for bit; negative control: a hand
    ``Langevin`` seeded ``derive_seed(5, "init")`` gives other parameters."""
    cfg = check_config(_resolved(["seed=5"]))

    def stepped(make):
        experiment = loop.build_experiment(cfg, CPU)
        optimizer = make(experiment.model)
        loss = experiment.loss(torch.arange(16))
        loss.backward()
        optimizer.step()
        return {k: v.clone() for k, v in experiment.model.state_dict().items()}

    def by_hand(name):
        return lambda model: Langevin(
            Langevin.param_groups_for(model, others={}),
            lr=0.05,
            beta=Cosine(1e-3, 1e-5, 4.0),
            drift="sgd",
            seed=derive_seed(5, name),
        )

    ours = stepped(lambda model: build_optimizer(model, cfg))
    assert _equal_states(ours, stepped(by_hand("noise")))
    assert not _equal_states(ours, stepped(by_hand("init")))


@pytest.mark.parametrize(
    "optim,message",
    [
        ({"lr": -1.0}, "[optim]: Langevin: lr must be > 0, got -1.0"),
        ({"n_particles": 1.5}, "[optim]: Langevin: n_particles must be an int, got float"),
        ({"drift": "bogus"}, "[optim]: Langevin: drift must be one of ('sgd', 'adam'), got 'bogus'"),
    ],
    ids=["value_error", "type_error", "drift"],
)
def test_build_optimizer_names_optim_in_langevins_refusals(optim, message):
    """A value ``Langevin`` refuses (ValueError or TypeError): ConfigError ``[optim]: <its message>``."""
    cfg = check_config(_resolved())
    cfg.optim.update(optim)
    model = loop.build_experiment(cfg, CPU).model
    with pytest.raises(ConfigError) as caught:
        build_optimizer(model, cfg)
    assert str(caught.value) == message and caught.value.__cause__ is None


def test_build_optimizer_names_optim_in_refusals_of_others_and_of_a_schedule_table():
    """``[optim.others]`` a ``Langevin`` refuses (an MLP, whose parameters are all in that group), and a β table
    the schedules refuse (a RunConfig that skipped ``check_config``), are ``[optim]: …`` too."""
    cfg = check_config(_resolved(["model.kind=mlp", "optim.others.lr=-2.0"]))
    model = loop.build_experiment(cfg, CPU).model
    with pytest.raises(ConfigError) as caught:
        build_optimizer(model, cfg)
    assert str(caught.value) == "[optim]: param group 0: lr must be > 0, got -2.0"
    cfg = check_config(_resolved())
    cfg.optim["beta"] = {"kind": "bogus"}
    with pytest.raises(ConfigError, match=r"^\[optim\]: schedule data needs 'kind' in \["):
        build_optimizer(loop.build_experiment(cfg, CPU).model, cfg)


def test_optimizer_options_convert_any_mapping_table():
    """A β or projection table given as a read-only mapping (not a dict) is converted like a dict (``T``
    added to the β table's copy, the mapping itself unchanged)."""
    from types import MappingProxyType

    from meanfield.drift.projections import Clip

    beta = MappingProxyType({"kind": "cosine", "start": 1.0, "end": 0.5})
    out = rconfig._optimizer_options(
        {"beta": beta, "projection": MappingProxyType({"kind": "clip", "A": 2.0})}, 8
    )
    assert out["beta"] == Cosine(1.0, 0.5, 8.0) and "T" not in beta
    assert isinstance(out["projection"], Clip) and out["projection"].to_dict() == {"kind": "clip", "A": 2.0}


# a task's [model] fields read from [optim] (FROM_OPTIM): β and the step given once
ROOT = Path(__file__).resolve().parents[2]
MEAN_FIELD_CONFIG = ROOT / "experiments" / "mean_field" / "config.toml"


def _resolved_mean_field(*overrides: str) -> dict:
    return _config.resolve(_config.load_toml(MEAN_FIELD_CONFIG), "smoke", ["model.n_particles=64", *overrides])


def test_the_mean_field_task_reads_beta_and_the_step_from_optim():
    """The shipped config gives β = 0.5 and lr = 0.05 in [optim] only; the model gets them as beta and eta, and
    the evaluation's exact variance is β/((a + k)(1 − η(a + k)/2)) = 0.5/(2·0.95) of those values (a = k = 1).
    Negative control: another [optim] lr changes the model's eta and the exact variance with it."""
    cfg = check_config(_resolved_mean_field())
    assert "beta" not in cfg.model and "eta" not in cfg.model
    model = model_options(get_task("mean_field"), cfg)
    assert (model["beta"], model["eta"]) == (0.5, 0.05)
    out = build_experiment(cfg, torch.device("cpu")).evaluate()
    assert out["variance_exact"] == pytest.approx(0.5 / (2 * (1 - 0.05)), rel=1e-15)
    other = check_config(_resolved_mean_field("optim.lr=0.1"))
    assert model_options(get_task("mean_field"), other)["eta"] == 0.1
    assert build_experiment(other, torch.device("cpu")).evaluate()["variance_exact"] == pytest.approx(
        0.5 / (2 * (1 - 0.1)), rel=1e-15
    )


def test_a_beta_schedule_leaves_the_exact_variance_out():
    """A β schedule has no one value: the model's beta stays 0 and the evaluation reports no exact variance
    (the step, a number, is still passed)."""
    cfg = check_config(_resolved_mean_field('optim.beta={kind = "cosine", start = 0.5, end = 0.1}'))
    model = model_options(get_task("mean_field"), cfg)
    assert "beta" not in model and model["eta"] == 0.05
    assert "variance_exact" not in build_experiment(cfg, torch.device("cpu")).evaluate()


@pytest.mark.parametrize(("key", "there"), [("beta", "optim.beta"), ("eta", "optim.lr")])
def test_model_beta_or_eta_in_a_config_is_refused_naming_the_one_place(key, there):
    """``[model] beta`` or ``eta`` beside [optim]'s: a ConfigError naming the [optim] key, at the check (before a
    folder is made). Negative control: the same config without it is accepted."""
    check_config(_resolved_mean_field())
    with pytest.raises(ConfigError, match=rf"^model\.{key}: task 'mean_field' reads it from {there} "):
        check_config(_resolved_mean_field(f"model.{key}=0.5"))


def test_meanfield_run_says_the_duplicate_in_one_line(tmp_path, capsys):
    """The command line: exit 2 (a configuration error), one line on stderr, no traceback, no run folder."""
    out = tmp_path / "run"
    code = main(
        ["run", str(MEAN_FIELD_CONFIG), "--preset", "smoke", "--set", "model.eta=0.05", "--out", str(out), "--quiet"]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "model.eta: task 'mean_field' reads it from optim.lr" in err
    assert not out.exists()
