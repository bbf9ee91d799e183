"""Errors raised by the storage layer.

    StorageError                    base of everything below
    ├── CorruptRecordError          framing or CRC-32C does not hold (torn, flipped bytes)
    ├── InvalidRecordError          well framed but not acceptable (magic != 2, bad counts)
    ├── OffsetOutOfRangeError       a read outside [log_start_offset, log_end_offset]
    ├── UnexpectedAppendOffsetError a follower batch does not start at the log end offset
    ├── StaleLeaderEpochError       a leader append with an epoch older than the log's latest
    ├── CheckpointError             a checkpoint file is malformed (names the file and line)
    └── LogDirInUseError            another LogManager holds the lock of a log dir
"""

__all__ = [
    "CheckpointError",
    "CorruptRecordError",
    "InvalidRecordError",
    "LogDirInUseError",
    "OffsetOutOfRangeError",
    "StaleLeaderEpochError",
    "StorageError",
    "UnexpectedAppendOffsetError",
]


class StorageError(Exception):
    """Base class of every storage error."""


class CorruptRecordError(StorageError):
    """Bytes that cannot be framed as record batches, or whose CRC-32C does not match."""


class InvalidRecordError(StorageError):
    """Record batches that are well framed but not acceptable to this log."""


class OffsetOutOfRangeError(StorageError):
    """An offset below the log start offset or beyond the log end offset."""


class UnexpectedAppendOffsetError(StorageError):
    """Follower batches whose offsets do not continue the log."""


class StaleLeaderEpochError(StorageError):
    """A leader append carrying an epoch below the latest one in the leader-epoch cache."""


class CheckpointError(StorageError):
    """A malformed checkpoint file."""


class LogDirInUseError(StorageError):
    """A log directory locked by another LogManager (another broker on the same log.dirs)."""
