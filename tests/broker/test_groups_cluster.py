"""Consumer groups on a real cluster (ZooKeeper and three broker processes on loopback):
the offsets topic, durable commits, coordinator failover with its events, bad input,
compaction of `__consumer_offsets`, and Kafka's own DumpLogSegments reading our segments."""

from __future__ import annotations

import json
import struct
import subprocess
import time

import pytest
from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from broker import zk as zkpaths
from broker.errors import ErrorCode
from broker.group.placement import OFFSETS_TOPIC, partition_for
from broker.group.records import OffsetRecord, read_records
from harness.db.brokers import exchange
from harness.db.kafka.distribution import CACHE, DEFAULT_VERSION
from tests.support import requirements
from tests.support.brokers import BrokerCluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

RESPONSES = {
    response.__name__.removesuffix("Response"): response
    for response in (DeleteGroupsResponse, DescribeGroupsResponse, FindCoordinatorResponse,
                     HeartbeatResponse, JoinGroupResponse, OffsetCommitResponse,
                     OffsetFetchResponse, SyncGroupResponse)
}
OFFSETS_PARTITIONS = 3
SUBSCRIPTION = struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">i", -1)


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    properties = {
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
        "group.initial.rebalance.delay.ms": "0",
        "min.insync.replicas": "2",
        "offsets.commit.timeout.ms": "2000",
        "log.segment.bytes": "4096",
        "log.cleaner.backoff.ms": "500",
    }
    with BrokerCluster(zookeeper.connect, tmp_path_factory.mktemp("groups"),
                       properties=properties) as running:
        yield running


def call(port: int, request, timeout: float = 10.0):
    """Send one kafka-python request (a non-flexible version) to 127.0.0.1:`port`; its
    decoded response."""
    request.with_header(correlation_id=7, client_id="tests")
    response = RESPONSES[type(request).__name__.removesuffix("Request")]
    return response.decode(exchange("127.0.0.1", port, request, timeout),
                           version=request.version)


def coordinator_port(cluster: BrokerCluster, group: str, timeout: float = 30.0) -> int:
    """Ask any live broker for `group`'s coordinator until a live one is named; its port."""
    deadline = time.monotonic() + timeout
    live = {b.port for b in cluster.brokers.values() if b.alive}
    while True:
        for broker in cluster.brokers.values():
            if not broker.alive:
                continue
            try:
                response = call(broker.port, FindCoordinatorRequest[2](key=group, key_type=0))
            except OSError:
                continue
            if response.error_code == ErrorCode.NONE and response.port in live:
                return response.port
        if time.monotonic() > deadline:
            raise TimeoutError(f"no coordinator for {group!r}")
        time.sleep(0.2)


def broker_on(cluster: BrokerCluster, port: int) -> int:
    return next(b.broker_id for b in cluster.brokers.values() if b.port == port)


def join(port: int, group: str, member: str = "", metadata: bytes = SUBSCRIPTION,
         session_ms: int = 6000):
    """JoinGroup v5, joining again with the member id given by MEMBER_ID_REQUIRED."""
    response = _join(port, group, member, metadata, session_ms)
    if response.error_code == ErrorCode.MEMBER_ID_REQUIRED:
        response = _join(port, group, response.member_id, metadata, session_ms)
    return response


def _join(port: int, group: str, member: str, metadata: bytes, session_ms: int):
    return call(port, JoinGroupRequest[5](
        group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=3000,
        member_id=member, group_instance_id=None, protocol_type="consumer",
        protocols=[JoinGroupRequest[5].JoinGroupRequestProtocol(name="range",
                                                                metadata=metadata)]),
        timeout=15)


def sync(port: int, group: str, generation: int, member: str, assignments: dict[str, bytes]):
    Assignment = SyncGroupRequest[3].SyncGroupRequestAssignment
    return call(port, SyncGroupRequest[3](
        group_id=group, generation_id=generation, member_id=member, group_instance_id=None,
        assignments=[Assignment(member_id=m, assignment=a) for m, a in assignments.items()]),
        timeout=15)


def commit(port: int, group: str, generation: int, member: str, offsets: dict):
    Topic = OffsetCommitRequest[7].OffsetCommitRequestTopic
    Partition = Topic.OffsetCommitRequestPartition
    by_topic: dict[str, list] = {}
    for (topic, index), offset in offsets.items():
        by_topic.setdefault(topic, []).append(Partition(
            partition_index=index, committed_offset=offset, committed_leader_epoch=-1,
            committed_metadata=""))
    response = call(port, OffsetCommitRequest[7](
        group_id=group, generation_id_or_member_epoch=generation, member_id=member,
        group_instance_id=None,
        topics=[Topic(name=t, partitions=p) for t, p in by_topic.items()]), timeout=15)
    return {(t.name, p.partition_index): p.error_code
            for t in response.topics for p in t.partitions}


def fetch(port: int, group: str, partitions: list[tuple[str, int]]):
    Topic = OffsetFetchRequest[5].OffsetFetchRequestTopic
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    response = call(port, OffsetFetchRequest[5](group_id=group, topics=[
        Topic(name=t, partition_indexes=p) for t, p in by_topic.items()]))
    return response.error_code, {(t.name, p.partition_index): p.committed_offset
                                 for t in response.topics for p in t.partitions}


def stable_member(cluster: BrokerCluster, group: str) -> tuple[int, str, int]:
    """A one-member group made Stable through the raw protocol: (port, member, generation)."""
    port = coordinator_port(cluster, group)
    joined = join(port, group)
    assert joined.error_code == ErrorCode.NONE, joined
    synced = sync(port, group, joined.generation_id, joined.member_id,
                  {joined.member_id: b""})
    assert synced.error_code == ErrorCode.NONE
    return port, joined.member_id, joined.generation_id


def create_topic(cluster: BrokerCluster, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 3)], operation_timeout=30)[name].result()
    for partition in range(partitions):
        cluster.wait_for_state(name, partition, lambda s: len(s["isr"]) == 3)


def test_offsets_topic_is_created_compacted_and_groups_map_like_kafka(cluster):
    port = coordinator_port(cluster, "mapping")
    config = zkpaths.read_topic_config(cluster.zk, OFFSETS_TOPIC)
    assert config["cleanup.policy"] == "compact"
    assignment = zkpaths.read_topic_assignment(cluster.zk, OFFSETS_TOPIC)
    assert len(assignment) == OFFSETS_PARTITIONS
    assert all(len(replicas) == 3 for replicas in assignment.values())
    state, _ = zkpaths.read_partition_state(cluster.zk, OFFSETS_TOPIC,
                                            partition_for("mapping", OFFSETS_PARTITIONS))
    assert broker_on(cluster, port) == state.leader


def test_bad_input_gets_error_codes_and_leaves_the_group_intact(cluster):
    create_topic(cluster, "bad-input", 2)
    port, member, generation = stable_member(cluster, "bad")
    assert join(port, "bad", member="no-such-member").error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert join(port, "bad", metadata=b"\x00\x01\xff").error_code == (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    assert sync(port, "bad", generation, "no-such-member", {}).error_code == (
        ErrorCode.UNKNOWN_MEMBER_ID)
    unknown = coordinator_port(cluster, "unknown-group")
    assert sync(unknown, "unknown-group", 1, member, {}).error_code == (
        ErrorCode.UNKNOWN_MEMBER_ID)
    heartbeat = call(unknown, HeartbeatRequest[3](group_id="unknown-group", generation_id=1,
                                               member_id=member, group_instance_id=None))
    assert heartbeat.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert commit(port, "bad", generation, member, {("no-such-topic", 0): 1,
                                                    ("bad-input", 7): 1}) == {
        ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("bad-input", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert fetch(unknown, "unknown-group", [("bad-input", 0)]) == (
        ErrorCode.NONE, {("bad-input", 0): -1})
    described = call(unknown, DescribeGroupsRequest[3](groups=["unknown-group"],
                                                       include_authorized_operations=False))
    assert described.groups[0].group_state == "Dead"
    deleted = call(unknown, DeleteGroupsRequest[1](groups_names=["unknown-group"]))
    assert deleted.results[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    deleted = call(port, DeleteGroupsRequest[1](groups_names=["bad"]))
    assert deleted.results[0].error_code == ErrorCode.NON_EMPTY_GROUP
    # an oversized assignment is refused and the group rebalances instead of breaking
    rejoined = join(port, "bad", member=member)
    assert rejoined.error_code == ErrorCode.NONE
    oversized = sync(port, "bad", rejoined.generation_id, member, {member: b"x" * 1_200_000})
    assert oversized.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    again = join(port, "bad", member=member)
    assert again.error_code == ErrorCode.NONE and again.generation_id > rejoined.generation_id
    assert sync(port, "bad", again.generation_id, member, {member: b"ok"}).assignment == b"ok"
    assert commit(port, "bad", again.generation_id, member, {("bad-input", 0): 5}) == {
        ("bad-input", 0): ErrorCode.NONE}
    assert fetch(port, "bad", [("bad-input", 0)])[1] == {("bad-input", 0): 5}


def test_commit_is_answered_only_when_durable(cluster):
    create_topic(cluster, "durable", 1)
    port, member, generation = stable_member(cluster, "durable-group")
    assert commit(port, "durable-group", generation, member, {("durable", 0): 10}) == {
        ("durable", 0): ErrorCode.NONE}
    coordinator = broker_on(cluster, port)
    others = [b for b in cluster.brokers if b != coordinator]
    for broker_id in others:
        cluster.kill(broker_id)
    try:
        start = time.monotonic()
        errors = commit(port, "durable-group", generation, member, {("durable", 0): 20})
        assert errors[("durable", 0)] in (ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                          ErrorCode.REQUEST_TIMED_OUT), errors
        assert time.monotonic() - start < 10
        assert fetch(port, "durable-group", [("durable", 0)])[1] == {("durable", 0): 10}
    finally:
        for broker_id in others:
            cluster.start_broker(broker_id)
    deadline = time.monotonic() + 60
    while True:
        port = coordinator_port(cluster, "durable-group")
        errors = commit(port, "durable-group", generation, member, {("durable", 0): 30})
        if errors[("durable", 0)] == ErrorCode.NONE:
            break
        assert time.monotonic() < deadline, errors
        time.sleep(0.5)
    assert fetch(port, "durable-group", [("durable", 0)])[1] == {("durable", 0): 30}


def test_coordinator_failover_keeps_group_and_offsets_and_logs_it(cluster):
    create_topic(cluster, "failover", 1)
    port, member, generation = stable_member(cluster, "failover-group")
    assert commit(port, "failover-group", generation, member, {("failover", 0): 42}) == {
        ("failover", 0): ErrorCode.NONE}
    old = broker_on(cluster, port)
    cluster.kill(old)
    try:
        start = time.monotonic()
        new_port = coordinator_port(cluster, "failover-group")
        while True:
            code, offsets = fetch(new_port, "failover-group", [("failover", 0)])
            if code == ErrorCode.NONE:
                break
            assert code in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR)
            assert time.monotonic() - start < 20
            time.sleep(0.2)
            new_port = coordinator_port(cluster, "failover-group")
        assert offsets == {("failover", 0): 42}
        heartbeat = call(new_port, HeartbeatRequest[3](
            group_id="failover-group", generation_id=generation, member_id=member,
            group_instance_id=None))
        assert heartbeat.error_code == ErrorCode.NONE
        new = broker_on(cluster, new_port)
        assert new != old
        events = [json.loads(line) for line in
                  cluster.brokers[new].event_log.read_text().splitlines()]
        loaded = [e for e in events if e["event"] == "coordinator-loaded"
                  and "failover-group" in e["groups"]]
        assert loaded and loaded[-1]["broker_id"] == new
        old_events = [json.loads(line) for line in
                      cluster.brokers[old].event_log.read_text().splitlines() if line]
        completed = [e for e in old_events if e["event"] == "rebalance-complete"
                     and e["group"] == "failover-group"]
        assert completed[-1]["generation"] == generation
        assert completed[-1]["members"] == [member]
    finally:
        cluster.start_broker(old)


@requirements.kafka_jars()
def test_kafka_dump_log_segments_reads_our_offsets_records(cluster):
    create_topic(cluster, "dumped", 1)
    port, member, generation = stable_member(cluster, "dumped-group")
    assert commit(port, "dumped-group", generation, member, {("dumped", 0): 1234}) == {
        ("dumped", 0): ErrorCode.NONE}
    index = partition_for("dumped-group", OFFSETS_PARTITIONS)
    directory = cluster.brokers[broker_on(cluster, port)].log_dir / f"{OFFSETS_TOPIC}-{index}"
    segments = sorted(str(p) for p in directory.glob("*.log"))
    result = subprocess.run(
        ["java", "-cp", str(CACHE / DEFAULT_VERSION / "libs" / "*"),
         "kafka.tools.DumpLogSegments", "--offsets-decoder", "--files", *segments],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if "dumped-group" in line]
    assert any('"offset":1234' in line for line in lines), result.stdout[-3000:]
    assert any('"protocolType":"consumer"' in line for line in lines), result.stdout[-3000:]


def commits_on_disk(directory, group: str) -> int:
    """How many offset commit records of `group` the partition's segments hold. The log
    cleaner swaps segments while this reads them: a segment gone between the listing and
    its read makes the listing stale, and the count starts again."""
    while True:
        count = 0
        try:
            for segment in sorted(directory.glob("*.log")):
                records, _ = read_records(segment.read_bytes())
                count += sum(isinstance(r, OffsetRecord) and r.group == group for r in records)
        except FileNotFoundError:
            continue
        return count


def test_offsets_topic_is_compacted_and_reloads_after_cleaning(cluster):
    create_topic(cluster, "compacted", 1)
    port, member, generation = stable_member(cluster, "compacted-group")
    for offset in range(1, 301):
        assert commit(port, "compacted-group", generation, member,
                      {("compacted", 0): offset}) == {("compacted", 0): ErrorCode.NONE}
    leader = broker_on(cluster, port)
    index = partition_for("compacted-group", OFFSETS_PARTITIONS)
    directory = cluster.brokers[leader].log_dir / f"{OFFSETS_TOPIC}-{index}"
    deadline = time.monotonic() + 30
    while (on_disk := commits_on_disk(directory, "compacted-group")) > 60:
        assert time.monotonic() < deadline, f"{on_disk} of 300 commits still on disk"
        time.sleep(0.5)
    cluster.kill(leader)
    try:
        deadline = time.monotonic() + 30
        while True:
            code, offsets = fetch(coordinator_port(cluster, "compacted-group"),
                                  "compacted-group", [("compacted", 0)])
            if code == ErrorCode.NONE:
                break
            assert time.monotonic() < deadline, code
            time.sleep(0.2)
        assert offsets == {("compacted", 0): 300}
    finally:
        cluster.start_broker(leader)
