"""Kafka v2 record batches: header parsing, validation and in-place patching.

Only the 61-byte batch header is ever parsed; records stay opaque (compressed or not). Layout:
baseOffset int64, batchLength int32, partitionLeaderEpoch int32, magic int8, crc uint32
(CRC-32C of attributes..end of batch), attributes int16, lastOffsetDelta int32,
baseTimestamp int64, maxTimestamp int64, producerId int64, producerEpoch int16,
baseSequence int32, recordCount int32. baseOffset and partitionLeaderEpoch lie before the CRC
range, so the broker patches them without recomputing it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from crc32c import crc32c

from .errors import CorruptRecordError, InvalidRecordError, StorageError

__all__ = [
    "HEADER_SIZE",
    "BatchHeader",
    "end_offset",
    "iter_batch_headers",
]

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted by batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
CRC_START = 21  # attributes
MAGIC_POS = 16
LEADER_EPOCH_POS = 12
# Enough of the header to frame a batch and know its last offset.
PREFIX = struct.Struct(">qiibIhi")
PREFIX_SIZE = PREFIX.size  # 27
OFFSET = struct.Struct(">q")
INT32 = struct.Struct(">i")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

# Indexes into a HEADER tuple.
H_BASE, H_LENGTH, H_EPOCH, H_MAGIC, H_CRC, H_ATTRS, H_DELTA = range(7)
H_BASE_TS, H_MAX_TS, H_PID, H_PEPOCH, H_BASE_SEQ, H_COUNT = range(7, 13)


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """One v2 batch header, where it sits in its buffer (`position`) and its `size` in bytes."""

    position: int
    size: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression_type(self) -> int:
        """0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def last_sequence(self) -> int:
        """The sequence of the last record, wrapping at 2**31 as Kafka's does (-1 if none)."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


def iter_batch_headers(records: bytes | bytearray | memoryview, verify_crc: bool = False,
                       partial_tail_ok: bool = False) -> Iterator[BatchHeader]:
    """Yield the header of every batch in `records` without decoding any record.

    Raises CorruptRecordError on a truncated or inconsistent frame (or a bad CRC when
    `verify_crc`) and InvalidRecordError on a magic other than 2; with `partial_tail_ok`
    an incomplete last batch (as a fetch response may carry) is left out instead.
    """
    for fields in scan(records, verify_crc=verify_crc, partial_tail_ok=partial_tail_ok):
        pos, header = fields
        yield BatchHeader(pos, LOG_OVERHEAD + header[H_LENGTH], *header)


def scan(records: bytes | bytearray | memoryview, *, verify_crc: bool,
         partial_tail_ok: bool) -> list[tuple[int, tuple]]:
    """Frame `records` into batches: a list of (position, HEADER tuple).

    With `partial_tail_ok`, an incomplete batch at the very end is left out (as a fetch
    response may carry one); otherwise it is a CorruptRecordError.
    """
    view = memoryview(records)
    end = len(view)
    pos = 0
    out: list[tuple[int, tuple]] = []
    unpack = HEADER.unpack_from
    while pos < end:
        if end - pos > MAGIC_POS and view[pos + MAGIC_POS] != 2:
            raise _bad_magic(view, pos, end)
        if end - pos < HEADER_SIZE:
            if partial_tail_ok:
                break
            raise CorruptRecordError(
                f"truncated batch header at byte {pos}: {end - pos} of {HEADER_SIZE} bytes")
        header = unpack(view, pos)
        length = header[H_LENGTH]
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"batch length {length} at byte {pos} is below the minimum {MIN_BATCH_LENGTH}")
        stop = pos + LOG_OVERHEAD + length
        if stop > end:
            if partial_tail_ok:
                break
            raise CorruptRecordError(
                f"truncated batch at byte {pos}: needs {LOG_OVERHEAD + length} bytes, "
                f"{end - pos} present")
        if verify_crc and crc32c(view[pos + CRC_START:stop]) != header[H_CRC]:
            raise CorruptRecordError(
                f"CRC-32C mismatch in batch at byte {pos} (base offset {header[H_BASE]})")
        if header[H_DELTA] < 0:
            raise CorruptRecordError(
                f"negative last offset delta {header[H_DELTA]} in batch at byte {pos}")
        out.append((pos, header))
        pos = stop
    return out


def _bad_magic(view: memoryview, pos: int, end: int) -> StorageError:
    """InvalidRecordError for a well-framed legacy (v0/v1) message, else CorruptRecordError."""
    magic = view[pos + MAGIC_POS]
    length = INT32.unpack_from(view, pos + 8)[0]
    if magic in (0, 1) and 0 < length <= end - pos - LOG_OVERHEAD:
        return InvalidRecordError(
            f"unsupported message format v{magic} at byte {pos} (only record batch v2)")
    return CorruptRecordError(f"not a record batch at byte {pos} (magic byte {magic})")


def end_offset(records: bytes | bytearray | memoryview) -> int | None:
    """The offset after the last whole batch of `records`; None if there is none."""
    view = memoryview(records)
    pos = 0
    end = None
    while pos + PREFIX_SIZE <= len(view):
        base, length, *_, delta = PREFIX.unpack_from(view, pos)
        pos += LOG_OVERHEAD + length
        if pos > len(view):
            break
        end = base + delta + 1
    return end


def check_leader_batch(pos: int, header: tuple) -> None:
    """Rules for a batch coming from a producer (Kafka's LogValidator, header level)."""
    count = header[H_COUNT]
    if count <= 0:
        raise InvalidRecordError(f"batch at byte {pos} has {count} records")
    if header[H_DELTA] + 1 != count:
        raise InvalidRecordError(
            f"batch at byte {pos}: record count {count} does not match last offset delta "
            f"{header[H_DELTA]}")


def patch(buf: bytearray, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Write baseOffset and partitionLeaderEpoch of the batch at `pos` (outside the CRC)."""
    OFFSET.pack_into(buf, pos, base_offset)
    INT32.pack_into(buf, pos + LEADER_EPOCH_POS, leader_epoch)
