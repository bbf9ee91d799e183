"""The transfer workload without a cluster: options, keys and topics, the generators, the
transfer worker's configuration, and how the parent turns a worker's reply into a `txn`
completion."""

from __future__ import annotations

import importlib
import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from workloads.core import generator as gen
from workloads.groups.child import ConsumerChildren
from workloads.groups.consumer import MemberConfig
from workloads.kafka.client import transaction_timeout_ms
from workloads.kafka.confluent import TRANSFER_MAIN, record_value
from workloads.kafka.java.build import JavaRuntime
from workloads.kafka.java.client import JavaClient
from workloads.registry import WORKLOADS
from workloads.transfer.client import TransferClient, TransferMember
from workloads.transfer.config import TransferConfig
from workloads.transfer.workload import (
    CHECKERS,
    TransferGenerator,
    TransferOptions,
    transfer_workload,
)


def run_ops(generator: Any, count: int, concurrency: int = 3) -> list[dict[str, Any]]:
    """`count` ops of `generator`, each completed ok at once (subscribes included)."""
    ctx = gen.Context.initial(concurrency, with_nemesis=False)
    found = []
    while len(found) < count:
        result = gen.op(generator, None, ctx)
        assert result is not None and result is not gen.PENDING
        item, generator = result
        thread = ctx.thread_of(item["process"])
        ctx = ctx.busy(thread).at(item["time"])
        generator = gen.update(generator, None, ctx, item)
        done = {**item, "type": "ok", "value": [["poll", {}]] if item["f"] == "txn"
                else item["value"]}
        ctx = ctx.release(thread)
        generator = gen.update(generator, None, ctx, done)
        found.append(item)
    return found


def test_options_map_input_keys_to_output_keys_on_two_topics():
    options = TransferOptions(keys=3, topic="in", output_topic="out")
    assert options.outputs() == {0: 3, 1: 4, 2: 5}
    client = options.client_options()
    assert client.topic_of(1) == "in" and client.topic_of(4) == "out"
    assert client.topics() == {"in": 3, "out": 3}
    assert client.partition_keys() == {0: 0, 1: 1, 2: 2}
    assert client.record_keys()[("out", 2)] == 5
    assert (client.sub_via, client.acks, client.idempotence, client.isolation_level) == (
        "subscribe", "all", True, "read_committed")
    fields = options.test_fields()
    assert (fields["txn"], fields["isolation_level"], fields["abort_rate"],
            fields["subscribe"]) == (True, "read_committed", 0.0, True)
    assert WORKLOADS["transfer"].checkers == CHECKERS and CHECKERS[0] == "transfer"


@pytest.mark.parametrize(("fields", "words"), [
    ({"abort_rate": -0.1}, ["abort_rate", "between 0 and 1"]),
    ({"session_timeout_ms": 10}, ["session_timeout_ms", "group.min.session.timeout.ms"]),
    ({"output_topic": "kchaos-in"}, ["topics must differ"]),
    ({"keys": 0}, ["keys"]),
    ({"client": "kafka-python"}, ["confluent or java", "sendOffsetsToTransaction"]),
    ({"java_client_version": "4.1.1"}, ["--client java", "confluent"]),
])
def test_bad_options_say_what_is_wrong(fields, words):
    with pytest.raises(ValueError) as raised:
        TransferOptions(**fields)
    assert all(word in str(raised.value) for word in words), str(raised.value)


def test_the_java_client_runs_transfer_workers_of_its_own_mode():
    runtime = JavaRuntime("4.1.1", Path("/libs"), Path("/classes"))
    options = TransferOptions(keys=2, client="java", java_runtime=runtime, op_timeout=4)
    workload = transfer_workload(options)
    assert isinstance(workload.client, TransferClient)
    adapter = workload.client.adapter
    assert isinstance(adapter, JavaClient) and adapter.member_main[-1] == "transfer"
    settings, command = adapter.transfer_worker(7)
    assert command == runtime.command("transfer")
    assert settings == {"transactional_id": f"kchaos-in-transfer-{7 % options.concurrency}",
                        "transaction_timeout_ms": transaction_timeout_ms(4), "linger_ms": 0}
    assert workload.test_fields["client"] == "java"
    assert workload.test_fields["java_client_version"] == "4.1.1"


def test_the_confluent_client_runs_the_python_transfer_worker():
    adapter = transfer_workload(TransferOptions(keys=2)).client.adapter
    settings, main = adapter.transfer_worker(1)
    assert main == TRANSFER_MAIN and callable(importlib.import_module(main).main)
    assert settings["transactional.id"] == "kchaos-in-transfer-1" and "logger" not in settings
    assert settings["enable.idempotence"] is True and settings["acks"] == "all"


def test_transfer_generator_marks_a_fraction_aborted():
    items = run_ops(TransferGenerator(seed=4, abort_rate=0.3), 300)
    assert all(item["f"] == "txn" and item["value"] == [["poll"]] for item in items)
    assert 60 < sum(bool(item.get("abort")) for item in items) < 120


def test_workload_subscribes_each_process_then_sends_transfers_and_crashes():
    workload = transfer_workload(TransferOptions(keys=2, concurrency=3, seed=8,
                                                 crash_weight=0.05, abort_rate=0.1))
    items = run_ops(workload.generator, 400)
    assert [item["f"] for item in items[:3]] == ["subscribe"] * 3
    assert all(item["group"] == "g0" for item in items)
    kinds = Counter(item["f"] for item in items)
    assert kinds.keys() == {"subscribe", "send", "txn", "crash"}
    assert {m[1] for item in items if item["f"] == "send" for m in item["value"]} == {0, 1}
    assert any(item.get("abort") for item in items if item["f"] == "txn")
    assert workload.groups() == ["g0"] and workload.topic == "kchaos-in"
    assert workload.key_partitions == {0: ("kchaos-in", 0), 1: ("kchaos-in", 1),
                                       2: ("kchaos-out", 0), 3: ("kchaos-out", 1)}


def test_final_phase_transfers_until_idle_closes_reads_offsets_then_drains_both_topics():
    workload = transfer_workload(TransferOptions(keys=2, concurrency=2, seed=8,
                                                 drain_idle_polls=1, session_timeout_ms=1000))
    final, first_phases = workload.final_generator, []
    ctx = gen.Context.initial(2, with_nemesis=False)
    for _ in range(200):
        result = gen.op(final, None, ctx.at(ctx.time + 10**9))
        if result is None:
            break
        item, final = result
        first_phases.append((item["f"], item.get("final"), item.get("value")))
        done = {**item, "type": "ok" if item["f"] != "crash" else "info"}
        if item["f"] == "txn":
            done["value"] = [["poll", {}]]
        if item["f"] == "committed":
            done["value"] = {"group": "g0", "offsets": {}}
        thread = ctx.thread_of(item["process"])
        ctx = ctx.at(ctx.time + 10**9)
        final = gen.update(final, None, ctx, done)
        ctx = ctx.release(thread, crashed=done["type"] == "info")
    fs = [f for f, _, _ in first_phases]
    assert fs[:2] == ["subscribe", "subscribe"]
    assert ("txn", True, [["poll"]]) in first_phases
    committed = fs.index("committed")
    assert fs[committed - 2:committed] == ["crash", "crash"]
    assigns = [value for f, _, value in first_phases if f == "assign"]
    assert assigns and all(sorted(value) == [0, 1, 2, 3] for value in assigns)


def test_transfer_config_round_trips_through_json():
    member = MemberConfig(bootstrap_servers=("a:9092",), topic="in",
                          group="g0", partition_keys={0: 0, 1: 1})
    config = TransferConfig(member=member, producer={"transactional.id": "in-transfer-1"},
                            output_topic="out", outputs={0: (2, 0), 1: (3, 1)})
    again = TransferConfig.from_json(config.to_json())
    assert again == config and again.group == "g0" and again.op_timeout == 5.0


class FakeChild:
    pid = 4321

    def __init__(self, replies: dict[str, Any]) -> None:
        self.replies = replies
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def request(self, op: str, timeout: float, **fields: Any) -> dict[str, Any]:
        self.requests.append((op, fields))
        reply = self.replies[op]
        if isinstance(reply, Exception):
            raise reply
        return reply


class FakeChildren(ConsumerChildren):
    def __init__(self, child: FakeChild) -> None:
        super().__init__()
        self.child = child
        self.started: list[str] = []
        self.given_up: list[Any] = []

    def start(self, config: Any, main: str = "") -> Any:
        self.started.append(main)
        return self.child

    def abandon(self, child: Any) -> None:
        self.given_up.append(child)


def member(replies: dict[str, Any]) -> tuple[TransferMember, FakeChildren]:
    config = TransferConfig(
        member=MemberConfig(bootstrap_servers=("a:9092",), topic="in",
                            group="g0", partition_keys={0: 0}),
        producer={}, output_topic="out", outputs={0: (1, 0)})
    children = FakeChildren(FakeChild(replies))
    return (TransferMember(children, config, None, itertools.count(7), TRANSFER_MAIN),
            children)


def test_a_worker_reply_becomes_a_txn_completion_with_its_offsets():
    reply = {"result": {"type": "fail", "error": "aborted on purpose",
                        "reads": [[0, [[5, 50], [6, 60]]]], "errors": [],
                        "outputs": [[1, 9, "50:7"], [1, 10, "60:7"]], "offsets": [[0, 7]]},
             "events": []}
    worker, children = member({"transfer": reply})
    assert children.started == [TRANSFER_MAIN]
    op = {"f": "txn", "process": 2, "value": [["poll"]], "abort": True, "group": "g0"}
    done = worker.transfer(op)
    assert worker.child.requests == [("transfer", {"abort": True, "attempt": 7})]
    assert done["type"] == "fail" and done["error"] == "aborted on purpose"
    assert done["value"] == [["poll", {0: [[5, 50], [6, 60]]}], ["send", 1, [9, "50:7"]],
                             ["send", 1, [10, "60:7"]]]
    worker.transfer(op)
    assert worker.child.requests[-1] == ("transfer", {"abort": True, "attempt": 8})
    assert done["offsets"] == {"0": 7} and "rebalances" not in done


def test_an_empty_transfer_has_no_offsets_and_an_unanswered_one_is_info():
    empty = {"result": {"type": "ok", "error": None, "reads": [], "errors": [], "outputs": [],
                        "offsets": []}, "events": []}
    worker, _ = member({"transfer": empty})
    done = worker.transfer({"f": "txn", "process": 0, "value": [["poll"]]})
    assert done["type"] == "ok" and done["value"] == [["poll", {}]] and "offsets" not in done
    worker, children = member({"transfer": TimeoutError("no answer")})
    done = worker.transfer({"f": "txn", "process": 0, "value": [["poll"]]})
    assert done["type"] == "info" and done["value"] == [["poll"]]
    child = worker.child
    worker.close()
    assert children.given_up == [child] and worker.child is None


def test_record_values_are_integers_or_transfer_outputs():
    assert record_value(b"17") == 17 and record_value(b"-2") == -2
    assert record_value(b"17:204") == "17:204"
