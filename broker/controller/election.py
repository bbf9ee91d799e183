"""The five partition leader selectors as pure functions (seeds/004 "PartitionLeaderSelector",
seeds/001 and seeds/000 "PartitionLeaderSelector" give the same rules).

Each takes the assignment (AR, in preferred order), the current leader and ISR and the broker
sets it needs, and returns an `ElectionResult` (new leader, new ISR, replicas that receive the
LeaderAndIsr request, whether the election was unclean) or None when the selector cannot elect
(Kafka throws NoReplicaOnlineException / StateChangeFailedException /
LeaderElectionNotNeededException there). Leader epochs and znode versions are the caller's.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

__all__ = [
    "ElectionResult", "Selector", "offline_election", "reassigned_election",
    "preferred_election", "controlled_shutdown_election", "noop_election",
]


class Selector:
    """Selector names as they appear in the controller event log."""

    OFFLINE = "offline"
    REASSIGNED = "reassigned"
    PREFERRED = "preferred"
    CONTROLLED_SHUTDOWN = "controlled-shutdown"
    NOOP = "noop"


@dataclass(frozen=True)
class ElectionResult:
    selector: str
    leader: int
    isr: tuple[int, ...]
    recipients: tuple[int, ...]
    unclean: bool = False


def offline_election(assignment: Sequence[int], isr: Sequence[int], live: Collection[int],
                     allow_unclean: bool) -> ElectionResult | None:
    """OfflinePartitionLeaderSelector (seeds/004):
    1. if some ISR member is alive, the first live assigned replica that is in the live ISR
       leads and the live ISR is the new ISR;
    2. else, if unclean election is disabled, no leader;
    3. else the first live assigned replica leads with ISR = [itself] (unclean);
    4. no live assigned replica: no leader.
    Recipients: the live assigned replicas."""
    live_assigned = tuple(r for r in assignment if r in live)
    live_isr = tuple(r for r in isr if r in live)
    if live_isr:
        leader = next((r for r in live_assigned if r in live_isr), None)
        if leader is None:
            return None
        return ElectionResult(Selector.OFFLINE, leader, live_isr, live_assigned)
    if not allow_unclean or not live_assigned:
        return None
    leader = live_assigned[0]
    return ElectionResult(Selector.OFFLINE, leader, (leader,), live_assigned, unclean=True)


def reassigned_election(reassigned: Sequence[int], isr: Sequence[int],
                        live: Collection[int]) -> ElectionResult | None:
    """ReassignedPartitionLeaderSelector (seeds/004): the first reassigned replica that is
    alive and in the ISR leads; the ISR is unchanged; recipients: the reassigned replicas."""
    leader = next((r for r in reassigned if r in live and r in isr), None)
    if leader is None:
        return None
    return ElectionResult(Selector.REASSIGNED, leader, tuple(isr), tuple(reassigned))


def preferred_election(assignment: Sequence[int], leader: int, isr: Sequence[int],
                       live: Collection[int]) -> ElectionResult | None:
    """PreferredReplicaPartitionLeaderSelector (seeds/004): the preferred (first assigned)
    replica leads if it is not already the leader and is alive and in the ISR; ISR
    unchanged; recipients: the assigned replicas."""
    if not assignment:
        return None
    preferred = assignment[0]
    if preferred == leader or preferred not in live or preferred not in isr:
        return None
    return ElectionResult(Selector.PREFERRED, preferred, tuple(isr), tuple(assignment))


def controlled_shutdown_election(assignment: Sequence[int], isr: Sequence[int],
                                 live_or_shutting_down: Collection[int],
                                 shutting_down: Collection[int]) -> ElectionResult | None:
    """ControlledShutdownLeaderSelector (seeds/004): new ISR = ISR minus the shutting-down
    brokers; the first live assigned replica in the new ISR leads; recipients: the live (or
    shutting-down) assigned replicas."""
    live_assigned = tuple(r for r in assignment if r in live_or_shutting_down)
    new_isr = tuple(r for r in isr if r not in shutting_down)
    leader = next((r for r in live_assigned if r in new_isr), None)
    if leader is None:
        return None
    return ElectionResult(Selector.CONTROLLED_SHUTDOWN, leader, new_isr, live_assigned)


def noop_election(assignment: Sequence[int], leader: int,
                  isr: Sequence[int]) -> ElectionResult:
    """NoOpLeaderSelector (seeds/001, seeds/004): the current leader and ISR, recipients the
    assigned replicas."""
    return ElectionResult(Selector.NOOP, leader, tuple(isr), tuple(assignment))
