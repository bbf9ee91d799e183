"""Real Apache Kafka (3.9.1, jars cached by the bootstrap) as the system under test:
`kchaos cluster up | status | down --db kafka`, acks=all writes through a leader kill -9
and the broker's restart, and a short `kchaos run --db kafka`. Needs root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.db import Cluster
from harness.db.znodes import read_snapshot
from harness.store import read_test
from tests.support import requirements
from tests.support.cleanup import assert_nothing_left

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(400),
    requirements.root(),
    requirements.kafka_jars(),
]

KCHAOS = str(Path(sys.executable).parent / "kchaos")


def kchaos(env, *args, timeout=180):
    return subprocess.run([KCHAOS, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def produce(producer: Producer, topic: str, values: range, acked: list[int]) -> None:
    def delivered(error, message):
        if error is None:
            acked.append(int(message.value()))
    for value in values:
        producer.produce(topic, str(value).encode(), partition=0, on_delivery=delivered)
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(30)


def read_all(bootstrap: str, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kchaos-test",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        values: list[int] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(values) < high - low:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.append(int(message.value()))
        return values
    finally:
        consumer.close()


@pytest.mark.long
def test_acks_all_writes_survive_a_leader_kill_and_restart(tmp_path):
    env = dict(os.environ, KCHAOS_STATE_DIR=str(tmp_path / "state"))
    up = kchaos(env, "cluster", "up", "--db", "kafka", "--kafka-version", "3.9.1", "--nodes",
                "3", "--zookeepers", "1", "--dir", str(tmp_path / "nodes"), "--json")
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    try:
        assert [n["name"] for n in info["nodes"]] == ["n1", "n2", "n3", "z1"]
        properties = next((tmp_path / "nodes").glob("kc*/n1/broker/server.properties"))
        assert "min.insync.replicas=2" in properties.read_text()
        assert "CONTROLLER://" not in properties.read_text()
        bootstrap = info["bootstrap_servers"]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("t", 1, 3)])["t"].result(30)

        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                             "enable.idempotence": True, "message.timeout.ms": 60000})
        acked: list[int] = []
        produce(producer, "t", range(0, 200), acked)
        cluster = Cluster.attach(info["prefix"], tmp_path / "state")
        try:
            leader = next(p.leader for p in read_snapshot(cluster.zk).partitions
                          if p.topic == "t")
            node = cluster.broker_node(leader)
            assert cluster.kill(node)
            produce(producer, "t", range(200, 400), acked)
            assert cluster.start(node)  # waits for the old registration to expire first
            cluster.broker_set.wait_healthy(timeout=60)
            produce(producer, "t", range(400, 500), acked)
            moved = next(p for p in read_snapshot(cluster.zk).partitions if p.topic == "t")
            assert moved.leader_epoch >= 1
        finally:
            cluster.broker_set.close()
        assert len(acked) >= 450, f"only {len(acked)} of 500 writes acknowledged"
        read = set(read_all(bootstrap, "t"))
        assert set(acked) <= read, f"acknowledged but lost: {sorted(set(acked) - read)[:20]}"

        status = kchaos(env, "cluster", "status", "--run", info["prefix"], "--json")
        assert status.returncode == 0, status.stderr
        state = json.loads(status.stdout)
        assert [(b["id"], b["alive"], b["registered"]) for b in state["brokers"]] == [
            (1, True, True), (2, True, True), (3, True, True)]
        assert state["controller"]["broker_id"] in (1, 2, 3)
    finally:
        down = kchaos(env, "cluster", "down", "--run", info["prefix"])
    assert down.returncode == 0, down.stderr
    assert_nothing_left(info["prefix"], tmp_path / "state")


def test_cluster_up_refuses_a_property_kafka_does_not_know(tmp_path):
    env = dict(os.environ, KCHAOS_STATE_DIR=str(tmp_path / "state"))
    up = kchaos(env, "cluster", "up", "--db", "kafka", "--kafka-version", "3.9.1", "--nodes",
                "1", "--zookeepers", "1", "--broker-config", "no.such.property=1")
    assert up.returncode == 3
    assert "no.such.property" in up.stderr and "Apache Kafka 3.9.1" in up.stderr
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").iterdir())


def test_a_short_kchaos_run_on_kafka_is_valid_and_keeps_its_logs(tmp_path):
    store = tmp_path / "store"
    done = subprocess.run(
        [KCHAOS, "run", "--db", "kafka", "--kafka-version", "3.9.1", "--store", str(store),
         "--nodes", "3", "--zookeepers", "1", "--time-limit", "15", "--nemesis", "kill-leader",
         "--nemesis-interval", "5", "--seed", "5", "--final-read-seconds", "30"],
        capture_output=True, text=True, timeout=380)
    (tmp_path / "stdout.txt").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "kchaos: VALID" in done.stdout
    run = (store / "latest").resolve()
    test = read_test(run)
    assert test["db"] == "kafka" and test["config"]["run"]["db"] == "kafka"
    assert test["broker"]["version"] == "3.9.1"
    nodes = run / "nodes"
    assert (nodes / "n1" / "controller.log").is_file()
    assert (nodes / "n1" / "state-change.log").is_file()
    events = [json.loads(line) for path in nodes.glob("n*/controller-events.jsonl")
              for line in path.read_text().splitlines()]
    assert any(e["event"] == "elect-leader" for e in events)
    results = json.loads((run / "results.json").read_text())
    assert results["valid"] is True
