"""Client APIs of a running broker over the wire (kafka-python's codec as the client side):
ApiVersions and its v0 fallback, Metadata auto-creation, Produce/Fetch/ListOffsets error
codes, idempotent dedup, OffsetForLeaderEpoch; SIGTERM and duplicate broker.id."""

from __future__ import annotations

import asyncio
import socket
import struct
import subprocess
import sys
import time

import pytest
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

from broker.errors import ErrorCode
from broker.replica.client import BrokerConnection
from tests.support.batches import batch, decode
from tests.support.brokers import BrokerCluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def single(zookeeper, tmp_path_factory):
    with BrokerCluster(zookeeper.connect, tmp_path_factory.mktemp("api"), size=1) as cluster:
        yield cluster


def call(port: int, request, response_type, version: int):
    async def send():
        connection = BrokerConnection("127.0.0.1", port, "api-test")
        try:
            return await connection.send(request, response_type, version)
        finally:
            connection.close()

    return asyncio.run(send())


def ensure_topic(cluster: BrokerCluster, topic: str) -> None:
    port = cluster.brokers[1].port
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        response = call(port, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name=topic)], allow_auto_topic_creation=True), MetadataResponse, 8)
        topic_metadata = response.topics[0]
        if topic_metadata.error_code == 0 and all(p.leader_id == 1
                                                   for p in topic_metadata.partitions):
            return
        time.sleep(0.1)
    raise TimeoutError(topic)


def produce(port: int, topic: str, records: bytes, acks: int = -1, partition: int = 0):
    Topic = ProduceRequest.TopicProduceData
    request = ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[Topic(
        name=topic, partition_data=[Topic.PartitionProduceData(index=partition,
                                                               records=records)])])
    return call(port, request, ProduceResponse, 8).responses[0].partition_responses[0]


def test_api_versions_advertises_only_implemented_apis(single):
    response = call(single.brokers[1].port, ApiVersionsRequest(), ApiVersionsResponse, 3)
    versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert set(versions) == {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 22, 23, 24,
                             25, 26, 27, 28, 37, 42}
    assert versions[0][0] == 0
    assert versions[10] == (0, 4) and versions[11] == (0, 9)
    assert versions[28] == (0, 3)


def test_api_versions_unsupported_version_gets_v0_error_response(single):
    header = struct.pack(">hhih", 18, 99, 42, 4) + b"test"
    with socket.create_connection(("127.0.0.1", single.brokers[1].port), timeout=5) as sock:
        sock.sendall(struct.pack(">i", len(header) + 1) + header + b"\x00")
        size = struct.unpack(">i", sock.recv(4))[0]
        frame = b""
        while len(frame) < size:
            frame += sock.recv(size - len(frame))
    assert struct.unpack(">i", frame[:4])[0] == 42
    response = ApiVersionsResponse.decode(frame[4:], version=0)
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {k.api_key for k in response.api_keys} >= {0, 1, 18}


def test_produce_fetch_list_offsets_and_errors(single):
    port = single.brokers[1].port
    ensure_topic(single, "api")
    first = produce(port, "api", batch(5))
    assert first.error_code == 0 and first.base_offset == 0
    assert produce(port, "api", batch(1), partition=7).error_code == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(port, "api", batch(1), acks=2).error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert produce(port, "api", b"\x00" * 70).error_code in (ErrorCode.CORRUPT_MESSAGE,
                                                             ErrorCode.INVALID_RECORD)

    Topic = ListOffsetsRequest.ListOffsetsTopic
    for timestamp, expected in ((-2, 0), (-1, 5)):
        request = ListOffsetsRequest(replica_id=-1, topics=[Topic(name="api", partitions=[
            Topic.ListOffsetsPartition(partition_index=0, timestamp=timestamp)])])
        response = call(port, request, ListOffsetsResponse, 4)
        assert response.topics[0].partitions[0].offset == expected

    Fetch = FetchRequest.FetchTopic

    def fetch(epoch: int, offset: int = 0):
        request = FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, topics=[Fetch(
            topic="api", partitions=[Fetch.FetchPartition(
                partition=0, current_leader_epoch=epoch, fetch_offset=offset,
                partition_max_bytes=1 << 20)])])
        return call(port, request, FetchResponse, 11).responses[0].partitions[0]

    data = fetch(-1)
    assert data.error_code == 0 and data.high_watermark == 5 and data.records
    out_of_range = fetch(-1, offset=99)
    assert out_of_range.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert out_of_range.records == b"", "librdkafka rejects null records (MessageSetSize -1)"
    leader_epoch = call(port, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
        name="api")]), MetadataResponse, 8).topics[0].partitions[0].leader_epoch
    assert fetch(leader_epoch).error_code == 0
    assert fetch(leader_epoch + 1).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    if leader_epoch > 0:
        assert fetch(leader_epoch - 1).error_code == ErrorCode.FENCED_LEADER_EPOCH

    Epoch = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    response = call(port, OffsetForLeaderEpochRequest(replica_id=-1, topics=[Epoch(
        topic="api", partitions=[Epoch.OffsetForLeaderPartition(
            partition=0, current_leader_epoch=-1, leader_epoch=leader_epoch)])]),
        OffsetForLeaderEpochResponse, 3)
    result = response.topics[0].partitions[0]
    assert (result.error_code, result.leader_epoch, result.end_offset) == (0, leader_epoch, 5)


def test_idempotent_produce_dedups_and_rejects_gaps(single):
    port = single.brokers[1].port
    ensure_topic(single, "idempotent")
    init = call(port, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000),
                InitProducerIdResponse, 2)
    assert init.error_code == 0 and init.producer_id >= 0
    pid = init.producer_id
    records = batch(4, producer_id=pid, epoch=init.producer_epoch, sequence=0)
    first = produce(port, "idempotent", records)
    again = produce(port, "idempotent", records)
    assert first.error_code == again.error_code == 0
    assert again.base_offset == first.base_offset
    gap = produce(port, "idempotent", batch(1, producer_id=pid, epoch=0, sequence=10))
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    second = call(port, InitProducerIdRequest(transactional_id=None,
                                              transaction_timeout_ms=60000),
                  InitProducerIdResponse, 2)
    assert second.producer_id != pid


def test_read_committed_fetch_and_list_offsets_stop_at_the_lso(single):
    port = single.brokers[1].port
    ensure_topic(single, "txn-wire")
    produce(port, "txn-wire", batch(2))  # 0-1
    pid = 4242
    opened = produce(port, "txn-wire", batch(2, producer_id=pid, sequence=0, transactional=True))
    produce(port, "txn-wire", batch(1))  # 4
    assert opened.error_code == 0 and opened.base_offset == 2

    Fetch = FetchRequest.FetchTopic

    def fetch(isolation: int):
        request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, isolation_level=isolation,
                               topics=[Fetch(topic="txn-wire", partitions=[Fetch.FetchPartition(
                                   partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
        return call(port, request, FetchResponse, 11).responses[0].partitions[0]

    def latest(isolation: int) -> int:
        Topic = ListOffsetsRequest.ListOffsetsTopic
        request = ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[Topic(
            name="txn-wire", partitions=[Topic.ListOffsetsPartition(partition_index=0,
                                                                    timestamp=-1)])])
        return call(port, request, ListOffsetsResponse, 4).topics[0].partitions[0].offset

    committed, uncommitted = fetch(1), fetch(0)
    assert (committed.high_watermark, committed.last_stable_offset) == (5, 2)
    assert [o for o, _ in decode(committed.records)] == [0, 1]
    assert committed.aborted_transactions == []
    assert [o for o, _ in decode(uncommitted.records)] == [0, 1, 2, 3, 4]
    assert uncommitted.aborted_transactions is None and uncommitted.last_stable_offset == 2
    assert (latest(0), latest(1)) == (5, 2)

    Marker = WriteTxnMarkersRequest.WritableTxnMarker
    response = call(port, WriteTxnMarkersRequest(markers=[Marker(
        producer_id=pid, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
        topics=[Marker.WritableTxnMarkerTopic(name="txn-wire", partition_indexes=[0])])]),
        WriteTxnMarkersResponse, 1)
    assert response.markers[0].topics[0].partitions[0].error_code == 0
    committed = fetch(1)
    assert committed.last_stable_offset == committed.high_watermark == 6 == latest(1)
    assert [o for o, _ in decode(committed.records)] == [0, 1, 2, 3, 4, 5], "5: the marker"
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(pid, 2)]


def test_duplicate_broker_id_refuses_to_start(single, tmp_path):
    config = single.brokers[1].config_path.read_text().splitlines()
    replaced = []
    for line in config:
        if line.startswith("listeners="):
            line = "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"
        elif line.startswith("log.dirs="):
            line = f"log.dirs={tmp_path / 'data'}"
        replaced.append(line)
    path = tmp_path / "server.properties"
    path.write_text("\n".join(replaced) + "\n")
    result = subprocess.run([sys.executable, "-m", "broker", "--config", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "broker.id 1 is already registered" in result.stderr


def test_sigterm_moves_leadership_then_exits_0(zookeeper, tmp_path):
    with BrokerCluster(zookeeper.connect, tmp_path) as cluster:
        ensure_leader = cluster.brokers[1].port
        call(ensure_leader, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name="graceful")], allow_auto_topic_creation=True), MetadataResponse, 8)
        state = cluster.wait_for_state("graceful", 0, lambda s: len(s["isr"]) == 3)
        leader = state["leader"]
        assert cluster.terminate(leader, timeout=60) == 0
        moved = cluster.partition_state("graceful", 0)
        assert moved["leader"] != leader and moved["leader"] != -1
        assert any(e["event"] == "controlled-shutdown" for e in cluster.events())
        text = (cluster.brokers[leader].log_dir / "server.log").read_text()
        assert f"broker {leader} stopped" in text
