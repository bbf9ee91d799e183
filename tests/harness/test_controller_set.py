"""Dedicated KRaft controllers as a service set, over a fake remote: their node ids and
configuration, starting them, reading the quorum from their state files, waiting for a
leader, and their record in cluster.json."""

from __future__ import annotations

import json

import pytest

from harness.control import Result
from harness.control.fake import FakeRemote
from harness.db.cluster import ClusterSpec
from harness.db.controllers import ControllerSet
from harness.db.files import ServiceExited
from harness.db.kafka.broker import KafkaBroker
from harness.db.launchers import launcher_from_json

NODES = ("n1", "n2", "n3", "c1", "c2", "c3")
KRAFT = KafkaBroker("4.1.1", "/libs", "kafka_2.13-4.1.1.jar", metadata="kraft",
                    cluster_id="abc")


def remote_with_states(states: dict[str, dict]) -> FakeRemote:
    """A remote whose nodes see Kafka's jars and whose controllers' quorum-state files say
    `states` (by node)."""
    def answer(node, argv):
        if argv[0] == "test":
            return Result(0, "", "")
        if argv[0] == "cat" and node in states:
            return Result(0, json.dumps(states[node]), "")
        return Result(1, "", "no such file")
    return FakeRemote(NODES, handler=answer)


def controllers(remote: FakeRemote) -> ControllerSet:
    launcher = KRAFT.prepare(remote, ("n1", "n2", "n3"), "/w", ("c1", "c2", "c3"))
    return ControllerSet(remote, ("c1", "c2", "c3"), "/w", 3, launcher.for_controllers(),
                         {"min.insync.replicas": "2"})


def test_brokers_beside_dedicated_controllers_name_them_as_the_voters():
    remote = remote_with_states({})
    brokers = KRAFT.prepare(remote, ("n1", "n2", "n3"), "/w", ("c1", "c2", "c3"))
    server = brokers.configuration(1, "192.0.2.10", "", "/w/n1/broker", 3, {})[
        "server.properties"]
    assert "process.roles=broker\n" in server
    assert "controller.quorum.voters=101@192.0.2.13:9093,102@192.0.2.14:9093," in server
    assert "listeners=PLAINTEXT://192.0.2.10:9092\n" in server
    combined = KRAFT.prepare(remote, ("n1", "n2", "n3"), "/w")
    assert combined.roles == "broker,controller" and combined.voters.startswith("1@192.0.2.10")


def test_controllers_get_ids_from_101_and_a_controller_only_configuration():
    remote = remote_with_states({})
    quorum = controllers(remote)
    assert [quorum.node_id(n) for n in quorum.nodes] == [101, 102, 103]
    assert (quorum.node_of(102), quorum.node_of(3), quorum.node_of(104)) == ("c2", None, None)
    assert quorum.start() == ["c1", "c2", "c3"] and quorum.start() == []
    server = remote.files[("c2", "/w/c2/controller/server.properties")].decode()
    assert "process.roles=controller\n" in server and "node.id=102\n" in server
    assert "listeners=CONTROLLER://192.0.2.14:9093\n" in server and ":9092" not in server
    assert "min.insync.replicas=2\n" in server and "default.replication.factor=3\n" in server
    again = ControllerSet.from_json(remote, json.loads(json.dumps(quorum.to_json())),
                                    launcher_from_json(quorum.to_json()["launcher"]))
    assert again.processes == quorum.processes and again.launcher == quorum.launcher


def test_the_quorum_is_the_newest_epoch_a_running_controller_names():
    remote = remote_with_states({"c1": {"leaderId": 101, "leaderEpoch": 1},
                                 "c2": {"leaderId": 103, "leaderEpoch": 2},
                                 "c3": {"leaderId": -1, "leaderEpoch": 3}})
    quorum = controllers(remote)
    assert quorum.quorum() is None, "nothing runs yet"
    quorum.start()
    assert quorum.quorum() == (103, 2)
    quorum.wait_leader(timeout=1)


def test_waiting_for_a_leader_says_which_controller_exited_or_times_out():
    remote = remote_with_states({})
    quorum = controllers(remote)
    quorum.start()
    with pytest.raises(TimeoutError, match="no quorum leader among the controllers"):
        quorum.wait_leader(timeout=0.2)
    quorum.kill("c3")
    remote.files[("c3", "/w/c3/controller/broker.log")] = b"ERROR Exiting Kafka: bad id\n"
    with pytest.raises(ServiceExited, match="controller on c3 exited: ERROR Exiting Kafka"):
        quorum.wait_leader(timeout=5)
    ControllerSet.none(remote, "/w").wait_leader(timeout=0)


def test_a_cluster_spec_names_its_controllers_and_refuses_them_with_zookeeper():
    spec = ClusterSpec(brokers=3, zookeepers=0, launcher=KRAFT, controllers=3)
    assert spec.nodes == NODES and spec.controller_nodes == ("c1", "c2", "c3")
    assert ClusterSpec.from_json(spec.to_json()) == spec
    with pytest.raises(ValueError, match="with ZooKeeper take no dedicated controllers"):
        ClusterSpec(brokers=3, zookeepers=1, controllers=3)
    with pytest.raises(ValueError, match="need 0 to 9 dedicated controllers"):
        ClusterSpec(brokers=3, zookeepers=0, launcher=KRAFT, controllers=10)
