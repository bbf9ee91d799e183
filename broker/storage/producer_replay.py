"""Rebuilding a log's producer state, as Kafka's loadProducerState: the latest usable
snapshot, then the batch headers after it (control batches decode their one record)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .markers import read_marker
from .producer_snapshot import delete_snapshot, read_snapshot, snapshot_offsets
from .producer_state import ProducerAppend, ProducerBatch, ProducerStateManager
from .records import CONTROL_MASK, H_ATTRS, H_BASE, H_DELTA, H_LENGTH, H_PID, LOG_OVERHEAD
from .segment import LogSegment

__all__ = ["load_producer_state", "stage_batch"]


def stage_batch(append: ProducerAppend, data: bytes | bytearray | memoryview, position: int,
                header: tuple, base_offset: int) -> ProducerBatch | None:
    """Stage the producer batch whose `header` sits at `position` in `data`, its offsets
    starting at `base_offset`: a marker ends a transaction, a data batch may be a duplicate
    (returned) or open one."""
    if header[H_ATTRS] & CONTROL_MASK:
        marker = read_marker(data, position, header)
        if marker is not None:
            append.add_marker(header, base_offset, marker)
        return None
    return append.add_batch(header, base_offset)


def load_producer_state(directory: Path, segments: Sequence[LogSegment], log_start: int,
                        rebuild: Sequence[LogSegment] = ()
                        ) -> tuple[ProducerStateManager, int | None]:
    """The state at the log end and the offset of the snapshot it started from, if any.
    Snapshots beyond the log end and corrupt ones are deleted. The aborted transactions of
    the `rebuild` segments (whose transaction index recovery emptied) are indexed again, so
    the snapshot taken is the latest at or below the first of them."""
    log_end = segments[-1].next_offset
    limit = min([log_end] + [segment.base_offset for segment in rebuild])
    state, snapshot = ProducerStateManager(), None
    for offset in reversed(snapshot_offsets(directory)):
        if offset > log_end:
            delete_snapshot(directory, offset)
            continue
        if offset > limit:
            continue
        entries = read_snapshot(directory, offset)
        if entries is None:
            delete_snapshot(directory, offset)
            continue
        state, snapshot = ProducerStateManager(entries), offset
        break
    replay(state, segments, max(snapshot or 0, log_start), rebuild)
    return state, snapshot


def replay(state: ProducerStateManager, segments: Sequence[LogSegment], start: int,
           rebuild: Sequence[LogSegment]) -> None:
    """Apply every producer batch at or after `start`, unchecked, one segment at a time."""
    for segment in segments:
        if segment.next_offset <= start:
            continue
        append = state.begin(check=False)
        for position, header in segment.walk(segment.index.lookup(start)):
            if header[H_PID] < 0 or header[H_BASE] + header[H_DELTA] < start:
                continue
            data = (segment.read_at(position, LOG_OVERHEAD + header[H_LENGTH])
                    if header[H_ATTRS] & CONTROL_MASK else b"")
            stage_batch(append, data, 0, header, header[H_BASE])
        aborted = state.commit(append)
        if any(segment is rebuilt for rebuilt in rebuild):
            for entry in aborted:
                segment.txn_index.append(entry)
