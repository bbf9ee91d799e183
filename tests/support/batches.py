"""Shared helpers for the storage tests: real v2 batches built and decoded by kafka-python."""

from __future__ import annotations

import struct
import time

from crc32c import crc32c
from kafka.record import MemoryRecords
from kafka.record.memory_records import MemoryRecordsBuilder

GZIP = 1
BASE_TIME = 1_700_000_000_000
CRC_POS = 17
BASE_SEQUENCE_POS = 53


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


def batch(count: int = 3, producer_id: int = -1, epoch: int = 0, sequence: int = -1,
          transactional: bool = False) -> bytes:
    """A batch of `count` records; with a producer id and sequence -1, a batch without
    sequence as the coordinators write them (kafka-python builds none: patched in)."""
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    if producer_id >= 0:
        builder.set_producer_state(producer_id, epoch, max(sequence, 0), transactional)
    for i in range(count):
        builder.append(int(time.time() * 1000), None, b"value-%d" % i)
    builder.close()
    data = bytearray(builder.buffer())
    if producer_id >= 0 and sequence < 0:
        struct.pack_into(">i", data, BASE_SEQUENCE_POS, -1)
        struct.pack_into(">I", data, CRC_POS, crc32c(bytes(data[CRC_POS + 4:])))
    return bytes(data)
