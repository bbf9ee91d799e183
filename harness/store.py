"""The store: one folder per run, `store/<test-name>/<YYYYMMDDTHHMMSS>/` (docs/running.md).

`create_run` makes the folder and points `store/latest` and `store/<test-name>/latest`
at it. File names and `resolve_run` are `reports.layout`'s.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from reports.layout import LATEST, TEST_FILE, resolve_run

__all__ = ["create_run", "read_test", "resolve_run", "write_json"]


def create_run(store: Path, name: str, now: float | None = None) -> Path:
    """A new, empty run folder under `store/name/`, with the `latest` links moved to it."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(now))
    test_dir = store / name
    test_dir.mkdir(parents=True, exist_ok=True)
    run_dir = test_dir / stamp
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = test_dir / f"{stamp}-{suffix}"
    run_dir.mkdir()
    _link(test_dir / LATEST, run_dir.name)
    _link(store / LATEST, os.path.join(name, run_dir.name))
    return run_dir


def _link(link: Path, target: str) -> None:
    temporary = link.with_name(f".{link.name}.{os.getpid()}")
    if temporary.is_symlink():
        temporary.unlink()
    temporary.symlink_to(target)
    temporary.replace(link)


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temporary file, then rename)."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(data, indent=1, default=str) + "\n")
    temporary.replace(path)


def read_test(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / TEST_FILE).read_text())
