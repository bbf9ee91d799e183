"""Aborted-transaction index of one segment: Kafka's `.txnindex` file.

Each 34-byte entry (big-endian) is version int16 (0), producer id int64, first offset int64,
last offset int64 (the abort marker's offset) and last stable offset int64 (the partition's
LSO right after the abort). Entries go to the segment holding the marker, in marker order.
The file is created by its first entry, so segments without aborts have none.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AbortedTxn", "TransactionIndex", "txn_index_path"]

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0


def txn_index_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}.txnindex"


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    """In-memory copy of the entries plus the file, appended to and truncated in step."""

    def __init__(self, path: Path, entries: list[AbortedTxn] | None = None) -> None:
        self.path = path
        self.entries = entries or []
        self._fd: int | None = None

    @classmethod
    def load(cls, path: Path, base_offset: int) -> TransactionIndex | None:
        """The index at `path` (empty if there is no file); None if it is torn or insane
        (a version other than 0, a marker below the segment or not after the previous one)."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return cls(path)
        if len(data) % ENTRY_SIZE:
            return None
        entries = []
        last = base_offset - 1
        for version, producer_id, first, marker, stable in ENTRY.iter_unpack(data):
            if version != VERSION or marker <= last or first > marker:
                return None
            entries.append(AbortedTxn(producer_id, first, marker, stable))
            last = marker
        return cls(path, entries)

    def __len__(self) -> int:
        return len(self.entries)

    def append(self, entry: AbortedTxn) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(self._fd, ENTRY.pack(VERSION, entry.producer_id, entry.first_offset,
                                      entry.last_offset, entry.last_stable_offset))
        self.entries.append(entry)

    def collect(self, fetch_offset: int, upper_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping [fetch_offset, upper_offset), and whether the
        search is complete (an entry's LSO reached `upper_offset`: later segments can only
        hold transactions that start beyond it), as Kafka's collectAbortedTxns."""
        found = []
        for entry in self.entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or beyond `offset`."""
        keep = len(self.entries)
        while keep and self.entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(self.entries):
            return
        del self.entries[keep:]
        if keep:
            os.truncate(self.path, keep * ENTRY_SIZE)
        else:
            self.reset()

    def reset(self) -> None:
        """Forget every entry and remove the file (recovery rebuilds it)."""
        self.close()
        self.entries = []
        self.path.unlink(missing_ok=True)

    def write_to(self, path: Path) -> None:
        """Write the entries to a new file at `path`, fsynced (the cleaner's output)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"".join(ENTRY.pack(VERSION, e.producer_id, e.first_offset,
                                             e.last_offset, e.last_stable_offset)
                                  for e in self.entries))
            os.fsync(fd)
        finally:
            os.close(fd)

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
