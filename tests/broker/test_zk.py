"""broker/zk.py against a real ZooKeeper; each test works under its own chroot."""

from __future__ import annotations

import uuid

import pytest
from kazoo.client import KazooClient

from broker import zk as zkl

pytestmark = pytest.mark.cluster


@pytest.fixture
def client(zookeeper):
    chroot = f"/t-{uuid.uuid4().hex[:8]}"
    setup = KazooClient(hosts=zookeeper.connect)
    setup.start(timeout=10)
    setup.ensure_path(chroot)
    setup.stop()
    setup.close()
    zk = KazooClient(hosts=zookeeper.connect + chroot, timeout=4)
    zk.start(timeout=10)
    zkl.ensure_paths(zk)
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def reg(broker_id: int, rack: str | None = None) -> zkl.BrokerRegistration:
    return zkl.BrokerRegistration(broker_id, "127.0.0.1", 9090 + broker_id, "127.0.0.1",
                                  9190 + broker_id, rack)


def test_register_and_read_brokers(client):
    epoch1 = zkl.register_broker(client, reg(1))
    epoch2 = zkl.register_broker(client, reg(2, "r2"))
    assert epoch2 > epoch1 > 0
    assert zkl.read_brokers(client) == {1: reg(1), 2: reg(2, "r2")}
    assert {b: e for b, (_, e) in zkl.read_broker_epochs(client).items()} == {1: epoch1, 2: epoch2}
    with pytest.raises(zkl.BrokerIdInUseError, match="broker.id 1"):
        zkl.register_broker(client, reg(1))
    data, stat = client.get("/brokers/ids/1")
    assert stat.ephemeralOwner == client.client_id[0]
    assert b'"CONTROLLER://127.0.0.1:9191"' in data


def test_topic_assignment_and_config(client):
    zkl.create_topic(client, "t", {0: [1, 2], 1: [2, 1]}, {"min.insync.replicas": "2"})
    assert zkl.read_topic_assignment(client, "t") == {0: [1, 2], 1: [2, 1]}
    assert zkl.read_topic_config(client, "t") == {"min.insync.replicas": "2"}
    assert zkl.read_topics(client) == ["t"]
    assert zkl.read_topic_assignment(client, "missing") is None
    assert zkl.read_topic_config(client, "missing") == {}
    with pytest.raises(zkl.TopicExistsError):
        zkl.create_topic(client, "t", {0: [1]}, None)


def test_partition_state_cas_and_fencing(client):
    epoch, epoch_version = zkl.register_controller(client, 1)
    assert epoch == 1
    state = zkl.LeaderIsr(1, 0, (1, 2), epoch)
    version = zkl.write_partition_state_fenced(client, "t", 0, state, None, epoch_version)
    assert version == 0
    assert zkl.read_partition_state(client, "t", 0) == (state, 0)
    shrunk = zkl.LeaderIsr(1, 0, (1,), epoch)
    assert zkl.update_partition_state(client, "t", 0, shrunk, 0) == 1
    assert zkl.update_partition_state(client, "t", 0, state, 0) is None
    assert zkl.write_partition_state_fenced(client, "t", 0, state, 0, epoch_version) is None
    client.delete(zkl.CONTROLLER)
    epoch2, epoch_version2 = zkl.register_controller(client, 2)
    assert (epoch2, epoch_version2) == (2, epoch_version + 1)
    with pytest.raises(zkl.ControllerMovedError):
        zkl.write_partition_state_fenced(client, "t", 0, state, 1, epoch_version)
    assert zkl.read_partition_state(client, "t", 0) == (shrunk, 1)


def test_controller_registration(client):
    assert zkl.read_controller(client) is None
    assert zkl.register_controller(client, 3) == (1, 1)
    assert zkl.read_controller(client) == 3
    assert zkl.register_controller(client, 4) is None
    assert zkl.read_controller_epoch(client) == (1, 1)


def test_isr_change_notifications(client):
    zkl.notify_isr_change(client, [("t", 0), ("t", 1)])
    zkl.notify_isr_change(client, [("u", 0)])
    children = client.get_children(zkl.ISR_CHANGE_NOTIFICATION)
    assert all(c.startswith("isr_change_") for c in children) and len(children) == 2
    assert zkl.read_isr_change_notifications(client) == {("t", 0), ("t", 1), ("u", 0)}
    assert client.get_children(zkl.ISR_CHANGE_NOTIFICATION) == []


def test_admin_znodes(client):
    zkl.write_reassignment(client, {("t", 0): [2, 3]})
    assert zkl.read_reassignment(client) == {("t", 0): [2, 3]}
    zkl.write_reassignment(client, {})
    assert zkl.read_reassignment(client) == {}
    client.create(zkl.PREFERRED_REPLICA_ELECTION,
                  b'{"version":1,"partitions":[{"topic":"t","partition":1}]}', makepath=True)
    assert zkl.read_preferred_election(client) == {("t", 1)}
    assert client.exists(zkl.PREFERRED_REPLICA_ELECTION) is None
