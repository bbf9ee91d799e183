"""History input formats: our JSONL, Jepsen EDN, and Porcupine's two test formats.

Every format becomes a list of `Op` validated by the rules of
`checker.history.HistoryValidator`; errors name the file and its 1-based line.

- `porcupine-etcd`: `INFO  jepsen.util - <process> :<type> :<f> <value>` lines of a
  cas-register. `:fail` with `:timed-out`, and `:info`, become `info` completions
  (unknown outcome) with `value` null and `error` "timed-out".
- `porcupine-kv`: `{:process N, :type :invoke, :f :get, :key "K", :value nil}` lines;
  the value becomes Jepsen's keyed `[key, value]`.
- `edn`: Jepsen EDN histories, one map per line, or one vector or list of maps
  (Knossos's data files; records tagged `#jepsen.history.Op` too); keywords and
  symbols become strings, map keys strings (as JSON would have them).
Formats without times or indices use the op's position for both.

`read_queue_ops` reads a queue-workload history, our JSONL or the EDN of
Jepsen's Kafka workload (`jepsen.tests.kafka`: `[[:send 3 12]]` completing as
`[[:send 3 [41 12]]]`, `[[:poll]]` as `[[:poll {3 [[41 12]]}]]`, `:txn`,
`:assign`, `:subscribe`, `:crash`, nemesis ops), checking every micro-op as
the queue checker reads it; integer map keys (keys of poll results) stay
integers, a missing `:index` is the op's position, a missing `:time` is 0.
`checker.history.write_jsonl` then writes our JSONL, which
`checker.spark.check_history_on_spark` checks.
"""

from __future__ import annotations

import datetime
import decimal
import fractions
import json
import math
import os
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import edn_format

from checker.history.bulk import collector_paused
from checker.history.errors import HistoryError
from checker.history.ops import (
    OP_TYPES,
    HistoryValidator,
    Op,
    load_history,
    op_from_json,
    read_numbered_history,
)

__all__ = ["FORMATS", "QUEUE_FORMATS", "detect_format", "numbered_queue_ops", "read_ops"]

FORMATS = ("jsonl", "edn", "porcupine-etcd", "porcupine-kv")
QUEUE_FORMATS = ("jsonl", "edn")
EMPTY = "empty history: no operations"

_ETCD_LINE = re.compile(
    r"INFO\s+jepsen\.util\s+-\s+(-?\d+)\s+:([\w-]+)\s+:([\w-]+)\s+"
    r"(nil|-?\d+|\[\s*-?\d+\s+-?\d+\s*\]|:timed-out)\s*\Z"
)
_ETCD_PREFIX = re.compile(r"INFO\s+jepsen\.util\s+-\s")
_KV_KEY = re.compile(r":key[\s,]")
_STRING = r'"(?:[^"\\]|\\.)*"'
_KV_LINE = re.compile(
    r"\{\s*:process\s+(-?\d+),?\s+:type\s+:([\w-]+),?\s+:f\s+:([\w-]+),?\s+"
    rf":key\s+({_STRING}),?\s+:value\s+(nil|{_STRING})\s*\}}\s*\Z"
)
_KV_FIELD = re.compile(rf"\s*:([\w-]+)\s+(nil|-?\d+|:[\w-]+|{_STRING})\s*,?")
_ESCAPE = re.compile(r"\\(.)")
_ESCAPED = {"n": "\n", "t": "\t", "r": "\r"}
_TIMED_OUT = ":timed-out"


def detect_format(path: str | os.PathLike[str]) -> str:
    """The format of a history, from its first non-blank line."""
    source = os.fspath(path)
    number, text = _first_line(source)
    if _ETCD_PREFIX.match(text):
        return "porcupine-etcd"
    if text.startswith("{"):
        if text[1:].lstrip().startswith('"'):
            return "jsonl"
        if _KV_KEY.search(text) and ":process" in text and ":index" not in text:
            return "porcupine-kv"
        return "edn"
    if text.startswith(("[", "(", "#", ";")):
        return "edn"
    raise HistoryError(
        source, number,
        f"unrecognised history format (expected one of {', '.join(FORMATS)}): {text[:60]!r}",
    )


def read_ops(path: str | os.PathLike[str], fmt: str = "auto") -> list[Op]:
    """All ops of a history in any of FORMATS (or "auto" to detect it), validated."""
    source = os.fspath(path)
    if fmt == "auto":
        fmt = detect_format(source)
    if fmt == "jsonl":
        ops = load_history(source)
    elif fmt == "porcupine-etcd":
        ops = _validated(source, _etcd_ops(source))
    elif fmt == "porcupine-kv":
        ops = _validated(source, _kv_ops(source))
    elif fmt == "edn":
        ops = _validated(source, _edn_ops(source, missing_time=None, int_keys=False))
    else:
        raise ValueError(f"unknown history format {fmt!r} (expected auto or one of {FORMATS})")
    if not ops:
        raise HistoryError(source, 1, EMPTY)
    return ops


def numbered_queue_ops(path: str | os.PathLike[str],
                       fmt: str = "auto") -> Iterable[tuple[int, Op]]:
    """(line, op) for the ops of a queue-workload history in one of QUEUE_FORMATS (or
    "auto"), validated as a history; an empty file has none. The queue family validates
    the micro-ops (`checker.queue.events.read_queue_ops`)."""
    source = os.fspath(path)
    if fmt == "auto":
        first = _first_text(source)
        if first is None:
            return []
        fmt = detect_format(source)
        if fmt not in QUEUE_FORMATS:
            raise HistoryError(source, first, f"{fmt} is not a queue history format "
                                              f"(expected one of {', '.join(QUEUE_FORMATS)})")
    if fmt == "jsonl":
        return read_numbered_history(source)
    if fmt == "edn":
        return _validating(source, _edn_ops(source, missing_time=0, int_keys=True))
    raise ValueError(f"unknown queue history format {fmt!r} "
                     f"(expected auto or one of {QUEUE_FORMATS})")


def _first_line(source: str) -> tuple[int, str]:
    with open(source, "rb") as lines:
        for number, raw in enumerate(lines, 1):
            text = raw.decode("utf-8", errors="replace").strip()
            if text:
                return number, text
    raise HistoryError(source, 1, EMPTY)


def _first_text(source: str) -> int | None:
    """The number of the first non-blank line, None if there is none."""
    try:
        return _first_line(source)[0]
    except HistoryError:
        return None


def _lines(source: str) -> Iterator[tuple[int, str]]:
    """Non-blank lines of a text file with their 1-based numbers."""
    with open(source, "rb") as lines:
        for number, raw in enumerate(lines, 1):
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError as error:
                raise HistoryError(source, number, f"not UTF-8: {error.reason}") from None
            if text:
                yield number, text


def _validated(source: str, numbered: Iterable[tuple[int, Op]]) -> list[Op]:
    with collector_paused():
        return [op for _, op in _validating(source, numbered)]


def _validating(source: str, numbered: Iterable[tuple[int, Op]]) -> Iterator[tuple[int, Op]]:
    validator = HistoryValidator(source)
    for line, op in numbered:
        validator.check(op, line)
        yield line, op


def _etcd_ops(source: str) -> Iterator[tuple[int, Op]]:
    """Ops of a Porcupine etcd log (a cas-register of read, write and cas).

    A process whose op timed out (`:info`, or `:fail :timed-out`) may appear again
    in these logs; its later ops get a fresh process id (above every id of the
    file, as Jepsen would), and `source_process` in `extra` keeps the logged one.
    """
    lines = []
    for number, text in _lines(source):
        match = _ETCD_LINE.match(text)
        if match is None:
            raise HistoryError(source, number, f"not a Porcupine etcd log line: {text[:80]!r}")
        process, kind, f, raw = match.groups()
        value = _etcd_value(raw)
        _check_etcd_value(source, number, kind, f, value)
        lines.append((number, int(process), kind, f, value))
    fresh = max((process for _, process, *_ in lines), default=0)
    renamed: dict[int, int] = {}
    for index, (number, logged, kind, f, value) in enumerate(lines):
        process = renamed.get(logged, logged)
        extra: dict[str, Any] = {} if process == logged else {"source_process": logged}
        if value == _TIMED_OUT or kind == "info":
            if value == _TIMED_OUT:
                value = None
                extra["error"] = "timed-out"
            yield number, Op(index, index, "info", process, f, value, extra)
            fresh += 1
            renamed[logged] = fresh
        else:
            yield number, Op(index, index, kind, process, f, value, extra)  # type: ignore[arg-type]


def _etcd_value(raw: str) -> Any:
    if raw == "nil":
        return None
    if raw == _TIMED_OUT:
        return raw
    if raw[0] == "[":
        return [int(part) for part in raw[1:-1].split()]
    return int(raw)


def _check_etcd_value(source: str, number: int, kind: str, f: str, value: Any) -> None:
    _check_type(source, number, kind)
    if f not in ("read", "write", "cas"):
        raise HistoryError(source, number, f"unknown f {f!r} (expected read, write or cas)")
    if value == _TIMED_OUT and kind in ("invoke", "ok"):
        raise HistoryError(source, number, f"{kind} {f} cannot be :timed-out")
    if value == _TIMED_OUT or kind == "info":
        return
    if f == "read":
        fits = value is None if kind == "invoke" else value is None or isinstance(value, int)
        shape = "nil" if kind == "invoke" else "nil or an integer"
    elif f == "write":
        fits, shape = isinstance(value, int), "an integer"
    else:
        fits, shape = isinstance(value, list), "[from to]"
    if not fits:
        raise HistoryError(source, number, f"{kind} {f} needs {shape}, got {value!r}")


def _kv_ops(source: str) -> Iterator[tuple[int, Op]]:
    """Ops of a Porcupine kv history, with Jepsen's keyed values [key, value]."""
    for index, (number, text) in enumerate(_lines(source)):
        match = _KV_LINE.match(text)
        if match is not None:
            process, kind, f, key, raw = match.groups()
        else:
            process, kind, f, key, raw = _kv_fields(source, number, text)
        value = None if raw == "nil" else _unquote(raw)
        _check_kv_value(source, number, kind, f, value)
        yield number, Op(index, index, kind, int(process), f, [_unquote(key), value])  # type: ignore[arg-type]


def _kv_fields(source: str, number: int, text: str) -> tuple[str, str, str, str, str]:
    """The fields of a kv line whose fields are in another order or spacing."""
    fields: dict[str, str] = {}
    body = text[1:-1] if text.startswith("{") and text.endswith("}") else None
    position = 0
    while body is not None and position < len(body):
        match = _KV_FIELD.match(body, position)
        if match is None:
            body = None
            break
        fields[match.group(1)] = match.group(2)
        position = match.end()
    if body is None:
        raise HistoryError(source, number, f"not a Porcupine kv line: {text[:80]!r}")
    missing = [name for name in ("process", "type", "f", "key", "value") if name not in fields]
    if missing:
        raise HistoryError(source, number, f"missing field {':' + missing[0]}")
    process, kind, f, key = fields["process"], fields["type"], fields["f"], fields["key"]
    if not re.fullmatch(r"-?\d+", process):
        raise HistoryError(source, number, f":process must be an integer, got {process}")
    if not (kind.startswith(":") and f.startswith(":") and key.startswith('"')):
        raise HistoryError(source, number, "kv lines need :type and :f keywords and a string :key")
    return process, kind[1:], f[1:], key, fields["value"]


def _check_kv_value(source: str, number: int, kind: str, f: str, value: Any) -> None:
    _check_type(source, number, kind)
    if f not in ("get", "put", "append"):
        raise HistoryError(source, number, f"unknown f {f!r} (expected get, put or append)")
    if f == "get" and kind == "invoke":
        fits, shape = value is None, "nil"
    elif kind in ("fail", "info"):
        fits, shape = True, ""
    else:
        fits, shape = isinstance(value, str), "a string"
    if not fits:
        raise HistoryError(source, number, f"{kind} {f} needs {shape} as :value, got {value!r}")


def _check_type(source: str, number: int, kind: str) -> None:
    if kind not in OP_TYPES:
        raise HistoryError(
            source, number, f"unknown type {kind!r} (expected one of invoke, ok, fail, info)"
        )


def _unquote(quoted: str) -> str:
    body = quoted[1:-1]
    if "\\" in body:
        body = _ESCAPE.sub(lambda match: _ESCAPED.get(match.group(1), match.group(1)), body)
    return body


edn_format.add_tag("jepsen.history.Op", lambda fields: fields)


def _edn_ops(source: str, *, missing_time: int | None,
             int_keys: bool) -> Iterator[tuple[int, Op]]:
    """Ops of a Jepsen EDN history (one map per line, or a vector or list of maps).

    A missing `:index` is the op's position; a missing `:time` is `missing_time`, or
    the index when that is None. Integer map keys stay integers with `int_keys`,
    else become strings as in JSON.
    """
    try:
        with open(source, encoding="utf-8") as file:
            text = file.read()
    except UnicodeDecodeError as error:
        raise HistoryError(source, 1, f"not UTF-8: {error.reason}") from None
    try:
        parsed = edn_format.loads_all(text, write_ply_tables=False)
    except Exception as error:  # edn_format raises several types on bad input
        number, reason = _edn_error(text, error)
        raise HistoryError(source, number, f"invalid EDN: {reason}") from None
    nested = len(parsed) == 1 and isinstance(parsed[0], list | tuple | edn_format.ImmutableList)
    items = list(parsed[0]) if nested else parsed
    lines = _element_lines(text, 1 if nested else 0)
    if len(lines) != len(items):
        lines = [position + 1 for position in range(len(items))]
    for position, (item, number) in enumerate(zip(items, lines, strict=True)):
        if not isinstance(item, Mapping):
            raise HistoryError(source, number, f"expected an EDN map, got {_edn_text(item)}")
        fields = {_field_name(source, number, key): _json_value(source, number, value, int_keys)
                  for key, value in item.items()}
        fields.setdefault("index", position)
        fields.setdefault("time", fields["index"] if missing_time is None else missing_time)
        yield number, op_from_json(fields, source, number)


def _edn_error(text: str, error: Exception) -> tuple[int, str]:
    """The first line that fails to parse on its own, else line 1, and the reason."""
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() and not line.lstrip().startswith(("[", "]", "(", ")")):
            try:
                edn_format.loads_all(line, write_ply_tables=False)
            except Exception as line_error:  # same as above
                return number, _reason(line_error)
    return 1, _reason(error)


def _reason(error: Exception) -> str:
    return str(error) or type(error).__name__


def _element_lines(text: str, depth: int) -> list[int]:
    """Lines where the collections at nesting `depth` start (strings and comments skipped)."""
    starts: list[int] = []
    level, line, position, end = 0, 1, 0, len(text)
    while position < end:
        char = text[position]
        if char == "\n":
            line += 1
        elif char == '"':
            position += 1
            while position < end and text[position] != '"':
                if text[position] == "\\":
                    position += 1
                elif text[position] == "\n":
                    line += 1
                position += 1
        elif char == ";":
            while position + 1 < end and text[position + 1] != "\n":
                position += 1
        elif char == "\\":
            position += 1
        elif char in "([{":
            if level == depth:
                starts.append(line)
            level += 1
        elif char in ")]}":
            level -= 1
        position += 1
    return starts


def _map_key(key: Any, int_keys: bool) -> str | int:
    """An EDN map key: keywords and symbols become their names, integers stay integers
    with `int_keys`, anything else becomes its JSON text."""
    if isinstance(key, str) or (int_keys and isinstance(key, int) and not isinstance(key, bool)):
        return key
    if isinstance(key, edn_format.Keyword | edn_format.Symbol):
        return str(key.name)
    try:
        return json.dumps(_plain(key), sort_keys=True)
    except TypeError:
        raise ValueError(f"EDN map key {_edn_text(key)} has no JSON form") from None


def _field_name(source: str, number: int, key: Any) -> str:
    """The name of an op's field: a keyword (a symbol or a string will do)."""
    if isinstance(key, str):
        return key
    if isinstance(key, edn_format.Keyword | edn_format.Symbol):
        return str(key.name)
    raise HistoryError(source, number, f"op field names must be keywords, got {_edn_text(key)}")


def _json_value(source: str, number: int, value: Any, int_keys: bool) -> Any:
    try:
        return _plain(value, int_keys)
    except ValueError as error:
        raise HistoryError(source, number, str(error)) from None


def _plain(value: Any, int_keys: bool = False) -> Any:
    """An EDN value as a JSON value: keywords and symbols become their names (integer
    map keys stay integers with `int_keys`)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a JSON number")
        return value
    if isinstance(value, edn_format.Keyword | edn_format.Symbol):
        return value.name
    if isinstance(value, Mapping):
        return {_map_key(key, int_keys): _plain(item, int_keys) for key, item in value.items()}
    if isinstance(value, list | tuple | edn_format.ImmutableList):
        return [_plain(item, int_keys) for item in value]
    if isinstance(value, frozenset | set):
        return sorted((_plain(item, int_keys) for item in value), key=json.dumps)
    if isinstance(value, decimal.Decimal | fractions.Fraction):
        return float(value)
    if isinstance(value, datetime.date | datetime.datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, edn_format.MetadataValue):
        return _plain(value.value, int_keys)
    raise ValueError(f"EDN value {_edn_text(value)} has no JSON form")


def _edn_text(value: Any) -> str:
    return repr(value)[:60]
