"""Kafka in KRaft mode without a cluster: the properties and command a node gets, the
quorum-state file, which versions have which metadata mode, and what a KRaft cluster
refuses before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config import ConfigError, load_config
from harness.db.kafka.broker import KafkaBroker
from harness.db.kafka.db import KafkaOptions, metadata_mode, quorum_kind
from harness.db.kafka.kraft import (
    BROKER,
    CONTROLLER,
    DYNAMIC,
    new_cluster_id,
    parse_quorum_state,
    voters_text,
)
from harness.db.launchers import launcher_from_json
from harness.test import build_test
from nemesis.capabilities import HasController, HasLeaders, HasZooKeeper, Killable
from tests.support import requirements

needs_jars = requirements.kafka_jars()


def kraft_broker(**fields) -> KafkaBroker:
    fields.setdefault("voters", "1@10.0.0.1:9093,2@10.0.0.2:9093,3@10.0.0.3:9093")
    return KafkaBroker("4.1.1", "/jars", "kafka_2.13-4.1.1.jar", metadata="kraft",
                       cluster_id="q1Yx0bEbTbOdoV2kDPmeWg", **fields)


def properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_a_combined_node_is_broker_and_voter_without_zookeeper():
    files = kraft_broker().configuration(2, "10.0.0.2", "", "/w/n2/broker", 3,
                                         {"min.insync.replicas": "2"})
    server = properties(files["server.properties"])
    assert server["process.roles"] == "broker,controller"
    assert server["node.id"] == "2"
    assert server["controller.quorum.voters"] == "1@10.0.0.1:9093,2@10.0.0.2:9093,3@10.0.0.3:9093"
    assert server["listeners"] == "PLAINTEXT://10.0.0.2:9092,CONTROLLER://10.0.0.2:9093"
    assert server["advertised.listeners"] == "PLAINTEXT://10.0.0.2:9092"
    assert server["controller.listener.names"] == "CONTROLLER"
    assert server["log.dirs"] == "/w/n2/broker/data"
    assert server["min.insync.replicas"] == "2"
    assert server["offsets.topic.num.partitions"] == "3"
    assert not {"broker.id", "zookeeper.connect", "zookeeper.session.timeout.ms"} & set(server)


def test_the_zookeeper_mode_properties_are_unchanged():
    broker = KafkaBroker("3.9.1", "/jars", "kafka_2.13-3.9.1.jar")
    server = properties(broker.configuration(1, "10.0.0.1", "10.0.1.1:2181", "/w", 3, {})
                        ["server.properties"])
    assert server["zookeeper.connect"] == "10.0.1.1:2181"
    assert "process.roles" not in server and "node.id" not in server
    assert broker.uses_zookeeper and broker.waits_for_old_registration


def test_a_kraft_node_formats_its_storage_once_then_becomes_kafka():
    command = kraft_broker().command("/w/n1/broker")
    assert command[:2] == ["sh", "-c"]
    script = command[2]
    assert script.startswith("test -f /w/n1/broker/data/meta.properties || ")
    assert "kafka.tools.StorageTool format --cluster-id q1Yx0bEbTbOdoV2kDPmeWg " \
           "--config /w/n1/broker/server.properties || exit 1; " in script
    assert script.endswith("exec java -Xms768m -Xmx768m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 "
                           "-XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true "
                           "-Duser.timezone=UTC "
                           "-Dlog4j.configuration=file:/w/n1/broker/log4j.properties "
                           "-Dkafka.logs.dir=/w/n1/broker/logs -cp '/jars/*' kafka.Kafka "
                           "/w/n1/broker/server.properties")
    assert not kraft_broker().waits_for_old_registration


def test_a_kraft_launcher_round_trips_through_json():
    assert launcher_from_json(kraft_broker().to_json()) == kraft_broker()


def test_cluster_ids_are_kafka_uuids():
    ids = {new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(len(text) == 22 and not text.startswith("-") for text in ids)


def test_voters_are_listed_by_node_id():
    assert voters_text({2: "10.0.0.2", 1: "10.0.0.1"}) == "1@10.0.0.1:9093,2@10.0.0.2:9093"


def test_a_dynamic_quorums_voters_carry_new_directory_ids():
    text = voters_text({2: "10.0.0.2", 1: "10.0.0.1"}, DYNAMIC)
    first, second = text.split(",")
    assert first.startswith("1@10.0.0.1:9093:") and second.startswith("2@10.0.0.2:9093:")
    directory_ids = [voter.rsplit(":", 1)[1] for voter in (first, second)]
    assert len(set(directory_ids)) == 2 and all(len(d) == 22 for d in directory_ids)


DYNAMIC_VOTERS = ("101@10.0.1.1:9093:JEXY6aqzQY-32P5TStzaFg,"
                  "102@10.0.1.2:9093:MvDxzVmcRsaTz33bUuRU6A")


def test_a_dynamic_quorum_is_found_through_bootstrap_servers_and_formatted_on_voters():
    for roles in (CONTROLLER, BROKER):
        broker = kraft_broker(quorum=DYNAMIC, roles=roles, voters=DYNAMIC_VOTERS)
        server = properties(broker.configuration(101, "10.0.1.1", "", "/w/c1/controller", 3,
                                                 {})["server.properties"])
        assert server["controller.quorum.bootstrap.servers"] == "10.0.1.1:9093,10.0.1.2:9093"
        assert "controller.quorum.voters" not in server
        script = broker.command("/w/c1/controller")[2]
        formatted = f"--initial-controllers {DYNAMIC_VOTERS} || exit 1;"
        assert (formatted in script) == (roles == CONTROLLER), script
    assert launcher_from_json(kraft_broker(quorum=DYNAMIC).to_json()).quorum == DYNAMIC


def test_each_version_has_its_kind_of_quorum():
    assert quorum_kind("4.2.0", "kraft", None) == "dynamic"
    assert quorum_kind("4.1.1", "kraft", "static") == "static"
    assert quorum_kind("3.9.1", "kraft", None) == "static"
    assert quorum_kind("3.9.1", "kraft", "dynamic") == "dynamic"
    assert quorum_kind("3.9.1", "zookeeper", None) == "static"
    with pytest.raises(ValueError, match=r"--kraft-quorum dynamic: Kafka 3.7.2 has static "
                                         r"voters only .*came with 3.9\)"):
        quorum_kind("3.7.2", "kraft", "dynamic")
    with pytest.raises(ValueError, match=r"--kraft-quorum static: Kafka 3.9.1 in ZooKeeper "
                                         r"mode has no KRaft quorum: add --metadata kraft"):
        quorum_kind("3.9.1", "zookeeper", "static")


def test_the_quorum_state_file_gives_leader_and_epoch():
    state = parse_quorum_state('{"leaderId":3,"leaderEpoch":7,"votedId":-1,'
                               '"appliedOffset":0,"currentVoters":null,"data_version":1}')
    assert (state.leader_id, state.leader_epoch) == (3, 7)
    assert parse_quorum_state("") is None
    assert parse_quorum_state('{"votedId": 1}') is None


def test_each_version_has_its_metadata_modes():
    assert metadata_mode("3.9.1", None) == "zookeeper"
    assert metadata_mode("3.9.1", "kraft") == "kraft"
    assert metadata_mode("4.1.1", None) == "kraft"
    assert metadata_mode("4.2.0", "kraft") == "kraft"
    with pytest.raises(ValueError, match=r"Kafka 4.1.1 has no ZooKeeper mode \(Kafka 4.0 "
                                         r"removed it\): drop --metadata zookeeper"):
        metadata_mode("4.1.1", "zookeeper")
    with pytest.raises(ValueError, match="Kafka 2.8.2 has no production KRaft mode"):
        metadata_mode("2.8.2", "kraft")


def test_zookeeper_mode_on_4x_is_refused_before_any_download(monkeypatch):
    def no_fetch(*args, **kwargs):
        raise AssertionError("fetched jars for a configuration that cannot run")
    monkeypatch.setattr("harness.db.kafka.db.resolve", no_fetch)
    config = load_config(overrides={"db": "kafka", "kafka_version": "4.2.0",
                                    "metadata": "zookeeper"})
    with pytest.raises(ConfigError, match="Kafka 4.2.0 has no ZooKeeper mode"):
        build_test(config)


def test_an_unknown_version_names_the_offered_ones():
    with pytest.raises(ConfigError, match=r"--kafka-version must be one of 4.2.0, 4.1.1, "
                                          r"3.9.1, .*got '4.0.7'"):
        load_config(overrides={"db": "kafka", "kafka_version": "4.0.7"})


@needs_jars
@pytest.mark.parametrize("fault", ["pause-zookeeper", "isolate-zookeeper", "expire-session"])
def test_zookeeper_faults_on_kraft_are_refused_naming_the_kraft_fault(fault):
    config = load_config(overrides={"db": "kafka", "kafka_version": "3.9.1",
                                    "metadata": "kraft", "nemesis": fault})
    with pytest.raises(ConfigError, match=rf"--nemesis {fault} needs ZooKeeper; --db kafka "
                                          r"in KRaft mode has no ZooKeeper .* fault the "
                                          r"quorum with partition-quorum, or with "
                                          r"--controllers 3 fence-broker and "
                                          r"kill-quorum-majority"):
        build_test(config)


@needs_jars
def test_a_kraft_cluster_has_no_zookeeper_nodes_and_offers_the_controller():
    test = build_test(load_config(overrides={"db": "kafka", "kafka_version": "3.9.1",
                                             "metadata": "kraft", "nodes": 3,
                                             "nemesis": "kill,kill-controller"}))
    spec = test.db.spec
    assert (spec.zookeepers, spec.nodes) == (0, ("n1", "n2", "n3"))
    assert spec.launcher.metadata == "kraft" and len(spec.launcher.cluster_id) == 22
    offer = test.db.offer()
    assert {HasController, HasLeaders, Killable} <= offer.has
    assert HasZooKeeper not in offer.has
    assert test.db.start_timeout == 120.0


@needs_jars
def test_the_start_timeout_is_an_option():
    test = build_test(load_config(overrides={"db": "kafka", "start_timeout": 300}))
    assert test.db.start_timeout == 300
    with pytest.raises(ValueError, match="start_timeout must be > 0"):
        KafkaOptions(start_timeout=0)


KCHAOS = str(Path(sys.executable).parent / "kchaos")


@needs_jars
@pytest.mark.parametrize(("args", "said"), [
    (("--kafka-version", "4.1.1", "--metadata", "zookeeper"),
     "Kafka 4.1.1 has no ZooKeeper mode (Kafka 4.0 removed it): drop --metadata "
     "zookeeper, or choose --kafka-version 3.9.1"),
    (("--kafka-version", "4.0.7"), "--kafka-version must be one of 4.2.0, 4.1.1, 3.9.1"),
    (("--metadata", "kraft", "--zookeepers", "1"),
     "--zookeepers: these kafka brokers run without ZooKeeper (in KRaft mode they are their "
     "own controllers); drop --zookeepers"),
    (("--kafka-version", "3.9.1", "--kraft-quorum", "dynamic"),
     "--kraft-quorum dynamic: Kafka 3.9.1 in ZooKeeper mode has no KRaft quorum: add "
     "--metadata kraft, or drop --kraft-quorum"),
    (("--metadata", "kraft", "--nemesis", "expire-session"),
     "--nemesis expire-session needs ZooKeeper; --db kafka in KRaft mode has no ZooKeeper"),
])
def test_bad_kraft_input_is_one_line_exit_3_and_starts_nothing(tmp_path, args, said):
    env = dict(os.environ, KCHAOS_STATE_DIR=str(tmp_path / "state"))
    for command in (["run", "--store", str(tmp_path / "store")], ["cluster", "up"]):
        if command[0] == "cluster" and "--nemesis" in args:
            continue
        done = subprocess.run([KCHAOS, *command, "--db", "kafka", *args], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 3, done.stdout + done.stderr
        assert said in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert not (tmp_path / "state").exists() or not any((tmp_path / "state").iterdir())
        assert not (tmp_path / "store").exists()


def test_a_kraft_cluster_counts_no_zookeeper_nodes():
    assert KafkaOptions(kafka_version="4.1.1").zookeeper_nodes() == 0
    assert KafkaOptions(metadata="kraft").zookeeper_nodes() == 0
    assert KafkaOptions().zookeeper_nodes() == 0, "the default version is a 4.x, KRaft only"
    assert KafkaOptions(kafka_version="3.9.1").zookeeper_nodes() == 3
    assert KafkaOptions(kafka_version="3.9.1", zookeepers=1).zookeeper_nodes() == 1
    assert KafkaOptions(kafka_version="3.9.1", zookeepers=1,
                        colocate=True).zookeeper_nodes() == 0
