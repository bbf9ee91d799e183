"""The brokers' controller event logs: one JSON object per line, one line per decision.

Fields (broker-contracts, "Controller event log"): time (epoch ms), controller_id,
controller_epoch, event ("elect-leader", "isr-change", "broker-change",
"become-controller", "resign", ...), topic, partition, selector, old_leader,
new_leader, leader_epoch, isr, unclean. KRaft's elections also say whether the new
leader came from the eligible leader replicas (`elr`, KIP-966): such an election is
clean (`unclean` false, whatever the line says), its leader holding every committed
record. The coordinators write to the same log (group and transaction events:
`coordinator-loaded`, `txn-state`, `txn-fenced`, ...); fields beyond the controller's are
kept in `details`. A store keeps one log per node at
`nodes/<node>/controller-events.jsonl`. A malformed line is an error naming the
file and line; an unterminated last line (the broker was killed mid-write) is
skipped and counted.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from checker.history.errors import HistoryError

__all__ = [
    "EVENT_LOG_NAME",
    "ControllerEvent",
    "EventLogs",
    "Partition",
    "event_log_paths",
    "leader_changes",
    "load_events",
    "read_event_log",
    "read_event_logs",
]

EVENT_LOG_NAME = "controller-events.jsonl"

Partition = tuple[str, int]


@dataclass(frozen=True)
class ControllerEvent:
    """One controller decision, with the node whose log it came from."""

    time: int
    event: str
    node: str | None = None
    controller_id: int | None = None
    controller_epoch: int | None = None
    topic: str | None = None
    partition: int | None = None
    selector: str | None = None
    old_leader: int | None = None
    new_leader: int | None = None
    leader_epoch: int | None = None
    isr: tuple[int, ...] | None = None
    unclean: bool = False
    details: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def from_eligible_replicas(self) -> bool:
        """An election whose new leader came from the eligible leader replicas, not the
        ISR."""
        return self.event == "elect-leader" and self.details.get("elr") is True

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time, "event": self.event, "node": self.node,
            "controller_id": self.controller_id, "controller_epoch": self.controller_epoch,
            "topic": self.topic, "partition": self.partition, "selector": self.selector,
            "old_leader": self.old_leader, "new_leader": self.new_leader,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr) if self.isr is not None else None, "unclean": self.unclean,
            **self.details,
        }


@dataclass
class EventLogs:
    """Every event of a run, in time order, and how many torn last lines were skipped."""

    events: list[ControllerEvent]
    torn_lines: int = 0


_CONTROLLER_FIELDS = frozenset({"time", "event", "controller_id", "controller_epoch", "topic",
                                "partition", "selector", "old_leader", "new_leader",
                                "leader_epoch", "isr", "unclean"})


def _event(obj: Any, node: str | None) -> ControllerEvent:
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    when, event = obj.get("time"), obj.get("event")
    if not isinstance(when, int | float) or isinstance(when, bool):
        raise ValueError(f"field 'time' must be epoch milliseconds, got {when!r}")
    if not isinstance(event, str) or not event:
        raise ValueError(f"field 'event' must be a non-empty string, got {event!r}")
    isr = obj.get("isr")
    if isr is not None and not isinstance(isr, list):
        raise ValueError(f"field 'isr' must be a list of broker ids, got {isr!r}")
    parsed = ControllerEvent(
        time=int(when), event=event, node=node,
        controller_id=obj.get("controller_id"), controller_epoch=obj.get("controller_epoch"),
        topic=obj.get("topic"), partition=obj.get("partition"), selector=obj.get("selector"),
        old_leader=obj.get("old_leader"), new_leader=obj.get("new_leader"),
        leader_epoch=obj.get("leader_epoch"),
        isr=tuple(isr) if isr is not None else None, unclean=obj.get("unclean") is True,
        details={k: v for k, v in obj.items() if k not in _CONTROLLER_FIELDS},
    )
    return replace(parsed, unclean=False) if parsed.from_eligible_replicas else parsed


def read_event_log(path: str | os.PathLike[str], node: str | None = None) -> EventLogs:
    """The events of one node's log, in file order."""
    source = os.fspath(path)
    data = Path(source).read_bytes()
    lines = data.split(b"\n")
    torn = lines.pop() if lines else b""
    events = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            events.append(_event(json.loads(raw), node))
        except (ValueError, UnicodeDecodeError) as error:
            raise HistoryError(source, number, f"bad controller event: {error}") from None
    skipped = 0
    if torn.strip():
        try:
            events.append(_event(json.loads(torn), node))
        except (ValueError, UnicodeDecodeError):
            skipped = 1
    return EventLogs(events, skipped)


def event_log_paths(store_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """node -> its controller event log, for every `nodes/<node>/` of a stored run."""
    nodes = Path(store_dir) / "nodes"
    found = sorted(nodes.glob(f"*/**/{EVENT_LOG_NAME}")) if nodes.is_dir() else []
    paths: dict[str, Path] = {}
    for path in found:
        paths.setdefault(path.relative_to(nodes).parts[0], path)
    return paths


def read_event_logs(paths: dict[str, Path] | Iterable[str | os.PathLike[str]]) -> EventLogs:
    """All events of several logs (node -> path, or bare paths), merged in time order."""
    named = paths.items() if isinstance(paths, dict) else ((None, p) for p in paths)
    events: list[ControllerEvent] = []
    torn = 0
    for node, path in named:
        logs = read_event_log(path, node)
        events.extend(logs.events)
        torn += logs.torn_lines
    events.sort(key=lambda e: e.time)
    return EventLogs(events, torn)


def leader_changes(events: Iterable[ControllerEvent]) -> dict[Partition, list[ControllerEvent]]:
    """(topic, partition) -> its elections that moved the leader, in time order, each once."""
    changes: dict[Partition, list[ControllerEvent]] = {}
    seen: set[tuple] = set()
    for event in sorted(events, key=lambda e: e.time):
        if event.event != "elect-leader" or event.topic is None or event.partition is None:
            continue
        if event.new_leader == event.old_leader:
            continue
        identity = (event.topic, event.partition, event.leader_epoch, event.new_leader)
        if identity in seen:
            continue
        seen.add(identity)
        changes.setdefault((event.topic, event.partition), []).append(event)
    return changes


def load_events(opts: Mapping[str, Any]) -> tuple[list[ControllerEvent], int]:
    """A checker's events and torn lines: `opts["controller_events"]` (ControllerEvent
    list), else the logs `opts["event_logs"]` (paths, or node -> path), else those of
    the run folder `opts["store_dir"]`; none without any of them."""
    if opts.get("controller_events") is not None:
        return list(opts["controller_events"]), 0
    if opts.get("event_logs") is not None:
        logs = read_event_logs(opts["event_logs"])
    elif opts.get("store_dir") is not None:
        logs = read_event_logs(event_log_paths(opts["store_dir"]))
    else:
        return [], 0
    return logs.events, logs.torn_lines
