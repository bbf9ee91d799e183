"""Each seeded defect of our broker (`kchaos.debug.*`, grep broker/config.py) shown by a short
real `kchaos run`: with the knob the run finds the defect's anomaly, the same run without
it finds none of those types. A knob whose run stopped showing its anomaly would leave
the detection cells built on it testing nothing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

KCHAOS = str(Path(sys.executable).parent / "kchaos")
BROKER_CONFIG = Path(__file__).resolve().parents[2] / "broker" / "config.py"
SHORT = ("--nodes", "3", "--zookeepers", "1", "--time-limit", "15", "--recovery-seconds", "2",
         "--final-read-seconds", "20", "--seed", "1")
# knob -> (the run's options, the anomaly types that show its defect)
KNOBS: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {
    "kchaos.debug.read-uncommitted-leak": (
        ("--txn", "--abort-rate", "0.2", "--nemesis", "none"), frozenset({"G1a"})),
    "kchaos.debug.lose-unflushed-on-crash": (
        ("--acks", "all", "--nemesis", "crash-lose-unflushed", "--nemesis-interval", "3"),
        frozenset({"lost-acknowledged", "inconsistent-offsets"})),
    "kchaos.debug.ack-commit-before-replication": (
        ("--sub-via", "subscribe", "--nemesis", "depose-coordinator,kill-coordinator",
         "--nemesis-interval", "3"), frozenset({"commit-rewind", "resume-rewind"})),
    "kchaos.debug.skip-epoch-fencing": (
        ("--txn", "--abort-rate", "0.2", "--nemesis", "all", "--nemesis-interval", "3"),
        frozenset({"lost-write", "unseen", "duplicate", "G1a"})),
}


def found(store: Path, options: tuple[str, ...], knob: str | None) -> dict[str, int]:
    """The anomaly types (allowed or not, with counts) of one short run of `options`, with
    `knob` on (None: without it)."""
    args = [KCHAOS, "run", "--store", str(store), *SHORT, *options]
    if knob:
        args += ["--broker-config", f"{knob}=true"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=580)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((store / "latest" / "results.json").read_text())
    counts: dict[str, int] = {}
    for body in results["checkers"].values():
        for kind, anomaly in (body.get("anomalies") or {}).items():
            counts[kind] = max(counts.get(kind, 0), anomaly["count"])
    return counts


def test_every_debug_knob_of_the_broker_is_tested_here():
    knobs = set(re.findall(r"kchaos\.debug\.[a-z-]+", BROKER_CONFIG.read_text()))
    assert knobs == set(KNOBS)


@pytest.mark.cluster
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("knob", sorted(KNOBS))
def test_a_debug_knob_shows_its_anomaly_and_the_same_run_without_it_none(knob, tmp_path):
    options, shows = KNOBS[knob]
    with_knob = found(tmp_path / "with", options, knob)
    assert shows & {kind for kind, count in with_knob.items() if count > 0}, with_knob
    without = {kind: count for kind, count in found(tmp_path / "without", options, None).items()
               if kind in shows}
    assert not without, without
