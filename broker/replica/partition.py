"""Leader or follower state of one partition replica on this broker.

As leader: leader epoch, ISR, each follower's log end offset (LEO) and last caught-up
time, high watermark (HW) = min LEO over the ISR, ISR shrink after
`replica.lag.time.max.ms` and expansion when a follower catches up. ISR changes are
proposed to an `IsrWriter` (the replica manager writes ZooKeeper with the znode
version as compare-and-set) and applied when the write succeeds; while a change is in
flight the HW is computed over the union of the old and proposed ISR, so it never
counts a replica out before ZooKeeper agrees.

As follower: appends what the fetcher brings and keeps HW = min(leader HW, LEO).

Transactions (KIP-98): the log keeps the producer state (dedup, epochs, open transactions)
and the aborted-transaction index, on leaders and followers alike; the leader appends
transaction markers (`append_txn_marker`) and serves the last stable offset (LSO) to
read_committed consumers with the aborted transactions of what they read (`fetch`).
Two seeded defects live here: `skip_epoch_fencing` (kchaos.debug.skip-epoch-fencing)
accepts produce batches and markers of older producer epochs instead of answering
INVALID_PRODUCER_EPOCH; `read_uncommitted_leak` (kchaos.debug.read-uncommitted-leak) serves
a read_committed fetch up to the HW with no aborted transactions and the HW as its LSO, so
read_committed consumers see aborted and still-open transactional records.
No ZooKeeper or sockets here: pure state plus the partition's log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from broker.errors import BrokerError, ErrorCode
from broker.event_log import EventLog
from broker.replica.purgatory import DelayedProduce, FetchWaiters
from broker.storage import ProducerStateManager, end_offset
from broker.storage.errors import (
    CoordinatorFencedError,
    CorruptRecordError,
    DuplicateSequenceError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    StaleLeaderEpochError,
    StorageError,
)

__all__ = ["AppendResult", "FetchedRecords", "FollowerState", "IsrWriter", "Partition", "now_ms"]

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


@dataclass(frozen=True, slots=True)
class FetchedRecords:
    """What a fetch of one partition answers: the batches and the offsets around them;
    `aborted_transactions` (producer id, first offset) only for read_committed."""

    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]] | None


# Storage errors as Kafka error codes, most specific first.
STORAGE_ERRORS: tuple[tuple[type[StorageError], ErrorCode], ...] = (
    (InvalidProducerEpochError, ErrorCode.INVALID_PRODUCER_EPOCH),
    (OutOfOrderSequenceError, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    (DuplicateSequenceError, ErrorCode.DUPLICATE_SEQUENCE_NUMBER),
    (InvalidTxnStateError, ErrorCode.INVALID_TXN_STATE),
    (CoordinatorFencedError, ErrorCode.TRANSACTION_COORDINATOR_FENCED),
    (CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
    (InvalidRecordError, ErrorCode.INVALID_RECORD),
    (StaleLeaderEpochError, ErrorCode.NOT_LEADER_OR_FOLLOWER),
    (StorageError, ErrorCode.KAFKA_STORAGE_ERROR),
)


def broker_error(exc: StorageError) -> BrokerError:
    code = next(code for kind, code in STORAGE_ERRORS if isinstance(exc, kind))
    return BrokerError(code, str(exc))


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
        *,
        skip_epoch_fencing: bool = False,
        read_uncommitted_leak: bool = False,
        events: EventLog | None = None,
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
        self.skip_epoch_fencing = skip_epoch_fencing
        self.read_uncommitted_leak = read_uncommitted_leak
        self.events = events
        self.delayed_produce = DelayedProduce()
        self.fetch_waiters = FetchWaiters()
        self.replica_fetch_waiters = FetchWaiters()
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

    @property
    def producers(self) -> ProducerStateManager:
        """The producer state, owned by the log."""
        return self.log.producer_state

    @property
    def last_stable_offset(self) -> int:
        """min(HW, first offset of a transaction that is open or whose marker is not yet
        below the HW)."""
        return self.log.last_stable_offset(self.high_watermark)

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
        self.replica_fetch_waiters.notify()

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
        """Append a producer's (or a coordinator's) batches. A lone retried batch is
        answered with its original offsets; producer-state refusals become Kafka's errors
        (INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_TXN_STATE, ...)."""
        self._check_appendable(required_acks)
        try:
            info = self.log.append_as_leader(
                records, self.leader_epoch, not self.skip_epoch_fencing, from_client=True)
        except StorageError as exc:
            raise broker_error(exc) from exc
        if not info.duplicate:
            self._appended()
        return AppendResult(
            info.first_offset, info.last_offset, info.log_append_time, self.log.log_start_offset
        )

    def append_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                          coordinator_epoch: int) -> AppendResult:
        """Write the marker ending `producer_id`'s transaction here (leader only, with the
        checks of an acks=-1 produce). INVALID_PRODUCER_EPOCH for an epoch below the
        producer's, TRANSACTION_COORDINATOR_FENCED for a coordinator epoch below the last
        one seen for it; an abort is indexed. The caller waits on `delayed_produce`."""
        self._check_appendable(-1)
        try:
            info = self.log.append_txn_marker(producer_id, producer_epoch, commit,
                                              coordinator_epoch, self.leader_epoch,
                                              not self.skip_epoch_fencing)
        except StorageError as exc:
            raise broker_error(exc) from exc
        self._appended()
        return AppendResult(info.first_offset, info.last_offset, -1, self.log.log_start_offset)

    def _check_appendable(self, required_acks: int) -> None:
        if not self.is_leader:
            raise BrokerError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise BrokerError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"ISR {sorted(self.isr)} < min.insync.replicas={self.min_insync_replicas}",
            )

    def _appended(self) -> None:
        self.fetch_waiters.notify()
        self.replica_fetch_waiters.notify()
        self._maybe_increment_hw()

    def append_as_follower(self, records: bytes, leader_high_watermark: int) -> None:
        if records:
            self.log.append_as_follower(records)
        high_watermark = max(
            self.high_watermark, min(leader_high_watermark, self.log.log_end_offset)
        )
        if high_watermark != self.high_watermark:
            self.high_watermark = high_watermark
            self.log.on_high_watermark(high_watermark)

    def truncate_to(self, offset: int) -> None:
        if offset < self.log.log_end_offset:
            self.log.truncate_to(offset)
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)

    # -- reads ----------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, replica_id: int) -> bytes:
        """Batches from `offset`: up to the LEO for a follower, the HW for a consumer."""
        return self._read(offset, max_bytes, None if replica_id >= 0 else self.high_watermark)

    def fetch(self, offset: int, max_bytes: int, replica_id: int,
              read_committed: bool = False) -> FetchedRecords:
        """A Fetch of this partition: followers read up to the LEO, read_uncommitted
        consumers up to the HW, read_committed ones up to the LSO with the aborted
        transactions overlapping what they got (Kafka's: marker at or after `offset`, first
        offset before the end of the batches returned). With `read_uncommitted_leak` (the
        seeded defect) read_committed is served as read_uncommitted, claiming the HW as LSO
        and no aborted transactions; a fetch that so served records past the LSO or of
        aborted transactions is written to the event log (`read-uncommitted-leaked`)."""
        high_watermark = self.high_watermark
        committed = read_committed and replica_id < 0
        if committed and self.read_uncommitted_leak:
            records = self._read(offset, max_bytes, high_watermark)
            self._record_leak(offset, records)
            return FetchedRecords(records, high_watermark, high_watermark,
                                  self.log.log_start_offset, [])
        stable = self.last_stable_offset
        limit = None if replica_id >= 0 else stable if committed else high_watermark
        records = self._read(offset, max_bytes, limit)
        aborted = None
        if committed:
            end = end_offset(records)
            aborted = ([] if end is None
                       else self.log.collect_aborted_transactions(offset, end))
        return FetchedRecords(records, high_watermark, stable, self.log.log_start_offset,
                              aborted)

    def _record_leak(self, offset: int, records: bytes) -> None:
        end = end_offset(records)
        if end is None or self.events is None:
            return
        stable = self.last_stable_offset
        aborted = self.log.collect_aborted_transactions(offset, end)
        if end > stable or aborted:
            self.events.write("read-uncommitted-leaked", topic=self.topic,
                              partition=self.index, from_offset=offset, to_offset=end,
                              last_stable_offset=stable, aborted=[list(a) for a in aborted],
                              cause="kchaos.debug.read-uncommitted-leak")

    def _read(self, offset: int, max_bytes: int, limit: int | None) -> bytes:
        """Whole batches from `offset` below `limit` (None: the LEO); nothing for a
        `max_bytes` of 0 or less (a fetch whose byte budget other partitions used up)."""
        if max_bytes <= 0:
            return b""
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
        """A follower fetched from `fetch_offset`: its LEO; maybe expand the ISR, move the HW.
        Every fetch may expand the ISR, not only one that moved the follower's LEO: a
        follower dropped while the log stood still (produce refused below
        min.insync.replicas) fetches at the same offset ever after."""
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
        moved = fetch_offset != state.leo
        state.leo = fetch_offset
        if (
            replica_id not in self.isr
            and self.pending_isr is None
            and fetch_offset >= self.high_watermark
            and fetch_offset >= self.leader_epoch_start_offset
        ):
            self._propose_isr(self.isr | {replica_id})
        if moved:
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
            self.log.on_high_watermark(new_hw)
            self.delayed_produce.complete_up_to(new_hw, self._produce_outcome)
            self.fetch_waiters.notify()

    def _produce_outcome(self) -> int:
        if len(self.isr) < self.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE
