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
