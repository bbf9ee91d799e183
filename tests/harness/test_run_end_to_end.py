"""`kchaos run` end to end, as a user runs it: real namespaces, ZooKeeper, brokers, clients,
faults, Spark checkers and the report; then nothing is left behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.store import read_test

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(400)]

KCHAOS = str(Path(sys.executable).parent / "kchaos")


def leftovers(store: Path) -> dict[str, int]:
    """What the latest run's cluster (its per-run prefix, from kchaos.log) left: namespaces,
    links and live processes."""
    log = (store / "latest" / "kchaos.log").read_text()
    prefix = re.search(r"cluster (kc[0-9a-f]+): nodes provisioned", log).group(1)
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    processes = subprocess.run(["ps", "-eo", "stat,args"], capture_output=True, text=True).stdout
    alive = [line for line in processes.splitlines()
             if f"/{prefix}/" in line and not line.startswith("Z")]
    return {"namespaces": sum(1 for line in namespaces.splitlines() if line.startswith(prefix)),
            "links": sum(1 for line in links.splitlines() if f" {prefix}" in line),
            "processes": len(alive)}


NOTHING = {"namespaces": 0, "links": 0, "processes": 0}


def kchaos_run(store: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([KCHAOS, "run", "--store", str(store), *args], capture_output=True,
                          text=True, timeout=380)
    (store / "stdout.txt").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    return done


def results_of(store: Path) -> dict:
    return json.loads((store / "latest" / "results.json").read_text())


def test_safe_configuration_under_partition_kill_and_pause_is_valid(tmp_path):
    store = tmp_path / "store"
    done = kchaos_run(store, "--time-limit", "20", "--nemesis", "partition,kill,pause",
                      "--nemesis-interval", "4", "--seed", "3")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "kchaos: VALID" in done.stdout
    run = (store / "latest").resolve()
    assert run.parent.name == "queue" and (store / "queue" / "latest").resolve() == run
    for name in ("test.json", "history.jsonl", "results.json", "report.html", "kchaos.log"):
        assert (run / name).is_file(), name
    assert (run / "nodes" / "n1" / "server.log").is_file()
    assert "%3|" not in done.stdout + done.stderr, "librdkafka logged to the terminal"
    assert (run / "clients.log").is_file()
    for line in ("Using Spark's default log4j profile", "NativeCodeLoader",
                 "Using incubator modules"):
        assert line not in done.stdout + done.stderr, f"{line!r} reached the terminal"
    assert not (run / "spark.log").exists(), "a small run's history started Spark"
    assert "{'n" not in done.stderr, "the progress line printed a partition map"
    assert (run / "nodes" / "z1" / "zookeeper.log").is_file()
    test = read_test(run)
    assert test["seed"] == 3 and test["start_wall_ms"] > 0
    assert test["broker_config"]["min.insync.replicas"] == "2"
    ops = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    nemesis = [op for op in ops if op["process"] == "nemesis"]
    assert any(op["f"] in ("start-partition", "kill", "pause") and op["value"] is not None
               for op in nemesis), "no fault was injected"
    assert {op.get("fault") for op in nemesis if op["f"] in ("kill", "pause")} <= {
        "kill", "pause"}
    assert nemesis[-1]["f"] == "heal"
    assert sum(1 for op in ops if op["type"] == "ok" and op["f"] == "send") > 100
    assert results_of(store)["valid"] is True
    assert leftovers(store) == NOTHING

    again = subprocess.run([KCHAOS, "check", str(store)], capture_output=True, text=True,
                           timeout=200)
    assert again.returncode == 0 and "kchaos: VALID" in again.stdout


@pytest.mark.long
def test_unclean_2013_loses_acknowledged_writes_to_an_unclean_election(tmp_path):
    store = tmp_path / "store"
    done = kchaos_run(store, "--scenario", "unclean-2013", "--nodes", "3", "--zookeepers", "1",
                      "--seed", "5")
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    results = results_of(store)["checkers"]
    lost = results["queue"]["anomalies"]["lost-write"]["count"]
    assert lost > 0
    elections = results["elections"]["anomalies"]
    assert "unexplained-loss" not in elections
    unclean = elections["unclean-election-loss"]
    assert unclean["count"] > 0
    witness = unclean["examples"][0]
    assert witness["election"]["unclean"] is True
    assert "unclean-election-loss" in results["elections"]["allowed"]
    assert "lost-write" in done.stdout and "unclean-election-loss" in done.stdout
    summary = results_of(store)["summary"]
    assert "no anomalies" not in summary and "lost-write" in summary
    assert leftovers(store) == NOTHING


def test_sigterm_tears_everything_down_and_keeps_the_history(tmp_path):
    store = tmp_path / "store"
    process = subprocess.Popen([KCHAOS, "run", "--store", str(store), "--nodes", "3",
                                "--zookeepers", "1", "--time-limit", "60", "--nemesis", "none"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        history = None
        while time.monotonic() < deadline:
            runs = list(store.glob("queue/2*/history.jsonl"))
            if runs and runs[0].stat().st_size > 2000:
                history = runs[0]
                break
            time.sleep(0.5)
        assert history is not None, "the run never started writing its history"
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 3, output[-2000:]
    assert "interrupted" in output
    assert read_test(history.parent)["final_reads"] is False
    assert history.stat().st_size > 2000
    assert leftovers(store) == NOTHING


def test_a_broker_that_exits_at_start_is_reported_with_its_error_and_its_log_kept(tmp_path):
    store = tmp_path / "store"
    done = kchaos_run(store, "--nodes", "1", "--zookeepers", "1", "--time-limit", "5",
                      "--nemesis", "none", "--broker-config", "log.dirs=/proc/kchaos-no-such-dir")
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-3000:]
    assert "broker on n1 exited: FileNotFoundError" in done.stdout
    run = (store / "latest").resolve()
    assert "/proc/kchaos-no-such-dir" in (run / "nodes" / "n1" / "broker.log").read_text()
    assert leftovers(store) == NOTHING


def test_kill_9_of_the_harness_leaves_nothing_after_10_seconds(tmp_path):
    store = tmp_path / "store"
    process = subprocess.Popen([KCHAOS, "run", "--store", str(store), "--nodes", "3",
                                "--zookeepers", "1", "--time-limit", "60", "--nemesis", "none"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        history = None
        while time.monotonic() < deadline and history is None:
            runs = list(store.glob("queue/2*/history.jsonl"))
            if runs and runs[0].stat().st_size > 2000:
                history = runs[0]
            time.sleep(0.5)
        assert history is not None, "the run never started writing its history"
        process.kill()
        process.wait()
        killed = time.monotonic()
        while leftovers(store) != NOTHING and time.monotonic() < killed + 10:
            time.sleep(0.5)
        assert leftovers(store) == NOTHING, "the reaper did not take the cluster down in 10 s"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    lines = history.read_text().splitlines()
    assert len(lines) > 10 and all(json.loads(line)["index"] == i for i, line in enumerate(lines))
