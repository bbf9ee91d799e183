"""The transaction coordinator's storage: durable appends to, and loads from, the
`__transaction_state` partitions this broker leads.

`append` writes one record with acks=all semantics (the partition refuses it below the
topic's min.insync.replicas) and answers once the high watermark covers it, or after
`timeout_ms`; errors are mapped as Kafka's TransactionStateManager maps them. `load`
replays a partition from its log start to its log end: the last record per
transactional id wins and a tombstone removes it, the same before and after compaction.
"""

from __future__ import annotations

import asyncio
import time

from broker.errors import BrokerError, ErrorCode
from broker.group.records import build_batch
from broker.txn.placement import TRANSACTION_TOPIC
from broker.txn.records import encode_key, encode_value, read_entries
from broker.txn.state import TxnMetadata

__all__ = ["TxnLog", "append_error"]

_UNAVAILABLE = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT)
_MOVED = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR)
_TOO_LARGE = (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE)


def append_error(code: int) -> int:
    """The error a client gets for a failed transaction log append."""
    if code in _UNAVAILABLE:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in _MOVED:
        return ErrorCode.NOT_COORDINATOR
    if code in _TOO_LARGE:
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return code


class TxnLog:
    def __init__(self, replicas, timeout_ms: int, load_buffer_bytes: int) -> None:
        self.replicas = replicas
        self.timeout_ms = timeout_ms
        self.load_buffer_bytes = load_buffer_bytes

    def _partition(self, index: int):
        partition = self.replicas.partitions.get((TRANSACTION_TOPIC, index))
        if partition is None or not partition.is_leader:
            raise BrokerError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return partition

    def leader_epoch(self, index: int) -> int | None:
        """The leader epoch while this broker leads partition `index`, else None."""
        partition = self.replicas.partitions.get((TRANSACTION_TOPIC, index))
        return partition.leader_epoch if partition is not None and partition.is_leader else None

    async def append(self, index: int, metadata: TxnMetadata) -> int:
        """Write `metadata` and wait until it is committed; the client's error code."""
        batch = build_batch([(encode_key(metadata.transactional_id), encode_value(metadata))],
                            int(time.time() * 1000))
        try:
            partition = self._partition(index)
            result = partition.append_as_leader(batch, -1)
        except BrokerError as exc:
            return append_error(exc.code)
        if partition.high_watermark > result.last_offset:
            return ErrorCode.NONE
        waiter = partition.delayed_produce.add(result.last_offset + 1)
        try:
            return append_error(await asyncio.wait_for(waiter, self.timeout_ms / 1000))
        except TimeoutError:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE

    async def load(self, index: int, epoch: int) -> dict[str, TxnMetadata] | None:
        """Replay partition `index`: transactional id -> metadata; None if this broker
        stopped leading it (at `epoch`) meanwhile."""
        partition = self.replicas.partitions.get((TRANSACTION_TOPIC, index))
        if partition is None:
            return None
        loaded: dict[str, TxnMetadata] = {}
        position = partition.log.log_start_offset
        while True:
            if not partition.is_leader or partition.leader_epoch != epoch:
                return None
            if position >= partition.log.log_end_offset:
                return loaded
            entries, next_offset = read_entries(
                partition.log.read(position, self.load_buffer_bytes))
            if next_offset is None:
                return loaded
            for transactional_id, metadata in entries:
                if metadata is None:
                    loaded.pop(transactional_id, None)
                else:
                    loaded[transactional_id] = metadata
            position = next_offset
            await asyncio.sleep(0)
