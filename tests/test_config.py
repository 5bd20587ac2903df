"""Configurations: presets, overrides, strict schemas with suggestions, TOML round trip."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meanfield.config import (
    ConfigError,
    from_dict,
    load_toml,
    load_toml_text,
    parse_override,
    resolve,
    to_toml,
)

RAW = {
    "task": "teacher_student",
    "seed": 0,
    "train": {"steps": 100, "batch_size": 8},
    "optim": {"lr": 0.1, "beta": {"kind": "cosine", "start": 1.0, "end": 0.01}},
    "presets": {"smoke": {"train": {"steps": 5}}, "quick": {"seed": 3}},
}


def test_preset_merges_key_by_key_and_overrides_come_after():
    c = resolve(RAW, "smoke", ["train.batch_size=2", "optim.beta.end=1e-3", "data.dataset=wikitext2"])
    assert "presets" not in c
    assert c["train"] == {"steps": 5, "batch_size": 2}  # preset changed steps only; override batch_size
    assert c["optim"]["beta"] == {"kind": "cosine", "start": 1.0, "end": 1e-3}
    assert c["data"]["dataset"] == "wikitext2"  # not TOML: taken as a string
    assert RAW["train"]["steps"] == 100  # the input is not changed


def test_presets_joined_by_plus_apply_left_to_right():
    raw = {**RAW, "presets": {**RAW["presets"], "arm": {"train": {"steps": 7}, "optim": {"lr": 0.5}}}}
    c = resolve(raw, "smoke+quick+arm")
    assert c["train"]["steps"] == 7 and c["seed"] == 3 and c["optim"]["lr"] == 0.5
    assert resolve(raw, "arm+smoke")["train"]["steps"] == 5  # the later preset wins
    with pytest.raises(ConfigError, match="unknown preset 'nope'"):
        resolve(raw, "smoke+nope")


def test_unknown_preset_lists_the_defined_ones():
    with pytest.raises(
        ConfigError, match=r"unknown preset 'smok'.*\['quick', 'smoke'\].*did you mean 'smoke'"
    ):
        resolve(RAW, "smok")


@pytest.mark.parametrize(
    ("text", "path", "value"),
    [
        ("train.steps=50", ["train", "steps"], 50),
        ("optim.lr=1e-3", ["optim", "lr"], 1e-3),
        ("train.figures=false", ["train", "figures"], False),
        ("model.sizes=[8, 16]", ["model", "sizes"], [8, 16]),
        (
            'optim.beta={kind="linear", start=1, end=0}',
            ["optim", "beta"],
            {"kind": "linear", "start": 1, "end": 0},
        ),
        ("device=cuda:1", ["device"], "cuda:1"),
        ('description="a b"', ["description"], "a b"),
    ],
)
def test_override_values_are_read_as_toml_or_string(text, path, value):
    assert parse_override(text) == (path, value)


@pytest.mark.parametrize("text", ["steps", "=3", "a..b=1"])
def test_malformed_override_is_refused(text):
    with pytest.raises(ConfigError, match="key.sub=value"):
        parse_override(text)


def test_override_through_a_value_is_refused():
    with pytest.raises(ConfigError, match="seed is a value, not a table"):
        resolve(RAW, None, ["seed.x=1"])


@dataclass
class _Inner:
    steps: int = 10
    rate: float = 0.5
    name: str = "x"
    sizes: list[int] = field(default_factory=list)
    bound: float | None = None


@dataclass
class _Outer:
    task: str
    inner: _Inner = field(default_factory=_Inner)


def test_from_dict_builds_nested_and_coerces_int_to_float():
    out = from_dict(_Outer, {"task": "t", "inner": {"steps": 3, "rate": 2, "sizes": [1, 2], "bound": 1}})
    assert out.inner.steps == 3 and out.inner.rate == 2.0 and isinstance(out.inner.rate, float)
    assert out.inner.bound == 1.0 and isinstance(out.inner.bound, float)


def test_unknown_key_lists_valid_keys_and_suggests_the_nearest():
    with pytest.raises(ConfigError) as info:
        from_dict(_Outer, {"task": "t", "inner": {"stpes": 3}})
    message = str(info.value)
    assert "'inner.stpes'" in message and "bound, name, rate, sizes, steps" in message
    assert "did you mean 'steps'" in message


@pytest.mark.parametrize(
    ("table", "pattern"),
    [
        ({"task": "t", "inner": {"steps": 2.5}}, r"inner.steps must be an integer, got 2.5"),
        ({"task": "t", "inner": {"steps": True}}, r"inner.steps must be an integer"),
        ({"task": "t", "inner": {"rate": "fast"}}, r"inner.rate must be a number, got 'fast'"),
        ({"task": "t", "inner": {"sizes": [1, "a"]}}, r"inner.sizes must be a list of an integer"),
        ({"task": "t", "inner": 3}, r"inner must be a table"),
        ({}, r"missing key 'task'"),
    ],
)
def test_wrong_types_name_the_key_the_value_and_the_type(table, pattern):
    with pytest.raises(ConfigError, match=pattern):
        from_dict(_Outer, table)


def test_load_toml_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_toml(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("task = \n")
    with pytest.raises(ConfigError, match=r"bad.toml is not valid TOML"):
        load_toml(bad)


_keys = st.text(alphabet="abcdefghij_-.", min_size=1, max_size=6)
_scalars = st.one_of(
    st.integers(-(2**62), 2**62),
    st.floats(allow_nan=False, allow_infinity=True),
    st.booleans(),
    st.text(max_size=8),
)
_values = st.one_of(_scalars, st.lists(st.integers(-5, 5), max_size=3))
_tables = st.recursive(
    st.dictionaries(_keys, _values, max_size=4),
    lambda inner: st.dictionaries(_keys, st.one_of(_values, inner), max_size=3),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(_tables)
def test_to_toml_round_trips(config):
    assert load_toml_text(to_toml(config, header="a comment\nover two lines")) == config
