"""Request dispatch: header -> version check -> body decode -> API handler -> framed response."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from broker.server import (
    api_versions,
    fetch,
    groups,
    metadata,
    offsets,
    produce,
    producer_ids,
    topics,
    txn,
)
from broker.server.listener import CLOSE
from broker.server.protocol import (
    API_VERSIONS_KEY,
    APIS,
    ProtocolError,
    RequestHeader,
    decode_request,
    encode_response,
    parse_header,
)

__all__ = ["BrokerContext", "Dispatcher"]

log = logging.getLogger("broker.server")

ApiHandler = Callable[["BrokerContext", Any, int, RequestHeader], Awaitable[Any]]


@dataclass
class BrokerContext:
    """What the API handlers need: settings, the replica manager, topic creation, producer
    ids, the group and transaction coordinators and their internal topics."""

    broker_id: int
    replicas: Any  # broker.replica.manager.ReplicaManager
    topic_creator: Any = None  # broker.server.topics.TopicCreator
    producer_ids: Any = None  # broker.server.producer_ids.ProducerIdAllocator
    groups: Any = None  # broker.group.GroupCoordinator
    offsets_topic: Any = None  # broker.internal_topic.InternalTopic
    txn: Any = None  # broker.txn.TransactionCoordinator
    txn_topic: Any = None  # broker.internal_topic.InternalTopic
    auto_create_topics: bool = True
    num_partitions: int = 1
    default_replication_factor: int = 1
    cluster_id: str | None = None
    extra: dict = field(default_factory=dict)


HANDLERS: dict[int, ApiHandler] = {
    0: produce.handle,
    1: fetch.handle,
    2: offsets.handle_list_offsets,
    3: metadata.handle,
    8: groups.handle_offset_commit,
    9: groups.handle_offset_fetch,
    10: groups.handle_find_coordinator,
    11: groups.handle_join_group,
    12: groups.handle_heartbeat,
    13: groups.handle_leave_group,
    14: groups.handle_sync_group,
    15: groups.handle_describe_groups,
    16: groups.handle_list_groups,
    18: api_versions.handle,
    19: topics.handle_create_topics,
    22: producer_ids.handle,
    23: offsets.handle_offset_for_leader_epoch,
    24: txn.handle_add_partitions_to_txn,
    25: txn.handle_add_offsets_to_txn,
    26: txn.handle_end_txn,
    27: txn.handle_write_txn_markers,
    28: groups.handle_txn_offset_commit,
    37: topics.handle_create_partitions,
    42: groups.handle_delete_groups,
}


class Dispatcher:
    def __init__(self, context: BrokerContext) -> None:
        self.context = context

    async def __call__(self, frame: memoryview) -> bytes | None | object:
        try:
            header = parse_header(frame)
        except ProtocolError as exc:
            log.warning("closing connection: %s", exc)
            return CLOSE
        api = APIS.get(header.api_key)
        if api is None:
            log.warning("closing connection: unsupported API key %d", header.api_key)
            return CLOSE
        version = header.api_version
        if not api.min_version <= version <= api.max_version:
            if header.api_key == API_VERSIONS_KEY:
                return api_versions.unsupported_version_response(header.correlation_id)
            log.warning(
                "closing connection: %s version %d not in [%d, %d]",
                api.request.name,
                version,
                api.min_version,
                api.max_version,
            )
            return CLOSE
        try:
            request = decode_request(api, header, frame)
        except ProtocolError as exc:
            log.warning("closing connection: malformed %s v%d: %s", api.request.name, version, exc)
            return CLOSE
        response = await HANDLERS[header.api_key](self.context, request, version, header)
        if response is None:
            return None
        return encode_response(api, version, header.correlation_id, response)
