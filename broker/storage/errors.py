"""Errors raised by the storage layer.

    StorageError                    base of everything below
    ├── CorruptRecordError          framing or CRC-32C does not hold (torn, flipped bytes)
    ├── InvalidRecordError          well framed but not acceptable (magic != 2, bad counts)
    ├── OffsetOutOfRangeError       a read outside [log_start_offset, log_end_offset]
    ├── UnexpectedAppendOffsetError a follower batch does not start at the log end offset
    ├── StaleLeaderEpochError       a leader append with an epoch older than the log's latest
    ├── ProducerStateError          a leader append the producer state refuses
    │   ├── InvalidProducerEpochError   a batch or marker from an older producer epoch
    │   ├── OutOfOrderSequenceError     a sequence gap, or a new epoch not starting at 0
    │   ├── DuplicateSequenceError      a retried batch among others in one append
    │   ├── InvalidTxnStateError        a non-transactional batch inside an open transaction
    │   └── CoordinatorFencedError      a marker from an older transaction coordinator epoch
    ├── CheckpointError             a checkpoint file is malformed (names the file and line)
    └── LogDirInUseError            another LogManager holds the lock of a log dir
"""

__all__ = [
    "CheckpointError",
    "CoordinatorFencedError",
    "CorruptRecordError",
    "DuplicateSequenceError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTxnStateError",
    "LogDirInUseError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "ProducerStateError",
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


class ProducerStateError(StorageError):
    """A leader append refused by the producer state (Kafka's ProducerAppendInfo checks)."""


class InvalidProducerEpochError(ProducerStateError):
    """A batch or marker carrying an epoch below the producer's current one."""


class OutOfOrderSequenceError(ProducerStateError):
    """A batch whose base sequence does not follow the producer's last one."""


class DuplicateSequenceError(ProducerStateError):
    """A batch already in the log, sent with other batches (only a lone one is answered
    with its original offsets)."""


class InvalidTxnStateError(ProducerStateError):
    """A non-transactional batch from a producer whose transaction is open here."""


class CoordinatorFencedError(ProducerStateError):
    """A marker whose coordinator epoch is below the last one seen for its producer."""


class CheckpointError(StorageError):
    """A malformed checkpoint file."""


class LogDirInUseError(StorageError):
    """A log directory locked by another LogManager (another broker on the same log.dirs)."""
