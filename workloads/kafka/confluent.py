"""The queue workload's client on confluent-kafka (librdkafka).

One producer and one consumer per process. A send op produces each micro-op to its
key's partition and flushes once; offsets come from the delivery reports. The
consumer works in assign mode (no group) at the options' `isolation.level`: it starts
assigned to every key from the beginning; `assign` changes the keys, seeking to the
beginning or to where this client last read; `poll` returns what one poll brings, by
key. `crash` completes as `info`, so the worker closes this client and opens a fresh
one as a new process. Keys may live on several topics (`ClientOptions.key_topics`).

With `transactional` options the producer is a `TxnProducer` whose transactional id is
the worker thread's (`ClientOptions.transactional_id_of`), made and initialised at the
process's first `txn` op; each `txn` op is one transaction (`_txn`). A process that ends
with its transaction's outcome unknown leaves the producer to the shared `Zombies`
instead of closing it; so does a transaction that takes a stall a nemesis asked for
(`Zombies.stall_next`), just before its commit, once a new producer of its
transactional id has fenced it (`_stalled`).

In subscribe mode the process's group consumer runs in a child process
(`workloads.kafka.confluent_member`, through `QueueClient`); this client keeps the producer,
opens its assign-mode consumer only when an `assign` op asks (the final drain), and
reads a group's committed offsets with a consumer of that group that never subscribes.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any, Literal

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from workloads.core.client import completed
from workloads.groups.child import ConsumerChildren
from workloads.kafka.client import (
    LIBRDKAFKA_LOGGER,
    ClientOptions,
    Delivery,
    QueueClient,
    send_completion,
    transaction_timeout_ms,
)
from workloads.kafka.errors import outcome
from workloads.kafka.transactions import TxnProducer, Zombies

__all__ = ["ConfluentClient", "poll_records", "record_value"]

SETUP_TIMEOUT = 60.0
TXN_BUDGET = 0.8  # of the op timeout, for a transaction to end before the worker gives up
TXN_REQUEST_TIMEOUT_MS = 30000  # Kafka's default, and at least twice message.timeout.ms
FIRST_OFFSET = 0  # where every partition of the workloads' topics begins
STALLED = "stalled before its commit (stall-producer)"
TRANSFER_MAIN = "workloads.transfer.child"


class ConfluentClient(QueueClient):
    """`ConfluentClient(options)` is the unopened factory value; `open` connects."""

    library = "confluent"
    member_main = "workloads.kafka.confluent_member"
    producer: Producer | None
    consumer: Consumer | None

    def __init__(self, options: ClientOptions, node: str | None = None,
                 children: ConsumerChildren | None = None,
                 zombies: Zombies | None = None) -> None:
        super().__init__(options, node, children)
        self.zombies = zombies if zombies is not None else Zombies()
        self.txn: TxnProducer | None = None
        self._record_keys = options.record_keys()

    # -- lifecycle -----------------------------------------------------------------------

    def open(self, test: Any, node: str | None) -> ConfluentClient:
        client = self._copy(node)
        if not self.options.transactional:
            client.producer = Producer(client._producer_config())
        if self.options.sub_via == "assign":
            client._assign(list(self.options.key_partitions), seek_to_beginning=True)
        return client

    def _copy(self, node: str | None) -> ConfluentClient:
        """An unconnected copy bound to `node`, sharing the children and zombies."""
        return ConfluentClient(self.options, node, self.children, self.zombies)

    def _common_config(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": ",".join(self.options.bootstrap_for(self.node)),
            "client.id": f"kchaos-{uuid.uuid4().hex[:8]}",
            "topic.metadata.refresh.interval.ms": 1000,
            "reconnect.backoff.max.ms": 1000,
            "socket.timeout.ms": max(1000, int(self.options.op_timeout * 1000)),
            "log_level": 3,
            "logger": logging.getLogger(LIBRDKAFKA_LOGGER),
        }

    def _producer_config(self) -> dict[str, Any]:
        options = self.options
        timeout_ms = max(1000, int(options.op_timeout * 800))
        return {
            **self._common_config(),
            "acks": options.acks,
            "retries": options.retries,
            "enable.idempotence": options.idempotence,
            "linger.ms": options.linger_ms,
            "message.timeout.ms": max(timeout_ms, options.linger_ms + 1),
            "request.timeout.ms": timeout_ms,
            "retry.backoff.ms": 100,
        }

    def _txn_config(self, process: int) -> dict[str, Any]:
        """A transactional producer's settings. Its produce requests outlive its messages
        (`request.timeout.ms` past `message.timeout.ms`), so an unanswered message times
        out in flight, which makes librdkafka bump the epoch. A broker's REQUEST_TIMED_OUT
        arriving first would put the message, possibly written, back in the queue, where
        abort_transaction purges it without an epoch bump: librdkafka 2.16 then gives the
        next transaction's batch the same sequence, and the broker (ours or Kafka) answers
        it as a duplicate of the aborted one, a committed write lost. Seen in a run with
        coordinator faults; reproduced by a produce timeout racing an abort."""
        options = self.options
        producer = self._producer_config()
        return {**producer, "enable.idempotence": True, "acks": "all",
                "request.timeout.ms": max(TXN_REQUEST_TIMEOUT_MS,
                                          2 * producer["message.timeout.ms"]),
                "transactional.id": options.transactional_id_of(process),
                "transaction.timeout.ms": transaction_timeout_ms(options.op_timeout)}

    def transfer_worker(self, process: int) -> tuple[dict[str, Any], str]:
        """The transactional settings (less the logger, which the child sets) and the
        transfer worker's module."""
        settings = {key: value for key, value in self._txn_config(process).items()
                    if key != "logger"}
        return settings, TRANSFER_MAIN

    def _consumer_config(self) -> dict[str, Any]:
        return {
            **self._common_config(),
            "isolation.level": self.options.isolation_level,
            "group.id": f"kchaos-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 100,
        }

    def setup(self, test: Any) -> None:
        """Create the topics (partitions = their keys) and wait until every partition has a
        leader."""
        options = self.options
        admin = AdminClient({"bootstrap.servers": ",".join(options.bootstrap_servers),
                             "logger": logging.getLogger(LIBRDKAFKA_LOGGER)})
        topics = options.topics()
        futures = admin.create_topics([NewTopic(topic, count, options.replication_factor)
                                       for topic, count in topics.items()], operation_timeout=30)
        for future in futures.values():
            try:
                future.result(timeout=SETUP_TIMEOUT)
            except KafkaException as error:
                if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
        deadline = time.monotonic() + SETUP_TIMEOUT
        for name, count in topics.items():
            while True:
                topic = admin.list_topics(name, timeout=10).topics.get(name)
                if (topic is not None and topic.error is None and len(topic.partitions) >= count
                        and all(p.leader >= 0 for p in topic.partitions.values())):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"topic {name} has partitions without a leader")
                time.sleep(0.2)

    def teardown(self, test: Any) -> None:
        super().teardown(test)
        self.zombies.release_all()

    def close(self, test: Any) -> None:
        self.close_member()
        if self.txn is not None and self.txn.pending:
            self.zombies.adopt(self.txn)
        elif self.producer is not None:
            self.producer.purge()
            self.producer.flush(0)
        self.txn = self.producer = None
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None

    # -- ops -----------------------------------------------------------------------------

    def _send(self, op: Mapping[str, Any]) -> dict[str, Any]:
        options = self.options
        deliveries = [Delivery() for _ in op["value"]]
        for position, (_, key, value) in enumerate(op["value"]):
            try:
                self.producer.produce(options.topic_of(key), value=str(value).encode(),
                                      key=str(key).encode(),
                                      partition=options.key_partitions[key],
                                      on_delivery=deliveries[position].report)
            except (KafkaException, BufferError) as error:
                name = (error.args[0].name() if isinstance(error, KafkaException)
                        else "_QUEUE_FULL")
                if position == 0 and outcome(name) == "fail":
                    return completed(op, "fail", op["value"], error=name)
                raise
        self.producer.flush(options.op_timeout)
        return send_completion(op, deliveries, retried=True)

    def _poll(self, op: Mapping[str, Any]) -> dict[str, Any]:
        options = self.options
        reads, errors, resets = poll_records(self.consumer, options.poll_timeout,
                                             options.max_poll_records, self._record_keys)
        self._read(reads, resets)
        return completed(op, "ok", [["poll", reads]],
                         errors=", ".join(dict.fromkeys(errors)) or None,
                         offset_resets=resets or None)

    def _read(self, reads: Mapping[Any, list[list[int]]], resets: Mapping[Any, int]) -> None:
        """Positions after a poll; a key whose position was out of range starts over from
        the beginning, as `auto.offset.reset=earliest` would, but on the record: the op
        names it (`offset_resets`), so the checkers know the consumer's position moved."""
        for key, pairs in reads.items():
            for offset, _ in pairs:
                self.positions.read(key, offset)
        if resets:
            for key in resets:
                self.positions.next.pop(key, None)
            self._assign(self.positions.assigned, seek_to_beginning=False)

    def _txn(self, op: Mapping[str, Any]) -> dict[str, Any]:
        """One transaction: its sends and polls in order, then commit, or abort when the op
        asks (`"abort": true`) or something failed inside. An aborted transaction's
        consumer goes back to where it was before (its polls are forgotten), so the next
        poll reads on from the last committed one."""
        deadline = time.monotonic() + self.options.op_timeout * TXN_BUDGET
        txn, failure = self._transactional(op["process"], deadline)
        if txn is None:
            return completed(op, "fail", op["value"], error=failure)
        before = dict(self.positions.next)
        results: list[list[Any]] = []
        deliveries: list[Delivery] = []
        resets: dict[Any, int] = {}
        with txn.lock:
            try:
                txn.begin()
            except KafkaException as error:
                self._drop_txn()
                return completed(op, "fail", op["value"],
                                 error=f"begin_transaction: {error.args[0].name()}")
            try:
                for micro in op["value"]:
                    results.append(self._micro_op(txn, micro, deliveries, resets))
                stalled = (None if op.get("abort")
                           else self._stalled(txn, op["process"], deliveries, deadline))
                kind, why = stalled or txn.end(deliveries, deadline,
                                               abort=bool(op.get("abort")),
                                               why="aborted on purpose")
            except _PollFailed as error:
                kind, why = txn.end(deliveries, deadline, abort=True, why=str(error))
            except (KafkaException, BufferError) as error:
                kind, why = txn.failed(error, deadline)
        if kind == "fail":
            self.positions.next = {k: v for k, v in before.items() if k not in resets}
            self._assign(self.positions.assigned, seek_to_beginning=False)
        return completed(op, kind, [_micro_result(micro) for micro in results], error=why,
                         offset_resets=resets or None)

    def _stalled(self, txn: TxnProducer, process: int, deliveries: list[Delivery],
                 deadline: float) -> tuple[Literal["fail", "info"], str] | None:
        """If a nemesis asked for a stall and `txn` sent, all acknowledged: `txn`
        stalls before its commit, a new producer of its transactional id takes over this
        process (InitProducerId, which fences `txn`: its transaction is aborted once that
        returns), and `txn` is left to the zombies, to wake and commit once the stall is
        over; the transaction's end (`fail`, or `info` when the new producer could not
        initialise, so nothing fenced it). None when there was no stall to take."""
        if not deliveries or not self.zombies.stall_asked() \
                or not txn.flushed(deliveries, deadline):
            return None
        seconds = self.zombies.take_stall(txn)
        if seconds is None:
            return None
        txn.intent = "commit"
        successor = self._txn_producer(process)
        try:
            successor.init(deadline - time.monotonic())
        except KafkaException as error:
            self.zombies.adopt(txn, delay=seconds)
            self.txn = self.producer = None
            return "info", f"{STALLED}; its successor's init_transactions: " \
                           f"{error.args[0].name()}"
        self.zombies.adopt(txn, delay=seconds)
        self.txn, self.producer = successor, successor.producer
        return "fail", f"{STALLED}; fenced by a new producer of its transactional id"

    def _transactional(self, process: int, deadline: float
                       ) -> tuple[TxnProducer | None, str | None]:
        """This process's initialised transactional producer, or None and why not."""
        if self.txn is None:
            self.txn = self._txn_producer(process)
            self.producer = self.txn.producer
        if not self.txn.ready:
            try:
                self.txn.init(deadline - time.monotonic())
            except KafkaException as error:
                if error.args[0].fatal():
                    self._drop_txn()
                return None, f"init_transactions: {error.args[0].name()}"
        return self.txn, None

    def _txn_producer(self, process: int) -> TxnProducer:
        """A new, uninitialised transactional producer of `process`'s transactional id."""
        return TxnProducer(self._txn_config(process))

    def _drop_txn(self) -> None:
        if self.txn is not None and self.txn.pending:
            self.zombies.adopt(self.txn)
        self.txn = self.producer = None

    def _micro_op(self, txn: TxnProducer, micro: list[Any], deliveries: list[Delivery],
                  resets: dict[Any, int]) -> list[Any]:
        """Run one micro-op inside the transaction; what `_micro_result` renders. A poll
        adds the keys whose position was reset to `resets`."""
        if micro[0] == "send":
            _, key, value = micro
            delivery = Delivery()
            deliveries.append(delivery)
            txn.produce(self.options.topic_of(key), self.options.key_partitions[key], key,
                        value, delivery)
            return ["send", key, value, delivery]
        try:
            reads, _, reset = poll_records(self.consumer, self.options.poll_timeout,
                                           self.options.max_poll_records, self._record_keys)
        except KafkaException as error:
            raise _PollFailed(f"poll: {error.args[0].name()}") from error
        self._read(reads, reset)
        resets.update(reset)
        return ["poll", reads]

    def _assign(self, keys: list[Any], seek_to_beginning: bool) -> None:
        """Assign `keys`, each at an explicit offset: the beginning is offset 0 (the
        workloads' topics never delete records). librdkafka 2.16 resolves a logical
        offset (OFFSET_BEGINNING) with ListOffsets, and a reply that an assign made
        outdated re-arms a 500 ms query timer which a later assign does not stop: it then
        fires and moves the re-assigned partition back to the beginning, re-delivering
        records (nonmonotonic-poll). Explicit offsets never start that query."""
        if self.consumer is None:
            self.consumer = Consumer(self._consumer_config())
        starts = self.positions.assign(keys, seek_to_beginning)
        self.consumer.assign([
            TopicPartition(self.options.topic_of(key), self.options.key_partitions[key],
                           FIRST_OFFSET if start is None else start)
            for key, start in starts.items()])

    def committed_offsets(self, group: str) -> dict[Any, int | None]:
        options = self.options
        reader = Consumer({**self._common_config(), "group.id": group,
                           "enable.auto.commit": False})
        try:
            found = reader.committed([TopicPartition(options.topic, partition)
                                      for partition in self._partition_keys],
                                     timeout=options.op_timeout)
        finally:
            reader.close()
        for partition in found:
            if partition.error is not None:
                raise KafkaException(partition.error)
        return {self._partition_keys[p.partition]: p.offset if p.offset >= 0 else None
                for p in found}


    def _end_offsets(self, keys: list[Any]) -> dict[Any, int]:
        options = self.options
        reader = Consumer({**self._consumer_config(), "isolation.level": "read_uncommitted"})
        ends: dict[Any, int] = {}
        try:
            for key in keys:
                partition = TopicPartition(options.topic_of(key), options.key_partitions[key])
                found = reader.get_watermark_offsets(partition, timeout=options.op_timeout,
                                                     cached=False)
                if found is None:
                    raise TimeoutError(f"no end offset of key {key!r} within "
                                       f"{options.op_timeout:g} s")
                ends[key] = found[1]
        finally:
            reader.close()
        return ends


class _PollFailed(Exception):
    """The consumer failed inside a transaction (which is then aborted)."""


def _micro_result(micro: list[Any]) -> list[Any]:
    """A micro-op as its completion shows it: a send with its offset (None if unknown)."""
    if micro[0] != "send":
        return micro
    _, key, value, delivery = micro
    offset = delivery.offset
    if delivery.error is not None or offset is None or offset < 0:
        offset = None
    return ["send", key, [offset, value]]


def record_value(raw: bytes) -> int | str:
    """A record's value: the workloads write integers, and the transfer workers'
    outputs `<input value>:<attempt>` strings."""
    text = raw.decode()
    return int(text) if text.lstrip("-").isdigit() else text


def poll_records(consumer: Consumer, timeout: float, max_records: int,
                 record_keys: Mapping[tuple[str, int], Any]
                 ) -> tuple[dict[Any, list[list[int]]], list[str], dict[Any, int]]:
    """One poll of up to `max_records`: key -> [[offset, value], ...] in order, the names
    of the non-fatal errors it returned (a fatal one raises), and key -> the offset its
    fetch position could not be used at (librdkafka's auto offset reset, with
    `auto.offset.reset=error`). `record_keys` maps (topic, partition) to the key."""
    first = consumer.poll(timeout)
    messages = [first, *consumer.consume(max_records - 1, 0)] if first is not None else []
    reads: dict[Any, list[list[int]]] = {}
    errors = []
    resets: dict[Any, int] = {}
    for message in messages:
        error = message.error()
        if error is not None:
            if error.fatal():
                raise KafkaException(error)
            errors.append(error.name())
            if error.code() == KafkaError._AUTO_OFFSET_RESET:
                resets[record_keys[message.topic(), message.partition()]] = message.offset()
            continue
        key = record_keys[message.topic(), message.partition()]
        reads.setdefault(key, []).append([message.offset(), record_value(message.value())])
    return reads, errors, resets
