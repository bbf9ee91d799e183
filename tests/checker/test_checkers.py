"""The checker protocol: verdict merging, composition, crash safety, result JSON."""

from __future__ import annotations

import json

from checker.checkers import Anomaly, Result, check_safe, compose, condense, merge_valid
from checker.queue import QueueChecker
from tests.support.queue_histories import Builder


class Fixed:
    def __init__(self, valid):
        self.valid = valid

    def check(self, test, history, opts):
        return Result(self.valid, stats={"ops": len(history)})


class Crashing:
    def check(self, test, history, opts):
        raise KeyError("boom")


def test_merge_valid_prefers_false_then_unknown():
    assert merge_valid([]) is True
    assert merge_valid([True, True]) is True
    assert merge_valid([True, "unknown"]) == "unknown"
    assert merge_valid(["unknown", False, True]) is False


def test_check_safe_turns_a_crash_into_unknown_with_the_error():
    result = check_safe(Crashing(), {}, [], {})
    assert result.valid == "unknown"
    assert result.error.startswith("KeyError: 'boom' at ")


def test_compose_runs_every_checker_and_merges():
    composed = compose({"a": Fixed(True), "b": Crashing(), "c": Fixed(True)})
    result = composed.check({}, [1, 2], {})
    assert result.valid == "unknown"
    assert set(result.checkers) == {"a", "b", "c"}
    assert result.checkers["a"].stats == {"ops": 2}
    assert compose({"a": Fixed(True), "b": Fixed(False)}).check({}, [], {}).valid is False


def test_results_round_trip_through_json():
    b = Builder()
    b.send(0, 1, 10, kind="fail")
    b.poll(5, {1: [(0, 10)]})
    result = compose({"queue": QueueChecker(), "fixed": Fixed(True)}).check({}, b.ops, {})
    body = json.loads(json.dumps(result.to_json()))
    assert body["valid"] is False
    assert body["checkers"]["queue"]["anomalies"]["G1a"]["count"] == 1
    assert Result.from_json(body).to_json() == body


def test_condense_keeps_all_up_to_32_then_8():
    assert condense([{"i": i} for i in range(32)]) == Anomaly(32, [{"i": i} for i in range(32)])
    assert condense([{"i": i} for i in range(33)]).examples == [{"i": i} for i in range(8)]
    sampled = condense([{"i": i} for i in range(9)], count=100)
    assert sampled == Anomaly(100, [{"i": i} for i in range(8)])
