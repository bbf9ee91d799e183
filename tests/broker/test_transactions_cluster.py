"""Transactions and exactly-once, the acceptance tests: three loopback brokers and a real
ZooKeeper, real transactional clients (confluent-kafka, kafka-python, aiokafka, the Java
client 3.9.1), against our broker (`kchaos`) and Apache Kafka 3.9.1 (`kafka`).

- commit and abort with each client; read_committed never sees aborted data;
- read_committed stops at an open transaction and goes on once it commits;
- a producer fenced by a newer epoch cannot commit;
- consumed offsets sent to a transaction are committed only with it;
- the coordinator killed mid-transaction: the transaction completes or aborts, never
  half-visible;
- idempotent retries across a leader kill leave no duplicates.

`make test` runs them against our broker with confluent-kafka; `make test-clients` (marker
`clients`) with every other client and against Kafka as well, the same assertions, Kafka as
the reference.
"""

from __future__ import annotations

import contextlib
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.db.coordinator import find_coordinator
from tests.support import requirements
from tests.support.brokers import BrokerCluster
from tests.support.group_storyline import new_cluster, system_unavailable
from tests.support.txn_clients import CLIENTS, TxnError, open_producer, unavailable

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

PARTITIONS = 2
TXN_PROPERTIES = {
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}


def systems() -> list:
    params = []
    for system in ("kchaos", "kafka"):
        unmet = system_unavailable(system)
        marks = [requirements.needs(False, unmet)] if unmet else []
        if system != "kchaos":
            marks.append(pytest.mark.clients)
        params.append(pytest.param(system, marks=marks))
    return params


@pytest.fixture(scope="module", params=systems())
def cluster(request, zookeeper, tmp_path_factory):
    system = request.param
    running = new_cluster(system, zookeeper.connect, tmp_path_factory.mktemp(f"txn-{system}"))
    running.properties.update(TXN_PROPERTIES)
    with running:
        yield running


def create_topic(cluster: BrokerCluster, name: str, partitions: int = PARTITIONS) -> str:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})],
                        operation_timeout=30)[name].result()
    for partition in range(partitions):
        cluster.wait_for_state(name, partition, lambda s: len(s["isr"]) == 3)
    return name


def read(cluster: BrokerCluster, topic: str, isolation: str, partitions: int = PARTITIONS,
         timeout: float = 30.0, settled: bool = True) -> dict[int, list[str]]:
    """Every value of `topic` a consumer at `isolation` reads up to the end offsets it is
    told (the last stable offset for read_committed): partition -> values in order. With
    `settled`, a read_committed read first waits for every transaction on `topic` to be
    completed by its markers, which a commit or abort returns before. A new consumer tries
    again while a leader that moved after a kill does not answer."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if settled and isolation == "read_committed":
                wait_until_stable(cluster, topic, partitions, deadline)
            return read_once(cluster, topic, isolation, partitions, deadline)
        except KafkaException:
            if time.monotonic() > deadline:
                raise


def end_offsets(cluster: BrokerCluster, topic: str, isolation: str,
                partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "txn-reader",
                         "isolation.level": isolation})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def wait_until_stable(cluster: BrokerCluster, topic: str, partitions: int,
                      deadline: float) -> None:
    """Until the last stable offset of every partition reaches its high watermark."""
    while True:
        stable = end_offsets(cluster, topic, "read_committed", partitions)
        high = end_offsets(cluster, topic, "read_uncommitted", partitions)
        if stable == high:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}: a transaction is still open: last stable "
                                 f"offsets {stable}, high watermarks {high}")
        time.sleep(0.2)


def read_once(cluster: BrokerCluster, topic: str, isolation: str, partitions: int,
              deadline: float) -> dict[int, list[str]]:
    ends = end_offsets(cluster, topic, isolation, partitions)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "txn-reader",
                         "enable.auto.commit": False, "isolation.level": isolation})
    try:
        parts = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        found: dict[int, list[str]] = {p: [] for p in range(partitions)}
        while time.monotonic() < deadline:
            positions = {tp.partition: max(tp.offset, 0) for tp in consumer.position(parts)}
            if all(positions[p] >= ends[p] for p in ends):
                break
            for message in consumer.consume(500, 0.3):
                if message.error() is None:
                    found[message.partition()].append(message.value().decode())
        return found
    finally:
        consumer.close()


def values(found: dict[int, list[str]]) -> list[str]:
    return sorted(value for part in found.values() for value in part)


def transaction(producer, prefix: str, count: int) -> list[str]:
    """Begin, send `count` values over the partitions, flush: the values sent."""
    sent = [f"{prefix}-{i}" for i in range(count)]
    producer.begin()
    for i, value in enumerate(sent):
        producer.send(i % PARTITIONS, value)
    producer.flush()
    return sent


@contextlib.contextmanager
def opened(client: str, cluster: BrokerCluster, transactional_id: str, topic: str):
    producer = open_producer(client, cluster.bootstrap, transactional_id, topic)
    try:
        producer.init()
        yield producer
    finally:
        producer.close()


SMOKE_CLIENT = "confluent"


def clients(names: tuple[str, ...] = CLIENTS) -> list:
    """One param per client; all but SMOKE_CLIENT are marked `clients`."""
    params = []
    for client in names:
        marks = [requirements.needs(False, unavailable(client))] if unavailable(client) else []
        if client != SMOKE_CLIENT:
            marks.append(pytest.mark.clients)
        params.append(pytest.param(client, marks=marks))
    return params


@pytest.mark.parametrize("client", clients())
def test_commit_and_abort_with_each_client(cluster, client):
    topic = create_topic(cluster, f"txn-commit-abort-{client}")
    with opened(client, cluster, f"commit-abort-{client}", topic) as producer:
        first = transaction(producer, "first", 6)
        producer.commit()
        aborted = transaction(producer, "aborted", 6)
        producer.abort()
        last = transaction(producer, "last", 4)
        producer.commit()
    assert read(cluster, topic, "read_committed") == {
        p: [v for i, v in enumerate(first) if i % PARTITIONS == p]
        + [v for i, v in enumerate(last) if i % PARTITIONS == p] for p in range(PARTITIONS)}
    assert values(read(cluster, topic, "read_uncommitted")) == sorted(first + aborted + last)


def test_read_committed_stops_at_an_open_transaction(cluster):
    topic = create_topic(cluster, "txn-open")
    with opened("confluent", cluster, "open-txn", topic) as open_txn:
        held = transaction(open_txn, "held", 4)
        plain = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for partition in range(PARTITIONS):
            plain.produce(topic, value=f"after-{partition}", partition=partition)
        plain.flush(30)
        assert values(read(cluster, topic, "read_committed", settled=False)) == []
        assert len(values(read(cluster, topic, "read_uncommitted"))) == 6
        open_txn.commit()
    assert values(read(cluster, topic, "read_committed")) == sorted(
        held + [f"after-{p}" for p in range(PARTITIONS)])


@pytest.mark.parametrize("client", clients())
def test_a_fenced_producer_cannot_commit(cluster, client):
    topic = create_topic(cluster, f"txn-fenced-{client}")
    with opened(client, cluster, f"fenced-{client}", topic) as zombie:
        transaction(zombie, "zombie", 4)
        with opened(client, cluster, f"fenced-{client}", topic) as successor:
            kept = transaction(successor, "successor", 4)
            successor.commit()
            with pytest.raises(TxnError):
                zombie.commit()
    assert values(read(cluster, topic, "read_committed")) == kept


@pytest.mark.parametrize("client", clients(("confluent", "java")))
def test_sent_offsets_are_committed_with_the_transaction_only(cluster, client):
    topic = create_topic(cluster, f"txn-offsets-{client}")
    group = f"txn-offsets-group-{client}"
    with opened(client, cluster, f"offsets-{client}", topic) as producer:
        transaction(producer, "aborted", 2)
        producer.offsets(group, topic, 0, 5)
        producer.abort()
        assert committed_offset(cluster, group, topic) < 0
        transaction(producer, "kept", 2)
        producer.offsets(group, topic, 0, 7)
        producer.commit()
    assert committed_offset(cluster, group, topic) == 7


def committed_offset(cluster: BrokerCluster, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        return consumer.committed([TopicPartition(topic, 0)], timeout=20)[0].offset
    finally:
        consumer.close()


def transaction_coordinator(cluster: BrokerCluster, transactional_id: str) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for broker in cluster.brokers.values():
            if not broker.alive:
                continue
            with contextlib.suppress(OSError):
                found = find_coordinator("127.0.0.1", broker.port, transactional_id,
                                         kind="transaction")
                if found is not None and cluster.brokers[found].alive:
                    return found
        time.sleep(0.2)
    raise TimeoutError(f"no transaction coordinator for {transactional_id!r}")


@pytest.mark.parametrize("when", ["before-commit", "after-commit"])
def test_a_killed_coordinator_leaves_the_transaction_whole(cluster, when):
    topic = create_topic(cluster, f"txn-coordinator-kill-{when}")
    transactional_id = f"coordinator-kill-{when}"
    with opened("confluent", cluster, transactional_id, topic) as producer:
        sent = transaction(producer, "whole", 8)
        victim = transaction_coordinator(cluster, transactional_id)
        try:
            if when == "after-commit":
                producer.commit()
                cluster.kill(victim)
                outcome = "committed"
            else:
                cluster.kill(victim)
                try:
                    producer.commit()
                    outcome = "committed"
                except TxnError:
                    outcome = "failed"
            survivors = read(cluster, topic, "read_committed", timeout=60)
        finally:
            cluster.start_broker(victim)
    seen = values(survivors)
    assert seen in ([], sorted(sent)), f"half-visible transaction: {seen}"
    if outcome == "committed":
        assert seen == sorted(sent)
    assert values(read(cluster, topic, "read_committed", timeout=60)) == seen


def test_idempotent_retries_across_a_leader_kill_leave_no_duplicates(cluster):
    topic = create_topic(cluster, "idempotent-leader-kill", partitions=1)
    leader = cluster.partition_state(topic, 0)["leader"]
    acked: list[str] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000,
                         "topic.metadata.refresh.interval.ms": 1000})

    def delivered(error, message) -> None:
        if error is None:
            acked.append(message.value().decode())

    try:
        for i in range(3000):
            producer.produce(topic, value=f"v{i}", partition=0, on_delivery=delivered)
            producer.poll(0)
            if i == 1000:
                producer.flush(0.05)
                cluster.kill(leader)
        assert producer.flush(90) == 0
    finally:
        cluster.start_broker(leader)
    seen = read(cluster, topic, "read_uncommitted", partitions=1, timeout=60)[0]
    assert len(seen) == len(set(seen)), "duplicates after the leader kill"
    assert set(acked) <= set(seen)
    assert len(acked) == 3000
