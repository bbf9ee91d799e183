"""Kafka-format storage of the broker: partition logs, segments, indexes and checkpoints."""

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
    "iter_batch_headers",
]
