"""Live progress of a run on the terminal: elapsed and remaining time, ops/s, outcomes, faults.

On a terminal one status line is redrawn every second; otherwise (CI, a pipe) a plain
line is printed every `plain_interval` seconds.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any, TextIO

__all__ = ["ProgressPrinter", "describe"]


def describe(snapshot: Mapping[str, Any], time_limit: float) -> str:
    """One status line from `Progress.snapshot()`: the faults in force, and how often each
    fault without a stop (`restart`, `stall-producer`) took effect so far."""
    elapsed = snapshot["elapsed"]
    remaining = max(0.0, time_limit - elapsed)
    phase = f"{remaining:4.0f}s left" if remaining > 0 else "final phase"
    faults = ", ".join(_fault(f, op) for f, op in snapshot["faults"].items()) or "none"
    instant = snapshot.get("instant_faults") or {}
    if instant:
        faults += " (so far " + ", ".join(f"{name} {count}"
                                          for name, count in sorted(instant.items())) + ")"
    clients = snapshot.get("client_log_lines")
    logged = f"  client log lines {clients} (clients.log)" if clients else ""
    return (f"[{elapsed:5.0f}s, {phase}] {snapshot['ops_per_second']:6.1f} ops/s  "
            f"ok {snapshot['ok']}  fail {snapshot['fail']}  info {snapshot['info']}  "
            f"faults: {faults}{logged}")


# Fields of a coordinator fault's result that name what it coordinates, not a node.
COORDINATED = frozenset({"group", "transactional_id"})


def _fault(f: str, op: Mapping[str, Any]) -> str:
    """A fault in force in a few words: its name as the user asked for it, and the nodes
    it acted on when its result names them one by one (`kill n2`), not a partition map."""
    value = op.get("value")
    nodes = (sorted(set(value) - COORDINATED) if isinstance(value, Mapping) and value
             and all(isinstance(what, str) for what in value.values()) else [])
    return " ".join([op.get("fault") or f, ",".join(map(str, nodes))]).strip()


class ProgressPrinter:
    """A background thread printing `describe(snapshot())` until stopped."""

    def __init__(self, snapshot: Callable[[], Mapping[str, Any]], time_limit: float,
                 out: TextIO = sys.stderr, plain_interval: float = 5.0) -> None:
        self.snapshot = snapshot
        self.time_limit = time_limit
        self.out = out
        self.interactive = out.isatty()
        self.interval = 1.0 if self.interactive else plain_interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)

    def __enter__(self) -> ProgressPrinter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._print(final=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._print()

    def _print(self, final: bool = False) -> None:
        line = describe(self.snapshot(), self.time_limit)
        if self.interactive:
            self.out.write("\r\033[K" + line + ("\n" if final else ""))
        else:
            self.out.write(line + "\n")
        self.out.flush()
