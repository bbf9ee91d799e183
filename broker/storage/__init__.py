"""Kafka-format storage of the broker: partition logs, segments, indexes and checkpoints."""

from .cleaner import CleanerConfig, CleaningResult, CleanupPolicy, cleanup_policy
from .errors import (
    CheckpointError,
    CorruptRecordError,
    InvalidRecordError,
    LogDirInUseError,
    OffsetOutOfRangeError,
    StaleLeaderEpochError,
    StorageError,
    UnexpectedAppendOffsetError,
)
from .log import AppendInfo, LogConfig, PartitionLog
from .manager import LogManager
from .records import BatchHeader, iter_batch_headers

__all__ = [
    "AppendInfo",
    "BatchHeader",
    "CheckpointError",
    "CleanerConfig",
    "CleaningResult",
    "CleanupPolicy",
    "CorruptRecordError",
    "InvalidRecordError",
    "LogConfig",
    "LogDirInUseError",
    "LogManager",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "StaleLeaderEpochError",
    "StorageError",
    "UnexpectedAppendOffsetError",
    "cleanup_policy",
    "iter_batch_headers",
]
