"""A test's configuration: defaults, then a TOML file, then command-line options.

`TestConfig` holds every knob of `kchaos run`. `load_config(toml_path, overrides)`
merges the three layers and validates, raising `ConfigError` that names the source
(file or option), the key and what is expected.
"""

from __future__ import annotations

import random
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from harness.db.cluster import BACKENDS, backend_options

__all__ = ["ConfigError", "TestConfig", "load_config"]

SAFE_BROKER_CONFIG = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
ACKS = ("0", "1", "all")
CLIENTS = ("confluent", "kafka-python")


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message says where and what to do."""


@dataclass(frozen=True)
class TestConfig:
    """Every knob of a chaos test; field names are the TOML keys (dashes also accepted)."""

    __test__ = False  # not a pytest test class, despite its name

    name: str = "queue"
    backend: str = "local"
    inventory: str | None = None
    vagrant_dir: str | None = None
    accept_new_host_keys: bool = False
    install: bool = True
    docker_host: str | None = None
    docker_image: str | None = None
    nodes: int = 5
    zookeepers: int = 3
    colocate: bool = False
    time_limit: float = 60.0
    nemesis: str = "partition,kill,pause"
    nemesis_interval: float = 10.0
    scenario: str | None = None
    acks: str = "all"
    client: str = "confluent"
    idempotence: bool = False
    retries: int | None = None
    linger_ms: int = 0
    keys: int = 4
    concurrency: int = 6
    rate: float = 100.0
    op_timeout: float = 5.0
    recovery_seconds: float = 10.0
    final_read_seconds: float = 60.0
    broker_config: Mapping[str, str] = field(default_factory=lambda: dict(SAFE_BROKER_CONFIG))
    seed: int | None = None
    store: str = "store"
    spark_master: str = "local[*]"

    def cluster_options(self) -> dict[str, Any]:
        """The backend's options for the cluster (ValueError when its hosts are missing)."""
        return backend_options(self.backend, inventory=self.inventory,
                               vagrant_dir=self.vagrant_dir,
                               accept_new_host_keys=self.accept_new_host_keys,
                               install=self.install, docker_host=self.docker_host,
                               docker_image=self.docker_image)

    @property
    def replication_factor(self) -> int:
        return min(3, self.nodes)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["broker_config"] = dict(self.broker_config)
        return data

    def with_seed(self) -> TestConfig:
        """This config with a seed chosen now when none was given."""
        return self if self.seed is not None else replace(self, seed=random.SystemRandom()
                                                          .randrange(1 << 31))


_FIELDS = {f.name: f for f in fields(TestConfig)}


def load_config(toml_path: Path | None = None,
                overrides: Mapping[str, Any] | None = None) -> TestConfig:
    """Defaults, then the TOML file, then `overrides` (command-line values that were given)."""
    values: dict[str, Any] = {}
    broker_config = dict(SAFE_BROKER_CONFIG)
    if toml_path is not None:
        table = _read_toml(toml_path)
        for key, value in table.items():
            name = key.replace("-", "_")
            if name not in _FIELDS:
                raise ConfigError(f"{toml_path}: unknown key {key!r}; known keys: "
                                  f"{', '.join(sorted(_FIELDS))}")
            if name == "broker_config":
                if not isinstance(value, Mapping):
                    raise ConfigError(f"{toml_path}: broker_config must be a table of "
                                      f"Kafka property = value")
                broker_config.update({str(k): _property(v) for k, v in value.items()})
            else:
                values[name] = _typed(name, value, str(toml_path))
    for name, value in (overrides or {}).items():
        if value is None:
            continue
        if name == "broker_config":
            broker_config.update(value)
        else:
            values[name] = _typed(name, value, f"--{name.replace('_', '-')}")
    config = TestConfig(**values, broker_config=broker_config)
    _validate(config)
    return config


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror}") from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from error


def _property(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _typed(name: str, value: Any, source: str) -> Any:
    kind = _FIELDS[name].type
    try:
        if kind == "bool" and isinstance(value, bool):
            return value
        if kind == "int":
            return int(value)
        if kind in ("float",):
            return float(value)
        if kind == "int | None":
            return None if value is None else int(value)
        if kind in ("str", "str | None"):
            return str(value)
    except (TypeError, ValueError):
        pass
    raise ConfigError(f"{source}: {name} must be {kind.replace(' | None', '')}, got {value!r}")


def _validate(config: TestConfig) -> None:
    def need(condition: bool, message: str) -> None:
        if not condition:
            raise ConfigError(message)

    need(config.backend in BACKENDS, f"backend must be one of {', '.join(BACKENDS)}")
    try:
        config.cluster_options()
    except ValueError as error:
        raise ConfigError(str(error)) from error
    need(1 <= config.nodes <= 99, "nodes must be 1 to 99")
    need(1 <= config.zookeepers <= 99, "zookeepers must be 1 to 99")
    need(not config.colocate or config.zookeepers <= config.nodes,
         "colocated ZooKeepers need at least as many nodes")
    need(config.time_limit > 0, "time_limit must be > 0 seconds")
    need(config.nemesis_interval > 0, "nemesis_interval must be > 0 seconds")
    need(config.acks in ACKS, f"acks must be one of {', '.join(ACKS)}")
    need(config.client in CLIENTS, f"client must be one of {', '.join(CLIENTS)}")
    need(config.keys >= 1 and config.concurrency >= 1, "keys and concurrency must be >= 1")
    need((config.retries is None or config.retries >= 0) and config.linger_ms >= 0,
         "retries and linger_ms must be >= 0")
    need(config.rate > 0 and config.op_timeout > 0, "rate and op_timeout must be > 0")
    need(config.recovery_seconds >= 0 and config.final_read_seconds > 0,
         "recovery_seconds must be >= 0 and final_read_seconds > 0")
    need(bool(config.name) and "/" not in config.name and not config.name.startswith("."),
         f"name must be a plain folder name, got {config.name!r}")
