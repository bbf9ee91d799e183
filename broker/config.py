"""Broker configuration from a Kafka-style `server.properties` file.

Only the property names listed in `SPEC` are accepted; an unknown key or a value
that does not parse raises `ConfigError` naming the file, the line, the key and
what was expected.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["BrokerConfig", "ConfigError", "Listener", "parse_listeners"]


class ConfigError(ValueError):
    """A configuration file is unreadable, has an unknown key or a malformed value."""


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


_LISTENER = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)://(\[[^\]]*\]|[^:/\s]*):(\d{1,5})$")


def parse_listeners(text: str) -> tuple[Listener, ...]:
    """`NAME://host:port,NAME2://host:port` -> listeners; raises ValueError."""
    listeners = []
    for item in (part.strip() for part in text.split(",")):
        match = _LISTENER.match(item)
        if not match or not 0 <= int(match.group(3)) <= 65535:
            raise ValueError(f"expected NAME://host:port, got {item!r}")
        listeners.append(
            Listener(match.group(1).upper(), match.group(2).strip("[]"), int(match.group(3)))
        )
    names = [listener.name for listener in listeners]
    if len(set(names)) != len(names):
        raise ValueError(f"listener names must be distinct, got {names}")
    return tuple(listeners)


def _int(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ValueError(f"must be within [{lo}, {hi if hi is not None else 'inf'}]")
        return value

    parse.__doc__ = "an integer" + (f" >= {lo}" if lo is not None else "")
    return parse


def _bool(text: str) -> bool:
    """true or false"""
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise ValueError("must be true or false")
    return lowered == "true"


def _nonempty(text: str) -> str:
    """a non-empty string"""
    if not text:
        raise ValueError("must not be empty")
    return text


def _paths(text: str) -> tuple[str, ...]:
    """a comma-separated list of directories"""
    paths = tuple(p.strip() for p in text.split(",") if p.strip())
    if not paths:
        raise ValueError("must name at least one directory")
    return paths


def _protocol_map(text: str) -> dict[str, str]:
    """NAME:PROTOCOL pairs separated by commas"""
    result = {}
    for item in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, protocol = item.partition(":")
        if not sep or not name or protocol.upper() not in ("PLAINTEXT",):
            raise ValueError(f"expected NAME:PLAINTEXT, got {item!r}")
        result[name.upper()] = protocol.upper()
    return result


def _truncation_mode(text: str) -> str:
    """leader-epoch or high-watermark"""
    if text not in ("leader-epoch", "high-watermark"):
        raise ValueError("must be leader-epoch or high-watermark")
    return text


def _ratio(text: str) -> float:
    """a number within [0, 1]"""
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be within [0, 1]")
    return value


def _listeners(text: str) -> tuple[Listener, ...]:
    """NAME://host:port[,NAME://host:port...]"""
    return parse_listeners(text)


def _rack(text: str) -> str | None:
    """a rack name (empty for none)"""
    return text or None


# property name -> (attribute, parser, default); a default of None means "required" only
# where listed in REQUIRED.
SPEC: dict[str, tuple[str, Callable[[str], Any], Any]] = {
    "broker.id": ("broker_id", _int(0), None),
    "listeners": ("listeners", _listeners, None),
    "advertised.listeners": ("advertised_listeners", _listeners, None),
    "control.plane.listener.name": ("control_plane_listener_name", _nonempty, "CONTROLLER"),
    "listener.security.protocol.map": ("listener_security_protocol_map", _protocol_map, None),
    "zookeeper.connect": ("zookeeper_connect", _nonempty, None),
    "zookeeper.session.timeout.ms": ("zookeeper_session_timeout_ms", _int(1000), 18000),
    "zookeeper.connection.timeout.ms": ("zookeeper_connection_timeout_ms", _int(1), None),
    "log.dirs": ("log_dirs", _paths, None),
    "log.dir": ("log_dir", _paths, None),
    "num.partitions": ("num_partitions", _int(1), 1),
    "default.replication.factor": ("default_replication_factor", _int(1), 1),
    "min.insync.replicas": ("min_insync_replicas", _int(1), 1),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _bool, False),
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", _int(1), 30000),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", _int(0), 500),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", _int(1), 1048576),
    "log.segment.bytes": ("log_segment_bytes", _int(14), 1 << 30),
    "log.index.interval.bytes": ("log_index_interval_bytes", _int(0), 4096),
    "log.retention.bytes": ("log_retention_bytes", _int(-1), -1),
    "log.retention.ms": ("log_retention_ms", _int(-1), None),
    "log.retention.hours": ("log_retention_hours", _int(-1), 168),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", _int(1), 50),
    "offsets.topic.replication.factor": ("offsets_topic_replication_factor", _int(1), 3),
    "auto.leader.rebalance.enable": ("auto_leader_rebalance_enable", _bool, True),
    "leader.imbalance.check.interval.seconds": (
        "leader_imbalance_check_interval_seconds",
        _int(1),
        300,
    ),
    "auto.create.topics.enable": ("auto_create_topics_enable", _bool, True),
    "broker.rack": ("broker_rack", _rack, None),
    "controlled.shutdown.enable": ("controlled_shutdown_enable", _bool, True),
    "replication.truncation.mode": (
        "replication_truncation_mode",
        _truncation_mode,
        "leader-epoch",
    ),
    "controller.event.log": ("controller_event_log", _nonempty, None),
    "socket.request.max.bytes": ("socket_request_max_bytes", _int(1024), 104857600),
    "replica.high.watermark.checkpoint.interval.ms": ("hw_checkpoint_interval_ms", _int(1), 5000),
    # Kafka's flush policy: by default nothing is fsynced on a schedule or a count (the OS
    # writes the page cache back); log.flush.interval.ms defaults to the scheduler interval
    "log.flush.interval.messages": ("log_flush_interval_messages", _int(1), None),
    "log.flush.interval.ms": ("log_flush_interval_ms", _int(1), None),
    "log.flush.scheduler.interval.ms": ("log_flush_scheduler_interval_ms", _int(1), None),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", _int(1), 300000),
    "log.flush.offset.checkpoint.interval.ms": (
        "log_flush_offset_checkpoint_interval_ms",
        _int(1),
        60000,
    ),
    "log.cleaner.enable": ("log_cleaner_enable", _bool, True),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", _int(1), 15000),
    "log.cleaner.delete.retention.ms": ("log_cleaner_delete_retention_ms", _int(0), 86400000),
    "log.cleaner.min.cleanable.ratio": ("log_cleaner_min_cleanable_ratio", _ratio, 0.5),
    "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", _int(14), 104857600),
    "offsets.commit.timeout.ms": ("offsets_commit_timeout_ms", _int(1), 5000),
    "offsets.load.buffer.size": ("offsets_load_buffer_size", _int(1), 5242880),
    "offset.metadata.max.bytes": ("offset_metadata_max_bytes", _int(0), 4096),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", _int(1), 6000),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", _int(1), 1800000),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", _int(0), 3000),
    "group.max.size": ("group_max_size", _int(1), 2147483647),
    "transaction.state.log.num.partitions": ("transaction_state_log_num_partitions", _int(1), 50),
    "transaction.state.log.replication.factor": (
        "transaction_state_log_replication_factor",
        _int(1),
        3,
    ),
    "transaction.state.log.min.isr": ("transaction_state_log_min_isr", _int(1), 2),
    "transaction.state.log.segment.bytes": (
        "transaction_state_log_segment_bytes",
        _int(14),
        104857600,
    ),
    "transaction.state.log.load.buffer.size": (
        "transaction_state_log_load_buffer_size",
        _int(1),
        5242880,
    ),
    "transaction.max.timeout.ms": ("transaction_max_timeout_ms", _int(1), 900000),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "transaction_abort_timed_out_transaction_cleanup_interval_ms",
        _int(1),
        10000,
    ),
    # fault-injection knobs of the detection suite (docs/broker.md, "Debug knobs"); off by default
    "kchaos.debug.ack-commit-before-replication": (
        "debug_ack_commit_before_replication",
        _bool,
        False,
    ),
    "kchaos.debug.skip-epoch-fencing": ("debug_skip_epoch_fencing", _bool, False),
    "kchaos.debug.read-uncommitted-leak": ("debug_read_uncommitted_leak", _bool, False),
    "kchaos.debug.lose-unflushed-on-crash": ("debug_lose_unflushed_on_crash", _bool, False),
}
REQUIRED = ("broker.id", "listeners", "zookeeper.connect")


@dataclass(frozen=True)
class BrokerConfig:
    """Typed broker settings; attribute names are the property names with `_` for `.`."""

    broker_id: int
    listeners: tuple[Listener, ...]
    zookeeper_connect: str
    advertised_listeners: tuple[Listener, ...] | None = None
    control_plane_listener_name: str = "CONTROLLER"
    listener_security_protocol_map: dict[str, str] | None = None
    zookeeper_session_timeout_ms: int = 18000
    zookeeper_connection_timeout_ms: int | None = None
    log_dirs: tuple[str, ...] | None = None
    log_dir: tuple[str, ...] | None = None
    num_partitions: int = 1
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    replica_lag_time_max_ms: int = 30000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1048576
    log_segment_bytes: int = 1 << 30
    log_index_interval_bytes: int = 4096
    log_retention_bytes: int = -1
    log_retention_ms: int | None = None
    log_retention_hours: int = 168
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    auto_create_topics_enable: bool = True
    broker_rack: str | None = None
    controlled_shutdown_enable: bool = True
    replication_truncation_mode: str = "leader-epoch"
    controller_event_log: str | None = None
    socket_request_max_bytes: int = 104857600
    hw_checkpoint_interval_ms: int = 5000
    log_flush_interval_messages: int | None = None
    log_flush_interval_ms: int | None = None
    log_flush_scheduler_interval_ms: int | None = None
    log_flush_offset_checkpoint_interval_ms: int = 60000
    log_retention_check_interval_ms: int = 300000
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15000
    log_cleaner_delete_retention_ms: int = 86400000
    log_cleaner_min_cleanable_ratio: float = 0.5
    offsets_topic_segment_bytes: int = 104857600
    offsets_commit_timeout_ms: int = 5000
    offsets_load_buffer_size: int = 5242880
    offset_metadata_max_bytes: int = 4096
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2147483647
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 104857600
    transaction_state_log_load_buffer_size: int = 5242880
    transaction_max_timeout_ms: int = 900000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10000
    debug_ack_commit_before_replication: bool = False
    debug_skip_epoch_fencing: bool = False
    debug_read_uncommitted_leak: bool = False
    debug_lose_unflushed_on_crash: bool = False
    source: str = field(default="<memory>", compare=False)

    @classmethod
    def from_properties(cls, path: str | Path) -> BrokerConfig:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
        return cls.from_text(text, str(path))

    @classmethod
    def from_text(cls, text: str, source: str = "<memory>") -> BrokerConfig:
        values: dict[str, Any] = {}
        seen: dict[str, int] = {}
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line[0] in "#!":
                continue
            key, value = _split(line)
            where = f"{source}:{number}"
            if key not in SPEC:
                raise ConfigError(f"{where}: unknown property {key!r}")
            if key in seen:
                raise ConfigError(f"{where}: property {key!r} already set on line {seen[key]}")
            attribute, parser, _ = SPEC[key]
            try:
                values[attribute] = parser(value)
            except ValueError as exc:
                expected = parser.__doc__ or "a valid value"
                raise ConfigError(
                    f"{where}: {key}={value!r} is malformed: expected {expected.strip()} ({exc})"
                ) from exc
            seen[key] = number
        for key in REQUIRED:
            if key not in seen:
                raise ConfigError(f"{source}: required property {key!r} is missing")
        config = cls(**values, source=source)
        config._check(seen)
        return config

    def _check(self, seen: dict[str, int]) -> None:
        names = {listener.name for listener in self.listeners}
        if self.control_plane_listener_name.upper() not in names:
            raise ConfigError(
                f"{self.source}: listeners must include the control plane listener "
                f"{self.control_plane_listener_name!r} (e.g. CONTROLLER://127.0.0.1:9093)"
            )
        if not names - {self.control_plane_listener_name.upper()}:
            raise ConfigError(
                f"{self.source}: listeners need a client listener besides the control plane"
            )
        if self.log_dirs is None and self.log_dir is None:
            raise ConfigError(f"{self.source}: one of log.dirs or log.dir is required")

    @property
    def data_dirs(self) -> list[Path]:
        return [Path(p) for p in (self.log_dirs or self.log_dir or ())]

    @property
    def control_listener(self) -> Listener:
        name = self.control_plane_listener_name.upper()
        return next(item for item in self.listeners if item.name == name)

    @property
    def client_listener(self) -> Listener:
        name = self.control_plane_listener_name.upper()
        return next(item for item in self.listeners if item.name != name)

    def advertised(self, listener: Listener) -> Listener:
        """The advertised address of `listener` (itself unless advertised.listeners says)."""
        for item in self.advertised_listeners or ():
            if item.name == listener.name:
                return item
        return listener

    @property
    def flush_ms(self) -> int | None:
        """Kafka's log.flush.interval.ms, which defaults to log.flush.scheduler.interval.ms
        (None: never)."""
        if self.log_flush_interval_ms is not None:
            return self.log_flush_interval_ms
        return self.log_flush_scheduler_interval_ms

    @property
    def retention_ms(self) -> int:
        if self.log_retention_ms is not None:
            return self.log_retention_ms
        return -1 if self.log_retention_hours < 0 else self.log_retention_hours * 3600 * 1000


def _split(line: str) -> tuple[str, str]:
    """Java-properties style: key, then '=' or ':' or whitespace, then the value."""
    match = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
    if match:
        return match.group(1), match.group(2).strip()
    return line, ""
