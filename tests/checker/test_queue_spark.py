"""Queue, acks and election checkers through Spark give the local results."""

from __future__ import annotations

import json

import pytest

from checker.acks import AcksChecker
from checker.checkers import Result, compose
from checker.elections import ElectionChecker
from checker.errors import HistoryError
from checker.history import load_history
from checker.queue import QueueChecker
from checker.spark import check_history_on_spark
from tests.support.queue_histories import INJECTIONS, Builder, inject, simulate

pytestmark = pytest.mark.spark

TEST = {"acks": "all", "broker_config": {"min.insync.replicas": 2}, "start_wall_ms": 0}


def checkers() -> dict:
    return {"queue": QueueChecker(), "acks": AcksChecker(), "elections": ElectionChecker()}


def write(tmp_path, b: Builder, name: str = "history.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(op.to_json()) + "\n" for op in b.ops))
    return str(path)


def without_seconds(body):
    if isinstance(body, dict):
        return {k: without_seconds(v) for k, v in body.items() if k != "seconds"}
    if isinstance(body, list):
        return [without_seconds(v) for v in body]
    return body


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


def test_an_empty_history_is_valid(tmp_path, spark):
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    assert check_history_on_spark(spark, TEST, path, checkers()).valid is True
