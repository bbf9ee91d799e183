"""What every group consumer process shares: its JSON lines on stdout (one flushed line per
event, wall time `"t"` from time.time()), the group settings, and a SIGTERM stop flag."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from typing import Any

SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 1000
METADATA_MAX_AGE_MS = 1000
POLL_SECONDS = 0.5

_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    """One event as a JSON line on stdout, flushed at once."""
    line = json.dumps({"event": event, **fields, "t": time.time()})
    with _lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def warn(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def stop_on_sigterm() -> threading.Event:
    """An event set by SIGTERM (or SIGINT): the poll loop ends and the consumer closes."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def arguments(argv: list[str]) -> tuple[str, str, str]:
    """(bootstrap, group, topic) from the command line."""
    if len(argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} BOOTSTRAP GROUP TOPIC")
    return argv[0], argv[1], argv[2]


class Offsets:
    """The next offset to commit per partition: what was written out and not yet committed.

    A revoked partition is dropped after its final commit, so a later commit can never
    move another member's offset back.
    """

    def __init__(self) -> None:
        self.processed: dict[int, int] = {}
        self.committed: dict[int, int] = {}

    def record(self, partition: int, offset: int) -> None:
        self.processed[partition] = offset + 1

    def pending(self, partitions: list[int] | None = None) -> dict[int, int]:
        wanted = self.processed if partitions is None else partitions
        return {p: self.processed[p] for p in wanted
                if p in self.processed and self.processed[p] != self.committed.get(p)}

    def done(self, offsets: dict[int, int]) -> None:
        self.committed.update(offsets)
        emit("committed", offsets={str(p): o for p, o in sorted(offsets.items())})

    def forget(self, partitions: list[int]) -> None:
        for partition in partitions:
            self.processed.pop(partition, None)
            self.committed.pop(partition, None)
