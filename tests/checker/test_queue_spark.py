"""Queue, acks and election checkers through Spark give the local results, and reject a
malformed history as `read_queue_ops` does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checker.cluster.elections import ElectionChecker
from checker.core import Result, compose
from checker.history import load_history
from checker.history.errors import HistoryError
from checker.queue.acks import AcksChecker
from checker.queue.analysis import AnalysisChecker, QueueAnalysis, QueueChecker
from checker.queue.events import read_queue_ops
from checker.spark import check_histories_on_spark, check_history_on_spark
from checker.spark.sources import is_shared
from tests.support.interleaved import MALFORMED, interleaved, malformed, write_history
from tests.support.queue_histories import INJECTIONS, Builder, inject, simulate
from tests.support.results import without_seconds

pytestmark = pytest.mark.spark

TEST = {"acks": "all", "broker_config": {"min.insync.replicas": 2}, "start_wall_ms": 0}


def checkers() -> dict:
    return {"queue": QueueChecker(), "acks": AcksChecker(), "elections": ElectionChecker()}


def write(tmp_path, b: Builder, name: str = "history.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(op.to_json()) + "\n" for op in b.ops))
    return str(path)


def test_spark_finds_what_the_local_checkers_find(tmp_path, spark):
    b = simulate(11, 400, keys=5)
    for number, kind in enumerate(INJECTIONS):
        inject(b, kind, key=f"k{number}")
    path = write(tmp_path, b)
    timings: dict[str, float] = {}
    on_spark = check_history_on_spark(spark, TEST, path, checkers(), timings=timings)
    local = compose(checkers()).check(TEST, load_history(path), {})
    assert without_seconds(on_spark.to_json()) == without_seconds(local.to_json())
    assert set(on_spark.checkers["queue"].anomalies) == set(INJECTIONS)
    assert on_spark.valid is False and set(timings) == {"load", "check"}


def test_spark_on_a_valid_history(tmp_path, spark):
    path = write(tmp_path, simulate(3, 300))
    result = check_history_on_spark(spark, TEST, path, checkers())
    assert result.valid is True
    assert result.checkers["queue"].stats["sends"] > 0


def test_other_checkers_run_on_the_driver_with_the_history(tmp_path, spark):
    class Counting:
        def check(self, test, history, opts):
            return Result(True, stats={"ops": len(history)})

    b = simulate(5, 20)
    result = check_history_on_spark(spark, TEST, write(tmp_path, b), {"count": Counting()})
    assert result.checkers["count"].stats == {"ops": len(b.ops)}


def test_a_malformed_line_names_the_file_and_line(tmp_path, spark):
    b = simulate(5, 30)
    path = tmp_path / "bad.jsonl"
    lines = [json.dumps(op.to_json()) for op in b.ops]
    lines[7] = '{"index": 7, "time": 1, "type": "okay", "process": 0, "f": "poll"}'
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(HistoryError, match=r"bad.jsonl:8: unknown type 'okay'"):
        check_history_on_spark(spark, TEST, path, checkers())


def test_an_empty_history_tested_nothing(tmp_path, spark):
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    result = check_history_on_spark(spark, TEST, path, checkers())
    assert result.valid is False
    assert set(result.checkers["queue"].anomalies) == {"empty-history"}
    assert result.checkers["acks"].valid is True


def test_a_composed_checker_gives_the_composed_result_of_its_checkers(tmp_path, spark):
    b = simulate(7, 200, keys=4)
    inject(b, "lost-write", key="k0")
    path = write(tmp_path, b)
    nested = compose({"queue": QueueChecker(),
                      "more": compose({"acks": AcksChecker(), "elections": ElectionChecker()})})
    on_spark = check_history_on_spark(spark, TEST, path, nested)
    by_mapping = check_history_on_spark(spark, TEST, path, dict(nested.checkers))
    local = nested.check(TEST, load_history(path), {})
    assert without_seconds(on_spark.to_json()) == without_seconds(local.to_json())
    assert without_seconds(by_mapping.to_json()) == without_seconds(local.to_json())
    assert on_spark.valid is False
    assert set(on_spark.checkers["more"].checkers) == {"acks", "elections"}


def test_analysis_checkers_get_the_analysis_and_others_the_history(tmp_path, spark):
    seen = {}

    class FromAnalysis(AnalysisChecker):
        def check(self, test, history, opts):
            raise AssertionError("an AnalysisChecker is given the analysis, not the history")

        def check_analysis(self, test, analysis, opts):
            seen["analysis"] = analysis
            return Result(True, stats=dict(analysis.stats))

    class LooksLikeOne:
        """Has check_analysis, but is not an AnalysisChecker: a plain checker."""

        def check_analysis(self, test, analysis, opts):
            raise AssertionError("only AnalysisCheckers are given the analysis")

        def check(self, test, history, opts):
            return Result(True, stats={"ops": len(history)})

    class Crashing(AnalysisChecker):
        def check_analysis(self, test, analysis, opts):
            raise RuntimeError("boom")

    b = simulate(5, 40)
    result = check_history_on_spark(spark, TEST, write(tmp_path, b), {
        "analysis": FromAnalysis(), "plain": LooksLikeOne(), "crashing": Crashing()})
    assert isinstance(seen["analysis"], QueueAnalysis)
    assert result.checkers["analysis"].stats["sends"] == seen["analysis"].stats["sends"] > 0
    assert result.checkers["plain"].stats == {"ops": len(b.ops)}
    assert result.checkers["crashing"].valid == "unknown"
    assert result.checkers["crashing"].error.startswith("RuntimeError: boom")
    assert result.valid == "unknown"


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_histories_fail_as_read_queue_ops(tmp_path, spark, name):
    """The driver reads a history as `read_queue_ops` does (read_history, then each op's
    micro-ops): the same file, line (past blank lines) and reason, by path or by URL."""
    path = malformed(tmp_path / "history.jsonl", name)
    with pytest.raises(HistoryError) as sequential:
        read_queue_ops(path, "jsonl")
    for source in (path, path.as_uri()):
        with pytest.raises(HistoryError) as on_spark:
            check_history_on_spark(spark, TEST, source, checkers())
        assert (on_spark.value.path, on_spark.value.line, on_spark.value.reason) == (
            str(source), sequential.value.line, sequential.value.reason)


def test_a_violation_far_from_its_invoke_names_the_completion_line(tmp_path, spark):
    """Process 0 invokes, and completes with another f many lines later."""
    ops = interleaved(3, 160)
    invoke = next(i for i, op in enumerate(ops) if op["type"] == "invoke" and op["process"] == 0)
    done = next(j for j in range(invoke + 1, len(ops)) if ops[j]["process"] == 0)
    ops[done]["f"] = "poll" if ops[done]["f"] == "send" else "send"
    path = write_history(tmp_path / "history.jsonl", ops, blank_every=5)
    with pytest.raises(HistoryError) as sequential:
        load_history(path)
    with pytest.raises(HistoryError) as on_spark:
        check_history_on_spark(spark, TEST, path, checkers())
    assert on_spark.value.line == sequential.value.line
    assert on_spark.value.reason == sequential.value.reason
    assert "but process 0 invoked" in on_spark.value.reason


def test_many_histories_in_one_job_give_each_its_own_result(tmp_path, spark):
    """Histories using the same key names are checked key by key in one Spark job, each as
    if alone, one of them read from its URL; a malformed one gives its HistoryError in its
    place."""
    lossy = simulate(4, 200, keys=3)
    inject(lossy, "lost-write", key="k0")
    paths = [write(tmp_path, simulate(3, 300), "valid.jsonl"),
             write(tmp_path, lossy, "lossy.jsonl"),
             str(malformed(tmp_path / "bad.jsonl", "index gap"))]
    with pytest.raises(HistoryError) as alone:
        check_history_on_spark(spark, TEST, paths[2], checkers())
    timings: dict[str, float] = {}
    valid, lost, bad = check_histories_on_spark(
        spark, [(TEST, paths[0], checkers(), None), (TEST, Path(paths[1]).as_uri(), checkers(),
                                                    None), (TEST, paths[2], checkers(), None)],
        timings=timings)
    for path, together in ((paths[0], valid), (paths[1], lost)):
        local = compose(checkers()).check(TEST, load_history(path), {})
        assert without_seconds(together.to_json()) == without_seconds(local.to_json())
    assert "lost-write" in lost.checkers["queue"].anomalies
    assert "lost-write" not in valid.checkers["queue"].anomalies
    assert isinstance(bad, HistoryError) and str(bad) == str(alone.value)
    assert set(timings) == {"load", "check"}


def test_over_budget_keys_are_unknown_on_spark_as_in_process(tmp_path, spark):
    b = simulate(6, 300, keys=3)
    path = write(tmp_path, b)
    opts = {"queue_budget_key_events": 40}
    on_spark = check_history_on_spark(spark, TEST, path, checkers(), opts)
    local = compose(checkers()).check(TEST, load_history(path), opts)
    assert without_seconds(on_spark.to_json()) == without_seconds(local.to_json())
    assert on_spark.checkers["queue"].valid == "unknown"
    assert "exceed the memory budget of 40" in on_spark.checkers["queue"].error


def test_a_history_given_as_a_url_is_read_by_the_executors(tmp_path, spark):
    b = simulate(7, 200, keys=4)
    inject(b, "duplicate", key="k1")
    path = tmp_path / "history.jsonl"
    write(tmp_path, b)
    assert is_shared(path.as_uri()) and not is_shared(str(path)) and not is_shared(path)

    class Counting:
        def check(self, test, history, opts):
            return Result(True, stats={"ops": len(history)})

    by_url = check_history_on_spark(spark, TEST, path.as_uri(), {**checkers(),
                                                                 "count": Counting()})
    by_path = check_history_on_spark(spark, TEST, path, {**checkers(), "count": Counting()})
    assert without_seconds(by_url.to_json()) == without_seconds(by_path.to_json())
    assert by_url.checkers["count"].stats == {"ops": len(b.ops)}
    bad = malformed(tmp_path / "bad.jsonl", "unknown type")
    with pytest.raises(HistoryError) as sequential:
        load_history(bad)
    with pytest.raises(HistoryError) as on_spark:
        check_history_on_spark(spark, TEST, bad.as_uri(), checkers())
    assert (on_spark.value.path, on_spark.value.line, on_spark.value.reason) == (
        bad.as_uri(), sequential.value.line, sequential.value.reason)
