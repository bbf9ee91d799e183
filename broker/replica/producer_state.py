"""Idempotent-producer state of one partition: dedup by producer id, epoch and sequence.

Only the 61-byte v2 batch headers are read (no record decoding). The leader checks a
batch before appending (`check`) and both leader and followers record appended batches
(`record`), so a new leader after failover still recognises retried batches. State is
kept in memory only: after a restart an unknown producer is accepted at any sequence.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from broker.errors import BrokerError, ErrorCode
from broker.storage import BatchHeader

__all__ = ["ProducerBatch", "ProducerStateTable"]

NO_PRODUCER_ID = -1
_CACHED_BATCHES = 5  # Kafka keeps the metadata of the last 5 batches per producer


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """What dedup needs of one appended batch: its offsets and its producer sequence range."""

    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int

    @classmethod
    def of(cls, header: BatchHeader, base_offset: int | None = None) -> ProducerBatch:
        """The batch of `header`, moved to `base_offset` when offsets were assigned on append."""
        base = header.base_offset if base_offset is None else base_offset
        last_sequence = (-1 if header.base_sequence < 0
                         else (header.base_sequence + header.last_offset_delta) & 0x7FFFFFFF)
        return cls(base, base + header.last_offset_delta, header.producer_id,
                   header.producer_epoch, header.base_sequence, last_sequence)


@dataclass
class _ProducerEntry:
    epoch: int
    batches: deque[ProducerBatch] = field(default_factory=lambda: deque(maxlen=_CACHED_BATCHES))

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1


class ProducerStateTable:
    """producer id -> epoch and the last few batches appended for it."""

    def __init__(self) -> None:
        self._producers: dict[int, _ProducerEntry] = {}

    def check(self, header: ProducerBatch) -> ProducerBatch | None:
        """Validate a batch about to be appended by the leader.

        Returns the original batch (with its assigned offsets) if this is a duplicate,
        None if it may be appended; raises BrokerError for a fenced epoch or a gap.
        """
        if header.producer_id == NO_PRODUCER_ID or header.base_sequence < 0:
            return None
        entry = self._producers.get(header.producer_id)
        if entry is None:
            return None
        if header.producer_epoch < entry.epoch:
            raise BrokerError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"epoch {header.producer_epoch} < current {entry.epoch}",
            )
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise BrokerError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"new epoch {header.producer_epoch} must start at sequence 0",
                )
            return None
        for cached in entry.batches:
            if (
                cached.base_sequence == header.base_sequence
                and cached.last_sequence == header.last_sequence
            ):
                return cached
        expected = (entry.last_sequence + 1) & 0x7FFFFFFF
        if entry.batches and header.base_sequence != expected:
            raise BrokerError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"sequence {header.base_sequence}, expected {expected}",
            )
        return None

    def record(self, header: ProducerBatch) -> None:
        """Remember an appended batch (offsets assigned)."""
        if header.producer_id == NO_PRODUCER_ID or header.base_sequence < 0:
            return
        entry = self._producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = self._producers[header.producer_id] = _ProducerEntry(header.producer_epoch)
        entry.batches.append(header)

    def truncate_to(self, offset: int) -> None:
        """Forget batches at or beyond `offset` (log truncation)."""
        for producer_id in list(self._producers):
            entry = self._producers[producer_id]
            kept = [batch for batch in entry.batches if batch.last_offset < offset]
            if not kept:
                del self._producers[producer_id]
            elif len(kept) != len(entry.batches):
                entry.batches = deque(kept, maxlen=_CACHED_BATCHES)
