"""The availability checker: how long writes stalled, per fault window and per election.

It measures; its verdict is always True (a measurement never fails a run), and
when there is nothing to measure its stats say so. Times are seconds, rounded
to milliseconds; history times are ns since the test started.

Definitions:

- An ok send is a send micro-op (`["send", k, [offset, v]]`) in an `ok`
  completion of a client `send` or `txn` op, at the completion's time. Nothing
  else (fail, info, polls) counts.
- The client phase runs from the first client op (invoke or completion; nemesis
  ops left out) to the last one, both included, but ends at the test's
  `time_limit` (seconds) when it has one: the heal, recovery and final reads
  that follow send nothing, so they would count as a stall of every key.
- Buckets are the seconds [s, s+1) of history time. `overall` counts the buckets
  that overlap the client phase, and those holding no ok send.
- A fault window is a nemesis fault from its start op to its stop op
  (start-partition/stop-partition, kill/start, pause/resume,
  pause-zookeeper/resume-zookeeper, start-packet-loss/stop-packet-loss, any
  start-X/stop-X) or to the next `heal`, whichever comes first; the nemesis
  completions (or lone info ops) give the times, as `reports.run.nemesis_periods`
  pairs them. Instantaneous faults (restart, expire-session) have no window. A
  window never healed has `end-s` None and lasts to the end of the client phase.
  Its buckets are those overlapping [start, end) clipped to the client phase.
  `all-faults` counts each bucket of any window once; `outside-faults` the rest
  of the client phase.
- A write stall of a key is the longest interval with no ok send to that key
  between the client phase's edges: the gaps between the first client op, the
  key's ok sends in time order, and the last client op. Every key named by a
  send micro-op (invoked or completed) has one; a key never written ok stalls
  for the whole phase.
- A failover is one leader change of a partition in the controller event logs
  (`checker.cluster.event_log.leader_changes`: an `elect-leader` event whose new leader
  differs from the old one). It lasts from the moment the partition lost its
  leader to that event, in event-log wall milliseconds. The moment is, looking
  only at events after the partition's previous leader change (all earlier
  events when it has none) and not after this one, the first that applies:
  1. "planned": the selector is preferred, reassigned or controlled-shutdown,
     so the old leader handed over alive: the election itself (0 s);
  2. "leader-offline": the first `leader-offline` event of the partition (its
     leader left the ISR with no successor);
  3. "broker-change" or "become-controller": when the old leader was still
     recorded (old leader >= 0), the last `broker-change` or `become-controller`
     event: the controller learned a broker died or bounced, or a new controller
     (the old one died, perhaps with the leader) read the live brokers, and moved
     leadership at once. The parsed events do not say which broker, so an
     unrelated broker change in between would shorten this;
  4. "previous-leader-change": the partition's previous leader change, an
     upper bound (the leader was lost at some point after it);
  5. none of these (the partition's first leader change, no marker): `from`
     and `seconds` are None.
  `at-s` is the election in history time (`test["start_wall_ms"]` aligns the
  two clocks; None without it).

Event logs come from `opts["controller_events"]` (ControllerEvent list), else
`opts["event_logs"]` (paths, or node -> path), else `opts["store_dir"]`. With
none, `failovers` is empty and `event-logs` is 0; an unreadable log is named in
`event-log-error` instead of failing the measurement.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Any, ClassVar

from checker.cluster.event_log import (
    ControllerEvent,
    event_log_paths,
    leader_changes,
    read_event_logs,
)
from checker.core import Result
from checker.history import NEMESIS, Op, nemesis_periods
from checker.history.errors import HistoryError

__all__ = ["AvailabilityChecker", "FaultWindow", "fault_windows", "failovers", "ok_sends",
           "write_stalls"]

NS = 1_000_000_000
NS_PER_MS = 1_000_000
PLANNED = frozenset({"preferred", "reassigned", "controlled-shutdown"})
# When a controller learns the brokers it has: a broker change, or taking office.
CONTROLLER_NOTICES = frozenset({"broker-change", "become-controller"})

FaultWindow = tuple[str, Any, int, int | None]  # fault, value, start ns, end ns (None: open)


def _s(ns: float | None) -> float | None:
    return None if ns is None else round(ns / NS, 3)


def _fraction(part: int, whole: int) -> float | None:
    return round(part / whole, 3) if whole else None


def ok_sends(history: Iterable[Op]) -> list[tuple[int, Any]]:
    """(time, key) of every ok send micro-op, in history order."""
    found = []
    for op in history:
        if op.type != "ok" or op.process == NEMESIS or op.f not in ("send", "txn"):
            continue
        for key in _send_keys(op.value):
            found.append((op.time, key))
    return found


def _send_keys(value: Any) -> list[Any]:
    if not isinstance(value, list):
        return []
    return [micro[1] for micro in value
            if isinstance(micro, list) and len(micro) >= 2 and micro[0] == "send"]


def fault_windows(history: Iterable[Op]) -> list[FaultWindow]:
    """The lasting fault periods (`checker.history.nemesis_periods`), in start order;
    instantaneous faults left out."""
    return [(p.name, p.value, p.start, p.end) for p in nemesis_periods(list(history))
            if not p.instantaneous]


def _buckets(lo: float, hi: float) -> range:
    """The seconds [s, s+1) overlapping [lo, hi) (ns)."""
    return range(math.floor(lo / NS), math.ceil(hi / NS)) if hi > lo else range(0)


def write_stalls(history: Sequence[Op], sends: Sequence[tuple[int, Any]],
                 first: int, last: int) -> list[dict[str, Any]]:
    """Per key (sorted by repr), its longest interval with no ok send in [first, last]."""
    keys: dict[Any, list[int]] = {}
    for op in history:
        if op.process != NEMESIS and op.f in ("send", "txn"):
            for key in _send_keys(op.value):
                keys.setdefault(_hashable(key), [])
    for when, key in sends:
        keys.setdefault(_hashable(key), []).append(when)
    stalls = []
    for key, times in sorted(keys.items(), key=lambda kv: repr(kv[0])):
        inside = sorted(when for when in times if first <= when <= last)
        start, end = max(pairwise([first, *inside, last]), key=lambda g: g[1] - g[0])
        stalls.append({"key": key, "seconds": _s(end - start), "start-s": _s(start),
                       "end-s": _s(end), "ok-sends": len(inside)})
    return stalls


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key


def failovers(events: Sequence[ControllerEvent],
              start_wall_ms: float | None = None) -> list[dict[str, Any]]:
    """One entry per leader change, in time order (see the module docstring)."""
    ordered = sorted(events, key=lambda e: e.time)
    found = []
    for (topic, partition), changes in leader_changes(ordered).items():
        previous: ControllerEvent | None = None
        for change in changes:
            lost, source = _lost_at(ordered, topic, partition, previous, change)
            found.append({
                "topic": topic, "partition": partition, "old-leader": change.old_leader,
                "new-leader": change.new_leader, "leader-epoch": change.leader_epoch,
                "selector": change.selector, "unclean": change.unclean,
                "elected-ms": change.time,
                "at-s": None if start_wall_ms is None else
                round((change.time - start_wall_ms) / 1000, 3),
                "from": source, "lost-ms": lost,
                "seconds": None if lost is None else round((change.time - lost) / 1000, 3),
            })
            previous = change
    return sorted(found, key=lambda f: (f["elected-ms"], f["topic"], f["partition"]))


def _lost_at(events: Sequence[ControllerEvent], topic: str, partition: int,
             previous: ControllerEvent | None,
             change: ControllerEvent) -> tuple[int | None, str | None]:
    if change.selector in PLANNED:
        return change.time, "planned"
    between = [e for e in events if e is not change and e.time <= change.time
               and (previous is None or e.time > previous.time)]
    for event in between:
        if (event.event == "leader-offline" and event.topic == topic
                and event.partition == partition):
            return event.time, "leader-offline"
    if change.old_leader is not None and change.old_leader >= 0:
        notices = [e for e in between if e.event in CONTROLLER_NOTICES]
        if notices:
            return notices[-1].time, notices[-1].event
    if previous is not None:
        return previous.time, "previous-leader-change"
    return None, None


def _load_events(opts: Mapping[str, Any]) -> tuple[list[ControllerEvent], dict[str, Any]]:
    """The events, and stats on where they came from (never raises on a bad log)."""
    if opts.get("controller_events") is not None:
        events = list(opts["controller_events"])
        return events, {"event-logs": len({e.node for e in events})}
    paths = opts.get("event_logs")
    if paths is None and opts.get("store_dir") is not None:
        paths = event_log_paths(opts["store_dir"])
    if paths is None:
        return [], {"event-logs": 0}
    paths = paths if isinstance(paths, dict) else list(paths)
    try:
        logs = read_event_logs(paths)
    except (HistoryError, OSError) as error:
        return [], {"event-logs": len(paths), "event-log-error": str(error)}
    return logs.events, {"event-logs": len(paths), "torn-event-lines": logs.torn_lines}


def _measure(buckets: Iterable[int], busy: set[int]) -> dict[str, Any]:
    chosen = set(buckets)
    idle = len(chosen - busy)
    return {"buckets": len(chosen), "buckets-without-ok-send": idle,
            "fraction": _fraction(idle, len(chosen))}


class AvailabilityChecker:
    """Measures write availability overall, per fault window, per key and per election."""

    anomaly_types: ClassVar[tuple[str, ...]] = ()

    def check(self, test: Mapping[str, Any], history: Sequence[Op],
              opts: Mapping[str, Any]) -> Result:
        started = time.monotonic()
        events, sources = _load_events(opts)
        start_wall = test.get("start_wall_ms")
        stats: dict[str, Any] = {
            **sources,
            "failovers": failovers(events, start_wall if isinstance(start_wall, int | float)
                                   else None),
        }
        client = [op.time for op in history if op.process != NEMESIS]
        if not client:
            stats.update({"client-ops": 0, "note": "no client operations: nothing to measure",
                          "overall": {"seconds": 0, "buckets-without-ok-send": 0,
                                      "fraction": None},
                          "fault-windows": [], "write-stalls": []})
            return Result(True, stats=stats, seconds=time.monotonic() - started)
        first, last = min(client), max(client)
        limit = test.get("time_limit")
        if isinstance(limit, int | float) and not isinstance(limit, bool) and limit > 0:
            last = max(first, min(last, int(limit * NS)))
        sends = ok_sends(history)
        busy = {when // NS for when, _ in sends}
        phase = range(first // NS, last // NS + 1)
        overall = _measure(phase, busy)
        windows, in_faults = [], set()
        for fault, value, began, ended in fault_windows(history):
            buckets = _buckets(max(began, first), min(last if ended is None else ended, last))
            in_faults.update(buckets)
            windows.append({"fault": fault, "value": value, "start-s": _s(began),
                            "end-s": _s(ended), **_measure(buckets, busy)})
        stats.update({
            "client-ops": len(client),
            "ok-sends": len(sends),
            "overall": {"seconds": overall["buckets"],
                        "buckets-without-ok-send": overall["buckets-without-ok-send"],
                        "fraction": overall["fraction"]},
            "fault-windows": windows,
            "all-faults": _measure(in_faults, busy),
            "outside-faults": _measure(set(phase) - in_faults, busy),
            "write-stalls": write_stalls(history, sends, first, last),
        })
        return Result(True, stats=stats, seconds=time.monotonic() - started)
