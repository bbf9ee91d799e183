"""The `kchaos` db: our broker (`broker/`) on the nodes, with a real ZooKeeper ensemble."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.config import BrokerConfig
from broker.config import ConfigError as BrokerConfigError
from harness.db.brokers import server_properties
from harness.db.cluster import Cluster, ClusterSpec
from harness.db.part import DBContext, DBKind

__all__ = ["KIND", "SAFE_BROKER_CONFIG", "KchaosDB", "KchaosOptions"]

SAFE_BROKER_CONFIG = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}


@dataclass(frozen=True, kw_only=True)
class KchaosOptions:
    """Options of the kchaos db (see `harness.options`)."""

    zookeepers: int = field(default=3, metadata={"help": "ZooKeeper nodes"})
    colocate: bool = field(default=False, metadata={
        "help": "run ZooKeeper on the first broker nodes"})
    broker_config: Mapping[str, str] = field(
        default_factory=lambda: dict(SAFE_BROKER_CONFIG),
        metadata={"help": "a broker property (server.properties); merged over the defaults"})

    def __post_init__(self) -> None:
        if not 1 <= self.zookeepers <= 99:
            raise ValueError("zookeepers must be 1 to 99")


@dataclass(frozen=True)
class KchaosDB:
    """Brokers and ZooKeeper as `ClusterSpec` describes them."""

    spec: ClusterSpec
    name: str = "kchaos"

    def start(self, logs_dest: Path | None = None, timeout: float = 60.0) -> Cluster:
        return Cluster.up(self.spec, timeout=timeout, logs_dest=logs_dest)

    def describe(self) -> dict[str, Any]:
        return {"db": self.name, "broker_config": dict(self.spec.broker_config)}


def build(options: KchaosOptions, context: DBContext) -> KchaosDB:
    """ValueError when the nodes cannot hold the ensemble (e.g. co-located, too few) or a
    broker property is unknown or malformed (the broker's own parser judges them before
    anything starts)."""
    check_broker_config(options.broker_config, context.nodes)
    return KchaosDB(ClusterSpec(
        brokers=context.nodes, zookeepers=options.zookeepers, colocate=options.colocate,
        broker_config=dict(options.broker_config), backend=context.backend.backend,
        options=context.backend.spec_options()))


KIND = DBKind(KchaosOptions, build)


def check_broker_config(overrides: Mapping[str, str], nodes: int) -> None:
    """ValueError naming the property when the broker would refuse `overrides`."""
    text = server_properties(1, "127.0.0.1", "127.0.0.1:2181", "/tmp/kchaos-check", nodes,
                             overrides)
    try:
        BrokerConfig.from_text(text, "broker_config")
    except BrokerConfigError as error:
        message = re.sub(r"^broker_config:\d+: ", "broker_config: ", str(error))
        if "unknown property" in message:
            message += " (the kchaos broker does not know it; an Apache Kafka property runs " \
                       "with --db kafka)"
        raise ValueError(message) from error
