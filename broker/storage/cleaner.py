"""Log compaction for compacted topics: Kafka's LogCleaner, one partition log at a time.

A cleaning round works on the *cleanable* segments: the leading segments that are not the
active one and hold only offsets below the high watermark. It

1. plans (under the log's lock, cheap): picks the cleanable segments, skips the round when
   the dirty share of their bytes (segments at or above `first_dirty_offset`, the end of the
   previous round, kept in memory only) is below `min.cleanable.dirty.ratio`, groups
   consecutive segments up to `segment.bytes` so small ones merge, and opens a read-only file
   descriptor on each (which survives a concurrent retention deletion or truncation);
2. rewrites (no lock; the broker runs this in an executor thread): builds the offset map
   key -> offset of its latest record over the whole cleanable range, then writes each
   group to `<base>.log.cleaned` and `<base>.index.cleaned`, fsynced, keeping a record iff
   it is the latest of its key; records without a key are kept; a tombstone (null value)
   is kept while its segment is younger than `delete.retention.ms` (by the segment's
   largest timestamp, else its mtime, as retention measures it) and dropped after;
3. swaps (under the lock; on the event loop in the broker): if the log still holds exactly
   the planned segments with their planned sizes (a truncation or retention deletion in
   between cancels the round), each group is committed by renaming its `.cleaned` files to
   `.swap` (the commit point), deleting the group's other segments, then renaming the
   swap files over the group's first segment.

Offsets never move. A batch whose records all survive is copied byte for byte (compressed
or not). Otherwise it is rebuilt with the kept records, *uncompressed*: same base offset,
lastOffsetDelta, base timestamp, leader epoch and producer fields, records byte for byte
with their offset deltas (so the batch may have gaps); length, count, max timestamp and
CRC-32C are recomputed. A batch left with no records is dropped, except that an empty batch
is kept when it is the last batch of its producer id in the cleaned range (idempotent
producer state survives) or the last batch of the group (so that a segment still ends where
the next begins: the recovery rule that cuts segments following a short one stays sound).
Control batches and transactional batches are copied as they are and their records are
left out of the offset map (an aborted value must not hide a committed one); so are batches
whose codec is not installed. Markers and transactional data are therefore never removed
(Kafka removes aborted data and, later, markers; we keep both), so every aborted-transaction
entry stays true: a group's `.txnindex` is the concatenation of its segments' entries.

Crash safety: a log being opened finishes the swaps a crash interrupted (swaps.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from crc32c import crc32c
from kafka import codec
from kafka.record.util import decode_varint

from .checkpoints import fsync_dir
from .errors import CorruptRecordError
from .index import OffsetIndex
from .records import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_START,
    H_ATTRS,
    H_BASE,
    H_BASE_TS,
    H_COUNT,
    H_CRC,
    H_DELTA,
    H_LENGTH,
    H_MAX_TS,
    H_PID,
    HEADER,
    HEADER_SIZE,
    INT32,
    LOG_OVERHEAD,
    MAGIC_POS,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
)
from .segment import MAX_RELATIVE_OFFSET, LogSegment
from .swaps import CLEANED_SUFFIX, SWAP_SUFFIX
from .txn_index import AbortedTxn, TransactionIndex

if TYPE_CHECKING:
    from .log import PartitionLog

__all__ = [
    "OFFSETS_TOPIC",
    "CleanerConfig",
    "CleaningResult",
    "CleanupPolicy",
    "clean_log",
    "clean_log_async",
    "cleanup_policy",
    "install",
    "plan_cleaning",
    "write_cleaned",
]

logger = logging.getLogger("broker.cleaner")

OFFSETS_TOPIC = "__consumer_offsets"
CRC = struct.Struct(">I")
CRC_POS = MAGIC_POS + 1
READ_CHUNK = 1 << 20
NO_PRODUCER_ID = -1

StepHook = Callable[[str], None]
"""Called with the name of each step a round completes: `cleaned` (the `.cleaned` files are
written), `swap` (renamed to `.swap`), `deleted` (one of the group's other segments is
gone), `replaced` (the swap took the first segment's place). Tests kill the process there."""


@dataclass(frozen=True)
class CleanerConfig:
    """How one log is compacted (broker defaults, overridden per topic)."""

    delete_retention_ms: int = 86_400_000
    min_cleanable_ratio: float = 0.5
    max_segment_bytes: int | None = None  # merged groups stay below this; None: log.segment.bytes

    def __post_init__(self) -> None:
        if self.delete_retention_ms < 0:
            raise ValueError(f"delete.retention.ms must be >= 0: {self.delete_retention_ms}")
        if not 0.0 <= self.min_cleanable_ratio <= 1.0:
            raise ValueError(
                f"min.cleanable.dirty.ratio must be in [0, 1]: {self.min_cleanable_ratio}")


@dataclass(frozen=True)
class CleanupPolicy:
    """A topic's `cleanup.policy`: compaction, retention deletion, or both."""

    compact: bool = False
    delete: bool = True
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)


def cleanup_policy(topic: str, topic_config: Mapping[str, str],
                   defaults: CleanerConfig) -> CleanupPolicy:
    """The policy from a topic's ZooKeeper config (`cleanup.policy`, `delete.retention.ms`,
    `min.cleanable.dirty.ratio`, `segment.bytes`); `__consumer_offsets` is always compacted
    (and only compacted unless its config says otherwise). ValueError on a malformed value."""
    default = "compact" if topic == OFFSETS_TOPIC else "delete"
    words = {w.strip() for w in topic_config.get("cleanup.policy", default).split(",")}
    if not words <= {"compact", "delete"}:
        raise ValueError(f"cleanup.policy of {topic}: {topic_config['cleanup.policy']!r}")
    segment_bytes = topic_config.get("segment.bytes")
    config = CleanerConfig(
        int(topic_config.get("delete.retention.ms", defaults.delete_retention_ms)),
        float(topic_config.get("min.cleanable.dirty.ratio", defaults.min_cleanable_ratio)),
        int(segment_bytes) if segment_bytes is not None else defaults.max_segment_bytes,
    )
    return CleanupPolicy("compact" in words or topic == OFFSETS_TOPIC, "delete" in words,
                         config)


@dataclass(frozen=True)
class CleaningResult:
    """What one round did to the cleanable range [log start, `end_offset`)."""

    partition: str
    segments_before: int
    segments_after: int
    end_offset: int
    records_before: int
    records_after: int
    bytes_before: int
    bytes_after: int


# -- planning (under the log's lock) ------------------------------------------------------

@dataclass
class Source:
    """A planned segment: the object the log held, its size and aborted transactions
    then, a private descriptor."""

    segment: LogSegment
    size: int
    fd: int
    aborted: list[AbortedTxn]
    largest_timestamp: int = -1


@dataclass
class Plan:
    """One round: the cleanable segments of `log` in merge groups, below `end_offset`."""

    log: PartitionLog
    groups: list[list[Source]]
    end_offset: int

    @property
    def sources(self) -> list[Source]:
        return [source for group in self.groups for source in group]

    def close(self) -> None:
        for source in self.sources:
            os.close(source.fd)


def plan_cleaning(log: PartitionLog, high_watermark: int | None,
                  config: CleanerConfig) -> Plan | None:
    """The round to run now, None if nothing is cleanable or too little of it is dirty.
    The caller holds the log's lock."""
    limit = log.log_end_offset if high_watermark is None else min(high_watermark,
                                                                  log.log_end_offset)
    cleanable: list[LogSegment] = []
    for segment, following in zip(log.segments, log.segments[1:], strict=False):
        if following.base_offset > limit:
            break
        cleanable.append(segment)
    total = sum(segment.size for segment in cleanable)
    dirty = sum(s.size for s in cleanable if s.base_offset >= log.first_dirty_offset)
    if not total or not dirty or dirty / total < config.min_cleanable_ratio:
        return None
    end_offset = log.segments[len(cleanable)].base_offset
    max_bytes = config.max_segment_bytes or log.config.segment_bytes
    sources = [Source(s, s.size, os.open(s.log_path, os.O_RDONLY), list(s.txn_index.entries))
               for s in cleanable]
    ends = [s.base_offset for s in log.segments[1:len(cleanable) + 1]]
    return Plan(log, group_segments(sources, ends, max_bytes), end_offset)


def group_segments(sources: list[Source], ends: list[int], max_bytes: int) -> list[list[Source]]:
    """Consecutive segments merged while their total size stays within `max_bytes` and
    their offsets within a segment's relative-offset range (`ends`: each one's next base)."""
    groups: list[list[Source]] = []
    size = 0
    for source, end in zip(sources, ends, strict=True):
        if (groups and size + source.size <= max_bytes
                and end - 1 - groups[-1][0].segment.base_offset <= MAX_RELATIVE_OFFSET):
            groups[-1].append(source)
            size += source.size
        else:
            groups.append([source])
            size = source.size
    return groups


# -- reading batches and records ----------------------------------------------------------

def iter_batches(fd: int, size: int) -> Iterator[tuple[bytes, tuple, bool]]:
    """(batch bytes, header, is the last batch) of every batch in the first `size` bytes of
    the file; CorruptRecordError on a bad frame or CRC (the cleaner never launders one)."""
    position = 0
    buf = b""
    buf_start = 0
    while position < size:
        if position - buf_start + HEADER_SIZE > len(buf):
            buf = os.pread(fd, min(READ_CHUNK, size - position), position)
            buf_start = position
        off = position - buf_start
        if off + HEADER_SIZE > len(buf):
            raise CorruptRecordError(f"truncated batch header at byte {position}")
        length = INT32.unpack_from(buf, off + 8)[0]
        stop = position + LOG_OVERHEAD + length
        if length < MIN_BATCH_LENGTH or stop > size:
            raise CorruptRecordError(f"bad batch length {length} at byte {position}")
        if stop - buf_start > len(buf):
            buf = os.pread(fd, max(READ_CHUNK, stop - position), position)
            buf_start, off = position, 0
        batch = buf[off:off + stop - position]
        if len(batch) != stop - position:
            raise CorruptRecordError(f"segment file shorter than planned at byte {position}")
        header = HEADER.unpack(batch[:HEADER_SIZE])
        if crc32c(batch[CRC_START:]) != header[H_CRC]:
            raise CorruptRecordError(f"CRC-32C mismatch in batch at offset {header[H_BASE]}")
        yield batch, header, stop == size
        position = stop


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a v2 batch: what the cleaner decides on, and its encoded bytes."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    is_tombstone: bool
    raw: bytes


DECOMPRESSORS: dict[int, tuple[Callable[[], bool], Callable[[bytes], bytes]]] = {
    1: (codec.has_gzip, codec.gzip_decode),
    2: (codec.has_snappy, codec.snappy_decode),
    3: (codec.has_lz4, codec.lz4_decode),
    4: (codec.has_zstd, codec.zstd_decode),
}


def decode_records(batch: bytes, header: tuple) -> list[Record] | None:
    """The records of a batch (decompressed with kafka-python's codecs); None if its codec
    is not installed here."""
    body = batch[HEADER_SIZE:]
    compression = header[H_ATTRS] & COMPRESSION_MASK
    if compression:
        available, decompress = DECOMPRESSORS.get(compression, (lambda: False, bytes))
        if not available():
            return None
        body = decompress(body)
    try:
        return parse_records(body, header[H_COUNT])
    except (IndexError, ValueError) as e:
        raise CorruptRecordError(f"bad records in batch at offset {header[H_BASE]}") from e


def parse_records(body: bytes, count: int) -> list[Record]:
    """Split the record section of a batch: length, attributes, timestampDelta, offsetDelta,
    key, value, headers; only the key and whether the value is null are kept apart."""
    records: list[Record] = []
    pos = 0
    for _ in range(count):
        length, start = decode_varint(body, pos)
        end = start + length
        timestamp_delta, p = decode_varint(body, start + 1)
        offset_delta, p = decode_varint(body, p)
        key_length, p = decode_varint(body, p)
        key = None if key_length < 0 else bytes(body[p:p + key_length])
        value_length, _ = decode_varint(body, p + max(key_length, 0))
        if end > len(body):
            raise ValueError("record beyond the batch")
        records.append(Record(offset_delta, timestamp_delta, key, value_length < 0,
                              bytes(body[pos:end])))
        pos = end
    if pos != len(body):
        raise ValueError(f"{len(body) - pos} bytes after the last record")
    return records


def rebuild_batch(header: tuple, records: Sequence[Record]) -> bytes:
    """The batch of `header` holding only `records`, uncompressed, with its offsets,
    timestamps base, leader epoch and producer fields unchanged."""
    body = b"".join(record.raw for record in records)
    fields = list(header)
    fields[H_LENGTH] = HEADER_SIZE - LOG_OVERHEAD + len(body)
    fields[H_CRC] = 0
    fields[H_ATTRS] = header[H_ATTRS] & ~COMPRESSION_MASK
    fields[H_COUNT] = len(records)
    if records and not header[H_ATTRS] & TIMESTAMP_TYPE_MASK:
        fields[H_MAX_TS] = header[H_BASE_TS] + max(r.timestamp_delta for r in records)
    buf = bytearray(HEADER.pack(*fields) + body)
    CRC.pack_into(buf, CRC_POS, crc32c(buf[CRC_START:]))
    return bytes(buf)


# -- rewriting (no lock: runs in an executor thread in the broker) --------------------------

@dataclass
class OffsetMap:
    """key -> offset of its latest record, and producer id -> base offset of its last batch,
    over the whole cleanable range."""

    latest: dict[bytes, int] = field(default_factory=dict)
    last_batch_of: dict[int, int] = field(default_factory=dict)

    def add(self, header: tuple, records: list[Record] | None) -> None:
        if header[H_PID] != NO_PRODUCER_ID:
            self.last_batch_of[header[H_PID]] = header[H_BASE]
        if records is None or header[H_ATTRS] & (CONTROL_MASK | TRANSACTIONAL_MASK):
            return
        for record in records:
            if record.key is not None:
                self.latest[record.key] = header[H_BASE] + record.offset_delta


def build_offset_map(plan: Plan) -> OffsetMap:
    """One pass over the cleanable range; also notes each segment's largest timestamp."""
    offsets = OffsetMap()
    for source in plan.sources:
        for batch, header, _ in iter_batches(source.fd, source.size):
            source.largest_timestamp = max(source.largest_timestamp, header[H_MAX_TS])
            verbatim = header[H_ATTRS] & (CONTROL_MASK | TRANSACTIONAL_MASK)
            offsets.add(header, None if verbatim else decode_records(batch, header))
    return offsets


def filter_batch(batch: bytes, header: tuple, offsets: OffsetMap, keep_tombstones: bool,
                 keep_empty: bool) -> tuple[bytes | None, int]:
    """(what to write for this batch, None to drop it; how many records it keeps)."""
    if header[H_ATTRS] & (CONTROL_MASK | TRANSACTIONAL_MASK):
        return batch, header[H_COUNT]
    records = decode_records(batch, header)
    if records is None:
        return batch, header[H_COUNT]
    base = header[H_BASE]
    kept = [r for r in records
            if r.key is None or (offsets.latest.get(r.key) == base + r.offset_delta
                                 and (keep_tombstones or not r.is_tombstone))]
    if records and len(kept) == len(records):
        return batch, len(kept)
    last_of_producer = (header[H_PID] != NO_PRODUCER_ID
                        and offsets.last_batch_of.get(header[H_PID]) == base)
    if not kept and not keep_empty and not last_of_producer:
        return None, 0
    return (batch if not records else rebuild_batch(header, kept)), len(kept)


@dataclass
class Cleaned:
    """The `.cleaned` files written for one group."""

    directory: Path
    base_offset: int
    records_before: int = 0
    records_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0

    def path(self, kind: str, suffix: str = "") -> Path:
        """`kind` is "log", "index" or "txnindex"."""
        return self.directory / f"{self.base_offset:020d}.{kind}{suffix}"

    def discard(self) -> None:
        for kind in ("log", "index", "txnindex"):
            self.path(kind, CLEANED_SUFFIX).unlink(missing_ok=True)


def write_cleaned(plan: Plan, config: CleanerConfig, now_ms: int,
                  on_step: StepHook | None = None) -> list[Cleaned]:
    """Build the offset map and write every group's `.cleaned` files (fsynced); on failure
    nothing is left behind. Closes the plan's descriptors (the swap needs none)."""
    outputs: list[Cleaned] = []
    try:
        offsets = build_offset_map(plan)
        for group in plan.groups:
            outputs.append(Cleaned(plan.log.directory, group[0].segment.base_offset))
            write_group(group, outputs[-1], offsets, config, now_ms,
                        plan.log.config.index_interval_bytes)
    except BaseException:
        for output in outputs:
            output.discard()
        raise
    finally:
        plan.close()
    if on_step:
        on_step("cleaned")
    return outputs


def write_group(group: list[Source], out: Cleaned, offsets: OffsetMap, config: CleanerConfig,
                now_ms: int, index_interval_bytes: int) -> None:
    """Write the kept batches of `group`, their sparse index (the rule of appends) and,
    if the group has aborted transactions, its transaction index."""
    index = OffsetIndex.create(out.path("index", CLEANED_SUFFIX), out.base_offset)
    fd = os.open(out.path("log", CLEANED_SUFFIX), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        since_index = 0
        mtime_ns = 0
        last_source = max((i for i, source in enumerate(group) if source.size), default=-1)
        for i, source in enumerate(group):
            stat = os.fstat(source.fd)
            mtime_ns = max(mtime_ns, stat.st_mtime_ns)
            age_from = (source.largest_timestamp if source.largest_timestamp > 0
                        else stat.st_mtime_ns // 1_000_000)
            keep_tombstones = now_ms - age_from <= config.delete_retention_ms
            for batch, header, last in iter_batches(source.fd, source.size):
                kept, count = filter_batch(batch, header, offsets, keep_tombstones,
                                           last and i == last_source)
                out.records_before += header[H_COUNT]
                out.bytes_before += len(batch)
                if kept is None:
                    continue
                if since_index > index_interval_bytes:
                    index.append(header[H_BASE] + header[H_DELTA], out.bytes_after)
                    since_index = 0
                since_index += len(kept)
                write_all(fd, kept)
                out.records_after += count
                out.bytes_after += len(kept)
        os.fsync(fd)
        index.flush()
    finally:
        os.close(fd)
        index.close()
    aborted = [entry for source in group for entry in source.aborted]
    if aborted:
        TransactionIndex(out.path("txnindex"), aborted).write_to(
            out.path("txnindex", CLEANED_SUFFIX))
    os.utime(out.path("log", CLEANED_SUFFIX), ns=(mtime_ns, mtime_ns))


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# -- swapping (under the log's lock) ----------------------------------------------------------

def install(plan: Plan, outputs: list[Cleaned], on_step: StepHook | None = None
            ) -> CleaningResult | None:
    """Swap the cleaned groups in if the log still holds the planned segments unchanged;
    otherwise discard them (None)."""
    log = plan.log
    with log.lock:
        planned = [source.segment for source in plan.sources]
        current = log.segments[:len(planned)]
        if (len(log.segments) <= len(planned)
                or any(a is not b for a, b in zip(current, planned, strict=True))
                or any(not source.segment.is_open or source.segment.size != source.size
                       for source in plan.sources)):
            for output in outputs:
                output.discard()
            logger.info("%s: cleaning round cancelled, the log changed meanwhile",
                        log.directory.name)
            return None
        for group, output in zip(plan.groups, outputs, strict=True):
            segment = swap_in(group, output, log.config.index_interval_bytes, on_step)
            log.replace_segments([source.segment for source in group], segment)
        log.first_dirty_offset = max(log.first_dirty_offset, plan.end_offset)
        return CleaningResult(
            log.directory.name, len(plan.sources), len(plan.groups), plan.end_offset,
            sum(o.records_before for o in outputs), sum(o.records_after for o in outputs),
            sum(o.bytes_before for o in outputs), sum(o.bytes_after for o in outputs))


def swap_in(group: list[Source], output: Cleaned, index_interval_bytes: int,
            on_step: StepHook | None) -> LogSegment:
    """Commit one group: `.cleaned` -> `.swap` (the log's rename is the commit point),
    delete the other segments, then the swap files replace the first segment's files."""
    step = on_step or (lambda _: None)
    directory = output.directory
    has_txn_index = output.path("txnindex", CLEANED_SUFFIX).exists()
    os.replace(output.path("index", CLEANED_SUFFIX), output.path("index", SWAP_SUFFIX))
    if has_txn_index:
        os.replace(output.path("txnindex", CLEANED_SUFFIX),
                   output.path("txnindex", SWAP_SUFFIX))
    os.replace(output.path("log", CLEANED_SUFFIX), output.path("log", SWAP_SUFFIX))
    fsync_dir(directory)
    step("swap")
    for source in group[1:]:
        source.segment.delete()
        step("deleted")
    group[0].segment.close()
    os.replace(output.path("index", SWAP_SUFFIX), output.path("index"))
    if has_txn_index:
        os.replace(output.path("txnindex", SWAP_SUFFIX), output.path("txnindex"))
    else:
        output.path("txnindex").unlink(missing_ok=True)
    os.replace(output.path("log", SWAP_SUFFIX), output.path("log"))
    fsync_dir(directory)
    step("replaced")
    segment, _ = LogSegment.open(directory, output.base_offset, index_interval_bytes, False,
                                 lambda _: None)
    return segment


# -- entry points ---------------------------------------------------------------------------

def clean_log(log: PartitionLog, high_watermark: int | None = None,
              config: CleanerConfig | None = None, now_ms: int | None = None,
              on_step: StepHook | None = None) -> CleaningResult | None:
    """One synchronous cleaning round; None if there was nothing to do or the log changed
    under it."""
    config = config or CleanerConfig()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    with log.lock:
        plan = plan_cleaning(log, high_watermark, config)
    if plan is None:
        return None
    result = install(plan, write_cleaned(plan, config, now_ms, on_step), on_step)
    report(result)
    return result


async def clean_log_async(log: PartitionLog, high_watermark: int | None,
                          config: CleanerConfig, loop: asyncio.AbstractEventLoop,
                          now_ms: int | None = None) -> CleaningResult | None:
    """A round for the event loop: planning and swap here, the rewriting in an executor
    (shielded: if the round is cancelled, the rewriting finishes and its files are removed)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    with log.lock:
        plan = plan_cleaning(log, high_watermark, config)
    if plan is None:
        return None
    rewriting = loop.run_in_executor(None, write_cleaned, plan, config, now_ms)
    try:
        outputs = await asyncio.shield(rewriting)
    except asyncio.CancelledError:
        rewriting.add_done_callback(discard_outputs)
        raise
    result = install(plan, outputs)
    report(result)
    return result


def discard_outputs(rewriting: asyncio.Future[list[Cleaned]]) -> None:
    if not rewriting.cancelled() and rewriting.exception() is None:
        for output in rewriting.result():
            output.discard()


def report(result: CleaningResult | None) -> None:
    if result is None:
        return
    logger.info("%s: cleaned %d segments into %d below offset %d: records %d -> %d, "
                "bytes %d -> %d", result.partition, result.segments_before,
                result.segments_after, result.end_offset, result.records_before,
                result.records_after, result.bytes_before, result.bytes_after)
