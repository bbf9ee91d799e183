"""The night's `junit.xml`: one testsuite (the night), one testcase per run.

    <testsuite name="nightly 2026-11-26" tests= failures= errors= skipped= time=>
      <testcase classname="<cell>" name="<cell> seed=<S>" time="<run seconds>">
        <properties> seed, db, configuration (JSON of the cell's options), time_limit
                     (the effective one: a scenario's wins), expect, run (folder),
                     and the run's facts: verdict, state (`reports.summary.run_state`:
                     valid, allowed, invalid, unknown or inconclusive), detection_s (time
                     to detection), detection (its type, reveal and cause, JSON),
                     took_effect (JSON),
                     ops_per_s, availability
        <failure message="..."/>   the run did not meet its cell's expectation, and the
                                   cell as a whole is not met: the anomalies found, or
                                   what was expected and what was found
        <error message="..."/>     the run ended in a harness error, or has no results
        <skipped message="..."/>   not started within the budget, or inconclusive (a
                                   fault its cell needs never took effect) in a cell
                                   that is met: "inconclusive: strand-follower never
                                   took effect"; in a cell not met, an inconclusive run
                                   is a <failure type="inconclusive"> with that message
        <system-out>               the run's headline (its state's word first), and why
                                   a detection seed that found nothing passes (its cell
                                   met found_in without it)

So CI marks a failure exactly when the night's exit code is 1.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.nightly.plan import Cell
from harness.nightly.state import ERROR, SKIPPED, RunRecord
from harness.nightly.verdicts import CellOutcome

__all__ = ["junit_tree", "write_junit"]


def _failure_message(cell: Cell, record: RunRecord) -> str:
    facts = record.facts or {}
    found = facts.get("anomalies") or {}
    listed = ", ".join(f"{kind} {count}" for kind, count in found.items()) or "none"
    banned = [f"{kind} {found[kind]}" for kind in cell.expect.absent if found.get(kind)]
    if banned:
        return f"expected: {cell.expect.describe()}; found: {', '.join(banned)}"
    if cell.expect.valid:
        failing = facts.get("failing") or {}
        if failing:
            return "anomalies: " + ", ".join(f"{k} {n}" for k, n in failing.items())
        return str(facts.get("summary") or "not valid")
    seconds = facts.get("detection_s")
    late = (f", detected {seconds:g} s after its fault"
            if cell.expect.within is not None and isinstance(seconds, int | float) else "")
    return f"expected: {cell.expect.describe()}; found: {listed}{late}"


def _json_or_none(value: object) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


def junit_tree(title: str, cells: Mapping[str, Cell], runs: Sequence[RunRecord],
               outcomes: Mapping[str, CellOutcome]) -> ET.ElementTree:
    suite = ET.Element("testsuite", name=title)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0
    for record in runs:
        cell = cells[record.cell]
        counts["tests"] += 1
        seconds = record.seconds or 0.0
        total_time += seconds
        case = ET.SubElement(suite, "testcase", classname=cell.name,
                             name=f"{cell.name} seed={record.seed}", time=f"{seconds:.1f}")
        properties = ET.SubElement(case, "properties")
        facts = record.facts or {}
        for name, value in (("seed", record.seed), ("db", cell.db),
                            ("configuration", json.dumps(cell.options, sort_keys=True)),
                            ("time_limit", cell.time_limit),
                            ("expect", json.dumps(cell.expect.to_json())),
                            ("run", record.run_dir or ""),
                            ("verdict", json.dumps(facts.get("valid"))),
                            ("state", facts.get("state")),
                            ("detection_s", facts.get("detection_s")),
                            ("detection", _json_or_none(facts.get("detection"))),
                            ("took_effect", _json_or_none(facts.get("took_effect"))),
                            ("ops_per_s", facts.get("ops_per_s")),
                            ("availability", facts.get("availability"))):
            ET.SubElement(properties, "property", name=name,
                          value="" if value is None else str(value))
        outcome = outcomes.get(cell.name)
        if record.status == SKIPPED:
            counts["skipped"] += 1
            ET.SubElement(case, "skipped", message=record.error or "skipped (budget)")
        elif record.status == ERROR or record.facts is None or facts.get("valid") is None:
            counts["errors"] += 1
            ET.SubElement(case, "error", type="harness-error",
                          message=record.error or str(facts.get("summary") or "no results"))
        elif facts.get("inconclusive") and outcome is not None and outcome.met:
            counts["skipped"] += 1
            ET.SubElement(case, "skipped", message=str(facts["inconclusive"]))
        elif facts.get("inconclusive"):
            counts["failures"] += 1
            failure = ET.SubElement(case, "failure", message=str(facts["inconclusive"]),
                                    type="inconclusive")
            failure.text = outcome.reason if outcome is not None else ""
        elif not record.met and outcome is not None and not outcome.met:
            counts["failures"] += 1
            failure = ET.SubElement(case, "failure", message=_failure_message(cell, record),
                                    type="expectation")
            failure.text = f"{outcome.reason}\n{facts.get('summary', '')}"
        out = str(facts.get("summary") or "")
        if not record.met and outcome is not None and outcome.met and record.facts:
            out += (f"\nnot found in this seed; the cell is met ({outcome.reason})")
        if out:
            ET.SubElement(case, "system-out").text = out
    for name, value in counts.items():
        suite.set(name, str(value))
    suite.set("time", f"{total_time:.1f}")
    ET.indent(suite)
    return ET.ElementTree(suite)


def write_junit(path: Path, title: str, cells: Mapping[str, Cell], runs: Sequence[RunRecord],
                outcomes: Mapping[str, CellOutcome]) -> Path:
    junit_tree(title, cells, runs, outcomes).write(path, encoding="utf-8",
                                                   xml_declaration=True)
    return path
