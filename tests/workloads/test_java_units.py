"""The Java client's parts that need no cluster: its options, how its answers become
completions, its compile cache, the spare processes that hide a JVM's start, and how a
run picks the client's version."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from harness.config import ConfigError, load_config
from harness.db.kafka.distribution import ZOOKEEPER_VERSION
from harness.test import build_test
from tests.support import requirements
from workloads.groups.child import ConsumerChildren
from workloads.kafka.client import ClientOptions, send_completion
from workloads.kafka.java import build
from workloads.kafka.java.build import JavaClientUnavailable, JavaRuntime, compiled
from workloads.kafka.java.client import JavaClient, deliveries
from workloads.queue import CLIENTS, QueueOptions

SEND = {"process": 0, "f": "send", "value": [["send", 0, 7], ["send", 1, 8]]}
LIBS = Path(".cache/kafka") / ZOOKEEPER_VERSION / "libs"


def test_java_is_a_client_and_its_version_needs_it():
    assert "java" in CLIENTS
    with pytest.raises(ValueError, match="--client java"):
        QueueOptions(client="confluent", java_client_version="4.1.1")
    runtime = JavaRuntime("4.1.1", Path("/libs"), Path("/classes"))
    options = QueueOptions(client="java", java_runtime=runtime)
    assert options.test_fields()["java_client_version"] == "4.1.1"
    assert options.client_options().java == runtime
    assert "java_client_version" not in QueueOptions().test_fields()


def test_the_client_refuses_to_start_uncompiled():
    with pytest.raises(ValueError, match="not compiled"):
        JavaClient(ClientOptions(bootstrap_servers=("a:1",), key_partitions={0: 0}))


def test_the_command_runs_the_compiled_class_against_the_versions_jars():
    command = JavaRuntime("4.2.0", Path("/k/libs"), Path("/c/4.2.0")).command("member")
    assert command[0] == "java" and command[-2:] == ["KchaosClient", "member"]
    assert command[command.index("-cp") + 1] == "/c/4.2.0/kchaos-client.jar:/k/libs/*"
    assert not any("SharedArchiveFile" in part for part in command), "no archive, none used"


@pytest.mark.parametrize(("answer", "kind", "error"), [
    ([{"offset": 3}, {"offset": 4}], "ok", None),
    ([{"error": "MESSAGE_TOO_LARGE", "sent": True}] * 2, "fail", "MESSAGE_TOO_LARGE"),
    ([{"error": "REQUEST_TIMED_OUT", "sent": False}] * 2, "fail", "REQUEST_TIMED_OUT"),
    ([{"error": "REQUEST_TIMED_OUT", "sent": True}, {"offset": 4}], "info", "REQUEST_TIMED_OUT"),
    ([{"offset": 3}, {"pending": True}], "info", "timeout"),
    ([{"error": "NOT_ENOUGH_REPLICAS", "sent": True}] * 2, "fail", "NOT_ENOUGH_REPLICAS"),
])
def test_answers_become_completions(answer, kind, error):
    done = send_completion(SEND, deliveries(answer), retried=False)
    assert (done["type"], done.get("error")) == (kind, error)
    if kind == "ok":
        assert [micro[2] for micro in done["value"]] == [[3, 7], [4, 8]]


def test_a_rejection_after_retries_is_indeterminate():
    answer = [{"error": "NOT_ENOUGH_REPLICAS", "sent": True}] * 2
    assert send_completion(SEND, deliveries(answer), retried=True)["type"] == "info"


@requirements.kafka_jars(ZOOKEEPER_VERSION)
def test_compiles_once_per_source_and_jars(tmp_path, monkeypatch):
    first = compiled(ZOOKEEPER_VERSION, LIBS, cache=tmp_path)
    built = first.classes / "kchaos-client.jar"
    stamp = built.stat().st_mtime_ns
    assert compiled(ZOOKEEPER_VERSION, LIBS, cache=tmp_path) == first
    assert built.stat().st_mtime_ns == stamp, "compiled again with nothing changed"
    assert (first.classes / "queue.jsa").exists() and (first.classes / "member.jsa").exists()
    changed = tmp_path / "KchaosClient.java"
    changed.write_text(build.SOURCE.read_text() + "// a later source\n")
    monkeypatch.setattr(build, "SOURCE", changed)
    other = compiled(ZOOKEEPER_VERSION, LIBS, cache=tmp_path)
    assert other.classes != first.classes and built.exists(), "built beside, not over it"


def test_a_missing_compiler_says_what_to_do(tmp_path):
    with pytest.raises(JavaClientUnavailable, match="make bootstrap"):
        compiled("4.1.1", LIBS, cache=tmp_path, javac="no-such-javac")


ECHO = [sys.executable, "-c",
        "import json, os, sys\n"
        "sys.stdin.readline()\n"
        "for line in sys.stdin:\n"
        "    request = json.loads(line)\n"
        "    print(json.dumps({'id': request['id'], 'result': os.getpid()}), flush=True)\n"]


class _Config:
    group = "echo"

    def to_json(self):
        return {}


def test_spares_start_ahead_and_are_killed_with_the_children():
    children = ConsumerChildren(spares=2)
    try:
        children.prepare(ECHO)
        ready = [p.pid for p in children._spares[tuple(ECHO)]]
        assert len(ready) == 2
        first = children.start(_Config(), ECHO)
        second = children.start(_Config(), ECHO)
        assert [first.pid, second.pid] == ready, "children take the spares in order"
        assert second.request("ping", 10)["result"] == second.pid
        assert first.request("ping", 10)["result"] == first.pid
        waiting = list(children._spares[tuple(ECHO)])
        assert len(waiting) == 2, "each start tops the spares up"
    finally:
        children.kill_all()
    for process in (first.process, second.process, *waiting):
        assert process.poll() is not None
    assert children._spares == {}


def test_without_spares_nothing_waits():
    children = ConsumerChildren()
    try:
        children.start(_Config(), ECHO)
        children.prepare(ECHO)
        assert not any(children._spares.values())
    finally:
        children.kill_all()


def _java_test(tmp_path: Path, **overrides: str):
    config = load_config(overrides={"client": "java", "store": str(tmp_path), **overrides})
    return build_test(config).workload.options.java_runtime


@requirements.kafka_jars(ZOOKEEPER_VERSION)
def test_a_run_on_our_broker_compiles_the_zookeeper_eras_newest_client(tmp_path):
    runtime = _java_test(tmp_path)
    assert runtime.version == ZOOKEEPER_VERSION
    assert (runtime.classes / "kchaos-client.jar").exists()
    assert (runtime.classes / "member.jsa").exists(), "the class-data archive of a member"


@requirements.kafka_jars("4.1.1")
def test_a_run_on_kafka_takes_the_clusters_version_unless_told(tmp_path):
    assert _java_test(tmp_path, db="kafka", kafka_version="4.1.1").version == "4.1.1"
    told = _java_test(tmp_path, db="kafka", kafka_version="4.1.1",
                      java_client_version=ZOOKEEPER_VERSION)
    assert told.version == ZOOKEEPER_VERSION


def test_an_unknown_client_version_is_refused_before_the_run(tmp_path):
    with pytest.raises(ConfigError, match="--client java: Kafka 9.9.9 is not one kchaos runs"):
        _java_test(tmp_path, java_client_version="9.9.9")


def test_the_bootstrap_compiles_the_client(tmp_path):
    script = Path("scripts/bootstrap.sh").read_text()
    assert "workloads.kafka.java.build" in script
    done = subprocess.run([sys.executable, "-m", "workloads.kafka.java.build"],
                          capture_output=True, text=True, env=dict(os.environ))
    assert done.returncode != 0 and "usage" in done.stderr


@pytest.mark.parametrize(("fields", "words"), [
    ({"group_protocol": "consumer"}, "add --sub-via subscribe"),
    ({"group_protocol": "consumer", "sub_via": "subscribe", "client": "kafka-python"},
     "kafka-python has no client of the KIP-848 protocol"),
    ({"group_protocol": "eager"}, "not one of classic, consumer"),
    ({"txn": True, "client": "kafka-python"}, "set --client confluent or --client java"),
])
def test_group_protocol_options_are_checked(fields, words):
    with pytest.raises(ValueError, match=words):
        QueueOptions(**fields)


def test_transactions_run_on_the_java_client():
    options = QueueOptions(txn=True, client="java")
    assert options.client_options().transactional
    assert "txn" in options.test_fields() and options.test_fields()["txn"] is True


def test_the_consumer_protocol_reaches_the_members_configuration():
    from workloads.kafka.confluent_member import ConfluentMember

    options = QueueOptions(sub_via="subscribe", group_protocol="consumer",
                           bootstrap_servers=("a:1",))
    assert options.test_fields()["group_protocol"] == "consumer"
    runtime = JavaRuntime("4.1.1", Path("/l"), Path("/c"))
    member = JavaClient(replace(options.client_options(), java=runtime)).member_config("g0")
    assert member.to_json()["group_protocol"] == "consumer"
    settings = ConfluentMember._consumer_config(type("Stub", (), {"config": member})())
    assert settings["group.protocol"] == "consumer"
    assert "session.timeout.ms" not in settings and "heartbeat.interval.ms" not in settings


def test_our_broker_refuses_the_consumer_protocol(tmp_path):
    config = load_config(overrides={"sub_via": "subscribe", "group_protocol": "consumer",
                                    "store": str(tmp_path)})
    with pytest.raises(ConfigError, match="classic group protocol of the design documents"):
        build_test(config)


@requirements.kafka_jars(ZOOKEEPER_VERSION)
def test_kafka_before_4_refuses_the_consumer_protocol(tmp_path):
    config = load_config(overrides={"sub_via": "subscribe", "group_protocol": "consumer",
                                    "db": "kafka", "kafka_version": ZOOKEEPER_VERSION,
                                    "store": str(tmp_path)})
    with pytest.raises(ConfigError, match="needs Kafka 4.0 or later"):
        build_test(config)


@requirements.kafka_jars("4.1.1")
def test_the_consumer_protocol_puts_the_session_on_the_coordinator(tmp_path):
    config = load_config(overrides={
        "sub_via": "subscribe", "group_protocol": "consumer", "db": "kafka",
        "kafka_version": "4.1.1", "session_timeout_ms": 9000, "store": str(tmp_path),
        "broker_config": {"group.consumer.heartbeat.interval.ms": "2500"}})
    settings = build_test(config).db.describe()["broker_config"]
    assert settings["group.consumer.session.timeout.ms"] == "9000"
    assert settings["group.consumer.min.session.timeout.ms"] == "9000"
    assert settings["group.consumer.heartbeat.interval.ms"] == "2500", "the user's value wins"
