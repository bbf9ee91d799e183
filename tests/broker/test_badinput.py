"""Bad input: malformed, truncated, oversize and unsupported requests
get an error response or a closed connection, never a crashed or wedged broker; afterwards
a real client still produces and consumes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from tests.support.batches import batch
from tests.support.brokers import BrokerCluster
from tests.support.wire import exchange, frame

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

API_KEYS = [0, 1, 2, 3, 18, 19, 22, 23, 4, 10, 11, 99, -1]
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def broker(zookeeper, tmp_path_factory):
    with BrokerCluster(zookeeper.connect, tmp_path_factory.mktemp("badinput"), size=1) as cluster:
        yield cluster


def assert_alive(port: int) -> None:
    """A well-formed Metadata request on a fresh connection still gets an answer."""
    request = MetadataRequest[1](topics=[])
    request.with_header(correlation_id=77, client_id="probe")
    reply = exchange(port, bytes(request.encode(header=True, framed=True)), timeout=10)
    assert len(reply) >= 8 and struct.unpack(">i", reply[4:8])[0] == 77


@SETTINGS
@given(body=st.binary(max_size=300))
def test_random_frames(broker, body):
    port = broker.brokers[1].port
    exchange(port, frame(body), timeout=2)
    assert_alive(port)


@SETTINGS
@given(api_key=st.sampled_from(API_KEYS), version=st.integers(-2, 20),
       client=st.one_of(st.none(), st.text(max_size=20)), body=st.binary(max_size=200))
def test_valid_header_random_body(broker, api_key, version, client, body):
    port = broker.brokers[1].port
    client_bytes = b"\xff\xff" if client is None else \
        struct.pack(">h", len(client.encode())) + client.encode()
    header = struct.pack(">hhi", api_key, version, 1) + client_bytes
    exchange(port, frame(header + body), timeout=2)
    assert_alive(port)


@SETTINGS
@given(cut=st.integers(min_value=0, max_value=10_000), claim_extra=st.integers(1, 1000))
def test_truncated_requests(broker, cut, claim_extra):
    port = broker.brokers[1].port
    Topic = ProduceRequest.TopicProduceData
    request = ProduceRequest[8](acks=1, timeout_ms=1000, topic_data=[Topic(
        name="bad", partition_data=[Topic.PartitionProduceData(index=0, records=batch(5))])])
    request.with_header(correlation_id=5, client_id="truncated")
    encoded = bytes(request.encode(header=True))
    cut = min(cut, len(encoded))
    partial = encoded[:cut]
    exchange(port, struct.pack(">i", len(partial) + claim_extra) + partial, timeout=1)
    exchange(port, frame(partial), timeout=2)
    assert_alive(port)


@pytest.mark.parametrize("size", [-1, 0, 100 * 1024 * 1024 + 1, 2**31 - 1])
def test_oversize_or_negative_size_closes_connection(broker, size):
    port = broker.brokers[1].port
    assert exchange(port, struct.pack(">i", size) + b"x" * 100) == b""
    assert_alive(port)


def test_unsupported_version_of_other_api_closes(broker):
    port = broker.brokers[1].port
    header = struct.pack(">hhih", 3, 42, 9, 0)
    assert exchange(port, frame(header)) == b""
    assert_alive(port)


def test_real_client_still_works_after_bad_input(broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    port = broker.brokers[1].port
    for garbage in (b"\x00" * 3, frame(b"\xff" * 64), struct.pack(">i", 2**30)):
        exchange(port, garbage, timeout=1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    sent = [producer.send("after-bad-input", b"%d" % i) for i in range(100)]
    producer.flush(30)
    assert [f.get(10).offset for f in sent] == list(range(100))
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([TopicPartition("after-bad-input", 0)])
    assert [m.value for m in consumer] == [b"%d" % i for i in range(100)]
    consumer.close()
