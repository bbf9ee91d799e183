"""Producer-state snapshots: `<20-digit offset>.snapshot` files in the partition directory.

A snapshot named N holds the producer state after every batch below offset N. The layout
(big-endian) follows Kafka's ProducerStateManager snapshot: version int16, CRC-32C (uint32)
of everything after it, an int32 count of producers, then per producer: producer id int64,
epoch int16, last sequence int32, coordinator epoch int32, first offset of its ongoing
transaction int64 (-1: none), an int32 count of cached batches and per batch: epoch int16,
base sequence int32, last sequence int32, base offset int64, last offset int64. Kafka keeps
only the last batch of a producer; we keep all five cached ones, so that after a restart a
retry of any in-flight batch is still answered with its original offsets (our version 1).

Written atomically: a tmp file, fsync, rename, fsync of the directory. A snapshot that fails
its length or CRC is corrupt and the loader takes the next older one, as Kafka's does.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from crc32c import crc32c

from .checkpoints import fsync_dir
from .producer_state import CACHED_BATCHES, ProducerBatch, ProducerEntry

__all__ = [
    "SNAPSHOT_SUFFIX",
    "delete_all_snapshots",
    "delete_snapshot",
    "delete_snapshots_below",
    "read_snapshot",
    "snapshot_offsets",
    "snapshot_path",
    "write_snapshot",
]

SNAPSHOT_SUFFIX = ".snapshot"
VERSION = 1
PREAMBLE = struct.Struct(">hI")
COUNT = struct.Struct(">i")
PRODUCER = struct.Struct(">qhiiqi")
BATCH = struct.Struct(">hiiqq")


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offsets(directory: Path) -> list[int]:
    """Offsets of the snapshots in `directory`, ascending."""
    offsets = []
    for path in directory.glob(f"*{SNAPSHOT_SUFFIX}"):
        stem = path.name.removesuffix(SNAPSHOT_SUFFIX)
        if len(stem) == 20 and stem.isdigit():
            offsets.append(int(stem))
    return sorted(offsets)


def encode(entries: Iterable[ProducerEntry]) -> bytes:
    entries = list(entries)
    parts = [COUNT.pack(len(entries))]
    for e in entries:
        parts.append(PRODUCER.pack(e.producer_id, e.epoch, e.last_sequence,
                                   e.coordinator_epoch, e.txn_first_offset, len(e.batches)))
        parts.extend(BATCH.pack(b.epoch, b.base_sequence, b.last_sequence, b.base_offset,
                                b.last_offset) for b in e.batches)
    body = b"".join(parts)
    return PREAMBLE.pack(VERSION, crc32c(body)) + body


def decode(data: bytes) -> list[ProducerEntry] | None:
    """The entries of a snapshot; None if it is not a sound version-1 snapshot."""
    if len(data) < PREAMBLE.size + COUNT.size:
        return None
    version, crc = PREAMBLE.unpack_from(data)
    if version != VERSION or crc32c(data[PREAMBLE.size:]) != crc:
        return None
    try:
        (count,), pos = COUNT.unpack_from(data, PREAMBLE.size), PREAMBLE.size + COUNT.size
        entries = []
        for _ in range(count):
            pid, epoch, last_seq, coordinator_epoch, txn_first, batches = (
                PRODUCER.unpack_from(data, pos))
            pos += PRODUCER.size
            cached: deque[ProducerBatch] = deque(maxlen=CACHED_BATCHES)
            for _ in range(batches):
                cached.append(ProducerBatch(*BATCH.unpack_from(data, pos)))
                pos += BATCH.size
            entries.append(ProducerEntry(pid, epoch, last_seq, coordinator_epoch, txn_first,
                                         cached))
    except struct.error:
        return None
    return entries if pos == len(data) else None


def write_snapshot(directory: Path, offset: int, entries: Iterable[ProducerEntry]) -> None:
    path = snapshot_path(directory, offset)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(encode(entries))
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(directory)


def read_snapshot(directory: Path, offset: int) -> list[ProducerEntry] | None:
    """The entries of snapshot `offset`; None if it is missing or corrupt."""
    try:
        return decode(snapshot_path(directory, offset).read_bytes())
    except FileNotFoundError:
        return None


def delete_snapshot(directory: Path, offset: int) -> None:
    snapshot_path(directory, offset).unlink(missing_ok=True)


def delete_snapshots_below(directory: Path, offset: int) -> None:
    """Delete the snapshots below `offset` but the latest snapshot of all."""
    for snapshot in snapshot_offsets(directory)[:-1]:
        if snapshot < offset:
            delete_snapshot(directory, snapshot)


def delete_all_snapshots(directory: Path) -> None:
    for snapshot in snapshot_offsets(directory):
        delete_snapshot(directory, snapshot)
