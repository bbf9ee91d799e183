"""Finding a consumer group's or a transactional id's coordinator, for either db.

`find_coordinator` asks one broker with FindCoordinator (key type 0: a group, 1: a
transactional id) through
kafka-python's protocol classes over a plain socket: our broker and Apache Kafka both
answer it. `loaded_coordinator` is the fallback for our broker: the broker id of the
latest `coordinator-loaded` line (highest leader epoch) for the group's
`__consumer_offsets` partition in the brokers' event logs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from broker.config import BrokerConfig
from broker.group.placement import partition_for
from harness.db.brokers import exchange

__all__ = ["DEFAULT_OFFSETS_PARTITIONS", "GROUP_KEY_TYPE", "TRANSACTION_KEY_TYPE",
           "find_coordinator", "loaded_coordinator", "offsets_partition"]

DEFAULT_OFFSETS_PARTITIONS = BrokerConfig.offsets_topic_num_partitions  # our broker's default
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
VERSION = 2  # the newest version that is not flexible: one key, a plain response header


def find_coordinator(address: str, port: int, key: str, timeout: float = 2.0,
                     key_type: int = GROUP_KEY_TYPE) -> int | None:
    """The coordinator's broker id as the broker at `address` answers FindCoordinator for
    `key` (a group, or a transactional id with `TRANSACTION_KEY_TYPE`); None when it
    answers with an error (e.g. COORDINATOR_NOT_AVAILABLE while the internal topic is
    being created). Raises OSError when the broker does not answer."""
    request = FindCoordinatorRequest[VERSION](key=key, key_type=key_type)
    request.with_header(correlation_id=1, client_id="kchaos-nemesis")
    response = FindCoordinatorResponse.decode(exchange(address, port, request, timeout),
                                              version=VERSION)
    return response.node_id if response.error_code == 0 and response.node_id >= 0 else None


def offsets_partition(group: str, partitions: int) -> int:
    """The `__consumer_offsets` partition of `group` (Kafka's `abs(hashCode) % partitions`)."""
    return partition_for(group, partitions)


def loaded_coordinator(lines: Iterable[str], partition: int) -> int | None:
    """The broker id of the `coordinator-loaded` event for offsets partition `partition`
    with the highest leader epoch (the latest by time among equals); None if there is none.
    Lines that are not JSON objects are skipped (a log cut mid-line by a kill)."""
    best: tuple[int, int, int] | None = None
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if (not isinstance(event, dict) or event.get("event") != "coordinator-loaded"
                or event.get("offsets_partition") != partition):
            continue
        rank = (int(event.get("leader_epoch", -1)), int(event.get("time", 0)),
                int(event["broker_id"]))
        best = rank if best is None or rank[:2] > best[:2] else best
    return None if best is None else best[2]

