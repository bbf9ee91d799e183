"""The queue, acks and elections checkers answer "unknown" with the reason past their time
or memory (events per key) budget, in process and on Spark, never a hang or a guess."""

from __future__ import annotations

import pytest

from checker.history import write_jsonl
from checker.registry import composed
from tests.support.queue_histories import Builder

SAFE = {"acks": "all", "broker_config": {"min.insync.replicas": "2"}}
CHECKERS = ["queue", "acks", "elections"]


def history():
    b = Builder()
    for value in range(10):
        b.send("p", "big", value, offset=value)
    b.send("p", "small", 100, offset=0)
    b.poll("q", {"big": [[o, o] for o in range(10)], "small": [[0, 100]]})
    return b.ops


@pytest.mark.parametrize(("budget", "reason"), [
    ({"queue_budget_key_events": 5}, "key 'big': 21 events exceed the memory budget of 5"),
    ({"queue_budget_seconds": 0}, "the time budget of 0 s was spent"),
])
def test_past_the_budget_every_analysis_checker_is_unknown_with_the_reason(budget, reason):
    result = composed(CHECKERS).check({**SAFE, **budget}, history(), {})
    assert result.valid == "unknown"
    for name in CHECKERS:
        assert result.checkers[name].valid == "unknown", name
        assert reason in result.checkers[name].error, name


def test_within_the_budget_the_verdict_is_decided():
    result = composed(CHECKERS).check({**SAFE, "queue_budget_key_events": 100}, history(), {})
    assert result.valid is True


@pytest.mark.spark
def test_on_spark_a_key_over_the_memory_budget_is_never_gathered(spark, tmp_path):
    from checker.spark import check_history_on_spark

    path = tmp_path / "history.jsonl"
    write_jsonl(history(), path)
    result = check_history_on_spark(spark, SAFE, path, composed(CHECKERS),
                                    {"queue_budget_key_events": 5})
    assert result.valid == "unknown"
    assert "memory budget of 5" in result.checkers["queue"].error
    decided = check_history_on_spark(spark, SAFE, path, composed(CHECKERS), {})
    assert decided.valid is True
