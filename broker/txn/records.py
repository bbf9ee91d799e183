"""`__transaction_state` records in Kafka's schemas, so Kafka's tools read our logs.

Key: int16 version 0, transactional id (int16-length string). Value (version 0):
producer id int64, producer epoch int16, transaction timeout int32, status int8 (the
`TxnState` id), partitions (nullable array of topic string and int32 partition ids),
last update timestamp int64, start timestamp int64. A null value is a tombstone (the id
expired). The last epoch (KIP-360) is not in version 0 and stays in memory.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from kafka.record import MemoryRecords

from broker.txn.state import TxnMetadata, TxnState

__all__ = ["RecordFormatError", "TxnLogEntry", "decode", "encode_key", "encode_value",
           "read_entries"]

KEY_VERSION = 0
VALUE_VERSION = 0
_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")

TxnLogEntry = tuple[str, TxnMetadata | None]


class RecordFormatError(ValueError):
    """A `__transaction_state` record that is not in Kafka's schema."""


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack(">h", len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return struct.pack(">h", KEY_VERSION) + _string(transactional_id)


def encode_value(metadata: TxnMetadata) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(metadata.partitions):
        by_topic.setdefault(topic, []).append(partition)
    parts = [_HEAD.pack(VALUE_VERSION, metadata.producer_id, metadata.producer_epoch,
                        metadata.timeout_ms, int(metadata.state)),
             struct.pack(">i", len(by_topic))]
    for topic, partitions in by_topic.items():
        parts.append(_string(topic))
        parts.append(struct.pack(f">i{len(partitions)}i", len(partitions), *partitions))
    parts.append(_TIMES.pack(metadata.last_update_ms, metadata.start_ms))
    return b"".join(parts)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def unpack(self, layout: struct.Struct) -> tuple:
        if self.pos + layout.size > len(self.data):
            raise RecordFormatError(f"record ends at byte {len(self.data)}, inside a field "
                                    f"that starts at byte {self.pos}")
        values = layout.unpack_from(self.data, self.pos)
        self.pos += layout.size
        return values

    def int(self, fmt: str) -> int:
        return self.unpack(struct.Struct(fmt))[0]

    def string(self) -> str:
        length = self.int(">h")
        if length < 0 or self.pos + length > len(self.data):
            raise RecordFormatError(f"bad string length {length} at byte {self.pos}")
        text = self.data[self.pos:self.pos + length].decode("utf-8")
        self.pos += length
        return text


def decode(key: bytes, value: bytes | None) -> TxnLogEntry:
    """(transactional id, its metadata or None for a tombstone)."""
    reader = _Reader(key)
    version = reader.int(">h")
    if version != KEY_VERSION:
        raise RecordFormatError(f"unknown transaction log key version {version}")
    transactional_id = reader.string()
    if value is None:
        return transactional_id, None
    reader = _Reader(value)
    version, producer_id, epoch, timeout_ms, status = reader.unpack(_HEAD)
    if version != VALUE_VERSION:
        raise RecordFormatError(f"transaction log value version {version} (only "
                                f"{VALUE_VERSION} is read)")
    partitions: set[tuple[str, int]] = set()
    for _ in range(max(reader.int(">i"), 0)):
        topic = reader.string()
        partitions.update((topic, reader.int(">i")) for _ in range(reader.int(">i")))
    last_update_ms, start_ms = reader.unpack(_TIMES)
    try:
        state = TxnState(status)
    except ValueError as exc:
        raise RecordFormatError(f"unknown transaction status {status}") from exc
    return transactional_id, TxnMetadata(transactional_id, producer_id, epoch, timeout_ms, state,
                                         frozenset(partitions), start_ms, last_update_ms)


def read_entries(data: bytes) -> tuple[list[TxnLogEntry], int | None]:
    """The entries of the whole batches in `data`, and the offset after the last one (None
    if `data` holds no whole batch)."""
    entries: list[TxnLogEntry] = []
    next_offset = None
    for batch in _batches(data):
        next_offset = batch.next_offset
        if batch.is_control_batch:
            continue
        entries.extend(decode(bytes(record.key), None if record.value is None
                              else bytes(record.value))
                       for record in batch if record.key is not None)
    return entries, next_offset


def _batches(data: bytes) -> Iterator:
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            return
        yield batch
