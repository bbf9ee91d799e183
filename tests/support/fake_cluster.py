"""A fake cluster for nemesis unit tests: fake remote processes and a fake ZooKeeper."""

from __future__ import annotations

import signal

from harness.control.fake import FakeRemote
from harness.db.znodes import parse_partition_state, read_snapshot, state_path

NODES = ["n1", "n2", "n3", "n4", "n5"]


class FakeCluster:
    """A running db with every capability but VM control (`nemesis.capabilities`) over
    FakeRemote, with a fixed controller and partition table in a fake ZooKeeper."""

    bootstrap_servers = "127.0.0.1:9092"

    def __init__(self):
        self.remote = FakeRemote(NODES + ["z1"])
        self.nodes = tuple(NODES + ["z1"])
        self.brokers = tuple(NODES)
        self.zookeepers = ("z1",)
        self.session_timeout = 1.0
        self.replica_lag_time = 1.0
        self.pids = {n: self.remote.spawn(n, ["broker"], "log").pid for n in NODES}
        self.zk_pid = self.remote.spawn("z1", ["zk"], "log").pid
        self.zk = FakeZk()

    def broker_id(self, node):
        return NODES.index(node) + 1

    def broker_node(self, broker_id):
        return NODES[broker_id - 1]

    def zookeeper_mode(self, node):
        return "standalone"

    def firewall(self, node, drop_from=(), loss_from=None):
        self.remote.firewall(node, drop_from, loss_from)

    def snapshot(self):
        return read_snapshot(self.zk)

    def controller(self):
        controller = self.snapshot().controller
        return None if controller is None else self.broker_node(controller)

    def partition_state(self, topic, partition):
        try:
            data, _ = self.zk.get_async(state_path(topic, partition)).get()
        except KeyError:
            return None
        return parse_partition_state(topic, partition, data)

    def registered(self, node):
        return self.zk.exists_async(f"/brokers/ids/{self.broker_id(node)}").get() is not None

    def coordinator(self, key, kind="group"):
        return None

    def coordinator_partition(self, key, kind="group"):
        return "__consumer_offsets", 0

    def _pid(self, node, service):
        return self.zk_pid if service == "zookeeper" else self.pids[node]

    def running(self, node, service="broker"):
        return self.remote.running(node, self._pid(node, service))

    def kill(self, node, service="broker"):
        return self.remote.signal(node, self._pid(node, service), signal.SIGKILL)

    def stop(self, node, service="broker"):
        return self.remote.signal(node, self._pid(node, service), signal.SIGTERM)

    def pause(self, node, service="broker"):
        return self.remote.signal(node, self._pid(node, service), signal.SIGSTOP)

    def resume(self, node, service="broker"):
        return self.remote.signal(node, self._pid(node, service), signal.SIGCONT)

    def start(self, node, service="broker"):
        if self.running(node, service):
            return False
        self.pids[node] = self.remote.spawn(node, ["broker"], "log").pid
        return True


class FakeResult:
    def __init__(self, value):
        self.value = value

    def get(self, timeout=None):
        return self.value


class FakeZk:
    """Kazoo's async calls over a dict of znodes: controller 2, t-0 led by 4."""

    znodes = {
        "/controller": b'{"version":1,"brokerid":2,"timestamp":"0"}',
        "/controller_epoch": b"7",
        "/brokers/ids": b"", "/brokers/ids/1": b"", "/brokers/ids/2": b"",
        "/brokers/topics": b"",
        "/brokers/topics/t": b'{"version":2,"partitions":{"0":[4,5,1]}}',
        "/brokers/topics/t/partitions": b"",
        "/brokers/topics/t/partitions/0": b"",
        "/brokers/topics/t/partitions/0/state":
            b'{"controller_epoch":7,"leader":4,"version":1,"leader_epoch":3,"isr":[4,5,1]}',
    }

    def exists_async(self, path):
        return FakeResult(object() if path in self.znodes else None)

    def get_async(self, path):
        return FakeResult((self.znodes[path], None))

    def get_children_async(self, path):
        prefix = path.rstrip("/") + "/"
        return FakeResult(sorted({p[len(prefix):].split("/")[0] for p in self.znodes
                                  if p.startswith(prefix)}))
