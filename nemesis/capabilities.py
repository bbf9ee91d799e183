"""What a fault may ask of a running db: small protocols, each one power.

Every db offers `Nodes` (its nodes, its brokers and their ids, where clients connect).
The rest are optional, each a `Nodes` with one power more. A fault names those it needs
(`nemesis.package.Fault.needs`) and a db declares those it will have before it starts
(`Offer`), so a fault the db cannot serve is refused before the run, naming the db, the
fault and what to do (`refusal`).

    Killable           kill -9, start, graceful stop of a service on a node
    Pausable           SIGSTOP / SIGCONT a service on a node
    PartitionableNetwork  per-node inbound firewall rules (drops and packet loss)
    CutsClients        the address the run's clients reach the nodes from, to cut them off
    ClockControl       each node's wall clock, moved by an offset
    HasController      the node of the controller now
    HasLeaders         partition leaders, leader epochs and ISRs now (`Snapshot`)
    HasCoordinator     the node coordinating a consumer group or transactional id
    HasZooKeeper       a ZooKeeper ensemble: its nodes, a member's mode, registrations
    HasQuorum          a metadata quorum of its own (KRaft): its voters, the active one
    HasDedicatedQuorum   that quorum on controller nodes apart from the brokers
    SeparateMetadataStore  ZooKeeper or the quorum on nodes apart from the brokers
    VMControl          nodes that are whole machines: power off and on, freeze, thaw
    LosesUnflushed     brokers that lose what they had not fsynced when killed

A service is "broker", on a db with ZooKeeper "zookeeper", and on one with dedicated
controllers "controller". This module imports
nothing else of the project: the dbs (`harness.db`) implement it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

__all__ = [
    "NAMES",
    "ClockControl",
    "CutsClients",
    "HasController",
    "HasCoordinator",
    "HasDedicatedQuorum",
    "HasLeaders",
    "HasQuorum",
    "HasZooKeeper",
    "Killable",
    "LosesUnflushed",
    "Nodes",
    "Offer",
    "PartitionState",
    "PartitionableNetwork",
    "Pausable",
    "SeparateMetadataStore",
    "Snapshot",
    "VMControl",
    "dedicated_controllers",
    "refusal",
    "require",
    "zookeepers",
]


@dataclass(frozen=True)
class PartitionState:
    """One partition's leader (-1: none), leader epoch, ISR and replicas in assignment
    order, by broker id."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "leader": self.leader,
                "leader_epoch": self.leader_epoch, "isr": list(self.isr),
                "replicas": list(self.replicas)}


@dataclass(frozen=True)
class Snapshot:
    """The cluster's metadata at one moment: controller id and epoch, live broker ids and
    every partition's state."""

    controller: int | None
    controller_epoch: int | None
    brokers: frozenset[int]
    partitions: tuple[PartitionState, ...]


@runtime_checkable
class Nodes(Protocol):
    """Every running db: its nodes, its broker nodes and their ids, its clients' address."""

    @property
    def nodes(self) -> tuple[str, ...]: ...
    @property
    def brokers(self) -> tuple[str, ...]: ...
    @property
    def bootstrap_servers(self) -> str: ...
    def broker_id(self, node: str) -> int: ...
    def broker_node(self, broker_id: int) -> str: ...


@runtime_checkable
class Killable(Nodes, Protocol):
    """Services that can be killed (-9), stopped gracefully (a broker's controlled
    shutdown) and started again; each answers whether it did anything."""

    def running(self, node: str, service: str = "broker") -> bool: ...
    def kill(self, node: str, service: str = "broker") -> bool: ...
    def stop(self, node: str, service: str = "broker") -> bool: ...
    def start(self, node: str, service: str = "broker") -> bool: ...


@runtime_checkable
class Pausable(Nodes, Protocol):
    """Services that can be frozen (SIGSTOP) and continued (SIGCONT)."""

    def pause(self, node: str, service: str = "broker") -> bool: ...
    def resume(self, node: str, service: str = "broker") -> bool: ...


@runtime_checkable
class PartitionableNetwork(Nodes, Protocol):
    """Nodes whose inbound traffic can be cut or thinned."""

    def firewall(self, node: str, drop_from: Sequence[str] = (),
                 loss_from: Mapping[str, float] | None = None) -> None:
        """Replace `node`'s inbound rules: drop everything from `drop_from`, and packets
        from each node of `loss_from` with that probability; nothing given heals it."""


@runtime_checkable
class CutsClients(PartitionableNetwork, Protocol):
    """A network on which the run's clients reach the nodes from one known address, so a
    node's firewall can drop them while it keeps every other node."""

    def clients_address(self) -> str:
        """The source address of the clients' connections to the nodes."""


@runtime_checkable
class ClockControl(Nodes, Protocol):
    """Nodes whose processes read a wall clock the harness moves (the monotonic clock,
    which timeouts use, stays as it is)."""

    def set_clock_offset(self, node: str, milliseconds: int) -> None:
        """Set `node`'s wall clock to the real one plus `milliseconds` (0: the real one)."""

    def clock_offset(self, node: str) -> int:
        """The offset `node`'s wall clock runs at now, in milliseconds."""


@runtime_checkable
class HasController(Nodes, Protocol):
    """One broker is the cluster's controller."""

    def controller(self) -> str | None:
        """The controller's node now; None if there is none or it cannot be read."""


@runtime_checkable
class HasLeaders(Nodes, Protocol):
    """Partitions with leaders elected from an ISR; `session_timeout` bounds how long a
    dead leader keeps its leadership, `replica_lag_time` how long a cut follower stays in
    the ISR (seconds)."""

    @property
    def session_timeout(self) -> float: ...
    @property
    def replica_lag_time(self) -> float: ...

    def snapshot(self) -> Snapshot | None:
        """The metadata now; None when it cannot be read (a paused or cut-off store)."""

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        """One partition's leader, epoch and ISR now (its replicas left empty: one read, as
        quick as a poll needs); None when it has none or it cannot be read."""


@runtime_checkable
class HasCoordinator(Nodes, Protocol):
    """Consumer groups ("group") and transactional ids ("transaction") with coordinators:
    the leaders of an internal topic's partitions."""

    def coordinator(self, key: str, kind: str = "group") -> str | None:
        """The node coordinating `key` now; None when the db names none."""

    def coordinator_partition(self, key: str, kind: str = "group") -> tuple[str, int]:
        """The internal topic and partition whose leader coordinates `key`."""


@runtime_checkable
class HasZooKeeper(Nodes, Protocol):
    """A ZooKeeper ensemble (service "zookeeper") holding the brokers' sessions."""

    @property
    def zookeepers(self) -> tuple[str, ...]: ...
    @property
    def session_timeout(self) -> float: ...

    def zookeeper_mode(self, node: str) -> str | None:
        """"leader", "follower", "standalone", or None when the member does not answer."""

    def registered(self, node: str) -> bool | None:
        """Whether the broker of `node` is registered (its session lives); None when
        ZooKeeper does not answer."""


@runtime_checkable
class HasQuorum(Nodes, Protocol):
    """A metadata quorum of its own (KRaft) in place of ZooKeeper: its voters' nodes, the
    dedicated controllers among them (none: the brokers are their own controllers), the
    service the voters run, and the active controller (`controller()`)."""

    @property
    def voters(self) -> tuple[str, ...]: ...
    @property
    def controllers(self) -> tuple[str, ...]: ...
    @property
    def quorum_service(self) -> str: ...

    def controller(self) -> str | None:
        """The active controller's node now; None when there is none or it cannot be read."""


@runtime_checkable
class HasDedicatedQuorum(HasQuorum, Protocol):
    """A metadata quorum on controller nodes apart from the brokers, so that faults can
    take it away from brokers that keep running; a declaration, no methods beyond."""


@runtime_checkable
class SeparateMetadataStore(Nodes, Protocol):
    """The metadata store (ZooKeeper, or a KRaft quorum of dedicated controllers) on nodes
    apart from the brokers, so that a broker cut off from the other brokers still reaches
    it (and can shrink its ISR); a declaration, no methods."""


@runtime_checkable
class VMControl(Nodes, Protocol):
    """Nodes that are whole machines."""

    def machine_state(self, node: str) -> str:
        """"running", "shut off" or "paused", as libvirt names them."""

    def power_off(self, node: str) -> None: ...
    def power_on(self, node: str) -> None: ...
    def suspend_machine(self, node: str) -> None: ...
    def resume_machine(self, node: str) -> None: ...


@runtime_checkable
class LosesUnflushed(Nodes, Protocol):
    """Brokers that, started after a kill -9, cut each log back to its last fsynced offset
    (the page cache a power loss takes); a declaration, no methods."""


NAMES: dict[type, str] = {
    Killable: "killing and starting processes",
    Pausable: "pausing processes",
    PartitionableNetwork: "a network it can partition",
    CutsClients: "the clients' address on the nodes' network",
    ClockControl: "node clocks it can move",
    HasController: "a controller",
    HasLeaders: "partition leaders",
    HasCoordinator: "group and transaction coordinators",
    HasZooKeeper: "ZooKeeper",
    HasQuorum: "a metadata quorum of its own (KRaft)",
    HasDedicatedQuorum: "dedicated controllers (a quorum apart from the brokers)",
    SeparateMetadataStore: "a metadata store on nodes apart from the brokers",
    VMControl: "VM control",
    LosesUnflushed: "brokers that lose their unflushed data when killed",
}


@dataclass(frozen=True)
class Offer:
    """What a db will be able to do once running: `db` as the user names it (e.g. "--db
    kafka"), the capabilities it `has`, and for some it lacks, a sentence naming the db,
    why and what to do instead (`why_not`: "--db kchaos on --backend local has none: use
    --backend vagrant")."""

    db: str
    has: frozenset[type]
    why_not: Mapping[type, str] = field(default_factory=dict)


def refusal(fault: str, needs: Sequence[type], offer: Offer) -> str | None:
    """Why `offer` cannot serve the fault `fault`, which needs `needs`; None if it can."""
    for capability in needs:
        if capability not in offer.has:
            why = offer.why_not.get(capability, f"{offer.db} has none")
            return f"--nemesis {fault} needs {NAMES[capability]}; {why}"
    return None


Capability = TypeVar("Capability")


def require(cluster: object, capability: type[Capability]) -> Capability:
    """`cluster` as a db with `capability`; TypeError if it has not (a fault the db's
    offer should have refused before the run)."""
    if not isinstance(cluster, capability):
        raise TypeError(f"{type(cluster).__name__} has no {NAMES[capability]}")
    return cluster


def zookeepers(cluster: object) -> tuple[str, ...]:
    """The ZooKeeper nodes of a db that has ZooKeeper; none otherwise."""
    return cluster.zookeepers if isinstance(cluster, HasZooKeeper) else ()


def dedicated_controllers(cluster: object) -> tuple[str, ...]:
    """The dedicated controller nodes of a db with a metadata quorum; none otherwise."""
    return cluster.controllers if isinstance(cluster, HasQuorum) else ()
