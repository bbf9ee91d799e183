"""The cluster view the controller pushes with UpdateMetadata, for Metadata responses."""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.control_plane.messages import (
    BrokerEndpoint,
    PartitionStateInfo,
    UpdateMetadataRequest,
)

__all__ = ["MetadataCache"]


@dataclass
class MetadataCache:
    controller_id: int = -1
    controller_epoch: int = -1
    brokers: dict[int, BrokerEndpoint] = field(default_factory=dict)
    topics: dict[str, dict[int, PartitionStateInfo]] = field(default_factory=dict)

    def update(self, request: UpdateMetadataRequest) -> None:
        """Apply an UpdateMetadata: live brokers replace the old set; partition states merge.

        A partition state with leader -2 (Kafka's LeaderDuringDelete) removes the partition.
        """
        self.controller_id = request.controller_id
        self.controller_epoch = request.controller_epoch
        self.brokers = {broker.broker_id: broker for broker in request.live_brokers}
        for state in request.partition_states:
            if state.leader == -2:
                partitions = self.topics.get(state.topic, {})
                partitions.pop(state.partition, None)
                if not partitions:
                    self.topics.pop(state.topic, None)
                continue
            self.topics.setdefault(state.topic, {})[state.partition] = state

    def partition(self, topic: str, partition: int) -> PartitionStateInfo | None:
        return self.topics.get(topic, {}).get(partition)

    def has_leaders(self, topic: str, partitions: int) -> bool:
        """True once every partition 0..partitions-1 of `topic` has a live leader."""
        states = self.topics.get(topic, {})
        return all(
            (state := states.get(i)) is not None and state.leader in self.brokers
            for i in range(partitions)
        )
