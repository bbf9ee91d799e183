"""Start N broker processes (`python -m broker`) on loopback for tests.

`BrokerCluster` writes one server.properties per broker (distinct client and
control-plane ports), starts them, waits until all are registered in ZooKeeper and a
controller is elected, and can kill -9, SIGTERM and restart single brokers. Every
process is killed by its PID in `stop()` (use it as a context manager).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kazoo.client import KazooClient

from tests.support.ports import free_ports

REPO = Path(__file__).resolve().parent.parent.parent


@dataclass
class BrokerProcess:
    broker_id: int
    port: int
    control_port: int
    directory: Path
    process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_dir(self) -> Path:
        return self.directory / "data"

    @property
    def event_log(self) -> Path:
        return self.log_dir / "controller-events.jsonl"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class BrokerCluster:
    zookeeper_connect: str
    directory: Path
    size: int = 3
    properties: dict[str, str] = field(default_factory=dict)
    brokers: dict[int, BrokerProcess] = field(default_factory=dict)
    chroot: str = ""

    def __post_init__(self) -> None:
        if not self.chroot:
            self.chroot = f"/kchaos-{os.getpid()}-{time.monotonic_ns()}"
        ports = free_ports(2 * self.size)
        for broker_id in range(1, self.size + 1):
            directory = self.directory / f"broker-{broker_id}"
            directory.mkdir(parents=True, exist_ok=True)
            self.brokers[broker_id] = BrokerProcess(broker_id, ports[2 * broker_id - 2],
                                                    ports[2 * broker_id - 1], directory)
        self._zk: KazooClient | None = None

    # -- lifecycle ----------------------------------------------------------------

    def __enter__(self) -> BrokerCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.alive)

    @property
    def zk(self) -> KazooClient:
        if self._zk is None:
            self._zk = KazooClient(hosts=self.zookeeper_connect + self.chroot, timeout=10)
            self._zk.start(timeout=15)
        return self._zk

    def start(self, timeout: float = 30.0) -> None:
        root = KazooClient(hosts=self.zookeeper_connect, timeout=10)
        root.start(timeout=15)
        root.ensure_path(self.chroot)
        root.stop()
        root.close()
        for broker in self.brokers.values():
            self.start_broker(broker.broker_id, wait=False)
        self.wait_until_registered(set(self.brokers), timeout)
        self.wait_for_controller(timeout)
        for broker_id in self.brokers:
            self.wait_for_metadata(broker_id, timeout)

    def write_config(self, broker: BrokerProcess) -> None:
        base = {
            "broker.id": str(broker.broker_id),
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},"
                         f"CONTROLLER://127.0.0.1:{broker.control_port}",
            "zookeeper.connect": self.zookeeper_connect + self.chroot,
            "zookeeper.session.timeout.ms": "4000",
            "log.dirs": str(broker.log_dir),
            "num.partitions": "1",
            "default.replication.factor": str(min(3, self.size)),
            "replica.lag.time.max.ms": "3000",
            "auto.leader.rebalance.enable": "false",
        }
        base.update(self.properties)
        broker.config_path.write_text("".join(f"{k}={v}\n" for k, v in base.items()))

    def start_broker(self, broker_id: int, wait: bool = True, timeout: float = 30.0) -> None:
        broker = self.brokers[broker_id]
        if broker.alive:
            raise RuntimeError(f"broker {broker_id} is already running")
        self.write_config(broker)
        previous = self.registration_owner(broker_id)
        out = open(broker.directory / "stdout.log", "ab")
        broker.process = subprocess.Popen(
            [sys.executable, "-m", "broker", "--config", str(broker.config_path)],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        if wait:
            deadline = time.monotonic() + timeout
            while self.registration_owner(broker_id) in (None, previous):
                if not broker.alive:
                    raise RuntimeError(f"broker {broker_id} exited: {self.tail(broker_id)}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"broker {broker_id} did not register again")
                time.sleep(0.1)
            self.wait_for_metadata(broker_id, max(deadline - time.monotonic(), 1.0))

    def metadata(self, broker_id: int) -> tuple[int, set[int]]:
        """(controller id, live broker ids) as broker `broker_id` answers a Metadata request."""
        request = MetadataRequest[1](topics=[])
        request.with_header(correlation_id=1, client_id="tests")
        with socket.create_connection(("127.0.0.1", self.brokers[broker_id].port), 5) as sock:
            sock.sendall(bytes(request.encode(header=True, framed=True)))
            size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
            frame = _recv_exactly(sock, size)
        response = MetadataResponse.decode(frame[4:], version=1)
        return response.controller_id, {b.node_id for b in response.brokers}

    def wait_for_metadata(self, broker_id: int, timeout: float = 30.0) -> None:
        """Until the broker knows the controller and every live broker (UpdateMetadata)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                controller_id, brokers = self.metadata(broker_id)
                if controller_id >= 0 and brokers >= self.registered():
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"broker {broker_id} has no cluster metadata")
            time.sleep(0.1)

    def registration_owner(self, broker_id: int) -> int | None:
        """The ZooKeeper session owning /brokers/ids/<id>, None if not registered."""
        stat = self.zk.exists(f"/brokers/ids/{broker_id}")
        return None if stat is None else stat.ephemeralOwner

    def kill(self, broker_id: int, sig: int = signal.SIGKILL) -> None:
        broker = self.brokers[broker_id]
        if broker.alive:
            broker.process.send_signal(sig)
            if sig == signal.SIGKILL:
                broker.process.wait(timeout=10)

    def terminate(self, broker_id: int, timeout: float = 60.0) -> int:
        """SIGTERM (controlled shutdown); returns the exit code."""
        broker = self.brokers[broker_id]
        broker.process.send_signal(signal.SIGTERM)
        return broker.process.wait(timeout=timeout)

    def stop(self) -> None:
        for broker in self.brokers.values():
            if broker.process is not None and broker.process.poll() is None:
                broker.process.send_signal(signal.SIGKILL)
        for broker in self.brokers.values():
            if broker.process is not None:
                try:
                    broker.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        if self._zk is not None:
            try:
                self._zk.stop()
                self._zk.close()
            except Exception:
                pass
            self._zk = None

    # -- observation --------------------------------------------------------------

    def registered(self) -> set[int]:
        try:
            return {int(child) for child in self.zk.get_children("/brokers/ids")}
        except Exception:
            return set()

    def wait_until_registered(self, ids: set[int], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not ids <= self.registered():
            for broker_id in ids:
                broker = self.brokers[broker_id]
                if broker.process is not None and broker.process.poll() is not None:
                    raise RuntimeError(f"broker {broker_id} exited with "
                                       f"{broker.process.returncode}: {self.tail(broker_id)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"brokers {ids - self.registered()} did not register")
            time.sleep(0.1)

    def controller(self) -> tuple[int, int] | None:
        """(controller broker id, controller epoch) or None."""
        try:
            data, _ = self.zk.get("/controller")
            epoch, _ = self.zk.get("/controller_epoch")
            return json.loads(data)["brokerid"], int(epoch)
        except Exception:
            return None

    def wait_for_controller(self, timeout: float = 30.0, not_id: int | None = None
                            ) -> tuple[int, int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            current = self.controller()
            if current is not None and current[0] != not_id:
                return current
            time.sleep(0.05)
        raise TimeoutError("no controller elected")

    def partition_state(self, topic: str, partition: int) -> dict | None:
        try:
            data, _ = self.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        except Exception:
            return None
        return json.loads(data)

    def wait_for_state(self, topic: str, partition: int, predicate, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.partition_state(topic, partition)
            if state is not None and predicate(state):
                return state
            time.sleep(0.1)
        raise TimeoutError(f"{topic}-{partition} state {state} never matched")

    def events(self) -> list[dict]:
        """All controller event log lines of all brokers."""
        events = []
        for broker in self.brokers.values():
            if broker.event_log.exists():
                for line in broker.event_log.read_text().splitlines():
                    if line.strip():
                        events.append(json.loads(line))
        return sorted(events, key=lambda e: e.get("time", 0))

    def tail(self, broker_id: int, lines: int = 30) -> str:
        broker = self.brokers[broker_id]
        text = ""
        for name in ("stdout.log", "data/server.log"):
            path = broker.directory / name
            if path.exists():
                text += f"--- {path}\n" + "\n".join(path.read_text().splitlines()[-lines:]) + "\n"
        return text


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data
