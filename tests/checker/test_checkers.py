"""The checker protocol: verdict merging, composition, crash safety, result JSON, and
checkers that work from the queue analysis."""

from __future__ import annotations

import json

import pytest

from checker.cluster.elections import ElectionChecker
from checker.core import (
    Anomaly,
    KeyedChecker,
    Memo,
    Result,
    check_by_key,
    check_safe,
    compose,
    condense,
    merge_valid,
)
from checker.lin.checker import LinearizabilityChecker
from checker.lin.files import FileJob, summarise
from checker.lin.search import PartitionResult
from checker.queue.acks import AcksChecker
from checker.queue.analysis import AnalysisChecker, QueueChecker, analyse, check_analysis_safe
from harness.exit_codes import for_files
from tests.support.queue_histories import Builder, simulate


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


def test_queue_acks_and_election_checkers_are_analysis_checkers():
    for checker in (QueueChecker(), AcksChecker(), ElectionChecker()):
        assert isinstance(checker, AnalysisChecker)
    assert not isinstance(Fixed(True), AnalysisChecker)
    with pytest.raises(TypeError, match="abstract"):
        AnalysisChecker()

    class WithoutAnalysis(AnalysisChecker):
        pass

    with pytest.raises(TypeError, match="check_analysis"):
        WithoutAnalysis()


def test_an_analysis_checker_checks_a_history_through_its_analysis():
    b = Builder()
    b.send(0, 1, 10, kind="fail")
    b.poll(5, {1: [(0, 10)]})
    given = []

    class Recording(AnalysisChecker):
        def check_analysis(self, test, analysis, opts):
            given.append(analysis)
            return Result(not analysis.anomalies)

    assert Recording().check({}, b.ops, {}).valid is False
    assert set(given[0].anomalies) == {"G1a"}
    ready = analyse([])
    memo = Memo()
    memo.get("queue-analysis", lambda: ready)
    assert Recording().check({}, b.ops, {"memo": memo}).valid is True
    assert given[1] is ready
    by_history = QueueChecker().check({}, b.ops, {})
    by_analysis = QueueChecker().check_analysis({}, analyse(b.ops), {})
    assert (by_history.valid, by_history.anomalies) == (by_analysis.valid, by_analysis.anomalies)


def test_check_analysis_safe_turns_a_crash_into_unknown():
    class Crashing(AnalysisChecker):
        def check_analysis(self, test, analysis, opts):
            raise ValueError("bad analysis")

    result = check_analysis_safe(Crashing(), {}, analyse([]), {})
    assert result.valid == "unknown"
    assert result.error.startswith("ValueError: bad analysis at ")
    assert check_analysis_safe(QueueChecker(), {}, analyse([]), {}).valid is False  # empty


def _partition(valid):
    return PartitionResult(partition=repr(valid), ops=1, valid=valid, seconds=0.0)


@pytest.mark.parametrize(("verdicts", "merged", "code"), [
    ([], True, 0),
    ([True, True], True, 0),
    ([True, "unknown"], "unknown", 2),
    (["unknown", False, True], False, 1),
])
def test_file_verdicts_and_exit_codes_merge_as_merge_valid(verdicts, merged, code):
    job = FileJob(path="h", model="kv", ops=len(verdicts))
    result = summarise(job, [_partition(v) for v in verdicts], complete=True)
    assert result.valid == merged == merge_valid(verdicts)
    assert for_files([result]) == code
    errored = summarise(FileJob(path="e", error="boom"), [], complete=True)
    assert errored.valid is None and for_files([result, errored]) == 3


def test_a_memo_computes_once_and_keeps_no_failure():
    memo, calls = Memo(), []

    def compute():
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("first try")
        return len(calls)

    with pytest.raises(ValueError):
        memo.get("x", compute)
    assert memo.get("x", compute) == 2
    assert memo.get("x", compute) == 2
    assert len(calls) == 2


def test_the_linearizability_checker_is_keyed():
    checker = LinearizabilityChecker()
    assert isinstance(checker, KeyedChecker)
    assert not isinstance(QueueChecker(), KeyedChecker)
    b = simulate(seed=1, steps=200, keys=3)
    assert check_by_key(checker, {}, b.ops, {}).stats["keys"] == 3
