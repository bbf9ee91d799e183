"""`__consumer_offsets` records in Kafka's own schemas, so Kafka's tools read our logs.

Keys start with an int16 version: 0 or 1 for an offset commit (`OffsetCommitKey`: group,
topic, partition), 2 for group metadata (`GroupMetadataKey`: group). Values are
`OffsetCommitValue` (written at v3: offset, leader epoch, metadata, commit timestamp) and
`GroupMetadataValue` (written at v3: protocol type, generation, protocol, leader,
state timestamp, members). A null value is a tombstone: the key's offset or group is
deleted, and compaction eventually drops both. Reading accepts every non-flexible version
(0-3) of each value, as Kafka 3.9 writes them.

A transactional offset commit (TxnOffsetCommit) is one batch stamped with the producer id
and epoch, transactional bit set, base sequence -1. The transaction's outcome is a control
batch (attributes 0x30) of one record whose key is int16 version, int16 type (1 commit,
0 abort); `read_batches` reports both kinds with their producer id, so loading can replay
transactions.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kafka.errors import CorruptRecordError
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

__all__ = [
    "COMMIT_MARKER",
    "GroupRecord",
    "LogBatch",
    "MemberRecord",
    "OffsetRecord",
    "RecordFormatError",
    "build_batch",
    "decode_record",
    "group_key",
    "group_value",
    "offset_key",
    "offset_value",
    "read_batches",
    "read_records",
]

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3
COMMIT_MARKER = 1  # a control record's type: 1 commit, 0 abort
NO_PRODUCER_ID = -1


class RecordFormatError(ValueError):
    """A `__consumer_offsets` record that does not parse in any known schema version."""


@dataclass(frozen=True)
class OffsetRecord:
    """An offset commit (or its tombstone, `offset` None) read from the log."""

    group: str
    topic: str
    partition: int
    offset: int | None = None
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1


@dataclass(frozen=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupRecord:
    """A group's metadata after a rebalance or deletion (tombstone: `deleted`)."""

    group: str
    protocol_type: str = ""
    generation: int = 0
    protocol: str | None = None
    leader: str | None = None
    state_timestamp: int = -1
    members: tuple[MemberRecord, ...] = ()
    deleted: bool = False


@dataclass(frozen=True)
class LogBatch:
    """One batch of an offsets partition: where it starts, which producer wrote it, whether
    it is transactional, and its records; a control batch carries its marker type instead
    (None for a data batch, or a control batch without a record)."""

    base_offset: int
    producer_id: int = NO_PRODUCER_ID
    is_transactional: bool = False
    is_control: bool = False
    marker: int | None = None
    records: tuple[OffsetRecord | GroupRecord, ...] = ()


# -- encoding -------------------------------------------------------------------------


def _string(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode("utf-8")
    return struct.pack(">h", len(data)) + data


def _bytes(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", OFFSET_KEY_VERSION) + _string(group) + _string(topic) + struct.pack(
        ">i", partition
    )


def group_key(group: str) -> bytes:
    return struct.pack(">h", GROUP_KEY_VERSION) + _string(group)


def offset_value(offset: int, leader_epoch: int, metadata: str, commit_timestamp: int) -> bytes:
    return (
        struct.pack(">hqi", OFFSET_VALUE_VERSION, offset, leader_epoch)
        + _string(metadata)
        + struct.pack(">q", commit_timestamp)
    )


def group_value(record: GroupRecord) -> bytes:
    parts = [
        struct.pack(">h", GROUP_VALUE_VERSION),
        _string(record.protocol_type),
        struct.pack(">i", record.generation),
        _string(record.protocol),
        _string(record.leader),
        struct.pack(">qi", record.state_timestamp, len(record.members)),
    ]
    for member in record.members:
        parts += [
            _string(member.member_id),
            _string(member.group_instance_id),
            _string(member.client_id),
            _string(member.client_host),
            struct.pack(">ii", member.rebalance_timeout_ms, member.session_timeout_ms),
            _bytes(member.subscription),
            _bytes(member.assignment),
        ]
    return b"".join(parts)


def build_batch(records: list[tuple[bytes, bytes | None]], timestamp_ms: int,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1) -> bytes:
    """One uncompressed v2 batch of (key, value) records, offsets from 0; transactional,
    with the producer's id and epoch in its header and base sequence -1, when
    `producer_id` is given (Kafka's TxnOffsetCommit batch)."""
    transactional = producer_id != NO_PRODUCER_ID
    builder = DefaultRecordBatchBuilder(2, 0, transactional, producer_id,
                                        producer_epoch if transactional else -1, -1, 1 << 31)
    for offset, (key, value) in enumerate(records):
        builder.append(offset, timestamp_ms, key, value, [])
    return bytes(builder.build())


# -- decoding -------------------------------------------------------------------------


class _Cursor:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def fixed(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise RecordFormatError(f"record ends inside a {fmt} at byte {self.pos}")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def string(self, nullable: bool = False) -> str | None:
        length = self.fixed(">h")
        if length == -1 and nullable:
            return None
        return self._take(length).decode("utf-8")

    def blob(self) -> bytes:
        return self._take(self.fixed(">i"))

    def _take(self, length: int) -> bytes:
        if length < 0 or self.pos + length > len(self.data):
            raise RecordFormatError(f"bad length {length} at byte {self.pos}")
        value = self.data[self.pos : self.pos + length]
        self.pos += length
        return value


def _offset(group: str, topic: str, partition: int, value: bytes) -> OffsetRecord:
    cursor = _Cursor(value)
    version = cursor.fixed(">h")
    if not 0 <= version <= 3:
        raise RecordFormatError(f"offset commit value version {version} is not 0-3")
    offset = cursor.fixed(">q")
    epoch = cursor.fixed(">i") if version >= 3 else -1
    metadata = cursor.string() or ""
    timestamp = cursor.fixed(">q")
    return OffsetRecord(group, topic, partition, offset, epoch, metadata, timestamp)


def _group(group: str, value: bytes) -> GroupRecord:
    cursor = _Cursor(value)
    version = cursor.fixed(">h")
    if not 0 <= version <= 3:
        raise RecordFormatError(f"group metadata value version {version} is not 0-3")
    protocol_type = cursor.string() or ""
    generation = cursor.fixed(">i")
    protocol = cursor.string(nullable=True)
    leader = cursor.string(nullable=True)
    timestamp = cursor.fixed(">q") if version >= 2 else -1
    members = []
    for _ in range(cursor.fixed(">i")):
        member_id = cursor.string() or ""
        instance = cursor.string(nullable=True) if version >= 3 else None
        client_id = cursor.string() or ""
        client_host = cursor.string() or ""
        rebalance = cursor.fixed(">i") if version >= 1 else -1
        session = cursor.fixed(">i")
        members.append(
            MemberRecord(member_id, instance, client_id, client_host,
                         rebalance if version >= 1 else session, session,
                         cursor.blob(), cursor.blob())
        )
    return GroupRecord(group, protocol_type, generation, protocol, leader, timestamp,
                       tuple(members))


def decode_record(key: bytes, value: bytes | None) -> OffsetRecord | GroupRecord:
    """The offset commit or group metadata a `__consumer_offsets` record holds."""
    cursor = _Cursor(key)
    version = cursor.fixed(">h")
    if version in (0, 1):
        group, topic, partition = cursor.string() or "", cursor.string() or "", cursor.fixed(">i")
        if value is None:
            return OffsetRecord(group, topic, partition)
        return _offset(group, topic, partition, value)
    if version == 2:
        group = cursor.string() or ""
        if value is None:
            return GroupRecord(group, deleted=True)
        return _group(group, value)
    raise RecordFormatError(f"unknown key version {version}")


def _marker(batch) -> int | None:
    """The type of a control batch's record (Kafka's ControlRecordType)."""
    try:
        for record in batch:
            return record.type
    except (struct.error, TypeError, CorruptRecordError) as exc:
        raise RecordFormatError(f"control batch at offset {batch.base_offset}: {exc}") from exc
    return None


def read_batches(data: bytes) -> tuple[list[LogBatch], int | None]:
    """The whole v2 batches in `data` with their producer, flags and records (keyless
    records skipped), and the offset after the last batch (None if `data` holds no whole
    batch)."""
    found: list[LogBatch] = []
    next_offset = None
    batches = MemoryRecords(data)
    while batches.has_next():
        batch = batches.next_batch()
        if batch is None:
            break
        next_offset = batch.next_offset
        common = (batch.base_offset, batch.producer_id, batch.is_transactional)
        if batch.is_control_batch:
            found.append(LogBatch(*common, is_control=True, marker=_marker(batch)))
            continue
        records = tuple(decode_record(bytes(record.key), record.value)
                        for record in batch if record.key is not None)
        found.append(LogBatch(*common, records=records))
    return found, next_offset


def read_records(data: bytes) -> tuple[list[OffsetRecord | GroupRecord], int | None]:
    """The records of the whole v2 batches in `data` (control batches and keyless records
    skipped), and the offset after the last batch (None if `data` holds no whole batch)."""
    batches, next_offset = read_batches(data)
    return [record for batch in batches for record in batch.records], next_offset
