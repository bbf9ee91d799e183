"""The seeded-defect checker: failing anomalies tied to the broker's defect events."""

from __future__ import annotations

import pytest

from checker.cluster.defects import ZOMBIE_MS, DefectChecker
from checker.cluster.event_log import ControllerEvent
from tests.support.group_histories import GroupBuilder
from tests.support.queue_histories import Builder

START_MS = 1_700_000_000_000
IDS = ["kchaos-txn-0", "kchaos-txn-1"]


def settings(**extra) -> dict:
    return {"acks": "all", "start_wall_ms": START_MS, "transactional_ids": IDS,
            "broker_config": {"min.insync.replicas": 2}, **extra}


def lost_txn_write() -> tuple[Builder, float]:
    """Process 3 (transactional id kchaos-txn-1) commits values 10 and 20 to keys x and y;
    10 is lost (a later offset of x is read, 10 never is)."""
    b = Builder()
    b.sends(3, [("x", 10, 0), ("y", 20, 0)])
    ended_ms = b.time / 1e6
    b.sends(2, [("x", 11, 1), ("y", 21, 1)])
    b.poll(0, {"x": [(1, 11)], "y": [(0, 20), (1, 21)]})
    return b, ended_ms


def fencing(ms_after_start: float, txn_id: str = "kchaos-txn-1") -> ControllerEvent:
    return ControllerEvent(time=START_MS + int(ms_after_start), event="txn-fencing-skipped",
                           node="n1", details={"transactional_id": txn_id,
                                               "request_epoch": 1, "producer_epoch": 2})


def check(b: Builder, events: list[ControllerEvent], **extra):
    return DefectChecker().check(settings(**extra), b.ops, {"controller_events": events})


def test_a_loss_of_a_transaction_whose_producer_was_not_fenced_is_tied_to_the_event():
    b, ended_ms = lost_txn_write()
    result = check(b, [fencing(ended_ms + 5_000)])
    assert result.valid is False
    [witness] = result.anomalies["fencing-skipped"].examples
    assert witness["type"] == "lost-write" and witness["value"] == 10
    assert witness["event"]["transactional_id"] == "kchaos-txn-1"


@pytest.mark.parametrize("event", [
    pytest.param(lambda ended: fencing(ended + 5_000, "kchaos-txn-0"), id="another-id"),
    pytest.param(lambda ended: fencing(ended + ZOMBIE_MS + 1_000), id="after-zombies"),
    pytest.param(lambda ended: fencing(0), id="before-the-op"),
])
def test_a_fencing_event_of_another_producer_or_time_ties_nothing(event):
    b, ended_ms = lost_txn_write()
    result = check(b, [event(ended_ms)])
    assert result.valid is True and not result.anomalies
    assert result.stats["fencing-skipped-events"] == 1


def test_without_defect_events_the_checker_is_valid_and_reads_no_history():
    result = DefectChecker().check(settings(), [], {"controller_events": []})
    assert result.valid is True
    assert set(result.stats.values()) == {0}


def lost_write_at(offset: int) -> Builder:
    b = Builder()
    b.send(0, 1, 10, offset)
    b.send(0, 1, 11, offset + 1)
    b.poll(5, {1: [(offset + 1, 11)]})
    return b


def unflushed(ms_after_start: float, partition: int, cut_to: int, end: int) -> ControllerEvent:
    return ControllerEvent(time=START_MS + int(ms_after_start), event="unflushed-lost",
                           node="n2", topic="kchaos", partition=partition,
                           details={"from_offset": end, "to_offset": cut_to, "bytes": 100})


def test_a_lost_write_in_a_partitions_cut_tail_is_tied_to_the_power_loss():
    b = lost_write_at(4)
    tied = check(b, [unflushed(b.time / 1e6, partition=1, cut_to=3, end=6)])
    assert [w["type"] for w in tied.anomalies["unflushed-lost"].examples] == ["lost-write"]
    for event in (unflushed(b.time / 1e6, partition=2, cut_to=3, end=6),
                  unflushed(b.time / 1e6, partition=1, cut_to=5, end=6),
                  unflushed(0, partition=1, cut_to=3, end=6)):
        assert check(b, [event]).valid is True


def test_an_intermediate_read_which_the_transaction_checker_allows_is_not_tied():
    # process 3 commits 10 and 12 to key x; a poll ends between them (max.poll.records)
    b = Builder()
    b.sends(3, [("x", 10, 0), ("x", 12, 1)])
    ended_ms = b.time / 1e6
    b.poll(0, {"x": [(0, 10)]})
    b.poll(0, {"x": [(1, 12)]})
    result = check(b, [fencing(ended_ms + 1_000)])
    assert result.valid is True and not result.anomalies


def test_an_allowed_loss_is_not_tied():
    b = lost_write_at(4)
    result = check(b, [unflushed(b.time / 1e6, partition=1, cut_to=3, end=6)],
                   broker_config={"min.insync.replicas": 1})
    assert result.valid is True


def test_an_aborted_read_in_a_leaked_fetch_is_tied_to_the_leak():
    b = Builder()
    b.send(0, 1, 10, 3, kind="fail")
    b.poll(5, {1: [(3, 10)]})
    leak = ControllerEvent(time=START_MS + 1, event="read-uncommitted-leaked", node="n1",
                           topic="kchaos", partition=1,
                           details={"from_offset": 2, "to_offset": 5,
                                    "last_stable_offset": 2, "aborted": [[7, 3]]})
    result = check(b, [leak])
    [witness] = result.anomalies["read-uncommitted-leak"].examples
    assert witness["type"] == "G1a" and witness["offset"] == 3
    elsewhere = ControllerEvent(time=START_MS + 1, event="read-uncommitted-leaked",
                                node="n1", topic="kchaos", partition=1,
                                details={"from_offset": 4, "to_offset": 5})
    assert check(b, [elsewhere]).valid is True


def held_by_a_zombie_transaction(read_past: bool) -> tuple[Builder, float]:
    """Process 3 (kchaos-txn-1) aborts a transaction whose send to x took offset 2, left open
    on the partition; process 2 (kchaos-txn-0) then commits x at offset 3 (and, with
    `read_past`, at offset 4, which a poll reads); no read of x gets past offset 1 otherwise."""
    b = Builder()
    b.sends(2, [("x", 10, 0), ("x", 11, 1)])
    during_ms = b.time / 1e6 + 0.5
    b.op(3, "txn", [["send", "x", 12], ["send", "y", 13]], "fail",
         [["send", "x", [2, 12]], ["send", "y", [0, 13]]], error="aborted on purpose")
    b.sends(2, [("x", 14, 3), ("y", 15, 1)])
    reads = {"x": [(0, 10), (1, 11)], "y": [(1, 15)]}
    if read_past:
        b.sends(2, [("x", 16, 4), ("y", 17, 2)])
        reads = {"x": [(0, 10), (1, 11), (4, 16)], "y": [(1, 15), (2, 17)]}
    b.poll(0, reads)
    return b, during_ms


def test_a_loss_behind_a_transaction_the_zombie_left_open_is_tied_whoever_sent_it():
    """The zombie's end leaves its successor's later sends open on a partition; the last
    stable offset stops there and no later write of the key is read, another producer's
    committed ones included."""
    b, during_ms = held_by_a_zombie_transaction(read_past=False)
    result = check(b, [fencing(during_ms)])
    assert result.valid is False
    [witness] = result.anomalies["fencing-skipped"].examples
    assert (witness["key"], witness["value"], witness["offset"]) == ("x", 14, 3)
    assert witness["event"]["transactional_id"] == "kchaos-txn-1"


def test_a_loss_the_reads_of_its_key_went_past_is_not_held_by_the_zombie():
    b, during_ms = held_by_a_zombie_transaction(read_past=True)
    result = check(b, [fencing(during_ms)])
    assert "fencing-skipped" not in result.anomalies


def commit_acked(ms_after_start: float, offset: int, group: str = "g0",
                 partition: int = 0) -> ControllerEvent:
    return ControllerEvent(time=START_MS + int(ms_after_start),
                           event="commit-acked-unreplicated", node="n2",
                           details={"group": group, "generation": 1, "member": "m1",
                                    "offsets_partition": 41, "log_offset": 7,
                                    "high_watermark": 7,
                                    "offsets": [["kchaos", partition, offset]]})


def rewound_commit() -> tuple[GroupBuilder, float]:
    """p1 commits next offset 5 of key 0, then 3: a commit-rewind (the 5 was lost); the
    ms (since the start) at which the 5 was acknowledged."""
    b = GroupBuilder()
    for offset in range(6):
        b.send("w", 0, 10 + offset, offset)
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.poll(1, {0: [(o, 10 + o) for o in range(6)]})
    b.commit(1, {0: 5})
    acked_ms = b.time / 1e6
    b.commit(1, {0: 3})
    return b, acked_ms


def check_group(b: GroupBuilder, events: list[ControllerEvent]):
    return DefectChecker().check(settings(commit="after-process"), b.ops,
                                 {"controller_events": events})


def test_a_commit_rewind_from_a_commit_acknowledged_unreplicated_is_tied_to_the_event():
    b, acked_ms = rewound_commit()
    result = check_group(b, [commit_acked(acked_ms, 5)])
    assert result.valid is False
    [witness] = result.anomalies["commit-acked-unreplicated"].examples
    assert witness["type"] == "commit-rewind" and witness["offsets"] == [5, 3]
    assert witness["event"]["offsets"] == [["kchaos", 0, 5]]


@pytest.mark.parametrize("event", [
    pytest.param(lambda acked: commit_acked(acked, 4), id="another-offset"),
    pytest.param(lambda acked: commit_acked(acked, 5, group="g1"), id="another-group"),
    pytest.param(lambda acked: commit_acked(acked, 5, partition=1), id="another-partition"),
    pytest.param(lambda acked: commit_acked(acked + 60_000, 5), id="after-the-rewind"),
])
def test_an_unreplicated_commit_of_another_offset_group_partition_or_time_ties_nothing(event):
    b, acked_ms = rewound_commit()
    result = check_group(b, [event(acked_ms)])
    assert result.valid is True and not result.anomalies
    assert result.stats["commit-acked-unreplicated-events"] == 1


def test_a_resume_before_a_commit_acknowledged_unreplicated_is_tied_to_the_event():
    b = GroupBuilder()
    for offset in range(6):
        b.send("w", 0, 10 + offset, offset)
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.poll(1, {0: [(o, 10 + o) for o in range(3)]})
    b.commit(1, {0: 3})
    acked_ms = b.time / 1e6
    b.crash(1, rebalances=[b.entry([0], 1, "m1", revoke=True)])
    b.subscribe(2, [b.entry([0], 2, "m2")])
    b.poll(2, {0: [(o, 10 + o) for o in range(1, 6)]})
    result = check_group(b, [commit_acked(acked_ms, 3)])
    [witness] = result.anomalies["commit-acked-unreplicated"].examples
    assert witness["type"] == "resume-rewind" and witness["committed"] == 3
