"""A real ZooKeeper ensemble from Debian's `zookeeper` package, one java process per node.

Each member gets `<root>/zoo.cfg`, `<root>/data/myid` and logs to `<root>/zookeeper.log`.
Members start in parallel (a JVM costs ~1 s); the ensemble is ready when every member
answers `srvr` with a mode (leader, follower or standalone), which it only does once a
quorum has formed. The four-letter words are read over TCP from the controlling host.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from harness.control import Process, Remote
from harness.db.files import ServiceExited, last_error_line, put_text
from harness.db.processes import ServiceProcesses

__all__ = ["ZooKeeperEnsemble", "ZooKeeperSettings", "four_letter_word", "zoo_cfg"]

CLIENT_PORT = 2181
QUORUM_PORT = 2888
ELECTION_PORT = 3888
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
CLASSPATH = ":".join([
    "/etc/zookeeper/conf",
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/slf4j-api.jar",
    "/usr/share/java/slf4j-log4j12.jar",
    "/usr/share/java/log4j-1.2.jar",
])
_MODE = re.compile(r"^Mode: (\w+)", re.MULTILINE)


@dataclass(frozen=True)
class ZooKeeperSettings:
    tick_ms: int = 500
    init_limit: int = 10
    sync_limit: int = 5
    min_session_timeout_ms: int = 1000
    max_session_timeout_ms: int = 30000
    heap: str = "128m"


def zoo_cfg(myid: int, servers: Mapping[int, str], data_dir: str,
            settings: ZooKeeperSettings) -> str:
    """zoo.cfg for member `myid` of `servers` (myid -> address); one server is standalone."""
    lines = [
        f"tickTime={settings.tick_ms}",
        f"initLimit={settings.init_limit}",
        f"syncLimit={settings.sync_limit}",
        f"dataDir={data_dir}",
        f"clientPort={CLIENT_PORT}",
        f"clientPortAddress={servers[myid]}",
        f"minSessionTimeout={settings.min_session_timeout_ms}",
        f"maxSessionTimeout={settings.max_session_timeout_ms}",
        "admin.enableServer=false",
        "4lw.commands.whitelist=ruok,srvr,stat,mntr",
        "autopurge.purgeInterval=0",
    ]
    if len(servers) > 1:
        lines += [f"server.{i}={address}:{QUORUM_PORT}:{ELECTION_PORT}"
                  for i, address in sorted(servers.items())]
    return "\n".join(lines) + "\n"


def four_letter_word(address: str, word: str = "srvr", timeout: float = 1.0,
                     port: int = CLIENT_PORT) -> str:
    """The answer of a ZooKeeper server to a four-letter word; raises OSError."""
    with socket.create_connection((address, port), timeout=timeout) as sock:
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


@dataclass
class ZooKeeperEnsemble(ServiceProcesses):
    """The ensemble on `nodes`; `root` is the directory on the nodes, one subdirectory each."""

    remote: Remote
    nodes: tuple[str, ...]
    root: str
    settings: ZooKeeperSettings = field(default_factory=ZooKeeperSettings)
    processes: dict[str, Process] = field(default_factory=dict)

    @property
    def connect(self) -> str:
        return ",".join(f"{self.remote.address(n)}:{CLIENT_PORT}" for n in self.nodes)

    def myid(self, node: str) -> int:
        return self.nodes.index(node) + 1

    def directory(self, node: str) -> str:
        return f"{self.root}/{node}/zookeeper"

    def log_files(self, node: str) -> list[str]:
        return [f"{self.directory(node)}/zookeeper.log"]

    def configure(self, node: str) -> None:
        servers = {self.myid(n): self.remote.address(n) for n in self.nodes}
        data = f"{self.directory(node)}/data"
        put_text(self.remote, node, f"{self.directory(node)}/zoo.cfg",
                 zoo_cfg(self.myid(node), servers, data, self.settings))
        put_text(self.remote, node, f"{data}/myid", f"{self.myid(node)}\n")

    def start(self, nodes: Iterable[str] | None = None, timeout: float = 30.0) -> None:
        """Configure and start members (default: all that are not running), then wait until
        each answers with a mode."""
        nodes = [n for n in (nodes or self.nodes) if not self.running(n)]
        for node in nodes:
            self.configure(node)
        for node in nodes:
            directory = self.directory(node)
            self.processes[node] = self.remote.spawn(node, [
                "java", f"-Xmx{self.settings.heap}", "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData", "-cp", CLASSPATH,
                f"-Dzookeeper.log.dir={directory}", "-Dzookeeper.root.logger=INFO,CONSOLE",
                MAIN_CLASS, f"{directory}/zoo.cfg"], f"{directory}/zookeeper.log")
        self.wait_ready(nodes, timeout)

    def wait_ready(self, nodes: Sequence[str] | None = None, timeout: float = 30.0) -> None:
        pending = set(nodes or self.nodes)
        deadline = time.monotonic() + timeout
        while pending:
            for node in sorted(pending):
                if not self.running(node):
                    line = last_error_line(self.remote, node, self.log_files(node)[0])
                    raise ServiceExited(f"ZooKeeper on {node} exited: "
                                        f"{line or 'its log is empty'}")
                if self.mode(node) is not None:
                    pending.discard(node)
            if pending:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"ZooKeeper on {sorted(pending)} not serving after "
                                       f"{timeout:g} s")
                time.sleep(0.05)

    def mode(self, node: str, timeout: float = 1.0) -> str | None:
        """leader, follower or standalone; None when not serving (no quorum, down, paused)."""
        try:
            match = _MODE.search(four_letter_word(self.remote.address(node), "srvr", timeout))
        except OSError:
            return None
        return match.group(1) if match else None

    def leader(self) -> str | None:
        for node in self.nodes:
            if self.mode(node) in ("leader", "standalone"):
                return node
        return None

    def to_json(self) -> dict:
        return {"nodes": list(self.nodes), "root": self.root, "settings": asdict(self.settings),
                "processes": {n: p.to_json() for n, p in self.processes.items()}}

    @classmethod
    def from_json(cls, remote: Remote, data: Mapping) -> ZooKeeperEnsemble:
        return cls(remote, tuple(data["nodes"]), data["root"],
                   ZooKeeperSettings(**data["settings"]),
                   {n: Process.from_json(p) for n, p in data["processes"].items()})
