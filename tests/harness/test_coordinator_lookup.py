"""The pure parts of finding a group's coordinator: the offsets partition of a group, and
the latest `coordinator-loaded` event of the brokers' event logs."""

from __future__ import annotations

import json

from harness.db.coordinator import DEFAULT_OFFSETS_PARTITIONS, loaded_coordinator, offsets_partition


def loaded(broker: int, partition: int, epoch: int, time: int) -> str:
    return json.dumps({"time": time, "broker_id": broker, "event": "coordinator-loaded",
                       "offsets_partition": partition, "leader_epoch": epoch, "groups": []})


def test_offsets_partition_is_kafkas_hash_of_the_group():
    assert DEFAULT_OFFSETS_PARTITIONS == 50
    assert offsets_partition("kchaos", 50) == 23  # abs("kchaos".hashCode() = -1137024523) % 50
    assert all(0 <= offsets_partition(f"g{i}", 3) < 3 for i in range(20))


def test_the_highest_leader_epoch_of_the_groups_partition_wins():
    lines = [loaded(1, 0, 3, 100), loaded(2, 0, 5, 50), loaded(3, 1, 9, 200),
             '{"event": "coordinator-unloaded", "offsets_partition": 0, "broker_id": 3}',
             '{"time": 300, "broker_id": 3, "event": "coordinator-lo']  # cut by a kill
    assert loaded_coordinator(lines, 0) == 2
    assert loaded_coordinator(lines, 1) == 3
    assert loaded_coordinator(lines, 2) is None
    assert loaded_coordinator([loaded(1, 0, 5, 100), loaded(3, 0, 5, 200)], 0) == 3


def test_a_transactional_ids_coordinator_is_the_latest_txn_coordinator_load():
    lines = [json.dumps({"time": 10, "broker_id": 1, "event": "txn-coordinator-loaded",
                         "txn_partition": 4, "coordinator_epoch": 2}),
             json.dumps({"time": 20, "broker_id": 2, "event": "txn-coordinator-loaded",
                         "txn_partition": 4, "coordinator_epoch": 3}),
             loaded(3, 4, 9, 30)]
    assert loaded_coordinator(lines, 4, "transaction") == 2
    assert loaded_coordinator(lines, 4) == 3
