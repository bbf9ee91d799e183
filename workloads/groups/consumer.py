"""A consumer-group member in a child process of its own: the child's side.

Subscribe-mode consumers run one per child process, so that a nemesis can SIGSTOP and
SIGCONT one (a zombie member past its session timeout) and a crash can SIGKILL one (the
member stops heartbeating without leaving). The parent (`workloads.groups.child`) speaks
JSON lines over the child's stdin and stdout:

    first line  the member's configuration (`MemberConfig` as an object)
    request     {"id": n, "op": "subscribe" | "poll" | "commit" | "close",
                 "offsets": [[key, next], ...] (commit only)}
    reply       {"id": n, "result": ..., "events": [...]}
                or {"id": n, "error": "...", "events": [...]}

`events` are the rebalance callbacks that ran since the previous reply, in order:
{"time": time.monotonic_ns() when it ran (CLOCK_MONOTONIC is shared by all processes,
the parent shifts it onto the history's clock), "generation", "member", "assigned",
"revoked", "lost"}. The poll result is {"reads": [[key, [[offset, value], ...]], ...],
"errors": [...], "commit": ..., "unprocessed": ...}: with the `before-process` commit
mode the member commits the next offsets of what it fetched before answering, and when
that commit is not ok it answers the records as unprocessed (contract item 3). The
library (confluent-kafka or kafka-python) is a `Backend` with `subscribe`, `fetch`,
`commit`, `close`; each library's member module (`workloads.kafka.confluent_member`,
`workloads.kafka.kafka_python_member`) is the child's entry point: its `main` calls `run`
with its backend. The child ends after `close`, or when its stdin closes.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

__all__ = ["COMMIT_MODES", "Backend", "CommitResult", "EventLog", "MemberConfig", "Reads",
           "next_offsets", "poll_and_process", "rebalance_timeout_ms", "run", "serve"]

COMMIT_MODES = ("auto", "after-process", "before-process")

Reads = dict[Any, list[list[Any]]]


def rebalance_timeout_ms(session_timeout_ms: int) -> int:
    """The members' max.poll.interval.ms, which is also their rebalance timeout: how long
    a classic rebalance waits for known members to rejoin before it drops them."""
    return max(2 * session_timeout_ms, 10_000)


@dataclass(frozen=True, kw_only=True)
class MemberConfig:
    """What a member needs: where, the topic and group, which partition is which key, the
    commit mode and the group timings."""

    bootstrap_servers: tuple[str, ...]
    topic: str
    group: str
    partition_keys: Mapping[int, Any]
    commit: str = "after-process"
    session_timeout_ms: int = 6000
    poll_timeout: float = 0.5
    max_poll_records: int = 500
    op_timeout: float = 5.0
    group_protocol: str = "classic"

    def to_json(self) -> dict[str, Any]:
        return {"bootstrap_servers": list(self.bootstrap_servers),
                "topic": self.topic, "group": self.group,
                "partition_keys": [[p, k] for p, k in self.partition_keys.items()],
                "commit": self.commit, "session_timeout_ms": self.session_timeout_ms,
                "poll_timeout": self.poll_timeout, "max_poll_records": self.max_poll_records,
                "op_timeout": self.op_timeout, "group_protocol": self.group_protocol}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> MemberConfig:
        return cls(**{**raw, "bootstrap_servers": tuple(raw["bootstrap_servers"]),
                      "partition_keys": {p: k for p, k in raw["partition_keys"]}})

    @property
    def key_partitions(self) -> dict[Any, int]:
        return {key: partition for partition, key in self.partition_keys.items()}

    @property
    def max_poll_interval_ms(self) -> int:
        """Also the rebalance timeout: how long a rebalance waits for members to rejoin."""
        return rebalance_timeout_ms(self.session_timeout_ms)

    @property
    def heartbeat_interval_ms(self) -> int:
        return max(100, self.session_timeout_ms // 3)


@dataclass(frozen=True)
class CommitResult:
    """A commit's outcome: ok, fail (certainly not applied) or info; the error's name."""

    type: str
    error: str | None = None


@dataclass
class EventLog:
    """Rebalance callbacks as they run (callbacks may run on a library thread)."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, *, generation: int | None, member: str | None, assigned: Iterable[Any] = (),
               revoked: Iterable[Any] = (), lost: bool = False) -> None:
        """One callback; a callback of no partitions (a member assigned nothing, revoking
        nothing) changes no ownership and is left out, as the contract's entries name keys."""
        assigned, revoked = sorted(assigned), sorted(revoked)
        if not assigned and not revoked:
            return
        entry = {"time": time.monotonic_ns(), "generation": generation, "member": member or None,
                 "assigned": assigned, "revoked": revoked, "lost": lost}
        with self.lock:
            self.entries.append(entry)

    def take(self) -> list[dict[str, Any]]:
        with self.lock:
            taken, self.entries = self.entries, []
        return taken


class Backend(Protocol):
    events: EventLog

    def subscribe(self) -> None: ...
    def fetch(self) -> tuple[Reads, list[str]]: ...
    def commit(self, offsets: Mapping[Any, int]) -> CommitResult: ...
    def close(self) -> None: ...


def next_offsets(reads: Mapping[Any, list[list[Any]]]) -> dict[Any, int]:
    """key -> the offset after the last record read of it."""
    return {key: max(offset for offset, _ in pairs) + 1 for key, pairs in reads.items() if pairs}


def poll_and_process(backend: Backend, commit_mode: str) -> dict[str, Any]:
    """One poll; in before-process mode, commit what it fetched first (and drop the records
    when that commit is not ok)."""
    reads, errors = backend.fetch()
    result: dict[str, Any] = {"reads": [[key, pairs] for key, pairs in reads.items()],
                              "errors": errors}
    if commit_mode != "before-process" or not reads:
        return result
    offsets = next_offsets(reads)
    commit = backend.commit(offsets)
    result["commit"] = {"offsets": [[key, n] for key, n in offsets.items()], "type": commit.type,
                        "time": time.monotonic_ns(), "error": commit.error}
    if commit.type != "ok":
        result["reads"] = []
        result["unprocessed"] = [[key, [offset for offset, _ in pairs]]
                                 for key, pairs in reads.items()]
    return result


def handle(backend: Backend, config: MemberConfig, request: Mapping[str, Any]) -> Any:
    op = request["op"]
    if op == "subscribe":
        backend.subscribe()
        return None
    if op == "poll":
        return poll_and_process(backend, config.commit)
    if op == "commit":
        commit = backend.commit({key: n for key, n in request["offsets"]})
        return {"type": commit.type, "error": commit.error}
    if op == "close":
        backend.close()
        return None
    raise ValueError(f"unknown request {op!r}")


def serve(backend: Backend, config: MemberConfig, requests: IO[str], replies: IO[str]
          ) -> None:
    """Answer requests until `close` or the end of `requests`."""
    for line in requests:
        request = json.loads(line)
        reply: dict[str, Any] = {"id": request["id"]}
        try:
            reply["result"] = handle(backend, config, request)
        except Exception as error:
            reply["error"] = f"{type(error).__name__}: {error}"
        reply["events"] = backend.events.take()
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
        if request["op"] == "close":
            return


def run(open_backend: Callable[[MemberConfig], Backend]) -> None:
    """A child's life: read the configuration, serve the parent with the backend
    `open_backend` makes of it, then exit at once (library threads must not keep a member
    alive). Each library's member module calls it from its `main`."""
    config = MemberConfig.from_json(json.loads(sys.stdin.readline()))
    serve(open_backend(config), config, sys.stdin, sys.stdout)
    sys.stdout.flush()
    os._exit(0)
