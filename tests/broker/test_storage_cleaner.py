"""Log compaction on real segment files: what a cleaning round keeps, drops and rewrites."""

from __future__ import annotations

import asyncio
import logging
import struct

import pytest
from crc32c import crc32c
from kafka.record import MemoryRecords
from kafka.record.memory_records import MemoryRecordsBuilder

from broker.replica.manager import ReplicaManager, ReplicaSettings
from broker.storage import (
    CleanerConfig,
    LogConfig,
    LogManager,
    PartitionLog,
    cleanup_policy,
    iter_batch_headers,
)
from broker.storage.cleaner import (
    clean_log,
    clean_log_async,
    install,
    plan_cleaning,
    write_cleaned,
)
from broker.storage.index import OffsetIndex
from tests.support.batches import BASE_TIME, GZIP

Item = tuple[bytes | None, bytes | None]
EAGER = CleanerConfig(min_cleanable_ratio=0.0)


def keyed_batch(items: list[Item], compression: int = 0, timestamp: int = BASE_TIME,
                producer: tuple[int, int, int] | None = None,
                transactional: bool = False) -> bytes:
    """One v2 batch of (key, value) records; a None value is a tombstone."""
    builder = MemoryRecordsBuilder(2, compression, 1 << 24)
    if producer is not None:
        builder.set_producer_state(*producer, transactional)
    for key, value in items:
        assert builder.append(timestamp, key, value) is not None
    builder.close()
    return bytes(builder.buffer())


def as_control(batch: bytes) -> bytes:
    """The batch with its control bit set (kafka-python builds no control batches)."""
    data = bytearray(batch)
    attributes = struct.unpack_from(">h", data, 21)[0] | 0x20
    struct.pack_into(">h", data, 21, attributes)
    struct.pack_into(">I", data, 17, crc32c(data[21:]))
    return bytes(data)


def open_log(tmp_path, **config) -> PartitionLog:
    return PartitionLog.open(tmp_path / "compacted-0", LogConfig(**config))


def put(log: PartitionLog, *items: Item, **options) -> int:
    """Append one batch; its first offset."""
    return log.append_as_leader(keyed_batch(list(items), **options), 0).first_offset


def content(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record, CRCs checked."""
    records = MemoryRecords(data)
    out = []
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        out.extend((r.offset, r.key, r.value) for r in batch)
    return out


def everything(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return content(log.read(log.log_start_offset, 1 << 26))


def seg_files(log: PartitionLog) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.directory.iterdir()) if p.is_file()}


def three_segments(log: PartitionLog) -> None:
    """seg 0: k1=a0 k2=b0 | k1=a1   seg 3: k3=c0 k2=b1   active seg 5: k1=a2."""
    put(log, (b"k1", b"a0"), (b"k2", b"b0"))
    put(log, (b"k1", b"a1"))
    log.roll()
    put(log, (b"k3", b"c0"), (b"k2", b"b1"))
    log.roll()
    put(log, (b"k1", b"a2"))


def test_latest_value_of_each_key_stays_at_its_offset_and_older_ones_go(tmp_path):
    log = open_log(tmp_path)
    three_segments(log)
    result = clean_log(log, config=EAGER)
    assert result is not None
    assert (result.segments_before, result.segments_after, result.end_offset) == (2, 1, 5)
    assert (result.records_before, result.records_after) == (5, 3)
    assert result.bytes_after < result.bytes_before
    assert everything(log) == [(2, b"k1", b"a1"), (3, b"k3", b"c0"), (4, b"k2", b"b1"),
                               (5, b"k1", b"a2")]
    assert log.log_end_offset == 6 and log.log_start_offset == 0
    assert [s.base_offset for s in log.segments] == [0, 5]
    assert not [p for p in log.directory.iterdir() if p.suffix in (".cleaned", ".swap")]


def test_nothing_dirty_means_no_round_and_the_ratio_is_honoured(tmp_path):
    log = open_log(tmp_path)
    three_segments(log)
    assert clean_log(log, config=CleanerConfig(min_cleanable_ratio=1.0)) is not None
    assert clean_log(log, config=EAGER) is None, "everything cleanable is clean"
    put(log, (b"k4", b"d0"))
    log.roll()
    assert clean_log(log, config=CleanerConfig(min_cleanable_ratio=0.9)) is None
    assert clean_log(log, config=CleanerConfig(min_cleanable_ratio=0.1)) is not None


def test_keyless_records_are_kept(tmp_path):
    log = open_log(tmp_path)
    put(log, (None, b"x0"), (b"k", b"v0"), (None, b"x1"))
    put(log, (b"k", b"v1"), (None, b"x2"))
    log.roll()
    put(log, (None, b"active"))
    clean_log(log, config=EAGER)
    assert everything(log) == [(0, None, b"x0"), (2, None, b"x1"), (3, b"k", b"v1"),
                               (4, None, b"x2"), (5, None, b"active")]


def test_tombstones_stay_for_delete_retention_ms_then_go(tmp_path):
    log = open_log(tmp_path)
    put(log, (b"gone", b"v"), (b"kept", b"v"))
    put(log, (b"gone", None))
    log.roll()
    put(log, (b"other", b"v"))
    config = CleanerConfig(delete_retention_ms=60_000, min_cleanable_ratio=0.0)
    clean_log(log, config=config, now_ms=BASE_TIME + 59_000)
    assert everything(log) == [(1, b"kept", b"v"), (2, b"gone", None), (3, b"other", b"v")]
    log.roll()
    clean_log(log, config=config, now_ms=BASE_TIME + 61_000)
    assert everything(log) == [(1, b"kept", b"v"), (3, b"other", b"v")]


def test_active_segment_and_segments_reaching_the_high_watermark_are_untouched(tmp_path):
    log = open_log(tmp_path)
    put(log, (b"k", b"v0"))
    put(log, (b"k", b"v1"))
    log.roll()
    put(log, (b"k", b"v2"))
    put(log, (b"k", b"v3"))
    log.roll()
    put(log, (b"k", b"v4"))
    put(log, (b"k", b"v5"))
    before = seg_files(log)
    assert clean_log(log, high_watermark=3, config=EAGER) is not None
    after = seg_files(log)
    assert after[f"{2:020d}.log"] == before[f"{2:020d}.log"], "holds offset 3, above the HW"
    assert after[f"{4:020d}.log"] == before[f"{4:020d}.log"], "the active segment"
    assert after[f"{0:020d}.log"] != before[f"{0:020d}.log"]
    assert everything(log) == [(1, b"k", b"v1"), (2, b"k", b"v2"), (3, b"k", b"v3"),
                               (4, b"k", b"v4"), (5, b"k", b"v5")]
    assert clean_log(log, high_watermark=1, config=EAGER) is None, "no segment wholly below"


def test_reads_from_any_offset_after_cleaning(tmp_path):
    log = open_log(tmp_path)
    three_segments(log)
    clean_log(log, config=EAGER)
    for offset in (0, 1):
        assert content(log.read(offset, 1))[0] == (2, b"k1", b"a1"), "the next surviving batch"
    assert content(log.read(3, 1)) == [(3, b"k3", b"c0"), (4, b"k2", b"b1")]
    assert content(log.read(4, 1 << 20))[0] == (3, b"k3", b"c0"), "the batch holding 4"
    assert content(log.read(5, 1 << 20)) == [(5, b"k1", b"a2")]
    assert log.read(6, 1 << 20) == b""
    assert content(log.read(0, 1 << 20, max_offset=5))[-1][0] == 4


def test_index_after_cleaning_matches_a_rebuild_and_finds_every_offset(tmp_path):
    log = open_log(tmp_path, index_interval_bytes=100)
    for round_ in range(30):
        put(log, *[(b"k%d" % ((3 * round_ + i) % 40), b"v%d" % i) for i in range(3)])
        if round_ % 10 == 9:
            log.roll()
    put(log, (b"last", b"v"))
    clean_log(log, config=EAGER)
    segment = log.segments[0]
    assert len(segment.index) > 1
    survivors = everything(log)
    for offset, key, value in survivors:
        assert (offset, key, value) in content(log.read(offset, 1))
    index_path = segment.index.path
    written = index_path.read_bytes()
    log.close()
    index_path.unlink()
    reopened = open_log(tmp_path, index_interval_bytes=100)
    assert reopened.segments[0].recovered
    assert index_path.read_bytes() == written, "recovery rebuilds the very same index"
    loaded = OffsetIndex.load(index_path, 0, reopened.segments[0].size)
    assert loaded is not None and list(loaded.offsets) == list(segment.index.offsets)


def test_reopened_log_after_cleaning_has_the_same_content(tmp_path):
    log = open_log(tmp_path)
    three_segments(log)
    clean_log(log, config=EAGER)
    cleaned, end, segments = everything(log), log.log_end_offset, len(log.segments)
    log.close()
    for recovery_point in (end, 0):
        again = PartitionLog.open(tmp_path / "compacted-0", LogConfig(), recovery_point)
        assert everything(again) == cleaned
        assert (again.log_end_offset, len(again.segments)) == (end, segments)
        again.close()


def test_each_cleaned_segment_still_ends_where_the_next_begins(tmp_path):
    log = open_log(tmp_path)
    put(log, (b"k", b"v0"))
    log.roll()
    put(log, (b"k", b"v1"))
    log.roll()
    put(log, (b"k", b"v2"))
    log.roll()
    clean_log(log, config=CleanerConfig(min_cleanable_ratio=0.0, max_segment_bytes=1))
    assert [s.base_offset for s in log.segments] == [0, 1, 2, 3]
    assert [s.next_offset for s in log.segments[:-1]] == [1, 2, 3]
    headers = list(iter_batch_headers(log.read(0, 1 << 20)))
    assert [(h.base_offset, h.record_count) for h in headers] == [(0, 0), (1, 0), (2, 1)]
    assert everything(log) == [(2, b"k", b"v2")]


def test_small_segments_merge_up_to_segment_bytes(tmp_path):
    log = open_log(tmp_path)
    for i in range(6):
        put(log, (b"k%d" % i, b"v" * 40))
        log.roll()
    size = log.segments[0].size
    clean_log(log, config=CleanerConfig(min_cleanable_ratio=0.0, max_segment_bytes=2 * size))
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6]
    assert [o for o, _, _ in everything(log)] == list(range(6))


def test_last_batch_of_each_producer_survives_empty(tmp_path):
    log = open_log(tmp_path)
    put(log, (b"k1", b"a0"), producer=(7, 2, 0))
    put(log, (b"k2", b"b0"), (b"k1", b"a00"), producer=(7, 2, 1))
    put(log, (b"k3", b"c0"))
    log.roll()
    put(log, (b"k1", b"a1"), (b"k2", b"b1"))
    put(log, (b"k9", b"z"))
    log.roll()
    clean_log(log, config=EAGER)
    headers = list(iter_batch_headers(log.read(0, 1 << 20), verify_crc=True))
    empty = headers[0]
    assert (empty.base_offset, empty.last_offset, empty.record_count) == (1, 2, 0)
    assert (empty.producer_id, empty.producer_epoch, empty.base_sequence) == (7, 2, 1)
    assert empty.last_sequence == 2
    assert [h.base_offset for h in headers] == [1, 3, 4, 6]
    assert everything(log) == [(3, b"k3", b"c0"), (4, b"k1", b"a1"), (5, b"k2", b"b1"),
                               (6, b"k9", b"z")]


def test_compressed_batches_are_filtered_and_written_uncompressed(tmp_path):
    log = open_log(tmp_path)
    big = b"x" * 300
    put(log, (b"k1", big), (b"k2", big), (b"k3", big), compression=GZIP)
    put(log, (b"k2", b"new"))
    put(log, (b"k4", big), (b"k5", big), compression=GZIP)
    untouched = log.read(4, 1 << 20)
    log.roll()
    put(log, (b"k6", b"v"))
    clean_log(log, config=EAGER)
    headers = list(iter_batch_headers(log.read(0, 1 << 20), verify_crc=True))
    first = headers[0]
    assert (first.base_offset, first.last_offset_delta, first.record_count) == (0, 2, 2)
    assert first.compression_type == 0 and first.max_timestamp == BASE_TIME
    assert log.read(4, 1 << 20)[:len(untouched)] == untouched, "a batch kept whole stays gzip"
    assert everything(log) == [(0, b"k1", big), (2, b"k3", big), (3, b"k2", b"new"),
                               (4, b"k4", big), (5, b"k5", big), (6, b"k6", b"v")]


def test_transactional_and_control_batches_are_kept_whole(tmp_path):
    log = open_log(tmp_path)
    put(log, (b"k", b"plain0"))
    txn = keyed_batch([(b"k", b"txn")], producer=(5, 0, 0), transactional=True)
    log.append_as_leader(txn, 0)
    log.append_as_leader(as_control(keyed_batch([(b"\x00\x00\x00\x01", b"marker")],
                                                producer=(5, 0, 1), transactional=True)), 0)
    put(log, (b"other", b"v"))
    log.roll()
    put(log, (b"active", b"v"))
    clean_log(log, config=EAGER)
    kept = everything(log)
    assert [(o, v) for o, _, v in kept] == [(0, b"plain0"), (1, b"txn"), (2, b"marker"),
                                            (3, b"v"), (4, b"v")]


def test_a_truncation_during_the_rewrite_cancels_the_round(tmp_path):
    log = open_log(tmp_path)
    three_segments(log)
    before = everything(log)
    plan = plan_cleaning(log, None, EAGER)
    outputs = write_cleaned(plan, EAGER, BASE_TIME)
    log.truncate_to(4)
    assert install(plan, outputs) is None
    assert everything(log) == before[:3]
    assert not [p for p in log.directory.iterdir() if p.suffix in (".cleaned", ".swap")]


def test_retention_deletion_during_the_rewrite_cancels_the_round(tmp_path):
    log = PartitionLog.open(tmp_path / "compacted-0", LogConfig(retention_ms=0))
    three_segments(log)
    plan = plan_cleaning(log, None, EAGER)
    outputs = write_cleaned(plan, EAGER, BASE_TIME)
    assert log.delete_old_segments(high_watermark=5) == 2
    assert install(plan, outputs) is None
    assert everything(log) == [(5, b"k1", b"a2")]


def test_async_round_rewrites_in_an_executor_and_swaps_on_the_loop(tmp_path):
    log = open_log(tmp_path)
    three_segments(log)

    async def run():
        return await clean_log_async(log, 5, EAGER, asyncio.get_running_loop())

    result = asyncio.run(run())
    assert result is not None and result.records_after == 3
    assert [o for o, _, _ in everything(log)] == [2, 3, 4, 5]


def test_cleanup_policy_from_topic_config():
    defaults = CleanerConfig(delete_retention_ms=5, min_cleanable_ratio=0.25)
    plain = cleanup_policy("t", {}, defaults)
    assert (plain.compact, plain.delete, plain.cleaner) == (False, True, defaults)
    offsets = cleanup_policy("__consumer_offsets", {}, defaults)
    assert (offsets.compact, offsets.delete) == (True, False)
    both = cleanup_policy("t", {"cleanup.policy": "compact,delete", "delete.retention.ms": "9",
                                "min.cleanable.dirty.ratio": "0.75", "segment.bytes": "4096"},
                          defaults)
    assert (both.compact, both.delete) == (True, True)
    assert both.cleaner == CleanerConfig(9, 0.75, 4096)
    with pytest.raises(ValueError):
        cleanup_policy("t", {"cleanup.policy": "shred"}, defaults)
    with pytest.raises(ValueError):
        cleanup_policy("t", {"min.cleanable.dirty.ratio": "2"}, defaults)


def test_retention_skips_excluded_logs(tmp_path):
    manager = LogManager([tmp_path / "d"], LogConfig(retention_ms=0))
    for topic in ("compact-only", "deleted"):
        log = manager.get_or_create(topic, 0)
        put(log, (b"k", b"v"))
        log.roll()
        put(log, (b"k", b"w"))
    hws = {("compact-only", 0): 1, ("deleted", 0): 1}
    assert manager.delete_old_segments(hws, exclude={("compact-only", 0)}) == 1
    assert manager.get("compact-only", 0).log_start_offset == 0
    assert manager.get("deleted", 0).log_start_offset == 1
    manager.close()


def test_replica_manager_cleans_compacted_topics_and_spares_them_from_retention(
        tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="broker.cleaner")

    async def run() -> tuple[list[str], list[str]]:
        logs = LogManager([tmp_path / "d"], LogConfig(retention_ms=0))
        manager = ReplicaManager(ReplicaSettings(0, log_cleaner_min_cleanable_ratio=0.0), logs)
        manager.start()
        tasks = [task.get_name() for task in manager._tasks]
        for topic in ("__consumer_offsets", "events"):
            partition = await manager._create_partition(topic, 0)
            three_segments(partition.log)
            partition.high_watermark = partition.log.log_end_offset
        await manager._clean_logs()
        await manager._retention()
        await manager.stop()
        kept = [everything(logs.get(topic, 0)) for topic in ("__consumer_offsets", "events")]
        logs.close()
        return tasks, kept

    tasks, (offsets, events) = asyncio.run(run())
    assert "log-cleaner" in tasks and "log-retention" in tasks
    assert [o for o, _, _ in offsets] == [2, 3, 4, 5], "compacted, never retention-deleted"
    assert events == [], "a delete-policy topic is not compacted, and retention applies"
    assert "__consumer_offsets-0: cleaned 2 segments into 1 below offset 5" in caplog.text
    assert "records 5 -> 3" in caplog.text


def test_a_follower_replicates_a_cleaned_log_across_its_gaps(tmp_path):
    leader = open_log(tmp_path)
    three_segments(leader)
    clean_log(leader, config=EAGER)
    follower = PartitionLog.open(tmp_path / "follower-0", LogConfig())
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(leader.read(follower.log_end_offset, 1))
    assert everything(follower) == everything(leader)
    assert follower.log_end_offset == leader.log_end_offset


def test_a_cancelled_async_round_leaves_the_log_as_it_was(tmp_path):
    log = open_log(tmp_path)
    three_segments(log)
    before = seg_files(log)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(clean_log_async(log, None, EAGER, loop))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await loop.shutdown_default_executor()
        for _ in range(3):
            await asyncio.sleep(0)

    asyncio.run(run())
    assert seg_files(log) == before
