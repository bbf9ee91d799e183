"""Transactions in the log, on real files: markers end transactions, aborts go to the
segment's `.txnindex` (Kafka's 34-byte entries), the LSO, and the index through roll,
truncation, retention, recovery and compaction (also a crash in the middle of a swap)."""

from __future__ import annotations

import os
import struct

import pytest
from kafka.record import MemoryRecords

from broker.storage import (
    CleanerConfig,
    CoordinatorFencedError,
    InvalidProducerEpochError,
    InvalidRecordError,
    LogConfig,
    PartitionLog,
    build_marker_batch,
)
from broker.storage.cleaner import clean_log
from broker.storage.txn_index import txn_index_path
from tests.support.batches import batch

CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=100)
MERGING = CleanerConfig(min_cleanable_ratio=0.0, max_segment_bytes=4 * 700)


def open_log(directory, recovery_point: int = 0) -> PartitionLog:
    return PartitionLog.open(directory, CONFIG, recovery_point)


def txn(log: PartitionLog, pid: int, count: int = 2, epoch: int = 0) -> int:
    """A transactional batch of `pid` (sequence -1, as a coordinator writes); its offset."""
    return log.append_as_leader(batch(count, pid, epoch, -1, transactional=True), 1).first_offset


def end(log: PartitionLog, pid: int, commit: bool, epoch: int = 0,
        coordinator_epoch: int = 0) -> int:
    return log.append_txn_marker(pid, epoch, commit, coordinator_epoch, 1).first_offset


def index_entries(log: PartitionLog, base_offset: int) -> list[tuple[int, ...]]:
    path = txn_index_path(log.directory, base_offset)
    return list(struct.iter_unpack(">hqqqq", path.read_bytes())) if path.exists() else []


def crash(log: PartitionLog) -> None:
    for segment in log.segments:
        segment.close()


def test_an_abort_marker_is_indexed_with_the_lso_after_it(tmp_path):
    log = open_log(tmp_path / "t-0")
    assert txn(log, 1) == 0
    assert txn(log, 2) == 2
    assert log.last_stable_offset(100) == 0
    aborted_at = end(log, 1, commit=False)
    assert index_entries(log, 0) == [(0, 1, 0, aborted_at, 2)], "LSO: pid 2 still open at 2"
    assert log.last_stable_offset(aborted_at) == 0, "the marker is not below the HW yet"
    assert log.last_stable_offset(aborted_at + 1) == 2
    committed_at = end(log, 2, commit=True)
    assert len(index_entries(log, 0)) == 1, "commits are not indexed"
    assert log.last_stable_offset(committed_at) == 2
    assert log.last_stable_offset(committed_at + 1) == committed_at + 1
    assert log.collect_aborted_transactions(0, committed_at + 1) == [(1, 0)]
    assert log.collect_aborted_transactions(aborted_at + 1, committed_at + 1) == []
    assert log.collect_aborted_transactions(0, 0) == []


def test_a_marker_batch_is_one_control_record(tmp_path):
    log = open_log(tmp_path / "t-0")
    txn(log, 5, epoch=2)
    offset = end(log, 5, commit=True, epoch=2, coordinator_epoch=9)
    decoded = MemoryRecords(log.read(offset, 1 << 20)).next_batch()
    assert decoded.is_control_batch and decoded.is_transactional
    assert (decoded.producer_id, decoded.producer_epoch, decoded.leader_epoch) == (5, 2, 1)
    assert [(r.key, r.value) for r in decoded] == [(struct.pack(">hh", 0, 1),
                                                    struct.pack(">hi", 0, 9))]


def test_marker_fencing(tmp_path):
    log = open_log(tmp_path / "t-0")
    txn(log, 1, epoch=3)
    end(log, 1, commit=True, epoch=3, coordinator_epoch=5)
    with pytest.raises(InvalidProducerEpochError):
        end(log, 1, commit=False, epoch=2, coordinator_epoch=5)
    with pytest.raises(CoordinatorFencedError):
        end(log, 1, commit=False, epoch=3, coordinator_epoch=4)
    before = log.log_end_offset
    end(log, 1, commit=False, epoch=3, coordinator_epoch=4 + 1)  # nothing open: still written
    assert log.log_end_offset == before + 1
    log.append_txn_marker(1, 2, True, 6, 1, fence_producer_epochs=False)
    assert log.producer_state.get(1).epoch == 3, "an accepted stale marker keeps the epoch"


def test_clients_may_not_write_control_batches(tmp_path):
    log = open_log(tmp_path / "t-0")
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(build_marker_batch(1, 0, True, 0, 0), 1, from_client=True)


def test_entries_live_in_the_marker_segment_and_follow_truncation_and_retention(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=700, retention_bytes=0))
    first = txn(log, 1)
    while len(log.segments) < 2:
        txn(log, 2, count=3)
    marker = end(log, 1, commit=False)
    marker_segment = log.segments[-1].base_offset
    assert marker_segment > 0 and index_entries(log, 0) == []
    assert index_entries(log, marker_segment)[0][1:4] == (1, first, marker)
    assert log.collect_aborted_transactions(first, marker) == [(1, first)]
    later = end(log, 2, commit=False)
    assert len(index_entries(log, marker_segment)) == 2
    log.truncate_to(later)
    assert [e[3] for e in index_entries(log, marker_segment)] == [marker]
    assert log.producer_state.get(2).txn_first_offset >= 0, "pid 2 is open again"
    log.truncate_to(marker)
    assert not txn_index_path(log.directory, marker_segment).exists()
    assert log.collect_aborted_transactions(0, 1 << 30) == []
    end(log, 1, commit=False)
    log.roll()
    end(log, 2, commit=True)
    log.delete_old_segments()
    assert not txn_index_path(log.directory, marker_segment).exists()
    assert log.collect_aborted_transactions(0, 1 << 30) == []


def test_recovery_rebuilds_the_index_of_validated_segments(tmp_path):
    log = open_log(tmp_path / "t-0")
    for round_ in range(6):
        txn(log, 1)
        txn(log, 2)
        end(log, 1, commit=round_ % 2 == 0)
        end(log, 2, commit=False)
    files = {p.name: p.read_bytes() for p in log.directory.glob("*.txnindex")}
    assert len(files) >= 2
    aborted = log.collect_aborted_transactions(0, log.log_end_offset)
    crash(log)
    names = sorted(files)
    os.remove(log.directory / names[0])
    (log.directory / names[1]).write_bytes(b"torn")
    again = open_log(log.directory, recovery_point=0)
    assert {p.name: p.read_bytes() for p in again.directory.glob("*.txnindex")} == files
    assert again.collect_aborted_transactions(0, again.log_end_offset) == aborted


def test_a_torn_index_alone_sends_its_segment_through_recovery(tmp_path):
    log = open_log(tmp_path / "t-0")
    while len(log.segments) < 3:
        txn(log, 1)
        end(log, 1, commit=False)
    aborted = log.collect_aborted_transactions(0, log.log_end_offset)
    log.close()
    path = txn_index_path(log.directory, 0)
    good = path.read_bytes()
    path.write_bytes(good[:-3])
    again = open_log(log.directory, log.recovery_point)
    assert path.read_bytes() == good
    assert again.collect_aborted_transactions(0, again.log_end_offset) == aborted


def test_compaction_keeps_markers_and_merges_the_aborted_entries(tmp_path):
    log = open_log(tmp_path / "t-0")
    while len(log.segments) < 4:
        txn(log, 1)
        end(log, 1, commit=False)
        log.append_as_leader(batch(2), 1)
    aborted = log.collect_aborted_transactions(0, log.log_end_offset)
    markers = control_offsets(log)
    result = clean_log(log, None, MERGING)
    assert result is not None and result.segments_after < result.segments_before
    assert control_offsets(log) == markers
    assert log.collect_aborted_transactions(0, log.log_end_offset) == aborted
    reopened = open_log(log.directory, log.recovery_point)
    assert reopened.collect_aborted_transactions(0, log.log_end_offset) == aborted


@pytest.mark.parametrize("step", ["swap", "deleted", "replaced"])
def test_a_crash_during_the_swap_loses_no_aborted_entry(tmp_path, step):
    log = open_log(tmp_path / "t-0")
    while len(log.segments) < 4:
        txn(log, 1)
        end(log, 1, commit=False)
    aborted = log.collect_aborted_transactions(0, log.log_end_offset)
    recovery_point = log.recovery_point

    class Killed(Exception):
        pass

    def die(name: str) -> None:
        if name == step:
            raise Killed

    with pytest.raises(Killed):
        clean_log(log, None, MERGING, on_step=die)
    crash(log)
    again = open_log(log.directory, recovery_point)
    assert again.collect_aborted_transactions(0, again.log_end_offset) == aborted


def control_offsets(log: PartitionLog) -> list[int]:
    records = MemoryRecords(log.read(log.log_start_offset, 1 << 24))
    out = []
    while records.has_next():
        decoded = records.next_batch()
        if decoded.is_control_batch:
            out.append(decoded.base_offset)
    return out
