"""ZooKeeper and brokers in containers of the real node image, driven through `Remote` only.

Builds (or finds in the image cache) the debootstrapped node image: `make test-docker`
sets KCHAOS_DOCKER_IMAGE_TESTS=1; without it these tests are skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer

from harness.control.docker import DockerRemote, PrivateDaemon
from harness.db.brokers import BrokerSet, KchaosBroker
from harness.db.files import fetch
from harness.db.zookeeper import ZooKeeperEnsemble
from tests.support import requirements

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(900),
    pytest.mark.skipif(os.environ.get("KCHAOS_DOCKER_IMAGE_TESTS") != "1",
                       reason="builds the node image: run by `make test-docker`"),
]
ROOT = "/var/lib/kchaos"
TOPIC = "docker"


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    if shutil.which("dockerd") is None or shutil.which("debootstrap") is None:
        requirements.unmet("needs dockerd (docker.io) and debootstrap")
    daemon = PrivateDaemon(tmp_path_factory.mktemp("dockerd"))
    daemon.start()
    try:
        remote = DockerRemote.provision(["n1", "n2", "n3", "z1"], base_url=daemon.base_url,
                                        state_root=tmp_path_factory.mktemp("state"))
        try:
            yield remote
        finally:
            remote.destroy()
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def cluster(remote):
    ensemble = ZooKeeperEnsemble(remote, ("z1",), ROOT)
    brokers = BrokerSet(remote, ("n1", "n2", "n3"), ROOT, ensemble.connect,
                        {"zookeeper.session.timeout.ms": "4000"}, KchaosBroker(remote.python))
    try:
        ensemble.start(timeout=60)
        brokers.start()
        brokers.wait_healthy(timeout=90)
        yield ensemble, brokers
    finally:
        brokers.close()


def test_the_image_has_what_a_node_needs(remote):
    assert "openjdk" in remote.exec("n1", ["java", "-version"]).err.lower()
    assert remote.exec("n1", [remote.python, "-c", "import broker, kazoo, kafka, crc32c; "
                                                    "print('ok')"]).out == "ok\n"
    assert remote.exec("n1", ["test", "-f", "/usr/share/java/zookeeper.jar"]).exit == 0
    for tool in (["nft", "--version"], ["iptables", "--version"], ["ip", "-V"], ["ps", "-V"]):
        remote.exec("n1", tool)


def _send(brokers: BrokerSet, values: range) -> None:
    producer = KafkaProducer(bootstrap_servers=brokers.bootstrap.split(","), acks="all",
                             retries=20, retry_backoff_ms=250, request_timeout_ms=10000)
    try:
        for value in values:
            producer.send(TOPIC, str(value).encode()).get(timeout=60)
    finally:
        producer.close(timeout=5)


def _read_all(brokers: BrokerSet) -> list[int]:
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=brokers.bootstrap.split(","),
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    try:
        return [int(record.value) for record in consumer]
    finally:
        consumer.close()


def _state(brokers: BrokerSet) -> dict:
    return json.loads(brokers.zk.get(f"/brokers/topics/{TOPIC}/partitions/0/state")[0])


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"no {what} after {timeout:g} s"
        time.sleep(0.2)
    return value


def test_produce_consume_across_a_partition_and_a_kill(remote, cluster, tmp_path):
    ensemble, brokers = cluster
    assert ensemble.mode("z1") == "standalone"
    _send(brokers, range(0, 50))
    assert _read_all(brokers) == list(range(0, 50))

    leader = brokers.broker_node(_state(brokers)["leader"])
    others = [n for n in remote.nodes if n != leader]
    for node in others:
        remote.firewall(node, drop_from=[leader])
    remote.firewall(leader, drop_from=others)
    try:
        new = _wait(lambda: _state(brokers)["leader"] not in (-1, brokers.broker_id(leader))
                    and _state(brokers)["leader"], 60, "new leader")
        assert brokers.broker_node(new) != leader
        _send(brokers, range(50, 70))
    finally:
        for node in remote.nodes:
            remote.firewall(node)
    _wait(lambda: len(_state(brokers)["isr"]) == 3, 90, "full ISR after healing")
    assert _read_all(brokers) == list(range(0, 70))

    victim = brokers.broker_node(_state(brokers)["leader"])
    assert brokers.kill(victim)
    assert not brokers.running(victim)
    _send(brokers, range(70, 80))
    assert brokers.start([victim]) == [victim]
    brokers.wait_healthy(timeout=90)
    assert _read_all(brokers) == list(range(0, 80))

    for path in brokers.log_files("n1")[:3]:
        assert fetch(remote, "n1", path, tmp_path / "n1" / os.path.basename(path)), path
    assert (tmp_path / "n1" / "server.log").stat().st_size > 0
    assert (tmp_path / "n1" / "controller-events.jsonl").stat().st_size > 0
    assert fetch(remote, "z1", ensemble.log_files("z1")[0], tmp_path / "zookeeper.log")
    assert "binding to port" in (tmp_path / "zookeeper.log").read_text().lower()
