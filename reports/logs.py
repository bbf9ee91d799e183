"""Node logs as HTML pages with a numbered line anchor each, so a report can point
at the line of a log closest to the moment of an anomaly.

Timestamps are found at the start of lines in the broker's format
(`[2024-05-01 12:00:00,123]`), ZooKeeper's (`2024-05-01 12:00:00,123 [myid:1]`)
or as a JSON `"time"` in epoch milliseconds (controller event logs); the
broker and ZooKeeper write local time, read here on the same machine.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from reports.html import element, join, render, trusted

__all__ = ["LogView", "write_log_views"]

MAX_LINES = 200_000
_STAMP = re.compile(rb"^\[?(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})[,.](\d{3})")
_JSON_TIME = re.compile(rb'"time":\s*(\d{10,})')


@dataclass
class LogView:
    """One node log: its file, its HTML view, and (epoch ms, line) of its timestamped lines."""

    node: str
    log: str
    view: str
    stamps: list[tuple[float, int]]

    def line_at(self, wall_ms: float) -> int | None:
        """The first line stamped at or after `wall_ms` (the last line if none is)."""
        if not self.stamps:
            return None
        at = bisect.bisect_left(self.stamps, (wall_ms, 0))
        return self.stamps[min(at, len(self.stamps) - 1)][1]

    def href(self, wall_ms: float | None) -> str:
        line = None if wall_ms is None else self.line_at(wall_ms)
        return self.view if line is None else f"{self.view}#L{line}"


def _stamp(raw: bytes) -> float | None:
    match = _STAMP.match(raw)
    if match:
        try:
            when = datetime.strptime(b" ".join(match.groups()[:2]).decode(), "%Y-%m-%d %H:%M:%S")
        except ValueError:
            return None
        return when.timestamp() * 1000 + int(match.group(3))
    match = _JSON_TIME.search(raw, 0, 200)
    return float(match.group(1)) if match else None


def _view(run_dir: Path, node: str, log: Path) -> LogView:
    view = log.with_name(log.name + ".html")
    rows, stamps = [], []
    with open(run_dir / log, "rb") as lines:
        for number, raw in enumerate(lines, 1):
            if number > MAX_LINES:
                rows.append(element("p", f"... cut after {MAX_LINES} lines; see the raw log.",
                                    class_="notice"))
                break
            when = _stamp(raw)
            if when is not None:
                stamps.append((when, number))
            text = raw.decode("utf-8", errors="replace").rstrip("\n")
            rows.append(element("div", element("a", number, href=f"#L{number}"), text,
                                id=f"L{number}", class_="line"))
    stamps.sort()
    depth = "../" * (len(log.parts) - 1)
    page = render("log.html", {
        "title": f"{node}: {log.name}",
        "style": trusted("style.css"),
        "raw": log.name,
        "report": f"{depth}report.html",
        "lines": join(rows),
    })
    (run_dir / view).write_text(page, encoding="utf-8")
    return LogView(node, log.as_posix(), view.as_posix(), stamps)


def write_log_views(run_dir: Path, node_logs: dict[str, list[Path]]) -> list[LogView]:
    """An HTML view of every node log (not of views already written)."""
    views = []
    for node, logs in node_logs.items():
        for log in logs:
            if log.name.endswith(".html"):
                continue
            try:
                views.append(_view(run_dir, node, log))
            except OSError:
                continue
    return views
