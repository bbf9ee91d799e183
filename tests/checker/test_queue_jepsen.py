"""The scenarios of Jepsen's Kafka checker tests (`jepsen/test/jepsen/tests/kafka_test.clj`,
jepsen-io/jepsen c4c7473), written again in our history format, one test per case and
named after it. Values are integers (Jepsen's :a, :b, :c, :d, :f, :g are 1, 2, 3, 4, 6,
7); keys are "x" and "y". Each test asserts every anomaly type we report, so where we
report more than the Jepsen case asserts, the extra types are named (Jepsen's analysis
reports most of them too; its tests look at one error type at a time).

Agreement by anomaly type (the type each Jepsen case asserts; the helper-function tests,
realtime lag, the unseen time series and the generator test have no anomaly to compare):

| anomaly type           | Jepsen cases | we agree | deliberate differences                      |
|------------------------|--------------|----------|---------------------------------------------|
| inconsistent-offsets   | 4            | 4        | (1)                                         |
| G1a                    | 1            | 1        |                                             |
| lost-write             | 3            | 3        | (1)                                         |
| poll-skip              | 5            | 5        |                                             |
| nonmonotonic-poll      | 2            | 2        |                                             |
| nonmonotonic-send      | 2            | 2        |                                             |
| int-poll-skip          | 1            | 1        |                                             |
| int-send-skip          | 1            | 1        |                                             |
| int-nonmonotonic-poll  | 1            | 1        |                                             |
| int-nonmonotonic-send  | 1            | 1        |                                             |
| duplicate              | 3            | 3        |                                             |
| empty history          | 1            | 1        | (2)                                         |
| G0                     | 1            | 1        |                                             |
| G1c                    | 2            | 2        |                                             |
| precommitted-read      | 1            | 1        |                                             |
| total                  | 29           | 29       | (one test can assert two types)             |

(1) Jepsen treats every op's sends as one atomic unit: a crashed `send` op, one of whose
    values was read, counts as committed in all its sends. Our `send` op's micro-ops are
    separate produce requests that may partly succeed (only `txn` ops are atomic), so an
    unknown-outcome `send` micro-op counts only if its own value was read. The two cases
    that rest on it ("inconsistent-offsets: info conflicts" and "lost-write: atomic",
    both describing a crashed *transaction*) agree when written as `txn` ops, as here; the
    same histories written as `send` ops give no anomaly (asserted too).
(2) Jepsen's verdict comes from Elle's `empty-transaction-graph`; ours is the queue
    checker's `empty-history`: no send was acknowledged. The other cases hold only the ops
    of their anomaly, often without an acknowledged send: `queue` leaves their
    `empty-history` aside.
Further, where Jepsen's by-value version order keeps one value per offset and so cannot
place the others, we place every value (by its send's offset, else where it was read):
with two values at one offset we also report the `nonmonotonic-send` or
`nonmonotonic-poll` that the conflicting offset implies.
"""

from __future__ import annotations

from checker.queue.analysis import QueueChecker
from checker.txn.checker import TxnChecker
from tests.support.queue_histories import Builder

SAFE = {"acks": "all", "broker_config": {"min.insync.replicas": 2}}
A, B, C, D, F, G = 1, 2, 3, 4, 6, 7


def queue(b: Builder) -> dict:
    """Anomaly type -> witnesses the queue checker reports, `empty-history` aside."""
    result = QueueChecker().check(SAFE, b.ops, {})
    return {kind: anomaly.examples for kind, anomaly in result.anomalies.items()
            if kind != "empty-history"}


def sends(b: Builder, process, kind: str, pairs: list, f: str = "send") -> int:
    """One op sending (key, value, offset-or-None) pairs; the completion carries offsets
    where given."""
    invoked = [["send", k, v] for k, v, _ in pairs]
    done = [["send", k, v if o is None else [o, v]] for k, v, o in pairs]
    return b.op(process, f, invoked, kind, done)


def poll(b: Builder, process, kind: str, *polls: dict, f: str = "poll") -> int:
    """One op of one or more poll micro-ops, each key -> [(offset, value)]."""
    done = [["poll", {k: [list(p) for p in pairs] for k, pairs in result.items()}]
            for result in polls]
    return b.op(process, f, [["poll"] for _ in polls], kind, done)


# --- version orders and inconsistent offsets -------------------------------------------------

def test_version_orders():
    b = Builder()
    poll(b, 0, "ok", {"x": [(0, A), (1, B)]})
    sends(b, 1, "info", [("x", C, 1), ("x", B, 3), ("x", D, 4)], f="txn")
    found = queue(b)
    assert found["inconsistent-offsets"] == [
        {"key": "x", "offset": 1, "values": [C, B], "ops": [1, 3]}]
    assert set(found) == {"inconsistent-offsets", "duplicate", "unseen"}


def test_version_orders_a_real_world_example():
    b = Builder()
    sends(b, 379, "ok", [(11, 641, 537)])
    sends(b, 363, "ok", [(11, 645, 537)])
    found = queue(b)
    assert [w["values"] for w in found["inconsistent-offsets"]] == [[641, 645]]
    assert set(found) == {"inconsistent-offsets", "unseen"}


def test_inconsistent_offsets_info_conflicts():
    for f, conflict in (("txn", True), ("send", False)):
        b = Builder()
        sends(b, 0, "info", [("x", 1, 0), ("y", 1, None)], f=f)
        sends(b, 1, "ok", [("x", 2, 0)])
        assert "inconsistent-offsets" not in queue(b)
        poll(b, 2, "ok", {"y": [(5, 1)]})
        found = queue(b)
        assert ("inconsistent-offsets" in found) is conflict, f
        if conflict:
            assert found["inconsistent-offsets"][0]["values"] == [1, 2]


# --- G1a and lost writes ---------------------------------------------------------------------

def test_g1a():
    b = Builder()
    writer = sends(b, 0, "fail", [("x", 2, None), ("y", 3, None)])
    reader = poll(b, 1, "ok", {"x": [(0, 2)]})
    assert queue(b) == {"G1a": [{"key": "x", "value": 2, "offset": 0, "ops": [writer, reader]}]}


def test_lost_write_consistent():
    b = Builder()
    send_a = sends(b, 0, "ok", [("x", A, 0)])
    send_bd = sends(b, 0, "ok", [("x", B, 1), ("x", D, 3)])
    sends(b, 1, "info", [("x", C, None)])
    reader = poll(b, 0, "ok", {"x": [(2, C)]})
    found = queue(b)
    assert [(w["value"], w["ops"]) for w in found["lost-write"]] == [
        (A, [send_a, reader]), (B, [send_bd, reader])]
    assert set(found) == {"lost-write", "unseen", "int-send-skip"}  # unseen: D, past C


def test_lost_write_inconsistent():
    b = Builder()
    sends(b, 0, "ok", [("x", A, 0)])
    sends(b, 0, "ok", [("x", B, 0), ("x", C, 2)])
    poll(b, 0, "ok", {"x": [(0, B), (2, C)]})
    found = queue(b)
    assert [w["value"] for w in found["lost-write"]] == [A]
    assert set(found) == {"lost-write", "inconsistent-offsets", "nonmonotonic-send"}


def test_lost_write_atomic():
    for f, lost in (("txn", True), ("send", False)):
        b = Builder()
        send_ab = sends(b, 0, "info", [("x", A, None), ("y", B, 0)], f=f)
        sends(b, 1, "info", [("y", C, None)])
        poll_c = poll(b, 3, "ok", {"y": [(1, C)]})
        assert "lost-write" not in queue(b)
        poll(b, 2, "ok", {"x": [(0, A)]})
        found = queue(b)
        assert ("lost-write" in found) is lost, f
        if lost:
            assert found["lost-write"] == [{"key": "y", "value": B, "offset": 0,
                                            "max-read-offset": 1, "ops": [send_ab, poll_c]}]


# --- poll skips and nonmonotonic polls -------------------------------------------------------

def _poll_skip_history(between_4_and_7=None, between_3_and_4=None) -> tuple[Builder, list]:
    b = Builder()
    first = poll(b, 0, "ok", {"x": [(1, A), (2, B)]})
    poll(b, 1, "ok", {"x": [(3, C)]})
    if between_3_and_4:
        between_3_and_4(b)
    fourth = poll(b, 0, "ok", {"x": [(4, D)]})
    if between_4_and_7:
        between_4_and_7(b)
    sends(b, 2, "ok", [("x", F, 6)])
    seventh = poll(b, 0, "ok", {"x": [(7, G)]})
    sends(b, 3, "info", [("x", v, None) for v in (A, B, C, D, G)])
    return b, [[first, fourth], [fourth, seventh]]


def test_poll_skip():
    b, pairs = _poll_skip_history()
    found = queue(b)
    assert [w["ops"] for w in found["poll-skip"]] == pairs
    assert set(found) == {"poll-skip", "lost-write", "int-send-skip"}  # lost: F, under G


def test_poll_skip_with_intermediate_subscribe():
    dropped, _ = _poll_skip_history(lambda b: b.op(0, "assign", ["y"], "info", ["y"]),
                                    lambda b: b.assign(0, ["y"], f="subscribe"))
    assert "poll-skip" not in queue(dropped)
    kept, pairs = _poll_skip_history(lambda b: b.assign(0, ["x", "y"]),
                                     lambda b: b.assign(0, ["x", "y"], f="subscribe"))
    assert [w["ops"] for w in queue(kept)["poll-skip"]] == pairs


def _aborting_poller(*polls: tuple[str, list]) -> tuple[Builder, list[int]]:
    b = Builder()
    top = max(o for _, pairs in polls for o, _ in pairs)
    sends(b, 0, "ok", [("x", v, v) for v in range(top + 1)])
    return b, [poll(b, 1, kind, {"x": pairs}, f="txn") for kind, pairs in polls]


def test_poll_skip_txn_abort_good():
    b, _ = _aborting_poller(("ok", [(0, 0)]), ("fail", [(1, 1), (2, 2)]),
                            ("info", [(1, 1), (2, 2)]), ("ok", [(1, 1), (2, 2)]))
    assert queue(b) == {}


def test_poll_skip_txn_abort_doesnt_roll_back():
    b, ops = _aborting_poller(("ok", [(0, 0)]), ("fail", [(1, 1), (2, 2)]),
                              ("fail", [(3, 3), (4, 4)]), ("ok", [(5, 5)]))
    found = queue(b)
    assert [(w["ops"], w["skipped"]) for w in found["poll-skip"]] == [
        ([ops[0], ops[2]], [1, 2]), ([ops[0], ops[3]], [1, 2, 3, 4])]
    assert set(found) == {"poll-skip", "lost-write"}  # lost: 1 to 4, never read by an ok poll


def test_poll_skip_info_can_be_a_poll_skip():
    b, ops = _aborting_poller(("ok", [(0, 0)]), ("fail", [(1, 1), (2, 2)]),
                              ("info", [(3, 3), (4, 4)]))
    found = queue(b)
    assert [(w["ops"], w["skipped"]) for w in found["poll-skip"]] == [([ops[0], ops[2]], [1, 2])]
    assert set(found) == {"poll-skip", "unseen"}


def _nonmonotonic_poll_history(between=None) -> tuple[Builder, list[int]]:
    b = Builder()
    sends(b, 0, "ok", [("x", v, None) for v in (A, B, C, D)])
    first = poll(b, 0, "ok", {"x": [(1, A), (2, B), (3, C)]})
    if between:
        between(b)
    second = poll(b, 0, "ok", {"x": [(2, B), (3, C), (4, D)]})
    return b, [first, second]


def test_nonmonotonic_poll_together():
    b, ops = _nonmonotonic_poll_history()
    assert queue(b) == {"nonmonotonic-poll": [{"key": "x", "offsets": [3, 2], "ops": ops}]}


def test_nonmonotonic_poll_with_intermediate_subscribe():
    for f in ("subscribe", "assign"):
        dropped, _ = _nonmonotonic_poll_history(lambda b, f=f: b.assign(0, ["y"], f=f))
        assert queue(dropped) == {}
        kept, ops = _nonmonotonic_poll_history(lambda b, f=f: b.assign(0, ["x", "y"], f=f))
        assert [w["ops"] for w in queue(kept)["nonmonotonic-poll"]] == [ops]


def _nonmonotonic_send_history(between=None) -> tuple[Builder, list[int]]:
    b = Builder()
    first = sends(b, 0, "ok", [("x", C, 3), ("x", D, 4)])
    if between:
        between(b)
    second = sends(b, 0, "ok", [("x", A, 1), ("x", B, 2)])
    return b, [first, second]


def test_nonmonotonic_send():
    b, ops = _nonmonotonic_send_history()
    found = queue(b)
    assert found["nonmonotonic-send"] == [
        {"key": "x", "offsets": [4, 1], "values": [D, A], "ops": ops}]
    assert set(found) == {"nonmonotonic-send", "unseen"}


def test_nonmonotonic_send_with_intermediate_subscribe():
    dropped = [lambda b: b.assign(0, ["y"], f="subscribe"),
               lambda b: b.op(0, "assign", ["y"], "info", ["y"])]
    for between in dropped:
        assert "nonmonotonic-send" not in queue(_nonmonotonic_send_history(between)[0])
    for f in ("subscribe", "assign"):
        b, ops = _nonmonotonic_send_history(lambda b, f=f: b.assign(0, ["x", "y"], f=f))
        assert [w["ops"] for w in queue(b)["nonmonotonic-send"]] == [ops]


# --- within one op ---------------------------------------------------------------------------

def test_int_poll_skip():
    b = Builder()
    sends(b, 1, "info", [("x", A, None), ("x", B, None), ("x", D, None)])
    within = poll(b, 0, "ok", {"x": [(1, A), (4, D)]})
    across = poll(b, 0, "ok", {"x": [(1, A)]}, {"x": [(4, D)]})
    poll(b, 0, "ok", {"x": [(2, B)]})
    found = queue(b)
    assert [(w["ops"], w["skipped"]) for w in found["int-poll-skip"]] == [
        ([within], [2]), ([across], [2])]
    assert set(found) == {"int-poll-skip", "nonmonotonic-poll"}  # process 0 goes back


def test_int_send_skip():
    b = Builder()
    op = sends(b, 0, "ok", [("x", A, 1), ("x", C, None)])
    sends(b, 1, "info", [("x", B, None)])
    poll(b, 2, "ok", {"x": [(2, B), (3, C)]})
    found = queue(b)
    assert found["int-send-skip"] == [{"key": "x", "values": [A, C], "offsets": [1, None],
                                       "skipped": [2], "ops": [op]}]
    assert set(found) == {"int-send-skip", "lost-write"}  # lost: A, under C
    assert QueueChecker().check(SAFE, b.ops, {}).allowed == ["int-send-skip"]


def test_int_nonmonotonic_poll():
    b = Builder()
    sends(b, 0, "info", [("x", A, None), ("x", B, None), ("x", C, None)])
    backwards = poll(b, 0, "ok", {"x": [(3, C), (1, A)]})
    repeated = poll(b, 0, "ok", {"x": [(2, B), (3, C)]}, {"x": [(3, C)]})
    found = queue(b)
    assert [(w["ops"], w["values"]) for w in found["int-nonmonotonic-poll"]] == [
        ([backwards], [C, A]), ([repeated], [C, C])]
    assert set(found) == {"int-nonmonotonic-poll"}


def test_int_nonmonotonic_send():
    b = Builder()
    on_x = sends(b, 0, "ok", [("x", C, 3), ("x", A, 1)])
    on_y = sends(b, 0, "info", [("y", D, None), ("y", B, None)])
    sends(b, 1, "info", [("y", C, None)])
    poll(b, 0, "ok", {"y": [(2, B), (3, C), (4, D)]})
    found = queue(b)
    assert [(w["key"], w["values"], w["ops"]) for w in found["int-nonmonotonic-send"]] == [
        ("x", [C, A], [on_x]), ("y", [D, B], [on_y])]
    assert set(found) == {"int-nonmonotonic-send", "unseen"}  # nothing polled x


# --- duplicates ------------------------------------------------------------------------------

def test_duplicate_basic():
    b = Builder()
    sends(b, 0, "ok", [("x", A, 1)])
    sends(b, 1, "info", [("x", B, None)])
    poll(b, 2, "ok", {"x": [(2, B), (3, A)]})
    found = queue(b)
    assert [(w["value"], w["offsets"]) for w in found["duplicate"]] == [(A, [1, 3])]
    assert set(found) == {"duplicate"}


def test_duplicate_hash_insensitive():
    b = Builder()
    values = list(range(10))
    for value in values:
        sends(b, 0, "ok", [("x", value, 0)])
        poll(b, 1, "ok", {"x": [(1, value)]})
    found = queue(b)
    assert sorted(w["value"] for w in found["duplicate"]) == values
    assert [(w["offset"], sorted(w["values"])) for w in found["inconsistent-offsets"]] == [
        (0, values), (1, values)]
    assert set(found) == {"duplicate", "inconsistent-offsets", "nonmonotonic-send",
                          "nonmonotonic-poll"}


def test_duplicate_aborted_txns():
    b = Builder()
    sends(b, 0, "ok", [("x", 0, 1)])
    sends(b, 0, "fail", [("x", 1, 2)])
    poll(b, 1, "fail", {"x": [(11, 0), (12, 1)]})
    found = queue(b)
    assert [(w["value"], w["offsets"]) for w in found["duplicate"]] == [(0, [1, 11])]
    assert set(found) == {"duplicate", "unseen"}  # no ok poll read 0


# --- an empty history, cycles, precommitted reads --------------------------------------------

def test_empty_history():
    b = Builder()
    b.assign(0, ["x"])
    result = QueueChecker().check(SAFE, b.ops, {})
    assert result.valid is False
    assert set(result.anomalies) == {"empty-history"}


def test_g0():
    b = Builder()
    b.invoke(0, "send", [["send", "x", A], ["send", "y", A]])
    b.invoke(1, "send", [["send", "x", B], ["send", "y", B]])
    wa = b.complete(0, "send", "ok", [["send", "x", [0, A]], ["send", "y", [1, A]]])
    wb = b.complete(1, "send", "ok", [["send", "x", [1, B]], ["send", "y", [0, B]]])
    result = TxnChecker().check(SAFE, b.ops, {})
    [witness] = result.anomalies["G0"].examples
    assert witness["cycle"] == [wa, wb, wa]
    assert [(s["type"], s["key"], s["previous-value"], s["value"]) for s in witness["steps"]] == [
        ("ww", "x", A, B), ("ww", "y", B, A)]
    assert set(result.anomalies) == {"G0"}
    assert result.valid is True and result.allowed == ["G0"]


def test_g1c_pure_wr():
    b = Builder()
    b.invoke(0, "txn", [["send", "x", A], ["poll"]])
    b.invoke(1, "txn", [["send", "y", B], ["poll"]])
    t1 = b.complete(0, "txn", "ok", [["send", "x", [0, A]], ["poll", {"y": [[0, B]]}]])
    t2 = b.complete(1, "txn", "ok", [["send", "y", [0, B]], ["poll", {"x": [[0, A]]}]])
    result = TxnChecker().check(SAFE, b.ops, {})
    [witness] = result.anomalies["G1c"].examples
    assert witness["cycle"] == [t1, t2, t1]
    assert [(s["type"], s["key"], s["value"]) for s in witness["steps"]] == [
        ("wr", "x", A), ("wr", "y", B)]
    assert witness["steps"][0]["why"] == f"op {t2} polled value {A} of key 'x' that op {t1} sent"
    assert result.valid is False


def test_g1c_ww_wr():
    b = Builder()
    b.invoke(0, "txn", [["send", "x", A], ["send", "y", C]])
    b.invoke(1, "txn", [["poll"], ["send", "y", B]])
    t1 = b.complete(0, "txn", "ok", [["send", "x", [0, A]], ["send", "y", [2, C]]])
    t2 = b.complete(1, "txn", "ok", [["poll", {"x": [[0, A]]}], ["send", "y", [1, B]]])
    result = TxnChecker().check(SAFE, b.ops, {})
    [witness] = result.anomalies["G1c"].examples
    assert witness["cycle"] == [t1, t2, t1]
    assert [(s["type"], s["key"], s["value"]) for s in witness["steps"]] == [
        ("wr", "x", A), ("ww", "y", C)]
    assert result.valid is True and result.allowed == ["G1c"]  # ww edges: as Jepsen's ww-deps


def test_precommitted_read():
    b = Builder()
    t1 = b.op(0, "txn", [["send", "x", A], ["poll"]], "ok",
              [["send", "x", [0, A]], ["poll", {"x": [[0, A]]}]])
    assert queue(b) == {"precommitted-read": [{"key": "x", "value": A, "offset": 0,
                                               "ops": [t1]}]}
