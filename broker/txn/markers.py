"""Transaction markers on their way to the partition leaders (Kafka's marker channel).

`MarkerWriter.write` groups a transaction's partitions by their leader (from the metadata
cache), sends each leader one WriteTxnMarkers v1 request over the client protocol (this
broker included), and retries the partitions that failed, with backoff and fresh
leaders, until every one has its marker or the coordinator tells it to stop (it no
longer owns the transaction). A partition whose topic is gone counts as done. A fenced
answer (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED) stops the transaction's
markers as in Kafka: a newer coordinator or producer epoch owns it now.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from kafka.protocol.producer import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from broker.control_plane import BrokerEndpoint
from broker.errors import ErrorCode
from broker.replica.client import BrokerConnection

__all__ = ["MarkerWriter"]

log = logging.getLogger("broker.txn")

MARKERS_VERSION = 1
_FIRST_BACKOFF_S = 0.05
_MAX_BACKOFF_S = 1.0
_FENCED = (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED)

Marker = WriteTxnMarkersRequest.WritableTxnMarker
MarkerTopic = Marker.WritableTxnMarkerTopic


class MarkerWriter:
    def __init__(self, broker_id: int, metadata, request_timeout_s: float = 15.0) -> None:
        self.broker_id = broker_id
        self.metadata = metadata
        self.request_timeout_s = request_timeout_s
        self._connections: dict[int, tuple[BrokerConnection, asyncio.Lock]] = {}

    async def write(self, producer_id: int, producer_epoch: int, commit: bool,
                    coordinator_epoch: int, partitions: Iterable[tuple[str, int]],
                    go_on: Callable[[], bool]) -> bool:
        """True once every partition has the marker; False if told to stop or fenced."""
        remaining = set(partitions)
        backoff = _FIRST_BACKOFF_S
        while remaining:
            if not go_on():
                return False
            remaining = {key for key in remaining if key[0] in self.metadata.topics}
            by_leader: dict[BrokerEndpoint, list[tuple[str, int]]] = {}
            for key in remaining:
                state = self.metadata.partition(*key)
                leader = None if state is None else self.metadata.brokers.get(state.leader)
                if leader is not None:
                    by_leader.setdefault(leader, []).append(key)
            answers = await asyncio.gather(*(
                self._send(leader, keys, producer_id, producer_epoch, commit, coordinator_epoch)
                for leader, keys in by_leader.items()))
            for answer in answers:
                for key, code in answer.items():
                    if code == ErrorCode.NONE:
                        remaining.discard(key)
                    elif code in _FENCED:
                        log.warning("markers of producer %d stopped: %s answered %s",
                                    producer_id, key, ErrorCode(code).name)
                        return False
            if remaining:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
        return True

    async def _send(self, leader: BrokerEndpoint, keys: list[tuple[str, int]],
                    producer_id: int, producer_epoch: int, commit: bool,
                    coordinator_epoch: int) -> dict[tuple[str, int], int]:
        """One WriteTxnMarkers request to `leader` (its endpoint as the metadata named it
        when the partitions were grouped: an UpdateMetadata may drop the broker before this
        runs): partition -> error code."""
        by_topic: dict[str, list[int]] = {}
        for topic, index in keys:
            by_topic.setdefault(topic, []).append(index)
        request = WriteTxnMarkersRequest(markers=[Marker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
            topics=[MarkerTopic(name=t, partition_indexes=p) for t, p in by_topic.items()],
            coordinator_epoch=coordinator_epoch)])
        connection, lock = self._connection(leader)
        try:
            async with lock:
                response = await connection.send(request, WriteTxnMarkersResponse,
                                                 MARKERS_VERSION)
        except (OSError, ConnectionError, TimeoutError) as exc:
            connection.close()
            log.info("WriteTxnMarkers to broker %d failed: %r", leader.broker_id, exc)
            return {key: ErrorCode.NETWORK_EXCEPTION for key in keys}
        return {(topic.name, part.partition_index): part.error_code
                for marker in response.markers for topic in marker.topics
                for part in topic.partitions}

    def _connection(self, node: BrokerEndpoint) -> tuple[BrokerConnection, asyncio.Lock]:
        broker_id = node.broker_id
        cached = self._connections.get(broker_id)
        if cached is None or (cached[0].host, cached[0].port) != (node.host, node.port):
            if cached is not None:
                cached[0].close()
            cached = (BrokerConnection(node.host, node.port, f"txn-markers-{self.broker_id}",
                                       self.request_timeout_s), asyncio.Lock())
            self._connections[broker_id] = cached
        return cached

    async def close(self) -> None:
        for connection, _ in self._connections.values():
            connection.close()
        self._connections.clear()
