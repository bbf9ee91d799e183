"""Node control: the `Remote` interface and its backends (`local`: network namespaces)."""

from harness.control.errors import (
    CommandError,
    CommandFailed,
    CommandNotFound,
    CommandTimeout,
    PrivilegeError,
    ProvisionError,
    RemoteError,
    SpawnError,
    TransferError,
    UnknownNode,
)
from harness.control.remote import Process, Remote, Result

__all__ = [
    "CommandError",
    "CommandFailed",
    "CommandNotFound",
    "CommandTimeout",
    "PrivilegeError",
    "Process",
    "ProvisionError",
    "Remote",
    "RemoteError",
    "Result",
    "SpawnError",
    "TransferError",
    "UnknownNode",
]
