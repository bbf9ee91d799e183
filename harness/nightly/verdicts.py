"""What a night's runs showed, and whether each cell met its expectation (pure functions
over a run folder's results.json, test and history, so they are tested on synthetic data).

Facts of a run (`run_facts`), from its stored files:

- `valid`: results.json's verdict (True, False, "unknown"; None without results);
- `anomalies`: every anomaly type any checker reported with its count (the largest
  count when several checkers report one type), allowed by the configuration or not;
- `failing`: the types that were not allowed (they made the run invalid);
- `took_effect`: how many times each fault took effect (results.json's
  `checkers.faults.stats.took_effect`; None when the faults checker did not run);
- `inconclusive`: why the run counts as neither found nor valid, or None. A run is
  inconclusive when a fault its cell needs never took effect: every fault of the
  cell's `needs`, or, without `needs`, at least one of the faults the cell asks for
  (`needs = []` and a cell without faults need none); with no fault accounting in
  results.json, a run that needs a fault is inconclusive too;
- `detection_s` and `detection`: the time to detection (`harness.nightly.detection`) of
  the anomaly types that matter (a detection cell's attributed types when it has
  `attributed_to`, else its expected types; a valid cell's failing types), with the
  witness's type, the op that revealed it and the fault episode that caused it;
- `ops_per_s`: client ops (invocations) over the history's length, as the report's
  subtitle counts them ("N client ops over T s");
- `availability`: the availability checker's overall measure, 1 - the fraction of
  client-phase seconds without an ok send (None when it did not run).

A run showing a type of `absent` (allowed or not) meets nothing, and an inconclusive
run meets nothing. Otherwise, a run meets a valid cell's expectation when its verdict is
True ("unknown" is not valid). It meets a detection when every expected type was found
(count > 0; a type the configuration allowed counts only when the cell attributes it to
a clean or unclean election, the allowed loss being the point), at least one of
`any_of` was, the attribution holds
(`attributed_to = X`: some checker reports `X-loss` or `X`, so "unclean-election" is
the elections checker's `unclean-election-loss`) and, with `within`, its time to
detection is at most that many seconds. A detection cell is met when at least
`found_in` of its conclusive runs met it (default: every seed); a valid cell when
every conclusive run met it and at least `conclusive_in` runs were conclusive
(default: every seed). A run skipped for the budget, or that ended in a harness error,
is not conclusive.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checker.faults import recorded_fault_stats
from harness.nightly.detection import first_detection, scan_history
from harness.nightly.plan import Cell, Expectation
from harness.store import HISTORY_FILE, RESULTS_FILE, read_test
from reports.summary import headline, run_state

__all__ = ["CellOutcome", "RunFacts", "attributed", "cell_outcome", "expected_found",
           "inconclusive", "run_facts", "run_meets"]

NS = 1e9


@dataclass
class RunFacts:
    valid: bool | str | None = None
    summary: str = ""
    anomalies: dict[str, int] = field(default_factory=dict)
    failing: dict[str, int] = field(default_factory=dict)
    detection_s: float | None = None
    detection: dict[str, Any] | None = None
    ops_per_s: float | None = None
    availability: float | None = None
    took_effect: dict[str, int] | None = None
    inconclusive: str | None = None
    state: str | None = None  # reports.summary.run_state
    failover_s: float | None = None  # median seconds a workload partition had no leader
    idle_s: float | None = None  # seconds of the client phase without an ok write

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


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


# Attributions whose point is a loss the configuration allows: a cell attributing its
# expected types to an election counts them found also when they were allowed.
ALLOWED_IS_THE_POINT = frozenset({"clean-election", "unclean-election"})


def expected_found(expect: Expectation, found: Mapping[str, int],
                   failing: Mapping[str, int]) -> bool:
    """Every expected type and one of `any_of` found, and the attribution holds. An
    expected type the configuration allowed counts only when the cell attributes it to
    an election (the allowed loss is the point); otherwise only failing ones count."""
    counted = found if expect.attributed_to in ALLOWED_IS_THE_POINT else failing
    return (all(counted.get(kind, 0) > 0 for kind in expect.anomalies)
            and (not expect.any_of or any(counted.get(kind, 0) > 0 for kind in expect.any_of))
            and (expect.attributed_to is None or attributed(found, expect.attributed_to)))


def relevant_types(expect: Expectation, results: Mapping[str, Any]) -> set[str]:
    """The anomaly types whose witnesses count for the time to detection."""
    if expect.valid:
        return set(anomaly_counts(results)[1])
    if expect.attributed_to:
        return {expect.attributed_to, f"{expect.attributed_to}-loss"}
    return set(expect.anomalies) | set(expect.any_of)


def witnesses(results: Mapping[str, Any],
              kinds: set[str]) -> list[tuple[str, Mapping[str, Any]]]:
    """(type, witness) of every witness of the anomaly types `kinds`."""
    found = []
    for body in (results.get("checkers") or {}).values():
        if not isinstance(body, Mapping):
            continue
        for kind, anomaly in (body.get("anomalies") or {}).items():
            if kind not in kinds or not isinstance(anomaly, Mapping):
                continue
            found += [(kind, example) for example in anomaly.get("examples") or []
                      if isinstance(example, Mapping)]
    return found


def took_effect(results: Mapping[str, Any]) -> dict[str, int] | None:
    """Fault name -> times it took effect, from the faults checker (None: it did not run)."""
    stats = recorded_fault_stats(results.get("checkers") or {})
    if stats is None:
        return None
    return {str(name): n for name, n in stats["took_effect"].items() if isinstance(n, int)}


def inconclusive(cell: Cell, counts: Mapping[str, int] | None) -> str | None:
    """Why a run of `cell` whose faults took effect `counts` times is inconclusive, or None."""
    needed = cell.faults if cell.needs is None else cell.needs
    if not needed:
        return None
    if counts is None:
        return "inconclusive: no fault accounting in results.json (the faults checker did not run)"
    if cell.needs is None:
        if any(counts.get(fault, 0) > 0 for fault in needed):
            return None
        return (f"inconclusive: {needed[0]} never took effect" if len(needed) == 1 else
                f"inconclusive: none of {', '.join(needed)} took effect")
    never = [fault for fault in needed if counts.get(fault, 0) <= 0]
    if not never:
        return None
    return f"inconclusive: {', '.join(never)} never took effect"


def run_facts(run_dir: Path, cell: Cell) -> RunFacts:
    """The facts of a stored run (results.json, the test and history.jsonl) of `cell`."""
    try:
        results = json.loads((run_dir / RESULTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        results = None
    if not isinstance(results, dict):
        results = {}
    try:
        test = read_test(run_dir)
    except (OSError, ValueError):
        test = {}
    return facts_of(results, cell, run_dir / HISTORY_FILE, test)


def facts_of(results: Mapping[str, Any], cell: Cell, history: Path,
             test: Mapping[str, Any] | None = None) -> RunFacts:
    """The facts of a run of `cell` from its results.json body, history file and test."""
    found, failing = anomaly_counts(results)
    scan = scan_history(history)
    detection = None
    ops_per_s = None
    if scan is not None:
        start_wall_ms = (test or {}).get("start_wall_ms")
        detection = first_detection(witnesses(results, relevant_types(cell.expect, results)),
                                    scan, start_wall_ms if isinstance(start_wall_ms, int | float)
                                    else None)
        if scan.end_ns > 0:
            ops_per_s = round(scan.client_ops / (scan.end_ns / NS), 2)
    availability = (((results.get("checkers") or {}).get("availability") or {}).get("stats")
                    or {})
    overall = availability.get("overall") or {}
    fraction = overall.get("fraction") if isinstance(overall, Mapping) else None
    idle = overall.get("buckets-without-ok-send") if isinstance(overall, Mapping) else None
    valid = results.get("valid") if "valid" in results else None
    if valid not in (True, False, None):
        valid = "unknown"
    counts = took_effect(results)
    return RunFacts(valid, headline(results) if results else "no results", found, failing,
                    detection.seconds if detection else None,
                    detection.to_json() if detection else None, ops_per_s,
                    round(1 - fraction, 4) if isinstance(fraction, int | float) else None,
                    counts, inconclusive(cell, counts) if results else None,
                    run_state(results), _median(_failover_seconds(availability)),
                    idle if isinstance(idle, int | float) else None)


def _failover_seconds(availability: Mapping[str, Any]) -> list[float]:
    """The seconds each failover of a workload partition (not an internal `__*` topic)
    took, as the availability checker measured them."""
    return [failover["seconds"] for failover in availability.get("failovers") or ()
            if isinstance(failover, Mapping) and isinstance(failover.get("seconds"), int | float)
            and not str(failover.get("topic", "")).startswith("__")]


def conclusive(facts: RunFacts | None) -> bool:
    """A run with results whose needed faults took effect."""
    return facts is not None and facts.valid is not None and facts.inconclusive is None


def run_meets(expect: Expectation, facts: RunFacts | None) -> bool:
    """Whether one run met its cell's expectation (None: the run has no facts)."""
    if facts is None or not conclusive(facts):
        return False
    if any(facts.anomalies.get(kind, 0) > 0 for kind in expect.absent):
        return False
    if expect.valid:
        return facts.valid is True
    if not expected_found(expect, facts.anomalies, facts.failing):
        return False
    return expect.within is None or (facts.detection_s is not None
                                     and facts.detection_s <= expect.within)


@dataclass
class CellOutcome:
    """A cell's result over its seeds."""

    met: bool
    runs: int
    runs_met: int
    needed: int
    skipped: int
    errors: int
    conclusive: int
    inconclusive: int
    median_detection_s: float | None
    max_detection_s: float | None
    median_ops_per_s: float | None
    median_availability: float | None
    anomalies: dict[str, int]
    reason: str
    median_failover_s: float | None = None
    median_idle_s: float | None = None

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
    present = [f for f in facts if f is not None]
    counted = [f for f in present if conclusive(f)]
    unsure = [f for f in present if f.valid is not None and f.inconclusive is not None]
    met_runs = [f for f in counted if run_meets(expect, f)]
    needed = cell.needed()
    total: dict[str, int] = {}
    for f in present:
        for kind, count in f.anomalies.items():
            total[kind] = total.get(kind, 0) + count
    notes = [f"{len(unsure)} inconclusive ({_why(unsure)})" if unsure else "",
             f"{skipped} skipped (budget)" if skipped else "",
             f"{errors} harness errors" if errors else ""]
    if expect.valid:
        bad = [f.summary for f in counted if not run_meets(expect, f)]
        met = not bad and len(counted) >= needed
        head = (f"{len(bad)} of {len(counted)} conclusive runs not valid" if bad else
                f"every conclusive run valid: {len(counted)} of {len(facts)} seeds "
                f"(needs {needed})")
        reason = "; ".join(filter(None, [head, *bad[:3], *notes]))
    else:
        met = len(met_runs) >= needed
        reason = "; ".join(filter(None, [
            f"found in {len(met_runs)} of {len(counted)} conclusive runs, {len(facts)} seeds "
            f"(needs {needed})", *notes]))
    timed = [f.detection_s for f in (counted if expect.valid else
                                     [f for f in counted if expected_found(expect, f.anomalies,
                                                                           f.failing)])]
    return CellOutcome(
        met=met, runs=len(facts), runs_met=len(met_runs), needed=needed, skipped=skipped,
        errors=errors, conclusive=len(counted), inconclusive=len(unsure),
        median_detection_s=_median(timed),
        max_detection_s=max((s for s in timed if s is not None), default=None),
        median_ops_per_s=_median(f.ops_per_s for f in present),
        median_availability=_median(f.availability for f in present),
        anomalies=dict(sorted(total.items())), reason=reason,
        median_failover_s=_median(f.failover_s for f in present),
        median_idle_s=_median(f.idle_s for f in present))


def _why(runs: Sequence[RunFacts]) -> str:
    """The distinct reasons of inconclusive runs, without their common prefix."""
    reasons = dict.fromkeys((f.inconclusive or "").removeprefix("inconclusive: ")
                            for f in runs)
    return "; ".join(reasons)
