"""ReplicaManager: the partitions hosted by this broker and what the controller tells them.

Implements the control plane's `ControlRequestHandler`:
- LeaderAndIsr: for each partition, a request whose leader epoch is older than the one
  known here is ignored (STALE_CONTROLLER_EPOCH, as Kafka answers); otherwise become
  leader (stop fetching, reset follower state) or follower (abort waiting produces,
  truncate to the HW in `high-watermark` mode, start fetching from the leader; in
  `leader-epoch` mode the fetcher truncates first).
- UpdateMetadata: the metadata cache used by Metadata requests.
- StopReplica: stop fetching; delete the log when asked.

Periodic tasks: ISR shrink check, high-watermark checkpoint, Kafka's log flusher (every
`log.flush.scheduler.interval.ms`, if set: fsync each log whose last flush is older than its
flush.ms), recovery-point checkpoint, retention (not on compact-only topics) and the log
cleaner (topics whose cleanup.policy includes compact, and `__consumer_offsets`; see
broker/storage/cleaner.py). The flush.messages and flush.ms topic configs override the
broker's log.flush.interval.messages and log.flush.interval.ms. Topic configs are read from
ZooKeeper once per topic and cached.
ISR changes are written to ZooKeeper with the znode version as compare-and-set and
announced through /isr_change_notification.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from broker import zk as zkpaths
from broker.control_plane.messages import (
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from broker.errors import BrokerError, ErrorCode
from broker.event_log import EventLog
from broker.replica.fetcher import FetcherConfig, FetcherManager
from broker.replica.metadata_cache import MetadataCache
from broker.replica.partition import Partition
from broker.storage import CleanerConfig, CleanupPolicy, cleanup_policy
from broker.storage.cleaner import clean_log_async

__all__ = ["ReplicaManager", "ReplicaSettings"]

log = logging.getLogger("broker.replica")

# topic configs overriding the broker's flush policy -> LogConfig fields
FLUSH_TOPIC_CONFIGS = {"flush.messages": "flush_messages", "flush.ms": "flush_ms"}


@dataclass(frozen=True)
class ReplicaSettings:
    broker_id: int
    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = 30000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1048576
    truncation_mode: str = "leader-epoch"
    hw_checkpoint_interval_ms: int = 5000
    log_flush_scheduler_interval_ms: int | None = None  # None: the flusher never runs
    log_flush_offset_checkpoint_interval_ms: int = 60000
    retention_check_interval_ms: int = 30000
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15000
    log_cleaner_delete_retention_ms: int = 86400000
    log_cleaner_min_cleanable_ratio: float = 0.5
    debug_skip_epoch_fencing: bool = False  # kchaos.debug.skip-epoch-fencing
    debug_read_uncommitted_leak: bool = False  # kchaos.debug.read-uncommitted-leak

    @property
    def cleaner(self) -> CleanerConfig:
        """The broker-wide compaction defaults (topics override them)."""
        return CleanerConfig(self.log_cleaner_delete_retention_ms,
                             self.log_cleaner_min_cleanable_ratio)


class ReplicaManager:
    def __init__(self, settings: ReplicaSettings, logs, zk=None) -> None:
        self.settings = settings
        self.broker_id = settings.broker_id
        self.logs = logs
        self.zk = zk
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.metadata = MetadataCache()
        self.fetchers = FetcherManager(
            FetcherConfig(
                settings.broker_id,
                settings.replica_fetch_wait_max_ms,
                settings.replica_fetch_max_bytes,
                settings.truncation_mode,
            ),
            self.partitions.get,
        )
        self.on_metadata_update: list[Callable[[], None]] = []
        # (partition, leader epoch) when this broker starts leading it; (partition, None)
        # when it stops (becomes a follower or the replica is stopped)
        self.on_leadership: list[Callable[[tuple[str, int], int | None], None]] = []
        # The node's event log, where partitions record a seeded defect acting (set by the node).
        self.events: EventLog | None = None
        self._checkpointed_hw = logs.high_watermarks()
        self._topic_configs: dict[str, dict[str, str]] = {}
        self._tasks: list[asyncio.Task] = []

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        lag = self.settings.replica_lag_time_max_ms
        self._tasks = [
            loop.create_task(self._every(lag / 2000.0, self._shrink_isrs), name="isr-expiration"),
            loop.create_task(
                self._every(
                    self.settings.hw_checkpoint_interval_ms / 1000.0,
                    self.checkpoint_high_watermarks,
                ),
                name="hw-checkpoint",
            ),
            loop.create_task(
                self._every(
                    self.settings.log_flush_offset_checkpoint_interval_ms / 1000.0,
                    self.logs.checkpoint_recovery_points,
                ),
                name="recovery-point-checkpoint",
            ),
            loop.create_task(
                self._every(self.settings.retention_check_interval_ms / 1000.0, self._retention),
                name="log-retention",
            ),
        ]
        if self.settings.log_flush_scheduler_interval_ms is not None:
            self._tasks.append(loop.create_task(
                self._every(self.settings.log_flush_scheduler_interval_ms / 1000.0,
                            self._flush_due),
                name="log-flusher",
            ))
        if self.settings.log_cleaner_enable:
            self._tasks.append(loop.create_task(
                self._every(self.settings.log_cleaner_backoff_ms / 1000.0, self._clean_logs),
                name="log-cleaner",
            ))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.fetchers.stop()
        for partition in self.partitions.values():
            partition.abort_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self.checkpoint_high_watermarks()

    @staticmethod
    async def _every(seconds: float, action: Callable[[], object]) -> None:
        """Run `action` (a function or a coroutine function) every `seconds`."""
        while True:
            await asyncio.sleep(seconds)
            try:
                result = action()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("periodic %s failed", getattr(action, "__name__", action))

    def _shrink_isrs(self) -> None:
        for partition in self.partitions.values():
            partition.maybe_shrink_isr(self.settings.replica_lag_time_max_ms)

    def checkpoint_high_watermarks(self) -> None:
        hws = {key: p.high_watermark for key, p in self.partitions.items()}
        self.logs.checkpoint_high_watermarks(hws)

    def _flush_due(self) -> None:
        """Kafka's flushDirtyLogs: each log whose flush.ms has passed since its last flush."""
        for partition in list(self.partitions.values()):
            partition.log.flush_if_due()

    async def _retention(self) -> None:
        hws = {key: p.high_watermark for key, p in self.partitions.items()}
        compact_only = set()
        for key in self.logs.partitions():
            try:
                if not (await self._cleanup_policy(key[0])).delete:
                    compact_only.add(key)
            except ValueError:
                log.warning("%s: bad topic config, no retention", key[0], exc_info=True)
                compact_only.add(key)
        deleted = self.logs.delete_old_segments(hws, exclude=compact_only)
        if deleted:
            log.info("retention deleted %d segments", deleted)

    async def _clean_logs(self) -> None:
        """One cleaning round per compacted partition hosted here, below its HW."""
        loop = asyncio.get_running_loop()
        for key, partition in list(self.partitions.items()):
            try:
                policy = await self._cleanup_policy(key[0])
                if policy.compact and self.partitions.get(key) is partition:
                    await clean_log_async(partition.log, partition.high_watermark,
                                          policy.cleaner, loop)
            except Exception:
                log.exception("%s-%d: log cleaning failed", *key)

    # -- lookups for the request handlers --------------------------------------------

    def leader_partition(self, topic: str, index: int, current_leader_epoch: int = -1) -> Partition:
        """The partition if this broker leads it; raises BrokerError otherwise."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            if self.metadata.partition(topic, index) is not None:
                raise BrokerError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        partition.require_leader(current_leader_epoch)
        return partition

    # -- ControlRequestHandler ---------------------------------------------------------

    async def leader_and_isr(self, request: LeaderAndIsrRequest) -> dict[tuple[str, int], int]:
        errors: dict[tuple[str, int], int] = {}
        leaders = {broker.broker_id: broker for broker in request.live_leaders}
        for state in request.partition_states:
            key = (state.topic, state.partition)
            if self.broker_id not in state.replicas:
                errors[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            partition = self.partitions.get(key)
            if partition is not None and state.leader_epoch < partition.leader_epoch:
                log.warning(
                    "%s-%d: ignoring LeaderAndIsr with leader epoch %d < %d",
                    *key,
                    state.leader_epoch,
                    partition.leader_epoch,
                )
                errors[key] = ErrorCode.STALE_CONTROLLER_EPOCH
                continue
            if (
                partition is not None
                and state.leader_epoch == partition.leader_epoch
                and state.leader == partition.leader_id
            ):
                self._same_epoch(partition, state)
                errors[key] = ErrorCode.NONE
                continue
            if partition is None:
                partition = await self._create_partition(state.topic, state.partition)
            errors[key] = ErrorCode.NONE
            if state.leader == self.broker_id:
                self.fetchers.remove(key)
                partition.make_leader(
                    state.leader_epoch,
                    state.isr,
                    state.replicas,
                    state.zk_version,
                    state.controller_epoch,
                )
                log.info(
                    "%s-%d: leader at epoch %d, ISR %s, LEO %d, HW %d",
                    *key,
                    state.leader_epoch,
                    list(state.isr),
                    partition.log_end_offset,
                    partition.high_watermark,
                )
                self._leadership(key, state.leader_epoch)
                continue
            self.fetchers.remove(key)
            self._leadership(key, None)
            partition.make_follower(
                state.leader,
                state.leader_epoch,
                state.replicas,
                state.zk_version,
                state.controller_epoch,
            )
            if self.settings.truncation_mode == "high-watermark":
                log.info(
                    "%s-%d: truncating to HW %d (high-watermark mode)",
                    *key,
                    partition.high_watermark,
                )
                partition.truncate_to(partition.high_watermark)
            leader = leaders.get(state.leader)
            if leader is not None:
                self.fetchers.add(
                    key, leader.broker_id, leader.host, leader.port, state.leader_epoch
                )
            log.info(
                "%s-%d: follower of %d at epoch %d, LEO %d, HW %d",
                *key,
                state.leader,
                state.leader_epoch,
                partition.log_end_offset,
                partition.high_watermark,
            )
        return errors

    def _leadership(self, key: tuple[str, int], leader_epoch: int | None) -> None:
        for callback in self.on_leadership:
            try:
                callback(key, leader_epoch)
            except Exception:
                log.exception("%s-%d: leadership callback failed", *key)

    def _same_epoch(self, partition: Partition, state) -> None:
        """A resend at the current epoch (e.g. by a new controller): adopt a newer ISR version."""
        if (
            partition.is_leader
            and partition.pending_isr is None
            and state.zk_version > partition.zk_version
        ):
            partition.isr = frozenset(state.isr)
            partition.zk_version = state.zk_version

    async def _create_partition(self, topic: str, index: int) -> Partition:
        min_isr = await self._min_insync_replicas(topic)
        partition_log = self.logs.get_or_create(topic, index)
        overrides = {field: int(value) for name, field in FLUSH_TOPIC_CONFIGS.items()
                     if (value := (await self._topic_config(topic)).get(name)) is not None}
        if overrides:
            partition_log.config = replace(partition_log.config, **overrides)
        hw = self._checkpointed_hw.get((topic, index), 0)
        partition = Partition(
            topic, index, partition_log, self.broker_id, hw, self._write_isr, min_isr,
            skip_epoch_fencing=self.settings.debug_skip_epoch_fencing,
            read_uncommitted_leak=self.settings.debug_read_uncommitted_leak,
            events=self.events,
        )
        self.partitions[(topic, index)] = partition
        return partition

    async def _topic_config(self, topic: str) -> dict[str, str]:
        """The topic's ZooKeeper config overrides, read once and cached."""
        if topic not in self._topic_configs:
            config: dict[str, str] = {}
            if self.zk is not None:
                config = await asyncio.get_running_loop().run_in_executor(
                    None, zkpaths.read_topic_config, self.zk, topic
                )
            self._topic_configs[topic] = config
        return self._topic_configs[topic]

    async def _min_insync_replicas(self, topic: str) -> int:
        config = await self._topic_config(topic)
        return int(config.get("min.insync.replicas", self.settings.min_insync_replicas))

    async def _cleanup_policy(self, topic: str) -> CleanupPolicy:
        return cleanup_policy(topic, await self._topic_config(topic), self.settings.cleaner)

    async def update_metadata(self, request: UpdateMetadataRequest) -> int:
        self.metadata.update(request)
        for callback in self.on_metadata_update:
            callback()
        return ErrorCode.NONE

    async def stop_replica(self, request: StopReplicaRequest) -> dict[tuple[str, int], int]:
        errors: dict[tuple[str, int], int] = {}
        for key in request.partitions:
            self.fetchers.remove(key)
            self._leadership(key, None)
            errors[key] = ErrorCode.NONE
            if request.delete_partitions:
                partition = self.partitions.pop(key, None)
                if partition is not None:
                    partition.abort_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                    self.logs.delete(*key)
                self._topic_configs.pop(key[0], None)
        return errors

    # -- ISR writes ------------------------------------------------------------------

    def _write_isr(self, partition: Partition, isr: frozenset[int]) -> None:
        asyncio.get_running_loop().create_task(self._write_isr_async(partition, isr))

    async def _write_isr_async(self, partition: Partition, isr: frozenset[int]) -> None:
        epoch, version = partition.leader_epoch, partition.zk_version
        loop = asyncio.get_running_loop()
        state = zkpaths.LeaderIsr(
            self.broker_id, epoch, tuple(sorted(isr)), partition.controller_epoch
        )
        new_version = None
        try:
            if self.zk is not None:
                new_version = await loop.run_in_executor(
                    None,
                    zkpaths.update_partition_state,
                    self.zk,
                    partition.topic,
                    partition.index,
                    state,
                    version,
                )
                if new_version is None:
                    await self._refresh_state(partition, epoch)
            else:
                new_version = version + 1
        except Exception:
            log.exception("%s-%d: ISR write failed", partition.topic, partition.index)
        if partition.leader_epoch != epoch or not partition.is_leader:
            partition.pending_isr = None
            return
        log.info(
            "%s-%d: ISR %s -> %s (%s)",
            partition.topic,
            partition.index,
            sorted(partition.isr),
            sorted(isr),
            "written" if new_version is not None else "CAS failed",
        )
        partition.isr_write_done(isr, new_version)
        if new_version is not None and self.zk is not None:
            try:
                await loop.run_in_executor(
                    None, zkpaths.notify_isr_change, self.zk, [partition.key]
                )
            except Exception:
                log.exception("%s-%d: ISR change notification failed", *partition.key)

    async def _refresh_state(self, partition: Partition, epoch: int) -> None:
        """After a lost CAS: adopt ZooKeeper's ISR and version if the leader epoch is unchanged."""
        current = await asyncio.get_running_loop().run_in_executor(
            None, zkpaths.read_partition_state, self.zk, partition.topic, partition.index
        )
        if current is None:
            return
        state, version = current
        if state.leader == self.broker_id and state.leader_epoch == epoch == partition.leader_epoch:
            partition.isr = frozenset(state.isr)
            partition.zk_version = version
