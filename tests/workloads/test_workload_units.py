"""Pure parts of the workload: error classification, completions, validate, the queue
generator's ops, positions, and the package's exported names."""

from __future__ import annotations

import pytest

from workloads.core import generator as gen
from workloads.core.client import InvalidCompletion, completed, validate
from workloads.kafka.client import Delivery, Positions, QueueClient, send_completion
from workloads.kafka.errors import outcome
from workloads.queue import QueueOptions, queue_workload

SEND = {"type": "invoke", "process": 3, "f": "send", "value": [["send", 0, 7], ["send", 1, 8]]}


def test_outcome_definite_and_unknown():
    for name in ("NOT_ENOUGH_REPLICAS", "INVALID_REQUIRED_ACKS", "TOPIC_AUTHORIZATION_FAILED",
                 "RECORD_LIST_TOO_LARGE", "_PURGE_QUEUE"):
        assert outcome(name) == "fail", name
    for name in ("NOT_LEADER_OR_FOLLOWER", "NOT_LEADER_FOR_PARTITION",
                 "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "REQUEST_TIMED_OUT", "_MSG_TIMED_OUT",
                 "_TRANSPORT", "NETWORK_EXCEPTION", "KafkaConnectionError", "UNKNOWN"):
        assert outcome(name) == "info", name
    assert outcome("not_enough_replicas", retried=True) == "info"
    assert outcome("INVALID_REQUIRED_ACKS", retried=True) == "fail"


def test_send_completion_ok_fail_info():
    ok = send_completion(SEND, [Delivery(4, None, True), Delivery(-1, None, True)],
                         retried=False)
    assert ok["type"] == "ok" and "error" not in ok
    assert ok["value"] == [["send", 0, [4, 7]], ["send", 1, [None, 8]]]
    failed = send_completion(SEND, [Delivery(None, "NOT_ENOUGH_REPLICAS", True)] * 2,
                             retried=False)
    assert (failed["type"], failed["error"], failed["value"]) == (
        "fail", "NOT_ENOUGH_REPLICAS", SEND["value"])
    partly = send_completion(SEND, [Delivery(4, None, True),
                                    Delivery(None, "NOT_ENOUGH_REPLICAS", True)], retried=False)
    assert partly["type"] == "info"
    unanswered = send_completion(SEND, [Delivery(None, "NOT_ENOUGH_REPLICAS", True), Delivery()],
                                 retried=False)
    assert unanswered["type"] == "info" and "timeout" in unanswered["error"]
    retried = send_completion(SEND, [Delivery(None, "NOT_ENOUGH_REPLICAS", True)] * 2,
                              retried=True)
    assert retried["type"] == "info"


def test_validate():
    done = completed(SEND, "ok", [])
    assert validate(SEND, done)["type"] == "ok"
    with pytest.raises(InvalidCompletion, match="type 'invoke'"):
        validate(SEND, dict(SEND))
    with pytest.raises(InvalidCompletion, match="process 4"):
        validate(SEND, {**done, "process": 4})
    with pytest.raises(InvalidCompletion, match="f 'poll'"):
        validate(SEND, {**done, "f": "poll"})
    with pytest.raises(InvalidCompletion, match="not an op"):
        validate(SEND, None)


def test_positions_resume_or_seek_to_beginning():
    positions = Positions()
    assert positions.assign([0, 1], True) == {0: None, 1: None}
    positions.read(0, 41)
    assert positions.assign([0, 2], False) == {0: 42, 2: None}
    assert positions.assign([0], True) == {0: None}


def queue_ops(options, count):
    workload = queue_workload(options, factory=lambda name, o: None)
    ctx = gen.Context.initial(options.concurrency)
    g, ops = gen.clients(workload.generator), []
    for _ in range(count):
        op, g = gen.op(g, None, ctx)
        ops.append(op)
        ctx = ctx.at(op["time"])
    return workload, ops


def test_queue_generator_is_seeded_with_unique_values_and_rate():
    options = QueueOptions(bootstrap_servers=("x:1",), keys=3, rate=100, seed=4,
                           max_sends_per_op=3, assign_weight=0.1)
    workload, ops = queue_ops(options, 600)
    assert queue_ops(options, 600)[1] == ops
    values = [m[2] for op in ops if op["f"] == "send" for m in op["value"]]
    assert values == list(range(len(values)))
    assert {m[1] for op in ops if op["f"] == "send" for m in op["value"]} == {0, 1, 2}
    assert any(len(op["value"]) == 3 for op in ops if op["f"] == "send")
    assigns = [op for op in ops if op["f"] == "assign"]
    assert assigns and all(set(op["value"]) <= {0, 1, 2} and op["value"] for op in assigns)
    assert {op["seek_to_beginning"] for op in assigns} == {True, False}
    assert {op["f"] for op in ops} == {"send", "poll", "assign"}
    seconds = ops[-1]["time"] / gen.NS_PER_SECOND
    assert 5 < seconds < 7, "600 ops at 100 ops/s"
    assert workload.key_partitions == {0: ("kchaos", 0), 1: ("kchaos", 1), 2: ("kchaos", 2)}
    assert queue_ops(QueueOptions(bootstrap_servers=("x:1",), seed=5), 50)[1] != ops[:50]


def test_queue_options_producer_settings():
    options = QueueOptions(bootstrap_servers=("a:1", "b:2"), acks="1", linger_ms=5)
    client = options.client_options()
    assert (client.acks, client.retries, client.idempotence, client.linger_ms) == ("1", 0, False, 5)
    assert QueueOptions(bootstrap_servers=("a:1",), idempotence=True).client_options().retries > 0
    assert client.bootstrap_for("b:2") == ["b:2", "a:1"]
    with pytest.raises(ValueError, match="unknown client"):
        queue_workload(QueueOptions(bootstrap_servers=("a:1",), client="rust"))


def test_every_send_completion_carries_the_producers_acks():
    class Sender(QueueClient):
        def _send(self, op):
            return send_completion(op, [Delivery(None, "NOT_ENOUGH_REPLICAS", True)] * 2,
                                   retried=False)

    options = QueueOptions(bootstrap_servers=("a:1",), acks="1").client_options()
    done = Sender(options).invoke({}, SEND)
    assert (done["type"], done["acks"]) == ("fail", "1")
