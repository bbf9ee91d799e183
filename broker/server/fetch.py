"""Fetch: consumers read up to the high watermark (isolation_level 0, read_uncommitted) or
the last stable offset with the aborted transactions of what they read (1,
read_committed); followers (replica_id >= 0) read up to the LEO. Every answer carries the LSO.

A follower's fetch offset is its log end offset: the leader records it (which may move
the high watermark and expand the ISR) before reading. If fewer than `min_bytes` are
available the request parks in the partitions' fetch purgatory until new data or a
high-watermark change (which is what moves the LSO) arrives or `max_wait_ms` passes; a
follower's fetch wakes on new data (or a leadership change) only, as Kafka's DelayedFetch
does: a follower learns a higher high watermark with its next fetch, so its own trails
the leader's by one fetch (the window of KIP-101's first scenario). No
fetch sessions: the response always carries session id 0, so clients send full requests.
"""

from __future__ import annotations

from kafka.protocol.consumer import FetchResponse

from broker.errors import BrokerError, ErrorCode
from broker.replica.purgatory import wait_any

__all__ = ["handle"]

TopicResponse = FetchResponse.FetchableTopicResponse
PartitionData = TopicResponse.PartitionData
AbortedTransaction = PartitionData.AbortedTransaction
READ_COMMITTED = 1


async def handle(context, request, version: int, header):
    if request.session_id != 0 or request.session_epoch > 0:
        return FetchResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
            session_id=0,
            responses=[],
        )
    replica_id = request.replica_id
    wanted = []
    for topic in request.topics:
        for part in topic.partitions:
            wanted.append((topic.topic, part))
    if replica_id >= 0:
        for name, part in wanted:
            partition = context.replicas.partitions.get((name, part.partition))
            if (
                partition is not None
                and partition.is_leader
                and part.current_leader_epoch in (-1, partition.leader_epoch)
            ):
                partition.update_follower(replica_id, part.fetch_offset)
    committed = request.isolation_level == READ_COMMITTED
    results, total = _read_all(context, wanted, replica_id, request.max_bytes, committed)
    if total < max(request.min_bytes, 1) and request.max_wait_ms > 0 and not _has_errors(results):
        waiters = [
            p.replica_fetch_waiters if replica_id >= 0 else p.fetch_waiters
            for name, part in wanted
            if (p := context.replicas.partitions.get((name, part.partition))) is not None
        ]
        if waiters:
            await wait_any(waiters, request.max_wait_ms / 1000)
            results, total = _read_all(context, wanted, replica_id, request.max_bytes,
                                       committed)
    by_topic: dict[str, list] = {}
    for name, data in results:
        by_topic.setdefault(name, []).append(data)
    return FetchResponse(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        session_id=0,
        responses=[TopicResponse(topic=name, partitions=parts) for name, parts in by_topic.items()],
    )


def _has_errors(results) -> bool:
    return any(data.error_code != ErrorCode.NONE for _, data in results)


def _read_all(context, wanted, replica_id: int, max_bytes: int, committed: bool):
    results = []
    total = 0
    for name, part in wanted:
        budget = min(part.partition_max_bytes, max(max_bytes - total, 0))
        data = _read_one(
            context, name, part, replica_id, budget if total else part.partition_max_bytes,
            committed,
        )
        if data.records:
            total += len(data.records)
        results.append((name, data))
    return results, total


def _read_one(context, name: str, part, replica_id: int, max_bytes: int, committed: bool):
    try:
        partition = context.replicas.leader_partition(
            name, part.partition, part.current_leader_epoch
        )
        fetched = partition.fetch(part.fetch_offset, max_bytes, replica_id, committed)
    except BrokerError as exc:
        return PartitionData(
            partition_index=part.partition,
            error_code=exc.code,
            high_watermark=-1,
            last_stable_offset=-1,
            log_start_offset=-1,
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=b"",
        )
    aborted = fetched.aborted_transactions
    return PartitionData(
        partition_index=part.partition,
        error_code=ErrorCode.NONE,
        high_watermark=fetched.high_watermark,
        last_stable_offset=fetched.last_stable_offset,
        log_start_offset=fetched.log_start_offset,
        aborted_transactions=None if aborted is None else [
            AbortedTransaction(producer_id=producer_id, first_offset=first_offset)
            for producer_id, first_offset in aborted
        ],
        preferred_read_replica=-1,
        records=fetched.records,
    )
