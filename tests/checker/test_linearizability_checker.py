"""LinearizabilityChecker: a queue history in, a Result with witnesses and partition results out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checker.core import Result, compose
from checker.history import Op, load_history
from checker.lin.checker import (
    BUDGET_CONFIGURATIONS,
    BUDGET_SECONDS,
    LinearizabilityChecker,
    budget_of,
)
from checker.lin.models import CAS_REGISTER, KV
from checker.lin.search import Budget
from checker.queue.analysis import QueueChecker
from tests.support.queue_histories import Builder, simulate

SAFE = {"acks": "all", "broker_config": {"min.insync.replicas": 2,
                                         "unclean.leader.election.enable": False}}


def write_jsonl(ops: list[Op], path: Path) -> Path:
    path.write_text("".join(json.dumps(op.to_json()) + "\n" for op in ops))
    return path


def stale_read_history(tmp_path: Path) -> tuple[Path, int, int]:
    """A valid simulated run, then on key "x": b is polled at offset 1, then a stale leader's
    record c is polled there. Returns the file, the stale poll's and b's invoke indices."""
    b = simulate(7, 200)
    b.send("p", "x", 1001, 0)
    newer = b.send("p", "x", 1002, 1) - 1
    b.poll("q", {"x": [(0, 1001), (1, 1002)]})
    b.send("r", "x", 1003, kind="info")
    stale = b.poll("s", {"x": [(0, 1001), (1, 1003)]}) - 1
    return write_jsonl(b.ops, tmp_path / "history.jsonl"), stale, newer


def test_stale_read_in_a_jsonl_history_is_a_nonlinearizable_anomaly(tmp_path):
    path, stale, newer = stale_read_history(tmp_path)
    result = LinearizabilityChecker().check(SAFE, load_history(path), {})
    assert result.valid is False and result.allowed == [] and result.error is None
    anomaly = result.anomalies["nonlinearizable"]
    assert anomaly.count == 1
    [witness] = anomaly.examples
    assert witness["key"] == "x" and witness["stuck"] == stale
    assert witness["ops"] == [stale, newer - 2, newer]
    assert witness["offsets"] == [0, 1] and witness["values"] == [1001, 1003]
    assert witness["records"] == 2
    assert witness["problem"] == f"reads 1003 at offset 1, which holds 1002 (send #{newer})"
    assert witness["state"] == "log of 2 records, the last 1002 at offset 1"
    assert witness["prefix-length"] == 3
    assert witness["pending"] == [stale - 2]  # the unknown send of 1003, open forever
    by_key = {p["partition"]: p for p in result.stats["partition_results"]}
    assert set(by_key) == {0, 1, 2, "x"}
    assert [by_key[k]["valid"] for k in (0, 1, 2)] == [True, True, True]
    example = by_key["x"]["counterexample"]
    assert example["stuck"] == [stale]
    assert "impossible: reads 1003 at offset 1" in example["descriptions"][str(stale)]
    assert result.stats["model"] == "log" and result.stats["keys"] == 4
    assert Result.from_json(json.loads(json.dumps(result.to_json()))).to_json() == \
        result.to_json()


def test_a_valid_history_and_the_composition(tmp_path):
    history = load_history(write_jsonl(simulate(3, 400).ops, tmp_path / "history.jsonl"))
    composed = compose({"queue": QueueChecker(), "linearizability": LinearizabilityChecker()})
    result = composed.check(SAFE, history, {})
    assert result.valid is True
    lin = result.checkers["linearizability"]
    assert lin.valid is True and lin.anomalies == {} and lin.seconds > 0
    assert all(p["valid"] is True for p in lin.stats["partition_results"])


def test_allowed_when_the_configuration_does_not_promise_a_linearizable_log(tmp_path):
    path, _, _ = stale_read_history(tmp_path)
    acks1 = {**SAFE, "acks": "1"}
    result = LinearizabilityChecker().check(acks1, load_history(path), {})
    assert result.valid is True and result.allowed == ["nonlinearizable"]
    assert result.anomalies["nonlinearizable"].count == 1


def test_budget_defaults_then_test_then_opts():
    default = Budget(5.0, 100)
    assert budget_of({}, {}, default) == default
    test = {BUDGET_SECONDS: 2, BUDGET_CONFIGURATIONS: 50}
    assert budget_of(test, {}, default) == Budget(2.0, 50)
    assert budget_of(test, {BUDGET_SECONDS: 1.5}, default) == Budget(1.5, 50)
    with pytest.raises(ValueError, match="must be positive"):
        budget_of({BUDGET_SECONDS: 0}, {}, default)


def test_out_of_budget_is_unknown_with_the_reason_never_a_guess():
    b = Builder()
    for i in range(16):
        b.invoke(i, "append", ["k", f"<{i}>"])
    for i in range(16):
        b._line("ok", i, "append", ["k", f"<{i}>"], {})
    b.op(99, "get", ["k", None], "ok", ["k", "never"])
    checker = LinearizabilityChecker(model=KV)
    result = checker.check({}, b.ops, {BUDGET_CONFIGURATIONS: 1000})
    assert result.valid == "unknown" and result.anomalies == {}
    assert result.error == "key 'k': memo budget exhausted: more than 1000 configurations"
    [partition] = result.stats["partition_results"]
    assert partition["valid"] == "unknown" and "counterexample" not in partition
    assert result.stats["budget"] == {"seconds": 60.0, "configurations": 1000}


def test_split_routes_each_keys_ops_and_check_key_does_the_rest(tmp_path):
    path, stale, _ = stale_read_history(tmp_path)
    checker = LinearizabilityChecker()
    history = load_history(path)
    by_key = checker.split(SAFE, history, {})
    assert [key for key, _ in by_key] == ["x", 0, 1, 2]
    checked = [(key, checker.check_key(SAFE, key, ops, {})) for key, ops in by_key]
    assert all(result.ops > 0 for _, (result, _) in checked)
    merged = checker.merge(SAFE, checked, {}, 0.0)
    assert merged.valid == checker.check(SAFE, history, {}).valid is False
    [x] = [ops for key, ops in by_key if key == "x"]
    assert stale in {op.index for op in x}


def test_split_follows_a_partition_that_looks_at_the_whole_history():
    ops = [Op(0, 0, "invoke", 0, "write", 1), Op(1, 1, "ok", 0, "write", 1),
           Op(2, 2, "invoke", 1, "cas", [1, 2]), Op(3, 3, "ok", 1, "cas", [1, 2]),
           Op(4, 4, "invoke", 2, "read", None), Op(5, 5, "ok", 2, "read", 2)]
    checker = LinearizabilityChecker(model=CAS_REGISTER)
    assert [key for key, _ in checker.split({}, ops, {})] == [None]
    result = checker.check({}, ops, {})
    assert result.valid is True and result.stats["keys"] == 1 and result.stats["ops"] == 3


@pytest.mark.spark
def test_on_spark_it_runs_beside_the_queue_checkers(spark, tmp_path):
    from checker.spark import check_history_on_spark

    path, stale, _ = stale_read_history(tmp_path)
    checkers = {"queue": QueueChecker(), "linearizability": LinearizabilityChecker()}
    result = check_history_on_spark(spark, SAFE, path, checkers)
    lin = result.checkers["linearizability"]
    assert result.valid is False and lin.valid is False
    assert lin.anomalies["nonlinearizable"].examples[0]["stuck"] == stale
    local = LinearizabilityChecker().check(SAFE, load_history(path), {})
    assert lin.stats["partition_results"] == [
        {**p, "seconds": q["seconds"]} for p, q in
        zip(local.stats["partition_results"], lin.stats["partition_results"], strict=True)]
