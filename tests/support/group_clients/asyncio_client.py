"""The aiokafka group consumer: `AIOKafkaConsumer.subscribe` with a
`ConsumerRebalanceListener`, a synchronous (awaited) commit after each batch is written.

`python -m tests.support.group_clients.asyncio_client BOOTSTRAP GROUP TOPIC`
"""

from __future__ import annotations

import asyncio
import signal
import sys

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

from tests.support.group_clients.emit import (
    HEARTBEAT_INTERVAL_MS,
    METADATA_MAX_AGE_MS,
    POLL_SECONDS,
    SESSION_TIMEOUT_MS,
    Offsets,
    arguments,
    emit,
    warn,
)


class GroupConsumer(ConsumerRebalanceListener):
    """The consumer, its written-out offsets, and its rebalance callbacks."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.topic = topic
        self.offsets = Offsets()
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            auto_offset_reset="earliest", metadata_max_age_ms=METADATA_MAX_AGE_MS,
            enable_auto_commit=False)
        self.consumer.subscribe([topic], listener=self)

    async def commit(self, partitions: list[int] | None = None) -> None:
        pending = self.offsets.pending(partitions)
        if not pending:
            return
        try:
            await self.consumer.commit({TopicPartition(self.topic, p): o
                                        for p, o in pending.items()})
        except KafkaError as error:
            warn(f"commit failed: {error!r}")
            return
        self.offsets.done(pending)

    async def on_partitions_revoked(self, revoked) -> None:
        numbers = sorted(tp.partition for tp in revoked)
        await self.commit(numbers)
        self.offsets.forget(numbers)
        emit("revoked", partitions=numbers)

    async def on_partitions_assigned(self, assigned) -> None:
        emit("assigned", partitions=sorted(tp.partition for tp in assigned))

    async def poll(self) -> None:
        batches = await self.consumer.getmany(timeout_ms=int(POLL_SECONDS * 1000))
        for partition, records in batches.items():
            for record in records:
                emit("record", partition=partition.partition, offset=record.offset,
                     value=(record.value or b"").decode())
                self.offsets.record(partition.partition, record.offset)
        await self.commit()


async def run(argv: list[str]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    group_consumer = GroupConsumer(*arguments(argv))
    await group_consumer.consumer.start()
    try:
        while not stop.is_set():
            await group_consumer.poll()
    finally:
        await group_consumer.consumer.stop()


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1:]))
