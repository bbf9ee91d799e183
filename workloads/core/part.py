"""The `workload` part of a test: a client factory, generators, and the checkers it needs.

A registered workload (`workloads.registry.WORKLOADS`) is a `WorkloadKind`: its options
dataclass (fields with `help` are the user's; see `harness.options`), `build(options,
context) -> Workload` once the db is up, and the names of the checkers it needs (by
default, and for given options: `checkers_for`).

A built workload also tells a nemesis what it may act on: its `topic`, its consumer
`groups()` and `consumer_pids()`, the live consumer child processes (subscribe mode; a
`pause-consumers` nemesis SIGSTOPs and SIGCONTs them), its producers'
`transactional_ids()` (their coordinators are the coordinator faults' targets too), and
`stalls`, where the next committing transaction of a producer in this process takes the
stall that makes it a zombie (the `stall-producer` nemesis; none when the workload's
transactions run in child processes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from workloads.core.client import Client

__all__ = ["ChildProcesses", "ProducerStalls", "Workload", "WorkloadContext", "WorkloadKind"]


class ChildProcesses(Protocol):
    """The child processes a workload's clients run (its consumer group members)."""

    def pids(self) -> list[int]: ...


class ProducerStalls(Protocol):
    """Where a workload's transactional producers take stalls (`Zombies`)."""

    def stall_next(self, seconds: float, within: float) -> str | None: ...


@dataclass(frozen=True)
class Workload:
    """What the runner needs: a client factory value (open it per process), the client
    generator, the final generator (drain), each key's (topic, partition), the fields it
    adds to test.json (e.g. the producers' acks) and the per-op timeout; for nemeses, the
    topic, the consumer group ids, the registry of consumer child processes and the
    transactional ids."""

    client: Client
    generator: Any
    final_generator: Any
    key_partitions: Mapping[Any, tuple[str, int]]
    concurrency: int
    test_fields: Mapping[str, Any] = field(default_factory=dict)
    op_timeout: float = 5.0
    topic: str = "kchaos"
    group_ids: tuple[str, ...] = ()
    children: ChildProcesses | None = None
    txn_ids: tuple[str, ...] = ()
    stalls: ProducerStalls | None = None

    def groups(self) -> list[str]:
        """The consumer group ids (none in assign mode)."""
        return list(self.group_ids)

    def transactional_ids(self) -> list[str]:
        """The producers' transactional ids (none without transactions)."""
        return list(self.txn_ids)

    def consumer_pids(self) -> list[int]:
        """The pids of the live consumer child processes (none in assign mode)."""
        return self.children.pids() if self.children is not None else []


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
    checkers_of: Callable[[Any], tuple[str, ...]] | None = None

    def checkers_for(self, options: Any) -> tuple[str, ...]:
        """The checkers the workload needs with `options` (subscribe mode adds groups)."""
        return self.checkers_of(options) if self.checkers_of is not None else self.checkers
