"""Each allowed anomaly type has its own reason, and the docs list the same words."""

from __future__ import annotations

from pathlib import Path

from checker.allowed import ALLOWED_BECAUSE, because
from checker.txn.checker import TxnChecker
from tests.support.queue_histories import Builder

DOCS = Path(__file__).parents[2] / "docs" / "anomalies.md"


def test_the_docs_table_gives_every_type_its_reason_word_for_word():
    text = DOCS.read_text(encoding="utf-8")
    for kind, reason in ALLOWED_BECAUSE.items():
        assert f"| {kind} | {reason} |" in text, kind


def test_a_type_allowed_for_another_types_reason_says_so_with_its_settings():
    assert because("poll-skip", "acks=1", cause="lost-write") == (
        f"{ALLOWED_BECAUSE['lost-write']} (acks=1)")


def test_the_txn_checker_gives_each_allowed_cycle_its_own_reason():
    b = Builder()
    b.sends(2, [("x", 2001, 0), ("y", 2001, 1)])
    b.sends(3, [("x", 2002, 1), ("y", 2002, 0)])
    b.poll(9, {"x": [(0, 2001), (1, 2002)], "y": [(0, 2002), (1, 2001)]})
    result = TxnChecker().check({}, b.ops, {})
    assert result.valid is True and result.allowed == ["G0"]
    assert result.stats["allowed-because"] == {"G0": because("G0")}
    uncommitted = TxnChecker().check({"isolation_level": "read_uncommitted"}, b.ops, {})
    assert uncommitted.stats["allowed-because"] == {"G0": because("G0")}
