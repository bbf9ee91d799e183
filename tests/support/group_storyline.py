"""The consumer-group storyline for one client against one cluster.

`Storyline(cluster, client, directory, name).run()` plays, with topic and group `name`:

a. a topic of 6 partitions, replication 3; 30,000 records ("0".."29999", partition i % 6)
   produced with acks=all;
b. 3 consumers read them all exactly once, and the group's committed offsets reach the
   end offsets (read back with a consumer that does not join the group);
c. kill -9 of one consumer: its partitions go to the survivors within session timeout + 2 s;
d. a fourth consumer joins: it gets partitions, the others are revoked and reassigned;
e. partitions 6 -> 9: a rebalance hands the new ones out, and records produced to them
   are read;
f. kill -9 of the group's coordinator while producing: records produced after the kill
   are read within session timeout + 5 s, no committed offset goes back, nothing at or
   after the committed offsets is skipped; then the broker is restarted.

It returns the measured seconds (`TIMINGS`); each is recorded before its bound is
asserted, so a failing run still shows what it measured (`Storyline.timings`). Every
wait is bounded and fails with an AssertionError saying what it waited for. Consumer
processes are killed by their process-group id when the storyline ends, whatever happens.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.support.brokers import BrokerCluster
from tests.support.group_clients import ConsumerHandle, start_consumer
from tests.support.group_clients.emit import SESSION_TIMEOUT_MS
from tests.support.kafka_brokers import KafkaCluster, kafka_unavailable

__all__ = ["SYSTEMS", "TIMINGS", "Storyline", "new_cluster", "system_unavailable"]

RECORDS = 30_000
PARTITIONS = 6
GROWN_PARTITIONS = 9
MEMBERS = 3
ADDED_RECORDS = 300
AFTER_KILL_RECORDS = 300
SESSION_TIMEOUT = SESSION_TIMEOUT_MS / 1000
REASSIGN_LIMIT = SESSION_TIMEOUT + 2
RECOVERY_LIMIT = SESSION_TIMEOUT + 5
TIMINGS = {
    "reassign_after_kill": "consumer kill -9 -> its partitions assigned to survivors",
    "join_rebalance": "fourth consumer launched -> every member assigned again "
                      "(includes the client's start-up)",
    "partitions_added_rebalance": "partitions 6 -> 9 -> every member assigned again",
    "coordinator_kill_recovery": "coordinator kill -9 -> last record produced after it read",
}

SYSTEMS = ("kchaos", "kafka")
# Our broker's counterpart of kafka_brokers.FAST_PROPERTIES.
KCHAOS_PROPERTIES = {
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "zookeeper.session.timeout.ms": "4000",
}

T = TypeVar("T")


def system_unavailable(system: str) -> str | None:
    """Why `system` cannot run here, or None."""
    return kafka_unavailable() if system == "kafka" else None


def new_cluster(system: str, zookeeper_connect: str, directory: Path) -> BrokerCluster:
    """Three loopback brokers of `system` (not started: use it as a context manager)."""
    if system == "kafka":
        return KafkaCluster(zookeeper_connect, directory)
    if system == "kchaos":
        return BrokerCluster(zookeeper_connect, directory, properties=dict(KCHAOS_PROPERTIES))
    raise ValueError(f"unknown system {system!r}; known: {', '.join(SYSTEMS)}")


@dataclass
class Storyline:
    """One run: `members` are the consumers in the group now, `started` all ever started
    (their records count, killed or not); one producer and one admin client throughout."""

    cluster: BrokerCluster
    client: str
    directory: Path
    name: str
    members: list[ConsumerHandle] = field(default_factory=list)
    started: list[ConsumerHandle] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    producer: Producer | None = field(default=None, repr=False)
    admin_client: AdminClient | None = field(default=None, repr=False)
    produce_errors: list[str] = field(default_factory=list)

    @property
    def topic(self) -> str:
        return self.name

    @property
    def group(self) -> str:
        return self.name

    def run(self) -> dict[str, float]:
        self.heal()
        try:
            self.create_topic()
            self.produce([(i % PARTITIONS, str(i)) for i in range(RECORDS)])
            self.read_exactly_once()
            self.kill_member()
            self.join_member()
            self.add_partitions()
            self.kill_coordinator()
        finally:
            self.stop_consumers()
        return self.timings

    # -- the steps ---------------------------------------------------------------

    def create_topic(self) -> None:
        self.admin().create_topics([NewTopic(self.topic, PARTITIONS, 3)],
                                   operation_timeout=30)[self.topic].result(60)
        for partition in range(PARTITIONS):
            self.cluster.wait_for_state(self.topic, partition, lambda s: len(s["isr"]) == 3)

    def read_exactly_once(self) -> None:
        for _ in range(MEMBERS):
            self.start()
        self.wait(lambda: all(c.assignment() for c in self.members), 60,
                  "a first assignment of every consumer (does the broker serve groups?)")
        values = {str(i) for i in range(RECORDS)}
        self.wait(lambda: values <= self.values_read(), 120,
                  lambda: f"all {RECORDS} records read ({len(self.values_read())} so far)")
        self.wait(lambda: self.stable(PARTITIONS), 60, "a stable assignment of 6 partitions")
        self.wait_committed_at_end(PARTITIONS)
        read = Counter((p, o) for p, o, _, _ in self.records())
        twice = sorted(key for key, count in read.items() if count > 1)
        assert not twice, f"{len(twice)} records read more than once, e.g. {twice[:5]}"
        assert len(read) == RECORDS, f"{len(read)} distinct offsets read, not {RECORDS}"

    def kill_member(self) -> None:
        victim = self.members[0]
        lost = victim.assignment()
        assert lost, "the consumer to kill has no partitions"
        killed_at = time.time()
        victim.kill()
        self.members.remove(victim)

        def reassigned() -> dict[int, float] | None:
            first: dict[int, float] = {}
            for consumer in self.members:
                for event in consumer.events():
                    if event["event"] == "assigned" and event["t"] >= killed_at:
                        for partition in lost & set(event["partitions"]):
                            first[partition] = min(first.get(partition, event["t"]), event["t"])
            return first if set(first) == lost else None

        first = self.wait(reassigned, 60, f"partitions {sorted(lost)} of the killed consumer "
                                          "assigned to the survivors")
        elapsed = max(first.values()) - killed_at
        self.timings["reassign_after_kill"] = elapsed
        self.wait(lambda: self.stable(PARTITIONS), 60, "a stable assignment of the survivors")
        assert elapsed <= REASSIGN_LIMIT, (
            f"the killed consumer's partitions were reassigned after {elapsed:.1f} s "
            f"(limit {REASSIGN_LIMIT:.0f} s)")

    def join_member(self) -> None:
        old = list(self.members)
        joined_at = time.time()
        new = self.start()
        self.wait(lambda: new.assignment() and self.stable(PARTITIONS), 60,
                  "a rebalance giving the fourth consumer partitions")
        self.timings["join_rebalance"] = self.last_assigned() - joined_at
        for consumer in old:
            kinds = {e["event"] for e in consumer.events() if e["t"] >= joined_at}
            assert {"revoked", "assigned"} <= kinds, (
                f"consumer {consumer.pid} saw {sorted(kinds)} after the fourth joined, "
                "not a revocation and an assignment")

    def add_partitions(self) -> None:
        added_at = time.time()
        self.admin().create_partitions([NewPartitions(self.topic, GROWN_PARTITIONS)],
                                       operation_timeout=30)[self.topic].result(60)
        for partition in range(PARTITIONS, GROWN_PARTITIONS):
            self.cluster.wait_for_state(self.topic, partition, lambda s: len(s["isr"]) == 3)
        self.wait(lambda: self.stable(GROWN_PARTITIONS), 60,
                  "a rebalance assigning all 9 partitions")
        self.timings["partitions_added_rebalance"] = self.last_assigned() - added_at
        added = GROWN_PARTITIONS - PARTITIONS
        values = [(PARTITIONS + i % added, f"added-{i}") for i in range(ADDED_RECORDS)]
        self.produce(values)
        wanted = {value for _, value in values}
        self.wait(lambda: wanted <= self.values_read(), 60,
                  "the records produced to the added partitions")

    def kill_coordinator(self) -> None:
        description = self.admin().describe_consumer_groups([self.group])[self.group]
        coordinator = description.result(30).coordinator.id
        before = self.committed(GROWN_PARTITIONS)
        killed_at = time.time()
        self.cluster.kill(coordinator)
        try:
            self.recover(killed_at, before)
        finally:
            if not self.cluster.brokers[coordinator].alive:
                self.cluster.start_broker(coordinator)

    def recover(self, killed_at: float, before: dict[int, int]) -> None:
        values = [(i % GROWN_PARTITIONS, f"after-kill-{i}") for i in range(AFTER_KILL_RECORDS)]
        for start in range(0, len(values), 30):
            self.produce(values[start:start + 30], flush=False)
            time.sleep(0.1)
        self.flush()
        wanted = {value for _, value in values}
        self.wait(lambda: wanted <= self.values_read(), 60,
                  "the records produced after the coordinator was killed")
        read_at = max(t for _, _, value, t in self.records() if value in wanted)
        elapsed = read_at - killed_at
        self.timings["coordinator_kill_recovery"] = elapsed
        ends = self.wait_committed_at_end(GROWN_PARTITIONS)
        after = self.committed(GROWN_PARTITIONS)
        back = {p: (before[p], after[p]) for p in before if after[p] < before[p]}
        assert not back, f"committed offsets went back (partition: (before, after)): {back}"
        read = {(p, o) for p, o, _, _ in self.records()}
        skipped = [(p, o) for p in range(GROWN_PARTITIONS)
                   for o in range(max(before[p], 0), ends[p]) if (p, o) not in read]
        assert not skipped, (f"{len(skipped)} records at or after the committed offsets "
                             f"were never read, e.g. {skipped[:5]}")
        assert elapsed <= RECOVERY_LIMIT, (
            f"records produced after the coordinator kill were read {elapsed:.1f} s after it "
            f"(limit {RECOVERY_LIMIT:.0f} s)")

    # -- consumers ---------------------------------------------------------------

    def start(self) -> ConsumerHandle:
        index = len(self.started)
        consumer = start_consumer(self.client, self.cluster.bootstrap, self.group, self.topic,
                                  self.directory / f"{self.name}-consumer-{index}.jsonl")
        self.started.append(consumer)
        self.members.append(consumer)
        return consumer

    def stop_consumers(self) -> None:
        for consumer in self.started:
            consumer.kill()

    def check_alive(self) -> None:
        for consumer in self.members:
            if not consumer.alive:
                raise AssertionError(
                    f"{self.client} consumer {consumer.pid} exited with "
                    f"{consumer.process.returncode}:\n{consumer.stderr_tail()}")

    def records(self) -> list[tuple[int, int, str, float]]:
        """(partition, offset, value, t) of every record any consumer wrote out."""
        return [(e["partition"], e["offset"], e["value"], e["t"])
                for consumer in self.started for e in consumer.events()
                if e["event"] == "record"]

    def values_read(self) -> set[str]:
        return {value for _, _, value, _ in self.records()}

    def stable(self, partitions: int) -> bool:
        """Every live member holds partitions, none twice, all of them."""
        assignments = [c.assignment() for c in self.members]
        union = set().union(*assignments)
        return (all(assignments) and sum(map(len, assignments)) == len(union)
                and union == set(range(partitions)))

    def last_assigned(self) -> float:
        """When the last member got its current assignment."""
        return max(max(e["t"] for e in c.events() if e["event"] == "assigned")
                   for c in self.members)

    # -- the cluster -------------------------------------------------------------

    def heal(self) -> None:
        """Start any broker a previous storyline left dead."""
        for broker_id, broker in self.cluster.brokers.items():
            if not broker.alive:
                self.cluster.start_broker(broker_id)

    def admin(self) -> AdminClient:
        """One admin client for the storyline (its futures fail once it is dropped)."""
        if self.admin_client is None:
            self.admin_client = AdminClient({"bootstrap.servers": self.cluster.bootstrap})
        return self.admin_client

    def produce(self, records: list[tuple[int, str]], flush: bool = True) -> None:
        if self.producer is None:
            self.producer = Producer({"bootstrap.servers": self.cluster.bootstrap,
                                      "acks": "all", "linger.ms": 5,
                                      "message.timeout.ms": 60000,
                                      "topic.metadata.refresh.interval.ms": 1000})

        def delivered(error, message) -> None:
            if error is not None:
                self.produce_errors.append(f"{message.partition()}: {error}")

        for partition, value in records:
            deadline = time.monotonic() + 30
            while True:
                try:
                    self.producer.produce(self.topic, value.encode(), partition=partition,
                                          on_delivery=delivered)
                    break
                except BufferError:
                    self.producer.poll(0.1)
                except KafkaException as error:
                    # an added partition the producer's metadata does not know yet
                    if (error.args[0].code() != KafkaError._UNKNOWN_PARTITION
                            or time.monotonic() > deadline):
                        raise
                    self.producer.poll(0.2)
            self.producer.poll(0)
        if flush:
            self.flush()

    def flush(self) -> None:
        remaining = self.producer.flush(90)
        assert remaining == 0, f"{remaining} records not delivered within 90 s"
        assert not self.produce_errors, f"produce failed: {self.produce_errors[:5]}"

    def end_offsets(self, partitions: int) -> dict[int, int]:
        consumer = Consumer({"bootstrap.servers": self.cluster.bootstrap,
                             "group.id": f"{self.group}-reader", "enable.auto.commit": False})
        try:
            return {p: consumer.get_watermark_offsets(TopicPartition(self.topic, p),
                                                      timeout=10)[1]
                    for p in range(partitions)}
        finally:
            consumer.close()

    def committed(self, partitions: int) -> dict[int, int]:
        """The group's committed offsets (-1 for none), read without joining the group."""
        consumer = Consumer({"bootstrap.servers": self.cluster.bootstrap,
                             "group.id": self.group, "enable.auto.commit": False})
        try:
            found = consumer.committed([TopicPartition(self.topic, p)
                                        for p in range(partitions)], timeout=10)
            return {tp.partition: max(tp.offset, -1) for tp in found}
        finally:
            consumer.close()

    def committed_or_error(self, partitions: int) -> dict[int, int] | str:
        try:
            return self.committed(partitions)
        except KafkaException as error:
            return str(error)

    def wait_committed_at_end(self, partitions: int) -> dict[int, int]:
        ends = self.end_offsets(partitions)
        self.wait(lambda: self.committed_or_error(partitions) == ends, 60,
                  lambda: f"committed offsets {self.committed_or_error(partitions)} equal "
                          f"to the end offsets {ends}", interval=0.5)
        return ends

    def wait(self, predicate: Callable[[], T], timeout: float, what: str | Callable[[], str],
             interval: float = 0.2) -> T:
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                description = what() if callable(what) else what
                raise AssertionError(f"{self.client}: no {description} within {timeout:.0f} s")
            time.sleep(interval)
