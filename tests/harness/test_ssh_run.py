"""A complete chaos run on the ssh backend: 3 brokers and 1 ZooKeeper on sshd hosts in
network namespaces, partition and kill faults, the safe configuration, checked valid.

The hosts share this filesystem, so the inventory's `python` reuses this venv. Runs
`kchaos run --backend ssh --inventory` as a user would. Needs root."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.control.ssh import ssh_runs
from tests.support.ssh_hosts import SshHosts, require_sshd

pytestmark = [pytest.mark.cluster, pytest.mark.long]

KCHAOS = str(Path(sys.executable).parent / "kchaos")


@pytest.fixture
def inventory(tmp_path):
    require_sshd()
    with SshHosts(["n1", "n2", "n3", "z1"], tmp_path / "sshd") as hosts:
        yield hosts.inventory(tmp_path / "hosts.toml", python=sys.executable,
                              dir=str(tmp_path / "opt"))
        assert not list((tmp_path / "opt").glob("*/runs/*"))
    assert hosts.leftovers() == []


def test_safe_run_with_partition_and_kill_faults_is_valid(inventory, tmp_path, monkeypatch):
    store = tmp_path / "store"
    monkeypatch.setenv("KCHAOS_STATE_DIR", str(tmp_path / "state"))
    done = subprocess.run(
        [KCHAOS, "run", "--store", str(store), "--backend", "ssh", "--inventory",
         str(inventory), "--time-limit", "20", "--nemesis", "partition,kill",
         "--nemesis-interval", "4", "--seed", "5", "--nodes", "3", "--zookeepers", "1"],
        capture_output=True, text=True, timeout=380)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = (store / "latest").resolve()
    assert json.loads((run / "results.json").read_text())["valid"] is True
    assert (run / "nodes" / "n1" / "server.log").is_file()
    assert (run / "nodes" / "z1" / "zookeeper.log").is_file()
    ops = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    faults = {op["f"] for op in ops if op["process"] == "nemesis" and op["value"] is not None}
    assert faults & {"start-partition", "kill"}, "no fault was injected"
    assert sum(1 for op in ops if op["type"] == "ok" and op["f"] == "send") > 100
    assert ssh_runs(tmp_path / "state", include_owned=True) == []
