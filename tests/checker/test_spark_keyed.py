"""Every KeyedChecker on Spark, key by key: the Result its `check` gives in process, a
crash as that checker's unknown verdict, the other checkers alongside."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from checker.core import KeyedChecker, Result, compose
from checker.history import write_jsonl
from checker.lin.checker import LinearizabilityChecker
from checker.queue.acks import AcksChecker
from checker.queue.analysis import AnalysisCheckers, QueueChecker
from checker.spark import check_history_on_spark
from checker.spark.keyed import check_keyed_on_spark
from tests.support.queue_histories import Builder, inject, simulate
from tests.support.results import without_seconds

pytestmark = pytest.mark.spark


def comparable(result: Result) -> dict:
    """Without times, nor the configuration counts that the search's time slices decide."""
    body = without_seconds(result.to_json())
    for lin in [body] + list(body.get("checkers", {}).values()):
        stats = lin.get("stats", {})
        stats.pop("configurations", None)
        for part in stats.get("partition_results", []):
            part.pop("configurations", None)
    return body


@dataclass(frozen=True)
class CrashingKey(LinearizabilityChecker):
    """Crashes on key 1 only."""

    def check_key(self, test, key, part, opts):
        if key == 1:
            raise RuntimeError("key one")
        return super().check_key(test, key, part, opts)


@dataclass(frozen=True)
class Threaded:
    """A plain checker that records the thread it ran on."""

    seen: list

    def check(self, test, history, opts):
        self.seen.append(threading.current_thread().name)
        return Result(True)


def test_keys_on_spark_give_what_the_calling_process_gives(spark):
    b = simulate(seed=3, steps=400, keys=4)
    inject(b, "lost-write", key=2)
    history = b.ops
    test = {"acks": "all", "broker_config": {"min.insync.replicas": 2}}
    checkers = [LinearizabilityChecker(), CrashingKey()]
    [on_spark] = check_keyed_on_spark(spark, [(test, history, checkers, {})])
    here = LinearizabilityChecker().check(test, history, {})
    assert comparable(on_spark[0]) == comparable(here)
    assert on_spark[0].valid is False and here.stats["keys"] == 4
    assert on_spark[1].valid == "unknown"
    assert on_spark[1].error.startswith("key 1: RuntimeError: key one")


def test_a_history_runs_keyed_analysis_and_plain_checkers_together(spark, tmp_path):
    b = simulate(seed=5, steps=300, keys=3)
    path = tmp_path / "history.jsonl"
    write_jsonl(b.ops, path)
    seen: list[str] = []
    checkers = {"queue": QueueChecker(), "acks": AcksChecker(),
                "linearizability": LinearizabilityChecker(), "plain": Threaded(seen)}
    on_spark = check_history_on_spark(spark, {}, path, checkers)
    here = compose(checkers).check({}, b.ops, {})
    assert comparable(on_spark) == comparable(here)
    assert seen[0].startswith("kchaos-checker")


def test_a_split_that_crashes_is_that_checkers_unknown_verdict(spark):
    history = Builder().ops
    [result] = check_keyed_on_spark(spark, [({"linearizability_budget_seconds": -1}, history,
                                              [LinearizabilityChecker()], {})])
    assert result[0].valid == "unknown"
    assert "linearizability budget must be positive" in result[0].error


def test_the_queue_analysis_is_a_keyed_checker_of_its_analysis_checkers(spark):
    b = simulate(seed=9, steps=300, keys=4)
    inject(b, "lost-write", key=1)
    inject(b, "duplicate", key=3)
    test = {"acks": "all", "broker_config": {"min.insync.replicas": 2}}
    named = {"queue": QueueChecker(), "acks": AcksChecker()}
    analysed = AnalysisCheckers(named)
    assert isinstance(analysed, KeyedChecker)
    parts = analysed.split(test, b.ops, {})
    assert [key for key, _ in parts] == sorted({key for key, _ in parts}, key=repr)
    here = compose(named).check(test, b.ops, {})
    assert comparable(analysed.check(test, b.ops, {})) == comparable(here)
    [[on_spark]] = check_keyed_on_spark(spark, [(test, b.ops, [analysed], {})])
    assert comparable(on_spark) == comparable(here)
    assert set(on_spark.checkers["queue"].anomalies) >= {"lost-write", "duplicate"}


@dataclass(frozen=True)
class CrashingAnalysis(AnalysisCheckers):
    """Crashes on key 1's analysis."""

    def check_key(self, test, key, part, opts):
        if key == 1:
            raise RuntimeError("no analysis of key one")
        return super().check_key(test, key, part, opts)


def test_a_key_whose_analysis_crashes_makes_the_analysis_unknown(spark):
    b = simulate(seed=4, steps=100, keys=3)
    [[result]] = check_keyed_on_spark(spark, [({}, b.ops, [CrashingAnalysis(
        {"queue": QueueChecker()})], {})])
    assert result.valid == "unknown"
    assert result.error.startswith("key 1: RuntimeError: no analysis of key one")


def test_each_kind_of_checker_is_one_job_over_the_keys_of_every_history(spark):
    lossy, clean = simulate(seed=1, steps=200, keys=3), simulate(seed=2, steps=200, keys=2)
    inject(lossy, "lost-write", key=0)
    test = {"acks": "all", "broker_config": {"min.insync.replicas": 2}}
    checkers = [AnalysisCheckers({"queue": QueueChecker()}), LinearizabilityChecker()]
    jobs_before = spark.sparkContext.statusTracker().getJobIdsForGroup()
    answers = check_keyed_on_spark(spark, [(test, lossy.ops, checkers, {}),
                                           (test, clean.ops, checkers, {})])
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup()
    assert len(jobs) - len(jobs_before) == len(checkers)
    for history, results in zip((lossy, clean), answers, strict=True):
        assert [comparable(r) for r in results] == [
            comparable(c.check(test, history.ops, {})) for c in checkers]
    assert answers[0][0].valid is False and answers[1][0].valid is True
