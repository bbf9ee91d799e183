"""Finding a group's coordinator on real Apache Kafka (FindCoordinator over a socket): the
leader of the group's `__consumer_offsets` partition, and kill-coordinator on it. Needs
root and Kafka's cached jars."""

from __future__ import annotations

import random
import time

import pytest

from harness.control.backends import BackendOptions
from harness.db.coordinator import offsets_partition
from harness.db.kafka.db import KIND, KafkaOptions
from harness.db.kafka.distribution import ZOOKEEPER_VERSION
from harness.db.part import DBContext
from harness.db.znodes import read_snapshot
from nemesis.process import KillNemesis
from tests.nemesis.test_consumer_faults import Targets, consumers_of
from tests.support import requirements
from tests.support.cleanup import assert_nothing_left

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(400),
    requirements.root(),
    requirements.kafka_jars(ZOOKEEPER_VERSION),
]

KAFKA_OFFSETS_PARTITIONS = 3  # harness.db.kafka.broker's setting for small machines


def offsets_leader(cluster, group: str) -> str | None:
    index = offsets_partition(group, KAFKA_OFFSETS_PARTITIONS)
    for state in read_snapshot(cluster.zk).partitions:
        if state.topic == "__consumer_offsets" and state.partition == index:
            return cluster.broker_node(state.leader) if state.leader > 0 else None
    return None


def test_kafka_coordinator_is_found_and_killed(tmp_path):
    options = KafkaOptions(kafka_version=ZOOKEEPER_VERSION, zookeepers=1,
                           broker_config={"zookeeper.session.timeout.ms": "6000"})
    db = KIND.build(options, DBContext(2, BackendOptions()))
    with db.start(tmp_path / "logs", timeout=120) as cluster:
        prefix = cluster.prefix
        node = cluster.coordinator("kafka-group", timeout=60)
        assert node in cluster.brokers and node == offsets_leader(cluster, "kafka-group")
        killer = KillNemesis(random.Random(0), consumers_of(Targets([], ["kafka-group"])))
        done = killer.invoke(cluster, {"f": "kill", "value": "coordinator"})
        assert done["value"] == {"group": "kafka-group", node: "killed"}
        deadline = time.monotonic() + 60
        while cluster.coordinator("kafka-group") in (node, None):
            assert time.monotonic() < deadline, "the coordinator did not move"
            time.sleep(0.5)
        assert killer.invoke(cluster, {"f": "start"})["value"] == {node: "started"}
        cluster.broker_set.wait_healthy(timeout=120)
    assert_nothing_left(prefix)
