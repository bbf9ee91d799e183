"""Sequential specifications for the linearizability checker.

A `Model` is a handful of pure functions, in Porcupine's spirit: `init` gives
the initial state, `step(state, op)` says whether the operation is legal in
that state and what state follows. States must be hashable and compare by
value, so the checker can memoise configurations. `partition` splits a
history into independent sub-histories (P-compositionality: a history is
linearizable iff every partition is), and `read_only` marks operations that
never change the object; when such an op leaves the state as it was, the
checker linearizes it at once instead of branching on it.

A state may stand for a set of concrete states, as the kv model's does (see
there); `step` must then accept an op wherever some state of the set does,
and leave the set of what remains possible.

Values follow Jepsen's conventions: register `read` (null at invoke, the value
read at ok), `write` v, `cas` [from, to]; keyed ops carry [key, v] (Jepsen's
independent keys: each key a register of its own). The log
model takes the queue workload's ops as a history holds them (docs/history-format.md:
`send`, `poll`, `txn`) and checks each key as a linearizable Kafka
partition; its specification, and the reduction that keeps it fast, are stated
where it is defined. `partition_log` does more than split: it resolves each
key's log once, so `step` stays a comparison.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from checker.history import Operation
from checker.queue.events import normalise_key

State = Hashable
Step = Callable[[State, Operation], tuple[bool, State]]


def _never_read_only(f: str, value: Any) -> bool:
    return False


def _describe_operation(op: Operation) -> str:
    output = "" if op.status != "ok" else f" -> {op.output!r}"
    return f"{op.f}({op.input!r}){output}"


@dataclass(frozen=True, kw_only=True)
class Model:
    """A sequential specification: pure functions only, `step` must not mutate its state.
    `keys`, for a `partition` that splits op by op, names the partitions one operation
    belongs to, as `partition` would, cheaply and without the rest of the history."""

    name: str
    init: Callable[[], State]
    step: Step
    partition: Callable[[Sequence[Operation]], dict[Hashable, list[Operation]]] | None = None
    keys: Callable[[Operation], Iterable[Hashable]] | None = None
    read_only: Callable[[str, Any], bool] = _never_read_only
    describe_operation: Callable[[Operation], str] = _describe_operation
    describe_state: Callable[[State], str] = repr


def partition_by_key(ops: Sequence[Operation]) -> dict[Hashable, list[Operation]]:
    """Keyed ops carry [key, value]; each key is an independent object."""
    parts: dict[Hashable, list[Operation]] = defaultdict(list)
    for op in ops:
        parts[_hashable(op.input[0])].append(op)
    return dict(parts)


def _hashable(value: Any) -> Hashable:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def _keyed(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2


def partition_independent(ops: Sequence[Operation]) -> dict[Hashable, list[Operation]]:
    """Jepsen's independent keys: when every op's value is [key, v] (a read's too), each key
    is an object of its own, its ops carrying v alone; otherwise one object holds them all.
    A single register's cas [from, to] is told apart by its reads and writes, whose values
    are not pairs."""
    if not ops or not all(_keyed(op.input) for op in ops):
        return {None: list(ops)}
    return {key: [_unkeyed(op) for op in part] for key, part in partition_by_key(ops).items()}


def _unkeyed(op: Operation) -> Operation:
    """`op` with its key taken off its input and output, leaving v."""
    key, value = op.input
    output = op.output[1] if _keyed(op.output) and op.output[0] == key else op.output
    return replace(op, input=_hashable(value), output=_hashable(output))


# --- register: read / write, initial value nil ----------------------------------------------


def _register_step(state: State, op: Operation) -> tuple[bool, State]:
    if op.f == "read":
        return op.output == state, state
    if op.f == "write":
        return True, op.input
    raise ValueError(f"register: unknown operation {op.f!r}")


REGISTER = Model(
    name="register",
    init=lambda: None,
    step=_register_step,
    partition=partition_independent,
    read_only=lambda f, value: f == "read",
)


# --- cas-register: read / write / cas [from, to], as etcd ------------------------------------


def _cas_register_step(state: State, op: Operation) -> tuple[bool, State]:
    if op.f == "cas":
        expected, new = op.input
        return state == expected, new if state == expected else state
    return _register_step(state, op)


CAS_REGISTER = Model(
    name="cas-register",
    init=lambda: None,
    step=_cas_register_step,
    partition=partition_independent,
    read_only=lambda f, value: f == "read",
)


# --- kv: get / put / append on strings, one independent register per key ---------------------
#
# Appended values are unique and a get returns the whole string, so the order of concurrent
# appends matters only once a get observes it. The state is therefore (observed, unordered):
# the string as last fixed by a put or a get, and the appends applied since, as a set of
# (value, call, return, invoke index) whose order is still open. It stands for every string
# observed + v1 + v2 + ... over the orders of the set that respect real time (an append that
# returned before another was called comes first). A get matches if one such order spells
# its output, and collapses the set into that string. This keeps one state where a concrete
# search would hold one per order of the pending appends.

_NEVER = float("inf")


def _kv_step(state: State, op: Operation) -> tuple[bool, State]:
    observed, unordered = state
    if op.f == "get":
        read = op.output[1]
        if not unordered:
            return read == observed, state
        if not read.startswith(observed) or not _spells(read, len(observed), unordered):
            return False, state
        return True, (read, frozenset())
    if op.f == "put":
        return True, (op.input[1], frozenset())
    if op.f == "append":
        returned = _NEVER if op.ret is None else op.ret
        return True, (observed, unordered | {(op.input[1], op.call, returned, op.invoke_index)})
    raise ValueError(f"kv: unknown operation {op.f!r}")


def _spells(text: str, position: int, appends: frozenset) -> bool:
    """Whether text[position:] concatenates all `appends` in an order respecting real time."""
    if not appends:
        return position == len(text)
    for append in appends:
        value, call, _, _ = append
        if not text.startswith(value, position):
            continue
        if any(ret < call for _, _, ret, _ in appends):
            continue
        if _spells(text, position + len(value), appends - {append}):
            return True
    return False


def _describe_kv_state(state: State) -> str:
    observed, unordered = state
    if not unordered:
        return repr(observed)
    return f"{observed!r} + some order of {sorted(v for v, _, _, _ in unordered)!r}"


KV = Model(
    name="kv",
    init=lambda: ("", frozenset()),
    step=_kv_step,
    partition=partition_by_key,
    read_only=lambda f, value: f == "get",
    describe_state=_describe_kv_state,
)


# --- log: one Kafka partition per key, read from queue histories ------------------------------
#
# The object is one key's log: records (offset, value), offsets increasing in append order.
# Its sequential specification, on the ops of a queue history split per key:
#
#   send v acknowledged with offset o   legal iff o is above every offset in the log;
#                                       appends (o, v)
#   send v of unknown outcome           appends (o, v) at some offset o above every offset in
#                                       the log, or never happens
#   poll returning [(o1, v1), ..., (on, vn)] for the key (n >= 1)
#                                       legal iff these are n consecutive records of the log:
#                                       all in it, in its order, none between o1 and on left out
#
# A poll is not checked against the consumer's position (an assign moves it anywhere) nor
# for returning everything up to the end (a fetch stops where it likes), so a poll that
# returned nothing for the key says nothing about it.
#
# Searched concretely, concurrent sends branch on their order and each unknown send on
# whether and where it happened. `partition_log` removes both branchings by resolving, per
# key, the log the history implies (Kafka's offsets spell the order, as in Elle):
#
# - An unknown send that no poll of its key returned is dropped. Taking it out of a legal
#   order leaves the order legal (its record can only push a later send's offset too low,
#   or split a poll's records), and "it never happened" is allowed.
# - An unknown send that a poll returned is placed at the offset that poll saw (values are
#   unique, so that record is its append; if polls saw it at several offsets, the first
#   poll by invoke index places it, and the others cannot be linearized).
# - Every remaining send is then in the log of any legal order by the end (an acknowledged
#   one by definition, a returned one before the poll that saw it), and as offsets increase
#   in append order, the log after k appends is the first k of them by offset: the
#   *resolved log*. Each send gets its position in it; each poll is compared with it once,
#   and gets the position of its last record. What cannot be placed (a second value at one
#   offset, a poll whose records are not consecutive records of the resolved log) gets no
#   position, the reason, and is never legal.
#
# The state is the number of records appended (and the last one, for descriptions): a send
# is legal iff its position is that number, a poll iff its last record's position is below
# it. Concurrent sends thus have one legal order and unknown sends one place, so the search
# never branches on them. tests/checker/test_linearizability_log_bruteforce.py checks this
# against the concrete specification above on small generated histories.
#
# Splitting ops per key: each micro-op of a `send` op is its own produce request (the op is
# not atomic), a `poll` op's result is one observation per key it returned records for, and
# a `txn` op's micro-ops are split the same way, which is weaker than the transaction's
# atomicity (never a false alarm). `assign`, `subscribe` and `crash` are not log ops. A
# failed op did not happen; an `ok` send without an offset (acks=0 gives -1, recorded as
# null) is of unknown outcome, since acks=0 acknowledges nothing.

LOG_FUNCTIONS = frozenset({"send", "poll", "txn"})
NOT_LOG_FUNCTIONS = frozenset({"assign", "subscribe", "crash", "end-offsets"})
_RECORDS_DESCRIBED = 4


@dataclass(frozen=True)
class Placed:
    """A send's record in its key's resolved log: its offset and `position` (None: it can
    never be appended, for `problem`); `related` are invoke indices of the ops that explain
    it (the send before it in the log, or the one holding its offset)."""

    offset: int
    position: int | None
    problem: str | None = None
    related: tuple[int, ...] = ()


@dataclass(frozen=True)
class Polled:
    """A poll's records of one key, and the position of the last of them in the resolved
    log (None: never legal, for `problem`); `related` are invoke indices of the sends of
    those records and of any op named by the problem."""

    records: tuple[tuple[int, Any], ...]
    last: int | None
    problem: str | None = None
    related: tuple[int, ...] = ()


@dataclass
class _KeyOps:
    sends: list[tuple[Operation, Any, int | None]] = field(default_factory=list)
    polls: list[tuple[Operation, list[tuple[int, Any]]]] = field(default_factory=list)
    failed: dict[Any, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Record:
    offset: int
    value: Any
    invoke: int
    position: int


@dataclass
class _ResolvedLog:
    """One key's resolved log, and what a poll's records are compared with."""

    key: Hashable
    records: list[_Record] = field(default_factory=list)
    at_offset: dict[int, _Record] = field(default_factory=dict)
    at_value: dict[Any, _Record] = field(default_factory=dict)
    blocked: dict[Any, str] = field(default_factory=dict)
    failed: dict[Any, int] = field(default_factory=dict)


def partition_log(ops: Sequence[Operation]) -> dict[Hashable, list[Operation]]:
    """Queue ops -> per key, `send` ops (input the value, output a `Placed`) and `poll` ops
    (output a `Polled`), placed in the key's resolved log. Raises ValueError on a malformed
    queue op or an op that is not a queue op."""
    keys: dict[Hashable, _KeyOps] = defaultdict(_KeyOps)
    for op in ops:
        _collect_log_op(op, keys)
    return {key: _resolve(key, collected) for key, collected in keys.items()}


def log_keys(op: Operation) -> Iterable[Hashable]:
    """The keys whose partition of `partition_log` holds `op`, without placing it; a
    malformed op raises the ValueError `partition_log` raises."""
    keys: dict[Hashable, _KeyOps] = defaultdict(_KeyOps)
    _collect_log_op(op, keys)
    return keys.keys()


def _collect_log_op(op: Operation, keys: dict[Hashable, _KeyOps]) -> None:
    if op.f in NOT_LOG_FUNCTIONS:
        return
    if op.f not in LOG_FUNCTIONS:
        raise ValueError(f"log: op {op.invoke_index} has f {op.f!r}, not a queue op "
                         f"({', '.join(sorted(LOG_FUNCTIONS | NOT_LOG_FUNCTIONS))})")
    _collect(op, keys)


def _collect(op: Operation, keys: dict[Hashable, _KeyOps]) -> None:
    value = op.output if op.status == "ok" else op.input
    where = f"log: op {op.invoke_index} ({op.f})"
    if not isinstance(value, list):
        raise ValueError(f"{where}: value must be a list of micro-ops, got {value!r}")
    for micro in value:
        if not isinstance(micro, list) or not micro or micro[0] not in ("send", "poll"):
            raise ValueError(f"{where}: micro-op must be [send, k, v] or [poll, ...], "
                             f"got {micro!r}")
        if micro[0] == "send":
            if len(micro) != 3:
                raise ValueError(f"{where}: send micro-op must be [send, key, value], "
                                 f"got {micro!r}")
            key, sent = normalise_key(micro[1]), micro[2]
            offset = None
            if op.status == "ok":
                if not (isinstance(sent, list) and len(sent) == 2):
                    raise ValueError(f"{where}: completed send must be [send, key, [offset, "
                                     f"value]], got {micro!r}")
                offset, sent = sent
                if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                    offset = None
            if op.status == "fail":
                keys[key].failed.setdefault(_hashable(sent), op.invoke_index)
            else:
                keys[key].sends.append((op, sent, offset))
        elif op.status == "ok" and len(micro) > 1:
            if not isinstance(micro[1], dict):
                raise ValueError(f"{where}: poll result must be an object of key -> "
                                 f"[[offset, value], ...], got {micro[1]!r}")
            for key, pairs in micro[1].items():
                records = _records(where, pairs)
                if records:
                    keys[normalise_key(key)].polls.append((op, records))


def _records(where: str, pairs: Any) -> list[tuple[int, Any]]:
    if not isinstance(pairs, list):
        raise ValueError(f"{where}: polled records must be a list, got {pairs!r}")
    records = []
    for pair in pairs:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], int)
                and not isinstance(pair[0], bool)):
            raise ValueError(f"{where}: polled record must be [offset, value], got {pair!r}")
        records.append((pair[0], _hashable(pair[1])))
    return records


def _resolve(key: Hashable, collected: _KeyOps) -> list[Operation]:
    """The key's ops, each placed in the key's resolved log."""
    first_seen: dict[Any, int] = {}
    for _, records in sorted(collected.polls, key=lambda p: p[0].invoke_index):
        for offset, value in records:
            first_seen.setdefault(value, offset)
    candidates = []
    for order, (op, value, offset) in enumerate(collected.sends):
        value = _hashable(value)
        acknowledged = offset is not None
        if not acknowledged:
            offset = first_seen.get(value)
            if offset is None:
                continue
        candidates.append((offset, not acknowledged, op.invoke_index, order, op, value))
    candidates.sort(key=lambda c: c[:4])
    log = _ResolvedLog(key, failed=collected.failed)
    placed_ops = []
    for offset, unknown, invoke, _, op, value in candidates:
        holder = log.at_offset.get(offset)
        if holder is None:
            related = (log.records[-1].invoke,) if log.records else ()
            placed = Placed(offset, len(log.records), None, related)
            record = _Record(offset, value, invoke, len(log.records))
            log.records.append(record)
            log.at_offset[offset] = record
            log.at_value.setdefault(value, record)
        else:
            problem = f"offset {offset} already holds {holder.value!r} (send #{holder.invoke})"
            placed = Placed(offset, None, problem, (holder.invoke,))
            log.blocked.setdefault(value, problem)
        placed_ops.append(_with(op, "send", value, placed, "info" if unknown else "ok"))
    polled_ops = [_with(op, "poll", None, _observe(records, log), "ok")
                  for op, records in collected.polls]
    return placed_ops + polled_ops


def _with(op: Operation, f: str, value: Any, output: Any, status: str) -> Operation:
    unknown = status != "ok"
    return Operation(op.process, f, value, output, status, op.call,
                     None if unknown else op.ret, op.invoke_index, op.complete_index)


def _observe(records: list[tuple[int, Any]], log: _ResolvedLog) -> Polled:
    """Compare a poll's records with the resolved log."""
    shown = tuple(records)
    related: list[int] = []
    positions = []
    for offset, value in records:
        record = log.at_offset.get(offset)
        if record is None or record.value != value:
            problem, named = _misread(offset, value, record, log)
            return Polled(shown, None, problem, tuple(dict.fromkeys(related + named)))
        related.append(record.invoke)
        positions.append(record.position)
    for (before, after), (low, high) in zip(zip(records, records[1:], strict=False),
                                            zip(positions, positions[1:], strict=False),
                                            strict=True):
        if high <= low:
            problem = f"offset {after[0]} after offset {before[0]}: out of log order"
            return Polled(shown, None, problem, tuple(dict.fromkeys(related)))
        if high > low + 1:
            skipped = log.records[low + 1]
            problem = (f"skips offset {skipped.offset} ({skipped.value!r}, send "
                       f"#{skipped.invoke}) between offsets {before[0]} and {after[0]}")
            return Polled(shown, None, problem, tuple(dict.fromkeys(related + [skipped.invoke])))
    return Polled(shown, positions[-1], None, tuple(dict.fromkeys(related)))


def _misread(offset: int, value: Any, record: _Record | None,
             log: _ResolvedLog) -> tuple[str, list[int]]:
    """Why the record (offset, value) is not in the resolved log, and the ops that say so."""
    read = f"reads {value!r} at offset {offset}"
    if record is not None:
        return f"{read}, which holds {record.value!r} (send #{record.invoke})", [record.invoke]
    if value in log.at_value:
        home = log.at_value[value]
        return f"{read}, but it is at offset {home.offset} (send #{home.invoke})", [home.invoke]
    if value in log.blocked:
        return f"{read}, which cannot be appended: {log.blocked[value]}", []
    if value in log.failed:
        return f"{read}, whose send failed (#{log.failed[value]})", [log.failed[value]]
    return f"{read}, never sent to key {log.key!r}", []


def _log_step(state: State, op: Operation) -> tuple[bool, State]:
    length = state[0]
    if op.f == "send":
        placed: Placed = op.output
        if placed.position != length:
            return False, state
        return True, (length + 1, placed.offset, op.input)
    if op.f == "poll":
        polled: Polled = op.output
        return polled.last is not None and polled.last < length, state
    raise ValueError(f"log: unknown operation {op.f!r} (partition the history with the model)")


def _describe_log_operation(op: Operation) -> str:
    if op.f == "send":
        placed: Placed = op.output
        how = "acknowledged at" if op.status == "ok" else "unknown outcome, polled at"
        text = f"send({op.input!r}) {how} offset {placed.offset}"
        if placed.problem is None and placed.related:
            text += f", after send #{placed.related[0]} in the log"
    elif op.f == "poll":
        polled: Polled = op.output
        records = [list(r) for r in polled.records]
        if len(records) > 2 * _RECORDS_DESCRIBED:
            shown = (f"{records[:_RECORDS_DESCRIBED]!r} ... {records[-_RECORDS_DESCRIBED:]!r} "
                     f"({len(records)} records)")
        else:
            shown = repr(records)
        text = f"poll -> {shown}"
    else:
        return _describe_operation(op)
    problem = op.output.problem
    return text if problem is None else f"{text}; impossible: {problem}"


def _describe_log_state(state: State) -> str:
    length, offset, value = state
    if not length:
        return "empty log"
    plural = "s" if length != 1 else ""
    return f"log of {length} record{plural}, the last {value!r} at offset {offset}"


LOG = Model(
    name="log",
    init=lambda: (0, None, None),
    step=_log_step,
    partition=partition_log,
    keys=log_keys,
    read_only=lambda f, value: f == "poll",
    describe_operation=_describe_log_operation,
    describe_state=_describe_log_state,
)

MODELS: dict[str, Model] = {m.name: m for m in (REGISTER, CAS_REGISTER, KV, LOG)}
