"""The group coordinator's logic on one event loop: Kafka's state machine, rebalances,
fencing, durable commits, load and unload. The `__consumer_offsets` log is an in-memory
stand-in (`MemoryOffsetsLog`, real batches at assigned log offsets): everything here stays
in one process; the cluster tests run the same coordinator over real replicated
partitions."""

from __future__ import annotations

import asyncio
import struct

import pytest

from broker.errors import ErrorCode
from broker.event_log import EventLog
from broker.group.coordinator import GroupConfig, GroupCoordinator, JoinRequest
from broker.group.offsets import OffsetCommit
from broker.group.placement import java_string_hash, partition_for
from broker.group.records import (
    GroupRecord,
    MemberRecord,
    OffsetRecord,
    build_batch,
    decode_record,
    group_key,
    group_value,
    offset_key,
    offset_value,
    read_batches,
    read_records,
)
from broker.group.state import Group, GroupState, IllegalStateTransition, Member
from broker.group.store import LoadedPartition, commit_error, group_error

SESSION_MS = 6000


class MemoryOffsetsLog:
    """Appends land as batches with log offsets assigned (or fail with `fail_with`, before
    the append, or `fail_after_append`, after it); `load` replays them through the record
    decoder, as the real store does."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, bytes]] = []  # (offsets partition, batch)
        self.ends: dict[int, int] = {}
        self.fail_with = ErrorCode.NONE
        self.fail_after_append = ErrorCode.NONE
        self.delay = 0.0

    def write(self, index: int, batch: bytes) -> int:
        """Append `batch` to partition `index` at its log end; its base offset."""
        base = self.ends.get(index, 0)
        placed = bytearray(batch)
        struct.pack_into(">q", placed, 0, base)
        self.batches.append((index, bytes(placed)))
        self.ends[index] = read_batches(batch)[1] + base
        return base

    async def append(self, index: int, records: list[tuple[bytes, bytes | None]],
                     producer_id: int = -1, producer_epoch: int = -1, appended=None,
                     unreplicated=None) -> int:
        if not self.fail_with:
            base = self.write(index, build_batch(records, 0, producer_id, producer_epoch))
            if appended is not None:
                appended(base)
        if self.delay:
            await asyncio.sleep(self.delay)
        return self.fail_with or self.fail_after_append

    async def load(self, index: int, epoch: int) -> LoadedPartition:
        loaded = LoadedPartition()
        for partition, batch in self.batches:
            if partition == index:
                for found in read_batches(batch)[0]:
                    loaded.apply_batch(found)
        return loaded


def make_coordinator(store=None, delay_ms: int = 0, partitions: int = 1):
    coordinator = GroupCoordinator(
        1,
        store or MemoryOffsetsLog(),
        lambda: partitions,
        GroupConfig(initial_rebalance_delay_ms=delay_ms),
        EventLog(None, broker_id=1),
    )
    return coordinator


async def owned(coordinator: GroupCoordinator, partition: int = 0) -> None:
    coordinator.on_leader(partition, 0)
    while partition in coordinator.loading:
        await asyncio.sleep(0)


SUBSCRIPTION = struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">i", -1)


def join(group: str = "g", member: str = "", protocols=(("range", SUBSCRIPTION),),
         session: int = SESSION_MS, rebalance: int = 2000, instance: str | None = None,
         require_known: bool = False, protocol_type: str = "consumer") -> JoinRequest:
    return JoinRequest(group, member, instance, "client", "host", session, rebalance,
                       protocol_type, list(protocols), require_known)


def assignment(topic: str, partitions: list[int]) -> bytes:
    data = topic.encode()
    return (struct.pack(">hih", 0, 1, len(data)) + data + struct.pack(">i", len(partitions))
            + struct.pack(f">{len(partitions)}i", *partitions) + struct.pack(">i", -1))


def run(coroutine):
    return asyncio.run(coroutine)


# -- placement and records -------------------------------------------------------------------

def test_java_string_hash_matches_java():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # two UTF-16 units


def test_partition_for_maps_min_int_to_zero_and_abs_otherwise():
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50


def test_offset_records_use_kafka_schemas():
    key = offset_key("g", "t", 3)
    assert key == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x03"
    value = offset_value(42, 7, "meta", 1000)
    assert value == struct.pack(">hqih", 3, 42, 7, 4) + b"meta" + struct.pack(">q", 1000)
    assert decode_record(key, value) == OffsetRecord("g", "t", 3, 42, 7, "meta", 1000)
    assert decode_record(key, None) == OffsetRecord("g", "t", 3)


def test_offset_value_v1_with_expire_timestamp_is_read():
    value = struct.pack(">hqh", 1, 5, 0) + struct.pack(">qq", 10, 20)
    assert decode_record(offset_key("g", "t", 0), value).offset == 5


def test_group_records_round_trip_and_tombstones():
    member = MemberRecord("m-1", None, "c", "/h", 3000, 6000, b"sub", b"assign")
    record = GroupRecord("g", "consumer", 4, "range", "m-1", 99, (member,))
    assert group_key("g") == b"\x00\x02\x00\x01g"
    assert decode_record(group_key("g"), group_value(record)) == record
    assert decode_record(group_key("g"), None) == GroupRecord("g", deleted=True)


def test_batches_read_back_and_skip_nothing():
    batch = build_batch([(offset_key("g", "t", 0), offset_value(1, -1, "", 5)),
                         (group_key("g"), None)], 5)
    records, next_offset = read_records(batch)
    assert next_offset == 2
    assert records == [OffsetRecord("g", "t", 0, 1, -1, "", 5), GroupRecord("g", deleted=True)]


def test_replay_keeps_the_last_value_per_key():
    loaded = LoadedPartition()
    for record in (OffsetRecord("g", "t", 0, 1), OffsetRecord("g", "t", 0, 9),
                   OffsetRecord("g", "t", 1, 3), OffsetRecord("g", "t", 1),
                   GroupRecord("h", "consumer", 2), GroupRecord("h", deleted=True)):
        loaded.apply(record)
    assert {k: v.offset for k, v in loaded.offsets["g"].items()} == {("t", 0): 9}
    assert loaded.group_ids() == {"g"}


def test_store_error_mapping_follows_kafka():
    assert commit_error(ErrorCode.NOT_ENOUGH_REPLICAS) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert commit_error(ErrorCode.NOT_LEADER_OR_FOLLOWER) == ErrorCode.NOT_COORDINATOR
    assert commit_error(ErrorCode.RECORD_LIST_TOO_LARGE) == ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    assert commit_error(ErrorCode.REQUEST_TIMED_OUT) == ErrorCode.REQUEST_TIMED_OUT
    assert group_error(ErrorCode.REQUEST_TIMED_OUT) == ErrorCode.REBALANCE_IN_PROGRESS


# -- the state machine -----------------------------------------------------------------------

def test_state_machine_refuses_moves_kafka_does_not_have():
    group = Group("g")
    with pytest.raises(IllegalStateTransition):
        group.transition_to(GroupState.STABLE)
    group.transition_to(GroupState.PREPARING_REBALANCE)
    group.transition_to(GroupState.COMPLETING_REBALANCE)
    with pytest.raises(IllegalStateTransition):
        group.transition_to(GroupState.EMPTY)
    group.transition_to(GroupState.STABLE)
    group.transition_to(GroupState.DEAD)


def test_protocol_selection_takes_the_common_protocol_most_members_prefer():
    group = Group("g")
    for name, protocols in (("a", [("range", b""), ("roundrobin", b"")]),
                            ("b", [("roundrobin", b""), ("range", b"")]),
                            ("c", [("roundrobin", b""), ("sticky", b""), ("range", b"")])):
        group.add(Member(name, None, "c", "h", 1, 1, "consumer", protocols))
    assert group.candidate_protocols() == {"range", "roundrobin"}
    assert group.select_protocol() == "roundrobin"
    assert not group.supports("consumer", [("sticky", b"")])
    assert not group.supports("connect", [("range", b"")])


# -- rebalances ------------------------------------------------------------------------------

def test_two_members_join_sync_and_become_stable():
    async def scenario():
        coordinator = make_coordinator(delay_ms=50)
        await owned(coordinator)
        first, second = await asyncio.gather(coordinator.join_group(join()),
                                             coordinator.join_group(join()))
        assert first.error == second.error == ErrorCode.NONE
        assert first.generation == second.generation == 1
        leader, follower = (first, second) if first.members else (second, first)
        assert leader.leader_id == leader.member_id
        assert len(leader.members) == 2 and follower.members == []
        assigned = {leader.member_id: assignment("t", [0]),
                    follower.member_id: assignment("t", [1])}
        results = await asyncio.gather(
            coordinator.sync_group("g", 1, follower.member_id, None, None, None, {}),
            coordinator.sync_group("g", 1, leader.member_id, None, "consumer", "range",
                                   assigned))
        assert results[0] == (ErrorCode.NONE, assigned[follower.member_id])
        assert results[1] == (ErrorCode.NONE, assigned[leader.member_id])
        assert coordinator.groups["g"].state is GroupState.STABLE
        return coordinator
    run(scenario())


def test_member_id_required_then_join_with_the_given_id():
    async def scenario():
        coordinator = make_coordinator()
        await owned(coordinator)
        first = await coordinator.join_group(join(require_known=True))
        assert first.error == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
        second = await coordinator.join_group(join(member=first.member_id, require_known=True))
        assert second.error == ErrorCode.NONE and second.member_id == first.member_id
    run(scenario())


def test_stale_generation_and_unknown_members_are_fenced():
    async def scenario():
        coordinator = make_coordinator()
        await owned(coordinator)
        joined = await coordinator.join_group(join())
        member = joined.member_id
        assert await coordinator.sync_group("g", 1, member, None, None, None,
                                            {member: b"a"}) == (ErrorCode.NONE, b"a")
        assert coordinator.heartbeat("g", 0, member, None) == ErrorCode.ILLEGAL_GENERATION
        assert coordinator.heartbeat("g", 1, "nobody", None) == ErrorCode.UNKNOWN_MEMBER_ID
        assert coordinator.heartbeat("nogroup", 1, member, None) == ErrorCode.UNKNOWN_MEMBER_ID
        commit = {("t", 0): OffsetCommit(5, -1, "")}
        assert await coordinator.offsets.commit("g", 0, member, None, commit) == {
            ("t", 0): ErrorCode.ILLEGAL_GENERATION}
        assert await coordinator.offsets.commit("g", 1, "nobody", None, commit) == {
            ("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
        assert (await coordinator.join_group(join(member="nobody"))).error == (
            ErrorCode.UNKNOWN_MEMBER_ID)
        assert (await coordinator.join_group(join(protocol_type="connect"))).error == (
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        assert (await coordinator.join_group(join(session=10))).error == (
            ErrorCode.INVALID_SESSION_TIMEOUT)
        assert (await coordinator.join_group(join(group=""))).error == ErrorCode.INVALID_GROUP_ID
        assert (await coordinator.join_group(join(protocols=[("range", b"\x00")]))).error == (
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        assert list(coordinator.groups["g"].members) == [member]
    run(scenario())


def test_a_joining_member_makes_the_others_rejoin_and_heartbeats_say_so():
    async def scenario():
        coordinator = make_coordinator()
        await owned(coordinator)
        first = await coordinator.join_group(join())
        await coordinator.sync_group("g", 1, first.member_id, None, None, None, {})
        second = asyncio.ensure_future(coordinator.join_group(join()))
        await asyncio.sleep(0.01)
        assert coordinator.groups["g"].state is GroupState.PREPARING_REBALANCE
        assert coordinator.heartbeat("g", 1, first.member_id, None) == (
            ErrorCode.REBALANCE_IN_PROGRESS)
        assert (await coordinator.sync_group("g", 1, first.member_id, None, None, None, {}))[0] \
            == ErrorCode.REBALANCE_IN_PROGRESS
        again = await coordinator.join_group(join(member=first.member_id))
        joined = await second
        assert again.generation == joined.generation == 2
    run(scenario())


def test_rebalance_timeout_removes_members_that_do_not_rejoin():
    async def scenario():
        coordinator = make_coordinator()
        await owned(coordinator)
        first = await coordinator.join_group(join(rebalance=300))
        await coordinator.sync_group("g", 1, first.member_id, None, None, None, {})
        second = await coordinator.join_group(join(rebalance=300))
        assert second.generation == 2
        assert list(coordinator.groups["g"].members) == [second.member_id]
        assert second.leader_id == second.member_id
    run(scenario())


def test_expired_session_removes_the_member_and_rebalances():
    async def scenario():
        store = MemoryOffsetsLog()
        coordinator = GroupCoordinator(1, store, lambda: 1,
                                       GroupConfig(min_session_timeout_ms=100,
                                                   initial_rebalance_delay_ms=50),
                                       EventLog(None, broker_id=1))
        await owned(coordinator)
        a, b = await asyncio.gather(coordinator.join_group(join(session=300)),
                                    coordinator.join_group(join(session=300)))
        await asyncio.gather(*(coordinator.sync_group("g", 1, m.member_id, None, None, None, {})
                               for m in (a, b)))
        for _ in range(8):
            await asyncio.sleep(0.1)
            coordinator.heartbeat("g", coordinator.groups["g"].generation, a.member_id, None)
        group = coordinator.groups["g"]
        assert b.member_id not in group.members and a.member_id in group.members
        assert group.state is GroupState.PREPARING_REBALANCE
    run(scenario())


def test_initial_delay_waits_for_more_members_before_the_first_generation():
    async def scenario():
        coordinator = make_coordinator(delay_ms=200)
        await owned(coordinator)
        first = asyncio.ensure_future(coordinator.join_group(join(rebalance=5000)))
        await asyncio.sleep(0.1)
        second = await coordinator.join_group(join(rebalance=5000))
        assert (await first).generation == second.generation == 1
        assert len(coordinator.groups["g"].members) == 2
    run(scenario())


def test_leave_group_rebalances_and_an_empty_group_is_stored():
    async def scenario():
        store = MemoryOffsetsLog()
        coordinator = make_coordinator(store)
        await owned(coordinator)
        member = (await coordinator.join_group(join())).member_id
        await coordinator.sync_group("g", 1, member, None, None, None, {})
        assert coordinator.leave_group("g", [(member, None), ("nobody", None)]) == (
            ErrorCode.NONE, [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID])
        await asyncio.sleep(0.01)
        group = coordinator.groups["g"]
        assert group.state is GroupState.EMPTY and group.generation == 2
        last = read_records(store.batches[-1][1])[0][-1]
        assert isinstance(last, GroupRecord) and last.generation == 2 and not last.members
    run(scenario())


def test_static_member_rejoining_fences_its_old_member_id():
    async def scenario():
        coordinator = make_coordinator()
        await owned(coordinator)
        old = await coordinator.join_group(join(instance="i-1", rebalance=300))
        await coordinator.sync_group("g", 1, old.member_id, "i-1", None, None,
                                     {old.member_id: b"x"})
        new = await coordinator.join_group(join(instance="i-1", rebalance=300))
        assert new.error == ErrorCode.NONE and new.member_id != old.member_id
        assert coordinator.heartbeat("g", new.generation, old.member_id, "i-1") == (
            ErrorCode.FENCED_INSTANCE_ID)
    run(scenario())


def test_failed_assignment_store_sends_the_group_back_to_rebalance():
    async def scenario():
        store = MemoryOffsetsLog()
        coordinator = make_coordinator(store)
        await owned(coordinator)
        member = (await coordinator.join_group(join())).member_id
        store.fail_with = ErrorCode.RECORD_LIST_TOO_LARGE
        code, _ = await coordinator.sync_group("g", 1, member, None, None, None,
                                               {member: b"x" * 10})
        assert code == ErrorCode.UNKNOWN_SERVER_ERROR
        assert coordinator.groups["g"].state is GroupState.PREPARING_REBALANCE
    run(scenario())


# -- offsets, ownership ----------------------------------------------------------------------

def test_commit_is_visible_only_once_durable_and_failures_are_mapped():
    async def scenario():
        store = MemoryOffsetsLog()
        coordinator = make_coordinator(store)
        await owned(coordinator)
        store.delay = 0.05
        pending = asyncio.ensure_future(coordinator.offsets.commit(
            "simple", -1, "", None, {("t", 0): OffsetCommit(7, 2, "m")}))
        await asyncio.sleep(0.01)
        assert coordinator.offsets.fetch("simple", [("t", 0)]) == (
            ErrorCode.NONE, {("t", 0): None})
        assert await pending == {("t", 0): ErrorCode.NONE}
        offset = coordinator.offsets.fetch("simple", None)[1][("t", 0)]
        assert (offset.offset, offset.leader_epoch, offset.metadata) == (7, 2, "m")
        store.delay, store.fail_with = 0, ErrorCode.NOT_ENOUGH_REPLICAS
        assert await coordinator.offsets.commit(
            "simple", -1, "", None, {("t", 0): OffsetCommit(9, 2, "")}) == {
            ("t", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE}
        assert coordinator.offsets.fetch("simple", [("t", 0)])[1][("t", 0)].offset == 7
        big = {("t", 1): OffsetCommit(1, -1, "x" * 5000)}
        assert await coordinator.offsets.commit("simple", -1, "", None, big) == {
            ("t", 1): ErrorCode.OFFSET_METADATA_TOO_LARGE}
    run(scenario())


def test_not_coordinator_until_loaded_and_after_unloading():
    async def scenario():
        store = MemoryOffsetsLog()
        coordinator = make_coordinator(store)
        assert (await coordinator.join_group(join())).error == ErrorCode.NOT_COORDINATOR
        await owned(coordinator)
        member = (await coordinator.join_group(join())).member_id
        await coordinator.sync_group("g", 1, member, None, None, None, {member: b"a"})
        await coordinator.offsets.commit("g", 1, member, None, {("t", 0): OffsetCommit(3, -1, "")})
        coordinator.on_resign(0)
        assert coordinator.heartbeat("g", 1, member, None) == ErrorCode.NOT_COORDINATOR
        assert coordinator.offsets.fetch("g", None)[0] == ErrorCode.NOT_COORDINATOR
        successor = make_coordinator(store)
        await owned(successor)
        group = successor.groups["g"]
        assert group.state is GroupState.STABLE and group.generation == 1
        assert successor.heartbeat("g", 1, member, None) == ErrorCode.NONE
        assert successor.offsets.fetch("g", [("t", 0)])[1][("t", 0)].offset == 3
    run(scenario())


def test_describe_list_and_delete_groups():
    async def scenario():
        store = MemoryOffsetsLog()
        coordinator = make_coordinator(store)
        await owned(coordinator)
        member = (await coordinator.join_group(join())).member_id
        await coordinator.sync_group("g", 1, member, None, None, None, {member: b"a"})
        await coordinator.offsets.commit("g", 1, member, None, {("t", 0): OffsetCommit(3, -1, "")})
        assert coordinator.describe_group("g")[1].state is GroupState.STABLE
        assert coordinator.describe_group("unknown") == (ErrorCode.NONE, None)
        assert [g.group_id for g in coordinator.list_groups()[1]] == ["g"]
        assert await coordinator.delete_groups(["g", "unknown"]) == {
            "g": ErrorCode.NON_EMPTY_GROUP, "unknown": ErrorCode.GROUP_ID_NOT_FOUND}
        coordinator.leave_group("g", [(member, None)])
        await asyncio.sleep(0.01)
        assert await coordinator.delete_groups(["g"]) == {"g": ErrorCode.NONE}
        assert "g" not in coordinator.groups
        successor = make_coordinator(store)
        await owned(successor)
        assert "g" not in successor.groups
    run(scenario())
