"""A one-way partition and a broker cut off from the clients only, asked of a short run
on our broker: each takes effect, says what it did, and the run stays valid."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

KCHAOS = str(Path(sys.executable).parent / "kchaos")
FAULTS = ["partition-one-way", "isolate-clients"]


def test_one_way_and_client_cuts_take_effect_and_the_run_stays_valid(tmp_path):
    store = tmp_path / "store"
    done = subprocess.run(
        [KCHAOS, "run", "--store", str(store), "--time-limit", "15", "--nodes", "3",
         "--zookeepers", "1", "--nemesis", ",".join(FAULTS), "--nemesis-interval", "3",
         "--seed", "2", "--recovery-seconds", "2", "--final-read-seconds", "20"],
        capture_output=True, text=True, timeout=400)
    output = done.stdout + done.stderr
    results = json.loads((store / "latest" / "results.json").read_text())
    stats = results["checkers"]["faults"]["stats"]
    assert stats["asked"] == FAULTS and stats["never"] == [], stats
    assert results["state"] == "valid", output[-3000:]
    history = [json.loads(line) for line in
               (store / "latest" / "history.jsonl").read_text().splitlines()]
    starts = {op["fault"]: op["value"] for op in history
              if op["process"] == "nemesis" and op["type"] == "info"
              and op["f"] == "start-partition" and isinstance(op.get("value"), dict)}
    one_way = starts["partition-one-way"]
    assert all(receiver not in one_way.get(sender, [])
               for receiver, senders in one_way.items() for sender in senders)
    cut = starts["isolate-clients"]
    assert cut["drops"] == "clients" and cut["leads"] is True
    assert cut["broker"] in {"n1", "n2", "n3"} and cut["clients"].count(".") == 3
