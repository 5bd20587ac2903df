"""Configurations: presets, overrides, strict schemas with suggestions, TOML round trip."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from meanfield import config as mconfig
from meanfield.config import (
    ConfigError,
    from_dict,
    load_toml,
    load_toml_text,
    parse_override,
    resolve,
    to_toml,
)
from meanfield.runs.schema import TrainConfig

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
import sys
from typing import Literal

from meanfield.config import set_key

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib
import dataclasses
import typing
from typing import Any

from meanfield import config as cfg

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


@dataclass
class _Inner_2:
    n: int = 1


@dataclass
class _Outer_2:
    name: str
    rate: float = 0.5
    opt: int = 3
    flag: bool = False
    sizes: tuple[int, ...] = ()
    inner: _Inner_2 = field(default_factory=_Inner_2)


@dataclass
class _Nested:
    inner: _Inner_2
    name: str
    sizes: tuple[int, ...] = ()
    rate: float = 1.0


@pytest.mark.parametrize(
    "config,header,text",
    [
        ({"Xa": 1}, "", "Xa = 1\n"),
        ({"X": {"y": 2}}, "", "[X]\ny = 2\n"),
        ({}, "", "\n"),
        ({"x": 1}, "a\n\nb", "# a\n#\n# b\nx = 1\n"),
        ({"t": {"k": 1}}, "h", "# h\n\n[t]\nk = 1\n"),
        ({"a": None, "b": 1}, "", "b = 1\n"),
        ({"t": {"x": 1}, "a": 2}, "", "a = 2\n\n[t]\nx = 1\n"),
        ({"a": {"b": {"c": 1}}}, "", "[a.b]\nc = 1\n"),
        ({"a": {}}, "", "[a]\n"),
        ({"a": {"x": 1, "b": {"c": 2}}}, "", "[a]\nx = 1\n\n[a.b]\nc = 2\n"),
        ({"a b": {"c.d": 1}}, "", '["a b"]\n"c.d" = 1\n'),
        ({"XX": "X\n", "s": [1, 2.5, True]}, "", 'XX = "X\\n"\ns = [1, 2.5, true]\n'),
    ],
    ids=[
        "x_key",
        "x_table",
        "empty",
        "header",
        "header_table",
        "none",
        "scalars_first",
        "only_subtables",
        "empty_table",
        "nested",
        "quoted",
        "string_list",
    ],
)
def test_to_toml_text_exactly(config, header, text):
    """The exact TOML text: header lines as comments (an empty line as ``#``), scalars before tables, a table
    header only when the table has scalars or no subtables, dotted and quoted keys, ``None`` left out, and the
    leading newline of a first table removed (only newlines: a key starting with ``X`` is kept). Every
    text reads back with :mod:`tomllib` as the configuration without its ``None`` values."""
    written = mconfig.to_toml(config, header=header)
    assert written == text
    assert tomllib.loads(written) == {k: v for k, v in config.items() if v is not None}


def test_from_dict_reads_every_field_given_after_ones_left_at_their_defaults():
    """Keys after fields left out are still read (``flag``, ``sizes`` and ``inner`` after ``rate``/``opt``
    missing); an int for a float field is stored as a float, a list for a tuple field as a tuple, a sub-table
    as its dataclass. Negative control: the defaults when nothing but the required key is given."""
    got = mconfig.from_dict(_Outer_2, {"name": "x", "flag": True, "sizes": [1, 2], "inner": {"n": 5}})
    assert got == _Outer_2(name="x", flag=True, sizes=(1, 2), inner=_Inner_2(5)) and type(got.sizes) is tuple
    got = mconfig.from_dict(_Outer_2, {"name": "x", "rate": 2})
    assert got.rate == 2.0 and type(got.rate) is float and got.opt == 3
    assert mconfig.from_dict(_Outer_2, {"name": "y"}) == _Outer_2(name="y")
    train = mconfig.from_dict(TrainConfig, {"figures": False}, "train")
    assert train == TrainConfig(figures=False)


def test_from_dict_reads_the_fields_after_a_nested_table():
    """A sub-table first, then more fields: every one after it is read too (the required ``name``, the
    list made a tuple, the int made a float), in the order of the dataclass. A missing sub-table is named
    with its dataclass; a wrong value inside it with its dotted key."""
    got = mconfig.from_dict(_Nested, {"inner": {"n": 2}, "name": "b", "sizes": [3, 4], "rate": 2})
    assert got == _Nested(_Inner_2(2), "b", (3, 4), 2.0)
    assert type(got.sizes) is tuple and type(got.rate) is float
    assert mconfig.from_dict(_Nested, {"inner": {}, "name": "c"}) == _Nested(_Inner_2(1), "c")
    with pytest.raises(ConfigError) as caught:
        mconfig.from_dict(_Nested, {"name": "c"}, "t")
    assert str(caught.value) == "missing key 't.inner' (_Inner_2)"
    with pytest.raises(ConfigError) as caught:
        mconfig.from_dict(_Nested, {"inner": {"n": 1.5}, "name": "c"}, "t")
    assert str(caught.value) == "t.inner.n must be an integer, got 1.5"


def test_from_dict_errors_name_the_key_the_value_and_the_type():
    """Each refusal with its exact message: a missing required key (with ``where``), a non-table, an
    unknown key (the valid keys sorted and the nearest one), a wrong type (also in a sub-table, a bool for an
    int), and a dataclass's own check prefixed with where it is."""
    cases = [
        ((_Outer_2, {}), "missing key 'name' (a string)"),
        ((_Outer_2, {}, "t"), "missing key 't.name' (a string)"),
        ((_Outer_2, [1]), "the configuration must be a table, got [1]"),
        ((_Outer_2, 3, "t"), "t must be a table, got 3"),
        (
            (_Outer_2, {"name": "x", "nam": 1}),
            "unknown key 'nam'; the keys allowed in the top level are flag, inner, name, opt, rate, sizes; "
            "did you mean 'name'?",
        ),
        ((_Outer_2, {"name": 1}), "name must be a string, got 1"),
        ((_Outer_2, {"name": "x", "inner": {"n": "a"}}), "inner.n must be an integer, got 'a'"),
        ((_Outer_2, {"name": "x", "opt": True}), "opt must be an integer, got True"),
        ((_Outer_2, {"name": "x", "sizes": [1, "b"]}), "sizes must be a list of an integer, got [1, 'b']"),
        ((TrainConfig, {"steps": 0}, "train"), "train: train.steps must be ≥ 1, got 0"),
        (
            (TrainConfig, {"eval_every": -1}),
            "configuration: train.eval_every must be ≥ 0 (0: only at the end), got -1",
        ),
    ]
    for args, message in cases:
        with pytest.raises(ConfigError) as caught:
            mconfig.from_dict(*args)
        assert str(caught.value) == message


@dataclass
class _Checked:
    kind: Literal["sgd", "adam"] = "sgd"
    level: Literal[1, 2] = 1
    count: int | None = None
    rate: float = 0.5
    sizes: list[int] | None = None

    def __post_init__(self) -> None:
        if self.rate < 0:
            raise ValueError("rate must be >= 0")


def test_from_dict_keeps_ints_where_an_int_is_allowed_and_floats_elsewhere():
    """``int | None`` and ``Literal[1, 2]`` fields keep an integer as ``int``; a ``float`` field stores
    ``2`` as ``2.0`` (type checked, not just value). Negative control: ``sizes=3`` (not a list) and
    ``sizes=[1, "a"]`` are refused."""
    out = from_dict(_Checked, {"count": 3, "level": 2, "rate": 2, "sizes": [4]})
    assert (type(out.count), out.count) == (int, 3)
    assert (type(out.level), out.level) == (int, 2)
    assert (type(out.rate), out.rate) == (float, 2.0)
    assert out.sizes == [4]
    with pytest.raises(
        ConfigError, match=r"^sizes must be a list of an integer or nothing \(omit the key\), got 3$"
    ):
        from_dict(_Checked, {"sizes": 3})
    with pytest.raises(ConfigError, match="sizes must be"):
        from_dict(_Checked, {"sizes": [1, "a"]})


@pytest.mark.parametrize(
    ("table", "where", "message"),
    [
        ({"kind": "rmsprop"}, "", "kind must be one of 'sgd', 'adam', got 'rmsprop'"),
        ({"level": 3}, "optim", "optim.level must be one of 1, 2, got 3"),
        ({"rate": -1.0}, "", "configuration: rate must be >= 0"),
        ({"rate": -1.0}, "optim", "optim: rate must be >= 0"),
        (3, "", "the configuration must be a table, got 3"),
        ([1], "optim", "optim must be a table, got [1]"),
    ],
    ids=[
        "literal-str",
        "literal-int",
        "post-init-top",
        "post-init-where",
        "not-a-table-top",
        "not-a-table-where",
    ],
)
def test_from_dict_messages_name_the_key_the_value_and_the_choices(table, where, message):
    """The exact :class:`ConfigError` messages (a Literal's allowed values listed by repr, a dataclass's own
    check prefixed by where it is, a non-table named). Negative control: the accepted table ``{"kind":
    "adam"}`` raises nothing."""
    with pytest.raises(ConfigError) as info:
        from_dict(_Checked, table, where)
    assert str(info.value) == message
    assert from_dict(_Checked, {"kind": "adam"}).kind == "adam"


def test_set_key_and_resolve_messages_and_new_tables():
    """:func:`set_key` creates missing tables (``{"new": {"key": 1}}``) and refuses to go through a value,
    naming the full dotted path and the dotted prefix that is a value; an unknown preset suggests the
    nearest; bad TOML text is named. Negative control: setting through a table works."""
    config = {"a": {"b": 1}}
    set_key(config, ["new", "key"], 1)
    set_key(config, ["a", "c"], 2)
    assert config == {"a": {"b": 1, "c": 2}, "new": {"key": 1}}
    with pytest.raises(ConfigError) as info:
        set_key(config, ["a", "b", "c"], 3)
    assert str(info.value) == "cannot set a.b.c: a.b is a value, not a table"
    with pytest.raises(ConfigError) as info:
        resolve({"presets": {"smoke": {}}}, "smok")
    assert str(info.value) == "unknown preset 'smok'; this file defines ['smoke']; did you mean 'smoke'?"
    assert resolve({"x": 1}, None, ["y.z=2"]) == {"x": 1, "y": {"z": 2}}
    with pytest.raises(ConfigError, match=r"^not valid TOML: "):
        load_toml_text("x = ")


def test_to_toml_writes_booleans_infinities_and_empty_tables():
    """:func:`to_toml` against hand-written TOML: ``false``/``true``, ``inf``/``-inf``/``nan``, a float's
    repr, an empty table as its own header, a table holding only tables written without a header of its
    own; tomllib reads each back. Negative control: a ``None`` value is left out."""
    text = to_toml({"f": False, "t": True, "hi": float("inf"), "lo": float("-inf"), "x": 0.1, "none": None})
    assert text == "f = false\nt = true\nhi = inf\nlo = -inf\nx = 0.1\n"
    assert tomllib.loads(text) == {"f": False, "t": True, "hi": float("inf"), "lo": float("-inf"), "x": 0.1}
    assert to_toml({"x": float("nan")}) == "x = nan\n"
    assert to_toml({"e": {}}) == "[e]\n"
    assert tomllib.loads(to_toml({"e": {}})) == {"e": {}}
    assert to_toml({"a": {"b": {"x": 1}}}) == "[a.b]\nx = 1\n"


def test_configuration_type_names_are_plain_words():
    import typing

    from meanfield.config import _type_name

    assert _type_name(typing.Literal["sgd", "adam"]) == "one of 'sgd', 'adam'"
    assert _type_name(dict) == "a table" and _type_name(dict[str, int]) == "a table"
    assert _type_name(int | None) == "an integer or nothing (omit the key)"
    assert _type_name(list[float]) == "a list of a number"


DT = torch.float64


def t(x: Any, dtype: torch.dtype = DT) -> torch.Tensor:
    """A float64 tensor from nested lists."""
    return torch.tensor(x, dtype=dtype)


def exact(pattern: str) -> str:
    """An anchored regex for a whole error message."""
    return "^" + re.escape(pattern) + "$"


RAW_2 = {
    "task": "t",
    "seed": 0,
    "train": {"steps": 100, "lr": 0.1},
    "presets": {
        "smoke": {"train": {"steps": 2}},
        "quick": {"train": {"steps": 20}, "seed": 3},
        "lit": {"arm": "L"},
    },
}


@dataclasses.dataclass
class Inner:
    """A nested schema."""

    rate: float = 0.5
    names: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Outer:
    """A schema covering every annotation branch."""

    steps: int
    inner: Inner = dataclasses.field(default_factory=Inner)
    scale: float = 1.0
    maybe: int | None = None
    either: float | str = 0.0
    kind: Literal["a", "b"] = "a"
    shape: tuple[int, ...] = (1,)
    table: dict = dataclasses.field(default_factory=dict)
    flag: bool = False
    anything: Any = None
    label: str = "x"
    derived: int = dataclasses.field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ValueError(f"steps must be ≥ 0, got {self.steps}")


def typing_newtype() -> Any:
    """An annotation that is neither a type nor a known origin (a TypeVar): ``_matches`` accepts anything."""
    return typing.TypeVar("T")


def test_load_toml_reads_file_and_names_missing_or_bad_file(tmp_path):
    """``load_toml`` returns the parsed dict (str or Path); a missing path, a folder, or bad TOML is a
    ConfigError naming the path."""
    good = tmp_path / "a.toml"
    good.write_text('task = "x"\n[train]\nsteps = 3\n')
    assert cfg.load_toml(good) == {"task": "x", "train": {"steps": 3}}
    assert cfg.load_toml(str(good)) == {"task": "x", "train": {"steps": 3}}
    missing = tmp_path / "none.toml"
    with pytest.raises(cfg.ConfigError, match=exact(f"configuration file {missing} does not exist")):
        cfg.load_toml(missing)
    with pytest.raises(cfg.ConfigError, match=exact(f"configuration file {tmp_path} does not exist")):
        cfg.load_toml(tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text("x = = 1\n")
    with pytest.raises(cfg.ConfigError, match="^" + re.escape(f"{bad} is not valid TOML: ") + r"\S") as info:
        cfg.load_toml(bad)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_load_toml_text_parses_and_refuses():
    """``load_toml_text`` parses text; invalid text: 'not valid TOML: <reason>' (no chained cause)."""
    assert cfg.load_toml_text("a = 1\nb = [1, 2]\n") == {"a": 1, "b": [1, 2]}
    with pytest.raises(cfg.ConfigError, match=r"^not valid TOML: \S") as info:
        cfg.load_toml_text("a = \n")
    assert info.value.__suppress_context__
    assert issubclass(cfg.ConfigError, ValueError) and cfg.PRESETS_KEY == "presets"


def test_merge_nested_key_by_key_without_mutating_inputs():
    """Tables merge recursively; a non-table replaces a table and vice versa; the inputs are unchanged."""
    base = {"a": 1, "t": {"x": 1, "y": {"p": 1, "q": 2}}, "s": {"k": 1}, "v": 5}
    changes = {"t": {"y": {"q": 3}, "z": 4}, "s": 2, "v": {"new": 1}, "n": 7}
    out = cfg.merge(base, changes)
    assert out == {"a": 1, "t": {"x": 1, "y": {"p": 1, "q": 3}, "z": 4}, "s": 2, "v": {"new": 1}, "n": 7}
    assert base == {"a": 1, "t": {"x": 1, "y": {"p": 1, "q": 2}}, "s": {"k": 1}, "v": 5}
    assert changes == {"t": {"y": {"q": 3}, "z": 4}, "s": 2, "v": {"new": 1}, "n": 7}
    assert out is not base and cfg.merge({}, {}) == {}


@pytest.mark.parametrize(
    ("text", "path", "value"),
    [
        ("a.b.c=3", ["a", "b", "c"], 3),
        (" a . b = 1e-3 ", ["a", "b"], 1e-3),
        ("x=true", ["x"], True),
        ("x=[8, 16]", ["x"], [8, 16]),
        ('x={kind="cosine"}', ["x"], {"kind": "cosine"}),
        ('x="text"', ["x"], "text"),
        ("x=wikitext2", ["x"], "wikitext2"),
        ("x= spaced words ", ["x"], "spaced words"),
        ("x=a=b", ["x"], "a=b"),
        ("x=", ["x"], ""),
    ],
)
def test_parse_override_values(text, path, value):
    """TOML values are parsed, anything else is the stripped raw string; the key is split at dots."""
    got_path, got_value = cfg.parse_override(text)
    assert got_path == path and got_value == value and type(got_value) is type(value)


@pytest.mark.parametrize("text", ["abc", "a..b=1", "=3", ".a=1", "a.=1", " =1"])
def test_parse_override_refuses_malformed(text):
    """No '=' or an empty key part: the message quotes the text (repr)."""
    with pytest.raises(
        cfg.ConfigError, match=exact(f"an override must look like key.sub=value, got {text!r}")
    ):
        cfg.parse_override(text)


def test_set_key_creates_tables_in_place_and_refuses_through_values():
    """``set_key`` sets nested keys in place, creating tables; a value on the way is named."""
    c: dict[str, Any] = {"a": {"b": 1}}
    assert cfg.set_key(c, ["a", "c", "d"], 5) is None
    assert c == {"a": {"b": 1, "c": {"d": 5}}}
    cfg.set_key(c, ["top"], [1])
    assert c["top"] == [1]
    cfg.set_key(c, ["a", "b"], {"x": 1})
    assert c["a"]["b"] == {"x": 1}
    with pytest.raises(cfg.ConfigError, match=exact("cannot set a.b.x.y: a.b.x is a value, not a table")):
        cfg.set_key(c, ["a", "b", "x", "y"], 2)
    with pytest.raises(cfg.ConfigError, match=exact("cannot set top.z: top is a value, not a table")):
        cfg.set_key(c, ["top", "z"], 2)


def test_resolve_base_presets_and_overrides_in_order():
    """No preset: the base without [presets]; presets joined by '+' apply left to right, overrides last."""
    assert cfg.resolve(RAW_2) == {"task": "t", "seed": 0, "train": {"steps": 100, "lr": 0.1}}
    assert cfg.resolve(RAW_2, "smoke") == {"task": "t", "seed": 0, "train": {"steps": 2, "lr": 0.1}}
    assert cfg.resolve(RAW_2, "smoke+quick")["train"]["steps"] == 20
    assert cfg.resolve(RAW_2, "quick+smoke") == {"task": "t", "seed": 3, "train": {"steps": 2, "lr": 0.1}}
    out = cfg.resolve(RAW_2, "quick+lit", ["train.steps=7", "train.steps=8", "new.key=x"])
    assert out == {"task": "t", "seed": 3, "train": {"steps": 8, "lr": 0.1}, "arm": "L", "new": {"key": "x"}}
    assert RAW_2["train"] == {"steps": 100, "lr": 0.1}  # not mutated
    assert cfg.resolve({"a": 1}, None, ["a=2"]) == {"a": 2}


def test_resolve_errors():
    """Unknown preset: lists the defined ones and suggests the nearest (or says none are defined);
    a non-table [presets]; a malformed override."""
    with pytest.raises(
        cfg.ConfigError,
        match=exact(
            "unknown preset 'smok'; this file defines ['lit', 'quick', 'smoke']; did you mean 'smoke'?"
        ),
    ):
        cfg.resolve(RAW_2, "smok")
    with pytest.raises(
        cfg.ConfigError, match=exact("unknown preset 'zzzz'; this file defines ['lit', 'quick', 'smoke']")
    ):
        cfg.resolve(RAW_2, "zzzz")
    with pytest.raises(cfg.ConfigError, match=exact("unknown preset 'smoke'; this file defines no presets")):
        cfg.resolve({"a": 1}, "smoke")
    with pytest.raises(
        cfg.ConfigError, match=exact("unknown preset ''; this file defines ['lit', 'quick', 'smoke']")
    ):
        cfg.resolve(RAW_2, "smoke+")
    with pytest.raises(cfg.ConfigError, match=exact("[presets] must be a table of presets, got int")):
        cfg.resolve({"presets": 3})
    with pytest.raises(cfg.ConfigError, match=exact("an override must look like key.sub=value, got 'oops'")):
        cfg.resolve(RAW_2, None, ["oops"])


def test_suggest_cutoff():
    """``_suggest`` proposes the nearest name above a 0.5 similarity ratio, else nothing."""
    assert cfg._suggest("stesp", ["steps", "lr"]) == "; did you mean 'steps'?"
    assert cfg._suggest("xyz", ["steps", "lr"]) == ""
    assert cfg._suggest("ab", ["abcd"]) == "; did you mean 'abcd'?"  # ratio 2·2/6 = 0.667
    assert (
        cfg._suggest("ab", ["abcdef"]) == "; did you mean 'abcdef'?"
    )  # ratio 4/8 = 0.5: the cutoff is inclusive
    assert cfg._suggest("ab", ["abcdefg"]) == ""  # ratio 4/9 < 0.5
    assert cfg._suggest("stpes", ["steps", "stpe"]) == "; did you mean 'stpe'?"  # only the nearest one
    assert cfg._suggest("a", ["ab"]) == "; did you mean 'ab'?"  # ratio 2/3


def test_check_keys_messages():
    """The first unknown key is named (dotted), the valid keys listed sorted, the nearest suggested;
    the top level is named so; valid keys pass."""
    cfg.check_keys({"a": 1, "b": 2}, iter(["b", "a"]), "x")
    with pytest.raises(
        cfg.ConfigError,
        match=exact(
            "unknown key 'train.stpes'; the keys allowed in train are lr, steps; did you mean 'steps'?"
        ),
    ):
        cfg.check_keys({"lr": 1, "stpes": 2, "zz": 3}, ["steps", "lr"], "train")
    with pytest.raises(
        cfg.ConfigError, match=exact("unknown key 'qqq'; the keys allowed in the top level are a, b")
    ):
        cfg.check_keys({"qqq": 1}, {"b": 0, "a": 0}, "")
    assert cfg._dotted("", "k") == "k" and cfg._dotted("a.b", "k") == "a.b.k"


def test_from_dict_builds_coerces_and_defaults():
    """Nested dataclasses from sub-tables, int→float for float fields (stored as float), tuples from lists,
    defaults for missing keys, int kept where int is allowed (also in a union)."""
    o = cfg.from_dict(
        Outer,
        {
            "steps": 3,
            "inner": {"rate": 2, "names": ["p"]},
            "scale": 4,
            "maybe": 5,
            "either": 6,
            "kind": "b",
            "shape": [2, 3],
            "table": {"k": 1},
            "flag": True,
            "anything": [1, "x"],
            "label": "y",
        },
    )
    assert o.inner == Inner(2.0, ["p"]) and type(o.inner.rate) is float
    assert o.scale == 4.0 and type(o.scale) is float
    assert o.maybe == 5 and type(o.maybe) is int
    assert o.either == 6.0 and type(o.either) is float
    assert o.kind == "b" and o.shape == (2, 3) and type(o.shape) is tuple
    assert o.table == {"k": 1} and o.flag is True and o.anything == [1, "x"] and o.label == "y"
    d = cfg.from_dict(Outer, {"steps": 1})
    assert d == Outer(steps=1) and d.inner == Inner() and d.derived == 0


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"steps": 1.5}, "steps must be an integer, got 1.5"),
        ({"steps": True}, "steps must be an integer, got True"),
        ({"steps": 1, "scale": "x"}, "scale must be a number, got 'x'"),
        ({"steps": 1, "scale": False}, "scale must be a number, got False"),
        ({"steps": 1, "maybe": 1.0}, "maybe must be an integer or nothing (omit the key), got 1.0"),
        ({"steps": 1, "either": True}, "either must be a number or a string, got True"),
        ({"steps": 1, "kind": "c"}, "kind must be one of 'a', 'b', got 'c'"),
        ({"steps": 1, "shape": [1, "2"]}, "shape must be a list of an integer, got [1, '2']"),
        ({"steps": 1, "shape": 3}, "shape must be a list of an integer, got 3"),
        ({"steps": 1, "table": [1]}, "table must be a table, got [1]"),
        ({"steps": 1, "flag": 1}, "flag must be true or false, got 1"),
        ({"steps": 1, "label": 3}, "label must be a string, got 3"),
        ({"steps": 1, "inner": {"rate": "fast"}}, "inner.rate must be a number, got 'fast'"),
        ({"steps": 1, "inner": {"names": [1]}}, "inner.names must be a list of a string, got [1]"),
    ],
)
def test_from_dict_wrong_types_are_named(table, message):
    """A value of the wrong type names the dotted key, the type allowed and the value (exact)."""
    with pytest.raises(cfg.ConfigError, match=exact(message)):
        cfg.from_dict(Outer, table)


def test_from_dict_structure_errors():
    """Missing required key, unknown key (init=False fields are not keys), a non-table, and a
    ``__post_init__`` error (prefixed by where, or 'configuration')."""
    with pytest.raises(cfg.ConfigError, match=exact("missing key 'steps' (an integer)")):
        cfg.from_dict(Outer, {})
    with pytest.raises(cfg.ConfigError, match=exact("missing key 'run.steps' (an integer)")):
        cfg.from_dict(Outer, {}, "run")
    with pytest.raises(
        cfg.ConfigError, match=r"^unknown key 'derived'; the keys allowed in the top level are anything, "
    ):
        cfg.from_dict(Outer, {"steps": 1, "derived": 2})
    with pytest.raises(
        cfg.ConfigError,
        match=exact(
            "unknown key 'inner.rat'; the keys allowed in inner are names, rate; did you mean 'rate'?"
        ),
    ):
        cfg.from_dict(Outer, {"steps": 1, "inner": {"rat": 1}})
    with pytest.raises(cfg.ConfigError, match=exact("the configuration must be a table, got 3")):
        cfg.from_dict(Outer, 3)
    with pytest.raises(cfg.ConfigError, match=exact("inner must be a table, got [1]")):
        cfg.from_dict(Outer, {"steps": 1, "inner": [1]})
    with pytest.raises(cfg.ConfigError, match=exact("configuration: steps must be ≥ 0, got -1")):
        cfg.from_dict(Outer, {"steps": -1})
    with pytest.raises(cfg.ConfigError, match=exact("run: steps must be ≥ 0, got -1")):
        cfg.from_dict(Outer, {"steps": -1}, "run")


def test_type_name_and_matches_branches():
    """``_type_name`` and ``_matches`` on each annotation kind (independent expectations)."""
    assert cfg._type_name(type(None)) == "nothing (omit the key)"
    assert cfg._type_name(int | None) == "an integer or nothing (omit the key)"
    assert cfg._type_name(Literal[1, "x"]) == "one of 1, 'x'"
    assert (
        cfg._type_name(typing.List) == "a list"  # noqa: UP006 (the bare typing alias is the branch)
        and cfg._type_name(list) == "list"
        and cfg._type_name(tuple[float, ...]) == "a list of a number"
    )
    assert cfg._type_name(dict) == "a table" and cfg._type_name(dict[str, int]) == "a table"
    assert cfg._type_name(Inner) == "Inner" and cfg._type_name(bool) == "true or false"
    assert cfg._matches(object(), Any) and cfg._matches(None, type(None)) and not cfg._matches(0, type(None))
    assert cfg._matches([1, 2], list[int]) and not cfg._matches([1, 2.0], list[int])
    assert cfg._matches((1,), tuple[int, ...]) and cfg._matches([], list[int]) and cfg._matches(["x"], list)
    assert not cfg._matches("ab", list[str])
    assert cfg._matches({"a": 1}, dict[str, int]) and not cfg._matches([("a", 1)], dict)
    assert cfg._matches(3, float) and cfg._matches(3.5, float) and not cfg._matches(True, float)
    assert cfg._matches(3, int) and not cfg._matches(3.0, int) and not cfg._matches(False, int)
    assert cfg._matches(Inner(), Inner) and not cfg._matches({}, Inner)
    assert cfg._matches(True, bool) and not cfg._matches(1, bool)
    assert cfg._matches("anything", typing_newtype())
    assert cfg._allows_int(int) and cfg._allows_int(Any) and cfg._allows_int(float | int)
    assert cfg._allows_int(Literal[1]) and not cfg._allows_int(float) and not cfg._allows_int(float | str)


def test_to_toml_exact_text():
    """Scalars first, then one [table] per mapping (dotted paths, quoted keys where not bare), None left out,
    header lines as comments (an empty line as '#'), tables with only sub-tables get no header."""
    config = {
        "task": "ts",
        "n": 3,
        "x": 0.1,
        "on": True,
        "off": False,
        "none": None,
        "lst": [1, "a", [2.5]],
        "inline": [{"k": 1}],
        "train": {"steps": 2, "sched": {"kind": "cos"}},
        "outer": {"mid": {"leaf": 1}},
        "empty": {},
        "odd key": {"a.b": 1, "": 2},
    }
    text = cfg.to_toml(config, header="line one\n\nline three")
    expected = (
        "\n".join(
            [
                "# line one",
                "#",
                "# line three",
                'task = "ts"',
                "n = 3",
                "x = 0.1",
                "on = true",
                "off = false",
                'lst = [1, "a", [2.5]]',
                "inline = [{k = 1}]",
                "",
                "[train]",
                "steps = 2",
                "",
                "[train.sched]",
                'kind = "cos"',
                "",
                "[outer.mid]",
                "leaf = 1",
                "",
                "[empty]",
                "",
                '["odd key"]',
                '"a.b" = 1',
                '"" = 2',
            ]
        )
        + "\n"
    )
    assert text == expected
    import tomllib

    back = tomllib.loads(text)
    assert back == {k: v for k, v in config.items() if k != "none"}


def test_to_toml_without_header_and_special_values():
    """No header: starts at the first key; nan/±inf, DEL escaped, unicode kept, tuples as lists; a value that
    is not TOML is refused with its type and repr."""
    text = cfg.to_toml(
        {"a": float("nan"), "b": float("inf"), "c": float("-inf"), "s": 'x\x7fé"\n', "t": (1, 2)}
    )
    assert text == 'a = nan\nb = inf\nc = -inf\ns = "x\\u007fé\\"\\n"\nt = [1, 2]\n'
    import tomllib

    back = tomllib.loads(text)
    assert math.isnan(back["a"]) and back["b"] == math.inf and back["c"] == -math.inf
    assert back["s"] == 'x\x7fé"\n' and back["t"] == [1, 2]
    assert cfg.to_toml({}) == "\n"
    assert cfg.to_toml({"t": {"a": 1}}) == "[t]\na = 1\n"
    assert cfg.to_toml({"a": 1}, "h") == "# h\na = 1\n"
    with pytest.raises(cfg.ConfigError, match=exact("cannot write a set ({1}) as TOML")):
        cfg.to_toml({"a": {1}})
    with pytest.raises(cfg.ConfigError, match=exact("cannot write a NoneType (None) as TOML")):
        cfg._toml_value([None])
    assert cfg._toml_value(1e300) == "1e+300" and cfg._toml_value(-0.0) == "-0.0"
    assert cfg._toml_key("a-b_1") == "a-b_1" and cfg._toml_key("a b") == '"a b"' and cfg._toml_key("") == '""'
