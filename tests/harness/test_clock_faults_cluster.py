"""Clock bumps on our broker: a broker whose wall clock runs ahead deletes log segments by
retention before anyone read them (a real hazard of retention by the local clock), and the
run says so; the same schedule with the default retention loses nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

KCHAOS = str(Path(sys.executable).parent / "kchaos")
# seed 5's schedule bumps brokers' clocks ahead by 2 hours, then by 10 minutes
RUN = ["--time-limit", "20", "--nodes", "3", "--zookeepers", "1", "--nemesis", "clock-bump",
       "--nemesis-interval", "4", "--seed", "5", "--recovery-seconds", "2",
       "--final-read-seconds", "20", "--broker-config", "log.retention.check.interval.ms=1000",
       "--broker-config", "log.segment.bytes=2048"]


def run(store: Path, *extra: str) -> tuple[dict, list[dict]]:
    done = subprocess.run([KCHAOS, "run", "--store", str(store), *RUN, *extra],
                          capture_output=True, text=True, timeout=400)
    results = json.loads((store / "latest" / "results.json").read_text())
    assert results["checkers"]["faults"]["stats"]["never"] == [], done.stdout[-3000:]
    history = [json.loads(line) for line in
               (store / "latest" / "history.jsonl").read_text().splitlines()]
    return results, history


def test_a_clock_run_ahead_deletes_unread_records_by_retention(tmp_path):
    results, history = run(tmp_path / "short", "--broker-config", "log.retention.ms=300000")
    bumps = [op["value"] for op in history if op["process"] == "nemesis"
             and op["f"] == "clock-bump" and "node" in (op.get("value") or {})]
    assert bumps and all(bump["offset_ms"] >= 600_000 for bump in bumps), bumps
    assert results["state"] == "invalid"
    assert results["checkers"]["queue"]["anomalies"]["unseen"]["count"] > 0
    logs = "".join(path.read_text() for path in
                   (tmp_path / "short" / "latest" / "nodes").glob("n*/server.log"))
    assert "retention deleted" in logs
    resets = [op for op in history if op["process"] == "nemesis" and op["f"] == "clock-reset"
              and op["type"] == "info" and op.get("value")]
    assert resets, "every clock is put back"


@pytest.mark.long
def test_the_same_bumps_with_the_default_retention_lose_nothing(tmp_path):
    results, _ = run(tmp_path / "default")
    assert results["state"] == "valid", results["summary"]
