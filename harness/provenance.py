"""Where a figure comes from: this machine (cores, CPU model, memory, kernel) and the
kchaos source it ran (the git commit, and whether the tree had uncommitted changes).

Both are plain dicts, stored with what they describe (a night's `night.json`, a row of
docs/results/targets.md); reports.figures shows them beside the figures.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["machine", "source"]

ROOT = Path(__file__).resolve().parent.parent


def _cpu_model(cpuinfo: str) -> str | None:
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "cpu model") and value.strip():
            return value.strip()
    return None


def _memory_bytes(meminfo: str) -> int | None:
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def machine() -> dict[str, Any]:
    """The cores, CPU model, total memory (bytes) and kernel release of this machine."""
    return {"cpus": os.cpu_count(), "cpu_model": _cpu_model(_read("/proc/cpuinfo")),
            "memory_bytes": _memory_bytes(_read("/proc/meminfo")),
            "kernel": platform.release()}


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                              timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def source() -> dict[str, Any]:
    """The commit of the kchaos tree this process runs from (None outside a git checkout)
    and whether tracked files differ from it."""
    commit = _git("rev-parse", "HEAD")
    changes = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": bool(changes)}

