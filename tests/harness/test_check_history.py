"""`kchaos check-history`: a bare history file, ours or Jepsen's, checked as a user would."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harness import exit_codes
from harness.cli import main

DATA = Path(__file__).parent.parent / "data" / "queue"


def test_a_valid_history_is_valid_in_process(tmp_path, capsys):
    out = tmp_path / "results.json"
    assert main(["check-history", str(DATA / "ok.jsonl"), "--local", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "kchaos: VALID" in printed
    results = json.loads(out.read_text())
    assert results["valid"] is True
    assert set(results["checkers"]) == {"queue", "acks", "availability", "stats", "faults"}
    assert results["state"] == "valid"


def test_a_lost_write_fails_the_safe_contract_and_is_allowed_with_acks_1(tmp_path, capsys):
    lost = str(DATA / "lost-write-bad.jsonl")
    assert main(["check-history", lost, "--local"]) == exit_codes.INVALID
    assert "lost-write" in capsys.readouterr().out
    out = tmp_path / "results.json"
    assert main(["check-history", lost, "--local", "--acks", "1", "--json", str(out)]) == 0
    queue = json.loads(out.read_text())["checkers"]["queue"]
    assert "lost-write" in queue["anomalies"] and "lost-write" in queue["allowed"]


def test_the_broker_configuration_changes_the_contract(capsys):
    lost = str(DATA / "lost-write-bad.jsonl")
    assert main(["check-history", lost, "--local", "--broker-config",
                 "unclean.leader.election.enable=true"]) == exit_codes.VALID


def test_jepsen_edn_gives_the_same_verdicts_as_our_jsonl(tmp_path, capsys):
    for name in ("ok.jsonl", "duplicate-bad.jsonl", "poll-skip-bad.jsonl"):
        edn = tmp_path / name.replace(".jsonl", ".edn")
        assert main(["history", "export", str(DATA / name), "--edn", str(edn)]) == 0
        ours = main(["check-history", str(DATA / name), "--local"])
        jepsens = main(["check-history", str(edn), "--local"])
        assert ours == jepsens, name
        assert jepsens == (0 if name == "ok.jsonl" else 1), name


@pytest.mark.parametrize(("args", "message"), [
    (["--checker", "queue,meteor"], "unknown checker meteor"),
    (["--broker-config", "novalue"], "--broker-config: expected KEY=VALUE"),
    (["--acks", "2"], "acks must be one of 0, 1, all"),
])
def test_bad_options_exit_3_with_the_reason(args, message, capsys):
    assert main(["check-history", str(DATA / "ok.jsonl"), "--local", *args]) == exit_codes.ERROR
    assert message in capsys.readouterr().err


def test_a_malformed_history_names_the_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    lines = (DATA / "ok.jsonl").read_text().splitlines()
    bad.write_text("\n".join(lines[:3] + ['{"index": 3, "time": 1, "type": "weird"}']) + "\n")
    assert main(["check-history", str(bad), "--local"]) == exit_codes.ERROR
    assert f"{bad}:4" in capsys.readouterr().err
    missing = tmp_path / "nope.jsonl"
    assert main(["check-history", str(missing), "--local"]) == exit_codes.ERROR


@pytest.mark.spark
def test_on_spark_the_verdict_is_the_same(spark, tmp_path, capsys):
    out = tmp_path / "results.json"
    for name, code in (("ok.jsonl", 0), ("lost-write-bad.jsonl", 1)):
        assert main(["check-history", str(DATA / name), "--spark-master", "local[2]",
                     "--json", str(out)]) == code, name
    assert json.loads(out.read_text())["valid"] is False
    edn = tmp_path / "lost.edn"
    main(["history", "export", str(DATA / "lost-write-bad.jsonl"), "--edn", str(edn)])
    assert main(["check-history", str(edn), "--spark-master", "local[2]"]) == 1


def _kchaos(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize(("content", "what"), [
    (b'[{"index": 0, "time": 1, "type": "invoke", "process": 0, "f": "poll"}]\n',
     "a JSON array"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "a binary file"),
    (b"", "empty file"),
    (b"\n\n", "empty file"),
    (None, "no such file"),
])
def test_a_bad_input_is_one_line_naming_file_fault_and_format(tmp_path, content, what):
    history = tmp_path / "history.jsonl"
    if content is not None:
        history.write_bytes(content)
    done = _kchaos("check-history", str(history), "--local")
    assert done.returncode == exit_codes.ERROR
    [line] = done.stderr.splitlines()
    assert line.startswith(f"kchaos check-history: {history}: {what}")
    assert "expected a queue history: JSONL" in line
    assert done.stdout == ""


def test_a_history_cut_mid_line_says_nothing_of_success(tmp_path):
    cut = tmp_path / "cut.jsonl"
    cut.write_text((DATA / "ok.jsonl").read_text()[:300])
    done = _kchaos("check-history", str(cut))
    assert done.returncode == exit_codes.ERROR
    [line] = done.stderr.splitlines()
    assert line.startswith(f"kchaos check-history: {cut}:") and "expected" in line
    assert done.stdout == ""


def test_the_default_checkers_follow_what_the_history_holds(tmp_path, capsys):
    from checker.history import write_jsonl
    from tests.support.queue_histories import inject_txn, simulate_txns

    b = simulate_txns(3, 20)
    inject_txn(b, "G1c")
    history = tmp_path / "txn.jsonl"
    write_jsonl(b.ops, history)
    out = tmp_path / "results.json"
    assert main(["check-history", str(history), "--local", "--json", str(out)]) == 1
    results = json.loads(out.read_text())
    assert "txn" in results["checkers"]
    assert "G1c" in results["checkers"]["txn"]["anomalies"]
    assert main(["check-history", str(DATA / "ok.jsonl"), "--local", "--json", str(out)]) == 0
    assert "txn" not in json.loads(out.read_text())["checkers"]


def test_three_failed_sends_and_an_empty_poll_are_not_valid(tmp_path, capsys):
    out = tmp_path / "results.json"
    history = DATA.parent / "anomalies" / "never-succeeded.jsonl"
    assert main(["check-history", str(history), "--local", "--json", str(out)]) == \
        exit_codes.INVALID
    printed = capsys.readouterr().out
    assert "kchaos: INVALID" in printed and "(poll 1/1 ok, send 0/3 ok)" in printed
    checkers = json.loads(out.read_text())["checkers"]
    assert checkers["stats"]["valid"] is False
    assert checkers["stats"]["stats"]["never-succeeded"] == ["send"]
    assert set(checkers["queue"]["anomalies"]) == {"empty-history"}


def test_too_little_to_judge_is_unknown(tmp_path, capsys):
    history = tmp_path / "history.jsonl"
    history.write_text("\n".join(json.dumps(op) for op in [
        {"index": 0, "time": 1, "type": "invoke", "process": 0, "f": "send",
         "value": [["send", 0, 1]]},
        {"index": 1, "time": 2, "type": "ok", "process": 0, "f": "send",
         "value": [["send", 0, [0, 1]]]},
        {"index": 2, "time": 3, "type": "invoke", "process": 1, "f": "assign", "value": [0]},
        {"index": 3, "time": 4, "type": "info", "process": 1, "f": "assign", "value": [0],
         "error": "timed out"},
        {"index": 4, "time": 5, "type": "invoke", "process": 2, "f": "poll", "value": [["poll"]]},
        {"index": 5, "time": 6, "type": "ok", "process": 2, "f": "poll",
         "value": [["poll", {"0": [[0, 1]]}]]}]) + "\n")
    assert main(["check-history", str(history), "--local"]) == exit_codes.UNKNOWN
    assert "UNKNOWN: stats (too little to judge: assign invoked 1x, never ok" in \
        capsys.readouterr().out


def test_the_default_checkers_leave_out_groups_and_transfer_without_groups_or_transfers(
        tmp_path, capsys):
    out = tmp_path / "results.json"
    subscribed = DATA.parent / "anomalies" / "commit-rewind.jsonl"
    main(["check-history", str(DATA / "ok.jsonl"), str(subscribed), "--local", "--json",
          str(out)])
    assigned, grouped = json.loads(out.read_text())["files"]
    assert set(assigned["checkers"]) == {"queue", "acks", "availability", "stats", "faults"}
    assert set(grouped["checkers"]) == {"queue", "acks", "availability", "stats", "groups"}
    assert main(["check-history", str(DATA / "ok.jsonl"), "--workload", "transfer", "--local",
                 "--json", str(out)]) == 0
    assert "transfer" not in json.loads(out.read_text())["checkers"]


@pytest.mark.spark
@pytest.mark.parametrize(("command", "history"), [
    ("check-history", DATA / "ok.jsonl"),
    ("check-lin", DATA.parent / "history" / "knossos-cas.edn"),
])
def test_on_spark_the_terminal_shows_no_spark_start_up_lines(command, history):
    before = set(Path(tempfile.gettempdir()).glob("kchaos-spark-*.log"))
    done = _kchaos(command, str(history), "--spark-master", "local[1]")
    assert done.returncode == 0, done.stderr
    for line in ("Using Spark's default log4j profile", "NativeCodeLoader",
                 "WARNING: Using incubator modules", "Setting default log level"):
        assert line not in done.stdout + done.stderr, line
    assert set(Path(tempfile.gettempdir()).glob("kchaos-spark-*.log")) == before


def test_a_history_whose_faults_never_took_effect_is_inconclusive(tmp_path, capsys):
    """The faults checker joins the defaults when the history has nemesis ops; a run whose
    every fault found nothing to act on exits 4, with "state" in the JSON."""
    clients = [op for op in map(json.loads, (DATA / "ok.jsonl").read_text().splitlines())
               if op["process"] != "nemesis"]
    nemesis = [{"type": "info", "process": "nemesis", "f": "kill", "value": value,
                "fault": "kill-coordinator", "time": clients[-1]["time"] + 1}
               for value in ("coordinator", "no-target")]
    ops = [{**op, "index": index} for index, op in enumerate(clients + nemesis)]
    history = tmp_path / "no-target.jsonl"
    history.write_text("".join(json.dumps(op) + "\n" for op in ops))
    out = tmp_path / "results.json"
    assert main(["check-history", str(history), "--local", "--json", str(out)]) == \
        exit_codes.INCONCLUSIVE == 4
    assert "kchaos: INCONCLUSIVE" in capsys.readouterr().out
    results = json.loads(out.read_text())
    assert results["valid"] is True and results["state"] == "inconclusive"
    assert results["checkers"]["faults"]["stats"] == {
        "asked": ["kill-coordinator"], "invoked": {"kill-coordinator": 1},
        "took_effect": {"kill-coordinator": 0}, "never": ["kill-coordinator"]}
