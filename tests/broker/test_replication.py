"""Replication logic of one partition on real storage (no network): HW, ISR, acks=-1
purgatory, min.insync.replicas, idempotent dedup, leader-epoch fencing and the follower's
truncation offset (KIP-101/KIP-279)."""

from __future__ import annotations

import asyncio

import pytest

from broker.errors import BrokerError, ErrorCode
from broker.replica.fetcher import ReplicaFetcher
from broker.replica.partition import Partition
from broker.storage import LogConfig, PartitionLog
from tests.support.batches import batch


class IsrWrites:
    """Records proposed ISR changes; `succeed` applies them as the manager would."""

    def __init__(self) -> None:
        self.proposed: list[frozenset[int]] = []

    def __call__(self, partition: Partition, isr: frozenset[int]) -> None:
        self.proposed.append(isr)

    def succeed(self, partition: Partition) -> None:
        partition.isr_write_done(self.proposed[-1], partition.zk_version + 1)


def leader(tmp_path, isr=(1, 2, 3), min_isr: int = 1) -> tuple[Partition, IsrWrites]:
    writes = IsrWrites()
    log = PartitionLog.open(tmp_path / "t-0", LogConfig())
    partition = Partition("t", 0, log, 1, 0, writes, min_isr)
    partition.make_leader(5, isr, (1, 2, 3), 0, 1)
    return partition, writes


def test_high_watermark_is_min_leo_over_isr_and_completes_acks_all(tmp_path):
    async def scenario():
        partition, _ = leader(tmp_path)
        result = partition.append_as_leader(batch(3), -1)
        assert (result.base_offset, result.last_offset) == (0, 2)
        waiter = partition.delayed_produce.add(result.last_offset + 1)
        partition.update_follower(2, 3)
        assert partition.high_watermark == 0 and not waiter.done()
        partition.update_follower(3, 2)
        assert partition.high_watermark == 2 and not waiter.done()
        partition.update_follower(3, 3)
        assert partition.high_watermark == 3
        assert waiter.result() == ErrorCode.NONE
        assert partition.read(0, 1 << 20, replica_id=-1)
        assert partition.read(3, 1 << 20, replica_id=-1) == b""

    asyncio.run(scenario())


def test_a_high_watermark_advance_wakes_parked_consumer_fetches_but_not_follower_fetches(
        tmp_path):
    """As Kafka's DelayedFetch: a follower's parked fetch completes on new data only, so a
    follower learns a higher high watermark with its next fetch (KIP-101's window)."""
    async def scenario():
        partition, _ = leader(tmp_path)
        partition.append_as_leader(batch(1), -1)
        partition.update_follower(2, 1)
        consumer, follower = asyncio.Future(), asyncio.Future()
        partition.fetch_waiters.watch(consumer)
        partition.replica_fetch_waiters.watch(follower)
        partition.update_follower(3, 1)
        assert partition.high_watermark == 1
        assert consumer.done() and not follower.done()
        partition.append_as_leader(batch(1), -1)
        assert follower.done()

    asyncio.run(scenario())


def test_min_insync_replicas_before_and_after_append(tmp_path):
    async def scenario():
        partition, writes = leader(tmp_path, isr=(1,), min_isr=2)
        with pytest.raises(BrokerError) as error:
            partition.append_as_leader(batch(), -1)
        assert error.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert partition.append_as_leader(batch(), 1).base_offset == 0  # acks=1 is fine

        partition.make_leader(6, (1, 2), (1, 2, 3), 1, 1)
        result = partition.append_as_leader(batch(), -1)
        waiter = partition.delayed_produce.add(result.last_offset + 1)
        partition.followers[2].last_caught_up_ms -= 10_000
        partition.maybe_shrink_isr(1000)
        assert writes.proposed[-1] == frozenset({1})
        writes.succeed(partition)  # ISR {1}: the HW moves, but below min.insync.replicas
        assert waiter.result() == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND

    asyncio.run(scenario())


def test_isr_shrinks_after_lag_and_expands_when_caught_up(tmp_path):
    async def scenario():
        partition, writes = leader(tmp_path, isr=(1, 2, 3))
        partition.append_as_leader(batch(), 1)
        partition.update_follower(2, 3)
        partition.update_follower(3, 0)
        partition.followers[3].last_caught_up_ms -= 5000
        partition.maybe_shrink_isr(3000)
        assert writes.proposed == [frozenset({1, 2})]
        assert partition.high_watermark == 0  # while in flight the old ISR still counts
        writes.succeed(partition)
        assert partition.isr == {1, 2} and partition.high_watermark == 3
        partition.update_follower(3, 3)
        assert writes.proposed[-1] == frozenset({1, 2, 3})
        writes.succeed(partition)
        assert partition.isr == {1, 2, 3}

    asyncio.run(scenario())


def test_a_follower_dropped_while_the_log_stood_still_rejoins_at_the_same_offset(tmp_path):
    async def scenario():
        partition, writes = leader(tmp_path, isr=(1, 2, 3), min_isr=2)
        partition.append_as_leader(batch(), -1)
        partition.update_follower(2, 3)
        partition.update_follower(3, 3)
        for replica in (2, 3):
            partition.followers[replica].last_caught_up_ms -= 5000
        partition.maybe_shrink_isr(3000)
        writes.succeed(partition)
        assert partition.isr == {1}
        with pytest.raises(BrokerError):
            partition.append_as_leader(batch(), -1)  # below min.insync.replicas: no new data
        partition.update_follower(2, 3)
        assert writes.proposed[-1] == frozenset({1, 2})
        writes.succeed(partition)
        assert partition.isr == {1, 2}

    asyncio.run(scenario())


def test_failed_isr_write_keeps_the_old_isr(tmp_path):
    async def scenario():
        partition, writes = leader(tmp_path, isr=(1, 2))
        partition.followers[2].last_caught_up_ms -= 5000
        partition.maybe_shrink_isr(1000)
        partition.isr_write_done(writes.proposed[-1], None)
        assert partition.isr == {1, 2} and partition.pending_isr is None

    asyncio.run(scenario())


def test_idempotent_producer_dedup_and_sequence_gap(tmp_path):
    async def scenario():
        partition, _ = leader(tmp_path, isr=(1,))
        first = partition.append_as_leader(batch(3, producer_id=7, sequence=0), 1)
        second = partition.append_as_leader(batch(2, producer_id=7, sequence=3), 1)
        retry = partition.append_as_leader(batch(3, producer_id=7, sequence=0), 1)
        assert (retry.base_offset, retry.last_offset) == (first.base_offset, first.last_offset)
        assert partition.log_end_offset == 5 and second.base_offset == 3
        with pytest.raises(BrokerError) as error:
            partition.append_as_leader(batch(1, producer_id=7, sequence=9), 1)
        assert error.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        bumped = partition.append_as_leader(batch(1, producer_id=7, epoch=1, sequence=0), 1)
        assert bumped.base_offset == 5
        with pytest.raises(BrokerError) as error:
            partition.append_as_leader(batch(1, producer_id=7, epoch=0, sequence=5), 1)
        assert error.value.code == ErrorCode.INVALID_PRODUCER_EPOCH

    asyncio.run(scenario())


def test_follower_keeps_producer_state_for_failover(tmp_path):
    async def scenario():
        source, _ = leader(tmp_path / "leader", isr=(1,))
        source.append_as_leader(batch(3, producer_id=9, sequence=0), 1)
        log = PartitionLog.open(tmp_path / "follower" / "t-0", LogConfig())
        follower = Partition("t", 0, log, 2, 0, IsrWrites())
        follower.make_follower(1, 5, (1, 2, 3), 0, 1)
        follower.append_as_follower(source.read(0, 1 << 20, replica_id=2), 3)
        assert follower.log_end_offset == 3 and follower.high_watermark == 3
        follower.make_leader(6, (2,), (1, 2, 3), 1, 1)
        retry = follower.append_as_leader(batch(3, producer_id=9, sequence=0), 1)
        assert (retry.base_offset, retry.last_offset) == (0, 2)
        assert follower.log_end_offset == 3

    asyncio.run(scenario())


def test_leader_epoch_fencing(tmp_path):
    partition, _ = leader(tmp_path)
    partition.require_leader(5)
    partition.require_leader(-1)
    for epoch, code in ((4, ErrorCode.FENCED_LEADER_EPOCH), (6, ErrorCode.UNKNOWN_LEADER_EPOCH)):
        with pytest.raises(BrokerError) as error:
            partition.require_leader(epoch)
        assert error.value.code == code
    partition.make_follower(2, 6, (1, 2, 3), 1, 1)
    with pytest.raises(BrokerError) as error:
        partition.require_leader(6)
    assert error.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_truncation_offset_follows_kip_279(tmp_path):
    """Follower log: epoch 1 at [0,3), epoch 2 at [3,6). The new leader never saw epoch 2."""
    async def scenario():
        log = PartitionLog.open(tmp_path / "t-0", LogConfig())
        follower = Partition("t", 0, log, 2, 0, IsrWrites())
        follower.make_leader(1, (2,), (1, 2), 0, 1)
        follower.append_as_leader(batch(3), 1)
        follower.make_leader(2, (2,), (1, 2), 0, 1)
        follower.append_as_leader(batch(3), 1)
        follower.make_follower(1, 3, (1, 2), 1, 1)
        assert log.latest_epoch == 2
        # leader answers: largest epoch <= 2 it knows is 1, ending at offset 4
        assert ReplicaFetcher._truncation_offset(follower, 2, 1, 4) == 3
        # leader knows epoch 2 and it ends at 5: keep up to 5
        assert ReplicaFetcher._truncation_offset(follower, 2, 2, 5) == 5
        # leader knows nothing: fall back to the high watermark
        assert ReplicaFetcher._truncation_offset(follower, 2, -1, -1) == follower.high_watermark

    asyncio.run(scenario())
