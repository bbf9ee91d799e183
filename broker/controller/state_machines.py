"""Partition and replica state machines; valid transitions are data (seeds/000 "PARTITION",
Kafka 2.8's PartitionStateMachine.scala and ReplicaStateMachine.scala).

Partition transitions and what the controller does on each (seeds/000):

    NonExistent -> New        replicas assigned, no leader yet
    New -> Online             first live replica leads, live replicas are the ISR; state znode
                              created; LeaderAndIsr to the live replicas, UpdateMetadata to all
    Online, Offline -> Online a selector elects leader and ISR; state znode CAS; LeaderAndIsr
    New, Online -> Offline    the leader died (or could not be elected)
    Offline -> Offline        election failed again
    Offline -> NonExistent    deleted

Replica transitions (Kafka's seven states):

    NonExistent -> New                       new replica of a new or reassigned partition
    New, Online, Offline, Ineligible -> Online   the replica's broker is alive; LeaderAndIsr
    New, Online, Offline, Ineligible -> Offline  broker died or stops it: removed from the
                                                 ISR, StopReplica(delete=false)
    Offline -> DeletionStarted               StopReplica(delete=true)
    DeletionStarted -> DeletionSuccessful, Offline/DeletionStarted -> DeletionIneligible
    DeletionSuccessful -> NonExistent

State machines only check and record; the controller performs the side effects for the
transitions `split` accepts. Invalid requests are logged with the allowed previous states and
not applied.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

__all__ = [
    "PartitionState", "ReplicaState", "PARTITION_VALID_PREVIOUS", "REPLICA_VALID_PREVIOUS",
    "StateMachine", "partition_state_machine", "replica_state_machine",
]

log = logging.getLogger(__name__)


class PartitionState(enum.Enum):
    NON_EXISTENT = "NonExistentPartition"
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"


class ReplicaState(enum.Enum):
    NON_EXISTENT = "NonExistentReplica"
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"


P, R = PartitionState, ReplicaState

PARTITION_VALID_PREVIOUS: dict[PartitionState, frozenset[PartitionState]] = {
    P.NEW: frozenset({P.NON_EXISTENT}),
    P.ONLINE: frozenset({P.NEW, P.ONLINE, P.OFFLINE}),
    P.OFFLINE: frozenset({P.NEW, P.ONLINE, P.OFFLINE}),
    P.NON_EXISTENT: frozenset({P.OFFLINE}),
}

REPLICA_VALID_PREVIOUS: dict[ReplicaState, frozenset[ReplicaState]] = {
    R.NEW: frozenset({R.NON_EXISTENT}),
    R.ONLINE: frozenset({R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE}),
    R.OFFLINE: frozenset({R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE}),
    R.DELETION_STARTED: frozenset({R.OFFLINE}),
    R.DELETION_SUCCESSFUL: frozenset({R.DELETION_STARTED}),
    R.DELETION_INELIGIBLE: frozenset({R.OFFLINE, R.DELETION_STARTED}),
    R.NON_EXISTENT: frozenset({R.DELETION_SUCCESSFUL}),
}

K = TypeVar("K", bound=Hashable)
S = TypeVar("S", bound=enum.Enum)


class StateMachine(Generic[K, S]):
    """The current state of every key; a key never seen is in `initial`."""

    def __init__(self, name: str, valid_previous: dict[S, frozenset[S]], initial: S) -> None:
        self.name = name
        self.valid_previous = valid_previous
        self.initial = initial
        self.states: dict[K, S] = {}

    def state(self, key: K) -> S:
        return self.states.get(key, self.initial)

    def split(self, keys: Iterable[K], target: S) -> list[K]:
        """The keys that may move to `target`; the others are logged and left alone."""
        allowed = self.valid_previous[target]
        valid = []
        for key in keys:
            current = self.state(key)
            if current in allowed:
                valid.append(key)
            else:
                log.error("%s: invalid transition of %s from %s to %s (allowed from %s)",
                          self.name, key, current.value, target.value,
                          ", ".join(sorted(s.value for s in allowed)))
        return valid

    def set(self, key: K, state: S) -> None:
        if state == self.initial:
            self.states.pop(key, None)
        else:
            self.states[key] = state

    def transition(self, keys: Iterable[K], target: S) -> list[K]:
        """Split and apply at once (transitions without side effects); returns those moved."""
        valid = self.split(keys, target)
        for key in valid:
            self.set(key, target)
        return valid

    def keys_in(self, *states: S) -> list[K]:
        return [key for key, state in self.states.items() if state in states]

    def clear(self) -> None:
        self.states.clear()


def partition_state_machine() -> StateMachine[tuple[str, int], PartitionState]:
    return StateMachine("PartitionStateMachine", PARTITION_VALID_PREVIOUS, P.NON_EXISTENT)


def replica_state_machine() -> StateMachine[tuple[str, int, int], ReplicaState]:
    return StateMachine("ReplicaStateMachine", REPLICA_VALID_PREVIOUS, R.NON_EXISTENT)
