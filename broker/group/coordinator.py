"""The group coordinator: Kafka's classic consumer-group protocol on this broker.

A broker coordinates the groups of the `__consumer_offsets` partitions it leads
(`broker.group.placement`). Becoming leader of one loads its groups and offsets from the
log (COORDINATOR_LOAD_IN_PROGRESS meanwhile); losing it unloads them (NOT_COORDINATOR).

Everything runs on the broker's event loop, so group state changes one step at a time;
after every await (a durable append) the group's state and generation are checked again,
as Kafka's coordinator does under its group lock.

Rebalance: a JoinGroup that changes the group moves it to PreparingRebalance; the join
completes when every member has rejoined (or the rebalance timeout removes the laggards;
an Empty group first waits `group.initial.rebalance.delay.ms`); the next generation goes
to CompletingRebalance with the leader holding every member's metadata; the leader's
SyncGroup assignment is stored durably and only then handed out, and the group is Stable.
Members are fenced by generation (ILLEGAL_GENERATION), membership (UNKNOWN_MEMBER_ID),
rebalance (REBALANCE_IN_PROGRESS) and static instance id (FENCED_INSTANCE_ID), and removed
when their session times out. Every coordinator change and rebalance goes to the event log.

Offsets, plain and transactional, are `self.offsets` (`broker.group.offsets`); the
transaction side ends a transaction's offsets through `complete_txn`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.coordination import PartitionOwner
from broker.errors import ErrorCode
from broker.event_log import EventLog
from broker.group.consumer_protocol import decode_assignment, is_subscription
from broker.group.offsets import GroupOffsets
from broker.group.placement import partition_for
from broker.group.records import group_key, group_value, offset_key
from broker.group.state import Group, GroupState, Member
from broker.group.store import LoadedPartition, OffsetsLog, commit_error, group_error

__all__ = ["GroupConfig", "GroupCoordinator", "JoinRequest", "JoinResult"]

log = logging.getLogger("broker.group")

CONSUMER_PROTOCOL = "consumer"
EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    GroupState.EMPTY,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.DEAD,
)


@dataclass(frozen=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    max_group_size: int = 2147483647
    max_metadata_bytes: int = 4096


@dataclass(frozen=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool


@dataclass(frozen=True)
class JoinResult:
    error: int
    member_id: str = ""
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


class GroupCoordinator(PartitionOwner):
    """Groups of the `__consumer_offsets` partitions this broker leads."""

    loading_event = "coordinator-loading"
    partition_field = "offsets_partition"
    epoch_field = "leader_epoch"

    store: OffsetsLog

    def __init__(
        self,
        broker_id: int,
        store: OffsetsLog,
        partition_count: Callable[[], int],
        config: GroupConfig,
        events: EventLog,
    ) -> None:
        super().__init__()
        self.broker_id = broker_id
        self.store = store
        self.partition_count = partition_count
        self.config = config
        self.events = events
        self.groups: dict[str, Group] = {}
        self.offsets = GroupOffsets(self.groups, store, self.owner_error, self.partition_of,
                                    self._schedule_expiry, config.max_metadata_bytes, events)

    # -- ownership (`broker.coordination`) ----------------------------------------------

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.partition_count())

    def _install(self, partition: int, epoch: int, loaded: LoadedPartition,
                 started: float) -> None:
        for group_id in sorted(loaded.group_ids()):
            record = loaded.groups.get(group_id)
            group = Group.from_record(record) if record is not None else Group(group_id)
            group.offsets = loaded.offsets.get(group_id, {})
            group.txn_offsets = loaded.pending_for(group_id)
            self.groups[group_id] = group
            for member in group.members.values():
                self._schedule_expiry(group, member)
        groups = sorted(loaded.group_ids())
        log.info("loaded offsets partition %d: %d groups in %.3f s", partition, len(groups),
                 time.monotonic() - started)
        self.events.write(
            "coordinator-loaded",
            offsets_partition=partition,
            leader_epoch=epoch,
            groups=groups,
            open_txn_producers=sorted(loaded.pending),
            seconds=round(time.monotonic() - started, 3),
        )

    def _unload(self, partition: int, epoch: int | None) -> None:
        """Unload the partition's groups: their members' pending joins and syncs fail with
        NOT_COORDINATOR."""
        unloaded = []
        for group_id, group in list(self.groups.items()):
            if self.partition_of(group_id) != partition:
                continue
            unloaded.append(group_id)
            self._cancel_timers(group)
            for member in group.members.values():
                _finish(member.join, JoinResult(ErrorCode.NOT_COORDINATOR))
                _finish(member.sync, (ErrorCode.NOT_COORDINATOR, b""))
            group.transition_to(DEAD)
            del self.groups[group_id]
        self.events.write("coordinator-unloaded", offsets_partition=partition,
                          groups=sorted(unloaded))

    # -- JoinGroup ----------------------------------------------------------------------

    async def join_group(self, request: JoinRequest) -> JoinResult:
        if not request.group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID, request.member_id)
        error = self.owner_error(request.group_id)
        if error:
            return JoinResult(error, request.member_id)
        config = self.config
        if not config.min_session_timeout_ms <= request.session_timeout_ms <= (
            config.max_session_timeout_ms
        ):
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, request.member_id)
        group = self.groups.get(request.group_id)
        if group is None:
            if request.member_id:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, request.member_id)
            group = self.groups[request.group_id] = Group(request.group_id)
        if group.state is DEAD:
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, request.member_id)
        if not group.supports(request.protocol_type, request.protocols) or (
            request.protocol_type == CONSUMER_PROTOCOL
            and not all(is_subscription(metadata) for _, metadata in request.protocols)
        ):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, request.member_id)
        if not request.member_id:
            return await self._join_unknown(group, request)
        return await self._join_known(group, request)

    async def _join_unknown(self, group: Group, request: JoinRequest) -> JoinResult:
        if len(group.members) + len(group.pending_members) >= self.config.max_group_size:
            return JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED)
        member_id = f"{request.client_id}-{uuid.uuid4()}"
        instance = request.group_instance_id
        if instance is not None and instance in group.static_members:
            return await self._replace_static_member(group, request, instance, member_id)
        if request.require_known_member_id and instance is None:
            group.pending_members.add(member_id)
            asyncio.get_running_loop().call_later(
                request.session_timeout_ms / 1000, self._expire_pending, group, member_id
            )
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id)
        return await self._add_and_rebalance(group, request, member_id)

    async def _join_known(self, group: Group, request: JoinRequest) -> JoinResult:
        member_id = request.member_id
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            return await self._add_and_rebalance(group, request, member_id)
        error = group.fence(member_id, request.group_instance_id)
        if error:
            return JoinResult(error, member_id)
        member = group.members[member_id]
        if group.state is PREPARING:
            return await self._rejoin(group, member, request, None)
        if group.state is COMPLETING:
            if member.matches(request.protocols):
                return self._join_result(group, member)
            return await self._rejoin(group, member, request, "metadata-changed")
        if group.state is STABLE:
            if member_id != group.leader_id and member.matches(request.protocols):
                return self._join_result(group, member)
            trigger = "leader-rejoined" if member.matches(request.protocols) else (
                "metadata-changed")
            return await self._rejoin(group, member, request, trigger)
        return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)

    async def _add_and_rebalance(self, group: Group, request: JoinRequest,
                                 member_id: str) -> JoinResult:
        member = _new_member(request, member_id)
        group.add(member)
        group.new_member_added = True
        return await self._await_join(group, member, "member-joined")

    async def _await_join(self, group: Group, member: Member, trigger: str) -> JoinResult:
        """`member` waits for the join phase: a rebalance starts unless one is under way."""
        member.join = asyncio.get_running_loop().create_future()
        if group.state is PREPARING:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, trigger)
        return await member.join

    async def _replace_static_member(self, group: Group, request: JoinRequest, instance: str,
                                     member_id: str) -> JoinResult:
        """A static member came back under a new member id: the old id is fenced, and a
        Stable group whose member's protocols did not change keeps its assignment."""
        old = group.members[group.static_members[instance]]
        was_leader = group.leader_id == old.member_id
        group.remove(old.member_id)
        _finish(old.join, JoinResult(ErrorCode.FENCED_INSTANCE_ID, old.member_id))
        _finish(old.sync, (ErrorCode.FENCED_INSTANCE_ID, b""))
        member = _new_member(request, member_id, old.assignment)
        group.add(member)
        if was_leader:
            group.leader_id = member_id
        if group.state is STABLE and old.matches(request.protocols) and not was_leader:
            self._schedule_expiry(group, member)
            return self._join_result(group, member)
        return await self._await_join(group, member, "static-member-replaced")

    async def _rejoin(self, group: Group, member: Member, request: JoinRequest,
                      trigger: str | None) -> JoinResult:
        member.protocols = list(request.protocols)
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        _finish(member.join, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        member.join = asyncio.get_running_loop().create_future()
        if trigger is not None:
            self._prepare_rebalance(group, trigger)
        else:
            self._maybe_complete_join(group)
        return await member.join

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        members = []
        if member.member_id == group.leader_id:
            protocol = group.protocol
            assert protocol is not None, "a group whose join completed has chosen a protocol"
            members = [
                (m.member_id, m.group_instance_id, m.metadata_for(protocol))
                for m in group.members.values()
            ]
        return JoinResult(
            ErrorCode.NONE,
            member.member_id,
            group.generation,
            group.protocol_type,
            group.protocol,
            group.leader_id or "",
            members,
        )

    def _expire_pending(self, group: Group, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._maybe_complete_join(group)

    # -- rebalance ----------------------------------------------------------------------

    def _prepare_rebalance(self, group: Group, trigger: str) -> None:
        if group.state is COMPLETING:
            for member in group.members.values():
                member.assignment = b""
                _finish(member.sync, (ErrorCode.REBALANCE_IN_PROGRESS, b""))
        was_empty = group.state is EMPTY
        group.transition_to(PREPARING)
        group.rebalance_trigger = trigger
        if group.join_timer is not None:
            group.join_timer.cancel()
        loop = asyncio.get_running_loop()
        timeout = group.rebalance_timeout_ms()
        delay = self.config.initial_rebalance_delay_ms
        if was_empty and delay > 0:
            first = min(delay, timeout)
            group.initial_delay_left_ms = max(timeout - first, 0)
            group.new_member_added = False
            group.join_timer = loop.call_later(first / 1000, self._initial_delay_over, group)
        else:
            group.initial_delay_left_ms = -1
            group.join_timer = loop.call_later(timeout / 1000, self._complete_join, group)
        log.info("group %s: rebalance (%s) from generation %d", group.group_id, trigger,
                 group.generation)
        self.events.write(
            "rebalance-start",
            group=group.group_id,
            generation=group.generation,
            trigger=trigger,
            members=sorted(group.members),
        )
        self._maybe_complete_join(group)

    def _initial_delay_over(self, group: Group) -> None:
        if group.state is not PREPARING:
            return
        if group.new_member_added and group.initial_delay_left_ms > 0:
            delay = min(self.config.initial_rebalance_delay_ms, group.initial_delay_left_ms)
            group.initial_delay_left_ms -= delay
            group.new_member_added = False
            group.join_timer = asyncio.get_running_loop().call_later(
                delay / 1000, self._initial_delay_over, group
            )
            return
        group.initial_delay_left_ms = -1
        self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state is PREPARING and group.initial_delay_left_ms < 0 and group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.state is not PREPARING:
            return
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        for member in list(group.members.values()):
            if not member.awaiting_join:
                group.remove(member.member_id)
                _finish(member.sync, (ErrorCode.UNKNOWN_MEMBER_ID, b""))
        group.generation += 1
        if not group.members:
            group.protocol = None
            group.transition_to(EMPTY)
            self.events.write("group-empty", group=group.group_id, generation=group.generation,
                              trigger=group.rebalance_trigger)
            asyncio.get_running_loop().create_task(self._store_group(group, group.generation))
            return
        group.protocol = group.select_protocol()
        group.transition_to(COMPLETING)
        for member in group.members.values():
            member.assignment = b""
            _finish(member.join, self._join_result(group, member))
            self._schedule_expiry(group, member)

    async def _store_group(self, group: Group, generation: int) -> int:
        record = group.to_record(int(time.time() * 1000))
        code = await self.store.append(
            self.partition_of(group.group_id), [(group_key(group.group_id), group_value(record))]
        )
        if code:
            log.warning("group %s generation %d: storing metadata failed: %s",
                        group.group_id, generation, ErrorCode(code).name)
        return group_error(code) if code else ErrorCode.NONE

    # -- SyncGroup ----------------------------------------------------------------------

    async def sync_group(self, group_id: str, generation: int, member_id: str,
                         instance_id: str | None, protocol_type: str | None,
                         protocol: str | None,
                         assignments: dict[str, bytes]) -> tuple[int, bytes]:
        error = self.owner_error(group_id)
        if error:
            return error, b""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, b""
        error = group.fence(member_id, instance_id)
        if error:
            return error, b""
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION, b""
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol is not None and protocol != group.protocol
        ):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL, b""
        member = group.members[member_id]
        if group.state is PREPARING:
            return ErrorCode.REBALANCE_IN_PROGRESS, b""
        if group.state is STABLE:
            return ErrorCode.NONE, member.assignment
        if group.state is not COMPLETING:
            return ErrorCode.UNKNOWN_MEMBER_ID, b""
        _finish(member.sync, (ErrorCode.REBALANCE_IN_PROGRESS, b""))
        member.sync = asyncio.get_running_loop().create_future()
        if member_id == group.leader_id:
            asyncio.get_running_loop().create_task(
                self._store_assignment(group, group.generation, assignments)
            )
        return await member.sync

    async def _store_assignment(self, group: Group, generation: int,
                                assignments: dict[str, bytes]) -> None:
        for member_id, member in group.members.items():
            member.assignment = assignments.get(member_id, b"")
        code = await self._store_group(group, generation)
        if group.state is not COMPLETING or group.generation != generation:
            return
        if code:
            for member in group.members.values():
                member.assignment = b""
                _finish(member.sync, (code, b""))
            self._prepare_rebalance(group, "store-failed")
            return
        group.transition_to(STABLE)
        for member in group.members.values():
            _finish(member.sync, (ErrorCode.NONE, member.assignment))
        log.info("group %s: stable at generation %d with %d members", group.group_id,
                 generation, len(group.members))
        self.events.write(
            "rebalance-complete",
            group=group.group_id,
            generation=generation,
            trigger=group.rebalance_trigger,
            leader=group.leader_id,
            protocol=group.protocol,
            members=sorted(group.members),
            assignment={
                m.member_id: decode_assignment(m.assignment) for m in group.members.values()
            },
        )

    # -- Heartbeat and LeaveGroup -------------------------------------------------------

    def heartbeat(self, group_id: str, generation: int, member_id: str,
                  instance_id: str | None) -> int:
        error = self.owner_error(group_id)
        if error:
            return error
        group = self.groups.get(group_id)
        if group is None or group.state is EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.fence(member_id, instance_id)
        if error:
            return error
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        self._schedule_expiry(group, group.members[member_id])
        if group.state is PREPARING:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave_group(self, group_id: str,
                    leaving: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """The group-level error and one error per (member id, instance id) leaving."""
        error = self.owner_error(group_id)
        if error:
            return error, [error] * len(leaving)
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(leaving)
        codes: list[int] = []
        for member_id, instance_id in leaving:
            if instance_id is not None and not member_id:
                member_id = group.static_members.get(instance_id, "")
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self._maybe_complete_join(group)
                codes.append(ErrorCode.NONE)
                continue
            error = group.fence(member_id, instance_id)
            if error:
                codes.append(error)
                continue
            self._remove_and_rebalance(group, group.members[member_id], "member-left")
            codes.append(ErrorCode.NONE)
        return ErrorCode.NONE, codes

    def _schedule_expiry(self, group: Group, member: Member) -> None:
        if member.expiry is not None:
            member.expiry.cancel()
        member.expiry = asyncio.get_running_loop().call_later(
            member.session_timeout_ms / 1000, self._session_expired, group, member
        )

    def _session_expired(self, group: Group, member: Member) -> None:
        if group.members.get(member.member_id) is not member or group.state is DEAD:
            return
        if member.awaiting_join or member.awaiting_sync:
            self._schedule_expiry(group, member)
            return
        log.info("group %s: member %s session expired", group.group_id, member.member_id)
        self._remove_and_rebalance(group, member, "session-expired")

    def _remove_and_rebalance(self, group: Group, member: Member, trigger: str) -> None:
        group.remove(member.member_id)
        _finish(member.join, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
        _finish(member.sync, (ErrorCode.UNKNOWN_MEMBER_ID, b""))
        self.events.write("member-removed", group=group.group_id, member=member.member_id,
                          generation=group.generation, trigger=trigger)
        if group.state in (STABLE, COMPLETING):
            self._prepare_rebalance(group, trigger)
        elif group.state is PREPARING:
            self._maybe_complete_join(group)

    def _cancel_timers(self, group: Group) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
        for member in group.members.values():
            if member.expiry is not None:
                member.expiry.cancel()

    # -- transactions -------------------------------------------------------------------

    def complete_txn(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker of `producer_id` is in offsets partition `offsets_partition`
        below its high watermark (called by WriteTxnMarkers): commit installs the
        producer's pending offsets of that partition's groups, abort drops them."""
        self.offsets.complete_txn(offsets_partition, producer_id, commit)

    # -- DescribeGroups, ListGroups, DeleteGroups ---------------------------------------

    def describe_group(self, group_id: str) -> tuple[int, Group | None]:
        error = self.owner_error(group_id)
        if error:
            return error, None
        return ErrorCode.NONE, self.groups.get(group_id)

    def list_groups(self) -> tuple[int, list[Group]]:
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.loading else ErrorCode.NONE
        return error, [g for g in self.groups.values() if g.state is not DEAD]

    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        results: dict[str, int] = {}
        for group_id in group_ids:
            results[group_id] = await self._delete_group(group_id)
        return results

    async def _delete_group(self, group_id: str) -> int:
        error = self.owner_error(group_id)
        if error:
            return error
        group = self.groups.get(group_id)
        if group is None or group.state is DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.state is not EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        tombstones: list[tuple[bytes, bytes | None]] = [
            (offset_key(group_id, *key), None) for key in group.offsets]
        tombstones.append((group_key(group_id), None))
        code = await self.store.append(self.partition_of(group_id), tombstones)
        if code:
            return commit_error(code)
        if self.groups.get(group_id) is group and group.state is EMPTY:
            group.transition_to(DEAD)
            del self.groups[group_id]
            self.events.write("group-deleted", group=group_id)
        return ErrorCode.NONE


def _new_member(request: JoinRequest, member_id: str, assignment: bytes = b"") -> Member:
    return Member(
        member_id,
        request.group_instance_id,
        request.client_id,
        request.client_host,
        request.rebalance_timeout_ms,
        request.session_timeout_ms,
        request.protocol_type,
        list(request.protocols),
        assignment,
    )


def _finish(future: asyncio.Future | None, result: object) -> None:
    if future is not None and not future.done():
        future.set_result(result)
