"""Simulated power loss (the testing-only `kchaos.debug.lose-unflushed-on-crash`).

A broker killed with SIGKILL keeps everything it wrote: the page cache survives the
process. A machine that loses power keeps only what was fsynced. `lose_unflushed` makes the
first look like the second, on the next start and before the usual recovery: a partition's
log is cut back to its recovery point (the offset below which everything was fsynced, as the
recovery-point checkpoint says), the segments wholly above it are removed (emptied if it is
the first one, which keeps the log start offset), and the indexes of the cut segment are
dropped so recovery rebuilds them. The checkpoints (high watermark, leader epochs, recovery
points, producer snapshots) are written with fsync, so a power loss keeps them as written;
the log's recovery then drops what lies beyond the shortened log (see PartitionLog.open).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .records import H_BASE, H_DELTA, H_LENGTH, H_MAGIC, HEADER, HEADER_SIZE, LOG_OVERHEAD
from .segment import log_file_name, parse_base_offset
from .txn_index import txn_index_path

__all__ = ["LostTail", "lose_unflushed"]


@dataclass(frozen=True)
class LostTail:
    """What a simulated power loss took from one partition log: offsets [to_offset,
    from_offset) (from_offset: the log end offset before the cut), `bytes` bytes."""

    directory: str
    from_offset: int
    to_offset: int
    bytes: int

    def to_json(self) -> dict:
        return {"from_offset": self.from_offset, "to_offset": self.to_offset,
                "bytes": self.bytes}


def lose_unflushed(directory: Path, recovery_point: int) -> LostTail | None:
    """Cut the log in `directory` back to `recovery_point`; None if nothing was beyond it."""
    bases = sorted(base for path in directory.glob("*.log")
                   if (base := parse_base_offset(path.name)) is not None)
    lost_bytes = 0
    log_end = None
    cut_at = None
    for i, base in enumerate(bases):
        if i + 1 < len(bases) and bases[i + 1] <= recovery_point:
            continue  # wholly below the recovery point: flushed
        path = directory / log_file_name(base)
        size = path.stat().st_size
        if base >= recovery_point:
            positions = _batches(path, size)
            if positions:
                log_end = positions[-1][1]
                cut_at = base if cut_at is None else cut_at
            lost_bytes += size
            if i == 0:
                os.truncate(path, 0)  # the first segment stays: it holds the log start
            else:
                path.unlink()
            _drop_indexes(directory, base)
            continue
        positions = _batches(path, size)
        if positions:
            log_end = positions[-1][1]
        keep = next((pos for pos, _, first in positions if first >= recovery_point), None)
        if keep is not None:
            lost_bytes += size - keep
            cut_at = next(first for pos, _, first in positions if pos == keep)
            os.truncate(path, keep)
            _drop_indexes(directory, base)
    if not lost_bytes:
        return None
    return LostTail(directory.name, log_end if log_end is not None else recovery_point,
                    cut_at if cut_at is not None else recovery_point, lost_bytes)


def _batches(path: Path, size: int) -> list[tuple[int, int, int]]:
    """(position, next offset after it, base offset) of the whole batches of a segment file,
    up to the first thing that is not a batch header."""
    found = []
    with open(path, "rb") as file:
        position = 0
        while position + HEADER_SIZE <= size:
            header = HEADER.unpack(os.pread(file.fileno(), HEADER_SIZE, position))
            stop = position + LOG_OVERHEAD + header[H_LENGTH]
            if header[H_MAGIC] != 2 or stop > size or header[H_LENGTH] <= 0:
                break
            found.append((position, header[H_BASE] + header[H_DELTA] + 1, header[H_BASE]))
            position = stop
    return found


def _drop_indexes(directory: Path, base: int) -> None:
    """Remove a segment's offset and transaction indexes: recovery rebuilds them."""
    (directory / log_file_name(base)).with_suffix(".index").unlink(missing_ok=True)
    txn_index_path(directory, base).unlink(missing_ok=True)
