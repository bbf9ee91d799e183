"""The kafka-python group consumer: `KafkaConsumer.subscribe` with a
`ConsumerRebalanceListener`, a synchronous commit after each poll's records are written.

kafka-python 3.0.12 applies the outcome of a JoinGroup only in a `poll` that is waiting for
it: a join that ends after its `poll` timed out is dropped, and the next `poll` joins again
only if `need_rejoin()` still says so. A group leader that rejoins because the topic grew
stops saying so as soon as it has assigned the new partitions, so such a leader is left with
no partitions and its heartbeat stopped until the coordinator drops it from the group. The
consumer therefore polls with a long timeout while a join is under way, and raises the
rejoin flag as each join starts (as the Java client does for a metadata change), so a
dropped join is joined again.

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

REBALANCE_POLL_SECONDS = 15.0


class GroupConsumer(ConsumerRebalanceListener):
    """The consumer, its written-out offsets, and its rebalance callbacks."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.topic = topic
        self.offsets = Offsets()
        self.rebalancing = False
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
        """A join starts (once per join): commit and forget the revoked partitions, and
        keep joining until an assignment is applied."""
        self.rebalancing = True
        self.consumer._coordinator.request_rejoin()
        numbers = sorted(tp.partition for tp in revoked)
        self.commit(numbers)
        self.offsets.forget(numbers)
        emit("revoked", partitions=numbers)

    def on_partitions_assigned(self, assigned) -> None:
        self.rebalancing = False
        emit("assigned", partitions=sorted(tp.partition for tp in assigned))

    def poll(self) -> None:
        seconds = REBALANCE_POLL_SECONDS if self.rebalancing else POLL_SECONDS
        batches = self.consumer.poll(timeout_ms=int(seconds * 1000))
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
