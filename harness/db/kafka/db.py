"""The `kafka` db: Apache Kafka brokers on the nodes, with the same real ZooKeeper ensemble,
or in KRaft mode with a metadata quorum of their own and no ZooKeeper (`kraft`).

Options are those of the `kchaos` db (ZooKeepers, co-location, broker properties with the
same safe defaults) plus which Kafka: `kafka_version` (jars from Maven Central, cached) or
`kafka_home` (an official binary distribution), its `metadata` mode, the `java` that runs
it and its `heap`. In KRaft mode the ZooKeeper options do not apply.
Broker properties are judged against the names that Kafka version's own `KafkaConfig`
knows, before anything starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from harness.db.cluster import MAX_CONTROLLERS
from harness.db.cluster_db import ClusterDB, ClusterOptions, cluster_spec
from harness.db.kafka.broker import KafkaBroker, kafka_release
from harness.db.kafka.distribution import (
    DEFAULT_VERSION,
    VERSIONS,
    ZOOKEEPER_VERSION,
    KafkaUnavailable,
    resolve,
)
from harness.db.kafka.kraft import DYNAMIC, QUORUM_KINDS, STATIC, new_cluster_id
from harness.db.part import DBContext, DBKind
from nemesis.capabilities import HasZooKeeper, LosesUnflushed

__all__ = ["KIND", "KafkaOptions", "check_kafka_config", "metadata_mode", "quorum_kind"]

METADATA_MODES = ("kraft", "zookeeper")
KRAFT_SINCE = (3, 3)
DYNAMIC_QUORUM_SINCE = (3, 9)  # KIP-853
DYNAMIC_QUORUM_DEFAULT_SINCE = (4, 0)
# What a KRaft cluster cannot serve, and why.
KRAFT_LACKS = {
    HasZooKeeper: ("--db kafka in KRaft mode has no ZooKeeper (its metadata quorum replaces "
                   "it): fault the quorum with partition-quorum, or with --controllers 3 "
                   "fence-broker and kill-quorum-majority; the active controller with "
                   "kill-controller, pause or isolate-controller"),
}
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
    metadata: str | None = field(default=None, metadata={
        "help": "where the cluster keeps its metadata: kraft (a controller quorum, Kafka "
                "3.3 and later, the only mode of 4.x) or zookeeper (before 4.0, e.g. "
                f"--kafka-version {ZOOKEEPER_VERSION}); default: zookeeper before 4.0, "
                "kraft from 4.0",
        "choices": METADATA_MODES})
    kraft_quorum: str | None = field(default=None, metadata={
        "help": "KRaft: static voters (controller.quorum.voters) or a dynamic quorum "
                "(KIP-853, Kafka 3.9 and later: formatted with its initial voters, found "
                "through controller.quorum.bootstrap.servers); default: dynamic from 4.0, "
                "static before",
        "choices": QUORUM_KINDS})
    controllers: int = field(default=0, metadata={
        "help": "KRaft: dedicated controller nodes (process.roles=controller), 1 to "
                f"{MAX_CONTROLLERS}; 0 (the default): every broker node is also a "
                "controller (combined)"})
    java: str = field(default="java", metadata={"help": "the java that runs Kafka"})
    heap: str = field(default="768m", metadata={"help": "each Kafka broker's JVM heap"})
    start_timeout: float = field(default=120.0, metadata={
        "help": "seconds the cluster may take to become healthy (a loaded machine starts "
                "JVMs slowly)"})

    def zookeeper_nodes(self) -> int:
        """0 in KRaft mode (the version's default or --metadata kraft)."""
        try:
            kraft = metadata_mode(self.kafka_version, self.metadata) == "kraft"
        except ValueError:
            kraft = False
        return 0 if kraft else super().zookeeper_nodes()

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.heap[:-1].isdigit() or self.heap[-1] not in "mMgG":
            raise ValueError(f"heap must be like 768m or 2g, got {self.heap!r}")
        if self.start_timeout <= 0:
            raise ValueError(f"start_timeout must be > 0, got {self.start_timeout:g}")
        if not 0 <= self.controllers <= MAX_CONTROLLERS:
            raise ValueError(f"--controllers must be 0 to {MAX_CONTROLLERS}, got "
                             f"{self.controllers}")


def build(options: KafkaOptions, context: DBContext) -> ClusterDB:
    """ValueError when Kafka's jars cannot be had, the version has no such metadata mode,
    or a broker property is one this Kafka version does not know."""
    if options.kafka_home is None:
        _modes(options, options.kafka_version)  # refused before any download
    try:
        distribution = resolve(options.kafka_version, options.kafka_home)
        mode, quorum = _modes(options, distribution.version)
        check_kafka_config(options.broker_config, distribution.config_names(options.java),
                           distribution.version)
        main_jar = distribution.main_jar
    except KafkaUnavailable as error:
        raise ValueError(str(error)) from error
    launcher = KafkaBroker(distribution.version, str(distribution.libs), main_jar,
                           options.java, options.heap, metadata=mode, quorum=quorum,
                           cluster_id=new_cluster_id() if mode == "kraft" else "",
                           local_libs=str(distribution.libs))
    why_not = {LosesUnflushed: NO_POWER_LOSS}
    if mode == "kraft":
        why_not |= KRAFT_LACKS
    return ClusterDB(cluster_spec(options, context, launcher, options.controllers), "kafka",
                     why_not=why_not, start_timeout=options.start_timeout)


def _modes(options: KafkaOptions, version: str) -> tuple[str, str]:
    """(metadata mode, quorum kind) of Kafka `version` as `options` ask; ValueError when the
    version has no such mode or quorum, or dedicated controllers are asked in ZooKeeper
    mode."""
    mode = metadata_mode(version, options.metadata)
    _check_controllers(options, mode)
    return mode, quorum_kind(version, mode, options.kraft_quorum)


def _check_controllers(options: KafkaOptions, mode: str) -> None:
    """ValueError when dedicated controllers are asked of a cluster in ZooKeeper mode."""
    if options.controllers and mode == "zookeeper":
        raise ValueError(f"--controllers {options.controllers}: Kafka {options.kafka_version} "
                         f"in ZooKeeper mode has no KRaft controllers (ZooKeeper elects one of "
                         f"the brokers): add --metadata kraft, or drop --controllers")


def metadata_mode(version: str, asked: str | None) -> str:
    """"kraft" or "zookeeper": `asked`, or the version's default (zookeeper before 4.0);
    ValueError when Kafka `version` has no such mode."""
    release = kafka_release(version)
    mode = asked or ("kraft" if release >= (4, 0) else "zookeeper")
    if mode == "zookeeper" and release >= (4, 0):
        raise ValueError(f"Kafka {version} has no ZooKeeper mode (Kafka 4.0 removed it): "
                         f"drop --metadata zookeeper, or choose --kafka-version "
                         f"{ZOOKEEPER_VERSION}")
    if mode == "kraft" and release < KRAFT_SINCE:
        raise ValueError(f"Kafka {version} has no production KRaft mode (it came with "
                         f"{'.'.join(map(str, KRAFT_SINCE))}): use --metadata zookeeper, or "
                         f"choose --kafka-version {ZOOKEEPER_VERSION} or a 4.x one")
    return mode


def quorum_kind(version: str, mode: str, asked: str | None) -> str:
    """"static" or "dynamic": `asked`, or the version's default (dynamic from 4.0); static
    in ZooKeeper mode, where nothing reads it. ValueError when Kafka `version` in `mode`
    has no such quorum."""
    release = kafka_release(version)
    if mode == "zookeeper":
        if asked:
            raise ValueError(f"--kraft-quorum {asked}: Kafka {version} in ZooKeeper mode has "
                             f"no KRaft quorum: add --metadata kraft, or drop --kraft-quorum")
        return STATIC
    kind = asked or (DYNAMIC if release >= DYNAMIC_QUORUM_DEFAULT_SINCE else STATIC)
    if kind == DYNAMIC and release < DYNAMIC_QUORUM_SINCE:
        raise ValueError(f"--kraft-quorum dynamic: Kafka {version} has static voters only "
                         f"(the dynamic quorum of KIP-853 came with "
                         f"{'.'.join(map(str, DYNAMIC_QUORUM_SINCE))}): drop --kraft-quorum, "
                         f"or choose --kafka-version 3.9.1 or a 4.x one")
    return kind


KIND = DBKind(KafkaOptions, build)


def check_kafka_config(overrides: Mapping[str, str], known: frozenset[str],
                       version: str) -> None:
    """ValueError naming each property Kafka `version` does not know."""
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"broker_config: Apache Kafka {version} knows no property "
                         f"{', '.join(unknown)} (a kchaos-only property? check the spelling "
                         f"against Kafka's broker configs)")
