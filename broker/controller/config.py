"""The controller's settings; each field is the Kafka broker property of the same name
(dots for underscores; `request_timeout_seconds` is controller.socket.timeout.ms / 1000)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ControllerConfig"]


@dataclass(frozen=True)
class ControllerConfig:
    default_replication_factor: int = 1
    num_partitions: int = 1
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: float = 300.0
    leader_imbalance_per_broker_percentage: int = 10
    request_timeout_seconds: float = 30.0
