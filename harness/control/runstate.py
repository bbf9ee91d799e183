"""Run records shared by every backend: `<state root>/<prefix>/<state file>`.

A backend writes its run's record before it creates anything, naming the owning
process (pid, start time, host); `cluster down` in another process, even after the
owner was SIGKILLed, finds the runs whose owner is gone (or that were detached
with `release`) and removes them.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from re import Pattern
from typing import Any

from harness.control.errors import ProvisionError

__all__ = ["default_state_root", "owner_alive", "owner_record", "read_record", "recorded_runs",
           "release", "start_time", "write_json"]


def default_state_root() -> Path:
    """Where runs record themselves: $KCHAOS_STATE_DIR, /run/kchaos for root, else per user."""
    if "KCHAOS_STATE_DIR" in os.environ:
        return Path(os.environ["KCHAOS_STATE_DIR"])
    if os.geteuid() == 0:
        return Path("/run/kchaos")
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/kchaos-{os.getuid()}"
    return Path(runtime) / "kchaos"


def start_time(pid: int) -> int | None:
    """The start time (clock ticks since boot) of a live process; None if dead or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in "ZX" else int(fields[19])


def owner_record(pid: int | None = None) -> dict[str, Any]:
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "start": start_time(pid), "host": socket.gethostname()}


def owner_alive(owner: Mapping[str, Any] | None) -> bool:
    """Whether the recorded owner still runs (the same process, not a reused pid)."""
    if not owner or owner.get("host", socket.gethostname()) != socket.gethostname():
        return False
    start = start_time(int(owner["pid"]))
    return start is not None and start == owner.get("start")


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write atomically: a temporary file, then a rename."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(temporary, path)


def read_record(state_dir: Path, state_file: str) -> dict[str, Any]:
    try:
        return json.loads((state_dir / state_file).read_text())
    except (OSError, ValueError) as error:
        raise ProvisionError(f"{state_dir}: no readable {state_file}: {error}") from error


def release(state_dir: Path, state_file: str) -> None:
    """Let the run outlive its owner: `cluster down` may then remove it whenever asked."""
    write_json(state_dir / state_file, {**read_record(state_dir, state_file), "owner": None})


def recorded_runs(state_root: Path, state_file: str, prefix: Pattern[str],
                  include_owned: bool = False) -> list[str]:
    """Run prefixes with a record under `state_root`; without `include_owned`, only those
    whose owner is gone (a SIGKILLed harness) or that were released."""
    prefixes = []
    for path in sorted(state_root.glob(f"*/{state_file}")):
        if not prefix.match(path.parent.name):
            continue
        try:
            owner = json.loads(path.read_text()).get("owner")
        except (OSError, ValueError):
            owner = None
        if include_owned or not owner_alive(owner):
            prefixes.append(path.parent.name)
    return prefixes
