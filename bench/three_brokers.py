"""What the side-by-side benchmarks share: three brokers of a setup in network namespaces
(as root) with the db's safe defaults (min.insync.replicas=2, unclean election off,
replica.lag.time.max.ms=10000), a topic of replication factor 3 with its full ISR, and the
`--db` list of setups:

- `kchaos`: our broker, with one ZooKeeper (zookeeper.session.timeout.ms=6000);
- `kafka`: Apache Kafka 3.9.1 in ZooKeeper mode, with one ZooKeeper (the same timeout);
- `kafka-kraft`: Apache Kafka 4.1.1 in KRaft mode, each node a broker and a voter of the
  metadata quorum (no ZooKeeper).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from harness.control.backends import BackendOptions
from harness.db.part import DB, DBContext
from harness.db.registry import DBS

__all__ = ["SETUPS", "create_topic", "db_names", "three_brokers", "wait_full_isr"]

# setup name -> (db, the db's options)
SETUPS: Mapping[str, tuple[str, Mapping[str, Any]]] = {
    "kchaos": ("kchaos", {"zookeepers": 1}),
    "kafka": ("kafka", {"zookeepers": 1, "kafka_version": "3.9.1"}),
    "kafka-kraft": ("kafka", {"kafka_version": "4.1.1"}),
}


def three_brokers(setup: str) -> DB:
    """The db of `setup` on three brokers, with its defaults."""
    db_name, options = SETUPS[setup]
    kind = DBS[db_name]
    return kind.build(kind.options(**options), DBContext(3, BackendOptions()))


def create_topic(cluster, topic: str, partitions: int) -> None:
    """`topic` with replication factor 3, once every partition has 3 in-sync replicas."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, 3)], operation_timeout=30)[topic].result()
    wait_full_isr(cluster, topic, partitions)


def wait_full_isr(cluster, topic: str, partitions: int, timeout: float = 90.0) -> None:
    """Until every partition of `topic` has 3 in-sync replicas (as ZooKeeper or, in KRaft
    mode, a broker's Metadata says); TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = [cluster.partition_state(topic, p) for p in range(partitions)]
        if all(state is not None and len(state.isr) == 3 for state in states):
            return
        time.sleep(0.2)
    raise TimeoutError(f"{topic}: not every partition has 3 in-sync replicas")


def db_names(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """The setups of a comma-separated `--db`; a parser error names any unknown one."""
    names = text.split(",")
    unknown = [name for name in names if name not in SETUPS]
    if unknown:
        parser.error(f"--db: unknown {', '.join(unknown)}; known: {', '.join(SETUPS)}")
    return names
