"""Controller-to-broker requests and responses as plain values, and their error codes."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "NONE", "UNKNOWN_SERVER_ERROR", "STALE_CONTROLLER_EPOCH", "NOT_CONTROLLER",
    "STALE_BROKER_EPOCH", "PartitionStateInfo", "BrokerEndpoint", "LeaderAndIsrRequest",
    "UpdateMetadataRequest", "StopReplicaRequest", "ControlledShutdownRequest",
    "LeaderAndIsrResponse", "UpdateMetadataResponse", "StopReplicaResponse",
    "ControlledShutdownResponse", "ControlRequest", "Request", "Response",
]

NONE = 0
UNKNOWN_SERVER_ERROR = -1
STALE_CONTROLLER_EPOCH = 11
NOT_CONTROLLER = 41
STALE_BROKER_EPOCH = 77


@dataclass(frozen=True)
class PartitionStateInfo:
    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    is_new: bool = False


@dataclass(frozen=True)
class BrokerEndpoint:
    broker_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class LeaderAndIsrRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partition_states: tuple[PartitionStateInfo, ...]
    live_leaders: tuple[BrokerEndpoint, ...]


@dataclass(frozen=True)
class UpdateMetadataRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partition_states: tuple[PartitionStateInfo, ...]
    live_brokers: tuple[BrokerEndpoint, ...]


@dataclass(frozen=True)
class StopReplicaRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    delete_partitions: bool
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class ControlledShutdownRequest:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True)
class LeaderAndIsrResponse:
    error_code: int
    partition_errors: dict[tuple[str, int], int]


@dataclass(frozen=True)
class UpdateMetadataResponse:
    error_code: int


@dataclass(frozen=True)
class StopReplicaResponse:
    error_code: int
    partition_errors: dict[tuple[str, int], int]


@dataclass(frozen=True)
class ControlledShutdownResponse:
    error_code: int
    remaining: tuple[tuple[str, int], ...]


ControlRequest = LeaderAndIsrRequest | UpdateMetadataRequest | StopReplicaRequest
Request = ControlRequest | ControlledShutdownRequest
Response = (LeaderAndIsrResponse | UpdateMetadataResponse | StopReplicaResponse
            | ControlledShutdownResponse)
