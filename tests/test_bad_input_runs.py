"""Bad input to ``meanfield run`` and to the data generators/samplers: a clear error or a correct result.

Property tests (hypothesis): ``meanfield run`` with one override drawn from valid and invalid keys and
values must exit 0 (and leave a finished run) or exit 2 with one line on stderr that names the key, and
must never leave a ``config.toml`` behind when it refused to start. The data generators and samplers must
raise a ``ValueError``/``TypeError`` naming the argument, or return data of the promised shape.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meanfield import cli
from meanfield.data import Batches, TokenBatches, teacher_student

ROOT = Path(__file__).resolve().parents[1]
TEACHER = ROOT / "experiments" / "teacher_student" / "config.toml"

KEYS = [
    "seed",
    "device",
    "dtype",
    "threads",
    "task",
    "data.d",
    "data.k",
    "data.activation",
    "data.n_train",
    "data.label_noise",
    "model.n_particles",
    "model.A",
    "model.sphere",
    "optim.lr",
    "optim.beta",
    "optim.drift",
    "optim.eps",
    "optim.betas",
    "optim.projection",
    "train.batch_size",
    "train.log_every",
    "train.keep_checkpoints",
    "train.eval_every",
    "optim.lrr",  # unknown keys
    "train.stepz",
    "modle.n_particles",
]
VALUES = [
    "0",
    "-1",
    "1",
    "3",
    "0.5",
    "-0.5",
    "1e308",
    "nan",
    "inf",
    "true",
    '"text"',
    "[1, 2]",
    "[]",
    "{}",
    '{kind="cosine", start=1e-3, end=0}',
    '{kind="linear", start=1e-3, end=-1}',
    '{kind="sphere", radius=1.0}',
    '{kind="nope"}',
    "cuda:7",
    "float16",
]

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@SETTINGS
@given(key=st.sampled_from(KEYS), value=st.sampled_from(VALUES))
def test_meanfield_run_one_bad_override(tmp_path_factory, capsys, key, value):
    out = tmp_path_factory.mktemp("run") / "r"
    argv = ["run", str(TEACHER), "--preset", "smoke", "--quiet", "--out", str(out)]
    argv += ["--set", "train.steps=2", "--set", "train.figures=false", "--set", f"{key}={value}"]
    code = cli.main(argv)  # an exception here is a traceback: the test fails
    err = capsys.readouterr().err.strip()
    assert code in (0, 2), (code, err)
    if code == 0:
        assert (out / "summary.json").is_file() and (out / "checkpoints").is_dir()
        return
    assert len(err.splitlines()) == 1, err
    leaf = key.split(".")[-1]
    named = leaf in err or key in err or "temperature" in err or "beta" in err or "task" in err
    assert named, f"the error does not name {key}: {err}"
    assert not (out / "config.toml").exists()  # refused before anything was written


NUMBERS = st.one_of(
    st.integers(-3, 5),
    st.sampled_from([0.5, math.nan, math.inf, -math.inf, 2**70, True, "3", None, [2]]),
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    d=NUMBERS,
    n_train=NUMBERS,
    k=NUMBERS,
    label_noise=st.sampled_from([0.0, 0.1, -0.1, math.nan, math.inf, "x"]),
    activation=st.sampled_from(["relu", "he2", "nope", 3]),
    directions=st.sampled_from(["orthonormal", "random", "diagonal", None]),
)
def test_teacher_student_arguments(d, n_train, k, label_noise, activation, directions):
    args = {"k": k, "label_noise": label_noise, "activation": activation, "directions": directions}
    try:
        ts = teacher_student(d, n_train, 4, **args, seed=0)
    except (ValueError, TypeError) as error:
        message = str(error)
        assert any(name in message for name in ("d", "n_train", *args)), message
        return
    assert ts.x_train.shape == (n_train, d) and ts.y_train.shape == (n_train,)
    assert ts.directions.shape == (k, d) and bool(torch.isfinite(ts.y_train).all())


@settings(max_examples=60, deadline=None, derandomize=True)
@given(n=NUMBERS, batch_size=NUMBERS, block_size=NUMBERS, length=st.sampled_from([0, 1, 5, 40]))
def test_samplers_arguments(n, batch_size, block_size, length):
    try:
        batches = Batches(n, batch_size, seed=0)
    except (ValueError, TypeError) as error:
        assert "n" in str(error) or "batch_size" in str(error), str(error)
    else:
        index = batches.next_indices()
        assert index.dtype == torch.int64 and index.numel() == batch_size and int(index.max()) < n
    tokens = torch.arange(length)
    try:
        sampler = TokenBatches(tokens, block_size, batch_size, seed=0)
    except (ValueError, TypeError) as error:
        message = str(error)
        assert "block_size" in message or "batch_size" in message or "tokens" in message, message
    else:
        x, y = sampler.next_batch()
        assert x.shape == y.shape == (batch_size, block_size) and torch.equal(x[:, 1:], y[:, :-1])


def test_the_property_tests_see_both_outcomes(tmp_path, capsys):
    """Negative control of the run property: a valid override runs (0), an unknown key is refused (2)."""
    base = ["run", str(TEACHER), "--preset", "smoke", "--quiet", "--set", "train.steps=2"]
    assert cli.main([*base, "--set", "optim.lr=0.01", "--out", str(tmp_path / "ok")]) == 0
    assert cli.main([*base, "--set", "optim.lrr=0.01", "--out", str(tmp_path / "bad")]) == 2
    assert "lrr" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["train.steps=0", "train.steps=-3", "train.steps=1.5"])
def test_train_steps_refused(tmp_path, capsys, bad):
    code = cli.main(["run", str(TEACHER), "--preset", "smoke", "--set", bad, "--out", str(tmp_path / "r")])
    assert code == 2 and "train.steps" in capsys.readouterr().err
