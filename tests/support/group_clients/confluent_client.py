"""The confluent-kafka (librdkafka) group consumer: `Consumer.subscribe` with on_assign,
on_revoke and on_lost callbacks, a synchronous commit after each poll's records are written.

`python -m tests.support.group_clients.confluent_client BOOTSTRAP GROUP TOPIC`
"""

from __future__ import annotations

import sys

from confluent_kafka import Consumer, KafkaException, TopicPartition

from tests.support.group_clients.emit import (
    HEARTBEAT_INTERVAL_MS,
    METADATA_MAX_AGE_MS,
    POLL_SECONDS,
    SESSION_TIMEOUT_MS,
    Offsets,
    arguments,
    emit,
    stop_on_sigterm,
    warn,
)


def main(argv: list[str]) -> None:
    bootstrap, group, topic = arguments(argv)
    stop = stop_on_sigterm()
    offsets = Offsets()
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group,
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        "auto.offset.reset": "earliest",
        "metadata.max.age.ms": METADATA_MAX_AGE_MS,
        "topic.metadata.refresh.interval.ms": METADATA_MAX_AGE_MS,
        "enable.auto.commit": False, "enable.auto.offset.store": False,
    })

    def commit(partitions: list[int] | None = None) -> None:
        pending = offsets.pending(partitions)
        if not pending:
            return
        try:
            consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in pending.items()],
                            asynchronous=False)
        except KafkaException as error:
            warn(f"commit failed: {error}")
            return
        offsets.done(pending)

    def on_assign(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
        emit("assigned", partitions=sorted(p.partition for p in partitions))

    def on_revoke(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
        numbers = sorted(p.partition for p in partitions)
        commit(numbers)
        offsets.forget(numbers)
        emit("revoked", partitions=numbers)

    def on_lost(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
        numbers = sorted(p.partition for p in partitions)
        offsets.forget(numbers)
        emit("revoked", partitions=numbers)

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    try:
        while not stop.is_set():
            for message in consumer.consume(1000, POLL_SECONDS):
                if message.error() is not None:
                    warn(f"consume: {message.error()}")
                    continue
                emit("record", partition=message.partition(), offset=message.offset(),
                     value=(message.value() or b"").decode())
                offsets.record(message.partition(), message.offset())
            commit()
    finally:
        consumer.close()


if __name__ == "__main__":
    main(sys.argv[1:])
