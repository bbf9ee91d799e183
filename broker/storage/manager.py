"""LogManager: every partition log under the broker's log.dirs, and the per-dir checkpoints.

A clean shutdown leaves `.kafka_cleanshutdown` in each log dir (as Kafka does); loading
removes it. With `lose_unflushed_on_crash` (kchaos.debug.lose-unflushed-on-crash) a start
without it is taken for a power loss: each partition log first loses what lies beyond its
checkpointed recovery point (see power_loss.py), and, so that this is exactly what was not
fsynced, the recovery-point checkpoint is rewritten whenever a recovery point moves (Kafka
writes it every log.flush.offset.checkpoint.interval.ms).
"""

from __future__ import annotations

import fcntl
import logging
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
from .power_loss import LostTail, lose_unflushed

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_CHECKPOINT",
    "LogManager",
    "parse_partition_dir",
]

REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_SUFFIX = "-delete"
LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
logger = logging.getLogger("broker.storage")


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

    def __init__(self, log_dirs: list[Path], config: LogConfig,
                 lose_unflushed_on_crash: bool = False) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.config = config
        self.lose_unflushed_on_crash = lose_unflushed_on_crash
        # what the simulated power loss of the last load took, per partition
        self.lost_tails: list[tuple[tuple[str, int], LostTail]] = []
        self._checkpoint_lock = threading.Lock()  # taken last: never while taking a log's
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self._dir_of: dict[tuple[str, int], Path] = {}
        self._lock = threading.RLock()
        self._lock_fds: list[int] = []
        for directory in self.log_dirs:
            directory.mkdir(parents=True, exist_ok=True)
            self._lock_fds.append(_lock_dir(directory))

    def load(self) -> None:
        """Open every partition directory, recovering each from its checkpointed recovery
        point; finish deletions interrupted by a crash. After an unclean shutdown with
        `lose_unflushed_on_crash`, cut each log back to that recovery point first."""
        with self._lock:
            for directory in self.log_dirs:
                marker = directory / CLEAN_SHUTDOWN_FILE
                power_loss = self.lose_unflushed_on_crash and not marker.exists()
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
                    if power_loss:
                        self._lose_unflushed(key, child, points.get(key, 0))
                    self.logs[key] = self._watch(
                        PartitionLog.open(child, self.config, points.get(key, 0)))
                    self._dir_of[key] = directory
            for directory in self.log_dirs:
                (directory / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
                fsync_dir(directory)

    def _lose_unflushed(self, key: tuple[str, int], directory: Path,
                        recovery_point: int) -> None:
        tail = lose_unflushed(directory, recovery_point)
        if tail is None:
            return
        logger.warning("%s-%d: simulated power loss (kchaos.debug.lose-unflushed-on-crash): "
                       "log cut from offset %d to its recovery point %d, %d bytes lost",
                       *key, tail.from_offset, tail.to_offset, tail.bytes)
        self.lost_tails.append((key, tail))

    def _watch(self, log: PartitionLog) -> PartitionLog:
        """With lose_unflushed_on_crash: checkpoint the recovery points at every move."""
        if self.lose_unflushed_on_crash:
            log.on_recovery_point = self._recovery_point_moved
        return log

    def _recovery_point_moved(self, log: PartitionLog) -> None:
        directory = log.directory.parent
        with self._checkpoint_lock:
            entries = {key: other.recovery_point for key, other in list(self.logs.items())
                       if self._dir_of.get(key) == directory}
            key = parse_partition_dir(log.directory.name)
            if key is not None:
                entries[key] = log.recovery_point
            write_offset_checkpoint(directory / RECOVERY_POINT_CHECKPOINT, entries)

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
                log = self._watch(PartitionLog.open(directory / f"{topic}-{partition}",
                                                    self.config))
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
            with self._checkpoint_lock:
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
        """Flush every log, checkpoint the recovery points, mark the shutdown clean, close,
        release the dir locks."""
        with self._lock:
            for log in self.logs.values():
                log.on_recovery_point = None
                log.close()
            self.checkpoint_recovery_points()
            for directory in self.log_dirs:
                _write_marker(directory / CLEAN_SHUTDOWN_FILE)
            self.logs.clear()
            self._dir_of.clear()
            for fd in self._lock_fds:
                os.close(fd)
            self._lock_fds.clear()


def _write_marker(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)


def _lock_dir(directory: Path) -> int:
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LogDirInUseError(f"log dir {directory} is in use by another process") from None
    return fd
