"""Kafka-format storage of the broker: partition logs, segments, indexes and checkpoints."""

from .cleaner import CleanerConfig, CleaningResult, CleanupPolicy, cleanup_policy
from .errors import (
    CheckpointError,
    CoordinatorFencedError,
    CorruptRecordError,
    DuplicateSequenceError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    LogDirInUseError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    ProducerStateError,
    StaleLeaderEpochError,
    StorageError,
    UnexpectedAppendOffsetError,
)
from .log import AppendInfo, LogConfig, PartitionLog
from .manager import LogManager
from .markers import TxnMarker, build_marker_batch, read_marker
from .producer_state import ProducerEntry, ProducerStateManager
from .records import BatchHeader, end_offset, iter_batch_headers
from .txn_index import AbortedTxn

__all__ = [
    "AbortedTxn",
    "AppendInfo",
    "BatchHeader",
    "CheckpointError",
    "CleanerConfig",
    "CleaningResult",
    "CleanupPolicy",
    "CoordinatorFencedError",
    "CorruptRecordError",
    "DuplicateSequenceError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTxnStateError",
    "LogConfig",
    "LogDirInUseError",
    "LogManager",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "PartitionLog",
    "ProducerEntry",
    "ProducerStateError",
    "ProducerStateManager",
    "StaleLeaderEpochError",
    "StorageError",
    "TxnMarker",
    "UnexpectedAppendOffsetError",
    "build_marker_batch",
    "cleanup_policy",
    "end_offset",
    "iter_batch_headers",
    "read_marker",
]
