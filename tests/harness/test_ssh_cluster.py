"""A cluster on the ssh backend: 3 brokers and 1 ZooKeeper on sshd hosts in namespaces,
through `Cluster.up` and `kchaos cluster up/status/down`, with kill and partition faults.
The hosts share this filesystem, so the inventory's `python` reuses this venv (provisioning
only checks it; the wheel path is in test_provision_ssh.py). Needs root."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer

from harness.control.ssh import ssh_runs
from harness.db import Cluster, ClusterSpec
from harness.db.kafka.broker import KafkaBroker
from harness.db.kafka.distribution import ZOOKEEPER_VERSION, fetch
from harness.store import read_test
from nemesis.partition import Firewall, PartitionNemesis
from nemesis.process import KillNemesis
from tests.support import requirements
from tests.support.runs import killed_by_nemesis
from tests.support.ssh_hosts import SshHosts, require_sshd

pytestmark = pytest.mark.cluster

BROKER_CONFIG = {"zookeeper.session.timeout.ms": "4000"}


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    require_sshd()
    with SshHosts(["n1", "n2", "n3", "z1"], tmp_path_factory.mktemp("sshd")) as made:
        yield made
        deadline = time.monotonic() + 5
        while (left := _ours(made)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert left == []
    assert made.leftovers() == []


def test_cluster_up_faults_logs_and_down(hosts, tmp_path):
    inventory = hosts.inventory(tmp_path / "i.toml", python=sys.executable,
                                dir=str(tmp_path / "opt"))
    spec = ClusterSpec(brokers=3, zookeepers=1, broker_config=BROKER_CONFIG,
                       base_dir=str(tmp_path / "work"), backend="ssh",
                       options={"inventory": str(inventory)})
    started = time.monotonic()
    with Cluster.up(spec, tmp_path / "state") as cluster:
        print(f"cluster up on ssh (3 brokers, 1 ZooKeeper): {time.monotonic() - started:.1f} s")
        assert cluster.brokers == ("n1", "n2", "n3") and cluster.zookeepers == ("z1",)
        assert cluster.bootstrap_servers == ",".join(f"{hosts.address(n)}:9092"
                                                     for n in ("n1", "n2", "n3"))
        assert cluster.zookeeper_mode("z1") == "standalone"
        attached = Cluster.attach(cluster.prefix, tmp_path / "state")
        assert attached.running("n2") and attached.pid("n2") == cluster.pid("n2")
        attached.broker_set.close()
        attached.remote.close()

        before = cluster.broker_set.controller()
        killer = KillNemesis(random.Random(1))
        done = killer.invoke(cluster, {"f": "kill", "value": "controller"})
        old = cluster.broker_node(before[0])
        assert done["value"] == {old: "killed"}
        deadline = time.monotonic() + 30
        while (now := cluster.broker_set.controller()) is None or now[0] == before[0]:
            assert time.monotonic() < deadline, "no new controller"
            time.sleep(0.1)
        assert killer.invoke(cluster, {"f": "start"})["value"] == {old: "started"}
        cluster.broker_set.wait_healthy(timeout=60)

        partitioner = PartitionNemesis(Firewall(), random.Random(0))
        node = cluster.broker_node(cluster.broker_set.controller()[0])
        done = partitioner.invoke(cluster, {"f": "start-partition", "value": "controller"})
        try:
            assert set(done["value"][node]) == set(cluster.nodes) - {node}
            rules = cluster.remote.exec(node, ["nft", "list", "table", "inet", cluster.prefix])
            assert hosts.address("z1") in rules.out
        finally:
            partitioner.invoke(cluster, {"f": "stop-partition"})
        cluster.broker_set.wait_healthy(timeout=60)

        logs = cluster.collect_logs(tmp_path / "logs")
        names = {(p.parent.name, p.name) for p in logs}
        assert ("n1", "broker.log") in names and ("z1", "zookeeper.log") in names
        pids = [cluster.pid(n) for n in cluster.brokers] + [cluster.pid("z1", "zookeeper")]
    assert not any(_alive(pid) for pid in pids)
    assert not (tmp_path / "work" / cluster.prefix).exists()
    assert ssh_runs(tmp_path / "state", include_owned=True) == []


def test_kchaos_cluster_up_status_down_over_ssh(hosts, tmp_path):
    inventory = hosts.inventory(tmp_path / "i.toml", python=sys.executable,
                                dir=str(tmp_path / "opt"), roles={"n3": "zookeeper"})
    env = dict(os.environ, KCHAOS_STATE_DIR=str(tmp_path / "state"))
    kchaos = [sys.executable, "-m", "harness.cli", "cluster"]
    up = subprocess.run([*kchaos, "up", "--backend", "ssh", "--inventory", str(inventory),
                         "--dir", str(tmp_path / "work"), "--json"], env=env,
                        capture_output=True, text=True, timeout=180)
    try:
        assert up.returncode == 0, up.stderr
        info = json.loads(up.stdout)
        roles = {n["name"]: n["role"] for n in info["nodes"]}
        assert roles == {"n1": "broker", "n2": "broker", "n3": "zookeeper",
                         "z1": "zookeeper"}
        status = subprocess.run([*kchaos, "status", "--json"], env=env, capture_output=True,
                                text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        data = json.loads(status.stdout)
        assert data["controller"] is not None
        assert all(b["alive"] and b["registered"] for b in data["brokers"])
        assert {z["mode"] for z in data["zookeepers"]} == {"leader", "follower"}
    finally:
        down = subprocess.run([*kchaos, "down"], env=env, capture_output=True, text=True,
                              timeout=120)
    assert down.returncode == 0 and info["prefix"] in down.stdout, down.stderr
    assert not any(_alive(pid) for n in info["nodes"] for pid in n["pids"].values())
    assert not (tmp_path / "work" / info["prefix"]).exists()


def _ours(hosts: SshHosts) -> list[str]:
    """Live processes in the hosts' namespaces other than sshd and its sessions (one that
    exits, or is a zombie, while it is listed is not counted)."""
    sshd = {popen.pid for popen in hosts.sshd.values()}
    commands = {p: _command(p) for p in hosts.pids() if p not in sshd}
    return [command for p, command in commands.items()
            if _alive(p) and not command.startswith("sshd:")]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_the_reaper_takes_an_ssh_cluster_down_after_kill_9_of_its_owner(hosts, tmp_path):
    inventory = hosts.inventory(tmp_path / "i.toml", python=sys.executable,
                                dir=str(tmp_path / "opt"))
    state = tmp_path / "state"
    script = ("import sys, time\nfrom harness.db import Cluster, ClusterSpec\n"
              f"spec = ClusterSpec(brokers=3, zookeepers=1, broker_config={BROKER_CONFIG!r}, "
              f"base_dir={str(tmp_path / 'work')!r}, backend='ssh', "
              f"options={{'inventory': {str(inventory)!r}}})\n"
              f"c = Cluster.up(spec, __import__('pathlib').Path({str(state)!r}))\n"
              "print(c.prefix, flush=True)\ntime.sleep(300)\n")
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        prefix = owner.stdout.readline().strip()
        assert prefix and _ours(hosts), "the cluster did not come up"
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 10
        while (_ours(hosts) or ssh_runs(state, include_owned=True)) and \
                time.monotonic() < deadline:
            time.sleep(0.2)
        assert _ours(hosts) == [] and ssh_runs(state, include_owned=True) == []
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


@requirements.kafka_jars(ZOOKEEPER_VERSION)
@pytest.mark.long
def test_apache_kafka_runs_on_ssh_hosts(hosts, tmp_path):
    inventory = hosts.inventory(tmp_path / "i.toml", python=sys.executable,
                                dir=str(tmp_path / "opt"))
    distribution = fetch(ZOOKEEPER_VERSION)
    launcher = KafkaBroker(distribution.version, str(distribution.libs), distribution.main_jar)
    spec = ClusterSpec(brokers=3, zookeepers=1, broker_config=BROKER_CONFIG,
                       base_dir=str(tmp_path / "work"), backend="ssh",
                       options={"inventory": str(inventory)}, launcher=launcher)
    with Cluster.up(spec, tmp_path / "state") as cluster:
        assert cluster.broker_set.launcher.libs == str(distribution.libs)  # hosts see it
        assert "kafka.Kafka" in cluster.broker_set.processes["n1"].argv
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
        for value in range(20):
            producer.send("ssh-kafka", str(value).encode()).get(timeout=30)
        producer.close()
        consumer = KafkaConsumer("ssh-kafka", bootstrap_servers=cluster.bootstrap_servers,
                                 auto_offset_reset="earliest", consumer_timeout_ms=10000)
        assert sorted(int(m.value) for m in consumer) == list(range(20))
        consumer.close()
        logs = cluster.collect_logs(tmp_path / "logs")
        assert tmp_path / "logs" / "n1" / "controller.log" in logs
    assert ssh_runs(tmp_path / "state", include_owned=True) == []


@requirements.kafka_jars("4.2.0")
@pytest.mark.kraft
def test_kafka_4_on_kraft_with_a_dedicated_controller_runs_on_ssh_hosts(hosts, tmp_path):
    inventory = hosts.inventory(tmp_path / "i.toml", python=sys.executable,
                                dir=str(tmp_path / "opt"), roles={"z1": "controller"})
    store = tmp_path / "store"
    run = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--backend", "ssh", "--inventory",
         str(inventory), "--db", "kafka", "--kafka-version", "4.2.0", "--nodes", "3",
         "--controllers", "1", "--time-limit", "20", "--nemesis", "kill-controller",
         "--nemesis-interval", "5", "--seed", "2", "--store", str(store)],
        env=dict(os.environ, KCHAOS_STATE_DIR=str(tmp_path / "state")), capture_output=True,
        text=True, timeout=400)
    (tmp_path / "stdout.txt").write_text(run.stdout + "\n--- stderr ---\n" + run.stderr)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "kchaos: VALID" in run.stdout
    folder = (store / "latest").resolve()
    test = read_test(folder)
    assert (test["broker"]["metadata"], test["broker"]["quorum"]) == ("kraft", "dynamic")
    server = (folder / "nodes" / "z1" / "server.properties").read_text()
    assert "process.roles=controller\n" in server
    assert killed_by_nemesis(folder, "z1"), "the dedicated controller on z1 was never killed"
    assert (folder / "nodes" / "z1" / "controller-events.jsonl").stat().st_size > 0
    assert ssh_runs(tmp_path / "state", include_owned=True) == []
