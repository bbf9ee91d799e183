"""The acks checker: counts per acks level and the verdict against each level's promise."""

from __future__ import annotations

from checker.core import Memo, compose
from checker.queue.acks import AcksChecker
from checker.queue.analysis import QueueChecker, analyse
from tests.support.queue_histories import Builder

SAFE = {"acks": "all", "broker_config": {"min.insync.replicas": "2",
                                         "unclean.leader.election.enable": "false"}}


def lossy(acks=None) -> Builder:
    """One acknowledged send lost below a read offset, one failed, one unknown."""
    b = Builder()
    extra = {} if acks is None else {"acks": acks}
    b.send(0, 1, 10, 0, **extra)
    b.send(0, 1, 11, 1, **extra)
    b.send(1, 1, 12, kind="fail", **extra)
    b.send(2, 1, 13, kind="info", **extra)
    b.poll(5, {1: [(1, 11)]})
    return b


def test_counts_per_level():
    result = AcksChecker().check(SAFE, lossy().ops, {})
    level = result.stats["levels"]["all"]
    assert {k: level[k] for k in ("attempted", "acknowledged", "failed", "unknown", "lost",
                                  "lost-acknowledged", "duplicated")} == {
        "attempted": 4, "acknowledged": 2, "failed": 1, "unknown": 1, "lost": 1,
        "lost-acknowledged": 1, "duplicated": 0}


def test_acknowledged_loss_fails_when_the_configuration_promises_none():
    result = AcksChecker().check(SAFE, lossy().ops, {})
    assert result.valid is False
    assert result.stats["levels"]["all"]["verdict"] == "failed"
    [witness] = result.anomalies["lost-acknowledged"].examples
    assert witness["value"] == 10 and witness["acks"] == "all"


def test_loss_under_acks_1_is_allowed_by_configuration():
    result = AcksChecker().check(SAFE, lossy(acks=1).ops, {})
    assert result.valid is True
    assert result.allowed == ["lost-allowed-by-configuration"]
    assert result.stats["levels"]["1"]["verdict"] == "allowed by configuration"


def test_loss_under_min_insync_1_or_unclean_is_allowed():
    for config in ({"min.insync.replicas": 1}, {"min.insync.replicas": 2,
                                                "unclean.leader.election.enable": True}):
        assert AcksChecker().check({"acks": -1, "broker_config": config},
                                   lossy().ops, {}).valid is True


def test_mixed_levels_are_judged_separately():
    b = lossy(acks=0)
    b.send(3, 2, 20, 0, acks="all")
    b.send(3, 2, 21, 1, acks="all")
    b.poll(6, {2: [(0, 20), (1, 21)]})
    b.send(3, 2, 22, 2, acks="all")
    b.send(3, 2, 23, 3, acks="all")
    b.poll(7, {2: [(3, 23)]})
    result = AcksChecker().check(SAFE, b.ops, {})
    assert result.valid is False
    assert result.stats["levels"]["0"]["verdict"] == "allowed by configuration"
    assert result.stats["levels"]["all"]["lost-acknowledged"] == 1


def test_no_loss_is_valid_and_duplicates_are_counted():
    b = Builder()
    b.send(0, 1, 10, 0)
    b.poll(5, {1: [(0, 10), (1, 10)]})
    result = AcksChecker().check(SAFE, b.ops, {})
    assert result.valid is True
    assert result.stats["levels"]["all"]["duplicated"] == 1


def test_a_shared_analysis_serves_several_checkers():
    memo = Memo()
    memo.get("queue-analysis", lambda: analyse(lossy().ops))
    result = compose({"queue": QueueChecker(), "acks": AcksChecker()}).check(
        SAFE, [], {"memo": memo})
    assert result.checkers["acks"].anomalies["lost-acknowledged"].count == 1
    assert result.checkers["queue"].anomalies["lost-write"].count == 1
