"""Topic creation through ZooKeeper, as Kafka's ZooKeeper-era brokers do it.

The data plane computes only the replica assignment (`broker.controller.assignment`)
and writes /brokers/topics/<t> (+ /config/topics/<t>); the active controller sees the
new topic, elects leaders and tells the brokers. CreateTopics with timeout_ms > 0
waits until the metadata cache shows a live leader for every partition.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re

from kafka.protocol.admin import CreatePartitionsResponse, CreateTopicsResponse

from broker import zk as zkpaths
from broker.controller.assignment import InvalidReplicationFactorError, assign_replicas
from broker.errors import BrokerError, ErrorCode

__all__ = [
    "TopicCreator",
    "handle_create_partitions",
    "handle_create_topics",
    "validate_topic_name",
]

log = logging.getLogger("broker.topics")

_LEGAL = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
TOPIC_CONFIGS = {
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "retention.ms",
    "retention.bytes",
    "segment.bytes",
    "cleanup.policy",
    "flush.messages",
    "flush.ms",
}


def validate_topic_name(name: str) -> None:
    if not name or name in (".", "..") or not _LEGAL.match(name):
        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"illegal topic name {name!r}")


class TopicCreator:
    def __init__(self, zk, metadata, rng: random.Random | None = None) -> None:
        self.zk = zk
        self.metadata = metadata
        self.rng = rng or random.Random()
        self._changed = asyncio.Event()

    def metadata_changed(self) -> None:
        """Hooked to UpdateMetadata so waiting creations re-check."""
        self._changed.set()

    async def create(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        assignment: dict[int, list[int]] | None = None,
        config: dict[str, str] | None = None,
        validate_only: bool = False,
    ) -> None:
        validate_topic_name(name)
        for key in config or {}:
            if key not in TOPIC_CONFIGS:
                raise BrokerError(ErrorCode.INVALID_CONFIG, f"unsupported topic config {key!r}")
        loop = asyncio.get_running_loop()
        brokers = await loop.run_in_executor(None, zkpaths.read_brokers, self.zk)
        if not assignment:
            if partitions < 1:
                raise BrokerError(ErrorCode.INVALID_PARTITIONS, f"{partitions} partitions")
            assignment = self._assign(brokers, partitions, replication_factor)
        elif sorted(assignment) != list(range(len(assignment))) or any(
            not replicas or len(set(replicas)) != len(replicas) for replicas in assignment.values()
        ):
            raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"{assignment}")
        if validate_only:
            return
        try:
            await loop.run_in_executor(
                None, zkpaths.create_topic, self.zk, name, assignment, config
            )
        except zkpaths.TopicExistsError as exc:
            raise BrokerError(
                ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists"
            ) from exc
        log.info("created topic %s with assignment %s", name, assignment)

    async def add_partitions(
        self,
        name: str,
        count: int,
        assignment: list[list[int]] | None = None,
        validate_only: bool = False,
    ) -> None:
        """Grow topic `name` to `count` partitions (CreatePartitions); new replicas are
        assigned like a new topic's, with the topic's replication factor, unless given."""
        loop = asyncio.get_running_loop()
        current = await loop.run_in_executor(None, zkpaths.read_topic_assignment, self.zk, name)
        if current is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        if count <= len(current):
            raise BrokerError(
                ErrorCode.INVALID_PARTITIONS,
                f"topic {name!r} has {len(current)} partitions; {count} would not add any",
            )
        added_count = count - len(current)
        replication = len(current[0]) if current else 1
        brokers = await loop.run_in_executor(None, zkpaths.read_brokers, self.zk)
        if assignment:
            if len(assignment) != added_count or any(
                len(r) != replication or len(set(r)) != len(r) or not set(r) <= set(brokers)
                for r in assignment
            ):
                raise BrokerError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"{assignment} is not {added_count} lists of {replication} distinct "
                    f"live brokers",
                )
            new = {len(current) + i: list(r) for i, r in enumerate(assignment)}
        else:
            fresh = self._assign(brokers, added_count, replication)
            new = {len(current) + i: r for i, r in fresh.items()}
        if validate_only:
            return
        try:
            await loop.run_in_executor(None, zkpaths.add_partitions, self.zk, name, new)
        except Exception as exc:
            raise BrokerError(
                ErrorCode.REQUEST_TIMED_OUT, f"topic {name!r} changed meanwhile: {exc!r}"
            ) from exc
        log.info("added partitions to %s: %s", name, new)

    def _assign(self, brokers: dict, partitions: int, replication_factor: int
                ) -> dict[int, list[int]]:
        """Replicas for `partitions` new partitions over the live `brokers`."""
        try:
            return assign_replicas(
                [(b.broker_id, b.rack) for b in brokers.values()],
                partitions,
                replication_factor,
                self.rng,
            )
        except InvalidReplicationFactorError as exc:
            raise BrokerError(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc)) from exc

    async def wait_for_leaders(self, name: str, partitions: int, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.metadata.has_leaders(name, partitions):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.5))
            except TimeoutError:
                pass
        return True


async def handle_create_topics(context, request, version: int, header):
    results = []
    for topic in request.topics:
        assignment = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
        partitions = (
            len(assignment)
            if assignment
            else (topic.num_partitions if topic.num_partitions > 0 else context.num_partitions)
        )
        replication = (
            topic.replication_factor
            if topic.replication_factor > 0
            else context.default_replication_factor
        )
        code, message = ErrorCode.NONE, None
        try:
            await context.topic_creator.create(
                topic.name,
                partitions,
                replication,
                assignment or None,
                {c.name: c.value for c in topic.configs if c.value is not None},
                request.validate_only,
            )
            if request.timeout_ms > 0 and not request.validate_only:
                if not await context.topic_creator.wait_for_leaders(
                    topic.name, partitions, request.timeout_ms / 1000
                ):
                    code, message = ErrorCode.REQUEST_TIMED_OUT, "leaders not elected in time"
        except BrokerError as exc:
            code, message = exc.code, str(exc)
        results.append(
            CreateTopicsResponse.CreatableTopicResult(
                name=topic.name, error_code=code, error_message=message
            )
        )
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


async def handle_create_partitions(context, request, version: int, header):
    results = []
    for topic in request.topics:
        code, message = ErrorCode.NONE, None
        try:
            if topic.name.startswith("__"):
                raise BrokerError(
                    ErrorCode.INVALID_REQUEST, f"{topic.name!r} is an internal topic"
                )
            assignment = (
                [list(a.broker_ids) for a in topic.assignments] if topic.assignments else None
            )
            await context.topic_creator.add_partitions(
                topic.name, topic.count, assignment, request.validate_only
            )
            if request.timeout_ms > 0 and not request.validate_only:
                if not await context.topic_creator.wait_for_leaders(
                    topic.name, topic.count, request.timeout_ms / 1000
                ):
                    code, message = ErrorCode.REQUEST_TIMED_OUT, "leaders not elected in time"
        except BrokerError as exc:
            code, message = exc.code, str(exc)
        results.append(
            CreatePartitionsResponse.CreatePartitionsTopicResult(
                name=topic.name, error_code=code, error_message=message
            )
        )
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)
