"""A consumer group's state as Kafka's classic coordinator keeps it: members, generation,
protocol, leader, committed offsets, and the explicit state machine

    Empty --join--> PreparingRebalance --all joined--> CompletingRebalance --leader's
    SyncGroup stored--> Stable --join, leave or expiry--> PreparingRebalance ...
    any state --deleted or unloaded--> Dead

`Group.transition_to` refuses any other move (`IllegalStateTransition`): a bug in the
coordinator shows up as an error, never as a silently corrupted group.

Offsets as Kafka's GroupMetadata keeps them: the committed ones, the partitions with a
plain commit in flight, and per producer id the offsets of its open transaction, which
become committed when its commit marker arrives. Every offset knows where its batch is in
the log, and an offset never replaces one written later in the log.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum

from broker.errors import ErrorCode
from broker.group.records import GroupRecord, MemberRecord

__all__ = [
    "CommittedOffset",
    "Group",
    "GroupState",
    "IllegalStateTransition",
    "Member",
    "install",
]


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# target state -> the states it may be entered from (Kafka's GroupState.validPreviousStates)
VALID_PREVIOUS = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {
        GroupState.EMPTY,
        GroupState.STABLE,
        GroupState.COMPLETING_REBALANCE,
    },
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.DEAD: set(GroupState),
}


class IllegalStateTransition(RuntimeError):
    """The coordinator asked for a move the state machine does not have."""


@dataclass(frozen=True)
class CommittedOffset:
    """An offset and where its record's batch starts in the offsets log (-1: not there)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    log_offset: int = -1


def install(offsets: dict[tuple[str, int], CommittedOffset], key: tuple[str, int],
            offset: CommittedOffset) -> None:
    """Make `offset` the committed offset of `key` in `offsets` unless the one there was
    written later in the log (Kafka's olderThan)."""
    current = offsets.get(key)
    if current is None or current.log_offset <= offset.log_offset:
        offsets[key] = offset


@dataclass(eq=False)
class Member:
    """One member; `join` and `sync` are the futures its pending JoinGroup and SyncGroup
    responses wait on, `expiry` its session timer."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join: asyncio.Future | None = None
    sync: asyncio.Future | None = None
    expiry: asyncio.TimerHandle | None = None

    @property
    def awaiting_join(self) -> bool:
        return self.join is not None and not self.join.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync is not None and not self.sync.done()

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(protocol)

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)
    static_members: dict[str, str] = field(default_factory=dict)
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    commits_in_flight: Counter[tuple[str, int]] = field(default_factory=Counter)
    txn_offsets: dict[int, dict[tuple[str, int], CommittedOffset]] = field(default_factory=dict)
    join_timer: asyncio.TimerHandle | None = None
    initial_delay_left_ms: int = -1
    new_member_added: bool = False
    rebalance_trigger: str = ""

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, target: GroupState) -> None:
        if self.state not in VALID_PREVIOUS[target]:
            raise IllegalStateTransition(
                f"group {self.group_id!r}: {self.state.value} -> {target.value} is not allowed"
            )
        self.state = target

    # -- members ------------------------------------------------------------------------

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.expiry is not None:
            member.expiry.cancel()
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def fence(self, member_id: str, instance_id: str | None) -> int:
        """NONE if `member_id` (and static `instance_id`) is a current member, else
        UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID (Kafka's validateCurrentMember)."""
        if instance_id is not None:
            known = self.static_members.get(instance_id)
            if known is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols ----------------------------------------------------------------------

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member with these protocols may join (Kafka's supportsProtocols)."""
        names = {name for name, _ in protocols}
        if not protocol_type or not names:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        return bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        common = {name for name, _ in members[0].protocols}
        for member in members[1:]:
            common &= {name for name, _ in member.protocols}
        return common

    def select_protocol(self) -> str:
        """The protocol every member supports with the most first preferences among them."""
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter()
        order: list[str] = []
        for member in self.members.values():
            choice = next(name for name, _ in member.protocols if name in candidates)
            votes[choice] += 1
            if choice not in order:
                order.append(choice)
        return max(order, key=lambda name: votes[name])

    # -- offsets ------------------------------------------------------------------------

    def is_unstable(self, key: tuple[str, int]) -> bool:
        """A commit of `key` is in flight or in an open transaction (Kafka's
        hasPendingOffsetCommitsForTopicPartition)."""
        return self.commits_in_flight[key] > 0 or any(
            key in offsets for offsets in self.txn_offsets.values()
        )

    def complete_txn(self, producer_id: int, commit: bool) -> list[tuple[str, int]]:
        """End `producer_id`'s open transaction: commit installs its offsets, abort drops
        them; the partitions it held."""
        pending = self.txn_offsets.pop(producer_id, {})
        if commit:
            for key, offset in pending.items():
                install(self.offsets, key, offset)
        return sorted(pending)

    # -- persistence --------------------------------------------------------------------

    def to_record(self, timestamp_ms: int) -> GroupRecord:
        members = tuple(
            MemberRecord(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata_for(self.protocol) if self.protocol else b"",
                m.assignment,
            )
            for m in self.members.values()
        )
        return GroupRecord(
            self.group_id,
            self.protocol_type or "",
            self.generation,
            self.protocol,
            self.leader_id,
            timestamp_ms,
            members,
        )

    @classmethod
    def from_record(cls, record: GroupRecord) -> Group:
        """A group as the log last saved it: Stable with its members, or Empty."""
        group = cls(
            record.group,
            generation=record.generation,
            protocol_type=record.protocol_type or None,
            protocol=record.protocol,
        )
        for saved in record.members:
            member = Member(
                saved.member_id,
                saved.group_instance_id,
                saved.client_id,
                saved.client_host,
                saved.rebalance_timeout_ms,
                saved.session_timeout_ms,
                record.protocol_type,
                [(record.protocol or "", saved.subscription)],
                saved.assignment,
            )
            group.add(member)
        group.leader_id = record.leader if record.leader in group.members else group.leader_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        return group
