"""One log segment: `<20-digit base offset>.log` (batches back to back), its `.index` and
its aborted-transaction index `.txnindex`."""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from crc32c import crc32c

from .index import OffsetIndex
from .records import (
    CRC_START,
    H_BASE,
    H_CRC,
    H_DELTA,
    H_LENGTH,
    H_MAGIC,
    H_MAX_TS,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    PREFIX,
    PREFIX_SIZE,
)
from .txn_index import TransactionIndex, txn_index_path

__all__ = ["LogSegment", "log_file_name", "parse_base_offset"]

MAX_RELATIVE_OFFSET = (1 << 31) - 1
SCAN_CHUNK = 64 * 1024


def log_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def parse_base_offset(name: str) -> int | None:
    """Base offset of a segment file name such as `00000000000000000042.log`, else None."""
    stem, _, suffix = name.partition(".")
    if len(stem) == 20 and stem.isdigit() and suffix in ("log", "index", "txnindex"):
        return int(stem)
    return None


class LogSegment:
    """Appends go to the end of the `.log` file (O_APPEND); reads use pread."""

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int,
                 index: OffsetIndex, size: int) -> None:
        self.base_offset = base_offset
        self.log_path = directory / log_file_name(base_offset)
        self.index = index
        self.txn_index = TransactionIndex(txn_index_path(directory, base_offset))
        self.index_interval_bytes = index_interval_bytes
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = size
        self.next_offset = base_offset
        self.bytes_since_index = size - index.last_position()
        self._largest_timestamp: int | None = -1 if size == 0 else None
        self.end_of_walk = 0
        self.recovered = False

    @classmethod
    def create(cls, directory: Path, base_offset: int, index_interval_bytes: int) -> LogSegment:
        path = directory / log_file_name(base_offset)
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644))
        index = OffsetIndex.create(path.with_suffix(".index"), base_offset)
        segment = cls(directory, base_offset, index_interval_bytes, index, 0)
        segment.txn_index.reset()
        return segment

    @classmethod
    def open(cls, directory: Path, base_offset: int, index_interval_bytes: int,
             recover: bool, on_batch: Callable[[tuple], None]) -> tuple[LogSegment, int]:
        """Open an existing segment. Without `recover` the indexes are trusted if they are
        sane and the log ends on a batch boundary; otherwise (or if not) every batch is
        validated, the offset index rebuilt, an invalid tail cut and the transaction index
        emptied (`recovered`: the log rebuilds it from its producer state). Returns the
        segment and the bytes cut."""
        path = directory / log_file_name(base_offset)
        size = path.stat().st_size
        index_path = path.with_suffix(".index")
        if not recover:
            index = OffsetIndex.load(index_path, base_offset, size)
            txn_index = TransactionIndex.load(txn_index_path(directory, base_offset),
                                              base_offset)
            if index is not None and txn_index is not None:
                segment = cls(directory, base_offset, index_interval_bytes, index, size)
                segment.txn_index = txn_index
                if segment._load_next_offset():
                    return segment, 0
                segment.close()
        index = OffsetIndex.create(index_path, base_offset)
        segment = cls(directory, base_offset, index_interval_bytes, index, size)
        segment.txn_index.reset()
        segment.recovered = True
        return segment, segment._recover(on_batch)

    @staticmethod
    def remove_files(directory: Path, base_offset: int) -> None:
        path = directory / log_file_name(base_offset)
        path.unlink(missing_ok=True)
        path.with_suffix(".index").unlink(missing_ok=True)
        txn_index_path(directory, base_offset).unlink(missing_ok=True)

    def _load_next_offset(self) -> bool:
        """Find the next offset from the last index entry; False if the tail is not clean."""
        for _, header in self.walk(self.index.last_position()):
            self.next_offset = header[H_BASE] + header[H_DELTA] + 1
        return self.end_of_walk == self.size

    def _recover(self, on_batch: Callable[[tuple], None]) -> int:
        """Validate every batch (framing, CRC-32C, increasing offsets), rebuild the index,
        cut everything from the first invalid batch on."""
        valid = 0
        next_offset = self.base_offset
        largest = -1
        last_index_position = 0
        if self.size:
            with mmap.mmap(self._fd, self.size, access=mmap.ACCESS_READ) as mapped:
                view = memoryview(mapped)
                try:
                    while self.size - valid >= HEADER_SIZE:
                        header = HEADER.unpack_from(view, valid)
                        stop = valid + LOG_OVERHEAD + header[H_LENGTH]
                        last = header[H_BASE] + header[H_DELTA]
                        if (header[H_MAGIC] != 2 or header[H_LENGTH] < MIN_BATCH_LENGTH
                                or stop > self.size or header[H_DELTA] < 0
                                or header[H_BASE] < next_offset
                                or last - self.base_offset > MAX_RELATIVE_OFFSET
                                or crc32c(view[valid + CRC_START:stop]) != header[H_CRC]):
                            break
                        if valid - last_index_position > self.index_interval_bytes:
                            self.index.append(last, valid)
                            last_index_position = valid
                        on_batch(header)
                        largest = max(largest, header[H_MAX_TS])
                        next_offset = last + 1
                        valid = stop
                finally:
                    view.release()
        cut = self.size - valid
        if cut:
            os.ftruncate(self._fd, valid)
        self.size = valid
        self.next_offset = next_offset
        self.bytes_since_index = valid - last_index_position
        self._largest_timestamp = largest
        return cut

    def walk(self, position: int = 0) -> Iterator[tuple[int, tuple]]:
        """(position, header) of each whole batch from `position` on, headers only (no CRC):
        reads in chunks, or header by header once batches are large. Stops early at anything
        that is not a batch; `end_of_walk` tells where it stopped."""
        end = self.size
        buf = b""
        buf_start = position
        chunk = SCAN_CHUNK
        self.end_of_walk = position
        while position + HEADER_SIZE <= end:
            off = position - buf_start
            if off + HEADER_SIZE > len(buf):
                buf = os.pread(self._fd, min(chunk, end - position), position)
                buf_start, off = position, 0
                if len(buf) < HEADER_SIZE:
                    return
            header = HEADER.unpack_from(buf, off)
            stop = position + LOG_OVERHEAD + header[H_LENGTH]
            if header[H_MAGIC] != 2 or header[H_LENGTH] < MIN_BATCH_LENGTH or stop > end:
                return
            yield position, header
            chunk = HEADER_SIZE if stop - position > SCAN_CHUNK // 16 else SCAN_CHUNK
            position = stop
            self.end_of_walk = position

    def append(self, data: bytes | bytearray | memoryview,
               batches: list[tuple[int, int, int, int]]) -> None:
        """Append `data`; `batches` are its (position in data, size, last offset, max timestamp)."""
        start = self.size
        for pos, size, last, max_ts in batches:
            if self.bytes_since_index > self.index_interval_bytes:
                self.index.append(last, start + pos)
                self.bytes_since_index = 0
            self.bytes_since_index += size
            if self._largest_timestamp is not None and max_ts > self._largest_timestamp:
                self._largest_timestamp = max_ts
        view = memoryview(data)
        written = 0
        try:
            while written < len(view):
                written += os.write(self._fd, view[written:])
        except OSError:
            os.ftruncate(self._fd, start)
            self.index.truncate_to_position(start)
            raise
        self.size = start + written
        self.next_offset = batches[-1][2] + 1

    def read_at(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def find(self, offset: int) -> tuple[int, tuple] | None:
        """(position, header) of the first batch whose last offset is >= `offset`."""
        for position, header in self.walk(self.index.lookup(offset)):
            if header[H_BASE] + header[H_DELTA] >= offset:
                return position, header
        return None

    def read(self, position: int, max_bytes: int, max_offset: int | None,
             at_least_one: bool) -> tuple[bytes, bool]:
        """Whole batches from `position`, at most `max_bytes` (but one batch anyway if
        `at_least_one`), none with an offset >= `max_offset`. Returns (bytes, reached the end
        of the segment)."""
        end = self.size
        want = min(max(max_bytes, PREFIX_SIZE), end - position)
        if want <= 0:
            return b"", True
        buf = os.pread(self._fd, want, position)
        used = 0
        while used + PREFIX_SIZE <= len(buf):
            base, length, *_, delta = PREFIX.unpack_from(buf, used)
            if max_offset is not None and base + delta >= max_offset:
                return buf[:used], False
            size = LOG_OVERHEAD + length
            if used + size > len(buf):
                if used == 0 and at_least_one:
                    return os.pread(self._fd, size, position), position + size >= end
                break
            used += size
        return (buf if used == len(buf) else buf[:used]), position + used >= end

    def largest_timestamp(self) -> int:
        """Largest batch max timestamp in the segment (-1 if none), computed once if unknown."""
        if self._largest_timestamp is None:
            largest = -1
            for _, header in self.walk():
                largest = max(largest, header[H_MAX_TS])
            self._largest_timestamp = largest
        return self._largest_timestamp

    @property
    def is_open(self) -> bool:
        return self._fd >= 0

    def last_modified_ms(self) -> int:
        return int(os.fstat(self._fd).st_mtime * 1000)

    def truncate_to(self, offset: int) -> None:
        """Drop the batch containing `offset` and everything after it."""
        found = self.find(offset)
        if found is None:
            return
        position, header = found
        os.ftruncate(self._fd, position)
        self.index.truncate_to_position(position)
        self.size = position
        self.next_offset = min(offset, header[H_BASE])
        self.txn_index.truncate_to(self.next_offset)
        self.bytes_since_index = position - self.index.last_position()
        self._largest_timestamp = None if position else -1

    def flush(self) -> None:
        os.fsync(self._fd)
        self.index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.index.close()
        self.txn_index.close()

    def delete(self) -> None:
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.index.path.unlink(missing_ok=True)
        self.txn_index.path.unlink(missing_ok=True)
