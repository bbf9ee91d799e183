"""The seeded-defect checker: which failing anomalies a broker's seeded defect caused.

Our broker's testing-only properties `kchaos.debug.*` break it on purpose, and it writes
an event to its node's event log each time a defect acts. This checker ties the run's
failing queue anomalies (the types the test's configuration does not allow, lost and
unseen writes included) to those events, so a detection cell can require its defect's
own anomaly (`attributed_to = "fencing-skipped"`) rather than any anomaly its faults cause:

  fencing-skipped  `txn-fencing-skipped` (`kchaos.debug.skip-epoch-fencing`: the
                   coordinator let a request of an older producer epoch change the
                   transaction, or gave a new producer the next epoch without aborting
                   the open transaction). A witness names a `txn` op that sends, of a
                   process of that transactional id (process p uses
                   `test["transactional_ids"][p % len]`), and the event came after the op
                   began and at most `ZOMBIE_MS` after it ended: the op's own transaction,
                   or its producer left behind as a zombie, was not fenced. Or the
                   witness's key holds, at or below its offset, a send of that id whose op
                   ran when the event came or up to `ZOMBIE_MS` after it, above every
                   offset ever read of the key: a transaction the zombie's end left open
                   there (its successor's sends after the zombie's marker, in partitions
                   the coordinator no longer counts in the transaction), which holds the
                   last stable offset, so no later write of the key, whoever sent it, is
                   ever read.
  unflushed-lost   `unflushed-lost` (`kchaos.debug.lose-unflushed-on-crash`: a restart
                   cut a partition's log back to its last flush: offsets `to_offset` up
                   to `from_offset`, its end before the cut). A witness names an
                   offset in that range of a key of that partition
                   (`checker.cluster.elections.partition_of`), sent before the event.
  read-uncommitted-leak  `read-uncommitted-leaked` (`kchaos.debug.read-uncommitted-leak`:
                   a read_committed fetch of offsets `from_offset` to `to_offset` was
                   served records past the last stable offset or of aborted
                   transactions). A witness names an offset in that range of a key of
                   that partition.
  commit-acked-unreplicated  `commit-acked-unreplicated`
                   (`kchaos.debug.ack-commit-before-replication`: the group coordinator
                   acknowledged an offset commit its `__consumer_offsets` followers did
                   not have yet). Ties the groups checker's `commit-rewind` and
                   `resume-rewind`: the witness's group committed, in that event, the
                   next offset the group went back from (a commit-rewind's earlier
                   offset, a resume-rewind's committed offset) on its key's partition,
                   before the witness's last op.

Each tied witness is reported under the defect's name with the anomaly type it ties
(`type`) and the event (`event`); any tied witness makes the run invalid, as the
anomaly itself does. Events come from the node logs as the elections checker reads
them (`checker.cluster.event_log.load_events`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from checker.cluster.elections import NS_PER_MS, partition_of
from checker.cluster.event_log import ControllerEvent, load_events
from checker.core import Memo, Result, condense
from checker.groups.checker import GroupsChecker
from checker.history import Op
from checker.queue.acks import counted_losses
from checker.queue.analysis import QueueAnalysis, allowed_anomalies, analyse, judged
from checker.queue.finders import QueueBudget
from checker.txn.checker import ALLOWED_ALWAYS as TXN_ALLOWED_ALWAYS

__all__ = ["DEFECT_EVENTS", "DefectChecker", "ZOMBIE_MS"]

# The defect each event names, by event.
DEFECT_EVENTS = {"txn-fencing-skipped": "fencing-skipped", "unflushed-lost": "unflushed-lost",
                 "read-uncommitted-leaked": "read-uncommitted-leak",
                 "commit-acked-unreplicated": "commit-acked-unreplicated"}
# The events of the group coordinator's seeded defect, which tie the groups checker's
# rewinds (the other defects tie queue anomalies).
GROUP_EVENTS = frozenset({"commit-acked-unreplicated"})
GROUP_REWINDS = ("commit-rewind", "resume-rewind")
# How long after its op ended a transaction's abandoned producer may still act: the
# workload keeps such zombies retrying their commit or abort for 30 s.
ZOMBIE_MS = 30_000


class DefectChecker:
    """Ties failing anomalies to the seeded-defect events of the nodes' logs."""

    anomaly_types: ClassVar[tuple[str, ...]] = tuple(DEFECT_EVENTS.values())

    def check(self, test: Mapping[str, Any], history: Sequence[Op],
              opts: Mapping[str, Any]) -> Result:
        started = time.monotonic()
        events, _ = load_events(opts)
        defect_events = [e for e in events if e.event in DEFECT_EVENTS]
        stats: dict[str, Any] = {
            f"{name}-events": sum(1 for e in defect_events if DEFECT_EVENTS[e.event] == name)
            for name in DEFECT_EVENTS.values()}
        if not defect_events:
            return Result(True, stats=stats, seconds=time.monotonic() - started)
        if test.get("start_wall_ms") is None:
            return Result("unknown", stats=stats, seconds=time.monotonic() - started,
                          error="test has no start_wall_ms: cannot align ops with events")
        found: dict[str, list[dict[str, Any]]] = {}
        queue_events = [e for e in defect_events if e.event not in GROUP_EVENTS]
        if queue_events:
            analysis = _analysis(test, history, opts)
            if analysis.unknown:
                return Result("unknown", stats=stats, seconds=time.monotonic() - started,
                              error="; ".join(analysis.unknown))
            spans = _txn_spans(history, test["start_wall_ms"])
            held = _HeldKeys.of(history, spans)
            for kind, witness in failing_witnesses(test, analysis):
                for event in queue_events:
                    defect = DEFECT_EVENTS[event.event]
                    if _ties(defect, event, witness, test, spans, held):
                        found.setdefault(defect, []).append(_tied(kind, witness, event))
                        break
        group_events = [e for e in defect_events if e.event in GROUP_EVENTS]
        if group_events:
            times = {op.index: op.time for op in history}
            for kind, witness in group_rewinds(test, history, opts):
                acked = _commit_lost(kind, witness, group_events, test, times)
                if acked is not None:
                    found.setdefault(DEFECT_EVENTS[acked.event], []).append(
                        _tied(kind, witness, acked))
        anomalies = {name: condense(sorted(ws, key=lambda w: w["ops"]))
                     for name, ws in sorted(found.items())}
        stats["tied"] = {name: len(ws) for name, ws in sorted(found.items())}
        return Result(valid=not anomalies, anomalies=anomalies, stats=stats,
                      seconds=time.monotonic() - started)


def _tied(kind: str, witness: Mapping[str, Any], event: ControllerEvent) -> dict[str, Any]:
    return {"type": kind, **witness,
            "event": {k: v for k, v in event.to_json().items() if v is not None}}


def _analysis(test: Mapping[str, Any], history: Sequence[Op],
              opts: Mapping[str, Any]) -> QueueAnalysis:
    analysis = opts.get("queue_analysis")
    if analysis is None:
        memo = opts.get("memo") or Memo()
        analysis = memo.get("queue-analysis", lambda: analyse(
            history, budget=QueueBudget.of(test, opts)))
    return analysis


def failing_witnesses(test: Mapping[str, Any], analysis: QueueAnalysis
                      ) -> Iterable[tuple[str, dict[str, Any]]]:
    """(type, witness) of every anomaly the test's configuration does not allow: each
    counted loss, and the kept witnesses of the other types (not those the transaction
    checker always allows, G1b among them)."""
    allowed = allowed_anomalies(test) | TXN_ALLOWED_ALWAYS
    for loss in counted_losses(test, analysis):
        if loss["kind"] not in allowed:
            yield loss["kind"], {**loss["witness"], "sent_ns": loss["time"]}
    for kind, anomaly in judged(test, analysis).anomalies.items():
        if kind in allowed or kind in ("lost-write", "unseen"):
            continue
        for witness in anomaly.examples:
            yield kind, witness


def group_rewinds(test: Mapping[str, Any], history: Sequence[Op], opts: Mapping[str, Any]
                  ) -> Iterable[tuple[str, dict[str, Any]]]:
    """(type, witness) of the groups checker's commit-rewind and resume-rewind witnesses."""
    result = GroupsChecker().check(test, history, opts)
    for kind in GROUP_REWINDS:
        anomaly = result.anomalies.get(kind)
        for witness in anomaly.examples if anomaly is not None else ():
            yield kind, witness


def _commit_lost(kind: str, witness: Mapping[str, Any], events: Sequence[ControllerEvent],
                 test: Mapping[str, Any], times: Mapping[int, int]) -> ControllerEvent | None:
    """The first `commit-acked-unreplicated` event in which the witness's group committed
    the offset it went back from on its key's partition, before its last op (`times`:
    op index -> ns) ended."""
    offsets = witness.get("offsets") or [None]
    lost = offsets[0] if kind == "commit-rewind" else witness.get("committed")
    key, ops = witness.get("key"), witness.get("ops") or []
    if not isinstance(lost, int) or key is None or not ops:
        return None
    last = max((times[i] for i in ops if i in times), default=None)
    if last is None:
        return None
    revealed_ms = test["start_wall_ms"] + last / NS_PER_MS
    topic, partition = partition_of(test, key)
    for event in events:
        if (event.details.get("group") == witness.get("group") and event.time <= revealed_ms
                and [topic, partition, lost] in (event.details.get("offsets") or [])):
            return event
    return None


def _txn_spans(history: Sequence[Op], start_wall_ms: float
               ) -> dict[int, tuple[Any, float, float]]:
    """Each txn op that sends: its indices (invocation and completion) -> (process,
    began, ended) in wall-clock ms."""
    began: dict[Any, Op] = {}
    spans: dict[int, tuple[Any, float, float]] = {}
    for op in history:
        if op.f != "txn" or not any(isinstance(micro, list) and micro[:1] == ["send"]
                                    for micro in op.value or ()):
            continue
        if op.type == "invoke":
            began[op.process] = op
            continue
        invoke = began.pop(op.process, None)
        start = op.time if invoke is None else invoke.time
        span = (op.process, start_wall_ms + start / NS_PER_MS,
                start_wall_ms + op.time / NS_PER_MS)
        spans[op.index] = span
        if invoke is not None:
            spans[invoke.index] = span
    return spans


@dataclass(frozen=True)
class _HeldKeys:
    """Per key (as a string): the highest offset any successful op read, and every send
    of a `txn` op with its offset and the op's indices."""

    read_up_to: Mapping[str, int]
    sends: Mapping[str, list[tuple[int, int]]]  # key -> (offset, index of the op)

    @classmethod
    def of(cls, history: Sequence[Op], spans: Mapping[int, tuple[Any, float, float]]
           ) -> _HeldKeys:
        read_up_to: dict[str, int] = {}
        sends: dict[str, list[tuple[int, int]]] = {}
        for op in history:
            if op.type == "invoke" or op.f not in ("txn", "poll"):
                continue
            for micro in op.value or ():
                if not isinstance(micro, list) or len(micro) < 2:
                    continue
                if micro[0] == "poll" and op.type == "ok" and isinstance(micro[1], dict):
                    for key, pairs in micro[1].items():
                        offsets = [pair[0] for pair in pairs if isinstance(pair[0], int)]
                        if offsets:
                            read_up_to[str(key)] = max(read_up_to.get(str(key), -1),
                                                       *offsets)
                elif (micro[0] == "send" and op.index in spans and len(micro) == 3
                      and isinstance(micro[2], list) and isinstance(micro[2][0], int)):
                    sends.setdefault(str(micro[1]), []).append((micro[2][0], op.index))
        return cls(read_up_to, sends)

    def holders(self, key: Any, offset: int) -> list[int]:
        """Ops whose send to `key`, at or below `offset`, lies above every offset read."""
        top = self.read_up_to.get(str(key), -1)
        return [index for sent, index in self.sends.get(str(key), ()) if top < sent <= offset]


def _transactional_id(test: Mapping[str, Any], process: Any) -> str | None:
    ids = test.get("transactional_ids") or []
    if not ids or not isinstance(process, int):
        return None
    return str(ids[process % len(ids)])


def _ties(defect: str, event: ControllerEvent, witness: Mapping[str, Any],
          test: Mapping[str, Any], spans: Mapping[int, tuple[Any, float, float]],
          held: _HeldKeys) -> bool:
    if defect == "fencing-skipped":
        txn_id = event.details.get("transactional_id")
        for index in witness.get("ops") or []:
            span = spans.get(index)
            if span is None:
                continue
            process, began, ended = span
            if (_transactional_id(test, process) == txn_id
                    and began <= event.time <= ended + ZOMBIE_MS):
                return True
        offset = witness.get("offset")
        if not isinstance(offset, int) or witness.get("key") is None:
            return False
        for index in held.holders(witness["key"], offset):
            process, began, ended = spans[index]
            if (_transactional_id(test, process) == txn_id
                    and began <= event.time + ZOMBIE_MS and ended >= event.time):
                return True
        return False
    offset, key = witness.get("offset"), witness.get("key")
    if not isinstance(offset, int) or key is None:
        return False
    first, end = ("to_offset", "from_offset") if defect == "unflushed-lost" else (
        "from_offset", "to_offset")
    low, high = event.details.get(first), event.details.get(end)
    if not isinstance(low, int) or not isinstance(high, int) or not low <= offset < high:
        return False
    sent = witness.get("sent_ns")
    if (defect == "unflushed-lost" and sent is not None
            and test["start_wall_ms"] + sent / NS_PER_MS > event.time):
        return False
    return partition_of(test, key) == (event.topic, event.partition)
