"""What every service set (ZooKeeper ensemble, brokers) does with its processes."""

from __future__ import annotations

import signal

from harness.control import Process, Remote

__all__ = ["ServiceProcesses"]


class ServiceProcesses:
    """One managed process per node, spawned through `remote`; signals by node name."""

    remote: Remote
    processes: dict[str, Process]

    def running(self, node: str) -> bool:
        process = self.processes.get(node)
        return process is not None and self.remote.running(node, process.pid)

    def pid(self, node: str) -> int | None:
        process = self.processes.get(node)
        return process.pid if process else None

    def kill(self, node: str) -> bool:
        return self._signal(node, signal.SIGKILL)

    def pause(self, node: str) -> bool:
        return self._signal(node, signal.SIGSTOP)

    def resume(self, node: str) -> bool:
        return self._signal(node, signal.SIGCONT)

    def _signal(self, node: str, sig: int) -> bool:
        process = self.processes.get(node)
        return process is not None and self.remote.signal(node, process.pid, sig)
