"""Kafka's metadata as its ZooKeeper layout holds it, read through kazoo: /controller,
/controller_epoch, /brokers/ids, /brokers/topics/<t> (the assignment) and
.../partitions/<p>/state. Read at fault time, so "the controller" or "the leader of t-0"
is whoever it is now; parsing is pure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from nemesis.capabilities import PartitionState, Snapshot

__all__ = ["ZK_TIMEOUT", "parse_assignment", "parse_partition_state", "read_snapshot",
           "state_path"]

ZK_TIMEOUT = 3.0


def state_path(topic: str, partition: int) -> str:
    """The znode of a partition's leader, leader epoch and ISR."""
    return f"/brokers/topics/{topic}/partitions/{partition}/state"


def parse_partition_state(topic: str, partition: int, data: bytes,
                          replicas: Sequence[int] = ()) -> PartitionState:
    body = json.loads(data)
    return PartitionState(topic, partition, int(body["leader"]), int(body["leader_epoch"]),
                          tuple(int(b) for b in body["isr"]), tuple(replicas))


def parse_assignment(data: bytes) -> dict[int, tuple[int, ...]]:
    """/brokers/topics/<t>: partition -> replicas in assignment order."""
    return {int(p): tuple(int(b) for b in replicas)
            for p, replicas in json.loads(data).get("partitions", {}).items()}


def read_snapshot(zk: Any, timeout: float = ZK_TIMEOUT) -> Snapshot:
    """The controller, live brokers and every partition's state, read now; raises on a
    ZooKeeper error (a paused or unreachable ensemble)."""
    def get(path: str) -> bytes | None:
        stat = zk.exists_async(path).get(timeout=timeout)
        return None if stat is None else zk.get_async(path).get(timeout=timeout)[0]

    def children(path: str) -> list[str]:
        if zk.exists_async(path).get(timeout=timeout) is None:
            return []
        return zk.get_children_async(path).get(timeout=timeout)

    controller_data = get("/controller")
    epoch_data = get("/controller_epoch")
    partitions = []
    for topic in sorted(children("/brokers/topics")):
        assignment = parse_assignment(get(f"/brokers/topics/{topic}") or b"{}")
        for partition in sorted(int(p) for p in children(f"/brokers/topics/{topic}/partitions")):
            data = get(state_path(topic, partition))
            if data:
                partitions.append(parse_partition_state(topic, partition, data,
                                                        assignment.get(partition, ())))
    return Snapshot(
        int(json.loads(controller_data)["brokerid"]) if controller_data else None,
        int(epoch_data) if epoch_data else None,
        frozenset(int(b) for b in children("/brokers/ids")),
        tuple(partitions))
