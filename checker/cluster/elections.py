"""The election checker: which controller election dropped each lost acknowledged write.

Every committed send that was lost (see `checker.queue.acks.counted_losses`) is
joined with the controller event logs: an acknowledged one, or one of unknown outcome
(info) that a poll read (consumers read only what the high watermark covers, so it was
committed though its acknowledgement never came). Its key's partition
(`test["key_partitions"]`, {key: [topic, partition]}; default topic "kchaos",
partition = key) and its acknowledgement's wall-clock time
(`test["start_wall_ms"]` + the op's `time` in ns; none for an unacknowledged one) and,
for a write polls read before it was overwritten, the last of those polls pick the
first leader change
of that partition at or after the write was last known to be in the log: the
election that dropped it (an election the write outlived, as a later poll
shows, did not drop it; we know neither replica's log, so "its new leader did
not have it" is approximated by "the first election after it was last seen").
When there is none but the op names the
broker that acknowledged it (`node`: a broker id, or a name mapped by
`test["node_broker_ids"]`), a deposed leader that kept acknowledging is blamed
on the last election that took leadership from it. When the op does not name
that broker, the loss is blamed on the partition's last election before the ack
as a presumed zombie ("zombie-leader": "presumed"): once elected, a leader's
acknowledged writes can only be dropped by a later election, so a write acked
after the last one and lost was acked by the deposed leader. This changes only
the explanation: a configuration that promises no loss fails either way. With
no election at all, the loss is "unexplained".

Verdicts: a loss after an unclean election is allowed only when
`broker_config["unclean.leader.election.enable"]` is true; after a clean
election, only when the send's acks level promised nothing (see
`checker.queue.analysis.promises_no_loss`); an unexplained loss always fails. An
election from the eligible leader replicas (KRaft with KIP-966) is clean: its leader
holds every committed record. Why a loss is allowed names the test's metadata mode
(`checker.modes`) where it changes what an unclean election is. Sends with
acks=0 are never acknowledged by a broker and are left out.

Event logs are read by `checker.cluster.event_log.load_events`.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from checker.allowed import because
from checker.cluster.event_log import (
    ControllerEvent,
    Partition,
    leader_changes,
    load_events,
)
from checker.core import Result, condense
from checker.modes import mode_of
from checker.queue.acks import counted_losses
from checker.queue.analysis import (
    AnalysisChecker,
    QueueAnalysis,
    acks_label,
    broker_setting,
    flag,
    loss_settings,
    promises_no_loss,
)
from checker.queue.events import normalise_key

__all__ = ["DEFAULT_TOPIC", "ElectionChecker", "attribute", "partition_of"]

DEFAULT_TOPIC = "kchaos"
NS_PER_MS = 1_000_000


def partition_of(test: Mapping[str, Any], key: Any) -> Partition:
    """The topic-partition of a key."""
    mapping = {normalise_key(k): v for k, v in (test.get("key_partitions") or {}).items()}
    if key in mapping:
        topic, partition = mapping[key]
        return str(topic), int(partition)
    return DEFAULT_TOPIC, int(key)


def _broker_id(test: Mapping[str, Any], node: Any) -> int | None:
    names = test.get("node_broker_ids") or {}
    if node in names:
        return int(names[node])
    if isinstance(node, int) and not isinstance(node, bool):
        return node
    if isinstance(node, str) and node.isdigit():
        return int(node)
    return None


def attribute(changes: Sequence[ControllerEvent], ack_ms: float, acked_by: int | None,
              last_read_ms: float | None = None) -> tuple[ControllerEvent | None, bool | str]:
    """The election that dropped a write acknowledged at `ack_ms` and last read by a poll
    at `last_read_ms` (None: never read), and whether the acknowledging leader had
    already been deposed (a zombie; "presumed" when the acknowledging broker is unknown)."""
    survived_ms = ack_ms if last_read_ms is None else max(ack_ms, last_read_ms)
    at = bisect.bisect_left(changes, survived_ms, key=lambda event: event.time)
    if at < len(changes):
        return changes[at], False
    if acked_by is not None:
        for event in reversed(changes):
            if event.old_leader == acked_by:
                return event, True
        return None, False
    return (changes[-1], "presumed") if changes else (None, False)


class ElectionChecker(AnalysisChecker):
    """Attributes lost acknowledged writes to controller elections."""

    anomaly_types: ClassVar[tuple[str, ...]] = (
        "unclean-election-loss", "clean-election-loss", "unexplained-loss")

    def check_analysis(self, test: Mapping[str, Any], analysis: QueueAnalysis,
                       opts: Mapping[str, Any]) -> Result:
        started = time.monotonic()
        default = test.get("acks", "all")
        losses = [loss for loss in counted_losses(test, analysis)
                  if (loss["status"] == "ok"
                      or (loss["status"] == "info" and loss["last_read"] is not None))
                  and acks_label(loss["acks"], default) != "0"]
        events, torn = load_events(opts)
        acknowledged = sum(1 for loss in losses if loss["status"] == "ok")
        mode = mode_of(test)
        stats: dict[str, Any] = {"lost-acknowledged": acknowledged,
                                 "lost-read-unacknowledged": len(losses) - acknowledged,
                                 "torn-event-lines": torn, "metadata-mode": mode.name}
        if not losses:
            return Result(True, stats=stats, seconds=time.monotonic() - started)
        if test.get("start_wall_ms") is None:
            return Result("unknown", stats=stats, seconds=time.monotonic() - started,
                          error="test has no start_wall_ms: cannot align ops with elections")
        changes = leader_changes(events)
        unclean_enabled = flag(broker_setting(test, "unclean.leader.election.enable", False))
        found: dict[str, list[dict[str, Any]]] = {}
        tolerated: set[str] = set()
        by_election: dict[tuple, dict[str, Any]] = {}
        for loss in losses:
            topic, partition = partition_of(test, loss["key"])
            last_read = loss.get("last_read")
            read_ms = None if last_read is None else test["start_wall_ms"] + last_read / NS_PER_MS
            acknowledged_loss = loss["status"] == "ok"
            # an unacknowledged write is known to have been in the log only from the polls
            known_ns = loss["time"] if acknowledged_loss else loss["last_read"]
            ack_ms = test["start_wall_ms"] + known_ns / NS_PER_MS
            witness = {**loss["witness"], "topic": topic, "partition": partition}
            if acknowledged_loss:
                witness["ack_ms"] = round(ack_ms, 3)
            election, zombie = attribute(changes.get((topic, partition), []), ack_ms,
                                         _broker_id(test, loss["node"]), read_ms)
            if read_ms is not None:
                witness["last_read_ms"] = round(read_ms, 3)
            if election is None:
                found.setdefault("unexplained-loss", []).append(witness)
                continue
            witness["election"] = {**election.to_json(), "zombie-leader": zombie}
            if election.unclean:
                kind, allowed = "unclean-election-loss", unclean_enabled
            else:
                label = acks_label(loss["acks"], default)
                kind, allowed = "clean-election-loss", not promises_no_loss(test, label)
            found.setdefault(kind, []).append(witness)
            if allowed:
                tolerated.add(kind)
            identity = (topic, partition, election.time, election.leader_epoch)
            summary = by_election.setdefault(identity, {**election.to_json(), "lost": 0,
                                                        "values": []})
            summary["lost"] += 1
            if len(summary["values"]) < 32:
                summary["values"].append(loss["witness"]["value"])
        anomalies = {kind: condense(sorted(ws, key=lambda w: w["ops"]))
                     for kind, ws in sorted(found.items())}
        stats.update({
            "attributed": sum(s["lost"] for s in by_election.values()),
            "unexplained": len(found.get("unexplained-loss", [])),
            "elections": [by_election[k] for k in sorted(by_election, key=repr)],
            "leader-changes-seen": sum(len(v) for v in changes.values()),
            "leader-changes-from-elr": sum(e.from_eligible_replicas
                                           for v in changes.values() for e in v),
        })
        if tolerated:
            stats["allowed-because"] = {
                kind: because(kind, mode=mode) if kind == "unclean-election-loss" else because(
                    kind, *loss_settings(test)) for kind in sorted(tolerated)}
        return Result(valid=not (set(found) - tolerated), anomalies=anomalies, stats=stats,
                      allowed=sorted(tolerated), seconds=time.monotonic() - started)

