"""Transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn and EndTxn go to the transaction
coordinator (`broker.txn`); WriteTxnMarkers, from a coordinator to this partition leader,
appends control batches.

Clients older than KIP-588 do not know PRODUCER_FENCED: AddPartitionsToTxn, AddOffsetsToTxn
and EndTxn below version 2 get INVALID_PRODUCER_EPOCH instead, as Kafka answers them.
A marker is acknowledged once it is below the partition's high watermark (acks=all, so
not below min.insync.replicas); a marker on a `__consumer_offsets` partition then
completes the producer's transactional offset commits in the group coordinator.
"""

from __future__ import annotations

import asyncio

from kafka.protocol.producer import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    WriteTxnMarkersResponse,
)

from broker.errors import BrokerError, ErrorCode
from broker.group.placement import OFFSETS_TOPIC

__all__ = ["fenced_for", "handle_add_offsets_to_txn", "handle_add_partitions_to_txn",
           "handle_end_txn", "handle_write_txn_markers"]

MARKER_TIMEOUT_S = 10.0
TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
PartitionResult = TopicResult.AddPartitionsToTxnPartitionResult
MarkerResult = WriteTxnMarkersResponse.WritableTxnMarkerResult
MarkerTopicResult = MarkerResult.WritableTxnMarkerTopicResult
MarkerPartitionResult = MarkerTopicResult.WritableTxnMarkerPartitionResult


def fenced_for(code: int, version: int, since: int) -> int:
    """`code` as a client at `version` understands it (PRODUCER_FENCED from `since` on)."""
    if code == ErrorCode.PRODUCER_FENCED and version < since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


async def handle_add_partitions_to_txn(context, request, version: int, header):
    wanted = [(topic.name, index) for topic in request.v3_and_below_topics
              for index in topic.partitions]
    unknown = {key for key in wanted if context.replicas.metadata.partition(*key) is None}
    codes: dict[tuple[str, int], int]
    if unknown:
        codes = {key: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if key in unknown
                 else ErrorCode.OPERATION_NOT_ATTEMPTED for key in wanted}
    else:
        code = await context.txn.add_partitions(
            request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch, frozenset(wanted))
        code = fenced_for(code, version, 2)
        codes = dict.fromkeys(wanted, code)
    by_topic: dict[str, list] = {}
    for (name, index), code in codes.items():
        by_topic.setdefault(name, []).append(
            PartitionResult(partition_index=index, partition_error_code=code))
    return AddPartitionsToTxnResponse(
        throttle_time_ms=0,
        results_by_topic_v3_and_below=[TopicResult(name=name, results_by_partition=parts)
                                       for name, parts in by_topic.items()])


async def handle_add_offsets_to_txn(context, request, version: int, header):
    code = await context.txn.add_offsets(request.transactional_id, request.producer_id,
                                         request.producer_epoch, request.group_id)
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=fenced_for(code, version, 2))


async def handle_end_txn(context, request, version: int, header):
    code = await context.txn.end_txn(request.transactional_id, request.producer_id,
                                     request.producer_epoch, request.committed)
    return EndTxnResponse(throttle_time_ms=0, error_code=fenced_for(code, version, 2))


async def handle_write_txn_markers(context, request, version: int, header):
    results = []
    for marker in request.markers:
        keys = [(topic.name, index) for topic in marker.topics
                for index in topic.partition_indexes]
        codes = await asyncio.gather(*(
            _write_marker(context, key, marker.producer_id, marker.producer_epoch,
                          marker.transaction_result, marker.coordinator_epoch)
            for key in keys))
        by_topic: dict[str, list] = {}
        for (name, index), code in zip(keys, codes, strict=True):
            by_topic.setdefault(name, []).append(
                MarkerPartitionResult(partition_index=index, error_code=code))
        results.append(MarkerResult(
            producer_id=marker.producer_id,
            topics=[MarkerTopicResult(name=name, partitions=parts)
                    for name, parts in by_topic.items()]))
    return WriteTxnMarkersResponse(markers=results)


async def _write_marker(context, key: tuple[str, int], producer_id: int, producer_epoch: int,
                        commit: bool, coordinator_epoch: int) -> int:
    """Append one marker as leader and wait until it is committed; its error code."""
    try:
        partition = context.replicas.leader_partition(*key)
        if len(partition.isr) < partition.min_insync_replicas:
            raise BrokerError(ErrorCode.NOT_ENOUGH_REPLICAS)
        result = partition.append_txn_marker(producer_id, producer_epoch, commit,
                                             coordinator_epoch)
    except BrokerError as exc:
        return exc.code
    code = ErrorCode.NONE
    if partition.high_watermark <= result.last_offset:
        waiter = partition.delayed_produce.add(result.last_offset + 1)
        try:
            code = await asyncio.wait_for(waiter, MARKER_TIMEOUT_S)
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT
    if code == ErrorCode.NONE and key[0] == OFFSETS_TOPIC and context.groups is not None:
        context.groups.complete_txn(key[1], producer_id, commit)
    return code
