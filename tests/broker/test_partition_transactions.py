"""Transactions on a partition replica (real storage, no network): markers and their fencing,
the LSO moving with the HW, read_committed fetches and their aborted transactions, followers
applying the same state, dedup across failover and restart, and the two seeded defects."""

from __future__ import annotations

import asyncio
import json

import pytest
from kafka.record import MemoryRecords

from broker.errors import BrokerError, ErrorCode
from broker.event_log import EventLog
from broker.replica.partition import Partition
from broker.replica.purgatory import wait_any
from broker.storage import LogConfig, PartitionLog
from tests.support.batches import batch

CONFIG = LogConfig(segment_bytes=800, index_interval_bytes=100)


def noop_isr_writer(partition: Partition, isr: frozenset[int]) -> None:
    """ISR changes are not under test here."""


def replica(directory, broker_id: int = 1, **knobs) -> Partition:
    log = PartitionLog.open(directory, CONFIG)
    return Partition("t", 0, log, broker_id, 0, noop_isr_writer, **knobs)


def leader(directory, isr=(1, 2), **knobs) -> Partition:
    partition = replica(directory, **knobs)
    partition.make_leader(3, isr, (1, 2), 0, 1)
    return partition


def send(partition: Partition, pid: int, count: int = 2, epoch: int = 0,
         sequence: int = -1, transactional: bool = True):
    return partition.append_as_leader(batch(count, pid, epoch, sequence, transactional), 1)


def replicate(source: Partition, follower: Partition) -> None:
    """One follower fetch: the leader learns the follower's LEO (HW), the follower appends."""
    source.update_follower(follower.broker_id, follower.log_end_offset)
    records = source.read(follower.log_end_offset, 1 << 20, follower.broker_id)
    follower.append_as_follower(records, source.high_watermark)
    source.update_follower(follower.broker_id, follower.log_end_offset)


def offsets(records: bytes) -> list[int]:
    """Offsets of the data records (control batches left out)."""
    out = []
    data = MemoryRecords(records)
    while data.has_next():
        decoded = data.next_batch()
        if not decoded.is_control_batch:
            out.extend(record.offset for record in decoded)
    return out


def error_of(call) -> ErrorCode:
    with pytest.raises(BrokerError) as error:
        call()
    return error.value.code


def test_markers_are_written_by_the_leader_only_and_fenced(tmp_path):
    partition = leader(tmp_path / "t-0")
    send(partition, 1, epoch=4)
    partition.append_txn_marker(1, 4, True, 7)
    assert error_of(lambda: partition.append_txn_marker(1, 3, False, 7)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    assert error_of(lambda: partition.append_txn_marker(1, 4, False, 6)) == \
        ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert error_of(lambda: send(partition, 1, epoch=3, sequence=0)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    written = partition.append_txn_marker(2, 0, False, 1)  # no open transaction: harmless
    assert written.base_offset == written.last_offset == partition.log_end_offset - 1
    partition.make_follower(2, 4, (1, 2), 1, 1)
    assert error_of(lambda: partition.append_txn_marker(1, 4, True, 7)) == \
        ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_marker_needs_min_insync_replicas_as_an_acks_all_produce(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", CONFIG)
    partition = Partition("t", 0, log, 1, 0, noop_isr_writer, 2)
    partition.make_leader(1, (1,), (1, 2), 0, 1)
    assert error_of(lambda: partition.append_txn_marker(1, 0, True, 0)) == \
        ErrorCode.NOT_ENOUGH_REPLICAS


def test_lso_moves_with_the_high_watermark_and_read_committed_stops_there(tmp_path):
    source = leader(tmp_path / "leader")
    follower = replica(tmp_path / "follower", broker_id=2)
    follower.make_follower(1, 3, (1, 2), 0, 1)
    source.append_as_leader(batch(2), 1)  # plain records 0-1
    send(source, 1)  # 2-3, open
    replicate(source, follower)
    assert (source.high_watermark, source.last_stable_offset) == (4, 2)
    committed = source.fetch(0, 1 << 20, -1, read_committed=True)
    assert offsets(committed.records) == [0, 1] and committed.aborted_transactions == []
    assert (committed.high_watermark, committed.last_stable_offset) == (4, 2)
    uncommitted = source.fetch(0, 1 << 20, -1)
    assert offsets(uncommitted.records) == [0, 1, 2, 3]
    assert uncommitted.aborted_transactions is None and uncommitted.last_stable_offset == 2
    marker = source.append_txn_marker(1, 0, True, 0).base_offset
    assert source.last_stable_offset == 2, "the marker is not below the HW yet"
    replicate(source, follower)
    assert source.high_watermark == marker + 1 == source.last_stable_offset
    assert offsets(source.fetch(0, 1 << 20, -1, read_committed=True).records) == [0, 1, 2, 3]
    assert follower.last_stable_offset == 2, "the follower learns the HW a fetch later"
    replicate(source, follower)
    assert follower.last_stable_offset == marker + 1
    assert source.fetch(4, 1 << 20, 2).records, "followers read beyond the LSO"


def test_read_committed_gets_the_aborted_transactions_of_what_it_read(tmp_path):
    partition = leader(tmp_path / "t-0", isr=(1,))
    send(partition, 1)  # 0-1
    send(partition, 2)  # 2-3
    abort_1 = partition.append_txn_marker(1, 0, False, 0).base_offset  # 4
    partition.append_as_leader(batch(2), 1)  # 5-6
    partition.append_txn_marker(2, 0, True, 0)  # 7
    send(partition, 1)  # 8-9
    abort_2 = partition.append_txn_marker(1, 0, False, 0).base_offset  # 10
    assert partition.high_watermark == 11 == partition.last_stable_offset
    fetched = partition.fetch(0, 1 << 20, -1, read_committed=True)
    assert fetched.aborted_transactions == [(1, 0), (1, 8)]
    assert partition.fetch(abort_1 + 1, 1 << 20, -1, True).aborted_transactions == [(1, 8)]
    assert partition.fetch(abort_2 + 1, 1 << 20, -1, True).aborted_transactions == []
    first_batch_only = partition.fetch(0, 1, -1, read_committed=True)
    assert offsets(first_batch_only.records) == [0, 1]
    assert first_batch_only.aborted_transactions == [(1, 0)]
    assert partition.log.collect_aborted_transactions(5, 8) == []


def test_coordinator_batches_without_sequence_open_a_transaction(tmp_path):
    partition = leader(tmp_path / "t-0", isr=(1,))
    partition.append_as_leader(batch(1), 1)
    offset = send(partition, 42, count=1, epoch=2).base_offset  # as TxnOffsetCommit writes
    assert partition.last_stable_offset == offset
    assert partition.producers.get(42).txn_first_offset == offset
    partition.append_txn_marker(42, 2, True, 0)
    assert partition.last_stable_offset == partition.log_end_offset


def test_followers_apply_the_same_transactions_and_serve_them_after_failover(tmp_path):
    source = leader(tmp_path / "leader")
    follower = replica(tmp_path / "follower", broker_id=2)
    follower.make_follower(1, 3, (1, 2), 0, 1)
    send(source, 1)
    send(source, 2, sequence=0, transactional=False)
    source.append_txn_marker(1, 0, False, 3)
    send(source, 3)
    replicate(source, follower)
    replicate(source, follower)
    assert follower.log_end_offset == source.log_end_offset
    assert follower.producers.get(1).coordinator_epoch == 3
    follower.make_leader(4, (2,), (1, 2), 1, 1)
    assert follower.last_stable_offset == source.last_stable_offset == 5
    mine = follower.fetch(0, 1 << 20, -1, read_committed=True)
    theirs = source.fetch(0, 1 << 20, -1, read_committed=True)
    assert mine.records == theirs.records and mine.aborted_transactions == [(1, 0)]
    assert error_of(lambda: follower.append_txn_marker(1, 0, False, 2)) == \
        ErrorCode.TRANSACTION_COORDINATOR_FENCED
    retry = send(follower, 2, sequence=0, transactional=False)
    assert retry.base_offset == 2 and follower.log_end_offset == source.log_end_offset


def test_a_retry_is_recognised_after_failover_and_after_a_restart(tmp_path):
    source = leader(tmp_path / "leader")
    follower = replica(tmp_path / "follower", broker_id=2)
    follower.make_follower(1, 3, (1, 2), 0, 1)
    sent = send(source, 9, count=3, sequence=0, transactional=False)
    replicate(source, follower)
    follower.make_leader(4, (2,), (1, 2), 1, 1)
    retry = send(follower, 9, count=3, sequence=0, transactional=False)
    assert (retry.base_offset, retry.last_offset) == (sent.base_offset, sent.last_offset)
    follower.log.close()
    restarted = leader(tmp_path / "follower", isr=(1,))
    retry = send(restarted, 9, count=3, sequence=0, transactional=False)
    assert (retry.base_offset, retry.last_offset) == (sent.base_offset, sent.last_offset)
    assert restarted.log_end_offset == 3


def test_long_poll_wakes_when_the_lso_moves(tmp_path):
    async def scenario():
        source = leader(tmp_path / "t-0")
        send(source, 1)
        source.append_txn_marker(1, 0, True, 0)
        loop = asyncio.get_running_loop()
        started = loop.time()
        waiting = loop.create_task(wait_any([source.fetch_waiters], 5.0))
        await asyncio.sleep(0.05)
        source.update_follower(2, source.log_end_offset)
        await waiting
        assert loop.time() - started < 1.0
        assert source.last_stable_offset == source.log_end_offset

    asyncio.run(scenario())


def test_skip_epoch_fencing_accepts_older_epochs_and_keeps_the_state_sane(tmp_path):
    partition = leader(tmp_path / "t-0", isr=(1,), skip_epoch_fencing=True)
    send(partition, 1, epoch=5, sequence=0)
    zombie = send(partition, 1, epoch=4, sequence=7)
    assert zombie.base_offset == 2, "INVALID_PRODUCER_EPOCH without the defect"
    assert send(partition, 1, epoch=4, sequence=7).base_offset == 2, "deduplicated"
    assert partition.producers.get(1).epoch == 5
    assert send(partition, 1, epoch=5, sequence=2).base_offset == 4
    partition.append_txn_marker(1, 4, False, 0)
    assert partition.last_stable_offset == partition.log_end_offset


def test_read_uncommitted_leak_serves_read_committed_up_to_the_high_watermark(tmp_path):
    partition = leader(tmp_path / "t-0", isr=(1,), read_uncommitted_leak=True)
    send(partition, 1)
    partition.append_txn_marker(1, 0, False, 0)
    send(partition, 2)
    fetched = partition.fetch(0, 1 << 20, -1, read_committed=True)
    assert offsets(fetched.records) == [0, 1, 3, 4]
    assert fetched.aborted_transactions == []
    assert fetched.last_stable_offset == fetched.high_watermark == 5
    assert partition.last_stable_offset == 3


def test_a_leaking_fetch_past_the_stable_offset_is_written_to_the_event_log(tmp_path):
    events = EventLog(tmp_path / "events.jsonl", broker_id=1)
    partition = leader(tmp_path / "t-0", isr=(1,), read_uncommitted_leak=True, events=events)
    send(partition, 1)
    partition.append_txn_marker(1, 0, True, 0)
    partition.fetch(0, 1 << 20, -1, read_committed=True)
    assert not (tmp_path / "events.jsonl").exists()
    send(partition, 2)
    partition.fetch(3, 1 << 20, -1, read_committed=True)
    [event] = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert event["event"] == "read-uncommitted-leaked"
    assert (event["from_offset"], event["to_offset"], event["last_stable_offset"]) == (3, 5, 3)
