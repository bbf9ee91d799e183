"""Apache Kafka as the broker of a node: `java -cp 'libs/*' kafka.Kafka server.properties`.

The broker's directory holds the generated `server.properties` and `log4j.properties`,
`data/` (log.dirs) and `logs/` (kafka.logs.dir: server.log, controller.log,
state-change.log), timestamps in UTC with milliseconds; errors also go to stdout
(`broker.log`), so a broker that fails to start says why there. When a node cannot see the jars
at this machine's path (an SSH host or a container), `prepare` uploads them once as a
tarball into the run's work directory.
"""

from __future__ import annotations

import contextlib
import re
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.control import Remote
from harness.db.brokers import (
    CLIENT_PORT,
    CONTROLLER_ID_BASE,
    QuorumState,
    chaos_defaults,
    properties_text,
)
from harness.db.kafka.kraft import (
    BROKER,
    COMBINED,
    CONTROLLER,
    METADATA_SEGMENT,
    QUORUM_STATE,
    STATIC,
    format_options,
    kraft_properties,
    parse_quorum_state,
    quorum_properties,
    start_command,
    voters_text,
)
from harness.db.kafka.logs import write_event_log
from harness.db.kafka.metadata_log import write_metadata_event_log

__all__ = ["KafkaBroker", "LOG4J_PROPERTIES", "kafka_properties", "kafka_release"]

LOG_PATTERN = "[%d{yyyy-MM-dd'T'HH:mm:ss.SSSZ}] %p %m (%c)%n"
# kafka.controller and state.change.logger at TRACE, as in Kafka's own log4j.properties:
# the controller's decisions that harness.db.kafka.logs reads are TRACE lines before 2.x
# (partition state changes, the LeaderAndIsr it sends) and DEBUG ones after (ISR updates)
LOG4J_PROPERTIES = f"""\
log4j.rootLogger=INFO, serverAppender, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.Threshold=ERROR
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern={LOG_PATTERN}
log4j.appender.serverAppender=org.apache.log4j.FileAppender
log4j.appender.serverAppender.File=${{kafka.logs.dir}}/server.log
log4j.appender.serverAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.serverAppender.layout.ConversionPattern={LOG_PATTERN}
log4j.appender.controllerAppender=org.apache.log4j.FileAppender
log4j.appender.controllerAppender.File=${{kafka.logs.dir}}/controller.log
log4j.appender.controllerAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.controllerAppender.layout.ConversionPattern={LOG_PATTERN}
log4j.appender.stateChangeAppender=org.apache.log4j.FileAppender
log4j.appender.stateChangeAppender.File=${{kafka.logs.dir}}/state-change.log
log4j.appender.stateChangeAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.stateChangeAppender.layout.ConversionPattern={LOG_PATTERN}
log4j.logger.kafka.controller=TRACE, controllerAppender
log4j.additivity.kafka.controller=false
log4j.logger.state.change.logger=TRACE, stateChangeAppender
log4j.additivity.state.change.logger=false
log4j.logger.org.apache.zookeeper=WARN
log4j.logger.kafka.request.logger=WARN
"""


# Sizes for small machines: internal topics of few partitions, few threads.
SMALL_MACHINE = {
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "num.recovery.threads.per.data.dir": "1",
    "log.flush.offset.checkpoint.interval.ms": "1000",
}


def kafka_properties(broker_id: int, address: str, zookeeper_connect: str, log_dir: str,
                     cluster_size: int, overrides: Mapping[str, str] | None = None,
                     version: str = "3.9.1") -> str:
    """Kafka `version`'s server.properties in ZooKeeper mode: the chaos defaults every db
    gets, one listener, sizes for small machines (`SMALL_MACHINE`), `overrides`.
    Before 0.11 no client can ask a Metadata request not to create the topics it names
    (Metadata v4's allow_auto_topic_creation), so any early one created the workload's
    topic with one partition ahead of its CreateTopics: those versions create no topics."""
    properties = chaos_defaults(broker_id, zookeeper_connect, log_dir, cluster_size)
    if kafka_release(version) < (0, 11):
        properties["auto.create.topics.enable"] = "false"
    properties["listeners"] = f"PLAINTEXT://{address}:{CLIENT_PORT}"
    properties.update(SMALL_MACHINE)
    properties.update(overrides or {})
    return properties_text(properties)


def kafka_release(version: str) -> tuple[int, ...]:
    """(major, minor) of a Kafka version such as "0.10.2.2" or "3.9.1"; a version that
    does not start so (a build of its own) counts as recent."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found[1]), int(found[2])) if found else (99, 0)


@dataclass(frozen=True)
class KafkaBroker:
    """Kafka `version` from the jars in `libs` (a path on the nodes), run by `java`."""

    version: str
    libs: str
    main_jar: str
    java: str = "java"
    heap: str = "768m"
    kind: str = "kafka"
    metadata: str = "zookeeper"  # or "kraft" (`harness.db.kafka.kraft`)
    cluster_id: str = ""  # KRaft: the id every node's storage is formatted with
    quorum: str = STATIC  # KRaft: "static" or "dynamic" (KIP-853) voters
    voters: str = ""  # KRaft: the voters (`kraft.voters_text`), set by `prepare`
    roles: str = COMBINED  # KRaft: process.roles ("broker" beside dedicated controllers)
    local_libs: str = ""  # the jars on this machine (`libs` before `prepare` uploads them)

    @property
    def uses_zookeeper(self) -> bool:
        return self.metadata == "zookeeper"

    @property
    def waits_for_old_registration(self) -> bool:
        """In ZooKeeper mode Kafka exits while its broker id is still registered; a KRaft
        broker registers again with a new incarnation."""
        return self.uses_zookeeper

    def prepare(self, remote: Remote, nodes: Sequence[str], workdir: str,
                controllers: Sequence[str] = ()) -> KafkaBroker:
        """Itself when every node sees `libs`; else the jars uploaded to the work directory.
        In KRaft mode the voters are the dedicated `controllers` (node ids from
        CONTROLLER_ID_BASE + 1) and the brokers only brokers; without `controllers`, every
        node of `nodes` is a voter (combined broker and controller). A dynamic quorum's
        voters get new metadata directory ids."""
        if self.uses_zookeeper:
            return self._with_jars(remote, nodes, workdir)
        if controllers:
            ready = replace(self, roles=BROKER, voters=voters_text(
                {CONTROLLER_ID_BASE + position: remote.address(node)
                 for position, node in enumerate(controllers, 1)}, self.quorum))
        else:
            ready = replace(self, roles=COMBINED, voters=voters_text(
                {position: remote.address(node) for position, node in enumerate(nodes, 1)},
                self.quorum))
        return ready._with_jars(remote, [*nodes, *controllers], workdir)

    def for_controllers(self) -> KafkaBroker:
        if self.uses_zookeeper:
            raise ValueError(f"Kafka {self.version} in ZooKeeper mode has no dedicated "
                             f"controllers: use --metadata kraft")
        return replace(self, roles=CONTROLLER)

    def _with_jars(self, remote: Remote, nodes: Sequence[str], workdir: str) -> KafkaBroker:
        missing = [node for node in nodes if not self._has_jars(remote, node, self.libs)]
        if not missing:
            return self
        target = f"{workdir}/kafka-{self.version}/libs"
        with tempfile.TemporaryDirectory(prefix="kchaos-kafka-") as scratch:
            archive = Path(scratch) / "libs.tar"
            with tarfile.open(archive, "w") as tar:
                tar.add(self.libs, arcname=".")
            for node in missing:
                if self._has_jars(remote, node, target):
                    continue  # nodes that share a filesystem
                remote.upload(node, archive, f"{target}.tar")
                remote.exec(node, ["tar", "-xf", f"{target}.tar", "-C",
                                   str(Path(target).parent), "--one-top-level=libs"],
                            timeout=300)
                remote.exec(node, ["rm", "-f", f"{target}.tar"])
        return replace(self, libs=target)

    def _has_jars(self, remote: Remote, node: str, libs: str) -> bool:
        return remote.exec(node, ["test", "-f", f"{libs}/{self.main_jar}"], check=False).exit == 0

    def configuration(self, broker_id: int, address: str, zookeeper_connect: str,
                      directory: str, cluster_size: int,
                      overrides: Mapping[str, str]) -> dict[str, str]:
        if self.uses_zookeeper:
            server = kafka_properties(broker_id, address, zookeeper_connect,
                                      f"{directory}/data", cluster_size, overrides, self.version)
        else:
            server = properties_text(kraft_properties(
                broker_id, self.roles, address, quorum_properties(self.quorum, self.voters),
                f"{directory}/data", cluster_size, {**SMALL_MACHINE, **overrides}))
        return {"server.properties": server, "log4j.properties": LOG4J_PROPERTIES}

    def command(self, directory: str) -> list[str]:
        java = [self.java, f"-Xms{self.heap}", f"-Xmx{self.heap}", "-XX:+UseG1GC",
                "-XX:MaxGCPauseMillis=20", "-XX:+ExitOnOutOfMemoryError",
                "-Djava.awt.headless=true", "-Duser.timezone=UTC",
                f"-Dlog4j.configuration=file:{directory}/log4j.properties",
                f"-Dkafka.logs.dir={directory}/logs"]
        if not self.uses_zookeeper:
            return start_command(java, self.libs, directory, self.cluster_id,
                                 format_options(self.quorum, self.roles, self.voters))
        return [*java, "-cp", f"{self.libs}/*", "kafka.Kafka", f"{directory}/server.properties"]

    def quorum_state(self, remote: Remote, node: str, directory: str) -> QuorumState | None:
        """What the node's `quorum-state` file says now; None in ZooKeeper mode, or when
        the file is missing or unreadable (not yet formatted, the node cut off)."""
        if self.uses_zookeeper:
            return None
        result = remote.exec(node, ["cat", f"{directory}/{QUORUM_STATE}"], check=False,
                             timeout=5.0)
        return parse_quorum_state(result.out) if result.exit == 0 else None

    def log_files(self, directory: str) -> list[str]:
        files = [f"{directory}/broker.log", f"{directory}/logs/server.log",
                 f"{directory}/logs/controller.log", f"{directory}/logs/state-change.log",
                 f"{directory}/server.properties"]
        if not self.uses_zookeeper:
            files.append(f"{directory}/{METADATA_SEGMENT}")
        return files

    def derive_logs(self, node_dir: Path) -> list[Path]:
        """The node's controller event log (`controller-events.jsonl`): in ZooKeeper mode
        parsed from its controller.log and state-change.log (`harness.db.kafka.logs`), in
        KRaft mode decoded from its copy of the metadata log
        (`harness.db.kafka.metadata_log`) by Kafka's own decoder, with this machine's jars.
        A node without those logs has none."""
        if not self.uses_zookeeper:
            segment = node_dir / Path(METADATA_SEGMENT).name
            if not segment.is_file():
                return []
            return [write_metadata_event_log(node_dir, segment, self.local_libs or self.libs,
                                             self.java)]
        with contextlib.suppress(FileNotFoundError):
            return [write_event_log(node_dir)]
        return []

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "version": self.version, "libs": self.libs,
                "main_jar": self.main_jar, "java": self.java, "heap": self.heap,
                "metadata": self.metadata, "cluster_id": self.cluster_id,
                "quorum": self.quorum, "voters": self.voters, "roles": self.roles,
                "local_libs": self.local_libs}
