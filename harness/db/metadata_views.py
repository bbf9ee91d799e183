"""Where a cluster's metadata is read, chosen once when the `Cluster` is made.

- `ZooKeeperView`: the znodes (`harness.db.znodes`): /controller, the partitions' state
  znodes, /brokers/topics.
- `QuorumView` (KRaft): the metadata quorum's leader from its voters' state files
  (`Voters`: the dedicated controllers, or the combined brokers), and the brokers,
  leaders and ISRs a running broker's Metadata names.

Both answer the same four questions (`MetadataView`), so nothing above them asks which
mode the cluster runs in.
"""

from __future__ import annotations

import contextlib
import json
import struct
from collections.abc import Sequence
from typing import Protocol

from harness.db.brokers import BrokerSet, QuorumState, partitions_metadata
from harness.db.znodes import ZK_TIMEOUT, parse_partition_state, read_snapshot, state_path
from nemesis.capabilities import PartitionState, Snapshot

__all__ = ["MetadataView", "QuorumView", "Voters", "ZooKeeperView"]


class Voters(Protocol):
    """The processes that vote in a metadata quorum, named by node and by node id."""

    nodes: tuple[str, ...]

    def node_id(self, node: str) -> int: ...

    def node_of(self, node_id: int) -> str | None: ...

    def voter_states(self) -> dict[str, QuorumState | None]: ...

    def quorum(self) -> tuple[int, int] | None: ...


class MetadataView(Protocol):
    """A cluster's metadata now: each answer one read, None when nothing answers."""

    def snapshot(self) -> Snapshot | None: ...

    def controller(self) -> str | None: ...

    def partition_state(self, topic: str, partition: int) -> PartitionState | None: ...

    def partition_count(self, topic: str, default: int) -> int: ...


class ZooKeeperView:
    """The metadata in ZooKeeper, through the brokers' kazoo client."""

    def __init__(self, brokers: BrokerSet) -> None:
        self.brokers = brokers

    def snapshot(self) -> Snapshot | None:
        """Controller, live brokers and partition states; None when ZooKeeper does not
        answer."""
        try:
            return read_snapshot(self.brokers.zk)
        except Exception:  # kazoo raises timeouts and connection losses of several kinds
            return None

    def controller(self) -> str | None:
        """The node of the broker /controller names."""
        snapshot = self.snapshot()
        if snapshot is None or snapshot.controller is None:
            return None
        return self.brokers.broker_node(snapshot.controller)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        """The partition's state znode; None when it has none or ZooKeeper does not answer."""
        try:
            data, _ = self.brokers.zk.get_async(state_path(topic, partition)).get(
                timeout=ZK_TIMEOUT)
        except Exception:  # kazoo raises timeouts, connection losses and NoNode of several kinds
            return None
        return parse_partition_state(topic, partition, data)

    def partition_count(self, topic: str, default: int) -> int:
        """The topic's partitions in /brokers/topics; `default` before it exists."""
        with contextlib.suppress(Exception):  # kazoo: NoNode, timeouts, connection losses
            data, _ = self.brokers.zk.get_async(f"/brokers/topics/{topic}").get(timeout=5.0)
            return len(json.loads(data)["partitions"]) or default
        return default


class QuorumView:
    """The metadata of a cluster without ZooKeeper: the quorum of `voters`, and what the
    first running broker of `brokers` answers to Metadata."""

    def __init__(self, brokers: BrokerSet, voters: Voters) -> None:
        self.brokers = brokers
        self.voters = voters

    def snapshot(self) -> Snapshot | None:
        """The quorum's leader and epoch, and the brokers and partitions Metadata names;
        None when no broker answers."""
        found = self._metadata()
        if found is None:
            return None
        quorum = self.voters.quorum()
        brokers, partitions = found
        return Snapshot(None if quorum is None else quorum[0],
                        None if quorum is None else quorum[1], frozenset(brokers),
                        tuple(partitions))

    def controller(self) -> str | None:
        """The node of the quorum's leader (the active controller)."""
        quorum = self.voters.quorum()
        return None if quorum is None else self.voters.node_of(quorum[0])

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        found = self._metadata([topic])
        return next((state for state in (found[1] if found else ())
                     if state.partition == partition), None)

    def partition_count(self, topic: str, default: int) -> int:
        """`default`: the configured count, which the internal topics are created with."""
        return default

    def _metadata(self, topics: Sequence[str] | None = None
                  ) -> tuple[set[int], list[PartitionState]] | None:
        for node in self.brokers.nodes:
            if not self.brokers.running(node):
                continue
            with contextlib.suppress(OSError, ValueError, struct.error):
                return partitions_metadata(self.brokers.remote.address(node), topics)
        return None
