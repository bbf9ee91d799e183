"""The JSONL history: validation with line numbers, pairing, the writer, EDN export."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from checker.history import (
    HistoryWriter,
    Op,
    load_history,
    pair_operations,
    read_history,
    split_paired,
    write_edn,
)
from checker.history.errors import HistoryError
from checker.history.formats import read_ops
from tests.support.bad_histories import BAD_HISTORIES, INVOKE0, jsonl, make_op

DATA = Path(__file__).parent.parent / "data" / "history"




@pytest.mark.parametrize("name", sorted(BAD_HISTORIES))
def test_reader_rejects_with_file_and_line(tmp_path, name):
    text, line, reason = BAD_HISTORIES[name]
    path = tmp_path / "history.jsonl"
    path.write_text(text)
    with pytest.raises(HistoryError) as caught:
        load_history(path)
    assert caught.value.path == str(path)
    assert caught.value.line == line
    assert reason in caught.value.reason
    assert str(caught.value).startswith(f"{path}:{line}: ")
    with pytest.raises(HistoryError) as again:
        read_ops(path, "auto")
    assert (again.value.line, again.value.reason) == (line, caught.value.reason)


def test_reader_rejects_non_utf8(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_bytes(INVOKE0.encode() + b'{"f": "\xff"}\n')
    with pytest.raises(HistoryError, match=r":2: not UTF-8"):
        load_history(path)


def test_reader_streams_up_to_the_first_error(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text(INVOKE0 + "not json\n" + jsonl(make_op(2, "ok", 0)))
    ops = read_history(path)
    assert next(ops).index == 0
    with pytest.raises(HistoryError, match=r":2: invalid JSON"):
        next(ops)


def test_reader_keeps_physical_line_numbers_across_blank_lines(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text(INVOKE0 + "\n   \n" + jsonl(make_op(1, "ok", 1)))
    with pytest.raises(HistoryError) as caught:
        load_history(path)
    assert caught.value.line == 4


def test_reader_fields_value_and_extra(tmp_path):
    ops = load_history(DATA / "queue.jsonl")
    assert [op.index for op in ops] == list(range(len(ops)))
    first = ops[0]
    assert first == Op(0, 1234567, "invoke", 3, "send", [["send", 2, 17]], {})
    nemesis = next(op for op in ops if op.process == "nemesis")
    assert nemesis.value == {"n1": ["n3", "n4"]}
    failed = next(op for op in ops if op.type == "fail")
    assert failed.extra == {"error": "not-leader", "node": "n2"}
    assert failed.to_json() == json.loads((DATA / "queue.jsonl").read_text().splitlines()[
        failed.index])
    absent = next(op for op in ops if op.f == "poll" and op.type == "invoke")
    assert absent.value is None  # "value" may be absent: null


def test_nemesis_info_ops_stand_alone_and_may_pair(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text(jsonl(
        make_op(0, "info", "nemesis", f="start-partition", value={"n1": ["n2"]}),
        make_op(1, "invoke", "nemesis", f="kill"),
        make_op(2, "info", "nemesis", f="kill", value={"n2": "killed"}),
        make_op(3, "info", "nemesis", f="kill"),
        make_op(4, "invoke", "nemesis", f="kill"),
    ))
    assert len(load_history(path)) == 5
    assert pair_operations(load_history(path)) == []


def test_pair_operations_statuses_and_order():
    ops = [
        Op(0, 0, "invoke", 0, "write", 1),
        Op(1, 5, "invoke", 1, "read", None),
        Op(2, 7, "info", "nemesis", "start", None),
        Op(3, 9, "ok", 1, "read", 1),
        Op(4, 12, "invoke", 2, "cas", [1, 2]),
        Op(5, 13, "fail", 2, "cas", [1, 2]),
        Op(6, 14, "info", 0, "write", 1, {"error": "timeout"}),
        Op(7, 20, "invoke", 3, "write", 3),
    ]
    pairs = pair_operations(ops)
    assert [(p.process, p.f, p.status) for p in pairs] == [
        (0, "write", "info"), (1, "read", "ok"), (2, "cas", "fail"), (3, "write", "info")]
    write, read, cas, open_write = pairs
    assert (write.input, write.output, write.call, write.ret) == (1, None, 0, None)
    assert (write.invoke_index, write.complete_index) == (0, 6)
    assert (read.input, read.output, read.call, read.ret) == (None, 1, 5, 9)
    assert (cas.output, cas.ret, cas.complete_index) == ([1, 2], 13, 5)
    assert (open_write.ret, open_write.complete_index, open_write.output) == (None, None, None)


def test_split_paired_routes_ops_by_their_paired_operation():
    ops = [
        Op(0, 0, "invoke", 0, "write", ["a", 1]),
        Op(1, 5, "invoke", 1, "read", None),
        Op(2, 7, "info", "nemesis", "start", None),
        Op(3, 9, "ok", 1, "read", ["b", 2]),
        Op(4, 12, "ok", 0, "write", ["a", 1]),
        Op(5, 20, "invoke", 2, "write", ["b", 3]),
    ]
    by_key = split_paired(ops, lambda op: [(op.output or op.input)[0]])
    assert {key: [op.index for op in items] for key, items in by_key.items()} == {
        "a": [0, 4], "b": [1, 3, 5]}
    assert [o.status for o in pair_operations(by_key["b"])] == ["ok", "info"]


def test_pair_operations_accepts_a_subset_and_reports_the_source():
    subset = [Op(4, 40, "invoke", 1, "get", ["k", None]), Op(9, 90, "ok", 1, "get", ["k", "x"])]
    assert pair_operations(subset)[0].output == ["k", "x"]
    with pytest.raises(HistoryError) as caught:
        pair_operations([Op(3, 0, "ok", 1, "get", None)], source="h.jsonl")
    assert str(caught.value) == (
        "h.jsonl:4: ok completion of 'get' by process 1 without an open invoke")


class _Clock:
    def __init__(self) -> None:
        self.now = 1000

    def __call__(self) -> int:
        self.now += 7
        return self.now


def test_writer_assigns_index_and_time_and_a_reader_sees_each_op(tmp_path):
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path, clock=_Clock()) as writer:
        first = writer.append({"type": "invoke", "process": 0, "f": "send",
                               "value": (("send", 1, 5),), "index": 99})
        assert first == Op(0, 7, "invoke", 0, "send", [["send", 1, 5]], {})
        assert load_history(path) == [first]
        second = writer.append(Op(42, 123, "ok", 0, "send", [["send", 1, [0, 5]]], {"node": "n1"}))
        assert (second.index, second.time, second.extra) == (1, 123, {"node": "n1"})
        assert load_history(path) == [first, second]
        third = writer.append({"type": "info", "process": "nemesis", "f": "kill",
                               "value": {1: "killed"}, "time": None})
        assert third.value == {"1": "killed"} and third.time == 14
        assert load_history(path) == [first, second, third]
    assert path.read_text().splitlines()[0].startswith('{"index": 0, "time": 7, "type": "invoke"')


def test_writer_refuses_invalid_ops_and_writes_nothing_for_them(tmp_path):
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as writer:
        writer.append({"type": "invoke", "process": 0, "f": "read"})
        with pytest.raises(HistoryError, match=r":2: process 0 invokes 'read' while"):
            writer.append({"type": "invoke", "process": 0, "f": "read"})
        with pytest.raises(HistoryError, match=r":2: op is not JSON"):
            writer.append({"type": "ok", "process": 0, "f": "read", "value": {1, 2}})
        with pytest.raises(HistoryError, match=r":2: missing field 'f'"):
            writer.append({"type": "ok", "process": 0})
        writer.append({"type": "ok", "process": 0, "f": "read", "value": 3})
    assert [op.type for op in load_history(path)] == ["invoke", "ok"]
    with pytest.raises(ValueError, match="closed"):
        writer.append({"type": "invoke", "process": 1, "f": "read"})


def test_writer_is_thread_safe(tmp_path):
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as writer:
        def work(process: int) -> None:
            for n in range(50):
                writer.append({"type": "invoke", "process": process, "f": "write", "value": n})
                writer.append({"type": "ok", "process": process, "f": "write", "value": n})
        threads = [threading.Thread(target=work, args=(p,)) for p in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    pairs = pair_operations(load_history(path))
    assert len(pairs) == 200 and all(p.status == "ok" for p in pairs)


def test_writer_fsyncs_within_100ms_while_writing_and_on_close(tmp_path, monkeypatch):
    synced: list[float] = []
    real_fsync = os.fsync

    def recording_fsync(descriptor: int) -> None:
        synced.append(time.monotonic())
        real_fsync(descriptor)

    monkeypatch.setattr("checker.history.ops.os.fsync", recording_fsync)
    writer = HistoryWriter(tmp_path / "history.jsonl")
    time.sleep(0.3)
    assert synced == []  # nothing written, nothing to sync
    started = time.monotonic()
    process = 0
    while time.monotonic() - started < 0.6:
        writer.append({"type": "invoke", "process": process, "f": "read"})
        writer.append({"type": "ok", "process": process, "f": "read", "value": process})
        process += 1
        time.sleep(0.002)
    # Background fsync every 100 ms while dirty: about 6 here; allow a loaded machine.
    assert len(synced) >= 3
    last_write = time.monotonic()
    deadline = last_write + 2.0
    while (not synced or synced[-1] < last_write) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert synced[-1] >= last_write, "the last write was not fsynced by the background thread"
    count = len(synced)
    writer.close()
    assert len(synced) == count + 1
    writer.close()
    assert len(synced) == count + 1


CHILD = textwrap.dedent("""
    import sys
    from checker.history import HistoryWriter
    writer = HistoryWriter(sys.argv[1])
    process = 0
    while True:
        for kind in ("invoke", "ok"):
            op = writer.append({"type": kind, "process": process, "f": "write",
                                "value": process})
            print(op.index, flush=True)
        process += 1
""")


def test_killed_writer_leaves_every_appended_op(tmp_path):
    path = tmp_path / "history.jsonl"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True,
        cwd=Path(__file__).parent.parent.parent,
    )
    try:
        reported = -1
        while reported < 500:
            line = child.stdout.readline()
            assert line, "the writer child exited early"
            reported = int(line)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        reported = max([reported, *(int(line) for line in child.stdout)])
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=10)
        child.stdout.close()
    ops = load_history(path)
    assert len(ops) >= reported + 1
    assert pair_operations(ops)[0].status == "ok"


def test_write_edn_jepsen_style():
    out = io.StringIO()
    write_edn([
        Op(0, 123, "invoke", 3, "send", [["send", 2, 17]]),
        Op(1, 456, "ok", 3, "poll", [["poll", {"2": [[41, 17]], "-0": []}]], {"node": "n1"}),
        Op(2, 789, "info", "nemesis", "start-partition", {"n1": ["n3"]}),
        Op(3, 790, "invoke", 4, "put", ["k\"1\n", None], {"odd key": 1.5}),
        Op(4, 791, "invoke", 5, "read weird", True),
    ], out)
    assert out.getvalue().splitlines() == [
        "{:index 0, :time 123, :type :invoke, :process 3, :f :send, :value [[:send 2 17]]}",
        '{:index 1, :time 456, :type :ok, :process 3, :f :poll, '
        ':value [[:poll {2 [[41 17]], "-0" []}]], :node "n1"}',
        '{:index 2, :time 789, :type :info, :process :nemesis, :f :start-partition, '
        ':value {"n1" ["n3"]}}',
        '{:index 3, :time 790, :type :invoke, :process 4, :f :put, :value ["k\\"1\\n" nil], '
        '"odd key" 1.5}',
        '{:index 4, :time 791, :type :invoke, :process 5, :f "read weird", :value true}',
    ]


def test_jsonl_to_edn_to_ops_round_trip(tmp_path):
    ops = load_history(DATA / "queue.jsonl")
    path = tmp_path / "history.edn"
    with open(path, "w", encoding="utf-8") as out:
        write_edn(ops, out)
    assert read_ops(path) == ops
    assert read_ops(path, "edn") == ops
