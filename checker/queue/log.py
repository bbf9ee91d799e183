"""One key's log as the finders (`checker.queue.finders`) and the dependency edges
(`checker.queue.edges`) see it: its sends paired with their completions, which of them
committed, and the version order of its offsets."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from checker.queue.events import COMPLETE, INVOKE, Event, Key

__all__ = ["KeyLog", "Write", "key_log", "pair_key_events"]


@dataclass(slots=True)
class Write:
    """One send micro-op. `index` is its completion's (its invoke's if it never completed);
    `offset` is what the completion said, even if the op was info or failed."""

    value: Any
    offset: int | None
    status: str
    process: Any
    invoke: int
    index: int
    time: int
    acks: Any
    node: Any
    position: int
    atomic: bool
    linked: bool


def pair_key_events(events: list[Event]) -> tuple[list[Write], list[Event]]:
    """A key's sends, each with its completion's status and offset, and its reads, in order."""
    events.sort(key=lambda e: (e[0], e[1]))
    writes: list[Write] = []
    reads: list[Event] = []
    open_invokes: dict[Any, Event] = {}

    def unfinished(invoke: Event) -> None:
        index, _, process, when, items, acks, node, atomic, linked = invoke
        for position, value in items:
            writes.append(Write(value, None, "info", process, index, index, when, acks, node,
                                position, atomic, linked))

    for event in events:
        process = event[2]
        if event[1] == INVOKE:
            previous = open_invokes.pop(process, None)
            if previous is not None:
                unfinished(previous)
            open_invokes[process] = event
        elif event[1] == COMPLETE:
            index, _, _, when, status, items, acks, node, atomic, linked = event
            invoke = open_invokes.pop(process, None)
            invoke_index = index if invoke is None else invoke[0]
            if invoke is not None:
                acks = invoke[5] if acks is None else acks
                node = invoke[6] if node is None else node
            for position, offset, value in items:
                writes.append(Write(value, offset, status, process, invoke_index, index, when,
                                    acks, node, position, atomic, linked))
        else:
            previous = open_invokes.pop(process, None)
            if previous is not None:
                unfinished(previous)
            reads.append(event)
    for invoke in open_invokes.values():
        unfinished(invoke)
    return writes, reads


def _ok_read_values(reads: list[Event]) -> set[Any]:
    return {value for event in reads if event[5] == "ok" for _, value in event[4]}


@dataclass
class KeyLog:
    """One key's history, as the finders see it.

    `committed` sends are ok ones and info ones proven by a read (their own value, or for a
    transaction any value it sent, `proven`). The version order is every offset a
    committed send or any poll (ok, info or failed: a poller must never return bad data,
    whatever its transaction does) observed; `rank` is an offset's place in it.
    `position` is a value's rank: its committed send's offset, else where it was read.
    """

    key: Key
    writes: list[Write]
    reads: list[Event]
    writer: dict[Any, Write]
    committed: list[Write]
    offset_values: dict[int, dict[Any, int]]
    value_offsets: dict[Any, dict[int, int]]
    offsets: list[int]
    rank: dict[int, int]
    position: dict[Any, int]


def key_log(key: Key, writes: list[Write], reads: list[Event],
            proven: Collection[int]) -> KeyLog:
    """The KeyLog of one key's paired sends and reads. A value's writer is its committed
    send if it has one, else its send of the most certain outcome (ok, info, fail)."""
    read = _ok_read_values(reads)
    committed = [w for w in writes if w.status == "ok" or (
        w.status == "info" and (w.value in read or (w.atomic and w.index in proven)))]
    offset_values: dict[int, dict[Any, int]] = {}
    value_offsets: dict[Any, dict[int, int]] = {}

    def observe(offset: int, value: Any, index: int) -> None:
        offset_values.setdefault(offset, {}).setdefault(value, index)
        value_offsets.setdefault(value, {}).setdefault(offset, index)

    for w in committed:
        if w.offset is not None:
            observe(w.offset, w.value, w.index)
    first_offset: dict[Any, int] = {}
    for index, _, _, _, pairs, *_ in reads:
        for offset, value in pairs:
            observe(offset, value, index)
            if value not in first_offset or offset < first_offset[value]:
                first_offset[value] = offset
    writer: dict[Any, Write] = {}
    rank_of_status = {"ok": 0, "info": 1, "fail": 2}
    chosen = {id(w) for w in committed}
    for w in writes:
        known = writer.get(w.value)
        if known is None or (id(w) in chosen, -rank_of_status[w.status]) > (
                id(known) in chosen, -rank_of_status[known.status]):
            writer[w.value] = w
    offsets = sorted(offset_values)
    rank = {offset: i for i, offset in enumerate(offsets)}
    position = {value: rank[offset] for value, offset in first_offset.items()}
    for w in committed:
        if w.offset is not None:
            position[w.value] = rank[w.offset]
    return KeyLog(key, writes, reads, writer, committed, offset_values, value_offsets,
                  offsets, rank, position)

