"""The kafka-python group consumer: `KafkaConsumer.subscribe` with a
`ConsumerRebalanceListener`, a synchronous commit after each poll's records are written.

`python -m tests.support.group_clients.python_client BOOTSTRAP GROUP TOPIC`
"""

from __future__ import annotations

import sys

from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

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


class GroupConsumer(ConsumerRebalanceListener):
    """The consumer, its written-out offsets, and its rebalance callbacks."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.topic = topic
        self.offsets = Offsets()
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap.split(","), group_id=group,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            auto_offset_reset="earliest", metadata_max_age_ms=METADATA_MAX_AGE_MS,
            enable_auto_commit=False)
        self.consumer.subscribe([topic], listener=self)

    def commit(self, partitions: list[int] | None = None) -> None:
        pending = self.offsets.pending(partitions)
        if not pending:
            return
        try:
            self.consumer.commit({TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1)
                                  for p, o in pending.items()})
        except KafkaError as error:
            warn(f"commit failed: {error!r}")
            return
        self.offsets.done(pending)

    def on_partitions_revoked(self, revoked) -> None:
        numbers = sorted(tp.partition for tp in revoked)
        self.commit(numbers)
        self.offsets.forget(numbers)
        emit("revoked", partitions=numbers)

    def on_partitions_assigned(self, assigned) -> None:
        emit("assigned", partitions=sorted(tp.partition for tp in assigned))

    def poll(self) -> None:
        batches = self.consumer.poll(timeout_ms=int(POLL_SECONDS * 1000))
        for partition, records in batches.items():
            for record in records:
                emit("record", partition=partition.partition, offset=record.offset,
                     value=(record.value or b"").decode())
                self.offsets.record(partition.partition, record.offset)
        self.commit()


def main(argv: list[str]) -> None:
    stop = stop_on_sigterm()
    group_consumer = GroupConsumer(*arguments(argv))
    try:
        while not stop.is_set():
            group_consumer.poll()
    finally:
        group_consumer.consumer.close(autocommit=False)


if __name__ == "__main__":
    main(sys.argv[1:])
