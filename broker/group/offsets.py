"""Offsets of the coordinator's groups: plain commits (OffsetCommit), transactional ones
(TxnOffsetCommit, KIP-98 and KIP-447), the end of a transaction, and fetches.

A commit is one batch in the group's `__consumer_offsets` partition and answers only once
the batch is durable. A transactional commit is a transactional batch stamped with its
producer; its offsets stay pending for that producer, invisible to fetches, until the
transaction's marker: `complete_txn` then installs them (commit) or drops them (abort).
As in Kafka's GroupMetadata, an offset never replaces one written later in the log, and
a partition with a commit in flight or in an open transaction is unstable: an OffsetFetch
with require_stable (read_committed consumers) gets UNSTABLE_OFFSET_COMMIT for it.

Membership is the coordinator's: it hands in `owner_error` (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS), `partition_of` and `heartbeat` (a member's commit renews
its session).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from broker.errors import ErrorCode
from broker.event_log import EventLog
from broker.group.records import offset_key, offset_value
from broker.group.state import CommittedOffset, Group, GroupState, Member, install
from broker.group.store import OffsetsLog, commit_error

__all__ = ["GroupOffsets", "OffsetCommit", "TxnOffsetCommit"]

Partition = tuple[str, int]


@dataclass(frozen=True)
class OffsetCommit:
    offset: int
    leader_epoch: int
    metadata: str


@dataclass(frozen=True)
class TxnOffsetCommit:
    """Who commits offsets transactionally: the producer and (v3+) the consumer's member
    and generation (-1 and "" before v3: not checked)."""

    group_id: str
    transactional_id: str
    producer_id: int
    producer_epoch: int
    generation: int = -1
    member_id: str = ""
    instance_id: str | None = None


class GroupOffsets:
    def __init__(
        self,
        groups: dict[str, Group],
        store: OffsetsLog,
        owner_error: Callable[[str], int],
        partition_of: Callable[[str], int],
        heartbeat: Callable[[Group, Member], None],
        max_metadata_bytes: int,
        events: EventLog,
    ) -> None:
        self.groups = groups
        self.store = store
        self.owner_error = owner_error
        self.partition_of = partition_of
        self.heartbeat = heartbeat
        self.max_metadata_bytes = max_metadata_bytes
        self.events = events

    # -- plain commits ------------------------------------------------------------------

    async def commit(self, group_id: str, generation: int, member_id: str,
                     instance_id: str | None,
                     offsets: dict[Partition, OffsetCommit]) -> dict[Partition, int]:
        """An error per partition; NONE only once the commit is durable."""
        error = self.owner_error(group_id) or self._commit_allowed(
            group_id, generation, member_id, instance_id)
        if error:
            return dict.fromkeys(offsets, error)
        group = self._group(group_id)
        results, accepted, records = self._records(group_id, offsets)
        if not records:
            return results
        in_log: list[int] = []
        group.commits_in_flight.update(accepted.keys())

        def unreplicated(log_offset: int, high_watermark: int) -> None:
            self.events.write(
                "commit-acked-unreplicated", group=group_id, generation=generation,
                member=member_id, offsets_partition=self.partition_of(group_id),
                log_offset=log_offset, high_watermark=high_watermark,
                offsets=[[topic, index, commit.offset]
                         for (topic, index), commit in sorted(accepted.items())],
                cause="kchaos.debug.ack-commit-before-replication")

        try:
            code = await self.store.append(self.partition_of(group_id), records,
                                           appended=in_log.append, unreplicated=unreplicated)
        finally:
            group.commits_in_flight.subtract(accepted.keys())
            group.commits_in_flight = +group.commits_in_flight  # counts above zero only
        code = commit_error(code) if code else ErrorCode.NONE
        if not code and self.groups.get(group_id) is group:
            for key, offset in accepted.items():
                install(group.offsets, key, replace(offset, log_offset=in_log[0]))
        results.update(dict.fromkeys(accepted, code))
        return results

    def _commit_allowed(self, group_id: str, generation: int, member_id: str,
                        instance_id: str | None) -> int:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE if generation < 0 else ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.state is GroupState.EMPTY:
            return ErrorCode.NONE
        error = group.fence(member_id, instance_id)
        if error:
            return error
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        self.heartbeat(group, group.members[member_id])
        return ErrorCode.NONE

    # -- transactional commits ----------------------------------------------------------

    async def commit_txn(self, commit: TxnOffsetCommit,
                         offsets: dict[Partition, OffsetCommit]) -> dict[Partition, int]:
        """An error per partition; on NONE the offsets are durable in one transactional
        batch and pending for the producer until its transaction ends (`complete_txn`)."""
        group_id = commit.group_id
        error = self.owner_error(group_id) if group_id else ErrorCode.INVALID_GROUP_ID
        if not error and group_id in self.groups:
            error = _txn_commit_allowed(self.groups[group_id], commit)
        if error:
            return dict.fromkeys(offsets, error)
        group = self._group(group_id)
        results, accepted, records = self._records(group_id, offsets)
        if not records:
            return results
        producer_id = commit.producer_id
        stamped: dict[Partition, CommittedOffset] = {}

        def pend(log_offset: int) -> None:
            stamped.update({key: replace(offset, log_offset=log_offset)
                            for key, offset in accepted.items()})
            group.txn_offsets.setdefault(producer_id, {}).update(stamped)

        code = await self.store.append(self.partition_of(group_id), records, producer_id,
                                       commit.producer_epoch, appended=pend)
        code = commit_error(code) if code else ErrorCode.NONE
        if code:
            _drop_pending(group, producer_id, stamped)
        else:
            self.events.write("txn-offsets-pending", group=group_id, producer_id=producer_id,
                              producer_epoch=commit.producer_epoch,
                              transactional_id=commit.transactional_id,
                              generation=commit.generation, member=commit.member_id,
                              offsets=_named(accepted))
        results.update(dict.fromkeys(accepted, code))
        return results

    def complete_txn(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        """`producer_id`'s transaction marker is in offsets partition `offsets_partition`
        below its high watermark: commit installs the producer's pending offsets in every
        group of that partition, abort drops them."""
        for group_id, group in list(self.groups.items()):
            if producer_id not in group.txn_offsets or (
                self.partition_of(group_id) != offsets_partition
            ):
                continue
            ended = group.complete_txn(producer_id, commit)
            self.events.write("txn-offsets-completed", group=group_id, producer_id=producer_id,
                              commit=commit, partitions=[f"{t}-{p}" for t, p in ended])

    # -- fetches ------------------------------------------------------------------------

    def fetch(self, group_id: str, partitions: list[Partition] | None
              ) -> tuple[int, dict[Partition, CommittedOffset | None]]:
        """The group-level error and the committed offset of each partition (None: none);
        all committed partitions when `partitions` is None."""
        error = self.owner_error(group_id)
        if error:
            return error, {}
        group = self.groups.get(group_id)
        committed = group.offsets if group is not None else {}
        if partitions is None:
            return ErrorCode.NONE, dict(committed)
        return ErrorCode.NONE, {key: committed.get(key) for key in partitions}

    def unstable(self, group_id: str, partitions: list[Partition] | None) -> set[Partition]:
        """Those of `partitions` (all committed when None) with a commit in flight or in an
        open transaction: a fetch with require_stable answers UNSTABLE_OFFSET_COMMIT."""
        group = self.groups.get(group_id)
        if group is None or self.owner_error(group_id):
            return set()
        wanted = group.offsets if partitions is None else partitions
        return {key for key in wanted if group.is_unstable(key)}

    # -- helpers ------------------------------------------------------------------------

    def _group(self, group_id: str) -> Group:
        """The group, created Empty for a commit to a group nobody joined (Kafka's simple
        consumer groups)."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        return group

    def _records(self, group_id: str, offsets: dict[Partition, OffsetCommit]
                 ) -> tuple[dict[Partition, int], dict[Partition, CommittedOffset], list]:
        """OFFSET_METADATA_TOO_LARGE for the partitions refused; the offsets accepted and
        their records."""
        refused: dict[Partition, int] = {}
        accepted: dict[Partition, CommittedOffset] = {}
        records = []
        now = int(time.time() * 1000)
        for key, commit in offsets.items():
            if len(commit.metadata.encode("utf-8")) > self.max_metadata_bytes:
                refused[key] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            accepted[key] = CommittedOffset(commit.offset, commit.leader_epoch, commit.metadata,
                                            now)
            records.append((offset_key(group_id, *key),
                            offset_value(commit.offset, commit.leader_epoch, commit.metadata, now)))
        return refused, accepted, records


def _txn_commit_allowed(group: Group, commit: TxnOffsetCommit) -> int:
    """Kafka's validateOffsetCommit for a transactional commit: one naming a member,
    instance or generation (v3+) is fenced as a plain commit is (KIP-447); one naming
    none is allowed in any state, as versions 0-2 name none."""
    if group.state is GroupState.DEAD:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if commit.generation < 0 and (group.state is GroupState.EMPTY or (
            not commit.member_id and commit.instance_id is None)):
        return ErrorCode.NONE
    error = group.fence(commit.member_id, commit.instance_id)
    if error:
        return error
    if commit.generation != group.generation:
        return ErrorCode.ILLEGAL_GENERATION
    return ErrorCode.NONE


def _drop_pending(group: Group, producer_id: int,
                  stamped: dict[Partition, CommittedOffset]) -> None:
    """Forget the pending offsets of a failed transactional commit, unless replaced since
    (Kafka's failPendingTxnOffsetCommit)."""
    pending = group.txn_offsets.get(producer_id, {})
    for key, offset in stamped.items():
        if pending.get(key) is offset:
            del pending[key]
    if not pending:
        group.txn_offsets.pop(producer_id, None)


def _named(offsets: dict[Partition, CommittedOffset]) -> dict[str, int]:
    return {f"{topic}-{partition}": offset.offset
            for (topic, partition), offset in sorted(offsets.items())}
