"""Produce: append each partition's record set on its leader; acks 0, 1 or -1.

acks=-1 waits in the partition's delayed-produce purgatory until the high watermark
covers the batch (NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below
min.insync.replicas meanwhile) or `timeout_ms` passes (REQUEST_TIMED_OUT).
acks=0 gets no response at all.
"""

from __future__ import annotations

import asyncio
import logging

from kafka.protocol.producer import ProduceResponse

from broker.errors import BrokerError, ErrorCode

__all__ = ["handle"]

log = logging.getLogger("broker.produce")

TopicResponse = ProduceResponse.TopicProduceResponse
PartitionResponse = TopicResponse.PartitionProduceResponse


async def handle(context, request, version: int, header):
    acks = request.acks
    results: dict[tuple[str, int], list] = {}
    waiting: dict[tuple[str, int], asyncio.Future[int]] = {}
    for topic in request.topic_data:
        for data in topic.partition_data:
            key = (topic.name, data.index)
            if acks not in (0, 1, -1):
                results[key] = [ErrorCode.INVALID_REQUIRED_ACKS, -1, -1, -1]
                continue
            try:
                partition = context.replicas.leader_partition(topic.name, data.index)
                result = partition.append_as_leader(data.records or b"", acks)
            except BrokerError as exc:
                if exc.code not in (
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ):
                    log.info("produce to %s-%d: %s", topic.name, data.index, exc)
                results[key] = [exc.code, -1, -1, -1]
                continue
            results[key] = [
                ErrorCode.NONE,
                result.base_offset,
                result.log_append_time,
                result.log_start_offset,
            ]
            if acks == -1 and partition.high_watermark <= result.last_offset:
                waiting[key] = partition.delayed_produce.add(result.last_offset + 1)
    if acks == 0:
        return None
    if waiting:
        done, pending = await asyncio.wait(
            waiting.values(), timeout=max(request.timeout_ms, 0) / 1000
        )
        for key, future in waiting.items():
            if future in done:
                code = future.result()
            else:
                future.cancel()
                code = ErrorCode.REQUEST_TIMED_OUT
            if code != ErrorCode.NONE:
                results[key][0] = code
    responses: dict[str, list] = {}
    for (name, index), (code, base_offset, append_time, log_start) in results.items():
        responses.setdefault(name, []).append(
            PartitionResponse(
                index=index,
                error_code=code,
                base_offset=base_offset,
                log_append_time_ms=append_time,
                log_start_offset=log_start,
                record_errors=[],
                error_message=None,
            )
        )
    return ProduceResponse(
        responses=[
            TopicResponse(name=name, partition_responses=parts) for name, parts in responses.items()
        ],
        throttle_time_ms=0,
    )
