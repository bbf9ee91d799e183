"""The store: where runs are kept, and the layout of a run folder (docs/running.md).

    store/<test-name>/<YYYYMMDDTHHMMSS>/   one run: test.json, progress.json, history.jsonl,
                                           results.json, report.html, timeline.html, plots,
                                           kchaos.log, clients.log (the client libraries'
                                           logs), spark.log (Spark's and its JVM's output),
                                           nodes/<node>/ (that node's logs)
    store/latest, store/<test-name>/latest links to the newest run
    store/index.html                       every run of the store

`test.json` is written once, when the run starts: the configuration, parts, seed and
versions. What the run learns and reaches as it goes (the running db's facts, the
workload's fields, the start time, whether the final reads completed) is `progress.json`,
rewritten at each step. `read_test` is the test as it ran: both, merged.

`create_run` makes a run folder and points the `latest` links at it; `resolve_run` turns
what a user types (a run folder, a test folder, the store, or a `latest` link) into a run
folder. Reports read a run through `run_files` and the store's runs through `stored_runs`.
"""

from __future__ import annotations

import json
import os
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from reports.index import write_index
from reports.run import RunFiles, merged_test

__all__ = ["CLIENT_LOG_FILE", "HISTORY_FILE", "LATEST", "LOG_FILE", "NODES_DIR",
           "PROGRESS_FILE", "RESULTS_FILE", "RUN_FOLDER", "SPARK_LOG_FILE", "TEST_FILE",
           "create_run",
           "index_store", "read_test", "resolve_run", "run_files", "run_started",
           "stored_runs", "write_json", "write_progress"]

TEST_FILE = "test.json"
PROGRESS_FILE = "progress.json"
HISTORY_FILE = "history.jsonl"
RESULTS_FILE = "results.json"
LOG_FILE = "kchaos.log"
CLIENT_LOG_FILE = "clients.log"
SPARK_LOG_FILE = "spark.log"
NODES_DIR = "nodes"
LATEST = "latest"
RUN_FOLDER = re.compile(r"\d{8}T\d{6}(-\d+)?\Z")


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


def resolve_run(path: Path) -> Path:
    """The run folder `path` means; raises FileNotFoundError saying what was expected."""
    path = Path(path)
    for candidate in (path, path / LATEST, path / LATEST / LATEST):
        if (candidate / TEST_FILE).is_file() or (candidate / HISTORY_FILE).is_file():
            return candidate.resolve()
    raise FileNotFoundError(
        f"{path}: not a run folder (no {TEST_FILE} in it, nor under a '{LATEST}' link); "
        f"give store/<test-name>/<time>/, store/<test-name>/ or the store itself")


def run_started(name: str) -> datetime | None:
    """The start time a run folder's name spells (YYYYMMDDTHHMMSS, maybe with -N)."""
    if not RUN_FOLDER.match(name):
        return None
    return datetime.strptime(name[:15], "%Y%m%dT%H%M%S")


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temporary file, then rename)."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(data, indent=1, default=str) + "\n")
    temporary.replace(path)


def write_progress(run_dir: Path, progress: dict[str, Any]) -> None:
    """Record how far the run got (see the module docstring)."""
    write_json(run_dir / PROGRESS_FILE, progress)


def read_test(run_dir: Path) -> dict[str, Any]:
    """The test as it ran: test.json with progress.json over it (`merged_test`)."""
    return merged_test(json.loads((run_dir / TEST_FILE).read_text()),
                       _progress(run_dir / PROGRESS_FILE))


def _progress(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def run_files(run_dir: Path) -> RunFiles:
    """Where a run folder's files are, for reports."""
    run_dir = Path(run_dir).resolve()
    return RunFiles(directory=run_dir, test=run_dir / TEST_FILE,
                    progress=run_dir / PROGRESS_FILE, results=run_dir / RESULTS_FILE,
                    history=run_dir / HISTORY_FILE, log=run_dir / LOG_FILE,
                    nodes=run_dir / NODES_DIR, started=run_started(run_dir.name))


def stored_runs(store: Path) -> list[RunFiles]:
    """Every run folder of a store (the `latest` links are not runs)."""
    return [run_files(folder)
            for test in sorted(p for p in store.iterdir() if p.is_dir() and not p.is_symlink())
            for folder in sorted(test.iterdir())
            if not folder.is_symlink() and folder.is_dir() and run_started(folder.name)]


def index_store(store: Path) -> Path:
    """Write the store's index page (every run) and return its path."""
    store = Path(store)
    return write_index(store, stored_runs(store))
