"""Small histories are checked in the calling process, without starting Spark, unless a
master is asked for; the results are those of `compose(...).check`."""

from __future__ import annotations

import pytest

from checker.core import compose
from checker.history import write_jsonl
from checker.queue.analysis import QueueChecker
from checker.spark import check_histories, in_process, jobs
from tests.support.queue_histories import inject, simulate
from tests.support.results import without_seconds


def test_a_small_history_is_checked_here_without_spark(tmp_path, monkeypatch):
    def no_spark(*args, **kwargs):
        raise AssertionError("Spark was started")

    monkeypatch.setattr(jobs, "spark_session", no_spark)
    b = simulate(seed=2, steps=200)
    inject(b, "duplicate")
    path = tmp_path / "history.jsonl"
    write_jsonl(b.ops, path)
    checkers = {"queue": QueueChecker()}
    [result] = check_histories([({}, path, checkers, None)])
    assert result.valid is False
    expected = compose(checkers).check({}, b.ops, {})
    assert without_seconds(result.to_json()) == without_seconds(expected.to_json())


def test_a_malformed_small_history_is_its_history_error(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text('{"index": 0}\n')
    [result] = check_histories([({}, path, {"queue": QueueChecker()}, None)])
    assert isinstance(result, ValueError) and "history.jsonl" in str(result)


@pytest.mark.parametrize(("master", "size", "url", "here"), [
    (None, 10, False, True),
    ("local[2]", 10, False, False),
    (None, 2_000, False, False),
    (None, 10, True, False),
])
def test_in_process_below_the_size_without_a_master(tmp_path, monkeypatch, master, size, url,
                                                     here):
    monkeypatch.setattr(jobs, "IN_PROCESS_BYTES", 1_000)
    path = tmp_path / "history.jsonl"
    path.write_bytes(b"x" * size)
    source = path.as_uri() if url else path
    assert in_process([source], master) is here
