"""What the side-by-side benchmarks share: three brokers of a db and one ZooKeeper in
network namespaces (as root) with the db's safe defaults (min.insync.replicas=2, unclean
election off, zookeeper.session.timeout.ms=6000, replica.lag.time.max.ms=10000), a
topic of replication factor 3 with its full ISR, and the `--db` list."""

from __future__ import annotations

import argparse
import time

from confluent_kafka.admin import AdminClient, NewTopic

from harness.control.backends import BackendOptions
from harness.db.part import DB, DBContext
from harness.db.registry import DBS
from harness.db.znodes import read_snapshot

__all__ = ["create_topic", "db_names", "three_brokers", "wait_full_isr"]


def three_brokers(db_name: str) -> DB:
    """The db `db_name` on three brokers and one ZooKeeper, with its defaults."""
    kind = DBS[db_name]
    return kind.build(kind.options(zookeepers=1), DBContext(3, BackendOptions()))


def create_topic(cluster, topic: str, partitions: int) -> None:
    """`topic` with replication factor 3, once every partition has 3 in-sync replicas."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, 3)], operation_timeout=30)[topic].result()
    wait_full_isr(cluster, topic, partitions)


def wait_full_isr(cluster, topic: str, partitions: int, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = [s for s in read_snapshot(cluster.zk).partitions if s.topic == topic]
        if len(states) == partitions and all(len(s.isr) == 3 for s in states):
            return
        time.sleep(0.2)
    raise TimeoutError(f"{topic}: not every partition has 3 in-sync replicas")


def db_names(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """The dbs of a comma-separated `--db`; a parser error names any unknown one."""
    names = text.split(",")
    unknown = [name for name in names if name not in DBS]
    if unknown:
        parser.error(f"--db: unknown {', '.join(unknown)}; known: {', '.join(DBS)}")
    return names
