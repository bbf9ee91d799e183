"""Small file helpers over a `Remote`: write generated text to a node, fetch logs back."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from harness.control import Remote, TransferError

__all__ = ["ServiceExited", "fetch", "last_error_line", "put_text"]


class ServiceExited(RuntimeError):
    """A node's service process exited while it was being started; the message carries the
    last error line of its log."""


def put_text(remote: Remote, node: str, path: str, text: str) -> None:
    """Write `text` to `path` on `node` (parent directories are created)."""
    descriptor, local = tempfile.mkstemp(prefix="kchaos-")
    try:
        with os.fdopen(descriptor, "w") as out:
            out.write(text)
        remote.upload(node, local, path)
    finally:
        os.unlink(local)


def fetch(remote: Remote, node: str, path: str, dest: Path) -> bool:
    """Download `path` from `node` to `dest`; False when the node has no such file."""
    try:
        remote.download(node, path, dest)
    except TransferError:
        return False
    return True


ERROR_LINE = re.compile(r"ERROR|FATAL|Error|Exception|error:")


def last_error_line(remote: Remote, node: str, path: str) -> str | None:
    """The last line of `path` on `node` that reads like an error (else its last line);
    None when the file cannot be fetched or is empty."""
    with tempfile.TemporaryDirectory(prefix="kchaos-log-") as scratch:
        local = Path(scratch) / "log"
        if not fetch(remote, node, path, local):
            return None
        lines = [line.strip() for line in local.read_text(errors="replace").splitlines()
                 if line.strip()]
    for line in reversed(lines):
        if ERROR_LINE.search(line):
            return line
    return lines[-1] if lines else None
