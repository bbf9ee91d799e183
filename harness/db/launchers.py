"""The kinds of broker a cluster can run, by the name their `to_json()` records."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.db.brokers import BrokerLauncher, KchaosBroker
from harness.db.kafka.broker import KafkaBroker

__all__ = ["LAUNCHERS", "launcher_from_json"]

LAUNCHERS: dict[str, type] = {"kchaos": KchaosBroker, "kafka": KafkaBroker}


def launcher_from_json(data: Mapping[str, Any]) -> BrokerLauncher:
    """The launcher a `to_json()` describes."""
    fields = dict(data)
    kind = fields.pop("kind")
    if kind not in LAUNCHERS:
        raise ValueError(f"unknown broker kind {kind!r}; known: {', '.join(LAUNCHERS)}")
    return LAUNCHERS[kind](**fields)
