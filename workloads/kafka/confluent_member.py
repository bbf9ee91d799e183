"""A consumer-group member on confluent-kafka (librdkafka), inside its child process
(`main` is the child's entry point, `workloads.groups.consumer.run`).

It subscribes to the topic with the eager protocol (librdkafka's default range and
roundrobin assignors) and records each rebalance callback (`on_assign`, `on_revoke`,
`on_lost`) with `Consumer.memberid()`. The generation is null: librdkafka does not expose
it (only inside the opaque, serialized `consumer_group_metadata()`). Commit modes: `auto`
sets `enable.auto.commit` (offsets stored as poll returns records, committed every
second and on close); the others commit synchronously the offsets asked for.

Commit outcomes: a rejection for group membership (the member is not of the current
generation, or the group is rebalancing) is `fail`, nothing was written; anything else
(timeouts, coordinator moves, transport errors) is `info`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from workloads.groups.consumer import CommitResult, EventLog, MemberConfig, Reads, run
from workloads.kafka.client import LIBRDKAFKA_LOGGER
from workloads.kafka.confluent import poll_records

__all__ = ["COMMIT_REJECTIONS", "ConfluentMember", "main"]

COMMIT_REJECTIONS = frozenset({"ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID",
                               "REBALANCE_IN_PROGRESS", "FENCED_INSTANCE_ID",
                               "_ASSIGNMENT_LOST", "_NO_OFFSET", "_STATE"})


class ConfluentMember:
    def __init__(self, config: MemberConfig) -> None:
        self.config = config
        self.events = EventLog()
        self.consumer = Consumer(self._consumer_config())
        self.record_keys = {(config.topic, partition): key
                            for partition, key in config.partition_keys.items()}

    def _consumer_config(self) -> dict[str, Any]:
        config = self.config
        settings: dict[str, Any] = {
            "bootstrap.servers": ",".join(config.bootstrap_servers),
            "client.id": f"kchaos-{config.group}-{uuid.uuid4().hex[:6]}",
            "group.id": config.group,
            "enable.auto.commit": config.commit == "auto",
            "auto.commit.interval.ms": 1000,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": config.session_timeout_ms,
            "heartbeat.interval.ms": config.heartbeat_interval_ms,
            "max.poll.interval.ms": config.max_poll_interval_ms,
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
            "reconnect.backoff.max.ms": 1000,
            "socket.timeout.ms": max(1000, int(config.op_timeout * 1000)),
            "log_level": 3,
            "logger": logging.getLogger(LIBRDKAFKA_LOGGER),
        }
        if config.group_protocol == "consumer":
            # KIP-848: the coordinator owns the session and heartbeat timings
            del settings["session.timeout.ms"], settings["heartbeat.interval.ms"]
            settings["group.protocol"] = "consumer"
        return settings

    def _keys(self, partitions: list[TopicPartition]) -> list[Any]:
        """The keys of `partitions`; one an `add-partitions` fault added has none (it holds
        no record of the test)."""
        keys = self.config.partition_keys
        return [keys[p.partition] for p in partitions
                if p.topic == self.config.topic and p.partition in keys]

    def _member(self) -> str | None:
        return self.consumer.memberid()

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.events.record(generation=None, member=self._member(),
                           assigned=self._keys(partitions))

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.events.record(generation=None, member=self._member(),
                           revoked=self._keys(partitions))

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.events.record(generation=None, member=self._member(),
                           revoked=self._keys(partitions), lost=True)

    def subscribe(self) -> None:
        self.consumer.subscribe([self.config.topic], on_assign=self._assigned,
                                on_revoke=self._revoked, on_lost=self._lost)

    def fetch(self) -> tuple[Reads, list[str]]:
        reads, errors, _ = poll_records(self.consumer, self.config.poll_timeout,
                                        self.config.max_poll_records, self.record_keys)
        return reads, errors

    def commit(self, offsets: Mapping[Any, int]) -> CommitResult:
        partitions = self.config.key_partitions
        try:
            committed = self.consumer.commit(offsets=[
                TopicPartition(self.config.topic, partitions[key], offset)
                for key, offset in offsets.items()], asynchronous=False)
        except KafkaException as error:
            return _outcome(error.args[0])
        errors = [p.error for p in committed or () if p.error is not None]
        return _outcome(errors[0]) if errors else CommitResult("ok")

    def close(self) -> None:
        self.consumer.close()


def _outcome(error: KafkaError) -> CommitResult:
    name = error.name()
    return CommitResult("fail" if name in COMMIT_REJECTIONS else "info", name)


def main() -> None:
    run(ConfluentMember)
