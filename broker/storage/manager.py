"""LogManager: every partition log under the broker's log.dirs, and the per-dir checkpoints."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import threading
import uuid
from collections.abc import Collection
from pathlib import Path

from .checkpoints import fsync_dir, read_offset_checkpoint, write_offset_checkpoint
from .errors import LogDirInUseError
from .log import LogConfig, PartitionLog

__all__ = [
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_CHECKPOINT",
    "LogManager",
    "parse_partition_dir",
]

REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOCK_FILE = ".lock"
DELETE_SUFFIX = "-delete"
LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """("topic", partition) for a directory name "topic-partition", else None."""
    topic, dash, partition = name.rpartition("-")
    if not dash or not topic or not partition.isdigit() or name.endswith(DELETE_SUFFIX):
        return None
    return topic, int(partition)


class LogManager:
    """Owns the PartitionLogs of all log dirs; a new partition goes to the dir holding fewest.

    Each log dir is locked (flock on `.lock`) so that two brokers cannot share one.
    """

    def __init__(self, log_dirs: list[Path], config: LogConfig) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.config = config
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self._dir_of: dict[tuple[str, int], Path] = {}
        self._lock = threading.RLock()
        self._lock_fds: list[int] = []
        for directory in self.log_dirs:
            directory.mkdir(parents=True, exist_ok=True)
            self._lock_fds.append(_lock_dir(directory))

    def load(self) -> None:
        """Open every partition directory, recovering each from its checkpointed recovery
        point; finish deletions interrupted by a crash."""
        with self._lock:
            for directory in self.log_dirs:
                points = read_offset_checkpoint(directory / RECOVERY_POINT_CHECKPOINT)
                for child in sorted(directory.iterdir()):
                    if not child.is_dir():
                        continue
                    if child.name.endswith(DELETE_SUFFIX):
                        shutil.rmtree(child, ignore_errors=True)
                        continue
                    key = parse_partition_dir(child.name)
                    if key is None or key in self.logs:
                        continue
                    self.logs[key] = PartitionLog.open(child, self.config, points.get(key, 0))
                    self._dir_of[key] = directory

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int) -> PartitionLog:
        """The partition's log, created empty if needed; ValueError for a topic name Kafka
        would refuse (it becomes a directory name) or a negative partition."""
        if not LEGAL_TOPIC.fullmatch(topic) or topic in (".", "..") or partition < 0:
            raise ValueError(f"illegal topic-partition {topic!r} {partition}")
        with self._lock:
            key = (topic, partition)
            log = self.logs.get(key)
            if log is None:
                counts = {d: 0 for d in self.log_dirs}
                for directory in self._dir_of.values():
                    counts[directory] += 1
                directory = min(self.log_dirs, key=lambda d: counts[d])
                log = PartitionLog.open(directory / f"{topic}-{partition}", self.config)
                fsync_dir(directory)
                self.logs[key] = log
                self._dir_of[key] = directory
            return log

    def delete(self, topic: str, partition: int) -> None:
        """Close the log, rename its directory out of the way (atomic), then remove it."""
        with self._lock:
            key = (topic, partition)
            log = self.logs.pop(key, None)
            directory = self._dir_of.pop(key, None)
            if log is None or directory is None:
                return
            for segment in log.segments:
                segment.close()
            doomed = directory / f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_SUFFIX}"
            os.replace(log.directory, doomed)
            fsync_dir(directory)
            shutil.rmtree(doomed, ignore_errors=True)

    def partitions(self) -> list[tuple[str, int]]:
        return sorted(self.logs)

    def high_watermarks(self) -> dict[tuple[str, int], int]:
        """The last checkpointed high watermarks of all log dirs."""
        hws: dict[tuple[str, int], int] = {}
        for directory in self.log_dirs:
            hws.update(read_offset_checkpoint(directory / REPLICATION_CHECKPOINT))
        return hws

    def checkpoint_high_watermarks(self, hws: dict[tuple[str, int], int]) -> None:
        """Write `replication-offset-checkpoint` of every log dir atomically; each partition
        goes to the dir holding its log (the first dir if it has none)."""
        with self._lock:
            per_dir: dict[Path, dict[tuple[str, int], int]] = {d: {} for d in self.log_dirs}
            for key, hw in hws.items():
                per_dir[self._dir_of.get(key, self.log_dirs[0])][key] = hw
            for directory, entries in per_dir.items():
                write_offset_checkpoint(directory / REPLICATION_CHECKPOINT, entries)

    def checkpoint_recovery_points(self) -> None:
        """Write `recovery-point-offset-checkpoint` of every log dir atomically, then drop
        the producer snapshots recovery from there no longer needs."""
        with self._lock:
            per_dir: dict[Path, dict[tuple[str, int], int]] = {d: {} for d in self.log_dirs}
            for key, log in self.logs.items():
                per_dir[self._dir_of[key]][key] = log.recovery_point
            for directory, entries in per_dir.items():
                write_offset_checkpoint(directory / RECOVERY_POINT_CHECKPOINT, entries)
            for log in self.logs.values():
                log.delete_snapshots_before_recovery_point()

    def flush_all(self) -> None:
        with self._lock:
            for log in self.logs.values():
                log.flush()

    def delete_old_segments(self, high_watermarks: dict[tuple[str, int], int] | None = None,
                            exclude: Collection[tuple[str, int]] = ()) -> int:
        """Retention over all logs but those in `exclude` (compact-only topics), each bounded
        by its high watermark when given."""
        with self._lock:
            hws = high_watermarks or {}
            return sum(log.delete_old_segments(hws.get(key))
                       for key, log in list(self.logs.items()) if key not in exclude)

    def close(self) -> None:
        """Flush every log, checkpoint the recovery points, close, release the dir locks."""
        with self._lock:
            for log in self.logs.values():
                log.close()
            self.checkpoint_recovery_points()
            self.logs.clear()
            self._dir_of.clear()
            for fd in self._lock_fds:
                os.close(fd)
            self._lock_fds.clear()


def _lock_dir(directory: Path) -> int:
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LogDirInUseError(f"log dir {directory} is in use by another process") from None
    return fd
