"""Fuzzed requests against a live broker on loopback: for every API and version the broker
advertises in ApiVersions, a valid request built with kafka-python is truncated and/or has
1 to 3 bits flipped, and sent. After each one no topic was created, no partition's high
watermark or log end offset moved, the broker runs and its log holds no traceback; at the
end kafka-python and confluent-kafka still produce and consume.

Which mutated frames may legitimately act: a truncated frame never (a request's lengths
come before its bytes, so a proper prefix of a valid body cannot parse exactly), so pure
truncation mutates "sharp" requests, ones that would create a topic or append if accepted.
A bit flip can turn a valid request into another valid one, so flipped frames mutate
"robust" requests: names of absent topics start with four illegal characters (no three
flips, nor a shortened length prefix, make them legal), and the rest only read. Group and
transaction requests name absent groups, transactional ids and topics the same way;
`__consumer_offsets` and `__transaction_state` are created before fuzzing, as the first
FindCoordinator of each kind would.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
)
from kafka.protocol.consumer import (
    FetchRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetForLeaderEpochRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    MetadataRequest,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)

from tests.support.batches import make_batch, values_of
from tests.support.brokers import BrokerCluster
from tests.support.wire import exchange, request_frame

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

EXAMPLES = 500
DATA = "fuzz-data"  # the one topic the test creates on purpose
SEEDED = 10  # records in DATA before fuzzing
RECORDS = make_batch(values_of(3, "fuzzed"))
ABSENT = "!!!!"  # prefix of topic names that must never exist


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with BrokerCluster(zookeeper.connect, tmp_path_factory.mktemp("fuzz"), size=1,
                       properties={"group.initial.rebalance.delay.ms": "0",
                                   "offsets.topic.num.partitions": "2",
                                   "transaction.state.log.num.partitions": "2",
                                   "transaction.state.log.min.isr": "1"}) as cluster:
        yield cluster


# -- valid requests, per API key: build(version, sharp) -------------------------------------


def produce(version: int, sharp: bool):
    Topic = ProduceRequest.TopicProduceData
    name = DATA if sharp else ABSENT + "produce"
    return ProduceRequest[version](
        transactional_id=None, acks=1, timeout_ms=1000,
        topic_data=[Topic(name=name, partition_data=[
            Topic.PartitionProduceData(index=0, records=RECORDS)])])


def fetch(version: int, sharp: bool):
    Topic = FetchRequest.FetchTopic
    return FetchRequest[version](
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 16, isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[Topic(topic=DATA, partitions=[Topic.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 16)])])


def list_offsets(version: int, sharp: bool):
    Topic = ListOffsetsRequest.ListOffsetsTopic
    return ListOffsetsRequest[version](
        replica_id=-1, isolation_level=0, topics=[Topic(name=DATA, partitions=[
            Topic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                       timestamp=-1)])])


def metadata(version: int, sharp: bool):
    # v0-v3 end with the name: most cuts fall inside it (names cut to `f`, `fu`, `fuz`)
    name = ("fuzz-metadata-" if sharp else ABSENT) + "abcdefghijklmnopqrstuvwxyz"
    Topic = MetadataRequest.MetadataRequestTopic
    return MetadataRequest[version](
        topics=[Topic(name=name)], allow_auto_topic_creation=True,
        include_cluster_authorized_operations=False, include_topic_authorized_operations=False)


def api_versions(version: int, sharp: bool):
    return ApiVersionsRequest[version](client_software_name="kchaos-fuzz",
                                       client_software_version="1.0")


def create_topics(version: int, sharp: bool):
    Topic = CreateTopicsRequest.CreatableTopic
    name = "fuzz-created" if sharp else ABSENT + "created"
    return CreateTopicsRequest[version](
        topics=[Topic(name=name, num_partitions=1, replication_factor=1, assignments=[],
                      configs=[])], timeout_ms=0, validate_only=False)


def init_producer_id(version: int, sharp: bool):
    return InitProducerIdRequest[version](transactional_id=None, transaction_timeout_ms=1000,
                                          producer_id=-1, producer_epoch=-1)


def offset_for_leader_epoch(version: int, sharp: bool):
    Topic = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    return OffsetForLeaderEpochRequest[version](
        replica_id=-1, topics=[Topic(topic=DATA, partitions=[Topic.OffsetForLeaderPartition(
            partition=0, current_leader_epoch=-1, leader_epoch=0)])])


GROUP = ABSENT + "group"
SUBSCRIPTION = struct.pack(">hih", 0, 1, 4) + b"!!!!" + struct.pack(">i", -1)


def offset_commit(version: int, sharp: bool):
    Topic = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest[version](
        group_id="fuzz-group" if sharp else GROUP, generation_id_or_member_epoch=-1,
        member_id="", group_instance_id=None, retention_time_ms=-1,
        topics=[Topic(name=DATA if sharp else ABSENT + "commit", partitions=[
            Topic.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                               committed_leader_epoch=-1, commit_timestamp=-1,
                                               committed_metadata="")])])


def txn_offset_commit(version: int, sharp: bool):
    Topic = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    return TxnOffsetCommitRequest[version](
        transactional_id="fuzz-txn", group_id="fuzz-group" if sharp else GROUP, producer_id=1,
        producer_epoch=0, generation_id=-1, member_id="", group_instance_id=None,
        topics=[Topic(name=DATA if sharp else ABSENT + "txn-commit", partitions=[
            Topic.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                  committed_leader_epoch=-1,
                                                  committed_metadata="")])])


TXN = ABSENT + "txn"


def add_partitions_to_txn(version: int, sharp: bool):
    Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    return AddPartitionsToTxnRequest[version](
        v3_and_below_transactional_id=TXN, v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=[Topic(name=DATA if sharp else ABSENT + "txn-topic",
                                   partitions=[0])])


def add_offsets_to_txn(version: int, sharp: bool):
    return AddOffsetsToTxnRequest[version](transactional_id=TXN, producer_id=1, producer_epoch=0,
                                           group_id=GROUP)


def end_txn(version: int, sharp: bool):
    return EndTxnRequest[version](transactional_id=TXN, producer_id=1, producer_epoch=0,
                                  committed=True)


def write_txn_markers(version: int, sharp: bool):
    Marker = WriteTxnMarkersRequest.WritableTxnMarker
    return WriteTxnMarkersRequest[version](markers=[Marker(
        producer_id=1, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
        topics=[Marker.WritableTxnMarkerTopic(name=DATA if sharp else ABSENT + "marker",
                                              partition_indexes=[0])])])


def offset_fetch(version: int, sharp: bool):
    if version >= 8:
        Group = OffsetFetchRequest.OffsetFetchRequestGroup
        return OffsetFetchRequest[version](require_stable=True, groups=[Group(
            group_id=GROUP, member_id=None, member_epoch=-1, topics=None)])
    return OffsetFetchRequest[version](group_id=GROUP, topics=None, require_stable=True)


def find_coordinator(version: int, sharp: bool):
    return FindCoordinatorRequest[version](key=GROUP, key_type=0, coordinator_keys=[GROUP])


def join_group(version: int, sharp: bool):
    Protocol = JoinGroupRequest.JoinGroupRequestProtocol
    return JoinGroupRequest[version](
        group_id=GROUP, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
        group_instance_id=None, protocol_type="consumer", reason=None,
        protocols=[Protocol(name="range", metadata=SUBSCRIPTION)])


def heartbeat(version: int, sharp: bool):
    return HeartbeatRequest[version](group_id=GROUP, generation_id=1, member_id="m",
                                     group_instance_id=None)


def leave_group(version: int, sharp: bool):
    Member = LeaveGroupRequest.MemberIdentity
    return LeaveGroupRequest[version](group_id=GROUP, member_id="m", members=[
        Member(member_id="m", group_instance_id=None, reason=None)])


def sync_group(version: int, sharp: bool):
    Assignment = SyncGroupRequest.SyncGroupRequestAssignment
    return SyncGroupRequest[version](
        group_id=GROUP, generation_id=1, member_id="m", group_instance_id=None,
        protocol_type="consumer", protocol_name="range",
        assignments=[Assignment(member_id="m", assignment=b"")])


def describe_groups(version: int, sharp: bool):
    return DescribeGroupsRequest[version](groups=[GROUP], include_authorized_operations=False)


def list_groups(version: int, sharp: bool):
    return ListGroupsRequest[version](states_filter=[], types_filter=[])


def create_partitions(version: int, sharp: bool):
    Topic = CreatePartitionsRequest.CreatePartitionsTopic
    return CreatePartitionsRequest[version](
        topics=[Topic(name=DATA if sharp else ABSENT + "grown", count=2, assignments=None)],
        timeout_ms=0, validate_only=False)


def delete_groups(version: int, sharp: bool):
    return DeleteGroupsRequest[version](groups_names=["fuzz-group" if sharp else GROUP])


BUILDERS = {0: produce, 1: fetch, 2: list_offsets, 3: metadata, 8: offset_commit,
            9: offset_fetch, 10: find_coordinator, 11: join_group, 12: heartbeat,
            13: leave_group, 14: sync_group, 15: describe_groups, 16: list_groups,
            18: api_versions, 19: create_topics, 22: init_producer_id,
            23: offset_for_leader_epoch, 24: add_partitions_to_txn, 25: add_offsets_to_txn,
            26: end_txn, 27: write_txn_markers, 28: txn_offset_commit,
            37: create_partitions, 42: delete_groups}


# -- mutations ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    api_key: int
    version: int
    cut: int | None  # bytes kept of header + body
    bits: tuple[int, ...]  # flipped bit positions in the kept bytes
    claim_whole: bool  # the size prefix claims the uncut length
    payload: bytes


@st.composite
def cases(draw, pairs: list[tuple[int, int]]) -> Case:
    api_key, version = draw(st.sampled_from(pairs))
    mode = draw(st.sampled_from(["truncate", "flip", "truncate+flip"]))
    whole = request_frame(BUILDERS[api_key](version, mode == "truncate"), correlation_id=version,
                          client_id="fuzz")
    kept = bytearray(whole)
    cut = None
    if "truncate" in mode:
        cut = len(whole) - draw(st.integers(1, len(whole)))  # favours dropping few bytes
        del kept[cut:]
    bits: tuple[int, ...] = ()
    if "flip" in mode and kept:
        bits = tuple(draw(st.lists(st.integers(0, len(kept) * 8 - 1), min_size=1, max_size=3,
                                   unique=True)))
        for bit in bits:
            kept[bit // 8] ^= 0x80 >> (bit % 8)
    claim_whole = cut is not None and draw(st.booleans())
    size = len(whole) if claim_whole else len(kept)
    return Case(api_key, version, cut, bits, claim_whole, struct.pack(">i", size) + bytes(kept))


# -- observation ----------------------------------------------------------------------------


def advertised(port: int) -> list[tuple[int, int]]:
    whole = request_frame(ApiVersionsRequest[0](), correlation_id=1, client_id="fuzz")
    reply = exchange(port, struct.pack(">i", len(whole)) + whole, timeout=5)
    response = ApiVersionsResponse.decode(reply[8:], version=0)
    assert response.error_code == 0
    return [(api.api_key, version) for api in response.api_keys
            for version in range(api.min_version, api.max_version + 1)]


def offsets(port: int, partitions: list[tuple[str, int]]) -> dict:
    """(high watermark, log end offset) of each partition, as ListOffsets reports them."""
    result = {}
    for replica_id in (-1, 0):  # a consumer sees the high watermark, a replica the LEO
        Topic = ListOffsetsRequest.ListOffsetsTopic
        request = ListOffsetsRequest[1](replica_id=replica_id, topics=[
            Topic(name=name, partitions=[Topic.ListOffsetsPartition(partition_index=p,
                                                                     timestamp=-1)])
            for name, p in partitions])
        whole = request_frame(request, correlation_id=2, client_id="fuzz-check")
        reply = exchange(port, struct.pack(">i", len(whole)) + whole, timeout=5)
        response = ListOffsetsResponse.decode(reply[8:], version=1)
        for topic in response.topics:
            for part in topic.partitions:
                assert part.error_code == 0, (topic.name, part)
                result.setdefault((topic.name, part.partition_index), []).append(part.offset)
    return result


class LogWatch:
    """The text the broker's log files gained since the last call."""

    def __init__(self, paths) -> None:
        self.paths = list(paths)
        self.seen = {path: 0 for path in self.paths}

    def new_text(self) -> str:
        text = ""
        for path in self.paths:
            if path.exists():
                with open(path, "rb") as f:
                    f.seek(self.seen[path])
                    chunk = f.read()
                self.seen[path] += len(chunk)
                text += chunk.decode("utf-8", "replace")
        return text


def produce_and_consume(cluster: BrokerCluster, values: list[bytes]) -> None:
    """kafka-python produces `values` to DATA; both clients then read all of DATA."""
    from confluent_kafka import Consumer, TopicPartition
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition

    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    sent = [producer.send(DATA, value) for value in values]
    producer.flush(30)
    offsets_sent = [f.get(10).offset for f in sent]
    producer.close()
    total = offsets_sent[-1] + 1
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([KafkaTopicPartition(DATA, 0)])
    got = [m.value for m in consumer]
    consumer.close()
    assert len(got) == total and got[-len(values):] == values
    confluent = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused",
                          "enable.auto.commit": False})
    try:
        confluent.assign([TopicPartition(DATA, 0, 0)])
        read: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(read) < total and time.monotonic() < deadline:
            message = confluent.poll(0.5)
            if message is not None and message.error() is None:
                read.append(message.value())
        assert read == got
    finally:
        confluent.close()


def create_offsets_topic(cluster: BrokerCluster) -> None:
    """A real group consumer commits once: `__consumer_offsets` exists and is led."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "fuzz-group",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([DATA])
        deadline = time.monotonic() + 60
        while (message := consumer.poll(0.5)) is None or message.error() is not None:
            assert time.monotonic() < deadline, "the group consumer never got a record"
        consumer.commit(message=message, asynchronous=False)
    finally:
        consumer.close()


def create_transaction_topic(cluster: BrokerCluster) -> None:
    """A real transactional producer initialises: `__transaction_state` exists and is led."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap,
                         "transactional.id": "fuzz-txn-init"})
    producer.init_transactions(60)
    producer.flush(5)


# -- the test -------------------------------------------------------------------------------


def test_fuzzed_requests_are_never_acted_on(cluster):
    broker = cluster.brokers[1]
    port = broker.port
    seeded = [b"seed-%d" % i for i in range(SEEDED)]
    produce_and_consume(cluster, seeded)
    pairs = advertised(port)
    assert {key for key, _ in pairs} == set(BUILDERS), "a builder per advertised API"
    create_offsets_topic(cluster)
    create_transaction_topic(cluster)
    topics = set(cluster.zk.get_children("/brokers/topics"))
    partitions = [(DATA, 0)]
    assert topics == {DATA, "__consumer_offsets", "__transaction_state"}
    before = offsets(port, partitions)
    assert before == {(DATA, 0): [SEEDED, SEEDED]}
    logs = LogWatch([broker.directory / "stdout.log", broker.log_dir / "server.log"])
    logs.new_text()
    started = time.monotonic()

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              phases=[Phase.explicit, Phase.generate],  # no shrinking: bounded time
              suppress_health_check=list(HealthCheck))
    @given(case=cases(pairs))
    def send(case: Case) -> None:
        exchange(port, case.payload, timeout=1)
        assert broker.alive, cluster.tail(1)
        assert set(cluster.zk.get_children("/brokers/topics")) == topics, case
        assert offsets(port, partitions) == before, case
        text = logs.new_text()
        assert "Traceback" not in text, (case, text[-3000:])

    send()
    elapsed = time.monotonic() - started
    print(f"{EXAMPLES} fuzzed requests over {len(pairs)} API versions in {elapsed:.1f} s")
    produce_and_consume(cluster, [b"after-%d" % i for i in range(20)])
    assert "Traceback" not in logs.new_text()
