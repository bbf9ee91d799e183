"""A whole cluster on network namespaces: ZooKeeper ensemble + brokers, up, status, down.

`Cluster.up(spec)` provisions nodes (`n1..nN` brokers, `z1..zM` ZooKeepers, or ZooKeeper
co-located on the first brokers), starts the ensemble members in parallel, then the
brokers, and returns once the cluster is healthy. The run's state directory holds the
network (`network.json`, written by the local backend before anything exists) and
`cluster.json` (roles, pids, the work directory `<base_dir>/<prefix>` on the nodes),
rewritten whenever a process starts, so `down()` in another process, even after the
harness was SIGKILLed, removes everything.

The nemesis-facing methods (`kill`, `start`, `stop`, `pause`, `resume`, `running`, with a
`service` of "broker" or "zookeeper") are what `nemesis.targets.ClusterControl` expects.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.control.local import LocalRemote, default_state_root, destroy_run, run_prefixes
from harness.db.brokers import BrokerSet
from harness.db.files import fetch
from harness.db.zookeeper import ZooKeeperEnsemble, ZooKeeperSettings

__all__ = ["Cluster", "ClusterSpec", "down"]

CLUSTER_FILE = "cluster.json"
SERVICES = ("broker", "zookeeper")


@dataclass(frozen=True)
class ClusterSpec:
    brokers: int = 5
    zookeepers: int = 3
    colocate: bool = False
    broker_config: Mapping[str, str] = field(default_factory=dict)
    zookeeper: ZooKeeperSettings = field(default_factory=ZooKeeperSettings)
    base_dir: str = "/tmp/kchaos"

    def __post_init__(self) -> None:
        if not 1 <= self.brokers <= 99 or not 1 <= self.zookeepers <= 99:
            raise ValueError("need 1 to 99 brokers and 1 to 99 ZooKeepers")
        if self.colocate and self.zookeepers > self.brokers:
            raise ValueError("co-located ZooKeepers need at least as many broker nodes")

    @property
    def broker_nodes(self) -> tuple[str, ...]:
        return tuple(f"n{i}" for i in range(1, self.brokers + 1))

    @property
    def zookeeper_nodes(self) -> tuple[str, ...]:
        if self.colocate:
            return self.broker_nodes[: self.zookeepers]
        return tuple(f"z{i}" for i in range(1, self.zookeepers + 1))

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.broker_nodes + self.zookeeper_nodes))

    def to_json(self) -> dict:
        return {"brokers": self.brokers, "zookeepers": self.zookeepers,
                "colocate": self.colocate, "broker_config": dict(self.broker_config),
                "zookeeper": asdict(self.zookeeper), "base_dir": self.base_dir}

    @classmethod
    def from_json(cls, data: Mapping) -> ClusterSpec:
        return cls(data["brokers"], data["zookeepers"], data["colocate"],
                   dict(data["broker_config"]), ZooKeeperSettings(**data["zookeeper"]),
                   data["base_dir"])


class Cluster:
    """A running cluster; a context manager whose exit takes it down."""

    def __init__(self, remote: LocalRemote, spec: ClusterSpec, workdir: str,
                 zookeeper: ZooKeeperEnsemble, brokers: BrokerSet) -> None:
        self.remote = remote
        self.spec = spec
        self.workdir = workdir
        self.zookeeper = zookeeper
        self.broker_set = brokers

    # -- lifecycle ----------------------------------------------------------------------

    @classmethod
    def up(cls, spec: ClusterSpec, state_root: Path | None = None,
           timeout: float = 60.0) -> Cluster:
        """Provision, start ZooKeeper then the brokers, wait until healthy. On any failure or
        interrupt, everything made so far is removed before the exception propagates."""
        remote = LocalRemote.provision(spec.nodes, state_root)
        try:
            workdir = f"{spec.base_dir}/{remote.network.prefix}"
            ensemble = ZooKeeperEnsemble(remote, spec.zookeeper_nodes, workdir, spec.zookeeper)
            brokers = BrokerSet(remote, spec.broker_nodes, workdir, ensemble.connect,
                                dict(spec.broker_config))
            cluster = cls(remote, spec, workdir, ensemble, brokers)
            cluster.save()
            ensemble.start(timeout=timeout)
            cluster.save()
            brokers.start()
            cluster.save()
            brokers.wait_healthy(timeout=timeout)
        except BaseException:
            with contextlib.suppress(Exception):
                brokers.close()
            _destroy(remote.network.prefix, remote.state_dir.parent,
                     f"{spec.base_dir}/{remote.network.prefix}")
            raise
        return cluster

    @classmethod
    def attach(cls, prefix: str | None = None, state_root: Path | None = None) -> Cluster:
        """The cluster of an earlier `up` (the only one recorded, when `prefix` is None)."""
        root = state_root or default_state_root()
        if prefix is None:
            prefixes = [p for p in run_prefixes(root, include_owned=True)
                        if (root / p / CLUSTER_FILE).exists()]
            if len(prefixes) != 1:
                raise LookupError(f"{len(prefixes)} clusters recorded under {root}"
                                  + (f" ({', '.join(prefixes)}); name one" if prefixes else ""))
            prefix = prefixes[0]
        remote = LocalRemote.attach(root / prefix)
        try:
            data = json.loads((root / prefix / CLUSTER_FILE).read_text())
        except (OSError, ValueError) as error:
            raise LookupError(f"{root / prefix}: no readable {CLUSTER_FILE}: {error}") from error
        return cls(remote, ClusterSpec.from_json(data["spec"]), data["workdir"],
                   ZooKeeperEnsemble.from_json(remote, data["zookeeper"]),
                   BrokerSet.from_json(remote, data["brokers"]))

    def detach(self) -> None:
        """Leave the cluster running after this process exits (`kchaos cluster up`)."""
        self.broker_set.close()
        self.remote.detach()

    def down(self, keep_data: bool = False) -> None:
        self.broker_set.close()
        _destroy(self.prefix, self.remote.state_dir.parent, None if keep_data else self.workdir)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def save(self) -> None:
        data = {"spec": self.spec.to_json(), "workdir": self.workdir,
                "zookeeper": self.zookeeper.to_json(), "brokers": self.broker_set.to_json()}
        path = self.remote.state_dir / CLUSTER_FILE
        path.with_suffix(".tmp").write_text(json.dumps(data, indent=1) + "\n")
        path.with_suffix(".tmp").replace(path)

    def collect_logs(self, dest: Path) -> list[Path]:
        """Copy every node's broker and ZooKeeper logs to `dest/<node>/`; returns the copies."""
        copied = []
        for node in self.nodes:
            files = []
            if node in self.brokers:
                files += self.broker_set.log_files(node)
            if node in self.zookeepers:
                files += self.zookeeper.log_files(node)
            for path in files:
                target = dest / node / Path(path).name
                if fetch(self.remote, node, path, target):
                    copied.append(target)
        return copied

    # -- what nemeses and the CLI use ---------------------------------------------------

    @property
    def prefix(self) -> str:
        return self.remote.network.prefix

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.spec.nodes

    @property
    def brokers(self) -> tuple[str, ...]:
        return self.spec.broker_nodes

    @property
    def zookeepers(self) -> tuple[str, ...]:
        return self.spec.zookeeper_nodes

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
    def zk(self):
        """A kazoo client on the ensemble (from the controlling host, never firewalled)."""
        return self.broker_set.zk

    def broker_id(self, node: str) -> int:
        return self.broker_set.broker_id(node)

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
        """Graceful stop: SIGTERM for a broker (controlled shutdown), SIGKILL for ZooKeeper."""
        if service == "broker":
            return self.broker_set.stop(node)
        return self.zookeeper.kill(node)

    def start(self, node: str, service: str = "broker") -> bool:
        """Start the service on `node` unless it runs; True if it was started."""
        if service == "broker":
            started = bool(self.broker_set.start([node]))
        else:
            started = not self.zookeeper.running(node)
            self.zookeeper.start([node])
        if started:
            self.save()
        return started

    def _service(self, service: str) -> BrokerSet | ZooKeeperEnsemble:
        if service == "broker":
            return self.broker_set
        if service == "zookeeper":
            return self.zookeeper
        raise ValueError(f"service must be one of {SERVICES}, got {service!r}")

    def processes(self) -> dict:
        """Nodes with their roles, addresses and live pids, as `kchaos cluster up` prints."""
        nodes = []
        for node in self.nodes:
            roles = [s for s, members in (("broker", self.brokers),
                                          ("zookeeper", self.zookeepers)) if node in members]
            pids = {s: self.pid(node, s) for s in roles if self.running(node, s)}
            nodes.append({"name": node, "address": self.remote.address(node),
                          "role": "+".join(roles), "pids": pids})
        return {"prefix": self.prefix, "bootstrap_servers": self.bootstrap_servers,
                "zookeeper_connect": self.zookeeper_connect, "nodes": nodes}


def down(prefix: str | None = None, state_root: Path | None = None,
         keep_data: bool = False) -> list[str]:
    """Take down the named run, or every run whose owner is gone or that was detached
    (`kchaos cluster down`); returns the prefixes removed. Idempotent."""
    root = state_root or default_state_root()
    prefixes = [prefix] if prefix else run_prefixes(root)
    for each in prefixes:
        workdir = None
        with contextlib.suppress(OSError, ValueError, KeyError):
            workdir = json.loads((root / each / CLUSTER_FILE).read_text())["workdir"]
        _destroy(each, root, None if keep_data else workdir)
    return prefixes


def _destroy(prefix: str, root: Path, workdir: str | None) -> None:
    """Remove the run and, unless None, its work directory (`<base_dir>/<prefix>`)."""
    destroy_run(prefix, root)
    if workdir:
        shutil.rmtree(workdir, ignore_errors=True)
