"""Run configurations: TOML files with named presets, ``key.sub=value`` overrides, strict schemas.

A configuration file is TOML. Its top-level keys and tables are the base configuration; the table
``[presets.NAME]`` holds the changes a preset makes (``smoke`` for tests in seconds, ``quick`` for a 2-core
CPU, ``full`` for a GPU), merged key by key over the base::

    task = "teacher_student"
    seed = 0
    [train]
    steps = 2000
    [presets.smoke]
    train.steps = 20

[`resolve`][meanfield.config.resolve] applies a preset and then the overrides (``train.steps=50``; the value is read as a TOML
value, or as a string when it is not one, so ``data.dataset=wikitext2`` needs no quotes) and returns a plain
dict. [`from_dict`][meanfield.config.from_dict] checks a table against a dataclass schema: an unknown key is an error that lists the
valid keys and suggests the nearest one; a value of the wrong type names the key, the value and the type
allowed. [`to_toml`][meanfield.config.to_toml] writes the resolved configuration back as TOML (the run folder's ``config.toml``).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import sys
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "ConfigError",
    "PRESETS_KEY",
    "load_toml",
    "load_toml_text",
    "resolve",
    "parse_override",
    "set_key",
    "merge",
    "check_keys",
    "from_dict",
    "to_toml",
]

PRESETS_KEY = "presets"


class ConfigError(ValueError):
    """A configuration that cannot be used: the message names the key, what it got and what is allowed."""


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file; a missing file or a syntax error is a [`ConfigError`][meanfield.config.ConfigError] naming the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"configuration file {path} does not exist")
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from None


def load_toml_text(text: str) -> dict[str, Any]:
    """Parse TOML text (as [`load_toml`][meanfield.config.load_toml], for text already in memory)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"not valid TOML: {error}") from None


def merge(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``changes``, tables merged key by key (a new dict; the inputs are not changed)."""
    out = dict(base)
    for key, value in changes.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``"a.b.c=value"`` into ``(["a", "b", "c"], value)``.

    The value is parsed as a TOML value (``3``, ``1e-3``, ``true``, ``[8, 16]``, ``{kind="cosine"}``,
    ``"text"``); anything that is not valid TOML is taken as a plain string.
    """
    key, sep, raw = text.partition("=")
    path = [part.strip() for part in key.split(".")]
    if not sep or not all(path):
        raise ConfigError(f"an override must look like key.sub=value, got {text!r}")
    raw = raw.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return path, value


def set_key(config: dict[str, Any], path: list[str], value: Any) -> None:
    """Set ``config[path[0]][path[1]]… = value`` in place, creating the tables on the way."""
    node = config
    for i, part in enumerate(path[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(
                f"cannot set {'.'.join(path)}: {'.'.join(path[: i + 1])} is a value, not a table"
            )
        node = child
    node[path[-1]] = value


def resolve(
    raw: Mapping[str, Any], preset: str | None = None, overrides: Iterable[str] = ()
) -> dict[str, Any]:
    """The configuration ``raw`` (as read from TOML) with ``preset`` and then ``overrides`` applied.

    Args:
        raw: the file's content; its ``presets`` table is removed from the result.
        preset: the name of a table under ``[presets]``, several joined by ``+`` (applied left to right:
            ``"quick+literal"`` is the size of ``quick`` with the arm ``literal``), or ``None`` for the base.
        overrides: ``"key.sub=value"`` strings, applied in order after the preset.

    Raises:
        ConfigError: for an unknown preset (listing those defined) or a malformed override.
    """
    config = {k: v for k, v in raw.items() if k != PRESETS_KEY}
    presets = raw.get(PRESETS_KEY, {})
    if not isinstance(presets, Mapping):
        raise ConfigError(f"[{PRESETS_KEY}] must be a table of presets, got {type(presets).__name__}")
    for name in [] if preset is None else preset.split("+"):
        if name not in presets:
            raise ConfigError(
                f"unknown preset {name!r}; this file defines {sorted(presets) or 'no presets'}"
                + _suggest(name, presets)
            )
        config = merge(config, presets[name])
    for text in overrides:
        path, value = parse_override(text)
        set_key(config, path, value)
    return config


def _suggest(key: str, valid: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_keys(table: Mapping[str, Any], valid: Iterable[str], where: str) -> None:
    """Raise a [`ConfigError`][meanfield.config.ConfigError] for the first key of ``table`` not in ``valid``.

    The message lists the valid keys and suggests the nearest one (``difflib``).
    """
    valid = list(valid)
    for key in table:
        if key not in valid:
            raise ConfigError(
                f"unknown key {_dotted(where, key)!r}; the keys allowed in {where or 'the top level'} are "
                f"{', '.join(sorted(valid))}" + _suggest(key, valid)
            )


def _dotted(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _type_name(annotation: Any) -> str:
    if annotation is type(None):
        return "nothing (omit the key)"
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(annotation))
    if origin in (list, tuple):
        args = typing.get_args(annotation)
        return f"a list of {_type_name(args[0])}" if args else "a list"
    if origin is dict or annotation is dict:
        return "a table"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
        annotation, getattr(annotation, "__name__", str(annotation))
    )


def _matches(value: Any, annotation: Any) -> bool:
    if annotation is Any:
        return True
    if annotation is type(None):
        return value is None
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in typing.get_args(annotation))
    if origin is typing.Literal:
        return value in typing.get_args(annotation)
    if origin in (list, tuple):
        args = typing.get_args(annotation)
        return isinstance(value, (list, tuple)) and all(_matches(v, args[0]) for v in value if args)
    if origin is dict or annotation is dict:
        return isinstance(value, Mapping)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True


def _allows_int(annotation: Any) -> bool:
    """Whether ``annotation`` accepts an ``int`` as such (``int``, ``Any``, a union with ``int``)."""
    if annotation in (int, Any):
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_allows_int(a) for a in typing.get_args(annotation))
    return typing.get_origin(annotation) is typing.Literal


def from_dict(cls: type, table: Mapping[str, Any], where: str = "") -> Any:
    """Build the dataclass ``cls`` from ``table``, strictly.

    Fields that are dataclasses themselves are built from sub-tables; ``float`` fields accept integers (and
    store floats); tuples are built from lists.

    Raises:
        ConfigError: for an unknown key (listing the valid ones, suggesting the nearest), a missing required
            key, or a value of the wrong type (naming the key, the value and the type allowed).
    """
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where or 'the configuration'} must be a table, got {table!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    check_keys(table, fields, where)
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for name, f in fields.items():
        key = _dotted(where, name)
        if name not in table:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"missing key {key!r} ({_type_name(hints[name])})")
            continue
        value, annotation = table[name], hints[name]
        if dataclasses.is_dataclass(annotation):
            values[name] = from_dict(annotation, value, key)
            continue
        if not _matches(value, annotation):
            raise ConfigError(f"{key} must be {_type_name(annotation)}, got {value!r}")
        if isinstance(value, int) and not isinstance(value, bool) and not _allows_int(annotation):
            value = float(value)  # a float field given as 3
        if typing.get_origin(annotation) is tuple:
            value = tuple(value)
        values[name] = value
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:  # a dataclass's own __post_init__ check
        raise ConfigError(f"{where or 'configuration'}: {error}") from None


# ----------------------------------------------------------------------------------------------------------
# writing TOML (the subset a resolved configuration uses: numbers, strings, booleans, lists, tables)
# ----------------------------------------------------------------------------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):  # a JSON string is a TOML basic string, but for DEL (U+007F)
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise ConfigError(f"cannot write a {type(value).__name__} ({value!r}) as TOML")


def _toml_key(key: str) -> str:
    bare = key and all(c.isalnum() or c in "_-" for c in key)
    return key if bare else _toml_value(key)


def to_toml(config: Mapping[str, Any], header: str = "") -> str:
    """``config`` as TOML text: scalars and lists first, then one ``[table]`` per nested mapping.

    ``tomllib.loads(to_toml(c)) == c`` for any configuration made of numbers, strings, booleans, lists and
    tables (``None`` values are left out: TOML has no null). ``header`` lines are written as comments.
    """
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]

    def table(node: Mapping[str, Any], path: list[str]) -> None:
        scalars = [(k, v) for k, v in node.items() if v is not None and not isinstance(v, Mapping)]
        tables = [(k, v) for k, v in node.items() if isinstance(v, Mapping)]
        if path and (scalars or not tables):
            lines.append(f"\n[{'.'.join(_toml_key(p) for p in path)}]")
        lines.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in scalars)
        for k, v in tables:
            table(v, [*path, k])

    table(config, [])
    return "\n".join(lines).lstrip("\n") + "\n"
