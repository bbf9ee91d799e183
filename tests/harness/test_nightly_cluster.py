"""`kchaos nightly` end to end on a real cluster: a night of one short cell, its junit.xml,
summary page and exit code, and a resume of the finished night that runs nothing again."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

KCHAOS = str(Path(sys.executable).parent / "kchaos")
# Seed 2: seed 5's workload re-assigns a partition at the beginning beside resumed ones
# about a second in, where the assign-mode consumer's open nonmonotonic-poll shows up.
PLAN = """
name = "one-cell"
seeds = [2]
budget = 10
[defaults]
nodes = 3
zookeepers = 1
time_limit = 5
recovery_seconds = 1
final_read_seconds = 15
[[cell]]
name = "quiet"
options = {nemesis = "none", acks = "all"}
"""


def nightly(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([KCHAOS, "nightly", *args], capture_output=True, text=True,
                          timeout=280)


def test_a_night_of_one_cell_then_a_resume_that_reruns_nothing(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    store = tmp_path / "store"
    done = nightly(str(plan), "--store", str(store))
    assert done.returncode == 0, done.stdout + done.stderr
    [night] = [p for p in (store / "nightly").iterdir() if p.name != "trends"]
    assert "[1/1] quiet.kchaos seed=2 started" in done.stdout
    assert "1 of 1 cells met" in done.stdout

    suite = ET.parse(night / "junit.xml").getroot()
    assert (suite.attrib["tests"], suite.attrib["failures"], suite.attrib["errors"]) == \
        ("1", "0", "0")
    [case] = suite.iter("testcase")
    assert case.attrib["classname"] == "quiet.kchaos"
    assert case.attrib["name"] == "quiet.kchaos seed=2"
    props = {p.attrib["name"]: p.attrib["value"] for p in case.iter("property")}
    assert props["seed"] == "2" and props["db"] == "kchaos" and props["verdict"] == "true"
    assert json.loads(props["configuration"])["nemesis"] == "none"
    run = night / props["run"]
    assert (run / "results.json").is_file() and (run / "report.html").is_file()
    assert json.loads((run / "test.json").read_text())["config"]["run"]["no_check"] is True
    page = (night / "summary.html").read_text()
    assert "ALL CELLS MET: 1 of 1" in page and f"{props['run']}/report.html" in page
    assert "Nightly trends" in (store / "index.html").read_text()

    again = nightly(str(plan), "--store", str(store), "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "0 run(s) to run, 1 finished before" in again.stdout
    assert "started" not in again.stdout and "checking" not in again.stdout
    assert sorted(p.name for p in (night / "quiet.kchaos").iterdir()) == \
        sorted([run.name, "latest"])
    assert json.loads((night / "night.json").read_text())["resumed"] == 1
