"""The stats checker: every kind of client op succeeded at least once, else the run is not
valid; too little to judge is unknown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checker.history import Op, load_history
from checker.registry import CHECKERS, NEED_NODE_LOGS, composed
from checker.stats import MIN_INVOCATIONS, StatsChecker
from tests.support.queue_histories import simulate_txns
from workloads.queue import QueueOptions
from workloads.registry import WORKLOADS
from workloads.transfer.workload import TransferOptions

DATA = Path(__file__).parent.parent / "data"


class Ops:
    """A history built op by op: `call` invokes and completes one op of a process."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def add(self, type_: str, process: Any, f: str, value: Any = None, **extra: Any) -> int:
        index = len(self.ops)
        self.ops.append(Op(index, index * 1000, type_, process, f, value, extra))  # type: ignore[arg-type]
        return index

    def call(self, process: Any, f: str, outcome: str, **extra: Any) -> int:
        self.add("invoke", process, f)
        return self.add(outcome, process, f, **extra)


def check(history: Ops) -> Any:
    return StatsChecker().check({}, history.ops, {})


def test_every_kind_of_op_succeeded_once_is_valid_with_counts_by_f():
    h = Ops()
    for outcome in ("ok", "fail", "info", "ok"):
        h.call(0 if outcome != "info" else 1, "send", outcome)
    h.call(2, "poll", "ok")
    h.add("info", "nemesis", "start-partition", {"n1": ["n2"]})
    result = check(h)
    assert result.valid is True and result.anomalies == {} and result.error is None
    assert result.stats["by-f"] == {"poll": {"ok": 1, "fail": 0, "info": 0},
                                    "send": {"ok": 2, "fail": 1, "info": 1}}
    assert result.stats["never-succeeded"] == [] and result.stats["too-few"] == []


def test_an_f_invoked_enough_that_never_succeeded_is_invalid_with_its_witness():
    h = Ops()
    fails = [h.call(0, "send", "fail", error="not-leader") for _ in range(MIN_INVOCATIONS - 1)]
    h.add("invoke", 3, "send")
    h.call(1, "poll", "ok")
    result = check(h)
    assert result.valid is False
    assert result.stats["never-succeeded"] == ["send"]
    [witness] = result.anomalies["never-succeeded"].examples
    assert witness == {"f": "send", "invocations": MIN_INVOCATIONS, "ok": 0,
                       "fail": MIN_INVOCATIONS - 1, "info": 1,
                       "errors": {"not-leader": MIN_INVOCATIONS - 1, "never completed": 1},
                       "ops": [*fails, 2 * (MIN_INVOCATIONS - 1)]}


def test_too_few_invocations_of_an_f_that_never_succeeded_are_unknown_not_valid():
    h = Ops()
    h.call(0, "send", "ok")
    h.call(1, "txn", "info", error="timed out")
    result = check(h)
    assert result.valid == "unknown" and result.anomalies == {}
    assert result.stats["too-few"] == ["txn"]
    assert result.error == ("too little to judge: txn invoked 1x, never ok; an f is judged "
                            f"from {MIN_INVOCATIONS} invocations")


def test_no_client_op_at_all_is_unknown():
    h = Ops()
    h.add("info", "nemesis", "kill", {"n1": "killed"})
    result = check(h)
    assert result.valid == "unknown" and result.stats["by-f"] == {}
    assert result.error == "too little to judge: no client op"


def test_crash_ops_end_their_process_on_purpose_and_are_not_judged():
    h = Ops()
    for process in range(MIN_INVOCATIONS):
        h.call(process, "crash", "info")
    assert check(h).valid == "unknown"
    h.call(9, "send", "ok")
    result = check(h)
    assert result.valid is True and result.stats["not-judged"] == ["crash"]
    assert result.stats["by-f"]["crash"] == {"ok": 0, "fail": 0, "info": MIN_INVOCATIONS}


def test_end_offsets_the_final_drain_never_got_are_counted_not_judged():
    h = Ops()
    h.call(9, "send", "ok")
    for process in range(MIN_INVOCATIONS):
        h.call(process, "end-offsets", "fail")
    result = check(h)
    assert result.valid is True and result.stats["not-judged"] == ["end-offsets"]
    assert result.stats["by-f"]["end-offsets"] == {"ok": 0, "fail": MIN_INVOCATIONS, "info": 0}


def test_a_never_succeeded_f_outweighs_one_with_too_few_invocations():
    h = Ops()
    for _ in range(MIN_INVOCATIONS):
        h.call(0, "send", "fail")
    h.call(1, "txn", "fail")
    result = check(h)
    assert result.valid is False
    assert result.stats["never-succeeded"] == ["send"] and result.stats["too-few"] == ["txn"]


def test_the_queue_checker_finds_a_run_in_which_no_send_was_acknowledged_empty():
    h = Ops()
    for value in range(3):
        h.add("invoke", 0, "send", [["send", 0, value]])
        h.add("fail", 0, "send", [["send", 0, value]])
    h.add("invoke", 1, "poll", [["poll"]])
    h.add("ok", 1, "poll", [["poll", {}]])
    result = composed(["queue"]).check({}, h.ops, {})
    [witness] = result.checkers["queue"].anomalies["empty-history"].examples
    assert witness == {"ops": [], "attempted": 3, "failed": 3, "unknown": 0,
                       "why": "no send was acknowledged: nothing was written that could be "
                              "lost"}
    h.add("invoke", 2, "send", [["send", 0, 9]])
    h.add("ok", 2, "send", [["send", 0, [0, 9]]])
    assert "empty-history" not in composed(["queue"]).check({}, h.ops, {}).checkers[
        "queue"].anomalies


def test_acknowledged_sends_inside_transactions_make_a_history_not_empty():
    b = simulate_txns(2, 5)
    assert "empty-history" not in composed(["queue"]).check({}, b.ops, {}).checkers[
        "queue"].anomalies


def test_registered_under_stats():
    assert CHECKERS["stats"] is StatsChecker


@pytest.mark.parametrize(("workload", "options"), [
    ("queue", QueueOptions()),
    ("queue", QueueOptions(sub_via="subscribe")),
    ("queue", QueueOptions(txn=True)),
    ("transfer", TransferOptions()),
], ids=["assign", "subscribe", "txn", "transfer"])
def test_every_workload_runs_the_stats_checker_by_default(workload, options):
    names = WORKLOADS[workload].checkers_for(options)
    assert "stats" in names
    assert ("groups" in names) == (getattr(options, "sub_via", "") == "subscribe"
                                   and not getattr(options, "txn", False))
    assert ("transfer" in names) == (workload == "transfer")


def test_an_assign_mode_run_with_the_default_checkers_is_valid_not_unknown():
    names = [n for n in WORKLOADS["queue"].checkers_for(QueueOptions())
             if n not in NEED_NODE_LOGS]
    result = composed(names).check({}, load_history(DATA / "queue" / "ok.jsonl"), {})
    assert result.valid is True, result.to_json()
    assert set(result.checkers) == {"queue", "acks", "availability", "stats"}
