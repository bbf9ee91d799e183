"""Follower fetchers: one asyncio task per source (leader) broker.

Each task keeps one connection to its leader and loops: truncate the partitions that
just became followers of this leader, then send one Fetch (replica id = this broker,
the leader epoch it knows, `replica.fetch.wait.max.ms` as max wait so an idle follower
parks in the leader's purgatory instead of spinning) and append what comes back.

Truncation on becoming a follower (`truncation_mode`):
- "leader-epoch" (KIP-101/KIP-279): ask the leader OffsetForLeaderEpoch(latest local
  epoch) -> (epoch', end'); truncate to min(end', own end offset for epoch', LEO).
- "high-watermark" (pre-KIP-101): truncate to the local high watermark, as Kafka did
  before 0.11; this can lose committed data and the harness can show it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)

from broker.errors import ErrorCode
from broker.replica.client import BrokerConnection
from broker.replica.partition import Partition
from broker.storage.errors import StorageError

__all__ = ["FetcherConfig", "FetcherManager", "ReplicaFetcher"]

log = logging.getLogger("broker.fetcher")

FETCH_VERSION = 11
EPOCH_VERSION = 3
LIST_OFFSETS_VERSION = 4
_RETRYABLE_BACKOFF = 0.1


@dataclass(frozen=True)
class FetcherConfig:
    broker_id: int
    wait_max_ms: int = 500
    fetch_max_bytes: int = 1048576
    truncation_mode: str = "leader-epoch"
    backoff_s: float = 0.2


@dataclass
class _FetchState:
    leader_epoch: int
    truncating: bool
    retry_at: float = 0.0


class ReplicaFetcher:
    """Replicates the partitions this broker follows on one leader broker."""

    def __init__(
        self,
        leader_id: int,
        host: str,
        port: int,
        config: FetcherConfig,
        lookup: Callable[[tuple[str, int]], Partition | None],
    ) -> None:
        self.leader_id = leader_id
        self.config = config
        self._lookup = lookup
        self._states: dict[tuple[str, int], _FetchState] = {}
        self._connection = BrokerConnection(host, port, f"replica-fetcher-{config.broker_id}")
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None

    @property
    def address(self) -> tuple[str, int]:
        return (self._connection.host, self._connection.port)

    def partitions(self) -> dict[tuple[str, int], int]:
        """Followed partitions and the leader epoch each is fetched at."""
        return {key: state.leader_epoch for key, state in self._states.items()}

    def add(self, key: tuple[str, int], leader_epoch: int) -> None:
        truncating = self.config.truncation_mode == "leader-epoch"
        self._states[key] = _FetchState(leader_epoch, truncating)
        self._wakeup.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"fetcher-{self.leader_id}"
            )

    def remove(self, key: tuple[str, int]) -> None:
        self._states.pop(key, None)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        self._connection.close()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._ready(loop.time()):
                self._wakeup.clear()
                delay = self._next_retry(loop.time())
                try:
                    await asyncio.wait_for(self._wakeup.wait(), delay)
                except TimeoutError:
                    pass
                continue
            try:
                if any(s.truncating for s in self._states.values()):
                    await self._truncate()
                if any(not s.truncating for s in self._states.values()):
                    await self._fetch()
            except (OSError, ConnectionError, ValueError, EOFError) as exc:
                log.info("fetcher for leader %d: %r; retrying", self.leader_id, exc)
                self._connection.close()
                await asyncio.sleep(self.config.backoff_s)
            except Exception:
                log.exception("fetcher for leader %d failed; retrying", self.leader_id)
                self._connection.close()
                await asyncio.sleep(self.config.backoff_s)

    def _ready(self, now: float) -> bool:
        return any(state.retry_at <= now for state in self._states.values())

    def _next_retry(self, now: float) -> float | None:
        if not self._states:
            return None
        return max(0.0, min(state.retry_at for state in self._states.values()) - now)

    def _backoff(self, key: tuple[str, int]) -> None:
        state = self._states.get(key)
        if state is not None:
            state.retry_at = asyncio.get_running_loop().time() + _RETRYABLE_BACKOFF

    def _current(self, key: tuple[str, int], epoch: int) -> Partition | None:
        """The partition if it is still followed here at the same leader epoch."""
        state = self._states.get(key)
        partition = self._lookup(key)
        if state is None or partition is None or state.leader_epoch != epoch:
            return None
        if partition.leader_epoch != epoch or partition.is_leader:
            return None
        return partition

    async def _truncate(self) -> None:
        now = asyncio.get_running_loop().time()
        Topic = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
        Part = Topic.OffsetForLeaderPartition
        asked: dict[tuple[str, int], tuple[int, int]] = {}
        topics: dict[str, list] = {}
        for key, state in self._states.items():
            partition = self._lookup(key)
            if not state.truncating or state.retry_at > now or partition is None:
                continue
            latest = partition.log.latest_epoch
            if latest is None:
                partition.truncate_to(partition.high_watermark)
                state.truncating = False
                continue
            asked[key] = (state.leader_epoch, latest)
            topics.setdefault(key[0], []).append(
                Part(partition=key[1], current_leader_epoch=state.leader_epoch, leader_epoch=latest)
            )
        if not topics:
            return
        request = OffsetForLeaderEpochRequest(
            replica_id=self.config.broker_id,
            topics=[Topic(topic=name, partitions=parts) for name, parts in topics.items()],
        )
        response = await self._connection.send(request, OffsetForLeaderEpochResponse, EPOCH_VERSION)
        for topic in response.topics:
            for result in topic.partitions:
                key = (topic.topic, result.partition)
                if key not in asked:
                    continue
                epoch, latest = asked[key]
                partition = self._current(key, epoch)
                if partition is None:
                    continue
                if result.error_code != ErrorCode.NONE:
                    self._backoff(key)
                    continue
                target = self._truncation_offset(
                    partition, latest, result.leader_epoch, result.end_offset
                )
                log.info(
                    "%s-%d: truncating to %d (leader %d answered epoch %d end %d; LEO %d)",
                    key[0],
                    key[1],
                    target,
                    self.leader_id,
                    result.leader_epoch,
                    result.end_offset,
                    partition.log_end_offset,
                )
                partition.truncate_to(target)
                self._states[key].truncating = False

    @staticmethod
    def _truncation_offset(
        partition: Partition, asked_epoch: int, leader_epoch: int, leader_end: int
    ) -> int:
        leo = partition.log_end_offset
        if leader_epoch < 0 or leader_end < 0:
            return min(partition.high_watermark, leo)
        target = min(leader_end, leo)
        if leader_epoch < asked_epoch:
            own_epoch, own_end = partition.log.end_offset_for_epoch(leader_epoch)
            if own_epoch == leader_epoch and own_end >= 0:
                target = min(target, own_end)
        return target

    async def _fetch(self) -> None:
        now = asyncio.get_running_loop().time()
        Topic = FetchRequest.FetchTopic
        Part = Topic.FetchPartition
        sent: dict[tuple[str, int], tuple[int, int]] = {}
        topics: dict[str, list] = {}
        for key, state in self._states.items():
            partition = self._lookup(key)
            if state.truncating or state.retry_at > now or partition is None:
                continue
            offset = partition.log_end_offset
            sent[key] = (state.leader_epoch, offset)
            topics.setdefault(key[0], []).append(
                Part(
                    partition=key[1],
                    current_leader_epoch=state.leader_epoch,
                    fetch_offset=offset,
                    log_start_offset=partition.log.log_start_offset,
                    partition_max_bytes=self.config.fetch_max_bytes,
                )
            )
        if not topics:
            return
        request = FetchRequest(
            replica_id=self.config.broker_id,
            max_wait_ms=self.config.wait_max_ms,
            min_bytes=1,
            max_bytes=self.config.fetch_max_bytes * 4,
            isolation_level=0,
            topics=[Topic(topic=name, partitions=parts) for name, parts in topics.items()],
        )
        response = await self._connection.send(request, FetchResponse, FETCH_VERSION)
        for topic in response.responses:
            for data in topic.partitions:
                key = (topic.topic, data.partition_index)
                if key not in sent:
                    continue
                epoch, offset = sent[key]
                partition = self._current(key, epoch)
                if partition is None or partition.log_end_offset != offset:
                    continue
                code = data.error_code
                if code == ErrorCode.NONE:
                    try:
                        partition.append_as_follower(data.records or b"", data.high_watermark)
                    except StorageError as exc:
                        log.warning("%s-%d: follower append failed: %r", key[0], key[1], exc)
                        self._backoff(key)
                elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    await self._handle_out_of_range(key, epoch)
                else:
                    self._backoff(key)

    async def _handle_out_of_range(self, key: tuple[str, int], epoch: int) -> None:
        """Our LEO is beyond the leader's (truncate to it) or below its log start (start over)."""
        Topic = ListOffsetsRequest.ListOffsetsTopic
        request = ListOffsetsRequest(
            replica_id=self.config.broker_id,
            isolation_level=0,
            topics=[
                Topic(
                    name=key[0],
                    partitions=[
                        Topic.ListOffsetsPartition(
                            partition_index=key[1], current_leader_epoch=epoch, timestamp=-1
                        )
                    ],
                )
            ],
        )
        latest = await self._connection.send(request, ListOffsetsResponse, LIST_OFFSETS_VERSION)
        request.topics[0].partitions[0].timestamp = -2
        earliest = await self._connection.send(request, ListOffsetsResponse, LIST_OFFSETS_VERSION)
        partition = self._current(key, epoch)
        end = latest.topics[0].partitions[0]
        start = earliest.topics[0].partitions[0]
        if partition is None or end.error_code or start.error_code:
            self._backoff(key)
            return
        if partition.log_end_offset > end.offset:
            log.warning(
                "%s-%d: LEO %d beyond leader's %d; truncating",
                key[0],
                key[1],
                partition.log_end_offset,
                end.offset,
            )
            partition.truncate_to(end.offset)
        else:
            log.warning(
                "%s-%d: LEO %d below leader's log start %d; restarting the log there",
                key[0],
                key[1],
                partition.log_end_offset,
                start.offset,
            )
            partition.log.truncate_fully_and_start_at(start.offset)
            partition.truncate_to(start.offset)


class FetcherManager:
    """The set of fetchers of this broker, keyed by leader broker id."""

    def __init__(
        self, config: FetcherConfig, lookup: Callable[[tuple[str, int]], Partition | None]
    ) -> None:
        self.config = config
        self._lookup = lookup
        self._fetchers: dict[int, ReplicaFetcher] = {}

    def add(
        self, key: tuple[str, int], leader_id: int, host: str, port: int, leader_epoch: int
    ) -> None:
        self.remove(key)
        fetcher = self._fetchers.get(leader_id)
        moved: dict[tuple[str, int], int] = {}
        if fetcher is not None and fetcher.address != (host, port):
            asyncio.get_running_loop().create_task(fetcher.stop())
            moved = fetcher.partitions()
            fetcher = None
        if fetcher is None:
            fetcher = self._fetchers[leader_id] = ReplicaFetcher(
                leader_id, host, port, self.config, self._lookup
            )
        for other, epoch in moved.items():
            fetcher.add(other, epoch)
        fetcher.add(key, leader_epoch)

    def remove(self, key: tuple[str, int]) -> None:
        for fetcher in self._fetchers.values():
            fetcher.remove(key)

    async def stop(self) -> None:
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        for fetcher in fetchers:
            await fetcher.stop()
