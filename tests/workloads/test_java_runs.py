"""`kchaos run --client java`, the smoke of `make test` on both dbs: our broker with
consumer groups under a coordinator kill and paused consumers, and Apache Kafka 4.1.1 on
KRaft under a broker kill. Each ends valid, with the Java client named only in test.json,
and leaves no Java process behind. Needs root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.store import read_test
from tests.support import requirements

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300), requirements.root()]

KCHAOS = str(Path(sys.executable).parent / "kchaos")


def java_children() -> set[int]:
    """Live processes running the Java client."""
    found = subprocess.run(["pgrep", "-f", "KchaosClient"], capture_output=True, text=True)
    return {int(pid) for pid in found.stdout.split()}


def run(tmp_path: Path, *args: str) -> tuple[Path, str]:
    before = java_children()
    store = tmp_path / "store"
    done = subprocess.run(
        [KCHAOS, "run", "--nodes", "3", "--seed", "5", "--time-limit", "15",
         "--nemesis-interval", "5", "--final-read-seconds", "40", "--store", str(store), *args,
         *(() if "--client" in args else ("--client", "java"))],
        env=dict(os.environ, KCHAOS_STATE_DIR=str(tmp_path / "state")), capture_output=True,
        text=True, timeout=280)
    (tmp_path / "stdout.txt").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "kchaos: VALID" in done.stdout
    assert java_children() <= before, "a Java client process outlived its run"
    return (store / "latest").resolve(), done.stdout


def history(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "history.jsonl").read_text().splitlines()]


def test_java_groups_on_our_broker_under_coordinator_faults(tmp_path):
    folder, stdout = run(tmp_path, "--zookeepers", "1", "--sub-via", "subscribe", "--groups", "2",
                 "--nemesis", "kill-coordinator,pause-consumers")
    test = read_test(folder)
    assert test["client"] == "java" and test["java_client_version"] == "3.9.1"
    ops = history(folder)
    assert all("java" not in json.dumps(op) for op in ops), "the history names no client"
    assert sum(1 for op in ops if op["f"] == "send" and op["type"] == "ok") > 50
    assert any(op.get("rebalances") for op in ops if op["type"] == "ok")
    assert any(op["f"] == "commit" and op["type"] == "ok" for op in ops)
    verdict = next(line for line in stdout.splitlines() if line.startswith("kchaos: VALID"))
    assert "never" not in verdict, verdict


@requirements.kafka_jars("4.1.1")
def test_java_on_kafka_4_on_kraft_under_a_broker_kill(tmp_path):
    folder, _ = run(tmp_path, "--db", "kafka", "--kafka-version", "4.1.1", "--nemesis", "kill")
    test = read_test(folder)
    assert test["java_client_version"] == "4.1.1" and test["broker"]["metadata"] == "kraft"
    ops = history(folder)
    assert sum(1 for op in ops if op["f"] == "send" and op["type"] == "ok") > 50
    assert any(op["f"] == "poll" and op["type"] == "ok" and op["value"][0][1] for op in ops)


@pytest.mark.clients
@requirements.kafka_jars("4.1.1")
@pytest.mark.parametrize("client", ["java", "confluent"])
def test_the_consumer_protocol_of_kip_848_under_coordinator_faults(tmp_path, client):
    folder, stdout = run(tmp_path, "--db", "kafka", "--kafka-version", "4.1.1",
                         "--sub-via", "subscribe", "--groups", "2", "--group-protocol",
                         "consumer", "--nemesis", "kill-coordinator,pause-consumers",
                         "--client", client)
    verdict = next(line for line in stdout.splitlines() if line.startswith("kchaos: VALID"))
    assert "never" not in verdict, verdict
    assert read_test(folder)["group_protocol"] == "consumer"
    logs = "".join(path.read_text() for path in (folder / "nodes").glob("*/server.log"))
    assert "joins the consumer group using the consumer protocol" in logs
    assert "joins the consumer group using the classic protocol" not in logs
    ops = history(folder)
    epochs = [entry["generation"] for op in ops for entry in op.get("rebalances") or ()]
    if client == "java":
        assert epochs and all(isinstance(epoch, int) for epoch in epochs), "member epochs"
    results = json.loads((folder / "results.json").read_text())
    assert results["checkers"]["groups"]["stats"]["group-protocol"] == "consumer"
