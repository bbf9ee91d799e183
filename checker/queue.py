"""Jepsen's Kafka queue anomalies, found key by key.

The pipeline, the same in the calling process and on Spark (`checker.spark`):
`events_of` turns each history op into per-key events (and process resets);
`analyse_key` pairs one key's sends with their completions and runs one finder
per anomaly on the key's log; `fold` merges the key reports into a
`QueueAnalysis`, resolving sends of unknown outcome (`info`) that count as
committed because some value of their op was read, possibly at another key. Only a
`txn` op is atomic: a `send` op's micro-ops are separate produce requests that may
partly succeed, so an unknown-outcome send micro-op is committed only if its own value
was read.
`QueueChecker` judges the analysis against `allowed_anomalies(test)`.

Anomalies (witnesses name ops by index):
  lost-write             committed, never read, though a later offset of its key was read;
                         or read, but every offset it was seen at later read another value
                         (the log was truncated under it, e.g. by an unclean election)
  unseen                 committed, never read, at or beyond every offset read of its key
  duplicate              one value at several offsets of a key
  inconsistent-offsets   one offset of a key holding different values
  G1a                    a value whose send failed was read
  poll-skip              a process's next poll of a key skips offsets known to exist
  nonmonotonic-poll      a process's next poll of a key starts at or before where it was
  int-poll-skip          the same two, within one poll's list for a key
  int-nonmonotonic-poll
  nonmonotonic-send      a process's sends to a key get offsets that do not increase

Offsets are compared by their rank in the key's version order (every offset
any send or read observed), so gaps that no op ever saw (transaction markers)
are not skips. An assign, subscribe or crash invoked by a process forgets
where its polls were.

Test keys read: `acks` (0, 1, "all"/-1; default "all"), `broker_config`
("min.insync.replicas", default 1; "unclean.leader.election.enable", default
false), `subscribe` (true when consumers subscribe rather than assign),
`idempotence` (false: the producer may duplicate on retry), `final_reads`
(default true: the history ends with reads draining every key).
"""

from __future__ import annotations

import bisect
import re
import time
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from checker.checkers import AnalysisChecker, Anomaly, Result, condense
from checker.errors import HistoryError
from checker.history import Op

__all__ = [
    "ANOMALIES",
    "QueueAnalysis",
    "QueueBudget",
    "QueueChecker",
    "KeyReport",
    "acks_label",
    "allowed_anomalies",
    "judged",
    "tolerance_reasons",
    "analyse",
    "analyse_key",
    "broker_setting",
    "events_of",
    "flag",
    "fold",
    "normalise_key",
    "promises_no_loss",
]

# What a truncated log shows, allowed where the configuration does not promise against loss:
# lost and unseen writes, and offsets going backwards under producers and consumers.
TRUNCATION = frozenset({"lost-write", "unseen", "inconsistent-offsets", "nonmonotonic-send",
                        "nonmonotonic-poll", "poll-skip"})
ANOMALIES = (
    "lost-write", "unseen", "duplicate", "inconsistent-offsets", "G1a", "poll-skip",
    "nonmonotonic-poll", "int-poll-skip", "int-nonmonotonic-poll", "nonmonotonic-send",
)
RESET = "\x00reset"
RESET_FUNCTIONS = frozenset({"assign", "subscribe", "crash"})
MICRO_OP_FUNCTIONS = frozenset({"send", "txn", "poll"})
INVOKE, COMPLETE, READ = 0, 1, 2
EXAMPLES_PER_KEY = 32
SKIPPED_SHOWN = 8
NS_PER_SECOND = 1_000_000_000
_INTEGER = re.compile(r"-?[0-9]+\Z")

Key = Hashable
Event = tuple


def normalise_key(key: Any) -> Key:
    """JSON object keys are strings: a key that spells an integer is that integer."""
    if isinstance(key, str) and _INTEGER.match(key):
        return int(key)
    return key


def acks_label(acks: Any, default: Any = "all") -> str:
    """"0", "1" or "all" for any spelling of a producer acks setting (None: the default)."""
    if acks is None:
        acks = default
    text = str(acks).strip().lower()
    if text in ("all", "-1"):
        return "all"
    if text in ("0", "1"):
        return text
    raise ValueError(f"unknown acks setting {acks!r} (expected 0, 1, all or -1)")


def broker_setting(test: Mapping[str, Any], name: str, default: Any) -> Any:
    return (test.get("broker_config") or {}).get(name, default)


def flag(value: Any) -> bool:
    """A Kafka boolean setting: true, or the string "true" in any case."""
    return value is True or str(value).strip().lower() == "true"


def promises_no_loss(test: Mapping[str, Any], acks: Any = None) -> bool:
    """acks=all, min.insync.replicas >= 2 and unclean election off promise no acked loss."""
    level = acks_label(acks if acks is not None else test.get("acks"))
    min_isr = int(broker_setting(test, "min.insync.replicas", 1))
    unclean = flag(broker_setting(test, "unclean.leader.election.enable", False))
    return level == "all" and min_isr >= 2 and not unclean


def tolerance_reasons(test: Mapping[str, Any], kinds: Iterable[str]) -> list[str]:
    """The settings of this test that allow anomalies of `kinds`, as `name=value` phrases."""
    kinds = set(kinds)
    reasons = []
    if kinds & TRUNCATION:
        level = acks_label(test.get("acks"))
        if level != "all":
            reasons.append(f"acks={level}")
        min_isr = int(broker_setting(test, "min.insync.replicas", 1))
        if min_isr < 2:
            reasons.append(f"min.insync.replicas={min_isr}")
        if flag(broker_setting(test, "unclean.leader.election.enable", False)):
            reasons.append("unclean.leader.election.enable=true")
    if "duplicate" in kinds and test.get("idempotence") is False:
        reasons.append("idempotence off")
    if kinds & {"poll-skip", "nonmonotonic-poll"} and test.get("subscribe"):
        reasons.append("consumer groups (rebalances)")
    if "unseen" in kinds and test.get("final_reads") is False:
        reasons.append("no final reads")
    return reasons


def allowed_anomalies(test: Mapping[str, Any]) -> frozenset[str]:
    """The anomaly types this test's configuration tolerates (reported, not failures)."""
    allowed: set[str] = set()
    if test.get("subscribe"):
        allowed |= {"poll-skip", "nonmonotonic-poll"}
    if not promises_no_loss(test):
        allowed |= TRUNCATION
    if test.get("idempotence") is False:
        allowed.add("duplicate")
    if test.get("final_reads") is False:
        allowed.add("unseen")
    return frozenset(allowed)


# --- ops to per-key events ----------------------------------------------------------------

def events_of(index: int, when: int, kind: str, process: Any, f: str, value: Any,
              extra: Mapping[str, Any]) -> list[tuple[Key, Event]]:
    """The per-key events of one op; raises ValueError on a malformed queue value.

    INVOKE   (index, 0, process, time, [(pos, value)], acks, node, atomic)
    COMPLETE (index, 1, process, time, type, [(pos, offset|None, value)], acks, node, atomic)
    READ     (index, 2, process, time, [(offset, value)])
    and (RESET, (index, process)) for an invoked assign, subscribe or crash.
    """
    if f in RESET_FUNCTIONS:
        return [(RESET, (index, process))] if kind == "invoke" else []
    if f not in MICRO_OP_FUNCTIONS or value is None:
        return []
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
            sends.setdefault(key, []).append((position, offset if kind == "ok" else None,
                                              payload))
        elif name == "poll":
            if kind != "ok" or len(micro) < 2:
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
    events: list[tuple[Key, Event]] = []
    for key, items in sends.items():
        if kind == "invoke":
            events.append((key, (index, INVOKE, process, when,
                                 [(p, v) for p, _, v in items], acks, node, atomic)))
        else:
            events.append((key, (index, COMPLETE, process, when, kind, items, acks, node,
                                 atomic)))
    for key, pairs in reads.items():
        events.append((key, (index, READ, process, when, pairs)))
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


# --- one key ------------------------------------------------------------------------------

@dataclass(slots=True)
class Write:
    """One send micro-op. `index` is its completion's (its invoke's if it never completed)."""

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
    """What one key's analysis found; `pending` holds losses of info sends, kept only if
    their op counts as committed (`committed_info` of any key names its invoke index)."""

    key: Key
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    losses: list[dict[str, Any]] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)
    committed_info: set[int] = field(default_factory=set)
    unseen_deltas: dict[int, int] = field(default_factory=dict)
    acks: dict[Any, dict[str, int]] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    unknown: str | None = None

    def add(self, kind: str, witness: dict[str, Any]) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        shown = self.examples.setdefault(kind, [])
        if len(shown) < EXAMPLES_PER_KEY:
            shown.append(witness)


def pair_key_events(events: list[Event]) -> tuple[list[Write], list[Event]]:
    """A key's sends, each with its completion's status and offset, and its reads, in order."""
    events.sort(key=lambda e: (e[0], e[1]))
    writes: list[Write] = []
    reads: list[Event] = []
    open_invokes: dict[Any, Event] = {}

    def unfinished(invoke: Event) -> None:
        index, _, process, when, items, acks, node, atomic = invoke
        for position, value in items:
            writes.append(Write(value, None, "info", process, index, index, when, acks, node,
                                position, atomic))

    for event in events:
        process = event[2]
        if event[1] == INVOKE:
            previous = open_invokes.pop(process, None)
            if previous is not None:
                unfinished(previous)
            open_invokes[process] = event
        elif event[1] == COMPLETE:
            index, _, _, when, status, items, acks, node, atomic = event
            invoke = open_invokes.pop(process, None)
            invoke_index = index if invoke is None else invoke[0]
            if invoke is not None:
                acks = invoke[5] if acks is None else acks
                node = invoke[6] if node is None else node
            for position, offset, value in items:
                writes.append(Write(value, offset, status, process, invoke_index, index, when,
                                    acks, node, position, atomic))
        else:
            previous = open_invokes.pop(process, None)
            if previous is not None:
                unfinished(previous)
            reads.append(event)
    for invoke in open_invokes.values():
        unfinished(invoke)
    return writes, reads


def analyse_key(key: Key, events: list[Event], resets: Mapping[Any, Sequence[int]],
                budget: QueueBudget | None = None, deadline: float | None = None) -> KeyReport:
    """Run every finder on one key's events; `resets` maps process -> sorted reset indices.
    Past the budget (too many events, or `deadline` passed) the report is `unknown`."""
    budget = budget or QueueBudget()
    too_many = budget.too_many(key, len(events))
    if too_many:
        return KeyReport(key, unknown=too_many)
    try:
        return _analyse_key(key, events, resets, deadline)
    except _OutOfTime:
        return KeyReport(key, unknown=f"key {key!r}: the time budget of {budget.seconds:g} s "
                                      f"was spent (queue_budget_seconds)")


def _analyse_key(key: Key, events: list[Event], resets: Mapping[Any, Sequence[int]],
                 deadline: float | None) -> KeyReport:
    def in_time() -> None:
        if deadline is not None and time.time() > deadline:
            raise _OutOfTime

    in_time()
    writes, reads = pair_key_events(events)
    report = KeyReport(key)
    offset_values: dict[int, dict[Any, int]] = {}
    value_offsets: dict[Any, dict[int, int]] = {}

    def observe(offset: int, value: Any, index: int) -> None:
        offset_values.setdefault(offset, {}).setdefault(value, index)
        value_offsets.setdefault(value, {}).setdefault(offset, index)

    writer: dict[Any, Write] = {}
    for w in writes:
        if w.offset is not None:
            observe(w.offset, w.value, w.index)
        known = writer.get(w.value)
        if known is None or (known.status != "ok" and w.status == "ok"):
            writer[w.value] = w
    first_read: dict[Any, tuple[int, int]] = {}
    latest_read: dict[int, tuple[int, Any]] = {}
    max_read: tuple[int, int] | None = None
    for index, _, _, when, pairs in reads:
        for offset, value in pairs:
            observe(offset, value, index)
            latest_read[offset] = (index, value)
            if value not in first_read:
                first_read[value] = (index, when)
            if max_read is None or offset > max_read[0]:
                max_read = (offset, index)
    offsets = sorted(offset_values)
    rank = {offset: i for i, offset in enumerate(offsets)}

    in_time()
    _inconsistent_offsets(report, offset_values)
    duplicated = _duplicates(report, value_offsets)
    _aborted_reads(report, reads, writer)
    in_time()
    _losses(report, writer, first_read, max_read, _overwritten(value_offsets, latest_read))
    in_time()
    _poll_orders(report, reads, rank, offsets, resets)
    in_time()
    _send_orders(report, writes, rank)
    _acks_stats(report, writes, duplicated)
    report.stats = {
        "sends": len(writes),
        "reads": len(reads),
        "values-read": len(first_read),
        "reads-without-send": sum(1 for v in first_read if v not in writer),
        "max-offset": offsets[-1] if offsets else None,
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


def _aborted_reads(report: KeyReport, reads: list[Event], writer: dict[Any, Write]) -> None:
    for index, _, _, _, pairs in reads:
        for offset, value in pairs:
            w = writer.get(value)
            if w is not None and w.status == "fail":
                report.add("G1a", {"key": report.key, "value": value, "offset": offset,
                                   "ops": [w.index, index]})


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


def _losses(report: KeyReport, writer: dict[Any, Write],
            first_read: dict[Any, tuple[int, int]], max_read: tuple[int, int] | None,
            overwritten: dict[Any, tuple[int, Any, int]]) -> None:
    """Committed sends never read (lost below the highest offset read, else unseen), and
    those read but overwritten later (lost)."""
    deltas = report.unseen_deltas
    for value, w in writer.items():
        if w.status == "fail":
            continue
        seen = first_read.get(value)
        if seen is not None and value in overwritten:
            offset, other, index = overwritten[value]
            witness = {"key": report.key, "value": value, "offset": offset,
                       "overwritten-by": other, "ops": [w.index, seen[0], index]}
            report.losses.append({"kind": "lost-write", "witness": witness, "status": w.status,
                                  "invoke": w.invoke, "time": w.time, "acks": w.acks,
                                  "node": w.node})
            report.add("lost-write", witness)
            continue
        if seen is not None:
            if w.status == "info" and w.atomic:
                report.committed_info.add(w.invoke)
            start, end = w.time // NS_PER_SECOND, seen[1] // NS_PER_SECOND
            if start < end:
                deltas[start] = deltas.get(start, 0) + 1
                deltas[end] = deltas.get(end, 0) - 1
            continue
        if w.offset is not None and max_read is not None and w.offset < max_read[0]:
            kind = "lost-write"
            witness = {"key": report.key, "value": value, "offset": w.offset,
                       "max-read-offset": max_read[0], "ops": [w.index, max_read[1]]}
        else:
            kind = "unseen"
            witness = {"key": report.key, "value": value, "offset": w.offset, "ops": [w.index]}
        loss = {"kind": kind, "witness": witness, "status": w.status, "invoke": w.invoke,
                "time": w.time, "acks": w.acks, "node": w.node}
        if w.status == "ok":
            report.losses.append(loss)
            report.add(kind, witness)
            if kind == "unseen":
                second = w.time // NS_PER_SECOND
                deltas[second] = deltas.get(second, 0) + 1
        elif w.atomic:
            report.pending.append(loss)


def _skipped(offsets: list[int], low: int, high: int) -> list[int]:
    return offsets[low + 1:min(high, low + 1 + SKIPPED_SHOWN)]


def _poll_orders(report: KeyReport, reads: list[Event], rank: dict[int, int],
                 offsets: list[int], resets: Mapping[Any, Sequence[int]]) -> None:
    key = report.key
    last_seen: dict[Any, tuple[int, int]] = {}
    for index, _, process, _, pairs in reads:
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
        if last is not None and not _reset_between(resets.get(process), last[1], index):
            before, first = last[0], pairs[0][0]
            delta = rank[first] - rank[before]
            if delta > 1:
                report.add("poll-skip", {"key": key, "offsets": [before, first],
                                         "ops": [last[1], index],
                                         "skipped": _skipped(offsets, rank[before], rank[first])})
            elif delta < 1:
                report.add("nonmonotonic-poll", {"key": key, "offsets": [before, first],
                                                 "ops": [last[1], index]})
        last_seen[process] = (pairs[-1][0], index)


def _reset_between(indices: Sequence[int] | None, low: int, high: int) -> bool:
    if not indices:
        return False
    at = bisect.bisect_right(indices, low)
    return at < len(indices) and indices[at] < high


def _send_orders(report: KeyReport, writes: list[Write], rank: dict[int, int]) -> None:
    last_sent: dict[Any, Write] = {}
    for w in sorted((w for w in writes if w.offset is not None),
                    key=lambda w: (w.index, w.position)):
        last = last_sent.get(w.process)
        if last is not None and rank[w.offset] <= rank[last.offset]:
            report.add("nonmonotonic-send", {
                "key": report.key, "offsets": [last.offset, w.offset],
                "values": [last.value, w.value], "ops": sorted({last.index, w.index})})
        last_sent[w.process] = w


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


# --- all keys -----------------------------------------------------------------------------

@dataclass
class QueueAnalysis:
    """Every key's findings merged: anomaly counts and witnesses, losses (each a dict with
    kind, witness, status, invoke, time, acks, node and key), acks counts by raw acks
    value, unseen sends over time ([[second, count], ...]) and stats."""

    anomalies: dict[str, Anomaly]
    losses: list[dict[str, Any]]
    acks: dict[Any, dict[str, int]]
    unseen_over_time: list[list[int]]
    stats: dict[str, Any]
    seconds: float = 0.0
    unknown: list[str] = field(default_factory=list)


def fold(reports: Iterable[KeyReport]) -> QueueAnalysis:
    """Merge key reports; an info send's loss counts if any key read a value of its op."""
    reports = sorted(reports, key=lambda r: repr(r.key))
    committed = set().union(*(r.committed_info for r in reports)) if reports else set()
    counts: dict[str, int] = defaultdict(int)
    examples: dict[str, list[dict[str, Any]]] = defaultdict(list)
    losses: list[dict[str, Any]] = []
    deltas: dict[int, int] = defaultdict(int)
    acks: dict[Any, dict[str, int]] = {}
    stats: dict[str, Any] = {"keys": len(reports), "sends": 0, "reads": 0,
                             "reads-without-send": 0}
    for report in reports:
        for kind, count in report.counts.items():
            counts[kind] += count
            examples[kind].extend(report.examples[kind])
        for loss in report.losses:
            losses.append({**loss, "key": report.key})
        for loss in report.pending:
            if loss["invoke"] in committed:
                counts[loss["kind"]] += 1
                examples[loss["kind"]].append(loss["witness"])
                losses.append({**loss, "key": report.key})
                if loss["kind"] == "unseen":
                    deltas[loss["time"] // NS_PER_SECOND] += 1
        for second, delta in report.unseen_deltas.items():
            deltas[second] += delta
        for level, level_counts in report.acks.items():
            into = acks.setdefault(level, dict.fromkeys(level_counts, 0))
            for name, count in level_counts.items():
                into[name] += count
        for name in ("sends", "reads", "reads-without-send"):
            stats[name] += report.stats.get(name, 0)
    anomalies = {}
    for kind in ANOMALIES:
        if counts.get(kind):
            witnesses = sorted(examples[kind], key=lambda w: (w["ops"], repr(w["key"])))
            anomalies[kind] = condense(witnesses, counts[kind])
    series, running = [], 0
    for second in sorted(deltas):
        running += deltas[second]
        series.append([second, running])
    unknown = [report.unknown for report in reports if report.unknown]
    return QueueAnalysis(anomalies, losses, acks, series, stats, unknown=unknown)


def analyse(history: Iterable[Op], source: str = "<history>",
            budget: QueueBudget | None = None) -> QueueAnalysis:
    """The whole queue analysis of a history, in the calling process."""
    started = time.monotonic()
    by_key: dict[Key, list[Event]] = defaultdict(list)
    resets: dict[Any, list[int]] = defaultdict(list)
    for op in history:
        try:
            events = events_of(op.index, op.time, op.type, op.process, op.f, op.value, op.extra)
        except ValueError as error:
            raise HistoryError(source, op.index + 1, str(error)) from None
        for key, event in events:
            if key == RESET:
                resets[event[1]].append(event[0])
            else:
                by_key[key].append(event)
    for indices in resets.values():
        indices.sort()
    budget = budget or QueueBudget()
    deadline = budget.deadline()
    analysis = fold(analyse_key(key, events, resets, budget, deadline)
                    for key, events in by_key.items())
    analysis.seconds = time.monotonic() - started
    return analysis


def judged(test: Mapping[str, Any], analysis: QueueAnalysis) -> QueueAnalysis:
    """The analysis as this test can judge it: without final reads (`final_reads` false, e.g.
    an interrupted run), a write never read is `unseen`, not lost, however far other reads
    got; a write read and then overwritten stays lost."""
    if test.get("final_reads", True) is not False:
        return analysis
    moved = [loss for loss in analysis.losses
             if loss["kind"] == "lost-write" and "overwritten-by" not in loss["witness"]]
    if not moved:
        return analysis
    losses = [{**loss, "kind": "unseen"} if any(loss is m for m in moved) else loss
              for loss in analysis.losses]
    anomalies = dict(analysis.anomalies)
    for kind in ("lost-write", "unseen"):
        witnesses = sorted((loss["witness"] for loss in losses if loss["kind"] == kind),
                           key=lambda w: (w["ops"], repr(w["key"])))
        count = (anomalies[kind].count if kind in anomalies else 0) + \
            (len(moved) if kind == "unseen" else -len(moved))
        if count:
            anomalies[kind] = condense(witnesses, count)
        else:
            anomalies.pop(kind, None)
    return replace(analysis, anomalies={k: anomalies[k] for k in ANOMALIES if k in anomalies},
                   losses=losses)


class QueueChecker(AnalysisChecker):
    """Jepsen's Kafka queue anomalies; found anomalies fail unless the test allows them."""

    def check_analysis(self, test: Mapping[str, Any], analysis: QueueAnalysis,
                       opts: Mapping[str, Any]) -> Result:
        started = time.monotonic()
        analysis = judged(test, analysis)
        tolerated = allowed_anomalies(test)
        found = set(analysis.anomalies)
        stats = {**analysis.stats, "unseen-over-time": analysis.unseen_over_time,
                 "unseen-at-end": analysis.unseen_over_time[-1][1]
                 if analysis.unseen_over_time else 0,
                 "lost-writes": sorted(
                     ([loss["key"], loss["witness"].get("value"), loss["witness"].get("offset")]
                      for loss in analysis.losses if loss["kind"] == "lost-write"),
                     key=repr)}
        if found & tolerated:
            stats["allowed-because"] = tolerance_reasons(test, found & tolerated)
        return Result(
            valid=not (found - tolerated),
            anomalies=dict(analysis.anomalies),
            stats=stats,
            allowed=sorted(found & tolerated),
            seconds=analysis.seconds + time.monotonic() - started,
        )
