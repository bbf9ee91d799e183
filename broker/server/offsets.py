"""ListOffsets (latest, earliest, by timestamp) and OffsetForLeaderEpoch (KIP-101/KIP-279).

Consumers see "latest" as the high watermark, or with isolation_level 1 (read_committed,
v2+) as the last stable offset; a replica (replica_id >= 0) sees the log end offset, which
the follower fetcher uses after OFFSET_OUT_OF_RANGE.
"""

from __future__ import annotations

from kafka.protocol.consumer import ListOffsetsResponse, OffsetForLeaderEpochResponse

from broker.errors import BrokerError, ErrorCode

__all__ = ["handle_list_offsets", "handle_offset_for_leader_epoch"]

LATEST = -1
EARLIEST = -2
READ_COMMITTED = 1

ListTopic = ListOffsetsResponse.ListOffsetsTopicResponse
ListPartition = ListTopic.ListOffsetsPartitionResponse
EpochTopic = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
EpochPartition = EpochTopic.EpochEndOffset


async def handle_list_offsets(context, request, version: int, header):
    topics = []
    for topic in request.topics:
        parts = []
        for part in topic.partitions:
            try:
                partition = context.replicas.leader_partition(
                    topic.name, part.partition_index, part.current_leader_epoch
                )
                committed = version >= 2 and request.isolation_level == READ_COMMITTED
                offset, timestamp = _lookup(partition, part.timestamp, request.replica_id,
                                            committed)
                parts.append(
                    ListPartition(
                        partition_index=part.partition_index,
                        error_code=ErrorCode.NONE,
                        timestamp=timestamp,
                        offset=offset,
                        leader_epoch=partition.leader_epoch,
                    )
                )
            except BrokerError as exc:
                parts.append(
                    ListPartition(
                        partition_index=part.partition_index,
                        error_code=exc.code,
                        timestamp=-1,
                        offset=-1,
                        leader_epoch=-1,
                    )
                )
        topics.append(ListTopic(name=topic.name, partitions=parts))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


def _lookup(partition, timestamp: int, replica_id: int, committed: bool) -> tuple[int, int]:
    """(offset, timestamp) for a consumer, whose log ends at the LSO (read_committed) or
    the HW, or for a replica, whose log ends at the LEO."""
    if timestamp == LATEST:
        if replica_id >= 0:
            return partition.log_end_offset, -1
        return (partition.last_stable_offset if committed else partition.high_watermark), -1
    if timestamp == EARLIEST:
        return partition.log.log_start_offset, -1
    if timestamp < 0:
        raise BrokerError(ErrorCode.UNSUPPORTED_VERSION, f"timestamp spec {timestamp}")
    offset = partition.log.offset_for_timestamp(timestamp)
    end = partition.last_stable_offset if committed else partition.high_watermark
    if offset is None or offset >= end:
        return -1, -1
    return offset, timestamp


async def handle_offset_for_leader_epoch(context, request, version: int, header):
    topics = []
    for topic in request.topics:
        parts = []
        for part in topic.partitions:
            try:
                partition = context.replicas.leader_partition(
                    topic.topic, part.partition, part.current_leader_epoch
                )
                epoch, end = end_offset_for_epoch(partition, part.leader_epoch)
                parts.append(
                    EpochPartition(
                        error_code=ErrorCode.NONE,
                        partition=part.partition,
                        leader_epoch=epoch,
                        end_offset=end,
                    )
                )
            except BrokerError as exc:
                parts.append(
                    EpochPartition(
                        error_code=exc.code,
                        partition=part.partition,
                        leader_epoch=-1,
                        end_offset=-1,
                    )
                )
        topics.append(EpochTopic(topic=topic.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)


def end_offset_for_epoch(partition, requested: int) -> tuple[int, int]:
    """(largest epoch <= requested, its end offset); the current epoch ends at the LEO."""
    if requested >= partition.leader_epoch:
        return partition.leader_epoch, partition.log_end_offset
    epoch, end = partition.log.end_offset_for_epoch(requested)
    if epoch < 0:
        return -1, -1
    return epoch, end
