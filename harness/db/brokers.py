"""The brokers under test: one broker process per node, configured by server.properties.

What a broker is comes from its `BrokerLauncher`: `KchaosBroker` runs `python -m broker`
(ours); `harness.db.kafka.broker.KafkaBroker` runs Apache Kafka. Node `n<i>` runs
broker.id i from `<root>/<node>/broker/` (server.properties, data/, broker.log).
Readiness is what a client needs: every running broker registered in /brokers/ids, a
controller in /controller, and every broker answering Metadata with that controller and
all registered brokers (it has received UpdateMetadata). Brokers without ZooKeeper (Kafka
in KRaft mode) are ready when every one answers Metadata listing them all and their
metadata quorum has a leader (`BrokerLauncher.quorum_state`).
"""

from __future__ import annotations

import json
import signal
import socket
import struct
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kazoo.client import KazooClient

from harness.control import Process, Remote
from harness.db.files import ServiceExited, last_error_line, put_text
from harness.db.processes import ServiceProcesses
from nemesis.capabilities import PartitionState

__all__ = ["CONTROLLER_ID_BASE", "BrokerLauncher", "BrokerSet", "KchaosBroker", "QuorumState",
           "chaos_defaults", "exchange", "metadata", "newest_leader", "partitions_metadata",
           "server_properties", "spawn", "write_configuration"]

CLIENT_PORT = 9092
LEADER_NOT_AVAILABLE = 5  # a partition's error while it has no leader
CONTROL_PORT = 9093
# Node ids of dedicated controllers: c<i> is CONTROLLER_ID_BASE + i (brokers are 1 to 99).
CONTROLLER_ID_BASE = 100
ZK_CALL_TIMEOUT = 3.0


def chaos_defaults(broker_id: int, zookeeper_connect: str, log_dir: str,
                   cluster_size: int) -> dict[str, str]:
    """The properties every broker of a chaos test gets, whichever db it is."""
    replication = str(min(3, cluster_size))
    return {
        "broker.id": str(broker_id),
        "zookeeper.connect": zookeeper_connect,
        "zookeeper.session.timeout.ms": "6000",
        "log.dirs": log_dir,
        "num.partitions": "1",
        "default.replication.factor": replication,
        "offsets.topic.replication.factor": replication,
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": str(min(2, int(replication))),
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        "replica.lag.time.max.ms": "10000",
        "unclean.leader.election.enable": "false",
        "auto.leader.rebalance.enable": "false",
    }


def properties_text(properties: Mapping[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in properties.items())


def server_properties(broker_id: int, address: str, zookeeper_connect: str, log_dir: str,
                      cluster_size: int, overrides: Mapping[str, str] | None = None) -> str:
    """Our broker's server.properties: the chaos defaults, its two listeners, `overrides`."""
    properties = chaos_defaults(broker_id, zookeeper_connect, log_dir, cluster_size)
    properties["listeners"] = (f"PLAINTEXT://{address}:{CLIENT_PORT},"
                               f"CONTROLLER://{address}:{CONTROL_PORT}")
    properties.update(overrides or {})
    return properties_text(properties)


@dataclass(frozen=True)
class QuorumState:
    """A metadata quorum voter's view: the leader's node id (-1: none known) and epoch."""

    leader_id: int
    leader_epoch: int


def newest_leader(states: Iterable[QuorumState | None]) -> tuple[int, int] | None:
    """(leader node id, epoch) of the newest epoch any of the voters' `states` names a
    leader in; None when none does."""
    known = [state for state in states if state is not None and state.leader_id >= 0]
    if not known:
        return None
    newest = max(known, key=lambda state: state.leader_epoch)
    return newest.leader_id, newest.leader_epoch


class BrokerLauncher(Protocol):
    """What one kind of broker needs to run on a node. Brokers that keep their metadata in
    a quorum of their own (Kafka's KRaft) use no ZooKeeper and answer `quorum_state`."""

    kind: str

    @property
    def waits_for_old_registration(self) -> bool:
        """Whether a restart must wait for the old ZooKeeper session to expire."""

    @property
    def uses_zookeeper(self) -> bool: ...

    def quorum_state(self, remote: Remote, node: str, directory: str) -> QuorumState | None:
        """The metadata quorum as the node's voter sees it; None without a quorum."""

    def prepare(self, remote: Remote, nodes: Sequence[str], workdir: str,
                controllers: Sequence[str] = ()) -> BrokerLauncher:
        """This launcher made ready for `remote`'s broker `nodes` and dedicated
        `controllers` (software present, paths known, the quorum's voters named)."""

    def for_controllers(self) -> BrokerLauncher:
        """The launcher of the dedicated controllers; ValueError when there are none."""

    def configuration(self, broker_id: int, address: str, zookeeper_connect: str,
                      directory: str, cluster_size: int,
                      overrides: Mapping[str, str]) -> dict[str, str]:
        """File name (in the broker's directory) -> text, server.properties among them."""

    def command(self, directory: str) -> list[str]: ...

    def log_files(self, directory: str) -> list[str]: ...

    def derive_logs(self, node_dir: Path) -> list[Path]:
        """Files made from a node's copied logs (e.g. its controller event log)."""

    def to_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class KchaosBroker:
    """Our broker: `python -m broker --config server.properties` with the node's Python."""

    python: str = sys.executable
    kind: str = "kchaos"
    waits_for_old_registration: bool = False  # our broker waits itself
    uses_zookeeper: bool = True

    def quorum_state(self, remote: Remote, node: str, directory: str) -> QuorumState | None:
        return None

    def prepare(self, remote: Remote, nodes: Sequence[str], workdir: str,
                controllers: Sequence[str] = ()) -> KchaosBroker:
        return replace(self, python=getattr(remote, "python", sys.executable))

    def for_controllers(self) -> KchaosBroker:
        raise ValueError("our broker has no dedicated controllers: its controller is the "
                         "broker elected in ZooKeeper")

    def configuration(self, broker_id: int, address: str, zookeeper_connect: str,
                      directory: str, cluster_size: int,
                      overrides: Mapping[str, str]) -> dict[str, str]:
        return {"server.properties": server_properties(
            broker_id, address, zookeeper_connect, f"{directory}/data", cluster_size,
            overrides)}

    def command(self, directory: str) -> list[str]:
        return [self.python, "-m", "broker", "--config", f"{directory}/server.properties"]

    def log_files(self, directory: str) -> list[str]:
        return [f"{directory}/broker.log", f"{directory}/data/server.log",
                f"{directory}/data/controller-events.jsonl", f"{directory}/server.properties"]

    def derive_logs(self, node_dir: Path) -> list[Path]:
        return []

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "python": self.python}


def write_configuration(remote: Remote, launcher: BrokerLauncher, node: str, directory: str,
                        node_id: int, zookeeper_connect: str, cluster_size: int,
                        overrides: Mapping[str, str]) -> None:
    """Write the files `launcher` configures node id `node_id` with into `directory`."""
    files = launcher.configuration(node_id, remote.address(node), zookeeper_connect,
                                   directory, cluster_size, overrides)
    for name, text in files.items():
        put_text(remote, node, f"{directory}/{name}", text)


def spawn(remote: Remote, launcher: BrokerLauncher, node: str, directory: str) -> Process:
    """Start `launcher`'s process from `directory`, its output in `broker.log` there."""
    return remote.spawn(node, launcher.command(directory), f"{directory}/broker.log",
                        cwd=directory)


def metadata(address: str, port: int = CLIENT_PORT, timeout: float = 2.0
             ) -> tuple[int, set[int]]:
    """(controller id, broker ids) as the broker at `address` answers Metadata v1."""
    request = MetadataRequest[1](topics=[])
    request.with_header(correlation_id=1, client_id="kchaos-health")
    response = MetadataResponse.decode(exchange(address, port, request, timeout), version=1)
    return response.controller_id, {broker.node_id for broker in response.brokers}


def partitions_metadata(address: str, topics: Sequence[str] | None = None,
                        port: int = CLIENT_PORT, timeout: float = 2.0
                        ) -> tuple[set[int], list[PartitionState]]:
    """(broker ids, partition states) as the broker at `address` answers Metadata v7 for
    `topics` (None: every topic): leader, leader epoch, ISR and replicas of each partition
    its metadata knows without error."""
    request = MetadataRequest[7](topics=None if topics is None else list(topics),
                                 allow_auto_topic_creation=False)
    request.with_header(correlation_id=1, client_id="kchaos-metadata")
    response = MetadataResponse.decode(exchange(address, port, request, timeout), version=7)
    states = [PartitionState(topic.name, p.partition_index, p.leader_id, p.leader_epoch,
                             tuple(p.isr_nodes), tuple(p.replica_nodes))
              for topic in response.topics if topic.error_code == 0
              for p in topic.partitions if p.error_code in (0, LEADER_NOT_AVAILABLE)]
    return {broker.node_id for broker in response.brokers}, sorted(
        states, key=lambda state: (state.topic, state.partition))


def exchange(address: str, port: int, request: Any, timeout: float) -> bytes:
    """Send one kafka-python request (its header set, a non-flexible version) and return
    the response body (after the correlation id); OSError when the broker does not answer."""
    with socket.create_connection((address, port), timeout) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        size = struct.unpack(">i", _receive(sock, 4))[0]
        frame = _receive(sock, size)
    return frame[4:]


@dataclass
class BrokerSet(ServiceProcesses):
    """The brokers on `nodes` (broker.id = position + 1) and a view to watch them: ZooKeeper,
    or without it their Metadata answers and the metadata quorum."""

    remote: Remote
    nodes: tuple[str, ...]
    root: str
    zookeeper_connect: str
    overrides: dict[str, str] = field(default_factory=dict)
    launcher: BrokerLauncher = field(default_factory=KchaosBroker)
    processes: dict[str, Process] = field(default_factory=dict)
    _zk: KazooClient | None = field(default=None, repr=False)

    # -- naming -------------------------------------------------------------------------

    def broker_id(self, node: str) -> int:
        return self.nodes.index(node) + 1

    def broker_node(self, broker_id: int) -> str:
        return self.nodes[broker_id - 1]

    def node_id(self, node: str) -> int:
        """The node id of `node`'s broker (its broker id): as a voter of a combined quorum."""
        return self.broker_id(node)

    def node_of(self, node_id: int) -> str | None:
        """The node whose broker has `node_id`; None when it is none of these."""
        return self.nodes[node_id - 1] if 1 <= node_id <= len(self.nodes) else None

    def directory(self, node: str) -> str:
        return f"{self.root}/{node}/broker"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.remote.address(n)}:{CLIENT_PORT}" for n in self.nodes)

    @property
    def session_timeout(self) -> float:
        """How long a dead broker keeps its registration (seconds): its ZooKeeper session,
        or without ZooKeeper its session with the controller (broker.session.timeout.ms)."""
        if not self.launcher.uses_zookeeper:
            return int(self.overrides.get("broker.session.timeout.ms", 9000)) / 1000.0
        return int(self.overrides.get("zookeeper.session.timeout.ms", 6000)) / 1000.0

    @property
    def replica_lag_time(self) -> float:
        """replica.lag.time.max.ms in seconds (the chaos default, 10 s, unless overridden)."""
        return int(self.overrides.get("replica.lag.time.max.ms", 10000)) / 1000.0

    def log_files(self, node: str) -> list[str]:
        """The node's broker logs, its stdout and stderr (`broker.log`) first."""
        return self.launcher.log_files(self.directory(node))

    # -- processes ----------------------------------------------------------------------

    def start(self, nodes: Iterable[str] | None = None) -> list[str]:
        """Write the configuration and start the brokers that are not running; returns them.
        A broker restarted after kill -9 must wait for its old registration to expire: ours
        does so itself; for others (Kafka exits) this waits, at most a session timeout."""
        started = [n for n in (nodes or self.nodes) if not self.running(n)]
        for node in started:
            write_configuration(self.remote, self.launcher, node, self.directory(node),
                                self.broker_id(node), self.zookeeper_connect, len(self.nodes),
                                self.overrides)
        if self.launcher.waits_for_old_registration and set(started) & set(self.processes):
            self._wait_registrations_gone([self.broker_id(n) for n in started])
        for node in started:
            self.processes[node] = spawn(self.remote, self.launcher, node, self.directory(node))
        return started

    def _wait_registrations_gone(self, broker_ids: list[int]) -> None:
        """Until ZooKeeper has dropped the registrations of `broker_ids` (the sessions of
        killed processes expire), at most a session timeout and a margin; at once when
        ZooKeeper does not answer (`registered` is then empty: the broker will say)."""
        deadline = time.monotonic() + self.session_timeout + 5.0
        while set(broker_ids) & self.registered() and time.monotonic() < deadline:
            time.sleep(0.1)

    def stop(self, node: str, timeout: float = 60.0) -> bool:
        """Graceful stop (SIGTERM: controlled shutdown); SIGKILL after `timeout`."""
        if not self._signal(node, signal.SIGCONT) or not self._signal(node, signal.SIGTERM):
            return False
        deadline = time.monotonic() + timeout
        while self.running(node):
            if time.monotonic() > deadline:
                self.kill(node)
                break
            time.sleep(0.05)
        return True

    # -- ZooKeeper view -----------------------------------------------------------------

    @property
    def zk(self) -> KazooClient:
        if self._zk is None:
            client = KazooClient(hosts=self.zookeeper_connect, timeout=10.0,
                                 connection_retry={"max_tries": -1, "max_delay": 0.5})
            client.start(timeout=15)
            self._zk = client
        return self._zk

    def close(self) -> None:
        if self._zk is not None:
            client, self._zk = self._zk, None
            try:
                client.stop()
                client.close()
            except Exception:  # kazoo may raise anything while its servers are gone
                pass

    def registered(self) -> set[int]:
        """Broker ids registered in /brokers/ids (empty when ZooKeeper does not answer)."""
        try:
            children = self.zk.get_children_async("/brokers/ids").get(timeout=ZK_CALL_TIMEOUT)
        except Exception:  # no such znode, or ZooKeeper unreachable
            return set()
        return {int(child) for child in children}

    def registration_owner(self, broker_id: int) -> int | None:
        """The ZooKeeper session holding /brokers/ids/<id>, None if there is none."""
        stat = self.zk.exists_async(f"/brokers/ids/{broker_id}").get(timeout=ZK_CALL_TIMEOUT)
        return None if stat is None else stat.ephemeralOwner

    def controller(self) -> tuple[int, int] | None:
        """(controller broker id, controller epoch), None when there is no controller."""
        try:
            data, _ = self.zk.get_async("/controller").get(timeout=ZK_CALL_TIMEOUT)
            epoch, _ = self.zk.get_async("/controller_epoch").get(timeout=ZK_CALL_TIMEOUT)
            return int(json.loads(data)["brokerid"]), int(epoch)
        except Exception:
            return None

    def voter_states(self) -> dict[str, QuorumState | None]:
        """Each running node's view of the metadata quorum (None: no quorum, or unread)."""
        return {node: self.launcher.quorum_state(self.remote, node, self.directory(node))
                for node in self.nodes if self.running(node)}

    def quorum(self) -> tuple[int, int] | None:
        """(leader node id, leader epoch) of the metadata quorum as its running voters see
        it (`newest_leader`); None without a quorum or a leader."""
        return newest_leader(self.voter_states().values())

    def healthy(self, nodes: Sequence[str] | None = None) -> str | None:
        """None when healthy, else what is missing."""
        nodes = list(nodes or self.nodes)
        dead = [n for n in nodes if not self.running(n)]
        if dead:
            return f"not running: {dead}"
        if not self.launcher.uses_zookeeper:
            return self._quorum_healthy(nodes)
        wanted = {self.broker_id(n) for n in nodes}
        registered = self.registered()
        if not wanted <= registered:
            return f"not registered: {sorted(wanted - registered)}"
        if self.controller() is None:
            return "no controller"
        for node in nodes:
            try:
                controller_id, brokers = metadata(self.remote.address(node))
            except (OSError, ValueError, struct.error) as error:
                return f"{node} does not answer Metadata: {error}"
            if controller_id < 0 or not registered <= brokers:
                return f"{node} has no current metadata"
        return None

    def _quorum_healthy(self, nodes: Sequence[str]) -> str | None:
        """Without ZooKeeper: every broker answers Metadata listing all of `nodes`' brokers
        (a KRaft broker lists the registered, unfenced ones) and a quorum leader is
        elected."""
        wanted = {self.broker_id(n) for n in nodes}
        for node in nodes:
            try:
                controller_id, brokers = metadata(self.remote.address(node))
            except (OSError, ValueError, struct.error) as error:
                return f"{node} does not answer Metadata: {error}"
            if controller_id < 0 or not wanted <= brokers:
                return f"{node} lists brokers {sorted(brokers)}, not yet all of {sorted(wanted)}"
        if self.quorum() is None:
            return "no metadata quorum leader"
        return None

    def wait_healthy(self, nodes: Sequence[str] | None = None, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while (problem := self.healthy(nodes)) is not None:
            for node in nodes or self.nodes:
                if node in self.processes and not self.running(node):
                    line = last_error_line(self.remote, node, self.log_files(node)[0])
                    raise ServiceExited(f"broker on {node} exited: {line or 'its log is empty'}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"brokers not healthy after {timeout:g} s: {problem}")
            time.sleep(0.05)

    # -- state --------------------------------------------------------------------------

    def to_json(self) -> dict:
        return {"nodes": list(self.nodes), "root": self.root,
                "zookeeper_connect": self.zookeeper_connect, "overrides": self.overrides,
                "launcher": self.launcher.to_json(),
                "processes": {n: p.to_json() for n, p in self.processes.items()}}

    @classmethod
    def from_json(cls, remote: Remote, data: Mapping, launcher: BrokerLauncher) -> BrokerSet:
        return cls(remote, tuple(data["nodes"]), data["root"], data["zookeeper_connect"],
                   dict(data["overrides"]), launcher,
                   {n: Process.from_json(p) for n, p in data["processes"].items()})


def _receive(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data
