"""Coordinator and consumer faults asked of a short subscribe run take effect, and the run
says which did: a real run on our broker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

KCHAOS = str(Path(sys.executable).parent / "kchaos")
FAULTS = ["kill-coordinator", "isolate-coordinator", "pause-consumers", "add-partitions"]


def test_every_asked_coordinator_fault_takes_effect_in_a_20_second_run(tmp_path):
    store = tmp_path / "store"
    done = subprocess.run(
        [KCHAOS, "run", "--store", str(store), "--time-limit", "20", "--nodes", "3",
         "--zookeepers", "1", "--sub-via", "subscribe", "--commit", "after-process",
         "--nemesis", ",".join(FAULTS), "--seed", "1", "--recovery-seconds", "2",
         "--final-read-seconds", "20"], capture_output=True, text=True, timeout=400)
    output = done.stdout + done.stderr
    assert "the first round is shortened so each starts once" in output, output[-3000:]
    results = json.loads((store / "latest" / "results.json").read_text())
    stats = results["checkers"]["faults"]["stats"]
    assert stats["asked"] == FAULTS
    assert all(stats["took_effect"][name] >= 1 for name in FAULTS), stats
    assert stats["never"] == []
    assert results["state"] in ("valid", "invalid")
    assert "; faults: " in results["summary"] and "never:" not in results["summary"]
    assert done.returncode == (0 if results["state"] == "valid" else 1), output[-3000:]
