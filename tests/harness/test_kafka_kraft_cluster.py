"""Real Apache Kafka 4.1.1 in KRaft mode (jars cached by the bootstrap): the smoke of
`make test`, a short `kchaos run` with a kill of the active controller that ends valid;
and in `make test-kraft`: `kchaos cluster up | status | down` with no ZooKeeper, storage
formatted by Kafka's StorageTool with one cluster id, the quorum read from the
quorum-state files and described by DescribeQuorum (high watermark, lags, no fenced
broker), leaders from Metadata, and a new quorum epoch after the active controller's kill;
then dedicated controllers (`--controllers 3`) under the quorum faults: a majority of the
quorum killed, a broker fenced by its cut from the controllers, the quorum split. Needs
root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness.db import Cluster
from harness.store import read_test
from tests.support import requirements
from tests.support.cleanup import assert_nothing_left

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(300),
    requirements.root(),
    requirements.kafka_jars("4.1.1"),
]

KCHAOS = str(Path(sys.executable).parent / "kchaos")


def kchaos(env, *args, timeout=240):
    return subprocess.run([KCHAOS, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def wait_for(read, seconds=60.0):
    deadline = time.monotonic() + seconds
    while (found := read()) is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert found is not None
    return found


@pytest.mark.kraft
def test_kraft_cluster_up_status_a_controller_kill_and_down(tmp_path):
    env = dict(os.environ, KCHAOS_STATE_DIR=str(tmp_path / "state"))
    up = kchaos(env, "cluster", "up", "--db", "kafka", "--kafka-version", "4.1.1",
                "--kraft-quorum", "static", "--nodes", "3", "--dir", str(tmp_path / "nodes"),
                "--timeout", "180")
    assert up.returncode == 0, up.stderr
    assert ("metadata quorum (KRaft): voters 1 on n1, 2 on n2, 3 on n3; active controller "
            in up.stdout)
    assert "zookeeper" not in up.stdout
    prefix = up.stdout.split()[1]
    try:
        nodes = sorted(path.name for path in next((tmp_path / "nodes").glob("kc*")).iterdir())
        assert nodes == ["n1", "n2", "n3"]
        cluster_ids = set()
        for node in nodes:
            broker = next((tmp_path / "nodes").glob(f"kc*/{node}/broker"))
            server = (broker / "server.properties").read_text()
            assert "process.roles=broker,controller" in server
            assert "controller.quorum.voters=1@" in server
            assert "zookeeper.connect" not in server
            meta = (broker / "data" / "meta.properties").read_text()
            cluster_ids |= {line for line in meta.splitlines() if line.startswith("cluster.id")}
        assert len(cluster_ids) == 1

        status = kchaos(env, "cluster", "status", "--run", prefix, "--json")
        assert status.returncode == 0, status.stderr
        state = json.loads(status.stdout)
        assert [(b["id"], b["alive"], b["registered"]) for b in state["brokers"]] == [
            (1, True, True), (2, True, True), (3, True, True)]
        leader, epoch = state["controller"]["id"], state["controller"]["epoch"]
        assert leader in (1, 2, 3) and epoch >= 1
        assert [v["id"] for v in state["quorum"]["voters"]] == [1, 2, 3]
        assert state["zookeepers"] == []
        described = state["described"]
        assert (described["leader_id"], described["leader_epoch"]) == (leader, epoch)
        assert sorted(r["id"] for r in described["voters"]) == [1, 2, 3]
        assert described["high_watermark"] > 0 and described["observers"] == []
        assert described["fenced_brokers"] == []
        text = kchaos(env, "cluster", "status", "--run", prefix)
        assert "metadata high watermark " in text.stdout and "fenced brokers: none" in text.stdout

        admin = AdminClient({"bootstrap.servers": state["bootstrap_servers"]})
        admin.create_topics([NewTopic("t", 2, 3)])["t"].result(60)
        cluster = Cluster.attach(prefix, tmp_path / "state")
        partition = wait_for(lambda: cluster.partition_state("t", 1))
        assert partition.leader in (1, 2, 3) and sorted(partition.replicas) == [1, 2, 3]
        snapshot = cluster.snapshot()
        assert (snapshot.controller, snapshot.controller_epoch) == (leader, epoch)
        assert snapshot.brokers == {1, 2, 3}
        assert [(p.topic, p.partition) for p in snapshot.partitions] == [("t", 0), ("t", 1)]

        active = cluster.controller()
        assert active == cluster.broker_node(leader)
        assert cluster.kill(active)
        wait_for(lambda: None if cluster.running(active) else True)
        assert cluster.start(active)
        cluster.broker_set.wait_healthy(timeout=180)
        assert cluster.broker_set.quorum()[1] > epoch
    finally:
        down = kchaos(env, "cluster", "down", "--run", prefix)
    assert down.returncode == 0, down.stderr
    assert_nothing_left(prefix, tmp_path / "state")


def test_a_short_run_with_a_controller_kill_is_valid(tmp_path):
    store = tmp_path / "store"
    run = kchaos(dict(os.environ, KCHAOS_STATE_DIR=str(tmp_path / "state")), "run", "--db",
                 "kafka", "--kafka-version", "4.1.1", "--nodes", "3", "--time-limit", "15",
                 "--nemesis", "kill-controller", "--nemesis-interval", "5", "--seed", "3",
                 "--final-read-seconds", "30", "--store", str(store), timeout=280)
    (tmp_path / "stdout.txt").write_text(run.stdout + "\n--- stderr ---\n" + run.stderr)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "kchaos: VALID" in run.stdout
    folder = (store / "latest").resolve()
    test = read_test(folder)
    assert test["broker"]["version"] == "4.1.1" and test["broker"]["metadata"] == "kraft"
    nodes = folder / "nodes"
    assert sorted(path.name for path in nodes.iterdir() if path.is_dir()) == ["n1", "n2", "n3"]
    assert (nodes / "n1" / "server.log").stat().st_size > 0
    kills = [json.loads(line) for line in (folder / "history.jsonl").read_text().splitlines()
             if '"kill"' in line]
    assert any(op.get("process") == "nemesis" and isinstance(op["value"], dict)
               and "killed" in op["value"].values() for op in kills), \
        "no active controller was killed"
    assert json.loads((folder / "results.json").read_text())["valid"] is True


@pytest.mark.kraft
def test_dedicated_controllers_under_every_quorum_fault(tmp_path):
    env = dict(os.environ, KCHAOS_STATE_DIR=str(tmp_path / "state"))
    up = kchaos(env, "cluster", "up", "--db", "kafka", "--kafka-version", "4.1.1",
                "--nodes", "3", "--controllers", "3", "--dir", str(tmp_path / "nodes"),
                "--timeout", "180")
    assert up.returncode == 0, up.stderr
    assert "voters 101 on c1, 102 on c2, 103 on c3;" in up.stdout
    prefix = up.stdout.split()[1]
    try:
        root = next((tmp_path / "nodes").glob("kc*"))
        for node in ("c1", "c2", "c3"):
            controller = root / node / "controller"
            server = (controller / "server.properties").read_text()
            assert "process.roles=controller\n" in server and ":9092" not in server
            assert "Formatting dynamic metadata voter directory" in (
                controller / "broker.log").read_text()
            directory_id = dict(line.split("=", 1) for line in (
                controller / "data" / "meta.properties").read_text().splitlines()
                if "=" in line)["directory.id"]
            recorded = (tmp_path / "state" / prefix / "cluster.json").read_text()
            assert f":9093:{directory_id}" in recorded, "not formatted with its initial voters"
        for node in ("n1", "n2", "n3"):
            server = (root / node / "broker" / "server.properties").read_text()
            assert "process.roles=broker\n" in server
            assert "controller.quorum.voters" not in server
            assert "controller.quorum.bootstrap.servers=" in server
        state = json.loads(kchaos(env, "cluster", "status", "--run", prefix, "--json").stdout)
        assert [(v["id"], v["node"]) for v in state["quorum"]["voters"]] == [
            (101, "c1"), (102, "c2"), (103, "c3")]
        assert state["controller"]["node"] in ("c1", "c2", "c3")
        assert [b["registered"] for b in state["brokers"]] == [True, True, True]
        assert sorted(r["id"] for r in state["described"]["observers"]) == [1, 2, 3]
    finally:
        down = kchaos(env, "cluster", "down", "--run", prefix)
    assert down.returncode == 0, down.stderr
    assert_nothing_left(prefix, tmp_path / "state")

    store = tmp_path / "store"
    run = kchaos(env, "run", "--db", "kafka", "--kafka-version", "4.1.1", "--nodes", "3",
                 "--controllers", "3", "--time-limit", "60", "--nemesis",
                 "kill-quorum-majority,fence-broker,partition-quorum", "--nemesis-interval",
                 "4", "--seed", "5", "--store", str(store), timeout=280)
    (tmp_path / "stdout.txt").write_text(run.stdout + "\n--- stderr ---\n" + run.stderr)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "kchaos: VALID" in run.stdout
    folder = (store / "latest").resolve()
    ops = [json.loads(line) for line in (folder / "history.jsonl").read_text().splitlines()]
    done = {op["fault"]: op["value"] for op in ops
            if op.get("process") == "nemesis" and isinstance(op.get("value"), dict)
            and op["f"] in ("kill", "start-partition")}
    assert len(done["kill-quorum-majority"]) == 2
    assert set(done["kill-quorum-majority"]) <= {"c1", "c2", "c3"}
    fenced = done["fence-broker"]["broker"]
    assert done["fence-broker"][fenced] == ["c1", "c2", "c3"]
    split = done["partition-quorum"]
    assert (len(split["majority"]), len(split["minority"])) == (2, 1)
    events = [json.loads(line) for path in (folder / "nodes").glob("c*/controller-events.jsonl")
              for line in path.read_text().splitlines()]
    fenced_id = int(fenced[1:])
    assert any(event["event"] == "broker-change" and fenced_id in event["dead"]
               for event in events), "the controllers never fenced the cut-off broker"
