"""crash-vm and pause-vm: which machines they switch and what they restart (a machine
control of states in memory; `make test-vagrant` runs them on KVM machines)."""

from __future__ import annotations

import random

import pytest

from nemesis.capabilities import VMControl
from nemesis.vm import VMNemesis


class Machines:
    """Machine states as libvirt names them, changed the way virsh would."""

    def __init__(self, nodes):
        self.states = dict.fromkeys(nodes, "running")
        self.calls = []

    def _set(self, node, action, state):
        self.calls.append((action, node))
        self.states[node] = state

    def power_off(self, node):
        self._set(node, "destroy", "shut off")

    def power_on(self, node):
        self._set(node, "start", "running")

    def suspend(self, node):
        self._set(node, "suspend", "paused")

    def resume(self, node):
        self._set(node, "resume", "running")

    def machine_state(self, node):
        return self.states[node]


class Cluster:
    """A db of machines (`VMControl`) with ZooKeeper, whose services start at once."""

    brokers = ("n1", "n2")
    zookeepers = ("z1",)
    nodes = ("n1", "n2", "z1")
    bootstrap_servers = "n1:9092"
    session_timeout = 6.0

    def __init__(self):
        self.remote = Machines(self.nodes)
        self.started = []

    def broker_id(self, node):
        return self.brokers.index(node) + 1

    def broker_node(self, broker_id):
        return self.brokers[broker_id - 1]

    def machine_state(self, node):
        return self.remote.machine_state(node)

    def power_off(self, node):
        self.remote.power_off(node)

    def power_on(self, node):
        self.remote.power_on(node)

    def suspend_machine(self, node):
        self.remote.suspend(node)

    def resume_machine(self, node):
        self.remote.resume(node)

    def start(self, node, service="broker"):
        self.started.append((node, service))
        return True

    def running(self, node, service="broker"):
        return True

    kill = stop = running  # the faults here only start services

    def zookeeper_mode(self, node):
        return "standalone"

    def registered(self, node):
        return True


def test_crash_vm_powers_a_machine_off_and_start_vm_boots_it_with_its_services():
    cluster, nemesis = Cluster(), VMNemesis(random.Random(1))
    nemesis.setup(cluster)
    crashed = nemesis.invoke(cluster, {"f": "crash-vm", "value": "zookeeper"})["value"]
    assert crashed == {"z1": "powered-off"}
    assert nemesis.invoke(cluster, {"f": "crash-vm", "value": "zookeeper"})["value"] == \
        "no-target"
    assert nemesis.invoke(cluster, {"f": "crash-vm", "value": "broker"})["value"].keys() \
        <= {"n1", "n2"}
    started = nemesis.invoke(cluster, {"f": "start-vm", "value": None})["value"]
    assert started["z1"] == {"started": ["zookeeper"]}
    assert len(started) == 2 and all(s.get("started") for s in started.values())
    assert set(cluster.remote.states.values()) == {"running"}
    assert cluster.started[0] == ("z1", "zookeeper")
    assert nemesis.invoke(cluster, {"f": "start-vm", "value": None})["value"] == "no-target"


def test_start_vm_waits_for_a_zookeeper_slower_than_the_clusters_own_wait():
    class SlowZooKeeper(Cluster):
        modes = iter([None, None, "standalone"])

        def start(self, node, service="broker"):
            super().start(node, service)
            if service == "zookeeper":
                raise TimeoutError("ZooKeeper on ['z1'] not serving after 30 s")
            return True

        def zookeeper_mode(self, node):
            return next(self.modes)

    cluster, nemesis = SlowZooKeeper(), VMNemesis(random.Random(1))
    cluster.remote.power_off("z1")
    cluster.remote.power_off("n1")
    started = nemesis.invoke(cluster, {"f": "start-vm", "value": None})["value"]
    assert started == {"n1": {"started": ["broker"]}, "z1": {"started": ["zookeeper"]}}
    assert cluster.started == [("z1", "zookeeper"), ("n1", "broker")]


def test_pause_vm_freezes_one_machine_and_resume_vm_thaws_every_frozen_one():
    cluster, nemesis = Cluster(), VMNemesis(random.Random(2))
    paused = nemesis.invoke(cluster, {"f": "pause-vm", "value": "one"})["value"]
    (node,) = paused
    assert cluster.remote.states[node] == "paused"
    assert nemesis.invoke(cluster, {"f": "resume-vm", "value": None})["value"] == \
        {node: "resumed"}
    assert cluster.remote.calls == [("suspend", node), ("resume", node)]
    with pytest.raises(ValueError, match="one, broker or zookeeper"):
        nemesis.invoke(cluster, {"f": "pause-vm", "value": "leader"})


def test_one_nemesis_claims_both_machine_faults_and_the_fake_is_a_machine_db():
    assert VMNemesis(random.Random()).fs == {"crash-vm", "start-vm", "pause-vm", "resume-vm"}
    assert isinstance(Cluster(), VMControl)
