"""Shared helpers for the storage tests: real v2 batches built and decoded by kafka-python."""

from __future__ import annotations

import time

from kafka.record import MemoryRecords
from kafka.record.memory_records import MemoryRecordsBuilder

GZIP = 1
BASE_TIME = 1_700_000_000_000


def make_batch(values: list[bytes], compression: int = 0, timestamp: int = BASE_TIME,
               timestamps: list[int] | None = None, producer: tuple[int, int, int] | None = None
               ) -> bytes:
    """One v2 batch holding `values` (offsets from 0, as a producer sends them)."""
    pid, epoch, seq = producer or (-1, -1, -1)
    builder = MemoryRecordsBuilder(2, compression, 1 << 24, producer_id=pid,
                                   producer_epoch=epoch, base_sequence=seq)
    for i, value in enumerate(values):
        ts = timestamps[i] if timestamps else timestamp
        assert builder.append(ts, None, value) is not None
    builder.close()
    return bytes(builder.buffer())


def values_of(n: int, tag: str = "v", size: int = 0) -> list[bytes]:
    return [f"{tag}{i}".encode().ljust(size, b".") for i in range(n)]


def decode(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in `data`."""
    records = MemoryRecords(data)
    out = []
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        out.extend((record.offset, record.value) for record in batch)
    return out


def decode_batches(data: bytes) -> list[tuple[int, int, int]]:
    """(base offset, last offset, partition leader epoch) of every batch in `data`."""
    records = MemoryRecords(data)
    out = []
    while records.has_next():
        batch = records.next_batch()
        out.append((batch.base_offset, batch.last_offset, batch.leader_epoch))
    return out


def batch(count: int = 3, producer_id: int = -1, epoch: int = 0, sequence: int = -1) -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    if producer_id >= 0:
        builder.set_producer_state(producer_id, epoch, sequence, False)
    for i in range(count):
        builder.append(int(time.time() * 1000), None, b"value-%d" % i)
    builder.close()
    return bytes(builder.buffer())
