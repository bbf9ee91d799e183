"""The `workload` part of a test: a client factory, generators, and the checkers it needs.

A registered workload (`workloads.registry.WORKLOADS`) is a `WorkloadKind`: its options
dataclass (fields with `help` are the user's; see `harness.options`), `build(options,
context) -> Workload` once the db is up, and the names of the checkers it needs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from workloads.client import Client

__all__ = ["Workload", "WorkloadContext", "WorkloadKind"]


@dataclass(frozen=True)
class Workload:
    """What the runner needs: a client factory value (open it per process), the client
    generator, the final generator (drain), each key's (topic, partition), the fields it
    adds to test.json (e.g. the producers' acks) and the per-op timeout."""

    client: Client
    generator: Any
    final_generator: Any
    key_partitions: Mapping[Any, tuple[str, int]]
    concurrency: int
    test_fields: Mapping[str, Any] = field(default_factory=dict)
    op_timeout: float = 5.0


@dataclass(frozen=True)
class WorkloadContext:
    """What a workload is built for: the db's bootstrap servers, its broker count, the seed."""

    bootstrap_servers: tuple[str, ...]
    brokers: int
    seed: int


@dataclass(frozen=True)
class WorkloadKind:
    """A registered workload: options dataclass, builder, and the checkers it needs."""

    options: type
    build: Callable[[Any, WorkloadContext], Workload]
    checkers: tuple[str, ...]
