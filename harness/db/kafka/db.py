"""The `kafka` db: Apache Kafka brokers on the nodes, with the same real ZooKeeper ensemble.

Options are those of the `kchaos` db (ZooKeepers, co-location, broker properties with the
same safe defaults) plus which Kafka: `kafka_version` (jars from Maven Central, cached) or
`kafka_home` (an official binary distribution), the `java` that runs it and its `heap`.
Broker properties are judged against the names that Kafka version's own `KafkaConfig`
knows, before anything starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from harness.db.cluster_db import ClusterDB, ClusterOptions, cluster_spec
from harness.db.kafka.broker import KafkaBroker
from harness.db.kafka.distribution import DEFAULT_VERSION, VERSIONS, KafkaUnavailable, resolve
from harness.db.part import DBContext, DBKind
from nemesis.capabilities import LosesUnflushed

__all__ = ["KIND", "KafkaOptions", "check_kafka_config"]

NO_POWER_LOSS = ("--db kafka has none: Apache Kafka has no property that drops its unflushed "
                 "log tail on a crash (kchaos.debug.lose-unflushed-on-crash is our broker's "
                 "fault injection); a real power loss needs machines to switch off "
                 "(--nemesis crash-vm)")


@dataclass(frozen=True, kw_only=True)
class KafkaOptions(ClusterOptions):
    """Options of the kafka db: those of every db on a cluster, and which Kafka runs how
    (see `harness.options`)."""

    kafka_version: str = field(default=DEFAULT_VERSION, metadata={
        "help": "Apache Kafka version, jars from Maven Central (cached in .cache/kafka)",
        "choices": tuple(VERSIONS)})
    kafka_home: str | None = field(default=None, metadata={
        "help": "an Apache Kafka binary distribution to run instead (its libs/)",
        "metavar": "DIR"})
    java: str = field(default="java", metadata={"help": "the java that runs Kafka"})
    heap: str = field(default="768m", metadata={"help": "each Kafka broker's JVM heap"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.heap[:-1].isdigit() or self.heap[-1] not in "mMgG":
            raise ValueError(f"heap must be like 768m or 2g, got {self.heap!r}")


def build(options: KafkaOptions, context: DBContext) -> ClusterDB:
    """ValueError when Kafka's jars cannot be had or a broker property is one this Kafka
    version does not know."""
    try:
        distribution = resolve(options.kafka_version, options.kafka_home)
        check_kafka_config(options.broker_config, distribution.config_names(options.java),
                           distribution.version)
        main_jar = distribution.main_jar
    except KafkaUnavailable as error:
        raise ValueError(str(error)) from error
    launcher = KafkaBroker(distribution.version, str(distribution.libs), main_jar,
                           options.java, options.heap)
    return ClusterDB(cluster_spec(options, context, launcher), "kafka",
                     why_not={LosesUnflushed: NO_POWER_LOSS})


KIND = DBKind(KafkaOptions, build)


def check_kafka_config(overrides: Mapping[str, str], known: frozenset[str],
                       version: str) -> None:
    """ValueError naming each property Kafka `version` does not know."""
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"broker_config: Apache Kafka {version} knows no property "
                         f"{', '.join(unknown)} (a kchaos-only property? check the spelling "
                         f"against Kafka's broker configs)")
