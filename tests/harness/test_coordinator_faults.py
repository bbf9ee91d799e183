"""The consumer-group faults against a live cluster of our broker on namespaces: finding a
group's coordinator (FindCoordinator, and the event logs' `coordinator-loaded` lines),
kill-coordinator with its restart, isolate-coordinator's firewall rules and their heal,
depose-coordinator moving the group to another broker, and add-partitions growing a topic.
Needs root."""

from __future__ import annotations

import random
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness.db import Cluster, ClusterSpec
from harness.db.coordinator import offsets_partition
from harness.db.znodes import read_snapshot
from nemesis.consumers import AddPartitionsNemesis, Consumers
from nemesis.partition import Firewall, PartitionNemesis
from nemesis.process import KillNemesis
from nemesis.targeted import TargetedNemesis
from tests.nemesis.test_consumer_faults import Targets, consumers_of
from tests.support import requirements
from tests.support.cleanup import assert_nothing_left

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(300),
    requirements.root(),
]

OFFSETS_PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    spec = ClusterSpec(brokers=3, zookeepers=1, broker_config={
        "zookeeper.session.timeout.ms": "4000",
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
        "group.initial.rebalance.delay.ms": "0"})
    with Cluster.up(spec, tmp_path_factory.mktemp("state")) as running:
        yield running
    assert_nothing_left(running.prefix)


def offsets_leader(cluster: Cluster, group: str) -> str | None:
    """The node leading `group`'s `__consumer_offsets` partition, as ZooKeeper says."""
    index = offsets_partition(group, OFFSETS_PARTITIONS)
    for state in read_snapshot(cluster.zk).partitions:
        if state.topic == "__consumer_offsets" and state.partition == index:
            return cluster.broker_node(state.leader) if state.leader > 0 else None
    return None


def wait_for(predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return found


def drops(cluster: Cluster, node: str) -> str:
    """The node's nft input rules that drop whole sources."""
    rules = cluster.remote.exec(node, ["nft", "list", "table", "inet",
                                       cluster.remote.network.table]).out
    return "\n".join(line for line in rules.splitlines() if "saddr" in line and "drop" in line)


def test_coordinator_is_the_offsets_leader_and_is_in_the_event_logs(cluster):
    node = cluster.coordinator("find-group", timeout=60)
    assert node in cluster.brokers
    assert node == offsets_leader(cluster, "find-group")
    assert wait_for(lambda: cluster._loaded_coordinator("find-group"),
                    "a coordinator-loaded line") == node


def test_kill_coordinator_kills_it_and_start_restarts_it(cluster):
    cluster.broker_set.wait_healthy(timeout=60)
    group = "kill-group"
    before = cluster.coordinator(group, timeout=60)
    killer = KillNemesis(random.Random(0), consumers_of(Targets([], [group])))
    done = killer.invoke(cluster, {"type": "info", "process": "nemesis", "f": "kill",
                                   "value": "coordinator"})
    assert done["value"] == {"group": group, before: "killed"}
    assert not cluster.running(before)
    moved = wait_for(lambda: (n := cluster.coordinator(group)) != before and n,
                     "a new coordinator")
    assert moved in cluster.brokers
    assert killer.invoke(cluster, {"f": "start"})["value"] == {before: "started"}
    cluster.broker_set.wait_healthy(timeout=60)


def test_isolate_coordinator_drops_its_traffic_until_healed(cluster):
    cluster.broker_set.wait_healthy(timeout=60)
    group = "isolate-group"
    node = cluster.coordinator(group, timeout=60)
    partitioner = PartitionNemesis(Firewall(), random.Random(0),
                                   consumers_of(Targets([], [group])))
    done = partitioner.invoke(cluster, {"f": "start-partition", "value": "coordinator"})
    try:
        assert done["value"]["group"] == group
        assert set(done["value"][node]) == set(cluster.nodes) - {node}
        others = [n for n in cluster.nodes if n != node]
        assert all(cluster.remote.address(n) in drops(cluster, node) for n in others)
        assert all(cluster.remote.address(node) in drops(cluster, n) for n in others)
    finally:
        healed = partitioner.invoke(cluster, {"f": "stop-partition"})
    assert healed["value"] == "network-healed"
    assert not any(drops(cluster, n) for n in cluster.nodes)
    cluster.broker_set.wait_healthy(timeout=60)


def test_depose_coordinator_holds_the_cut_until_another_broker_coordinates(cluster):
    cluster.broker_set.wait_healthy(timeout=60)
    group = "depose-group"
    node = wait_for(lambda: offsets_leader(cluster, group) == cluster.coordinator(group) and
                    cluster.coordinator(group), "the coordinator leading its partition")
    deposer = TargetedNemesis(Firewall(), random.Random(0),
                              consumers=consumers_of(Targets([], [group])))
    done = deposer.invoke(cluster, {"f": "depose-coordinator", "value": "coordinator"})
    value = done["value"]
    assert (value["group"], value["coordinator"]) == (group, node)
    assert value["partition"] == offsets_partition(group, OFFSETS_PARTITIONS)
    assert set(value["cut"][node]) == set(cluster.nodes) - {node}
    elected = value["elections"][0]["leader"]
    assert elected in cluster.brokers and elected != node
    assert not any(drops(cluster, n) for n in cluster.nodes), "the cut is lifted"
    assert wait_for(lambda: cluster.coordinator(group) == elected, "the new coordinator")
    cluster.broker_set.wait_healthy(timeout=60)


def partition_count(admin: AdminClient, topic: str) -> int:
    return len(admin.list_topics(topic, timeout=15).topics[topic].partitions)


def test_add_partitions_grows_the_workload_topic(cluster):
    cluster.broker_set.wait_healthy(timeout=60)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("grown", 1, 3)], operation_timeout=30)["grown"].result()
    adder = AddPartitionsNemesis(consumers_of(Targets([], ["g"], "grown")))
    done = adder.invoke(cluster, {"type": "info", "process": "nemesis", "f": "add-partitions",
                                  "value": 2})
    assert done["value"] == {"topic": "grown", "partitions": [1, 3]}
    wait_for(lambda: partition_count(admin, "grown") == 3, "three partitions")
    assert adder.invoke(cluster, {"f": "add-partitions", "value": 1})["value"] == {
        "topic": "grown", "partitions": [3, 4]}
    assert "skipped" in AddPartitionsNemesis(Consumers()).invoke(
        cluster, {"f": "add-partitions", "value": 1})["value"]
