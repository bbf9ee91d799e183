"""The faults of a KRaft metadata quorum, planned on a fake cluster (fake processes and
firewall): a split of the voters with the active controller on each side in turn, a
broker cut from the dedicated controllers only, a majority of the voters killed and
started again; and which db refuses which of them before a run, and why."""

from __future__ import annotations

import random

import pytest

from harness.config import ConfigError, load_config
from harness.db.kafka.distribution import CACHE, COMPLETE
from harness.test import build_test
from nemesis.capabilities import (
    HasDedicatedQuorum,
    HasQuorum,
    Offer,
    PartitionState,
    dedicated_controllers,
)
from nemesis.package import FAULTS, asked, package
from nemesis.partition import Firewall, PartitionNemesis
from nemesis.process import KillNemesis, PauseNemesis
from nemesis.targeted import reaches_controller
from nemesis.targets import leader_and_followers
from tests.support.fake_cluster import NODES, FakeCluster

CONTROLLERS = ("c1", "c2", "c3")


class FakeQuorumCluster(FakeCluster):
    """Five brokers and three dedicated controllers, c2 the active one."""

    quorum_service = "controller"

    def __init__(self) -> None:
        super().__init__()
        self.remote.node_names = [*self.remote.node_names, *CONTROLLERS]
        for node in CONTROLLERS:
            self.pids[node] = self.remote.spawn(node, ["controller"], "log").pid
        self.nodes = (*self.nodes, *CONTROLLERS)
        self.controllers = CONTROLLERS
        self.voters = CONTROLLERS
        self.active = "c2"

    def controller(self):
        return self.active

    def _pid(self, node, service):
        return self.pids[node] if service == "controller" else super()._pid(node, service)

    def start(self, node, service="broker"):
        if self.running(node, service):
            return False
        self.pids[node] = self.remote.spawn(node, [service], "log").pid
        return True


def test_the_fake_has_a_dedicated_quorum_and_the_zookeeper_fake_has_none():
    cluster = FakeQuorumCluster()
    assert isinstance(cluster, HasQuorum) and isinstance(cluster, HasDedicatedQuorum)
    assert dedicated_controllers(cluster) == CONTROLLERS
    assert dedicated_controllers(FakeCluster()) == ()


def test_partition_quorum_puts_the_active_controller_on_each_side_in_turn():
    cluster = FakeQuorumCluster()
    partitioner = PartitionNemesis(Firewall(), random.Random(4))
    first = partitioner.invoke(cluster, {"f": "start-partition", "value": "quorum"})["value"]
    assert first["active"] == "c2" and first["active_side"] == "minority"
    assert first["minority"] == ["c2"] and first["majority"] == ["c1", "c3"]
    assert cluster.remote.drops["c2"] == {"c1", "c3"}
    assert not cluster.remote.drops.get("n1"), "brokers still reach every controller"
    partitioner.invoke(cluster, {"f": "stop-partition"})
    second = partitioner.invoke(cluster, {"f": "start-partition", "value": "quorum"})["value"]
    assert second["active_side"] == "majority" and "c2" in second["majority"]
    assert len(second["minority"]) == 1 and second["minority"][0] in ("c1", "c3")
    cluster.active = None
    assert partitioner.invoke(cluster, {"f": "start-partition", "value": "quorum"}
                              )["value"] == "no-target"


def test_fence_broker_cuts_a_partition_leader_from_the_controllers_only():
    cluster = FakeQuorumCluster()
    partitioner = PartitionNemesis(Firewall(), random.Random(1))
    done = partitioner.invoke(cluster, {"f": "start-partition", "value": "fence-broker"})
    assert done["value"]["broker"] == "n4" and done["value"]["leads"] is True
    assert cluster.remote.drops["n4"] == set(CONTROLLERS)
    assert all(cluster.remote.drops[c] == {"n4"} for c in CONTROLLERS)
    assert not any(cluster.remote.drops.get(n) for n in NODES if n != "n4"), \
        "clients' and other brokers' links to the fenced broker stay open"


def test_kill_quorum_majority_kills_the_active_controller_and_one_more_then_starts_them():
    cluster = FakeQuorumCluster()
    killer = KillNemesis(random.Random(2))
    killed = killer.invoke(cluster, {"f": "kill", "value": "quorum-majority"})["value"]
    assert len(killed) == 2 and "c2" in killed and set(killed) <= set(CONTROLLERS)
    assert all(cluster.running(n) for n in NODES), "the brokers keep running"
    assert killer.invoke(cluster, {"f": "start"})["value"] == {n: "started" for n in killed}


def test_kill_and_pause_controller_act_on_the_dedicated_active_controller():
    cluster = FakeQuorumCluster()
    assert KillNemesis(random.Random(0)).invoke(
        cluster, {"f": "kill", "value": "controller"})["value"] == {"c2": "killed"}
    assert not cluster.running("c2", "controller") and cluster.running("n2")
    cluster = FakeQuorumCluster()
    pauser = PauseNemesis(random.Random(0))
    assert pauser.invoke(cluster, {"f": "pause", "value": "controller"})["value"] == {
        "c2": "paused"}
    assert cluster.remote.paused == {cluster.pids["c2"]}
    assert pauser.invoke(cluster, {"f": "resume"})["value"] == {"c2": "resumed"}
    assert not cluster.remote.paused


def test_fence_broker_holds_past_the_brokers_session_timeout():
    steps = package("fence-broker", seed=1, time_limit=60, interval=2,
                    broker_session_timeout=6.0).generator.steps
    assert steps and all(step.hold >= 9.0 for step in steps)


def test_groups_stand_for_the_faults_the_db_can_serve():
    zookeeper = Offer("--db kchaos", frozenset(FAULTS["isolate-zookeeper"].needs))
    kraft = Offer("--db kafka", frozenset({*FAULTS["partition-quorum"].needs}))
    assert "isolate-zookeeper" not in asked("partition", kraft)[0]
    assert "isolate-zookeeper" in asked("partition")[0]
    assert asked("quorum", zookeeper) == []
    assert asked("quorum", kraft) == [("partition-quorum",)]
    assert asked("partition-quorum", zookeeper) == [("partition-quorum",)], \
        "a fault named alone is kept, to be refused with its reason"


def test_the_kchaos_db_refuses_quorum_faults_naming_what_to_use():
    with pytest.raises(ConfigError, match="--nemesis partition-quorum needs a metadata quorum "
                                          "of its own .KRaft.; --db kchaos keeps its metadata "
                                          "in ZooKeeper, not in a KRaft quorum: fault "
                                          "ZooKeeper instead"):
        build_test(load_config(None, {"nemesis": "partition-quorum"}))
    assert "partition-quorum" not in build_test(load_config(None, {"nemesis": "all"})
                                                ).nemesis.faults


@pytest.mark.skipif(not (CACHE / "4.1.1" / COMPLETE).exists(),
                    reason="Kafka 4.1.1's jars are not cached: make bootstrap")
def test_kafka_on_kraft_refuses_zookeeper_faults_and_combined_controllers_dedicated_ones():
    kraft = {"db": "kafka", "kafka_version": "4.1.1"}
    with pytest.raises(ConfigError, match="--nemesis pause-zookeeper needs ZooKeeper; --db "
                                          "kafka in KRaft mode has no ZooKeeper .* fault the "
                                          "quorum with partition-quorum"):
        build_test(load_config(None, {**kraft, "nemesis": "pause-zookeeper"}))
    with pytest.raises(ConfigError, match="--nemesis fence-broker needs dedicated controllers "
                                          ".*; --db kafka runs its controllers on the broker "
                                          "nodes .combined.: add --controllers 3"):
        build_test(load_config(None, {**kraft, "nemesis": "fence-broker"}))
    combined = build_test(load_config(None, {**kraft, "nemesis": "all"})).nemesis.faults
    assert "partition-quorum" in combined and "pause-zookeeper" not in combined
    assert "kill-quorum-majority" not in combined
    dedicated = build_test(load_config(None, {**kraft, "controllers": 3, "nemesis": "quorum"}))
    assert dedicated.nemesis.faults == ("partition-quorum", "fence-broker",
                                        "kill-quorum-majority")
    assert dedicated.db.spec.controller_nodes == ("c1", "c2", "c3")
    with pytest.raises(ConfigError, match="--controllers 3: Kafka 3.9.1 in ZooKeeper mode has "
                                          "no KRaft controllers"):
        build_test(load_config(None, {"db": "kafka", "kafka_version": "3.9.1",
                                      "controllers": 3}))
    with pytest.raises(ConfigError, match="--controllers must be 0 to 9, got 11"):
        build_test(load_config(None, {**kraft, "controllers": 11}))


def test_shrinking_an_isr_needs_a_metadata_store_apart_from_the_brokers():
    with pytest.raises(ConfigError, match="--nemesis shrink-isr-isolate-leader needs a metadata "
                                          "store on nodes apart from the brokers; --db kchaos "
                                          "with --colocate runs ZooKeeper on the broker nodes"):
        build_test(load_config(None, {"nemesis": "shrink-isr-isolate-leader",
                                      "colocate": True, "zookeepers": 1}))
    assert "shrink-isr-kill-leader" in build_test(load_config(None, {"nemesis": "targeted"})
                                                  ).nemesis.faults


@pytest.mark.skipif(not (CACHE / "4.1.1" / COMPLETE).exists(),
                    reason="Kafka 4.1.1's jars are not cached: make bootstrap")
def test_unclean_2013_on_combined_kraft_nodes_is_refused_naming_controllers():
    kraft = {"db": "kafka", "kafka_version": "4.1.1", "scenario": "unclean-2013"}
    with pytest.raises(ConfigError, match="needs a metadata store on nodes apart from the "
                                          "brokers; --db kafka runs its controllers on the "
                                          "broker nodes .combined., so a broker cut off from "
                                          "the others loses the quorum too: add --controllers 3"):
        build_test(load_config(None, kraft))
    staged = build_test(load_config(None, {**kraft, "controllers": 3}))
    assert staged.nemesis.faults == ("shrink-isr-isolate-leader",)


def test_shrink_isr_prefers_a_partition_whose_leader_still_reaches_a_broker_controller():
    cluster = FakeCluster()  # controller n2 (broker 2); t-0 led by 4, replicas 4, 5, 1
    cluster.zk.znodes = {**cluster.zk.znodes,
                         "/brokers/topics/u": b'{"version":2,"partitions":{"0":[3,2,1]}}',
                         "/brokers/topics/u/partitions": b"",
                         "/brokers/topics/u/partitions/0": b"",
                         "/brokers/topics/u/partitions/0/state":
                             b'{"controller_epoch":7,"leader":3,"version":1,'
                             b'"leader_epoch":1,"isr":[3,2,1]}'}
    prefer = reaches_controller(cluster)
    assert prefer is not None
    assert prefer(PartitionState("u", 0, 2, 1, (2, 3), (2, 3)))  # the controller leads it
    assert not prefer(PartitionState("u", 0, 3, 1, (3, 2, 1), (3, 2, 1)))
    chosen = {leader_and_followers(cluster, random.Random(seed), internal=False,
                                   prefer=prefer)[0].topic for seed in range(20)}
    assert chosen == {"t"}
    assert {leader_and_followers(cluster, random.Random(seed), internal=False)[0].topic
            for seed in range(20)} == {"t", "u"}
    assert reaches_controller(FakeQuorumCluster()) is None, "a dedicated controller is apart"
