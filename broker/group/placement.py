"""Which `__consumer_offsets` partition, and so which coordinator, owns a group.

Kafka maps a group to `Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`,
where `hashCode` is Java's `String.hashCode` over UTF-16 code units and `Utils.abs`
maps `Integer.MIN_VALUE` to 0. Clients do not compute this (FindCoordinator asks the
broker), but an operator reading `__consumer_offsets` does, so it is exact here.
"""

from __future__ import annotations

__all__ = ["OFFSETS_TOPIC", "java_string_hash", "partition_for"]

OFFSETS_TOPIC = "__consumer_offsets"
_INT_MIN = -(1 << 31)


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode()`: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 units, as int32."""
    value = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        value = (31 * value + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def partition_for(group_id: str, partitions: int) -> int:
    """The offsets partition of `group_id` among `partitions`."""
    value = java_string_hash(group_id)
    return (0 if value == _INT_MIN else abs(value)) % partitions
