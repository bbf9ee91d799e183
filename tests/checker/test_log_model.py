"""The log model (checker.lin.models.LOG) on hand-written queue histories, valid and invalid."""

from __future__ import annotations

import pytest

from checker.history import pair_operations
from checker.lin.models import LOG, Placed, Polled, partition_log
from checker.lin.search import PartitionResult, check_operations
from tests.support.queue_histories import Builder, simulate


def complete(b: Builder, process, f: str, kind: str, value) -> int:
    """Complete an op invoked earlier with `b.invoke` (the Builder completes only at once)."""
    return b._line(kind, process, f, value, {})


def check(b: Builder) -> dict:
    """Each key's result, all keys decided."""
    result = check_operations(LOG, pair_operations(b.ops), complete=True)
    return {r.partition: r for r in result.partitions}


def invalid(b: Builder, key) -> PartitionResult:
    results = check(b)
    assert results[key].valid is False, results[key]
    assert all(r.valid is True for k, r in results.items() if k != key)
    return results[key]


def stuck_text(result: PartitionResult) -> str:
    example = result.counterexample
    return example.descriptions[example.stuck[0]]


# --- valid histories ---------------------------------------------------------------------------


def test_simulated_histories_are_linearizable():
    for seed in range(10):
        assert all(r.valid is True for r in check(simulate(seed, 300)).values())


def test_polls_start_anywhere_stop_anywhere_and_skip_offsets_no_record_holds():
    b = Builder()
    b.send(0, 1, 10, 0)
    b.send(0, 1, 11, 3)  # offsets 1 and 2 are transaction markers: no record
    b.send(0, 2, 20, 0)
    b.poll(1, {1: [(0, 10), (3, 11)], 2: []})
    b.poll(1, {1: [(3, 11)]})
    b.assign(1, [1, 2])
    b.poll(1, {1: [(0, 10)], 2: [(0, 20)]})
    b.nemesis("start-partition", {"n1": ["n2"]})
    b.poll(2, {})
    assert {k: r.valid for k, r in check(b).items()} == {1: True, 2: True}


def test_unknown_send_that_a_poll_returned_is_fine():
    b = Builder()
    b.send(0, 1, 10, kind="info")
    b.send(1, 1, 11, 1)
    b.poll(2, {1: [(0, 10), (1, 11)]})
    assert check(b)[1].valid is True


def test_unknown_send_that_no_poll_returned_is_fine():
    b = Builder()
    b.send(0, 1, 10, kind="info")
    b.invoke(4, "send", [["send", 1, 12]])  # never completes
    b.send(1, 1, 11, 0)
    b.poll(2, {1: [(0, 11)]})
    b.send(3, 1, 13, 1)
    b.poll(2, {1: [(0, 11), (1, 13)]})
    assert check(b)[1].valid is True


def test_acks0_send_without_an_offset_is_of_unknown_outcome():
    b = Builder()
    b.op(0, "send", [["send", 1, 10]], "ok", [["send", 1, [None, 10]]], acks="0")
    b.op(0, "send", [["send", 1, 11]], "ok", [["send", 1, [None, 11]]], acks="0")
    b.send(1, 1, 12, 0)
    b.poll(2, {1: [(0, 12), (1, 11)]})
    assert check(b)[1].valid is True


def test_concurrent_sends_take_the_order_of_their_offsets_without_branching():
    b = Builder()
    offsets = [7, 2, 5, 0, 9, 4, 1, 8, 3, 6] * 3
    offsets = [o + 10 * (i // 10) for i, o in enumerate(offsets)]
    for process, _ in enumerate(offsets):
        b.invoke(process, "send", [["send", 1, 100 + process]])
    for process, offset in enumerate(offsets):
        complete(b, process, "send", "ok", [["send", 1, [offset, 100 + process]]])
    b.poll("reader", {1: sorted((o, 100 + p) for p, o in enumerate(offsets))})
    [result] = check(b).values()
    assert result.valid is True
    assert result.configurations < 3 * len(offsets)


# --- invalid histories -------------------------------------------------------------------------


def test_stale_read_after_a_newer_send_was_polled():
    # A stale leader, cut off after b: it appended c (its producer timed out) where b is.
    # A poll that merely stops before b is no stale read (a fetch may return less), so a
    # stale log shows as a record contradicting what an earlier poll saw.
    b = Builder()
    b.send(0, 1, 10, 0)
    b.send(0, 1, 11, 1)
    b.poll(1, {1: [(0, 10), (1, 11)]})
    b.send(2, 1, 12, kind="info")
    stale = b.poll(3, {1: [(0, 10), (1, 12)]})
    result = invalid(b, 1)
    example = result.counterexample
    assert example.stuck == [stale - 1]
    assert "reads 12 at offset 1, which holds 11 (send #2)" in stuck_text(result)
    assert example.state == "log of 2 records, the last 11 at offset 1"


def test_poll_skipping_an_offset_between_two_it_returns():
    b = Builder()
    for offset in range(3):
        b.send(0, 1, 10 + offset, offset)
    skipping = b.poll(1, {1: [(0, 10), (2, 12)]})
    result = invalid(b, 1)
    assert result.counterexample.stuck == [skipping - 1]
    assert "skips offset 1 (11, send #2) between offsets 0 and 2" in stuck_text(result)


def test_records_out_of_log_order_in_one_poll():
    b = Builder()
    b.send(0, 1, 10, 0)
    b.send(0, 1, 11, 1)
    b.poll(1, {1: [(1, 11), (0, 10)]})
    assert "out of log order" in stuck_text(invalid(b, 1))


def test_two_values_acknowledged_at_one_offset():
    b = Builder()
    b.invoke(0, "send", [["send", 1, 10]])
    b.invoke(1, "send", [["send", 1, 11]])
    complete(b, 0, "send", "ok", [["send", 1, [0, 10]]])
    complete(b, 1, "send", "ok", [["send", 1, [0, 11]]])
    result = invalid(b, 1)
    assert result.counterexample.stuck == [1]
    assert "offset 0 already holds 10 (send #0)" in stuck_text(result)


def test_one_value_at_two_offsets():
    b = Builder()
    b.send(0, 1, 10, 0)
    b.poll(1, {1: [(0, 10)]})
    b.poll(2, {1: [(1, 10)]})
    assert "reads 10 at offset 1, but it is at offset 0 (send #0)" in stuck_text(invalid(b, 1))


def test_reading_a_failed_or_never_sent_value():
    b = Builder()
    b.send(0, 1, 10, kind="fail")
    b.poll(1, {1: [(0, 10)]})
    assert "whose send failed (#0)" in stuck_text(invalid(b, 1))
    b = Builder()
    b.send(0, 2, 10, 0)
    b.poll(1, {1: [(0, 10)]})
    assert "never sent to key 1" in stuck_text(invalid(b, 1))


def test_read_from_the_future():
    b = Builder()
    early = b.poll(1, {1: [(0, 10)]})
    b.send(0, 1, 10, 0)
    result = invalid(b, 1)
    assert result.counterexample.stuck == [early - 1]
    assert result.counterexample.state == "empty log"
    assert "impossible" not in stuck_text(result)


def test_acknowledged_offsets_going_backwards_in_real_time():
    b = Builder()
    first = b.send(0, 1, 10, 5)
    b.send(1, 1, 11, 3)
    result = invalid(b, 1)
    assert result.counterexample.stuck == [first - 1]
    assert stuck_text(result) == "send(10) acknowledged at offset 5, after send #2 in the log"


def test_unknown_send_polled_where_it_cannot_have_been_appended():
    # 10 is invoked after 11 was acknowledged at offset 1, so it cannot sit at offset 0.
    b = Builder()
    b.send(0, 1, 11, 1)
    b.send(1, 1, 10, kind="info")
    b.poll(2, {1: [(0, 10), (1, 11)]})
    result = invalid(b, 1)
    assert result.counterexample.stuck == [0]
    assert stuck_text(result) == "send(11) acknowledged at offset 1, after send #2 in the log"


# --- splitting ---------------------------------------------------------------------------------


def test_partition_splits_ops_per_key_and_leaves_out_what_is_not_a_log_op():
    b = Builder()
    b.sends(0, [(1, 10, 0), (2, 20, 0)])  # a txn
    b.op(0, "send", [["send", 1, 11], ["send", 2, 21]], "ok",
         [["send", 1, [1, 11]], ["send", 2, [1, 21]]])
    b.send(0, 1, 12, kind="fail")
    b.send(0, 2, 22, kind="info")
    b.assign(1, [1, 2])
    b.assign(1, [1], f="subscribe")
    b.op(1, "crash", None, "info", None)
    b.poll(2, {1: [(0, 10)], 2: []})
    b.op(3, "poll", [["poll"]], "info", [["poll"]])
    parts = partition_log(pair_operations(b.ops))
    assert sorted(parts) == [1, 2]
    assert [(op.f, op.input, op.status) for op in parts[1]] == [
        ("send", 10, "ok"), ("send", 11, "ok"), ("poll", None, "ok")]
    assert [(op.f, op.input) for op in parts[2]] == [("send", 20), ("send", 21)]
    assert parts[1][1].output == Placed(1, 1, None, (0,))
    assert parts[1][2].output == Polled(((0, 10),), 0, None, (0,))


def test_malformed_queue_ops_are_rejected_with_their_index():
    b = Builder()
    b.op(0, "send", [["send", 1, 10]], "ok", [["send", 1, 10]])
    with pytest.raises(ValueError, match=r"op 0 \(send\): completed send must be"):
        partition_log(pair_operations(b.ops))
    b = Builder()
    b.op(0, "read", None, "ok", 3)
    with pytest.raises(ValueError, match="op 0 has f 'read', not a queue op"):
        partition_log(pair_operations(b.ops))
