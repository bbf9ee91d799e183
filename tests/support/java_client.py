"""The Java client of the queue workload, compiled as the harness compiles it for a run."""

from __future__ import annotations

from harness.db.kafka.distribution import ZOOKEEPER_VERSION, fetch
from workloads.kafka.java.build import JavaRuntime, compiled


def java_runtime(version: str = ZOOKEEPER_VERSION) -> JavaRuntime:
    """The compiled client against Kafka `version`'s jars (cached by the bootstrap)."""
    return compiled(version, fetch(version).libs)
