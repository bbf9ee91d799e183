"""Each allowed anomaly type has its own reason, and the docs list the same words."""

from __future__ import annotations

from pathlib import Path

import pytest

from checker.allowed import ALLOWED_BECAUSE, ALLOWED_BECAUSE_IN_MODE, because
from checker.modes import KRAFT, KRAFT_ELR, ZOOKEEPER
from checker.queue.acks import AcksChecker
from checker.queue.analysis import QueueChecker
from checker.txn.checker import TxnChecker
from tests.support.queue_histories import Builder

DOCS = Path(__file__).parents[2] / "docs" / "anomalies.md"


def test_the_docs_table_gives_every_type_its_reason_word_for_word():
    text = DOCS.read_text(encoding="utf-8")
    for kind, reason in ALLOWED_BECAUSE.items():
        assert f"| {kind} | {reason} |" in text, kind
    for mode, reasons in ALLOWED_BECAUSE_IN_MODE.items():
        for kind, reason in reasons.items():
            assert f"| {kind} ({mode.title}) | {reason} |" in text, (mode.name, kind)


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


def test_an_unclean_election_is_explained_in_the_words_of_the_mode_that_changes_it():
    elr = because("unclean-election-loss", mode=KRAFT_ELR)
    assert elr.startswith("an election takes a live ISR member, else an eligible leader replica")
    assert "only when none of these can" in elr
    assert elr.endswith("(KRaft with eligible leader replicas)")
    for mode in (ZOOKEEPER, KRAFT, None):
        assert because("unclean-election-loss", mode=mode) == (
            ALLOWED_BECAUSE["unclean-election-loss"])


def test_a_mode_changes_only_the_reasons_its_elections_change():
    assert because("lost-write", "acks=1", mode=KRAFT_ELR) == because("lost-write", "acks=1")
    assert because("G0", mode=KRAFT_ELR) == because("G0")


def lost_write() -> list:
    b = Builder()
    b.send("p", "x", 1, offset=0)
    b.send("p", "x", 2, offset=1)
    b.poll("q", {"x": [[1, 2]]})
    return b.ops


def kafka(version: str, acks: str, min_isr: int, unclean: bool) -> dict:
    """A test map of Kafka `version` in its default metadata mode."""
    return {"db": "kafka", "config": {"db": {"kafka_version": version, "metadata": None}},
            "acks": acks, "broker_config": {"min.insync.replicas": str(min_isr),
                                            "unclean.leader.election.enable": str(unclean)}}


@pytest.mark.parametrize("version", ["3.9.1", "4.0.0", "4.1.1"])
def test_acks_1_loss_is_allowed_for_the_same_reason_in_every_mode(version):
    test = kafka(version, "1", 2, False)
    queue = QueueChecker().check(test, lost_write(), {})
    acks = AcksChecker().check(test, lost_write(), {})
    assert queue.valid is True and acks.valid is True
    assert queue.stats["allowed-because"]["lost-write"] == because("lost-write", "acks=1")
    assert acks.stats["allowed-because"] == {
        "lost-allowed-by-configuration": because("lost-write", "acks=1")}


@pytest.mark.parametrize("version", ["3.9.1", "4.0.0", "4.1.1"])
def test_a_loss_is_never_allowed_at_acks_all_min_insync_2_unclean_off(version):
    test = kafka(version, "all", 2, False)
    assert QueueChecker().check(test, lost_write(), {}).valid is False
    assert AcksChecker().check(test, lost_write(), {}).valid is False


def test_a_loss_unclean_elections_alone_allow_is_theirs_named_by_mode_where_it_matters():
    zookeeper, kraft, elr = (QueueChecker().check(kafka(v, "all", 2, True), lost_write(), {})
                             for v in ("3.9.1", "4.0.0", "4.1.1"))
    assert zookeeper.stats["allowed-because"]["lost-write"] == ALLOWED_BECAUSE[
        "unclean-election-loss"]
    assert kraft.stats["allowed-because"] == zookeeper.stats["allowed-because"]
    assert elr.stats["allowed-because"]["lost-write"] == because(
        "lost-write", cause="unclean-election-loss", mode=KRAFT_ELR)
    assert "eligible leader replica" in elr.stats["allowed-because"]["lost-write"]
    acks = AcksChecker().check(kafka("4.1.1", "all", 2, True), lost_write(), {})
    assert acks.stats["allowed-because"]["lost-allowed-by-configuration"] == (
        elr.stats["allowed-because"]["lost-write"])
    assert acks.stats["config"]["metadata-mode"] == "kraft-elr"
