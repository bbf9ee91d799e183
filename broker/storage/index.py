"""Sparse offset index of one segment: Kafka's `.index` file.

Each 8-byte entry is (relative offset int32, position int32): the last offset of a batch minus
the segment's base offset, and the byte position where that batch starts in the `.log` file.
An entry is added before a batch once more than `log.index.interval.bytes` were written since
the previous one, so the same bytes come out of appends and of a rebuild during recovery.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right
from pathlib import Path

__all__ = ["OffsetIndex"]

ENTRY = struct.Struct(">ii")
ENTRY_SIZE = ENTRY.size


class OffsetIndex:
    """In-memory copy of the entries plus an append-only file; lookups by binary search."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.offsets = array("q")
        self.positions = array("q")
        self._fd: int | None = None

    @classmethod
    def load(cls, path: Path, base_offset: int, log_size: int) -> OffsetIndex | None:
        """Read an existing index; None if it is missing or fails the sanity checks
        (torn entry, offsets or positions not increasing, a position beyond the log)."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(data) % ENTRY_SIZE:
            return None
        index = cls(path, base_offset)
        last_offset, last_position = -1, -1
        for relative, position in ENTRY.iter_unpack(data):
            if relative <= last_offset or position <= last_position or position >= log_size:
                return None
            index.offsets.append(base_offset + relative)
            index.positions.append(position)
            last_offset, last_position = relative, position
        return index

    @classmethod
    def create(cls, path: Path, base_offset: int) -> OffsetIndex:
        """A new empty index, truncating any file at `path`."""
        index = cls(path, base_offset)
        index._open(truncate=True)
        return index

    def __len__(self) -> int:
        return len(self.offsets)

    def _open(self, truncate: bool = False) -> int:
        if self._fd is None or truncate:
            if self._fd is not None:
                os.close(self._fd)
            flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if truncate else 0)
            self._fd = os.open(self.path, flags, 0o644)
        return self._fd

    def append(self, offset: int, position: int) -> None:
        """Add an entry; `offset` is absolute and must exceed the last entry's."""
        os.write(self._open(), ENTRY.pack(offset - self.base_offset, position))
        self.offsets.append(offset)
        self.positions.append(position)

    def lookup(self, offset: int) -> int:
        """Position from which to scan for `offset`: that of the largest entry <= offset, or 0."""
        i = bisect_right(self.offsets, offset)
        return self.positions[i - 1] if i else 0

    def last_position(self) -> int:
        return self.positions[-1] if self.positions else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop the entries pointing at `position` or beyond."""
        keep = bisect_right(self.positions, position - 1)
        if keep == len(self.positions):
            return
        del self.offsets[keep:]
        del self.positions[keep:]
        os.ftruncate(self._open(), keep * ENTRY_SIZE)

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
