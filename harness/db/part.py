"""The `db` part of a test: what the runner and the nemeses need of a system under test.

A registered db (`harness.db.registry.DBS`) is a `DBKind`: its options dataclass (see
`harness.options`) and `build(options, context) -> DB`. `DB.start(logs_dest)` brings the system up
on the test's nodes and returns a `RunningDB`, a context manager whose exit takes it down.
Extra powers (kill, pause, partition, find the controller, a leader or a coordinator, ...)
are the small protocols of `nemesis.capabilities`; `DB.offer()` says before the start
which of them the running db will have, so a fault it cannot serve is refused first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from harness.control.backends import BackendOptions
from nemesis.capabilities import Nodes, Offer

__all__ = ["DB", "DBContext", "DBKind", "RunningDB"]


class RunningDB(Nodes, Protocol):
    """A system under test that is up: its nodes (`Nodes`), and whatever else of
    `nemesis.capabilities` its `DB.offer` promised."""

    @property
    def prefix(self) -> str: ...
    def facts(self) -> dict[str, Any]: ...
    def processes(self) -> dict[str, Any]: ...
    def collect_logs(self, dest: Path) -> list[Path]: ...
    def __enter__(self) -> RunningDB: ...
    def __exit__(self, *exc: object) -> None: ...


class DB(Protocol):
    """A system under test, not yet started."""

    name: str

    def start(self, logs_dest: Path | None = None, timeout: float | None = None) -> RunningDB:
        """Up and healthy within `timeout` seconds (None: the db's own bound); on failure
        the node logs are copied to `logs_dest` first."""

    def offer(self) -> Offer:
        """The capabilities faults may use once it runs, and why it lacks others."""

    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class DBContext:
    """What a db is built for: the number of broker nodes and where nodes run."""

    nodes: int
    backend: BackendOptions


@dataclass(frozen=True)
class DBKind:
    """A registered db: its options dataclass and how to build it."""

    options: type
    build: Callable[[Any, DBContext], DB]
