"""What a night's runs showed, and whether each cell met its expectation (pure functions
over a run folder's results.json and history, so they are tested on synthetic data).

Facts of a run (`run_facts`), from its stored files:

- `valid`: results.json's verdict (True, False, "unknown"; None without results);
- `anomalies`: every anomaly type any checker reported with its count (the largest
  count when several checkers report one type), allowed by the configuration or not;
- `failing`: the types that were not allowed (they made the run invalid);
- `first_anomaly_s`: seconds of test time to the first anomaly: of each witness the
  earliest op it names (its `ops`, history indices, mapped to the history's `time`),
  the earliest of them over the anomaly types that matter (a detection cell's expected
  types and attribution, a valid cell's failing types). Checkers keep a few witnesses
  per type, so this is the earliest among those;
- `ops_per_s`: client ops (invocations) over the history's length, as the report's
  subtitle counts them ("N client ops over T s");
- `availability`: the availability checker's overall measure, 1 - the fraction of
  client-phase seconds without an ok send (None when it did not run).

A run showing a type of `absent` (allowed or not) meets nothing. Otherwise, a run meets
a valid cell's expectation when its verdict is True ("unknown" is not valid). It meets
a detection when every expected type was found (allowed or not, count > 0), at least
one of `any_of` was, the attribution holds (`attributed_to = X`: some
checker reports `X-loss` or `X`, so "unclean-election" is the elections checker's
`unclean-election-loss`) and, with
`within`, its first expected anomaly came at most that many seconds into the test. A
valid cell is met when every seed's run met it; a detection cell when at least
`found_in` of its seeds did (default every seed). A run skipped for the budget, or
that ended in a harness error, meets nothing.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.nightly.plan import Cell, Expectation
from harness.store import HISTORY_FILE, RESULTS_FILE
from reports.summary import headline, run_state

__all__ = ["CellOutcome", "RunFacts", "attributed", "cell_outcome", "expected_found",
           "run_facts", "run_meets"]

NS = 1e9


@dataclass
class RunFacts:
    valid: bool | str | None = None
    summary: str = ""
    anomalies: dict[str, int] = field(default_factory=dict)
    failing: dict[str, int] = field(default_factory=dict)
    first_anomaly_s: float | None = None
    ops_per_s: float | None = None
    availability: float | None = None
    state: str | None = None  # reports.summary.run_state

    def to_json(self) -> dict[str, Any]:
        return {"valid": self.valid, "state": self.state, "summary": self.summary,
                "anomalies": self.anomalies, "failing": self.failing,
                "first_anomaly_s": self.first_anomaly_s, "ops_per_s": self.ops_per_s,
                "availability": self.availability}


def anomaly_counts(results: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
    """(every anomaly type found -> count, those not allowed -> count)."""
    found: dict[str, int] = {}
    failing: dict[str, int] = {}
    for body in (results.get("checkers") or {}).values():
        if not isinstance(body, Mapping):
            continue
        allowed = set(body.get("allowed") or [])
        for kind, anomaly in (body.get("anomalies") or {}).items():
            count = anomaly.get("count", 0) if isinstance(anomaly, Mapping) else 0
            if not isinstance(count, int) or count <= 0:
                continue
            found[kind] = max(found.get(kind, 0), count)
            if kind not in allowed:
                failing[kind] = max(failing.get(kind, 0), count)
    return dict(sorted(found.items())), dict(sorted(failing.items()))


def attributed(found: Mapping[str, int], cause: str) -> bool:
    """`attributed_to = cause` holds: a checker reported `cause-loss` or `cause`."""
    return found.get(f"{cause}-loss", 0) > 0 or found.get(cause, 0) > 0


def expected_found(expect: Expectation, found: Mapping[str, int]) -> bool:
    return (all(found.get(kind, 0) > 0 for kind in expect.anomalies)
            and (not expect.any_of or any(found.get(kind, 0) > 0 for kind in expect.any_of))
            and (expect.attributed_to is None or attributed(found, expect.attributed_to)))


def relevant_types(expect: Expectation, results: Mapping[str, Any]) -> set[str]:
    """The anomaly types whose first witness counts for the time to first anomaly."""
    if expect.valid:
        return set(anomaly_counts(results)[1])
    kinds = set(expect.anomalies) | set(expect.any_of)
    if expect.attributed_to:
        kinds |= {expect.attributed_to, f"{expect.attributed_to}-loss"}
    return kinds


def witness_ops(results: Mapping[str, Any], kinds: set[str]) -> list[list[int]]:
    """The op indices of every witness of the anomaly types `kinds`."""
    found = []
    for body in (results.get("checkers") or {}).values():
        if not isinstance(body, Mapping):
            continue
        for kind, anomaly in (body.get("anomalies") or {}).items():
            if kind not in kinds or not isinstance(anomaly, Mapping):
                continue
            for example in anomaly.get("examples") or []:
                ops = example.get("ops") if isinstance(example, Mapping) else None
                if isinstance(ops, list):
                    found.append([i for i in ops if isinstance(i, int)])
    return [ops for ops in found if ops]


@dataclass
class _HistoryScan:
    times: dict[int, int]
    client_ops: int
    end_ns: int


def _scan_history(path: Path, wanted: set[int]) -> _HistoryScan | None:
    """The times of the ops `wanted`, the client invocations and the last op's time."""
    times: dict[int, int] = {}
    invokes = 0
    end = 0
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    op = json.loads(line)
                except ValueError:
                    continue  # a torn last line; the checkers judge the history itself
                if not isinstance(op, dict):
                    continue
                time = op.get("time")
                if isinstance(time, int):
                    end = max(end, time)
                    if op.get("index") in wanted:
                        times[op["index"]] = time
                if op.get("type") == "invoke" and op.get("process") != "nemesis":
                    invokes += 1
    except OSError:
        return None
    return _HistoryScan(times, invokes, end)


def run_facts(run_dir: Path, expect: Expectation) -> RunFacts:
    """The facts of a stored run (results.json and history.jsonl), for `expect`."""
    try:
        results = json.loads((run_dir / RESULTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        results = None
    if not isinstance(results, dict):
        results = {}
    facts = facts_of(results, expect, run_dir / HISTORY_FILE)
    return facts


def facts_of(results: Mapping[str, Any], expect: Expectation, history: Path) -> RunFacts:
    found, failing = anomaly_counts(results)
    witnesses = witness_ops(results, relevant_types(expect, results))
    scan = _scan_history(history, {i for ops in witnesses for i in ops})
    first = None
    ops_per_s = None
    if scan is not None:
        starts = [min(scan.times[i] for i in ops if i in scan.times) for ops in witnesses
                  if any(i in scan.times for i in ops)]
        first = round(min(starts) / NS, 3) if starts else None
        if scan.end_ns > 0:
            ops_per_s = round(scan.client_ops / (scan.end_ns / NS), 2)
    overall = (((results.get("checkers") or {}).get("availability") or {}).get("stats")
               or {}).get("overall") or {}
    fraction = overall.get("fraction") if isinstance(overall, Mapping) else None
    valid = results.get("valid") if "valid" in results else None
    if valid not in (True, False, None):
        valid = "unknown"
    return RunFacts(valid, headline(results) if results else "no results", found, failing,
                    first, ops_per_s,
                    round(1 - fraction, 4) if isinstance(fraction, int | float) else None,
                    run_state(results))


def run_meets(expect: Expectation, facts: RunFacts | None) -> bool:
    """Whether one run met its cell's expectation (None: the run has no facts)."""
    if facts is None or facts.valid is None:
        return False
    if any(facts.anomalies.get(kind, 0) > 0 for kind in expect.absent):
        return False
    if expect.valid:
        return facts.valid is True
    if not expected_found(expect, facts.anomalies):
        return False
    return expect.within is None or (facts.first_anomaly_s is not None
                                     and facts.first_anomaly_s <= expect.within)


@dataclass
class CellOutcome:
    """A cell's result over its seeds."""

    met: bool
    runs: int
    runs_met: int
    needed: int
    skipped: int
    errors: int
    median_first_anomaly_s: float | None
    median_ops_per_s: float | None
    median_availability: float | None
    anomalies: dict[str, int]
    reason: str

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def cell_outcome(cell: Cell, facts: Sequence[RunFacts | None], skipped: int = 0,
                 errors: int = 0) -> CellOutcome:
    """A cell's outcome from the facts of its runs (None for a run without results:
    skipped or a harness error, counted in `skipped` and `errors`)."""
    expect = cell.expect
    met_runs = [f for f in facts if run_meets(expect, f)]
    needed = cell.needed()
    present = [f for f in facts if f is not None]
    total: dict[str, int] = {}
    for f in present:
        for kind, count in f.anomalies.items():
            total[kind] = total.get(kind, 0) + count
    met = len(met_runs) >= needed
    if expect.valid:
        bad = [f.summary for f in present if not run_meets(expect, f)]
        reason = "valid in every seed" if met else "; ".join(
            filter(None, [f"{len(bad)} of {len(facts)} runs not valid" if bad else "",
                          *(bad[:3]),
                          f"{skipped} skipped (budget)" if skipped else "",
                          f"{errors} harness errors" if errors else ""]))
    else:
        reason = (f"found in {len(met_runs)} of {len(facts)} seeds (needs {needed})"
                  + (f"; {skipped} skipped (budget)" if skipped else "")
                  + (f"; {errors} harness errors" if errors else ""))
    return CellOutcome(
        met=met, runs=len(facts), runs_met=len(met_runs), needed=needed, skipped=skipped,
        errors=errors,
        median_first_anomaly_s=_median(f.first_anomaly_s for f in
                                       (met_runs if not expect.valid else present)),
        median_ops_per_s=_median(f.ops_per_s for f in present),
        median_availability=_median(f.availability for f in present),
        anomalies=dict(sorted(total.items())), reason=reason)
