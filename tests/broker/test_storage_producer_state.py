"""Producer state owned by the log, on real files: Kafka's checks on leader appends, snapshots
written at roll, flush and close, loaded on open; recovery after a crash, truncation,
retention and snapshot pruning."""

from __future__ import annotations

import os
import struct

import pytest
from crc32c import crc32c

from broker.storage import (
    DuplicateSequenceError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    LogConfig,
    LogManager,
    OutOfOrderSequenceError,
    PartitionLog,
)
from broker.storage.producer_snapshot import snapshot_offsets, snapshot_path
from tests.support.batches import batch

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100)
PID = 7


def open_log(directory, recovery_point: int = 0, config: LogConfig = CONFIG) -> PartitionLog:
    return PartitionLog.open(directory, config, recovery_point)


def send(log: PartitionLog, sequence: int, count: int = 2, epoch: int = 0, pid: int = PID,
         **options):
    return log.append_as_leader(batch(count, pid, epoch, sequence, **options), 1)


def crash(log: PartitionLog) -> None:
    """Drop the log without flushing, snapshotting or closing cleanly."""
    for segment in log.segments:
        segment.close()


def test_leader_appends_are_checked_as_kafka_does(tmp_path):
    log = open_log(tmp_path / "t-0")
    first = send(log, 0, 3)
    second = send(log, 3, 2)
    retry = send(log, 0, 3)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (0, 2)
    assert not second.duplicate and second.first_offset == 3 and log.log_end_offset == 5
    with pytest.raises(OutOfOrderSequenceError):
        send(log, 9)  # a gap
    with pytest.raises(OutOfOrderSequenceError):
        send(log, 5, epoch=1)  # a new epoch starts at 0
    assert send(log, 0, epoch=1).first_offset == 5
    with pytest.raises(InvalidProducerEpochError):
        send(log, 5, epoch=0)
    with pytest.raises(DuplicateSequenceError):
        log.append_as_leader(batch(2, PID, 1, 0) + batch(2, PID, 1, 2), 1)
    assert send(log, 1234, pid=99).first_offset == 7, "an unknown producer: any sequence"
    assert log.producer_state.get(PID).epoch == 1 and first.first_offset == 0


def test_a_non_transactional_batch_inside_an_open_transaction_is_refused(tmp_path):
    log = open_log(tmp_path / "t-0")
    send(log, 0, transactional=True)
    with pytest.raises(InvalidTxnStateError):
        send(log, 2)
    assert log.producer_state.get(PID).txn_first_offset == 0


def test_restart_recognises_each_of_the_last_five_batches(tmp_path):
    log = open_log(tmp_path / "t-0")
    offsets = [send(log, 2 * i).first_offset for i in range(5)]
    log.close()
    assert snapshot_offsets(log.directory) == [10]
    again = open_log(log.directory, log.recovery_point)
    for i, offset in enumerate(offsets):
        retry = send(again, 2 * i)
        assert retry.duplicate and retry.first_offset == offset
    assert again.log_end_offset == 10
    assert send(again, 10).first_offset == 10


def test_snapshots_at_roll_and_flush_hold_the_state_below_their_offset(tmp_path):
    log = open_log(tmp_path / "t-0")
    while len(log.segments) < 3:
        send(log, log.log_end_offset)
    rolls = [segment.base_offset for segment in log.segments[1:]]
    assert snapshot_offsets(log.directory) == rolls
    send(log, log.log_end_offset)
    log.flush()
    assert snapshot_offsets(log.directory) == [*rolls, log.log_end_offset]
    log.flush()  # unchanged state: no new snapshot
    assert snapshot_offsets(log.directory) == [*rolls, log.log_end_offset]
    data = snapshot_path(log.directory, rolls[0]).read_bytes()
    version, crc = struct.unpack_from(">hI", data)
    assert version == 1 and crc == crc32c(data[6:])
    count, producer_id, epoch, last_sequence = struct.unpack_from(">iqhi", data, 6)
    assert (count, producer_id, epoch, last_sequence) == (1, PID, 0, rolls[0] - 1)


def test_crash_recovery_replays_the_log_after_the_latest_usable_snapshot(tmp_path):
    log = open_log(tmp_path / "t-0")
    while len(log.segments) < 3:
        send(log, log.log_end_offset)
    recovery_point = log.recovery_point
    acknowledged = [send(log, log.log_end_offset) for _ in range(3)]
    torn = send(log, log.log_end_offset)
    crash(log)
    active = log.segments[-1].log_path
    os.truncate(active, active.stat().st_size - 5)  # the last batch is torn
    for offset in snapshot_offsets(log.directory)[1:]:
        os.remove(snapshot_path(log.directory, offset))

    again = open_log(log.directory, recovery_point)
    assert again.log_end_offset == torn.first_offset
    for info in acknowledged:
        retry = send(again, info.first_offset)
        assert retry.duplicate and retry.first_offset == info.first_offset
    assert not send(again, torn.first_offset).duplicate, "the torn batch is appended again"
    assert again.log_end_offset == torn.last_offset + 1


def test_crash_without_any_snapshot_replays_the_whole_log(tmp_path):
    log = open_log(tmp_path / "t-0")
    while len(log.segments) < 3:
        send(log, log.log_end_offset)
    last = send(log, log.log_end_offset)
    crash(log)
    for offset in snapshot_offsets(log.directory):
        os.remove(snapshot_path(log.directory, offset))
    again = open_log(log.directory)
    assert send(again, last.first_offset).first_offset == last.first_offset
    assert again.log_end_offset == last.last_offset + 1


def test_a_corrupt_snapshot_is_deleted_and_an_older_one_used(tmp_path):
    log = open_log(tmp_path / "t-0")
    while len(log.segments) < 3:
        send(log, log.log_end_offset)
    last = send(log, log.log_end_offset)
    log.close()
    newest = snapshot_offsets(log.directory)[-1]
    data = bytearray(snapshot_path(log.directory, newest).read_bytes())
    data[-1] ^= 0xFF
    snapshot_path(log.directory, newest).write_bytes(bytes(data))
    again = open_log(log.directory, log.recovery_point)
    assert newest not in snapshot_offsets(log.directory)
    assert send(again, last.first_offset).duplicate


def test_truncation_drops_later_snapshots_and_rebuilds_the_state(tmp_path):
    log = open_log(tmp_path / "t-0")
    while len(log.segments) < 4:
        send(log, log.log_end_offset)
    rolls = snapshot_offsets(log.directory)
    cut = rolls[1] + 2
    log.truncate_to(cut)
    assert snapshot_offsets(log.directory) == rolls[:2]
    assert log.producer_state.get(PID).last_sequence == cut - 1
    assert send(log, cut - 2).duplicate
    assert send(log, cut).first_offset == cut, "a truncated batch is no duplicate"
    log.truncate_to(0)
    assert snapshot_offsets(log.directory) == [] and len(log.producer_state) == 0


def test_retention_deletes_snapshots_below_the_log_start_but_the_latest(tmp_path):
    log = open_log(tmp_path / "t-0", config=LogConfig(segment_bytes=600, retention_bytes=0))
    while len(log.segments) < 4:
        send(log, log.log_end_offset)
    assert len(snapshot_offsets(log.directory)) == 3
    log.delete_old_segments()
    assert log.log_start_offset == log.segments[0].base_offset
    assert snapshot_offsets(log.directory) == [log.log_start_offset]
    log.roll()
    log.delete_old_segments()
    assert snapshot_offsets(log.directory) == [log.log_start_offset]
    assert send(log, log.log_end_offset).first_offset == log.log_start_offset


def test_snapshots_older_than_recovery_needs_are_pruned_after_the_checkpoint(tmp_path):
    manager = LogManager([tmp_path], CONFIG)
    log = manager.get_or_create("t", 0)
    while len(log.segments) < 6:
        send(log, log.log_end_offset)
    assert len(snapshot_offsets(log.directory)) == 5
    log.flush()
    manager.checkpoint_recovery_points()
    assert snapshot_offsets(log.directory) == [log.segments[-2].base_offset,
                                               log.segments[-1].base_offset,
                                               log.log_end_offset]
    manager.close()


def test_a_restart_keeps_producers_whose_batches_retention_deleted(tmp_path):
    log = open_log(tmp_path / "t-0", config=LogConfig(segment_bytes=600, retention_bytes=0))
    send(log, 0, epoch=3)
    while len(log.segments) < 3:
        send(log, log.log_end_offset, pid=8)
    log.delete_old_segments()
    assert log.log_start_offset > 0
    log.close()
    again = open_log(log.directory, log.recovery_point,
                     LogConfig(segment_bytes=600, retention_bytes=0))
    assert again.producer_state.get(PID).epoch == 3, "known from the snapshot only"
    with pytest.raises(InvalidProducerEpochError):
        send(again, 2, epoch=2)
    assert send(again, 2, epoch=3).first_offset == again.log_end_offset - 2
