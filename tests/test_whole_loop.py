"""Whole-function value tests of :mod:`meanfield.runs.loop` and :mod:`meanfield.runs.schema` (issue 25).

Every public function and method of the two modules, and the private helpers they call, is pinned against an
answer worked out independently of the code under test:

- the training loop against a *plain* loop written here (the task's own ``build``, a ``Langevin`` built by
  hand with ``derive_seed(seed, "noise")``, torch seeded with ``derive_seed(seed, "torch")``): the
  parameters of every checkpoint equal the plain loop's bit for bit, each ``train_loss`` of
  ``metrics.jsonl`` (read back with :mod:`json`) is the mean of the plain losses of its window, the
  evaluation metrics and optimizer statistics those of the plain loop at that step, ``beta`` the cosine
  schedule computed by hand;
- the logging, evaluation and checkpoint schedules against step lists worked out by hand;
- ``summary.json``, ``environment.json``, the printed summary and the warnings against their exact text;
- every error message of ``check_config``, ``build_optimizer``, ``build_experiment``, ``_device``, ``run``,
  ``_one_step``, ``_evaluate``, ``_checkpoint`` and ``_check_checkpointable`` exactly;
- ``StopFlag`` and ``RunInterrupted``/``NonFiniteLossError`` with real signals and ``pickle``.

Nothing here is statistical: every expected value is exact (or float64 round-off where stated). The runs are
the teacher-student smoke preset cut to a few steps of 8 particles (``tests/_tiny_run.py``), a few hundredths
of a second each.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pickle
import signal
import threading
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from meanfield import tasks
from meanfield.config import ConfigError
from meanfield.data import CorruptDataError
from meanfield.drift.schedules import Cosine, Linear
from meanfield.optim import Langevin
from meanfield.runs import loop
from meanfield.runs import schema as rconfig
from meanfield.runs.folder import Checkpoints, DiskFullError, MetricsLog, RunResult
from meanfield.runs.schema import (
    OPTIM_OPTIONS,
    RunConfig,
    TrainConfig,
    build_optimizer,
    check_config,
    load_config,
)
from meanfield.runs.sinks import summary_table
from meanfield.seeds import derive_seed
from meanfield.tasks.regression import FeatureModel, TeacherStudentData

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from _tiny_run import TEACHER, TINY  # noqa: E402  (tests/_tiny_run.py)

# mutmut's trampolines add frames: a warning's stack level moves under it
UNDER_MUTMUT = "MUTANT_UNDER_TEST" in os.environ

CPU = torch.device("cpu")
HERE = Path(__file__).resolve()
LOOP_FILE = Path(loop.__file__).resolve()
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


def _run(folder: Path, extra=(), **kwargs) -> RunResult:
    kwargs.setdefault("quiet", True)
    return loop.run(TEACHER, folder, preset="smoke", overrides=[*TINY, *extra], **kwargs)


def _records(folder: Path) -> list[dict]:
    """``metrics.jsonl`` read back line by line with :mod:`json` (not through ``MetricsLog``); none yet: []."""
    if not (folder / "metrics.jsonl").exists():
        return []
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def _cosine(k: int, T: float, start: float = 1e-3, end: float = 1e-5) -> float:
    """The cosine schedule by its formula: ``end + (start − end)·(1 + cos(πk/T))/2``."""
    return end + (start - end) * (1 + math.cos(math.pi * k / T)) / 2


@pytest.fixture
def rng_kept():
    """Put torch's global generator back after a test that reseeds it."""
    state = torch.get_rng_state()
    yield
    torch.set_rng_state(state)


def _plain_loop(steps: int, seed: int = 0, eval_at=()):
    """The TINY run written out by hand: the task's ``build`` with the TINY schemas, a ``Langevin`` with the
    smoke preset's options (cosine β over ``T = steps``) seeded ``derive_seed(seed, "noise")``, torch seeded
    ``derive_seed(seed, "torch")``; zero_grad, loss, backward, step.

    Returns:
        (losses per step, the model's state after each step, the optimizer's ``last_stats`` after each step,
        the evaluation metrics at the steps ``eval_at``)
    """
    experiment = tasks.TEACHER_STUDENT.build(
        TeacherStudentData(d=16, k=2, activation="relu", n_train=64, n_test=32),
        FeatureModel(n_particles=8, activation="relu"),
        batch_size=16,
        seed=seed,
        device=CPU,
        dtype=torch.float32,
    )
    model = experiment.model
    optimizer = Langevin(
        Langevin.param_groups_for(model, others={}),
        lr=0.05,
        beta=Cosine(1e-3, 1e-5, float(steps)),
        drift="sgd",
        seed=derive_seed(seed, "noise"),
    )
    torch.manual_seed(derive_seed(seed, "torch"))
    losses, states, stats, evals = [], {}, {}, {}
    for k in range(1, steps + 1):
        batch = experiment.next_batch()
        optimizer.zero_grad()
        loss = experiment.loss(batch)
        losses.append(float(loss.detach()))
        loss.backward()
        optimizer.step()
        states[k] = {name: t.detach().clone() for name, t in model.state_dict().items()}
        stats[k] = dataclasses.asdict(optimizer.last_stats)
        if k in eval_at:
            model.eval()
            with torch.no_grad():
                evals[k] = {name: float(v) for name, v in experiment.evaluate().items()}
            model.train()
    return losses, states, stats, evals


def _same(a, b) -> bool:
    """Deep equality of nested dicts/lists/tuples of tensors and plain values."""
    if torch.is_tensor(a) or torch.is_tensor(b):
        return torch.is_tensor(a) and torch.is_tensor(b) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _equal_states(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ======================================================================================================
# meanfield.runs.schema: schemas
# ======================================================================================================


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


# ======================================================================================================
# load_config
# ======================================================================================================


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


# ======================================================================================================
# check_config
# ======================================================================================================


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


# ======================================================================================================
# build_optimizer
# ======================================================================================================


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


# ======================================================================================================
# meanfield.runs.loop: exceptions, StopFlag, small helpers
# ======================================================================================================


def test_run_interrupted_keeps_its_signal_as_an_int_across_pickle():
    """``RunInterrupted``: the message as given, SIGINT (2) by default, the signal stored as a plain int; a
    pickle round trip (a sweep's worker to its parent) keeps type, message and signal (15 here)."""
    default = loop.RunInterrupted("stopped")
    assert str(default) == "stopped" and default.signum == 2 and type(default.signum) is int
    term = loop.RunInterrupted("by term", signal.SIGTERM)
    assert term.signum == 15 and type(term.signum) is int
    back = pickle.loads(pickle.dumps(term))
    assert type(back) is loop.RunInterrupted and str(back) == "by term" and back.signum == 15
    assert not isinstance(term, KeyboardInterrupt) and isinstance(term, Exception)


def test_non_finite_loss_error_is_arithmetic_and_names_its_step():
    """``NonFiniteLossError(message, step)``: an ArithmeticError with the message and ``step``."""
    error = loop.NonFiniteLossError("the loss is nan", 7)
    assert isinstance(error, ArithmeticError) and str(error) == "the loss is nan" and error.step == 7
    assert loop.STOP_SIGNALS == (signal.SIGINT, signal.SIGTERM)


def test_stop_flag_records_the_first_signal_raises_on_the_second_and_puts_the_handlers_back():
    """Inside ``StopFlag``: both stop signals go to the flag (the handlers found are not called), the first
    sets ``signum`` (SIGTERM here) and ``set``, a second raises KeyboardInterrupt and leaves ``signum``; on
    exit the handlers found are back. A fresh flag is unset, and a SIGINT alone gives ``signum = SIGINT``."""
    called = []

    def mine(signum, frame):
        called.append(signum)

    found = {s: signal.signal(s, mine) for s in loop.STOP_SIGNALS}
    try:
        flag = loop.StopFlag()
        assert flag.signum is None and flag.set is False
        with flag as stop:
            assert stop is flag
            assert signal.getsignal(signal.SIGINT) == flag._handle == signal.getsignal(signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop.set is True and stop.signum == signal.SIGTERM
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
            assert stop.signum == signal.SIGTERM
        assert signal.getsignal(signal.SIGINT) is mine and signal.getsignal(signal.SIGTERM) is mine
        with loop.StopFlag() as other:
            os.kill(os.getpid(), signal.SIGINT)
        assert other.signum == signal.SIGINT and called == []
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        for s, handler in found.items():
            signal.signal(s, handler)


def test_stop_flag_off_the_main_thread_installs_nothing():
    """In another thread (where Python allows no handler) the flag installs and puts back nothing: the main
    thread's handler stays, and the flag stays unset."""
    before = signal.getsignal(signal.SIGINT)
    seen = {}

    def body():
        with loop.StopFlag() as stop:
            seen["previous"] = dict(stop._previous)
            seen["handler"] = signal.getsignal(signal.SIGINT)
        seen["set"] = stop.set

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == {"previous": {}, "handler": before, "set": False}
    assert signal.getsignal(signal.SIGINT) is before


def test_device_names_and_their_refusals(monkeypatch):
    """``_device``: ``cpu`` is the CPU; ``auto`` is CUDA exactly when it is available; ``cuda``/``cuda:1``
    without CUDA and a name torch does not know are refused with the exact messages (availability faked)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert loop._device("cpu") == CPU and loop._device("auto") == CPU
    for name in ("cuda", "cuda:1"):
        with pytest.raises(ConfigError) as caught:
            loop._device(name)
        assert str(caught.value) == f"device {name!r} was asked for but CUDA is not available here"
    with pytest.raises(ConfigError) as caught:
        loop._device("gpu")
    assert str(caught.value) == "device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got 'gpu'"
    assert caught.value.__cause__ is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert loop._device("auto") == torch.device("cuda")
    assert loop._device("cuda:1") == torch.device("cuda", 1) and loop._device("cpu") == CPU


def test_finite_parameters_looks_at_every_parameter():
    """``_finite_parameters``: True for finite parameters and for a model without any; False for a NaN in
    the weight or an Inf in the bias (the last parameter)."""
    model = torch.nn.Linear(2, 2)
    assert loop._finite_parameters(model) is True
    assert loop._finite_parameters(torch.nn.Module()) is True
    with torch.no_grad():
        model.bias[1] = float("inf")
    assert loop._finite_parameters(model) is False
    with torch.no_grad():
        model.bias[1] = 0.0
        model.weight[0, 0] = float("nan")
    assert loop._finite_parameters(model) is False


def test_stats_record_of_an_optimizer_with_and_without_statistics():
    """``_stats_record``: nothing without statistics (no ``last_group_stats`` attribute, or an empty list);
    ``optim`` is the dataclass as a dict, ``groups`` one dict (or None) per group, written out here."""
    from meanfield.optim.step_stats import LangevinStats

    stats = LangevinStats(
        step=3,
        beta=0.5,
        eta_eff_mean=0.1,
        eta_eff_min=0.1,
        eta_eff_max=0.1,
        noise_rms=0.2,
        drift_rms=0.3,
        drift_to_noise=1.5,
        n=12,
    )
    as_dict = {
        "step": 3,
        "beta": 0.5,
        "eta_eff_mean": 0.1,
        "eta_eff_min": 0.1,
        "eta_eff_max": 0.1,
        "noise_rms": 0.2,
        "drift_rms": 0.3,
        "drift_to_noise": 1.5,
        "n": 12,
    }
    assert loop._stats_record(SimpleNamespace(last_stats=None)) == {}
    assert loop._stats_record(SimpleNamespace(last_stats=None, last_group_stats=[])) == {}
    assert loop._stats_record(SimpleNamespace(last_stats=stats, last_group_stats=None)) == {"optim": as_dict}
    assert loop._stats_record(SimpleNamespace(last_stats=None, last_group_stats=[None, stats])) == {
        "groups": [None, as_dict]
    }


def test_temperature_reads_the_first_noisy_group_at_its_step():
    """``_temperature``: a noiseless first group is skipped; the schedule is evaluated at the group's
    ``step`` (Linear 2 → 0 over 4 at step 1 is 1.5), an int β becomes a float; the loss convention adds
    ``M·β``; no noisy group is β = 0."""
    quiet = {"noise": False, "beta": 9.0, "step": 0}
    noisy = {"noise": True, "beta": Linear(2.0, 0.0, 4.0), "step": 1}
    assert loop._temperature(SimpleNamespace(param_groups=[quiet, noisy])) == {"beta": 1.5}
    whole = loop._temperature(SimpleNamespace(param_groups=[{"noise": True, "beta": 2, "step": 0}]))
    assert whole == {"beta": 2.0} and type(whole["beta"]) is float
    loss = {**noisy, "temperature_convention": "loss", "n_particles": 4}
    assert loop._temperature(SimpleNamespace(param_groups=[loss])) == {"beta": 1.5, "beta_mean_field": 6.0}
    assert loop._temperature(SimpleNamespace(param_groups=[quiet])) == {"beta": 0.0}


def test_check_checkpointable_refuses_what_torch_load_weights_only_refuses():
    """Tensors and plain data pass; an object that pickles but that ``weights_only`` loading refuses, and a
    lambda that does not pickle, are refused with the exact prefix of the message."""
    loop._check_checkpointable({"t": torch.zeros(2), "plain": [1, "x", {"a": 2.5}]})
    prefix = r"^this run's state cannot be checkpointed \(torch\.save \+ torch\.load\(weights_only=True\)\): "
    for bad in ({"obj": SimpleNamespace(a=1)}, {"f": lambda: 0}):
        with pytest.raises(ConfigError, match=prefix):
            loop._check_checkpointable(bad)


# ======================================================================================================
# build_experiment and preflight
# ======================================================================================================


class _Recording:
    """A task that records what ``build`` receives, then builds the teacher-student task (or raises)."""

    Data = TeacherStudentData
    Model = FeatureModel

    def __init__(self, error: BaseException | None = None) -> None:
        self.calls, self.error = [], error

    def build(self, data, model, **kwargs):
        self.calls.append((data, model, kwargs))
        if self.error is not None:
            raise self.error
        return tasks.TEACHER_STUDENT.build(data, model, **kwargs)


def test_build_experiment_hands_the_task_its_schemas_seed_batch_device_and_dtype(monkeypatch):
    """``build`` gets the ``[data]`` and ``[model]`` dataclasses (TINY's values, written out), the batch size
    16, the run's seed 9, the device and float64 for ``dtype = "float64"`` (float32 by default)."""
    task = _Recording()
    monkeypatch.setitem(tasks.TASKS, "recording", task)
    for dtype, expected in (("float64", torch.float64), ("float32", torch.float32)):
        cfg = check_config(_resolved(["task=recording", "seed=9", f"dtype={dtype}"]))
        experiment = loop.build_experiment(cfg, CPU)
        assert all(p.dtype == expected for p in experiment.model.parameters())
    data, model, kwargs = task.calls[0]
    assert data == TeacherStudentData(d=16, k=2, activation="relu", n_train=64, n_test=32)
    assert model == FeatureModel(n_particles=8, activation="relu")
    assert kwargs == {"batch_size": 16, "seed": 9, "device": CPU, "dtype": torch.float64}
    assert task.calls[1][2]["dtype"] == torch.float32


def test_build_experiment_wraps_value_and_type_errors_only(monkeypatch):
    """A ValueError of the real build (``n_particles = 0``) and a TypeError are ConfigErrors naming the task
    and the tables (exact); a ConfigError, a CorruptDataError (itself a ValueError) and any other error pass
    through unchanged, the same object."""
    cfg = check_config(_resolved(["model.n_particles=0"]))
    with pytest.raises(ConfigError) as caught:
        loop.build_experiment(cfg, CPU)
    assert str(caught.value) == (
        "task 'teacher_student' cannot be built from this configuration ([data], [model], train.batch_size): "
        "n_particles must be ≥ 1, got 0"
    )
    monkeypatch.setitem(tasks.TASKS, "typed", _Recording(TypeError("wrong type")))
    with pytest.raises(ConfigError) as caught:
        loop.build_experiment(check_config(_resolved(["task=typed"])), CPU)
    assert str(caught.value) == (
        "task 'typed' cannot be built from this configuration ([data], [model], train.batch_size): wrong type"
    )
    for error in (ConfigError("mine"), CorruptDataError("file damaged"), RuntimeError("other")):
        monkeypatch.setitem(tasks.TASKS, "raising", _Recording(error))
        with pytest.raises(type(error)) as caught:
            loop.build_experiment(check_config(_resolved(["task=raising"])), CPU)
        assert caught.value is error


def test_preflight_checks_builds_and_writes_nothing(tmp_path, monkeypatch):
    """``preflight``: a good configuration returns None and writes nothing (the working folder stays empty);
    a schema error, a model the task refuses, an optimizer ``Langevin`` refuses and a device that is not
    there are refused with their exact messages."""
    monkeypatch.chdir(tmp_path)
    assert loop.preflight(_resolved()) is None
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ConfigError, match=r"^train: train\.steps must be ≥ 1, got 0$"):
        loop.preflight(_resolved(["train.steps=0"]))
    with pytest.raises(ConfigError, match=r"^task 'teacher_student' cannot be built .*got 0$"):
        loop.preflight(_resolved(["model.n_particles=0"]))
    with pytest.raises(ConfigError, match=r"^\[optim\]: Langevin: lr must be > 0, got -1\.0$"):
        loop.preflight(_resolved(["optim.lr=-1.0"]))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"^device 'cuda' was asked for but CUDA is not available here$"):
        loop.preflight(_resolved(["device=cuda"]))
    assert list(tmp_path.iterdir()) == []


# ======================================================================================================
# run(): arguments, default folders, process group
# ======================================================================================================


def test_a_resolved_dict_takes_no_preset_or_overrides(tmp_path):
    """``run(dict, preset=…)`` or ``run(dict, overrides=…)``: the exact refusal, no folder made."""
    for kwargs in ({"preset": "smoke"}, {"overrides": ["train.steps=2"]}):
        with pytest.raises(ConfigError) as caught:
            loop.run(_resolved(), tmp_path / "r", quiet=True, **kwargs)
        assert (
            str(caught.value) == "preset and overrides apply to a configuration file, not to a resolved dict"
        )
    assert not (tmp_path / "r").exists()


def test_default_folders_are_runs_stem_and_stem_preset(tmp_path, monkeypatch):
    """Without ``out``: a resolved dict runs into ``runs/run``, the teacher file with the smoke preset into
    ``runs/config-smoke``, without a preset into ``runs/config`` (relative to the working folder); each
    result's path is that folder and its config.toml the resolved configuration."""
    monkeypatch.chdir(tmp_path)
    resolved = _resolved()
    a = loop.run(resolved, quiet=True)
    b = loop.run(TEACHER, preset="smoke", overrides=TINY, quiet=True)
    c = loop.run(TEACHER, overrides=TINY, quiet=True)
    assert (a.path, b.path, c.path) == (Path("runs/run"), Path("runs/config-smoke"), Path("runs/config"))
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["config", "config-smoke", "run"]
    assert tomllib.loads((tmp_path / "runs/run/config.toml").read_text()) == resolved
    assert tomllib.loads((tmp_path / "runs/config/config.toml").read_text()) == load_config(
        TEACHER, None, TINY
    )
    assert (a.status, a.step, b.status, c.step) == ("finished", 4, "finished", 4)


def test_a_run_that_created_the_process_group_destroys_it(tmp_path, monkeypatch):
    """``process_group`` saying this run created the group (emulated, one process): the run destroys it once
    at the end; a run that did not create it leaves it alone (negative control)."""
    import torch.distributed as dist

    destroyed = []
    monkeypatch.setattr(dist, "destroy_process_group", lambda *a: destroyed.append(a))
    monkeypatch.setattr(loop.parallel, "process_group", lambda device: (0, 1, True))
    assert _run(tmp_path / "owner").status == "finished"
    assert destroyed == [()]
    monkeypatch.setattr(loop.parallel, "process_group", lambda device: (0, 1, False))
    _run(tmp_path / "guest")
    assert destroyed == [()]


def test_the_callers_thread_count_is_back_after_a_failed_run(tmp_path):
    """``threads = 1`` and an error at step 1: the caller's 2 threads are back (the ``finally``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:

        def fail(step):
            assert torch.get_num_threads() == 1
            raise RuntimeError("stop")

        with pytest.raises(RuntimeError, match="^stop$"):
            _run(tmp_path / "r", ["threads=1"], on_step=fail)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_state_that_cannot_be_checkpointed_stops_the_run_before_its_folder(tmp_path, monkeypatch):
    """A task whose batch sampler's state holds an object ``weights_only`` loading refuses: the run is refused
    at the start with the checkpoint message, and the folder is never made."""

    class Unsaveable(_Recording):
        def build(self, data, model, **kwargs):
            experiment = super().build(data, model, **kwargs)
            experiment.batches = SimpleNamespace(state_dict=lambda: {"x": SimpleNamespace(a=1)})
            return experiment

    monkeypatch.setitem(tasks.TASKS, "unsaveable", Unsaveable())
    with pytest.raises(ConfigError, match=r"^this run's state cannot be checkpointed \(torch\.save"):
        _run(tmp_path / "u", ["task=unsaveable"])
    assert not (tmp_path / "u").exists()


# ======================================================================================================
# the loop against a plain loop: schedules, values, checkpoints
# ======================================================================================================


def _saves(monkeypatch) -> list:
    """Record the step of every ``Checkpoints.save`` (the real save still runs)."""
    saved, real = [], Checkpoints.save

    def save(self, state, step, meta=None):
        saved.append(step)
        return real(self, state, step, meta)

    monkeypatch.setattr(Checkpoints, "save", save)
    return saved


@pytest.mark.parametrize(
    "steps,log,evaluate,every,keep,logged,evaluated,saved,kept",
    [
        (5, 2, 3, 2, 2, [2, 3, 4, 5], [3, 5], [2, 4, 5], [4, 5]),
        (7, 3, 2, 0, 5, [2, 3, 4, 6, 7], [2, 4, 6, 7], [7], [7]),
        (4, 4, 0, 3, 5, [4], [4], [3, 4], [3, 4]),
        (3, 1, 1, 1, 1, [1, 2, 3], [1, 2, 3], [1, 2, 3], [3]),
    ],
    ids=["log2_eval3_ckpt2", "log3_eval2_end_only", "one_line", "every_step"],
)
def test_a_run_is_the_plain_loop_logged_evaluated_and_saved_on_its_schedule(
    tmp_path, monkeypatch, rng_kept, steps, log, evaluate, every, keep, logged, evaluated, saved, kept
):
    """Lines at the multiples of ``log_every`` and ``eval_every`` and at the last step; evaluations at the
    multiples of ``eval_every`` and the last step; a checkpoint saved at the multiples of
    ``checkpoint_every`` and at the end (once, even when the end is a multiple), the last ``keep`` kept (step
    lists worked out by hand). Against the plain loop: each ``train_loss`` (metrics.jsonl read with json) is
    the exact mean of the plain losses since the previous line, ``beta`` the cosine at that step (by its
    formula, rel 1e-12), ``optim``/``groups`` the plain optimizer's ``last_stats``, the evaluation metrics the
    plain model's at that step, every kept checkpoint's parameters the plain ones bit for bit (its window
    empty: saved after a line, or holding the steps since), its record the step, run.json's config hash and
    the provenance read from environment.json by hand. The lines' keys come in the documented order."""
    saves = _saves(monkeypatch)
    folder = tmp_path / "r"
    extra = [
        f"train.steps={steps}",
        f"train.log_every={log}",
        f"train.eval_every={evaluate}",
        f"train.checkpoint_every={every}",
        f"train.keep_checkpoints={keep}",
    ]
    result = _run(folder, extra)
    losses, states, stats, evals = _plain_loop(steps, eval_at=evaluated)
    records = _records(folder)
    assert [r["step"] for r in records] == logged
    assert [r["step"] for r in records if "test_mse" in r] == evaluated
    previous = 0
    for r in records:
        window = losses[previous : r["step"]]
        assert r["train_loss"] == sum(window) / len(window)
        assert r["beta"] == pytest.approx(_cosine(r["step"], steps), rel=1e-12, abs=0)
        assert r["optim"] == stats[r["step"]] and r["groups"] == [stats[r["step"]]]
        assert r["samples_per_s"] > 0 and r["time"] > 0
        keys = ["step", "time", "train_loss", "samples_per_s", "beta", "optim", "groups"]
        if r["step"] in evaluated:
            assert {k: r[k] for k in evals[r["step"]]} == evals[r["step"]]
            keys += list(evals[r["step"]])
        assert list(r) == keys
        previous = r["step"]
    assert saves == saved
    checkpoints = Checkpoints(folder / "checkpoints")
    assert checkpoints.steps() == kept
    run_json = json.loads((folder / "run.json").read_text())
    env = json.loads((folder / "environment.json").read_text())
    provenance = {
        "commit": env["git"]["commit"],
        "dirty": env["git"]["dirty"],
        "source_sha256": env["source_sha256"],
        "meanfield": env["packages"].get("meanfield-sde"),
        "torch": env["packages"]["torch"],
    }
    for k in kept:
        state = torch.load(checkpoints.path(k), weights_only=True)
        assert state["step"] == k and _equal_states(state["model"], states[k])
        since = k - max([s for s in logged if s <= k], default=0)
        assert state["window"]["n"] == since
        assert state["window"]["loss_sum"] == sum(losses[k - since : k])
        record = checkpoints.record(k)
        assert {key: record[key] for key in record if key not in ("sha256", "bytes")} == {
            "step": k,
            "config_sha256": run_json["config_sha256"],
            **provenance,
        }
    assert not _equal_states(states[steps], states[steps - 1])  # negative control: the steps move
    summary = _summary(folder)
    assert (result.status, summary["step"], summary["steps"]) == ("finished", steps, steps)
    last = records[-1]
    assert summary["final"] == {
        k: v for k, v in last.items() if k not in ("step", "time", "samples_per_s", "optim", "groups")
    }
    for key in ("test_mse", "test_mse_relative"):
        values = [(evals[k][key], k) for k in evaluated]
        best = min(values, key=lambda vk: vk[0])  # the first of equal values
        assert summary["best"][key] == {"value": best[0], "step": best[1]}
    assert set(summary["best"]) == {"test_mse", "test_mse_relative"}


def test_another_seed_is_another_run(tmp_path, rng_kept):
    """Seed 3: the run equals the plain loop of seed 3 and differs from that of seed 0 (negative control for
    the seeding of the data, initialisation, batches and noise)."""
    result = _run(tmp_path / "s3", ["seed=3"])
    state = Checkpoints(tmp_path / "s3" / "checkpoints").load(4)["model"]
    assert result.summary["seed"] == 3
    assert _equal_states(state, _plain_loop(4, seed=3)[1][4])
    assert not _equal_states(state, _plain_loop(4, seed=0)[1][4])


# ======================================================================================================
# train(): what the folder holds while it runs, resume, stops
# ======================================================================================================


class _Bar:
    """A stand-in for tqdm recording its arguments, updates, postfixes and close."""

    made: list = []

    def __init__(self, **kwargs):
        self.kwargs, self.updates, self.postfix, self.closed = kwargs, 0, [], False
        _Bar.made.append(self)

    def update(self, n=1):
        self.updates += n

    def set_postfix(self, **kwargs):
        self.postfix.append(kwargs)

    def close(self):
        self.closed = True


class _Board:
    """A stand-in for the loop's TensorBoard sink recording its arguments, records and close."""

    made: list = []

    def __init__(self, folder, enabled, start_step):
        self.args, self.written, self.closed = (folder, enabled, start_step), [], False
        _Board.made.append(self)

    def write(self, record):
        self.written.append(json.loads(json.dumps(record)))

    def close(self):
        self.closed = True


@pytest.fixture
def sinks(monkeypatch):
    """The loop's progress bar and TensorBoard sink replaced by recorders."""
    _Bar.made, _Board.made = [], []
    monkeypatch.setattr(loop, "tqdm", _Bar)
    monkeypatch.setattr(loop, "TensorBoard", _Board)
    return _Bar.made, _Board.made


def _statuses(monkeypatch) -> list:
    """Record the status of every ``_write_summary`` (the real one still runs)."""
    seen, real = [], loop._Run._write_summary

    def write(self, status, final, error=None):
        seen.append(status)
        return real(self, status, final, error)

    monkeypatch.setattr(loop._Run, "_write_summary", write)
    return seen


def test_on_step_sees_each_step_after_its_line_and_checkpoint(tmp_path, sinks, monkeypatch):
    """``on_step`` is called with 1, 2, 3, 4 in order; when it runs, that step's line and checkpoint (when
    due) are written, ``summary.json`` says ``running`` at step 0 with empty final and best, and
    environment.json records 1 process and no resumption. The bar: total 4 from 0, disabled (quiet), one
    update a step, the loss and rate of each line, closed; the sink: the run's ``tensorboard`` folder,
    disabled (TINY), from step 0, given each line as written, closed."""
    folder = tmp_path / "r"
    statuses = _statuses(monkeypatch)
    seen = []

    def look(step):
        lines = [r["step"] for r in _records(folder)]
        summary = _summary(folder)
        env = json.loads((folder / "environment.json").read_text())
        seen.append(
            (
                step,
                lines,
                Checkpoints(folder / "checkpoints").steps(),
                (summary["status"], summary["step"], summary["final"], summary["best"]),
                (env["world_size"], "resumed_from_step" in env, env["earlier"]),
            )
        )

    _run(folder, on_step=look)
    running = ("running", 0, {}, {})
    assert seen == [
        (1, [], [], running, (1, False, [])),
        (2, [2], [2], running, (1, False, [])),
        (3, [2], [2], running, (1, False, [])),
        (4, [2, 4], [2, 4], running, (1, False, [])),
    ]
    assert statuses == ["running", "finished"]
    bars, boards = sinks
    (bar,) = bars
    assert bar.kwargs == {
        "total": 4,
        "initial": 0,
        "disable": True,
        "unit": "step",
        "dynamic_ncols": True,
        "desc": "r",
    }
    records = _records(folder)
    assert bar.updates == 4 and bar.closed
    assert bar.postfix == [
        {"loss": f"{r['train_loss']:.4g}", "samples/s": f"{r['samples_per_s']:.3g}"} for r in records
    ]
    (board,) = boards
    assert board.args == (folder / "tensorboard", False, 0) and board.written == records and board.closed


def test_the_bar_shows_unless_quiet_and_the_sink_is_on_when_configured(tmp_path, sinks, capsys, monkeypatch):
    """``quiet = False`` where bars are on (``MEANFIELD_PROGRESS=1``, :mod:`meanfield.progress`): the bar is
    enabled; ``train.tensorboard = true``: the sink is enabled. Where they are off (``0``, or stderr not a
    terminal as under pytest) the bar is disabled although not quiet."""
    monkeypatch.setenv("MEANFIELD_PROGRESS", "1")
    _run(tmp_path / "r", ["train.tensorboard=true"], quiet=False)
    bars, boards = sinks
    assert bars[0].kwargs["disable"] is False and boards[0].args[1] is True
    monkeypatch.setenv("MEANFIELD_PROGRESS", "0")
    _run(tmp_path / "r2", quiet=False)
    assert bars[1].kwargs["disable"] is True


def test_a_resume_continues_the_plain_loop_and_records_where_it_resumed(tmp_path, sinks, rng_kept):
    """A run stopped by an error after step 3 (checkpoint 2) and resumed: ``on_step`` sees 3 and 4, the bar
    starts at 2, the sink from step 2; the line at step 4 is the mean of the plain losses of steps 3 and 4
    (the window restarts at the checkpoint's line); the final parameters are the plain loop's; the summary
    says finished; environment.json says ``resumed_from_step = 2`` and keeps the first record (without it)
    in ``earlier``."""
    folder = tmp_path / "r"

    def stop(step):
        if step == 3:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="^stop$"):
        _run(folder, on_step=stop)
    assert _summary(folder)["status"] == "failed" and _summary(folder)["error"] == "RuntimeError: stop"
    first_env = json.loads((folder / "environment.json").read_text())
    steps_seen = []
    result = _run(folder, resume=True, on_step=steps_seen.append)
    losses, states, _, _ = _plain_loop(4)
    assert steps_seen == [3, 4] and result.status == "finished" and result.step == 4
    bars, boards = sinks
    assert bars[-1].kwargs["initial"] == 2 and bars[-1].updates == 2 and boards[-1].args[2] == 2
    records = _records(folder)
    assert [r["step"] for r in records] == [2, 4]
    assert records[0]["train_loss"] == (losses[0] + losses[1]) / 2
    assert records[1]["train_loss"] == (losses[2] + losses[3]) / 2
    assert _equal_states(Checkpoints(folder / "checkpoints").load(4)["model"], states[4])
    env = json.loads((folder / "environment.json").read_text())
    assert env["resumed_from_step"] == 2 and env["world_size"] == 1
    assert env["earlier"] == [{k: v for k, v in first_env.items() if k != "earlier"}]
    assert "resumed_from_step" not in first_env


def test_resuming_a_finished_run_changes_nothing(tmp_path, sinks, monkeypatch):
    """A finished run resumed: no step, no bar, environment.json and metrics.jsonl byte for byte as they were,
    the summary rewritten as finished (the only summary written)."""
    folder = tmp_path / "r"
    _run(folder)
    env, metrics = (folder / "environment.json").read_bytes(), (folder / "metrics.jsonl").read_bytes()
    bars, boards = sinks
    bars.clear()
    statuses = _statuses(monkeypatch)
    steps_seen = []
    result = _run(folder, resume=True, on_step=steps_seen.append)
    assert (result.status, result.step, steps_seen, bars, statuses) == ("finished", 4, [], [], ["finished"])
    assert (folder / "environment.json").read_bytes() == env and (
        folder / "metrics.jsonl"
    ).read_bytes() == metrics


def test_sigterm_stops_after_the_step_with_a_checkpoint_and_an_interrupted_summary(
    tmp_path, monkeypatch, rng_kept
):
    """SIGTERM during step 3 of 5 (no periodic checkpoints): RunInterrupted with the exact message and
    signum 15, no step 4 taken, the checkpoint of step 3 (the plain loop's parameters), the summary
    written once as interrupted with the final values of the line at step 2; the resume finishes as the plain
    loop of 5 steps does."""
    folder = tmp_path / "r"
    statuses = _statuses(monkeypatch)
    steps_seen = []

    def term(step):
        steps_seen.append(step)
        if step == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    extra = ["train.steps=5", "train.checkpoint_every=0"]
    with pytest.raises(loop.RunInterrupted) as caught:
        _run(folder, extra, on_step=term)
    assert str(caught.value) == "interrupted by SIGTERM at step 3; checkpoint written, continue with --resume"
    assert caught.value.signum == signal.SIGTERM and steps_seen == [1, 2, 3]
    assert statuses == ["running", "interrupted"]
    losses, states, _, _ = _plain_loop(5)
    assert Checkpoints(folder / "checkpoints").steps() == [3]
    assert _equal_states(Checkpoints(folder / "checkpoints").load(3)["model"], states[3])
    summary = _summary(folder)
    assert (summary["status"], summary["step"], "error" in summary) == ("interrupted", 3, False)
    assert summary["final"] == {
        "train_loss": (losses[0] + losses[1]) / 2,
        "beta": _records(folder)[0]["beta"],
    }
    assert _run(folder, extra, resume=True).status == "finished"
    assert _equal_states(Checkpoints(folder / "checkpoints").load(5)["model"], states[5])


def test_a_ctrl_c_stop_names_sigint(tmp_path):
    """SIGINT at step 1: the message names SIGINT and step 1, signum 2, checkpoint 1 written."""

    def interrupt(step):
        os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(loop.RunInterrupted) as caught:
        _run(tmp_path / "r", on_step=interrupt)
    assert str(caught.value) == "interrupted by SIGINT at step 1; checkpoint written, continue with --resume"
    assert caught.value.signum == 2 and Checkpoints(tmp_path / "r" / "checkpoints").steps() == [1]


def test_a_keyboard_interrupt_writes_an_interrupted_summary_and_no_checkpoint(tmp_path, monkeypatch):
    """A KeyboardInterrupt at step 3 (a second Ctrl-C): re-raised, the summary rewritten from ``running`` to
    ``interrupted`` at step 3 without an error, no checkpoint beyond step 2."""
    statuses = _statuses(monkeypatch)

    def stop(step):
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "r", on_step=stop)
    summary = _summary(tmp_path / "r")
    assert (summary["status"], summary["step"], "error" in summary) == ("interrupted", 3, False)
    assert statuses == ["running", "interrupted"]
    assert Checkpoints(tmp_path / "r" / "checkpoints").steps() == [2]


class _NanAt(_Recording):
    """The teacher-student task whose loss becomes ``value`` from call ``at`` on."""

    def __init__(self, at: int, value: float) -> None:
        super().__init__()
        self.at, self.value = at, value

    def build(self, data, model, **kwargs):
        experiment = super().build(data, model, **kwargs)
        inner, calls = experiment.loss, [0]

        def loss(batch):
            calls[0] += 1
            out = inner(batch)
            return out * self.value if calls[0] >= self.at else out

        experiment.loss = loss
        return experiment


@pytest.mark.parametrize(
    "at,value,every,latest",
    [(3, float("nan"), 2, 2), (2, float("inf"), 0, None)],
    ids=["nan_after_a_checkpoint", "inf_without_one"],
)
def test_a_non_finite_loss_stops_as_diverged_naming_the_step_and_the_checkpoint(
    tmp_path, monkeypatch, at, value, every, latest
):
    """The loss turns NaN at step 3 (checkpoint 2 kept) or Inf at step 2 (no checkpoint): the exact message
    (the step, the value, the checkpoint's path or that there is none), ``step`` kept, the summary written
    once as diverged with the first part of the message as its error."""
    monkeypatch.setitem(tasks.TASKS, "nan_at", _NanAt(at, value))
    statuses = _statuses(monkeypatch)
    folder = tmp_path / "r"
    with pytest.raises(loop.NonFiniteLossError) as caught:
        _run(folder, ["task=nan_at", f"train.checkpoint_every={every}"])
    first = f"the training loss is {value} at step {at}"
    where = (
        "none (the run must start again)"
        if latest is None
        else str(Checkpoints(folder / "checkpoints").path(latest))
    )
    assert (
        str(caught.value)
        == f"{first}; the run stopped, the last checkpoint with finite parameters is {where}"
    )
    assert caught.value.step == at and caught.value.__cause__ is None
    summary = _summary(folder)
    assert (summary["status"], summary["step"], summary["error"]) == ("diverged", at - 1, first)
    assert statuses == ["running", "diverged"]


@pytest.mark.parametrize("summary_fails", [False, True], ids=["summary_written", "summary_fails_too"])
@pytest.mark.parametrize("kind", ["disk_full", "other"])
def test_a_failure_is_re_raised_with_a_failed_summary_even_if_that_summary_cannot_be_written(
    tmp_path, monkeypatch, kind, summary_fails
):
    """An error at step 3: the same object is re-raised; the summary says failed with the error — a full disk
    by its own message, any other error as ``Type: message``; if writing that summary raises OSError too
    (a full disk), the original error still comes out and the summary stays ``running``."""
    import errno

    raised = (
        DiskFullError(errno.ENOSPC, "no space left on device writing x; the checkpoints are intact")
        if kind == "disk_full"
        else RuntimeError("stop")
    )
    real = loop._Run._write_summary

    def write(self, status, final, error=None):
        if status == "failed" and summary_fails:
            raise OSError(errno.ENOSPC, "full")
        return real(self, status, final, error)

    monkeypatch.setattr(loop._Run, "_write_summary", write)

    def fail(step):
        if step == 3:
            raise raised

    with pytest.raises(type(raised)) as caught:
        _run(tmp_path / "r", on_step=fail)
    assert caught.value is raised
    summary = _summary(tmp_path / "r")
    if summary_fails:
        assert summary["status"] == "running"
    else:
        expected = (
            "no space left on device writing x; the checkpoints are intact"
            if kind == "disk_full"
            else "RuntimeError: stop"
        )
        assert (summary["status"], summary["step"], summary["error"]) == ("failed", 3, expected)


def test_a_resume_under_other_code_warns_from_the_callers_line_and_a_fresh_run_does_not(
    tmp_path, monkeypatch
):
    """``record_environment`` reporting a provenance change (emulated): a resume at step 2 warns with the exact
    text, attributed to the caller of ``run`` (this file); a fresh run given the same report warns nothing."""
    monkeypatch.setattr(loop, "record_environment", lambda path, env: ["commit: aaa → bbb"])
    folder = tmp_path / "r"

    def stop(step):
        if step == 3:
            raise RuntimeError("stop")

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        with pytest.raises(RuntimeError, match="^stop$"):
            _run(folder, on_step=stop)
    with pytest.warns(UserWarning) as caught:
        _run(folder, resume=True)
    (warning,) = caught
    assert str(warning.message) == (
        f"{folder} resumes at step 2 under other code than its earlier steps: commit: aaa → bbb (the earlier "
        "records are kept in environment.json's 'earlier')"
    )
    assert UNDER_MUTMUT or Path(warning.filename).resolve() == HERE


def test_a_resume_on_another_process_count_warns_from_runs_line(tmp_path):
    """The warning of ``_restore`` (environment.json says 2 processes) is attributed to ``run`` in loop.py
    (``stacklevel = 3``: ``_restore`` ← ``_Run.__init__`` ← ``run``)."""
    folder = tmp_path / "r"

    def stop(step):
        if step == 3:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        _run(folder, on_step=stop)
    env = folder / "environment.json"
    env.write_text(json.dumps({**json.loads(env.read_text()), "world_size": 2}))
    with pytest.warns(UserWarning, match=r"ran on 2 process\(es\) and resumes on 1") as caught:
        _run(folder, resume=True)
    assert UNDER_MUTMUT or [Path(w.filename).resolve() for w in caught] == [LOOP_FILE]


# ======================================================================================================
# _record, _evaluate, _one_step, _checkpoint, _final, _finish on stand-ins
# ======================================================================================================


def _recording_run(step, *, log=2, evaluate=0, window=None, window_metrics=None):
    evaluated = []
    fake = SimpleNamespace(
        cfg=SimpleNamespace(train=SimpleNamespace(log_every=log, eval_every=evaluate, free_energy=False)),
        window=window if window is not None else {"loss_sum": 3.0, "n": 2, "time": 0.5},
        step=step,
        elapsed=7.25,
        experiment=SimpleNamespace(unit="tokens", units_per_step=10, window_metrics=window_metrics),
        optimizer=SimpleNamespace(
            param_groups=[{"noise": True, "beta": 0.5, "step": step}], last_stats=None, last_group_stats=None
        ),
        _evaluate=lambda: (evaluated.append(step), {"val_loss": 1.25})[1],
    )
    return fake, evaluated


def test_record_is_due_at_log_and_eval_steps_and_at_the_end():
    """``_record``: None (the window untouched, the same object) off the schedule; at a multiple of
    ``log_every`` the line is step, time, the window's mean loss 3/2, its rate 2·10/0.5 = 40 tokens/s, β, and
    the window restarts; a multiple of ``eval_every`` or the final step adds the evaluation; ``eval_every =
    0`` evaluates only at the end."""
    fake, evaluated = _recording_run(3)
    window = fake.window
    assert loop._Run._record(fake, final=False) is None and fake.window is window
    fake, evaluated = _recording_run(4)
    assert loop._Run._record(fake, final=False) == {
        "step": 4,
        "time": 7.25,
        "train_loss": 1.5,
        "tokens_per_s": 40.0,
        "beta": 0.5,
    }
    assert fake.window == {"loss_sum": 0.0, "n": 0, "time": 0.0} and evaluated == []
    fake, evaluated = _recording_run(3, evaluate=3)
    assert loop._Run._record(fake, final=False)["val_loss"] == 1.25 and evaluated == [3]
    fake, evaluated = _recording_run(4, evaluate=3)
    assert "val_loss" not in loop._Run._record(fake, final=False) and evaluated == []
    fake, evaluated = _recording_run(5, evaluate=0)
    record = loop._Run._record(fake, final=True)
    assert (record["step"], record["val_loss"], evaluated) == (5, 1.25, [5])
    fake, evaluated = _recording_run(6, log=4, evaluate=0)
    assert loop._Run._record(fake, final=False) is None and evaluated == []


def test_record_of_an_empty_or_instant_window_and_window_metrics():
    """An empty window (n = 0) has no loss and no rate; a window of no time has rate None; the task's window
    metrics join the line after β."""
    fake, _ = _recording_run(2, window={"loss_sum": 0.0, "n": 0, "time": 0.0})
    assert loop._Run._record(fake, final=False) == {"step": 2, "time": 7.25, "beta": 0.5}
    fake, _ = _recording_run(2, window={"loss_sum": 1.0, "n": 1, "time": 0.0})
    assert loop._Run._record(fake, final=False)["tokens_per_s"] is None
    fake, _ = _recording_run(2, window_metrics=lambda: {"grad_var": 0.125})
    record = loop._Run._record(fake, final=False)
    assert list(record) == ["step", "time", "train_loss", "tokens_per_s", "beta", "grad_var"]
    assert record["grad_var"] == 0.125


def _evaluating(metrics, allowed=()):
    model = torch.nn.Linear(1, 1)
    seen = []

    def evaluate():
        seen.append((model.training, torch.is_grad_enabled()))
        if isinstance(metrics, BaseException):
            raise metrics
        return metrics

    fake = SimpleNamespace(
        step=4, experiment=SimpleNamespace(model=model, evaluate=evaluate, nonfinite_metrics=allowed)
    )
    return fake, model, seen


def test_evaluate_runs_in_eval_mode_without_grad_and_gives_floats():
    """``_evaluate``: the task's evaluate runs with the model in eval mode and no grad; tensors and ints come
    back as floats; the model is back in training mode afterwards, also when evaluate raises."""
    fake, model, seen = _evaluating({"a": torch.tensor(1.5), "b": 2})
    metrics = loop._Run._evaluate(fake)
    assert metrics == {"a": 1.5, "b": 2.0} and all(type(v) is float for v in metrics.values())
    assert seen == [(False, False)] and model.training is True
    fake, model, seen = _evaluating(RuntimeError("broken"))
    with pytest.raises(RuntimeError, match="^broken$"):
        loop._Run._evaluate(fake)
    assert model.training is True


def test_evaluate_stops_on_a_non_finite_metric_the_task_does_not_allow():
    """NaN and Inf metrics are named in order with their values (exact message, ``step`` 4); the ones the
    task declares may be non-finite are left out of it, and when all are declared the values come back."""
    metrics = {"a": float("nan"), "b": float("inf"), "c": 1.0, "d": float("-inf")}
    fake, _, _ = _evaluating(metrics)
    with pytest.raises(loop.NonFiniteLossError) as caught:
        loop._Run._evaluate(fake)
    assert (
        str(caught.value) == "the evaluation at step 4 gave a = nan, b = inf, d = -inf"
        and caught.value.step == 4
    )
    fake, _, _ = _evaluating(metrics, allowed=("a", "d"))
    with pytest.raises(loop.NonFiniteLossError, match=r"^the evaluation at step 4 gave b = inf$"):
        loop._Run._evaluate(fake)
    fake, _, _ = _evaluating(metrics, allowed=("a", "b", "d"))
    out = loop._Run._evaluate(fake)
    assert math.isnan(out["a"]) and out["b"] == math.inf and out["c"] == 1.0


def _stepping(loss_value=None, on_backward=None, step_error=None):
    """A stand-in ``_Run`` of the TINY experiment and optimizer at step 5, one process."""
    cfg = check_config(_resolved())
    experiment = loop.build_experiment(cfg, CPU)
    optimizer = build_optimizer(experiment.model, cfg)
    batch = torch.arange(16)
    experiment.next_batch = lambda: batch
    if loss_value is not None:
        inner = experiment.loss
        experiment.loss = lambda b: inner(b) * loss_value
    experiment.on_backward = on_backward
    if step_error is not None:

        def step():
            raise step_error

        optimizer.step = step
    fake = SimpleNamespace(
        experiment=experiment,
        optimizer=optimizer,
        data_parallel=False,
        sharded=False,
        rank=0,
        world=1,
        cfg=cfg,
        device=CPU,
        step=5,
    )
    return fake, batch


def test_one_step_returns_the_batch_loss_and_steps_after_on_backward():
    """``_one_step``: returns the loss of the batch (computed directly before, float32 exact); ``on_backward``
    runs with the gradients there and the parameters not yet moved; the parameters move after."""
    seen = []
    holder = {}

    def on_backward():
        model = holder["fake"].experiment.model
        seen.append(
            (
                all(p.grad is not None for p in model.parameters()),
                _equal_states(model.state_dict(), holder["before"]),
            )
        )

    fake, batch = _stepping(on_backward=on_backward)
    holder["fake"] = fake
    holder["before"] = {k: v.clone() for k, v in fake.experiment.model.state_dict().items()}
    with torch.no_grad():
        expected = float(fake.experiment.loss(batch))
    assert loop._Run._one_step(fake) == expected
    assert seen == [(True, True)]
    assert not _equal_states(fake.experiment.model.state_dict(), holder["before"])
    assert fake.step == 5  # the caller counts the steps


@pytest.mark.parametrize("value,text", [(float("nan"), "nan"), (float("inf"), "inf")], ids=["nan", "inf"])
def test_one_step_refuses_a_non_finite_loss_before_any_backward(value, text):
    """A NaN or Inf loss at step 6: the exact message and ``step = 6``; no backward ran (no gradient) and
    no parameter moved."""
    fake, _ = _stepping(loss_value=value)
    before = {k: v.clone() for k, v in fake.experiment.model.state_dict().items()}
    with pytest.raises(loop.NonFiniteLossError) as caught:
        loop._Run._one_step(fake)
    assert str(caught.value) == f"the training loss is {text} at step 6" and caught.value.step == 6
    assert all(p.grad is None for p in fake.experiment.model.parameters())
    assert _equal_states(fake.experiment.model.state_dict(), before)


def test_one_step_turns_a_non_finite_gradient_refusal_into_a_non_finite_loss_error():
    """``Langevin.step``'s refusal of a non-finite gradient (a ValueError saying ``non-finite``) becomes
    ``step 6: <its message>``; any other ValueError comes out unchanged."""
    refusal = ValueError("the gradient of parameter 0 has 1 non-finite entries (NaN or Inf)")
    fake, _ = _stepping(step_error=refusal)
    with pytest.raises(loop.NonFiniteLossError) as caught:
        loop._Run._one_step(fake)
    assert str(caught.value) == f"step 6: {refusal}" and caught.value.step == 6
    other = ValueError("something else")
    fake, _ = _stepping(step_error=other)
    with pytest.raises(ValueError) as caught:
        loop._Run._one_step(fake)
    assert caught.value is other


def test_a_real_non_finite_gradient_stops_a_run(tmp_path, monkeypatch):
    """A task whose gradient is NaN while its loss is finite (a hook on the backward): the run stops at step
    1 with ``step 1: <Langevin's message>`` and no checkpoint."""

    class NanGrad(_Recording):
        def build(self, data, model, **kwargs):
            experiment = super().build(data, model, **kwargs)

            def poison():
                for p in experiment.model.parameters():
                    p.grad.fill_(float("nan"))

            experiment.on_backward = poison
            return experiment

    monkeypatch.setitem(tasks.TASKS, "nan_grad", NanGrad())
    with pytest.raises(
        loop.NonFiniteLossError, match=r"^step 1: the gradient of parameter 0 .*non-finite"
    ) as caught:
        _run(tmp_path / "r", ["task=nan_grad"])
    assert caught.value.step == 1
    assert str(caught.value).endswith(
        "the last checkpoint with finite parameters is none (the run must start again)"
    )


class _Saves:
    def __init__(self, latest=None):
        self._latest, self.saved = latest, []

    def latest(self):
        return self._latest

    def save(self, state, step, meta=None):
        self.saved.append((state, step, meta))


def _checkpointing(*, lead=True, sharded=False, latest=None, finite=True):
    model = torch.nn.Linear(2, 1)
    if not finite:
        with torch.no_grad():
            model.weight[0, 1] = float("nan")
    states = []
    fake = SimpleNamespace(
        lead=lead,
        sharded=sharded,
        checkpoints=_Saves(latest),
        step=6,
        experiment=SimpleNamespace(model=model),
        _state=lambda: (states.append(1), {"marker": 1})[1],
        config_sha256="abc123",
        provenance={"commit": "c0ffee", "dirty": False},
        device=CPU,
    )
    return fake, states


def test_checkpoint_saves_once_a_step_with_the_hash_and_provenance():
    """``_checkpoint``: the lead saves ``_state()`` as step 6 with ``config_sha256`` and the provenance in
    its record; a step already saved is not saved again; non-finite parameters raise the exact message
    (``step`` 6) and save nothing; a rank that is neither the lead nor sharded does nothing at all, even with
    non-finite parameters."""
    fake, states = _checkpointing()
    loop._Run._checkpoint(fake)
    assert fake.checkpoints.saved == [
        ({"marker": 1}, 6, {"config_sha256": "abc123", "commit": "c0ffee", "dirty": False})
    ]
    fake, states = _checkpointing(latest=6)
    loop._Run._checkpoint(fake)
    assert fake.checkpoints.saved == [] and states == []
    fake, states = _checkpointing(latest=4)
    loop._Run._checkpoint(fake)
    assert [s for _, s, _ in fake.checkpoints.saved] == [6]
    fake, states = _checkpointing(finite=False)
    with pytest.raises(loop.NonFiniteLossError) as caught:
        loop._Run._checkpoint(fake)
    assert str(caught.value) == "the parameters are not finite after step 6" and caught.value.step == 6
    assert fake.checkpoints.saved == [] and states == []
    fake, states = _checkpointing(lead=False, finite=False, latest=None)
    assert loop._Run._checkpoint(fake) is None and states == [] and fake.checkpoints.saved == []


def test_sharded_checkpoints_agree_across_ranks(monkeypatch):
    """Sharded particles (another rank emulated): "already saved" is max-reduced and "finite" min-reduced,
    in that order; a rank that is not the lead gathers the state (``_state``) but saves nothing; another
    rank's saved flag skips the save, its non-finite flag raises on this rank."""
    other = {"saved": 0.0, "finite": 1.0}
    ops = []

    def all_reduce_scalar(value, device, op="sum"):
        ops.append(op)
        key = {"max": "saved", "min": "finite"}[op]
        return {"max": max, "min": min}[op](value, other[key])

    monkeypatch.setattr(loop.parallel, "all_reduce_scalar", all_reduce_scalar)
    fake, states = _checkpointing(lead=False, sharded=True)
    loop._Run._checkpoint(fake)
    assert ops == ["max", "min"] and states == [1] and fake.checkpoints.saved == []
    fake, states = _checkpointing(lead=True, sharded=True)
    loop._Run._checkpoint(fake)
    assert states == [1] and [s for _, s, _ in fake.checkpoints.saved] == [6]
    other["saved"] = 1.0
    fake, states = _checkpointing(lead=True, sharded=True)
    loop._Run._checkpoint(fake)
    assert states == [] and fake.checkpoints.saved == []
    other.update(saved=0.0, finite=0.0)
    fake, states = _checkpointing(lead=False, sharded=True)
    with pytest.raises(loop.NonFiniteLossError, match=r"^the parameters are not finite after step 6$"):
        loop._Run._checkpoint(fake)


def test_final_is_the_latest_value_of_each_metric_without_timings_and_statistics(tmp_path):
    """``_final`` of a log written here: the latest value of every key, over all lines (a key of an earlier
    line only is kept), without step, the timing keys, ``optim`` and ``groups``; an empty log gives {}."""
    path = tmp_path / "metrics.jsonl"
    lines = [
        {"step": 2, "time": 1.0, "train_loss": 0.5, "samples_per_s": 3.0, "beta": 0.1, "optim": {"n": 1}},
        {"step": 3, "test_mse": 0.2, "groups": [None], "tokens_per_s": 1.0, "step_time": 0.1},
        {"step": 4, "train_loss": 0.25, "particles_per_s": 2.0, "beta": 0.05},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    fake = SimpleNamespace(log=MetricsLog(path))
    assert loop._Run._final(fake) == {"train_loss": 0.25, "beta": 0.05, "test_mse": 0.2}
    assert loop._Run._final(SimpleNamespace(log=MetricsLog(tmp_path / "none.jsonl"))) == {}


def test_describe_latest_and_status(tmp_path):
    """``_describe_latest``: the latest checkpoint's path, or that there is none; ``_status``: summary.json's
    status."""
    checkpoints = Checkpoints(tmp_path / "checkpoints", keep=5)
    fake = SimpleNamespace(checkpoints=checkpoints, folder=tmp_path)
    assert loop._Run._describe_latest(fake) == "none (the run must start again)"
    checkpoints.save({"x": torch.zeros(1)}, 3)
    checkpoints.save({"x": torch.zeros(1)}, 7)
    assert loop._Run._describe_latest(fake) == str(tmp_path / "checkpoints" / "step-00000007.pt")
    (tmp_path / "summary.json").write_text(json.dumps({"status": "diverged"}))
    assert loop._Run._status(fake) == "diverged"


def test_finish_prints_the_summary_unless_quiet_and_draws_figures_when_asked(tmp_path, monkeypatch, capsys):
    """Not quiet: stdout is exactly ``<folder>: finished 4 steps in <wall_time_s, 1 decimal> s`` and the summary
    table of the final metrics; figures on: ``draw_figures`` (a recorder: drawing is tested in test_runs) gets
    the folder, every line and the unit; quiet with figures off: nothing printed, none drawn."""
    drawn = []
    monkeypatch.setattr(loop, "draw_figures", lambda *a: drawn.append(a))
    folder = tmp_path / "loud"
    capsys.readouterr()
    result = _run(folder, ["train.figures=true"], quiet=False)
    out = capsys.readouterr().out
    summary = _summary(folder)
    assert out == (
        f"{folder}: finished 4 steps in {summary['wall_time_s']:.1f} s\n{summary_table(summary['final'])}\n"
    )
    ((where, records, unit),) = drawn
    assert (where, records, unit) == (folder, _records(folder), "samples")
    assert result.final == summary["final"]
    drawn.clear()
    _run(tmp_path / "quiet")
    assert capsys.readouterr().out == "" and drawn == [] and not (tmp_path / "quiet" / "figures").exists()


def test_track_best_reads_val_and_test_prefixes_and_keeps_the_first_of_equal_values():
    """``_track_best``: ``val_*``/``test_*`` keep their minimum, ints accepted, an equal later value does not
    replace the first (strict comparison); keys with other names (``loss``, ``validation``) and booleans
    (``val_ok``) are ignored."""
    fake = SimpleNamespace(experiment=SimpleNamespace(higher_is_better=()), best={})
    loop._Run._track_best(
        fake, {"step": 1, "val_loss": 2, "test_err": 0.5, "loss": 0.1, "validation": 0.0, "val_ok": True}
    )
    loop._Run._track_best(fake, {"step": 2, "val_loss": 2.0, "test_err": 0.75})
    assert fake.best == {"val_loss": {"value": 2.0, "step": 1}, "test_err": {"value": 0.5, "step": 1}}
    assert type(fake.best["val_loss"]["value"]) is float
    loop._Run._track_best(fake, {"step": 3, "val_loss": 1.0, "test_err": 0.5})
    assert fake.best == {"val_loss": {"value": 1.0, "step": 3}, "test_err": {"value": 0.5, "step": 1}}


def test_another_rank_trains_but_writes_shows_and_prints_nothing(tmp_path, monkeypatch, sinks, capsys):
    """Rank 1 of 2 (the process group, the all-reduces and the barrier emulated): it takes the 4 steps
    (``on_step`` 1 … 4) but makes no folder, its bar is disabled although not quiet, its TensorBoard sink
    disabled although configured, nothing is printed; it returns what ``RunResult.load`` gives for the
    folder (the lead's summary; stubbed here)."""
    monkeypatch.setattr(loop.parallel, "process_group", lambda device: (1, 2, False))
    monkeypatch.setattr(loop.parallel, "all_reduce_scalar", lambda value, device, op="sum": 2 * value)
    monkeypatch.setattr(loop.parallel, "average_gradients", lambda model, world: None)
    barriers = []
    monkeypatch.setattr(loop._Run, "_barrier", lambda self: barriers.append(self.step))
    loaded = []
    monkeypatch.setattr(loop.RunResult, "load", lambda path: (loaded.append(path), "the lead's result")[1])
    folder = tmp_path / "rank1"
    steps_seen = []
    capsys.readouterr()
    result = _run(
        folder, ["train.tensorboard=true", "train.figures=true"], quiet=False, on_step=steps_seen.append
    )
    assert result == "the lead's result" and loaded == [folder]
    assert steps_seen == [1, 2, 3, 4] and not folder.exists()
    bars, boards = sinks
    assert bars[0].kwargs["disable"] is True and boards[0].args[1] is False
    assert capsys.readouterr().out == ""
    assert barriers == [0, 4, 4]  # before writing the folder; after the steps; after the summary


def test_barrier_waits_only_with_several_processes(monkeypatch):
    """``_barrier``: ``torch.distributed.barrier`` once with 2 processes, never with 1."""
    import torch.distributed as dist

    calls = []
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: calls.append(a))
    loop._Run._barrier(SimpleNamespace(world=1))
    assert calls == []
    loop._Run._barrier(SimpleNamespace(world=2))
    assert calls == [()]


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


def test_checkpoint_state_holds_the_values_it_is_given_and_a_copy_of_the_window():
    """``_checkpoint_state``: the step, the model's, optimizer's and batches' states, torch's generator
    state, the elapsed and wall times as given, and a copy of the window (a later change of the running
    window does not reach it)."""
    cfg = check_config(_resolved())
    experiment = loop.build_experiment(cfg, CPU)
    optimizer = build_optimizer(experiment.model, cfg)
    window = {"loss_sum": 1.5, "n": 2, "time": 0.25}
    state = loop._checkpoint_state(experiment, optimizer, 3, window, 1.25, 9.5)
    assert list(state) == ["step", "model", "optimizer", "batches", "torch_rng", "window", "elapsed", "wall"]
    assert (state["step"], state["elapsed"], state["wall"]) == (3, 1.25, 9.5)
    window["n"] += 1
    assert state["window"] == {"loss_sum": 1.5, "n": 2, "time": 0.25}
    assert _equal_states(state["model"], experiment.model.state_dict())
    assert _same(state["batches"], experiment.batches.state_dict())
    assert _same(state["optimizer"], optimizer.state_dict())
    assert torch.equal(state["torch_rng"], torch.get_rng_state())


def test_horizonless_schedule_tables_get_no_t():
    """A ``step`` or ``constant`` β table has no horizon: it reaches the optimizer as that schedule, no ``T``
    added (a ``T`` would be refused as an unknown field); a ``linear`` one gets ``T = train.steps``."""
    from meanfield.drift.schedules import Constant, Step

    for table, expected in (
        ({"kind": "step", "values": [1.0, 0.5], "boundaries": [2.0]}, Step([1.0, 0.5], [2.0])),
        ({"kind": "constant", "value": 0.25}, Constant(0.25)),
        ({"kind": "linear", "start": 1.0, "end": 0.5}, Linear(1.0, 0.5, 4.0)),
    ):
        config = _resolved()
        config["optim"]["beta"] = table
        cfg = check_config(config)
        (group,) = build_optimizer(loop.build_experiment(cfg, CPU).model, cfg).param_groups
        assert group["beta"] == expected and "T" not in table


def test_a_resume_of_a_run_that_saved_no_checkpoint_starts_over_silently(tmp_path, rng_kept):
    """Stopped by an error at step 1 (the first checkpoint is due at 2): the resume warns nothing (nothing
    was damaged), empties the log and runs steps 1 … 4 again, reaching the plain loop's parameters."""
    folder = tmp_path / "r"

    def stop(step):
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="^stop$"):
        _run(folder, on_step=stop)
    assert Checkpoints(folder / "checkpoints").steps() == []
    steps_seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        result = _run(folder, resume=True, on_step=steps_seen.append)
    assert steps_seen == [1, 2, 3, 4] and result.status == "finished"
    assert [r["step"] for r in _records(folder)] == [2, 4]
    assert _equal_states(Checkpoints(folder / "checkpoints").load(4)["model"], _plain_loop(4)[1][4])
