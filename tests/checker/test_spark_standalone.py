"""`kchaos check`, `check-history` and `check-lin` on a real Spark standalone cluster (a
master and two one-core workers from pyspark's jars) give the verdicts and anomalies of
local mode, and the executors never open a file of the driver's: the workers run in a
mount namespace where the driver's folder holding every history is an empty tmpfs.

With `-s` the test prints the cluster's start and each command's seconds on the
cluster and on local[2] (both in a warm session, whose start is reported apart).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.results import without_seconds
from tests.support.spark_cluster import environment, leftovers, spark_cluster
from tests.support.spark_driver import run_commands

pytestmark = [pytest.mark.spark, pytest.mark.long, pytest.mark.timeout(600)]

DATA = Path(__file__).parent.parent / "data"
ROOT = Path(__file__).parent.parent.parent
RUNS = ("queue-valid", "queue-anomalies", "queue-unknown")
HISTORIES = ("ok.jsonl", "lost-write-bad.jsonl")
SHARED_HISTORY = "poll-skip-bad.jsonl"
LIN_FILES = ("c01-ok.txt", "c01-bad.txt", "c10-bad.txt")


def commands(master: str, driver: Path, shared: Path, copy: str) -> list[list[str]]:
    """The three commands on files of the driver's folder, results under `copy`; one
    history is given as a file:// URL of the folder the executors share."""
    store = driver / copy
    return [
        ["check", *(str(store / run / "latest") for run in RUNS), "--spark-master", master],
        ["check-history", *(str(driver / name) for name in HISTORIES),
         (shared / SHARED_HISTORY).as_uri(), "--spark-master", master,
         "--json", str(store / "histories.json")],
        ["check-lin", *(str(driver / name) for name in LIN_FILES), "--spark-master", master,
         "--json", str(store / "lin.json")],
    ]



@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """(driver, shared): histories and runs only the driver sees, and a folder every
    executor sees."""
    driver = tmp_path_factory.mktemp("driver")
    shared = tmp_path_factory.mktemp("shared")
    for copy in ("cluster", "local"):
        for run in RUNS:
            shutil.copytree(DATA / "store" / run, driver / copy / run, symlinks=True)
    for name in HISTORIES:
        shutil.copy(DATA / "queue" / name, driver / name)
    shutil.copy(DATA / "queue" / SHARED_HISTORY, shared / SHARED_HISTORY)
    for name in LIN_FILES:
        shutil.copy(DATA / "porcupine" / "kv" / name, driver / name)
    return driver, shared


@pytest.fixture(scope="module")
def on_cluster(folders, tmp_path_factory):
    """The commands run by one driver on a standalone cluster whose workers cannot see the
    driver's folder, then a history of that folder given to the executors as a URL."""
    driver, shared = folders
    with spark_cluster(tmp_path_factory.mktemp("spark-cluster"), hide=driver) as cluster:
        hidden = (driver / HISTORIES[0]).as_uri()
        argv = [*commands(cluster.url, driver, shared, "cluster"),
                ["check-history", hidden, "--spark-master", cluster.url]]
        out, log = cluster.directory / "driver.out", cluster.directory / "driver.log"
        with open(out, "w") as printed, open(log, "w") as errors:
            driver_process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.spark_driver", cluster.url,
                 json.dumps(argv)], stdout=printed, stderr=errors, cwd=ROOT,
                env=environment(cluster.directory))
            while driver_process.poll() is None:
                cluster.remember_descendants()
                time.sleep(0.5)
        assert driver_process.returncode == 0, log.read_text()[-3000:]
        report = json.loads(out.read_text().splitlines()[-1])
    assert leftovers(cluster) == []
    return cluster, report


def test_the_cli_on_a_standalone_cluster_agrees_with_local_mode(on_cluster, folders, spark):
    driver, shared = folders
    cluster, report = on_cluster
    on_cluster_ran = report["commands"][:3]
    local_ran = run_commands(commands("local[2]", driver, shared, "local"))
    assert [r["code"] for r in on_cluster_ran] == [r["code"] for r in local_ran] == [1, 1, 1]
    for run in RUNS:
        results = [json.loads((driver / copy / run / "latest" / "results.json").read_text())
                   for copy in ("cluster", "local")]
        assert without_seconds(results[0]) == without_seconds(results[1]), run
    histories = [json.loads((driver / copy / "histories.json").read_text())["files"]
                 for copy in ("cluster", "local")]
    assert without_seconds(histories[0]) == without_seconds(histories[1])
    assert [h["valid"] for h in histories[0]] == [True, False, False]
    assert "poll-skip" in histories[0][2]["checkers"]["queue"]["anomalies"]
    lin = [json.loads((driver / copy / "lin.json").read_text())["files"]
           for copy in ("cluster", "local")]
    assert without_seconds(lin[0]) == without_seconds(lin[1])
    assert [f["valid"] for f in lin[0]] == [True, False, False]
    print(f"\nspark standalone: 2 workers x 1 core up in {cluster.start_seconds:.1f} s; "
          f"a driver's session on it in {report['start_seconds']:.1f} s")
    for cluster_run, local_run in zip(on_cluster_ran, local_ran, strict=True):
        print(f"  kchaos {cluster_run['argv'][0]:<14} standalone {cluster_run['seconds']:5.1f} s"
              f"   local[2] {local_run['seconds']:5.1f} s")


def test_executors_cannot_open_a_file_of_the_drivers(on_cluster, folders):
    """The driver's folder is hidden from the workers: a history of it given as a URL,
    which the executors must open themselves, cannot be read there (their logs say so), so
    the checks above never opened one."""
    cluster, report = on_cluster
    driver, _ = folders
    hidden = report["commands"][3]
    assert hidden["code"] == 3
    assert "must be readable from every Spark executor" in hidden["err"]
    executor_logs = "".join(log.read_text()
                            for log in cluster.directory.glob("worker-*/app-*/*/stderr"))
    assert (f"FileNotFoundException: File file:{driver / HISTORIES[0]} does not exist"
            in executor_logs)
