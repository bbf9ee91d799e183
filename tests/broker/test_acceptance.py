"""Acceptance of the broker: real ZooKeeper, three broker processes,
real Kafka clients (confluent-kafka, kafka-python, aiokafka) on loopback."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import struct
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker import control_plane, zk
from broker.control_plane import codec
from tests.support.brokers import BrokerCluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

RECORDS = 10_000


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with BrokerCluster(zookeeper.connect, tmp_path_factory.mktemp("acceptance")) as running:
        yield running


def create_topic(cluster: BrokerCluster, name: str, partitions: int = 1, replication: int = 3,
                 config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, partitions, replication, config=config or {})],
                        operation_timeout=30)[name].result()
    for partition in range(partitions):
        cluster.wait_for_state(name, partition, lambda s: len(s["isr"]) == replication)


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0
             ) -> dict[int, list[tuple[int, bytes]]]:
    """Every record below the high watermark of each partition: partition -> [(offset, value)]."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "acceptance-reader",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        result: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any(len(result[p]) < ends[p] for p in result) and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error() is None:
                    result[message.partition()].append((message.offset(), message.value()))
        return result
    finally:
        consumer.close()


# -- three clients, 10,000 records each -------------------------------------------------

def test_confluent_kafka_round_trip(cluster):
    create_topic(cluster, "confluent", partitions=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    acked: list[tuple[int, int, bytes]] = []

    def delivered(error, message):
        assert error is None, error
        acked.append((message.partition(), message.offset(), message.value()))

    for i in range(RECORDS):
        producer.produce("confluent", b"c%d" % i, partition=i % 3, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert len(acked) == RECORDS
    stored = read_all(cluster.bootstrap, "confluent", 3)
    assert sum(len(v) for v in stored.values()) == RECORDS
    for partition, offset, value in acked:
        assert stored[partition][offset] == (offset, value)
    for partition, records in stored.items():
        values = [int(v[1:]) for _, v in records]
        assert values == sorted(values) and all(v % 3 == partition for v in values)


def test_kafka_python_round_trip(cluster):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition

    create_topic(cluster, "kafka-python", partitions=2)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5)
    futures = [producer.send("kafka-python", b"k%d" % i, partition=i % 2) for i in range(RECORDS)]
    producer.flush(60)
    metadata = [f.get(timeout=30) for f in futures]
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000)
    consumer.assign([KafkaTopicPartition("kafka-python", p) for p in range(2)])
    got = {(m.partition, m.offset): m.value for m in consumer}
    consumer.close()
    assert len(got) == RECORDS
    for i, record in enumerate(metadata):
        assert got[(record.partition, record.offset)] == b"k%d" % i


def test_aiokafka_round_trip(cluster):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as AioTopicPartition

    create_topic(cluster, "aiokafka", partitions=2)

    async def scenario() -> tuple[list, dict]:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all",
                                    linger_ms=5)
        await producer.start()
        try:
            futures = [await producer.send("aiokafka", b"a%d" % i, partition=i % 2)
                       for i in range(RECORDS)]
            metadata = await asyncio.gather(*futures)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        got = {}
        try:
            consumer.assign([AioTopicPartition("aiokafka", p) for p in range(2)])
            deadline = time.monotonic() + 30
            while len(got) < RECORDS and time.monotonic() < deadline:
                for tp, messages in (await consumer.getmany(timeout_ms=1000)).items():
                    for message in messages:
                        got[(tp.partition, message.offset)] = message.value
        finally:
            await consumer.stop()
        return metadata, got

    metadata, got = asyncio.run(scenario())
    assert len(got) == RECORDS
    for i, record in enumerate(metadata):
        assert got[(record.partition, record.offset)] == b"a%d" % i


# -- controller failover --------------------------------------------------------------

def send_control_request(port: int, request) -> object:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(control_plane.encode_request(request, 7))
        size = struct.unpack(">i", _read_exactly(sock, 4))[0]
        frame = _read_exactly(sock, size)
    return control_plane.decode_response(codec.LEADER_AND_ISR, frame)[1]


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def test_controller_kill_elects_higher_epoch_and_fences_old_epoch(cluster):
    old_id, old_epoch = cluster.wait_for_controller()
    killed_at = time.monotonic()
    cluster.kill(old_id)
    new_id, new_epoch = cluster.wait_for_controller(timeout=20, not_id=old_id)
    elapsed = time.monotonic() - killed_at
    assert new_id != old_id and new_epoch > old_epoch
    assert elapsed <= 4.0 + 2.0, f"new controller after {elapsed:.1f} s"
    survivor = cluster.brokers[new_id]
    stale = control_plane.LeaderAndIsrRequest(old_id, old_epoch, -1, (), ())
    deadline = time.monotonic() + 10
    while True:
        response = send_control_request(survivor.control_port, stale)
        if response.error_code == control_plane.STALE_CONTROLLER_EPOCH or \
                time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert response.error_code == control_plane.STALE_CONTROLLER_EPOCH
    events = [e for e in cluster.events() if e["event"] == "become-controller"]
    assert any(e["controller_id"] == new_id and e["controller_epoch"] == new_epoch for e in events)
    cluster.start_broker(old_id)


# -- leader failure during acks=all, then recovery after kill -9 ------------------------

def test_leader_kill_during_acks_all_then_restart_recovers(zookeeper, tmp_path):
    properties = {"min.insync.replicas": "2"}
    with BrokerCluster(zookeeper.connect, tmp_path, properties=properties) as cluster:
        create_topic(cluster, "failover")
        before = cluster.partition_state("failover", 0)
        old_leader = before["leader"]
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 2,
                             "message.timeout.ms": 30000})
        acked: set[bytes] = set()
        failed: list = []

        def delivered(error, message):
            (failed.append(error) if error else acked.add(message.value()))

        start = time.monotonic()
        sent = 0
        killed = False
        while time.monotonic() - start < 8:
            producer.produce("failover", b"f%d" % sent, on_delivery=delivered)
            sent += 1
            producer.poll(0.001)
            if not killed and time.monotonic() - start > 2:
                cluster.kill(old_leader)
                killed = True
        producer.flush(60)
        after = cluster.wait_for_state("failover", 0, lambda s: s["leader"] not in (-1, old_leader))
        assert after["leader"] in before["isr"]
        assert after["leader_epoch"] > before["leader_epoch"]
        assert len(acked) > 1000, f"only {len(acked)} acknowledged, {failed[:3]}"
        stored = {value for _, value in read_all(cluster.bootstrap, "failover", 1)[0]}
        assert acked <= stored, f"{len(acked - stored)} acknowledged records lost"
        elections = [e for e in cluster.events() if e["event"] == "elect-leader"
                     and e.get("topic") == "failover" and e.get("old_leader") == old_leader]
        assert elections and elections[-1]["new_leader"] == after["leader"]
        assert not elections[-1]["unclean"]

        # the killed broker: tear its log tail, restart, it recovers and rejoins the ISR
        segment = sorted((cluster.brokers[old_leader].log_dir / "failover-0").glob("*.log"))[-1]
        size = segment.stat().st_size
        garbage = b"\xde\xad\xbe\xef" * 64
        with open(segment, "ab") as handle:
            handle.write(struct.pack(">qi", 999_999, 5000) + garbage)
        cluster.start_broker(old_leader)
        cluster.wait_for_state("failover", 0, lambda s: old_leader in s["isr"], timeout=30)
        with open(segment, "rb") as handle:
            handle.seek(size)
            assert garbage not in handle.read(), "torn tail not cut"
        log_text = (cluster.brokers[old_leader].log_dir / "server.log").read_text()
        assert f"broker {old_leader} started" in log_text


# -- unclean leader election --------------------------------------------------------------

def test_isr_of_dead_leader_offline_unless_unclean(zookeeper, tmp_path):
    properties = {"replica.lag.time.max.ms": "2000"}
    with BrokerCluster(zookeeper.connect, tmp_path, properties=properties) as cluster:
        create_topic(cluster, "unclean", config={"unclean.leader.election.enable": "false"})
        leader = cluster.partition_state("unclean", 0)["leader"]
        followers = [b for b in cluster.brokers if b != leader]
        for follower in followers:
            cluster.kill(follower)
        cluster.wait_for_state("unclean", 0, lambda s: s["isr"] == [leader], timeout=20)
        producer = Producer({"bootstrap.servers": cluster.brokers[leader].bootstrap,
                             "acks": "1"})
        for i in range(100):
            producer.produce("unclean", b"u%d" % i)
        assert producer.flush(30) == 0
        cluster.kill(leader)
        for follower in followers:
            cluster.start_broker(follower)
        cluster.wait_for_controller(timeout=20, not_id=leader)
        deadline = time.monotonic() + 20
        while leader in cluster.registered() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2)
        state = cluster.partition_state("unclean", 0)
        assert state["leader"] not in followers and state["isr"] == [leader], state
        assert not any(e.get("unclean") for e in cluster.events())
        metadata = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
            "unclean", timeout=10)
        assert metadata.topics["unclean"].partitions[0].leader == -1

        cluster.zk.set("/config/topics/unclean", json.dumps(
            {"version": 1, "config": {"unclean.leader.election.enable": "true"}}).encode())
        cluster.kill(followers[1])  # a broker change makes the controller retry the election
        cluster.start_broker(followers[1])
        state = cluster.wait_for_state("unclean", 0, lambda s: s["leader"] in followers,
                                       timeout=20)
        unclean = [e for e in cluster.events() if e.get("unclean")]
        assert unclean and unclean[-1]["new_leader"] == state["leader"]
        assert unclean[-1]["topic"] == "unclean" and unclean[-1]["partition"] == 0


# -- pre-KIP-101 truncation to the high watermark loses committed writes ----------------------

@pytest.mark.parametrize(("mode", "loses"), [("high-watermark", True), ("leader-epoch", False)])
def test_truncation_to_the_high_watermark_loses_what_leader_epochs_keep(zookeeper, tmp_path,
                                                                       mode, loses):
    """KIP-101's first scenario: follower B restarts while leader A is unreachable, becomes A's
    follower again and (pre-KIP-101) truncates to its stale checkpointed high watermark; then
    A's session expires and B is elected. With leader epochs B cannot ask A where to truncate,
    keeps its log, and nothing acknowledged is lost."""
    properties = {"replication.truncation.mode": mode, "min.insync.replicas": "1",
                  "unclean.leader.election.enable": "true",
                  "replica.high.watermark.checkpoint.interval.ms": "600000"}
    with BrokerCluster(zookeeper.connect, tmp_path, size=3, properties=properties) as cluster:
        controller = cluster.controller()[0]
        leader, follower = sorted(b for b in cluster.brokers if b != controller)
        zk.create_topic(cluster.zk, "kip101", {0: [leader, follower]}, None)
        cluster.wait_for_state("kip101", 0, lambda s: s["leader"] == leader
                               and sorted(s["isr"]) == sorted([leader, follower]))
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        acked: list[bytes] = []
        for value in (b"m1", b"m2", b"m3"):
            producer.produce("kip101", value, partition=0,
                             on_delivery=lambda error, message: acked.append(message.value())
                             if error is None else None)
            producer.flush(30)
        assert acked == [b"m1", b"m2", b"m3"]

        registration = f"/brokers/ids/{follower}"
        old_session = cluster.zk.exists(registration).ephemeralOwner
        cluster.kill(follower)
        cluster.start_broker(follower, wait=False)
        deadline = time.monotonic() + 30
        while (found := cluster.zk.exists(registration)) is not None \
                and found.ephemeralOwner == old_session:  # the restart may register at once
            assert time.monotonic() < deadline, "the follower's old session never expired"
            time.sleep(0.02)
        cluster.kill(leader, signal.SIGSTOP)
        try:
            cluster.wait_until_registered({follower})
            cluster.wait_for_state("kip101", 0, lambda s: s["leader"] == follower, timeout=60)
        finally:
            cluster.kill(leader, signal.SIGCONT)
        stored = [value for _, value in read_all(cluster.bootstrap, "kip101", 1)[0]]
        if loses:
            assert set(acked) - set(stored), f"nothing was lost: {stored}"
        else:
            assert stored[:3] == acked
