"""What nemeses act on: the cluster they control, and targets resolved from its live state.

`ClusterControl` is the interface a nemesis needs (`harness.db.Cluster` implements it).
`read_snapshot` reads Kafka's ZooKeeper layout (/controller, /controller_epoch,
/brokers/ids, /brokers/topics/<t>, .../partitions/<p>/state) through kazoo at fault time,
so "the controller" or "the leader of t-0" is whoever it is now. Parsing is pure. The
coordinator of a group or a transactional id is what the db says now
(`ClusterControl.coordinator`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from harness.control import Remote

__all__ = [
    "ClusterControl",
    "PartitionState",
    "Snapshot",
    "controller_node",
    "coordinator_target",
    "leader_and_followers",
    "parse_assignment",
    "parse_partition_state",
    "read_partition_state",
    "read_snapshot",
]

ZK_TIMEOUT = 3.0


class ClusterControl(Protocol):
    """A running cluster as nemeses see it; `service` is "broker" or "zookeeper"."""

    remote: Remote

    @property
    def nodes(self) -> tuple[str, ...]: ...
    @property
    def brokers(self) -> tuple[str, ...]: ...
    @property
    def zookeepers(self) -> tuple[str, ...]: ...
    @property
    def session_timeout(self) -> float: ...
    @property
    def replica_lag_time(self) -> float: ...
    @property
    def zk(self) -> Any: ...
    @property
    def bootstrap_servers(self) -> str: ...
    def coordinator(self, key: str, kind: str = "group") -> str | None: ...
    def coordinator_partition(self, key: str, kind: str = "group") -> tuple[str, int]: ...
    def broker_id(self, node: str) -> int: ...
    def broker_node(self, broker_id: int) -> str: ...
    def zookeeper_mode(self, node: str) -> str | None: ...
    def running(self, node: str, service: str = "broker") -> bool: ...
    def kill(self, node: str, service: str = "broker") -> bool: ...
    def stop(self, node: str, service: str = "broker") -> bool: ...
    def start(self, node: str, service: str = "broker") -> bool: ...
    def pause(self, node: str, service: str = "broker") -> bool: ...
    def resume(self, node: str, service: str = "broker") -> bool: ...


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]

    def to_json(self) -> dict:
        return {"topic": self.topic, "partition": self.partition, "leader": self.leader,
                "leader_epoch": self.leader_epoch, "isr": list(self.isr),
                "replicas": list(self.replicas)}


@dataclass(frozen=True)
class Snapshot:
    controller: int | None
    controller_epoch: int | None
    brokers: frozenset[int]
    partitions: tuple[PartitionState, ...]


def parse_partition_state(topic: str, partition: int, data: bytes,
                          replicas: Sequence[int] = ()) -> PartitionState:
    body = json.loads(data)
    return PartitionState(topic, partition, int(body["leader"]), int(body["leader_epoch"]),
                          tuple(int(b) for b in body["isr"]), tuple(replicas))


def parse_assignment(data: bytes) -> dict[int, tuple[int, ...]]:
    """/brokers/topics/<t>: partition -> replicas in assignment order."""
    return {int(p): tuple(int(b) for b in replicas)
            for p, replicas in json.loads(data).get("partitions", {}).items()}


def read_partition_state(zk: Any, topic: str, partition: int,
                         timeout: float = ZK_TIMEOUT) -> PartitionState | None:
    """One partition's state with its replicas, read now; None when it has no state znode
    yet. Raises on a ZooKeeper error."""
    path = f"/brokers/topics/{topic}"
    if zk.exists_async(f"{path}/partitions/{partition}/state").get(timeout=timeout) is None:
        return None
    assignment = parse_assignment(zk.get_async(path).get(timeout=timeout)[0] or b"{}")
    data = zk.get_async(f"{path}/partitions/{partition}/state").get(timeout=timeout)[0]
    return parse_partition_state(topic, partition, data, assignment.get(partition, ()))


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
            data = get(f"/brokers/topics/{topic}/partitions/{partition}/state")
            if data:
                partitions.append(parse_partition_state(topic, partition, data,
                                                        assignment.get(partition, ())))
    return Snapshot(
        int(json.loads(controller_data)["brokerid"]) if controller_data else None,
        int(epoch_data) if epoch_data else None,
        frozenset(int(b) for b in children("/brokers/ids")),
        tuple(partitions))


def controller_node(cluster: ClusterControl) -> str | None:
    """The node of the current controller, None if there is none (or ZooKeeper is out)."""
    try:
        snapshot = read_snapshot(cluster.zk)
    except Exception:  # kazoo raises timeouts and connection losses of several kinds
        return None
    return None if snapshot.controller is None else cluster.broker_node(snapshot.controller)


def leader_and_followers(cluster: ClusterControl, rng: random.Random, topic: str | None = None,
                         partition: int | None = None, internal: bool = True
                         ) -> tuple[PartitionState, str, list[str]] | None:
    """A partition (the given one, else a random one with a leader and followers, of a topic
    whose name does not start with "__" unless `internal`), its leader's node and its
    followers' nodes (the other replicas); None if there is none."""
    try:
        snapshot = read_snapshot(cluster.zk)
    except Exception:  # kazoo raises timeouts and connection losses of several kinds
        return None
    candidates = [p for p in snapshot.partitions
                  if p.leader >= 0 and len(p.replicas) > 1
                  and (topic is None or p.topic == topic)
                  and (internal or topic is not None or not p.topic.startswith("__"))
                  and (partition is None or p.partition == partition)]
    if not candidates:
        return None
    chosen = rng.choice(candidates)
    followers = [cluster.broker_node(b) for b in chosen.replicas if b != chosen.leader]
    return chosen, cluster.broker_node(chosen.leader), followers


COORDINATED_FIELDS = {"group": "group", "transaction": "transactional_id"}


def coordinator_target(cluster: ClusterControl, keys: Sequence[tuple[str, str]],
                       rng: random.Random) -> tuple[dict[str, str], str] | None:
    """For the first of `keys` ((kind, key): a "group" id or a "transaction"al id), in
    random order, whose coordinator the db names: ({"group": id} or {"transactional_id":
    id}, the coordinator's node); None if it names none."""
    for kind, key in rng.sample(list(keys), len(keys)):
        node = cluster.coordinator(key, kind)
        if node is not None:
            return {COORDINATED_FIELDS[kind]: key}, node
    return None
