"""Leader-epoch cache of one partition and its `leader-epoch-checkpoint` file (KIP-101).

Entries (epoch, start offset) strictly increase in both fields. Every change is written to
the checkpoint at once (epochs change rarely), before the batches of a new epoch are appended.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from pathlib import Path

from .checkpoints import read_epoch_checkpoint, write_epoch_checkpoint
from .errors import CheckpointError

__all__ = ["EPOCH_CHECKPOINT", "UNDEFINED", "LeaderEpochCache"]

EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED = -1


class LeaderEpochCache:
    def __init__(self, path: Path, entries: list[tuple[int, int]] | None = None) -> None:
        self.path = path
        self.epochs: list[int] = []
        self.starts: list[int] = []
        for epoch, start in entries or []:
            self.put(epoch, start)

    @classmethod
    def load(cls, directory: Path) -> tuple[LeaderEpochCache, bool]:
        """The cache from the directory's checkpoint; the flag says the file was usable
        (missing or malformed files give an empty cache to rebuild from the log)."""
        path = directory / EPOCH_CHECKPOINT
        try:
            entries = read_epoch_checkpoint(path)
        except CheckpointError:
            return cls(path), False
        return cls(path, entries), entries is not None

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self.epochs, self.starts, strict=True))

    @property
    def latest_epoch(self) -> int | None:
        return self.epochs[-1] if self.epochs else None

    def put(self, epoch: int, start: int) -> bool:
        """Kafka's assign: ignore a repeat of the latest epoch (unless it starts earlier),
        otherwise drop entries that would no longer increase and append."""
        if epoch < 0 or start < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start})")
        if self.epochs and epoch == self.epochs[-1] and start >= self.starts[-1]:
            return False
        while self.epochs and (self.epochs[-1] >= epoch or self.starts[-1] >= start):
            self.epochs.pop()
            self.starts.pop()
        self.epochs.append(epoch)
        self.starts.append(start)
        return True

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` begins at `start_offset`, checkpointing if anything changed."""
        if self.put(epoch, start_offset):
            self.flush()

    def end_offset_for(self, requested: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's endOffsetFor: (largest known epoch <= requested, the start offset of the
        next epoch, or the log end offset for the latest). (-1, -1) if `requested` is
        undefined, beyond the latest epoch, or the cache is empty; a requested epoch below the
        first known keeps its number and gets the first start offset."""
        if requested == UNDEFINED or not self.epochs or requested > self.epochs[-1]:
            return UNDEFINED, UNDEFINED
        if requested == self.epochs[-1]:
            return requested, log_end_offset
        higher = bisect_right(self.epochs, requested)
        if higher == 0:
            return requested, self.starts[0]
        return self.epochs[higher - 1], self.starts[higher]

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs starting at or after `end_offset` (the log was truncated there)."""
        keep = bisect_left(self.starts, end_offset)
        if keep < len(self.starts):
            del self.epochs[keep:]
            del self.starts[keep:]
            self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: drop older epochs, keeping the one that
        covers `start_offset` with its start moved up to it."""
        covering = bisect_right(self.starts, start_offset) - 1
        if covering < 0 or (covering == 0 and self.starts[0] == start_offset):
            return
        del self.epochs[:covering]
        del self.starts[:covering]
        self.starts[0] = start_offset
        self.flush()

    def clear(self) -> None:
        if self.epochs:
            self.epochs.clear()
            self.starts.clear()
            self.flush()

    def flush(self) -> None:
        write_epoch_checkpoint(self.path, self.entries())
