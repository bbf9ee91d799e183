"""Subscribe-mode generators (the groups history contract): pure values, as in
`workloads.core.generator`.

Client thread t is a member of group g{t mod groups}; every op of a thread's process
carries that group (`group` field). `GroupOps` wraps the queue ops: a process's first op
is `subscribe` ({"group": g}); in `after-process` mode every ok poll that returned records
is followed, before that process's next op, by a `commit` of the next offsets of the keys
it returned (value {"k": last offset + 1}); commits come first, even after the wrapped
generator is exhausted. `GroupCrash` crashes by `close` (leave the group) or `abandon`
(stop heartbeating: the consumer child is killed).

The final phase (`final_generator`): (1) every thread polls in its group (`"final":
true`, committing as above) until each has had `idle_polls` empty polls in a row, over
at least the rebalance timeout (`rebalance_timeout_ms`: twice the session timeout, at
least 10 s) and 3 s (a member abandoned just before the final phase keeps its keys until
its session times out, and a classic rebalance waits up to the rebalance timeout for
members that never rejoin, its new members meanwhile assigned nothing); (2)
each member closes (`crash` "close"; auto-commit mode commits on close); (3) one
`committed` op per group reads its offsets through a client of no group; (4) the
assign-mode drain from the beginning (`workloads.core.final.Drain`), which first crashes
every process, so the final reads belong to no group.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from workloads.core import generator as gen
from workloads.core.final import Drain, offsets_seen
from workloads.groups.consumer import rebalance_timeout_ms

__all__ = ["CRASH_MODES", "FinalPolls", "GroupCrash", "GroupOps", "WithGroup",
           "committed_reads", "final_generator", "group_name", "group_names", "group_of"]

CRASH_MODES = ("close", "abandon")
REBALANCE_SLACK_NS = 3_000_000_000


def group_name(index: int) -> str:
    return f"g{index}"


def group_names(groups: int) -> list[str]:
    return [group_name(index) for index in range(groups)]


def group_of(ctx: gen.Context, process: Any, groups: int) -> str:
    """The group of a client process: its thread's, g{thread mod groups}."""
    thread = ctx.thread_of(process)
    if not isinstance(thread, int):
        raise ValueError(f"process {process!r} is not a client process")
    return group_name(thread % groups)


def _for(ctx: gen.Context, process: Any, groups: int, item: Mapping[str, Any]
         ) -> dict[str, Any]:
    """`item` as an op of `process` now, in its group."""
    return {**item, "type": "invoke", "time": ctx.time, "process": process,
            "group": group_of(ctx, process, groups)}


@dataclass(frozen=True)
class GroupOps:
    """Subscribe first, commit after processing, the group on every op (module docstring)."""

    inner: Any
    groups: int
    commit: str
    subscribed: frozenset = frozenset()
    commits: Mapping[Any, Mapping[str, int]] = field(default_factory=dict)

    def op(self, test: Any, ctx: gen.Context) -> tuple[dict, Any] | Any:
        free = ctx.free_threads()
        for thread in free:
            process = ctx.process(thread)
            if process in self.commits:
                item = {"f": "commit", "value": dict(self.commits[process])}
                return _for(ctx, process, self.groups, item), self
        result = gen.op(self.inner, test, ctx)
        if result is None:
            waiting = self.commit == "after-process" and len(free) < len(ctx.threads)
            return gen.PENDING if waiting else None
        if result is gen.PENDING:
            return gen.PENDING
        for thread in free:
            process = ctx.process(thread)
            if process not in self.subscribed:
                group = group_of(ctx, process, self.groups)
                return _for(ctx, process, self.groups,
                            {"f": "subscribe", "value": {"group": group}}), self
        item, rest = result
        return ({**item, "group": group_of(ctx, item["process"], self.groups)},
                replace(self, inner=rest))

    def update(self, test: Any, ctx: gen.Context, event: Mapping[str, Any]) -> GroupOps:
        inner = gen.update(self.inner, test, ctx, event)
        process, f, kind = event.get("process"), event.get("f"), event.get("type")
        subscribed, commits = self.subscribed, self.commits
        if kind == "invoke" and f == "commit":
            commits = {p: c for p, c in commits.items() if p != process}
        elif kind == "info":
            subscribed = subscribed - {process}
            commits = {p: c for p, c in commits.items() if p != process}
        elif kind == "ok" and f == "subscribe":
            subscribed = subscribed | {process}
        elif kind == "ok" and f == "poll" and self.commit == "after-process":
            seen = offsets_seen(event)
            if seen:
                offsets = {**commits.get(process, {}),
                           **{str(key): offset + 1 for key, offset in seen.items()}}
                commits = {**commits, process: offsets}
        return replace(self, inner=inner, subscribed=subscribed, commits=commits)


@dataclass(frozen=True)
class GroupCrash:
    """Crash ops, each `close` or `abandon` at random."""

    seed: int

    def op(self, test: Any, ctx: gen.Context) -> tuple[dict, Any] | Any:
        rng = random.Random(self.seed)
        filled = gen.fill_in({"f": "crash", "value": rng.choice(CRASH_MODES)}, ctx)
        if filled is gen.PENDING:
            return gen.PENDING
        return filled, GroupCrash(rng.getrandbits(63))

    def update(self, test: Any, ctx: gen.Context, event: Mapping[str, Any]) -> GroupCrash:
        return self


@dataclass(frozen=True)
class FinalPolls:
    """Every thread polls (`"final": true`) until every thread's last `idle_polls` final polls
    were ok and empty, over at least `idle_ns`: a member abandoned just before holds its
    keys until its session times out, so the group is idle only once that has passed.
    The least idle free thread polls next; idle ones keep polling too (a rebalance needs
    every member to poll). `f` is the polls' f (the transfer workload's are `txn` ops)."""

    idle_polls: int
    idle_ns: int = 0
    f: str = "poll"
    idle: Mapping[Any, int] = field(default_factory=dict)
    idle_since: Mapping[Any, int] = field(default_factory=dict)

    def _idle(self, thread: Any, now: int) -> bool:
        return (self.idle.get(thread, 0) >= self.idle_polls
                and now - self.idle_since.get(thread, now) >= self.idle_ns)

    def op(self, test: Any, ctx: gen.Context) -> tuple[dict, Any] | Any:
        if all(self._idle(thread, ctx.time) for thread in ctx.threads):
            return None
        free = ctx.free_threads()
        if not free:
            return gen.PENDING
        thread = min(free, key=lambda t: self.idle.get(t, 0))
        return gen.fill_in({"f": self.f, "value": [["poll"]], "final": True,
                            "process": ctx.process(thread)}, ctx), self

    def update(self, test: Any, ctx: gen.Context, event: Mapping[str, Any]) -> FinalPolls:
        if event.get("f") != self.f or not event.get("final") or event.get("type") == "invoke":
            return self
        thread = ctx.thread_of(event.get("process"))
        if event.get("type") != "ok" or offsets_seen(event):
            return replace(self, idle={**self.idle, thread: 0})
        since = self.idle_since.get(thread, ctx.time) if self.idle.get(thread, 0) else ctx.time
        return replace(self, idle={**self.idle, thread: self.idle.get(thread, 0) + 1},
                       idle_since={**self.idle_since, thread: since})


@dataclass(frozen=True)
class WithGroup:
    """The ops of `inner`, each carrying its process's group."""

    inner: Any
    groups: int

    def op(self, test: Any, ctx: gen.Context) -> tuple[dict, Any] | Any:
        result = gen.op(self.inner, test, ctx)
        if result is None or result is gen.PENDING:
            return result
        item, rest = result
        return ({**item, "group": group_of(ctx, item["process"], self.groups)},
                WithGroup(rest, self.groups))

    def update(self, test: Any, ctx: gen.Context, event: Mapping[str, Any]) -> WithGroup:
        return WithGroup(gen.update(self.inner, test, ctx, event), self.groups)


def committed_reads(groups: int) -> list[dict[str, Any]]:
    return [{"f": "committed", "value": {"group": name}, "group": name}
            for name in group_names(groups)]


def final_generator(keys: list[Any], groups: int, commit: str, idle_polls: int,
                    session_timeout_ms: int) -> gen.Phases:
    """The subscribe-mode final phase (module docstring)."""
    idle_ns = rebalance_timeout_ms(session_timeout_ms) * 1_000_000 + REBALANCE_SLACK_NS
    return gen.phases(
        GroupOps(FinalPolls(idle_polls, idle_ns), groups, commit),
        WithGroup(gen.each_thread({"f": "crash", "value": "close"}), groups),
        committed_reads(groups),
        Drain(tuple(keys), idle_polls, crash_first=True, end_offsets=True))
