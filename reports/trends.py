"""Trends across nights, per matrix cell, for the store index (`kchaos nightly`).

Each night folder `store/nightly/<night>/` holds `night.json` (written by
`harness.nightly`): its `cells` (name, db, expect), and once checked its `outcomes`
per cell name: met, runs, runs_met, anomalies (type -> count summed over the cell's
runs), median_ops_per_s, median_availability, median_detection_s. A cell's trend
is its outcome night after night, keyed by the cell's name (stable across nights of
a plan). Per cell, one PNG under `store/nightly/trends/` with four panels over the
nights: runs that met the expectation (of the runs; the bar green when the cell was
met), anomalies found, median ops/s, median availability. Plots are redrawn only when
a night changed since they were drawn.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reports.html import Markup, element, join, link, table

__all__ = ["TREND_DIR", "TrendPoint", "trend_points", "trends_section", "write_trend_plots"]

NIGHTLY = "nightly"
STATE_FILE = "night.json"
TREND_DIR = "trends"


@dataclass(frozen=True)
class TrendPoint:
    night: str
    plan: str
    met: bool | None
    runs: int
    runs_met: int
    anomalies: int
    ops_per_s: float | None
    availability: float | None
    detection_s: float | None


def _states(store: Path) -> list[tuple[str, Mapping[str, Any], float]]:
    found = []
    for path in sorted((store / NIGHTLY).glob(f"*/{STATE_FILE}")):
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(body, Mapping) and body.get("outcomes"):
            found.append((path.parent.name, body, path.stat().st_mtime))
    found.sort(key=lambda item: (str(item[1].get("started", "")), item[0]))
    return found


def trend_points(store: Path) -> dict[str, list[TrendPoint]]:
    """Cell name -> its outcome in every checked night, oldest first."""
    points: dict[str, list[TrendPoint]] = {}
    for night, state, _ in _states(store):
        plan = str((state.get("plan") or {}).get("name", ""))
        for name, outcome in (state.get("outcomes") or {}).items():
            if not isinstance(outcome, Mapping):
                continue
            anomalies = outcome.get("anomalies") or {}
            points.setdefault(name, []).append(TrendPoint(
                night, plan, outcome.get("met"), int(outcome.get("runs") or 0),
                int(outcome.get("runs_met") or 0),
                sum(v for v in anomalies.values() if isinstance(v, int)),
                outcome.get("median_ops_per_s"), outcome.get("median_availability"),
                outcome.get("median_detection_s")))
    return dict(sorted(points.items()))


def _plot(name: str, points: Sequence[TrendPoint], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 5.2), dpi=90)
    FigureCanvasAgg(figure)
    axes = figure.subplots(4, 1, sharex=True)
    x = list(range(len(points)))
    colors = ["#1e7b34" if p.met else "#b3261e" for p in points]
    axes[0].bar(x, [p.runs_met for p in points], color=colors, width=0.6)
    axes[0].set_xlim(-0.75, max(len(points), 4) - 0.25)
    axes[0].plot(x, [p.runs for p in points], "k_", markersize=14, label="runs")
    axes[0].set_ylabel("met")
    axes[1].plot(x, [p.anomalies for p in points], "o-", color="#b3261e")
    axes[1].set_ylabel("anomalies")
    axes[2].plot(x, [p.ops_per_s if p.ops_per_s is not None else float("nan")
                     for p in points], "o-", color="#2f7ed8")
    axes[2].set_ylabel("ops/s")
    axes[3].plot(x, [p.availability if p.availability is not None else float("nan")
                     for p in points], "o-", color="#6a3d9a")
    axes[3].set_ylabel("availability")
    axes[3].set_ylim(-0.05, 1.05)
    axes[3].set_xticks(x, [p.night for p in points], rotation=30, ha="right", fontsize=8)
    for ax in axes:
        ax.grid(True, color="#e5e5e5", linewidth=0.6)
        ax.set_axisbelow(True)
    figure.suptitle(name, x=0.01, ha="left", fontsize=11, fontweight="bold")
    figure.tight_layout()
    figure.savefig(path)


def write_trend_plots(store: Path) -> dict[str, str]:
    """Draw the plots that are out of date; cell name -> PNG path relative to the store."""
    states = _states(store)
    if not states:
        return {}
    newest = max(mtime for _, _, mtime in states)
    out = store / NIGHTLY / TREND_DIR
    out.mkdir(parents=True, exist_ok=True)
    drawn = {}
    for name, points in trend_points(store).items():
        path = out / f"{name}.png"
        if not path.is_file() or path.stat().st_mtime < newest:
            _plot(name, points, path)
        drawn[name] = f"{NIGHTLY}/{TREND_DIR}/{name}.png"
    return drawn


def trends_section(store: Path) -> Markup:
    """The index's "Nightly trends" section (nothing without a checked night)."""
    points = trend_points(store)
    if not points:
        return Markup("")
    plots = write_trend_plots(store)
    rows = []
    for name, series in points.items():
        last = series[-1]
        marks = join(element("span", "■" if p.met else "□",
                             class_="verdict-valid" if p.met else "verdict-invalid",
                             title=f"{p.night}: {p.runs_met}/{p.runs}") for p in series[-14:])
        rows.append([link(f"#trend-{name}", name), marks,
                     link(f"{NIGHTLY}/{last.night}/summary.html", last.night),
                     f"{last.runs_met}/{last.runs}", last.anomalies,
                     "-" if last.ops_per_s is None else f"{last.ops_per_s:.1f}",
                     "-" if last.availability is None else f"{last.availability:.1%}"])
    figures = [element("figure", element("img", src=plots[name], alt=f"trend of {name}"),
                       id=f"trend-{name}") for name in points if name in plots]
    return join([element("h2", "Nightly trends"),
                 table(["cell", "met, night by night (last 14)", "last night", "runs met",
                        "anomalies", "ops/s", "availability"], rows), *figures,
                 element("h2", "Runs")])
