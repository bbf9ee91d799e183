"""`kchaos cluster up | status | down` with real brokers and ZooKeeper on namespaces, cleanup
after a SIGKILLed harness, and the process nemeses against a live cluster. Needs root."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import pytest
from kazoo.client import KazooClient, KazooState

from harness.db import Cluster, ClusterSpec
from harness.db import down as harness_down
from harness.db.brokers import metadata
from nemesis.package import package
from nemesis.partition import Firewall, PartitionNemesis
from nemesis.process import ExpireSessionNemesis, KillNemesis, PauseZooKeeperNemesis
from tests.support import requirements
from tests.support.cleanup import assert_nothing_left

pytestmark = [
    pytest.mark.cluster,
    requirements.root(),
]


def kchaos(env, *args, timeout=120):
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_cli_up_status_down(tmp_path):
    env = dict(os.environ, KCHAOS_STATE_DIR=str(tmp_path / "state"))
    try:
        up = kchaos(env, "cluster", "up", "--nodes", "3", "--zookeepers", "1", "--dir",
                    str(tmp_path / "nodes"), "--broker-config", "num.partitions=2", "--json")
        assert up.returncode == 0, up.stderr
        info = json.loads(up.stdout)
        assert len(info["bootstrap_servers"].split(",")) == 3
        assert [n["name"] for n in info["nodes"]] == ["n1", "n2", "n3", "z1"]
        assert all(n["pids"] and n["address"].startswith("10.77.") for n in info["nodes"])
        assert {n["role"] for n in info["nodes"]} == {"broker", "zookeeper"}
        properties = (tmp_path / "nodes").glob("kc*/n1/broker/server.properties")
        assert "num.partitions=2" in next(properties).read_text()

        status = kchaos(env, "cluster", "status", "--json")
        assert status.returncode == 0, status.stderr
        state = json.loads(status.stdout)
        assert state["bootstrap_servers"] == info["bootstrap_servers"]
        assert state["controller"]["broker_id"] in (1, 2, 3)
        assert state["controller"]["epoch"] >= 1
        assert [(b["id"], b["alive"]) for b in state["brokers"]] == [(1, True), (2, True),
                                                                      (3, True)]
        assert state["zookeepers"][0]["alive"] and state["zookeepers"][0]["mode"]
        pids = {n["name"]: n["pids"] for n in info["nodes"]}
        assert state["brokers"][0]["pid"] == pids["n1"]["broker"]
        assert isinstance(state["partitions"], list)
        text = kchaos(env, "cluster", "status")
        assert "controller: broker" in text.stdout
    finally:
        down = kchaos(env, "cluster", "down")
    assert down.returncode == 0 and "removed 1" in down.stdout, down.stderr
    assert_nothing_left(info["prefix"], tmp_path / "state")
    assert list((tmp_path / "nodes").iterdir()) == []
    assert "removed 0" in kchaos(env, "cluster", "down").stdout


def test_a_second_cluster_up_says_so_and_status_names_the_flag(tmp_path):
    env = dict(os.environ, KCHAOS_STATE_DIR=str(tmp_path / "state"))
    args = ("cluster", "up", "--nodes", "1", "--zookeepers", "1", "--dir",
            str(tmp_path / "nodes"), "--json")
    try:
        first = kchaos(env, *args)
        assert first.returncode == 0, first.stderr
        assert "already up" not in first.stderr
        second = kchaos(env, *args)
        assert second.returncode == 0, second.stderr
        prefix = json.loads(first.stdout)["prefix"]
        assert f"1 cluster ({prefix}) is already up" in second.stderr
        assert "--run PREFIX" in second.stderr
        status = kchaos(env, "cluster", "status")
        assert status.returncode == 3
        assert "2 clusters (" in status.stderr and "name one with --run" in status.stderr
        named = kchaos(env, "cluster", "status", "--run", prefix, "--json")
        assert named.returncode == 0 and json.loads(named.stdout)["prefix"] == prefix
    finally:
        down = kchaos(env, "cluster", "down")
    assert down.returncode == 0 and "removed 2" in down.stdout, down.stderr


def test_cluster_down_after_sigkill_of_the_harness(tmp_path):
    env = dict(os.environ, KCHAOS_STATE_DIR=str(tmp_path / "state"))
    script = ("from harness.db import Cluster, ClusterSpec\nimport time\n"
              "c = Cluster.up(ClusterSpec(brokers=2, zookeepers=1), reaper=False)\n"
              "print(c.prefix, flush=True)\ntime.sleep(300)\n")
    harness = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                               text=True)
    prefix = harness.stdout.readline().strip()
    try:
        assert prefix.startswith("kc")
        harness.kill()
        harness.wait()
        assert subprocess.run(["ip", "netns", "pids", f"{prefix}-n1"], capture_output=True,
                              text=True).stdout.strip()
        down = kchaos(env, "cluster", "down")
    finally:
        harness.kill()
        harness.wait()
        if prefix.startswith("kc"):
            harness_down(prefix, tmp_path / "state")
    assert down.returncode == 0 and prefix in down.stdout, down.stderr
    assert_nothing_left(prefix, tmp_path / "state")
    assert not os.path.exists(f"/tmp/kchaos/{prefix}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    spec = ClusterSpec(brokers=3, zookeepers=3,
                       broker_config={"zookeeper.session.timeout.ms": "4000"})
    with Cluster.up(spec, tmp_path_factory.mktemp("state")) as running:
        yield running
    assert_nothing_left(running.prefix)


def controller(cluster):
    return cluster.broker_set.controller()


def test_kill_controller_elects_a_new_one_with_a_higher_epoch(cluster):
    before = controller(cluster)
    killer = KillNemesis(random.Random(1))
    done = killer.invoke(cluster, {"type": "info", "process": "nemesis", "f": "kill",
                                   "value": "controller"})
    old_node = cluster.broker_node(before[0])
    assert done["value"] == {old_node: "killed"} and done["type"] == "info"
    deadline = time.monotonic() + 30
    while (now := controller(cluster)) is None or now[0] == before[0]:
        assert time.monotonic() < deadline, "no new controller"
        time.sleep(0.1)
    assert now[1] > before[1]
    assert killer.invoke(cluster, {"f": "start"})["value"] == {old_node: "started"}
    cluster.broker_set.wait_healthy(timeout=60)


def test_isolate_controller_targets_the_current_controller(cluster):
    cluster.broker_set.wait_healthy(timeout=60)
    node = cluster.broker_node(controller(cluster)[0])
    partitioner = PartitionNemesis(Firewall(), random.Random(0))
    done = partitioner.invoke(cluster, {"f": "start-partition", "value": "controller"})
    try:
        assert set(done["value"][node]) == set(cluster.nodes) - {node}
    finally:
        partitioner.invoke(cluster, {"f": "stop-partition"})
    cluster.broker_set.wait_healthy(timeout=60)


def test_pause_zookeeper_majority_loses_sessions_and_recovers(cluster):
    states = []
    observer = KazooClient(hosts=cluster.zookeeper_connect, timeout=10)
    observer.add_listener(states.append)
    observer.start(timeout=15)
    pauser = PauseZooKeeperNemesis(random.Random(0))
    try:
        done = pauser.invoke(cluster, {"f": "pause-zookeeper", "value": "majority"})
        assert len(done["value"]) == 2 and set(done["value"].values()) == {"paused"}
        deadline = time.monotonic() + 20
        while KazooState.SUSPENDED not in states:
            assert time.monotonic() < deadline, f"no connection loss seen: {states}"
            time.sleep(0.1)
    finally:
        resumed = pauser.invoke(cluster, {"f": "resume-zookeeper"})
    assert set(resumed["value"]) == set(done["value"])
    deadline = time.monotonic() + 30
    while states[-1] != KazooState.CONNECTED:
        assert time.monotonic() < deadline, f"no recovery: {states}"
        time.sleep(0.1)
    observer.stop()
    observer.close()
    cluster.broker_set.wait_healthy(timeout=60)


def test_expire_session_makes_the_controller_see_the_broker_leave_and_return(cluster):
    cluster.broker_set.wait_healthy(timeout=60)
    controller_id = controller(cluster)[0]
    controller_node = cluster.broker_node(controller_id)
    victim = next(n for n in cluster.brokers if cluster.broker_id(n) != controller_id)
    victim_id = cluster.broker_id(victim)
    controller_address = cluster.remote.address(controller_node)
    owner = cluster.broker_set.registration_owner(victim_id)
    done = ExpireSessionNemesis(Firewall(), random.Random(0)).invoke(
        cluster, {"f": "expire-session", "value": [victim]})
    assert done["value"] == {victim: "expired"}
    deadline = time.monotonic() + 30
    while cluster.broker_set.registration_owner(victim_id) in (None, owner):
        assert time.monotonic() < deadline, "the broker did not register again"
        time.sleep(0.1)
    deadline = time.monotonic() + 30
    while victim_id not in metadata(controller_address)[1]:
        assert time.monotonic() < deadline, "the controller did not see the broker return"
        time.sleep(0.1)
    log = f"{cluster.broker_set.directory(controller_node)}/data/controller-events.jsonl"
    # Either the controller saw the broker leave and then return, or (when it registered
    # again before the controller read the children) one change with a new broker epoch.
    # The controller's event thread handles the watch in its own time (the broker may be
    # back in its metadata before it did, having never left it): read until it has.
    deadline = time.monotonic() + 30
    while True:
        changes = [event for event in map(json.loads, cluster.remote.exec(
            controller_node, ["cat", log]).out.splitlines())
            if event["event"] == "broker-change"]
        left = [i for i, e in enumerate(changes) if victim_id in e["dead"]]
        returned = left and any(victim_id in e["new"] for e in changes[left[0] + 1:])
        bounced = any(victim_id in e.get("bounced", []) for e in changes)
        if returned or bounced or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert returned or bounced, changes
    assert cluster.running(victim)


def test_final_heal_leaves_everything_running_and_open(cluster):
    pack = package("kill-all,pause-zookeeper,partition-halves", seed=5)
    pack.nemesis.invoke(cluster, {"f": "start-partition", "value": "halves"})
    pack.nemesis.invoke(cluster, {"f": "kill", "value": "all"})
    pack.nemesis.invoke(cluster, {"f": "pause-zookeeper", "value": "leader"})
    assert not any(cluster.running(n) for n in cluster.brokers)
    for op in pack.final_generator:
        done = pack.nemesis.invoke(cluster, op)
        assert done["type"] == "info"
    assert all(cluster.running(n) for n in cluster.brokers)
    cluster.broker_set.wait_healthy(timeout=60)


def test_leader_from_followers_cuts_the_live_leader_off_its_replicas(cluster, tmp_path):
    from kafka import KafkaProducer

    cluster.broker_set.wait_healthy(timeout=60)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers.split(","), acks="all")
    try:
        producer.send("lff", b"x").get(timeout=30)
    finally:
        producer.close(timeout=5)
    partitioner = PartitionNemesis(Firewall(), random.Random(0))
    done = partitioner.invoke(cluster, {"f": "start-partition", "value": {
        "shape": "leader-from-followers", "topic": "lff", "partition": 0}})
    try:
        state = json.loads(cluster.zk.get("/brokers/topics/lff/partitions/0/state")[0])
        leader = cluster.broker_node(state["leader"])
        followers = {n for n in cluster.brokers if n != leader}
        assert set(done["value"][leader]) == followers
        assert all(done["value"][f] == [leader] for f in followers)
        assert not any(z in done["value"] for z in cluster.zookeepers)
    finally:
        partitioner.invoke(cluster, {"f": "stop-partition"})
    logs = cluster.collect_logs(tmp_path / "logs")
    names = {(p.parent.name, p.name) for p in logs}
    assert ("n1", "broker.log") in names and ("z1", "zookeeper.log") in names
    assert ("n1", "server.properties") in names


def test_colocated_zookeeper(tmp_path):
    spec = ClusterSpec(brokers=3, zookeepers=1, colocate=True)
    with Cluster.up(spec, tmp_path / "state") as running:
        assert running.zookeepers == ("n1",) and running.nodes == ("n1", "n2", "n3")
        roles = {n["name"]: n["role"] for n in running.processes()["nodes"]}
        assert roles["n1"] == "broker+zookeeper" and roles["n2"] == "broker"
    assert_nothing_left(running.prefix, tmp_path / "state")
