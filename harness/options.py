"""Options declared by the parts themselves: the fields of a frozen dataclass.

A part (a db, a workload, a nemesis package, a backend) declares its options as a
dataclass whose fields carry `metadata={"help": ...}` (and optionally `"choices"`,
`"metavar"`); validation lives in the dataclass's `__post_init__` (ValueError). From
those declarations come the command-line flags (`--time-limit` for `time_limit`) and
the TOML keys (`time_limit` or `time-limit`), so no list of option names is kept by hand.

Supported field types: str, int, float, bool, `X | None` of those, and
`Mapping[str, str]` (a TOML table, or repeatable `--flag KEY=VALUE` on the command line).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["COMMAND_LINE", "ConfigError", "Declared", "add_arguments", "build", "declared",
           "layered", "origins", "parse_pairs", "typed"]

# The layer of values given as flags: errors about them name the flag.
COMMAND_LINE = "command line"


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message says where and what to do."""


@dataclasses.dataclass(frozen=True)
class Declared:
    """One declared option: its name, type (`str`, `int`, `float`, `bool`, `mapping`),
    whether None is allowed, default, help, choices, metavar, and the value a flag given
    without one means (`const`, metadata "const")."""

    name: str
    kind: str
    optional: bool
    default: Any
    help: str
    choices: tuple[str, ...] | None
    metavar: str | None
    const: Any = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def declared(options: type) -> tuple[Declared, ...]:
    """The options a part's dataclass declares (fields without `help` are internal)."""
    hints = typing.get_type_hints(options)
    found = []
    for field in dataclasses.fields(options):
        if "help" not in field.metadata:
            continue
        kind, optional = _kind(hints[field.name], f"{options.__name__}.{field.name}")
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = None
        choices = field.metadata.get("choices")
        found.append(Declared(field.name, kind, optional, default, field.metadata["help"],
                              tuple(choices) if choices else None, field.metadata.get("metavar"),
                              field.metadata.get("const")))
    return tuple(found)


def _kind(hint: Any, where: str) -> tuple[str, bool]:
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return _kind(rest[0], where)[0], True
    if typing.get_origin(hint) in (Mapping, dict, typing.Mapping):
        return "mapping", False
    for kind in (bool, int, float, str):
        if hint is kind:
            return kind.__name__, False
    raise TypeError(f"{where}: option type {hint!r} is not supported")


def add_arguments(parser: argparse.ArgumentParser | Any, options: Iterable[Declared],
                  seen: set[str] | None = None) -> None:
    """One flag per option (defaults stay None, so only given flags override); an option
    already in `seen` (declared by another part too) is skipped."""
    seen = seen if seen is not None else set()
    for option in options:
        if option.name in seen:
            continue
        seen.add(option.name)
        shown = option.default not in (None, {}, "", False)
        default = f" (default {_show(option.default)})" if shown else ""
        if option.kind == "bool":
            parser.add_argument(option.flag, action="store_true", default=None,
                                help=option.help + default)
        elif option.kind == "mapping":
            parser.add_argument(option.flag, action="append", default=None,
                                metavar=option.metavar or "KEY=VALUE",
                                help=option.help + ", repeatable" + default)
        else:
            extra = {"nargs": "?", "const": option.const} if option.const is not None else {}
            parser.add_argument(option.flag, metavar=option.metavar or _metavar(option),
                                help=option.help + default, **extra)


def _metavar(option: Declared) -> str | None:
    if option.choices:
        return "{" + ",".join(option.choices) + "}"
    return {"int": "N", "float": "X"}.get(option.kind)


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def parse_pairs(items: Iterable[str], source: str) -> dict[str, str]:
    """`["key=value", ...]` from the command line; ConfigError on a malformed item."""
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{source}: expected KEY=VALUE, got {item!r}")
        pairs[key.strip()] = value.strip()
    return pairs


def typed(option: Declared, value: Any, source: str) -> Any:
    """`value` (from TOML or the command line) as the option's type; ConfigError if not."""
    if value is None and option.optional:
        return None
    try:
        if option.kind == "mapping":
            if isinstance(value, Mapping):
                return {str(k): _property(v) for k, v in value.items()}
            if isinstance(value, list | tuple):
                return parse_pairs(value, source)
        elif option.kind == "bool":
            if isinstance(value, bool):
                return value
        elif option.kind == "int":
            if not isinstance(value, bool | float):
                return int(value)
        elif option.kind == "float":
            if not isinstance(value, bool):
                return float(value)
        elif not isinstance(value, Mapping | list | bool):
            text = str(value)
            if option.choices and text not in option.choices:
                raise ConfigError(f"{_subject(option, source)} must be one of "
                                  f"{', '.join(option.choices)}, got {text!r}")
            return text
    except (TypeError, ValueError) as error:
        if isinstance(error, ConfigError):
            raise
    raise ConfigError(f"{_subject(option, source)} must be {_expected(option)}, "
                      f"got {value!r}")


def _subject(option: Declared, source: str) -> str:
    """The option as the user gave it: its flag, or its key in the file `source`."""
    return option.flag if source == option.flag else f"{source}: {option.name}"


def _expected(option: Declared) -> str:
    if option.kind == "mapping":
        return "a table of KEY = VALUE"
    seconds = option.metavar == "SECONDS" or option.name.endswith("_seconds")
    if option.kind in ("int", "float") and seconds:
        return "a number of seconds"
    return {"int": "a whole number", "float": "a number", "bool": "true or false",
            "str": "text"}[option.kind]


def layered(options: Iterable[Declared],
            layers: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The typed values given for `options`, layer over layer (later layers win; None is not
    given); a bad value is blamed on its layer, or on its flag for the "command line" layer.
    Tables merge key by key over the declared default."""
    values: dict[str, Any] = {}
    for option in options:
        for source, layer in layers:
            if layer.get(option.name) is None:
                continue
            blamed = option.flag if source == COMMAND_LINE else source
            value = typed(option, layer[option.name], blamed)
            if option.kind == "mapping":
                value = {**values.get(option.name, option.default), **value}
            values[option.name] = value
    return values


def _property(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def build(options: type, values: Mapping[str, Any], source: str | Mapping[str, str]) -> Any:
    """The part's options dataclass from already typed values; its own validation errors
    (ValueError from `__post_init__`, its message starting with the option's name) become
    ConfigError naming the option as the user gave it: its flag when it came from the
    "command line", else its key after where it came from. `source` is where every value
    came from, or a mapping of option name to it (`origins`)."""
    try:
        return options(**values)
    except ValueError as error:
        raise ConfigError(_in_user_words(str(error), declared(options), source)) from error


def origins(layers: Sequence[tuple[str, Mapping[str, Any]]],
            values: Mapping[str, Any]) -> dict[str, str]:
    """Which layer gave each of `values` (the last one that set it, as `layered` takes)."""
    found = {}
    for source, layer in layers:
        for name in values:
            if layer.get(name) is not None:
                found[name] = source
    return found


def _in_user_words(message: str, options: Iterable[Declared],
                   source: str | Mapping[str, str]) -> str:
    def origin(name: str) -> str:
        return source if isinstance(source, str) else source.get(name, "defaults")

    for option in options:
        if message.startswith(option.name + " "):
            where = origin(option.name)
            if where == COMMAND_LINE:
                return option.flag + message[len(option.name):]
            return f"{where}: {message}"
    sources = [source] if isinstance(source, str) else list(dict.fromkeys(source.values()))
    where = " and ".join(s for s in sources if s != COMMAND_LINE)
    return f"{where}: {message}" if where else message
