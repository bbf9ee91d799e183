"""What the docs show is what the commands do: each history of tests/data/anomalies shows
the anomaly type it is named after (docs/anomalies.md quotes its witness), and every
`kchaos run --config` file of examples/ builds a test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.config import load_config
from harness.test import build_test

ROOT = Path(__file__).resolve().parent.parent.parent
ANOMALIES = ROOT / "tests" / "data" / "anomalies"
GROUP_TYPES = {"split-assignment", "orphaned-partition", "commit-skip", "commit-rewind",
               "resume-skip", "resume-rewind", "undelivered", "double-delivery"}
TXN_TYPES = {"G0", "G1b", "G1c", "G-single", "G2", "precommitted-read", "int-send-skip",
             "int-nonmonotonic-send"}


def flags_for(kind: str) -> list[str]:
    """The flags docs/anomalies.md gives for a history showing `kind`."""
    if kind.startswith("eos-"):
        return ["--workload", "transfer"]
    if kind in GROUP_TYPES:
        return ["--checker", "groups"]
    if kind in TXN_TYPES:
        return ["--checker", "queue,txn"]
    return []


@pytest.mark.parametrize("history", sorted(ANOMALIES.glob("*.jsonl")), ids=lambda p: p.stem)
def test_each_example_history_shows_the_anomaly_it_is_named_after(history, tmp_path, capsys):
    kind = history.stem.removesuffix("-truncated").removesuffix("-past-end")
    out = tmp_path / "results.json"
    main(["check-history", str(history), "--local", "--json", str(out), *flags_for(kind)])
    capsys.readouterr()
    results = json.loads(out.read_text())
    found = {name for checker in results["checkers"].values()
             for name in checker.get("anomalies") or {}}
    assert kind in found, (history.name, sorted(found))


@pytest.mark.parametrize("config", sorted((ROOT / "examples").glob("*.toml")),
                         ids=lambda p: p.name)
def test_each_example_config_builds_a_test(config):
    test = build_test(load_config(config, {}))
    assert test.name == config.stem
