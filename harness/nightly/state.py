"""A night's folder and its state file, `night.json`, written atomically after every run so
`kchaos nightly --resume` continues where an interrupted night stopped.

    store/nightly/<YYYY-MM-DD>[-N]/
      night.json        the plan (name, source, text), the machine and the kchaos commit
                        (harness.provenance), its cells, every run with its status,
                        the run phase's seconds so far, and after the check each run's facts
                        and each cell's outcome (harness.nightly.verdicts)
      plan.toml         the plan as it was read
      logs/<cell>.seed<S>.toml, .log   each child run's options and its output
      <cell>/<YYYYMMDDTHHMMSS>/        the run folders (the cell's name is the test name)
      junit.xml, summary.html, index.html (the night's runs), check.log

A run's status: `pending`, `running` (a child is, or was when the night stopped),
`stored` (history and node logs stored), `error` (the child failed: a harness error),
`skipped` (not started within the budget). Resuming turns `running` and `skipped`
back into `pending` (a partial run is run again, in a new run folder; the partial one
is kept and named under `replaced`) and leaves `stored` and `error` runs alone.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import provenance
from harness.nightly.plan import Plan
from harness.store import write_json

__all__ = ["NIGHTLY", "STATE_FILE", "Night", "RunRecord", "find_night", "new_night"]

NIGHTLY = "nightly"
STATE_FILE = "night.json"
PLAN_FILE = "plan.toml"
PENDING, RUNNING, STORED, ERROR, SKIPPED = "pending", "running", "stored", "error", "skipped"
FINISHED = (STORED, ERROR)


@dataclass
class RunRecord:
    cell: str
    seed: int
    status: str = PENDING
    run_dir: str | None = None  # relative to the night folder
    exit: int | None = None
    seconds: float | None = None
    started: str | None = None
    error: str | None = None
    replaced: list[str] | None = None
    facts: dict[str, Any] | None = None
    met: bool | None = None

    @property
    def key(self) -> str:
        return f"{self.cell}.seed{self.seed}"

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


class Night:
    """The folder of a night and its state; `save()` after every change that matters."""

    def __init__(self, folder: Path, state: dict[str, Any]) -> None:
        self.folder = folder
        self.state = state
        self.runs = [RunRecord.from_json(r) for r in state.get("runs", [])]

    @property
    def logs(self) -> Path:
        return self.folder / "logs"

    def save(self) -> None:
        self.state["runs"] = [r.to_json() for r in self.runs]
        write_json(self.folder / STATE_FILE, self.state)

    def resume(self) -> int:
        """Make the unfinished runs pending again; how many will run."""
        again = 0
        for record in self.runs:
            if record.status == RUNNING and record.run_dir:
                record.replaced = [*(record.replaced or []), record.run_dir]
            if record.status in (RUNNING, SKIPPED, PENDING):
                record.status, record.run_dir, record.exit = PENDING, None, None
                record.seconds = record.started = record.error = None
                again += 1
        self.state["checked"] = False if again else self.state.get("checked", False)
        self.state["resumed"] = self.state.get("resumed", 0) + 1
        return again


def _stamp(now: datetime.datetime) -> str:
    return now.strftime("%Y-%m-%d")


def new_night(store: Path, plan: Plan, plan_text: str,
              now: datetime.datetime | None = None) -> Night:
    """A new night folder `store/nightly/<date>` (with `-2`, `-3`, ... when that exists)."""
    now = now or datetime.datetime.now()
    base = store / NIGHTLY
    base.mkdir(parents=True, exist_ok=True)
    folder = base / _stamp(now)
    suffix = 1
    while True:
        try:
            folder.mkdir()
            break
        except FileExistsError:
            suffix += 1
            folder = base / f"{_stamp(now)}-{suffix}"
    (folder / "logs").mkdir()
    (folder / PLAN_FILE).write_text(plan_text, encoding="utf-8")
    state = {"plan": {"name": plan.name, "source": plan.source, "text": plan_text},
             "night": folder.name, "started": now.isoformat(timespec="seconds"),
             "budget_minutes": plan.budget_minutes, "elapsed_seconds": 0.0,
             "cells": [cell.to_json() for cell in plan.cells], "checked": False,
             "runs": [RunRecord(cell.name, seed).to_json() for cell, seed in plan.runs()]}
    state.update(machine=provenance.machine(), source=provenance.source())
    night = Night(folder, state)
    night.save()
    return night


def load_night(folder: Path) -> Night:
    try:
        state = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise FileNotFoundError(f"{folder}: not a night folder ({STATE_FILE}: {error})") \
            from error
    return Night(folder, state)


def find_night(store: Path, plan_name: str) -> Path | None:
    """The latest night of the plan named `plan_name` in the store."""
    found = []
    for state in (store / NIGHTLY).glob(f"*/{STATE_FILE}"):
        try:
            body = json.loads(state.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if (body.get("plan") or {}).get("name") == plan_name:
            found.append((str(body.get("started", "")), state.stat().st_mtime, state.parent))
    return max(found)[2] if found else None
