"""Failover of our broker and of Apache Kafka, side by side: kill -9 of a partition's leader
until the first acknowledged acks=all write.

For each `--db` (default both: kchaos, kafka) brings up three brokers and one ZooKeeper in
network namespaces (as root) with the same ZooKeeper session timeout, creates a topic of
one partition with replication factor 3 (min.insync.replicas=2), and keeps a
confluent-kafka producer (acks=all, idempotent) writing a record every 5 ms. Each round
kills the leader's broker with SIGKILL and measures the time from the kill to the ack of
the first write sent after it; then restarts the broker and waits for the full ISR. Prints
each round, where its time went (from the controller event logs: until the controller's
notice, the election, the first ack) and the median per db. Clusters are taken down at
the end.

    .venv/bin/python bench/failover.py [--db kchaos,kafka] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer  # noqa: E402
from three_brokers import create_topic, db_names, three_brokers, wait_full_isr  # noqa: E402

from checker.cluster.event_log import ControllerEvent, event_log_paths, read_event_logs  # noqa: E402
from harness.db.znodes import read_snapshot  # noqa: E402

TOPIC = "failover"


class Writer:
    """A producer thread writing every 5 ms; remembers when each write was sent and when
    its ack arrived."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 0,
                                  "message.timeout.ms": 120000})
        self.acks: list[tuple[float, float]] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._write, daemon=True)
        self.thread.start()

    def _write(self) -> None:
        def delivered(sent: float):
            def callback(error, message) -> None:
                if error is None:
                    self.acks.append((sent, time.monotonic()))
            return callback
        while not self.stopped.is_set():
            self.producer.produce(TOPIC, b"x" * 100, on_delivery=delivered(time.monotonic()))
            self.producer.poll(0.005)
        self.producer.flush(30)

    def first_ack_after(self, moment: float, timeout: float = 120.0) -> float | None:
        """Seconds from `moment` to the ack of the first write sent after it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            later = [acked for sent, acked in self.acks[-2000:] if sent > moment]
            if later:
                return min(later) - moment
            time.sleep(0.01)
        return None

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(60)


def partition_state(cluster):
    return next((s for s in read_snapshot(cluster.zk).partitions if s.topic == TOPIC), None)


def split(events: list[ControllerEvent], killed_ms: float, took: float) -> str:
    """Where a failover's time went: kill -> the controller's notice (a broker change or a
    new controller) -> the partition's election -> the first acknowledged write."""
    after = [e for e in events if e.time >= killed_ms]
    notice = next((e.time for e in after if e.event in ("broker-change", "become-controller")),
                  None)
    elected = next((e.time for e in after if e.event == "elect-leader" and e.topic == TOPIC),
                   None)
    if notice is None or elected is None:
        return "no election in the controller event logs"
    acked = took - (elected - killed_ms) / 1000
    return (f"notice {(notice - killed_ms) / 1000:.2f} s, election +"
            f"{(elected - notice) / 1000:.2f} s, first ack +{acked:.2f} s")


def measure(db_name: str, rounds: int) -> list[float]:
    seconds = []
    kills: list[tuple[float, float]] = []
    with three_brokers(db_name).start(timeout=120) as cluster:
        create_topic(cluster, TOPIC, 1)
        writer = Writer(cluster.bootstrap_servers)
        try:
            for number in range(1, rounds + 1):
                time.sleep(3)
                leader = partition_state(cluster).leader
                node = cluster.broker_node(leader)
                killed, killed_ms = time.monotonic(), time.time() * 1000
                cluster.kill(node)
                took = writer.first_ack_after(killed)
                if took is None:
                    print(f"{db_name:>6} round {number}: no write acknowledged within 120 s")
                else:
                    seconds.append(took)
                    kills.append((killed_ms, took))
                    print(f"{db_name:>6} round {number}: leader broker {leader} killed, first "
                          f"acks=all write acknowledged after {took:.2f} s", flush=True)
                cluster.start(node)
                cluster.broker_set.wait_healthy(timeout=90)
                wait_full_isr(cluster, TOPIC, 1)
        finally:
            writer.stop()
        with tempfile.TemporaryDirectory(prefix="kchaos-failover-") as logs:
            cluster.collect_logs(Path(logs) / "nodes")
            events = read_event_logs(event_log_paths(logs)).events
            for number, (killed_ms, took) in enumerate(kills, 1):
                print(f"{db_name:>6} round {number}: {split(events, killed_ms, took)}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="kchaos,kafka", help="comma-separated dbs")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    names = db_names(parser, args.db)
    print("3 brokers, 1 ZooKeeper, zookeeper.session.timeout.ms=6000, RF 3, "
          "min.insync.replicas=2; kill -9 of the leader -> first acknowledged acks=all write")
    medians = {}
    for name in names:
        seconds = measure(name, args.rounds)
        medians[name] = statistics.median(seconds) if seconds else float("nan")
        print(f"{name:>6} median {medians[name]:.2f} s over {len(seconds)} rounds", flush=True)
    if "kchaos" in medians and "kafka" in medians:
        print(f"failover ours/Kafka: {medians['kchaos'] / medians['kafka']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
