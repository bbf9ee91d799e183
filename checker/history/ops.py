"""The history: Jepsen-style ops, one JSON object per line (docs/history-format.md).

`read_history` streams and validates a JSONL history, `HistoryWriter` appends one
(flushed per op, fsynced at least every 100 ms), `write_jsonl` writes ops already
validated, `pair_operations` pairs each invocation with its completion, and
`write_edn` exports Jepsen's EDN history format.

`HistoryValidator` holds the history rules.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TextIO, TypeGuard, get_args

from checker.history.bulk import collector_paused
from checker.history.errors import HistoryError

__all__ = [
    "FAULT_STOPS",
    "NO_EFFECT",
    "HEAL",
    "NEMESIS",
    "NemesisPeriod",
    "OP_TYPES",
    "HistoryError",
    "HistoryValidator",
    "HistoryWriter",
    "Op",
    "OpType",
    "Operation",
    "fault_took_effect",
    "load_history",
    "nemesis_periods",
    "numbered_ops",
    "op_from_json",
    "op_from_line",
    "pair_operations",
    "read_history",
    "read_numbered_history",
    "write_edn",
    "split_paired",
    "write_jsonl",
]

OpType = Literal["invoke", "ok", "fail", "info"]
OP_TYPES: frozenset[str] = frozenset(get_args(OpType))
NEMESIS = "nemesis"
# The nemesis fs of a lasting fault: the f that starts it -> the f that ends it; HEAL ends all.
FAULT_STOPS: dict[str, str] = {
    "start-partition": "stop-partition",
    "start-packet-loss": "stop-packet-loss",
    "kill": "start",
    "pause": "resume",
    "pause-zookeeper": "resume-zookeeper",
    "shrink-isr": "heal-targeted",
    "kill-new-leader": "heal-targeted",
    "strand-follower": "heal-targeted",
    "depose-coordinator": "heal-targeted",
    "crash-lose-unflushed": "power-on",
    "start-pause-consumers": "stop-pause-consumers",
    "crash-vm": "start-vm",
    "pause-vm": "resume-vm",
    "clock-bump": "clock-reset",
    "clock-strobe": "clock-reset",
}
HEAL = "heal"
# What a nemesis completion's value says when its op did nothing (see `fault_took_effect`).
NO_EFFECT = frozenset({"no-target", "not-started"})
CORE_FIELDS = ("index", "time", "type", "process", "f", "value")
REQUIRED_FIELDS = ("index", "time", "type", "process", "f")
FSYNC_INTERVAL_SECONDS = 0.1


def fault_took_effect(completion: Mapping[str, Any]) -> bool:
    """Whether a nemesis op's completion (a JSON object) did something: not an error, not
    "no-target" or "not-started" (nothing to act on, nothing to undo), not a logged no-op
    (`{"skipped": reason}`), and not empty."""
    value = completion.get("value")
    if completion.get("error") or value is None or value == {} or value == []:
        return False
    if isinstance(value, str):
        return value not in NO_EFFECT
    return not (isinstance(value, Mapping) and "skipped" in value)


@dataclass(frozen=True, slots=True)
class Op:
    """One history line. `value` is a JSON value (lists, never tuples)."""

    index: int
    time: int
    type: OpType
    process: int | str
    f: str
    value: Any
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __reduce__(self) -> tuple[Callable[..., Op], tuple[Any, ...]]:
        """Pickled as its fields, an empty `extra` left out: half the time of a slotted
        dataclass's default state both ways, which counts when Spark ships a history."""
        fields = (self.index, self.time, self.type, self.process, self.f, self.value)
        return (Op, (*fields, self.extra) if self.extra else fields)

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this op: the core fields first, then the extra ones."""
        return {
            "index": self.index,
            "time": self.time,
            "type": self.type,
            "process": self.process,
            "f": self.f,
            "value": self.value,
            **self.extra,
        }


@dataclass(frozen=True, slots=True)
class Operation:
    """An invocation paired with its completion.

    `status` is "info" both for an `info` completion and for an invoke that never
    completed: the operation may take effect at any time after `call`, or never,
    so `ret` and `output` are None.
    """

    process: int | str
    f: str
    input: Any
    output: Any
    status: Literal["ok", "fail", "info"]
    call: int
    ret: int | None
    invoke_index: int
    complete_index: int | None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_op_type(kind: str) -> TypeGuard[OpType]:
    return kind in OP_TYPES


def op_from_json(obj: Any, path: str, line: int) -> Op:
    """Build an Op from a decoded JSON object, checking fields and their types."""
    if not isinstance(obj, dict):
        raise HistoryError(path, line, f"expected a JSON object, got {type(obj).__name__}")
    for name in REQUIRED_FIELDS:
        if name not in obj:
            raise HistoryError(path, line, f"missing field {name!r}")
    index, when, kind = obj["index"], obj["time"], obj["type"]
    process, f = obj["process"], obj["f"]
    if not _is_int(index) or index < 0:
        raise HistoryError(path, line, f"field 'index' must be an integer >= 0, got {index!r}")
    if not _is_int(when) or when < 0:
        raise HistoryError(path, line, f"field 'time' must be an integer >= 0 (ns), got {when!r}")
    if not isinstance(kind, str):
        raise HistoryError(path, line, f"field 'type' must be a string, got {kind!r}")
    if not _is_op_type(kind):
        raise HistoryError(
            path, line, f"unknown type {kind!r} (expected one of invoke, ok, fail, info)"
        )
    if not (_is_int(process) or isinstance(process, str)):
        raise HistoryError(
            path, line, f"field 'process' must be an integer or a string, got {process!r}"
        )
    if not isinstance(f, str) or not f:
        raise HistoryError(path, line, f"field 'f' must be a non-empty string, got {f!r}")
    extra = {key: item for key, item in obj.items() if key not in CORE_FIELDS}
    return Op(index, when, kind, process, f, obj.get("value"), extra)


class HistoryValidator:
    """Checks Jepsen's history rules on ops in order; raises at the first violation.

    Rules: indices dense from 0 (unless `dense=False`); a process invokes only when
    it has no open invoke, and never again after an `info` completion; every
    completion closes its process's open invoke, with the same `f`, no earlier
    in time. Nemesis `info` ops may stand alone.
    """

    def __init__(self, path: str, *, dense: bool = True) -> None:
        self.path = path
        self._dense = dense
        self._next_index = 0
        self._open: dict[int | str, Op] = {}
        self._crashed: set[int | str] = set()

    def check(self, op: Op, line: int) -> None:
        """Accept `op` (read at 1-based `line`) or raise HistoryError, leaving no trace."""
        if self._dense and op.index != self._next_index:
            self._fail(line, _index_violation(op.index, self._next_index))
        invoke = self._open.get(op.process)
        reason = _pairing_violation(op, invoke, self._crashed)
        if reason is not None:
            self._fail(line, reason)
        if op.type == "invoke":
            self._open[op.process] = op
        elif invoke is not None:
            del self._open[op.process]
            if op.type == "info" and op.process != NEMESIS:
                self._crashed.add(op.process)
        self._next_index += 1

    def _fail(self, line: int, reason: str) -> None:
        raise HistoryError(self.path, line, reason)


def _index_violation(index: int, expected: int) -> str:
    return f"index {index} where {expected} was expected (indices are dense from 0)"


def _pairing_violation(op: Op, invoke: Op | None, crashed: set[int | str]) -> str | None:
    """Why `op` may not follow its process's open `invoke` (None: none open), or None."""
    process = op.process
    if op.type == "invoke":
        if invoke is not None:
            return (f"process {process!r} invokes {op.f!r} while its {invoke.f!r} "
                    f"(index {invoke.index}) has not completed")
        if process in crashed:
            return (f"process {process!r} invokes again after an info completion "
                    "(a process never returns after info; use a new process id)")
        return None
    if invoke is not None:
        if invoke.f != op.f:
            return (f"{op.type} completion has f {op.f!r} but process {process!r} "
                    f"invoked {invoke.f!r} (index {invoke.index})")
        if op.time < invoke.time:
            return (f"completion time {op.time} is before its invoke's time "
                    f"{invoke.time} (index {invoke.index})")
        return None
    if process == NEMESIS and op.type == "info":
        return None
    return f"{op.type} completion of {op.f!r} by process {process!r} without an open invoke"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def op_from_line(raw: bytes, path: str, line: int) -> Op:
    """The op of one non-blank JSONL line (its newline may be left on), or HistoryError
    naming `path` and `line`."""
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    try:
        obj = _DECODER.decode(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise HistoryError(path, line, f"not UTF-8: {error.reason}") from None
    except json.JSONDecodeError as error:
        reason = f"invalid JSON: {error.msg} (column {error.colno})"
        raise HistoryError(path, line, reason) from None
    except ValueError as error:
        raise HistoryError(path, line, f"invalid JSON: {error}") from None
    return op_from_json(obj, path, line)


def read_numbered_history(path: str | os.PathLike[str]) -> Iterator[tuple[int, Op]]:
    """Stream (1-based line, op) of a JSONL history, validating each line; blank lines
    are skipped."""
    source = os.fspath(path)
    with open(source, "rb") as lines:
        yield from numbered_ops(lines, source)


def numbered_ops(lines: Iterable[bytes], source: str) -> Iterator[tuple[int, Op]]:
    """(1-based line, op) of the lines of the JSONL history named `source` (its newlines
    may be left on), validating each line; blank lines are skipped."""
    validator = HistoryValidator(source)
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        op = op_from_line(raw, source, number)
        validator.check(op, number)
        yield number, op


def read_history(path: str | os.PathLike[str]) -> Iterator[Op]:
    """Stream the ops of a JSONL history, validating each line; blank lines are skipped."""
    for _, op in read_numbered_history(path):
        yield op


def load_history(path: str | os.PathLike[str]) -> list[Op]:
    """All ops of a JSONL history, validated."""
    with collector_paused():
        return list(read_history(path))


def write_jsonl(ops: Iterable[Op], path: str | os.PathLike[str]) -> int:
    """Write ops, as they are, to a JSONL history at `path`; returns how many.

    Nothing is re-indexed or re-validated: give ops read by a validating reader
    (`read_history`, `checker.queue.events.read_queue_ops`). A value with no JSON form
    is an error naming the output line.
    """
    target = os.fspath(path)
    count = 0
    with open(target, "w", encoding="utf-8") as out:
        for count, op in enumerate(ops, 1):
            try:
                line = json.dumps(op.to_json(), allow_nan=False)
            except (TypeError, ValueError) as error:
                raise HistoryError(target, count, f"op is not JSON: {error}") from None
            out.write(line + "\n")
    return count


def pair_operations(ops: Iterable[Op], *, source: str = "<history>") -> list[Operation]:
    """Pair client invocations with their completions, in invoke order.

    Nemesis ops are left out. The pairing rules of HistoryValidator are checked
    (not index density, so a subset of a history may be paired); errors name
    `source` and line `op.index + 1`.
    """
    validator = HistoryValidator(source, dense=False)
    invokes: list[Op] = []
    completions: list[Op | None] = []
    open_at: dict[int | str, int] = {}
    for op in ops:
        validator.check(op, op.index + 1)
        if op.process == NEMESIS:
            continue
        if op.type == "invoke":
            open_at[op.process] = len(invokes)
            invokes.append(op)
            completions.append(None)
        else:
            completions[open_at.pop(op.process)] = op
    return [_operation(invoke, done) for invoke, done in zip(invokes, completions, strict=True)]


def split_paired(history: Iterable[Op], keys_of: Callable[[Operation], Iterable[Hashable]]
                 ) -> dict[Hashable, list[Op]]:
    """The ops of a history that each key needs: every client invocation and its
    completion, under each key `keys_of` gives for the paired operation, in history order.
    `pair_operations` of a key's ops gives the key's operations."""
    entries: list[tuple[Op, tuple[Hashable, ...]]] = []
    open_at: dict[int | str, tuple[Op, int]] = {}
    for op in history:
        if op.process == NEMESIS:
            continue
        entries.append((op, ()))
        if op.type == "invoke":
            open_at[op.process] = (op, len(entries) - 1)
            continue
        invoke, at = open_at.pop(op.process)
        keys = tuple(keys_of(_operation(invoke, op)))
        entries[at] = (entries[at][0], keys)
        entries[-1] = (op, keys)
    for invoke, at in open_at.values():
        entries[at] = (entries[at][0], tuple(keys_of(_operation(invoke, None))))
    parts: dict[Hashable, list[Op]] = {}
    for op, keys in entries:
        for key in keys:
            parts.setdefault(key, []).append(op)
    return parts


def _operation(invoke: Op, done: Op | None) -> Operation:
    if done is None or done.type == "info":
        return Operation(
            invoke.process, invoke.f, invoke.value, None, "info", invoke.time, None,
            invoke.index, None if done is None else done.index,
        )
    assert done.type != "invoke", "a completion is never an invoke (pairing)"
    return Operation(
        invoke.process, invoke.f, invoke.value, done.value, done.type, invoke.time, done.time,
        invoke.index, done.index,
    )


class HistoryWriter:
    """Appends ops to a JSONL history the moment they happen.

    `append` assigns the index (and the time, relative to the writer's start, when
    the op has none), validates the op against the history so far, writes one line
    and flushes it; a background thread fsyncs within 100 ms of any write, and
    `close` fsyncs. Thread-safe. Values go through JSON, so the returned Op is
    exactly what a reader will read (tuples become lists, map keys strings).
    """

    def __init__(
        self, path: str | os.PathLike[str], clock: Callable[[], int] = time.monotonic_ns
    ) -> None:
        self.path = os.fspath(path)
        self._clock = clock
        self._start = clock()
        self._file = open(self.path, "w", encoding="utf-8")
        self._validator = HistoryValidator(self.path)
        self._lock = threading.Lock()
        self._next_index = 0
        self._dirty = False
        self._closed = threading.Event()
        self._syncer = threading.Thread(target=self._sync_loop, name="history-fsync", daemon=True)
        self._syncer.start()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def append(self, op: Mapping[str, Any] | Op) -> Op:
        """Write one op (a dict of history fields, or an Op) and return it as written."""
        given = op.to_json() if isinstance(op, Op) else dict(op)
        with self._lock:
            if self._closed.is_set():
                raise ValueError(f"history writer for {self.path} is closed")
            line_number = self._next_index + 1
            given["index"] = self._next_index
            if given.get("time") is None:
                given["time"] = self._clock() - self._start
            fields = {key: given[key] for key in CORE_FIELDS if key in given}
            fields.update(given)
            try:
                line = json.dumps(fields, allow_nan=False)
            except (TypeError, ValueError) as error:
                raise HistoryError(self.path, line_number, f"op is not JSON: {error}") from None
            written = op_from_json(json.loads(line), self.path, line_number)
            self._validator.check(written, line_number)
            self._file.write(line + "\n")
            self._file.flush()
            self._next_index += 1
            self._dirty = True
        return written

    def close(self) -> None:
        """Stop the fsync thread, fsync and close the file; idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._syncer.join()
        with self._lock:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()

    def _sync_loop(self) -> None:
        while not self._closed.wait(FSYNC_INTERVAL_SECONDS):
            with self._lock:
                if not self._dirty:
                    continue
                self._dirty = False
                descriptor = self._file.fileno()
            os.fsync(descriptor)


_KEYWORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.*+!?<>=-]*\Z")
_INTEGER = re.compile(r"(?:0|-?[1-9][0-9]*)\Z")
_STRING_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def write_edn(ops: Iterable[Op], out: TextIO) -> None:
    """Write ops as Jepsen's EDN history, one map per line.

    Field names, `type`, `f` and string processes (`:nemesis`) become keywords, as
    do the names of micro-ops in a value that is a list of micro-ops
    (`[[:send 2 17]]`); other strings stay strings, null is nil, and map keys
    that spell an integer become integers (JSON forced them to strings).
    """
    for op in ops:
        parts = [
            f":index {op.index}",
            f":time {op.time}",
            f":type :{op.type}",
            f":process {_edn_name(op.process) if isinstance(op.process, str) else op.process}",
            f":f {_edn_name(op.f)}",
            f":value {_edn_value(op.value)}",
        ]
        parts.extend(f"{_edn_name(key)} {_edn(item)}" for key, item in op.extra.items())
        out.write("{" + ", ".join(parts) + "}\n")


def _edn_name(name: str) -> str:
    """A keyword when `name` can be one, else a string (both read back as `name`)."""
    return ":" + name if _KEYWORD.match(name) else _edn_string(name)


def _edn_value(value: Any) -> str:
    if (
        isinstance(value, list | tuple)
        and value
        and all(isinstance(micro, list | tuple) and micro and isinstance(micro[0], str)
                for micro in value)
    ):
        return "[" + " ".join(
            "[" + " ".join([_edn_name(micro[0]), *map(_edn, micro[1:])]) + "]" for micro in value
        ) + "]"
    return _edn(value)


def _edn(value: Any) -> str:
    if value is None:
        return "nil"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no EDN form")
        return repr(value)
    if isinstance(value, str):
        return _edn_string(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_edn_key(key)} {_edn(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + " ".join(map(_edn, value)) + "]"
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _edn_key(key: Any) -> str:
    if isinstance(key, str) and _INTEGER.match(key):
        return key
    return _edn(key)


def _edn_string(text: str) -> str:
    if _NEEDS_ESCAPE.search(text):
        text = _NEEDS_ESCAPE.sub(
            lambda match: _STRING_ESCAPES.get(match.group(), f"\\u{ord(match.group()):04x}"), text
        )
    return '"' + text + '"'


@dataclass(frozen=True)
class NemesisPeriod:
    """A fault in force from `start` to `end` (ns since the test started; None: never healed).
    An instantaneous fault (restart, expire-session) lasts from its request to its result.
    `name` is the fault as the user asked for it (the ops' `fault`, else `f`)."""

    f: str
    start: int
    end: int | None
    value: Any
    ops: tuple[int, ...]
    name: str
    instantaneous: bool = False


def nemesis_periods(ops: list[Op]) -> list[NemesisPeriod]:
    """Faults in force over time, from the nemesis ops (completions, or lone info ops): a
    lasting fault from the invocation of its start op (a targeted fault acts before it
    completes) to the completion of its stop op or the next `heal`, in start order. An
    instantaneous fault recorded as Jepsen does, its request then its result (two info ops
    of one f in a row), is one period holding the result."""
    periods: list[NemesisPeriod] = []
    open_faults: dict[str, tuple[int, Any, list[int], str]] = {}
    invoked: dict[str, int] = {}
    stop_of = dict(FAULT_STOPS)
    requested: NemesisPeriod | None = None
    for op in ops:
        if op.process != NEMESIS:
            continue
        if op.type == "invoke":
            invoked[op.f] = op.time
            continue
        f = op.f
        invoked_at = invoked.pop(f, op.time)
        if f.startswith("start-") and f not in stop_of:
            stop_of[f] = "stop-" + f[len("start-"):]
        starts_for_stop = [s for s, stop in stop_of.items() if stop == f and s in open_faults]
        if f == HEAL:
            starts_for_stop = list(open_faults)
        if starts_for_stop:
            for start in starts_for_stop:
                began, value, indices, name = open_faults.pop(start)
                periods.append(NemesisPeriod(start, began, op.time, value,
                                             (*indices, op.index), name))
        elif f in stop_of:
            if f not in open_faults:
                open_faults[f] = (invoked_at, op.value, [op.index], op.extra.get("fault") or f)
        elif f != HEAL and f not in stop_of.values():
            if requested is not None and requested.f == f:
                periods[-1] = replace(requested, end=op.time, value=op.value,
                                      ops=(*requested.ops, op.index))
                requested = None
                continue
            periods.append(NemesisPeriod(f, op.time, op.time, op.value, (op.index,),
                                         op.extra.get("fault") or f, instantaneous=True))
            requested = periods[-1]
            continue
        requested = None
    for start, (began, value, indices, name) in open_faults.items():
        periods.append(NemesisPeriod(start, began, None, value, tuple(indices), name))
    return sorted(periods, key=lambda p: p.start)
