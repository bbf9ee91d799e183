"""Every partition shape applied to real namespaces and checked by TCP reachability between
them, then healed. Nodes run plain TCP listeners; the controller and partition leader are
read from a fake ZooKeeper (the real one is exercised in test_cluster_*). Needs root."""

from __future__ import annotations

import random
import socket

import pytest

from harness.control.local import LocalRemote
from nemesis import grudge as g
from nemesis.package import package
from nemesis.partition import Firewall, PacketLossNemesis, PartitionNemesis
from tests.support import requirements
from tests.support.cleanup import assert_nothing_left, listen_everywhere, reachability
from tests.support.fake_cluster import FakeCluster, FakeZk

pytestmark = [
    pytest.mark.cluster,
    requirements.root(),
]

BROKERS = ("n1", "n2", "n3", "n4", "n5")


class ListenerCluster(FakeCluster):
    """A db enough for partitions: five "brokers" and one "ZooKeeper" node on real
    namespaces, its metadata in a fake ZooKeeper."""

    def __init__(self, remote: LocalRemote) -> None:
        self.remote = remote
        self.nodes = remote.nodes
        self.brokers = BROKERS
        self.zookeepers = ("z1",)
        self.session_timeout = self.replica_lag_time = 1.0
        self.zk = FakeZk()

    def clients_address(self) -> str:
        return self.remote.clients_address()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    remote = LocalRemote.provision([*BROKERS, "z1"], tmp_path_factory.mktemp("state"))
    try:
        listen_everywhere(remote, tmp_path_factory.mktemp("logs"))
        yield ListenerCluster(remote)
    finally:
        remote.destroy()
        assert_nothing_left(remote.network.prefix)


def expected(cluster, grudge):
    return {(a, b): g.reachable(grudge, a, b) for a in cluster.nodes for b in cluster.nodes
            if a != b}


@pytest.mark.parametrize("shape", ["one", "halves", "one-way", "ring", "bridge", "controller",
                                   "zookeeper", "leader-from-followers"])
def test_partition_shape_matches_tcp_reachability_and_heals(cluster, shape):
    partitioner = PartitionNemesis(Firewall(), random.Random(shape))
    done = partitioner.invoke(cluster, {"type": "info", "process": "nemesis",
                                        "f": "start-partition", "value": shape})
    grudge = {node: frozenset(dropped) for node, dropped in done["value"].items()}
    assert grudge, done
    seen = reachability(cluster.remote)
    assert seen == expected(cluster, grudge)
    assert not all(seen.values())
    if shape == "controller":
        assert set(grudge["n2"]) == set(cluster.nodes) - {"n2"}
    if shape == "zookeeper":
        assert set(grudge["z1"]) == set(BROKERS)
    if shape == "leader-from-followers":
        assert done["value"] == {"n1": ["n4"], "n4": ["n1", "n5"], "n5": ["n4"]}
    if shape == "one-way":
        receivers = set(grudge)
        assert len(receivers) == len(cluster.nodes) // 2
        assert all(dropped == set(cluster.nodes) - receivers for dropped in grudge.values())
    healed = partitioner.invoke(cluster, {"f": "stop-partition"})
    assert healed["value"] == "network-healed"
    assert all(reachability(cluster.remote).values())


def reaches_from_here(remote: LocalRemote, node: str) -> bool:
    try:
        socket.create_connection((remote.address(node), 7000), 0.5).close()
    except OSError:
        return False
    return True


def test_isolate_clients_cuts_the_leader_from_this_host_only(cluster):
    partitioner = PartitionNemesis(Firewall(), random.Random(3))
    done = partitioner.invoke(cluster, {"type": "info", "process": "nemesis",
                                        "f": "start-partition", "value": "clients"})
    value = done["value"]
    assert value["leads"] is True and value["broker"] in BROKERS
    assert value["clients"] == cluster.remote.network.gateway
    cut = value["broker"]
    assert not reaches_from_here(cluster.remote, cut)
    assert all(reaches_from_here(cluster.remote, node) for node in cluster.nodes if node != cut)
    assert all(reachability(cluster.remote).values()), "the nodes still reach each other"
    partitioner.invoke(cluster, {"f": "stop-partition"})
    assert reaches_from_here(cluster.remote, cut)


def test_total_packet_loss_and_heal(cluster):
    loss = PacketLossNemesis(Firewall())
    done = loss.invoke(cluster, {"f": "start-packet-loss", "value": {"probability": 1.0}})
    assert done["value"]["probability"] == 1.0
    assert not any(reachability(cluster.remote).values())
    loss.invoke(cluster, {"f": "stop-packet-loss"})
    assert all(reachability(cluster.remote).values())


def test_partial_packet_loss_drops_some_connections(cluster):
    loss = PacketLossNemesis(Firewall())
    loss.invoke(cluster, {"f": "start-packet-loss", "value": {"probability": 0.5}})
    rules = cluster.remote.exec("n1", ["nft", "list", "table", "inet",
                                       cluster.remote.network.table]).out
    assert "numgen random mod 10000 < 5000 drop" in rules
    loss.invoke(cluster, {"f": "stop-packet-loss"})
    assert all(reachability(cluster.remote).values())


def test_package_heal_opens_every_link(cluster):
    pack = package("partition-halves", seed=2)
    pack.nemesis.invoke(cluster, {"f": "start-partition", "value": "halves"})
    assert not all(reachability(cluster.remote).values())
    pack.nemesis.routes["heal"].firewall.heal(cluster)
    assert all(reachability(cluster.remote).values())
