"""`kchaos check-lin` and `kchaos history export` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from checker.history.formats import read_ops
from harness.cli import main

DATA = Path(__file__).parent.parent / "data" / "porcupine"
OK = str(DATA / "kv" / "c01-ok.txt")
BAD = str(DATA / "kv" / "c01-bad.txt")
EMPTY = str(DATA / "jepsen" / "etcd_095.log")


def test_all_linearizable_exits_0_and_prints_a_table(capsys):
    assert main(["check-lin", "--local", OK, str(DATA / "jepsen" / "etcd_002.log")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["file", "ops", "partitions", "verdict", "seconds"]
    assert "c01-ok.txt" in out and "valid" in out
    assert "2 file(s): 2 valid" in out


def test_a_non_linearizable_file_exits_1_with_the_stuck_op(capsys):
    assert main(["check-lin", "--local", OK, BAD]) == 1
    out = capsys.readouterr().out
    assert "INVALID" in out
    assert "cannot linearize op" in out


def test_unknown_exits_2(tmp_path, capsys):
    history = tmp_path / "many.jsonl"
    lines = []
    for i in range(16):
        lines.append({"index": len(lines), "time": 0, "type": "invoke", "process": i,
                      "f": "append", "value": ["k", f"<{i}>"]})
    for i in range(16):
        lines.append({"index": len(lines), "time": 100, "type": "ok", "process": i,
                      "f": "append", "value": ["k", f"<{i}>"]})
    lines.append({"index": len(lines), "time": 200, "type": "invoke", "process": 99,
                  "f": "get", "value": ["k", None]})
    lines.append({"index": len(lines), "time": 201, "type": "ok", "process": 99,
                  "f": "get", "value": ["k", "never"]})
    history.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code = main(["check-lin", "--local", "--budget-configurations", "500", str(history)])
    assert code == 2
    assert "memo budget exhausted" in capsys.readouterr().out


def test_input_error_exits_3_and_other_files_are_still_checked(tmp_path, capsys):
    out_json = tmp_path / "results.json"
    assert main(["check-lin", "--local", "--json", str(out_json), EMPTY, OK, BAD]) == 3
    files = json.loads(out_json.read_text())["files"]
    assert [f["valid"] for f in files] == [None, True, False]
    assert files[0]["error"].endswith("etcd_095.log:1: empty history: no operations")
    assert files[1]["error"] is None


def test_json_shape(tmp_path):
    out_json = tmp_path / "results.json"
    assert main(["check-lin", "--local", "--complete", "--json", str(out_json), BAD]) == 1
    [entry] = json.loads(out_json.read_text())["files"]
    assert {"file", "model", "ops", "partitions", "valid", "seconds", "error",
            "partition_results"} <= set(entry)
    assert entry["model"] == "kv"
    assert entry["ops"] == 38
    assert len(entry["partition_results"]) == entry["partitions"] == 8
    invalid = [p for p in entry["partition_results"] if p["valid"] is False]
    assert invalid and {"partition", "ops", "valid", "seconds", "reason"} <= set(invalid[0])
    assert invalid[0]["counterexample"]["stuck"]


def test_malformed_history_names_file_and_line(tmp_path, capsys):
    history = tmp_path / "broken.jsonl"
    history.write_text('{"index": 0, "time": 0, "type": "invoke", "process": 1, "f": "read"}\n'
                       '{"index": 1, "time": 1, "type": "ok", "process": 1, "f": "read", \n')
    assert main(["check-lin", "--local", str(history)]) == 3
    assert f"{history}:2: invalid JSON" in capsys.readouterr().out


def test_bad_arguments_are_input_errors(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["check-lin", "--model", "nonsense", OK])
    assert stop.value.code == 3
    assert "invalid choice: 'nonsense'" in capsys.readouterr().err


def test_console_script_runs_as_a_user_would():
    done = subprocess.run([str(Path(sys.executable).parent / "kchaos"), "check-lin", "--local",
                           OK], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "1 file(s): 1 valid" in done.stdout


def test_history_export_edn_round_trips(tmp_path):
    out = tmp_path / "history.edn"
    assert main(["history", "export", str(DATA / "jepsen" / "etcd_002.log"), "--edn",
                 str(out)]) == 0
    first = out.read_text().splitlines()[0]
    assert first.startswith("{") and ":type :invoke" in first and ":f :read" in first
    original = read_ops(DATA / "jepsen" / "etcd_002.log")
    exported = read_ops(out, "edn")
    assert [(o.type, o.process, o.f, o.value) for o in exported] == \
        [(o.type, o.process, o.f, o.value) for o in original]


def test_history_export_of_a_missing_file_is_an_input_error(tmp_path, capsys):
    assert main(["history", "export", str(tmp_path / "nope.jsonl"), "--edn", "-"]) == 3
    assert "nope.jsonl" in capsys.readouterr().err
