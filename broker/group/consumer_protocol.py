"""The consumer protocol's assignment bytes (`ConsumerProtocolAssignment`), decoded only to
name in the event log which partitions each member got: the coordinator itself treats
subscriptions and assignments as opaque bytes, as Kafka's does."""

from __future__ import annotations

import struct

__all__ = ["decode_assignment"]


def decode_assignment(data: bytes) -> dict[str, list[int]] | None:
    """topic -> partitions of a consumer-protocol assignment; None if `data` is not one."""
    try:
        pos = 2  # int16 version; every version starts with the same fields
        (topics,) = struct.unpack_from(">i", data, pos)
        pos += 4
        result: dict[str, list[int]] = {}
        for _ in range(max(topics, 0)):
            (length,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos : pos + length].decode("utf-8")
            pos += length
            (count,) = struct.unpack_from(">i", data, pos)
            pos += 4
            result[topic] = list(struct.unpack_from(f">{max(count, 0)}i", data, pos))
            pos += 4 * max(count, 0)
        return result
    except (struct.error, UnicodeDecodeError):
        return None
