"""Jepsen's final phase for the queue workload: heal, wait for recovery, drain.

`Drain` is a pure generator (see `workloads.core.generator`) that learns, from updates,
the highest offset any op saw for each key, and makes every client thread reopen
its client, assign every key from the beginning and poll until caught up; with
`end_offsets`, each thread then asks the broker for every key's end offset, so the
checkers can tell a log cut back under records read earlier (`end-offsets` ops).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from workloads.core.generator import (
    PENDING,
    Context,
    Phases,
    Process,
    Thread,
    _Pending,
    clients,
    nemesis,
    phases,
    sleep,
    time_limit,
)

__all__ = ["FINAL_READS_DONE", "Drain", "ReaderState", "drain", "final_phase", "offsets_seen"]

FINAL_READS_DONE = "final-reads-done"


def _key(key: Any) -> Any:
    if isinstance(key, str) and key.lstrip("-").isdigit():
        return int(key)
    return key


def offsets_seen(event: Mapping[str, Any]) -> dict[Any, int]:
    """The highest offset per key in an ok send or poll completion."""
    if event.get("type") != "ok" or event.get("f") not in ("send", "poll", "txn"):
        return {}
    seen: dict[Any, int] = {}

    def note(key: Any, offset: Any) -> None:
        if isinstance(offset, int) and not isinstance(offset, bool):
            key = _key(key)
            seen[key] = max(seen.get(key, -1), offset)

    for micro in event.get("value") or ():
        if micro[0] == "send" and isinstance(micro[2], list | tuple):
            note(micro[1], micro[2][0])
        elif micro[0] == "poll" and len(micro) > 1 and isinstance(micro[1], Mapping):
            for key, pairs in micro[1].items():
                for pair in pairs:
                    note(key, pair[0])
    return seen


@dataclass(frozen=True)
class ReaderState:
    """One thread's progress through the drain: crash, assign, poll until caught up."""

    stage: str
    process: Process | None = None
    reached: Mapping[Any, int] = field(default_factory=dict)
    idle: int = 0
    polls: int = 0


@dataclass(frozen=True)
class Drain:
    """Every client thread reopens its client, assigns every key from the beginning and
    polls until it has read up to the highest offset any op saw for each key (at least
    one poll; or after `idle_polls` polls in a row that read nothing); with
    `end_offsets`, it then asks once for every key's end offset (an `end-offsets` op,
    whatever its outcome the thread's last). It needs the updates of the whole test, so
    it must be part of the test's generator from the start (`phases` passes every update
    to the phases to come)."""

    keys: tuple[Any, ...]
    idle_polls: int = 10
    crash_first: bool = True
    end_offsets: bool = False
    targets: Mapping[Any, int] = field(default_factory=dict)
    readers: Mapping[Thread, ReaderState] = field(default_factory=dict)

    def _state(self, thread: Thread) -> ReaderState:
        return self.readers.get(thread, ReaderState("crash" if self.crash_first else "assign"))

    def caught_up(self, state: ReaderState) -> bool:
        """At least one poll, and every key read up to its highest known offset."""
        return state.polls > 0 and all(
            state.reached.get(k, -1) >= offset for k, offset in self.targets.items())

    def op(self, test: Any, ctx: Context) -> tuple[dict, Any] | _Pending | None:
        waiting = False
        for thread in ctx.threads:
            state = self._state(thread)
            if state.stage == "done":
                continue
            if thread not in ctx.free or state.stage in ("assigning", "ending"):
                waiting = True
                continue
            process = ctx.process(thread)
            if state.stage == "crash":
                item = {"f": "crash", "value": None}
                state = ReaderState("assign")
            elif state.stage == "assign":
                item = {"f": "assign", "value": list(self.keys), "seek_to_beginning": True}
                state = ReaderState("assigning", process)
            elif self.caught_up(state) or state.idle >= self.idle_polls:
                if not self.end_offsets:
                    readers = {**self.readers, thread: replace(state, stage="done")}
                    return replace(self, readers=readers).op(test, ctx)
                item = {"f": "end-offsets", "value": list(self.keys)}
                state = replace(state, stage="ending", process=process)
            else:
                item = {"f": "poll", "value": [["poll"]]}
            filled = {**item, "type": "invoke", "time": ctx.time, "process": process}
            return filled, replace(self, readers={**self.readers, thread: state})
        return PENDING if waiting else None

    def update(self, test: Any, ctx: Context, event: Mapping[str, Any]) -> Drain:
        seen = offsets_seen(event)
        targets = self.targets
        if seen:
            targets = {**targets, **{k: max(targets.get(k, -1), o) for k, o in seen.items()}}
        thread = ctx.thread_of(event.get("process"))
        state = self.readers.get(thread) if thread is not None else None
        if state is None or event.get("type") == "invoke" or state.process != event["process"]:
            return replace(self, targets=targets)
        if event.get("f") == "end-offsets":
            state = replace(state, stage="done")
        elif event.get("type") != "ok":
            state = ReaderState("assign")
        elif event.get("f") == "assign":
            state = replace(state, stage="poll")
        elif event.get("f") == "poll":
            reached = {**state.reached}
            for key, offset in seen.items():
                reached[key] = max(reached.get(key, -1), offset)
            state = replace(state, reached=reached, idle=0 if seen else state.idle + 1,
                            polls=state.polls + 1)
        return replace(self, targets=targets, readers={**self.readers, thread: state})


def drain(keys: Iterable[Any], idle_polls: int = 10, crash_first: bool = True,
          end_offsets: bool = False) -> Drain:
    return Drain(tuple(keys), idle_polls, crash_first, end_offsets)


def final_phase(nemesis_final: Any, client_final: Any, recovery_seconds: float = 5.0,
                client_seconds: float | None = 60.0) -> Phases:
    """Jepsen's final phase: the nemesis heals (`nemesis_final`), everyone waits
    `recovery_seconds`, then the clients run `client_final` (the drain), bounded by
    `client_seconds`. A drain that ran to its end, inside that bound, is followed by a
    `FINAL_READS_DONE` mark (`Interpreter.marks`); one the bound cut short is not."""
    client_gen: Any = phases(clients(client_final), nemesis(sleep(0, FINAL_READS_DONE)))
    if client_seconds is not None:
        client_gen = time_limit(client_seconds, client_gen)
    return phases(nemesis(nemesis_final), nemesis(sleep(recovery_seconds)), client_gen)
