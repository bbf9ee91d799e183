"""The run folder's layout (DESIGN.md, "Store"): every file name in one place.

    store/<test-name>/<YYYYMMDDTHHMMSS>/   one run: test.json, history.jsonl, results.json,
                                           report.html, timeline.html, plots, kchaos.log,
                                           clients.log (the client libraries' logs),
                                           spark.log (Spark's and its JVM's output),
                                           nodes/<node>/ (that node's logs)
    store/latest, store/<test-name>/latest links to the newest run
    store/index.html                       every run of the store

`resolve_run` turns what a user types (a run folder, a test folder, the store, or a
`latest` link) into a run folder; the store, the reports, the index and the CLI use it.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

__all__ = ["CLIENT_LOG_FILE", "HISTORY_FILE", "INDEX_FILE", "LATEST", "LOG_FILE", "NODES_DIR",
           "REPORT_FILE", "RESULTS_FILE", "RUN_FOLDER", "SPARK_LOG_FILE", "TEST_FILE",
           "TIMELINE_FILE", "resolve_run", "run_started"]

TEST_FILE = "test.json"
HISTORY_FILE = "history.jsonl"
RESULTS_FILE = "results.json"
LOG_FILE = "kchaos.log"
CLIENT_LOG_FILE = "clients.log"
SPARK_LOG_FILE = "spark.log"
NODES_DIR = "nodes"
REPORT_FILE = "report.html"
TIMELINE_FILE = "timeline.html"
INDEX_FILE = "index.html"
LATEST = "latest"
RUN_FOLDER = re.compile(r"\d{8}T\d{6}(-\d+)?\Z")


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
