"""A whole cluster on any backend: ZooKeeper ensemble + brokers, up, status, down. Brokers
that use no ZooKeeper (Kafka in KRaft mode) get no ensemble: their controller is the
metadata quorum's leader, their leaders and ISRs are what a broker's Metadata says. Their
quorum's voters are the brokers themselves (combined) or dedicated controllers
(`controllers`, nodes `c1..cN`, `harness.db.controllers`).

`Cluster.up(spec)` provisions nodes with the spec's backend (`harness.control.backends`;
locally brokers `n1..nN` and ZooKeepers `z1..zM`, or ZooKeeper co-located on the first
brokers; on ssh and vagrant the inventory's hosts by role), starts the ensemble members in
parallel (or the dedicated controllers, until they elect a leader), then the brokers, and
returns once the cluster is healthy.

Beside the backend's record, the run's state directory `<state root>/<prefix>` holds
`cluster.json` (roles, pids, the work directory `<base_dir>/<prefix>` on the nodes),
rewritten whenever a process starts, so `down()` in another process, even after the
harness was SIGKILLed, removes everything.

A running `Cluster` implements the capabilities faults ask of a db
(`nemesis.capabilities`): `Nodes`, `Killable` and `Pausable` (a `service` of "broker",
"zookeeper" or "controller"), `PartitionableNetwork`, `HasController` and `HasLeaders` (read from
ZooKeeper, `harness.db.znodes`), `HasCoordinator`, `HasZooKeeper`, and `VMControl` when
its nodes are machines (`harness.control.vagrant`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.control import ProvisionError, Remote, backends
from harness.control.clocks import ClockedRemote
from harness.control.runstate import default_state_root, write_json
from harness.control.vagrant import MachineControl
from harness.db.brokers import (
    CLIENT_PORT,
    BrokerLauncher,
    BrokerSet,
    KchaosBroker,
    QuorumState,
)
from harness.db.controllers import ControllerSet
from harness.db.coordinator import (
    KINDS,
    find_coordinator,
    loaded_coordinator,
    offsets_partition,
)
from harness.db.files import fetch
from harness.db.launchers import launcher_from_json
from harness.db.metadata_views import MetadataView, QuorumView, Voters, ZooKeeperView
from harness.db.zookeeper import ZooKeeperEnsemble, ZooKeeperSettings
from nemesis.capabilities import PartitionState, Snapshot

__all__ = ["Cluster", "ClusterSpec", "down", "recorded_clusters", "start_reaper"]

CLUSTER_FILE = "cluster.json"
log = logging.getLogger(__name__)
SERVICES = ("broker", "zookeeper", "controller")
MAX_CONTROLLERS = 9


@dataclass(frozen=True)
class ClusterSpec:
    """What to bring up. `options` are the backend's: ssh `inventory` (a path),
    `accept_new_host_keys`, `install` (packages and kchaos, default true); vagrant
    `vagrant_dir` and the same; docker `base_url`, `image`. With ssh and vagrant the
    first `brokers` broker hosts and `zookeepers` ZooKeeper hosts of the inventory run
    (and `controllers` controller hosts). `launcher` says which broker runs: ours by
    default, or Apache Kafka; `controllers` dedicated controllers run beside brokers that
    use no ZooKeeper (none: the brokers are their own controllers)."""

    brokers: int = 5
    zookeepers: int = 3
    colocate: bool = False
    broker_config: Mapping[str, str] = field(default_factory=dict)
    zookeeper: ZooKeeperSettings = field(default_factory=ZooKeeperSettings)
    base_dir: str = "/tmp/kchaos"
    backend: str = "local"
    options: Mapping[str, Any] = field(default_factory=dict)
    launcher: BrokerLauncher = field(default_factory=KchaosBroker)
    controllers: int = 0

    def __post_init__(self) -> None:
        if self.controllers and self.launcher.uses_zookeeper:
            raise ValueError(f"{self.launcher.kind} brokers with ZooKeeper take no dedicated "
                             f"controllers, got {self.controllers}")
        if not 0 <= self.controllers <= MAX_CONTROLLERS:
            raise ValueError(f"need 0 to {MAX_CONTROLLERS} dedicated controllers, "
                             f"got {self.controllers}")
        if not self.launcher.uses_zookeeper:
            if self.zookeepers != 0:
                raise ValueError(f"{self.launcher.kind} brokers without ZooKeeper take no "
                                 f"ZooKeepers, got {self.zookeepers}")
        elif not 1 <= self.zookeepers <= 99:
            raise ValueError("need 1 to 99 ZooKeepers")
        if not 1 <= self.brokers <= 99:
            raise ValueError("need 1 to 99 brokers")
        if self.colocate and self.zookeepers > self.brokers:
            raise ValueError("co-located ZooKeepers need at least as many broker nodes")
        if self.backend not in backends.BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(backends.BACKENDS)}, "
                             f"got {self.backend!r}")

    @property
    def broker_nodes(self) -> tuple[str, ...]:
        return tuple(f"n{i}" for i in range(1, self.brokers + 1))

    @property
    def zookeeper_nodes(self) -> tuple[str, ...]:
        if self.colocate:
            return self.broker_nodes[: self.zookeepers]
        return tuple(f"z{i}" for i in range(1, self.zookeepers + 1))

    @property
    def controller_nodes(self) -> tuple[str, ...]:
        return tuple(f"c{i}" for i in range(1, self.controllers + 1))

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.broker_nodes + self.zookeeper_nodes
                                   + self.controller_nodes))

    def to_json(self) -> dict:
        return {"brokers": self.brokers, "zookeepers": self.zookeepers,
                "colocate": self.colocate, "broker_config": dict(self.broker_config),
                "zookeeper": asdict(self.zookeeper), "base_dir": self.base_dir,
                "backend": self.backend, "options": dict(self.options),
                "launcher": self.launcher.to_json(), "controllers": self.controllers}

    @classmethod
    def from_json(cls, data: Mapping) -> ClusterSpec:
        return cls(data["brokers"], data["zookeepers"], data["colocate"],
                   dict(data["broker_config"]), ZooKeeperSettings(**data["zookeeper"]),
                   data["base_dir"], data.get("backend", "local"), dict(data.get("options", {})),
                   launcher_from_json(data.get("launcher", {"kind": "kchaos"})),
                   data.get("controllers", 0))


class Cluster:
    """A running cluster; a context manager whose exit takes it down."""

    def __init__(self, remote: Remote, spec: ClusterSpec, workdir: str,
                 zookeeper: ZooKeeperEnsemble, brokers: BrokerSet,
                 controllers: ControllerSet | None = None) -> None:
        self.remote = remote
        self.spec = spec
        self.workdir = workdir
        self.zookeeper = zookeeper
        self.broker_set = brokers
        self.controller_set = controllers or ControllerSet.none(remote, workdir)
        combined = not brokers.launcher.uses_zookeeper and not self.controller_set.nodes
        # the quorum's voters: with ZooKeeper none (the empty controller set)
        self.voter_set: Voters = brokers if combined else self.controller_set
        self.metadata_view: MetadataView = (
            ZooKeeperView(brokers) if brokers.launcher.uses_zookeeper
            else QuorumView(brokers, self.voter_set))

    # -- lifecycle ----------------------------------------------------------------------

    @classmethod
    def up(cls, spec: ClusterSpec, state_root: Path | None = None, timeout: float = 60.0,
           remote: Remote | None = None, logs_dest: Path | None = None,
           reaper: bool = True) -> Cluster:
        """Provision (or take over `remote`, a backend with `state_dir`, `detach()` and
        `destroy()`), start the reaper (`harness.db.reaper`: it takes the cluster down if
        this process dies without doing so), start ZooKeeper then the brokers, wait until
        healthy. On any failure or interrupt, the node logs are copied to `logs_dest` (when
        given), then everything made so far is removed before the exception propagates."""
        remote = remote or backends.provision(
            spec.backend, spec.options, spec.nodes,
            lambda inventory: sum(_inventory_roles(spec, inventory), ()), state_root)
        if spec.backend == "local" and spec.options.get("offset_clocks"):
            remote = ClockedRemote(remote)
        prefix = remote.state_dir.name
        workdir = f"{spec.base_dir}/{prefix}"
        log.info("cluster %s: nodes provisioned, work directory %s", prefix, workdir)
        try:
            if reaper:
                log.info("cluster %s: reaper pid %d", prefix,
                         start_reaper(prefix, remote.state_dir.parent))
            broker_nodes, zookeeper_nodes, controller_nodes = _roles(spec, remote)
            ensemble = ZooKeeperEnsemble(remote, zookeeper_nodes, workdir, spec.zookeeper)
            launcher = spec.launcher.prepare(remote, broker_nodes, workdir, controller_nodes)
            brokers = BrokerSet(remote, broker_nodes, workdir, ensemble.connect,
                                dict(spec.broker_config), launcher)
            controllers = ControllerSet(
                remote, controller_nodes, workdir, len(broker_nodes),
                launcher.for_controllers() if controller_nodes else None,
                dict(spec.broker_config))
            cluster = cls(remote, spec, workdir, ensemble, brokers, controllers)
            cluster.save()
            ensemble.start(timeout=timeout)
            controllers.start()
            cluster.save()
            controllers.wait_leader(timeout=timeout)
            brokers.start()
            cluster.save()
            brokers.wait_healthy(timeout=timeout)
        except BaseException:
            if logs_dest is not None:
                with contextlib.suppress(Exception):
                    cluster.collect_logs(logs_dest)
            with contextlib.suppress(Exception):
                brokers.close()
            backends.destroy(prefix, remote.state_dir.parent, workdir, remote)
            raise
        return cluster

    @classmethod
    def attach(cls, prefix: str | None = None, state_root: Path | None = None) -> Cluster:
        """The cluster of an earlier `up` (the only one recorded, when `prefix` is None)."""
        root = state_root or default_state_root()
        if prefix is None:
            prefixes = recorded_clusters(root)
            if len(prefixes) != 1:
                raise LookupError(f"{len(prefixes)} clusters recorded under {root}"
                                  + (f" ({', '.join(prefixes)}); name one" if prefixes else ""))
            prefix = prefixes[0]
        remote = backends.attach(root / prefix)
        try:
            data = json.loads((root / prefix / CLUSTER_FILE).read_text())
        except (OSError, ValueError) as error:
            raise LookupError(f"{root / prefix}: no readable {CLUSTER_FILE}: {error}") from error
        controllers = data.get("controllers")
        return cls(remote, ClusterSpec.from_json(data["spec"]), data["workdir"],
                   ZooKeeperEnsemble.from_json(remote, data["zookeeper"]),
                   BrokerSet.from_json(remote, data["brokers"],
                                       launcher_from_json(data["brokers"]["launcher"])),
                   None if not controllers else ControllerSet.from_json(
                       remote, controllers, None if controllers["launcher"] is None
                       else launcher_from_json(controllers["launcher"])))

    def detach(self) -> None:
        """Leave the cluster running after this process exits (`kchaos cluster up`)."""
        self.broker_set.close()
        self.remote.detach()

    def down(self, keep_data: bool = False) -> None:
        self.broker_set.close()
        backends.destroy(self.prefix, self.remote.state_dir.parent,
                         None if keep_data else self.workdir, self.remote)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def save(self) -> None:
        data = {"spec": self.spec.to_json(), "workdir": self.workdir,
                "zookeeper": self.zookeeper.to_json(), "brokers": self.broker_set.to_json(),
                "controllers": self.controller_set.to_json()}
        write_json(self.remote.state_dir / CLUSTER_FILE, data)

    def collect_logs(self, dest: Path) -> list[Path]:
        """Copy every node's broker, controller and ZooKeeper logs to `dest/<node>/`, and
        what the launcher derives from them; returns the files made."""
        copied = []
        for node in self.nodes:
            files = []
            if node in self.brokers:
                files += self.broker_set.log_files(node)
            if node in self.controllers:
                files += self.controller_set.log_files(node)
            if node in self.zookeepers:
                files += self.zookeeper.log_files(node)
            for path in files:
                target = dest / node / Path(path).name
                if fetch(self.remote, node, path, target):
                    copied.append(target)
            if node in self.brokers or node in self.controllers:
                copied += self.broker_set.launcher.derive_logs(dest / node)
        return copied

    # -- what nemeses and the CLI use ---------------------------------------------------

    @property
    def prefix(self) -> str:
        return self.remote.state_dir.name

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.brokers + self.zookeepers + self.controllers))

    @property
    def brokers(self) -> tuple[str, ...]:
        return self.broker_set.nodes

    @property
    def controllers(self) -> tuple[str, ...]:
        """The dedicated controllers' nodes (none: the brokers are their own, or ZooKeeper
        elects one of them)."""
        return self.controller_set.nodes

    @property
    def voters(self) -> tuple[str, ...]:
        """The metadata quorum's voters: the dedicated controllers, else the brokers of a
        cluster without ZooKeeper; none with ZooKeeper."""
        return self.voter_set.nodes

    @property
    def quorum_service(self) -> str:
        """The service the quorum's voters run: "controller" or (combined) "broker"."""
        return "controller" if self.controllers else "broker"

    @property
    def zookeepers(self) -> tuple[str, ...]:
        return self.zookeeper.nodes

    @property
    def bootstrap_servers(self) -> str:
        return self.broker_set.bootstrap

    @property
    def zookeeper_connect(self) -> str:
        return self.zookeeper.connect

    @property
    def session_timeout(self) -> float:
        return self.broker_set.session_timeout

    @property
    def replica_lag_time(self) -> float:
        return self.broker_set.replica_lag_time

    @property
    def zk(self):
        """A kazoo client on the ensemble (from the controlling host, never firewalled)."""
        return self.broker_set.zk

    def broker_id(self, node: str) -> int:
        return self.broker_set.broker_id(node)

    def firewall(self, node: str, drop_from: Sequence[str] = (),
                 loss_from: Mapping[str, float] | None = None) -> None:
        self.remote.firewall(node, drop_from, loss_from)

    def set_clock_offset(self, node: str, milliseconds: int) -> None:
        """Move `node`'s wall clock (a cluster on real clocks takes 0 only)."""
        if isinstance(self.remote, ClockedRemote):
            self.remote.set_offset(node, milliseconds)
        elif milliseconds:
            raise TypeError("this cluster's processes run on the real clock: clock faults "
                            "need the clock library (--backend local, turned on when asked)")

    def clock_offset(self, node: str) -> int:
        return self.remote.offset(node) if isinstance(self.remote, ClockedRemote) else 0

    def clients_address(self) -> str:
        """The address the clients reach the nodes from (a backend whose nodes sit on a
        bridge of this host; others have none, and `ClusterDB.offer` says so)."""
        address = getattr(self.remote, "clients_address", None)
        if address is None:
            raise TypeError(f"{type(self.remote).__name__} knows no clients' address")
        return address()

    def snapshot(self) -> Snapshot | None:
        """Controller, live brokers and partition states now (`metadata_view`); None when
        nothing answers."""
        return self.metadata_view.snapshot()

    def controller(self) -> str | None:
        """The controller's node: in ZooKeeper mode /controller's broker; without ZooKeeper
        the metadata quorum's leader (the active controller)."""
        return self.metadata_view.controller()

    def quorum(self) -> tuple[int, int] | None:
        """(leader node id, epoch) of the metadata quorum as its running voters' state
        files say; None without a quorum or a leader."""
        return self.voter_set.quorum()

    def voter_states(self) -> dict[str, QuorumState | None]:
        """Each running voter's view of the quorum (None: unread), by node."""
        return self.voter_set.voter_states()

    def voter_id(self, node: str) -> int:
        """The node id of the voter on `node`."""
        return self.voter_set.node_id(node)

    def voter_node(self, node_id: int) -> str | None:
        """The node of the quorum voter with `node_id`; None when it names none."""
        return self.voter_set.node_of(node_id)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        """The partition's state now (one read): its state znode, or without ZooKeeper what
        a running broker's Metadata says; None when nothing answers or it has none."""
        return self.metadata_view.partition_state(topic, partition)

    def registered(self, node: str) -> bool | None:
        """Whether /brokers/ids/<id> of `node`'s broker exists; None if ZooKeeper does not
        answer."""
        path = f"/brokers/ids/{self.broker_id(node)}"
        try:
            return self.zk.exists_async(path).get(timeout=2.0) is not None
        except Exception:  # kazoo: timeout or connection loss
            return None

    def _machines(self) -> MachineControl:
        if not isinstance(self.remote, MachineControl):
            raise TypeError(f"nodes of {type(self.remote).__name__} are not machines")
        return self.remote

    def machine_state(self, node: str) -> str:
        return self._machines().machine_state(node)

    def power_off(self, node: str) -> None:
        self._machines().power_off(node)

    def power_on(self, node: str) -> None:
        self._machines().power_on(node)

    def suspend_machine(self, node: str) -> None:
        self._machines().suspend(node)

    def resume_machine(self, node: str) -> None:
        self._machines().resume(node)

    def broker_node(self, broker_id: int) -> str:
        return self.broker_set.broker_node(broker_id)

    def zookeeper_mode(self, node: str) -> str | None:
        return self.zookeeper.mode(node)

    def running(self, node: str, service: str = "broker") -> bool:
        return self._service(service).running(node)

    def pid(self, node: str, service: str = "broker") -> int | None:
        return self._service(service).pid(node)

    def kill(self, node: str, service: str = "broker") -> bool:
        return self._service(service).kill(node)

    def pause(self, node: str, service: str = "broker") -> bool:
        return self._service(service).pause(node)

    def resume(self, node: str, service: str = "broker") -> bool:
        return self._service(service).resume(node)

    def stop(self, node: str, service: str = "broker") -> bool:
        """Graceful stop: SIGTERM for a broker (controlled shutdown), SIGKILL for ZooKeeper
        and for a dedicated controller."""
        if service == "broker":
            return self.broker_set.stop(node)
        return self._service(service).kill(node)

    def start(self, node: str, service: str = "broker") -> bool:
        """Start the service on `node` unless it runs; True if it was started."""
        if service == "broker":
            started = bool(self.broker_set.start([node]))
        elif service == "controller":
            started = bool(self.controller_set.start([node]))
        else:
            started = not self.zookeeper.running(node)
            self.zookeeper.start([node])
        if started:
            self.save()
        return started

    def coordinator(self, key: str, kind: str = "group", timeout: float = 5.0) -> str | None:
        """The node coordinating `key`, a consumer group or (`kind` "transaction") a
        transactional id: what the running brokers answer to FindCoordinator, asked until
        one names a broker or `timeout` passes; failing that, the event logs' latest load
        line for the key's internal partition (our broker writes them); None when neither
        says."""
        deadline = time.monotonic() + timeout
        while True:
            for node in [n for n in self.brokers if self.running(n)]:
                try:
                    found = find_coordinator(self.remote.address(node), CLIENT_PORT, key,
                                             kind=kind)
                except (OSError, ValueError, struct.error):
                    continue
                if found is not None and 1 <= found <= len(self.brokers):
                    return self.broker_node(found)
            if time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        return self._loaded_coordinator(key, kind)

    def coordinator_partition(self, key: str, kind: str = "group") -> tuple[str, int]:
        """The internal topic and partition whose leader coordinates `key`: of the topic's
        partition count in ZooKeeper once it exists (each db sizes it its own way), else
        the configured one."""
        spec = KINDS[kind]
        partitions = int(self.broker_set.overrides.get(spec.partitions_property,
                                                       spec.default_partitions))
        return spec.topic, offsets_partition(
            key, self.metadata_view.partition_count(spec.topic, partitions))

    def _loaded_coordinator(self, key: str, kind: str = "group") -> str | None:
        _, partition = self.coordinator_partition(key, kind)
        found = loaded_coordinator(self._event_log_lines(), partition, kind)
        return None if found is None or not 1 <= found <= len(self.brokers) \
            else self.broker_node(found)

    def _event_log_lines(self) -> list[str]:
        """Every line of the brokers' event logs (`*.jsonl` among their log files)."""
        lines: list[str] = []
        with tempfile.TemporaryDirectory(prefix="kchaos-events-") as scratch:
            for node in self.brokers:
                for path in self.broker_set.log_files(node):
                    local = Path(scratch) / node / Path(path).name
                    if path.endswith(".jsonl") and fetch(self.remote, node, path, local):
                        lines += local.read_text(errors="replace").splitlines()
        return lines

    def _service(self, service: str) -> BrokerSet | ZooKeeperEnsemble | ControllerSet:
        if service == "broker":
            return self.broker_set
        if service == "zookeeper":
            return self.zookeeper
        if service == "controller":
            return self.controller_set
        raise ValueError(f"service must be one of {SERVICES}, got {service!r}")

    def facts(self) -> dict[str, Any]:
        """What a run records of this cluster in test.json."""
        return {"node_broker_ids": {node: self.broker_id(node) for node in self.brokers},
                "bootstrap_servers": self.bootstrap_servers, "cluster_prefix": self.prefix,
                "nodes": {node: self.remote.address(node) for node in self.nodes}}

    def processes(self) -> dict:
        """Nodes with their roles, addresses and live pids, as `kchaos cluster up` prints."""
        nodes = []
        for node in self.nodes:
            roles = [s for s, members in (("broker", self.brokers),
                                          ("zookeeper", self.zookeepers),
                                          ("controller", self.controllers)) if node in members]
            pids = {s: self.pid(node, s) for s in roles if self.running(node, s)}
            nodes.append({"name": node, "address": self.remote.address(node),
                          "role": "+".join(roles), "pids": pids})
        return {"prefix": self.prefix, "bootstrap_servers": self.bootstrap_servers,
                "zookeeper_connect": self.zookeeper_connect, "nodes": nodes}


def start_reaper(prefix: str, state_root: Path) -> int:
    """Start the reaper of run `prefix` (`python -m harness.db.reaper`) in its own session;
    returns its pid."""
    with open(state_root / f"{prefix}.reaper.log", "ab") as out:
        reaper = subprocess.Popen(
            [sys.executable, "-m", "harness.db.reaper", prefix, str(state_root)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    return reaper.pid


def recorded_clusters(state_root: Path | None = None) -> list[str]:
    """The prefixes of the clusters recorded under `state_root` (up, or left behind)."""
    root = state_root or default_state_root()
    return [prefix for prefix in backends.runs(root, include_owned=True)
            if (root / prefix / CLUSTER_FILE).exists()]


def down(prefix: str | None = None, state_root: Path | None = None,
         keep_data: bool = False) -> list[str]:
    """Take down the named run, or every run whose owner is gone or that was detached
    (`kchaos cluster down`), on any backend; returns the prefixes removed. Idempotent."""
    root = state_root or default_state_root()
    prefixes = [prefix] if prefix else backends.runs(root)
    for each in prefixes:
        workdir = None
        with contextlib.suppress(OSError, ValueError, KeyError):
            workdir = json.loads((root / each / CLUSTER_FILE).read_text())["workdir"]
        backends.destroy(each, root, None if keep_data else workdir)
    return prefixes


Roles = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def _roles(spec: ClusterSpec, remote: Remote) -> Roles:
    """(broker, ZooKeeper, controller nodes): from the remote's inventory when it has one."""
    inventory = getattr(remote, "inventory", None)
    if inventory is None:
        return spec.broker_nodes, spec.zookeeper_nodes, spec.controller_nodes
    return _inventory_roles(spec, inventory)


def _inventory_roles(spec: ClusterSpec, inventory: Any) -> Roles:
    brokers = inventory.with_role("broker")
    zookeepers = brokers if spec.colocate else inventory.with_role("zookeeper")
    controllers = inventory.with_role("controller")
    if len(brokers) < spec.brokers or len(zookeepers) < spec.zookeepers:
        raise ProvisionError(
            f"the inventory has {len(brokers)} broker and {len(zookeepers)} ZooKeeper hosts; "
            f"{spec.brokers} and {spec.zookeepers} were asked for (--nodes, --zookeepers)")
    if len(controllers) < spec.controllers:
        raise ProvisionError(
            f"the inventory has {len(controllers)} controller hosts; {spec.controllers} were "
            f"asked for (--controllers): add hosts with role = \"controller\"")
    return (brokers[: spec.brokers], zookeepers[: spec.zookeepers],
            controllers[: spec.controllers])
