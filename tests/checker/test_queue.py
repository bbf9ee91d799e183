"""The queue checker on handcrafted histories: each anomaly, found and not found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checker.history import load_history
from checker.history.errors import HistoryError
from checker.queue.acks import AcksChecker
from checker.queue.analysis import (
    QueueChecker,
    acks_label,
    allowed_anomalies,
    analyse,
    promises_no_loss,
)
from checker.queue.events import events_of
from tests.support.queue_histories import INJECTIONS, Builder

DATA = Path(__file__).parent.parent / "data" / "queue"
SAFE = {"acks": "all", "broker_config": {"min.insync.replicas": 2}}


def found(b: Builder) -> dict:
    return {kind: a.to_json() for kind, a in analyse(b.ops).anomalies.items()}


@pytest.mark.parametrize("kind", INJECTIONS)
def test_each_bad_fixture_shows_its_anomaly_and_fails(kind):
    result = QueueChecker().check(SAFE, load_history(DATA / f"{kind}-bad.jsonl"), {})
    assert result.valid is False
    assert kind in result.anomalies
    json.dumps(result.to_json())


@pytest.mark.parametrize("name", ["ok", "poll-skip-after-assign-ok",
                                  "int-poll-skip-over-unseen-offset-ok"])
def test_ok_fixtures_are_valid(name):
    result = QueueChecker().check(SAFE, load_history(DATA / f"{name}.jsonl"), {})
    assert result.to_json()["anomalies"] == {}
    assert result.valid is True


def test_lost_write_names_the_writer_and_the_reader_past_it():
    b = Builder()
    writer = b.send(0, 1, 10, 0)
    b.send(0, 1, 11, 1)
    b.send(0, 1, 12, 2)
    reader = b.poll(5, {1: [(1, 11), (2, 12)]})
    anomalies = found(b)
    assert set(anomalies) == {"lost-write"}
    assert anomalies["lost-write"]["examples"] == [
        {"key": 1, "value": 10, "offset": 0, "max-read-offset": 2, "ops": [writer, reader]}]


def test_no_lost_write_when_everything_below_the_highest_read_was_read():
    b = Builder()
    b.send(0, 1, 10, 0)
    b.send(0, 1, 11, 1)
    b.poll(5, {1: [(0, 10)]})
    b.poll(6, {1: [(0, 10), (1, 11)]})
    assert found(b) == {}


def test_unseen_is_counted_over_time_and_allowed_without_final_reads():
    b = Builder()
    b.send(0, 1, 10, 0)
    b.send(0, 1, 11, 1)
    b.poll(5, {1: [(0, 10)]})
    analysis = analyse(b.ops)
    assert analysis.anomalies["unseen"].examples[0]["value"] == 11
    assert analysis.unseen_over_time[-1][1] == 1
    assert QueueChecker().check(SAFE, b.ops, {}).valid is False
    relaxed = QueueChecker().check({**SAFE, "final_reads": False}, b.ops, {})
    assert relaxed.valid is True and relaxed.allowed == ["unseen"]
    assert relaxed.stats["unseen-at-end"] == 1


def test_without_final_reads_a_write_never_read_is_unseen_not_lost():
    b = Builder()
    b.send(0, 1, 10, 0)
    b.send(0, 1, 11, 1)
    b.send(0, 1, 12, 2)
    b.poll(5, {1: [(2, 12)]})
    assert QueueChecker().check(SAFE, b.ops, {}).anomalies["lost-write"].count == 2
    interrupted = {**SAFE, "final_reads": False}
    relaxed = QueueChecker().check(interrupted, b.ops, {})
    assert "lost-write" not in relaxed.anomalies and relaxed.anomalies["unseen"].count == 2
    assert relaxed.valid is True and relaxed.allowed == ["unseen"]
    assert relaxed.stats["lost-writes"] == []
    acks = AcksChecker().check(interrupted, b.ops, {})
    assert acks.valid is True and not acks.anomalies


def test_without_final_reads_a_write_read_then_overwritten_is_still_lost():
    b = Builder()
    b.send(0, 1, 10, 0)
    b.poll(5, {1: [(0, 10)]})
    b.send(1, 1, 20, 0)
    b.poll(6, {1: [(0, 20)]})
    relaxed = QueueChecker().check({**SAFE, "final_reads": False}, b.ops, {})
    assert relaxed.anomalies["lost-write"].count == 1 and relaxed.valid is False


def test_a_value_read_then_overwritten_everywhere_is_a_lost_write():
    b = Builder()
    sent = b.send(0, 1, 10, 0)
    first = b.poll(5, {1: [(0, 10)]})
    b.send(1, 1, 20, 0)
    last = b.poll(6, {1: [(0, 20)]})
    anomalies = found(b)
    assert anomalies["lost-write"]["count"] == 1
    [witness] = anomalies["lost-write"]["examples"]
    assert witness["value"] == 10 and witness["overwritten-by"] == 20
    assert witness["ops"] == [sent, first, last]
    assert "inconsistent-offsets" in anomalies


def test_a_value_read_at_an_offset_no_later_read_reached_is_not_lost():
    b = Builder()
    b.send(0, 1, 10, 0)
    b.poll(5, {1: [(0, 10)]})
    b.poll(6, {1: []})
    assert found(b) == {}


def test_a_value_read_at_offsets_the_final_end_offset_cut_off_is_a_lost_write():
    # every replica lost the key's tail after the last write (a power loss): the final
    # drain reads nothing, and nothing rewrote the offsets, so only the end offset shows it
    b = Builder()
    kept = b.send(0, 1, 10, 0)
    lost = b.send(0, 1, 11, 1)
    read = b.poll(5, {1: [(0, 10), (1, 11)]})
    end = b.end_offsets(6, {1: 1})
    anomalies = found(b)
    assert set(anomalies) == {"lost-write"}
    assert anomalies["lost-write"]["examples"] == [
        {"key": 1, "value": 11, "offset": 1, "end-offset": 1, "ops": [lost, read, end]}]
    assert kept < lost


def test_an_acknowledged_write_past_the_final_end_offset_is_lost_not_unseen():
    b = Builder()
    b.send(0, 1, 10, 0)
    lost = b.send(0, 1, 11, 1)
    b.poll(5, {1: [(0, 10)]})
    end = b.end_offsets(6, {1: 1})
    anomalies = found(b)
    assert set(anomalies) == {"lost-write"}
    [witness] = anomalies["lost-write"]["examples"]
    assert witness["end-offset"] == 1 and witness["ops"] == [lost, end]


def test_writes_below_the_final_end_offset_are_not_lost_and_the_highest_end_counts():
    b = Builder()
    b.send(0, 1, 10, 0)
    b.send(0, 1, 11, 1)
    b.poll(5, {1: [(0, 10), (1, 11)]})
    b.end_offsets(6, {1: 1})
    b.end_offsets(7, {1: 2})
    b.end_offsets(8, {1: 0}, kind="fail")
    assert found(b) == {}
    unread = Builder()
    unread.send(0, 1, 10, 0)
    unread.end_offsets(6, {1: 1})
    assert set(found(unread)) == {"unseen"}


@pytest.mark.parametrize("value", [[["x", 1]], {"1": -1}, {"1": "2"}, {"1": True}])
def test_a_malformed_end_offsets_op_is_an_input_error(value):
    with pytest.raises(ValueError, match="end-offsets"):
        events_of(0, 0, "ok", 0, "end-offsets", value, {})


def test_an_unread_failed_send_is_neither_lost_nor_unseen():
    b = Builder()
    b.send(0, 1, 10, kind="fail")
    b.send(1, 1, 11, 0)
    b.poll(5, {1: [(0, 11)]})
    assert found(b) == {}


def test_an_info_send_is_committed_when_another_send_of_its_op_was_read():
    b = Builder()
    b.sends(0, [(1, 10, None), (2, 20, None)], kind="info")
    b.send(1, 1, 11, 0)
    b.poll(5, {1: [(0, 11)], 2: [(0, 20)]})
    anomalies = found(b)
    assert set(anomalies) == {"unseen"}
    assert anomalies["unseen"]["examples"][0]["value"] == 10


def test_a_send_op_is_not_atomic_so_its_unread_info_values_are_not_losses():
    b = Builder()
    invoked = [["send", 1, 10], ["send", 2, 20]]
    b.op(0, "send", invoked, "info", invoked)
    b.send(1, 1, 11, 0)
    b.poll(5, {1: [(0, 11)], 2: [(0, 20)]})
    assert found(b) == {}


def test_an_info_send_nobody_read_is_not_a_loss():
    b = Builder()
    b.send(0, 1, 10, kind="info")
    b.send(1, 1, 11, 0)
    b.poll(5, {1: [(0, 11)]})
    assert found(b) == {}


def test_an_invoke_that_never_completed_is_an_info_send():
    b = Builder()
    b.invoke(0, "send", [["send", 1, 10]])
    b.send(1, 1, 11, 1)
    b.poll(5, {1: [(0, 10), (1, 11)]})
    assert found(b) == {}
    assert analyse(b.ops).acks[None]["unknown"] == 1


def test_duplicate_value_at_two_offsets():
    b = Builder()
    b.send(0, 1, 10, 0)
    b.poll(5, {1: [(0, 10), (1, 10)]})
    assert found(b)["duplicate"]["examples"][0] | {"ops": None} == {
        "key": 1, "value": 10, "offsets": [0, 1], "ops": None}


def test_inconsistent_offsets_between_a_send_and_a_read():
    b = Builder()
    send = b.send(0, 1, 10, 0)
    read = b.poll(5, {1: [(0, 99)]})
    anomalies = found(b)
    assert anomalies["inconsistent-offsets"]["examples"] == [
        {"key": 1, "offset": 0, "values": [10, 99], "ops": [send, read]}]
    assert analyse(b.ops).stats["reads-without-send"] == 1


def test_g1a_aborted_read():
    b = Builder()
    failed = b.send(0, 1, 10, kind="fail")
    read = b.poll(5, {1: [(0, 10)]})
    assert found(b) == {"G1a": {"count": 1, "examples": [
        {"key": 1, "value": 10, "offset": 0, "ops": [failed, read]}]}}


def test_poll_skip_between_a_process_polls_names_the_skipped_offsets():
    b = Builder()
    for offset in range(4):
        b.send(0, 1, 10 + offset, offset)
    first = b.poll(5, {1: [(0, 10)]})
    second = b.poll(5, {1: [(3, 13)]})
    anomalies = found(b)
    assert anomalies["poll-skip"]["examples"] == [
        {"key": 1, "offsets": [0, 3], "ops": [first, second], "skipped": [1, 2]}]


@pytest.mark.parametrize("reset", ["assign", "subscribe", "crash"])
def test_reassignments_that_drop_the_key_and_crash_reset_poll_order(reset):
    b = Builder()
    for offset in range(3):
        b.send(0, 1, 10 + offset, offset)
    b.poll(5, {1: [(0, 10), (1, 11), (2, 12)]})
    b.assign(5, [2], f=reset)
    b.poll(5, {1: [(0, 10)]})
    b.poll(5, {1: [(2, 12)]})
    assert set(found(b)) == {"poll-skip"}
    assert found(b)["poll-skip"]["count"] == 1


@pytest.mark.parametrize("reset", ["assign", "subscribe"])
def test_a_reassignment_that_keeps_the_key_keeps_its_poll_position(reset):
    b = Builder()
    for offset in range(3):
        b.send(0, 1, 10 + offset, offset)
    first = b.poll(5, {1: [(0, 10), (1, 11)]})
    b.assign(5, [1, 2], f=reset)
    back = b.poll(5, {1: [(0, 10)]})
    assert found(b)["nonmonotonic-poll"]["examples"] == [
        {"key": 1, "offsets": [1, 0], "ops": [first, back]}]
    b.assign(5, [1], f=reset, seek_to_beginning=True)
    b.poll(5, {1: [(0, 10)]})
    assert found(b)["nonmonotonic-poll"]["count"] == 1


def rebalanced_poll(b: Builder, process, reads: dict, **extra) -> int:
    """A subscribe-mode poll whose completion carries `rebalances` or `unprocessed`."""
    result = {str(k): [[o, v] for o, v in pairs] for k, pairs in reads.items()}
    return b.op(process, "poll", [["poll"]], "ok", [["poll", result]], group="g0", **extra)


def test_a_group_subscription_and_rebalances_reset_positions_of_their_keys():
    b = Builder()
    for offset in range(4):
        b.send(0, 1, 10 + offset, offset)
        b.send(0, 2, 20 + offset, offset)
    b.op(5, "subscribe", {"group": "g0"}, "ok", {"group": "g0"}, group="g0")
    rebalanced_poll(b, 5, {1: [(0, 10), (1, 11)], 2: [(0, 20), (1, 21)]})
    revoke = {"time": 1, "group": "g0", "generation": 1, "member": "m", "assigned": [],
              "revoked": [1], "lost": False}
    assign = dict(revoke, generation=2, assigned=[1], revoked=[])
    rebalanced_poll(b, 5, {1: [(0, 10)]}, rebalances=[revoke, assign])
    assert "nonmonotonic-poll" not in found(b)
    rewind = rebalanced_poll(b, 5, {2: [(0, 20)]})
    assert found(b)["nonmonotonic-poll"]["examples"][0]["ops"][1] == rewind


def test_records_a_before_process_poll_left_unprocessed_are_not_poll_skips():
    b = Builder()
    for offset in range(4):
        b.send(0, 1, 10 + offset, offset)
    b.op(5, "subscribe", {"group": "g0"}, "ok", {"group": "g0"}, group="g0")
    rebalanced_poll(b, 5, {1: [(0, 10)]})
    rebalanced_poll(b, 5, {}, unprocessed={"1": [1, 2]},
                    commit={"offsets": {"1": 3}, "type": "info", "time": 1})
    rebalanced_poll(b, 5, {1: [(3, 13)]})
    assert not {"poll-skip", "int-poll-skip"} & set(found(b))


def test_a_client_offset_reset_restarts_the_keys_position():
    b = Builder()
    for offset in range(4):
        b.send(0, 1, 10 + offset, offset)
        b.send(0, 2, 20 + offset, offset)
    b.poll(5, {1: [(0, 10), (1, 11)], 2: [(0, 20), (1, 21)]})
    b.op(5, "poll", [["poll"]], "ok", [["poll", {}]], offset_resets={"1": 2})
    b.poll(5, {1: [(0, 10)]})
    assert "nonmonotonic-poll" not in found(b)
    b.poll(5, {2: [(0, 20)]})
    assert found(b)["nonmonotonic-poll"]["count"] == 1


def test_offsets_nobody_observed_are_not_skips():
    b = Builder()
    b.send(0, 1, 10, 0)
    b.send(0, 1, 11, 5)
    b.poll(5, {1: [(0, 10)]})
    b.poll(5, {1: [(5, 11)]})
    b.poll(6, {1: [(0, 10), (5, 11)]})
    assert found(b) == {}


def test_nonmonotonic_poll():
    b = Builder()
    for offset in range(3):
        b.send(0, 1, 10 + offset, offset)
    first = b.poll(5, {1: [(0, 10), (1, 11)]})
    again = b.poll(5, {1: [(1, 11), (2, 12)]})
    assert found(b)["nonmonotonic-poll"]["examples"] == [
        {"key": 1, "offsets": [1, 1], "ops": [first, again]}]


def test_another_process_may_read_from_the_start():
    b = Builder()
    b.send(0, 1, 10, 0)
    b.poll(5, {1: [(0, 10)]})
    b.poll(6, {1: [(0, 10)]})
    assert found(b) == {}


def test_int_poll_skip_and_int_nonmonotonic_poll():
    b = Builder()
    for offset in range(3):
        b.send(0, 1, 10 + offset, offset)
    skip = b.poll(5, {1: [(0, 10), (2, 12)]})
    back = b.poll(6, {1: [(1, 11), (0, 10)]})
    anomalies = found(b)
    assert anomalies["int-poll-skip"]["examples"] == [
        {"key": 1, "offsets": [0, 2], "ops": [skip], "skipped": [1]}]
    assert anomalies["int-nonmonotonic-poll"]["examples"] == [
        {"key": 1, "offsets": [1, 0], "values": [11, 10], "ops": [back]}]


def test_nonmonotonic_send_across_ops_and_within_one():
    b = Builder()
    first = b.send(0, 1, 10, 4)
    second = b.send(0, 1, 11, 2)
    within = b.sends(1, [(2, 20, 1), (2, 21, 0)])
    anomalies = found(b)
    assert [w["ops"] for w in anomalies["nonmonotonic-send"]["examples"]] == [
        [first, second]]
    assert [w["ops"] for w in anomalies["int-nonmonotonic-send"]["examples"]] == [[within]]


def test_no_nonmonotonic_send_across_a_reassignment_that_dropped_the_key():
    b = Builder()
    b.send(0, 1, 10, 4)
    b.assign(0, [2])
    b.send(0, 1, 11, 2)
    assert "nonmonotonic-send" not in found(b)


def test_sends_by_different_processes_may_interleave():
    b = Builder()
    b.send(0, 1, 10, 1)
    b.send(1, 1, 11, 0)
    b.poll(5, {1: [(0, 11), (1, 10)]})
    assert found(b) == {}


def test_string_keys_of_polls_meet_integer_keys_of_sends():
    b = Builder()
    b.send(0, 7, 10, 0)
    b.poll(5, {"7": [(0, 10)]})
    analysis = analyse(b.ops)
    assert analysis.stats["keys"] == 1 and analysis.anomalies == {}


def test_witnesses_are_condensed_but_counted():
    b = Builder()
    for value in range(40):
        b.send(0, 1, value, kind="fail")
    b.poll(5, {1: [(o, o) for o in range(40)]})
    g1a = analyse(b.ops).anomalies["G1a"]
    assert g1a.count == 40 and len(g1a.examples) == 8


def test_malformed_queue_values_name_the_line():
    b = Builder()
    b.op(0, "send", [["send", 1]], "ok", [["send", 1]])
    with pytest.raises(HistoryError, match=r"<history>:1: send micro-op"):
        analyse(b.ops)
    with pytest.raises(ValueError, match="unknown micro-op"):
        events_of(0, 0, "ok", 0, "txn", [["frob"]], {})
    with pytest.raises(ValueError, match=r"\[offset, value\]"):
        events_of(0, 0, "ok", 0, "poll", [["poll", {"1": [[1, 2, 3]]}]], {})


def test_acks_labels_and_promises():
    assert [acks_label(a) for a in (0, "1", -1, "all", "ALL", None)] == [
        "0", "1", "all", "all", "all", "all"]
    with pytest.raises(ValueError):
        acks_label(2)
    assert promises_no_loss(SAFE)
    assert not promises_no_loss({**SAFE, "acks": 1})
    assert not promises_no_loss({"acks": "all", "broker_config": {"min.insync.replicas": "1"}})
    assert not promises_no_loss({**SAFE, "broker_config": {
        "min.insync.replicas": "2", "unclean.leader.election.enable": "true"}})


def test_allowed_anomalies_by_configuration():
    assert allowed_anomalies(SAFE) == frozenset({"int-send-skip"})
    assert {"poll-skip", "nonmonotonic-poll"} <= allowed_anomalies({**SAFE, "subscribe": True})
    assert {"lost-write", "unseen", "inconsistent-offsets", "nonmonotonic-send",
            "nonmonotonic-poll", "poll-skip"} <= allowed_anomalies({**SAFE, "acks": 1})
    assert "duplicate" in allowed_anomalies({**SAFE, "idempotence": False})


def test_allowed_loss_is_reported_not_failed():
    result = QueueChecker().check({**SAFE, "acks": 1},
                                  load_history(DATA / "lost-write-bad.jsonl"), {})
    assert result.valid is True
    assert result.allowed == ["lost-write"]
    assert result.anomalies["lost-write"].count == 1


def test_an_info_send_whose_value_was_read_counts_with_the_offset_its_completion_gave():
    b = Builder()
    info = b.op(0, "send", [["send", 1, 10]], "info", [["send", 1, [0, 10]]])
    other = b.send(1, 1, 11, 0)
    reader = b.poll(5, {1: [(1, 10)]})
    anomalies = found(b)
    assert anomalies["inconsistent-offsets"]["examples"] == [
        {"key": 1, "offset": 0, "values": [10, 11], "ops": [info, other]}]
    assert anomalies["duplicate"]["examples"] == [
        {"key": 1, "value": 10, "offsets": [0, 1], "ops": [info, reader]}]
