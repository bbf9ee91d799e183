"""Generated cas-register histories (tests/support/cas_histories.py): valid by construction,
their twins invalid, and every search says so."""

from __future__ import annotations

import pytest

from checker.history import Op, pair_operations, write_jsonl
from checker.lin.files import check_files
from checker.lin.models import CAS_REGISTER
from checker.lin.search import check_operations
from tests.checker.test_linearizability_bruteforce import SEARCHES, brute_force, decide_alone
from tests.support.cas_histories import cas_history, invalid_twin

SHAPES = [(processes, values, unknown)
          for processes in (2, 5) for values in (3, 100) for unknown in (0.0, 0.2)]


def test_tiny_histories_agree_with_brute_force():
    """The construction, and the twin's invalidity, checked by trying every order."""
    for seed in range(40):
        history = cas_history(6, 3, 2, 0.3, seed=seed)
        assert brute_force("cas-register", pair_operations(history)), seed
        twin = invalid_twin(history, 2)
        assert not brute_force("cas-register", pair_operations(twin)), seed


@pytest.mark.parametrize(("processes", "values", "unknown"), SHAPES)
def test_every_search_finds_valid_histories_valid_and_their_twins_invalid(processes, values,
                                                                          unknown):
    for seed in range(3):
        history = cas_history(150, processes, values, unknown, seed=seed)
        twin = invalid_twin(history, values)
        for ops, expected in ((history, True), (twin, False)):
            operations = pair_operations(ops)
            assert check_operations(CAS_REGISTER, operations).valid is expected
            for search_class in SEARCHES:
                assert decide_alone(search_class, CAS_REGISTER, operations) is expected


def test_the_twin_differs_in_one_read_only():
    history = cas_history(300, 5, 5, 0.02, seed=7)
    twin = invalid_twin(history, 5)
    changed = [(a, b) for a, b in zip(history, twin, strict=True) if a != b]
    [(before, after)] = changed
    assert (before.type, before.f, after.value) == ("ok", "read", 5)


def test_histories_follow_the_history_rules_and_check_lin_reads_them(tmp_path):
    history = cas_history(400, 20, 5, 0.1, seed=3)
    assert _unknown_outcomes(history) > 0
    path = tmp_path / "cas.jsonl"
    write_jsonl(history, path)
    [result] = check_files([str(path)], model="cas-register")
    assert (result.error, result.valid, result.ops) == (None, True, 400)


def _unknown_outcomes(history: list[Op]) -> int:
    return sum(1 for op in pair_operations(history) if op.status == "info")
