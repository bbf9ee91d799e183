"""The dependency graph of transactions: each cycle anomaly with its witness (rw edges
only where the reader surely polled before the write), none in valid transactional
histories, Tarjan without recursion, and the same answer on Spark."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checker.queue.analysis import QueueChecker, analyse
from checker.registry import composed
from checker.spark import check_history_on_spark
from checker.txn.checker import TxnChecker, strongly_connected
from tests.support.queue_histories import (
    TXN_INJECTIONS,
    Builder,
    inject_txn,
    simulate_txns,
)

SAFE = {"acks": "all", "broker_config": {"min.insync.replicas": 2}}


def txn(b: Builder):
    return TxnChecker().check(SAFE, b.ops, {})


def test_tarjan_finds_components_of_a_long_cycle_without_recursion():
    size = 200_000
    cycle = {v: [(v + 1) % size] for v in range(size)}
    cycle[size] = [0]  # a tail into the cycle is not part of it
    [component] = strongly_connected(cycle)
    assert sorted(component) == list(range(size))
    assert strongly_connected({0: [1], 1: [2], 2: []}) == []


def test_g0_witness_explains_each_step():
    b = Builder()
    inject_txn(b, "G0")
    result = txn(b)
    [witness] = result.anomalies["G0"].examples
    assert len(witness["cycle"]) == 3 and witness["cycle"][0] == witness["cycle"][-1]
    assert {s["type"] for s in witness["steps"]} == {"ww"}
    first = witness["steps"][0]
    assert first["why"] == (f"op {first['from']} sent 2001 to key 'tx' at offset 0, before op "
                            f"{first['to']} sent 2002 at offset 1")
    json.dumps(result.to_json())


def test_a_cycle_through_ops_that_only_send_to_one_key_is_contracted_and_explained():
    b = Builder()
    b.invoke("t1", "txn", [["send", "x", 1], ["poll"]])
    t1 = b.complete("t1", "txn", "ok", [["send", "x", [0, 1]], ["poll", {"y": [[0, 9]]}]])
    plain = b.send("s", "x", 2, 1)
    t2 = b.op("t2", "txn", [["poll"], ["send", "y", 9]], "ok",
              [["poll", {"x": [[1, 2]]}], ["send", "y", [0, 9]]])
    b.poll("r", {"x": [(0, 1), (1, 2)]})
    result = txn(b)
    [witness] = result.anomalies["G1c"].examples
    assert witness["cycle"] == [t1, t2, t1]
    through, back = witness["steps"]
    assert (through["type"], through["previous-value"], through["value"]) == ("ww+wr", 1, 2)
    assert through["why"] == (f"op {t1} sent 1 to key 'x' at offset 0, before the send of 2 "
                              f"at offset 1 that op {t2} polled")
    assert back["type"] == "wr"
    assert result.valid is True  # the cycle needs a ww edge: allowed, as Jepsen's ww-deps
    assert plain not in witness["ops"]


def test_an_info_transaction_proven_by_another_key_joins_the_graph():
    b = Builder()
    b.invoke("t1", "txn", [["send", "x", 1], ["send", "z", 5], ["poll"]])
    b.invoke("t2", "txn", [["send", "y", 2], ["poll"]])
    t1 = b.complete("t1", "txn", "info", [["send", "x", [0, 1]], ["send", "z", [0, 5]],
                                          ["poll", {"y": [[0, 2]]}]])
    t2 = b.complete("t2", "txn", "ok", [["send", "y", [0, 2]], ["poll", {"x": [[0, 1]]}]])
    assert [w["cycle"] for w in txn(b).anomalies["G1c"].examples] == [[t1, t2, t1]]


def test_g1b_is_reported_and_allowed():
    b = Builder()
    inject_txn(b, "G1b")
    result = txn(b)
    [witness] = result.anomalies["G1b"].examples
    assert (witness["value"], witness["next-value"], witness["next-offset"]) == (2001, 2002, 1)
    assert result.valid is True and result.allowed == ["G1b"]


@pytest.mark.parametrize("kind", TXN_INJECTIONS)
def test_each_injected_transactional_anomaly_is_found(kind):
    b = simulate_txns(3, 40)
    inject_txn(b, kind)
    found = set(txn(b).anomalies) | set(analyse(b.ops).anomalies)
    assert kind in found


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 80))
def test_valid_transactional_histories_have_no_cycles(seed, steps):
    b = simulate_txns(seed, steps)
    result = txn(b)
    assert set(result.anomalies) <= {"G1b"}
    assert result.valid is True
    acknowledged = any(op.type == "ok" and op.f in ("send", "txn") and any(
        micro[0] == "send" for micro in op.value) for op in b.ops)
    assert set(QueueChecker().check(SAFE, b.ops, {}).anomalies) == (
        set() if acknowledged else {"empty-history"})


def read_skew(b: Builder, overlapping: bool = False) -> tuple[int, int]:
    """t1 polls key x before t2's send there and key y after t2's send there; t2 begins
    after t1 completed, or (`overlapping`) before. Returns (t1, t2)."""
    b.send("w", "x", 1, 0)
    if overlapping:
        b.invoke("t2", "txn", [["send", "x", 2], ["send", "y", 20]])
    b.invoke("t1", "txn", [["poll"], ["poll"]])
    t1 = b.complete("t1", "txn", "ok", [["poll", {"x": [[0, 1]]}], ["poll", {"y": [[0, 20]]}]])
    if not overlapping:
        b.invoke("t2", "txn", [["send", "x", 2], ["send", "y", 20]])
    t2 = b.complete("t2", "txn", "ok", [["send", "x", [1, 2]], ["send", "y", [0, 20]]])
    b.poll("r", {"x": [(0, 1), (1, 2)], "y": [(0, 20)]})
    return t1, t2


def test_read_skew_is_g_single_with_its_cycle_explained():
    b = Builder()
    t1, t2 = read_skew(b)
    result = txn(b)
    [witness] = result.anomalies["G-single"].examples
    assert witness["cycle"] == [t1, t2, t1]
    rw, wr = witness["steps"]
    assert (rw["type"], wr["type"]) == ("rw", "wr")
    assert rw["why"] == (f"op {t1} polled key 'x' up to 1 at offset 0 and completed before "
                         f"op {t2} began, which sent 2 at offset 1, the key's next committed "
                         f"record")
    assert wr["why"] == f"op {t1} polled value 20 of key 'y' that op {t2} sent"
    assert result.valid is False
    uncommitted = TxnChecker().check({**SAFE, "isolation_level": "read_uncommitted"}, b.ops, {})
    assert uncommitted.valid is True and uncommitted.allowed == ["G-single"]


def test_a_transaction_that_may_have_polled_after_the_write_committed_has_no_rw_edge():
    b = Builder()
    read_skew(b, overlapping=True)  # t1's consumer may just not have reached t2's record
    result = txn(b)
    assert result.stats["rw-edges"] == 0
    assert result.anomalies == {} and result.valid is True


def test_two_rw_edges_and_a_wr_edge_are_g2():
    b = Builder()
    b.sends("w", [("x", 1, 0), ("y", 5, 0)])
    t1 = b.op("t1", "txn", [["poll"]], "ok", [["poll", {"x": [[0, 1]], "z": [[0, 7]]}]])
    t2 = b.op("t2", "txn", [["poll"], ["send", "x", 2]], "ok",
              [["poll", {"y": [[0, 5]]}], ["send", "x", [1, 2]]])
    t3 = b.op("t3", "txn", [["send", "y", 6], ["send", "z", 7]], "ok",
              [["send", "y", [1, 6]], ["send", "z", [0, 7]]])
    result = txn(b)
    assert set(result.anomalies) == {"G2"}
    [witness] = result.anomalies["G2"].examples
    assert witness["cycle"] == [t1, t2, t3, t1]
    assert [s["type"] for s in witness["steps"]] == ["rw", "rw", "wr"]
    assert result.valid is False


def test_a_plain_send_that_an_rw_edge_points_at_stays_on_the_cycle():
    b = Builder()
    b.send("w", "x", 1, 0)
    t1 = b.op("t1", "txn", [["poll"]], "ok", [["poll", {"x": [[0, 1]], "y": [[0, 9]]}]])
    plain = b.send("s", "x", 2, 1)
    t2 = b.op("t2", "txn", [["poll"], ["send", "y", 9]], "ok",
              [["poll", {"x": [[1, 2]]}], ["send", "y", [0, 9]]])
    [witness] = txn(b).anomalies["G-single"].examples
    assert witness["cycle"] == [t1, plain, t2, t1]
    assert [s["type"] for s in witness["steps"]] == ["rw", "wr", "wr"]


def test_plain_polls_at_different_positions_have_no_rw_edges():
    def history(f: str) -> Builder:
        b = Builder()
        for key in ("x", "y", "z"):
            b.send("w", key, 1, 0)
        b.op("p", f, [["poll"]], "ok", [["poll", {"x": [[0, 1]], "y": [[0, 1]]}]])
        b.op("q", f, [["poll"]], "ok", [["poll", {"y": [[0, 1]], "z": [[0, 1]]}]])
        for key in ("x", "y", "z"):
            b.send("w", key, 2, 1)
        b.poll("r", {key: [(0, 1), (1, 2)] for key in ("x", "y", "z")})
        return b

    plain = txn(history("poll"))
    assert plain.stats["rw-edges"] == 0 and plain.anomalies == {} and plain.valid is True
    assert txn(history("txn")).stats["rw-edges"] == 4


def test_a_valid_transactional_history_with_rw_edges_has_no_cycle():
    result = txn(simulate_txns(7, 80))
    assert result.stats["rw-edges"] > 0
    assert set(result.anomalies) <= {"G1b"} and result.valid is True


def test_txn_is_a_registered_checker():
    assert set(composed(["queue", "txn"]).checkers) == {"queue", "txn"}


@pytest.mark.spark
def test_spark_gives_the_local_graph_and_proves_info_transactions_across_keys(tmp_path,
                                                                             spark):
    b = simulate_txns(11, 120, keys=4)
    for kind in TXN_INJECTIONS:
        inject_txn(b, kind, keys=(f"{kind}-x", f"{kind}-y"))
    b.invoke("t1", "txn", [["send", "px", 1], ["send", "pz", 5]])
    b.complete("t1", "txn", "info", [["send", "px", [0, 1]], ["send", "pz", [0, 5]]])
    b.send("t2", "px", 2, 0)
    b.poll("r", {"pz": [(0, 5)]})
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(op.to_json()) + "\n" for op in b.ops))
    checkers = composed(["queue", "txn"])
    on_spark = check_history_on_spark(spark, SAFE, path, checkers)
    local = checkers.check(SAFE, b.ops, {})
    for name in ("queue", "txn"):
        assert on_spark.checkers[name].to_json()["anomalies"] == \
            local.checkers[name].to_json()["anomalies"]
    offsets = on_spark.checkers["queue"].anomalies["inconsistent-offsets"].examples
    assert [w["key"] for w in offsets] == ["px"]
