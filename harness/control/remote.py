"""The one interface to nodes: run a command, spawn a process, signal it, copy files, firewall.

Nemeses and `harness.db` use only `Remote`; a backend (`local.py`: network namespaces on a
bridge; later `ssh.py`, `docker.py`) implements it and translates its own failures into the
`harness.control.errors` tree. Commands are argv lists, never shell strings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol, runtime_checkable

__all__ = ["Process", "Remote", "Result"]


class Result(NamedTuple):
    """What `exec` returns: unpacks as `(exit, out, err)`."""

    exit: int
    out: str
    err: str


@dataclass(frozen=True)
class Process:
    """A background process spawned on a node; `pid` is as seen from the controlling host."""

    node: str
    pid: int
    argv: tuple[str, ...]
    log: str

    def to_json(self) -> dict:
        return {"node": self.node, "pid": self.pid, "argv": list(self.argv), "log": self.log}

    @classmethod
    def from_json(cls, data: Mapping) -> Process:
        return cls(data["node"], int(data["pid"]), tuple(data["argv"]), data["log"])


@runtime_checkable
class Remote(Protocol):
    """Control of a fixed set of named nodes."""

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every node name, in order."""
        ...

    def address(self, node: str) -> str:
        """The IPv4 address other nodes and the controlling host reach `node` at."""
        ...

    def exec(self, node: str, argv: Sequence[str], *, check: bool = True,
             timeout: float = 60.0, input: str | None = None) -> Result:
        """Run `argv` on `node` to completion; `check` raises CommandFailed on a non-zero exit."""
        ...

    def spawn(self, node: str, argv: Sequence[str], log: str, *,
              env: Mapping[str, str] | None = None, cwd: str | None = None) -> Process:
        """Start `argv` in the background in its own process group, output appended to `log`."""
        ...

    def signal(self, node: str, pid: int, sig: int) -> bool:
        """Send `sig` to the process group led by `pid`; False when it no longer runs."""
        ...

    def running(self, node: str, pid: int) -> bool:
        """Whether `pid` runs on `node` (a zombie or another node's process does not)."""
        ...

    def upload(self, node: str, local: Path | str, remote: str) -> None:
        """Copy a local file to `remote` on the node, creating parent directories."""
        ...

    def download(self, node: str, remote: str, local: Path | str) -> None:
        """Copy the node's file `remote` to `local`, creating parent directories."""
        ...

    def firewall(self, node: str, drop_from: Sequence[str] = (),
                 loss_from: Mapping[str, float] | None = None) -> None:
        """Replace `node`'s inbound rules at once: drop everything from the nodes in
        `drop_from`, and drop packets from each node of `loss_from` with that probability.
        Empty arguments heal the node."""
        ...
