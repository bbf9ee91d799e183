"""Consumer-group APIs: requests in, `broker.group.GroupCoordinator` calls, responses out.

FindCoordinator (group keys in `__consumer_offsets`, transactional ids in
`__transaction_state`),
JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, TxnOffsetCommit, OffsetFetch
(require_stable from v7), DescribeGroups, ListGroups and DeleteGroups, at the versions
`broker.server.protocol.APIS` advertises.
Fields a version lacks are taken as Kafka takes them (e.g. a v0 JoinGroup's rebalance
timeout is its session timeout).
"""

from __future__ import annotations

from dataclasses import replace

from kafka.protocol.admin import DeleteGroupsResponse, DescribeGroupsResponse, ListGroupsResponse
from kafka.protocol.consumer import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorResponse
from kafka.protocol.producer import TxnOffsetCommitResponse

from broker.control_plane import BrokerEndpoint
from broker.errors import ErrorCode
from broker.group.coordinator import JoinRequest
from broker.group.offsets import OffsetCommit, TxnOffsetCommit
from broker.group.state import GroupState

__all__ = [
    "handle_delete_groups",
    "handle_describe_groups",
    "handle_find_coordinator",
    "handle_heartbeat",
    "handle_join_group",
    "handle_leave_group",
    "handle_list_groups",
    "handle_offset_commit",
    "handle_offset_fetch",
    "handle_sync_group",
    "handle_txn_offset_commit",
]

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


def _instance(request, version: int, since: int) -> str | None:
    return request.group_instance_id if version >= since else None


# -- FindCoordinator ------------------------------------------------------------------------


async def handle_find_coordinator(context, request, version: int, header):
    keys = request.coordinator_keys if version >= 4 else [request.key]
    key_type = request.key_type if version >= 1 else GROUP_KEY_TYPE
    topics = {GROUP_KEY_TYPE: context.offsets_topic, TRANSACTION_KEY_TYPE: context.txn_topic}
    found: list[tuple[str, int, str | None, BrokerEndpoint | None]] = []
    for key in keys:
        if key_type not in topics or (key_type == TRANSACTION_KEY_TYPE and not key):
            found.append((key, ErrorCode.INVALID_REQUEST, f"no coordinator for key type "
                          f"{key_type} and key {key!r}", None))
            continue
        code, node = await topics[key_type].coordinator(key)
        found.append((key, code, None if node else ErrorCode(code).name, node))
    if version >= 4:
        return FindCoordinatorResponse(
            throttle_time_ms=0,
            coordinators=[
                FindCoordinatorResponse.Coordinator(
                    key=key,
                    node_id=node.broker_id if node else -1,
                    host=node.host if node else "",
                    port=node.port if node else -1,
                    error_code=code,
                    error_message=message,
                )
                for key, code, message, node in found
            ],
        )
    _, code, message, node = found[0]
    return FindCoordinatorResponse(
        throttle_time_ms=0,
        error_code=code,
        error_message=message,
        node_id=node.broker_id if node else -1,
        host=node.host if node else "",
        port=node.port if node else -1,
    )


# -- membership -----------------------------------------------------------------------------


async def handle_join_group(context, request, version: int, header):
    protocols = [(p.name, bytes(p.metadata)) for p in request.protocols]
    result = await context.groups.join_group(
        JoinRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            group_instance_id=_instance(request, version, 5),
            client_id=header.client_id or "",
            client_host="",
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=(
                request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms
            ),
            protocol_type=request.protocol_type,
            protocols=protocols,
            require_known_member_id=version >= 4,
        )
    )
    protocol = result.protocol
    if version < 7 and protocol is None:
        protocol = ""
    return JoinGroupResponse(
        throttle_time_ms=0,
        error_code=result.error,
        generation_id=result.generation,
        protocol_type=result.protocol_type,
        protocol_name=protocol,
        leader=result.leader_id,
        skip_assignment=False,
        member_id=result.member_id,
        members=[
            JoinGroupResponse.JoinGroupResponseMember(
                member_id=member_id, group_instance_id=instance, metadata=metadata
            )
            for member_id, instance, metadata in result.members
        ],
    )


async def handle_sync_group(context, request, version: int, header):
    code, assignment = await context.groups.sync_group(
        request.group_id,
        request.generation_id,
        request.member_id,
        _instance(request, version, 3),
        request.protocol_type if version >= 5 else None,
        request.protocol_name if version >= 5 else None,
        {a.member_id: bytes(a.assignment) for a in request.assignments},
    )
    group = context.groups.groups.get(request.group_id)
    return SyncGroupResponse(
        throttle_time_ms=0,
        error_code=code,
        protocol_type=group.protocol_type if group is not None and not code else None,
        protocol_name=group.protocol if group is not None and not code else None,
        assignment=assignment,
    )


async def handle_heartbeat(context, request, version: int, header):
    code = context.groups.heartbeat(
        request.group_id, request.generation_id, request.member_id, _instance(request, version, 3)
    )
    return HeartbeatResponse(throttle_time_ms=0, error_code=code)


async def handle_leave_group(context, request, version: int, header):
    if version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        leaving = [(request.member_id, None)]
    code, codes = context.groups.leave_group(request.group_id, leaving)
    if version < 3:
        code = code or codes[0]
    return LeaveGroupResponse(
        throttle_time_ms=0,
        error_code=code,
        members=[
            LeaveGroupResponse.MemberResponse(
                member_id=member_id, group_instance_id=instance, error_code=member_code
            )
            for (member_id, instance), member_code in zip(leaving, codes, strict=True)
        ],
    )


# -- offsets --------------------------------------------------------------------------------


def _commits(context, topics, version: int, epoch_since: int):
    """UNKNOWN_TOPIC_OR_PARTITION for the partitions this cluster lacks; the commits of
    the others."""
    cache = context.replicas.metadata
    results: dict[tuple[str, int], int] = {}
    commits: dict[tuple[str, int], OffsetCommit] = {}
    for topic in topics:
        for partition in topic.partitions:
            key = (topic.name, partition.partition_index)
            if cache.partition(*key) is None:
                results[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            commits[key] = OffsetCommit(
                partition.committed_offset,
                partition.committed_leader_epoch if version >= epoch_since else -1,
                partition.committed_metadata or "",
            )
    return results, commits


def _by_topic(results: dict[tuple[str, int], int], topic_class, partition_class) -> list:
    topics: dict[str, list] = {}
    for (name, index), code in results.items():
        topics.setdefault(name, []).append(
            partition_class(partition_index=index, error_code=code)
        )
    return [topic_class(name=name, partitions=parts) for name, parts in topics.items()]


async def handle_offset_commit(context, request, version: int, header):
    results, commits = _commits(context, request.topics, version, 6)
    if commits:
        results.update(
            await context.groups.offsets.commit(
                request.group_id,
                request.generation_id_or_member_epoch,
                request.member_id,
                _instance(request, version, 7),
                commits,
            )
        )
    Topic = OffsetCommitResponse.OffsetCommitResponseTopic
    return OffsetCommitResponse(
        throttle_time_ms=0,
        topics=_by_topic(results, Topic, Topic.OffsetCommitResponsePartition),
    )


async def handle_txn_offset_commit(context, request, version: int, header):
    results, commits = _commits(context, request.topics, version, 2)
    if commits:
        committer = TxnOffsetCommit(
            group_id=request.group_id,
            transactional_id=request.transactional_id,
            producer_id=request.producer_id,
            producer_epoch=request.producer_epoch,
        )
        if version >= 3:
            committer = replace(committer, generation=request.generation_id,
                                member_id=request.member_id,
                                instance_id=request.group_instance_id)
        results.update(await context.groups.offsets.commit_txn(committer, commits))
    if version < 2:  # clients before KAFKA-7296 do not retry a loading coordinator
        results = {key: ErrorCode.COORDINATOR_NOT_AVAILABLE
                   if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else code
                   for key, code in results.items()}
    Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    return TxnOffsetCommitResponse(
        throttle_time_ms=0,
        topics=_by_topic(results, Topic, Topic.TxnOffsetCommitResponsePartition),
    )


def _fetched(context, group_id: str, topics, require_stable: bool
             ) -> tuple[int, dict[str, list]]:
    """The group-level error and per topic (partition, offset or None, partition error):
    UNSTABLE_OFFSET_COMMIT, with no offset, for a partition whose commit is in flight or
    in an open transaction when the fetch requires stable offsets."""
    wanted = None
    if topics is not None:
        wanted = [(t.name, index) for t in topics for index in t.partition_indexes]
    code, committed = context.groups.offsets.fetch(group_id, wanted)
    if code and wanted is not None:
        committed = dict.fromkeys(wanted)
    unstable = context.groups.offsets.unstable(group_id, wanted) if require_stable else set()
    by_topic: dict[str, list] = {}
    for (name, index), offset in committed.items():
        if (name, index) in unstable:
            by_topic.setdefault(name, []).append((index, None, ErrorCode.UNSTABLE_OFFSET_COMMIT))
        else:
            by_topic.setdefault(name, []).append((index, offset, ErrorCode.NONE))
    return code, by_topic


async def handle_offset_fetch(context, request, version: int, header):
    require_stable = version >= 7 and request.require_stable
    if version >= 8:
        Group = OffsetFetchResponse.OffsetFetchResponseGroup
        Topic = Group.OffsetFetchResponseTopics
        Partition = Topic.OffsetFetchResponsePartitions
        groups = []
        for wanted in request.groups:
            code, by_topic = _fetched(context, wanted.group_id, wanted.topics, require_stable)
            groups.append(
                Group(
                    group_id=wanted.group_id,
                    error_code=code,
                    topics=[
                        Topic(name=name, partitions=[
                            _partition(Partition, index, offset, partition_code)
                            for index, offset, partition_code in parts
                        ])
                        for name, parts in by_topic.items()
                    ],
                )
            )
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    Topic = OffsetFetchResponse.OffsetFetchResponseTopic
    Partition = Topic.OffsetFetchResponsePartition
    code, by_topic = _fetched(context, request.group_id, request.topics, require_stable)
    return OffsetFetchResponse(
        throttle_time_ms=0,
        error_code=code,
        topics=[
            Topic(name=name, partitions=[
                _partition(Partition, index, offset, code if version < 2 else partition_code)
                for index, offset, partition_code in parts
            ])
            for name, parts in by_topic.items()
        ],
    )


def _partition(partition_class, index: int, offset, code: int):
    return partition_class(
        partition_index=index,
        committed_offset=offset.offset if offset is not None else -1,
        committed_leader_epoch=offset.leader_epoch if offset is not None else -1,
        metadata=offset.metadata if offset is not None else "",
        error_code=code,
    )


# -- administration -------------------------------------------------------------------------


async def handle_describe_groups(context, request, version: int, header):
    Described = DescribeGroupsResponse.DescribedGroup
    Member = Described.DescribedGroupMember
    described = []
    for group_id in request.groups:
        code, group = context.groups.describe_group(group_id)
        if code or group is None:
            described.append(
                Described(error_code=code, group_id=group_id,
                          group_state=GroupState.DEAD.value, protocol_type="", protocol_data="",
                          members=[], authorized_operations=None)
            )
            continue
        stable = group.state is GroupState.STABLE
        described.append(
            Described(
                error_code=ErrorCode.NONE,
                group_id=group_id,
                group_state=group.state.value,
                protocol_type=group.protocol_type or "",
                protocol_data=(group.protocol or "") if stable else "",
                members=[
                    Member(
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata_for(group.protocol) if stable else b"",
                        member_assignment=m.assignment if stable else b"",
                    )
                    for m in group.members.values()
                ],
                authorized_operations=None,
            )
        )
    return DescribeGroupsResponse(throttle_time_ms=0, groups=described)


async def handle_list_groups(context, request, version: int, header):
    code, groups = context.groups.list_groups()
    states = {s.lower() for s in request.states_filter} if version >= 4 else set()
    return ListGroupsResponse(
        throttle_time_ms=0,
        error_code=code,
        groups=[
            ListGroupsResponse.ListedGroup(
                group_id=g.group_id, protocol_type=g.protocol_type or "",
                group_state=g.state.value,
            )
            for g in groups
            if not states or g.state.value.lower() in states
        ],
    )


async def handle_delete_groups(context, request, version: int, header):
    results = await context.groups.delete_groups(list(request.groups_names))
    return DeleteGroupsResponse(
        throttle_time_ms=0,
        results=[
            DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=code)
            for group_id, code in results.items()
        ],
    )
