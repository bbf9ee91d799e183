"""Flushing (flush.messages, flush.ms, the recovery-point checkpoint) and the simulated power
loss of kchaos.debug.lose-unflushed-on-crash: a start after an unclean shutdown cuts each
log back to what was fsynced."""

from __future__ import annotations

import os

from broker.config import BrokerConfig
from broker.storage import LogConfig, LogManager, PartitionLog
from broker.storage.checkpoints import read_offset_checkpoint
from broker.storage.manager import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT
from broker.storage.power_loss import lose_unflushed
from tests.support.batches import decode, make_batch, values_of

KEY = ("t", 0)


def append(log: PartitionLog, batches: int, epoch: int = 1, tag: str = "v") -> None:
    for i in range(batches):
        log.append_as_leader(make_batch(values_of(2, tag=f"{tag}{log.log_end_offset}-{i}-")),
                             epoch)


def crash(manager: LogManager) -> None:
    """What SIGKILL leaves: files as written, no clean-shutdown marker, dir locks gone."""
    for log in manager.logs.values():
        for segment in log.segments:
            segment.close()
    for fd in manager._lock_fds:
        os.close(fd)
    manager._lock_fds.clear()


def manager_at(path, knob: bool, **config) -> LogManager:
    manager = LogManager([path], LogConfig(**config), lose_unflushed_on_crash=knob)
    manager.load()
    return manager


def test_flush_messages_moves_the_recovery_point_every_n_records(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(flush_messages=4))
    append(log, 1)
    assert log.recovery_point == 0
    append(log, 1)
    assert log.recovery_point == 4
    append(log, 1)
    assert log.recovery_point == 4


def test_flush_ms_flushes_only_when_due_and_dirty(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(flush_ms=1000))
    append(log, 2)
    start = log.last_flush_ms
    assert not log.flush_if_due(start + 999)
    assert log.flush_if_due(start + 1000)
    assert log.recovery_point == log.log_end_offset == 4
    assert not log.flush_if_due(log.last_flush_ms + 5000), "nothing unflushed"
    never = PartitionLog.open(tmp_path / "u-0", LogConfig())
    append(never, 1)
    assert not never.flush_if_due(never.last_flush_ms + 10**9)


def test_broker_flush_properties_follow_kafka_defaults():
    base = "broker.id=1\nlisteners=PLAINTEXT://:1,CONTROLLER://:2\nzookeeper.connect=z\n" \
           "log.dirs=/tmp/x\n"
    config = BrokerConfig.from_text(base)
    assert config.flush_ms is None and config.log_flush_interval_messages is None
    assert config.log_flush_offset_checkpoint_interval_ms == 60000
    assert not config.debug_lose_unflushed_on_crash
    config = BrokerConfig.from_text(base + "log.flush.scheduler.interval.ms=500\n"
                                    "log.flush.interval.messages=3\n"
                                    "kchaos.debug.lose-unflushed-on-crash=true\n")
    assert config.flush_ms == 500, "log.flush.interval.ms defaults to the scheduler interval"
    assert config.log_flush_interval_messages == 3 and config.debug_lose_unflushed_on_crash
    assert BrokerConfig.from_text(base + "log.flush.scheduler.interval.ms=500\n"
                                  "log.flush.interval.ms=2000\n").flush_ms == 2000


def test_power_loss_cuts_each_log_back_to_its_recovery_point(tmp_path):
    manager = manager_at(tmp_path, knob=True)
    log = manager.get_or_create(*KEY)
    append(log, 3)
    log.flush()
    flushed = log.read(0, 1 << 20)
    assert read_offset_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT) == {KEY: 6}, \
        "the knob checkpoints the recovery point at every flush"
    append(log, 2, epoch=2)
    size = sum(s.size for s in log.segments)
    manager.get_or_create("u", 0).append_as_leader(make_batch(values_of(1)), 1)
    crash(manager)

    again = manager_at(tmp_path, knob=True)
    cut = again.get(*KEY)
    assert cut.log_end_offset == 6
    assert cut.read(0, 1 << 20) == flushed
    assert cut.epoch_cache.entries() == [(1, 0)], "epoch 2 began beyond the cut"
    assert again.get("u", 0).log_end_offset == 0, "never flushed: all lost"
    lost = dict(again.lost_tails)
    assert (lost[KEY].from_offset, lost[KEY].to_offset) == (10, 6)
    assert lost[KEY].bytes == size - len(flushed)
    info = cut.append_as_leader(make_batch([b"after"]), 3)
    assert info.first_offset == 6 and decode(cut.read(6, 100)) == [(6, b"after")]
    again.close()


def test_without_the_knob_or_after_a_clean_shutdown_nothing_is_lost(tmp_path):
    manager = manager_at(tmp_path / "a", knob=False)
    append(manager.get_or_create(*KEY), 3)
    crash(manager)
    again = manager_at(tmp_path / "a", knob=True)
    assert again.get(*KEY).log_end_offset == 0, "the knob now: the checkpoint says 0"

    plain = manager_at(tmp_path / "b", knob=False)
    append(plain.get_or_create(*KEY), 3)
    crash(plain)
    assert manager_at(tmp_path / "b", knob=False).get(*KEY).log_end_offset == 6

    clean = manager_at(tmp_path / "c", knob=True)
    append(clean.get_or_create(*KEY), 3)
    clean.close()
    assert (tmp_path / "c" / CLEAN_SHUTDOWN_FILE).exists()
    loaded = manager_at(tmp_path / "c", knob=True)
    assert loaded.get(*KEY).log_end_offset == 6 and not loaded.lost_tails
    assert not (tmp_path / "c" / CLEAN_SHUTDOWN_FILE).exists(), "a later kill is unclean"


def test_segments_after_the_checkpointed_recovery_point_go_whole(tmp_path):
    manager = manager_at(tmp_path, knob=False, segment_bytes=400)  # a lagging checkpoint
    log = manager.get_or_create(*KEY)
    append(log, 5)
    manager.flush_all()
    manager.checkpoint_recovery_points()
    point, keep, first_segments = log.recovery_point, log.read(0, 1 << 20), len(log.segments)
    append(log, 12)
    assert len(log.segments) > first_segments + 1
    crash(manager)
    again = manager_at(tmp_path, knob=True, segment_bytes=400)
    assert again.get(*KEY).log_end_offset == point
    assert again.get(*KEY).read(0, 1 << 20) == keep
    assert len(list((tmp_path / "t-0").glob("*.log"))) <= first_segments
    assert dict(again.lost_tails)[KEY].from_offset == 34


def test_first_segment_above_the_recovery_point_keeps_the_log_start(tmp_path):
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, LogConfig())
    log.truncate_fully_and_start_at(50)
    append(log, 2)
    for segment in log.segments:
        segment.close()
    tail = lose_unflushed(directory, 50)
    assert (tail.from_offset, tail.to_offset) == (54, 50)
    reopened = PartitionLog.open(directory, LogConfig(), 50)
    assert reopened.log_start_offset == reopened.log_end_offset == 50
    assert lose_unflushed(directory, 50) is None, "idempotent"
