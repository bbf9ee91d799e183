"""Input formats: detection, Porcupine's etcd and kv logs, Jepsen EDN (Knossos lists too),
Jepsen Kafka queue histories and their conversion to JSONL, and their errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from checker.core import compose
from checker.history import Op, load_history, pair_operations, write_jsonl
from checker.history.errors import HistoryError
from checker.history.formats import FORMATS, detect_format, read_ops
from checker.queue.acks import AcksChecker
from checker.queue.analysis import QueueChecker
from checker.queue.events import read_queue_ops

DATA = Path(__file__).parent.parent / "data"
PORCUPINE = DATA / "porcupine"
HISTORY = DATA / "history"
VERDICTS = list(csv.DictReader((PORCUPINE / "expected_verdicts.csv").open()))


@pytest.mark.parametrize("row", [r for r in VERDICTS if r["ops"] != "0"], ids=lambda r: r["file"])
def test_porcupine_files_parse_with_their_op_counts(row):
    """`ops` in expected_verdicts.csv counts invocations; `unknown_outcome_ops` those
    whose outcome is unknown (`:info`, `:fail :read :timed-out`, never completed)."""
    path = PORCUPINE / row["file"]
    expected = "porcupine-etcd" if row["file"].startswith("jepsen/") else "porcupine-kv"
    assert detect_format(path) == expected
    ops = read_ops(path)
    operations = pair_operations(ops, source=str(path))
    assert len(operations) == int(row["ops"])
    assert sum(op.type == "invoke" for op in ops) == int(row["ops"])
    assert sum(op.status == "info" for op in operations) == int(row["unknown_outcome_ops"])
    assert [op.time for op in ops] == [op.index for op in ops] == list(range(len(ops)))


def test_empty_etcd_log_is_an_input_error():
    path = PORCUPINE / "jepsen" / "etcd_095.log"
    for fmt in ("auto", "porcupine-etcd"):
        with pytest.raises(HistoryError) as caught:
            read_ops(path, fmt)
        assert str(caught.value) == f"{path}:1: empty history: no operations"
    with pytest.raises(HistoryError, match="empty history"):
        detect_format(path)


@pytest.mark.parametrize("fmt", FORMATS)
def test_blank_file_is_empty_in_every_format(tmp_path, fmt):
    path = tmp_path / "blank"
    path.write_text("\n  \n")
    with pytest.raises(HistoryError, match=r":1: empty history: no operations"):
        read_ops(path, fmt)


def test_unknown_format_name():
    with pytest.raises(ValueError, match="unknown history format 'xml'"):
        read_ops(PORCUPINE / "kv" / "c01-ok.txt", "xml")


def test_unrecognised_content(tmp_path):
    path = tmp_path / "h.txt"
    path.write_text("\nhello world\n")
    with pytest.raises(HistoryError, match=r":2: unrecognised history format"):
        read_ops(path)


@pytest.mark.parametrize(("first", "fmt"), [
    ('{"index": 0, "time": 0, "type": "invoke", "process": 0, "f": "read"}', "jsonl"),
    ("{:index 0, :time 0, :type :invoke, :process 0, :f :read}", "edn"),
    ("[{:process 0, :type :invoke, :f :read, :value nil}]", "edn"),
    ("#jepsen.history.Op{:index 0}", "edn"),
    ('{:process 0, :type :invoke, :f :get, :key "1", :value nil}', "porcupine-kv"),
    ("INFO  jepsen.util - 0\t:invoke\t:read\tnil", "porcupine-etcd"),
    ("INFO  jepsen.util - 0   :invoke :read   nil", "porcupine-etcd"),
])
def test_detect_format(tmp_path, first, fmt):
    path = tmp_path / "h"
    path.write_text("\n" + first + "\n")
    assert detect_format(path) == fmt


ETCD = """\
INFO  jepsen.util - 0\t:invoke\t:read\tnil
INFO  jepsen.util - 1   :invoke :write  3
INFO  jepsen.util - 2\t:invoke\t:cas\t[3 4]
INFO  jepsen.util - 0\t:ok\t:read\tnil
INFO  jepsen.util - 1\t:ok\t:write\t3
INFO  jepsen.util - 2\t:fail\t:cas\t[3 4]
INFO  jepsen.util - 0\t:invoke\t:read\tnil
INFO  jepsen.util - 0\t:fail\t:read\t:timed-out
INFO  jepsen.util - 1\t:invoke\t:cas\t[3 -1]
INFO  jepsen.util - 1\t:info\t:cas\t:timed-out
INFO  jepsen.util - 0\t:invoke\t:read\tnil
INFO  jepsen.util - 0\t:ok\t:read\t3
"""


def test_etcd_values_follow_jepsen_conventions(tmp_path):
    path = tmp_path / "etcd.log"
    path.write_text(ETCD)
    ops = read_ops(path)
    timed_out = {"error": "timed-out"}
    assert ops == [
        Op(0, 0, "invoke", 0, "read", None),
        Op(1, 1, "invoke", 1, "write", 3),
        Op(2, 2, "invoke", 2, "cas", [3, 4]),
        Op(3, 3, "ok", 0, "read", None),
        Op(4, 4, "ok", 1, "write", 3),
        Op(5, 5, "fail", 2, "cas", [3, 4]),
        Op(6, 6, "invoke", 0, "read", None),
        Op(7, 7, "info", 0, "read", None, timed_out),
        Op(8, 8, "invoke", 1, "cas", [3, -1]),
        Op(9, 9, "info", 1, "cas", None, timed_out),
        # process 0 reappears after its timed-out read: a fresh id above every logged id
        Op(10, 10, "invoke", 3, "read", None, {"source_process": 0}),
        Op(11, 11, "ok", 3, "read", 3, {"source_process": 0}),
    ]
    statuses = [(op.f, op.status, op.ret) for op in pair_operations(ops)]
    assert statuses == [("read", "ok", 3), ("write", "ok", 4), ("cas", "fail", 5),
                        ("read", "info", None), ("cas", "info", None), ("read", "ok", 11)]


@pytest.mark.parametrize(("line", "reason"), [
    ("INFO  jepsen.util - 0\t:invoke\t:read", "not a Porcupine etcd log line"),
    ("INFO  jepsen.util - x\t:invoke\t:read\tnil", "not a Porcupine etcd log line"),
    ("INFO  jepsen.util - 1\t:invoke\t:read\t[1 2 3]", "not a Porcupine etcd log line"),
    ("WARN  jepsen.util - 1\t:invoke\t:read\tnil", "not a Porcupine etcd log line"),
    ("INFO  jepsen.util - 1\t:invoke\t:delete\tnil", "unknown f 'delete'"),
    ("INFO  jepsen.util - 1\t:invoke\t:read\t4", "invoke read needs nil, got 4"),
    ("INFO  jepsen.util - 1\t:invoke\t:write\tnil", "invoke write needs an integer"),
    ("INFO  jepsen.util - 1\t:invoke\t:cas\t3", "invoke cas needs [from to]"),
    ("INFO  jepsen.util - 1\t:ok\t:write\t:timed-out", "ok write cannot be :timed-out"),
    ("INFO  jepsen.util - 1\t:done\t:write\t4", "unknown type 'done'"),
    ("INFO  jepsen.util - 3\t:ok\t:read\t1", "ok completion of 'read' by process 3 without"),
    ("INFO  jepsen.util - 0\t:invoke\t:write\t1", "process 0 invokes 'write' while its 'read'"),
    ("INFO  jepsen.util - 1\t:ok\t:write\t1", "without an open invoke"),
])
def test_etcd_errors_carry_the_line(tmp_path, line, reason):
    path = tmp_path / "etcd.log"
    path.write_text("INFO  jepsen.util - 0\t:invoke\t:read\tnil\n\n" + line + "\n")
    with pytest.raises(HistoryError) as caught:
        read_ops(path)
    assert caught.value.line == 3
    assert reason in caught.value.reason


def test_kv_values_are_keyed(tmp_path):
    path = tmp_path / "kv.txt"
    path.write_text(
        '{:process 0, :type :invoke, :f :get, :key "7", :value nil}\n'
        '{:process 1, :type :invoke, :f :put, :key "7", :value "x 1 0 y"}\n'
        '{:process 0, :type :ok, :f :get, :key "7", :value ""}\n'
        '{:process 1, :type :ok, :f :put, :key "7", :value "x 1 0 y"}\n'
        '{:type :invoke, :process 1, :key "a\\"b", :f :append, :value "q\\\\"}\n'
        '{:process 1 :type :ok :f :append :key "a\\"b" :value "q\\\\"}\n'
    )
    assert read_ops(path) == [
        Op(0, 0, "invoke", 0, "get", ["7", None]),
        Op(1, 1, "invoke", 1, "put", ["7", "x 1 0 y"]),
        Op(2, 2, "ok", 0, "get", ["7", ""]),
        Op(3, 3, "ok", 1, "put", ["7", "x 1 0 y"]),
        Op(4, 4, "invoke", 1, "append", ['a"b', "q\\"]),
        Op(5, 5, "ok", 1, "append", ['a"b', "q\\"]),
    ]


@pytest.mark.parametrize(("line", "reason"), [
    ('{:process 1, :type :invoke, :f :get, :key "1"}', "missing field :value"),
    ('{:process 1, :type :invoke, :f :get, :key "1", :value nil', "not a Porcupine kv line"),
    ('{:process 1, :type :invoke, :f :get, :key 1, :value nil}', "string :key"),
    ('{:process 1, :type :invoke, :f :delete, :key "1", :value nil}', "unknown f 'delete'"),
    ('{:process 1, :type :invoke, :f :get, :key "1", :value "v"}', "invoke get needs nil"),
    ('{:process 1, :type :invoke, :f :put, :key "1", :value nil}', "invoke put needs a string"),
    ('{:process 0, :type :ok, :f :get, :key "1", :value nil}', "ok get needs a string"),
    ('{:process 2, :type :ok, :f :get, :key "1", :value ""}', "without an open invoke"),
])
def test_kv_errors_carry_the_line(tmp_path, line, reason):
    path = tmp_path / "kv.txt"
    path.write_text('{:process 0, :type :invoke, :f :get, :key "1", :value nil}\n' + line + "\n")
    with pytest.raises(HistoryError) as caught:
        read_ops(path)
    assert caught.value.line == 2
    assert reason in caught.value.reason


def test_edn_vector_without_index_or_time():
    ops = read_ops(HISTORY / "knossos-cas.edn")
    assert [op.index for op in ops] == [op.time for op in ops] == list(range(9))
    assert ops[4] == Op(4, 4, "invoke", 2, "cas", [3, 4])
    assert ops[5] == Op(5, 5, "info", "nemesis", "start", None)
    assert ops[6].extra == {"error": "timeout"}
    assert [(op.f, op.status) for op in pair_operations(ops)] == [
        ("read", "ok"), ("write", "ok"), ("cas", "info"), ("read", "fail")]


def test_edn_jepsen_records_and_keyed_values():
    ops = read_ops(HISTORY / "jepsen-kv.edn")
    assert ops[0] == Op(0, 100, "invoke", 0, "write", ["x", 1])
    assert ops[1].value == ["x", None]
    assert ops[4] == Op(4, 300, "invoke", 0, "cas", ["y", [None, 2]], {"tags": ["a", "b"]})
    assert ops[5].extra == {"error": ["precondition", "failed"]}


@pytest.mark.parametrize(("text", "line", "reason"), [
    ("{:index 0, :time 0, :type :invoke, :process 0, :f :read}\n{:index 1, :time [}\n",
     2, "invalid EDN"),
    ("{:index 0, :time 0, :type :invoke, :process 0, :f :read}\n:oops\n", 2,
     "expected an EDN map"),
    ("{:index 0, :time 0, :type :invoke, :process 0, :f :read}\n"
     "{:index 1, :time 5, :type :ok, :process 1, :f :read}\n", 2, "without an open invoke"),
    ("[{:process 0, :type :invoke, :f :read, :value nil}\n\n"
     " {:process 0, :type :invoke, :f :read, :value nil}]\n", 3, "invokes 'read' while"),
    ("{:index 0, :time 0, :type :invoke, :process 0, :f :read, :value #unknown/tag 1}\n", 1,
     "invalid EDN"),
    ("{:index 0, :time 0, :type :invoke, :process 0, :f :read, :value ##NaN}\n", 1, ""),
    ("{:index 0, :time 0, :process 0, :f :read}\n", 1, "missing field 'type'"),
    ('{:index 0, :time 0, :type "invoke", :process 0.5, :f :read}\n', 1, "field 'process'"),
])
def test_edn_errors_carry_the_line(tmp_path, text, line, reason):
    path = tmp_path / "h.edn"
    path.write_text(text)
    with pytest.raises(HistoryError) as caught:
        read_ops(path, "edn")
    assert caught.value.line == line
    assert reason in caught.value.reason


def test_knossos_list_files_are_detected_and_read_as_edn(tmp_path):
    vector = HISTORY / "knossos-cas.edn"
    text = vector.read_text()
    listed = tmp_path / "knossos-list.edn"
    listed.write_text(text.replace("\n[{", "\n({", 1).rstrip().removesuffix("]") + ")\n")
    assert listed.read_text() != text
    assert detect_format(listed) == "edn"
    assert read_ops(listed) == read_ops(vector)
    bare = tmp_path / "bare.edn"
    bare.write_text("(\n{:process 0, :type :invoke, :f :read, :value nil}\n"
                    " {:process 0, :type :ok, :f :read, :value 1})\n")
    assert detect_format(bare) == "edn"
    assert [(op.index, op.type, op.value) for op in read_ops(bare)] == [
        (0, "invoke", None), (1, "ok", 1)]
    broken = tmp_path / "broken.edn"
    broken.write_text("({:process 0, :type :invoke, :f :read, :value nil}\n"
                      " {:process 0, :type :ok, :f :write, :value 1})\n")
    with pytest.raises(HistoryError) as caught:
        read_ops(broken)
    assert (caught.value.line, caught.value.reason) == (
        2, "ok completion has f 'write' but process 0 invoked 'read' (index 0)")


def test_a_queue_op_with_a_keys_field_is_not_porcupine_kv(tmp_path):
    path = tmp_path / "h.edn"
    path.write_text("{:process 0, :type :invoke, :f :send, :keys #{1}, :value [[:send 1 2]]}\n")
    assert detect_format(path) == "edn"


JEPSEN_KAFKA = "".join(line + "\n" for line in [
    "{:type :invoke, :f :send, :value [[:send 3 12]], :process 0, :time 100, :index 0}",
    "{:type :invoke, :f :assign, :value [3 4], :process 1, :time 110, :index 1}",
    "{:type :ok, :f :send, :value [[:send 3 [41 12]]], :process 0, :time 120, :index 2}",
    "{:type :ok, :f :assign, :value [3 4], :process 1, :time 130, :index 3,"
    " :seek-to-beginning? true}",
    "{:type :info, :f :start-partition, :value nil, :process :nemesis, :index 4}",
    '{:type :info, :f :start-partition, :value {"n1" #{"n3" "n2"}}, :process :nemesis,'
    " :index 5}",
    "{:type :invoke, :f :txn, :value [[:send 4 13] [:poll]], :process 0, :time 200, :index 6}",
    "{:type :ok, :f :txn, :value [[:send 4 [7 13]] [:poll {3 [[41 12]]}]], :process 0,"
    " :time 210, :index 7}",
    "{:type :invoke, :f :send, :value [[:send 4 14]], :process 2, :time 220, :index 8}",
    "{:type :info, :f :send, :value [[:send 4 [nil 14]]], :process 2, :time 230, :index 9,"
    " :error :timeout}",
    "{:type :invoke, :f :poll, :value [[:poll]], :process 1, :time 240, :index 10,"
    " :poll-ms 1000}",
    "{:type :ok, :f :poll, :value [[:poll {3 [[41 12]], 4 [[7 13] [8 14]]}]], :process 1,"
    " :time 250, :index 11}",
    "{:type :invoke, :f :crash, :value nil, :process 1, :time 260, :index 12}",
    "{:type :info, :f :crash, :value nil, :process 1, :time 270, :index 13}",
    "{:type :invoke, :f :debug-topic-partitions, :value [3 4], :process 6, :time 280,"
    " :index 14}",
    "{:type :ok, :f :debug-topic-partitions, :value {3 {:leader 1}, 4 {:leader 2}},"
    " :process 6, :time 290, :index 15}",
    "{:type :invoke, :f :subscribe, :value [3], :process 7, :time 300, :index 16}",
    "{:type :ok, :f :subscribe, :value [3], :process 7, :time 310, :index 17}",
])


def test_jepsen_kafka_edn_becomes_queue_ops(tmp_path):
    path = tmp_path / "history.edn"
    path.write_text(JEPSEN_KAFKA)
    ops = read_queue_ops(path)
    assert read_queue_ops(path, "edn") == ops
    assert len(ops) == 18 and [op.index for op in ops] == list(range(18))
    assert ops[0] == Op(0, 100, "invoke", 0, "send", [["send", 3, 12]])
    assert ops[2].value == [["send", 3, [41, 12]]]
    assert ops[3].extra == {"seek-to-beginning?": True}
    assert ops[4] == Op(4, 0, "info", "nemesis", "start-partition", None)
    assert ops[5].value == {"n1": ["n2", "n3"]}
    assert ops[7].value == [["send", 4, [7, 13]], ["poll", {3: [[41, 12]]}]]
    assert ops[9].value == [["send", 4, [None, 14]]] and ops[9].extra == {"error": "timeout"}
    assert ops[11].value == [["poll", {3: [[41, 12]], 4: [[7, 13], [8, 14]]}]]
    assert ops[15].value == {3: {"leader": 1}, 4: {"leader": 2}}
    result = QueueChecker().check({}, ops, {})
    assert result.valid is True
    assert result.stats["sends"] == 3 and result.stats["reads"] == 3  # reads by key


def test_jepsen_kafka_edn_without_index_or_time(tmp_path):
    path = tmp_path / "history.edn"
    path.write_text("[{:type :invoke, :f :poll, :value [[:poll]], :process 0}\n"
                    " #jepsen.history.Op{:type :ok, :f :poll, :value [[:poll {}]], :process 0}\n"
                    " {:type :invoke, :f :send, :value [[:send 1 2]], :process 1, :time 5}]\n")
    ops = read_queue_ops(path)
    assert [(op.index, op.time) for op in ops] == [(0, 0), (1, 0), (2, 5)]
    assert ops[1].value == [["poll", {}]]


def test_queue_ops_convert_to_jsonl_that_reads_back(tmp_path):
    source = tmp_path / "history.edn"
    source.write_text(JEPSEN_KAFKA)
    ops = read_queue_ops(source)
    target = tmp_path / "history.jsonl"
    assert write_jsonl(ops, target) == len(ops)
    again = load_history(target)
    assert [op.to_json() for op in again] == json.loads(json.dumps([op.to_json() for op in ops]))
    assert again[11].value == [["poll", {"3": [[41, 12]], "4": [[7, 13], [8, 14]]}]]
    assert read_queue_ops(target) == again
    assert detect_format(target) == "jsonl"


def test_write_jsonl_names_the_line_of_a_value_json_cannot_hold(tmp_path):
    target = tmp_path / "out.jsonl"
    with pytest.raises(HistoryError) as caught:
        write_jsonl([Op(0, 0, "invoke", 0, "send", None), Op(1, 0, "ok", 0, "send", {1, 2})],
                    target)
    assert (caught.value.path, caught.value.line) == (str(target), 2)
    assert caught.value.reason.startswith("op is not JSON")


@pytest.mark.parametrize(("text", "line", "reason"), [
    ("{:type :invoke, :f :send, :value [[:send 3 12]], :process 0}\n"
     "{:type :ok, :f :send, :value [[:sned 3 [1 12]]], :process 0}\n", 2,
     "unknown micro-op 'sned'"),
    ("{:type :invoke, :f :send, :value [[:send [1 2] 12]], :process 0}\n", 1,
     "send key must be an integer or a string, got [1, 2]"),
    ("{:type :invoke, :f :poll, :value [[:poll]], :process 0}\n\n"
     "{:type :ok, :f :poll, :value [[:poll [[1 2]]]], :process 0}\n", 3,
     "poll result must be an object"),
    ("{:type :invoke, :f :poll, :value [[:poll]], :process 0}\n"
     "{:type :ok, :f :poll, :value [[:poll {1 [[nil 2]]}]], :process 0}\n", 2,
     "polled record must be [offset, value]"),
    ("({:type :invoke, :f :poll, :value [[:poll]], :process 0}\n"
     " {:type :invoke, :f :poll, :value [[:poll]], :process 0})\n", 2,
     "process 0 invokes 'poll' while its 'poll' (index 0) has not completed"),
    ("{:type :invoke, :f :poll, :value [[:poll]], :process 0, :time 9}\n"
     "{:type :ok, :f :poll, :value [[:poll {}]], :process 0}\n", 2,
     "completion time 0 is before its invoke's time 9"),
    ("{:type :invoke, :f :poll, :process 0, 3 :x}\n", 1, "op field names must be keywords"),
    ("{:type :invoke, :f :poll, :process 0}\n{:type :ok, :f :poll, :value [}\n", 2,
     "invalid EDN"),
])
def test_queue_edn_errors_name_the_file_and_line(tmp_path, text, line, reason):
    path = tmp_path / "history.edn"
    path.write_text(text)
    with pytest.raises(HistoryError) as caught:
        read_queue_ops(path)
    assert caught.value.path == str(path)
    assert caught.value.line == line
    assert reason in caught.value.reason


def test_read_queue_ops_takes_only_queue_formats(tmp_path):
    kv = PORCUPINE / "kv" / "c01-ok.txt"
    with pytest.raises(HistoryError, match="porcupine-kv is not a queue history format"):
        read_queue_ops(kv)
    with pytest.raises(ValueError, match="unknown queue history format 'porcupine-kv'"):
        read_queue_ops(kv, "porcupine-kv")
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n \n")
    assert read_queue_ops(blank) == [] == read_queue_ops(blank, "edn")
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text('{"index": 0, "time": 0, "type": "invoke", "process": 0, "f": "send", '
                     '"value": [["send", 1]]}\n')
    with pytest.raises(HistoryError, match=r"bad.jsonl:1: send micro-op must be"):
        read_queue_ops(jsonl)


@pytest.mark.spark
def test_a_converted_jepsen_history_checks_on_spark_as_in_process(tmp_path, spark):
    from checker.spark import check_history_on_spark

    source = tmp_path / "history.edn"
    source.write_text(JEPSEN_KAFKA.replace("{3 [[41 12]], 4", "{3 [[41 99]], 4"))
    ops = read_queue_ops(source)
    target = tmp_path / "history.jsonl"
    write_jsonl(ops, target)
    test = {"acks": "all", "broker_config": {"min.insync.replicas": 2}, "start_wall_ms": 0}
    checker = compose({"queue": QueueChecker(), "acks": AcksChecker()})
    on_spark = check_history_on_spark(spark, test, target, checker)
    local = checker.check(test, ops, {})
    assert on_spark.valid is False and local.valid is False
    assert on_spark.checkers["queue"].anomalies == local.checkers["queue"].anomalies
    assert on_spark.checkers["acks"].to_json()["stats"] == local.checkers["acks"].to_json()["stats"]
    inconsistent = local.checkers["queue"].anomalies["inconsistent-offsets"]
    assert inconsistent.examples == [{"key": 3, "offset": 41, "values": [12, 99],
                                      "ops": [2, 11]}]
