"""The registry's declared anomaly types: each checker names what it can report, and the
anomaly reference (docs/anomalies.md) documents exactly those types."""

from __future__ import annotations

import re
from pathlib import Path

from checker.registry import CHECKERS, anomaly_types

DOCS = Path(__file__).resolve().parents[2] / "docs" / "anomalies.md"


def test_every_checker_declares_its_anomaly_types():
    for name, checker in CHECKERS.items():
        assert isinstance(checker.anomaly_types, tuple), name
    found = anomaly_types()
    assert found["lost-write"] == ("queue",)
    assert found["unclean-election-loss"] == ("elections",)
    assert "G1c" in found and "commit-rewind" in found and "nonlinearizable" in found


def test_the_anomaly_reference_documents_exactly_the_declared_types():
    documented = set(re.findall(r"^### (\S+)$", DOCS.read_text(encoding="utf-8"), re.M))
    assert documented == set(anomaly_types())
