"""PartitionLog: appends, reads, segments, index, truncation, epochs, timestamps, retention."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from broker.storage import (
    CorruptRecordError,
    InvalidRecordError,
    LogConfig,
    OffsetOutOfRangeError,
    PartitionLog,
    StaleLeaderEpochError,
    UnexpectedAppendOffsetError,
    iter_batch_headers,
)
from broker.storage.index import OffsetIndex
from tests.support.batches import (
    BASE_TIME,
    GZIP,
    decode,
    decode_batches,
    make_batch,
    values_of,
)


def open_log(tmp_path, **config) -> PartitionLog:
    return PartitionLog.open(tmp_path / "topic-0", LogConfig(**config))


def fill(log: PartitionLog, batches: int, per_batch: int = 3, epoch: int = 0,
         size: int = 0) -> list[bytes]:
    values = []
    for _ in range(batches):
        vs = values_of(per_batch, tag=f"b{log.log_end_offset:06d}-", size=size)
        log.append_as_leader(make_batch(vs), epoch)
        values.extend(vs)
    return values


def test_append_assigns_offsets_and_reads_back(tmp_path):
    log = open_log(tmp_path)
    first = log.append_as_leader(make_batch(values_of(3)), 5)
    second = log.append_as_leader(make_batch(values_of(2, "w"), timestamp=BASE_TIME + 9), 5)
    assert (first.first_offset, first.last_offset, first.record_count) == (0, 2, 3)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert second.max_timestamp == BASE_TIME + 9 and second.log_append_time == -1
    assert log.log_end_offset == 5
    data = log.read(0, 1 << 20)
    assert decode(data) == [(0, b"v0"), (1, b"v1"), (2, b"v2"), (3, b"w0"), (4, b"w1")]
    assert decode_batches(data) == [(0, 2, 5), (3, 4, 5)]


def test_compressed_batches_pass_through_byte_for_byte(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(make_batch(values_of(1)), 0)
    batch = make_batch(values_of(50, size=200), compression=GZIP)
    log.append_as_leader(batch, 0)
    stored = log.read(1, 1 << 20)
    assert stored[21:] == batch[21:], "only baseOffset and the leader epoch are patched"
    assert stored[12:16] == struct.pack(">i", 0) and stored[:8] == struct.pack(">q", 1)
    header = next(iter_batch_headers(stored, verify_crc=True))
    assert header.compression_type == GZIP
    assert decode(stored)[0] == (1, values_of(50, size=200)[0])
    assert len(decode(stored)) == 50


def test_several_batches_in_one_append(tmp_path):
    log = open_log(tmp_path)
    info = log.append_as_leader(make_batch(values_of(2)) + make_batch(values_of(4, "x")), 1)
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 5, 6)
    assert decode_batches(log.read(0, 1 << 20)) == [(0, 1, 1), (2, 5, 1)]


def test_read_limits(tmp_path):
    log = open_log(tmp_path)
    batch_size = len(make_batch(values_of(3, tag="b000000-")))
    fill(log, 5)
    assert decode_batches(log.read(4, 1)) == [(3, 5, 0)], "KIP-74: one whole batch anyway"
    assert decode_batches(log.read(0, 2 * batch_size)) == [(0, 2, 0), (3, 5, 0)]
    assert decode_batches(log.read(0, 2 * batch_size - 1)) == [(0, 2, 0)]
    assert decode_batches(log.read(0, 1 << 20, max_offset=9)) == [(0, 2, 0), (3, 5, 0),
                                                                  (6, 8, 0)]
    assert log.read(0, 1 << 20, max_offset=2) == b"", "the batch reaching max_offset is held"
    assert log.read(9, 1 << 20, max_offset=9) == b""
    assert log.read(15, 100) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(16, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


def test_segments_roll_at_segment_bytes_with_20_digit_names(tmp_path):
    batch_size = len(make_batch(values_of(3, tag="b000000-", size=20)))
    log = open_log(tmp_path, segment_bytes=3 * batch_size)
    values = fill(log, 10, size=20)
    names = sorted(p.name for p in log.directory.glob("*.log"))
    assert names == [f"{base:020d}.log" for base in (0, 9, 18, 27)]
    assert sorted(p.name for p in log.directory.glob("*.index")) == [
        n.replace(".log", ".index") for n in names]
    assert all(s.size <= 3 * batch_size for s in log.segments)
    assert [v for _, v in decode(log.read(0, 1 << 20))] == values
    for offset in range(30):
        got = decode(log.read(offset, 1))
        assert got[0][0] <= offset <= got[-1][0]
        assert len(decode_batches(log.read(offset, 1))) == 1


def test_oversize_batch_gets_a_segment_of_its_own(tmp_path):
    log = open_log(tmp_path, segment_bytes=200)
    fill(log, 1)
    log.append_as_leader(make_batch(values_of(10, size=100)), 0)
    fill(log, 1)
    assert [s.base_offset for s in log.segments] == [0, 3, 13]
    assert len(decode(log.read(0, 1 << 20))) == 16


def test_index_entries_every_interval_bytes(tmp_path):
    batch_size = len(make_batch(values_of(3, tag="b000000-")))
    log = open_log(tmp_path, index_interval_bytes=2 * batch_size)
    fill(log, 12)
    index = log.active_segment.index
    # Kafka: an entry before a batch once more than the interval was written since the last.
    assert list(index.positions) == [3 * batch_size, 6 * batch_size, 9 * batch_size]
    assert list(index.offsets) == [11, 20, 29], "entries carry the batch's last offset"
    raw = (log.directory / f"{0:020d}.index").read_bytes()
    assert list(struct.iter_unpack(">ii", raw)) == list(
        zip(index.offsets, index.positions, strict=True))
    assert index.lookup(10) == 0 and index.lookup(11) == 3 * batch_size
    assert index.lookup(28) == 6 * batch_size and index.lookup(10_000) == 9 * batch_size
    for offset in range(36):
        assert decode(log.read(offset, 1))[0][0] <= offset


def test_index_file_loads_and_rejects_insane_content(tmp_path):
    path = tmp_path / "x.index"
    path.write_bytes(struct.pack(">iiii", 3, 100, 7, 200))
    index = OffsetIndex.load(path, 50, log_size=300)
    assert index is not None and list(index.offsets) == [53, 57]
    assert OffsetIndex.load(path, 50, log_size=200) is None, "position beyond the log"
    path.write_bytes(struct.pack(">iiii", 7, 100, 3, 200))
    assert OffsetIndex.load(path, 50, log_size=300) is None, "offsets not increasing"
    path.write_bytes(struct.pack(">iiii", 3, 100, 7, 200)[:-1])
    assert OffsetIndex.load(path, 50, log_size=300) is None, "torn entry"
    assert OffsetIndex.load(tmp_path / "missing.index", 0, 0) is None


def test_truncate_to_within_and_across_segments(tmp_path):
    batch_size = len(make_batch(values_of(3, tag="b000000-")))
    log = open_log(tmp_path, segment_bytes=3 * batch_size, index_interval_bytes=0)
    fill(log, 4, epoch=1)
    fill(log, 5, epoch=2)
    assert log.epoch_cache.entries() == [(1, 0), (2, 12)]
    log.truncate_to(13)  # inside batch [12, 14]: the whole batch goes
    assert log.log_end_offset == 12
    assert log.epoch_cache.entries() == [(1, 0)]
    assert [s.base_offset for s in log.segments] == [0, 9]
    assert decode(log.read(0, 1 << 20))[-1][0] == 11
    log.truncate_to(9)
    assert log.log_end_offset == 9
    assert [s.base_offset for s in log.segments] == [0, 9] and log.active_segment.size == 0
    info = log.append_as_leader(make_batch(values_of(2)), 3)
    assert info.first_offset == 9
    assert log.epoch_cache.entries() == [(1, 0), (3, 9)]
    log.truncate_to(100)
    assert log.log_end_offset == 11
    log.truncate_to(0)
    assert log.log_end_offset == 0 and log.epoch_cache.entries() == []
    assert [p.name for p in log.directory.glob("*.log")] == [f"{0:020d}.log"]


def test_truncate_fully_and_start_at(tmp_path):
    log = open_log(tmp_path)
    fill(log, 3, epoch=4)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset) == (1000, 1000)
    assert log.epoch_cache.entries() == []
    with pytest.raises(OffsetOutOfRangeError):
        log.read(5, 100)
    batch = bytearray(make_batch(values_of(2)))
    struct.pack_into(">q", batch, 0, 1000)
    log.append_as_follower(batch)
    assert decode(log.read(1000, 100)) == [(1000, b"v0"), (1001, b"v1")]


def test_follower_append_keeps_offsets_and_epochs(tmp_path):
    leader = PartitionLog.open(tmp_path / "leader-0", LogConfig())
    follower = PartitionLog.open(tmp_path / "follower-0", LogConfig())
    fill(leader, 2, epoch=1)
    fill(leader, 2, epoch=3)
    fetched = leader.read(0, 1 << 20)
    info = follower.append_as_follower(fetched[:-5])  # a fetch may end in a partial batch
    assert (info.first_offset, info.last_offset) == (0, 8)
    assert follower.epoch_cache.entries() == [(1, 0), (3, 6)]
    follower.append_as_follower(leader.read(9, 1 << 20))
    assert follower.read(0, 1 << 20) == fetched
    assert follower.append_as_follower(b"").record_count == 0
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(leader.read(3, 1 << 20))
    assert follower.log_end_offset == 12


def test_follower_append_rejects_bad_crc(tmp_path):
    leader = open_log(tmp_path)
    fill(leader, 1)
    data = bytearray(leader.read(0, 100))
    data[-1] ^= 1
    follower = PartitionLog.open(tmp_path / "f-0", LogConfig())
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(data)
    assert follower.log_end_offset == 0


def with_crc(batch: bytes) -> bytes:
    """`batch` with its CRC recomputed, so that only the changed header field is wrong."""
    return batch[:17] + struct.pack(">I", crc32c(batch[21:])) + batch[21:]


@pytest.mark.parametrize("mangle, error", [
    (lambda b: b"", InvalidRecordError),
    (lambda b: b[:30], CorruptRecordError),
    (lambda b: b[:-1], CorruptRecordError),
    (lambda b: b[:16] + b"\x01" + b[17:], InvalidRecordError),
    (lambda b: b[:-1] + bytes([b[-1] ^ 0x40]), CorruptRecordError),
    (lambda b: b"\xde\xad\xbe\xef" * 40, CorruptRecordError),
    (lambda b: with_crc(b[:57] + struct.pack(">i", 7) + b[61:]), InvalidRecordError),
    (lambda b: with_crc(b[:23] + struct.pack(">i", 5) + b[27:]), InvalidRecordError),
])
def test_leader_append_rejects_bad_input_and_writes_nothing(tmp_path, mangle, error):
    log = open_log(tmp_path)
    fill(log, 1)
    size = log.active_segment.size
    with pytest.raises(error):
        log.append_as_leader(mangle(make_batch(values_of(3))), 0)
    assert log.log_end_offset == 3 and log.active_segment.size == size


def test_leader_epoch_cache_follows_appends(tmp_path):
    log = open_log(tmp_path)
    assert log.latest_epoch is None
    fill(log, 2, epoch=1)
    fill(log, 1, epoch=1)
    log.assign_epoch_start_offset(4)
    fill(log, 1, epoch=4)
    assert log.epoch_cache.entries() == [(1, 0), (4, 9)]
    assert log.latest_epoch == 4
    text = (log.directory / "leader-epoch-checkpoint").read_text()
    assert text == "0\n2\n1 0\n4 9\n"


def test_end_offset_for_epoch_kip101_kip279(tmp_path):
    log = open_log(tmp_path)
    assert log.end_offset_for_epoch(0) == (-1, -1), "empty cache"
    fill(log, 2, epoch=2)   # 0..5
    fill(log, 1, epoch=5)   # 6..8
    fill(log, 3, epoch=7)   # 9..17
    assert log.end_offset_for_epoch(7) == (7, 18), "latest epoch: the log end offset"
    assert log.end_offset_for_epoch(5) == (5, 9)
    assert log.end_offset_for_epoch(2) == (2, 6)
    assert log.end_offset_for_epoch(3) == (2, 6), "between known epochs: the epoch below"
    assert log.end_offset_for_epoch(6) == (5, 9)
    assert log.end_offset_for_epoch(1) == (1, 0), "below the first: first start offset"
    assert log.end_offset_for_epoch(8) == (-1, -1), "greater than the latest: unknown"
    assert log.end_offset_for_epoch(-1) == (-1, -1)


def test_offset_for_timestamp(tmp_path):
    log = open_log(tmp_path, segment_bytes=100)
    t = BASE_TIME
    log.append_as_leader(make_batch(values_of(3), timestamps=[t, t + 10, t + 20]), 0)
    log.append_as_leader(make_batch(values_of(3), timestamps=[t + 30, t + 25, t + 40]), 0)
    log.append_as_leader(make_batch(values_of(50, size=30), compression=GZIP,
                                    timestamps=[t + 100 + i for i in range(50)]), 0)
    assert len(log.segments) == 3
    assert log.offset_for_timestamp(0) == 0
    assert log.offset_for_timestamp(t + 10) == 1
    assert log.offset_for_timestamp(t + 11) == 2
    assert log.offset_for_timestamp(t + 26) == 3
    assert log.offset_for_timestamp(t + 35) == 5
    assert log.offset_for_timestamp(t + 141) == 47, "inside a gzip batch"
    assert log.offset_for_timestamp(t + 150) is None


def test_flush_policy_and_recovery_point(tmp_path):
    log = open_log(tmp_path, flush_messages=6)
    fill(log, 1)
    assert log.recovery_point == 0
    fill(log, 1)
    assert log.recovery_point == 6
    log.flush()
    assert log.recovery_point == 6


def test_retention_by_size_deletes_whole_old_segments(tmp_path):
    batch_size = len(make_batch(values_of(3, tag="b000000-")))
    log = open_log(tmp_path, segment_bytes=2 * batch_size, retention_bytes=5 * batch_size,
                   retention_ms=-1)
    fill(log, 4, epoch=1)
    fill(log, 5, epoch=2)  # 9 batches, segments of 2: [0,6) [6,12) [12,18) [18,24) [24,27)
    assert [s.base_offset for s in log.segments] == [0, 6, 12, 18, 24]
    assert log.delete_old_segments(high_watermark=5) == 0, "bounded by the high watermark"
    assert log.delete_old_segments(high_watermark=6) == 1
    assert log.delete_old_segments() == 1
    assert [s.base_offset for s in log.segments] == [12, 18, 24]
    assert log.size_in_bytes == 5 * batch_size
    assert log.log_start_offset == 12
    assert not (log.directory / f"{0:020d}.log").exists()
    assert log.epoch_cache.entries() == [(2, 12)]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(11, 100)
    assert decode(log.read(12, 1 << 20))[0][0] == 12


def test_retention_by_time_can_empty_the_log(tmp_path):
    t = BASE_TIME
    log = open_log(tmp_path, segment_bytes=100, retention_ms=1000)
    for i in range(4):
        log.append_as_leader(make_batch(values_of(3), timestamp=t + i * 1000), 0)
    assert len(log.segments) == 4
    assert log.delete_old_segments(now_ms=t + 2500) == 2
    assert log.log_start_offset == 6
    assert log.delete_old_segments(now_ms=t + 10_000) == 2
    assert (log.log_start_offset, log.log_end_offset) == (12, 12)
    assert [s.base_offset for s in log.segments] == [12]
    assert log.append_as_leader(make_batch(values_of(1)), 0).first_offset == 12


def test_reopen_after_close_keeps_everything(tmp_path):
    batch_size = len(make_batch(values_of(3, tag="b000000-")))
    log = open_log(tmp_path, segment_bytes=3 * batch_size, index_interval_bytes=batch_size)
    fill(log, 7, epoch=2)
    before = log.read(0, 1 << 20)
    index_bytes = (log.directory / f"{9:020d}.index").read_bytes()
    log.close()
    again = PartitionLog.open(log.directory, log.config, recovery_point=log.recovery_point)
    assert again.read(0, 1 << 20) == before
    assert again.log_end_offset == 21 and again.epoch_cache.entries() == [(2, 0)]
    assert (log.directory / f"{9:020d}.index").read_bytes() == index_bytes
    assert not any(s.recovered for s in again.segments)


def test_config_is_validated():
    with pytest.raises(ValueError):
        LogConfig(segment_bytes=1 << 31)
    with pytest.raises(ValueError):
        LogConfig(index_interval_bytes=-1)
    with pytest.raises(ValueError):
        LogConfig(flush_messages=0)


def test_a_stale_leader_epoch_is_refused(tmp_path):
    log = open_log(tmp_path)
    fill(log, 1, epoch=3)
    log.assign_epoch_start_offset(5)
    with pytest.raises(StaleLeaderEpochError):
        log.append_as_leader(make_batch(values_of(1)), 4)
    assert log.epoch_cache.entries() == [(3, 0), (5, 3)] and log.log_end_offset == 3
