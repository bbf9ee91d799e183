"""PartitionLog: the log of one topic-partition, a directory of segments."""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kafka.record import MemoryRecords

from .checkpoints import fsync_dir
from .epoch_cache import LeaderEpochCache
from .errors import (
    DuplicateSequenceError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    StaleLeaderEpochError,
    UnexpectedAppendOffsetError,
)
from .markers import build_marker_batch
from .producer_replay import load_producer_state, stage_batch
from .producer_snapshot import delete_all_snapshots, delete_snapshots_below, write_snapshot
from .producer_state import ProducerAppend, ProducerStateManager
from .records import (
    CONTROL_MASK,
    H_ATTRS,
    H_BASE,
    H_COUNT,
    H_DELTA,
    H_EPOCH,
    H_LENGTH,
    H_MAX_TS,
    H_PID,
    LOG_OVERHEAD,
    check_leader_batch,
    patch,
    scan,
)
from .segment import MAX_RELATIVE_OFFSET, LogSegment, parse_base_offset
from .swaps import CLEANED_SUFFIX, SWAP_SUFFIX, complete_interrupted_swaps

__all__ = ["AppendInfo", "LogConfig", "PartitionLog"]

STRAY_SUFFIXES = (".tmp", ".deleted", CLEANED_SUFFIX, SWAP_SUFFIX)


@dataclass(frozen=True)
class LogConfig:
    """Kafka's log.* settings that the storage layer honours."""

    segment_bytes: int = 1 << 30
    index_interval_bytes: int = 4096
    retention_bytes: int = -1
    retention_ms: int = 7 * 24 * 3600 * 1000
    flush_messages: int | None = None  # flush.messages: fsync after this many; None: never
    flush_ms: int | None = None  # flush.ms: fsync when the last flush is this old; None: never

    def __post_init__(self) -> None:
        if not 14 <= self.segment_bytes <= (1 << 31) - 1:
            raise ValueError(f"log.segment.bytes must be in [14, 2^31-1]: {self.segment_bytes}")
        if self.index_interval_bytes < 0:
            raise ValueError(
                f"log.index.interval.bytes must be >= 0: {self.index_interval_bytes}")
        if self.flush_messages is not None and self.flush_messages < 1:
            raise ValueError(f"flush messages must be >= 1 or None: {self.flush_messages}")
        if self.flush_ms is not None and self.flush_ms < 1:
            raise ValueError(f"flush ms must be >= 1 or None: {self.flush_ms}")


@dataclass(frozen=True)
class AppendInfo:
    """What an append wrote: offsets [first_offset, last_offset] and `record_count` records
    (a follower append of nothing gives first_offset = log end offset, last = first - 1)."""

    first_offset: int
    last_offset: int
    record_count: int
    max_timestamp: int
    log_append_time: int = -1
    duplicate: bool = False  # a retried producer batch: its offsets from the first time


class PartitionLog:
    """Segments `<20-digit base offset>.log`/`.index`/`.txnindex`, `leader-epoch-checkpoint`
    and producer-state snapshots `<20-digit offset>.snapshot`.

    Thread-safe (one lock, `lock`); appends parse batch headers only and never decode
    records, except the one record of a control batch. Every append, truncation and
    recovery keeps `producer_state` (producer_state.py) in step with the batches; a snapshot
    of it is written at each roll and on flush and close, and opening or truncating loads
    the latest one below the log end and replays the batch headers after it. An abort
    marker adds an entry to its segment's aborted-transaction index. Compaction (cleaner.py,
    which works on a log) rewrites closed segments and swaps them in under the lock;
    `first_dirty_offset` is where the last cleaning round ended.
    """

    def __init__(self, directory: Path, config: LogConfig, segments: list[LogSegment],
                 epoch_cache: LeaderEpochCache, recovery_point: int) -> None:
        self.directory = directory
        self.config = config
        self.segments = segments
        self._bases = [segment.base_offset for segment in segments]
        self.epoch_cache = epoch_cache
        self.log_start_offset = segments[0].base_offset
        self.recovery_point = recovery_point
        self.first_dirty_offset = self.log_start_offset
        self.producer_state = ProducerStateManager()
        self.last_snapshot_offset: int | None = None
        self._unflushed_messages = 0
        self.last_flush_ms = time.monotonic() * 1000.0
        # called under the log's lock whenever the recovery point moved (a flush, a roll, a
        # truncation below it), so that it can be made durable at once (LogManager)
        self.on_recovery_point: Callable[[PartitionLog], None] | None = None
        self._lock = threading.RLock()

    @classmethod
    def open(cls, directory: Path, config: LogConfig, recovery_point: int = 0) -> PartitionLog:
        """Open or create the log in `directory`. Segments holding offsets at or beyond
        `recovery_point` (and any whose index is missing or insane, or whose tail is torn)
        are validated batch by batch; the first invalid batch and everything after it are
        cut, as are the segments after a recovered one that does not end where the next
        begins (lost data); the transaction indexes of the validated segments are rebuilt
        with the producer state. A compaction swap a crash interrupted is completed first."""
        directory.mkdir(parents=True, exist_ok=True)
        complete_interrupted_swaps(directory)
        bases: set[int] = set()
        for path in directory.iterdir():
            if path.suffix in STRAY_SUFFIXES:
                path.unlink()
            elif path.suffix == ".log" and (base := parse_base_offset(path.name)) is not None:
                bases.add(base)
        for path in [*directory.glob("*.index"), *directory.glob("*.txnindex")]:
            if parse_base_offset(path.name) not in bases:
                path.unlink()
        cache, cache_usable = LeaderEpochCache.load(directory)
        changed = not cache_usable

        def on_batch(header: tuple) -> None:
            nonlocal changed
            epoch = header[H_EPOCH]
            if epoch >= 0 and (cache.latest_epoch is None or epoch > cache.latest_epoch):
                changed |= cache.put(epoch, header[H_BASE])

        segments: list[LogSegment] = []
        ordered = sorted(bases)
        for i, base in enumerate(ordered):
            following = ordered[i + 1] if i + 1 < len(ordered) else None
            recover = following is not None and following > recovery_point
            segment, cut = LogSegment.open(directory, base, config.index_interval_bytes,
                                           recover, on_batch)
            if (following is None and not segment.recovered
                    and segment.next_offset > recovery_point):
                segment.close()  # the active segment holds unflushed batches
                segment, cut = LogSegment.open(directory, base, config.index_interval_bytes,
                                               True, on_batch)
            if not segment.recovered and not cache_usable:
                for _, header in segment.walk():
                    on_batch(header)
            segments.append(segment)
            if cut or (segment.recovered and following is not None
                       and segment.next_offset != following):
                for later in ordered[i + 1:]:
                    LogSegment.remove_files(directory, later)
                break
        if not segments:
            segments.append(LogSegment.create(directory, 0, config.index_interval_bytes))
            fsync_dir(directory)
        log = cls(directory, config, segments, cache, recovery_point)
        recovered = [segment for segment in segments if segment.recovered]
        for segment in recovered:
            segment.flush()
        if recovered:
            log.recovery_point = log.log_end_offset
        log.recovery_point = min(log.recovery_point, log.log_end_offset)
        log._load_producer_state(recovered)
        if changed:
            cache.flush()
        cache.truncate_from_end(log.log_end_offset)
        cache.truncate_from_start(log.log_start_offset)
        return log

    # -- state ----------------------------------------------------------------------------

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def latest_epoch(self) -> int | None:
        return self.epoch_cache.latest_epoch

    @property
    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self.segments)

    # -- appends --------------------------------------------------------------------------

    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int,
                         fence_producer_epochs: bool = True,
                         from_client: bool = False) -> AppendInfo:
        """Validate (framing, magic 2, CRC-32C, counts), check producer batches against the
        producer state (ProducerStateError; a lone retried batch is answered with its first
        offsets, `duplicate`), assign offsets from the log end offset, stamp `leader_epoch`
        into every batch, append. An epoch below the latest known one raises
        StaleLeaderEpochError (the cache would lose newer epochs). `fence_producer_epochs`
        off accepts batches and markers of older producer epochs (a seeded defect);
        `from_client` refuses control batches (only the coordinator writes markers)."""
        batches = scan(records, verify_crc=True, partial_tail_ok=False)
        if not batches:
            raise InvalidRecordError("a produce request needs at least one record batch")
        for pos, header in batches:
            check_leader_batch(pos, header)
            if from_client and header[H_ATTRS] & CONTROL_MASK:
                raise InvalidRecordError(f"batch at byte {pos}: clients may not write "
                                         "control batches")
        buf = bytearray(records)
        with self._lock:
            latest = self.epoch_cache.latest_epoch
            if latest is not None and 0 <= leader_epoch < latest:
                raise StaleLeaderEpochError(
                    f"append with leader epoch {leader_epoch}, the log has epoch {latest}")
            first = offset = self.log_end_offset
            entries = []
            count = 0
            max_ts = -1
            producers: ProducerAppend | None = None
            for pos, header in batches:
                patch(buf, pos, offset, leader_epoch)
                last = offset + header[H_DELTA]
                if header[H_PID] >= 0:
                    producers = producers or self.producer_state.begin(
                        True, fence_producer_epochs)
                    duplicate = stage_batch(producers, buf, pos, header, offset)
                    if duplicate is not None:
                        if len(batches) > 1:
                            raise DuplicateSequenceError(
                                f"batch at byte {pos} of producer {header[H_PID]} was "
                                f"appended at offset {duplicate.base_offset}")
                        return AppendInfo(duplicate.base_offset, duplicate.last_offset,
                                          header[H_COUNT], header[H_MAX_TS], duplicate=True)
                entries.append((pos, LOG_OVERHEAD + header[H_LENGTH], last, header[H_MAX_TS]))
                offset = last + 1
                count += header[H_COUNT]
                max_ts = max(max_ts, header[H_MAX_TS])
            if leader_epoch >= 0:
                self.epoch_cache.assign(leader_epoch, first)
            self._append(buf, entries, count)
            self._commit_producers(producers)
            return AppendInfo(first, offset - 1, count, max_ts)

    def append_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                          coordinator_epoch: int, leader_epoch: int,
                          fence_producer_epochs: bool = True) -> AppendInfo:
        """Append a transaction marker for `producer_id` as leader (Kafka's
        appendAsLeader with origin Coordinator): InvalidProducerEpochError for an older
        producer epoch, CoordinatorFencedError for an older coordinator epoch."""
        batch = build_marker_batch(producer_id, producer_epoch, commit, coordinator_epoch,
                                   int(time.time() * 1000))
        return self.append_as_leader(batch, leader_epoch, fence_producer_epochs)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Append batches replicated from the leader as they are (offsets and epochs already
        set). They must not start below the log end offset (above it when compaction removed
        the offsets in between on the leader); an incomplete last batch is ignored."""
        batches = scan(records, verify_crc=True, partial_tail_ok=True)
        with self._lock:
            first = self.log_end_offset
            if not batches:
                return AppendInfo(first, first - 1, 0, -1)
            if batches[0][1][H_BASE] < first:
                raise UnexpectedAppendOffsetError(
                    f"follower batches start at offset {batches[0][1][H_BASE]}, "
                    f"the log ends at {first}")
            expected = first
            entries = []
            count = 0
            max_ts = -1
            producers: ProducerAppend | None = None
            for pos, header in batches:
                if header[H_BASE] < expected:
                    raise InvalidRecordError(
                        f"batch at byte {pos} starts at offset {header[H_BASE]}, "
                        f"below {expected}")
                if header[H_PID] >= 0:
                    producers = producers or self.producer_state.begin(False)
                    stage_batch(producers, records, pos, header, header[H_BASE])
                size = LOG_OVERHEAD + header[H_LENGTH]
                last = header[H_BASE] + header[H_DELTA]
                entries.append((pos, size, last, header[H_MAX_TS]))
                expected = last + 1
                count += header[H_COUNT]
                max_ts = max(max_ts, header[H_MAX_TS])
            for _, header in batches:
                if header[H_EPOCH] >= 0:
                    self.epoch_cache.assign(header[H_EPOCH], header[H_BASE])
            pos, header = batches[-1]
            end = pos + LOG_OVERHEAD + header[H_LENGTH]
            self._append(memoryview(records)[:end], entries, count)
            self._commit_producers(producers)
            return AppendInfo(first, expected - 1, count, max_ts)

    def _commit_producers(self, producers: ProducerAppend | None) -> None:
        """Apply an append's producer changes; its aborts go to the segment holding it."""
        if producers is not None:
            for aborted in self.producer_state.commit(producers):
                self.active_segment.txn_index.append(aborted)

    def _append(self, data: bytearray | memoryview, entries: list[tuple[int, int, int, int]],
                count: int) -> None:
        segment = self.active_segment
        if segment.size and (segment.size + len(data) > self.config.segment_bytes
                             or entries[-1][2] - segment.base_offset > MAX_RELATIVE_OFFSET):
            segment = self.roll()
        segment.append(data, entries)
        self._unflushed_messages += count
        if (self.config.flush_messages is not None
                and self._unflushed_messages >= self.config.flush_messages):
            self._flush_active()

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is
        empty); the old one is fsynced, so the recovery point moves to the log end offset,
        and the producer state is snapshotted there."""
        with self._lock:
            active = self.active_segment
            if active.size == 0:
                return active
            active.flush()
            self._snapshot_producers()
            segment = LogSegment.create(self.directory, self.log_end_offset,
                                        self.config.index_interval_bytes)
            fsync_dir(self.directory)
            self.segments.append(segment)
            self._bases.append(segment.base_offset)
            self._flushed(segment.base_offset)
            return segment

    def assign_epoch_start_offset(self, epoch: int, start_offset: int | None = None) -> None:
        """Record that `epoch` starts at `start_offset` (default: the log end offset), as a
        new leader does before its first append (Kafka's maybeAssignEpochStartOffset)."""
        with self._lock:
            self.epoch_cache.assign(
                epoch, self.log_end_offset if start_offset is None else start_offset)

    # -- reads ----------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """Whole batches from the one holding `start_offset`, up to `max_bytes` (at least one
        batch if any, KIP-74), none reaching `max_offset` (exclusive)."""
        with self._lock:
            if not self.log_start_offset <= start_offset <= self.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"offset {start_offset} outside [{self.log_start_offset}, "
                    f"{self.log_end_offset}] of {self.directory.name}")
            if start_offset == self.log_end_offset or (
                    max_offset is not None and start_offset >= max_offset):
                return b""
            parts: list[bytes] = []
            remaining = max_bytes
            i = max(bisect_right(self._bases, start_offset) - 1, 0)
            position: int | None = None
            for segment in self.segments[i:]:
                if position is None:
                    found = segment.find(start_offset)
                    if found is None:
                        continue
                    position = found[0]
                data, at_end = segment.read(position, remaining, max_offset, not parts)
                if data:
                    parts.append(data)
                    remaining -= len(data)
                if not at_end or remaining <= 0:
                    break
                position = 0
            return b"".join(parts)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """Offset of the first record with a timestamp >= `timestamp`, None if there is none.
        Finds the batch from headers; decodes only that batch."""
        with self._lock:
            for segment in self.segments:
                if segment.largest_timestamp() < timestamp:
                    continue
                for position, header in segment.walk():
                    if header[H_MAX_TS] >= timestamp:
                        data, _ = segment.read(position, 0, None, True)
                        return max(self.log_start_offset,
                                   first_offset_at(data, timestamp, header[H_BASE]))
            return None

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """KIP-101/KIP-279: (largest epoch <= `epoch`, its end offset); see LeaderEpochCache."""
        with self._lock:
            return self.epoch_cache.end_offset_for(epoch, self.log_end_offset)

    # -- truncation and retention ---------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop every batch holding an offset >= `offset` (a batch straddling it goes whole,
        so the log end offset may end below `offset`)."""
        with self._lock:
            if offset >= self.log_end_offset:
                return
            if offset <= self.segments[0].base_offset:
                self.truncate_fully_and_start_at(offset)
                return
            keep = bisect_right(self._bases, offset)
            for segment in self.segments[keep:]:
                segment.delete()
            del self.segments[keep:]
            del self._bases[keep:]
            self.active_segment.truncate_to(offset)
            self.epoch_cache.truncate_from_end(self.log_end_offset)
            self._set_recovery_point(min(self.recovery_point, self.log_end_offset))
            self.first_dirty_offset = min(self.first_dirty_offset, self.log_end_offset)
            self._load_producer_state()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything, producer snapshots included; the log restarts empty at
        `offset` (a follower whose log end is below the leader's log start offset)."""
        with self._lock:
            for segment in self.segments:
                segment.delete()
            delete_all_snapshots(self.directory)
            self.producer_state = ProducerStateManager()
            self.last_snapshot_offset = None
            self.segments = [LogSegment.create(self.directory, offset,
                                               self.config.index_interval_bytes)]
            fsync_dir(self.directory)
            self._bases = [offset]
            self.epoch_cache.clear()
            self.log_start_offset = offset
            self._set_recovery_point(offset)
            self.first_dirty_offset = offset

    def delete_old_segments(self, high_watermark: int | None = None,
                            now_ms: int | None = None) -> int:
        """Retention: delete whole old segments past log.retention.ms (by their largest
        timestamp, else mtime) or beyond log.retention.bytes, never one holding offsets at or
        above `high_watermark`, and the producer snapshots below the new log start offset
        but the latest. Returns how many segments were deleted."""
        with self._lock:
            now_ms = int(time.time() * 1000) if now_ms is None else now_ms
            deleted = 0
            if self.config.retention_ms >= 0:
                deleted += self._delete_leading(
                    lambda s: now_ms - self._segment_time(s) > self.config.retention_ms,
                    high_watermark)
            if self.config.retention_bytes >= 0:
                excess = self.size_in_bytes - self.config.retention_bytes

                def over_size(segment: LogSegment) -> bool:
                    nonlocal excess
                    if excess - segment.size < 0:
                        return False
                    excess -= segment.size
                    return True

                deleted += self._delete_leading(over_size, high_watermark)
            return deleted

    @staticmethod
    def _segment_time(segment: LogSegment) -> int:
        largest = segment.largest_timestamp()
        return largest if largest > 0 else segment.last_modified_ms()

    def _delete_leading(self, predicate, high_watermark: int | None) -> int:
        limit = self.log_end_offset if high_watermark is None else min(
            high_watermark, self.log_end_offset)
        count = 0
        for i, segment in enumerate(self.segments):
            last = i == len(self.segments) - 1
            upper = self.log_end_offset if last else self._bases[i + 1]
            if upper > limit or (last and segment.size == 0) or not predicate(segment):
                break
            count += 1
        if not count:
            return 0
        if count == len(self.segments):
            self.roll()
        for segment in self.segments[:count]:
            segment.delete()
        del self.segments[:count]
        del self._bases[:count]
        self.log_start_offset = max(self.log_start_offset, self._bases[0])
        self.epoch_cache.truncate_from_start(self.log_start_offset)
        delete_snapshots_below(self.directory, self.log_start_offset)
        return count

    # -- compaction -----------------------------------------------------------------------

    def replace_segments(self, old: list[LogSegment], new: LogSegment) -> None:
        """Put `new` where the consecutive segments `old` were (the cleaner's swap; the
        caller holds the lock and has checked that they are still here)."""
        with self._lock:
            i = next(i for i, segment in enumerate(self.segments) if segment is old[0])
            self.segments[i:i + len(old)] = [new]
            self._bases[i:i + len(old)] = [new.base_offset]

    # -- transactions ---------------------------------------------------------------------

    def last_stable_offset(self, high_watermark: int) -> int:
        """min(`high_watermark`, first offset of a transaction that is open or whose marker
        is not yet below it)."""
        with self._lock:
            first = self.producer_state.first_unstable_offset(high_watermark)
            return high_watermark if first is None else min(first, high_watermark)

    def on_high_watermark(self, high_watermark: int) -> None:
        """The partition's HW moved: transactions whose markers are below it are stable."""
        with self._lock:
            self.producer_state.on_high_watermark(high_watermark)

    def collect_aborted_transactions(self, start_offset: int,
                                     upper_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping
        [start_offset, upper_offset): from the segment holding `start_offset` on, until an
        entry's LSO reaches `upper_offset` (Kafka's collectAbortedTransactions)."""
        with self._lock:
            found: list[tuple[int, int]] = []
            i = max(bisect_right(self._bases, start_offset) - 1, 0)
            for segment in self.segments[i:]:
                entries, complete = segment.txn_index.collect(start_offset, upper_offset)
                found.extend((entry.producer_id, entry.first_offset) for entry in entries)
                if complete:
                    break
            return found

    def _load_producer_state(self, rebuild: list[LogSegment] | None = None) -> None:
        """Producer state from the latest usable snapshot and the batches after it; the
        `rebuild` segments get their aborted-transaction entries again."""
        self.producer_state, self.last_snapshot_offset = load_producer_state(
            self.directory, self.segments, self.log_start_offset, rebuild or ())

    def _snapshot_producers(self) -> None:
        """Snapshot the producer state at the log end offset (the caller holds the lock)."""
        write_snapshot(self.directory, self.log_end_offset,
                       self.producer_state.producers.values())
        self.producer_state.dirty = False
        self.last_snapshot_offset = self.log_end_offset

    def delete_snapshots_before_recovery_point(self) -> None:
        """After the recovery point is checkpointed, as Kafka: keep the snapshots from the
        segment holding the recovery point or the one before the active segment, whichever
        is lower (recovery starts from one of those)."""
        with self._lock:
            i = max(bisect_right(self._bases, self.recovery_point) - 1, 0)
            delete_snapshots_below(self.directory, min(
                self._bases[i], self._bases[max(len(self._bases) - 2, 0)]))

    # -- durability -----------------------------------------------------------------------

    def flush(self) -> None:
        """fsync the active segment, so the recovery point becomes the log end offset;
        snapshot the producer state if it changed."""
        with self._lock:
            self._flush_active()
            if self.producer_state.dirty:
                self._snapshot_producers()

    def flush_if_due(self, now_ms: float | None = None) -> bool:
        """Kafka's log flusher: flush when `flush_ms` has passed since the last flush and
        something is unflushed; True if it flushed."""
        with self._lock:
            now_ms = time.monotonic() * 1000.0 if now_ms is None else now_ms
            if (self.config.flush_ms is None or self.recovery_point >= self.log_end_offset
                    or now_ms - self.last_flush_ms < self.config.flush_ms):
                return False
            self.flush()
            return True

    def _flush_active(self) -> None:
        self.active_segment.flush()
        self._flushed(self.log_end_offset)

    def _flushed(self, offset: int) -> None:
        """Everything below `offset` is fsynced: it is the recovery point now."""
        self._unflushed_messages = 0
        self.last_flush_ms = time.monotonic() * 1000.0
        self._set_recovery_point(offset)

    def _set_recovery_point(self, offset: int) -> None:
        moved = offset != self.recovery_point
        self.recovery_point = offset
        if moved and self.on_recovery_point is not None:
            self.on_recovery_point(self)

    def close(self) -> None:
        """Flush, snapshot the producer state at the log end offset, close the files."""
        with self._lock:
            self._flush_active()
            if self.producer_state.dirty or self.last_snapshot_offset != self.log_end_offset:
                self._snapshot_producers()
            for segment in self.segments:
                segment.close()


def first_offset_at(batch: bytes, timestamp: int, base_offset: int) -> int:
    """Offset of the first record of `batch` with a timestamp >= `timestamp`; the batch's
    base offset if its records cannot be decoded here (e.g. a missing codec)."""
    try:
        decoded = MemoryRecords(batch).next_batch()
        for record in decoded:
            if record.timestamp >= timestamp:
                return record.offset
    except Exception:
        return base_offset
    return base_offset
