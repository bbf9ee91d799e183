"""The linearizability checker on the public Porcupine histories, budgets and counterexamples."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from checker.history import Operation, pair_operations
from checker.lin.dfs import DepthFirst
from checker.lin.entries import prepare_entries
from checker.lin.files import check_files
from checker.lin.models import CAS_REGISTER, KV, REGISTER
from checker.lin.search import Budget, check_operations
from checker.lin.sweep import Sweep
from harness.exit_codes import for_files
from tests.checker.test_linearizability_bruteforce import finish
from tests.support.cas_histories import cas_history, invalid_twin

DATA = Path(__file__).parent.parent / "data" / "porcupine"


def expected_verdicts() -> dict[str, bool | None]:
    with open(DATA / "expected_verdicts.csv", newline="") as handle:
        return {row["file"]: {"true": True, "false": False}.get(row["expected_linearizable"])
                for row in csv.DictReader(handle)}


EXPECTED = expected_verdicts()


def test_expected_verdicts_cover_every_public_file():
    files = {str(p.relative_to(DATA)) for p in DATA.glob("*/*") if p.suffix in (".log", ".txt")}
    assert files == set(EXPECTED)
    assert len(EXPECTED) == 109


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_public_history_verdict(name):
    [result] = check_files([str(DATA / name)])
    if EXPECTED[name] is None:
        assert result.valid is None
        assert result.error == f"{DATA / name}:1: empty history: no operations"
    else:
        assert result.error is None
        assert result.valid is EXPECTED[name]


def test_complete_decides_every_key_of_c50_bad():
    [result] = check_files([str(DATA / "kv" / "c50-bad.txt")], complete=True)
    keys = {r.partition: r.valid for r in result.partition_results}
    assert sorted(keys) == [str(k) for k in range(10)]
    assert "unknown" not in keys.values()
    assert result.valid is False


def test_without_complete_it_stops_at_the_first_invalid_partition():
    [result] = check_files([str(DATA / "kv" / "c10-bad.txt")])
    assert [r.valid for r in result.partition_results] == [False]
    assert result.partitions == 10


def op(index, f, value, output, call, ret, status="ok"):
    return Operation(process=index, f=f, input=value, output=output, status=status, call=call,
                     ret=ret, invoke_index=index, complete_index=None if ret is None else index)


def test_stale_read_gives_a_counterexample():
    ops = [op(0, "write", 1, None, 0, 1), op(1, "read", None, None, 2, 3)]
    result = check_operations(REGISTER, ops)
    assert result.valid is False
    [partition] = result.partitions
    example = partition.counterexample
    assert example.prefix == [0]
    assert example.stuck == [1]
    assert example.state == "1"
    assert example.descriptions[1] == "read(None) -> None"


@pytest.mark.parametrize("search_class", [Sweep, DepthFirst])
def test_each_search_explains_the_stale_read_alike(search_class):
    ops = [op(0, "write", 1, None, 0, 1), op(1, "read", None, None, 2, 3)]
    search = search_class(REGISTER, prepare_entries(REGISTER, ops), 1000)
    assert finish(search) is False
    example = search.counterexample()
    assert (example.prefix, example.stuck, example.pending, example.state) == ([0], [1], [], "1")


@pytest.mark.parametrize("search_class", [Sweep, DepthFirst])
def test_a_counterexample_prefix_is_a_legal_order_before_the_stuck_op(search_class):
    twin = pair_operations(invalid_twin(cas_history(200, 5, 5, 0.05, seed=2), 5))
    search = search_class(CAS_REGISTER, prepare_entries(CAS_REGISTER, twin), 10**6)
    assert finish(search) is False
    example = search.counterexample()
    by_index = {o.invoke_index: o for o in twin}
    state = CAS_REGISTER.init()
    for index in example.prefix:
        legal, state = CAS_REGISTER.step(state, by_index[index])
        assert legal, index
    assert CAS_REGISTER.describe_state(state) == example.state
    [stuck] = example.stuck
    assert stuck not in example.prefix and by_index[stuck].status == "ok"


def test_an_unknown_write_may_take_effect_late_or_never():
    late = [op(0, "write", 1, None, 0, None, status="info"), op(1, "read", None, 1, 5, 6)]
    never = [op(0, "write", 1, None, 0, None, status="info"), op(1, "read", None, None, 5, 6)]
    before = [op(1, "read", None, 1, 0, 1), op(0, "write", 1, None, 2, None, status="info")]
    assert check_operations(REGISTER, late).valid is True
    assert check_operations(REGISTER, never).valid is True
    assert check_operations(REGISTER, before).valid is False


def test_a_failed_cas_did_not_happen():
    ops = [op(0, "cas", [None, 3], None, 0, 1, status="fail"), op(1, "read", None, 3, 2, 3)]
    assert check_operations(CAS_REGISTER, ops).valid is False


def test_independent_keys_are_registers_of_their_own():
    keyed = [op(0, "write", ["x", 1], ["x", 1], 0, 1), op(1, "write", ["y", 2], ["y", 2], 0, 1),
             op(2, "cas", ["y", [2, 3]], ["y", [2, 3]], 2, 3), op(3, "read", ["x", None],
                                                                  ["x", 1], 4, 5)]
    result = check_operations(CAS_REGISTER, keyed)
    assert result.valid is True and [p.partition for p in result.partitions] == ["x", "y"]
    stale = check_operations(CAS_REGISTER, [*keyed, op(4, "read", ["y", None], ["y", 2], 6, 7)],
                             complete=True)
    assert stale.valid is False
    assert [p.partition for p in stale.partitions if p.valid is False] == ["y"]


def test_jepsen_independent_keys_history_checks():
    [result] = check_files([str(Path(__file__).parents[1] / "data" / "history" / "jepsen-kv.edn")])
    assert (result.error, result.valid, result.partitions) == (None, True, 2)


def _many_concurrent_appends(count: int) -> list[Operation]:
    appends = [op(i, "append", ["k", f"<{i}>"], None, 0, 100) for i in range(count)]
    return appends + [op(count, "get", ["k", None], ["k", "never"], 200, 201)]


def test_memo_budget_gives_unknown_with_the_reason():
    result = check_operations(KV, _many_concurrent_appends(16),
                              budget=Budget(max_configurations=1000))
    [partition] = result.partitions
    assert result.valid == "unknown"
    assert "memo budget exhausted" in partition.reason


def test_time_budget_gives_unknown_with_the_reason():
    result = check_operations(KV, _many_concurrent_appends(18), budget=Budget(seconds=0.2))
    [partition] = result.partitions
    assert partition.valid == "unknown"
    assert "time budget exhausted after 0.2 s" == partition.reason
    assert partition.seconds < 5


def test_exit_codes_follow_the_worst_result():
    ok = check_files([str(DATA / "kv" / "c01-ok.txt")])
    bad = check_files([str(DATA / "kv" / "c01-bad.txt")])
    empty = check_files([str(DATA / "jepsen" / "etcd_095.log")])
    assert for_files(ok) == 0
    assert for_files(ok + bad) == 1
    assert for_files(ok + bad + empty) == 3
