"""A consumer-group member on kafka-python, inside its child process (`main` is the
child's entry point, `workloads.groups.consumer.run`).

It subscribes with a `ConsumerRebalanceListener` (eager protocol: kafka-python's default
range and roundrobin assignors) and records each callback (`on_partitions_assigned`,
`on_partitions_revoked`, `on_partitions_lost`) with the generation and member id from
the public `KafkaConsumer.group_metadata()` snapshot (null before the first join, when
the generation is -1). Callbacks run on kafka-python's IO thread, possibly between two
requests of the parent: such an entry rides on the reply to the next request, with the
time it ran. Commit modes: `auto` sets `enable_auto_commit` (every second and on close);
the others commit synchronously the offsets asked for.

kafka-python (3.0.12) applies a JoinGroup's outcome only inside a `poll` waiting for it: a
join that ends after its poll timed out is dropped, and the next poll joins again only if
`need_rejoin()` still says so, which a leader that rejoined for a grown topic no longer
does once it has assigned. Such a member would hold nothing with its heartbeat stopped
until the coordinator drops it. So each revocation (a join starting) raises the rejoin
flag, as the Java client does on a metadata change, and a dropped join is joined again.

Commit outcomes: `CommitFailedError` and membership rejections (illegal generation,
unknown member, rebalance in progress, fenced instance) are `fail`, nothing was
written; anything else is `info`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    IllegalGenerationError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from kafka.structs import OffsetAndMetadata

from workloads.groups.consumer import CommitResult, EventLog, MemberConfig, Reads, run

__all__ = ["COMMIT_REJECTIONS", "KafkaPythonMember", "main"]

COMMIT_REJECTIONS = (CommitFailedError, IllegalGenerationError, UnknownMemberIdError,
                     RebalanceInProgressError, FencedInstanceIdError)


class _Listener(ConsumerRebalanceListener):
    def __init__(self, member: KafkaPythonMember) -> None:
        self.member = member

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.member.record(assigned=assigned)

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.member.consumer._coordinator.request_rejoin()
        self.member.record(revoked=revoked)

    def on_partitions_lost(self, lost: Any) -> None:
        self.member.record(revoked=lost, lost=True)


class KafkaPythonMember:
    def __init__(self, config: MemberConfig) -> None:
        self.config = config
        self.events = EventLog()
        self.consumer = KafkaConsumer(
            bootstrap_servers=list(config.bootstrap_servers),
            group_id=config.group,
            enable_auto_commit=config.commit == "auto",
            auto_commit_interval_ms=1000,
            auto_offset_reset="earliest",
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            max_poll_interval_ms=config.max_poll_interval_ms,
            fetch_max_wait_ms=100,
            max_poll_records=config.max_poll_records,
            reconnect_backoff_max_ms=1000,
            metadata_max_age_ms=5000,
            request_timeout_ms=max(config.session_timeout_ms + 1000,
                                   int(config.op_timeout * 1000)),
        )

    def record(self, *, assigned: Any = (), revoked: Any = (), lost: bool = False) -> None:
        metadata = self.consumer.group_metadata()
        generation = metadata.generation_id if metadata.generation_id >= 0 else None
        self.events.record(generation=generation, member=metadata.member_id or None,
                           assigned=self._keys(assigned), revoked=self._keys(revoked),
                           lost=lost)

    def _keys(self, partitions: Any) -> list[Any]:
        """The keys of `partitions`; one an `add-partitions` fault added has none (it holds
        no record of the test). Raising here would make kafka-python fail the poll with
        "User rebalance callback throws an error" at every rebalance of a grown topic."""
        keys = self.config.partition_keys
        return [keys[p.partition] for p in partitions or ()
                if p.topic == self.config.topic and p.partition in keys]

    def subscribe(self) -> None:
        self.consumer.subscribe([self.config.topic], listener=_Listener(self))

    def fetch(self) -> tuple[Reads, list[str]]:
        batches = self.consumer.poll(timeout_ms=int(self.config.poll_timeout * 1000),
                                     max_records=self.config.max_poll_records)
        reads: Reads = {}
        for partition, records in sorted(batches.items(), key=lambda item: item[0].partition):
            key = self.config.partition_keys[partition.partition]
            reads.setdefault(key, []).extend([r.offset, int(r.value)] for r in records)
        return reads, []

    def commit(self, offsets: Mapping[Any, int]) -> CommitResult:
        partitions = self.config.key_partitions
        try:
            self.consumer.commit({
                TopicPartition(self.config.topic, partitions[key]): OffsetAndMetadata(n, "", -1)
                for key, n in offsets.items()})
        except COMMIT_REJECTIONS as error:
            return CommitResult("fail", type(error).__name__)
        except Exception as error:
            return CommitResult("info", type(error).__name__)
        return CommitResult("ok")

    def close(self) -> None:
        self.consumer.close(autocommit=self.config.commit == "auto")


def main() -> None:
    run(KafkaPythonMember)
