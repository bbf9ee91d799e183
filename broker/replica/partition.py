"""Leader or follower state of one partition replica on this broker.

As leader: leader epoch, ISR, each follower's log end offset (LEO) and last caught-up
time, high watermark (HW) = min LEO over the ISR, ISR shrink after
`replica.lag.time.max.ms` and expansion when a follower catches up. ISR changes are
proposed to an `IsrWriter` (the replica manager writes ZooKeeper with the znode
version as compare-and-set) and applied when the write succeeds; while a change is in
flight the HW is computed over the union of the old and proposed ISR, so it never
counts a replica out before ZooKeeper agrees.

As follower: appends what the fetcher brings and keeps HW = min(leader HW, LEO).
No ZooKeeper or sockets here: pure state plus the partition's log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from broker.errors import BrokerError, ErrorCode
from broker.replica.producer_state import ProducerBatch, ProducerStateTable
from broker.replica.purgatory import DelayedProduce, FetchWaiters
from broker.storage import BatchHeader, iter_batch_headers
from broker.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    StaleLeaderEpochError,
    StorageError,
)

__all__ = ["AppendResult", "FollowerState", "IsrWriter", "Partition", "now_ms"]

IsrWriter = Callable[["Partition", frozenset[int]], None]


def now_ms() -> float:
    return time.monotonic() * 1000.0


@dataclass
class FollowerState:
    leo: int = -1
    last_caught_up_ms: float = 0.0
    last_fetch_ms: float = 0.0
    last_fetch_leader_leo: int = -1


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int


class Partition:
    """One topic-partition replica hosted by this broker."""

    def __init__(
        self,
        topic: str,
        index: int,
        log,
        broker_id: int,
        high_watermark: int,
        isr_writer: IsrWriter,
        min_insync_replicas: int = 1,
    ) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.broker_id = broker_id
        self.leader_id = -1
        self.leader_epoch = -1
        self.controller_epoch = -1
        self.zk_version = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: frozenset[int] = frozenset()
        self.pending_isr: frozenset[int] | None = None
        self.followers: dict[int, FollowerState] = {}
        self.leader_epoch_start_offset = 0
        self.high_watermark = min(high_watermark, log.log_end_offset)
        self.min_insync_replicas = min_insync_replicas
        self.producers = ProducerStateTable()
        self.delayed_produce = DelayedProduce()
        self.fetch_waiters = FetchWaiters()
        self._isr_writer = isr_writer

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader_id}"
        isr = sorted(self.isr)
        return f"<Partition {self.topic}-{self.index} {role} epoch={self.leader_epoch} isr={isr}>"

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.index)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    # -- role changes ---------------------------------------------------------------

    def make_leader(
        self,
        leader_epoch: int,
        isr: tuple[int, ...],
        replicas: tuple[int, ...],
        zk_version: int,
        controller_epoch: int,
    ) -> None:
        now = now_ms()
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.controller_epoch = controller_epoch
        self.zk_version = zk_version
        self.replicas = replicas
        self.isr = frozenset(isr)
        self.pending_isr = None
        self.leader_epoch_start_offset = self.log.log_end_offset
        self.log.assign_epoch_start_offset(leader_epoch)
        self.followers = {
            replica: FollowerState(last_caught_up_ms=now if replica in self.isr else 0.0)
            for replica in replicas
            if replica != self.broker_id
        }
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
        self._maybe_increment_hw()

    def make_follower(
        self,
        leader_id: int,
        leader_epoch: int,
        replicas: tuple[int, ...],
        zk_version: int,
        controller_epoch: int,
    ) -> None:
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.controller_epoch = controller_epoch
        self.zk_version = zk_version
        self.replicas = replicas
        self.isr = frozenset()
        self.pending_isr = None
        self.followers = {}
        self.abort_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def abort_waiters(self, code: int) -> None:
        self.delayed_produce.fail_all(code)
        self.fetch_waiters.notify()

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Fencing of requests carrying the leader epoch the client knows (KIP-320)."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise BrokerError(ErrorCode.FENCED_LEADER_EPOCH)
        if current_leader_epoch > self.leader_epoch:
            raise BrokerError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    def require_leader(self, current_leader_epoch: int = -1) -> None:
        self.check_leader_epoch(current_leader_epoch)
        if not self.is_leader:
            raise BrokerError(ErrorCode.NOT_LEADER_OR_FOLLOWER)

    # -- appends --------------------------------------------------------------------

    def append_as_leader(self, records: bytes, required_acks: int) -> AppendResult:
        if not self.is_leader:
            raise BrokerError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise BrokerError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"ISR {sorted(self.isr)} < min.insync.replicas={self.min_insync_replicas}",
            )
        try:
            headers = list(iter_batch_headers(records))
            batches = [ProducerBatch.of(header) for header in headers]
            if len(batches) == 1 and batches[0].producer_id >= 0:
                duplicate = self.producers.check(batches[0])
                if duplicate is not None:
                    return AppendResult(duplicate.base_offset, duplicate.last_offset, -1,
                                        self.log.log_start_offset)
            else:
                for batch in batches:
                    if self.producers.check(batch) is not None:
                        raise BrokerError(ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
            info = self.log.append_as_leader(records, self.leader_epoch)
        except CorruptRecordError as exc:
            raise BrokerError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from exc
        except InvalidRecordError as exc:
            raise BrokerError(ErrorCode.INVALID_RECORD, str(exc)) from exc
        except StaleLeaderEpochError as exc:
            raise BrokerError(ErrorCode.NOT_LEADER_OR_FOLLOWER, str(exc)) from exc
        except StorageError as exc:
            raise BrokerError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from exc
        self._record_producers(headers, info.first_offset)
        self.fetch_waiters.notify()
        self._maybe_increment_hw()
        return AppendResult(
            info.first_offset, info.last_offset, info.log_append_time, self.log.log_start_offset
        )

    def _record_producers(self, headers: list[BatchHeader], first_offset: int) -> None:
        base = first_offset
        for header in headers:
            if header.producer_id >= 0:
                self.producers.record(ProducerBatch.of(header, base))
            base += header.last_offset_delta + 1

    def append_as_follower(self, records: bytes, leader_high_watermark: int) -> None:
        if records:
            self.log.append_as_follower(records)
            for header in iter_batch_headers(records, partial_tail_ok=True):
                self.producers.record(ProducerBatch.of(header))
        self.high_watermark = max(
            self.high_watermark, min(leader_high_watermark, self.log.log_end_offset)
        )

    def truncate_to(self, offset: int) -> None:
        if offset < self.log.log_end_offset:
            self.log.truncate_to(offset)
            self.producers.truncate_to(offset)
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)

    # -- reads ----------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, replica_id: int) -> bytes:
        """Batches from `offset`: up to the LEO for a follower, the HW for a consumer."""
        limit = None if replica_id >= 0 else self.high_watermark
        end = self.log.log_end_offset
        if offset > end or offset < self.log.log_start_offset:
            raise BrokerError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} outside [{self.log.log_start_offset}, {end}]",
            )
        if offset == end or (limit is not None and offset >= limit):
            return b""
        try:
            return self.log.read(offset, max_bytes, limit)
        except OffsetOutOfRangeError as exc:
            raise BrokerError(ErrorCode.OFFSET_OUT_OF_RANGE, str(exc)) from exc

    # -- followers, ISR and high watermark (leader only) ----------------------------

    def update_follower(self, replica_id: int, fetch_offset: int) -> None:
        """A follower fetched from `fetch_offset`: its LEO; maybe expand the ISR, move the HW."""
        state = self.followers.get(replica_id)
        if state is None:
            return
        now = now_ms()
        leader_leo = self.log.log_end_offset
        if fetch_offset >= leader_leo:
            state.last_caught_up_ms = now
        elif fetch_offset >= state.last_fetch_leader_leo:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.last_fetch_ms = now
        state.last_fetch_leader_leo = leader_leo
        if fetch_offset == state.leo:
            return
        state.leo = fetch_offset
        if (
            replica_id not in self.isr
            and self.pending_isr is None
            and fetch_offset >= self.high_watermark
            and fetch_offset >= self.leader_epoch_start_offset
        ):
            self._propose_isr(self.isr | {replica_id})
        self._maybe_increment_hw()

    def maybe_shrink_isr(self, lag_time_max_ms: float) -> None:
        if not self.is_leader or self.pending_isr is not None:
            return
        now = now_ms()
        lagging = {
            replica
            for replica in self.isr
            if replica != self.broker_id
            and now - self.followers.get(replica, FollowerState()).last_caught_up_ms
            > lag_time_max_ms
        }
        if lagging:
            self._propose_isr(self.isr - lagging)

    def _propose_isr(self, isr: frozenset[int]) -> None:
        self.pending_isr = isr
        self._isr_writer(self, isr)

    def isr_write_done(self, isr: frozenset[int], zk_version: int | None) -> None:
        """Outcome of a proposed ISR change: the new znode version, or None if it failed."""
        self.pending_isr = None
        if zk_version is not None and self.is_leader:
            self.isr = isr
            self.zk_version = zk_version
            now = now_ms()
            for replica in isr:
                if replica in self.followers:
                    self.followers[replica].last_caught_up_ms = max(
                        self.followers[replica].last_caught_up_ms, now
                    )
        self._maybe_increment_hw()

    def _maybe_increment_hw(self) -> None:
        if not self.is_leader:
            return
        new_hw = self.log.log_end_offset
        members = self.isr | self.pending_isr if self.pending_isr is not None else self.isr
        for replica in members:
            if replica != self.broker_id:
                state = self.followers.get(replica)
                leo = state.leo if state is not None else -1
                if leo < new_hw:
                    new_hw = leo
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            self.delayed_produce.complete_up_to(new_hw, self._produce_outcome)
            self.fetch_waiters.notify()

    def _produce_outcome(self) -> int:
        if len(self.isr) < self.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE
