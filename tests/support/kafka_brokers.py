"""A loopback cluster of real Apache Kafka 3.9.1 brokers (ZooKeeper mode) for tests.

`KafkaCluster` is `BrokerCluster` with `kafka.Kafka` in place of `python -m broker`: the
same interface (bootstrap, brokers, kill(id, sig), start_broker(id), stop(), partition
state from ZooKeeper, context manager) and its own chroot in the given ZooKeeper. Each
broker runs from the jars cached in `.cache/kafka/3.9.1/libs` with harness.db.kafka's
server.properties and log4j.properties (its logs in `<broker dir>/logs`), tuned for fast
tests: the offsets topic of 3 partitions replicated 3 times, no initial rebalance delay,
zookeeper.session.timeout.ms=4000. The latter is below the consumers' session timeout
(6000 ms) on purpose: a coordinator moves only when the dead broker's ZooKeeper session
expires, and at 6000 ms librdkafka's own session timer fires first, its members rejoin
under new ids and the group waits a further session timeout for the old ones (12.7 s
from the kill to records read, measured). A restarted broker waits until its old
registration has expired (Kafka exits when its id is still taken).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from harness.db.kafka.broker import KafkaBroker
from harness.db.kafka.distribution import CACHE, COMPLETE, Distribution
from tests.support.brokers import REPO, BrokerCluster, BrokerProcess

__all__ = ["KAFKA_VERSION", "FAST_PROPERTIES", "KafkaCluster", "kafka_unavailable"]

KAFKA_VERSION = "3.9.1"
FAST_PROPERTIES = {
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "zookeeper.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "3000",
    "min.insync.replicas": "1",
    "log.segment.bytes": str(16 * 1024 * 1024),
}


def kafka_unavailable(version: str = KAFKA_VERSION) -> str | None:
    """Why a Kafka cluster cannot start here (jars not cached), or None."""
    if not (CACHE / version / COMPLETE).exists():
        return (f"Apache Kafka {version} jars are not cached in {CACHE / version}: "
                "run scripts/bootstrap.sh")
    return None


@dataclass
class KafkaCluster(BrokerCluster):
    version: str = KAFKA_VERSION
    heap: str = "512m"

    @property
    def launcher(self) -> KafkaBroker:
        libs = CACHE / self.version / "libs"
        return KafkaBroker(self.version, str(libs), Distribution(self.version, libs).main_jar,
                           heap=self.heap)

    def start(self, timeout: float = 90.0) -> None:
        reason = kafka_unavailable(self.version)
        if reason is not None:
            raise RuntimeError(reason)
        super().start(timeout)

    def write_config(self, broker: BrokerProcess) -> None:
        overrides = {**FAST_PROPERTIES, "listeners": f"PLAINTEXT://127.0.0.1:{broker.port}",
                     **self.properties}
        files = self.launcher.configuration(
            broker.broker_id, "127.0.0.1", self.zookeeper_connect + self.chroot,
            str(broker.directory), self.size, overrides)
        for name, text in files.items():
            (broker.directory / name).write_text(text)

    def start_broker(self, broker_id: int, wait: bool = True, timeout: float = 60.0) -> None:
        broker = self.brokers[broker_id]
        if broker.alive:
            raise RuntimeError(f"broker {broker_id} is already running")
        deadline = time.monotonic() + timeout
        while self.registration_owner(broker_id) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"broker {broker_id}'s old registration never expired")
            time.sleep(0.1)
        self.write_config(broker)
        out = open(broker.directory / "stdout.log", "ab")
        broker.process = subprocess.Popen(
            self.launcher.command(str(broker.directory)), cwd=REPO, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        if wait:
            while self.registration_owner(broker_id) is None:
                if not broker.alive:
                    raise RuntimeError(f"broker {broker_id} exited: {self.tail(broker_id)}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"broker {broker_id} did not register again")
                time.sleep(0.1)
            self.wait_for_metadata(broker_id, max(deadline - time.monotonic(), 1.0))

    def tail(self, broker_id: int, lines: int = 30) -> str:
        directory: Path = self.brokers[broker_id].directory
        text = ""
        for path in (directory / "stdout.log", directory / "logs" / "server.log"):
            if path.exists():
                text += f"--- {path}\n" + "\n".join(path.read_text().splitlines()[-lines:]) + "\n"
        return text
