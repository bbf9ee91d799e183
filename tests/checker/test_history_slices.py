"""A history validated range by range, as `checker.spark.queue`'s executors do, and joined in
order on the driver fails exactly as the sequential readers do: same line, same reason.

These tests run both halves of the Spark path (`_parse_ranges` per range, `_merge_meta`
on the driver) in the calling process, cutting histories at every line.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from checker.history import (
    HistoryValidator,
    Op,
    SliceValidator,
    load_history,
)
from checker.history.errors import HistoryError
from checker.queue.events import RESET, read_queue_ops
from checker.spark.queue import META, _merge_meta, _parse_ranges
from tests.support.bad_histories import BAD_HISTORIES
from tests.support.interleaved import MALFORMED, interleaved, malformed, write_history


def ranges_at(path: Path, cuts: list[int]) -> list[tuple[int, str, int, bytes]]:
    """Byte ranges (history number, path, first line, bytes) starting at line 1 and at each
    cut line."""
    data = path.read_bytes()
    starts = [0] + [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
    bounds = [0, *(starts[cut - 1] for cut in sorted(cuts)), len(data)]
    return [(0, str(path), data[:start].count(b"\n") + 1, data[start:end])
            for start, end in zip(bounds, bounds[1:], strict=False) if end > start]


def split_outcome(path: Path, cuts: list[int]) -> tuple[int, str] | tuple[dict, dict]:
    """(line, reason) of the HistoryError of the Spark path with ranges cut at `cuts`
    (each range parsed on its own, their records collected in reverse), else
    (resets, sizes)."""
    meta = []
    for byte_range in ranges_at(path, cuts):
        meta += [(kind, body) for (_, kind), body in _parse_ranges(iter([byte_range]))
                 if kind in (META, RESET)]
    try:
        return _merge_meta(str(path), meta[::-1])
    except HistoryError as error:
        assert error.path == str(path)
        return error.line, error.reason


def sequential_outcome(path: Path) -> tuple[int, str] | None:
    """What reading the queue history line by line says (history rules, then micro-ops)."""
    try:
        read_queue_ops(path, "jsonl")
    except HistoryError as error:
        return error.line, error.reason
    return None


@pytest.mark.parametrize("name", sorted(BAD_HISTORIES))
def test_every_split_of_the_reader_corpus_fails_as_read_history(tmp_path, name):
    text, line, _ = BAD_HISTORIES[name]
    path = tmp_path / "history.jsonl"
    path.write_text(text)
    with pytest.raises(HistoryError) as caught:
        load_history(path)
    expected = (caught.value.line, caught.value.reason)
    lines = text.count("\n") + 1
    for cuts in [[], *([c] for c in range(2, lines + 1)), list(range(2, lines + 1))]:
        assert split_outcome(path, cuts) == expected, cuts


@pytest.mark.parametrize("name", MALFORMED)
def test_every_cut_of_a_malformed_history_fails_at_the_same_line(tmp_path, name):
    path = malformed(tmp_path / "history.jsonl", name)
    expected = sequential_outcome(path)
    assert expected is not None
    if name != "bad micro-op":
        with pytest.raises(HistoryError) as caught:
            load_history(path)
        assert (caught.value.line, caught.value.reason) == expected
    lines = path.read_text().count("\n")
    for cut in range(2, lines + 1):
        assert split_outcome(path, [cut]) == expected, cut
    assert split_outcome(path, list(range(2, lines + 1))) == expected  # a line per range
    rng = random.Random(name)
    for _ in range(40):
        cuts = rng.sample(range(2, lines + 1), rng.randrange(2, 12))
        assert split_outcome(path, cuts) == expected, cuts


def test_a_violation_spanning_two_ranges_is_found_at_its_line(tmp_path):
    ops = interleaved(3, 160)
    invoke = next(i for i, op in enumerate(ops) if op["type"] == "invoke"
                  and op["process"] == 0)
    done = next(j for j in range(invoke + 1, len(ops)) if ops[j]["process"] == 0)
    ops[done]["f"] = "poll" if ops[done]["f"] == "send" else "send"
    path = write_history(tmp_path / "h.jsonl", ops)
    reason = (f"{ops[done]['type']} completion has f {ops[done]['f']!r} but process 0 "
              f"invoked {ops[invoke]['f']!r} (index {invoke})")
    for cut in range(invoke + 2, done + 2):
        assert split_outcome(path, [cut]) == (done + 1, reason)


def test_a_valid_history_gives_the_same_resets_and_sizes_however_it_is_cut(tmp_path):
    ops = interleaved(8, 200)
    ops[10:10] = []
    path = write_history(tmp_path / "h.jsonl", ops, blank_every=7)
    assert sequential_outcome(path) is None
    whole = split_outcome(path, [])
    lines = path.read_text().count("\n")
    for cut in range(2, lines + 1, 3):
        assert split_outcome(path, [cut]) == whole
    assert split_outcome(path, list(range(2, lines + 1))) == whole


def test_slices_of_an_op_sequence_join_into_one_validator():
    """The pure form: SliceValidator per slice, HistoryValidator.join in order."""
    ops = [Op(i, 10 * i, kind, process, "send", None) for i, (kind, process) in enumerate([
        ("invoke", 0), ("invoke", 1), ("ok", 0), ("info", 1), ("invoke", 0), ("info", 0),
        ("invoke", 2), ("fail", 2),
    ])]
    states = []
    for part in (ops[:3], ops[3:5], ops[5:]):
        slice_validator = SliceValidator("h")
        for op in part:
            slice_validator.check(op, op.index + 1)
        states.append(slice_validator.state())
    assert [line for line, _ in states[1].deferred] == [4, 5]
    assert states[1].open == {0: Op(4, 40, "invoke", 0, "send", None)}
    validator = HistoryValidator("h")
    for state in states:
        validator.join(state)
    again = SliceValidator("h")
    again.check(Op(8, 90, "invoke", 1, "send", None), 9)
    with pytest.raises(HistoryError) as caught:
        validator.join(again.state())
    assert (caught.value.line, caught.value.reason) == (
        9, "process 1 invokes again after an info completion "
           "(a process never returns after info; use a new process id)")


def test_a_malformed_line_in_a_later_range_waits_for_earlier_violations(tmp_path):
    lines = [json.dumps({"index": 0, "time": 0, "type": "invoke", "process": 0, "f": "poll",
                         "value": [["poll"]]}),
             json.dumps({"index": 1, "time": 1, "type": "ok", "process": 1, "f": "poll",
                         "value": [["poll", {}]]}),
             "{not json"]
    path = tmp_path / "h.jsonl"
    path.write_text("\n".join(lines) + "\n")
    expected = (2, "ok completion of 'poll' by process 1 without an open invoke")
    assert split_outcome(path, []) == expected
    assert split_outcome(path, [2]) == expected
    assert split_outcome(path, [3]) == expected
