"""Metadata: live brokers, controller and partition leaders from the metadata cache.

Unknown topics are created (as Kafka does) when `auto.create.topics.enable` is true and
the request allows it (v4+ `allow_auto_topic_creation`, always for older versions); the
response then says LEADER_NOT_AVAILABLE until the controller has elected leaders.
"""

from __future__ import annotations

import logging

from kafka.protocol.metadata import MetadataResponse

from broker.errors import BrokerError, ErrorCode
from broker.group.placement import OFFSETS_TOPIC

__all__ = ["handle"]

log = logging.getLogger("broker.metadata")

Broker = MetadataResponse.MetadataResponseBroker
Topic = MetadataResponse.MetadataResponseTopic
Partition = Topic.MetadataResponsePartition


async def handle(context, request, version: int, header):
    cache = context.replicas.metadata
    if request.topics is None or (version == 0 and not request.topics):
        names = sorted(cache.topics)
    else:
        names = [t.name for t in request.topics if t.name is not None]
    allow_create = context.auto_create_topics and (version < 4 or request.allow_auto_topic_creation)
    topics = []
    for name in names:
        states = cache.topics.get(name)
        if states is None:
            topics.append(await _unknown_topic(context, name, allow_create))
            continue
        partitions = []
        for index in sorted(states):
            state = states[index]
            live = state.leader in cache.brokers
            partitions.append(
                Partition(
                    error_code=ErrorCode.NONE if live else ErrorCode.LEADER_NOT_AVAILABLE,
                    partition_index=index,
                    leader_id=state.leader if live else -1,
                    leader_epoch=state.leader_epoch,
                    replica_nodes=list(state.replicas),
                    isr_nodes=list(state.isr),
                    offline_replicas=[r for r in state.replicas if r not in cache.brokers],
                )
            )
        topics.append(
            Topic(
                error_code=ErrorCode.NONE,
                name=name,
                is_internal=name == OFFSETS_TOPIC,
                partitions=partitions,
            )
        )
    brokers = [
        Broker(node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
        for b in sorted(cache.brokers.values(), key=lambda b: b.broker_id)
    ]
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=brokers,
        cluster_id=context.cluster_id,
        controller_id=cache.controller_id,
        topics=topics,
    )


async def _unknown_topic(context, name: str, allow_create: bool):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if allow_create and context.topic_creator is not None:
        try:
            await context.topic_creator.create(
                name, context.num_partitions, context.default_replication_factor
            )
            code = ErrorCode.LEADER_NOT_AVAILABLE
        except BrokerError as exc:
            code = (
                ErrorCode.LEADER_NOT_AVAILABLE
                if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS
                else exc.code
            )
            if code != ErrorCode.LEADER_NOT_AVAILABLE:
                log.info("auto-creating %s failed: %s", name, exc)
    return Topic(error_code=code, name=name, is_internal=False, partitions=[])
