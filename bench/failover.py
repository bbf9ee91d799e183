"""Failover of our broker, of Apache Kafka on ZooKeeper and of Apache Kafka on KRaft, side by
side: kill -9 of a partition's leader until the first acknowledged acks=all write, and
kill -9 of the active controller until the next completed metadata change.

For each `--db` setup (default all three: kchaos, kafka, kafka-kraft; see
`three_brokers.py`) brings up three brokers in network namespaces (as root), creates a
topic of one partition with replication factor 3 (min.insync.replicas=2), and keeps a
confluent-kafka producer (acks=all, idempotent) writing a record every 5 ms. Then

- each leader round kills the partition leader's broker with SIGKILL and measures the
  time from the kill to the ack of the first write sent after it;
- each controller round kills the active controller's node with SIGKILL (in ZooKeeper mode
  the broker holding /controller; in KRaft mode the metadata quorum's leader, which on
  these combined nodes is a broker too) and measures the time from the kill to the first
  topic created after it (replication factor 1) whose partition has a leader: a metadata
  change the new controller completed (tried with a new admin client each time, each try
  given `CREATE_TIMEOUT` s, so to within about a second);

after each round the node is started again and the partition's ISR is full. Prints each
round, where a leader round's time went (from the controller event logs, or the metadata
log in KRaft mode: until the controller's notice, the election, the first ack) and the
median per setup side by side. Clusters are taken down at the end.

    .venv/bin/python bench/failover.py [--db kchaos,kafka,kafka-kraft] [--rounds 5]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from three_brokers import SETUPS, create_topic, db_names, three_brokers, wait_full_isr  # noqa: E402

from checker.cluster.event_log import ControllerEvent, event_log_paths, read_event_logs  # noqa: E402

TOPIC = "failover"
GIVE_UP = 120.0  # seconds a round may take before it counts as failed
CREATE_TIMEOUT = 1.0  # seconds one topic creation may take: the controller round's resolution
RETRY_CREATE = 2.0  # seconds after a creation before another topic is created


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

    def first_ack_after(self, moment: float, timeout: float = GIVE_UP) -> float | None:
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


def first_metadata_change_after(cluster, moment: float, names) -> float | None:
    """Seconds from `moment` until a topic created after it (one partition, replication
    factor 1, a new name from `names`: at once after a refused creation, `RETRY_CREATE` s
    after an accepted one whose partition has no leader yet) has a leader; None after
    `GIVE_UP` s."""
    created: list[str] = []
    tried = float("-inf")
    while time.monotonic() - moment < GIVE_UP:
        if any((state := cluster.partition_state(name, 0)) is not None and state.leader >= 0
               for name in created):
            return time.monotonic() - moment
        if time.monotonic() - tried >= RETRY_CREATE:
            tried = time.monotonic()
            name = next(names)
            # a new client each time: librdkafka's admin client sends to the controller
            # its metadata named, and keeps waiting for a dead one for minutes
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers,
                                 "socket.timeout.ms": int(CREATE_TIMEOUT * 1000)})
            future = admin.create_topics([NewTopic(name, 1, 1)],
                                         request_timeout=CREATE_TIMEOUT)[name]
            try:
                future.result(timeout=CREATE_TIMEOUT + 1)
                created.append(name)
            except (KafkaException, TimeoutError):
                tried = float("-inf")  # refused (no controller yet): try again at once
        time.sleep(0.05)
    return None


def split(events: list[ControllerEvent], killed_ms: float, took: float) -> str:
    """Where a leader failover's time went: kill -> the controller's notice (a broker
    change or a new controller) -> the partition's election -> the first acknowledged
    write."""
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


def restart(cluster, node: str) -> None:
    cluster.start(node)
    cluster.broker_set.wait_healthy(timeout=90)
    wait_full_isr(cluster, TOPIC, 1)


def measure(setup: str, rounds: int) -> tuple[list[float], list[float]]:
    """The leader rounds' and the controller rounds' seconds on `setup`."""
    leader_seconds: list[float] = []
    controller_seconds: list[float] = []
    kills: list[tuple[float, float]] = []
    names = (f"probe-{number}" for number in itertools.count())
    with three_brokers(setup).start(timeout=180) as cluster:
        create_topic(cluster, TOPIC, 1)
        writer = Writer(cluster.bootstrap_servers)
        try:
            for number in range(1, rounds + 1):
                time.sleep(3)
                leader = cluster.partition_state(TOPIC, 0).leader
                node = cluster.broker_node(leader)
                killed, killed_ms = time.monotonic(), time.time() * 1000
                cluster.kill(node)
                took = writer.first_ack_after(killed)
                if took is None:
                    print(f"{setup:>11} leader round {number}: no write acknowledged "
                          f"within {GIVE_UP:.0f} s", flush=True)
                else:
                    leader_seconds.append(took)
                    kills.append((killed_ms, took))
                    print(f"{setup:>11} leader round {number}: leader broker {leader} "
                          f"killed, first acks=all write acknowledged after {took:.2f} s",
                          flush=True)
                restart(cluster, node)
            for number in range(1, rounds + 1):
                time.sleep(3)
                node = cluster.controller()
                if node is None:
                    print(f"{setup:>11} controller round {number}: no active controller "
                          "found", flush=True)
                    continue
                killed = time.monotonic()
                cluster.kill(node)
                took = first_metadata_change_after(cluster, killed, names)
                if took is None:
                    print(f"{setup:>11} controller round {number}: no topic created within "
                          f"{GIVE_UP:.0f} s", flush=True)
                else:
                    controller_seconds.append(took)
                    print(f"{setup:>11} controller round {number}: controller {node} killed, "
                          f"first topic created and led after {took:.2f} s", flush=True)
                restart(cluster, node)
        finally:
            writer.stop()
        with tempfile.TemporaryDirectory(prefix="kchaos-failover-") as logs:
            cluster.collect_logs(Path(logs) / "nodes")
            events = read_event_logs(event_log_paths(logs)).events
            for number, (killed_ms, took) in enumerate(kills, 1):
                print(f"{setup:>11} leader round {number}: {split(events, killed_ms, took)}")
    return leader_seconds, controller_seconds


def median(seconds: list[float]) -> str:
    return f"{statistics.median(seconds):.2f} s" if seconds else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=",".join(SETUPS), help="comma-separated setups")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    names = db_names(parser, args.db)
    print("3 brokers; ZooKeeper setups: 1 ZooKeeper, zookeeper.session.timeout.ms=6000; "
          "RF 3, min.insync.replicas=2; kill -9 of the leader -> first acknowledged acks=all "
          "write; kill -9 of the active controller -> first new topic with a leader")
    results = {}
    for name in names:
        results[name] = measure(name, args.rounds)
    print("\n| setup | leader kill -> first ack, median | controller kill -> first "
          "created topic led, median | rounds (leader, controller) |\n|---|---|---|---|")
    for name, (leader, controller) in results.items():
        print(f"| {name} | {median(leader)} | {median(controller)} | "
              f"{len(leader)}, {len(controller)} of {args.rounds} |")
    failed = any(len(leader) < args.rounds or len(controller) < args.rounds
                 for leader, controller in results.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
