"""Small file helpers over a `Remote`: write generated text to a node, fetch logs back."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from harness.control import Remote, TransferError

__all__ = ["fetch", "put_text"]


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
