"""The queue workload's client on kafka-python.

The same behaviour as `workloads.kafka.confluent`: one producer and one consumer per
process; a send op is one flush and offsets come from each record's metadata; the
consumer is in assign mode, starting at the beginning of every key; `assign` seeks
to the beginning or to where this client last read; `crash` completes as `info`.

In subscribe mode the process's group consumer runs in a child process
(`workloads.kafka.kafka_python_member`, through `QueueClient`); this client keeps the producer,
opens its assign-mode consumer only when an `assign` op asks (the final drain), and
reads a group's committed offsets with `KafkaAdminClient.list_group_offsets` (OffsetFetch).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaTimeoutError, TopicAlreadyExistsError

from workloads.core.client import completed
from workloads.kafka.client import Delivery, QueueClient, send_completion
from workloads.kafka.errors import outcome

__all__ = ["KafkaPythonClient", "error_name"]

SETUP_TIMEOUT = 60.0


def error_name(error: BaseException) -> str:
    """The Kafka protocol name of a broker error (NOT_ENOUGH_REPLICAS), else the class name."""
    message = getattr(error, "message", None)
    if isinstance(message, str) and message.isupper():
        return message
    return type(error).__name__


class KafkaPythonClient(QueueClient):
    """`KafkaPythonClient(options)` is the unopened factory value; `open` connects."""

    library = "kafka-python"
    member_main = "workloads.kafka.kafka_python_member"
    producer: KafkaProducer | None
    consumer: KafkaConsumer | None

    # -- lifecycle -----------------------------------------------------------------------

    def open(self, test: Any, node: str | None) -> KafkaPythonClient:
        client = KafkaPythonClient(self.options, node, self.children)
        options = self.options
        servers = options.bootstrap_for(node)
        timeout_ms = max(1000, int(options.op_timeout * 800))
        try:
            client.producer = KafkaProducer(
                bootstrap_servers=servers,
                acks=options.acks if options.acks == "all" else int(options.acks),
                retries=options.retries,
                enable_idempotence=options.idempotence,
                linger_ms=options.linger_ms,
                request_timeout_ms=timeout_ms,
                delivery_timeout_ms=timeout_ms + options.linger_ms,
                max_block_ms=timeout_ms,
                retry_backoff_ms=100,
                reconnect_backoff_max_ms=1000,
                metadata_max_age_ms=5000,
            )
            if options.sub_via == "assign":
                client._assign(list(options.key_partitions), seek_to_beginning=True)
        except BaseException:
            client.close(test)
            raise
        return client

    def setup(self, test: Any) -> None:
        """Create the topic (partitions = keys) and wait until every partition has a leader."""
        options = self.options
        admin = KafkaAdminClient(bootstrap_servers=list(options.bootstrap_servers))
        try:
            count = max(options.key_partitions.values()) + 1
            try:
                admin.create_topics([NewTopic(options.topic, count, options.replication_factor)],
                                    timeout_ms=30_000)
            except TopicAlreadyExistsError:
                pass
            admin.wait_for_topics([options.topic], timeout_ms=int(SETUP_TIMEOUT * 1000))
        finally:
            admin.close()

    def close(self, test: Any) -> None:
        self.close_member()
        if self.producer is not None:
            self.producer.close(timeout=0)
            self.producer = None
        if self.consumer is not None:
            self.consumer.close(autocommit=False)
            self.consumer = None

    # -- ops -----------------------------------------------------------------------------

    def _send(self, op: Mapping[str, Any]) -> dict[str, Any]:
        options = self.options
        futures = []
        for position, (_, key, value) in enumerate(op["value"]):
            try:
                futures.append(self.producer.send(
                    options.topic, value=str(value).encode(), key=str(key).encode(),
                    partition=options.key_partitions[key]))
            except KafkaTimeoutError:
                if position == 0:
                    return completed(op, "fail", op["value"],
                                     error="metadata unavailable: nothing sent")
                raise
            except Exception as error:
                if position == 0 and outcome(error_name(error)) == "fail":
                    return completed(op, "fail", op["value"], error=error_name(error))
                raise
        deadline = time.monotonic() + options.op_timeout
        try:
            self.producer.flush(timeout=options.op_timeout)
        except KafkaTimeoutError:
            pass
        deliveries = []
        for future in futures:
            remaining = deadline - time.monotonic()
            if not future.is_done and remaining > 0:
                try:
                    future.get(timeout=remaining)
                except Exception:
                    pass
            if not future.is_done:
                deliveries.append(Delivery())
            elif future.failed():
                deliveries.append(Delivery(error=error_name(future.exception), done=True))
            else:
                deliveries.append(Delivery(offset=future.value.offset, done=True))
        return send_completion(op, deliveries, retried=options.retries > 0)

    def _poll(self, op: Mapping[str, Any]) -> dict[str, Any]:
        batches = self.consumer.poll(timeout_ms=int(self.options.poll_timeout * 1000),
                                     max_records=self.options.max_poll_records)
        reads: dict[Any, list[list[int]]] = {}
        for partition, records in sorted(batches.items(), key=lambda item: item[0].partition):
            key = self._partition_keys[partition.partition]
            for record in records:
                reads.setdefault(key, []).append([record.offset, int(record.value)])
                self.positions.read(key, record.offset)
        return completed(op, "ok", [["poll", reads]])

    def _assign(self, keys: list[Any], seek_to_beginning: bool) -> None:
        if self.consumer is None:
            self.consumer = KafkaConsumer(
                bootstrap_servers=self.options.bootstrap_for(self.node),
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=100,
                max_poll_records=self.options.max_poll_records,
                reconnect_backoff_max_ms=1000,
                metadata_max_age_ms=5000,
            )
        starts = self.positions.assign(keys, seek_to_beginning)
        partitions = {key: TopicPartition(self.options.topic, self.options.key_partitions[key])
                      for key in keys}
        self.consumer.assign(list(partitions.values()))
        beginning = [partitions[key] for key, start in starts.items() if start is None]
        if beginning:
            self.consumer.seek_to_beginning(*beginning)
        for key, start in starts.items():
            if start is not None:
                self.consumer.seek(partitions[key], start)

    def _end_offsets(self, keys: list[Any]) -> dict[Any, int]:
        reader = KafkaConsumer(bootstrap_servers=self.options.bootstrap_for(self.node),
                               group_id=None, enable_auto_commit=False,
                               isolation_level="read_uncommitted",
                               request_timeout_ms=max(1000, int(self.options.op_timeout * 1000)))
        try:
            partitions = {key: TopicPartition(self.options.topic, self.options.key_partitions[key])
                          for key in keys}
            ends = reader.end_offsets(list(partitions.values()))
        finally:
            reader.close()
        return {key: ends[partition] for key, partition in partitions.items()}

    def committed_offsets(self, group: str) -> dict[Any, int | None]:
        options = self.options
        admin = KafkaAdminClient(bootstrap_servers=options.bootstrap_for(self.node),
                                 request_timeout_ms=max(1000, int(options.op_timeout * 1000)))
        try:
            found = admin.list_group_offsets({group: [
                TopicPartition(options.topic, partition)
                for partition in options.key_partitions.values()]})[group]
        finally:
            admin.close()
        offsets: dict[Any, int | None] = dict.fromkeys(options.key_partitions)
        for partition, committed in found.items():
            if partition.topic == options.topic and partition.partition in self._partition_keys:
                offsets[self._partition_keys[partition.partition]] = (
                    committed.offset if committed.offset >= 0 else None)
        return offsets
