"""The `kchaos` db: our broker (`broker/`) on the nodes, with a real ZooKeeper ensemble."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from broker.config import BrokerConfig
from broker.config import ConfigError as BrokerConfigError
from harness.db.brokers import KchaosBroker, server_properties
from harness.db.cluster_db import ClusterDB, ClusterOptions, cluster_spec
from harness.db.part import DBContext, DBKind
from nemesis.capabilities import LosesUnflushed

__all__ = ["KIND", "LOSE_UNFLUSHED", "KchaosOptions", "check_broker_config"]

LOSE_UNFLUSHED = "kchaos.debug.lose-unflushed-on-crash"  # brokers that lose their page cache


@dataclass(frozen=True, kw_only=True)
class KchaosOptions(ClusterOptions):
    """Options of the kchaos db: those of every db on a cluster (see `harness.options`)."""


def build(options: KchaosOptions, context: DBContext) -> ClusterDB:
    """ValueError when the nodes cannot hold the ensemble (e.g. co-located, too few) or a
    broker property is unknown or malformed (the broker's own parser judges them before
    anything starts)."""
    check_broker_config(options.broker_config, context.nodes)
    spec = cluster_spec(options, context, KchaosBroker())
    if str(options.broker_config.get(LOSE_UNFLUSHED, "")).lower() == "true":
        return ClusterDB(spec, "kchaos", frozenset({LosesUnflushed}))
    return ClusterDB(spec, "kchaos", why_not={
        LosesUnflushed: f"--db kchaos has them only with --broker-config {LOSE_UNFLUSHED}=true"})


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
