"""The kafka db without a cluster: its jars and their cache, the properties and command a
node gets, its options, and the errors for what it cannot run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.config import ConfigError, load_config
from harness.db.brokers import KchaosBroker
from harness.db.kafka.broker import KafkaBroker, kafka_properties
from harness.db.kafka.db import KafkaOptions, check_kafka_config
from harness.db.kafka.distribution import (
    CACHE,
    COMPLETE,
    ZOOKEEPER_VERSION,
    Distribution,
    KafkaUnavailable,
    fetch,
    from_home,
)
from harness.db.launchers import launcher_from_json
from harness.test import build_test
from tests.support import requirements

needs_jars = requirements.kafka_jars()


def fake_home(root: Path, jar: str = "kafka_2.13-3.9.1.jar") -> Path:
    (root / "libs").mkdir(parents=True)
    (root / "libs" / jar).write_bytes(b"")
    return root


def test_a_cached_version_is_used_without_maven(tmp_path, monkeypatch):
    folder = tmp_path / "3.9.1"
    fake_home(folder)
    (folder / COMPLETE).touch()
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    distribution = fetch("3.9.1", cache=tmp_path)
    assert distribution == Distribution("3.9.1", folder / "libs")
    assert distribution.main_jar == "kafka_2.13-3.9.1.jar"


def test_an_incomplete_cache_without_maven_says_what_to_do(tmp_path, monkeypatch):
    fake_home(tmp_path / "3.9.1")  # no .complete: an interrupted download
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    with pytest.raises(KafkaUnavailable, match="Maven .mvn. is missing: run `make bootstrap`"):
        fetch("3.9.1", cache=tmp_path)


def test_a_version_kchaos_does_not_run_is_refused_with_the_choices():
    with pytest.raises(KafkaUnavailable, match="Kafka 9.9.9 is not one kchaos runs; choose "
                                               "one of 4.2.0, 4.1.1, 3.9.1, 2.8.2, 2.0.1"):
        fetch("9.9.9")


def test_kafka_home_takes_the_version_from_the_broker_jar(tmp_path):
    home = fake_home(tmp_path / "kafka_2.12-2.8.2", "kafka_2.12-2.8.2.jar")
    (home / "libs" / "kafka-clients-2.8.2.jar").write_bytes(b"")
    assert from_home(home) == Distribution("2.8.2", home / "libs")


def test_kafka_home_without_libs_or_broker_jar_is_explained(tmp_path):
    with pytest.raises(KafkaUnavailable, match="no libs/ folder"):
        from_home(tmp_path)
    (tmp_path / "libs").mkdir()
    (tmp_path / "libs" / "kafka-clients-3.9.1.jar").write_bytes(b"")
    with pytest.raises(KafkaUnavailable, match="no kafka_<scala>-<version>.jar"):
        from_home(tmp_path)


@needs_jars
def test_the_property_names_come_from_kafka_itself():
    names = fetch(ZOOKEEPER_VERSION).config_names()
    assert {"min.insync.replicas", "unclean.leader.election.enable",
            "zookeeper.session.timeout.ms", "replica.lag.time.max.ms",
            "log.segment.bytes", "default.replication.factor"} <= names
    assert "no.such.property" not in names


def test_a_property_kafka_does_not_know_is_named():
    check_kafka_config({"min.insync.replicas": "2"}, frozenset({"min.insync.replicas"}), "3.9.1")
    with pytest.raises(ValueError, match="Apache Kafka 3.9.1 knows no property "
                                         "broker.bogus, other.bogus"):
        check_kafka_config({"other.bogus": "1", "broker.bogus": "2"}, frozenset(), "3.9.1")


def test_kafka_properties_have_the_chaos_defaults_one_listener_and_overrides_last():
    text = kafka_properties(2, "10.0.0.2", "10.0.0.9:2181", "/d", 5,
                            {"min.insync.replicas": "2", "num.io.threads": "8"})
    properties = dict(line.split("=", 1) for line in text.splitlines())
    assert properties["broker.id"] == "2"
    assert properties["listeners"] == "PLAINTEXT://10.0.0.2:9092"
    assert properties["zookeeper.connect"] == "10.0.0.9:2181"
    assert properties["default.replication.factor"] == "3"
    assert properties["unclean.leader.election.enable"] == "false"
    assert properties["transaction.state.log.min.isr"] == "2"
    assert "auto.create.topics.enable" not in properties, "clients opt out since 0.11"
    old = kafka_properties(2, "10.0.0.2", "10.0.0.9:2181", "/d", 5, version="0.10.2.2")
    assert "auto.create.topics.enable=false" in old.splitlines()
    assert properties["num.io.threads"] == "8" and properties["min.insync.replicas"] == "2"


def test_the_kafka_command_runs_the_jars_with_its_heap_and_log_configuration():
    broker = KafkaBroker("3.9.1", "/jars", "kafka_2.13-3.9.1.jar", "/opt/java", "1g")
    command = broker.command("/w/n1/broker")
    assert command[0] == "/opt/java" and "-Xmx1g" in command
    assert command[-4:] == ["-cp", "/jars/*", "kafka.Kafka", "/w/n1/broker/server.properties"]
    assert "-Dlog4j.configuration=file:/w/n1/broker/log4j.properties" in command
    files = broker.configuration(1, "10.0.0.1", "z:2181", "/w/n1/broker", 3, {})
    assert set(files) == {"server.properties", "log4j.properties"}
    assert "state-change.log" in files["log4j.properties"]
    assert "/w/n1/broker/logs/controller.log" in broker.log_files("/w/n1/broker")


def test_launchers_round_trip_through_json():
    for launcher in (KchaosBroker("/venv/bin/python"),
                     KafkaBroker("2.8.2", "/jars", "kafka_2.13-2.8.2.jar", "java", "512m")):
        assert launcher_from_json(launcher.to_json()) == launcher
    with pytest.raises(ValueError, match="unknown broker kind 'redpanda'"):
        launcher_from_json({"kind": "redpanda"})


def test_kafka_options_are_validated():
    with pytest.raises(ValueError, match="heap must be like 768m or 2g"):
        KafkaOptions(heap="lots")


def test_a_kafka_option_with_our_db_is_refused():
    with pytest.raises(ConfigError, match="kafka_version belongs to db kafka"):
        load_config(overrides={"kafka_version": "2.8.2"})


@needs_jars
def test_a_run_on_kafka_refuses_a_property_only_our_broker_knows():
    config = load_config(overrides={"db": "kafka",
                                    "broker_config": ["replication.truncation.mode=hw"]})
    with pytest.raises(ConfigError, match="knows no property replication.truncation.mode"):
        build_test(config)


def test_a_run_on_our_broker_refuses_a_property_only_kafka_knows():
    config = load_config(overrides={"broker_config": ["num.io.threads=8"]})
    with pytest.raises(ConfigError, match="unknown property .num.io.threads. .the kchaos "
                                          "broker does not know it; an Apache Kafka "
                                          "property runs with --db kafka"):
        build_test(config)


@needs_jars
def test_a_run_on_kafka_records_the_version_it_ran():
    test = build_test(load_config(overrides={"db": "kafka", "kafka_version": "3.9.1"}))
    assert test.db.describe()["broker"]["version"] == "3.9.1"
    assert test.db.spec.launcher.libs == str(CACHE / "3.9.1" / "libs")
    assert os.path.isfile(Path(test.db.spec.launcher.libs) / test.db.spec.launcher.main_jar)
