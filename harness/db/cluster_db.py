"""What every db of brokers on a `Cluster` (with a real ZooKeeper ensemble) shares: the
options about the ensemble and the broker properties, and the db part itself, with what
faults it can serve (`offer`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.control.backends import BRIDGED_BACKENDS, MACHINE_BACKENDS
from harness.db.brokers import BrokerLauncher
from harness.db.cluster import Cluster, ClusterSpec
from harness.db.part import DBContext
from nemesis.capabilities import (
    ClockControl,
    CutsClients,
    HasController,
    HasCoordinator,
    HasDedicatedQuorum,
    HasLeaders,
    HasQuorum,
    HasZooKeeper,
    Killable,
    Offer,
    PartitionableNetwork,
    Pausable,
    SeparateMetadataStore,
    VMControl,
)

__all__ = ["CLUSTER_CAPABILITIES", "SAFE_BROKER_CONFIG", "ClusterDB", "ClusterOptions",
           "cluster_spec"]

DEFAULT_ZOOKEEPERS = 3
SAFE_BROKER_CONFIG = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
# What a running `Cluster` can do on any backend (its metadata store aside).
CLUSTER_CAPABILITIES = frozenset({Killable, Pausable, PartitionableNetwork, HasController,
                                  HasLeaders, HasCoordinator})


@dataclass(frozen=True, kw_only=True)
class ClusterOptions:
    """Options of a db on a cluster (see `harness.options`)."""

    zookeepers: int | None = field(default=None, metadata={
        "help": f"ZooKeeper nodes ({DEFAULT_ZOOKEEPERS} by default; none with brokers that "
                f"use no ZooKeeper, such as Kafka in KRaft mode)"})
    colocate: bool = field(default=False, metadata={
        "help": "run ZooKeeper on the first broker nodes"})
    broker_config: Mapping[str, str] = field(
        default_factory=lambda: dict(SAFE_BROKER_CONFIG),
        metadata={"help": "a broker property (server.properties); merged over the defaults"})

    def __post_init__(self) -> None:
        if self.zookeepers is not None and not 1 <= self.zookeepers <= 99:
            raise ValueError(f"--zookeepers must be 1 to 99, got {self.zookeepers}")

    def zookeeper_count(self) -> int:
        """How many ZooKeepers a cluster with ZooKeeper runs: --zookeepers, or the default."""
        return DEFAULT_ZOOKEEPERS if self.zookeepers is None else self.zookeepers

    def zookeeper_nodes(self) -> int:
        """How many ZooKeeper nodes of their own these options give the cluster."""
        return 0 if self.colocate else self.zookeeper_count()


@dataclass(frozen=True)
class ClusterDB:
    """Brokers and ZooKeeper as `spec` describes them; `name` is the db's. `extra`: what
    its brokers can do beyond every cluster (e.g. `LosesUnflushed`), `why_not`: what they
    cannot (even of `CLUSTER_CAPABILITIES`), why and what to do instead."""

    spec: ClusterSpec
    name: str
    extra: frozenset[type] = frozenset()
    why_not: Mapping[type, str] = field(default_factory=dict)
    start_timeout: float = 60.0  # seconds to become healthy when `start` is given none

    def start(self, logs_dest: Path | None = None, timeout: float | None = None) -> Cluster:
        return Cluster.up(self.spec, timeout=timeout or self.start_timeout,
                          logs_dest=logs_dest)

    def offer(self) -> Offer:
        """The capabilities of the cluster once up: ZooKeeper or a metadata quorum of its
        own (dedicated with `controllers`), VM control only on machines."""
        has = set(CLUSTER_CAPABILITIES | self.extra)
        why_not = dict(self.why_not)
        if self.spec.launcher.uses_zookeeper:
            has.add(HasZooKeeper)
            if self.spec.colocate:
                why_not.setdefault(SeparateMetadataStore, (
                    f"--db {self.name} with --colocate runs ZooKeeper on the broker nodes, "
                    f"so a broker cut off from the others loses it too: drop --colocate"))
            else:
                has.add(SeparateMetadataStore)
            for capability in (HasQuorum, HasDedicatedQuorum):
                why_not.setdefault(capability, (
                    f"--db {self.name} keeps its metadata in ZooKeeper, not in a KRaft "
                    f"quorum: fault ZooKeeper instead (pause-zookeeper, isolate-zookeeper), "
                    f"or run Kafka in KRaft mode (--db kafka --kafka-version 4.1.1)"))
        else:
            has.add(HasQuorum)
            if self.spec.controllers:
                has |= {HasDedicatedQuorum, SeparateMetadataStore}
            else:
                combined = (f"--db {self.name} runs its controllers on the broker nodes "
                            f"(combined)")
                why_not.setdefault(HasDedicatedQuorum,
                                   f"{combined}: add --controllers 3 for a quorum of its own")
                why_not.setdefault(SeparateMetadataStore, (
                    f"{combined}, so a broker cut off from the others loses the quorum "
                    f"too: add --controllers 3 for a quorum of its own"))
        has -= why_not.keys()
        backend = self.spec.backend
        if backend in MACHINE_BACKENDS:
            has |= {VMControl}
        else:
            why_not[VMControl] = (f"--db {self.name} on --backend {backend} has none: use "
                                  f"--backend {' or '.join(MACHINE_BACKENDS)}")
        if backend == "local" and self.spec.options.get("offset_clocks"):
            has |= {ClockControl}
        elif backend == "local":
            why_not[ClockControl] = (f"--db {self.name} was started with real clocks (the "
                                     "harness turns the clock library on when a clock "
                                     "fault is asked)")
        else:
            why_not[ClockControl] = (f"--db {self.name} on --backend {backend} has none: its "
                                     "node processes start with kchaos's clock library only "
                                     "on --backend local")
        if backend in BRIDGED_BACKENDS:
            has |= {CutsClients}
        else:
            why_not[CutsClients] = (
                f"on --backend {backend} the clients reach the nodes from addresses kchaos "
                f"does not know: use --backend {' or '.join(BRIDGED_BACKENDS)}")
        return Offer(f"--db {self.name}", frozenset(has), why_not)

    def describe(self) -> dict[str, Any]:
        return {"db": self.name, "broker": self.spec.launcher.to_json(),
                "broker_config": dict(self.spec.broker_config),
                "controllers": self.spec.controllers}


def cluster_spec(options: ClusterOptions, context: DBContext,
                 launcher: BrokerLauncher, controllers: int = 0) -> ClusterSpec:
    """The cluster of `context.nodes` brokers that `options` and `launcher` describe (no
    ZooKeeper for brokers that use none), with `controllers` dedicated controllers;
    ValueError when ZooKeepers are asked of those."""
    with_zookeeper = launcher.uses_zookeeper
    if not with_zookeeper and (options.zookeepers is not None or options.colocate):
        flag = "--zookeepers" if options.zookeepers is not None else "--colocate"
        raise ValueError(f"{flag}: these {launcher.kind} brokers run without ZooKeeper (in "
                         f"KRaft mode they are their own controllers); drop {flag}")
    return ClusterSpec(
        brokers=context.nodes,
        zookeepers=options.zookeeper_count() if with_zookeeper else 0,
        colocate=options.colocate and with_zookeeper,
        broker_config=dict(options.broker_config), backend=context.backend.backend,
        options=context.backend.spec_options(), launcher=launcher, controllers=controllers)
