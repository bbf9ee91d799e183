"""The coordinator's storage: durable appends to, and loads from, the `__consumer_offsets`
partitions this broker leads.

`OffsetsLog.append` writes one batch with acks=all semantics: the leader refuses it when
the ISR is below min.insync.replicas, and the answer comes only once the high watermark
covers the batch, or `offsets.commit.timeout.ms` passes. Errors are mapped as Kafka's
GroupMetadataManager maps them, so clients retry the right way.

A transactional commit (`producer_id` given) is one transactional batch stamped with the
producer; `appended` hears the batch's base offset as soon as the leader has it, before
replication, so the coordinator knows where its offsets are in the log.

`load` reads a partition from its log start to its log end and replays it: the last
record per key wins, a tombstone deletes, so the result is the same before and after
compaction. Offsets in a transactional batch are pending for their producer until its
control batch: a commit marker installs them (unless a later plain commit of the same
partition is in the log), an abort marker drops them, and those still open at the log end
stay pending (Kafka's loadGroupsAndOffsets).

With `ack_before_replication` (the seeded defect `kchaos.debug.ack-commit-before-replication`)
`append` answers as soon as the leader has appended, before any follower has the batch:
commits are acknowledged before they are durable. `append` tells its caller
(`unreplicated`) each time the defect acts: it acknowledges a batch the high watermark does
not cover yet.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.errors import BrokerError, ErrorCode
from broker.group.placement import OFFSETS_TOPIC
from broker.group.records import (
    COMMIT_MARKER,
    NO_PRODUCER_ID,
    GroupRecord,
    LogBatch,
    OffsetRecord,
    build_batch,
    read_batches,
)
from broker.group.state import CommittedOffset, install

__all__ = ["LoadedPartition", "OffsetsLog", "commit_error", "group_error"]

# Kafka's default message.max.bytes: a larger group record (e.g. an oversized assignment)
# or commit batch is refused, as Kafka refuses it
MAX_BATCH_BYTES = 1048588
_UNAVAILABLE = (
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
)
_MOVED = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR)
_TOO_LARGE = (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE)


def commit_error(code: int) -> int:
    """The OffsetCommit error for a failed append (Kafka's storeOffsets mapping)."""
    if code in _UNAVAILABLE:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in _MOVED:
        return ErrorCode.NOT_COORDINATOR
    if code in _TOO_LARGE:
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return code


def group_error(code: int) -> int:
    """The JoinGroup/SyncGroup error for a failed group metadata append (storeGroup)."""
    if code in _UNAVAILABLE:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in _MOVED:
        return ErrorCode.NOT_COORDINATOR
    if code == ErrorCode.REQUEST_TIMED_OUT:
        return ErrorCode.REBALANCE_IN_PROGRESS
    if code in _TOO_LARGE:
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return code


Offsets = dict[tuple[str, int], CommittedOffset]


@dataclass
class LoadedPartition:
    """What one offsets partition holds: the last group record and offsets per group, and
    per producer id the offsets per group of its open transaction."""

    groups: dict[str, GroupRecord] = field(default_factory=dict)
    offsets: dict[str, Offsets] = field(default_factory=dict)
    pending: dict[int, dict[str, Offsets]] = field(default_factory=dict)

    def apply(self, record: OffsetRecord | GroupRecord, log_offset: int = -1) -> None:
        if isinstance(record, GroupRecord):
            if record.deleted:
                self.groups.pop(record.group, None)
            else:
                self.groups[record.group] = record
            return
        key = (record.topic, record.partition)
        if record.offset is None:
            self.offsets.get(record.group, {}).pop(key, None)
            return
        self.offsets.setdefault(record.group, {})[key] = _committed(record.offset, record,
                                                                  log_offset)

    def apply_batch(self, batch: LogBatch) -> None:
        if batch.is_control:
            if batch.marker is not None:
                self._complete(batch.producer_id, batch.marker == COMMIT_MARKER)
            return
        for record in batch.records:
            if batch.is_transactional and isinstance(record, OffsetRecord):
                self._pend(batch.producer_id, record, batch.base_offset)
            else:
                self.apply(record, batch.base_offset)

    def _pend(self, producer_id: int, record: OffsetRecord, log_offset: int) -> None:
        offsets = self.pending.setdefault(producer_id, {}).setdefault(record.group, {})
        key = (record.topic, record.partition)
        if record.offset is None:
            offsets.pop(key, None)
        else:
            offsets[key] = _committed(record.offset, record, log_offset)

    def _complete(self, producer_id: int, commit: bool) -> None:
        ended = self.pending.pop(producer_id, {})
        if not commit:
            return
        for group_id, offsets in ended.items():
            committed = self.offsets.setdefault(group_id, {})
            for key, offset in offsets.items():
                install(committed, key, offset)

    def pending_for(self, group_id: str) -> dict[int, Offsets]:
        """The open transactions' offsets of `group_id`, per producer id."""
        return {producer_id: dict(groups[group_id])
                for producer_id, groups in self.pending.items() if groups.get(group_id)}

    def group_ids(self) -> set[str]:
        pending = {g for groups in self.pending.values() for g, offsets in groups.items()
                   if offsets}
        return (set(self.groups) | {g for g, offsets in self.offsets.items() if offsets}
                | pending)


def _committed(offset: int, record: OffsetRecord, log_offset: int) -> CommittedOffset:
    """The committed `offset` of a record that is not a tombstone."""
    return CommittedOffset(offset, record.leader_epoch, record.metadata,
                           record.commit_timestamp, log_offset)


class OffsetsLog:
    def __init__(self, replicas, commit_timeout_ms: int, load_buffer_bytes: int,
                 max_batch_bytes: int = MAX_BATCH_BYTES,
                 ack_before_replication: bool = False) -> None:
        self.replicas = replicas
        self.commit_timeout_ms = commit_timeout_ms
        self.max_batch_bytes = max_batch_bytes
        self.load_buffer_bytes = load_buffer_bytes
        self.ack_before_replication = ack_before_replication

    def _partition(self, index: int):
        partition = self.replicas.partitions.get((OFFSETS_TOPIC, index))
        if partition is None or not partition.is_leader:
            raise BrokerError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return partition

    def leader_epoch(self, index: int) -> int | None:
        """The leader epoch while this broker leads offsets partition `index`, else None."""
        partition = self.replicas.partitions.get((OFFSETS_TOPIC, index))
        return partition.leader_epoch if partition is not None and partition.is_leader else None

    async def append(self, index: int, records: list[tuple[bytes, bytes | None]],
                     producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1,
                     appended: Callable[[int], None] | None = None,
                     unreplicated: Callable[[int, int], None] | None = None) -> int:
        """Append `records` as one batch (transactional for `producer_id`), tell `appended`
        its base offset, and wait until it is committed; the raw error. With
        `ack_before_replication` it answers at once, telling `unreplicated` (the batch's
        base offset, the high watermark) when the high watermark does not cover it."""
        batch = build_batch(records, int(time.time() * 1000), producer_id, producer_epoch)
        if len(batch) > self.max_batch_bytes:
            return ErrorCode.RECORD_LIST_TOO_LARGE
        try:
            partition = self._partition(index)
            result = partition.append_as_leader(batch, -1)
        except BrokerError as exc:
            return exc.code
        if appended is not None:
            appended(result.base_offset)
        if partition.high_watermark > result.last_offset:
            return ErrorCode.NONE
        if self.ack_before_replication:
            if unreplicated is not None:
                unreplicated(result.base_offset, partition.high_watermark)
            return ErrorCode.NONE
        waiter = partition.delayed_produce.add(result.last_offset + 1)
        try:
            return await asyncio.wait_for(waiter, self.commit_timeout_ms / 1000)
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT

    async def load(self, index: int, epoch: int) -> LoadedPartition | None:
        """Replay offsets partition `index` from its log start to its log end; None if this
        broker stopped leading it (at `epoch`) meanwhile."""
        loaded = LoadedPartition()
        partition = self.replicas.partitions.get((OFFSETS_TOPIC, index))
        if partition is None:
            return None
        position = partition.log.log_start_offset
        while True:
            if not partition.is_leader or partition.leader_epoch != epoch:
                return None
            end = partition.log.log_end_offset
            if position >= end:
                return loaded
            data = partition.log.read(position, self.load_buffer_bytes)
            batches, next_offset = read_batches(data)
            if next_offset is None:
                return loaded
            for batch in batches:
                loaded.apply_batch(batch)
            position = next_offset
            await asyncio.sleep(0)
