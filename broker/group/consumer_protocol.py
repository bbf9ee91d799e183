"""The consumer protocol's bytes: a subscription (`ConsumerProtocolSubscription`) is checked
to parse before a member of a `consumer` group is let in, so malformed metadata is refused
with an error instead of reaching the group's leader; an assignment
(`ConsumerProtocolAssignment`) is decoded only to name in the event log which partitions
each member got. Fields after those every version shares are left to the clients."""

from __future__ import annotations

import struct

__all__ = ["decode_assignment", "is_subscription"]


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


def is_subscription(data: bytes) -> bool:
    """Whether `data` starts with a subscription: int16 version >= 0, the topics (an array
    of non-null strings) and the nullable user data."""
    try:
        version, topics = struct.unpack_from(">hi", data, 0)
        if version < 0 or topics < 0:
            return False
        pos = 6
        for _ in range(topics):
            (length,) = struct.unpack_from(">h", data, pos)
            if length < 0:
                return False
            data[pos + 2 : pos + 2 + length].decode("utf-8")
            pos += 2 + length
        (user_data,) = struct.unpack_from(">i", data, pos)
        return user_data >= -1 and pos + 4 + max(user_data, 0) <= len(data)
    except (struct.error, UnicodeDecodeError):
        return False
