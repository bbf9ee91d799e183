"""Errors raised by node control; every backend translates its own failures into these.

    RemoteError                 anything that went wrong controlling a node
    ├── UnknownNode             a node name the remote does not have
    ├── CommandError            a command did not run to a successful end
    │   ├── CommandNotFound     the program does not exist on the node
    │   ├── CommandFailed       it exited non-zero (exit, out, err attached)
    │   └── CommandTimeout      it ran longer than its timeout and was killed
    ├── TransferError           upload or download failed
    ├── SpawnError              a background process could not be started
    └── ProvisionError          nodes could not be created or destroyed
        └── PrivilegeError      not root, and no user namespace to fall back on
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "CommandError",
    "CommandFailed",
    "CommandNotFound",
    "CommandTimeout",
    "PrivilegeError",
    "ProvisionError",
    "RemoteError",
    "SpawnError",
    "TransferError",
    "UnknownNode",
]


class RemoteError(Exception):
    """Base of every node-control error."""


class UnknownNode(RemoteError, KeyError):
    def __init__(self, node: str) -> None:
        super().__init__(f"unknown node {node!r}")
        self.node = node

    def __str__(self) -> str:
        return self.args[0]


class CommandError(RemoteError):
    def __init__(self, node: str, argv: Sequence[str], message: str) -> None:
        super().__init__(f"{node}: {' '.join(argv)}: {message}")
        self.node = node
        self.argv = tuple(argv)


class CommandNotFound(CommandError):
    pass


class CommandFailed(CommandError):
    def __init__(self, node: str, argv: Sequence[str], exit: int, out: str, err: str) -> None:
        detail = (err or out).strip().splitlines()[-3:]
        super().__init__(node, argv, f"exit {exit}" + (f": {' / '.join(detail)}" if detail else ""))
        self.exit = exit
        self.out = out
        self.err = err


class CommandTimeout(CommandError):
    def __init__(self, node: str, argv: Sequence[str], seconds: float) -> None:
        super().__init__(node, argv, f"timed out after {seconds:g} s")
        self.seconds = seconds


class TransferError(RemoteError):
    pass


class SpawnError(RemoteError):
    pass


class ProvisionError(RemoteError):
    pass


class PrivilegeError(ProvisionError):
    pass
