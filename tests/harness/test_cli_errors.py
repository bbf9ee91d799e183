"""Errors reach the user as the command promises: JSON when asked for, exit 3."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main


def test_cluster_status_json_with_no_cluster_is_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KCHAOS_STATE_DIR", str(tmp_path))
    assert main(["cluster", "status", "--json"]) == 3
    answer = json.loads(capsys.readouterr().out)
    assert "0 clusters recorded" in answer["error"]
    assert main(["cluster", "status"]) == 3
    assert "0 clusters recorded" in capsys.readouterr().err


def test_the_progress_line_counts_client_log_lines_instead_of_printing_them():
    from harness.progress import describe

    snapshot = {"elapsed": 3.0, "ops_per_second": 10.0, "ok": 5, "fail": 0, "info": 1,
                "faults": {}, "client_log_lines": 42}
    assert describe(snapshot, 10).endswith("client log lines 42 (clients.log)")
    assert "client log" not in describe({**snapshot, "client_log_lines": 0}, 10)


def _kchaos(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize(("args", "message"), [
    (["--time-limit", "abc"], "kchaos run: --time-limit must be a number of seconds, got 'abc'"),
    (["--time-limit", "-1"], "kchaos run: --time-limit must be > 0 seconds, got -1"),
    (["--keys", "0"], "kchaos run: --keys must be >= 1, got 0"),
    (["--concurrency", "0"], "kchaos run: --concurrency must be >= 1, got 0"),
    (["--rate", "0"], "kchaos run: --rate must be > 0, got 0"),
    (["--op-timeout", "0"], "kchaos run: --op-timeout must be > 0 seconds, got 0"),
    (["--nodes", "x"], "kchaos run: --nodes must be a whole number, got 'x'"),
    (["--nemesis", ""], "kchaos run: --nemesis is empty: name faults or groups "
                        "(e.g. partition,kill), or 'none' to ask for no faults"),
    (["--nemesis", "pause-consumers", "--time-limit", "5"],
     "kchaos run: --nemesis: the asked faults hold for at least 8 s (pause-consumers 8 s), "
     "which does not fit --time-limit 5 s; raise --time-limit above 9 s"),
    (["--tries", "0"], "kchaos shrink: --tries must be >= 1, got 0"),
    (["--max-minutes", "0"], "kchaos shrink: --max-minutes must be > 0, got 0"),
])
def test_a_bad_flag_is_named_alone_in_the_users_words(args, message):
    command = message.split(":")[0].split()[1]
    done = _kchaos(command, *(["run-folder"] if command == "shrink" else []), *args)
    assert done.returncode == 3
    assert done.stderr.splitlines() == [message]


def test_a_bad_toml_key_is_named_with_its_file(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text("rate = 0\n")
    done = _kchaos("run", "--config", str(toml))
    assert done.returncode == 3
    assert done.stderr.splitlines() == [f"kchaos run: {toml}: rate must be > 0, got 0"]


def test_an_empty_nemesis_key_is_named_with_its_file(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('nemesis = ""\n')
    done = _kchaos("run", "--config", str(toml))
    assert done.returncode == 3
    assert done.stderr.splitlines() == [
        f"kchaos run: {toml}: nemesis is empty: name faults or groups (e.g. partition,kill), "
        "or 'none' to ask for no faults"]


@pytest.mark.parametrize("command", [["run"], ["cluster", "up"], ["check-lin", "x.txt"]])
def test_an_unknown_flag_prints_the_usage_of_its_command(command):
    done = _kchaos(*command, "--bogus")
    assert done.returncode == 3
    usage = f"usage: kchaos {' '.join(c for c in command if not c.endswith('.txt'))}"
    assert done.stderr.startswith(usage)
    assert done.stderr.rstrip().endswith("error: unrecognized arguments: --bogus")


def test_a_busy_serve_port_names_the_port(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _kchaos("serve", "--store", str(tmp_path), "--port", str(port))
    assert done.returncode == 3
    [line] = done.stderr.splitlines()
    assert f"port {port}" in line and "--port" in line


def test_the_progress_line_names_faults_as_the_user_asked_in_a_few_words():
    from harness.progress import describe

    partition = {"f": "start-partition", "fault": "isolate-zookeeper",
                 "value": {"n1": ["z1", "z2"], "z1": ["n1"], "z2": ["n1"]}}
    kill = {"f": "kill", "fault": "kill-controller", "value": {"n2": "killed"}}
    snapshot = {"elapsed": 3.0, "ops_per_second": 10.0, "ok": 5, "fail": 0, "info": 1,
                "faults": {"start-partition": partition, "kill": kill}}
    assert describe(snapshot, 10).endswith("faults: isolate-zookeeper, kill-controller n2")
    coordinator = {"f": "kill", "fault": "kill-coordinator",
                   "value": {"group": "g0", "n1": "killed"}}
    assert describe({**snapshot, "faults": {"kill": coordinator}}, 10).endswith(
        "faults: kill-coordinator n1")
    old = {"f": "start-partition", "value": {"n1": ["n2"]}}
    assert describe({**snapshot, "faults": {"start-partition": old}}, 10).endswith(
        "faults: start-partition")
    instant = {"faults": {}, "instant_faults": {"stall-producer": 3, "restart": 1}}
    assert describe({**snapshot, **instant}, 10).endswith(
        "faults: none (so far restart 1, stall-producer 3)")


def test_check_of_a_history_cut_mid_line_says_so_without_starting_spark(tmp_path):
    store = tmp_path / "store"
    shutil.copytree(Path(__file__).parent.parent / "data" / "store", store, symlinks=True)
    run = (store / "queue-valid" / "latest").resolve()
    history = run / "history.jsonl"
    text = history.read_text()
    history.write_text(text[:len(text) // 2])
    done = _kchaos("check", str(run))
    assert done.returncode == 3, done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"kchaos: {history}:") and "removed" in first
    assert "checked" not in done.stdout and "VALID" not in done.stdout
    assert not (run / "spark.log").exists() and "Spark" not in done.stderr
