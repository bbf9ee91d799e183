"""`store/index.html`: every run of a store, newest first, verdicts colored.

A run is a folder `store/<test-name>/<YYYYMMDDTHHMMSS>/`; the `latest`
symlinks are not runs. Each row names the test, the run time, the verdict,
the anomaly counts of every checker and links to the report and the folder. With
nights of `kchaos nightly` in `store/nightly/`, a "Nightly trends" section comes first
(`reports.trends`: per cell across nights, with plots).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from reports.html import element, join, link, render, table, trusted
from reports.layout import INDEX_FILE, REPORT_FILE, RESULTS_FILE, TIMELINE_FILE, run_started
from reports.run import verdict_of
from reports.trends import trends_section

__all__ = ["IndexRow", "index_rows", "write_index"]

LABELS = {True: ("valid", "valid"), False: ("invalid", "INVALID"),
          "unknown": ("unknown", "unknown"), None: ("none", "no results")}


@dataclass(frozen=True)
class IndexRow:
    test: str
    run: str
    started: datetime
    verdict: bool | str | None
    anomalies: dict[str, int]
    has_report: bool


def _results(folder: Path) -> dict[str, Any] | None:
    try:
        body = json.loads((folder / RESULTS_FILE).read_text(encoding="utf-8"))
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


def index_rows(store: Path) -> list[IndexRow]:
    """The runs of a store, newest first."""
    rows = []
    for test in sorted(p for p in store.iterdir() if p.is_dir() and not p.is_symlink()):
        for folder in test.iterdir():
            started = run_started(folder.name)
            if folder.is_symlink() or not folder.is_dir() or started is None:
                continue
            results = _results(folder)
            rows.append(IndexRow(test.name, folder.name, started,
                                 verdict_of(results), _counts(results),
                                 (folder / REPORT_FILE).is_file()))
    rows.sort(key=lambda r: (r.started, r.test), reverse=True)
    return rows


def write_index(store: str | Path) -> Path:
    """Write `index.html` at the top of the store and return its path."""
    store = Path(store)
    rows = index_rows(store)
    verdicts = Counter(LABELS.get(r.verdict, LABELS["unknown"])[1] for r in rows)
    summary = (f"{len(rows)} runs: " + ", ".join(f"{n} {label}" for label, n in
                                                verdicts.most_common())) if rows else "no runs"
    body = []
    for row in rows:
        css, label = LABELS.get(row.verdict, LABELS["unknown"])
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
                      table(["test", "time", "verdict", "anomalies", "links"], body) if body else
                      element("p", "No runs in this store yet.", class_="muted")]),
        "written": datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
    })
    path = store / INDEX_FILE
    path.write_text(page, encoding="utf-8")
    return path
