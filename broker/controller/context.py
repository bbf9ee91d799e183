"""What the active controller knows (Kafka's ControllerContext; seeds/000 "ControllerContext").

Read from ZooKeeper on failover and kept current by the event handlers. Only the controller's
event task touches it, so it has no locks.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from broker.controller.state_machines import (
    PartitionState,
    ReplicaState,
    StateMachine,
    partition_state_machine,
    replica_state_machine,
)
from broker.zk import BrokerRegistration, LeaderIsr

__all__ = ["TopicPartition", "ControllerContext"]

TopicPartition = tuple[str, int]


@dataclass
class ControllerContext:
    epoch: int = 0
    epoch_zk_version: int = 0
    live_brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    broker_epochs: dict[int, int] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    assignments: dict[TopicPartition, list[int]] = field(default_factory=dict)
    leadership: dict[TopicPartition, tuple[LeaderIsr, int]] = field(default_factory=dict)
    reassigning: dict[TopicPartition, list[int]] = field(default_factory=dict)
    topics_being_deleted: set[str] = field(default_factory=set)
    partition_states: StateMachine[TopicPartition, PartitionState] = field(
        default_factory=partition_state_machine)
    replica_states: StateMachine[tuple[str, int, int], ReplicaState] = field(
        default_factory=replica_state_machine)

    @property
    def live_ids(self) -> set[int]:
        """Brokers that are registered and not shutting down."""
        return set(self.live_brokers) - self.shutting_down

    @property
    def live_or_shutting_down(self) -> set[int]:
        return set(self.live_brokers)

    @property
    def topics(self) -> set[str]:
        return {topic for topic, _ in self.assignments}

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return sorted(tp for tp in self.assignments if tp[0] == topic)

    def partitions_on(self, broker_ids: set[int]) -> list[TopicPartition]:
        return sorted(tp for tp, replicas in self.assignments.items()
                      if broker_ids.intersection(replicas))

    def leader_of(self, tp: TopicPartition) -> int:
        state = self.leadership.get(tp)
        return state[0].leader if state else -1

    def partitions_led_by(self, broker_ids: set[int]) -> list[TopicPartition]:
        return sorted(tp for tp, (state, _) in self.leadership.items()
                      if state.leader in broker_ids)

    def remove_topic(self, topic: str) -> None:
        for tp in self.partitions_of(topic):
            for replica in self.assignments.pop(tp):
                self.replica_states.set((topic, tp[1], replica), ReplicaState.NON_EXISTENT)
            self.leadership.pop(tp, None)
            self.reassigning.pop(tp, None)
            self.partition_states.set(tp, PartitionState.NON_EXISTENT)
        self.topics_being_deleted.discard(topic)

    def reset(self) -> None:
        """Forget everything (on resignation)."""
        fresh = ControllerContext()
        for name in (f.name for f in fields(self)):
            setattr(self, name, getattr(fresh, name))
