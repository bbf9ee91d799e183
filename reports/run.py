"""A stored run, loaded for reporting (DESIGN.md, "Store").

`load_run` reads what a run folder holds and never raises on a missing or
broken file: a harness that crashed still deserves a report, so each problem is
kept in `Run.problems` and shown. Nemesis ops become `NemesisPeriod`s
(`checker.history.nemesis_periods`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checker.cluster.event_log import ControllerEvent, event_log_paths, read_event_logs
from checker.history import NEMESIS, NemesisPeriod, Op, nemesis_periods, read_history
from checker.history.errors import HistoryError
from reports.layout import HISTORY_FILE, RESULTS_FILE, TEST_FILE

__all__ = ["NemesisPeriod", "Run", "load_run", "nemesis_periods", "verdict_of"]

LOG_SUFFIXES = (".log", ".out", ".jsonl", ".txt")


@dataclass
class Run:
    """What a run folder holds. `ops` is empty when the history is missing or malformed."""

    directory: Path
    name: str
    test: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] | None = None
    ops: list[Op] = field(default_factory=list)
    events: list[ControllerEvent] = field(default_factory=list)
    node_logs: dict[str, list[Path]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

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


def load_run(directory: str | Path) -> Run:
    """Everything a report needs from a run folder."""
    directory = Path(directory).resolve()
    problems: list[str] = []
    test = _json_file(directory / TEST_FILE, problems)
    test = test if isinstance(test, dict) else {}
    results = _json_file(directory / RESULTS_FILE, problems)
    name = str(test.get("name") or directory.parent.name)
    run = Run(directory, name, test, results if isinstance(results, dict) else None,
              problems=problems)
    history = directory / HISTORY_FILE
    if history.is_file():
        try:
            run.ops = list(read_history(history))
        except (HistoryError, OSError) as error:
            problems.append(f"{HISTORY_FILE} cannot be read: {error}")
    else:
        problems.append(f"{HISTORY_FILE} is missing")
    try:
        run.events = read_event_logs(event_log_paths(directory)).events
    except (HistoryError, OSError) as error:
        problems.append(f"controller event log cannot be read: {error}")
    run.node_logs = _node_logs(directory)
    return run


def _node_logs(directory: Path) -> dict[str, list[Path]]:
    nodes = directory / "nodes"
    if not nodes.is_dir():
        return {}
    found: dict[str, list[Path]] = {}
    for node in sorted(p for p in nodes.iterdir() if p.is_dir()):
        found[node.name] = sorted(p.relative_to(directory) for p in node.rglob("*")
                                  if p.is_file() and p.suffix in LOG_SUFFIXES)
    return found
