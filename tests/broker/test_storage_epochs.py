"""Leader-epoch truncation between two real logs (KIP-101 and KIP-279 scenarios), done the
way a follower does it with the storage API: OffsetForLeaderEpoch, truncate_to, fetch."""

from __future__ import annotations

from pathlib import Path

from broker.storage import LogConfig, PartitionLog
from broker.storage.epoch_cache import LeaderEpochCache
from tests.support.batches import decode, make_batch


def open_log(tmp_path: Path, name: str) -> PartitionLog:
    return PartitionLog.open(tmp_path / f"{name}-0", LogConfig(segment_bytes=300))


def produce(log: PartitionLog, epoch: int, *values: bytes) -> None:
    for value in values:
        log.append_as_leader(make_batch([value]), epoch)


def replicate(follower: PartitionLog, leader: PartitionLog) -> None:
    """Truncate by leader epoch as Kafka's fetcher does (KIP-279: repeat until the follower
    knows the epoch the leader answers with), then fetch to the leader's end."""
    while follower.latest_epoch is not None:
        leader_epoch, leader_end = leader.end_offset_for_epoch(follower.latest_epoch)
        assert leader_epoch != -1
        own_epoch, own_end = follower.end_offset_for_epoch(leader_epoch)
        if own_epoch == leader_epoch:
            follower.truncate_to(min(leader_end, follower.log_end_offset))
            break
        follower.truncate_to(min(own_end, follower.log_end_offset))
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(leader.read(follower.log_end_offset, 1 << 20))


def test_kip101_divergent_logs_converge(tmp_path):
    a, b = open_log(tmp_path, "a"), open_log(tmp_path, "b")
    produce(a, 1, b"m0")
    replicate(b, a)
    produce(a, 1, b"m1")                 # never replicated; A dies
    b.assign_epoch_start_offset(2)       # B leads epoch 2
    produce(b, 2, b"m2")
    assert b.end_offset_for_epoch(1) == (1, 1)
    replicate(a, b)                      # A returns as follower
    assert decode(a.read(0, 1 << 20)) == decode(b.read(0, 1 << 20)) == [(0, b"m0"), (1, b"m2")]
    assert a.epoch_cache.entries() == b.epoch_cache.entries() == [(1, 0), (2, 1)]


def test_kip101_no_loss_when_the_follower_had_everything(tmp_path):
    a, b = open_log(tmp_path, "a"), open_log(tmp_path, "b")
    produce(a, 1, b"m0", b"m1")
    replicate(b, a)
    b.assign_epoch_start_offset(2)       # A restarts; B leads epoch 2 before A has the HW
    produce(b, 2, b"m2")
    replicate(a, b)
    assert [v for _, v in decode(a.read(0, 1 << 20))] == [b"m0", b"m1", b"m2"]


def test_kip279_follower_epoch_unknown_to_the_leader(tmp_path):
    a, b = open_log(tmp_path, "a"), open_log(tmp_path, "b")
    produce(a, 1, b"m0", b"m1")
    replicate(b, a)
    produce(a, 2, b"a2", b"a3")          # A led epoch 2 alone, then died
    b.assign_epoch_start_offset(3)       # B leads epoch 3 from offset 2
    produce(b, 3, b"b2", b"b3", b"b4")
    assert b.end_offset_for_epoch(2) == (1, 2), "epoch 2 is unknown to B: the epoch below"
    replicate(a, b)
    assert decode(a.read(0, 1 << 20)) == decode(b.read(0, 1 << 20))
    assert a.epoch_cache.entries() == [(1, 0), (3, 2)]


def test_kip279_several_rounds_of_divergence(tmp_path):
    a, b = open_log(tmp_path, "a"), open_log(tmp_path, "b")
    produce(a, 1, b"x0", b"x1")
    replicate(b, a)
    produce(a, 2, b"a2")
    produce(a, 4, b"a3", b"a4")          # A's epochs 2 and 4, B never saw them
    b.assign_epoch_start_offset(3)
    produce(b, 3, b"b2", b"b3")
    b.assign_epoch_start_offset(5)
    produce(b, 5, b"b4")
    replicate(a, b)
    assert decode(a.read(0, 1 << 20)) == decode(b.read(0, 1 << 20))
    assert [v for _, v in decode(a.read(0, 1 << 20))] == [b"x0", b"x1", b"b2", b"b3", b"b4"]


def test_epoch_cache_assign_and_truncation_rules(tmp_path):
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    cache.assign(1, 0)
    cache.assign(1, 5)
    assert cache.entries() == [(1, 0)], "a repeat of the latest epoch is ignored"
    cache.assign(3, 10)
    cache.assign(2, 7)
    assert cache.entries() == [(1, 0), (2, 7)], "a lower epoch drops the newer entries"
    cache.assign(4, 20)
    cache.truncate_from_start(9)
    assert cache.entries() == [(2, 9), (4, 20)]
    cache.truncate_from_start(20)
    assert cache.entries() == [(4, 20)]
    cache.truncate_from_end(20)
    assert cache.entries() == []
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n0\n"
