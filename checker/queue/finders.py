"""One key's queue anomalies: `analyse_key` builds the key's log (`checker.queue.log`)
and runs one finder per anomaly on it, and collects the key's dependency edges
(`checker.queue.edges`) into a `KeyReport`.

Anomalies (witnesses name ops by index):
  lost-write             committed, never read, though a later offset of its key was read;
                         or read, but every offset it was seen at later read another value
                         (the log was truncated under it, e.g. by an unclean election);
                         or, when the final drain asked the broker for the key's end
                         offset, every offset it was acknowledged or read at is at or past
                         that end (the log was cut back under it and nothing rewrote it,
                         e.g. every replica lost its unflushed tail in a power loss)
  unseen                 committed, never read, at or beyond every offset read of its key
                         and, if the end offset is known, below it
  duplicate              one value at several offsets of a key (polls of aborted and
                         crashed transactions count: a poller must never return bad data)
  inconsistent-offsets   one offset of a key holding different values
  G1a                    an ok poll read a value whose send failed
  precommitted-read      an op polled a value it sent itself (before it committed)
  poll-skip              a process's next poll of a key skips offsets known to exist
  nonmonotonic-poll      a process's next poll of a key starts at or before where it was
  int-poll-skip          the same two, within one op's polls of a key
  int-nonmonotonic-poll
  nonmonotonic-send      a process's op's first send to a key lands at or before its
                         previous op's last send there
  int-send-skip          one op's successive sends to a key are not adjacent in the log
                         (allowed: transactions interleave their sends in Kafka)
  int-nonmonotonic-send  one op's successive sends to a key go backwards in the log
  G1b                    (for `checker.txn.checker`) an ok poll's last record of a key is a
                         committed transaction's send that was not its last to that key

Offsets are compared by their rank in the key's version order, so gaps that no op ever
saw (transaction markers) are not skips. A poll of a failed or crashed op is checked
against where the process's last ok poll of the key ended but does not move it (the
consumer rewinds). A completed assign or subscribe keeps the positions of the keys it
lists and forgets the others (all of them if it seeks to the beginning); a crash
forgets all.
"""

from __future__ import annotations

import bisect
import time
from array import array
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from checker.queue.edges import key_edges
from checker.queue.events import Event, Key, dropped_at
from checker.queue.log import KeyLog, Write, key_log, pair_key_events

__all__ = ["KeyReport", "QueueBudget", "analyse_key"]

EXAMPLES_PER_KEY = 32
SKIPPED_SHOWN = 8
NS_PER_SECOND = 1_000_000_000


@dataclass(frozen=True)
class QueueBudget:
    """Bounds on the queue analysis: wall seconds for all of it, and events per key (one
    key's analysis holds all its events in memory). Past either, the checkers that use the
    analysis answer "unknown" with the reason, never a hang or an out-of-memory kill.
    `of(test, opts)` reads `queue_budget_seconds` and `queue_budget_key_events` from opts,
    then from the test."""

    seconds: float = 900.0
    key_events: int = 4_000_000

    @classmethod
    def of(cls, test: Mapping[str, Any], opts: Mapping[str, Any]) -> QueueBudget:
        seconds = opts.get("queue_budget_seconds", test.get("queue_budget_seconds"))
        events = opts.get("queue_budget_key_events", test.get("queue_budget_key_events"))
        return cls(cls.seconds if seconds is None else float(seconds),
                   cls.key_events if events is None else int(events))

    def deadline(self) -> float:
        """The wall-clock time (time.time(), shared by executors) the analysis must end by."""
        return time.time() + self.seconds

    def too_many(self, key: Key, events: int) -> str | None:
        if events <= self.key_events:
            return None
        return (f"key {key!r}: {events} events exceed the memory budget of {self.key_events} "
                f"(queue_budget_key_events)")


class _OutOfTime(Exception):
    pass


@dataclass
class KeyReport:
    """What one key's analysis found. `edges` are the key's dependency edges between ops,
    flat (`checker.queue.edges.EDGE_FIELDS` ints each), and `edge_values` their values
    (from, to)."""

    key: Key
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    losses: list[dict[str, Any]] = field(default_factory=list)
    unseen_deltas: dict[int, int] = field(default_factory=dict)
    acks: dict[Any, dict[str, int]] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    edges: array = field(default_factory=lambda: array("q"))
    edge_values: list[tuple[Any, Any]] = field(default_factory=list)
    unknown: str | None = None

    def add(self, kind: str, witness: dict[str, Any]) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        shown = self.examples.setdefault(kind, [])
        if len(shown) < EXAMPLES_PER_KEY:
            shown.append(witness)


def analyse_key(key: Key, events: list[Event],
                resets: Mapping[Any, Sequence[tuple[int, tuple | None]]],
                budget: QueueBudget | None = None, deadline: float | None = None,
                proven: Collection[int] = frozenset(),
                end: tuple[int, int] | None = None) -> KeyReport:
    """Run every finder on one key's events; `resets` maps process -> sorted (index, kept
    keys) of its reassignments, `proven` holds the indices of info transactions known to
    have committed (`checker.queue.events.proven_sends` of every key), `end` the key's end
    offset from the final drain and the index of the op that asked. Past the budget (too
    many events, or `deadline` passed) the report is `unknown`."""
    budget = budget or QueueBudget()
    too_many = budget.too_many(key, len(events))
    if too_many:
        return KeyReport(key, unknown=too_many)
    try:
        return _analyse_key(key, events, dropped_at(resets, key), proven, deadline, end)
    except _OutOfTime:
        return KeyReport(key, unknown=f"key {key!r}: the time budget of {budget.seconds:g} s "
                                      f"was spent (queue_budget_seconds)")


def _analyse_key(key: Key, events: list[Event], dropped: Mapping[Any, Sequence[int]],
                 proven: Collection[int], deadline: float | None,
                 end: tuple[int, int] | None) -> KeyReport:
    def in_time() -> None:
        if deadline is not None and time.time() > deadline:
            raise _OutOfTime

    in_time()
    writes, reads = pair_key_events(events)
    log = key_log(key, writes, reads, proven)
    report = KeyReport(key)
    ok_reads = [event for event in reads if event[5] == "ok"]
    first_read: dict[Any, tuple[int, int]] = {}
    last_read: dict[Any, int] = {}
    latest_read: dict[int, tuple[int, Any]] = {}
    max_read: tuple[int, int] | None = None
    for index, _, _, when, pairs, *_ in ok_reads:
        for offset, value in pairs:
            latest_read[offset] = (index, value)
            last_read[value] = max(when, last_read.get(value, when))
            if value not in first_read:
                first_read[value] = (index, when)
            if max_read is None or offset > max_read[0]:
                max_read = (offset, index)

    in_time()
    _inconsistent_offsets(report, log.offset_values)
    duplicated = _duplicates(report, log.value_offsets)
    _aborted_reads(report, ok_reads, log.writer)
    _precommitted_reads(report, log)
    in_time()
    _losses(report, log, first_read, last_read, max_read,
            _overwritten(log.value_offsets, latest_read), end)
    in_time()
    _poll_orders(report, log, dropped)
    in_time()
    _send_orders(report, log, dropped)
    _intermediate_reads(report, log, ok_reads)
    in_time()
    committed_reads = [event for event in reads
                       if event[5] == "ok" or (event[5] == "info" and event[0] in proven)]
    report.edges, report.edge_values = key_edges(log, committed_reads)
    _acks_stats(report, writes, duplicated)
    report.stats = {
        "sends": len(writes),
        "reads": len(ok_reads),
        "values-read": len(first_read),
        "reads-without-send": sum(1 for v in first_read if v not in log.writer),
        "max-offset": log.offsets[-1] if log.offsets else None,
    }
    return report


def _inconsistent_offsets(report: KeyReport, offset_values: dict[int, dict[Any, int]]) -> None:
    for offset, values in offset_values.items():
        if len(values) > 1:
            report.add("inconsistent-offsets", {
                "key": report.key, "offset": offset, "values": list(values),
                "ops": sorted(set(values.values()))})


def _duplicates(report: KeyReport, value_offsets: dict[Any, dict[int, int]]) -> set[Any]:
    duplicated = set()
    for value, offsets in value_offsets.items():
        if len(offsets) > 1:
            duplicated.add(value)
            report.add("duplicate", {
                "key": report.key, "value": value, "offsets": sorted(offsets),
                "ops": sorted(set(offsets.values()))})
    return duplicated


def _aborted_reads(report: KeyReport, ok_reads: list[Event], writer: dict[Any, Write]) -> None:
    for index, _, _, _, pairs, *_ in ok_reads:
        for offset, value in pairs:
            w = writer.get(value)
            if w is not None and w.status == "fail":
                report.add("G1a", {"key": report.key, "value": value, "offset": offset,
                                   "ops": [w.index, index]})


def _precommitted_reads(report: KeyReport, log: KeyLog) -> None:
    """An op that polled a value it sent itself: Kafka hides a transaction's sends from
    every poller, its own too, until it commits."""
    sent = {(w.index, w.value) for w in log.writes if w.linked}
    for index, _, _, _, pairs, _, writes, _ in log.reads:
        if not writes:
            continue
        for offset, value in pairs:
            if (index, value) in sent:
                report.add("precommitted-read", {"key": report.key, "value": value,
                                                 "offset": offset, "ops": [index]})


def _overwritten(value_offsets: dict[Any, dict[int, int]],
                 latest_read: dict[int, tuple[int, Any]]) -> dict[Any, tuple[int, Any, int]]:
    """Values every offset of which was last read holding another value: value ->
    (offset, the value there now, the read that saw it)."""
    overwritten = {}
    for value, offsets in value_offsets.items():
        now = [(offset, latest_read.get(offset)) for offset in offsets]
        if all(latest is not None and latest[1] != value for _, latest in now):
            offset, (index, other) = min(now)
            overwritten[value] = (offset, other, index)
    return overwritten


def _losses(report: KeyReport, log: KeyLog, first_read: dict[Any, tuple[int, int]],
            last_read: dict[Any, int], max_read: tuple[int, int] | None,
            overwritten: dict[Any, tuple[int, Any, int]],
            log_end: tuple[int, int] | None) -> None:
    """Committed sends never read (lost below the highest offset read, else unseen), those
    read but overwritten later (lost; the loss keeps when a poll last read it), and those
    whose every offset is at or past the key's end offset (lost)."""
    deltas = report.unseen_deltas
    for w in log.committed:
        if log.writer.get(w.value) is not w:
            continue
        value = w.value
        seen = first_read.get(value)
        if seen is not None and value in overwritten:
            offset, other, index = overwritten[value]
            witness = {"key": report.key, "value": value, "offset": offset,
                       "overwritten-by": other, "ops": [w.index, seen[0], index]}
            _lose(report, w, "lost-write", witness, last_read[value])
            continue
        offsets = log.value_offsets.get(value)
        if log_end is not None and offsets and min(offsets) >= log_end[0]:
            witness = {"key": report.key, "value": value, "offset": min(offsets),
                       "end-offset": log_end[0],
                       "ops": [w.index, *([seen[0]] if seen else []), log_end[1]]}
            _lose(report, w, "lost-write", witness,
                  last_read[value] if seen is not None else None)
            continue
        if seen is not None:
            start, end = w.time // NS_PER_SECOND, seen[1] // NS_PER_SECOND
            if start < end:
                deltas[start] = deltas.get(start, 0) + 1
                deltas[end] = deltas.get(end, 0) - 1
            continue
        if w.offset is not None and max_read is not None and w.offset < max_read[0]:
            _lose(report, w, "lost-write", {
                "key": report.key, "value": value, "offset": w.offset,
                "max-read-offset": max_read[0], "ops": [w.index, max_read[1]]})
        else:
            _lose(report, w, "unseen", {"key": report.key, "value": value, "offset": w.offset,
                                        "ops": [w.index]})
            second = w.time // NS_PER_SECOND
            deltas[second] = deltas.get(second, 0) + 1


def _lose(report: KeyReport, w: Write, kind: str, witness: dict[str, Any],
          last_read: int | None = None) -> None:
    """A loss: `time` is the send's, `last_read` the time of the last poll that read it."""
    report.losses.append({"kind": kind, "witness": witness, "status": w.status,
                          "invoke": w.invoke, "time": w.time, "last_read": last_read,
                          "acks": w.acks, "node": w.node})
    report.add(kind, witness)


def _skipped(offsets: list[int], low: int, high: int) -> list[int]:
    return offsets[low + 1:min(high, low + 1 + SKIPPED_SHOWN)]


def _poll_orders(report: KeyReport, log: KeyLog, dropped: Mapping[Any, Sequence[int]]) -> None:
    """Within each poll, and from a process's last ok poll of the key to its next poll (of
    any outcome: a failed or crashed transaction's consumer rewinds to where its last
    committed poll ended, so only ok polls move that point), unless the process dropped
    the key in between."""
    key, rank, offsets = report.key, log.rank, log.offsets
    last_seen: dict[Any, tuple[int, int]] = {}
    for index, _, process, _, pairs, kind, *_ in log.reads:
        if not pairs:
            continue
        for (o1, v1), (o2, v2) in zip(pairs, pairs[1:], strict=False):
            delta = rank[o2] - rank[o1]
            if delta > 1:
                report.add("int-poll-skip", {"key": key, "offsets": [o1, o2], "ops": [index],
                                             "skipped": _skipped(offsets, rank[o1], rank[o2])})
            elif delta < 1:
                report.add("int-nonmonotonic-poll", {"key": key, "offsets": [o1, o2],
                                                     "values": [v1, v2], "ops": [index]})
        last = last_seen.get(process)
        if last is not None and not _between(dropped.get(process), last[1], index):
            before, first = last[0], pairs[0][0]
            delta = rank[first] - rank[before]
            if delta > 1:
                report.add("poll-skip", {"key": key, "offsets": [before, first],
                                         "ops": [last[1], index],
                                         "skipped": _skipped(offsets, rank[before], rank[first])})
            elif delta < 1:
                report.add("nonmonotonic-poll", {"key": key, "offsets": [before, first],
                                                 "ops": [last[1], index]})
        if kind == "ok":
            last_seen[process] = (pairs[-1][0], index)


def _between(indices: Sequence[int] | None, low: int, high: int) -> bool:
    """Whether a reset falls after op `low` and up to op `high`: a reset carried by op
    `high` itself (a rebalance callback during that poll) came before its records."""
    if not indices:
        return False
    at = bisect.bisect_right(indices, low)
    return at < len(indices) and indices[at] <= high


def _send_orders(report: KeyReport, log: KeyLog, dropped: Mapping[Any, Sequence[int]]) -> None:
    """Within one op, successive sends to the key must take adjacent places of the version
    order (int-send-skip, int-nonmonotonic-send); a process's op's first send must come
    after its previous op's last send (nonmonotonic-send) unless it dropped the key in
    between. Places come from offsets or, failing those, from reads (`KeyLog.position`)."""
    key, position = report.key, log.position
    by_op: dict[int, list[Write]] = {}
    for w in log.writes:
        by_op.setdefault(w.index, []).append(w)
    last_sent: dict[Any, tuple[int, Write]] = {}
    for index in sorted(by_op):
        sent = sorted(by_op[index], key=lambda w: w.position)
        for a, b in zip(sent, sent[1:], strict=False):
            if a.value not in position or b.value not in position:
                continue
            delta = position[b.value] - position[a.value]
            if delta > 1:
                low, high = position[a.value], position[b.value]
                report.add("int-send-skip", {
                    "key": key, "values": [a.value, b.value], "offsets": [a.offset, b.offset],
                    "skipped": _skipped(log.offsets, low, high), "ops": [index]})
            elif delta < 1:
                report.add("int-nonmonotonic-send", {
                    "key": key, "values": [a.value, b.value], "offsets": [a.offset, b.offset],
                    "ops": [index]})
        first = sent[0]
        if first.status == "fail":
            continue
        last = last_sent.get(first.process)
        if last is not None and not _between(dropped.get(first.process), last[0], index):
            before = last[1]
            if before.value in position and first.value in position and \
                    position[first.value] <= position[before.value]:
                report.add("nonmonotonic-send", {
                    "key": key, "offsets": [before.offset, first.offset],
                    "values": [before.value, first.value], "ops": [last[0], index]})
        last_sent[first.process] = (index, sent[-1])


def _intermediate_reads(report: KeyReport, log: KeyLog, ok_reads: list[Event]) -> None:
    """G1b: an ok poll's last record of the key is a committed transaction's send that was
    not that transaction's last send to the key (a later one sits at a higher offset): the
    poll saw the transaction's intermediate state of the key."""
    later: dict[Any, Write] = {}
    by_op: dict[int, list[Write]] = {}
    for w in log.committed:
        if w.atomic and w.offset is not None:
            by_op.setdefault(w.index, []).append(w)
    for sent in by_op.values():
        sent.sort(key=lambda w: w.position)
        for a, b in zip(sent, sent[1:], strict=False):
            if b.offset > a.offset:
                later[a.value] = b
    if not later:
        return
    for index, _, _, _, pairs, *_ in ok_reads:
        if not pairs:
            continue
        offset, value = pairs[-1]
        following = later.get(value)
        if following is not None and following.index != index:
            report.add("G1b", {"key": report.key, "value": value, "offset": offset,
                               "next-value": following.value, "next-offset": following.offset,
                               "ops": [following.index, index]})


def _acks_stats(report: KeyReport, writes: list[Write], duplicated: set[Any]) -> None:
    status_field = {"ok": "acknowledged", "fail": "failed", "info": "unknown"}
    for w in writes:
        counts = report.acks.get(w.acks)
        if counts is None:
            counts = report.acks[w.acks] = {
                "attempted": 0, "acknowledged": 0, "failed": 0, "unknown": 0, "duplicated": 0}
        counts["attempted"] += 1
        counts[status_field[w.status]] += 1
        if w.value in duplicated:
            counts["duplicated"] += 1
