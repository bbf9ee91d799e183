"""Pure, seeded generators of operations, after Jepsen's `generator.clj`.

A generator is a value. `op(gen, test, ctx)` returns `(op, next_gen)`, `PENDING`
(nothing now; ask again after a completion or a little later) or None (exhausted);
`update(gen, test, ctx, event)` returns the generator after seeing an invocation or
a completion. Nothing mutates, so the same generator and contexts give the same ops.

Plain values are generators too: a dict is one op; a function `f(test, ctx)` is an
endless source of ops (it returns a dict, or None when done); a list or tuple runs its
generators one after another. Ops are dicts with Jepsen's fields; `op` fills in
`type` ("invoke"), `time` (ns since the test started: when to invoke, never earlier
than `ctx.time`) and `process` (a free thread's current process; PENDING if none).

Threads are client thread numbers 0..n-1 and "nemesis". A client process that
completes with `info` never returns: its thread continues as process + n.

The queue workload's final phase (heal, recover, drain) is in `workloads.core.final`.

Random choices draw from `random.Random(seed)` and hand a fresh seed to the next
generator, so a schedule is a function of its seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "NEMESIS",
    "PENDING",
    "Context",
    "any_of",
    "clients",
    "delay",
    "each_thread",
    "fill_in",
    "limit",
    "map_ops",
    "mix",
    "nemesis",
    "once",
    "op",
    "phases",
    "repeat",
    "sleep",
    "stagger",
    "synchronize",
    "time_limit",
    "update",
]

NEMESIS = "nemesis"
NS_PER_SECOND = 1_000_000_000
Thread = int | str
Process = int | str


class _Pending:
    def __repr__(self) -> str:
        return "PENDING"


PENDING = _Pending()


# --- context ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Context:
    """What a generator may know: the time, which threads it may use, which are free,
    and each thread's current process. `clients` is the number of client threads."""

    time: int
    threads: tuple[Thread, ...]
    free: frozenset[Thread]
    processes: Mapping[Thread, Process]
    clients: int

    @classmethod
    def initial(cls, concurrency: int, *, with_nemesis: bool = True, time: int = 0) -> Context:
        threads: tuple[Thread, ...] = tuple(range(concurrency))
        if with_nemesis:
            threads += (NEMESIS,)
        return cls(time, threads, frozenset(threads), {t: t for t in threads}, concurrency)

    def free_threads(self) -> list[Thread]:
        return [t for t in self.threads if t in self.free]

    def all_free(self) -> bool:
        return all(t in self.free for t in self.threads)

    def process(self, thread: Thread) -> Process:
        return self.processes[thread]

    def thread_of(self, process: Process) -> Thread | None:
        """The thread that runs (or ran) `process`, if this view can see it."""
        if process == NEMESIS:
            thread: Thread = NEMESIS
        elif isinstance(process, int) and self.clients:
            thread = process % self.clients
        else:
            return None
        return thread if thread in self.threads else None

    def restrict(self, keep: Callable[[Thread], bool]) -> Context:
        threads = tuple(t for t in self.threads if keep(t))
        return replace(self, threads=threads, free=self.free & frozenset(threads))

    def at(self, time: int) -> Context:
        return replace(self, time=time)

    def busy(self, thread: Thread) -> Context:
        return replace(self, free=self.free - {thread})

    def release(self, thread: Thread, *, crashed: bool = False) -> Context:
        """The thread is free again; after a crashed (info) client op it gets a new process."""
        processes = self.processes
        if crashed and thread != NEMESIS:
            processes = {**processes, thread: processes[thread] + self.clients}
        return replace(self, free=self.free | {thread}, processes=processes)


# --- the generator protocol over plain values ---------------------------------------------

def fill_in(item: Mapping[str, Any], ctx: Context) -> dict[str, Any] | _Pending:
    """Complete an op with type, time and process, or PENDING if its thread is busy."""
    filled = dict(item)
    filled.setdefault("type", "invoke")
    filled["time"] = max(filled.get("time") or 0, ctx.time)
    if "process" in filled:
        thread = ctx.thread_of(filled["process"])
        if thread is None or thread not in ctx.free:
            return PENDING
        return filled
    free = ctx.free_threads()
    if not free:
        return PENDING
    filled["process"] = ctx.process(free[0])
    return filled


def op(gen: Any, test: Any, ctx: Context) -> tuple[dict[str, Any], Any] | _Pending | None:
    """The next op of any generator value and the generator after it."""
    if gen is None:
        return None
    if isinstance(gen, Mapping):
        filled = fill_in(gen, ctx)
        return PENDING if filled is PENDING else (filled, None)
    if isinstance(gen, list | tuple):
        for position, first in enumerate(gen):
            result = op(first, test, ctx)
            if result is None:
                continue
            if result is PENDING:
                return PENDING
            item, rest = result
            return item, (rest, *gen[position + 1:])
        return None
    if hasattr(gen, "op"):
        return gen.op(test, ctx)
    if callable(gen):
        item = gen(test, ctx)
        if item is None:
            return None
        filled = fill_in(item, ctx)
        return PENDING if filled is PENDING else (filled, gen)
    raise TypeError(f"not a generator: {gen!r}")


def update(gen: Any, test: Any, ctx: Context, event: Mapping[str, Any]) -> Any:
    """The generator after `event` (an invocation or a completion)."""
    if gen is None or isinstance(gen, Mapping):
        return gen
    if hasattr(gen, "update"):
        return gen.update(test, ctx, event)
    if isinstance(gen, list | tuple) and gen:
        return (update(gen[0], test, ctx, event), *gen[1:])
    return gen


def _soonest(results: Iterable[tuple[int, Any]]) -> tuple[int, tuple[dict, Any]] | _Pending | None:
    """Among (position, op result) pairs: the op with the earliest time, else PENDING, else None."""
    best = None
    pending = False
    for position, result in results:
        if result is PENDING:
            pending = True
        elif result is not None and (best is None or result[0]["time"] < best[1][0]["time"]):
            best = (position, result)
    if best is not None:
        return best
    return PENDING if pending else None


# --- combinators ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Mix:
    gens: tuple[Any, ...]
    weights: tuple[float, ...]
    seed: int

    def op(self, test: Any, ctx: Context) -> tuple[dict, Any] | _Pending | None:
        gens, weights, seed = list(self.gens), list(self.weights), self.seed
        while gens:
            rng = random.Random(seed)
            chosen = rng.choices(range(len(gens)), weights)[0]
            result = op(gens[chosen], test, ctx)
            if result is None:
                del gens[chosen], weights[chosen]
                seed = rng.getrandbits(63)
                continue
            if result is PENDING:
                return PENDING
            item, rest = result
            gens[chosen] = rest
            return item, Mix(tuple(gens), tuple(weights), rng.getrandbits(63))
        return None

    def update(self, test: Any, ctx: Context, event: Mapping[str, Any]) -> Mix:
        return replace(self, gens=tuple(update(g, test, ctx, event) for g in self.gens))


def mix(gens: Sequence[Any], seed: int, weights: Sequence[float] | None = None) -> Mix:
    """Each op from a generator chosen at random (by `weights`); exhausted ones drop out."""
    weights = tuple(weights) if weights is not None else (1.0,) * len(gens)
    if len(weights) != len(gens):
        raise ValueError(f"{len(gens)} generators but {len(weights)} weights")
    return Mix(tuple(gens), weights, seed)


@dataclass(frozen=True)
class Stagger:
    gen: Any
    mean_ns: int
    seed: int
    random_gaps: bool = True
    next_time: int | None = None

    def op(self, test: Any, ctx: Context) -> tuple[dict, Any] | _Pending | None:
        result = op(self.gen, test, ctx)
        if result is None or result is PENDING:
            return result
        item, rest = result
        due = ctx.time if self.next_time is None else self.next_time
        item = {**item, "time": max(item["time"], due)}
        rng = random.Random(self.seed)
        gap = int(rng.uniform(0, 2 * self.mean_ns)) if self.random_gaps else self.mean_ns
        return item, replace(self, gen=rest, seed=rng.getrandbits(63),
                             next_time=item["time"] + gap)

    def update(self, test: Any, ctx: Context, event: Mapping[str, Any]) -> Stagger:
        return replace(self, gen=update(self.gen, test, ctx, event))


def stagger(seconds: float, gen: Any, seed: int) -> Stagger:
    """Ops spaced by uniform random gaps in [0, 2 * seconds): 1/seconds ops/s in total."""
    return Stagger(gen, int(seconds * NS_PER_SECOND), seed)


def delay(seconds: float, gen: Any) -> Stagger:
    """Ops spaced exactly `seconds` apart."""
    return Stagger(gen, int(seconds * NS_PER_SECOND), 0, random_gaps=False)


@dataclass(frozen=True)
class TimeLimit:
    gen: Any
    limit_ns: int
    cutoff: int | None = None

    def op(self, test: Any, ctx: Context) -> tuple[dict, Any] | _Pending | None:
        cutoff = ctx.time + self.limit_ns if self.cutoff is None else self.cutoff
        if ctx.time >= cutoff:
            return None
        result = op(self.gen, test, ctx)
        if result is None or result is PENDING:
            return result
        item, rest = result
        if item["time"] >= cutoff:
            return None
        return item, TimeLimit(rest, self.limit_ns, cutoff)

    def update(self, test: Any, ctx: Context, event: Mapping[str, Any]) -> TimeLimit:
        return replace(self, gen=update(self.gen, test, ctx, event))


def time_limit(seconds: float, gen: Any) -> TimeLimit:
    """Ops of `gen` until `seconds` after this generator is first asked."""
    return TimeLimit(gen, int(seconds * NS_PER_SECOND))


@dataclass(frozen=True)
class Limit:
    gen: Any
    remaining: int

    def op(self, test: Any, ctx: Context) -> tuple[dict, Any] | _Pending | None:
        if self.remaining <= 0:
            return None
        result = op(self.gen, test, ctx)
        if result is None or result is PENDING:
            return result
        item, rest = result
        return item, Limit(rest, self.remaining - 1)

    def update(self, test: Any, ctx: Context, event: Mapping[str, Any]) -> Limit:
        return replace(self, gen=update(self.gen, test, ctx, event))


def limit(count: int, gen: Any) -> Limit:
    """At most `count` ops of `gen`."""
    return Limit(gen, count)


def once(gen: Any) -> Limit:
    """Only the first op of `gen`."""
    return Limit(gen, 1)


@dataclass(frozen=True)
class Repeat:
    gen: Any
    remaining: int | None

    def op(self, test: Any, ctx: Context) -> tuple[dict, Any] | _Pending | None:
        if self.remaining is not None and self.remaining <= 0:
            return None
        result = op(self.gen, test, ctx)
        if result is None or result is PENDING:
            return result
        left = None if self.remaining is None else self.remaining - 1
        return result[0], Repeat(self.gen, left)

    def update(self, test: Any, ctx: Context, event: Mapping[str, Any]) -> Repeat:
        return self


def repeat(gen: Any, times: int | None = None) -> Repeat:
    """The first op of `gen` again and again (`times` times, or forever); `gen` is frozen."""
    return Repeat(gen, times)


@dataclass(frozen=True)
class MapOps:
    fn: Callable[[dict[str, Any]], dict[str, Any]]
    gen: Any

    def op(self, test: Any, ctx: Context) -> tuple[dict, Any] | _Pending | None:
        result = op(self.gen, test, ctx)
        if result is None or result is PENDING:
            return result
        item, rest = result
        return self.fn(item), MapOps(self.fn, rest)

    def update(self, test: Any, ctx: Context, event: Mapping[str, Any]) -> MapOps:
        return replace(self, gen=update(self.gen, test, ctx, event))


def map_ops(fn: Callable[[dict[str, Any]], dict[str, Any]], gen: Any) -> MapOps:
    return MapOps(fn, gen)


@dataclass(frozen=True)
class Synchronize:
    gen: Any
    started: bool = False

    def op(self, test: Any, ctx: Context) -> tuple[dict, Any] | _Pending | None:
        if not self.started and not ctx.all_free():
            return PENDING
        result = op(self.gen, test, ctx)
        if result is None or result is PENDING:
            return result
        item, rest = result
        return item, Synchronize(rest, True)

    def update(self, test: Any, ctx: Context, event: Mapping[str, Any]) -> Synchronize:
        return replace(self, gen=update(self.gen, test, ctx, event))


def synchronize(gen: Any) -> Synchronize:
    """Waits until every thread of the context is free before the first op of `gen`."""
    return Synchronize(gen)


@dataclass(frozen=True)
class Phases:
    """Each generator in turn, every one starting only once all threads are free.

    Every phase, current and still to come, sees every update, so a later phase can act
    on what earlier ones did (the final drain reads up to the highest offset any op saw).
    """

    gens: tuple[Any, ...]

    def op(self, test: Any, ctx: Context) -> tuple[dict, Any] | _Pending | None:
        gens = self.gens
        while gens:
            result = op(gens[0], test, ctx)
            if result is None:
                gens = gens[1:]
                continue
            if result is PENDING:
                return PENDING
            item, rest = result
            return item, Phases((rest, *gens[1:]))
        return None

    def update(self, test: Any, ctx: Context, event: Mapping[str, Any]) -> Phases:
        return Phases(tuple(update(g, test, ctx, event) for g in self.gens))


def phases(*gens: Any) -> Phases:
    return Phases(tuple(synchronize(g) for g in gens))


@dataclass(frozen=True)
class AnyOf:
    gens: tuple[Any, ...]

    def op(self, test: Any, ctx: Context) -> tuple[dict, Any] | _Pending | None:
        best = _soonest((i, op(g, test, ctx)) for i, g in enumerate(self.gens))
        if best is None or best is PENDING:
            return best
        position, (item, rest) = best
        gens = list(self.gens)
        gens[position] = rest
        return item, AnyOf(tuple(gens))

    def update(self, test: Any, ctx: Context, event: Mapping[str, Any]) -> AnyOf:
        return AnyOf(tuple(update(g, test, ctx, event) for g in self.gens))


def any_of(*gens: Any) -> AnyOf:
    """Ops from all `gens` at once, the soonest first; done when all are."""
    return AnyOf(tuple(gens))


@dataclass(frozen=True)
class OnThreads:
    keep: Callable[[Thread], bool]
    gen: Any

    def op(self, test: Any, ctx: Context) -> tuple[dict, Any] | _Pending | None:
        result = op(self.gen, test, ctx.restrict(self.keep))
        if result is None or result is PENDING:
            return result
        item, rest = result
        return item, OnThreads(self.keep, rest)

    def update(self, test: Any, ctx: Context, event: Mapping[str, Any]) -> OnThreads:
        view = ctx.restrict(self.keep)
        if view.thread_of(event.get("process")) is None:
            return self
        return OnThreads(self.keep, update(self.gen, test, view, event))


def _is_client(thread: Thread) -> bool:
    return thread != NEMESIS


def _is_nemesis(thread: Thread) -> bool:
    return thread == NEMESIS


def clients(gen: Any) -> OnThreads:
    """`gen` sees only the client threads."""
    return OnThreads(_is_client, gen)


def nemesis(gen: Any) -> OnThreads:
    """`gen` sees only the nemesis thread."""
    return OnThreads(_is_nemesis, gen)


@dataclass(frozen=True)
class EachThread:
    fresh: Any
    gens: Mapping[Thread, Any] = field(default_factory=dict)

    def op(self, test: Any, ctx: Context) -> tuple[dict, Any] | _Pending | None:
        results = []
        for thread in ctx.threads:
            gen = self.gens.get(thread, self.fresh)
            results.append((thread, op(gen, test, ctx.restrict(lambda t, me=thread: t == me))))
        best = _soonest(results)
        if best is None or best is PENDING:
            return best
        thread, (item, rest) = best
        return item, EachThread(self.fresh, {**self.gens, thread: rest})

    def update(self, test: Any, ctx: Context, event: Mapping[str, Any]) -> EachThread:
        thread = ctx.thread_of(event.get("process"))
        if thread is None:
            return self
        view = ctx.restrict(lambda t: t == thread)
        gen = update(self.gens.get(thread, self.fresh), test, view, event)
        return EachThread(self.fresh, {**self.gens, thread: gen})


def each_thread(gen: Any) -> EachThread:
    """Every thread runs its own copy of `gen`."""
    return EachThread(gen)


def sleep(seconds: float, mark: str = "sleep") -> dict[str, Any]:
    """One thread sleeps `seconds`; the interpreter records nothing for it in the history,
    but remembers the `mark` of each such op it ran (`Interpreter.marks`): a phase that
    reached its end says so."""
    return {"type": "sleep", "f": mark, "value": seconds}
