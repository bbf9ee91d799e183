"""The transaction coordinator: Kafka's KIP-98 transactions on this broker.

A broker coordinates the transactional ids of the `__transaction_state` partitions it
leads; its coordinator epoch there is the partition's leader epoch. Becoming leader loads
the partition (COORDINATOR_LOAD_IN_PROGRESS meanwhile) and finishes every transaction the
log shows prepared; losing it drops the ids (NOT_COORDINATOR).

Everything runs on the broker's event loop. A state change is written to the log first
and applied in memory only once it is committed; while it is being written the id has a
pending transition and other requests get CONCURRENT_TRANSACTIONS (Kafka's pendingState).

- InitProducerId: a new id gets a producer id and epoch 0; a known one gets its epoch
  bumped (a new producer id when the epoch is exhausted), which fences older producers.
  An ongoing transaction is first aborted with the bumped epoch (the client is told
  CONCURRENT_TRANSACTIONS and retries). KIP-360 retries carry the expected id and epoch.
- AddPartitionsToTxn / AddOffsetsToTxn: the transaction is Ongoing with those partitions.
- EndTxn: PrepareCommit or PrepareAbort is written, the client is answered, then markers
  go to every partition's leader (`MarkerWriter`) and CompleteCommit/CompleteAbort ends it.
- Transactions older than their timeout are aborted with a bumped epoch.
Every committed state change, fence, timeout, load and unload goes to the event log.

`skip_epoch_fencing` (the seeded defect `kchaos.debug.skip-epoch-fencing`) skips fencing:
InitProducerId gives the new producer the next epoch but leaves the older producer's open
transaction open, and a request with an older producer epoch acts on the id's current
transaction instead of answering PRODUCER_FENCED: a zombie producer can still commit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from broker.coordination import PartitionOwner
from broker.errors import ErrorCode
from broker.event_log import EventLog
from broker.group.placement import OFFSETS_TOPIC
from broker.txn.markers import MarkerWriter
from broker.txn.state import NO_EPOCH, NO_PRODUCER_ID, TxnMetadata, TxnState, epoch_exhausted
from broker.txn.store import TxnLog

__all__ = ["TransactionCoordinator", "TxnConfig"]

log = logging.getLogger("broker.txn")

_COMPLETE_RETRY_S = 0.2


@dataclass(frozen=True)
class TxnConfig:
    max_timeout_ms: int = 900000
    abort_check_interval_ms: int = 10000
    skip_epoch_fencing: bool = False


@dataclass
class TxnEntry:
    """One transactional id on this coordinator: its committed metadata, the coordinator
    epoch it was loaded or created at, and the transition being written, if any."""

    metadata: TxnMetadata
    coordinator_epoch: int
    pending: TxnState | None = None
    failed_fence: bool = False


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator(PartitionOwner):
    """Transactional ids of the `__transaction_state` partitions this broker leads; a new
    leader epoch of a partition it owns loads the partition again."""

    loading_event = "txn-coordinator-loading"
    partition_field = "txn_partition"
    epoch_field = "coordinator_epoch"
    reload_on_new_epoch = True
    store: TxnLog

    def __init__(self, broker_id: int, store: TxnLog, markers: MarkerWriter,
                 partition_of: Callable[[str], int], offsets_partition_of: Callable[[str], int],
                 allocate_producer_id: Callable[[], Awaitable[int]], config: TxnConfig,
                 events: EventLog) -> None:
        super().__init__()
        self.broker_id = broker_id
        self.store = store
        self.markers = markers
        self.placement = partition_of
        self.offsets_partition_of = offsets_partition_of
        self.allocate_producer_id = allocate_producer_id
        self.config = config
        self.events = events
        self.entries: dict[str, TxnEntry] = {}
        self._timeouts: asyncio.Task | None = None

    # -- lifecycle and ownership (`broker.coordination`) -------------------------------

    def start(self) -> None:
        self._timeouts = asyncio.get_running_loop().create_task(self._abort_timed_out_loop())

    async def stop(self) -> None:
        for task in [self._timeouts, *self._tasks]:
            if task is not None:
                task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.markers.close()

    def partition_of(self, transactional_id: str) -> int:
        return self.placement(transactional_id)

    def _install(self, partition: int, epoch: int, loaded: dict[str, TxnMetadata],
                 started: float) -> None:
        """Serve the loaded ids, then finish every transaction the log shows prepared."""
        for transactional_id, metadata in loaded.items():
            self.entries[transactional_id] = TxnEntry(metadata, epoch)
        prepared = [tid for tid, m in loaded.items() if m.state.is_prepare]
        self.events.write("txn-coordinator-loaded", txn_partition=partition,
                          coordinator_epoch=epoch, transactions=len(loaded),
                          prepared=sorted(prepared),
                          seconds=round(time.monotonic() - started, 3))
        for transactional_id in prepared:
            self._spawn(self._finish(transactional_id, self.entries[transactional_id], epoch))

    def _load_dropped(self, partition: int, epoch: int) -> None:
        self.events.write("txn-coordinator-unloaded", txn_partition=partition,
                          coordinator_epoch=epoch, reason="leadership lost while loading")

    def _unload(self, partition: int, epoch: int | None) -> None:
        """Forget the partition's transactional ids (nothing when it was still loading)."""
        if epoch is None:
            return
        dropped = [tid for tid in self.entries if self.partition_of(tid) == partition]
        for transactional_id in dropped:
            del self.entries[transactional_id]
        self.events.write("txn-coordinator-unloaded", txn_partition=partition,
                          coordinator_epoch=epoch, transactions=len(dropped))

    def _still_owner(self, transactional_id: str, entry: TxnEntry) -> bool:
        return (self.entries.get(transactional_id) is entry
                and self.owned.get(self.partition_of(transactional_id)) == entry.coordinator_epoch)

    # -- writing state changes -------------------------------------------------------------

    async def _write(self, entry: TxnEntry, new: TxnMetadata, cause: str) -> int:
        """Append `new` for `entry` and apply it once committed; the client's error."""
        transactional_id = new.transactional_id
        entry.pending = new.state
        try:
            code = await self.store.append(self.partition_of(transactional_id), new)
        finally:
            entry.pending = None
        if not self._still_owner(transactional_id, entry):
            return ErrorCode.NOT_COORDINATOR
        if code == ErrorCode.NONE:
            old = entry.metadata
            entry.metadata = new
            self.events.write("txn-state", **new.describe(), previous_state=old.state.label,
                              previous_epoch=old.producer_epoch, cause=cause,
                              coordinator_epoch=entry.coordinator_epoch,
                              txn_partition=self.partition_of(transactional_id))
        return code

    def _epoch_error(self, epoch: int, current: int, from_client: bool = True) -> int:
        """NONE when a request at `epoch` may act on the id's current epoch `current`."""
        if epoch == current or (not from_client and epoch > current):
            return ErrorCode.NONE
        if epoch < current and self.config.skip_epoch_fencing:
            return ErrorCode.NONE
        return ErrorCode.PRODUCER_FENCED

    def _fence_skipped(self, transactional_id: str, epoch: int, current: int,
                       cause: str) -> None:
        """The event of the seeded defect acting: a request of an older producer epoch is
        about to change the id's transaction (written only then, not for a stale request
        answered without a change)."""
        if epoch < current:
            self.events.write("txn-fencing-skipped", transactional_id=transactional_id,
                              request_epoch=epoch, producer_epoch=current, cause=cause)

    # -- InitProducerId --------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None) -> tuple[int, int, int]:
        """(error, producer id, epoch) for a transactional producer; `expected` is the
        (producer id, epoch) a KIP-360 client recovers from."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, NO_PRODUCER_ID, NO_EPOCH
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, NO_PRODUCER_ID, NO_EPOCH
        code = self.owner_error(transactional_id)
        if code != ErrorCode.NONE:
            return code, NO_PRODUCER_ID, NO_EPOCH
        entry = self.entries.get(transactional_id)
        if entry is None:
            producer_id = await self.allocate_producer_id()
            code = self.owner_error(transactional_id)
            if code != ErrorCode.NONE:
                return code, NO_PRODUCER_ID, NO_EPOCH
            entry = self.entries.setdefault(transactional_id, TxnEntry(
                TxnMetadata(transactional_id, producer_id, NO_EPOCH, timeout_ms,
                            last_update_ms=_now_ms()),
                self.owned[self.partition_of(transactional_id)]))
        metadata = entry.metadata
        if entry.pending is not None or metadata.state.is_prepare:
            return ErrorCode.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_EPOCH
        if expected is not None and not _may_recover(metadata, expected):
            return ErrorCode.PRODUCER_FENCED, NO_PRODUCER_ID, NO_EPOCH
        if metadata.state is TxnState.ONGOING and self.config.skip_epoch_fencing:
            return await self._bump_without_fencing(transactional_id, entry)
        if metadata.state is TxnState.ONGOING:
            code = await self._fence_and_abort(transactional_id, entry, "init-producer-id")
            return code or ErrorCode.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_EPOCH
        new = await self._next_producer_epoch(metadata, timeout_ms, expected)
        if isinstance(new, int):
            return new, NO_PRODUCER_ID, NO_EPOCH
        code = await self._write(entry, new, "init-producer-id")
        if code != ErrorCode.NONE:
            return code, NO_PRODUCER_ID, NO_EPOCH
        return ErrorCode.NONE, new.producer_id, new.producer_epoch

    async def _next_producer_epoch(self, metadata: TxnMetadata, timeout_ms: int,
                                   expected: tuple[int, int] | None) -> TxnMetadata | int:
        """Empty at the next epoch (a new producer id once the epoch is exhausted), or the
        error for a fenced KIP-360 retry."""
        now = _now_ms()
        fresh = {"partitions": frozenset(), "start_ms": -1, "timeout_ms": timeout_ms}
        if epoch_exhausted(metadata.producer_epoch) and (
                expected is None or expected[1] == metadata.producer_epoch):
            producer_id = await self.allocate_producer_id()
            last = metadata.producer_epoch if expected is not None else NO_EPOCH
            return metadata.transition(TxnState.EMPTY, now, producer_id=producer_id,
                                       producer_epoch=0, last_producer_id=metadata.producer_id,
                                       last_producer_epoch=last, **fresh)
        bumped = metadata.producer_epoch + 1
        if expected is None:
            epoch, last = bumped, NO_EPOCH
        elif metadata.producer_epoch == NO_EPOCH or expected[1] == metadata.producer_epoch:
            epoch, last = bumped, metadata.producer_epoch
        elif expected[1] == metadata.last_producer_epoch:
            epoch, last = metadata.producer_epoch, metadata.last_producer_epoch
        else:
            return ErrorCode.PRODUCER_FENCED
        return metadata.transition(TxnState.EMPTY, now, producer_epoch=epoch,
                                   last_producer_epoch=last, **fresh)

    async def _bump_without_fencing(self, transactional_id: str,
                                    entry: TxnEntry) -> tuple[int, int, int]:
        """The seeded defect: a new producer gets the next epoch while the older producer's
        transaction stays open, neither aborted nor fenced, so that producer may still
        commit it."""
        metadata = entry.metadata
        self.events.write("txn-fencing-skipped", transactional_id=transactional_id,
                          request_epoch=metadata.producer_epoch + 1,
                          producer_epoch=metadata.producer_epoch, cause="init-producer-id")
        new = metadata.transition(TxnState.ONGOING, _now_ms(),
                                  producer_epoch=metadata.producer_epoch + 1)
        code = await self._write(entry, new, "init-producer-id")
        if code != ErrorCode.NONE:
            return code, NO_PRODUCER_ID, NO_EPOCH
        return ErrorCode.NONE, new.producer_id, new.producer_epoch

    async def _fence_and_abort(self, transactional_id: str, entry: TxnEntry, cause: str) -> int:
        """Abort the ongoing transaction with a bumped epoch, fencing its producer."""
        metadata = entry.metadata
        epoch = metadata.producer_epoch if entry.failed_fence else metadata.producer_epoch + 1
        self.events.write("txn-fenced", transactional_id=transactional_id,
                          producer_id=metadata.producer_id,
                          fenced_epoch=metadata.producer_epoch, producer_epoch=epoch, cause=cause)
        entry.pending = TxnState.PREPARE_EPOCH_FENCE
        try:
            return await self._end(transactional_id, metadata.producer_id, epoch, False, False,
                                   cause)
        finally:
            if entry.pending is TxnState.PREPARE_EPOCH_FENCE:
                entry.pending = None

    # -- AddPartitionsToTxn, AddOffsetsToTxn -----------------------------------------------

    async def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                             partitions: frozenset[tuple[str, int]]) -> int:
        code = self.owner_error(transactional_id)
        entry = self.entries.get(transactional_id)
        if code != ErrorCode.NONE:
            return code
        if entry is None or entry.metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        metadata = entry.metadata
        code = self._epoch_error(epoch, metadata.producer_epoch)
        if code != ErrorCode.NONE:
            return code
        if entry.pending is not None or metadata.state.is_prepare:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if metadata.state is TxnState.ONGOING and partitions <= metadata.partitions:
            return ErrorCode.NONE
        self._fence_skipped(transactional_id, epoch, metadata.producer_epoch, "add-partitions")
        return await self._write(entry, metadata.with_partitions(partitions, _now_ms()),
                                 "add-partitions")

    async def add_offsets(self, transactional_id: str, producer_id: int, epoch: int,
                          group_id: str) -> int:
        """The group's `__consumer_offsets` partition joins the transaction."""
        partition = (OFFSETS_TOPIC, self.offsets_partition_of(group_id))
        return await self.add_partitions(transactional_id, producer_id, epoch,
                                         frozenset({partition}))

    # -- EndTxn ----------------------------------------------------------------------------

    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int,
                      commit: bool) -> int:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        code = self.owner_error(transactional_id)
        if code != ErrorCode.NONE:
            return code
        return await self._end(transactional_id, producer_id, epoch, commit, True, "end-txn")

    async def _end(self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                   from_client: bool, cause: str) -> int:
        entry = self.entries.get(transactional_id)
        if entry is None or entry.metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        metadata = entry.metadata
        fencing = not from_client and entry.pending is TxnState.PREPARE_EPOCH_FENCE
        code = self._epoch_error(epoch, metadata.producer_epoch, from_client)
        if code != ErrorCode.NONE:
            return code
        if entry.pending is not None and not fencing:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if metadata.state is not TxnState.ONGOING:
            return _end_in(metadata.state, commit)
        new = metadata.prepared(commit, _now_ms())
        if fencing:
            new = replace(new, producer_epoch=epoch, last_producer_epoch=NO_EPOCH)
        else:
            self._fence_skipped(transactional_id, epoch, metadata.producer_epoch, cause)
        code = await self._write(entry, new, cause)
        if code != ErrorCode.NONE:
            entry.failed_fence = fencing
            return code
        entry.failed_fence = False
        self._spawn(self._finish(transactional_id, entry, entry.coordinator_epoch))
        return ErrorCode.NONE

    async def _finish(self, transactional_id: str, entry: TxnEntry, epoch: int) -> None:
        """Write the markers of a prepared transaction, then complete it."""
        prepared = entry.metadata
        commit = prepared.state is TxnState.PREPARE_COMMIT
        started = time.monotonic()
        written = await self.markers.write(
            prepared.producer_id, prepared.producer_epoch, commit, epoch,
            prepared.partitions, lambda: self._still_owner(transactional_id, entry))
        if not written:
            return
        self.events.write("txn-markers-written", transactional_id=transactional_id,
                          producer_id=prepared.producer_id,
                          producer_epoch=prepared.producer_epoch, commit=commit,
                          partitions=sorted([t, p] for t, p in prepared.partitions),
                          seconds=round(time.monotonic() - started, 3))
        while self._still_owner(transactional_id, entry) and entry.metadata.state.is_prepare:
            if entry.pending is None:
                code = await self._write(entry, entry.metadata.completed(_now_ms()),
                                         "markers-written")
                if code in (ErrorCode.NONE, ErrorCode.NOT_COORDINATOR):
                    return
            await asyncio.sleep(_COMPLETE_RETRY_S)

    # -- timeouts --------------------------------------------------------------------------

    async def _abort_timed_out_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.abort_check_interval_ms / 1000)
            try:
                self.abort_timed_out(_now_ms())
            except Exception:
                log.exception("aborting timed-out transactions failed")

    def abort_timed_out(self, now_ms: int) -> list[str]:
        """Start aborting every ongoing transaction past its timeout; their ids."""
        expired = [tid for tid, entry in self.entries.items()
                   if entry.metadata.state is TxnState.ONGOING and entry.pending is None
                   and now_ms > entry.metadata.timed_out_at_ms
                   and self.owned.get(self.partition_of(tid)) == entry.coordinator_epoch]
        for transactional_id in expired:
            entry = self.entries[transactional_id]
            self.events.write("txn-timed-out", transactional_id=transactional_id,
                              producer_id=entry.metadata.producer_id,
                              producer_epoch=entry.metadata.producer_epoch,
                              started=entry.metadata.start_ms,
                              timeout_ms=entry.metadata.timeout_ms)
            self._spawn(self._fence_and_abort(transactional_id, entry, "timeout"))
        return expired


def _may_recover(metadata: TxnMetadata, expected: tuple[int, int]) -> bool:
    """KIP-360: a producer that names its id and epoch may go on unless it is fenced."""
    producer_id, epoch = expected
    return (metadata.producer_epoch == NO_EPOCH or producer_id == metadata.producer_id
            or (producer_id == metadata.last_producer_id and epoch_exhausted(epoch)))


def _end_in(state: TxnState, commit: bool) -> int:
    """EndTxn's answer when the transaction is not Ongoing (a retry, or a wrong request)."""
    wanted_complete = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    wanted_prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    if state is wanted_complete:
        return ErrorCode.NONE
    if state is wanted_prepare:
        return ErrorCode.CONCURRENT_TRANSACTIONS
    return ErrorCode.INVALID_TXN_STATE
