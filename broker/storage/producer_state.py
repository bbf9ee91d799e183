"""Producer state of one partition log: Kafka's ProducerStateManager (KIP-98, KIP-360).

Per producer id: its epoch, the last sequence of that epoch, its last five batches (sequence
range and offsets, so that a retried batch is answered with its original offsets), the
coordinator epoch of its last transaction marker and the first offset of its ongoing
transaction. The *first unstable offset* is the first offset of any transaction that is open
or whose marker is not yet below the high watermark; the LSO is min(that, HW).

An append is staged (`ProducerAppend`: the entries it touches, copied and changed, and the
transactions it starts and completes) and committed once its bytes are in the log. Leader
appends are checked as Kafka's ProducerAppendInfo checks client and coordinator writes:
- a batch or marker from an older epoch: InvalidProducerEpochError. With `fence_epochs` off
  (the kchaos.debug.skip-epoch-fencing defect) it is accepted instead: it joins the dedup
  cache of its own epoch and changes neither the producer's epoch nor its last sequence;
- a batch of a newer epoch must start at sequence 0, one of the current epoch must follow its
  last sequence (OutOfOrderSequenceError); a batch equal to a cached one of its epoch is a
  duplicate, returned instead of appended;
- an unknown producer may start at any sequence: since Kafka 2.5 (KIP-360) a produce is no
  longer answered UNKNOWN_PRODUCER_ID, the producer state being kept across retention;
- batches without sequence (-1: the coordinators' transactional writes) skip sequence checks;
- a non-transactional batch while the producer's transaction is open: InvalidTxnStateError;
- a marker whose coordinator epoch is below the producer's last one: CoordinatorFencedError.
Follower appends and replays apply the same changes unchecked (an older epoch is treated as
with fencing off, so replicas agree whatever the leader accepted).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from .errors import (
    CoordinatorFencedError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)
from .markers import TxnMarker
from .records import H_ATTRS, H_BASE_SEQ, H_DELTA, H_PEPOCH, H_PID, TRANSACTIONAL_MASK
from .txn_index import AbortedTxn

__all__ = [
    "CACHED_BATCHES",
    "CompletedTxn",
    "ProducerAppend",
    "ProducerBatch",
    "ProducerEntry",
    "ProducerStateManager",
]

CACHED_BATCHES = 5
NO_EPOCH = -1
NO_OFFSET = -1
SEQUENCE_MASK = 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """A cached batch of a producer: its epoch, sequence range and offsets."""

    epoch: int
    base_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    """What the log knows of one producer id."""

    producer_id: int
    epoch: int = NO_EPOCH
    last_sequence: int = -1
    coordinator_epoch: int = -1
    txn_first_offset: int = NO_OFFSET
    batches: deque[ProducerBatch] = field(
        default_factory=lambda: deque(maxlen=CACHED_BATCHES))

    def copy(self) -> ProducerEntry:
        return ProducerEntry(self.producer_id, self.epoch, self.last_sequence,
                             self.coordinator_epoch, self.txn_first_offset,
                             deque(self.batches, maxlen=CACHED_BATCHES))

    def duplicate_of(self, epoch: int, base_sequence: int,
                     last_sequence: int) -> ProducerBatch | None:
        for batch in self.batches:
            if (batch.epoch == epoch and batch.base_sequence == base_sequence
                    and batch.last_sequence == last_sequence):
                return batch
        return None

    def move_to_epoch(self, epoch: int) -> None:
        """A newer epoch starts with no sequence and an empty cache."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.last_sequence = -1
            self.batches.clear()


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by the marker at `last_offset`."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


class ProducerAppend:
    """The producer-state changes of one append, staged until the append is written."""

    def __init__(self, producers: dict[int, ProducerEntry], check: bool,
                 fence_epochs: bool) -> None:
        self._producers = producers
        self.check = check
        self.fence_epochs = fence_epochs
        self.entries: dict[int, ProducerEntry] = {}
        self.started: list[tuple[int, int]] = []  # (first offset, producer id)
        self.completed: list[CompletedTxn] = []

    def _entry(self, producer_id: int) -> ProducerEntry:
        entry = self.entries.get(producer_id)
        if entry is None:
            current = self._producers.get(producer_id)
            entry = current.copy() if current is not None else ProducerEntry(producer_id)
            self.entries[producer_id] = entry
        return entry

    def add_batch(self, header: tuple, base_offset: int) -> ProducerBatch | None:
        """Stage a data batch whose offsets start at `base_offset`; if it is a retry of a
        cached batch, stage nothing and return that batch."""
        entry = self._entry(header[H_PID])
        epoch, base_sequence = header[H_PEPOCH], header[H_BASE_SEQ]
        last_sequence = (-1 if base_sequence < 0
                         else (base_sequence + header[H_DELTA]) & SEQUENCE_MASK)
        transactional = bool(header[H_ATTRS] & TRANSACTIONAL_MASK)
        stale = epoch < entry.epoch
        if self.check:
            if base_sequence >= 0:
                duplicate = entry.duplicate_of(epoch, base_sequence, last_sequence)
                if duplicate is not None:
                    return duplicate
            self._check_epoch(entry, epoch, base_offset)
            if base_sequence >= 0 and not stale:
                self._check_sequence(entry, epoch, base_sequence, base_offset)
            if entry.txn_first_offset != NO_OFFSET and not transactional:
                raise InvalidTxnStateError(
                    f"non-transactional batch of producer {entry.producer_id} at offset "
                    f"{base_offset} inside its transaction from {entry.txn_first_offset}")
        if not stale:
            entry.move_to_epoch(epoch)
            if base_sequence >= 0:
                entry.last_sequence = last_sequence
        if base_sequence >= 0:
            entry.batches.append(ProducerBatch(epoch, base_sequence, last_sequence,
                                               base_offset, base_offset + header[H_DELTA]))
        if transactional and entry.txn_first_offset == NO_OFFSET:
            entry.txn_first_offset = base_offset
            self.started.append((base_offset, entry.producer_id))
        return None

    def add_marker(self, header: tuple, offset: int, marker: TxnMarker) -> None:
        """Stage the end of the producer's transaction by the marker at `offset` (also when
        none is open: the marker is then a transaction of its own, as in Kafka)."""
        entry = self._entry(header[H_PID])
        epoch = header[H_PEPOCH]
        if self.check:
            self._check_epoch(entry, epoch, offset)
            if marker.coordinator_epoch < entry.coordinator_epoch:
                raise CoordinatorFencedError(
                    f"marker for producer {entry.producer_id} with coordinator epoch "
                    f"{marker.coordinator_epoch} < {entry.coordinator_epoch}")
        first = entry.txn_first_offset if entry.txn_first_offset != NO_OFFSET else offset
        if epoch >= entry.epoch:
            entry.move_to_epoch(epoch)
        entry.txn_first_offset = NO_OFFSET
        entry.coordinator_epoch = marker.coordinator_epoch
        self.completed.append(CompletedTxn(entry.producer_id, first, offset, not marker.commit))

    def _check_epoch(self, entry: ProducerEntry, epoch: int, offset: int) -> None:
        if epoch < entry.epoch and self.fence_epochs:
            raise InvalidProducerEpochError(
                f"producer {entry.producer_id} at offset {offset}: epoch {epoch} < current "
                f"{entry.epoch}")

    @staticmethod
    def _check_sequence(entry: ProducerEntry, epoch: int, base_sequence: int,
                        offset: int) -> None:
        if epoch != entry.epoch:
            if base_sequence != 0 and entry.epoch != NO_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {entry.producer_id} at offset {offset}: new epoch {epoch} "
                    f"must start at sequence 0, not {base_sequence}")
            return
        expected = (entry.last_sequence + 1) & SEQUENCE_MASK
        if base_sequence != expected:
            raise OutOfOrderSequenceError(
                f"producer {entry.producer_id} at offset {offset}: sequence {base_sequence}, "
                f"expected {expected}")


class ProducerStateManager:
    """Every producer of a partition log, its open transactions and the completed ones
    whose markers may still be above the high watermark."""

    def __init__(self, entries: Iterable[ProducerEntry] = ()) -> None:
        self.producers: dict[int, ProducerEntry] = {e.producer_id: e for e in entries}
        self.ongoing: dict[int, int] = {  # first offset -> producer id
            e.txn_first_offset: e.producer_id
            for e in sorted(self.producers.values(), key=lambda e: e.txn_first_offset)
            if e.txn_first_offset != NO_OFFSET}
        self.unreplicated: deque[CompletedTxn] = deque()
        self.dirty = False

    def __len__(self) -> int:
        return len(self.producers)

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self.producers.get(producer_id)

    def begin(self, check: bool, fence_epochs: bool = True) -> ProducerAppend:
        """Stage an append: `check` for a leader append, unchecked for a follower or replay."""
        return ProducerAppend(self.producers, check, fence_epochs)

    def commit(self, append: ProducerAppend) -> list[AbortedTxn]:
        """Apply a written append; the index entries of the transactions it aborted, each with
        the LSO right after it (the first other open transaction, else the marker + 1)."""
        self.producers.update(append.entries)
        for first, producer_id in append.started:
            self.ongoing[first] = producer_id
        aborted = []
        for txn in append.completed:
            if txn.aborted:
                aborted.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                          self._stable_after(txn)))
            self.ongoing.pop(txn.first_offset, None)
            self.unreplicated.append(txn)
        self.dirty |= bool(append.entries)
        return aborted

    def _stable_after(self, txn: CompletedTxn) -> int:
        others = [first for first, pid in self.ongoing.items() if pid != txn.producer_id]
        return min(others) if others else txn.last_offset + 1

    def on_high_watermark(self, high_watermark: int) -> None:
        """Forget the completed transactions whose markers are below `high_watermark` (the
        HW only moves up until a truncation rebuilds this state)."""
        unreplicated = self.unreplicated
        while unreplicated and unreplicated[0].last_offset < high_watermark:
            unreplicated.popleft()

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of an open transaction or of one whose marker is at or above
        `high_watermark`; None if there is none."""
        self.on_high_watermark(high_watermark)
        first = min(self.ongoing) if self.ongoing else None
        for txn in self.unreplicated:
            if first is None or txn.first_offset < first:
                first = txn.first_offset
        return first
