"""`FakeRemote`: an in-memory `Remote` that records what it was asked, for tests without root."""

from __future__ import annotations

import itertools
import signal as signals
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.control.errors import UnknownNode
from harness.control.remote import Process, Result

__all__ = ["FakeRemote"]


@dataclass
class FakeRemote:
    """Nodes that run nothing: `exec` answers with `handler` (default: exit 0, no output),
    spawned processes live until SIGKILL or SIGTERM, firewall state is kept per node."""

    node_names: Sequence[str]
    handler: Callable[[str, Sequence[str]], Result] | None = None
    commands: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    signals_sent: list[tuple[str, int, int]] = field(default_factory=list)
    files: dict[tuple[str, str], bytes] = field(default_factory=dict)
    drops: dict[str, frozenset[str]] = field(default_factory=dict)
    losses: dict[str, dict[str, float]] = field(default_factory=dict)
    live: dict[int, Process] = field(default_factory=dict)
    paused: set[int] = field(default_factory=set)
    _pids: itertools.count = field(default_factory=lambda: itertools.count(1000))

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(self.node_names)

    def address(self, node: str) -> str:
        return f"192.0.2.{10 + self._index(node)}"

    def exec(self, node: str, argv: Sequence[str], *, check: bool = True,
             timeout: float = 60.0, input: str | None = None) -> Result:
        self._index(node)
        self.commands.append((node, tuple(argv)))
        return self.handler(node, argv) if self.handler else Result(0, "", "")

    def spawn(self, node: str, argv: Sequence[str], log: str, *,
              env: Mapping[str, str] | None = None, cwd: str | None = None) -> Process:
        self._index(node)
        process = Process(node, next(self._pids), tuple(argv), log)
        self.live[process.pid] = process
        return process

    def signal(self, node: str, pid: int, sig: int) -> bool:
        if not self.running(node, pid):
            return False
        self.signals_sent.append((node, pid, sig))
        if sig in (signals.SIGKILL, signals.SIGTERM):
            del self.live[pid]
            self.paused.discard(pid)
        elif sig == signals.SIGSTOP:
            self.paused.add(pid)
        elif sig == signals.SIGCONT:
            self.paused.discard(pid)
        return True

    def running(self, node: str, pid: int) -> bool:
        return pid in self.live and self.live[pid].node == node

    def upload(self, node: str, local: Path | str, remote: str) -> None:
        self.files[(node, remote)] = Path(local).read_bytes()

    def download(self, node: str, remote: str, local: Path | str) -> None:
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        Path(local).write_bytes(self.files[(node, remote)])

    def firewall(self, node: str, drop_from: Sequence[str] = (),
                 loss_from: Mapping[str, float] | None = None) -> None:
        for other in [node, *drop_from, *(loss_from or {})]:
            self._index(other)
        self.drops[node] = frozenset(drop_from)
        self.losses[node] = {k: v for k, v in (loss_from or {}).items() if v > 0}

    def _index(self, node: str) -> int:
        try:
            return list(self.node_names).index(node)
        except ValueError:
            raise UnknownNode(node) from None
