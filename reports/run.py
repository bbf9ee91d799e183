"""A stored run, loaded for reporting (docs/running.md, the store).

The store says where a run's files are (`RunFiles`, made by `harness.store.run_files`);
`load_run` reads them and never raises on a missing or broken file: a harness that crashed
still deserves a report, so each problem is kept in `Run.problems` and shown. Nemesis ops
become `NemesisPeriod`s (`checker.history.nemesis_periods`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from checker.cluster.event_log import ControllerEvent, event_log_paths, read_event_logs
from checker.history import NEMESIS, NemesisPeriod, Op, nemesis_periods, read_history
from checker.history.errors import HistoryError

__all__ = ["NemesisPeriod", "Run", "RunFiles", "load_run", "merged_test", "nemesis_periods",
           "verdict_of"]

LOG_SUFFIXES = (".log", ".out", ".jsonl", ".txt")


@dataclass(frozen=True, kw_only=True)
class RunFiles:
    """Where a stored run's files are: its folder, the test (written once when it started),
    its progress, results, history, harness log and node logs, and when it started."""

    directory: Path
    test: Path
    progress: Path
    results: Path
    history: Path
    log: Path
    nodes: Path
    started: datetime | None

    @property
    def test_name(self) -> str:
        return self.directory.parent.name


def merged_test(test: dict[str, Any], progress: dict[str, Any] | None) -> dict[str, Any]:
    """The test as it ran: test.json's content with progress.json's over it; a run that
    recorded no progress (None) did not complete its final reads."""
    if progress is None:
        return {"final_reads": False, **test}
    return {**test, **progress}


@dataclass
class Run:
    """What a run folder holds. `ops` is empty when the history is missing or malformed."""

    files: RunFiles
    name: str
    test: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] | None = None
    ops: list[Op] = field(default_factory=list)
    events: list[ControllerEvent] = field(default_factory=list)
    node_logs: dict[str, list[Path]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def directory(self) -> Path:
        return self.files.directory

    @property
    def verdict(self) -> bool | str | None:
        return verdict_of(self.results)

    @property
    def start_wall_ms(self) -> float | None:
        value = self.test.get("start_wall_ms")
        return float(value) if isinstance(value, int | float) else None

    def nemesis_ops(self) -> list[Op]:
        return [op for op in self.ops if op.process == NEMESIS]


def verdict_of(results: dict[str, Any] | None) -> bool | str | None:
    """True, False, "unknown", or None when there are no results."""
    if not isinstance(results, dict) or "valid" not in results:
        return None
    valid = results["valid"]
    return valid if valid in (True, False) else "unknown"


def _json_file(path: Path, problems: list[str]) -> Any:
    if not path.is_file():
        problems.append(f"{path.name} is missing")
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        problems.append(f"{path.name} cannot be read: {error}")
        return None


def load_run(files: RunFiles) -> Run:
    """Everything a report needs from a run folder."""
    problems: list[str] = []
    test = _json_file(files.test, problems)
    progress = _json_file(files.progress, problems) if files.progress.is_file() else None
    test = merged_test(test if isinstance(test, dict) else {},
                       progress if isinstance(progress, dict) else None)
    results = _json_file(files.results, problems)
    name = str(test.get("name") or files.test_name)
    run = Run(files, name, test, results if isinstance(results, dict) else None,
              problems=problems)
    if files.history.is_file():
        try:
            run.ops = list(read_history(files.history))
        except (HistoryError, OSError) as error:
            problems.append(f"{files.history.name} cannot be read: {error}")
    else:
        problems.append(f"{files.history.name} is missing")
    try:
        run.events = read_event_logs(event_log_paths(files.directory)).events
    except (HistoryError, OSError) as error:
        problems.append(f"controller event log cannot be read: {error}")
    run.node_logs = _node_logs(files.directory, files.nodes)
    return run


def _node_logs(directory: Path, nodes: Path) -> dict[str, list[Path]]:
    if not nodes.is_dir():
        return {}
    found: dict[str, list[Path]] = {}
    for node in sorted(p for p in nodes.iterdir() if p.is_dir()):
        found[node.name] = sorted(p.relative_to(directory) for p in node.rglob("*")
                                  if p.is_file() and p.suffix in LOG_SUFFIXES)
    return found
