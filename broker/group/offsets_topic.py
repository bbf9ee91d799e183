"""`__consumer_offsets` itself: created on first use, and where a group's coordinator is.

FindCoordinator creates the topic when it is missing (`offsets.topic.num.partitions`,
`offsets.topic.replication.factor` capped at the live brokers with a warning,
`cleanup.policy=compact`) and answers COORDINATOR_NOT_AVAILABLE until the controller has
elected the leader of the group's partition; that leader is the coordinator.
"""

from __future__ import annotations

import logging

from broker.errors import BrokerError, ErrorCode
from broker.group.placement import OFFSETS_TOPIC, partition_for

__all__ = ["OffsetsTopic"]

log = logging.getLogger("broker.group")


class OffsetsTopic:
    def __init__(self, metadata, topic_creator, partitions: int, replication_factor: int,
                 segment_bytes: int) -> None:
        self.metadata = metadata
        self.topic_creator = topic_creator
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.segment_bytes = segment_bytes

    def partition_count(self) -> int:
        """The topic's partitions as the cluster has them, else the configured count."""
        states = self.metadata.topics.get(OFFSETS_TOPIC)
        return len(states) if states else self.partitions

    async def coordinator(self, group_id: str):
        """(error, the coordinator's endpoint or None) for `group_id`."""
        if OFFSETS_TOPIC not in self.metadata.topics:
            await self._create()
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        state = self.metadata.partition(OFFSETS_TOPIC,
                                        partition_for(group_id, self.partition_count()))
        node = self.metadata.brokers.get(state.leader) if state is not None else None
        if node is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        return ErrorCode.NONE, node

    async def _create(self) -> None:
        live = len(self.metadata.brokers)
        replication = min(self.replication_factor, max(live, 1))
        if replication < self.replication_factor:
            log.warning(
                "creating %s with replication factor %d: offsets.topic.replication.factor=%d "
                "but only %d brokers are live", OFFSETS_TOPIC, replication,
                self.replication_factor, live)
        try:
            await self.topic_creator.create(
                OFFSETS_TOPIC,
                self.partitions,
                replication,
                config={"cleanup.policy": "compact", "segment.bytes": str(self.segment_bytes)},
            )
        except BrokerError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("creating %s failed: %s", OFFSETS_TOPIC, exc)
