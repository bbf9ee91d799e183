"""Node clocks a nemesis can move: our LD_PRELOAD library (`offset_clock.c`) in every
process a node starts, and the file of each node's offset that it reads.

`shim()` compiles the library into `.cache/offset-clock/<stamp>/` once per source
(`python -m harness.control.clocks` does it for the bootstrap). `ClockedRemote` wraps a
local backend's `Remote`: each process it spawns on a node runs with the library and
`KCHAOS_CLOCK_FILE` naming that node's file; `set_offset(node, ms)` rewrites the file
atomically, and the node's processes read it within 50 ms. Only the wall clock moves
(CLOCK_REALTIME, gettimeofday, time): CLOCK_MONOTONIC, which timeouts and timers use,
does not, as on a machine whose clock is stepped. Debian's libfaketime was the first
choice; its 0.9.10 fails Python's `time.sleep` (EINVAL from clock_nanosleep) when it
leaves the monotonic clock alone, and moves that clock too otherwise.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["ClockShimUnavailable", "ClockedRemote", "SOURCE", "shim"]

SOURCE = Path(__file__).resolve().parent / "offset_clock.c"
CACHE = Path(__file__).resolve().parents[2] / ".cache" / "offset-clock"
LIBRARY = "liboffsetclock.so"


class ClockShimUnavailable(RuntimeError):
    """The clock library cannot be compiled: the message says why and what to do."""


def shim(cache: Path = CACHE, compiler: str = "gcc") -> Path:
    """The compiled library of this source, compiling it when absent."""
    stamp = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    library = cache / stamp / LIBRARY
    if library.exists():
        return library
    if shutil.which(compiler) is None:
        raise ClockShimUnavailable(f"{compiler} is missing, so the clock library cannot be "
                                   "compiled: run `make bootstrap` (it installs gcc)")
    library.parent.mkdir(parents=True, exist_ok=True)
    descriptor, scratch = tempfile.mkstemp(suffix=".so", dir=library.parent)
    os.close(descriptor)
    result = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-Wall", "-o", scratch,
                             str(SOURCE), "-ldl"], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        os.unlink(scratch)
        raise ClockShimUnavailable(f"compiling {SOURCE.name} failed: "
                                   f"{(result.stderr.strip().splitlines() or ['no output'])[0]}")
    os.replace(scratch, library)
    return library


class ClockedRemote:
    """A local backend's remote whose node processes run with moved wall clocks; every
    other call goes to the remote it wraps."""

    def __init__(self, remote: Any, library: Path | None = None) -> None:
        self._remote = remote
        self.library = library or shim()
        self.clock_dir = Path(remote.state_dir) / "clocks"
        self.clock_dir.mkdir(parents=True, exist_ok=True)
        self.offsets: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._remote, name)

    def clock_file(self, node: str) -> Path:
        return self.clock_dir / node

    def spawn(self, node: str, argv: Sequence[str], log: str, *,
              env: Mapping[str, str] | None = None, cwd: str | None = None) -> Any:
        base = dict(os.environ if env is None else env)
        preload = " ".join(p for p in (str(self.library), base.get("LD_PRELOAD", "")) if p)
        clocked = {**base, "LD_PRELOAD": preload,
                   "KCHAOS_CLOCK_FILE": str(self.clock_file(node))}
        return self._remote.spawn(node, argv, log, env=clocked, cwd=cwd)

    def set_offset(self, node: str, milliseconds: int) -> None:
        """Move `node`'s wall clock to the real one plus `milliseconds`."""
        self._remote.address(node)
        scratch = self.clock_file(node).with_suffix(".new")
        scratch.write_text(f"{int(milliseconds)}\n")
        os.replace(scratch, self.clock_file(node))
        self.offsets[node] = int(milliseconds)

    def offset(self, node: str) -> int:
        return self.offsets.get(node, 0)


if __name__ == "__main__":
    try:
        print(shim())
    except ClockShimUnavailable as error:
        sys.exit(f"clock library: {error}")
