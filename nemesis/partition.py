"""Network faults: partitions of every shape, packet loss, all through one layered firewall.

Each nemesis owns a layer of the shared `Firewall`; a node's rules are the union of all
layers, so healing a partition does not lift a concurrent session expiry. Ops come back
with what was done: `start-partition` -> the grudge `{"n1": ["n3", "n4"], ...}` (node ->
nodes it drops), or "no-target"; `stop-partition` -> "network-healed".

Shapes of `start-partition` (its value, or `{"shape": ..., "topic": t, "partition": p}`):
`one` (isolate a random node), `halves`, `one-way` (halves, shuffled, where the smaller
drops what the larger sends and the larger still receives from the smaller, Jepsen's one-way
partition: connections the dropping side opens never complete, those already open deliver
its data until their retransmissions give up), `ring` (majorities ring), `bridge` (over all
nodes, shuffled), `controller` (isolate the controller now), `zookeeper` (the ensemble from
the brokers), `leader-from-followers` (a partition's leader from its other replicas; it
keeps ZooKeeper: the 2013 Kafka scenario), `leader` (a partition's leader, of a topic not
named `__*` unless given, from every node, ZooKeeper included), `coordinator` (isolate the
broker coordinating one of the run's consumer groups; the value names the group: `{"group":
g, "n2": [...], ...}`; a logged no-op without groups), `clients` (a broker, a workload
partition's leader when one is known, drops the run's clients while every other node still
reaches it, so the controller keeps it leader: `{"broker": ..., "leads": bool, "drops":
"clients", "clients": address}`; it needs a backend whose clients reach the nodes from one
known address).

On a KRaft cluster: `quorum` (the metadata quorum's voters split into a majority and a
minority, the active controller on the minority side and on the majority side in turn;
links to nodes outside the quorum stay open) and `fence-broker` (a broker, the leader of a
partition when one is known, cut off from the dedicated controllers only: clients and
other brokers still reach it, and the controllers fence it once its session times out).
Both come back with what they did: `{"active": ..., "active_side": "minority",
"majority": [...], "minority": [...], ...grudge}` and `{"broker": ..., ...grudge}`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from nemesis import grudge as grudges
from nemesis.base import BaseNemesis, completed, no_target, skipped
from nemesis.capabilities import (
    CutsClients,
    HasController,
    HasCoordinator,
    HasDedicatedQuorum,
    HasLeaders,
    HasQuorum,
    HasZooKeeper,
    PartitionableNetwork,
    require,
)
from nemesis.consumers import NO_COORDINATED, Consumers
from nemesis.targets import coordinator_target, leader_and_followers

__all__ = ["SHAPES", "Firewall", "PacketLossNemesis", "PartitionNemesis"]

SHAPES = ("one", "halves", "one-way", "ring", "bridge", "controller", "zookeeper",
          "leader-from-followers", "leader", "coordinator", "quorum", "fence-broker", "clients")


class Firewall:
    """Named layers of grudges and packet loss, applied together, one nft transaction per
    node, all nodes in parallel."""

    def __init__(self) -> None:
        self.drops: dict[str, grudges.Grudge] = {}
        self.losses: dict[str, dict[str, dict[str, float]]] = {}

    def set(self, cluster: PartitionableNetwork, layer: str, grudge: grudges.Grudge | None = None,
            loss: Mapping[str, Mapping[str, float]] | None = None) -> None:
        """Replace `layer` (node -> dropped nodes; node -> {node: loss probability})."""
        touched = set(self.drops.get(layer, {})) | set(self.losses.get(layer, {}))
        self.drops[layer] = dict(grudge or {})
        self.losses[layer] = {node: dict(p) for node, p in (loss or {}).items()}
        self._apply(cluster, touched | set(self.drops[layer]) | set(self.losses[layer]))

    def clear(self, cluster: PartitionableNetwork, layer: str) -> None:
        self.set(cluster, layer)

    def heal(self, cluster: PartitionableNetwork) -> None:
        """Every layer gone and every node's rules flushed, whatever this object knew."""
        self.drops.clear()
        self.losses.clear()
        self._apply(cluster, set(cluster.nodes))

    def _apply(self, cluster: PartitionableNetwork, nodes: set[str]) -> None:
        merged = grudges.merge(*self.drops.values())
        loss: dict[str, dict[str, float]] = {}
        for layer in self.losses.values():
            for node, probabilities in layer.items():
                for other, p in probabilities.items():
                    previous = loss.setdefault(node, {}).get(other, 0.0)
                    loss[node][other] = 1 - (1 - previous) * (1 - p)

        def apply(node: str) -> None:
            cluster.firewall(node, sorted(merged.get(node, ())), loss.get(node, {}))

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(apply, sorted(nodes)))


class PartitionNemesis(BaseNemesis):
    """`start-partition` of a shape (the db needs what the shape names: a controller,
    ZooKeeper, partition leaders, coordinators) and `stop-partition`."""

    fs = frozenset({"start-partition", "stop-partition"})

    def __init__(self, firewall: Firewall, rng: random.Random,
                 consumers: Consumers | None = None) -> None:
        self.firewall = firewall
        self.rng = rng
        self.consumers = consumers or Consumers()
        self.quorum_splits = 0

    def setup(self, cluster: PartitionableNetwork) -> None:
        self.firewall.clear(cluster, "partition")

    def teardown(self, cluster: PartitionableNetwork) -> None:
        self.firewall.clear(cluster, "partition")

    def invoke(self, cluster: PartitionableNetwork, op: dict) -> dict:
        if op["f"] == "stop-partition":
            self.firewall.clear(cluster, "partition")
            return completed(op, "network-healed")
        if op.get("value") == "coordinator":
            return self._isolate_coordinator(cluster, op)
        if op.get("value") == "quorum":
            return self._split_quorum(cluster, op)
        if op.get("value") == "fence-broker":
            return self._fence_broker(cluster, op)
        if op.get("value") == "clients":
            return self._isolate_from_clients(cluster, op)
        grudge = self.grudge(cluster, op.get("value") or "one")
        if not any(grudge.values()):
            return no_target(op)
        self.firewall.set(cluster, "partition", grudge)
        return completed(op, grudges.describe(grudge))

    def _isolate_coordinator(self, cluster: PartitionableNetwork, op: dict) -> dict:
        keys = self.consumers.coordinated()
        if not keys:
            return skipped(op, NO_COORDINATED)
        found = coordinator_target(require(cluster, HasCoordinator), keys, self.rng)
        if found is None:
            return no_target(op)
        named, node = found
        grudge = grudges.isolate(node, list(cluster.nodes))
        self.firewall.set(cluster, "partition", grudge)
        return completed(op, {**named, **grudges.describe(grudge)})

    def _split_quorum(self, cluster: PartitionableNetwork, op: dict) -> dict:
        """The voters split into a majority and a minority; the active controller goes to
        the minority in odd splits (1st, 3rd, ...) and to the majority in even ones."""
        quorum = require(cluster, HasQuorum)
        voters = list(quorum.voters)
        active = quorum.controller()
        if len(voters) < 2 or active not in voters:
            return no_target(op)
        self.quorum_splits += 1
        side = "minority" if self.quorum_splits % 2 else "majority"
        others = self.rng.sample([n for n in voters if n != active], len(voters) - 1)
        minority_size = (len(voters) - 1) // 2 or 1
        if side == "minority":
            minority = [active, *others[: minority_size - 1]]
        else:
            minority = others[:minority_size]
        majority = [n for n in voters if n not in minority]
        grudge = grudges.between(minority, majority)
        self.firewall.set(cluster, "partition", grudge)
        return completed(op, {"active": active, "active_side": side,
                              "majority": sorted(majority), "minority": sorted(minority),
                              **grudges.describe(grudge)})

    def _fence_broker(self, cluster: PartitionableNetwork, op: dict) -> dict:
        """A broker, a workload partition's leader when one is known, cut off from every
        dedicated controller."""
        controllers = list(require(cluster, HasDedicatedQuorum).controllers)
        broker, leads = self._leader_or_any_broker(cluster)
        grudge = grudges.between([broker], controllers)
        self.firewall.set(cluster, "partition", grudge)
        return completed(op, {"broker": broker, "leads": leads, **grudges.describe(grudge)})

    def _isolate_from_clients(self, cluster: PartitionableNetwork, op: dict) -> dict:
        """A broker, a workload partition's leader when one is known, drops the clients;
        the other brokers, the controller and the metadata store still reach it."""
        clients = require(cluster, CutsClients).clients_address()
        broker, leads = self._leader_or_any_broker(cluster)
        self.firewall.set(cluster, "partition", {broker: frozenset({clients})})
        return completed(op, {"broker": broker, "leads": leads, "drops": "clients",
                              "clients": clients})

    def _leader_or_any_broker(self, cluster: PartitionableNetwork) -> tuple[str, bool]:
        """A workload partition's leader when one is known (True), else a random broker."""
        found = (leader_and_followers(cluster, self.rng, internal=False)
                 if isinstance(cluster, HasLeaders) else None)
        if found is not None:
            return found[1], True
        return self.rng.choice(list(cluster.brokers)), False

    def grudge(self, cluster: PartitionableNetwork,
               spec: str | Mapping[str, Any]) -> grudges.Grudge:
        """The grudge a shape resolves to on the live cluster; empty when there is no target."""
        shape = spec if isinstance(spec, str) else spec["shape"]
        nodes = list(cluster.nodes)
        shuffled = self.rng.sample(nodes, len(nodes))
        if shape == "one":
            return grudges.isolate(self.rng.choice(nodes), nodes)
        if shape == "halves":
            return grudges.halves(shuffled)
        if shape == "one-way":
            return grudges.one_way(*grudges.bisect(shuffled))
        if shape == "ring":
            return grudges.majorities_ring(shuffled)
        if shape == "bridge":
            return grudges.bridge(shuffled) if len(nodes) >= 3 else {}
        if shape == "controller":
            node = require(cluster, HasController).controller()
            return grudges.isolate(node, nodes) if node else {}
        if shape == "zookeeper":
            ensemble = require(cluster, HasZooKeeper).zookeepers
            brokers = [n for n in cluster.brokers if n not in ensemble]
            return grudges.between(ensemble, brokers) if brokers else {}
        if shape == "leader-from-followers":
            options = {} if isinstance(spec, str) else spec
            found = leader_and_followers(require(cluster, HasLeaders), self.rng,
                                         options.get("topic"), options.get("partition"))
            return grudges.between([found[1]], found[2]) if found else {}
        if shape == "leader":
            options = {} if isinstance(spec, str) else spec
            found = leader_and_followers(require(cluster, HasLeaders), self.rng,
                                         options.get("topic"), options.get("partition"),
                                         internal=False)
            return grudges.isolate(found[1], nodes) if found else {}
        raise ValueError(f"unknown partition shape {shape!r}; one of {', '.join(SHAPES)}")


class PacketLossNemesis(BaseNemesis):
    """`start-packet-loss` with value `{"probability": p}` (default 0.2): every node drops
    each packet from every other node with probability p; `stop-packet-loss` lifts it."""

    fs = frozenset({"start-packet-loss", "stop-packet-loss"})

    def __init__(self, firewall: Firewall) -> None:
        self.firewall = firewall

    def setup(self, cluster: PartitionableNetwork) -> None:
        self.firewall.clear(cluster, "packet-loss")

    def teardown(self, cluster: PartitionableNetwork) -> None:
        self.firewall.clear(cluster, "packet-loss")

    def invoke(self, cluster: PartitionableNetwork, op: dict) -> dict:
        if op["f"] == "stop-packet-loss":
            self.firewall.clear(cluster, "packet-loss")
            return completed(op, "network-healed")
        probability = float((op.get("value") or {}).get("probability", 0.2))
        nodes = list(cluster.nodes)
        loss = {node: {other: probability for other in nodes if other != node} for node in nodes}
        self.firewall.set(cluster, "packet-loss", loss=loss)
        return completed(op, {"probability": probability, "nodes": nodes})
