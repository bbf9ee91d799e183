"""Finding a consumer group's or a transactional id's coordinator, for either db.

A coordinator `kind` is "group" (key type 0, `__consumer_offsets`) or "transaction" (key
type 1, `__transaction_state`). `find_coordinator` asks one broker with FindCoordinator
through kafka-python's protocol classes over a plain socket: our broker and Apache Kafka
both answer it. `loaded_coordinator` is the fallback for our broker: the broker id of
the latest load line (highest epoch) for the key's partition of the internal topic in
the brokers' event logs (`coordinator-loaded` for groups, `txn-coordinator-loaded` for
transactional ids).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from broker.config import BrokerConfig
from broker.group.placement import partition_for
from harness.db.brokers import exchange

__all__ = ["DEFAULT_OFFSETS_PARTITIONS", "KINDS", "CoordinatorKind", "find_coordinator",
           "loaded_coordinator", "offsets_partition"]

DEFAULT_OFFSETS_PARTITIONS = BrokerConfig.offsets_topic_num_partitions  # our broker's default
VERSION = 2  # the newest version that is not flexible: one key, a plain response header


@dataclass(frozen=True)
class CoordinatorKind:
    """How one kind of coordinator is asked for, the internal topic whose partition leaders
    coordinate, and how a load shows up in our broker's event log."""

    key_type: int
    topic: str
    partitions_property: str
    default_partitions: int
    loaded_event: str
    partition_field: str
    epoch_field: str


KINDS = {
    "group": CoordinatorKind(0, "__consumer_offsets", "offsets.topic.num.partitions",
                             DEFAULT_OFFSETS_PARTITIONS, "coordinator-loaded",
                             "offsets_partition", "leader_epoch"),
    "transaction": CoordinatorKind(1, "__transaction_state",
                                   "transaction.state.log.num.partitions",
                                   BrokerConfig.transaction_state_log_num_partitions,
                                   "txn-coordinator-loaded", "txn_partition",
                                   "coordinator_epoch"),
}


def find_coordinator(address: str, port: int, key: str, timeout: float = 2.0,
                     kind: str = "group") -> int | None:
    """The coordinator's broker id as the broker at `address` answers FindCoordinator for
    `key` (a group id or a transactional id, by `kind`); None when it answers with an
    error (e.g. COORDINATOR_NOT_AVAILABLE while the internal topic is being created).
    Raises OSError when the broker does not answer."""
    request = FindCoordinatorRequest[VERSION](key=key, key_type=KINDS[kind].key_type)
    request.with_header(correlation_id=1, client_id="kchaos-nemesis")
    response = FindCoordinatorResponse.decode(exchange(address, port, request, timeout),
                                              version=VERSION)
    return response.node_id if response.error_code == 0 and response.node_id >= 0 else None


def offsets_partition(key: str, partitions: int) -> int:
    """The internal topic's partition of `key` (Kafka's `abs(hashCode) % partitions`)."""
    return partition_for(key, partitions)


def loaded_coordinator(lines: Iterable[str], partition: int, kind: str = "group") -> int | None:
    """The broker id of the load event of `kind` for internal partition `partition` with
    the highest epoch (the latest by time among equals); None if there is none. Lines
    that are not JSON objects are skipped (a log cut mid-line by a kill)."""
    spec = KINDS[kind]
    best: tuple[int, int, int] | None = None
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if (not isinstance(event, dict) or event.get("event") != spec.loaded_event
                or event.get(spec.partition_field) != partition):
            continue
        rank = (int(event.get(spec.epoch_field, -1)), int(event.get("time", 0)),
                int(event["broker_id"]))
        best = rank if best is None or rank[:2] > best[:2] else best
    return None if best is None else best[2]
