"""Transactions that abort (fail) or end unknown (info), as the --txn queue workload
records them: the queue and txn checkers on each valid history and its invalid near miss,
at read_committed and read_uncommitted."""

from __future__ import annotations

from checker.allowed import because
from checker.queue.analysis import QueueChecker
from checker.txn.checker import TxnChecker
from tests.support.queue_histories import Builder

COMMITTED = {"acks": "all", "idempotence": True, "broker_config": {"min.insync.replicas": 2},
             "txn": True, "isolation_level": "read_committed"}
UNCOMMITTED = {**COMMITTED, "isolation_level": "read_uncommitted"}


def queue(b: Builder, test=COMMITTED):
    return QueueChecker().check(test, b.ops, {})


def txn(b: Builder, test=COMMITTED):
    return TxnChecker().check(test, b.ops, {})


def rereads_after_abort(aborted: str = "fail") -> Builder:
    """p polls x to offset 0 in an ok txn, polls offset 1 in an aborted one (its consumer
    then seeks back), and polls offset 1 again in the next ok txn."""
    b = Builder()
    b.sends("w", [("x", 1, 0)])
    b.sends("w", [("x", 2, 1)])
    b.op("p", "txn", [["poll"]], "ok", [["poll", {"x": [[0, 1]]}]])
    b.op("p", "txn", [["poll"], ["send", "y", 9]], aborted,
         [["poll", {"x": [[1, 2]]}], ["send", "y", [0, 9]]], abort=True)
    b.op("p", "txn", [["poll"]], "ok", [["poll", {"x": [[1, 2]]}]])
    b.poll("r", {"x": [(0, 1), (1, 2)]})
    return b


def test_an_aborted_transactions_polls_do_not_move_its_consumer():
    result = queue(rereads_after_abort())
    assert result.valid is True and result.anomalies == {}
    assert txn(rereads_after_abort()).anomalies == {}


def test_the_same_reread_after_a_committed_transaction_is_nonmonotonic():
    result = queue(rereads_after_abort("ok"))
    assert set(result.anomalies) == {"nonmonotonic-poll", "unseen"}
    assert result.valid is False


def test_an_aborted_send_is_never_committed_and_its_offset_leaves_no_gap():
    b = Builder()
    b.op("p", "txn", [["send", "x", 1]], "fail", [["send", "x", [0, 1]]], abort=True)
    b.sends("q", [("x", 2, 2)])
    b.poll("r", {"x": [(2, 2)]})
    b.op("p", "txn", [["send", "x", 3]], "fail", [["send", "x", [3, 3]]], abort=True)
    b.sends("q", [("x", 4, 5)])
    b.poll("r", {"x": [(5, 4)]})
    result = queue(b)
    assert result.valid is True and result.anomalies == {}
    assert result.stats["lost-writes"] == []


def aborted_then_read(test=COMMITTED):
    b = Builder()
    b.send("w", "y", 9, 0)
    b.op("p", "txn", [["send", "x", 1]], "fail", [["send", "x", [0, 1]]], abort=True)
    b.poll("r", {"x": [(0, 1)], "y": [(0, 9)]})
    return queue(b, test)


def test_reading_an_aborted_send_is_g1a_unless_reads_are_uncommitted():
    result = aborted_then_read()
    assert result.valid is False and set(result.anomalies) == {"G1a"}
    allowed = aborted_then_read(UNCOMMITTED)
    assert allowed.valid is True and allowed.allowed == ["G1a"]
    assert allowed.stats["allowed-because"] == {"G1a": because("G1a")}


def test_an_aborted_transaction_reading_its_own_send_is_precommitted():
    b = Builder()
    b.send("w", "y", 9, 0)
    b.op("p", "txn", [["send", "x", 1], ["poll"]], "fail",
         [["send", "x", [0, 1]], ["poll", {"x": [[0, 1]]}]], abort=True)
    b.poll("r", {"y": [(0, 9)]})
    assert set(queue(b).anomalies) == {"precommitted-read"} and queue(b).valid is False
    assert queue(b, UNCOMMITTED).valid is True


def unknown_transaction_read_in_part() -> Builder:
    """An info txn sent x:1 and y:2; a poll read x:1 only, then later offsets of y."""
    b = Builder()
    b.op("t", "txn", [["send", "x", 1], ["send", "y", 2]], "info",
         [["send", "x", [0, 1]], ["send", "y", [0, 2]]])
    b.sends("q", [("y", 3, 1)])
    b.poll("r", {"x": [(0, 1)], "y": [(1, 3)]})
    return b


def test_a_partly_read_unknown_transaction_lost_a_write_only_at_read_committed():
    lost = queue(unknown_transaction_read_in_part())
    assert lost.valid is False and set(lost.anomalies) == {"lost-write"}
    [witness] = lost.anomalies["lost-write"].examples
    assert (witness["key"], witness["value"]) == ("y", 2)
    uncommitted = queue(unknown_transaction_read_in_part(), UNCOMMITTED)
    assert uncommitted.valid is True and uncommitted.anomalies == {}


def mutual_reads(kind: str) -> Builder:
    """t1 and t2 each read the other's send; t2 ended `kind`."""
    b = Builder()
    b.invoke("t1", "txn", [["send", "x", 1], ["poll"]])
    b.invoke("t2", "txn", [["send", "y", 2], ["poll"]])
    b.complete("t1", "txn", "ok", [["send", "x", [0, 1]], ["poll", {"y": [[0, 2]]}]])
    b.complete("t2", "txn", kind, [["send", "y", [0, 2]], ["poll", {"x": [[0, 1]]}]])
    b.poll("r", {"x": [(0, 1)]})
    return b


def test_a_failed_transaction_is_on_no_dependency_cycle():
    assert "G1c" in txn(mutual_reads("ok")).anomalies
    result = txn(mutual_reads("fail"))
    assert result.anomalies == {} and result.stats["graph-edges"] == 0
    assert set(queue(mutual_reads("fail")).anomalies) == {"G1a"}


def test_a_cycle_of_reads_is_g1c_at_read_committed_and_allowed_at_read_uncommitted():
    assert txn(mutual_reads("ok")).valid is False
    uncommitted = txn(mutual_reads("ok"), UNCOMMITTED)
    assert uncommitted.valid is True and uncommitted.allowed == ["G1c"]
