"""Replica assignment for new topics (seeds/000 "partition分配", seeds/002 "物理存储").

With the brokers in order b_0..b_{n-1} and a random start s, partition i's leader is on
b_{(s+i) mod n} and its j-th replica on b_{(s+i+j) mod n}: seeds/002's example (6 brokers,
start 4) puts partition 0 on 4, 5, 0 and partition 1 on 5, 0, 1, so followers are not shifted.
Without racks the order is by broker id; when racks are set it alternates racks (seeds/002:
brokers 0, 1, 2 on one rack and 3, 4, 5 on another give 0, 3, 1, 4, 2, 5), so neighbouring
replicas land on different racks.
"""

from __future__ import annotations

import random
from collections import defaultdict

__all__ = ["InvalidReplicationFactorError", "broker_order", "assign_replicas"]


class InvalidReplicationFactorError(ValueError):
    """Replication factor < 1 or larger than the number of live brokers."""


def broker_order(brokers: list[tuple[int, str | None]]) -> list[int]:
    """Broker ids sorted, or rack-alternating when any broker has a rack: racks in name order,
    brokers of a rack in id order, taking one from each rack in turn; brokers without a rack
    are then treated as one more rack named ""."""
    if all(rack is None for _, rack in brokers):
        return sorted(broker_id for broker_id, _ in brokers)
    by_rack: dict[str, list[int]] = defaultdict(list)
    for broker_id, rack in sorted(brokers):
        by_rack[rack or ""].append(broker_id)
    racks = [by_rack[name] for name in sorted(by_rack)]
    order: list[int] = []
    for round_ in range(max(len(ids) for ids in racks)):
        order.extend(ids[round_] for ids in racks if round_ < len(ids))
    return order


def assign_replicas(brokers: list[tuple[int, str | None]], partitions: int,
                    replication_factor: int, rng: random.Random) -> dict[int, list[int]]:
    """partition -> replicas (the first one is the preferred leader)."""
    n = len(brokers)
    if partitions < 1:
        raise ValueError(f"number of partitions must be at least 1, got {partitions}")
    if replication_factor < 1 or replication_factor > n:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} with {n} live brokers")
    order = broker_order(brokers)
    start = rng.randrange(n)
    return {i: [order[(start + i + j) % n] for j in range(replication_factor)]
            for i in range(partitions)}
