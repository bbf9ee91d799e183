"""The five leader selectors as pure functions (seeds/004 rules)."""

from __future__ import annotations

from broker.controller.election import (
    ElectionResult,
    Selector,
    controlled_shutdown_election,
    noop_election,
    offline_election,
    preferred_election,
    reassigned_election,
)


def test_offline_picks_first_live_assigned_replica_in_isr():
    result = offline_election([1, 0, 2], [2, 0], live={0, 1, 2}, allow_unclean=False)
    assert result == ElectionResult(Selector.OFFLINE, 0, (2, 0), (1, 0, 2))
    result = offline_election([1, 0, 2], [2, 0, 1], live={0, 2}, allow_unclean=False)
    assert result == ElectionResult(Selector.OFFLINE, 0, (2, 0), (0, 2), unclean=False)


def test_offline_isr_of_only_the_dead_leader():
    assert offline_election([1, 2, 3], [1], live={2, 3}, allow_unclean=False) is None
    result = offline_election([1, 2, 3], [1], live={2, 3}, allow_unclean=True)
    assert result == ElectionResult(Selector.OFFLINE, 2, (2,), (2, 3), unclean=True)


def test_offline_clean_election_is_never_unclean_even_when_allowed():
    result = offline_election([1, 2, 3], [1, 3], live={2, 3}, allow_unclean=True)
    assert (result.leader, result.isr, result.unclean) == (3, (3,), False)


def test_offline_nothing_alive():
    assert offline_election([1, 2], [1, 2], live=set(), allow_unclean=True) is None
    assert offline_election([1, 2], [], live={3}, allow_unclean=True) is None


def test_reassigned_first_live_reassigned_replica_in_isr():
    result = reassigned_election([4, 5, 6], isr=[1, 5, 6, 4], live={5, 6})
    assert result == ElectionResult(Selector.REASSIGNED, 5, (1, 5, 6, 4), (4, 5, 6))
    assert reassigned_election([4, 5], isr=[1, 2], live={4, 5}) is None
    assert reassigned_election([], isr=[1], live={1}) is None


def test_preferred_replica():
    result = preferred_election([2, 1, 3], leader=1, isr=[1, 2, 3], live={1, 2, 3})
    assert result == ElectionResult(Selector.PREFERRED, 2, (1, 2, 3), (2, 1, 3))
    assert preferred_election([2, 1, 3], leader=2, isr=[1, 2, 3], live={1, 2, 3}) is None
    assert preferred_election([2, 1, 3], leader=1, isr=[1, 3], live={1, 2, 3}) is None
    assert preferred_election([2, 1, 3], leader=1, isr=[1, 2, 3], live={1, 3}) is None


def test_controlled_shutdown():
    result = controlled_shutdown_election([1, 2, 3], isr=[1, 2, 3],
                                          live_or_shutting_down={1, 2, 3}, shutting_down={1})
    assert result == ElectionResult(Selector.CONTROLLED_SHUTDOWN, 2, (2, 3), (1, 2, 3))
    assert controlled_shutdown_election([1, 2], isr=[1], live_or_shutting_down={1, 2},
                                        shutting_down={1}) is None
    result = controlled_shutdown_election([1, 2, 3], isr=[3, 1, 2],
                                          live_or_shutting_down={1, 3}, shutting_down={1})
    assert (result.leader, result.isr, result.recipients) == (3, (3, 2), (1, 3))


def test_noop_returns_current_state():
    assert noop_election([1, 2], leader=2, isr=[2]) == ElectionResult(
        Selector.NOOP, 2, (2,), (1, 2))
