"""LogManager: partition directories, checkpoints in Kafka's text format, dir locks."""

from __future__ import annotations

import os

import pytest

from broker.storage import CheckpointError, LogConfig, LogDirInUseError, LogManager
from broker.storage.checkpoints import read_offset_checkpoint, write_offset_checkpoint
from broker.storage.manager import parse_partition_dir
from tests.support.batches import decode, make_batch, values_of


def test_partition_dir_names():
    assert parse_partition_dir("my-topic-12") == ("my-topic", 12)
    assert parse_partition_dir("__consumer_offsets-0") == ("__consumer_offsets", 0)
    assert parse_partition_dir("topic") is None
    assert parse_partition_dir("-3") is None
    assert parse_partition_dir("t-0.abc-delete") is None


def test_create_load_and_checkpoint(tmp_path):
    manager = LogManager([tmp_path / "d"], LogConfig())
    manager.load()
    log = manager.get_or_create("events", 2)
    assert manager.get_or_create("events", 2) is log
    assert log.directory == tmp_path / "d" / "events-2"
    log.append_as_leader(make_batch(values_of(4)), 1)
    manager.get_or_create("other.topic", 0).append_as_leader(make_batch(values_of(1)), 1)
    manager.checkpoint_high_watermarks({("events", 2): 3, ("other.topic", 0): 1})
    assert (tmp_path / "d" / "replication-offset-checkpoint").read_text() == (
        "0\n2\nevents 2 3\nother.topic 0 1\n")
    manager.close()
    assert (tmp_path / "d" / "recovery-point-offset-checkpoint").read_text() == (
        "0\n2\nevents 2 4\nother.topic 0 1\n")

    again = LogManager([tmp_path / "d"], LogConfig())
    again.load()
    assert again.partitions() == [("events", 2), ("other.topic", 0)]
    assert again.high_watermarks() == {("events", 2): 3, ("other.topic", 0): 1}
    events = again.get("events", 2)
    assert events is not None and events.log_end_offset == 4
    assert not any(s.recovered for s in events.segments)
    assert decode(events.read(0, 1000))[-1] == (3, b"v3")
    assert again.get("missing", 0) is None
    again.close()


def test_unclean_shutdown_recovers_from_checkpointed_recovery_points(tmp_path):
    manager = LogManager([tmp_path / "d"], LogConfig(segment_bytes=300))
    log = manager.get_or_create("t", 0)
    for _ in range(6):
        log.append_as_leader(make_batch(values_of(3)), 1)
    manager.flush_all()
    manager.checkpoint_recovery_points()
    log.append_as_leader(make_batch(values_of(3)), 1)
    last = sorted(log.directory.glob("*.log"))[-1]
    with open(last, "ab") as f:
        f.write(b"\x00" * 30)  # a torn write after the last flush
    for segment in log.segments:
        segment.close()
    for fd in manager._lock_fds:  # the process died: its locks went with it
        os.close(fd)
    again = LogManager([tmp_path / "d"], LogConfig(segment_bytes=300))
    again.load()
    recovered = again.get("t", 0)
    assert recovered.log_end_offset == 21
    assert recovered.active_segment.recovered
    assert len(decode(recovered.read(0, 1 << 20))) == 21
    again.close()


def test_delete_removes_the_directory(tmp_path):
    manager = LogManager([tmp_path / "d"], LogConfig())
    manager.get_or_create("gone", 0).append_as_leader(make_batch(values_of(1)), 0)
    (tmp_path / "d" / "old-0.0123-delete").mkdir()
    manager.delete("gone", 0)
    manager.delete("never-existed", 0)
    assert manager.get("gone", 0) is None
    assert not (tmp_path / "d" / "gone-0").exists()
    manager.close()
    again = LogManager([tmp_path / "d"], LogConfig())
    again.load()
    assert again.partitions() == []
    assert not (tmp_path / "d" / "old-0.0123-delete").exists()
    assert (tmp_path / "d" / "recovery-point-offset-checkpoint").read_text() == "0\n0\n"
    again.close()


def test_partitions_spread_over_log_dirs(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, LogConfig())
    for p in range(4):
        manager.get_or_create("t", p).append_as_leader(make_batch(values_of(1)), 0)
    homes = [manager.get("t", p).directory.parent for p in range(4)]
    assert sorted(homes) == sorted(dirs * 2)
    manager.checkpoint_high_watermarks({("t", p): 1 for p in range(4)} | {("new", 0): 0})
    per_dir = [read_offset_checkpoint(d / "replication-offset-checkpoint") for d in dirs]
    assert sorted(len(entries) for entries in per_dir) == [2, 3]
    assert ("new", 0) in per_dir[0]
    manager.close()
    again = LogManager(dirs, LogConfig())
    again.load()
    assert again.partitions() == [("t", p) for p in range(4)]
    assert again.high_watermarks()[("t", 3)] == 1
    again.close()


def test_a_log_dir_is_locked(tmp_path):
    manager = LogManager([tmp_path / "d"], LogConfig())
    with pytest.raises(LogDirInUseError, match="in use"):
        LogManager([tmp_path / "d"], LogConfig())
    manager.close()
    LogManager([tmp_path / "d"], LogConfig()).close()


def test_checkpoint_round_trip_and_malformed_files(tmp_path):
    path = tmp_path / "cp"
    assert read_offset_checkpoint(path) == {}
    write_offset_checkpoint(path, {("b", 1): 7, ("a", 0): 0})
    assert path.read_text() == "0\n2\na 0 0\nb 1 7\n"
    assert read_offset_checkpoint(path) == {("a", 0): 0, ("b", 1): 7}
    assert not (tmp_path / "cp.tmp").exists()
    for text, where in [("1\n0\n", "cp:1"), ("0\nx\n", "cp:2"), ("0\n2\na 0 1\n", "count"),
                        ("0\n1\na 0\n", "cp:3"), ("0\n1\na zero 1\n", "cp:3"), ("", "cp:1")]:
        path.write_text(text)
        with pytest.raises(CheckpointError, match=where):
            read_offset_checkpoint(path)


def test_illegal_topic_names_are_refused(tmp_path):
    manager = LogManager([tmp_path / "d"], LogConfig())
    for topic, partition in [("../escape", 0), ("a/b", 0), ("", 0), ("..", 0), ("t", -1),
                             ("x" * 250, 0)]:
        with pytest.raises(ValueError, match="illegal"):
            manager.get_or_create(topic, partition)
    assert list((tmp_path / "d").iterdir()) == [tmp_path / "d" / ".lock"]
    manager.close()
