"""The queue workload's client on confluent-kafka (librdkafka).

One producer and one consumer per process. A send op produces each micro-op to its
key's partition and flushes once; offsets come from the delivery reports. The
consumer works in assign mode (no group): it starts assigned to every key from the
beginning; `assign` changes the keys, seeking to the beginning or to where this
client last read; `poll` returns what one poll brings, by key. `crash` completes as
`info`, so the worker closes this client and opens a fresh one as a new process.

In subscribe mode the process's group consumer runs in a child process
(`workloads.group_confluent`, through `QueueClient`); this client keeps the producer,
opens its assign-mode consumer only when an `assign` op asks (the final drain), and
reads a group's committed offsets with a consumer of that group that never subscribes.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from workloads.client import (
    LIBRDKAFKA_LOGGER,
    Delivery,
    QueueClient,
    completed,
    outcome,
    send_completion,
)

__all__ = ["ConfluentClient"]

SETUP_TIMEOUT = 60.0


class ConfluentClient(QueueClient):
    """`ConfluentClient(options)` is the unopened factory value; `open` connects."""

    library = "confluent"
    producer: Producer | None
    consumer: Consumer | None

    # -- lifecycle -----------------------------------------------------------------------

    def open(self, test: Any, node: str | None) -> ConfluentClient:
        client = ConfluentClient(self.options, node, self.children)
        client.producer = Producer(client._producer_config())
        if self.options.sub_via == "assign":
            client._assign(list(self.options.key_partitions), seek_to_beginning=True)
        return client

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

    def _consumer_config(self) -> dict[str, Any]:
        return {
            **self._common_config(),
            "group.id": f"kchaos-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 100,
        }

    def setup(self, test: Any) -> None:
        """Create the topic (partitions = keys) and wait until every partition has a leader."""
        options = self.options
        admin = AdminClient({"bootstrap.servers": ",".join(options.bootstrap_servers),
                             "logger": logging.getLogger(LIBRDKAFKA_LOGGER)})
        count = max(options.key_partitions.values()) + 1
        future = admin.create_topics([NewTopic(options.topic, count, options.replication_factor)],
                                     operation_timeout=30)[options.topic]
        try:
            future.result(timeout=SETUP_TIMEOUT)
        except KafkaException as error:
            if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        deadline = time.monotonic() + SETUP_TIMEOUT
        while True:
            topic = admin.list_topics(options.topic, timeout=10).topics.get(options.topic)
            if (topic is not None and topic.error is None and len(topic.partitions) >= count
                    and all(p.leader >= 0 for p in topic.partitions.values())):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {options.topic} has partitions without a leader")
            time.sleep(0.2)

    def close(self, test: Any) -> None:
        self.close_member()
        if self.producer is not None:
            self.producer.purge()
            self.producer.flush(0)
            self.producer = None
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None

    # -- ops -----------------------------------------------------------------------------

    def _send(self, op: Mapping[str, Any]) -> dict[str, Any]:
        options = self.options
        deliveries = [Delivery() for _ in op["value"]]

        def report(delivery: Delivery) -> Any:
            def delivered(error: KafkaError | None, message: Any) -> None:
                delivery.done = True
                if error is not None:
                    delivery.error = error.name()
                else:
                    delivery.offset = message.offset()
            return delivered

        for position, (_, key, value) in enumerate(op["value"]):
            try:
                self.producer.produce(options.topic, value=str(value).encode(),
                                      key=str(key).encode(),
                                      partition=options.key_partitions[key],
                                      on_delivery=report(deliveries[position]))
            except (KafkaException, BufferError) as error:
                name = (error.args[0].name() if isinstance(error, KafkaException)
                        else "_QUEUE_FULL")
                if position == 0 and outcome(name) == "fail":
                    return completed(op, "fail", op["value"], error=name)
                raise
        self.producer.flush(options.op_timeout)
        return send_completion(op, deliveries, retried=options.retries > 0)

    def _poll(self, op: Mapping[str, Any]) -> dict[str, Any]:
        options = self.options
        reads, errors = poll_records(self.consumer, options.poll_timeout,
                                     options.max_poll_records, self._partition_keys)
        for key, pairs in reads.items():
            for offset, _ in pairs:
                self.positions.read(key, offset)
        return completed(op, "ok", [["poll", reads]],
                         errors=", ".join(dict.fromkeys(errors)) or None)

    def _assign(self, keys: list[Any], seek_to_beginning: bool) -> None:
        if self.consumer is None:
            self.consumer = Consumer(self._consumer_config())
        starts = self.positions.assign(keys, seek_to_beginning)
        self.consumer.assign([
            TopicPartition(self.options.topic, self.options.key_partitions[key],
                           OFFSET_BEGINNING if start is None else start)
            for key, start in starts.items()])

    def _committed(self, group: str) -> dict[Any, int | None]:
        options = self.options
        reader = Consumer({**self._common_config(), "group.id": group,
                           "enable.auto.commit": False})
        try:
            found = reader.committed([TopicPartition(options.topic, partition)
                                      for partition in options.key_partitions.values()],
                                     timeout=options.op_timeout)
        finally:
            reader.close()
        for partition in found:
            if partition.error is not None:
                raise KafkaException(partition.error)
        return {self._partition_keys[p.partition]: p.offset if p.offset >= 0 else None
                for p in found}


def poll_records(consumer: Consumer, timeout: float, max_records: int,
                 partition_keys: Mapping[int, Any]) -> tuple[dict[Any, list[list[int]]], list[str]]:
    """One poll of up to `max_records`: key -> [[offset, value], ...] in order, and the
    names of the non-fatal errors it returned (a fatal one raises)."""
    first = consumer.poll(timeout)
    messages = [first, *consumer.consume(max_records - 1, 0)] if first is not None else []
    reads: dict[Any, list[list[int]]] = {}
    errors = []
    for message in messages:
        error = message.error()
        if error is not None:
            if error.fatal():
                raise KafkaException(error)
            errors.append(error.name())
            continue
        key = partition_keys[message.partition()]
        reads.setdefault(key, []).append([message.offset(), int(message.value())])
    return reads, errors
