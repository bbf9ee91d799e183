"""Transaction markers: the control batches that end a transaction on a partition (KIP-98).

A marker is a v2 batch with attributes transactional | control (0x30), the producer's id and
epoch, base sequence -1 and one record whose key is int16 version 0 + int16 type (0 abort,
1 commit) and whose value is int16 version 0 + int32 coordinator epoch. Control batches are
never compressed, so reading one decodes only that record. As Kafka does, a newer key or
value version is read as version 0, and a control record of another type is no marker.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c
from kafka.record.util import decode_varint, encode_varint

from .errors import CorruptRecordError, InvalidRecordError
from .records import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_START,
    H_ATTRS,
    H_BASE,
    H_COUNT,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_POS,
    TRANSACTIONAL_MASK,
)

__all__ = ["ABORT", "COMMIT", "TxnMarker", "build_marker_batch", "read_marker"]

ABORT = 0
COMMIT = 1
CONTROL_KEY = struct.Struct(">hh")  # version, type
MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch
CRC = struct.Struct(">I")
NO_SEQUENCE = -1


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """What an end-transaction marker says."""

    commit: bool
    coordinator_epoch: int


def build_marker_batch(producer_id: int, producer_epoch: int, commit: bool,
                       coordinator_epoch: int, timestamp_ms: int) -> bytes:
    """A complete marker batch at base offset 0 (the leader assigns offset and epoch)."""
    record = bytearray([0])  # record attributes
    for varint in (0, 0, CONTROL_KEY.size):  # timestamp delta, offset delta, key length
        encode_varint(varint, record.append)
    record += CONTROL_KEY.pack(0, COMMIT if commit else ABORT)
    encode_varint(MARKER_VALUE.size, record.append)
    record += MARKER_VALUE.pack(0, coordinator_epoch)
    encode_varint(0, record.append)  # no headers
    body = bytearray()
    encode_varint(len(record), body.append)
    body += record
    attributes = TRANSACTIONAL_MASK | CONTROL_MASK
    batch = bytearray(HEADER.pack(
        0, HEADER_SIZE - LOG_OVERHEAD + len(body), -1, 2, 0, attributes, 0, timestamp_ms,
        timestamp_ms, producer_id, producer_epoch, NO_SEQUENCE, 1))
    batch += body
    CRC.pack_into(batch, MAGIC_POS + 1, crc32c(batch[CRC_START:]))
    return bytes(batch)


def read_marker(data: bytes | bytearray | memoryview, position: int,
                header: tuple) -> TxnMarker | None:
    """The marker of the control batch whose `header` starts at `position` in `data`;
    None for an empty control batch (its records were cleaned) or another control type."""
    if header[H_ATTRS] & COMPRESSION_MASK:
        raise InvalidRecordError(f"compressed control batch at offset {header[H_BASE]}")
    if header[H_COUNT] < 1:
        return None
    view = memoryview(data)
    try:
        _, pos = decode_varint(view, position + HEADER_SIZE)  # record length
        _, pos = decode_varint(view, pos + 1)  # after the attributes: timestamp delta
        _, pos = decode_varint(view, pos)  # offset delta
        key_length, pos = decode_varint(view, pos)
        if key_length < CONTROL_KEY.size:
            return None
        _, kind = CONTROL_KEY.unpack_from(view, pos)
        value_length, pos = decode_varint(view, pos + key_length)
        if kind not in (ABORT, COMMIT) or value_length < MARKER_VALUE.size:
            return None
        _, coordinator_epoch = MARKER_VALUE.unpack_from(view, pos)
    except (IndexError, struct.error) as exc:
        raise CorruptRecordError(
            f"unreadable control record in batch at offset {header[H_BASE]}") from exc
    return TxnMarker(kind == COMMIT, coordinator_epoch)
