"""`store/index.html`: every run of a store, newest first, states coloured.

The store lists its runs (`harness.store.stored_runs`: the folders
`store/<test-name>/<YYYYMMDDTHHMMSS>/`, not the `latest` links). Each row names the test,
the run time, the run's state (`reports.summary.run_state`, each its own colour), the
anomaly counts of every checker and links to the report
and the folder. With
nights of `kchaos nightly` in `store/nightly/`, a "Nightly trends" section comes first
(`reports.trends`: per cell across nights, with plots).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from reports.html import element, join, link, render, table, trusted
from reports.report import REPORT_FILE
from reports.run import RunFiles, verdict_of
from reports.summary import run_state
from reports.timeline import TIMELINE_FILE
from reports.trends import trends_section

__all__ = ["INDEX_FILE", "IndexRow", "index_rows", "write_index"]

INDEX_FILE = "index.html"

# Each run state's word in the index (`reports.summary.run_state`; None: no results).
LABELS = {"valid": "valid", "allowed": "allowed", "invalid": "INVALID", "unknown": "unknown",
          "inconclusive": "inconclusive", None: "no results"}


@dataclass(frozen=True)
class IndexRow:
    test: str
    run: str
    started: datetime
    verdict: bool | str | None
    anomalies: dict[str, int]
    has_report: bool
    state: str | None = None


def _results(path: Path) -> dict[str, Any] | None:
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def _counts(results: dict[str, Any] | None) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for checker in ((results or {}).get("checkers") or {}).values():
        if not isinstance(checker, dict):
            continue
        for kind, anomaly in (checker.get("anomalies") or {}).items():
            if isinstance(anomaly, dict) and isinstance(anomaly.get("count"), int):
                counts[kind] += anomaly["count"]
    return dict(sorted(counts.items()))


def index_rows(runs: Iterable[RunFiles]) -> list[IndexRow]:
    """The rows of the runs that have a start time, newest first."""
    rows = []
    for files in runs:
        if files.started is None:
            continue
        results = _results(files.results)
        rows.append(IndexRow(files.test_name, files.directory.name, files.started,
                             verdict_of(results), _counts(results),
                             (files.directory / REPORT_FILE).is_file(), run_state(results)))
    rows.sort(key=lambda r: (r.started, r.test), reverse=True)
    return rows


def write_index(store: str | Path, runs: Iterable[RunFiles]) -> Path:
    """Write `index.html` at the top of the store, listing `runs` (the store's, from
    `harness.store.stored_runs`), and return its path."""
    store = Path(store)
    rows = index_rows(runs)
    verdicts = Counter(LABELS.get(r.state, LABELS["unknown"]) for r in rows)
    summary = (f"{len(rows)} runs: " + ", ".join(f"{n} {label}" for label, n in
                                                verdicts.most_common())) if rows else "no runs"
    body = []
    for row in rows:
        css, label = row.state or "none", LABELS.get(row.state, LABELS["unknown"])
        base = f"{row.test}/{row.run}/"
        counts = join((element("div", f"{kind}: {n}") for kind, n in row.anomalies.items()))
        body.append([
            row.test,
            f"{row.started:%Y-%m-%d %H:%M:%S}",
            element("span", label, class_=f"verdict-{css}"),
            counts or "none",
            join([link(base + REPORT_FILE, "report") if row.has_report else "no report",
                  " · ", link(base + TIMELINE_FILE, "timeline") if row.has_report else "",
                  " · " if row.has_report else "", link(base, "files")]),
        ])
    page = render("index.html", {
        "style": trusted("style.css"),
        "summary": summary,
        "rows": join([trends_section(store),
                      table(["test", "time", "state", "anomalies", "links"], body) if body else
                      element("p", "No runs in this store yet.", class_="muted")]),
        "written": datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
    })
    path = store / INDEX_FILE
    path.write_text(page, encoding="utf-8")
    return path
