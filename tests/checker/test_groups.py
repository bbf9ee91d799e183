"""The groups checker on small hand-written consumer-group histories: each anomaly type
with an invalid case and a valid near miss, the stats, and an assign-mode history."""

from __future__ import annotations

from pathlib import Path

import pytest

from checker.core import Result
from checker.groups.checker import GroupsChecker
from checker.groups.membership import read_groups, rebalances
from checker.history import load_history
from checker.registry import CHECKERS, composed
from tests.support.group_histories import GroupBuilder

DATA = Path(__file__).parent.parent / "data"
AFTER = {"commit": "after-process"}
BEFORE = {"commit": "before-process"}


def check(b: GroupBuilder, opts: dict | None = None, test: dict | None = None) -> Result:
    return GroupsChecker().check(test or {}, b.ops, opts or AFTER)


def kinds(result: Result) -> dict[str, int]:
    return {kind: anomaly.count for kind, anomaly in result.anomalies.items()}


def witness(result: Result, kind: str) -> dict:
    (only,) = result.anomalies[kind].examples
    return only


def produced(b: GroupBuilder, key: int, values: list[int], process: str = "w") -> list[int]:
    """Ok sends of `values` to `key` at offsets 0, 1, ...; their completion indexes."""
    return [b.send(process, key, v, offset) for offset, v in enumerate(values)]


# --- applicability -----------------------------------------------------------------------------

def test_an_assign_mode_history_has_nothing_to_check_so_it_is_unknown_not_valid():
    result = GroupsChecker().check({}, load_history(DATA / "queue" / "ok.jsonl"), {})
    assert result.valid == "unknown" and result.anomalies == {}
    assert result.stats == {"applicable": False}
    assert result.error == "nothing to check: no consumer group in the history (assign mode)"


def test_registered_under_groups():
    assert CHECKERS["groups"] is GroupsChecker
    assert "groups" in composed(["groups"]).checkers


def test_a_clean_group_run_holds_every_promise():
    b = GroupBuilder()
    produced(b, 0, [10, 11, 12])
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.poll(1, {0: [(0, 10), (1, 11), (2, 12)]})
    b.commit(1, {0: 3})
    b.committed("final", {0: 3})
    result = check(b)
    assert result.valid is True and result.anomalies == {}
    stats = result.stats
    assert stats["mode"] == "at-least-once" and stats["commit"] == "after-process"
    assert stats["commit-inferred"] is False
    assert (stats["delivered"], stats["duplicates"], stats["undelivered"]) == (3, 0, 0)
    assert stats["rebalances"] == 1 and stats["generations"] == {"g0": 1}
    assert stats["groups"]["g0"]["commits"] == {"ok": 1, "fail": 0, "info": 0}


def test_mode_is_inferred_when_not_given():
    b = GroupBuilder()
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.commit(1, {0: 0})
    result = GroupsChecker().check({}, b.ops, {})
    assert (result.stats["commit"], result.stats["commit-inferred"]) == ("after-process", True)


# --- split-assignment --------------------------------------------------------------------------

def split_history(revoke_generation: int | None, assign_generation: int | None,
                  lost: bool = False) -> GroupBuilder:
    """p1 owns key 0 from generation 1; p2 is assigned it at 2 s; p1 revokes it at 3 s
    (or finds it lost then: a zombie)."""
    b = GroupBuilder()
    b.subscribe(1, [b.entry([0], 1, "m1", at=0.5)])
    b.at(2).subscribe(2, [b.entry([0], assign_generation, "m2", at=2)])
    b.at(3).poll(1, rebalances=[b.entry([0], revoke_generation, "m1", revoke=True, at=3,
                                        lost=lost)])
    return b


def test_split_assignment_two_members_own_a_key_across_generations():
    result = check(split_history(revoke_generation=1, assign_generation=2))
    assert kinds(result) == {"split-assignment": 1}
    found = witness(result, "split-assignment")
    assert found["members"] == [1, 2] and found["member-ids"] == ["m1", "m2"]
    assert found["generations"] == {"earlier-assigned": 1, "earlier-ended": 1,
                                    "earlier-ended-by": "revoked", "later-assigned": 2}
    assert found["overlap-s"] == [2.0, 3.0]
    assert found["ops"] == [1, 3, 5] and found["key"] == 0


def test_split_assignment_unknown_generations_never_excuse():
    result = check(split_history(revoke_generation=None, assign_generation=None))
    assert kinds(result) == {"split-assignment": 1}


def test_near_miss_a_zombie_that_finds_its_key_lost_splits_nothing():
    """p1 was paused past its session timeout: the key went to p2, and p1 learns on waking."""
    result = check(split_history(revoke_generation=None, assign_generation=None, lost=True))
    assert "split-assignment" not in result.anomalies


def test_near_miss_revocation_in_the_generation_of_the_new_assignment():
    """The revoke callback ran late but belongs to the rebalance that assigned p2."""
    result = check(split_history(revoke_generation=2, assign_generation=2))
    assert "split-assignment" not in result.anomalies


def test_under_the_consumer_protocol_equal_member_epochs_excuse_nothing():
    """KIP-848's coordinator moves a key only after its owner acknowledged the revocation,
    and the numbers are member epochs, each member's own: equal ones prove no rebalance."""
    history = split_history(revoke_generation=2, assign_generation=2)
    result = check(history, test={"group_protocol": "consumer"})
    assert kinds(result) == {"split-assignment": 1}
    assert result.stats["group-protocol"] == "consumer"
    assert check(history).stats["group-protocol"] == "classic"


def test_near_miss_revoke_then_assign_and_a_crashed_owner():
    b = GroupBuilder()
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.poll(1, rebalances=[b.entry([0], 1, "m1", revoke=True)])
    b.subscribe(2, [b.entry([0], 2, "m2")])
    b.crash(2, "abandon")
    b.subscribe(3, [b.entry([0], 3, "m3")])
    assert "split-assignment" not in check(b).anomalies


def test_near_miss_an_owner_whose_poll_never_answered_owns_only_until_that_poll_began():
    """p1's poll began at 1 s and got no answer (its revoke callback, if any, was in the
    lost reply) until 5 s; p2 got the key at 2 s: the overlap is not certain."""
    b = GroupBuilder()
    b.subscribe(1, [b.entry([0], None, "m1", at=0.5)])
    b.at(1).invoke(1, "poll", [["poll"]])
    b.at(2).subscribe(2, [b.entry([0], None, "m2", at=2)])
    b.at(5).complete(1, "poll", "info", [["poll"]], error="indeterminate: no answer")
    assert "split-assignment" not in check(b).anomalies
    b.at(6).subscribe(3, [b.entry([0], None, "m3", at=6)])
    assert witness(check(b), "split-assignment")["members"] == [2, 3]


# --- orphaned-partition ------------------------------------------------------------------------

def orphan_history(reassigned_at: float, fault: tuple[float, float] | None = None
                   ) -> GroupBuilder:
    """p1 owns keys 0 and 1 from 1 s, loses key 1 at 2 s; p2 gets key 1 at `reassigned_at`;
    p1 polls every second until 40 s; a nemesis fault in force over `fault` (seconds)."""
    b = GroupBuilder()
    b.send("w", 1, 100, 0)
    b.at(1).subscribe(1, [b.entry([0, 1], 1, "m1")])
    b.at(2).poll(1, rebalances=[b.entry([1], 1, "m1", revoke=True, lost=True)])
    for second in range(3, 41):
        b.at(second)
        if fault is not None and second == fault[0]:
            b.nemesis("start-partition", "majority")
        if fault is not None and second == fault[1]:
            b.nemesis("stop-partition", None)
        if second == int(reassigned_at):
            b.subscribe(2, [b.entry([1], 2, "m2", at=reassigned_at)])
        b.poll(1, {0: []})
    return b


def test_orphaned_partition_nobody_owns_a_key_past_the_bound():
    result = check(orphan_history(reassigned_at=28), {**AFTER, "session_timeout_ms": 6000})
    assert kinds(result).get("orphaned-partition") == 1
    found = witness(result, "orphaned-partition")
    assert found["key"] == 1 and found["bound-s"] == 20.0
    assert found["unowned-s"][0] == pytest.approx(2.0, abs=0.01)
    assert found["unowned-s"][1] == 28.0 and found["seconds"] == pytest.approx(26, abs=0.01)
    assert found["previous-owner"] == 1 and found["next-owner"] == 2
    assert len(found["ops"]) == 2


def test_near_miss_orphan_shorter_than_the_bound():
    result = check(orphan_history(reassigned_at=20), {**AFTER, "session_timeout_ms": 6000})
    assert "orphaned-partition" not in result.anomalies
    relaxed = check(orphan_history(reassigned_at=28), {**AFTER, "orphan_bound_s": 30})
    assert "orphaned-partition" not in relaxed.anomalies


def test_time_under_a_fault_does_not_count_towards_an_orphan():
    stalled = check(orphan_history(reassigned_at=28, fault=(5, 15)), AFTER)
    assert "orphaned-partition" not in stalled.anomalies
    longer = check(orphan_history(reassigned_at=36, fault=(5, 15)), AFTER)
    assert witness(longer, "orphaned-partition")["seconds"] == pytest.approx(24, abs=0.01)


def test_near_miss_no_orphan_while_no_member_polls():
    """Key 1 is unowned for 28 s, but the only member stopped polling at 2 s."""
    b = GroupBuilder()
    b.at(1).subscribe(1, [b.entry([0, 1], 1, "m1")])
    b.at(2).poll(1, {0: []}, rebalances=[b.entry([1], 1, "m1", revoke=True)])
    b.at(30).subscribe(2, [b.entry([1], 2, "m2")])
    assert "orphaned-partition" not in check(b).anomalies


# --- commit-skip -------------------------------------------------------------------------------

def test_commit_skip_commit_beyond_an_undelivered_record():
    b = GroupBuilder()
    sends = produced(b, 0, [10, 11, 12])
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.poll(1, {0: [(0, 10), (1, 11)]})
    commit = b.commit(1, {0: 3})
    b.poll(1, {0: [(2, 12)]})
    result = check(b)
    assert kinds(result) == {"commit-skip": 1}
    found = witness(result, "commit-skip")
    assert found["ops"] == [sends[2], commit]
    assert (found["committed"], found["offset"], found["value"]) == (3, 2, 12)
    assert found["delivered-at-s"] is not None


def test_near_miss_commit_of_delivered_records_only():
    b = GroupBuilder()
    produced(b, 0, [10, 11, 12])
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.poll(1, {0: [(0, 10), (1, 11)]})
    b.commit(1, {0: 2})
    b.poll(1, {0: [(2, 12)]})
    b.commit(1, {0: 3})
    assert check(b).valid is True


def test_commit_skip_shown_by_the_final_committed_read_in_auto_mode():
    b = GroupBuilder()
    produced(b, 0, [10, 11, 12])
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.poll(1, {0: [(0, 10)]})
    read = b.committed("final", {0: 3})
    result = check(b, {"commit": "auto"})
    assert kinds(result) == {"commit-skip": 1, "undelivered": 2}
    assert read in witness(result, "commit-skip")["ops"]
    assert result.stats["resume"].startswith("not checked")


def test_near_miss_commit_skip_is_not_checked_at_most_once():
    b = GroupBuilder()
    produced(b, 0, [10, 11])
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.poll(1, {}, commit={"offsets": {"0": 2}, "type": "fail", "time": b.time},
           unprocessed={"0": [0, 1]})
    b.poll(1, {}, commit={"offsets": {"0": 2}, "type": "ok", "time": b.time})
    result = check(b, BEFORE)
    assert result.valid is True
    assert result.stats["mode"] == "at-most-once" and result.stats["lost"] == 2


# --- commit-rewind -----------------------------------------------------------------------------

def test_commit_rewind_a_later_commit_below_an_earlier_one():
    b = GroupBuilder()
    produced(b, 0, list(range(10, 16)))
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.poll(1, {0: [(o, 10 + o) for o in range(6)]})
    first = b.commit(1, {0: 5})
    second = b.commit(1, {0: 3})
    result = check(b)
    assert kinds(result) == {"commit-rewind": 1}
    found = witness(result, "commit-rewind")
    assert found["ops"] == [first, second] and found["offsets"] == [5, 3]


def test_a_rewind_names_the_coordinator_fault_in_force_during_it():
    b = GroupBuilder()
    produced(b, 0, list(range(10, 16)))
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.nemesis("kill", {"n9": "killed"})
    b.nemesis("start", {"n9": "started"})
    isolated = b.nemesis("start-partition", {"group": "g0", "n2": ["n1", "n3"]})
    b.nemesis("kill", {"group": "other", "n3": "killed"})
    b.poll(1, {0: [(o, 10 + o) for o in range(6)]})
    b.commit(1, {0: 5})
    b.nemesis("stop-partition", None)
    b.commit(1, {0: 3})
    b.nemesis("kill", {"group": "g0", "n4": "killed"})
    faults = witness(check(b), "commit-rewind")["coordinator-faults"]
    assert [(f["op"], f["f"], f["target"]) for f in faults] == [
        (isolated, "start-partition", {"n2": ["n1", "n3"]})]


def test_near_miss_overlapping_commits_may_complete_in_any_order():
    b = GroupBuilder()
    produced(b, 0, list(range(10, 16)))
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.poll(1, {0: [(o, 10 + o) for o in range(6)]})
    b.invoke(1, "commit", {"0": 3})
    b.op(2, "commit", {"0": 5}, "ok", {"0": 5})
    b.complete(1, "commit", "ok", {"0": 3})
    assert "commit-rewind" not in check(b).anomalies


def test_commit_rewind_final_committed_read_below_the_largest_commit():
    b = GroupBuilder()
    produced(b, 0, [10, 11])
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.poll(1, {0: [(0, 10), (1, 11)]})
    commit = b.commit(1, {0: 2})
    read = b.committed("final", {0: None})
    result = check(b)
    assert kinds(result) == {"commit-rewind": 1}
    assert witness(result, "commit-rewind")["ops"] == [commit, read]
    assert witness(result, "commit-rewind")["offsets"] == [2, None]


# --- resume-skip / resume-rewind ---------------------------------------------------------------

def handover(first_offset: int, in_flight: bool = False) -> tuple[GroupBuilder, int]:
    """p1 delivers offsets 0..2 of key 0 and commits 3, revokes; p2 is assigned key 0 and
    first polls from `first_offset`. With `in_flight`, p1 also commits 5 from before the
    assignment to after it. Returns the builder and p2's first poll."""
    b = GroupBuilder()
    produced(b, 0, list(range(10, 18)))
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.poll(1, {0: [(0, 10), (1, 11), (2, 12)]})
    b.commit(1, {0: 3})
    if in_flight:
        b.poll(1, {0: [(3, 13), (4, 14)]})
        b.invoke(1, "commit", {"0": 5})
        revoke = b.entry([0], 1, "m1", revoke=True)
        b.poll(2, rebalances=[b.entry([0], 2, "m2")])
        b.complete(1, "commit", "ok", {"0": 5}, rebalances=[revoke])
    else:
        b.poll(1, rebalances=[b.entry([0], 1, "m1", revoke=True)])
        b.poll(2, rebalances=[b.entry([0], 2, "m2")])
    first = b.poll(2, {0: [(o, 10 + o) for o in range(first_offset, 8)]})
    return b, first


def test_near_miss_resume_at_the_committed_offset():
    b, _ = handover(3)
    result = check(b)
    assert result.valid is True, result.anomalies
    assert result.stats["duplicates"] == 0


def test_resume_skip_first_poll_after_the_committed_offset():
    b, first = handover(5)
    result = check(b)
    assert kinds(result) == {"resume-skip": 1, "undelivered": 2}
    found = witness(result, "resume-skip")
    assert found["member"] == 2 and found["generation"] == 2 and found["member-id"] == "m2"
    assert (found["committed"], found["expected-offset"], found["offset"]) == (3, 3, 5)
    assert found["skipped"] == 2 and first in found["ops"]


def test_resume_rewind_first_poll_before_the_committed_offset():
    b, first = handover(1)
    result = check(b)
    assert kinds(result) == {"resume-rewind": 1}
    found = witness(result, "resume-rewind")
    assert (found["committed"], found["offset"]) == (3, 1) and first in found["ops"]
    assert result.stats["duplicates"] == 2


def test_near_miss_resume_at_a_commit_in_flight_at_the_assignment():
    """A commit made while the group was preparing to rebalance, completed after the new
    owner's assignment: the new owner may resume at it, or at the older committed offset
    (then it re-delivers: duplicates, fine at at-least-once)."""
    b, _ = handover(5, in_flight=True)
    assert check(b).valid is True
    b, _ = handover(3, in_flight=True)
    result = check(b)
    assert result.valid is True and result.stats["duplicates"] == 2


def test_near_miss_zombie_polls_are_no_resume():
    b, _ = handover(3)
    b.poll(1, {0: [(1, 11)]})
    result = check(b)
    assert "resume-rewind" not in result.anomalies
    assert result.stats["groups"]["g0"]["zombie-deliveries"] == 1


def test_resume_without_commits_starts_at_the_beginning():
    b = GroupBuilder()
    produced(b, 0, [10, 11, 12])
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.poll(1, {0: [(1, 11), (2, 12)]})
    result = check(b)
    assert kinds(result) == {"resume-skip": 1, "undelivered": 1}
    assert witness(result, "resume-skip")["committed"] is None


# --- delivery: undelivered, duplicates, double-delivery ----------------------------------------

def test_undelivered_acknowledged_record_no_member_delivered():
    b = GroupBuilder()
    sends = produced(b, 0, [10, 11])
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.poll(1, {0: [(0, 10)]})
    b.assign_mode_poll("final-reader", {0: [(0, 10), (1, 11)]})
    result = check(b)
    assert kinds(result) == {"undelivered": 1}
    found = witness(result, "undelivered")
    assert found["ops"] == [sends[1]] and (found["offset"], found["value"]) == (1, 11)
    assert result.stats["undelivered"] == 1
    allowed = check(b, test={"final_reads": False})
    assert allowed.valid is True and allowed.allowed == ["undelivered"]


def test_undelivered_counts_an_unknown_send_that_was_read():
    b = GroupBuilder()
    send = b.send("w", 0, 10, kind="info")
    b.send("w2", 0, 11, kind="info")
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.assign_mode_poll("final-reader", {0: [(0, 10)]})
    result = check(b)
    assert kinds(result) == {"undelivered": 1}
    assert witness(result, "undelivered")["ops"] == [send]


def test_near_miss_duplicates_after_a_rebalance_are_fine_at_least_once():
    b = GroupBuilder()
    produced(b, 0, [10, 11, 12])
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.poll(1, {0: [(0, 10), (1, 11), (2, 12)]})
    b.commit(1, {0: 1})
    b.poll(1, rebalances=[b.entry([0], 1, "m1", revoke=True)])
    assign = b.poll(2, rebalances=[b.entry([0], 2, "m2")])
    b.poll(2, {0: [(1, 11), (2, 12)]})
    result = check(b)
    assert result.valid is True
    assert (result.stats["delivered"], result.stats["duplicates"]) == (3, 2)
    (row,) = result.stats["duplicates_by_rebalance"]
    assert (row["generation"], row["member"], row["key"], row["duplicates"]) == (2, 2, 0, 2)
    assert row["op"] == assign and row["member-id"] == "m2"


def test_double_delivery_at_most_once():
    b = GroupBuilder()
    produced(b, 0, [10, 11])
    b.subscribe(1, [b.entry([0], 1, "m1")])
    first = b.poll(1, {0: [(0, 10)]}, commit={"offsets": {"0": 1}, "type": "info",
                                               "time": b.time})
    b.poll(1, rebalances=[b.entry([0], 1, "m1", revoke=True)])
    b.poll(2, rebalances=[b.entry([0], 2, "m2")])
    second = b.poll(2, {0: [(0, 10), (1, 11)]}, commit={"offsets": {"0": 2}, "type": "ok",
                                                         "time": b.time})
    result = check(b, BEFORE)
    assert kinds(result) == {"double-delivery": 1}
    found = witness(result, "double-delivery")
    assert found["ops"] == [first, second] and found["members"] == [1, 2]
    assert (found["offset"], found["value"], found["deliveries"]) == (0, 10, 2)
    assert found["rebalance"]["generation"] == 2 and found["rebalance"]["member"] == 2
    assert result.stats["mode"] == "at-most-once" and result.stats["lost"] == 0


# --- the model ---------------------------------------------------------------------------------

def test_ownership_ends_with_the_process_and_rebalances_span_revoke_to_assign():
    b = GroupBuilder()
    b.at(1).subscribe(1, [b.entry([0, 1], 1, "m1")])
    b.at(2).subscribe(2)
    b.poll(1, rebalances=[b.entry([0, 1], 1, "m1", revoke=True, at=2)])
    b.at(3).poll(1, rebalances=[b.entry([0], 2, "m1", at=3)])
    b.poll(2, rebalances=[b.entry([1], 2, "m2", at=3.5)])
    b.at(5).crash(2)
    (group,) = read_groups(b.ops).groups.values()
    ended = [o for o in group.ownerships if o.process == 2]
    assert [(o.key, o.end_reason, o.end) for o in ended] == [(1, "process-end", b.time)]
    spans = [(r.generation, r.start / 1e9, r.end / 1e9) for r in rebalances(group)]
    assert spans == [(1, 1.0005, 1.0005), (2, 2.0, 3.5)]


def test_near_miss_resume_at_a_commit_that_never_completed():
    """p1's commit of 5 never completes (its process is gone): it may have taken effect,
    so p2 may resume at 5; it is counted as a commit of unknown outcome."""
    b = GroupBuilder()
    produced(b, 0, list(range(10, 18)))
    b.subscribe(1, [b.entry([0], 1, "m1")])
    b.poll(1, {0: [(o, 10 + o) for o in range(5)]})
    b.commit(1, {0: 3})
    b.invoke(1, "commit", {"0": 5})
    b.poll(2, rebalances=[b.entry([0], 2, "m2")])
    b.poll(2, {0: [(o, 10 + o) for o in range(5, 8)]})
    result = check(b)
    assert result.valid is True, result.anomalies
    assert result.stats["groups"]["g0"]["commits"] == {"ok": 1, "fail": 0, "info": 1}
