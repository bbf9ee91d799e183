"""Controller events: small frozen values put on the one queue (Kafka's ControllerEvent).

Watchers and timers only construct one of these and enqueue it; `Controller.process` is a
single match over them. An event carrying a future answers it in `preempt()` when it is
dropped unprocessed (queue cleared on session expiry, or the controller stops).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from broker.control_plane.messages import NOT_CONTROLLER

__all__ = [
    "ControllerEvent", "Startup", "Reelect", "Expire", "BrokerChange", "TopicChange",
    "PartitionModifications", "TopicDeletion",
    "IsrChangeNotification", "PartitionReassignment",
    "PreferredReplicaElection", "AutoPreferredReplicaLeaderElection", "ControlledShutdown",
]


@dataclass(frozen=True)
class ControllerEvent:
    def preempt(self) -> None:
        """Called instead of processing when the event is dropped."""

    @property
    def name(self) -> str:
        return type(self).__name__


@dataclass(frozen=True)
class Startup(ControllerEvent):
    """Watch /controller and try to become controller."""


@dataclass(frozen=True)
class Reelect(ControllerEvent):
    """/controller changed or was deleted, or the session came back: resign if it is not us,
    then try to become controller."""


@dataclass(frozen=True)
class Expire(ControllerEvent):
    """The ZooKeeper session was lost: resign at once."""


@dataclass(frozen=True)
class BrokerChange(ControllerEvent):
    """Children of /brokers/ids changed."""


@dataclass(frozen=True)
class TopicChange(ControllerEvent):
    """Children of /brokers/topics changed."""


@dataclass(frozen=True)
class PartitionModifications(ControllerEvent):
    """/brokers/topics/<topic> changed (partitions may have been added)."""

    topic: str


@dataclass(frozen=True)
class TopicDeletion(ControllerEvent):
    """Children of /admin/delete_topics changed."""


@dataclass(frozen=True)
class IsrChangeNotification(ControllerEvent):
    """A leader created /isr_change_notification/isr_change_<seq>."""


@dataclass(frozen=True)
class PartitionReassignment(ControllerEvent):
    """/admin/reassign_partitions was created or changed."""


@dataclass(frozen=True)
class PreferredReplicaElection(ControllerEvent):
    """/admin/preferred_replica_election was created."""


@dataclass(frozen=True)
class AutoPreferredReplicaLeaderElection(ControllerEvent):
    """The auto.leader.rebalance timer fired."""


@dataclass(frozen=True, eq=False)
class ControlledShutdown(ControllerEvent):
    """A broker asks to have its leadership moved away before it stops."""

    broker_id: int
    broker_epoch: int
    answer: asyncio.Future = field(repr=False)

    def preempt(self) -> None:
        if not self.answer.done():
            self.answer.set_result((NOT_CONTROLLER, []))
