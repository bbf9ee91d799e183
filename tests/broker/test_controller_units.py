"""Pure parts of the controller: assignment, state machines, event manager, event log."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections import Counter

import pytest

from broker.controller.assignment import (
    InvalidReplicationFactorError,
    assign_replicas,
    broker_order,
)
from broker.controller.event_log import EventLog
from broker.controller.event_manager import EventManager
from broker.controller.events import ControlledShutdown, TopicChange
from broker.controller.state_machines import (
    PARTITION_VALID_PREVIOUS,
    PartitionState,
    ReplicaState,
    partition_state_machine,
    replica_state_machine,
)

P, R = PartitionState, ReplicaState


class FixedStart(random.Random):
    def __init__(self, start: int) -> None:
        super().__init__(0)
        self.start = start

    def randrange(self, n: int) -> int:
        return self.start


def test_assignment_follows_the_seed_example():
    brokers = [(i, None) for i in range(6)]
    assignment = assign_replicas(brokers, 10, 3, FixedStart(4))
    assert assignment[0] == [4, 5, 0]
    assert assignment[1] == [5, 0, 1]
    assert assignment[2] == [0, 1, 2]
    assert all(len(set(r)) == 3 for r in assignment.values())


def test_assignment_spreads_leaders_and_replicas_evenly():
    brokers = [(i, None) for i in (3, 1, 2)]
    assignment = assign_replicas(brokers, 30, 2, random.Random(7))
    assert Counter(r[0] for r in assignment.values()) == {1: 10, 2: 10, 3: 10}
    assert Counter(b for r in assignment.values() for b in r) == {1: 20, 2: 20, 3: 20}


def test_assignment_is_deterministic_by_seed_and_start_is_random():
    brokers = [(i, None) for i in range(5)]
    assert assign_replicas(brokers, 8, 3, random.Random(1)) == assign_replicas(
        brokers, 8, 3, random.Random(1))
    starts = {assign_replicas(brokers, 1, 1, random.Random(s))[0][0] for s in range(50)}
    assert starts == set(range(5))


def test_rack_alternating_order():
    racks = [(0, "a"), (1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "b")]
    assert broker_order(racks) == [0, 3, 1, 4, 2, 5]
    assignment = assign_replicas(racks, 12, 2, random.Random(3))
    rack = dict(racks)
    assert all(rack[r[0]] != rack[r[1]] for r in assignment.values())
    assert broker_order([(1, "x"), (2, None), (3, "y")]) == [2, 1, 3]


def test_assignment_rejects_bad_replication_factor():
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas([(1, None)], 1, 2, random.Random())
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas([(1, None)], 1, 0, random.Random())


def test_partition_state_machine_valid_and_invalid(caplog):
    sm = partition_state_machine()
    tp = ("t", 0)
    assert sm.state(tp) is P.NON_EXISTENT
    with caplog.at_level(logging.ERROR):
        assert sm.transition([tp], P.ONLINE) == []
    assert "allowed from NewPartition, OfflinePartition, OnlinePartition" in caplog.text
    assert sm.state(tp) is P.NON_EXISTENT
    for target in (P.NEW, P.ONLINE, P.OFFLINE, P.OFFLINE, P.ONLINE, P.OFFLINE, P.NON_EXISTENT):
        assert sm.transition([tp], target) == [tp]
    assert sm.state(tp) is P.NON_EXISTENT and sm.states == {}
    assert sm.transition([tp], P.NEW) == [tp]
    assert sm.split([tp, ("t", 1)], P.OFFLINE) == [tp]
    assert sm.keys_in(P.NEW) == [tp]


def test_partition_transitions_are_kafkas():
    assert PARTITION_VALID_PREVIOUS[P.NEW] == {P.NON_EXISTENT}
    assert PARTITION_VALID_PREVIOUS[P.NON_EXISTENT] == {P.OFFLINE}


def test_replica_state_machine_deletion_path():
    sm = replica_state_machine()
    key = ("t", 0, 1)
    assert sm.transition([key], R.ONLINE) == []
    for target in (R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_STARTED, R.DELETION_SUCCESSFUL,
                   R.NON_EXISTENT):
        assert sm.transition([key], target) == [key]
    assert sm.transition([key], R.DELETION_STARTED) == []


def test_event_manager_survives_errors_and_preempts_on_clear():
    async def scenario():
        seen = []

        async def process(event):
            seen.append(event)
            if isinstance(event, TopicChange) and len(seen) == 1:
                raise RuntimeError("boom")
            await asyncio.sleep(0.01)

        manager = EventManager(process)
        manager.start()
        manager.put(TopicChange())
        manager.put(TopicChange())
        await manager.idle()
        assert len(seen) == 2
        answer = asyncio.get_running_loop().create_future()
        manager.put(TopicChange())
        manager.put(ControlledShutdown(1, 2, answer))
        await asyncio.sleep(0)
        manager.clear_and_put(TopicChange())
        assert answer.result() == (41, [])
        await manager.idle()
        await manager.close()
        return seen

    assert len(asyncio.run(scenario())) == 4


def test_event_log_lines(tmp_path):
    path = tmp_path / "sub" / "controller-events.jsonl"
    log = EventLog(path, 3)
    log.election("elect-leader", 2, "t", 0, "offline", 1, 2, 5, (2, 3), unclean=True)
    log.write("resign", 2)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] | {"time": 0} == {
        "time": 0, "controller_id": 3, "controller_epoch": 2, "event": "elect-leader",
        "topic": "t", "partition": 0, "selector": "offline", "old_leader": 1, "new_leader": 2,
        "leader_epoch": 5, "isr": [2, 3], "unclean": True}
    assert lines[1]["event"] == "resign"
    log.close()


def test_exported_members():
    import importlib

    import broker.controller

    assert broker.controller.__all__ == [
        "Controller", "ControllerConfig", "ElectionResult", "assign_replicas"]
    for name in ("broker.zk", "broker.control_plane", "broker.control_plane.messages",
                 "broker.control_plane.codec", "broker.control_plane.server",
                 "broker.controller.admin", "broker.controller.assignment",
                 "broker.controller.config", "broker.controller.context",
                 "broker.controller.controller", "broker.controller.election",
                 "broker.controller.event_log", "broker.controller.event_manager",
                 "broker.controller.events", "broker.controller.partitions",
                 "broker.controller.requests", "broker.controller.state_machines"):
        module = importlib.import_module(name)
        missing = [n for n in module.__all__ if not hasattr(module, n)]
        assert not missing, f"{name} exports missing names {missing}"
