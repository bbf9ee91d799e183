"""A night's summary page, `store/nightly/<date>/summary.html` (`kchaos nightly`).

It reads the night's state (`night.json`, written by `harness.nightly`; the format is
described there) as plain data: the plan, its cells (name, db, configuration options,
expectation), every run (cell, seed, status, run folder, facts: verdict, inconclusive,
anomalies, time to detection and its cause, ops/s, availability, met) and each cell's
outcome (met, runs met, conclusive and inconclusive runs, needed, medians, reason). The
page opens with the night's verdict, then the detection table (cell, db, found in k of
the conclusive runs, inconclusive runs, median and longest time to detection) when the
plan has detection cells, then one table per cell with a row per run and links to each
run's report.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from reports.html import Markup, element, facts, join, link, render, table, trusted
from reports.report import REPORT_FILE

__all__ = ["COMPARISON_HEADER", "SUMMARY_FILE", "comparisons", "describe_expectation",
           "write_night_page"]

SUMMARY_FILE = "summary.html"


def detects(expect: Any) -> bool:
    """Whether a cell's expectation (as night.json has it) is a detection."""
    return isinstance(expect, Mapping) and bool(
        expect.get("anomalies") or expect.get("any_of") or expect.get("attributed_to"))


def describe_expectation(expect: Any) -> str:
    if expect in (None, "valid"):
        return "valid in every seed"
    if not isinstance(expect, Mapping):
        return str(expect)
    absent = expect.get("absent") or []
    without = f", without {' or '.join(absent)}" if absent else ""
    if not detects(expect):
        runs = expect.get("conclusive_in")
        return (f"valid in at least {runs} conclusive runs" if runs
                else "valid in every seed") + without
    what = [" and ".join(expect["anomalies"])] if expect.get("anomalies") else []
    if expect.get("any_of"):
        what.append("one of " + ", ".join(expect["any_of"]))
    text = "finds " + (" and ".join(what) or "an anomaly")
    if expect.get("attributed_to"):
        text += f" attributed to {expect['attributed_to']}"
    if expect.get("within") is not None:
        text += f" within {expect['within']:g} s of its fault"
    found_in = expect.get("found_in")
    return text + (f" in at least {found_in} seeds" if found_in else " in every seed") + without


def _number(value: Any, unit: str = "", digits: int = 1) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "-"
    return f"{value:.{digits}f}{unit}"


def _percent(value: Any) -> str:
    return f"{value:.1%}" if isinstance(value, int | float) else "-"


def _met(value: Any) -> Markup:
    if value is True:
        return element("span", "met", class_="verdict-valid")
    if value is False:
        return element("span", "NOT MET", class_="verdict-invalid")
    return element("span", "-", class_="verdict-none")


def _verdict(facts_: Mapping[str, Any] | None, status: str) -> Markup:
    if status != "stored" or not facts_:
        return element("span", status, class_="verdict-none")
    if facts_.get("inconclusive") and facts_.get("valid") is not None:
        return element("span", str(facts_["inconclusive"]), class_="verdict-unknown")
    valid = facts_.get("valid")
    labels: dict[object, tuple[str, str]] = {
        True: ("valid", "valid"), False: ("invalid", "INVALID"), "unknown": ("unknown", "unknown")}
    css, label = labels.get(valid, ("none", "no results"))
    return element("span", label, class_=f"verdict-{css}")


def _cell_section(cell: Mapping[str, Any], outcome: Mapping[str, Any],
                  runs: list[Mapping[str, Any]]) -> Markup:
    name = cell["name"]
    detection = detects(cell.get("expect"))
    rows = []
    for run in runs:
        f = run.get("facts") or {}
        folder = run.get("run_dir")
        anomalies = ", ".join(f"{k} {n}" for k, n in (f.get("anomalies") or {}).items())
        rows.append([
            run.get("seed"), _verdict(f, run.get("status", "")),
            _met(run.get("met")), anomalies or ("none" if f else "-"),
            _detection(f.get("detection")), _number(f.get("ops_per_s")),
            _percent(f.get("availability")), _number(run.get("seconds"), " s", 0),
            join([link(f"{folder}/{REPORT_FILE}", "report"), " · ", link(f"{folder}/", "files")])
            if folder else (run.get("error") or "-"),
        ])
    summary = facts([
        ("expectation", describe_expectation(cell.get("expect"))),
        ("db", cell.get("db")),
        ("configuration", json.dumps(cell.get("options") or {}, sort_keys=True)),
        ("time limit", _number(cell.get("time_limit"), " s", 0)
         + (" (the scenario's)" if (cell.get("options") or {}).get("scenario") else "")),
        ("outcome", join([_met(outcome.get("met")), f"  {outcome.get('reason', '')}"])),
        (("found in" if detection else "runs met"),
         f"{outcome.get('runs_met', 0)} of {outcome.get('conclusive', 0)} conclusive runs "
         f"(needs {outcome.get('needed')}), {outcome.get('inconclusive', 0)} inconclusive, "
         f"{outcome.get('runs', 0)} seeds"),
        ("time to detection, median and longest",
         f"{_number(outcome.get('median_detection_s'), ' s')} · "
         f"{_number(outcome.get('max_detection_s'), ' s')}"),
        ("median ops/s", _number(outcome.get("median_ops_per_s"))),
        ("median availability", _percent(outcome.get("median_availability"))),
    ])
    return join([element("h2", name, id=name), summary,
                 table(["seed", "verdict", "met", "anomalies found", "time to detection",
                        "ops/s", "availability", "wall time", "links"], rows)])


def _detection(detection: Any) -> str:
    """A run's time to detection and its cause: `12.3 s (kill-leader at 14.0 s)`."""
    if not isinstance(detection, Mapping):
        return "-"
    fault = detection.get("fault")
    cause = (f"{fault} at {_number(detection.get('fault_start_s'), ' s')}" if fault
             else "from the start")
    return f"{_number(detection.get('seconds'), ' s')} ({cause})"


def detection_rows(state: Mapping[str, Any]) -> list[list[Any]]:
    """The detection cells: name, label, db, found in k of the conclusive runs,
    inconclusive runs, median and longest time to detection, met."""
    outcomes = state.get("outcomes") or {}
    rows = []
    for cell in state.get("cells") or []:
        if not detects(cell.get("expect")):
            continue
        outcome = outcomes.get(cell["name"]) or {}
        rows.append([cell["name"], cell.get("label") or cell["name"], cell.get("db"),
                     f"{outcome.get('runs_met', 0)}/{outcome.get('conclusive', 0)}",
                     outcome.get("inconclusive", 0),
                     _number(outcome.get("median_detection_s"), " s"),
                     _number(outcome.get("max_detection_s"), " s"),
                     outcome.get("met")])
    return rows


COMPARISON_HEADER = ["cell", "db", "conclusive runs", "anomalies (over the runs)",
                     "median failover", "median seconds without an ok write", "median ops/s"]


def comparisons(state: Mapping[str, Any]) -> dict[str, list[list[str]]]:
    """Per `compare` name, in the plan's order, a row per cell of that name: label, db,
    conclusive runs, the anomalies its runs found (type and count), the medians of the
    runs' failover seconds (a workload partition without a leader), of their seconds
    without an ok write, and of their ops/s."""
    outcomes = state.get("outcomes") or {}
    tables: dict[str, list[list[str]]] = {}
    for cell in state.get("cells") or []:
        if not cell.get("compare"):
            continue
        outcome = outcomes.get(cell["name"]) or {}
        found = ", ".join(f"{kind} {count}" for kind, count in
                          (outcome.get("anomalies") or {}).items())
        tables.setdefault(cell["compare"], []).append([
            cell.get("label") or cell["name"], str(cell.get("db")),
            f"{outcome.get('conclusive', 0)} of {outcome.get('runs', 0)}",
            found or ("none" if outcome else "-"),
            _number(outcome.get("median_failover_s"), " s"),
            _number(outcome.get("median_idle_s"), " s", 0),
            _number(outcome.get("median_ops_per_s"))])
    return tables


def write_night_page(folder: Path, state: Mapping[str, Any]) -> Path:
    """Write the night's summary page into its folder and return its path."""
    cells = state.get("cells") or []
    outcomes = state.get("outcomes") or {}
    runs = state.get("runs") or []
    met = sum(1 for c in cells if (outcomes.get(c["name"]) or {}).get("met"))
    plan = (state.get("plan") or {}).get("name", "?")
    all_met = bool(cells) and met == len(cells)
    parts: list[Any] = []
    detection = detection_rows(state)
    if detection:
        parts += [element("h2", "Detection"),
                  table(["cell", "db", "found in (conclusive runs)", "inconclusive",
                         "median time to detection", "longest", "met"],
                        [[link(f"#{r[0]}", r[1]), r[2], r[3], r[4], r[5], r[6], _met(r[7])]
                         for r in detection])]
    for name, rows in comparisons(state).items():
        parts += [element("h2", f"Side by side: {name}"), table(COMPARISON_HEADER, rows)]
    overview = [[link(f"#{c['name']}", c["name"]), c.get("db"),
                 describe_expectation(c.get("expect")),
                 _met((outcomes.get(c["name"]) or {}).get("met")),
                 (outcomes.get(c["name"]) or {}).get("reason", "not checked")] for c in cells]
    parts += [element("h2", "Cells"),
              table(["cell", "db", "expectation", "outcome", "why"], overview)]
    for cell in cells:
        parts.append(_cell_section(cell, outcomes.get(cell["name"]) or {},
                                   [r for r in runs if r.get("cell") == cell["name"]]))
    parts.append(element("p", join(["junit: ", link("junit.xml"), " · the night's runs: ",
                                    link("index.html"), " · state: ", link("night.json")]),
                         class_="muted"))
    page = render("night.html", {
        "title": f"kchaos nightly {plan} {state.get('night', '')}",
        "style": trusted("style.css"),
        "banner": "valid" if all_met else "invalid",
        "verdict": f"{'ALL CELLS MET' if all_met else 'CELLS NOT MET'}: {met} of {len(cells)}",
        "what": f"plan {plan} · night {state.get('night', '')} · started "
                f"{state.get('started', '')} · {len(runs)} runs",
        "body": join(parts),
        "written": datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
    })
    path = folder / SUMMARY_FILE
    path.write_text(page, encoding="utf-8")
    return path
