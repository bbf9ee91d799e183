"""The store: one folder per run, `store/<test-name>/<YYYYMMDDTHHMMSS>/` (DESIGN.md, "Store").

`create_run` makes the folder and points `store/latest` and `store/<test-name>/latest`
at it; `resolve_run` turns what a user types (a run folder, a test folder, the store,
or a `latest` link) into a run folder.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["TEST_FILE", "create_run", "read_test", "resolve_run", "write_json"]

TEST_FILE = "test.json"
HISTORY_FILE = "history.jsonl"
RESULTS_FILE = "results.json"
LOG_FILE = "kchaos.log"
NODES_DIR = "nodes"


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
    _link(test_dir / "latest", run_dir.name)
    _link(store / "latest", os.path.join(name, run_dir.name))
    return run_dir


def _link(link: Path, target: str) -> None:
    temporary = link.with_name(f".{link.name}.{os.getpid()}")
    if temporary.is_symlink():
        temporary.unlink()
    temporary.symlink_to(target)
    temporary.replace(link)


def resolve_run(path: Path) -> Path:
    """The run folder `path` means; raises FileNotFoundError saying what was expected."""
    path = Path(path)
    for candidate in (path, path / "latest", path / "latest" / "latest"):
        if (candidate / TEST_FILE).is_file():
            return candidate.resolve()
    raise FileNotFoundError(
        f"{path}: not a run folder (no {TEST_FILE} in it, nor under a 'latest' link); "
        f"give store/<test-name>/<time>/, store/<test-name>/ or the store itself")


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temporary file, then rename)."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(data, indent=1, default=str) + "\n")
    temporary.replace(path)


def read_test(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / TEST_FILE).read_text())
