"""Transactional offset commits in the group coordinator (KIP-98, KIP-447): TxnOffsetCommit
writes one transactional batch whose offsets stay pending for the producer until its
marker (`complete_txn`), OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT
meanwhile, v3 commits are fenced by member and generation, and loading replays
transactional batches and markers. On the in-memory log of test_group_coordinator.py and
on a real PartitionLog."""

from __future__ import annotations

import asyncio
import json
import struct
from dataclasses import dataclass, field

from kafka.protocol.consumer import OffsetFetchRequest
from kafka.protocol.producer import TxnOffsetCommitRequest

from broker.errors import ErrorCode
from broker.event_log import EventLog
from broker.group.coordinator import GroupConfig, GroupCoordinator
from broker.group.offsets import OffsetCommit, TxnOffsetCommit
from broker.group.placement import OFFSETS_TOPIC
from broker.group.records import (
    LogBatch,
    OffsetRecord,
    build_batch,
    offset_key,
    offset_value,
    read_batches,
    read_records,
)
from broker.group.state import GroupState
from broker.group.store import OffsetsLog
from broker.replica.partition import AppendResult
from broker.server.dispatch import BrokerContext
from broker.server.groups import handle_offset_fetch, handle_txn_offset_commit
from broker.storage.log import LogConfig, PartitionLog
from broker.storage.markers import build_marker_batch
from tests.broker.test_group_coordinator import MemoryOffsetsLog, join, make_coordinator, owned

T0, T1, T2, T3 = ("t", 0), ("t", 1), ("t", 2), ("t", 3)


def marker_batch(producer_id: int, producer_epoch: int, commit: bool) -> bytes:
    """The storage's transaction marker: a control batch (attributes 0x30) of one record."""
    return build_marker_batch(producer_id, producer_epoch, commit, 0, 0)


def txn(producer_id: int, group: str = "g", generation: int = -1, member: str = "",
        instance: str | None = None) -> TxnOffsetCommit:
    return TxnOffsetCommit(group, f"tx-{producer_id}", producer_id, 0, generation, member,
                           instance)


def offsets(**by_partition: int) -> dict[tuple[str, int], OffsetCommit]:
    """offsets(p0=5, p1=6): commits of partitions 0 and 1 of topic t."""
    return {("t", int(name[1:])): OffsetCommit(value, -1, "") for name, value in
            by_partition.items()}


def committed(coordinator: GroupCoordinator, group: str = "g") -> dict[tuple[str, int], int]:
    return {key: value.offset for key, value in coordinator.offsets.fetch(group, None)[1].items()}


def run(coroutine):
    return asyncio.run(coroutine)


# -- records ---------------------------------------------------------------------------------

def test_a_transactional_batch_carries_the_producer_and_markers_decode():
    records = [(offset_key("g", "t", 0), offset_value(5, -1, "", 1))]
    batch = build_batch(records, 1, producer_id=7, producer_epoch=3)
    attributes, = struct.unpack_from(">h", batch, 21)
    producer_id, epoch, base_sequence = struct.unpack_from(">qhi", batch, 43)
    assert (attributes, producer_id, epoch, base_sequence) == (0x10, 7, 3, -1)
    plain = build_batch(records, 1)
    assert struct.unpack_from(">hq", plain, 21)[0] == 0
    assert struct.unpack_from(">q", plain, 43)[0] == -1
    data = batch + marker_batch(7, 3, commit=True) + marker_batch(8, 0, commit=False)
    batches, next_offset = read_batches(data)
    assert batches == [
        LogBatch(0, 7, True, records=(OffsetRecord("g", "t", 0, 5, -1, "", 1),)),
        LogBatch(0, 7, True, is_control=True, marker=1),
        LogBatch(0, 8, True, is_control=True, marker=0),
    ]
    assert next_offset == 1
    assert read_records(data)[0] == [OffsetRecord("g", "t", 0, 5, -1, "", 1)]


# -- pending, commit, abort ------------------------------------------------------------------

def test_pending_offsets_are_invisible_until_committed_and_dropped_on_abort():
    async def scenario():
        store = MemoryOffsetsLog()
        coordinator = make_coordinator(store)
        await owned(coordinator)
        assert await coordinator.offsets.commit_txn(txn(7), offsets(p0=5, p1=6)) == {
            T0: ErrorCode.NONE, T1: ErrorCode.NONE}
        assert await coordinator.offsets.commit_txn(txn(8), offsets(p2=9)) == {
            T2: ErrorCode.NONE}
        assert committed(coordinator) == {}
        assert coordinator.offsets.fetch("g", [T0]) == (ErrorCode.NONE, {T0: None})
        coordinator.complete_txn(0, 7, commit=True)
        coordinator.complete_txn(0, 8, commit=False)
        assert committed(coordinator) == {T0: 5, T1: 6}
        assert coordinator.groups["g"].txn_offsets == {}
        coordinator.complete_txn(0, 7, commit=True)  # a repeated marker changes nothing
        assert committed(coordinator) == {T0: 5, T1: 6}
        batch = read_batches(store.batches[0][1])[0][0]
        assert (batch.producer_id, batch.is_transactional) == (7, True)
    run(scenario())


def test_require_stable_sees_open_transactions_and_commits_in_flight():
    async def scenario():
        store = MemoryOffsetsLog()
        coordinator = make_coordinator(store)
        await owned(coordinator)
        await coordinator.offsets.commit("g", -1, "", None, offsets(p0=1, p1=1))
        await coordinator.offsets.commit_txn(txn(7), offsets(p0=5))
        assert coordinator.offsets.unstable("g", [T0, T1, T2]) == {T0}
        assert coordinator.offsets.unstable("g", None) == {T0}
        store.delay = 0.05
        in_flight = asyncio.ensure_future(
            coordinator.offsets.commit("g", -1, "", None, offsets(p1=2)))
        await asyncio.sleep(0.01)
        assert coordinator.offsets.unstable("g", None) == {T0, T1}
        await in_flight
        coordinator.complete_txn(0, 7, commit=True)
        assert coordinator.offsets.unstable("g", None) == set()
        assert committed(coordinator) == {T0: 5, T1: 2}
    run(scenario())


def test_an_older_transactional_offset_never_replaces_a_later_plain_commit():
    async def scenario():
        coordinator = make_coordinator()
        await owned(coordinator)
        await coordinator.offsets.commit_txn(txn(7), offsets(p0=5, p1=5))
        await coordinator.offsets.commit("g", -1, "", None, offsets(p0=9))
        coordinator.complete_txn(0, 7, commit=True)
        assert committed(coordinator) == {T0: 9, T1: 5}
        await coordinator.offsets.commit_txn(txn(7), offsets(p0=12))
        coordinator.complete_txn(0, 7, commit=True)
        assert committed(coordinator) == {T0: 12, T1: 5}
    run(scenario())


def test_a_marker_before_the_commit_answers_still_finds_its_offsets():
    async def scenario():
        store = MemoryOffsetsLog()
        coordinator = make_coordinator(store)
        await owned(coordinator)
        store.delay = 0.05
        answer = asyncio.ensure_future(coordinator.offsets.commit_txn(txn(7), offsets(p0=5)))
        await asyncio.sleep(0.01)
        coordinator.complete_txn(0, 7, commit=True)
        assert committed(coordinator) == {T0: 5}
        assert await answer == {T0: ErrorCode.NONE}
        assert committed(coordinator) == {T0: 5}
    run(scenario())


def test_a_failed_transactional_commit_leaves_nothing_pending():
    async def scenario():
        store = MemoryOffsetsLog()
        coordinator = make_coordinator(store)
        await owned(coordinator)
        store.fail_after_append = ErrorCode.REQUEST_TIMED_OUT
        assert await coordinator.offsets.commit_txn(txn(7), offsets(p0=5)) == {
            T0: ErrorCode.REQUEST_TIMED_OUT}
        store.fail_after_append, store.fail_with = ErrorCode.NONE, ErrorCode.NOT_ENOUGH_REPLICAS
        assert await coordinator.offsets.commit_txn(txn(8), offsets(p1=5)) == {
            T1: ErrorCode.COORDINATOR_NOT_AVAILABLE}
        assert coordinator.groups["g"].txn_offsets == {}
        coordinator.complete_txn(0, 7, commit=True)
        assert committed(coordinator) == {}
    run(scenario())


def test_only_groups_of_the_markers_offsets_partition_complete():
    async def scenario():
        coordinator = make_coordinator(partitions=50)
        for partition in range(50):
            await owned(coordinator, partition)
        groups = ("g", "h")
        assert coordinator.partition_of("g") != coordinator.partition_of("h")
        for group in groups:
            await coordinator.offsets.commit_txn(txn(7, group), offsets(p0=3))
        coordinator.complete_txn(coordinator.partition_of("g"), 7, commit=True)
        assert committed(coordinator, "g") == {T0: 3}
        assert committed(coordinator, "h") == {}
        assert coordinator.offsets.unstable("h", [T0]) == {T0}
    run(scenario())


# -- validation ------------------------------------------------------------------------------

def test_v3_commits_are_fenced_by_member_generation_and_instance():
    async def scenario():
        coordinator = make_coordinator()
        await owned(coordinator)
        joined = await coordinator.join_group(join(instance="i-1"))
        member = joined.member_id
        await coordinator.sync_group("g", 1, member, "i-1", None, None, {member: b""})
        assert coordinator.groups["g"].state is GroupState.STABLE
        cases = {
            txn(7, generation=1, member=member, instance="i-1"): ErrorCode.NONE,
            txn(7, generation=1, member="zombie"): ErrorCode.UNKNOWN_MEMBER_ID,
            txn(7, generation=0, member=member): ErrorCode.ILLEGAL_GENERATION,
            txn(7, generation=1, member="old-id", instance="i-1"): ErrorCode.FENCED_INSTANCE_ID,
            txn(7, generation=1, member=member, instance="i-2"): ErrorCode.UNKNOWN_MEMBER_ID,
            txn(7, generation=-1, member=member): ErrorCode.ILLEGAL_GENERATION,
            txn(7): ErrorCode.NONE,  # v0-v2 name no member: not checked
        }
        for commit, code in cases.items():
            assert await coordinator.offsets.commit_txn(commit, offsets(p0=1)) == {T0: code}, (
                commit)
    run(scenario())


def test_coordinator_group_and_metadata_errors():
    async def scenario():
        store = MemoryOffsetsLog()
        coordinator = GroupCoordinator(1, store, lambda: 1, GroupConfig(max_metadata_bytes=4),
                                       EventLog(None, broker_id=1))
        assert await coordinator.offsets.commit_txn(txn(7), offsets(p0=1)) == {
            T0: ErrorCode.NOT_COORDINATOR}
        coordinator.loading[0] = 0
        assert await coordinator.offsets.commit_txn(txn(7), offsets(p0=1)) == {
            T0: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
        del coordinator.loading[0]
        await owned(coordinator)
        assert await coordinator.offsets.commit_txn(txn(7, group=""), offsets(p0=1)) == {
            T0: ErrorCode.INVALID_GROUP_ID}
        mixed = {T0: OffsetCommit(1, -1, "long metadata"), T1: OffsetCommit(2, 4, "ok")}
        assert await coordinator.offsets.commit_txn(txn(7, group="new"), mixed) == {
            T0: ErrorCode.OFFSET_METADATA_TOO_LARGE, T1: ErrorCode.NONE}
        assert coordinator.groups["new"].state is GroupState.EMPTY
        coordinator.complete_txn(0, 7, commit=True)
        fetched = coordinator.offsets.fetch("new", [T1])[1][T1]
        assert (fetched.offset, fetched.leader_epoch, fetched.metadata) == (2, 4, "ok")
        too_big = {T0: OffsetCommit(1, -1, "long metadata")}
        assert await coordinator.offsets.commit_txn(txn(8, group="new"), too_big) == {
            T0: ErrorCode.OFFSET_METADATA_TOO_LARGE}
        assert len(store.batches) == 1
    run(scenario())


# -- loading ---------------------------------------------------------------------------------

def test_load_replays_commits_aborts_and_open_transactions():
    async def scenario():
        store = MemoryOffsetsLog()
        coordinator = make_coordinator(store)
        await owned(coordinator)
        await coordinator.offsets.commit_txn(txn(7), offsets(p0=5, p1=5))
        await coordinator.offsets.commit_txn(txn(8), offsets(p2=6))
        await coordinator.offsets.commit("g", -1, "", None, offsets(p1=9))
        store.write(0, marker_batch(7, 0, commit=True))
        store.write(0, marker_batch(8, 0, commit=False))
        await coordinator.offsets.commit_txn(txn(9), offsets(p3=4))
        await coordinator.offsets.commit_txn(txn(10, group="only-pending"), offsets(p0=1))
        successor = make_coordinator(store)
        await owned(successor)
        assert committed(successor) == {T0: 5, T1: 9}
        assert successor.offsets.unstable("g", [T0, T1, T2, T3]) == {T3}
        assert successor.groups["only-pending"].state is GroupState.EMPTY
        assert successor.offsets.unstable("only-pending", [T0]) == {T0}
        successor.complete_txn(0, 9, commit=True)
        assert committed(successor) == {T0: 5, T1: 9, T3: 4}
    run(scenario())


@dataclass
class InSyncLeader:
    """An offsets partition led by this broker over a real log, its followers always in
    sync: the high watermark is the log end."""

    log: PartitionLog
    is_leader: bool = True
    leader_epoch: int = 0

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset

    def append_as_leader(self, batch: bytes, required_acks: int) -> AppendResult:
        info = self.log.append_as_leader(batch, self.leader_epoch)
        return AppendResult(info.first_offset, info.last_offset, -1, 0)


@dataclass
class Replicas:
    partitions: dict = field(default_factory=dict)


def test_failover_on_a_real_log_rebuilds_the_same_offsets(tmp_path):
    async def scenario():
        log = PartitionLog.open(tmp_path / f"{OFFSETS_TOPIC}-0", LogConfig())
        replicas = Replicas({(OFFSETS_TOPIC, 0): InSyncLeader(log)})
        events = tmp_path / "events.jsonl"
        coordinator = GroupCoordinator(1, OffsetsLog(replicas, 1000, 1 << 20), lambda: 1,
                                       GroupConfig(), EventLog(events, broker_id=1))
        await owned(coordinator)
        await coordinator.offsets.commit_txn(txn(7), offsets(p0=5, p2=5))
        await coordinator.offsets.commit_txn(txn(8), offsets(p1=6))
        await coordinator.offsets.commit("g", -1, "", None, offsets(p2=8))
        for producer_id, commit in ((7, True), (8, False)):
            log.append_as_leader(marker_batch(producer_id, 0, commit), 0)
            coordinator.complete_txn(0, producer_id, commit)
        await coordinator.offsets.commit_txn(txn(9), offsets(p3=4))
        assert committed(coordinator) == {T0: 5, T2: 8}
        successor = GroupCoordinator(1, OffsetsLog(replicas, 1000, 1 << 20), lambda: 1,
                                     GroupConfig(), EventLog(None, broker_id=1))
        await owned(successor)
        assert committed(successor) == committed(coordinator)
        assert successor.groups["g"].txn_offsets.keys() == {9}
        assert successor.offsets.unstable("g", [T3]) == {T3}
        for survivor in (coordinator, successor):
            log.append_as_leader(marker_batch(9, 0, commit=True), 0)
            survivor.complete_txn(0, 9, commit=True)
            assert committed(survivor) == {T0: 5, T2: 8, T3: 4}
        lines = [json.loads(line) for line in events.read_text().splitlines()]
        txn_lines = [(e["event"], e["producer_id"]) for e in lines if "producer_id" in e]
        assert txn_lines == [
            ("txn-offsets-pending", 7), ("txn-offsets-pending", 8),
            ("txn-offsets-completed", 7), ("txn-offsets-completed", 8),
            ("txn-offsets-pending", 9), ("txn-offsets-completed", 9),
        ]
        completed = [e for e in lines if e["event"] == "txn-offsets-completed"]
        assert (completed[0]["group"], completed[0]["commit"], completed[0]["partitions"]) == (
            "g", True, ["t-0", "t-2"])
    run(scenario())


# -- handlers --------------------------------------------------------------------------------

@dataclass
class Cache:
    topics: dict[str, int]

    def partition(self, topic: str, index: int):
        return object() if index < self.topics.get(topic, 0) else None


@dataclass
class MetadataOnly:
    metadata: Cache


def context_of(coordinator: GroupCoordinator) -> BrokerContext:
    return BrokerContext(broker_id=1, replicas=MetadataOnly(Cache({"t": 4})),
                         groups=coordinator)


def txn_request(version: int, partitions: list[tuple[str, int, int]], **fields):
    Topic = TxnOffsetCommitRequest[version].TxnOffsetCommitRequestTopic
    Partition = Topic.TxnOffsetCommitRequestPartition
    by_topic: dict[str, list] = {}
    for topic, index, offset in partitions:
        extra = {"committed_leader_epoch": 3} if version >= 2 else {}
        by_topic.setdefault(topic, []).append(Partition(
            partition_index=index, committed_offset=offset, committed_metadata=None, **extra))
    return TxnOffsetCommitRequest[version](
        transactional_id="tx", group_id="g", producer_id=7, producer_epoch=0,
        topics=[Topic(name=name, partitions=parts) for name, parts in by_topic.items()],
        **fields)


def errors_of(response) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.error_code
            for t in response.topics for p in t.partitions}


def test_txn_offset_commit_and_a_stable_offset_fetch_over_the_handlers():
    async def scenario():
        coordinator = make_coordinator()
        await owned(coordinator)
        context = context_of(coordinator)
        response = await handle_txn_offset_commit(
            context, txn_request(0, [("t", 0, 5), ("gone", 0, 1)]), 0, None)
        response.encode(version=0)
        assert errors_of(response) == {
            T0: ErrorCode.NONE, ("gone", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        fenced = txn_request(3, [("t", 1, 6)], generation_id=4, member_id="zombie",
                             group_instance_id=None)
        response = await handle_txn_offset_commit(context, fenced, 3, None)
        response.encode(version=3)
        assert errors_of(response) == {T1: ErrorCode.UNKNOWN_MEMBER_ID}
        await coordinator.offsets.commit("g", -1, "", None, offsets(p1=2))
        Topic = OffsetFetchRequest[7].OffsetFetchRequestTopic
        stable = OffsetFetchRequest[7](group_id="g", require_stable=True,
                                       topics=[Topic(name="t", partition_indexes=[0, 1])])
        response = await handle_offset_fetch(context, stable, 7, None)
        response.encode(version=7)
        assert {p.partition_index: (p.committed_offset, p.error_code)
                for p in response.topics[0].partitions} == {
            0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT), 1: (2, ErrorCode.NONE)}
        loose = OffsetFetchRequest[6](group_id="g", topics=[
            OffsetFetchRequest[6].OffsetFetchRequestTopic(name="t", partition_indexes=[0])])
        response = await handle_offset_fetch(context, loose, 6, None)
        assert response.topics[0].partitions[0].error_code == ErrorCode.NONE
        coordinator.complete_txn(0, 7, commit=True)
        response = await handle_offset_fetch(context, stable, 7, None)
        fetched = {p.partition_index: (p.committed_offset, p.committed_leader_epoch)
                   for p in response.topics[0].partitions}
        assert fetched == {0: (5, -1), 1: (2, -1)}
        coordinator.loading[0] = coordinator.owned.pop(0)
        for version, code in ((1, ErrorCode.COORDINATOR_NOT_AVAILABLE),
                              (2, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)):
            loading = await handle_txn_offset_commit(
                context, txn_request(version, [("t", 2, 1)]), version, None)
            assert errors_of(loading) == {T2: code}  # KAFKA-7296: v0-1 cannot retry loading
        coordinator.owned[0] = coordinator.loading.pop(0)
        Group = OffsetFetchRequest[8].OffsetFetchRequestGroup
        await coordinator.offsets.commit_txn(txn(8), offsets(p2=1))
        grouped = OffsetFetchRequest[8](require_stable=True, groups=[Group(
            group_id="g", topics=[Group.OffsetFetchRequestTopics(name="t",
                                                                 partition_indexes=[2])])])
        response = await handle_offset_fetch(context, grouped, 8, None)
        response.encode(version=8)
        assert response.groups[0].topics[0].partitions[0].error_code == (
            ErrorCode.UNSTABLE_OFFSET_COMMIT)
    run(scenario())
