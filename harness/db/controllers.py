"""Dedicated controllers of a metadata quorum (Kafka in KRaft mode with
`process.roles=controller`): one process per node `c<i>`, node id CONTROLLER_ID_BASE + i,
from `<root>/<node>/controller/`. They serve no clients; they are ready when a running one
names a quorum leader. A cluster whose brokers are their own controllers, or that keeps its
metadata in ZooKeeper, has an empty set.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from harness.control import Process, Remote
from harness.db.brokers import (
    CONTROLLER_ID_BASE,
    BrokerLauncher,
    QuorumState,
    newest_leader,
    spawn,
    write_configuration,
)
from harness.db.files import ServiceExited, last_error_line
from harness.db.processes import ServiceProcesses

__all__ = ["ControllerSet"]


@dataclass
class ControllerSet(ServiceProcesses):
    """The dedicated controllers on `nodes`, run by `launcher` (a broker launcher's
    `for_controllers()`), configured for a cluster of `brokers` brokers."""

    remote: Remote
    nodes: tuple[str, ...]
    root: str
    brokers: int
    launcher: BrokerLauncher | None = None
    overrides: dict[str, str] = field(default_factory=dict)
    processes: dict[str, Process] = field(default_factory=dict)

    def node_id(self, node: str) -> int:
        return CONTROLLER_ID_BASE + self.nodes.index(node) + 1

    def node_of(self, node_id: int) -> str | None:
        """The controller node with `node_id`; None when it is none of these."""
        position = node_id - CONTROLLER_ID_BASE
        return self.nodes[position - 1] if 1 <= position <= len(self.nodes) else None

    def directory(self, node: str) -> str:
        return f"{self.root}/{node}/controller"

    def log_files(self, node: str) -> list[str]:
        return [] if self.launcher is None else self.launcher.log_files(self.directory(node))

    def start(self, nodes: Iterable[str] | None = None) -> list[str]:
        """Write the configuration and start the controllers that are not running."""
        started = [n for n in (self.nodes if nodes is None else nodes) if not self.running(n)]
        if started and self.launcher is None:
            raise ValueError("no controller launcher: this cluster has no dedicated controllers")
        for node in started:
            assert self.launcher is not None
            write_configuration(self.remote, self.launcher, node, self.directory(node),
                                self.node_id(node), "", self.brokers, self.overrides)
            self.processes[node] = spawn(self.remote, self.launcher, node, self.directory(node))
        return started

    def voter_states(self) -> dict[str, QuorumState | None]:
        """Each running controller's view of the quorum (None: unread)."""
        if self.launcher is None:
            return {}
        return {node: self.launcher.quorum_state(self.remote, node, self.directory(node))
                for node in self.nodes if self.running(node)}

    def quorum(self) -> tuple[int, int] | None:
        """(leader node id, epoch) as the running controllers see it (`newest_leader`);
        None when none names a leader."""
        return newest_leader(self.voter_states().values())

    def wait_leader(self, timeout: float = 60.0) -> None:
        """Until a running controller names a quorum leader; ServiceExited when one of
        them exited, TimeoutError after `timeout` seconds; at once without controllers."""
        if not self.nodes:
            return
        deadline = time.monotonic() + timeout
        while self.quorum() is None:
            for node in self.nodes:
                if node in self.processes and not self.running(node):
                    line = last_error_line(self.remote, node, self.log_files(node)[0])
                    raise ServiceExited(f"controller on {node} exited: "
                                        f"{line or 'its log is empty'}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no quorum leader among the controllers after {timeout:g} s")
            time.sleep(0.1)

    def to_json(self) -> dict:
        return {"nodes": list(self.nodes), "root": self.root, "brokers": self.brokers,
                "launcher": None if self.launcher is None else self.launcher.to_json(),
                "overrides": self.overrides,
                "processes": {n: p.to_json() for n, p in self.processes.items()}}

    @classmethod
    def from_json(cls, remote: Remote, data: Mapping, launcher: BrokerLauncher | None
                  ) -> ControllerSet:
        return cls(remote, tuple(data["nodes"]), data["root"], data["brokers"], launcher,
                   dict(data["overrides"]),
                   {n: Process.from_json(p) for n, p in data["processes"].items()})

    @classmethod
    def none(cls, remote: Remote, root: str) -> ControllerSet:
        """The empty set of a cluster without dedicated controllers."""
        return cls(remote, (), root, 0)

