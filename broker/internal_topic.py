"""An internal topic that places coordinators: `__consumer_offsets` for groups,
`__transaction_state` for transactional ids.

A key (group id or transactional id) belongs to partition
`abs(javaStringHashCode(key)) % partitions` (`broker.group.placement`), and its
coordinator is that partition's leader. FindCoordinator creates the topic when it is
missing (its partition count, its replication factor capped at the live brokers with a
warning, `cleanup.policy=compact` plus the topic's own configs) and answers
COORDINATOR_NOT_AVAILABLE until the controller has elected the key's leader.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from broker.control_plane import BrokerEndpoint
from broker.errors import BrokerError, ErrorCode
from broker.group.placement import partition_for

__all__ = ["InternalTopic"]

log = logging.getLogger("broker.internal_topic")


class InternalTopic:
    def __init__(self, name: str, metadata, topic_creator, partitions: int,
                 replication_factor: int, configs: Mapping[str, str]) -> None:
        self.name = name
        self.metadata = metadata
        self.topic_creator = topic_creator
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.configs = {"cleanup.policy": "compact", **configs}

    def partition_count(self) -> int:
        """The topic's partitions as the cluster has them, else the configured count."""
        states = self.metadata.topics.get(self.name)
        return len(states) if states else self.partitions

    def partition_of(self, key: str) -> int:
        return partition_for(key, self.partition_count())

    async def coordinator(self, key: str) -> tuple[int, BrokerEndpoint | None]:
        """(error, the coordinator's endpoint or None) for `key`."""
        if self.name not in self.metadata.topics:
            await self._create()
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        state = self.metadata.partition(self.name, self.partition_of(key))
        node = self.metadata.brokers.get(state.leader) if state is not None else None
        if node is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        return ErrorCode.NONE, node

    async def _create(self) -> None:
        live = len(self.metadata.brokers)
        replication = min(self.replication_factor, max(live, 1))
        if replication < self.replication_factor:
            log.warning(
                "creating %s with replication factor %d: %d configured but only %d brokers "
                "are live", self.name, replication, self.replication_factor, live)
        try:
            await self.topic_creator.create(self.name, self.partitions, replication,
                                            config=self.configs)
        except BrokerError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("creating %s failed: %s", self.name, exc)
