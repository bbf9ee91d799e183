"""Regenerate the stored fixture night of tests/reports/test_figures.py and
tests/harness/test_nightly_report.py (the night's real state code and verdicts, results
written as the night's Spark check would write them).

    .venv/bin/python tests/data/nightly/make.py

The night `2026-01-02`: plan `figures`, two seeds; a detection cell on our broker found in
both, one on Kafka 0.10.2.2 found in one of its two (needing one), a valid cell met and a
valid cell one of whose runs lost a write. Its machine and commit are fixed, not this
machine's.
"""

from __future__ import annotations

import datetime
import json
import shutil
import tomllib
from pathlib import Path

from harness.nightly.night import evaluate
from harness.nightly.plan import parse_plan
from harness.nightly.state import STORED, new_night

HERE = Path(__file__).parent
S = 1_000_000_000
PLAN = """
name = "figures"
seeds = [1, 2]
[defaults]
time_limit = 20
nodes = 3
zookeepers = 1
[[cell]]
name = "unclean-isolated-leader"
dbs = ["kchaos"]
options = {nemesis = "shrink-isr-isolate-leader", broker_config = {"min.insync.replicas" = 1, "unclean.leader.election.enable" = true}}
expect = {anomalies = ["lost-write"], attributed_to = "unclean-election"}
[[cell]]
name = "kip101-before-fix"
dbs = ["kafka"]
options = {nemesis = "strand-follower", kafka_version = "0.10.2.2", acks = "all"}
expect = {anomalies = ["lost-write"], found_in = 1}
[[cell]]
name = "safe-acks-all"
dbs = ["kchaos"]
options = {nemesis = "partition,kill", acks = "all"}
[[cell]]
name = "safe-flushed"
dbs = ["kchaos"]
options = {nemesis = "crash-lose-unflushed", broker_config = {"flush.messages" = 1}}
"""
MACHINE = {"cpus": 2, "cpu_model": "Example CPU @ 2.00GHz", "memory_bytes": 8 * 2**30,
           "kernel": "6.1.0-example"}
SOURCE = {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False}


def history(seconds: int, fault: str) -> str:
    """A send every second, each acknowledged half a second later, and `fault` requested
    at 12 s (after the lost sends), acting on n1 at 12.5 s."""
    ops = []
    for second in range(seconds):
        if second == 12:
            ops += [{"time": 12 * S, "type": "info", "process": "nemesis", "f": fault,
                     "fault": fault, "value": None},
                    {"time": 12 * S + S // 2, "type": "info", "process": "nemesis", "f": fault,
                     "fault": fault, "value": {"n1": "acted"}}]
        ops.append({"time": second * S, "type": "invoke", "process": 0, "f": "send",
                    "value": []})
        ops.append({"time": second * S + S // 2, "type": "ok", "process": 0, "f": "send",
                    "value": []})
    return "".join(json.dumps({"index": i, **op}) + "\n" for i, op in enumerate(ops))


def results(lost_at: int | None, allowed: bool, fraction: float) -> dict:
    """A run's results.json: a lost write whose send is op `lost_at` (or none); every
    asked fault took effect once (`faults` is filled in by `main`)."""
    checkers: dict = {"availability": {"valid": True,
                                       "stats": {"overall": {"fraction": fraction}}}}
    if lost_at is None:
        return {"valid": True, "checkers": checkers}
    checkers["queue"] = {"valid": allowed, "allowed": ["lost-write"] if allowed else [],
                         "anomalies": {"lost-write": {"count": 2,
                                                      "examples": [{"ops": [lost_at]}]}}}
    if allowed:
        checkers["elections"] = {"valid": True, "allowed": ["unclean-election-loss"],
                                 "anomalies": {"unclean-election-loss": {
                                     "count": 2, "examples": [{"ops": [lost_at]}]}}}
    return {"valid": allowed, "checkers": checkers}


RESULTS = {  # (cell, seed) -> results
    ("unclean-isolated-leader.kchaos", 1): results(14, True, 0.1),
    ("unclean-isolated-leader.kchaos", 2): results(20, True, 0.15),
    ("kip101-before-fix.kafka", 1): results(8, False, 0.05),
    ("kip101-before-fix.kafka", 2): results(None, True, 0.0),
    ("safe-acks-all.kchaos", 1): results(None, True, 0.2),
    ("safe-acks-all.kchaos", 2): results(None, True, 0.3),
    ("safe-flushed.kchaos", 1): results(None, True, 0.0),
    ("safe-flushed.kchaos", 2): results(30, False, 0.0),
}


def main() -> None:
    folder = HERE / "2026-01-02"
    shutil.rmtree(folder, ignore_errors=True)
    plan = parse_plan(tomllib.loads(PLAN), "figures.toml")
    night = new_night(HERE.parent / "nightly-build", plan, PLAN,
                      datetime.datetime(2026, 1, 2, 1, 0, 0))
    cells = {cell.name: cell for cell in plan.cells}
    for record in night.runs:
        record.status, record.exit, record.seconds = STORED, 0, 35.0
        record.run_dir = f"{record.cell}/2026010{record.seed}T010000"
        run = night.folder / record.run_dir
        run.mkdir(parents=True)
        faults = cells[record.cell].faults
        (run / "history.jsonl").write_text(history(20, faults[0]))
        body = RESULTS[(record.cell, record.seed)]
        body["checkers"]["faults"] = {"valid": True, "stats": {
            "asked": list(faults), "invoked": {f: 1 for f in faults},
            "took_effect": {f: 1 for f in faults}, "never": []}}
        (run / "results.json").write_text(json.dumps(body))
    night.state.update(machine=MACHINE, source=SOURCE, elapsed_seconds=280.0)
    evaluate(night, cells)
    shutil.move(night.folder, folder)
    shutil.rmtree(HERE.parent / "nightly-build")


if __name__ == "__main__":
    main()
