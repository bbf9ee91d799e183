"""Errors reach the user as the command promises: JSON when asked for, exit 3."""

from __future__ import annotations

import json

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
