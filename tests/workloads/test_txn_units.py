"""The queue workload's transactions without a cluster: the txn generator, the options
and their errors, how a transaction's end becomes ok, fail or info, zombies, and the
client's rewind after an abort, and the stalls that make zombies on purpose."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from harness.config import ConfigError, load_config
from workloads.core import generator as gen
from workloads.kafka.client import ClientOptions, Delivery
from workloads.kafka.confluent import STALLED, ConfluentClient
from workloads.kafka.transactions import TxnProducer, Zombies
from workloads.queue import KIND, QueueOptions, TxnGenerator, checkers, queue_workload

S = 1.0


def ops_of(generator: Any, count: int, concurrency: int = 4) -> list[dict[str, Any]]:
    ctx = gen.Context.initial(concurrency)
    found = []
    for _ in range(count):
        item, generator = gen.op(generator, None, ctx)
        found.append(item)
    return found


def test_txn_generator_mixes_sends_and_polls_with_unique_values_and_aborts():
    items = ops_of(TxnGenerator(keys=3, most=4, seed=11, abort_rate=0.25), 400)
    assert all(item["f"] == "txn" and 1 <= len(item["value"]) <= 4 for item in items)
    micro = [m for item in items for m in item["value"]]
    assert {m[0] for m in micro} == {"send", "poll"}
    values = [m[2] for m in micro if m[0] == "send"]
    assert values == list(range(len(values)))
    assert {m[1] for m in micro if m[0] == "send"} == {0, 1, 2}
    aborted = sum(bool(item.get("abort")) for item in items)
    assert 70 < aborted < 130
    again = ops_of(TxnGenerator(keys=3, most=4, seed=11, abort_rate=0.25), 400)
    assert [(i["value"], i.get("abort")) for i in again] == [
        (i["value"], i.get("abort")) for i in items]


def test_txn_workload_runs_txn_assign_and_crash_ops_and_names_the_txn_checker():
    options = QueueOptions(txn=True, abort_rate=0.1, crash_weight=0.05, seed=2)
    items = ops_of(queue_workload(options).generator, 300)
    assert Counter(item["f"] for item in items).keys() == {"txn", "assign", "crash"}
    assert checkers(options) == KIND.checkers_for(options) == (*KIND.checkers, "txn")
    fields = options.test_fields()
    assert (fields["txn"], fields["isolation_level"], fields["abort_rate"],
            fields["idempotence"]) == (True, "read_committed", 0.1, True)
    client = options.client_options()
    assert client.transactional and client.idempotence and client.retries > 0
    assert client.transactional_id_of(9) == client.transactional_id_of(3) == "kchaos-txn-3"
    assert QueueOptions(isolation_level="read_uncommitted").client_options().isolation_level \
        == "read_uncommitted"


@pytest.mark.parametrize(("overrides", "words"), [
    ({"txn": True, "client": "kafka-python"}, ["txn", "--client confluent"]),
    ({"txn": True, "sub_via": "subscribe"}, ["txn", "assign", "transfer"]),
    ({"txn": True, "acks": "1"}, ["acks=all", "--acks all"]),
    ({"abort_rate": 0.2}, ["--abort-rate", "--txn"]),
    ({"txn": True, "abort_rate": 1.5}, ["--abort-rate", "between 0 and 1"]),
    ({"isolation_level": "serializable"}, ["--isolation-level", "read_committed"]),
])
def test_bad_transaction_options_fail_before_anything_starts(overrides, words):
    with pytest.raises(ConfigError) as raised:
        load_config(overrides=overrides)
    assert all(word in str(raised.value) for word in words), str(raised.value)


def test_transfer_refuses_queue_only_options():
    with pytest.raises(ConfigError, match="isolation_level belongs to workload queue"):
        load_config(overrides={"workload": "transfer", "isolation_level": "read_uncommitted"})
    assert load_config(overrides={"workload": "transfer", "abort_rate": 0.3}).workload \
        .abort_rate == 0.3


def error(code: int, **flags: bool) -> KafkaException:
    return KafkaException(KafkaError(code, "test", **flags))


class FakeProducer:
    """Records calls; `failures[name]` lists exceptions its next calls of `name` raise."""

    def __init__(self, failures: dict[str, list[BaseException]] | None = None) -> None:
        self.failures = failures or {}
        self.calls: list[str] = []

    def _call(self, name: str) -> None:
        self.calls.append(name)
        pending = self.failures.get(name)
        if pending:
            raise pending.pop(0)

    def init_transactions(self, timeout: float) -> None:
        self._call("init")

    def begin_transaction(self) -> None:
        self._call("begin")

    def flush(self, timeout: float) -> int:
        self._call("flush")
        return 0

    def commit_transaction(self, timeout: float) -> None:
        self._call("commit")

    def abort_transaction(self, timeout: float) -> None:
        self._call("abort")

    def send_offsets_to_transaction(self, offsets: Any, metadata: Any, timeout: float) -> None:
        self._call("send_offsets")


def producer(**failures: list[BaseException]) -> TxnProducer:
    txn = TxnProducer({}, make=lambda config: FakeProducer(failures))
    txn.begin()
    return txn


def soon(seconds: float = 2.0) -> float:
    return time.monotonic() + seconds


def delivered(offset: int = 0, error_name: str | None = None) -> Delivery:
    return Delivery(offset=offset, error=error_name, done=True)


def test_a_committed_transaction_is_ok_and_an_aborted_one_fails():
    txn = producer()
    assert txn.end([delivered()], soon()) == ("ok", None)
    assert not txn.pending and txn.producer.calls == ["begin", "flush", "commit"]
    txn = producer()
    assert txn.end([delivered()], soon(), abort=True, why="aborted on purpose") == (
        "fail", "aborted on purpose")
    assert not txn.pending and txn.producer.calls[-1] == "abort"


def test_failed_or_missing_deliveries_abort_before_any_commit():
    txn = producer()
    assert txn.end([delivered(error_name="NOT_ENOUGH_REPLICAS")], soon()) == (
        "fail", "NOT_ENOUGH_REPLICAS")
    assert "commit" not in txn.producer.calls
    assert producer().end([Delivery()], soon()) == ("fail", "flush timed out")


def test_commit_retries_retriable_errors_then_gives_up_as_info():
    retriable = [error(KafkaError._TIMED_OUT, retriable=True) for _ in range(3)]
    txn = producer(commit=list(retriable))
    assert txn.end([delivered()], soon()) == ("ok", None)
    assert txn.producer.calls.count("commit") == 4
    txn = producer(commit=[error(KafkaError._TIMED_OUT, retriable=True)] * 1000)
    kind, why = txn.end([delivered()], soon(0.3))
    assert (kind, why) == ("info", "commit: _TIMED_OUT") and txn.pending
    assert txn.intent == "commit"


def test_an_abortable_commit_error_is_aborted_and_a_failed_abort_is_info():
    txn = producer(commit=[error(KafkaError.INVALID_PRODUCER_EPOCH, txn_requires_abort=True)])
    assert txn.end([delivered()], soon()) == ("fail", "INVALID_PRODUCER_EPOCH")
    txn = producer(commit=[error(KafkaError.INVALID_PRODUCER_EPOCH, txn_requires_abort=True)],
                   abort=[error(KafkaError._STATE)])
    kind, why = txn.end([delivered()], soon())
    assert kind == "info" and why.startswith("abort: _STATE") and txn.pending


def test_fatal_errors_leave_the_outcome_unknown_and_others_abort():
    txn = producer()
    assert txn.failed(error(KafkaError._FENCED, fatal=True), soon()) == ("info", "_FENCED")
    assert txn.pending and "abort" not in txn.producer.calls
    txn = producer()
    assert txn.failed(BufferError("queue full"), soon())[0] == "fail"


def test_a_zombie_keeps_trying_to_commit_then_is_let_go():
    txn = producer(commit=[error(KafkaError._TIMED_OUT, retriable=True)] * 3)
    assert txn.end([delivered()], soon(0.05))[0] == "info"
    zombies = Zombies(seconds=0.5)
    zombies.adopt(txn)
    assert zombies.count() == 1
    deadline = time.monotonic() + 5
    while zombies.count() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert zombies.count() == 0 and not txn.pending
    assert txn.producer.calls.count("commit") == 4


class FakeMessage:
    def __init__(self, topic: str, partition: int, offset: int, value: int) -> None:
        self._where = (topic, partition, offset)
        self._value = value

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self._where[0]

    def partition(self) -> int:
        return self._where[1]

    def offset(self) -> int:
        return self._where[2]

    def value(self) -> bytes:
        return str(self._value).encode()


class FakeConsumer:
    def __init__(self, batches: list[list[FakeMessage]]) -> None:
        self.batches = batches
        self.assigned: list[list[tuple[int, int]]] = []

    def poll(self, timeout: float) -> FakeMessage | None:
        batch = self.batches.pop(0) if self.batches else []
        self.rest = batch[1:]
        return batch[0] if batch else None

    def consume(self, count: int, timeout: float) -> list[FakeMessage]:
        return self.rest

    def assign(self, partitions: list[Any]) -> None:
        self.assigned.append([(p.partition, p.offset) for p in partitions])


class FakeTxnProducer(FakeProducer):
    def __init__(self, failures: dict[str, list[BaseException]] | None = None) -> None:
        super().__init__(failures)
        self.offset = 100

    def produce(self, topic: str, value: bytes, key: bytes, partition: int,
                on_delivery: Any) -> None:
        self.offset += 1
        on_delivery(None, FakeMessage(topic, partition, self.offset, int(value)))


def txn_client(batches: list[list[FakeMessage]], **failures: list[BaseException]
               ) -> ConfluentClient:
    options = ClientOptions(bootstrap_servers=("b:9092",), topic="t",
                            key_partitions={0: 0, 1: 1}, transactional=True, concurrency=2)
    client = ConfluentClient(options)
    client.consumer = FakeConsumer(batches)
    client.positions.assign([0, 1], seek_to_beginning=True)
    client.txn = TxnProducer({}, make=lambda config: FakeTxnProducer(failures))
    client.txn.ready = True
    client.producer = client.txn.producer
    return client


def test_a_transaction_completes_with_offsets_and_reads():
    client = txn_client([[FakeMessage("t", 0, 3, 30), FakeMessage("t", 0, 4, 40)]])
    op = {"f": "txn", "process": 2, "value": [["send", 1, 7], ["poll"]]}
    done = client._txn(op)
    assert done["type"] == "ok"
    assert done["value"] == [["send", 1, [101, 7]], ["poll", {0: [[3, 30], [4, 40]]}]]
    assert client.positions.next == {0: 5}


def test_an_aborted_transaction_forgets_its_polls_and_seeks_back():
    client = txn_client([[FakeMessage("t", 0, 3, 30)], [FakeMessage("t", 0, 4, 40)]])
    first = client._txn({"f": "txn", "process": 2, "value": [["poll"]]})
    assert first["type"] == "ok" and client.positions.next == {0: 4}
    op = {"f": "txn", "process": 2, "value": [["poll"], ["send", 0, 9]], "abort": True}
    done = client._txn(op)
    assert done["type"] == "fail" and done["error"] == "aborted on purpose"
    assert done["value"] == [["poll", {0: [[4, 40]]}], ["send", 0, [101, 9]]]
    assert client.positions.next == {0: 4}
    assert client.consumer.assigned[-1] == [(0, 4), (1, 0)]
    assert not client.txn.pending


def test_an_unknown_end_is_info_and_the_producer_becomes_a_zombie_on_close():
    client = txn_client([], commit=[error(KafkaError._TIMED_OUT, retriable=True)] * 1000)
    client.options = ClientOptions(**{**client.options.__dict__, "op_timeout": 0.3})
    done = client._txn({"f": "txn", "process": 2, "value": [["send", 0, 1]]})
    assert done["type"] == "info" and done["error"] == "commit: _TIMED_OUT"
    client.zombies = Zombies(seconds=0.2)
    client.consumer = None
    client.close(None)
    assert client.zombies.count() == 1 and client.txn is None


def stalled_client(**failures: list[BaseException]) -> tuple[ConfluentClient, list[TxnProducer]]:
    """A transactional client whose new producers (kept in the list) fail as `failures`
    say, with a stall of 0.2 s asked of its zombies by a nemesis thread."""
    client = txn_client([])
    client.zombies = Zombies(seconds=0.5)
    made: list[TxnProducer] = []

    def new_producer(process: int) -> TxnProducer:
        made.append(TxnProducer({"transactional.id": "t"},
                                make=lambda config: FakeTxnProducer(failures)))
        return made[-1]

    client._txn_producer = new_producer  # type: ignore[method-assign]
    return client, made


def ask_stall(zombies: Zombies) -> list[str | None]:
    taken: list[str | None] = []
    thread = threading.Thread(target=lambda: taken.append(zombies.stall_next(0.2, 5.0)))
    thread.start()
    deadline = soon()
    while not zombies.stall_asked() and time.monotonic() < deadline:
        time.sleep(0.01)
    return taken


def test_a_stalled_transaction_is_fenced_by_its_successor_then_commits_as_a_zombie():
    client, made = stalled_client()
    stalled = client.txn
    taken = ask_stall(client.zombies)
    poll_only = client._txn({"f": "txn", "process": 2, "value": [["poll"]]})
    assert poll_only["type"] == "ok" and client.zombies.stall_asked()
    done = client._txn({"f": "txn", "process": 2, "value": [["send", 0, 9]]})
    assert done["type"] == "fail" and done["error"].startswith(STALLED)
    assert done["value"] == [["send", 0, [101, 9]]]
    [successor] = made
    assert client.txn is successor and successor.ready and successor.producer.calls == ["init"]
    assert stalled.producer.calls[-2:] == ["begin", "flush"] and client.zombies.count() == 1
    deadline = soon()
    while stalled.pending and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stalled.producer.calls[-1] == "commit" and not stalled.pending
    assert taken == ["None"] and not client.zombies.stall_asked()


def test_a_stall_whose_successor_cannot_initialise_leaves_the_outcome_unknown():
    client, made = stalled_client(init=[error(KafkaError._TRANSPORT)])
    ask_stall(client.zombies)
    done = client._txn({"f": "txn", "process": 2, "value": [["send", 0, 9]]})
    assert done["type"] == "info" and "init_transactions: _TRANSPORT" in done["error"]
    assert client.txn is None and client.zombies.count() == 1


def test_a_stall_nobody_takes_is_withdrawn():
    zombies = Zombies()
    assert zombies.stall_next(1.0, 0.05) is None
    assert not zombies.stall_asked()
    assert zombies.take_stall(producer()) is None


def test_a_transactional_drain_outwaits_a_dead_producers_open_transaction():
    from workloads.kafka.client import drain_idle_polls

    assert drain_idle_polls(5.0, 0.5, 10) == 54  # (15 s timeout + 10 s abort check + 2) / 0.5
    assert drain_idle_polls(1.0, 0.5, 100) == 100
