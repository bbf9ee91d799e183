"""Queue history ops as per-key events, and the transactions that reads prove committed.

`events_of` turns one op into events of the keys it touches (shapes in its docstring)
and into resets (assign, subscribe, crash: which keys a process keeps its position on; in
a subscribe run also the keys a rebalance callback assigned or revoked, and the keys of
records a before-process poll fetched but did not process); an ok `end-offsets` op (the
final drain's: each key's end offset, as the broker answered ListOffsets for the latest
offset) gives each key an END event;
`dropped_at` reads a key's resets. An info `txn` op is atomic, so a poll of any value it
sent proves all its sends committed: `proven_sends` finds those ops key by key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from checker.history import HistoryError, Op, collector_paused, numbered_queue_ops

__all__ = ["COMPLETE", "END", "END_OFFSETS", "INVOKE", "READ", "RESET", "Event", "Key",
           "dropped_at", "events_of", "normalise_key", "proven_sends", "read_queue_ops",
           "validated_queue_ops"]

RESET = "\x00reset"
DROP = "\x00drop"  # a reset's kept keys starting with DROP: it drops just the keys after it
RESET_FUNCTIONS = frozenset({"assign", "subscribe", "crash"})
MICRO_OP_FUNCTIONS = frozenset({"send", "txn", "poll"})
END_OFFSETS = "end-offsets"
INVOKE, COMPLETE, READ, END = 0, 1, 2, 3
_INTEGER = re.compile(r"-?[0-9]+\Z")

Key = Hashable
Event = tuple


def normalise_key(key: Any) -> Key:
    """JSON object keys are strings: a key that spells an integer is that integer."""
    if isinstance(key, str) and _INTEGER.match(key):
        return int(key)
    return key


def read_queue_ops(path: str | os.PathLike[str], fmt: str = "auto") -> list[Op]:
    """All ops of a queue-workload history in one of QUEUE_FORMATS (or "auto"), validated
    as a history and micro-op by micro-op; an empty file has none."""
    source = os.fspath(path)
    return validated_queue_ops(numbered_queue_ops(source, fmt), source)


def validated_queue_ops(numbered: Iterable[tuple[int, Op]], source: str) -> list[Op]:
    """The ops of (line, op) pairs already validated as a history, each now validated micro-op
    by micro-op; a malformed one raises HistoryError naming `source` and its line."""
    ops = []
    with collector_paused():
        for line, op in numbered:
            try:
                events_of(op.index, op.time, op.type, op.process, op.f, op.value, op.extra)
            except ValueError as error:
                raise HistoryError(source, line, str(error)) from None
            ops.append(op)
    return ops


def events_of(index: int, when: int, kind: str, process: Any, f: str, value: Any,
              extra: Mapping[str, Any]) -> list[tuple[Key, Event]]:
    """The per-key events of one op; raises ValueError on a malformed queue value.

    INVOKE   (index, 0, process, time, [(pos, value)], acks, node, atomic, linked)
    COMPLETE (index, 1, process, time, type, [(pos, offset|None, value)], acks, node, atomic,
              linked)
    READ     (index, 2, process, time, [(offset, value)], type, writes, atomic)
    END      (index, 3, process, time, end offset) of an ok end-offsets op, whose value is
             an object of key -> the key's end offset (the offset its next record takes)
    and (RESET, (index, process, kept keys | None)) for a completed (ok or info) assign or
    subscribe (its value is the list of keys it keeps; one that seeks to the beginning, or
    a group subscription, keeps none) and for an invoked crash (keeps none); and
    (RESET, (index, process, (DROP, key, ...))) for a completion whose `rebalances`,
    `unprocessed` or `offset_resets` fields name keys whose position the consumer no
    longer knows.
    `linked`: the op also reads, or sends to another key (it may be on a dependency cycle);
    `writes`: the reading op also sends; `atomic`: the op is a transaction (f "txn").
    """
    moved = _moved_keys(index, process, extra) if kind != "invoke" else []
    if f in RESET_FUNCTIONS:
        return _reset_of(index, kind, process, f, value, extra) + moved
    if f == END_OFFSETS:
        return _ends_of(index, kind, process, when, value) + moved
    if f not in MICRO_OP_FUNCTIONS or value is None:
        return moved
    if not isinstance(value, list):
        raise ValueError(f"{f} value must be a list of micro-ops, got {value!r}")
    sends: dict[Key, list[tuple]] = {}
    reads: dict[Key, list[tuple[int, Any]]] = {}
    for position, micro in enumerate(value):
        if not isinstance(micro, list) or not micro:
            raise ValueError(f"micro-op {position} must be a non-empty list, got {micro!r}")
        name = micro[0]
        if name == "send":
            if len(micro) != 3:
                raise ValueError(f"send micro-op must be [send, key, value], got {micro!r}")
            key, payload = normalise_key(micro[1]), micro[2]
            if not isinstance(key, int | str) or isinstance(key, bool):
                raise ValueError(f"send key must be an integer or a string, got {key!r}")
            offset = None
            if isinstance(payload, list):
                if len(payload) != 2:
                    raise ValueError(f"completed send must be [offset, value], got {payload!r}")
                offset, payload = payload
                if offset is not None and (not isinstance(offset, int) or offset < 0):
                    offset = None
            sends.setdefault(key, []).append((position, offset, payload))
        elif name == "poll":
            if kind == "invoke" or len(micro) < 2:
                continue
            result = micro[1]
            if not isinstance(result, dict):
                raise ValueError(f"poll result must be an object of key -> pairs, got {result!r}")
            for key, pairs in result.items():
                reads.setdefault(normalise_key(key), []).extend(_pairs(pairs))
        else:
            raise ValueError(f"unknown micro-op {name!r}")
    acks, node = extra.get("acks"), extra.get("node")
    atomic = f == "txn"
    linked = bool(sends) and (bool(reads) or len(sends) > 1)
    events: list[tuple[Key, Event]] = []
    for key, items in sends.items():
        if kind == "invoke":
            events.append((key, (index, INVOKE, process, when,
                                 [(p, v) for p, _, v in items], acks, node, atomic, linked)))
        else:
            events.append((key, (index, COMPLETE, process, when, kind, items, acks, node,
                                 atomic, linked)))
    for key, pairs in reads.items():
        events.append((key, (index, READ, process, when, pairs, kind, bool(sends), atomic)))
    return events + moved


def _moved_keys(index: int, process: Any, extra: Mapping[str, Any]
                ) -> list[tuple[Key, Event]]:
    """A reset dropping the keys a rebalance callback assigned or revoked during the op,
    those whose fetched records were left unprocessed (the consumer moved past them) and
    those whose fetch position the client reset (`offset_resets`: out of range)."""
    rebalances, unprocessed = extra.get("rebalances"), extra.get("unprocessed")
    resets = extra.get("offset_resets")
    if not rebalances and not unprocessed and not resets:
        return []
    keys: set[Key] = set()
    for entry in rebalances or ():
        if not isinstance(entry, dict):
            raise ValueError(f"a rebalance must be an object, got {entry!r}")
        for field in ("assigned", "revoked"):
            keys.update(normalise_key(k) for k in entry.get(field) or ())
    for dropped in (unprocessed, resets):
        if isinstance(dropped, dict):
            keys.update(normalise_key(k) for k in dropped)
    if not keys:
        return []
    return [(RESET, (index, process, (DROP, *sorted(keys, key=repr))))]


def _reset_of(index: int, kind: str, process: Any, f: str, value: Any,
              extra: Mapping[str, Any]) -> list[tuple[Key, Event]]:
    if f == "crash":
        return [(RESET, (index, process, None))] if kind == "invoke" else []
    if kind not in ("ok", "info"):
        return []
    if extra.get("seek_to_beginning") or value is None or isinstance(value, dict):
        return [(RESET, (index, process, None))]
    if not isinstance(value, list):
        raise ValueError(f"{f} value must be the list of keys, got {value!r}")
    return [(RESET, (index, process, tuple(normalise_key(k) for k in value)))]


def _ends_of(index: int, kind: str, process: Any, when: int, value: Any
             ) -> list[tuple[Key, Event]]:
    if kind != "ok":
        return []
    if not isinstance(value, dict):
        raise ValueError(f"{END_OFFSETS} value must be an object of key -> end offset, "
                         f"got {value!r}")
    events: list[tuple[Key, Event]] = []
    for key, end in value.items():
        if not isinstance(end, int) or isinstance(end, bool) or end < 0:
            raise ValueError(f"{END_OFFSETS}: key {key!r} has end offset {end!r}, not an "
                             f"offset (an integer >= 0)")
        events.append((normalise_key(key), (index, END, process, when, end)))
    return events


def _pairs(pairs: Any) -> list[tuple[int, Any]]:
    if not isinstance(pairs, list):
        raise ValueError(f"polled records must be a list of [offset, value], got {pairs!r}")
    out = []
    for pair in pairs:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], int)):
            raise ValueError(f"polled record must be [offset, value], got {pair!r}")
        out.append((pair[0], pair[1]))
    return out


def dropped_at(resets: Mapping[Any, Sequence[tuple[int, tuple | None]]],
               key: Key) -> dict[Any, list[int]]:
    """process -> sorted indices of its resets that dropped `key` (forgetting its position)."""
    dropped: dict[Any, list[int]] = {}
    for process, items in resets.items():
        indices = [index for index, kept in items if _drops(kept, key)]
        if indices:
            dropped[process] = sorted(indices)
    return dropped


def _drops(kept: tuple | None, key: Key) -> bool:
    if kept is None:
        return True
    if kept and kept[0] == DROP:
        return key in kept[1:]
    return key not in kept


def _txn_candidates(events: Iterable[Event]) -> list[tuple[Any, int]]:
    """(value, index) of this key's transactional sends whose outcome may be unknown: those
    of info completions, and of invokes (which may never complete)."""
    candidates = []
    for event in events:
        if event[1] == INVOKE and event[7]:
            candidates.extend((value, event[0]) for _, value in event[4])
        elif event[1] == COMPLETE and event[4] == "info" and event[8]:
            candidates.extend((value, event[0]) for _, _, value in event[5])
    return candidates


def _proven_by(events: Iterable[Event], candidates: Mapping[Any, Sequence[int]]) -> set[int]:
    """The indices among `candidates` (value -> indices) whose value an ok poll in `events`
    read."""
    proven: set[int] = set()
    for event in events:
        if event[1] == READ and event[5] == "ok":
            for _, value in event[4]:
                proven.update(candidates.get(value, ()))
    return proven


def proven_sends(events: list[Event]) -> set[int]:
    """Transactions of unknown outcome (info) that one of this key's ok polls proves
    committed, by reading a value they sent, by index (their completion's, or their
    invoke's if they never completed). Pass the union over all keys to
    `checker.queue.finders.analyse_key` as `proven`. No pairing: an invoke's index among them is
    harmless when the op did complete (its sends then carry the completion's index)."""
    candidates: dict[Any, list[int]] = {}
    for value, index in _txn_candidates(events):
        candidates.setdefault(value, []).append(index)
    return _proven_by(events, candidates) if candidates else set()
